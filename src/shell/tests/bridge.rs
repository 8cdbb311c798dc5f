//! The call bridge: a 2026-07-28 client calling a 2025 upstream's tool that asks for input gets
//! `input_required` rounds, held by one Durable Object per call; its retries reach the object
//! from any request, the upstream gets the answers under its own ids, and the result that used
//! them ends the call. Replayed, altered and foreign states never reach the upstream; a client
//! that does not come back has the call given up and cancelled upstream; a restarted object
//! gives a clear error, not a hang.

use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;

const V2026: &str = "2026-07-28";
pub(super) const LEGACY: &str = "https://legacy.test";

/// A 2026-07-28 `tools/call` of `tool` by client `client` that declared `caps`, with `extra`
/// params (a retry's `inputResponses` and `requestState`; its `_meta` added to the call's); the
/// answer.
pub(super) fn call26(fx: &Fx, code: &str, tool: &str, caps: Value, client: &str, extra: Value) -> ClientResponse {
    call26_taking(fx, code, tool, caps, client, extra, "application/json, text/event-stream")
}

/// [`call26`] by a client that takes `accept`.
pub(super) fn call26_taking(
    fx: &Fx,
    code: &str,
    tool: &str,
    caps: Value,
    client: &str,
    extra: Value,
    accept: &str,
) -> ClientResponse {
    let mut params = json!({"name": tool, "arguments": {"question": "Ship it?"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V2026, "io.modelcontextprotocol/clientCapabilities": caps,
                  "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"}}});
    let mut extra = extra;
    if let (Some(m), Some(x)) = (params["_meta"].as_object_mut(), extra.get("_meta").and_then(Value::as_object)) {
        m.extend(x.clone());
    }
    if let (Some(p), Some(x)) = (params.as_object_mut(), extra.as_object_mut()) {
        x.remove("_meta");
        p.extend(x.clone());
    }
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    let h = [
        ("content-type", "application/json"),
        ("accept", accept),
        ("mcp-protocol-version", V2026),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    fx.sim.request(request(Method::Post, &Fx::mcp_url(code), &h, Some(&body)))
}

pub(super) fn elicitation() -> Value {
    json!({"elicitation": {}})
}

/// An app of the scripted upstream (its `ask` tool listed), published; its code and `ask`'s name.
fn asker(fx: &Fx, backend: Value) -> (String, String) {
    fx.upstream.asks.set(true);
    let app = upstream_app(fx, "Asker", &format!("{UPSTREAM}/mcp"), backend);
    let tool = tool_named(fx, &app.code, "ask");
    (app.code, tool)
}

/// The round an answer asks for: its one key, the request, and the state.
pub(super) fn round_of(v: &Value) -> (String, Value, String) {
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required", "{v}");
    let requests = r["inputRequests"].as_object().cloned().unwrap_or_default();
    assert_eq!(requests.len(), 1, "{v}");
    let (key, request) = requests.into_iter().next().unwrap_or_default();
    (key, request, r["requestState"].as_str().unwrap_or_default().to_string())
}

pub(super) fn retry(key: &str, answer: Value, state: &str) -> Value {
    json!({"inputResponses": {key: answer}, "requestState": state})
}

/// What the upstream got as answers to its own requests.
pub(super) fn upstream_answers(fx: &Fx) -> Vec<Value> {
    fx.upstream.answers.borrow().iter().map(|(a, _)| a.clone()).collect()
}

/// The bridge objects made so far.
pub(super) fn bridges(fx: &Fx) -> Vec<String> {
    fx.sim.objects().into_iter().filter(|(ns, _)| ns == "BRIDGES").map(|(_, n)| n).collect()
}

