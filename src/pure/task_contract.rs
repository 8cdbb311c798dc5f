//! The contract between the Worker and a task's Durable Object (`TaskRunner`): what the Worker
//! asks (one request type, tagged by operation) and what the object answers, as serde types on
//! both sides instead of paths and hand-built JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::definition::AppDefinition;
pub use super::protocol::tasks::McpTaskStatus;
use super::protocol::tasks::{TaskOutcome, TaskView};
use super::protocol::version::Version;

/// How a task follows its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Dify workflow: start the run, then poll `GET /workflows/run/{id}`; stop it to cancel.
    DifyWorkflow,
    /// The async tool protocol over HTTP (docs/async-tool-protocol.md): submit, status, cancel.
    AsyncTool,
    /// A task toolset of an upstream MCP server (docs/async-tool-protocol.md): its submit tool
    /// started the work, its status and cancel tools follow and stop it.
    McpToolset,
    /// Anything else runs to completion inside the task.
    RunToCompletion,
}

impl crate::pure::named::Named for Kind {
    const ALL: &'static [Self] = &[Kind::DifyWorkflow, Kind::AsyncTool, Kind::McpToolset, Kind::RunToCompletion];

    fn name(self) -> &'static str {
        match self {
            Kind::DifyWorkflow => "dify_workflow",
            Kind::AsyncTool => "async_tool",
            Kind::McpToolset => "mcp_toolset",
            Kind::RunToCompletion => "run_to_completion",
        }
    }
}
crate::pure::named::deserialize_by_name!(Kind);

/// What a task runs: a snapshot taken when it was created, so later app edits do not change a
/// running task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSpec {
    pub task_id: String,
    pub server_id: String,
    pub tool: String,
    pub kind: Kind,
    pub app: AppDefinition,
    /// The protocol revision the task was created under (its result is shaped for it).
    pub version: Version,
    pub path: String,
    pub body: Value,
    pub user: String,
}

