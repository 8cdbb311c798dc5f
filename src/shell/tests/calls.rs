//! Calls to Dify apps and HTTP tools: outbound rules, blocking and streamed calls, polled async tools, durable tasks.

use std::cell::RefCell;
use std::rc::Rc;

use futures::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::runtime::{Context, Env, Method, Request, Worker};
use crate::sim::backends::{dify, http_tool};
use crate::sim::{Backend, BackendRequest, Chunk, Faults, OutboundRecord, Reply};

/// A public origin with a scripted answer per request (redirects, odd bodies).
const EDGE: &str = "https://edge.test";
/// Another public origin (where redirects lead).
const OTHER: &str = "https://other.test";
const TOOL_KEY: &str = "tool-key-0123456789";

fn manifest() -> Value {
    json!({"name": "get_weather", "description": "Weather.",
        "parameters": [{"name": "location", "type": "string", "required": true, "description": "City"}]})
}

/// Registers an HTTP tool app (`backend` merged over an endpoint and key) and publishes it; its code.
fn tool_server(fx: &Fx, name: &str, backend: Value) -> String {
    fx.secret(TOOL_KEY);
    let mut b = json!({"api_endpoint": format!("{EDGE}/run"), "api_key": TOOL_KEY, "manifest": manifest()});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let body = json!({"name": name, "description": "d", "mode": "http-tool", "backend": b});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "creating the tool: {}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

/// A Dify app of `mode` with extra `backend` settings, published; its code.
fn dify_server(fx: &Fx, name: &str, mode: &str, key: &str, app: dify::App, backend: Value) -> String {
    fx.dify.add_app(key, dify::App { name: name.to_string(), ..app });
    fx.secret(key);
    let mut b = json!({"base_url": format!("{DIFY}/v1"), "api_key": key});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
    let body = json!({"name": name, "description": "d", "mode": mode, "backend": b, "user_input_form": form,
        "outputs": if mode == "workflow" { json!([{"variable": "echo", "type": "object"}]) } else { json!([]) }});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "creating the app: {}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

fn workflow_app(form: bool) -> dify::App {
    let mut a = dify::App::new("workflow");
    if form {
        a.user_input_form = json!([{"text-input": {"variable": "text", "label": "Text", "required": true}}]);
    }
    a
}

/// A tools/call as a client that takes only JSON.
fn call_json(fx: &Fx, code: &str, name: &str, args: Value) -> ClientResponse {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}});
    fx.sim.request(request(
        Method::Post,
        &Fx::mcp_url(code),
        &[("content-type", "application/json"), ("accept", "application/json"), ("mcp-protocol-version", V2025)],
        Some(&body),
    ))
}

/// A tools/call with a progress token, as a client that takes SSE.
fn call_sse(fx: &Fx, code: &str, name: &str, args: Value) -> ClientResponse {
    fx.mcp(
        code,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": args, "_meta": {"progressToken": "p1"}}}),
    )
}

/// The result's first text, and whether it is an error.
fn outcome(resp: &ClientResponse) -> (bool, String) {
    let v = last(resp);
    let r = &v["result"];
    (r["isError"].as_bool().unwrap_or(false), r["content"][0]["text"].as_str().unwrap_or_default().to_string())
}

fn error_text(resp: &ClientResponse) -> String {
    let (is_error, text) = outcome(resp);
    assert!(is_error, "expected a tool error: {}", resp.text());
    text
}

fn to(fx: &Fx, origin: &str) -> Vec<OutboundRecord> {
    fx.sim.outbound().into_iter().filter(|o| o.origin == origin).collect()
}

/// A scripted origin: every request recorded, answered by `f`.
#[derive(Default)]
struct Scripted {
    seen: RefCell<Vec<BackendRequest>>,
}

fn scripted(fx: &Fx, origin: &str, f: impl Fn(&BackendRequest, u64) -> Reply + 'static) -> Rc<Scripted> {
    let s = Rc::new(Scripted::default());
    let seen = s.clone();
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, now: u64| {
        seen.seen.borrow_mut().push(req.clone());
        f(req, now)
    });
    fx.sim.add_backend(origin, backend);
    s
}

fn redirect(status: u16, location: &str) -> Reply {
    Reply::new(status, "", Vec::new()).with_header("location", location)
}

/// A client request served beside the run, `after_ms` of virtual time from now; its status and
/// body once read (up to `chunks` pieces of the body: then the client goes away).
fn serve_later(after_ms: u64, req: Request, chunks: Option<usize>) -> Rc<RefCell<Option<(u16, String)>>> {
    serve_later_on(after_ms, req, chunks, false)
}

