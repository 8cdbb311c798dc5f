//! Flowgate as an OAuth 2.1 resource server (auth mode `oauth`, the MCP authorization spec),
//! decided without IO: a server's issuer settings and their console checks, JWT access tokens
//! taken apart (RS256 and ES256 only), their claims checked against the issuer, the audience
//! (RFC 8707: the server's MCP URL unless configured) and the clock, the issuer's metadata
//! (RFC 8414 / OpenID) and JWKS read, the key a token names chosen, the protected resource
//! metadata (RFC 9728) and the 401/403 challenges that point clients at it.
//!
//! The signature itself is checked by the shell with WebCrypto: the bundle has no RSA or EC code.

use super::base64;
use crate::json;
use serde::Serialize;
use serde_json::{Map, Value};

use super::error::{json_kind, Errors};
use super::quote::{plain_or_quoted, quote_input};

/// Clock skew allowed on `exp` and `nbf`, seconds.
pub const SKEW_SECONDS: i64 = 60;
/// Longest access token looked at: real ones are a few KiB.
pub const MAX_TOKEN_CHARS: usize = 16 * 1024;
/// Required scopes a server may list.
pub const MAX_SCOPES: usize = 32;
/// Keys of one JWKS taken into account.
pub const MAX_JWKS_KEYS: usize = 64;
/// A JWKS is fetched again for an unknown `kid` at most this often, per issuer.
pub const JWKS_REFETCH_MS: u64 = 30_000;
/// A JWKS is fetched again after this long even when every `kid` is known (removed keys go).
pub const JWKS_MAX_AGE_MS: u64 = 3_600_000;
/// Longest `sub` taken as the caller identity (it is sent to backends as the user id).
pub const MAX_SUBJECT_CHARS: usize = 255;

/// A server's authorization server, as the console stores it and the definition carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuthSettings {
    /// The `iss` tokens must carry, exactly; also where the metadata is discovered.
    pub issuer: String,
    /// The `aud` tokens must carry; `None`: the server's MCP URL (RFC 8707).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Scopes every token must grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The JWKS URL; `None`: from the issuer's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
}

impl crate::pure::fields::FromFields for OAuthSettings {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(OAuthSettings {
            issuer: f.text("issuer")?,
            audience: f.opt_text("audience")?,
            scopes: f.texts("scopes")?,
            jwks_uri: f.opt_text("jwks_uri")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(OAuthSettings);

impl OAuthSettings {
    pub fn to_console_json(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "audience": self.audience,
            "scopes": self.scopes,
            "jwks_uri": self.jwks_uri,
        })
    }
}

/// The `oauth` object of `PUT /servers/{id}/auth`, checked; field errors go to `errs` under
/// `oauth.<field>`. URLs must be https; http only for a private host (a local authorization
/// server in development, which the private-backend guard then has to allow).
pub fn validate_settings(v: Option<&Value>, errs: &mut Errors) -> Option<OAuthSettings> {
    let example = "{\"issuer\": \"https://auth.example.com\", \"audience\"?, \"scopes\"?: [...], \"jwks_uri\"?}";
    let obj = match v {
        Some(Value::Object(o)) => o,
        None | Some(Value::Null) => {
            errs.add("oauth", format!("is required with mode \"oauth\": {example}"));
            return None;
        }
        Some(other) => {
            errs.add("oauth", format!("must be an object {example} (got {})", json_kind(other)));
            return None;
        }
    };
    let before = errs.0.len();
    for k in obj.keys().filter(|k| !["issuer", "audience", "scopes", "jwks_uri"].contains(&k.as_str())) {
        errs.add(
            format!("oauth.{}", plain_or_quoted(k)),
            "is not an oauth field (known: issuer, audience, scopes, jwks_uri)",
        );
    }
    let issuer = match obj.get("issuer") {
        Some(Value::String(s)) => {
            if let Some(why) = url_problem(s) {
                errs.add("oauth.issuer", why);
            }
            s.clone()
        }
        _ => {
            errs.add(
                "oauth.issuer",
                "is required: the authorization server's issuer URL, exactly as its tokens' `iss` claim \
                 (e.g. \"https://auth.example.com\")",
            );
            String::new()
        }
    };
    let audience = optional_string(obj, "audience", errs);
    if let Some(a) = &audience {
        if a.is_empty() || a.len() > 2048 || a.chars().any(char::is_control) {
            errs.add("oauth.audience", "must be 1 to 2048 characters without control characters");
        }
    }
    let jwks_uri = optional_string(obj, "jwks_uri", errs);
    if let Some(why) = jwks_uri.as_deref().and_then(url_problem) {
        errs.add("oauth.jwks_uri", why);
    }
    let scopes = match obj.get("scopes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if items.len() > MAX_SCOPES {
                errs.add("oauth.scopes", format!("must list at most {MAX_SCOPES} scopes (got {})", items.len()));
            }
            let mut out: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) if is_scope_token(s) => {
                        if !out.iter().any(|o| o == s) {
                            out.push(s.to_string());
                        }
                    }
                    Some(s) => errs.add(
                        format!("oauth.scopes[{i}]"),
                        format!(
                            "{} is not a scope: printable ASCII without spaces, quotes or backslashes",
                            quote_input(s)
                        ),
                    ),
                    None => {
                        errs.add(format!("oauth.scopes[{i}]"), format!("must be a string (got {})", json_kind(item)))
                    }
                }
            }
            out
        }
        Some(other) => {
            errs.add("oauth.scopes", format!("must be a list of scope strings (got {})", json_kind(other)));
            Vec::new()
        }
    };
    (errs.0.len() == before).then_some(OAuthSettings { issuer, audience, scopes, jwks_uri })
}

