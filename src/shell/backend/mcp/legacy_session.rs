//! Legacy HTTP+SSE sessions kept across requests: one `LegacySession` Durable Object per app
//! and session scope (`pure::backend::mcp::legacy_session::object_name`) holds the upstream's
//! event stream and the endpoint it announced. Requests of any isolate go to the object, which
//! posts them to the endpoint and streams back, as lines (`Line`), what belongs to each: its
//! progress and logs, requests of the upstream's while it is the only call, its response. What
//! belongs to no call is answered at once (`Calls::route`). The session ends after
//! `IDLE_MS` without a call (the object's alarm), when the upstream ends the stream, or with the
//! object; a request that finds it gone opens a new one. Nothing is stored: the stream lives in
//! the instance's memory only.
//!
//! The isolate's side (`open`, `request`) says `Unavailable` when the object cannot be reached
//! (no binding, or it failed): the client then opens a session of its own for the request.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::time::Duration;

use crate::json;
use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use serde_json::Value;

use crate::runtime::{Abort, ByteStream, Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Request, Response};

use crate::pure::backend::mcp::legacy_session::{
    is_idle, Calls, Line, LineReader, Route, StreamEvent, StreamReader, IDLE_MS,
};
use crate::pure::backend::mcp::legacy_sse::resolve_endpoint;
use crate::pure::backend::mcp::session::{
    check_pinned, initialize_offering, initialized_notification, parse_initialize, request_headers, Session,
    OFFERED_VERSION,
};
use crate::pure::backend::mcp::transport::{init_failure_message, InitFailure, Transport};
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::protocol::version::Version;

use crate::shell::outbound::{self, Deadline, SendError};

/// How long a message post to the endpoint may take (it is answered 202 at once by servers).
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// A session the object holds, as the isolate uses it.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The object's name.
    pub object: String,
    pub session: Session,
    /// Where messages of the session go (answers to relayed requests, cancellations).
    pub endpoint: String,
}

/// Why a request through the object did not end in an answer.
pub enum Failure {
    /// The object is not bound or failed: the request may still go on a session of its own.
    Unavailable(String),
    /// The upstream (or the session with it) failed; the words say how.
    Upstream(String),
}

/// What the object needs to reach the upstream for one request.
pub struct Reach<'a> {
    pub app: &'a str,
    pub sse_url: &'a str,
    /// The request's headers: static, OAuth and forwarded (no session headers yet).
    pub headers: &'a Headers,
    pub protocol: Option<Version>,
    pub init_timeout: Duration,
    /// What the calling client declared: the object's session tells the upstream the same.
    pub declared: Variant,
}

impl Reach<'_> {
    fn body(&self, message: Option<&Value>, timeout: Duration) -> Value {
        let headers: Vec<Value> = self.headers.iter().map(|(k, v)| json!([k, v])).collect();
        json!({
            "app": self.app, "url": self.sse_url, "headers": headers,
            "protocol": self.protocol.map(Version::as_str),
            "declared": self.declared.key(),
            "init_timeout_ms": self.init_timeout.as_millis() as u64,
            "timeout_ms": timeout.as_millis() as u64,
            "message": message,
        })
    }
}

async fn ask_object(env: &Env, object: &str, path: &str, body: &Value) -> Result<Response, Failure> {
    let req = Request::post(&format!("https://legacy-session{path}"), body.to_string());
    match env.runtime().object_fetch(crate::shell::platform::LEGACY_SESSIONS, object, req).await {
        Ok(r) if r.status_code() == 200 => Ok(r),
        Ok(r) => {
            let status = r.status_code();
            let text = r.text().await.unwrap_or_default();
            Err(Failure::Unavailable(format!("the session object answered HTTP {status}: {text}")))
        }
        Err(e) => Err(Failure::Unavailable(format!("the session object could not be reached: {e}"))),
    }
}

