//! The MCP server: one JSON-RPC message in, one step out (an answer, or a backend call for the
//! shell to make). No IO and no state between requests: any isolate can serve any request.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::backend::config::Backend;
use crate::pure::backend::dify::call as dify_call;
use crate::pure::backend::dify::conversation;
use crate::pure::backend::dify::files::PendingFile;
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::backend::http_tool::call::request_body;
use crate::pure::definition::ServerDefinition;
use crate::pure::ids::sha256_hex;
use crate::pure::quote::plain_or_quoted;

use super::gateway::{self, Answer, Catalogs, Forward, Gateway};
use super::input_required;
use super::relay::{self, Channel, ClientCaps, Closed};
use super::tools::{tools_with, Upstreams};
use super::upstream_tasks;
use crate::pure::protocol::jsonrpc::{self, classify, result_response, Message, RpcError};
use crate::pure::protocol::meta;
use crate::pure::protocol::methods;
use crate::pure::protocol::param_headers;
use crate::pure::protocol::tasks::{self, Decision, TaskSupport};
use crate::pure::protocol::version::Version;

const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The transport facts the protocol needs from the HTTP request.
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestHeaders<'a> {
    pub protocol_version: Option<&'a str>,
    pub mcp_method: Option<&'a str>,
    pub mcp_name: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    /// Who is connecting, as far as the transport can tell without per-client auth: the
    /// client's address (`CF-Connecting-IP`, set by Cloudflare and not forgeable by clients).
    /// Binds cancellation to the connection that made the call.
    pub caller: Option<&'a str>,
    /// Who the server authenticated (a client key's name, `pure::client_auth`): then the
    /// backend `user`, instead of one derived from what the client says about itself.
    pub identity: Option<&'a str>,
    /// What the client declared at `initialize`, from Flowgate's sealed `Mcp-Session-Id`
    /// (`relay::open_session`); `None` without one.
    pub session_caps: Option<ClientCaps>,
    /// The request's headers as (name, value), for the `Mcp-Param-*` ones (SEP-2243): only
    /// upstream MCP tools declare them, so the shell passes them only for servers that have
    /// such apps (empty otherwise).
    pub headers: &'a [(String, String)],
    /// The deployment's floor of a task's TTL when it lowers the protocol's
    /// (`TASK_MIN_TTL_SECONDS`, tests only); `None`: [`tasks::MIN_TTL_MS`].
    pub task_min_ttl_ms: Option<u64>,
}

