//! OAuth for upstream MCP servers (`backend.oauth`): the configuration, the token request's form
//! (client_credentials or refresh_token grant) and client authentication, reading the token
//! answer, and when to refresh. Finding the token endpoint from an `issuer` is `discovery`'s.

use serde::Serialize;
use serde_json::Value;

use crate::pure::backend::credentials::is_secret_ref;
use crate::pure::url::check_backend_url;

use super::client_assertion::{self, Alg};
use super::discovery::AuthMethod;
use super::error::quote;
use super::headers::header_value_problem;
use crate::pure::http_field::is_header_name;

/// An access token as Flowgate keeps it (in memory or storage) between calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OAuthToken {
    pub access_token: String,
    pub token_type: String,
    pub expires_at_ms: u64,
    /// A rotated refresh token, kept so the next refresh uses it.
    pub refresh_token: Option<String>,
}

impl crate::pure::fields::FromFields for OAuthToken {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(OAuthToken {
            access_token: f.text("access_token")?,
            token_type: f.text("token_type")?,
            expires_at_ms: f.uint("expires_at_ms")?,
            refresh_token: f.opt_text("refresh_token")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(OAuthToken);

/// `backend.oauth`: the client_credentials and refresh_token grants, with secrets resolved.
#[derive(Clone, PartialEq)]
pub struct OAuthConfig {
    /// The token endpoint, when the admin names it; else `issuer` is discovered.
    pub token_url: Option<String>,
    /// The authorization server whose metadata (RFC 8414) gives the token endpoint; the only
    /// one the client secret is sent to.
    pub issuer: Option<String>,
    /// Client authentication at the token endpoint; absent: chosen from the server's metadata
    /// (client_secret_post with a configured token_url, as before).
    pub auth_method: Option<AuthMethod>,
    pub grant_type: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// `private_key_jwt`: the client's private key (PKCS#8 PEM), read by
    /// `client_assertion::read_private_key` when it signs.
    pub private_key: Option<String>,
    /// The assertion's algorithm; absent, the key's kind chooses.
    pub signing_alg: Option<Alg>,
    /// The assertion header's `kid`, for a server that holds several keys of the client.
    pub key_id: Option<String>,
    pub refresh_token: Option<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
    /// Refresh this long before expiry, so a token does not expire in flight.
    pub refresh_skew_seconds: u64,
    /// Lifetime assumed when the token response has no `expires_in`.
    pub default_expires_in: u64,
}

/// Secrets stay out of debug output and logs.
impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |s: &Option<String>| s.as_ref().map(|_| "***");
        f.debug_struct("OAuthConfig")
            .field("token_url", &self.token_url)
            .field("issuer", &self.issuer)
            .field("auth_method", &self.auth_method)
            .field("grant_type", &self.grant_type)
            .field("client_id", &self.client_id)
            .field("client_secret", &mask(&self.client_secret))
            .field("private_key", &mask(&self.private_key))
            .field("signing_alg", &self.signing_alg)
            .field("key_id", &self.key_id)
            .field("refresh_token", &mask(&self.refresh_token))
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("refresh_skew_seconds", &self.refresh_skew_seconds)
            .field("default_expires_in", &self.default_expires_in)
            .finish()
    }
}

/// Refresh a minute early: enough for a call to start before its token expires.
pub const DEFAULT_REFRESH_SKEW_SECONDS: u64 = 60;
/// An hour, the common lifetime, for token endpoints that do not say.
pub const DEFAULT_EXPIRES_IN_SECONDS: u64 = 3600;

impl OAuthConfig {
    /// Reads `backend.oauth`. `$NAME` in client_secret / private_key / refresh_token is passed to `resolve`
    /// (which answers the value, or Err with what could not be found).
    pub fn from_value(v: &Value, resolve: &dyn Fn(&str) -> Result<String, String>) -> Result<Self, String> {
        let obj = v.as_object().ok_or("backend.oauth must be an object")?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("backend.oauth.{key} must be a string")),
            }
        };
        // Every credential goes through `resolve`: a `$NAME` reference, a sealed literal, or
        // a plain one (which resolve hands back as it is).
        let secret = |key: &str| -> Result<Option<String>, String> {
            match text(key)? {
                Some(s) => resolve(&s).map(Some).map_err(|e| {
                    if is_secret_ref(&s) {
                        format!("backend.oauth.{key} refers to {s}, which could not be resolved ({e})")
                    } else {
                        format!("backend.oauth.{key} {e}")
                    }
                }),
                None => Ok(None),
            }
        };
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(n) => n.as_u64().ok_or_else(|| format!("backend.oauth.{key} must be a whole number of seconds")),
            }
        };
        let token_url = text("token_url")?;
        let issuer = text("issuer")?;
        match (&token_url, &issuer) {
            (Some(_), Some(_)) => {
                return Err("backend.oauth takes token_url or issuer, not both: token_url names the token endpoint, \
                            issuer the authorization server to discover it from"
                    .into())
            }
            (None, None) => {
                return Err("backend.oauth needs token_url (the token endpoint) or issuer (the authorization \
                            server, whose metadata gives the token endpoint)"
                    .into())
            }
            _ => {}
        }
        for (key, url) in [("token_url", &token_url), ("issuer", &issuer)] {
            if let Some(u) = url {
                check_backend_url(u).map_err(|why| format!("backend.oauth.{key} {why}"))?;
            }
        }
        let auth_method = match text("token_endpoint_auth_method")? {
            None => None,
            Some(m) => Some(AuthMethod::parse(&m).ok_or(
                "backend.oauth.token_endpoint_auth_method must be client_secret_basic, client_secret_post, \
                 private_key_jwt or none",
            )?),
        };
        let grant_type = text("grant_type")?.unwrap_or_else(|| "client_credentials".into());
        if grant_type != "client_credentials" && grant_type != "refresh_token" {
            return Err("backend.oauth.grant_type must be client_credentials or refresh_token".into());
        }
        let client_id = text("client_id")?.ok_or("backend.oauth.client_id is required")?;
        let client_secret = secret("client_secret")?;
        let private_key = secret("private_key")?;
        let refresh_token = secret("refresh_token")?;
        let signing_alg = match text("signing_alg")? {
            None => None,
            Some(a) => Some(Alg::parse(&a).ok_or("backend.oauth.signing_alg must be ES256 or RS256")?),
        };
        let auth_method = match (auth_method, &private_key, &client_secret) {
            (_, Some(_), Some(_)) => {
                return Err("backend.oauth takes client_secret or private_key, not both: private_key signs a \
                            client assertion (private_key_jwt) instead of sending a secret"
                    .into())
            }
            (None | Some(AuthMethod::PrivateKeyJwt), Some(_), None) => Some(AuthMethod::PrivateKeyJwt),
            (Some(m), Some(_), None) => {
                return Err(format!(
                    "backend.oauth.private_key is for token_endpoint_auth_method private_key_jwt, not {}",
                    m.name()
                ))
            }
            (Some(AuthMethod::PrivateKeyJwt), None, _) => {
                return Err("backend.oauth.private_key is required for token_endpoint_auth_method private_key_jwt \
                            (the client's private key, PKCS#8 PEM, as a $NAME reference or a literal stored sealed)"
                    .into())
            }
            (m, None, _) => m,
        };
        if private_key.is_none() && (signing_alg.is_some() || obj.get("key_id").is_some_and(|v| !v.is_null())) {
            return Err("backend.oauth.signing_alg and key_id go with private_key (private_key_jwt)".into());
        }
        if grant_type == "client_credentials" && client_secret.is_none() && private_key.is_none() {
            return Err("backend.oauth.client_secret (or private_key, for private_key_jwt) is required for the \
                        client_credentials grant"
                .into());
        }
        if grant_type == "refresh_token" && refresh_token.is_none() {
            return Err("backend.oauth.refresh_token is required for the refresh_token grant".into());
        }
        let default_expires_in = number("default_expires_in", DEFAULT_EXPIRES_IN_SECONDS)?;
        if default_expires_in == 0 {
            return Err("backend.oauth.default_expires_in must be at least 1".into());
        }
        Ok(OAuthConfig {
            token_url,
            issuer,
            auth_method,
            grant_type,
            client_id,
            client_secret,
            private_key,
            signing_alg,
            key_id: text("key_id")?,
            refresh_token,
            scope: text("scope")?,
            audience: text("audience")?,
            refresh_skew_seconds: number("refresh_skew_seconds", DEFAULT_REFRESH_SKEW_SECONDS)?,
            default_expires_in,
        })
    }
}

