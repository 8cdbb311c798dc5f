//! The MCP endpoint: transport rules, client authentication, rate limits, the definition cache, usage and logs.
//!
//! Each test names the rule it holds; statuses, JSON-RPC codes, headers and messages are exact,
//! and what reaches storage, the limiter and the backends is counted, on the virtual clock.

use futures::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::pure::ids::sha256_hex;
use crate::runtime::{Body, Method, SqlValue, Statement};
use crate::sim::backends::dify;
use crate::sim::crypto::SimKey;
use crate::sim::{ClientResponse, Faults};

const KIB: usize = 1024;
const MAX_BODY: usize = 1 << 20;
const ALLOWED: &str = "https://inspector.example";
/// A code of the right shape that no server has (not all capitals: `pure::config`'s scan of the
/// shell takes such a literal for a setting's name).
const UNKNOWN_CODE: &str = "AAAAAAAAAAAAAAAz";

fn ping(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

fn list(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn call_msg(name: &str, args: Value, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
}

/// The usual client headers, then `extra` (a later field of one name replaces the earlier).
fn headers_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
    ];
    for (n, v) in extra {
        all.retain(|(m, _)| !m.eq_ignore_ascii_case(n));
        all.push((n, v));
    }
    all
}

/// A request to a server's endpoint with exactly `headers` and `body`.
fn send(fx: &Fx, method: Method, code: &str, headers: &[(&str, &str)], body: Body) -> ClientResponse {
    let req = Request { method, url: Fx::mcp_url(code), headers: headers.iter().copied().collect(), body };
    fx.sim.request(req)
}

/// One message with the usual headers but `extra` (replacing those of the same name).
fn mcp_as(fx: &Fx, code: &str, extra: &[(&str, &str)], body: &Value) -> ClientResponse {
    send(fx, Method::Post, code, &headers_with(extra), Body::Bytes(body.to_string().into_bytes()))
}

/// Asserts a JSON-RPC error answer: status, code, echoed id, a message holding `needle`, JSON.
#[track_caller]
fn assert_rpc_error(r: &ClientResponse, status: u16, code: i64, id: Value, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.headers.get("content-type").as_deref(), Some("application/json"), "{}", r.text());
    let v = r.json().unwrap_or_default();
    assert_eq!(v["jsonrpc"], "2.0", "{}", r.text());
    assert_eq!(v["error"]["code"], code, "{}", r.text());
    assert_eq!(v["id"], id, "{}", r.text());
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
}

/// A published one-app server (workflow "Echo", Dify key `app-key-1`): (server id, code).
fn echo_server(fx: &Fx) -> (String, String) {
    echo_server_named(fx, "Echo", "app-key-1")
}

fn echo_server_named(fx: &Fx, name: &str, api_key: &str) -> (String, String) {
    let app = fx.workflow(name, api_key);
    let body = json!({"description": "A test server", "parameters": {"text": "The text to work on"}});
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&body));
    assert_eq!(r.status, 201, "publishing: {}", r.text());
    let v = r.json().unwrap_or_default();
    let code = v["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(code.clone());
    (v["id"].as_str().unwrap_or_default().to_string(), code)
}

/// Puts a server in auth mode `key` and makes a key named `name`: the key.
fn key_for(fx: &Fx, server_id: &str, name: &str) -> String {
    let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    new_key(fx, server_id, name)
}

fn new_key(fx: &Fx, server_id: &str, name: &str) -> String {
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": name})));
    assert_eq!(r.status, 201, "{}", r.text());
    let key = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
    // Like a code: shown once by the console, never anywhere else.
    fx.codes.borrow_mut().push(key.clone());
    key
}

/// KV and D1 calls so far (each storage call is considered for a fault once).
fn storage_calls(fx: &Fx) -> (u64, u64) {
    let c = fx.sim.fault_counts();
    (c.considered("kv_error"), c.considered("d1_error"))
}

/// Calls of the MCP rate limiter so far.
fn limiter_calls(fx: &Fx) -> usize {
    fx.sim.trace().iter().filter(|l| l.contains("rate_limit MCP_RATE_LIMIT")).count()
}

/// Dify runs so far: the `user` of each.
fn dify_users(fx: &Fx) -> Vec<String> {
    fx.dify
        .requests
        .borrow()
        .iter()
        .filter(|r| r.path.starts_with("/v1/workflows/run"))
        .filter_map(|r| r.json().and_then(|b| b["user"].as_str().map(str::to_string)))
        .collect()
}

