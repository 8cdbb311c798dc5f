//! Who is calling an MCP server, decided without IO: a server's client authentication mode,
//! its client keys (known by SHA-256 only), a request's `Authorization` header checked against
//! them, and the console bodies that set the mode and name a new key.
//!
//! Mode `none` (the default) is the server code alone. Mode `key` also wants
//! `Authorization: Bearer fgk_…`: a key drawn from the CSPRNG, shown once, stored as its
//! SHA-256; its name (chosen by the administrator) is the caller's identity, sent to backends
//! as the `user`.

use serde::Serialize;
use serde_json::Value;

use super::admin::bearer_token;
use super::error::{ApiError, Errors, NameRule};
use super::ids::{mint_secret, same_length_eq, sha256_hex, FillBytes, MintedSecret};
use super::oauth_resource::{validate_settings, OAuthSettings};
use super::quote::plain_or_quoted;

/// What every client key starts with, so a leaked one is recognizable (secret scanners, logs).
pub const KEY_PREFIX: &str = "fgk_";
/// Random `[A-Za-z0-9]` characters after the prefix: about 190 bits.
pub const KEY_SECRET_CHARS: usize = 32;
/// The protection space named in the MCP endpoint's `WWW-Authenticate` challenges.
pub const REALM: &str = "flowgate";
pub const MAX_KEY_NAME_CHARS: usize = 64;
/// Keys one server may have: every request of a `key` server compares against all of them,
/// and they travel in the server's cached definition.
pub const MAX_KEYS_PER_SERVER: usize = 100;

/// How a server's clients authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// The server code in the URL is the only credential.
    #[default]
    None,
    /// A client key (`Authorization: Bearer fgk_…`) as well as the code.
    Key,
    /// An OAuth access token (a JWT) from the server's issuer as well as the code
    /// (`pure::oauth_resource`).
    #[serde(rename = "oauth")]
    OAuth,
}

impl crate::pure::named::Named for AuthMode {
    const ALL: &'static [Self] = &[AuthMode::None, AuthMode::Key, AuthMode::OAuth];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(AuthMode);

impl AuthMode {
    pub fn parse(s: &str) -> Option<AuthMode> {
        <AuthMode as crate::pure::named::Named>::from_name(s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Key => "key",
            AuthMode::OAuth => "oauth",
        }
    }
}

/// A client key as the MCP endpoint knows it: its id, its name and the SHA-256 (hex) of the
/// key. Never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientKey {
    pub id: String,
    pub name: String,
    pub hash: String,
}

impl crate::pure::fields::FromFields for ClientKey {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(ClientKey { id: f.text("id")?, name: f.text("name")?, hash: f.text("hash")? })
    }
}
crate::pure::fields::deserialize_by_fields!(ClientKey);

/// A server's client authentication, as its cached definition carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientAuth {
    pub mode: AuthMode,
    #[serde(default)]
    pub keys: Vec<ClientKey>,
    /// The issuer settings of an `oauth` server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthSettings>,
}

impl crate::pure::fields::FromFields for ClientAuth {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(ClientAuth { mode: f.named("mode")?, keys: f.list("keys")?, oauth: f.opt_object("oauth")? })
    }
}
crate::pure::fields::deserialize_by_fields!(ClientAuth);

/// The caller a client key identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    pub key_id: &'a str,
    /// The key's name: the caller's identity, the `user` backends get.
    pub name: &'a str,
}

/// Why a request to a `key` server is refused (HTTP 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token: no `Authorization` header, or one of another scheme (`header_sent`).
    Missing { header_sent: bool },
    /// A bearer token that is no key of this server: never one, or revoked.
    Invalid,
}

/// Decides a request: `header` is its `Authorization` header. `Ok(None)` for a server without
/// client authentication (the header is not looked at), `Ok(Some(caller))` for a key of the
/// server. (An `oauth` server's tokens are checked by `oauth_resource`; no key matches them.) The token's SHA-256 is compared with every key's in time that does not depend on
/// which one (if any) matches.
pub fn authenticate<'a>(auth: &'a ClientAuth, header: Option<&str>) -> Result<Option<Caller<'a>>, Refusal> {
    if auth.mode == AuthMode::None {
        return Ok(None);
    }
    let header_sent = header.is_some_and(|h| !h.trim().is_empty());
    let Some(token) = header.and_then(bearer_token) else {
        return Err(Refusal::Missing { header_sent });
    };
    if !is_key_shape(token) {
        return Err(Refusal::Invalid);
    }
    let digest = sha256_hex(token);
    let mut found = None;
    for key in &auth.keys {
        let matches = same_length_eq(key.hash.as_bytes(), digest.as_bytes());
        found = found.or(matches.then_some(key));
    }
    found.map(|k| Some(Caller { key_id: &k.id, name: &k.name })).ok_or(Refusal::Invalid)
}

