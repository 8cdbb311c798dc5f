//! The Streamable HTTP transport's header rules as the MCP endpoint applies them (the shell
//! reads the headers; these decide): which content types and Accept values pass, whether the
//! client takes SSE, whether a body needs the upstream MCP apps' tool lists, which of its
//! messages the rate limit counts, and which headers a CORS preflight allows.

use std::borrow::Cow;

use serde_json::Value;

use crate::pure::http_field::is_header_name;
use crate::pure::protocol::methods;
use crate::pure::protocol::param_headers;

/// `Content-Type: application/json`, any case, parameters allowed.
pub fn is_json_content_type(ct: &str) -> bool {
    ct.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether an `Accept` header admits a JSON or SSE answer.
pub fn accepts_json(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let t = part.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        matches!(t.as_str(), "application/json" | "text/event-stream" | "*/*" | "application/*" | "")
    })
}

/// Whether the client takes an SSE answer (progress can then flow while a call runs).
pub fn accepts_sse(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.to_ascii_lowercase().contains("text/event-stream"))
}

/// Whether a message (or batch) lists or calls tools, which needs the upstream tool lists.
pub fn mentions_tools(body: &Value) -> bool {
    let is = |m: &Value| matches!(m["method"].as_str(), Some(methods::TOOLS_LIST | methods::TOOLS_CALL));
    match body {
        Value::Array(items) => items.iter().any(is),
        m => is(m),
    }
}

/// Whether a message (or batch) needs the upstream MCP apps' catalogs: a resources, prompts or
/// completion request, or the handshake, whose capabilities depend on what the upstreams offer.
pub fn mentions_catalogs(body: &Value) -> bool {
    let is = |m: &Value| {
        m["method"]
            .as_str()
            .is_some_and(|m| super::gateway::METHODS.contains(&m) || m == methods::INITIALIZE || m == methods::DISCOVER)
    };
    match body {
        Value::Array(items) => items.iter().any(is),
        m => is(m),
    }
}

/// How many messages of a body (one, or a batch) the per-server rate limit counts: those that
/// can reach past the isolate (a backend, an upstream, storage, a Durable Object). `ping`,
/// `logging/setLevel`, the client's own notifications of progress and readiness are answered
/// from the isolate's memory, and refusing them would cost the Worker what answering costs: a
/// 429 saves only what is behind the Worker. So they skip the limiter, whose call is the largest
/// part of the CPU such a request takes. The handshake (`initialize`, `server/discover`) and
/// `tools/list` are answered from memory too, unless the server has upstream MCP apps
/// (`upstream_lists`): then they read the upstreams' tool lists or catalogs (KV, else the
/// upstream itself), and count.
pub fn rate_counted(body: &Value, upstream_lists: bool) -> usize {
    let counts = |m: &Value| match m.get("method").and_then(Value::as_str) {
        // A client's answer to a request relayed from an upstream goes on to that upstream.
        None => m.get("result").is_some() || m.get("error").is_some(),
        Some(methods::CANCELLED) => true,
        Some(n) if n.starts_with("notifications/") => false,
        Some(methods::INITIALIZE | methods::DISCOVER | methods::TOOLS_LIST) => upstream_lists,
        Some(method) => !matches!(method, methods::PING | methods::SET_LEVEL),
    };
    match body {
        Value::Array(items) => items.iter().filter(|m| counts(m)).count(),
        m => usize::from(counts(m)),
    }
}

