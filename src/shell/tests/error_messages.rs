//! Errors that tell you what to do: each mistake a new user makes, and the message that names
//! its fix. A Dify base URL without `/v1`, a `$SECRET` the Worker does not have, a mode that
//! does not match the Dify app (at import and at call time), a backend that refuses the
//! connection, a wrong Dify key, an MCP URL that lacks its `/mcp`, a mistyped server code (for
//! every method).

use std::rc::Rc;

use serde_json::{json, Value};

use super::*;
use crate::sim::backends::dify;
use crate::sim::network::{Backend, BackendRequest, Reply};

/// A Dify app named `name` of Flowgate `mode` with these backend settings, published; (warnings, code).
fn app(fx: &Fx, name: &str, mode: &str, backend: Value) -> (Vec<String>, String) {
    let body = json!({"name": name, "mode": mode, "backend": backend,
        "user_input_form": [{"text-input": {"variable": "text", "label": "Text"}}]});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json().unwrap_or_default();
    let warnings =
        v["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
    let code = fx.publish(v["id"].as_str().unwrap_or_default());
    (warnings, code)
}

fn dify_backend(key: &str) -> Value {
    json!({"base_url": format!("{DIFY}/v1"), "api_key": key})
}

/// The tool error of a call, JSON only and streamed alike (the same message on both paths).
fn tool_error(fx: &Fx, code: &str, name: &str, args: Value) -> String {
    let mut seen = Vec::new();
    for accept in ["application/json", "application/json, text/event-stream"] {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}});
        let headers = [("content-type", "application/json"), ("accept", accept), ("mcp-protocol-version", V2025)];
        let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(code), &headers, Some(&body)));
        let result = last(&r)["result"].clone();
        assert_eq!(result["isError"], true, "{accept}: {}", r.text());
        seen.push(result["content"][0]["text"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(seen[0], seen[1], "the JSON and the streamed path say the same");
    seen.remove(0)
}

#[test]
fn a_base_url_without_v1_is_a_warning_at_create_and_named_at_call_time() {
    let fx = Fx::new(4201);
    fx.dify.add_app("app-nov1", dify::App::new("workflow"));
    fx.secret("app-nov1");
    let (warnings, code) = app(&fx, "NoV1", "workflow", json!({"base_url": DIFY, "api_key": "app-nov1"}));
    assert!(warnings.iter().any(|w| w.starts_with("backend.base_url does not end with /v1")), "{warnings:?}");
    let text = tool_error(&fx, &code, "NoV1", json!({"text": "x"}));
    assert!(text.contains("(HTTP 404"), "{text}");
    assert!(text.contains("the app's base_url (dify.test) does not end with /v1: set it to Dify's Service API root, e.g. https://api.dify.ai/v1"), "{text}");
    // With /v1 there is no such warning.
    fx.dify.add_app("app-v1", dify::App::new("workflow"));
    fx.secret("app-v1");
    let (warnings, _) = app(&fx, "WithV1", "workflow", dify_backend("app-v1"));
    assert!(warnings.iter().all(|w| !w.contains("/v1")), "{warnings:?}");
    fx.assert_invariants();
}

#[test]
fn a_secret_that_is_not_set_is_a_warning_at_create_that_names_both_ways_to_set_it() {
    let fx = Fx::new(4202);
    fx.sim.set_setting("SECRET_REF_PREFIX", "BACKEND_");
    fx.dify.add_app("app-secret-later", dify::App::new("workflow"));
    fx.secret("app-secret-later");
    let backend = json!({"base_url": format!("{DIFY}/v1"), "api_key": "$BACKEND_DIFY_KEY"});
    let (warnings, code) = app(&fx, "Later", "workflow", backend);
    assert_eq!(
        warnings,
        ["backend.api_key refers to $BACKEND_DIFY_KEY, which is not set on this Worker, so calls will fail until it is: \
          locally, add BACKEND_DIFY_KEY=… to .dev.vars and restart `make dev`; deployed, run `wrangler secret put BACKEND_DIFY_KEY`"]
    );
    let text = tool_error(&fx, &code, "Later", json!({"text": "x"}));
    assert!(text.starts_with("the API key of app 'Later' refers to $BACKEND_DIFY_KEY, which is not set on this Worker: locally, add BACKEND_DIFY_KEY=… to .dev.vars"), "{text}");
    assert!(fx.dify.requests.borrow().is_empty(), "a call without its key reached Dify");
    // Once set, the same app works and the warning is gone.
    fx.sim.set_setting("BACKEND_DIFY_KEY", "app-secret-later");
    let r = fx.call(&code, "Later", json!({"text": "x"}));
    assert_eq!(last(&r)["result"]["isError"], false, "{}", r.text());
    let backend = json!({"base_url": format!("{DIFY}/v1"), "api_key": "$BACKEND_DIFY_KEY"});
    assert!(app(&fx, "Now", "workflow", backend).0.is_empty());
    // A header's reference is found too (upstream MCP apps).
    let body = json!({"name": "Up", "mode": "mcp", "backend": {"url": format!("{UPSTREAM}/mcp"),
        "headers": {"Authorization": "$BACKEND_UPSTREAM_TOKEN"}}});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let w = r.json().unwrap_or_default()["warnings"].to_string();
    assert!(w.contains("backend.headers.Authorization refers to $BACKEND_UPSTREAM_TOKEN"), "{w}");
    fx.assert_invariants();
}

#[test]
fn a_mode_that_does_not_match_the_dify_app_is_named_at_import_and_at_call_time() {
    let fx = Fx::new(4203);
    fx.dify.add_app("app-really-workflow", dify::App::new("workflow"));
    fx.secret("app-really-workflow");
    // Import: the mode the caller expected is checked against Dify's /info.
    let import = |mode: Value| {
        let body = json!({"base_url": format!("{DIFY}/v1"), "api_key": "app-really-workflow", "mode": mode});
        fx.console(Method::Post, "/apps/import", Some(&body))
    };
    let r = import(json!("chat"));
    assert_eq!(r.status, 400, "{}", r.text());
    let errors = r.json().unwrap_or_default()["errors"].clone();
    assert_eq!(errors[0]["field"], "mode", "{errors}");
    assert_eq!(
        errors[0]["message"],
        "the Dify app behind this API key is a workflow app, not a chat app: leave mode out to import it as the \
         workflow app it is, or use the API key of your chat app"
    );
    assert_eq!(import(json!("workflow")).status, 201);
    // Registered by hand as a chat app: Dify refuses the chat endpoint, and the message says why.
    let (_, code) = app(&fx, "Mixed", "chat", dify_backend("app-really-workflow"));
    let text = tool_error(&fx, &code, "Mixed", json!({"query": "hi"}));
    assert!(text.starts_with("the Dify app refused the call (HTTP 400, app_unavailable)"), "{text}");
    assert!(text.contains("Flowgate calls this app as a chat app (/chat-messages); if the Dify app's mode is another (GET …/v1/info shows it), set the app's mode to it in Flowgate or import the app again"), "{text}");
    fx.assert_invariants();
}

#[test]
fn a_refused_or_lost_connection_says_what_to_check() {
    let fx = Fx::new(4204);
    fx.secret("app-gone");
    // No backend at all at that origin (a refused connection), then one that drops it.
    let (_, code) = app(&fx, "Gone", "workflow", json!({"base_url": "https://gone.test/v1", "api_key": "app-gone"}));
    let refused = tool_error(&fx, &code, "Gone", json!({"text": "x"}));
    let reset: Rc<dyn Backend> = Rc::new(|_: &BackendRequest, _: u64| Reply::Reset);
    fx.sim.add_backend("https://gone.test", reset);
    let lost = tool_error(&fx, &code, "Gone", json!({"text": "x"}));
    for (text, runtime) in [(refused, "fetch failed: connection refused"), (lost, "Network connection lost.")] {
        assert_eq!(
            text,
            format!(
                "could not reach the Dify app 'Gone' at gone.test: the connection was refused or lost ({runtime}); check \
                 that the backend is running and listening there, and that the app's base_url names the right host and port"
            )
        );
    }
    fx.assert_invariants();
}

#[test]
fn a_wrong_dify_key_names_the_setting_to_fix() {
    let fx = Fx::new(4205);
    fx.secret("app-nobody-knows");
    let (_, code) = app(&fx, "Nokey", "workflow", dify_backend("app-nobody-knows"));
    let text = tool_error(&fx, &code, "Nokey", json!({"text": "x"}));
    assert!(
        text.starts_with("the Dify app refused the call (HTTP 401, unauthorized): Access token is invalid; "),
        "{text}"
    );
    assert!(text.ends_with("check the app's api_key in Flowgate: it must be this Dify app's Service API key (app-…, from the app's \"API Access\" page in Dify), or a $NAME whose secret holds it"), "{text}");
    fx.assert_invariants();
}

/// A request to `path` under the Worker, with `method` and the usual client headers.
fn at(fx: &Fx, method: Method, path: &str) -> ClientResponse {
    let headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let body = (method == Method::Post).then_some(&ping);
    fx.sim.request(request(method, &format!("{BASE}{path}"), &headers, body))
}

#[track_caller]
fn assert_not_found(r: &ClientResponse, needle: &str) {
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.headers.get("content-type").as_deref(), Some("application/json"));
    let v = r.json().unwrap_or_default();
    assert_eq!((v["jsonrpc"].as_str(), v["error"]["code"].as_i64()), (Some("2.0"), Some(-32600)), "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
}

#[test]
fn an_mcp_url_missing_its_mcp_is_a_json_rpc_404_that_says_so() {
    let fx = Fx::new(4206);
    let code = fx.publish(&fx.workflow("Echo", "app-key-1"));
    for method in [Method::Post, Method::Get] {
        assert_not_found(&at(&fx, method.clone(), &format!("/mcp/server/{code}")), "add /mcp to the end of the URL");
        assert_not_found(&at(&fx, method.clone(), &format!("/mcp/server/{code}/sse")), "no /sse endpoint");
        assert_not_found(&at(&fx, method.clone(), &format!("/mcp/server/{code}/mcp/x")), "remove what follows /mcp");
        assert_not_found(&at(&fx, method, "/mcp"), "the MCP endpoint is /mcp/server/<code>/mcp");
    }
    // The endpoint itself still answers; the code is never said back (the invariants check it).
    assert_eq!(at(&fx, Method::Post, &format!("/mcp/server/{code}/mcp")).status, 200);
    fx.assert_invariants();
}

#[test]
fn a_mistyped_code_is_a_json_rpc_404_for_every_method_and_a_real_one_a_405() {
    let fx = Fx::new(4207);
    let code = fx.publish(&fx.workflow("Echo", "app-key-1"));
    let typo: String = code.chars().rev().collect();
    for method in [Method::Get, Method::Delete, Method::Post] {
        let r = at(&fx, method.clone(), &format!("/mcp/server/{typo}/mcp"));
        assert_not_found(&r, "Server not found: no MCP server has this code; check the URL");
        let r = at(&fx, method.clone(), "/mcp/server/short/mcp");
        assert_not_found(&r, "Server not found");
    }
    let r = at(&fx, Method::Get, &format!("/mcp/server/{code}/mcp"));
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.headers.get("allow").as_deref(), Some("POST, OPTIONS"));
    fx.assert_invariants();
}

#[test]
fn guessing_codes_by_get_is_rate_limited_as_by_post() {
    let fx = Fx::new(4208);
    fx.sim.set_rate_limit("MCP_RATE_LIMIT", 2, 60_000);
    let typo = "AAAAAAAAAAAAAAAz";
    let counted = || fx.sim.trace().iter().filter(|l| l.contains("rate_limit MCP_RATE_LIMIT")).count();
    let before = counted();
    assert_eq!(at(&fx, Method::Get, &format!("/mcp/server/{typo}/mcp")).status, 404);
    assert_eq!(counted(), before + 1, "a GET is one count");
    assert_eq!(at(&fx, Method::Delete, &format!("/mcp/server/{typo}/mcp")).status, 404);
    let r = at(&fx, Method::Get, &format!("/mcp/server/{typo}/mcp"));
    assert_eq!(r.status, 429, "{}", r.text());
    fx.assert_invariants();
}
