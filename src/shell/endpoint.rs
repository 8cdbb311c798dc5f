//! The MCP endpoint `POST /mcp/server/{code}/mcp` (Streamable HTTP, stateless): transport rules
//! here, protocol in `pure::mcp`, backend calls through `outbound`.

use std::rc::Rc;

use crate::runtime::{Context, Env, Headers, Method, Response};
use serde_json::Value;

use crate::pure::backend::config::Backend;
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::backend::mcp::binding::{Caller as UpstreamCaller, CALLER_ENTRY};
use crate::pure::backend::mcp::failed_fetch;
use crate::pure::backend::mcp::variant::{Variant, DECLARED_ENTRY};
use crate::pure::backend::run_record::RunRecord;
use crate::pure::client_auth::{authenticate, AuthMode, Refusal};
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::error::ApiError;
use crate::pure::ids::{is_server_code_shape, sha256_hex};
use crate::pure::mcp::gateway::Catalogs;
use crate::pure::mcp::http_rules::{
    accepts_json, accepts_sse, is_json_content_type, mentions_catalogs, mentions_tools, rate_counted,
};
use crate::pure::mcp::prepared::{response_text, Prepared};
use crate::pure::mcp::relay::{Channel, Closed};
use crate::pure::mcp::server::{self, CallPlan, CallRequest, RequestHeaders, Step, TaskOp, TaskRequest};
use crate::pure::mcp::tools::Upstreams;
use crate::pure::mcp::upstream_tasks;
use crate::pure::oauth_resource::{self, TokenError};
use crate::pure::origin::origin_allowed;
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::quote::plain_or_quoted;

use crate::pure::task_contract::{Kind, TaskAnswer, TaskCall, TaskSpec};
use crate::shell::backend::dify::upload as dify_upload;
use crate::shell::backend::mcp::tasks::Answer as RelayedResult;
use crate::shell::backend::mcp::{call as upstream_call, client as upstream};
use crate::shell::cache;
use crate::shell::call::stream::{stop_run, Opening};
use crate::shell::call::{call_backend, call_streamed, target_of};
use crate::shell::http::{BodyError, Incoming};
use crate::shell::resource_server;
use crate::shell::store;
use crate::shell::tasks;
use crate::shell::usage;
use crate::shell::VERSION;

mod reply;
use reply::{accepted, empty, preflight, rpc, rpc_text, with_cors};

/// Largest MCP request body accepted.
pub const MAX_BODY: usize = 1 << 20;

