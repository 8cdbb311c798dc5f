//! What the server answers for a call once it has run: the final response of an outcome, its
//! progress and log notifications, and the answers for tasks and upstream (relayed or forwarded)
//! replies.

use super::gateway::{self, Forward};
use super::input_required;
use super::upstream_tasks;
use crate::json;
use crate::pure::backend::dify::{conversation, file_outputs};
use crate::pure::backend::mcp::downgrade::result_for_client;
use crate::pure::backend::mcp::error::upstream_error_message;
use crate::pure::outcome::Outcome;
use crate::pure::outcome::Signal;
use crate::pure::protocol::jsonrpc::{self, result_response, RpcError};
use crate::pure::protocol::meta;
use crate::pure::protocol::methods;
use crate::pure::protocol::tasks::{self, TaskView};
use crate::pure::protocol::version::Version;
use serde_json::{Map, Value};

use super::*;

/// The answer to a `tools/call` that became a task.
pub fn task_created(plan: &CallPlan, view: &TaskView, server_version: &str) -> Value {
    result_response(
        &plan.id,
        shape_result(tasks::create_result(view, plan.version), methods::TOOLS_CALL, plan.version, server_version),
    )
}

/// The answer to a `tasks/*` request, given what the task's runner said: `None` when no such
/// task belongs to this server; `was_terminal` when a cancel found the task already finished.
pub fn task_response(
    req: &TaskRequest,
    view: Option<&TaskView>,
    was_terminal: bool,
    server_version: &str,
) -> (u16, Value) {
    let Some(view) = view else {
        return (200, tasks::unknown_task(&req.task_id).to_response(&req.id));
    };
    let result = match req.op {
        TaskOp::Get => Ok(tasks::get_result(view, req.version)),
        TaskOp::Cancel if was_terminal && !req.version.is_stateless() => Err(tasks::terminal_cancel(view)),
        TaskOp::Cancel => Ok(tasks::cancel_result(view, req.version)),
        TaskOp::Result => tasks::payload_result(view),
        TaskOp::Update => Ok(json!({})),
    };
    match result {
        Ok(r) => (200, result_response(&req.id, shape_result(r, "tasks", req.version, server_version))),
        Err(e) => (e.status, e.to_response(&req.id)),
    }
}

/// The answer to a `tools/call` an upstream turned into a task (`upstream_tasks`), the task
/// already under Flowgate's id.
pub fn relayed_task_created(plan: &CallPlan, task: &Map<String, Value>, server_version: &str) -> Value {
    let r = upstream_tasks::create_for_client(task, plan.version);
    result_response(&plan.id, shape_result(r, methods::TOOLS_CALL, plan.version, server_version))
}

/// The answer to a `tasks/*` request about an upstream's task.
pub fn relayed_task_response(req: &TaskRequest, result: Result<Value, RpcError>, server_version: &str) -> (u16, Value) {
    match result {
        Ok(r) => (200, result_response(&req.id, shape_result(r, "tasks", req.version, server_version))),
        Err(e) => (e.status, e.to_response(&req.id)),
    }
}

/// The response to a call proxied to an upstream MCP server: its result intact, as far as the
/// client's revision can carry it, or its JSON-RPC error with context.
pub fn upstream_response(plan: &CallPlan, app: &str, response: &Value, server_version: &str) -> Value {
    if let Some(e) = response.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(jsonrpc::INTERNAL_ERROR);
        let mut err = RpcError::new(200, code, upstream_error_message(app, e));
        // What the upstream says is needed (`requiredCapabilities` of a -32021) is the client's to read.
        if let Some(d) = e.get("data") {
            err = err.with_data(d.clone());
        }
        return err.to_response(&plan.id);
    }
    let result = result_for_client(&response["result"], plan.version);
    result_response(&plan.id, shape_result(result, methods::TOOLS_CALL, plan.version, server_version))
}

/// The HTTP status of a call's JSON-RPC response: 2026-07-28 answers a missing client
/// capability with 400 (SEP-2575), whether Flowgate or the upstream found it missing.
pub fn call_status(version: Version, response: &Value) -> u16 {
    let code = response.pointer("/error/code").and_then(Value::as_i64);
    if version.is_stateless() && code == Some(tasks::MISSING_REQUIRED_CLIENT_CAPABILITY) {
        400
    } else {
        200
    }
}