pub(super) fn assert_invalid(v: &Value, needle: &str) {
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let m = v["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains(needle), "{m}");
}

#[test]
fn a_2026_client_answers_an_upstream_elicitation_in_a_round_and_gets_the_result_that_used_it() {
    let fx = Fx::new(700);
    let (code, tool) = asker(&fx, json!({}));
    let first = last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({})));
    let (key, request, state) = round_of(&first);
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Ship it?");
    assert!(state.starts_with("fg-bridge."), "{state}");
    assert!(!state.contains("up-ask") && !state.contains("sim-session"), "sealed: {state}");
    assert!(upstream_answers(&fx).is_empty(), "nothing answered yet");
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let done = last(&call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, answer.clone(), &state)));
    let (is_error, text) = result_text(&done);
    assert!(!is_error && text.contains("answered:") && text.contains("accept"), "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    // The upstream got the answer under its own id, on the session of the call.
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, json!({"jsonrpc": "2.0", "id": "up-ask-1", "result": answer}));
    let call_session = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    assert_eq!(answers[0].1, call_session);
    assert_eq!(upstream_calls(&fx, "tools/call").len(), 1, "one upstream call across both client requests");
    // Over: the object keeps nothing and sets no alarm.
    let names = bridges(&fx);
    assert_eq!(names.len(), 1);
    assert!(fx.sim.object_storage("BRIDGES", &names[0]).is_empty());
    assert_eq!(fx.sim.object_alarm("BRIDGES", &names[0]), None);
    fx.assert_invariants();
}

#[test]
fn two_rounds_in_one_call_and_a_replay_of_an_answered_round_never_reaches_the_upstream() {
    let fx = Fx::new(701);
    let (code, tool) = asker(&fx, json!({}));
    let ask = |extra: Value| {
        let mut e = extra;
        e["arguments"] = json!({"rounds": 2});
        last(&call26(&fx, &code, &tool, elicitation(), "alice", e))
    };
    let (k1, r1, s1) = round_of(&ask(json!({})));
    assert_eq!(r1["params"]["message"], "Question 1?");
    let (k2, r2, s2) = round_of(&ask(retry(&k1, json!({"action": "accept", "content": {"ok": true}}), &s1)));
    assert_eq!(r2["params"]["message"], "Question 2?");
    assert_ne!((k1.as_str(), s1.as_str()), (k2.as_str(), s2.as_str()));
    // The first round again: answered already, nothing more for the upstream.
    let replay = ask(retry(&k1, json!({"action": "decline"}), &s1));
    assert_invalid(&replay, "answered already");
    assert_eq!(upstream_answers(&fx).len(), 1);
    let done = ask(retry(&k2, json!({"action": "decline"}), &s2));
    let (is_error, text) = result_text(&done);
    assert!(!is_error && text.contains("accept") && text.contains("then") && text.contains("decline"), "{done}");
    let ids: Vec<Value> = upstream_answers(&fx).iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, vec![json!("up-ask-1"), json!("up-ask-2")]);
    // The last round again, after the result: refused too.
    assert_invalid(&ask(retry(&k2, json!({"action": "decline"}), &s2)), "");
    assert_eq!(upstream_answers(&fx).len(), 2);
    fx.assert_invariants();
}

#[test]
fn an_altered_or_foreign_state_is_refused_without_saying_whose_and_reaches_nothing() {
    let fx = Fx::new(702);
    let (code, tool) = asker(&fx, json!({}));
    let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({}))));
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let before = fx.upstream.requests.borrow().len();
    // Another client (on a server without client keys, another client name) cannot continue it.
    let foreign = last(&call26(&fx, &code, &tool, elicitation(), "bob", retry(&key, answer.clone(), &state)));
    assert_invalid(&foreign, "another client");
    assert!(!foreign.to_string().contains("alice"), "{foreign}");
    let mut altered = state.clone().into_bytes();
    let i = altered.len() - 3;
    altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap_or_default();
    let v = last(&call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, answer.clone(), &altered)));
    assert_invalid(&v, "not one Flowgate gave");
    let v = last(&call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, answer.clone(), "fg-bridge.made-up")));
    assert_invalid(&v, "not one Flowgate gave");
    // An answer that does not fit the round is refused, and the round stays open.
    let v = last(&call26(&fx, &code, &tool, elicitation(), "alice", retry("other", answer.clone(), &state)));
    assert_invalid(&v, &key);
    assert_eq!(fx.upstream.requests.borrow().len(), before, "nothing reached the upstream");
    // The caller's own answer still works.
    let done = last(&call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, answer, &state)));
    assert!(result_text(&done).1.contains("accept"), "{done}");
    fx.assert_invariants();
}

