//! Upstream MCP servers: the client and its sessions (`client`), a client's request relayed
//! (`call`), upstream tasks (`tasks`), OAuth tokens (`oauth`, `client_assertion`), and the relay
//! of input requests (`relay`).

pub mod call;
pub mod client;
pub mod client_assertion;
pub mod oauth;
pub mod relay;
pub mod tasks;
