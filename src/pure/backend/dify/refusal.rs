//! A Dify refusal of a call, with the fix: a wrong API key (401), a base URL that misses the
//! Service API root (404), an app whose mode is not the one Flowgate calls it as (400).

use serde_json::Value;

use super::mode::DifyMode;
use crate::pure::backend::advice::ends_in_v1;

/// Dify's codes for a run endpoint that does not fit the app's mode (`app_unavailable` is also
/// what an unpublished app or one without a model answers, so the fix is said as a condition).
const MODE_CODES: [&str; 4] = ["not_chat_app", "not_workflow_app", "not_completion_app", "app_unavailable"];

/// What to do about a non-2xx answer of `mode`'s run endpoint at `base_url`, to follow Dify's own
/// message; `None` when Flowgate knows nothing to add.
pub fn fix(mode: DifyMode, status: u16, body: &str, base_url: &str) -> Option<String> {
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_string));
    match status {
        401 | 403 => Some(
            "check the app's api_key in Flowgate: it must be this Dify app's Service API key (app-…, from the app's \
             \"API Access\" page in Dify), or a $NAME whose secret holds it"
                .into(),
        ),
        404 if !ends_in_v1(base_url) => Some(format!(
            "the app's base_url ({}) does not end with /v1: set it to Dify's Service API root, e.g. https://api.dify.ai/v1",
            crate::pure::url::host_for_display(base_url)
        )),
        404 => Some("check that the app's base_url is Dify's Service API root (…/v1) and that the app is published in Dify".into()),
        400 if code.as_deref().is_some_and(|c| MODE_CODES.contains(&c)) => Some(format!(
            "Flowgate calls this app as a {mode} app ({}); if the Dify app's mode is another (GET …/v1/info shows it), \
             set the app's mode to it in Flowgate or import the app again (POST /console/api/apps/import)",
            super::call::run_path(mode),
            mode = crate::pure::named::Named::name(mode)
        )),
        _ => None,
    }
}

/// A failure message with its fix appended.
pub fn with_fix(message: String, fix: Option<String>) -> String {
    match fix {
        Some(f) => format!("{message}; {f}"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "https://dify.test/v1";

    #[test]
    fn a_wrong_key_names_the_setting_and_where_the_key_is() {
        let body = r#"{"code":"unauthorized","message":"Access token is invalid","status":401}"#;
        let f = fix(DifyMode::Chat, 401, body, V1).unwrap_or_default();
        assert!(f.starts_with("check the app's api_key in Flowgate") && f.contains("\"API Access\""), "{f}");
    }

    #[test]
    fn a_404_says_whether_v1_is_missing() {
        let f = fix(DifyMode::Workflow, 404, "<html>Not Found</html>", "https://dify.test").unwrap_or_default();
        assert!(f.contains("does not end with /v1") && f.contains("https://api.dify.ai/v1"), "{f}");
        let f = fix(DifyMode::Workflow, 404, "", V1).unwrap_or_default();
        assert!(f.contains("is published in Dify") && !f.contains("does not end"), "{f}");
    }

    #[test]
    fn a_mode_refusal_names_the_mode_and_the_fix() {
        for code in MODE_CODES {
            let body = format!(
                r#"{{"code":"{code}","message":"Please check if your app mode matches the right API route.","status":400}}"#
            );
            let f = fix(DifyMode::Chat, 400, &body, V1).unwrap_or_default();
            assert!(f.starts_with("Flowgate calls this app as a chat app (/chat-messages)"), "{code}: {f}");
            assert!(f.contains("import the app again"), "{f}");
        }
        let quota = r#"{"code":"provider_quota_exceeded","message":"…","status":400}"#;
        assert_eq!(fix(DifyMode::Chat, 400, quota, V1), None);
        assert_eq!(fix(DifyMode::Chat, 500, "Internal Server Error", V1), None);
        assert_eq!(with_fix("m".into(), None), "m");
        assert_eq!(with_fix("m".into(), Some("f".into())), "m; f");
    }
}
