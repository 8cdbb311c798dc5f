//! `private_key_jwt` with WebCrypto: the client's PKCS#8 key imported (not extractable), the
//! assertion `pure::backend::mcp::client_assertion` builds signed with it, and the same import
//! when an app is stored, so a key WebCrypto cannot use is refused then rather than at the
//! first call.

use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{self, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::web_sys::{Crypto, CryptoKey, SubtleCrypto};
use worker::Env;

use crate::pure::backend::mcp::client_assertion::{self as ca, Alg, Claims, PrivateKey};
use crate::pure::backend::mcp::oauth::OAuthConfig;

fn subtle() -> Result<SubtleCrypto, String> {
    let crypto: Crypto =
        Reflect::get(&js_sys::global(), &JsValue::from_str("crypto")).map_err(js_error)?.unchecked_into();
    Ok(crypto.subtle())
}

/// WebCrypto's reason (its error's name and message), which never holds key material.
fn js_error(e: JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => format!("{}: {}", String::from(err.name()), String::from(err.message())),
        None => e.as_string().unwrap_or_else(|| "unknown error".into()),
    }
}

fn params(json: &str) -> Result<js_sys::Object, String> {
    Ok(JSON::parse(json).map_err(js_error)?.unchecked_into())
}

async fn import(subtle: &SubtleCrypto, key: &PrivateKey) -> Result<CryptoKey, String> {
    let data: js_sys::Object = js_sys::Uint8Array::from(key.der.as_slice()).unchecked_into();
    let usages = js_sys::Array::of1(&JsValue::from_str("sign"));
    let promise = subtle
        .import_key_with_object("pkcs8", &data, &params(key.alg.import_params())?, false, &usages)
        .map_err(js_error)?;
    let imported = JsFuture::from(promise).await.map_err(|e| {
        format!(
            "could not be imported as {} signing key ({})",
            if key.alg == Alg::Es256 { "an ES256" } else { "an RS256" },
            js_error(e)
        )
    })?;
    Ok(imported.unchecked_into())
}

/// A fresh client assertion for a token request to `token_url` (see [`ca::audience`]). Errors
/// complete "backend.oauth.private_key …" or say what failed, never quoting the key.
pub async fn assertion(cfg: &OAuthConfig, token_url: &str) -> Result<String, String> {
    let pem = cfg.private_key.as_deref().ok_or("is not set")?;
    let key = ca::read_private_key(pem, cfg.signing_alg)?;
    let subtle = subtle()?;
    let crypto_key = import(&subtle, &key).await?;
    let mut jti = [0u8; 16];
    crate::pure::random::fill(&mut jti).map_err(|e| format!("has no random jti to sign with: {e}"))?;
    let jti = ca::b64url(&jti);
    let claims = Claims {
        client_id: &cfg.client_id,
        audience: ca::audience(cfg.issuer.as_deref(), token_url),
        key_id: cfg.key_id.as_deref(),
        now_s: super::platform::now_ms() / 1000,
        jti: &jti,
    };
    let input = ca::signing_input(key.alg, &claims);
    let promise = subtle
        .sign_with_object_and_u8_array(&params(key.alg.verify_params())?, &crypto_key, input.as_bytes())
        .map_err(js_error)?;
    let signature = JsFuture::from(promise).await.map_err(|e| format!("could not sign ({})", js_error(e)))?;
    Ok(ca::finish(&input, &js_sys::Uint8Array::new(&signature).to_vec()))
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
    let Ok(pem) = super::secrets::resolve(env, value) else { return Ok(()) };
    let alg = oauth["signing_alg"].as_str().and_then(Alg::parse);
    let checked = match ca::read_private_key(&pem, alg) {
        Ok(key) => import(&subtle()?, &key).await.map(|_| ()),
        Err(e) => Err(e),
    };
    checked.map_err(|e| if value == pem { e } else { format!("refers to {value}, which {e}") })
}
