//! The IO half of each backend kind, mirroring `pure::backend`: what each does with the network
//! and storage.

pub mod dify;
pub mod http_tool;
pub mod mcp;
