use super::*;

use rusqlite::Connection;

fn db() -> Connection {
    let c = Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE mcp_servers (id TEXT PRIMARY KEY); INSERT INTO mcp_servers VALUES ('s1'), ('s2');")
        .unwrap();
    c.execute_batch(include_str!("../../../migrations/0008_call_log.sql")).unwrap();
    c
}

fn bind(s: &Statement) -> Vec<rusqlite::types::Value> {
    s.args
        .iter()
        .map(|a| match a {
            Arg::Text(t) => rusqlite::types::Value::Text(t.clone()),
            Arg::Int(n) => rusqlite::types::Value::Integer(*n),
        })
        .collect()
}

fn run(c: &Connection, plan: &[Statement]) {
    for s in plan {
        c.execute(&s.sql, rusqlite::params_from_iter(bind(s))).unwrap();
    }
}

fn rows(c: &Connection, s: &Statement) -> Vec<Value> {
    let mut stmt = c.prepare(&s.sql).unwrap();
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let mut out = Vec::new();
    let mut q = stmt.query(rusqlite::params_from_iter(bind(s))).unwrap();
    while let Some(r) = q.next().unwrap() {
        let mut m = Map::new();
        for (i, n) in names.iter().enumerate() {
            let v = match r.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(n) => json!(n),
                rusqlite::types::ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                other => panic!("{other:?}"),
            };
            m.insert(n.clone(), v);
        }
        out.push(Value::Object(m));
    }
    out
}

fn count(c: &Connection, server: &str) -> i64 {
    c.query_row("SELECT count(*) FROM call_log WHERE server_id = ?1", [server], |r| r.get(0)).unwrap()
}

fn entry(server: &str, at_ms: u64, tool: &str, caller: &str, status: Status) -> Entry {
    Entry {
        server_id: server.into(),
        at_ms,
        tool: tool.into(),
        caller_kind: CallerKind::Client,
        caller: caller.into(),
        status,
        duration_ms: 12,
        streamed: at_ms.is_multiple_of(2),
        error: (status != Status::Ok).then(|| "it failed".to_string()),
        arguments: None,
        result: None,
    }
}

fn q(pairs: &[(&str, &str)]) -> Query {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    parse_query(&pairs).unwrap()
}

#[test]
fn statuses_come_from_the_final_response() {
    let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}});
    assert_eq!(Status::of_response(&ok), (Status::Ok, None));
    let tool = json!({"result": {"content": [{"type": "text", "text": "bad input"}], "isError": true}});
    assert_eq!(Status::of_response(&tool), (Status::ToolError, Some("bad input".into())));
    let rpc = json!({"error": {"code": -32602, "message": "Invalid params"}});
    assert_eq!(Status::of_response(&rpc), (Status::Error, Some("Invalid params".into())));
    for s in Status::ALL {
        assert_eq!(Status::parse(s.as_str()), Some(s));
    }
    assert_eq!(Status::parse("OK"), None);
}