/// What to do with one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Answer with this HTTP status and JSON-RPC body; `None` is 202 with an empty body.
    Reply { status: u16, body: Option<Value> },
    /// Call the backend, then pass its outcome to [`finish_call`].
    Call(Box<CallPlan>),
    /// The client cancelled a call (`notifications/cancelled`): answer 202 and stop the run
    /// recorded under this key, if any.
    Cancel { key: String },
    /// Start the call as a durable task, then answer with [`task_created`].
    CreateTask { plan: Box<CallPlan>, ttl_ms: u64 },
    /// A `tasks/*` request: look the task up (for this server only), then [`task_response`].
    Task(TaskRequest),
    /// A valid `tools/list` of a server without upstream MCP apps: the answer depends only on
    /// the definition and the revision, so the shell answers it from a list it made once
    /// ([`tools_list_result`]) and keeps with the definition.
    ToolsList { id: Value, version: Version },
    /// A resources, prompts or completion request for the upstream app that owns what it
    /// names: make it, then answer with [`forwarded_response`].
    Forward(Box<Forward>),
    /// The client's answer to a request Flowgate relayed from an upstream: `token` is the id it
    /// answers (a sealed `relay::Ticket`); open it and take the answer to the upstream, if
    /// `user` (the answering client's backend `user`) is the caller it was relayed to.
    Answer { token: String, message: Value, user: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOp {
    Get,
    /// 2025-11-25: wait until the task is terminal, then its payload.
    Result,
    Cancel,
    /// 2026-07-28: input responses for a task (Flowgate's tasks take none; acknowledged).
    Update,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TaskRequest {
    pub id: Value,
    pub version: Version,
    pub op: TaskOp,
    pub task_id: String,
    /// The authenticated caller ([`RequestHeaders::identity`]): the task must be theirs.
    pub owner: Option<String>,
    /// `tasks/update`'s `inputResponses`, for an upstream's task (`upstream_tasks`).
    pub input_responses: Option<Value>,
    /// The backend `user` of the client asking: the caller an upstream's request on a relayed
    /// task's `tasks/result` goes to (as a call's [`CallPlan::user`]).
    pub user: String,
    /// Whether an upstream's requests on a relayed task's `tasks/result` can reach the client.
    pub relay: Channel,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CallPlan {
    pub id: Value,
    pub version: Version,
    pub app_index: usize,
    /// What to send to the backend, typed by its kind: what the call path asks the kind of.
    pub request: CallRequest,
    /// The backend `user`: stable per server and client.
    pub user: String,
    /// How the client named itself, for the end-user record.
    pub client_name: String,
    /// `_meta.progressToken` of the request: progress is reported only when it is given.
    pub progress_token: Option<Value>,
    /// Least severe level of `notifications/message` the client gets (`None`: no log messages).
    pub log_level: Option<&'static str>,
    /// See [`cancel_key`].
    pub cancel_key: String,
    /// Whether an upstream's requests (sampling, elicitation, roots) can reach the client.
    pub relay: Channel,
    /// Files of a Dify call not yet in `request`: the shell judges their URLs and uploads their
    /// data, then places them (`shell::backend::dify::upload`). Empty once placed.
    pub files: Vec<PendingFile>,
}

/// What a call sends to its backend, by backend kind.
#[derive(Debug, Clone, PartialEq)]
pub enum CallRequest {
    /// A Dify Service API call of an app of `mode`: POST `body` to `{base_url}{run_path(mode)}`.
    Dify { mode: DifyMode, body: Value },
    /// An HTTP tool: POST `body` to its endpoint (docs/http-tool-protocol.md).
    HttpTool { body: Value },
    /// An upstream MCP tool, called by its upstream name with the client's arguments.
    /// `input`: the client's round-trip params for the upstream (`input_required::client_params`).
    /// `params`: the `Mcp-Param-*` headers the call carries to a 2026-07-28 upstream
    /// (`param_headers::outgoing`; empty for most tools).
    /// `task_ttl_ms`: the client asked for a task, so the upstream is asked to run one
    /// (`upstream_tasks`); it keeps the task and Flowgate relays it. `task_if_offered`: only if
    /// the upstream declares the tasks extension (a tool without `execution.taskSupport`,
    /// `upstream_tasks::ask`).
    Mcp {
        tool: String,
        arguments: Value,
        input: Map<String, Value>,
        params: Vec<(String, String)>,
        task_ttl_ms: Option<u64>,
        task_if_offered: bool,
    },
}

impl CallRequest {
    /// The path after the backend's base URL (empty: the endpoint itself).
    pub fn path(&self) -> &'static str {
        match self {
            CallRequest::Dify { mode, .. } => dify_call::run_path(*mode),
            _ => "",
        }
    }

    /// The JSON body of an HTTP request to the backend (not for MCP, which speaks JSON-RPC).
    pub fn http_body(&self) -> Option<&Value> {
        match self {
            CallRequest::Dify { body, .. } | CallRequest::HttpTool { body } => Some(body),
            CallRequest::Mcp { .. } => None,
        }
    }

    /// The body of the same call made as a stream (Dify is asked for SSE in the body; an HTTP
    /// tool streams or not by its settings). Not for MCP.
    pub fn streaming_body(&self) -> Option<Value> {
        match self {
            CallRequest::Dify { body, .. } => {
                let mut body = body.clone();
                body["response_mode"] = "streaming".into();
                Some(body)
            }
            CallRequest::HttpTool { body } => Some(body.clone()),
            CallRequest::Mcp { .. } => None,
        }
    }

    /// The (path, body) a durable task stores, read back by [`CallRequest::from_stored`].
    pub fn to_stored(&self) -> (String, Value) {
        match self {
            CallRequest::Dify { mode, body } => (dify_call::run_path(*mode).to_string(), body.clone()),
            CallRequest::HttpTool { body } => (String::new(), body.clone()),
            CallRequest::Mcp { tool, arguments, .. } => (String::new(), json!({"name": tool, "arguments": arguments})),
        }
    }

    /// A stored task's request to `backend` (the task's snapshot of its app); `None` when what
    /// is stored does not fit that backend.
    pub fn from_stored(backend: &Backend, path: &str, body: &Value) -> Option<CallRequest> {
        match backend {
            Backend::Mcp(_) => Some(CallRequest::Mcp {
                tool: body.get("name")?.as_str()?.to_string(),
                arguments: body.get("arguments").cloned().unwrap_or(Value::Object(Map::new())),
                input: Map::new(),
                params: Vec::new(),
                task_ttl_ms: None,
                task_if_offered: false,
            }),
            Backend::HttpTool(_) => Some(CallRequest::HttpTool { body: body.clone() }),
            Backend::Dify(c) => (path == dify_call::run_path(c.app_mode))
                .then(|| CallRequest::Dify { mode: c.app_mode, body: body.clone() }),
        }
    }
}

fn reply(status: u16, body: Value) -> Step {
    Step::Reply { status, body: Some(body) }
}

fn error_step(id: &Value, e: RpcError) -> Step {
    reply(e.status, e.to_response(id))
}

/// Handles one JSON-RPC message (a batch is split by the caller, see [`batch_allowed`]).
pub fn handle(def: &ServerDefinition, msg: &Value, h: &RequestHeaders<'_>, server_version: &str) -> Step {
    match handle_with(def, &Upstreams::default(), msg, h, server_version) {
        Step::ToolsList { id, version } => {
            reply(200, result_response(&id, tools_list_result(def, &Upstreams::default(), version, server_version)))
        }
        step => step,
    }
}

/// The `result` of a `tools/list` as a client of `version` gets it.
pub fn tools_list_result(
    def: &ServerDefinition,
    upstreams: &Upstreams,
    version: Version,
    server_version: &str,
) -> Value {
    let list: Vec<Value> = tools_with(def, upstreams).iter().map(|t| t.to_json(def, version)).collect();
    shape_result(json!({ "tools": list }), methods::TOOLS_LIST, version, server_version)
}

/// [`handle`] for a server whose upstream MCP apps' tool lists are known.
pub fn handle_with(
    def: &ServerDefinition,
    upstreams: &Upstreams,
    msg: &Value,
    h: &RequestHeaders<'_>,
    server_version: &str,
) -> Step {
    handle_full(def, upstreams, &Catalogs::default(), msg, h, server_version)
}

/// [`handle_with`] for a server whose upstream MCP apps' catalogs (resources, templates,
/// prompts, capabilities) are known too.
pub fn handle_full(
    def: &ServerDefinition,
    upstreams: &Upstreams,
    catalogs: &Catalogs,
    msg: &Value,
    h: &RequestHeaders<'_>,
    server_version: &str,
) -> Step {
    let (id, method, params) = match classify(msg) {
        Err((id, e)) => return error_step(&id, e),
        Ok(Message::Notification { method: methods::CANCELLED, params: Some(p) }) => {
            return match p.get("requestId").filter(|r| r.is_string() || r.is_number()) {
                Some(request_id) => {
                    Step::Cancel { key: cancel_key(def, &end_user(def, &client_name(p, h), h), h.caller, request_id) }
                }
                None => Step::Reply { status: 202, body: None },
            };
        }
        Ok(Message::Response) => {
            // An answer to a request Flowgate relayed; any other response answers nothing it
            // asked, and is dropped.
            return match msg.get("id").and_then(Value::as_str).filter(|i| i.starts_with(relay::TICKET_PREFIX)) {
                Some(token) => Step::Answer {
                    token: token.to_string(),
                    message: msg.clone(),
                    user: end_user(def, &client_name(&Map::new(), h), h),
                },
                None => Step::Reply { status: 202, body: None },
            };
        }
        Ok(Message::Notification { .. }) => return Step::Reply { status: 202, body: None },
        Ok(Message::Request { id, method, params }) => (id, method, params),
    };
    let version = match resolve_version(method, params, h) {
        Ok(v) => v,
        Err(e) => return error_step(id, e),
    };
    let empty = Map::new();
    let params = params.unwrap_or(&empty);
    let result = match method {
        methods::INITIALIZE if version.has_initialize() => {
            Ok(initialize(def, catalogs, params, version, server_version))
        }
        methods::PING if version.has_ping_and_logging() => Ok(json!({})),
        methods::SET_LEVEL if version.has_ping_and_logging() => set_level(params),
        methods::DISCOVER if version.is_stateless() => Ok(discover(def, catalogs, server_version)),
        methods::TOOLS_LIST => match check_list_cursor(params) {
            Err(e) => Err(e),
            Ok(()) if def.apps.iter().any(|a| a.backend.as_mcp().is_some()) => {
                let list: Vec<Value> = tools_with(def, upstreams).iter().map(|t| t.to_json(def, version)).collect();
                Ok(json!({ "tools": list }))
            }
            Ok(()) => return Step::ToolsList { id: id.clone(), version },
        },
        methods::TOOLS_CALL => return call_tool(def, upstreams, id, params, version, h, server_version),
        m if gateway::METHODS.contains(&m) => match Gateway::new(def, catalogs).answer(id, m, params, version) {
            // Updates go on the session's stream: no session, nothing to deliver them on.
            Ok(Answer::Forward(f))
                if f.method.starts_with("resources/")
                    && f.method.ends_with("subscribe")
                    && h.session_caps.is_none() =>
            {
                Err(crate::pure::mcp::client_session::no_stream(
                    m,
                    version,
                    crate::pure::mcp::client_session::NoStream::NoSession,
                ))
            }
            Ok(Answer::Forward(mut f)) => {
                f.user = end_user(def, &client_name(params, h), h);
                return Step::Forward(f);
            }
            Ok(Answer::Result(r)) => Ok(r),
            Err(e) => Err(e),
        },
        "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/update" | "tasks/list" => {
            return match task_request(id, method, params, version, h.identity) {
                Ok(mut req) => {
                    req.user = end_user(def, &client_name(params, h), h);
                    req.relay = relay_channel(version, h);
                    Step::Task(req)
                }
                Err(e) => error_step(id, e),
            };
        }
        _ => Err(RpcError::new(
            version.method_not_found_status(),
            jsonrpc::METHOD_NOT_FOUND,
            format!(
                "Method not found: {} (this server offers tools: tools/list and tools/call; resources, prompts \
                 and completions when an upstream MCP app offers them)",
                plain_or_quoted(method)
            ),
        )),
    };
    match result {
        Ok(r) => reply(200, result_response(id, shape_result(r, method, version, server_version))),
        Err(e) => error_step(id, e),
    }
}

/// Most messages one JSON-RPC batch may carry: each item is counted by the rate limit, and a
/// batch of thousands would otherwise be one request's worth of work many times over.
pub const MAX_BATCH_ITEMS: usize = 32;

/// Whether a JSON-RPC batch of `len` messages may be sent by a client speaking the header's
/// revision.
pub fn batch_allowed(h: &RequestHeaders<'_>, len: usize) -> Result<(), RpcError> {
    let v = h.protocol_version.and_then(Version::parse).unwrap_or(Version::DEFAULT);
    if !v.allows_batches() {
        Err(RpcError::new(
            400,
            jsonrpc::INVALID_REQUEST,
            format!(
                "Invalid request: JSON-RPC batches are not part of protocol {}; send one message per request",
                v.as_str()
            ),
        ))
    } else if len == 0 {
        Err(RpcError::new(400, jsonrpc::INVALID_REQUEST, "Invalid request: an empty JSON-RPC batch"))
    } else if len > MAX_BATCH_ITEMS {
        Err(RpcError::new(
            400,
            jsonrpc::INVALID_REQUEST,
            format!(
                "Invalid request: a JSON-RPC batch may carry at most {MAX_BATCH_ITEMS} messages (this one has {len}); \
                 split it into several requests"
            ),
        ))
    } else {
        Ok(())
    }
}

/// The revision a request speaks: `initialize` negotiates in its body; stateless (2026-07-28)
/// requests carry it in `_meta` and must repeat it, and the method, in headers; everything
/// else uses `MCP-Protocol-Version` (absent: 2025-03-26).
fn resolve_version(
    method: &str,
    params: Option<&Map<String, Value>>,
    h: &RequestHeaders<'_>,
) -> Result<Version, RpcError> {
    let meta_version = params.and_then(|p| p.get("_meta")).and_then(|m| m.get(meta::PROTOCOL_VERSION));
    let Some(meta_version) = meta_version else {
        if method == methods::INITIALIZE {
            return Ok(Version::negotiate(params.and_then(|p| p.get("protocolVersion")).and_then(Value::as_str)));
        }
        return match h.protocol_version.map(|s| (s, Version::parse(s))) {
            None => Ok(Version::DEFAULT),
            Some((_, Some(v))) if v.is_stateless() => Err(RpcError::new(
                400,
                jsonrpc::INVALID_PARAMS,
                format!(
                    "Invalid params: protocol {} requests must carry params._meta[\"{}\"]",
                    v.as_str(),
                    meta::PROTOCOL_VERSION
                ),
            )),
            Some((_, Some(v))) => Ok(v),
            Some((s, None)) => Err(unsupported(s, jsonrpc::INVALID_REQUEST)),
        };
    };
    let Some(requested) = meta_version.as_str() else {
        return Err(RpcError::new(
            400,
            jsonrpc::INVALID_PARAMS,
            format!("Invalid params: _meta[\"{}\"] must be a string", meta::PROTOCOL_VERSION),
        ));
    };
    if params.and_then(|p| p.get("_meta")).and_then(|m| m.get(meta::CLIENT_CAPABILITIES)).is_none_or(|c| !c.is_object())
    {
        return Err(RpcError::new(
            400,
            jsonrpc::INVALID_PARAMS,
            format!(
                "Invalid params: stateless requests must carry _meta[\"{}\"] (an object, {{}} for none)",
                meta::CLIENT_CAPABILITIES
            ),
        ));
    }
    match h.protocol_version {
        None => {
            return Err(mismatch(format!(
                "the MCP-Protocol-Version header is required and must be {}",
                plain_or_quoted(requested)
            )))
        }
        Some(hv) if hv != requested => {
            let what = format!(
                "the MCP-Protocol-Version header ({}) does not match _meta[\"{}\"]",
                plain_or_quoted(hv),
                meta::PROTOCOL_VERSION
            );
            return Err(mismatch(format!("{what} ({})", plain_or_quoted(requested))));
        }
        Some(_) => {}
    }
    let version = match Version::parse(requested) {
        Some(v) if v.is_stateless() => v,
        _ => return Err(unsupported(requested, jsonrpc::UNSUPPORTED_PROTOCOL_VERSION)),
    };
    match h.mcp_method {
        None => return Err(mismatch(format!("the Mcp-Method header is required (expected {method})"))),
        Some(m) if m != method => {
            return Err(mismatch(format!(
                "the Mcp-Method header ({}) does not match the body's method ({})",
                plain_or_quoted(m),
                plain_or_quoted(method)
            )))
        }
        Some(_) => {}
    }
    // SEP-2243: the request's name (tool, prompt, resource URI) repeated in `Mcp-Name`; SEP-2663:
    // a task's id for the task methods. Encoded as `Mcp-Param-*` values are.
    let name_key = match method {
        methods::TOOLS_CALL | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(key) = name_key {
        let name = params.and_then(|p| p.get(key)).and_then(Value::as_str);
        match (h.mcp_name.map(|hn| param_headers::decode_value(hn.trim())), name) {
            (Some(Err(why)), Some(_)) => return Err(mismatch(format!("the Mcp-Name header is invalid: {why}"))),
            (Some(Ok(hn)), Some(n)) if hn != n => {
                return Err(mismatch(format!(
                    "the Mcp-Name header ({}) does not match params.{key} ({})",
                    plain_or_quoted(&hn),
                    plain_or_quoted(n)
                )))
            }
            (None, Some(n)) => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required for {method} (expected {})",
                    plain_or_quoted(n)
                )))
            }
            _ => {}
        }
    }
    Ok(version)
}

