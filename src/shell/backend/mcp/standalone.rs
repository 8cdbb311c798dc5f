//! The upstream's standalone stream for one call (`pure::mcp::standalone` decides what becomes
//! of each message): opened with `GET` on the session the call runs on before the call is sent
//! (a message sent before it is open would be lost), read while the call runs, opened again
//! after the upstream closes it (from its last event id), and aborted when the call ends.

use std::time::Duration;

use crate::json;
use futures::StreamExt;
use serde_json::Value;

use crate::pure::backend::mcp::session::Session;
use crate::pure::mcp::standalone::{self as sa, Opened, StreamReader};
use crate::runtime::{ByteStream, Headers, Method};
use crate::shell::memo::{self, UpstreamFact::NoStandaloneStream};
use crate::shell::outbound::{self, Answer};
use crate::shell::platform;

use super::client::{Client, Conn, Upstream};

/// The standalone stream of one call's session: the exchange open now (none while waiting to
/// open it again), and what it takes to open it again. Dropping it (the call ended) aborts the
/// exchange, so the stream never outlives its call.
pub struct Held {
    session: Session,
    url: String,
    headers: Headers,
    app: String,
    live: Option<(Answer, ByteStream)>,
    reader: StreamReader,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((answer, _)) = &self.live {
            answer.abort();
        }
    }
}

impl Held {
    /// The session the stream belongs to and the URL its answers are posted to: where a
    /// request that came on it is answered.
    pub fn target(&self) -> (Session, String) {
        (self.session.clone(), self.url.clone())
    }
}

/// What one `GET` of the stream got.
enum Got {
    Stream(Answer),
    Not(Opened),
    /// No answer (the reason logged).
    Unreachable,
}

/// The answer to one `GET` of the stream (`sent`), read.
async fn get(sent: impl std::future::Future<Output = Result<Answer, outbound::SendError>>, app: &str) -> Got {
    match sent.await {
        Ok(answer) => {
            let content_type = answer.headers().get("content-type");
            match sa::opened(answer.status_code(), content_type.as_deref()) {
                Opened::Stream => Got::Stream(answer),
                other => {
                    answer.abort();
                    Got::Not(other)
                }
            }
        }
        Err(e) => {
            let why = match e {
                outbound::SendError::TimedOut => "no answer in time".to_string(),
                outbound::SendError::Unreachable(e) => e.to_string(),
                outbound::SendError::TooLarge(_) => "too large".to_string(),
            };
            crate::shell::log::info(
                "the upstream's standalone stream could not be opened; the call goes on without it",
                json!({"app": app, "why": why}),
            );
            Got::Unreachable
        }
    }
}

/// Opens the standalone stream of the session `client` is connected with. `None` when the
/// session has none (no `Mcp-Session-Id`, the legacy transport, 2026-07-28), the upstream
/// offers none (405) or it failed. A 404 means the upstream forgot a cached session: a new one
/// is started now, before the call, and its stream opened. A 409 (the session's stream is held:
/// by the caller's previous call, still closing, or by another call of the caller's) is tried
/// again shortly, then while the call runs ([`follow`]).
pub async fn open(client: &mut Client<'_>, up: &Upstream) -> Option<Held> {
    // A 405 is the endpoint's answer for every session: asked once an hour per isolate, not
    // before every call (the GET goes ahead of the call's POST, a round trip each time).
    if memo::upstream_fact(NoStandaloneStream, &up.app_id, &up.url, platform::now_ms()) {
        return None;
    }
    let mut renewed = false;
    let mut busy_waits = sa::BUSY_WAITS_MS.iter();
    loop {
        let (session, url) = match (&client.conn, client.cancel_target()) {
            (Some(Conn::Http(s)), Some(target)) if sa::has_stream(s) => target,
            _ => return None,
        };
        let wait = Duration::from_millis(sa::OPEN_WAIT_MS);
        // With the session's credentials, a challenge answered as for its other requests.
        let headers = || client.stream_headers(&session);
        let sent = client.exchange(Method::Get, &url, &headers, None, wait);
        let got = get(sent, &up.app_name).await;
        // As sent (a new token, if the challenge got one), for opening it again.
        let headers = match client.stream_headers(&session) {
            Ok(h) => h,
            Err(e) => {
                crate::shell::log::error(&e);
                return None;
            }
        };
        let held = |live| Held {
            session: session.clone(),
            url: url.clone(),
            headers: headers.clone(),
            app: up.app_name.clone(),
            live,
            reader: StreamReader::default(),
        };
        match got {
            Got::Stream(mut answer) => {
                let stream = answer.stream();
                return Some(held(Some((answer, stream))));
            }
            Got::Not(Opened::Busy) => match busy_waits.next() {
                Some(ms) => crate::runtime::sleep(*ms).await,
                None => return Some(held(None)),
            },
            Got::Not(Opened::Unsupported) => {
                memo::remember_upstream_fact(NoStandaloneStream, &up.app_id, &up.url, platform::now_ms());
                return None;
            }
            Got::Not(Opened::SessionGone) if !renewed => {
                renewed = true;
                client.connect(false).await.ok()?;
            }
            Got::Not(Opened::Failed(status)) => {
                crate::shell::log::info(
                    "the upstream did not open its standalone stream; the call goes on without it",
                    json!({"app": up.app_name, "status": status}),
                );
                return None;
            }
            Got::Not(_) | Got::Unreachable => return None,
        }
    }
}

