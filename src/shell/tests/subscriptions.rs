//! Clients that stay: a 2025 client that opens its session's standalone `GET` stream gets
//! `resources/subscribe` (forwarded to the upstream that owns the URI, on the caller's session),
//! the upstream's `notifications/resources/updated` for what it subscribed to and every list
//! change (from a session of the object's own with the upstream, once each, the cached lists
//! dropped first), from the `ClientSession` object that holds the streams; without the stream,
//! subscribe is refused saying to open it; the stream's close and the idle bound end the
//! upstream's streams (and the object's own session) and forget the subscriptions; nothing of one
//! session reaches another.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::StreamExt;
use serde_json::{json, Value};

use super::upstream_apps::*;
use super::*;
use crate::pure::mcp::client_session::IDLE_MS;
use crate::runtime::{Context, Env, Method, Worker};

/// A subscribable upstream app published alone.
fn app(fx: &Fx) -> UpApp {
    fx.upstream.standalone.set(true);
    fx.upstream.resources.set(true);
    upstream_app(fx, "Watcher", &format!("{UPSTREAM}/mcp"), json!({}))
}

/// `initialize` as a 2025-11-25 client with user agent `agent`: the result and the session id.
fn initialize(fx: &Fx, code: &str, agent: &str) -> (Value, String) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "sub-test", "version": "1"}}});
    let r = fx.mcp_with(code, &[("user-agent", agent)], &init);
    let sid = r.headers.get("mcp-session-id").unwrap_or_default();
    assert!(sid.starts_with("fg-session."), "{} {:?}", r.text(), r.headers);
    (last(&r), sid)
}

/// What a client sends besides what `rpc_with` sets: its session id and user agent.
fn headers(sid: &str, agent: &str) -> Vec<(String, String)> {
    vec![("mcp-session-id".into(), sid.into()), ("user-agent".into(), agent.into())]
}

fn rpc(fx: &Fx, code: &str, h: &[(String, String)], method: &str, uri: &str) -> Value {
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    rpc_with(fx, code, &h, method, json!({"uri": uri}))
}

/// A client's `GET` stream, read as it comes.
struct Stream {
    status: Rc<Cell<u16>>,
    messages: Rc<RefCell<Vec<Value>>>,
    ended: Rc<Cell<bool>>,
    close: Option<futures::channel::oneshot::Sender<()>>,
}

impl Stream {
    fn methods(&self) -> Vec<String> {
        self.messages.borrow().iter().map(|m| m["method"].as_str().unwrap_or("").to_string()).collect()
    }
    fn updates(&self) -> Vec<String> {
        let m = self.messages.borrow();
        m.iter()
            .filter(|m| m["method"] == "notifications/resources/updated")
            .map(|m| m["params"]["uri"].to_string())
            .collect()
    }
    /// The client goes away.
    fn close(&mut self) {
        if let Some(c) = self.close.take() {
            let _ = c.send(());
        }
    }
}

fn open(fx: &Fx, code: &str, sid: &str, agent: &str) -> Stream {
    let url = Fx::mcp_url(code);
    let h = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", V2025),
        ("user-agent", agent),
    ];
    let req = request(Method::Get, &url, &h, None);
    let s = Stream { status: Rc::default(), messages: Rc::default(), ended: Rc::default(), close: None };
    let (tx, mut rx) = futures::channel::oneshot::channel::<()>();
    let (status, out, ended) = (s.status.clone(), s.messages.clone(), s.ended.clone());
    crate::runtime::spawn(async move {
        let ctx = Context::new(Rc::new(crate::runtime::spawn));
        let resp = crate::shell::Flowgate.serve(req, Env::current(), ctx).await;
        let (code, _, body) = resp.into_parts();
        status.set(code);
        let mut stream = body.into_stream();
        let mut buf = String::new();
        loop {
            let next = stream.next();
            futures::pin_mut!(next);
            match futures::future::select(next, &mut rx).await {
                futures::future::Either::Left((Some(Ok(chunk)), _)) => {
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    while let Some(end) = buf.find("\n\n") {
                        let event: String = buf.drain(..end + 2).collect();
                        for data in crate::sim::invariants::sse_data(&event) {
                            if let Ok(m) = serde_json::from_str::<Value>(&data) {
                                out.borrow_mut().push(m);
                            }
                        }
                    }
                }
                futures::future::Either::Left(_) => break,
                // The client went away: its end of the stream is dropped.
                futures::future::Either::Right(_) => break,
            }
        }
        ended.set(true);
    });
    let mut s = s;
    s.close = Some(tx);
    fx.sim.advance(200).unwrap_or_else(|h| panic!("{h}"));
    s
}

