//! The Model Context Protocol's vocabulary, shared by Flowgate's server (`pure::mcp`) and its
//! upstream client (`pure::backend::mcp`): revisions, the JSON-RPC envelope, `_meta`, method and
//! tool names, `Mcp-Param-*` headers, and how tasks look on the wire. It imports neither side.

pub mod jsonrpc;
pub mod meta;
pub mod methods;
pub mod names;
pub mod param_headers;
pub mod tasks;
pub mod version;
