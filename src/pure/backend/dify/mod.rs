//! Dify apps (modes workflow, completion, chat, advanced-chat and agent-chat), called through
//! their Service API: a call and its blocking answer (`call`), a streamed answer (`stream`), and
//! an app made from a running Dify app (`import`), and conversations that continue
//! across calls (`conversation`).

pub mod call;
pub mod config;
pub mod conversation;
pub mod file_outputs;
pub mod files;
pub mod import;
pub mod mode;
pub mod refusal;
pub mod run_status;
pub mod stream;
