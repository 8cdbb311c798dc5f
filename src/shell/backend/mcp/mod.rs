//! Upstream MCP servers: the client and its sessions (`client`; legacy SSE sessions kept by a
//! Durable Object, `legacy_session`), a client's request relayed (`call`), upstream tasks
//! (`tasks`), OAuth tokens (`oauth`, `client_assertion`), the relay of input requests (`relay`),
//! the session's standalone stream (`standalone`), and the bridge that holds a 2025 upstream's
//! call across a 2026-07-28 client's input rounds (`bridge`); a client session's stream and
//! subscriptions (`subscriptions`).

pub mod bridge;
pub mod call;
pub mod client;
pub mod client_assertion;
pub mod legacy_session;
pub mod oauth;
pub mod relay;
pub mod standalone;
pub mod subscriptions;
pub mod tasks;
