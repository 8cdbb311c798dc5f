//! Settings every backend kind shares: how long a call may take and how much it may answer
//! (`Limits`), whether its tools run as durable tasks and how they are polled (`TaskSettings`),
//! and the check for settings a kind does not have.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::pure::error::Errors;
use crate::pure::mode::Mode;
use crate::pure::protocol::tasks::TaskSupport;

/// Whole call, start to final result.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Until the backend's response headers arrive (Workers' fetch does not expose the connect
/// step separately, so this bounds connect and first byte together).
pub const DEFAULT_FIRST_BYTE_TIMEOUT_SECONDS: u64 = 30;
/// Between two chunks of a streamed answer (Dify pings every 10 s).
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: u64 = 60;
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;
/// What one answer may carry when the app does not say.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// Largest `max_result_bytes` an app may set.
pub const MAX_RESULT_BYTES_LIMIT: u64 = 16 << 20;
/// Bounds of the task polling settings, in seconds.
const POLL_SECONDS: std::ops::RangeInclusive<u64> = 1..=300;

/// What the shared call path asks of every backend kind (each kind's config implements it).
pub trait Kind {
    /// Where a call goes (the app's URL) and the credential it carries, as stored.
    fn endpoint(&self) -> (&str, Option<&str>);
    /// How long a call may take and how much it may answer.
    fn limits(&self) -> Limits;
    /// The setting a person raises when a call runs out of time.
    fn total_setting(&self) -> &'static str {
        Limits::TOTAL_SETTING
    }
    fn tasks(&self) -> &TaskSettings;
    /// Every URL a call may reach, by field path.
    fn urls(&self) -> Vec<(&'static str, &str)>;
    /// Whether a call is made as a stream, for a client that takes SSE or not.
    fn streams(&self, accepts_sse: bool) -> bool;
}

/// How long a call may take and how much it may answer (Dify apps and HTTP tools).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<u64>,
}

impl Limits {
    pub const KEYS: [&'static str; 4] =
        ["timeout_seconds", "first_byte_timeout_seconds", "idle_timeout_seconds", "max_result_bytes"];
    /// The name of the setting that bounds a whole call, for messages.
    pub const TOTAL_SETTING: &'static str = "timeout_seconds";

    pub fn total(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS))
    }

    pub fn first_byte(&self) -> Duration {
        Duration::from_secs(self.first_byte_timeout_seconds.unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT_SECONDS))
    }

    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_seconds.unwrap_or(DEFAULT_IDLE_TIMEOUT_SECONDS))
    }

    pub fn max_result_bytes(&self) -> usize {
        self.max_result_bytes.map_or(DEFAULT_MAX_RESULT_BYTES, |n| n as usize)
    }

    /// The limit settings of a settings object (validated when stored). The kinds keep them flat
    /// beside their own keys; read here rather than by serde's `flatten`, which buffers the
    /// whole object first (0.7 KB more gzip bundle).
    pub fn read(settings: &Value) -> Result<Limits, String> {
        Ok(Limits {
            timeout_seconds: read_u64(settings, "timeout_seconds")?,
            first_byte_timeout_seconds: read_u64(settings, "first_byte_timeout_seconds")?,
            idle_timeout_seconds: read_u64(settings, "idle_timeout_seconds")?,
            max_result_bytes: read_u64(settings, "max_result_bytes")?,
        })
    }

    /// Checks the limit settings present in `obj`.
    pub fn validate(obj: &Map<String, Value>, errs: &mut Errors) {
        for key in &Limits::KEYS[..3] {
            match obj.get(*key).map(Value::as_u64) {
                None | Some(Some(1..=MAX_TIMEOUT_SECONDS)) => {}
                Some(_) => {
                    errs.add(format!("backend.{key}"), format!("must be an integer from 1 to {MAX_TIMEOUT_SECONDS}"))
                }
            }
        }
        match obj.get("max_result_bytes").map(Value::as_u64) {
            None | Some(Some(1024..=MAX_RESULT_BYTES_LIMIT)) => {}
            Some(_) => errs
                .add("backend.max_result_bytes", format!("must be an integer from 1024 to {MAX_RESULT_BYTES_LIMIT}")),
        }
    }
}

/// Whether an app's tools run as durable tasks, and how their task runner polls.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TaskSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_required_poll_seconds: Option<u64>,
}

impl TaskSettings {
    pub const KEYS: [&'static str; 3] = ["task_support", "poll_interval_seconds", "input_required_poll_seconds"];

    /// The task settings of a settings object (validated when stored), as [`Limits::read`].
    pub fn read(settings: &Value) -> Result<TaskSettings, String> {
        let task_support = match settings.get("task_support") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_str().and_then(TaskSupport::parse).ok_or("task_support is not forbidden, optional or required")?,
            ),
        };
        Ok(TaskSettings {
            task_support,
            poll_interval_seconds: read_u64(settings, "poll_interval_seconds")?,
            input_required_poll_seconds: read_u64(settings, "input_required_poll_seconds")?,
        })
    }

    /// Checks the task settings present in `obj`.
    pub fn validate(obj: &Map<String, Value>, errs: &mut Errors) {
        for key in &TaskSettings::KEYS[1..] {
            match obj.get(*key).map(Value::as_u64) {
                None => {}
                Some(Some(n)) if POLL_SECONDS.contains(&n) => {}
                Some(_) => errs.add(format!("backend.{key}"), "must be an integer from 1 to 300"),
            }
        }
        match obj.get("task_support") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if TaskSupport::parse(t).is_some() => {}
            Some(_) => errs.add("backend.task_support", "must be forbidden, optional or required"),
        }
    }
}

/// An optional whole-number setting: absent or null is `None`, anything but a non-negative
/// integer an error.
fn read_u64(settings: &Value, key: &str) -> Result<Option<u64>, String> {
    match settings.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("{key} is not a whole number")),
    }
}

/// Reports every key of `obj` that is not in `known` (a kind's settings).
pub fn unknown_keys(obj: &Map<String, Value>, mode: Mode, known: &[&str], errs: &mut Errors) {
    for k in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        errs.add(
            format!("backend.{}", crate::pure::quote::plain_or_quoted(k)),
            format!("is not a setting of {} apps (known: {})", mode.as_str(), known.join(", ")),
        );
    }
}

/// Checks the URL setting `key` every kind has one of (required, http or https, the guard's
/// rules); the URL when it passes.
pub fn required_url<'a>(obj: &'a Map<String, Value>, key: &str, errs: &mut Errors) -> Option<&'a str> {
    match obj.get(key) {
        Some(Value::String(u)) => match crate::pure::url::check_backend_url(u) {
            Ok(()) => Some(u),
            Err(why) => {
                errs.add(format!("backend.{key}"), why);
                None
            }
        },
        _ => {
            errs.add(format!("backend.{key}"), "is required and must be an http or https URL");
            None
        }
    }
}
