//! The MCP client for upstream MCP servers (apps of mode `mcp`): transports, sessions, tool
//! lists and proxied calls. The protocol decisions are in `pure::backend::mcp`; this is the IO.
//!
//! Sessions of Streamable HTTP upstreams are kept in KV per app and reused by every isolate
//! (a 404 means the upstream dropped it: re-initialize once and retry). The legacy HTTP+SSE
//! transport binds a session to one event stream: a `LegacySession` Durable Object per caller
//! holds it across requests (`legacy_session`); without the object, it is opened per request.

use std::time::Duration;

use crate::json;
use crate::runtime::{ByteStream, Env, Headers, InvalidHeader, Method};
use serde_json::Value;

use std::cell::RefCell;
use std::rc::Rc;

use crate::pure::backend::mcp::binding;
use crate::pure::backend::mcp::catalog::{self, List};
use crate::pure::backend::mcp::headers::{forwarded_headers, header_value_problem, merge_headers};
use crate::pure::backend::mcp::legacy_sse::resolve_endpoint;
use crate::pure::backend::mcp::replies::{response_result, Incoming, ReplyReader};
use crate::pure::backend::mcp::session::{
    check_pinned, declaring, discover_request, initialize_offering, initialized_notification, param_headers,
    parse_initialize, request_headers, retry_rejected_version, session_request, stateless_session, tools_call_request,
    tools_list_request, Session, OFFERED_VERSION,
};
use crate::pure::backend::mcp::transport::{
    falls_back_to_sse, first_transport, init_failure_message, InitFailure, Transport, TransportChoice, ACCEPT,
};
use crate::pure::backend::mcp::variant::{Variant, DECLARED_ENTRY};
use crate::pure::backend::settings::DEFAULT_MAX_RESULT_BYTES;
use crate::pure::definition::AppDefinition;
use crate::pure::mcp::upstream_tasks::{self};
use crate::pure::protocol::version::Version;

use crate::shell::backend::mcp::legacy_session;
use crate::shell::kv::Kv;
use crate::shell::memo::{self, UpstreamFact::LegacyOnly};
use crate::shell::outbound::{self, Answer, ChunkEnd, Deadline, SendError};
use crate::shell::platform;
use crate::shell::secrets;

/// KV expiry of a reused upstream session (upstreams drop idle sessions on their own anyway).
const SESSION_TTL_S: u64 = 3600;
const MAX_TOOL_PAGES: usize = 50;
/// How often one answer's event stream may be resumed (each after the upstream's `retry`).
const MAX_RESUMES: u32 = 20;

/// Reads one header of the client's request, by name.
pub type HeaderLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where and how to reach one upstream, resolved for one request.
pub struct Upstream {
    pub app_name: String,
    pub app_id: String,
    pub url: String,
    pub choice: TransportChoice,
    /// `backend.protocol_version`: the one revision spoken; `None` negotiates.
    pub protocol: Option<Version>,
    pub init_timeout: Duration,
    pub call_timeout: Duration,
    /// Static, OAuth and forwarded headers, merged in that order of precedence.
    pub headers: Vec<(String, String)>,
    /// Which cached session this request may use (`binding::session_scope`): one per origin
    /// and backend, caller and forwarded credential, so callers never share an upstream session.
    pub session_scope: String,
    /// What the calling client declared (`variant`): what the upstream is told at initialize
    /// (or in a 2026-07-28 list's `_meta`); sessions are kept per scope and variant.
    pub declared: Variant,
    /// The app's `max_result_bytes`: bounds how much of one answer is read.
    pub max_result_bytes: usize,
    /// The app, when its `Authorization` comes from `backend.oauth` (no forwarded header
    /// overrides it): a 401/403 challenge then gets a new token, once per request.
    pub oauth_app: Option<AppDefinition>,
}

