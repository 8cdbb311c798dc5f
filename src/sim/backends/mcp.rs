//! An upstream MCP server over Streamable HTTP (after `tests/support/mcp-upstreams.mjs`):
//! `initialize` (with an `Mcp-Session-Id` when stateful), `tools/list`, `tools/call` of `echo`,
//! `headers` and `slow_progress` (and `ask`, when [`McpUpstream::asks`]), `ping`; answers as JSON or as an event stream (where
//! `slow_progress` sends its progress and log notifications, `delayMs` apart on the clock).
//!
//! Scripted beyond that, each when asked for: `ask` sends the client an `elicitation/create`
//! on the call's stream (`arguments.rounds` of them, one after each answer) and answers with what
//! the client said, once its answer is posted (never, with `arguments.stall`; progress and log
//! messages before each question and the result, with `arguments.notes`)
//! ([`McpUpstream::answers`]); tasks of 2025-11-25 (`long_job`, [`McpUpstream::tasks`]; with a
//! `question`, the task waits for input and its `tasks/result` asks it, related to the task); the
//! legacy HTTP+SSE transport only ([`McpUpstream::legacy`]); bearer tokens checked by the test
//! ([`McpUpstream::require_token`], a 401 challenge otherwise); an outage ([`McpUpstream::down`]);
//! a redirect of every call ([`McpUpstream::redirect_calls`]); a standalone stream per session
//! ([`McpUpstream::standalone`]: a `GET` with the session id keeps one open, and `stream_ask` /
//! `stream_note` send on it what belongs to no request of the client's, as FastMCP sends its
//! `roots/list`); on the legacy transport, a stateful `count` tool ([`McpUpstream::counts`]: 1, 2, … per session),
//! streams the upstream ends or forgets ([`McpUpstream::end_streams`],
//! [`McpUpstream::forget_streams`]), and messages of its own on every open stream
//! ([`McpUpstream::send_on_streams`]); a tool offered only to clients that declared sampling, as
//! the reference server does ([`McpUpstream::per_client`]); resources with subscriptions
//! ([`McpUpstream::resources`]), whose updates and list changes go out on the standalone streams
//! ([`McpUpstream::send_on_standalone`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde_json::{json, Value};

use crate::runtime::Method;
use crate::sim::network::{Backend, BackendRequest, BodyEnd, Feed, Reply};

/// The `_meta` key that ties a message to a task (2025-11-25).
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The challenge of a request without a token the test's check accepts.
pub const CHALLENGE: &str = "Bearer error=\"invalid_token\", error_description=\"the access token is not valid\"";

/// Whether a bearer token is good at a time (the test's, usually the issuer's `accepts`).
type TokenCheck = Box<dyn Fn(&str, u64) -> bool>;

/// A request of the upstream's own waiting for the client's answer.
struct Waiting {
    /// Where the rest of the call goes.
    feed: Rc<Feed>,
    /// The id of the `tools/call` that asked.
    call_id: Value,
    /// The session it was asked on.
    session: Option<String>,
    /// Whether the feed is the call's own stream (closed after the answer), not a legacy one.
    close: bool,
    /// The call's `arguments.rounds`: how many questions it asks in all, one after the other.
    rounds: u64,
    /// The client's answers so far.
    answered: Vec<Value>,
    /// The call's `arguments.stall`: after the last answer the call never ends.
    stall: bool,
    /// The call's `arguments.notes`: before each question and before the result it sends, on the
    /// same stream, its progress (with the call's `progressToken`, when it has one) and a log
    /// message at `info` and one at `debug`. The progress token, if so.
    notes: Option<Option<Value>>,
    /// The upstream's task whose `tasks/result` asked (its answer ends the task).
    task: Option<String>,
}

/// A task of the upstream's: when it ends and what it gives.
struct UpTask {
    done_at_ms: u64,
    ttl: u64,
    result: Value,
    /// `long_job`'s `arguments.question`: the task waits for input (`input_required`) until the
    /// client answers it, which its first `tasks/result` asks, related to the task.
    question: Option<String>,
}

