//! OAuth for upstream MCP servers (`client_credentials` and `refresh_token` grants): one
//! `TokenBroker` Durable Object per app, origin and backend (`binding::token_broker_name`)
//! holds the token, so every isolate reuses it until it is about to expire, and concurrent
//! refreshes are coalesced (requests that arrive while one refresh is in flight wait for it
//! and take its token). With `oauth.issuer` the broker also
//! finds the token endpoint (`pure::backend::mcp::discovery` decides, this only fetches, every
//! fetch through the outbound guard), and a 401/403 challenge from the upstream makes it drop
//! the rejected token and ask again with the challenge's scope and metadata.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use crate::json;
use serde_json::Value;
use std::rc::Rc;

use crate::runtime::{
    storage_get, storage_put, Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Request, Response,
};

use crate::pure::backend::mcp::binding::token_broker_name;
use crate::pure::backend::mcp::client_assertion;
use crate::pure::backend::mcp::discovery::{self as disc, AuthMethod, Challenge, Reaction};
use crate::pure::backend::mcp::oauth::{self as up, OAuthConfig, OAuthToken, TokenTarget};
use crate::pure::definition::AppDefinition;

use crate::shell::outbound::{self, CrossOrigin, SendError};
use crate::shell::secrets;

const STORAGE_KEY: &str = "token";
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// A token answer is a few hundred bytes; nothing larger is read.
const TOKEN_BODY_CAP: usize = 64 * 1024;

/// Why an app's upstream gets no `Authorization` header from its token broker.
#[derive(Debug)]
pub enum NoAuthorization {
    /// The refusal is not one a new token answers.
    NotAChallenge,
    /// The broker could not be asked, or its answer does not read: the app, and why.
    Broker { app: String, error: crate::runtime::Error },
    /// The broker's own words (the token endpoint, or finding it, failed), or why its token
    /// does not read.
    Failed(String),
}

impl std::fmt::Display for NoAuthorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAuthorization::NotAChallenge => f.write_str("not a challenge"),
            NoAuthorization::Broker { app, error } => {
                write!(f, "the OAuth token of app '{app}' could not be obtained: {error}")
            }
            NoAuthorization::Failed(why) => f.write_str(why),
        }
    }
}

/// For `upstream_of`, which answers in words.
impl From<NoAuthorization> for String {
    fn from(e: NoAuthorization) -> String {
        format!("{e}")
    }
}

impl From<String> for NoAuthorization {
    fn from(why: String) -> NoAuthorization {
        NoAuthorization::Failed(why)
    }
}

/// The `Authorization` header for an app's upstream, from its token broker.
pub async fn authorization(env: &Env, app: &AppDefinition) -> Result<(String, String), NoAuthorization> {
    authorize(env, app, None).await
}

/// After the upstream refused `used` (the Authorization value sent) with `status` and
/// `challenge` (its WWW-Authenticate): a new header, or Err when the refusal is not one a new
/// token can fix (the caller then reports the refusal itself).
pub async fn reauthorize(
    env: &Env,
    app: &AppDefinition,
    status: u16,
    challenge: Option<&str>,
    used: &str,
) -> Result<(String, String), NoAuthorization> {
    let c = disc::parse_challenge(challenge.unwrap_or_default());
    let Some(reaction) = disc::reaction(status, &c) else { return Err(NoAuthorization::NotAChallenge) };
    let hint = json!({
        "step_up": reaction == Reaction::StepUp,
        "scope": c.scope,
        "resource_metadata": c.resource_metadata,
        "rejected": crate::pure::ids::sha256_hex(used),
    });
    authorize(env, app, Some(hint)).await
}