#[test]
fn credentials_are_redacted_by_name_and_by_shape_at_any_depth() {
    let args = json!({
        "text": "summarise this",
        "api_key": "anything at all",
        "nested": {"Authorization": "x", "items": ["fgk_abcdefghijklmnop", "plain words", 3]},
        "headers": [{"X-Session-Token": "t"}],
        "jwt": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl",
        "dify": "app-0123456789abcdefghijklmn",
        "bearer": "Bearer abcdefghijklmnop",
        "empty_token": null,
        "short": "sk-1",
        "count": 2,
    });
    let r = redact(&args);
    assert_eq!(r["text"], "summarise this");
    assert_eq!(r["api_key"], REDACTED);
    assert_eq!(r["nested"]["Authorization"], REDACTED);
    assert_eq!(r["nested"]["items"], json!([REDACTED, "plain words", 3]));
    // Inside text too (a result often quotes its input), the words around kept.
    let quoted = redact(&json!("{\"echo\": \"key fgk_abcdefghijklmnop, then Bearer 0123456789abcdef.\"} ok"));
    assert_eq!(quoted, json!(format!("{{\"echo\": \"key {REDACTED}, then Bearer {REDACTED}\"}} ok")));
    assert_eq!(redact(&json!("Bearer of good news")), json!("Bearer of good news"), "a short word after Bearer");
    assert_eq!(r["headers"][0]["X-Session-Token"], REDACTED);
    assert_eq!(r["jwt"], REDACTED);
    assert_eq!(r["dify"], REDACTED);
    assert_eq!(r["bearer"], format!("Bearer {REDACTED}"));
    assert_eq!(r["empty_token"], Value::Null, "nothing to hide");
    assert_eq!(r["short"], "sk-1", "too short to be a key");
    assert_eq!(r["count"], 2);
    let text = payload_text(&args);
    for secret in ["anything at all", "fgk_abc", "eyJhbGci", "app-0123", "abcdefghijklmnop"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // Long payloads are clipped; deep ones end redacted.
    let long = payload_text(&json!({"text": "x".repeat(10_000)}));
    assert_eq!(long.chars().count(), MAX_PAYLOAD_CHARS + 1);
    let mut deep = json!("leaf");
    for _ in 0..40 {
        deep = json!([deep]);
    }
    assert!(redact(&deep).to_string().contains(REDACTED));
    assert_eq!(result_text(&json!({"result": {"token": "t"}})).as_deref(), Some("{\"token\":\"[redacted]\"}"));
}

#[test]
fn memory_holds_at_most_the_last_calls_of_a_server_and_of_all() {
    let mut p = Pending::default();
    for i in 0..(PER_SERVER as u64 + 5) {
        p.push(entry("s1", i, "T", "c", Status::Ok));
    }
    p.push(entry("s2", 1, "T", "c", Status::Ok));
    let p = p.settled();
    assert_eq!(p.len(), PER_SERVER + 1);
    assert_eq!(p.dropped, 5);
    assert_eq!(p.entries.first().map(|e| e.at_ms), Some(5), "the oldest went first");
    let mut all = Pending::default();
    for i in 0..(MAX_PENDING + 3) {
        all.push(entry(&format!("s{}", i % 10), i as u64, "T", "c", Status::Ok));
    }
    let all = all.settled();
    assert_eq!(all.len(), MAX_PENDING);
    assert_eq!(all.dropped, 3);
    // Between flushes, never more than the slack past the bound waits.
    let mut busy = Pending::default();
    for i in 0..(3 * (MAX_PENDING + TRIM_SLACK)) {
        busy.push(entry("s1", i as u64, "T", "c", Status::Ok));
        assert!(busy.len() < MAX_PENDING + TRIM_SLACK, "{} entries wait", busy.len());
    }
    assert_eq!(busy.settled().len(), PER_SERVER);
}

/// What the bounds keep, applied at every push (one scan of everything waiting per call).
fn bounded_at_every_push(calls: &[Entry]) -> (Vec<u64>, u64) {
    let (mut kept, mut dropped): (Vec<Entry>, u64) = (Vec::new(), 0);
    for c in calls {
        if kept.iter().filter(|e| e.server_id == c.server_id).count() >= PER_SERVER {
            if let Some(i) = kept.iter().position(|e| e.server_id == c.server_id) {
                kept.remove(i);
                dropped += 1;
            }
        }
        if kept.len() >= MAX_PENDING {
            kept.remove(0);
            dropped += 1;
        }
        kept.push(c.clone());
    }
    (kept.iter().map(|e| e.at_ms).collect(), dropped)
}

#[test]
fn bounds_applied_in_passes_keep_what_bounds_applied_at_every_call_keep() {
    // Servers of very different rates, in an order no bound lines up with: some pass their
    // own bound often, the total passes its bound, quiet ones keep everything.
    let mut state = 0x2545_f491_u64;
    let calls: Vec<Entry> = (0..3 * MAX_PENDING + 777)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let server = match state % 100 {
                0..=54 => "busy",
                55..=79 => "steady",
                80..=97 => "mid",
                n => {
                    if n == 98 {
                        "rare-a"
                    } else {
                        "rare-b"
                    }
                }
            };
            entry(server, i as u64, "T", "c", Status::Ok)
        })
        .collect();
    for n in [PER_SERVER - 1, PER_SERVER + 1, MAX_PENDING + 1, MAX_PENDING + TRIM_SLACK + 3, calls.len()] {
        let mut p = Pending::default();
        for c in &calls[..n] {
            p.push(c.clone());
        }
        let p = p.settled();
        let got: Vec<u64> = p.entries.iter().map(|e| e.at_ms).collect();
        assert_eq!((got, p.dropped), bounded_at_every_push(&calls[..n]), "after {n} calls");
    }
}

