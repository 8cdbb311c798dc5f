//! Backend credentials inside an app's settings: where they sit (`api_key`, every `headers`
//! value, the OAuth client secret, private key and refresh token), `$NAME` references to Worker secrets,
//! sealing literals before they are stored, masking them as `"***"` for the console, and the
//! origins each kind of credential is sent to (a `"***"` keeps its stored value only there).

use serde_json::{Map, Value};

use crate::pure::form;

/// What the console shows instead of a literal credential; sent back, it keeps the stored one.
pub const MASK: &str = "***";

/// A whole-string reference to a Worker secret or variable, e.g. `$DIFY_KEY`.
pub fn is_secret_ref(s: &str) -> bool {
    s.strip_prefix('$').is_some_and(form::is_variable_name)
}

/// The places in a backend object that hold credentials: `api_key`, every `headers` value and
/// the OAuth client secret, private key (`private_key_jwt`) and refresh token.
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
        for key in ["client_secret", "private_key", "refresh_token"] {
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

/// A credential slot that could not be rewritten: its path (`backend.api_key`) and why. Shown
/// as "<path> <why>": the why completes a sentence about the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotError<E> {
    pub path: String,
    pub error: E,
}

impl<E: std::fmt::Display> std::fmt::Display for SlotError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path, self.error)
    }
}

/// Rewrites credential slots: `f` gets each string value and may return a replacement; the
/// first failure stops the rewrite and names its slot.
pub fn map_credentials<E>(
    backend: &mut Value,
    f: &mut dyn FnMut(&str) -> Result<Option<String>, E>,
) -> Result<(), SlotError<E>> {
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
                Err(error) => failure = Some(SlotError { path: path.to_string(), error }),
            }
        }
    });
    failure.map_or(Ok(()), Err)
}

/// Replaces every literal credential (not a `$NAME`, not already sealed, not empty) by
/// `seal(literal)`; `Err` names the slot.
pub fn seal_literals<E>(
    backend: &mut Value,
    seal: &mut dyn FnMut(&str) -> Result<String, E>,
) -> Result<(), SlotError<E>> {
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
/// The settings that say where each kind of credential is sent, one group per destination
/// (within a group, any origin the group already went to may be reused): `api_key` goes to a
/// Dify app's `base_url`, or to an HTTP tool's `api_endpoint` and its async status and cancel
/// endpoints; an MCP app's `headers` go to its `url`; the OAuth secrets go to `oauth.token_url`,
/// or to the token endpoint of `oauth.issuer` (discovery accepts no other issuer), and the
/// access token minted with them goes to `url`, so they are bound to both. The private key
/// never leaves Flowgate, but what it signs is for that endpoint alone, so it is bound the same way.
fn credential_destinations(path: &str) -> &'static [&'static [&'static str]] {
    if path == "backend.api_key" {
        &[&["base_url", "api_endpoint", "async.status_endpoint", "async.cancel_endpoint"]]
    } else if path.starts_with("backend.headers.") {
        &[&["url"]]
    } else if path.starts_with("backend.oauth.") {
        &[&["oauth.token_url", "oauth.issuer"], &["url"]]
    } else {
        &[]
    }
}

const URL_KEYS: [&str; 7] = [
    "base_url",
    "api_endpoint",
    "async.status_endpoint",
    "async.cancel_endpoint",
    "url",
    "oauth.token_url",
    "oauth.issuer",
];

fn url_at<'a>(backend: &'a Value, key: &str) -> Option<&'a str> {
    key.split('.').try_fold(backend, |v, part| v.get(part))?.as_str()
}

/// Just the URL settings of a backend object (what [`origin_change`] reads).
pub fn url_view(obj: &Map<String, Value>) -> Value {
    let mut out = Value::Object(Map::new());
    for key in URL_KEYS {
        let (head, tail) = key.split_once('.').map_or((key, None), |(h, t)| (h, Some(t)));
        let value = obj.get(head).and_then(|v| match tail {
            Some(t) => v.get(t),
            None => Some(v),
        });
        if let Some(Value::String(u)) = value {
            match tail {
                Some(t) => out[head][t] = Value::String(u.clone()),
                None => out[head] = Value::String(u.clone()),
            }
        }
    }
    out
}

/// Why a credential sent back as `"***"` (at `path`, e.g. `backend.api_key`) may not keep its
/// stored value under the `new` backend settings: it would be sent to an origin (scheme, host
/// and port) the `stored` settings never sent it to. A path change on the same origin is fine.
/// `None` when the stored value may be kept.
pub fn origin_change(stored: &Value, new: &Value, path: &str) -> Option<String> {
    credential_destinations(path).iter().find_map(|keys| destination_change(stored, new, keys))
}

/// [`origin_change`] for one destination of a credential, named by its URL settings `keys`.
fn destination_change(stored: &Value, new: &Value, keys: &[&str]) -> Option<String> {
    let parse = |b: &Value, k: &str| url_at(b, k).and_then(|u| crate::pure::web_url::Url::parse(u).ok());
    let before: Vec<(&str, crate::pure::web_url::Url)> =
        keys.iter().filter_map(|k| parse(stored, k).map(|u| (*k, u))).collect();
    for key in keys {
        // A new URL that does not parse is reported by the URL check itself.
        let Some(after) = parse(new, key) else { continue };
        if before.iter().any(|(_, u)| u.origin() == after.origin()) {
            continue;
        }
        let old = before.iter().find(|(k, _)| k == key).or(before.first());
        return Some(match old {
            Some((_, old)) => {
                let (a, b) = shown_origins(old, &after);
                format!("the backend's origin changed ({a} → {b}); send the credential again")
            }
            None => "the stored settings give no origin to compare with; send the credential again".to_string(),
        });
    }
    None
}

/// Two origins as a person reads them: hosts (with a port when one is given), or the full
/// origins when the schemes differ.
fn shown_origins(a: &crate::pure::web_url::Url, b: &crate::pure::web_url::Url) -> (String, String) {
    let host = |u: &crate::pure::web_url::Url| {
        let h = u.host_str().unwrap_or("");
        match u.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_string(),
        }
    };
    if a.scheme() == b.scheme() {
        (host(a), host(b))
    } else {
        (a.origin().ascii_serialization(), b.origin().ascii_serialization())
    }
}
