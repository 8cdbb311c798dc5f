//! An app's backend settings, typed: one config struct per kind (in that kind's folder, built
//! from the shared `settings`), and the [`Backend`] enum that holds one.
//!
//! Settings arrive as the console's JSON object; `app::validate_app` checks that object field by
//! field (each kind's `config::validate` owns its keys and their messages) and only then reads
//! it into a [`Backend`], so reading a validated object cannot fail. Stored rows and cached
//! definitions keep the console's flat JSON shape, the `mode` beside it; [`Backend::from_settings`]
//! reads the two into one [`Backend`], and [`Backend::mode`] gives the mode back.

use serde::Serialize;
use serde_json::Value;

use super::dify::config::DifyConfig;
use super::http_tool::config::HttpToolConfig;
use super::mcp::config::McpConfig;
pub use super::settings::Kind;
use super::settings::{Limits, TaskSettings};
use crate::pure::fields;
use crate::pure::mode::Mode;
use crate::pure::protocol::tasks::TaskSupport;

/// One app's backend, by kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Backend {
    Dify(DifyConfig),
    HttpTool(HttpToolConfig),
    Mcp(McpConfig),
}

impl Backend {
    /// Reads the settings of an app of `mode` (validated when stored).
    pub fn from_settings(mode: Mode, settings: &Value) -> Result<Backend, String> {
        let read = |why: String| format!("the stored {} settings do not read: {why}", mode.as_str());
        // The shared settings sit flat beside each kind's own: the kind reads its fields,
        // `Limits::read` and `TaskSettings::read` the shared ones.
        let tasks = TaskSettings::read(settings).map_err(read)?;
        Ok(match mode {
            Mode::HttpTool => Backend::HttpTool(HttpToolConfig {
                limits: Limits::read(settings).map_err(read)?,
                tasks,
                ..fields::read(settings.clone()).map_err(read)?
            }),
            Mode::Mcp => Backend::Mcp(McpConfig { tasks, ..fields::read(settings.clone()).map_err(read)? }),
            Mode::Dify(app_mode) => Backend::Dify(DifyConfig {
                app_mode,
                limits: Limits::read(settings).map_err(read)?,
                tasks,
                ..fields::read(settings.clone()).map_err(read)?
            }),
        })
    }

    /// The app's `mode` as stored and shown: the kind, and a Dify app's own mode.
    pub fn mode(&self) -> Mode {
        match self {
            Backend::Dify(c) => Mode::Dify(c.app_mode),
            Backend::HttpTool(_) => Mode::HttpTool,
            Backend::Mcp(_) => Mode::Mcp,
        }
    }

    /// The kind behind the settings: the one match over the kinds that everything else the
    /// call path asks of a backend goes through.
    pub fn kind(&self) -> &dyn Kind {
        match self {
            Backend::Dify(c) => c,
            Backend::HttpTool(c) => c,
            Backend::Mcp(c) => c,
        }
    }

    pub fn tasks(&self) -> &TaskSettings {
        self.kind().tasks()
    }

    /// Whether the app's tools run as durable tasks (default: forbidden, as in the spec).
    pub fn task_support(&self) -> TaskSupport {
        self.tasks().task_support.unwrap_or(TaskSupport::Forbidden)
    }

    /// Every URL a call of this app may reach, by field path, for the private-network check.
    pub fn urls(&self) -> Vec<(&'static str, &str)> {
        self.kind().urls()
    }

    /// A valid backend of `mode` with made-up URLs, for tests.
    #[cfg(test)]
    pub fn example(mode: Mode) -> Backend {
        let settings = match mode {
            Mode::HttpTool => serde_json::json!({"api_endpoint": "https://tool.example/run"}),
            Mode::Mcp => serde_json::json!({"url": "https://mcp.example/mcp"}),
            Mode::Dify(_) => serde_json::json!({"base_url": "https://dify.example/v1", "api_key": "app-k"}),
        };
        Backend::from_settings(mode, &settings).expect("example settings read")
    }

    pub fn as_dify(&self) -> Option<&DifyConfig> {
        match self {
            Backend::Dify(c) => Some(c),
            _ => None,
        }
    }

    pub fn as_mcp(&self) -> Option<&McpConfig> {
        match self {
            Backend::Mcp(c) => Some(c),
            _ => None,
        }
    }

