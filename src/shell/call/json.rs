//! A backend call whose answer is one JSON value (a task's submit, status and cancel calls, and
//! an async HTTP tool polled within a call): sent once more at once when it fails before any
//! answer, if it may be repeated; its answer read under the app's limits.

use crate::runtime::Method;
use serde_json::Value;

use crate::pure::mcp::server::CallPlan;

use crate::shell::call::stream::{request_headers, Target};
use crate::shell::outbound::{self, SendError};

#[derive(Debug)]
pub enum CallError {
    Http(u16, String),
    Other(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Http(status, body) => {
                write!(f, "HTTP {status}: {}", crate::pure::outcome::truncate(body.trim(), 300))
            }
            CallError::Other(m) => f.write_str(m),
        }
    }
}

/// Whether a call that failed before any answer arrived is sent again at once.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A submit: the backend may have started work, so it is never repeated.
    Never,
    /// A status read or a cancel (both idempotent): a pooled connection that the backend had
    /// already closed fails this way ("Network connection lost"), and that is not the
    /// backend's failure, so it costs neither a backoff step nor a degraded mark.
    Once,
}

pub async fn get_json(backend: &Target, plan: &CallPlan, url: &str) -> Result<Value, CallError> {
    call_json(backend, plan, Method::Get, url, None, Resend::Once).await
}

pub async fn post_json(
    backend: &Target,
    plan: &CallPlan,
    url: &str,
    body: &Value,
    resend: Resend,
) -> Result<Value, CallError> {
    call_json(backend, plan, Method::Post, url, Some(body), resend).await
}

async fn call_json(
    backend: &Target,
    plan: &CallPlan,
    method: Method,
    url: &str,
    body: Option<&Value>,
    resend: Resend,
) -> Result<Value, CallError> {
    let headers = || request_headers(plan, backend).map_err(|_| CallError::Other("bad credentials".into()));
    let mut sent = outbound::send(method.clone(), url, headers()?, body, backend.first_byte).await;
    if resend == Resend::Once && matches!(sent, Err(SendError::Unreachable(_))) {
        sent = outbound::send(method, url, headers()?, body, backend.first_byte).await;
    }
    let mut resp = match sent {
        Ok(r) => r,
        Err(SendError::Unreachable(e)) => return Err(CallError::Other(format!("unreachable: {e}"))),
        Err(SendError::TimedOut) => return Err(CallError::Other("timed out".into())),
        Err(SendError::TooLarge(_)) => return Err(CallError::Other("the answer is too large".into())),
    };
    let status = resp.status_code();
    let text = outbound::text(&mut resp, backend.idle, outbound::one_piece_cap(backend.max_result_bytes))
        .await
        .map_err(|e| match e {
            SendError::TooLarge(cap) => CallError::Other(format!(
                "the answer is larger than {} KiB (the app's max_result_bytes bounds it)",
                cap / 1024
            )),
            SendError::TimedOut => CallError::Other("the answer did not arrive in time".into()),
            SendError::Unreachable(_) => CallError::Other("the answer broke off".into()),
        })?;
    if !(200..300).contains(&status) {
        return Err(CallError::Http(status, text));
    }
    serde_json::from_str(&text).map_err(|_| CallError::Other("the answer is not JSON".into()))
}