fn d1(fx: &Fx, sql: &str, args: Vec<SqlValue>) -> Vec<Value> {
    fx.sim.d1_rows("DB", Statement::new(sql, args)).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// Lets virtual time pass (panics on a hang).
fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

fn idle(fx: &Fx) {
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
}

/// A JSON-RPC message padded with spaces to exactly `len` bytes.
fn padded_ping(len: usize) -> Vec<u8> {
    let mut b = ping(json!(1)).to_string().into_bytes();
    assert!(b.len() <= len);
    b.resize(len, b' ');
    b
}

/// A body sent without a length: `chunks`, then the end (or, with `never_ends`, nothing more).
fn chunked(chunks: Vec<Vec<u8>>, never_ends: bool) -> Body {
    let s = futures::stream::iter(chunks.into_iter().map(Ok));
    if never_ends {
        Body::Stream(Box::pin(s.chain(futures::stream::pending())))
    } else {
        Body::Stream(Box::pin(s))
    }
}

// ---------------------------------------------------------------------------------------------
// Transport

#[test]
fn transport_refusals_are_precise_json_rpc_errors_with_a_null_id() {
    let fx = Fx::new(1);
    let (_, code) = echo_server(&fx);
    let body = ping(json!(5)).to_string().into_bytes();
    let with =
        |extra: &[(&str, &str)], b: Vec<u8>| send(&fx, Method::Post, &code, &headers_with(extra), Body::Bytes(b));

    let r = with(&[("content-type", "text/plain")], body.clone());
    assert_rpc_error(&r, 415, -32600, Value::Null, "Content-Type: application/json (got text/plain)");
    let no_type: Vec<_> = headers_with(&[]).into_iter().filter(|(n, _)| *n != "content-type").collect();
    let r = send(&fx, Method::Post, &code, &no_type, Body::Bytes(body.clone()));
    assert_rpc_error(&r, 415, -32600, Value::Null, "(got none)");
    let r = with(&[("accept", "text/html")], body.clone());
    assert_rpc_error(&r, 406, -32600, Value::Null, "Accept was text/html");
    let r = with(&[], b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".to_vec());
    assert_rpc_error(&r, 400, -32700, Value::Null, "Parse error: the body is not valid JSON");
    let r = with(&[], b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"\xff\"}".to_vec());
    assert_rpc_error(&r, 400, -32700, Value::Null, "Parse error: the body is not UTF-8 text");
    let r = send(&fx, Method::Post, &code, &headers_with(&[]), Body::Empty);
    assert_rpc_error(&r, 400, -32700, Value::Null, "Parse error");
    // Each refusal is no-store, and none reached the backend.
    assert_eq!(r.headers.get("cache-control").as_deref(), Some("no-store"));
    assert!(fx.dify.requests.borrow().is_empty());

    // What is accepted: a charset parameter, a case-insensitive type, any Accept that allows JSON.
    for (n, v) in [
        ("content-type", "application/json; charset=utf-8"),
        ("content-type", "Application/JSON"),
        ("accept", "*/*"),
        ("accept", "application/json"),
    ] {
        let r = with(&[(n, v)], body.clone());
        assert_eq!(r.status, 200, "{n}: {v}: {}", r.text());
        assert_eq!(r.json(), Some(json!({"jsonrpc": "2.0", "id": 5, "result": {}})));
    }
    fx.assert_invariants();
}

#[test]
fn the_body_cap_is_one_mib_exactly_announced_or_chunked() {
    let fx = Fx::new(2);
    let (_, code) = echo_server(&fx);
    let len = |n: usize| n.to_string();
    // Exactly the limit: answered, announced or chunked.
    let exact = padded_ping(MAX_BODY);
    let l = len(MAX_BODY);
    let r = send(&fx, Method::Post, &code, &headers_with(&[("content-length", &l)]), Body::Bytes(exact.clone()));
    assert_eq!(r.status, 200, "{:.200}", r.text());
    let pieces: Vec<Vec<u8>> = exact.chunks(64 * KIB).map(<[u8]>::to_vec).collect();
    let r = send(&fx, Method::Post, &code, &headers_with(&[]), chunked(pieces, false));
    assert_eq!(r.status, 200, "{:.200}", r.text());

    // One byte more: 413, announced (judged before reading) or found while reading.
    let over = padded_ping(MAX_BODY + 1);
    let l = len(MAX_BODY + 1);
    let r = send(&fx, Method::Post, &code, &headers_with(&[("content-length", &l)]), Body::Bytes(over.clone()));
    assert_rpc_error(&r, 413, -32600, Value::Null, "Payload Too Large: MCP messages are limited to 1024 KiB");
    let r = send(&fx, Method::Post, &code, &headers_with(&[]), Body::Bytes(over.clone()));
    assert_rpc_error(&r, 413, -32600, Value::Null, "Payload Too Large");
    let pieces: Vec<Vec<u8>> = over.chunks(64 * KIB).map(<[u8]>::to_vec).collect();
    let r = send(&fx, Method::Post, &code, &headers_with(&[]), chunked(pieces, false));
    assert_rpc_error(&r, 413, -32600, Value::Null, "Payload Too Large");
    // An announced length over the limit is refused without reading a body that never ends.
    let r = send(&fx, Method::Post, &code, &headers_with(&[("content-length", &l)]), chunked(vec![], true));
    assert_rpc_error(&r, 413, -32600, Value::Null, "Payload Too Large");

    // A chunked body that never ends is refused as soon as it passes the limit: a reader that
    // waited for its end would hang here.
    let lead = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"pad\":\"".to_vec();
    let mut pieces = vec![lead];
    pieces.extend((0..24).map(|_| vec![b'x'; 64 * KIB]));
    let req = Request {
        method: Method::Post,
        url: Fx::mcp_url(&code),
        headers: headers_with(&[]).into_iter().collect(),
        body: chunked(pieces, true),
    };
    let r = fx.sim.try_request(req).unwrap_or_else(|h| panic!("the capped read waited for the body's end: {h}"));
    assert_rpc_error(&r, 413, -32600, Value::Null, "limited to 1024 KiB");
    assert!(fx.dify.requests.borrow().is_empty());
}

#[test]
fn console_bodies_are_capped_typed_and_not_empty() {
    let fx = Fx::new(3);
    let auth = format!("Bearer {ADMIN}");
    let post = |headers: &[(&str, &str)], body: Body| {
        let mut h: Vec<(&str, &str)> = vec![("authorization", auth.as_str())];
        h.extend_from_slice(headers);
        fx.sim.request(Request {
            method: Method::Post,
            url: format!("{BASE}/console/api/apps"),
            headers: h.into_iter().collect(),
            body,
        })
    };
    let json_type = [("content-type", "application/json")];
    let r = post(
        &json_type,
        chunked(
            vec![b"{\"name\":\"".to_vec()].into_iter().chain((0..24).map(|_| vec![b'y'; 64 * KIB])).collect(),
            true,
        ),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    let v = r.json().unwrap_or_default();
    assert_eq!(v["error"], "payload_too_large");
    assert_eq!(v["message"], "the body is larger than 1024 KiB");
    let r = post(&[("content-type", "text/plain")], Body::Bytes(b"a=b".to_vec()));
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(r.json().unwrap_or_default()["error"], "unsupported_media_type");
    assert!(r.text().contains("(got \\\"text/plain\\\")"), "{}", r.text());
    let r = post(&json_type, Body::Bytes(b"  \n".to_vec()));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json().unwrap_or_default()["message"], "the request body is empty; send a JSON object");
    let r = post(&json_type, Body::Bytes(b"{\"name\":".to_vec()));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json().unwrap_or_default()["error"], "invalid_json");
    fx.assert_invariants();
}

#[test]
fn only_post_and_options_are_served() {
    let fx = Fx::new(4);
    let (_, code) = echo_server(&fx);
    for m in [Method::Get, Method::Delete, Method::Put] {
        let name = m.as_str().to_string();
        let r = send(&fx, m, &code, &[("accept", "text/event-stream")], Body::Empty);
        assert_rpc_error(
            &r,
            405,
            -32600,
            Value::Null,
            &format!("Method not allowed: {name} (this MCP endpoint takes POST)"),
        );
        assert_eq!(r.headers.get("allow").as_deref(), Some("POST, OPTIONS"));
    }
    // The code is looked up (a mistyped one gets 404, `error_messages`), from the isolate's memo
    // here: no storage call.
    let before = storage_calls(&fx);
    send(&fx, Method::Get, &code, &[], Body::Empty);
    assert_eq!(storage_calls(&fx), before);
    fx.assert_invariants();
}

#[test]
fn cors_preflight_and_origins() {
    let fx = Fx::new(5);
    fx.sim.set_setting("ALLOWED_ORIGINS", &format!("https://other.example, {ALLOWED}"));
    let (_, code) = echo_server(&fx);
    let pre = |origin: &str, requested: &str| {
        let mut h = vec![("origin", origin), ("access-control-request-method", "POST")];
        if !requested.is_empty() {
            h.push(("access-control-request-headers", requested));
        }
        send(&fx, Method::Options, &code, &h, Body::Empty)
    };
    let r = pre(ALLOWED, "content-type, mcp-param-region, x-other");
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some(ALLOWED));
    assert_eq!(r.headers.get("vary").as_deref(), Some("Origin"));
    assert_eq!(r.headers.get("access-control-allow-methods").as_deref(), Some("POST, OPTIONS"));
    assert_eq!(r.headers.get("access-control-max-age").as_deref(), Some("86400"));
    let allowed: Vec<String> = r
        .headers
        .get("access-control-allow-headers")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    for h in [
        "content-type",
        "accept",
        "authorization",
        "mcp-protocol-version",
        "mcp-session-id",
        "mcp-method",
        "mcp-param-region",
    ] {
        assert!(allowed.iter().any(|a| a == h), "{h} not in {allowed:?}");
    }
    assert!(!allowed.iter().any(|a| a == "x-other"), "{allowed:?}");

    // A foreign origin: 403 before anything is looked up (even an unknown code), preflight too.
    let before = storage_calls(&fx);
    for origin in ["https://evil.example", "null", "http://localhost:1", "https://inspector.example.evil"] {
        let r = pre(origin, "");
        assert_rpc_error(&r, 403, -32600, Value::Null, "is not allowed; add it to ALLOWED_ORIGINS");
        assert_eq!(r.headers.get("access-control-allow-origin"), None);
        let r = mcp_as(&fx, &code, &[("origin", origin)], &ping(json!(3)));
        assert_rpc_error(&r, 403, -32600, Value::Null, &format!("Forbidden: Origin {origin} is not allowed"));
        let r = mcp_as(&fx, UNKNOWN_CODE, &[("origin", origin)], &ping(json!(3)));
        assert_eq!(r.status, 403, "{}", r.text());
    }
    assert_eq!(storage_calls(&fx), before, "a refused origin cost a storage call");

    // An allowed origin is served, its answers readable: errors too, with their challenge.
    let r = mcp_as(&fx, &code, &[("origin", ALLOWED)], &ping(json!(4)));
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some(ALLOWED));
    let exposed = r.headers.get("access-control-expose-headers").unwrap_or_default();
    for h in ["mcp-session-id", "mcp-protocol-version", "www-authenticate"] {
        assert!(exposed.contains(h), "{h} not exposed: {exposed}");
    }
    let r = mcp_as(&fx, UNKNOWN_CODE, &[("origin", ALLOWED)], &ping(json!(6)));
    assert_rpc_error(&r, 404, -32600, json!(6), "Server not found");
    assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some(ALLOWED));
    // Without an Origin (not a browser) no CORS header is added.
    let r = fx.mcp(&code, &ping(json!(7)));
    assert_eq!(r.headers.get("access-control-allow-origin"), None);
    fx.assert_invariants();
}

#[test]
fn same_origin_is_allowed_only_on_a_loopback_host() {
    let fx = Fx::new(6);
    let (_, code) = echo_server(&fx);
    for (origin, host, status) in [
        ("http://127.0.0.1:8787", "127.0.0.1:8787", 200),
        ("http://localhost:8787", "localhost:8787", 200),
        ("http://localhost:9999", "localhost:8787", 403),
        ("https://flowgate.test", "flowgate.test", 403),
        ("http://127.0.0.1.nip.io", "127.0.0.1.nip.io", 403),
    ] {
        let r = mcp_as(&fx, &code, &[("origin", origin), ("host", host)], &ping(json!(1)));
        assert_eq!(r.status, status, "{origin} on {host}: {}", r.text());
    }
    fx.sim.set_setting("ALLOWED_ORIGINS", "*");
    fx.sim.evict_isolate(); // settings are read once per isolate
    let r = mcp_as(&fx, &code, &[("origin", "https://anything.example")], &ping(json!(1)));
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some("https://anything.example"));
}

