//! Console authentication and the console's own access routes where the broader console tests
//! leave them open: bad Access assertions count as guesses (and unreachable Access keys do
//! not), a server's client authentication as read and set, and the audit log's actions.

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::sim::crypto::SimKey;
use crate::sim::Reply;

const TEAM: &str = "https://team.test";
const AUD: &str = "aud-tag-of-the-console-app";

fn console_raw(fx: &Fx, path: &str, headers: &[(&str, &str)]) -> ClientResponse {
    fx.sim.request(request(Method::Get, &format!("{BASE}/console/api{path}"), headers, None))
}

fn body(r: &ClientResponse) -> Value {
    r.json().unwrap_or(Value::Null)
}

/// Cloudflare Access configured; the team serves `key` when `up`, else fails.
fn access_fx(seed: u64, up: bool) -> (Fx, SimKey) {
    let fx = Fx::new(seed);
    fx.sim.set_setting("ACCESS_TEAM_DOMAIN", "team.test");
    fx.sim.set_setting("ACCESS_AUD", AUD);
    let key = SimKey::new("access-1", &"rs256".to_uppercase());
    let jwk = key.jwk();
    fx.sim.add_backend(
        TEAM,
        std::rc::Rc::new(move |req: &crate::sim::BackendRequest, _now: u64| {
            if up && req.path == "/cdn-cgi/access/certs" {
                Reply::json(200, &json!({"keys": [jwk.clone()]}))
            } else {
                Reply::json(500, &json!({}))
            }
        }),
    );
    (fx, key)
}

fn assertion(fx: &Fx, key: &SimKey, aud: &str) -> String {
    let now = fx.sim.now_ms() / 1000;
    let c =
        json!({"iss": TEAM, "aud": [aud], "sub": "user-1", "email": "ann@example.com", "iat": now, "exp": now + 600});
    key.jwt_with_header(&json!({"alg": key.alg, "kid": key.kid, "typ": "jwt".to_uppercase()}), &c)
}

#[test]
fn a_refused_access_assertion_counts_as_a_guess() {
    let (fx, key) = access_fx(601, true);
    fx.sim.set_rate_limit("ADMIN_AUTH_LIMIT", 2, 60_000);
    let bad = assertion(&fx, &key, "another-app");
    let from =
        |jwt: &str| console_raw(&fx, "/apps", &[("cf-access-jwt-assertion", jwt), ("cf-connecting-ip", "10.0.0.1")]);
    assert_eq!(from(&bad).status, 401);
    assert_eq!(from(&bad).status, 401);
    let r = from(&bad);
    assert_eq!((r.status, body(&r)["error"].clone()), (429, json!("too_many_attempts")), "{}", r.text());
}

#[test]
fn access_keys_that_cannot_be_had_are_not_counted_as_guesses() {
    let (fx, key) = access_fx(602, false);
    fx.sim.set_rate_limit("ADMIN_AUTH_LIMIT", 1, 60_000);
    let good = assertion(&fx, &key, AUD);
    for _ in 0..3 {
        let r = console_raw(&fx, "/apps", &[("cf-access-jwt-assertion", &good), ("cf-connecting-ip", "10.0.0.1")]);
        assert_eq!((r.status, body(&r)["error"].clone()), (503, json!("access_unavailable")), "{}", r.text());
        fx.sim.advance(31_000).unwrap_or_else(|h| panic!("{h}"));
    }
}

#[test]
fn a_servers_auth_reads_back_and_setting_key_mode_warns_only_without_keys() {
    let fx = Fx::new(603);
    let app = fx.workflow("Echo", "app-key-auth");
    let (server_id, _) = fx.server("S", &[&app]);
    let auth = |fx: &Fx| body(&fx.console(Method::Get, &format!("/servers/{server_id}/auth"), None));
    assert_eq!(auth(&fx)["mode"], "none", "{}", auth(&fx));
    let set = |mode: &str| {
        let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": mode})));
        assert_eq!(r.status, 200, "{}", r.text());
        body(&r)["warnings"].clone()
    };
    let w = set("key");
    assert!(w[0].as_str().unwrap_or_default().contains("no client key yet"), "{w}");
    assert_eq!(auth(&fx)["mode"], "key");
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": "k"})));
    assert_eq!(r.status, 201, "{}", r.text());
    fx.codes.borrow_mut().push(body(&r)["key"].as_str().unwrap_or_default().to_string());
    assert_eq!(set("key"), json!([]));
    // No key needed, none warned about.
    let r = fx.console(
        Method::Delete,
        &format!("/servers/{server_id}/keys/{}", body(&r)["id"].as_str().unwrap_or("")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(set("none"), json!([]));
    assert_eq!(auth(&fx)["mode"], "none");
    fx.assert_invariants();
}

#[test]
fn the_audit_log_names_ids_as_ids_and_other_segments_as_sent() {
    let fx = Fx::new(604);
    // A short hex segment is not an id; a long non-hex one neither.
    for seg in ["abc", "not-an-id-at-all-but-long"] {
        let r = fx.console(Method::Delete, &format!("/apps/{seg}"), None);
        assert_eq!(r.status, 404, "{}", r.text());
    }
    let id = "0123456789abcdef0123";
    assert_eq!(fx.console(Method::Delete, &format!("/apps/{id}"), None).status, 404);
    let log = body(&fx.console(Method::Get, "/audit", None));
    let entries: Vec<(Value, Value)> =
        log["data"].as_array().into_iter().flatten().map(|e| (e["action"].clone(), e["target"].clone())).collect();
    for want in [
        (json!("DELETE /apps/abc"), Value::Null),
        (json!("DELETE /apps/not-an-id-at-all-but-long"), Value::Null),
        (json!("DELETE /apps/{id}"), json!(id)),
    ] {
        assert!(entries.contains(&want), "{want:?} not in {entries:?}");
    }
}
