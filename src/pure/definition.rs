//! The resolved definition of a server: everything the MCP endpoint needs to answer
//! `tools/list` and start a call, cached in KV under the SHA-256 of the server code.

use serde::Serialize;
use serde_json::{Map, Value};

use super::backend::config::Backend;
use super::client_auth::ClientAuth;
use super::error::Errors;
use super::form::{parse_form, FormField};
use super::server::Status;

/// Bumped whenever the shape changes, so entries written by an older deploy read as misses
/// (and entries of this one by an older deploy: 6 added `code_expires_at`, which 5 would ignore).
pub const FORMAT: u32 = 6;
/// KV expiry of a definition. Console writes rewrite or delete entries at once; the TTL only
/// bounds how long an unused entry lingers.
pub const TTL_SECONDS: u64 = 3600;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerDefinition {
    pub format: u32,
    pub server_id: String,
    pub name: String,
    pub description: String,
    pub status: Status,
    pub parameters: Map<String, Value>,
    pub apps: Vec<AppDefinition>,
    /// How clients authenticate: the server's client keys (hashes, never keys) or its issuer.
    #[serde(default)]
    pub auth: ClientAuth,
    /// The call log keeps arguments and results (redacted) of this server's calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub call_log_payloads: bool,
    /// Set on the entry of a previous server code during its rotation's grace period: when that
    /// code stops working (unix ms). Checked on every use, so a copy kept in an isolate's memo
    /// or in KV stops at the same moment (`pure::server_code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_expires_at: Option<u64>,
}

impl crate::pure::fields::FromFields for ServerDefinition {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(ServerDefinition {
            format: f.uint32("format")?,
            server_id: f.text("server_id")?,
            name: f.text("name")?,
            description: f.text("description")?,
            status: f.named("status")?,
            parameters: f.members("parameters")?,
            apps: f.list("apps")?,
            auth: f.opt_object("auth")?.unwrap_or_default(),
            call_log_payloads: f.opt_flag("call_log_payloads")?.unwrap_or(false),
            code_expires_at: f.opt_uint("code_expires_at")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(ServerDefinition);

/// Read through `pure::fields`: `mode` and `backend` together into one [`Backend`]. Written in
/// the same shape, `mode` from the backend ([`Backend::mode`]): KV entries and task records
/// written by earlier deploys read as before.
#[derive(Debug, Clone, PartialEq)]
pub struct AppDefinition {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The kind, its settings (serialized in the console's flat shape) and a Dify app's mode.
    pub backend: Backend,
    pub user_input_form: Value,
    pub outputs: Value,
    /// `user_input_form` parsed once, when the definition is read: what tool schemas and
    /// argument checks are made from on every request (not written).
    pub form: Vec<FormField>,
}

impl AppDefinition {
    /// A definition whose parsed form is made from `user_input_form` (validated when stored: a
    /// form that no longer parses yields no inputs).
    pub fn new(
        id: String,
        name: String,
        description: String,
        backend: Backend,
        user_input_form: Value,
        outputs: Value,
    ) -> AppDefinition {
        let form = parse_form(&user_input_form, "user_input_form", &mut Errors::default());
        AppDefinition { id, name, description, backend, user_input_form, outputs, form }
    }

    /// Whether a call is made as a stream: Dify modes for clients that take SSE (so progress
    /// can flow) and agent-chat always (Dify serves it only streaming); HTTP tools when
    /// configured so; upstream MCP calls whenever the client takes SSE.
    pub fn streams(&self, accepts_sse: bool) -> bool {
        self.backend.kind().streams(accepts_sse)
    }
}

impl AppDefinition {
    /// The definition as a JSON value (what its `Serialize` writes), made by writing its JSON
    /// text and reading that back: the text writer is compiled anyway (task records), while a
    /// second writer that builds a `Value` was 4 KB of code for the call bridge's few uses.
    pub fn to_value(&self) -> Value {
        serde_json::to_string(self).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null)
    }
}

impl Serialize for AppDefinition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("AppDefinition", 7)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("description", &self.description)?;
        st.serialize_field("mode", &self.backend.mode())?;
        st.serialize_field("backend", &self.backend)?;
        st.serialize_field("user_input_form", &self.user_input_form)?;
        st.serialize_field("outputs", &self.outputs)?;
        st.end()
    }
}

impl crate::pure::fields::FromFields for AppDefinition {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        let mode = f.named("mode")?;
        let backend = Backend::from_settings(mode, &f.value("backend")?)?;
        let (id, name, description) = (f.text("id")?, f.text("name")?, f.text("description")?);
        Ok(AppDefinition::new(id, name, description, backend, f.value("user_input_form")?, f.value("outputs")?))
    }
}
crate::pure::fields::deserialize_by_fields!(AppDefinition);

impl ServerDefinition {
    /// Reads a cached entry; anything unreadable or of another format is a miss.
    pub fn from_cache(text: &str) -> Option<ServerDefinition> {
        serde_json::from_str::<ServerDefinition>(text).ok().filter(|d| d.format == FORMAT)
    }
}

