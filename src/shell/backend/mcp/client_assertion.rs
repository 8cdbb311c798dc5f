//! `private_key_jwt` with WebCrypto: the client's PKCS#8 key imported (not extractable), the
//! assertion `pure::backend::mcp::client_assertion` builds signed with it, and the same import
//! when an app is stored, so a key WebCrypto cannot use is refused then rather than at the
//! first call.

use serde_json::Value;

use crate::pure::backend::mcp::client_assertion::{self as ca, Alg, Claims, PrivateKey};
use crate::pure::backend::mcp::oauth::OAuthConfig;
use crate::pure::error::ApiError;
use crate::pure::random::Unavailable;
use crate::runtime::{Env, SignError};

/// Why the private key signs nothing: words that complete "backend.oauth.private_key …" (or
/// say what failed), never quoting the key.
#[derive(Debug)]
pub enum KeyProblem {
    NotSet,
    /// The PEM does not read (`ca::read_private_key`'s words).
    Unreadable(String),
    /// WebCrypto did not import it, and what it said.
    Import {
        alg: Alg,
        why: String,
    },
    /// WebCrypto imported it but did not sign, and what it said.
    Sign(String),
    /// No random `jti` to sign with.
    Random(Unavailable),
}

impl std::fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyProblem::NotSet => f.write_str("is not set"),
            KeyProblem::Unreadable(why) => f.write_str(why),
            KeyProblem::Import { alg, why } => write!(
                f,
                "could not be imported as {} signing key ({why})",
                if *alg == Alg::Es256 { "an ES256" } else { "an RS256" },
            ),
            KeyProblem::Sign(why) => write!(f, "could not sign ({why})"),
            KeyProblem::Random(e) => write!(f, "has no random jti to sign with: {e}"),
        }
    }
}

impl From<Unavailable> for KeyProblem {
    fn from(e: Unavailable) -> KeyProblem {
        KeyProblem::Random(e)
    }
}

/// A key refused before its app is stored: the problem, and the `$NAME` it came through (when
/// it did). A 400 on `backend.oauth.private_key`.
#[derive(Debug)]
pub struct BadKey {
    reference: Option<String>,
    problem: KeyProblem,
}

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reference {
            Some(name) => write!(f, "refers to {name}, which {}", self.problem),
            None => self.problem.fmt(f),
        }
    }
}

impl From<BadKey> for ApiError {
    fn from(e: BadKey) -> ApiError {
        ApiError::field("backend.oauth.private_key", format!("{e}"))
    }
}

/// Signs `data` with `key` (`None`: only imports it, as a check).
async fn sign(key: &PrivateKey, data: Option<&[u8]>) -> Result<Vec<u8>, KeyProblem> {
    let rt = Env::current();
    match rt.runtime().sign(&key.der, key.alg.import_params(), key.alg.verify_params(), data).await {
        Ok(signature) => Ok(signature),
        Err(SignError::Import(why)) => Err(KeyProblem::Import { alg: key.alg, why }),
        Err(SignError::Sign(why)) => Err(KeyProblem::Sign(why)),
    }
}

/// The key `pem` holds, for `configured` (or the algorithm the key is for).
fn read_key(pem: &str, configured: Option<Alg>) -> Result<PrivateKey, KeyProblem> {
    ca::read_private_key(pem, configured).map_err(KeyProblem::Unreadable)
}

/// A fresh client assertion for a token request to `token_url` (see [`ca::audience`]).
pub async fn assertion(cfg: &OAuthConfig, token_url: &str) -> Result<String, KeyProblem> {
    let pem = cfg.private_key.as_deref().ok_or(KeyProblem::NotSet)?;
    let key = read_key(pem, cfg.signing_alg)?;
    let mut jti = [0u8; 16];
    crate::runtime::fill_random(&mut jti)?;
    let jti = ca::b64url(&jti);
    let claims = Claims {
        client_id: &cfg.client_id,
        audience: ca::audience(cfg.issuer.as_deref(), token_url),
        key_id: cfg.key_id.as_deref(),
        now_s: crate::shell::platform::now_ms() / 1000,
        jti: &jti,
    };
    let input = ca::signing_input(key.alg, &claims);
    let signature = sign(&key, Some(input.as_bytes())).await?;
    Ok(ca::finish(&input, &signature))
}

/// Before an app is stored: its `backend.oauth.private_key`, when given as a literal or as a
/// `$NAME` that is set, must import. A sealed value (a kept `"***"`) was checked when it was
/// stored; an unset `$NAME` is reported at call time, like every other credential reference.
pub async fn check_key(env: &Env, backend: &Value) -> Result<(), BadKey> {
    let oauth = &backend["oauth"];
    let Some(value) = oauth["private_key"].as_str().filter(|v| !v.trim().is_empty()) else { return Ok(()) };
    if crate::pure::sealed::is_sealed(value) {
        return Ok(());
    }
    let Ok(pem) = crate::shell::secrets::resolve(env, value) else { return Ok(()) };
    let alg = oauth["signing_alg"].as_str().and_then(Alg::parse);
    let checked = match read_key(&pem, alg) {
        Ok(key) => sign(&key, None).await.map(|_| ()),
        Err(e) => Err(e),
    };
    let reference = (value != pem).then(|| value.to_string());
    checked.map_err(|problem| BadKey { reference, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key refused when its app is stored is a 400 on `backend.oauth.private_key`, saying
    /// the `$NAME` it came through when it did.
    #[test]
    fn a_bad_key_is_the_private_key_fields_fault() {
        let import = KeyProblem::Import { alg: Alg::Es256, why: "DataError".into() };
        let via = BadKey { reference: Some("$UPSTREAM_KEY".into()), problem: import };
        assert_eq!(
            via.to_string(),
            "refers to $UPSTREAM_KEY, which could not be imported as an ES256 signing key (DataError)"
        );
        let e = ApiError::from(via);
        assert_eq!((e.status, e.errors[0].field.as_str()), (400, "backend.oauth.private_key"));
        let direct = BadKey { reference: None, problem: KeyProblem::Sign("OperationError".into()) };
        assert_eq!(direct.to_string(), "could not sign (OperationError)");
        assert_eq!(KeyProblem::NotSet.to_string(), "is not set");
        assert!(KeyProblem::from(Unavailable).to_string().starts_with("has no random jti to sign with: "));
    }
}
