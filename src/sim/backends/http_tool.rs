//! A custom HTTP tool endpoint (after `tests/support/http-tool-fixture.mjs`): tools by path,
//! each with its bearer key; a JSON answer, or an event stream when the body asks for it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::runtime::Method;
use crate::sim::network::{Backend, BackendRequest, BodyEnd, Reply};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    #[default]
    Ok,
    Error400,
    Error500,
    /// 200 text/html.
    NotJson,
    /// 204, no body.
    NoContent,
    /// 429 with `Retry-After: 7`.
    RateLimited,
}

#[derive(Debug, Clone, Default)]
pub struct Tool {
    pub api_key: String,
    /// The answer; `None`: `{"echo": <the request body>}`.
    pub result: Option<Value>,
    pub behaviour: Behaviour,
    pub delay_ms: u64,
    /// Streams close without the result event.
    pub end_early: bool,
}

#[derive(Default)]
pub struct HttpTool {
    tools: RefCell<BTreeMap<String, Tool>>,
    pub requests: RefCell<Vec<BackendRequest>>,
}

fn error(status: u16, message: &str) -> Reply {
    Reply::json(status, &json!({ "error": message }))
}

impl HttpTool {
    /// Serves `tool` at `/tools/<name>`; that path.
    pub fn add_tool(&self, name: &str, tool: Tool) -> String {
        let path = format!("/tools/{name}");
        self.tools.borrow_mut().insert(path.clone(), tool);
        path
    }
}

impl Backend for HttpTool {
    fn handle(&self, req: &BackendRequest, _now_ms: u64) -> Reply {
        self.requests.borrow_mut().push(req.clone());
        let path = req.path.split('?').next().unwrap_or("");
        let Some(tool) = self.tools.borrow().get(path).cloned() else { return error(404, "not found") };
        if req.method != Method::Post {
            return error(405, "method not allowed").with_header("allow", "POST");
        }
        if req.bearer().as_deref() != Some(tool.api_key.as_str()) {
            return error(401, "invalid api key");
        }
        let Some(body) = req.json().filter(Value::is_object) else { return error(400, "invalid JSON body") };
        let result = tool.result.clone().unwrap_or_else(|| json!({ "echo": body }));
        let reply = match tool.behaviour {
            Behaviour::Error400 => error(400, "Invalid location format. Expected 'City, State'."),
            Behaviour::Error500 => error(500, "upstream exploded"),
            Behaviour::NotJson => Reply::new(200, "text/html; charset=utf-8", "<html>oops</html>"),
            Behaviour::NoContent => Reply::new(204, "", Vec::new()),
            Behaviour::RateLimited => error(429, "slow down").with_header("retry-after", "7"),
            Behaviour::Ok if body.get("stream") == Some(&Value::Bool(true)) => {
                let mut frames = vec![
                    format!("data: {}\n\n", json!({"type": "thought", "message": "Working on it..."})),
                    format!("data: {}\n\n", json!({"type": "progress", "percent": 50})),
                ];
                if !tool.end_early {
                    frames.push(format!("data: {}\n\n", json!({"type": "result", "result": result})));
                }
                Reply::sse(frames, 10).ending(BodyEnd::Complete)
            }
            Behaviour::Ok => Reply::json(200, &result),
        };
        reply.delayed(tool.delay_ms)
    }
}
