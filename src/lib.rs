//! Flowgate: publish workflow, chat and agent backends as remote MCP servers.
//!
//! `core` is pure (no `worker` types, no IO) and is what `cargo test` exercises on the host.
//! `shell` is the Cloudflare Worker around it (routing, D1, KV, fetch); it exists only in the
//! wasm32 build.

pub mod core;

#[cfg(target_arch = "wasm32")]
mod shell;
