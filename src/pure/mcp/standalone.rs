//! The standalone stream of an upstream's session: the event stream a client opens with `GET`
//! (and its `Mcp-Session-Id`), on which a Streamable HTTP server sends what belongs to no
//! request of the client's (`roots/list` without a related request, log messages,
//! list-changed notifications). Flowgate holds it open while a call runs on that session and
//! treats what comes on it like what comes on the call's own stream: requests are relayed to the
//! calling client or refused at once (`relay::decide`), logs and the call's progress are passed
//! on, the rest is dropped. This decides; `shell::backend::mcp::standalone` does the IO.

use serde_json::Value;

use crate::pure::backend::mcp::session::Session;
use crate::pure::backend::mcp::transport::Transport;
use crate::pure::protocol::methods;
use crate::pure::sse::{read_json, SseEventRef, SseParser};

use super::server::{self, CallPlan};

/// How often one call's standalone stream is opened again after the upstream closed it (or
/// answered 409 while another stream of the session was open).
pub const MAX_REOPENS: u32 = 20;
/// The wait before opening again when the upstream gave no `retry`.
pub const DEFAULT_RETRY_MS: u64 = 1_000;
/// The longest a stream's `retry` may make Flowgate wait before opening it again.
pub const MAX_RETRY_MS: u64 = 30_000;
/// The waits before the stream is asked for again when the upstream answered 409 at the call's
/// start (the caller's previous call may be closing its stream): short, since the call waits.
pub const BUSY_WAITS_MS: [u64; 2] = [100, 250];
/// How long the answer to a `GET` of the stream may take; without one by then, the call goes on
/// without the stream.
pub const OPEN_WAIT_MS: u64 = 5_000;

/// Whether a session has a standalone stream to open: only a Streamable HTTP session with an
/// `Mcp-Session-Id` (without one, the upstream could not tell whose stream it is; the legacy
/// transport's one stream is read anyway; 2026-07-28 has no sessions).
pub fn has_stream(session: &Session) -> bool {
    session.transport == Transport::StreamableHttp && !session.stateless && session.session_id.is_some()
}

/// What the answer to the opening `GET` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// An event stream: read it while the call runs.
    Stream,
    /// 405: the upstream offers no standalone stream. Fine: the call goes on without it.
    Unsupported,
    /// 404: the upstream forgot the session (start a new one before the call).
    SessionGone,
    /// 409: another stream of this session is open (another call of the same caller): try
    /// again after a while, since that one ends with its call.
    Busy,
    /// Anything else: the call goes on without a stream (the status is logged).
    Failed(u16),
}

/// Reads the status and `Content-Type` of the answer to the `GET`.
pub fn opened(status: u16, content_type: Option<&str>) -> Opened {
    match status {
        200 if content_type.is_some_and(|c| c.to_ascii_lowercase().contains("text/event-stream")) => Opened::Stream,
        405 => Opened::Unsupported,
        404 => Opened::SessionGone,
        409 => Opened::Busy,
        other => Opened::Failed(other),
    }
}

/// What becomes of one message of the standalone stream for the call that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A request of the upstream's: relayed to the client or refused with the reason, exactly as
    /// on the call's own stream (`relay::decide`); never left unanswered.
    Ask,
    /// A notification the client gets as it is: a log message at or above the client's level,
    /// or progress with the call's own token.
    Pass,
    /// Not for this call: a response (Flowgate sends no requests on this stream), progress of
    /// another request, list-changed and other notifications (a client that stays gets list
    /// changes on its session's stream, `client_session`).
    Drop,
}

/// Whether a message of the stream is a request of the upstream's (it must be answered: put to
/// the client or refused), not a notification or a response. A null id is no request (nothing
/// could answer it).
pub fn is_request(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str).is_some() && message.get("id").is_some_and(|id| !id.is_null())
}

