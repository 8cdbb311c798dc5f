//! The upstream's standalone stream: while a call runs on a session, Flowgate holds the
//! session's `GET` stream open, relays a request that comes on it (related to no request, as
//! FastMCP sends `roots/list`) to a client that can answer it, refuses it at once with the
//! reason otherwise, passes on logs at the client's level and the call's own progress, and
//! closes the stream with the call; no `GET` without a session, and a 405 changes nothing.

use std::rc::Rc;

use serde_json::{json, Value};

use super::relay::{call_answering, client_headers, initialize, Seen};
use super::upstream_apps::*;
use super::*;
use crate::runtime::Method;
use crate::sim::backends::mcp::McpUpstream;
use crate::sim::BackendRequest;

const TEAM_KEY: &str = "team-key-for-the-standalone-tests";

/// A standalone-stream upstream app (a static credential along) and its tool `name`.
fn app_with(fx: &Fx, name: &str) -> (UpApp, String) {
    fx.upstream.standalone.set(true);
    fx.secret(TEAM_KEY);
    let app = upstream_app(fx, "Streamer", &format!("{UPSTREAM}/mcp"), json!({"headers": {"X-Team-Key": TEAM_KEY}}));
    let tool = tool_named(fx, &app.code, name);
    (app, tool)
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

fn call_result(seen: &Seen) -> Value {
    seen.messages.iter().rev().find(|m| m["id"] == 21).cloned().unwrap_or(Value::Null)
}

fn relayed(seen: &Seen) -> Vec<Value> {
    seen.messages.iter().filter(|m| m.get("method").is_some() && m.get("id").is_some()).cloned().collect()
}

/// The upstream's standalone `GET`s.
fn gets(up: &McpUpstream) -> Vec<BackendRequest> {
    up.requests.borrow().iter().filter(|r| r.method == Method::Get).cloned().collect()
}

#[test]
fn a_roots_request_on_the_standalone_stream_reaches_a_client_that_declared_roots_and_its_answer_the_upstream() {
    let fx = Fx::new(430);
    let (app, tool) = app_with(&fx, "stream_ask");
    let sid = initialize(&fx, &app.code, json!({"roots": {"listChanged": true}}), None);
    let headers = client_headers(&sid, None);
    let h2 = headers.clone();
    let roots = json!({"roots": [{"uri": "file:///work/project", "name": "project"}]});
    let answer = roots.clone();
    let seen = call_answering(&fx, &app.code, headers, call(&tool, json!({"method": "roots/list"})), move |m| {
        vec![(h2.clone(), json!({"jsonrpc": "2.0", "id": m["id"], "result": answer}))]
    });
    let asked = relayed(&seen);
    assert_eq!(asked.len(), 1, "{:?}", seen.messages);
    assert_eq!(asked[0]["method"], "roots/list");
    let ticket = asked[0]["id"].as_str().unwrap_or_default();
    assert!(ticket.starts_with("fg-relay.") && !ticket.contains("up-stream"), "sealed: {ticket}");
    assert_eq!(seen.posted, vec![(202, String::new())]);
    // The upstream got the client's roots under its own id, on the session whose stream asked.
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].0, json!({"jsonrpc": "2.0", "id": "up-stream-1", "result": roots}));
    let call_session = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    assert!(call_session.is_some());
    assert_eq!(answers[0].1, call_session);
    let (is_error, text) = result_text(&call_result(&seen));
    assert!(!is_error && text.contains("file:///work/project"), "{text}");
    // The stream was opened on that session, with the session's credentials, and is closed now.
    let g = gets(&fx.upstream);
    assert_eq!(g.len(), 1, "one GET for the call");
    assert_eq!(g[0].headers.get("mcp-session-id"), call_session);
    assert_eq!(g[0].headers.get("accept").as_deref(), Some("text/event-stream"));
    assert_eq!(g[0].headers.get("x-team-key").as_deref(), Some(TEAM_KEY));
    assert_eq!(g[0].headers.get("mcp-protocol-version").as_deref(), Some(V2025));
    assert!(!fx.upstream.standalone_open(), "the stream ended with the call");
    fx.assert_invariants();
}

