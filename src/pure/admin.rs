//! Console authentication, decided without IO: the `Authorization` header against the
//! `ADMIN_TOKEN` secret. The shell reads the two and asks [`check`]; a token that is not
//! `ADMIN_TOKEN` but has a console token's shape is then looked up by its SHA-256
//! (`pure::console_tokens`). On a wrong token it consults the `ADMIN_AUTH_LIMIT` rate limiter
//! before answering [`AuthFailure::error`] or [`throttled`]. What a caller may do once known is
//! `pure::console_roles`.

use super::error::ApiError;
use super::ids::{constant_time_eq, sha256_hex};

/// Shortest `ADMIN_TOKEN` the console runs with (`openssl rand -hex 32` gives 64).
pub const MIN_ADMIN_TOKEN_CHARS: usize = 32;
/// The protection space named in every `WWW-Authenticate` challenge.
pub const REALM: &str = "flowgate-console";
/// Seconds a throttled client is told to wait (the rate-limiting binding counts over 10 or
/// 60 seconds; 60 is enough for either).
pub const THROTTLE_RETRY_AFTER_SECONDS: u64 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// `ADMIN_TOKEN` is not set (or empty): the console is off.
    NotConfigured,
    /// `ADMIN_TOKEN` is too short to resist guessing: the console is off until it is replaced.
    WeakToken,
    /// No `Authorization: Bearer <token>` was sent (no header, another scheme, no token).
    NoToken { header_sent: bool },
    /// A bearer token was sent and is not the admin token: counts as a failed attempt.
    InvalidToken,
    /// A bearer token of a console token's shape (`fgc_…`) that no stored token has: unknown
    /// or revoked. Counts as a failed attempt.
    InvalidConsoleToken,
}

/// The token of an `Authorization: Bearer <token>` header. The scheme is matched without
/// regard to case (RFC 7235) and may be followed by any number of spaces (or tabs).
pub fn bearer_token(header: &str) -> Option<&str> {
    let header = header.trim_start_matches([' ', '\t']);
    let (scheme, rest) = header.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("bearer") || !rest.starts_with([' ', '\t']) {
        return None;
    }
    let token = rest.trim_matches([' ', '\t']);
    (!token.is_empty()).then_some(token)
}

/// Decides a console request: `expected` is the `ADMIN_TOKEN` secret (`None` when unset),
/// `header` the `Authorization` header (`None` when absent). Tokens are compared in constant
/// time.
pub fn check(expected: Option<&str>, header: Option<&str>) -> Result<(), AuthFailure> {
    let expected = expected.unwrap_or("");
    if expected.is_empty() {
        return Err(AuthFailure::NotConfigured);
    }
    if expected.chars().count() < MIN_ADMIN_TOKEN_CHARS {
        return Err(AuthFailure::WeakToken);
    }
    let header_sent = header.is_some_and(|h| !h.trim().is_empty());
    let Some(token) = header.and_then(bearer_token) else {
        return Err(AuthFailure::NoToken { header_sent });
    };
    if constant_time_eq(token.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(AuthFailure::InvalidToken)
    }
}

impl AuthFailure {
    /// Whether the attempt counts against the client's budget of failed attempts: only a
    /// token that was compared and found wrong (a guess) does.
    pub fn counts_as_attempt(self) -> bool {
        matches!(self, AuthFailure::InvalidToken | AuthFailure::InvalidConsoleToken)
    }

    /// The answer: 503 while the console is off, 401 with an RFC 6750 challenge otherwise.
    /// Neither says anything about the token beyond what is needed to fix the setup.
    pub fn error(self) -> ApiError {
        const FIX: &str = "generate one with `openssl rand -hex 32` and set it with \
                           `wrangler secret put ADMIN_TOKEN` (in .dev.vars for local development)";
        match self {
            AuthFailure::NotConfigured => ApiError::new(
                503,
                "console_disabled",
                format!("the console is disabled: the ADMIN_TOKEN secret is not set; {FIX}"),
            ),
            AuthFailure::WeakToken => ApiError::new(
                503,
                "console_disabled",
                format!(
                    "the console is disabled: the ADMIN_TOKEN secret is shorter than {MIN_ADMIN_TOKEN_CHARS} \
                     characters, too short to resist guessing; {FIX}"
                ),
            ),
            AuthFailure::NoToken { header_sent } => ApiError::new(
                401,
                "unauthorized",
                if header_sent {
                    "the Authorization header is not a bearer token; send `Authorization: Bearer <ADMIN_TOKEN>`"
                } else {
                    "send the admin token as `Authorization: Bearer <ADMIN_TOKEN>`"
                },
            )
            .with_header("www-authenticate", challenge(false)),
            AuthFailure::InvalidToken => ApiError::new(401, "unauthorized", "the admin token is not valid")
                .with_header("www-authenticate", challenge(true)),
            AuthFailure::InvalidConsoleToken => ApiError::new(
                401,
                "unauthorized",
                "the console token is not valid (unknown, or revoked); ask an admin for a new one",
            )
            .with_header("www-authenticate", challenge(true)),
        }
    }
}

