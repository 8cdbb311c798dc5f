//! The console: its authentication, roles, routes, the registry in D1, sealed credentials and references.

use serde_json::{json, Value};

use super::*;
use crate::runtime::{Method, SqlValue, Statement};
use crate::sim::crypto::SimKey;
use crate::sim::network::Reply;
use crate::sim::Faults;

const TEAM: &str = "https://team.test";
const AUD: &str = "aud-tag-of-the-console-app";

fn rows(fx: &Fx, sql: &str, args: Vec<SqlValue>) -> Vec<Value> {
    fx.sim.d1_rows("DB", Statement::new(sql, args)).expect("reading D1")
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// A console call with arbitrary headers (no bearer added).
fn console_raw(fx: &Fx, method: Method, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> ClientResponse {
    fx.sim.request(request(method, &format!("{BASE}/console/api{path}"), headers, body))
}

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

/// Asserts status and error code; the message.
fn err(r: &ClientResponse, status: u16, code: &str) -> String {
    assert_eq!(r.status, status, "{}", r.text());
    let v = body(r);
    assert_eq!(v["error"], code, "{}", r.text());
    v["message"].as_str().unwrap_or_default().to_string()
}

/// A console token of `role` named `name`; the token.
fn token(fx: &Fx, name: &str, role: &str) -> String {
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": name, "role": role})));
    assert_eq!(r.status, 201, "{}", r.text());
    let t = body(&r)["token"].as_str().unwrap_or_default().to_string();
    shown_once(fx, &t);
    t
}

/// A credential the console shows once: never in a log or another answer.
fn shown_once(fx: &Fx, s: &str) {
    fx.codes.borrow_mut().push(s.to_string());
}

fn audit(fx: &Fx) -> Vec<Value> {
    let r = fx.console(Method::Get, "/audit", None);
    assert_eq!(r.status, 200, "{}", r.text());
    body(&r)["data"].as_array().cloned().unwrap_or_default()
}

fn stored_backend(fx: &Fx, app: &str) -> Value {
    let r = rows(fx, "SELECT backend FROM apps WHERE id = ?1", vec![text(app)]);
    serde_json::from_str(r[0]["backend"].as_str().unwrap_or("{}")).unwrap_or_default()
}

fn app_body(name: &str, api_key: &str) -> Value {
    json!({
        "name": name, "description": "d", "mode": "workflow",
        "backend": {"base_url": format!("{DIFY}/v1"), "api_key": api_key},
        "user_input_form": [{"text-input": {"variable": "text", "label": "Text", "required": true}}],
        "outputs": [],
    })
}

// ---- authentication ----

#[test]
fn no_header_wrong_token_and_scheme_spelling() {
    let fx = Fx::new(1);
    let r = console_raw(&fx, Method::Get, "/apps", &[("authorization", "")], None);
    assert!(err(&r, 401, "unauthorized").contains("Authorization: Bearer"));
    assert_eq!(r.headers.get("www-authenticate").as_deref(), Some("Bearer realm=\"flowgate-console\""));
    let r = fx.console_as("wrong-token", Method::Get, "/apps", None);
    assert!(err(&r, 401, "unauthorized").contains("not valid"));
    assert_eq!(
        r.headers.get("www-authenticate").as_deref(),
        Some("Bearer realm=\"flowgate-console\", error=\"invalid_token\"")
    );
    let longer = format!("{ADMIN}x");
    err(&fx.console_as(&longer, Method::Get, "/apps", None), 401, "unauthorized");
    err(&fx.console_as(&ADMIN[..ADMIN.len() - 1], Method::Get, "/apps", None), 401, "unauthorized");
    let basic = format!("Basic {ADMIN}");
    err(&console_raw(&fx, Method::Get, "/apps", &[("authorization", &basic)], None), 401, "unauthorized");
    let spelled = format!("bEaReR   {ADMIN}");
    let r = console_raw(&fx, Method::Get, "/apps", &[("authorization", &spelled)], None);
    assert_eq!(r.status, 200, "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn a_short_or_missing_admin_token_turns_the_console_off() {
    let fx = Fx::new(2);
    let short = "a".repeat(31);
    fx.sim.set_setting("ADMIN_TOKEN", &short);
    fx.sim.evict_isolate();
    let r = fx.console_as(&short, Method::Get, "/apps", None);
    assert!(err(&r, 503, "console_disabled").contains("shorter than 32"));
    let ok = "b".repeat(32);
    fx.sim.set_setting("ADMIN_TOKEN", &ok);
    fx.sim.evict_isolate();
    assert_eq!(fx.console_as(&ok, Method::Get, "/apps", None).status, 200);
    fx.sim.set_setting("ADMIN_TOKEN", "");
    fx.sim.evict_isolate();
    err(&fx.console_as("", Method::Get, "/apps", None), 503, "console_disabled");
}

#[test]
fn the_anonymous_index_names_no_caller_and_a_credential_is_checked() {
    let fx = Fx::new(3);
    let r = console_raw(&fx, Method::Get, "", &[], None);
    assert_eq!(r.status, 200);
    assert_eq!(body(&r)["caller"], Value::Null);
    assert_eq!(body(&r)["openapi"], "/console/api/openapi.json");
    // Anonymous means only GET of the index: anything else needs a credential.
    err(&console_raw(&fx, Method::Get, "/apps", &[], None), 401, "unauthorized");
    err(&console_raw(&fx, Method::Post, "", &[], None), 401, "unauthorized");
    err(&fx.console_as("nope", Method::Get, "", None), 401, "unauthorized");
    let r = fx.console(Method::Get, "", None);
    assert_eq!(body(&r)["caller"], json!({"actor": "admin", "role": "admin"}));
    let t = token(&fx, "reader", "viewer");
    let r = fx.console_as(&t, Method::Get, "", None);
    assert_eq!(body(&r)["caller"], json!({"actor": "token:reader", "role": "viewer"}));
}

#[test]
fn failed_attempts_are_throttled_per_address_and_only_guesses_count() {
    let fx = Fx::new(4);
    fx.sim.set_rate_limit("ADMIN_AUTH_LIMIT", 3, 60_000);
    let from = |ip: &str, tok: &str| {
        let auth = format!("Bearer {tok}");
        console_raw(&fx, Method::Get, "/apps", &[("authorization", &auth), ("cf-connecting-ip", ip)], None)
    };
    // Requests without a token are not guesses.
    for _ in 0..5 {
        err(&console_raw(&fx, Method::Get, "/apps", &[("cf-connecting-ip", "10.0.0.1")], None), 401, "unauthorized");
    }
    for _ in 0..3 {
        err(&from("10.0.0.1", "guess"), 401, "unauthorized");
    }
    let r = from("10.0.0.1", "guess");
    assert!(err(&r, 429, "too_many_attempts").contains("retry after 60"));
    assert_eq!(r.headers.get("retry-after").as_deref(), Some("60"));
    // An unknown console token counts too.
    err(&from("10.0.0.1", "fgc_0123456789abcdefghijABCDEFGHIJKL"), 429, "too_many_attempts");
    // The right token is never throttled; another address has its own budget.
    assert_eq!(from("10.0.0.1", ADMIN).status, 200);
    err(&from("10.0.0.2", "guess"), 401, "unauthorized");
    // The window passes.
    fx.sim.advance(60_000).unwrap();
    err(&from("10.0.0.1", "guess"), 401, "unauthorized");
}

// ---- console tokens and roles ----

#[test]
fn a_token_is_shown_once_stored_as_its_hash_and_listed_without_it() {
    let fx = Fx::new(5);
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "deploy-bot", "role": "publisher"})));
    assert_eq!(r.status, 201, "{}", r.text());
    let v = body(&r);
    let t = v["token"].as_str().unwrap().to_string();
    shown_once(&fx, &t);
    assert!(t.starts_with("fgc_") && t.len() == 36, "{t}");
    assert_eq!(v["hint"], &t[32..]);
    assert_eq!(v["role"], "publisher");
    assert_eq!(v["created_by"], "admin");
    let stored = rows(&fx, "SELECT * FROM console_tokens", vec![]);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["token_hash"], crate::pure::ids::sha256_hex(&t));
    assert!(!stored[0].to_string().contains(&t));
    let list = fx.console(Method::Get, "/tokens", None);
    assert!(!list.text().contains(&t));
    assert!(!list.text().contains(stored[0]["token_hash"].as_str().unwrap()));
    assert_eq!(body(&list)["data"][0]["name"], "deploy-bot");
    assert_eq!(stored[0]["last_used_at"], Value::Null);
    // Its creations name it.
    let t2 = {
        let r = fx.console_as(&t, Method::Post, "/tokens", Some(&json!({"name": "x", "role": "viewer"})));
        err(&r, 403, "forbidden");
        let admin = token(&fx, "root", "admin");
        let r = fx.console_as(&admin, Method::Post, "/tokens", Some(&json!({"name": "made", "role": "viewer"})));
        body(&r)
    };
    assert_eq!(t2["created_by"], "token:root");
    // Its use is recorded (off the response path).
    fx.sim.run_until_idle().unwrap();
    let after = rows(&fx, "SELECT last_used_at FROM console_tokens WHERE name = 'deploy-bot'", vec![]);
    assert!(after[0]["last_used_at"].as_i64().is_some(), "{after:?}");
    fx.assert_invariants();
}

