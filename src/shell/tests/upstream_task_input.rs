//! A 2025-11-25 upstream's task that waits for input: the upstream asks (an elicitation
//! related to the task) on the stream of the client's `tasks/result`, as the TypeScript SDK
//! delivers a task's requests. A 2025-11-25 client reading that stream gets the request under a
//! sealed id and its answer reaches the upstream; a client that cannot take it (it did not
//! declare the capability, or takes only JSON) has it refused to the upstream at once, so the
//! task goes on instead of waiting for the upstream's own timeout.

use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::{call_answering, client_headers, initialize, Seen};
use super::upstream_apps::*;
use super::*;
use crate::sim::backends::mcp::McpUpstream;

const TASKS_UP: &str = "https://tasks.test";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// An upstream keeping 2025-11-25 tasks, its app published, and a client session that declared
/// `capabilities`: (upstream, app, session id, the listed name of `long_job`).
fn setup(fx: &Fx, capabilities: Value) -> (Rc<McpUpstream>, UpApp, String, String) {
    let up = Rc::new(McpUpstream::new(true, false).with_tasks(3_000));
    fx.sim.add_backend(TASKS_UP, up.clone());
    let app = upstream_app(fx, "Jobs", &format!("{TASKS_UP}/mcp"), json!({}));
    let sid = initialize(fx, &app.code, capabilities, None);
    let tool = tool_named(fx, &app.code, "long_job");
    (up, app, sid, tool)
}

/// One POST with exactly `headers` (a client's, as `client_headers` makes them).
fn post(fx: &Fx, code: &str, headers: &[(String, String)], body: &Value) -> crate::sim::ClientResponse {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    fx.sim.request(request(crate::runtime::Method::Post, &Fx::mcp_url(code), &h, Some(body)))
}

fn task_get(fx: &Fx, code: &str, headers: &[(String, String)], id: &str) -> Value {
    last(&post(fx, code, headers, &json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"taskId": id}})))
}

/// Starts `long_job` as a task that asks `question`: Flowgate's id of the task.
fn start_asking(fx: &Fx, code: &str, headers: &[(String, String)], tool: &str, question: &str) -> String {
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": tool, "arguments": {"text": "job", "question": question}, "task": {"ttl": 60_000}}});
    let created = last(&post(fx, code, headers, &call));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(id.starts_with("fg-task."), "{created}");
    id
}

fn tasks_result(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 21, "method": "tasks/result", "params": {"taskId": id}})
}

/// The response to the `tasks/result` (id 21).
fn result_of(seen: &Seen) -> Value {
    seen.messages.iter().rev().find(|m| m["id"] == 21 && m.get("method").is_none()).cloned().unwrap_or(Value::Null)
}

/// The requests relayed to the client.
fn relayed(seen: &Seen) -> Vec<Value> {
    seen.messages.iter().filter(|m| m.get("method").is_some() && m.get("id").is_some()).cloned().collect()
}

#[test]
fn a_tasks_input_request_reaches_its_client_on_tasks_result_and_the_answer_its_upstream() {
    let fx = Fx::new(4300);
    let (up, app, sid, tool) = setup(&fx, json!({"elicitation": {}}));
    let headers = client_headers(&sid, None);
    let id = start_asking(&fx, &app.code, &headers, &tool, "Overwrite the report?");
    let upstream_id = up.task_ids().pop().unwrap_or_default();
    let got = task_get(&fx, &app.code, &headers, &id);
    assert_eq!(got["result"]["status"], "input_required", "{got}");

    let t0 = fx.sim.now_ms();
    let h2 = headers.clone();
    let seen = call_answering(&fx, &app.code, headers, tasks_result(&id), move |m| {
        vec![(
            h2.clone(),
            json!({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "accept", "content": {"ok": true}}}),
        )]
    });
    let asked = relayed(&seen);
    assert_eq!(asked.len(), 1, "{:?}", seen.messages);
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(asked[0]["params"]["message"], "Overwrite the report?");
    let ticket = asked[0]["id"].as_str().unwrap_or_default();
    assert!(ticket.starts_with("fg-relay."), "{ticket}");
    // The request names the task by the id the client knows; the upstream's shows nowhere.
    assert_eq!(asked[0]["params"]["_meta"][RELATED_TASK]["taskId"], id.as_str(), "{}", asked[0]);
    assert!(!asked[0].to_string().contains(&upstream_id), "{}", asked[0]);
    assert_eq!(seen.posted, vec![(202, String::new())]);
    // The upstream got the answer under its own id of the request, on the task's session.
    let answers = up.answers.borrow().clone();
    let (answer, session) = answers.last().cloned().unwrap_or_default();
    assert!(answer["id"].as_str().is_some_and(|i| i.starts_with("up-task-ask-")), "{answer}");
    assert_eq!(answer["result"]["action"], "accept", "{answer}");
    assert!(session.is_some_and(|s| s.starts_with("sim-session-")));
    // The answer ended the task: tasks/result's result, related to Flowgate's id.
    let result = result_of(&seen);
    assert_eq!(result_text(&result), (false, r#"answered: {"action":"accept","content":{"ok":true}}"#.into()));
    assert_eq!(result["result"]["_meta"][RELATED_TASK]["taskId"], id.as_str(), "{result}");
    assert!(fx.sim.now_ms() - t0 < 5_000, "no one waited");
    let got = task_get(&fx, &app.code, &client_headers(&sid, None), &id);
    assert_eq!(got["result"]["status"], "completed", "{got}");
    fx.assert_invariants();
}

#[test]
fn a_tasks_input_request_the_client_did_not_declare_is_refused_to_the_upstream_at_once() {
    let fx = Fx::new(4301);
    let (up, app, sid, tool) = setup(&fx, json!({"roots": {}}));
    let headers = client_headers(&sid, None);
    let id = start_asking(&fx, &app.code, &headers, &tool, "Overwrite?");
    let t0 = fx.sim.now_ms();
    let r = post(&fx, &app.code, &headers, &tasks_result(&id));
    // Nothing reached the client before the result: it is answered as JSON, as before.
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("application/json")), "{:?}", r.headers);
    assert_eq!(messages(&r).len(), 1, "{}", r.text());
    let (answer, _) = up.answers.borrow().last().cloned().unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let why = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("did not declare the elicitation (form mode) capability"), "{why}");
    // The upstream went on at once: the task ended with its refusal, long before any timeout.
    let result = last(&r);
    let (is_error, text) = result_text(&result);
    assert!(is_error && text.starts_with("refused:") && text.contains("did not declare"), "{result}");
    assert!(fx.sim.now_ms() - t0 < 5_000, "refused at once, not after a timeout");
    fx.assert_invariants();
}

#[test]
fn a_tasks_input_request_for_a_client_that_takes_only_json_is_refused_saying_so() {
    let fx = Fx::new(4302);
    let (up, app, sid, tool) = setup(&fx, json!({"elicitation": {}}));
    let mut headers = client_headers(&sid, None);
    let id = start_asking(&fx, &app.code, &headers, &tool, "Overwrite?");
    for (k, v) in headers.iter_mut() {
        if k == "accept" {
            *v = "application/json".into();
        }
    }
    let t0 = fx.sim.now_ms();
    let r = post(&fx, &app.code, &headers, &tasks_result(&id));
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("application/json")), "{:?}", r.headers);
    let result = last(&r);
    let (is_error, text) = result_text(&result);
    assert!(is_error && text.contains("takes only JSON"), "{result}");
    let (answer, _) = up.answers.borrow().last().cloned().unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert!(fx.sim.now_ms() - t0 < 5_000);
    fx.assert_invariants();
}