/// Where and how the token is asked for: the configured token_url, or what discovery found.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenTarget {
    pub token_url: String,
    pub auth_method: AuthMethod,
    /// RFC 8707 `resource`: the protected-resource metadata's identifier (discovery only).
    pub resource: Option<String>,
    /// The upstream's `scopes_supported`, asked for when nothing else names a scope.
    pub scopes_supported: Option<Vec<String>>,
}

impl TokenTarget {
    /// A configured token_url: client_secret_post unless configured otherwise, no `resource`.
    pub fn configured(cfg: &OAuthConfig) -> Option<TokenTarget> {
        let default = if cfg.client_secret.is_some() { AuthMethod::Post } else { AuthMethod::None };
        Some(TokenTarget {
            token_url: cfg.token_url.clone()?,
            auth_method: cfg.auth_method.unwrap_or(default),
            resource: None,
            scopes_supported: None,
        })
    }
}

/// The `Authorization` header of the token request, for client_secret_basic.
pub fn token_request_auth(cfg: &OAuthConfig, target: &TokenTarget) -> Option<(String, String)> {
    match (target.auth_method, &cfg.client_secret) {
        (AuthMethod::Basic, Some(s)) => Some(basic_authorization(&cfg.client_id, s)),
        _ => None,
    }
}

