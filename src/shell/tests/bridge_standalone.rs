//! A bridged call and the upstream's standalone stream: the call's object holds the session's
//! `GET` stream while the call runs, a request that comes on it (related to no request, as
//! FastMCP sends `roots/list`) becomes a round like one on the call's own stream, and the stream
//! closes when the call ends or is given up; no standalone `GET` where there is no session, and
//! a legacy SSE upstream is connected to once a call (by the object).

use std::rc::Rc;

use serde_json::{json, Value};

use super::bridge::{bridges, call26, info, not_relayed, noting, progress, retry, round_of, taking, LEGACY};
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::mcp::McpUpstream;
use crate::sim::BackendRequest;

const TEAM_KEY: &str = "team-key-for-the-bridged-stream-tests";

/// A standalone-stream upstream app (a static credential along, and `backend`) and its tool
/// `stream_ask`.
fn streamer(fx: &Fx, backend: Value) -> (String, String) {
    fx.upstream.standalone.set(true);
    fx.secret(TEAM_KEY);
    let mut backend = backend;
    backend["headers"] = json!({"X-Team-Key": TEAM_KEY});
    let app = upstream_app(fx, "Streamer", &format!("{UPSTREAM}/mcp"), backend);
    let tool = tool_named(fx, &app.code, "stream_ask");
    (app.code, tool)
}

/// A 2026-07-28 call of `stream_ask` sending `roots/list` on the stream, by a client that
/// declared roots; `extra` as in `call26`.
fn ask_roots(fx: &Fx, code: &str, tool: &str, extra: Value) -> Value {
    let mut e = extra;
    e["arguments"] = json!({"method": "roots/list"});
    last(&call26(fx, code, tool, json!({"roots": {}}), "alice", e))
}

fn gets(up: &McpUpstream) -> Vec<BackendRequest> {
    up.requests.borrow().iter().filter(|r| r.method == Method::Get).cloned().collect()
}

