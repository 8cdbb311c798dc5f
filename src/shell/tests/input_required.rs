//! Multi round-trip requests of a 2026-07-28 upstream (`input_required`), through Flowgate: the
//! client gets a `requestState` Flowgate sealed, never the upstream's own; its retry gives the
//! upstream its own state back; a state altered, or sent back by another client, is refused
//! before the upstream sees it.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::{Backend, BackendRequest, Reply};

const ROUNDS: &str = "https://rounds.test";
const UPSTREAM_STATE: &str = "upstream-state-1";

/// A 2026-07-28 upstream whose `ask` needs a name: without `inputResponses` it answers
/// `input_required` with its own `requestState`; with them, thanks the name given.
#[derive(Default)]
struct Rounds {
    /// The `requestState` of every `tools/call` (`None`: none sent).
    states: RefCell<Vec<Option<Value>>>,
}

impl Backend for Rounds {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let p = &msg["params"];
        let result = match msg["method"].as_str().unwrap_or_default() {
            "server/discover" => json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "rounds", "version": "1"}}),
            "tools/list" => {
                json!({"resultType": "complete", "tools": [{"name": "ask", "inputSchema": {"type": "object"}}]})
            }
            "tools/call" => {
                self.states.borrow_mut().push(p.get("requestState").cloned());
                match p["inputResponses"]["who"]["content"]["name"].as_str() {
                    Some(name) if p["requestState"] == UPSTREAM_STATE => json!({"resultType": "complete",
                        "content": [{"type": "text", "text": format!("thanks, {name}")}]}),
                    Some(_) => json!({"resultType": "complete", "isError": true,
                        "content": [{"type": "text", "text": "that is not my state"}]}),
                    None => json!({"resultType": "input_required", "requestState": UPSTREAM_STATE,
                        "inputRequests": {"who": {"method": "elicitation/create",
                            "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}}}),
                }
            }
            _ => json!({}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

/// A `tools/call` of `tool` by a 2026-07-28 client named `client` that can answer elicitations,
/// with more `params`; the answer's body.
fn call_2026(fx: &Fx, code: &str, tool: &str, client: &str, more: Value) -> Value {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"}});
    let mut params = json!({"name": tool, "arguments": {}, "_meta": meta});
    if let (Some(p), Some(m)) = (params.as_object_mut(), more.as_object()) {
        p.extend(m.clone());
    }
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    last(&fx.sim.request(request(Method::Post, &Fx::mcp_url(code), &headers, Some(&body))))
}

fn answer(state: &Value) -> Value {
    json!({"inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}}, "requestState": state})
}

#[test]
fn an_input_round_trip_hands_the_client_a_sealed_state_and_the_upstream_its_own() {
    let fx = Fx::new(370);
    let up = Rc::new(Rounds::default());
    fx.sim.add_backend(ROUNDS, up.clone());
    let app = upstream_app(&fx, "Rounds", &format!("{ROUNDS}/mcp"), json!({"protocol_version": "2026-07-28"}));
    let tool = tool_named(&fx, &app.code, "ask");
    let first = call_2026(&fx, &app.code, &tool, "alice", json!({}));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(first["result"]["inputRequests"]["who"]["method"], "elicitation/create", "{first}");
    let state = first["result"]["requestState"].clone();
    let sealed = state.as_str().unwrap_or_default();
    assert!(sealed.starts_with("fg-state.") && !sealed.contains(UPSTREAM_STATE), "{first}");
    // The client's retry: the upstream gets its own state back.
    let done = call_2026(&fx, &app.code, &tool, "alice", answer(&state));
    assert_eq!(result_text(&done), (false, "thanks, Ada".to_string()), "{done}");
    assert_eq!(up.states.borrow().last().cloned().flatten(), Some(json!(UPSTREAM_STATE)));
    // Another client, or an altered state: refused here, never sent on.
    let calls = up.states.borrow().len();
    let other = call_2026(&fx, &app.code, &tool, "mallory", answer(&state));
    let message = other["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`requestState` was given to another client"), "{other}");
    let flip = if sealed.ends_with('A') { 'B' } else { 'A' };
    let altered = json!(format!("{}{flip}", &sealed[..sealed.len() - 1]));
    let bad = call_2026(&fx, &app.code, &tool, "alice", answer(&altered));
    assert!(bad["error"]["message"].as_str().is_some_and(|m| m.contains("is not one Flowgate gave")), "{bad}");
    assert_eq!(up.states.borrow().len(), calls, "a refused state reached the upstream");
    // A 2025-11-25 client cannot answer an input request: told so, in words.
    let v = last(&fx.call(&app.code, &tool, json!({})));
    let text = v["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| result_text(&v).1);
    assert!(text.contains("which only MCP 2026-07-28 clients can give"), "{v}");
    fx.assert_invariants();
}
