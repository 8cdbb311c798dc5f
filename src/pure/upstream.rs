//! Flowgate as an MCP *client* of an upstream MCP server (app mode `mcp`): the protocol logic
//! only. Which transport to try and when to fall back, the JSON-RPC messages and headers sent,
//! reading an answer whatever its form, the legacy `endpoint` event, header safety and
//! precedence, OAuth tokens, and how the upstream's tools and results are shown to Flowgate's
//! own clients. The shell does the HTTP; nothing here does IO.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::credential::is_secret_ref;
use super::mcp::meta;
use super::mcp::methods;
use super::mcp::names::sanitize_name;
use super::mcp::version::Version;
use super::sse::{SseEvent, SseParser};
use super::url::check_backend_url;

/// The revision offered in `initialize`: the newest one that still has the handshake.
pub const OFFERED_VERSION: Version = Version::LATEST_WITH_INITIALIZE;
/// Streamable HTTP requires clients to accept both answer forms on every POST.
pub const ACCEPT: &str = "application/json, text/event-stream";
/// How Flowgate names itself to upstream servers.
pub const CLIENT_NAME: &str = "flowgate";
/// SEP-986's limit for a tool name.
pub const MAX_EXPOSED_NAME: usize = 128;

/// Upstream text quoted in an error (a body, a message) is cut here so one answer cannot flood
/// the error a person or a model reads.
const MAX_QUOTED: usize = 500;

// ---------------------------------------------------------------------------------------------
// Transport choice and fallback
// ---------------------------------------------------------------------------------------------

/// The two HTTP transports an upstream may speak; stored in the session so later requests go
/// the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// 2025-03-26 and later: one endpoint, POST per message.
    StreamableHttp,
    /// 2024-11-05 HTTP+SSE: a GET event stream plus the POST endpoint it announces.
    Sse,
}

impl Transport {
    /// The spelling used in `backend.transport` and in stored sessions.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
        }
    }
}

/// `backend.transport`: a person may pin the transport when auto-detection guesses wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    Auto,
    StreamableHttp,
    Sse,
}

impl TransportChoice {
    /// Absent means `auto`, so most apps need only a URL.
    pub fn parse(s: Option<&str>) -> Result<Self, String> {
        match s {
            None | Some("auto") => Ok(TransportChoice::Auto),
            Some("streamable-http") => Ok(TransportChoice::StreamableHttp),
            Some("sse") => Ok(TransportChoice::Sse),
            Some(other) => Err(format!("backend.transport must be auto, streamable-http or sse, not {other:?}")),
        }
    }
}

/// The transport to try first. In auto mode a URL whose path ends in `/sse` is the legacy
/// transport's conventional endpoint, so it goes straight to SSE; every other URL tries
/// Streamable HTTP first (the current transport, and its probe fails fast on old servers).
pub fn first_transport(choice: TransportChoice, url: &str) -> Transport {
    match choice {
        TransportChoice::StreamableHttp => Transport::StreamableHttp,
        TransportChoice::Sse => Transport::Sse,
        TransportChoice::Auto if url_path(url).trim_end_matches('/').ends_with("/sse") => Transport::Sse,
        TransportChoice::Auto => Transport::StreamableHttp,
    }
}

/// The path of a URL (no query or fragment); `""` when it has none.
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    rest.find('/').map_or("", |i| &rest[i..])
}

/// Why the first `initialize` attempt failed, as the shell saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum InitFailure {
    /// The server answered with a non-success status.
    Http { status: u16, www_authenticate: Option<String>, body: String },
    /// No HTTP answer: connection refused, DNS, TLS, reset, or an answer that is not MCP.
    Transport(String),
    /// No answer in time (e.g. an SSE-only server holding the POST open).
    Timeout,
}

/// Only in auto mode after a Streamable HTTP attempt: fall back to SSE on the signals of an old
/// server (HTTP 400, 404, 405 to the initialize POST, per the spec's back-compat probe) or a
/// transport-level failure or timeout. Never on 401/403 (the server exists and wants
/// credentials; trying another transport would only hide that) or any other status.
pub fn falls_back_to_sse(choice: TransportChoice, tried: Transport, failure: &InitFailure) -> bool {
    if choice != TransportChoice::Auto || tried != Transport::StreamableHttp {
        return false;
    }
    match failure {
        InitFailure::Http { status, .. } => matches!(status, 400 | 404 | 405),
        InitFailure::Transport(_) | InitFailure::Timeout => true,
    }
}

/// The error text for a failure that does not fall back. 401/403 include the WWW-Authenticate
/// details (resource_metadata, scope, error) so a person can act on them.
pub fn init_failure_message(app: &str, failure: &InitFailure) -> String {
    match failure {
        InitFailure::Http { status: status @ (401 | 403), www_authenticate, .. } => {
            let details = www_authenticate.as_deref().map(auth_details).unwrap_or_default();
            let details = if details.is_empty() {
                " (it sent no WWW-Authenticate details)".to_string()
            } else {
                format!(" ({details})")
            };
            if *status == 401 {
                format!(
                    "the MCP server of app {app} requires authorization (HTTP 401){details}; give the app \
                     credentials it accepts: backend.oauth (client credentials or a refresh token) or a \
                     header in backend.headers"
                )
            } else {
                format!(
                    "the MCP server of app {app} refused access (HTTP 403){details}; the credentials were \
                     accepted but lack permission: grant them the scope the server asks for"
                )
            }
        }
        InitFailure::Http { status, body, .. } => {
            let hint = match status {
                400 | 405 => "; if it is a legacy HTTP+SSE server, set backend.transport to \"sse\" (or \"auto\")",
                404 => "; check backend.url: there is no MCP endpoint there",
                500..=599 => "; the server failed, try again later or ask its operator",
                _ => "",
            };
            let body = quote(body);
            let said = if body.is_empty() { String::new() } else { format!(": {body}") };
            format!("the MCP server of app {app} answered initialize with HTTP {status}{said}{hint}")
        }
        InitFailure::Transport(e) => {
            format!(
                "could not reach the MCP server of app {app}: {}; check backend.url and that the server is up",
                quote(e)
            )
        }
        InitFailure::Timeout => format!(
            "the MCP server of app {app} did not answer initialize in time; check backend.url and that the \
             server is up (a legacy HTTP+SSE server needs backend.transport \"sse\" or \"auto\")"
        ),
    }
}

/// The auth-params of a WWW-Authenticate value that tell a person what to do, in words.
fn auth_details(header: &str) -> String {
    let params = auth_params(header);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = get("error") {
        match get("error_description") {
            Some(d) => parts.push(format!("error {e}: {d}")),
            None => parts.push(format!("error {e}")),
        }
    }
    if let Some(s) = get("scope") {
        parts.push(format!("scope \"{s}\""));
    }
    if let Some(m) = get("resource_metadata") {
        parts.push(format!("resource metadata at {m}"));
    }
    quote(&parts.join("; "))
}

/// `name=value` pairs (names lowercased, quoted values unescaped) of every challenge in a
/// WWW-Authenticate value; scheme names and token68 values are skipped.
fn auth_params(header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = header.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != ',' && *c != '=') {
            name.push(c);
        }
        if name.is_empty() && chars.peek().is_none() {
            return out;
        }
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            // A scheme name (or a stray token): the next token starts the params.
            if name.is_empty() {
                chars.next();
            }
            continue;
        }
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if_eq(&'"').is_some();
        if quoted {
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',' && !c.is_whitespace()) {
                value.push(c);
            }
        }
        // A token68 (`abc==`) reads as `abc` = `=`: padding, not a param.
        if !name.is_empty() && (quoted || (!value.is_empty() && !value.bytes().all(|b| b == b'='))) {
            out.push((name.to_ascii_lowercase(), value));
        }
    }
}

/// Upstream text made fit to quote in an error: one line, trimmed, bounded.
fn quote(s: &str) -> String {
    let one_line: String = s.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match one_line.char_indices().nth(MAX_QUOTED) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

// ---------------------------------------------------------------------------------------------
// Messages and session
// ---------------------------------------------------------------------------------------------

/// What Flowgate keeps between requests to one upstream; stored by the shell, so serializable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub transport: Transport,
    /// The negotiated revision, sent as `MCP-Protocol-Version` on every later request.
    pub protocol_version: String,
    /// `Mcp-Session-Id` from the initialize answer, echoed on every later request.
    pub session_id: Option<String>,
    /// 2026-07-28: no handshake, no session id; every request carries `_meta`.
    pub stateless: bool,
}

impl Session {
    /// The negotiated revision (always one Flowgate speaks, once parsed).
    pub fn version(&self) -> Option<Version> {
        Version::parse(&self.protocol_version)
    }
}

fn client_info() -> Value {
    json!({ "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") })
}

fn request(id: u64, method: &str, params: Map<String, Value>) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// The `_meta` entries a 2026-07-28 request carries in place of the handshake.
fn add_stateless_meta(params: &mut Map<String, Value>, protocol_version: &str) {
    let entry = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Some(keys) = entry.as_object_mut() {
        keys.insert(meta::PROTOCOL_VERSION.into(), protocol_version.into());
        keys.insert(meta::CLIENT_CAPABILITIES.into(), json!({}));
        keys.insert(meta::CLIENT_INFO.into(), client_info());
    }
}

fn add_session_meta(params: &mut Map<String, Value>, session: &Session) {
    if session.stateless {
        add_stateless_meta(params, &session.protocol_version);
    }
}

/// The handshake request. Flowgate offers 2025-11-25 and declares no client capabilities: it
/// answers sampling, elicitation and roots requests with errors.
pub fn initialize_request(id: u64) -> Value {
    let mut p = Map::new();
    p.insert("protocolVersion".into(), OFFERED_VERSION.as_str().into());
    p.insert("capabilities".into(), json!({}));
    p.insert("clientInfo".into(), client_info());
    request(id, methods::INITIALIZE, p)
}

/// Sent after a successful initialize, before any other request (the spec's handshake order).
pub fn initialized_notification() -> Value {
    json!({ "jsonrpc": "2.0", "method": methods::INITIALIZED })
}