/// [`serve_later`], on a new isolate when `evict` (what the isolate kept in memory is gone).
fn serve_later_on(
    after_ms: u64,
    req: Request,
    chunks: Option<usize>,
    evict: bool,
) -> Rc<RefCell<Option<(u16, String)>>> {
    let slot: Rc<RefCell<Option<(u16, String)>>> = Rc::default();
    let out = slot.clone();
    crate::runtime::spawn(async move {
        let mut timer = crate::runtime::timer::Timer::default();
        let now = crate::runtime::now_ms();
        timer.arm_by(now + after_ms, now);
        timer.fired().await;
        if evict {
            crate::shell::Flowgate.evict_isolate();
        }
        #[allow(clippy::redundant_closure)] // `spawn` takes `impl Future`: it cannot be named as a function value.
        let ctx = Context::new(Rc::new(|f: crate::runtime::Fut<'static, ()>| crate::runtime::spawn(f)));
        let resp = crate::shell::Flowgate.serve(req, Env::current(), ctx).await;
        let (status, _, body) = resp.into_parts();
        let mut stream = body.into_stream();
        let mut text = Vec::new();
        let mut n = 0;
        while chunks.is_none_or(|c| n < c) {
            match stream.next().await {
                Some(Ok(c)) => text.extend_from_slice(&c),
                _ => break,
            }
            n += 1;
        }
        drop(stream);
        *out.borrow_mut() = Some((status, String::from_utf8_lossy(&text).into_owned()));
    });
    slot
}

// ---------------------------------------------------------------------------------------------
// outbound: the guard, redirects, timeouts, caps, scrubbed errors

#[test]
fn a_redirect_to_a_private_address_is_refused_before_any_fetch() {
    let fx = Fx::new(1);
    let code = tool_server(&fx, "Weather", json!({}));
    for target in
        ["http://10.0.0.1/x", "http://169.254.169.254/latest/meta-data", "http://localhost:8080/", "http://[::1]/"]
    {
        let t = target.to_string();
        scripted(&fx, EDGE, move |_, _| redirect(307, &t));
        let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "Paris"})));
        assert!(text.contains("redirected (HTTP 307)") && text.contains("blocked"), "{target}: {text}");
    }
    assert_eq!(to(&fx, EDGE).len(), 4);
    fx.assert_invariants();
}

#[test]
fn credentials_never_follow_a_redirect_to_another_origin() {
    let fx = Fx::new(2);
    let code = tool_server(&fx, "Weather", json!({}));
    scripted(&fx, EDGE, |_, _| redirect(307, "https://other.test/landing"));
    let other = scripted(&fx, OTHER, |_, _| Reply::json(200, &json!({"ok": true})));
    let r = call_json(&fx, &code, "Weather", json!({"location": "Paris"}));
    assert_eq!(outcome(&r), (false, json!({"ok": true}).to_string()), "{}", r.text());
    let seen = other.seen.borrow();
    assert_eq!(seen.len(), 1);
    let h = &seen[0].headers;
    assert_eq!(seen[0].method, Method::Post, "307 keeps the method");
    assert!(seen[0].body.contains("Paris"), "307 keeps the body");
    assert_eq!(h.get("authorization"), None);
    assert_eq!(h.get("x-dify-user-id"), None);
    assert_eq!(h.get("x-dify-conversation-id"), None);
    assert_eq!(h.get("content-type").as_deref(), Some("application/json"));
    let mut spec = fx.specs();
    spec[0].credentials.push((format!("Bearer {TOOL_KEY}"), EDGE.into()));
    for s in spec {
        fx.sim.assert_invariants(&s);
    }
}

#[test]
fn a_same_origin_redirect_keeps_the_key() {
    let fx = Fx::new(3);
    let code = tool_server(&fx, "Weather", json!({}));
    let edge = scripted(&fx, EDGE, |req, _| {
        if req.path == "/run" {
            redirect(308, "/moved")
        } else {
            Reply::json(200, &json!({"moved": true}))
        }
    });
    let r = call_json(&fx, &code, "Weather", json!({"location": "Paris"}));
    assert!(!outcome(&r).0, "{}", r.text());
    let seen = edge.seen.borrow();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].path, "/moved");
    assert_eq!(seen[1].bearer().as_deref(), Some(TOOL_KEY));
    assert!(seen[1].headers.get("x-dify-user-id").is_some());
}