/// The session the object holds for `object`, opened now if it has none.
pub async fn open(env: &Env, object: &str, reach: &Reach<'_>) -> Result<Opened, Failure> {
    let resp = ask_object(env, object, "/open", &reach.body(None, reach.init_timeout)).await?;
    let text = resp.text().await.map_err(|e| Failure::Unavailable(format!("the session object's answer: {e}")))?;
    let mut lines = LineReader::default();
    match lines.feed(format!("{text}\n").as_bytes()).map_err(Failure::Unavailable)?.pop() {
        Some(Line::Opened { session, endpoint, new, ended, .. }) => {
            if new {
                said_new(reach.app, ended);
            }
            Ok(Opened {
                object: object.to_string(),
                session: crate::pure::fields::read(session).map_err(Failure::Unavailable)?,
                endpoint,
            })
        }
        Some(Line::Failed(why)) => Err(Failure::Upstream(why)),
        _ => Err(Failure::Unavailable("the session object answered nothing Flowgate reads".into())),
    }
}

/// One request on the object's session: what belongs to it goes to `on_note` as it comes, and
/// `live` and `sent_as` are set to the session and endpoint it went on and the id it went
/// upstream under before any of it; the response.
#[allow(clippy::too_many_arguments)]
pub async fn request(
    env: &Env,
    opened: &mut Opened,
    reach: &Reach<'_>,
    message: &Value,
    timeout: Duration,
    live: &RefCell<Option<(Session, String)>>,
    sent_as: &mut u64,
    on_note: &mut dyn FnMut(Value),
) -> Result<Value, Failure> {
    let resp = ask_object(env, &opened.object, "/call", &reach.body(Some(message), timeout)).await?;
    let mut stream = resp.into_parts().2.into_stream();
    let mut lines = LineReader::default();
    // The object bounds the call by `timeout`; this is the backstop if it goes silent.
    let mut deadline = Deadline::after(timeout + Duration::from_secs(5));
    let mut id = 0;
    loop {
        let chunk = deadline.next_chunk(&mut stream).await.map_err(|e| {
            let e = format!("upstream {}: the session's answer ended early ({e})", reach.app);
            if id == 0 {
                Failure::Unavailable(e)
            } else {
                Failure::Upstream(e)
            }
        })?;
        for line in lines.feed(&chunk).map_err(Failure::Unavailable)? {
            match line {
                Line::Opened { session, endpoint, id: upstream_id, new, ended } => {
                    opened.session = crate::pure::fields::read(session).map_err(Failure::Unavailable)?;
                    opened.endpoint = endpoint;
                    id = upstream_id;
                    *sent_as = upstream_id;
                    *live.borrow_mut() = Some((opened.session.clone(), opened.endpoint.clone()));
                    if new {
                        said_new(reach.app, ended);
                    }
                }
                Line::Message(m) => on_note(m),
                Line::Response(r) => return Ok(r),
                Line::Failed(why) => return Err(Failure::Upstream(why)),
            }
        }
    }
}

/// The log line of a request that went on a new session: state the upstream kept for the
/// caller in the one before (when there was one, it says why it ended) is gone.
fn said_new(app: &str, ended: Option<String>) {
    crate::shell::log::info(
        "the call went on a new legacy SSE session with its upstream",
        json!({"app": app, "earlier_session_ended": ended}),
    );
}

/// The Durable Object class of a legacy session (bound as `LEGACY_SESSIONS`, class
/// `LegacySession`).
pub struct LegacySession {
    storage: Rc<dyn ObjectStorage>,
    env: Env,
    inner: Rc<Inner>,
}

/// The live session, shared with the task that reads its stream.
struct Live {
    session: Session,
    endpoint: String,
    /// The headers of the latest request (credentials), for what the object posts itself.
    headers: Headers,
    app: String,
    /// Which opening this is: a reader of an older stream changes nothing.
    generation: u64,
    stop: Box<dyn Abort>,
    reader: futures::future::AbortHandle,
}

#[derive(Default)]
struct Inner {
    calls: RefCell<Calls>,
    waiting: RefCell<BTreeMap<u64, UnboundedSender<Line>>>,
    live: RefCell<Option<Live>>,
    opening: Cell<bool>,
    generation: Cell<u64>,
    last_used_ms: Cell<u64>,
    /// Why the last session ended, for the next call to say.
    ended: RefCell<Option<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(live) = self.live.borrow_mut().take() {
            live.reader.abort();
            live.stop.abort();
        }
    }
}

