//! Named console tokens, decided without IO: drawing one (`fgc_` + 32 base62 characters from the
//! CSPRNG, like client keys), recognizing its shape, and the console body that names one and
//! gives it a role. D1 keeps only the token's SHA-256 and hint; the token is shown once.

use serde_json::Value;

use super::admin::bearer_token;
use super::console_roles::Role;
use super::error::{ApiError, Errors, NameRule};
use super::ids::{mint_secret, sha256_hex, FillBytes, MintedSecret};
use super::quote::plain_or_quoted;

/// What every console token starts with, so a leaked one is recognizable (secret scanners).
pub const TOKEN_PREFIX: &str = "fgc_";
/// Random `[A-Za-z0-9]` characters after the prefix: about 190 bits.
pub const TOKEN_SECRET_CHARS: usize = 32;
pub const MAX_TOKEN_NAME_CHARS: usize = 64;
/// Tokens one deploy may have: a console has a handful of people and robots, not thousands.
pub const MAX_TOKENS: usize = 100;

/// Whether `s` has the shape of a console token; anything else is not looked up.
pub fn is_token_shape(s: &str) -> bool {
    s.strip_prefix(TOKEN_PREFIX)
        .is_some_and(|rest| rest.len() == TOKEN_SECRET_CHARS && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The SHA-256 (hex) of the console token an `Authorization` header carries, if it carries one
/// of the right shape: what the shell looks up.
pub fn presented_hash(header: Option<&str>) -> Option<String> {
    header.and_then(bearer_token).filter(|t| is_token_shape(t)).map(sha256_hex)
}

/// A token drawn from `fill` (see [`mint_secret`]).
pub fn new_token_from(fill: &mut FillBytes<'_>) -> Result<MintedSecret, crate::pure::random::Unavailable> {
    mint_secret(fill, TOKEN_PREFIX, TOKEN_SECRET_CHARS)
}

/// A token from the platform CSPRNG.
pub fn new_token() -> Result<MintedSecret, crate::pure::random::Unavailable> {
    new_token_from(&mut crate::pure::random::fill)
}

const ROLES_HINT: &str = "\"admin\" (everything), \"publisher\" (apps and servers) or \"viewer\" (read only)";

/// The body of `POST /console/api/tokens`: `{"name": "deploy-bot", "role": "publisher"}`.
pub fn validate_token_body(body: &Value) -> Result<(String, Role), ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request(
            "the body must be a JSON object: {\"name\": \"<who holds the token>\", \"role\": \"admin\" | \"publisher\" | \"viewer\"}",
        ));
    };
    let mut errs = Errors::default();
    for k in obj.keys().filter(|k| !matches!(k.as_str(), "name" | "role")) {
        errs.add(plain_or_quoted(k), "is not a token field (known: name, role)");
    }
    let name = errs.credential_name(obj.get("name"), "name", &NAME_RULE);
    let role = errs.choice(obj.get("role"), "role", "role", ROLES_HINT, Role::parse);
    errs.into_result(())?;
    match (name, role) {
        (Some(name), Some(role)) => Ok((name, role)),
        // Unreachable: a missing value added an error above.
        _ => Err(ApiError::bad_request("the body needs a name and a role")),
    }
}

const NAME_RULE: NameRule = NameRule {
    max_chars: MAX_TOKEN_NAME_CHARS,
    holds: "the token",
    example: "deploy-bot",
    why_ascii: "it is the audit log's actor",
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_have_the_prefix_32_base62_characters_and_differ() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a.secret, b.secret);
        for t in [&a, &b] {
            assert!(is_token_shape(&t.secret), "{}", t.secret);
            assert_eq!(t.secret.len(), 4 + 32);
            assert_eq!(t.hash, sha256_hex(&t.secret));
            assert_eq!(t.hint, &t.secret[32..]);
        }
    }

    #[test]
    fn tokens_come_from_the_unbiased_sampler() {
        let t = new_token_from(&mut crate::pure::ids::counting_fill(248)).unwrap();
        assert_eq!(&t.secret[..12], "fgc_ABCDEFGH", "the 8 rejected bytes were skipped");
    }

    #[test]
    fn shapes_and_presented_hashes() {
        let t = "fgc_0123456789abcdefghijABCDEFGHIJKL";
        assert!(is_token_shape(t));
        for bad in [
            "",
            "fgc_",
            "fgk_0123456789abcdefghijABCDEFGHIJKL",
            "FGC_0123456789abcdefghijABCDEFGHIJKL",
            "fgc_0123456789abcdefghijABCDEFGHIJK",
            "fgc_0123456789abcdefghijABCDEFGHIJKLM",
            "fgc_0123456789abcdefghijABCDEFGHIJK!",
        ] {
            assert!(!is_token_shape(bad), "{bad:?}");
        }
        assert_eq!(presented_hash(Some(&format!("bearer  {t}"))), Some(sha256_hex(t)));
        assert_eq!(presented_hash(Some(t)), None, "no scheme");
        assert_eq!(presented_hash(Some("Bearer test-admin-token-for-local-tests-only")), None);
        assert_eq!(presented_hash(None), None);
    }

    #[test]
    fn the_token_body() {
        assert_eq!(
            validate_token_body(&json!({"name": "deploy-bot", "role": "publisher"})),
            Ok(("deploy-bot".to_string(), Role::Publisher))
        );
        let n64 = "x".repeat(64);
        assert_eq!(validate_token_body(&json!({"name": n64, "role": "viewer"})), Ok((n64.clone(), Role::Viewer)));
        let fields = |v: Value| {
            let e = validate_token_body(&v).unwrap_err();
            assert_eq!((e.status, e.code), (400, "validation_failed"), "{e:?}");
            e.errors.into_iter().map(|f| (f.field, f.message)).collect::<Vec<_>>()
        };
        let e = fields(json!({}));
        assert_eq!(e.len(), 2);
        assert!(e[0].0 == "name" && e[0].1.starts_with("is required"));
        assert!(e[1].0 == "role" && e[1].1.starts_with("is required"));
        let e = fields(json!({"name": "a", "role": "root"}));
        assert_eq!(e[0].0, "role");
        assert!(e[0].1.starts_with("\"root\" is not a role; expected \"admin\""), "{}", e[0].1);
        assert!(fields(json!({"name": "a", "role": 1}))[0].1.contains("got a number"));
        assert!(fields(json!({"name": "", "role": "viewer"}))[0].1.starts_with("must not be empty"));
        assert_eq!(
            fields(json!({"name": "x".repeat(65), "role": "viewer"}))[0].1,
            "must be at most 64 characters (got 65)"
        );
        assert!(fields(json!({"name": "a\nb", "role": "viewer"}))[0].1.starts_with("must be printable ASCII"));
        assert!(fields(json!({"name": "José", "role": "viewer"}))[0].1.starts_with("must be printable ASCII"));
        assert!(fields(json!({"name": "a ", "role": "viewer"}))[0].1.contains("begin or end"));
        assert!(fields(json!({"name": ["a"], "role": "viewer"}))[0].1.contains("got an array"));
        assert_eq!(fields(json!({"name": "a", "role": "viewer", "token": "x"}))[0].0, "token");
        assert_eq!(validate_token_body(&json!("x")).unwrap_err().code, "bad_request");
    }
}
