//! Tasks of upstream MCP servers, relayed: an upstream tool that runs as a task (2025-11-25
//! `params.task`, or the 2026-07-28 `io.modelcontextprotocol/tasks` extension) is a task through
//! Flowgate too. The upstream keeps the task; Flowgate keeps nothing. The client gets the task
//! under Flowgate's own id, `fg-task.` + AES-256-GCM over {server, app, forwarded-credential
//! scope, the backend user, the upstream's task id}, so `tasks/*` on any isolate can find the
//! upstream, and a client can neither make up an id nor reach another server's tasks (nor, on a
//! server with client keys, another key's: as with Flowgate's own tasks). Task objects are brought
//! to the 2026-07-28 naming (`ttlMs`, `pollIntervalMs`, inlined `result`/`error`) and rendered
//! from there for the client's revision.

use crate::json;
use serde_json::{Map, Value};

use super::relay;
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::meta;
use crate::pure::protocol::tasks::{self, McpTaskStatus, TaskSupport};
use crate::pure::protocol::version::Version;

/// How the ids of relayed tasks start.
pub const TASK_PREFIX: &str = "fg-task.";
/// Longest relayed task id accepted (a sealed handle with an upstream id of up to 256 bytes).
pub const MAX_TASK_ID: usize = 1024;
/// Longest upstream task id Flowgate relays.
const MAX_UPSTREAM_ID: usize = 256;
/// Fields of a task object, in 2026-07-28 naming; anything else an upstream adds is dropped.
const TASK_FIELDS: [&str; 10] = [
    "taskId",
    "status",
    "statusMessage",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
    "result",
    "error",
    "inputRequests",
];

/// Where a relayed task lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    pub server_id: String,
    pub app_id: String,
    /// The forwarded-credential scope of the call that started it (empty: none).
    pub scope: String,
    /// The backend `user` of the call that started it (a client key's name when the server
    /// authenticates its clients).
    pub user: String,
    pub upstream_id: String,
}

impl Handle {
    /// Whether a request by `owner` (the authenticated caller, if the server has client keys)
    /// may reach this task: the rule of Flowgate's own tasks.
    pub fn belongs_to(&self, owner: Option<&str>) -> bool {
        owner.is_none_or(|o| o == self.user)
    }
}

pub fn is_relayed(task_id: &str) -> bool {
    task_id.starts_with(TASK_PREFIX)
}

pub fn seal_handle(key: &[u8; 32], nonce: [u8; 12], h: &Handle) -> Result<String, String> {
    let text = json!([h.server_id, h.app_id, h.scope, h.user, h.upstream_id]).to_string();
    relay::seal_as(TASK_PREFIX, key, nonce, &text)
}

/// The handle behind a relayed id, if Flowgate sealed it for `server_id`. Anything else (an
/// altered or made-up id, another server's task) is an unknown task, alike.
pub fn open_handle(keys: &[[u8; 32]], token: &str, server_id: &str) -> Option<Handle> {
    let text = relay::open_as(TASK_PREFIX, keys, token)?;
    let v = crate::pure::fields::text_list(serde_json::from_str(&text).ok()?)?;
    let [server, app, scope, user, upstream]: [String; 5] = v.try_into().ok()?;
    (server == server_id).then_some(Handle { server_id: server, app_id: app, scope, user, upstream_id: upstream })
}

/// An upstream tool's own task support (`execution.taskSupport`); absent or unknown is
/// forbidden, as the spec reads a missing field.
pub fn upstream_support(tool: &Value) -> TaskSupport {
    tool.pointer("/execution/taskSupport")
        .and_then(Value::as_str)
        .and_then(TaskSupport::parse)
        .unwrap_or(TaskSupport::Forbidden)
}

/// The task a client asked for on a call of an upstream tool that declares no
/// `execution.taskSupport` (the 2026-07-28 extension lets the server decide per call, and
/// FastMCP lists its tools so): the TTL to ask the upstream with, if the client opted in (the
/// extension in its `_meta`, or a 2025-11-25 `params.task`). Whether the upstream is asked is
/// decided once its capabilities are known ([`ask`]).
pub fn undeclared_opt_in(tool: &Value, version: Version, params: &Map<String, Value>) -> Option<u64> {
    if tool.pointer("/execution/taskSupport").is_some() {
        return None;
    }
    // The upstream keeps this task: the protocol's floor, whatever a test deployment lowered.
    match tasks::decide(version, TaskSupport::Optional, "", params, tasks::MIN_TTL_MS) {
        tasks::Decision::Task { ttl_ms } => Some(ttl_ms),
        _ => None,
    }
}