fn updated(uri: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
}

const AGENT: &str = "sub-test/1";

#[test]
fn a_client_that_stays_gets_updates_of_what_it_subscribed_to_and_the_list_changes() {
    let fx = Fx::new(470);
    let app = app(&fx);
    let (init, sid) = initialize(&fx, &app.code, AGENT);
    let caps = &init["result"]["capabilities"];
    assert_eq!(caps["resources"], json!({"subscribe": true, "listChanged": true}), "{init}");
    assert_eq!(caps["tools"]["listChanged"], true, "the upstream tells its list changes: {init}");
    let h = headers(&sid, AGENT);
    let stream = open(&fx, &app.code, &sid, AGENT);
    assert_eq!(stream.status.get(), 200);
    assert_eq!(fx.upstream.standalone_count(), 1, "the object's own session, for list changes");

    let r = rpc(&fx, &app.code, &h, "resources/subscribe", "sim://watched");
    assert_eq!(r["result"], json!({}), "{r}");
    let subscribed = fx.upstream.subscribed();
    assert_eq!(subscribed.len(), 1, "forwarded to the upstream: {subscribed:?}");
    assert_eq!(subscribed[0].1, "sim://watched");
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(fx.upstream.standalone_count(), 2, "the object holds the caller's upstream session's stream too");
    let caller_stream = fx.upstream.standalone_stream(&subscribed[0].0);
    assert!(caller_stream.is_some(), "on the session the subscription went on");
    drop(caller_stream);

    fx.upstream.send_on_standalone(&updated("sim://watched"));
    fx.upstream.send_on_standalone(&updated("sim://other"));
    fx.upstream.send_on_standalone(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    fx.upstream.send_on_standalone(
        &json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}),
    );
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(stream.updates(), vec!["\"sim://watched\""], "{:?}", stream.messages.borrow());
    let changes = stream.methods().iter().filter(|m| *m == "notifications/tools/list_changed").count();
    assert_eq!(changes, 1, "once, though both streams carried it: {:?}", stream.methods());
    assert!(!stream.methods().contains(&"notifications/message".to_string()), "logs have no call to go with");

    let r = rpc(&fx, &app.code, &h, "resources/unsubscribe", "sim://watched");
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(fx.upstream.subscribed().is_empty());
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(fx.upstream.standalone_count(), 1, "the last subscription gone, the caller's stream is let go");
    assert!(!stream.ended.get(), "the client's stream stays");
    assert_eq!(fx.upstream.send_on_standalone(&updated("sim://watched")), 1);
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(stream.updates().len(), 1, "no update of the object's own session is the client's");
}

/// The upstream's requests of JSON-RPC `method` so far.
fn asked(fx: &Fx, method: &str) -> usize {
    fx.upstream.requests.borrow().iter().filter(|r| r.json().is_some_and(|m| m["method"] == method)).count()
}