/// The form fields of the token request: the refresh_token grant when a refresh token is known
/// (a rotated one from `current` first, else the configured one), else client_credentials.
/// After a failed refresh under client_credentials, call again with `current: None`. The client
/// id and secret are in the form unless they go in a Basic header ([`token_request_auth`]).
pub fn token_form(
    cfg: &OAuthConfig,
    target: &TokenTarget,
    scope: Option<&str>,
    current: Option<&OAuthToken>,
) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: &str| f.push((k.to_string(), v.to_string()));
    let refresh = current.and_then(|t| t.refresh_token.as_deref()).or(cfg.refresh_token.as_deref());
    match refresh {
        Some(rt) => {
            push("grant_type", "refresh_token");
            push("refresh_token", rt);
        }
        None => push("grant_type", "client_credentials"),
    }
    if target.auth_method != AuthMethod::Basic || cfg.client_secret.is_none() {
        push("client_id", &cfg.client_id);
    }
    if let (AuthMethod::Post, Some(s)) = (target.auth_method, &cfg.client_secret) {
        push("client_secret", s);
    }
    if let Some(s) = scope {
        push("scope", s);
    }
    if let Some(r) = &target.resource {
        push("resource", r);
    }
    if refresh.is_none() {
        if let Some(a) = &cfg.audience {
            push("audience", a);
        }
    }
    f
}

/// What an admin checks when the token endpoint refuses a client assertion (`private_key_jwt`),
/// appended to the refusal.
pub fn assertion_refusal_hint(cfg: &OAuthConfig, token_url: &str) -> String {
    let alg = cfg
        .private_key
        .as_deref()
        .and_then(|k| client_assertion::read_private_key(k, cfg.signing_alg).ok())
        .map(|k| k.alg);
    format!(
        "; it did not accept the client assertion: check that the authorization server holds the public half of \
         backend.oauth.private_key for client '{}'{}, that it takes {} assertions with aud '{}', and that \
         Flowgate's clock is right",
        cfg.client_id,
        cfg.key_id.as_deref().map(|k| format!(" under key id '{k}'")).unwrap_or_default(),
        alg.or(cfg.signing_alg).map(client_assertion::alg_name).unwrap_or("ES256 or RS256"),
        client_assertion::audience(cfg.issuer.as_deref(), token_url)
    )
}