/// What an upstream `tools/call` carries, once the session shows the upstream's capabilities.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// Ask for a task with this TTL; the upstream answers a task or a plain result.
    Task(u64),
    Plain,
    /// The client asked for a task the tool cannot give (a 2025-11-25 client's `params.task`).
    Refuse(RpcError),
}

/// `task_ttl_ms`: the client's task, if any; `if_offered`: only if the upstream declares the
/// 2026-07-28 tasks extension (the tool declares no task support, [`undeclared_opt_in`]).
pub fn ask(
    task_ttl_ms: Option<u64>,
    if_offered: bool,
    capabilities: Option<&Value>,
    client: Version,
    tool: &str,
) -> Ask {
    let Some(ttl) = task_ttl_ms else { return Ask::Plain };
    let extension = capabilities.and_then(|c| c.get("extensions")).and_then(|e| e.get(tasks::EXTENSION)).is_some();
    if !if_offered || extension {
        return Ask::Task(ttl);
    }
    if client.is_stateless() {
        // A 2026-07-28 client only declared it speaks the extension: a plain call is its answer.
        return Ask::Plain;
    }
    Ask::Refuse(RpcError::new(
        200,
        jsonrpc::METHOD_NOT_FOUND,
        format!(
            "Tool '{tool}' does not support task-augmented calls (neither it nor its upstream declares task support); \
             call it without params.task"
        ),
    ))
}

/// Whether an upstream's capabilities offer tasks for `tools/call` (the 2026-07-28 extension,
/// or 2025-11-25's `tasks.requests.tools.call`).
pub fn offers_tasks(capabilities: &Value) -> bool {
    capabilities.pointer("/extensions").and_then(|e| e.get(tasks::EXTENSION)).is_some()
        || capabilities.pointer("/tasks/requests/tools/call").is_some()
}

/// Asks an upstream of revision `upstream` to run a `tools/call` as a task: the tasks
/// extension in `_meta` (2026-07-28) or `params.task` (2025-11-25).
pub fn ask_for_task(params: &mut Map<String, Value>, upstream: Version, ttl_ms: u64) {
    if upstream.is_stateless() {
        let m = params.entry("_meta").or_insert_with(|| json!({}));
        let caps = &mut m[meta::CLIENT_CAPABILITIES];
        if !caps.is_object() {
            *caps = json!({});
        }
        caps["extensions"][tasks::EXTENSION] = json!({});
    } else if upstream.has_tasks() {
        params.insert("task".into(), json!({ "ttl": ttl_ms }));
    }
}

/// The task an upstream's `tools/call` result created (2026-07-28: a flat result with
/// `resultType: "task"`; 2025-11-25: `{task: {...}}`), if it created one.
pub fn created(result: &Value) -> Option<&Map<String, Value>> {
    match result.get("resultType").and_then(Value::as_str) {
        Some("task") => result.as_object(),
        _ => result.get("task").and_then(Value::as_object).filter(|t| t.get("taskId").is_some()),
    }
}

/// The upstream's id of a task object, if it is one Flowgate can relay.
pub fn upstream_id(task: &Map<String, Value>) -> Result<&str, String> {
    match task.get("taskId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() && id.len() <= MAX_UPSTREAM_ID => Ok(id),
        Some(_) => Err(format!("its task id is empty or longer than {MAX_UPSTREAM_ID} bytes")),
        None => Err("its task has no taskId".into()),
    }
}

