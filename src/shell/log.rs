//! Structured JSON logs: one object per line, each with the request id that the response also
//! carries (`x-request-id`), so a person can find the lines of one request. Nothing secret is
//! ever logged: no server codes (paths are logged with `<code>`, see `pure::path::loggable`), no
//! credentials, no bodies.

use std::cell::RefCell;

use crate::json;
use serde_json::Value;

thread_local! {
    static REQUEST_ID: RefCell<String> = const { RefCell::new(String::new()) };
    /// This isolate's random 32-bit prefix (drawn once) and the count of requests it began.
    static SEQUENCE: std::cell::Cell<Option<(u32, u32)>> = const { std::cell::Cell::new(None) };
}

/// Starts a request: a fresh id (16 hex digits: the isolate's random prefix, then its request
/// count) that later lines carry. Unique within an isolate, and across isolates but for a 2^-32
/// chance per pair; one random draw per isolate instead of one per request.
pub fn begin() -> String {
    let (prefix, n) = SEQUENCE.with(|c| {
        let (prefix, n) = c.get().unwrap_or_else(|| {
            let mut b = [0u8; 4];
            let _ = crate::runtime::fill_random(&mut b);
            (u32::from_be_bytes(b), 0)
        });
        c.set(Some((prefix, n.wrapping_add(1))));
        (prefix, n)
    });
    let id = format!("{prefix:08x}{n:08x}");
    REQUEST_ID.with(|r| *r.borrow_mut() = id.clone());
    id
}

pub fn request_id() -> String {
    REQUEST_ID.with(|r| r.borrow().clone())
}

fn line(level: &str, msg: &str, fields: Value) {
    let mut o = json!({ "level": level, "request_id": request_id(), "msg": msg });
    if let (Some(o), Value::Object(f)) = (o.as_object_mut(), fields) {
        o.extend(f);
    }
    crate::runtime::log_line(&o.to_string());
}

pub fn info(msg: &str, fields: Value) {
    line("info", msg, fields);
}

pub fn error(msg: &str) {
    line("error", msg, Value::Null);
}

/// Forgets this isolate's request sequence (an isolate started again).
pub fn forget_sequence() {
    SEQUENCE.with(|c| c.set(None));
}
