//! A server URL that cannot be lost: the code kept sealed and revealed to admins only (audited),
//! never in D1 in clear; rotation with a grace period during which the previous code works (and
//! says so in the log), then stops everywhere, whatever copy an isolate or KV holds.

use serde_json::{json, Value};

use super::*;
use crate::pure::ids::sha256_hex;
use crate::runtime::{Method, SqlValue, Statement};

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

fn rows(fx: &Fx, sql: &str) -> Vec<Value> {
    fx.sim.d1_rows("DB", Statement::new(sql, vec![])).expect("reading D1")
}

fn d1(fx: &Fx, sql: &str, args: Vec<SqlValue>) {
    fx.sim.d1_batch("DB", vec![Statement::new(sql, args)]).expect("writing D1");
}

fn list(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn idle(fx: &Fx) {
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h:?}"));
}

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h:?}"));
}

/// A console token of `role`; the token (shown once: kept among the codes).
fn token(fx: &Fx, name: &str, role: &str) -> String {
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": name, "role": role})));
    assert_eq!(r.status, 201, "{}", r.text());
    let t = body(&r)["token"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(t.clone());
    t
}

/// A published workflow app: (server id, code).
fn published(fx: &Fx) -> (String, String) {
    let app = fx.workflow("Summ", "app-summ-key");
    let code = fx.publish(&app);
    let r = fx.console(Method::Get, &format!("/apps/{app}/server"), None);
    (body(&r)["id"].as_str().unwrap_or_default().to_string(), code)
}

/// Rotates with `grace` (seconds; `None`: no body); the new code.
fn rotate(fx: &Fx, server_id: &str, grace: Option<u64>) -> (String, Value) {
    let b = grace.map(|g| json!({ "grace_seconds": g }));
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/refresh"), b.as_ref());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = body(&r);
    let code = v["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(code.clone());
    (code, v)
}

fn reveal_as(fx: &Fx, who: &str, server_id: &str) -> ClientResponse {
    fx.console_as(who, Method::Post, &format!("/servers/{server_id}/reveal"), None)
}

// ---- reveal ----

#[test]
fn an_admin_sees_the_url_again_others_are_refused_and_each_reveal_is_audited() {
    let fx = Fx::new(4201);
    let (id, code) = published(&fx);
    let viewer = token(&fx, "vera", "viewer");
    let publisher = token(&fx, "paul", "publisher");
    let admin = token(&fx, "ada", "admin");
    let server = body(&fx.console(Method::Get, &format!("/servers/{id}"), None));
    assert_eq!(server["url_revealable"], true, "{server}");
    assert!(server.get("server_code").is_none() && server.get("mcp_url").is_none(), "{server}");

    for who in [ADMIN, admin.as_str()] {
        let r = reveal_as(&fx, who, &id);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = body(&r);
        assert_eq!(v["server_code"], code.as_str());
        assert_eq!(v["mcp_url"], Fx::mcp_url(&code).as_str());
        assert_eq!(v["server_code_hint"], &code[12..]);
    }
    for (who, role) in [(viewer.as_str(), "viewer"), (publisher.as_str(), "publisher")] {
        let r = reveal_as(&fx, who, &id);
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("needs the admin role") && r.text().contains(role), "{}", r.text());
        assert!(!r.text().contains(&code));
    }
    // The URL still works: revealing changed nothing.
    assert_eq!(fx.mcp(&code, &list(1)).status, 200);
    let audit = body(&fx.console(Method::Get, "/audit", None))["data"].as_array().cloned().unwrap_or_default();
    let reveals: Vec<(String, i64)> = audit
        .iter()
        .filter(|e| e["action"] == "POST /servers/{id}/reveal" && e["target"] == id.as_str())
        .map(|e| (e["actor"].as_str().unwrap_or_default().to_string(), e["status"].as_i64().unwrap_or_default()))
        .collect();
    let want = [("token:paul", 403), ("token:vera", 403), ("token:ada", 200), ("admin", 200)];
    assert_eq!(reveals, want.map(|(a, s)| (a.to_string(), s)), "newest first");
    assert_eq!(reveal_as(&fx, ADMIN, "no-such-server").status, 404);
    fx.assert_invariants();
}

#[test]
fn a_d1_export_holds_no_code_in_clear() {
    let fx = Fx::new(4202);
    let (id, first) = published(&fx);
    let app = fx.workflow("Other", "app-other-key");
    let (multi, mcode) = fx.server("Pair", &[&app]);
    let (second, _) = rotate(&fx, &id, Some(600));
    fx.console(Method::Post, &format!("/servers/{id}/reveal"), None);
    let codes = [first.as_str(), second.as_str(), mcode.as_str()];
    // Every row of every table, as `wrangler d1 export` would write them.
    let tables = rows(&fx, "SELECT name FROM sqlite_master WHERE type = 'table'");
    let mut cells = 0;
    for t in tables.iter().filter_map(|t| t["name"].as_str()) {
        for row in rows(&fx, &format!("SELECT * FROM \"{t}\"")) {
            let text = row.to_string();
            cells += 1;
            for code in codes {
                assert!(!text.contains(code), "table {t} holds a server code in clear: {text:.300}");
            }
        }
    }
    assert!(cells > 5, "the export read nothing");
    let sealed = rows(&fx, "SELECT id, code_sealed, previous_code_hash FROM mcp_servers ORDER BY created_at");
    for row in &sealed {
        assert!(row["code_sealed"].as_str().is_some_and(|s| s.starts_with("enc:v1:")), "{row}");
    }
    let ours = sealed.iter().find(|r| r["id"] == id.as_str()).cloned().unwrap_or_default();
    assert_eq!(ours["previous_code_hash"], sha256_hex(&first).as_str());
    // Sealed to its server: the same sealed text under another server's id does not open.
    let copied = ours["code_sealed"].as_str().unwrap_or_default().to_string();
    d1(
        &fx,
        "UPDATE mcp_servers SET code_sealed = ?1 WHERE id = ?2",
        vec![SqlValue::Text(copied), SqlValue::Text(multi.clone())],
    );
    let r = reveal_as(&fx, ADMIN, &multi);
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(!r.text().contains(&second));
    fx.assert_invariants();
}

#[test]
fn a_server_without_a_sealed_code_says_to_rotate_and_rotation_makes_it_revealable() {
    let fx = Fx::new(4203);
    let (id, _) = published(&fx);
    // As a server created before codes were kept.
    d1(&fx, "UPDATE mcp_servers SET code_sealed = NULL WHERE id = ?1", vec![SqlValue::Text(id.clone())]);
    assert_eq!(body(&fx.console(Method::Get, &format!("/servers/{id}"), None))["url_revealable"], false);
    let r = reveal_as(&fx, ADMIN, &id);
    assert_eq!((r.status, body(&r)["error"].as_str()), (409, Some("not_revealable")), "{}", r.text());
    let message = body(&r)["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("cannot be shown again") && message.contains("rotate"), "{message}");
    assert!(message.contains(&format!("/servers/{id}/refresh")) && message.contains("grace_seconds"), "{message}");
    assert!(!message.contains("set the SECRETS_KEY"), "the key is set: {message}");
    let (code, _) = rotate(&fx, &id, Some(60));
    let r = reveal_as(&fx, ADMIN, &id);
    assert_eq!(body(&r)["server_code"], code.as_str(), "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn without_secrets_key_the_server_works_and_the_reveal_names_the_missing_key() {
    let fx = Fx::new(4204);
    fx.sim.set_setting("SECRETS_KEY", "");
    fx.sim.set_setting("SECRET_REF_NAMES", "SUMM_KEY");
    fx.sim.set_setting("SUMM_KEY", "app-summ-key");
    fx.dify.add_app("app-summ-key", crate::sim::backends::dify::App::new("workflow"));
    fx.secret("app-summ-key");
    let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
    let app_body = json!({"name": "Summ", "mode": "workflow", "user_input_form": form,
        "backend": {"base_url": format!("{DIFY}/v1"), "api_key": "$SUMM_KEY"}});
    let r = fx.console(Method::Post, "/apps", Some(&app_body));
    assert_eq!(r.status, 201, "{}", r.text());
    let app = body(&r)["id"].as_str().unwrap_or_default().to_string();
    let code = fx.publish(&app);
    let id = body(&fx.console(Method::Get, &format!("/apps/{app}/server"), None))["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(fx.mcp(&code, &list(1)).status, 200);
    let server = body(&fx.console(Method::Get, &format!("/servers/{id}"), None));
    assert_eq!(server["url_revealable"], false, "{server}");
    let r = reveal_as(&fx, ADMIN, &id);
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(body(&r)["message"].as_str().unwrap_or_default().contains("set the SECRETS_KEY secret"), "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn reseal_moves_kept_codes_to_the_current_key() {
    let fx = Fx::new(4205);
    let (id, code) = published(&fx);
    let new_key = "2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d";
    fx.sim.set_setting("SECRETS_KEY", new_key);
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", SECRETS_KEY_HEX);
    fx.sim.evict_isolate();
    assert_eq!(body(&reveal_as(&fx, ADMIN, &id))["server_code"], code.as_str(), "opened with the previous key");
    let r = fx.console(Method::Post, "/secrets/reseal", None);
    assert_eq!(body(&r)["resealed_server_codes"], 1, "{}", r.text());
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", "");
    fx.sim.evict_isolate();
    assert_eq!(body(&reveal_as(&fx, ADMIN, &id))["server_code"], code.as_str(), "sealed under the new key");
    fx.assert_invariants();
}

// ---- rotation with a grace period ----

#[test]
fn the_previous_code_works_during_its_grace_and_stops_after_even_where_it_is_cached() {
    let fx = Fx::new(4206);
    // A memo that would keep the previous code's copy long past the grace.
    fx.sim.set_setting("DEFINITION_MEMO_SECONDS", "600");
    let (id, old) = published(&fx);
    assert_eq!(fx.mcp(&old, &list(1)).status, 200);
    let (new, answer) = rotate(&fx, &id, Some(10));
    let until = answer["previous_code"]["until_ms"].as_u64().unwrap_or_default();
    assert_eq!(answer["previous_code"]["hint"], &old[12..], "{answer}");
    assert_eq!(until, fx.sim.now_ms() + 10_000, "{answer}");
    let logs_before = fx.sim.logs().len();
    assert_eq!(fx.mcp(&old, &list(2)).status, 200, "the previous code during its grace");
    assert_eq!(fx.mcp(&new, &list(3)).status, 200);
    idle(&fx);
    let said: Vec<String> =
        fx.sim.logs()[logs_before..].iter().filter(|l| l.contains("previous code")).cloned().collect();
    assert_eq!(said.len(), 1, "one line for the one use of the previous code: {said:?}");
    assert!(said[0].contains("move this client to the new URL") && said[0].contains(&id), "{}", said[0]);

    // Another isolate (nothing in memory) finds it in KV, and a cold KV finds it in D1.
    let old_key = format!("server:{}", sha256_hex(&old));
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&old, &list(4)).status, 200, "from KV");
    fx.sim.kv_put("CACHE", &old_key, "gone", 60).unwrap_or_else(|e| panic!("{e}"));
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&old, &list(5)).status, 200, "from D1");
    idle(&fx);

    // The grace ends: the memo (fresh for 600 s) and KV both still hold the entry; it stops.
    advance(&fx, until - fx.sim.now_ms());
    assert!(fx.sim.kv_get("CACHE", &old_key).is_some_and(|e| e.contains("code_expires_at")), "KV still holds it");
    let r = fx.mcp(&old, &list(6));
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("Server not found"), "the usual 404: {}", r.text());
    assert_eq!(fx.mcp(&new, &list(7)).status, 200);
    // Nor from KV in a fresh isolate, nor from D1 once KV forgot.
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&old, &list(8)).status, 404, "from KV");
    advance(&fx, 61_000);
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&old, &list(9)).status, 404, "from D1");
    let server = body(&fx.console(Method::Get, &format!("/servers/{id}"), None));
    assert!(server.get("previous_code").is_none(), "{server}");
    fx.assert_invariants();
}