/// Resolves an app's upstream settings; `Err` says what is wrong in words a person can act on.
/// `incoming` reads the client request's headers for `forward_headers`; `None` (a shared tool
/// list, a background task) leaves request-scoped headers out.
pub async fn upstream_of(
    app: &AppDefinition,
    env: &Env,
    incoming: Option<HeaderLookup<'_>>,
) -> Result<Upstream, String> {
    let Some(b) = app.backend.as_mcp() else {
        return Err(format!("the app '{}' is not an MCP server app", app.name));
    };
    let mut statics = Vec::new();
    for (name, raw) in &b.headers {
        let v = secrets::resolve(env, raw).map_err(|e| format!("header {name} of app '{}' {e}", app.name))?;
        if let Some(why) = header_value_problem(&v) {
            return Err(format!("header {name} of app '{}' {why}, so it was not sent", app.name));
        }
        statics.push((name.clone(), v));
    }
    let oauth = match b.oauth.as_ref().filter(|o| o.is_object()) {
        Some(_) => vec![crate::shell::backend::mcp::oauth::authorization(env, app).await?],
        None => Vec::new(),
    };
    let forwarded = match incoming {
        Some(incoming) => forwarded_headers(&b.forward_headers, b.on_missing, incoming)?,
        None => Vec::new(),
    };
    let oauth_app = (!oauth.is_empty() && !forwarded.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization")))
        .then(|| app.clone());
    // Keyed by origin, backend, caller and forwarded credentials (`binding`): a session is
    // never reused across callers nor sent to another upstream.
    let caller = incoming.and_then(|lookup| lookup(binding::CALLER_ENTRY));
    let session_scope = binding::session_scope(b, caller.as_deref(), &forwarded);
    let declared = incoming.and_then(|lookup| lookup(DECLARED_ENTRY)).map_or(Variant::none(), |k| Variant::parse(&k));
    Ok(Upstream {
        app_name: app.name.clone(),
        app_id: app.id.clone(),
        url: b.url.clone(),
        choice: b.transport,
        protocol: b.protocol_version,
        init_timeout: b.init_timeout(),
        // The relay's own deadline (tool_call_timeout, see `call::upstream_backend`) is what
        // ends a call and cancels it upstream; the client's bound is a backstop a little later.
        call_timeout: b.call_timeout() + Duration::from_secs(5),
        headers: merge_headers(&[&statics, &oauth, &forwarded]),
        session_scope,
        declared,
        max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        oauth_app,
    })
}

// One per request, never stored in bulk: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Conn {
    Http(Session),
    Sse {
        session: Session,
        endpoint: String,
        stream: ByteStream,
        reader: ReplyReader,
    },
    /// A legacy session the caller's Durable Object keeps (`legacy_session`).
    Legacy(legacy_session::Opened),
}

/// What the legacy session object needs of `up` for one request sent with `headers`.
fn legacy_reach<'a>(up: &'a Upstream, headers: &'a Headers) -> legacy_session::Reach<'a> {
    legacy_session::Reach {
        app: &up.app_name,
        sse_url: &up.url,
        headers,
        protocol: up.protocol,
        init_timeout: up.init_timeout,
        declared: up.declared,
    }
}

/// A client bound to one upstream for the length of one request.
pub struct Client<'a> {
    up: &'a Upstream,
    env: &'a Env,
    pub(super) conn: Option<Conn>,
    next_id: u64,
    /// Whether the session came from the KV cache (a 404 then means "re-initialize once").
    cached: bool,
    /// Where the request in flight went (session and message URL), for answering what the
    /// upstream asks while it runs; set by each attempt of [`Client::request`].
    live: Rc<RefCell<Option<(Session, String)>>>,
    /// The `Authorization` header a challenge got (replacing the one in `up.headers`).
    auth: RefCell<Option<(String, String)>>,
}

/// The KV key of the session `up` may use: one per scope and declared variant, since the
/// upstream offers each declared set its own tools.
pub(super) fn session_key(up: &Upstream) -> String {
    crate::shell::platform::upstream_session_key(&up.app_id, &format!("{}:{}", up.session_scope, up.declared.key()))
}

impl<'a> Client<'a> {
    pub fn new(up: &'a Upstream, env: &'a Env) -> Self {
        Client { up, env, conn: None, next_id: 1, cached: false, live: Rc::default(), auth: RefCell::new(None) }
    }

    /// Another client of the same upstream, unconnected: for messages posted beside a request
    /// in flight (refusals of the upstream's own requests).
    pub fn sibling(&self) -> Client<'a> {
        Client::new(self.up, self.env)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Connects: a cached Streamable HTTP session when there is one, else a handshake over the
    /// transport `auto` (or the app's setting) picks, falling back to SSE only on the signals of
    /// an old server and never on 401/403. In auto mode an upstream found to speak only the
    /// legacy transport is remembered (for the caller's scope in KV, beside where its session
    /// would be, and for the app's URL in this isolate), so later requests go to its stream
    /// without the two Streamable HTTP probes it refuses; when that stream fails, the probes run
    /// again (the server may have moved to Streamable HTTP).
    pub async fn connect(&mut self, use_cache: bool) -> Result<(), String> {
        let up = self.up;
        let auto = up.choice == TransportChoice::Auto;
        let mut known_legacy = auto && memo::upstream_fact(LegacyOnly, &up.app_id, &up.url, platform::now_ms());
        let mut stored_legacy = false;
        if use_cache {
            match Kv::new(self.env).get_json::<Session>(&session_key(up)).await {
                Ok(Some(s)) if s.transport == Transport::StreamableHttp => {
                    self.conn = Some(Conn::Http(s));
                    self.cached = true;
                    return Ok(());
                }
                Ok(Some(s)) if s.transport == Transport::Sse && auto => (known_legacy, stored_legacy) = (true, true),
                _ => {}
            }
        }
        if known_legacy && first_transport(up.choice, &up.url) == Transport::StreamableHttp {
            if self.open_legacy(&up.url).await.is_ok() {
                if !stored_legacy {
                    self.remember_legacy().await;
                }
                return Ok(());
            }
            memo::forget_upstream_fact(LegacyOnly, &up.app_id, &up.url);
            self.forget().await;
        }
        match first_transport(up.choice, &up.url) {
            Transport::Sse => self.open_legacy(&up.url).await,
            Transport::StreamableHttp => match self.init_http().await {
                Ok(session) => {
                    self.remember(&session).await;
                    self.conn = Some(Conn::Http(session));
                    Ok(())
                }
                // A stateless revision has no SSE transport to fall back to.
                Err(f)
                    if !up.protocol.is_some_and(Version::is_stateless)
                        && falls_back_to_sse(up.choice, Transport::StreamableHttp, &f) =>
                {
                    self.open_legacy(&up.url).await?;
                    self.remember_legacy().await;
                    Ok(())
                }
                Err(f) => Err(init_failure_message(&up.app_name, &f)),
            },
        }
    }

