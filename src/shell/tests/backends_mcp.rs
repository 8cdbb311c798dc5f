//! Upstream MCP apps: the client, its sessions and their binding, OAuth tokens, the relay, upstream tasks.

#[allow(unused_imports)]
use super::*;