fn optional_string(obj: &Map<String, Value>, key: &str, errs: &mut Errors) -> Option<String> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            errs.add(format!("oauth.{key}"), format!("must be a string (got {})", json_kind(other)));
            None
        }
    }
}

/// RFC 6749 §3.3 scope-token characters: printable ASCII but space, `"` and `\`.
fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes().all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// Why an issuer or JWKS URL is refused: it must be an https URL without query or fragment
/// (RFC 8414 §2); http is accepted for private hosts only (development).
fn url_problem(s: &str) -> Option<String> {
    if let Err(why) = super::url::check_backend_url(s) {
        return Some(why.to_string());
    }
    let url = crate::pure::web_url::Url::parse(s).ok()?;
    if url.query().is_some() {
        return Some("must not have a ?query (RFC 8414)".into());
    }
    if url.scheme() != "https" && super::url::private_host_reason(s).is_none() {
        return Some("must be an https:// URL (http:// only for a local authorization server in development)".into());
    }
    None
}

/// Where the issuer's metadata may be, in the order tried: RFC 8414 (the well-known segment
/// inserted before the issuer's path), then OpenID Connect Discovery (appended to it).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let Ok(url) = crate::pure::web_url::Url::parse(issuer) else { return Vec::new() };
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
    ]
}

/// The `jwks_uri` of an issuer's metadata document, which must name that same issuer
/// (RFC 8414 §3.3: otherwise another server's keys could be passed off as this one's).
pub fn jwks_uri_of(metadata: &str, issuer: &str) -> Result<String, String> {
    let doc: Value =
        serde_json::from_str(metadata).map_err(|_| "the issuer's metadata is not a JSON document".to_string())?;
    if doc.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err(format!(
            "the metadata names issuer {} instead of {}",
            doc.get("issuer").and_then(Value::as_str).map_or("none".to_string(), quote_input),
            quote_input(issuer)
        ));
    }
    let uri = doc.get("jwks_uri").and_then(Value::as_str).ok_or("the issuer's metadata has no jwks_uri")?;
    match url_problem(uri) {
        Some(why) => Err(format!("the issuer's jwks_uri {why}")),
        None => Ok(uri.to_string()),
    }
}

/// A signature algorithm Flowgate verifies; every other `alg` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// ECDSA on P-256 with SHA-256; the JWS signature is r || s, as WebCrypto takes it.
    Es256,
}

impl Alg {
    pub fn parse(s: &str) -> Option<Alg> {
        match s {
            "RS256" => Some(Alg::Rs256),
            "ES256" => Some(Alg::Es256),
            _ => None,
        }
    }

    /// WebCrypto's algorithm for `importKey`, as JSON.
    pub fn import_params(self) -> &'static str {
        match self {
            Alg::Rs256 => r#"{"name":"RSASSA-PKCS1-v1_5","hash":"SHA-256"}"#,
            Alg::Es256 => r#"{"name":"ECDSA","namedCurve":"P-256"}"#,
        }
    }

    /// WebCrypto's algorithm for `verify`, as JSON.
    pub fn verify_params(self) -> &'static str {
        match self {
            Alg::Rs256 => r#"{"name":"RSASSA-PKCS1-v1_5"}"#,
            Alg::Es256 => r#"{"name":"ECDSA","hash":"SHA-256"}"#,
        }
    }
}

/// Why a bearer token is refused. All but `InsufficientScope` are 401 `invalid_token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts of JSON, or a claim of the wrong type.
    Malformed(&'static str),
    /// An `alg` other than RS256 and ES256 (`none` and HS256 included).
    Alg,
    /// No key of the issuer's JWKS has the token's `kid` (and kind), also after a refetch.
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    /// `sub` missing, or not usable as the caller identity.
    BadSubject,
    /// 403: the token lacks scopes the server requires (all of them are named).
    InsufficientScope,
}

impl TokenError {
    pub fn status(&self) -> u16 {
        match self {
            TokenError::InsufficientScope => 403,
            _ => 401,
        }
    }

