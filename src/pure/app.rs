//! An app: one backend (a Dify app, an HTTP tool or another MCP server) and the inputs it takes.
//! Validation of console input, and the masking of backend credentials.

use serde_json::{Map, Value};

use super::backend::config::Backend;
use super::backend::credentials::{credential_at, for_each_credential, is_secret_ref, origin_change, url_view, MASK};
use super::backend::dify::config as dify_config;
use super::backend::dify::conversation;
use super::backend::dify::mode::DifyMode;
use super::backend::http_tool::config as http_tool_config;
use super::backend::http_tool::manifest::derive_from_manifest;
use super::backend::mcp::config as mcp_config;
use super::config;
use super::error::{ApiError, Errors};
use super::form::{self, FormField};
use super::quote::{plain_or_quoted, quote_input};

pub use super::mode::Mode;

/// Longest app name and description accepted (Dify's own limits are lower).
pub const MAX_NAME: usize = 255;
pub const MAX_DESCRIPTION: usize = 4096;

/// A validated app, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec {
    pub name: String,
    pub description: String,
    /// Backend settings as stored: credentials are `$NAME` references or literals.
    pub backend: Value,
    /// The same settings, typed: the backend's kind, and its mode (`Backend::mode`).
    pub config: Backend,
    pub user_input_form: Vec<FormField>,
    pub outputs: Vec<OutputVar>,
}

/// A declared output variable of a workflow (becomes the tool's outputSchema).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputVar {
    pub variable: String,
    pub ty: &'static str,
    pub description: Option<String>,
}

/// JSON Schema's types, and Dify's file types (`pure::backend::dify::file_outputs`).
const OUTPUT_TYPES: [&str; 8] = ["string", "number", "integer", "boolean", "object", "array", "file", "array[file]"];

impl OutputVar {
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("variable".into(), self.variable.clone().into());
        o.insert("type".into(), self.ty.into());
        if let Some(d) = &self.description {
            o.insert("description".into(), d.clone().into());
        }
        Value::Object(o)
    }
}

pub fn outputs_to_json(outputs: &[OutputVar]) -> Value {
    Value::Array(outputs.iter().map(OutputVar::to_json).collect())
}

/// Validates a create (`stored_backend = None`) or replace body. On replace, a credential sent
/// back as `"***"` keeps the stored value (while the backend's origin stays the same).
pub fn validate_app(body: &Value, stored_backend: Option<&Value>) -> Result<AppSpec, ApiError> {
    validate_app_in(body, stored_backend, &config::RefPolicy::default())
}

/// [`validate_app`] on a Worker that allows the `$NAME` references of `refs` (the default
/// allows none).
pub fn validate_app_in(
    body: &Value,
    stored_backend: Option<&Value>,
    refs: &config::RefPolicy,
) -> Result<AppSpec, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    let mut errs = Errors::default();
    let name = required_text(obj, "name", MAX_NAME, &mut errs);
    let description = optional_text(obj, "description", MAX_DESCRIPTION, &mut errs);
    let mode = match obj.get("mode").and_then(Value::as_str) {
        Some(m) => Mode::parse(m).or_else(|| {
            let known: Vec<&str> = Mode::names().collect();
            errs.add("mode", format!("unknown mode {}; expected one of {}", quote_input(m), known.join(", ")));
            None
        }),
        None => {
            errs.add("mode", "is required");
            None
        }
    };
    let form = match obj.get("user_input_form") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => form::parse_form(v, "user_input_form", &mut errs),
    };
    if mode.and_then(Mode::dify).is_some_and(DifyMode::takes_query) {
        if let Some(i) = form.iter().position(|f| f.variable == "query") {
            errs.add(
                format!("user_input_form[{i}]"),
                "'query' is reserved in chat modes for the user's message; rename the variable",
            );
        }
    }
    let conversations = obj.get("backend").and_then(|b| b.get(conversation::SETTING)) == Some(&Value::Bool(true));
    if let Some(i) = form.iter().position(|f| conversations && f.variable == conversation::ARGUMENT) {
        errs.add(
            format!("user_input_form[{i}]"),
            "'conversation_id' is reserved for continuing a conversation when backend.conversations is on; rename the variable",
        );
    }
    let outputs = match obj.get("outputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_outputs(v, &mut errs),
    };
    let backend = match (mode, obj.get("backend")) {
        (_, None | Some(Value::Null)) => {
            errs.add("backend", "is required");
            Value::Null
        }
        (_, Some(b)) if !b.is_object() => {
            errs.add("backend", "must be an object");
            Value::Null
        }
        (Some(mode), Some(b)) => {
            let mut b = b.clone();
            validate_backend(mode, &mut b, stored_backend, refs, &mut errs);
            b
        }
        (None, Some(b)) => b.clone(),
    };
    let mode = mode.unwrap_or(Mode::Dify(DifyMode::Workflow));
    let (form, outputs) = match (mode, backend.as_object()) {
        // An HTTP tool's inputs and outputs come from its manifest.
        (Mode::HttpTool, Some(b)) if b.contains_key("manifest") => {
            if !form.is_empty() || !outputs.is_empty() {
                errs.add("user_input_form", "an http-tool app takes its inputs and outputs from backend.manifest; leave user_input_form and outputs out");
            }
            let (derived_form, derived_outputs) = derive_from_manifest(b, &mut errs);
            let mut sub = Errors::default();
            let f = form::parse_form(&derived_form, "backend.manifest.parameters", &mut sub);
            let o = parse_outputs(&derived_outputs, &mut sub);
            errs.0.extend(sub.0);
            (f, o)
        }
        _ => (form, outputs),
    };
    if !errs.0.is_empty() {
        return Err(ApiError::validation(errs.0));
    }
    // Checked field by field above, so this reads; a failure is a gap between the checks and
    // the config struct, reported rather than stored.
    let config = Backend::from_settings(mode, &backend).map_err(ApiError::bad_request)?;
    Ok(AppSpec { name, description, backend, config, user_input_form: form, outputs })
}