pub async fn handle(mut req: Incoming, env: &Env, ctx: &Context, code: &str) -> crate::runtime::Result<Response> {
    // Usage metrics go to D1 from here when due, after the response (never per call).
    crate::shell::usage::maybe_flush(env, ctx);
    let origin = header(&req, "origin");
    let cors = match &origin {
        None => None,
        Some(o) if origin_allowed(o, header(&req, "host").as_deref(), &allowed_origins(env)) => Some(o.clone()),
        Some(o) => {
            let e = RpcError::new(
                403,
                jsonrpc::INVALID_REQUEST,
                format!("Forbidden: Origin {} is not allowed; add it to ALLOWED_ORIGINS", plain_or_quoted(o)),
            );
            return rpc(403, &e.to_response(&Value::Null), None);
        }
    };
    // A client that stays opens its session's standalone stream (`subscriptions`).
    let stream_get = req.method() == Method::Get
        && header(&req, "mcp-session-id").is_some_and(|s| s.starts_with(crate::pure::mcp::relay::SESSION_PREFIX));
    match req.method() {
        Method::Post => {}
        Method::Get if stream_get => {}
        Method::Options => return preflight(cors.as_deref(), header(&req, "access-control-request-headers")),
        m => {
            // A mistyped code is said as such whatever the method: a client that falls back to
            // a GET stream after the POST's 404 (mcp-remote's SSE transport) shows why.
            if let Some(refused) = unknown_code(env, ctx, code, cors.as_deref()).await {
                return refused;
            }
            // No session: no GET stream to open. Sessions are sealed values: none to DELETE.
            return not_allowed(m, cors.as_deref());
        }
    }
    let body = if stream_get {
        Value::Null
    } else {
        match read_body(&mut req, cors.as_deref()).await? {
            Ok(body) => body,
            Err(refused) => return Ok(refused),
        }
    };
    let echo_id = body.get("id").filter(|i| i.is_string() || i.is_number()).cloned().unwrap_or(Value::Null);
    let not_found = || server_not_found(&echo_id, cors.as_deref());
    if !is_server_code_shape(code) {
        return not_found();
    }
    let code_hash = sha256_hex(code);
    // The `sub` of an `oauth` server's token: the caller identity `h` lends to the core.
    let oauth_caller: Rc<str>;
    let (pv, mm, mn, ua, caller, session_id) = (
        header(&req, "mcp-protocol-version"),
        header(&req, "mcp-method"),
        header(&req, "mcp-name"),
        header(&req, "user-agent"),
        header(&req, "cf-connecting-ip"),
        header(&req, "mcp-session-id"),
    );
    let mut h = RequestHeaders {
        protocol_version: pv.as_deref(),
        mcp_method: mm.as_deref(),
        mcp_name: mn.as_deref(),
        user_agent: ua.as_deref(),
        caller: caller.as_deref(),
        identity: None,
        session_caps: None,
        headers: &[],
        task_min_ttl_ms: Some(crate::shell::platform::settings(env).task_min_ttl_ms),
    };
    // A batch is refused before any work if it is not allowed or too long.
    if let Value::Array(items) = &body {
        if let Err(e) = server::batch_allowed(&h, items.len()) {
            return rpc(e.status, &e.to_response(&Value::Null), cors.as_deref());
        }
    }
    // Limited per server code (its hash: the code itself is never a key anywhere), one count per
    // message that can reach past the isolate (`rate_counted`: a batch's messages as if sent
    // alone; `ping` skips the limiter). The check runs beside the definition lookup (from the
    // isolate's memo when hot), not before it; the handshake and `tools/list` count only once
    // the definition shows upstream MCP apps, whose lists they read.
    // A session stream's GET counts as one message: each holds an object.
    let counted = if stream_get { 1 } else { rate_counted(&body, false) };
    let (limited, served) =
        futures::future::join(rate_limited(env, &code_hash, counted), cache::served(env, ctx, &code_hash)).await;
    if !within_limit(limited) {
        return too_many(env, &echo_id, cors.as_deref());
    }
    let prepared = match served {
        Ok(Some(p)) => p,
        Ok(None) => return not_found(),
        Err(e) => {
            let why = e.report().message;
            let err = RpcError::new(503, jsonrpc::INTERNAL_ERROR, format!("Service unavailable: {why}"));
            return rpc(503, &err.to_response(&echo_id), cors.as_deref());
        }
    };
    let def = &prepared.def;
    let has_upstreams = def.apps.iter().any(|a| a.backend.as_mcp().is_some());
    let list_reads = if has_upstreams && !stream_get { rate_counted(&body, true) - counted } else { 0 };
    if list_reads > 0 && !within_limit(rate_limited(env, &code_hash, list_reads).await) {
        return too_many(env, &echo_id, cors.as_deref());
    }
    // What the client declared at initialize, if it sent Flowgate's session id (`relay`).
    h.session_caps = crate::shell::backend::mcp::relay::session_caps(env, session_id.as_deref(), &def.server_id);
    // Client authentication (`pure::client_auth`, `pure::oauth_resource`) before anything else
    // about the server is told or done; a refusal writes nothing.
    let authorization = if def.auth.mode != AuthMode::None { header(&req, "authorization") } else { None };
    // Who the caller is, for the upstream sessions it may use (`pure::backend::mcp::binding`).
    let anonymous = UpstreamCaller::Anonymous {
        session: session_id.as_deref().filter(|_| h.session_caps.is_some()),
        address: caller.as_deref(),
        agent: ua.as_deref(),
    };
    let mut caller_tag = anonymous.tag();
    if def.auth.mode == AuthMode::OAuth {
        match oauth_gate(env, def, code, authorization.as_deref(), &echo_id, cors.as_deref()).await {
            Ok(sub) => {
                oauth_caller = sub;
                h.identity = Some(&oauth_caller);
                caller_tag = UpstreamCaller::Subject(&oauth_caller).tag();
            }
            Err(refused) => return refused,
        }
    } else {
        match authenticate(&def.auth, authorization.as_deref()) {
            Ok(None) => {}
            Ok(Some(key)) => {
                h.identity = Some(key.name);
                caller_tag = UpstreamCaller::Key(key.key_id).tag();
                record_key_use(ctx, env, key.key_id);
            }
            Err(refusal) => {
                let e = RpcError::new(Refusal::STATUS, jsonrpc::INVALID_REQUEST, refusal.message());
                let mut resp = rpc(Refusal::STATUS, &e.to_response(&echo_id), cors.as_deref())?;
                resp.headers_mut().set("www-authenticate", &refusal.challenge());
                return Ok(resp);
            }
        }
    }
    if def.status != crate::pure::server::Status::Active {
        let e = RpcError::new(
            403,
            jsonrpc::INVALID_REQUEST,
            "Server inactive: this MCP server has been deactivated by its administrator",
        );
        return rpc(403, &e.to_response(&echo_id), cors.as_deref());
    }
    let accepts_sse = accepts_sse(header(&req, "accept").as_deref());
    if stream_get {
        return session_stream(&req, env, ctx, def, &h, caller_tag, accepts_sse, cors.as_deref()).await;
    }
    // Upstream MCP apps: their tool lists, and the request's headers for `forward_headers`.
    // As the upstreams offer them to a client that declared what this one did (`variant`).
    let declared = Variant::of_request(
        &body,
        pv.as_deref().and_then(crate::pure::protocol::version::Version::parse),
        h.session_caps,
    );
    let upstreams = if has_upstreams && mentions_tools(&body) {
        load_upstreams(def, env, declared).await
    } else {
        Upstreams::default()
    };
    // Their catalogs (resources, prompts, capabilities), for the requests that need them.
    let catalogs = if has_upstreams && mentions_catalogs(&body) {
        load_catalogs(def, env, declared).await
    } else {
        Catalogs::default()
    };
    // A client key or an OAuth token is Flowgate's credential: it is never forwarded upstream.
    let keyed = def.auth.mode != AuthMode::None;
    let incoming: Vec<(String, String)> = if has_upstreams {
        let mut headers: Vec<(String, String)> = req
            .headers()
            .entries()
            .filter(|(name, _)| !(keyed && name.eq_ignore_ascii_case("authorization")))
            .collect();
        headers.push((CALLER_ENTRY.to_string(), caller_tag));
        headers.push((DECLARED_ENTRY.to_string(), declared.key()));
        headers
    } else {
        Vec::new()
    };
    dispatch(&body, &prepared, env, ctx, h, &upstreams, &catalogs, incoming, accepts_sse, cors.as_deref(), Via::Client)
        .await
}