#[test]
fn token_bodies_duplicates_and_unknown_ids() {
    let fx = Fx::new(6);
    token(&fx, "ci", "viewer");
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "ci", "role": "admin"})));
    assert!(err(&r, 409, "conflict").contains("ci"));
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "x", "role": "owner"})));
    err(&r, 400, "validation_failed");
    assert_eq!(body(&r)["errors"][0]["field"], "role");
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"role": "viewer", "colour": 1})));
    let fields: Vec<Value> = body(&r)["errors"].as_array().unwrap().iter().map(|e| e["field"].clone()).collect();
    assert!(fields.contains(&json!("colour")) && fields.contains(&json!("name")), "{fields:?}");
    let r = fx.console(Method::Delete, "/tokens/0123456789abcdef0123", None);
    assert!(err(&r, 404, "not_found").contains("0123456789abcdef0123"));
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM console_tokens", vec![])[0]["n"], 1);
}

#[test]
fn at_most_100_console_tokens() {
    let fx = Fx::new(7);
    let stmts = (0..99)
        .map(|i| {
            Statement::new(
                "INSERT INTO console_tokens (id, name, role, token_hash, hint, created_by, created_at) VALUES (?1, ?2, 'viewer', ?3, 'abcd', 'admin', 1)",
                vec![text(&format!("id{i}")), text(&format!("n{i}")), text(&format!("h{i}"))],
            )
        })
        .collect();
    fx.sim.d1_batch("DB", stmts).unwrap();
    token(&fx, "the-hundredth", "viewer");
    let r = fx.console(Method::Post, "/tokens", Some(&json!({"name": "one-too-many", "role": "viewer"})));
    assert!(err(&r, 409, "conflict").contains("100 console tokens"));
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM console_tokens", vec![])[0]["n"], 100);
}

#[test]
fn roles_decide_what_each_token_may_do() {
    let fx = Fx::new(8);
    let app = fx.workflow("Echo", "app-key-roles");
    let viewer = token(&fx, "v", "viewer");
    let publisher = token(&fx, "p", "publisher");
    let admin = token(&fx, "a", "admin");
    // Viewers read.
    for path in ["/apps", &format!("/apps/{app}"), "/servers", "/audit"] {
        assert_eq!(fx.console_as(&viewer, Method::Get, path, None).status, 200, "{path}");
    }
    let r = fx.console_as(&viewer, Method::Post, "/apps", Some(&app_body("Xx", "app-k2")));
    let m = err(&r, 403, "forbidden");
    assert!(m.contains("viewer") && m.contains("publisher"), "{m}");
    err(&fx.console_as(&viewer, Method::Delete, &format!("/apps/{app}"), None), 403, "forbidden");
    err(&fx.console_as(&viewer, Method::Post, &format!("/apps/{app}/server"), Some(&json!({}))), 403, "forbidden");
    err(&fx.console_as(&viewer, Method::Get, "/tokens", None), 403, "forbidden");
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM apps", vec![])[0]["n"], 1, "a refused write wrote nothing");
    // Publishers manage apps and servers, not tokens nor resealing.
    let r = fx.console_as(&publisher, Method::Post, &format!("/apps/{app}/server"), Some(&json!({})));
    assert_eq!(r.status, 201, "{}", r.text());
    fx.codes.borrow_mut().push(body(&r)["server_code"].as_str().unwrap().to_string());
    // A viewer may not rotate a code, not even with Dify's GET.
    err(&fx.console_as(&viewer, Method::Get, &format!("/apps/{app}/server/refresh"), None), 403, "forbidden");
    err(&fx.console_as(&publisher, Method::Get, "/tokens", None), 403, "forbidden");
    let r = fx.console_as(&publisher, Method::Post, "/secrets/reseal", None);
    assert!(err(&r, 403, "forbidden").contains("admin"));
    assert_eq!(fx.console_as(&admin, Method::Post, "/secrets/reseal", None).status, 200);
    assert_eq!(fx.console_as(&admin, Method::Get, "/tokens", None).status, 200);
    // 404 and 405 come before the role check, the same for every role.
    for t in [&viewer, &publisher, &admin] {
        err(&fx.console_as(t, Method::Get, "/widgets", None), 404, "not_found");
        let r = fx.console_as(t, Method::Patch, "/tokens", None);
        err(&r, 405, "method_not_allowed");
        assert_eq!(r.headers.get("allow").as_deref(), Some("GET, POST"));
    }
    fx.assert_invariants();
}

#[test]
fn a_revoked_token_stops_at_once_here_and_within_the_memo_window_elsewhere() {
    let fx = Fx::new(9);
    let t = token(&fx, "gone", "viewer");
    assert_eq!(fx.console_as(&t, Method::Get, "/apps", None).status, 200);
    let id = rows(&fx, "SELECT id FROM console_tokens", vec![])[0]["id"].as_str().unwrap().to_string();
    assert_eq!(fx.console(Method::Delete, &format!("/tokens/{id}"), None).status, 200);
    let r = fx.console_as(&t, Method::Get, "/apps", None);
    assert!(err(&r, 401, "unauthorized").contains("revoked"));

    // Deleted behind this isolate's back (another isolate revoked it): the memo serves it for
    // at most five seconds.
    let t = token(&fx, "elsewhere", "viewer");
    assert_eq!(fx.console_as(&t, Method::Get, "/apps", None).status, 200);
    fx.sim.d1_batch("DB", vec![Statement::new("DELETE FROM console_tokens WHERE name = 'elsewhere'", vec![])]).unwrap();
    fx.sim.advance(4_000).unwrap();
    assert_eq!(fx.console_as(&t, Method::Get, "/apps", None).status, 200, "within the window");
    fx.sim.advance(1_001).unwrap();
    err(&fx.console_as(&t, Method::Get, "/apps", None), 401, "unauthorized");
    // A role changed in D1 shows after the window too.
    let t = token(&fx, "demoted", "admin");
    assert_eq!(fx.console_as(&t, Method::Get, "/tokens", None).status, 200);
    fx.sim
        .d1_batch(
            "DB",
            vec![Statement::new("UPDATE console_tokens SET role = 'viewer' WHERE name = 'demoted'", vec![])],
        )
        .unwrap();
    fx.sim.advance(5_001).unwrap();
    err(&fx.console_as(&t, Method::Get, "/tokens", None), 403, "forbidden");
}