impl Inner {
    /// Ends the live session of `generation` (if it still is), telling every call in flight.
    fn end(&self, generation: u64, why: &str) {
        let live = self.live.borrow_mut().take_if(|l| l.generation == generation);
        let Some(live) = live else { return };
        live.reader.abort();
        live.stop.abort();
        crate::shell::log::info("a legacy SSE session with an upstream ended", json!({"app": live.app, "why": why}));
        *self.ended.borrow_mut() = Some(why.to_string());
        let failed = format!("upstream {}: {why} before answering", live.app);
        for (id, tx) in std::mem::take(&mut *self.waiting.borrow_mut()) {
            let _ = tx.unbounded_send(Line::Failed(failed.clone()));
            self.calls.borrow_mut().end(id);
        }
    }

    /// One message of the stream, where it belongs; what the object answers itself is
    /// returned for posting.
    fn dispatch(&self, message: Value) -> Option<Value> {
        let route = self.calls.borrow().route(&message);
        match route {
            Route::To(id, m) => {
                let sent = self
                    .waiting
                    .borrow()
                    .get(&id)
                    .is_some_and(|tx| tx.unbounded_send(Line::Message(m.clone())).is_ok());
                // The call's caller went away just now: a request of the upstream's still
                // gets its answer.
                if !sent && m.get("id").is_some() {
                    let why = crate::pure::backend::mcp::legacy_session::no_call(m["method"].as_str().unwrap_or(""));
                    return Some(crate::pure::backend::mcp::legacy_session::refusal(&m, &why));
                }
                None
            }
            Route::Done(id, r) => {
                if let Some(tx) = self.waiting.borrow_mut().remove(&id) {
                    let _ = tx.unbounded_send(Line::Response(r));
                }
                self.calls.borrow_mut().end(id);
                None
            }
            Route::Answer(a) => Some(a),
            Route::Drop => None,
        }
    }

    fn forget_call(&self, id: u64) {
        self.waiting.borrow_mut().remove(&id);
        self.calls.borrow_mut().end(id);
        self.last_used_ms.set(crate::shell::platform::now_ms());
    }
}

/// One request to the object, read from its JSON.
struct Asked {
    app: String,
    url: String,
    headers: Headers,
    protocol: Option<Version>,
    declared: Variant,
    init_timeout: Duration,
    timeout: Duration,
    message: Option<Value>,
}

impl Asked {
    fn read(v: &Value) -> Result<Asked, String> {
        let mut headers = Headers::new();
        for pair in v["headers"].as_array().into_iter().flatten() {
            let (Some(k), Some(val)) = (pair[0].as_str(), pair[1].as_str()) else { continue };
            headers.try_set(k, val).map_err(|e| format!("a header for the upstream cannot be set: {e}"))?;
        }
        let ms = |k: &str| Duration::from_millis(v[k].as_u64().unwrap_or(60_000));
        Ok(Asked {
            app: v["app"].as_str().unwrap_or("app").to_string(),
            url: v["url"].as_str().ok_or("no upstream URL")?.to_string(),
            headers,
            protocol: v["protocol"].as_str().and_then(Version::parse),
            declared: v["declared"].as_str().map_or(Variant::none(), Variant::parse),
            init_timeout: ms("init_timeout_ms"),
            timeout: ms("timeout_ms"),
            message: v.get("message").filter(|m| m.is_object()).cloned(),
        })
    }
}

impl ObjectHandler for LegacySession {
    fn fetch(&self, req: Request) -> Fut<'_, Response> {
        Box::pin(async move {
            self.answer(req)
                .await
                .unwrap_or_else(|e| Response::text_with_status(format!("the legacy session failed: {e}"), 500))
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(async move {
            let now = crate::shell::platform::now_ms();
            let generation = self.inner.live.borrow().as_ref().map(|l| l.generation);
            let Some(generation) = generation else { return Ok(()) };
            if self.inner.calls.borrow().in_flight() == 0 && is_idle(self.inner.last_used_ms.get(), now, IDLE_MS) {
                self.inner.end(generation, &format!("it was idle for {} s", IDLE_MS / 1000));
                return Ok(());
            }
            self.storage.set_alarm(self.inner.last_used_ms.get().max(now) + IDLE_MS).await
        })
    }
}

fn lines(lines: &[Line]) -> Response {
    let bytes: Vec<u8> = lines.iter().flat_map(Line::encode).collect();
    let mut r = Response::from_bytes(bytes);
    r.headers_mut().set("content-type", "application/x-ndjson");
    r
}

impl LegacySession {
    pub fn new(storage: Rc<dyn ObjectStorage>, env: Env) -> Self {
        LegacySession { storage, env, inner: Rc::default() }
    }

