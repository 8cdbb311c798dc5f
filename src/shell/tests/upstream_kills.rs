//! The upstream MCP paths the other upstream tests leave open: `resources/read` and
//! `prompts/get` routed to the upstream that lists them, the catalog and the tool list read
//! once and re-read on the session they were read on, and answers to a relayed request that
//! come too late or twice.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::{call_answering, client_headers, initialize};
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::{Backend, BackendRequest, Reply};

const CAT: &str = "https://catalog.test";

/// A stateful upstream over Streamable HTTP (JSON answers) with one tool, one resource and one
/// prompt: `resources/read` and `prompts/get` answer with what they were asked for.
#[derive(Default)]
struct Cat {
    sessions: Cell<u64>,
    seen: RefCell<Vec<BackendRequest>>,
}

impl Cat {
    fn count(&self, method: &str) -> usize {
        self.seen.borrow().iter().filter(|r| r.json().is_some_and(|m| m["method"] == method)).count()
    }
}

impl Backend for Cat {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        self.seen.borrow_mut().push(req.clone());
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let Some(id) = msg.get("id").cloned() else { return Reply::new(202, "", Vec::new()) };
        let params = &msg["params"];
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => {
                self.sessions.set(self.sessions.get() + 1);
                let result = json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                    "serverInfo": {"name": "cat", "version": "1"}});
                let session = format!("cat-{}", self.sessions.get());
                return Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
                    .with_header("mcp-session-id", &session);
            }
            "tools/list" => json!({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}),
            "resources/list" => json!({"resources": [{"uri": "mem://notes", "name": "notes"}]}),
            "prompts/list" => json!({"prompts": [{"name": "greet", "arguments": [{"name": "who"}]}]}),
            "resources/read" => {
                let uri = params["uri"].as_str().unwrap_or_default();
                json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": format!("the text of {uri}")}]})
            }
            "prompts/get" => {
                let text = format!("{} says hello to {}", params["name"], params["arguments"]["who"]);
                json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]})
            }
            _ => json!({}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

fn cat(fx: &Fx) -> (Rc<Cat>, UpApp) {
    let c = Rc::new(Cat::default());
    fx.sim.add_backend(CAT, c.clone());
    let app = upstream_app(fx, "Cat", &format!("{CAT}/mcp"), json!({}));
    (c, app)
}

#[test]
fn a_resource_read_and_a_prompt_get_reach_the_upstream_that_lists_them() {
    let fx = Fx::new(330);
    let (up, app) = cat(&fx);
    let v = rpc_with(&fx, &app.code, &[], "resources/read", json!({"uri": "mem://notes"}));
    assert_eq!(v["result"]["contents"][0]["text"], "the text of mem://notes", "{v}");
    let prompts = rpc_with(&fx, &app.code, &[], "prompts/list", json!({}));
    let name = prompts["result"]["prompts"][0]["name"].as_str().unwrap_or_default().to_string();
    assert!(name.ends_with("greet"), "{prompts}");
    let v = rpc_with(&fx, &app.code, &[], "prompts/get", json!({"name": name, "arguments": {"who": "Ada"}}));
    // Asked upstream under the upstream's own name.
    assert_eq!(v["result"]["messages"][0]["content"]["text"], "\"greet\" says hello to \"Ada\"", "{v}");
    assert_eq!((up.count("resources/read"), up.count("prompts/get")), (1, 1));
    fx.assert_invariants();
}

#[test]
fn the_catalog_is_read_from_the_upstream_once_for_many_lists() {
    let fx = Fx::new(331);
    let (up, app) = cat(&fx);
    for _ in 0..3 {
        let v = rpc_with(&fx, &app.code, &[], "resources/list", json!({}));
        assert_eq!(v["result"]["resources"][0]["uri"], "mem://notes", "{v}");
    }
    fx.sim.evict_isolate();
    let v = rpc_with(&fx, &app.code, &[], "prompts/list", json!({}));
    assert!(v["result"]["prompts"][0]["name"].as_str().is_some_and(|n| n.ends_with("greet")), "{v}");
    assert_eq!((up.count("resources/list"), up.count("prompts/list")), (1, 1), "from this isolate's memo, then KV");
    fx.assert_invariants();
}

#[test]
fn an_expired_tool_list_is_read_again_on_the_session_it_was_read_on() {
    let fx = Fx::new(332);
    let (up, app) = cat(&fx);
    assert_eq!(tools(&fx, &app.code, &[]).len(), 1);
    let inits = up.count("initialize");
    // Past the tool list's five minutes in KV (the upstream session is kept an hour).
    fx.sim.advance(301_000).unwrap_or_else(|h| panic!("{h}"));
    fx.sim.evict_isolate();
    assert_eq!(tools(&fx, &app.code, &[]).len(), 1);
    assert_eq!(up.count("tools/list"), 2, "the list was read again");
    assert_eq!(up.count("initialize"), inits, "on the session it was read on, without a new handshake");
    fx.assert_invariants();
}

fn ask(tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": {"question": "Now?"}}})
}

fn accept(ticket: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": ticket, "result": {"action": "accept", "content": {"ok": true}}})
}

fn ticket_of(messages: &[Value]) -> Value {
    messages.iter().find(|m| m["method"] == "elicitation/create").map(|m| m["id"].clone()).unwrap_or_default()
}

#[test]
fn an_answer_after_the_call_ended_is_refused_and_never_reaches_the_upstream() {
    let fx = Fx::new(333);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({"tool_call_timeout": 10}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = client_headers(&sid, None);
    // The client does not answer: the call ends at its timeout.
    let seen = call_answering(&fx, &app.code, headers.clone(), ask(&tool), |_| Vec::new());
    let ticket = ticket_of(&seen.messages);
    assert!(ticket.as_str().is_some_and(|t| t.starts_with("fg-relay.")), "{:?}", seen.messages);
    fx.sim.advance(30_000).unwrap_or_else(|h| panic!("{h}"));
    let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &hs, Some(&accept(&ticket))));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("the call that asked has ended (its tool_call_timeout ran out)"), "{}", r.text());
    assert!(fx.upstream.answers.borrow().is_empty(), "a late answer reached the upstream");
    fx.assert_invariants();
}

