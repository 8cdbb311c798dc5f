//! Dify apps: importing one from its Service API; the files of a call, judged and uploaded.

pub mod import;
pub mod upload;