/// Where one message of the standalone stream goes, for the call `plan`.
pub fn route(message: &Value, plan: &CallPlan) -> Route {
    let Some(method) = message.get("method").and_then(Value::as_str) else { return Route::Drop };
    if is_request(message) {
        return Route::Ask;
    }
    match method {
        // Session-wide, and a session is one caller's: its logs are this client's.
        methods::MESSAGE if server::relays(plan, message) => Route::Pass,
        // The upstream may report a call's progress here too; only the call's own token is its.
        methods::PROGRESS
            if plan.progress_token.is_some()
                && message.pointer("/params/progressToken") == plan.progress_token.as_ref() =>
        {
            Route::Pass
        }
        _ => Route::Drop,
    }
}

/// Reads a standalone stream chunk by chunk: its JSON-RPC messages, and where to resume it
/// (SEP-1699: the last event id and the server's `retry`).
pub struct StreamReader {
    parser: SseParser,
    last_event_id: Option<String>,
    retry_ms: Option<u64>,
}

impl Default for StreamReader {
    fn default() -> Self {
        StreamReader { parser: SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES), last_event_id: None, retry_ms: None }
    }
}

impl StreamReader {
    /// Feeds the next chunk; complete messages are pushed to `out`. A message that is not JSON
    /// is skipped (it could only be dropped), an event too large ends the stream.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Value>) -> Result<(), String> {
        let mut parser = std::mem::take(&mut self.parser);
        let fed = parser.feed_each(chunk, |e| self.event(e, out));
        self.parser = parser;
        fed.map_err(|e| format!("the upstream's standalone stream: {e}"))
    }

    /// The stream ended: its last event, if it had no blank line after it.
    pub fn finish(&mut self, out: &mut Vec<Value>) {
        let mut parser = std::mem::take(&mut self.parser);
        let _ = parser.finish_each(|e| self.event(e, out));
        self.parser = parser;
    }

    /// The id to send as `Last-Event-ID` when opening the stream again, if the upstream gave one.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// How long to wait before opening the stream again: the upstream's `retry`, bounded.
    pub fn retry_ms(&self) -> u64 {
        self.retry_ms.unwrap_or(DEFAULT_RETRY_MS).min(MAX_RETRY_MS)
    }

    fn event(&mut self, e: SseEventRef<'_>, out: &mut Vec<Value>) {
        if let Some(id) = e.id {
            self.last_event_id = (!id.is_empty()).then(|| id.to_string());
        }
        if e.retry.is_some() {
            self.retry_ms = e.retry;
        }
        if !matches!(e.event, "" | "message") || e.data.trim_ascii().is_empty() {
            return;
        }
        match read_json::<Value>(e.data) {
            Ok(Value::Array(items)) => out.extend(items.into_iter().filter(Value::is_object)),
            Ok(m) if m.is_object() => out.push(m),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::mcp::relay::{Channel, ClientCaps};
    use crate::pure::mcp::server::CallRequest;
    use crate::pure::protocol::version::Version;
    use serde_json::json;

    fn plan(progress_token: Option<Value>, log_level: Option<&'static str>) -> CallPlan {
        CallPlan {
            id: json!(1),
            version: Version::V2025_11_25,
            app_index: 0,
            request: CallRequest::HttpTool { body: json!({}) },
            user: "u".into(),
            client_name: "c".into(),
            progress_token,
            log_level,
            cancel_key: String::new(),
            relay: Channel::Stream(ClientCaps::default()),
            files: Vec::new(),
        }
    }

    fn session(transport: Transport, id: Option<&str>, stateless: bool) -> Session {
        Session {
            transport,
            protocol_version: "2025-11-25".into(),
            session_id: id.map(str::to_string),
            stateless,
            capabilities: None,
        }
    }

    #[test]
    fn only_sessions_with_an_id_have_a_stream() {
        assert!(has_stream(&session(Transport::StreamableHttp, Some("s-1"), false)));
        assert!(!has_stream(&session(Transport::StreamableHttp, None, false)), "no session id");
        assert!(!has_stream(&session(Transport::StreamableHttp, Some("s-1"), true)), "2026-07-28");
        assert!(!has_stream(&session(Transport::Sse, Some("s-1"), false)), "the legacy stream is read anyway");
    }

    #[test]
    fn what_the_get_answered() {
        assert_eq!(opened(200, Some("text/event-stream; charset=utf-8")), Opened::Stream);
        assert_eq!(opened(200, Some("Text/Event-Stream")), Opened::Stream);
        assert_eq!(opened(200, Some("application/json")), Opened::Failed(200));
        assert_eq!(opened(200, None), Opened::Failed(200));
        assert_eq!(opened(405, Some("application/json")), Opened::Unsupported);
        assert_eq!(opened(404, None), Opened::SessionGone);
        assert_eq!(opened(409, None), Opened::Busy);
        assert_eq!(opened(500, Some("text/event-stream")), Opened::Failed(500));
    }

    #[test]
    fn requests_are_asked_whatever_they_are() {
        let p = plan(None, None);
        for m in [
            json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}),
            json!({"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "some/unknown"}),
        ] {
            assert_eq!(route(&m, &p), Route::Ask, "{m}");
            assert!(is_request(&m), "{m}");
        }
        // A null id is no request (nothing could answer it).
        let null_id = json!({"jsonrpc": "2.0", "id": null, "method": "roots/list"});
        assert_eq!(route(&null_id, &p), Route::Drop);
        for m in [
            null_id,
            json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
            json!({"jsonrpc": "2.0", "method": "notifications/message"}),
        ] {
            assert!(!is_request(&m), "{m}");
        }
    }

    #[test]
    fn logs_at_the_clients_level_and_only_the_calls_progress() {
        let log = |level: &str| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": "x"}});
        let warn = plan(None, Some("warning"));
        assert_eq!(route(&log("error"), &warn), Route::Pass);
        assert_eq!(route(&log("warning"), &warn), Route::Pass);
        assert_eq!(route(&log("info"), &warn), Route::Drop);
        assert_eq!(route(&log("emergency"), &plan(None, None)), Route::Drop, "no level: no logs");

        let progress = |t: Value| json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}});
        let tok = plan(Some(json!("tok-1")), None);
        assert_eq!(route(&progress(json!("tok-1")), &tok), Route::Pass);
        assert_eq!(route(&progress(json!("tok-2")), &tok), Route::Drop, "another request's progress");
        assert_eq!(route(&progress(json!(1)), &plan(Some(json!("1")), None)), Route::Drop, "another type");
        assert_eq!(route(&progress(json!("tok-1")), &plan(None, None)), Route::Drop, "no token asked");
        assert_eq!(
            route(
                &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
                &plan(None, None)
            ),
            Route::Drop,
            "no token on either side is not a match"
        );

        for m in [
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "x"}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "m"}}),
            json!("not an object"),
        ] {
            assert_eq!(route(&m, &warn), Route::Drop, "{m}");
        }
    }

    #[test]
    fn the_stream_read_in_any_pieces() {
        let text = concat!(
            ": keep-alive\n\n",
            "id: e-1\nretry: 2500\ndata:\n\n",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"roots/list\"}\n\n",
            "event: ping\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"roots/list\"}\n\n",
            "data: not json\n\n",
            "id: e-2\ndata: [{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}, 3]\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}",
        );
        let bytes = text.as_bytes();
        for split in 0..=bytes.len() {
            let mut r = StreamReader::default();
            let mut out = Vec::new();
            r.feed(&bytes[..split], &mut out).unwrap();
            r.feed(&bytes[split..], &mut out).unwrap();
            r.finish(&mut out);
            let methods: Vec<&str> = out.iter().filter_map(|m| m["method"].as_str()).collect();
            assert_eq!(methods, ["roots/list", "notifications/message", "notifications/progress"], "split at {split}");
            assert_eq!(r.last_event_id(), Some("e-2"));
            assert_eq!(r.retry_ms(), 2500);
        }
        let mut r = StreamReader::default();
        assert_eq!(r.retry_ms(), DEFAULT_RETRY_MS);
        r.feed(b"retry: 99999999\ndata:\n\n", &mut Vec::new()).unwrap();
        assert_eq!(r.retry_ms(), MAX_RETRY_MS, "a huge retry is bounded");
        let mut huge = StreamReader::default();
        let err = huge.feed(&vec![b'a'; SseParser::DEFAULT_MAX_EVENT_BYTES + 1], &mut Vec::new()).unwrap_err();
        assert!(err.contains("standalone stream"), "{err}");
    }
}