#[test]
fn a_request_no_client_can_take_is_refused_at_once_with_the_reason() {
    let fx = Fx::new(431);
    let (app, tool) = app_with(&fx, "stream_ask");
    let sid = initialize(&fx, &app.code, json!({"sampling": {}}), None);
    let json_only = {
        let mut h = client_headers(&sid, None);
        h[1].1 = "application/json".into();
        h
    };
    let cases = [
        ("roots/list", client_headers(&sid, None), "did not declare the roots capability"),
        ("ping", client_headers(&sid, None), "Flowgate does not relay ping"),
        ("sampling/createMessage", json_only, "takes only JSON answers"),
    ];
    for (i, (method, headers, why)) in cases.into_iter().enumerate() {
        let started = fx.sim.now_ms();
        let params = json!({"messages": [], "maxTokens": 5});
        let body = call(&tool, json!({"method": method, "params": params}));
        // A JSON-only client gets one JSON answer; the others read the call's event stream.
        let seen = if headers[1].1 == "application/json" {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &h, Some(&body)));
            Seen { messages: messages(&r), posted: Vec::new() }
        } else {
            call_answering(&fx, &app.code, headers, body, |_| Vec::new())
        };
        assert!(relayed(&seen).is_empty(), "{:?}", seen.messages);
        let answers = fx.upstream.answers.borrow().clone();
        assert_eq!(answers.len(), i + 1, "{answers:?}");
        let error = &answers[i].0["error"];
        assert_eq!(error["code"], -32601, "{error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{method}: {message}");
        // At once: the call (which waits for the answer) ended within a second of virtual time,
        // far from any timeout, and its result names the reason.
        let took = fx.sim.now_ms() - started;
        assert!(took < 1_000, "{method}: the refusal took {took} ms");
        let (is_error, text) = result_text(&call_result(&seen));
        assert!(is_error && text.contains(why), "{method}: {text}");
        assert!(!fx.upstream.standalone_open());
    }
    fx.assert_invariants();
}

