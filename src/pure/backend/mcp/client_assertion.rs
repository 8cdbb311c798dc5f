//! `private_key_jwt` client authentication (RFC 7523 §2.2, RFC 7521 §4.2): the client's private
//! key as the admin gives it (PKCS#8 PEM), read far enough to know its kind and so its signing
//! algorithm, and the JWT that a token request carries as `client_assertion`. WebCrypto signs
//! (`shell::client_assertion`); this builds what it signs.

use crate::json;
use crate::pure::base64;
use serde_json::{Map, Value};

pub use crate::pure::oauth_resource::Alg;

/// RFC 7523 §2.2's `client_assertion_type`.
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// An assertion is used at once; a minute covers clock skew and a slow token endpoint, and a
/// stolen one is worthless soon after.
pub const ASSERTION_LIFETIME_S: u64 = 60;

/// A private key ready for WebCrypto's `importKey("pkcs8", ...)`: its DER and the algorithm
/// it signs with.
#[derive(Clone, PartialEq)]
pub struct PrivateKey {
    pub der: Vec<u8>,
    pub alg: Alg,
}

/// Key material stays out of debug output.
impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey").field("alg", &self.alg).finish_non_exhaustive()
    }
}

pub fn alg_name(alg: Alg) -> &'static str {
    match alg {
        Alg::Es256 => "ES256",
        Alg::Rs256 => "RS256",
    }
}

const PKCS8_HINT: &str = "convert it with `openssl pkcs8 -topk8 -nocrypt -in key.pem`";

/// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`) of an RSA or P-256 EC key.
/// `configured` (`signing_alg`) must fit the key; absent, the key's kind chooses (EC P-256:
/// ES256, RSA: RS256). Errors complete "backend.oauth.private_key …" and never quote the key.
pub fn read_private_key(pem: &str, configured: Option<Alg>) -> Result<PrivateKey, String> {
    // A PEM pasted from an environment file may carry `\n` escapes instead of line breaks.
    let text = pem.trim().replace("\\n", "\n");
    if text.starts_with('{') {
        return Err("looks like a JWK; Flowgate takes the key as PKCS#8 PEM (-----BEGIN PRIVATE KEY-----)".into());
    }
    let label = text
        .strip_prefix("-----BEGIN ")
        .and_then(|rest| rest.split_once("-----"))
        .map(|(label, _)| label)
        .ok_or("is not a PEM private key: it must start with -----BEGIN PRIVATE KEY----- (PKCS#8)")?;
    match label {
        "PRIVATE KEY" => {}
        "EC PRIVATE KEY" | "RSA PRIVATE KEY" => {
            return Err(format!("is a {label} (SEC 1 / PKCS#1) PEM; Flowgate takes PKCS#8: {PKCS8_HINT}"))
        }
        "ENCRYPTED PRIVATE KEY" => {
            return Err(format!("is encrypted; Flowgate needs the key unencrypted (stored sealed): {PKCS8_HINT}"))
        }
        "PUBLIC KEY" | "CERTIFICATE" => {
            let what = if label == "CERTIFICATE" { "certificate" } else { "public key" };
            return Err(format!(
                "is a {what}, not a private key; the authorization server keeps the public half, Flowgate the private one"
            ));
        }
        _ => return Err("is a PEM block of another kind; it must be -----BEGIN PRIVATE KEY----- (PKCS#8)".into()),
    }
    let end = format!("-----END {label}-----");
    let body_start = text.find('\n').ok_or("is a PEM block without a body")?;
    let body = text[body_start..].split(end.as_str()).next().filter(|_| text.contains(end.as_str()));
    let body = body.ok_or_else(|| format!("has no {end} line"))?;
    let b64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::decode(b64).map_err(|_| "has a PEM body that is not base64".to_string())?;
    let kind = pkcs8_kind(&der).ok_or("is not a PKCS#8 private key (its DER structure does not read as one)")?;
    let alg = match kind {
        KeyKind::Rsa => Alg::Rs256,
        KeyKind::P256 => Alg::Es256,
        KeyKind::Other(what) => {
            return Err(format!("is {what}; Flowgate signs ES256 (an EC key on P-256) or RS256 (an RSA key)"))
        }
    };
    match configured {
        Some(c) if c != alg => Err(format!(
            "is {} key, but backend.oauth.signing_alg is {}, which needs {}",
            kind_words(alg),
            alg_name(c),
            kind_words(c)
        )),
        _ => Ok(PrivateKey { der, alg }),
    }
}

fn kind_words(alg: Alg) -> &'static str {
    match alg {
        Alg::Es256 => "an EC P-256",
        Alg::Rs256 => "an RSA",
    }
}