/// `tools/list`, one page; the caller follows `nextCursor`.
pub fn tools_list_request(id: u64, cursor: Option<&str>, session: &Session) -> Value {
    let mut p = Map::new();
    if let Some(c) = cursor {
        p.insert("cursor".into(), c.into());
    }
    add_session_meta(&mut p, session);
    request(id, methods::TOOLS_LIST, p)
}

/// `tools/call` with the upstream's own tool name; a progress token is passed on so the
/// upstream's progress can be relayed to Flowgate's client.
pub fn tools_call_request(
    id: u64,
    name: &str,
    arguments: &Value,
    progress_token: Option<&Value>,
    session: &Session,
) -> Value {
    let mut p = Map::new();
    p.insert("name".into(), name.into());
    p.insert("arguments".into(), if arguments.is_null() { json!({}) } else { arguments.clone() });
    if let Some(t) = progress_token {
        p.insert("_meta".into(), json!({ meta::PROGRESS_TOKEN: t }));
    }
    add_session_meta(&mut p, session);
    request(id, methods::TOOLS_CALL, p)
}

/// 2026-07-28's probe: a server that answers it is stateless and needs no initialize.
pub fn discover_request(id: u64) -> Value {
    let mut p = Map::new();
    add_stateless_meta(&mut p, Version::V2026_07_28.as_str());
    request(id, methods::DISCOVER, p)
}

/// Headers for a request after initialization: MCP-Protocol-Version, Mcp-Session-Id when there
/// is one, and for 2026-07-28 Mcp-Method / Mcp-Name (which the server checks against the body).
/// A name that is not plain visible ASCII is sent `=?base64?…?=`-encoded, as the spec asks.
pub fn request_headers(session: &Session, method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![("MCP-Protocol-Version", session.protocol_version.clone())];
    if let Some(id) = &session.session_id {
        h.push(("Mcp-Session-Id", id.clone()));
    }
    if session.stateless {
        h.push(("Mcp-Method", method.to_string()));
        if let Some(n) = name {
            h.push(("Mcp-Name", encode_header_value(n)));
        }
    }
    h
}

/// A value as an MCP header carries it: as is when safe, else `=?base64?<standard base64>?=`.
pub fn encode_header_value(s: &str) -> String {
    let plain = s.bytes().all(|b| (0x20..0x7F).contains(&b)) && !s.starts_with(' ') && !s.ends_with(' ');
    if plain {
        s.to_string()
    } else {
        format!("=?base64?{}?=", base64(s.as_bytes()))
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Reads an initialize result: the negotiated version must be one Flowgate speaks (else an
/// error naming it), and a session id must be echoable in a header.
pub fn parse_initialize(result: &Value, session_id: Option<String>, transport: Transport) -> Result<Session, String> {
    let Some(v) = result.get("protocolVersion").and_then(Value::as_str) else {
        return Err("the upstream's initialize result has no protocolVersion, so it is not an MCP server".into());
    };
    let Some(version) = Version::parse(v) else {
        return Err(format!(
            "the upstream chose MCP revision {:?}, which Flowgate does not speak (it speaks {})",
            quote(v),
            Version::all_strs().collect::<Vec<_>>().join(", ")
        ));
    };
    let session_id = if version.is_stateless() { None } else { session_id };
    if let Some(id) = &session_id {
        if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
            return Err("the upstream's Mcp-Session-Id is not visible ASCII, so it cannot be sent back".into());
        }
    }
    Ok(Session { transport, protocol_version: v.to_string(), session_id, stateless: version.is_stateless() })
}

/// A stateless upstream (2026-07-28 `server/discover` answered with a stateless revision among
/// `supportedVersions`) needs no initialize: this is its session.
pub fn stateless_session(discover_result: &Value) -> Option<Session> {
    let version = discover_result
        .get("supportedVersions")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .filter_map(Version::parse)
        .filter(|v| v.is_stateless())
        .max()?;
    Some(Session {
        transport: Transport::StreamableHttp,
        protocol_version: version.as_str().to_string(),
        session_id: None,
        stateless: true,
    })
}

// ---------------------------------------------------------------------------------------------
// Reading answers
// ---------------------------------------------------------------------------------------------

/// One message from the upstream while waiting for a response.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// Progress, log messages and the like: relayed or dropped by the caller.
    Notification(Value),
    /// A request from the server (sampling, elicitation, roots): Flowgate declared no client
    /// capabilities, so the caller answers it with an error.
    ServerRequest(Value),
    /// The response to the awaited request: a `result` or an `error`.
    Response(Value),
}

enum Kind {
    Notification,
    ServerRequest,
    Response,
}

/// Reads one upstream answer to request `id`, whatever its form: a JSON body (one object, or a
/// batch array) or an SSE stream fed chunk by chunk. Notifications and server requests that
/// arrive before the response are returned in order; responses to other ids are ignored, and
/// so is everything after the response.
pub struct ReplyReader {
    id: Value,
    parser: SseParser,
    done: bool,
    endpoint: Option<String>,
    last_event_id: Option<String>,
    retry_ms: Option<u64>,
}

impl ReplyReader {
    /// A reader for the answer to request `id`, with the SSE parser's default event cap.
    pub fn new(id: Value) -> Self {
        Self::with_max_event_bytes(id, SseParser::DEFAULT_MAX_EVENT_BYTES)
    }

    /// The same, with another cap on one SSE event (bounds memory per upstream stream).
    pub fn with_max_event_bytes(id: Value, max: usize) -> Self {
        ReplyReader {
            id,
            parser: SseParser::new(max),
            done: false,
            endpoint: None,
            last_event_id: None,
            retry_ms: None,
        }
    }

    /// Waits for another request on the same stream (the legacy transport's one GET stream
    /// carries every response), keeping the parser state.
    pub fn expect(&mut self, id: Value) {
        self.id = id;
        self.done = false;
    }

    /// Feeds the next chunk of an SSE answer; messages are pushed to `out` as they complete.
    pub fn feed_sse(&mut self, chunk: &[u8], out: &mut Vec<Incoming>) -> Result<(), String> {
        let mut events = Vec::new();
        let fed = self.parser.feed(chunk, &mut events);
        for e in events {
            self.event(e, out)?;
        }
        fed.map_err(|e| format!("upstream stream: {e}"))
    }

    /// End of the SSE stream. Fails when it ended without the response, unless the stream gave
    /// an event id to resume from (2025-11-25 polling): then [`ReplyReader::resume`] says how.
    pub fn finish_sse(&mut self, out: &mut Vec<Incoming>) -> Result<(), String> {
        let mut events = Vec::new();
        let finished = self.parser.finish(&mut events);
        for e in events {
            self.event(e, out)?;
        }
        finished.map_err(|e| format!("upstream stream: {e}"))?;
        if self.done || self.last_event_id.is_some() {
            Ok(())
        } else {
            Err(format!("the upstream closed its event stream before answering request {}", self.id))
        }
    }

    /// A JSON answer (the whole body): one message or a batch array. Fails when it holds no
    /// response to the awaited request, since nothing more will come.
    pub fn json_body(&self, body: &str) -> Result<Vec<Incoming>, String> {
        if body.trim().is_empty() {
            return Err(format!("the upstream answered request {} with an empty body", self.id));
        }
        let v: Value = serde_json::from_str(body)
            .map_err(|e| format!("the upstream's answer to request {} is not JSON ({e})", self.id))?;
        let items = match v {
            Value::Array(items) => items,
            other => vec![other],
        };
        let mut out = Vec::new();
        for m in items {
            match self.classify(&m) {
                Some(Kind::Response) => {
                    out.push(Incoming::Response(m));
                    return Ok(out);
                }
                Some(kind) => out.push(wrap(kind, m)),
                None => {}
            }
        }
        Err(format!("the upstream's answer holds no response to request {}", self.id))
    }

    /// The response has arrived; the caller may stop reading.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The legacy transport's `endpoint` event data, once seen (see [`resolve_endpoint`]).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// When a stream ended early but can be resumed: the last event id (for `Last-Event-ID`)
    /// and the server's `retry` hint in milliseconds.
    pub fn resume(&self) -> Option<(&str, Option<u64>)> {
        if self.done {
            return None;
        }
        self.last_event_id.as_deref().map(|id| (id, self.retry_ms))
    }

    fn event(&mut self, e: SseEvent, out: &mut Vec<Incoming>) -> Result<(), String> {
        if let Some(id) = e.id {
            self.last_event_id = if id.is_empty() { None } else { Some(id) };
        }
        if e.retry.is_some() {
            self.retry_ms = e.retry;
        }
        match e.event.as_str() {
            // The first one counts: a later one cannot redirect the session's posts.
            "endpoint" if self.endpoint.is_none() => self.endpoint = Some(e.data.trim().to_string()),
            "" | "message" if !self.done && !e.data.trim().is_empty() => {
                let v: Value = serde_json::from_str(&e.data)
                    .map_err(|err| format!("the upstream sent an event that is not JSON ({err})"))?;
                let items = match v {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                for m in items {
                    match self.classify(&m) {
                        Some(Kind::Response) => {
                            self.done = true;
                            out.push(Incoming::Response(m));
                            break;
                        }
                        Some(kind) => out.push(wrap(kind, m)),
                        None => {}
                    }
                }
            }
            // Priming events (empty data) and event types MCP does not define.
            _ => {}
        }
        Ok(())
    }

    fn classify(&self, m: &Value) -> Option<Kind> {
        let obj = m.as_object()?;
        let id = obj.get("id").filter(|i| !i.is_null());
        if obj.get("method").is_some_and(Value::is_string) {
            return Some(if id.is_some() { Kind::ServerRequest } else { Kind::Notification });
        }
        let is_error = obj.contains_key("error");
        let is_response = is_error || obj.contains_key("result");
        match id {
            Some(id) if is_response && *id == self.id => Some(Kind::Response),
            // An error without an id is the server refusing a request it could not read: ours.
            None if is_error => Some(Kind::Response),
            _ => None,
        }
    }
}

fn wrap(kind: Kind, m: Value) -> Incoming {
    match kind {
        Kind::Notification => Incoming::Notification(m),
        Kind::ServerRequest => Incoming::ServerRequest(m),
        Kind::Response => Incoming::Response(m),
    }
}

/// The result of a response, or its error in words (see [`upstream_error_message`]).
pub fn response_result(app: &str, response: &Value) -> Result<Value, String> {
    if let Some(e) = response.get("error") {
        return Err(upstream_error_message(app, e));
    }
    response
        .get("result")
        .cloned()
        .ok_or_else(|| format!("upstream {app} sent a response with neither result nor error"))
}

/// The error a server request gets: Flowgate declared no client capabilities.
pub fn server_request_refusal(request: &Value) -> Value {
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    json!({
        "jsonrpc": "2.0",
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {
            "code": super::mcp::jsonrpc::METHOD_NOT_FOUND,
            "message": format!("Flowgate does not support {method} (it declared no client capabilities)"),
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Legacy HTTP+SSE endpoint
// ---------------------------------------------------------------------------------------------

struct AbsUrl<'a> {
    scheme: String,
    /// As written (host casing kept), for building the resolved URL.
    authority: &'a str,
    host: String,
    port: u16,
    /// Path and query, no fragment.
    rest: &'a str,
}

impl AbsUrl<'_> {
    /// The origin as browsers serialize it: the default port left out.
    fn origin(&self) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            format!("{}://{}", self.scheme, self.host)
        } else {
            format!("{}://{}:{}", self.scheme, self.host, self.port)
        }
    }

    fn same_origin(&self, other: &AbsUrl<'_>) -> bool {
        self.scheme == other.scheme && self.host == other.host && self.port == other.port
    }
}

fn parse_abs(url: &str) -> Result<AbsUrl<'_>, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url:?} is not an absolute URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("{:?} is not an http or https URL", quote(url))),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let tail = &rest[end..];
    let tail = tail.split('#').next().unwrap_or("");
    if authority.contains('@') {
        return Err(format!("{:?} carries credentials (user@host)", quote(url)));
    }
    let (host, port) = if let Some(b) = authority.strip_prefix('[') {
        let (h, t) = b.split_once(']').ok_or_else(|| format!("{:?} has an unclosed [IPv6] host", quote(url)))?;
        (format!("[{h}]"), t.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("{:?} has no host", quote(url)));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p.parse::<u16>().map_err(|_| format!("{:?} has an invalid port", quote(url)))?,
    };
    Ok(AbsUrl { scheme, authority, host: host.to_ascii_lowercase(), port, rest: tail })
}

/// RFC 3986 §5.2.4: `.` and `..` segments removed, so `../` cannot climb out unnoticed.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if path.starts_with('/') && !joined.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Legacy HTTP+SSE: the `endpoint` event's data resolved against the SSE URL. It must be the
/// same origin (scheme, host, port): otherwise a server could make Flowgate post the session's
/// traffic, with its credentials, elsewhere. The error names both origins.
pub fn resolve_endpoint(sse_url: &str, data: &str) -> Result<String, String> {
    let base = parse_abs(sse_url)?;
    let data = data.trim();
    if data.is_empty() {
        return Err("the upstream's endpoint event is empty".into());
    }
    if data.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("the upstream's endpoint event is not a URL (it contains spaces or control characters)".into());
    }
    let data = data.split('#').next().unwrap_or("");
    let has_scheme = data.find("://").is_some_and(|i| !data[..i].contains(['/', '?']));
    if has_scheme || data.starts_with("//") {
        let absolute = if has_scheme { data.to_string() } else { format!("{}:{data}", base.scheme) };
        let target = parse_abs(&absolute).map_err(|e| format!("the upstream's endpoint event: {e}"))?;
        if !target.same_origin(&base) {
            return Err(format!(
                "the upstream's endpoint event points to {}, not to the SSE server's origin {}; Flowgate only \
                 posts to the server it connected to",
                target.origin(),
                base.origin()
            ));
        }
        let (path, query) = split_query(target.rest);
        let path = if path.is_empty() { "/".to_string() } else { remove_dot_segments(path) };
        return Ok(format!("{}://{}{path}{query}", target.scheme, target.authority));
    }
    let (base_path, base_query) = split_query(base.rest);
    let (path, query) = if let Some(q) = data.strip_prefix('?') {
        (base_path.to_string(), format!("?{q}"))
    } else {
        let (p, q) = split_query(data);
        let joined = if p.starts_with('/') {
            p.to_string()
        } else if p.is_empty() {
            base_path.to_string()
        } else {
            let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
            format!("{dir}{p}")
        };
        let q = if p.is_empty() && q.is_empty() { base_query } else { q };
        (joined, q.to_string())
    };
    let path = if path.is_empty() { "/".to_string() } else { remove_dot_segments(&path) };
    Ok(format!("{}://{}{path}{query}", base.scheme, base.authority))
}

