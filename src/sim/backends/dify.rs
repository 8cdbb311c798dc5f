//! A Dify Service API (after `tests/support/dify-fixture.mjs`): apps by API key; `info`,
//! `parameters`, the run endpoints (`workflows/run`, `chat-messages`, `completion-messages`),
//! blocking or streaming, a workflow run's detail (`GET workflows/run/:id`), and stop calls,
//! as strict as the fixture's: a task this backend issued to the same app, family and user;
//! chat conversations bound to the end user that started them, as Dify binds them.
//! Files as Dify takes them: `POST files/upload` (multipart `file` and `user`, its size
//! limit), file values in `inputs` (file and file-list variables) and a chat's `files`, refused
//! like Dify refuses them (a wrong `type` or `transfer_method`, a `local_file` without an
//! `upload_file_id` of this app); chat answers may carry files (`message_file` events).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::runtime::Method;
use crate::sim::network::{Backend, BackendRequest, BodyEnd, Reply};

/// What a run endpoint does before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    #[default]
    Ok,
    /// 500, text/plain "Internal Server Error".
    Http500,
    /// 400 {"code":"provider_quota_exceeded",...}.
    QuotaError,
    /// 429 with `Retry-After: 7`.
    RateLimited,
    /// Answers after this many virtual ms.
    Slow(u64),
    /// A workflow run that fails (status "failed").
    WorkflowFailed,
}

/// How a streamed answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamEnd {
    #[default]
    Complete,
    /// Closes after the last answer chunk: no finishing events.
    EndEarly,
    /// An `error` event instead of the answer.
    ErrorEvent,
    /// The first event, then silence with the connection open.
    HangAfterFirst,
    /// A frame that is not JSON after the first event.
    Malformed,
}

#[derive(Debug, Clone)]
pub struct App {
    /// workflow, chat, advanced-chat, agent-chat, completion.
    pub mode: String,
    pub name: String,
    pub user_input_form: Value,
    /// Workflow outputs; `None`: `{"echo": <inputs>}`.
    pub outputs: Option<Value>,
    /// Chat and completion answer text (and a workflow's streamed text).
    pub answer: String,
    pub behaviour: Behaviour,
    pub stream_end: StreamEnd,
    /// Virtual ms between streamed events.
    pub event_delay_ms: u64,
    /// The app's `file_upload` feature, as `/parameters` shows it.
    pub file_upload: Value,
    /// Files a chat answer carries: a `message_file` event each when streamed (a blocking
    /// answer has no files, as in Dify).
    pub message_files: Vec<Value>,
    /// Largest upload accepted (Dify: 15 MB by default; 413 `file_too_large` beyond).
    pub upload_limit: usize,
}

/// A file uploaded with `files/upload`.
#[derive(Debug, Clone)]
pub struct Upload {
    pub api_key: String,
    pub user: String,
    pub name: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

impl App {
    pub fn new(mode: &str) -> App {
        App {
            mode: mode.into(),
            name: format!("{mode} app"),
            user_input_form: json!([]),
            outputs: None,
            answer: "Hello from the simulated Dify.".into(),
            behaviour: Behaviour::Ok,
            stream_end: StreamEnd::Complete,
            event_delay_ms: 10,
            file_upload: json!({"image": {"enabled": false}}),
            message_files: Vec::new(),
            upload_limit: 15 << 20,
        }
    }
}

/// A run this backend started: whose, which stop family, its detail, whether it ended.
#[derive(Debug, Clone)]
struct Run {
    api_key: String,
    user: String,
    /// "workflows/tasks", "chat-messages" or "completion-messages".
    family: &'static str,
    run_id: String,
    detail: Value,
    running: bool,
}

#[derive(Default)]
pub struct Dify {
    apps: RefCell<BTreeMap<String, App>>,
    runs: Cell<u64>,
    /// By task id.
    issued: RefCell<BTreeMap<String, Run>>,
    pub requests: RefCell<Vec<BackendRequest>>,
    /// Stop calls accepted: (path, user).
    pub stops: RefCell<Vec<(String, String)>>,
    /// Stop calls refused: (path, status).
    pub stop_refusals: RefCell<Vec<(String, u16)>>,
    /// Uploaded files, by id (`upload-<n>`).
    pub uploads: RefCell<BTreeMap<String, Upload>>,
    /// Chat conversations by id, as Dify keeps them: bound to the app and the end user that
    /// started one.
    pub conversations: RefCell<BTreeMap<String, Conversation>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub api_key: String,
    pub user: String,
    /// The queries of its turns so far.
    pub queries: Vec<String>,
}

/// `8-4-4-4-12` hex digits (Dify refuses any other conversation_id with 400).
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn err(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(status, &json!({"code": code, "message": message, "status": status}))
}

/// `text` in three pieces at character boundaries (fewer when shorter).
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len().clamp(1, 3);
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

impl Dify {
    pub fn add_app(&self, api_key: &str, app: App) {
        self.apps.borrow_mut().insert(api_key.to_string(), app);
    }

