//! The Worker platform's names, clock and settings, in one place: the binding names
//! wrangler.toml declares, the keys Flowgate writes in KV, the time (every "now" of the
//! shell), and the settings (the only reads of the Worker's vars and secrets).

use std::rc::Rc;

use crate::pure::config::Settings;
use crate::runtime::Env;

// The bindings wrangler.toml declares, under the names the shell uses for them (the names are
// rows of `pure::config::SETTINGS`).
pub use crate::pure::config::{
    ADMIN_AUTH_LIMIT, BRIDGES, CACHE as KV, CLIENT_SESSIONS, DB as D1, LEGACY_SESSIONS, MCP_RATE_LIMIT, OAUTH, TASKS,
};

/// The KV key of a server's definition, by the SHA-256 of its code.
pub fn server_key(code_hash: &str) -> String {
    format!("server:{code_hash}")
}

/// The KV key of an upstream app's reusable Streamable HTTP session; `scope`
/// (`binding::session_scope`) separates origins, backends, callers and forwarded credentials.
pub fn upstream_session_key(app_id: &str, scope: &str) -> String {
    format!("upstream-session:{app_id}:{scope}")
}

/// The KV key of an upstream app's tool list as offered to clients that declared `variant`
/// (`variant::Variant::key`).
pub fn upstream_tools_key(app_id: &str, variant: &str) -> String {
    format!("upstream-tools:{app_id}:{variant}")
}

/// The KV key of an upstream app's catalog (capabilities, resources, templates, prompts) as
/// offered to clients that declared `variant`.
pub fn upstream_catalog_key(app_id: &str, variant: &str) -> String {
    format!("upstream-catalog:{app_id}:{variant}")
}

/// Milliseconds since the epoch, by the runtime's clock.
pub fn now_ms() -> u64 {
    crate::runtime::now_ms()
}

/// Seconds since the epoch.
pub fn now_s() -> i64 {
    (now_ms() / 1000) as i64
}

thread_local! {
    /// This isolate's settings, once read (`settings`).
    static SETTINGS: std::cell::RefCell<Option<Rc<Settings>>> = const { std::cell::RefCell::new(None) };
}

/// The Worker's settings (`pure::config::Settings`), read and parsed once per isolate: an
/// isolate runs one version of the Worker, whose vars and secrets do not change under it, and
/// each read is several crossings into JavaScript that the hot path otherwise paid on every
/// request. Every setting read of the shell goes through here.
pub fn settings(env: &Env) -> Rc<Settings> {
    if let Some(s) = SETTINGS.with(|s| s.borrow().clone()) {
        return s;
    }
    let s = Rc::new(Settings::read(|name| env.runtime().setting(name)));
    SETTINGS.with(|c| *c.borrow_mut() = Some(Rc::clone(&s)));
    s
}

/// Forgets the settings this isolate read (an isolate started again).
pub fn forget_settings() {
    SETTINGS.with(|s| *s.borrow_mut() = None);
}

/// The variable or secret a backend credential's `$NAME` names, looked up when the credential
/// is used, by the same rule as every setting (`Runtime::setting`: the variable, else the
/// secret; on Workers a name is one or the other). Not kept: the names come from stored apps,
/// not from a fixed list, and a use costs one lookup, as it always has. Never one of Flowgate's
/// own settings (those are read through [`settings`] only, and a backend never gets them).
pub fn named_value(env: &Env, name: &str) -> Option<String> {
    if crate::pure::config::is_own_name(name) {
        return None;
    }
    env.runtime().setting(name)
}
