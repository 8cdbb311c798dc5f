//! Tasks of upstream MCP servers, relayed (`pure::mcp::upstream_tasks` decides and renders;
//! this is the IO): every `tasks/*` request about a task an upstream keeps, taken to it under
//! the upstream's id (the task a `tools/call` created is sealed in `upstream::call`).
//!
//! A 2025-11-25 upstream asks for a task's input (elicitation, sampling, roots) on the stream of
//! the task's `tasks/result`. For a client that reads that answer as SSE ([`result_streamed`])
//! each such request goes to the client as a call's would (`call::ask_client`: a sealed
//! `fg-relay.` id, whose answer any isolate takes back); anything else refuses it to the
//! upstream at once, so no upstream request waits on Flowgate's silence.

use std::rc::Rc;
use std::time::Duration;

use futures::future::{select, Either};

use crate::json;
use crate::runtime::{ByteStream, Context, Env};
use serde_json::{Map, Value};

use crate::pure::backend::mcp::error::upstream_error_message;
use crate::pure::backend::mcp::session::{session_request, Session};
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::client_session::sse_event;
use crate::pure::mcp::prepared::Prepared;
use crate::pure::mcp::relay::{self, Channel, Closed};
use crate::pure::mcp::server::{self, TaskOp, TaskRequest};
use crate::pure::mcp::upstream_tasks::{self, Handle};
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::tasks;
use crate::pure::protocol::version::Version;

use crate::shell::backend::mcp::call::{ask_client, post_refusals};
use crate::shell::backend::mcp::client::{upstream_of, Client};
use crate::shell::VERSION;

/// Longest a 2025-11-25 client's `tasks/result` waits on an upstream's 2026-07-28 task (which
/// has no blocking result) before it is told to ask again.
const RESULT_WAIT: Duration = Duration::from_secs(20);
/// Longest silence on a streamed `tasks/result` once it started: a comment then, which also lets
/// the runtime notice a client that went away (and the upstream request is let go).
const KEEPALIVE_MS: u64 = 5_000;

/// A `tasks/*` request about a relayed task answered in one piece: (HTTP status, JSON-RPC
/// response). A request the upstream sends meanwhile is refused to it at once.
pub async fn op(req: &TaskRequest, def: &ServerDefinition, env: &Env, incoming: &[(String, String)]) -> (u16, Value) {
    server::relayed_task_response(req, run(req, def, env, incoming, None).await, VERSION)
}

/// How a streamed `tasks/result` answers.
pub enum Answer {
    /// Nothing came before the result: one JSON response, as [`op`] gives it.
    Whole(u16, Value),
    /// The upstream's requests as they came, then the response: an event stream.
    Stream(ByteStream),
}

/// A 2025-11-25 client's `tasks/result` of a relayed task, for a client that reads SSE: the
/// upstream's requests about the task reach it on this answer's stream (see the module), the
/// result last. The upstream request runs beside the answer (kept alive by `ctx`) and is let go
/// when the client goes away.
pub async fn result_streamed(
    req: TaskRequest,
    served: Rc<Prepared>,
    env: &Env,
    ctx: &Context,
    incoming: Vec<(String, String)>,
) -> Answer {
    let (events, rx) = futures::channel::mpsc::unbounded::<Vec<u8>>();
    // Whether the answer is a stream (`None`: the first request went out on it) or whole.
    let (opened, whole) = futures::channel::oneshot::channel::<Option<(u16, Value)>>();
    // Dropped with the answer's stream: the work below stops then.
    let (mut stop, held) = futures::channel::oneshot::channel::<()>();
    let (env, id) = (env.clone(), req.id.clone());
    ctx.wait_until(async move {
        let work = async {
            let opened = std::cell::RefCell::new(Some(opened));
            let to_client = |m: Value| {
                if let Some(o) = opened.borrow_mut().take() {
                    let _ = o.send(None);
                }
                let _ = events.unbounded_send(sse_event(&m));
            };
            let answer = run(&req, &served.def, &env, &incoming, Some(&to_client)).await;
            let (status, v) = server::relayed_task_response(&req, answer, VERSION);
            let first = opened.borrow_mut().take();
            match first {
                Some(o) => {
                    let _ = o.send(Some((status, v)));
                }
                None => {
                    let _ = events.unbounded_send(sse_event(&v));
                }
            }
        };
        futures::pin_mut!(work);
        select(work, stop.cancellation()).await;
    });
    match whole.await {
        Ok(Some((status, v))) => Answer::Whole(status, v),
        Ok(None) => Answer::Stream(crate::shell::http::event_stream(rx, KEEPALIVE_MS, Box::new(held))),
        Err(_) => Answer::Whole(200, failed("the upstream request ended without an answer").to_response(&id)),
    }
}

