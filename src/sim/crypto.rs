//! A WebCrypto stand-in: deterministic keyed "signatures" that sign and verify consistently.
//!
//! The simulator has no RSA or ECDSA. It checks the shell's USE of WebCrypto (which key it
//! imports with which parameters, which bytes it signs or verifies, what it does with the
//! answer), not the algorithms: the integration tests run the real ones under workerd.
//!
//! A stand-in signature is SHA-256 over (algorithm name, key identity, data). A public JWK's
//! identity is its `n` (RSA) or `x` (EC); a PKCS#8 key's is the hex SHA-256 of its bytes, so
//! [`SimKey`] can publish the JWK that verifies what its PKCS#8 bytes sign.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::runtime::{Error, Kind, Result, SignError};

/// The WebCrypto algorithm a JWK's `kty` goes with.
fn algorithm_of_kty(kty: &str) -> Option<&'static str> {
    match kty {
        "RSA" => Some("RSASSA-PKCS1-v1_5"),
        "EC" => Some("ECDSA"),
        _ => None,
    }
}

fn algorithm_name(params: &str) -> Option<String> {
    let v: Value = serde_json::from_str(params).ok()?;
    v.get("name")?.as_str().map(str::to_string)
}

pub fn stand_in_signature(algorithm: &str, identity: &str, data: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"flowgate-sim-signature\0");
    h.update(algorithm.as_bytes());
    h.update(b"\0");
    h.update(identity.as_bytes());
    h.update(b"\0");
    h.update(data);
    h.finalize().to_vec()
}

fn pkcs8_identity(pkcs8: &[u8]) -> String {
    Sha256::digest(pkcs8).iter().map(|b| format!("{b:02x}")).collect()
}

/// `Runtime::verify_signature`: `Err` where `importKey` would throw (an unknown key type, an
/// algorithm that does not fit the key), else whether the stand-in signature matches.
pub fn verify(jwk: &str, import: &str, verify: &str, signature: &[u8], data: &[u8]) -> Result<bool> {
    let key: Value =
        serde_json::from_str(jwk).map_err(|_| Error::new(Kind::Crypto, "DataError: the JWK is not JSON"))?;
    let kty = key.get("kty").and_then(Value::as_str).unwrap_or("");
    let fits =
        algorithm_of_kty(kty).ok_or_else(|| Error::new(Kind::Crypto, format!("DataError: unsupported kty {kty:?}")))?;
    let name = algorithm_name(import)
        .ok_or_else(|| Error::new(Kind::Crypto, "TypeError: import parameters without a name"))?;
    if name != fits {
        return Err(Error::new(Kind::Crypto, format!("DataError: a {kty} key cannot be imported for {name}")));
    }
    if algorithm_name(verify).as_deref() != Some(fits) {
        return Err(Error::new(Kind::Crypto, "InvalidAccessError: verify parameters do not match the key"));
    }
    let field = if kty == "RSA" { "n" } else { "x" };
    let identity = key
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::new(Kind::Crypto, format!("DataError: the JWK has no {field}")))?;
    Ok(signature == stand_in_signature(fits, identity, data).as_slice())
}

/// `Runtime::sign`.
pub fn sign(pkcs8: &[u8], import: &str, sign: &str, data: Option<&[u8]>) -> Result<Vec<u8>, SignError> {
    let name = algorithm_name(import).ok_or_else(|| SignError::Import("import parameters without a name".into()))?;
    if pkcs8.is_empty() || !matches!(name.as_str(), "RSASSA-PKCS1-v1_5" | "ECDSA") {
        return Err(SignError::Import(format!("the key does not import as {name}")));
    }
    let Some(data) = data else { return Ok(Vec::new()) };
    if algorithm_name(sign).as_deref() != Some(name.as_str()) {
        return Err(SignError::Sign("sign parameters do not match the key".into()));
    }
    Ok(stand_in_signature(&name, &pkcs8_identity(pkcs8), data))
}

/// A stand-in key pair: PKCS#8 bytes for `sign`, the public JWK for `verify_signature`.
#[derive(Debug, Clone)]
pub struct SimKey {
    pub kid: String,
    /// "RS256" or "ES256".
    pub alg: String,
    pub pkcs8: Vec<u8>,
}

impl SimKey {
    pub fn new(kid: &str, alg: &str) -> SimKey {
        SimKey { kid: kid.to_string(), alg: alg.to_string(), pkcs8: format!("sim-pkcs8:{alg}:{kid}").into_bytes() }
    }

    fn algorithm(&self) -> &'static str {
        if self.alg == "ES256" {
            "ECDSA"
        } else {
            "RSASSA-PKCS1-v1_5"
        }
    }

    pub fn jwk(&self) -> Value {
        let id = pkcs8_identity(&self.pkcs8);
        if self.alg == "ES256" {
            json!({"kty": "EC", "crv": "P-256", "x": id, "y": id, "kid": self.kid, "alg": self.alg, "use": "sig"})
        } else {
            json!({"kty": "RSA", "n": id, "e": "AQAB", "kid": self.kid, "alg": self.alg, "use": "sig"})
        }
    }

    /// What the shell's `sign` with these PKCS#8 bytes gives, and its `verify` accepts.
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        stand_in_signature(self.algorithm(), &pkcs8_identity(&self.pkcs8), data)
    }

    /// A compact JWS of `claims` (header `alg`, `typ: at+jwt`, `kid`).
    pub fn jwt(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg, "typ": "at+jwt", "kid": self.kid});
        self.jwt_with_header(&header, claims)
    }

    pub fn jwt_with_header(&self, header: &Value, claims: &Value) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let input = format!("{}.{}", b64.encode(header.to_string()), b64.encode(claims.to_string()));
        let sig = self.sign(input.as_bytes());
        format!("{input}.{}", b64.encode(sig))
    }
}
