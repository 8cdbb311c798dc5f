//! The network: scripted backends by origin, every outbound request recorded, and response
//! bodies that arrive chunk by chunk on the virtual clock (or reset, stop short, or hang).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::{Future, Stream};
use serde_json::Value;

use super::clock::{self, Clock, Sleep};
use crate::runtime::{Abort, Error, Headers, Kind, Method, Result};

/// A request as a backend sees it.
#[derive(Debug, Clone)]
pub struct BackendRequest {
    pub method: Method,
    pub url: String,
    /// Path and query, e.g. `/v1/chat-messages?x=1`.
    pub path: String,
    pub headers: Headers,
    /// The body as text (invalid UTF-8 replaced), for the JSON and form bodies most backends read.
    pub body: String,
    /// The body's bytes as sent (a multipart upload's binary parts).
    pub bytes: Vec<u8>,
}

impl BackendRequest {
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// The bearer token of `Authorization`, if any.
    pub fn bearer(&self) -> Option<String> {
        let h = self.headers.get("authorization")?;
        let (scheme, token) = h.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
    }
}

/// One piece of a scripted body, sent `delay_ms` after the previous one.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub delay_ms: u64,
    pub bytes: Vec<u8>,
}

/// How a scripted body ends after its last chunk.
#[derive(Debug, Clone)]
pub enum BodyEnd {
    Complete,
    /// The stream yields `Err` (a reset mid-body).
    Reset,
    /// Nothing more, ever (the connection stays open).
    Hang,
    /// What the backend writes to the feed later, as it comes, until it closes the feed (an
    /// upstream's answer on a legacy SSE stream, the rest of a call once the client answered).
    Fed(Rc<Feed>),
}