// ---- Cloudflare Access ----

fn access_fx(seed: u64, role: Option<&str>) -> (Fx, SimKey) {
    let fx = Fx::new(seed);
    fx.sim.set_setting("ACCESS_TEAM_DOMAIN", "team.test");
    fx.sim.set_setting("ACCESS_AUD", AUD);
    if let Some(r) = role {
        fx.sim.set_setting("ACCESS_ROLE", r);
    }
    let key = SimKey::new("access-1", &"rs256".to_uppercase());
    let jwk = key.jwk();
    fx.sim.add_backend(
        TEAM,
        std::rc::Rc::new(move |req: &crate::sim::BackendRequest, _now: u64| {
            if req.path == "/cdn-cgi/access/certs" {
                Reply::json(200, &json!({"keys": [jwk.clone()]}))
            } else {
                Reply::json(404, &json!({}))
            }
        }),
    );
    (fx, key)
}

fn assertion(fx: &Fx, key: &SimKey, claims: Value) -> String {
    let now = fx.sim.now_ms() / 1000;
    let mut c =
        json!({"iss": TEAM, "aud": [AUD], "sub": "user-1", "email": "ann@example.com", "iat": now, "exp": now + 600});
    for (k, v) in claims.as_object().unwrap() {
        c[k] = v.clone();
    }
    key.jwt_with_header(&json!({"alg": key.alg, "kid": key.kid, "typ": "jwt".to_uppercase()}), &c)
}

fn as_access(fx: &Fx, jwt: &str, method: Method, path: &str, b: Option<&Value>) -> ClientResponse {
    let h = [("cf-access-jwt-assertion", jwt), ("content-type", "application/json")];
    console_raw(fx, method, path, &h, b)
}

