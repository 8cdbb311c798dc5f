//! Every outbound request goes through here, whatever the backend kind: the private-backend
//! guard judges the URL exactly as `fetch` will parse it (and fetch gets that parsed URL),
//! redirects are followed by hand only after the guard accepts each `Location` (credentials
//! never go to another origin), no call waits forever, and no answer is read past its cap.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use futures::future::{select, Either};
use futures::StreamExt;
use serde_json::Value;

use crate::pure::url::{follow_redirect, is_redirect, parse_outbound, PrivateAllow, Redirect};
use crate::runtime::timer::Timer;
use crate::runtime::{Abort, Body, ByteStream, Env, Fetched, Headers, Method, Outbound};

thread_local! {
    /// `ALLOW_PRIVATE_BACKENDS` of the current event (request or alarm).
    static ALLOW_PRIVATE: RefCell<PrivateAllow> = const { RefCell::new(PrivateAllow::Nothing) };
}

/// Largest error body read from a backend: only a snippet of it is ever shown.
pub const ERROR_BODY_CAP: usize = 64 * 1024;

/// Headers that may follow a redirect to another origin: everything else (the API key, static
/// and forwarded credential headers, user ids) stays with the origin the app names.
const CROSS_ORIGIN_HEADERS: [&str; 5] = ["content-type", "accept", "mcp-protocol-version", "mcp-method", "mcp-name"];

/// Reads `ALLOW_PRIVATE_BACKENDS` for this event. `true` when every private backend is allowed
/// (`ALLOW_PRIVATE_BACKENDS=true`); a list of hosts allows just those.
pub fn guard_from_env(env: &Env) -> bool {
    let allow = crate::shell::platform::settings(env).allow_private_backends.clone();
    let all = matches!(allow, PrivateAllow::Everything);
    ALLOW_PRIVATE.with(|a| *a.borrow_mut() = allow);
    all
}

/// The private-backend policy of the current event.
pub fn private_allow() -> PrivateAllow {
    ALLOW_PRIVATE.with(|a| a.borrow().clone())
}

/// Why a request got no (whole) answer.
#[derive(Debug)]
pub enum SendError {
    /// The request did not reach the backend, or its answer broke off.
    Unreachable(Unreachable),
    TimedOut,
    /// The answer is longer than the reader's cap (bytes).
    TooLarge(usize),
}

/// Why a request did not reach its backend. Shown as its words alone: each is a whole sentence
/// or the runtime's own message, and callers put the backend's name before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// The guard refused the URL, or a redirect (`pure::url`'s words).
    Refused(String),
    /// The request could not be built (a header `fetch` refuses).
    Unsendable(String),
    /// The runtime could not send it, or the answer broke off: its words, any URL in them
    /// reduced to its host (a client may see them).
    Network(String),
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreachable::Refused(why) | Unreachable::Unsendable(why) | Unreachable::Network(why) => f.write_str(why),
        }
    }
}

/// An unreachable backend in words that name the fix: a failed connection names the app
/// `setting` that holds the address (`pure::backend::advice`); a refusal says enough already.
pub fn advice(e: &Unreachable, setting: &str) -> String {
    match e {
        Unreachable::Network(why) => crate::pure::backend::advice::unreachable(why, setting),
        Unreachable::Refused(_) | Unreachable::Unsendable(_) => None,
    }
    .unwrap_or_else(|| e.to_string())
}

impl From<crate::runtime::Error> for Unreachable {
    fn from(e: crate::runtime::Error) -> Unreachable {
        Unreachable::Network(crate::pure::url::scrub_urls(e.message()))
    }
}

impl From<crate::runtime::Error> for SendError {
    fn from(e: crate::runtime::Error) -> SendError {
        SendError::Unreachable(e.into())
    }
}

/// A failed send in general words (the guard's and redirect refusals are already whole
/// sentences); a caller that knows what was being read says more.
impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Unreachable(e) => e.fmt(f),
            SendError::TimedOut => f.write_str("no answer in time"),
            SendError::TooLarge(cap) => write!(f, "the answer is larger than {} KiB", cap / 1024),
        }
    }
}

impl SendError {
    /// The guard refused the request, in its words.
    pub fn refused(why: String) -> SendError {
        SendError::Unreachable(Unreachable::Refused(why))
    }

    /// The request could not be built, in words naming what was wrong.
    pub fn unsendable(why: String) -> SendError {
        SendError::Unreachable(Unreachable::Unsendable(why))
    }
}

/// A backend's answer as the runtime gave it: its status and headers read once, its body not yet.
/// It keeps the exchange's one timer and abort switch for the body's read (see [`text`]).
pub struct Answer {
    body: Body,
    headers: Headers,
    status: u16,
    deadline: Deadline,
    abort: Box<dyn Abort>,
}

impl Answer {
    pub fn status_code(&self) -> u16 {
        self.status
    }

    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The body, chunk by chunk (taken: a second call reads nothing).
    pub fn stream(&mut self) -> ByteStream {
        std::mem::replace(&mut self.body, Body::Empty).into_stream()
    }