/// The upstream failed: the words of why, as an internal error.
fn failed(why: impl std::fmt::Display) -> RpcError {
    RpcError::new(200, jsonrpc::INTERNAL_ERROR, format!("Internal error: {why}"))
}

/// `to_client`: where the upstream's requests about the task go, when the client reads the
/// answer's stream (`None`: the answer goes in one piece, and they are refused).
async fn run(
    req: &TaskRequest,
    def: &ServerDefinition,
    env: &Env,
    incoming: &[(String, String)],
    to_client: Option<&dyn Fn(Value)>,
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
    // What becomes of a request the upstream sends meanwhile: `Ok` it goes to the client as
    // given, `Err` the upstream gets that error.
    let route = |n: &Value, target: Option<&(Session, String)>| match (req.op, to_client) {
        (TaskOp::Result, Some(_)) => {
            let n = upstream_tasks::related_for_client(n, &handle.upstream_id, &req.task_id);
            ask_client(&n, (req.relay, &req.user), def, &up, env, target)
        }
        (TaskOp::Result, None) => {
            // Answered in one piece: nothing reaches the client before the result.
            let channel = match req.relay {
                Channel::Stream(_) => Channel::Closed(Closed::JsonOnly),
                closed => closed,
            };
            let why = relay::decide(n, channel).err().unwrap_or_default();
            Err(relay::refusal(n, &why))
        }
        (op, _) => Err(relay::refusal_during(n, op_method(op))),
    };
    let mut task = Relayed {
        client: &mut client,
        app: &up.app_name,
        handle: &handle,
        id: &req.task_id,
        upstream,
        route: &route,
        to_client: to_client.unwrap_or(&|_| {}),
    };
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

/// The method of a `tasks/*` operation, as an error names it.
fn op_method(op: TaskOp) -> &'static str {
    match op {
        TaskOp::Get => "tasks/get",
        TaskOp::Result => "tasks/result",
        TaskOp::Cancel => "tasks/cancel",
        TaskOp::Update => "tasks/update",
    }
}

/// Decides what becomes of a request the upstream sends during a `tasks/*` request (see `run`).
type Route<'a> = &'a dyn Fn(&Value, Option<&(Session, String)>) -> Result<Value, Value>;

/// One relayed task and the connection to the upstream that keeps it.
struct Relayed<'a, 'b> {
    client: &'a mut Client<'b>,
    app: &'a str,
    handle: &'a Handle,
    /// Flowgate's id of the task.
    id: &'a str,
    upstream: Version,
    route: Route<'a>,
    to_client: &'a dyn Fn(Value),
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
        let live = self.client.live_target();
        let (refusals, mut refused) = futures::channel::mpsc::unbounded();
        let (route, to_client) = (self.route, self.to_client);
        let mut on_message = |n: Value| {
            // Notifications (the task's status, logs) have nowhere to go here: dropped.
            if n.get("id").is_none() || n.get("method").is_none() {
                return;
            }
            let target = live.borrow().clone();
            match route(&n, target.as_ref()) {
                Ok(relayed) => to_client(relayed),
                Err(refusal) => {
                    let _ = refusals.unbounded_send((refusal, target));
                }
            }
        };
        // Refusals go out as they come: the upstream may wait for one before it answers.
        let poster = self.client.sibling();
        let response = {
            let request = self.client.request(&make, Some(upstream_id), &[], timeout, &mut on_message);
            let answering = post_refusals(&poster, &mut refused);
            futures::pin_mut!(request, answering);
            match select(request, answering).await {
                Either::Left((r, _)) => r,
                Either::Right(_) => Err("the upstream request ended without an answer".into()),
            }
        };
        while let Ok((refusal, target)) = refused.try_recv() {
            if let Some(t) = target {
                let _ = poster.post_message(&t, &refusal).await;
            }
        }
        let response = response.map_err(failed)?;
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