fn mismatch(message: String) -> RpcError {
    RpcError::new(400, jsonrpc::HEADER_MISMATCH, format!("Header mismatch: {message}"))
}

fn unsupported(requested: &str, code: i64) -> RpcError {
    let supported: Vec<&str> = Version::all_strs().collect();
    // The spec's data names what was requested; a bounded slice of it is enough.
    let shown: String = requested.chars().take(crate::pure::quote::MAX_QUOTED_CHARS).collect();
    RpcError::new(
        400,
        code,
        format!(
            "Unsupported MCP-Protocol-Version: {} (supported: {})",
            plain_or_quoted(requested),
            supported.join(", ")
        ),
    )
    .with_data(json!({"supported": supported, "requested": shown}))
}

fn server_info(server_version: &str, def: &ServerDefinition, version: Version) -> Value {
    let mut info = json!({"name": "Flowgate", "version": server_version});
    if version.structured_output() {
        // `title` (2025-06-18) lets clients show the server's own name.
        info["title"] = def.name.clone().into();
    }
    info
}

fn capabilities(def: &ServerDefinition, catalogs: &Catalogs, version: Version) -> Value {
    let mut c = if version.has_ping_and_logging() {
        json!({"tools": {"listChanged": false}, "logging": {}})
    } else {
        json!({"tools": {"listChanged": false}})
    };
    // Tasks are advertised only where a tool of this server can run as one.
    let toolsets =
        |a: &crate::pure::definition::AppDefinition| a.backend.as_mcp().is_some_and(|m| !m.task_toolsets.is_empty());
    let upstream_tasks = catalogs.0.values().any(|c| upstream_tasks::offers_tasks(&c.capabilities));
    if upstream_tasks || def.apps.iter().any(|a| a.backend.task_support() != TaskSupport::Forbidden || toolsets(a)) {
        if version.is_stateless() {
            c["extensions"] = json!({ tasks::EXTENSION: {} });
        } else if version.has_tasks() {
            c["tasks"] = json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
        }
    }
    if !catalogs.0.is_empty() {
        Gateway::new(def, catalogs).add_capabilities(&mut c, version);
    }
    c
}

