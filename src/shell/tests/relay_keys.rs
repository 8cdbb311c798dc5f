//! The relay's sealed ids (`fg-session.`, `fg-relay.`, `fg-task.`, `requestState`) are sealed
//! under keys derived from `SECRETS_KEY`: an id sealed under a key the Worker no longer holds is
//! not believed, one sealed under the previous key is during a rotation, and no two ids share a
//! nonce.

use serde_json::json;

use super::relay::{call_answering, client_headers, initialize};
use super::upstream_apps::*;
use super::*;

fn ask(tool: &str) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": {"question": "?"}}})
}

/// Whether the upstream's question reached the client (else the upstream got a refusal).
fn asked_client(fx: &Fx, code: &str, tool: &str, sid: &str) -> bool {
    let seen = call_answering(fx, code, client_headers(sid, None), ask(tool), |_| Vec::new());
    seen.messages.iter().any(|m| m["method"] == "elicitation/create")
}

#[test]
fn a_session_id_sealed_under_a_retired_key_is_not_believed() {
    let fx = Fx::new(360);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({"tool_call_timeout": 5}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    assert!(asked_client(&fx, &app.code, &tool, &sid), "the declared elicitation is believed");
    // Rotated, the old key kept as the previous one: still believed.
    let new_key = "2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d";
    fx.sim.set_setting("SECRETS_KEY", new_key);
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", SECRETS_KEY_HEX);
    fx.sim.evict_isolate();
    assert!(asked_client(&fx, &app.code, &tool, &sid), "believed under the previous key");
    // The old key retired: the id says nothing any more, and the upstream is told the client
    // cannot answer.
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", "");
    fx.sim.evict_isolate();
    let before = fx.upstream.answers.borrow().len();
    assert!(!asked_client(&fx, &app.code, &tool, &sid), "an id sealed under a retired key was believed");
    let answers = fx.upstream.answers.borrow();
    let refusal = answers[before..].iter().find_map(|(a, _)| a["error"]["message"].as_str().map(str::to_string));
    assert!(refusal.is_some_and(|m| m.contains("did not declare the elicitation")), "{:?}", &answers[before..]);
    drop(answers);
    fx.assert_invariants();
}

#[test]
fn two_session_ids_for_the_same_declaration_differ() {
    let fx = Fx::new(361);
    let app = upstream_app(&fx, "Up", &format!("{UPSTREAM}/mcp"), json!({}));
    let caps = json!({"elicitation": {}, "sampling": {}});
    let (a, b) = (initialize(&fx, &app.code, caps.clone(), None), initialize(&fx, &app.code, caps, None));
    // Each sealed under a nonce of its own: equal ids would mean a nonce used twice under one key.
    assert_ne!(a, b);
    fx.assert_invariants();
}