#[derive(Default)]
pub struct McpUpstream {
    /// Sessions: `Mcp-Session-Id` issued at `initialize`, required afterwards.
    pub stateful: bool,
    /// Answers as `text/event-stream` (when the client accepts it).
    pub sse: bool,
    /// Only the 2024-11-05 HTTP+SSE transport: a POST to the URL is 405, a GET opens the event
    /// stream whose `endpoint` event names where messages go, and answers come on that stream.
    pub legacy: bool,
    /// The `endpoint` event's data instead of this server's own message path.
    pub endpoint: Option<String>,
    /// Declares 2025-11-25 tasks for `tools/call`, and lists `long_job` (task support optional).
    pub tasks: bool,
    /// How long a task of `long_job` runs (virtual ms).
    pub task_ms: u64,
    /// Lists `ask` (a test that relays requests turns it on; others see the usual three tools).
    pub asks: Cell<bool>,
    /// A stateful upstream keeps a standalone stream per session (`GET` with its session id;
    /// else a `GET` is 405) and lists `stream_ask` and `stream_note`.
    pub standalone: Cell<bool>,
    /// Lists `count`, which answers how often it was called in the session (legacy transport).
    pub counts: Cell<bool>,
    /// Offers resources (`sim://watched`, `sim://other`) with subscriptions: `resources/subscribe`
    /// and `unsubscribe` are recorded per session ([`McpUpstream::subscribed`]); updates and list
    /// changes go out with [`McpUpstream::send_on_standalone`]. Declares `listChanged` on tools
    /// and resources.
    pub resources: Cell<bool>,
    subscriptions: RefCell<BTreeSet<(String, String)>>,
    counters: RefCell<BTreeMap<String, u64>>,
    /// Lists (and calls) `sample`, and offers prompts (`sampled`), only in sessions whose
    /// `initialize` declared `sampling`.
    pub per_client: Cell<bool>,
    /// Every request answered 503.
    pub down: Cell<bool>,
    /// Every `tools/call` answered with a 307 to this URL.
    pub redirect_calls: RefCell<Option<String>>,
    token_check: RefCell<Option<TokenCheck>>,
    sessions: RefCell<BTreeSet<String>>,
    next_session: Cell<u64>,
    next_request: Cell<u64>,
    waiting: RefCell<BTreeMap<String, Waiting>>,
    legacy_streams: RefCell<BTreeMap<String, Rc<Feed>>>,
    standalone_streams: RefCell<BTreeMap<String, Rc<Feed>>>,
    up_tasks: RefCell<BTreeMap<String, UpTask>>,
    /// Every response a client sent to a request of the upstream's (the message as it came,
    /// and the session it came on).
    pub answers: RefCell<Vec<(Value, Option<String>)>>,
    /// The client capabilities of every `initialize`, in order.
    pub initialized_with: RefCell<Vec<Value>>,
    /// What each session's `initialize` declared (by session id, legacy ones too).
    declared: RefCell<BTreeMap<String, Value>>,
    /// Every request refused for its token (401).
    pub refused: Cell<u32>,
    pub requests: RefCell<Vec<BackendRequest>>,
}

fn rpc_error(status: u16, id: Value, code: i64, message: &str) -> Reply {
    Reply::json(status, &json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id}))
}

/// The tool offered only to clients that declared sampling ([`McpUpstream::per_client`]).
fn sample_tool() -> Value {
    json!({"name": "sample", "description": "Offered to clients that can sample.",
        "inputSchema": {"type": "object", "properties": {}}})
}

