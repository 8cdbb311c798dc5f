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
