//! A server's code over its life: kept sealed so an admin can see the URL again, and rotated
//! with an optional grace period during which the previous code still works.
//!
//! The rules here are IO-free: the body of a rotation (`grace_seconds`, bounded), which of a
//! row's two codes a hash names and whether it still works, how long the KV entry of a previous
//! code may live, and the reveal's words. The shell seals, stores and serves.

use serde_json::Value;

use super::error::{ApiError, Errors};

/// The longest grace a rotation may give the previous code: a week, enough for a planned
/// rotation across teams, short enough that a leaked code cannot be kept alive for long.
pub const MAX_GRACE_SECONDS: u64 = 7 * 24 * 3600;

/// What a server code is sealed to (with its server's id): a sealed code opens only as that
/// server's code, never as another's or as an app credential.
pub fn sealing_context(server_id: &str) -> Vec<u8> {
    format!("flowgate server code\n{server_id}").into_bytes()
}

/// The grace of a rotation: `grace_seconds` of its body (absent, null or 0: none, the previous
/// code stops at once). The body may be empty (`{}`); other members are refused, so a typo is
/// not a rotation without the grace the caller meant.
pub fn rotation_grace(body: &Value) -> Result<u64, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object, e.g. {\"grace_seconds\": 3600}, or empty"));
    };
    let mut errs = Errors::default();
    for k in obj.keys().filter(|k| k.as_str() != "grace_seconds") {
        errs.add(
            crate::pure::quote::plain_or_quoted(k),
            "is not a rotation field (known: grace_seconds, how long the previous code keeps working)",
        );
    }
    let grace = match obj.get("grace_seconds") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_GRACE_SECONDS => n,
            _ => {
                errs.add(
                    "grace_seconds",
                    format!(
                        "must be a whole number of seconds from 0 to {MAX_GRACE_SECONDS} (7 days): how long the previous code keeps working"
                    ),
                );
                0
            }
        },
    };
    errs.into_result(grace)
}

/// The codes a server row holds, by hash: the current one, and the previous one with the time
/// it stops (unix ms), when a rotation gave it a grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codes<'a> {
    pub current_hash: &'a str,
    pub previous_hash: Option<&'a str>,
    pub previous_until_ms: Option<u64>,
}

/// What a code hash is to a server row, at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeUse {
    /// The current code.
    Current,
    /// The previous code, which works until `until_ms`.
    Grace { until_ms: u64 },
    /// Not a code of this server now (the previous code past its grace included).
    No,
}

impl Codes<'_> {
    pub fn of(&self, hash: &str, now_ms: u64) -> CodeUse {
        if hash == self.current_hash {
            return CodeUse::Current;
        }
        match (self.previous_hash, self.previous_until_ms) {
            (Some(prev), Some(until_ms)) if prev == hash && now_ms < until_ms => CodeUse::Grace { until_ms },
            _ => CodeUse::No,
        }
    }

    /// The previous code's hash and end while it still works.
    pub fn in_grace(&self, now_ms: u64) -> Option<(&str, u64)> {
        match (self.previous_hash, self.previous_until_ms) {
            (Some(prev), Some(until)) if now_ms < until => Some((prev, until)),
            _ => None,
        }
    }
}

/// Whether a definition served under a code that ends at `expires_at_ms` may answer now.
pub fn still_works(expires_at_ms: Option<u64>, now_ms: u64) -> bool {
    expires_at_ms.is_none_or(|until| now_ms < until)
}

/// The KV expiry of a definition: the usual TTL, shortened for a previous code to its grace
/// (rounded up; KV keeps an entry at least 60 s, which the expiry check inside covers).
pub fn kv_ttl_seconds(expires_at_ms: Option<u64>, now_ms: u64, usual: u64) -> u64 {
    match expires_at_ms {
        Some(until) => until.saturating_sub(now_ms).div_ceil(1000).clamp(60, usual),
        None => usual,
    }
}

/// Why a server's URL cannot be shown (it has no sealed code), and what to do.
pub fn not_revealable(server_id: &str, key_set: bool) -> String {
    let first = if key_set { "" } else { "set the SECRETS_KEY secret (64 hex characters), then " };
    format!(
        "this server's URL cannot be shown again: Flowgate keeps no sealed copy of its code (it was drawn before \
         Flowgate kept codes, or while SECRETS_KEY was not set). To get a URL that can be shown again, {first}rotate \
         the code: POST /console/api/servers/{server_id}/refresh with {{\"grace_seconds\": 86400}} keeps the current URL \
         working for a day while clients move to the new one"
    )
}