#[test]
fn a_flush_inserts_every_call_keeps_the_last_thousand_and_skips_deleted_servers() {
    let c = db();
    let mut p = Pending::default();
    for i in 0..600u64 {
        p.push(entry("s1", 1_000 + i, "T", "c", Status::Ok));
    }
    p.push(entry("gone-server", 5, "T", "c", Status::Ok));
    let plan = p.flush_plan();
    assert_eq!(plan.len(), 2, "one insert and one trim for 600 small calls");
    run(&c, &plan);
    assert_eq!(count(&c, "s1"), 600);
    assert_eq!(count(&c, "gone-server"), 0);
    // A second flush of 600 more: the oldest 200 go.
    let mut p = Pending::default();
    for i in 600..1200u64 {
        let mut e = entry("s1", 1_000 + i, "T", "c", Status::ToolError);
        e.arguments = Some("x".repeat(MAX_PAYLOAD_CHARS));
        p.push(e);
    }
    let plan = p.flush_plan();
    assert!(plan.len() > 3, "large rows are split over several inserts: {}", plan.len());
    assert!(plan
        .iter()
        .all(|s| s.args.iter().all(|a| !matches!(a, Arg::Text(t) if t.len() > BYTES_PER_STATEMENT + 10_000))));
    run(&c, &plan);
    assert_eq!(count(&c, "s1"), PER_SERVER as i64);
    let oldest: i64 = c.query_row("SELECT min(at) FROM call_log", [], |r| r.get(0)).unwrap();
    assert_eq!(oldest, 1_200);
    assert!(Pending::default().flush_plan().is_empty());
}

#[test]
fn the_query_filters_by_tool_caller_and_status_and_pages_back() {
    let c = db();
    let mut p = Pending::default();
    for i in 0..30u64 {
        let (tool, caller) = if i % 3 == 0 { ("A", "alice") } else { ("B", "bob") };
        let status = if i % 5 == 0 { Status::Error } else { Status::Ok };
        // Two calls share each millisecond: the cursor must still not skip or repeat one.
        p.push(entry("s1", 1_000 + i / 2, tool, caller, status));
    }
    p.push(entry("s2", 2_000, "A", "alice", Status::Ok));
    run(&c, &p.flush_plan());
    let all = rows(&c, &select("s1", &q(&[])));
    assert_eq!(all.len(), 30);
    let v = page(&q(&[]), &all);
    assert_eq!(v["next"], Value::Null);
    assert_eq!(v["data"][0]["at"], 1_014, "newest first");
    assert_eq!(v["data"][0]["at_iso"], "1970-01-01T00:00:01Z");
    let only = |pairs: &[(&str, &str)]| {
        page(&q(pairs), &rows(&c, &select("s1", &q(pairs))))["data"].as_array().unwrap().clone()
    };
    assert!(only(&[("tool", "A")]).iter().all(|r| r["tool"] == "A"));
    assert_eq!(only(&[("tool", "A")]).len(), 10);
    assert_eq!(only(&[("caller", "bob")]).len(), 20);
    assert_eq!(only(&[("status", "error")]).len(), 6);
    assert_eq!(only(&[("status", "error"), ("tool", "A")]).len(), 2);
    assert_eq!(only(&[("tool", "")]).len(), 30, "an empty value is no filter");
    assert!(only(&[("status", "error")]).iter().all(|r| r["error"] == "it failed"));
    // Pages of 7 walk every call once.
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut pairs = vec![("limit", "7".to_string())];
        if let Some(b) = &before {
            pairs.push(("before", b.clone()));
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let query = q(&pairs);
        let v = page(&query, &rows(&c, &select("s1", &query)));
        seen.extend(v["data"].as_array().unwrap().iter().map(|r| r["at"].as_i64().unwrap()));
        match v["next"].as_str() {
            Some(n) => before = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 30, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] >= w[1]));
}

#[test]
fn bad_query_parameters_name_their_field() {
    let bad =
        |k: &str, v: &str| parse_query(&[(k.to_string(), v.to_string())]).err().unwrap_or_else(|| panic!("{k}={v}"));
    assert_eq!(bad("status", "fine").0, "status");
    assert!(bad("status", "fine").1.contains("ok, tool_error, error, gone"));
    assert_eq!(bad("limit", "0").0, "limit");
    assert_eq!(bad("limit", "501").0, "limit");
    assert_eq!(bad("before", "yesterday").0, "before");
    assert_eq!(q(&[("limit", "500"), ("before", "12-3"), ("status", "gone")]).before, Some((12, 3)));
}
