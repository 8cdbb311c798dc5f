//! Upstream MCP servers: the client and its sessions (`client`), a client's request relayed
//! (`call`), upstream tasks (`tasks`), OAuth tokens (`oauth`, `client_assertion`), the relay
//! of input requests (`relay`) and the session's standalone stream (`standalone`).

pub mod call;
pub mod client;
pub mod client_assertion;
pub mod oauth;
pub mod relay;
pub mod standalone;
pub mod tasks;