#[test]
fn notifications_and_responses_get_202_with_no_body() {
    let fx = Fx::new(7);
    fx.sim.set_setting("ALLOWED_ORIGINS", ALLOWED);
    let (_, code) = echo_server(&fx);
    for (body, extra) in [
        (
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            vec![("mcp-protocol-version", "1999-01-01")],
        ),
        (json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}), vec![]),
        (json!({"jsonrpc": "2.0", "id": 9, "result": {}}), vec![]),
        (
            json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
            vec![("mcp-protocol-version", "2025-03-26")],
        ),
    ] {
        let mut extra = extra.clone();
        extra.push(("origin", ALLOWED));
        let r = mcp_as(&fx, &code, &extra, &body);
        assert_eq!(r.status, 202, "{body}: {}", r.text());
        assert!(r.body.is_empty(), "{body}: {}", r.text());
        assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some(ALLOWED));
    }
    fx.assert_invariants();
}

#[test]
fn batches_are_answered_per_item_before_2025_06_18_and_bounded() {
    let fx = Fx::new(8);
    let (_, code) = echo_server(&fx);
    let old = [("mcp-protocol-version", "2025-03-26")];
    let batch = json!([ping(json!(1)), {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "nope"}, list(json!(3))]);
    let r = mcp_as(&fx, &code, &old, &batch);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap_or_default();
    let ids: Vec<&Value> = v.as_array().map(|a| a.iter().map(|m| &m["id"]).collect()).unwrap_or_default();
    assert_eq!(ids, [&json!(1), &json!(2), &json!(3)], "{v}");
    assert_eq!(v[0]["result"], json!({}));
    assert_eq!(v[1]["error"]["code"], -32601);
    assert_eq!(v[2]["result"]["tools"][0]["name"], "Echo");

    // 32 messages are fine, 33 are refused before any work.
    let many = |n: usize| Value::Array((0..n).map(|i| ping(json!(i))).collect());
    let r = mcp_as(&fx, &code, &old, &many(32));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().and_then(|v| v.as_array().map(Vec::len)), Some(32));
    let before = storage_calls(&fx);
    fx.sim.evict_isolate();
    let r = mcp_as(&fx, &code, &old, &many(33));
    assert_rpc_error(&r, 400, -32600, Value::Null, "32");
    assert_eq!(storage_calls(&fx), before, "a refused batch was looked up");
    // From 2025-06-18 a batch is refused, and an empty one always.
    let r = mcp_as(&fx, &code, &[("mcp-protocol-version", "2025-06-18")], &many(2));
    assert_rpc_error(&r, 400, -32600, Value::Null, "2025-06-18");
    let r = mcp_as(&fx, &code, &old, &json!([]));
    assert_rpc_error(&r, 400, -32600, Value::Null, "empty");
    fx.assert_invariants();
}

#[test]
fn unknown_codes_are_404_echoing_the_id_and_cost_one_lookup_at_most() {
    let fx = Fx::new(9);
    let (_, code) = echo_server(&fx);
    // A code of the wrong shape is not looked up at all.
    let before = storage_calls(&fx);
    for bad in ["short", "AAAAAAAAAAAAAAA-", "AAAAAAAAAAAAAAAAz", "%41AAAAAAAAAAAAAAA"] {
        let r = mcp_as(&fx, bad, &[], &list(json!("x")));
        assert_rpc_error(&r, 404, -32600, json!("x"), "Server not found: no MCP server has this code");
    }
    assert_eq!(storage_calls(&fx), before, "a malformed code was looked up");
    // A well-formed unknown code: one KV read and one D1 read per request, nothing written.
    for i in 0..3 {
        let before = storage_calls(&fx);
        let r = mcp_as(&fx, UNKNOWN_CODE, &[], &list(json!(i)));
        assert_rpc_error(&r, 404, -32600, json!(i), "the code may have been rotated");
        idle(&fx);
        let after = storage_calls(&fx);
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "request {i}");
    }
    assert_eq!(fx.sim.kv_get("CACHE", &format!("server:{}", sha256_hex(UNKNOWN_CODE))), None);
    // A hot code costs no storage call at all.
    assert_eq!(fx.mcp(&code, &list(json!(1))).status, 200);
    idle(&fx);
    let before = storage_calls(&fx);
    for i in 0..5 {
        assert_eq!(fx.mcp(&code, &list(json!(i))).status, 200);
    }
    idle(&fx);
    assert_eq!(storage_calls(&fx), before, "a hot definition was read from storage");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// The definition cache and the isolate's memo

/// Changes a server behind this isolate's back (as another isolate's console write would: D1
/// and the KV entry, not this isolate's memo).
fn deactivate_elsewhere(fx: &Fx, server_id: &str, code: &str) {
    d1(fx, "UPDATE mcp_servers SET status = 'inactive' WHERE id = ?1", vec![text(server_id)]);
    let key = format!("server:{}", sha256_hex(code));
    let entry = fx.sim.kv_get("CACHE", &key).unwrap_or_else(|| panic!("no KV entry for the server"));
    let mut def: Value = serde_json::from_str(&entry).unwrap_or_default();
    assert_eq!(def["status"], "active", "{entry:.300}");
    def["status"] = json!("inactive");
    fx.sim.kv_put("CACHE", &key, &def.to_string(), 3600).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_cold_lookup_reads_kv_then_d1_and_fills_kv_for_an_hour() {
    let fx = Fx::new(10);
    let (server_id, code) = echo_server(&fx);
    let key = format!("server:{}", sha256_hex(&code));
    // The console wrote the entry; take it away to see the endpoint refill it from D1.
    fx.sim.kv_put("CACHE", &key, "not a definition", 60).unwrap_or_else(|e| panic!("{e}"));
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&code, &list(json!(1))).status, 200);
    idle(&fx);
    let entry = fx.sim.kv_get("CACHE", &key).unwrap_or_default();
    let def: Value = serde_json::from_str(&entry).unwrap_or_default();
    assert_eq!(def["server_id"], server_id.as_str(), "{entry:.200}");
    assert!(!entry.contains(&code), "the code itself is in the KV entry");
    // The entry lives an hour (KV's TTL), and is what a cold isolate reads while D1 fails.
    advance(&fx, 3_599_000);
    assert!(fx.sim.kv_get("CACHE", &key).is_some());
    fx.sim.evict_isolate();
    fx.sim.set_faults(Faults { d1_error: 1.0, ..Faults::default() });
    let r = fx.mcp(&code, &list(json!(2)));
    assert_eq!(r.status, 200, "{}", r.text());
    advance(&fx, 1_000);
    assert_eq!(fx.sim.kv_get("CACHE", &key), None, "the entry outlived its hour");
    // Neither KV nor D1: a cold isolate cannot tell, and says so (503), never 404.
    fx.sim.evict_isolate();
    let r = fx.mcp(&code, &list(json!(3)));
    assert_rpc_error(&r, 503, -32603, json!(3), "Service unavailable");
    fx.sim.set_faults(Faults::default());
    fx.assert_invariants();
}

#[test]
fn a_change_made_elsewhere_shows_within_the_memo_window() {
    for (setting, fresh_ms) in [(None, 5_000), (Some("2"), 2_000), (Some("900"), 300_000)] {
        let fx = Fx::new(11);
        if let Some(s) = setting {
            fx.sim.set_setting("DEFINITION_MEMO_SECONDS", s);
        }
        let (server_id, code) = echo_server(&fx);
        fx.sim.evict_isolate();
        assert_eq!(fx.mcp(&code, &list(json!(0))).status, 200);
        let t0 = fx.sim.now_ms();
        deactivate_elsewhere(&fx, &server_id, &code);
        // Within the window: the memo answers.
        advance(&fx, fresh_ms - 1 - (fx.sim.now_ms() - t0));
        assert_eq!(fx.mcp(&code, &list(json!(1))).status, 200, "{setting:?}: before the window ends");
        // At its end: served once more while it is refreshed, then the change shows.
        advance(&fx, fresh_ms - (fx.sim.now_ms() - t0));
        assert_eq!(fx.mcp(&code, &list(json!(2))).status, 200, "{setting:?}: the stale answer");
        idle(&fx);
        let r = fx.mcp(&code, &list(json!(3)));
        assert_rpc_error(&r, 403, -32600, json!(3), "Server inactive");
        fx.assert_invariants();
    }
}

#[test]
fn a_memo_of_zero_seconds_looks_every_time() {
    let fx = Fx::new(12);
    fx.sim.set_setting("DEFINITION_MEMO_SECONDS", "0");
    let (server_id, code) = echo_server(&fx);
    assert_eq!(fx.mcp(&code, &list(json!(1))).status, 200);
    deactivate_elsewhere(&fx, &server_id, &code);
    assert_rpc_error(&fx.mcp(&code, &list(json!(2))), 403, -32600, json!(2), "Server inactive");
}

