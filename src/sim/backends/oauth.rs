//! An OAuth authorization server (after `tests/support/oauth-issuer.mjs`): RFC 8414 metadata,
//! a JWKS of its stand-in key (see `sim::crypto`), a client_credentials token endpoint (client
//! secret, or a `private_key_jwt` assertion checked as an authorization server would), and
//! [`OAuthIssuer::mint`] for any token a test needs. It remembers the tokens it issued, so an
//! upstream can ask whether one is still good ([`OAuthIssuer::accepts`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

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
    /// The `expires_in` of tokens from the token endpoint (seconds).
    pub expires_in: Cell<u64>,
    /// client_id → the key its assertions must be signed with (`private_key_jwt`).
    pub jwt_clients: RefCell<BTreeMap<String, SimKey>>,
    /// Every token issued, and when it expires (ms).
    pub issued: RefCell<Vec<(String, u64)>>,
    /// Tokens no longer accepted before their expiry.
    pub revoked: RefCell<BTreeSet<String>>,
    /// Every client assertion that came, read: (header, claims) as the issuer decoded them.
    pub assertions: RefCell<Vec<(Value, Value)>>,
    /// Why each refused token request was refused.
    pub refusals: RefCell<Vec<String>>,
    jtis: RefCell<BTreeSet<String>>,
    pub requests: RefCell<Vec<BackendRequest>>,
}

/// A PKCS#8 PEM of `alg` ("RS256" or "ES256") as the shell reads it (its DER has the key's
/// algorithm, and the curve of an EC key); the key bytes are `seed`'s, not a real key: the
/// stand-in crypto signs with whatever bytes it is given. With the [`SimKey`] that verifies it.
pub fn pkcs8_pem(kid: &str, alg: &str, seed: &str) -> (String, SimKey) {
    use base64::Engine;
    let alg_id: &[u8] = if alg == "ES256" {
        &[
            0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01,
            0x07,
        ]
    } else {
        &[0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00]
    };
    let key: Vec<u8> = seed.bytes().cycle().take(32).collect();
    let mut inner = vec![0x02, 0x01, 0x00, 0x30, alg_id.len() as u8];
    inner.extend_from_slice(alg_id);
    inner.extend_from_slice(&[0x04, key.len() as u8]);
    inner.extend_from_slice(&key);
    let mut der = vec![0x30, inner.len() as u8];
    der.extend_from_slice(&inner);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&der);
    let pem = format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n");
    (pem, SimKey { kid: kid.to_string(), alg: alg.to_string(), pkcs8: der })
}

impl OAuthIssuer {
    pub fn new(issuer: &str, audience: &str) -> OAuthIssuer {
        OAuthIssuer {
            issuer: issuer.trim_end_matches('/').to_string(),
            key: SimKey::new("sim-rs256-1", "RS256"),
            clients: RefCell::default(),
            audience: audience.to_string(),
            expires_in: Cell::new(3600),
            jwt_clients: RefCell::default(),
            issued: RefCell::default(),
            revoked: RefCell::default(),
            assertions: RefCell::default(),
            refusals: RefCell::default(),
            jtis: RefCell::default(),
            requests: RefCell::default(),
        }
    }

    /// A client that authenticates with assertions signed by `key` (`private_key_jwt`).
    pub fn add_jwt_client(&self, id: &str, key: SimKey) {
        self.jwt_clients.borrow_mut().insert(id.to_string(), key);
    }

    /// Whether `token` is one this issuer issued, not revoked and not expired at `now_ms`.
    pub fn accepts(&self, token: &str, now_ms: u64) -> bool {
        !self.revoked.borrow().contains(token)
            && self.issued.borrow().iter().any(|(t, exp)| t == token && now_ms < *exp)
    }

    /// The tokens the token endpoint has issued so far.
    pub fn tokens(&self) -> Vec<String> {
        self.issued.borrow().iter().map(|(t, _)| t.clone()).collect()
    }