#[derive(Debug, PartialEq)]
enum KeyKind {
    Rsa,
    P256,
    Other(&'static str),
}

const OID_RSA: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01];
const OID_RSA_PSS: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0A];
const OID_EC: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x23];
const OID_ED25519: &[u8] = &[0x2B, 0x65, 0x70];

/// PrivateKeyInfo ::= SEQUENCE { version INTEGER, AlgorithmIdentifier SEQUENCE { OID, params },
/// privateKey OCTET STRING, ... } (RFC 5208): the algorithm and, for EC, the curve. WebCrypto
/// checks the rest when it imports the key.
fn pkcs8_kind(der: &[u8]) -> Option<KeyKind> {
    let (0x30, info, _) = tlv(der)? else { return None };
    let (0x02, _, rest) = tlv(info)? else { return None };
    let (0x30, alg_id, rest) = tlv(rest)? else { return None };
    let (0x04, _, _) = tlv(rest)? else { return None };
    let (0x06, oid, params) = tlv(alg_id)? else { return None };
    let curve = tlv(params).and_then(|(tag, c, _)| (tag == 0x06).then_some(c));
    Some(match oid {
        OID_RSA => KeyKind::Rsa,
        OID_RSA_PSS => KeyKind::Other("an RSA-PSS key"),
        OID_ED25519 => KeyKind::Other("an Ed25519 key"),
        OID_EC => match curve? {
            OID_P256 => KeyKind::P256,
            OID_P384 => KeyKind::Other("an EC key on P-384"),
            OID_P521 => KeyKind::Other("an EC key on P-521"),
            _ => KeyKind::Other("an EC key on a curve other than P-256"),
        },
        _ => KeyKind::Other("a key of an algorithm other than RSA or EC"),
    })
}

/// One DER element: (tag, contents, what follows). Definite lengths only, as DER has.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7F) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// What one assertion says: the client (`iss` and `sub`), the authorization server it is for
/// (`aud`), when, and a `jti` never used before.
pub struct Claims<'a> {
    pub client_id: &'a str,
    pub audience: &'a str,
    pub key_id: Option<&'a str>,
    pub now_s: u64,
    pub jti: &'a str,
}

/// The JWS signing input `base64url(header) "." base64url(claims)`.
pub fn signing_input(alg: Alg, c: &Claims) -> String {
    let mut header = Map::new();
    header.insert("alg".into(), json!(alg_name(alg)));
    header.insert("typ".into(), json!("JWT"));
    if let Some(kid) = c.key_id {
        header.insert("kid".into(), json!(kid));
    }
    let claims = json!({
        "iss": c.client_id,
        "sub": c.client_id,
        "aud": c.audience,
        "iat": c.now_s,
        "exp": c.now_s + ASSERTION_LIFETIME_S,
        "jti": c.jti,
    });
    format!("{}.{}", b64url(Value::Object(header).to_string().as_bytes()), b64url(claims.to_string().as_bytes()))
}

/// The compact JWS: the signing input and its signature (for ES256 WebCrypto's r || s, which
/// is JWS's form as it is).
pub fn finish(input: &str, signature: &[u8]) -> String {
    format!("{input}.{}", b64url(signature))
}

pub fn b64url(bytes: &[u8]) -> String {
    base64::encode_url(bytes)
}

/// The `aud` of an assertion: the issuer when it is named (RFC 7523bis: the authorization
/// server's issuer identifier), else the configured token endpoint (RFC 7523 §3).
pub fn audience<'a>(issuer: Option<&'a str>, token_url: &'a str) -> &'a str {
    issuer.unwrap_or(token_url)
}

/// The token request's client authentication fields.
pub fn add_to_form(form: &mut Vec<(String, String)>, assertion: String) {
    form.push(("client_assertion_type".into(), ASSERTION_TYPE.into()));
    form.push(("client_assertion".into(), assertion));
}

#[cfg(test)]
mod tests {
    use super::*;

    // A P-256 key made for this test (node crypto.generateKeyPairSync), used nowhere else.
    const P256: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQggNb8o43TTwFIOgY/
FvngVFRO6od/UE/tn5P2rMLEPXWhRANCAAQo57sMF13lGunFkYp4L0CYhhjFcmWF
2ui0vMqSTT2jtDXOhGQFOAXrv/dKNx8dzEe03iE29J4KeTgB2079YlmQ
-----END PRIVATE KEY-----";

    /// A PKCS#8 DER with `alg` and `params` (a minimal private key octet string).
    fn pem_of(alg_id: &[u8]) -> String {
        let mut alg = vec![0x30, alg_id.len() as u8];
        alg.extend_from_slice(alg_id);
        let mut info = vec![0x02, 0x01, 0x00];
        info.extend(alg);
        info.extend([0x04, 0x02, 0x30, 0x00]);
        let mut der = vec![0x30, info.len() as u8];
        der.extend(info);
        format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", base64::encode(der))
    }