    pub fn requests_for(&self, api_key: &str) -> Vec<BackendRequest> {
        self.requests.borrow().iter().filter(|r| r.bearer().as_deref() == Some(api_key)).cloned().collect()
    }

    fn run(&self, api_key: &str, app: &App, route: &str, body: &Value, now_ms: u64) -> Reply {
        let family_ok = match route {
            "workflows/run" => app.mode == "workflow",
            "chat-messages" => matches!(app.mode.as_str(), "chat" | "advanced-chat" | "agent-chat"),
            _ => app.mode == "completion",
        };
        if !family_ok {
            return err(400, "app_unavailable", "App unavailable, please check your app configurations.");
        }
        let mode = body.get("response_mode").and_then(Value::as_str);
        if !matches!(mode, Some("blocking" | "streaming")) {
            return err(400, "invalid_param", "response_mode must be one of 'blocking', 'streaming'");
        }
        if body.get("user").and_then(Value::as_str).is_none_or(str::is_empty) {
            return err(400, "invalid_param", "user is required and must be a non-empty string");
        }
        if !body.get("inputs").is_some_and(Value::is_object) {
            return err(400, "invalid_param", "inputs is required and must be an object");
        }
        if let Err(why) = self.check_files(api_key, app, body) {
            return err(400, "invalid_param", &why);
        }
        let (conversation, turn) = match self.conversation(api_key, route, body) {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let delay = match app.behaviour {
            Behaviour::Http500 => return Reply::new(500, "text/plain", "Internal Server Error"),
            Behaviour::QuotaError => {
                return err(400, "provider_quota_exceeded", "Your quota for the model provider is exhausted.")
            }
            Behaviour::RateLimited => {
                return err(429, "too_many_requests", "Too many requests, please retry later")
                    .with_header("retry-after", "7")
            }
            Behaviour::Slow(ms) => ms,
            _ => 0,
        };
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let (task, run, msg) = (format!("task-{n}"), format!("run-{n}"), format!("msg-{n}"));
        let created = now_ms / 1000;
        let failed = app.behaviour == Behaviour::WorkflowFailed;
        let outputs =
            if failed { json!({}) } else { app.outputs.clone().unwrap_or_else(|| json!({"echo": body["inputs"]})) };
        let status = if failed { "failed" } else { "succeeded" };
        let finished = json!({"id": run, "workflow_id": "wf-1", "status": status, "outputs": outputs,
            "error": if failed { json!("Node LLM failed: model timeout") } else { Value::Null },
            "elapsed_time": 0.123, "total_tokens": if failed { 0 } else { 20 }, "total_steps": 3,
            "created_at": created, "finished_at": created});
        let family = match route {
            "workflows/run" => "workflows/tasks",
            "chat-messages" => "chat-messages",
            _ => "completion-messages",
        };
        let hangs = mode == Some("streaming") && app.stream_end == StreamEnd::HangAfterFirst;
        let mut detail = finished.clone();
        detail["inputs"] = body["inputs"].clone();
        self.issued.borrow_mut().insert(
            task.clone(),
            Run {
                api_key: api_key.to_string(),
                user: body["user"].as_str().unwrap_or("").to_string(),
                family,
                run_id: run.clone(),
                detail,
                running: hangs,
            },
        );
        if mode == Some("blocking") {
            let answer = if app.mode == "workflow" {
                json!({"workflow_run_id": run, "task_id": task, "data": finished})
            } else {
                json!({"event": "message", "task_id": task, "id": msg, "message_id": msg, "conversation_id": conversation,
                    "mode": app.mode, "answer": turn.answer(&app.answer), "metadata": {"usage": {"total_tokens": 20}}, "created_at": created})
            };
            return Reply::json(200, &answer).delayed(delay);
        }
        let text = if app.mode == "workflow" {
            outputs.get("text").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| outputs.to_string())
        } else {
            turn.answer(&app.answer)
        };
        let mut events: Vec<Value> = Vec::new();
        let chunk_event = match app.mode.as_str() {
            "workflow" => "text_chunk",
            "agent-chat" => "agent_message",
            _ => "message",
        };
        let base = if app.mode == "workflow" {
            json!({"task_id": task, "workflow_run_id": run})
        } else {
            json!({"task_id": task, "message_id": msg, "id": msg, "conversation_id": conversation, "created_at": created})
        };
        let with = |mut e: Value, extra: Value| {
            if let (Some(o), Some(x)) = (e.as_object_mut(), extra.as_object()) {
                o.extend(x.clone());
            }
            e
        };
        if matches!(app.mode.as_str(), "workflow" | "advanced-chat") {
            events.push(with(base.clone(), json!({"event": "workflow_started", "data": {"id": run, "workflow_id": "wf-1", "inputs": body["inputs"], "created_at": created}})));
        }
        let answer_at = events.len();
        for p in pieces(&text) {
            let e = if app.mode == "workflow" {
                json!({"event": chunk_event, "data": {"text": p}})
            } else {
                json!({"event": chunk_event, "answer": p})
            };
            events.push(with(base.clone(), e));
        }
        for f in &app.message_files {
            events.push(with(with(base.clone(), json!({"event": "message_file"})), f.clone()));
        }
        let last_answer = events.len();
        if matches!(app.mode.as_str(), "workflow" | "advanced-chat") {
            events.push(with(base.clone(), json!({"event": "workflow_finished", "data": finished})));
        }
        if app.mode != "workflow" {
            events
                .push(with(base.clone(), json!({"event": "message_end", "metadata": {"usage": {"total_tokens": 20}}})));
        }
        let mut frames: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        let mut end = BodyEnd::Complete;
        match app.stream_end {
            StreamEnd::Complete => {}
            StreamEnd::EndEarly => frames.truncate(last_answer),
            StreamEnd::ErrorEvent => {
                frames.truncate(answer_at.max(1));
                let e = with(
                    base,
                    json!({"event": "error", "status": 400, "code": "provider_quota_exceeded", "message": "Your quota for the model provider is exhausted."}),
                );
                frames.push(format!("data: {e}\n\n"));
            }
            StreamEnd::HangAfterFirst => {
                frames.truncate(1);
                end = BodyEnd::Hang;
            }
            StreamEnd::Malformed => frames.insert(1, "data: {not json\n\n".into()),
        }
        Reply::sse(frames, app.event_delay_ms).delayed(delay).ending(end)
    }
}

impl Backend for Dify {
    fn handle(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        self.requests.borrow_mut().push(req.clone());
        let path = req.path.split('?').next().unwrap_or("").trim_end_matches('/').to_string();
        let Some(route) = path.strip_prefix("/v1/") else {
            return err(404, "not_found", "The requested URL was not found on the server.");
        };
        let stop = route.ends_with("/stop");
        let run_route = ["workflows/run", "chat-messages", "completion-messages"].into_iter().find(|r| *r == route);
        let detail = route.strip_prefix("workflows/run/").filter(|id| !id.contains('/'));
        let get_route = matches!(route, "info" | "parameters") || detail.is_some();
        let upload = route == "files/upload";
        if !stop && run_route.is_none() && !get_route && !upload {
            return err(404, "not_found", "The requested URL was not found on the server.");
        }
        let want = if get_route { Method::Get } else { Method::Post };
        if req.method != want {
            return err(405, "method_not_allowed", "The method is not allowed for the requested URL.");
        }
        let key = req.bearer().unwrap_or_default();
        let Some(app) = self.apps.borrow().get(&key).cloned() else {
            return err(401, "unauthorized", "Access token is invalid");
        };
        if let Some(id) = detail {
            return self.run_detail(&key, &app, id);
        }
        if upload {
            return self.upload(&key, &app, req, now_ms);
        }
        match route {
            "info" => {
                return Reply::json(
                    200,
                    &json!({"name": app.name, "description": "", "tags": [], "mode": app.mode, "author_name": "sim"}),
                )
            }
            "parameters" => {
                return Reply::json(
                    200,
                    &json!({"opening_statement": "", "suggested_questions": [], "user_input_form": app.user_input_form,
                        "file_upload": app.file_upload, "system_parameters": {"file_size_limit": 15, "image_file_size_limit": 10}}),
                )
            }
            _ => {}
        }
        let Some(body) = req.json().filter(Value::is_object) else {
            return err(400, "invalid_param", "JSON body required");
        };
        if stop {
            return self.stop(&key, &app, &path, &body);
        }
        self.run(&key, &app, run_route.unwrap_or(""), &body, now_ms)
    }
}

/// The earlier queries of a continued conversation (empty for its first turn).
struct Turn(Vec<String>);

impl Turn {
    /// The app's answer, and in a continued conversation the turns it saw before.
    fn answer(&self, answer: &str) -> String {
        if self.0.is_empty() {
            return answer.to_string();
        }
        let earlier: Vec<String> = self.0.iter().map(|q| format!("{q:?}")).collect();
        format!("{answer} (turn {}; earlier: {})", self.0.len() + 1, earlier.join(", "))
    }
}

impl Dify {
    /// `POST /v1/files/upload`: multipart, a `file` part and a `user` field; 201 with the
    /// upload's record.
    fn upload(&self, api_key: &str, app: &App, req: &BackendRequest, now_ms: u64) -> Reply {
        let content_type = req.headers.get("content-type").unwrap_or_default();
        let Some(boundary) = content_type.strip_prefix("multipart/form-data; boundary=") else {
            return err(415, "unsupported_media_type", "the upload must be multipart/form-data");
        };
        let parts = multipart_parts(&req.bytes, boundary);
        let user = parts.iter().find(|p| p.name == "user").map(|p| String::from_utf8_lossy(&p.bytes).into_owned());
        let Some(file) = parts.iter().find(|p| p.name == "file" && p.filename.is_some()) else {
            return err(400, "no_file_uploaded", "Please upload your file.");
        };
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            return err(400, "invalid_param", "user is required");
        };
        if file.bytes.len() > app.upload_limit {
            return err(413, "file_too_large", "File size exceeded.");
        }
        let mut uploads = self.uploads.borrow_mut();
        let id = format!("upload-{}", uploads.len() + 1);
        let name = file.filename.clone().unwrap_or_default();
        let mime_type = file.content_type.clone();
        uploads.insert(
            id.clone(),
            Upload {
                api_key: api_key.into(),
                user: user.clone(),
                name: name.clone(),
                mime_type: mime_type.clone(),
                bytes: file.bytes.clone(),
            },
        );
        let extension = name.rsplit_once('.').map(|(_, e)| e.to_string()).unwrap_or_default();
        Reply::json(
            201,
            &json!({"id": id, "name": name, "size": file.bytes.len(), "extension": extension, "mime_type": mime_type,
                    "created_by": user, "created_at": now_ms / 1000}),
        )
    }