#[test]
fn a_client_that_never_comes_back_has_the_call_given_up_and_cancelled_upstream_within_the_bound() {
    let fx = Fx::new(703);
    let (code, tool) = asker(&fx, json!({"tool_call_timeout": 40}));
    let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({}))));
    let asked_at = fx.sim.now_ms();
    let call_id = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.json()).map(|m| m["id"].clone());
    fx.sim.advance(39_000).unwrap_or_else(|h| panic!("{h}"));
    assert!(upstream_calls(&fx, "notifications/cancelled").is_empty(), "not before the bound");
    fx.sim.advance(2_000).unwrap_or_else(|h| panic!("{h}"));
    let cancels = upstream_calls(&fx, "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "cancelled once the client's 40 s were up");
    let cancel = cancels[0].json().unwrap_or_default();
    assert_eq!(Some(cancel["params"]["requestId"].clone()), call_id);
    assert!(cancel["params"]["reason"].as_str().unwrap_or_default().contains("did not answer within 40 s"));
    let name = &bridges(&fx)[0];
    assert!(fx.sim.object_storage("BRIDGES", name).is_empty());
    assert_eq!(fx.sim.object_alarm("BRIDGES", name), None);
    assert!(fx.sim.now_ms() - asked_at < 42_000);
    // A late answer is refused, and nothing reaches the upstream.
    let late =
        last(&call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, json!({"action": "accept"}), &state)));
    assert_invalid(&late, "expired");
    assert!(upstream_answers(&fx).is_empty());
    fx.assert_invariants();
}

#[test]
fn a_restarted_object_gives_a_clear_error_not_a_hang() {
    let fx = Fx::new(704);
    let (code, tool) = asker(&fx, json!({}));
    let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({}))));
    let name = bridges(&fx)[0].clone();
    let call_id = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.json()).map(|m| m["id"].clone());
    fx.sim.restart_object("BRIDGES", &name);
    let r = call26(&fx, &code, &tool, elicitation(), "alice", retry(&key, json!({"action": "accept"}), &state));
    assert_invalid(&last(&r), "restarted");
    assert!(upstream_answers(&fx).is_empty());
    assert!(fx.sim.object_storage("BRIDGES", &name).is_empty());
    // The upstream is told the call is gone, not left waiting.
    let cancels = upstream_calls(&fx, "notifications/cancelled");
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].json().map(|m| m["params"]["requestId"].clone()), call_id);
    assert!(cancels[0].headers.get("mcp-session-id").is_some());
    fx.assert_invariants();
}

#[test]
fn an_undeclared_capability_gets_the_existing_refusal() {
    let fx = Fx::new(705);
    let (code, tool) = asker(&fx, json!({}));
    // Declared sampling only: bridged, but the upstream's elicitation is refused with the reason.
    let v = last(&call26(&fx, &code, &tool, json!({"sampling": {}}), "alice", json!({})));
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("refused"), "{v}");
    let refusal = upstream_answers(&fx).pop().unwrap_or_default();
    let m = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("did not declare the elicitation (form mode) capability"), "{m}");
    // Declared nothing: not bridged, refused as before.
    let v = last(&call26(&fx, &code, &tool, json!({}), "alice", json!({})));
    assert!(result_text(&v).0, "{v}");
    let m =
        upstream_answers(&fx).pop().unwrap_or_default()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(m.contains("2026-07-28"), "{m}");
    assert_eq!(bridges(&fx).len(), 1);
    fx.assert_invariants();
}

#[test]
fn a_legacy_sse_upstream_is_bridged_too() {
    let fx = Fx::new(706);
    let legacy = Rc::new(crate::sim::backends::mcp::McpUpstream::new(false, false).legacy_only(None));
    legacy.asks.set(true);
    fx.sim.add_backend(LEGACY, legacy.clone());
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/sse"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let (key, _, state) = round_of(&last(&call26(&fx, &app.code, &tool, elicitation(), "alice", json!({}))));
    let done = last(&call26(
        &fx,
        &app.code,
        &tool,
        elicitation(),
        "alice",
        retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state),
    ));
    assert!(result_text(&done).1.contains("accept"), "{done}");
    assert_eq!(legacy.answers.borrow().len(), 1);
    fx.assert_invariants();
}