#[test]
fn a_failed_refresh_keeps_the_stale_copy_at_most_twice_the_window() {
    let fx = Fx::new(13);
    let (server_id, code) = echo_server(&fx);
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&code, &list(json!(0))).status, 200);
    let t0 = fx.sim.now_ms();
    deactivate_elsewhere(&fx, &server_id, &code);
    advance(&fx, 5_000);
    // Storage fails: each refresh fails, the copy is served, but never past twice the window.
    fx.sim.set_faults(Faults { kv_error: 1.0, d1_error: 1.0, ..Faults::default() });
    for i in 0..4 {
        let r = fx.mcp(&code, &list(json!(i)));
        assert_eq!(r.status, 200, "{}", r.text());
        idle(&fx);
        advance(&fx, 1_000);
    }
    advance(&fx, 10_000 - (fx.sim.now_ms() - t0));
    let r = fx.mcp(&code, &list(json!(9)));
    assert_rpc_error(&r, 503, -32603, json!(9), "Service unavailable");
    fx.sim.set_faults(Faults::default());
    assert_rpc_error(&fx.mcp(&code, &list(json!(10))), 403, -32600, json!(10), "Server inactive");
    assert!(fx.sim.logs().iter().any(|l| l.contains("refreshing a definition")), "the failed refresh was not logged");
}

#[test]
fn console_changes_take_effect_at_once_on_the_isolate_that_made_them() {
    let fx = Fx::new(14);
    let app = fx.workflow("Short", "app-key-2");
    let code = fx.publish(&app);
    let server_id = fx.console(Method::Get, &format!("/apps/{app}/server"), None).json().unwrap_or_default()["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(fx.mcp(&code, &list(json!(1))).status, 200);
    let put = |status: &str| {
        let body = json!({"id": server_id, "status": status});
        let r = fx.console(Method::Put, &format!("/apps/{app}/server"), Some(&body));
        assert_eq!(r.status, 200, "{}", r.text());
    };
    put("inactive");
    assert_rpc_error(&fx.mcp(&code, &list(json!(2))), 403, -32600, json!(2), "deactivated by its administrator");
    assert!(fx.dify.requests.borrow().is_empty());
    let r = fx.call(&code, "Echo", json!({"text": "x"}));
    assert_eq!(r.status, 403, "an inactive server called its backend");
    assert!(fx.dify.requests.borrow().is_empty());
    put("active");
    assert_eq!(fx.mcp(&code, &list(json!(3))).status, 200);
    // Rotation: the old code is unknown at once, the new one works.
    let rotated = fx.console(Method::Post, &format!("/apps/{server_id}/server/refresh"), None);
    assert_eq!(rotated.status, 200, "{}", rotated.text());
    let new_code = rotated.json().unwrap_or_default()["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(new_code.clone());
    assert_rpc_error(&fx.mcp(&code, &list(json!(4))), 404, -32600, json!(4), "Server not found");
    assert_eq!(fx.mcp(&new_code, &list(json!(5))).status, 200);
    // Deletion.
    assert_eq!(fx.console(Method::Delete, &format!("/servers/{server_id}"), None).status, 200);
    assert_rpc_error(&fx.mcp(&new_code, &list(json!(6))), 404, -32600, json!(6), "Server not found");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Client keys

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[track_caller]
fn assert_key_refusal(r: &ClientResponse, id: Value, invalid: bool, needle: &str) {
    assert_rpc_error(r, 401, -32600, id, needle);
    let challenge =
        if invalid { "Bearer realm=\"flowgate\", error=\"invalid_token\"" } else { "Bearer realm=\"flowgate\"" };
    assert_eq!(r.headers.get("www-authenticate").as_deref(), Some(challenge));
    let message = r.json().unwrap_or_default()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("Unauthorized: "), "{message}");
}

#[test]
fn a_key_server_refuses_every_request_without_its_key_and_writes_nothing() {
    let fx = Fx::new(15);
    fx.sim.set_setting("ALLOWED_ORIGINS", ALLOWED);
    let (server_id, code) = echo_server(&fx);
    let key = key_for(&fx, &server_id, "alice");
    let (other_id, other_code) = echo_server_named(&fx, "Other", "app-key-3");
    let other_key = key_for(&fx, &other_id, "alice");
    idle(&fx);
    let users = || d1(&fx, "SELECT COUNT(*) AS n FROM end_users", vec![])[0]["n"].as_i64();
    let users_before = users();

    let none = fx.call(&code, "Echo", json!({"text": "x"}));
    assert_key_refusal(&none, json!(7), false, "requires a client key; send it as `Authorization: Bearer fgk_…`");
    let a = bearer(&format!("fgk_{}", "q".repeat(32)));
    let wrong = mcp_as(&fx, &code, &[("authorization", &a)], &call_msg("Echo", json!({"text": "x"}), json!("w")));
    assert_key_refusal(&wrong, json!("w"), true, "not valid for this MCP server (it may have been revoked)");
    for token in
        [ADMIN.to_string(), sha256_hex(&key), format!("{key}x"), key[..key.len() - 1].to_string(), other_key.clone()]
    {
        let a = bearer(&token);
        let r = mcp_as(&fx, &code, &[("authorization", &a)], &ping(json!(1)));
        assert_key_refusal(&r, json!(1), true, "may have been revoked");
    }
    let basic = mcp_as(&fx, &code, &[("authorization", "Basic YTpi")], &ping(json!(2)));
    assert_key_refusal(&basic, json!(2), false, "not a bearer token");
    // Every kind of message: the handshake, notifications, batches, with CORS for a browser.
    let init = json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    assert_key_refusal(&fx.mcp(&code, &init), json!(3), false, "requires a client key");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_key_refusal(&fx.mcp(&code, &note), Value::Null, false, "requires a client key");
    let r = mcp_as(&fx, &code, &[("mcp-protocol-version", "2025-03-26")], &json!([ping(json!(1))]));
    assert_key_refusal(&r, Value::Null, false, "requires a client key");
    let r = mcp_as(&fx, &code, &[("origin", ALLOWED)], &ping(json!(4)));
    assert_key_refusal(&r, json!(4), false, "requires a client key");
    assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some(ALLOWED));
    idle(&fx);
    assert!(fx.dify.requests.borrow().is_empty(), "a refused call reached the backend");
    assert_eq!(users(), users_before, "a refusal recorded an end user");
    let used = d1(&fx, "SELECT last_used_at FROM server_keys WHERE server_id = ?1", vec![text(&server_id)]);
    assert_eq!(used[0]["last_used_at"], Value::Null, "a refusal recorded a key use");
    // An inactive key server tells a caller without its key nothing more than 401.
    d1(&fx, "UPDATE mcp_servers SET status = 'inactive' WHERE id = ?1", vec![text(&other_id)]);
    fx.sim.evict_isolate();
    let r = fx.mcp(&other_code, &ping(json!(5)));
    assert_key_refusal(&r, json!(5), false, "requires a client key");

    // The key, its scheme in any case: served, and its name is the backend's user.
    let a = format!("bEaReR {key}");
    let r = mcp_as(&fx, &code, &[("authorization", &a)], &call_msg("Echo", json!({"text": "hi"}), json!(6)));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    assert_eq!(dify_users(&fx), ["alice"]);
    fx.assert_invariants();
}

#[test]
fn a_revoked_key_stops_at_once_and_a_key_use_is_written_once_an_hour() {
    let fx = Fx::new(16);
    let (server_id, code) = echo_server(&fx);
    let key = key_for(&fx, &server_id, "erin");
    let frank = new_key(&fx, &server_id, "frank");
    let with = |k: &str, id: i64| {
        let a = bearer(k);
        mcp_as(&fx, &code, &[("authorization", &a)], &ping(json!(id)))
    };
    assert_eq!(with(&key, 1).status, 200);
    idle(&fx);
    let last_used = || {
        d1(&fx, "SELECT last_used_at FROM server_keys WHERE name = 'erin'", vec![])
            .first()
            .map(|r| r["last_used_at"].clone())
            .unwrap_or_default()
    };
    let first = last_used();
    assert_eq!(first.as_i64(), Some((fx.sim.now_ms() / 1000) as i64), "the use was not recorded");
    // Marked: a write within the hour would overwrite the mark.
    d1(&fx, "UPDATE server_keys SET last_used_at = 7 WHERE name = 'erin'", vec![]);
    advance(&fx, 3_599_000);
    assert_eq!(with(&key, 2).status, 200);
    idle(&fx);
    assert_eq!(last_used(), json!(7), "a key use was written twice within the hour");
    advance(&fx, 1_000);
    assert_eq!(with(&key, 3).status, 200);
    idle(&fx);
    assert_eq!(last_used().as_i64(), Some((fx.sim.now_ms() / 1000) as i64), "not written after the hour");

    let ids = fx.console(Method::Get, &format!("/servers/{server_id}/keys"), None).json().unwrap_or_default();
    let erin = ids["data"].as_array().and_then(|a| a.iter().find(|k| k["name"] == "erin")).cloned().unwrap_or_default();
    let r = fx.console(
        Method::Delete,
        &format!("/servers/{server_id}/keys/{}", erin["id"].as_str().unwrap_or_default()),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_key_refusal(&with(&key, 4), json!(4), true, "may have been revoked");
    assert_eq!(with(&frank, 5).status, 200);
    // Back to mode none: the server opens at once, and a key is no identity there.
    let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "none"})));
    assert_eq!(r.status, 200);
    let r = mcp_as(&fx, &code, &[("authorization", "Basic YTpi")], &call_msg("Echo", json!({"text": "x"}), json!(6)));
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    let users = dify_users(&fx);
    assert!(users.len() == 1 && users[0].starts_with("mcp-"), "{users:?}");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// OAuth servers (`resource_server`)

