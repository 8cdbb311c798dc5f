//! Catalogs per client: the upstream is told what the calling client declared (not a set of
//! Flowgate's), and each client sees the tools the upstream offers a client like it. The
//! scripted upstream offers `sample` only in sessions whose `initialize` declared sampling
//! (`McpUpstream::per_client`), as the reference server registers its sampling tool.

use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::initialize;
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::mcp::McpUpstream;

fn names(list: &[Value]) -> Vec<String> {
    list.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect()
}

/// The tools a 2025-11-25 client with Flowgate session `sid` sees.
fn listed(fx: &Fx, code: &str, sid: &str) -> Vec<String> {
    names(&tools(fx, code, &[("mcp-session-id", sid)]))
}

fn call_as(fx: &Fx, code: &str, sid: &str, tool: &str) -> Value {
    rpc_with(fx, code, &[("mcp-session-id", sid)], "tools/call", json!({"name": tool, "arguments": {}}))
}

/// What the upstream's `initialize`s declared, in order.
fn declared(up: &McpUpstream) -> Vec<Value> {
    up.initialized_with.borrow().clone()
}

#[test]
fn each_client_sees_the_tools_the_upstream_offers_a_client_that_declared_what_it_did() {
    let fx = Fx::new(4300);
    fx.upstream.per_client.set(true);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let plain = initialize(&fx, &app.code, json!({}), None);
    let sampler = initialize(&fx, &app.code, json!({"sampling": {}}), None);
    let plain_tools = listed(&fx, &app.code, &plain);
    assert!(!plain_tools.iter().any(|n| n.ends_with("sample")), "{plain_tools:?}");
    assert!(plain_tools.iter().any(|n| n.ends_with("echo")), "{plain_tools:?}");
    let sampler_tools = listed(&fx, &app.code, &sampler);
    let sample = sampler_tools.iter().find(|n| n.ends_with("sample")).cloned().unwrap_or_default();
    assert_eq!(sampler_tools.len(), plain_tools.len() + 1, "{sampler_tools:?}");
    // The lists were read in sessions that declared exactly each client's set.
    assert_eq!(declared(&fx.upstream), vec![json!({}), json!({"sampling": {}})]);
    // Again: from the cache, nothing asked upstream.
    assert_eq!(listed(&fx, &app.code, &sampler), sampler_tools);
    assert_eq!(listed(&fx, &app.code, &plain), plain_tools);
    assert_eq!(declared(&fx.upstream).len(), 2);
    // The sampling client's call goes out on a session of its own that declared sampling too,
    // where the upstream has the tool.
    let (is_error, text) = result_text(&call_as(&fx, &app.code, &sampler, &sample));
    assert!(!is_error && text == "this session can sample", "{text}");
    assert_eq!(declared(&fx.upstream).last(), Some(&json!({"sampling": {}})));
    // The other client was never offered it: Flowgate does not know the name for it.
    let v = call_as(&fx, &app.code, &plain, &sample);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    fx.assert_invariants();
}

#[test]
fn catalogs_are_the_clients_too() {
    let fx = Fx::new(4306);
    fx.upstream.per_client.set(true);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let plain = initialize(&fx, &app.code, json!({}), None);
    let sampler = initialize(&fx, &app.code, json!({"sampling": {}}), None);
    let prompts = |sid: &str| rpc_with(&fx, &app.code, &[("mcp-session-id", sid)], "prompts/list", json!({}));
    // The upstream offers prompts only to a client that can sample: so does Flowgate, in
    // either order, from the isolate's memo the second time and from KV the third (the memo
    // kept 5 s).
    for round in 0..3 {
        if round == 2 {
            fx.sim.advance(20_000).unwrap_or_else(|h| panic!("{h}"));
        }
        let v = prompts(&sampler);
        assert_eq!(v["result"]["prompts"][0]["name"], "Up_sampled", "{v}");
        let v = prompts(&plain);
        assert_eq!(v["error"]["code"], -32601, "{v}");
    }
    // The handshake says so too.
    let init = |caps: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": V2025, "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}}});
        last(&fx.mcp(&app.code, &body))["result"]["capabilities"].clone()
    };
    assert!(init(json!({"sampling": {}})).get("prompts").is_some());
    assert!(init(json!({})).get("prompts").is_none());
    fx.assert_invariants();
}

#[test]
fn the_upstream_is_told_the_clients_set_and_nothing_more() {
    let fx = Fx::new(4301);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let caps = json!({"sampling": {"tools": {}, "context": {}}, "elicitation": {"url": {}},
        "roots": {"listChanged": true}, "experimental": {"x": {}}});
    let sid = initialize(&fx, &app.code, caps, None);
    let echo = listed(&fx, &app.code, &sid).into_iter().find(|n| n.ends_with("echo")).unwrap_or_default();
    let (is_error, _) = result_text(&call_as(&fx, &app.code, &sid, &echo));
    assert!(!is_error);
    // Only what Flowgate can relay, as the client declared it; no roots.listChanged (list
    // changes do not pass through), no form mode the client did not declare.
    let want = json!({"sampling": {"tools": {}}, "elicitation": {"url": {}}, "roots": {}});
    let all = declared(&fx.upstream);
    assert!(!all.is_empty() && all.iter().all(|c| c == &want), "{all:?}");
    // A client without Flowgate's session id declared nothing, and the upstream is told so.
    let (is_error, _) = result_text(&last(&fx.call(&app.code, &echo, json!({"text": "x"}))));
    assert!(!is_error);
    assert_eq!(declared(&fx.upstream).last(), Some(&json!({})));
    fx.assert_invariants();
}