fn tools(asks: bool, tasks: bool, standalone: bool, counts: bool) -> Value {
    let mut list = json!([
        {"name": "echo", "title": "Echo", "description": "Echoes its text.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
         "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
         "annotations": {"readOnlyHint": true}},
        {"name": "headers", "description": "The call's HTTP request headers.",
         "inputSchema": {"type": "object", "properties": {}}},
        {"name": "slow_progress", "description": "Sends a progress notification and a log message per step, then \"done <steps>\"",
         "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer", "minimum": 0}, "delayMs": {"type": "number", "minimum": 0}}, "required": ["steps", "delayMs"]}}
    ]);
    if asks {
        if let Some(l) = list.as_array_mut() {
            l.push(json!({"name": "ask", "description": "Asks the client a question (elicitation) and answers with what it said.",
                "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}, "rounds": {"type": "integer", "minimum": 1}, "stall": {"type": "boolean"}, "notes": {"type": "boolean"}}}}));
        }
    }
    if standalone {
        if let Some(l) = list.as_array_mut() {
            l.push(json!({"name": "stream_ask", "description": "Sends a request (`method`, `params`) on the session's standalone stream, related to nothing, and answers with what came back.",
                "inputSchema": {"type": "object", "properties": {"method": {"type": "string"}, "params": {"type": "object"}}, "required": ["method"]}}));
            l.push(json!({"name": "stream_note", "description": "Sends `message` on the session's standalone stream, then answers after `delayMs`.",
                "inputSchema": {"type": "object", "properties": {"message": {"type": "object"}, "delayMs": {"type": "number"}}, "required": ["message"]}}));
        }
    }
    if counts {
        if let Some(l) = list.as_array_mut() {
            l.push(json!({"name": "count", "description": "How often it was called in this session.",
                "inputSchema": {"type": "object", "properties": {}}}));
        }
    }
    if tasks {
        if let Some(l) = list.as_array_mut() {
            l.push(json!({"name": "long_job", "description": "Takes a while; runs as a task when asked.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "question": {"type": "string"}}, "required": ["text"]},
                "execution": {"taskSupport": "optional"}}));
        }
    }
    list
}

fn frame(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

fn task_object(id: &str, t: &UpTask, now_ms: u64) -> Value {
    let status = match (&t.question, now_ms >= t.done_at_ms) {
        (Some(_), _) => "input_required",
        (None, true) => "completed",
        (None, false) => "working",
    };
    json!({"taskId": id, "status": status, "ttl": t.ttl, "pollInterval": 500,
        "createdAt": "2025-01-01T00:00:00Z", "lastUpdatedAt": "2025-01-01T00:00:00Z"})
}

impl McpUpstream {
    pub fn new(stateful: bool, sse: bool) -> McpUpstream {
        McpUpstream { stateful, sse, task_ms: 3_000, ..McpUpstream::default() }
    }

    /// Keeps 2025-11-25 tasks: `long_job` runs `task_ms` as a task when a call asks for one.
    pub fn with_tasks(self, task_ms: u64) -> McpUpstream {
        McpUpstream { tasks: true, task_ms, ..self }
    }

    /// Speaks only the legacy HTTP+SSE transport; its `endpoint` event says `endpoint` when given.
    pub fn legacy_only(self, endpoint: Option<&str>) -> McpUpstream {
        McpUpstream { legacy: true, endpoint: endpoint.map(str::to_string), ..self }
    }

    /// Requires `Authorization: Bearer <token>` with a token `check(token, now_ms)` accepts;
    /// anything else is a 401 with [`CHALLENGE`].
    pub fn require_token(&self, check: impl Fn(&str, u64) -> bool + 'static) {
        *self.token_check.borrow_mut() = Some(Box::new(check));
    }

    /// The tasks it created (the upstream's ids).
    pub fn task_ids(&self) -> Vec<String> {
        self.up_tasks.borrow().keys().cloned().collect()
    }

    /// Whether the session `req` belongs to declared sampling at its `initialize`.
    fn session_samples(&self, req: &BackendRequest) -> bool {
        let legacy = req.path.split_once("sessionId=").map(|(_, s)| s.to_string());
        let Some(sid) = req.headers.get("mcp-session-id").or(legacy) else { return false };
        self.declared.borrow().get(&sid).is_some_and(|c| c.get("sampling").is_some_and(Value::is_object))
    }

    /// Records what an `initialize` of session `sid` declared.
    fn record_initialize(&self, sid: Option<&str>, params: &Value) {
        let caps = params.get("capabilities").cloned().unwrap_or(Value::Null);
        self.initialized_with.borrow_mut().push(caps.clone());
        if let Some(sid) = sid {
            self.declared.borrow_mut().insert(sid.to_string(), caps);
        }
    }

    /// The result of one call, or its JSON-RPC error (code, message).
    fn answer(&self, req: &BackendRequest, method: &str, params: &Value, now_ms: u64) -> Result<Value, (i64, String)> {
        let offers_sample = self.per_client.get() && self.session_samples(req);
        // A subscribable upstream tells its list changes too.
        let mut capabilities = json!({"tools": {"listChanged": self.resources.get()}, "logging": {}});
        if self.resources.get() {
            capabilities["resources"] = json!({"subscribe": true, "listChanged": true});
        }
        if self.tasks {
            capabilities["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        // A client that can sample is offered prompts too (`per_client`).
        if self.per_client.get() && params.pointer("/capabilities/sampling").is_some_and(Value::is_object) {
            capabilities["prompts"] = json!({});
        }
        match method {
            "prompts/list" if offers_sample => {
                Ok(json!({"prompts": [{"name": "sampled", "description": "For clients that sample."}]}))
            }
            "initialize" => Ok(json!({
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-06-18")),
                "capabilities": capabilities,
                "serverInfo": {"name": "sim-upstream", "version": "1.0.0"}
            })),
            "ping" => Ok(json!({})),
            "resources/list" if self.resources.get() => Ok(json!({"resources": [
                {"uri": "sim://watched", "name": "watched", "mimeType": "text/plain"},
                {"uri": "sim://other", "name": "other", "mimeType": "text/plain"}]})),
            "resources/templates/list" if self.resources.get() => Ok(json!({"resourceTemplates": []})),
            "resources/read" if self.resources.get() => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or_default();
                Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": format!("content of {uri}")}]}))
            }
            "resources/subscribe" | "resources/unsubscribe" if self.resources.get() => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or_default().to_string();
                let session = req.headers.get("mcp-session-id").unwrap_or_default();
                if method == "resources/subscribe" {
                    self.subscriptions.borrow_mut().insert((session, uri));
                } else {
                    self.subscriptions.borrow_mut().remove(&(session, uri));
                }
                Ok(json!({}))
            }
            "tools/list" => {
                let mut list = tools(self.asks.get(), self.tasks, self.standalone.get(), self.counts.get());
                if let (true, Some(l)) = (offers_sample, list.as_array_mut()) {
                    l.push(sample_tool());
                }
                Ok(json!({ "tools": list }))
            }
            "tasks/get" | "tasks/result" => {
                let id = params.get("taskId").and_then(Value::as_str).unwrap_or_default();
                let tasks = self.up_tasks.borrow();
                let t = tasks.get(id).ok_or_else(|| (-32602, format!("Task {id} not found")))?;
                Ok(if method == "tasks/get" { task_object(id, t, now_ms) } else { t.result.clone() })
            }
            "tools/call" if self.tasks && params.get("name").and_then(Value::as_str) == Some("long_job") => {
                let text = params["arguments"]["text"].as_str().unwrap_or_default();
                let result = json!({"content": [{"type": "text", "text": format!("done: {text}")}], "structuredContent": {"text": text}});
                let Some(ttl) = params.pointer("/task/ttl").and_then(Value::as_u64) else { return Ok(result) };
                let n = self.next_request.get() + 1;
                self.next_request.set(n);
                let id = format!("up-task-{n}");
                let question = params["arguments"]["question"].as_str().map(str::to_string);
                let done_at_ms = if question.is_some() { u64::MAX } else { now_ms + self.task_ms };
                let t = UpTask { done_at_ms, ttl, result, question };
                let task = task_object(&id, &t, now_ms);
                self.up_tasks.borrow_mut().insert(id, t);
                Ok(json!({ "task": task }))
            }
            "tools/call" => {
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                match params.get("name").and_then(Value::as_str) {
                    Some("echo") => {
                        let text = args.get("text").and_then(Value::as_str).unwrap_or("");
                        Ok(
                            json!({"content": [{"type": "text", "text": format!("echo: {text}")}], "structuredContent": {"text": text}}),
                        )
                    }
                    Some("headers") => {
                        let h: serde_json::Map<String, Value> =
                            req.headers.iter().map(|(n, v)| (n.to_string(), json!(v))).collect();
                        let h = Value::Object(h);
                        Ok(
                            json!({"content": [{"type": "text", "text": h.to_string()}], "structuredContent": {"headers": h}}),
                        )
                    }
                    Some("sample") if offers_sample => {
                        Ok(json!({"content": [{"type": "text", "text": "this session can sample"}]}))
                    }
                    Some("slow_progress") => {
                        let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(0);
                        Ok(json!({"content": [{"type": "text", "text": format!("done {steps}")}]}))
                    }
                    other => Err((-32602, format!("Tool {} not found", other.unwrap_or("")))),
                }
            }
            _ => Err((-32601, "Method not found".into())),
        }
    }
}

/// The notifications `slow_progress` sends before its answer, one step each (progress only
/// with a `progressToken`).
fn notifications(method: &str, params: &Value) -> Vec<String> {
    if method != "tools/call" || params.get("name").and_then(Value::as_str) != Some("slow_progress") {
        return Vec::new();
    }
    let steps = params["arguments"]["steps"].as_u64().unwrap_or(0);
    let token = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
    let mut frames = Vec::new();
    for i in 1..=steps {
        let mut step = Vec::new();
        if let Some(t) = &token {
            step.push(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": t, "progress": i, "total": steps, "message": format!("step {i}/{steps}")}}));
        }
        step.push(json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "slow_progress", "data": format!("step {i}/{steps}")}}));
        frames.push(step.iter().map(|m| format!("event: message\ndata: {m}\n\n")).collect());
    }
    frames
}

impl McpUpstream {
    /// A call of `ask`: the client is asked on `feed`; the call's answer follows once the
    /// client has answered (see [`McpUpstream::take_answer`]).
    fn ask(&self, msg: &Value, feed: &Rc<Feed>, session: Option<String>, close: bool) {
        let call_id = msg.get("id").cloned().unwrap_or(Value::Null);
        let rounds = msg.pointer("/params/arguments/rounds").and_then(Value::as_u64).unwrap_or(1).max(1);
        let stall = msg.pointer("/params/arguments/stall") == Some(&json!(true));
        let notes = (msg.pointer("/params/arguments/notes") == Some(&json!(true)))
            .then(|| msg.pointer("/params/_meta/progressToken").cloned());
        let w = Waiting {
            feed: feed.clone(),
            call_id,
            session,
            close,
            rounds,
            answered: Vec::new(),
            stall,
            notes,
            task: None,
        };
        self.ask_next(msg.pointer("/params/arguments/question").and_then(Value::as_str), w);
    }

    /// What an `ask` call with `notes` sends before its step `step` (a question, or the result).
    fn send_notes(w: &Waiting, step: u64, what: &str) {
        let Some(token) = &w.notes else { return };
        if let Some(t) = token {
            w.feed.push(frame(&json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": t, "progress": step, "message": format!("before {what}")}})));
        }
        for level in ["info", "debug"] {
            w.feed.push(frame(&json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": level, "logger": "ask", "data": format!("{level}: before {what}")}})));
        }
    }

    /// The next question of a call (its `question`, then "Question n?").
    fn ask_next(&self, question: Option<&str>, w: Waiting) {
        let n = self.next_request.get() + 1;
        self.next_request.set(n);
        let id = format!("up-ask-{n}");
        let numbered = format!("Question {}?", w.answered.len() + 1);
        McpUpstream::send_notes(&w, w.answered.len() as u64 + 1, &format!("question {}", w.answered.len() + 1));
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": question.unwrap_or(&numbered),
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}});
        w.feed.push(frame(&request));
        self.waiting.borrow_mut().insert(id, w);
    }

    /// Forgets every session (a restart): each is answered 404 from now on.
    pub fn forget_sessions(&self) {
        self.sessions.borrow_mut().clear();
    }

    /// The standalone stream of `session` while its reader holds it (dropped by the reader:
    /// closed).
    pub fn standalone_stream(&self, session: &str) -> Option<Rc<Feed>> {
        self.standalone_streams.borrow().get(session).filter(|f| Rc::strong_count(f) > 1 && !f.is_closed()).cloned()
    }

    /// The (session, URI) pairs subscribed to now.
    pub fn subscribed(&self) -> Vec<(String, String)> {
        self.subscriptions.borrow().iter().cloned().collect()
    }

    /// Sends `message` on every standalone stream held open now (an update or a list change);
    /// how many it went out on.
    pub fn send_on_standalone(&self, message: &Value) -> usize {
        let streams: Vec<Rc<Feed>> = self
            .standalone_streams
            .borrow()
            .values()
            .filter(|f| Rc::strong_count(f) > 1 && !f.is_closed())
            .cloned()
            .collect();
        for f in &streams {
            f.push(frame(message));
        }
        streams.len()
    }

    /// How many standalone streams are held open by their readers now.
    pub fn standalone_count(&self) -> usize {
        self.standalone_streams.borrow().values().filter(|f| Rc::strong_count(f) > 1 && !f.is_closed()).count()
    }

    /// Whether a standalone stream is held open by its reader now.
    pub fn standalone_open(&self) -> bool {
        self.standalone_streams.borrow().values().any(|f| Rc::strong_count(f) > 1 && !f.is_closed())
    }

    /// A `GET` for a session's standalone stream: opened (the previous one replaced once its
    /// reader let go; 409 while it holds it), or the refusal a Streamable HTTP server gives.
    fn open_standalone(&self, req: &BackendRequest) -> Reply {
        if !req.headers.get("accept").unwrap_or_default().contains("text/event-stream") {
            return rpc_error(406, Value::Null, -32000, "Not Acceptable: Client must accept text/event-stream");
        }
        let Some(session) = req.headers.get("mcp-session-id") else {
            return rpc_error(400, Value::Null, -32000, "Bad Request: No valid session ID provided");
        };
        if !self.sessions.borrow().contains(&session) {
            return rpc_error(404, Value::Null, -32001, "Session not found");
        }
        if self.standalone_stream(&session).is_some() {
            return rpc_error(409, Value::Null, -32000, "Conflict: Only one SSE stream is allowed per session");
        }
        let feed = Rc::new(Feed::default());
        self.standalone_streams.borrow_mut().insert(session, feed.clone());
        Reply::sse(Vec::new(), 0).ending(BodyEnd::Fed(feed))
    }

    /// `stream_ask`: the request goes out on the session's standalone stream; the call answers
    /// once the client (or Flowgate) answered it. No stream: an error result at once.
    fn stream_ask(&self, msg: &Value, session: Option<String>) -> Reply {
        let call_id = msg.get("id").cloned().unwrap_or(Value::Null);
        let Some(stream) = session.as_deref().and_then(|s| self.standalone_stream(s)) else {
            let result =
                json!({"content": [{"type": "text", "text": "no standalone stream to ask on"}], "isError": true});
            return Reply::sse(vec![frame(&json!({"jsonrpc": "2.0", "id": call_id, "result": result}))], 0);
        };
        let n = self.next_request.get() + 1;
        self.next_request.set(n);
        let id = format!("up-stream-{n}");
        let args = msg.pointer("/params/arguments").cloned().unwrap_or(json!({}));
        let mut request = json!({"jsonrpc": "2.0", "id": id, "method": args["method"]});
        if let Some(p) = args.get("params") {
            request["params"] = p.clone();
        }
        stream.push(frame(&request));
        let feed = Rc::new(Feed::default());
        self.waiting.borrow_mut().insert(
            id,
            Waiting {
                feed: feed.clone(),
                call_id,
                session,
                close: true,
                rounds: 1,
                answered: Vec::new(),
                stall: false,
                notes: None,
                task: None,
            },
        );
        Reply::sse(Vec::new(), 0).ending(BodyEnd::Fed(feed))
    }

    /// A `tasks/result` of a task whose question is not yet asked: the question goes out on
    /// this request's stream, related to the task (as the TypeScript SDK delivers a task's
    /// queued requests), and the result follows the client's answer. `None`: nothing to ask.
    fn task_ask(&self, msg: &Value, session: Option<String>) -> Option<Reply> {
        let tid = msg.pointer("/params/taskId").and_then(Value::as_str)?.to_string();
        let question = self.up_tasks.borrow().get(&tid)?.question.clone()?;
        if self.waiting.borrow().values().any(|w| w.task.as_deref() == Some(&tid)) {
            return None;
        }
        let n = self.next_request.get() + 1;
        self.next_request.set(n);
        let id = format!("up-task-ask-{n}");
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": question,
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            "_meta": {(RELATED_TASK): {"taskId": tid}}}});
        let feed = Rc::new(Feed::default());
        feed.push(frame(&request));
        let call_id = msg.get("id").cloned().unwrap_or(Value::Null);
        let w = Waiting {
            feed: feed.clone(),
            call_id,
            session,
            close: true,
            rounds: 1,
            answered: Vec::new(),
            stall: false,
            notes: None,
            task: Some(tid),
        };
        self.waiting.borrow_mut().insert(id, w);
        Some(Reply::sse(Vec::new(), 0).ending(BodyEnd::Fed(feed)))
    }

    /// `stream_note`: `message` goes out on the session's standalone stream (when there is one);
    /// the call answers `delayMs` later.
    fn stream_note(&self, msg: &Value, session: Option<String>) -> Reply {
        let args = msg.pointer("/params/arguments").cloned().unwrap_or(json!({}));
        let sent = session.as_deref().and_then(|s| self.standalone_stream(s)).map(|f| f.push(frame(&args["message"])));
        let text = if sent.is_some() { "sent" } else { "no standalone stream" };
        let answer = json!({"jsonrpc": "2.0", "id": msg.get("id").cloned().unwrap_or(Value::Null),
            "result": {"content": [{"type": "text", "text": text}]}});
        Reply::sse(vec![frame(&answer)], 0).delayed(args["delayMs"].as_u64().unwrap_or(0))
    }

    /// A client's response to one of the upstream's requests: the call that asked answers
    /// with it. `false` when no request of this session waits for it.
    fn take_answer(&self, msg: &Value, session: Option<String>) -> bool {
        self.answers.borrow_mut().push((msg.clone(), session.clone()));
        let key = msg.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        let known = self.waiting.borrow().get(&key).is_some_and(|w| w.session == session);
        let Some(mut w) = known.then(|| self.waiting.borrow_mut().remove(&key)).flatten() else { return false };
        let result = match (msg.get("result"), msg.get("error")) {
            (Some(r), _) if (w.answered.len() as u64) + 1 < w.rounds => {
                w.answered.push(r.clone());
                self.ask_next(None, w);
                return true;
            }
            (Some(_), _) if w.stall => return true,
            (Some(r), _) => {
                w.answered.push(r.clone());
                let all: Vec<String> = w.answered.iter().map(Value::to_string).collect();
                let text = format!("answered: {}", all.join(" then "));
                json!({"content": [{"type": "text", "text": text}], "structuredContent": {"answer": r}})
            }
            (None, e) => {
                json!({"content": [{"type": "text", "text": format!("refused: {}", e.cloned().unwrap_or(Value::Null))}], "isError": true})
            }
        };
        McpUpstream::send_notes(&w, w.answered.len() as u64 + 1, "the result");
        let mut result = result;
        if let Some(t) = w.task.as_ref().and_then(|tid| self.up_tasks.borrow_mut().remove_entry(tid)) {
            // The answer ends the task; its tasks/result gives the result, related to the task.
            let (tid, mut t) = t;
            t.question = None;
            t.done_at_ms = 0;
            t.result = result.clone();
            result["_meta"] = json!({(RELATED_TASK): {"taskId": tid}});
            self.up_tasks.borrow_mut().insert(tid, t);
        }
        w.feed.push(frame(&json!({"jsonrpc": "2.0", "id": w.call_id, "result": result})));
        if w.close {
            w.feed.close();
        }
        true
    }

    /// The legacy sessions whose streams are open.
    pub fn open_streams(&self) -> usize {
        self.legacy_streams.borrow().values().filter(|f| !f.is_closed()).count()
    }

    /// Ends every legacy stream and forgets its session (a restart of the upstream).
    pub fn end_streams(&self) {
        for (_, feed) in std::mem::take(&mut *self.legacy_streams.borrow_mut()) {
            feed.close();
        }
    }

    /// Forgets every legacy session while leaving its stream open: its endpoint answers 404.
    pub fn forget_streams(&self) {
        self.legacy_streams.borrow_mut().clear();
    }

    /// Sends `message` on every open legacy stream (a request or notification of its own).
    pub fn send_on_streams(&self, message: &Value) {
        for feed in self.legacy_streams.borrow().values() {
            feed.push(frame(message));
        }
    }

    /// The legacy transport: the GET opens a session's event stream; a POST to its endpoint
    /// is accepted and answered on that stream.
    fn legacy(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        let path = req.path.split('?').next().unwrap_or("");
        if req.method == Method::Get && path != "/messages" {
            let n = self.next_session.get() + 1;
            self.next_session.set(n);
            let sid = format!("legacy-{n}");
            let feed = Rc::new(Feed::default());
            self.legacy_streams.borrow_mut().insert(sid.clone(), feed.clone());
            let endpoint = self.endpoint.clone().unwrap_or_else(|| format!("/messages?sessionId={sid}"));
            return Reply::sse(vec![format!("event: endpoint\ndata: {endpoint}\n\n")], 0).ending(BodyEnd::Fed(feed));
        }
        if req.method != Method::Post || path != "/messages" {
            return rpc_error(405, Value::Null, -32000, "Method not allowed.").with_header("allow", "GET");
        }
        let sid = req.path.split_once("sessionId=").map(|(_, s)| s.to_string()).unwrap_or_default();
        let Some(feed) = self.legacy_streams.borrow().get(&sid).cloned() else {
            return Reply::new(404, "text/plain", "Session not found");
        };
        let Some(msg) = req.json() else { return Reply::new(400, "text/plain", "Invalid message") };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("").to_string();
        match msg.get("id") {
            Some(_) if method.is_empty() => {
                self.take_answer(&msg, Some(sid));
            }
            Some(_) if method == "tools/call" && msg.pointer("/params/name") == Some(&json!("ask")) => {
                self.ask(&msg, &feed, Some(sid), false);
            }
            Some(id) if method == "tools/call" && msg.pointer("/params/name") == Some(&json!("count")) => {
                let n = {
                    let mut counters = self.counters.borrow_mut();
                    let n = counters.entry(sid).or_default();
                    *n += 1;
                    *n
                };
                let result = json!({"content": [{"type": "text", "text": format!("count {n}")}]});
                feed.push(frame(&json!({"jsonrpc": "2.0", "id": id, "result": result})));
            }
            Some(id) => {
                let params = msg.get("params").cloned().unwrap_or(json!({}));
                if method == "initialize" {
                    self.record_initialize(Some(&sid), &params);
                }
                // `slow_progress`'s notifications come on the stream before its answer.
                for f in notifications(&method, &params) {
                    feed.push(f);
                }
                let answer = match self.answer(req, &method, &params, now_ms) {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err((code, message)) => {
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                    }
                };
                feed.push(frame(&answer));
            }
            None => {}
        }
        Reply::new(202, "text/plain", "Accepted")
    }
}

