//! Backend credentials inside an app's settings: where they sit (`api_key`, every `headers`
//! value, the OAuth client secret and refresh token), `$NAME` references to Worker secrets,
//! sealing literals before they are stored, and masking them as `"***"` for the console.

use serde_json::{Map, Value};

use super::form;

/// What the console shows instead of a literal credential; sent back, it keeps the stored one.
pub const MASK: &str = "***";

/// A whole-string reference to a Worker secret or variable, e.g. `$DIFY_KEY`.
pub fn is_secret_ref(s: &str) -> bool {
    s.strip_prefix('$').is_some_and(form::is_variable_name)
}

/// The places in a backend object that hold credentials: `api_key`, every `headers` value and
/// the OAuth client secret and refresh token.
pub fn for_each_credential(obj: &mut Map<String, Value>, base: &str, f: &mut dyn FnMut(&str, &mut Value)) {
    if let Some(v) = obj.get_mut("api_key") {
        f(&format!("{base}.api_key"), v);
    }
    if let Some(Value::Object(h)) = obj.get_mut("headers") {
        for (name, v) in h.iter_mut() {
            f(&format!("{base}.headers.{name}"), v);
        }
    }
    if let Some(Value::Object(o)) = obj.get_mut("oauth") {
        for key in ["client_secret", "refresh_token"] {
            if let Some(v) = o.get_mut(key) {
                f(&format!("{base}.oauth.{key}"), v);
            }
        }
    }
}

pub fn credential_at<'a>(stored: &'a Value, path: &str) -> Option<&'a Value> {
    // A header name may hold dots.
    if let Some(name) = path.strip_prefix("backend.headers.") {
        return stored.get("headers")?.get(name);
    }
    let mut cur = stored;
    for part in path.strip_prefix("backend.")?.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// Rewrites credential slots: `f` gets each string value and may return a replacement.
pub fn map_credentials(
    backend: &mut Value,
    f: &mut dyn FnMut(&str) -> Result<Option<String>, String>,
) -> Result<(), String> {
    let Some(obj) = backend.as_object_mut() else { return Ok(()) };
    let mut failure = None;
    for_each_credential(obj, "backend", &mut |path, slot| {
        if failure.is_some() {
            return;
        }
        if let Some(v) = slot.as_str() {
            match f(v) {
                Ok(Some(new)) => *slot = Value::String(new),
                Ok(None) => {}
                Err(e) => failure = Some(format!("{path} {e}")),
            }
        }
    });
    failure.map_or(Ok(()), Err)
}

/// Replaces every literal credential (not a `$NAME`, not already sealed, not empty) by
/// `seal(literal)`; `Err` names the slot.
pub fn seal_literals(backend: &mut Value, seal: &mut dyn FnMut(&str) -> Result<String, String>) -> Result<(), String> {
    map_credentials(backend, &mut |v| {
        if v.is_empty() || is_secret_ref(v) || crate::pure::sealed::is_sealed(v) {
            Ok(None)
        } else {
            seal(v).map(Some)
        }
    })
}

/// The backend as the console shows it: literal credentials replaced by `"***"`, `$NAME`
/// references shown as they are (they name a secret, they are not one).
pub fn mask_backend(backend: &Value) -> Value {
    let mut b = backend.clone();
    if let Some(obj) = b.as_object_mut() {
        for_each_credential(obj, "backend", &mut |_, slot| {
            if !slot.as_str().is_some_and(is_secret_ref) {
                *slot = Value::String(MASK.into());
            }
        });
    }
    b
}
