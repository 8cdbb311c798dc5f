//! Base64 (RFC 4648) in the two forms Flowgate reads and writes: the standard alphabet with
//! padding (keys, PEM bodies, HTTP Basic credentials, encoded header values) and the URL-safe
//! alphabet without padding (sealed values, JWTs, cursors). Written out rather than taken from
//! the `base64` crate, whose generic engine was four times the size in the bundle; the tests hold
//! both directions to that crate's `STANDARD` and `URL_SAFE_NO_PAD`, strictness included: a
//! decode refuses bad characters, misplaced or missing padding and non-zero trailing bits.

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The text is not base64 of the expected form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// Standard alphabet, padded.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    encode_with(bytes.as_ref(), STANDARD, true)
}

/// URL-safe alphabet, no padding.
pub fn encode_url(bytes: impl AsRef<[u8]>) -> String {
    encode_with(bytes.as_ref(), URL_SAFE, false)
}

/// Standard alphabet, padded.
pub fn decode(text: impl AsRef<[u8]>) -> Result<Vec<u8>, Invalid> {
    let text = text.as_ref();
    if text.len() % 4 != 0 {
        return Err(Invalid);
    }
    // At most two `=`, and only at the end; a third is left in and refused as a character.
    let body = text.strip_suffix(b"=").map_or(text, |t| t.strip_suffix(b"=").unwrap_or(t));
    decode_with(body, STANDARD)
}

/// URL-safe alphabet, no padding.
pub fn decode_url(text: impl AsRef<[u8]>) -> Result<Vec<u8>, Invalid> {
    decode_with(text.as_ref(), URL_SAFE)
}

fn encode_with(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = byte(0) << 16 | byte(1) << 8 | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(alphabet[(group >> (18 - 6 * i) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// Unpadded `body`: 2 or 3 characters may end it (1 or 2 bytes), never 1, and the bits the last
/// character carries past the bytes must be zero, so that each byte string has one encoding.
fn decode_with(body: &[u8], alphabet: &[u8; 64]) -> Result<Vec<u8>, Invalid> {
    if body.len() % 4 == 1 {
        return Err(Invalid);
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    let (mut bits, mut count) = (0u32, 0u32);
    for &c in body {
        let value = alphabet.iter().position(|&a| a == c).ok_or(Invalid)?;
        bits = bits << 6 | value as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    if bits != 0 {
        return Err(Invalid);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::test_rng::Rng;
    use base64::engine::general_purpose::{STANDARD as CRATE_STANDARD, URL_SAFE_NO_PAD as CRATE_URL};
    use base64::Engine;

    #[test]
    fn encodes_as_the_base64_crate_does() {
        let mut rng = Rng(0x05ee_db64);
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            assert_eq!(encode(&bytes), CRATE_STANDARD.encode(&bytes));
            assert_eq!(encode_url(&bytes), CRATE_URL.encode(&bytes));
            assert_eq!(decode(encode(&bytes)), Ok(bytes.clone()));
            assert_eq!(decode_url(encode_url(&bytes)), Ok(bytes));
        }
        assert_eq!(encode("client+id:p%3Ass"), "Y2xpZW50K2lkOnAlM0Fzcw==");
    }

    #[test]
    fn decodes_exactly_what_the_base64_crate_decodes() {
        let mut rng = Rng(0x00de_c0de);
        let symbols = b"AQgw+/-_=Zz09 .\n";
        let mut accepted = 0;
        for _ in 0..50_000 {
            let text: Vec<u8> = (0..rng.below(13)).map(|_| symbols[rng.below(symbols.len() as u64) as usize]).collect();
            let ours = decode(&text).ok();
            assert_eq!(ours, CRATE_STANDARD.decode(&text).ok(), "{:?}", String::from_utf8_lossy(&text));
            assert_eq!(decode_url(&text).ok(), CRATE_URL.decode(&text).ok(), "{:?}", String::from_utf8_lossy(&text));
            accepted += usize::from(ours.is_some());
        }
        // The generator reaches valid texts often, not only refusals.
        assert!(accepted > 500, "{accepted}");
        for bad in ["QQ", "QQ=", "QR==", "Q===", "QQ==QQ==", "QUJD=", "Q", "QU I="] {
            assert_eq!(decode(bad), Err(Invalid), "{bad:?}");
        }
        for bad in ["QQ==", "QR", "Q", "a+b/"] {
            assert_eq!(decode_url(bad), Err(Invalid), "{bad:?}");
        }
        assert_eq!(decode(""), Ok(Vec::new()));
        assert_eq!(decode("QUJD"), Ok(b"ABC".to_vec()));
    }
}
