//! Outbound `fetch` with a deadline: no backend call may hang a request forever.

use std::time::Duration;

use futures::future::{select, Either};
use serde_json::Value;
use worker::{AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, Response};

use std::cell::Cell;

thread_local! {
    static ALLOW_PRIVATE: Cell<bool> = const { Cell::new(false) };
}

/// Reads `ALLOW_PRIVATE_BACKENDS` for this event (request or alarm): backends inside private
/// networks are refused unless it is `true`.
pub fn guard_from_env(env: &worker::Env) -> bool {
    let allow = env.var("ALLOW_PRIVATE_BACKENDS").map(|v| v.to_string() == "true").unwrap_or(false)
        || env.secret("ALLOW_PRIVATE_BACKENDS").map(|v| v.to_string() == "true").unwrap_or(false);
    ALLOW_PRIVATE.with(|a| a.set(allow));
    allow
}

pub enum SendError {
    /// The request could not be built or the connection failed (message from the runtime).
    Unreachable(String),
    TimedOut,
}

/// Sends `method url` with `headers` and an optional JSON body, aborting after `timeout`.
pub async fn send(
    method: Method,
    url: &str,
    headers: Headers,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Response, SendError> {
    if !ALLOW_PRIVATE.with(Cell::get) {
        if let Some(why) = crate::core::url::private_host_reason(url) {
            return Err(SendError::Unreachable(format!(
                "blocked: the backend host {why}; private backends need ALLOW_PRIVATE_BACKENDS=true"
            )));
        }
    }
    let mut init = RequestInit::new();
    init.with_method(method).with_headers(headers);
    if let Some(b) = body {
        init.with_body(Some(b.to_string().into()));
    }
    let req = Request::new_with_init(url, &init).map_err(|e| SendError::Unreachable(e.to_string()))?;
    let controller = AbortController::default();
    let signal = controller.signal();
    let fetch = Fetch::Request(req);
    let sent = fetch.send_with_signal(&signal);
    let deadline = Delay::from(timeout);
    futures::pin_mut!(sent, deadline);
    match select(sent, deadline).await {
        Either::Left((Ok(resp), _)) => Ok(resp),
        Either::Left((Err(e), _)) => Err(SendError::Unreachable(e.to_string())),
        Either::Right(_) => {
            controller.abort();
            Err(SendError::TimedOut)
        }
    }
}

/// Reads a response body with the same kind of deadline.
pub async fn text(resp: &mut Response, timeout: Duration) -> Result<String, SendError> {
    let read = resp.text();
    let deadline = Delay::from(timeout);
    futures::pin_mut!(read, deadline);
    match select(read, deadline).await {
        Either::Left((Ok(t), _)) => Ok(t),
        Either::Left((Err(e), _)) => Err(SendError::Unreachable(e.to_string())),
        Either::Right(_) => Err(SendError::TimedOut),
    }
}