/// What a refill of the KV cache does once it has written `written` (read from D1 a moment
/// before) and read the registry again (`now`). A console write that rotated, deactivated,
/// deleted or changed the server in between has already removed or rewritten the entry, and the
/// refill's own write may have landed after it: then the refill takes its entry back, so a stale
/// definition never outlives the write that replaced it. Checking *after* the write is what
/// makes this race-free: any console write either precedes the re-read (and is seen) or
/// follows it, and then its own cache update comes after the refill's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refill {
    Keep,
    Remove,
}

pub fn refill_verdict(written: &ServerDefinition, now: Option<&ServerDefinition>) -> Refill {
    match now {
        Some(current) if current == written => Refill::Keep,
        _ => Refill::Remove,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refill_never_outlives_a_console_write() {
        let written = def();
        assert_eq!(refill_verdict(&written, Some(&written.clone())), Refill::Keep);
        // Rotated or deleted: the code hash no longer finds a server.
        assert_eq!(refill_verdict(&written, None), Refill::Remove);
        // Deactivated.
        let inactive = ServerDefinition { status: Status::Inactive, ..written.clone() };
        assert_eq!(refill_verdict(&written, Some(&inactive)), Refill::Remove);
        // An app of the server changed (a new backend URL, say).
        let mut moved = written.clone();
        moved.apps[0].backend = dify(json!({"base_url": "http://elsewhere", "api_key": "k"}));
        assert_eq!(refill_verdict(&written, Some(&moved)), Refill::Remove);
        // Client authentication turned on, or a key revoked.
        let mut keyed = written.clone();
        keyed.auth.mode = AuthMode::Key;
        keyed.auth.keys.push(ClientKey { id: "k1".into(), name: "alice".into(), hash: "ab".repeat(32) });
        assert_eq!(refill_verdict(&written, Some(&keyed)), Refill::Remove);
        let mut revoked = keyed.clone();
        revoked.auth.keys.clear();
        assert_eq!(refill_verdict(&keyed, Some(&revoked)), Refill::Remove);
        assert_eq!(refill_verdict(&keyed, Some(&keyed.clone())), Refill::Keep);
    }

    fn def() -> ServerDefinition {
        ServerDefinition {
            format: FORMAT,
            server_id: "s".into(),
            name: "n".into(),
            description: "".into(),
            status: Status::Active,
            parameters: Map::new(),
            auth: Default::default(),
            call_log_payloads: false,
            code_expires_at: None,
            apps: vec![AppDefinition::new(
                "a".into(),
                "A".into(),
                "".into(),
                dify(json!({"base_url": "http://x", "api_key": "k"})),
                json!([]),
                json!([]),
            )],
        }
    }

    use super::*;
    use crate::pure::backend::dify::mode::DifyMode;
    use crate::pure::client_auth::{AuthMode, ClientKey};
    use crate::pure::mode::Mode;
    use crate::pure::oauth_resource::OAuthSettings;
    use serde_json::json;

    fn dify(settings: Value) -> Backend {
        Backend::from_settings(Mode::Dify(DifyMode::Workflow), &settings).unwrap()
    }

    #[test]
    fn to_value_is_what_serialize_writes() {
        let form = json!([{"text-input": {"variable": "q", "label": "Q", "required": true, "default": 1.5}}]);
        let backend = Backend::from_settings(Mode::Mcp, &json!({"url": "https://m.example/mcp"})).unwrap();
        for app in [
            def().apps.remove(0),
            AppDefinition::new("m".into(), "M".into(), "d".into(), backend, form, json!([{"variable": "o"}])),
        ] {
            assert_eq!(app.to_value(), serde_json::to_value(&app).unwrap());
        }
    }

    #[test]
    fn which_calls_stream() {
        let app = |mode: Mode, settings: Value| {
            let backend = Backend::from_settings(mode, &settings).unwrap();
            AppDefinition::new("a".into(), "A".into(), "".into(), backend, json!([]), json!([]))
        };
        let dify = json!({"base_url": "http://x", "api_key": "k"});
        let workflow = app(Mode::Dify(DifyMode::Workflow), dify.clone());
        assert!(workflow.streams(true) && !workflow.streams(false));
        let agent = app(Mode::Dify(DifyMode::AgentChat), dify);
        assert!(agent.streams(true) && agent.streams(false), "Dify serves agent-chat only streaming");
        let tool = app(Mode::HttpTool, json!({"api_endpoint": "http://t"}));
        assert!(!tool.streams(true) && !tool.streams(false), "an HTTP tool streams only when set to");
        let streaming_tool = app(Mode::HttpTool, json!({"api_endpoint": "http://t", "stream": true}));
        assert!(streaming_tool.streams(true) && streaming_tool.streams(false));
        let upstream = app(Mode::Mcp, json!({"url": "http://m"}));
        assert!(upstream.streams(true) && !upstream.streams(false));
    }

    /// An app as earlier deploys wrote it (KV definitions, task records): `mode` beside the
    /// settings. It reads into one backend, and is written back to the same text, for every mode.
    #[test]
    fn apps_stored_with_their_mode_beside_the_settings_read_and_write_back_the_same() {
        let settings = [
            ("workflow", r#"{"base_url":"https://d.example/v1","api_key":"enc:v1:k","task_support":"optional"}"#),
            ("chat", r#"{"base_url":"https://d.example/v1","api_key":"$KEY"}"#),
            ("advanced-chat", r#"{"base_url":"https://d.example/v1","api_key":"k","timeout_seconds":30}"#),
            ("agent-chat", r#"{"base_url":"https://d.example/v1","api_key":"k"}"#),
            ("completion", r#"{"base_url":"https://d.example/v1","api_key":"k"}"#),
            ("http-tool", r#"{"api_endpoint":"https://t.example/run","stream":true}"#),
            ("mcp", r#"{"url":"https://m.example/mcp","tool_call_timeout":20}"#),
        ];
        for (mode, backend) in settings {
            let stored = format!(
                r#"{{"id":"a","name":"A","description":"","mode":"{mode}","backend":{backend},"user_input_form":[],"outputs":[]}}"#
            );
            let app: AppDefinition = serde_json::from_str(&stored).unwrap();
            assert_eq!(app.backend.mode(), Mode::parse(mode).unwrap());
            assert_eq!(serde_json::to_string(&app).unwrap(), stored);
        }
        let app: AppDefinition = serde_json::from_str(&format!(
            r#"{{"id":"a","name":"A","description":"","mode":"agent-chat","backend":{},"user_input_form":[],"outputs":[]}}"#,
            settings[3].1
        ))
        .unwrap();
        assert_eq!(app.backend.as_dify().map(|c| c.app_mode), Some(DifyMode::AgentChat));
    }

    /// A stored app whose mode and settings disagree is refused with the reason, not read as
    /// either kind.
    #[test]
    fn a_stored_app_whose_mode_does_not_fit_its_settings_does_not_read() {
        let read = |mode: &str, backend: &str| {
            serde_json::from_str::<AppDefinition>(&format!(
                r#"{{"id":"a","name":"A","description":"","mode":"{mode}","backend":{backend},"user_input_form":[],"outputs":[]}}"#
            ))
            .unwrap_err()
            .to_string()
        };
        let dify = r#"{"base_url":"https://d.example/v1","api_key":"k"}"#;
        assert_eq!(
            read("http-tool", dify),
            "the stored http-tool settings do not read: api_endpoint is null or missing"
        );
        assert_eq!(read("mcp", dify), "the stored mcp settings do not read: url is null or missing");
        assert_eq!(
            read("workflow", r#"{"url":"https://m.example/mcp"}"#),
            "the stored workflow settings do not read: base_url is null or missing"
        );
        assert_eq!(read("dify", dify), r#"mode is not a known name ("dify")"#);
        let no_mode =
            format!(r#"{{"id":"a","name":"A","description":"","backend":{dify},"user_input_form":[],"outputs":[]}}"#);
        assert_eq!(serde_json::from_str::<AppDefinition>(&no_mode).unwrap_err().to_string(), "mode is null or missing");
    }

    #[test]
    fn round_trips_and_rejects_other_formats() {
        let d = def();
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(ServerDefinition::from_cache(&text), Some(d));
        assert_eq!(ServerDefinition::from_cache(&text.replace("\"format\":6", "\"format\":5")), None);
        assert_eq!(ServerDefinition::from_cache("not json"), None);
        let mut keyed = def();
        keyed.auth.mode = AuthMode::Key;
        keyed.auth.keys.push(ClientKey { id: "k1".into(), name: "alice".into(), hash: "ab".repeat(32) });
        let text = serde_json::to_string(&keyed).unwrap();
        assert!(text.contains(r#""auth":{"mode":"key","keys":[{"id":"k1","name":"alice","hash":"#), "{text}");
        assert_eq!(ServerDefinition::from_cache(&text), Some(keyed));
        // An oauth server carries its issuer settings; a change of them is a new definition.
        let mut oauth = def();
        oauth.auth.mode = AuthMode::OAuth;
        oauth.auth.oauth = Some(OAuthSettings {
            issuer: "https://auth.example.com".into(),
            audience: None,
            scopes: vec!["mcp".into()],
            jwks_uri: None,
        });
        let text = serde_json::to_string(&oauth).unwrap();
        assert!(
            text.contains(
                r#""auth":{"mode":"oauth","keys":[],"oauth":{"issuer":"https://auth.example.com","scopes":["mcp"]}}"#
            ),
            "{text}"
        );
        assert_eq!(ServerDefinition::from_cache(&text), Some(oauth.clone()));
        let mut other = oauth.clone();
        if let Some(o) = other.auth.oauth.as_mut() {
            o.scopes.clear();
        }
        assert_eq!(refill_verdict(&oauth, Some(&other)), Refill::Remove);
    }
}
