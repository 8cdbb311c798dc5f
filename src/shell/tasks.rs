//! Durable tasks: one Durable Object per task (`TaskRunner`). It writes the task to its storage
//! before the client hears of it, starts the backend work, then follows it with alarms: each
//! alarm asks the core state machine what is due (poll or cancel), makes that one call, feeds
//! the answer back, stores the state, mirrors it to the D1 `tasks` row and sets the next alarm.
//! After a restart the alarm (or the next request, which re-arms a missing alarm) continues from
//! storage. A task still running at the end of its TTL (counted from its creation) is ended and
//! its backend's run cancelled; after the TTL (and the bounded grace of a task that ended late)
//! its storage is deleted.

use crate::json;
use serde::Serialize;
use serde_json::Value;
use std::rc::Rc;

use crate::runtime::{
    storage_get, storage_put, Env, Error, Fut, Method, ObjectHandler, ObjectStorage, Request, Response, SqlValue,
    Statement,
};

use crate::pure::backend::dify::call as dify_call;
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::backend::dify::run_status;
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::fields::{Fields, FromFields};
use crate::pure::ids;
use crate::pure::mcp::relay::{Channel, Closed};
use crate::pure::mcp::server::{self, CallPlan, CallRequest};
use crate::pure::outcome::Outcome;
use crate::pure::protocol::tasks::{TaskOutcome, TaskView};
use crate::pure::sse::SseParser;
use crate::pure::task::{self, Action, PollConfig, PollOutcome, Report, Status, TaskState};
use crate::pure::task_contract::{Kind, TaskAnswer, TaskCall, TaskSpec};

use crate::pure::backend::mcp::config::ToolsetRole;
use crate::shell::backend::mcp::client::{upstream_of, Client as UpstreamClient};
use crate::shell::call::json::{get_json, post_json, Resend};
use crate::shell::call::stream::{request_headers, send_failed, Target};
use crate::shell::call::{run_to_completion, target_of};
use crate::shell::outbound::{self, SendError};
use crate::shell::VERSION;

const STORAGE_KEY: &str = "task";
/// Longest single wait of `tasks/result` inside the Durable Object (the Worker repeats it).
const WAIT_SLICE_MS: u64 = 20_000;

#[derive(Debug, Clone, Serialize)]
struct Record {
    spec: TaskSpec,
    state: TaskState,
    /// The tool's CallToolResult (or a JSON-RPC error) once the task has finished.
    result: Option<Value>,
    error: Option<(i64, String)>,
    /// Dify's task id of a workflow run, for its stop endpoint.
    dify_task_id: Option<String>,
}

