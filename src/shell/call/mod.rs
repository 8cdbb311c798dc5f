//! The call path of a `tools/call`, shared by the MCP endpoint and the task runner: the app's
//! backend resolved for the call, then one blocking or streamed call (Dify apps, HTTP tools) or
//! a proxied call (upstream MCP servers), all through `outbound`.

pub mod json;
pub mod stream;

use std::rc::Rc;
use std::time::Duration;

use crate::runtime::{Context, Env, Method};
use serde_json::Value;

use crate::pure::backend::config::Backend;
use crate::pure::backend::http_tool::config::AsyncEndpoints;
use crate::pure::backend::http_tool::polled;
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::mcp::prepared::Prepared;
use crate::pure::mcp::server::{self, CallPlan};
use crate::pure::outcome::Outcome;

use crate::shell::call::stream::{first_byte_timed_out, read_whole, request_headers, send_failed, CallStream, Target};
use crate::shell::outbound::{self, SendError};
use crate::shell::secrets;
use crate::shell::VERSION;

fn app_of(def: &ServerDefinition, app_index: usize) -> Result<&AppDefinition, Outcome> {
    def.apps
        .get(app_index)
        .ok_or_else(|| Outcome::Failed("the app behind this tool was removed; list the tools again".into()))
}

/// Where a call of the app behind a tool goes and how long it may take: the one place that
/// reads each kind's settings for a call. `Err` is the outcome when it cannot be called.
pub fn target_of(def: &ServerDefinition, app_index: usize, env: &Env) -> Result<Target, Outcome> {
    let app = app_of(def, app_index)?;
    let kind = app.backend.kind();
    let (url, key) = kind.endpoint();
    let api_key = match key {
        Some(k) => {
            secrets::resolve(env, k).map_err(|e| Outcome::Failed(format!("the API key of app '{}' {e}", app.name)))?
        }
        None => String::new(),
    };
    let limits = kind.limits();
    Ok(Target {
        app_name: app.name.clone(),
        base_url: url.to_string(),
        api_key,
        first_byte: limits.first_byte(),
        idle: limits.idle(),
        total: limits.total(),
        max_result_bytes: limits.max_result_bytes(),
        total_setting: kind.total_setting(),
    })
}

/// A call answered in one JSON response (the client takes only JSON, or the backend does not
/// stream): a streamed backend answer is read to its end here, through the same relay.
pub async fn call_backend(
    plan: &CallPlan,
    served: &Rc<Prepared>,
    env: &Env,
    ctx: &Context,
    incoming: &[(String, String)],
) -> Value {
    let (app, target) = match resolve(&served.def, plan.app_index, env) {
        Ok(found) => found,
        Err(outcome) => return server::finish_call(plan, outcome, VERSION),
    };
    match &app.backend {
        Backend::Mcp(_) => {
            CallStream::upstream(plan.clone(), target, Rc::clone(served), incoming.to_vec(), env, Some(ctx))
                .into_final()
                .await
        }
        Backend::HttpTool(c) if c.async_endpoints.is_some() => {
            polled(plan.clone(), app, target, env, Some(ctx)).into_final().await
        }
        _ if app.streams(false) => CallStream::new(plan.clone(), target, env, ctx).into_final().await,
        _ => server::finish_call(plan, call_blocking(plan, &target).await, VERSION),
    }
}

/// A call whose progress goes to the client as SSE while it runs (`AppDefinition::streams(true)`).
pub fn call_streamed(
    plan: CallPlan,
    served: &Rc<Prepared>,
    env: &Env,
    ctx: &Context,
    incoming: Vec<(String, String)>,
) -> Result<CallStream, Value> {
    let (app, target) =
        resolve(&served.def, plan.app_index, env).map_err(|o| server::finish_call(&plan, o, VERSION))?;
    Ok(match &app.backend {
        Backend::Mcp(_) => CallStream::upstream(plan, target, Rc::clone(served), incoming, env, Some(ctx)),
        Backend::HttpTool(c) if c.async_endpoints.is_some() => polled(plan, app, target, env, Some(ctx)),
        _ => CallStream::new(plan, target, env, ctx),
    })
}

/// An async HTTP tool (the async tool protocol's endpoints) called without a task: submitted, then polled to
/// its end within the call, at the app's `poll_interval_seconds`.
fn polled(plan: CallPlan, app: &AppDefinition, target: Target, env: &Env, ctx: Option<&Context>) -> CallStream {
    let endpoints = app.backend.as_http_tool().and_then(|c| c.async_endpoints.clone());
    let interval = app.backend.tasks().poll_interval_seconds.unwrap_or(polled::DEFAULT_INTERVAL_S);
    // `endpoints` is there: the callers match on it.
    let endpoints =
        endpoints.unwrap_or(AsyncEndpoints { status_endpoint: String::new(), cancel_endpoint: String::new() });
    let (work_plan, work_target) = (plan.clone(), target.clone());
    CallStream::beside(plan, target, env, ctx, move |send, abort| {
        crate::shell::backend::http_tool::polled::run(work_plan, work_target, endpoints, interval, send, abort)
    })
}

fn resolve<'d>(def: &'d ServerDefinition, app_index: usize, env: &Env) -> Result<(&'d AppDefinition, Target), Outcome> {
    Ok((app_of(def, app_index)?, target_of(def, app_index, env)?))
}

/// A call run to its end outside a client request (inside a task's Durable Object): the final
/// JSON-RPC response.
pub async fn run_to_completion(plan: &CallPlan, served: &Rc<Prepared>, env: &Env) -> Value {
    let (app, target) = match resolve(&served.def, plan.app_index, env) {
        Ok(found) => found,
        Err(outcome) => return server::finish_call(plan, outcome, VERSION),
    };
    match &app.backend {
        Backend::Mcp(_) => {
            CallStream::upstream(plan.clone(), target, Rc::clone(served), Vec::new(), env, None).into_final().await
        }
        Backend::HttpTool(c) if c.async_endpoints.is_some() => {
            polled(plan.clone(), app, target, env, None).into_final().await
        }
        _ if app.streams(false) => CallStream::detached(plan.clone(), target, env).into_final().await,
        _ => server::finish_call(plan, call_blocking(plan, &target).await, VERSION),
    }
}

async fn call_blocking(plan: &CallPlan, b: &Target) -> Outcome {
    let headers = match request_headers(plan, b) {
        Ok(h) => h,
        Err(bad) => return bad.into(),
    };
    let url = format!("{}{}", b.base_url, plan.request.path());
    let body = plan.request.http_body();
    // The first byte is bounded on its own, as on the streamed path; the total bounds the rest.
    let started = crate::shell::platform::now_ms();
    let first_byte = b.first_byte.min(b.total);
    let mut resp = match outbound::send(Method::Post, &url, headers, body, first_byte).await {
        Ok(r) => r,
        Err(SendError::TimedOut) => return first_byte_timed_out(&b.app_name, b, first_byte),
        Err(e) => return send_failed(plan, b, e),
    };
    let status = resp.status_code();
    let retry_after = resp.headers().get("retry-after");
    let content_type = resp.headers().get("content-type").unwrap_or_default();
    let left = b.total.saturating_sub(Duration::from_millis(crate::shell::platform::now_ms().saturating_sub(started)));
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