#[test]
fn an_access_assertion_is_the_caller_with_access_role() {
    let (fx, key) = access_fx(10, Some("publisher"));
    let jwt = assertion(&fx, &key, json!({}));
    let r = as_access(&fx, &jwt, Method::Get, "", None);
    assert_eq!(body(&r)["caller"], json!({"actor": "access:ann@example.com", "role": "publisher"}), "{}", r.text());
    let r = as_access(&fx, &jwt, Method::Post, "/apps", Some(&app_body("Ax", "app-access-key")));
    assert_eq!(r.status, 201, "{}", r.text());
    fx.secret("app-access-key");
    err(&as_access(&fx, &jwt, Method::Get, "/tokens", None), 403, "forbidden");
    let a = audit(&fx);
    assert_eq!(a[0]["actor"], "access:ann@example.com");
    assert_eq!(a[0]["action"], "POST /apps");
    assert_eq!(a[0]["status"], 201);
    // A service token: no email, empty sub, named by its common_name.
    let svc = assertion(&fx, &key, json!({"sub": "", "email": null, "common_name": "svc.access"}));
    let r = as_access(&fx, &svc, Method::Get, "", None);
    assert_eq!(body(&r)["caller"]["actor"], "access:svc.access", "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn bad_access_assertions_are_refused_saying_why() {
    let (fx, key) = access_fx(11, None);
    let now = fx.sim.now_ms() / 1000;
    let cases = [
        (assertion(&fx, &key, json!({"aud": ["another-app"]})), "another Access application"),
        (assertion(&fx, &key, json!({"iss": "https://other.test"})), "another Access team"),
        (assertion(&fx, &key, json!({"exp": now - 120})), ""),
        (SimKey::new("access-1", &"rs256".to_uppercase()).jwt(&json!({})).replace('.', "x"), ""),
        (
            SimKey { pkcs8: b"another key".to_vec(), ..key.clone() }.jwt_with_header(
                &json!({"alg": key.alg, "kid": "access-1"}),
                &json!({"iss": TEAM, "aud": [AUD], "sub": "s", "exp": now + 60}),
            ),
            "",
        ),
    ];
    for (jwt, why) in cases {
        let r = as_access(&fx, &jwt, Method::Get, "/apps", None);
        let m = err(&r, 401, "unauthorized");
        assert!(m.contains("Cf-Access-Jwt-Assertion") && m.contains(why), "{m}");
    }
    // A wrong Authorization header decides alone: a valid assertion does not rescue it.
    let good = assertion(&fx, &key, json!({}));
    let h = [("cf-access-jwt-assertion", good.as_str()), ("authorization", "Bearer wrong")];
    err(&console_raw(&fx, Method::Get, "/apps", &h, None), 401, "unauthorized");
    assert_eq!(as_access(&fx, &good, Method::Get, "/apps", None).status, 200);
}

#[test]
fn half_an_access_configuration_answers_503() {
    let fx = Fx::new(12);
    fx.sim.set_setting("ACCESS_TEAM_DOMAIN", "team.test");
    let m = err(&as_access(&fx, "x.y.z", Method::Get, "/apps", None), 503, "access_misconfigured");
    assert!(m.contains("ACCESS_AUD"), "{m}");
    // Without an assertion nothing changes for token callers.
    assert_eq!(fx.console(Method::Get, "/apps", None).status, 200);
}

#[test]
fn a_writing_get_is_refused_to_access_callers_only() {
    let (fx, key) = access_fx(13, None);
    let app = fx.workflow("Echo", "app-key-wg");
    let code = fx.publish(&app);
    let jwt = assertion(&fx, &key, json!({}));
    let path = format!("/apps/{app}/server/refresh");
    let r = as_access(&fx, &jwt, Method::Get, &path, None);
    assert!(err(&r, 405, "method_not_allowed").contains("use POST"));
    assert_eq!(r.headers.get("allow").as_deref(), Some("POST"));
    // The code still works: nothing was rotated.
    assert_eq!(fx.call(&code, "Echo", json!({"text": "hi"})).status, 200);
    let r = as_access(&fx, &jwt, Method::Post, &path, None);
    assert_eq!(r.status, 200, "{}", r.text());
    fx.codes.borrow_mut().push(body(&r)["server_code"].as_str().unwrap().to_string());
    let r = fx.console(Method::Get, &path, None);
    assert_eq!(r.status, 200, "a token caller keeps GET: {}", r.text());
    fx.codes.borrow_mut().push(body(&r)["server_code"].as_str().unwrap().to_string());
    // Multi-app servers' GET refresh too.
    let (sid, _) = fx.server("Multi", &[&app]);
    err(&as_access(&fx, &jwt, Method::Get, &format!("/servers/{sid}/refresh"), None), 405, "method_not_allowed");
    let a = audit(&fx);
    assert!(a.iter().any(|e| e["action"] == "GET /apps/{id}/server/refresh" && e["status"] == 405), "{a:?}");
    fx.assert_invariants();
}

// ---- the audit log ----

#[test]
fn every_write_and_refused_write_is_audited_with_ids_replaced() {
    let fx = Fx::new(14);
    let app = fx.workflow("Echo", "app-key-audit");
    let viewer = token(&fx, "watcher", "viewer");
    fx.console(Method::Get, "/apps", None);
    fx.console(Method::Get, &format!("/apps/{app}"), None);
    err(&fx.console_as(&viewer, Method::Delete, &format!("/apps/{app}"), None), 403, "forbidden");
    err(&fx.console(Method::Put, &format!("/apps/{app}"), Some(&json!({"name": ""}))), 400, "validation_failed");
    fx.console(Method::Delete, &format!("/apps/{app}"), None);
    let a = audit(&fx);
    let summary: Vec<(String, String, i64)> = a
        .iter()
        .map(|e| {
            (e["actor"].as_str().unwrap().into(), e["action"].as_str().unwrap().into(), e["status"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("admin".into(), "DELETE /apps/{id}".into(), 200),
            ("admin".into(), "PUT /apps/{id}".into(), 400),
            ("token:watcher".into(), "DELETE /apps/{id}".into(), 403),
            ("admin".into(), "POST /tokens".into(), 201),
            ("admin".into(), "POST /apps".into(), 201),
        ]
    );
    assert_eq!(a[0]["target"], app.as_str());
    assert!(a[0]["request_id"].as_str().is_some_and(|s| !s.is_empty()));
    // A limit is bounded; the newest come first.
    let r = fx.console(Method::Get, "/audit?limit=2", None);
    assert_eq!(body(&r)["data"].as_array().unwrap().len(), 2);
    assert_eq!(body(&r)["data"][0]["action"], "DELETE /apps/{id}");
    for bad in ["0", "501", "x"] {
        let r = fx.console(Method::Get, &format!("/audit?limit={bad}"), None);
        err(&r, 400, "validation_failed");
        assert_eq!(body(&r)["errors"][0]["field"], "limit");
    }
    assert_eq!(body(&fx.console(Method::Get, "/audit?limit=500", None))["data"].as_array().unwrap().len(), 5);
    // A wrong credential never reaches the log.
    fx.console_as("wrong", Method::Post, "/apps", Some(&json!({})));
    assert_eq!(audit(&fx).len(), 5);
    fx.assert_invariants();
}

// ---- routes, bodies, errors ----

#[test]
fn unknown_routes_methods_and_ids() {
    let fx = Fx::new(15);
    let r = fx.sim.request(request(Method::Get, &format!("{BASE}/nope"), &[], None));
    assert_eq!(err(&r, 404, "not_found"), "no route GET \"/nope\"");
    assert!(err(&fx.console(Method::Get, "/widgets", None), 404, "not_found").contains("widgets"));
    for (method, path, allow) in [
        (Method::Patch, "/apps", "GET, POST"),
        (Method::Get, "/apps/import", "POST"),
        (Method::Post, "/apps/x", "GET, PUT, DELETE"),
        (Method::Patch, "/apps/x/server", "GET, POST, PUT, DELETE"),
        (Method::Put, "/apps/x/server/refresh", "GET, POST"),
        (Method::Delete, "/servers/x/keys", "GET, POST"),
        (Method::Get, "/servers/x/keys/y", "DELETE"),
        (Method::Get, "/servers/x/tasks/y/cancel", "POST"),
        (Method::Get, "/secrets/reseal", "POST"),
        (Method::Post, "/audit", "GET"),
        (Method::Get, "/tokens/x", "DELETE"),
    ] {
        let r = fx.console(method.clone(), path, None);
        let m = err(&r, 405, "method_not_allowed");
        assert!(m.contains(method.as_ref()), "{m}");
        assert_eq!(r.headers.get("allow").as_deref(), Some(allow), "{path}");
    }
    let id = "00000000-0000-4000-8000-000000000000";
    for (method, path, b) in [
        (Method::Get, format!("/apps/{id}"), None),
        (Method::Put, format!("/apps/{id}"), Some(app_body("x", "app-x"))),
        (Method::Delete, format!("/apps/{id}"), None),
        (Method::Get, format!("/apps/{id}/server"), None),
        (Method::Post, format!("/apps/{id}/server"), Some(json!({}))),
        (Method::Delete, format!("/apps/{id}/server"), None),
        (Method::Get, format!("/apps/{id}/server/refresh"), None),
        (Method::Get, format!("/servers/{id}"), None),
        (Method::Put, format!("/servers/{id}"), Some(json!({"name": "x"}))),
        (Method::Delete, format!("/servers/{id}"), None),
        (Method::Post, format!("/servers/{id}/refresh"), None),
        (Method::Get, format!("/servers/{id}/keys"), None),
        (Method::Get, format!("/servers/{id}/tasks"), None),
        (Method::Get, format!("/servers/{id}/usage"), None),
    ] {
        let r = fx.console(method, &path, b.as_ref());
        assert!(err(&r, 404, "not_found").contains(id), "{path}: {}", r.text());
    }
}

#[test]
fn bodies_that_are_not_json_objects() {
    let fx = Fx::new(16);
    let auth = format!("Bearer {ADMIN}");
    let post = |ct: &str, b: &[u8]| {
        let h = [("authorization", auth.as_str()), ("content-type", ct)];
        fx.sim.request(raw_request(Method::Post, &format!("{BASE}/console/api/apps"), &h, b))
    };
    assert!(err(&post("application/json", b"{\"name\": "), 400, "invalid_json").contains("not valid JSON"));
    assert!(err(&post("application/json", b"{\"name\": \"\xe9\"}"), 400, "invalid_json").contains("UTF-8"));
    assert!(err(&post("application/json", b"[1,2]"), 400, "bad_request").contains("JSON object"));
    assert!(err(&post("application/json", b"  "), 400, "bad_request").contains("empty"));
    let m = err(&post("application/x-www-form-urlencoded", b"name=x"), 415, "unsupported_media_type");
    assert!(m.contains("application/json") && m.contains("x-www-form-urlencoded"), "{m}");
    let mut big = app_body("Big", "app-big");
    big["description"] = json!("x".repeat(1 << 20));
    err(&post("application/json", big.to_string().as_bytes()), 413, "payload_too_large");
    // Just under the limit is read (and then validated).
    let mut fits = app_body("Fits", "app-fits");
    let pad = (1 << 20) - fits.to_string().len() - 200;
    fits["description"] = json!("x".repeat(pad));
    let r = post("application/json", fits.to_string().as_bytes());
    assert_ne!(r.status, 413, "{}", r.text());
    // Field errors name the field, several at once.
    let mut b = app_body("", "app-k");
    b["mode"] = json!("spreadsheet");
    let r = fx.console(Method::Post, "/apps", Some(&b));
    err(&r, 400, "validation_failed");
    let fields: Vec<Value> = body(&r)["errors"].as_array().unwrap().iter().map(|e| e["field"].clone()).collect();
    assert_eq!(fields, vec![json!("name"), json!("mode")]);
    // A Dify-style server takes an empty POST body.
    let app = fx.workflow("Ex", "app-empty-body");
    let h = [("authorization", auth.as_str())];
    let r = fx.sim.request(raw_request(Method::Post, &format!("{BASE}/console/api/apps/{app}/server"), &h, b""));
    assert_eq!(r.status, 201, "{}", r.text());
    fx.codes.borrow_mut().push(body(&r)["server_code"].as_str().unwrap().to_string());
}

// ---- servers, codes, cascades ----

#[test]
fn a_code_is_shown_once_stored_hashed_and_rotation_kills_the_old_one() {
    let fx = Fx::new(17);
    fx.sim.set_setting("PUBLIC_URL", "https://public.test/");
    let app = fx.workflow("Echo", "app-key-rot");
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({"description": "Sx"})));
    let v = body(&r);
    let code = v["server_code"].as_str().unwrap().to_string();
    fx.codes.borrow_mut().push(code.clone());
    assert_eq!(code.len(), 16);
    assert_eq!(v["mcp_url"], format!("https://public.test/mcp/server/{code}/mcp"));
    assert_eq!(v["server_code_hint"], &code[12..]);
    let sid = v["id"].as_str().unwrap().to_string();
    let hash = crate::pure::ids::sha256_hex(&code);
    let stored = rows(&fx, "SELECT * FROM mcp_servers", vec![]);
    assert_eq!(stored[0]["code_hash"], hash.as_str());
    assert!(!stored[0].to_string().contains(&code));
    assert!(fx.sim.kv_get("CACHE", &format!("server:{hash}")).is_some());
    let got = fx.console(Method::Get, &format!("/apps/{app}/server"), None);
    assert!(!got.text().contains(&code));
    assert_eq!(body(&got)["server_code"], Value::Null);
    err(&fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({}))), 409, "conflict");
    // Rotation by server id (Dify's) and by app id.
    let r = fx.console(Method::Post, &format!("/apps/{sid}/server/refresh"), None);
    let new = body(&r)["server_code"].as_str().unwrap().to_string();
    fx.codes.borrow_mut().push(new.clone());
    assert_ne!(new, code);
    assert!(fx.sim.kv_get("CACHE", &format!("server:{hash}")).is_none(), "the old entry goes at once");
    assert_ne!(fx.call(&code, "Echo", json!({"text": "a"})).status, 200);
    assert_eq!(fx.call(&new, "Echo", json!({"text": "a"})).status, 200);
    let r = fx.console(Method::Post, &format!("/apps/{app}/server/refresh"), None);
    let newer = body(&r)["server_code"].as_str().unwrap().to_string();
    fx.codes.borrow_mut().push(newer.clone());
    assert_ne!(fx.call(&new, "Echo", json!({"text": "a"})).status, 200);
    assert_eq!(fx.call(&newer, "Echo", json!({"text": "a"})).status, 200);
    fx.assert_invariants();
}