    /// Records that this upstream speaks only the legacy transport: in this isolate for its URL,
    /// and in KV for this caller's scope as a session record of transport `sse` (no session id:
    /// the session itself lives in its `LegacySession` object).
    async fn remember_legacy(&self) {
        let up = self.up;
        memo::remember_upstream_fact(LegacyOnly, &up.app_id, &up.url, platform::now_ms());
        let session = match &self.conn {
            Some(Conn::Legacy(opened)) => &opened.session,
            Some(Conn::Sse { session, .. }) => session,
            _ => return,
        };
        self.remember(&Session { transport: Transport::Sse, session_id: None, ..session.clone() }).await;
    }

    /// A Streamable HTTP session of this client's own: a fresh `initialize`, neither taken from
    /// the KV cache nor kept there, for a holder of its standalone stream that shares it with no
    /// call (a client session's object following list changes). `Ok(None)` for an upstream on
    /// the legacy transport.
    pub async fn open_own_session(&mut self) -> Result<Option<Session>, String> {
        let up = self.up;
        let legacy = first_transport(up.choice, &up.url) == Transport::Sse
            || (up.choice == TransportChoice::Auto
                && memo::upstream_fact(LegacyOnly, &up.app_id, &up.url, platform::now_ms()));
        if legacy {
            return Ok(None);
        }
        let session = self.init_http().await.map_err(|f| init_failure_message(&self.up.app_name, &f))?;
        self.conn = Some(Conn::Http(session.clone()));
        Ok(Some(session))
    }

    async fn remember(&self, session: &Session) {
        let key = session_key(self.up);
        if let Err(e) = Kv::new(self.env).put_json(&key, session, SESSION_TTL_S).await {
            crate::shell::log::error(&format!("caching an upstream session: {e}"));
        }
    }

    async fn forget(&self) {
        let _ = Kv::new(self.env).delete(&session_key(self.up)).await;
    }

    fn headers(&self, session: Option<&Session>, method: &str, name: Option<&str>) -> Result<Headers, String> {
        let mut h = Headers::new();
        h.set("content-type", "application/json");
        h.set("accept", ACCEPT);
        let set = |h: &mut Headers| -> Result<(), InvalidHeader> {
            for (k, v) in &self.up.headers {
                h.try_set(k, v)?;
            }
            if let Some((k, v)) = self.auth.borrow().as_ref() {
                h.try_set(k, v)?;
            }
            for (k, v) in session.map(|s| request_headers(s, method, name)).unwrap_or_default() {
                h.try_set(k, &v)?;
            }
            Ok(())
        };
        match set(&mut h) {
            Ok(()) => Ok(h),
            Err(e) => Err(format!("a header for upstream {} cannot be set: {e}", self.up.app_name)),
        }
    }

    /// The headers of a `GET` for one of the session's event streams (an answer's, resumed, or
    /// the standalone one): the session's credentials, `Accept: text/event-stream`.
    pub(super) fn stream_headers(&self, session: &Session) -> Result<Headers, String> {
        let mut h = self.headers(Some(session), "", None)?;
        h.set("accept", "text/event-stream");
        Ok(h)
    }

    /// POSTs `body` to `url`, answering a challenge as [`Client::exchange`] does.
    async fn post(
        &self,
        url: &str,
        headers: &dyn Fn() -> Result<Headers, String>,
        body: &Value,
        timeout: Duration,
    ) -> Result<Answer, SendError> {
        self.exchange(Method::Post, url, headers, Some(body), timeout).await
    }

