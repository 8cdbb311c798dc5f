//! An upstream MCP server's settings: where it is and how to reach it (transport, static,
//! forwarded and OAuth headers), which of its tools to expose and how, its timeouts, and the
//! task toolsets that run as durable tasks (docs/async-tool-protocol.md).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::headers::{check_forward_headers, header_value_problem, OnMissing};
use super::oauth::OAuthConfig;
use super::transport::TransportChoice;
use crate::pure::backend::credentials::{is_secret_ref, MASK};
use crate::pure::backend::settings::{required_url, unknown_keys, Kind, Limits, TaskSettings, MAX_TIMEOUT_SECONDS};
use crate::pure::error::Errors;
use crate::pure::fields::{Fields, FromFields};
use crate::pure::http_field::is_header_name;
use crate::pure::mode::Mode;
use crate::pure::protocol::version::Version;
use crate::pure::quote::{plain_or_quoted, quote_input};
use crate::pure::url::check_backend_url;

/// Until an upstream session is set up (initialize, or discovery when stateless).
pub const DEFAULT_INIT_TIMEOUT_S: u64 = 60;
/// One proxied call, when the app does not say.
pub const DEFAULT_CALL_TIMEOUT_S: u64 = 300;
/// How long an upstream's tool list is reused.
pub const DEFAULT_TOOLS_TTL_S: u64 = 300;

/// Written by serde; read by `Backend::from_settings` through `pure::fields`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpConfig {
    pub url: String,
    #[serde(default, skip_serializing_if = "is_auto")]
    pub transport: TransportChoice,
    /// `backend.protocol_version`: the one MCP revision spoken with this upstream (no
    /// negotiation, no 2025 `initialize` probe for 2026-07-28); absent: negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<Version>,
    /// Static headers; values are sealed literals or `$NAME` references.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `backend.oauth`, read by `oauth::OAuthConfig::from_value` (which resolves its secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<Value>,
    /// Upstream header name → the incoming header it is taken from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub forward_headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "is_deny")]
    pub on_missing: OnMissing,
    /// Tool names get the app's name as a prefix (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name_prefix: Option<bool>,
    /// Upstream names; absent: all allowed, `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_tools: Vec<String>,
    /// Upstream resource URIs and resource template URI templates, as the upstream lists them;
    /// absent: all allowed, `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_resources: Vec<String>,
    /// Upstream prompt names (before prefixing); absent: all allowed, `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_prompts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_prompts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_init_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_cache_ttl_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_toolsets: Vec<TaskToolset>,
    #[serde(flatten)]
    pub tasks: TaskSettings,
}

impl FromFields for McpConfig {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        Ok(McpConfig {
            url: f.text("url")?,
            transport: f.opt_named("transport")?.unwrap_or_default(),
            protocol_version: f.opt_named("protocol_version")?,
            headers: f.text_map("headers")?,
            oauth: f.opt_value("oauth"),
            forward_headers: f.text_map("forward_headers")?,
            on_missing: f.opt_named("on_missing")?.unwrap_or_default(),
            tool_name_prefix: f.opt_flag("tool_name_prefix")?,
            allowed_tools: f.opt_texts("allowed_tools")?,
            denied_tools: f.texts("denied_tools")?,
            allowed_resources: f.opt_texts("allowed_resources")?,
            denied_resources: f.texts("denied_resources")?,
            allowed_prompts: f.opt_texts("allowed_prompts")?,
            denied_prompts: f.texts("denied_prompts")?,
            session_init_timeout: f.opt_uint("session_init_timeout")?,
            tool_call_timeout: f.opt_uint("tool_call_timeout")?,
            tools_cache_ttl_seconds: f.opt_uint("tools_cache_ttl_seconds")?,
            task_toolsets: f.list("task_toolsets")?,
            tasks: TaskSettings::default(),
        })
    }
}

fn is_auto(t: &TransportChoice) -> bool {
    *t == TransportChoice::Auto
}

