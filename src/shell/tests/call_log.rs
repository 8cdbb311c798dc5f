//! The call log (`shell::call_log`, `pure::call_log`): every call of a server, successes
//! included, written with the usage flush and never a D1 statement per call; callers, statuses
//! and filters; payloads only when the server keeps them, redacted.

use serde_json::{json, Value};

use super::*;
use crate::runtime::{Method, SqlValue, Statement};

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

fn idle(fx: &Fx) {
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
}

fn server_id_of(fx: &Fx, app_id: &str) -> String {
    let r = fx.console(Method::Get, &format!("/apps/{app_id}/server"), None);
    r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
}

/// An echoing workflow published as a one-app server: (server id, code).
fn echo(fx: &Fx, name: &str, key: &str) -> (String, String) {
    let app = fx.workflow(name, key);
    let code = fx.publish(&app);
    (server_id_of(fx, &app), code)
}

fn ping(fx: &Fx, code: &str) {
    assert_eq!(fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 0, "method": "ping"})).status, 200);
}

fn logged(fx: &Fx) -> i64 {
    let rows = fx.sim.d1_rows("DB", Statement::new("SELECT count(*) AS n FROM call_log", vec![])).unwrap_or_default();
    rows.first().and_then(|r| r["n"].as_i64()).unwrap_or(-1)
}

fn calls(fx: &Fx, server_id: &str, query: &str) -> Value {
    let r = fx.console(Method::Get, &format!("/servers/{server_id}/calls{query}"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().unwrap_or_default()
}

fn column<'a>(v: &'a Value, k: &str) -> Vec<&'a Value> {
    v["data"].as_array().map(|a| a.iter().map(|c| &c[k]).collect()).unwrap_or_default()
}

#[test]
fn n_calls_cost_no_d1_statement_and_the_flush_writes_them_in_one_insert() {
    let fx = Fx::new(4211);
    let (_, code) = echo(&fx, "Echo", "app-key-cl-1");
    // The first request starts this isolate's flush period; the first call reads the definition
    // and records the end user: what comes after is what calls alone cost.
    ping(&fx, &code);
    let t0 = fx.sim.now_ms();
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": "warm"})))["result"]["isError"], false);
    idle(&fx);
    let before = fx.sim.d1_statements().len();
    const N: usize = 40;
    for i in 0..N {
        let args = if i % 4 == 0 { json!({}) } else { json!({"text": format!("call {i}")}) };
        assert_eq!(fx.call(&code, "Echo", args).status, 200);
    }
    idle(&fx);
    let during = fx.sim.d1_statements()[before..].to_vec();
    assert_eq!(during, Vec::<String>::new(), "{N} calls ran D1 statements of their own");
    assert_eq!(logged(&fx), 0, "written before the flush");
    // The period ends: the next request flushes usage and the call log together.
    advance(&fx, 60_000 - (fx.sim.now_ms() - t0));
    ping(&fx, &code);
    idle(&fx);
    let flushed = fx.sim.d1_statements()[before..].to_vec();
    let writes: Vec<&String> = flushed.iter().filter(|s| s.contains("call_log")).collect();
    assert_eq!(writes.len(), 2, "one insert and one trim for {} calls: {writes:#?}", N + 1);
    assert!(writes[0].starts_with("INSERT INTO call_log"), "{writes:?}");
    assert_eq!(logged(&fx), N as i64 + 1);
    fx.assert_invariants();
}