    pub fn as_http_tool(&self) -> Option<&HttpToolConfig> {
        match self {
            Backend::HttpTool(c) => Some(c),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::backend::dify::mode::DifyMode;
    use crate::pure::backend::settings::{DEFAULT_IDLE_TIMEOUT_SECONDS, DEFAULT_MAX_RESULT_BYTES};
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn reads_each_kind_and_keeps_the_flat_shape() {
        let dify = json!({"base_url": "https://d.example/v1", "api_key": "$K", "timeout_seconds": 10, "task_support": "optional"});
        let b = Backend::from_settings(Mode::Dify(DifyMode::Workflow), &dify).unwrap();
        assert_eq!(b.kind().limits().total(), Duration::from_secs(10));
        assert_eq!(b.kind().limits().idle(), Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECONDS));
        assert_eq!(b.task_support(), TaskSupport::Optional);
        assert_eq!(serde_json::to_value(&b).unwrap(), dify);

        let tool = json!({"api_endpoint": "https://t.example/x", "stream": true, "max_result_bytes": 2048});
        let b = Backend::from_settings(Mode::HttpTool, &tool).unwrap();
        assert_eq!(b.kind().limits().max_result_bytes(), 2048);
        assert!(b.as_http_tool().is_some_and(|c| c.stream));
        assert_eq!(serde_json::to_value(&b).unwrap(), tool);

        let mcp = json!({"url": "https://m.example/mcp", "tool_call_timeout": 20, "task_toolsets": [{"name": "n", "submit_tool": "a", "status_tool": "b", "cancel_tool": "c"}]});
        let b = Backend::from_settings(Mode::Mcp, &mcp).unwrap();
        assert_eq!(b.kind().limits().max_result_bytes(), DEFAULT_MAX_RESULT_BYTES);
        assert_eq!(b.task_support(), TaskSupport::Forbidden);
        assert_eq!(serde_json::to_value(&b).unwrap(), mcp);
    }

    /// Every setting of every kind, read and written back: the readers (`pure::fields`) and
    /// serde's writers agree on each one's name and shape.
    #[test]
    fn every_setting_reads_back_as_written() {
        let shared = json!({"timeout_seconds": 10, "first_byte_timeout_seconds": 5, "idle_timeout_seconds": 7,
                            "max_result_bytes": 4096, "task_support": "optional", "poll_interval_seconds": 3,
                            "input_required_poll_seconds": 9});
        let with_shared = |mut v: Value| {
            v.as_object_mut().unwrap().extend(shared.as_object().unwrap().clone());
            v
        };
        let dify = with_shared(json!({"base_url": "https://d.example/v1", "api_key": "enc:v1:abc"}));
        let tool = with_shared(json!({
            "api_endpoint": "https://t.example/run", "api_key": "$TOOL_KEY", "stream": true,
            "manifest": {"name": "m", "parameters": []}, "form_values": {"region": "eu"},
            "async": {"status_endpoint": "https://t.example/status", "cancel_endpoint": "https://t.example/cancel"},
        }));
        let mut mcp = json!({
            "url": "https://m.example/mcp", "transport": "sse", "protocol_version": "2025-06-18",
            "headers": {"x-team": "$TEAM"}, "oauth": {"token_url": "https://a.example/token", "client_id": "c"},
            "forward_headers": {"x-user": "x-forwarded-user"}, "on_missing": "passthrough",
            "tool_name_prefix": false, "allowed_tools": ["a"], "denied_tools": ["b"], "allowed_resources": [],
            "denied_resources": ["file:///x"], "allowed_prompts": ["p"], "denied_prompts": ["q"],
            "session_init_timeout": 11, "tool_call_timeout": 12, "tools_cache_ttl_seconds": 13,
            "task_toolsets": [{"name": "n", "submit_tool": "s", "status_tool": "t", "cancel_tool": "c"}],
            "task_support": "required", "poll_interval_seconds": 2, "input_required_poll_seconds": 4,
        });
        for (mode, settings) in [(Mode::Dify(DifyMode::Workflow), &dify), (Mode::HttpTool, &tool), (Mode::Mcp, &mcp)] {
            let b = Backend::from_settings(mode, settings).unwrap();
            assert_eq!(&serde_json::to_value(&b).unwrap(), settings, "{mode:?}");
        }
        // The defaults are written as nothing, and read back as the defaults.
        mcp = json!({"url": "https://m.example/mcp", "transport": "auto", "on_missing": "deny"});
        let b = Backend::from_settings(Mode::Mcp, &mcp).unwrap();
        assert_eq!(serde_json::to_value(&b).unwrap(), json!({"url": "https://m.example/mcp"}));
    }

    #[test]
    fn settings_of_the_wrong_shape_do_not_read() {
        let e = Backend::from_settings(Mode::Dify(DifyMode::Workflow), &json!({"base_url": 5})).unwrap_err();
        assert!(e.starts_with("the stored workflow settings do not read"), "{e}");
        let e =
            Backend::from_settings(Mode::Mcp, &json!({"url": "https://x", "task_support": "sometimes"})).unwrap_err();
        assert_eq!(e, "the stored mcp settings do not read: task_support is not forbidden, optional or required");
        let e =
            Backend::from_settings(Mode::HttpTool, &json!({"api_endpoint": "https://t/x", "timeout_seconds": "10"}))
                .unwrap_err();
        assert_eq!(e, "the stored http-tool settings do not read: timeout_seconds is not a whole number");
        let e = Backend::from_settings(
            Mode::Dify(DifyMode::Workflow),
            &json!({"base_url": "http://x/v1", "api_key": "k", "poll_interval_seconds": -1}),
        )
        .unwrap_err();
        assert!(e.ends_with("poll_interval_seconds is not a whole number"), "{e}");
    }

    #[test]
    fn urls_name_their_fields() {
        let b = Backend::from_settings(
            Mode::HttpTool,
            &json!({"api_endpoint": "https://t/x", "async": {"status_endpoint": "https://t/s", "cancel_endpoint": "https://t/c"}}),
        )
        .unwrap();
        assert_eq!(
            b.urls(),
            vec![
                ("backend.api_endpoint", "https://t/x"),
                ("backend.async.status_endpoint", "https://t/s"),
                ("backend.async.cancel_endpoint", "https://t/c")
            ]
        );
    }
}
