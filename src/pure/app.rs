//! An app: one backend (a Dify app, an HTTP tool or another MCP server) and the inputs it takes.
//! Validation of console input, and the masking of backend credentials.

use serde_json::{Map, Value};

use super::backend::http_tool::manifest::derive_from_manifest;
use super::backend::mcp::headers::{forwarded_headers, header_value_problem, is_header_name};
use super::backend::mcp::oauth::OAuthConfig;
use super::backend::mcp::transport::TransportChoice;
use super::config;
use super::credential::{credential_at, for_each_credential, is_secret_ref, MASK};
use super::error::{ApiError, Errors};
use super::form::{self, FormField};
use super::quote::{plain_or_quoted, quote_input};
use super::url::check_backend_url;

pub use super::mode::Mode;

/// Longest app name and description accepted (Dify's own limits are lower).
pub const MAX_NAME: usize = 255;
pub const MAX_DESCRIPTION: usize = 4096;
/// Whole call, start to final result.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Until the backend's response headers arrive (Workers' fetch does not expose the connect
/// step separately, so this bounds connect and first byte together).
pub const DEFAULT_FIRST_BYTE_TIMEOUT_SECONDS: u64 = 30;
/// Between two chunks of a streamed answer (Dify pings every 10 s).
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: u64 = 60;
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;
/// Largest `max_result_bytes` an app may set.
pub const MAX_RESULT_BYTES_LIMIT: u64 = 16 << 20;
const TIMEOUT_KEYS: [&str; 3] = ["timeout_seconds", "first_byte_timeout_seconds", "idle_timeout_seconds"];
/// What the console shows instead of a stored literal credential.

/// A validated app, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec {
    pub name: String,
    pub description: String,
    pub mode: Mode,
    /// Backend settings as stored: credentials are `$NAME` references or literals.
    pub backend: Value,
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

const OUTPUT_TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "object", "array"];

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
    validate_app_in(body, stored_backend, None)
}

