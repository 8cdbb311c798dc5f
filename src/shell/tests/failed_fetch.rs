//! A failed fetch of an upstream's tool list is remembered for about five seconds on its
//! isolate: requests in that window go without the upstream's tools and do not ask it again;
//! after the window one asks again; once it answers, its tools are back.

use serde_json::json;

use super::upstream_apps::*;
use super::*;

fn asked(fx: &Fx) -> usize {
    fx.sim.outbound().iter().filter(|o| o.origin == UPSTREAM).count()
}

fn failures_logged(fx: &Fx) -> usize {
    fx.sim.logs().iter().filter(|l| l.contains("listing the tools of upstream app 'Flaky'")).count()
}

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

#[test]
fn a_failed_tool_list_fetch_is_remembered_for_five_seconds_then_asked_again() {
    let fx = Fx::new(700);
    let app = upstream_app(&fx, "Flaky", &format!("{UPSTREAM}/mcp"), json!({}));
    fx.upstream.down.set(true);
    assert!(tools(&fx, &app.code, &[]).is_empty());
    let first = asked(&fx);
    assert!(first > 0, "the first list asked the upstream");
    assert_eq!(failures_logged(&fx), 1);
    // Within the window: no request reaches the upstream, whatever is asked.
    for _ in 0..3 {
        advance(&fx, 1_000);
        assert!(tools(&fx, &app.code, &[]).is_empty());
        let v = last(&fx.call(&app.code, "echo", json!({"text": "x"})));
        assert!(v.get("error").is_some(), "{v}");
    }
    assert_eq!(asked(&fx), first, "asked again within the window");
    assert_eq!(failures_logged(&fx), 1, "logged once per failed fetch");
    // Past the window: asked again (and failing again, remembered again).
    advance(&fx, 2_500);
    assert!(tools(&fx, &app.code, &[]).is_empty());
    let second = asked(&fx);
    assert!(second > first, "not asked again after the window");
    assert_eq!(failures_logged(&fx), 2);
    // Back up: after the window its tools are listed again.
    fx.upstream.down.set(false);
    advance(&fx, 1_000);
    assert!(tools(&fx, &app.code, &[]).is_empty(), "still within the second window");
    assert_eq!(asked(&fx), second);
    advance(&fx, 5_000);
    let names: Vec<String> =
        tools(&fx, &app.code, &[]).iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
    assert!(names.iter().any(|n| n.ends_with("echo")), "{names:?}");
    fx.assert_invariants();
}

#[test]
fn the_memo_is_per_isolate_and_per_app_settings() {
    let fx = Fx::new(701);
    let app = upstream_app(&fx, "Flaky", &format!("{UPSTREAM}/mcp"), json!({}));
    fx.upstream.down.set(true);
    assert!(tools(&fx, &app.code, &[]).is_empty());
    let first = asked(&fx);
    // Another isolate knows nothing of it.
    fx.sim.evict_isolate();
    assert!(tools(&fx, &app.code, &[]).is_empty());
    let second = asked(&fx);
    assert!(second > first);
    // Settings changed (to fix them, say): asked at once.
    fx.upstream.down.set(false);
    let r = fx.console(
        crate::runtime::Method::Put,
        &format!("/apps/{}", app.app_id),
        Some(&json!({"name": "Flaky", "description": "d", "mode": "mcp",
            "backend": {"url": format!("{UPSTREAM}/mcp"), "tools_cache_ttl_seconds": 120}})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<String> =
        tools(&fx, &app.code, &[]).iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
    assert!(names.iter().any(|n| n.ends_with("echo")), "{names:?}");
    fx.assert_invariants();
}
