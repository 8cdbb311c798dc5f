//! Legacy HTTP+SSE sessions kept across requests by the `LegacySession` Durable Object: one
//! caller's calls share one upstream session (a stateful tool counts on), callers are apart,
//! a request of the upstream's that no call can take is refused at once, an idle session is
//! closed, a dead one replaced, a restarted object survived, and without the binding each
//! request opens its own session as before.

use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::initialize;
use super::upstream_apps::*;
use super::*;
use crate::pure::backend::mcp::legacy_session::IDLE_MS;
use crate::runtime::Method;
use crate::shell::platform::LEGACY_SESSIONS;
use crate::sim::backends::mcp::McpUpstream;

const LEGACY: &str = "https://legacy.test";

/// A legacy-only upstream with the stateful `count` tool, as an app at its `/sse` URL.
fn counter(fx: &Fx) -> (Rc<McpUpstream>, UpApp, String) {
    let up = Rc::new(McpUpstream::new(false, false).legacy_only(None));
    up.counts.set(true);
    fx.sim.add_backend(LEGACY, up.clone());
    let app = upstream_app(fx, "Old", &format!("{LEGACY}/sse"), json!({}));
    let tool = tool_named(fx, &app.code, "count");
    (up, app, tool)
}

/// `count` called by the caller of Flowgate session `sid` (none: the anonymous caller): its text.
fn count(fx: &Fx, app: &UpApp, tool: &str, sid: Option<&str>) -> String {
    let headers: Vec<(&str, &str)> = sid.map(|s| vec![("mcp-session-id", s)]).unwrap_or_default();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
    let r = fx.mcp_with(&app.code, &headers, &call);
    let (is_error, text) = result_text(&last(&r));
    assert!(!is_error, "{}", r.text());
    text
}

fn streams_opened(up: &McpUpstream) -> usize {
    up.requests.borrow().iter().filter(|r| r.method == Method::Get).count()
}

fn session_objects(fx: &Fx) -> Vec<String> {
    fx.sim.objects().into_iter().filter(|(ns, _)| ns == LEGACY_SESSIONS).map(|(_, n)| n).collect()
}

/// The log lines saying a call went on a new session, and why the one before ended.
fn new_session_logs(fx: &Fx) -> Vec<Value> {
    fx.sim
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["msg"] == "the call went on a new legacy SSE session with its upstream")
        .collect()
}

#[test]
fn two_calls_of_one_caller_go_on_one_upstream_session() {
    let fx = Fx::new(700);
    let (up, app, tool) = counter(&fx);
    let before = streams_opened(&up);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    let news = new_session_logs(&fx).len();
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    assert_eq!(count(&fx, &app, &tool, None), "count 3");
    // One stream for the caller's session (the tool list has one of its own, opened before).
    assert_eq!(streams_opened(&up) - before, 1);
    assert_eq!(session_objects(&fx).len(), 2, "the list's session and the caller's");
    // Only the first call said its session was new.
    assert_eq!(new_session_logs(&fx).len(), news, "{:?}", fx.sim.logs());
    fx.assert_invariants();
}

#[test]
fn two_callers_get_sessions_of_their_own() {
    let fx = Fx::new(701);
    let (_up, app, tool) = counter(&fx);
    let alice = initialize(&fx, &app.code, json!({}), None);
    let bob = initialize(&fx, &app.code, json!({}), None);
    assert_eq!(count(&fx, &app, &tool, Some(&alice)), "count 1");
    assert_eq!(count(&fx, &app, &tool, Some(&bob)), "count 1");
    assert_eq!(count(&fx, &app, &tool, Some(&alice)), "count 2");
    assert_eq!(count(&fx, &app, &tool, Some(&bob)), "count 2");
    assert_eq!(session_objects(&fx).len(), 3, "the list's session, alice's and bob's");
    fx.assert_invariants();
}