/// [`validate_app`] on a Worker whose `SECRET_REF_PREFIX` is `ref_prefix`: `$NAME` references
/// must start with it.
pub fn validate_app_in(
    body: &Value,
    stored_backend: Option<&Value>,
    ref_prefix: Option<&str>,
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
    if mode.is_some_and(Mode::takes_query) {
        if let Some(i) = form.iter().position(|f| f.variable == "query") {
            errs.add(
                format!("user_input_form[{i}]"),
                "'query' is reserved in chat modes for the user's message; rename the variable",
            );
        }
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
            validate_backend(mode, &mut b, stored_backend, ref_prefix, &mut errs);
            b
        }
        (None, Some(b)) => b.clone(),
    };
    let mode = mode.unwrap_or(Mode::Workflow);
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
    errs.into_result(AppSpec { name, description, mode, backend, user_input_form: form, outputs })
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
    if !spec.outputs.is_empty() && spec.mode != Mode::Workflow && spec.mode != Mode::HttpTool {
        w.push(format!("outputs are only used by workflow and http-tool apps, not {}", spec.mode.as_str()));
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

/// Checks a backend object for `mode` in place: URLs, timeouts, credentials (`"***"` resolved
/// against the stored backend, `$NAME` references against Flowgate's own names and the prefix).
fn validate_backend(mode: Mode, b: &mut Value, stored: Option<&Value>, ref_prefix: Option<&str>, errs: &mut Errors) {
    let (url_key, allowed): (&str, &[&str]) = match mode {
        m if m.is_dify() => (
            "base_url",
            &[
                "base_url",
                "api_key",
                "timeout_seconds",
                "first_byte_timeout_seconds",
                "idle_timeout_seconds",
                "max_result_bytes",
                "task_support",
                "poll_interval_seconds",
                "input_required_poll_seconds",
            ],
        ),
        Mode::HttpTool => (
            "api_endpoint",
            &[
                "api_endpoint",
                "api_key",
                "stream",
                "manifest",
                "form_values",
                "timeout_seconds",
                "first_byte_timeout_seconds",
                "idle_timeout_seconds",
                "max_result_bytes",
                "task_support",
                "async",
                "poll_interval_seconds",
                "input_required_poll_seconds",
            ],
        ),
        _ => (
            "url",
            &[
                "url",
                "transport",
                "headers",
                "oauth",
                "forward_headers",
                "on_missing",
                "tool_name_prefix",
                "allowed_tools",
                "denied_tools",
                "session_init_timeout",
                "tool_call_timeout",
                "tools_cache_ttl_seconds",
                "task_support",
                "task_toolsets",
                "poll_interval_seconds",
                "input_required_poll_seconds",
            ],
        ),
    };
    let Some(obj) = b.as_object_mut() else { return };
    match obj.get(url_key) {
        Some(Value::String(u)) => {
            if let Err(why) = check_backend_url(u) {
                errs.add(format!("backend.{url_key}"), why);
            } else if mode.is_dify() {
                // Stored without a trailing slash so paths join cleanly.
                let trimmed = u.trim_end_matches('/').to_string();
                obj.insert(url_key.into(), trimmed.into());
            }
        }
        _ => errs.add(format!("backend.{url_key}"), "is required and must be an http or https URL"),
    }
    if !allowed.is_empty() {
        for k in obj.keys().filter(|k| !allowed.contains(&k.as_str())) {
            errs.add(
                format!("backend.{}", plain_or_quoted(k)),
                format!("is not a setting of {} apps (known: {})", mode.as_str(), allowed.join(", ")),
            );
        }
    }
    for key in TIMEOUT_KEYS {
        match obj.get(key).map(Value::as_u64) {
            None | Some(Some(1..=MAX_TIMEOUT_SECONDS)) => {}
            Some(_) => {
                errs.add(format!("backend.{key}"), format!("must be an integer from 1 to {MAX_TIMEOUT_SECONDS}"))
            }
        }
    }
    for key in ["poll_interval_seconds", "input_required_poll_seconds"] {
        match obj.get(key).map(Value::as_u64) {
            None | Some(Some(1..=300)) => {}
            Some(_) => errs.add(format!("backend.{key}"), "must be an integer from 1 to 300"),
        }
    }
    match obj.get("max_result_bytes").map(Value::as_u64) {
        None | Some(Some(1024..=MAX_RESULT_BYTES_LIMIT)) => {}
        Some(_) => {
            errs.add("backend.max_result_bytes", format!("must be an integer from 1024 to {MAX_RESULT_BYTES_LIMIT}"))
        }
    }
    if obj.get("stream").is_some_and(|v| !v.is_boolean()) {
        errs.add("backend.stream", "must be true or false");
    }
    if mode == Mode::Mcp {
        validate_mcp_backend(obj, errs);
    }
    match obj.get("task_support") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if crate::pure::mcp::tasks::TaskSupport::parse(t).is_some() => {}
        Some(_) => errs.add("backend.task_support", "must be forbidden, optional or required"),
    }
    // Seed 002's async protocol: api_endpoint submits, these two follow and cancel the work.
    match obj.get("async") {
        None | Some(Value::Null) => {}
        Some(Value::Object(a)) => {
            for key in ["status_endpoint", "cancel_endpoint"] {
                match a.get(key).and_then(Value::as_str).map(check_backend_url) {
                    Some(Ok(())) => {}
                    Some(Err(why)) => errs.add(format!("backend.async.{key}"), why),
                    None => errs.add(format!("backend.async.{key}"), "is required: an http or https URL"),
                }
            }
        }
        Some(_) => errs.add("backend.async", "must be an object {status_endpoint, cancel_endpoint}"),
    }
    if mode.is_dify() && !matches!(obj.get("api_key"), Some(Value::String(k)) if !k.is_empty()) {
        errs.add("backend.api_key", "is required: the Dify app's API key (app-...) or a $SECRET_NAME");
    }
    // Where the credentials would be sent, for the origin check of "***".
    let new_urls = url_view(obj);
    for_each_credential(obj, "backend", &mut |path, slot| {
        let Value::String(s) = slot else {
            errs.add(shown_path(path), "must be a string");
            return;
        };
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
            if let Some(why) = config::reference_problem(&s[1..], ref_prefix) {
                errs.add(shown_path(path), format!("refers to {s}, {why}"));
            }
        } else if s.starts_with('$') {
            errs.add(shown_path(path), "looks like a secret reference but is not `$NAME` (letters, digits, _)");
        }
    });
}

