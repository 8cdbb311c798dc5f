//! Tasks of upstream MCP servers, relayed (`pure::mcp::upstream_tasks` decides and renders;
//! this is the IO): every `tasks/*` request about a task an upstream keeps, taken to it under
//! the upstream's id (the task a `tools/call` created is sealed in `upstream::call`).

use std::time::Duration;

use crate::json;
use crate::runtime::Env;
use serde_json::{Map, Value};

use crate::pure::backend::mcp::error::upstream_error_message;
use crate::pure::backend::mcp::session::{session_request, Session};
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::{self, TaskOp, TaskRequest};
use crate::pure::mcp::upstream_tasks::{self, Handle};
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::tasks;
use crate::pure::protocol::version::Version;

use crate::shell::backend::mcp::client::{upstream_of, Client};
use crate::shell::VERSION;

/// Longest a 2025-11-25 client's `tasks/result` waits on an upstream's 2026-07-28 task (which
/// has no blocking result) before it is told to ask again.
const RESULT_WAIT: Duration = Duration::from_secs(20);

/// A `tasks/*` request about a relayed task: (HTTP status, JSON-RPC response).
pub async fn op(req: &TaskRequest, def: &ServerDefinition, env: &Env, incoming: &[(String, String)]) -> (u16, Value) {
    server::relayed_task_response(req, run(req, def, env, incoming).await, VERSION)
}

/// The upstream failed: the words of why, as an internal error.
fn failed(why: impl std::fmt::Display) -> RpcError {
    RpcError::new(200, jsonrpc::INTERNAL_ERROR, format!("Internal error: {why}"))
}

async fn run(
    req: &TaskRequest,
    def: &ServerDefinition,
    env: &Env,
    incoming: &[(String, String)],
) -> Result<Value, RpcError> {
    let unknown = || tasks::unknown_task(&req.task_id);
    // Another client key's task is as unknown as another server's.
    let handle = crate::shell::backend::mcp::relay::open_task(env, &req.task_id, &def.server_id)
        .filter(|h| h.belongs_to(req.owner.as_deref()))
        .ok_or_else(unknown)?;
    let app = def.apps.iter().find(|a| a.id == handle.app_id).ok_or_else(unknown)?;
    let lookup = |name: &str| incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let up = upstream_of(app, env, Some(&lookup)).await.map_err(failed)?;
    if up.session_scope != handle.scope {
        return Err(RpcError::new(
            200,
            jsonrpc::INVALID_PARAMS,
            format!(
                "Invalid params: task {} was started by another caller, with other forwarded credentials or before the app changed; poll it as the caller that started it",
                req.task_id
            ),
        ));
    }
    let mut client = Client::new(&up, env);
    client.connect(true).await.map_err(failed)?;
    let upstream = client.protocol().ok_or_else(|| failed("the upstream session has no revision"))?;
    if !upstream.is_stateless() && !upstream.has_tasks() {
        return Err(failed(format!("upstream {} no longer speaks a revision with tasks", up.app_name)));
    }
    let mut task = Relayed { client: &mut client, app: &up.app_name, handle: &handle, id: &req.task_id, upstream };
    match req.op {
        TaskOp::Get => Ok(upstream_tasks::get_for_client(&task.get(req.version.is_stateless()).await?, req.version)),
        TaskOp::Cancel => {
            let answer = task.ask("tasks/cancel", None).await?;
            if req.version.is_stateless() {
                return Ok(json!({}));
            }
            // A 2025-11-25 client gets the task as it now is.
            let now = match answer.as_object() {
                Some(t) if !upstream.is_stateless() => upstream_tasks::normalize(t, &req.task_id, None),
                _ => task.get(false).await?,
            };
            Ok(upstream_tasks::cancel_for_client(Some(&now), req.version))
        }
        TaskOp::Update if !upstream.is_stateless() => Err(RpcError::new(
            200,
            jsonrpc::METHOD_NOT_FOUND,
            format!(
                "Method not found: upstream {} speaks {}, whose tasks take no tasks/update",
                up.app_name,
                upstream.as_str()
            ),
        )),
        TaskOp::Update => {
            task.ask("tasks/update", req.input_responses.as_ref()).await?;
            Ok(json!({}))
        }
        TaskOp::Result if upstream.has_tasks() => {
            // The upstream's own tasks/result blocks until the task ends.
            let payload = task.ask("tasks/result", None).await?;
            let done = json!({"taskId": req.task_id, "status": "completed"});
            let t = upstream_tasks::normalize(done.as_object().unwrap_or(&Map::new()), &req.task_id, Some(Ok(payload)));
            upstream_tasks::payload_for_client(&t)
        }
        TaskOp::Result => {
            let start = crate::shell::platform::now_ms();
            loop {
                let t = task.get(true).await?;
                if upstream_tasks::is_terminal(&t) {
                    return upstream_tasks::payload_for_client(&t);
                }
                if crate::shell::platform::now_ms().saturating_sub(start) >= RESULT_WAIT.as_millis() as u64 {
                    return Err(RpcError::new(
                        200,
                        jsonrpc::INTERNAL_ERROR,
                        format!("Task {} is still running; call tasks/result again", req.task_id),
                    ));
                }
                let poll = t.get("pollIntervalMs").and_then(Value::as_u64).unwrap_or(1000).clamp(200, 5000);
                crate::runtime::sleep(poll).await;
            }
        }
    }
}