    /// For the client, in the JSON-RPC error and in `error_description`: what is wrong, never
    /// the token's content. No quotes or backslashes (it goes into a quoted-string).
    pub fn description(&self) -> &'static str {
        match self {
            TokenError::Malformed(why) => why,
            TokenError::Alg => "the token is not signed with RS256 or ES256",
            TokenError::UnknownKey => "no key of the issuer's JWKS matches the token's kid",
            TokenError::BadSignature => "the token's signature does not verify",
            TokenError::Expired => "the token has expired",
            TokenError::NotYetValid => "the token is not valid yet (nbf)",
            TokenError::WrongIssuer => "the token was issued by another authorization server",
            TokenError::WrongAudience => "the token's audience is not this MCP server",
            TokenError::BadSubject => {
                "the token has no usable sub claim (1 to 255 printable ASCII characters: it is the caller identity)"
            }
            TokenError::InsufficientScope => "the token lacks a scope this MCP server requires",
        }
    }
}

/// A token taken apart; the signature not checked yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Jwt<'a> {
    pub alg: Alg,
    pub kid: Option<String>,
    pub claims: Value,
    /// `header.payload`: what the signature covers.
    pub signing_input: &'a str,
    pub signature: Vec<u8>,
}

/// Splits a compact JWS and reads its header and claims. The `alg` allow-list is applied here,
/// before any key is looked for: `none`, HS256 (which would take the public key as an HMAC
/// secret) and anything unknown never reach a verifier.
pub fn parse_jwt(token: &str) -> Result<Jwt<'_>, TokenError> {
    const NOT_JWT: TokenError = TokenError::Malformed("the access token is not a JWT (header.payload.signature)");
    if token.len() > MAX_TOKEN_CHARS {
        return Err(TokenError::Malformed("the access token is too long"));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(NOT_JWT);
    };
    let header: Value = decode_json(h).ok_or(NOT_JWT)?;
    let alg = header.get("alg").and_then(Value::as_str).and_then(Alg::parse).ok_or(TokenError::Alg)?;
    if header.get("crit").is_some() {
        return Err(TokenError::Malformed("the token has critical header parameters this server does not know"));
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err(TokenError::Malformed("the token's kid is not a string")),
    };
    let claims = decode_json(p).filter(Value::is_object).ok_or(NOT_JWT)?;
    let signature = base64::decode_url(s).map_err(|_| NOT_JWT)?;
    if signature.is_empty() {
        return Err(NOT_JWT);
    }
    Ok(Jwt { alg, kid, claims, signing_input: &token[..h.len() + 1 + p.len()], signature })
}

fn decode_json(part: &str) -> Option<Value> {
    serde_json::from_str(&String::from_utf8(base64::decode_url(part).ok()?).ok()?).ok()
}

/// What a verified token says: who is calling, and until when this holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub sub: String,
    pub exp: i64,
}

/// Which claim names the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// `sub` (an MCP server's OAuth tokens).
    Sub,
    /// `sub`, else `common_name` when `sub` is empty or absent: the assertion of a Cloudflare
    /// Access service token has an empty `sub` and names the token (its Client ID) there.
    SubOrCommonName,
}

/// Checks the claims of a token whose signature verified: `iss` (exactly the issuer), `aud`
/// (a string or a list holding `audience`), `exp` (required) and `nbf` with [`SKEW_SECONDS`],
/// `sub`, and the required scopes (`scope`, space-separated, or `scp` as a list or string).
pub fn check_claims(
    claims: &Value,
    settings: &OAuthSettings,
    audience: &str,
    now_s: i64,
) -> Result<Verified, TokenError> {
    check_claims_as(claims, settings, audience, now_s, Subject::Sub)
}

/// [`check_claims`], the caller named by the `subject` claim(s).
pub fn check_claims_as(
    claims: &Value,
    settings: &OAuthSettings,
    audience: &str,
    now_s: i64,
    subject: Subject,
) -> Result<Verified, TokenError> {
    if claims.get("iss").and_then(Value::as_str) != Some(settings.issuer.as_str()) {
        return Err(TokenError::WrongIssuer);
    }
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(audience)),
        _ => false,
    };
    if !aud_ok {
        return Err(TokenError::WrongAudience);
    }
    let exp = match claims.get("exp") {
        Some(v) => numeric_date(v).ok_or(TokenError::Malformed("the token's exp is not a number"))?,
        None => return Err(TokenError::Malformed("the token has no exp: access tokens must expire")),
    };
    if now_s > exp.saturating_add(SKEW_SECONDS) {
        return Err(TokenError::Expired);
    }
    if let Some(v) = claims.get("nbf") {
        let nbf = numeric_date(v).ok_or(TokenError::Malformed("the token's nbf is not a number"))?;
        if now_s.saturating_add(SKEW_SECONDS) < nbf {
            return Err(TokenError::NotYetValid);
        }
    }
    let text = |name: &str| claims.get(name).and_then(Value::as_str).unwrap_or_default();
    let sub = match text("sub") {
        "" if subject == Subject::SubOrCommonName => text("common_name"),
        s => s,
    };
    if sub.is_empty() || sub.len() > MAX_SUBJECT_CHARS || !sub.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(TokenError::BadSubject);
    }
    if !missing_scopes(claims, &settings.scopes).is_empty() {
        return Err(TokenError::InsufficientScope);
    }
    Ok(Verified { sub: sub.to_string(), exp: exp.saturating_add(SKEW_SECONDS) })
}

