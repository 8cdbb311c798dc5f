//! OAuth for upstream MCP apps beyond a fixed token endpoint: the token endpoint found through
//! the upstream's protected-resource metadata and the issuer's metadata (and found once), a
//! challenge that names other metadata (followed there, once), a step-up that adds the
//! challenged scope to the one held, token answers of realistic size (and a cap on them), and the
//! words for an issuer that refuses a client assertion.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::oauth::pkcs8_pem;
use crate::sim::{Backend, BackendRequest, Reply};

/// An upstream MCP server in front of the fixture's, serving its own metadata documents and
/// refusing one request when told to.
const GUARD: &str = "https://guarded.test";
/// A token endpoint that is not the fixture's issuer (answers of a chosen size).
const TOKENS: &str = "https://tokens.test";
const CLIENT: &str = "disc-client";
const CLIENT_SECRET: &str = "disc-client-secret-0123456789";
const PRM_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

#[derive(Default)]
struct Guard {
    /// Metadata documents by path (a GET of any other path is a 404).
    docs: RefCell<BTreeMap<String, Value>>,
    /// The next MCP request's refusal (status, `WWW-Authenticate`), once.
    refuse_next: RefCell<Option<(u16, String)>>,
    /// The path of every GET.
    gets: RefCell<Vec<String>>,
}

impl Guard {
    fn gets_of(&self, path: &str) -> usize {
        self.gets.borrow().iter().filter(|p| *p == path).count()
    }
}

/// The guard at [`GUARD`], passing MCP requests to the fixture's upstream, which takes only the
/// issuer's live tokens.
fn guard(fx: &Fx) -> Rc<Guard> {
    let g = Rc::new(Guard::default());
    let (state, inner) = (g.clone(), fx.upstream.clone());
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, now: u64| {
        if req.method == Method::Get {
            state.gets.borrow_mut().push(req.path.clone());
            return match state.docs.borrow().get(&req.path) {
                Some(doc) => Reply::json(200, doc),
                None => Reply::json(404, &json!({"error": "not_found"})),
            };
        }
        if let Some((status, www)) = state.refuse_next.borrow_mut().take() {
            let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "Unauthorized"}});
            return Reply::json(status, &body).with_header("www-authenticate", &www);
        }
        inner.handle(req, now)
    });
    fx.sim.add_backend(GUARD, backend);
    fx.issuer.add_client(CLIENT, CLIENT_SECRET);
    fx.secret(CLIENT_SECRET);
    let issuer = fx.issuer.clone();
    fx.upstream.require_token(move |t, now| issuer.accepts(t, now));
    g
}

/// Protected-resource metadata for the guard's MCP URL naming the fixture's issuer.
fn prm(scopes: &[&str]) -> Value {
    json!({"resource": format!("{GUARD}/mcp"), "authorization_servers": [ISSUER], "scopes_supported": scopes})
}

/// An upstream app at the guard with `oauth` (the client's id and secret added).
fn guarded_app(fx: &Fx, oauth: Value) -> UpApp {
    let mut o = json!({"client_id": CLIENT, "client_secret": CLIENT_SECRET, "token_endpoint_auth_method": "client_secret_post"});
    if let (Some(o), Some(x)) = (o.as_object_mut(), oauth.as_object()) {
        o.extend(x.clone());
    }
    upstream_app(fx, "Guarded", &format!("{GUARD}/mcp"), json!({ "oauth": o }))
}

/// Every token request's form, in order.
fn token_forms(fx: &Fx) -> Vec<BTreeMap<String, String>> {
    let requests = fx.issuer.requests.borrow();
    let forms = requests.iter().filter(|r| r.path == "/token");
    forms.map(|r| url::form_urlencoded::parse(r.body.as_bytes()).into_owned().collect()).collect()
}

fn last_scope(fx: &Fx) -> Option<String> {
    token_forms(fx).pop().and_then(|f| f.get("scope").cloned())
}

/// GETs of the issuer's metadata.
fn issuer_metadata_reads(fx: &Fx) -> usize {
    fx.issuer.requests.borrow().iter().filter(|r| r.path.starts_with("/.well-known/")).count()
}

fn echo(fx: &Fx, code: &str, tool: &str, text: &str) {
    let v = last(&fx.call(code, tool, json!({ "text": text })));
    assert_eq!(result_text(&v), (false, format!("echo: {text}")), "{v}");
}