fn initialize(
    def: &ServerDefinition,
    catalogs: &Catalogs,
    _params: &Map<String, Value>,
    version: Version,
    server_version: &str,
) -> Value {
    let mut r = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities(def, catalogs, version),
        "serverInfo": server_info(server_version, def, version),
    });
    if !def.description.trim().is_empty() {
        r["instructions"] = def.description.clone().into();
    }
    r
}

fn discover(def: &ServerDefinition, catalogs: &Catalogs, _server_version: &str) -> Value {
    let mut r = json!({
        "supportedVersions": Version::all_strs().collect::<Vec<_>>(),
        "capabilities": capabilities(def, catalogs, Version::V2026_07_28),
    });
    if !def.description.trim().is_empty() {
        r["instructions"] = def.description.clone().into();
    }
    r
}

fn set_level(params: &Map<String, Value>) -> Result<Value, RpcError> {
    match params.get("level").and_then(Value::as_str) {
        Some(l) if LOG_LEVELS.contains(&l) => Ok(json!({})),
        _ => Err(RpcError::new(
            200,
            jsonrpc::INVALID_PARAMS,
            format!("Invalid params: `level` must be one of {}", LOG_LEVELS.join(", ")),
        )),
    }
}

/// Every tool fits on the first page, so no cursor was ever handed out.
fn check_list_cursor(params: &Map<String, Value>) -> Result<(), RpcError> {
    if params.get("cursor").is_some_and(|c| !c.is_null()) {
        return Err(RpcError::new(
            200,
            jsonrpc::INVALID_PARAMS,
            "Invalid params: unknown cursor (the tool list has one page)",
        ));
    }
    Ok(())
}