/// Reads a token response. `expires_in` may be missing (then `default_expires_in`), a number or
/// a numeric string. A response without `refresh_token` leaves it `None`: the caller keeps the
/// one it had. Token values that could not travel in a header are refused, unquoted.
pub fn parse_token(v: &Value, now_ms: u64, default_expires_in: u64) -> Result<OAuthToken, String> {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        let desc = v.get("error_description").and_then(Value::as_str).map(|d| format!(": {}", quote(d)));
        return Err(format!("the token endpoint refused: {}{}", quote(e), desc.unwrap_or_default()));
    }
    let access_token = match v.get("access_token").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => t.to_string(),
        _ => return Err("the token endpoint's answer has no access_token".into()),
    };
    if let Some(why) = header_value_problem(&access_token) {
        return Err(format!("the access token from the token endpoint {why}, so it cannot be sent"));
    }
    let token_type = match v.get("token_type").and_then(Value::as_str) {
        None | Some("") => "Bearer".to_string(),
        Some(t) if t.eq_ignore_ascii_case("bearer") => "Bearer".to_string(),
        Some(t) if is_header_name(t) => t.to_string(),
        Some(_) => return Err("the token endpoint's token_type is not a valid auth scheme".into()),
    };
    let expires_in = match v.get("expires_in") {
        None | Some(Value::Null) => default_expires_in,
        Some(Value::Number(n)) => n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)).unwrap_or(0),
        Some(Value::String(s)) => {
            s.trim().parse::<u64>().map_err(|_| "the token endpoint's expires_in is not a number")?
        }
        Some(_) => return Err("the token endpoint's expires_in is not a number".into()),
    };
    let refresh_token = v.get("refresh_token").and_then(Value::as_str).filter(|r| !r.is_empty()).map(String::from);
    Ok(OAuthToken {
        access_token,
        token_type,
        expires_at_ms: now_ms.saturating_add(expires_in.saturating_mul(1000)),
        refresh_token,
    })
}

/// Refresh when `expires_at <= now + skew`, so no request leaves with a token about to expire.
pub fn needs_refresh(token: &OAuthToken, now_ms: u64, skew_s: u64) -> bool {
    token.expires_at_ms <= now_ms.saturating_add(skew_s.saturating_mul(1000))
}

/// The `Authorization` header the token gives (the oauth layer of [`merge_headers`](super::headers::merge_headers)).
pub fn authorization_header(token: &OAuthToken) -> (String, String) {
    ("Authorization".to_string(), format!("{} {}", token.token_type, token.access_token))
}

/// `Authorization: Basic ...` for the client id and secret, each form-encoded first (RFC 6749
/// §2.3.1).
pub fn basic_authorization(client_id: &str, secret: &str) -> (String, String) {
    let enc = |s: &str| form_urlencode(&[(s.to_string(), String::new())]).trim_end_matches('=').to_string();
    let pair = format!("{}:{}", enc(client_id), enc(secret));
    ("Authorization".into(), format!("Basic {}", crate::pure::base64::encode(pair)))
}

