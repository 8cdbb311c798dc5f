//! The endpoint's paths the other endpoint tests leave open: an upstream's request in the middle
//! of a call for a client that takes only JSON, and a polled async HTTP tool call that the client
//! cancels.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::initialize;
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::{Backend, BackendRequest, Reply};

#[test]
fn an_upstreams_question_to_a_json_only_client_is_refused_upstream_with_the_reason() {
    let fx = Fx::new(350);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    // A client that can answer an elicitation, but reads only JSON answers.
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("mcp-protocol-version", V2025),
        ("mcp-session-id", sid.as_str()),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": {"question": "?"}}});
    let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &headers, Some(&call)));
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("application/json")), "{:?}", r.headers);
    let (is_error, text) = result_text(&last(&r));
    assert!(is_error && text.contains("refused"), "{}", r.text());
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1, "the upstream got the refusal");
    let message = answers[0].0["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("the client takes only JSON answers"), "{message}");
    fx.assert_invariants();
}

const JOBS: &str = "https://polled.test";
const JOBS_KEY: &str = "polled-key-0123456789";

/// An async HTTP tool whose job runs until it is cancelled: submit, status, cancel; each
/// request's path and body.
fn endless_jobs(fx: &Fx) -> Rc<RefCell<Vec<(String, Value)>>> {
    let seen: Rc<RefCell<Vec<(String, Value)>>> = Rc::default();
    let s = seen.clone();
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, _now: u64| {
        s.borrow_mut().push((req.path.clone(), req.json().unwrap_or_default()));
        let cancelled = s.borrow().iter().any(|(p, _)| p == "/cancel");
        match req.path.as_str() {
            "/submit" => Reply::json(200, &json!({"task_id": "r-7", "status": "running"})),
            _ if cancelled => Reply::json(200, &json!({"task_id": "r-7", "status": "cancelled"})),
            _ => Reply::json(200, &json!({"task_id": "r-7", "status": "running"})),
        }
    });
    fx.sim.add_backend(JOBS, backend);
    seen
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
fn a_polled_async_tool_call_the_client_cancels_is_cancelled_at_its_cancel_endpoint() {
    let fx = Fx::new(351);
    let seen = endless_jobs(&fx);
    fx.secret(JOBS_KEY);
    let manifest = json!({"name": "job", "description": "A long job.",
        "parameters": [{"name": "what", "type": "string", "required": true, "description": "What to do"}]});
    let backend = json!({"api_endpoint": format!("{JOBS}/submit"), "api_key": JOBS_KEY, "manifest": manifest,
        "poll_interval_seconds": 1, "timeout_seconds": 120,
        "async": {"status_endpoint": format!("{JOBS}/status"), "cancel_endpoint": format!("{JOBS}/cancel")}});
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": "Job", "description": "d", "mode": "http-tool", "backend": backend})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = fx.publish(&r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default());
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
    ];
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "enough"}});
    let cancelled = serve_later(5_000, request(Method::Post, &Fx::mcp_url(&code), &headers, Some(&cancel)));
    let t0 = fx.sim.now_ms();
    let r = fx.call(&code, "Job", json!({"what": "x"}));
    assert!(fx.sim.now_ms() - t0 < 10_000, "the call ran on after the cancel: {}", r.text());
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(*cancelled.borrow(), Some(202));
    let cancels: Vec<Value> = seen.borrow().iter().filter(|(p, _)| p == "/cancel").map(|(_, b)| b.clone()).collect();
    assert_eq!(cancels.len(), 1, "{:?} {}", seen.borrow(), r.text());
    assert_eq!(cancels[0]["task_id"], "r-7", "{}", cancels[0]);
    fx.assert_invariants();
}

/// Starts `tool` as a durable task and waits for its result; the result's text.
fn task_result(fx: &Fx, code: &str, tool: &str, arguments: Value) -> (bool, String) {
    let created = last(&fx.mcp(
        code,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "task": {"ttl": 60_000}}}),
    ));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{created}");
    let r =
        last(&fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 10, "method": "tasks/result", "params": {"taskId": id}})));
    result_text(&r)
}

#[test]
fn a_durable_task_runs_each_kind_of_app_the_way_that_app_is_called() {
    let fx = Fx::new(352);
    let tasks = json!({"task_support": "optional"});
    // (An upstream MCP tool runs as a durable task only as a task toolset's submit tool; a
    // toolset task is `upstream_toolsets.rs`'s.)
    // A Dify chat app: a chat message, not a workflow run.
    let chat = fx.dify_app_with("Chat", "chat", "app-key-chat", crate::sim::backends::dify::App::new("chat"), tasks);
    let code = fx.publish(&chat);
    let (is_error, text) = task_result(&fx, &code, "Chat", json!({"query": "hi", "text": "hi"}));
    assert!(!is_error && text.contains("Hello from the simulated Dify."), "{text}");
    // An HTTP tool without async endpoints: one call, its answer the result.
    let key = "task-tool-key-0123456789";
    fx.secret(key);
    let path =
        fx.tool.add_tool("t", crate::sim::backends::http_tool::Tool { api_key: key.into(), ..Default::default() });
    let manifest = json!({"name": "weather", "description": "Weather.",
        "parameters": [{"name": "location", "type": "string", "required": true, "description": "City"}]});
    let backend = json!({"api_endpoint": format!("{TOOL}{path}"), "api_key": key, "manifest": manifest, "task_support": "optional"});
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": "Weather", "description": "d", "mode": "http-tool", "backend": backend})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = fx.publish(&r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default());
    let (is_error, text) = task_result(&fx, &code, "Weather", json!({"location": "Oslo"}));
    assert!(!is_error && text.contains("Oslo"), "{text}");
    fx.assert_invariants();
}