impl PartialEq for BodyEnd {
    fn eq(&self, other: &BodyEnd) -> bool {
        match (self, other) {
            (BodyEnd::Fed(a), BodyEnd::Fed(b)) => Rc::ptr_eq(a, b),
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

impl Eq for BodyEnd {}

/// The open end of a body a backend goes on writing after it answered: bytes pushed are read
/// in order; a closed feed ends the body once read.
#[derive(Debug, Default)]
pub struct Feed {
    queue: RefCell<VecDeque<Vec<u8>>>,
    closed: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Feed {
    pub fn push(&self, bytes: impl Into<Vec<u8>>) {
        self.queue.borrow_mut().push_back(bytes.into());
        self.wake();
    }

    pub fn close(&self) {
        self.closed.set(true);
        self.wake();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    fn wake(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

#[derive(Debug, Clone)]
pub struct Scripted {
    pub status: u16,
    pub headers: Headers,
    /// Before the head arrives.
    pub delay_ms: u64,
    pub chunks: Vec<Chunk>,
    pub end: BodyEnd,
}

/// What a backend does with a request.
#[derive(Debug, Clone)]
pub enum Reply {
    Respond(Scripted),
    /// No answer, ever.
    Hang,
    /// `fetch` fails (connection reset before any answer).
    Reset,
}

impl Reply {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        let mut headers = Headers::new();
        if !content_type.is_empty() {
            headers.set("content-type", content_type);
        }
        let bytes = body.into();
        let chunks = if bytes.is_empty() { vec![] } else { vec![Chunk { delay_ms: 0, bytes }] };
        Reply::Respond(Scripted { status, headers, delay_ms: 0, chunks, end: BodyEnd::Complete })
    }

    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::new(status, "application/json", body.to_string())
    }

    /// An event stream of `frames` (each sent as is), `every_ms` apart.
    pub fn sse(frames: Vec<String>, every_ms: u64) -> Reply {
        let mut headers = Headers::new();
        headers.set("content-type", "text/event-stream; charset=utf-8");
        let chunks = frames
            .into_iter()
            .enumerate()
            .map(|(i, f)| Chunk { delay_ms: if i == 0 { 0 } else { every_ms }, bytes: f.into_bytes() })
            .collect();
        Reply::Respond(Scripted { status: 200, headers, delay_ms: 0, chunks, end: BodyEnd::Complete })
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Respond(s) = &mut self {
            s.headers.set(name, value);
        }
        self
    }

    /// The head arrives after `ms`.
    pub fn delayed(mut self, ms: u64) -> Reply {
        if let Reply::Respond(s) = &mut self {
            s.delay_ms = ms;
        }
        self
    }

    pub fn ending(mut self, end: BodyEnd) -> Reply {
        if let Reply::Respond(s) = &mut self {
            s.end = end;
        }
        self
    }
}

/// A scripted server. `now_ms` is the virtual clock (tokens' `iat`, run times).
pub trait Backend {
    fn handle(&self, req: &BackendRequest, now_ms: u64) -> Reply;
}

impl<F: Fn(&BackendRequest, u64) -> Reply> Backend for F {
    fn handle(&self, req: &BackendRequest, now_ms: u64) -> Reply {
        self(req, now_ms)
    }
}

/// One outbound request, as sent, and what became of it.
#[derive(Debug, Clone)]
pub struct OutboundRecord {
    pub at_ms: u64,
    pub method: String,
    pub url: String,
    /// `scheme://host[:port]`, or empty for a URL that does not parse.
    pub origin: String,
    pub headers: Headers,
    pub body: String,
    pub outcome: String,
}

#[derive(Default)]
pub struct Network {
    pub backends: RefCell<BTreeMap<String, Rc<dyn Backend>>>,
    pub outbound: RefCell<Vec<OutboundRecord>>,
}

pub fn origin_of(url: &str) -> Option<(String, String)> {
    let u = url::Url::parse(url).ok()?;
    let origin = u.origin().ascii_serialization();
    let mut path = u.path().to_string();
    if let Some(q) = u.query() {
        path.push('?');
        path.push_str(q);
    }
    Some((origin, path))
}

/// Cuts `chunks` at byte `at` of their concatenation (a body that stops part way).
pub fn cut(chunks: &mut Vec<Chunk>, at: usize) {
    let mut seen = 0;
    let mut keep = Vec::new();
    for mut c in chunks.drain(..) {
        if seen + c.bytes.len() <= at {
            seen += c.bytes.len();
            keep.push(c);
        } else {
            c.bytes.truncate(at - seen);
            if !c.bytes.is_empty() {
                keep.push(c);
            }
            break;
        }
    }
    *chunks = keep;
}

#[derive(Default)]
pub struct AbortState {
    aborted: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

pub struct AbortHandle(pub Rc<AbortState>);

impl Abort for AbortHandle {
    fn abort(&self) {
        self.0.aborted.set(true);
        if let Some(w) = self.0.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// A scripted body on the virtual clock.
pub struct BodyStream {
    pub clock: Rc<Clock>,
    pub chunks: VecDeque<Chunk>,
    pub end: BodyEnd,
    pub sleep: Option<Pin<Box<Sleep>>>,
    pub abort: Rc<AbortState>,
    pub finished: bool,
}

impl Stream for BodyStream {
    type Item = Result<Vec<u8>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        if self.abort.aborted.get() {
            self.finished = true;
            // Its timer would otherwise still move the clock for nobody.
            self.sleep = None;
            return Poll::Ready(Some(Err(Error::new(Kind::Body, "AbortError: The operation was aborted"))));
        }
        *self.abort.waker.borrow_mut() = Some(cx.waker().clone());
        let Some(delay) = self.chunks.front().map(|c| c.delay_ms) else {
            return match &self.end {
                BodyEnd::Fed(feed) => {
                    let next = feed.queue.borrow_mut().pop_front();
                    match next {
                        Some(bytes) => Poll::Ready(Some(Ok(bytes))),
                        None if feed.closed.get() => {
                            self.finished = true;
                            Poll::Ready(None)
                        }
                        None => {
                            *feed.waker.borrow_mut() = Some(cx.waker().clone());
                            Poll::Pending
                        }
                    }
                }
                BodyEnd::Complete => {
                    self.finished = true;
                    Poll::Ready(None)
                }
                BodyEnd::Reset => {
                    self.finished = true;
                    Poll::Ready(Some(Err(Error::new(Kind::Body, "Network connection lost."))))
                }
                BodyEnd::Hang => Poll::Pending,
            };
        };
        if delay > 0 {
            let clock = self.clock.clone();
            let sleep = self.sleep.get_or_insert_with(|| Box::pin(clock::sleep(&clock, delay, "a body chunk's delay")));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.sleep = None;
        let chunk = self.chunks.pop_front().map(|c| c.bytes).unwrap_or_default();
        Poll::Ready(Some(Ok(chunk)))
    }
}