async fn authorize(
    env: &Env,
    app: &AppDefinition,
    challenge: Option<Value>,
) -> Result<(String, String), NoAuthorization> {
    let mcp = app.backend.as_mcp();
    // One broker per origin and backend: a token is only ever sent where it was obtained for,
    // and a changed backend starts with none.
    let name = mcp.map_or_else(|| app.id.clone(), |c| token_broker_name(&app.id, c));
    let oauth = mcp.and_then(|c| c.oauth.as_ref());
    let body =
        json!({"app_name": app.name, "oauth": oauth, "mcp_url": mcp.map(|c| c.url.as_str()), "challenge": challenge});
    let answer = match ask_broker(env, &name, body).await {
        Ok(answer) => answer,
        Err(error) => return Err(NoAuthorization::Broker { app: app.name.clone(), error }),
    };
    match answer["token"].as_object() {
        Some(_) => {
            let token: OAuthToken = crate::pure::fields::read(answer["token"].clone())?;
            Ok(up::authorization_header(&token))
        }
        None => {
            Err(NoAuthorization::Failed(answer["error"].as_str().unwrap_or("the token endpoint failed").to_string()))
        }
    }
}

/// The broker's JSON answer to `body`.
async fn ask_broker(env: &Env, name: &str, body: Value) -> crate::runtime::Result<Value> {
    let req = Request::post("https://oauth/token", body.to_string());
    let resp = env.runtime().object_fetch(crate::shell::platform::OAUTH, name, req).await?;
    Ok(serde_json::from_str(&resp.text().await?)?)
}

/// The Durable Object class that holds an upstream app's OAuth token (bound as `OAUTH`, class
/// `TokenBroker`): one per app, origin and backend.
pub struct TokenBroker {
    storage: Rc<dyn ObjectStorage>,
    env: Env,
    token: RefCell<Option<OAuthToken>>,
    /// Set while a refresh is in flight (the object is single-threaded, so this is the lock).
    refreshing: Cell<bool>,
    /// What discovery found, for the (issuer, MCP URL) it was found for.
    discovered: RefCell<Option<(String, TokenTarget)>>,
    /// The last challenge's hints: where its metadata is, the scope it asks for.
    hint: RefCell<Challenge>,
    /// The scope of the last token request (a step-up adds to it).
    last_scope: RefCell<Option<String>>,
}

