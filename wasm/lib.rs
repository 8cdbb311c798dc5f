//! Links the flowgate library into the Worker's cdylib: its `#[event]` and `#[durable_object]`
//! exports are the module's exports. Nothing else lives here (see Cargo.toml for why it exists).

extern crate flowgate;