/// A server in mode `oauth` with the fixture's issuer (and `scopes`); PUBLIC_URL is the base.
fn oauth_server(fx: &Fx, name: &str, api_key: &str, oauth: Value) -> (String, String) {
    fx.sim.set_setting("PUBLIC_URL", BASE);
    let (id, code) = echo_server_named(fx, name, api_key);
    let mut settings = json!({"issuer": ISSUER});
    if let (Some(s), Some(extra)) = (settings.as_object_mut(), oauth.as_object()) {
        s.extend(extra.clone());
    }
    let r = fx.console(Method::Put, &format!("/servers/{id}/auth"), Some(&json!({"mode": "oauth", "oauth": settings})));
    assert_eq!(r.status, 200, "{}", r.text());
    (id, code)
}

fn metadata_url(code: &str) -> String {
    format!("{BASE}/.well-known/oauth-protected-resource/mcp/server/{code}/mcp")
}

fn token(fx: &Fx, claims: Value) -> String {
    let t = fx.issuer.mint(&claims);
    fx.secret(&t);
    t
}

/// The invariants, but with an oauth server's code allowed in its own answers (its challenge
/// and metadata name its URL, which the client already has); never in logs.
fn assert_oauth_invariants(fx: &Fx) {
    assert_oauth_invariants_with(fx, None);
}

/// [`assert_oauth_invariants`] with the JSON-RPC endpoint's path prefix given (the metadata
/// beside the endpoint is under `/mcp/` but is not JSON-RPC).
fn assert_oauth_invariants_with(fx: &Fx, mcp_path: Option<&str>) {
    let [all, mut codes] = fx.specs();
    codes.exempt_paths.extend(["/mcp/server/".to_string(), "/.well-known/".to_string()]);
    for mut spec in [all, codes] {
        spec.mcp_path = mcp_path.map(str::to_string);
        fx.sim.assert_invariants(&spec);
    }
}

fn jwks_fetches(fx: &Fx) -> usize {
    fx.issuer.requests.borrow().iter().filter(|r| r.path.starts_with("/jwks")).count()
}

fn oauth_call(fx: &Fx, code: &str, tok: Option<&str>, id: Value) -> ClientResponse {
    let a = tok.map(bearer);
    let mut extra = vec![];
    if let Some(a) = &a {
        extra.push(("authorization", a.as_str()));
    }
    mcp_as(fx, code, &extra, &call_msg("Echo", json!({"text": "x"}), id))
}

#[test]
fn an_oauth_server_without_public_url_answers_503_naming_it() {
    let fx = Fx::new(17);
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({}));
    fx.sim.set_setting("PUBLIC_URL", "");
    fx.sim.evict_isolate();
    let r = oauth_call(&fx, &code, Some("x.y.z"), json!(1));
    assert_rpc_error(&r, 503, -32603, json!(1), "the PUBLIC_URL variable, which is not set");
    let r = fx.sim.request(request(Method::Get, &metadata_url(&code), &[], None));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json().unwrap_or_default()["error"], "misconfigured");
    assert!(fx.dify.requests.borrow().is_empty());
}

#[test]
fn oauth_refusals_carry_the_challenge_and_do_no_backend_work() {
    let fx = Fx::new(18);
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({}));
    let (_, scoped) = oauth_server(&fx, "Scoped", "app-key-4", json!({"scopes": ["mcp:tools", "read"]}));
    let aud = Fx::mcp_url(&code);
    let now = fx.sim.now_ms() / 1000;
    let good = json!({"iss": ISSUER, "aud": aud, "sub": "mallory", "iat": now, "exp": now + 300});
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    let meta = metadata_url(&code);
    let r = oauth_call(&fx, &code, None, json!("none"));
    assert_rpc_error(&r, 401, -32600, json!("none"), "requires an OAuth access token");
    assert_eq!(r.headers.get("www-authenticate"), Some(format!("Bearer resource_metadata=\"{meta}\"")));
    let r = mcp_as(&fx, &code, &[("authorization", "Basic YTpi")], &ping(json!(2)));
    assert_rpc_error(&r, 401, -32600, json!(2), "not a bearer token");

    let forged = SimKey { pkcs8: b"another key".to_vec(), ..fx.issuer.key.clone() };
    let cases = [
        ("wrong signature", forged.jwt(&good), "the token's signature does not verify"),
        ("expired", token(&fx, with("exp", json!(now - 61))), "the token has expired"),
        ("not yet valid", token(&fx, with("nbf", json!(now + 300))), "the token is not valid yet (nbf)"),
        (
            "wrong audience",
            token(&fx, with("aud", json!(Fx::mcp_url(&scoped)))),
            "the token's audience is not this MCP server",
        ),
        (
            "wrong issuer",
            token(&fx, with("iss", json!("https://evil.example"))),
            "the token was issued by another authorization server",
        ),
        (
            "unknown kid",
            SimKey::new("never-published", &fx.issuer.key.alg).jwt(&good),
            "no key of the issuer's JWKS matches the token's kid",
        ),
        ("not a JWT", format!("fgk_{}", "q".repeat(32)), "the access token is not a JWT (header.payload.signature)"),
    ];
    for (what, tok, description) in cases {
        fx.secret(&tok);
        let r = oauth_call(&fx, &code, Some(&tok), json!(what));
        assert_rpc_error(&r, 401, -32600, json!(what), description);
        let challenge = format!(
            "Bearer resource_metadata=\"{meta}\", error=\"invalid_token\", error_description=\"{description}\""
        );
        assert_eq!(r.headers.get("www-authenticate"), Some(challenge), "{what}");
    }
    // Within the 60 s of clock skew an expired token still passes.
    let r = oauth_call(&fx, &code, Some(&token(&fx, with("exp", json!(now - 59)))), json!("skew"));
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    assert_eq!(dify_users(&fx), ["mallory"]);

    // Scopes: a good token without them is 403 naming them; one with them passes.
    let s_aud = Fx::mcp_url(&scoped);
    let few = token(&fx, json!({"iss": ISSUER, "aud": s_aud, "sub": "x", "exp": now + 300, "scope": "read"}));
    let r = oauth_call(&fx, &scoped, Some(&few), json!("scope"));
    assert_rpc_error(&r, 403, -32600, json!("scope"), "Forbidden: the token lacks a scope");
    let smeta = metadata_url(&scoped);
    assert_eq!(
        r.headers.get("www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{smeta}\", error=\"insufficient_scope\", error_description=\"the token lacks a scope this MCP server requires\", scope=\"mcp:tools read\""))
    );
    // A forged token short of a scope is 401: the signature is judged first.
    let forged_few = forged.jwt(&json!({"iss": ISSUER, "aud": s_aud, "sub": "x", "exp": now + 300, "scope": "read"}));
    assert_eq!(oauth_call(&fx, &scoped, Some(&forged_few), json!(1)).status, 401);
    let enough =
        token(&fx, json!({"iss": ISSUER, "aud": s_aud, "sub": "x", "exp": now + 300, "scp": ["read", "mcp:tools"]}));
    assert_eq!(mcp_as(&fx, &scoped, &[("authorization", &bearer(&enough))], &ping(json!(1))).status, 200);
    assert_eq!(dify_users(&fx), ["mallory"], "a refused call reached the backend");
    assert_oauth_invariants(&fx);
}

