//! HTTP tools: an asynchronous tool's run polled to its end.

pub mod polled;