    /// Sends one request of the session; when the upstream refuses with a challenge a new OAuth
    /// token can answer (401, or 403 insufficient_scope) and the app's token comes from
    /// `backend.oauth`, the token broker gets a new token and the request is sent once more
    /// (never twice).
    pub(super) async fn exchange(
        &self,
        method: Method,
        url: &str,
        headers: &dyn Fn() -> Result<Headers, String>,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Answer, SendError> {
        let resp =
            outbound::send(method.clone(), url, headers().map_err(SendError::unsendable)?, body, timeout).await?;
        let status = resp.status_code();
        let Some(app) = self.up.oauth_app.as_ref().filter(|_| matches!(status, 401 | 403)) else { return Ok(resp) };
        let www = resp.headers().get("www-authenticate");
        let used = headers().ok().and_then(|h| h.get("authorization")).unwrap_or_default();
        match crate::shell::backend::mcp::oauth::reauthorize(self.env, app, status, www.as_deref(), &used).await {
            Ok(h) => *self.auth.borrow_mut() = Some(h),
            // Not a challenge a token answers, or no new token: the refusal stands, with the
            // broker's reason in the log (the caller reports the refusal).
            Err(e) => {
                crate::shell::log::error(&format!("re-authorizing app '{}' after HTTP {status}: {e}", app.name));
                return Ok(resp);
            }
        }
        outbound::send(method, url, headers().map_err(SendError::unsendable)?, body, timeout).await
    }

    /// Streamable HTTP handshake: initialize, or `server/discover` for a stateless upstream.
    async fn init_http(&mut self) -> Result<Session, InitFailure> {
        // Pinned to a stateless revision: never the 2025 initialize probe.
        if self.up.protocol.is_some_and(Version::is_stateless) {
            return self.discover().await;
        }
        let offered = self.up.protocol.unwrap_or(OFFERED_VERSION);
        let id = self.id();
        let headers = || self.headers(None, "initialize", None);
        let init = initialize_offering(id, offered, &self.up.declared.capabilities());
        let mut resp = match self.post(&self.up.url, &headers, &init, self.up.init_timeout).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => return Err(InitFailure::Timeout),
            Err(e) => return Err(InitFailure::Transport(format!("{e}"))),
        };
        let status = resp.status_code();
        if !(200..300).contains(&status) {
            let www = resp.headers().get("www-authenticate");
            let body =
                outbound::text(&mut resp, self.up.init_timeout, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
            if matches!(status, 400 | 404 | 405) && self.up.protocol.is_none() {
                if let Ok(s) = self.discover().await {
                    return Ok(s);
                }
            }
            return Err(InitFailure::Http { status, www_authenticate: www, body });
        }
        let session_id = resp.headers().get("mcp-session-id");
        let mut reader = ReplyReader::new(json!(id));
        let response =
            read_reply(resp, &mut reader, self.up.init_timeout, self.up.max_result_bytes, &mut |_| {}, None).await?;
        let result = response_result(&self.up.app_name, &response)?;
        let session = parse_initialize(&result, session_id, Transport::StreamableHttp)?;
        if let Some(pinned) = self.up.protocol {
            check_pinned(&session, pinned)?;
        }
        if !session.stateless {
            let headers = self.headers(Some(&session), "notifications/initialized", None)?;
            let _ = outbound::send(
                Method::Post,
                &self.up.url,
                headers,
                Some(&initialized_notification()),
                self.up.init_timeout,
            )
            .await;
        }
        Ok(session)
    }

    /// 2026-07-28 upstreams have no initialize: they answer `server/discover`. A 400 that
    /// rejects the version while listing it as supported is retried once.
    async fn discover(&mut self) -> Result<Session, InitFailure> {
        let probe = Session {
            transport: Transport::StreamableHttp,
            protocol_version: Version::V2026_07_28.as_str().into(),
            session_id: None,
            stateless: true,
            capabilities: None,
        };
        let mut retried = false;
        let resp = loop {
            let id = self.id();
            let headers = || self.headers(Some(&probe), "server/discover", None);
            let mut resp = match self.post(&self.up.url, &headers, &discover_request(id), self.up.init_timeout).await {
                Ok(r) => r,
                Err(SendError::TimedOut) => return Err(InitFailure::Timeout),
                Err(e) => return Err(InitFailure::Transport(format!("{e}"))),
            };
            let status = resp.status_code();
            if (200..300).contains(&status) {
                break (resp, id);
            }
            let www = resp.headers().get("www-authenticate");
            let body =
                outbound::text(&mut resp, self.up.init_timeout, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
            if status == 400 && !retried && retry_rejected_version(&body, Version::V2026_07_28) {
                retried = true;
                continue;
            }
            return Err(InitFailure::Http { status, www_authenticate: www, body });
        };
        let (resp, id) = resp;
        let mut reader = ReplyReader::new(json!(id));
        let response =
            read_reply(resp, &mut reader, self.up.init_timeout, self.up.max_result_bytes, &mut |_| {}, None).await?;
        let result = response_result(&self.up.app_name, &response)?;
        stateless_session(&result).ok_or_else(|| {
            InitFailure::Transport(format!(
                "upstream {} answered server/discover without 2026-07-28 among its supportedVersions",
                self.up.app_name
            ))
        })
    }

    /// The legacy transport through the caller's session object; without it (or when it
    /// fails) a session of this request's own ([`Client::open_sse`]).
    async fn open_legacy(&mut self, sse_url: &str) -> Result<(), String> {
        let headers = self.headers(None, "", None)?;
        let object = crate::pure::backend::mcp::legacy_session::object_name(
            &self.up.app_id,
            &self.up.session_scope,
            &self.up.declared.key(),
        );
        match legacy_session::open(self.env, &object, &legacy_reach(self.up, &headers)).await {
            Ok(opened) => {
                self.conn = Some(Conn::Legacy(opened));
                Ok(())
            }
            Err(legacy_session::Failure::Upstream(why)) => Err(why),
            Err(legacy_session::Failure::Unavailable(why)) => {
                crate::shell::log::error(&format!("legacy SSE session object of app '{}': {why}", self.up.app_name));
                self.open_sse(sse_url).await
            }
        }
    }

    /// A request on the caller's legacy session; `None` when the object failed and the
    /// request must go on a session of its own (then connected as such).
    async fn legacy_request(
        &mut self,
        make: &dyn Fn(u64, &Session) -> Value,
        timeout: Duration,
        on_note: &mut dyn FnMut(Value),
    ) -> Option<Result<Value, String>> {
        if !matches!(self.conn, Some(Conn::Legacy(_))) {
            return None;
        }
        let Some(Conn::Legacy(mut opened)) = self.conn.take() else { return None };
        let headers = match self.headers(None, "", None) {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        let id = self.id();
        let body = make(id, &opened.session);
        let reach = legacy_reach(self.up, &headers);
        // The id the object sent it under is what a `notifications/cancelled` names, also when
        // the call is dropped before its answer.
        let sent_as = &mut self.next_id;
        let done = legacy_session::request(self.env, &mut opened, &reach, &body, timeout, &self.live, sent_as, on_note);
        let done = done.await;
        self.conn = Some(Conn::Legacy(opened));
        match done {
            Ok(response) => Some(Ok(response)),
            Err(legacy_session::Failure::Upstream(why)) => Some(Err(why)),
            Err(legacy_session::Failure::Unavailable(why)) => {
                crate::shell::log::error(&format!("legacy SSE session object of app '{}': {why}", self.up.app_name));
                self.conn = None;
                match self.open_sse(&self.up.url).await {
                    Ok(()) => None,
                    Err(e) => Some(Err(e)),
                }
            }
        }
    }

    /// The legacy transport: GET the event stream, wait for its `endpoint` event (same origin
    /// only), then initialize over it.
    async fn open_sse(&mut self, sse_url: &str) -> Result<(), String> {
        let app = self.up.app_name.clone();
        let mut headers = self.headers(None, "", None)?;
        headers.set("accept", "text/event-stream");
        let mut resp = match outbound::send(Method::Get, sse_url, headers, None, self.up.init_timeout).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => {
                return Err(format!(
                    "upstream {app} did not answer within {} s (session_init_timeout) on Streamable HTTP or SSE",
                    self.up.init_timeout.as_secs()
                ))
            }
            Err(e) => {
                let host = crate::pure::url::host_for_display(sse_url);
                return Err(format!("could not reach upstream {app} at {host}: {}", e));
            }
        };
        let status = resp.status_code();
        if !(200..300).contains(&status) {
            let www = resp.headers().get("www-authenticate");
            let body =
                outbound::text(&mut resp, self.up.init_timeout, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
            return Err(init_failure_message(&app, &InitFailure::Http { status, www_authenticate: www, body }));
        }
        let mut stream = resp.stream();
        let id = self.id();
        let mut reader = ReplyReader::new(json!(id));
        let mut deadline = Deadline::after(self.up.init_timeout);
        while reader.endpoint().is_none() {
            let chunk = deadline.next_chunk(&mut stream).await.map_err(|e| {
                format!(
                    "upstream {app} sent no endpoint event on its SSE stream ({e}; session_init_timeout {} s)",
                    self.up.init_timeout.as_secs()
                )
            })?;
            reader.feed_sse(&chunk, &mut Vec::new())?;
        }
        let endpoint = resolve_endpoint(sse_url, reader.endpoint().unwrap_or_default())?;
        let mut conn = Conn::Sse {
            session: Session {
                transport: Transport::Sse,
                protocol_version: OFFERED_VERSION.as_str().into(),
                session_id: None,
                stateless: false,
                capabilities: None,
            },
            endpoint,
            stream,
            reader,
        };
        let offered =
            initialize_offering(id, self.up.protocol.unwrap_or(OFFERED_VERSION), &self.up.declared.capabilities());
        let response = self.sse_request(&mut conn, offered, id, self.up.init_timeout, &mut |_| {}).await?;
        let result = response_result(&app, &response)?;
        let session = parse_initialize(&result, None, Transport::Sse)?;
        if let Some(pinned) = self.up.protocol {
            check_pinned(&session, pinned)?;
        }
        if let Conn::Sse { session: s, endpoint, .. } = &mut conn {
            *s = session.clone();
            let headers = self.headers(Some(&session), "notifications/initialized", None)?;
            let _ = outbound::send(
                Method::Post,
                endpoint,
                headers,
                Some(&initialized_notification()),
                self.up.init_timeout,
            )
            .await;
        }
        self.conn = Some(conn);
        Ok(())
    }

    async fn sse_request(
        &self,
        conn: &mut Conn,
        body: Value,
        id: u64,
        timeout: Duration,
        on_note: &mut dyn FnMut(Value),
    ) -> Result<Value, String> {
        let Conn::Sse { session, endpoint, stream, reader } = conn else { return Err("not an SSE connection".into()) };
        let method = body["method"].as_str().unwrap_or_default().to_string();
        let headers = self.headers(Some(session), &method, None)?;
        let app = &self.up.app_name;
        match outbound::send(Method::Post, endpoint, headers, Some(&body), timeout).await {
            Ok(r) if (200..300).contains(&r.status_code()) => {}
            Ok(r) => {
                return Err(format!("upstream {app} refused a message on its SSE endpoint (HTTP {})", r.status_code()))
            }
            Err(e) => return Err(format!("upstream {app} did not accept a message on its SSE endpoint: {}", e)),
        }
        reader.expect(json!(id));
        let mut deadline = Deadline::after(timeout);
        loop {
            let chunk = deadline.next_chunk(stream).await.map_err(|e| format!("upstream {app}: {e}"))?;
            let mut items = Vec::new();
            reader.feed_sse(&chunk, &mut items)?;
            for item in items {
                match item {
                    Incoming::Notification(n) | Incoming::ServerRequest(n) => on_note(n),
                    Incoming::Response(r) => return Ok(r),
                }
            }
        }
    }

    /// One request, with the connection's transport; a cached session the upstream no longer
    /// knows (404) is re-initialized once.
    pub async fn request(
        &mut self,
        make: &dyn Fn(u64, &Session) -> Value,
        name: Option<&str>,
        params: &[(String, String)],
        timeout: Duration,
        on_note: &mut dyn FnMut(Value),
    ) -> Result<Value, String> {
        if let Some(done) = self.legacy_request(make, timeout, on_note).await {
            return done;
        }
        for attempt in 0..2 {
            let id = self.id();
            let mut conn = self.conn.take().ok_or("not connected")?;
            *self.live.borrow_mut() = Some(match &conn {
                Conn::Http(s) => (s.clone(), self.up.url.clone()),
                Conn::Sse { session, endpoint, .. } => (session.clone(), endpoint.clone()),
                Conn::Legacy(l) => (l.session.clone(), l.endpoint.clone()),
            });
            let result = match &mut conn {
                // Taken by `legacy_request` above.
                Conn::Legacy(_) => Err(Attempt::Failed("the legacy session was not used".into())),
                Conn::Sse { session, .. } => {
                    let body = make(id, session);
                    self.sse_request(&mut conn, body, id, timeout, on_note).await.map_err(Attempt::Failed)
                }
                Conn::Http(session) => {
                    let body = make(id, session);
                    self.http_request(session, &body, id, (name, params), timeout, on_note).await
                }
            };
            self.conn = Some(conn);
            match result {
                Ok(v) => return Ok(v),
                // The upstream forgot the session: once, start a new one.
                Err(Attempt::SessionGone) if attempt == 0 => {
                    self.forget().await;
                    self.conn = None;
                    self.cached = false;
                    self.connect(false).await?;
                }
                Err(Attempt::SessionGone) => {
                    return Err(format!("upstream {} keeps rejecting its session (404)", self.up.app_name))
                }
                Err(Attempt::Failed(e)) => return Err(e),
            }
        }
        Err(format!("upstream {} could not be reached", self.up.app_name))
    }

    /// `Err(SessionGone)` is a 404 for the session id (re-initialize).
    async fn http_request(
        &self,
        session: &Session,
        body: &Value,
        id: u64,
        (name, params): (Option<&str>, &[(String, String)]),
        timeout: Duration,
        on_note: &mut dyn FnMut(Value),
    ) -> Result<Value, Attempt> {
        let app = &self.up.app_name;
        let method = body["method"].as_str().unwrap_or_default();
        let headers = || {
            let mut h = self.headers(Some(session), method, name)?;
            for (k, v) in param_headers(session, params) {
                h.try_set(k, v).map_err(|e| format!("the {k} header for upstream {app} cannot be set: {e}"))?;
            }
            Ok(h)
        };
        let mut resp = match self.post(&self.up.url, &headers, body, timeout).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => {
                return Err(Attempt::Failed(format!("upstream {app} did not answer within {} s", timeout.as_secs())))
            }
            Err(e) => return Err(Attempt::Failed(format!("could not reach upstream {app}: {}", e))),
        };
        let status = resp.status_code();
        if status == 404 && session.session_id.is_some() {
            return Err(Attempt::SessionGone);
        }
        if !(200..300).contains(&status) {
            let www = resp.headers().get("www-authenticate");
            let text = outbound::text(&mut resp, timeout, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
            if matches!(status, 401 | 403) {
                return Err(Attempt::Failed(init_failure_message(
                    app,
                    &InitFailure::Http { status, www_authenticate: www, body: text },
                )));
            }
            // A JSON-RPC error carried with an error status is still the upstream's answer.
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                if v.get("error").is_some() {
                    return Ok(v);
                }
            }
            let snippet: String = text.trim().chars().take(200).collect();
            return Err(Attempt::Failed(format!("upstream {app} answered HTTP {status}: {snippet}")));
        }
        let mut reader = ReplyReader::new(json!(id));
        let get = self.stream_headers(session)?;
        // Named like every other upstream failure: on a multi-app server the text alone must say
        // which upstream broke off or timed out.
        read_reply(resp, &mut reader, timeout, self.up.max_result_bytes, on_note, Some((&self.up.url, get)))
            .await
            .map_err(|e| Attempt::Failed(format!("upstream {app}: {e}")))
    }

    /// All of the upstream's tools, following `nextCursor`.
    pub async fn list_tools(&mut self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let declared = self.up.declared.capabilities();
        for _ in 0..MAX_TOOL_PAGES {
            let c = cursor.clone();
            let make = |id, s: &Session| tools_list_request(id, c.as_deref(), s, &declared);
            let response = self.request(&make, None, &[], self.up.init_timeout, &mut |_| {}).await?;
            let result = response_result(&self.up.app_name, &response)?;
            tools.extend(result["tools"].as_array().cloned().unwrap_or_default());
            match result["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
                _ => return Ok(tools),
            }
        }
        Err(format!("upstream {} lists more than {MAX_TOOL_PAGES} pages of tools", self.up.app_name))
    }

    /// The upstream's capabilities, when the session knows them.
    pub(super) fn capabilities(&self) -> Option<Value> {
        match &self.conn {
            Some(Conn::Http(s)) | Some(Conn::Sse { session: s, .. }) => s.capabilities.clone(),
            Some(Conn::Legacy(l)) => l.session.capabilities.clone(),
            None => None,
        }
    }

    /// All items of one of the upstream's lists, following `nextCursor`; "method not found"
    /// is an empty list (see `catalog::is_method_not_found`).
    pub(super) async fn list_all(&mut self, list: List) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let declared = self.up.declared.capabilities();
        for _ in 0..catalog::MAX_PAGES {
            let c = cursor.clone();
            let make = |id, s: &Session| {
                let mut p = serde_json::Map::new();
                if let Some(c) = &c {
                    p.insert("cursor".into(), c.clone().into());
                }
                session_request(id, list.method, declaring(p, &declared), s)
            };
            let response = self.request(&make, None, &[], self.up.init_timeout, &mut |_| {}).await?;
            if catalog::is_method_not_found(&response) {
                return Ok(items);
            }
            let result = response_result(&self.up.app_name, &response)?;
            items.extend(result[list.key].as_array().cloned().unwrap_or_default());
            match result["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
                _ => return Ok(items),
            }
        }
        Err(format!("upstream {} lists more than {} pages of {}", self.up.app_name, catalog::MAX_PAGES, list.key))
    }

    /// Calls a tool; notifications the upstream sends meanwhile go to `on_note` as they come.
    pub async fn call_tool(
        &mut self,
        name: &str,
        arguments: &Value,
        progress_token: Option<&Value>,
        input: &serde_json::Map<String, Value>,
        on_note: &mut dyn FnMut(Value),
    ) -> Result<Value, String> {
        self.call_tool_with(name, arguments, progress_token, input, &[], None, on_note).await
    }

    /// [`Client::call_tool`] with the call's `Mcp-Param-*` headers (`CallRequest::Mcp::params`),
    /// and as a task of the upstream's with `task_ttl_ms`.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_tool_with(
        &mut self,
        name: &str,
        arguments: &Value,
        progress_token: Option<&Value>,
        input: &serde_json::Map<String, Value>,
        params: &[(String, String)],
        task_ttl_ms: Option<u64>,
        on_note: &mut dyn FnMut(Value),
    ) -> Result<Value, String> {
        let timeout = self.up.call_timeout;
        let make = |id, s: &Session| match task_ttl_ms.zip(s.version()) {
            Some((ttl, version)) => {
                let mut asked = input.clone();
                upstream_tasks::ask_for_task(&mut asked, version, ttl);
                tools_call_request(id, name, arguments, progress_token, &asked, s)
            }
            None => tools_call_request(id, name, arguments, progress_token, input, s),
        };
        self.request(&make, Some(name), params, timeout, on_note).await
    }

