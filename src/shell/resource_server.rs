//! Auth mode `oauth` at the MCP endpoint: a bearer token verified against the server's issuer
//! (checks in `pure::oauth_resource`), its signature with WebCrypto, the issuer's keys fetched
//! through the outbound guard and kept in isolate memory, each verified token remembered until
//! it expires so a hot client costs one SHA-256 per request.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use crate::runtime::{Headers, Method};

use crate::pure::admin::bearer_token;
use crate::pure::ids::sha256_hex;
use crate::pure::memo::{Lookup, Memo};
use crate::pure::oauth_resource::{
    check_claims_as, jwks_uri_of, may_refetch, metadata_urls, parse_jwks, parse_jwt, select_key, Jwk, OAuthSettings,
    Subject, TokenError, JWKS_MAX_AGE_MS,
};

use crate::shell::outbound::{self, CrossOrigin, SendError};

/// Verified tokens one isolate remembers.
const TOKENS_CAPACITY: usize = 4096;
/// Issuers (JWKS) one isolate keeps keys of.
const JWKS_CAPACITY: usize = 64;
/// Largest metadata or JWKS document read.
const DOC_CAP: usize = 256 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Entries are judged by their own expiry, not by the memo's freshness window.
const FOREVER_MS: u64 = u64::MAX / 4;

struct Keys {
    keys: Vec<Jwk>,
    fetched_ms: u64,
    /// Why the last fetch failed when no keys were ever had: repeated, without fetching, for
    /// the refetch interval (an unreachable issuer is not asked on every request).
    failed: Option<String>,
}

thread_local! {
    /// Verified tokens by the SHA-256 of what they were checked against and the token itself:
    /// `"<exp> <sub>"` (a string: the memo type the isolate already has, less bundle).
    static TOKENS: RefCell<Memo<Rc<str>>> = RefCell::new(Memo::new(TOKENS_CAPACITY));
    static JWKS: RefCell<Memo<Rc<Keys>>> = RefCell::new(Memo::new(JWKS_CAPACITY));
}

type Isolate<V> = std::thread::LocalKey<RefCell<Memo<V>>>;

/// Forgets the verified tokens and signing keys (an isolate started again).
pub fn forget_keys() {
    TOKENS.with(|m| *m.borrow_mut() = Memo::new(TOKENS_CAPACITY));
    JWKS.with(|m| *m.borrow_mut() = Memo::new(JWKS_CAPACITY));
}

// Out of line: the memo's code once per kind of value, not at every use (bundle size).
#[inline(never)]
fn remembered<V: Clone>(memo: &'static Isolate<V>, key: &str, now_ms: u64) -> Option<V> {
    match memo.with(|m| m.borrow_mut().get(key, now_ms, FOREVER_MS)) {
        Lookup::Fresh(v) | Lookup::Refresh(v) => Some(v),
        Lookup::Missing => None,
    }
}

#[inline(never)]
fn remember<V: Clone>(memo: &'static Isolate<V>, key: &str, value: V, now_ms: u64) {
    memo.with(|m| m.borrow_mut().put(key, value, now_ms));
}

/// What became of a request to an `oauth` server.
pub enum Outcome {
    /// The token's `sub`: the caller.
    Caller(Rc<str>),
    /// No bearer token (`header_sent`: an Authorization header of another scheme), or a bad one.
    Refused { error: Option<TokenError>, header_sent: bool },
    /// The issuer's keys could not be had: not the client's fault (503).
    Unavailable(String),
}

/// Decides a request's `Authorization` header for a server whose tokens must come from
/// `settings.issuer` for `audience`.
pub async fn authenticate(settings: &OAuthSettings, server_id: &str, audience: &str, header: Option<&str>) -> Outcome {
    authenticate_as(settings, server_id, audience, header, Subject::Sub).await
}