#[test]
fn the_log_names_callers_outcomes_and_filters_by_tool_caller_and_status() {
    let fx = Fx::new(4212);
    let a = fx.workflow("Alpha", "app-key-cl-2a");
    let b = fx.workflow("Beta", "app-key-cl-2b");
    let (server_id, code) = fx.server("Pair", &[&a, &b]);
    assert_eq!(
        fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"}))).status,
        200
    );
    let mut keys = Vec::new();
    for name in ["alice", "bob"] {
        let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": name})));
        let key = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
        fx.codes.borrow_mut().push(key.clone());
        keys.push(format!("Bearer {key}"));
    }
    let call = |auth: &str, tool: &str, args: Value, accept: &str| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let headers = [
            ("content-type", "application/json"),
            ("accept", accept),
            ("mcp-protocol-version", V2025),
            ("authorization", auth),
        ];
        fx.sim.request(request(Method::Post, &Fx::mcp_url(&code), &headers, Some(&body)))
    };
    let sse = "application/json, text/event-stream";
    assert_eq!(last(&call(&keys[0], "Alpha", json!({"text": "1"}), sse))["result"]["isError"], false);
    assert_eq!(last(&call(&keys[0], "Beta", json!({"text": "2"}), "application/json"))["result"]["isError"], false);
    assert_eq!(last(&call(&keys[1], "Beta", json!({}), sse))["result"]["isError"], true);
    assert_eq!(last(&call(&keys[1], "Gamma", json!({}), sse))["error"]["code"], -32602);
    // Refused before the server: not a call of it.
    assert_eq!(call("Bearer fgk_wrong", "Alpha", json!({"text": "x"}), sse).status, 401);
    let all = calls(&fx, &server_id, "");
    assert_eq!(column(&all, "tool"), [&json!("(unknown)"), &json!("Beta"), &json!("Beta"), &json!("Alpha")], "{all}");
    assert_eq!(column(&all, "caller"), [&json!("bob"), &json!("bob"), &json!("alice"), &json!("alice")]);
    assert!(column(&all, "caller_kind").iter().all(|k| **k == "key"));
    assert_eq!(column(&all, "status"), [&json!("error"), &json!("tool_error"), &json!("ok"), &json!("ok")]);
    assert_eq!(column(&all, "streamed"), [&json!(false), &json!(false), &json!(false), &json!(true)], "{all}");
    assert!(all["data"][1]["error"].as_str().is_some_and(|e| e.contains("text")), "{all}");
    assert_eq!(all["data"][3]["error"], Value::Null);
    assert!(column(&all, "duration_ms").iter().all(|d| d.as_i64().is_some_and(|d| d >= 0)));
    assert_eq!(column(&all, "arguments"), [&Value::Null; 4], "payloads are off by default");
    assert_eq!(all["record_payloads"], false);
    // Filters, alone and together.
    assert_eq!(column(&calls(&fx, &server_id, "?tool=Beta"), "tool").len(), 2);
    assert_eq!(column(&calls(&fx, &server_id, "?caller=alice"), "caller"), [&json!("alice"); 2]);
    assert_eq!(column(&calls(&fx, &server_id, "?status=ok&caller=bob"), "tool").len(), 0);
    assert_eq!(column(&calls(&fx, &server_id, "?status=error"), "tool"), [&json!("(unknown)")]);
    assert_eq!(column(&calls(&fx, &server_id, "?status=tool_error&tool=Beta"), "caller"), [&json!("bob")]);
    let page = calls(&fx, &server_id, "?limit=3");
    assert_eq!(column(&page, "tool").len(), 3);
    let next = page["next"].as_str().unwrap_or_default().to_string();
    assert_eq!(column(&calls(&fx, &server_id, &format!("?limit=3&before={next}")), "tool"), [&json!("Alpha")]);
    let bad = fx.console(Method::Get, &format!("/servers/{server_id}/calls?status=fine"), None);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json().unwrap_or_default()["errors"][0]["field"], "status");
    assert_eq!(fx.console(Method::Get, "/servers/nope/calls", None).status, 404);
    fx.assert_invariants();
}