fn is_deny(o: &OnMissing) -> bool {
    *o == OnMissing::Deny
}

/// The async tool protocol over MCP: three upstream tools that submit, follow and cancel one piece of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskToolset {
    pub name: String,
    pub submit_tool: String,
    pub status_tool: String,
    pub cancel_tool: String,
}

impl FromFields for TaskToolset {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        Ok(TaskToolset {
            name: f.text("name")?,
            submit_tool: f.text("submit_tool")?,
            status_tool: f.text("status_tool")?,
            cancel_tool: f.text("cancel_tool")?,
        })
    }
}

/// A follow-up role in the async tool protocol's protocol: a toolset's status and cancel tools, or an async
/// HTTP tool's status and cancel endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolsetRole {
    Status,
    Cancel,
}

impl ToolsetRole {
    /// The role's setting in a toolset.
    pub fn key(self) -> &'static str {
        match self {
            ToolsetRole::Status => "status_tool",
            ToolsetRole::Cancel => "cancel_tool",
        }
    }
}

impl TaskToolset {
    pub fn tool(&self, role: ToolsetRole) -> &str {
        match role {
            ToolsetRole::Status => &self.status_tool,
            ToolsetRole::Cancel => &self.cancel_tool,
        }
    }
}

impl Kind for McpConfig {
    /// Credentials are headers and OAuth here (`shell::upstream`), not one key.
    fn endpoint(&self) -> (&str, Option<&str>) {
        (&self.url, None)
    }

    /// `tool_call_timeout` bounds a call (default 300 s), and it may be silent that long
    /// (upstream tools report progress only if they choose to); the default size limit.
    fn limits(&self) -> Limits {
        let secs = Some(self.call_timeout().as_secs());
        Limits {
            timeout_seconds: secs,
            first_byte_timeout_seconds: secs,
            idle_timeout_seconds: secs,
            max_result_bytes: None,
        }
    }

    fn total_setting(&self) -> &'static str {
        "tool_call_timeout"
    }

    fn tasks(&self) -> &TaskSettings {
        &self.tasks
    }

    fn urls(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![("backend.url", self.url.as_str())];
        for (key, path) in [("token_url", "backend.oauth.token_url"), ("issuer", "backend.oauth.issuer")] {
            if let Some(t) = self.oauth.as_ref().and_then(|o| o.get(key)).and_then(Value::as_str) {
                out.push((path, t));
            }
        }
        out
    }

    /// Whenever the client takes SSE: notifications relay as they come.
    fn streams(&self, accepts_sse: bool) -> bool {
        accepts_sse
    }
}

impl McpConfig {
    /// The task toolset whose submit tool is `upstream_name`.
    pub fn toolset_of(&self, upstream_name: &str) -> Option<&TaskToolset> {
        self.task_toolsets.iter().find(|t| t.submit_tool == upstream_name)
    }

    /// The status and cancel tools of every toolset: not exposed as tools of their own.
    pub fn is_toolset_helper(&self, upstream_name: &str) -> bool {
        self.task_toolsets.iter().any(|t| t.status_tool == upstream_name || t.cancel_tool == upstream_name)
    }

    pub fn init_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.session_init_timeout.unwrap_or(DEFAULT_INIT_TIMEOUT_S))
    }

    pub fn call_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.tool_call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT_S))
    }

    /// At least KV's minimum expiry.
    pub fn tools_ttl_seconds(&self) -> u64 {
        self.tools_cache_ttl_seconds.unwrap_or(DEFAULT_TOOLS_TTL_S).max(60)
    }
}

const KEYS: [&str; 21] = [
    "url",
    "transport",
    "protocol_version",
    "headers",
    "oauth",
    "forward_headers",
    "on_missing",
    "tool_name_prefix",
    "allowed_tools",
    "denied_tools",
    "allowed_resources",
    "denied_resources",
    "allowed_prompts",
    "denied_prompts",
    "session_init_timeout",
    "tool_call_timeout",
    "tools_cache_ttl_seconds",
    "task_support",
    "task_toolsets",
    "poll_interval_seconds",
    "input_required_poll_seconds",
];

