//! The endpoint's HTTP answers: JSON-RPC bodies and empty statuses, each with the CORS headers
//! an allowed browser origin needs.

use crate::pure::mcp::http_rules::allowed_headers;
use crate::runtime::{Headers, Response};
use serde_json::Value;

/// The request headers a browser client may send (the preflight's answer).
const ALLOWED_HEADERS: &str =
    "content-type, accept, authorization, mcp-protocol-version, mcp-session-id, mcp-method, mcp-name, last-event-id";

pub(super) fn with_cors(headers: &mut Headers, origin: Option<&str>) -> crate::runtime::Result<()> {
    if let Some(o) = origin {
        headers.set("access-control-allow-origin", o);
        headers.set("vary", "Origin");
        headers.set("access-control-expose-headers", "mcp-session-id, mcp-protocol-version, www-authenticate");
    }
    Ok(())
}

pub(super) fn preflight(origin: Option<&str>, requested: Option<String>) -> crate::runtime::Result<Response> {
    let mut headers = Headers::new();
    with_cors(&mut headers, origin)?;
    headers.set("access-control-allow-methods", "POST, OPTIONS");
    headers.set("access-control-allow-headers", &allowed_headers(ALLOWED_HEADERS, requested.as_deref()));
    headers.set("access-control-max-age", "86400");
    headers.set("allow", "POST, OPTIONS");
    Ok(Response::empty().with_status(204).with_headers(headers))
}

pub(super) fn rpc(status: u16, body: &Value, origin: Option<&str>) -> crate::runtime::Result<Response> {
    rpc_bytes(status, serde_json::to_vec(body)?, origin)
}

pub(super) fn rpc_text(status: u16, body: String, origin: Option<&str>) -> crate::runtime::Result<Response> {
    rpc_bytes(status, body.into_bytes(), origin)
}

fn rpc_bytes(status: u16, body: Vec<u8>, origin: Option<&str>) -> crate::runtime::Result<Response> {
    let mut headers = Headers::new();
    headers.set("content-type", "application/json");
    headers.set("cache-control", "no-store");
    with_cors(&mut headers, origin)?;
    Ok(Response::from_bytes(body).with_status(status).with_headers(headers))
}

pub(super) fn accepted(origin: Option<&str>) -> crate::runtime::Result<Response> {
    empty(202, origin)
}

pub(super) fn empty(status: u16, origin: Option<&str>) -> crate::runtime::Result<Response> {
    let mut headers = Headers::new();
    with_cors(&mut headers, origin)?;
    Ok(Response::empty().with_status(status).with_headers(headers))
}
