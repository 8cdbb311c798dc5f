//! An async HTTP tool called without a task: the work is submitted, its status polled until it
//! ends, and the call answers with its result (`pure::backend::http_tool::polled` decides what
//! each answer means). It runs beside the relay of a `CallStream`, like an upstream MCP call, so
//! the relay's keep-alives, the app's timeout and cancellation apply to it: when the relay
//! gives up (the timeout, the client gone) the run is cancelled at the backend, and a
//! `notifications/cancelled` cancels it through the record registered for it.

use crate::pure::backend::run_record::RunRecord;
use std::future::Future;

use crate::json;
use crate::runtime::{Headers, Method};
use futures::future::{select, Either};
use serde_json::Value;

use crate::pure::backend::http_tool::config::AsyncEndpoints;
use crate::pure::backend::http_tool::polled::{self, Next};
use crate::pure::mcp::server::{self, CallPlan, Progress};
use crate::pure::outcome::Outcome;
use crate::pure::task::{self, PollOutcome};

use crate::shell::call::json::{post_json, Resend};
use crate::shell::call::stream::{Relayed, Target};
use crate::shell::VERSION;

/// Runs the call to its end (`Relayed::Done`), or until `abort` (then the run is cancelled).
pub async fn run(
    plan: CallPlan,
    target: Target,
    endpoints: AsyncEndpoints,
    interval_s: u64,
    send: Box<dyn Fn(Relayed)>,
    abort: impl Future<Output = ()>,
) {
    futures::pin_mut!(abort);
    let app = target.app_name.clone();
    let body = plan.request.http_body().cloned().unwrap_or(Value::Null);
    let submitted = match first(post_json(&target, &plan, &target.base_url, &body, Resend::Never), &mut abort).await {
        // Abandoned before the submit answered: there is no id to cancel.
        None => return,
        Some(Ok(v)) => task::parse_async_submit(&v),
        Some(Err(e)) => Err(e.to_string()),
    };
    let remote = match submitted {
        Ok(remote) => remote,
        Err(e) => {
            let outcome = Outcome::Failed(format!("the tool '{app}' did not accept the work: {e}"));
            return send(Relayed::Done(server::finish_call(&plan, outcome, VERSION)));
        }
    };
    // The record a `notifications/cancelled` stops the run by; the cancel goes out with the same
    // user headers as the submit.
    send(Relayed::Run(RunRecord::AsyncTool {
        app_index: plan.app_index,
        task_id: remote.clone(),
        user: plan.user.clone(),
    }));
    let mut progress = Progress::default();
    // The first check comes soon: many runs are short.
    let mut wait_ms = polled::wait_ms(Some(1.0), interval_s);
    for polls in 1u32.. {
        if first(crate::runtime::sleep(wait_ms), &mut abort).await.is_none() {
            return cancel(&target, &endpoints.cancel_endpoint, &plan.user, &remote).await;
        }
        let ask = json!({"task_id": remote});
        let status = post_json(&target, &plan, &endpoints.status_endpoint, &ask, Resend::Once);
        let outcome = match first(status, &mut abort).await {
            None => return cancel(&target, &endpoints.cancel_endpoint, &plan.user, &remote).await,
            // A status tool that reports isError is busy, not broken (as for a task): retried.
            Some(Ok(v)) if v.get("isError") == Some(&Value::Bool(true)) => {
                PollOutcome::Transient("the status endpoint reported an error".into())
            }
            Some(Ok(v)) => task::parse_async_status(&v, &remote),
            Some(Err(e)) => PollOutcome::Transient(e.to_string()),
        };
        match polled::next(outcome, &app, polls, interval_s) {
            Next::Poll { wait_ms: next, signal } => {
                wait_ms = next;
                // The backend answered: the call is alive even if the client hears nothing.
                send(Relayed::Alive);
                if let Some(note) = signal.and_then(|s| server::notification(&plan, s, &mut progress)) {
                    send(Relayed::Note(note));
                }
            }
            Next::Done(outcome) => {
                let outcome = outcome.capped(&app, target.max_result_bytes);
                return send(Relayed::Done(server::finish_call(&plan, outcome, VERSION)));
            }
        }
    }
}

/// `Some(output)` of `work`, or `None` when `abort` comes first.
async fn first<T>(work: impl Future<Output = T>, abort: &mut (impl Future<Output = ()> + Unpin)) -> Option<T> {
    futures::pin_mut!(work);
    match select(work, abort).await {
        Either::Left((out, _)) => Some(out),
        Either::Right(_) => None,
    }
}

/// Cancels the run at the backend's cancel endpoint (best effort: errors are only logged).
pub async fn cancel(target: &Target, cancel_url: &str, user: &str, remote: &str) {
    let mut headers = Headers::new();
    headers.set("content-type", "application/json");
    let set = headers
        .try_set("x-dify-conversation-id", user)
        .and_then(|_| headers.try_set("x-dify-user-id", user))
        .and_then(|_| match target.api_key.as_str() {
            "" => Ok(()),
            key => headers.try_set("authorization", &format!("Bearer {key}")),
        });
    if set.is_err() {
        return;
    }
    let body = json!({"task_id": remote});
    match crate::shell::outbound::send(Method::Post, cancel_url, headers, Some(&body), target.first_byte).await {
        Ok(r) if (200..300).contains(&r.status_code()) => {}
        Ok(r) => crate::shell::log::error(&format!(
            "cancelling a run of tool '{}': HTTP {}",
            target.app_name,
            r.status_code()
        )),
        Err(_) => crate::shell::log::error(&format!(
            "cancelling a run of tool '{}': the cancel endpoint could not be reached",
            target.app_name
        )),
    }
}
