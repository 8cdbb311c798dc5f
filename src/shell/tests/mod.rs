//! Host tests of the shell: the real Worker (`Flowgate`) run by the deterministic simulator
//! (`crate::sim`), driven through its HTTP interface like a client and the console would, against
//! scripted backends. One module a shell area; [`Fx`] is what they share.

use std::rc::Rc;

use serde_json::{json, Value};

use crate::runtime::{Body, Method, Request};
use crate::sim::backends::{dify, http_tool, mcp, oauth};
use crate::sim::{ClientResponse, Secrets, Sim};

pub const ADMIN: &str = "test-admin-token-for-local-tests-only";
pub const SECRETS_KEY_HEX: &str = "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f";
/// Where the Worker answers.
pub const BASE: &str = "https://flowgate.test";
pub const DIFY: &str = "https://dify.test";
pub const TOOL: &str = "https://tool.test";
pub const UPSTREAM: &str = "https://mcp.test";
pub const ISSUER: &str = "https://issuer.test";
/// The latest revision, and the one before the stateless one.
pub const V2025: &str = "2025-11-25";

/// The Worker under the simulator, with one of each scripted backend.
pub struct Fx {
    pub sim: Sim,
    pub dify: Rc<dify::Dify>,
    pub tool: Rc<http_tool::HttpTool>,
    pub upstream: Rc<mcp::McpUpstream>,
    pub issuer: Rc<oauth::OAuthIssuer>,
    /// Every backend key and token the fixture made: never to be seen in a log or answer.
    pub secrets: std::cell::RefCell<Vec<String>>,
    /// Every server code: never in a log or answer but the console's one showing of it.
    pub codes: std::cell::RefCell<Vec<String>>,
}