#[test]
fn see_other_turns_a_post_into_a_get_without_body() {
    let fx = Fx::new(4);
    let code = tool_server(&fx, "Weather", json!({}));
    let edge = scripted(&fx, EDGE, |req, _| {
        if req.path == "/run" {
            redirect(303, "/result")
        } else {
            Reply::json(200, &json!({"method": req.method.as_str()}))
        }
    });
    let r = call_json(&fx, &code, "Weather", json!({"location": "Paris"}));
    assert_eq!(outcome(&r).1, json!({"method": "GET"}).to_string(), "{}", r.text());
    let seen = edge.seen.borrow();
    assert_eq!(seen[1].method, Method::Get);
    assert_eq!(seen[1].body, "");
}

#[test]
fn redirects_stop_after_three_hops() {
    let fx = Fx::new(5);
    let code = tool_server(&fx, "Weather", json!({}));
    // /run → /h1 → /h2 → /h3 is three hops and answers; /run → … → /h4 is one too many.
    for (limit, ok) in [(3, true), (4, false)] {
        let edge = scripted(&fx, EDGE, move |req, _| {
            let n: u32 = req.path.strip_prefix("/h").and_then(|n| n.parse().ok()).unwrap_or(0);
            if n < limit {
                redirect(302, &format!("/h{}", n + 1))
            } else {
                Reply::json(200, &json!({"hops": n}))
            }
        });
        let r = call_json(&fx, &code, "Weather", json!({"location": "Paris"}));
        let (is_error, text) = outcome(&r);
        assert_eq!(!is_error, ok, "{limit}: {text}");
        let sent = edge.seen.borrow().len();
        // Four requests either way: three redirects followed, and the fourth answer read or refused.
        assert_eq!(sent, 4, "{limit}: {text}");
    }
}

#[test]
fn allow_private_backends_lists_hosts_and_allows_only_those() {
    let fx = Fx::new(6);
    fx.sim.set_setting("ALLOW_PRIVATE_BACKENDS", "10.0.0.7");
    let code = tool_server(&fx, "Weather", json!({"api_endpoint": "http://10.0.0.7/run"}));
    let private = scripted(&fx, "http://10.0.0.7", |req, _| {
        if req.path == "/run" {
            Reply::json(200, &json!({"ok": 1}))
        } else {
            redirect(307, "http://10.0.0.8/run")
        }
    });
    let r = call_json(&fx, &code, "Weather", json!({"location": "Paris"}));
    assert!(!outcome(&r).0, "{}", r.text());
    // A refused host, when the app was stored and then the setting narrowed.
    let other = tool_server(&fx, "Other", json!({"api_endpoint": "http://10.0.0.7/go"}));
    let text = error_text(&call_json(&fx, &other, "Other", json!({"location": "Paris"})));
    assert!(text.contains("10.0.0.8") && text.contains("blocked"), "{text}");
    assert_eq!(private.seen.borrow().len(), 2);
    fx.sim.set_setting("ALLOW_PRIVATE_BACKENDS", "10.0.0.9");
    fx.sim.evict_isolate();
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "Paris"})));
    assert!(text.contains("blocked") || text.contains("private"), "{text}");
    assert_eq!(private.seen.borrow().len(), 2, "refused before any fetch");
    for mut s in fx.specs() {
        s.allowed_origins.push("http://10.0.0.7".into());
        fx.sim.assert_invariants(&s);
    }
}

/// A 200 JSON answer of exactly `len` bytes, in two chunks, its length announced or not.
fn json_of_len(len: usize, announce: bool) -> Reply {
    let filler = "x".repeat(len - 8);
    let body = format!("{{\"a\":\"{filler}\"}}").into_bytes();
    assert_eq!(body.len(), len);
    let mut headers = crate::runtime::Headers::new();
    headers.set("content-type", "application/json");
    if announce {
        headers.set("content-length", &len.to_string());
    }
    let (a, b) = body.split_at(len / 2);
    Reply::Respond(crate::sim::network::Scripted {
        status: 200,
        headers,
        delay_ms: 0,
        chunks: vec![Chunk { delay_ms: 0, bytes: a.to_vec() }, Chunk { delay_ms: 5, bytes: b.to_vec() }],
        end: crate::sim::BodyEnd::Complete,
    })
}