/// Non-fatal notes on an app a person should see (returned as `warnings`).
pub fn warnings(spec: &AppSpec) -> Vec<String> {
    let mut w: Vec<String> = spec
        .user_input_form
        .iter()
        .filter(|f| f.required && !f.ty.reaches_mcp())
        .map(|f| {
            format!(
                "variable '{}' ({}) is required, but MCP clients cannot send {} inputs: calls will fail unless the backend supplies it",
                f.variable,
                f.ty.as_dify(),
                f.ty.as_dify()
            )
        })
        .collect();
    if let Some(url) = spec.config.as_dify().and_then(|c| super::backend::advice::dify_base_url(&c.base_url)) {
        w.push(url);
    }
    let mode = spec.config.mode();
    if !spec.outputs.is_empty() && !matches!(mode, Mode::Dify(DifyMode::Workflow) | Mode::HttpTool) {
        w.push(format!("outputs are only used by workflow and http-tool apps, not {}", mode.as_str()));
    }
    w
}

fn required_text(obj: &Map<String, Value>, key: &str, max: usize, errs: &mut Errors) -> String {
    match obj.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= max => s.clone(),
        Some(Value::String(s)) if s.trim().is_empty() => {
            errs.add(key, "must not be empty");
            String::new()
        }
        Some(Value::String(_)) => {
            errs.add(key, format!("must be at most {max} characters"));
            String::new()
        }
        None | Some(Value::Null) => {
            errs.add(key, "is required");
            String::new()
        }
        Some(_) => {
            errs.add(key, "must be a string");
            String::new()
        }
    }
}

fn optional_text(obj: &Map<String, Value>, key: &str, max: usize, errs: &mut Errors) -> String {
    match obj.get(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.chars().count() <= max => s.clone(),
        Some(Value::String(_)) => {
            errs.add(key, format!("must be at most {max} characters"));
            String::new()
        }
        Some(_) => {
            errs.add(key, "must be a string");
            String::new()
        }
    }
}

fn parse_outputs(v: &Value, errs: &mut Errors) -> Vec<OutputVar> {
    let Some(list) = v.as_array() else {
        errs.add("outputs", "must be an array of {variable, type, description?}");
        return Vec::new();
    };
    let mut out: Vec<OutputVar> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let at = format!("outputs[{i}]");
        let variable = match item.get("variable").and_then(Value::as_str) {
            Some(v) if form::is_variable_name(v) => v,
            _ => {
                errs.add(format!("{at}.variable"), "must be a valid variable name");
                continue;
            }
        };
        if out.iter().any(|o| o.variable == variable) {
            errs.add(format!("{at}.variable"), format!("'{variable}' is used twice"));
            continue;
        }
        let ty = match item.get("type").and_then(Value::as_str) {
            None => "string",
            Some(t) => match OUTPUT_TYPES.iter().find(|k| **k == t) {
                Some(k) => k,
                None => {
                    errs.add(format!("{at}.type"), format!("must be one of {}", OUTPUT_TYPES.join(", ")));
                    continue;
                }
            },
        };
        let description = match item.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                errs.add(format!("{at}.description"), "must be a string");
                continue;
            }
        };
        out.push(OutputVar { variable: variable.to_string(), ty, description });
    }
    out
}

