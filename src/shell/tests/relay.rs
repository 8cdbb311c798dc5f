//! The relay: a request an upstream sends while its tool runs (an elicitation) reaches the
//! client under a sealed ticket, and the client's answer reaches the upstream on the session
//! that asked; an answer by another caller, through another server, or with a forged or
//! altered ticket is refused and nothing reaches the upstream.

use std::cell::RefCell;
use std::rc::Rc;

use futures::StreamExt;
use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::runtime::{Context, Env, Method, Worker};

/// What a client reading a call's stream saw: every message of the call, and the answer
/// (status, body) to each message it posted meanwhile.
#[derive(Default)]
pub struct Seen {
    pub messages: Vec<Value>,
    pub posted: Vec<(u16, String)>,
}

/// Serves one request inside the simulation (as a second client connection would): status and body.
async fn serve(req: crate::runtime::Request) -> (u16, String) {
    #[allow(clippy::redundant_closure)] // `spawn` takes `impl Future`: it cannot be named as a function value.
    let ctx = Context::new(Rc::new(|f: crate::runtime::Fut<'static, ()>| crate::runtime::spawn(f)));
    let resp = crate::shell::Flowgate.serve(req, Env::current(), ctx).await;
    let (status, _, body) = resp.into_parts();
    let mut stream = body.into_stream();
    let mut bytes = Vec::new();
    while let Some(Ok(c)) = stream.next().await {
        bytes.extend_from_slice(&c);
    }
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Makes `call` (headers and body) as a client reading its event stream: each request the
/// stream brings is given to `answer`, whose messages (headers, body) are posted to `code`'s
/// endpoint at once, in order. Runs the simulation until all is done.
pub fn call_answering(
    fx: &Fx,
    code: &str,
    headers: Vec<(String, String)>,
    call: Value,
    answer: impl Fn(&Value) -> Vec<(Vec<(String, String)>, Value)> + 'static,
) -> Seen {
    let seen: Rc<RefCell<Seen>> = Rc::default();
    let out = seen.clone();
    let url = Fx::mcp_url(code);
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let req = request(Method::Post, &url, &h, Some(&call));
    crate::runtime::spawn(async move {
        #[allow(clippy::redundant_closure)]
        let ctx = Context::new(Rc::new(|f: crate::runtime::Fut<'static, ()>| crate::runtime::spawn(f)));
        let resp = crate::shell::Flowgate.serve(req, Env::current(), ctx).await;
        let (_, _, body) = resp.into_parts();
        let mut stream = body.into_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for data in crate::sim::invariants::sse_data(&event) {
                    let Ok(m) = serde_json::from_str::<Value>(&data) else { continue };
                    out.borrow_mut().messages.push(m.clone());
                    if m.get("method").is_none() || m.get("id").is_none() {
                        continue;
                    }
                    for (hs, body) in answer(&m) {
                        let h: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                        let r = serve(request(Method::Post, &url, &h, Some(&body))).await;
                        out.borrow_mut().posted.push(r);
                    }
                }
            }
        }
    });
    fx.sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    Rc::try_unwrap(seen).map(RefCell::into_inner).unwrap_or_default()
}

/// The headers of a 2025-11-25 client with `session` (and `auth`, a bearer).
pub fn client_headers(session: &str, auth: Option<&str>) -> Vec<(String, String)> {
    let mut h = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("accept".into(), "application/json, text/event-stream".into()),
        ("mcp-protocol-version".into(), V2025.into()),
        ("mcp-session-id".into(), session.into()),
    ];
    if let Some(a) = auth {
        h.push(("authorization".into(), format!("Bearer {a}")));
    }
    h
}

/// `initialize` declaring `capabilities`: Flowgate's session id.
pub fn initialize(fx: &Fx, code: &str, capabilities: Value, auth: Option<&str>) -> String {
    let bearer = auth.map(|a| format!("Bearer {a}"));
    let mut h = vec![];
    if let Some(b) = &bearer {
        h.push(("authorization", b.as_str()));
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": capabilities, "clientInfo": {"name": "relay-test", "version": "1"}}});
    let r = fx.mcp_with(code, &h, &init);
    let sid = r.headers.get("mcp-session-id").unwrap_or_default();
    assert!(sid.starts_with("fg-session."), "{} {:?}", r.text(), r.headers);
    sid
}

fn ask(tool: &str, question: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": tool, "arguments": {"question": question}}})
}

fn accept(ticket: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": ticket, "result": {"action": "accept", "content": {"ok": true}}})
}

/// The call's response: the last message with the call's id.
fn call_result(seen: &Seen) -> Value {
    seen.messages.iter().rev().find(|m| m["id"] == 21).cloned().unwrap_or(Value::Null)
}

/// The relayed requests the client got.
fn relayed(seen: &Seen) -> Vec<Value> {
    seen.messages.iter().filter(|m| m.get("method").is_some() && m.get("id").is_some()).cloned().collect()
}

#[test]
fn an_upstream_request_mid_call_reaches_the_client_and_its_answer_reaches_the_upstream() {
    let fx = Fx::new(400);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = client_headers(&sid, None);
    let h2 = headers.clone();
    let seen =
        call_answering(&fx, &app.code, headers, ask(&tool, "Ship it?"), move |m| vec![(h2.clone(), accept(&m["id"]))]);
    let asked = relayed(&seen);
    assert_eq!(asked.len(), 1, "{:?}", seen.messages);
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(asked[0]["params"]["message"], "Ship it?");
    let ticket = asked[0]["id"].as_str().unwrap_or_default();
    assert!(ticket.starts_with("fg-relay."), "{ticket}");
    assert!(!ticket.contains("up-ask") && !ticket.contains("sim-session"), "sealed: {ticket}");
    assert_eq!(seen.posted, vec![(202, String::new())]);
    // The upstream got the answer under its own id, on the session of the call.
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1);
    let (answer, session) = &answers[0];
    assert_eq!(answer["id"], "up-ask-1");
    assert_eq!(answer["result"], json!({"action": "accept", "content": {"ok": true}}));
    let call_session = upstream_calls(&fx, "tools/call").pop().and_then(|r| r.headers.get("mcp-session-id"));
    assert_eq!(session, &call_session);
    let (is_error, text) = result_text(&call_result(&seen));
    assert!(!is_error && text.starts_with("answered:") && text.contains("accept"), "{text}");
    fx.assert_invariants();
}

#[test]
fn a_client_that_cannot_answer_gets_nothing_and_the_upstream_gets_the_reason() {
    let fx = Fx::new(401);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    // No elicitation declared.
    let sid = initialize(&fx, &app.code, json!({}), None);
    let seen = call_answering(&fx, &app.code, client_headers(&sid, None), ask(&tool, "?"), |_| Vec::new());
    assert!(relayed(&seen).is_empty(), "{:?}", seen.messages);
    let answers = fx.upstream.answers.borrow().clone();
    assert_eq!(answers.len(), 1);
    let message = answers[0].0["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("did not declare the elicitation (form mode) capability"), "{message}");
    let (is_error, text) = result_text(&call_result(&seen));
    assert!(is_error && text.contains("refused"), "{text}");
    fx.assert_invariants();
}

#[test]
fn an_answer_by_another_caller_is_refused() {
    let fx = Fx::new(402);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let r = fx.console(Method::Put, &format!("/servers/{}/auth", app.server_id), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let key = |name: &str| {
        let r = fx.console(Method::Post, &format!("/servers/{}/keys", app.server_id), Some(&json!({"name": name})));
        assert_eq!(r.status, 201, "{}", r.text());
        let k = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
        fx.codes.borrow_mut().push(k.clone());
        k
    };
    let (alice, bob) = (key("alice"), key("bob"));
    let ab = format!("Bearer {alice}");
    let tool = tools(&fx, &app.code, &[("authorization", &ab)])
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .find(|n| n.ends_with("ask"))
        .unwrap_or_default();
    let caps = json!({"elicitation": {}});
    let sid_a = initialize(&fx, &app.code, caps.clone(), Some(&alice));
    let sid_b = initialize(&fx, &app.code, caps, Some(&bob));
    let (ha, hb) = (client_headers(&sid_a, Some(&alice)), client_headers(&sid_b, Some(&bob)));
    let seen = call_answering(&fx, &app.code, ha.clone(), ask(&tool, "Mine?"), move |m| {
        vec![(hb.clone(), accept(&m["id"])), (ha.clone(), accept(&m["id"]))]
    });
    assert_eq!(seen.posted.len(), 2, "{:?}", seen.posted);
    let (status, body) = &seen.posted[0];
    assert_eq!(*status, 400, "{body}");
    assert!(body.contains("Answer refused"), "{body}");
    assert_eq!(seen.posted[1].0, 202, "the caller's own answer is taken");
    assert_eq!(fx.upstream.answers.borrow().len(), 1, "only the caller's answer reached the upstream");
    assert!(!result_text(&call_result(&seen)).0);
    fx.assert_invariants();
}

#[test]
fn an_answer_through_another_server_with_the_same_app_is_refused() {
    let fx = Fx::new(404);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    // A second server over the very same app: the same upstream, the same caller.
    let (_, other) = fx.server("Both", &[&app.app_id]);
    let tool = tool_named(&fx, &app.code, "ask");
    let caps = json!({"elicitation": {}});
    let sid = initialize(&fx, &app.code, caps.clone(), None);
    let sid_other = initialize(&fx, &other, caps, None);
    let (h, h_other) = (client_headers(&sid, None), client_headers(&sid_other, None));
    let seen =
        call_answering(&fx, &app.code, h.clone(), ask(&tool, "Here?"), move |m| vec![(h.clone(), accept(&m["id"]))]);
    let ticket = relayed(&seen).first().map(|m| m["id"].clone()).unwrap_or_default();
    assert_eq!(seen.posted, vec![(202, String::new())]);
    let hs: Vec<(&str, &str)> = h_other.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(&other), &hs, Some(&accept(&ticket))));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("Answer refused: the request was relayed through another MCP server"), "{}", r.text());
    assert_eq!(fx.upstream.answers.borrow().len(), 1, "nothing more reached the upstream");
    fx.assert_invariants();
}

/// `ticket` with one character of its sealed part changed.
fn altered(ticket: &str) -> String {
    let mut chars: Vec<char> = ticket.chars().collect();
    let i = chars.len() - 10;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[test]
fn a_forged_or_altered_ticket_is_refused_and_reaches_nothing() {
    let fx = Fx::new(403);
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), json!({}));
    let tool = tool_named(&fx, &app.code, "ask");
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let headers = client_headers(&sid, None);
    let h2 = headers.clone();
    let seen = call_answering(&fx, &app.code, headers, ask(&tool, "?"), move |m| {
        let t = m["id"].as_str().unwrap_or_default();
        vec![
            (h2.clone(), accept(&json!(altered(t)))),
            (h2.clone(), accept(&json!(format!("fg-relay.{}", "A".repeat(120))))),
            (h2.clone(), accept(&json!(t[..t.len() - 4]))),
            (h2.clone(), accept(&m["id"])),
        ]
    });
    let statuses: Vec<u16> = seen.posted.iter().map(|p| p.0).collect();
    assert_eq!(statuses, [400, 400, 400, 202], "{:?}", seen.posted);
    for (_, body) in &seen.posted[..3] {
        let v: Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(v["error"]["code"], -32600, "{body}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.starts_with("Answer refused")), "{body}");
    }
    assert_eq!(fx.upstream.answers.borrow().len(), 1, "only the genuine ticket reached the upstream");
    fx.assert_invariants();
}

#[test]
fn an_answer_with_other_forwarded_credentials_is_refused() {
    let fx = Fx::new(405);
    let backend = json!({"forward_headers": {"X-Upstream-Key": "X-Client-Key"}});
    fx.upstream.asks.set(true);
    let app = upstream_app(&fx, "Asker", &format!("{UPSTREAM}/mcp"), backend);
    let with_key = |h: &[(String, String)], key: &str| {
        let mut h = h.to_vec();
        h.push(("x-client-key".into(), key.into()));
        h
    };
    let tool = tools(&fx, &app.code, &[("x-client-key", "key-a")])
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .find(|n| n.ends_with("ask"))
        .unwrap_or_default();
    let sid = initialize(&fx, &app.code, json!({"elicitation": {}}), None);
    let (ha, hb) = (with_key(&client_headers(&sid, None), "key-a"), with_key(&client_headers(&sid, None), "key-b"));
    let seen = call_answering(&fx, &app.code, ha.clone(), ask(&tool, "?"), move |m| {
        vec![(hb.clone(), accept(&m["id"])), (ha.clone(), accept(&m["id"]))]
    });
    let statuses: Vec<u16> = seen.posted.iter().map(|p| p.0).collect();
    assert_eq!(statuses, [400, 202], "{:?}", seen.posted);
    assert!(seen.posted[0].1.contains("with the same forwarded credentials"), "{}", seen.posted[0].1);
    assert_eq!(fx.upstream.answers.borrow().len(), 1);
    // The upstream got the call's own credential with the answer, never the other one.
    let answer_post = fx
        .upstream
        .requests
        .borrow()
        .iter()
        .rev()
        .find(|r| r.json().is_some_and(|m| m.get("result").is_some()))
        .cloned();
    assert_eq!(answer_post.and_then(|r| r.headers.get("x-upstream-key")).as_deref(), Some("key-a"));
    fx.assert_invariants();
}