/// An upstream's task object (either revision's naming) in 2026-07-28 naming under Flowgate's
/// id; `payload` is the result (`Ok`) or JSON-RPC error (`Err`) a 2025-11-25 upstream gave at
/// `tasks/result`, to be inlined.
pub fn normalize(task: &Map<String, Value>, id: &str, payload: Option<Result<Value, Value>>) -> Map<String, Value> {
    let mut t = Map::new();
    for (k, v) in task {
        let key = match k.as_str() {
            "ttl" => "ttlMs",
            "pollInterval" => "pollIntervalMs",
            k => k,
        };
        if TASK_FIELDS.contains(&key) && !t.contains_key(key) {
            t.insert(key.to_string(), v.clone());
        }
    }
    t.insert("taskId".into(), id.into());
    match payload {
        Some(Ok(r)) => {
            t.insert("result".into(), r);
        }
        Some(Err(e)) => {
            t.insert("error".into(), e);
        }
        None => {}
    }
    if let Some(Value::Object(r)) = t.get_mut("result") {
        // The task id is the envelope's; the upstream's related-task key names its own id.
        if let Some(Value::Object(m)) = r.get_mut("_meta") {
            m.remove(tasks::RELATED_TASK);
            if m.is_empty() {
                r.remove("_meta");
            }
        }
        // A 2025-11-25 upstream reports a tool error as `failed`; 2026-07-28 keeps that for
        // protocol errors.
        if r.get("isError") == Some(&Value::Bool(true)) && status_of(&t) == Some(McpTaskStatus::Failed) {
            t.insert("status".into(), McpTaskStatus::Completed.as_str().into());
        }
    }
    t
}

/// The status an upstream's task reports, read as MCP names them (`None`: none it knows).
fn status_of(task: &Map<String, Value>) -> Option<McpTaskStatus> {
    task.get("status").and_then(Value::as_str).and_then(<McpTaskStatus as crate::pure::named::Named>::from_name)
}

pub fn is_terminal(task: &Map<String, Value>) -> bool {
    status_of(task).is_some_and(McpTaskStatus::is_terminal)
}

/// A normalized task as a client of `version` sees it: the task fields (2025-11-25 naming and
/// status rules when it speaks that revision), with or without what it holds.
fn fields(task: &Map<String, Value>, version: Version, with_payload: bool) -> Map<String, Value> {
    let mut t = Map::new();
    for (k, v) in task {
        let payload = matches!(k.as_str(), "result" | "error" | "inputRequests");
        if payload && !(with_payload && version.is_stateless()) {
            continue;
        }
        let key = match (k.as_str(), version.is_stateless()) {
            ("ttlMs", false) => "ttl",
            ("pollIntervalMs", false) => "pollInterval",
            (k, _) => k,
        };
        t.insert(key.to_string(), v.clone());
    }
    let tool_error = task.get("result").and_then(|r| r.get("isError")) == Some(&Value::Bool(true));
    if !version.is_stateless() && tool_error {
        t.insert("status".into(), McpTaskStatus::Failed.as_str().into());
    }
    t
}

/// The answer to the `tools/call` that created the task.
pub fn create_for_client(task: &Map<String, Value>, version: Version) -> Value {
    let mut t = fields(task, version, false);
    if version.is_stateless() {
        t.insert("resultType".into(), "task".into());
        Value::Object(t)
    } else {
        json!({ "task": t })
    }
}

/// `tasks/get`.
pub fn get_for_client(task: &Map<String, Value>, version: Version) -> Value {
    Value::Object(fields(task, version, true))
}

/// `tasks/cancel`: an empty ack (2026-07-28) or the task as it now is (2025-11-25).
pub fn cancel_for_client(task: Option<&Map<String, Value>>, version: Version) -> Value {
    match task {
        Some(t) if !version.is_stateless() => Value::Object(fields(t, version, false)),
        _ => json!({}),
    }
}

/// `tasks/result` (2025-11-25) of a finished task: the tool's result tagged with the task, or
/// its error.
pub fn payload_for_client(task: &Map<String, Value>) -> Result<Value, RpcError> {
    let id = task.get("taskId").cloned().unwrap_or(Value::Null);
    if let Some(r) = task.get("result") {
        let mut r = r.clone();
        if let Some(o) = r.as_object_mut() {
            o.insert("_meta".into(), json!({ tasks::RELATED_TASK: {"taskId": id} }));
        }
        return Ok(r);
    }
    if let Some(e) = task.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(jsonrpc::INTERNAL_ERROR);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("the task failed");
        return Err(RpcError::new(200, code, message.to_string()));
    }
    let status = task.get("status").and_then(Value::as_str).unwrap_or("unknown");
    Err(RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Invalid params: task {id} is {status} and has no result")))
}

