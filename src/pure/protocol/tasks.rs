//! MCP tasks on the wire: when a `tools/call` becomes a task, and how tasks look, per revision.
//! 2025-11-25 has tasks in core (`params.task`, `tasks/get|result|cancel`, nested `task`);
//! 2026-07-28 moved them to the `io.modelcontextprotocol/tasks` extension (server-directed
//! creation, flat `CreateTaskResult` with `resultType: "task"`, results inlined in `tasks/get`,
//! `ttlMs`/`pollIntervalMs`, cancel answers an empty ack).

use crate::json;
use serde_json::{Map, Value};

use super::jsonrpc::{self, RpcError};
use super::meta;
use super::version::Version;

pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// 2026-07-28: the client lacks a capability the request needs.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// Task retention when the client does not ask (and the bounds on what it may ask).
pub const DEFAULT_TTL_MS: u64 = 24 * 3600 * 1000;
pub const MIN_TTL_MS: u64 = 60 * 1000;
pub const MAX_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// The floor of the `TASK_MIN_TTL_SECONDS` setting (tests only: the integration tests of TTLs
/// need not wait minutes): whole seconds from 1 up to [`MIN_TTL_MS`]'s, which it can only lower;
/// [`MIN_TTL_MS`] when it is unset, 0, larger or not a number.
pub fn min_ttl_ms_setting(value: Option<&str>) -> u64 {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s >= 1)
        .map_or(MIN_TTL_MS, |s| s.saturating_mul(1000).min(MIN_TTL_MS))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    Forbidden,
    Optional,
    Required,
}

impl crate::pure::named::Named for TaskSupport {
    const ALL: &'static [Self] = &[TaskSupport::Forbidden, TaskSupport::Optional, TaskSupport::Required];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(TaskSupport);

impl TaskSupport {
    pub fn parse(s: &str) -> Option<TaskSupport> {
        <TaskSupport as crate::pure::named::Named>::from_name(s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// How a `tools/call` is to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Sync,
    Task { ttl_ms: u64 },
    Reject(RpcError),
}

/// Whether the request's client declared the tasks extension (2026-07-28, per request).
pub fn client_has_extension(params: &Map<String, Value>) -> bool {
    params
        .get("_meta")
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some()
}

/// `min_ttl_ms`: the floor of a TTL the client asks for, [`MIN_TTL_MS`] unless a test deployment
/// lowered it ([`min_ttl_ms_setting`]).
pub fn decide(
    version: Version,
    support: TaskSupport,
    tool: &str,
    params: &Map<String, Value>,
    min_ttl_ms: u64,
) -> Decision {
    if version.is_stateless() {
        // The server decides; the client only has to speak the extension.
        return match (support, client_has_extension(params)) {
            (TaskSupport::Forbidden, _) => Decision::Sync,
            (_, true) => Decision::Task { ttl_ms: DEFAULT_TTL_MS },
            (TaskSupport::Optional, false) => Decision::Sync,
            (TaskSupport::Required, false) => Decision::Reject(
                RpcError::new(
                    400,
                    MISSING_REQUIRED_CLIENT_CAPABILITY,
                    format!("Missing required client capability: tool '{tool}' runs only as a task; declare the {EXTENSION} extension in _meta clientCapabilities"),
                )
                .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}})),
            ),
        };
    }
    if !version.has_tasks() {
        return Decision::Sync;
    }
    match (support, params.get("task")) {
        (TaskSupport::Forbidden, Some(_)) => Decision::Reject(RpcError::new(
            200,
            jsonrpc::METHOD_NOT_FOUND,
            format!("Tool '{tool}' does not support task-augmented calls (execution.taskSupport is forbidden); call it without params.task"),
        )),
        (_, Some(task)) => {
            let asked = task.get("ttl").and_then(Value::as_u64).unwrap_or(DEFAULT_TTL_MS);
            Decision::Task { ttl_ms: asked.clamp(min_ttl_ms, MAX_TTL_MS) }
        }
        (TaskSupport::Required, None) => Decision::Reject(RpcError::new(
            200,
            jsonrpc::METHOD_NOT_FOUND,
            format!("Tool '{tool}' must be called as a task (execution.taskSupport is required); add params.task"),
        )),
        (_, None) => Decision::Sync,
    }
}

/// A task's status as MCP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl crate::pure::named::Named for McpTaskStatus {
    const ALL: &'static [Self] = &[
        McpTaskStatus::Working,
        McpTaskStatus::InputRequired,
        McpTaskStatus::Completed,
        McpTaskStatus::Failed,
        McpTaskStatus::Cancelled,
    ];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(McpTaskStatus);

impl McpTaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            McpTaskStatus::Working => "working",
            McpTaskStatus::InputRequired => "input_required",
            McpTaskStatus::Completed => "completed",
            McpTaskStatus::Failed => "failed",
            McpTaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, McpTaskStatus::Completed | McpTaskStatus::Failed | McpTaskStatus::Cancelled)
    }
}

/// A task as the Durable Object reports it, independent of the revision.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub task_id: String,
    pub status: McpTaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub outcome: Option<TaskOutcome>,
}

