//! The simulation runs: the whole Worker under a mixed workload (console writes, MCP calls to a
//! Dify workflow, an HTTP tool and an upstream MCP app, streamed and durable calls, cancels),
//! with every fault the simulator injects, over a fixed set of seeds. After each run the
//! invariants hold: no code or secret in a log line or an answer, no request to a refused
//! address, every answer well-formed JSON-RPC or a JSON HTTP error, every accepted task in a
//! terminal state, no credential sent to an origin it is not bound to. A failing seed prints
//! `SIM_SEED=<n>`; `SIM_SEED=<n> cargo test soak` replays it exactly.

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::backends::http_tool::Tool;
use crate::sim::{ClientResponse, Faults};

/// Seeds CI runs (each a few hundred simulated requests; the set runs in seconds).
const SEEDS: std::ops::Range<u64> = 0..40;

fn manifest() -> Value {
    json!({
        "name": "get_weather", "description": "Retrieves the current weather for a location.",
        "parameters": [{"name": "location", "type": "string", "required": true, "description": "The city", "form": "llm"}],
        "outputs": [{"name": "temperature", "type": "number"}]
    })
}

/// The apps and the server of a run: (server code, task-capable tool name).
fn setup(fx: &Fx) -> String {
    // Every request logged: the masking of codes in logged paths is checked on every one.
    fx.sim.set_setting("LOG_REQUESTS", "all");
    let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
    let app =
        crate::sim::backends::dify::App { user_input_form: form, ..crate::sim::backends::dify::App::new("workflow") };
    let wf = fx.dify_app_with("Echo", "workflow", "app-key-wf", app, json!({"task_support": "optional"}));
    // A workflow that never finishes: only its task's TTL ends it.
    let slow = crate::sim::backends::dify::App {
        user_input_form: json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]),
        stream_end: crate::sim::backends::dify::StreamEnd::HangAfterFirst,
        ..crate::sim::backends::dify::App::new("workflow")
    };
    let slow = fx.dify_app_with("Slow", "workflow", "app-key-slow", slow, json!({"task_support": "required"}));
    let path = fx.tool.add_tool("weather", Tool { api_key: "tool-key-1".into(), ..Tool::default() });
    fx.secret("tool-key-1");
    let body = json!({"name": "Weather", "description": "Current weather", "mode": "http-tool",
        "backend": {"api_endpoint": format!("{TOOL}{path}"), "api_key": "tool-key-1", "manifest": manifest()}});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let tool = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    let body = json!({"name": "Up", "description": "Upstream tools", "mode": "mcp", "backend": {"url": format!("{UPSTREAM}/mcp")}});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let up = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.server("Mixed", &[&wf, &tool, &up, &slow]).1
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The client side of a run: a burst of requests at once, then a second burst, then time for
/// tasks and background work to finish.
fn workload(fx: &Fx, code: &str) -> Vec<ClientResponse> {
    let url = Fx::mcp_url(code);
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
    ];
    let req = |body: Value| request(Method::Post, &url, &headers, Some(&body));
    let first = vec![
        req(rpc(
            1,
            "initialize",
            json!({"protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}),
        )),
        req(rpc(2, "tools/list", json!({}))),
        req(rpc(3, "tools/call", json!({"name": "Echo", "arguments": {"text": "hello"}}))),
        req(rpc(4, "tools/call", json!({"name": "Weather", "arguments": {"location": "Paris"}}))),
        req(rpc(5, "tools/call", json!({"name": "Up_echo", "arguments": {"text": "up"}}))),
        req(rpc(6, "tools/call", json!({"name": "Echo", "arguments": {"text": "task"}, "task": {"ttl": 60000}}))),
        req(rpc(7, "tools/call", json!({"name": "Echo", "arguments": {}}))),
        req(rpc(8, "no/such/method", json!({}))),
        req(rpc(13, "tools/call", json!({"name": "Slow", "arguments": {"text": "forever"}, "task": {"ttl": 20000}}))),
    ];
    let answers = fx.sim.requests_at_once(first);
    // A task the server accepted is followed and cancelled from another request.
    let task_id =
        answers.iter().flat_map(messages).find_map(|m| m["result"]["task"]["taskId"].as_str().map(str::to_string));
    let mut second = vec![
        req(rpc(
            9,
            "tools/call",
            json!({"name": "Up_slow_progress", "arguments": {"steps": 3, "delayMs": 400}, "_meta": {"progressToken": 9}}),
        )),
        req(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})),
        req(rpc(10, "ping", json!({}))),
    ];
    if let Some(id) = task_id {
        second.push(req(rpc(11, "tasks/get", json!({"taskId": id}))));
        second.push(req(rpc(12, "tasks/cancel", json!({"taskId": id}))));
    }
    let mut all = answers;
    all.extend(fx.sim.requests_at_once(second));
    // Within the tasks' TTL: their work and cancels have had the time they need.
    fx.sim.advance(40_000).unwrap_or_else(|h| panic!("{h}"));
    all
}