#[test]
fn a_stateless_client_declares_in_each_request() {
    let fx = Fx::new(4302);
    fx.upstream.per_client.set(true);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let list = |caps: Value| {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
        let h = [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ];
        let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &h, Some(&body)));
        assert_eq!(r.status, 200, "{}", r.text());
        names(last(&r)["result"]["tools"].as_array().map(Vec::as_slice).unwrap_or_default())
    };
    assert!(list(json!({"sampling": {}})).iter().any(|n| n.ends_with("sample")));
    assert!(!list(json!({"elicitation": {}})).iter().any(|n| n.ends_with("sample")));
    assert!(!list(json!({})).iter().any(|n| n.ends_with("sample")));
    fx.assert_invariants();
}

#[test]
fn flowgates_own_reads_declare_nothing_and_a_refresh_reaches_every_variant() {
    let fx = Fx::new(4303);
    fx.upstream.per_client.set(true);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let sampler = initialize(&fx, &app.code, json!({"sampling": {}, "roots": {}}), None);
    assert!(listed(&fx, &app.code, &sampler).iter().any(|n| n.ends_with("sample")));
    // The upstream stops offering it; the cached list stands until a refresh.
    fx.upstream.per_client.set(false);
    assert!(listed(&fx, &app.code, &sampler).iter().any(|n| n.ends_with("sample")));
    let before = declared(&fx.upstream).len();
    fx.sim.advance(1_000).unwrap_or_else(|h| panic!("{h}"));
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 200, "{}", r.text());
    // The console reads in sessions that declare nothing.
    let console = declared(&fx.upstream)[before..].to_vec();
    assert!(!console.is_empty() && console.iter().all(|c| c == &json!({})), "{console:?}");
    // The refresh made the sampling client's list stale too: read again, without the tool.
    let now = listed(&fx, &app.code, &sampler);
    assert!(!now.iter().any(|n| n.ends_with("sample")) && now.iter().any(|n| n.ends_with("echo")), "{now:?}");
    // With the tool offered again, the console (declaring nothing) is not shown it; the
    // sampling client is, once a refresh made its list stale.
    fx.upstream.per_client.set(true);
    fx.sim.advance(1_000).unwrap_or_else(|h| panic!("{h}"));
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    let upstream_tools = r.json().unwrap_or_default()["upstream_tools"].clone();
    assert!(upstream_tools.as_array().is_some_and(|l| l.iter().any(|n| n == "echo")), "{upstream_tools}");
    assert!(!upstream_tools.as_array().is_some_and(|l| l.iter().any(|n| n == "sample")), "{upstream_tools}");
    let r = fx.console(Method::Get, &format!("/servers/{}/tools", app.server_id), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("Up_sample") && r.text().contains("Up_echo"), "{}", r.text());
    assert!(listed(&fx, &app.code, &sampler).iter().any(|n| n.ends_with("sample")));
    fx.assert_invariants();
}

#[test]
fn a_legacy_sse_upstream_is_told_the_clients_set_too() {
    let fx = Fx::new(4304);
    let up = Rc::new(McpUpstream::new(false, false).legacy_only(None));
    up.per_client.set(true);
    fx.sim.add_backend("https://legacy.test", up.clone());
    let app = upstream_app(&fx, "Old", "https://legacy.test/sse", json!({}));
    let plain = initialize(&fx, &app.code, json!({}), None);
    let sampler = initialize(&fx, &app.code, json!({"sampling": {}}), None);
    assert!(!listed(&fx, &app.code, &plain).iter().any(|n| n.ends_with("sample")));
    let sample = listed(&fx, &app.code, &sampler).into_iter().find(|n| n.ends_with("sample"));
    let sample = sample.unwrap_or_else(|| panic!("no sample tool for the sampling client"));
    let (is_error, text) = result_text(&call_as(&fx, &app.code, &sampler, &sample));
    assert!(!is_error, "{text}");
    assert_eq!(declared(&up).last(), Some(&json!({"sampling": {}})));
    fx.assert_invariants();
}

#[test]
fn a_refresh_forgets_the_failed_fetches_of_every_variant() {
    let fx = Fx::new(4305);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let sampler = initialize(&fx, &app.code, json!({"sampling": {}}), None);
    fx.upstream.down.set(true);
    // Both lists fail, and each failure is remembered (the next list asks nothing).
    assert!(listed(&fx, &app.code, &sampler).is_empty());
    assert!(names(&tools(&fx, &app.code, &[])).is_empty());
    let asked = fx.upstream.requests.borrow().len();
    assert!(listed(&fx, &app.code, &sampler).is_empty());
    assert!(names(&tools(&fx, &app.code, &[])).is_empty());
    assert_eq!(fx.upstream.requests.borrow().len(), asked, "remembered: not asked again");
    // Back up: a refresh makes every variant ask again at once, not after the window.
    fx.upstream.down.set(false);
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(listed(&fx, &app.code, &sampler).iter().any(|n| n.ends_with("echo")));
    assert!(names(&tools(&fx, &app.code, &[])).iter().any(|n| n.ends_with("echo")));
    fx.assert_invariants();
}