impl FromFields for Record {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(Record {
            spec: f.object("spec")?,
            state: f.object("state")?,
            result: f.opt_value("result"),
            error: crate::pure::task_contract::rpc_error(f, "error")?,
            dify_task_id: f.opt_text("dify_task_id")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(Record);

/// The polling rules of a task: the defaults, with the app's `poll_interval_seconds` and
/// `input_required_poll_seconds` when it sets them.
pub fn poll_config(app: &AppDefinition) -> PollConfig {
    let mut cfg = PollConfig::default();
    let tasks = app.backend.tasks();
    if let Some(s) = tasks.poll_interval_seconds {
        cfg.interval_s = s;
    }
    if let Some(s) = tasks.input_required_poll_seconds {
        cfg.input_required_min_s = s;
    }
    cfg
}

impl Record {
    fn view(&self) -> TaskView {
        let cfg = poll_config(&self.spec.app);
        let s = &self.state;
        TaskView {
            task_id: self.spec.task_id.clone(),
            status: s.status.mcp_status(),
            status_message: s.status_message(&cfg),
            created_at_ms: s.created_at_ms,
            updated_at_ms: s.updated_at_ms,
            ttl_ms: s.ttl_ms,
            poll_interval_ms: cfg.interval_s * 1000,
            outcome: match (&self.result, &self.error) {
                (Some(r), _) => Some(TaskOutcome::Result(r.clone())),
                (None, Some((code, message))) => Some(TaskOutcome::Error { code: *code, message: message.clone() }),
                _ => None,
            },
        }
    }

    fn plan(&self) -> CallPlan {
        let spec = &self.spec;
        CallPlan {
            id: Value::Null,
            version: spec.version,
            app_index: 0,
            // Stored by `to_stored` when the task was created; a record this deploy cannot
            // read back calls nothing (an empty HTTP-tool body fails at the backend, visibly).
            request: CallRequest::from_stored(&spec.app.backend, &spec.path, &spec.body)
                .unwrap_or(CallRequest::HttpTool { body: Value::Null }),
            user: spec.user.clone(),
            client_name: String::new(),
            progress_token: None,
            log_level: None,
            cancel_key: String::new(),
            relay: Channel::Closed(Closed::Task),
            // Placed into the stored body before the task was created.
            files: Vec::new(),
        }
    }
}

/// The Durable Object class of a task (bound as `TASKS`, class `TaskRunner`).
pub struct TaskRunner {
    storage: Rc<dyn ObjectStorage>,
    env: Env,
}

impl ObjectHandler for TaskRunner {
    fn fetch(&self, req: Request) -> Fut<'_, Response> {
        Box::pin(async move {
            self.answer(req).await.unwrap_or_else(|e| Response::text_with_status(format!("the task failed: {e}"), 500))
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(self.wake())
    }
}

impl TaskRunner {
    pub fn new(storage: Rc<dyn ObjectStorage>, env: Env) -> TaskRunner {
        TaskRunner { storage, env }
    }

    async fn answer(&self, req: Request) -> crate::runtime::Result<Response> {
        crate::shell::outbound::guard_from_env(&self.env);
        let call: TaskCall = match serde_json::from_str(&req.text().await?) {
            Ok(c) => c,
            Err(e) => return Ok(Response::text_with_status(format!("not a task call: {e}"), 400)),
        };
        if let TaskCall::Create { spec, ttl_ms } = call {
            return self.create(*spec, ttl_ms).await;
        }
        let Some(mut rec) = self.load().await? else { return Ok(Response::text_with_status("no such task", 404)) };
        // Past its deletion time a task is gone, even before the alarm has deleted it.
        if !call.may_reach(&rec.spec) || rec.state.deletable(crate::shell::platform::now_ms()) {
            // A task is reachable only through the server that created it (and, on a server
            // with client keys, by the caller that created it).
            return Ok(Response::text_with_status("no such task", 404));
        }
        match call {
            TaskCall::Create { .. } | TaskCall::Get { .. } => {
                self.ensure_alarm(&rec).await?;
                Response::from_json(&answer(&rec, false))
            }
            TaskCall::Wait { timeout_ms, .. } => {
                let until = crate::shell::platform::now_ms() + timeout_ms.min(WAIT_SLICE_MS);
                self.ensure_alarm(&rec).await?;
                while !rec.state.status.is_terminal() && crate::shell::platform::now_ms() < until {
                    crate::runtime::sleep(250).await;
                    match self.load().await? {
                        Some(r) => rec = r,
                        None => return Ok(Response::text_with_status("no such task", 404)),
                    }
                }
                Response::from_json(&answer(&rec, false))
            }
            TaskCall::Cancel { .. } => {
                let was_terminal = rec.state.status.is_terminal();
                if !was_terminal && rec.state.request_cancel(crate::shell::platform::now_ms()).is_ok() {
                    self.save(&rec).await?;
                }
                Response::from_json(&answer(&rec, was_terminal))
            }
        }
    }

    /// The alarm: one due step of the task (start, poll, cancel), or its deletion.
    async fn wake(&self) -> crate::runtime::Result<()> {
        crate::shell::log::begin();
        crate::shell::outbound::guard_from_env(&self.env);
        let Some(rec) = self.load().await? else { return Ok(()) };
        let now = crate::shell::platform::now_ms();
        if rec.state.deletable(now) {
            self.storage.delete_all().await?;
            delete_row(&self.env, &rec.spec.task_id).await;
            return Ok(());
        }
        let mut rec = rec;
        if rec.state.end_if_ttl_ran_out(now) {
            // Ended before anything else is called; the cancel of its run is the next alarm.
            self.settle(&mut rec);
            self.save(&rec).await?;
            return Ok(());
        }
        // The backend call happens on a snapshot; its answer is applied to the state as stored
        // *after* the call, so a cancel that arrived meanwhile wins (its poll result is discarded).
        let effect = self.step(&rec).await;
        let Some(mut fresh) = self.load().await? else { return Ok(()) };
        let cfg = poll_config(&fresh.spec.app);
        apply(effect, &mut fresh, &cfg);
        // A step longer than what was left of the TTL (a submit, a run inside the task).
        fresh.state.end_if_ttl_ran_out(crate::shell::platform::now_ms());
        self.settle(&mut fresh);
        self.save(&fresh).await?;
        Ok(())
    }
}

/// The result of one backend step, to be applied to the task's current state.
enum Effect {
    None,
    Polled(PollOutcome, u64),
    CancelAnswered(PollOutcome, u64),
    Submitted { remote: String, dify_task_id: Option<String> },
    Finished { report: Report, result: Option<Value> },
}

fn apply(effect: Effect, rec: &mut Record, cfg: &PollConfig) {
    match effect {
        Effect::None => {}
        Effect::Polled(outcome, at) => {
            rec.state.on_poll(outcome, cfg, at);
        }
        Effect::CancelAnswered(outcome, at) => rec.state.on_cancel(outcome, cfg, at),
        Effect::Submitted { remote, dify_task_id } => {
            rec.dify_task_id = dify_task_id;
            if let Err(e) = rec.state.submitted(&remote, cfg, crate::shell::platform::now_ms()) {
                crate::shell::log::error(&format!("task {}: {e}", rec.spec.task_id));
            }
        }
        Effect::Finished { report, result } => {
            if !rec.state.status.is_terminal() {
                rec.result = result;
                rec.state.finished(report, cfg, crate::shell::platform::now_ms());
            }
        }
    }
}

fn answer(rec: &Record, was_terminal: bool) -> TaskAnswer {
    let v = rec.view();
    TaskAnswer {
        task_id: v.task_id,
        status: rec.state.status.mcp_status(),
        status_message: v.status_message,
        created_at_ms: v.created_at_ms,
        updated_at_ms: v.updated_at_ms,
        ttl_ms: v.ttl_ms,
        poll_interval_ms: v.poll_interval_ms,
        result: rec.result.clone(),
        error: rec.error.clone(),
        was_terminal,
    }
}

impl TaskRunner {
    async fn load(&self) -> crate::runtime::Result<Option<Record>> {
        storage_get(&*self.storage, STORAGE_KEY).await
    }

    /// Stores the record, mirrors it to D1 and arms the next alarm.
    async fn save(&self, rec: &Record) -> crate::runtime::Result<()> {
        storage_put(&*self.storage, STORAGE_KEY, rec).await?;
        match rec.state.next_wake_ms() {
            Some(at) => self.alarm_at(at).await?,
            None => self.storage.delete_alarm().await?,
        }
        write_row(&self.env, rec).await;
        Ok(())
    }

    /// Arms the alarm for an absolute time.
    async fn alarm_at(&self, at_ms: u64) -> crate::runtime::Result<()> {
        self.storage.set_alarm(at_ms).await
    }

    /// After a restart an alarm may be missing, or long overdue: any request re-arms it.
    async fn ensure_alarm(&self, rec: &Record) -> crate::runtime::Result<()> {
        let Some(at) = rec.state.next_wake_ms() else { return Ok(()) };
        let armed = self.storage.get_alarm().await?;
        if armed.is_none_or(|t| t + 5000 < crate::shell::platform::now_ms()) {
            self.alarm_at(at).await?;
        }
        Ok(())
    }

    async fn create(&self, spec: TaskSpec, ttl_ms: u64) -> crate::runtime::Result<Response> {
        if self.load().await?.is_some() {
            return Ok(Response::text_with_status("task exists", 409));
        }
        let grace_ms = crate::shell::platform::settings(&self.env).task_grace_ms;
        let rec = Record {
            spec,
            state: TaskState::new(crate::shell::platform::now_ms(), ttl_ms).with_grace_ms(grace_ms),
            result: None,
            error: None,
            dify_task_id: None,
        };
        // Durable before the client hears of it; the first alarm starts the work.
        storage_put(&*self.storage, STORAGE_KEY, &rec).await?;
        self.alarm_at(crate::shell::platform::now_ms()).await?;
        write_row(&self.env, &rec).await;
        Response::from_json(&answer(&rec, false))
    }

    /// One due step (start, poll or cancel): the backend call, not yet applied.
    async fn step(&self, rec: &Record) -> Effect {
        if rec.state.status == Status::Submitted && rec.state.cancel_requested_at_ms.is_none() {
            return self.start(rec).await;
        }
        match rec.state.due_action(crate::shell::platform::now_ms()) {
            Action::None => Effect::None,
            Action::Poll => Effect::Polled(self.poll(rec).await, crate::shell::platform::now_ms()),
            Action::Cancel => Effect::CancelAnswered(self.cancel(rec).await, crate::shell::platform::now_ms()),
        }
    }

    /// Turns a terminal state into the result the client gets.
    fn settle(&self, rec: &mut Record) {
        if !rec.state.status.is_terminal() || rec.result.is_some() || rec.error.is_some() {
            return;
        }
        let outcome = match rec.state.status {
            Status::Completed => match (&rec.state.result, &rec.state.result_preview) {
                (Some(r), _) => Outcome::Ok {
                    text: r.to_string(),
                    structured: Some(if r.is_object() { r.clone() } else { json!({"result": r}) }),
                },
                (None, preview) => {
                    let preview = preview.clone().unwrap_or_default();
                    Outcome::Ok {
                        text: format!("{preview}\n\n[truncated: the result was larger than the task result limit]"),
                        structured: Some(json!({"result_truncated": true, "result_preview": preview})),
                    }
                }
            },
            Status::Failed => Outcome::Failed(rec.state.error.clone().unwrap_or_else(|| "the task failed".into())),
            _ => return,
        };
        rec.result = tool_result(&server::finish_call(&rec.plan(), outcome, VERSION));
    }

    /// The task's app as a server of one app (what the call path takes).
    fn definition(rec: &Record) -> ServerDefinition {
        ServerDefinition {
            format: crate::pure::definition::FORMAT,
            server_id: rec.spec.server_id.clone(),
            name: String::new(),
            description: String::new(),
            status: crate::pure::server::Status::Active,
            parameters: Default::default(),
            auth: Default::default(),
            call_log_payloads: false,
            code_expires_at: None,
            apps: vec![rec.spec.app.clone()],
        }
    }

    fn backend(&self, rec: &Record) -> Result<Target, Outcome> {
        target_of(&Self::definition(rec), 0, &self.env)
    }

    async fn start(&self, rec: &Record) -> Effect {
        let failed = |outcome: Outcome| match outcome {
            Outcome::Ok { structured, .. } => Effect::Finished {
                report: Report::Completed { result: structured.unwrap_or(Value::Null), result_artifact: None },
                result: None,
            },
            Outcome::Failed(error) => {
                Effect::Finished { report: Report::Failed { error, error_code: None }, result: None }
            }
        };
        let backend = match self.backend(rec) {
            Ok(b) => b,
            Err(outcome) => return failed(outcome),
        };
        match rec.spec.kind {
            Kind::RunToCompletion => {
                let served = std::rc::Rc::new(crate::pure::mcp::prepared::Prepared::new(Self::definition(rec)));
                let response = run_to_completion(&rec.plan(), &served, &self.env).await;
                let result = tool_result(&response);
                let is_error = result.as_ref().and_then(|r| r.get("isError")).and_then(Value::as_bool).unwrap_or(true);
                let report = if is_error {
                    Report::Failed { error: first_text(result.as_ref()), error_code: None }
                } else {
                    Report::Completed { result: result.clone().unwrap_or(Value::Null), result_artifact: None }
                };
                Effect::Finished { report, result }
            }
            Kind::DifyWorkflow => match start_dify_run(rec, &backend).await {
                Ok((remote, dify_task_id)) => Effect::Submitted { remote, dify_task_id },
                Err(outcome) => failed(outcome),
            },
            Kind::McpToolset => {
                let submit = rec.spec.body["name"].as_str().unwrap_or_default().to_string();
                match self.toolset_call(rec, &submit, rec.spec.body["arguments"].clone()).await {
                    Ok(result) if result["isError"] == Value::Bool(true) => {
                        failed(Outcome::Failed(first_text(Some(&result))))
                    }
                    Ok(result) => match task::parse_async_submit(&result["structuredContent"]) {
                        Ok(remote) => Effect::Submitted { remote, dify_task_id: None },
                        Err(e) => failed(Outcome::Failed(format!("the submit tool broke the task protocol: {e}"))),
                    },
                    Err(e) => failed(Outcome::Failed(e)),
                }
            }
            Kind::AsyncTool => {
                let answer = post_json(&backend, &rec.plan(), &backend.base_url, &rec.spec.body, Resend::Never).await;
                let submitted = match &answer {
                    Ok(v) => task::parse_async_submit(v),
                    Err(e) => Err(e.to_string()),
                };
                match submitted {
                    Ok(remote) => Effect::Submitted { remote, dify_task_id: None },
                    Err(e) => {
                        // A submit answer that breaks the contract (e.g. a remote id over 255
                        // characters) may still have started work: undo it when it named a task.
                        if let Some(remote) = answer.ok().and_then(|v| v["task_id"].as_str().map(str::to_string)) {
                            let cancel = async_endpoint(&rec.spec.app, ToolsetRole::Cancel);
                            let _ =
                                post_json(&backend, &rec.plan(), &cancel, &json!({"task_id": remote}), Resend::Once)
                                    .await;
                        }
                        failed(Outcome::Failed(format!("the tool did not accept the task: {e}")))
                    }
                }
            }
        }
    }

    async fn poll(&self, rec: &Record) -> PollOutcome {
        let backend = match self.backend(rec) {
            Ok(b) => b,
            Err(Outcome::Failed(m)) => return PollOutcome::Transient(m),
            Err(_) => return PollOutcome::Transient("the app cannot be called".into()),
        };
        let remote = rec.state.remote_id.clone().unwrap_or_default();
        match rec.spec.kind {
            Kind::DifyWorkflow => {
                let url = format!("{}/workflows/run/{remote}", backend.base_url);
                match get_json(&backend, &rec.plan(), &url).await {
                    Ok(v) => run_status::parse_dify_run(&v),
                    Err(e) => PollOutcome::Transient(e.to_string()),
                }
            }
            Kind::AsyncTool => {
                let url = async_endpoint(&rec.spec.app, ToolsetRole::Status);
                match post_json(&backend, &rec.plan(), &url, &json!({"task_id": remote}), Resend::Once).await {
                    // A status tool that reports isError is busy, not broken: retry.
                    Ok(v) if v.get("isError") == Some(&Value::Bool(true)) => {
                        PollOutcome::Transient(crate::pure::outcome::truncate(&first_text(Some(&v)), 500).to_string())
                    }
                    Ok(v) => task::parse_async_status(&v, &remote),
                    Err(e) => PollOutcome::Transient(e.to_string()),
                }
            }
            Kind::McpToolset => self.toolset_status(rec, ToolsetRole::Status, &remote).await,
            Kind::RunToCompletion => PollOutcome::Transient("nothing to poll".into()),
        }
    }

    /// Calls one tool of the task's upstream MCP server with the app's own credentials
    /// (request-scoped headers do not outlive the request, so background calls never use them).
    async fn toolset_call(&self, rec: &Record, tool: &str, arguments: Value) -> Result<Value, String> {
        let upstream = upstream_of(&rec.spec.app, &self.env, None).await?;
        let mut client = UpstreamClient::new(&upstream, &self.env);
        client.connect(true).await?;
        let response = client.call_tool(tool, &arguments, None, &serde_json::Map::new(), &mut |_| {}).await?;
        crate::pure::backend::mcp::replies::response_result(&rec.spec.app.name, &response)
    }

    /// A status or cancel call of a task toolset, read by the async tool protocol's rules: an `isError` result
    /// is retried, the structured content is the answer.
    async fn toolset_status(&self, rec: &Record, role: ToolsetRole, remote: &str) -> PollOutcome {
        let submit = rec.spec.body["name"].as_str().unwrap_or_default();
        let toolset = rec.spec.app.backend.as_mcp().and_then(|c| c.toolset_of(submit));
        let Some(tool) = toolset.map(|t| t.tool(role)) else {
            return PollOutcome::Permanent(format!("the app has no {} for {submit}", role.key()));
        };
        match self.toolset_call(rec, tool, json!({"task_id": remote})).await {
            Ok(r) if r["isError"] == Value::Bool(true) => {
                PollOutcome::Transient(crate::pure::outcome::truncate(&first_text(Some(&r)), 500).to_string())
            }
            Ok(r) => task::parse_async_status(&r["structuredContent"], remote),
            Err(e) => PollOutcome::Transient(e),
        }
    }

    async fn cancel(&self, rec: &Record) -> PollOutcome {
        let backend = match self.backend(rec) {
            Ok(b) => b,
            Err(_) => return PollOutcome::Report(Report::Cancelled),
        };
        // Cancelled before the work was submitted: there is nothing to stop, and no id to send.
        let Some(remote) = rec.state.remote_id.clone() else { return PollOutcome::Report(Report::Cancelled) };
        match rec.spec.kind {
            Kind::DifyWorkflow => {
                let Some(dify_task) = rec.dify_task_id.clone() else { return PollOutcome::Report(Report::Cancelled) };
                let url = format!("{}{}", backend.base_url, dify_call::stop_path(DifyMode::Workflow, &dify_task));
                match post_json(&backend, &rec.plan(), &url, &json!({"user": rec.spec.user}), Resend::Once).await {
                    Ok(_) => PollOutcome::Report(Report::Cancelled),
                    Err(e) => PollOutcome::Transient(e.to_string()),
                }
            }
            Kind::AsyncTool => {
                let url = async_endpoint(&rec.spec.app, ToolsetRole::Cancel);
                match post_json(&backend, &rec.plan(), &url, &json!({"task_id": remote}), Resend::Once).await {
                    Ok(v) => task::parse_async_status(&v, &remote),
                    Err(e) => PollOutcome::Transient(e.to_string()),
                }
            }
            Kind::McpToolset => self.toolset_status(rec, ToolsetRole::Cancel, &remote).await,
            // Work that runs inside the task finishes in its first step; nothing is left to stop.
            Kind::RunToCompletion => PollOutcome::Report(Report::Cancelled),
        }
    }
}

/// The CallToolResult of a response, as a task stores it: the serverInfo `_meta` belongs to the
/// response that carries the task, not to the inlined result.
fn tool_result(response: &Value) -> Option<Value> {
    let mut r = response.get("result")?.clone();
    if let Some(o) = r.as_object_mut() {
        o.remove("_meta");
    }
    Some(r)
}

fn first_text(result: Option<&Value>) -> String {
    result
        .and_then(|r| r["content"].as_array())
        .and_then(|c| c.iter().find_map(|b| b["text"].as_str()))
        .unwrap_or("the tool reported an error")
        .to_string()
}

/// The status or cancel endpoint of the async tool protocol (docs/async-tool-protocol.md) (the task kind says there is one).
fn async_endpoint(app: &AppDefinition, role: ToolsetRole) -> String {
    let endpoints = app.backend.as_http_tool().and_then(|c| c.async_endpoints.as_ref());
    endpoints.map_or_else(String::new, |a| match role {
        ToolsetRole::Status => a.status_endpoint.clone(),
        ToolsetRole::Cancel => a.cancel_endpoint.clone(),
    })
}

/// Starts a Dify workflow run in streaming mode and reads only up to `workflow_started`, which
/// names the run; the run goes on at Dify after we hang up.
async fn start_dify_run(rec: &Record, backend: &Target) -> Result<(String, Option<String>), Outcome> {
    let plan = rec.plan();
    let headers = request_headers(&plan, backend)?;
    let body = plan.request.streaming_body().unwrap_or(Value::Null);
    let url = format!("{}{}", backend.base_url, plan.request.path());
    let mut resp = match outbound::send(Method::Post, &url, headers, Some(&body), backend.first_byte).await {
        Ok(r) => r,
        Err(SendError::TimedOut) => {
            return Err(Outcome::Failed(format!("the Dify app '{}' did not answer in time", backend.app_name)))
        }
        Err(e) => return Err(send_failed(&plan, backend, e)),
    };
    let status = resp.status_code();
    if !(200..300).contains(&status) {
        let retry_after = resp.headers().get("retry-after");
        let text = outbound::text(&mut resp, backend.idle, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
        return Err(dify_call::read_blocking(DifyMode::Workflow, status, retry_after.as_deref(), &text, &Value::Null));
    }
    let mut stream = resp.stream();
    let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
    let mut events = Vec::new();
    let mut deadline = outbound::Deadline::after(backend.idle);
    while let Ok(chunk) = deadline.next_chunk(&mut stream).await {
        if parser.feed(&chunk, &mut events).is_err() {
            break;
        }
        for ev in events.drain(..) {
            let Ok(v) = serde_json::from_str::<Value>(&ev.data) else { continue };
            if let Some(run) = v["workflow_run_id"].as_str() {
                return Ok((run.to_string(), v["task_id"].as_str().map(str::to_string)));
            }
        }
    }
    Err(Outcome::Failed(format!("the Dify app '{}' did not name its workflow run", backend.app_name)))
}

/// Mirrors a task into its D1 row (best effort: the Durable Object's storage is the authority).
async fn write_row(env: &Env, rec: &Record) {
    let db = env.d1(crate::shell::platform::D1);
    let s = &rec.state;
    let cfg = poll_config(&rec.spec.app);
    let sql = "INSERT INTO tasks (id, server_id, app_id, tool, status, status_message, created_at, updated_at, poll_count, consecutive_errors, last_error, next_poll_at, degraded, cancel_requested, completed_at)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
               ON CONFLICT (id) DO UPDATE SET status = excluded.status, status_message = excluded.status_message, updated_at = excluded.updated_at,
                 poll_count = excluded.poll_count, consecutive_errors = excluded.consecutive_errors, last_error = excluded.last_error,
                 next_poll_at = excluded.next_poll_at, degraded = excluded.degraded, cancel_requested = excluded.cancel_requested, completed_at = excluded.completed_at";
    let text = |v: &str| SqlValue::Text(v.to_string());
    let int = |n: u64| SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX));
    let opt_s = |v: &Option<String>| v.as_deref().map_or(SqlValue::Null, text);
    let opt_n = |v: Option<u64>| v.map_or(SqlValue::Null, int);
    let status = serde_json::to_value(s.status).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    let args = [
        text(&rec.spec.task_id),
        text(&rec.spec.server_id),
        text(&rec.spec.app.id),
        text(&rec.spec.tool),
        text(&status),
        opt_s(&s.status_message(&cfg)),
        int(s.created_at_ms),
        int(s.updated_at_ms),
        int(u64::from(s.poll_count)),
        int(u64::from(s.consecutive_errors)),
        opt_s(&s.last_error),
        opt_n(s.next_poll_at_ms.filter(|_| !s.status.is_terminal())),
        int(u64::from(s.tracking_degraded(&cfg))),
        int(u64::from(s.cancel_requested_at_ms.is_some())),
        opt_n(s.completed_at_ms),
    ];
    if let Err(e) = db.run(Statement::new(sql, args.to_vec())).await {
        crate::shell::log::error(&format!("mirroring task {} to D1: {e}", rec.spec.task_id));
    }
}

async fn delete_row(env: &Env, task_id: &str) {
    let db = env.d1(crate::shell::platform::D1);
    let stmt = Statement::new("DELETE FROM tasks WHERE id = ?1", vec![SqlValue::Text(task_id.to_string())]);
    if let Err(e) = db.run(stmt).await {
        crate::shell::log::error(&format!("deleting task {task_id}'s row from D1: {e}"));
    }
}

// ---- the Worker's side: reaching a task's Durable Object ----

/// A fresh task id: 128 bits from the CSPRNG, hex.
pub fn new_task_id() -> Result<String, crate::pure::random::Unavailable> {
    let mut b = [0u8; 16];
    crate::runtime::fill_random(&mut b)?;
    Ok(ids::hex(&b))
}

/// Asks a task's Durable Object; `Ok(None)` when the task does not exist for this server.
pub async fn call(env: &Env, task_id: &str, call: &TaskCall) -> crate::runtime::Result<Option<TaskAnswer>> {
    let req = Request::post("https://task/", serde_json::to_string(call)?);
    let resp = env.runtime().object_fetch(crate::shell::platform::TASKS, task_id, req).await?;
    match resp.status_code() {
        200 => Ok(Some(serde_json::from_str::<TaskAnswer>(&resp.text().await?)?)),
        404 => Ok(None),
        s => {
            let text = resp.text().await.unwrap_or_default();
            Err(Error::new(crate::runtime::Kind::Object, format!("the task runner answered HTTP {s}: {text}")))
        }
    }
}
