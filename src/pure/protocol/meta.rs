//! The `_meta` keys of the protocol, the same for Flowgate as a server (`mcp::server`) and as a
//! client of upstream MCP servers (`backend::mcp`).

/// 2026-07-28: the revision a stateless request speaks (in place of the handshake).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// 2026-07-28: who the client is (`{name, version}`), in every stateless request.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// 2026-07-28: what the client can do, in every stateless request (`{}` for nothing).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// 2026-07-28: the least severe log level the client wants for this request.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// 2026-07-28: who the server is, in every stateless result.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The token a request gives for progress, which its progress notifications carry back.
pub const PROGRESS_TOKEN: &str = "progressToken";
