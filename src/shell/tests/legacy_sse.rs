//! The legacy HTTP+SSE transport: an upstream that refuses the Streamable HTTP POST (405) is
//! reached over its event stream and the endpoint it announces; an endpoint on another origin
//! is refused before anything is posted there; the relay works over it too.

use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::{call_answering, client_headers, initialize};
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::mcp::McpUpstream;
use crate::sim::{Reply, Secrets};

const LEGACY: &str = "https://legacy.test";

fn legacy_upstream(fx: &Fx, endpoint: Option<&str>) -> Rc<McpUpstream> {
    let up = Rc::new(McpUpstream::new(false, false).legacy_only(endpoint));
    fx.sim.add_backend(LEGACY, up.clone());
    up
}

fn seen(up: &McpUpstream) -> Vec<(Method, String, Option<String>)> {
    up.requests
        .borrow()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone(), r.json().and_then(|m| m["method"].as_str().map(str::to_string))))
        .collect()
}

#[test]
fn a_streamable_http_405_falls_back_to_the_legacy_transport_and_the_call_answers() {
    let fx = Fx::new(600);
    let up = legacy_upstream(&fx, None);
    let app =
        upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({"headers": {"X-Api-Key": "legacy-key-0123456789"}}));
    fx.secret("legacy-key-0123456789");
    let tool = tool_named(&fx, &app.code, "echo");
    let v = last(&fx.call(&app.code, &tool, json!({"text": "over sse"})));
    assert_eq!(result_text(&v), (false, "echo: over sse".to_string()), "{v}");
    let log = seen(&up);
    // Tried first: the Streamable HTTP initialize (and the stateless revision's probe), refused
    // with 405; then the stream, and every message to the endpoint it named. (The list and the
    // caller each have a session of their own, kept open between requests: `legacy_sessions`.)
    let get = log.iter().position(|(m, _, _)| *m == Method::Get).unwrap_or_else(|| panic!("no stream: {log:?}"));
    let probes: Vec<_> = log[..get].iter().map(|(_, p, m)| (p.as_str(), m.as_deref().unwrap_or(""))).collect();
    assert_eq!(probes, [("/mcp", "initialize"), ("/mcp", "server/discover")], "{log:?}");
    assert_eq!(log[get], (Method::Get, "/mcp".to_string(), None), "{log:?}");
    for (m, p, method) in &log {
        let method = method.as_deref().unwrap_or("");
        if *m == Method::Post && p == "/mcp" {
            assert!(["initialize", "server/discover"].contains(&method), "{log:?}");
        } else if *m == Method::Post {
            assert!(p.starts_with("/messages?sessionId=legacy-"), "{log:?}");
        }
    }
    let call = log.iter().find(|(_, _, m)| m.as_deref() == Some("tools/call")).map(|(_, p, _)| p.clone());
    assert!(call.is_some_and(|p| p.starts_with("/messages?sessionId=legacy-")), "{log:?}");
    // The app's own header went with each of them.
    assert!(up
        .requests
        .borrow()
        .iter()
        .all(|r| r.headers.get("x-api-key").as_deref() == Some("legacy-key-0123456789")));
    fx.assert_invariants();
}

#[test]
fn an_endpoint_event_pointing_to_another_origin_is_refused_and_nothing_goes_there() {
    let fx = Fx::new(601);
    legacy_upstream(&fx, Some(&format!("{OTHER}/messages?sessionId=stolen")));
    let other = recording(&fx, OTHER, |_| Reply::new(202, "text/plain", "Accepted"));
    let app =
        upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({"headers": {"X-Api-Key": "legacy-key-0123456789"}}));
    fx.secret("legacy-key-0123456789");
    let r = fx.console(Method::Post, &format!("/apps/{}/tools/refresh", app.app_id), None);
    assert_eq!(r.status, 422, "{}", r.text());
    let text = r.text();
    assert!(text.contains("the upstream's endpoint event points to https://other.test, not to the SSE server's origin https://legacy.test"), "{text}");
    assert!(tools(&fx, &app.code, &[]).is_empty());
    assert!(other.borrow().is_empty(), "posted to another origin: {:?}", other.borrow());
    fx.assert_invariants();
    let credentials = vec![("legacy-key-0123456789".to_string(), LEGACY.to_string())];
    fx.sim.assert_invariants(&Secrets { credentials, ..Secrets::default() });
}