/// A NumericDate (RFC 7519 §2): seconds, possibly fractional.
fn numeric_date(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// The required scopes a token's claims do not grant.
pub fn missing_scopes<'a>(claims: &Value, required: &'a [String]) -> Vec<&'a str> {
    let granted: Vec<&str> = match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s.split(' ').collect(),
        (None, Some(Value::Array(list))) => list.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    required.iter().map(String::as_str).filter(|r| !granted.contains(r)).collect()
}

/// One verification key of a JWKS, as WebCrypto imports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    pub alg: Alg,
    /// The key's public parameters only (`kty`, `n`/`e` or `crv`/`x`/`y`), as JSON: what
    /// `importKey("jwk", …)` gets, free of `use`/`key_ops`/`alg` it might object to.
    pub public_jwk: String,
}

/// The keys of a JWKS document Flowgate can verify with: RSA keys (for RS256) and P-256 EC
/// keys (for ES256); keys for encryption, of other kinds or declaring another `alg` are left
/// out. At most [`MAX_JWKS_KEYS`].
pub fn parse_jwks(text: &str) -> Result<Vec<Jwk>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|_| "the JWKS is not a JSON document".to_string())?;
    let keys = doc.get("keys").and_then(Value::as_array).ok_or("the JWKS has no \"keys\" list")?;
    let s = |k: &Value, name: &str| k.get(name).and_then(Value::as_str).map(str::to_string);
    let mut out = Vec::new();
    for k in keys.iter().take(MAX_JWKS_KEYS) {
        if s(k, "use").is_some_and(|u| u != "sig") {
            continue;
        }
        // Base64url parameters only: then they go into the JSON as they are.
        let b64 = |name: &str| s(k, name).filter(|v| !v.is_empty() && v.bytes().all(is_base64url));
        let (alg, public_jwk) = match (s(k, "kty").as_deref(), s(k, "crv").as_deref()) {
            (Some("RSA"), _) => match (b64("n"), b64("e")) {
                (Some(n), Some(e)) => (Alg::Rs256, format!(r#"{{"kty":"RSA","n":"{n}","e":"{e}"}}"#)),
                _ => continue,
            },
            (Some("EC"), Some("P-256")) => match (b64("x"), b64("y")) {
                (Some(x), Some(y)) => (Alg::Es256, format!(r#"{{"kty":"EC","crv":"P-256","x":"{x}","y":"{y}"}}"#)),
                _ => continue,
            },
            _ => continue,
        };
        if s(k, "alg").is_some_and(|a| Alg::parse(&a) != Some(alg)) {
            continue;
        }
        out.push(Jwk { kid: s(k, "kid"), alg, public_jwk });
    }
    Ok(out)
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The key a token names: same `kid` and a kind that fits its `alg`. A token without `kid`
/// is matched only when the JWKS has exactly one key of its kind.
pub fn select_key<'a>(keys: &'a [Jwk], alg: Alg, kid: Option<&str>) -> Option<&'a Jwk> {
    let mut fitting = keys.iter().filter(|k| k.alg == alg);
    match kid {
        Some(kid) => fitting.find(|k| k.kid.as_deref() == Some(kid)),
        None => {
            let first = fitting.next();
            if fitting.next().is_some() {
                None
            } else {
                first
            }
        }
    }
}

/// Whether a JWKS fetched at `fetched_ms` may be fetched again for an unknown `kid`.
pub fn may_refetch(fetched_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(fetched_ms) >= JWKS_REFETCH_MS
}

/// The server's MCP URL: the resource its tokens are for (and their default audience).
pub fn resource_url(public_base: &str, code: &str) -> String {
    format!("{}/mcp/server/{code}/mcp", public_base.trim_end_matches('/'))
}

/// Where its protected resource metadata is: the well-known path inserted before the
/// resource's path (RFC 9728 §3.1), as the MCP SDKs look for it.
pub fn resource_metadata_url(public_base: &str, code: &str) -> String {
    let base = public_base.trim_end_matches('/');
    match crate::pure::web_url::Url::parse(base) {
        Ok(u) => {
            let prefix = u.path().trim_end_matches('/');
            format!(
                "{}/.well-known/oauth-protected-resource{prefix}/mcp/server/{code}/mcp",
                u.origin().ascii_serialization()
            )
        }
        Err(_) => format!("{base}/.well-known/oauth-protected-resource/mcp/server/{code}/mcp"),
    }
}

/// The RFC 9728 document of a server.
pub fn resource_metadata(resource: &str, settings: &OAuthSettings, name: &str) -> Value {
    json!({
        "resource": resource,
        "authorization_servers": [settings.issuer],
        "scopes_supported": settings.scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": name,
    })
}

/// The `WWW-Authenticate` value of a refusal (RFC 6750 §3, RFC 9728 §5.1): where the metadata
/// is, the scopes to ask for, and the error when a token was sent and refused.
pub fn challenge(metadata_url: &str, settings: &OAuthSettings, error: Option<&TokenError>) -> String {
    let mut out = format!("Bearer resource_metadata=\"{metadata_url}\"");
    if let Some(e) = error {
        let code = if e.status() == 403 { "insufficient_scope" } else { "invalid_token" };
        out.push_str(&format!(", error=\"{code}\", error_description=\"{}\"", e.description()));
    }
    if !settings.scopes.is_empty() {
        out.push_str(&format!(", scope=\"{}\"", settings.scopes.join(" ")));
    }
    out
}

/// The JSON-RPC error message of a refusal: what is wrong and what to do.
pub fn refusal_message(error: Option<&TokenError>, header_sent: bool) -> String {
    match error {
        None if header_sent => "Unauthorized: the Authorization header is not a bearer token; send an OAuth access \
                                token as `Authorization: Bearer <token>`"
            .to_string(),
        None => "Unauthorized: this MCP server requires an OAuth access token (`Authorization: Bearer <token>`); \
                 the WWW-Authenticate header's resource_metadata names the authorization server to get one from"
            .to_string(),
        Some(e @ TokenError::InsufficientScope) => {
            format!("Forbidden: {}; ask for the scopes in WWW-Authenticate", e.description())
        }
        Some(e) => format!("Unauthorized: {}; get a new token from the authorization server", e.description()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISS: &str = "https://auth.example.com";
    const AUD: &str = "https://fg.example.com/mcp/server/AAAAAAAAAAAAAAAA/mcp";
    const NOW: i64 = 1_800_000_000;

    fn settings(scopes: &[&str]) -> OAuthSettings {
        OAuthSettings {
            issuer: ISS.into(),
            audience: None,
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            jwks_uri: None,
        }
    }

    fn b64(v: &Value) -> String {
        base64::encode_url(v.to_string())
    }

    fn token(header: Value, claims: Value) -> String {
        format!("{}.{}.{}", b64(&header), b64(&claims), base64::encode_url([1u8, 2, 3]))
    }

    fn claims() -> Value {
        json!({"iss": ISS, "aud": AUD, "sub": "alice", "exp": NOW + 300, "iat": NOW, "scope": "mcp:tools read"})
    }

    #[test]
    fn a_token_is_taken_apart() {
        let t = token(json!({"alg": "RS256", "kid": "k1", "typ": "at+jwt"}), claims());
        let jwt = parse_jwt(&t).unwrap();
        assert_eq!(jwt.alg, Alg::Rs256);
        assert_eq!(jwt.kid.as_deref(), Some("k1"));
        assert_eq!(jwt.claims["sub"], "alice");
        assert_eq!(jwt.signature, vec![1, 2, 3]);
        assert_eq!(jwt.signing_input, &t[..t.rfind('.').unwrap()]);
        let es = token(json!({"alg": "ES256"}), claims());
        let es = parse_jwt(&es).unwrap();
        assert_eq!((es.alg, es.kid), (Alg::Es256, None));
    }

    #[test]
    fn only_rs256_and_es256_are_accepted() {
        for alg in [
            json!("none"),
            json!("HS256"),
            json!("RS384"),
            json!("PS256"),
            json!("EdDSA"),
            json!("rs256"),
            json!(1),
            Value::Null,
        ] {
            let t = token(json!({"alg": alg, "kid": "k1"}), claims());
            assert_eq!(parse_jwt(&t), Err(TokenError::Alg), "{alg}");
        }
        // `alg: none` with an empty signature, as such tokens come.
        let none = format!("{}.{}.", b64(&json!({"alg": "none"})), b64(&claims()));
        assert_eq!(parse_jwt(&none), Err(TokenError::Alg));
        let no_alg = token(json!({"kid": "k1"}), claims());
        assert_eq!(parse_jwt(&no_alg), Err(TokenError::Alg));
    }

    #[test]
    fn malformed_tokens() {
        let good = token(json!({"alg": "RS256"}), claims());
        let parts: Vec<&str> = good.split('.').collect();
        for bad in [
            String::new(),
            "fgk_AAAA".to_string(),
            format!("{}.{}", parts[0], parts[1]),
            format!("{good}.x"),
            format!("{}.{}.", parts[0], parts[1]),
            format!("{}.{}.***", parts[0], parts[1]),
            format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
            format!("{}.{}.{}", parts[0], b64(&json!("not an object")), parts[2]),
            format!("{}.{}.{}", parts[0], base64::encode_url("{"), parts[2]),
            format!("x.{}.{}", parts[1], parts[2]),
            "a".repeat(MAX_TOKEN_CHARS + 1),
        ] {
            assert!(matches!(parse_jwt(&bad), Err(TokenError::Malformed(_))), "{bad:?}");
        }
        let kid = token(json!({"alg": "RS256", "kid": 7}), claims());
        assert!(matches!(parse_jwt(&kid), Err(TokenError::Malformed(_))));
        let crit = token(json!({"alg": "RS256", "crit": ["b64"], "b64": false}), claims());
        assert!(matches!(parse_jwt(&crit), Err(TokenError::Malformed(_))));
    }

    #[test]
    fn claims_are_checked() {
        let s = settings(&[]);
        let ok = |c: Value| check_claims(&c, &s, AUD, NOW);
        assert_eq!(ok(claims()), Ok(Verified { sub: "alice".into(), exp: NOW + 300 + SKEW_SECONDS }));
        let with = |k: &str, v: Value| {
            let mut c = claims();
            c[k] = v;
            c
        };
        let without = |k: &str| {
            let mut c = claims();
            c.as_object_mut().unwrap().remove(k);
            c
        };
        assert_eq!(ok(with("iss", json!("https://evil.example.com"))), Err(TokenError::WrongIssuer));
        assert_eq!(ok(with("iss", json!("https://auth.example.com/"))), Err(TokenError::WrongIssuer), "exactly");
        assert_eq!(ok(without("iss")), Err(TokenError::WrongIssuer));
        assert_eq!(ok(with("aud", json!("https://other.example.com/mcp"))), Err(TokenError::WrongAudience));
        assert_eq!(ok(with("aud", json!(["x", AUD]))).map(|v| v.sub), Ok("alice".into()));
        assert_eq!(ok(with("aud", json!(["x"]))), Err(TokenError::WrongAudience));
        assert_eq!(ok(without("aud")), Err(TokenError::WrongAudience));
        // exp and nbf with 60 s of skew either way.
        assert!(ok(with("exp", json!(NOW - 60))).is_ok());
        assert_eq!(ok(with("exp", json!(NOW - 61))), Err(TokenError::Expired));
        assert!(ok(with("exp", json!((NOW - 10) as f64 + 0.5))).is_ok());
        assert!(matches!(ok(without("exp")), Err(TokenError::Malformed(_))));
        assert!(matches!(ok(with("exp", json!("soon"))), Err(TokenError::Malformed(_))));
        assert!(ok(with("nbf", json!(NOW + 60))).is_ok());
        assert_eq!(ok(with("nbf", json!(NOW + 61))), Err(TokenError::NotYetValid));
        assert!(matches!(ok(with("nbf", json!(null))), Err(TokenError::Malformed(_))));
        // sub: the caller identity, sent on to backends.
        for bad in [json!(""), json!(7), json!("a\nb"), json!("José"), json!("x".repeat(256))] {
            assert_eq!(ok(with("sub", bad.clone())), Err(TokenError::BadSubject), "{bad}");
        }
        assert_eq!(ok(without("sub")), Err(TokenError::BadSubject));
        // An MCP server's tokens are named by sub alone; an Access service token's assertion
        // (empty sub) by its common_name, and only where that is asked for.
        let plus = |mut c: Value, k: &str, v: Value| {
            c[k] = v;
            c
        };
        let service = plus(with("sub", json!("")), "common_name", json!("abc.access"));
        assert_eq!(ok(service.clone()), Err(TokenError::BadSubject));
        let as_access = |c: &Value| check_claims_as(c, &s, AUD, NOW, Subject::SubOrCommonName).map(|v| v.sub);
        assert_eq!(as_access(&service), Ok("abc.access".into()));
        assert_eq!(as_access(&plus(without("sub"), "common_name", json!("abc.access"))), Ok("abc.access".into()));
        assert_eq!(as_access(&plus(claims(), "common_name", json!("other"))), Ok("alice".into()), "sub first");
        assert_eq!(as_access(&with("sub", json!(""))), Err(TokenError::BadSubject));
        assert_eq!(as_access(&plus(service.clone(), "common_name", json!("a\nb"))), Err(TokenError::BadSubject));
        // A configured audience replaces the MCP URL.
        let custom = OAuthSettings { audience: Some("api://flowgate".into()), ..settings(&[]) };
        assert_eq!(
            check_claims(&with("aud", json!("api://flowgate")), &custom, "api://flowgate", NOW).map(|v| v.sub),
            Ok("alice".into())
        );
    }

    #[test]
    fn required_scopes() {
        let s = settings(&["mcp:tools", "read"]);
        assert!(check_claims(&claims(), &s, AUD, NOW).is_ok());
        let mut c = claims();
        c["scope"] = json!("read");
        assert_eq!(check_claims(&c, &s, AUD, NOW), Err(TokenError::InsufficientScope));
        assert_eq!(missing_scopes(&c, &s.scopes), vec!["mcp:tools"]);
        c["scope"] = json!("mcp:toolsx read");
        assert_eq!(missing_scopes(&c, &s.scopes), vec!["mcp:tools"], "whole scope tokens only");
        let scp = json!({"scp": ["read", "mcp:tools"]});
        assert!(missing_scopes(&scp, &s.scopes).is_empty());
        let scp_str = json!({"scp": "read mcp:tools"});
        assert!(missing_scopes(&scp_str, &s.scopes).is_empty());
        assert_eq!(missing_scopes(&json!({}), &s.scopes).len(), 2);
        assert!(missing_scopes(&json!({}), &[]).is_empty(), "no scopes required: none needed");
        // The 403 names the code and the scopes to ask for.
        let e = TokenError::InsufficientScope;
        assert_eq!(e.status(), 403);
        assert_eq!(
            challenge("https://m", &s, Some(&e)),
            "Bearer resource_metadata=\"https://m\", error=\"insufficient_scope\", error_description=\"the token lacks a scope \
             this MCP server requires\", scope=\"mcp:tools read\""
        );
    }

    #[test]
    fn challenges() {
        let s = settings(&[]);
        let url = "https://fg.example.com/.well-known/oauth-protected-resource/mcp/server/AAAAAAAAAAAAAAAA/mcp";
        assert_eq!(challenge(url, &s, None), format!("Bearer resource_metadata=\"{url}\""));
        assert_eq!(
            challenge(url, &s, Some(&TokenError::Expired)),
            format!("Bearer resource_metadata=\"{url}\", error=\"invalid_token\", error_description=\"the token has expired\"")
        );
        for e in [
            TokenError::Malformed("x"),
            TokenError::Alg,
            TokenError::UnknownKey,
            TokenError::BadSignature,
            TokenError::Expired,
            TokenError::NotYetValid,
            TokenError::WrongIssuer,
            TokenError::WrongAudience,
            TokenError::BadSubject,
        ] {
            assert_eq!(e.status(), 401);
            assert!(!e.description().contains(['"', '\\']), "{e:?}");
            assert!(refusal_message(Some(&e), true).starts_with("Unauthorized: "));
        }
        assert!(refusal_message(None, false).contains("resource_metadata"));
        assert!(refusal_message(None, true).contains("not a bearer token"));
        assert!(refusal_message(Some(&TokenError::InsufficientScope), true).starts_with("Forbidden: "));
    }

    #[test]
    fn resource_and_metadata_urls() {
        let code = "AAAAAAAAAAAAAAAA";
        assert_eq!(resource_url("https://fg.example.com", code), AUD);
        assert_eq!(resource_url("https://fg.example.com/", code), AUD);
        assert_eq!(
            resource_metadata_url("https://fg.example.com", code),
            "https://fg.example.com/.well-known/oauth-protected-resource/mcp/server/AAAAAAAAAAAAAAAA/mcp"
        );
        // A PUBLIC_URL with a path: the well-known segment goes before it (RFC 9728 §3.1).
        assert_eq!(
            resource_metadata_url("https://gw.example.com/flowgate", code),
            "https://gw.example.com/.well-known/oauth-protected-resource/flowgate/mcp/server/AAAAAAAAAAAAAAAA/mcp"
        );
        let s = OAuthSettings { scopes: vec!["mcp".into()], ..settings(&[]) };
        assert_eq!(
            resource_metadata(AUD, &s, "Summariser"),
            json!({"resource": AUD, "authorization_servers": [ISS], "scopes_supported": ["mcp"],
                   "bearer_methods_supported": ["header"], "resource_name": "Summariser"})
        );
    }

    #[test]
    fn issuer_metadata() {
        assert_eq!(
            metadata_urls("https://auth.example.com"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://auth.example.com/tenant/"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant",
                "https://auth.example.com/tenant/.well-known/openid-configuration"
            ]
        );
        let doc = json!({"issuer": ISS, "jwks_uri": "https://auth.example.com/jwks"}).to_string();
        assert_eq!(jwks_uri_of(&doc, ISS), Ok("https://auth.example.com/jwks".into()));
        let other =
            json!({"issuer": "https://evil.example.com", "jwks_uri": "https://evil.example.com/jwks"}).to_string();
        assert!(jwks_uri_of(&other, ISS).unwrap_err().contains("instead of"));
        assert!(jwks_uri_of(&json!({"issuer": ISS}).to_string(), ISS).unwrap_err().contains("no jwks_uri"));
        let plain = json!({"issuer": ISS, "jwks_uri": "http://auth.example.com/jwks"}).to_string();
        assert!(jwks_uri_of(&plain, ISS).unwrap_err().contains("https"));
        assert!(jwks_uri_of("<html>", ISS).is_err());
    }

    #[test]
    fn jwks_and_key_choice() {
        let doc = json!({"keys": [
            {"kty": "RSA", "kid": "r1", "use": "sig", "alg": "RS256", "n": "nnn", "e": "AQAB", "key_ops": ["verify"]},
            {"kty": "EC", "kid": "e1", "crv": "P-256", "x": "xx", "y": "yy"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "n", "e": "AQAB"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "n", "e": "AQAB"},
            {"kty": "EC", "kid": "p384", "crv": "P-384", "x": "x", "y": "y"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "x"},
            {"kty": "RSA", "kid": "broken"},
            {"kty": "RSA", "kid": "quoted", "n": "n\",\"x", "e": "AQAB"},
        ]})
        .to_string();
        let keys = parse_jwks(&doc).unwrap();
        assert_eq!(keys.iter().map(|k| k.kid.as_deref().unwrap()).collect::<Vec<_>>(), ["r1", "e1"]);
        assert_eq!(keys[0].public_jwk, r#"{"kty":"RSA","n":"nnn","e":"AQAB"}"#);
        assert_eq!(keys[1].public_jwk, r#"{"kty":"EC","crv":"P-256","x":"xx","y":"yy"}"#);
        assert_eq!(select_key(&keys, Alg::Rs256, Some("r1")).map(|k| k.alg), Some(Alg::Rs256));
        assert_eq!(select_key(&keys, Alg::Es256, Some("e1")).map(|k| k.alg), Some(Alg::Es256));
        assert_eq!(select_key(&keys, Alg::Es256, Some("r1")), None, "an RSA key never verifies ES256");
        assert_eq!(select_key(&keys, Alg::Rs256, Some("hmac")), None);
        assert_eq!(select_key(&keys, Alg::Rs256, Some("unknown")), None);
        assert_eq!(select_key(&keys, Alg::Rs256, None).and_then(|k| k.kid.as_deref()), Some("r1"), "the only RSA key");
        let two = [keys[0].clone(), Jwk { kid: Some("r2".into()), ..keys[0].clone() }];
        assert_eq!(select_key(&two, Alg::Rs256, None), None, "no kid and two candidates: ambiguous");
        assert!(parse_jwks("{}").is_err());
        assert!(parse_jwks("nope").is_err());
        let many = json!({"keys": (0..100).map(|i| json!({"kty": "RSA", "kid": i.to_string(), "n": "n", "e": "e"})).collect::<Vec<_>>()});
        assert_eq!(parse_jwks(&many.to_string()).unwrap().len(), MAX_JWKS_KEYS);
    }

    #[test]
    fn refetch_policy() {
        assert!(!may_refetch(1_000, 1_000 + JWKS_REFETCH_MS - 1));
        assert!(may_refetch(1_000, 1_000 + JWKS_REFETCH_MS));
        assert!(may_refetch(0, u64::MAX));
    }

    #[test]
    fn settings_from_the_console() {
        let check = |v: Value| {
            let mut errs = Errors::default();
            let s = validate_settings(Some(&v), &mut errs);
            (s, errs.0.into_iter().map(|e| (e.field, e.message)).collect::<Vec<_>>())
        };
        let (s, e) = check(json!({"issuer": ISS}));
        assert_eq!((s, e), (Some(settings(&[])), vec![]));
        let (s, e) = check(
            json!({"issuer": ISS, "audience": "api://x", "scopes": ["mcp", "read", "mcp"], "jwks_uri": "https://auth.example.com/keys"}),
        );
        assert!(e.is_empty(), "{e:?}");
        let s = s.unwrap();
        assert_eq!(s.scopes, ["mcp", "read"], "duplicates dropped");
        assert_eq!(
            (s.audience.as_deref(), s.jwks_uri.as_deref()),
            (Some("api://x"), Some("https://auth.example.com/keys"))
        );
        // Local issuers over http (development), refused for public hosts.
        assert!(check(json!({"issuer": "http://127.0.0.1:9000"})).1.is_empty());
        let field = |v: Value| {
            let (s, e) = check(v);
            assert!(s.is_none());
            e
        };
        let e = field(json!({"issuer": "http://auth.example.com"}));
        assert_eq!(e[0].0, "oauth.issuer");
        assert!(e[0].1.contains("https://"), "{}", e[0].1);
        assert!(field(json!({}))[0].1.starts_with("is required"));
        assert!(field(json!({"issuer": "auth.example.com"}))[0].1.contains("http"));
        assert!(field(json!({"issuer": "https://auth.example.com?x=1"}))[0].1.contains("query"));
        assert!(field(json!({"issuer": "https://auth.example.com#x"}))[0].1.contains("fragment"));
        assert_eq!(field(json!({"issuer": ISS, "jwks_uri": "ftp://x"}))[0].0, "oauth.jwks_uri");
        assert_eq!(field(json!({"issuer": ISS, "audience": 7}))[0].0, "oauth.audience");
        assert_eq!(field(json!({"issuer": ISS, "audience": ""}))[0].0, "oauth.audience");
        assert_eq!(field(json!({"issuer": ISS, "scopes": "mcp"}))[0].0, "oauth.scopes");
        assert_eq!(field(json!({"issuer": ISS, "scopes": ["a b"]}))[0].0, "oauth.scopes[0]");
        assert_eq!(field(json!({"issuer": ISS, "scopes": [1]}))[0].1, "must be a string (got a number)");
        assert_eq!(field(json!({"issuer": ISS, "client_secret": "x"}))[0].0, "oauth.client_secret");
        let mut errs = Errors::default();
        assert_eq!(validate_settings(None, &mut errs), None);
        assert!(errs.0[0].message.starts_with("is required with mode \"oauth\""));
        let mut errs = Errors::default();
        assert_eq!(validate_settings(Some(&json!("x")), &mut errs), None);
        assert!(errs.0[0].message.contains("got a string"));
    }
}