/// Checks a backend object for `mode` in place: each kind's own settings (`backend::*::config`),
/// then the credentials (`"***"` resolved against the stored backend, `$NAME` references
/// against the deployment's [`config::RefPolicy`]).
fn validate_backend(mode: Mode, b: &mut Value, stored: Option<&Value>, refs: &config::RefPolicy, errs: &mut Errors) {
    let Some(obj) = b.as_object_mut() else { return };
    match mode {
        Mode::HttpTool => http_tool_config::validate(obj, errs),
        Mode::Mcp => mcp_config::validate(obj, errs),
        Mode::Dify(_) => dify_config::validate(mode, obj, errs),
    }
    // Where the credentials would be sent, for the origin check of "***".
    let new_urls = url_view(obj);
    for_each_credential(obj, "backend", &mut |path, slot| {
        let Value::String(s) = slot else {
            errs.add(shown_path(path), "must be a string");
            return;
        };
        if crate::pure::sealed::is_sealed(s) {
            errs.add(shown_path(path), crate::pure::sealed::REFUSED_FROM_CONSOLE);
            return;
        }
        if s == MASK {
            let kept = stored.and_then(|st| credential_at(st, path).map(|old| (st, old)));
            match kept {
                Some((st, old)) => match origin_change(st, &new_urls, path) {
                    Some(why) => errs.add(shown_path(path), why),
                    None => *slot = old.clone(),
                },
                None => {
                    errs.add(shown_path(path), "is \"***\" but there is no stored value to keep; send the credential")
                }
            }
        }
        let Some(s) = slot.as_str() else { return };
        if is_secret_ref(s) {
            if let Some(why) = refs.problem(&s[1..]) {
                errs.add(shown_path(path), format!("refers to {s}, {why}"));
            }
        } else if s.starts_with('$') {
            errs.add(shown_path(path), "looks like a secret reference but is not `$NAME` (letters, digits, _)");
        }
    });
}

