//! OAuth for upstream MCP apps through the TokenBroker Durable Object: a client-credentials
//! token fetched once and reused, refreshed before it expires, replaced after a 401 challenge,
//! never sent to another origin; `private_key_jwt` assertions as the issuer checks them.

use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::oauth::pkcs8_pem;
use crate::sim::{Reply, Secrets};

const CLIENT: &str = "up-client";
const CLIENT_SECRET: &str = "up-client-secret-0123456789";

/// An upstream app whose token comes from the issuer (client credentials), the upstream
/// accepting only the issuer's live tokens; the app.
fn oauth_app(fx: &Fx) -> UpApp {
    fx.issuer.add_client(CLIENT, CLIENT_SECRET);
    fx.secret(CLIENT_SECRET);
    let issuer = fx.issuer.clone();
    fx.upstream.require_token(move |t, now| issuer.accepts(t, now));
    let oauth = json!({"token_url": format!("{ISSUER}/token"), "client_id": CLIENT, "client_secret": CLIENT_SECRET});
    upstream_app(fx, "Guarded", &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }))
}

fn token_requests(fx: &Fx) -> usize {
    fx.issuer.requests.borrow().iter().filter(|r| r.path == "/token").count()
}

/// The bearer of every request the upstream got.
fn bearers(fx: &Fx) -> Vec<Option<String>> {
    fx.upstream.requests.borrow().iter().map(|r| r.bearer()).collect()
}

fn echo(fx: &Fx, code: &str, tool: &str, text: &str) {
    let v = last(&fx.call(code, tool, json!({ "text": text })));
    assert_eq!(result_text(&v), (false, format!("echo: {text}")), "{v}");
}

/// The invariants, with each token bound to the upstream and the client secret to the issuer.
fn assert_bound(fx: &Fx) {
    for t in fx.issuer.tokens() {
        fx.secret(&t);
    }
    fx.assert_invariants();
    let mut credentials: Vec<(String, String)> = fx.issuer.tokens().into_iter().map(|t| (t, UPSTREAM.into())).collect();
    credentials.push((CLIENT_SECRET.into(), ISSUER.into()));
    fx.sim.assert_invariants(&Secrets { credentials, ..Secrets::default() });
}

#[test]
fn a_client_credentials_token_is_fetched_once_and_reused_across_calls_and_isolates() {
    let fx = Fx::new(300);
    let app = oauth_app(&fx);
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    fx.sim.evict_isolate();
    echo(&fx, &app.code, &tool, "two");
    assert_eq!(token_requests(&fx), 1, "one token for every call, on every isolate");
    let token = fx.issuer.tokens().pop();
    assert!(token.is_some());
    assert!(bearers(&fx).iter().all(|b| *b == token), "{:?}", bearers(&fx));
    assert_eq!(fx.upstream.refused.get(), 0);
    // The form carried the client's secret to the issuer, and the issuer only.
    let form = fx.issuer.requests.borrow().iter().find(|r| r.path == "/token").map(|r| r.body.clone());
    assert!(form.is_some_and(|f| f.contains("grant_type=client_credentials") && f.contains(CLIENT_SECRET)));
    assert_bound(&fx);
}

#[test]
fn a_token_about_to_expire_is_refreshed_before_it_is_sent() {
    let fx = Fx::new(301);
    fx.issuer.expires_in.set(600);
    let app = oauth_app(&fx);
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    fx.sim.advance(300_000).unwrap_or_else(|h| panic!("{h}"));
    echo(&fx, &app.code, &tool, "two");
    assert_eq!(token_requests(&fx), 1, "still good for five minutes");
    // Within the refresh skew (60 s) of its expiry: replaced before use, never refused.
    fx.sim.advance(250_000).unwrap_or_else(|h| panic!("{h}"));
    echo(&fx, &app.code, &tool, "three");
    assert_eq!(token_requests(&fx), 2);
    assert_eq!(fx.upstream.refused.get(), 0, "an expired token was sent");
    let tokens = fx.issuer.tokens();
    let last_call = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.bearer());
    assert_eq!(last_call.as_ref(), tokens.last());
    assert_ne!(tokens.first(), tokens.last());
    assert_bound(&fx);
}