/// `application/x-www-form-urlencoded`, as the token endpoint expects (WHATWG serializer).
pub fn form_urlencode(fields: &[(String, String)]) -> String {
    fn encode(out: &mut String, s: &str) {
        for b in s.bytes() {
            match b {
                b'*' | b'-' | b'.' | b'_' | b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' => out.push(b as char),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
    }
    let mut out = String::new();
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(&mut out, k);
        out.push('=');
        encode(&mut out, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::pairs;
    use super::*;

    fn resolve(s: &str) -> Result<String, String> {
        match s {
            "$CLIENT_SECRET" => Ok("s3cret".into()),
            "$RT" => Ok("rt-from-env".into()),
            // Like the shell's resolver: a plain literal comes back as it is.
            other if !other.starts_with('$') => Ok(other.to_string()),
            other => Err(other[1..].to_string()),
        }
    }

    #[test]
    fn oauth_config_reads_and_resolves() {
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://auth.example/token", "client_id": "cid", "client_secret": "$CLIENT_SECRET",
                    "scope": "read write", "audience": "https://api.example"}),
            &resolve,
        )
        .unwrap();
        assert_eq!(cfg.grant_type, "client_credentials");
        assert_eq!(cfg.client_secret.as_deref(), Some("s3cret"));
        assert_eq!((cfg.refresh_skew_seconds, cfg.default_expires_in), (60, 3600));
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("s3cret") && dbg.contains("***"), "{dbg}");

        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://auth.example/token", "grant_type": "refresh_token", "client_id": "cid",
                    "refresh_token": "$RT", "refresh_skew_seconds": 30, "default_expires_in": 600}),
            &resolve,
        )
        .unwrap();
        assert_eq!(cfg.refresh_token.as_deref(), Some("rt-from-env"));
        assert_eq!(cfg.client_secret, None);
        assert_eq!((cfg.refresh_skew_seconds, cfg.default_expires_in), (30, 600));

        let literal = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "sealed:literal"}),
            &|s: &str| -> Result<String, String> { Ok(s.replace("sealed:", "")) },
        )
        .unwrap();
        assert_eq!(literal.client_secret.as_deref(), Some("literal"));

        for (v, needle) in [
            (json!("x"), "must be an object"),
            (json!({"client_id": "c", "client_secret": "s"}), "needs token_url"),
            (
                json!({"token_url": "https://a/t", "issuer": "https://a", "client_id": "c", "client_secret": "s"}),
                "not both",
            ),
            (json!({"issuer": "a.example", "client_id": "c", "client_secret": "s"}), "issuer must be"),
            (
                json!({"issuer": "https://a", "client_id": "c", "client_secret": "s", "token_endpoint_auth_method": "x"}),
                "client_secret_basic",
            ),
            (json!({"token_url": "ftp://x", "client_id": "c", "client_secret": "s"}), "token_url"),
            (json!({"token_url": "https://a/t", "client_secret": "s"}), "client_id is required"),
            (json!({"token_url": "https://a/t", "client_id": "c"}), "client_secret (or private_key"),
            (
                json!({"issuer": "https://a", "client_id": "c", "client_secret": "s", "private_key": "k"}),
                "client_secret or private_key, not both",
            ),
            (
                json!({"issuer": "https://a", "client_id": "c", "client_secret": "s",
                       "token_endpoint_auth_method": "private_key_jwt"}),
                "private_key is required for token_endpoint_auth_method private_key_jwt",
            ),
            (
                json!({"issuer": "https://a", "client_id": "c", "private_key": "k",
                       "token_endpoint_auth_method": "client_secret_basic"}),
                "private_key_jwt, not client_secret_basic",
            ),
            (
                json!({"issuer": "https://a", "client_id": "c", "private_key": "k", "signing_alg": "HS256"}),
                "signing_alg must be ES256 or RS256",
            ),
            (
                json!({"issuer": "https://a", "client_id": "c", "client_secret": "s", "key_id": "k1"}),
                "go with private_key",
            ),
            (
                json!({"issuer": "https://a", "client_id": "c", "private_key": "$MISSING"}),
                "private_key refers to $MISSING",
            ),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "grant_type": "refresh_token"}),
                "refresh_token is required",
            ),
            (json!({"token_url": "https://a/t", "client_id": "c", "grant_type": "password"}), "grant_type"),
            (json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "$MISSING"}), "$MISSING"),
            (json!({"token_url": "https://a/t", "client_id": "c", "client_secret": 5}), "must be a string"),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "s", "refresh_skew_seconds": -1}),
                "whole number",
            ),
            (
                json!({"token_url": "https://a/t", "client_id": "c", "client_secret": "s", "default_expires_in": 0}),
                "at least 1",
            ),
        ] {
            let err = OAuthConfig::from_value(&v, &resolve).unwrap_err();
            assert!(err.contains(needle), "{v}: {err}");
        }
    }

    #[test]
    fn private_key_jwt_config() {
        let cfg = OAuthConfig::from_value(
            &json!({"issuer": "https://as.example", "client_id": "cid", "private_key": "$CLIENT_SECRET",
                    "signing_alg": "ES256", "key_id": "k1"}),
            &resolve,
        )
        .unwrap();
        assert_eq!(cfg.auth_method, Some(AuthMethod::PrivateKeyJwt), "a private key means private_key_jwt");
        assert_eq!((cfg.private_key.as_deref(), cfg.signing_alg), (Some("s3cret"), Some(Alg::Es256)));
        assert_eq!(cfg.key_id.as_deref(), Some("k1"));
        assert!(!format!("{cfg:?}").contains("s3cret"), "the key stays out of debug output");
        // A configured token_url: private_key_jwt, the client id in the form, no secret anywhere.
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "cid", "private_key": "pem",
                    "token_endpoint_auth_method": "private_key_jwt"}),
            &resolve,
        )
        .unwrap();
        let t = TokenTarget::configured(&cfg).unwrap();
        assert_eq!(t.auth_method, AuthMethod::PrivateKeyJwt);
        let hint = assertion_refusal_hint(&cfg, "https://a/t");
        assert!(hint.contains("client 'cid'") && hint.contains("aud 'https://a/t'"), "{hint}");
        assert!(hint.contains("ES256 or RS256"), "an unreadable key names no algorithm: {hint}");
        assert_eq!(token_request_auth(&cfg, &t), None);
        assert_eq!(
            token_form(&cfg, &t, None, None),
            pairs(&[("grant_type", "client_credentials"), ("client_id", "cid")])
        );
    }

    #[test]
    fn token_forms() {
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "cid", "client_secret": "sec", "scope": "a b", "audience": "aud"}),
            &resolve,
        )
        .unwrap();
        let post = TokenTarget::configured(&cfg).unwrap();
        assert_eq!(post.auth_method, AuthMethod::Post);
        assert_eq!(token_request_auth(&cfg, &post), None);
        assert_eq!(
            token_form(&cfg, &post, cfg.scope.as_deref(), None),
            pairs(&[
                ("grant_type", "client_credentials"),
                ("client_id", "cid"),
                ("client_secret", "sec"),
                ("scope", "a b"),
                ("audience", "aud")
            ])
        );
        // A refresh token handed out with the last token is used next.
        let current = OAuthToken {
            access_token: "at".into(),
            token_type: "Bearer".into(),
            expires_at_ms: 0,
            refresh_token: Some("rotated".into()),
        };
        // Basic: the secret goes in the header, never in the form; resource is sent as found.
        let basic =
            TokenTarget { auth_method: AuthMethod::Basic, resource: Some("https://m/mcp".into()), ..post.clone() };
        assert!(token_request_auth(&cfg, &basic).is_some_and(|(_, v)| v.starts_with("Basic ")));
        assert_eq!(
            token_form(&cfg, &basic, None, None),
            pairs(&[("grant_type", "client_credentials"), ("resource", "https://m/mcp"), ("audience", "aud")])
        );
        assert_eq!(
            token_form(&cfg, &post, cfg.scope.as_deref(), Some(&current)),
            pairs(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", "rotated"),
                ("client_id", "cid"),
                ("client_secret", "sec"),
                ("scope", "a b")
            ])
        );
        let cfg = OAuthConfig::from_value(
            &json!({"token_url": "https://a/t", "client_id": "cid", "grant_type": "refresh_token", "refresh_token": "r0"}),
            &resolve,
        )
        .unwrap();
        let public = TokenTarget::configured(&cfg).unwrap();
        assert_eq!(public.auth_method, AuthMethod::None);
        assert_eq!(
            token_form(&cfg, &public, None, None),
            pairs(&[("grant_type", "refresh_token"), ("refresh_token", "r0"), ("client_id", "cid")])
        );
        let no_rotation = OAuthToken { refresh_token: None, ..current };
        assert_eq!(token_form(&cfg, &public, None, Some(&no_rotation))[1].1, "r0");
    }

    #[test]
    fn token_responses() {
        let now = 1_000_000;
        let t = parse_token(
            &json!({"access_token": "at", "token_type": "bearer", "expires_in": 120, "refresh_token": "rt"}),
            now,
            3600,
        )
        .unwrap();
        assert_eq!(
            t,
            OAuthToken {
                access_token: "at".into(),
                token_type: "Bearer".into(),
                expires_at_ms: now + 120_000,
                refresh_token: Some("rt".into())
            }
        );
        assert_eq!(authorization_header(&t), ("Authorization".to_string(), "Bearer at".to_string()));
        let t = parse_token(&json!({"access_token": "at"}), now, 3600).unwrap();
        assert_eq!((t.token_type.as_str(), t.expires_at_ms, t.refresh_token), ("Bearer", now + 3_600_000, None));
        assert_eq!(
            parse_token(&json!({"access_token": "at", "expires_in": "60"}), now, 3600).unwrap().expires_at_ms,
            now + 60_000
        );
        assert_eq!(
            parse_token(&json!({"access_token": "at", "expires_in": 59.9}), now, 3600).unwrap().expires_at_ms,
            now + 59_000
        );
        assert_eq!(
            parse_token(&json!({"access_token": "at", "token_type": "DPoP"}), now, 1).unwrap().token_type,
            "DPoP"
        );

        let err =
            parse_token(&json!({"error": "invalid_client", "error_description": "bad secret"}), now, 3600).unwrap_err();
        assert!(err.contains("invalid_client: bad secret"), "{err}");
        assert!(parse_token(&json!({}), now, 3600).unwrap_err().contains("no access_token"));
        let err = parse_token(&json!({"access_token": "SECRETVALUE\r\nX: y"}), now, 3600).unwrap_err();
        assert!(err.contains("line break") && !err.contains("SECRETVALUE"), "{err}");
        assert!(parse_token(&json!({"access_token": "at", "expires_in": "soon"}), now, 3600).is_err());
        assert!(parse_token(&json!({"access_token": "at", "token_type": "a b"}), now, 3600).is_err());
    }

    #[test]
    fn refresh_timing() {
        let t = OAuthToken {
            access_token: "a".into(),
            token_type: "Bearer".into(),
            expires_at_ms: 100_000,
            refresh_token: None,
        };
        assert!(!needs_refresh(&t, 39_999, 60));
        assert!(needs_refresh(&t, 40_000, 60), "expires_at == now + skew refreshes");
        assert!(needs_refresh(&t, 100_000, 0));
        assert!(!needs_refresh(&t, 99_999, 0));
        assert!(needs_refresh(&t, 200_000, 60));
        // Huge values saturate instead of overflowing.
        assert!(needs_refresh(&OAuthToken { expires_at_ms: u64::MAX, ..t.clone() }, u64::MAX - 1, u64::MAX));
        assert!(!needs_refresh(&OAuthToken { expires_at_ms: u64::MAX, ..t }, u64::MAX - 100_000, 60));
    }

    #[test]
    fn form_encoding() {
        let f = pairs(&[("grant_type", "client_credentials"), ("scope", "a b"), ("secret", "p&s=1+2/é~*")]);
        assert_eq!(form_urlencode(&f), "grant_type=client_credentials&scope=a+b&secret=p%26s%3D1%2B2%2F%C3%A9%7E*");
        assert_eq!(form_urlencode(&[]), "");
    }

    #[test]
    fn basic_credentials() {
        let (k, v) = basic_authorization("client id", "p:ss");
        assert_eq!(k, "Authorization");
        let raw = crate::pure::base64::decode(v.strip_prefix("Basic ").unwrap()).unwrap();
        assert_eq!(String::from_utf8(raw).unwrap(), "client+id:p%3Ass");
    }
}