    /// How long one call may take (the app's `call_timeout_seconds`).
    pub fn call_timeout(&self) -> Duration {
        self.up.call_timeout
    }

    /// The revision the connection speaks (once connected).
    pub fn protocol(&self) -> Option<Version> {
        match &self.conn {
            Some(Conn::Http(s)) | Some(Conn::Sse { session: s, .. }) => s.version(),
            Some(Conn::Legacy(l)) => l.session.version(),
            None => None,
        }
    }

    /// The Streamable HTTP session this client uses, as stored (for a cancel from elsewhere);
    /// `None` on the legacy SSE transport, whose session lives only as long as its stream.
    pub fn http_session(&self) -> Option<Value> {
        match &self.conn {
            Some(Conn::Http(s)) => serde_json::to_value(s).ok(),
            _ => None,
        }
    }

    /// The id of the latest request sent upstream (what a `notifications/cancelled` names).
    pub fn last_request_id(&self) -> u64 {
        self.next_id
    }

    /// Where a `notifications/cancelled` for this connection's requests goes: its session and
    /// the URL messages are posted to. Taken before a call, because a call in flight holds the
    /// connection and a dropped call does not give it back.
    pub fn cancel_target(&self) -> Option<(Session, String)> {
        match &self.conn {
            Some(Conn::Http(s)) => Some((s.clone(), self.up.url.clone())),
            Some(Conn::Sse { session, endpoint, .. }) => Some((session.clone(), endpoint.clone())),
            Some(Conn::Legacy(l)) => Some((l.session.clone(), l.endpoint.clone())),
            None => None,
        }
    }