#[test]
fn an_answer_given_twice_is_taken_once_and_the_second_is_told_why_not() {
    let fx = Fx::new(334);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = client_headers(&sid, None);
    let h = headers.clone();
    let seen = call_answering(&fx, &app.code, headers, ask(&tool), move |m| {
        vec![(h.clone(), accept(&m["id"])), (h.clone(), accept(&m["id"]))]
    });
    assert_eq!(seen.posted.len(), 2, "{:?}", seen.posted);
    assert_eq!(seen.posted[0], (202, String::new()));
    let (status, body) = &seen.posted[1];
    assert_eq!(*status, 502, "{body}");
    assert!(body.contains("upstream Asker refused the answer (HTTP 400); the call may have ended"), "{body}");
    // The upstream took the first and refused the second: the call goes on with the first.
    let result = seen.messages.iter().rev().find(|m| m["id"] == 21).cloned().unwrap_or_default();
    assert!(!result_text(&result).0, "{result}");
    fx.assert_invariants();
}

#[test]
fn a_clients_own_credential_the_upstream_refuses_is_never_swapped_for_the_apps_token() {
    let fx = Fx::new(335);
    let secret = "both-client-secret-0123456789";
    fx.issuer.add_client("both-client", secret);
    fx.secret(secret);
    let issuer = fx.issuer.clone();
    fx.upstream.require_token(move |t, now| issuer.accepts(t, now));
    let oauth = json!({"token_url": format!("{ISSUER}/token"), "client_id": "both-client", "client_secret": secret});
    let backend =
        json!({"oauth": oauth, "forward_headers": {"authorization": "authorization"}, "on_missing": "passthrough"});
    let app = upstream_app(&fx, "Both", &format!("{UPSTREAM}/mcp"), backend);
    // The shared tool list is read with the app's own token.
    let tool = tool_named(&fx, &app.code, "echo");
    let app_token = fx.issuer.tokens();
    assert_eq!(app_token.len(), 1);
    // A call with the client's own credential, which the upstream refuses: the refusal stands.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {"text": "x"}}});
    let v = last(&fx.mcp_with(&app.code, &[("authorization", "Bearer the-clients-own")], &call));
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("(HTTP 401)"), "{v}");
    assert_eq!(fx.issuer.tokens().len(), 1, "no token was fetched for the client's refused request");
    let sent: Vec<Option<String>> = fx
        .upstream
        .requests
        .borrow()
        .iter()
        .skip_while(|r| r.bearer() != Some("the-clients-own".into()))
        .map(|r| r.bearer())
        .collect();
    assert!(!sent.is_empty() && sent.iter().all(|b| b.as_deref() == Some("the-clients-own")), "{sent:?}");
    fx.assert_invariants();
}

