//! A backend call whose answer is one JSON value (a task's submit, status and cancel calls, and
//! an async HTTP tool polled within a call): sent once more at once when it fails before any
//! answer, if it may be repeated; its answer read under the app's limits.

use crate::runtime::Method;
use serde_json::Value;

use crate::pure::mcp::server::CallPlan;

use crate::shell::call::stream::{request_headers, BadCredentials, Target};
use crate::shell::outbound::{self, SendError};

/// Why a JSON call gave no value. Shown as a short phrase the caller puts after what failed.
#[derive(Debug)]
pub enum CallError {
    /// The backend answered outside 2xx: its status and body.
    Http(u16, String),
    /// The app's credentials cannot be sent.
    BadCredentials,
    /// The request got no answer.
    NotSent(SendError),
    /// The answer came but could not be read whole.
    Unread(SendError),
    NotJson,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Http(status, body) => {
                write!(f, "HTTP {status}: {}", crate::pure::outcome::truncate(body.trim(), 300))
            }
            CallError::BadCredentials => f.write_str("bad credentials"),
            CallError::NotSent(SendError::Unreachable(e)) => write!(f, "unreachable: {e}"),
            CallError::NotSent(SendError::TimedOut) => f.write_str("timed out"),
            CallError::NotSent(SendError::TooLarge(_)) => f.write_str("the answer is too large"),
            CallError::Unread(SendError::TooLarge(cap)) => {
                write!(f, "the answer is larger than {} KiB (the app's max_result_bytes bounds it)", cap / 1024)
            }
            CallError::Unread(SendError::TimedOut) => f.write_str("the answer did not arrive in time"),
            CallError::Unread(SendError::Unreachable(_)) => f.write_str("the answer broke off"),
            CallError::NotJson => f.write_str("the answer is not JSON"),
        }
    }
}

impl From<BadCredentials> for CallError {
    fn from(_: BadCredentials) -> CallError {
        CallError::BadCredentials
    }
}

impl From<serde_json::Error> for CallError {
    fn from(_: serde_json::Error) -> CallError {
        CallError::NotJson
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
    let headers = || request_headers(plan, backend);
    let mut sent = outbound::send(method.clone(), url, headers()?, body, backend.first_byte).await;
    if resend == Resend::Once && matches!(sent, Err(SendError::Unreachable(_))) {
        sent = outbound::send(method, url, headers()?, body, backend.first_byte).await;
    }
    let mut resp = sent.map_err(CallError::NotSent)?;
    let status = resp.status_code();
    let text = outbound::text(&mut resp, backend.idle, outbound::one_piece_cap(backend.max_result_bytes))
        .await
        .map_err(CallError::Unread)?;
    if !(200..300).contains(&status) {
        return Err(CallError::Http(status, text));
    }
    Ok(serde_json::from_str(&text)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::outbound::Unreachable;

    /// Each failure reads as the phrase a task's or a polled tool's error puts after what
    /// failed; a send and a read of the same kind say different things.
    #[test]
    fn call_errors_say_what_failed() {
        let says = |e: CallError| e.to_string();
        assert_eq!(
            says(CallError::Http(502, format!(" {} ", "x".repeat(400)))),
            format!("HTTP 502: {}", "x".repeat(300))
        );
        assert_eq!(says(BadCredentials("a".into()).into()), "bad credentials");
        let down = || SendError::Unreachable(Unreachable::Network("connection refused".into()));
        assert_eq!(says(CallError::NotSent(down())), "unreachable: connection refused");
        assert_eq!(says(CallError::NotSent(SendError::TimedOut)), "timed out");
        assert_eq!(says(CallError::NotSent(SendError::TooLarge(1))), "the answer is too large");
        assert_eq!(
            says(CallError::Unread(SendError::TooLarge(2048))),
            "the answer is larger than 2 KiB (the app's max_result_bytes bounds it)"
        );
        assert_eq!(says(CallError::Unread(SendError::TimedOut)), "the answer did not arrive in time");
        assert_eq!(says(CallError::Unread(down())), "the answer broke off");
        assert_eq!(says(serde_json::from_str::<Value>("{").unwrap_err().into()), "the answer is not JSON");
    }
}