fn split_query(s: &str) -> (&str, &str) {
    match s.find('?') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

// ---------------------------------------------------------------------------------------------
// Headers
// ---------------------------------------------------------------------------------------------

/// Headers Flowgate sets itself on upstream requests; forwarding them would break the protocol.
const RESERVED_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "last-event-id",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

/// A header value Flowgate refuses to send: CR, LF, NUL, other control characters (tab
/// included), non-ASCII, or leading/trailing whitespace. Refused rather than cleaned, because
/// HTTP stacks echo bad values into errors a model may see. Returns the reason, never the value.
pub fn header_value_problem(value: &str) -> Option<&'static str> {
    if value.contains(['\r', '\n']) {
        Some("contains a line break (CR or LF)")
    } else if value.contains('\0') {
        Some("contains a NUL character")
    } else if value.chars().any(|c| c.is_ascii_control()) {
        Some("contains a control character")
    } else if !value.is_ascii() {
        Some("contains non-ASCII characters")
    } else if value.starts_with(' ') || value.ends_with(' ') {
        Some("starts or ends with whitespace")
    } else {
        None
    }
}

/// An RFC 9110 field name (a `token`).
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Header precedence, lowest first: static < oauth < forwarded. Names compare
/// case-insensitively, so a later source replaces any case variant of a name.
pub fn merge_headers(layers: &[&[(String, String)]]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for layer in layers {
        for (name, value) in layer.iter() {
            out.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            out.push((name.clone(), value.clone()));
        }
    }
    out
}

/// `backend.forward_headers: {"<upstream header>": "<incoming header>"}` with
/// `backend.on_missing: deny|passthrough` (default deny): the headers to forward from the
/// incoming request. Errors name the missing incoming header or the unsafe header, by name
/// only; an unsafe value is refused whatever `on_missing` says.
pub fn forwarded_headers(
    config: &Value,
    incoming: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let map = match config.get("forward_headers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(
                "backend.forward_headers must be an object {\"<upstream header>\": \"<incoming header>\"}".into()
            )
        }
    };
    let deny = match config.get("on_missing") {
        None | Some(Value::Null) => true,
        Some(v) if v == "deny" => true,
        Some(v) if v == "passthrough" => false,
        Some(_) => return Err("backend.on_missing must be \"deny\" or \"passthrough\"".into()),
    };
    let mut out = Vec::with_capacity(map.len());
    for (upstream, from) in map {
        if !is_header_name(upstream) {
            return Err(format!("backend.forward_headers: {upstream:?} is not a valid header name"));
        }
        if RESERVED_HEADERS.contains(&upstream.to_ascii_lowercase().as_str()) {
            return Err(format!("backend.forward_headers.{upstream}: Flowgate sets this header itself"));
        }
        let Some(from) = from.as_str().filter(|f| is_header_name(f)) else {
            return Err(format!("backend.forward_headers.{upstream} must name an incoming header"));
        };
        match incoming(from) {
            Some(v) if !v.is_empty() => {
                if let Some(why) = header_value_problem(&v) {
                    return Err(format!(
                        "the request's {from} header (forwarded as {upstream}) {why}, so it was not sent"
                    ));
                }
                out.push((upstream.clone(), v));
            }
            _ if deny => {
                return Err(format!(
                    "the request has no {from} header, which this app forwards to its MCP server as {upstream} \
                     (backend.on_missing is deny)"
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// OAuth
// ---------------------------------------------------------------------------------------------

/// An access token as Flowgate keeps it (in memory or storage) between calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OAuthToken {
    pub access_token: String,
    pub token_type: String,
    pub expires_at_ms: u64,
    /// A rotated refresh token, kept so the next refresh uses it.
    pub refresh_token: Option<String>,
}

/// `backend.oauth`: the client_credentials and refresh_token grants, with secrets resolved.
#[derive(Clone, PartialEq)]
pub struct OAuthConfig {
    pub token_url: String,
    pub grant_type: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub refresh_token: Option<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
    /// Refresh this long before expiry, so a token does not expire in flight.
    pub refresh_skew_seconds: u64,
    /// Lifetime assumed when the token response has no `expires_in`.
    pub default_expires_in: u64,
}

/// Secrets stay out of debug output and logs.
impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |s: &Option<String>| s.as_ref().map(|_| "***");
        f.debug_struct("OAuthConfig")
            .field("token_url", &self.token_url)
            .field("grant_type", &self.grant_type)
            .field("client_id", &self.client_id)
            .field("client_secret", &mask(&self.client_secret))
            .field("refresh_token", &mask(&self.refresh_token))
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("refresh_skew_seconds", &self.refresh_skew_seconds)
            .field("default_expires_in", &self.default_expires_in)
            .finish()
    }
}

/// Refresh a minute early: enough for a call to start before its token expires.
pub const DEFAULT_REFRESH_SKEW_SECONDS: u64 = 60;
/// An hour, the common lifetime, for token endpoints that do not say.
pub const DEFAULT_EXPIRES_IN_SECONDS: u64 = 3600;

impl OAuthConfig {
    /// Reads `backend.oauth`. `$NAME` in client_secret / refresh_token is passed to `resolve`
    /// (which answers the value, or Err with what could not be found).
    pub fn from_value(v: &Value, resolve: &dyn Fn(&str) -> Result<String, String>) -> Result<Self, String> {
        let obj = v.as_object().ok_or("backend.oauth must be an object")?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("backend.oauth.{key} must be a string")),
            }
        };
        // Every credential goes through `resolve`: a `$NAME` reference, a sealed literal, or
        // a plain one (which resolve hands back as it is).
        let secret = |key: &str| -> Result<Option<String>, String> {
            match text(key)? {
                Some(s) => resolve(&s).map(Some).map_err(|e| {
                    if is_secret_ref(&s) {
                        format!("backend.oauth.{key} refers to {s}, which could not be resolved ({e})")
                    } else {
                        format!("backend.oauth.{key} {e}")
                    }
                }),
                None => Ok(None),
            }
        };
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(n) => n.as_u64().ok_or_else(|| format!("backend.oauth.{key} must be a whole number of seconds")),
            }
        };
        let token_url = text("token_url")?.ok_or("backend.oauth.token_url is required")?;
        check_backend_url(&token_url).map_err(|why| format!("backend.oauth.token_url {why}"))?;
        let grant_type = text("grant_type")?.unwrap_or_else(|| "client_credentials".into());
        if grant_type != "client_credentials" && grant_type != "refresh_token" {
            return Err("backend.oauth.grant_type must be client_credentials or refresh_token".into());
        }
        let client_id = text("client_id")?.ok_or("backend.oauth.client_id is required")?;
        let client_secret = secret("client_secret")?;
        let refresh_token = secret("refresh_token")?;
        if grant_type == "client_credentials" && client_secret.is_none() {
            return Err("backend.oauth.client_secret is required for the client_credentials grant".into());
        }
        if grant_type == "refresh_token" && refresh_token.is_none() {
            return Err("backend.oauth.refresh_token is required for the refresh_token grant".into());
        }
        let default_expires_in = number("default_expires_in", DEFAULT_EXPIRES_IN_SECONDS)?;
        if default_expires_in == 0 {
            return Err("backend.oauth.default_expires_in must be at least 1".into());
        }
        Ok(OAuthConfig {
            token_url,
            grant_type,
            client_id,
            client_secret,
            refresh_token,
            scope: text("scope")?,
            audience: text("audience")?,
            refresh_skew_seconds: number("refresh_skew_seconds", DEFAULT_REFRESH_SKEW_SECONDS)?,
            default_expires_in,
        })
    }
}

