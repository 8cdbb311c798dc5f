//! Upstream MCP apps: the client, its sessions and their binding, OAuth tokens, the relay, upstream tasks.

use serde_json::{json, Value};

use super::*;
use crate::runtime::{Headers, Method};
use crate::sim::{Backend, BackendRequest};

/// An upstream MCP app at the simulated upstream, published; its code.
fn upstream_server(fx: &Fx, name: &str, backend: Value) -> String {
    let mut b = json!({"url": format!("{UPSTREAM}/mcp")});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": name, "description": "d", "mode": "mcp", "backend": b})),
    );
    assert_eq!(r.status, 201, "creating the app: {}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

fn upstream_calls(fx: &Fx, method: &str) -> Vec<BackendRequest> {
    fx.upstream.requests.borrow().iter().filter(|r| r.json().is_some_and(|m| m["method"] == method)).cloned().collect()
}

fn tool_names(fx: &Fx, code: &str) -> Vec<String> {
    let list = fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let v = last(&list);
    v["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_upstream_call_opens_one_session_and_reuses_it() {
    let fx = Fx::new(60);
    let code = upstream_server(&fx, "Up", json!({}));
    let names = tool_names(&fx, &code);
    let echo = names.iter().find(|n| n.ends_with("echo")).cloned().unwrap_or_default();
    assert!(!echo.is_empty(), "{names:?}");
    for text in ["one", "two"] {
        let r = fx.call(&code, &echo, json!({"text": text}));
        let v = last(&r);
        assert_eq!(v["result"]["content"][0]["text"], format!("echo: {text}"), "{}", r.text());
    }
    let calls = upstream_calls(&fx, "tools/call");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].headers.get("mcp-session-id"), calls[1].headers.get("mcp-session-id"));
    assert!(calls[0].headers.get("mcp-session-id").is_some());
    let inits = upstream_calls(&fx, "initialize").len();
    assert!(inits >= 1, "{inits}");
    // The second call opened nothing new.
    let before = inits;
    fx.call(&code, &echo, json!({"text": "three"}));
    assert_eq!(upstream_calls(&fx, "initialize").len(), before);
    fx.assert_invariants();
}

#[test]
fn a_session_the_upstream_forgot_is_opened_again_and_the_call_answers() {
    let fx = Fx::new(61);
    let code = upstream_server(&fx, "Up", json!({}));
    let echo = tool_names(&fx, &code).into_iter().find(|n| n.ends_with("echo")).unwrap_or_default();
    assert_eq!(last(&fx.call(&code, &echo, json!({"text": "a"})))["result"]["content"][0]["text"], "echo: a");
    let sid = upstream_calls(&fx, "tools/call")[0].headers.get("mcp-session-id").unwrap_or_default();
    // The upstream ends the session (as after its restart).
    let mut h = Headers::new();
    h.set("mcp-session-id", &sid);
    let del = BackendRequest {
        method: Method::Delete,
        url: format!("{UPSTREAM}/mcp"),
        path: "/mcp".into(),
        headers: h,
        body: String::new(),
        bytes: Vec::new(),
    };
    fx.upstream.handle(&del, 0);
    let inits = upstream_calls(&fx, "initialize").len();
    let r = fx.call(&code, &echo, json!({"text": "b"}));
    assert_eq!(last(&r)["result"]["content"][0]["text"], "echo: b", "{}", r.text());
    assert_eq!(upstream_calls(&fx, "initialize").len(), inits + 1);
    let calls = upstream_calls(&fx, "tools/call");
    assert_ne!(calls.last().and_then(|c| c.headers.get("mcp-session-id")), Some(sid));
    fx.assert_invariants();
}

#[test]
fn the_tools_list_is_cached_in_kv_within_its_ttl() {
    let fx = Fx::new(62);
    let code = upstream_server(&fx, "Up", json!({}));
    let a = tool_names(&fx, &code);
    let b = tool_names(&fx, &code);
    assert_eq!(a, b);
    assert_eq!(upstream_calls(&fx, "tools/list").len(), 1, "the second list came from the cache");
    fx.sim.evict_isolate();
    assert_eq!(tool_names(&fx, &code), a);
    assert_eq!(upstream_calls(&fx, "tools/list").len(), 1, "shared through KV, not isolate memory");
    fx.assert_invariants();
}
