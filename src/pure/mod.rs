//! The pure core: everything that can be decided without IO.

pub mod admin;
pub mod app;
pub mod backend;
pub mod base64;
pub mod client_auth;
pub mod config;
pub mod console_access;
pub mod console_roles;
pub mod console_tokens;
pub mod decimal;
pub mod definition;
pub mod error;
pub mod fields;
pub mod form;
pub mod ids;
pub mod mcp;
pub mod memo;
pub mod mode;
pub mod named;
pub mod oauth_resource;
pub mod origin;
pub mod outcome;
pub mod path;
pub mod quote;
pub mod random;
pub mod sealed;
pub mod server;
pub mod sse;
pub mod task;
pub mod task_contract;
#[cfg(test)]
pub mod test_rng;
pub mod time;
pub mod url;
pub mod usage;
pub mod web_url;