#[test]
fn a_401_challenge_from_the_upstream_gets_a_new_token_and_the_call_answers() {
    let fx = Fx::new(302);
    let app = oauth_app(&fx);
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    let first = fx.issuer.tokens();
    // The issuer revokes it long before its expiry: the upstream answers 401 with a challenge.
    fx.issuer.revoked.borrow_mut().extend(first.clone());
    echo(&fx, &app.code, &tool, "after");
    assert_eq!(fx.upstream.refused.get(), 1);
    assert_eq!(token_requests(&fx), 2);
    let tokens = fx.issuer.tokens();
    let last_call = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.bearer());
    assert_eq!(last_call.as_ref(), tokens.last());
    assert_ne!(tokens.last(), first.last());
    // Kept by the broker: the next call asks for nothing.
    echo(&fx, &app.code, &tool, "again");
    assert_eq!(token_requests(&fx), 2);
    assert_bound(&fx);
}

#[test]
fn a_challenge_no_new_token_answers_is_a_tool_error_in_words() {
    let fx = Fx::new(303);
    let app = oauth_app(&fx);
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    fx.issuer.revoked.borrow_mut().extend(fx.issuer.tokens());
    fx.issuer.clients.borrow_mut().clear();
    let v = last(&fx.call(&app.code, &tool, json!({"text": "x"})));
    let (is_error, text) = result_text(&v);
    assert!(is_error, "{v}");
    assert!(text.contains("the MCP server of app Guarded requires authorization (HTTP 401)"), "{text}");
    assert!(text.contains("invalid_token"), "the challenge's details: {text}");
    // Why no new token came is in the log.
    let logged = fx.sim.logs().iter().any(|l| l.contains("refused the request (HTTP 401, invalid_client)"));
    assert!(logged, "{:?}", fx.sim.logs());
    // Once, the call (the standalone GET is not sent: the first call's got 405): not sent again
    // without a new token.
    assert_eq!(fx.upstream.refused.get(), 1, "asked again only with a new token");
    assert_bound(&fx);
}

#[test]
fn the_token_is_never_sent_to_another_origin() {
    let fx = Fx::new(304);
    let app = oauth_app(&fx);
    let tool = tool_named(&fx, &app.code, "echo");
    let other = recording(&fx, OTHER, |req| {
        let id = req.json().map(|m| m["id"].clone()).unwrap_or(Value::Null);
        Reply::json(
            200,
            &json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "elsewhere"}]}}),
        )
    });
    *fx.upstream.redirect_calls.borrow_mut() = Some(format!("{OTHER}/mcp"));
    let v = last(&fx.call(&app.code, &tool, json!({"text": "x"})));
    assert!(v.get("result").is_some(), "{v}");
    let seen = other.borrow();
    assert_eq!(seen.len(), 1, "the redirect was followed");
    assert!(seen[0].headers.get("authorization").is_none(), "{:?}", seen[0].headers);
    assert!(seen[0].headers.get("mcp-session-id").is_none(), "{:?}", seen[0].headers);
    drop(seen);
    assert_bound(&fx);
}

// ---------------------------------------------------------------------------------------------
// private_key_jwt

const KEY_CLIENT: &str = "jwt-client";

fn jwt_app(fx: &Fx, name: &str, private_key: &str, extra: Value) -> Result<UpApp, (u16, String)> {
    let issuer = fx.issuer.clone();
    fx.upstream.require_token(move |t, now| issuer.accepts(t, now));
    let mut oauth =
        json!({"token_url": format!("{ISSUER}/token"), "client_id": KEY_CLIENT, "private_key": private_key});
    if let (Some(o), Some(x)) = (oauth.as_object_mut(), extra.as_object()) {
        o.extend(x.clone());
    }
    try_upstream_app(fx, name, &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }))
}

#[test]
fn a_private_key_jwt_assertion_is_well_formed_and_signed_with_the_configured_algorithm() {
    for alg in ["ES256", "RS256"] {
        let fx = Fx::new(305);
        let (pem, key) = pkcs8_pem("fg-key-1", alg, &format!("{alg}-seed"));
        fx.secret(&pem);
        fx.issuer.add_jwt_client(KEY_CLIENT, key);
        let app =
            jwt_app(&fx, "Signed", &pem, json!({"key_id": "fg-key-1"})).unwrap_or_else(|(s, t)| panic!("{s} {t}"));
        let tool = tool_named(&fx, &app.code, "echo");
        echo(&fx, &app.code, &tool, "signed");
        assert_eq!(*fx.issuer.refusals.borrow(), Vec::<String>::new(), "{alg}");
        let seen = fx.issuer.assertions.borrow().clone();
        assert_eq!(seen.len(), 1, "{alg}");
        let (header, claims) = &seen[0];
        assert_eq!(header["alg"], alg);
        assert_eq!(header["kid"], "fg-key-1");
        assert_eq!((&claims["iss"], &claims["sub"]), (&json!(KEY_CLIENT), &json!(KEY_CLIENT)));
        assert_eq!(claims["aud"], format!("{ISSUER}/token"));
        let now_s = fx.sim.now_ms() / 1000;
        let exp = claims["exp"].as_u64().unwrap_or(0);
        assert!(exp > now_s && exp <= now_s + 60, "exp {exp}, now {now_s}");
        assert!(claims["jti"].as_str().is_some_and(|j| j.len() >= 16), "{claims}");
        // No secret in the form: the assertion is the client's authentication.
        let form = fx.issuer.requests.borrow().iter().find(|r| r.path == "/token").map(|r| r.body.clone());
        assert!(form.is_some_and(|f| !f.contains("client_secret") && f.contains("client_assertion=")));
        assert_bound(&fx);
    }
}