/// How a finished task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// The tool ran: its CallToolResult (which may be `isError`).
    Result(Value),
    /// It could not run (a protocol-level failure), as a JSON-RPC error.
    Error { code: i64, message: String },
}

impl TaskView {
    /// 2025-11-25 reports a tool result with `isError` as `failed`; 2026-07-28 keeps `failed` for
    /// protocol errors and reports such a tool as `completed` with `result.isError`.
    fn status_for(&self, version: Version) -> McpTaskStatus {
        match (&self.outcome, version.is_stateless()) {
            (Some(TaskOutcome::Result(r)), false) if r.get("isError") == Some(&Value::Bool(true)) => {
                McpTaskStatus::Failed
            }
            _ => self.status,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    fn fields(&self, version: Version) -> Map<String, Value> {
        let mut t = Map::new();
        t.insert("taskId".into(), self.task_id.clone().into());
        t.insert("status".into(), self.status_for(version).as_str().into());
        if let Some(m) = &self.status_message {
            t.insert("statusMessage".into(), m.clone().into());
        }
        t.insert("createdAt".into(), iso8601(self.created_at_ms).into());
        t.insert("lastUpdatedAt".into(), iso8601(self.updated_at_ms).into());
        let (ttl, poll) = if version.is_stateless() { ("ttlMs", "pollIntervalMs") } else { ("ttl", "pollInterval") };
        t.insert(ttl.into(), self.ttl_ms.into());
        t.insert(poll.into(), self.poll_interval_ms.into());
        t
    }
}

/// The answer to a `tools/call` that became a task.
pub fn create_result(view: &TaskView, version: Version) -> Value {
    if version.is_stateless() {
        let mut t = view.fields(version);
        t.insert("resultType".into(), "task".into());
        Value::Object(t)
    } else {
        json!({ "task": view.fields(version) })
    }
}

/// `tasks/get`: the task; on 2026-07-28 a finished task also carries its `result` or `error`.
pub fn get_result(view: &TaskView, version: Version) -> Value {
    let mut t = view.fields(version);
    if version.is_stateless() {
        match &view.outcome {
            Some(TaskOutcome::Result(r)) => {
                t.insert("result".into(), r.clone());
            }
            Some(TaskOutcome::Error { code, message }) => {
                t.insert("error".into(), json!({"code": code, "message": message}));
            }
            None => {}
        }
    }
    Value::Object(t)
}

/// `tasks/cancel` once the cancel is recorded: the task (2025-11-25) or an empty ack.
pub fn cancel_result(view: &TaskView, version: Version) -> Value {
    if version.is_stateless() {
        json!({})
    } else {
        Value::Object(view.fields(version))
    }
}

/// `tasks/result` (2025-11-25) of a finished task: exactly the tool's result or error, tagged
/// with the task it belongs to.
pub fn payload_result(view: &TaskView) -> Result<Value, RpcError> {
    match &view.outcome {
        Some(TaskOutcome::Result(r)) => {
            let mut r = r.clone();
            r["_meta"] = json!({ RELATED_TASK: {"taskId": view.task_id} });
            Ok(r)
        }
        Some(TaskOutcome::Error { code, message }) => Err(RpcError::new(200, *code, message.clone())),
        None if view.status == McpTaskStatus::Cancelled => {
            Err(RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Task {} was cancelled", view.task_id)))
        }
        None => Err(RpcError::new(200, jsonrpc::INTERNAL_ERROR, format!("Task {} has no result yet", view.task_id))),
    }
}

pub fn unknown_task(task_id: &str) -> RpcError {
    RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Invalid params: unknown task {} (tasks are reachable only through the server code that created them, until their ttl)", crate::pure::quote::quote_input(task_id)))
}

pub fn terminal_cancel(view: &TaskView) -> RpcError {
    RpcError::new(
        200,
        jsonrpc::INVALID_PARAMS,
        format!("Invalid params: task {} is already {}; it cannot be cancelled", view.task_id, view.status.as_str()),
    )
}

/// `ms` since the Unix epoch as ISO 8601 UTC with milliseconds.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = crate::pure::time::civil_date(days as i64);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, (rem / 60) % 60, rem % 60, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(status: &str, outcome: Option<TaskOutcome>) -> TaskView {
        let status = <McpTaskStatus as crate::pure::named::Named>::from_name(status).unwrap();
        TaskView {
            task_id: "t1".into(),
            status,
            status_message: None,
            created_at_ms: 1_795_997_414_123,
            updated_at_ms: 1_795_997_415_000,
            ttl_ms: 60_000,
            poll_interval_ms: 5000,
            outcome,
        }
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_795_997_414_123), "2026-11-30T00:10:14.123Z");
    }

    #[test]
    fn decisions_2025_11_25() {
        let v = Version::V2025_11_25;
        let with_task = params(json!({"task": {"ttl": 1000}}));
        let without = params(json!({}));
        assert_eq!(
            decide(v, TaskSupport::Optional, "t", &with_task, MIN_TTL_MS),
            Decision::Task { ttl_ms: MIN_TTL_MS }
        );
        // A test deployment's lower floor (TASK_MIN_TTL_SECONDS) is the floor then, and only that.
        assert_eq!(decide(v, TaskSupport::Optional, "t", &with_task, 5000), Decision::Task { ttl_ms: 5000 });
        let longer = params(json!({"task": {"ttl": 90_000}}));
        assert_eq!(decide(v, TaskSupport::Optional, "t", &longer, 5000), Decision::Task { ttl_ms: 90_000 });
        assert_eq!(decide(v, TaskSupport::Optional, "t", &without, MIN_TTL_MS), Decision::Sync);
        assert!(
            matches!(decide(v, TaskSupport::Forbidden, "t", &with_task, MIN_TTL_MS), Decision::Reject(e) if e.code == -32601)
        );
        assert!(
            matches!(decide(v, TaskSupport::Required, "t", &without, MIN_TTL_MS), Decision::Reject(e) if e.code == -32601 && e.message.contains("params.task"))
        );
        // Older revisions have no tasks: params.task is ignored.
        assert_eq!(decide(Version::V2025_06_18, TaskSupport::Required, "t", &with_task, MIN_TTL_MS), Decision::Sync);
    }

    #[test]
    fn the_min_ttl_setting_only_lowers_the_floor() {
        assert_eq!(min_ttl_ms_setting(None), MIN_TTL_MS, "unset: the 1-minute floor");
        assert_eq!(min_ttl_ms_setting(Some(" 10 ")), 10_000);
        assert_eq!(min_ttl_ms_setting(Some("1")), 1000);
        assert_eq!(min_ttl_ms_setting(Some("59")), 59_000);
        for same in ["60", "61", "86400", "18446744073709551615", "0", "", "-5", "1.5", "ten"] {
            assert_eq!(min_ttl_ms_setting(Some(same)), MIN_TTL_MS, "{same:?}");
        }
    }

    #[test]
    fn decisions_2026_07_28() {
        let v = Version::V2026_07_28;
        let ext =
            params(json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}}));
        let plain = params(json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}, "task": {"ttl": 5}}));
        assert_eq!(decide(v, TaskSupport::Optional, "t", &ext, MIN_TTL_MS), Decision::Task { ttl_ms: DEFAULT_TTL_MS });
        assert_eq!(decide(v, TaskSupport::Optional, "t", &plain, MIN_TTL_MS), Decision::Sync);
        assert_eq!(
            decide(v, TaskSupport::Forbidden, "t", &ext, MIN_TTL_MS),
            Decision::Sync,
            "a legacy hint never promotes a sync tool"
        );
        let Decision::Reject(e) = decide(v, TaskSupport::Required, "t", &plain, MIN_TTL_MS) else { panic!() };
        assert_eq!((e.status, e.code), (400, -32021));
        assert_eq!(e.data.unwrap()["requiredCapabilities"]["extensions"][EXTENSION], json!({}));
    }

    #[test]
    fn shapes_per_revision() {
        let working = view("working", None);
        let old = create_result(&working, Version::V2025_11_25);
        assert_eq!(old["task"]["taskId"], "t1");
        assert_eq!(old["task"]["ttl"], 60_000);
        assert_eq!(old["task"]["createdAt"], "2026-11-30T00:10:14.123Z");
        let new = create_result(&working, Version::V2026_07_28);
        assert_eq!(new["resultType"], "task");
        assert_eq!(new["ttlMs"], 60_000);
        assert_eq!(new["pollIntervalMs"], 5000);
        assert!(new.get("task").is_none() && new.get("ttl").is_none());

        let tool_error = view("completed", Some(TaskOutcome::Result(json!({"content": [], "isError": true}))));
        assert_eq!(get_result(&tool_error, Version::V2025_11_25)["status"], "failed");
        let g = get_result(&tool_error, Version::V2026_07_28);
        assert_eq!(g["status"], "completed");
        assert_eq!(g["result"]["isError"], true);
        let broken = view("failed", Some(TaskOutcome::Error { code: -32603, message: "boom".into() }));
        assert_eq!(get_result(&broken, Version::V2026_07_28)["error"]["code"], -32603);
        assert!(get_result(&broken, Version::V2026_07_28).get("result").is_none());
        assert_eq!(cancel_result(&working, Version::V2026_07_28), json!({}));
        assert_eq!(cancel_result(&working, Version::V2025_11_25)["taskId"], "t1");
    }

    #[test]
    fn payloads() {
        let done = view(
            "completed",
            Some(TaskOutcome::Result(json!({"content": [{"type": "text", "text": "hi"}], "isError": false}))),
        );
        let p = payload_result(&done).unwrap();
        assert_eq!(p["_meta"][RELATED_TASK]["taskId"], "t1");
        assert_eq!(p["content"][0]["text"], "hi");
        let broken = view("failed", Some(TaskOutcome::Error { code: -32603, message: "boom".into() }));
        assert_eq!(payload_result(&broken).unwrap_err().code, -32603);
        assert_eq!(unknown_task("x").code, -32602);
        assert_eq!(terminal_cancel(&done).code, -32602);
    }
}