/// A request with `headers` and an optional JSON body.
pub fn request(method: Method, url: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Request {
    Request {
        method,
        url: url.to_string(),
        headers: headers.iter().copied().collect(),
        body: body.map_or(Body::Empty, |b| Body::Bytes(b.to_string().into_bytes())),
    }
}

/// A request with a raw body.
pub fn raw_request(method: Method, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Request {
    Request {
        method,
        url: url.to_string(),
        headers: headers.iter().copied().collect(),
        body: Body::Bytes(body.to_vec()),
    }
}

/// The JSON-RPC messages of a response: its JSON body, or each `data:` of its event stream.
pub fn messages(resp: &ClientResponse) -> Vec<Value> {
    let text = resp.text();
    if resp.headers.get("content-type").is_some_and(|c| c.contains("text/event-stream")) {
        crate::sim::invariants::sse_data(&text).iter().filter_map(|d| serde_json::from_str(d).ok()).collect()
    } else {
        serde_json::from_str(&text).map(|v| vec![v]).unwrap_or_default()
    }
}

/// The last JSON-RPC message (the response) of an answer.
pub fn last(resp: &ClientResponse) -> Value {
    messages(resp).pop().unwrap_or(Value::Null)
}

impl Fx {
    pub fn new(seed: u64) -> Fx {
        let sim = Sim::new(seed, Rc::new(crate::shell::Flowgate));
        sim.set_setting("ADMIN_TOKEN", ADMIN);
        sim.set_setting("SECRETS_KEY", SECRETS_KEY_HEX);
        let dify = Rc::new(dify::Dify::default());
        let tool = Rc::new(http_tool::HttpTool::default());
        let upstream = Rc::new(mcp::McpUpstream::new(true, false));
        let issuer = Rc::new(oauth::OAuthIssuer::new(ISSUER, &format!("{BASE}/mcp")));
        sim.add_backend(DIFY, dify.clone());
        sim.add_backend(TOOL, tool.clone());
        sim.add_backend(UPSTREAM, upstream.clone());
        sim.add_backend(ISSUER, issuer.clone());
        Fx {
            sim,
            dify,
            tool,
            upstream,
            issuer,
            secrets: std::cell::RefCell::new(vec![ADMIN.to_string()]),
            codes: std::cell::RefCell::default(),
        }
    }

    /// Keeps `s` among what must never show in logs or answers.
    pub fn secret(&self, s: &str) {
        self.secrets.borrow_mut().push(s.to_string());
    }

    /// A console call as the bootstrap admin.
    pub fn console(&self, method: Method, path: &str, body: Option<&Value>) -> ClientResponse {
        self.console_as(ADMIN, method, path, body)
    }

    /// A console call with `token` as its bearer.
    pub fn console_as(&self, token: &str, method: Method, path: &str, body: Option<&Value>) -> ClientResponse {
        let auth = format!("Bearer {token}");
        let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
        self.sim.request(request(method, &format!("{BASE}/console/api{path}"), &headers, body))
    }

    /// Registers a Dify app of `mode` (the scripted Dify serves it under `api_key`); its id.
    pub fn dify_app(&self, name: &str, mode: &str, api_key: &str, app: dify::App) -> String {
        self.dify_app_with(name, mode, api_key, app, json!({}))
    }

    /// [`Fx::dify_app`] with more backend settings (`task_support`, timeouts...).
    pub fn dify_app_with(&self, name: &str, mode: &str, api_key: &str, app: dify::App, settings: Value) -> String {
        self.dify.add_app(api_key, dify::App { name: name.to_string(), ..app });
        self.secret(api_key);
        let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
        let outputs = if mode == "workflow" { json!([{"variable": "echo", "type": "object"}]) } else { json!([]) };
        let mut backend = json!({"base_url": format!("{DIFY}/v1"), "api_key": api_key});
        if let (Some(b), Value::Object(extra)) = (backend.as_object_mut(), settings) {
            b.extend(extra);
        }
        let body = json!({
            "name": name, "description": format!("{name} description"), "mode": mode,
            "backend": backend, "user_input_form": form, "outputs": outputs,
        });
        let r = self.console(Method::Post, "/apps", Some(&body));
        assert_eq!(r.status, 201, "creating the app: {}", r.text());
        r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
    }

    /// A workflow app echoing its input, under `api_key`; its id.
    pub fn workflow(&self, name: &str, api_key: &str) -> String {
        let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
        self.dify_app(name, "workflow", api_key, dify::App { user_input_form: form, ..dify::App::new("workflow") })
    }

    /// Publishes a Dify-style server for one app; its server code.
    pub fn publish(&self, app_id: &str) -> String {
        let body = json!({"description": "A test server", "parameters": {"text": "The text to work on"}});
        let r = self.console(Method::Post, &format!("/apps/{app_id}/server"), Some(&body));
        assert_eq!(r.status, 201, "publishing: {}", r.text());
        let code = r.json().and_then(|v| v["server_code"].as_str().map(str::to_string)).unwrap_or_default();
        self.codes.borrow_mut().push(code.clone());
        code
    }

    /// A multi-app server over `app_ids`; (server id, code).
    pub fn server(&self, name: &str, app_ids: &[&str]) -> (String, String) {
        let body = json!({"name": name, "description": "d", "app_ids": app_ids});
        let r = self.console(Method::Post, "/servers", Some(&body));
        assert_eq!(r.status, 201, "creating the server: {}", r.text());
        let v = r.json().unwrap_or_default();
        let code = v["server_code"].as_str().unwrap_or_default().to_string();
        self.codes.borrow_mut().push(code.clone());
        (v["id"].as_str().unwrap_or_default().to_string(), code)
    }

    pub fn mcp_url(code: &str) -> String {
        format!("{BASE}/mcp/server/{code}/mcp")
    }

    /// One JSON-RPC message to a server's endpoint, as a 2025-11-25 client sends it (plus `headers`).
    pub fn mcp_with(&self, code: &str, headers: &[(&str, &str)], body: &Value) -> ClientResponse {
        let mut all = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", V2025),
        ];
        all.extend_from_slice(headers);
        self.sim.request(request(Method::Post, &Fx::mcp_url(code), &all, Some(body)))
    }

    pub fn mcp(&self, code: &str, body: &Value) -> ClientResponse {
        self.mcp_with(code, &[], body)
    }

    /// `tools/call` of `name` with `arguments`; the answer.
    pub fn call(&self, code: &str, name: &str, arguments: Value) -> ClientResponse {
        self.mcp(code, &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}}))
    }

    /// The invariants' secrets: every key and token everywhere; and every server code, but in
    /// the console, which shows a new code once.
    pub fn specs(&self) -> [Secrets; 2] {
        [
            Secrets { secrets: self.secrets.borrow().clone(), ..Secrets::default() },
            Secrets {
                secrets: self.codes.borrow().clone(),
                exempt_paths: vec!["/console/api/".into()],
                ..Secrets::default()
            },
        ]
    }

    /// Runs to idle and panics (with the seed) on any broken invariant.
    pub fn assert_invariants(&self) {
        for spec in self.specs() {
            self.sim.assert_invariants(&spec);
        }
    }
}

mod backends_mcp;
mod bridge;
mod bridge_standalone;
mod call_log;
mod calls;
mod catalog_variants;
mod connection_test;
mod console;
mod console_auth;
mod console_kills;
mod conversations;
mod edits;
mod endpoint;
mod endpoint_auth;
mod endpoint_kills;
mod error_messages;
mod failed_fetch;
mod files;
mod input_required;
mod legacy_sessions;
mod legacy_sse;
mod outbound_guard;
mod playground;
mod relay;
mod relay_keys;
mod server_code;
mod smoke;
mod soak;
mod standalone_stream;
mod store_kills;
mod subscriptions;
mod tasks_durable;
mod upstream_apps;
mod upstream_kills;
mod upstream_oauth;
mod upstream_oauth_discovery;
mod upstream_sessions;
mod upstream_task_input;
mod upstream_tasks;
mod upstream_toolsets;
