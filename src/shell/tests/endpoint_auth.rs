//! The MCP endpoint where the broader endpoint tests leave it open: what a server with upstream
//! MCP apps counts against its rate limit, which of the client's headers an upstream may see
//! (never Flowgate's own credential), and who called.

use serde_json::{json, Value};

use super::*;
use crate::runtime::{Method, SqlValue, Statement};

fn ping(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

fn list(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// Calls of the MCP rate limiter so far.
fn limiter_calls(fx: &Fx) -> usize {
    fx.sim.trace().iter().filter(|l| l.contains("rate_limit MCP_RATE_LIMIT")).count()
}

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

/// An upstream MCP app (the simulated upstream) with more `backend` settings; its id.
fn upstream_app(fx: &Fx, name: &str, backend: Value) -> String {
    let mut b = json!({"url": format!("{UPSTREAM}/mcp")});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": name, "description": "d", "mode": "mcp", "backend": b})),
    );
    assert_eq!(r.status, 201, "creating the app: {}", r.text());
    r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
}

/// The name under which the server lists the upstream tool ending in `suffix`.
fn tool_named(fx: &Fx, code: &str, headers: &[(&str, &str)], suffix: &str) -> String {
    let v = last(&fx.mcp_with(code, headers, &list(2)));
    let names: Vec<String> = v["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.iter().find(|n| n.ends_with(suffix)).cloned().unwrap_or_else(|| panic!("no *{suffix} in {names:?}: {v}"))
}

#[test]
fn an_upstream_servers_list_counts_once_and_a_call_once_and_a_ping_never() {
    let fx = Fx::new(501);
    fx.sim.set_rate_limit("MCP_RATE_LIMIT", 3, 60_000);
    let app = upstream_app(&fx, "Up", json!({}));
    let (_, code) = fx.server("Ups", &[&app]);
    let now = fx.sim.now_ms();
    advance(&fx, 60_000 - now % 60_000);
    // tools/list reads the upstream's list: one count each.
    assert_eq!(fx.mcp(&code, &list(1)).status, 200);
    assert_eq!(limiter_calls(&fx), 1);
    let v = last(&fx.mcp(&code, &list(2)));
    assert_eq!(limiter_calls(&fx), 2);
    // A call: one count, not one more for a list it does not read.
    let name = v["result"]["tools"][0]["name"].as_str().unwrap_or_default().to_string();
    let r = fx.call(&code, &name, json!({"text": "a"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(limiter_calls(&fx), 3, "a call is one count");
    let r = fx.call(&code, &name, json!({"text": "b"}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(limiter_calls(&fx), 4);
    // Refused a moment ago: a list is refused from memory, but a ping skips the limiter and
    // its memory alike.
    assert_eq!(fx.mcp(&code, &ping(3)).status, 200);
    assert_eq!(fx.mcp(&code, &list(4)).status, 429);
    assert_eq!(limiter_calls(&fx), 4);
    fx.assert_invariants();
}

#[test]
fn a_servers_own_credential_never_reaches_an_upstream_and_other_headers_do() {
    let forward = json!({"forward_headers": {"authorization": "authorization", "x-team": "x-team"},
        "on_missing": "passthrough"});
    for keyed in [false, true] {
        let fx = Fx::new(502);
        let app = upstream_app(&fx, "Up", forward.clone());
        let (server_id, code) = fx.server("Ups", &[&app]);
        let credential = if keyed {
            let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"})));
            assert_eq!(r.status, 200, "{}", r.text());
            let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": "k"})));
            assert_eq!(r.status, 201, "{}", r.text());
            let key = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
            fx.codes.borrow_mut().push(key.clone());
            format!("Bearer {key}")
        } else {
            "Bearer the-clients-own-upstream-token".to_string()
        };
        let headers = [("authorization", credential.as_str()), ("x-team", "blue")];
        let name = tool_named(&fx, &code, &headers, "headers");
        let r = fx.mcp_with(
            &code,
            &headers,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": {}}}),
        );
        let seen = &last(&r)["result"]["structuredContent"]["headers"];
        assert_eq!(seen["x-team"], "blue", "{keyed}: {}", r.text());
        if keyed {
            // The client key is Flowgate's: never forwarded.
            assert_eq!(seen["authorization"], Value::Null, "{}", r.text());
            assert!(!r.text().contains(&credential));
        } else {
            assert_eq!(seen["authorization"], credential.as_str(), "{}", r.text());
        }
        fx.assert_invariants();
    }
}

#[test]
fn a_call_records_its_end_user_once() {
    let fx = Fx::new(503);
    let app = fx.workflow("Echo", "app-key-eu");
    let code = fx.publish(&app);
    let who = [("user-agent", "agent/1"), ("cf-connecting-ip", "203.0.113.9")];
    let count = || {
        let rows = fx
            .sim
            .d1_rows("DB", Statement::new("SELECT count(*) AS n FROM end_users", Vec::<SqlValue>::new()))
            .unwrap_or_default();
        rows.first().and_then(|r| r["n"].as_u64()).unwrap_or(0)
    };
    assert_eq!(count(), 0);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Echo", "arguments": {"text": "a"}}});
    assert_eq!(fx.mcp_with(&code, &who, &call).status, 200);
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(count(), 1);
    fx.assert_invariants();
}

#[test]
fn a_json_only_client_gets_json_and_an_sse_client_of_2025_a_stream() {
    let fx = Fx::new(504);
    let app = fx.workflow("Echo", "app-key-sse");
    let code = fx.publish(&app);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Echo", "arguments": {"text": "a"}}});
    let json_only =
        [("content-type", "application/json"), ("accept", "application/json"), ("mcp-protocol-version", V2025)];
    let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&code), &json_only, Some(&call)));
    assert_eq!(r.headers.get("content-type").as_deref(), Some("application/json"), "{}", r.text());
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    // The usual client takes both: a stream, even for a call that is over at once.
    let r = fx.mcp(&code, &call);
    assert_eq!(r.headers.get("content-type").as_deref(), Some("text/event-stream"), "{}", r.text());
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn what_needs_no_upstream_list_reads_none() {
    let fx = Fx::new(505);
    let app = upstream_app(&fx, "Up", json!({}));
    let (_, code) = fx.server("Ups", &[&app]);
    let kv = |fx: &Fx| fx.sim.fault_counts().considered("kv_error");
    // Cold: the definition is read, but nothing of the upstream's: as many KV reads as a cold
    // ping on a server without upstream apps, and no upstream request.
    let plain = fx.workflow("Plain", "app-key-plain");
    let plain_code = fx.publish(&plain);
    fx.sim.evict_isolate();
    let (k0, upstream_at_start) = (kv(&fx), fx.upstream.requests.borrow().len());
    assert_eq!(fx.mcp(&code, &ping(1)).status, 200);
    let k1 = kv(&fx);
    assert_eq!(fx.upstream.requests.borrow().len(), upstream_at_start);
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&plain_code, &ping(1)).status, 200);
    assert_eq!(k1 - k0, kv(&fx) - k1, "a cold ping read more of KV on the upstream server");
    assert_eq!(fx.mcp(&code, &ping(1)).status, 200);
    // Warm: the definition is in this isolate's memory.
    let (kv_before, upstream_before) = (kv(&fx), fx.upstream.requests.borrow().len());
    assert_eq!(fx.mcp(&code, &ping(2)).status, 200);
    let level = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "info"}});
    assert_eq!(fx.mcp(&code, &level).status, 200);
    assert_eq!((kv(&fx), fx.upstream.requests.borrow().len()), (kv_before, upstream_before));
}

