//! The Worker platform's names and clock, in one place: the binding names wrangler.toml
//! declares, the keys Flowgate writes in KV, the time (every "now" of the shell), and the
//! request a Durable Object is sent.

use crate::runtime::Env;

// The bindings wrangler.toml declares, under the names the shell uses for them (the names are
// rows of `pure::config::SETTINGS`).
pub use crate::pure::config::{ADMIN_AUTH_LIMIT, CACHE as KV, DB as D1, MCP_RATE_LIMIT, OAUTH, TASKS};

/// The KV key of a server's definition, by the SHA-256 of its code.
pub fn server_key(code_hash: &str) -> String {
    format!("server:{code_hash}")
}

/// The KV key of an upstream app's reusable Streamable HTTP session; `scope`
/// (`binding::session_scope`) separates origins, backends, callers and forwarded credentials.
pub fn upstream_session_key(app_id: &str, scope: &str) -> String {
    format!("upstream-session:{app_id}:{scope}")
}

/// The KV key of an upstream app's tool list.
pub fn upstream_tools_key(app_id: &str) -> String {
    format!("upstream-tools:{app_id}")
}

/// The KV key of an upstream app's catalog: capabilities, resources, templates, prompts.
pub fn upstream_catalog_key(app_id: &str) -> String {
    format!("upstream-catalog:{app_id}")
}

/// Milliseconds since the epoch, by the runtime's clock.
pub fn now_ms() -> u64 {
    crate::runtime::now_ms()
}

/// Seconds since the epoch.
pub fn now_s() -> i64 {
    (now_ms() / 1000) as i64
}

/// A setting's name and its value (`None`: not set).
type Setting = (&'static str, Option<std::rc::Rc<str>>);

thread_local! {
    /// The plain-text settings read so far by this isolate (`setting`).
    static SETTINGS: std::cell::RefCell<Vec<Setting>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A plain-text var (or secret) of the Worker, read from `env` once per isolate: an isolate runs
/// one version of the Worker, whose vars do not change under it, and each read is several
/// crossings into JavaScript that the hot path otherwise paid on every request.
pub fn setting(env: &Env, name: &'static str) -> Option<std::rc::Rc<str>> {
    if let Some(v) = SETTINGS.with(|s| s.borrow().iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())) {
        return v;
    }
    let v = env.runtime().setting(name).map(std::rc::Rc::from);
    SETTINGS.with(|s| s.borrow_mut().push((name, v.clone())));
    v
}

/// Forgets the settings this isolate read (an isolate started again).
pub fn forget_settings() {
    SETTINGS.with(|s| s.borrow_mut().clear());
}
