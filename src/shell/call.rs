//! The call path of a `tools/call`, shared by the MCP endpoint and the task runner: the app's
//! backend resolved for the call, then one blocking or streamed call (Dify apps, HTTP tools) or
//! a proxied call (upstream MCP servers), all through `outbound`.

use std::time::Duration;

use serde_json::Value;
use worker::{Context, Env, Method};

use crate::pure::app::{DEFAULT_FIRST_BYTE_TIMEOUT_SECONDS, DEFAULT_IDLE_TIMEOUT_SECONDS, DEFAULT_TIMEOUT_SECONDS};
use crate::pure::backend::dify::call as dify_call;
use crate::pure::backend::dify::stream::DEFAULT_MAX_RESULT_BYTES;
use crate::pure::backend::http_tool::call as http_tool;
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::{self, CallPlan};
use crate::pure::mode::Mode;
use crate::pure::outcome::Outcome;

use super::outbound::{self, SendError};
use super::secrets;
use super::stream::{first_byte_timed_out, read_whole, request_headers, send_failed, Backend, CallStream};
use super::upstream;
use super::VERSION;

/// The app behind a tool, resolved for a call; `Err` is the outcome when it cannot be called.
pub fn backend_of(def: &ServerDefinition, app_index: usize, env: &Env) -> Result<Backend, Outcome> {
    let Some(app) = def.apps.get(app_index) else {
        return Err(Outcome::Failed("the app behind this tool was removed; list the tools again".into()));
    };
    let b = &app.backend;
    let endpoint = if app.mode == Mode::HttpTool { "api_endpoint" } else { "base_url" };
    let api_key = secrets::resolve(env, b["api_key"].as_str().unwrap_or_default())
        .map_err(|e| Outcome::Failed(format!("the API key of app '{}' {e}", app.name)))?;
    let secs = |key: &str, default: u64| Duration::from_secs(b[key].as_u64().unwrap_or(default));
    Ok(Backend {
        app_name: app.name.clone(),
        base_url: b[endpoint].as_str().unwrap_or_default().to_string(),
        api_key,
        first_byte: secs("first_byte_timeout_seconds", DEFAULT_FIRST_BYTE_TIMEOUT_SECONDS),
        idle: secs("idle_timeout_seconds", DEFAULT_IDLE_TIMEOUT_SECONDS),
        total: secs("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        max_result_bytes: b["max_result_bytes"].as_u64().map_or(DEFAULT_MAX_RESULT_BYTES, |n| n as usize),
        total_setting: "timeout_seconds",
    })
}

/// How the relay treats an upstream MCP call: `tool_call_timeout` bounds it (default 300 s),
/// and it may be silent that long (upstream tools report progress only if they choose to).
pub fn upstream_backend(def: &ServerDefinition, app_index: usize) -> Result<Backend, Outcome> {
    let Some(app) = def.apps.get(app_index) else {
        return Err(Outcome::Failed("the app behind this tool was removed; list the tools again".into()));
    };
    let b = &app.backend;
    let total = Duration::from_secs(b["tool_call_timeout"].as_u64().unwrap_or(upstream::DEFAULT_CALL_TIMEOUT_S));
    Ok(Backend {
        app_name: app.name.clone(),
        base_url: b["url"].as_str().unwrap_or_default().to_string(),
        api_key: String::new(),
        first_byte: total,
        idle: total,
        total,
        max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        total_setting: "tool_call_timeout",
    })
}

/// An upstream MCP call answered in one JSON response, through the same relay as a streamed one.
pub async fn call_upstream_whole(
    plan: &CallPlan,
    def: &ServerDefinition,
    env: &Env,
    incoming: &[(String, String)],
    ctx: &Context,
) -> Value {
    match upstream_backend(def, plan.app_index) {
        Ok(b) => {
            CallStream::upstream(plan.clone(), b, def.clone(), incoming.to_vec(), env, Some(ctx)).into_final().await
        }
        Err(outcome) => server::finish_call(plan, outcome, VERSION),
    }
}

/// Whether a call is made as a stream: Dify modes for clients that take SSE (so progress can
/// flow) and agent-chat always (Dify serves it only streaming); HTTP tools when configured so.
pub fn streams(plan: &CallPlan, def: &ServerDefinition, accepts_sse: bool) -> bool {
    match plan.mode {
        Mode::HttpTool => def.apps.get(plan.app_index).is_some_and(|a| http_tool::streams(&a.backend)),
        mode => accepts_sse || dify_call::needs_streaming(mode),
    }
}

/// A call answered in one JSON response (the client takes only JSON, or the backend does not
/// stream): a streamed backend answer is read to its end here.
pub async fn call_backend(plan: &CallPlan, def: &ServerDefinition, env: &Env, ctx: &Context) -> Value {
    let backend = match backend_of(def, plan.app_index, env) {
        Ok(b) => b,
        Err(outcome) => return server::finish_call(plan, outcome, VERSION),
    };
    if streams(plan, def, false) {
        return CallStream::new(plan.clone(), backend, env, ctx).into_final().await;
    }
    server::finish_call(plan, call_blocking(plan, &backend).await, VERSION)
}

/// A call run to its end outside a client request (inside a task's Durable Object): the final
/// JSON-RPC response.
pub async fn run_to_completion(plan: &CallPlan, app_backend: &Value, backend: Backend, env: &Env) -> Value {
    let streamed = match plan.mode {
        Mode::HttpTool => http_tool::streams(app_backend),
        mode => dify_call::needs_streaming(mode),
    };
    if streamed {
        CallStream::detached(plan.clone(), backend, env).into_final().await
    } else {
        server::finish_call(plan, call_blocking(plan, &backend).await, VERSION)
    }
}

async fn call_blocking(plan: &CallPlan, b: &Backend) -> Outcome {
    let headers = match request_headers(plan, b) {
        Ok(h) => h,
        Err(outcome) => return outcome,
    };
    let url = format!("{}{}", b.base_url, plan.request.path());
    let body = plan.request.http_body();
    // The first byte is bounded on its own, as on the streamed path; the total bounds the rest.
    let started = super::platform::now_ms();
    let first_byte = b.first_byte.min(b.total);
    let mut resp = match outbound::send(Method::Post, &url, headers, body, first_byte).await {
        Ok(r) => r,
        Err(SendError::TimedOut) => return first_byte_timed_out(&b.app_name, b, first_byte),
        Err(e) => return send_failed(plan, b, e),
    };
    let status = resp.status_code();
    let retry_after = resp.headers().get("retry-after").ok().flatten();
    let content_type = resp.headers().get("content-type").ok().flatten().unwrap_or_default();
    let left = b.total.saturating_sub(Duration::from_millis(super::platform::now_ms().saturating_sub(started)));
    match outbound::text(&mut resp, left, outbound::one_piece_cap(b.max_result_bytes)).await {
        Ok(text) => read_whole(plan, b, status, &content_type, retry_after.as_deref(), &text)
            .capped(&b.app_name, b.max_result_bytes),
        Err(SendError::TimedOut) => timed_out(&b.app_name, b.total),
        Err(e) => send_failed(plan, b, e),
    }
}

fn timed_out(app: &str, timeout: Duration) -> Outcome {
    Outcome::Failed(format!(
        "the app '{app}' did not answer within {} s (the app's timeout_seconds); try again or raise the timeout",
        timeout.as_secs()
    ))
}