/// The status of every task the Durable Objects hold, by task.
fn task_statuses(sim: &crate::sim::Sim) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (ns, name) in sim.objects() {
        if ns != "TASKS" {
            continue;
        }
        for value in sim.object_storage(&ns, &name).values() {
            if let Some(status) = serde_json::from_str::<Value>(value)
                .ok()
                .and_then(|v| v["state"]["status"].as_str().map(str::to_string))
            {
                out.push((name.clone(), status));
            }
        }
    }
    out
}

/// Runs the clock on for `for_ms`, looking at the tasks every 250 ms: the tasks seen that were
/// never seen in a terminal state, or still held at the end.
fn follow_tasks(sim: &crate::sim::Sim, for_ms: u64) -> Vec<String> {
    let terminal = |s: &str| matches!(s, "completed" | "failed" | "cancelled");
    let (mut seen, mut ended) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for _ in 0..for_ms / 250 {
        for (task, status) in task_statuses(sim) {
            if terminal(&status) {
                ended.insert(task.clone());
            }
            seen.insert(task);
        }
        sim.advance(250).unwrap_or_else(|h| panic!("{h}"));
    }
    let mut open: Vec<String> = seen.difference(&ended).map(|t| format!("task {t} never ended")).collect();
    open.extend(
        task_statuses(sim).into_iter().map(|(t, s)| format!("task {t} still held ({s}) after its TTL and grace")),
    );
    open
}

fn run(seed: u64, faults: Faults) -> (Fx, Vec<ClientResponse>) {
    let fx = Fx::new(seed);
    let code = setup(&fx);
    fx.sim.set_faults(faults);
    let answers = workload(&fx, &code);
    fx.sim.set_faults(Faults::default());
    fx.sim.set_faults(Faults::default());
    // Every task reaches a terminal state: followed every 250 ms of virtual time until the
    // objects hold none (a task is deleted only once ended: its TTL, 60 s at least, ends what its
    // backend did not, after the poll in flight then, which may hang up to its own timeout).
    let open = follow_tasks(&fx.sim, 6 * 60_000);
    assert!(open.is_empty(), "SIM_SEED={seed}: {open:?}");
    let mut specs = fx.specs();
    specs[0].credentials = vec![
        ("app-key-wf".into(), DIFY.into()),
        ("app-key-slow".into(), DIFY.into()),
        ("tool-key-1".into(), TOOL.into()),
    ];
    for spec in specs {
        fx.sim.assert_invariants(&spec);
    }
    (fx, answers)
}

#[test]
fn soak_without_faults_keeps_every_invariant() {
    for seed in crate::sim::seeds(SEEDS) {
        let (fx, answers) = run(seed, Faults::default());
        // Without faults every call of the workload does what it should: the run is not an
        // empty one that keeps the invariants by doing nothing.
        let by_id = |id: u64| answers.iter().flat_map(messages).find(|m| m["id"] == id).unwrap_or_default();
        assert_eq!(by_id(1)["result"]["protocolVersion"], V2025, "SIM_SEED={seed}");
        assert_eq!(by_id(2)["result"]["tools"].as_array().map(Vec::len), Some(6), "SIM_SEED={seed}: {}", by_id(2));
        assert!(
            by_id(3)["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("hello")),
            "SIM_SEED={seed}: {}",
            by_id(3)
        );
        assert_eq!(by_id(4)["result"]["isError"], false, "SIM_SEED={seed}: {}", by_id(4));
        assert!(
            by_id(5)["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("up")),
            "SIM_SEED={seed}: {}",
            by_id(5)
        );
        assert!(by_id(6)["result"]["task"]["taskId"].is_string(), "SIM_SEED={seed}: {}", by_id(6));
        assert_eq!(by_id(7)["result"]["isError"], true, "SIM_SEED={seed}: {}", by_id(7));
        assert_eq!(by_id(8)["error"]["code"], -32601, "SIM_SEED={seed}: {}", by_id(8));
        assert_eq!(by_id(10)["result"], json!({}), "SIM_SEED={seed}");
        // A cancel is asynchronous: the task is "cancelling" until the backend is told.
        let cancel = by_id(12);
        assert!(
            cancel["result"]["status"] == "cancelled" || cancel["result"]["statusMessage"] == "cancelling",
            "SIM_SEED={seed}: {cancel}"
        );
        // The tasks' objects held them, ended (the check `tasks_terminal` reads the same records).
        let tasks: Vec<_> = fx.sim.objects().into_iter().filter(|(ns, _)| ns == "TASKS").collect();
        assert!(by_id(13)["result"]["task"]["taskId"].is_string(), "SIM_SEED={seed}: {}", by_id(13));
        assert_eq!(tasks.len(), 2, "SIM_SEED={seed}");
        // Deleted once their TTL (and grace) passed.
        for (ns, name) in &tasks {
            assert!(fx.sim.object_storage(ns, name).is_empty(), "SIM_SEED={seed}");
        }
    }
}

#[test]
fn soak_with_every_fault_keeps_every_invariant() {
    for seed in crate::sim::seeds(SEEDS) {
        let (fx, _) = run(seed, Faults::all(0.05, 3_000));
        let _ = fx.sim.fault_counts();
    }
}

#[test]
fn a_seed_replays_exactly() {
    crate::sim::assert_replays(&[3, 17], |seed| run(seed, Faults::all(0.05, 3_000)).0.sim.trace());
}