/// A POST's JSON body, or the answer refusing it (media type, `Accept`, size, UTF-8, JSON).
async fn read_body(req: &mut Incoming, cors: Option<&str>) -> crate::runtime::Result<Result<Value, Response>> {
    let fail = |status: u16, code: i64, message: String| -> crate::runtime::Result<Result<Value, Response>> {
        Ok(Err(rpc(status, &RpcError::new(status, code, message).to_response(&Value::Null), cors)?))
    };
    let content_type = header(req, "content-type").unwrap_or_default();
    if !is_json_content_type(&content_type) {
        return fail(
            415,
            jsonrpc::INVALID_REQUEST,
            format!(
                "Unsupported Media Type: send JSON-RPC as Content-Type: application/json (got {})",
                if content_type.is_empty() { "none".to_string() } else { plain_or_quoted(&content_type) }
            ),
        );
    }
    let accept = header(req, "accept");
    if let Some(accept) = &accept {
        if !accepts_json(accept) {
            return fail(
                406,
                jsonrpc::INVALID_REQUEST,
                format!(
                    "Not Acceptable: this endpoint answers application/json (and text/event-stream); Accept was {}",
                    plain_or_quoted(accept)
                ),
            );
        }
    }
    let bytes = match crate::shell::http::body_capped(req, MAX_BODY).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return fail(
                413,
                jsonrpc::INVALID_REQUEST,
                format!("Payload Too Large: MCP messages are limited to {} KiB", MAX_BODY / 1024),
            )
        }
        Err(BodyError::Unreadable(e)) => {
            return fail(400, jsonrpc::PARSE_ERROR, format!("Parse error: the body could not be read: {e}"))
        }
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => return fail(400, jsonrpc::PARSE_ERROR, format!("Parse error: the body is not UTF-8 text ({e})")),
    };
    match serde_json::from_str(text) {
        Ok(v) => Ok(Ok(v)),
        Err(e) => fail(400, jsonrpc::PARSE_ERROR, format!("Parse error: the body is not valid JSON ({e})")),
    }
}

fn not_allowed(m: Method, cors: Option<&str>) -> crate::runtime::Result<Response> {
    let e = RpcError::new(
        405,
        jsonrpc::INVALID_REQUEST,
        format!("Method not allowed: {} (this MCP endpoint takes POST)", m.as_ref()),
    );
    let mut resp = rpc(405, &e.to_response(&Value::Null), cors)?;
    resp.headers_mut().set("allow", "POST, OPTIONS");
    Ok(resp)
}

/// The `GET` of a session's standalone stream (`subscriptions`): held for a 2025 client of a
/// server with upstream MCP apps, whose session id Flowgate sealed for this server; 404 for a
/// session id that is not this server's (the client initializes again), 405 where there is
/// nothing to stream (as before: the SDKs go on without the stream).
#[allow(clippy::too_many_arguments)]
async fn session_stream(
    req: &Incoming,
    env: &Env,
    ctx: &Context,
    def: &ServerDefinition,
    h: &RequestHeaders<'_>,
    caller_tag: String,
    accepts_sse: bool,
    cors: Option<&str>,
) -> crate::runtime::Result<Response> {
    let fail = |status: u16, message: String| {
        rpc(status, &RpcError::new(status, jsonrpc::INVALID_REQUEST, message).to_response(&Value::Null), cors)
    };
    let version = h.protocol_version.map_or(Some(crate::pure::protocol::version::Version::V2025_03_26), |v| {
        crate::pure::protocol::version::Version::parse(v)
    });
    let stays = version.is_some_and(crate::pure::mcp::client_session::can_stay);
    if !stays || !def.apps.iter().any(|a| a.backend.as_mcp().is_some()) {
        return not_allowed(Method::Get, cors);
    }
    if h.session_caps.is_none() {
        return fail(
            404,
            "Session not found: this Mcp-Session-Id is not one this server gave; initialize again".into(),
        );
    }
    if !accepts_sse {
        return fail(
            406,
            "Not Acceptable: a session's stream is text/event-stream; send Accept: text/event-stream".into(),
        );
    }
    let Some(session_id) = header(req, "mcp-session-id") else { return not_allowed(Method::Get, cors) };
    let keyed = def.auth.mode != AuthMode::None;
    let mut incoming: Vec<(String, String)> =
        req.headers().entries().filter(|(name, _)| !(keyed && name.eq_ignore_ascii_case("authorization"))).collect();
    incoming.push((CALLER_ENTRY.to_string(), caller_tag));
    let declared = h.session_caps.map_or(Variant::none(), Variant::of);
    match crate::shell::backend::mcp::subscriptions::open_stream(env, ctx, def, &session_id, &incoming, declared).await
    {
        Ok(mut resp) => {
            let mut headers = Headers::new();
            headers.set("content-type", "text/event-stream");
            headers.set("cache-control", "no-cache");
            with_cors(&mut headers, cors)?;
            for (k, v) in headers.iter() {
                resp.headers_mut().set(k, v);
            }
            Ok(resp)
        }
        Err((403, why)) => fail(403, format!("Forbidden: {why}")),
        Err((_, why)) => {
            crate::shell::log::info("a client session's stream could not be opened", serde_json::json!({"why": why}));
            not_allowed(Method::Get, cors)
        }
    }
}

/// Who a message came from, for the call log: an MCP client, or the console's tool playground
/// (as the console user named).
#[derive(Debug, Clone, Copy)]
pub enum Via<'a> {
    Client,
    Console(&'a str),
}

