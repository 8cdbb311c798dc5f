//! Literal backend credentials at rest: sealed with AES-256-GCM under a key held as a Worker
//! secret (`SECRETS_KEY`), stored as `enc:v1:<base64url(nonce ‖ ciphertext ‖ tag)>`. Opening
//! tries the current key, then `SECRETS_KEY_PREVIOUS`, so the key can be rotated without a
//! moment where stored credentials cannot be read.

use super::base64;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};

const PREFIX: &str = "enc:v1:";

pub fn is_sealed(s: &str) -> bool {
    s.starts_with(PREFIX)
}

/// Why a credential arriving through the console may not be a sealed value (completing "the
/// field …"): Flowgate opens sealed values and sends them to the app's backend, so one copied
/// from a database export would be decrypted for whoever chose that backend.
pub const REFUSED_FROM_CONSOLE: &str = "is a sealed value (enc:v1:…), which Flowgate never takes from the console: \
     send the credential itself (Flowgate seals it), a $NAME reference, or \"***\" to keep the stored one";

/// A 32-byte key from its configured form: 64 hex characters or base64 of 32 bytes.
pub fn parse_key(s: &str) -> Result<[u8; 32], String> {
    let s = s.trim();
    let bytes = if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0)).collect::<Vec<u8>>()
    } else {
        base64::decode(s)
            .or_else(|_| base64::decode_url(s))
            .map_err(|_| "must be 64 hex characters or the base64 of 32 random bytes".to_string())?
    };
    bytes.try_into().map_err(|_| "must be exactly 32 bytes (64 hex characters)".to_string())
}

/// Why a value was not sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// AES-GCM refused to encrypt (a plaintext beyond its limit).
    SealingFailed,
    /// Not a sealed value, or not one that decrypts to text.
    Damaged,
    /// None of the keys authenticates it.
    UnknownKey,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::SealingFailed => "sealing failed",
            Error::Damaged => "the stored credential is damaged",
            Error::UnknownKey => {
                "the stored credential was sealed with a key this Worker does not have (SECRETS_KEY / SECRETS_KEY_PREVIOUS)"
            }
        })
    }
}

/// For the callers that still speak in words (`pure::mcp::relay`).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// Seals `plaintext` under `key` with a fresh 96-bit `nonce` (from the CSPRNG; never reused).
pub fn seal(key: &[u8; 32], nonce: [u8; 12], plaintext: &str) -> Result<String, Error> {
    seal_bound(key, nonce, plaintext, b"")
}

/// Opens a sealed value with the first of `keys` that authenticates it.
pub fn open(keys: &[[u8; 32]], sealed: &str) -> Result<String, Error> {
    open_bound(keys, sealed, b"")
}

/// [`seal`] with associated data `bound_to` (authenticated, not stored): the value opens only
/// with the same `bound_to`, so a sealed server code copied to another row, or into an app's
/// credentials, does not open there.
pub fn seal_bound(key: &[u8; 32], nonce: [u8; 12], plaintext: &str, bound_to: &[u8]) -> Result<String, Error> {
    let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key));
    let payload = Payload { msg: plaintext.as_bytes(), aad: bound_to };
    let ct = cipher.encrypt(Nonce::from_slice(&nonce), payload).map_err(|_| Error::SealingFailed)?;
    let mut out = Vec::with_capacity(12 + ct.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    Ok(format!("{PREFIX}{}", base64::encode_url(out)))
}

/// Opens a value [`seal_bound`] sealed to `bound_to` (`b""`: one [`seal`] sealed).
pub fn open_bound(keys: &[[u8; 32]], sealed: &str, bound_to: &[u8]) -> Result<String, Error> {
    let data = sealed
        .strip_prefix(PREFIX)
        .and_then(|b| base64::decode_url(b).ok())
        // Nonce and tag at least (an empty value seals to just these).
        .filter(|d| d.len() >= 12 + 16)
        .ok_or(Error::Damaged)?;
    let (nonce, ct) = data.split_at(12);
    for key in keys {
        let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key));
        if let Ok(pt) = cipher.decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: bound_to }) {
            return String::from_utf8(pt).map_err(|_| Error::Damaged);
        }
    }
    Err(Error::UnknownKey)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: [u8; 32] = [7u8; 32];
    const K2: [u8; 32] = [9u8; 32];

    #[test]
    fn round_trip_and_rotation() {
        let sealed = seal(&K1, [1u8; 12], "app-secret").unwrap();
        assert!(is_sealed(&sealed));
        assert!(!sealed.contains("app-secret"));
        assert_eq!(open(&[K1], &sealed).unwrap(), "app-secret");
        // After rotation the old key is the previous one and still opens it.
        assert_eq!(open(&[K2, K1], &sealed).unwrap(), "app-secret");
        assert_eq!(open(&[K2], &sealed), Err(Error::UnknownKey));
        assert!(Error::UnknownKey.to_string().contains("SECRETS_KEY"));
        // Different nonces give different ciphertexts for the same secret.
        assert_ne!(sealed, seal(&K1, [2u8; 12], "app-secret").unwrap());
    }

    /// An empty value seals to nonce and tag alone, and opens (found by the sealed_ids fuzz
    /// target: it was called damaged).
    #[test]
    fn an_empty_value_round_trips() {
        let sealed = seal(&K1, [4u8; 12], "").unwrap();
        assert_eq!(open(&[K1], &sealed), Ok(String::new()));
        assert!(open(&[K2], &sealed).is_err());
    }

    #[test]
    fn tampering_is_detected() {
        let sealed = seal(&K1, [3u8; 12], "x").unwrap();
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert!(open(&[K1], &String::from_utf8(bytes).unwrap()).is_err());
        assert_eq!(open(&[K1], "enc:v1:short"), Err(Error::Damaged));
    }

    /// A value sealed to one context opens only there: not unbound (as an app credential is
    /// opened), not under another server's id.
    #[test]
    fn bound_values_open_only_in_their_context() {
        let sealed = seal_bound(&K1, [5u8; 12], "AbCdEfGh12345678", b"server-1").unwrap();
        assert_eq!(open_bound(&[K1], &sealed, b"server-1").unwrap(), "AbCdEfGh12345678");
        assert!(open_bound(&[K1], &sealed, b"server-2").is_err());
        assert!(open(&[K1], &sealed).is_err());
        // Unbound sealing is the empty context: the values stored before still open.
        let plain = seal(&K1, [6u8; 12], "x").unwrap();
        assert_eq!(open_bound(&[K1], &plain, b""), Ok("x".into()));
        assert!(open_bound(&[K1], &plain, b"server-1").is_err());
    }

    #[test]
    fn keys() {
        assert_eq!(parse_key(&"ab".repeat(32)).unwrap(), [0xab; 32]);
        let b64 = base64::encode([5u8; 32]);
        assert_eq!(parse_key(&b64).unwrap(), [5u8; 32]);
        assert!(parse_key("too short").is_err());
    }
}
