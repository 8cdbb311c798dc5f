//! `oauth_jwt`: bearer tokens and JWKS documents, read before anything is verified: the OAuth
//! resource server's access tokens (`pure::oauth_resource`) and Cloudflare Access assertions
//! (`pure::console_access`, same checks). The input is read as a token, as a JWKS document, and
//! as the fields of a token built here, which must read back as built.

use serde_json::{json, Map, Value};

use flowgate::pure::base64;
use flowgate::pure::console_access;
use flowgate::pure::oauth_resource::{
    challenge, check_claims, parse_jwks, parse_jwt, select_key, Alg, Jwk, OAuthSettings, TokenError, MAX_JWKS_KEYS,
    MAX_SUBJECT_CHARS, MAX_TOKEN_CHARS, SKEW_SECONDS,
};

use super::input::Input;

const AUDIENCE: &str = "https://flowgate.example/mcp/server/CODE/mcp";
const NOW: i64 = 1_800_000_000;

fn settings(scopes: &[&str]) -> OAuthSettings {
    OAuthSettings {
        issuer: "https://auth.example.com".into(),
        audience: None,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        jwks_uri: None,
    }
}

pub fn oauth_jwt(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    read_token(&text);
    read_jwks(&text);
    built_token(data);
}

/// Whatever a token says, what is read from it is consistent, and a refusal says why in a form
/// that fits a `WWW-Authenticate` quoted-string.
fn read_token(token: &str) {
    let access = console_access::config(Some("team.cloudflareaccess.com"), Some("aud-tag"), None)
        .expect("a valid Access configuration")
        .expect("Access on");
    match parse_jwt(token) {
        Ok(jwt) => {
            assert!(token.len() <= MAX_TOKEN_CHARS);
            let (input, _) = token.rsplit_once('.').expect("three parts");
            assert_eq!(jwt.signing_input, input);
            assert!(jwt.claims.is_object() && !jwt.signature.is_empty());
            for (s, aud) in [(settings(&["mcp:read"]), AUDIENCE), (access.settings.clone(), access.audience.as_str())] {
                match check_claims(&jwt.claims, &s, aud, NOW) {
                    Ok(v) => {
                        let c = &jwt.claims;
                        assert_eq!(c["iss"], s.issuer.as_str());
                        assert!(c["aud"] == aud || c["aud"].as_array().is_some_and(|l| l.iter().any(|a| a == aud)));
                        assert_eq!(c["sub"], v.sub.as_str());
                        assert!(!v.sub.is_empty() && v.sub.len() <= MAX_SUBJECT_CHARS);
                        assert!(v.sub.bytes().all(|b| (0x20..0x7f).contains(&b)), "{:?}", v.sub);
                        assert!(v.exp >= NOW, "accepted after expiry: {v:?}");
                        let name = console_access::user_name(c, &v.sub);
                        assert!(!name.is_empty() && name.chars().count() <= 254, "{name:?}");
                    }
                    Err(e) => check_refusal(&e, &s),
                }
            }
        }
        Err(e) => check_refusal(&e, &settings(&[])),
    }
}

fn check_refusal(e: &TokenError, s: &OAuthSettings) {
    assert!(matches!(e.status(), 401 | 403));
    let why = e.description();
    assert!(!why.is_empty() && !why.contains(['"', '\\']) && !why.chars().any(char::is_control), "{why:?}");
    let header = challenge("https://flowgate.example/.well-known/oauth-protected-resource/mcp", s, Some(e));
    assert!(!header.chars().any(char::is_control), "{header:?}");
    assert!(console_access::refusal(Some(e)).contains("Cf-Access-Jwt-Assertion"));
}

fn read_jwks(text: &str) {
    let Ok(keys) = parse_jwks(text) else { return };
    assert!(keys.len() <= MAX_JWKS_KEYS);
    for k in &keys {
        check_key(k);
    }
    let kids: Vec<Option<&str>> = keys.iter().map(|k| k.kid.as_deref()).chain([None, Some("")]).collect();
    for alg in [Alg::Rs256, Alg::Es256] {
        for kid in &kids {
            if let Some(k) = select_key(&keys, alg, *kid) {
                assert_eq!(k.alg, alg);
                match kid {
                    Some(kid) => assert_eq!(k.kid.as_deref(), Some(*kid)),
                    None => assert_eq!(keys.iter().filter(|k| k.alg == alg).count(), 1),
                }
            }
        }
    }
}

