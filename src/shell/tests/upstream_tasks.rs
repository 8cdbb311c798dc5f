//! Tasks an upstream MCP server keeps, relayed: the task its `tools/call` created goes to the
//! client under a sealed `fg-task.` id; `tasks/get` and `tasks/result` reach the upstream that
//! holds it, under the upstream's own id; another caller, another server, and a made-up or
//! altered id find no task.

use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::mcp::McpUpstream;

/// An upstream that runs `long_job` as a 2025-11-25 task when asked.
const TASKS_UP: &str = "https://tasks.test";

fn tasks_upstream(fx: &Fx) -> Rc<McpUpstream> {
    let up = Rc::new(McpUpstream::new(true, false).with_tasks(3_000));
    fx.sim.add_backend(TASKS_UP, up.clone());
    up
}

fn rpc_as(fx: &Fx, code: &str, auth: Option<&str>, method: &str, params: Value) -> Value {
    let bearer = auth.map(|a| format!("Bearer {a}"));
    let h: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
    rpc_with(fx, code, &h, method, params)
}

fn job_name(fx: &Fx, code: &str, auth: Option<&str>) -> String {
    let bearer = auth.map(|a| format!("Bearer {a}"));
    let h: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
    let list = tools(fx, code, &h);
    let job = list.iter().find(|t| t["name"].as_str().is_some_and(|n| n.ends_with("long_job")));
    let job = job.cloned().unwrap_or_else(|| panic!("{list:?}"));
    assert_eq!(job["execution"]["taskSupport"], "optional", "{job}");
    job["name"].as_str().unwrap_or_default().to_string()
}

/// Starts `long_job` as a task; the task object the client got.
fn start(fx: &Fx, code: &str, auth: Option<&str>, tool: &str) -> Value {
    let created = rpc_as(
        fx,
        code,
        auth,
        "tools/call",
        json!({"name": tool, "arguments": {"text": "hi"}, "task": {"ttl": 60_000}}),
    );
    let task = created["result"]["task"].clone();
    assert!(task["taskId"].as_str().is_some_and(|id| id.starts_with("fg-task.")), "{created}");
    task
}

fn upstream_asked(up: &McpUpstream, method: &str) -> Vec<Value> {
    up.requests.borrow().iter().filter_map(|r| r.json()).filter(|m| m["method"] == method).collect()
}

#[test]
fn an_upstream_task_is_relayed_under_a_sealed_id_and_followed_at_its_upstream() {
    let fx = Fx::new(500);
    let up = tasks_upstream(&fx);
    let app = upstream_app(&fx, "Jobs", &format!("{TASKS_UP}/mcp"), json!({}));
    let tool = job_name(&fx, &app.code, None);
    let task = start(&fx, &app.code, None, &tool);
    let id = task["taskId"].as_str().unwrap_or_default().to_string();
    assert_eq!(task["status"], "working", "{task}");
    let upstream_ids = up.task_ids();
    assert_eq!(upstream_ids.len(), 1);
    assert!(!id.contains(&upstream_ids[0]), "the upstream's id is sealed: {id}");
    // The call asked the upstream for a task, with the client's TTL.
    let call = upstream_asked(&up, "tools/call").pop().unwrap_or_default();
    assert_eq!(call["params"]["task"]["ttl"], 60_000, "{call}");

    let got = rpc_as(&fx, &app.code, None, "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["taskId"], id.as_str(), "{got}");
    assert_eq!(got["result"]["status"], "working", "{got}");
    let asked = upstream_asked(&up, "tasks/get");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["params"]["taskId"], upstream_ids[0].as_str());

    // tasks/result waits for the upstream's own, which blocks until the task ends.
    let t0 = fx.sim.now_ms();
    let result = rpc_as(&fx, &app.code, None, "tasks/result", json!({"taskId": id}));
    assert_eq!(result_text(&result), (false, "done: hi".to_string()), "{result}");
    assert!(fx.sim.now_ms() - t0 >= 2_000, "it waited for the task");
    assert_eq!(
        upstream_asked(&up, "tasks/result").last().map(|m| m["params"]["taskId"].clone()),
        Some(json!(upstream_ids[0]))
    );
    let got = rpc_as(&fx, &app.code, None, "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "completed", "{got}");
    fx.assert_invariants();
}

#[test]
fn another_caller_another_server_or_a_made_up_id_finds_no_task() {
    let fx = Fx::new(501);
    let up = tasks_upstream(&fx);
    let app = upstream_app(&fx, "Jobs", &format!("{TASKS_UP}/mcp"), json!({}));
    let r = fx.console(Method::Put, &format!("/servers/{}/auth", app.server_id), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let key = |name: &str| {
        let r = fx.console(Method::Post, &format!("/servers/{}/keys", app.server_id), Some(&json!({"name": name})));
        assert_eq!(r.status, 201, "{}", r.text());
        let k = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
        fx.codes.borrow_mut().push(k.clone());
        k
    };
    let (alice, bob) = (key("alice"), key("bob"));
    let (_, other) = fx.server("Both", &[&app.app_id]);
    let tool = job_name(&fx, &app.code, Some(&alice));
    let id = start(&fx, &app.code, Some(&alice), &tool)["taskId"].as_str().unwrap_or_default().to_string();
    let asked_before = upstream_asked(&up, "tasks/get").len() + upstream_asked(&up, "tasks/result").len();

    // As unknown as a task that never was: not even its existence shows.
    let unknown = |v: &Value, what: &str| {
        assert_eq!(v["error"]["code"], -32602, "{what}: {v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("unknown task")), "{what}: {v}");
        assert!(v.get("result").is_none(), "{what}: {v}");
    };
    unknown(&rpc_as(&fx, &app.code, Some(&bob), "tasks/get", json!({"taskId": id})), "another key");
    unknown(&rpc_as(&fx, &app.code, Some(&bob), "tasks/result", json!({"taskId": id})), "another key's result");
    unknown(&rpc_as(&fx, &other, None, "tasks/get", json!({"taskId": id})), "another server");
    let mut chars: Vec<char> = id.chars().collect();
    let i = chars.len() - 8;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    let altered: String = chars.into_iter().collect();
    unknown(&rpc_as(&fx, &app.code, Some(&alice), "tasks/get", json!({"taskId": altered})), "altered");
    let made_up = format!("fg-task.{}", "A".repeat(80));
    unknown(&rpc_as(&fx, &app.code, Some(&alice), "tasks/get", json!({"taskId": made_up})), "made up");
    assert_eq!(
        upstream_asked(&up, "tasks/get").len() + upstream_asked(&up, "tasks/result").len(),
        asked_before,
        "none of them reached the upstream"
    );
    // The caller that started it reads it.
    let got = rpc_as(&fx, &app.code, Some(&alice), "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "working", "{got}");
    fx.assert_invariants();
}

#[test]
fn a_plain_call_of_a_task_capable_tool_is_answered_inline() {
    let fx = Fx::new(502);
    let up = tasks_upstream(&fx);
    let app = upstream_app(&fx, "Jobs", &format!("{TASKS_UP}/mcp"), json!({}));
    let tool = job_name(&fx, &app.code, None);
    let v = last(&fx.call(&app.code, &tool, json!({"text": "now"})));
    assert_eq!(result_text(&v), (false, "done: now".to_string()), "{v}");
    assert!(up.task_ids().is_empty(), "no task was asked for");
    let call = upstream_asked(&up, "tools/call").pop().unwrap_or_default();
    assert!(call["params"].get("task").is_none(), "{call}");
    fx.assert_invariants();
}
