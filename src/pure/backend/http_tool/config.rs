//! An HTTP tool's settings (docs/http-tool-protocol.md): its endpoint and key, the manifest it
//! was made from and the values of its `form` parameters, whether it streams, and the endpoints
//! of the async tool protocol (docs/async-tool-protocol.md).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::pure::backend::settings::{required_url, unknown_keys, Kind, Limits, TaskSettings};
use crate::pure::error::Errors;
use crate::pure::fields::{Fields, FromFields};
use crate::pure::mode::Mode;
use crate::pure::url::check_backend_url;

/// Written by serde; read by `Backend::from_settings` through `pure::fields`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HttpToolConfig {
    pub api_endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Ask for (and read) an SSE answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The HTTP tool manifest (docs/http-tool-protocol.md), checked when stored (`manifest::derive_from_manifest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form_values: Option<Map<String, Value>>,
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub async_endpoints: Option<AsyncEndpoints>,
    #[serde(flatten)]
    pub limits: Limits,
    #[serde(flatten)]
    pub tasks: TaskSettings,
}

impl FromFields for HttpToolConfig {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        Ok(HttpToolConfig {
            api_endpoint: f.text("api_endpoint")?,
            api_key: f.opt_text("api_key")?,
            stream: f.opt_flag("stream")?.unwrap_or(false),
            manifest: f.opt_value("manifest"),
            form_values: f.opt_members("form_values")?,
            async_endpoints: f.opt_object("async")?,
            limits: Limits::default(),
            tasks: TaskSettings::default(),
        })
    }
}

/// The async tool protocol (docs/async-tool-protocol.md): `api_endpoint` submits the work, these follow and cancel it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AsyncEndpoints {
    pub status_endpoint: String,
    pub cancel_endpoint: String,
}

impl FromFields for AsyncEndpoints {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        Ok(AsyncEndpoints { status_endpoint: f.text("status_endpoint")?, cancel_endpoint: f.text("cancel_endpoint")? })
    }
}

impl Kind for HttpToolConfig {
    fn endpoint(&self) -> (&str, Option<&str>) {
        (&self.api_endpoint, self.api_key.as_deref())
    }

    fn limits(&self) -> Limits {
        self.limits.clone()
    }

    fn tasks(&self) -> &TaskSettings {
        &self.tasks
    }

    fn urls(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![("backend.api_endpoint", self.api_endpoint.as_str())];
        if let Some(a) = &self.async_endpoints {
            out.push(("backend.async.status_endpoint", a.status_endpoint.as_str()));
            out.push(("backend.async.cancel_endpoint", a.cancel_endpoint.as_str()));
        }
        out
    }

    /// When the tool is set to stream, whatever the client takes; an async tool too (a call
    /// without a task polls it to its end, with progress as it goes).
    fn streams(&self, _accepts_sse: bool) -> bool {
        self.stream || self.async_endpoints.is_some()
    }
}

const KEYS: [&str; 6] = ["api_endpoint", "api_key", "stream", "manifest", "form_values", "async"];

/// Checks an HTTP tool's settings (the manifest is checked where the form is derived from it).
pub fn validate(obj: &mut Map<String, Value>, errs: &mut Errors) {
    let known: Vec<&str> = KEYS.iter().chain(&Limits::KEYS).chain(&TaskSettings::KEYS).copied().collect();
    required_url(obj, "api_endpoint", errs);
    unknown_keys(obj, Mode::HttpTool, &known, errs);
    Limits::validate(obj, errs);
    if obj.get("stream").is_some_and(|v| !v.is_boolean()) {
        errs.add("backend.stream", "must be true or false");
    }
    TaskSettings::validate(obj, errs);
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
    // An async tool's submit answers at once with a task id (docs/async-tool-protocol.md), so there is no stream
    // to relay; taking both would leave the stream setting silently unused.
    if obj.get("stream") == Some(&Value::Bool(true)) && obj.get("async").is_some_and(Value::is_object) {
        errs.add(
            "backend.stream",
            "cannot be true for an async tool: its submit answers at once with a task id, and progress comes from the status endpoint; remove `stream` or `async`",
        );
    }
}