/// A 2026-07-28 upstream (stateless: no initialize, `server/discover`): its first
/// `rejections` discovers are 400s that reject the version while listing it as supported
/// (a node behind a balancer that was not yet upgraded); `plain_400` makes every discover a 400
/// without that.
#[derive(Default)]
struct Stateless {
    rejections: Cell<u32>,
    plain_400: bool,
    seen: RefCell<Vec<String>>,
}

impl Stateless {
    fn discovers(&self) -> usize {
        self.seen.borrow().iter().filter(|m| *m == "server/discover").count()
    }
}

impl Backend for Stateless {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let method = msg["method"].as_str().unwrap_or_default().to_string();
        self.seen.borrow_mut().push(method.clone());
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let rejected = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32022,
            "message": "Unsupported protocol version", "data": {"supported": ["2026-07-28"]}}});
        let result = match method.as_str() {
            "initialize" => return Reply::json(400, &rejected),
            // A bound on a client that would ask for ever: a plain 503 ends it.
            "server/discover" if self.discovers() > 5 => return Reply::new(503, "text/plain", "enough"),
            "server/discover" if self.plain_400 => {
                return Reply::json(
                    400,
                    &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": "no"}}),
                )
            }
            "server/discover" if self.rejections.get() > 0 => {
                self.rejections.set(self.rejections.get() - 1);
                return Reply::json(400, &rejected);
            }
            "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "stateless", "version": "1"}}),
            "tools/list" => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
            "tools/call" => json!({"content": [{"type": "text", "text": "stateless echo"}]}),
            _ => json!({}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

fn stateless(fx: &Fx, origin: &str, s: Stateless) -> (Rc<Stateless>, UpApp) {
    let s = Rc::new(s);
    fx.sim.add_backend(origin, s.clone());
    let app = upstream_app(fx, "Stateless", &format!("{origin}/mcp"), json!({}));
    (s, app)
}

#[test]
fn a_discover_rejecting_the_version_it_lists_is_asked_once_more_and_no_more() {
    let fx = Fx::new(336);
    // Rejected once: asked again, and the call answers.
    let (up, app) = stateless(&fx, "https://once.test", Stateless { rejections: Cell::new(1), ..Stateless::default() });
    let tool = tool_named(&fx, &app.code, "echo");
    assert_eq!(up.discovers(), 2, "{:?}", up.seen.borrow());
    let v = last(&fx.call(&app.code, &tool, json!({})));
    assert_eq!(result_text(&v), (false, "stateless echo".to_string()), "{v}");
    // Rejected every time: asked twice, then the handshake fails.
    let (up, app) =
        stateless(&fx, "https://always.test", Stateless { rejections: Cell::new(u32::MAX), ..Stateless::default() });
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(up.discovers(), 2, "{:?}", up.seen.borrow());
    // Any other 400: not asked again.
    let (up, app) = stateless(&fx, "https://plain.test", Stateless { plain_400: true, ..Stateless::default() });
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(up.discovers(), 1, "{:?}", up.seen.borrow());
    fx.assert_invariants();
}

#[test]
fn a_legacy_endpoint_that_refuses_a_message_is_named_with_its_status() {
    let fx = Fx::new(337);
    // The stream names an endpoint without the session's id: the upstream answers 404.
    let up = Rc::new(crate::sim::backends::mcp::McpUpstream::new(false, false).legacy_only(Some("/messages")));
    fx.sim.add_backend("https://legacy.test", up);
    let app = upstream_app(&fx, "Old", "https://legacy.test/mcp", json!({}));
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    // The caller's kept session (`legacy_sessions`) is opened by its object, which names the step.
    assert!(r.text().contains("upstream Old did not take initialize on its SSE endpoint: HTTP 404"), "{}", r.text());
    fx.assert_invariants();
}

/// A stateful upstream that can forget every session (404 for it) and fail its handshake.
#[derive(Default)]
struct Forgetful {
    sessions: Cell<u64>,
    /// Sessions below this number are unknown.
    known_from: Cell<u64>,
    init_fails: Cell<bool>,
    /// The session id of every request but `initialize`.
    used: RefCell<Vec<Option<String>>>,
}

impl Backend for Forgetful {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let Some(id) = msg.get("id").cloned() else { return Reply::new(202, "", Vec::new()) };
        if msg["method"] == "initialize" {
            if self.init_fails.get() {
                return Reply::new(500, "text/plain", "down for maintenance");
            }
            self.sessions.set(self.sessions.get() + 1);
            let result = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "forgetful", "version": "1"}});
            return Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
                .with_header("mcp-session-id", &format!("f-{}", self.sessions.get()));
        }
        let sid = req.headers.get("mcp-session-id");
        self.used.borrow_mut().push(sid.clone());
        let n: u64 = sid.as_deref().and_then(|s| s.strip_prefix("f-")).and_then(|n| n.parse().ok()).unwrap_or(0);
        if n < self.known_from.get() || n == 0 {
            return Reply::json(
                404,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": "Session not found"}}),
            );
        }
        let result = match msg["method"].as_str() {
            Some("tools/list") => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
            _ => json!({"content": [{"type": "text", "text": "forgetful echo"}]}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

#[test]
fn a_session_the_upstream_forgot_is_not_tried_again_after_a_failed_handshake() {
    let fx = Fx::new(338);
    let up = Rc::new(Forgetful::default());
    fx.sim.add_backend("https://forgetful.test", up.clone());
    let app = upstream_app(&fx, "Forgetful", "https://forgetful.test/mcp", json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let v = last(&fx.call(&app.code, &tool, json!({})));
    assert_eq!(result_text(&v), (false, "forgetful echo".to_string()), "{v}");
    let stale = up.used.borrow().last().cloned().flatten();
    assert!(stale.is_some());
    // The upstream restarts: it knows none of its sessions, and its handshake fails for a while.
    up.known_from.set(up.sessions.get() + 1);
    up.init_fails.set(true);
    let v = last(&fx.call(&app.code, &tool, json!({})));
    assert!(result_text(&v).0, "{v}");
    // Back: the next call starts a new session at once, without the forgotten one first.
    up.init_fails.set(false);
    let before = up.used.borrow().len();
    let v = last(&fx.call(&app.code, &tool, json!({})));
    assert_eq!(result_text(&v), (false, "forgetful echo".to_string()), "{v}");
    let after: Vec<Option<String>> = up.used.borrow()[before..].to_vec();
    assert!(!after.contains(&stale), "the forgotten session was tried again: {after:?}");
    fx.assert_invariants();
}

/// An upstream whose `tools/call` answers on an event stream that closes before the answer,
/// with an event id and a `retry` (SEP-1699): `resumes` more GETs with `Last-Event-ID` close
/// the same way, the one after answers (`u32::MAX`: none ever does).
struct Resumable {
    resumes: u32,
    retry_ms: u64,
    /// The call's JSON-RPC id, and the streams opened for it so far.
    call: RefCell<(Value, u32)>,
    /// The `Last-Event-ID` of every GET.
    gets: RefCell<Vec<Option<String>>>,
}

impl Resumable {
    fn closing(&self, n: u32) -> Reply {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": n}});
        Reply::sse(vec![format!("id: ev-{n}\nretry: {}\nevent: message\ndata: {note}\n\n", self.retry_ms)], 0)
    }
}

impl Backend for Resumable {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        if req.method == Method::Get {
            self.gets.borrow_mut().push(req.headers.get("last-event-id"));
            let (id, opened) = self.call.borrow().clone();
            *self.call.borrow_mut() = (id.clone(), opened + 1);
            if opened > self.resumes {
                let answer =
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "resumed"}]}});
                return Reply::sse(vec![format!("id: ev-{opened}\nevent: message\ndata: {answer}\n\n")], 0);
            }
            return self.closing(opened);
        }
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let Some(id) = msg.get("id").cloned() else { return Reply::new(202, "", Vec::new()) };
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "resumable", "version": "1"}}),
            "tools/list" => json!({"tools": [{"name": "work", "inputSchema": {"type": "object"}}]}),
            "tools/call" => {
                *self.call.borrow_mut() = (id, 1);
                return self.closing(0);
            }
            _ => json!({}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

fn resumable(fx: &Fx, origin: &str, resumes: u32, retry_ms: u64, backend: Value) -> (Rc<Resumable>, String, String) {
    let up = Rc::new(Resumable { resumes, retry_ms, call: RefCell::new((Value::Null, 0)), gets: RefCell::default() });
    fx.sim.add_backend(origin, up.clone());
    let app = upstream_app(fx, "Resumable", &format!("{origin}/mcp"), backend);
    let tool = tool_named(fx, &app.code, "work");
    (up, app.code, tool)
}

#[test]
fn a_stream_closed_before_its_answer_is_resumed_from_its_last_event() {
    let fx = Fx::new(339);
    let (up, code, tool) = resumable(&fx, "https://resume.test", 1, 100, json!({}));
    let v = last(&fx.call(&code, &tool, json!({})));
    assert_eq!(result_text(&v), (false, "resumed".to_string()), "{v}");
    assert_eq!(*up.gets.borrow(), vec![Some("ev-0".to_string()), Some("ev-1".to_string())]);
    fx.assert_invariants();
}

#[test]
fn a_stream_that_keeps_closing_is_resumed_twenty_times_and_a_long_retry_not_waited_for() {
    let fx = Fx::new(342);
    let (up, code, tool) = resumable(&fx, "https://endless.test", u32::MAX, 100, json!({}));
    let v = last(&fx.call(&code, &tool, json!({})));
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("the upstream's event stream closed 21 times without an answer"), "{v}");
    assert_eq!(up.gets.borrow().len(), 20);
    // A retry longer than the call has left: given up at once, not slept through.
    let (up, code, tool) = resumable(&fx, "https://later.test", u32::MAX, 60_000, json!({"tool_call_timeout": 10}));
    let t0 = fx.sim.now_ms();
    let v = last(&fx.call(&code, &tool, json!({})));
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("the upstream's event stream closed 1 times without an answer"), "{v}");
    assert!(up.gets.borrow().is_empty());
    assert!(fx.sim.now_ms() - t0 < 1_000, "it waited");
    fx.assert_invariants();
}

