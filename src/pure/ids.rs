//! Identifiers and secrets: server codes, record ids, hashing, constant-time comparison.

use sha2::{Digest, Sha256};

pub const SERVER_CODE_LEN: usize = 16;
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// Largest multiple of 62 that fits in a byte: bytes at or above it are rejected so that
/// `byte % 62` is uniform (no modulo bias).
const REJECT_FROM: u8 = 248;

/// A source of random bytes (`pure::random::fill` in production, a fixed sequence in tests).
pub type FillBytes<'a> = dyn FnMut(&mut [u8]) -> Result<(), crate::pure::random::Unavailable> + 'a;

/// A 16-character `[A-Za-z0-9]` code drawn by rejection sampling from `fill`.
pub fn server_code_from(fill: &mut FillBytes<'_>) -> Result<String, crate::pure::random::Unavailable> {
    base62_from(fill, SERVER_CODE_LEN)
}

/// `len` characters of `[A-Za-z0-9]`, each uniform: bytes are drawn from `fill` and those at or
/// above [`REJECT_FROM`] are rejected, so `byte % 62` has no modulo bias.
pub fn base62_from(fill: &mut FillBytes<'_>, len: usize) -> Result<String, crate::pure::random::Unavailable> {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 32];
    while out.len() < len {
        fill(&mut buf)?;
        for &b in buf.iter().filter(|&&b| b < REJECT_FROM) {
            if out.len() == len {
                break;
            }
            out.push(ALPHABET[(b % 62) as usize] as char);
        }
    }
    Ok(out)
}

/// A fresh server code from the platform CSPRNG.
pub fn new_server_code() -> Result<String, crate::pure::random::Unavailable> {
    server_code_from(&mut crate::pure::random::fill)
}

/// Whether `s` has the shape of a server code; anything else cannot match and is refused early.
pub fn is_server_code_shape(s: &str) -> bool {
    s.len() == SERVER_CODE_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The last 4 characters, shown by the console so a person can tell codes apart.
pub fn code_hint(code: &str) -> &str {
    &code[code.len().saturating_sub(4)..]
}

/// A bearer secret as minted (client keys, console tokens): shown once, stored only as its
/// SHA-256 (`hash`) and `hint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintedSecret {
    pub secret: String,
    /// SHA-256 (hex) of `secret`: what D1 and the cache keep.
    pub hash: String,
    /// The last 4 characters, so a person can tell secrets apart.
    pub hint: String,
}

/// `prefix` then `chars` base62 characters drawn from `fill` without modulo bias (the server
/// codes' sampler); the recognizable prefix lets secret scanners and people spot a leak.
pub fn mint_secret(
    fill: &mut FillBytes<'_>,
    prefix: &str,
    chars: usize,
) -> Result<MintedSecret, crate::pure::random::Unavailable> {
    let secret = format!("{prefix}{}", base62_from(fill, chars)?);
    Ok(MintedSecret { hash: sha256_hex(&secret), hint: code_hint(&secret).to_string(), secret })
}

/// A fill that yields `start, start+1, …` (wrapping): the sampler's rejections made visible.
#[cfg(test)]
pub(crate) fn counting_fill(start: u8) -> impl FnMut(&mut [u8]) -> Result<(), crate::pure::random::Unavailable> {
    let mut next = start;
    move |buf: &mut [u8]| {
        for x in buf.iter_mut() {
            *x = next;
            next = next.wrapping_add(1);
        }
        Ok(())
    }
}

pub fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// A random (v4) UUID for records.
pub fn new_id() -> Result<String, crate::pure::random::Unavailable> {
    new_id_from(&mut crate::pure::random::fill)
}

/// A random (v4) UUID for records, its bytes from `fill`.
pub fn new_id_from(fill: &mut FillBytes<'_>) -> Result<String, crate::pure::random::Unavailable> {
    let mut b = [0u8; 16];
    fill(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    Ok(format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]))
}

/// Compares two secrets in time that depends on neither: both sides are hashed first, so
/// the length of the expected value does not leak either.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (ha, hb) = (Sha256::digest(a), Sha256::digest(b));
    same_length_eq(&ha, &hb)
}

/// Compares two values whose length is public (two SHA-256 digests, say) in time that depends
/// only on that length: every byte is looked at. Different lengths are simply unequal.
pub fn same_length_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_16_alphanumerics_and_differ() {
        let a = new_server_code().unwrap();
        let b = new_server_code().unwrap();
        assert!(is_server_code_shape(&a) && is_server_code_shape(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn bytes_at_or_above_248_are_rejected() {
        // First fill: only rejected bytes, then 0..=61 → "A".."9".
        let mut calls = 0;
        let mut fill = |buf: &mut [u8]| {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = if calls == 0 { 248 + (i % 8) as u8 } else { (i as u8) + 61 };
            }
            calls += 1;
            Ok(())
        };
        let code = server_code_from(&mut fill).unwrap();
        assert_eq!(calls, 2);
        // 61 → '9', 62 → 'A' (62 % 62 = 0), 63 → 'B', ...
        assert!(code.starts_with("9AB"), "{code}");
    }

    #[test]
    fn distribution_is_roughly_uniform() {
        let mut counts = [0u32; 62];
        for _ in 0..2000 {
            for c in new_server_code().unwrap().bytes() {
                counts[ALPHABET.iter().position(|&a| a == c).unwrap()] += 1;
            }
        }
        // 32000 draws, 516 expected per symbol; a biased or broken sampler leaves gaps.
        assert!(counts.iter().all(|&n| (350..700).contains(&n)), "{counts:?}");
    }

    #[test]
    fn hashing_and_hint() {
        assert_eq!(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(code_hint("aBcDeFgHiJkLmNoP"), "mNoP");
        assert!(!is_server_code_shape("short"));
        assert!(!is_server_code_shape("aBcDeFgHiJkLmNo!"));
    }

    #[test]
    fn uuid_shape() {
        let id = new_id().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret-longer"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(same_length_eq(b"abcd", b"abcd"));
        assert!(!same_length_eq(b"abcd", b"abce"));
        assert!(!same_length_eq(b"abcd", b"abc"));
        assert!(same_length_eq(b"", b""));
    }

    #[test]
    fn base62_of_any_length() {
        let mut fill = |buf: &mut [u8]| {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = i as u8;
            }
            Ok(())
        };
        // 32 bytes a fill: 0..=31 → "A".."f", then again from "A".
        let s = base62_from(&mut fill, 40).unwrap();
        assert_eq!(s.len(), 40);
        assert!(s.starts_with("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefABCDEFGH"), "{s}");
        assert_eq!(base62_from(&mut fill, 0).unwrap(), "");
    }
}