#[test]
fn without_secrets_key_the_bridge_is_off_and_the_call_runs_as_before() {
    let fx = Fx::new(707);
    let (code, tool) = asker(&fx, json!({}));
    fx.sim.set_setting("SECRETS_KEY", "");
    fx.sim.evict_isolate();
    let v = last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({})));
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("refused"), "{v}");
    let m =
        upstream_answers(&fx).pop().unwrap_or_default()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(m.contains("2026-07-28"), "{m}");
    assert!(bridges(&fx).is_empty(), "no object was made");
    fx.assert_invariants();
}

#[test]
fn a_restarted_object_that_no_client_comes_back_to_cancels_the_call_at_its_next_alarm() {
    let fx = Fx::new(708);
    let (code, tool) = asker(&fx, json!({}));
    round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({}))));
    let name = bridges(&fx)[0].clone();
    fx.sim.restart_object("BRIDGES", &name);
    fx.sim.advance(31_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(upstream_calls(&fx, "notifications/cancelled").len(), 1, "at the heartbeat alarm");
    assert!(fx.sim.object_storage("BRIDGES", &name).is_empty());
    assert_eq!(fx.sim.object_alarm("BRIDGES", &name), None);
    fx.assert_invariants();
}

#[test]
fn two_retries_of_one_round_at_once_give_the_upstream_one_answer() {
    for seed in crate::sim::seeds(710..714) {
        let fx = Fx::new(seed);
        let (code, tool) = asker(&fx, json!({}));
        let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", json!({}))));
        let mut params = json!({"name": tool, "arguments": {"question": "Ship it?"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": V2026,
                      "io.modelcontextprotocol/clientCapabilities": elicitation(),
                      "io.modelcontextprotocol/clientInfo": {"name": "alice", "version": "1"}}});
        params["inputResponses"] = json!({&key: {"action": "accept", "content": {"ok": true}}});
        params["requestState"] = state.clone().into();
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
        let h = [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", V2026),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool.as_str()),
        ];
        let one = || request(Method::Post, &Fx::mcp_url(&code), &h, Some(&body));
        let answers: Vec<Value> = fx.sim.requests_at_once(vec![one(), one()]).iter().map(last).collect();
        let done = answers.iter().filter(|v| result_text(v).1.contains("accept")).count();
        let refused = answers.iter().filter(|v| v["error"]["code"] == -32602).count();
        assert_eq!((done, refused), (1, 1), "seed {seed}: {answers:?}");
        assert_eq!(upstream_answers(&fx).len(), 1, "seed {seed}");
        fx.assert_invariants();
    }
}

#[test]
fn a_retry_that_outlasts_the_call_timeout_cancels_the_call_upstream() {
    let fx = Fx::new(709);
    let (code, tool) = asker(&fx, json!({"tool_call_timeout": 20}));
    let args = json!({"arguments": {"question": "Ship it?", "stall": true}});
    let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", args.clone())));
    let call_id = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.json()).map(|m| m["id"].clone());
    let mut again = retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state);
    again["arguments"] = args["arguments"].clone();
    let started = fx.sim.now_ms();
    let v = last(&call26(&fx, &code, &tool, elicitation(), "alice", again));
    assert!(result_text(&v).0, "{v}");
    assert!(fx.sim.now_ms() - started <= 21_000, "ended by the call's timeout");
    assert_eq!(upstream_answers(&fx).len(), 1, "the answer reached the upstream");
    let cancels = upstream_calls(&fx, "notifications/cancelled");
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].json().map(|m| m["params"]["requestId"].clone()), call_id);
    let name = &bridges(&fx)[0];
    assert!(fx.sim.object_storage("BRIDGES", name).is_empty());
    assert_eq!(fx.sim.object_alarm("BRIDGES", name), None);
    fx.assert_invariants();
}

