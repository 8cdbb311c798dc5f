//! Console routes the suite reached but did not check: the playground's own refusals and name,
//! the server list, a multi-app server's apps changed by `PUT`, and a server code that collides
//! (publishing and rotating draw again; a D1 failure is not taken for a collision).

use serde_json::{json, Value};

use super::*;
use crate::pure::ids::sha256_hex;
use crate::runtime::{Method, SqlValue, Statement};

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

fn rows(fx: &Fx, sql: &str, args: Vec<SqlValue>) -> Vec<Value> {
    fx.sim.d1_rows("DB", Statement::new(sql, args)).expect("reading D1")
}

fn d1(fx: &Fx, sql: &str, args: Vec<SqlValue>) {
    fx.sim.d1_batch("DB", vec![Statement::new(sql, args)]).expect("writing D1");
}

fn server_id_of(fx: &Fx, app_id: &str) -> String {
    let r = fx.console(Method::Get, &format!("/apps/{app_id}/server"), None);
    body(&r)["id"].as_str().unwrap_or_default().to_string()
}

/// Another server holding the code hash `hash`, so that a code drawn with it collides in
/// D1's UNIQUE index (a real collision, not an injected error).
fn block_code_hash(fx: &Fx, hash: &str) {
    d1(
        fx,
        "INSERT INTO mcp_servers (id, name, code_hash, code_hint, created_at, updated_at)
         VALUES ('blocker', 'Blocker', ?1, 'xxxx', 0, 0)",
        vec![SqlValue::Text(hash.to_string())],
    );
}

#[test]
fn the_playground_refuses_an_empty_tool_name_and_names_itself_as_the_end_user() {
    let fx = Fx::new(4301);
    let app = fx.workflow("Echo", "app-key-ck-1");
    fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/tools/call"), Some(&json!({"name": ""})));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(body(&r)["errors"][0]["field"], "name", "{}", r.text());
    let r = fx.console(
        Method::Post,
        &format!("/servers/{server_id}/tools/call"),
        Some(&json!({"name": "Echo", "arguments": {"text": "x"}})),
    );
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    // The console user is the end user, under the playground's own name (not "mcp-client").
    let users =
        rows(&fx, "SELECT session_key, name FROM end_users WHERE server_id = ?1", vec![SqlValue::Text(server_id)]);
    assert_eq!(users, [json!({"session_key": "console:admin", "name": "flowgate-console-playground"})]);
    fx.assert_invariants();
}

#[test]
fn servers_are_listed_and_a_multi_app_servers_apps_can_change_by_put() {
    let fx = Fx::new(4302);
    let a = fx.workflow("Alpha", "app-key-ck-2a");
    let b = fx.workflow("Beta", "app-key-ck-2b");
    fx.publish(&a);
    let (multi, _) = fx.server("Team", &[&a]);
    let listed = body(&fx.console(Method::Get, "/servers", None));
    let mut kinds: Vec<(String, String)> = listed["data"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|s| (s["name"].as_str().unwrap_or("").to_string(), s["kind"].as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    kinds.sort();
    assert_eq!(kinds, [("Alpha".to_string(), "app".to_string()), ("Team".to_string(), "multi".to_string())]);
    // A multi-app server's apps change by PUT; a one-app server's cannot.
    let r = fx.console(Method::Put, &format!("/servers/{multi}"), Some(&json!({"app_ids": [a, b]})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(body(&r)["app_ids"], json!([a, b]));
    let one = server_id_of(&fx, &a);
    let r = fx.console(Method::Put, &format!("/servers/{one}"), Some(&json!({"name": "Renamed"})));
    assert_eq!(r.status, 200, "a one-app server's name changes: {}", r.text());
    let r = fx.console(Method::Put, &format!("/servers/{one}"), Some(&json!({"app_ids": [b]})));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(body(&r)["errors"][0]["field"], "app_ids");
    fx.assert_invariants();
}

/// The simulator is deterministic by seed: the same steps draw the same codes. A first run
/// learns the codes publishing and rotating draw; a second blocks one of them in D1 first.
fn publish_and_rotate(seed: u64, block: Option<(&str, bool)>) -> (String, ClientResponse, Fx) {
    let fx = Fx::new(seed);
    let app = fx.workflow("Summ", "app-key-ck-3");
    if let Some((hash, false)) = block {
        block_code_hash(&fx, hash);
    }
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({})));
    assert_eq!(r.status, 201, "publishing: {}", r.text());
    let code = body(&r)["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(code.clone());
    if let Some((hash, true)) = block {
        block_code_hash(&fx, hash);
    }
    let server_id = server_id_of(&fx, &app);
    let rotated = fx.console(Method::Post, &format!("/servers/{server_id}/refresh"), None);
    if let Some(c) = body(&rotated)["server_code"].as_str() {
        fx.codes.borrow_mut().push(c.to_string());
    }
    (code, rotated, fx)
}

#[test]
fn a_drawn_code_that_collides_is_drawn_again_when_publishing_and_rotating() {
    let seed = 4303;
    let (first, rotated, _) = publish_and_rotate(seed, None);
    let second = body(&rotated)["server_code"].as_str().unwrap_or_default().to_string();
    assert!(!first.is_empty() && !second.is_empty() && first != second);
    // Again, with the first code's hash taken before publishing: a new code is drawn.
    let (code, _, fx) = publish_and_rotate(seed, Some((&sha256_hex(&first), false)));
    assert_ne!(code, first, "the same steps drew another code: the collision was retried");
    fx.assert_invariants();
    // Again, with the rotation's code taken before rotating: the rotation draws again.
    let (code, rotated, fx) = publish_and_rotate(seed, Some((&sha256_hex(&second), true)));
    assert_eq!(code, first, "the same steps draw the same codes");
    assert_eq!(rotated.status, 200, "{}", rotated.text());
    let again = body(&rotated)["server_code"].as_str().unwrap_or_default().to_string();
    assert!(!again.is_empty() && again != second, "{again}");
    let works = fx.mcp(&again, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(works.status, 200, "{}", works.text());
    fx.assert_invariants();
}

#[test]
fn a_rotation_or_publish_d1_refuses_is_a_503_and_not_a_collision_drawn_again() {
    let fx = Fx::new(4304);
    let app = fx.workflow("Summ", "app-key-ck-4");
    fx.publish(&app);
    let server_id = server_id_of(&fx, &app);
    d1(
        &fx,
        "CREATE TRIGGER refuse_rotation BEFORE UPDATE OF code_hash ON mcp_servers
         BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
        vec![],
    );
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/refresh"), None);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("rotating the server code"), "{}", r.text());
    assert!(!r.text().contains("collided"), "{}", r.text());
    // Drawn once: a failure is not retried as if the code had collided.
    let tries = fx.sim.d1_statements().iter().filter(|s| s.starts_with("UPDATE mcp_servers SET code_hash")).count();
    assert_eq!(tries, 1);
    // Publishing the same way: D1 refusing the new server is a 503, not a collision.
    let other = fx.workflow("Other", "app-key-ck-4b");
    d1(
        &fx,
        "CREATE TRIGGER refuse_server BEFORE INSERT ON mcp_servers BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
        vec![],
    );
    let r = fx.console(Method::Post, &format!("/apps/{other}/server"), Some(&json!({})));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("storing the server") && !r.text().contains("collided"), "{}", r.text());
    let tries = fx.sim.d1_statements().iter().filter(|s| s.starts_with("INSERT INTO mcp_servers")).count();
    assert_eq!(tries, 2, "the publish of the first app and this one, once");
    fx.assert_invariants();
}