#[test]
fn an_open_server_logs_how_the_client_named_itself() {
    let fx = Fx::new(4213);
    let (server_id, code) = echo(&fx, "Open", "app-key-cl-3");
    let ua = [("user-agent", "claude-code/2.1")];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "Open", "arguments": {"text": "x"}}});
    assert_eq!(fx.mcp_with(&code, &ua, &body).status, 200);
    let v = calls(&fx, &server_id, "");
    assert_eq!(v["data"][0]["caller"], "claude-code/2.1", "{v}");
    assert_eq!(v["data"][0]["caller_kind"], "client");
    fx.assert_invariants();
}

#[test]
fn payloads_are_kept_only_once_the_server_turns_them_on_and_credentials_are_redacted() {
    let fx = Fx::new(4214);
    let (server_id, code) = echo(&fx, "Echo", "app-key-cl-4");
    // (The echo answers it back to the client, so it is not one of the fixture's secrets.)
    let secret = "Bearer abcdefghijklmnop0123";
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": secret})))["result"]["isError"], false);
    let settings = format!("/servers/{server_id}/calls/settings");
    assert_eq!(fx.console(Method::Get, &settings, None).json(), Some(json!({"record_payloads": false})));
    let r = fx.console(Method::Put, &settings, Some(&json!({"record_payloads": true})));
    assert_eq!(r.json(), Some(json!({"record_payloads": true})), "{}", r.text());
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": secret})))["result"]["isError"], false);
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": "plain words"})))["result"]["isError"], false);
    let v = calls(&fx, &server_id, "");
    assert_eq!(v["record_payloads"], true);
    assert_eq!(v["data"][0]["arguments"], r#"{"text":"plain words"}"#, "{v}");
    assert!(v["data"][0]["result"].as_str().is_some_and(|r| r.contains("plain words")), "{v}");
    assert_eq!(v["data"][1]["arguments"], r#"{"text":"Bearer [redacted]"}"#, "{v}");
    assert!(v["data"][1]["result"].as_str().is_some_and(|r| r.contains("[redacted]")), "{v}");
    assert_eq!(v["data"][2]["arguments"], Value::Null, "kept before it was turned on");
    // Nothing of the secret anywhere in D1.
    let rows = fx.sim.d1_rows("DB", Statement::new("SELECT * FROM call_log", vec![])).unwrap_or_default();
    assert!(!serde_json::to_string(&rows).unwrap_or_default().contains("abcdefghijklmnop"), "{rows:?}");
    // Off again: the next call keeps nothing.
    fx.console(Method::Put, &settings, Some(&json!({"record_payloads": false})));
    fx.call(&code, "Echo", json!({"text": "after"}));
    assert_eq!(calls(&fx, &server_id, "")["data"][0]["arguments"], Value::Null);
    let bad = fx.console(Method::Put, &settings, Some(&json!({"record_payloads": "yes"})));
    assert_eq!(bad.status, 400);
    fx.assert_invariants();
}

#[test]
fn a_deleted_server_takes_its_log_and_its_unwritten_calls_are_dropped() {
    let fx = Fx::new(4215);
    let (server_id, code) = echo(&fx, "Short", "app-key-cl-5");
    let (other_id, other) = echo(&fx, "Stays", "app-key-cl-5b");
    ping(&fx, &code);
    fx.call(&code, "Short", json!({"text": "a"}));
    fx.call(&other, "Stays", json!({"text": "b"}));
    assert_eq!(column(&calls(&fx, &server_id, ""), "tool").len(), 1);
    // One more call waits in memory when the server goes.
    fx.call(&code, "Short", json!({"text": "c"}));
    assert_eq!(fx.console(Method::Delete, &format!("/servers/{server_id}"), None).status, 200);
    assert_eq!(column(&calls(&fx, &other_id, ""), "tool").len(), 1, "the flush failed on the deleted server");
    let left = fx
        .sim
        .d1_rows(
            "DB",
            Statement::new("SELECT count(*) AS n FROM call_log WHERE server_id = ?1", vec![SqlValue::Text(server_id)]),
        )
        .unwrap_or_default();
    assert_eq!(left[0]["n"], 0);
    fx.assert_invariants();
}