impl Via<'_> {
    fn mark(self, ticket: usage::Ticket) -> usage::Ticket {
        match self {
            Via::Client => ticket,
            Via::Console(actor) => ticket.by_console(actor),
        }
    }
}

/// Answers a message (or a batch) for a server the request may use, past the transport rules,
/// the rate limit and client authentication: the one path of a message through the protocol
/// and the backends, for the MCP endpoint and the console's tool playground alike.
#[allow(clippy::too_many_arguments)]
pub async fn dispatch(
    body: &Value,
    prepared: &Rc<Prepared>,
    env: &Env,
    ctx: &Context,
    mut h: RequestHeaders<'_>,
    upstreams: &Upstreams,
    catalogs: &Catalogs,
    incoming: Vec<(String, String)>,
    accepts_sse: bool,
    cors: Option<&str>,
    via: Via<'_>,
) -> crate::runtime::Result<Response> {
    let def = &prepared.def;
    // `Mcp-Param-*` headers matter only for upstream tools (SEP-2243 `x-mcp-header`).
    h.headers = &incoming;
    match body {
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let step = server::handle_full(def, upstreams, catalogs, item, &h, VERSION);
                let mut step = dify_upload::with_files(step, def, env).await;
                if let Step::Call(plan) = &mut step {
                    plan.relay = Channel::Closed(Closed::JsonOnly);
                }
                let ticket = usage::ticket(item, &step, def, upstreams, &h).map(|t| via.mark(t));
                if let Some(v) = run(step, prepared, env, ctx, &incoming).await.1 {
                    if let Some(t) = ticket {
                        t.finish(&v);
                    }
                    out.push(v);
                }
            }
            if out.is_empty() {
                return accepted(cors);
            }
            rpc(200, &Value::Array(out), cors)
        }
        single => {
            match dify_upload::with_files(server::handle_full(def, upstreams, catalogs, single, &h, VERSION), def, env)
                .await
            {
                // A lookup and a copy: the list was serialized once for this definition.
                Step::ToolsList { id, version } => {
                    let text = response_text(&id, &prepared.tools_list(version, VERSION));
                    rpc_text(200, text, cors)
                }
                // A client that takes SSE gets the backend's progress as it happens.
                Step::Call(plan) if accepts_sse && def.apps.get(plan.app_index).is_some_and(|a| a.streams(true)) => {
                    record_end_user(ctx, env, def, &plan);
                    let ticket = via.mark(usage::ticket_of_plan(single, &plan, def));
                    let version = plan.version;
                    match call_streamed(*plan, prepared, env, ctx, incoming) {
                        Ok(call) => {
                            let call = call.with_usage(Some(ticket.streamed()));
                            let mut headers = Headers::new();
                            headers.set("content-type", "text/event-stream");
                            headers.set("cache-control", "no-cache");
                            with_cors(&mut headers, cors)?;
                            if !version.is_stateless() {
                                return call.into_response(headers);
                            }
                            // 2026-07-28 gives some errors an HTTP status: a call over at once is
                            // answered whole, with its status.
                            match call.open().await {
                                Opening::Whole(v) => rpc(server::call_status(version, &v), &v, cors),
                                Opening::Stream(call, first) => call.into_response_from(first, headers),
                            }
                        }
                        Err(response) => {
                            ticket.finish(&response);
                            rpc(200, &response, cors)
                        }
                    }
                }
                // A relayed task's tasks/result: the upstream's requests about the task reach a
                // client that reads SSE on this answer's stream.
                Step::Task(req)
                    if accepts_sse
                        && req.op == TaskOp::Result
                        && upstream_tasks::is_relayed(&req.task_id)
                        && matches!(req.relay, Channel::Stream(_)) =>
                {
                    let served = Rc::clone(prepared);
                    match crate::shell::backend::mcp::tasks::result_streamed(req, served, env, ctx, incoming).await {
                        RelayedResult::Whole(status, v) => rpc(status, &v, cors),
                        RelayedResult::Stream(body) => {
                            let mut headers = Headers::new();
                            headers.set("content-type", "text/event-stream");
                            headers.set("cache-control", "no-cache");
                            with_cors(&mut headers, cors)?;
                            Ok(Response::from_stream(body).with_headers(headers))
                        }
                    }
                }
                mut step => {
                    let ticket = usage::ticket(single, &step, def, upstreams, &h).map(|t| via.mark(t));
                    if let Step::Call(plan) = &mut step {
                        // One JSON answer: an upstream's request could not reach this client.
                        if !accepts_sse && matches!(plan.relay, Channel::Stream(_)) {
                            plan.relay = Channel::Closed(Closed::JsonOnly);
                        }
                    }
                    match run(step, prepared, env, ctx, &incoming).await {
                        (status, None) => empty(status, cors),
                        (status, Some(v)) => {
                            if let Some(t) = ticket {
                                t.finish(&v);
                            }
                            let sid = crate::shell::backend::mcp::relay::session_id_for(env, def, single, &v);
                            let mut v = v;
                            if sid.is_some() && def.apps.iter().any(|a| a.backend.as_mcp().is_some()) {
                                // The session's stream delivers subscriptions and list changes.
                                use crate::pure::mcp::client_session::{declare, ListChanges};
                                // Only upstreams whose sessions have a stream can tell changes.
                                let upstreams = catalogs.0.values().filter(|c| c.has_stream).map(|c| &c.capabilities);
                                declare(&mut v["result"], ListChanges::of(upstreams));
                            }
                            let mut resp = rpc(status, &v, cors)?;
                            if let Some(sid) = sid {
                                resp.headers_mut().set("mcp-session-id", &sid);
                            }
                            Ok(resp)
                        }
                    }
                }
            }
        }
    }
}

