//! `private_key_jwt` with WebCrypto: the client's PKCS#8 key imported (not extractable), the
//! assertion `pure::backend::mcp::client_assertion` builds signed with it, and the same import
//! when an app is stored, so a key WebCrypto cannot use is refused then rather than at the
//! first call.

use serde_json::Value;

use crate::pure::backend::mcp::client_assertion::{self as ca, Alg, Claims, PrivateKey};
use crate::pure::backend::mcp::oauth::OAuthConfig;
use crate::runtime::{Env, SignError};

/// What WebCrypto said when the key did not import, in the words the console shows.
fn import_failed(key: &PrivateKey, why: &str) -> String {
    format!(
        "could not be imported as {} signing key ({why})",
        if key.alg == Alg::Es256 { "an ES256" } else { "an RS256" },
    )
}

/// Signs `data` with `key` (`None`: only imports it, as a check).
async fn sign(key: &PrivateKey, data: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let rt = Env::current();
    match rt.runtime().sign(&key.der, key.alg.import_params(), key.alg.verify_params(), data).await {
        Ok(signature) => Ok(signature),
        Err(SignError::Import(why)) => Err(import_failed(key, &why)),
        Err(SignError::Sign(why)) => Err(format!("could not sign ({why})")),
    }
}

/// A fresh client assertion for a token request to `token_url` (see [`ca::audience`]). Errors
/// complete "backend.oauth.private_key …" or say what failed, never quoting the key.
pub async fn assertion(cfg: &OAuthConfig, token_url: &str) -> Result<String, String> {
    let pem = cfg.private_key.as_deref().ok_or("is not set")?;
    let key = ca::read_private_key(pem, cfg.signing_alg)?;
    let mut jti = [0u8; 16];
    crate::runtime::fill_random(&mut jti).map_err(|e| format!("has no random jti to sign with: {e}"))?;
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
/// `$NAME` that is set, must import. `Err` completes "backend.oauth.private_key …". A sealed
/// value (a kept `"***"`) was checked when it was stored; an unset `$NAME` is reported at call
/// time, like every other credential reference.
pub async fn check_key(env: &Env, backend: &Value) -> Result<(), String> {
    let oauth = &backend["oauth"];
    let Some(value) = oauth["private_key"].as_str().filter(|v| !v.trim().is_empty()) else { return Ok(()) };
    if crate::pure::sealed::is_sealed(value) {
        return Ok(());
    }
    let Ok(pem) = crate::shell::secrets::resolve(env, value) else { return Ok(()) };
    let alg = oauth["signing_alg"].as_str().and_then(Alg::parse);
    let checked = match ca::read_private_key(&pem, alg) {
        Ok(key) => sign(&key, None).await.map(|_| ()),
        Err(e) => Err(e),
    };
    checked.map_err(|e| if value == pem { e } else { format!("refers to {value}, which {e}") })
}