#[test]
fn logs_at_the_clients_level_and_the_calls_own_progress_reach_the_client() {
    let fx = Fx::new(432);
    let (app, tool) = app_with(&fx, "stream_note");
    let sid = initialize(&fx, &app.code, json!({}), None);
    let note = |message: Value, token: Option<i64>| {
        let mut c = call(&tool, json!({"message": message, "delayMs": 300}));
        if let Some(t) = token {
            c["params"]["_meta"] = json!({"progressToken": t});
        }
        call_answering(&fx, &app.code, client_headers(&sid, None), c, |_| Vec::new()).messages
    };
    let log = |level: &str| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "logger": "up", "data": "from the stream"}});
    let warned = note(log("warning"), None);
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert_eq!(warned[0], log("warning"), "passed on as it came");
    assert_eq!(result_text(&warned[1]), (false, "sent".into()));
    // Below the client's level (2025 clients: info): dropped.
    let debug = note(log("debug"), None);
    assert_eq!(debug.len(), 1, "{debug:?}");
    let progress = |t: i64| json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}});
    let own = note(progress(5), Some(5));
    assert_eq!(own.first(), Some(&progress(5)), "{own:?}");
    let other = note(progress(6), Some(5));
    assert_eq!(other.len(), 1, "another request's progress is not this call's: {other:?}");
    let changed = note(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}), None);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(gets(&fx.upstream).len(), 5, "one stream a call");
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn the_stream_is_held_while_the_call_runs_and_closed_when_it_ends() {
    let fx = Fx::new(433);
    let (app, tool) = app_with(&fx, "stream_note");
    let up = fx.upstream.clone();
    let open_meanwhile = Rc::new(std::cell::Cell::new(false));
    let seen = open_meanwhile.clone();
    let c = call(
        &tool,
        json!({"message": {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}, "delayMs": 2_000}),
    );
    crate::runtime::spawn(async move {
        crate::runtime::sleep(1_000).await;
        seen.set(up.standalone_open());
    });
    let r = fx.mcp(&app.code, &c);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(open_meanwhile.get(), "held open while the call ran");
    assert!(!fx.upstream.standalone_open(), "closed when it ended");
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn no_get_when_the_upstream_keeps_no_session() {
    let fx = Fx::new(434);
    let plain = Rc::new(McpUpstream::new(false, true));
    plain.standalone.set(true);
    fx.sim.add_backend("https://plain.test", plain.clone());
    let app = upstream_app(&fx, "Plain", "https://plain.test/mcp", json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let r = last(&fx.call(&app.code, &tool, json!({"text": "hi"})));
    assert_eq!(result_text(&r), (false, "echo: hi".into()));
    assert!(plain.requests.borrow().iter().any(|r| r.method == Method::Post));
    assert!(gets(&plain).is_empty(), "no session, no standalone stream");
    fx.assert_invariants();
}

#[test]
fn an_upstream_without_a_standalone_stream_405_is_called_as_before() {
    let fx = Fx::new(435);
    let app = upstream_app(&fx, "Plain", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    let started = fx.sim.now_ms();
    let r = last(&fx.call(&app.code, &tool, json!({"text": "hi"})));
    assert_eq!(result_text(&r), (false, "echo: hi".into()));
    let g = gets(&fx.upstream);
    assert_eq!(g.len(), 1, "the GET was tried once, answered 405, and not again");
    assert!(fx.sim.now_ms() - started < 1_000, "no wait for a stream that is not there");
    fx.assert_invariants();
}

#[test]
fn a_405_to_the_standalone_get_is_remembered_and_later_calls_send_no_get() {
    let fx = Fx::new(436);
    let app = upstream_app(&fx, "Plain", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "echo");
    for n in 0..3 {
        let r = last(&fx.call(&app.code, &tool, json!({"text": format!("hi {n}")})));
        assert_eq!(result_text(&r), (false, format!("echo: hi {n}")));
    }
    // The GET goes before the call's POST: a round trip each call paid for a known 405.
    assert_eq!(gets(&fx.upstream).len(), 1, "asked once, answered 405, not asked again");
    // Another isolate asks once too, then knows.
    fx.sim.evict_isolate();
    for n in 0..2 {
        let r = last(&fx.call(&app.code, &tool, json!({"text": format!("again {n}")})));
        assert_eq!(result_text(&r), (false, format!("echo: again {n}")));
    }
    assert_eq!(gets(&fx.upstream).len(), 2);
    fx.assert_invariants();
}

#[test]
fn a_request_during_a_forwarded_prompts_get_is_refused_at_once() {
    use crate::sim::network::{BodyEnd, Feed};
    use crate::sim::Reply;
    let fx = Fx::new(436);
    // An upstream with one prompt, whose prompts/get asks the client for its roots first (on
    // the POST's own stream) and answers with what came back.
    // The prompts/get waiting for its roots: its stream and its id.
    type Waiting = Option<(Rc<Feed>, Value)>;
    let waiting: Rc<std::cell::RefCell<Waiting>> = Rc::default();
    let w = waiting.clone();
    let seen = recording(&fx, "https://prompts.test", move |req| {
        let Some(msg) = req.json() else { return Reply::new(405, "text/plain", "no") };
        let id = msg["id"].clone();
        let ok = |result: Value| Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}));
        match msg["method"].as_str() {
            Some("initialize") => ok(json!({"protocolVersion": V2025, "capabilities": {"prompts": {}, "tools": {}},
                "serverInfo": {"name": "p", "version": "1"}}))
            .with_header("mcp-session-id", "p-session"),
            Some("tools/list") => ok(json!({"tools": []})),
            Some("prompts/list") => ok(json!({"prompts": [{"name": "greet"}]})),
            Some("prompts/get") => {
                let feed = Rc::new(Feed::default());
                *w.borrow_mut() = Some((feed.clone(), id.clone()));
                let ask = json!({"jsonrpc": "2.0", "id": "p-ask", "method": "roots/list"});
                Reply::sse(vec![format!("data: {ask}\n\n")], 0).ending(BodyEnd::Fed(feed))
            }
            None if msg["id"] == "p-ask" => {
                if let Some((feed, call)) = w.borrow_mut().take() {
                    let text = format!("got {}", msg.get("error").unwrap_or(&msg["result"]));
                    let answer = json!({"jsonrpc": "2.0", "id": call, "result": {"messages": [
                        {"role": "user", "content": {"type": "text", "text": text}}]}});
                    feed.push(format!("data: {answer}\n\n"));
                    feed.close();
                }
                Reply::new(202, "text/plain", "")
            }
            _ => Reply::new(202, "text/plain", ""),
        }
    });
    let app = upstream_app(&fx, "Prompter", "https://prompts.test/mcp", json!({}));
    let sid = initialize(&fx, &app.code, json!({"roots": {}}), None);
    let started = fx.sim.now_ms();
    let h = client_headers(&sid, None);
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let get = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"name": "Prompter_greet"}});
    let r = last(&fx.sim.request(request(Method::Post, &Fx::mcp_url(&app.code), &h, Some(&get))));
    assert!(fx.sim.now_ms() - started < 1_000, "answered at once, not after a timeout");
    let text = r["result"]["messages"][0]["content"]["text"].as_str().unwrap_or_default();
    assert!(text.contains("-32601") && text.contains("during prompts/get"), "{r}");
    let answered =
        seen.borrow().iter().filter_map(|r| r.json()).find(|m| m["id"] == "p-ask" && m.get("method").is_none());
    let answered = answered.unwrap_or_default();
    assert!(
        answered["error"]["message"].as_str().unwrap_or_default().contains("cannot relay roots/list"),
        "{answered}"
    );
    fx.assert_invariants();
}

