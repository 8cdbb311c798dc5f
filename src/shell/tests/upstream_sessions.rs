//! The upstream MCP client (`shell::backend::mcp::client`) where the broader upstream tests
//! leave it open: one upstream session per caller and one tool list per app, request ids,
//! the handshake's notification, a session the upstream keeps rejecting, failed handshakes,
//! and lists that come in pages.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::{Backend, BackendRequest, Reply};

/// A scripted upstream over Streamable HTTP, JSON answers: `initialize` (a session id each
/// time when `stateful`), `tools/list` and `resources/list` in pages (`nextCursor` = the next
/// page's index; the last page's `nextCursor` is ""), `tools/call` answering the tool's name.
#[derive(Default)]
struct Tiny {
    stateful: bool,
    /// Every request but `initialize` is answered 404 (a session the upstream does not know).
    reject_sessions: bool,
    /// `initialize` answers this status (with a body) instead.
    init_status: Option<u16>,
    tool_pages: Vec<Vec<&'static str>>,
    resource_pages: Vec<Vec<&'static str>>,
    /// How long a `tools/call` takes to answer.
    call_delay_ms: u64,
    sessions: Cell<u64>,
    seen: RefCell<Vec<BackendRequest>>,
}

impl Tiny {
    fn methods(&self) -> Vec<String> {
        self.seen.borrow().iter().filter_map(|r| r.json()?["method"].as_str().map(str::to_string)).collect()
    }

    fn page(pages: &[Vec<&str>], cursor: Option<&str>, kind: &str) -> Value {
        let i: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let items: Vec<Value> = pages
            .get(i)
            .into_iter()
            .flatten()
            .map(|n| match kind {
                "tools" => json!({"name": n, "description": format!("tool {n}"), "inputSchema": {"type": "object"}}),
                _ => json!({"uri": format!("mem://{n}"), "name": n}),
            })
            .collect();
        let next = if i + 1 < pages.len() { (i + 1).to_string() } else { String::new() };
        json!({kind: items, "nextCursor": next})
    }
}

impl Backend for Tiny {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        self.seen.borrow_mut().push(req.clone());
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let method = msg["method"].as_str().unwrap_or_default().to_string();
        let Some(id) = msg.get("id").cloned() else { return Reply::new(202, "", Vec::new()) };
        let cursor = msg["params"]["cursor"].as_str();
        let result = match method.as_str() {
            "initialize" => {
                if let Some(status) = self.init_status {
                    return Reply::new(status, "text/plain", "the handshake failed here");
                }
                let mut caps = json!({"tools": {}});
                if !self.resource_pages.is_empty() {
                    caps["resources"] = json!({});
                }
                let reply = Reply::json(
                    200,
                    &json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-06-18", "capabilities": caps,
                    "serverInfo": {"name": "tiny", "version": "1"}}}),
                );
                if !self.stateful {
                    return reply;
                }
                self.sessions.set(self.sessions.get() + 1);
                return reply.with_header("mcp-session-id", &format!("tiny-{}", self.sessions.get()));
            }
            _ if self.reject_sessions => return Reply::json(404, &json!({})),
            "tools/list" => Tiny::page(&self.tool_pages, cursor, "tools"),
            "resources/list" => Tiny::page(&self.resource_pages, cursor, "resources"),
            "resources/templates/list" => json!({"resourceTemplates": []}),
            "tools/call" => {
                let result = json!({"content": [{"type": "text", "text": msg["params"]["name"].clone()}]});
                return Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
                    .delayed(self.call_delay_ms);
            }
            _ => {
                return Reply::json(
                    200,
                    &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
                )
            }
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

fn tiny(fx: &Fx, origin: &str, t: Tiny) -> Rc<Tiny> {
    let t = Rc::new(t);
    fx.sim.add_backend(origin, t.clone());
    t
}

/// An upstream MCP app at `origin`/mcp; its id.
fn mcp_app(fx: &Fx, name: &str, origin: &str) -> String {
    mcp_app_with(fx, name, origin, json!({}))
}

