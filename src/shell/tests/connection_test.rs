//! "Test connection" for an app (`POST /apps/{id}/test`): each backend kind probed with what
//! runs nothing, and each failure said with its fix.

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::backends::{dify, http_tool};
use crate::sim::Faults;

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

/// Creates an app from `b`; its id.
fn app(fx: &Fx, b: Value) -> String {
    let r = fx.console(Method::Post, "/apps", Some(&b));
    assert_eq!(r.status, 201, "{}", r.text());
    body(&r)["id"].as_str().unwrap_or_default().to_string()
}

fn dify_body(name: &str, mode: &str, base_url: &str, key: &str) -> Value {
    json!({"name": name, "mode": mode,
        "backend": {"base_url": base_url, "api_key": key},
        "user_input_form": [{"text-input": {"variable": "text", "label": "Text", "required": true}}]})
}

/// Tests app `id`: the report.
fn test(fx: &Fx, id: &str) -> Value {
    let r = fx.console(Method::Post, &format!("/apps/{id}/test"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    body(&r)
}

fn failed(report: &Value) -> (String, String) {
    assert_eq!(report["ok"], false, "{report}");
    (report["problem"].as_str().unwrap_or_default().into(), report["fix"].as_str().unwrap_or_default().into())
}

#[test]
fn a_working_dify_app_passes_and_runs_nothing() {
    let fx = Fx::new(4221);
    let id = fx.workflow("Summ", "app-summ-key");
    let report = test(&fx, &id);
    assert_eq!(report["ok"], true, "{report}");
    let steps: Vec<(&str, &str)> = report["checks"]
        .as_array()
        .map(|c| c.iter().map(|c| (c["step"].as_str().unwrap_or(""), c["level"].as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    assert_eq!(steps, [("GET /info", "ok"), ("GET /parameters", "ok")]);
    let paths: Vec<String> = fx.dify.requests.borrow().iter().map(|r| format!("{:?} {}", r.method, r.path)).collect();
    assert_eq!(paths, ["Get /v1/info", "Get /v1/parameters"], "probes only");
    fx.assert_invariants();
}

#[test]
fn each_dify_mistake_is_named_with_its_fix() {
    let fx = Fx::new(4222);
    fx.dify.add_app("app-good", dify::App::new("workflow"));
    fx.dify.add_app("app-chat", dify::App::new("chat"));
    for k in ["app-good", "app-chat", "app-wrong"] {
        fx.secret(k);
    }
    // The wrong key.
    let (problem, fix) = failed(&test(&fx, &app(&fx, dify_body("K", "workflow", &format!("{DIFY}/v1"), "app-wrong"))));
    assert!(problem.contains("refused the API key (HTTP 401: \"Access token is invalid\")"), "{problem}");
    assert!(fix.contains("API Access"), "{fix}");
    // base_url without /v1.
    let (problem, fix) = failed(&test(&fx, &app(&fx, dify_body("V", "workflow", DIFY, "app-good"))));
    assert!(problem.contains("does not end in /v1"), "{problem}");
    assert!(fix.contains("add /v1 to base_url"), "{fix}");
    // A chat app registered as a workflow.
    let (problem, fix) = failed(&test(&fx, &app(&fx, dify_body("M", "workflow", &format!("{DIFY}/v1"), "app-chat"))));
    assert!(problem.contains("is a \"chat\" app, but Flowgate calls it as workflow"), "{problem}");
    assert!(fix.contains("set the app's mode to \"chat\""), "{fix}");
    // Nothing listens there.
    let (problem, fix) =
        failed(&test(&fx, &app(&fx, dify_body("R", "workflow", "https://nothing.test/v1", "app-good"))));
    assert!(problem.contains("could not connect to the Dify API at nothing.test"), "{problem}");
    assert!(problem.contains("connection refused"), "{problem}");
    assert!(fix.contains("check the host and port"), "{fix}");
    // No answer in time.
    let slow = app(&fx, dify_body("T", "workflow", &format!("{DIFY}/v1"), "app-good"));
    fx.sim.set_faults(Faults { fetch_hang: 1.0, ..Faults::default() });
    let (problem, fix) = failed(&test(&fx, &slow));
    fx.sim.set_faults(Faults::default());
    assert!(problem.contains("did not answer within 10 s"), "{problem}");
    assert!(fix.contains("firewall"), "{fix}");
    fx.assert_invariants();
}

#[test]
fn an_input_form_that_differs_from_difys_is_said() {
    let fx = Fx::new(4223);
    let form = json!([{"text-input": {"variable": "topic", "label": "Topic", "required": true}}]);
    fx.dify.add_app("app-form", dify::App { user_input_form: form, ..dify::App::new("workflow") });
    fx.secret("app-form");
    let id = app(&fx, dify_body("F", "workflow", &format!("{DIFY}/v1"), "app-form"));
    let (problem, fix) = failed(&test(&fx, &id));
    assert!(problem.contains("Dify's form has topic") && problem.contains("Flowgate's form has text"), "{problem}");
    assert!(fix.contains("input form"), "{fix}");
    fx.assert_invariants();
}

#[test]
fn an_unset_secret_reference_names_where_to_set_it() {
    let fx = Fx::new(4224);
    fx.sim.set_setting("SECRET_REF_NAMES", "DIFY_KEY_UNSET");
    let id = app(&fx, dify_body("S", "workflow", &format!("{DIFY}/v1"), "$DIFY_KEY_UNSET"));
    let (problem, fix) = failed(&test(&fx, &id));
    assert!(problem.contains("backend.api_key refers to $DIFY_KEY_UNSET, which is not set"), "{problem}");
    assert!(fix.contains(".dev.vars") && fix.contains("wrangler secret put"), "{fix}");
    assert!(fx.dify.requests.borrow().is_empty(), "nothing sent without a key");
    fx.assert_invariants();
}

#[test]
fn http_tools_and_upstreams_are_probed_too() {
    let fx = Fx::new(4225);
    let path = fx.tool.add_tool("weather", http_tool::Tool { api_key: "tool-key".into(), ..Default::default() });
    fx.secret("tool-key");
    let tool = |endpoint: String| {
        json!({"name": "W", "mode": "http-tool", "backend": {"api_endpoint": endpoint, "api_key": "tool-key"},
            "user_input_form": [{"text-input": {"variable": "city", "label": "City", "required": true}}]})
    };
    let report = test(&fx, &app(&fx, tool(format!("{TOOL}{path}"))));
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["checks"][0]["detail"].as_str().unwrap_or_default().contains("HTTP 405"), "{report}");
    assert!(fx.tool.requests.borrow().iter().all(|r| r.method == Method::Get), "a GET only: nothing ran");
    let (problem, fix) = failed(&test(&fx, &app(&fx, tool(format!("{TOOL}/tools/nope")))));
    assert!(problem.contains("no such endpoint (HTTP 404)") && fix.contains("api_endpoint"), "{problem} / {fix}");

    let up = |url: String| json!({"name": "U", "mode": "mcp", "backend": {"url": url}});
    let report = test(&fx, &app(&fx, up(format!("{UPSTREAM}/mcp"))));
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["checks"][0]["detail"].as_str().unwrap_or_default().contains("answers with"), "{report}");
    let (problem, fix) = failed(&test(&fx, &app(&fx, up("https://nothing.test/mcp".into()))));
    assert!(problem.contains("could not reach upstream U at nothing.test"), "{problem}");
    assert!(fix.contains("check backend.url"), "{fix}");

    // Viewers cannot make Flowgate call a backend.
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "v", "role": "viewer"})));
    let viewer = body(&r)["token"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(viewer.clone());
    let id = fx.workflow("Summ", "app-summ-key");
    assert_eq!(fx.console_as(&viewer, Method::Post, &format!("/apps/{id}/test"), None).status, 403);
    assert_eq!(fx.console(Method::Post, "/apps/no-such-app/test", None).status, 404);
    fx.assert_invariants();
}