#[test]
fn without_a_grace_the_previous_code_stops_at_once_and_one_previous_code_at_a_time() {
    let fx = Fx::new(4207);
    let (id, c1) = published(&fx);
    let (c2, _) = rotate(&fx, &id, Some(3600));
    assert_eq!(fx.mcp(&c1, &list(1)).status, 200);
    // Rotating again with a grace: the code it replaces (c2) is the previous one; c1 stops.
    let (c3, _) = rotate(&fx, &id, Some(3600));
    assert_eq!(fx.mcp(&c1, &list(2)).status, 404, "an earlier grace ends at the next rotation");
    assert_eq!(fx.mcp(&c2, &list(3)).status, 200);
    assert_eq!(fx.mcp(&c3, &list(4)).status, 200);
    // Without a body (as before): every earlier code stops at once.
    let (c4, v) = rotate(&fx, &id, None);
    assert!(v.get("previous_code").is_none(), "{v}");
    for (n, c) in [c1.as_str(), c2.as_str(), c3.as_str()].iter().enumerate() {
        assert_eq!(fx.mcp(c, &list(10 + n as i64)).status, 404, "code {n}");
    }
    assert_eq!(fx.mcp(&c4, &list(20)).status, 200);
    // Dify's GET takes no grace; grace 0 is none.
    let (c5, _) = rotate(&fx, &id, Some(0));
    assert_eq!(fx.mcp(&c4, &list(21)).status, 404);
    let r = fx.console(Method::Get, &format!("/servers/{id}/refresh"), None);
    let c6 = body(&r)["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(c6.clone());
    assert_eq!(fx.mcp(&c5, &list(22)).status, 404);
    assert_eq!(fx.mcp(&c6, &list(23)).status, 200);
    fx.assert_invariants();
}

#[test]
fn a_server_deleted_or_deactivated_during_a_grace_stops_under_both_codes() {
    let fx = Fx::new(4208);
    let app = fx.workflow("Pair", "app-pair-key");
    let (id, old) = fx.server("Pair", &[&app]);
    let (new, _) = rotate(&fx, &id, Some(3600));
    let r = fx.console(Method::Patch, &format!("/servers/{id}"), Some(&json!({"status": "inactive"})));
    assert_eq!(r.status, 200, "{}", r.text());
    for code in [&old, &new] {
        let r = fx.mcp(code, &list(1));
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("inactive"), "{}", r.text());
    }
    assert_eq!(fx.console(Method::Delete, &format!("/servers/{id}"), None).status, 200);
    for code in [&old, &new] {
        assert_eq!(fx.mcp(code, &list(2)).status, 404);
    }
    fx.sim.evict_isolate();
    assert_eq!(fx.mcp(&old, &list(3)).status, 404, "no KV entry left behind");
    fx.assert_invariants();
}