impl ObjectHandler for TokenBroker {
    fn fetch(&self, req: Request) -> Fut<'_, Response> {
        Box::pin(async move {
            self.answer(req)
                .await
                .unwrap_or_else(|e| Response::text_with_status(format!("the token broker failed: {e}"), 500))
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

impl TokenBroker {
    pub fn new(storage: Rc<dyn ObjectStorage>, env: Env) -> Self {
        TokenBroker {
            storage,
            env,
            token: RefCell::new(None),
            refreshing: Cell::new(false),
            discovered: RefCell::new(None),
            hint: RefCell::new(Challenge::default()),
            last_scope: RefCell::new(None),
        }
    }

    async fn answer(&self, req: Request) -> crate::runtime::Result<Response> {
        crate::shell::outbound::guard_from_env(&self.env);
        let body: Value = serde_json::from_str(&req.text().await?).unwrap_or(Value::Null);
        let app = body["app_name"].as_str().unwrap_or("app").to_string();
        let env = self.env.clone();
        // One copy of `from_value` (the console's checks use it too): its resolver answers in words.
        let resolve = |v: &str| secrets::resolve(&env, v).map_err(|e| format!("{e}"));
        let cfg = match OAuthConfig::from_value(&body["oauth"], &resolve) {
            Ok(c) => c,
            Err(e) => return Response::from_json(&json!({"error": format!("backend.oauth of app '{app}': {e}")})),
        };
        let mcp_url = body["mcp_url"].as_str().unwrap_or_default().to_string();
        if body["challenge"].is_object() {
            self.take_challenge(&cfg, &body["challenge"]).await?;
        }
        if let Some(t) = self.valid(&cfg).await? {
            return Response::from_json(&json!({"token": t}));
        }
        // One refresh at a time: later callers wait for it and take its token.
        while self.refreshing.get() {
            crate::runtime::sleep(20).await;
        }
        if let Some(t) = self.valid(&cfg).await? {
            return Response::from_json(&json!({"token": t}));
        }
        self.refreshing.set(true);
        let result = self.refresh(&cfg, &app, &mcp_url).await;
        self.refreshing.set(false);
        match result {
            Ok(t) => Response::from_json(&json!({"token": t})),
            Err(NoToken::Because(e)) => Response::from_json(&json!({"error": e})),
            Err(NoToken::Storage(e)) => Err(e),
        }
    }

    async fn current(&self) -> crate::runtime::Result<Option<OAuthToken>> {
        if let Some(t) = self.token.borrow().clone() {
            return Ok(Some(t));
        }
        let stored = storage_get::<OAuthToken>(&*self.storage, STORAGE_KEY).await?;
        *self.token.borrow_mut() = stored.clone();
        Ok(stored)
    }

    async fn valid(&self, cfg: &OAuthConfig) -> crate::runtime::Result<Option<OAuthToken>> {
        Ok(self
            .current()
            .await?
            .filter(|t| !up::needs_refresh(t, crate::shell::platform::now_ms(), cfg.refresh_skew_seconds)))
    }

    /// A challenge from the upstream: the token it refused is dropped (unless another request
    /// already replaced it), and its hints are kept for the next token request.
    async fn take_challenge(&self, cfg: &OAuthConfig, c: &Value) -> crate::runtime::Result<()> {
        let rejected = c["rejected"].as_str().unwrap_or_default();
        let current = self.current().await?;
        let sent = current.as_ref().map(up::authorization_header).map(|(_, v)| crate::pure::ids::sha256_hex(&v));
        if sent.as_deref() != Some(rejected) {
            return Ok(());
        }
        let scope = c["scope"].as_str().map(String::from);
        let scope = if c["step_up"].as_bool() == Some(true) {
            let before = self.last_scope.borrow().clone().or_else(|| cfg.scope.clone());
            disc::choose_scope(scope.as_deref(), before.as_deref(), None, None)
        } else {
            scope
        };
        let resource_metadata = c["resource_metadata"].as_str().map(String::from);
        if resource_metadata.is_some() && resource_metadata != self.hint.borrow().resource_metadata {
            // Metadata elsewhere than discovery looked: look again there.
            *self.discovered.borrow_mut() = None;
        }
        *self.hint.borrow_mut() = Challenge { resource_metadata, scope, error: None };
        // A refresh token does not outlive the access token the upstream refused.
        *self.token.borrow_mut() = None;
        self.storage.delete(STORAGE_KEY).await?;
        Ok(())
    }

    /// The configured token endpoint, or the one discovery finds for `oauth.issuer`.
    async fn target(&self, cfg: &OAuthConfig, mcp_url: &str) -> Result<TokenTarget, String> {
        if let Some(t) = TokenTarget::configured(cfg) {
            return Ok(t);
        }
        let issuer = cfg.issuer.clone().ok_or("backend.oauth has neither token_url nor issuer")?;
        let key = format!("{issuer}\n{mcp_url}");
        if let Some((k, t)) = self.discovered.borrow().as_ref() {
            if *k == key {
                return Ok(t.clone());
            }
        }
        let hinted = self.hint.borrow().resource_metadata.clone();
        let t = discover(cfg, &issuer, mcp_url, hinted.as_deref()).await?;
        *self.discovered.borrow_mut() = Some((key, t.clone()));
        Ok(t)
    }

    async fn refresh(&self, cfg: &OAuthConfig, app: &str, mcp_url: &str) -> Result<OAuthToken, NoToken> {
        // Another request may have refreshed while this one waited.
        if let Some(t) = self.valid(cfg).await? {
            return Ok(t);
        }
        let target = match self.target(cfg, mcp_url).await {
            Ok(t) => t,
            Err(e) => return Err(NoToken::Because(format!("OAuth discovery for app '{app}': {e}"))),
        };
        let hinted = self.hint.borrow().scope.clone();
        let scope =
            disc::choose_scope(hinted.as_deref(), None, cfg.scope.as_deref(), target.scopes_supported.as_deref());
        *self.last_scope.borrow_mut() = scope.clone();
        let current = self.current().await?;
        let mut fields = up::token_form(cfg, &target, scope.as_deref(), current.as_ref());
        if target.auth_method == AuthMethod::PrivateKeyJwt {
            match crate::shell::backend::mcp::client_assertion::assertion(cfg, &target.token_url).await {
                Ok(a) => client_assertion::add_to_form(&mut fields, a),
                Err(e) => return Err(NoToken::Because(format!("backend.oauth.private_key of app '{app}' {e}"))),
            }
        }
        let form = up::form_urlencode(&fields);
        let mut headers = Headers::new();
        headers.set("content-type", "application/x-www-form-urlencoded");
        headers.set("accept", "application/json");
        if let Some((k, v)) = up::token_request_auth(cfg, &target) {
            if let Err(e) = headers.try_set(&k, &v) {
                let why = format!("backend.oauth of app '{app}': its client credentials cannot be sent ({e})");
                return Err(NoToken::Because(why));
            }
        }
        let sent = send(&target.token_url, headers, form).await;
        let (status, text) = match sent {
            Ok(x) => x,
            Err(e) => {
                return Err(NoToken::Because(format!(
                    "the OAuth token endpoint of app '{app}' could not be reached: {e}"
                )))
            }
        };
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        if !(200..300).contains(&status) {
            let why = parsed.as_ref().and_then(|v| v["error"].as_str()).unwrap_or("no error code");
            let hint = match target.auth_method {
                AuthMethod::PrivateKeyJwt => up::assertion_refusal_hint(cfg, &target.token_url),
                _ => String::new(),
            };
            return Err(NoToken::Because(format!(
                "the OAuth token endpoint of app '{app}' refused the request (HTTP {status}, {why}){hint}"
            )));
        }
        let token = match parsed
            .as_ref()
            .map(|v| up::parse_token(v, crate::shell::platform::now_ms(), cfg.default_expires_in))
        {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(NoToken::Because(format!("the OAuth token endpoint of app '{app}': {e}"))),
            None => {
                return Err(NoToken::Because(format!("the OAuth token endpoint of app '{app}' did not answer JSON")))
            }
        };
        storage_put(&*self.storage, STORAGE_KEY, &token).await?;
        *self.token.borrow_mut() = Some(token.clone());
        Ok(token)
    }
}

/// Why the broker has no token to give.
enum NoToken {
    /// The token endpoint (or finding it) did not give one: words for the app's owner, which
    /// the caller gets as the answer's `error`.
    Because(String),
    /// The broker's storage failed (the request fails: 500).
    Storage(crate::runtime::Error),
}

impl From<crate::runtime::Error> for NoToken {
    fn from(e: crate::runtime::Error) -> NoToken {
        NoToken::Storage(e)
    }
}

/// Finds the token endpoint of `issuer` for the MCP server at `mcp_url`: its protected-resource
/// metadata (at `hinted`, from a challenge, else the RFC 9728 well-known locations) must name
/// the issuer, and the issuer's metadata must name itself exactly; only then is its token
/// endpoint used. An upstream without protected-resource metadata is asked for the MCP URL as
/// its `resource`.
async fn discover(cfg: &OAuthConfig, issuer: &str, mcp_url: &str, hinted: Option<&str>) -> Result<TokenTarget, String> {
    let candidates = match hinted {
        Some(u) => vec![u.to_string()],
        None => disc::resource_metadata_urls(mcp_url),
    };
    let mut prm = None;
    for url in candidates {
        if let Some(v) = get_json(&url).await? {
            prm = Some(disc::read_resource_metadata(&v, mcp_url)?);
            break;
        }
    }
    if let Some(p) = &prm {
        disc::check_issuer_listed(p, issuer)?;
    }
    for url in disc::as_metadata_urls(issuer) {
        let Some(v) = get_json(&url).await? else { continue };
        let m = disc::read_as_metadata(&v, issuer)?;
        let auth_method =
            disc::choose_auth_method(cfg.auth_method, m.auth_methods.as_deref(), cfg.client_secret.is_some())?;
        let resource = prm
            .as_ref()
            .map(|p| p.resource.clone())
            .unwrap_or_else(|| mcp_url.split('#').next().unwrap_or(mcp_url).to_string());
        return Ok(TokenTarget {
            token_url: m.token_endpoint,
            auth_method,
            resource: Some(resource),
            scopes_supported: prm.and_then(|p| p.scopes_supported),
        });
    }
    Err(format!(
        "no authorization server metadata at the well-known locations of the issuer {} (RFC 8414, OpenID \
         Connect); check backend.oauth.issuer, or name the token endpoint as backend.oauth.token_url",
        issuer
    ))
}

/// GETs a metadata document: `Some` JSON, `None` when there is none there (a 4xx), Err when the
/// place could not be reached or did not answer JSON.
async fn get_json(url: &str) -> Result<Option<Value>, String> {
    let mut headers = Headers::new();
    headers.set("accept", "application/json");
    let at = crate::pure::url::host_for_display(url);
    let sent =
        outbound::send_text(Method::Get, url, headers, None, TOKEN_TIMEOUT, CrossOrigin::WithoutCredentials).await;
    let mut r = match sent {
        Ok(r) => r,
        Err(SendError::TimedOut) => return Err(format!("{at} did not answer within {} s", TOKEN_TIMEOUT.as_secs())),
        Err(SendError::Unreachable(e)) => return Err(format!("{at} could not be reached: {e}")),
        Err(SendError::TooLarge(_)) => return Err(format!("{at} answered too much")),
    };
    let status = r.status_code();
    if (400..500).contains(&status) {
        return Ok(None);
    }
    if !(200..300).contains(&status) {
        return Err(format!("{at} answered HTTP {status} for its metadata"));
    }
    let text = match outbound::text(&mut r, TOKEN_TIMEOUT, TOKEN_BODY_CAP).await {
        Ok(t) => t,
        Err(SendError::TooLarge(cap)) => return Err(format!("the metadata at {at} is larger than {} KiB", cap / 1024)),
        Err(_) => return Err(format!("the metadata at {at} did not arrive")),
    };
    serde_json::from_str(&text).map(Some).map_err(|_| format!("the metadata at {at} is not JSON"))
}

/// POSTs the token form (it carries the client secret: a redirect to another origin is
/// refused) and reads the small answer.
async fn send(url: &str, headers: Headers, form: String) -> Result<(u16, String), String> {
    let sent = outbound::send_text(Method::Post, url, headers, Some(form), TOKEN_TIMEOUT, CrossOrigin::Refused).await;
    let mut r = match sent {
        Ok(r) => r,
        Err(SendError::TimedOut) => return Err(format!("no answer within {} s", TOKEN_TIMEOUT.as_secs())),
        Err(SendError::Unreachable(e)) => return Err(e.to_string()),
        Err(SendError::TooLarge(_)) => return Err("the answer is too large".into()),
    };
    let status = r.status_code();
    match outbound::text(&mut r, TOKEN_TIMEOUT, TOKEN_BODY_CAP).await {
        Ok(t) => Ok((status, t)),
        Err(SendError::TimedOut) => Err("the answer timed out".into()),
        Err(SendError::TooLarge(cap)) => Err(format!("the answer is larger than {} KiB", cap / 1024)),
        Err(SendError::Unreachable(e)) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words a call gets when its upstream's token is missing: the broker's failure names
    /// the app; the broker's own reason is passed on as it is.
    #[test]
    fn no_authorization_says_why() {
        let broker = NoAuthorization::Broker {
            app: "Docs".into(),
            error: crate::runtime::Error::new(crate::runtime::Kind::Object, "the object is overloaded"),
        };
        assert_eq!(broker.to_string(), "the OAuth token of app 'Docs' could not be obtained: the object is overloaded");
        assert_eq!(
            String::from(NoAuthorization::from("the token endpoint failed".to_string())),
            "the token endpoint failed"
        );
        assert_eq!(NoAuthorization::NotAChallenge.to_string(), "not a challenge");
    }
}