/// Opens the standalone stream of a session for a holder other than a call (a client
/// session's Durable Object, `subscriptions`), from what the Worker's client found: the
/// session, the URL and the stream's headers (its credentials). `None` when the upstream
/// offers none or it failed; a stream held elsewhere (409) is asked for again by [`follow`].
pub async fn hold(session: Session, url: String, headers: Headers, app: String) -> Option<Held> {
    let wait = Duration::from_millis(sa::OPEN_WAIT_MS);
    let got = get(outbound::send(Method::Get, &url, headers.clone(), None, wait), &app).await;
    let live = match got {
        Got::Stream(mut answer) => {
            let stream = answer.stream();
            Some((answer, stream))
        }
        Got::Not(Opened::Busy) => None,
        Got::Not(Opened::Failed(status)) => {
            crate::shell::log::info(
                "the upstream did not open its standalone stream for a client session",
                json!({"app": app, "status": status}),
            );
            return None;
        }
        Got::Not(_) | Got::Unreachable => return None,
    };
    Some(Held { session, url, headers, app, live, reader: StreamReader::default() })
}

/// Reads the stream while the call runs, each message to `on_message`; never ends by itself
/// (the call's end drops it, which aborts the exchange). A stream the upstream closes is opened
/// again after its `retry` (with `Last-Event-ID`), as is one refused with 409, at most
/// `MAX_REOPENS` times; after that, or a refusal of another kind, nothing more is read.
pub async fn follow(held: Option<Held>, on_message: &dyn Fn(Value)) {
    if let Some(mut h) = held {
        let mut reopens = 0;
        loop {
            if let Some((_, stream)) = &mut h.live {
                let mut out = Vec::new();
                let mut unreadable = None;
                while let Some(Ok(chunk)) = stream.next().await {
                    let fed = h.reader.feed(&chunk, &mut out);
                    for m in out.drain(..) {
                        on_message(m);
                    }
                    if let Err(e) = fed {
                        unreadable = Some(e);
                        break;
                    }
                }
                if let Some(e) = unreadable {
                    crate::shell::log::info(&e, json!({"app": h.app}));
                    break;
                }
                h.reader.finish(&mut out);
                for m in out {
                    on_message(m);
                }
                if let Some((answer, _)) = h.live.take() {
                    answer.abort();
                }
            }
            reopens += 1;
            if reopens > sa::MAX_REOPENS {
                break;
            }
            crate::runtime::sleep(h.reader.retry_ms()).await;
            let mut headers = h.headers.clone();
            if let Some(id) = h.reader.last_event_id() {
                // An id `fetch` would refuse is not sent: the stream starts afresh.
                let _ = headers.try_set("last-event-id", id);
            }
            let wait = Duration::from_millis(sa::OPEN_WAIT_MS);
            match get(outbound::send(Method::Get, &h.url, headers, None, wait), &h.app).await {
                Got::Stream(mut answer) => {
                    let stream = answer.stream();
                    h.live = Some((answer, stream));
                }
                Got::Not(Opened::Busy) => {}
                Got::Not(_) | Got::Unreachable => break,
            }
        }
    }
    // Nothing more to read (`h` dropped: the exchange ended); the call goes on.
    futures::future::pending::<()>().await
}
