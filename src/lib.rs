//! Flowgate: publish workflow, chat and agent backends as remote MCP servers.
//!
//! `pure` is the functional core (no `worker` types, no IO), which `cargo test` exercises on the
//! host; named so that it shadows no standard crate.
//! `shell` is the Cloudflare Worker around it (routing, D1, KV, fetch); it exists only in the
//! wasm32 build.

pub mod pure;
pub mod runtime;
#[cfg(test)]
mod sim;

#[cfg(target_arch = "wasm32")]
mod shell;