#[test]
fn a_one_piece_answer_is_read_up_to_twice_max_result_bytes_plus_64_kib() {
    // max_result_bytes 1024: the cap is 2048 + 65536 bytes, announced or counted while reading.
    let cap = 2 * 1024 + 64 * 1024;
    for announce in [true, false] {
        let fx = Fx::new(10);
        let code = tool_server(&fx, "Weather", json!({"max_result_bytes": 1024}));
        let edge = scripted(&fx, EDGE, move |req, _| {
            let n: usize = req
                .body
                .split("\"location\":\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            json_of_len(n, announce)
        });
        let at_cap = call_json(&fx, &code, "Weather", json!({"location": cap.to_string()}));
        let (is_error, text) = outcome(&at_cap);
        // Read whole, then judged by max_result_bytes (structured output cannot be cut).
        assert!(is_error, "{announce}: {text}");
        assert_eq!(text, "the result of app 'Weather' is larger than its max_result_bytes (1024 bytes); raise max_result_bytes or make the result smaller");
        let over = call_json(&fx, &code, "Weather", json!({"location": (cap + 1).to_string()}));
        let text = error_text(&over);
        assert!(
            text.contains("more than 66 KiB in one piece") && text.contains("max_result_bytes (1024 bytes)"),
            "{announce}: {text}"
        );
        assert_eq!(edge.seen.borrow().len(), 2);
        fx.assert_invariants();
    }
}

#[test]
fn an_announced_length_over_the_cap_is_refused_before_the_body_is_read() {
    let fx = Fx::new(11);
    let code = tool_server(&fx, "Weather", json!({"max_result_bytes": 1024}));
    // The body never ends: only a refusal on the announced length answers in time.
    scripted(&fx, EDGE, |_, _| {
        Reply::new(200, "application/json", "{\"a\":1}")
            .with_header("content-length", &(2 * 1024 + 64 * 1024 + 1).to_string())
            .ending(crate::sim::BodyEnd::Hang)
    });
    let t0 = fx.sim.now_ms();
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert!(text.contains("more than 66 KiB"), "{text}");
    assert!(fx.sim.now_ms() - t0 < 1000, "refused at once");
}

#[test]
fn the_first_byte_timeout_bounds_the_wait_for_headers() {
    let fx = Fx::new(12);
    let code = tool_server(&fx, "Weather", json!({"first_byte_timeout_seconds": 5}));
    scripted(&fx, EDGE, |_, _| Reply::json(200, &json!({"late": true})).delayed(5_001));
    let t0 = fx.sim.now_ms();
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert_eq!(text, "the app 'Weather' did not answer within 5 s (first_byte_timeout_seconds)");
    let waited = fx.sim.now_ms() - t0;
    assert!((5_000..5_100).contains(&waited), "{waited}");
    // Just in time is in time.
    scripted(&fx, EDGE, |_, _| Reply::json(200, &json!({"late": false})).delayed(4_900));
    assert!(!outcome(&call_json(&fx, &code, "Weather", json!({"location": "x"}))).0);
    fx.assert_invariants();
}

#[test]
fn the_total_timeout_bounds_headers_and_body_of_a_blocking_call() {
    let fx = Fx::new(13);
    let code = tool_server(&fx, "Weather", json!({"timeout_seconds": 3}));
    scripted(&fx, EDGE, |_, _| Reply::json(200, &json!({})).delayed(3_500));
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert_eq!(text, "the app 'Weather' did not answer within 3 s (timeout_seconds)");
    // Headers at 2 s, the body's end at 4 s: the total ran out while reading.
    scripted(&fx, EDGE, |_, _| json_of_len(100, false).delayed(2_000).ending(crate::sim::BodyEnd::Hang));
    let t0 = fx.sim.now_ms();
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert!(text.contains("did not answer within 3 s") && text.contains("timeout_seconds"), "{text}");
    let waited = fx.sim.now_ms() - t0;
    assert!((3_000..3_100).contains(&waited), "{waited}");
    fx.assert_invariants();
}

#[test]
fn an_unreachable_backend_is_named_by_its_host_never_its_query() {
    let fx = Fx::new(14);
    let secret_q = "query-secret-abc123";
    let code = tool_server(&fx, "Weather", json!({"api_endpoint": format!("https://gone.test/run?key={secret_q}")}));
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert!(text.starts_with("could not reach the tool 'Weather' at gone.test:"), "{text}");
    assert!(!text.contains(secret_q), "{text}");
    scripted(&fx, "https://gone.test", |_, _| Reply::Reset);
    let text = error_text(&call_json(&fx, &code, "Weather", json!({"location": "x"})));
    assert!(text.starts_with("could not reach the tool 'Weather' at gone.test:"), "{text}");
    let calls: Vec<_> = fx.sim.responses().into_iter().filter(|r| r.url.contains("/mcp/")).collect();
    assert!(calls.iter().all(|r| !r.text().contains(secret_q)));
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Dify and HTTP tool answers: error statuses a person can act on

#[test]
fn dify_error_statuses_become_tool_errors_a_person_can_act_on() {
    let fx = Fx::new(20);
    let cases = [
        (dify::Behaviour::RateLimited, "retry after 7 s"),
        (dify::Behaviour::Http500, "500"),
        (dify::Behaviour::QuotaError, "provider_quota_exceeded"),
    ];
    for (i, (behaviour, want)) in cases.into_iter().enumerate() {
        let key = format!("app-key-err-{i}");
        let name = format!("Err{i}");
        let code = dify_server(&fx, &name, "workflow", &key, dify::App { behaviour, ..workflow_app(true) }, json!({}));
        for r in
            [call_json(&fx, &code, &name, json!({"text": "hi"})), call_sse(&fx, &code, &name, json!({"text": "hi"}))]
        {
            let text = error_text(&r);
            assert!(text.contains(want), "{behaviour:?}: {text}");
        }
    }
    // A key Dify does not know: its 401, said as such.
    fx.secret("app-key-unknown");
    let body = json!({"name": "Nokey", "description": "d", "mode": "workflow",
        "backend": {"base_url": format!("{DIFY}/v1"), "api_key": "app-key-unknown"},
        "user_input_form": [{"text-input": {"variable": "text", "label": "Text", "required": true}}],
        "outputs": [{"variable": "echo", "type": "object"}]});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let code = fx.publish(r.json().unwrap_or_default()["id"].as_str().unwrap_or_default());
    let text = error_text(&call_json(&fx, &code, "Nokey", json!({"text": "hi"})));
    assert!(text.contains("401") || text.to_lowercase().contains("key"), "{text}");
    fx.assert_invariants();
}

#[test]
fn http_tool_error_statuses_become_tool_errors() {
    let fx = Fx::new(21);
    let cases = [
        (http_tool::Behaviour::RateLimited, "the tool 'Tee' failed (HTTP 429): slow down; retry after 7 s"),
        (http_tool::Behaviour::Error500, "the tool 'Tee' failed (HTTP 500): upstream exploded"),
        (
            http_tool::Behaviour::NotJson,
            "the tool 'Tee' answered with text/html; charset=utf-8 instead of application/json",
        ),
    ];
    for (behaviour, want) in cases {
        let fx = Fx::new(21);
        let path = fx.tool.add_tool("t", http_tool::Tool { api_key: TOOL_KEY.into(), behaviour, ..Default::default() });
        let code = tool_server(&fx, "Tee", json!({"api_endpoint": format!("{TOOL}{path}")}));
        assert_eq!(error_text(&call_json(&fx, &code, "Tee", json!({"location": "x"}))), want);
        fx.assert_invariants();
    }
    // The wrong key: the tool's 401.
    let path = fx.tool.add_tool("t", http_tool::Tool { api_key: "another-key".into(), ..Default::default() });
    let code = tool_server(&fx, "Tee", json!({"api_endpoint": format!("{TOOL}{path}")}));
    let text = error_text(&call_json(&fx, &code, "Tee", json!({"location": "x"})));
    assert!(text.contains("HTTP 401") && text.contains("invalid api key"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// the SSE relay: notifications, keep-alives, idle and total timeouts, the run stopped

fn sse_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", V2025),
        ("user-agent", "calls-test/1"),
        ("cf-connecting-ip", "203.0.113.9"),
    ]
}

fn sse_call(code: &str, name: &str, id: u64) -> Request {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": {"text": "hi"}, "_meta": {"progressToken": "p1"}}});
    request(Method::Post, &Fx::mcp_url(code), &sse_headers(), Some(&body))
}

#[test]
fn a_streamed_workflow_sends_progress_and_a_keep_alive_every_second_of_silence() {
    let fx = Fx::new(30);
    let app = dify::App { event_delay_ms: 3_500, ..workflow_app(true) };
    let code = dify_server(&fx, "Slow", "workflow", "app-key-slow", app, json!({}));
    let r = fx.sim.request(sse_call(&code, "Slow", 1));
    assert!(r.headers.get("content-type").is_some_and(|c| c.contains("text/event-stream")), "{}", r.text());
    let text = r.text();
    // 14 s (four gaps of 3.5 s) with nothing for the client: a keep-alive at 1, 2 … 13 s.
    assert_eq!(text.matches(": keep-alive").count(), 13, "{text}");
    let (is_error, result) = outcome(&r);
    assert!(!is_error && result.contains("hi"), "{result}");
    assert!(fx.dify.stops.borrow().is_empty(), "a finished run is not stopped");
    fx.assert_invariants();
}

#[test]
fn a_silent_stream_ends_at_the_idle_timeout_and_the_run_is_stopped() {
    let fx = Fx::new(31);
    let app = dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..workflow_app(true) };
    let code = dify_server(&fx, "Stall", "workflow", "app-key-stall", app, json!({"idle_timeout_seconds": 5}));
    let t0 = fx.sim.now_ms();
    let r = fx.sim.request(sse_call(&code, "Stall", 1));
    let waited = fx.sim.now_ms() - t0;
    assert!((5_000..5_100).contains(&waited), "{waited}");
    assert_eq!(error_text(&r), "the app 'Stall' sent nothing for 5 s (idle_timeout_seconds)");
    assert_eq!(r.text().matches(": keep-alive").count(), 4, "{}", r.text());
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    let run = fx.dify.requests_for("app-key-stall").into_iter().find(|q| q.path == "/v1/workflows/run");
    let user = run.and_then(|q| q.json()).and_then(|b| b["user"].as_str().map(str::to_string)).unwrap_or_default();
    assert_eq!(*fx.dify.stops.borrow(), vec![("/v1/workflows/tasks/task-1/stop".to_string(), user)]);
    fx.assert_invariants();
}

#[test]
fn a_stream_past_its_total_timeout_ends_and_the_run_is_stopped() {
    let fx = Fx::new(32);
    let app = dify::App { event_delay_ms: 2_000, ..workflow_app(true) };
    let code = dify_server(&fx, "Long", "workflow", "app-key-long", app, json!({"timeout_seconds": 3}));
    let t0 = fx.sim.now_ms();
    let r = fx.sim.request(sse_call(&code, "Long", 1));
    assert_eq!(fx.sim.now_ms() - t0, 3_000);
    assert_eq!(error_text(&r), "the app 'Long' did not finish within 3 s (timeout_seconds)");
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(fx.dify.stops.borrow().len(), 1);
    fx.assert_invariants();
}

#[test]
fn a_client_that_goes_away_stops_the_run() {
    let fx = Fx::new(33);
    let app = dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..workflow_app(true) };
    let code = dify_server(&fx, "Gone", "workflow", "app-key-gone", app, json!({}));
    // The client reads the first piece (after a keep-alive or two) and leaves.
    let seen = serve_later(0, sse_call(&code, "Gone", 1), Some(2));
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(seen.borrow().as_ref().is_some_and(|(s, _)| *s == 200), "{:?}", seen.borrow());
    let stops = fx.dify.stops.borrow().clone();
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0].0, "/v1/workflows/tasks/task-1/stop");
    assert!(fx.sim.now_ms() - crate::sim::EPOCH_MS < 10_000, "stopped promptly, not at the idle timeout");
    fx.assert_invariants();
}

