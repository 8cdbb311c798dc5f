//! Upstream MCP servers: the client and its sessions (`client`; legacy SSE sessions kept by a
//! Durable Object, `legacy_session`), a client's request relayed (`call`), upstream tasks (`tasks`), OAuth tokens (`oauth`, `client_assertion`), and the relay
//! of input requests (`relay`).

pub mod call;
pub mod client;
pub mod client_assertion;
pub mod legacy_session;
pub mod oauth;
pub mod relay;
pub mod tasks;
