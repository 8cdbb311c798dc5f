//! What the upstream MCP tests share: an upstream app published as a server of its own, its
//! tools by name, JSON-RPC calls with a client's headers, a recording origin.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::{Backend, BackendRequest, Reply};

/// Another public origin, where no credential of the upstream's may go.
pub const OTHER: &str = "https://other.test";

/// An upstream app published alone.
pub struct UpApp {
    pub app_id: String,
    pub server_id: String,
    pub code: String,
}

/// An upstream MCP app at `url` with `backend` settings merged in, published; `Err` is the
/// console's answer (status, body) when it refuses the app.
pub fn try_upstream_app(fx: &Fx, name: &str, url: &str, backend: Value) -> Result<UpApp, (u16, String)> {
    let mut b = json!({ "url": url });
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": name, "description": "d", "mode": "mcp", "backend": b})),
    );
    if r.status != 201 {
        return Err((r.status, r.text()));
    }
    let app_id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    let body = json!({"description": "An upstream", "parameters": {}});
    let p = fx.console(Method::Post, &format!("/apps/{app_id}/server"), Some(&body));
    assert_eq!(p.status, 201, "publishing: {}", p.text());
    let v = p.json().unwrap_or_default();
    let code = v["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(code.clone());
    Ok(UpApp { app_id, server_id: v["id"].as_str().unwrap_or_default().to_string(), code })
}

pub fn upstream_app(fx: &Fx, name: &str, url: &str, backend: Value) -> UpApp {
    try_upstream_app(fx, name, url, backend).unwrap_or_else(|(s, t)| panic!("creating the app: {s} {t}"))
}

/// The tools a server lists.
pub fn tools(fx: &Fx, code: &str, headers: &[(&str, &str)]) -> Vec<Value> {
    let v = last(&fx.mcp_with(code, headers, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})));
    v["result"]["tools"].as_array().cloned().unwrap_or_default()
}

/// The listed name of the upstream's tool `name`.
pub fn tool_named(fx: &Fx, code: &str, name: &str) -> String {
    let names: Vec<String> =
        tools(fx, code, &[]).iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
    names.iter().find(|n| n.ends_with(name)).cloned().unwrap_or_else(|| panic!("no tool {name} in {names:?}"))
}

/// One JSON-RPC request with `headers`; the last message of the answer.
pub fn rpc_with(fx: &Fx, code: &str, headers: &[(&str, &str)], method: &str, params: Value) -> Value {
    last(&fx.mcp_with(code, headers, &json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})))
}

/// The text of a call's result, and whether it is a tool error.
pub fn result_text(v: &Value) -> (bool, String) {
    let r = &v["result"];
    (r["isError"].as_bool().unwrap_or(false), r["content"][0]["text"].as_str().unwrap_or_default().to_string())
}

/// The upstream's requests of JSON-RPC `method`.
pub fn upstream_calls(fx: &Fx, method: &str) -> Vec<BackendRequest> {
    fx.upstream.requests.borrow().iter().filter(|r| r.json().is_some_and(|m| m["method"] == method)).cloned().collect()
}

/// A recording origin answering every request with `reply`.
pub fn recording(
    fx: &Fx,
    origin: &str,
    reply: impl Fn(&BackendRequest) -> Reply + 'static,
) -> Rc<RefCell<Vec<BackendRequest>>> {
    let seen: Rc<RefCell<Vec<BackendRequest>>> = Rc::default();
    let s = seen.clone();
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, _now: u64| {
        s.borrow_mut().push(req.clone());
        reply(req)
    });
    fx.sim.add_backend(origin, backend);
    seen
}