#[test]
fn notifications_cancelled_from_the_same_client_stops_the_run() {
    let fx = Fx::new(34);
    let app = dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..workflow_app(true) };
    let code = dify_server(&fx, "Cancel", "workflow", "app-key-cancel", app, json!({"idle_timeout_seconds": 30}));
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "no"}});
    // Another client (another address) cancels first: nothing happens.
    let mut other = sse_headers();
    other[4] = ("cf-connecting-ip", "198.51.100.7");
    let theirs = serve_later(1_500, request(Method::Post, &Fx::mcp_url(&code), &other, Some(&cancel)), None);
    let ours = serve_later(3_000, request(Method::Post, &Fx::mcp_url(&code), &sse_headers(), Some(&cancel)), None);
    let r = fx.sim.request(sse_call(&code, "Cancel", 5));
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(theirs.borrow().as_ref().map(|x| x.0), Some(202));
    assert_eq!(ours.borrow().as_ref().map(|x| x.0), Some(202));
    let stops = fx.dify.stops.borrow().clone();
    let times: Vec<_> =
        fx.sim.outbound().iter().filter(|o| o.url.ends_with("/stop")).map(|o| o.at_ms - crate::sim::EPOCH_MS).collect();
    // Stopped at our cancel, not at theirs (the simulated Dify keeps the stopped stream open, so
    // the relay stops it once more at its idle timeout).
    assert_eq!(times.first().copied(), Some(3_000), "{stops:?} {times:?}: {}", r.text());
    assert_eq!(stops[0].0, "/v1/workflows/tasks/task-1/stop");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// durable tasks and polled async tools