/// [`mcp_app`] with more `backend` settings.
fn mcp_app_with(fx: &Fx, name: &str, origin: &str, more: Value) -> String {
    let mut backend = json!({"url": format!("{origin}/mcp")});
    if let (Some(b), Value::Object(m)) = (backend.as_object_mut(), more) {
        b.extend(m);
    }
    let b = json!({"name": name, "description": "d", "mode": "mcp", "backend": backend});
    let r = fx.console(Method::Post, "/apps", Some(&b));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
}

fn tool_names(fx: &Fx, code: &str, headers: &[(&str, &str)]) -> Vec<String> {
    let v = last(&fx.mcp_with(code, headers, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})));
    v["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

fn call_as(fx: &Fx, code: &str, headers: &[(&str, &str)], name: &str) -> ClientResponse {
    fx.mcp_with(
        code,
        headers,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": {}}}),
    )
}

/// A key for a server put in `key` mode.
fn key(fx: &Fx, server_id: &str, name: &str) -> String {
    if name == "a" {
        let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"})));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": name})));
    assert_eq!(r.status, 201, "{}", r.text());
    let k = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
    fx.codes.borrow_mut().push(k.clone());
    format!("Bearer {k}")
}

#[test]
fn two_callers_never_share_an_upstream_session() {
    let fx = Fx::new(701);
    let up = tiny(&fx, "https://tiny.test", Tiny { stateful: true, tool_pages: vec![vec!["t"]], ..Tiny::default() });
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let (server_id, code) = fx.server("S", &[&app]);
    let (a, b) = (key(&fx, &server_id, "a"), key(&fx, &server_id, "b"));
    let name = tool_names(&fx, &code, &[("authorization", &a)]).pop().unwrap_or_default();
    for k in [&a, &b, &a, &b] {
        let r = call_as(&fx, &code, &[("authorization", k)], &name);
        assert_eq!(last(&r)["result"]["content"][0]["text"], "t", "{}", r.text());
    }
    let sessions: Vec<Option<String>> = up
        .seen
        .borrow()
        .iter()
        .filter(|r| r.json().is_some_and(|m| m["method"] == "tools/call"))
        .map(|r| r.headers.get("mcp-session-id"))
        .collect();
    assert_eq!(sessions.len(), 4);
    // Each caller keeps its own session; the two never meet.
    assert!(sessions[0].is_some() && sessions[1].is_some(), "{sessions:?}");
    assert_ne!(sessions[0], sessions[1]);
    assert_eq!((&sessions[0], &sessions[1]), (&sessions[2], &sessions[3]));
    fx.assert_invariants();
}

#[test]
fn each_app_lists_its_own_upstreams_tools() {
    let fx = Fx::new(702);
    tiny(&fx, "https://one.test", Tiny { tool_pages: vec![vec!["alpha"]], ..Tiny::default() });
    tiny(&fx, "https://two.test", Tiny { tool_pages: vec![vec!["beta"]], ..Tiny::default() });
    let (a, b) = (mcp_app(&fx, "One", "https://one.test"), mcp_app(&fx, "Two", "https://two.test"));
    let (_, code_a) = fx.server("A", &[&a]);
    let (_, code_b) = fx.server("B", &[&b]);
    for _ in 0..2 {
        let (la, lb) = (tool_names(&fx, &code_a, &[]), tool_names(&fx, &code_b, &[]));
        assert!(la.len() == 1 && la[0].ends_with("alpha"), "{la:?}");
        assert!(lb.len() == 1 && lb[0].ends_with("beta"), "{lb:?}");
    }
    fx.assert_invariants();
}