#[test]
fn grace_seconds_is_a_bounded_whole_number() {
    let fx = Fx::new(4209);
    let (id, code) = published(&fx);
    for bad in [json!({"grace_seconds": 604_801}), json!({"grace_seconds": -5}), json!({"grace_seconds": "60"})] {
        let r = fx.console(Method::Post, &format!("/servers/{id}/refresh"), Some(&bad));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.text().contains("grace_seconds") && r.text().contains("604800"), "{}", r.text());
    }
    let r = fx.console(Method::Post, &format!("/servers/{id}/refresh"), Some(&json!({"grace": 60})));
    assert_eq!(r.status, 400, "{}", r.text());
    // Nothing rotated.
    assert_eq!(fx.mcp(&code, &list(1)).status, 200);
    // The app route takes it too.
    let app = body(&fx.console(Method::Get, &format!("/servers/{id}"), None))["app_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = fx.console(Method::Post, &format!("/apps/{app}/server/refresh"), Some(&json!({"grace_seconds": 30})));
    assert_eq!(r.status, 200, "{}", r.text());
    fx.codes.borrow_mut().push(body(&r)["server_code"].as_str().unwrap_or_default().to_string());
    assert_eq!(fx.mcp(&code, &list(2)).status, 200, "in its grace");
    fx.assert_invariants();
}