    /// The client a `private_key_jwt` assertion authenticates, or why it does not: its type,
    /// its signature by the client's registered key (the stand-in crypto), `iss` = `sub` =
    /// the client, `aud` this issuer or its token endpoint, `exp` ahead, a `jti` never seen.
    fn assertion_client(&self, form: &BTreeMap<String, String>, now_ms: u64) -> Result<String, String> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if form.get("client_assertion_type").map(String::as_str)
            != Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        {
            return Err("client_assertion_type is not jwt-bearer".into());
        }
        let jwt = form.get("client_assertion").cloned().unwrap_or_default();
        let parts: Vec<&str> = jwt.split('.').collect();
        let [h, c, sig] = parts[..] else { return Err("the assertion is not a compact JWS".into()) };
        let decode = |p: &str| b64.decode(p).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        let (Some(header), Some(claims), Ok(sig)) = (decode(h), decode(c), b64.decode(sig)) else {
            return Err("the assertion does not decode".into());
        };
        self.assertions.borrow_mut().push((header.clone(), claims.clone()));
        let client = claims["sub"].as_str().unwrap_or_default().to_string();
        let key = self.jwt_clients.borrow().get(&client).cloned().ok_or("sub is not a registered client")?;
        if header["alg"].as_str() != Some(key.alg.as_str()) {
            return Err(format!("alg {} is not the client's {}", header["alg"], key.alg));
        }
        let name = if key.alg == "ES256" { "ECDSA" } else { "RSASSA-PKCS1-v1_5" };
        let params = json!({ "name": name }).to_string();
        let data = format!("{h}.{c}");
        let verified = crate::sim::crypto::verify(&key.jwk().to_string(), &params, &params, &sig, data.as_bytes());
        if verified != Ok(true) {
            return Err("the signature does not verify with the client's key".into());
        }
        if claims["iss"].as_str() != Some(client.as_str()) {
            return Err("iss is not the client".into());
        }
        let token_endpoint = format!("{}/token", self.issuer);
        if !matches!(claims["aud"].as_str(), Some(a) if a == token_endpoint || a == self.issuer) {
            return Err(format!("aud {} is neither the issuer nor its token endpoint", claims["aud"]));
        }
        let now_s = now_ms / 1000;
        match claims["exp"].as_u64() {
            Some(exp) if exp > now_s && exp <= now_s + 300 => {}
            _ => return Err("exp is not within the next five minutes".into()),
        }
        let jti = claims["jti"].as_str().filter(|j| !j.is_empty()).ok_or("the assertion has no jti")?;
        if !self.jtis.borrow_mut().insert(jti.to_string()) {
            return Err("the assertion's jti was used before".into());
        }
        Ok(client)
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
        let id = if form.contains_key("client_assertion") {
            match self.assertion_client(&form, now_ms) {
                Ok(id) => id,
                Err(why) => {
                    self.refusals.borrow_mut().push(why.clone());
                    return Reply::json(401, &json!({"error": "invalid_client", "error_description": why}));
                }
            }
        } else {
            let (id, secret) = (
                form.get("client_id").cloned().unwrap_or_default(),
                form.get("client_secret").cloned().unwrap_or_default(),
            );
            if self.clients.borrow().get(&id) != Some(&secret) || id.is_empty() {
                self.refusals.borrow_mut().push("unknown client or wrong secret".into());
                return Reply::json(401, &json!({"error": "invalid_client"}));
            }
            id
        };
        let ttl = self.expires_in.get();
        // Unique per request (a `jti`), so a token issued again at the same second differs.
        let n = self.issued.borrow().len();
        let iat = now_ms / 1000;
        let token = self.mint(&json!({"iss": self.issuer, "sub": id, "aud": self.audience, "iat": iat,
            "exp": iat + ttl, "scope": "mcp", "jti": format!("t{n}")}));
        self.issued.borrow_mut().push((token.clone(), now_ms + ttl * 1000));
        Reply::json(200, &json!({"access_token": token, "token_type": "Bearer", "expires_in": ttl}))
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
