//! The names of the MCP methods and notifications that both sides of Flowgate use: the server
//! (`mcp::server`) dispatches on them, the client of upstream servers (`backend::mcp`) sends them.

/// The handshake request (every revision but the stateless one).
pub const INITIALIZE: &str = "initialize";
/// Sent by the client after a successful `initialize`.
pub const INITIALIZED: &str = "notifications/initialized";
/// 2026-07-28: what a stateless server offers, in place of the handshake.
pub const DISCOVER: &str = "server/discover";
pub const PING: &str = "ping";
pub const SET_LEVEL: &str = "logging/setLevel";
pub const TOOLS_LIST: &str = "tools/list";
pub const TOOLS_CALL: &str = "tools/call";
/// A client gave up on one of its requests.
pub const CANCELLED: &str = "notifications/cancelled";
/// Progress of a request that gave a progress token.
pub const PROGRESS: &str = "notifications/progress";
/// A log message.
pub const MESSAGE: &str = "notifications/message";
