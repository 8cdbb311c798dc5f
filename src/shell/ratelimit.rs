//! Rate limiting per server code, with Cloudflare's rate-limiting binding (`MCP_RATE_LIMIT`,
//! requests per minute set in wrangler.toml). Chosen over a Durable Object because its counters
//! live in each location's memory: no storage round trip and no trip to a far-away object on the
//! hot path. Counts are per location, which is what abuse protection needs; an exact global count
//! would cost every request a call to one place. The same mechanism throttles failed console
//! authentications per client address (`ADMIN_AUTH_LIMIT`).
//!
//! A busy server code's calls do not wait for the binding: each is counted one call ahead
//! (`pure::prepaid`, which says why the limit still holds exactly), so a hot code's call is
//! admitted from isolate memory and its count for the next call runs beside its backend call.

use std::cell::RefCell;

use futures::channel::oneshot;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Context, Env};

use crate::pure::prepaid::Prepaid;

/// Server codes whose counts one isolate keeps ahead: the ones seen most lately (a code beyond
/// them is counted call by call, as when it is not busy).
const PREPAID_CAPACITY: usize = 64;

thread_local! {
    static PREPAID: RefCell<Prepaid<oneshot::Sender<()>>> = RefCell::new(Prepaid::new(PREPAID_CAPACITY));
}

/// `Ok(true)` when all of `messages` calls for the server code `key` may go on, each counted by
/// the `MCP_RATE_LIMIT` binding (a count made ahead where the code is busy, else its own); a
/// code refused a moment ago on this isolate is refused without asking (`memo`). `Err`: the
/// binding failed. A deployment without the binding is not limited.
pub async fn admit(env: &Env, ctx: &Context, key: &str, messages: usize) -> Result<bool, String> {
    if messages == 0 {
        return Ok(true);
    }
    let Some(limiter) = binding(env, super::platform::MCP_RATE_LIMIT) else { return Ok(true) };
    let period_ms = period_seconds(env).saturating_mul(1000);
    let now = super::platform::now_ms();
    let to_ask = PREPAID.with(|p| {
        let mut p = p.borrow_mut();
        (0..messages).filter(|_| !p.take(key, now, period_ms)).count()
    });
    let mut refused = 0;
    if to_ask > 0 {
        if super::memo::refused_lately(key, now) {
            refused = to_ask;
        } else {
            for answer in futures::future::join_all((0..to_ask).map(|_| limit(&limiter, key))).await {
                refused += usize::from(!answer?);
            }
        }
    }
    // A refused call takes a count made ahead meanwhile, or waits for the one in flight: a
    // count made ahead must not leave a call refused below the limit.
    while refused > 0 {
        if PREPAID.with(|p| p.borrow_mut().take_credit(key, super::platform::now_ms(), period_ms)) {
            refused -= 1;
            continue;
        }
        let (tx, rx) = oneshot::channel();
        if PREPAID.with(|p| p.borrow_mut().wait(key, tx)).is_err() {
            super::memo::remember_refusal(key, super::platform::now_ms());
            return Ok(false);
        }
        // Woken when it is answered (or dropped with its table entry): look again.
        let _ = rx.await;
    }
    if PREPAID.with(|p| p.borrow_mut().start(key)) {
        ctx.wait_until(count_ahead(limiter, key.to_string(), super::platform::now_ms(), period_ms));
    }
    Ok(true)
}

/// Counts one call ahead for `key` (asked at `asked_ms`) and wakes the calls waiting for it.
async fn count_ahead(limiter: JsValue, key: String, asked_ms: u64, period_ms: u64) {
    let allowed = match limit(&limiter, &key).await {
        Ok(allowed) => Some(allowed),
        Err(e) => {
            super::log::error(&format!("rate limiter: {e}"));
            None
        }
    };
    if allowed == Some(false) {
        super::memo::remember_refusal(&key, super::platform::now_ms());
    }
    for waiter in PREPAID.with(|p| p.borrow_mut().settle(&key, asked_ms, period_ms, allowed)) {
        let _ = waiter.send(());
    }
}

/// `Ok(true)` when one more event for `key` is within the limit of the rate-limiting binding
/// named `binding` (each call counts one). A deployment without the binding is not limited.
pub async fn allow_in(env: &Env, binding_name: &str, key: &str) -> Result<bool, String> {
    match binding(env, binding_name) {
        Some(limiter) => limit(&limiter, key).await,
        None => Ok(true),
    }
}

/// The rate-limiting binding named `name`, if the deployment has it.
fn binding(env: &Env, name: &str) -> Option<JsValue> {
    Reflect::get(env, &JsValue::from_str(name)).ok().filter(|b| !b.is_undefined() && !b.is_null())
}

/// One count for `key` by `limiter`: `Ok(true)` when it is within the limit.
async fn limit(limiter: &JsValue, key: &str) -> Result<bool, String> {
    // Called through JS directly: the binding's class name differs between the runtime and the
    // local simulator, so the typed wrapper's class check would refuse one of them.
    let limit = Reflect::get(limiter, &JsValue::from_str("limit"))
        .map_err(|_| "the rate limiter has no limit()".to_string())?;
    let limit: Function = limit.dyn_into().map_err(|_| "the rate limiter's limit is not a function".to_string())?;
    let arg = Object::new();
    Reflect::set(&arg, &JsValue::from_str("key"), &JsValue::from_str(key))
        .map_err(|_| "rate limiter argument".to_string())?;
    let promise: Promise = limit
        .call1(limiter, &arg)
        .map_err(|e| format!("the rate limiter failed: {e:?}"))?
        .dyn_into()
        .map_err(|_| "the rate limiter did not answer a promise".to_string())?;
    let outcome = JsFuture::from(promise).await.map_err(|e| format!("the rate limiter failed: {e:?}"))?;
    Ok(Reflect::get(&outcome, &JsValue::from_str("success")).ok().and_then(|v| v.as_bool()).unwrap_or(true))
}

/// The `Retry-After` hint and the period the binding counts over (seconds).
pub fn period_seconds(env: &Env) -> u64 {
    super::platform::setting(env, "RATE_LIMIT_PERIOD_SECONDS").and_then(|v| v.trim().parse().ok()).unwrap_or(60)
}
