//! Calls to Dify apps and HTTP tools: outbound rules, blocking and streamed calls, polled async tools, durable tasks.

#[allow(unused_imports)]
use super::*;