/// The settings that say where each kind of credential is sent: `api_key` goes to a Dify app's
/// `base_url`, or to an HTTP tool's `api_endpoint` and its async status and cancel endpoints;
/// an MCP app's `headers` go to its `url`; the OAuth secrets go to `oauth.token_url`.
fn credential_url_keys(path: &str) -> &'static [&'static str] {
    if path == "backend.api_key" {
        &["base_url", "api_endpoint", "async.status_endpoint", "async.cancel_endpoint"]
    } else if path.starts_with("backend.headers.") {
        &["url"]
    } else if path.starts_with("backend.oauth.") {
        &["oauth.token_url"]
    } else {
        &[]
    }
}

const URL_KEYS: [&str; 6] =
    ["base_url", "api_endpoint", "async.status_endpoint", "async.cancel_endpoint", "url", "oauth.token_url"];

fn url_at<'a>(backend: &'a Value, key: &str) -> Option<&'a str> {
    key.split('.').try_fold(backend, |v, part| v.get(part))?.as_str()
}

/// Just the URL settings of a backend object (what [`origin_change`] reads).
fn url_view(obj: &Map<String, Value>) -> Value {
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
    let keys = credential_url_keys(path);
    let parse = |b: &Value, k: &str| url_at(b, k).and_then(|u| ::url::Url::parse(u).ok());
    let before: Vec<(&str, ::url::Url)> = keys.iter().filter_map(|k| parse(stored, k).map(|u| (*k, u))).collect();
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
fn shown_origins(a: &::url::Url, b: &::url::Url) -> (String, String) {
    let host = |u: &::url::Url| {
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

/// A credential's path as shown in an error: a header name from the client is quoted when it
/// is long or odd.
fn shown_path(path: &str) -> String {
    match path.strip_prefix("backend.headers.") {
        Some(name) => format!("backend.headers.{}", plain_or_quoted(name)),
        None => path.to_string(),
    }
}

/// Settings of an upstream MCP server app.
fn validate_mcp_backend(obj: &Map<String, Value>, errs: &mut Errors) {
    if let Err(e) = TransportChoice::parse(obj.get("transport").and_then(Value::as_str)) {
        errs.add("backend.transport", e);
    } else if obj.get("transport").is_some_and(|t| !t.is_string()) {
        errs.add("backend.transport", "must be auto, streamable-http or sse");
    }
    match obj.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            for (name, v) in h {
                if !is_header_name(name) {
                    errs.add(format!("backend.headers.{}", plain_or_quoted(name)), "is not a valid header name");
                }
                match v.as_str() {
                    Some(s) if is_secret_ref(s) || s == MASK => {}
                    Some(s) => {
                        if let Some(why) = header_value_problem(s) {
                            errs.add(format!("backend.headers.{}", plain_or_quoted(name)), why);
                        }
                    }
                    None => errs.add(format!("backend.headers.{}", plain_or_quoted(name)), "must be a string"),
                }
            }
        }
        Some(_) => errs.add("backend.headers", "must be an object of header names to values"),
    }
    if let Err(e) = forwarded_headers(&Value::Object(obj.clone()), &|_| Some("x".into())) {
        errs.add("backend.forward_headers", e);
    }
    match obj.get("oauth") {
        None | Some(Value::Null) => {}
        Some(o @ Value::Object(_)) => {
            if let Err(e) = OAuthConfig::from_value(o, &|_| Ok("set".into())) {
                errs.add("backend.oauth", e);
            }
            if let Some(Err(why)) = o.get("token_url").and_then(Value::as_str).map(check_backend_url) {
                errs.add("backend.oauth.token_url", why);
            }
        }
        Some(_) => errs.add("backend.oauth", "must be an object {token_url, client_id, client_secret, ...}"),
    }
    for key in ["allowed_tools", "denied_tools"] {
        if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
            if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                errs.add(format!("backend.{key}"), "must be an array of upstream tool names");
            }
        }
    }
    if obj.get("tool_name_prefix").is_some_and(|v| !v.is_boolean()) {
        errs.add("backend.tool_name_prefix", "must be true or false");
    }
    for key in ["session_init_timeout", "tool_call_timeout"] {
        match obj.get(key).map(Value::as_u64) {
            None | Some(Some(1..=MAX_TIMEOUT_SECONDS)) => {}
            Some(_) => errs
                .add(format!("backend.{key}"), format!("must be a number of seconds from 1 to {MAX_TIMEOUT_SECONDS}")),
        }
    }
    match obj.get("task_toolsets") {
        None | Some(Value::Null) => {}
        Some(Value::Array(sets)) => {
            let mut seen: Vec<&str> = Vec::new();
            for (i, set) in sets.iter().enumerate() {
                let at = format!("backend.task_toolsets[{i}]");
                match set["name"].as_str() {
                    Some(n) if !n.is_empty() && n.chars().count() <= 255 => {}
                    _ => errs.add(format!("{at}.name"), "is required: 1 to 255 characters"),
                }
                for role in ["submit_tool", "status_tool", "cancel_tool"] {
                    match set[role].as_str() {
                        Some(t) if seen.contains(&t) => errs.add(
                            format!("{at}.{role}"),
                            format!("{} is already bound to another role or toolset", quote_input(t)),
                        ),
                        Some(t) if !t.is_empty() => seen.push(t),
                        _ => errs.add(format!("{at}.{role}"), "is required: the upstream tool's name"),
                    }
                }
            }
        }
        Some(_) => {
            errs.add("backend.task_toolsets", "must be an array of {name, submit_tool, status_tool, cancel_tool}")
        }
    }
    match obj.get("tools_cache_ttl_seconds").map(Value::as_u64) {
        None | Some(Some(60..=86_400)) => {}
        Some(_) => errs.add("backend.tools_cache_ttl_seconds", "must be from 60 (KV's minimum) to 86400"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::credential::{mask_backend, seal_literals};
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
        assert_eq!(spec.mode, Mode::Workflow);
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
        let err = validate_app(&json!({"name": "m", "mode": "mcp", "backend": {"url": "nope"}}), None).unwrap_err();
        assert_eq!(fields(err), ["backend.url"]);
        let ok = validate_app(
            &json!({"name": "m", "mode": "mcp", "backend": {"url": "https://mcp.example.com/mcp", "transport": "auto"}}),
            None,
        );
        assert!(ok.is_ok());
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
        seal_literals(&mut b, &mut |v| Ok(format!("enc:v1:{}", v.len()))).unwrap();
        assert_eq!(b["api_key"], "enc:v1:3");
        assert_eq!(b["headers"]["A"], "$REF");
        assert_eq!(b["headers"]["B"], "enc:v1:1");
        assert_eq!(b["oauth"]["client_secret"], "enc:v1:1");
        // Sealed values are not sealed twice; a failure names the slot.
        seal_literals(&mut b, &mut |_| panic!("nothing left to seal")).unwrap();
        let mut c = json!({"api_key": "lit"});
        assert_eq!(seal_literals(&mut c, &mut |_| Err("no key".into())).unwrap_err(), "backend.api_key no key");
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
        let err = replace(&put("https://other.example/mcp", "https://auth.example/token"), &stored).unwrap_err();
        assert_eq!(fields(err), ["backend.headers.X-Key", "backend.headers.X.Dotted"]);
        let err = replace(&put("https://mcp.example/mcp", "https://steal.example/token"), &stored).unwrap_err();
        assert_eq!(fields(err), ["backend.oauth.client_secret"]);
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
    fn the_secret_ref_prefix_rule() {
        let mut body = workflow();
        body["backend"]["api_key"] = json!("$DIFY_KEY");
        assert!(validate_app_in(&body, None, None).is_ok());
        let err = validate_app_in(&body, None, Some("BACKEND_")).unwrap_err();
        assert_eq!(fields(err.clone()), ["backend.api_key"]);
        assert!(err.message.contains("start with BACKEND_"), "{}", err.message);
        body["backend"]["api_key"] = json!("$BACKEND_DIFY_KEY");
        assert!(validate_app_in(&body, None, Some("BACKEND_")).is_ok());
        // Literals are not references: the rule does not touch them.
        body["backend"]["api_key"] = json!("app-literal");
        assert!(validate_app_in(&body, None, Some("BACKEND_")).is_ok());
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
    fn warns_on_required_file_inputs() {
        let mut body = workflow();
        body["user_input_form"] = json!([{"file": {"variable": "doc", "required": true}}]);
        let w = warnings(&validate_app(&body, None).unwrap());
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("'doc'"));
    }
}