/// A credential's path as shown in an error: a header name from the client is quoted when it
/// is long or odd.
fn shown_path(path: &str) -> String {
    match path.strip_prefix("backend.headers.") {
        Some(name) => format!("backend.headers.{}", plain_or_quoted(name)),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::backend::credentials::{mask_backend, seal_literals};
    use crate::pure::config::RefPolicy;
    use serde_json::json;

    fn workflow() -> Value {
        json!({
            "name": "Summariser", "description": "Summarises text", "mode": "workflow",
            "backend": {"base_url": "http://127.0.0.1:5001/v1/", "api_key": "app-secret123"},
            "user_input_form": [{"text-input": {"variable": "text", "required": true}}],
            "outputs": [{"variable": "summary", "type": "string"}]
        })
    }

    fn fields(err: ApiError) -> Vec<String> {
        err.errors.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn accepts_a_workflow_and_trims_the_base_url() {
        let spec = validate_app(&workflow(), None).unwrap();
        assert_eq!(spec.config.mode(), Mode::Dify(DifyMode::Workflow));
        assert_eq!(spec.backend["base_url"], "http://127.0.0.1:5001/v1");
        assert_eq!(spec.outputs[0].ty, "string");
        assert!(warnings(&spec).is_empty());
    }

    #[test]
    fn reports_each_bad_field() {
        let err = validate_app(
            &json!({"name": "", "mode": "spreadsheet", "backend": "x", "outputs": [{"variable": "a", "type": "date"}]}),
            None,
        )
        .unwrap_err();
        assert_eq!(fields(err), ["name", "mode", "outputs[0].type", "backend"]);

        let err = validate_app(
            &json!({"name": "a", "mode": "chat", "backend": {"base_url": "ftp://x", "api_key": "", "timeout_seconds": 0, "model": 1, "max_result_bytes": 5},
                     "user_input_form": [{"paragraph": {"variable": "query"}}]}),
            None,
        )
        .unwrap_err();
        assert_eq!(
            fields(err),
            [
                "user_input_form[0]",
                "backend.base_url",
                "backend.model",
                "backend.timeout_seconds",
                "backend.max_result_bytes",
                "backend.api_key"
            ]
        );
        assert!(validate_app(&json!([1]), None).unwrap_err().message.contains("JSON object"));
    }

    #[test]
    fn other_modes_need_their_url() {
        let err = validate_app(&json!({"name": "t", "mode": "http-tool", "backend": {}}), None).unwrap_err();
        assert_eq!(fields(err), ["backend.api_endpoint"]);
        let tool = validate_app(
            &json!({"name": "t", "mode": "http-tool", "backend": {"api_endpoint": "https://t.example/x", "stream": true,
                     "manifest": {"parameters": [{"name": "city", "type": "string", "required": true}], "outputs": [{"name": "temp", "type": "number"}]}}}),
            None,
        )
        .unwrap();
        assert_eq!(tool.user_input_form[0].variable, "city");
        assert_eq!(tool.outputs[0].variable, "temp");
        let err = validate_app(
            &json!({"name": "t", "mode": "http-tool", "backend": {"api_endpoint": "https://t.example/x", "stream": "yes", "task_support": "sometimes", "async": {"status_endpoint": "ftp://x"}}}),
            None,
        )
        .unwrap_err();
        assert_eq!(
            fields(err),
            [
                "backend.stream",
                "backend.task_support",
                "backend.async.status_endpoint",
                "backend.async.cancel_endpoint"
            ]
        );
        let err = validate_app(
            &json!({"name": "t", "mode": "http-tool", "backend": {"api_endpoint": "https://t.example/x", "stream": true,
                     "async": {"status_endpoint": "https://t.example/s", "cancel_endpoint": "https://t.example/c"}}}),
            None,
        )
        .unwrap_err();
        assert_eq!(fields(err), ["backend.stream"]);
        let err = validate_app(&json!({"name": "m", "mode": "mcp", "backend": {"url": "nope"}}), None).unwrap_err();
        assert_eq!(fields(err), ["backend.url"]);
        let ok = validate_app(
            &json!({"name": "m", "mode": "mcp", "backend": {"url": "https://mcp.example.com/mcp", "transport": "auto"}}),
            None,
        );
        assert!(ok.is_ok());
    }

    /// One mode, the other kind's settings: refused at the console with the fields to fix, never
    /// stored as an app of one kind holding another's settings.
    #[test]
    fn a_mode_with_another_kinds_settings_is_refused() {
        let dify = json!({"base_url": "https://d.example/v1", "api_key": "app-k"});
        let err = validate_app(&json!({"name": "t", "mode": "http-tool", "backend": dify}), None).unwrap_err();
        let problems: Vec<(String, String)> = err.errors.iter().map(|f| (f.field.clone(), f.message.clone())).collect();
        assert_eq!(fields(err), ["backend.api_endpoint", "backend.base_url"], "{problems:?}");
        assert!(problems[1].1.starts_with("is not a setting of http-tool apps (known: api_endpoint"), "{problems:?}");
        let err = validate_app(&json!({"name": "t", "mode": "mcp", "backend": dify}), None).unwrap_err();
        assert_eq!(fields(err), ["backend.url", "backend.base_url", "backend.api_key"]);
        let err =
            validate_app(&json!({"name": "t", "mode": "workflow", "backend": {"url": "https://m.example/mcp"}}), None)
                .unwrap_err();
        assert_eq!(fields(err), ["backend.base_url", "backend.url", "backend.api_key"]);
        // Each mode's own settings make an app of that mode and no other.
        for mode in Mode::names() {
            let backend = match Mode::parse(mode) {
                Some(Mode::HttpTool) => json!({"api_endpoint": "https://t.example/x"}),
                Some(Mode::Mcp) => json!({"url": "https://m.example/mcp"}),
                _ => dify.clone(),
            };
            let spec = validate_app(&json!({"name": "t", "mode": mode, "backend": backend}), None).unwrap();
            assert_eq!(spec.config.mode().as_str(), mode);
        }
    }

    #[test]
    fn literal_credentials_are_masked_and_refs_are_not() {
        let backend = json!({"url": "https://x", "api_key": "lit", "headers": {"X-Key": "$TEAM_KEY", "X-Other": "v"},
                             "oauth": {"client_id": "id", "client_secret": "s"}});
        let masked = mask_backend(&backend);
        assert_eq!(masked["api_key"], "***");
        assert_eq!(masked["headers"]["X-Key"], "$TEAM_KEY");
        assert_eq!(masked["headers"]["X-Other"], "***");
        assert_eq!(masked["oauth"]["client_secret"], "***");
        assert_eq!(masked["oauth"]["client_id"], "id");
    }

    #[test]
    fn mask_sent_back_keeps_the_stored_value() {
        let stored = validate_app(&workflow(), None).unwrap().backend;
        let mut body = workflow();
        body["backend"]["api_key"] = json!("***");
        let spec = validate_app(&body, Some(&stored)).unwrap();
        assert_eq!(spec.backend["api_key"], "app-secret123");
        // Without a stored value a mask cannot be resolved.
        let err = validate_app(&body, None).unwrap_err();
        assert_eq!(fields(err), ["backend.api_key"]);
    }

    #[test]
    fn literals_are_sealed_and_refs_are_not() {
        let mut b = json!({"api_key": "lit", "headers": {"A": "$REF", "B": "v"}, "oauth": {"client_secret": "s"}});
        seal_literals::<String>(&mut b, &mut |v| Ok(format!("enc:v1:{}", v.len()))).unwrap();
        assert_eq!(b["api_key"], "enc:v1:3");
        assert_eq!(b["headers"]["A"], "$REF");
        assert_eq!(b["headers"]["B"], "enc:v1:1");
        assert_eq!(b["oauth"]["client_secret"], "enc:v1:1");
        // Sealed values are not sealed twice; a failure names the slot.
        seal_literals::<String>(&mut b, &mut |_| panic!("nothing left to seal")).unwrap();
        let mut c = json!({"api_key": "lit"});
        let failed = seal_literals(&mut c, &mut |_| Err("no key")).unwrap_err();
        assert_eq!((failed.path.as_str(), failed.error), ("backend.api_key", "no key"));
        assert_eq!(failed.to_string(), "backend.api_key no key");
    }

    #[test]
    fn secret_references() {
        assert!(is_secret_ref("$DIFY_KEY"));
        assert!(!is_secret_ref("$"));
        assert!(!is_secret_ref("$1X"));
        let mut body = workflow();
        body["backend"]["api_key"] = json!("$bad-name");
        assert_eq!(fields(validate_app(&body, None).unwrap_err()), ["backend.api_key"]);
    }

    fn replace(body: &Value, stored: &Value) -> Result<AppSpec, ApiError> {
        validate_app(body, Some(stored))
    }

    fn field_messages(err: ApiError) -> Vec<(String, String)> {
        err.errors.into_iter().map(|e| (e.field, e.message)).collect()
    }

    #[test]
    fn mask_is_refused_when_the_dify_origin_changes() {
        let stored = json!({"base_url": "https://api.old.example/v1", "api_key": "enc:v1:sealed"});
        let put = |base_url: &str, key: &str| json!({"name": "a", "mode": "workflow", "backend": {"base_url": base_url, "api_key": key}});
        let err = replace(&put("https://api.new.example/v1", "***"), &stored).unwrap_err();
        assert_eq!(
            field_messages(err),
            [(
                "backend.api_key".to_string(),
                "the backend's origin changed (api.old.example → api.new.example); send the credential again"
                    .to_string()
            )]
        );
        // The same PUT with the credential sent again is fine.
        assert_eq!(
            replace(&put("https://api.new.example/v1", "app-new"), &stored).unwrap().backend["api_key"],
            "app-new"
        );
        // Same origin, other path (and a default port written out): the stored value is kept.
        for same in ["https://api.old.example/v2/", "https://API.old.example:443/x", "https://api.old.example"] {
            assert_eq!(replace(&put(same, "***"), &stored).unwrap().backend["api_key"], "enc:v1:sealed", "{same}");
        }
        // Scheme and port are part of the origin.
        let err = replace(&put("http://api.old.example/v1", "***"), &stored).unwrap_err();
        assert!(err.message.contains("(https://api.old.example → http://api.old.example)"), "{}", err.message);
        let err = replace(&put("https://api.old.example:8443/v1", "***"), &stored).unwrap_err();
        assert!(err.message.contains("(api.old.example → api.old.example:8443)"), "{}", err.message);
        // A $NAME reference kept by "***" follows the same rule.
        let stored_ref = json!({"base_url": "https://api.old.example/v1", "api_key": "$DIFY_KEY"});
        assert!(replace(&put("https://evil.example/v1", "***"), &stored_ref).is_err());
    }

    #[test]
    fn mask_is_refused_when_an_http_tool_endpoint_moves() {
        let stored = json!({"api_endpoint": "https://tools.example/run", "api_key": "enc:v1:k",
                            "async": {"status_endpoint": "https://tools.example/status", "cancel_endpoint": "https://tools.example/cancel"}});
        let put = |endpoint: &str, status: &str| {
            json!({"name": "t", "mode": "http-tool", "backend": {"api_endpoint": endpoint, "api_key": "***",
                   "async": {"status_endpoint": status, "cancel_endpoint": "https://tools.example/cancel"}}})
        };
        assert!(replace(&put("https://tools.example/run2", "https://tools.example/s2"), &stored).is_ok());
        let err = replace(&put("https://tools.example/run", "https://collector.example/status"), &stored).unwrap_err();
        assert_eq!(
            field_messages(err),
            [(
                "backend.api_key".to_string(),
                "the backend's origin changed (tools.example → collector.example); send the credential again"
                    .to_string()
            )]
        );
        // Adding an async endpoint elsewhere is a new destination for the key.
        let stored_sync = json!({"api_endpoint": "https://tools.example/run", "api_key": "enc:v1:k"});
        assert!(replace(&put("https://tools.example/run", "https://collector.example/status"), &stored_sync).is_err());
        assert!(replace(&put("https://tools.example/run", "https://tools.example/status"), &stored_sync).is_ok());
    }

    #[test]
    fn mask_is_refused_when_an_mcp_url_or_token_url_moves() {
        let stored = json!({"url": "https://mcp.example/mcp", "headers": {"X-Key": "enc:v1:h", "X.Dotted": "enc:v1:d"},
                            "oauth": {"token_url": "https://auth.example/token", "client_id": "c", "client_secret": "enc:v1:s"}});
        let put = |url: &str, token_url: &str| {
            json!({"name": "m", "mode": "mcp", "backend": {"url": url, "headers": {"X-Key": "***", "X.Dotted": "***"},
                   "oauth": {"token_url": token_url, "client_id": "c", "client_secret": "***"}}})
        };
        let kept = replace(&put("https://mcp.example/v2/mcp", "https://auth.example/oauth/token"), &stored).unwrap();
        assert_eq!(kept.backend["headers"]["X.Dotted"], "enc:v1:d");
        assert_eq!(kept.backend["oauth"]["client_secret"], "enc:v1:s");
        // The token minted with the stored secret goes to `url`: moving `url` needs the secret
        // again, even with `token_url` where it was.
        let err = replace(&put("https://other.example/mcp", "https://auth.example/token"), &stored).unwrap_err();
        assert_eq!(fields(err), ["backend.headers.X-Key", "backend.headers.X.Dotted", "backend.oauth.client_secret"]);
        let err = replace(&put("https://mcp.example/mcp", "https://steal.example/token"), &stored).unwrap_err();
        assert_eq!(fields(err), ["backend.oauth.client_secret"]);
    }

    #[test]
    fn an_oauth_secret_is_bound_to_the_url_its_token_goes_to() {
        let stored = json!({"url": "https://mcp.example/mcp",
                            "oauth": {"token_url": "https://auth.example/token", "client_id": "c", "client_secret": "enc:v1:s"}});
        let put = |url: &str| {
            json!({"name": "m", "mode": "mcp", "backend": {"url": url,
                   "oauth": {"token_url": "https://auth.example/token", "client_id": "c", "client_secret": "***"}}})
        };
        let err = replace(&put("https://attacker.example/mcp"), &stored).unwrap_err();
        assert_eq!(
            field_messages(err),
            [(
                "backend.oauth.client_secret".to_string(),
                "the backend's origin changed (mcp.example → attacker.example); send the credential again".to_string()
            )]
        );
        // Not even to the token endpoint's own origin: the token is bound to where it was used.
        assert!(replace(&put("https://auth.example/mcp"), &stored).is_err());
        assert_eq!(
            replace(&put("https://mcp.example/v2"), &stored).unwrap().backend["oauth"]["client_secret"],
            "enc:v1:s"
        );
        let mut sent_again = put("https://attacker.example/mcp");
        sent_again["backend"]["oauth"]["client_secret"] = json!("new-secret");
        assert!(replace(&sent_again, &stored).is_ok());
        // The same for an issuer's secret, the private key and the refresh token.
        let stored = json!({"url": "https://mcp.example/mcp",
                            "oauth": {"issuer": "https://as.example", "grant_type": "refresh_token", "client_id": "c", "refresh_token": "enc:v1:r"}});
        let moved = json!({"name": "m", "mode": "mcp", "backend": {"url": "https://attacker.example/mcp",
                           "oauth": {"issuer": "https://as.example", "grant_type": "refresh_token", "client_id": "c", "refresh_token": "***"}}});
        assert_eq!(fields(replace(&moved, &stored).unwrap_err()), ["backend.oauth.refresh_token"]);
    }

    #[test]
    fn a_private_key_is_a_credential_checked_masked_sealed_and_bound() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQggNb8o43TTwFIOgY/\n\
                   FvngVFRO6od/UE/tn5P2rMLEPXWhRANCAAQo57sMF13lGunFkYp4L0CYhhjFcmWF\n\
                   2ui0vMqSTT2jtDXOhGQFOAXrv/dKNx8dzEe03iE29J4KeTgB2079YlmQ\n-----END PRIVATE KEY-----\n";
        let app = |key: &str, alg: &str| {
            json!({"name": "m", "mode": "mcp", "backend": {"url": "https://m.example/mcp",
                   "oauth": {"issuer": "https://as.example", "client_id": "c", "private_key": key, "signing_alg": alg}}})
        };
        let spec = validate_app(&app(pem, "ES256"), None).unwrap();
        assert_eq!(mask_backend(&spec.backend)["oauth"]["private_key"], "***");
        let mut sealed = spec.backend.clone();
        seal_literals::<String>(&mut sealed, &mut |_| Ok("enc:v1:k".into())).unwrap();
        assert_eq!(sealed["oauth"]["private_key"], "enc:v1:k");
        // A literal that is no usable key is refused with the reason, never echoed.
        for (key, alg, needle) in [
            ("not a key", "ES256", "-----BEGIN PRIVATE KEY-----"),
            (pem, "RS256", "is an EC P-256 key, but backend.oauth.signing_alg is RS256"),
        ] {
            let err = validate_app(&app(key, alg), None).unwrap_err();
            assert_eq!(fields(err.clone()), ["backend.oauth.private_key"]);
            assert!(err.message.contains(needle) && !err.message.contains("MIGH"), "{}", err.message);
        }
        // A reference is checked when it is used; "***" keeps the stored key on the same issuer only.
        let allowed = RefPolicy::from_settings(None, Some("UPSTREAM_KEY"));
        assert!(validate_app_in(&app("$UPSTREAM_KEY", "ES256"), None, &allowed).is_ok());
        assert_eq!(replace(&app("***", "ES256"), &sealed).unwrap().backend["oauth"]["private_key"], "enc:v1:k");
        let mut moved = app("***", "ES256");
        moved["backend"]["oauth"]["issuer"] = json!("https://elsewhere.example");
        assert_eq!(fields(replace(&moved, &sealed).unwrap_err()), ["backend.oauth.private_key"]);
    }

    #[test]
    fn origin_change_is_pure() {
        let stored = json!({"base_url": "https://a.example/v1"});
        assert_eq!(origin_change(&stored, &json!({"base_url": "https://a.example/v9"}), "backend.api_key"), None);
        assert!(origin_change(&stored, &json!({"base_url": "https://b.example/v1"}), "backend.api_key").is_some());
        // Nothing stored to compare with: refused.
        assert!(origin_change(&json!({}), &json!({"base_url": "https://b.example"}), "backend.api_key").is_some());
        // A new URL that does not parse is left to the URL check.
        assert_eq!(origin_change(&stored, &json!({"base_url": "not a url"}), "backend.api_key"), None);
    }

    #[test]
    fn references_to_flowgates_own_configuration_are_refused() {
        for name in ["ADMIN_TOKEN", "SECRETS_KEY", "SECRETS_KEY_PREVIOUS", "DB", "ADMIN_AUTH_LIMIT"] {
            let mut body = workflow();
            body["backend"]["api_key"] = json!(format!("${name}"));
            let err = validate_app(&body, None).unwrap_err();
            assert_eq!(fields(err.clone()), ["backend.api_key"]);
            assert!(
                err.message.contains(&format!("refers to ${name}, which is Flowgate's own configuration")),
                "{}",
                err.message
            );
        }
        let mcp = json!({"name": "m", "mode": "mcp", "backend": {"url": "https://m.example/mcp",
                         "headers": {"Authorization": "$ADMIN_TOKEN"}, "oauth": {"token_url": "https://a.example/t", "client_id": "c", "client_secret": "$SECRETS_KEY"}}});
        assert_eq!(
            fields(validate_app(&mcp, None).unwrap_err()),
            ["backend.headers.Authorization", "backend.oauth.client_secret"]
        );
    }

    #[test]
    fn secret_references_follow_the_deployments_policy() {
        let mut body = workflow();
        body["backend"]["api_key"] = json!("$DIFY_KEY");
        // Deny by default: neither SECRET_REF_PREFIX nor SECRET_REF_NAMES is set.
        let err = validate_app(&body, None).unwrap_err();
        assert_eq!(fields(err.clone()), ["backend.api_key"]);
        assert!(err.message.contains("allows no $NAME references"), "{}", err.message);
        let prefix = RefPolicy::from_settings(Some("BACKEND_"), None);
        let err = validate_app_in(&body, None, &prefix).unwrap_err();
        assert_eq!(fields(err.clone()), ["backend.api_key"]);
        assert!(err.message.contains("start with BACKEND_"), "{}", err.message);
        assert!(validate_app_in(&body, None, &RefPolicy::from_settings(None, Some("DIFY_KEY"))).is_ok());
        body["backend"]["api_key"] = json!("$BACKEND_DIFY_KEY");
        assert!(validate_app_in(&body, None, &prefix).is_ok());
        // Literals are not references: the rule does not touch them.
        body["backend"]["api_key"] = json!("app-literal");
        assert!(validate_app(&body, None).is_ok());
    }

    #[test]
    fn sealed_values_are_refused_from_the_console() {
        let sealed = "enc:v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let mut body = workflow();
        body["backend"]["api_key"] = json!(sealed);
        let err = validate_app(&body, None).unwrap_err();
        assert_eq!(fields(err.clone()), ["backend.api_key"]);
        assert!(err.message.contains("sealed value"), "{}", err.message);
        // On a replace too, where a stored sealed value exists.
        let stored = json!({"base_url": "http://127.0.0.1:5001/v1/", "api_key": sealed});
        assert_eq!(fields(validate_app(&body, Some(&stored)).unwrap_err()), ["backend.api_key"]);
        // "***" keeps the stored sealed value: that is not one arriving from the console.
        body["backend"]["api_key"] = json!("***");
        assert_eq!(validate_app(&body, Some(&stored)).unwrap().backend["api_key"], sealed);
        let mcp = json!({"name": "m", "mode": "mcp", "backend": {"url": "https://m.example/mcp",
                         "headers": {"X-Key": sealed}, "oauth": {"token_url": "https://a.example/t", "client_id": "c", "client_secret": sealed}}});
        assert_eq!(
            fields(validate_app(&mcp, None).unwrap_err()),
            ["backend.headers.X-Key", "backend.oauth.client_secret"]
        );
    }

    #[test]
    fn echoed_input_is_bounded() {
        let mut body = workflow();
        body["mode"] = json!("m".repeat(10_000));
        let err = validate_app(&body, None).unwrap_err();
        assert!(err.message.len() < 300, "{} bytes", err.message.len());
        assert!(err.message.contains("…\" (10000 characters)"), "{}", err.message);
        let mut body = workflow();
        body["backend"][&"k".repeat(5_000)] = json!(1);
        let err = validate_app(&body, None).unwrap_err();
        assert!(err.message.len() < 600, "{} bytes", err.message.len());
        assert!(err.errors[0].field.ends_with("…\" (5000 characters)"), "{}", err.errors[0].field);
    }

    #[test]
    fn warns_on_required_inputs_clients_cannot_send() {
        let mut body = workflow();
        body["user_input_form"] = json!([{"file": {"variable": "doc", "required": true}},
            {"file-list": {"variable": "docs", "required": true}},
            {"external_data_tool": {"variable": "ext", "required": true}}]);
        let w = warnings(&validate_app(&body, None).unwrap());
        assert_eq!(w.len(), 1, "files are tool arguments now: {w:?}");
        assert!(w[0].contains("'ext' (external_data_tool)"));
    }
}
