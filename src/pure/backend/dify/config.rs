//! A Dify app's settings: the Service API's base URL, the app's API key, limits and tasks.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::pure::backend::settings::{required_url, unknown_keys, Kind, Limits, TaskSettings};
use crate::pure::error::Errors;
use crate::pure::fields::{Fields, FromFields};
use crate::pure::mode::Mode;

use super::mode::DifyMode;

/// Written by serde; read by `Backend::from_settings` through `pure::fields`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DifyConfig {
    /// The Dify app's mode: stored as the app's `mode`, beside its settings, not among them.
    #[serde(skip)]
    pub app_mode: DifyMode,
    /// The Service API root (`…/v1`), stored without a trailing slash so paths join cleanly.
    pub base_url: String,
    /// The app's key: a sealed literal or a `$NAME` reference.
    pub api_key: String,
    /// Chat modes: results name Dify's conversation and calls may continue it
    /// (`conversation`); off by default, and not written when off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conversations: bool,
    #[serde(flatten)]
    pub limits: Limits,
    #[serde(flatten)]
    pub tasks: TaskSettings,
    #[serde(flatten)]
    pub files: FileSettings,
}

/// What a Dify app says about files (its `/parameters`, kept by an import): the `file_upload`
/// feature (a chat app's `files` argument) and its `system_parameters` size limits (MB).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct FileSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_upload: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_parameters: Option<Value>,
}

impl FileSettings {
    pub const KEYS: [&'static str; 2] = ["file_upload", "system_parameters"];

    fn read(f: &mut Fields) -> FileSettings {
        let object = |v: Option<Value>| v.filter(Value::is_object);
        FileSettings {
            file_upload: object(f.opt_value("file_upload")),
            system_parameters: object(f.opt_value("system_parameters")),
        }
    }

    fn validate(obj: &Map<String, Value>, errs: &mut Errors) {
        for key in Self::KEYS {
            match obj.get(key) {
                None | Some(Value::Null | Value::Object(_)) => {}
                Some(_) => errs.add(format!("backend.{key}"), "must be an object, as Dify's /parameters gives it"),
            }
        }
        if let Some(Value::Object(limits)) = obj.get("system_parameters") {
            for (k, v) in limits.iter().filter(|(k, _)| k.ends_with("_size_limit")) {
                if v.as_u64().is_none() {
                    errs.add(format!("backend.system_parameters.{k}"), "must be a whole number of MB");
                }
            }
        }
    }
}

impl FromFields for DifyConfig {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        Ok(DifyConfig {
            // The mode is not a setting; `Backend::from_settings` sets the app's.
            app_mode: DifyMode::Workflow,
            base_url: f.text("base_url")?,
            api_key: f.text("api_key")?,
            conversations: f.opt_flag(super::conversation::SETTING)?.unwrap_or(false),
            limits: Limits::default(),
            tasks: TaskSettings::default(),
            files: FileSettings::read(f),
        })
    }
}

impl DifyConfig {
    /// Whether calls of this app take part in conversations (`conversation`): the setting is
    /// on and the mode has them (a completion or workflow app has none; the setting is refused
    /// there).
    pub fn keeps_conversations(&self) -> bool {
        self.conversations && self.app_mode.takes_query()
    }
}

impl Kind for DifyConfig {
    fn endpoint(&self) -> (&str, Option<&str>) {
        (&self.base_url, Some(&self.api_key))
    }

    fn limits(&self) -> Limits {
        self.limits.clone()
    }

    fn tasks(&self) -> &TaskSettings {
        &self.tasks
    }

    fn urls(&self) -> Vec<(&'static str, &str)> {
        vec![("backend.base_url", &self.base_url)]
    }

    /// For clients that take SSE (so progress can flow), and agent-chat always (Dify serves it
    /// only streaming).
    fn streams(&self, accepts_sse: bool) -> bool {
        accepts_sse || super::call::needs_streaming(self.app_mode)
    }
}

pub const URL_KEY: &str = "base_url";
const KEYS: [&str; 3] = [URL_KEY, "api_key", super::conversation::SETTING];

/// Checks a Dify app's settings in place (the base URL loses its trailing slash).
pub fn validate(mode: Mode, obj: &mut Map<String, Value>, errs: &mut Errors) {
    let known: Vec<&str> =
        KEYS.iter().chain(&Limits::KEYS).chain(&TaskSettings::KEYS).chain(&FileSettings::KEYS).copied().collect();
    if let Some(trimmed) = required_url(obj, URL_KEY, errs).map(|u| u.trim_end_matches('/').to_string()) {
        obj.insert(URL_KEY.into(), trimmed.into());
    }
    unknown_keys(obj, mode, &known, errs);
    Limits::validate(obj, errs);
    TaskSettings::validate(obj, errs);
    FileSettings::validate(obj, errs);
    if !matches!(obj.get("api_key"), Some(Value::String(k)) if !k.is_empty()) {
        errs.add("backend.api_key", "is required: the Dify app's API key (app-...) or a $SECRET_NAME");
    }
    validate_conversations(mode, obj, errs);
}

/// `conversations`: true or false, and true only for the modes that have conversations.
fn validate_conversations(mode: Mode, obj: &Map<String, Value>, errs: &mut Errors) {
    let field = format!("backend.{}", super::conversation::SETTING);
    match obj.get(super::conversation::SETTING) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) if mode.dify().is_some_and(DifyMode::takes_query) => {}
        Some(Value::Bool(true)) => errs.add(
            field,
            format!(
                "a {} app has no conversations: only chat, advanced-chat and agent-chat apps do; leave it out",
                mode.as_str()
            ),
        ),
        Some(_) => errs.add(field, "must be true or false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: DifyMode, on: bool) -> DifyConfig {
        DifyConfig {
            app_mode: mode,
            base_url: "https://dify.test/v1".into(),
            api_key: "app-x".into(),
            conversations: on,
            limits: Default::default(),
            tasks: Default::default(),
            files: Default::default(),
        }
    }

    #[test]
    fn only_chat_modes_with_the_setting_on_keep_conversations() {
        for mode in [DifyMode::Chat, DifyMode::AdvancedChat, DifyMode::AgentChat] {
            assert!(config(mode, true).keeps_conversations(), "{mode:?}");
            assert!(!config(mode, false).keeps_conversations(), "{mode:?}: off by default");
        }
        assert!(!config(DifyMode::Completion, true).keeps_conversations());
        assert!(!config(DifyMode::Workflow, true).keeps_conversations());
    }
}