    fn oid(o: &[u8]) -> Vec<u8> {
        let mut v = vec![0x06, o.len() as u8];
        v.extend_from_slice(o);
        v
    }

    #[test]
    fn reads_pkcs8_keys_and_their_algorithm() {
        let k = read_private_key(P256, None).unwrap();
        assert_eq!(k.alg, Alg::Es256);
        assert_eq!(k.der[0], 0x30);
        assert_eq!(read_private_key(P256, Some(Alg::Es256)).unwrap().alg, Alg::Es256);
        // Escaped line breaks, CRLF and surrounding blanks are all the same key.
        assert_eq!(read_private_key(&P256.replace('\n', "\\n"), None).unwrap(), k);
        assert_eq!(read_private_key(&format!("  {}\r\n", P256.replace('\n', "\r\n")), None).unwrap(), k);
        let mut rsa = oid(OID_RSA);
        rsa.extend([0x05, 0x00]);
        assert_eq!(read_private_key(&pem_of(&rsa), None).unwrap().alg, Alg::Rs256);
        assert!(!format!("{k:?}").contains("der"), "no key bytes in debug output");
    }

    #[test]
    fn refuses_what_it_cannot_sign_with_in_words() {
        let err = |pem: &str, alg| read_private_key(pem, alg).unwrap_err();
        let mut rsa = oid(OID_RSA);
        rsa.extend([0x05, 0x00]);
        let e = err(&pem_of(&rsa), Some(Alg::Es256));
        assert!(e.contains("is an RSA key") && e.contains("signing_alg is ES256") && e.contains("EC P-256"), "{e}");
        assert!(err(P256, Some(Alg::Rs256)).contains("is an EC P-256 key"));
        let mut p384 = oid(OID_EC);
        p384.extend(oid(OID_P384));
        assert!(err(&pem_of(&p384), None).contains("P-384"));
        assert!(err(&pem_of(&oid(OID_ED25519)), None).contains("Ed25519"));
        for (pem, needle) in [
            ("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----", "openssl pkcs8 -topk8"),
            ("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----", "PKCS#1"),
            ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----", "encrypted"),
            ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "public key, not a private key"),
            ("{\"kty\":\"EC\"}", "JWK"),
            ("s3cret", "must start with -----BEGIN PRIVATE KEY-----"),
            ("-----BEGIN PRIVATE KEY-----\nAAAA", "no -----END PRIVATE KEY----- line"),
            ("-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----", "not base64"),
            ("-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----", "not a PKCS#8"),
        ] {
            let e = err(pem, None);
            assert!(e.contains(needle), "{pem}: {e}");
            assert!(!e.contains("AAAA") && !e.contains("MAA"), "the key is never quoted: {e}");
        }
        // A truncated DER (a length past the end) is not read past its end.
        let k = read_private_key(P256, None).unwrap();
        let cut = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----", base64::encode(&k.der[..40]));
        assert!(err(&cut, None).contains("not a PKCS#8"));
    }

    #[test]
    fn assertion_header_and_claims() {
        let c =
            Claims { client_id: "cid", audience: "https://as.example", key_id: Some("k1"), now_s: 1000, jti: "j-1" };
        let input = signing_input(Alg::Es256, &c);
        let (h, p) = input.split_once('.').unwrap();
        let part = |s: &str| -> Value { serde_json::from_slice(&base64::decode_url(s).unwrap()).unwrap() };
        assert_eq!(part(h), json!({"alg": "ES256", "typ": "JWT", "kid": "k1"}));
        assert_eq!(
            part(p),
            json!({"iss": "cid", "sub": "cid", "aud": "https://as.example", "iat": 1000, "exp": 1060, "jti": "j-1"})
        );
        let no_kid = signing_input(Alg::Rs256, &Claims { key_id: None, ..c });
        assert_eq!(part(no_kid.split('.').next().unwrap()), json!({"alg": "RS256", "typ": "JWT"}));
        let jws = finish(&input, &[0xFB, 0xFF]);
        assert_eq!(jws, format!("{input}.-_8"), "base64url, unpadded");
        assert_eq!(audience(Some("https://as.example"), "https://as.example/token"), "https://as.example");
        assert_eq!(audience(None, "https://as.example/token"), "https://as.example/token");
        let mut form = Vec::new();
        add_to_form(&mut form, jws.clone());
        assert_eq!(form[0], ("client_assertion_type".to_string(), ASSERTION_TYPE.to_string()));
        assert_eq!(form[1].1, jws);
    }
}