#[test]
fn tasks_result_waits_five_minutes_at_most_then_says_to_ask_again() {
    let fx = Fx::new(506);
    let app = crate::sim::backends::dify::App {
        stream_end: crate::sim::backends::dify::StreamEnd::HangAfterFirst,
        user_input_form: json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]),
        ..crate::sim::backends::dify::App::new("workflow")
    };
    let settings = json!({"task_support": "optional", "idle_timeout_seconds": 3600, "timeout_seconds": 3600});
    let app_id = fx.dify_app_with("Stuck", "workflow", "app-key-stuck", app, settings);
    let code = fx.publish(&app_id);
    let rpc = |method: &str, params: Value| {
        last(&fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})))
    };
    let created = rpc("tools/call", json!({"name": "Stuck", "arguments": {"text": "hi"}, "task": {"ttl": 3_000_000}}));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{created}");
    let started = fx.sim.now_ms();
    let r = rpc("tasks/result", json!({"taskId": id}));
    let waited = fx.sim.now_ms() - started;
    assert!(
        r["error"]["message"].as_str().unwrap_or_default().contains("still running; call tasks/result again"),
        "{r}"
    );
    // Waits of 20 s each, up to five minutes.
    assert!((300_000..=320_000).contains(&waited), "{waited} ms: {r}");
    let got = rpc("tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "working", "{got}");
}