impl Refusal {
    pub const STATUS: u16 = 401;

    /// What the client is told: what is wrong and what to do about it. Nothing about the keys.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Missing { header_sent: false } => {
                "Unauthorized: this MCP server requires a client key; send it as `Authorization: Bearer fgk_…` \
                 (the server's administrator creates keys in the console)"
            }
            Refusal::Missing { header_sent: true } => {
                "Unauthorized: the Authorization header is not a bearer token; send the client key as \
                 `Authorization: Bearer fgk_…`"
            }
            Refusal::Invalid => {
                "Unauthorized: the client key is not valid for this MCP server (it may have been revoked); \
                 ask the server's administrator for a key"
            }
        }
    }

    /// The `WWW-Authenticate` value (RFC 6750 §3): the realm, and `invalid_token` when a bearer
    /// token was sent and refused.
    pub fn challenge(self) -> String {
        match self {
            Refusal::Missing { .. } => format!("Bearer realm=\"{REALM}\""),
            Refusal::Invalid => format!("Bearer realm=\"{REALM}\", error=\"invalid_token\""),
        }
    }
}

/// Whether `s` has the shape of a client key; anything else cannot match and is refused early.
pub fn is_key_shape(s: &str) -> bool {
    s.strip_prefix(KEY_PREFIX)
        .is_some_and(|rest| rest.len() == KEY_SECRET_CHARS && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A key drawn from `fill` (see [`mint_secret`]).
pub fn new_key_from(fill: &mut FillBytes<'_>) -> Result<MintedSecret, crate::pure::random::Unavailable> {
    mint_secret(fill, KEY_PREFIX, KEY_SECRET_CHARS)
}

/// A key from the platform CSPRNG.
pub fn new_key() -> Result<MintedSecret, crate::pure::random::Unavailable> {
    new_key_from(&mut crate::pure::random::fill)
}

const MODES: &str = "\"none\" (the server code alone), \"key\" (a client key as well) or \"oauth\" (an OAuth \
                     access token as well)";

/// The body of `PUT /servers/{id}/auth`: `{"mode": "none" | "key"}` or
/// `{"mode": "oauth", "oauth": {"issuer", "audience"?, "scopes"?, "jwks_uri"?}}`.
pub fn validate_auth_body(body: &Value) -> Result<(AuthMode, Option<OAuthSettings>), ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request(
            "the body must be a JSON object: {\"mode\": \"none\" | \"key\" | \"oauth\", \"oauth\"?: {...}}",
        ));
    };
    let mut errs = Errors::default();
    for k in obj.keys().filter(|k| !["mode", "oauth"].contains(&k.as_str())) {
        errs.add(plain_or_quoted(k), "is not an auth field (known: mode, oauth)");
    }
    let mode = errs.choice(obj.get("mode"), "mode", "mode", MODES, AuthMode::parse);
    let oauth = match mode {
        Some(AuthMode::OAuth) => validate_settings(obj.get("oauth"), &mut errs),
        _ => {
            if obj.get("oauth").is_some_and(|v| !v.is_null()) {
                errs.add("oauth", "is only for mode \"oauth\"");
            }
            None
        }
    };
    errs.into_result(()).map(|()| (mode.unwrap_or_default(), oauth))
}

/// The body of `POST /servers/{id}/keys`: `{"name": "alice-laptop"}`; the name as stored.
pub fn validate_key_body(body: &Value) -> Result<String, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object: {\"name\": \"<who holds the key>\"}"));
    };
    let mut errs = Errors::default();
    for k in obj.keys().filter(|k| k.as_str() != "name") {
        errs.add(plain_or_quoted(k), "is not a key field (known: name)");
    }
    let name = errs.credential_name(obj.get("name"), "name", &KEY_NAME_RULE);
    errs.into_result(()).map(|()| name.unwrap_or_default())
}

