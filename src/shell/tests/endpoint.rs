//! The MCP endpoint: transport rules, client authentication, rate limits, the definition cache, usage and logs.

#[allow(unused_imports)]
use super::*;