#[test]
fn a_session_the_upstream_forgot_is_replaced_before_the_call_when_its_stream_gets_404() {
    let fx = Fx::new(437);
    let (app, tool) = app_with(&fx, "stream_note");
    let note = json!({"message": {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}});
    let r = last(&fx.call(&app.code, &tool, note.clone()));
    assert_eq!(result_text(&r), (false, "sent".into()));
    let first = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    fx.upstream.forget_sessions();
    let calls_before = upstream_calls(&fx, "tools/call").len();
    let r = last(&fx.call(&app.code, &tool, note));
    assert_eq!(result_text(&r), (false, "sent".into()), "the stream of the new session carried the message");
    let calls = upstream_calls(&fx, "tools/call");
    assert_eq!(calls.len(), calls_before + 1, "the call went once, on the new session, never on the forgotten one");
    let second = calls.last().and_then(|r| r.headers.get("mcp-session-id"));
    assert!(second.is_some() && second != first, "{first:?} {second:?}");
    let g: Vec<Option<String>> = gets(&fx.upstream).iter().map(|r| r.headers.get("mcp-session-id")).collect();
    assert_eq!(g, vec![first.clone(), first, second], "404 on the forgotten session, then the new one's");
    fx.assert_invariants();
}

#[test]
fn a_stream_held_by_the_callers_other_call_is_asked_for_again_once_that_call_ends() {
    use crate::runtime::Worker;
    use futures::StreamExt;
    let fx = Fx::new(438);
    let (app, tool) = app_with(&fx, "stream_note");
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}});
    // The same caller's second call starts while the first holds the session's stream.
    let second = request(
        Method::Post,
        &Fx::mcp_url(&app.code),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", V2025),
        ],
        Some(&call(&tool, json!({"message": log, "delayMs": 2_000}))),
    );
    let body: Rc<std::cell::RefCell<String>> = Rc::default();
    let out = body.clone();
    crate::runtime::spawn(async move {
        crate::runtime::sleep(200).await;
        #[allow(clippy::redundant_closure)] // `spawn` takes `impl Future`: it cannot be named as a function value.
        let ctx = crate::runtime::Context::new(Rc::new(|f: crate::runtime::Fut<'static, ()>| crate::runtime::spawn(f)));
        let resp = crate::shell::Flowgate.serve(second, crate::runtime::Env::current(), ctx).await;
        let mut stream = resp.into_parts().2.into_stream();
        while let Some(Ok(c)) = stream.next().await {
            out.borrow_mut().push_str(&String::from_utf8_lossy(&c));
        }
    });
    let first = last(&fx.call(&app.code, &tool, json!({"message": log, "delayMs": 1_000})));
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(result_text(&first), (false, "sent".into()));
    assert!(body.borrow().contains("\"text\":\"sent\""), "{}", body.borrow());
    // The first call's stream; the second's refused (409) at its start and twice shortly after,
    // then asked for again while it ran, once the first call had let it go.
    let g = gets(&fx.upstream);
    assert_eq!(g.len(), 5, "{:?}", g.iter().map(|r| r.headers.get("mcp-session-id")).collect::<Vec<_>>());
    assert!(g.iter().all(|r| r.headers.get("mcp-session-id") == g[0].headers.get("mcp-session-id")), "one session");
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn a_2026_07_28_clients_declared_capability_becomes_a_round_and_an_undeclared_one_is_refused_at_once() {
    use super::bridge::{call26, retry, round_of};
    let fx = Fx::new(439);
    let (app, tool) = app_with(&fx, "stream_ask");
    let ask = |caps: Value, extra: Value| {
        let mut e = extra;
        e["arguments"] = json!({"method": "roots/list"});
        last(&call26(&fx, &app.code, &tool, caps, "t", e))
    };
    // Declared roots: the call is bridged, and the request on the standalone stream is a round.
    let (key, request, state) = round_of(&ask(json!({"roots": {}}), json!({})));
    assert_eq!(request["method"], "roots/list");
    assert!(fx.upstream.answers.borrow().is_empty(), "nothing answered before the client");
    let roots = json!({"roots": [{"uri": "file:///work/project"}]});
    let done = ask(json!({"roots": {}}), retry(&key, roots.clone(), &state));
    let (is_error, text) = result_text(&done);
    assert!(!is_error && text.contains("file:///work/project"), "{done}");
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].0, json!({"jsonrpc": "2.0", "id": "up-stream-1", "result": roots}));
    // Declared sampling only: bridged too, and the roots request is refused at once, saying why.
    let started = fx.sim.now_ms();
    let v = ask(json!({"sampling": {}}), json!({}));
    assert!(fx.sim.now_ms() - started < 1_000, "at once");
    let (is_error, text) = result_text(&v);
    assert!(is_error && text.contains("refused"), "{v}");
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[1].0["id"], "up-stream-2");
    let m = answers[1].0["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("did not declare the roots capability"), "{m}");
    // One stream a call (the object's; the Worker opened none), and none left open.
    assert_eq!(gets(&fx.upstream).len(), 2, "one GET a call");
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}

#[test]
fn a_stream_the_upstream_keeps_closing_is_opened_again_twenty_times_and_no_more() {
    let fx = Fx::new(439);
    let (app, tool) = app_with(&fx, "stream_note");
    let up = fx.upstream.clone();
    // The upstream closes each standalone stream a tenth of a second after it opens, while a
    // call of 40 s runs: Flowgate opens it again after the default `retry` (1 s), 20 times.
    crate::runtime::spawn(async move {
        for _ in 0..400 {
            crate::runtime::sleep(100).await;
            let sessions: Vec<String> = gets(&up).iter().filter_map(|r| r.headers.get("mcp-session-id")).collect();
            for s in sessions {
                if let Some(feed) = up.standalone_stream(&s) {
                    feed.close();
                }
            }
        }
    });
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}});
    let r = fx.mcp(&app.code, &call(&tool, json!({"message": note, "delayMs": 40_000})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gets(&fx.upstream).len(), 1 + 20, "the first GET and MAX_REOPENS more");
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open());
    fx.assert_invariants();
}