    async fn answer(&self, req: Request) -> crate::runtime::Result<Response> {
        crate::shell::outbound::guard_from_env(&self.env);
        let call = req.url.ends_with("/call");
        let body: Value = serde_json::from_str(&req.text().await?).unwrap_or(Value::Null);
        let asked = match Asked::read(&body) {
            Ok(a) => a,
            Err(why) => return Ok(Response::text_with_status(why, 400)),
        };
        if !call {
            return Ok(match self.ensure(&asked).await {
                Ok(new) => {
                    let Some((session, endpoint, _)) = self.current() else {
                        return Ok(lines(&[Line::Failed(format!("upstream {}: the session ended", asked.app))]));
                    };
                    let session = serde_json::to_value(&session)?;
                    let ended = if new { self.inner.ended.borrow().clone() } else { None };
                    lines(&[Line::Opened { session, endpoint, id: 0, new, ended }])
                }
                Err(why) => lines(&[Line::Failed(why)]),
            });
        }
        self.touch().await?;
        self.call(asked).await
    }

    fn current(&self) -> Option<(Session, String, u64)> {
        self.inner.live.borrow().as_ref().map(|l| (l.session.clone(), l.endpoint.clone(), l.generation))
    }

    /// The call was used now: the idle bound counts from here.
    async fn touch(&self) -> crate::runtime::Result<()> {
        let now = crate::shell::platform::now_ms();
        self.inner.last_used_ms.set(now);
        self.storage.set_alarm(now + IDLE_MS).await
    }

    /// A live session: the one there is, else a new one (`Ok(true)`); one opening at a time.
    async fn ensure(&self, asked: &Asked) -> Result<bool, String> {
        while self.inner.opening.get() {
            crate::runtime::sleep(20).await;
        }
        if self.inner.live.borrow().is_some() {
            return Ok(false);
        }
        self.inner.opening.set(true);
        let opened = self.open(asked).await;
        self.inner.opening.set(false);
        opened.map(|()| true)
    }

