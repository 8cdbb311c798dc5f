//! Rate limiting per server code, with Cloudflare's rate-limiting binding (`MCP_RATE_LIMIT`,
//! requests per minute set in wrangler.toml). Chosen over a Durable Object because its counters
//! live in each location's memory: no storage round trip and no trip to a far-away object on the
//! hot path. Counts are per location, which is what abuse protection needs; an exact global count
//! would cost every request a call to one place. The same mechanism throttles failed console
//! authentications per client address (`ADMIN_AUTH_LIMIT`).

use crate::runtime::Env;

/// The rate limiter could not be asked (its caller decides what that means: the MCP endpoint
/// lets the request through, the console still refuses the failed attempt).
#[derive(Debug)]
pub struct Error(crate::runtime::Error);

impl From<crate::runtime::Error> for Error {
    fn from(e: crate::runtime::Error) -> Error {
        Error(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the rate limiter failed: {}", self.0)
    }
}

/// `Ok(true)` when the request may go on (the `MCP_RATE_LIMIT` binding). A deployment without
/// the binding is not limited.
pub async fn allow(env: &Env, key: &str) -> Result<bool, Error> {
    allow_in(env, crate::shell::platform::MCP_RATE_LIMIT, key).await
}

/// `Ok(true)` when one more event for `key` is within the limit of the rate-limiting binding
/// named `binding` (each call counts one). A deployment without the binding is not limited.
pub async fn allow_in(env: &Env, binding: &str, key: &str) -> Result<bool, Error> {
    Ok(env.runtime().rate_limit(binding, key).await?)
}

/// The `Retry-After` hint and the period the binding counts over (seconds).
pub fn period_seconds(env: &Env) -> u64 {
    crate::shell::platform::settings(env).rate_limit_period_seconds
}