#[test]
fn a_handshake_sends_initialized_and_each_request_its_own_id() {
    let fx = Fx::new(703);
    let up = tiny(&fx, "https://tiny.test", Tiny { stateful: true, tool_pages: vec![vec!["t"]], ..Tiny::default() });
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let (_, code) = fx.server("S", &[&app]);
    assert_eq!(tool_names(&fx, &code, &[]).len(), 1);
    assert_eq!(up.methods(), ["initialize", "notifications/initialized", "tools/list"]);
    let ids: Vec<Value> = up.seen.borrow().iter().filter_map(|r| r.json()?.get("id").cloned()).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "one client, two requests, one id");
}

#[test]
fn a_session_the_upstream_keeps_rejecting_is_tried_again_once() {
    let fx = Fx::new(704);
    let up = tiny(
        &fx,
        "https://tiny.test",
        Tiny { stateful: true, reject_sessions: true, tool_pages: vec![vec!["t"]], ..Tiny::default() },
    );
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let r = fx.console(Method::Post, &format!("/apps/{app}/tools/refresh"), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("keeps rejecting its session (404)"), "{}", r.text());
    let m = up.methods();
    assert_eq!(m.iter().filter(|m| *m == "initialize").count(), 2, "{m:?}");
    assert_eq!(m.iter().filter(|m| *m == "tools/list").count(), 2, "{m:?}");
}

#[test]
fn a_failed_handshake_is_not_retried_as_discover_unless_the_status_says_so() {
    let fx = Fx::new(705);
    let up = tiny(&fx, "https://tiny.test", Tiny { init_status: Some(500), ..Tiny::default() });
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let r = fx.console(Method::Post, &format!("/apps/{app}/tools/refresh"), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("HTTP 500: the handshake failed here"), "{}", r.text());
    assert_eq!(up.methods(), ["initialize"]);
}

#[test]
fn lists_are_read_page_by_page_to_an_empty_cursor() {
    let fx = Fx::new(706);
    let up = tiny(
        &fx,
        "https://tiny.test",
        Tiny {
            tool_pages: vec![vec!["a1", "a2"], vec!["b1"]],
            resource_pages: vec![vec!["r1"], vec!["r2"]],
            ..Tiny::default()
        },
    );
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let (_, code) = fx.server("S", &[&app]);
    let names = tool_names(&fx, &code, &[]);
    assert_eq!(names.len(), 3, "{names:?}");
    let r = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
    let uris: Vec<Value> =
        last(&r)["result"]["resources"].as_array().into_iter().flatten().map(|x| x["uri"].clone()).collect();
    assert_eq!(uris.len(), 2, "{}", r.text());
    let m = up.methods();
    assert_eq!(m.iter().filter(|m| *m == "tools/list").count(), 2, "{m:?}");
    assert_eq!(m.iter().filter(|m| *m == "resources/list").count(), 2, "{m:?}");
    fx.assert_invariants();
}

/// A client request served `after_ms` of virtual time from now, beside the run; its status.
fn serve_later(after_ms: u64, req: crate::runtime::Request) -> Rc<RefCell<Option<u16>>> {
    use crate::runtime::Worker;
    let slot: Rc<RefCell<Option<u16>>> = Rc::default();
    let out = slot.clone();
    crate::runtime::spawn(async move {
        let mut timer = crate::runtime::timer::Timer::default();
        let now = crate::runtime::now_ms();
        timer.arm_by(now + after_ms, now);
        timer.fired().await;
        #[allow(clippy::redundant_closure)] // `spawn` takes `impl Future`: it cannot be named as a function value.
        let ctx = crate::runtime::Context::new(Rc::new(|f: crate::runtime::Fut<'static, ()>| crate::runtime::spawn(f)));
        let resp = crate::shell::Flowgate.serve(req, crate::runtime::Env::current(), ctx).await;
        *out.borrow_mut() = Some(resp.into_parts().0);
    });
    slot
}

#[test]
fn a_cancelled_call_is_cancelled_upstream_by_its_id_on_its_session() {
    let fx = Fx::new(707);
    let up = tiny(
        &fx,
        "https://tiny.test",
        Tiny { stateful: true, tool_pages: vec![vec!["t"]], call_delay_ms: 10_000, ..Tiny::default() },
    );
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let (_, code) = fx.server("S", &[&app]);
    let name = tool_names(&fx, &code, &[]).pop().unwrap_or_default();
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
    ];
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "no"}});
    let cancelled = serve_later(2_000, request(Method::Post, &Fx::mcp_url(&code), &headers, Some(&cancel)));
    let r = call_as(&fx, &code, &[], &name);
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(*cancelled.borrow(), Some(202));
    let seen = up.seen.borrow();
    let call = seen.iter().find(|r| r.json().is_some_and(|m| m["method"] == "tools/call")).cloned();
    let note = seen.iter().find(|r| r.json().is_some_and(|m| m["method"] == "notifications/cancelled")).cloned();
    let (call, note) = (call.expect("the call"), note.unwrap_or_else(|| panic!("no cancel upstream: {}", r.text())));
    assert_eq!(note.json().unwrap_or_default()["params"]["requestId"], call.json().unwrap_or_default()["id"]);
    assert!(call.headers.get("mcp-session-id").is_some());
    assert_eq!(note.headers.get("mcp-session-id"), call.headers.get("mcp-session-id"));
    drop(seen);
    fx.assert_invariants();
}