/// `_meta` of a request that takes progress under `token` and log messages from `info` up.
pub(super) fn taking(token: &str) -> Value {
    json!({"_meta": {"progressToken": token, "io.modelcontextprotocol/logLevel": "info"}})
}

/// The `ask` call's first request, with `notes` on: the upstream sends progress and logs
/// before each question and before its result.
pub(super) fn noting(token: &str) -> Value {
    let mut first = taking(token);
    first["arguments"] = json!({"question": "Ship it?", "notes": true});
    first
}

pub(super) fn progress(token: &str, n: u64, before: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
           "params": {"progressToken": token, "progress": n, "message": format!("before {before}")}})
}

pub(super) fn info(before: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message",
           "params": {"level": "info", "logger": "ask", "data": format!("info: before {before}")}})
}

pub(super) fn not_relayed(fx: &Fx) -> Vec<String> {
    fx.sim.logs().into_iter().filter(|l| l.contains("were not relayed")).collect()
}

#[test]
fn progress_and_logs_of_a_bridged_call_reach_the_clients_sse_answer_before_its_round_and_its_result() {
    let fx = Fx::new(715);
    let (code, tool) = asker(&fx, json!({}));
    let r = call26(&fx, &code, &tool, elicitation(), "alice", noting("tok-1"));
    assert_eq!(bridges(&fx).len(), 1, "bridged");
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("text/event-stream")), "{:?}", r.headers);
    // In the order they came, the round last; the debug message is below the client's level.
    let all = messages(&r);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[0], progress("tok-1", 1, "question 1"));
    assert_eq!(all[1], info("question 1"));
    let (key, _, state) = round_of(&all[2]);
    // The upstream call went up with the first request's token.
    let sent = upstream_calls(&fx, "tools/call").pop().and_then(|c| c.json()).unwrap_or_default();
    assert_eq!(sent["params"]["_meta"]["progressToken"], "tok-1");
    // The retry has a token of its own: the call's progress comes to it under that one.
    let mut again = retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state);
    again["_meta"] = taking("tok-2")["_meta"].clone();
    let all = messages(&call26(&fx, &code, &tool, elicitation(), "alice", again));
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[0], progress("tok-2", 2, "the result"));
    assert_eq!(all[1], info("the result"));
    let (is_error, text) = result_text(&all[2]);
    assert!(!is_error && text.contains("accept"), "{all:?}");
    assert!(not_relayed(&fx).is_empty(), "nothing came between the requests: {:?}", not_relayed(&fx));
    fx.assert_invariants();
}

#[test]
fn a_bridged_retry_that_asks_for_no_progress_or_logs_gets_none() {
    let fx = Fx::new(716);
    let (code, tool) = asker(&fx, json!({}));
    let (key, _, state) = round_of(&last(&call26(&fx, &code, &tool, elicitation(), "alice", noting("tok-1"))));
    let again = retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state);
    let all = messages(&call26(&fx, &code, &tool, elicitation(), "alice", again));
    assert_eq!(all.len(), 1, "the result only: {all:?}");
    assert!(result_text(&all[0]).1.contains("accept"), "{all:?}");
    fx.assert_invariants();
}

#[test]
fn a_json_only_client_gets_no_notifications_of_a_bridged_call() {
    let fx = Fx::new(717);
    let (code, tool) = asker(&fx, json!({}));
    let json_only = |extra: Value| call26_taking(&fx, &code, &tool, elicitation(), "alice", extra, "application/json");
    let r = json_only(noting("tok-1"));
    assert_eq!(bridges(&fx).len(), 1, "bridged");
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("application/json")), "{:?}", r.headers);
    let all = messages(&r);
    assert_eq!(all.len(), 1, "{all:?}");
    let (key, _, state) = round_of(&all[0]);
    let mut again = retry(&key, json!({"action": "accept", "content": {"ok": true}}), &state);
    again["_meta"] = taking("tok-2")["_meta"].clone();
    let r = json_only(again);
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("application/json")), "{:?}", r.headers);
    let all = messages(&r);
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(result_text(&all[0]).1.contains("accept"), "{all:?}");
    fx.assert_invariants();
}