/// `Access-Control-Allow-Headers` for a preflight: the fixed list, plus the `Mcp-Param-*`
/// headers the browser asks about (their names come from tool schemas, so no fixed list can
/// hold them). Only valid header names are echoed.
pub fn allowed_headers(fixed: &'static str, requested: Option<&str>) -> Cow<'static, str> {
    let mut out = Cow::Borrowed(fixed);
    for name in requested.into_iter().flat_map(|r| r.split(',')).map(str::trim) {
        let is_param =
            name.get(..param_headers::PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(param_headers::PREFIX));
        if is_param && name.len() > param_headers::PREFIX.len() && is_header_name(name) {
            let s = out.to_mut();
            s.push_str(", ");
            s.push_str(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn preflights_allow_the_mcp_param_headers_asked_for() {
        assert_eq!(allowed_headers("content-type, mcp-name", None), "content-type, mcp-name");
        assert_eq!(allowed_headers("a", Some("content-type, mcp-method")), "a");
        assert_eq!(
            allowed_headers("a", Some("content-type,Mcp-Param-Region, mcp-param-priority ,mcp-param-, mcp-param-x y")),
            "a, Mcp-Param-Region, mcp-param-priority"
        );
    }

    #[test]
    fn the_rate_limit_counts_what_can_reach_past_the_isolate() {
        for cheap in [
            "initialize",
            "server/discover",
            "ping",
            "tools/list",
            "logging/setLevel",
            "notifications/initialized",
            "notifications/progress",
        ] {
            assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "method": cheap}), false), 0, "{cheap}");
        }
        // With upstream MCP apps, the handshake and tools/list read their lists: counted.
        for m in ["initialize", "server/discover", "tools/list"] {
            assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "method": m}), true), 1, "{m}");
        }
        for cheap in ["ping", "logging/setLevel", "notifications/initialized"] {
            assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "method": cheap}), true), 0, "{cheap}");
        }
        for costly in [
            "tools/call",
            "tasks/get",
            "tasks/result",
            "tasks/cancel",
            "tasks/list",
            "resources/read",
            "resources/list",
            "prompts/get",
            "completion/complete",
            "notifications/cancelled",
            "no/such/method",
        ] {
            for upstreams in [false, true] {
                assert_eq!(
                    rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "method": costly}), upstreams),
                    1,
                    "{costly}"
                );
            }
        }
        // Not JSON-RPC: refused in memory. A response may go on to an upstream: counted.
        assert_eq!(rate_counted(&json!(42), true), 0);
        assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1}), true), 0);
        assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}), false), 1);
        assert_eq!(rate_counted(&json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "no"}}), false), 1);
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "t"}}
        ]);
        assert_eq!(rate_counted(&batch, false), 2);
        assert_eq!(rate_counted(&batch, true), 3);
    }

    #[test]
    fn content_types() {
        for ok in ["application/json", "Application/JSON; charset=utf-8", " application/json ;x=y"] {
            assert!(is_json_content_type(ok), "{ok}");
        }
        for bad in ["", "text/plain", "application/json-seq", "application/jsonx; charset=utf-8", "multipart/form-data"]
        {
            assert!(!is_json_content_type(bad), "{bad}");
        }
    }

    #[test]
    fn accept_values() {
        for ok in [
            "application/json",
            "text/event-stream",
            "application/json, text/event-stream",
            "*/*",
            "application/*;q=0.5",
            "text/html, */*",
        ] {
            assert!(accepts_json(ok), "{ok}");
        }
        for bad in ["text/html", "image/png, text/plain", "application/xml"] {
            assert!(!accepts_json(bad), "{bad}");
        }
        assert!(accepts_sse(Some("application/json, Text/Event-Stream")));
        assert!(!accepts_sse(Some("application/json")));
        assert!(!accepts_sse(None));
    }

    #[test]
    fn which_bodies_need_tool_lists() {
        assert!(mentions_tools(&json!({"method": "tools/list"})));
        assert!(mentions_tools(&json!([{"method": "ping"}, {"method": "tools/call"}])));
        assert!(!mentions_tools(&json!({"method": "initialize"})));
        assert!(!mentions_tools(&json!([{"method": "ping"}])));
        assert!(!mentions_tools(&json!("tools/list")));
        for m in ["initialize", "server/discover", "resources/read", "prompts/list", "completion/complete"] {
            assert!(mentions_catalogs(&json!({"method": m})), "{m}");
        }
        assert!(mentions_catalogs(&json!([{"method": "ping"}, {"method": "resources/list"}])));
        assert!(!mentions_catalogs(&json!({"method": "tools/call"})));
        assert!(!mentions_catalogs(&json!([{"method": "ping"}])));
    }
}