    /// Dify's checks of the file values of a run: file and file-list inputs of the form, and a
    /// chat's `files` (only when its `file_upload` feature is on).
    fn check_files(&self, api_key: &str, app: &App, body: &Value) -> Result<(), String> {
        for item in app.user_input_form.as_array().into_iter().flatten() {
            let Some((ty, spec)) = item.as_object().and_then(|o| o.iter().next()) else { continue };
            let var = spec["variable"].as_str().unwrap_or("");
            let Some(v) = body["inputs"].get(var).filter(|v| !v.is_null()) else { continue };
            let allowed: Vec<&str> =
                spec["allowed_file_types"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            match (ty.as_str(), v) {
                ("file", Value::Object(_)) => self.check_file(api_key, var, v, &allowed)?,
                ("file-list", Value::Array(list)) => {
                    for f in list {
                        self.check_file(api_key, var, f, &allowed)?;
                    }
                }
                ("file" | "file-list", _) => return Err(format!("{var} in input form must be a file")),
                _ => {}
            }
        }
        if let Some(files) = body.get("files").filter(|f| !f.is_null()) {
            let enabled = app.file_upload.as_object().is_some_and(|o| {
                o.get("enabled") == Some(&json!(true)) || o.values().any(|f| f.get("enabled") == Some(&json!(true)))
            });
            if !enabled {
                return Err("file upload is not enabled for this app".into());
            }
            for f in files.as_array().ok_or("files must be a list")? {
                self.check_file(api_key, "files", f, &[])?;
            }
        }
        Ok(())
    }

    fn check_file(&self, api_key: &str, var: &str, f: &Value, allowed: &[&str]) -> Result<(), String> {
        let ty = f["type"].as_str().unwrap_or("");
        if !["document", "image", "audio", "video", "custom"].contains(&ty) {
            return Err(format!("{var}: invalid file type {ty:?}"));
        }
        if !allowed.is_empty() && !allowed.contains(&ty) {
            return Err(format!("{var}: file type {ty} is not allowed"));
        }
        match f["transfer_method"].as_str() {
            Some("remote_url") if f["url"].as_str().is_some_and(|u| u.starts_with("http")) => Ok(()),
            Some("remote_url") => Err(format!("{var}: invalid url")),
            Some("local_file") => match f["upload_file_id"].as_str() {
                Some(id) if self.uploads.borrow().get(id).is_some_and(|u| u.api_key == api_key) => Ok(()),
                Some(_) => Err(format!("{var}: invalid upload file id")),
                None => Err(format!("{var}: upload_file_id is required for local_file")),
            },
            other => Err(format!("{var}: invalid transfer method {other:?}")),
        }
    }

    /// The conversation a chat run belongs to, as Dify resolves it: none or `""` starts one for
    /// the request's user; an id continues one of the same app and user only, and any other id
    /// (unknown, or another user's) is the same 404.
    fn conversation(&self, api_key: &str, route: &str, body: &Value) -> Result<(String, Turn), Reply> {
        if route != "chat-messages" {
            // A completion message names a conversation no call can continue.
            return Ok(("00000000-0000-4000-9000-000000000000".into(), Turn(Vec::new())));
        }
        let user = body["user"].as_str().unwrap_or("").to_string();
        let query = body["query"].as_str().unwrap_or("").to_string();
        let mut conversations = self.conversations.borrow_mut();
        match body.get("conversation_id") {
            None | Some(Value::Null) => {}
            Some(Value::String(id)) if id.is_empty() => {}
            Some(Value::String(id)) if is_uuid(id) => {
                return match conversations.get_mut(id).filter(|c| c.api_key == api_key && c.user == user) {
                    Some(c) => {
                        let earlier = c.queries.clone();
                        c.queries.push(query);
                        Ok((id.clone(), Turn(earlier)))
                    }
                    None => Err(err(404, "not_found", "Conversation Not Exists.")),
                };
            }
            Some(_) => return Err(err(400, "invalid_param", "conversation_id is not a valid uuid")),
        }
        let id = format!("00000000-0000-4000-8000-{:012x}", conversations.len() + 1);
        conversations.insert(id.clone(), Conversation { api_key: api_key.into(), user, queries: vec![query] });
        Ok((id, Turn(Vec::new())))
    }

    /// `POST /v1/<family>/<task_id>/stop`.
    fn stop(&self, api_key: &str, app: &App, path: &str, body: &Value) -> Reply {
        let Some((family, task)) =
            path.strip_prefix("/v1/").and_then(|r| r.strip_suffix("/stop")).and_then(|r| r.rsplit_once('/'))
        else {
            return err(404, "not_found", "The requested URL was not found on the server.");
        };
        let family_ok = match family {
            "workflows/tasks" => app.mode == "workflow",
            "chat-messages" => matches!(app.mode.as_str(), "chat" | "advanced-chat" | "agent-chat"),
            "completion-messages" => app.mode == "completion",
            _ => return err(404, "not_found", "The requested URL was not found on the server."),
        };
        if !family_ok {
            return err(400, "app_unavailable", "App unavailable, please check your app configurations.");
        }
        let Some(user) = body.get("user").and_then(Value::as_str).filter(|u| !u.is_empty()) else {
            return err(400, "invalid_param", "user is required and must be a non-empty string");
        };
        let mut issued = self.issued.borrow_mut();
        let refusal = match issued.get(task) {
            Some(r) if r.api_key == api_key && r.family == family && r.user == user => None,
            Some(r) if r.api_key == api_key && r.family == family => {
                Some((403, "forbidden", "The task belongs to another user"))
            }
            _ => Some((404, "not_found", "Task not found")),
        };
        if let Some((status, code, message)) = refusal {
            self.stop_refusals.borrow_mut().push((path.to_string(), status));
            return err(status, code, message);
        }
        if let Some(r) = issued.get_mut(task).filter(|r| r.running) {
            r.running = false;
            r.detail["status"] = json!("stopped");
            r.detail["outputs"] = json!({});
        }
        self.stops.borrow_mut().push((path.to_string(), user.to_string()));
        Reply::json(200, &json!({"result": "success"}))
    }

    /// `GET /v1/workflows/run/<run_id>`.
    fn run_detail(&self, api_key: &str, app: &App, run_id: &str) -> Reply {
        if !matches!(app.mode.as_str(), "workflow" | "advanced-chat") {
            return err(400, "app_unavailable", "Only support workflow app.");
        }
        let issued = self.issued.borrow();
        let Some(r) = issued.values().find(|r| r.run_id == run_id && r.api_key == api_key) else {
            return err(404, "not_found", "Workflow run not found.");
        };
        let mut detail = r.detail.clone();
        if r.running {
            detail["status"] = json!("running");
            detail["outputs"] = Value::Null;
            detail["finished_at"] = Value::Null;
        }
        Reply::json(200, &detail)
    }
}

/// One part of a multipart/form-data body.
struct Part {
    name: String,
    filename: Option<String>,
    content_type: String,
    bytes: Vec<u8>,
}

/// The parts of a multipart/form-data body (enough of RFC 7578 for what Flowgate sends).
fn multipart_parts(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(at) = find(rest, delimiter.as_bytes()) {
        rest = &rest[at + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let rest_after_crlf = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let Some(head_end) = find(rest_after_crlf, b"\r\n\r\n") else { break };
        let head = String::from_utf8_lossy(&rest_after_crlf[..head_end]).into_owned();
        let content = &rest_after_crlf[head_end + 4..];
        let Some(end) = find(content, format!("\r\n{delimiter}").as_bytes()) else { break };
        let param = |key: &str| {
            let needle = format!("{key}=\"");
            head.find(&needle).and_then(|i| head[i + needle.len()..].split('"').next().map(str::to_string))
        };
        let content_type = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Type: "))
            .unwrap_or("application/octet-stream")
            .to_string();
        parts.push(Part {
            name: param(" name").unwrap_or_default(),
            filename: param("filename"),
            content_type,
            bytes: content[..end].to_vec(),
        });
        rest = &content[end + 2..];
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
