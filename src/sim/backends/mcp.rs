//! An upstream MCP server over Streamable HTTP (after `tests/support/mcp-upstreams.mjs`):
//! `initialize` (with an `Mcp-Session-Id` when stateful), `tools/list`, `tools/call` of `echo`,
//! `headers` and `slow_progress`, `ping`; answers as JSON or as an event stream (where
//! `slow_progress` sends its progress and log notifications, `delayMs` apart on the clock).

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
         "inputSchema": {"type": "object", "properties": {}}},
        {"name": "slow_progress", "description": "Sends a progress notification and a log message per step, then \"done <steps>\"",
         "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer", "minimum": 0}, "delayMs": {"type": "number", "minimum": 0}}, "required": ["steps", "delayMs"]}}
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
                    Some("slow_progress") => {
                        let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(0);
                        Ok(json!({"content": [{"type": "text", "text": format!("done {steps}")}]}))
                    }
                    other => Err((-32602, format!("Tool {} not found", other.unwrap_or("")))),
                }
            }
            _ => Err((-32601, "Method not found".into())),
        }
    }
}

/// The notifications `slow_progress` sends before its answer, one step each (progress only
/// with a `progressToken`).
fn notifications(method: &str, params: &Value) -> Vec<String> {
    if method != "tools/call" || params.get("name").and_then(Value::as_str) != Some("slow_progress") {
        return Vec::new();
    }
    let steps = params["arguments"]["steps"].as_u64().unwrap_or(0);
    let token = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
    let mut frames = Vec::new();
    for i in 1..=steps {
        let mut step = Vec::new();
        if let Some(t) = &token {
            step.push(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": t, "progress": i, "total": steps, "message": format!("step {i}/{steps}")}}));
        }
        step.push(json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "slow_progress", "data": format!("step {i}/{steps}")}}));
        frames.push(step.iter().map(|m| format!("event: message\ndata: {m}\n\n")).collect());
    }
    frames
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
            let mut frames = notifications(&method, &params);
            let delay = params["arguments"]["delayMs"].as_u64().unwrap_or(0);
            frames.push(format!("event: message\ndata: {answer}\n\n"));
            // Each notification and the answer `delayMs` apart (the first right away).
            let mut reply = Reply::sse(frames, delay);
            if let Reply::Respond(s) = &mut reply {
                if let Some(first) = s.chunks.first_mut() {
                    first.delay_ms = delay;
                }
            }
            reply
        } else {
            Reply::json(200, &answer)
        };
        match new_session {
            Some(sid) => reply.with_header("mcp-session-id", &sid),
            None => reply,
        }
    }
}