/// The words of the log line a previous code's use writes (never the code itself).
pub fn grace_use_line(server_name: &str, until_ms: u64, now_ms: u64) -> String {
    let left = until_ms.saturating_sub(now_ms).div_ceil(1000);
    format!(
        "server {} was called with its previous code (rotated with a grace period); it works {left} s more, \
         then answers 404: move this client to the new URL",
        crate::pure::quote::quote_input(server_name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grace_is_optional_bounded_and_alone() {
        assert_eq!(rotation_grace(&json!({})).unwrap(), 0);
        assert_eq!(rotation_grace(&json!({"grace_seconds": null})).unwrap(), 0);
        assert_eq!(rotation_grace(&json!({"grace_seconds": 0})).unwrap(), 0);
        assert_eq!(rotation_grace(&json!({"grace_seconds": 3600})).unwrap(), 3600);
        assert_eq!(rotation_grace(&json!({"grace_seconds": MAX_GRACE_SECONDS})).unwrap(), MAX_GRACE_SECONDS);
        for bad in [json!(MAX_GRACE_SECONDS + 1), json!(-1), json!(1.5), json!("60"), json!(true)] {
            let e = rotation_grace(&json!({ "grace_seconds": bad })).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert_eq!(e.errors[0].field, "grace_seconds");
            assert!(e.errors[0].message.contains("604800"), "{}", e.errors[0].message);
        }
        let e = rotation_grace(&json!({"grace": 60})).unwrap_err();
        assert_eq!(e.errors[0].field, "grace");
        assert!(e.errors[0].message.contains("grace_seconds"));
        assert_eq!(rotation_grace(&json!([1])).unwrap_err().status, 400);
    }

    #[test]
    fn a_previous_code_works_until_its_end_and_not_after() {
        let codes = Codes { current_hash: "new", previous_hash: Some("old"), previous_until_ms: Some(10_000) };
        assert_eq!(codes.of("new", 0), CodeUse::Current);
        assert_eq!(codes.of("new", 20_000), CodeUse::Current);
        assert_eq!(codes.of("old", 9_999), CodeUse::Grace { until_ms: 10_000 });
        assert_eq!(codes.of("old", 10_000), CodeUse::No);
        assert_eq!(codes.of("other", 0), CodeUse::No);
        assert_eq!(codes.in_grace(9_999), Some(("old", 10_000)));
        assert_eq!(codes.in_grace(10_000), None);
        let none = Codes { current_hash: "new", previous_hash: None, previous_until_ms: None };
        assert_eq!(none.of("old", 0), CodeUse::No);
        assert_eq!(none.in_grace(0), None);
        assert!(still_works(None, u64::MAX));
        assert!(still_works(Some(10), 9));
        assert!(!still_works(Some(10), 10));
    }

    #[test]
    fn a_previous_codes_kv_entry_lives_about_its_grace() {
        assert_eq!(kv_ttl_seconds(None, 0, 3600), 3600);
        assert_eq!(kv_ttl_seconds(Some(600_500), 0, 3600), 601);
        assert_eq!(kv_ttl_seconds(Some(5_000), 0, 3600), 60);
        assert_eq!(kv_ttl_seconds(Some(5_000), 9_000, 3600), 60);
        assert_eq!(kv_ttl_seconds(Some(86_400_000), 0, 3600), 3600);
    }

    #[test]
    fn the_words_name_the_fix_and_never_a_code() {
        let m = not_revealable("srv-1", true);
        assert!(m.contains("rotate") && m.contains("/servers/srv-1/refresh") && m.contains("grace_seconds"), "{m}");
        assert!(!m.contains("SECRETS_KEY secret"));
        assert!(not_revealable("srv-1", false).contains("set the SECRETS_KEY secret"));
        let line = grace_use_line("Docs", 70_000, 10_000);
        assert!(line.contains("60 s more") && line.contains("new URL") && line.contains("Docs"), "{line}");
        assert_ne!(sealing_context("a"), sealing_context("b"));
    }
}
