//! The Worker: routing and IO around the pure core.

mod cache;
mod call;
mod console;
mod dify;
mod http;
mod log;
mod mcp;
mod memo;
mod oauth;
mod outbound;
mod platform;
mod ratelimit;
mod relay;
mod resource_server;
mod secrets;
mod store;
mod stream;
mod tasks;
mod upstream;
mod usage;

use serde_json::json;
use worker::{event, Context, Env, Request, Response};

use crate::pure::admin;
use crate::pure::console_roles::Identity;
use crate::pure::console_tokens;
use crate::pure::error::ApiError;
use crate::pure::path;
use crate::pure::quote::quote_input;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let request_id = log::begin();
    outbound::guard_from_env(&env);
    let started = platform::now_ms();
    let method = req.method();
    // One canonical form of the path, computed once: the router matches its segments and the
    // log line (and any message quoting the path) shows the same segments, codes masked.
    let raw_path = req.path();
    let segments = path::segments(&raw_path);
    let shown_path = path::loggable(&segments);
    let mut resp = route(req, &env, &ctx, &segments, &shown_path).await?;
    resp.headers_mut().set("x-request-id", &request_id)?;
    // Refused and failed requests are always logged; every request with LOG_REQUESTS=all (the
    // platform's own invocation logs already record each request, and a log line per request
    // costs time on the hot path).
    let all = platform::setting(&env, "LOG_REQUESTS").is_some_and(|v| &*v == "all");
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
    Ok(resp)
}

async fn route(
    req: Request,
    env: &Env,
    ctx: &Context,
    segments: &[&str],
    shown_path: &str,
) -> worker::Result<Response> {
    let result = match segments {
        ["healthz"] => {
            http::json(200, &json!({ "status": "ok", "version": VERSION })).map_err(|e| http::internal("healthz", e))
        }
        ["mcp", "server", code, "mcp"] => return mcp::handle(req, env, ctx, code).await,
        // RFC 9728 metadata of an `oauth` server: the well-known form, and beside the endpoint.
        [".well-known", "oauth-protected-resource", "mcp", "server", code, "mcp"]
        | ["mcp", "server", code, ".well-known", "oauth-protected-resource"] => {
            mcp::resource_metadata(req, env, ctx, code).await
        }
        ["console", "api", rest @ ..] => match check_admin(&req, env, ctx).await {
            Ok(identity) => console::handle(req, env, &identity, rest, shown_path).await,
            Err(e) => Err(e),
        },
        _ => Err(ApiError::not_found(format!("no route {} {}", req.method().as_ref(), quote_input(shown_path)))),
    };
    match result {
        Ok(resp) => Ok(resp),
        Err(e) => http::error(&e),
    }
}

/// Who calls the console: `Authorization: Bearer <ADMIN_TOKEN>` (decided by `pure::admin`), the
/// bootstrap admin, or a named console token (`fgc_…`, looked up by its hash). A wrong token
/// counts against the client's address in the `ADMIN_AUTH_LIMIT` rate limiter; over the limit
/// the answer is 429 instead of 401.
async fn check_admin(req: &Request, env: &Env, ctx: &Context) -> Result<Identity, ApiError> {
    let expected = env.secret("ADMIN_TOKEN").map(|s| s.to_string()).ok();
    let header = req.headers().get("authorization").ok().flatten();
    let mut failure = match admin::check(expected.as_deref(), header.as_deref()) {
        Ok(()) => return Ok(Identity::bootstrap()),
        Err(f) => f,
    };
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
        let ip = req.headers().get("cf-connecting-ip").ok().flatten();
        let key = admin::throttle_key(ip.as_deref());
        match ratelimit::allow_in(env, platform::ADMIN_AUTH_LIMIT, &key).await {
            Ok(true) => {}
            Ok(false) => return Err(admin::throttled()),
            // The limiter failing must not open the door: the attempt still fails with 401.
            Err(e) => log::error(&format!("the admin authentication limiter failed: {e}")),
        }
    }
    Err(failure.error())
}