/// The `WWW-Authenticate` value of a 401 (RFC 6750 §3): the realm, and `invalid_token` when
/// a token was sent and refused.
pub fn challenge(token_sent: bool) -> String {
    if token_sent {
        format!("Bearer realm=\"{REALM}\", error=\"invalid_token\"")
    } else {
        format!("Bearer realm=\"{REALM}\"")
    }
}

/// The answer once a client is over its budget of failed attempts.
pub fn throttled() -> ApiError {
    ApiError::new(
        429,
        "too_many_attempts",
        format!(
            "too many failed admin token attempts from this address; retry after {THROTTLE_RETRY_AFTER_SECONDS} s \
             with the right token"
        ),
    )
    .with_header("retry-after", THROTTLE_RETRY_AFTER_SECONDS.to_string())
}

/// The rate limiter's key for a client address (hashed: the limiter never sees an address);
/// requests without one share a single key.
pub fn throttle_key(client_ip: Option<&str>) -> String {
    match client_ip.map(str::trim).filter(|ip| !ip.is_empty()) {
        Some(ip) => format!("admin-auth:{}", sha256_hex(ip)),
        None => "admin-auth:unknown-client".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_bearer_scheme_in_any_case_with_any_spaces() {
        for h in
            ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR abc", "Bearer    abc", "Bearer \tabc ", "  Bearer abc"]
        {
            assert_eq!(bearer_token(h), Some("abc"), "{h:?}");
        }
        for h in ["Bearerabc", "Basic YWJj", "Bearer", "Bearer   ", "", "Bear abc", "Bearér abc", "é"] {
            assert_eq!(bearer_token(h), None, "{h:?}");
        }
    }

    #[test]
    fn decisions() {
        let ok = format!("Bearer {TOKEN}");
        assert_eq!(check(Some(TOKEN), Some(&ok)), Ok(()));
        assert_eq!(check(Some(TOKEN), Some(&format!("bearer   {TOKEN}"))), Ok(()));
        assert_eq!(check(Some(TOKEN), None), Err(AuthFailure::NoToken { header_sent: false }));
        assert_eq!(check(Some(TOKEN), Some("Basic eDp5")), Err(AuthFailure::NoToken { header_sent: true }));
        assert_eq!(check(Some(TOKEN), Some("Bearer nope")), Err(AuthFailure::InvalidToken));
        assert_eq!(check(Some(TOKEN), Some(&format!("Bearer {TOKEN}x"))), Err(AuthFailure::InvalidToken));
        assert_eq!(check(None, Some(&ok)), Err(AuthFailure::NotConfigured));
        assert_eq!(check(Some(""), Some(&ok)), Err(AuthFailure::NotConfigured));
        // A short token turns the console off, even for a client that sends it.
        let short = &TOKEN[..31];
        assert_eq!(check(Some(short), Some(&format!("Bearer {short}"))), Err(AuthFailure::WeakToken));
        assert!(AuthFailure::InvalidToken.counts_as_attempt());
        assert!(AuthFailure::InvalidConsoleToken.counts_as_attempt());
        assert!(!AuthFailure::NoToken { header_sent: true }.counts_as_attempt());
    }

    #[test]
    fn answers() {
        let e = AuthFailure::InvalidToken.error();
        assert_eq!(e.status, 401);
        assert_eq!(
            e.headers,
            vec![("www-authenticate", "Bearer realm=\"flowgate-console\", error=\"invalid_token\"".to_string())]
        );
        let e = AuthFailure::InvalidConsoleToken.error();
        assert_eq!(e.status, 401);
        assert!(e.message.contains("revoked"), "{}", e.message);
        assert_eq!(e.headers[0].1, challenge(true));
        let e = AuthFailure::NoToken { header_sent: false }.error();
        assert_eq!(e.headers, vec![("www-authenticate", "Bearer realm=\"flowgate-console\"".to_string())]);
        let e = AuthFailure::WeakToken.error();
        assert_eq!((e.status, e.code), (503, "console_disabled"));
        for needle in ["shorter than 32 characters", "openssl rand -hex 32", "wrangler secret put ADMIN_TOKEN"] {
            assert!(e.message.contains(needle), "{}", e.message);
        }
        assert!(e.headers.is_empty());
        let t = throttled();
        assert_eq!((t.status, t.code), (429, "too_many_attempts"));
        assert_eq!(t.headers, vec![("retry-after", "60".to_string())]);
    }

    #[test]
    fn throttle_keys_hash_the_address() {
        let k = throttle_key(Some("203.0.113.7"));
        assert_eq!(k, format!("admin-auth:{}", sha256_hex("203.0.113.7")));
        assert!(!k.contains("203.0.113.7"));
        assert_ne!(k, throttle_key(Some("203.0.113.8")));
        assert_eq!(throttle_key(None), throttle_key(Some(" ")));
    }
}