#[test]
fn an_issuer_is_found_through_the_upstreams_metadata_once_and_asked_for_its_resource_and_scopes() {
    let fx = Fx::new(320);
    let g = guard(&fx);
    g.docs.borrow_mut().insert(PRM_PATH.into(), prm(&["mcp.read", "mcp.write"]));
    let app = guarded_app(&fx, json!({ "issuer": ISSUER }));
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    let forms = token_forms(&fx);
    assert_eq!(forms.len(), 1);
    // The token is asked for the resource the metadata names, with the scopes it lists.
    assert_eq!(forms[0].get("resource").map(String::as_str), Some(format!("{GUARD}/mcp").as_str()));
    assert_eq!(forms[0].get("scope").map(String::as_str), Some("mcp.read mcp.write"));
    assert_eq!(forms[0].get("client_secret").map(String::as_str), Some(CLIENT_SECRET));
    assert_eq!((g.gets_of(PRM_PATH), issuer_metadata_reads(&fx)), (1, 1), "{:?}", g.gets.borrow());
    // An hour later the token has expired: a new one, from the endpoint found before.
    fx.sim.advance(3_700_000).unwrap_or_else(|h| panic!("{h}"));
    echo(&fx, &app.code, &tool, "two");
    assert_eq!(token_forms(&fx).len(), 2);
    assert_eq!((g.gets_of(PRM_PATH), issuer_metadata_reads(&fx)), (1, 1), "discovery ran again: {:?}", g.gets.borrow());
    assert_eq!(fx.upstream.refused.get(), 0);
    fx.assert_invariants();
}

#[test]
fn a_challenge_naming_other_metadata_is_followed_there_once() {
    let fx = Fx::new(321);
    let g = guard(&fx);
    g.docs.borrow_mut().insert(PRM_PATH.into(), prm(&["mcp.read"]));
    g.docs.borrow_mut().insert("/moved/prm".into(), prm(&["mcp.all"]));
    let app = guarded_app(&fx, json!({ "issuer": ISSUER }));
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    assert_eq!(last_scope(&fx).as_deref(), Some("mcp.read"));
    // The upstream refuses the token and names metadata elsewhere: read there, and its scopes
    // asked for.
    let moved = format!("Bearer error=\"invalid_token\", resource_metadata=\"{GUARD}/moved/prm\"");
    *g.refuse_next.borrow_mut() = Some((401, moved.clone()));
    echo(&fx, &app.code, &tool, "two");
    assert_eq!(g.gets_of("/moved/prm"), 1, "{:?}", g.gets.borrow());
    assert_eq!(last_scope(&fx).as_deref(), Some("mcp.all"));
    assert_eq!(token_forms(&fx).len(), 2);
    // The same challenge again: a new token, the metadata not read again.
    *g.refuse_next.borrow_mut() = Some((401, moved));
    echo(&fx, &app.code, &tool, "three");
    assert_eq!(token_forms(&fx).len(), 3);
    assert_eq!(g.gets_of("/moved/prm"), 1, "{:?}", g.gets.borrow());
    assert_eq!(issuer_metadata_reads(&fx), 2, "once at first, once for the moved metadata");
    fx.assert_invariants();
}

#[test]
fn a_403_insufficient_scope_adds_the_challenged_scope_and_a_401_asks_for_its_own() {
    let fx = Fx::new(322);
    let g = guard(&fx);
    let app = guarded_app(&fx, json!({"token_url": format!("{ISSUER}/token"), "scope": "mcp.read"}));
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    assert_eq!(last_scope(&fx).as_deref(), Some("mcp.read"));
    // A step-up keeps what the token could do and adds what the upstream asks for.
    *g.refuse_next.borrow_mut() = Some((403, "Bearer error=\"insufficient_scope\", scope=\"mcp.write\"".into()));
    echo(&fx, &app.code, &tool, "two");
    assert_eq!(last_scope(&fx).as_deref(), Some("mcp.read mcp.write"));
    // A 401 is no step-up: the scope it names is the one asked for.
    *g.refuse_next.borrow_mut() = Some((401, "Bearer error=\"invalid_token\", scope=\"mcp.admin\"".into()));
    echo(&fx, &app.code, &tool, "three");
    assert_eq!(last_scope(&fx).as_deref(), Some("mcp.admin"));
    assert_eq!(token_forms(&fx).len(), 3);
    fx.assert_invariants();
}