    /// Opens the stream, reads its endpoint (same origin only), initializes over it and
    /// leaves a task reading it.
    async fn open(&self, asked: &Asked) -> Result<(), String> {
        let app = &asked.app;
        let mut headers = asked.headers.clone();
        headers.set("accept", "text/event-stream");
        let mut resp = match outbound::send(Method::Get, &asked.url, headers, None, asked.init_timeout).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => {
                return Err(format!(
                    "upstream {app} did not answer within {} s (session_init_timeout) on its SSE stream",
                    asked.init_timeout.as_secs()
                ))
            }
            Err(e) => {
                let host = crate::pure::url::host_for_display(&asked.url);
                return Err(format!("could not reach upstream {app} at {host}: {}", send_words(e)));
            }
        };
        let status = resp.status_code();
        if !(200..300).contains(&status) {
            let www = resp.headers().get("www-authenticate");
            let body =
                outbound::text(&mut resp, asked.init_timeout, outbound::ERROR_BODY_CAP).await.unwrap_or_default();
            return Err(init_failure_message(app, &InitFailure::Http { status, www_authenticate: www, body }));
        }
        let (mut stream, stop) = resp.into_held_stream();
        let failed = |why: String, stop: &dyn Abort| {
            stop.abort();
            why
        };
        let mut reader = StreamReader::default();
        let mut deadline = Deadline::after(asked.init_timeout);
        let mut early = Vec::new();
        let endpoint = loop {
            let chunk = match deadline.next_chunk(&mut stream).await {
                Ok(c) => c,
                Err(e) => {
                    let why = format!(
                        "upstream {app} sent no endpoint event on its SSE stream ({e}; session_init_timeout {} s)",
                        asked.init_timeout.as_secs()
                    );
                    return Err(failed(why, &*stop));
                }
            };
            let mut endpoint = None;
            for event in reader.feed(&chunk).map_err(|e| failed(e, &*stop))? {
                match event {
                    StreamEvent::Endpoint(e) if endpoint.is_none() => endpoint = Some(e),
                    StreamEvent::Message(m) => early.push(m),
                    StreamEvent::Endpoint(_) => {}
                }
            }
            if let Some(e) = endpoint {
                break resolve_endpoint(&asked.url, &e).map_err(|e| failed(e, &*stop))?;
            }
        };
        let provisional = Session {
            transport: Transport::Sse,
            protocol_version: OFFERED_VERSION.as_str().into(),
            session_id: None,
            stateless: false,
            capabilities: None,
        };
        let id = {
            let mut calls = self.inner.calls.borrow_mut();
            let id = calls.start(None);
            calls.end(id);
            id
        };
        let offered = asked.protocol.unwrap_or(OFFERED_VERSION);
        let posted = post(
            &endpoint,
            &provisional,
            &asked.headers,
            &initialize_offering(id, offered, &asked.declared.capabilities()),
        )
        .await;
        if let Err(why) = posted {
            return Err(failed(format!("upstream {app} did not take initialize on its SSE endpoint: {why}"), &*stop));
        }
        // Until the initialize answer: the upstream's own requests are refused (no call runs).
        let nobody = Calls::default();
        let response = 'read: loop {
            for m in early.drain(..) {
                if m.get("id").and_then(Value::as_u64) == Some(id) && m.get("method").is_none() {
                    break 'read m;
                }
                if let Route::Answer(a) = nobody.route(&m) {
                    let _ = post(&endpoint, &provisional, &asked.headers, &a).await;
                }
            }
            let chunk = match deadline.next_chunk(&mut stream).await {
                Ok(c) => c,
                Err(e) => {
                    let why = format!("upstream {app} did not answer initialize on its SSE stream ({e})");
                    return Err(failed(why, &*stop));
                }
            };
            for event in reader.feed(&chunk).map_err(|e| failed(e, &*stop))? {
                if let StreamEvent::Message(m) = event {
                    early.push(m);
                }
            }
        };
        let session = crate::pure::backend::mcp::replies::response_result(app, &response)
            .and_then(|result| parse_initialize(&result, None, Transport::Sse))
            .and_then(|s| match asked.protocol {
                Some(pinned) => check_pinned(&s, pinned).map(|()| s),
                None => Ok(s),
            })
            .map_err(|e| failed(e, &*stop))?;
        let _ = post(&endpoint, &session, &asked.headers, &initialized_notification()).await;
        let generation = self.inner.generation.get() + 1;
        self.inner.generation.set(generation);
        let (reading, handle) =
            futures::future::abortable(read_stream(Rc::downgrade(&self.inner), generation, stream, reader, early));
        crate::runtime::spawn(async move {
            let _ = reading.await;
        });
        *self.inner.live.borrow_mut() = Some(Live {
            session,
            endpoint,
            headers: asked.headers.clone(),
            app: app.clone(),
            generation,
            stop,
            reader: handle,
        });
        Ok(())
    }

    /// One request: posted on the live session (a new one when there is none, or when the
    /// endpoint no longer takes messages, once), its lines streamed back.
    async fn call(&self, asked: Asked) -> crate::runtime::Result<Response> {
        let Some(mut message) = asked.message.clone() else {
            return Ok(Response::text_with_status("no message to send", 400));
        };
        let mut new = false;
        for attempt in 0..2 {
            match self.ensure(&asked).await {
                Ok(opened) => new |= opened,
                Err(why) => return Ok(lines(&[Line::Failed(why)])),
            }
            let Some((session, endpoint, generation)) = self.current() else { continue };
            if let Some(l) = self.inner.live.borrow_mut().as_mut() {
                l.headers = asked.headers.clone();
            }
            let token = message.pointer("/params/_meta/progressToken").cloned();
            let asked_progress = token.is_some();
            let id = self.inner.calls.borrow_mut().start(token);
            let (tx, rx) = unbounded();
            self.inner.waiting.borrow_mut().insert(id, tx);
            message["id"] = id.into();
            // Unique on the session; the client's token comes back with each notification.
            if asked_progress {
                message["params"]["_meta"]["progressToken"] = id.into();
            }
            match post(&endpoint, &session, &asked.headers, &message).await {
                Ok(()) => {
                    let ended = if new { self.inner.ended.borrow().clone() } else { None };
                    let opened = Line::Opened { session: serde_json::to_value(&session)?, endpoint, id, new, ended };
                    return Ok(streamed(opened, rx, Rc::downgrade(&self.inner), id, asked.timeout, asked.app));
                }
                Err(why) => {
                    self.inner.forget_call(id);
                    // A session the upstream forgot (its stream may look open): once, a new one.
                    if attempt == 0 && !new {
                        self.inner.end(generation, &format!("its endpoint refused a message ({why})"));
                        continue;
                    }
                    let why = format!("upstream {} did not take a message on its SSE endpoint: {why}", asked.app);
                    return Ok(lines(&[Line::Failed(why)]));
                }
            }
        }
        Ok(lines(&[Line::Failed(format!("upstream {}: no session could be kept open", asked.app))]))
    }
}