/// Adds what a revision requires on every result: 2026-07-28 wants `resultType`, serverInfo
/// in `_meta`, and cache hints on list and discover results.
fn shape_result(mut r: Value, method: &str, version: Version, server_version: &str) -> Value {
    if version.is_stateless() {
        if r.get("resultType").is_none() {
            r["resultType"] = "complete".into();
        }
        // A conversation's id stays beside the server's info (`conversation::show`).
        let conversation = r.pointer(&format!("/_meta/{}", conversation::META_KEY)).cloned();
        r["_meta"] = json!({ meta::SERVER_INFO: {"name": "Flowgate", "version": server_version} });
        if let Some(id) = conversation {
            r["_meta"][conversation::META_KEY] = id;
        }
        if matches!(
            method,
            methods::TOOLS_LIST
                | methods::DISCOVER
                | "resources/list"
                | "resources/templates/list"
                | "resources/read"
                | "prompts/list"
                | "skills/list"
                | "skills/get"
        ) {
            // The list is per server code, which is a secret: private, and not cached so that
            // console edits show at once.
            r["ttlMs"] = 0.into();
            r["cacheScope"] = "private".into();
        }
    }
    r
}

fn call_tool(
    def: &ServerDefinition,
    upstreams: &Upstreams,
    id: &Value,
    params: &Map<String, Value>,
    version: Version,
    h: &RequestHeaders<'_>,
    server_version: &str,
) -> Step {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return error_step(
            id,
            RpcError::new(200, jsonrpc::INVALID_PARAMS, "Invalid params: tools/call needs `name`, the tool to call"),
        );
    };
    let args = match params.get("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => Some(a),
        Some(_) => {
            return error_step(
                id,
                RpcError::new(200, jsonrpc::INVALID_PARAMS, "Invalid params: `arguments` must be an object"),
            )
        }
    };
    let all = tools_with(def, upstreams);
    let Some(tool) = all.iter().find(|t| t.name == name) else {
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        return error_step(
            id,
            RpcError::new(
                200,
                jsonrpc::INVALID_PARAMS,
                format!("Unknown tool: '{}'. This server has: {}", plain_or_quoted(name), names.join(", ")),
            ),
        );
    };
    // SEP-2243: the arguments the upstream tool mirrors into headers must be repeated in them.
    let declared = tool.upstream.as_ref().map_or(&[][..], |e| e.params.as_slice());
    if version.is_stateless() && !declared.is_empty() {
        if let Err(why) = param_headers::check(declared, args, h.headers) {
            return error_step(id, mismatch(why));
        }
    }
    // The app's place in the server (an upstream app stands for several tools).
    let app_index = def.apps.iter().position(|a| a.id == tool.app.id).unwrap_or(0);
    let (files, file_problems) = match tool.check_files(args) {
        Ok(files) => (files, Vec::new()),
        Err(problems) => (Vec::new(), problems),
    };
    let checked = tool.check_arguments(args).and_then(|(inputs, query)| {
        let conversation = tool.conversation(args).map_err(|problem| vec![problem])?;
        Ok((inputs, query, conversation))
    });
    let (inputs, query, conversation) = match checked {
        Ok(x) if file_problems.is_empty() => x,
        checked => {
            let problems: Vec<String> = checked.err().unwrap_or_default().into_iter().chain(file_problems).collect();
            let message = format!("Invalid arguments for tool '{name}': {}", problems.join("; "));
            return if version.argument_errors_as_tool_results() {
                reply(
                    200,
                    result_response(
                        id,
                        shape_result(tool_error(&message), methods::TOOLS_CALL, version, server_version),
                    ),
                )
            } else {
                error_step(id, RpcError::new(200, jsonrpc::INVALID_PARAMS, message))
            };
        }
    };
    let client_name = client_name(params, h);
    let user = end_user(def, &client_name, h);
    let mut request = match (&tool.upstream, &tool.app.backend) {
        // An upstream MCP tool is called by its upstream name with the arguments as sent.
        (Some(exposed), _) => match input_required::client_params(params) {
            Ok(input) => {
                let arguments = Value::Object(inputs);
                let params = param_headers::outgoing(&exposed.params, &arguments);
                CallRequest::Mcp {
                    tool: exposed.upstream_name.to_string(),
                    arguments,
                    input,
                    params,
                    task_ttl_ms: None,
                    task_if_offered: false,
                }
            }
            Err(e) => return error_step(id, e),
        },
        // An HTTP tool is called at its api_endpoint itself.
        (None, Backend::HttpTool(config)) => CallRequest::HttpTool { body: request_body(config, inputs) },
        (None, Backend::Dify(config)) => {
            let mut body = dify_call::request(config.app_mode, inputs, query, &user);
            if let Some(id) = conversation {
                conversation::put(&mut body, id);
            }
            CallRequest::Dify { mode: config.app_mode, body }
        }
        // The tool that stands for an upstream whose tools are not known cannot be called.
        (None, Backend::Mcp(_)) => {
            let why = format!("Tool '{}' stands for an upstream MCP server whose tools are not known yet", tool.name);
            return reply(
                200,
                result_response(id, shape_result(tool_error(&why), methods::TOOLS_CALL, version, server_version)),
            );
        }
    };
    let request_meta = params.get("_meta");
    let progress_token =
        request_meta.and_then(|m| m.get(meta::PROGRESS_TOKEN)).filter(|t| t.is_string() || t.is_number()).cloned();
    let asked_level = request_meta.and_then(|m| m.get(meta::LOG_LEVEL)).and_then(Value::as_str);
    let log_level = asked_level.and_then(log_level).or(version.default_log_level());
    let cancel_key = cancel_key(def, &user, h.caller, id);
    let min_ttl_ms = h.task_min_ttl_ms.unwrap_or(tasks::MIN_TTL_MS);
    let mut decision = tasks::decide(version, tool.task_support(), &tool.name, params, min_ttl_ms);
    let toolset = |name: &str| tool.app.backend.as_mcp().is_some_and(|m| m.toolset_of(name).is_some());
    // An upstream tool that declares no task support: its upstream may still run it as a task
    // (the 2026-07-28 extension lets the server decide), so the client's opt-in goes along.
    let mut if_offered = false;
    if let (Some(e), CallRequest::Mcp { tool: upstream_tool, .. }) = (&tool.upstream, &request) {
        if let Some(ttl_ms) =
            upstream_tasks::undeclared_opt_in(&e.tool, version, params).filter(|_| !toolset(upstream_tool))
        {
            decision = Decision::Task { ttl_ms };
            if_offered = true;
        }
    }
    // An upstream's own task tool runs as the upstream's task, relayed; not as one of Flowgate's.
    if let (Decision::Task { ttl_ms }, CallRequest::Mcp { tool: upstream_tool, task_ttl_ms, task_if_offered, .. }) =
        (&decision, &mut request)
    {
        if !toolset(upstream_tool) {
            *task_ttl_ms = Some(*ttl_ms);
            *task_if_offered = if_offered;
            decision = Decision::Sync;
        }
    }
    let plan = Box::new(CallPlan {
        id: id.clone(),
        version,
        app_index,
        request,
        user,
        client_name,
        progress_token,
        log_level,
        cancel_key,
        relay: relay_channel(version, h),
        files,
    });
    match decision {
        Decision::Sync => Step::Call(plan),
        Decision::Task { ttl_ms } => Step::CreateTask { plan, ttl_ms },
        Decision::Reject(e) => error_step(id, e),
    }
}

