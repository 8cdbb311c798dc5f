//! The Worker platform's names and clock, in one place: the binding names wrangler.toml
//! declares, the keys Flowgate writes in KV, and the time (every "now" of the shell).

/// D1: the registry (apps, servers, hashed codes, end users, task rows).
pub const D1: &str = "DB";
/// KV: server definitions, upstream sessions and tool lists, running calls to cancel.
pub const KV: &str = "CACHE";
/// Durable Objects: one `TaskRunner` per durable task.
pub const TASKS: &str = "TASKS";
/// Durable Objects: one `TokenBroker` per upstream app with OAuth.
pub const OAUTH: &str = "OAUTH";
/// Rate limiting: MCP requests per server code.
pub const MCP_RATE_LIMIT: &str = "MCP_RATE_LIMIT";
/// Rate limiting: wrong admin tokens per client address.
pub const ADMIN_AUTH_LIMIT: &str = "ADMIN_AUTH_LIMIT";

/// The KV key of a server's definition, by the SHA-256 of its code.
pub fn server_key(code_hash: &str) -> String {
    format!("server:{code_hash}")
}

/// The KV key of an upstream app's reusable Streamable HTTP session; `scope` separates the
/// sessions of different forwarded credentials (empty: none forwarded).
pub fn upstream_session_key(app_id: &str, scope: &str) -> String {
    if scope.is_empty() {
        format!("upstream-session:{app_id}")
    } else {
        format!("upstream-session:{app_id}:{scope}")
    }
}

/// The KV key of an upstream app's tool list.
pub fn upstream_tools_key(app_id: &str) -> String {
    format!("upstream-tools:{app_id}")
}

/// The KV key of an upstream app's catalog: capabilities, resources, templates, prompts.
pub fn upstream_catalog_key(app_id: &str) -> String {
    format!("upstream-catalog:{app_id}")
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

/// Seconds since the epoch.
pub fn now_s() -> i64 {
    (now_ms() / 1000) as i64
}
