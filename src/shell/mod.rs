//! The Worker's IO half: routing and IO around the pure core, reaching the platform only through
//! `crate::runtime`.
// Outside the Worker and the tests (a plain host build, the fuzz crate) nothing calls the shell.
#![cfg_attr(not(any(test, target_arch = "wasm32")), allow(dead_code))]

mod backend;
mod cache;
mod call;
mod call_log;
mod console;
mod endpoint;
mod http;
mod kv;
mod log;
mod memo;
mod outbound;
mod platform;
mod ratelimit;
mod resource_server;
mod secrets;
mod store;
mod tasks;
#[cfg(test)]
mod tests;
mod usage;

use std::rc::Rc;

use crate::json;

use crate::pure::admin;
use crate::pure::console_access;
use crate::pure::console_roles::Identity;
use crate::pure::console_tokens;
use crate::pure::error::ApiError;
use crate::pure::path;
use crate::pure::quote::quote_input;
use crate::runtime::{Context, Env, Fut, Method, ObjectHandler, ObjectStorage, Request, Response};
use http::Incoming;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The Worker, as the runtime calls it: requests, and the Durable Object classes.
pub struct Flowgate;

impl crate::runtime::Worker for Flowgate {
    fn serve(&self, req: Request, env: Env, ctx: Context) -> Fut<'static, Response> {
        Box::pin(async move { serve(req, &env, &ctx).await })
    }

    fn open_object(&self, namespace: &str, storage: Rc<dyn ObjectStorage>, env: Env) -> Option<Rc<dyn ObjectHandler>> {
        match namespace {
            platform::TASKS => Some(Rc::new(tasks::TaskRunner::new(storage, env))),
            platform::OAUTH => Some(Rc::new(backend::mcp::oauth::TokenBroker::new(storage, env))),
            platform::BRIDGES => Some(Rc::new(backend::mcp::bridge::CallBridge::new(storage, env))),
            platform::LEGACY_SESSIONS => Some(Rc::new(backend::mcp::legacy_session::LegacySession::new(storage, env))),
            platform::CLIENT_SESSIONS => Some(Rc::new(backend::mcp::subscriptions::ClientSession::new(storage, env))),
            _ => None,
        }
    }

    fn evict_isolate(&self) {
        memo::forget_all();
        platform::forget_settings();
        log::forget_sequence();
        usage::forget_pending();
        call_log::forget_pending();
        resource_server::forget_keys();
    }
}

/// One client request, start to end: routed, answered, logged.
pub async fn serve(req: Request, env: &Env, ctx: &Context) -> Response {
    let req = Incoming::new(req);
    let request_id = log::begin();
    outbound::guard_from_env(env);
    let started = platform::now_ms();
    let method = req.method();
    // One canonical form of the path, computed once: the router matches its segments and the
    // log line (and any message quoting the path) shows the same segments, codes masked.
    let url = req.url_text();
    let segments = path::segments(path::of_url(&url));
    let shown_path = path::loggable(&segments);
    let mut resp = route(req, env, ctx, &segments, &shown_path).await;
    resp.headers_mut().set("x-request-id", &request_id);
    // Refused and failed requests are always logged; every request with LOG_REQUESTS=all (the
    // platform's own invocation logs already record each request, and a log line per request
    // costs time on the hot path).
    let all = platform::settings(env).log_all_requests;
    if all || resp.status_code() >= 400 {
        log::info(
            "request",
            json!({
                "method": method.as_ref(),
                "path": shown_path,
                "status": resp.status_code(),
                "ms": platform::now_ms().saturating_sub(started),
            }),
        );
    }
    resp
}

async fn route(req: Incoming, env: &Env, ctx: &Context, segments: &[&str], shown_path: &str) -> Response {
    let result = match segments {
        ["healthz"] => Ok(http::json(200, &json!({ "status": "ok", "version": VERSION }))),
        ["mcp", "server", code, "mcp"] => {
            return endpoint::handle(req, env, ctx, code)
                .await
                .unwrap_or_else(|e| http::error(&http::internal("answering", e)))
        }
        // RFC 9728 metadata of an `oauth` server: the well-known form, and beside the endpoint.
        [".well-known", "oauth-protected-resource", "mcp", "server", code, "mcp"]
        | ["mcp", "server", code, ".well-known", "oauth-protected-resource"] => {
            endpoint::resource_metadata(req, env, ctx, code).await
        }
        // The index without credentials: where the API's document is, and no caller (the web
        // console asks it first, to learn whether Cloudflare Access already signed the user in).
        ["console", "api"] if req.method() == Method::Get && anonymous(&req) => {
            Ok(http::json(200, &json!({ "openapi": "/console/api/openapi.json", "version": VERSION, "caller": null })))
        }
        ["console", "api", rest @ ..] => match check_admin(&req, env, ctx).await {
            Ok(identity) => console::handle(req, env, ctx, &identity, rest, shown_path).await,
            Err(e) => Err(e),
        },
        // Under /mcp but not an endpoint: said in JSON-RPC, with what the URL lacks.
        ["mcp", ..] => return endpoint::wrong_path(path::endpoint_hint(segments)),
        _ => Err(ApiError::not_found(format!("no route {} {}", req.method().as_ref(), quote_input(shown_path)))),
    };
    match result {
        Ok(resp) => resp,
        Err(e) => http::error(&e),
    }
}