/// [`authenticate`], the caller named by the `subject` claim(s) (`server_id` keeps the tokens
/// remembered for one use apart from another's).
pub async fn authenticate_as(
    settings: &OAuthSettings,
    server_id: &str,
    audience: &str,
    header: Option<&str>,
    subject: Subject,
) -> Outcome {
    let header_sent = header.is_some_and(|h| !h.trim().is_empty());
    let Some(token) = header.and_then(bearer_token) else {
        return Outcome::Refused { error: None, header_sent };
    };
    let now_ms = crate::shell::platform::now_ms();
    let now_s = (now_ms / 1000) as i64;
    // One hash names the token and everything it was checked against: a token accepted by one
    // server, or before its settings changed, is checked afresh.
    let scopes = settings.scopes.join(" ");
    let jwks_uri = settings.jwks_uri.as_deref().unwrap_or_default();
    let digest = sha256_hex(&format!("{server_id}\n{audience}\n{}\n{scopes}\n{jwks_uri}\n{token}", settings.issuer));
    if let Some(hit) = remembered(&TOKENS, &digest, now_ms) {
        if let Some((exp, sub)) = hit.split_once(' ') {
            if exp.parse::<i64>().is_ok_and(|exp| exp >= now_s) {
                return Outcome::Caller(Rc::from(sub));
            }
        }
    }
    let refused = |e: TokenError| Outcome::Refused { error: Some(e), header_sent: true };
    let jwt = match parse_jwt(token) {
        Ok(j) => j,
        Err(e) => return refused(e),
    };
    // Claims first: an expired or foreign token costs no key fetch and no signature check. A
    // missing scope is told only once the signature holds (403 is for the issuer's tokens).
    let claims = check_claims_as(&jwt.claims, settings, audience, now_s, subject);
    if let Err(e) = &claims {
        if *e != TokenError::InsufficientScope {
            return refused(e.clone());
        }
    }
    let key = match key_for(settings, &jwt, now_ms).await {
        Ok(Some(k)) => k,
        Ok(None) => return refused(TokenError::UnknownKey),
        Err(why) => return Outcome::Unavailable(why),
    };
    match verify(&key, &jwt.signature, jwt.signing_input.as_bytes(), jwt.alg).await {
        Ok(true) => {}
        Ok(false) => return refused(TokenError::BadSignature),
        Err(why) => {
            // A key WebCrypto will not import (a malformed JWK): the token cannot be trusted.
            crate::shell::log::error(&format!("verifying a token of {}: {why}", settings.issuer));
            return refused(TokenError::BadSignature);
        }
    }
    match claims {
        Ok(v) => {
            remember(&TOKENS, &digest, Rc::from(format!("{} {}", v.exp, v.sub)), now_ms);
            Outcome::Caller(Rc::from(v.sub))
        }
        Err(e) => refused(e),
    }
}

/// The issuer's key for a token: from memory, else fetched; fetched again for an unknown `kid`
/// at most every 30 s per issuer. `Ok(None)`: no such key. `Err`: no keys at all.
async fn key_for(
    settings: &OAuthSettings,
    jwt: &crate::pure::oauth_resource::Jwt<'_>,
    now_ms: u64,
) -> Result<Option<Jwk>, String> {
    let id = settings.jwks_uri.clone().unwrap_or_else(|| format!("issuer {}", settings.issuer));
    let held = remembered(&JWKS, &id, now_ms);
    let find = |keys: &Keys| select_key(&keys.keys, jwt.alg, jwt.kid.as_deref()).cloned();
    if let Some(keys) = &held {
        let old = now_ms.saturating_sub(keys.fetched_ms) >= JWKS_MAX_AGE_MS;
        if let Some(k) = find(keys).filter(|_| !old) {
            return Ok(Some(k));
        }
        if !old && !may_refetch(keys.fetched_ms, now_ms) {
            return match &keys.failed {
                Some(why) => Err(why.clone()),
                None => Ok(None),
            };
        }
    }
    // Marked as fetched before the fetch: requests meanwhile do not fetch as well.
    let mark = |keys: Vec<Jwk>, failed: Option<String>| {
        let k = Rc::new(Keys { keys, fetched_ms: now_ms, failed });
        remember(&JWKS, &id, Rc::clone(&k), now_ms);
        k
    };
    let before = held.as_ref().map(|k| (k.keys.clone(), k.failed.clone()));
    mark(before.clone().map(|b| b.0).unwrap_or_default(), before.and_then(|b| b.1));
    match fetch_keys(settings).await {
        Ok(keys) => Ok(find(&mark(keys, None))),
        // Keys held from before still serve while the issuer cannot be reached.
        Err(why) => match held.filter(|k| k.failed.is_none()) {
            Some(keys) => {
                crate::shell::log::error(&format!("refreshing the keys of {}: {why}", settings.issuer));
                Ok(find(&keys))
            }
            None => {
                mark(Vec::new(), Some(why.clone()));
                Err(why)
            }
        },
    }
}

