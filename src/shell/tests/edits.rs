//! Editing what exists: `PATCH /servers/{id}` (name, description, parameter descriptions, status,
//! a multi-app server's apps), seen by clients at once; edits that would do nothing refused
//! with the reason; the apps list saying where each app is published.

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

fn patch(fx: &Fx, id: &str, b: Value) -> ClientResponse {
    fx.console(Method::Patch, &format!("/servers/{id}"), Some(&b))
}

/// The tools a client lists now.
fn tools(fx: &Fx, code: &str) -> Vec<Value> {
    let r = fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(r.status, 200, "{}", r.text());
    last(&r)["result"]["tools"].as_array().cloned().unwrap_or_default()
}

fn initialize_instructions(fx: &Fx, code: &str) -> Value {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": V2025,
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    last(&fx.mcp(code, &init))["result"]["instructions"].clone()
}

#[test]
fn a_patch_changes_what_clients_see_at_once() {
    let fx = Fx::new(4211);
    // A memo that would hide a change not written through.
    fx.sim.set_setting("DEFINITION_MEMO_SECONDS", "600");
    let a = fx.workflow("Alpha", "app-alpha-key");
    let b = fx.workflow("Beta", "app-beta-key");
    let (id, code) = fx.server("Pair", &[&a]);
    assert_eq!(tools(&fx, &code).len(), 1);
    let r = patch(
        &fx,
        &id,
        json!({"name": "Renamed", "description": "New instructions", "parameters": {"text": "What to summarise"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = body(&r);
    assert_eq!((v["name"].as_str(), v["description"].as_str()), (Some("Renamed"), Some("New instructions")));
    assert_eq!(v["parameters"], json!({"text": "What to summarise"}));
    assert_eq!(v["app_ids"], json!([a]));
    let listed = tools(&fx, &code);
    assert_eq!(listed[0]["inputSchema"]["properties"]["text"]["description"], "What to summarise", "{listed:?}");
    assert_eq!(initialize_instructions(&fx, &code), "New instructions");
    // The apps: both, in the order given; then one again.
    let r = patch(&fx, &id, json!({"app_ids": [b, a]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<Value> = tools(&fx, &code).iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("Beta"), json!("Alpha")]);
    // Another isolate reads the rewritten KV entry.
    fx.sim.evict_isolate();
    assert_eq!(tools(&fx, &code).len(), 2);
    // A cleared description drops the row; the other fields stay.
    let r = patch(&fx, &id, json!({"parameters": {"text": ""}}));
    assert_eq!(body(&r)["parameters"], json!({}), "{}", r.text());
    assert_eq!(body(&r)["name"], "Renamed");
    let listed = tools(&fx, &code);
    assert_eq!(listed[0]["inputSchema"]["properties"]["text"]["description"], "Text", "back to the label");
    let audit = body(&fx.console(Method::Get, "/audit", None))["data"].as_array().cloned().unwrap_or_default();
    let patches = audit.iter().filter(|e| e["action"] == "PATCH /servers/{id}" && e["target"] == id.as_str()).count();
    assert_eq!(patches, 3);
    fx.assert_invariants();
}

#[test]
fn a_one_app_server_takes_description_and_parameters_and_refuses_the_rest_saying_why() {
    let fx = Fx::new(4212);
    let app = fx.workflow("Solo", "app-solo-key");
    let code = fx.publish(&app);
    let id = body(&fx.console(Method::Get, &format!("/apps/{app}/server"), None))["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = patch(&fx, &id, json!({"description": "Solo server", "parameters": {"text": "Your text"}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tools(&fx, &code)[0]["inputSchema"]["properties"]["text"]["description"], "Your text");

    let r = patch(&fx, &id, json!({"name": "Other"}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("named after its app") && r.text().contains(&format!("/apps/{app}")), "{}", r.text());
    let r = patch(&fx, &id, json!({"app_ids": [app]}));
    assert!(r.status == 400 && r.text().contains("several apps"), "{}", r.text());
    let r = patch(&fx, &id, json!({"parameters": {"txt": "typo"}}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(body(&r)["errors"][0]["field"], "parameters.txt");
    assert!(r.text().contains("their inputs: text"), "{}", r.text());
    let r = patch(&fx, &id, json!({}));
    assert!(r.status == 400 && r.text().contains("nothing to change"), "{}", r.text());
    // Nothing of the refused edits was stored.
    let v = body(&fx.console(Method::Get, &format!("/servers/{id}"), None));
    assert_eq!((v["name"].as_str(), v["parameters"].clone()), (Some("Solo"), json!({"text": "Your text"})));
    // Who may, and what exists.
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "v", "role": "viewer"})));
    let viewer = body(&r)["token"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(viewer.clone());
    let r = fx.console_as(&viewer, Method::Patch, &format!("/servers/{id}"), Some(&json!({"description": "x"})));
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(patch(&fx, "no-such-server", json!({"description": "x"})).status, 404);
    fx.assert_invariants();
}

#[test]
fn a_multi_app_server_refuses_apps_that_do_not_exist() {
    let fx = Fx::new(4213);
    let a = fx.workflow("Alpha", "app-alpha-key");
    let (id, code) = fx.server("Pair", &[&a]);
    let r = patch(&fx, &id, json!({"app_ids": [a, "no-such-app"]}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(body(&r)["message"], "app_ids: no app with id \"no-such-app\"");
    // Parameters are held to the apps the edit leaves.
    let r = patch(&fx, &id, json!({"parameters": {"query": "q"}}));
    assert!(r.status == 400 && r.text().contains("parameters.query"), "{}", r.text());
    assert_eq!(tools(&fx, &code).len(), 1);
    fx.assert_invariants();
}

#[test]
fn the_apps_list_says_where_each_app_is_published() {
    let fx = Fx::new(4214);
    let a = fx.workflow("Alpha", "app-alpha-key");
    let b = fx.workflow("Beta", "app-beta-key");
    let lonely = fx.workflow("Lonely", "app-lonely-key");
    fx.publish(&a);
    let (pair, _) = fx.server("Pair", &[&a, &b]);
    let apps = body(&fx.console(Method::Get, "/apps", None))["data"].as_array().cloned().unwrap_or_default();
    let servers_of = |id: &str| -> Value {
        apps.iter().find(|x| x["id"] == id).map(|x| x["servers"].clone()).unwrap_or(Value::Null)
    };
    let one = body(&fx.console(Method::Get, &format!("/apps/{a}/server"), None))["id"].clone();
    assert_eq!(
        servers_of(&a),
        json!([{"id": one, "name": "Alpha", "kind": "app"}, {"id": pair, "name": "Pair", "kind": "multi"}])
    );
    assert_eq!(servers_of(&b), json!([{"id": pair, "name": "Pair", "kind": "multi"}]));
    assert_eq!(servers_of(&lonely), json!([]));
    let r = fx.console(Method::Get, &format!("/apps/{b}"), None);
    assert_eq!(body(&r)["servers"], json!([{"id": pair, "name": "Pair", "kind": "multi"}]));
    // A rename shows there at once.
    assert_eq!(patch(&fx, &pair, json!({"name": "Duo"})).status, 200);
    assert_eq!(body(&fx.console(Method::Get, &format!("/apps/{b}"), None))["servers"][0]["name"], "Duo");
    fx.assert_invariants();
}