impl crate::pure::fields::FromFields for TaskSpec {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(TaskSpec {
            task_id: f.text("task_id")?,
            server_id: f.text("server_id")?,
            tool: f.text("tool")?,
            kind: f.named("kind")?,
            app: f.object("app")?,
            version: f.named("version")?,
            path: f.text("path")?,
            body: f.value("body")?,
            user: f.text("user")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(TaskSpec);

/// What the Worker asks a task's Durable Object. Every operation but `Create` names the server
/// asking: a task is reachable only through the server that created it. On a server that
/// authenticates its callers (client keys) it also names the caller (`owner`): the task is then
/// reachable only by the caller that created it.
///
/// On the wire an object with `op` beside the operation's fields. It is read through
/// [`WireCall`], a plain struct: serde reads an internally tagged enum by buffering the object
/// first, which would compile a second reader of [`TaskSpec`] into the Worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", try_from = "WireCall")]
pub enum TaskCall {
    Create {
        spec: Box<TaskSpec>,
        ttl_ms: u64,
    },
    Get {
        server_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// Waits until the task is terminal or `timeout_ms` passed, then answers like `Get`.
    Wait {
        server_id: String,
        timeout_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    Cancel {
        server_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
}

/// A [`TaskCall`] as read: every operation's fields, each optional.
struct WireCall {
    op: String,
    spec: Option<Box<TaskSpec>>,
    ttl_ms: Option<u64>,
    server_id: Option<String>,
    timeout_ms: Option<u64>,
    owner: Option<String>,
}

impl crate::pure::fields::FromFields for WireCall {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(WireCall {
            op: f.text("op")?,
            spec: f.opt_object("spec")?.map(Box::new),
            ttl_ms: f.opt_uint("ttl_ms")?,
            server_id: f.opt_text("server_id")?,
            timeout_ms: f.opt_uint("timeout_ms")?,
            owner: f.opt_text("owner")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(WireCall);

impl TryFrom<WireCall> for TaskCall {
    type Error = String;

    fn try_from(w: WireCall) -> Result<Self, String> {
        let WireCall { op, spec, ttl_ms, server_id, timeout_ms, owner } = w;
        let missing = |field: &str| format!("missing field `{field}` of op `{op}`");
        let server_id = server_id.ok_or_else(|| missing("server_id"));
        Ok(match op.as_str() {
            "create" => TaskCall::Create {
                spec: spec.ok_or_else(|| missing("spec"))?,
                ttl_ms: ttl_ms.ok_or_else(|| missing("ttl_ms"))?,
            },
            "get" => TaskCall::Get { server_id: server_id?, owner },
            "wait" => TaskCall::Wait {
                server_id: server_id?,
                timeout_ms: timeout_ms.ok_or_else(|| missing("timeout_ms"))?,
                owner,
            },
            "cancel" => TaskCall::Cancel { server_id: server_id?, owner },
            other => return Err(format!("unknown op `{other}`")),
        })
    }
}

impl TaskCall {
    /// The server a lookup comes from (`None` for `Create`).
    pub fn server_id(&self) -> Option<&str> {
        match self {
            TaskCall::Create { .. } => None,
            TaskCall::Get { server_id, .. } | TaskCall::Wait { server_id, .. } | TaskCall::Cancel { server_id, .. } => {
                Some(server_id)
            }
        }
    }

    /// The authenticated caller a lookup comes from, if the server authenticates its callers.
    pub fn owner(&self) -> Option<&str> {
        match self {
            TaskCall::Create { .. } => None,
            TaskCall::Get { owner, .. } | TaskCall::Wait { owner, .. } | TaskCall::Cancel { owner, .. } => {
                owner.as_deref()
            }
        }
    }

    /// Whether this lookup may reach the task `spec` describes: through the server that created
    /// it and, when it names an authenticated caller, by the caller that created it (its `user`).
    pub fn may_reach(&self, spec: &TaskSpec) -> bool {
        self.server_id() == Some(spec.server_id.as_str()) && self.owner().is_none_or(|o| o == spec.user)
    }
}

/// A JSON-RPC error kept as `[code, message]` (serde's form of `(i64, String)`), or none.
pub fn rpc_error(f: &mut crate::pure::fields::Fields, key: &str) -> Result<Option<(i64, String)>, String> {
    let Some(v) = f.opt_value(key) else { return Ok(None) };
    match v.as_array().map(Vec::as_slice) {
        Some([Value::Number(code), Value::String(message)]) if code.is_i64() => {
            Ok(code.as_i64().map(|c| (c, message.clone())))
        }
        _ => Err(format!("{key} is not [code, message]")),
    }
}

/// What the Durable Object answers to every operation: the task as it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskAnswer {
    pub task_id: String,
    pub status: McpTaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// The tool's CallToolResult once the task has finished.
    pub result: Option<Value>,
    /// A JSON-RPC error (code, message) instead of a result.
    pub error: Option<(i64, String)>,
    /// Whether the task was already terminal when a cancel arrived.
    pub was_terminal: bool,
}

impl crate::pure::fields::FromFields for TaskAnswer {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(TaskAnswer {
            task_id: f.text("task_id")?,
            status: f.named("status")?,
            status_message: f.opt_text("status_message")?,
            created_at_ms: f.uint("created_at_ms")?,
            updated_at_ms: f.uint("updated_at_ms")?,
            ttl_ms: f.uint("ttl_ms")?,
            poll_interval_ms: f.uint("poll_interval_ms")?,
            result: f.opt_value("result"),
            error: rpc_error(f, "error")?,
            was_terminal: f.flag("was_terminal")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(TaskAnswer);

impl TaskAnswer {
    pub fn view(&self) -> TaskView {
        TaskView {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            outcome: match (&self.result, &self.error) {
                (Some(r), _) => Some(TaskOutcome::Result(r.clone())),
                (None, Some((code, message))) => Some(TaskOutcome::Error { code: *code, message: message.clone() }),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_are_tagged_by_operation() {
        let call = TaskCall::Wait { server_id: "s1".into(), timeout_ms: 20_000, owner: None };
        let v = serde_json::to_value(&call).unwrap();
        assert_eq!(v, json!({"op": "wait", "server_id": "s1", "timeout_ms": 20000}));
        assert_eq!(serde_json::from_value::<TaskCall>(v).unwrap(), call);
        assert_eq!(call.server_id(), Some("s1"));
        // An unknown operation or a missing server is refused, not guessed.
        assert!(serde_json::from_value::<TaskCall>(json!({"op": "delete", "server_id": "s"})).is_err());
        assert!(serde_json::from_value::<TaskCall>(json!({"op": "get"})).is_err());
    }

    /// A task of server `s1` created by the caller `alice`, sending `body` to a workflow.
    fn alices_spec(body: Value) -> TaskSpec {
        serde_json::from_value(json!({
            "task_id": "t", "server_id": "s1", "tool": "T", "kind": "run_to_completion",
            "app": {"id": "a", "name": "A", "description": "", "mode": "workflow",
                    "backend": {"base_url": "http://x", "api_key": "k"}, "user_input_form": [], "outputs": []},
            "version": "2025-11-25", "path": "/workflows/run", "body": body, "user": "alice"
        }))
        .unwrap()
    }

    #[test]
    fn every_call_reads_back_as_written_and_a_bad_one_says_what_is_wrong() {
        let calls = [
            TaskCall::Create { spec: Box::new(alices_spec(json!({"inputs": {"q": 1}}))), ttl_ms: 60_000 },
            TaskCall::Get { server_id: "s1".into(), owner: Some("alice".into()) },
            TaskCall::Wait { server_id: "s1".into(), timeout_ms: 5, owner: None },
            TaskCall::Cancel { server_id: "s1".into(), owner: None },
        ];
        for call in calls {
            let text = serde_json::to_string(&call).unwrap();
            assert_eq!(serde_json::from_str::<TaskCall>(&text).unwrap(), call, "{text}");
        }
        let err = |v: Value| serde_json::from_value::<TaskCall>(v).unwrap_err().to_string();
        assert_eq!(err(json!({"op": "create", "ttl_ms": 1})), "missing field `spec` of op `create`");
        assert_eq!(err(json!({"op": "wait", "server_id": "s"})), "missing field `timeout_ms` of op `wait`");
        assert_eq!(err(json!({"op": "delete", "server_id": "s"})), "unknown op `delete`");
        assert_eq!(err(json!({"server_id": "s"})), "op is null or missing");
        assert_eq!(err(json!({"op": "get", "server_id": 7})), "server_id is not text");
    }

    #[test]
    fn a_task_is_reached_through_its_server_and_by_its_caller() {
        let spec = alices_spec(json!({}));
        let get = |server: &str, owner: Option<&str>| TaskCall::Get {
            server_id: server.into(),
            owner: owner.map(str::to_string),
        };
        assert!(get("s1", None).may_reach(&spec), "a server without client keys: the code is enough");
        assert!(get("s1", Some("alice")).may_reach(&spec));
        assert!(!get("s1", Some("bob")).may_reach(&spec), "another key of the same server");
        assert!(!get("s2", None).may_reach(&spec) && !get("s2", Some("alice")).may_reach(&spec));
        let cancel = TaskCall::Cancel { server_id: "s1".into(), owner: Some("bob".into()) };
        assert!(!cancel.may_reach(&spec));
        // Written by an older Worker (no owner): read as none.
        let old: TaskCall = serde_json::from_value(json!({"op": "cancel", "server_id": "s1"})).unwrap();
        assert_eq!(old.owner(), None);
        assert_eq!(serde_json::to_value(&cancel).unwrap(), json!({"op": "cancel", "server_id": "s1", "owner": "bob"}));
        let create = TaskCall::Create { spec: Box::new(spec.clone()), ttl_ms: 1 };
        assert!(!create.may_reach(&spec));
    }

    #[test]
    fn answers_become_views() {
        let a = TaskAnswer {
            task_id: "t".into(),
            status: McpTaskStatus::Failed,
            status_message: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            ttl_ms: 3,
            poll_interval_ms: 5000,
            result: None,
            error: Some((-32603, "boom".into())),
            was_terminal: false,
        };
        let text = serde_json::to_string(&a).unwrap();
        assert!(text.contains("\"status\":\"failed\""), "{text}");
        assert_eq!(serde_json::from_str::<TaskAnswer>(&text).unwrap(), a);
        let view = a.view();
        assert_eq!(view.status, McpTaskStatus::Failed);
        assert_eq!(view.outcome, Some(TaskOutcome::Error { code: -32603, message: "boom".into() }));
        assert!(a.status.is_terminal() && !McpTaskStatus::InputRequired.is_terminal());
    }

    #[test]
    fn an_answer_error_reads_only_as_code_and_message() {
        let with = |error: Value| {
            let mut v = serde_json::to_value(TaskAnswer {
                task_id: "t".into(),
                status: McpTaskStatus::Working,
                status_message: Some("s".into()),
                created_at_ms: 1,
                updated_at_ms: 2,
                ttl_ms: 3,
                poll_interval_ms: 4,
                result: Some(json!({"content": []})),
                error: None,
                was_terminal: true,
            })
            .unwrap();
            v["error"] = error;
            serde_json::from_value::<TaskAnswer>(v)
        };
        assert_eq!(with(Value::Null).unwrap().error, None);
        assert_eq!(with(json!([-32000, "x"])).unwrap().error, Some((-32000, "x".into())));
        assert_eq!(with(json!([-32000, "x"])).unwrap().result, Some(json!({"content": []})));
        for bad in [json!([1.5, "x"]), json!(["x", 1]), json!([1]), json!([1, "x", 2]), json!("x"), json!({"code": 1})]
        {
            let e = with(bad.clone()).unwrap_err().to_string();
            assert_eq!(e, "error is not [code, message]", "{bad}");
        }
    }
}