#[test]
fn put_changes_the_server_and_the_cache_follows() {
    let fx = Fx::new(18);
    let app = fx.workflow("Echo", "app-key-put");
    let code = fx.publish(&app);
    let got = body(&fx.console(Method::Get, &format!("/apps/{app}/server"), None));
    let sid = got["id"].as_str().unwrap();
    let r = fx.console(
        Method::Put,
        &format!("/apps/{app}/server"),
        Some(&json!({"id": "someone-else", "status": "inactive"})),
    );
    assert_eq!(body(&r)["errors"][0]["field"], "id", "{}", r.text());
    let r = fx.console(Method::Put, &format!("/apps/{app}/server"), Some(&json!({"id": sid, "status": "inactive"})));
    assert_eq!(body(&r)["status"], "inactive", "{}", r.text());
    assert_ne!(fx.call(&code, "Echo", json!({"text": "a"})).status, 200, "an inactive server does not answer");
    let r = fx.console(Method::Put, &format!("/apps/{app}/server"), Some(&json!({"id": sid, "status": "active"})));
    assert_eq!(r.status, 200);
    assert_eq!(fx.call(&code, "Echo", json!({"text": "a"})).status, 200);
    // A Dify-style server's apps cannot change through /servers.
    let r = fx.console(Method::Put, &format!("/servers/{sid}"), Some(&json!({"app_ids": [app]})));
    assert_eq!(body(&r)["errors"][0]["field"], "app_ids", "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn deleting_an_app_cascades_to_its_servers_keys_and_cache() {
    let fx = Fx::new(19);
    let a = fx.workflow("Ax", "app-key-a");
    let b = fx.workflow("Bx", "app-key-b");
    let code_a = fx.publish(&a);
    let (multi, code_m) = fx.server("Both", &[&a, &b]);
    let r = fx.console(Method::Post, &format!("/servers/{multi}/keys"), Some(&json!({"name": "client"})));
    assert_eq!(r.status, 201, "{}", r.text());
    shown_once(&fx, body(&r)["key"].as_str().unwrap());
    let hash_a = crate::pure::ids::sha256_hex(&code_a);
    assert_eq!(fx.console(Method::Delete, &format!("/apps/{a}"), None).status, 200);
    assert!(fx.sim.kv_get("CACHE", &format!("server:{hash_a}")).is_none());
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM mcp_servers WHERE app_id = ?1", vec![text(&a)])[0]["n"], 0);
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM mcp_server_apps WHERE app_id = ?1", vec![text(&a)])[0]["n"], 0);
    // The multi-app server stays, with B only, its keys kept, its cache rewritten.
    let s = body(&fx.console(Method::Get, &format!("/servers/{multi}"), None));
    assert_eq!(s["app_ids"], json!([b]));
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM server_keys", vec![])[0]["n"], 1);
    let cached = fx.sim.kv_get("CACHE", &format!("server:{}", crate::pure::ids::sha256_hex(&code_m))).unwrap();
    assert!(!cached.contains(&a), "the cached definition no longer has the deleted app");
    // Deleting the multi-app server takes its keys.
    assert_eq!(fx.console(Method::Delete, &format!("/servers/{multi}"), None).status, 200);
    assert!(fx.sim.kv_get("CACHE", &format!("server:{}", crate::pure::ids::sha256_hex(&code_m))).is_none());
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM server_keys", vec![])[0]["n"], 0);
    fx.assert_invariants();
}

#[test]
fn multi_app_servers_check_their_apps() {
    let fx = Fx::new(20);
    let a = fx.workflow("Same", "app-key-s1");
    let b = fx.workflow("Same", "app-key-s2");
    let r = fx.console(Method::Post, "/servers", Some(&json!({"name": "n", "app_ids": [a, b]})));
    let m = err(&r, 400, "validation_failed");
    assert_eq!(body(&r)["errors"][0]["field"], "app_ids", "{m}");
    let r = fx.console(Method::Post, "/servers", Some(&json!({"name": "n", "app_ids": [a, "missing-app-id"]})));
    err(&r, 400, "validation_failed");
    assert!(body(&r)["errors"][0]["message"].as_str().unwrap().contains("missing-app-id"));
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM mcp_servers", vec![])[0]["n"], 0);
}

#[test]
fn client_keys_are_shown_once_unique_per_server_and_revocable() {
    let fx = Fx::new(21);
    let a = fx.workflow("Echo", "app-key-ck");
    let (sid, code) = fx.server("Sx", &[&a]);
    let path = format!("/servers/{sid}/keys");
    let r = fx.console(Method::Post, &path, Some(&json!({"name": "alice"})));
    let k = body(&r);
    let key = k["key"].as_str().unwrap().to_string();
    shown_once(&fx, &key);
    let stored = rows(&fx, "SELECT * FROM server_keys", vec![]);
    assert_eq!(stored[0]["key_hash"], crate::pure::ids::sha256_hex(&key));
    assert!(!fx.console(Method::Get, &path, None).text().contains(&key));
    let r = fx.console(Method::Post, &path, Some(&json!({"name": "alice"})));
    assert!(err(&r, 409, "conflict").contains("alice"));
    // Key mode: the key opens the server; revoked, it does not.
    let r = fx.console(Method::Put, &format!("/servers/{sid}/auth"), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let bearer = format!("Bearer {key}");
    let ok =
        fx.mcp_with(&code, &[("authorization", &bearer)], &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let none = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(none.status, 401);
    let kid = k["id"].as_str().unwrap();
    err(&fx.console(Method::Delete, &format!("{path}/nope-key-id"), None), 404, "not_found");
    assert_eq!(fx.console(Method::Delete, &format!("{path}/{kid}"), None).status, 200);
    let gone =
        fx.mcp_with(&code, &[("authorization", &bearer)], &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(gone.status, 401, "{}", gone.text());
    fx.assert_invariants();
}

#[test]
fn at_most_100_client_keys_per_server() {
    let fx = Fx::new(22);
    let a = fx.workflow("Echo", "app-key-cap");
    let (sid, _) = fx.server("Sx", &[&a]);
    let (other, _) = fx.server("Tx", &[&a]);
    let stmts = (0..99)
        .map(|i| {
            Statement::new(
                "INSERT INTO server_keys (id, server_id, name, key_hash, hint, created_at) VALUES (?1, ?2, ?3, ?4, 'abcd', 1)",
                vec![text(&format!("k{i}")), text(&sid), text(&format!("n{i}")), text(&format!("h{i}"))],
            )
        })
        .collect();
    fx.sim.d1_batch("DB", stmts).unwrap();
    let r = fx.console(Method::Post, &format!("/servers/{sid}/keys"), Some(&json!({"name": "last"})));
    assert_eq!(r.status, 201, "{}", r.text());
    shown_once(&fx, body(&r)["key"].as_str().unwrap());
    let r = fx.console(Method::Post, &format!("/servers/{sid}/keys"), Some(&json!({"name": "over"})));
    assert!(err(&r, 409, "conflict").contains("100 client keys"));
    // The cap is per server.
    let r = fx.console(Method::Post, &format!("/servers/{other}/keys"), Some(&json!({"name": "over"})));
    assert_eq!(r.status, 201);
    shown_once(&fx, body(&r)["key"].as_str().unwrap());
}

// ---- sealed credentials and references ----

#[test]
fn literal_keys_are_sealed_masked_and_kept_by_stars() {
    let fx = Fx::new(23);
    fx.dify.add_app("app-literal-1", crate::sim::backends::dify::App::new("workflow"));
    fx.secret("app-literal-1");
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Lit", "app-literal-1")));
    assert_eq!(r.status, 201, "{}", r.text());
    let app = body(&r)["id"].as_str().unwrap().to_string();
    assert_eq!(body(&r)["backend"]["api_key"], "***");
    let sealed = stored_backend(&fx, &app)["api_key"].as_str().unwrap().to_string();
    assert!(sealed.starts_with("enc:v1:"), "{sealed}");
    // "***" keeps the stored value exactly.
    let r = fx.console(Method::Put, &format!("/apps/{app}"), Some(&app_body("Lit2", "***")));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(stored_backend(&fx, &app)["api_key"], sealed.as_str());
    // A new literal on replace is sealed too.
    fx.secret("app-literal-2");
    let r = fx.console(Method::Put, &format!("/apps/{app}"), Some(&app_body("Lit2", "app-literal-2")));
    assert_eq!(r.status, 200, "{}", r.text());
    let resealed = stored_backend(&fx, &app)["api_key"].as_str().unwrap().to_string();
    assert!(resealed.starts_with("enc:v1:") && resealed != sealed, "{resealed}");
    let r = fx.console(Method::Put, &format!("/apps/{app}"), Some(&app_body("Lit2", "app-literal-1")));
    assert_eq!(r.status, 200, "{}", r.text());
    let sealed = stored_backend(&fx, &app)["api_key"].as_str().unwrap().to_string();
    assert!(sealed.starts_with("enc:v1:"), "{sealed}");
    // "***" with nothing stored, and a sealed value from the console, are refused.
    let r = fx.console(Method::Post, "/apps", Some(&app_body("New", "***")));
    assert_eq!(body(&r)["errors"][0]["field"], "backend.api_key", "{}", r.text());
    for (m, p) in [(Method::Post, "/apps".to_string()), (Method::Put, format!("/apps/{app}"))] {
        let r = fx.console(m, &p, Some(&app_body("Sx", &sealed)));
        err(&r, 400, "validation_failed");
        assert_eq!(body(&r)["errors"][0]["field"], "backend.api_key", "{}", r.text());
        assert!(r.text().contains("enc:v1:…"), "{}", r.text());
    }
    let r =
        fx.console(Method::Post, "/apps/import", Some(&json!({"base_url": format!("{DIFY}/v1"), "api_key": sealed})));
    assert_eq!(body(&r)["errors"][0]["field"], "api_key", "{}", r.text());
    // "***" does not follow the key to another origin.
    let mut moved = app_body("Moved", "***");
    moved["backend"]["base_url"] = json!("https://elsewhere.test/v1");
    let r = fx.console(Method::Put, &format!("/apps/{app}"), Some(&moved));
    err(&r, 400, "validation_failed");
    assert_eq!(stored_backend(&fx, &app)["base_url"], format!("{DIFY}/v1"));
    // The sealed key opens at call time and only Dify receives it.
    let code = fx.publish(&app);
    let call = fx.call(&code, "Lit2", json!({"text": "hi"}));
    assert_eq!(last(&call)["result"]["isError"], false, "{}", call.text());
    assert_eq!(fx.dify.requests_for("app-literal-1").len(), 1);
    fx.assert_invariants();
}

#[test]
fn without_secrets_key_a_literal_cannot_be_stored() {
    let fx = Fx::new(24);
    fx.sim.set_setting("SECRETS_KEY", "");
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Lx", "app-lit")));
    let m = err(&r, 400, "validation_failed");
    assert_eq!(body(&r)["errors"][0]["field"], "backend.api_key");
    assert!(m.contains("SECRETS_KEY"), "{m}");
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM apps", vec![])[0]["n"], 0);
}

#[test]
fn references_are_allowed_only_by_the_policy_and_never_flowgates_own() {
    let fx = Fx::new(25);
    // No policy: refused when stored.
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Rx", "$DIFY_KEY")));
    let m = err(&r, 400, "validation_failed");
    assert!(m.contains("SECRET_REF_PREFIX"), "{m}");
    for own in ["$ADMIN_TOKEN", "$SECRETS_KEY", "$SECRETS_KEY_PREVIOUS", "$DB"] {
        let r = fx.console(Method::Post, "/apps", Some(&app_body("Rx", own)));
        assert!(err(&r, 400, "validation_failed").contains("own configuration"), "{own}");
        let r =
            fx.console(Method::Post, "/apps/import", Some(&json!({"base_url": format!("{DIFY}/v1"), "api_key": own})));
        assert_eq!(body(&r)["errors"][0]["field"], "api_key", "{own}: {}", r.text());
    }
    assert!(fx.sim.outbound().is_empty(), "nothing was sent");
}

#[test]
fn an_allowed_reference_is_resolved_at_call_time_and_sent_only_to_dify() {
    let fx = Fx::new(26);
    fx.sim.set_setting("SECRET_REF_PREFIX", &"backend_".to_uppercase());
    fx.sim.set_setting("SECRET_REF_NAMES", &"listed_key".to_uppercase());
    fx.sim.set_setting(&"backend_dify".to_uppercase(), "app-ref-secret");
    fx.sim.set_setting(&"listed_key".to_uppercase(), "app-ref-secret");
    fx.secret("app-ref-secret");
    fx.dify.add_app("app-ref-secret", crate::sim::backends::dify::App::new("workflow"));
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Other", "$OTHER_KEY")));
    assert!(err(&r, 400, "validation_failed").contains("$BACKEND_OTHER_KEY"));
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Listed", "$LISTED_KEY")));
    assert_eq!(r.status, 201, "{}", r.text());
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Ref", "$BACKEND_DIFY")));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(body(&r)["backend"]["api_key"], "$BACKEND_DIFY", "a reference is shown as it is");
    let app = body(&r)["id"].as_str().unwrap().to_string();
    assert_eq!(stored_backend(&fx, &app)["api_key"], "$BACKEND_DIFY");
    let code = fx.publish(&app);
    let call = fx.call(&code, "Ref", json!({"text": "hi"}));
    assert_eq!(last(&call)["result"]["isError"], false, "{}", call.text());
    for o in fx.sim.outbound() {
        let carries = o.headers.get("authorization").is_some_and(|h| h.contains("app-ref-secret"));
        assert!(!carries || o.origin == DIFY, "{} got the key", o.url);
    }
    assert_eq!(fx.dify.requests_for("app-ref-secret").len(), 1);
    // A reference that reached D1 by other means is refused at call time.
    let mut b = stored_backend(&fx, &app);
    b["api_key"] = json!("$ADMIN_TOKEN");
    fx.sim
        .d1_batch(
            "DB",
            vec![Statement::new("UPDATE apps SET backend = ?1 WHERE id = ?2", vec![text(&b.to_string()), text(&app)])],
        )
        .unwrap();
    assert_eq!(fx.console(Method::Post, &format!("/apps/{app}/server/refresh"), None).status, 200);
    let r = fx.console(Method::Get, &format!("/apps/{app}/server"), None);
    assert_eq!(r.status, 200);
    let before = fx.sim.outbound().len();
    // The rotation above rewrote the cache from D1 with the planted reference; call with the new code.
    let rot = fx.console(Method::Post, &format!("/apps/{app}/server/refresh"), None);
    let newcode = body(&rot)["server_code"].as_str().unwrap().to_string();
    fx.codes.borrow_mut().push(newcode.clone());
    let call = fx.call(&newcode, "Ref", json!({"text": "hi"}));
    assert_eq!(last(&call)["result"]["isError"], true, "{}", call.text());
    assert!(fx.sim.outbound()[before..]
        .iter()
        .all(|o| !o.headers.get("authorization").is_some_and(|h| h.contains(ADMIN))));
    fx.assert_invariants();
}

#[test]
fn reseal_moves_every_credential_to_the_current_key() {
    let fx = Fx::new(27);
    fx.dify.add_app("app-reseal", crate::sim::backends::dify::App::new("workflow"));
    fx.secret("app-reseal");
    let r = fx.console(Method::Post, "/apps", Some(&app_body("Re", "app-reseal")));
    let app = body(&r)["id"].as_str().unwrap().to_string();
    let old = stored_backend(&fx, &app)["api_key"].as_str().unwrap().to_string();
    let code = fx.publish(&app);
    // Rotate: the new key current, the old one previous (a new isolate reads them).
    let new_key = "1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e";
    fx.sim.set_setting("SECRETS_KEY", new_key);
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", SECRETS_KEY_HEX);
    fx.sim.evict_isolate();
    assert_eq!(
        last(&fx.call(&code, "Re", json!({"text": "a"})))["result"]["isError"],
        false,
        "opened with the previous key"
    );
    let r = fx.console(Method::Post, "/secrets/reseal", None);
    assert_eq!(body(&r), json!({"resealed_apps": 1, "resealed_server_codes": 1}), "{}", r.text());
    let new = stored_backend(&fx, &app)["api_key"].as_str().unwrap().to_string();
    assert!(new.starts_with("enc:v1:") && new != old);
    // Without the previous key it still opens: it is sealed under the new one.
    fx.sim.set_setting("SECRETS_KEY_PREVIOUS", "");
    fx.sim.evict_isolate();
    assert_eq!(last(&fx.call(&code, "Re", json!({"text": "a"})))["result"]["isError"], false);
    assert_eq!(body(&fx.console(Method::Post, "/secrets/reseal", None))["resealed_apps"], 1);
    // The old sealed value does not open under the new key alone.
    assert!(crate::pure::sealed::open(&[crate::pure::sealed::parse_key(new_key).unwrap()], &old).is_err());
    fx.assert_invariants();
}

// ---- import from Dify ----

#[test]
fn import_creates_the_app_from_info_and_parameters() {
    let fx = Fx::new(28);
    let form = json!([{"text-input": {"variable": "topic", "label": "Topic", "required": true}}]);
    fx.dify.add_app(
        "app-import-1",
        crate::sim::backends::dify::App {
            name: "Imported".into(),
            user_input_form: form,
            ..crate::sim::backends::dify::App::new("chat")
        },
    );
    fx.secret("app-import-1");
    let r = fx.console(
        Method::Post,
        "/apps/import",
        Some(&json!({"base_url": format!("{DIFY}/v1/"), "api_key": "app-import-1"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let v = body(&r);
    assert_eq!(v["name"], "Imported");
    assert_eq!(v["mode"], "chat");
    assert_eq!(v["backend"]["api_key"], "***");
    assert_eq!(v["user_input_form"][0]["text-input"]["variable"], "topic");
    let id = v["id"].as_str().unwrap();
    assert!(stored_backend(&fx, id)["api_key"].as_str().unwrap().starts_with("enc:v1:"));
    let paths: Vec<String> = fx.dify.requests_for("app-import-1").iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, vec!["/v1/info", "/v1/parameters"]);
    let r = fx.console(Method::Post, "/apps/import", Some(&json!({})));
    let fields: Vec<Value> = body(&r)["errors"].as_array().unwrap().iter().map(|e| e["field"].clone()).collect();
    assert_eq!(fields, vec![json!("base_url"), json!("api_key")]);
    fx.assert_invariants();
}

#[test]
fn import_failures_are_422s_naming_the_cause_never_the_key() {
    let fx = Fx::new(29);
    fx.secret("app-wrong-key");
    let import = |base: &str| {
        fx.console(Method::Post, "/apps/import", Some(&json!({"base_url": base, "api_key": "app-wrong-key"})))
    };
    let r = import(&format!("{DIFY}/v1"));
    assert!(err(&r, 422, "dify_unauthorized").contains("401"));
    let r = import("https://nowhere.test/v1");
    assert!(err(&r, 422, "dify_unreachable").contains("nowhere.test/info"));
    fx.sim.add_backend("https://slow.test", std::rc::Rc::new(|_: &crate::sim::BackendRequest, _: u64| Reply::Hang));
    let t0 = fx.sim.now_ms();
    let r = import("https://slow.test/v1");
    assert!(err(&r, 422, "dify_timeout").contains("15 s"));
    let waited = fx.sim.now_ms() - t0;
    assert!((15_000..16_000).contains(&waited), "{waited}");
    fx.sim.add_backend(
        "https://html.test",
        std::rc::Rc::new(|_: &crate::sim::BackendRequest, _: u64| Reply::new(200, "text/html", "<html></html>")),
    );
    err(&import("https://html.test/v1"), 422, "not_a_dify_app");
    fx.sim.add_backend(
        "https://e500.test",
        std::rc::Rc::new(|_: &crate::sim::BackendRequest, _: u64| Reply::json(500, &json!({"message": "boom"}))),
    );
    assert!(err(&import("https://e500.test/v1"), 422, "dify_error").contains("500"));
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM apps", vec![])[0]["n"], 0);
    fx.assert_invariants();
}

// ---- tasks and usage ----

#[test]
fn task_and_usage_queries_are_bounded() {
    let fx = Fx::new(30);
    let a = fx.workflow("Echo", "app-key-tq");
    let (sid, code) = fx.server("Sx", &[&a]);
    for bad in ["0", "101", "x"] {
        let r = fx.console(Method::Get, &format!("/servers/{sid}/tasks?limit={bad}"), None);
        assert_eq!(body(&r)["errors"][0]["field"], "limit", "{}", r.text());
    }
    let r = fx.console(Method::Get, &format!("/servers/{sid}/tasks?limit=100"), None);
    assert_eq!(body(&r), json!({"data": [], "next_before": null}));
    let r = fx.console(Method::Get, &format!("/servers/{sid}/tasks/nope"), None);
    assert!(err(&r, 404, "not_found").contains("nope"));
    err(&fx.console(Method::Post, &format!("/servers/{sid}/tasks/nope/cancel"), None), 404, "not_found");
    fx.call(&code, "Echo", json!({"text": "a"}));
    let r = fx.console(Method::Get, &format!("/servers/{sid}/usage"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(body(&r)["server_id"], sid.as_str());
    fx.assert_invariants();
}

// ---- under faults ----

#[test]
fn console_writes_under_faults_answer_precisely_and_keep_invariants() {
    let mut happened = 0;
    for seed in crate::sim::seeds(0..12) {
        let fx = Fx::new(seed);
        fx.dify.add_app("app-fault", crate::sim::backends::dify::App::new("workflow"));
        fx.secret("app-fault");
        fx.sim.set_faults(Faults {
            kv_error: 0.2,
            d1_error: 0.2,
            d1_latency: 0.3,
            d1_latency_max_ms: 50,
            isolate_evict: 0.2,
            fetch_reset: 0.2,
            ..Faults::default()
        });
        let ok = |r: &ClientResponse, allowed: &[u16]| {
            assert!(allowed.contains(&r.status), "SIM_SEED={seed}: {} {}", r.status, r.text());
            if r.status >= 400 {
                assert!(
                    body(r)["error"].is_string() && body(r)["message"].is_string(),
                    "SIM_SEED={seed}: {}",
                    r.text()
                );
            }
        };
        let r = fx.console(Method::Post, "/apps", Some(&app_body("Fx", "app-fault")));
        ok(&r, &[201, 500, 503]);
        let r2 = fx.console(
            Method::Post,
            "/apps/import",
            Some(&json!({"base_url": format!("{DIFY}/v1"), "api_key": "app-fault"})),
        );
        ok(&r2, &[201, 422, 500, 503]);
        let r3 = fx.console(Method::Post, "/tokens", Some(&json!({"name": "t", "role": "viewer"})));
        ok(&r3, &[201, 500, 503]);
        if let Some(t) = body(&r3)["token"].as_str() {
            shown_once(&fx, t);
            ok(&fx.console_as(t, Method::Get, "/apps", None), &[200, 401, 500, 503]);
        }
        if r.status == 201 {
            let id = body(&r)["id"].as_str().unwrap().to_string();
            let s = fx.console(Method::Post, &format!("/apps/{id}/server"), Some(&json!({})));
            ok(&s, &[201, 500, 503]);
            if let Some(c) = body(&s)["server_code"].as_str() {
                fx.codes.borrow_mut().push(c.to_string());
            }
            ok(&fx.console(Method::Post, &format!("/apps/{id}/server/refresh"), None), &[200, 404, 500, 503]);
            if let Some(c) = fx
                .console(Method::Post, &format!("/apps/{id}/server/refresh"), None)
                .json()
                .and_then(|v| v["server_code"].as_str().map(String::from))
            {
                fx.codes.borrow_mut().push(c);
            }
            ok(&fx.console(Method::Delete, &format!("/apps/{id}"), None), &[200, 404, 500, 503]);
        }
        fx.sim.set_faults(Faults::default());
        let counts = fx.sim.fault_counts();
        happened += counts.happened("d1_error") + counts.happened("kv_error") + counts.happened("fetch_reset");
        fx.assert_invariants();
    }
    assert!(happened > 0, "the faults were exercised");
}

// ---- more routes ----

#[test]
fn refreshing_an_upstream_apps_tools_reads_them_again() {
    let fx = Fx::new(31);
    let b = json!({"name": "Up", "description": "d", "mode": "mcp", "backend": {"url": format!("{UPSTREAM}/mcp")}});
    let r = fx.console(Method::Post, "/apps", Some(&b));
    assert_eq!(r.status, 201, "{}", r.text());
    let id = body(&r)["id"].as_str().unwrap().to_string();
    let before = fx.sim.outbound().iter().filter(|o| o.origin == UPSTREAM).count();
    let r = fx.console(Method::Post, &format!("/apps/{id}/tools/refresh"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = body(&r);
    let upstream: Vec<&str> = v["upstream_tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(upstream.contains(&"echo"), "{v}");
    assert_eq!(v["exposed_tools"].as_array().unwrap().len(), upstream.len());
    assert!(fx.sim.outbound().iter().filter(|o| o.origin == UPSTREAM).count() > before, "asked the upstream");
    let wf = fx.workflow("Wx", "app-key-wf");
    let r = fx.console(Method::Post, &format!("/apps/{wf}/tools/refresh"), None);
    assert!(err(&r, 400, "bad_request").contains("only mcp apps"));
    // An upstream that cannot be reached is a 422 naming it.
    let b = json!({"name": "Down", "description": "d", "mode": "mcp", "backend": {"url": "https://down.test/mcp"}});
    let id = body(&fx.console(Method::Post, "/apps", Some(&b)))["id"].as_str().unwrap().to_string();
    err(&fx.console(Method::Post, &format!("/apps/{id}/tools/refresh"), None), 422, "upstream_failed");
    fx.assert_invariants();
}

#[test]
fn access_keys_that_cannot_be_had_are_a_503_and_keys_come_only_from_the_team() {
    let fx = Fx::new(32);
    fx.sim.set_setting("ACCESS_TEAM_DOMAIN", "team.test");
    fx.sim.set_setting("ACCESS_AUD", AUD);
    fx.sim.add_backend(
        TEAM,
        std::rc::Rc::new(|_: &crate::sim::BackendRequest, _: u64| Reply::new(500, "text/plain", "down")),
    );
    let key = SimKey::new("access-1", &"rs256".to_uppercase());
    let jwt = assertion(&fx, &key, json!({}));
    let r = as_access(&fx, &jwt, Method::Get, "/apps", None);
    assert!(err(&r, 503, "access_unavailable").contains("retry"));
    let fetched: Vec<String> = fx.sim.outbound().iter().map(|o| o.url.clone()).collect();
    assert!(!fetched.is_empty());
    assert!(fetched.iter().all(|u| u == "https://team.test/cdn-cgi/access/certs"), "{fetched:?}");
    // An assertion naming another issuer's keys does not make the Worker fetch them.
    let jwt = assertion(&fx, &key, json!({"iss": ISSUER}));
    let n = fx.sim.outbound().len();
    let _ = as_access(&fx, &jwt, Method::Get, "/apps", None);
    assert!(fx.sim.outbound()[n..].iter().all(|o| o.origin == TEAM));
}

#[test]
fn private_backends_are_refused_naming_the_field() {
    let fx = Fx::new(33);
    let mut b = app_body("Px", "app-p");
    b["backend"]["base_url"] = json!("http://127.0.0.1:8080/v1");
    let r = fx.console(Method::Post, "/apps", Some(&b));
    let m = err(&r, 400, "validation_failed");
    assert_eq!(body(&r)["errors"][0]["field"], "backend.base_url");
    assert!(m.contains("ALLOW_PRIVATE_BACKENDS"), "{m}");
    let r =
        fx.console(Method::Post, "/apps/import", Some(&json!({"base_url": "http://10.1.2.3/v1", "api_key": "app-p"})));
    err(&r, 400, "validation_failed");
    assert!(fx.sim.outbound().is_empty(), "nothing was sent to a private address");
    assert_eq!(rows(&fx, "SELECT COUNT(*) AS n FROM apps", vec![])[0]["n"], 0);
}

#[test]
fn an_unusable_public_url_refuses_before_a_code_is_drawn() {
    let fx = Fx::new(34);
    let app = fx.workflow("Echo", "app-key-pu");
    fx.sim.set_setting("PUBLIC_URL", "not a url");
    fx.sim.evict_isolate();
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({})));
    err(&r, 503, "misconfigured");
    assert_eq!(
        rows(&fx, "SELECT COUNT(*) AS n FROM mcp_servers", vec![])[0]["n"],
        0,
        "no server without its one showing"
    );
    fx.sim.set_setting("PUBLIC_URL", "");
    fx.sim.evict_isolate();
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({})));
    let code = body(&r)["server_code"].as_str().unwrap().to_string();
    fx.codes.borrow_mut().push(code.clone());
    assert_eq!(body(&r)["mcp_url"], format!("{BASE}/mcp/server/{code}/mcp"), "the request's origin");
}