/// A 2025-11-25 upstream that runs `long_job` as a task taking `task_ms`; the app and the
/// job's listed name.
fn job_upstream(fx: &Fx, origin: &str, task_ms: u64) -> (Rc<crate::sim::backends::mcp::McpUpstream>, UpApp, String) {
    let up = Rc::new(crate::sim::backends::mcp::McpUpstream::new(true, false).with_tasks(task_ms));
    fx.sim.add_backend(origin, up.clone());
    let app = upstream_app(fx, "Jobs", &format!("{origin}/mcp"), json!({}));
    let job = tool_named(fx, &app.code, "long_job");
    (up, app, job)
}

fn start_job(fx: &Fx, code: &str, job: &str) -> String {
    let created = rpc_with(
        fx,
        code,
        &[],
        "tools/call",
        json!({"name": job, "arguments": {"text": "hi"}, "task": {"ttl": 600_000}}),
    );
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(id.starts_with("fg-task."), "{created}");
    id
}

fn upstream_asked(up: &crate::sim::backends::mcp::McpUpstream, method: &str) -> usize {
    up.requests.borrow().iter().filter(|r| r.json().is_some_and(|m| m["method"] == method)).count()
}

#[test]
fn a_relayed_task_longer_than_twenty_seconds_is_waited_for_by_tasks_result() {
    let fx = Fx::new(343);
    let (_, app, job) = job_upstream(&fx, "https://longjobs.test", 45_000);
    let id = start_job(&fx, &app.code, &job);
    // The upstream's own tasks/result blocks until its task ends: so does the client's.
    let result = rpc_with(&fx, &app.code, &[], "tasks/result", json!({"taskId": id}));
    assert_eq!(result_text(&result), (false, "done: hi".to_string()), "{result}");
    fx.assert_invariants();
}