/// The form fields of the token request: the refresh_token grant when a refresh token is known
/// (a rotated one from `current` first, else the configured one), else client_credentials.
/// After a failed refresh under client_credentials, call again with `current: None`.
pub fn token_form(cfg: &OAuthConfig, current: Option<&OAuthToken>) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: &str| f.push((k.to_string(), v.to_string()));
    let refresh = current.and_then(|t| t.refresh_token.as_deref()).or(cfg.refresh_token.as_deref());
    match refresh {
        Some(rt) => {
            push("grant_type", "refresh_token");
            push("refresh_token", rt);
        }
        None => push("grant_type", "client_credentials"),
    }
    push("client_id", &cfg.client_id);
    if let Some(s) = &cfg.client_secret {
        push("client_secret", s);
    }
    if let Some(s) = &cfg.scope {
        push("scope", s);
    }
    if refresh.is_none() {
        if let Some(a) = &cfg.audience {
            push("audience", a);
        }
    }
    f
}

/// Reads a token response. `expires_in` may be missing (then `default_expires_in`), a number or
/// a numeric string. A response without `refresh_token` leaves it `None`: the caller keeps the
/// one it had. Token values that could not travel in a header are refused, unquoted.
pub fn parse_token(v: &Value, now_ms: u64, default_expires_in: u64) -> Result<OAuthToken, String> {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        let desc = v.get("error_description").and_then(Value::as_str).map(|d| format!(": {}", quote(d)));
        return Err(format!("the token endpoint refused: {}{}", quote(e), desc.unwrap_or_default()));
    }
    let access_token = match v.get("access_token").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => t.to_string(),
        _ => return Err("the token endpoint's answer has no access_token".into()),
    };
    if let Some(why) = header_value_problem(&access_token) {
        return Err(format!("the access token from the token endpoint {why}, so it cannot be sent"));
    }
    let token_type = match v.get("token_type").and_then(Value::as_str) {
        None | Some("") => "Bearer".to_string(),
        Some(t) if t.eq_ignore_ascii_case("bearer") => "Bearer".to_string(),
        Some(t) if is_header_name(t) => t.to_string(),
        Some(_) => return Err("the token endpoint's token_type is not a valid auth scheme".into()),
    };
    let expires_in = match v.get("expires_in") {
        None | Some(Value::Null) => default_expires_in,
        Some(Value::Number(n)) => n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)).unwrap_or(0),
        Some(Value::String(s)) => {
            s.trim().parse::<u64>().map_err(|_| "the token endpoint's expires_in is not a number")?
        }
        Some(_) => return Err("the token endpoint's expires_in is not a number".into()),
    };
    let refresh_token = v.get("refresh_token").and_then(Value::as_str).filter(|r| !r.is_empty()).map(String::from);
    Ok(OAuthToken {
        access_token,
        token_type,
        expires_at_ms: now_ms.saturating_add(expires_in.saturating_mul(1000)),
        refresh_token,
    })
}

/// Refresh when `expires_at <= now + skew`, so no request leaves with a token about to expire.
pub fn needs_refresh(token: &OAuthToken, now_ms: u64, skew_s: u64) -> bool {
    token.expires_at_ms <= now_ms.saturating_add(skew_s.saturating_mul(1000))
}

/// The `Authorization` header the token gives (the oauth layer of [`merge_headers`]).
pub fn authorization_header(token: &OAuthToken) -> (String, String) {
    ("Authorization".to_string(), format!("{} {}", token.token_type, token.access_token))
}

/// `application/x-www-form-urlencoded`, as the token endpoint expects (WHATWG serializer).
pub fn form_urlencode(fields: &[(String, String)]) -> String {
    fn encode(out: &mut String, s: &str) {
        for b in s.bytes() {
            match b {
                b'*' | b'-' | b'.' | b'_' | b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' => out.push(b as char),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
    }
    let mut out = String::new();
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(&mut out, k);
        out.push('=');
        encode(&mut out, v);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Aggregation and downgrades
// ---------------------------------------------------------------------------------------------

/// One upstream tool as a Flowgate server exposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposedTool {
    /// The name Flowgate's clients see and call.
    pub name: String,
    /// The name to call upstream.
    pub upstream_name: String,
    /// The upstream's tool definition, untouched.
    pub tool: Value,
}

/// The upstream's tools as a Flowgate server exposes them. Names are `<app>_<tool>` by default
/// (the app part via `names::sanitize_name`; `tool_name_prefix: false` keeps the upstream name), so tools
/// of several apps cannot clash. `allowed_tools` / `denied_tools` match the UPSTREAM name,
/// before prefixing (absent: all allowed; `[]`: none allowed; denied wins); a malformed list
/// exposes nothing rather than too much. Names are made valid per SEP-986
/// (`[A-Za-z0-9_.-]{1,128}`) and unique (`_2`, `_3`, … on a clash).
pub fn aggregate(app_name: &str, app_id: &str, config: &Value, upstream_tools: &[Value]) -> Vec<ExposedTool> {
    let list = |key: &str| -> Result<Option<Vec<&str>>, ()> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a.iter().map(|v| v.as_str().ok_or(())).collect::<Result<Vec<_>, _>>().map(Some),
            Some(_) => Err(()),
        }
    };
    let (Ok(allowed), Ok(denied)) = (list("allowed_tools"), list("denied_tools")) else {
        return Vec::new();
    };
    let prefix = match config.get("tool_name_prefix") {
        None | Some(Value::Null) => Some(sanitize_name(app_name, app_id)),
        Some(Value::Bool(true)) => Some(sanitize_name(app_name, app_id)),
        Some(_) => None,
    };
    let mut out: Vec<ExposedTool> = Vec::new();
    for tool in upstream_tools {
        let Some(upstream) = tool.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            continue;
        };
        if allowed.as_ref().is_some_and(|a| !a.contains(&upstream))
            || denied.as_ref().is_some_and(|d| d.contains(&upstream))
        {
            continue;
        }
        let wanted = match &prefix {
            Some(p) => format!("{p}_{upstream}"),
            None => upstream.to_string(),
        };
        let base = valid_tool_name(&wanted);
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|t| t.name == name) {
            let suffix = format!("_{n}");
            name = format!("{}{suffix}", &base[..base.len().min(MAX_EXPOSED_NAME - suffix.len())]);
            n += 1;
        }
        out.push(ExposedTool { name, upstream_name: upstream.to_string(), tool: tool.clone() });
    }
    out
}

/// `[A-Za-z0-9_.-]{1,128}`: other characters become `_`; ASCII, so byte truncation is safe.
fn valid_tool_name(s: &str) -> String {
    let mut name: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' }).collect();
    name.truncate(MAX_EXPOSED_NAME);
    name
}

