//! The console's tool playground (`console/playground.rs`): the tools as a client sees them, a
//! call through the endpoint's own dispatch streamed back; and the smaller console things of the
//! same issue: the audit log in words, a task's result.

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::backends::{dify, http_tool};
use crate::sim::ClientResponse;

const TOOL_KEY: &str = "tool-key-playground-0123";

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

/// The server id of an app's one-app server.
fn server_id_of(fx: &Fx, app_id: &str) -> String {
    let r = fx.console(Method::Get, &format!("/apps/{app_id}/server"), None);
    r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
}

/// A streaming HTTP tool (a thought, 50 %, then the result), published: (server id, code).
fn streaming_tool(fx: &Fx) -> (String, String) {
    fx.secret(TOOL_KEY);
    let path = fx.tool.add_tool("forecast", http_tool::Tool { api_key: TOOL_KEY.into(), ..Default::default() });
    let manifest = json!({"name": "forecast", "description": "The weather ahead.",
        "parameters": [{"name": "location", "type": "string", "required": true, "description": "City"}]});
    let backend =
        json!({"api_endpoint": format!("{TOOL}{path}"), "api_key": TOOL_KEY, "stream": true, "manifest": manifest});
    let body = json!({"name": "Forecast", "description": "d", "mode": "http-tool", "backend": backend});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let app = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    let code = fx.publish(&app);
    (server_id_of(fx, &app), code)
}

fn play(fx: &Fx, server_id: &str, body: &Value) -> ClientResponse {
    fx.console(Method::Post, &format!("/servers/{server_id}/tools/call"), Some(body))
}

fn method_of(m: &Value) -> &str {
    m["method"].as_str().unwrap_or("")
}

#[test]
fn the_playground_lists_the_tools_a_client_lists() {
    let fx = Fx::new(4201);
    let app = fx.workflow("Summariser", "app-key-pg-1");
    let code = fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    let r = fx.console(Method::Get, &format!("/servers/{server_id}/tools"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap_or_default();
    assert_eq!(v["protocol_version"], V2025);
    assert_eq!(v["status"], "active");
    let listed = last(&fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})));
    assert_eq!(v["tools"], listed["result"]["tools"], "not what a client of {V2025} lists");
    let tool = &v["tools"][0];
    assert_eq!(tool["name"], "Summariser");
    assert!(tool["inputSchema"]["properties"]["text"].is_object(), "{tool}");
    assert!(tool["outputSchema"].is_object(), "a 2025-11-25 client sees the output schema: {tool}");
    assert_eq!(fx.console(Method::Get, "/servers/nope/tools", None).status, 404);
    fx.assert_invariants();
}

#[test]
fn a_playground_call_streams_progress_and_logs_as_they_come_through_the_endpoint_path() {
    let fx = Fx::new(4202);
    let (server_id, code) = streaming_tool(&fx);
    let r = play(&fx, &server_id, &json!({"name": "Forecast", "arguments": {"location": "Oslo"}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.headers.get("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{:?}", r.headers);
    let msgs = messages(&r);
    let methods: Vec<&str> = msgs.iter().map(method_of).collect();
    assert_eq!(methods, ["notifications/message", "notifications/progress", ""], "{msgs:?}");
    assert_eq!(msgs[0]["params"]["data"]["thought"], "Working on it...", "{msgs:?}");
    assert_eq!(msgs[1]["params"]["progress"], 50);
    assert_eq!(msgs[1]["params"]["progressToken"], "playground");
    let result = &msgs[2]["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["echo"]["location"], "Oslo", "{result}");
    // The same call from a client gets the same answer.
    let from_client = last(&fx.mcp(
        &code,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "Forecast", "arguments": {"location": "Oslo"}}}),
    ));
    assert_eq!(from_client["result"]["structuredContent"], result["structuredContent"]);
    // The write is audited under the user's name.
    let audit = fx.console(Method::Get, "/audit", None).json().unwrap_or_default();
    let entry = audit["data"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["action"] == "POST /servers/{id}/tools/call"))
        .cloned();
    let entry = entry.unwrap_or_else(|| panic!("not audited: {audit}"));
    assert_eq!(entry["actor"], "admin");
    assert_eq!(entry["status"], 200);
    assert_eq!(entry["summary"], "Ran a tool in the playground of server “Forecast”");
    // Usage counts it and the call log names the console user.
    let calls = fx.console(Method::Get, &format!("/servers/{server_id}/calls"), None).json().unwrap_or_default();
    let by_console: Vec<&Value> = calls["data"]
        .as_array()
        .map(|a| a.iter().filter(|c| c["caller_kind"] == "console").collect())
        .unwrap_or_default();
    assert_eq!(by_console.len(), 1, "{calls}");
    assert_eq!(by_console[0]["caller"], "admin");
    assert_eq!(by_console[0]["streamed"], true);
    let usage = fx.console(Method::Get, &format!("/servers/{server_id}/usage"), None).json().unwrap_or_default();
    assert_eq!(usage["total"]["calls"], 2, "{usage}");
    fx.assert_invariants();
}