/// How an upstream's requests can reach a client of `version` (the shell closes it for a client
/// that takes only JSON).
fn relay_channel(version: Version, h: &RequestHeaders<'_>) -> Channel {
    if version.is_stateless() {
        Channel::Closed(Closed::Stateless)
    } else {
        Channel::Stream(h.session_caps.unwrap_or_default())
    }
}

/// The backend `user` of a client: the identity the server authenticated (a client key's name)
/// when there is one; else stable per server and client, and not reversible.
fn end_user(def: &ServerDefinition, client_name: &str, h: &RequestHeaders<'_>) -> String {
    match h.identity {
        Some(identity) => identity.to_string(),
        None => format!("mcp-{}", &sha256_hex(&format!("{}\n{client_name}", def.server_id))[..24]),
    }
}

/// Who sent a `tools/call` refused before it became a call (usage metrics count callers): the
/// same identity its `user` would have been.
pub fn caller_of(def: &ServerDefinition, msg: &Value, h: &RequestHeaders<'_>) -> String {
    let empty = Map::new();
    let params = msg.get("params").and_then(Value::as_object).unwrap_or(&empty);
    end_user(def, &client_name(params, h), h)
}

/// How the sender of a message names itself (clientInfo, else its User-Agent): the call log's
/// caller of a server that does not authenticate its clients.
pub fn client_of(msg: &Value, h: &RequestHeaders<'_>) -> String {
    let empty = Map::new();
    client_name(msg.get("params").and_then(Value::as_object).unwrap_or(&empty), h)
}