/// A key WebCrypto gets: its public parameters only, each base64url, of the kind its `alg` needs.
fn check_key(k: &Jwk) {
    let jwk: Map<String, Value> = serde_json::from_str(&k.public_jwk).expect("public_jwk is JSON");
    let fields: Vec<&str> = jwk.keys().map(String::as_str).collect();
    match k.alg {
        Alg::Rs256 => assert_eq!(fields, ["kty", "n", "e"]),
        Alg::Es256 => {
            assert_eq!(fields, ["kty", "crv", "x", "y"]);
            assert_eq!(jwk["crv"], "P-256");
        }
    }
    for (name, v) in &jwk {
        let v = v.as_str().expect("string parameters");
        if !matches!(name.as_str(), "kty" | "crv") {
            let b64url = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
            assert!(!v.is_empty() && v.bytes().all(b64url), "{name}: {v:?}");
        }
    }
}

/// A token assembled from the input's fields: what goes in comes out, and the claim checks
/// accept it exactly when its claims satisfy them.
fn built_token(data: &[u8]) {
    let mut r = Input::new(data);
    let pick = r.byte();
    let alg = ["RS256", "ES256", "none", "HS256", "rs256"][pick as usize % 5];
    let kid = r.text();
    let sub = r.text();
    let exp = NOW - 120 + i64::from(r.byte());
    let scope = r.text();
    let extra_name = r.text();
    let extra_value = r.text();
    let mut header = json!({"alg": alg, "typ": "JWT"});
    if pick & 8 != 0 {
        header["kid"] = kid.clone().into();
    }
    let mut claims = json!({"iss": "https://auth.example.com", "sub": sub, "exp": exp, "scope": scope});
    claims["aud"] = if pick & 16 != 0 { json!([AUDIENCE]) } else { json!(AUDIENCE) };
    // Any other claim, which changes nothing (`nbf` would).
    if extra_name != "nbf" && !claims.as_object().is_some_and(|c| c.contains_key(&extra_name)) {
        claims[extra_name.as_str()] = extra_value.into();
    }
    let signature = r.bytes(64);
    let signature = if signature.is_empty() { &[0u8][..] } else { signature };
    let token = format!(
        "{}.{}.{}",
        base64::encode_url(header.to_string()),
        base64::encode_url(claims.to_string()),
        base64::encode_url(signature)
    );
    let jwt = match parse_jwt(&token) {
        Ok(jwt) => jwt,
        Err(TokenError::Alg) => {
            assert!(Alg::parse(alg).is_none());
            return;
        }
        Err(e) if token.len() > MAX_TOKEN_CHARS => {
            assert_eq!(e, TokenError::Malformed("the access token is too long"));
            return;
        }
        Err(e) => panic!("{token:?} refused: {e:?}"),
    };
    assert_eq!(Some(jwt.alg), Alg::parse(alg));
    assert_eq!(jwt.kid, (pick & 8 != 0).then_some(kid));
    assert_eq!(jwt.claims, claims);
    assert_eq!(jwt.signature, signature);
    let granted: Vec<&str> = scope.split(' ').collect();
    let ok_sub = !sub.is_empty() && sub.len() <= MAX_SUBJECT_CHARS && sub.bytes().all(|b| (0x20..0x7f).contains(&b));
    for required in [&[][..], &["mcp:read"][..]] {
        let verdict = check_claims(&jwt.claims, &settings(required), AUDIENCE, NOW);
        if NOW > exp + SKEW_SECONDS {
            assert_eq!(verdict, Err(TokenError::Expired));
        } else if !ok_sub {
            assert_eq!(verdict, Err(TokenError::BadSubject));
        } else if required.iter().any(|s| !granted.contains(s)) {
            assert_eq!(verdict, Err(TokenError::InsufficientScope));
        } else {
            let v = verdict.expect("valid claims accepted");
            assert_eq!((v.sub.as_str(), v.exp), (sub.as_str(), exp + SKEW_SECONDS));
        }
    }
}
