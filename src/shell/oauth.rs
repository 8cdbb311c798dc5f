//! OAuth for upstream MCP servers (`client_credentials` and `refresh_token` grants): one
//! `TokenBroker` Durable Object per app holds the token, so every isolate reuses it until it
//! is about to expire, and concurrent refreshes are coalesced (requests that arrive while one
//! refresh is in flight wait for it and take its token).

use std::cell::{Cell, RefCell};
use std::time::Duration;

use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{durable_object, DurableObject, Env, Headers, Method, Request, RequestInit, Response, State};

use crate::pure::backend::mcp::oauth::{self as up, OAuthConfig, OAuthToken};
use crate::pure::definition::AppDefinition;

use super::outbound::{self, CrossOrigin, SendError};
use super::secrets;

const STORAGE_KEY: &str = "token";
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// A token answer is a few hundred bytes; nothing larger is read.
const TOKEN_BODY_CAP: usize = 64 * 1024;

/// The `Authorization` header for an app's upstream, from its token broker.
pub async fn authorization(env: &Env, app: &AppDefinition) -> Result<(String, String), String> {
    let fail = |e: worker::Error| format!("the OAuth token of app '{}' could not be obtained: {e}", app.name);
    let stub = env
        .durable_object(super::platform::OAUTH)
        .map_err(fail)?
        .id_from_name(&app.id)
        .map_err(fail)?
        .get_stub()
        .map_err(fail)?;
    let mut init = RequestInit::new();
    let oauth = app.backend.as_mcp().and_then(|c| c.oauth.as_ref());
    let body = json!({"app_name": app.name, "oauth": oauth});
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&body.to_string())));
    let req = Request::new_with_init("https://oauth/token", &init).map_err(fail)?;
    let mut resp = stub.fetch_with_request(req).await.map_err(fail)?;
    let answer: Value = resp.json().await.map_err(fail)?;
    match answer["token"].as_object() {
        Some(_) => {
            let token: OAuthToken = serde_json::from_value(answer["token"].clone()).map_err(|e| e.to_string())?;
            Ok(up::authorization_header(&token))
        }
        None => Err(answer["error"].as_str().unwrap_or("the token endpoint failed").to_string()),
    }
}

#[durable_object]
pub struct TokenBroker {
    state: State,
    env: Env,
    token: RefCell<Option<OAuthToken>>,
    /// Set while a refresh is in flight (the object is single-threaded, so this is the lock).
    refreshing: Cell<bool>,
}

impl DurableObject for TokenBroker {
    fn new(state: State, env: Env) -> Self {
        TokenBroker { state, env, token: RefCell::new(None), refreshing: Cell::new(false) }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        super::outbound::guard_from_env(&self.env);
        let body: Value = req.json().await.unwrap_or(Value::Null);
        let app = body["app_name"].as_str().unwrap_or("app").to_string();
        let env = self.env.clone();
        let cfg = match OAuthConfig::from_value(&body["oauth"], &|v| secrets::resolve(&env, v)) {
            Ok(c) => c,
            Err(e) => return Response::from_json(&json!({"error": format!("backend.oauth of app '{app}': {e}")})),
        };
        if let Some(t) = self.valid(&cfg).await? {
            return Response::from_json(&json!({"token": t}));
        }
        // One refresh at a time: later callers wait for it and take its token.
        while self.refreshing.get() {
            worker::Delay::from(Duration::from_millis(20)).await;
        }
        if let Some(t) = self.valid(&cfg).await? {
            return Response::from_json(&json!({"token": t}));
        }
        self.refreshing.set(true);
        let result = self.refresh(&cfg, &app).await;
        self.refreshing.set(false);
        let result = result?;
        match result {
            Ok(t) => Response::from_json(&json!({"token": t})),
            Err(e) => Response::from_json(&json!({"error": e})),
        }
    }
}

impl TokenBroker {
    async fn current(&self) -> worker::Result<Option<OAuthToken>> {
        if let Some(t) = self.token.borrow().clone() {
            return Ok(Some(t));
        }
        let stored = self.state.storage().get::<OAuthToken>(STORAGE_KEY).await?;
        *self.token.borrow_mut() = stored.clone();
        Ok(stored)
    }

    async fn valid(&self, cfg: &OAuthConfig) -> worker::Result<Option<OAuthToken>> {
        Ok(self.current().await?.filter(|t| !up::needs_refresh(t, super::platform::now_ms(), cfg.refresh_skew_seconds)))
    }

    async fn refresh(&self, cfg: &OAuthConfig, app: &str) -> worker::Result<Result<OAuthToken, String>> {
        // Another request may have refreshed while this one waited.
        if let Some(t) = self.valid(cfg).await? {
            return Ok(Ok(t));
        }
        let current = self.current().await?;
        let form = up::form_urlencode(&up::token_form(cfg, current.as_ref()));
        let headers = Headers::new();
        headers.set("content-type", "application/x-www-form-urlencoded")?;
        headers.set("accept", "application/json")?;
        let sent = send(&cfg.token_url, headers, form).await;
        let (status, text) = match sent {
            Ok(x) => x,
            Err(e) => return Ok(Err(format!("the OAuth token endpoint of app '{app}' could not be reached: {e}"))),
        };
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        if !(200..300).contains(&status) {
            let why = parsed.as_ref().and_then(|v| v["error"].as_str()).unwrap_or("no error code");
            return Ok(Err(format!(
                "the OAuth token endpoint of app '{app}' refused the request (HTTP {status}, {why})"
            )));
        }
        let token = match parsed.as_ref().map(|v| up::parse_token(v, super::platform::now_ms(), cfg.default_expires_in))
        {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Ok(Err(format!("the OAuth token endpoint of app '{app}': {e}"))),
            None => return Ok(Err(format!("the OAuth token endpoint of app '{app}' did not answer JSON"))),
        };
        self.state.storage().put(STORAGE_KEY, &token).await?;
        *self.token.borrow_mut() = Some(token.clone());
        Ok(Ok(token))
    }
}

/// POSTs the token form (it carries the client secret: a redirect to another origin is
/// refused) and reads the small answer.
async fn send(url: &str, headers: Headers, form: String) -> Result<(u16, String), String> {
    let sent = outbound::send_text(Method::Post, url, headers, Some(form), TOKEN_TIMEOUT, CrossOrigin::Refused).await;
    let mut r = match sent {
        Ok(r) => r,
        Err(SendError::TimedOut) => return Err(format!("no answer within {} s", TOKEN_TIMEOUT.as_secs())),
        Err(SendError::Unreachable(e)) => return Err(e),
        Err(SendError::TooLarge(_)) => return Err("the answer is too large".into()),
    };
    let status = r.status_code();
    match outbound::text(&mut r, TOKEN_TIMEOUT, TOKEN_BODY_CAP).await {
        Ok(t) => Ok((status, t)),
        Err(SendError::TimedOut) => Err("the answer timed out".into()),
        Err(SendError::TooLarge(cap)) => Err(format!("the answer is larger than {} KiB", cap / 1024)),
        Err(SendError::Unreachable(e)) => Err(e),
    }
}