#[test]
fn a_roots_request_on_the_standalone_stream_during_a_bridged_call_becomes_a_round() {
    let fx = Fx::new(720);
    let (code, tool) = streamer(&fx, json!({}));
    let (key, request, state) = round_of(&ask_roots(&fx, &code, &tool, json!({})));
    assert_eq!(request, json!({"method": "roots/list", "params": {}}));
    assert!(key.starts_with("roots-"), "{key}");
    // The object holds the session's stream across the round, opened on the call's session with
    // the session's credentials.
    assert!(fx.upstream.standalone_open(), "held while the client answers");
    let g = gets(&fx.upstream);
    assert_eq!(g.len(), 1, "one GET for the call (the object's)");
    let call_session = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    assert!(call_session.is_some());
    assert_eq!(g[0].headers.get("mcp-session-id"), call_session);
    assert_eq!(g[0].headers.get("accept").as_deref(), Some("text/event-stream"));
    assert_eq!(g[0].headers.get("x-team-key").as_deref(), Some(TEAM_KEY));
    assert!(fx.upstream.answers.borrow().is_empty());
    let roots = json!({"roots": [{"uri": "file:///work/project", "name": "project"}]});
    let done = ask_roots(&fx, &code, &tool, retry(&key, roots.clone(), &state));
    let (is_error, text) = result_text(&done);
    assert!(!is_error && text.contains("file:///work/project"), "{done}");
    // The upstream got the roots under its own id, on the session whose stream asked.
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers, vec![(json!({"jsonrpc": "2.0", "id": "up-stream-1", "result": roots}), call_session)]);
    // Closed with the call; the object keeps nothing.
    assert!(!fx.upstream.standalone_open(), "closed when the call ended");
    assert_eq!(gets(&fx.upstream).len(), 1);
    let name = &bridges(&fx)[0];
    assert!(fx.sim.object_storage("BRIDGES", name).is_empty());
    assert_eq!(fx.sim.object_alarm("BRIDGES", name), None);
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn the_stream_closes_when_a_bridged_call_is_given_up_and_its_request_is_refused() {
    let fx = Fx::new(721);
    let (code, tool) = streamer(&fx, json!({"tool_call_timeout": 40}));
    round_of(&ask_roots(&fx, &code, &tool, json!({})));
    fx.sim.advance(39_000).unwrap_or_else(|h| panic!("{h}"));
    assert!(fx.upstream.standalone_open(), "held while the round may still be answered");
    assert!(fx.upstream.answers.borrow().is_empty());
    fx.sim.advance(2_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(upstream_calls(&fx, "notifications/cancelled").len(), 1, "the call cancelled upstream");
    assert!(!fx.upstream.standalone_open(), "the stream closed with the call");
    // The request that came on the stream is not part of the call: it is refused, saying why.
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].0["id"], "up-stream-1");
    let m = answers[0].0["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("given up") && m.contains("did not answer within 40 s"), "{m}");
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn the_stream_closes_when_the_clients_request_ends_before_the_bridged_call() {
    let fx = Fx::new(722);
    let (code, _) = streamer(&fx, json!({"tool_call_timeout": 5}));
    let tool = tool_named(&fx, &code, "stream_note");
    // A call that neither asks nor ends within the tool's 5 s: the client's request ends, and
    // the object gives the call up.
    let up = fx.upstream.clone();
    let open_meanwhile = Rc::new(std::cell::Cell::new(false));
    let seen = open_meanwhile.clone();
    crate::runtime::spawn(async move {
        crate::runtime::sleep(2_000).await;
        seen.set(up.standalone_open());
    });
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "error", "data": 1}});
    let mut e = json!({});
    e["arguments"] = json!({"message": log, "delayMs": 60_000});
    let started = fx.sim.now_ms();
    let v = last(&call26(&fx, &code, &tool, json!({"roots": {}}), "alice", e));
    assert!(result_text(&v).0, "{v}");
    assert!(fx.sim.now_ms() - started < 7_000, "ended by the tool's timeout");
    assert_eq!(bridges(&fx).len(), 1, "bridged");
    assert!(open_meanwhile.get(), "held while the call ran");
    assert!(!fx.upstream.standalone_open(), "closed when the call was given up");
    assert_eq!(upstream_calls(&fx, "notifications/cancelled").len(), 1);
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn no_standalone_get_without_a_session_and_one_legacy_connection_a_bridged_call() {
    let fx = Fx::new(723);
    // A stateless Streamable HTTP upstream: a 2026-07-28 client that declared roots is not
    // bridged (no session could carry the answers), and no stream is asked for.
    let plain = Rc::new(McpUpstream::new(false, true));
    plain.standalone.set(true);
    fx.sim.add_backend("https://plain.test", plain.clone());
    let app = upstream_app(&fx, "Plain", "https://plain.test/mcp", json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let mut e = json!({});
    e["arguments"] = json!({"text": "hi"});
    let v = last(&call26(&fx, &app.code, &tool, json!({"roots": {}}), "alice", e));
    assert_eq!(result_text(&v), (false, "echo: hi".into()));
    assert!(gets(&plain).is_empty(), "no session, no standalone stream");
    assert!(bridges(&fx).is_empty(), "not bridged");
    // A legacy SSE upstream, bridged: its one GET is the object's connection (the Worker opens
    // none of its own, and there is no standalone stream to ask for).
    let legacy = Rc::new(McpUpstream::new(false, false).legacy_only(None));
    legacy.asks.set(true);
    fx.sim.add_backend(LEGACY, legacy.clone());
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/sse"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let before = gets(&legacy).len();
    let (key, _, state) =
        round_of(&last(&call26(&fx, &app.code, &tool, json!({"elicitation": {}}), "alice", json!({}))));
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let done = last(&call26(&fx, &app.code, &tool, json!({"elicitation": {}}), "alice", retry(&key, answer, &state)));
    assert!(result_text(&done).1.contains("accept"), "{done}");
    // Two connections: one listing the tools for what this client declared
    // (`catalog_variants`), then the call's.
    let g: Vec<String> = gets(&legacy)[before..].iter().map(|r| r.path.clone()).collect();
    assert_eq!(g, vec!["/sse".to_string(); 2], "the list's session and the bridged call's");
    // With that list cached, another bridged call of the same caller opens none: it goes on the
    // caller's kept session (`legacy_sessions`).
    let before = gets(&legacy).len();
    let (key, _, state) =
        round_of(&last(&call26(&fx, &app.code, &tool, json!({"elicitation": {}}), "alice", json!({}))));
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let done = last(&call26(&fx, &app.code, &tool, json!({"elicitation": {}}), "alice", retry(&key, answer, &state)));
    assert!(result_text(&done).1.contains("accept"), "{done}");
    let g: Vec<String> = gets(&legacy)[before..].iter().map(|r| r.path.clone()).collect();
    assert!(g.is_empty(), "the kept session carried the second bridged call: {g:?}");
    fx.assert_invariants();
}

#[test]
fn a_log_on_the_standalone_stream_during_a_bridged_call_reaches_the_client_before_the_result() {
    let fx = Fx::new(724);
    let (code, _) = streamer(&fx, json!({}));
    let tool = tool_named(&fx, &code, "stream_note");
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "error", "data": "x"}});
    let mut e = json!({"_meta": {"io.modelcontextprotocol/logLevel": "warning"}});
    e["arguments"] = json!({"message": log, "delayMs": 300});
    let r = call26(&fx, &code, &tool, json!({"roots": {}}), "alice", e);
    assert_eq!(bridges(&fx).len(), 1, "bridged");
    let all = messages(&r);
    assert_eq!(all.len(), 2, "the log, then the result: {all:?}");
    assert_eq!(all[0], log);
    assert_eq!(result_text(&all[1]), (false, "sent".into()), "the stream carried the log");
    assert!(not_relayed(&fx).is_empty(), "{:?}", not_relayed(&fx));
    fx.assert_invariants();
}