    /// Stops the exchange: a body still being read (an event stream held open) ends.
    pub fn abort(&self) {
        self.abort.abort();
    }

    /// The body and the switch that stops the exchange, for a stream kept open beyond this
    /// answer (a legacy SSE session's) and closed on purpose later.
    pub fn into_held_stream(mut self) -> (ByteStream, Box<dyn Abort>) {
        (self.stream(), self.abort)
    }
}

/// Sends `method url` with `headers` and an optional JSON body; the final answer's headers must
/// arrive within `timeout`, redirects included.
pub async fn send(
    method: Method,
    url: &str,
    headers: Headers,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Answer, SendError> {
    let body = body.map(Value::to_string);
    send_text(method, url, headers, body, timeout, CrossOrigin::WithoutCredentials).await
}

/// What a redirect to another origin may take along.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CrossOrigin {
    /// The request without its credential headers (the body carries none).
    WithoutCredentials,
    /// Nothing: the body itself is a credential (an OAuth token request), so such a redirect
    /// is refused.
    Refused,
}

/// [`send`] with a body already encoded (a form, say).
pub async fn send_text(
    method: Method,
    url: &str,
    headers: Headers,
    body: Option<String>,
    timeout: Duration,
    cross_origin: CrossOrigin,
) -> Result<Answer, SendError> {
    send_bytes(method, url, headers, body.map(String::into_bytes), timeout, cross_origin).await
}

/// [`send`] with a body of bytes (a multipart upload).
pub async fn send_bytes(
    mut method: Method,
    url: &str,
    mut headers: Headers,
    mut body: Option<Vec<u8>>,
    timeout: Duration,
    cross_origin: CrossOrigin,
) -> Result<Answer, SendError> {
    let allow = private_allow();
    let mut target = parse_outbound(url, &allow).map_err(SendError::refused)?;
    let mut deadline = Deadline::after(timeout);
    let mut hops = 0u8;
    loop {
        let resp = fetch_once(method.clone(), target.as_str(), &headers, body.as_deref(), deadline).await?;
        let status = resp.status;
        if !is_redirect(status) {
            return Ok(resp);
        }
        let location = resp.headers.get("location");
        deadline = resp.deadline;
        match follow_redirect(&target, status, method == Method::Post, location.as_deref(), hops, &allow) {
            Redirect::Follow { url, method_becomes_get, same_origin } => {
                if method_becomes_get {
                    method = Method::Get;
                    body = None;
                }
                if !same_origin {
                    if cross_origin == CrossOrigin::Refused && body.is_some() {
                        return Err(SendError::refused(format!(
                            "it redirected (HTTP {status}) to another origin ({}), where its credentials may not go",
                            crate::pure::url::host_for_display(url.as_str())
                        )));
                    }
                    headers = cross_origin_headers(&headers, body.is_some());
                }
                target = url;
                hops += 1;
            }
            Redirect::Refuse(why) => return Err(SendError::refused(why)),
        }
    }
}

fn cross_origin_headers(headers: &Headers, with_body: bool) -> Headers {
    headers.iter().filter(|(k, _)| CROSS_ORIGIN_HEADERS.contains(k) && (with_body || *k != "content-type")).collect()
}

/// One request, no redirect followed, its answer's headers within `deadline` (then aborted).
async fn fetch_once(
    method: Method,
    url: &str,
    headers: &Headers,
    body: Option<&[u8]>,
    mut deadline: Deadline,
) -> Result<Answer, SendError> {
    let request = Outbound { method, url: url.to_string(), headers: headers.clone(), body: body.map(<[u8]>::to_vec) };
    // Dropping the pending fetch (the deadline came first) cancels it.
    match deadline.race(crate::runtime::fetch(request)).await {
        Some(Ok(Fetched { status, headers, body, abort })) => Ok(Answer { body, headers, status, deadline, abort }),
        Some(Err(e)) => Err(e.into()),
        None => Err(SendError::TimedOut),
    }
}

/// Reads an answer's body as text, at most `cap` bytes, within `timeout` (the exchange's timer
/// re-armed, not a new one). A body announced or found to be longer is not read further:
/// `TooLarge(cap)`. A read that runs out of time is aborted.
pub async fn text(resp: &mut Answer, timeout: Duration, cap: usize) -> Result<String, SendError> {
    let announced = resp.headers.get("content-length").and_then(|l| l.trim().parse::<usize>().ok());
    if announced.is_some_and(|n| n > cap) {
        return Err(SendError::TooLarge(cap));
    }
    resp.deadline.reset_after(timeout);
    let read = read_capped(resp, announced, cap).await;
    if matches!(read, Err(SendError::TimedOut)) {
        resp.abort.abort();
    }
    read.map(into_text)
}