#[test]
fn the_playground_checks_arguments_as_the_endpoint_does_and_refuses_what_it_must() {
    let fx = Fx::new(4203);
    let app = fx.workflow("Echo", "app-key-pg-3");
    let code = fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    // A missing required argument: the tool error a client gets, word for word.
    let played = last(&play(&fx, &server_id, &json!({"name": "Echo", "arguments": {}})));
    let called = last(&fx.call(&code, "Echo", json!({})));
    assert_eq!(played["result"]["isError"], true, "{played}");
    assert_eq!(played["result"]["content"], called["result"]["content"]);
    // A tool the server does not have.
    let unknown = last(&play(&fx, &server_id, &json!({"name": "Nope"})));
    assert_eq!(unknown["error"]["message"], "Unknown tool: 'Nope'. This server has: Echo", "{unknown}");
    // Console errors name the field.
    for (body, field) in [(json!({}), "name"), (json!({"name": "Echo", "arguments": [1]}), "arguments")] {
        let r = play(&fx, &server_id, &body);
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json().unwrap_or_default()["errors"][0]["field"], field, "{}", r.text());
    }
    // A viewer may list but not run.
    let t = fx.console(Method::Post, "/tokens", Some(&json!({"name": "watcher", "role": "viewer"})));
    let viewer = t.json().and_then(|v| v["token"].as_str().map(str::to_string)).unwrap_or_default();
    fx.codes.borrow_mut().push(viewer.clone());
    assert_eq!(fx.console_as(&viewer, Method::Get, &format!("/servers/{server_id}/tools"), None).status, 200);
    let refused = fx.console_as(
        &viewer,
        Method::Post,
        &format!("/servers/{server_id}/tools/call"),
        Some(&json!({"name": "Echo", "arguments": {"text": "x"}})),
    );
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(
        fx.dify.requests_for("app-key-pg-3").iter().all(|q| !q.path.contains("run")),
        "a refused call reached Dify"
    );
    // An inactive server refuses its clients, and the playground too.
    let r =
        fx.console(Method::Put, &format!("/apps/{app}/server"), Some(&json!({"id": server_id, "status": "inactive"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = play(&fx, &server_id, &json!({"name": "Echo", "arguments": {"text": "x"}}));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("inactive"), "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn a_key_server_is_played_without_a_key_and_the_keys_are_not_needed_or_shown() {
    let fx = Fx::new(4204);
    let app = fx.workflow("Guarded", "app-key-pg-4");
    let code = fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    assert_eq!(
        fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"}))).status,
        200
    );
    assert_eq!(fx.call(&code, "Guarded", json!({"text": "x"})).status, 401, "a client needs its key");
    let r = play(&fx, &server_id, &json!({"name": "Guarded", "arguments": {"text": "x"}}));
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    // Dify was asked as the console user, who is also the call log's caller.
    let users: Vec<String> = fx
        .dify
        .requests_for("app-key-pg-4")
        .iter()
        .filter_map(|q| q.json().and_then(|b| b["user"].as_str().map(str::to_string)))
        .collect();
    assert_eq!(users, ["console:admin"]);
    let calls = fx.console(Method::Get, &format!("/servers/{server_id}/calls"), None).json().unwrap_or_default();
    assert_eq!(calls["data"][0]["caller_kind"], "console", "{calls}");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// The audit log in words, a task's result

#[test]
fn the_audit_log_says_what_was_done_to_which_named_thing() {
    let fx = Fx::new(4205);
    let app = fx.workflow("Summariser", "app-key-pg-5");
    fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    let (multi, _) = fx.server("Team tools", &[&app]);
    let r = fx.console(Method::Post, &format!("/servers/{multi}/keys"), Some(&json!({"name": "alice"})));
    assert_eq!(r.status, 201);
    fx.codes.borrow_mut().push(r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default());
    assert_eq!(fx.console(Method::Post, &format!("/apps/{server_id}/server/refresh"), None).status, 200);
    let gone = fx.workflow("Doomed", "app-key-pg-5b");
    assert_eq!(fx.console(Method::Delete, &format!("/apps/{gone}"), None).status, 200);
    let v = fx.console(Method::Get, "/audit", None).json().unwrap_or_default();
    let summaries: Vec<&str> =
        v["data"].as_array().map(|a| a.iter().filter_map(|e| e["summary"].as_str()).collect()).unwrap_or_default();
    for want in [
        "Created app",
        "Published app “Summariser”",
        "Created a multi-app server",
        "Created a client key of server “Team tools”",
        "Rotated the code of “Summariser”",
        &format!("Deleted app {} (since deleted)", &gone[..8]),
    ] {
        assert!(summaries.contains(&want), "{want:?} not in {summaries:#?}");
    }
    for s in &summaries {
        assert!(!s.contains("/apps") && !s.contains('{') && !s.contains(&server_id), "{s}");
    }
    let named: Vec<&Value> = v["data"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["target_name"] == "Team tools").collect())
        .unwrap_or_default();
    assert!(!named.is_empty(), "{v}");
    fx.assert_invariants();
}

#[test]
fn a_finished_task_shows_its_result_in_the_console() {
    let fx = Fx::new(4206);
    fx.dify
        .add_app("app-key-pg-6", dify::App { event_delay_ms: 200, name: "Job".into(), ..dify::App::new("workflow") });
    fx.secret("app-key-pg-6");
    let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
    let body = json!({"name": "Job", "description": "d", "mode": "workflow", "user_input_form": form,
        "outputs": [{"variable": "echo", "type": "object"}],
        "backend": {"base_url": format!("{DIFY}/v1"), "api_key": "app-key-pg-6", "task_support": "optional"}});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let app = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    let code = fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    let created = last(&fx.mcp(
        &code,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "Job", "arguments": {"text": "hello task"}, "task": {"ttl": 60_000}}}),
    ));
    let task_id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(!task_id.is_empty(), "{created}");
    let running =
        fx.console(Method::Get, &format!("/servers/{server_id}/tasks/{task_id}"), None).json().unwrap_or_default();
    assert_eq!(running["result"], Value::Null, "{running}");
    // (Not run to idle: that would run the clock to the task's expiry.)
    advance(&fx, 5_000);
    let done =
        fx.console(Method::Get, &format!("/servers/{server_id}/tasks/{task_id}"), None).json().unwrap_or_default();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["echo"]["text"], "hello task", "{done}");
    assert_eq!(done["error"], Value::Null);
    // Once the task has expired it is gone, result and all.
    advance(&fx, 61_000);
    assert_eq!(fx.console(Method::Get, &format!("/servers/{server_id}/tasks/{task_id}"), None).status, 404);
    fx.assert_invariants();
}