impl Backend for McpUpstream {
    fn handle(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        self.requests.borrow_mut().push(req.clone());
        if self.down.get() {
            return rpc_error(503, Value::Null, -32000, "Service Unavailable");
        }
        if let Some(check) = self.token_check.borrow().as_ref() {
            if !req.bearer().is_some_and(|t| check(&t, now_ms)) {
                self.refused.set(self.refused.get() + 1);
                return rpc_error(401, Value::Null, -32001, "Unauthorized").with_header("www-authenticate", CHALLENGE);
            }
        }
        if self.legacy {
            return self.legacy(req, now_ms);
        }
        let session = req.headers.get("mcp-session-id");
        if req.method == Method::Delete && self.stateful {
            let known = session.is_some_and(|s| self.sessions.borrow_mut().remove(&s));
            return if known {
                Reply::new(200, "", Vec::new())
            } else {
                rpc_error(404, Value::Null, -32001, "Session not found")
            };
        }
        if req.method == Method::Get && self.stateful && self.standalone.get() {
            return self.open_standalone(req);
        }
        if req.method != Method::Post {
            return rpc_error(405, Value::Null, -32000, "Method not allowed.").with_header("allow", "POST, DELETE");
        }
        let accept = req.headers.get("accept").unwrap_or_default();
        if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
            return rpc_error(
                406,
                Value::Null,
                -32000,
                "Not Acceptable: Client must accept both application/json and text/event-stream",
            );
        }
        let Some(msg) = req.json() else { return rpc_error(400, Value::Null, -32700, "Parse error") };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("").to_string();
        let id = msg.get("id").cloned();
        let mut new_session = None;
        if self.stateful {
            if method == "initialize" {
                let n = self.next_session.get() + 1;
                self.next_session.set(n);
                let sid = format!("sim-session-{n}");
                self.sessions.borrow_mut().insert(sid.clone());
                new_session = Some(sid);
            } else {
                match &session {
                    None => return rpc_error(400, Value::Null, -32000, "Bad Request: No valid session ID provided"),
                    Some(s) if !self.sessions.borrow().contains(s) => {
                        return rpc_error(404, Value::Null, -32001, "Session not found")
                    }
                    Some(_) => {}
                }
            }
        }
        // A response to one of the upstream's own requests: the call that asked goes on.
        if id.is_some() && method.is_empty() {
            return if self.take_answer(&msg, session) {
                Reply::new(202, "", Vec::new())
            } else {
                rpc_error(400, Value::Null, -32600, "No request of this session waits for that answer")
            };
        }
        // A notification from the client: accepted, nothing to answer.
        let Some(id) = id.filter(|_| !method.is_empty()) else { return Reply::new(202, "", Vec::new()) };
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        if method == "initialize" {
            self.record_initialize(new_session.as_deref(), &params);
        }
        if method == "tools/call" {
            if let Some(to) = self.redirect_calls.borrow().as_ref() {
                return Reply::new(307, "", Vec::new()).with_header("location", to);
            }
            match params.get("name").and_then(Value::as_str) {
                Some("stream_ask") if self.standalone.get() => return self.stream_ask(&msg, session),
                Some("stream_note") if self.standalone.get() => return self.stream_note(&msg, session),
                _ => {}
            }
            if params.get("name").and_then(Value::as_str) == Some("ask") {
                let feed = Rc::new(Feed::default());
                self.ask(&msg, &feed, session, true);
                return Reply::sse(Vec::new(), 0).ending(BodyEnd::Fed(feed));
            }
        }
        if method == "tasks/result" {
            if let Some(reply) = self.task_ask(&msg, session.clone()) {
                return reply;
            }
        }
        let answer = match self.answer(req, &method, &params, now_ms) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        };
        // The upstream's own tasks/result blocks until the task ends.
        let wait = match method.as_str() {
            "tasks/result" => {
                let tid = params.get("taskId").and_then(Value::as_str).unwrap_or_default();
                self.up_tasks.borrow().get(tid).map_or(0, |t| t.done_at_ms.saturating_sub(now_ms))
            }
            _ => 0,
        };
        let reply = if self.sse {
            let mut frames = notifications(&method, &params);
            let delay = params["arguments"]["delayMs"].as_u64().unwrap_or(0);
            frames.push(format!("event: message\ndata: {answer}\n\n"));
            // Each notification and the answer `delayMs` apart (the first right away).
            let mut reply = Reply::sse(frames, delay);
            if let Reply::Respond(s) = &mut reply {
                if let Some(first) = s.chunks.first_mut() {
                    first.delay_ms = delay;
                }
            }
            reply
        } else {
            Reply::json(200, &answer)
        };
        let reply = reply.delayed(wait);
        match new_session {
            Some(sid) => reply.with_header("mcp-session-id", &sid),
            None => reply,
        }
    }
}
