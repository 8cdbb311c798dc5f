//! What an upstream's cached OAuth token and cached sessions are bound to, so that neither is
//! ever sent anywhere but where it was obtained, nor to anyone but who obtained it:
//!
//! - both are keyed by the origin of the app's `url` and a fingerprint of the whole backend, so
//!   a token or an `Mcp-Session-Id` of the old upstream never reaches a moved `url`, and any
//!   change of the backend starts afresh (the old entries are never read again and expire);
//! - a session is also keyed by the caller (a client key's id, an OAuth subject, or for a
//!   server without client authentication Flowgate's own session with the client, else the
//!   client's address and User-Agent) and by the forwarded credentials, so one caller's
//!   upstream state (a subscription, a browser, a conversation) is never another's.

use super::config::McpConfig;
use crate::pure::ids::sha256_hex;
use crate::pure::web_url::Url;

/// The entry the MCP endpoint adds to a request's header list naming its caller
/// ([`Caller::tag`]). Not a valid header name, so no client can send it and no
/// `forward_headers` setting can name it.
pub const CALLER_ENTRY: &str = ":flowgate-caller";

/// Who is calling, as the MCP endpoint authenticated or observed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// A client key (auth mode `key`), by its id: a key deleted and re-created under the same
    /// name is another caller.
    Key(&'a str),
    /// The subject of an OAuth access token (auth mode `oauth`).
    Subject(&'a str),
    /// A server without client authentication: Flowgate's own `Mcp-Session-Id` with the client
    /// when it sent a valid one (one per `initialize`), else its address (`CF-Connecting-IP`)
    /// and User-Agent.
    Anonymous { session: Option<&'a str>, address: Option<&'a str>, agent: Option<&'a str> },
}

impl Caller<'_> {
    /// The caller as one line of text: what [`session_scope`] hashes. The kinds never collide.
    pub fn tag(&self) -> String {
        match self {
            Caller::Key(id) => format!("key:{id}"),
            Caller::Subject(sub) => format!("sub:{sub}"),
            Caller::Anonymous { session: Some(s), .. } => format!("session:{s}"),
            Caller::Anonymous { session: None, address, agent } => {
                format!("address:{}\n{}", address.unwrap_or(""), agent.unwrap_or(""))
            }
        }
    }
}

/// The origin of the app's `url` (scheme, host, port), or the text itself when it does not
/// parse (then it cannot match any other origin either).
fn origin_of(url: &str) -> String {
    Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_else(|_| url.to_string())
}

/// A digest of every backend setting: any change gives another one.
fn fingerprint(cfg: &McpConfig) -> String {
    sha256_hex(&serde_json::to_string(cfg).unwrap_or_default())
}

/// The name of the token broker (one Durable Object each) that holds the app's OAuth token for
/// its current backend: a moved `url` or any other change of the backend is another broker,
/// which has no token yet.
pub fn token_broker_name(app_id: &str, cfg: &McpConfig) -> String {
    let bound = sha256_hex(&format!("{}\n{}", origin_of(&cfg.url), fingerprint(cfg)));
    format!("{app_id}:{}", &bound[..32])
}

/// Which cached upstream session a request may use: one per origin and backend, caller
/// (`caller_tag`, [`Caller::tag`]; `None` for what every caller shares: the app's tool,
/// resource and prompt lists, fetched with its own credentials only) and forwarded
/// credentials (header name and value, as sent upstream).
pub fn session_scope(cfg: &McpConfig, caller_tag: Option<&str>, forwarded: &[(String, String)]) -> String {
    let mut text = format!("{}\n{}\n{}\n", origin_of(&cfg.url), fingerprint(cfg), caller_tag.unwrap_or("shared"));
    for (k, v) in forwarded {
        text.push_str(&format!("{}\n{v}\n", k.to_ascii_lowercase()));
    }
    sha256_hex(&text)[..32].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::backend::mcp::fixtures::pairs;
    use serde_json::json;

    fn cfg(backend: serde_json::Value) -> McpConfig {
        crate::pure::fields::read(backend).unwrap()
    }

    #[test]
    fn the_caller_entry_is_no_header_a_client_or_an_app_can_name() {
        assert!(!crate::pure::http_field::is_header_name(CALLER_ENTRY));
        let app = json!({"forward_headers": {"X-Caller": CALLER_ENTRY}});
        assert!(crate::pure::backend::mcp::headers::check_forward_headers(app.as_object().unwrap()).is_err());
    }

    #[test]
    fn callers_are_told_apart() {
        let key = Caller::Key("k1").tag();
        let other_key = Caller::Key("k2").tag();
        let sub = Caller::Subject("k1").tag();
        let s1 = Caller::Anonymous { session: Some("fgs_1"), address: Some("1.2.3.4"), agent: Some("a") }.tag();
        let s2 = Caller::Anonymous { session: Some("fgs_2"), address: Some("1.2.3.4"), agent: Some("a") }.tag();
        let addr = Caller::Anonymous { session: None, address: Some("1.2.3.4"), agent: Some("a") }.tag();
        let other_agent = Caller::Anonymous { session: None, address: Some("1.2.3.4"), agent: Some("b") }.tag();
        let all = [&key, &other_key, &sub, &s1, &s2, &addr, &other_agent];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // One session, whatever address it comes from next.
        let moved = Caller::Anonymous { session: Some("fgs_1"), address: Some("5.6.7.8"), agent: None }.tag();
        assert_eq!(s1, moved);
    }

    #[test]
    fn a_session_is_per_caller_origin_backend_and_forwarded_credential() {
        let base = cfg(json!({"url": "https://mcp.example/mcp"}));
        let scope = |c: &McpConfig, caller: Option<&str>, fwd: &[(&str, &str)]| session_scope(c, caller, &pairs(fwd));
        let alice = scope(&base, Some("key:a"), &[]);
        // The same caller again: the same session.
        assert_eq!(alice, scope(&base, Some("key:a"), &[]));
        assert_eq!(alice.len(), 32);
        // Another caller, the shared lists, a forwarded credential: each its own.
        let others = [
            scope(&base, Some("key:b"), &[]),
            scope(&base, None, &[]),
            scope(&base, Some("key:a"), &[("Authorization", "Bearer u1")]),
            scope(&base, Some("key:a"), &[("Authorization", "Bearer u2")]),
        ];
        for o in &others {
            assert_ne!(&alice, o);
        }
        assert_ne!(others[2], others[3]);
        // A moved url, or any other change of the backend: a new session.
        let moved = cfg(json!({"url": "https://attacker.example/mcp"}));
        let changed = cfg(json!({"url": "https://mcp.example/mcp", "tool_call_timeout": 30}));
        assert_ne!(alice, scope(&moved, Some("key:a"), &[]));
        assert_ne!(alice, scope(&changed, Some("key:a"), &[]));
        // Header names are compared as HTTP does.
        assert_eq!(scope(&base, None, &[("X-User", "u")]), scope(&base, None, &[("x-user", "u")]));
    }

    #[test]
    fn a_token_broker_is_per_origin_and_backend() {
        let oauth = json!({"token_url": "https://auth.example/token", "client_id": "c", "client_secret": "enc:v1:s"});
        let at = |url: &str| cfg(json!({"url": url, "oauth": oauth}));
        let name = token_broker_name("app1", &at("https://mcp.example/mcp"));
        assert!(name.starts_with("app1:"), "{name}");
        assert_eq!(name, token_broker_name("app1", &at("https://mcp.example/mcp")));
        assert_ne!(name, token_broker_name("app2", &at("https://mcp.example/mcp")));
        assert_ne!(name, token_broker_name("app1", &at("https://attacker.example/mcp")));
        let mut other_secret = oauth.clone();
        other_secret["client_secret"] = json!("enc:v1:t");
        let resent = cfg(json!({"url": "https://mcp.example/mcp", "oauth": other_secret}));
        assert_ne!(name, token_broker_name("app1", &resent));
    }
}