#[test]
fn a_request_of_the_upstreams_with_no_call_running_is_refused_at_once() {
    let fx = Fx::new(702);
    let (up, app, tool) = counter(&fx);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    let sent_at = fx.sim.now_ms();
    up.send_on_streams(&json!({"jsonrpc": "2.0", "id": "unrelated-1", "method": "roots/list"}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    let answers = up.answers.borrow().clone();
    // Both open sessions (the list's and the caller's) answered within 100 ms, not at the
    // upstream's own timeout.
    assert_eq!(answers.len(), 2, "{answers:?}");
    for (answer, session) in &answers {
        assert_eq!(answer["id"], "unrelated-1", "{answer}");
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
        let why = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("\"roots/list\"") && why.contains("no call is running"), "{why}");
        assert!(session.as_deref().is_some_and(|s| s.starts_with("legacy-")), "{session:?}");
    }
    assert!(fx.sim.now_ms() - sent_at <= 100);
    // A ping is answered by the session itself.
    up.send_on_streams(&json!({"jsonrpc": "2.0", "id": "ping-1", "method": "ping"}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    let pongs: Vec<_> = up.answers.borrow().iter().filter(|(a, _)| a["id"] == "ping-1").cloned().collect();
    assert_eq!(pongs.len(), 2);
    assert!(pongs.iter().all(|(a, _)| a["result"] == json!({})), "{pongs:?}");
    // The session goes on.
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    fx.assert_invariants();
}

#[test]
fn an_idle_session_is_closed_after_its_bound_and_the_next_call_opens_a_new_one() {
    let fx = Fx::new(703);
    let (up, app, tool) = counter(&fx);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    // Just short of the bound: still the same session, and a call starts the bound again.
    fx.sim.advance(IDLE_MS - 1_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    fx.sim.advance(IDLE_MS - 1_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(count(&fx, &app, &tool, None), "count 3");
    let readers = |fx: &Fx| fx.sim.pending_tasks().iter().filter(|t| t.contains("spawned by")).count();
    assert!(readers(&fx) >= 1, "no stream is read: {:?}", fx.sim.pending_tasks());
    // Past it: closed, nothing reads it any more.
    fx.sim.advance(IDLE_MS + 1_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(readers(&fx), 0, "{:?}", fx.sim.pending_tasks());
    let before = streams_opened(&up);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    assert!(streams_opened(&up) > before);
    let news = new_session_logs(&fx);
    let last = news.last().cloned().unwrap_or_default();
    assert_eq!(last["earlier_session_ended"], "it was idle for 300 s", "{news:?}");
    fx.assert_invariants();
}

#[test]
fn a_dead_stream_gets_a_new_session_on_the_next_call() {
    let fx = Fx::new(704);
    let (up, app, tool) = counter(&fx);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    // The upstream ends its streams (a restart): the next call says its session is new.
    up.end_streams();
    fx.sim.advance(10).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    let news = new_session_logs(&fx);
    assert_eq!(
        news.last().map(|l| l["earlier_session_ended"].clone()),
        Some(json!("the upstream closed its event stream"))
    );
    // The upstream forgets the session but leaves the stream open: its endpoint's 404 makes
    // the call open a new one, once.
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    up.forget_streams();
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    let news = new_session_logs(&fx);
    let why = news.last().and_then(|l| l["earlier_session_ended"].as_str().map(str::to_string)).unwrap_or_default();
    assert!(why.contains("its endpoint refused a message (HTTP 404)"), "{why}");
    fx.assert_invariants();
}

#[test]
fn a_restarted_session_object_opens_a_new_session() {
    let fx = Fx::new(705);
    let (_up, app, tool) = counter(&fx);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    let news = new_session_logs(&fx).len();
    for name in session_objects(&fx) {
        fx.sim.restart_object(LEGACY_SESSIONS, &name);
    }
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    assert_eq!(count(&fx, &app, &tool, None), "count 2");
    assert_eq!(new_session_logs(&fx).len(), news + 1, "the call after the restart said its session was new");
    fx.assert_invariants();
}

#[test]
fn without_the_binding_each_request_opens_a_session_of_its_own() {
    let fx = Fx::new(706);
    fx.sim.unbind_object(LEGACY_SESSIONS);
    let (up, app, tool) = counter(&fx);
    let before = streams_opened(&up);
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    assert_eq!(count(&fx, &app, &tool, None), "count 1");
    assert_eq!(streams_opened(&up) - before, 2);
    assert!(session_objects(&fx).is_empty());
    assert!(fx.sim.logs().iter().any(|l| l.contains("legacy SSE session object of app 'Old'")), "{:?}", fx.sim.logs());
    fx.assert_invariants();
}

#[test]
fn a_request_of_the_upstreams_among_several_calls_of_the_caller_is_refused_with_the_reason() {
    let fx = Fx::new(707);
    let up = Rc::new(McpUpstream::new(false, false).legacy_only(None));
    up.asks.set(true);
    fx.sim.add_backend(LEGACY, up.clone());
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/sse"), json!({"tool_call_timeout": 5}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
        ("mcp-session-id", sid.as_str()),
    ];
    let ask = |id: u64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"question": "Which?"}}});
        request(Method::Post, &Fx::mcp_url(&app.code), &headers, Some(&body))
    };
    // Both calls run at once on the caller's one session: the second question, at least, comes
    // while two calls run, and cannot be placed.
    let answers = fx.sim.requests_at_once(vec![ask(31), ask(32)]);
    let texts: Vec<String> = answers.iter().map(|r| result_text(&last(r)).1).collect();
    assert!(texts.iter().any(|t| t.contains("refused") && t.contains("2 calls are running")), "{texts:?}");
    let refusals: Vec<_> = up.answers.borrow().iter().filter(|(a, _)| a.get("error").is_some()).cloned().collect();
    assert!(!refusals.is_empty());
    assert!(
        refusals.iter().all(|(a, _)| a["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("relayed only while one call runs"))),
        "{refusals:?}"
    );
    fx.assert_invariants();
}

#[test]
fn a_call_that_runs_out_of_time_is_cancelled_upstream_under_the_id_the_session_gave_it() {
    let fx = Fx::new(708);
    let up = Rc::new(McpUpstream::new(false, false).legacy_only(None));
    up.asks.set(true);
    up.counts.set(true);
    fx.sim.add_backend(LEGACY, up.clone());
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/sse"), json!({"tool_call_timeout": 5}));
    let (ask, count_tool) = (tool_named(&fx, &app.code, "ask"), tool_named(&fx, &app.code, "count"));
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    // Two calls first, so the session's ids are not the client's own numbering.
    assert_eq!(count(&fx, &app, &count_tool, Some(&sid)), "count 1");
    assert_eq!(count(&fx, &app, &count_tool, Some(&sid)), "count 2");
    // The question goes to the client, which never answers: the call runs out of time.
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": ask, "arguments": {"question": "Still there?"}}});
    let r = fx.mcp_with(&app.code, &[("mcp-session-id", sid.as_str())], &call);
    let (is_error, text) = result_text(&last(&r));
    assert!(is_error, "{}", r.text());
    let sent = up.requests.borrow().iter().filter_map(|q| q.json()).find(|m| m["params"]["name"] == "ask");
    let sent_id = sent.map(|m| m["id"].clone()).unwrap_or_default();
    let cancels: Vec<Value> = up
        .requests
        .borrow()
        .iter()
        .filter_map(|q| q.json())
        .filter(|m| m["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(cancels.len(), 1, "{text} {cancels:?}");
    assert_eq!(cancels[0]["params"]["requestId"], sent_id, "{cancels:?}");
    fx.assert_invariants();
}

#[test]
fn progress_and_logs_of_the_only_call_come_back_with_the_clients_token() {
    let fx = Fx::new(709);
    let (up, app, _) = counter(&fx);
    let tool = tool_named(&fx, &app.code, "slow_progress");
    let call = json!({"jsonrpc": "2.0", "id": 51, "method": "tools/call", "params": {
        "name": tool, "arguments": {"steps": 2, "delayMs": 0}, "_meta": {"progressToken": "client-token"}}});
    let r = fx.mcp(&app.code, &call);
    let got = messages(&r);
    let progress: Vec<&Value> = got.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 2, "{got:?}");
    assert!(progress.iter().all(|m| m["params"]["progressToken"] == "client-token"), "{progress:?}");
    let logs = got.iter().filter(|m| m["method"] == "notifications/message").count();
    assert_eq!(logs, 2, "{got:?}");
    assert_eq!(result_text(&last(&r)), (false, "done 2".to_string()));
    // Upstream, the token was the session's own id for the call.
    let sent = up.requests.borrow().iter().filter_map(|q| q.json()).find(|m| m["params"]["name"] == "slow_progress");
    let sent = sent.unwrap_or_default();
    assert_eq!(sent["params"]["_meta"]["progressToken"], sent["id"], "{sent}");
    fx.assert_invariants();
}
