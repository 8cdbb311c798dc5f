//! Turning a Dify app's `/v1/info` and `/v1/parameters` into an app body for the console.

use crate::json;
use serde_json::Value;

use super::mode::DifyMode;
use crate::pure::error::{ApiError, BadField};
use crate::pure::mode::Mode;

/// Why the responses are not those of a Dify app (a message for the person importing): a 422.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotADifyApp(pub String);

impl From<NotADifyApp> for ApiError {
    fn from(NotADifyApp(why): NotADifyApp) -> ApiError {
        ApiError::new(422, "not_a_dify_app", why)
    }
}

/// The note an import answers with when a workflow's outputs are not declared: Dify's API
/// says what a workflow takes (`/parameters`) but not what it returns.
pub const OUTPUTS_NOTE: &str = "Dify's API does not say what a workflow returns, so this app declares no outputs: \
MCP clients get its result as text, without an outputSchema or structuredContent. Declare them with \
PUT /console/api/apps/{id} (\"outputs\": [{\"variable\": \"summary\", \"type\": \"string\"}]), or send \
\"outputs\" with the import.";

/// The console body of an app imported from Dify's `/info` and `/parameters`, with the
/// `outputs` the caller declared (Dify cannot tell them), checked later like any app body.
pub fn app_body_from_dify(
    info: &Value,
    parameters: &Value,
    base_url: &str,
    api_key: &str,
    outputs: Option<&Value>,
) -> Result<Value, NotADifyApp> {
    let refuse = |why: String| Err(NotADifyApp(why));
    let Some(mode) = info.get("mode").and_then(Value::as_str) else {
        return refuse(
            "the /info response has no `mode`; is this the Service API base URL of a Dify app (…/v1)?".into(),
        );
    };
    if Mode::parse(mode).and_then(Mode::dify).is_none() {
        return refuse(format!("the Dify app has mode '{mode}', which Flowgate cannot serve"));
    }
    let name = info.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty()).unwrap_or("Dify app");
    let description = info.get("description").and_then(Value::as_str).unwrap_or("");
    let form = match parameters.get("user_input_form") {
        Some(f @ Value::Array(_)) => f.clone(),
        None | Some(Value::Null) => json!([]),
        Some(_) => return refuse("the /parameters response has a `user_input_form` that is not a list".into()),
    };
    let mut body = json!({
        "name": name,
        "description": description,
        "mode": mode,
        "backend": {"base_url": base_url, "api_key": api_key},
        "user_input_form": form,
    });
    if let Some(outputs) = outputs.filter(|o| !o.is_null()) {
        body["outputs"] = outputs.clone();
    }
    // What the app takes as attached files, and Dify's size limits for uploads.
    if let Some(upload) = parameters.get("file_upload").filter(|u| u.is_object()) {
        body["backend"]["file_upload"] = upload.clone();
    }
    if let Some(Value::Object(system)) = parameters.get("system_parameters") {
        let limits: serde_json::Map<String, Value> = system
            .iter()
            .filter(|(k, v)| k.ends_with("_size_limit") && v.is_u64())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !limits.is_empty() {
            body["backend"]["system_parameters"] = Value::Object(limits);
        }
    }
    Ok(body)
}

/// The import's optional `mode` (what the caller expects the Dify app to be) against the mode
/// Dify's `/info` names: a mismatch is refused (the field `mode`), saying what the app is and
/// what to do.
pub fn check_expected_mode(expected: Option<&Value>, info: &Value) -> Result<(), BadField> {
    let Some(expected) = expected.filter(|v| !v.is_null()) else { return Ok(()) };
    let actual = info.get("mode").and_then(Value::as_str).unwrap_or("");
    match expected.as_str() {
        Some(e) if e == actual => Ok(()),
        Some(e) if Mode::parse(e).and_then(Mode::dify).is_some() => Err(BadField(
            "mode",
            format!(
                "the Dify app behind this API key is a {actual} app, not a {e} app: leave mode out to import it as \
                 the {actual} app it is, or use the API key of your {e} app"
            ),
        )),
        _ => Err(BadField(
            "mode",
            "mode, when given, must be one of workflow, chat, advanced-chat, agent-chat, completion".into(),
        )),
    }
}

