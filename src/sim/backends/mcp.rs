//! An upstream MCP server over Streamable HTTP (after `tests/support/mcp-upstreams.mjs`):
//! `initialize` (with an `Mcp-Session-Id` when stateful), `tools/list`, `tools/call` of `echo`
//! and `headers`, `ping`; answers as JSON or as an event stream.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::runtime::Method;
use crate::sim::network::{Backend, BackendRequest, Reply};

#[derive(Default)]
pub struct McpUpstream {
    /// Sessions: `Mcp-Session-Id` issued at `initialize`, required afterwards.
    pub stateful: bool,
    /// Answers as `text/event-stream` (when the client accepts it).
    pub sse: bool,
    sessions: RefCell<BTreeSet<String>>,
    next_session: Cell<u64>,
    pub requests: RefCell<Vec<BackendRequest>>,
}

fn rpc_error(status: u16, id: Value, code: i64, message: &str) -> Reply {
    Reply::json(status, &json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id}))
}

fn tools() -> Value {
    json!([
        {"name": "echo", "title": "Echo", "description": "Echoes its text.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
         "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
         "annotations": {"readOnlyHint": true}},
        {"name": "headers", "description": "The call's HTTP request headers.",
         "inputSchema": {"type": "object", "properties": {}}}
    ])
}

impl McpUpstream {
    pub fn new(stateful: bool, sse: bool) -> McpUpstream {
        McpUpstream { stateful, sse, ..McpUpstream::default() }
    }

    /// The result of one call, or its JSON-RPC error (code, message).
    fn answer(&self, req: &BackendRequest, method: &str, params: &Value) -> Result<Value, (i64, String)> {
        match method {
            "initialize" => Ok(json!({
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-06-18")),
                "capabilities": {"tools": {"listChanged": false}, "logging": {}},
                "serverInfo": {"name": "sim-upstream", "version": "1.0.0"}
            })),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": tools() })),
            "tools/call" => {
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                match params.get("name").and_then(Value::as_str) {
                    Some("echo") => {
                        let text = args.get("text").and_then(Value::as_str).unwrap_or("");
                        Ok(
                            json!({"content": [{"type": "text", "text": format!("echo: {text}")}], "structuredContent": {"text": text}}),
                        )
                    }
                    Some("headers") => {
                        let h: serde_json::Map<String, Value> =
                            req.headers.iter().map(|(n, v)| (n.to_string(), json!(v))).collect();
                        let h = Value::Object(h);
                        Ok(
                            json!({"content": [{"type": "text", "text": h.to_string()}], "structuredContent": {"headers": h}}),
                        )
                    }
                    other => Err((-32602, format!("Tool {} not found", other.unwrap_or("")))),
                }
            }
            _ => Err((-32601, "Method not found".into())),
        }
    }
}

impl Backend for McpUpstream {
    fn handle(&self, req: &BackendRequest, _now_ms: u64) -> Reply {
        self.requests.borrow_mut().push(req.clone());
        let session = req.headers.get("mcp-session-id");
        if req.method == Method::Delete && self.stateful {
            let known = session.is_some_and(|s| self.sessions.borrow_mut().remove(&s));
            return if known {
                Reply::new(200, "", Vec::new())
            } else {
                rpc_error(404, Value::Null, -32001, "Session not found")
            };
        }
        if req.method != Method::Post {
            return rpc_error(405, Value::Null, -32000, "Method not allowed.").with_header("allow", "POST, DELETE");
        }
        let accept = req.headers.get("accept").unwrap_or_default();
        if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
            return rpc_error(
                406,
                Value::Null,
                -32000,
                "Not Acceptable: Client must accept both application/json and text/event-stream",
            );
        }
        let Some(msg) = req.json() else { return rpc_error(400, Value::Null, -32700, "Parse error") };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("").to_string();
        let id = msg.get("id").cloned();
        let mut new_session = None;
        if self.stateful {
            if method == "initialize" {
                let n = self.next_session.get() + 1;
                self.next_session.set(n);
                let sid = format!("sim-session-{n}");
                self.sessions.borrow_mut().insert(sid.clone());
                new_session = Some(sid);
            } else {
                match &session {
                    None => return rpc_error(400, Value::Null, -32000, "Bad Request: No valid session ID provided"),
                    Some(s) if !self.sessions.borrow().contains(s) => {
                        return rpc_error(404, Value::Null, -32001, "Session not found")
                    }
                    Some(_) => {}
                }
            }
        }
        // A notification or a response from the client: accepted, nothing to answer.
        let Some(id) = id.filter(|_| !method.is_empty()) else { return Reply::new(202, "", Vec::new()) };
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        let answer = match self.answer(req, &method, &params) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        };
        let reply = if self.sse {
            Reply::sse(vec![format!("event: message\ndata: {answer}\n\n")], 0)
        } else {
            Reply::json(200, &answer)
        };
        match new_session {
            Some(sid) => reply.with_header("mcp-session-id", &sid),
            None => reply,
        }
    }
}