#[test]
fn a_call_past_its_timeout_is_cancelled_upstream_on_its_session() {
    let fx = Fx::new(708);
    let up = tiny(
        &fx,
        "https://tiny.test",
        Tiny { stateful: true, tool_pages: vec![vec!["t"]], call_delay_ms: 60_000, ..Tiny::default() },
    );
    let app = mcp_app_with(&fx, "Up", "https://tiny.test", json!({"tool_call_timeout": 5}));
    let (_, code) = fx.server("S", &[&app]);
    let name = tool_names(&fx, &code, &[]).pop().unwrap_or_default();
    let r = call_as(&fx, &code, &[], &name);
    assert_eq!(last(&r)["result"]["isError"], true, "{}", r.text());
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    let seen = up.seen.borrow();
    let call = seen.iter().find(|r| r.json().is_some_and(|m| m["method"] == "tools/call")).cloned();
    let note = seen.iter().find(|r| r.json().is_some_and(|m| m["method"] == "notifications/cancelled")).cloned();
    let (call, note) = (call.expect("the call"), note.unwrap_or_else(|| panic!("no cancel upstream: {}", r.text())));
    assert_eq!(note.json().unwrap_or_default()["params"]["requestId"], call.json().unwrap_or_default()["id"]);
    assert_eq!(note.headers.get("mcp-session-id"), call.headers.get("mcp-session-id"));
    drop(seen);
    fx.assert_invariants();
}

#[test]
fn a_refresh_ends_the_cached_session_before_starting_another() {
    let fx = Fx::new(709);
    let up = tiny(&fx, "https://tiny.test", Tiny { stateful: true, tool_pages: vec![vec!["t"]], ..Tiny::default() });
    let app = mcp_app(&fx, "Up", "https://tiny.test");
    let (_, code) = fx.server("S", &[&app]);
    assert_eq!(tool_names(&fx, &code, &[]).len(), 1);
    let r = fx.console(Method::Post, &format!("/apps/{app}/tools/refresh"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.seen.borrow();
    let deletes: Vec<Option<String>> =
        seen.iter().filter(|r| r.method == Method::Delete).map(|r| r.headers.get("mcp-session-id")).collect();
    // The session of the first list (tiny-1) is ended; the refresh opened tiny-2.
    assert_eq!(deletes, [Some("tiny-1".to_string())]);
    assert_eq!(up.sessions.get(), 2);
}

#[test]
fn an_unreachable_upstream_is_named_with_the_runtimes_reason() {
    let fx = Fx::new(710);
    // Nothing serves gone.test.
    let app = mcp_app(&fx, "Gone", "https://gone.test");
    let r = fx.console(Method::Post, &format!("/apps/{app}/tools/refresh"), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("fetch failed: connection refused"), "{}", r.text());
}