#[test]
fn a_client_that_stays_gets_the_list_changes_without_subscribing_and_reads_the_lists_again() {
    let fx = Fx::new(477);
    let app = app(&fx);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": {"roots": {}}, "clientInfo": {"name": "sub-test", "version": "1"}}});
    let r = fx.mcp_with(&app.code, &[("user-agent", AGENT)], &init);
    let sid = r.headers.get("mcp-session-id").unwrap_or_default();
    let h: Vec<(&str, &str)> = vec![("mcp-session-id", &sid), ("user-agent", AGENT)];
    let list = |method: &str| rpc_with(&fx, &app.code, &h, method, json!({}));
    // The lists are read once, then served from the cache.
    assert!(list("tools/list")["result"]["tools"].is_array());
    assert!(list("resources/list")["result"]["resources"].is_array());
    let (tools_read, resources_read) = (asked(&fx, "tools/list"), asked(&fx, "resources/list"));
    list("tools/list");
    list("resources/list");
    assert_eq!((asked(&fx, "tools/list"), asked(&fx, "resources/list")), (tools_read, resources_read), "cached");

    let inits = fx.upstream.initialized_with.borrow().len();
    let stream = open(&fx, &app.code, &sid, AGENT);
    assert_eq!(fx.upstream.standalone_count(), 1, "a session of the object's own, its stream held");
    let own = fx.upstream.initialized_with.borrow()[inits..].to_vec();
    assert_eq!(own, vec![json!({"roots": {}})], "opened declaring what the client declared");
    assert!(fx.upstream.subscribed().is_empty(), "no subscription needed");

    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    assert_eq!(fx.upstream.send_on_standalone(&changed), 1);
    fx.upstream.send_on_standalone(&json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(
        stream.methods(),
        vec!["notifications/tools/list_changed", "notifications/resources/list_changed"],
        "{:?}",
        stream.messages.borrow()
    );
    // What the client reads next comes from the upstream, not the cache of before the change.
    list("tools/list");
    list("resources/list");
    assert_eq!((asked(&fx, "tools/list"), asked(&fx, "resources/list")), (tools_read + 1, resources_read + 1));

    // A request on the object's session waits for nothing: no call runs to ask.
    let answers = fx.upstream.answers.borrow().len();
    fx.upstream.send_on_standalone(&json!({"jsonrpc": "2.0", "id": "up-q-1", "method": "roots/list"}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    let refused = fx.upstream.answers.borrow()[answers..].to_vec();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0["error"]["code"], -32601, "{refused:?}");
    assert_eq!(stream.methods().len(), 2, "nothing of it reaches the client");
}

#[test]
fn a_client_that_does_not_stay_keeps_the_stateless_answers() {
    let fx = Fx::new(478);
    let app = app(&fx);
    let (_, sid) = initialize(&fx, &app.code, AGENT);
    let h: Vec<(&str, &str)> = vec![("mcp-session-id", &sid), ("user-agent", AGENT)];
    let inits = fx.upstream.initialized_with.borrow().len();
    let r = rpc_with(&fx, &app.code, &h, "tools/list", json!({}));
    assert!(r["result"]["tools"].is_array(), "{r}");
    assert_eq!(
        fx.upstream.send_on_standalone(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})),
        0
    );
    assert_eq!(fx.upstream.standalone_count(), 0, "no stream is held for a client that does not stay");
    assert!(fx.upstream.initialized_with.borrow().len() <= inits + 1, "no session of an object's own");
    // A 2026-07-28 client is told of no list changes: it has no stream to get them on.
    let r = fx.sim.request(request(
        Method::Post,
        &Fx::mcp_url(&app.code),
        &[("content-type", "application/json"), ("accept", "application/json, text/event-stream"), ("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")],
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})),
    ));
    let caps = last(&r)["result"]["capabilities"].clone();
    assert_eq!(caps["tools"]["listChanged"], false, "{}", r.text());
}

