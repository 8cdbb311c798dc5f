//! The console: its authentication, roles, routes, the registry in D1, sealed credentials and references.

#[allow(unused_imports)]
use super::*;
