//! What to do when a backend cannot be used as configured, said where the problem shows: a
//! `$NAME` credential the Worker does not have, a Dify base URL without `/v1`, a backend that
//! refuses or drops the connection. Each message names the fix.

use serde_json::Value;

use super::credentials::{for_each_credential, is_secret_ref};

/// How to set a Worker secret, locally and deployed.
pub fn how_to_set(name: &str) -> String {
    format!("locally, add {name}=… to .dev.vars and restart `make dev`; deployed, run `wrangler secret put {name}`")
}

/// The `$NAME` references in a backend's credentials (a whole value such as `"$DIFY_KEY"`: any
/// other value is a literal, stored sealed), with the field that holds each.
pub fn references(backend: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut backend = backend.clone();
    if let Some(obj) = backend.as_object_mut() {
        for_each_credential(obj, "backend", &mut |field, v| {
            if let Some(name) = v.as_str().filter(|v| is_secret_ref(v)) {
                out.push((field.to_string(), name[1..].to_string()));
            }
        });
    }
    out
}

/// A warning for a create or edit: `field` refers to `$name`, which this Worker does not have.
pub fn unset_secret(field: &str, name: &str) -> String {
    format!(
        "{field} refers to ${name}, which is not set on this Worker, so calls will fail until it is: {}",
        how_to_set(name)
    )
}

/// A warning for a Dify base URL whose path does not end in `/v1` (Dify's Service API root).
pub fn dify_base_url(base_url: &str) -> Option<String> {
    (!ends_in_v1(base_url)).then(|| {
        format!(
            "backend.base_url does not end with /v1: Dify's Service API is served under /v1 (e.g. https://api.dify.ai/v1 \
             or http://<your-dify-host>/v1), so calls to {} will likely get 404; add /v1",
            crate::pure::url::host_for_display(base_url)
        )
    })
}

pub fn ends_in_v1(base_url: &str) -> bool {
    let path = base_url.split(['?', '#']).next().unwrap_or("").trim_end_matches('/');
    path.ends_with("/v1")
}

/// What a failed connection means, when the runtime's words are about the connection itself
/// (workerd says "Network connection lost." for a refused connection too): `setting` is the
/// app setting that holds the address. `None` for other failures (the guard, redirects), whose
/// words already say what happened.
pub fn unreachable(error: &str, setting: &str) -> Option<String> {
    let lower = error.to_ascii_lowercase();
    let about_the_connection = ["network connection lost", "connection refused", "econnrefused", "connection reset"]
        .iter()
        .any(|needle| lower.contains(needle));
    about_the_connection.then(|| {
        format!(
            "the connection was refused or lost ({}); check that the backend is running and listening there, and that \
             the app's {setting} names the right host and port",
            error.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_whole_values_of_credential_fields() {
        let b = json!({"api_key": "$DIFY_KEY", "headers": {"Authorization": "$UPSTREAM_TOKEN", "X-Literal": "Bearer $NOT_A_REF"},
                       "base_url": "$NOT_A_CREDENTIAL"});
        assert_eq!(
            references(&b),
            [
                ("backend.api_key".to_string(), "DIFY_KEY".to_string()),
                ("backend.headers.Authorization".to_string(), "UPSTREAM_TOKEN".to_string())
            ]
        );
        assert!(references(&json!({"api_key": "app-literal$"})).is_empty());
        assert!(references(&json!("not an object")).is_empty());
    }

    #[test]
    fn an_unset_secret_names_both_ways_to_set_it() {
        let w = unset_secret("backend.api_key", "DIFY_KEY");
        assert!(w.starts_with("backend.api_key refers to $DIFY_KEY, which is not set on this Worker"), "{w}");
        assert!(w.contains("add DIFY_KEY=… to .dev.vars") && w.contains("`wrangler secret put DIFY_KEY`"), "{w}");
    }

    #[test]
    fn a_base_url_without_v1_is_named() {
        for ok in
            ["https://api.dify.ai/v1", "https://api.dify.ai/v1/", "http://127.0.0.1:5001/v1?x=1", "https://h/dify/v1"]
        {
            assert_eq!(dify_base_url(ok), None, "{ok}");
        }
        for bad in ["https://api.dify.ai", "https://api.dify.ai/", "https://h/v1/chat-messages", "https://h/v2"] {
            let w = dify_base_url(bad).unwrap_or_default();
            assert!(w.starts_with("backend.base_url does not end with /v1") && w.ends_with("add /v1"), "{bad}: {w}");
        }
    }

    #[test]
    fn a_lost_connection_says_what_to_check() {
        let m = unreachable("Network connection lost.", "base_url").unwrap_or_default();
        assert!(m.starts_with("the connection was refused or lost (Network connection lost.)"), "{m}");
        assert!(m.ends_with("the app's base_url names the right host and port"), "{m}");
        assert!(unreachable("fetch failed: connection refused", "api_endpoint").is_some());
        assert_eq!(unreachable("it redirected (HTTP 302) to another origin", "base_url"), None);
    }
}