#[test]
fn a_second_token_request_signs_a_new_assertion() {
    let fx = Fx::new(306);
    let (pem, key) = pkcs8_pem("k", "ES256", "again");
    fx.secret(&pem);
    fx.issuer.add_jwt_client(KEY_CLIENT, key);
    fx.issuer.expires_in.set(120);
    let app = jwt_app(&fx, "Signed", &pem, json!({})).unwrap_or_else(|(s, t)| panic!("{s} {t}"));
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    fx.sim.advance(90_000).unwrap_or_else(|h| panic!("{h}"));
    echo(&fx, &app.code, &tool, "two");
    // A replayed jti would be refused by the issuer.
    assert_eq!(fx.issuer.assertions.borrow().len(), 2);
    assert_eq!(*fx.issuer.refusals.borrow(), Vec::<String>::new());
    assert_bound(&fx);
}

#[test]
fn a_bad_private_key_is_a_console_error_in_words_and_signs_nothing() {
    let fx = Fx::new(307);
    fx.sim.set_setting("SECRET_REF_NAMES", "UP_CLIENT_KEY");
    // A literal that is no key: refused when the app is stored.
    let r = jwt_app(&fx, "Bad", "not a key", json!({})).err();
    let (status, text) = r.unwrap_or_default();
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("backend.oauth.private_key: is not a PEM private key: it must start with -----BEGIN"),
        "{text}"
    );
    // A key the issuer does not know: the token request is refused, and the console's tool
    // refresh says so; a client's list goes without the upstream's tools, the reason logged.
    let (pem, _) = pkcs8_pem("k", "ES256", "unknown");
    fx.secret(&pem);
    let app = jwt_app(&fx, "Unknown", &pem, json!({})).unwrap_or_else(|(s, t)| panic!("{s} {t}"));
    let refused = "the OAuth token endpoint of app 'Unknown' refused the request (HTTP 401, invalid_client)";
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains(refused), "{}", r.text());
    assert!(tools(&fx, &app.code, &[]).is_empty());
    assert!(fx.sim.logs().iter().any(|l| l.contains(refused)), "{:?}", fx.sim.logs());
    // A reference set after the app was stored, to something that is no PKCS#8 key.
    let signed = fx.issuer.assertions.borrow().len();
    let app = jwt_app(&fx, "Later", "$UP_CLIENT_KEY", json!({})).unwrap_or_else(|(s, t)| panic!("{s} {t}"));
    fx.sim.set_setting("UP_CLIENT_KEY", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----");
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    let text = r.text();
    assert!(text.contains("backend.oauth.private_key"), "{text}");
    assert!(text.contains("(SEC 1 / PKCS#1) PEM; Flowgate takes PKCS#8"), "{text}");
    assert!(!text.contains("AAAA"), "the key is never quoted: {text}");
    assert_eq!(fx.issuer.assertions.borrow().len(), signed, "nothing was signed with the bad key");
    fx.assert_invariants();
}

#[test]
fn the_token_broker_is_one_durable_object_per_app() {
    let fx = Fx::new(308);
    let a = oauth_app(&fx);
    let oauth = json!({"token_url": format!("{ISSUER}/token"), "client_id": CLIENT, "client_secret": CLIENT_SECRET});
    let b = upstream_app(&fx, "Second", &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }));
    echo(&fx, &a.code, &tool_named(&fx, &a.code, "echo"), "a");
    echo(&fx, &b.code, &tool_named(&fx, &b.code, "echo"), "b");
    let brokers: Vec<_> = fx.sim.objects().into_iter().filter(|(ns, _)| ns == crate::shell::platform::OAUTH).collect();
    assert_eq!(brokers.len(), 2, "{brokers:?}");
    assert_eq!(token_requests(&fx), 2);
    let _ = Rc::clone(&fx.issuer);
    assert_bound(&fx);
}