/// The caller of an `oauth` server (`resource_server`), or the answer refusing the request: 401
/// or 403 with the challenge that names the resource metadata, 503 when the issuer's keys
/// cannot be had. Behind a pointer so that its code is not inlined into the endpoint's
/// state machine (bundle size).
#[allow(clippy::type_complexity)]
fn oauth_gate<'a>(
    env: &'a Env,
    def: &'a ServerDefinition,
    code: &'a str,
    authorization: Option<&'a str>,
    echo_id: &'a Value,
    cors: Option<&'a str>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Rc<str>, crate::runtime::Result<Response>>> + 'a>> {
    Box::pin(async move {
        let unavailable = |why: String| {
            let e = RpcError::new(503, jsonrpc::INTERNAL_ERROR, format!("Service unavailable: {why}"));
            Err(rpc(503, &e.to_response(echo_id), cors))
        };
        let Some(settings) = def.auth.oauth.as_ref() else {
            return unavailable(
                "this MCP server's OAuth settings are missing; its administrator sets them with \
                 PUT /console/api/servers/{id}/auth"
                    .into(),
            );
        };
        let base = match oauth_base(env) {
            Ok(b) => b,
            Err(why) => return unavailable(why),
        };
        let resource = oauth_resource::resource_url(&base, code);
        let audience = settings.audience.as_deref().unwrap_or(&resource);
        match resource_server::authenticate(settings, &def.server_id, audience, authorization).await {
            resource_server::Outcome::Caller(sub) => Ok(sub),
            resource_server::Outcome::Refused { error, header_sent } => {
                let status = error.as_ref().map_or(401, TokenError::status);
                let message = oauth_resource::refusal_message(error.as_ref(), header_sent);
                let e = RpcError::new(status, jsonrpc::INVALID_REQUEST, message);
                let metadata = oauth_resource::resource_metadata_url(&base, code);
                let challenge = oauth_resource::challenge(&metadata, settings, error.as_ref());
                Err(rpc(status, &e.to_response(echo_id), cors).map(|mut resp| {
                    resp.headers_mut().set("www-authenticate", &challenge);
                    resp
                }))
            }
            resource_server::Outcome::Unavailable(why) => {
                crate::shell::log::error(&format!("oauth server {}: {why}", def.server_id));
                unavailable(format!("the authorization server's keys could not be had ({why}); retry"))
            }
        }
    })
}

/// Whether the limiter let the request through (a limiter that fails does not refuse: logged).
/// The answer for a code no server has (any method).
fn server_not_found(echo_id: &Value, cors: Option<&str>) -> crate::runtime::Result<Response> {
    let e = RpcError::new(
        404,
        jsonrpc::INVALID_REQUEST,
        "Server not found: no MCP server has this code; check the URL (the code may have been rotated)",
    );
    rpc(404, &e.to_response(echo_id), cors)
}

/// The 404 (or 429) for a request other than POST whose code no server has, looked up as a
/// POST's is (one count against the code's rate limit); `None` for a server's own code, or
/// when the lookup fails (the method's 405 then says enough).
async fn unknown_code(
    env: &Env,
    ctx: &Context,
    code: &str,
    cors: Option<&str>,
) -> Option<crate::runtime::Result<Response>> {
    if !is_server_code_shape(code) {
        return Some(server_not_found(&Value::Null, cors));
    }
    let code_hash = sha256_hex(code);
    let (limited, served) =
        futures::future::join(rate_limited(env, &code_hash, 1), cache::served(env, ctx, &code_hash)).await;
    if !within_limit(limited) {
        return Some(too_many(env, &Value::Null, cors));
    }
    matches!(served, Ok(None)).then(|| server_not_found(&Value::Null, cors))
}

/// A path under `/mcp` that is not an MCP endpoint: a JSON-RPC 404 that says what the URL
/// lacks (`pure::path::endpoint_hint`), so that an MCP client shows it.
pub fn wrong_path(hint: &str) -> Response {
    let e = RpcError::new(404, jsonrpc::INVALID_REQUEST, format!("Not found: {hint}"));
    rpc(404, &e.to_response(&Value::Null), None)
        .unwrap_or_else(|e| crate::shell::http::error(&crate::shell::http::internal("answering", e)))
}

fn within_limit(answer: Result<bool, crate::shell::ratelimit::Error>) -> bool {
    answer.unwrap_or_else(|e| {
        crate::shell::log::error(&format!("rate limiter: {e}"));
        true
    })
}

/// 429 with `Retry-After`, the JSON-RPC error echoing the request's id.
fn too_many(env: &Env, echo_id: &Value, cors: Option<&str>) -> crate::runtime::Result<Response> {
    let after = crate::shell::ratelimit::period_seconds(env);
    let e = RpcError::new(
        429,
        -32000,
        format!("Rate limited: too many requests for this MCP server; retry after {after} s"),
    );
    let mut resp = rpc(429, &e.to_response(echo_id), cors)?;
    resp.headers_mut().set("retry-after", &after.to_string());
    Ok(resp)
}

