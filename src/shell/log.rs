//! Structured JSON logs: one object per line, each with the request id that the response also
//! carries (`x-request-id`), so a person can find the lines of one request. Nothing secret is
//! ever logged: no server codes (paths are logged with `<code>`, see `pure::path::loggable`), no
//! credentials, no bodies.

use std::cell::RefCell;

use serde_json::{json, Value};
use worker::console_log;

thread_local! {
    static REQUEST_ID: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Starts a request: a fresh id (64 random bits, hex) that later lines carry.
pub fn begin() -> String {
    let mut b = [0u8; 8];
    let id = match getrandom::getrandom(&mut b) {
        Ok(()) => crate::pure::ids::hex(&b),
        Err(_) => "0000000000000000".into(),
    };
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
    console_log!("{o}");
}

pub fn info(msg: &str, fields: Value) {
    line("info", msg, fields);
}

pub fn error(msg: &str) {
    line("error", msg, Value::Null);
}