#[test]
fn a_token_answer_of_a_few_kib_is_taken_and_one_past_64_kib_is_refused_in_words() {
    let fx = Fx::new(323);
    // Some issuers' tokens carry many claims: a few KiB is ordinary.
    let big = format!("t{}", "x".repeat(3000));
    fx.secret(&big);
    let (b, huge) = (big.clone(), "y".repeat(70 * 1024));
    let token_endpoint = recording(&fx, TOKENS, move |req| match req.path.as_str() {
        "/token" => Reply::json(200, &json!({"access_token": b, "token_type": "Bearer", "expires_in": 3600})),
        _ => Reply::json(200, &json!({"access_token": huge, "token_type": "Bearer", "expires_in": 3600})),
    });
    let want = big.clone();
    fx.upstream.require_token(move |t, _| t == want);
    let oauth = json!({"token_url": format!("{TOKENS}/token"), "client_id": CLIENT, "client_secret": CLIENT_SECRET});
    fx.secret(CLIENT_SECRET);
    let app = upstream_app(&fx, "Big", &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }));
    let tool = tool_named(&fx, &app.code, "echo");
    echo(&fx, &app.code, &tool, "one");
    assert_eq!(fx.upstream.refused.get(), 0);
    let oauth = json!({"token_url": format!("{TOKENS}/huge"), "client_id": CLIENT, "client_secret": CLIENT_SECRET});
    let huge_app = upstream_app(&fx, "Huge", &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }));
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", huge_app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("the answer is larger than 64 KiB"), "{}", r.text());
    assert!(token_endpoint.borrow().iter().any(|r| r.path == "/huge"));
    fx.assert_invariants();
}

#[test]
fn an_issuer_refusing_the_client_assertion_is_told_apart_from_a_wrong_secret() {
    let fx = Fx::new(324);
    let (pem, _) = pkcs8_pem("k-unknown", "ES256", "not-registered");
    fx.secret(&pem);
    let issuer = fx.issuer.clone();
    fx.upstream.require_token(move |t, now| issuer.accepts(t, now));
    let oauth = json!({"token_url": format!("{ISSUER}/token"), "client_id": "jwt-client", "private_key": pem, "key_id": "k-unknown"});
    let app = upstream_app(&fx, "Signed", &format!("{UPSTREAM}/mcp"), json!({ "oauth": oauth }));
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    let text = r.text();
    assert!(text.contains("refused the request (HTTP 401, invalid_client)"), "{text}");
    assert!(
        text.contains(
            "it did not accept the client assertion: check that the authorization server holds the public half of \
             backend.oauth.private_key for client 'jwt-client' under key id 'k-unknown', that it takes ES256 assertions"
        ),
        "{text}"
    );
    fx.assert_invariants();
}

#[test]
fn a_private_key_reference_set_to_no_pkcs8_key_is_refused_when_the_app_is_stored() {
    let fx = Fx::new(325);
    fx.sim.set_setting("SECRET_REF_NAMES", "UP_SIGNING_KEY");
    fx.sim.set_setting("UP_SIGNING_KEY", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----");
    let oauth =
        json!({"token_url": format!("{ISSUER}/token"), "client_id": "jwt-client", "private_key": "$UP_SIGNING_KEY"});
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": "Signed", "description": "d", "mode": "mcp",
            "backend": {"url": format!("{UPSTREAM}/mcp"), "oauth": oauth}})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains(
            "backend.oauth.private_key: refers to $UP_SIGNING_KEY, which is a EC PRIVATE KEY (SEC 1 / PKCS#1) PEM"
        ),
        "{text}"
    );
    assert!(!text.contains("AAAA"), "the key is never quoted: {text}");
    // Set to a PKCS#8 key: stored.
    let (pem, _) = pkcs8_pem("k", "ES256", "good");
    fx.secret(&pem);
    fx.sim.set_setting("UP_SIGNING_KEY", &pem);
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": "Signed", "description": "d", "mode": "mcp",
            "backend": {"url": format!("{UPSTREAM}/mcp"), "oauth": oauth}})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    fx.assert_invariants();
}
