//! Ready-made scripted backends, after the JS fixtures of the integration tests
//! (`tests/support/`): small on purpose, the common paths only.

pub mod dify;
pub mod http_tool;
pub mod mcp;
pub mod oauth;