#[test]
fn a_verified_token_is_remembered_until_it_expires_and_only_for_its_server() {
    let fx = Fx::new(19);
    let (_, a) = oauth_server(&fx, "Echo", "app-key-1", json!({}));
    let (_, b) = oauth_server(&fx, "Other", "app-key-3", json!({"audience": Fx::mcp_url(&a)}));
    let now = fx.sim.now_ms() / 1000;
    let tok = token(&fx, json!({"iss": ISSUER, "aud": Fx::mcp_url(&a), "sub": "alice", "exp": now + 120}));
    let verifies = || fx.sim.trace().iter().filter(|l| l.contains("crypto verify")).count();
    let auth = bearer(&tok);
    assert_eq!(mcp_as(&fx, &a, &[("authorization", &auth)], &ping(json!(1))).status, 200);
    let (v, j) = (verifies(), jwks_fetches(&fx));
    assert_eq!((v, j), (1, 1));
    for i in 0..3 {
        assert_eq!(mcp_as(&fx, &a, &[("authorization", &auth)], &ping(json!(i))).status, 200);
    }
    assert_eq!((verifies(), jwks_fetches(&fx)), (1, 1), "a remembered token was verified again");
    // Server b takes the same audience: the token is checked afresh there, not taken from a's memo.
    assert_eq!(mcp_as(&fx, &b, &[("authorization", &auth)], &ping(json!(5))).status, 200);
    assert_eq!(verifies(), 2, "a token remembered for one server was trusted by another");
    // Past exp and its skew: refused, though remembered.
    advance(&fx, 181_000);
    let r = mcp_as(&fx, &a, &[("authorization", &auth)], &ping(json!(6)));
    assert_rpc_error(&r, 401, -32600, json!(6), "the token has expired");
    assert_oauth_invariants(&fx);
}

#[test]
fn the_jwks_is_kept_refetched_for_an_unknown_kid_at_most_every_30_s_and_after_an_hour() {
    let fx = Fx::new(20);
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({}));
    let aud = Fx::mcp_url(&code);
    let fresh = |fx: &Fx, key: &SimKey, sub: &str| {
        let now = fx.sim.now_ms() / 1000;
        let t = key.jwt(&json!({"iss": ISSUER, "aud": aud, "sub": sub, "exp": now + 7200}));
        fx.secret(&t);
        t
    };
    let status = |fx: &Fx, t: &str| mcp_as(fx, &code, &[("authorization", &bearer(t))], &ping(json!(1))).status;
    let issuer_key = fx.issuer.key.clone();
    assert_eq!(status(&fx, &fresh(&fx, &issuer_key, "a")), 200);
    assert_eq!(jwks_fetches(&fx), 1);
    let stranger = SimKey::new("rotated-in", &issuer_key.alg);
    for _ in 0..3 {
        assert_eq!(status(&fx, &fresh(&fx, &stranger, "b")), 401);
    }
    assert_eq!(jwks_fetches(&fx), 1, "an unknown kid within 30 s of the fetch fetched again");
    advance(&fx, 29_000);
    assert_eq!(status(&fx, &fresh(&fx, &stranger, "b")), 401);
    assert_eq!(jwks_fetches(&fx), 1);
    advance(&fx, 1_000);
    assert_eq!(status(&fx, &fresh(&fx, &stranger, "b")), 401);
    assert_eq!(jwks_fetches(&fx), 2, "no refetch 30 s after the last fetch");
    // Known keys are used for an hour from the last fetch, then fetched again.
    advance(&fx, 3_599_000);
    assert_eq!(status(&fx, &fresh(&fx, &issuer_key, "c")), 200);
    assert_eq!(jwks_fetches(&fx), 2);
    advance(&fx, 1_000);
    assert_eq!(status(&fx, &fresh(&fx, &issuer_key, "d")), 200);
    assert_eq!(jwks_fetches(&fx), 3, "keys older than an hour were trusted");
    assert_oauth_invariants(&fx);
}

#[test]
fn an_unreachable_issuer_is_503_and_asked_at_most_every_30_s() {
    let fx = Fx::new(21);
    fx.sim.set_setting("PUBLIC_URL", BASE);
    let (id, code) = echo_server(&fx);
    let down = "https://down.test";
    let r = fx.console(
        Method::Put,
        &format!("/servers/{id}/auth"),
        Some(&json!({"mode": "oauth", "oauth": {"issuer": down}})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let tok = SimKey::new("k", &fx.issuer.key.alg)
        .jwt(&json!({"iss": down, "aud": Fx::mcp_url(&code), "sub": "a", "exp": fx.sim.now_ms() / 1000 + 600}));
    let asked = || fx.sim.outbound().iter().filter(|o| o.origin == down).count();
    let r = mcp_as(&fx, &code, &[("authorization", &bearer(&tok))], &ping(json!(1)));
    assert_rpc_error(&r, 503, -32603, json!(1), "the authorization server's keys could not be had");
    let first = asked();
    assert!(first >= 1);
    for i in 0..3 {
        let r = mcp_as(&fx, &code, &[("authorization", &bearer(&tok))], &ping(json!(i)));
        assert_eq!(r.status, 503);
    }
    assert_eq!(asked(), first, "an unreachable issuer was asked on every request");
    advance(&fx, 30_000);
    mcp_as(&fx, &code, &[("authorization", &bearer(&tok))], &ping(json!(9)));
    assert!(asked() > first, "never asked again");
    assert_oauth_invariants(&fx);
}

#[test]
fn the_protected_resource_metadata_is_served_for_oauth_servers_only() {
    let fx = Fx::new(22);
    let (id, code) = oauth_server(&fx, "Echo", "app-key-1", json!({"scopes": ["mcp:tools"]}));
    let expected = json!({
        "resource": Fx::mcp_url(&code), "authorization_servers": [ISSUER], "scopes_supported": ["mcp:tools"],
        "bearer_methods_supported": ["header"], "resource_name": "Echo",
    });
    for url in [metadata_url(&code), format!("{BASE}/mcp/server/{code}/.well-known/oauth-protected-resource")] {
        let r = fx.sim.request(request(Method::Get, &url, &[("host", "evil.example")], None));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers.get("access-control-allow-origin").as_deref(), Some("*"));
        assert_eq!(r.json(), Some(expected.clone()));
    }
    let r = fx.sim.request(request(Method::Post, &metadata_url(&code), &[], None));
    assert_eq!(r.status, 405, "{}", r.text());
    for url in [metadata_url(UNKNOWN_CODE), metadata_url("short")] {
        let r = fx.sim.request(request(Method::Get, &url, &[], None));
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(r.json().unwrap_or_default()["error"], "not_found");
    }
    let r = fx.console(Method::Put, &format!("/servers/{id}/auth"), Some(&json!({"mode": "none"})));
    assert_eq!(r.status, 200);
    let r = fx.sim.request(request(Method::Get, &metadata_url(&code), &[], None));
    assert_eq!(r.status, 404, "{}", r.text());
    assert_oauth_invariants_with(&fx, Some("/mcp/server/none/"));
}

// ---------------------------------------------------------------------------------------------
// Rate limits

/// Moves the clock to the start of the limiter's next window of `period_ms`.
fn to_window_start(fx: &Fx, period_ms: u64) {
    let now = fx.sim.now_ms();
    advance(fx, period_ms - now % period_ms);
}

#[test]
fn calls_count_against_the_limit_and_memory_only_answers_do_not() {
    let fx = Fx::new(23);
    fx.sim.set_rate_limit("MCP_RATE_LIMIT", 3, 60_000);
    let (server_id, code) = echo_server(&fx);
    let key = key_for(&fx, &server_id, "k");
    let auth = bearer(&key);
    let go = |body: &Value| mcp_as(&fx, &code, &[("authorization", &auth)], body);
    to_window_start(&fx, 60_000);
    // Answered from memory: not counted, however many.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for i in 0..5 {
        assert_eq!(go(&ping(json!(i))).status, 200);
        assert_eq!(go(&list(json!(i))).status, 200);
        assert_eq!(go(&init).status, 200);
        let level = json!({"jsonrpc": "2.0", "id": i, "method": "logging/setLevel", "params": {"level": "info"}});
        assert_eq!(go(&level).status, 200);
        assert_eq!(go(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).status, 202);
    }
    assert_eq!(limiter_calls(&fx), 0, "memory-only answers were counted");
    // A call counts, even of an unknown tool, and a cancellation too.
    assert_eq!(go(&call_msg("no_such_tool", json!({}), json!(1))).status, 200);
    assert_eq!(
        go(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})).status,
        202
    );
    assert_eq!(go(&call_msg("Echo", json!({"text": "x"}), json!(2))).status, 200);
    assert_eq!(limiter_calls(&fx), 3);
    let r = go(&call_msg("Echo", json!({"text": "x"}), json!("over")));
    assert_rpc_error(
        &r,
        429,
        -32000,
        json!("over"),
        "Rate limited: too many requests for this MCP server; retry after 60 s",
    );
    assert_eq!(r.headers.get("retry-after").as_deref(), Some("60"));
    // Over the limit, the client's own key is not even checked: 429 whoever asks.
    let r = mcp_as(&fx, &code, &[], &call_msg("Echo", json!({"text": "x"}), json!(5)));
    assert_eq!(r.status, 429);
    assert_eq!(dify_users(&fx).len(), 1, "a refused call reached the backend");
    // Another server has its own budget.
    let (_, other) = echo_server_named(&fx, "Other", "app-key-3");
    assert_eq!(fx.call(&other, "Other", json!({"text": "x"})).status, 200);
    // The next window starts afresh.
    to_window_start(&fx, 60_000);
    assert_eq!(go(&call_msg("Echo", json!({"text": "x"}), json!(6))).status, 200);
    fx.assert_invariants();
}

