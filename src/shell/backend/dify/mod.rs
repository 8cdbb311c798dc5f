//! Dify apps: importing one from its Service API.

pub mod import;