/// Who calls the console: `Authorization: Bearer <ADMIN_TOKEN>` (decided by `pure::admin`), the
/// bootstrap admin, or a named console token (`fgc_…`, looked up by its hash). A wrong token
/// counts against the client's address in the `ADMIN_AUTH_LIMIT` rate limiter; over the limit
/// the answer is 429 instead of 401.
async fn check_admin(req: &Incoming, env: &Env, ctx: &Context) -> Result<Identity, ApiError> {
    let settings = platform::settings(env);
    let header = req.headers().get("authorization");
    let mut failure = match admin::check(settings.admin_token.as_deref(), header.as_deref()) {
        Ok(()) => return Ok(Identity::bootstrap()),
        Err(f) => f,
    };
    // No Authorization header: Cloudflare Access's signed assertion, when Access is configured
    // (it works without ADMIN_TOKEN; a too-short ADMIN_TOKEN keeps the console off regardless).
    if matches!(failure, admin::AuthFailure::NotConfigured | admin::AuthFailure::NoToken { header_sent: false }) {
        if let Some(assertion) = req.headers().get(console_access::ASSERTION_HEADER) {
            match access_identity(env, &assertion).await {
                Ok(Some(identity)) => return Ok(identity),
                // Access is not configured: the header means nothing here.
                Ok(None) => {}
                Err(e) if e.status == 401 => {
                    throttle_attempt(req, env).await?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
    // Only a token of the right shape costs a lookup (memo, else one indexed D1 read).
    if failure == admin::AuthFailure::InvalidToken {
        if let Some(hash) = console_tokens::presented_hash(header.as_deref()) {
            match console::token_identity(env, ctx, &hash).await? {
                Some(identity) => return Ok(identity),
                None => failure = admin::AuthFailure::InvalidConsoleToken,
            }
        }
    }
    if failure.counts_as_attempt() {
        throttle_attempt(req, env).await?;
    }
    Err(failure.error())
}

/// A request that brings no console credential at all: no Authorization header, no Access
/// assertion.
fn anonymous(req: &Incoming) -> bool {
    let has = |name: &str| req.headers().get(name).is_some();
    !has("authorization") && !has(console_access::ASSERTION_HEADER)
}

/// Counts a failed console authentication against the client's address; `Err` (429) once the
/// address is over the `ADMIN_AUTH_LIMIT`.
async fn throttle_attempt(req: &Incoming, env: &Env) -> Result<(), ApiError> {
    let ip = req.headers().get("cf-connecting-ip");
    let key = admin::throttle_key(ip.as_deref());
    match ratelimit::allow_in(env, platform::ADMIN_AUTH_LIMIT, &key).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(admin::throttled()),
        // The limiter failing must not open the door: the attempt still fails with 401.
        Err(e) => {
            log::error(&format!("the admin authentication limiter failed: {e}"));
            Ok(())
        }
    }
}

/// The console identity of a Cloudflare Access assertion (`pure::console_access`), verified
/// like an MCP server's OAuth token (issuer, AUD tag, expiry, RS256 signature with Access's
/// keys). `Ok(None)`: Access is not configured.
async fn access_identity(env: &Env, assertion: &str) -> Result<Option<Identity>, ApiError> {
    let settings = platform::settings(env);
    let config = settings.access.as_ref().map_err(|why| {
        ApiError::new(503, "access_misconfigured", format!("Cloudflare Access sign-in is misconfigured: {why}"))
    })?;
    let Some(config) = config else { return Ok(None) };
    let bearer = format!("Bearer {assertion}");
    // A service token's assertion has an empty `sub`: it is named by its `common_name`.
    let subject = crate::pure::oauth_resource::Subject::SubOrCommonName;
    match resource_server::authenticate_as(&config.settings, "console-access", &config.audience, Some(&bearer), subject)
        .await
    {
        resource_server::Outcome::Caller(sub) => {
            // Verified above; read again only for the user's email.
            let user = crate::pure::oauth_resource::parse_jwt(assertion)
                .map(|jwt| console_access::user_name(&jwt.claims, &sub))
                .unwrap_or_else(|_| sub.to_string());
            Ok(Some(Identity::access(config.role, user)))
        }
        resource_server::Outcome::Refused { error, .. } => {
            Err(ApiError::new(401, "unauthorized", console_access::refusal(error.as_ref())))
        }
        resource_server::Outcome::Unavailable(why) => Err(ApiError::new(
            503,
            "access_unavailable",
            format!("Cloudflare Access's signing keys could not be had ({why}); retry"),
        )),
    }
}