#[test]
fn a_refused_code_is_refused_from_memory_for_one_second() {
    let fx = Fx::new(24);
    fx.sim.set_rate_limit("MCP_RATE_LIMIT", 1, 500);
    fx.sim.set_setting("RATE_LIMIT_PERIOD_SECONDS", "30");
    let (_, code) = echo_server(&fx);
    to_window_start(&fx, 1_000);
    let go = |id: i64| fx.mcp(&code, &call_msg("no_such_tool", json!({}), json!(id)));
    assert_eq!(go(1).status, 200);
    let r = go(2);
    assert_eq!(r.status, 429);
    assert_eq!(r.headers.get("retry-after").as_deref(), Some("30"));
    assert!(r.text().contains("retry after 30 s"), "{}", r.text());
    let calls = limiter_calls(&fx);
    // The limiter's next window starts after 500 ms, but the refusal holds for the second.
    advance(&fx, 999);
    assert_eq!(go(3).status, 429);
    assert_eq!(limiter_calls(&fx), calls, "the limiter was asked within the second");
    advance(&fx, 1);
    assert_eq!(go(4).status, 200, "refused from memory past the second");
    assert_eq!(limiter_calls(&fx), calls + 1);
    fx.assert_invariants();
}

#[test]
fn each_message_of_a_batch_counts_as_if_sent_alone() {
    let fx = Fx::new(25);
    fx.sim.set_rate_limit("MCP_RATE_LIMIT", 2, 60_000);
    let (_, code) = echo_server(&fx);
    to_window_start(&fx, 60_000);
    let old = [("mcp-protocol-version", "2025-03-26")];
    let three = json!([call_msg("nope", json!({}), json!(1)), ping(json!(2)), call_msg("nope", json!({}), json!(3))]);
    assert_eq!(mcp_as(&fx, &code, &old, &three).status, 200);
    assert_eq!(limiter_calls(&fx), 2, "{three}");
    let r = mcp_as(&fx, &code, &old, &json!([call_msg("nope", json!({}), json!(4))]));
    assert_rpc_error(&r, 429, -32000, Value::Null, "Rate limited");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Usage

#[test]
fn tool_calls_are_counted_in_memory_and_flushed_to_d1_once_a_period() {
    let fx = Fx::new(26);
    let (server_id, code) = echo_server(&fx);
    let (keyed_id, keyed) = echo_server_named(&fx, "Keyed", "app-key-5");
    key_for(&fx, &keyed_id, "k");
    let rows = |fx: &Fx| d1(fx, "SELECT tool, calls, errors, streamed FROM usage_minute ORDER BY tool", vec![]);
    // The first MCP request starts this isolate's period.
    assert_eq!(fx.mcp(&code, &ping(json!(0))).status, 200);
    let t0 = fx.sim.now_ms();
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": "a"})))["result"]["isError"], false);
    let json_only = [("accept", "application/json")];
    let r = mcp_as(&fx, &code, &json_only, &call_msg("Echo", json!({}), json!(2)));
    assert_eq!(last(&r)["result"]["isError"], true, "{}", r.text());
    assert_eq!(fx.call(&code, "Nope", json!({})).status, 200);
    for body in [list(json!(1)), ping(json!(2))] {
        assert_eq!(fx.mcp(&code, &body).status, 200);
    }
    assert_eq!(fx.call(&keyed, "Keyed", json!({"text": "a"})).status, 401);
    idle(&fx);
    advance(&fx, 59_999 - (fx.sim.now_ms() - t0));
    assert_eq!(fx.mcp(&code, &ping(json!(3))).status, 200);
    idle(&fx);
    assert_eq!(rows(&fx), Vec::<Value>::new(), "flushed before the period ended");
    advance(&fx, 1);
    assert_eq!(fx.mcp(&code, &ping(json!(4))).status, 200);
    idle(&fx);
    assert_eq!(
        rows(&fx),
        [
            json!({"tool": "(unknown)", "calls": 1, "errors": 1, "streamed": 0}),
            json!({"tool": "Echo", "calls": 2, "errors": 1, "streamed": 1}),
        ]
    );
    // The console reads it back, flushing its own isolate's share first.
    assert_eq!(last(&fx.call(&code, "Echo", json!({"text": "b"})))["result"]["isError"], false);
    let r = fx.console(Method::Get, &format!("/servers/{server_id}/usage"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap_or_default();
    assert_eq!(v["total"]["calls"], 4, "{v}");
    assert_eq!(v["total"]["errors"], 2, "{v}");
    assert_eq!(v["flush_seconds"], 60, "{v}");
    let r = fx.console(Method::Get, &format!("/servers/{keyed_id}/usage"), None);
    assert_eq!(r.json().unwrap_or_default()["total"]["calls"], 0, "a refused call was counted");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Routing, request ids and logs

#[test]
fn every_answer_has_a_fresh_request_id_and_refusals_are_logged_without_codes() {
    let fx = Fx::new(27);
    let (_, code) = echo_server(&fx);
    let before = fx.sim.logs().len();
    let answers = [
        fx.sim.request(request(Method::Get, &format!("{BASE}/healthz"), &[], None)),
        fx.sim.request(request(Method::Get, &format!("{BASE}/nope"), &[], None)),
        fx.mcp(&code, &list(json!(1))),
        send(&fx, Method::Get, &code, &[], Body::Empty),
        mcp_as(&fx, &code, &[("content-type", "text/plain")], &ping(json!(1))),
        fx.console(Method::Get, "/apps", None),
        fx.console_as("wrong-token", Method::Get, "/apps", None),
    ];
    assert_eq!(answers[0].json(), Some(json!({"status": "ok", "version": crate::shell::VERSION})));
    assert_eq!(answers[1].status, 404);
    assert_eq!(answers[1].json().unwrap_or_default()["message"], "no route GET \"/nope\"");
    let ids: Vec<String> = answers.iter().map(|r| r.headers.get("x-request-id").unwrap_or_default()).collect();
    for id in &ids {
        assert!(id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id:?}");
    }
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    let lines: Vec<Value> = fx.sim.logs()[before..].iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let line_of =
        |i: usize| lines.iter().find(|l| l["request_id"] == ids[i].as_str() && l["msg"] == "request").cloned();
    // Refusals and failures are logged, with the path's code masked; successes are not.
    for (i, path, status) in [
        (1, "/nope".to_string(), 404),
        (3, "/mcp/server/<code>/mcp".to_string(), 405),
        (4, "/mcp/server/<code>/mcp".to_string(), 415),
        (6, "/console/api/apps".to_string(), 401),
    ] {
        let line = line_of(i).unwrap_or_else(|| panic!("no line for answer {i}: {lines:?}"));
        assert_eq!(line["path"], path.as_str());
        assert_eq!(line["status"], status);
        assert_eq!(line["level"], "info");
    }
    for i in [0, 2, 5] {
        assert_eq!(line_of(i), None, "answer {i} was logged");
    }
    // A code in another spelling is masked too.
    let r = fx.sim.request(request(Method::Post, &format!("{BASE}/y/a{code}"), &[], None));
    assert_eq!(r.status, 404);
    assert!(!r.text().contains(&code), "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn log_requests_all_logs_successes_too() {
    let fx = Fx::new(28);
    fx.sim.set_setting("LOG_REQUESTS", "all");
    let (_, code) = echo_server(&fx);
    let r = fx.mcp(&code, &list(json!(1)));
    let id = r.headers.get("x-request-id").unwrap_or_default();
    let line: Value = fx
        .sim
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["request_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no line for {id}"));
    assert_eq!(line["path"], "/mcp/server/<code>/mcp");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["status"], 200);
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Revisions

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}})
}