#[test]
fn a_request_of_a_legacy_upstream_is_relayed_and_answered_on_its_endpoint() {
    let fx = Fx::new(602);
    let up = legacy_upstream(&fx, None);
    up.asks.set(true);
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = client_headers(&sid, None);
    let h2 = headers.clone();
    let call = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": {"question": "Old?"}}});
    let seen = call_answering(&fx, &app.code, headers, call, move |m| {
        vec![(h2.clone(), json!({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "decline"}}))]
    });
    assert_eq!(seen.posted, vec![(202, String::new())]);
    let answers = up.answers.borrow().clone();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0["result"], json!({"action": "decline"}));
    // On the stream's own session.
    assert!(answers[0].1.as_deref().is_some_and(|s| s.starts_with("legacy-")), "{answers:?}");
    let result = seen.messages.iter().rev().find(|m| m["id"] == 21).cloned().unwrap_or(Value::Null);
    let (is_error, text) = result_text(&result);
    assert!(!is_error && text.contains("decline"), "{result}");
    fx.assert_invariants();
}

/// The POSTs to the app's URL itself: Streamable HTTP probes (a legacy server refuses them).
fn probes(up: &McpUpstream) -> usize {
    seen(up).iter().filter(|(m, p, _)| *m == Method::Post && p == "/mcp").count()
}

#[test]
fn a_legacy_upstream_found_once_is_not_probed_again_on_later_requests() {
    let fx = Fx::new(603);
    let up = legacy_upstream(&fx, None);
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    // Finding the transport took one refused initialize and one refused stateless probe.
    assert_eq!(probes(&up), 2, "{:?}", seen(&up));
    for n in 0..3 {
        let v = last(&fx.call(&app.code, &tool, json!({"text": format!("call {n}")})));
        assert_eq!(result_text(&v), (false, format!("echo: call {n}")), "{v}");
    }
    let _ = tools(&fx, &app.code, &[]);
    assert_eq!(probes(&up), 2, "probed again after the legacy transport was found: {:?}", seen(&up));
    fx.assert_invariants();
}

#[test]
fn a_new_isolate_goes_to_a_known_legacy_upstream_without_probing() {
    let fx = Fx::new(604);
    let up = legacy_upstream(&fx, None);
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let v = last(&fx.call(&app.code, &tool, json!({"text": "first"})));
    assert_eq!(result_text(&v), (false, "echo: first".to_string()), "{v}");
    let before = probes(&up);
    // The isolate's memory is gone; what the caller's scope stored in KV is not.
    fx.sim.evict_isolate();
    let v = last(&fx.call(&app.code, &tool, json!({"text": "second"})));
    assert_eq!(result_text(&v), (false, "echo: second".to_string()), "{v}");
    assert_eq!(probes(&up), before, "probed again on a new isolate: {:?}", seen(&up));
    fx.assert_invariants();
}

#[test]
fn an_upstream_that_moved_to_streamable_http_is_found_again_when_its_stream_fails() {
    let fx = Fx::new(605);
    let up = legacy_upstream(&fx, None);
    let app = upstream_app(&fx, "Old", &format!("{LEGACY}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let v = last(&fx.call(&app.code, &tool, json!({"text": "old"})));
    assert_eq!(result_text(&v), (false, "echo: old".to_string()), "{v}");
    // The server restarts speaking Streamable HTTP only: a GET of its URL is 405 now.
    up.end_streams();
    let new = Rc::new(McpUpstream::new(true, false));
    fx.sim.add_backend(LEGACY, new.clone());
    for text in ["new", "again"] {
        let v = last(&fx.call(&app.code, &tool, json!({"text": text})));
        assert_eq!(result_text(&v), (false, format!("echo: {text}")), "{v}");
    }
    let log = seen(&new);
    let inits = log
        .iter()
        .filter(|(m, p, method)| *m == Method::Post && p == "/mcp" && method.as_deref() == Some("initialize"));
    assert_eq!(inits.count(), 1, "one handshake, then its session: {log:?}");
    // A GET without a session id is the legacy stream's (with one, the session's standalone stream).
    let legacy_gets = new
        .requests
        .borrow()
        .iter()
        .filter(|r| r.method == Method::Get && r.headers.get("mcp-session-id").is_none())
        .count();
    assert_eq!(legacy_gets, 1, "one legacy attempt: {log:?}");
    fx.assert_invariants();
}