/// Where a running call is recorded so that `notifications/cancelled` (a separate request, on
/// any isolate) can find and stop it: per server, client, connecting address and request id.
/// The user comes from what the client says about itself, which another client holding the
/// same code can copy; the address it cannot, so one client cannot cancel another's run.
pub fn cancel_key(def: &ServerDefinition, user: &str, caller: Option<&str>, request_id: &Value) -> String {
    let caller = caller.unwrap_or("");
    format!("cancel:{}", sha256_hex(&format!("{}\n{user}\n{caller}\n{request_id}", def.server_id)))
}

/// How the client names itself: clientInfo in `_meta` (2026-07-28), else its User-Agent.
fn client_name(params: &Map<String, Value>, h: &RequestHeaders<'_>) -> String {
    let info = params.get("_meta").and_then(|m| m.get(meta::CLIENT_INFO));
    if let Some(name) = info.and_then(|i| i.get("name")).and_then(Value::as_str) {
        let version = info.and_then(|i| i.get("version")).and_then(Value::as_str).unwrap_or("");
        return format!("{name}@{version}").chars().take(200).collect();
    }
    h.user_agent.filter(|u| !u.is_empty()).unwrap_or("mcp-client").chars().take(200).collect()
}

fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// Checks a `tasks/*` request against the revision's rules.
fn task_request(
    id: &Value,
    method: &str,
    params: &Map<String, Value>,
    version: Version,
    identity: Option<&str>,
) -> Result<TaskRequest, RpcError> {
    let not_found = |why: &str| {
        RpcError::new(
            version.method_not_found_status(),
            jsonrpc::METHOD_NOT_FOUND,
            format!("Method not found: {} ({why})", plain_or_quoted(method)),
        )
    };
    let op = match (method, version.is_stateless()) {
        (_, false) if !version.has_tasks() => return Err(not_found("tasks need protocol 2025-11-25 or later")),
        ("tasks/list", _) => return Err(not_found("task listing is not offered: task ids are the only handle")),
        ("tasks/result", true) => return Err(not_found("removed in 2026-07-28; tasks/get carries the result")),
        ("tasks/update", false) => return Err(not_found("tasks/update is part of the 2026-07-28 tasks extension")),
        ("tasks/get", _) => TaskOp::Get,
        ("tasks/result", _) => TaskOp::Result,
        ("tasks/cancel", _) => TaskOp::Cancel,
        _ => TaskOp::Update,
    };
    if version.is_stateless() && !tasks::client_has_extension(params) {
        return Err(RpcError::new(
            400,
            tasks::MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!(
                "Missing required client capability: {method} needs the {} extension in _meta clientCapabilities",
                tasks::EXTENSION
            ),
        )
        .with_data(json!({"requiredCapabilities": {"extensions": {tasks::EXTENSION: {}}}})));
    }
    let max_len = match params.get("taskId").and_then(Value::as_str) {
        Some(t) if upstream_tasks::is_relayed(t) => upstream_tasks::MAX_TASK_ID,
        _ => 128,
    };
    match params.get("taskId").and_then(Value::as_str) {
        Some(t) if !t.is_empty() && t.len() <= max_len => Ok(TaskRequest {
            id: id.clone(),
            version,
            op,
            task_id: t.to_string(),
            owner: identity.map(str::to_string),
            input_responses: params.get("inputResponses").cloned(),
            user: String::new(),
            relay: Channel::Closed(Closed::JsonOnly),
        }),
        _ => Err(RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Invalid params: {method} needs `taskId`"))),
    }
}

mod replies;
pub use replies::{
    call_status, finish_call, forward_failed, forwarded_response, log_level, log_reaches, notification,
    relayed_task_created, relayed_task_response, relays, task_created, task_response, upstream_response, Progress,
};

#[cfg(test)]
mod tests;