/// A request the upstream sends about one of its tasks (2025-11-25: on the stream of the task's
/// `tasks/result`, tied to the task by the related-task `_meta`), as the client gets it: tied to
/// Flowgate's id `id` of the task instead of the upstream's `upstream_id`; a tie to any other
/// task of the upstream's is left out, since the client knows no id for it.
pub fn related_for_client(request: &Value, upstream_id: &str, id: &str) -> Value {
    let mut r = request.clone();
    if let Some(Value::Object(m)) = r.get_mut("params").and_then(|p| p.get_mut("_meta")) {
        match m.get(tasks::RELATED_TASK).and_then(|t| t.get("taskId")).and_then(Value::as_str) {
            Some(t) if t == upstream_id => {
                m.insert(tasks::RELATED_TASK.into(), json!({ "taskId": id }));
            }
            _ => {
                m.remove(tasks::RELATED_TASK);
            }
        }
    }
    r
}

/// What a `tasks/*` request sends upstream: the method and params the upstream's revision has
/// for `op` (`tasks/update` carries the client's `inputResponses`).
pub fn upstream_request(
    method: &str,
    upstream_id: &str,
    client_params: &Map<String, Value>,
    upstream: Version,
) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("taskId".into(), upstream_id.into());
    if method == "tasks/update" {
        if let Some(r) = client_params.get("inputResponses") {
            p.insert("inputResponses".into(), r.clone());
        }
    }
    if upstream.is_stateless() {
        p.insert("_meta".into(), json!({ meta::CLIENT_CAPABILITIES: {"extensions": {tasks::EXTENSION: {}}} }));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn handles_open_only_for_their_server() {
        let key = [7u8; 32];
        let h = Handle {
            server_id: "s1".into(),
            app_id: "a1".into(),
            scope: "".into(),
            user: "alice".into(),
            upstream_id: "up-9".into(),
        };
        assert!(h.belongs_to(None) && h.belongs_to(Some("alice")) && !h.belongs_to(Some("bob")));
        let id = seal_handle(&key, [1; 12], &h).unwrap();
        assert!(is_relayed(&id) && id.len() < MAX_TASK_ID);
        assert!(!id.contains("up-9"), "the upstream id is not readable");
        assert_eq!(open_handle(&[key], &id, "s1"), Some(h));
        assert_eq!(open_handle(&[key], &id, "s2"), None, "another server's task is unknown");
        assert_eq!(open_handle(&[[8u8; 32]], &id, "s1"), None);
        let mut altered = id.clone();
        altered.pop();
        altered.push(if id.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(open_handle(&[key], &altered, "s1"), None);
        assert_eq!(open_handle(&[key], "fg-task.made-up", "s1"), None);
    }

    #[test]
    fn support_comes_from_the_upstream_tool() {
        assert_eq!(upstream_support(&json!({"execution": {"taskSupport": "required"}})), TaskSupport::Required);
        assert_eq!(upstream_support(&json!({"execution": {"taskSupport": "optional"}})), TaskSupport::Optional);
        assert_eq!(upstream_support(&json!({"execution": {"taskSupport": "sometimes"}})), TaskSupport::Forbidden);
        assert_eq!(upstream_support(&json!({"name": "t"})), TaskSupport::Forbidden);
    }

    #[test]
    fn offered_by_either_revisions_capabilities() {
        assert!(offers_tasks(&json!({"extensions": {(tasks::EXTENSION): {}}})));
        assert!(offers_tasks(&json!({"tasks": {"requests": {"tools": {"call": {}}}}})));
        assert!(!offers_tasks(&json!({"tasks": {"list": {}}, "tools": {}})));
    }

    #[test]
    fn asking_for_a_task_per_upstream_revision() {
        let mut p = obj(json!({"name": "t", "_meta": {(meta::CLIENT_CAPABILITIES): {"sampling": {}}}}));
        ask_for_task(&mut p, Version::V2026_07_28, 60_000);
        assert_eq!(
            p["_meta"][meta::CLIENT_CAPABILITIES],
            json!({"sampling": {}, "extensions": {(tasks::EXTENSION): {}}})
        );
        let mut p = obj(json!({"name": "t"}));
        ask_for_task(&mut p, Version::V2025_11_25, 60_000);
        assert_eq!(p["task"], json!({"ttl": 60_000}));
        let mut p = obj(json!({"name": "t"}));
        ask_for_task(&mut p, Version::V2025_06_18, 60_000);
        assert_eq!(p, obj(json!({"name": "t"})), "an upstream without tasks is asked nothing");
    }

    #[test]
    fn created_tasks_of_either_revision() {
        let flat = json!({"resultType": "task", "taskId": "u1", "status": "working"});
        assert_eq!(created(&flat).and_then(|t| t.get("taskId")), Some(&json!("u1")));
        let nested = json!({"task": {"taskId": "u2", "status": "working"}});
        assert_eq!(created(&nested).and_then(|t| t.get("taskId")), Some(&json!("u2")));
        assert!(created(&json!({"resultType": "complete", "content": []})).is_none());
        assert!(created(&json!({"content": [], "task": "not a task"})).is_none());
        assert!(upstream_id(&obj(json!({"taskId": ""}))).is_err());
        assert!(upstream_id(&obj(json!({"taskId": "x".repeat(300)}))).is_err());
    }

    fn upstream_2025() -> Map<String, Value> {
        obj(json!({"taskId": "u1", "status": "failed", "createdAt": "2026-12-01T00:00:00Z",
                   "lastUpdatedAt": "2026-12-01T00:00:01Z", "ttl": 60000, "pollInterval": 500,
                   "_meta": {"x": 1}, "extra": true}))
    }

    #[test]
    fn normalized_to_2026_naming_under_flowgates_id() {
        let tool_error = json!({"content": [{"type": "text", "text": "no"}], "isError": true,
                                "_meta": {(tasks::RELATED_TASK): {"taskId": "u1"}}});
        let t = normalize(&upstream_2025(), "fg-task.x", Some(Ok(tool_error)));
        assert_eq!(t["taskId"], "fg-task.x");
        assert_eq!((t["ttlMs"].clone(), t["pollIntervalMs"].clone()), (json!(60000), json!(500)));
        assert!(!t.contains_key("ttl") && !t.contains_key("_meta") && !t.contains_key("extra"));
        assert_eq!(t["status"], "completed", "a tool error is completed with isError in 2026 terms");
        assert!(t["result"].get("_meta").is_none(), "no related-task key on the inlined result");
        // And back for a 2025-11-25 client: its names, and a tool error is `failed`.
        let v1 = get_for_client(&t, Version::V2025_11_25);
        assert_eq!((v1["ttl"].clone(), v1["status"].clone()), (json!(60000), json!("failed")));
        assert!(v1.get("result").is_none() && v1.get("ttlMs").is_none());
        let payload = payload_for_client(&t).unwrap();
        assert_eq!(payload["_meta"][tasks::RELATED_TASK]["taskId"], "fg-task.x");
        assert_eq!(payload["isError"], true);
    }

    #[test]
    fn rendered_per_client_revision() {
        let t = normalize(
            &obj(
                json!({"taskId": "u", "status": "input_required", "ttlMs": 1000, "inputRequests": {"k": {"method": "elicitation/create"}}}),
            ),
            "fg-task.y",
            None,
        );
        let created = create_for_client(&t, Version::V2026_07_28);
        assert_eq!(created["resultType"], "task");
        assert!(created.get("inputRequests").is_none(), "a CreateTaskResult carries no payload");
        assert!(get_for_client(&t, Version::V2026_07_28).get("inputRequests").is_some());
        let v1 = create_for_client(&t, Version::V2025_11_25);
        assert_eq!(v1["task"]["taskId"], "fg-task.y");
        assert_eq!(v1["task"]["ttl"], 1000);
        assert_eq!(cancel_for_client(Some(&t), Version::V2026_07_28), json!({}));
        assert_eq!(cancel_for_client(Some(&t), Version::V2025_11_25)["taskId"], "fg-task.y");
        assert!(!is_terminal(&t));
        let err = normalize(
            &obj(json!({"taskId": "u", "status": "failed"})),
            "fg-task.z",
            Some(Err(json!({"code": -32603, "message": "boom"}))),
        );
        assert!(is_terminal(&err));
        assert_eq!(get_for_client(&err, Version::V2026_07_28)["error"]["message"], "boom");
        let e = payload_for_client(&err).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-32603, "boom"));
    }

    #[test]
    fn upstream_requests_carry_only_what_the_upstream_needs() {
        let client =
            obj(json!({"taskId": "fg-task.a", "inputResponses": {"k": {"action": "accept"}}, "_meta": {"secret": 1}}));
        let p = upstream_request("tasks/update", "u1", &client, Version::V2026_07_28);
        assert_eq!(p["taskId"], "u1");
        assert_eq!(p["inputResponses"], client["inputResponses"]);
        assert_eq!(p["_meta"], json!({(meta::CLIENT_CAPABILITIES): {"extensions": {(tasks::EXTENSION): {}}}}));
        let p = upstream_request("tasks/get", "u1", &client, Version::V2025_11_25);
        assert_eq!(p, obj(json!({"taskId": "u1"})));
    }

    #[test]
    fn a_tasks_request_names_flowgates_id_of_the_task() {
        let asked = |task: &str| {
            json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create",
                   "params": {"message": "m", "_meta": {(tasks::RELATED_TASK): {"taskId": task}, "other": 1}}})
        };
        let r = related_for_client(&asked("u1"), "u1", "fg-task.x");
        assert_eq!(r["params"]["_meta"][tasks::RELATED_TASK], json!({"taskId": "fg-task.x"}));
        assert_eq!((r["id"].clone(), r["params"]["_meta"]["other"].clone()), (json!(7), json!(1)));
        let r = related_for_client(&asked("u2"), "u1", "fg-task.x");
        assert!(r["params"]["_meta"].get(tasks::RELATED_TASK).is_none(), "another task's id is not shown: {r}");
        assert!(!r.to_string().contains("u2"));
        let plain = json!({"jsonrpc": "2.0", "id": 8, "method": "roots/list"});
        assert_eq!(related_for_client(&plain, "u1", "fg-task.x"), plain);
    }

    #[test]
    fn an_undeclared_tool_is_asked_for_a_task_only_when_its_upstream_declares_the_extension() {
        use crate::pure::protocol::jsonrpc;
        let ext = json!({"tools": {}, "extensions": {(tasks::EXTENSION): {}}});
        let v2025 = json!({"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}});
        let bare = json!({"tools": {}});
        let (new, old) = (Version::V2026_07_28, Version::V2025_11_25);
        assert_eq!(ask(Some(9), true, Some(&ext), new, "t"), Ask::Task(9));
        assert_eq!(ask(Some(9), true, Some(&ext), old, "t"), Ask::Task(9));
        // Without the extension (a 2025-11-25 upstream reads an undeclared tool as forbidden).
        for caps in [Some(&v2025), Some(&bare), None] {
            assert_eq!(ask(Some(9), true, caps, new, "t"), Ask::Plain);
            assert!(
                matches!(ask(Some(9), true, caps, old, "t"), Ask::Refuse(e) if e.code == jsonrpc::METHOD_NOT_FOUND)
            );
        }
        // A declared task tool is asked regardless; no opt-in, no task.
        assert_eq!(ask(Some(9), false, Some(&bare), new, "t"), Ask::Task(9));
        assert_eq!(ask(None, true, Some(&ext), new, "t"), Ask::Plain);

        // The opt-in of an undeclared tool: the extension (2026-07-28) or params.task (2025-11-25).
        let caps = json!({"extensions": {(tasks::EXTENSION): {}}});
        let opted: Map<String, Value> =
            serde_json::from_value(json!({"_meta": {(meta::CLIENT_CAPABILITIES): caps}})).unwrap();
        let tool = json!({"name": "t"});
        assert_eq!(undeclared_opt_in(&tool, new, &opted), Some(tasks::DEFAULT_TTL_MS));
        assert_eq!(undeclared_opt_in(&tool, new, &Map::new()), None);
        let task: Map<String, Value> = serde_json::from_value(json!({"task": {"ttl": 120_000}})).unwrap();
        assert_eq!(undeclared_opt_in(&tool, old, &task), Some(120_000));
        assert_eq!(undeclared_opt_in(&tool, Version::V2025_06_18, &task), None);
        let declared = json!({"name": "t", "execution": {"taskSupport": "forbidden"}});
        assert_eq!(undeclared_opt_in(&declared, new, &opted), None, "a tool that says forbidden means it");
    }
}
