//! Upstream MCP servers (mode `mcp`): Flowgate as an MCP *client*, the protocol logic only; the
//! shell does the HTTP (`shell::upstream`, `shell::oauth`), nothing here does IO.
//!
//! - `config`: the app's settings, typed, and their checks;
//! - `transport`: which transport to try first, when to fall back, failures in words;
//! - `binding`: which cached OAuth token and upstream session a request may use;
//! - `session`: the handshake or discovery, the requests sent in a session and their headers;
//! - `replies`: reading an answer whatever its form (JSON or SSE), responses and server requests;
//! - `legacy_sse`: the legacy transport's `endpoint` event, held to the same origin;
//! - `legacy_session`: one legacy session kept across requests: what a message belongs to;
//! - `headers`: header safety, static and forwarded headers, precedence;
//! - `oauth`: the token request, the token answer, when to refresh;
//! - `client_assertion`: `private_key_jwt`: the client's key read, the assertion JWT built;
//! - `discovery`: finding the token endpoint from `oauth.issuer` (RFC 9728, RFC 8414), the
//!   issuer check, WWW-Authenticate challenges, client authentication and scope;
//! - `aggregate`: the upstream's tools and prompts as Flowgate exposes them (names, allowed and
//!   denied);
//! - `catalog`: what else the upstream offers (capabilities, resources, templates, prompts);
//! - `downgrade`: tools and results as a client of an older revision may see them;
//! - `error`: upstream text in Flowgate's errors;
//! - `failed_fetch`: a failed tool list or catalog fetch, remembered briefly;
//! - `variant`: what the calling client declared, which the upstream is told and catalogs are
//!   cached by.

pub mod aggregate;
pub mod binding;
pub mod catalog;
pub mod client_assertion;
pub mod config;
pub mod discovery;
pub mod downgrade;
pub mod error;
pub mod failed_fetch;
pub mod headers;
pub mod legacy_session;
pub mod legacy_sse;
pub mod oauth;
pub mod replies;
pub mod session;
pub mod transport;
pub mod variant;

/// Header and form pairs as the tests of this kind write them.
#[cfg(test)]
mod fixtures {
    pub fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
}