#[test]
fn the_stateless_revision_repeats_the_method_in_headers_and_maps_errors_to_statuses() {
    let fx = Fx::new(29);
    let (_, code) = echo_server(&fx);
    let v26 = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list")];
    let r = mcp_as(
        &fx,
        &code,
        &v26,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap_or_default();
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(v["result"]["tools"][0]["name"], "Echo");
    let wrong = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call")];
    let r = mcp_as(
        &fx,
        &code,
        &wrong,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta()}}),
    );
    assert_rpc_error(&r, 400, -32020, json!(2), "Mcp-Method");
    let r = mcp_as(
        &fx,
        &code,
        &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "initialize")],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"_meta": meta()}}),
    );
    assert_rpc_error(&r, 404, -32601, json!(3), "initialize");
    // The older revisions answer an unknown method with HTTP 200.
    let r = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/explode"}));
    assert_rpc_error(&r, 200, -32601, json!(4), "tools/explode");
    let r = mcp_as(&fx, &code, &[("mcp-protocol-version", "1999-01-01")], &list(json!(5)));
    assert_rpc_error(&r, 400, -32600, json!(5), "Unsupported MCP-Protocol-Version: 1999-01-01");
    // A 2026-07-28 call over at once is answered whole, even to a client that takes SSE.
    let h = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "Echo")];
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "Echo", "arguments": {"text": "hi"}, "_meta": meta()}});
    let r = mcp_as(&fx, &code, &h, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Faults

#[test]
fn under_storage_faults_every_answer_is_a_precise_one() {
    let mut happened = (0, 0, 0);
    for seed in crate::sim::seeds(0..12) {
        let fx = Fx::new(seed);
        fx.sim.set_rate_limit("MCP_RATE_LIMIT", 50, 60_000);
        let (server_id, code) = echo_server(&fx);
        let key = key_for(&fx, &server_id, "k");
        let (_, open) = echo_server_named(&fx, "Open", "app-key-6");
        fx.sim.set_faults(Faults {
            kv_error: 0.2,
            kv_latency: 0.3,
            kv_latency_max_ms: 200,
            d1_error: 0.2,
            d1_latency: 0.3,
            d1_latency_max_ms: 200,
            isolate_evict: 0.3,
            body_truncate: 0.1,
            body_reset: 0.1,
            fetch_reset: 0.1,
            ..Faults::default()
        });
        let auth = bearer(&key);
        for i in 0..12 {
            let answers = [
                mcp_as(&fx, &code, &[("authorization", &auth)], &call_msg("Echo", json!({"text": "x"}), json!(i))),
                fx.call(&open, "Open", json!({"text": "y"})),
                fx.mcp(&open, &list(json!(i))),
                fx.mcp(&code, &ping(json!(i))),
                fx.mcp(UNKNOWN_CODE, &ping(json!(i))),
            ];
            for (n, r) in answers.iter().enumerate() {
                let v = last(r);
                let ok = match r.status {
                    200 => v["result"].is_object() || v["error"]["message"].is_string(),
                    401 => n == 3,
                    404 => n == 4,
                    503 => v["error"]["message"].as_str().is_some_and(|m| m.starts_with("Service unavailable")),
                    _ => false,
                };
                assert!(ok, "SIM_SEED={seed}: request {i}.{n}: {} {}", r.status, r.text());
                if r.status == 200 && n < 2 {
                    // A call's failure is a tool error with a message, never a bare failure.
                    let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
                    assert!(!text.is_empty() || v["error"].is_object(), "SIM_SEED={seed}: {}", r.text());
                }
            }
            advance(&fx, 700);
        }
        let c = fx.sim.fault_counts();
        happened = (
            happened.0 + c.happened("kv_error"),
            happened.1 + c.happened("d1_error"),
            happened.2 + c.happened("isolate_evict"),
        );
        fx.sim.set_faults(Faults::default());
        fx.assert_invariants();
    }
    // Replaying one seed (`SIM_SEED`) need not meet every kind of fault.
    if crate::sim::seeds(0..12).len() == 12 {
        assert!(happened.0 > 0 && happened.1 > 0 && happened.2 > 0, "faults that never happened: {happened:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Cancellation

/// A request whose body arrives `ms` of virtual time after it starts (a client that sends it later).
fn later(code: &str, extra: &[(&str, &str)], body: &Value, ms: u64) -> Request {
    let bytes = body.to_string().into_bytes();
    let stream = futures::stream::once(async move {
        crate::runtime::sleep(ms).await;
        Ok(bytes)
    });
    Request {
        method: Method::Post,
        url: Fx::mcp_url(code),
        headers: headers_with(extra).into_iter().collect(),
        body: Body::Stream(Box::pin(stream)),
    }
}

#[test]
fn a_cancel_stops_the_run_of_its_own_caller_only() {
    for (canceller, stopped) in [("198.51.100.7", true), ("203.0.113.9", false)] {
        let fx = Fx::new(30);
        let app = dify::App { event_delay_ms: 2_000, ..dify::App::new("workflow") };
        let app_id = fx.dify_app("Slow", "workflow", "app-key-7", app);
        let code = fx.publish(&app_id);
        let call =
            later(&code, &[("cf-connecting-ip", "198.51.100.7")], &call_msg("Slow", json!({"text": "x"}), json!(7)), 0);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
        let cancel = later(&code, &[("cf-connecting-ip", canceller)], &cancel, 1_000);
        let answers = fx.sim.requests_at_once(vec![call, cancel]);
        assert_eq!(answers[1].status, 202, "{}", answers[1].text());
        idle(&fx);
        let stops = fx.dify.stops.borrow().clone();
        if stopped {
            assert_eq!(stops.len(), 1, "{stops:?}");
            assert_eq!(stops[0].1, dify_users(&fx)[0], "the stop went out as another user");
        } else {
            assert!(stops.is_empty(), "another caller stopped the run: {stops:?}");
        }
        fx.assert_invariants();
    }
}

#[test]
fn a_new_isolate_verifies_a_token_again_with_keys_fetched_again() {
    let fx = Fx::new(23);
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({}));
    let now = fx.sim.now_ms() / 1000;
    let tok = token(&fx, json!({"iss": ISSUER, "aud": Fx::mcp_url(&code), "sub": "alice", "exp": now + 600}));
    let verifies = || fx.sim.trace().iter().filter(|l| l.contains("crypto verify")).count();
    let auth = bearer(&tok);
    assert_eq!(mcp_as(&fx, &code, &[("authorization", &auth)], &ping(json!(1))).status, 200);
    assert_eq!((verifies(), jwks_fetches(&fx)), (1, 1));
    // An evicted isolate keeps nothing: neither the verified token nor the issuer's keys.
    fx.sim.evict_isolate();
    assert_eq!(mcp_as(&fx, &code, &[("authorization", &auth)], &ping(json!(2))).status, 200);
    assert_eq!((verifies(), jwks_fetches(&fx)), (2, 2), "a new isolate trusted what an evicted one had verified");
    assert_oauth_invariants(&fx);
}

#[test]
fn an_issuer_with_many_keys_is_read_whole_up_to_the_document_cap() {
    let fx = Fx::new(24);
    const BIG: &str = "https://big-issuer.test";
    let key = SimKey::new("current", "RS256");
    let mut keys: Vec<Value> = (0..40)
        .map(|i| json!({"kty": "RSA", "n": format!("{i:0>340}"), "e": "AQAB", "kid": format!("old-{i}"), "alg": "RS256", "use": "sig"}))
        .collect();
    keys.push(key.jwk());
    let jwks = json!({ "keys": keys });
    // Larger than a few KiB, far under the 256 KiB cap.
    assert!(jwks.to_string().len() > 16 * 1024);
    let metadata = json!({"issuer": BIG, "jwks_uri": format!("{BIG}/jwks")});
    fx.sim.add_backend(
        BIG,
        Rc::new(move |req: &crate::sim::BackendRequest, _now: u64| {
            if req.path.starts_with("/jwks") {
                crate::sim::Reply::json(200, &jwks)
            } else if req.path.starts_with("/.well-known/") {
                crate::sim::Reply::json(200, &metadata)
            } else {
                crate::sim::Reply::json(404, &json!({}))
            }
        }),
    );
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({"issuer": BIG}));
    let now = fx.sim.now_ms() / 1000;
    let tok = key.jwt(&json!({"iss": BIG, "aud": Fx::mcp_url(&code), "sub": "alice", "exp": now + 600}));
    fx.secret(&tok);
    let r = mcp_as(&fx, &code, &[("authorization", &bearer(&tok))], &ping(json!(1)));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_oauth_invariants(&fx);
}

#[test]
fn an_issuer_that_does_not_answer_is_named_in_the_503_with_the_wait() {
    let fx = Fx::new(25);
    const SILENT: &str = "https://silent-issuer.test";
    fx.sim.add_backend(SILENT, Rc::new(|_: &crate::sim::BackendRequest, _: u64| crate::sim::Reply::Hang));
    let (_, code) = oauth_server(&fx, "Echo", "app-key-1", json!({"issuer": SILENT}));
    let key = SimKey::new("k", "RS256");
    let now = fx.sim.now_ms() / 1000;
    let tok = key.jwt(&json!({"iss": SILENT, "aud": Fx::mcp_url(&code), "sub": "alice", "exp": now + 600}));
    fx.secret(&tok);
    let r = mcp_as(&fx, &code, &[("authorization", &bearer(&tok))], &ping(json!(1)));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("no answer within 5 s"), "{}", r.text());
    assert!(fx.dify.requests.borrow().is_empty());
}
