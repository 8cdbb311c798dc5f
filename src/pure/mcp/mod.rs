//! The Model Context Protocol, server side: versions, the JSON-RPC envelope, tools, dispatch;
//! and the names both sides use (`meta`, `methods`, `names`, `param_headers`).

pub mod gateway;
pub mod http_rules;
pub mod input_required;
pub mod jsonrpc;
pub mod meta;
pub mod methods;
pub mod names;
pub mod param_headers;
pub mod prepared;
pub mod relay;
pub mod server;
pub mod tasks;
pub mod tools;
pub mod upstream_tasks;
pub mod version;