/// Whether an imported app should carry [`OUTPUTS_NOTE`]: a workflow without outputs.
pub fn needs_outputs_note(mode: Option<Mode>, outputs: Option<&Value>) -> bool {
    mode == Some(Mode::Dify(DifyMode::Workflow)) && outputs.and_then(Value::as_array).is_none_or(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_an_app_body() {
        let body = app_body_from_dify(
            &json!({"name": "Translator", "description": "Translates", "mode": "advanced-chat", "tags": []}),
            &json!({"user_input_form": [{"select": {"variable": "lang", "options": ["en"]}}]}),
            "http://dify/v1",
            "app-x",
            None,
        )
        .unwrap();
        assert_eq!(body["mode"], "advanced-chat");
        assert_eq!(body["name"], "Translator");
        assert_eq!(body["user_input_form"][0]["select"]["variable"], "lang");
        assert_eq!(body["backend"]["api_key"], "app-x");
        assert!(body["backend"].get("file_upload").is_none());
    }

    #[test]
    fn file_upload_and_size_limits_come_along() {
        let parameters = json!({"user_input_form": [{"file": {"variable": "doc", "allowed_file_types": ["document"]}}],
            "file_upload": {"image": {"enabled": true, "number_limits": 3, "transfer_methods": ["local_file"]}},
            "system_parameters": {"file_size_limit": 15, "image_file_size_limit": 10, "workflow_file_upload_limit": 10}});
        let body = app_body_from_dify(&json!({"mode": "chat"}), &parameters, "u", "k", None).unwrap();
        assert_eq!(body["user_input_form"][0]["file"]["allowed_file_types"], json!(["document"]));
        assert_eq!(body["backend"]["file_upload"]["image"]["number_limits"], 3);
        assert_eq!(body["backend"]["system_parameters"], json!({"file_size_limit": 15, "image_file_size_limit": 10}));
    }

    #[test]
    fn declared_outputs_are_kept_and_a_workflow_without_them_gets_the_note() {
        let outputs = json!([{"variable": "summary", "type": "string"}]);
        let body = app_body_from_dify(&json!({"mode": "workflow"}), &json!({}), "u", "k", Some(&outputs)).unwrap();
        assert_eq!(body["outputs"], outputs);
        assert!(!needs_outputs_note(Mode::parse("workflow"), Some(&outputs)));
        assert!(needs_outputs_note(Mode::parse("workflow"), None));
        assert!(needs_outputs_note(Mode::parse("workflow"), Some(&json!([]))));
        assert!(!needs_outputs_note(Mode::parse("chat"), None));
    }

    #[test]
    fn an_expected_mode_must_be_the_apps() {
        let info = json!({"mode": "workflow"});
        assert_eq!(check_expected_mode(None, &info), Ok(()));
        assert_eq!(check_expected_mode(Some(&Value::Null), &info), Ok(()));
        assert_eq!(check_expected_mode(Some(&json!("workflow")), &info), Ok(()));
        let BadField(field, e) = check_expected_mode(Some(&json!("chat")), &info).unwrap_err();
        assert_eq!(field, "mode");
        assert!(e.starts_with("the Dify app behind this API key is a workflow app, not a chat app"), "{e}");
        assert!(e.contains("leave mode out") && e.contains("use the API key of your chat app"), "{e}");
        assert!(check_expected_mode(Some(&json!("mcp")), &info).unwrap_err().1.contains("must be one of"));
        assert!(check_expected_mode(Some(&json!(3)), &info).is_err());
    }

    #[test]
    fn refuses_what_is_not_a_dify_app() {
        assert!(app_body_from_dify(&json!({"hello": 1}), &json!({}), "u", "k", None)
            .unwrap_err()
            .0
            .contains("no `mode`"));
        assert!(app_body_from_dify(&json!({"mode": "mcp"}), &json!({}), "u", "k", None)
            .unwrap_err()
            .0
            .contains("'mcp'"));
        assert!(app_body_from_dify(&json!({"mode": "chat"}), &json!({"user_input_form": 3}), "u", "k", None).is_err());
    }
}
