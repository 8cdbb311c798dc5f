//! Flowgate's MCP server: dispatch, tools, the gateway over upstream apps, the relay of input
//! requests, and the Streamable HTTP rules of its endpoint. The protocol's vocabulary, which
//! the upstream client uses too, is `pure::protocol`.

pub mod bridge;
pub mod client_session;
pub mod gateway;
pub mod http_rules;
pub mod input_required;
pub mod prepared;
pub mod relay;
pub mod server;
pub mod standalone;
pub mod tool_files;
pub mod tools;
pub mod upstream_tasks;