/// `Ok(false)` when any of `messages` is over the server's rate limit; each is counted (none:
/// the limiter is not called).
async fn rate_limited(env: &Env, code_hash: &str, messages: usize) -> Result<bool, crate::shell::ratelimit::Error> {
    // Refused a moment ago on this isolate: refused again without asking the binding.
    if messages > 0 && crate::shell::memo::refused_lately(code_hash, crate::shell::platform::now_ms()) {
        return Ok(false);
    }
    let checks = (0..messages).map(|_| crate::shell::ratelimit::allow(env, code_hash));
    let answers = futures::future::join_all(checks).await;
    let mut allowed = true;
    for a in answers {
        allowed &= a?;
    }
    if !allowed {
        crate::shell::memo::remember_refusal(code_hash, crate::shell::platform::now_ms());
    }
    Ok(allowed)
}

/// Turns a step into (status, body), making the backend call when there is one.
async fn run(
    step: Step,
    served: &Rc<Prepared>,
    env: &Env,
    ctx: &Context,
    incoming: &[(String, String)],
) -> (u16, Option<Value>) {
    let def = &served.def;
    match step {
        Step::Reply { status, body } => (status, body),
        Step::ToolsList { id, version } => (
            200,
            Some(jsonrpc::result_response(
                &id,
                server::tools_list_result(def, &Upstreams::default(), version, VERSION),
            )),
        ),
        Step::CreateTask { plan, ttl_ms } => {
            record_end_user(ctx, env, def, &plan);
            match create_task(&plan, ttl_ms, def, env).await {
                Ok(v) => (200, Some(v)),
                Err(e) => (e.status, Some(e.to_response(&plan.id))),
            }
        }
        Step::Task(req) if upstream_tasks::is_relayed(&req.task_id) => {
            let (status, body) = crate::shell::backend::mcp::tasks::op(&req, def, env, incoming).await;
            (status, Some(body))
        }
        Step::Task(req) => {
            let (status, body) = match task_op(&req, def, env).await {
                Ok(answer) => answer,
                Err(e) => (e.status, e.to_response(&req.id)),
            };
            (status, Some(body))
        }
        Step::Cancel { key } => {
            let (env, served) = (env.clone(), Rc::clone(served));
            ctx.wait_until(async move { cancel_run(&env, &served.def, &key).await });
            (202, None)
        }
        Step::Call(plan) => {
            record_end_user(ctx, env, def, &plan);
            let body = call_backend(&plan, served, env, ctx, incoming).await;
            (server::call_status(plan.version, &body), Some(body))
        }
        Step::Forward(fwd) if fwd.method.ends_with("subscribe") => {
            let body = crate::shell::backend::mcp::subscriptions::subscribe(&fwd, def, env, incoming).await;
            (server::call_status(fwd.version, &body), Some(body))
        }
        Step::Forward(fwd) => {
            let body = upstream_call::forward(&fwd, def, env, incoming).await;
            (server::call_status(fwd.version, &body), Some(body))
        }
        Step::Answer { token, message, user } => {
            upstream_call::deliver_answer(env, def, incoming, &token, &message, &user).await
        }
    }
}

/// Records who called, at most once per server, user and hour per isolate (`memo`): the row's
/// `last_seen_at` is accurate to the hour, and a call costs no D1 write when the isolate is warm.
fn record_end_user(ctx: &Context, env: &Env, def: &ServerDefinition, plan: &CallPlan) {
    if !crate::shell::memo::first_sight_of_end_user(&def.server_id, &plan.user, crate::shell::platform::now_ms()) {
        return;
    }
    let (env, server_id, user, name) =
        (env.clone(), def.server_id.clone(), plan.user.clone(), plan.client_name.clone());
    ctx.wait_until(async move {
        let db = env.d1(crate::shell::platform::D1);
        let now = crate::shell::platform::now_s();
        if let Err(e) = store::touch_end_user(&db, &server_id, &user, &name, now).await {
            crate::shell::log::error(&format!("recording an end user: {}", e.report().message));
        }
    });
}

/// Records that a client key was used, at most once per key and hour per isolate (`memo`), off
/// the response path: `last_used_at` is accurate to the hour.
fn record_key_use(ctx: &Context, env: &Env, key_id: &str) {
    if !crate::shell::memo::first_use_of_key(key_id, crate::shell::platform::now_ms()) {
        return;
    }
    let (env, key_id) = (env.clone(), key_id.to_string());
    ctx.wait_until(async move {
        let db = env.d1(crate::shell::platform::D1);
        if let Err(e) = store::touch_key(&db, &key_id, crate::shell::platform::now_s()).await {
            crate::shell::log::error(&format!("recording a client key's use: {}", e.report().message));
        }
    });
}

/// Starts a durable task for a call: its Durable Object stores it before this answers.
async fn create_task(plan: &CallPlan, ttl_ms: u64, def: &ServerDefinition, env: &Env) -> Result<Value, RpcError> {
    let unavailable = |e: String| {
        RpcError::new(503, jsonrpc::INTERNAL_ERROR, format!("Service unavailable: the task could not be created ({e})"))
    };
    let app = def.apps.get(plan.app_index).ok_or_else(|| unavailable("the app is gone".into()))?;
    let kind = match (&app.backend, &plan.request) {
        (Backend::Mcp(c), CallRequest::Mcp { tool, .. }) if c.toolset_of(tool).is_some() => Kind::McpToolset,
        (Backend::Dify(c), _) if c.app_mode == DifyMode::Workflow => Kind::DifyWorkflow,
        (Backend::HttpTool(c), _) if c.async_endpoints.is_some() => Kind::AsyncTool,
        _ => Kind::RunToCompletion,
    };
    let task_id = tasks::new_task_id().map_err(|e| unavailable(e.to_string()))?;
    let (path, body) = plan.request.to_stored();
    let spec = TaskSpec {
        task_id: task_id.clone(),
        server_id: def.server_id.clone(),
        tool: app.name.clone(),
        kind,
        app: app.clone(),
        version: plan.version,
        path,
        body,
        user: plan.user.clone(),
    };
    match tasks::call(env, &task_id, &TaskCall::Create { spec: Box::new(spec), ttl_ms }).await {
        Ok(Some(a)) => Ok(server::task_created(plan, &a.view(), VERSION)),
        Ok(None) => Err(unavailable("the task runner refused it".into())),
        Err(e) => {
            crate::shell::log::error(&format!("creating task: {e}"));
            Err(unavailable("the task runner failed".into()))
        }
    }
}