#[test]
fn a_2026_client_reads_a_relayed_tasks_result_inline_once_it_is_done_and_never_waits_for_it() {
    let fx = Fx::new(344);
    let (up, app, job) = job_upstream(&fx, "https://jobs26.test", 3_000);
    let id = start_job(&fx, &app.code, &job);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let get_2026 = || {
        let headers = [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", id.as_str()),
        ];
        let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tasks/get", "params": {"taskId": id, "_meta": meta}});
        last(&fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &headers, Some(&body))))
    };
    // Working: answered at once, without the result.
    let t0 = fx.sim.now_ms();
    let working = get_2026();
    assert_eq!(working["result"]["status"], "working", "{working}");
    assert!(fx.sim.now_ms() - t0 < 1_000, "a tasks/get waited for the task");
    assert_eq!(upstream_asked(&up, "tasks/result"), 0);
    fx.sim.advance(5_000).unwrap_or_else(|h| panic!("{h}"));
    // A 2025-11-25 client's tasks/get of the finished task: the task, no result fetched.
    let done = rpc_with(&fx, &app.code, &[], "tasks/get", json!({"taskId": id}));
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(upstream_asked(&up, "tasks/result"), 0);
    // A 2026-07-28 client's: the result inline.
    let done = get_2026();
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("done: hi"), "{done}");
    fx.assert_invariants();
}
