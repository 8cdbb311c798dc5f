//! `console_bodies`: what the console API reads from a request body once it is JSON (apps,
//! servers, a server's auth, client keys, console tokens) and from the usage query string. The
//! input is the JSON body (else the query). Every refusal is a 4xx naming its fields, never a
//! panic, and never repeats a credential of the body; what is accepted holds to the rules.

use serde_json::{json, Value};

use flowgate::pure::app::validate_app_in;
use flowgate::pure::client_auth::{validate_auth_body, validate_key_body, AuthMode, MAX_KEY_NAME_CHARS};
use flowgate::pure::config::RefPolicy;
use flowgate::pure::console_roles::Role;
use flowgate::pure::console_tokens::{validate_token_body, MAX_TOKEN_NAME_CHARS};
use flowgate::pure::error::ApiError;
use flowgate::pure::server::{validate_server, ServerBody};
use flowgate::pure::usage;

/// A credential that must never come back in an error (put in as `backend.api_key`).
const SECRET: &str = "sk-fuzz-Q7xv93LmZp";
const NOW_S: i64 = 1_800_000_000;

fn check_error(e: &ApiError, body: &Value) {
    assert!((400..500).contains(&e.status), "{e:?}");
    assert!(!e.message.is_empty() && !e.code.is_empty(), "{e:?}");
    for f in &e.errors {
        assert!(!f.field.is_empty() && !f.message.is_empty(), "{e:?}");
    }
    let shown = e.to_json().to_string();
    // The body carries the secret only where it was put (else an echo could be legitimate).
    if body.to_string().matches(SECRET).count() == 1 {
        assert!(!shown.contains(SECRET), "{body} refused as {shown}");
    }
}

fn name_ok(name: &str, max: usize) -> bool {
    !name.trim().is_empty()
        && name.trim() == name
        && name.chars().count() <= max
        && name.bytes().all(|b| (0x20..0x7f).contains(&b))
}

pub fn console_bodies(data: &[u8]) {
    let Ok(mut body) = serde_json::from_slice::<Value>(data) else {
        usage_query(data);
        return;
    };
    if let Some(b) = body.get_mut("backend").and_then(Value::as_object_mut) {
        b.insert("api_key".into(), SECRET.into());
    }
    let stored = json!({"base_url": "https://dify.example/v1", "api_key": SECRET,
                        "url": "https://mcp.example/mcp", "api_endpoint": "https://tool.example/run"});
    // Deny-by-default references, and references allowed by a prefix.
    let (deny_all, prefixed) = (RefPolicy::from_settings(None, None), RefPolicy::from_settings(Some("FG_"), None));
    for (stored, refs) in [(None, &deny_all), (Some(&stored), &prefixed)] {
        match validate_app_in(&body, stored, refs) {
            Ok(spec) => {
                assert!(!spec.name.trim().is_empty(), "{body}");
                assert!(spec.backend.is_object(), "{body}");
            }
            Err(e) => check_error(&e, &body),
        }
    }
    // The same body with the credential sent back masked, as the console does on an edit.
    if let Some(b) = body.get_mut("backend").and_then(Value::as_object_mut) {
        b.insert("api_key".into(), "***".into());
        if let Err(e) = validate_app_in(&body, Some(&stored), &deny_all) {
            check_error(&e, &body);
            if !body.to_string().contains(SECRET) {
                assert!(!e.to_json().to_string().contains(SECRET), "the stored credential shown: {e:?}");
            }
        }
    }
    for kind in [ServerBody::CreateForApp, ServerBody::UpdateForApp, ServerBody::CreateMulti, ServerBody::UpdateMulti] {
        match validate_server(&body, kind) {
            Ok(f) => {
                if let Some(name) = &f.name {
                    assert!(!name.trim().is_empty() && name.chars().count() <= 255, "{name:?}");
                }
                if kind == ServerBody::CreateMulti {
                    assert!(f.name.is_some() && f.app_ids.is_some(), "{body}: {f:?}");
                }
                if kind == ServerBody::UpdateForApp {
                    assert!(f.id.as_deref().is_some_and(|id| !id.is_empty()), "{body}: {f:?}");
                }
            }
            Err(e) => check_error(&e, &body),
        }
    }
    match validate_auth_body(&body) {
        Ok((mode, oauth)) => {
            assert_eq!(mode == AuthMode::OAuth, oauth.is_some(), "{body}");
            if let Some(o) = oauth {
                assert!(!o.issuer.is_empty(), "{o:?}");
            }
        }
        Err(e) => check_error(&e, &body),
    }
    match validate_key_body(&body) {
        Ok(name) => assert!(name_ok(&name, MAX_KEY_NAME_CHARS), "{name:?}"),
        Err(e) => check_error(&e, &body),
    }
    match validate_token_body(&body) {
        Ok((name, role)) => {
            assert!(name_ok(&name, MAX_TOKEN_NAME_CHARS), "{name:?}");
            assert_eq!(Some(role), body.get("role").and_then(Value::as_str).and_then(Role::parse));
        }
        Err(e) => check_error(&e, &body),
    }
}

/// `GET /servers/{id}/usage?step=&from=&to=`: a range of whole buckets, or the field at fault.
fn usage_query(data: &[u8]) {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(data).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    match usage::parse_query(&pairs, NOW_S) {
        Ok(q) => {
            let s = q.step.seconds();
            assert!(q.from < q.to, "{q:?}");
            assert!(q.from % s == 0 && q.to % s == 0, "{q:?}");
        }
        Err(flowgate::pure::error::BadField(field, message)) => {
            assert!(["step", "from", "to"].contains(&field), "{field}");
            assert!(!message.is_empty());
        }
    }
}