/// Longest `tasks/result` wait before the client is told to ask again.
const MAX_RESULT_WAIT_MS: u64 = 5 * 60 * 1000;

async fn task_op(req: &TaskRequest, def: &ServerDefinition, env: &Env) -> Result<(u16, Value), RpcError> {
    let answer = match task_answer(req, def, env).await {
        Ok(answer) => answer,
        Err(TaskOpError::StillRunning) => {
            return Err(RpcError::new(
                200,
                jsonrpc::INTERNAL_ERROR,
                format!("Task {} is still running; call tasks/result again", req.task_id),
            ))
        }
        Err(TaskOpError::Runner(e)) => {
            crate::shell::log::error(&format!("task {}: {e}", req.task_id));
            return Err(RpcError::new(
                503,
                jsonrpc::INTERNAL_ERROR,
                "Service unavailable: the task runner failed; retry",
            ));
        }
    };
    let view = answer.as_ref().map(|a| a.view());
    let was_terminal = answer.as_ref().is_some_and(|a| a.was_terminal);
    Ok(server::task_response(req, view.as_ref(), was_terminal, VERSION))
}

/// Why a `tasks/*` request has no answer from the task's Durable Object.
enum TaskOpError {
    /// The Durable Object could not be asked, or answered nothing it should (503; logged).
    Runner(crate::runtime::Error),
    /// A `tasks/result` waited as long as one request may: the client asks again.
    StillRunning,
}

impl From<crate::runtime::Error> for TaskOpError {
    fn from(e: crate::runtime::Error) -> TaskOpError {
        TaskOpError::Runner(e)
    }
}

/// The task's Durable Object's answer to `req` (`None`: no such task for this server).
async fn task_answer(req: &TaskRequest, def: &ServerDefinition, env: &Env) -> Result<Option<TaskAnswer>, TaskOpError> {
    let (server_id, owner) = (def.server_id.clone(), req.owner.clone());
    match req.op {
        TaskOp::Get | TaskOp::Update => Ok(tasks::call(env, &req.task_id, &TaskCall::Get { server_id, owner }).await?),
        TaskOp::Cancel => Ok(tasks::call(env, &req.task_id, &TaskCall::Cancel { server_id, owner }).await?),
        TaskOp::Result => {
            let until = crate::shell::platform::now_ms() + MAX_RESULT_WAIT_MS;
            let wait = TaskCall::Wait { server_id, timeout_ms: 20_000, owner };
            loop {
                let a = tasks::call(env, &req.task_id, &wait).await?;
                if a.as_ref().is_none_or(|a| a.status.is_terminal()) {
                    return Ok(a);
                }
                if crate::shell::platform::now_ms() >= until {
                    return Err(TaskOpError::StillRunning);
                }
            }
        }
    }
}

/// The tool lists of a server's upstream MCP apps as offered to a client that declared
/// `declared` (KV, else fetched); an upstream that cannot be reached contributes no tools, and
/// the reason is logged (once per failed fetch: a failure is remembered briefly, `failed_fetch`).
pub async fn load_upstreams(def: &ServerDefinition, env: &Env, declared: Variant) -> Upstreams {
    let mut map = std::collections::HashMap::new();
    for app in def.apps.iter().filter(|a| a.backend.as_mcp().is_some()) {
        let key = failed_fetch::key(failed_fetch::List::Tools, app, &declared.key());
        if let Some(list) = unless_failed_lately(&key, upstream_call::tools_of(app, env, false, declared), |e| {
            crate::shell::log::error(&format!("listing the tools of upstream app '{}': {e}", app.name))
        })
        .await
        {
            map.insert(app.id.clone(), list);
        }
    }
    Upstreams(map)
}

/// The catalogs of a server's upstream MCP apps as offered to a client that declared `declared`
/// (memo, KV, else fetched); an upstream that cannot be reached offers nothing this time, and
/// the reason is logged (once per failed fetch).
async fn load_catalogs(def: &ServerDefinition, env: &Env, declared: Variant) -> Catalogs {
    let mut map = std::collections::HashMap::new();
    for app in def.apps.iter().filter(|a| a.backend.as_mcp().is_some()) {
        let key = failed_fetch::key(failed_fetch::List::Catalog, app, &declared.key());
        if let Some(c) = unless_failed_lately(&key, upstream_call::catalog_of(app, env, false, declared), |e| {
            crate::shell::log::error(&format!("reading the catalog of upstream app '{}': {e}", app.name))
        })
        .await
        {
            map.insert(app.id.clone(), c);
        }
    }
    Catalogs(map)
}