/// A key's name is sent to backends as the caller's user id, for HTTP tools in a header.
const KEY_NAME_RULE: NameRule = NameRule {
    max_chars: MAX_KEY_NAME_CHARS,
    holds: "the key",
    example: "alice-laptop",
    why_ascii: "it is sent to backends as the caller's user id, for HTTP tools in a header",
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn auth_with(keys: &[(&str, &str, &str)]) -> ClientAuth {
        ClientAuth {
            mode: AuthMode::Key,
            keys: keys
                .iter()
                .map(|(id, name, key)| ClientKey { id: id.to_string(), name: name.to_string(), hash: sha256_hex(key) })
                .collect(),
            oauth: None,
        }
    }

    const ALICE: &str = "fgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const BOB: &str = "fgk_0123456789abcdefghijABCDEFGHIJKL";

    #[test]
    fn keys_have_the_prefix_32_base62_characters_and_differ() {
        let a = new_key().unwrap();
        let b = new_key().unwrap();
        assert_ne!(a.secret, b.secret);
        for k in [&a, &b] {
            assert!(is_key_shape(&k.secret), "{}", k.secret);
            assert_eq!(k.secret.len(), 4 + 32);
            assert_eq!(k.hash, sha256_hex(&k.secret));
            assert_eq!(k.hint, &k.secret[32..]);
            assert!(!k.hash.contains(&k.secret[4..]));
        }
    }

    #[test]
    fn keys_come_from_the_unbiased_sampler() {
        // Bytes 248..=255 are rejected; 0.. map to "A"...
        let k = new_key_from(&mut crate::pure::ids::counting_fill(248)).unwrap();
        assert_eq!(&k.secret[..12], "fgk_ABCDEFGH", "the 8 rejected bytes were skipped");
        assert_eq!(k.hint, &k.secret[k.secret.len() - 4..]);
    }

    #[test]
    fn shapes() {
        assert!(is_key_shape(ALICE) && is_key_shape(BOB));
        for bad in [
            "",
            "fgk_",
            "fgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",   // 31
            "fgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", // 33
            "FGK_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "fgk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "fgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA!",
            "fgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAé",
        ] {
            assert!(!is_key_shape(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_server_without_client_auth_ignores_the_header() {
        let none = ClientAuth { mode: AuthMode::None, keys: auth_with(&[("k1", "alice", ALICE)]).keys, oauth: None };
        assert_eq!(authenticate(&none, None), Ok(None));
        assert_eq!(authenticate(&none, Some("Bearer nonsense")), Ok(None));
        assert_eq!(authenticate(&none, Some(&format!("Bearer {ALICE}"))), Ok(None));
        assert_eq!(authenticate(&ClientAuth::default(), Some("Basic eDp5")), Ok(None));
    }

    #[test]
    fn a_key_server_finds_the_caller() {
        let auth = auth_with(&[("k1", "alice", ALICE), ("k2", "bob", BOB)]);
        for h in [
            format!("Bearer {ALICE}"),
            format!("bearer {ALICE}"),
            format!("BEARER   {ALICE} "),
            format!("\tBeArEr\t{ALICE}"),
        ] {
            assert_eq!(authenticate(&auth, Some(&h)), Ok(Some(Caller { key_id: "k1", name: "alice" })), "{h:?}");
        }
        assert_eq!(authenticate(&auth, Some(&format!("Bearer {BOB}"))), Ok(Some(Caller { key_id: "k2", name: "bob" })));
    }

    #[test]
    fn a_key_server_refuses() {
        let auth = auth_with(&[("k1", "alice", ALICE)]);
        assert_eq!(authenticate(&auth, None), Err(Refusal::Missing { header_sent: false }));
        assert_eq!(authenticate(&auth, Some("  ")), Err(Refusal::Missing { header_sent: false }));
        assert_eq!(authenticate(&auth, Some("Basic eDp5")), Err(Refusal::Missing { header_sent: true }));
        assert_eq!(authenticate(&auth, Some("Bearer")), Err(Refusal::Missing { header_sent: true }));
        assert_eq!(authenticate(&auth, Some(&format!("Bearer{ALICE}"))), Err(Refusal::Missing { header_sent: true }));
        // A key of the right shape that is not one of the server's (another server's, revoked).
        assert_eq!(authenticate(&auth, Some(&format!("Bearer {BOB}"))), Err(Refusal::Invalid));
        // Not a key at all; the key's hash; the key with something after it.
        assert_eq!(authenticate(&auth, Some("Bearer nope")), Err(Refusal::Invalid));
        assert_eq!(authenticate(&auth, Some(&format!("Bearer {}", sha256_hex(ALICE)))), Err(Refusal::Invalid));
        assert_eq!(authenticate(&auth, Some(&format!("Bearer {ALICE}x"))), Err(Refusal::Invalid));
        assert_eq!(authenticate(&auth, Some(&format!("Bearer {ALICE} {ALICE}"))), Err(Refusal::Invalid));
        // A key server with no keys refuses everyone.
        let empty = ClientAuth { mode: AuthMode::Key, keys: Vec::new(), oauth: None };
        assert_eq!(authenticate(&empty, Some(&format!("Bearer {ALICE}"))), Err(Refusal::Invalid));
    }

    #[test]
    fn refusals_say_what_to_do_and_challenge() {
        let missing = Refusal::Missing { header_sent: false };
        assert_eq!(missing.challenge(), "Bearer realm=\"flowgate\"");
        assert!(missing.message().contains("Authorization: Bearer fgk_"), "{}", missing.message());
        let other_scheme = Refusal::Missing { header_sent: true };
        assert_eq!(other_scheme.challenge(), "Bearer realm=\"flowgate\"");
        assert!(other_scheme.message().contains("not a bearer token"));
        assert_eq!(Refusal::Invalid.challenge(), "Bearer realm=\"flowgate\", error=\"invalid_token\"");
        assert!(Refusal::Invalid.message().contains("revoked"));
        assert_eq!(Refusal::STATUS, 401);
    }

    #[test]
    fn the_auth_body() {
        assert_eq!(validate_auth_body(&json!({"mode": "key"})), Ok((AuthMode::Key, None)));
        assert_eq!(validate_auth_body(&json!({"mode": "none"})), Ok((AuthMode::None, None)));
        let (mode, oauth) =
            validate_auth_body(&json!({"mode": "oauth", "oauth": {"issuer": "https://auth.example.com"}})).unwrap();
        assert_eq!(mode, AuthMode::OAuth);
        assert_eq!(oauth.map(|o| o.issuer).as_deref(), Some("https://auth.example.com"));
        let fields = |v: Value| {
            let e = validate_auth_body(&v).unwrap_err();
            assert_eq!(e.status, 400);
            e.errors.into_iter().map(|f| (f.field, f.message)).collect::<Vec<_>>()
        };
        let e = fields(json!({"mode": "ouath"}));
        assert_eq!(e[0].0, "mode");
        assert!(e[0].1.contains("\"ouath\" is not a mode"), "{}", e[0].1);
        let e = fields(json!({"mode": "oauth"}));
        assert_eq!(e[0].0, "oauth");
        assert!(e[0].1.starts_with("is required with mode \"oauth\""), "{}", e[0].1);
        assert_eq!(
            fields(json!({"mode": "oauth", "oauth": {"issuer": "http://auth.example.com"}}))[0].0,
            "oauth.issuer"
        );
        assert_eq!(fields(json!({"mode": "key", "oauth": {"issuer": "https://a.example"}}))[0].0, "oauth");
        assert!(fields(json!({}))[0].1.starts_with("is required"));
        assert!(fields(json!({"mode": 1}))[0].1.contains("got a number"));
        assert_eq!(fields(json!({"mode": "key", "keys": []}))[0].0, "keys");
        assert_eq!(validate_auth_body(&json!("key")).unwrap_err().code, "bad_request");
    }

    #[test]
    fn the_key_body() {
        assert_eq!(validate_key_body(&json!({"name": "alice-laptop"})).as_deref(), Ok("alice-laptop"));
        assert_eq!(validate_key_body(&json!({"name": "CI runner #2 (eu)"})).as_deref(), Ok("CI runner #2 (eu)"));
        let n64 = "x".repeat(64);
        assert_eq!(validate_key_body(&json!({ "name": n64 })).as_deref(), Ok(n64.as_str()));
        let problem = |v: Value| {
            let e = validate_key_body(&v).unwrap_err();
            assert_eq!((e.status, e.code), (400, "validation_failed"));
            assert_eq!(e.errors[0].field, "name", "{:?}", e.errors);
            e.errors[0].message.clone()
        };
        assert!(problem(json!({})).starts_with("is required"));
        assert!(problem(json!({"name": null})).starts_with("is required"));
        assert!(problem(json!({"name": ""})).starts_with("must not be empty"));
        assert!(problem(json!({"name": "   "})).starts_with("must not be empty"));
        assert_eq!(problem(json!({"name": "x".repeat(65)})), "must be at most 64 characters (got 65)");
        assert!(problem(json!({"name": "alice\nbob"})).starts_with("must be printable ASCII"));
        assert!(problem(json!({"name": "José"})).starts_with("must be printable ASCII"));
        assert!(problem(json!({"name": " alice"})).contains("begin or end with a space"));
        assert!(problem(json!({"name": 7})).contains("got a number"));
        let e = validate_key_body(&json!({"name": "a", "key": "fgk_x"})).unwrap_err();
        assert_eq!(e.errors[0].field, "key");
    }
}
