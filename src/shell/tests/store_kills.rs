//! The registry (D1) failing: the console answers 503 naming what it was doing, never D1's
//! words; the log holds both, so an operator can see why.

use serde_json::json;

use super::*;
use crate::runtime::Method;
use crate::sim::Faults;

#[test]
fn a_registry_failure_is_a_503_naming_what_failed_and_the_log_says_why() {
    let fx = Fx::new(380);
    fx.sim.set_faults(Faults { d1_error: 1.0, ..Faults::default() });
    let body = json!({"name": "Up", "description": "d", "mode": "mcp", "backend": {"url": format!("{UPSTREAM}/mcp")}});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(!r.text().contains("simulated failure"), "D1's words reached the client: {}", r.text());
    let logs = fx.sim.logs();
    assert!(logs.iter().any(|l| l.contains("D1: simulated failure (internal error)")), "{logs:?}");
    fx.sim.set_faults(Faults::default());
    fx.assert_invariants();
}