fn rpc(fx: &Fx, code: &str, method: &str, params: Value) -> Value {
    last(&fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})))
}

#[test]
fn a_task_runs_to_its_end_and_is_reachable_only_through_its_server() {
    for seed in crate::sim::seeds(40..43) {
        let fx = Fx::new(seed);
        let app = dify::App { event_delay_ms: 500, ..workflow_app(true) };
        let code = dify_server(&fx, "Job", "workflow", "app-key-job", app, json!({"task_support": "optional"}));
        let other = dify_server(&fx, "Job2", "workflow", "app-key-job2", workflow_app(true), json!({}));
        let created =
            rpc(&fx, &code, "tools/call", json!({"name": "Job", "arguments": {"text": "hi"}, "task": {"ttl": 60_000}}));
        let task = &created["result"]["task"];
        let id = task["taskId"].as_str().unwrap_or_default().to_string();
        assert!(!id.is_empty(), "{created}");
        assert_eq!(task["ttl"], 60_000, "{created}");
        let result = rpc(&fx, &code, "tasks/result", json!({"taskId": id}));
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert_eq!(
            result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].as_str(),
            Some(id.as_str()),
            "{result}"
        );
        let got = rpc(&fx, &code, "tasks/get", json!({"taskId": id}));
        assert_eq!(got["result"]["status"], "completed", "{got}");
        // Another server's code does not find it.
        let elsewhere = rpc(&fx, &other, "tasks/get", json!({"taskId": id}));
        assert!(elsewhere.get("error").is_some(), "{elsewhere}");
        // A finished task cannot be cancelled.
        let cancel = rpc(&fx, &code, "tasks/cancel", json!({"taskId": id}));
        assert_eq!(cancel["error"]["code"], -32602, "{cancel}");
        // Deleted once its TTL (from creation) has run out.
        fx.sim.advance(61_000).unwrap_or_else(|h| panic!("{h}"));
        let gone = rpc(&fx, &code, "tasks/get", json!({"taskId": id}));
        assert!(gone.get("error").is_some(), "{gone}");
        fx.assert_invariants();
    }
}