/// The response to a request forwarded to an upstream app ([`Step::Forward`]): its result, as
/// far as the client's revision can carry it, or its JSON-RPC error with context.
pub fn forwarded_response(fwd: &Forward, app: &str, response: &Value, server_version: &str) -> Value {
    if let Some(e) = response.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(jsonrpc::INTERNAL_ERROR);
        let mut err = RpcError::new(200, code, upstream_error_message(app, e));
        if let Some(d) = e.get("data") {
            err = err.with_data(d.clone());
        }
        return err.to_response(&fwd.id);
    }
    if !response["result"].is_object() {
        let e = format!("upstream {app} answered {} without a result object", fwd.method);
        return forward_failed(fwd, &e);
    }
    let mut result = match fwd.method {
        // Asks for input (already checked and sealed by the shell): kept as it is.
        _ if input_required::asks_input(response) => response["result"].clone(),
        "prompts/get" => gateway::prompt_result_for_client(&response["result"], fwd.version),
        "resources/directory/read" => gateway::skills::directory_for_client(&response["result"], &fwd.hide),
        _ => response["result"].clone(),
    };
    if let Some(m) = result.as_object_mut() {
        // The upstream's `_meta` (its serverInfo, related-task keys) is about its own session.
        m.remove("_meta");
        if !input_required::asks_input(response) {
            m.remove("resultType");
        }
    }
    result_response(&fwd.id, shape_result(result, fwd.method, fwd.version, server_version))
}

/// The response to a forwarded request that did not reach its upstream.
pub fn forward_failed(fwd: &Forward, why: &str) -> Value {
    RpcError::new(200, jsonrpc::INTERNAL_ERROR, format!("Internal error: {why}")).to_response(&fwd.id)
}

/// Whether an upstream notification goes on to the client: progress only for a request that
/// asked for it (the token is the client's own, passed upstream), log messages at or above the
/// client's level.
pub fn relays(plan: &CallPlan, notification: &Value) -> bool {
    match notification["method"].as_str() {
        Some(methods::PROGRESS) => plan.progress_token.is_some(),
        Some(methods::MESSAGE) => {
            log_reaches(plan.log_level, notification["params"]["level"].as_str().unwrap_or("info"))
        }
        _ => false,
    }
}

/// Whether a log message at `level` reaches a client that takes them from `threshold` up
/// (`None`: none). An unknown level counts as the least severe.
pub fn log_reaches(threshold: Option<&str>, level: &str) -> bool {
    let Some(threshold) = threshold else { return false };
    let rank = |l: &str| LOG_LEVELS.iter().position(|k| *k == l).unwrap_or(0);
    rank(level) >= rank(threshold)
}

/// The log level named `name`, if it is one.
pub fn log_level(name: &str) -> Option<&'static str> {
    LOG_LEVELS.iter().copied().find(|k| *k == name)
}

/// Counts the progress of one call; `progress` must grow with every notification.
#[derive(Debug, Default)]
pub struct Progress(f64);

/// The notification for a backend signal, if the client asked for that kind.
pub fn notification(plan: &CallPlan, signal: Signal, progress: &mut Progress) -> Option<Value> {
    match signal {
        Signal::Progress { message } => {
            let token = plan.progress_token.as_ref()?;
            progress.0 = progress.0.floor() + 1.0;
            Some(progress_notification(plan, token, progress.0, None, message))
        }
        // A percentage that does not move forward is dropped: progress must only grow.
        Signal::Percent { percent, message } => {
            let token = plan.progress_token.as_ref()?;
            (percent > progress.0).then(|| {
                progress.0 = percent;
                progress_notification(plan, token, percent, Some(100.0), message)
            })
        }
        Signal::Log { level, data } => {
            log_reaches(plan.log_level, level).then(|| {
                json!({"jsonrpc": "2.0", "method": methods::MESSAGE, "params": {"level": level, "logger": "flowgate", "data": data}})
            })
        }
    }
}

fn progress_notification(plan: &CallPlan, token: &Value, progress: f64, total: Option<f64>, message: String) -> Value {
    let mut params = json!({meta::PROGRESS_TOKEN: token, "progress": number(progress)});
    if let Some(t) = total {
        params["total"] = number(t);
    }
    if plan.version.progress_message() && !message.is_empty() {
        params["message"] = message.into();
    }
    json!({"jsonrpc": "2.0", "method": methods::PROGRESS, "params": params})
}

/// Whole numbers as integers on the wire (`3`, not `3.0`).
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}

/// The JSON-RPC response for a finished call.
pub fn finish_call(plan: &CallPlan, outcome: Outcome, server_version: &str) -> Value {
    let result = match outcome {
        Outcome::Ok { text, structured } => {
            let mut content = vec![json!({"type": "text", "text": text})];
            // Files a Dify app returned: a link each after the text.
            if let CallRequest::Dify { mode, .. } = &plan.request {
                content.extend(file_outputs::content_items(structured.as_ref(), *mode, plan.version));
            }
            let mut r = json!({"content": content, "isError": false});
            let sent = match &plan.request {
                CallRequest::Dify { body, .. } => Some(body),
                _ => None,
            };
            if let Some(id) = conversation::of_result(sent, structured.as_ref()) {
                conversation::show(&mut r, id);
            }
            if let (true, Some(s)) = (plan.version.structured_output(), structured) {
                r["structuredContent"] = s;
            }
            r
        }
        Outcome::Failed(message) => tool_error(&message),
    };
    result_response(&plan.id, shape_result(result, methods::TOOLS_CALL, plan.version, server_version))
}