async fn read_capped(resp: &mut Answer, announced: Option<usize>, cap: usize) -> Result<Vec<u8>, SendError> {
    // Announced and within the cap, and not decoded on the way (a small compressed body can
    // inflate without bound): the runtime reads it whole, with no crossing per chunk.
    let encoded = resp.headers.get("content-encoding").is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    if announced.is_some() && !encoded {
        let bytes = resp.deadline.race(body.bytes()).await.ok_or(SendError::TimedOut)??;
        if bytes.len() > cap {
            return Err(SendError::TooLarge(cap));
        }
        return Ok(bytes);
    }
    let mut stream = body.into_stream();
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0).min(cap));
    loop {
        match resp.deadline.next_chunk(&mut stream).await {
            Ok(chunk) => {
                if bytes.len() + chunk.len() > cap {
                    return Err(SendError::TooLarge(cap));
                }
                bytes.extend_from_slice(&chunk);
            }
            Err(ChunkEnd::Closed) => return Ok(bytes),
            Err(ChunkEnd::TimedOut) => return Err(SendError::TimedOut),
            Err(ChunkEnd::Broken(e)) => return Err(e.into()),
        }
    }
}

/// A body as text, invalid UTF-8 replaced (an answer is shown, not rejected, for it).
fn into_text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Why a body stream gave no next chunk.
#[derive(Debug)]
pub enum ChunkEnd {
    Closed,
    TimedOut,
    Broken(crate::runtime::Error),
}

impl std::fmt::Display for ChunkEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkEnd::Closed => f.write_str("the stream closed"),
            ChunkEnd::TimedOut => f.write_str("no answer in time"),
            ChunkEnd::Broken(e) => write!(f, "the stream broke: {e}"),
        }
    }
}

/// A reader's one deadline, with one timer for all its waits (see `timer.rs`): the "next chunk
/// or deadline" wait of every reader that has a single deadline (the SSE relay also has idle
/// and keep-alive times, see `stream.rs`).
pub struct Deadline {
    at_ms: u64,
    timer: Timer,
}

impl Deadline {
    pub fn after(wait: Duration) -> Deadline {
        Deadline { at_ms: crate::shell::platform::now_ms() + wait.as_millis() as u64, timer: Timer::default() }
    }

    /// Moves the deadline to `wait` from now, keeping the timer (an armed one that fires
    /// earlier is kept too: the waits re-check when it fires).
    pub fn reset_after(&mut self, wait: Duration) {
        self.at_ms = crate::shell::platform::now_ms() + wait.as_millis() as u64;
    }

    /// Milliseconds left, 0 once it has passed.
    pub fn left_ms(&self) -> u64 {
        self.at_ms.saturating_sub(crate::shell::platform::now_ms())
    }

    /// `work`'s output, or `None` when the deadline comes first.
    pub async fn race<F: Future>(&mut self, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(work);
        loop {
            let now = crate::shell::platform::now_ms();
            if now >= self.at_ms {
                return None;
            }
            self.timer.arm_by(self.at_ms, now);
            if let Either::Left((out, _)) = select(&mut work, self.timer.fired()).await {
                return Some(out);
            }
            // The timer fired: the deadline has passed, or the clock is a little behind it.
        }
    }

    /// The next chunk of a body, unless the deadline comes first.
    pub async fn next_chunk(&mut self, stream: &mut ByteStream) -> Result<Vec<u8>, ChunkEnd> {
        match self.race(stream.next()).await {
            Some(Some(Ok(c))) => Ok(c),
            Some(Some(Err(e))) => Err(ChunkEnd::Broken(e)),
            Some(None) => Err(ChunkEnd::Closed),
            None => Err(ChunkEnd::TimedOut),
        }
    }
}

/// How many bytes of a one-piece answer are read for an app whose results are capped at
/// `max_result_bytes`: JSON escaping can double a text, and the envelope adds a little.
pub fn one_piece_cap(max_result_bytes: usize) -> usize {
    max_result_bytes.saturating_mul(2).saturating_add(64 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Error, Kind};

    #[test]
    fn a_runtime_failure_is_unreachable_in_its_words_with_urls_cut_to_their_host() {
        let e = Error::new(Kind::Fetch, "TypeError: fetch failed for https://api.test/v1/run?key=s3cret: reset");
        let SendError::Unreachable(why) = SendError::from(e) else { panic!("not unreachable") };
        assert_eq!(why, Unreachable::Network("TypeError: fetch failed for https://api.test: reset".into()));
        assert_eq!(why.to_string(), "TypeError: fetch failed for https://api.test: reset");
    }

    #[test]
    fn a_refusal_and_an_unsendable_request_show_their_sentence() {
        let SendError::Unreachable(r) = SendError::refused("its host is private".into()) else { panic!() };
        assert_eq!((r.to_string(), matches!(r, Unreachable::Refused(_))), ("its host is private".into(), true));
        let SendError::Unreachable(u) = SendError::unsendable("a header cannot be set".into()) else { panic!() };
        assert_eq!((u.to_string(), matches!(u, Unreachable::Unsendable(_))), ("a header cannot be set".into(), true));
    }
}