#[test]
fn notifications_between_the_rounds_of_a_bridged_call_are_dropped_and_counted() {
    let fx = Fx::new(726);
    fx.upstream.asks.set(true);
    let (code, _) = streamer(&fx, json!({}));
    let tool = tool_named(&fx, &code, "ask");
    let all = messages(&call26(&fx, &code, &tool, json!({"elicitation": {}}), "alice", noting("tok-1")));
    assert_eq!(all.len(), 3, "{all:?}");
    let (key, _, state) = round_of(&all[2]);
    // The round is out and no request of the client's is open: what the upstream sends now on
    // the session's standalone stream (which the object holds) can reach nobody.
    let session = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    let stream = session.as_deref().and_then(|s| fx.upstream.standalone_stream(s));
    let Some(stream) = stream else { panic!("the object holds the stream across the round") };
    let frame = |m: Value| format!("event: message\ndata: {m}\n\n");
    let log = |level: &str| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": "between"}});
    stream.push(frame(log("error")));
    stream.push(frame(json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "tok-1", "progress": 1.5}})));
    // Below the level the client asked for: it would not have gone anyway, and is not counted.
    stream.push(frame(log("debug")));
    fx.sim.advance(1_000).unwrap_or_else(|h| panic!("{h}"));
    assert!(not_relayed(&fx).is_empty(), "said once, when the call ends");
    let mut again = retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state);
    again["_meta"] = taking("tok-2")["_meta"].clone();
    let all = messages(&call26(&fx, &code, &tool, json!({"elicitation": {}}), "alice", again));
    assert_eq!(all.len(), 3, "what came between the rounds is not in the retry's answer: {all:?}");
    assert_eq!(all[0], progress("tok-2", 2, "the result"));
    assert_eq!(all[1], info("the result"));
    assert!(result_text(&all[2]).1.contains("accept"), "{all:?}");
    let said = not_relayed(&fx);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("\"count\":2") && said[0].contains("Streamer"), "{}", said[0]);
    fx.assert_invariants();
}