    /// Tells the upstream that request `id` is cancelled, on the session it went out on (best
    /// effort: the upstream may have finished already).
    pub async fn notify_cancelled(&self, target: &(Session, String), id: u64, reason: &str) {
        let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": reason}});
        let _ = self.post_message(target, &body).await;
    }

    /// Posts one message that expects no answer (a notification, or a response to the
    /// upstream's own request) on a session: the HTTP status the upstream answered.
    pub async fn post_message(&self, target: &(Session, String), body: &Value) -> Result<u16, SendError> {
        let method = body.get("method").and_then(Value::as_str).unwrap_or_default();
        let h = self.headers(Some(&target.0), method, None).map_err(SendError::unsendable)?;
        Ok(outbound::send(Method::Post, &target.1, h, Some(body), Duration::from_secs(10)).await?.status_code())
    }

    /// Where the request in flight went, as [`Client::request`] last sent it.
    pub fn live_target(&self) -> Rc<RefCell<Option<(Session, String)>>> {
        Rc::clone(&self.live)
    }

    /// Ends a Streamable HTTP session (DELETE; 405 means the upstream keeps no sessions).
    pub async fn close(&mut self) {
        if let Some(Conn::Http(s)) = &self.conn {
            if s.session_id.is_some() {
                if let Ok(h) = self.headers(Some(s), "", None) {
                    let _ = outbound::send(Method::Delete, &self.up.url, h, None, Duration::from_secs(5)).await;
                }
            }
        }
        self.forget().await;
        self.conn = None;
    }
}