/// A tool as a client of `version` may see it: title and outputSchema dropped before
/// 2025-06-18, annotations before 2025-03-26, icons and execution before 2025-11-25; the name
/// replaced by the exposed name, and an input schema supplied when the upstream gave none.
pub fn tool_for_client(t: &ExposedTool, version: Version) -> Value {
    let mut tool = match &t.tool {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    tool.insert("name".into(), t.name.clone().into());
    if !tool.get("inputSchema").is_some_and(Value::is_object) {
        tool.insert("inputSchema".into(), json!({ "type": "object" }));
    }
    // `retain`, not `remove`: with preserve_order, `remove` would reorder the remaining keys.
    tool.retain(|k, _| match k.as_str() {
        "title" | "outputSchema" => version.structured_output(),
        "annotations" => version.tool_annotations(),
        "icons" | "execution" => version >= Version::V2025_11_25,
        _ => true,
    });
    Value::Object(tool)
}

/// An upstream CallToolResult as a client of `version` may see it: structuredContent dropped
/// before 2025-06-18 (its JSON becomes a text item if there is no content at all, so the client
/// still gets the answer); resource_link items become text before 2025-06-18; audio items
/// become text before 2025-03-26; everything else intact.
pub fn result_for_client(result: &Value, version: Version) -> Value {
    let Value::Object(mut r) = result.clone() else { return result.clone() };
    if let Some(Value::Array(items)) = r.get_mut("content") {
        for item in items.iter_mut() {
            let ty = item.get("type").and_then(Value::as_str).unwrap_or("");
            let text = match ty {
                "resource_link" if !version.structured_output() => Some(resource_link_text(item)),
                "audio" if !version.tool_annotations() => Some(format!(
                    "[audio ({}) left out: this client's MCP revision {} cannot receive audio]",
                    item.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type"),
                    version.as_str()
                )),
                _ => None,
            };
            if let Some(text) = text {
                *item = json!({ "type": "text", "text": text });
            }
        }
    }
    if !version.structured_output() {
        if let Some(structured) = r.shift_remove("structuredContent") {
            let empty = r.get("content").and_then(Value::as_array).is_none_or(Vec::is_empty);
            if empty {
                r.insert("content".into(), json!([{ "type": "text", "text": structured.to_string() }]));
            }
        }
    }
    Value::Object(r)
}

fn resource_link_text(item: &Value) -> String {
    let s = |k: &str| item.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let uri = s("uri").unwrap_or("");
    let mut text = match s("title").or(s("name")) {
        Some(label) => format!("{label}: {uri}"),
        None => uri.to_string(),
    };
    if let Some(d) = s("description") {
        text.push_str(&format!(" ({d})"));
    }
    text
}

/// An upstream JSON-RPC error in words with context: "upstream <app> said: <message> (code
/// <n>)". Takes the error object or the whole response.
pub fn upstream_error_message(app: &str, error: &Value) -> String {
    let e = error.get("error").unwrap_or(error);
    let message = match e.get("message").and_then(Value::as_str).map(quote) {
        Some(m) if !m.is_empty() => m,
        _ => "(no message)".to_string(),
    };
    match e.get("code").and_then(Value::as_i64) {
        Some(code) => format!("upstream {app} said: {message} (code {code})"),
        None => format!("upstream {app} said: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Version::*;

    fn session(version: &str) -> Session {
        let v = Version::parse(version).unwrap();
        Session {
            transport: Transport::StreamableHttp,
            protocol_version: version.into(),
            session_id: if v.is_stateless() { None } else { Some("sess-1".into()) },
            stateless: v.is_stateless(),
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    // --- transport ---

    #[test]
    fn transport_choice_parses() {
        assert_eq!(TransportChoice::parse(None), Ok(TransportChoice::Auto));
        assert_eq!(TransportChoice::parse(Some("auto")), Ok(TransportChoice::Auto));
        assert_eq!(TransportChoice::parse(Some("streamable-http")), Ok(TransportChoice::StreamableHttp));
        assert_eq!(TransportChoice::parse(Some("sse")), Ok(TransportChoice::Sse));
        assert!(TransportChoice::parse(Some("http")).unwrap_err().contains("\"http\""));
    }

    #[test]
    fn first_transport_by_choice_and_url() {
        use TransportChoice as C;
        let cases = [
            (C::Auto, "https://x.example/mcp", Transport::StreamableHttp),
            (C::Auto, "https://x.example/sse", Transport::Sse),
            (C::Auto, "https://x.example/v1/sse/", Transport::Sse),
            (C::Auto, "https://x.example/sse?key=1", Transport::Sse),
            (C::Auto, "https://x.example/", Transport::StreamableHttp),
            (C::Auto, "https://x.example", Transport::StreamableHttp),
            (C::Auto, "https://x.example/events-sse", Transport::StreamableHttp),
            (C::Auto, "https://x.example/mcp?transport=/sse", Transport::StreamableHttp),
            (C::StreamableHttp, "https://x.example/sse", Transport::StreamableHttp),
            (C::Sse, "https://x.example/mcp", Transport::Sse),
        ];
        for (choice, url, want) in cases {
            assert_eq!(first_transport(choice, url), want, "{choice:?} {url}");
        }
    }

    #[test]
    fn fallback_table() {
        use TransportChoice as C;
        let http = |status: u16| InitFailure::Http {
            status,
            www_authenticate: (status == 401).then(|| "Bearer resource_metadata=\"https://x/prm\"".to_string()),
            body: String::new(),
        };
        let failures = [
            ("200", http(200), false),
            ("400", http(400), true),
            ("401", http(401), false),
            ("403", http(403), false),
            ("404", http(404), true),
            ("405", http(405), true),
            ("500", http(500), false),
            ("transport", InitFailure::Transport("connection refused".into()), true),
            ("timeout", InitFailure::Timeout, true),
        ];
        for (label, failure, auto_falls_back) in &failures {
            for choice in [C::Auto, C::StreamableHttp, C::Sse] {
                for tried in [Transport::StreamableHttp, Transport::Sse] {
                    let want = *auto_falls_back && choice == C::Auto && tried == Transport::StreamableHttp;
                    assert_eq!(falls_back_to_sse(choice, tried, failure), want, "{label} {choice:?} {tried:?}");
                }
            }
        }
    }

    #[test]
    fn failure_messages_help_a_person_act() {
        let f = InitFailure::Http {
            status: 401,
            www_authenticate: Some(
                "Bearer realm=\"mcp\", error=\"invalid_token\", error_description=\"expired \\\"yesterday\\\"\", \
                 resource_metadata=\"https://auth.example/.well-known/oauth-protected-resource\", scope=\"repo read:org\""
                    .into(),
            ),
            body: "nope".into(),
        };
        let m = init_failure_message("github", &f);
        assert!(m.contains("github") && m.contains("401"), "{m}");
        assert!(m.contains("https://auth.example/.well-known/oauth-protected-resource"), "{m}");
        assert!(m.contains("scope \"repo read:org\""), "{m}");
        assert!(m.contains("invalid_token: expired \"yesterday\""), "{m}");
        assert!(m.contains("backend.oauth"), "{m}");

        let f =
            InitFailure::Http { status: 403, www_authenticate: Some("Bearer scope=admin".into()), body: String::new() };
        let m = init_failure_message("gh", &f);
        assert!(m.contains("403") && m.contains("scope \"admin\"") && m.contains("lack permission"), "{m}");
        let f = InitFailure::Http { status: 401, www_authenticate: None, body: String::new() };
        assert!(init_failure_message("gh", &f).contains("no WWW-Authenticate"));

        let f = InitFailure::Http { status: 405, www_authenticate: None, body: String::new() };
        assert!(init_failure_message("a", &f).contains("backend.transport"));
        let f = InitFailure::Http { status: 404, www_authenticate: None, body: "Not Found".into() };
        let m = init_failure_message("a", &f);
        assert!(m.contains("HTTP 404: Not Found") && m.contains("backend.url"), "{m}");
        let f = InitFailure::Http { status: 502, www_authenticate: None, body: "x".repeat(5000) + "\nline" };
        let m = init_failure_message("a", &f);
        assert!(m.len() < 1000 && !m.contains('\n'), "{m}");
        assert!(init_failure_message("a", &InitFailure::Transport("dns error".into())).contains("dns error"));
        assert!(init_failure_message("a", &InitFailure::Timeout).contains("in time"));
    }

    #[test]
    fn www_authenticate_params() {
        let p = auth_params("Basic realm=\"x\", Bearer error=invalid_token, scope=\"a b\",resource_metadata=\"u\"");
        assert_eq!(
            p,
            pairs(&[("realm", "x"), ("error", "invalid_token"), ("scope", "a b"), ("resource_metadata", "u")])
        );
        assert_eq!(auth_params("Negotiate abc=="), Vec::new());
        assert_eq!(auth_params("Bearer realm=\"\""), pairs(&[("realm", "")]));
        assert_eq!(auth_params(""), Vec::new());
        assert_eq!(auth_params("Bearer SCOPE=\"unterminated"), pairs(&[("scope", "unterminated")]));
    }

    // --- messages ---

    #[test]
    fn handshake_messages() {
        let r = initialize_request(1);
        assert_eq!(r["jsonrpc"], "2.0");
        assert_eq!(r["id"], 1);
        assert_eq!(r["method"], "initialize");
        assert_eq!(r["params"]["protocolVersion"], "2025-11-25");
        assert_eq!(r["params"]["capabilities"], json!({}));
        assert_eq!(r["params"]["clientInfo"]["name"], "flowgate");
        assert_eq!(r["params"]["clientInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(initialized_notification(), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let d = discover_request(2);
        assert_eq!(d["method"], "server/discover");
        assert_eq!(d["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(d["params"]["_meta"][meta::CLIENT_INFO]["name"], "flowgate");
        assert_eq!(d["params"]["_meta"][meta::CLIENT_CAPABILITIES], json!({}));
    }

    #[test]
    fn list_and_call_requests_per_session() {
        let old = session("2025-06-18");
        let l = tools_list_request(3, None, &old);
        assert_eq!(l, json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}));
        let l = tools_list_request(4, Some("page2"), &old);
        assert_eq!(l["params"], json!({"cursor": "page2"}));
        let c = tools_call_request(5, "search", &json!({"q": "x"}), Some(&json!("tok")), &old);
        assert_eq!(c["params"], json!({"name": "search", "arguments": {"q": "x"}, "_meta": {"progressToken": "tok"}}));
        let c = tools_call_request(6, "search", &Value::Null, None, &old);
        assert_eq!(c["params"], json!({"name": "search", "arguments": {}}));

        let new = session("2026-07-28");
        let l = tools_list_request(7, Some("c"), &new);
        assert_eq!(l["params"]["cursor"], "c");
        assert_eq!(l["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        let c = tools_call_request(8, "search", &json!({}), Some(&json!(9)), &new);
        assert_eq!(c["params"]["_meta"]["progressToken"], 9);
        assert_eq!(c["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(c["params"]["_meta"][meta::CLIENT_INFO]["name"], "flowgate");
    }

    #[test]
    fn headers_per_session() {
        let old = session("2025-11-25");
        assert_eq!(
            request_headers(&old, "tools/call", Some("search")),
            vec![("MCP-Protocol-Version", "2025-11-25".to_string()), ("Mcp-Session-Id", "sess-1".to_string())]
        );
        let none = Session { session_id: None, ..old };
        assert_eq!(request_headers(&none, "tools/list", None), vec![("MCP-Protocol-Version", "2025-11-25".into())]);
        let new = session("2026-07-28");
        assert_eq!(
            request_headers(&new, "tools/call", Some("search")),
            vec![
                ("MCP-Protocol-Version", "2026-07-28".to_string()),
                ("Mcp-Method", "tools/call".to_string()),
                ("Mcp-Name", "search".to_string())
            ]
        );
        assert_eq!(request_headers(&new, "tools/list", None).len(), 2);
        let h = request_headers(&new, "tools/call", Some("Hello, 世界"));
        assert_eq!(h[2].1, "=?base64?SGVsbG8sIOS4lueVjA==?=");
    }

    #[test]
    fn header_value_encoding() {
        assert_eq!(encode_header_value("us-west1"), "us-west1");
        assert_eq!(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn initialize_results() {
        let s = parse_initialize(
            &json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
            Some("abc".into()),
            Transport::StreamableHttp,
        )
        .unwrap();
        assert_eq!(
            s,
            Session {
                transport: Transport::StreamableHttp,
                protocol_version: "2025-06-18".into(),
                session_id: Some("abc".into()),
                stateless: false
            }
        );
        assert_eq!(s.version(), Some(V2025_06_18));
        let s = parse_initialize(&json!({"protocolVersion": "2024-11-05"}), None, Transport::Sse).unwrap();
        assert_eq!((s.transport, s.session_id), (Transport::Sse, None));
        let err = parse_initialize(&json!({"protocolVersion": "2030-01-01"}), None, Transport::Sse).unwrap_err();
        assert!(err.contains("2030-01-01") && err.contains("2025-11-25"), "{err}");
        assert!(parse_initialize(&json!({}), None, Transport::Sse).unwrap_err().contains("protocolVersion"));
        let err = parse_initialize(&json!({"protocolVersion": "2025-06-18"}), Some("a b".into()), Transport::Sse);
        assert!(err.unwrap_err().contains("Mcp-Session-Id"));
        // A server that picks the stateless revision gets no session id echoed.
        let s =
            parse_initialize(&json!({"protocolVersion": "2026-07-28"}), Some("x".into()), Transport::StreamableHttp)
                .unwrap();
        assert!(s.stateless && s.session_id.is_none());
    }

    #[test]
    fn session_serializes_transport_by_name() {
        let s = session("2025-11-25");
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["transport"], "streamable-http");
        assert_eq!(serde_json::from_value::<Session>(v).unwrap(), s);
        let sse = Session { transport: Transport::Sse, ..s };
        assert_eq!(serde_json::to_value(&sse).unwrap()["transport"], "sse");
        assert_eq!(Transport::Sse.as_str(), "sse");
        assert_eq!(Transport::StreamableHttp.as_str(), "streamable-http");
    }

    #[test]
    fn discover_gives_a_stateless_session() {
        let s =
            stateless_session(&json!({"supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {}})).unwrap();
        assert_eq!(s, session("2026-07-28"));
        assert!(stateless_session(&json!({"supportedVersions": ["2025-11-25"]})).is_none());
        assert!(stateless_session(&json!({})).is_none());
    }

    // --- reading answers ---

    const SAMPLE: &str = concat!(
        ": keep-alive\n\n",
        "id: ev-0\ndata:\n\n",
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"sampling/createMessage\",\"params\":{}}\r\n\r\n",
        "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\r\ndata: \"params\":{\"level\":\"info\",\"data\":\"é\"}}\r\n\r\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n\n",
        "id: ev-5\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":2}}\n\n",
    );

    fn expected() -> Vec<Incoming> {
        vec![
            Incoming::Notification(
                json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}),
            ),
            Incoming::ServerRequest(
                json!({"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}),
            ),
            Incoming::Notification(
                json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"é"}}),
            ),
            Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}})),
        ]
    }

    #[test]
    fn sse_answer_split_at_every_byte() {
        let bytes = SAMPLE.as_bytes();
        for split in 0..=bytes.len() {
            let mut r = ReplyReader::new(json!(7));
            let mut out = Vec::new();
            r.feed_sse(&bytes[..split], &mut out).unwrap();
            r.feed_sse(&bytes[split..], &mut out).unwrap();
            r.finish_sse(&mut out).unwrap();
            assert_eq!(out, expected(), "split at {split}");
            assert!(r.is_done());
            assert_eq!(r.resume(), None);
        }
        // And one byte at a time.
        let mut r = ReplyReader::new(json!(7));
        let mut out = Vec::new();
        for b in bytes {
            r.feed_sse(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert!(r.is_done());
        r.finish_sse(&mut out).unwrap();
        assert_eq!(out, expected());
    }

    #[test]
    fn sse_answer_that_ends_early() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        r.feed_sse(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n", &mut out).unwrap();
        assert!(!r.is_done());
        let err = r.finish_sse(&mut out).unwrap_err();
        assert!(err.contains("request 1"), "{err}");
        assert_eq!(out.len(), 1);

        // A priming event with an id and retry: resumable, so not an error yet.
        let mut r = ReplyReader::new(json!(1));
        r.feed_sse(b"id: p-1\nretry: 2500\ndata:\n\n", &mut out).unwrap();
        r.finish_sse(&mut out).unwrap();
        assert_eq!(r.resume(), Some(("p-1", Some(2500))));
        // The resumed stream (after GET with Last-Event-ID) goes into the same reader.
        r.feed_sse(b"id: p-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &mut out).unwrap();
        r.finish_sse(&mut out).unwrap();
        assert!(r.is_done());
        assert_eq!(out.last(), Some(&Incoming::Response(json!({"jsonrpc":"2.0","id":1,"result":{}}))));
    }

    #[test]
    fn sse_errors() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        assert!(r.feed_sse(b"data: {not json\n\n", &mut out).unwrap_err().contains("not JSON"));
        let mut r = ReplyReader::with_max_event_bytes(json!(1), 16);
        let err = r.feed_sse(&[b'a'; 64], &mut out).unwrap_err();
        assert!(err.contains("16 bytes"), "{err}");
    }

    #[test]
    fn legacy_stream_endpoint_and_many_requests() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        r.feed_sse(b"event: endpoint\ndata: /messages?sessionId=abc\n\n", &mut out).unwrap();
        assert_eq!(r.endpoint(), Some("/messages?sessionId=abc"));
        assert!(out.is_empty() && !r.is_done());
        r.feed_sse(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", &mut out).unwrap();
        assert!(r.is_done());
        r.expect(json!(2));
        assert!(!r.is_done());
        r.feed_sse(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-1,\"message\":\"m\"}}\n\n",
            &mut out,
        )
        .unwrap();
        assert!(r.is_done());
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn json_bodies() {
        let r = ReplyReader::new(json!(7));
        let ok = r.json_body(r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#).unwrap();
        assert_eq!(ok, vec![Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{"tools":[]}}))]);

        let batch = r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{}},
                       {"jsonrpc":"2.0","id":6,"result":{}},
                       {"jsonrpc":"2.0","id":"s","method":"roots/list"},
                       {"jsonrpc":"2.0","id":7,"result":{}},
                       {"jsonrpc":"2.0","method":"notifications/progress"}]"#;
        let got = r.json_body(batch).unwrap();
        assert_eq!(got.len(), 3);
        assert!(matches!(got[0], Incoming::Notification(_)));
        assert!(matches!(got[1], Incoming::ServerRequest(_)));
        assert_eq!(got[2], Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{}})));

        let err = r.json_body(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#).unwrap_err();
        assert!(err.contains("no response to request 7"), "{err}");
        let string_id = r.json_body(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#);
        assert!(string_id.is_err(), "an id of another type is another id");

        let e = r.json_body(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}"#).unwrap();
        let Incoming::Response(resp) = &e[0] else { panic!("{e:?}") };
        assert_eq!(response_result("gh", resp).unwrap_err(), "upstream gh said: bad (code -32602)");
        // The server could not read our request: an error with a null id is still our answer.
        let e = r.json_body(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#).unwrap();
        assert!(matches!(e[0], Incoming::Response(_)));

        assert!(r.json_body("").unwrap_err().contains("empty body"));
        assert!(r.json_body("<html>").unwrap_err().contains("not JSON"));
        assert!(!r.is_done(), "json_body does not change the reader");
    }

    #[test]
    fn response_results_and_refusals() {
        assert_eq!(response_result("a", &json!({"id": 1, "result": {"x": 1}})), Ok(json!({"x": 1})));
        assert!(response_result("a", &json!({"id": 1})).unwrap_err().contains("neither"));
        let refusal =
            server_request_refusal(&json!({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage"}));
        assert_eq!(refusal["id"], "s1");
        assert_eq!(refusal["error"]["code"], -32601);
        assert!(refusal["error"]["message"].as_str().unwrap().contains("sampling/createMessage"));
    }

    // --- endpoint ---

    #[test]
    fn endpoint_resolution() {
        let base = "https://mcp.example.com/v1/sse?team=a";
        let ok = [
            ("/messages?sessionId=1", "https://mcp.example.com/messages?sessionId=1"),
            ("messages?sessionId=1", "https://mcp.example.com/v1/messages?sessionId=1"),
            ("../messages", "https://mcp.example.com/messages"),
            ("./a/../b", "https://mcp.example.com/v1/b"),
            ("?sessionId=2", "https://mcp.example.com/v1/sse?sessionId=2"),
            ("https://mcp.example.com/m?s=1#frag", "https://mcp.example.com/m?s=1"),
            ("HTTPS://MCP.example.com:443/m", "https://MCP.example.com:443/m"),
            ("//mcp.example.com/m", "https://mcp.example.com/m"),
            ("  /padded \n", "https://mcp.example.com/padded"),
            ("https://mcp.example.com", "https://mcp.example.com/"),
        ];
        for (data, want) in ok {
            assert_eq!(resolve_endpoint(base, data).as_deref(), Ok(want), "{data}");
        }
        assert_eq!(
            resolve_endpoint("http://127.0.0.1:8000/sse", "/messages/?session_id=x").as_deref(),
            Ok("http://127.0.0.1:8000/messages/?session_id=x")
        );
        let refused = [
            ("https://evil.example/messages", "https://evil.example", "https://mcp.example.com"),
            ("https://mcp.example.com:8443/m", "https://mcp.example.com:8443", "https://mcp.example.com"),
            ("http://mcp.example.com/m", "http://mcp.example.com", "https://mcp.example.com"),
            ("//evil.example/m", "https://evil.example", "https://mcp.example.com"),
        ];
        for (data, theirs, ours) in refused {
            let err = resolve_endpoint(base, data).unwrap_err();
            assert!(err.contains(theirs) && err.contains(ours), "{data}: {err}");
        }
        for bad in ["", "  ", "/a b", "https://user@mcp.example.com/m", "ftp://mcp.example.com/m", "/a\r\nX: y"] {
            assert!(resolve_endpoint(base, bad).is_err(), "{bad:?}");
        }
        assert!(resolve_endpoint("not a url", "/m").is_err());
    }

    #[test]
    fn dot_segments() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/../../x"), "/x");
        assert_eq!(remove_dot_segments("/a/b/.."), "/a/");
        assert_eq!(remove_dot_segments("/a/."), "/a/");
    }

    // --- headers ---

    #[test]
    fn header_value_problems() {
        assert_eq!(header_value_problem("Bearer abc.def"), None);
        assert_eq!(header_value_problem(""), None);
        assert_eq!(header_value_problem("a\rb"), Some("contains a line break (CR or LF)"));
        assert_eq!(header_value_problem("a\nb"), Some("contains a line break (CR or LF)"));
        assert_eq!(header_value_problem("a\0b"), Some("contains a NUL character"));
        for c in ['\x01', '\x0b', '\x0c', '\t', '\x1f', '\x7f'] {
            assert_eq!(header_value_problem(&format!("a{c}b")), Some("contains a control character"), "{c:?}");
        }
        assert_eq!(header_value_problem("clé"), Some("contains non-ASCII characters"));
        assert_eq!(header_value_problem(" a"), Some("starts or ends with whitespace"));
        assert_eq!(header_value_problem("a "), Some("starts or ends with whitespace"));
        assert_eq!(header_value_problem("a b"), None);
        assert!(
            is_header_name("X-Api-Key") && !is_header_name("X Key") && !is_header_name("") && !is_header_name("a:b")
        );
    }

    #[test]
    fn merge_precedence_is_case_insensitive() {
        let statics = pairs(&[("Authorization", "Static s"), ("X-Team", "a"), ("x-keep", "k")]);
        let oauth = pairs(&[("authorization", "Bearer oauth")]);
        let forwarded = pairs(&[("AUTHORIZATION", "Bearer user"), ("X-TEAM", "b")]);
        let merged = merge_headers(&[&statics, &oauth, &forwarded]);
        assert_eq!(merged, pairs(&[("x-keep", "k"), ("AUTHORIZATION", "Bearer user"), ("X-TEAM", "b")]));
        let merged = merge_headers(&[&statics, &oauth, &[]]);
        assert_eq!(merged, pairs(&[("X-Team", "a"), ("x-keep", "k"), ("authorization", "Bearer oauth")]));
        assert_eq!(merge_headers(&[]), Vec::new());
        // Within one layer the later entry wins too.
        assert_eq!(merge_headers(&[&pairs(&[("a", "1"), ("A", "2")])]), pairs(&[("A", "2")]));
    }

    #[test]
    fn forwarding_headers() {
        let incoming = |name: &str| match name.to_ascii_lowercase().as_str() {
            "x-user-token" => Some("tok-123".to_string()),
            "x-empty" => Some(String::new()),
            "x-evil" => Some("secret\r\nX-Injected: 1".to_string()),
            _ => None,
        };
        let cfg = json!({"forward_headers": {"Authorization": "X-User-Token"}});
        assert_eq!(forwarded_headers(&cfg, &incoming), Ok(pairs(&[("Authorization", "tok-123")])));
        assert_eq!(forwarded_headers(&json!({}), &incoming), Ok(Vec::new()));

        // deny (the default): a missing or empty header stops the call, named.
        for from in ["X-Missing", "X-Empty"] {
            let cfg = json!({"forward_headers": {"X-Up": from}});
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains(from) && err.contains("X-Up"), "{err}");
        }
        // passthrough: the call goes on without it.
        let cfg =
            json!({"forward_headers": {"X-Up": "X-Missing", "X-Tok": "x-user-token"}, "on_missing": "passthrough"});
        assert_eq!(forwarded_headers(&cfg, &incoming), Ok(pairs(&[("X-Tok", "tok-123")])));

        // Unsafe values are refused whatever on_missing says, and never echoed.
        for on_missing in ["deny", "passthrough"] {
            let cfg = json!({"forward_headers": {"X-Up": "X-Evil"}, "on_missing": on_missing});
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains("X-Evil") && err.contains("line break"), "{err}");
            assert!(!err.contains("secret") && !err.contains("Injected"), "{err}");
        }

        for (cfg, needle) in [
            (json!({"forward_headers": ["x"]}), "must be an object"),
            (json!({"forward_headers": {"X-Up": "X-User-Token"}, "on_missing": "ignore"}), "on_missing"),
            (json!({"forward_headers": {"Bad Name": "X-User-Token"}}), "not a valid header name"),
            (json!({"forward_headers": {"X-Up": 3}}), "must name an incoming header"),
            (json!({"forward_headers": {"mcp-session-id": "X-User-Token"}}), "sets this header itself"),
        ] {
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains(needle), "{cfg}: {err}");
        }
    }

    // --- OAuth ---

    fn resolve(s: &str) -> Result<String, String> {
        match s {
            "$CLIENT_SECRET" => Ok("s3cret".into()),
            "$RT" => Ok("rt-from-env".into()),
            // Like the shell's resolver: a plain literal comes back as it is.
            other if !other.starts_with('$') => Ok(other.to_string()),
            other => Err(other[1..].to_string()),
        }
    }

    #[test]
    fn oauth_config_reads_and_resolves() {
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://auth.example/token", "client_id": "cid", "client_secret": "$CLIENT_SECRET",
                    "scope": "read write", "audience": "https://api.example"}),
            &resolve,
        )
        .unwrap();
        assert_eq!(cfg.grant_type, "client_credentials");
        assert_eq!(cfg.client_secret.as_deref(), Some("s3cret"));
        assert_eq!((cfg.refresh_skew_seconds, cfg.default_expires_in), (60, 3600));
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("s3cret") && dbg.contains("***"), "{dbg}");

        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://auth.example/token", "grant_type": "refresh_token", "client_id": "cid",
                    "refresh_token": "$RT", "refresh_skew_seconds": 30, "default_expires_in": 600}),
            &resolve,
        )
        .unwrap();
        assert_eq!(cfg.refresh_token.as_deref(), Some("rt-from-env"));
        assert_eq!(cfg.client_secret, None);
        assert_eq!((cfg.refresh_skew_seconds, cfg.default_expires_in), (30, 600));

        let literal = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "sealed:literal"}),
            &|s: &str| -> Result<String, String> { Ok(s.replace("sealed:", "")) },
        )
        .unwrap();
        assert_eq!(literal.client_secret.as_deref(), Some("literal"));

        for (v, needle) in [
            (json!("x"), "must be an object"),
            (json!({"client_id": "c", "client_secret": "s"}), "token_url is required"),
            (json!({"token_url": "ftp://x", "client_id": "c", "client_secret": "s"}), "token_url"),
            (json!({"token_url": "https://a/t", "client_secret": "s"}), "client_id is required"),
            (json!({"token_url": "https://a/t", "client_id": "c"}), "client_secret is required"),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "grant_type": "refresh_token"}),
                "refresh_token is required",
            ),
            (json!({"token_url": "https://a/t", "client_id": "c", "grant_type": "password"}), "grant_type"),
            (json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "$MISSING"}), "$MISSING"),
            (json!({"token_url": "https://a/t", "client_id": "c", "client_secret": 5}), "must be a string"),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "s", "refresh_skew_seconds": -1}),
                "whole number",
            ),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "s", "default_expires_in": 0}),
                "at least 1",
            ),
        ] {
            let err = OAuthConfig::from_value(&v, &resolve).unwrap_err();
            assert!(err.contains(needle), "{v}: {err}");
        }
    }

    #[test]
    fn token_forms() {
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "cid", "client_secret": "sec", "scope": "a b", "audience": "aud"}),
            &resolve,
        )
        .unwrap();
        assert_eq!(
            token_form(&cfg, None),
            pairs(&[
                ("grant_type", "client_credentials"),
                ("client_id", "cid"),
                ("client_secret", "sec"),
                ("scope", "a b"),
                ("audience", "aud")
            ])
        );
        // A refresh token handed out with the last token is used next.
        let current = OAuthToken {
            access_token: "at".into(),
            token_type: "Bearer".into(),
            expires_at_ms: 0,
            refresh_token: Some("rotated".into()),
        };
        assert_eq!(
            token_form(&cfg, Some(&current)),
            pairs(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", "rotated"),
                ("client_id", "cid"),
                ("client_secret", "sec"),
                ("scope", "a b")
            ])
        );
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "cid", "grant_type": "refresh_token", "refresh_token": "r0"}),
            &resolve,
        )
        .unwrap();
        assert_eq!(
            token_form(&cfg, None),
            pairs(&[("grant_type", "refresh_token"), ("refresh_token", "r0"), ("client_id", "cid")])
        );
        let no_rotation = OAuthToken { refresh_token: None, ..current };
        assert_eq!(token_form(&cfg, Some(&no_rotation))[1].1, "r0");
    }

    #[test]
    fn token_responses() {
        let now = 1_000_000;
        let t = parse_token(
            &json!({"access_token": "at", "token_type": "bearer", "expires_in": 120, "refresh_token": "rt"}),
            now,
            3600,
        )
        .unwrap();
        assert_eq!(
            t,
            OAuthToken {
                access_token: "at".into(),
                token_type: "Bearer".into(),
                expires_at_ms: now + 120_000,
                refresh_token: Some("rt".into())
            }
        );
        assert_eq!(authorization_header(&t), ("Authorization".to_string(), "Bearer at".to_string()));
        let t = parse_token(&json!({"access_token": "at"}), now, 3600).unwrap();
        assert_eq!((t.token_type.as_str(), t.expires_at_ms, t.refresh_token), ("Bearer", now + 3_600_000, None));
        assert_eq!(
            parse_token(&json!({"access_token": "at", "expires_in": "60"}), now, 3600).unwrap().expires_at_ms,
            now + 60_000
        );
        assert_eq!(
            parse_token(&json!({"access_token": "at", "expires_in": 59.9}), now, 3600).unwrap().expires_at_ms,
            now + 59_000
        );
        assert_eq!(
            parse_token(&json!({"access_token": "at", "token_type": "DPoP"}), now, 1).unwrap().token_type,
            "DPoP"
        );

        let err =
            parse_token(&json!({"error": "invalid_client", "error_description": "bad secret"}), now, 3600).unwrap_err();
        assert!(err.contains("invalid_client: bad secret"), "{err}");
        assert!(parse_token(&json!({}), now, 3600).unwrap_err().contains("no access_token"));
        let err = parse_token(&json!({"access_token": "SECRETVALUE\r\nX: y"}), now, 3600).unwrap_err();
        assert!(err.contains("line break") && !err.contains("SECRETVALUE"), "{err}");
        assert!(parse_token(&json!({"access_token": "at", "expires_in": "soon"}), now, 3600).is_err());
        assert!(parse_token(&json!({"access_token": "at", "token_type": "a b"}), now, 3600).is_err());
    }

    #[test]
    fn refresh_timing() {
        let t = OAuthToken {
            access_token: "a".into(),
            token_type: "Bearer".into(),
            expires_at_ms: 100_000,
            refresh_token: None,
        };
        assert!(!needs_refresh(&t, 39_999, 60));
        assert!(needs_refresh(&t, 40_000, 60), "expires_at == now + skew refreshes");
        assert!(needs_refresh(&t, 100_000, 0));
        assert!(!needs_refresh(&t, 99_999, 0));
        assert!(needs_refresh(&t, 200_000, 60));
        // Huge values saturate instead of overflowing.
        assert!(needs_refresh(&OAuthToken { expires_at_ms: u64::MAX, ..t.clone() }, u64::MAX - 1, u64::MAX));
        assert!(!needs_refresh(&OAuthToken { expires_at_ms: u64::MAX, ..t }, u64::MAX - 100_000, 60));
    }

    #[test]
    fn form_encoding() {
        let f = pairs(&[("grant_type", "client_credentials"), ("scope", "a b"), ("secret", "p&s=1+2/é~*")]);
        assert_eq!(form_urlencode(&f), "grant_type=client_credentials&scope=a+b&secret=p%26s%3D1%2B2%2F%C3%A9%7E*");
        assert_eq!(form_urlencode(&[]), "");
    }

    // --- aggregation and downgrades ---

    fn upstream_tools() -> Vec<Value> {
        vec![
            json!({"name": "search", "description": "Search", "inputSchema": {"type": "object"}}),
            json!({"name": "create issue", "inputSchema": {"type": "object"}}),
            json!({"name": "create_issue", "inputSchema": {"type": "object"}}),
            json!({"name": "delete", "inputSchema": {"type": "object"}}),
            json!({"description": "no name"}),
            json!({"name": ""}),
        ]
    }

    fn names(tools: &[ExposedTool]) -> Vec<(&str, &str)> {
        tools.iter().map(|t| (t.name.as_str(), t.upstream_name.as_str())).collect()
    }

    #[test]
    fn aggregation_names_and_uniqueness() {
        let all = aggregate("My GitHub", "0123abcd", &json!({}), &upstream_tools());
        assert_eq!(
            names(&all),
            [
                ("My_GitHub_search", "search"),
                ("My_GitHub_create_issue", "create issue"),
                ("My_GitHub_create_issue_2", "create_issue"),
                ("My_GitHub_delete", "delete")
            ]
        );
        assert_eq!(all[0].tool, upstream_tools()[0], "the upstream definition is kept as it came");
        let cjk = aggregate("工具", "0123abcd-ef", &json!({"tool_name_prefix": true}), &upstream_tools()[..1]);
        assert_eq!(cjk[0].name, "app_0123abcd_search");
        let bare = aggregate("gh", "id", &json!({"tool_name_prefix": false}), &upstream_tools());
        assert_eq!(bare[0].name, "search");
        assert_eq!(bare[1].name, "create_issue");
        assert_eq!(bare[2].name, "create_issue_2");

        let long = "x".repeat(200);
        let tools = vec![json!({"name": long}), json!({"name": format!("{long}y")})];
        let got = aggregate("gh", "id", &json!({}), &tools);
        assert_eq!(got[0].name.len(), MAX_EXPOSED_NAME);
        assert_eq!(got[1].name.len(), MAX_EXPOSED_NAME);
        assert!(got[1].name.ends_with("_2"));
        for t in &got {
            assert!(t.name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
        }
    }

    #[test]
    fn aggregation_filters_match_upstream_names() {
        let t = upstream_tools();
        let got = aggregate("gh", "id", &json!({"allowed_tools": ["search", "delete", "gh_search"]}), &t);
        assert_eq!(names(&got), [("gh_search", "search"), ("gh_delete", "delete")]);
        let got = aggregate("gh", "id", &json!({"denied_tools": ["delete", "gh_search"]}), &t);
        assert_eq!(names(&got).len(), 3);
        assert!(got.iter().all(|x| x.upstream_name != "delete"));
        let got =
            aggregate("gh", "id", &json!({"allowed_tools": ["search", "delete"], "denied_tools": ["delete"]}), &t);
        assert_eq!(names(&got), [("gh_search", "search")]);
        assert!(aggregate("gh", "id", &json!({"allowed_tools": []}), &t).is_empty());
        assert!(aggregate("gh", "id", &json!({"allowed_tools": "search"}), &t).is_empty(), "malformed: nothing");
        assert!(aggregate("gh", "id", &json!({"denied_tools": [1]}), &t).is_empty(), "malformed: nothing");
    }

    #[test]
    fn tools_downgraded_per_version() {
        let t = ExposedTool {
            name: "gh_search".into(),
            upstream_name: "search".into(),
            tool: json!({"name": "search", "title": "Search", "description": "d", "inputSchema": {"type": "object"},
                         "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true},
                         "icons": [{"src": "https://x/i.png"}], "execution": {"taskSupport": "optional"}, "_meta": {"k": 1}}),
        };
        let keys =
            |v: Version| -> Vec<String> { tool_for_client(&t, v).as_object().unwrap().keys().cloned().collect() };
        assert_eq!(keys(V2024_11_05), ["name", "description", "inputSchema", "_meta"]);
        assert_eq!(keys(V2025_03_26), ["name", "description", "inputSchema", "annotations", "_meta"]);
        assert_eq!(
            keys(V2025_06_18),
            ["name", "title", "description", "inputSchema", "outputSchema", "annotations", "_meta"]
        );
        let all = [
            "name",
            "title",
            "description",
            "inputSchema",
            "outputSchema",
            "annotations",
            "icons",
            "execution",
            "_meta",
        ];
        assert_eq!(keys(V2025_11_25), all);
        assert_eq!(keys(V2026_07_28), all);
        assert_eq!(tool_for_client(&t, V2025_11_25)["name"], "gh_search");
        let bare = ExposedTool { name: "n".into(), upstream_name: "n".into(), tool: json!({"name": "n"}) };
        assert_eq!(tool_for_client(&bare, V2025_11_25), json!({"name": "n", "inputSchema": {"type": "object"}}));
    }

    #[test]
    fn results_downgraded_per_version() {
        let r = json!({
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "description": "the file"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "image", "data": "BBBB", "mimeType": "image/png"}
            ],
            "structuredContent": {"n": 1},
            "isError": false
        });
        for v in [V2025_06_18, V2025_11_25, V2026_07_28] {
            assert_eq!(result_for_client(&r, v), r, "{v:?}");
        }
        let old = result_for_client(&r, V2025_03_26);
        assert!(old.get("structuredContent").is_none());
        assert_eq!(old["content"][1], json!({"type": "text", "text": "a.txt: file:///a.txt (the file)"}));
        assert_eq!(old["content"][2], r["content"][2], "audio is fine in 2025-03-26");
        assert_eq!(old["content"][3], r["content"][3]);
        assert_eq!(old["isError"], false);
        let oldest = result_for_client(&r, V2024_11_05);
        assert_eq!(oldest["content"][2]["type"], "text");
        assert!(oldest["content"][2]["text"].as_str().unwrap().contains("audio/wav"));
        assert_eq!(oldest["content"][0], r["content"][0]);

        // Only structured content: old clients get its JSON as text.
        let s = result_for_client(&json!({"content": [], "structuredContent": {"n": 1}}), V2025_03_26);
        assert_eq!(s, json!({"content": [{"type": "text", "text": "{\"n\":1}"}]}));
        assert_eq!(result_for_client(&json!("odd"), V2024_11_05), json!("odd"));
    }

    #[test]
    fn upstream_errors_in_words() {
        let e = json!({"code": -32602, "message": "Unknown tool: foo"});
        assert_eq!(upstream_error_message("github", &e), "upstream github said: Unknown tool: foo (code -32602)");
        let whole = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom\nstack"}});
        assert_eq!(upstream_error_message("gh", &whole), "upstream gh said: boom stack (code -32603)");
        assert_eq!(upstream_error_message("gh", &json!({"code": 5})), "upstream gh said: (no message) (code 5)");
        assert_eq!(upstream_error_message("gh", &json!({"message": "m"})), "upstream gh said: m");
        let long = upstream_error_message("gh", &json!({"code": 1, "message": "z".repeat(10_000)}));
        assert!(long.len() < 1000, "{}", long.len());
    }
}