/// Reads the session's stream for as long as it lives: each message goes where it belongs,
/// and what the object answers itself is posted back at once.
async fn read_stream(
    inner: Weak<Inner>,
    generation: u64,
    mut stream: ByteStream,
    mut reader: StreamReader,
    early: Vec<Value>,
) {
    let mut pending = early;
    loop {
        let Some(me) = inner.upgrade() else { return };
        for m in pending.drain(..) {
            if let Some(answer) = me.dispatch(m) {
                let target =
                    me.live.borrow().as_ref().map(|l| (l.session.clone(), l.endpoint.clone(), l.headers.clone()));
                if let Some((session, endpoint, headers)) = target {
                    let _ = post(&endpoint, &session, &headers, &answer).await;
                }
            }
        }
        drop(me);
        let next = stream.next().await;
        let Some(me) = inner.upgrade() else { return };
        match next {
            Some(Ok(chunk)) => match reader.feed(&chunk) {
                Ok(events) => pending.extend(events.into_iter().filter_map(|e| match e {
                    StreamEvent::Message(m) => Some(m),
                    StreamEvent::Endpoint(_) => None,
                })),
                Err(why) => return me.end(generation, &why),
            },
            Some(Err(e)) => return me.end(generation, &format!("its event stream broke ({e})")),
            None => return me.end(generation, "the upstream closed its event stream"),
        }
    }
}

/// Posts one message to the session's endpoint; `Err` says why it was not taken.
async fn post(endpoint: &str, session: &Session, headers: &Headers, body: &Value) -> Result<(), String> {
    let mut h = headers.clone();
    h.set("content-type", "application/json");
    let method = body.get("method").and_then(Value::as_str).unwrap_or_default();
    for (k, v) in request_headers(session, method, None) {
        h.try_set(k, &v).map_err(|e| format!("the {k} header cannot be set: {e}"))?;
    }
    match outbound::send(Method::Post, endpoint, h, Some(body), POST_TIMEOUT).await {
        Ok(r) if (200..300).contains(&r.status_code()) => Ok(()),
        Ok(r) => Err(format!("HTTP {}", r.status_code())),
        Err(e) => Err(send_words(e)),
    }
}

fn send_words(e: SendError) -> String {
    match e {
        SendError::Unreachable(e) => e.to_string(),
        SendError::TimedOut => "no answer in time".into(),
        SendError::TooLarge(cap) => format!("the answer is larger than {} KiB", cap / 1024),
    }
}

/// Forgets the call when its answer stream goes (answered, timed out, or its caller left).
struct CallGuard {
    inner: Weak<Inner>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.forget_call(self.id);
        }
    }
}

/// The lines of one call: `opened`, then what the session routes to it, until its response, a
/// failure, or `timeout`.
fn streamed(
    opened: Line,
    rx: UnboundedReceiver<Line>,
    inner: Weak<Inner>,
    id: u64,
    timeout: Duration,
    app: String,
) -> Response {
    struct State {
        first: Option<Line>,
        rx: UnboundedReceiver<Line>,
        deadline: Deadline,
        done: bool,
        app: String,
        timeout: Duration,
        _guard: CallGuard,
    }
    let state = State {
        first: Some(opened),
        rx,
        deadline: Deadline::after(timeout),
        done: false,
        app,
        timeout,
        _guard: CallGuard { inner, id },
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let line = match s.first.take() {
            Some(l) => l,
            None => match s.deadline.race(s.rx.next()).await {
                Some(Some(l)) => l,
                Some(None) => Line::Failed(format!("upstream {}: the session ended before answering", s.app)),
                None => Line::Failed(format!("upstream {} did not answer within {} s", s.app, s.timeout.as_secs())),
            },
        };
        s.done = matches!(line, Line::Response(_) | Line::Failed(_));
        Some((Ok(line.encode()), s))
    });
    let mut r = Response::from_stream(Box::pin(stream));
    r.headers_mut().set("content-type", "application/x-ndjson");
    r
}