#[test]
fn a_call_gets_the_upstreams_stream_while_no_subscription_holds_it() {
    let fx = Fx::new(476);
    let app = app(&fx);
    let (_, sid) = initialize(&fx, &app.code, AGENT);
    let h = headers(&sid, AGENT);
    let _stream = open(&fx, &app.code, &sid, AGENT);
    let tool = tool_named(&fx, &app.code, "stream_note");
    // A log on the session's standalone stream during the call: relayed on the call's answer
    // when the call holds that stream.
    let logged = || {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "on the stream"}});
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": {"message": note, "delayMs": 200}}});
        let r = fx.mcp_with(&app.code, &[("mcp-session-id", &sid), ("user-agent", AGENT)], &call);
        assert_eq!(result_text(&last(&r)), (false, "sent".to_string()), "{}", r.text());
        messages(&r).iter().any(|m| m["params"]["data"] == "on the stream")
    };
    assert!(logged(), "no subscription: the call holds the upstream's stream");
    assert_eq!(rpc(&fx, &app.code, &h, "resources/subscribe", "sim://watched")["result"], json!({}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert!(!logged(), "a subscription holds it: the call goes on without it (the documented limit)");
    assert_eq!(rpc(&fx, &app.code, &h, "resources/unsubscribe", "sim://watched")["result"], json!({}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert!(logged(), "unsubscribed: the call has it again");
}

#[test]
fn without_the_stream_subscribe_is_refused_saying_to_open_it_and_nothing_goes_upstream() {
    let fx = Fx::new(471);
    let app = app(&fx);
    let (_, sid) = initialize(&fx, &app.code, AGENT);
    let r = rpc(&fx, &app.code, &headers(&sid, AGENT), "resources/subscribe", "sim://watched");
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("open this session's stream first"), "{r}");
    // Without a session id at all.
    let h: Vec<(String, String)> = headers(&sid, AGENT).into_iter().filter(|(k, _)| k != "mcp-session-id").collect();
    let r = rpc(&fx, &app.code, &h, "resources/subscribe", "sim://watched");
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("Mcp-Session-Id"), "{r}");
    assert!(fx.upstream.subscribed().is_empty());
    let asked = fx.upstream.requests.borrow().iter().any(|q| q.body.contains("resources/subscribe"));
    assert!(!asked, "nothing reached the upstream");
    // A 2026-07-28 client has no session: still the stateless answer (and no GET stream).
    let r = fx.sim.request(request(
        Method::Get,
        &Fx::mcp_url(&app.code),
        &[("accept", "text/event-stream"), ("mcp-session-id", &sid), ("mcp-protocol-version", "2026-07-28")],
        None,
    ));
    assert_eq!(r.status, 405);
}

#[test]
fn the_stream_closing_ends_the_upstream_stream_and_forgets_the_subscriptions() {
    let fx = Fx::new(472);
    let app = app(&fx);
    let (_, sid) = initialize(&fx, &app.code, AGENT);
    let h = headers(&sid, AGENT);
    let mut stream = open(&fx, &app.code, &sid, AGENT);
    assert_eq!(rpc(&fx, &app.code, &h, "resources/subscribe", "sim://watched")["result"], json!({}));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(fx.upstream.standalone_count(), 2);
    let deletes = || fx.upstream.requests.borrow().iter().filter(|r| r.method == Method::Delete).count();
    let before = deletes();
    stream.close();
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert!(!fx.upstream.standalone_open(), "the upstream's streams end with the client's");
    assert_eq!(deletes(), before + 1, "the object's own session is ended");
    // A new stream: the subscription was forgotten with the one before.
    let again = open(&fx, &app.code, &sid, AGENT);
    fx.upstream.send_on_standalone(&updated("sim://watched"));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert!(again.updates().is_empty(), "{:?}", again.messages.borrow());
}

#[test]
fn the_idle_bound_ends_the_streams() {
    let fx = Fx::new(473);
    let app = app(&fx);
    let (_, sid) = initialize(&fx, &app.code, AGENT);
    let stream = open(&fx, &app.code, &sid, AGENT);
    let r = rpc(&fx, &app.code, &headers(&sid, AGENT), "resources/subscribe", "sim://watched");
    assert_eq!(r["result"], json!({}), "{r}");
    fx.sim.advance(IDLE_MS / 2).unwrap_or_else(|h| panic!("{h}"));
    assert!(!stream.ended.get(), "keep-alives are not use, but half the bound is not over");
    fx.sim.advance(IDLE_MS).unwrap_or_else(|h| panic!("{h}"));
    assert!(stream.ended.get(), "the client's stream ends after the idle bound");
    assert!(!fx.upstream.standalone_open(), "and the upstream's with it");
}

#[test]
fn nothing_of_one_session_reaches_another() {
    let fx = Fx::new(474);
    let app = app(&fx);
    let (_, alice) = initialize(&fx, &app.code, AGENT);
    let (_, bob) = initialize(&fx, &app.code, AGENT);
    let a = open(&fx, &app.code, &alice, AGENT);
    let b = open(&fx, &app.code, &bob, AGENT);
    assert_eq!(
        rpc(&fx, &app.code, &headers(&alice, AGENT), "resources/subscribe", "sim://watched")["result"],
        json!({})
    );
    fx.upstream.send_on_standalone(&updated("sim://watched"));
    fx.sim.advance(100).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(a.updates().len(), 1, "{:?}", a.messages.borrow());
    assert!(b.updates().is_empty(), "bob subscribed to nothing: {:?}", b.messages.borrow());
}

/// A client key of a new key of server `server_id`, in key mode.
fn key(fx: &Fx, server_id: &str, name: &str) -> String {
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": name})));
    assert_eq!(r.status, 201, "{}", r.text());
    let key = r.json().and_then(|v| v["key"].as_str().map(str::to_string)).unwrap_or_default();
    fx.codes.borrow_mut().push(key.clone());
    format!("Bearer {key}")
}

#[test]
fn another_caller_presenting_a_session_id_cannot_use_its_stream() {
    let fx = Fx::new(475);
    let app = app(&fx);
    let r = fx.console(Method::Put, &format!("/servers/{}/auth", app.server_id), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let (alice, bob) = (key(&fx, &app.server_id, "alice"), key(&fx, &app.server_id, "bob"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "sub-test", "version": "1"}}});
    let sid =
        fx.mcp_with(&app.code, &[("authorization", &alice)], &init).headers.get("mcp-session-id").unwrap_or_default();
    let url = Fx::mcp_url(&app.code);
    let get = |who: &str| {
        let h = [
            ("accept", "text/event-stream"),
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", V2025),
            ("authorization", who),
        ];
        request(Method::Get, &url, &h, None)
    };
    // Alice's stream, read in the background.
    let held = Rc::new(Cell::new(0u16));
    let (status, req) = (held.clone(), get(&alice));
    crate::runtime::spawn(async move {
        let ctx = Context::new(Rc::new(crate::runtime::spawn));
        let resp = crate::shell::Flowgate.serve(req, Env::current(), ctx).await;
        let (code, _, body) = resp.into_parts();
        status.set(code);
        let mut stream = body.into_stream();
        while let Some(Ok(_)) = stream.next().await {}
    });
    fx.sim.advance(200).unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(held.get(), 200);
    let sub = |who: &str| {
        rpc_with(
            &fx,
            &app.code,
            &[("mcp-session-id", &sid), ("authorization", who)],
            "resources/subscribe",
            json!({"uri": "sim://watched"}),
        )
    };
    let r = sub(&bob);
    assert!(r.get("error").is_some(), "bob cannot subscribe on alice's stream: {r}");
    assert!(fx.upstream.subscribed().is_empty());
    let r = fx.sim.request(get(&bob));
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(sub(&alice)["result"], json!({}));
}

#[test]
fn list_changes_are_declared_only_where_an_upstreams_session_has_a_stream_to_tell_them_on() {
    let fx = Fx::new(479);
    let legacy = Rc::new(crate::sim::backends::mcp::McpUpstream::new(true, false).legacy_only(None));
    legacy.resources.set(true);
    fx.sim.add_backend("https://legacy.test", legacy.clone());
    let old = upstream_app(&fx, "Old", "https://legacy.test/sse", json!({}));
    let (init, _) = initialize(&fx, &old.code, AGENT);
    let caps = &init["result"]["capabilities"];
    assert_eq!(caps["tools"]["listChanged"], false, "the legacy transport has no stream Flowgate holds: {init}");
    assert_eq!(caps["resources"], json!({"subscribe": true, "listChanged": false}), "{init}");
    let new = app(&fx);
    let (init, _) = initialize(&fx, &new.code, AGENT);
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true, "{init}");
}