/// `backend.protocol_version`: a revision Flowgate speaks; a stateless one (2026-07-28, no
/// `initialize`) only over Streamable HTTP, which is the only transport that has it.
fn check_protocol_version(obj: &Map<String, Value>) -> Result<(), String> {
    let v = match obj.get("protocol_version") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => s,
        Some(_) => return Err("must be a string naming an MCP revision, e.g. \"2026-07-28\"".into()),
    };
    let all = Version::all_strs().collect::<Vec<_>>().join(", ");
    let Some(version) = Version::parse(v) else {
        return Err(format!(
            "{} is not an MCP revision Flowgate speaks ({all}); leave it out to negotiate",
            quote_input(v)
        ));
    };
    if version.is_stateless() && obj.get("transport").and_then(Value::as_str) == Some("sse") {
        return Err(format!(
            "{} has no initialize and runs over Streamable HTTP only, but backend.transport is \"sse\"",
            version.as_str()
        ));
    }
    Ok(())
}

/// Checks an upstream MCP server's settings.
pub fn validate(obj: &Map<String, Value>, errs: &mut Errors) {
    required_url(obj, "url", errs);
    unknown_keys(obj, Mode::Mcp, &KEYS, errs);
    TaskSettings::validate(obj, errs);
    if let Err(e) = TransportChoice::parse(obj.get("transport").and_then(Value::as_str)) {
        errs.add("backend.transport", e);
    } else if obj.get("transport").is_some_and(|t| !t.is_string()) {
        errs.add("backend.transport", "must be auto, streamable-http or sse");
    }
    if let Err(e) = check_protocol_version(obj) {
        errs.add("backend.protocol_version", e);
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
    if let Err(e) = check_forward_headers(obj) {
        errs.add("backend.forward_headers", e);
    }
    match obj.get("oauth") {
        None | Some(Value::Null) => {}
        Some(o @ Value::Object(_)) => {
            if let Err(e) = OAuthConfig::from_value(o, &|_| Ok("set".into())) {
                errs.add("backend.oauth", e);
            }
            if let Some(why) = literal_key_problem(o) {
                errs.add("backend.oauth.private_key", why);
            }
            for key in ["token_url", "issuer"] {
                if let Some(Err(why)) = o.get(key).and_then(Value::as_str).map(check_backend_url) {
                    errs.add(format!("backend.oauth.{key}"), why);
                }
            }
        }
        Some(_) => errs.add("backend.oauth", "must be an object {token_url or issuer, client_id, client_secret, ...}"),
    }
    for (key, what) in [
        ("allowed_tools", "upstream tool names"),
        ("denied_tools", "upstream tool names"),
        ("allowed_resources", "upstream resource URIs and URI templates"),
        ("denied_resources", "upstream resource URIs and URI templates"),
        ("allowed_prompts", "upstream prompt names"),
        ("denied_prompts", "upstream prompt names"),
    ] {
        if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
            if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                errs.add(format!("backend.{key}"), format!("must be an array of {what}"));
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

/// A literal `oauth.private_key` (not `"***"`, a `$NAME` or a sealed value, which are checked
/// when they are used) must be a key Flowgate can sign with, for `signing_alg` when set; the
/// shell then imports it with WebCrypto before storing it.
fn literal_key_problem(oauth: &Value) -> Option<String> {
    let key = oauth.get("private_key")?.as_str().filter(|k| !k.trim().is_empty())?;
    if key == crate::pure::backend::credentials::MASK
        || crate::pure::backend::credentials::is_secret_ref(key)
        || crate::pure::sealed::is_sealed(key)
    {
        return None;
    }
    let alg = oauth.get("signing_alg").and_then(Value::as_str).and_then(super::client_assertion::Alg::parse);
    super::client_assertion::read_private_key(key, alg).err()
}