/// What `fetch` gives, unless the same fetch failed on this isolate a moment ago (`memo`): then
/// nothing, without asking the upstream. A failure is remembered and reported to `failed`.
async fn unless_failed_lately<T>(
    key: &str,
    fetch: impl std::future::Future<Output = Result<T, String>>,
    failed: impl FnOnce(&str),
) -> Option<T> {
    if crate::shell::memo::failed_lately(key, crate::shell::platform::now_ms()) {
        return None;
    }
    match fetch.await {
        Ok(v) => {
            crate::shell::memo::forget_failed_fetch(key);
            Some(v)
        }
        Err(e) => {
            failed(&e);
            crate::shell::memo::remember_failed_fetch(key, crate::shell::platform::now_ms());
            None
        }
    }
}

/// Stops the run a `notifications/cancelled` names (best effort): its record is found in this
/// isolate's memory, else in KV.
async fn cancel_run(env: &Env, def: &ServerDefinition, key: &str) {
    let kv = crate::shell::kv::Kv::new(env);
    let text = match crate::shell::memo::take_run(key, crate::shell::platform::now_ms()) {
        Some(r) => r.to_string(),
        None => match kv.get_text(key).await {
            Ok(Some(r)) => r,
            _ => return,
        },
    };
    let record = match RunRecord::read(&text) {
        Ok(r) => r,
        Err(why) => return crate::shell::log::error(&format!("a recorded run does not read: {why}")),
    };
    if let Some(app) = def.apps.get(record.app_index()) {
        match record {
            RunRecord::Mcp { request_id, session, .. } => cancel_upstream(env, app, request_id, session).await,
            RunRecord::AsyncTool { app_index, task_id, user } => {
                cancel_async_tool(env, def, app, app_index, &task_id, &user).await
            }
            RunRecord::Dify { app_index, task_id, user } => {
                stop_dify_run(env, def, app, app_index, &task_id, &user).await
            }
        }
    }
    let _ = kv.delete(key).await;
}

/// Stops a streamed Dify run at its stop endpoint, which wants the same `user` that started it.
async fn stop_dify_run(
    env: &Env,
    def: &ServerDefinition,
    app: &AppDefinition,
    index: usize,
    task_id: &str,
    user: &str,
) {
    let (Ok(target), Some(config)) = (target_of(def, index, env), app.backend.as_dify()) else { return };
    stop_run(env, &target.base_url, &target.api_key, config.app_mode, task_id, user, &target.app_name).await;
}

/// Cancels an async HTTP tool's run that a call without a task was polling; the polling call
/// then reads `cancelled` and ends.
async fn cancel_async_tool(
    env: &Env,
    def: &ServerDefinition,
    app: &AppDefinition,
    index: usize,
    remote: &str,
    user: &str,
) {
    let Some(endpoints) = app.backend.as_http_tool().and_then(|c| c.async_endpoints.as_ref()) else { return };
    let Ok(target) = target_of(def, index, env) else { return };
    crate::shell::backend::http_tool::polled::cancel(&target, &endpoints.cancel_endpoint, user, remote).await;
}

/// Tells an upstream MCP server that a call a client cancelled is cancelled, on the session it
/// went out on. Only the app's own credentials are at hand here (not the client's forwarded
/// ones), which a session bound to forwarded credentials may refuse: best effort.
async fn cancel_upstream(env: &Env, app: &AppDefinition, request_id: u64, session: Option<Value>) {
    let Some(Ok(session)) = session.map(crate::pure::fields::read::<crate::pure::backend::mcp::session::Session>)
    else {
        return;
    };
    let Ok(up) = upstream::upstream_of(app, env, None).await else { return };
    let target = (session, up.url.clone());
    upstream::Client::new(&up, env).notify_cancelled(&target, request_id, "the client cancelled the call").await;
}

/// The base of an `oauth` server's resource URL: `PUBLIC_URL`, never the request's `Host`.
fn oauth_base(env: &Env) -> Result<String, String> {
    crate::pure::config::oauth_public_base(crate::shell::platform::settings(env).public_url.as_deref())
}

/// `GET` the RFC 9728 protected resource metadata of an `oauth` server (404 for other
/// servers and unknown codes): where MCP clients learn which authorization server to use.
pub async fn resource_metadata(req: Incoming, env: &Env, ctx: &Context, code: &str) -> Result<Response, ApiError> {
    if req.method() != Method::Get {
        return Err(ApiError::method_not_allowed(req.method().as_ref(), "this metadata", "GET"));
    }
    let code_hash = sha256_hex(code);
    let prepared = if is_server_code_shape(code) { cache::served(env, ctx, &code_hash).await? } else { None };
    let prepared = prepared.filter(|p| p.def.auth.mode == AuthMode::OAuth);
    let Some((settings, def)) = prepared.as_ref().and_then(|p| Some((p.def.auth.oauth.as_ref()?, &p.def))) else {
        return Err(ApiError::not_found("no MCP server with this code uses OAuth"));
    };
    let base = oauth_base(env).map_err(|why| ApiError::new(503, "misconfigured", why))?;
    let doc = oauth_resource::resource_metadata(&oauth_resource::resource_url(&base, code), settings, &def.name);
    let mut resp = crate::shell::http::json(200, &doc);
    // Public, and read by browser-based clients from other origins.
    resp.headers_mut().set("access-control-allow-origin", "*");
    Ok(resp)
}

fn header(req: &Incoming, name: &str) -> Option<String> {
    req.headers().get(name)
}

fn allowed_origins(env: &Env) -> Vec<String> {
    crate::shell::platform::settings(env).allowed_origins.clone()
}