/// The issuer's keys: from `jwks_uri`, or the one its metadata names.
async fn fetch_keys(settings: &OAuthSettings) -> Result<Vec<Jwk>, String> {
    let uri = match &settings.jwks_uri {
        Some(u) => u.clone(),
        None => discover_jwks_uri(&settings.issuer).await?,
    };
    let text = get(&uri).await.map_err(|why| format!("the issuer's JWKS could not be fetched: {why}"))?;
    parse_jwks(&text)
}

async fn discover_jwks_uri(issuer: &str) -> Result<String, String> {
    let mut last = String::from("the issuer URL is not valid");
    for url in metadata_urls(issuer) {
        match get(&url).await {
            Ok(text) => return jwks_uri_of(&text, issuer),
            Err(why) => last = why.to_string(),
        }
    }
    Err(format!("the issuer's metadata could not be fetched (RFC 8414 or OpenID): {last}"))
}

/// Why an issuer's document (metadata, JWKS) could not be had.
enum Fetch {
    Send(SendError),
    /// An answer other than 200, from this host.
    Status(u16, String),
}

impl From<SendError> for Fetch {
    fn from(e: SendError) -> Fetch {
        Fetch::Send(e)
    }
}

impl std::fmt::Display for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fetch::Send(SendError::Unreachable(why)) => why.fmt(f),
            Fetch::Send(SendError::TimedOut) => write!(f, "no answer within {} s", FETCH_TIMEOUT.as_secs()),
            Fetch::Send(SendError::TooLarge(cap)) => write!(f, "the document is larger than {} KiB", cap / 1024),
            Fetch::Status(status, host) => write!(f, "HTTP {status} from {host}"),
        }
    }
}

/// A GET through the outbound guard; the body of a 200 answer.
async fn get(url: &str) -> Result<String, Fetch> {
    let mut headers = Headers::new();
    headers.set("accept", "application/json");
    let without = CrossOrigin::WithoutCredentials;
    let mut resp = outbound::send_text(Method::Get, url, headers, None, FETCH_TIMEOUT, without).await?;
    if resp.status_code() != 200 {
        return Err(Fetch::Status(resp.status_code(), crate::pure::url::host_for_display(url)));
    }
    Ok(outbound::text(&mut resp, FETCH_TIMEOUT, DOC_CAP).await?)
}

/// Checks a JWS signature with WebCrypto: the key imported from its public JWK, then
/// `verify` (RSASSA-PKCS1-v1_5 or ECDSA P-256, both over SHA-256).
async fn verify(
    key: &Jwk,
    signature: &[u8],
    data: &[u8],
    alg: crate::pure::oauth_resource::Alg,
) -> crate::runtime::Result<bool> {
    crate::runtime::Env::current()
        .runtime()
        .verify_signature(&key.public_jwk, alg.import_params(), alg.verify_params(), signature, data)
        .await
}