#[test]
fn a_task_outliving_its_ttl_fails_naming_it_and_its_run_is_stopped() {
    let fx = Fx::new(44);
    let app = dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..workflow_app(true) };
    let code = dify_server(&fx, "Stuck", "workflow", "app-key-stuck", app, json!({"task_support": "optional"}));
    let created =
        rpc(&fx, &code, "tools/call", json!({"name": "Stuck", "arguments": {"text": "hi"}, "task": {"ttl": 60_000}}));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    fx.sim.advance(30_000).unwrap_or_else(|h| panic!("{h}"));
    let got = rpc(&fx, &code, "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "working", "{got}");
    fx.sim.advance(30_500).unwrap_or_else(|h| panic!("{h}"));
    let got = rpc(&fx, &code, "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "failed", "{got}");
    let msg = got["result"]["statusMessage"].as_str().unwrap_or_default();
    assert!(msg.contains("did not finish within its ttl of 60000 ms"), "{msg}");
    assert!(!fx.dify.stops.borrow().is_empty(), "the run is stopped");
    // Deleted 30 s later.
    fx.sim.advance(29_000).unwrap_or_else(|h| panic!("{h}"));
    assert!(rpc(&fx, &code, "tasks/get", json!({"taskId": id})).get("result").is_some());
    fx.sim.advance(2_000).unwrap_or_else(|h| panic!("{h}"));
    assert!(rpc(&fx, &code, "tasks/get", json!({"taskId": id})).get("error").is_some());
    fx.assert_invariants();
}

#[test]
fn an_async_tool_is_polled_to_its_end_in_a_plain_call() {
    let fx = Fx::new(45);
    let polls = Rc::new(RefCell::new(0u32));
    let p = polls.clone();
    scripted(&fx, EDGE, move |req, _| match req.path.as_str() {
        "/submit" => Reply::json(200, &json!({"task_id": "t-1", "status": "running"})),
        "/status" if req.body.contains("t-1") => {
            *p.borrow_mut() += 1;
            if *p.borrow() < 3 {
                Reply::json(200, &json!({"task_id": "t-1", "status": "running"}))
            } else {
                Reply::json(200, &json!({"task_id": "t-1", "status": "completed", "result": {"temp": 21}}))
            }
        }
        _ => Reply::json(200, &json!({"task_id": "t-1", "status": "cancelled"})),
    });
    let code = tool_server(
        &fx,
        "Async",
        json!({"api_endpoint": format!("{EDGE}/submit"), "poll_interval_seconds": 1,
            "async": {"status_endpoint": format!("{EDGE}/status"), "cancel_endpoint": format!("{EDGE}/cancel")}}),
    );
    let t0 = fx.sim.now_ms();
    let r = call_json(&fx, &code, "Async", json!({"location": "x"}));
    let (is_error, text) = outcome(&r);
    assert!(!is_error && text.contains("21"), "{}", r.text());
    assert_eq!(*polls.borrow(), 3);
    assert!((3_000..3_500).contains(&(fx.sim.now_ms() - t0)), "{}", fx.sim.now_ms() - t0);
    assert!(to(&fx, EDGE).iter().all(|o| !o.url.ends_with("/cancel")), "a finished run is not cancelled");
    fx.assert_invariants();
}

#[test]
fn calls_under_faults_end_in_a_precise_answer() {
    for seed in crate::sim::seeds(50..58) {
        let fx = Fx::new(seed);
        let code = dify_server(
            &fx,
            "Flow",
            "workflow",
            "app-key-f",
            workflow_app(true),
            json!({"timeout_seconds": 20, "idle_timeout_seconds": 5, "first_byte_timeout_seconds": 5}),
        );
        let tool = tool_server(&fx, "Tee", json!({"timeout_seconds": 20, "first_byte_timeout_seconds": 5}));
        scripted(&fx, EDGE, |_, _| Reply::json(200, &json!({"ok": true})));
        fx.sim.set_faults(Faults {
            kv_error: 0.1,
            d1_error: 0.05,
            fetch_hang: 0.1,
            fetch_reset: 0.1,
            body_reset: 0.1,
            body_truncate: 0.1,
            isolate_evict: 0.2,
            object_restart: 0.2,
            ..Faults::default()
        });
        for _ in 0..3 {
            for r in [
                fx.sim.request(sse_call(&code, "Flow", 1)),
                call_json(&fx, &code, "Flow", json!({"text": "hi"})),
                call_json(&fx, &tool, "Tee", json!({"location": "x"})),
            ] {
                let v = last(&r);
                assert!(v.get("result").is_some() || v.get("error").is_some() || r.status >= 400, "{}", r.text());
            }
        }
        fx.assert_invariants();
    }
}

#[test]
fn an_async_tool_that_outlasts_the_call_is_cancelled_at_its_cancel_endpoint() {
    let fx = Fx::new(46);
    let edge = scripted(&fx, EDGE, |req, _| match req.path.as_str() {
        "/submit" => Reply::json(200, &json!({"task_id": "t-9", "status": "running"})),
        "/status" => Reply::json(200, &json!({"task_id": "t-9", "status": "running"})),
        _ => Reply::json(200, &json!({"task_id": "t-9", "status": "cancelled"})),
    });
    let code = tool_server(
        &fx,
        "Forever",
        json!({"api_endpoint": format!("{EDGE}/submit"), "poll_interval_seconds": 1, "timeout_seconds": 4,
            "async": {"status_endpoint": format!("{EDGE}/status"), "cancel_endpoint": format!("{EDGE}/cancel")}}),
    );
    let r = call_json(&fx, &code, "Forever", json!({"location": "x"}));
    assert_eq!(error_text(&r), "the app 'Forever' did not finish within 4 s (timeout_seconds)");
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    let seen = edge.seen.borrow();
    let cancels: Vec<_> = seen.iter().filter(|q| q.path == "/cancel").collect();
    assert_eq!(cancels.len(), 1);
    assert!(cancels[0].body.contains("t-9"), "{}", cancels[0].body);
    assert_eq!(cancels[0].bearer().as_deref(), Some(TOOL_KEY));
    fx.assert_invariants();
}

#[test]
fn a_cancel_landing_on_another_isolate_finds_the_run_shared_in_kv_after_two_seconds() {
    let fx = Fx::new(35);
    let app = dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..workflow_app(true) };
    let code = dify_server(&fx, "Shared", "workflow", "app-key-shared", app, json!({"idle_timeout_seconds": 30}));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}});
    let ours =
        serve_later_on(2_500, request(Method::Post, &Fx::mcp_url(&code), &sse_headers(), Some(&cancel)), None, true);
    fx.sim.request(sse_call(&code, "Shared", 6));
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(ours.borrow().as_ref().map(|x| x.0), Some(202));
    let times: Vec<_> =
        fx.sim.outbound().iter().filter(|o| o.url.ends_with("/stop")).map(|o| o.at_ms - crate::sim::EPOCH_MS).collect();
    assert_eq!(times.first().copied(), Some(2_500), "{times:?}");
    fx.assert_invariants();
}