/// One relayed task and the connection to the upstream that keeps it.
struct Relayed<'a, 'b> {
    client: &'a mut Client<'b>,
    app: &'a str,
    handle: &'a Handle,
    /// Flowgate's id of the task.
    id: &'a str,
    upstream: Version,
}

impl Relayed<'_, '_> {
    /// One `tasks/*` request upstream: its result, or the error the client gets.
    async fn ask(&mut self, method: &'static str, input_responses: Option<&Value>) -> Result<Value, RpcError> {
        let mut client_params = Map::new();
        if let Some(r) = input_responses {
            client_params.insert("inputResponses".into(), r.clone());
        }
        let upstream_id = self.handle.upstream_id.as_str();
        let p = upstream_tasks::upstream_request(method, upstream_id, &client_params, self.upstream);
        let make = |id, s: &Session| session_request(id, method, p.clone(), s);
        let timeout = self.client.call_timeout();
        let response =
            self.client.request(&make, Some(upstream_id), &[], timeout, &mut |_| {}).await.map_err(failed)?;
        if let Some(e) = response.get("error") {
            let code = e.get("code").and_then(Value::as_i64).unwrap_or(jsonrpc::INTERNAL_ERROR);
            // The upstream's message names its own id of the task; the client knows Flowgate's.
            let message = upstream_error_message(self.app, e).replace(upstream_id, self.id);
            return Err(RpcError::new(200, code, message));
        }
        match response.get("result") {
            Some(r) if r.is_object() => Ok(r.clone()),
            _ => Err(failed(format!("upstream {} answered {method} without a result object", self.app))),
        }
    }

    /// The task in 2026-07-28 terms; with `inline`, a finished 2025-11-25 task's result too.
    async fn get(&mut self, inline: bool) -> Result<Map<String, Value>, RpcError> {
        let answer = self.ask("tasks/get", None).await?;
        let Some(task) = answer.as_object() else {
            return Err(failed(format!("upstream {} answered tasks/get without a task", self.app)));
        };
        let finished = upstream_tasks::is_terminal(task) && task.get("status") != Some(&json!("cancelled"));
        let payload = if inline && finished && !self.upstream.is_stateless() {
            Some(match self.ask("tasks/result", None).await {
                Ok(r) => Ok(r),
                Err(e) => Err(json!({"code": e.code, "message": e.message})),
            })
        } else {
            None
        };
        Ok(upstream_tasks::normalize(task, self.id, payload))
    }
}
