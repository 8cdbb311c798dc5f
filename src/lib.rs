//! Flowgate: publish workflow, chat and agent backends as remote MCP servers.
//!
//! `pure` is the functional core (no `worker` types, no IO), which `cargo test` exercises on the
//! host; named so that it shadows no standard crate.
//! `shell` is the Worker's IO half (routing, auth, storage, backends, tasks) around it; it
//! reaches the platform only through `runtime`, the one boundary, so it too runs on the host:
//! under `sim`, the deterministic simulator, in `cargo test`.

pub mod pure;
pub mod runtime;
#[cfg(test)]
mod sim;

mod shell;
