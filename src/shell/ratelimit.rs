//! Rate limiting per server code, with Cloudflare's rate-limiting binding (`MCP_RATE_LIMIT`,
//! requests per minute set in wrangler.toml). Chosen over a Durable Object because its counters
//! live in each location's memory: no storage round trip and no trip to a far-away object on the
//! hot path. Counts are per location, which is what abuse protection needs; an exact global count
//! would cost every request a call to one place. The same mechanism throttles failed console
//! authentications per client address (`ADMIN_AUTH_LIMIT`).

use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::Env;

/// `Ok(true)` when the request may go on (the `MCP_RATE_LIMIT` binding). A deployment without
/// the binding is not limited.
pub async fn allow(env: &Env, key: &str) -> Result<bool, String> {
    allow_in(env, super::platform::MCP_RATE_LIMIT, key).await
}

/// `Ok(true)` when one more event for `key` is within the limit of the rate-limiting binding
/// named `binding` (each call counts one). A deployment without the binding is not limited.
pub async fn allow_in(env: &Env, binding: &str, key: &str) -> Result<bool, String> {
    let binding = match Reflect::get(env, &JsValue::from_str(binding)) {
        Ok(b) if !b.is_undefined() && !b.is_null() => b,
        _ => return Ok(true),
    };
    // Called through JS directly: the binding's class name differs between the runtime and the
    // local simulator, so the typed wrapper's class check would refuse one of them.
    let limit = Reflect::get(&binding, &JsValue::from_str("limit"))
        .map_err(|_| "the rate limiter has no limit()".to_string())?;
    let limit: Function = limit.dyn_into().map_err(|_| "the rate limiter's limit is not a function".to_string())?;
    let arg = Object::new();
    Reflect::set(&arg, &JsValue::from_str("key"), &JsValue::from_str(key))
        .map_err(|_| "rate limiter argument".to_string())?;
    let promise: Promise = limit
        .call1(&binding, &arg)
        .map_err(|e| format!("the rate limiter failed: {e:?}"))?
        .dyn_into()
        .map_err(|_| "the rate limiter did not answer a promise".to_string())?;
    let outcome = JsFuture::from(promise).await.map_err(|e| format!("the rate limiter failed: {e:?}"))?;
    Ok(Reflect::get(&outcome, &JsValue::from_str("success")).ok().and_then(|v| v.as_bool()).unwrap_or(true))
}

/// The `Retry-After` hint and the period the binding counts over (seconds).
pub fn period_seconds(env: &Env) -> u64 {
    super::platform::setting(env, crate::pure::config::RATE_LIMIT_PERIOD_SECONDS)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(60)
}
