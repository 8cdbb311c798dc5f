//! An OAuth authorization server (after `tests/support/oauth-issuer.mjs`): RFC 8414 metadata,
//! a JWKS of its stand-in key (see `sim::crypto`), a client_credentials token endpoint, and
//! [`OAuthIssuer::mint`] for any token a test needs.

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::runtime::Method;
use crate::sim::crypto::SimKey;
use crate::sim::network::{Backend, BackendRequest, Reply};

pub struct OAuthIssuer {
    /// `http://issuer.test`: the `iss` of its tokens and the base of its endpoints.
    pub issuer: String,
    pub key: SimKey,
    /// client_id → client_secret.
    pub clients: RefCell<BTreeMap<String, String>>,
    /// The `aud` of tokens from the token endpoint.
    pub audience: String,
    pub requests: RefCell<Vec<BackendRequest>>,
}

impl OAuthIssuer {
    pub fn new(issuer: &str, audience: &str) -> OAuthIssuer {
        OAuthIssuer {
            issuer: issuer.trim_end_matches('/').to_string(),
            key: SimKey::new("sim-rs256-1", "RS256"),
            clients: RefCell::default(),
            audience: audience.to_string(),
            requests: RefCell::default(),
        }
    }

    pub fn add_client(&self, id: &str, secret: &str) {
        self.clients.borrow_mut().insert(id.to_string(), secret.to_string());
    }

    pub fn metadata(&self) -> Value {
        let i = &self.issuer;
        json!({
            "issuer": i,
            "authorization_endpoint": format!("{i}/authorize"),
            "token_endpoint": format!("{i}/token"),
            "jwks_uri": format!("{i}/jwks"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"]
        })
    }

    /// A token signed by this issuer's key (`claims` as given).
    pub fn mint(&self, claims: &Value) -> String {
        self.key.jwt(claims)
    }

    /// An access token for `sub`: this issuer, `aud`, valid `ttl_s` from `now_ms`.
    pub fn access_token(&self, sub: &str, aud: &str, now_ms: u64, ttl_s: u64) -> String {
        let iat = now_ms / 1000;
        self.mint(&json!({"iss": self.issuer, "sub": sub, "aud": aud, "iat": iat, "exp": iat + ttl_s, "scope": "mcp"}))
    }

    fn token(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        let form: BTreeMap<String, String> = url::form_urlencoded::parse(req.body.as_bytes()).into_owned().collect();
        if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
            return Reply::json(400, &json!({"error": "unsupported_grant_type"}));
        }
        let (id, secret) = (
            form.get("client_id").cloned().unwrap_or_default(),
            form.get("client_secret").cloned().unwrap_or_default(),
        );
        if self.clients.borrow().get(&id) != Some(&secret) || id.is_empty() {
            return Reply::json(401, &json!({"error": "invalid_client"}));
        }
        let token = self.access_token(&id, &self.audience, now_ms, 3600);
        Reply::json(200, &json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600}))
    }
}

impl Backend for OAuthIssuer {
    fn handle(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        self.requests.borrow_mut().push(req.clone());
        let path = req.path.split('?').next().unwrap_or("");
        match (path, &req.method) {
            ("/.well-known/oauth-authorization-server" | "/.well-known/openid-configuration", Method::Get) => {
                Reply::json(200, &self.metadata())
            }
            ("/jwks", Method::Get) => Reply::json(200, &json!({ "keys": [self.key.jwk()] })),
            ("/token", Method::Post) => self.token(req, now_ms),
            _ => Reply::json(404, &json!({"error": "not_found"})),
        }
    }
}
