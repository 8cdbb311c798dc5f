//! The Model Context Protocol, server side: versions, the JSON-RPC envelope, tools, dispatch.

pub mod jsonrpc;
pub mod names;
pub mod server;
pub mod tasks;
pub mod tools;
pub mod version;
