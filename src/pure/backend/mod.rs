//! The backend kinds: what Flowgate publishes as MCP tools. A kind is one way of calling a
//! backend (the request it sends, how it reads the answer, in one piece or streamed) and of
//! making an app of it; every kind ends in the same `outcome::Outcome`. One folder per kind:
//!
//! - `dify`: a Dify app, through its Service API (every mode but `http-tool` and `mcp`);
//! - `http_tool`: a custom HTTP tool described by a manifest (mode `http-tool`);
//! - `mcp`: the tools of an upstream MCP server, Flowgate being its client (mode `mcp`).
//!
//! `stream_reader` reads a streamed answer by the rules of its kind.

pub mod advice;
pub mod config;
pub mod credentials;
pub mod dify;
pub mod http_tool;
pub mod mcp;
pub mod run_record;
pub mod settings;
pub mod stream_reader;