/// Reads the answer to one request: a JSON body, or an SSE stream until the response arrives
/// (notifications before it go to `on_note`). With `resume` (the URL and headers of the
/// session), a stream that closes after giving an event id is resumed (SEP-1699): after its
/// `retry` wait, a GET with `Last-Event-ID` continues it, up to MAX_RESUMES times in the timeout.
async fn read_reply(
    mut resp: Answer,
    reader: &mut ReplyReader,
    timeout: Duration,
    max_result_bytes: usize,
    on_note: &mut dyn FnMut(Value),
    mut resume: Option<(&str, Headers)>,
) -> Result<Value, String> {
    let ct = resp.headers().get("content-type").unwrap_or_default().to_ascii_lowercase();
    if ct.contains("text/event-stream") {
        let mut stream = resp.stream();
        let mut deadline = Deadline::after(timeout);
        let mut resumes = 0;
        loop {
            let mut items = Vec::new();
            let closed = match deadline.next_chunk(&mut stream).await {
                Ok(chunk) => reader.feed_sse(&chunk, &mut items).map(|_| false)?,
                Err(ChunkEnd::Closed) => reader.finish_sse(&mut items).map(|_| true)?,
                Err(e) => return Err(e.to_string()),
            };
            for item in items {
                match item {
                    Incoming::Notification(n) | Incoming::ServerRequest(n) => on_note(n),
                    Incoming::Response(r) => return Ok(r),
                }
            }
            if reader.is_done() {
                return Err("the upstream stream ended without an answer".into());
            }
            if closed {
                let (Some((url, h)), Some((id, wait_ms))) = (&mut resume, reader.resume()) else {
                    return Err("the upstream closed its event stream before answering".into());
                };
                let left = deadline.left_ms();
                resumes += 1;
                if resumes > MAX_RESUMES || wait_ms >= left {
                    return Err(format!("the upstream's event stream closed {resumes} times without an answer"));
                }
                // An id `fetch` would refuse is not sent: the stream resumes from the start.
                let _ = h.try_set("last-event-id", id);
                crate::runtime::sleep(wait_ms).await;
                let left = Duration::from_millis(deadline.left_ms().max(1));
                let mut r = outbound::send(Method::Get, url, h.clone(), None, left).await.map_err(|e| e.to_string())?;
                if r.status_code() != 200 {
                    return Err(format!("resuming the upstream's event stream got HTTP {}", r.status_code()));
                }
                stream = r.stream();
            }
        }
    }
    let text =
        outbound::text(&mut resp, timeout, outbound::one_piece_cap(max_result_bytes)).await.map_err(|e| match e {
            SendError::TooLarge(_) => format!(
                "the upstream's answer is larger than its app's max_result_bytes ({max_result_bytes} bytes) allows; \
             raise max_result_bytes or ask for less"
            ),
            SendError::TimedOut => "the upstream's answer did not arrive in time".to_string(),
            SendError::Unreachable(e) => format!("the upstream's answer broke off: {e}"),
        })?;
    let mut response = None;
    for item in reader.json_body(&text)? {
        match item {
            Incoming::Notification(n) | Incoming::ServerRequest(n) => on_note(n),
            Incoming::Response(r) => response = Some(r),
        }
    }
    response.ok_or_else(|| "the upstream's answer holds no response".into())
}

/// Why one attempt of a request failed.
enum Attempt {
    /// The upstream answered 404 for the session id: it forgot the session (re-initialize once).
    SessionGone,
    Failed(String),
}

impl From<String> for Attempt {
    fn from(why: String) -> Attempt {
        Attempt::Failed(why)
    }
}
