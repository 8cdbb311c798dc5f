//! Task toolsets of an upstream MCP app: the submit tool called as a task starts a durable task
//! that the TaskRunner follows with the status tool and stops with the cancel tool, each called
//! on the upstream with the app's own credentials, never the submitting client's.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::sim::{Backend, BackendRequest, Reply};

const TOOLSETS: &str = "https://toolsets.test";
const TEAM_KEY: &str = "team-key-0123456789";

/// An upstream with `report_submit`, `report_status` and `report_cancel`: a report is done at
/// its third status poll, unless it was cancelled first.
/// One tool call: the tool, its arguments, the `x-team-key` and `x-user-token` it came with.
type Call = (String, Value, Option<String>, Option<String>);

#[derive(Default)]
struct Reports {
    calls: RefCell<Vec<Call>>,
    cancelled: RefCell<Vec<String>>,
}

impl Reports {
    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.calls.borrow().iter().filter(|c| c.0 == tool).map(|c| c.1.clone()).collect()
    }
}

impl Backend for Reports {
    fn handle(&self, req: &BackendRequest, _now: u64) -> Reply {
        let Some(msg) = req.json() else { return Reply::new(405, "", Vec::new()) };
        let Some(id) = msg.get("id").cloned() else { return Reply::new(202, "", Vec::new()) };
        let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "reports", "version": "1"}}),
            "tools/list" => json!({"tools": [tool("report_submit"), tool("report_status"), tool("report_cancel")]}),
            "tools/call" => {
                let name = msg["params"]["name"].as_str().unwrap_or_default().to_string();
                let args = msg["params"]["arguments"].clone();
                let (team, user) = (req.headers.get("x-team-key"), req.headers.get("x-user-token"));
                self.calls.borrow_mut().push((name.clone(), args.clone(), team, user));
                let task = args["task_id"].as_str().unwrap_or_default().to_string();
                let structured = match name.as_str() {
                    "report_submit" => {
                        json!({"task_id": format!("job-{}", args["topic"].as_str().unwrap_or("?")), "status": "running"})
                    }
                    "report_cancel" => {
                        self.cancelled.borrow_mut().push(task.clone());
                        json!({"task_id": task, "status": "cancelled"})
                    }
                    _ if self.cancelled.borrow().contains(&task) => json!({"task_id": task, "status": "cancelled"}),
                    _ if self.calls_of("report_status").len() >= 3 => {
                        json!({"task_id": task, "status": "completed", "result": {"report": format!("{task} done")}})
                    }
                    _ => json!({"task_id": task, "status": "running"}),
                };
                json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
            }
            _ => json!({}),
        };
        Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

fn reports(fx: &Fx) -> (Rc<Reports>, UpApp) {
    let r = Rc::new(Reports::default());
    fx.sim.add_backend(TOOLSETS, r.clone());
    fx.secret(TEAM_KEY);
    let toolset = json!({"name": "reports", "submit_tool": "report_submit", "status_tool": "report_status",
        "cancel_tool": "report_cancel"});
    let backend = json!({"task_toolsets": [toolset], "poll_interval_seconds": 1,
        "headers": {"X-Team-Key": TEAM_KEY}, "forward_headers": {"X-User-Token": "X-User-Token"}});
    let app = upstream_app(fx, "Reporter", &format!("{TOOLSETS}/mcp"), backend);
    (r, app)
}

const USER: [(&str, &str); 1] = [("x-user-token", "the-users-own-token")];

fn start(fx: &Fx, code: &str, topic: &str) -> String {
    let tool = tools(fx, code, &USER);
    let names: Vec<&str> = tool.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names.len(), 1, "status and cancel tools are not offered: {names:?}");
    let submit = tool[0].clone();
    assert_eq!(submit["execution"]["taskSupport"], "required", "{submit}");
    let params = json!({"name": names[0], "arguments": {"topic": topic}, "task": {"ttl": 600_000}});
    let created = rpc_with(fx, code, &USER, "tools/call", params);
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{created}");
    id
}

fn status(fx: &Fx, code: &str, id: &str) -> Value {
    rpc_with(fx, code, &USER, "tasks/get", json!({"taskId": id}))["result"]["status"].clone()
}

#[test]
fn a_toolset_task_is_followed_with_its_status_tool_and_its_result_is_the_reports() {
    let fx = Fx::new(340);
    let (up, app) = reports(&fx);
    let id = start(&fx, &app.code, "Q3");
    assert_eq!(status(&fx, &app.code, &id), "working");
    fx.sim.advance(10_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(up.calls_of("report_submit"), vec![json!({"topic": "Q3"})]);
    assert_eq!(status(&fx, &app.code, &id), "completed");
    let polls = up.calls_of("report_status");
    assert!(polls.len() >= 3 && polls.iter().all(|a| *a == json!({"task_id": "job-Q3"})), "{polls:?}");
    let r = rpc_with(&fx, &app.code, &USER, "tasks/result", json!({"taskId": id}));
    assert_eq!(r["result"]["structuredContent"], json!({"report": "job-Q3 done"}), "{r}");
    // In the background, with the app's own key and never the client's forwarded token.
    for (tool, _, team, user) in up.calls.borrow().iter().filter(|c| c.0 != "report_submit") {
        assert_eq!((team.as_deref(), user.as_deref()), (Some(TEAM_KEY), None), "{tool}");
    }
    fx.assert_invariants();
}

#[test]
fn cancelling_a_toolset_task_calls_its_cancel_tool_with_the_remote_id() {
    let fx = Fx::new(341);
    let (up, app) = reports(&fx);
    let id = start(&fx, &app.code, "never");
    fx.sim.advance(1_500).unwrap_or_else(|h| panic!("{h}"));
    let r = rpc_with(&fx, &app.code, &USER, "tasks/cancel", json!({"taskId": id}));
    assert!(r.get("result").is_some(), "{r}");
    fx.sim.advance(5_000).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(status(&fx, &app.code, &id), "cancelled");
    assert_eq!(up.calls_of("report_cancel"), vec![json!({"task_id": "job-never"})]);
    fx.assert_invariants();
}
