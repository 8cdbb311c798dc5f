//! Reading an upstream MCP server's answer to one request, whatever its form (a JSON body, one
//! message or a batch; or an SSE stream, chunk by chunk): the notifications and server requests
//! that come first, then the response; and what a response or a server request comes to.

use serde_json::Value;

use crate::pure::sse::{read_json, SseEventRef, SseParser};

use super::error::upstream_error_message;

/// One message from the upstream while waiting for a response.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// Progress, log messages and the like: relayed or dropped by the caller.
    Notification(Value),
    /// A request from the server (sampling, elicitation, roots): relayed to the client or
    /// refused by the caller (`mcp::relay`).
    ServerRequest(Value),
    /// The response to the awaited request: a `result` or an `error`.
    Response(Value),
}

enum Kind {
    Notification,
    ServerRequest,
    Response,
}

/// Reads one upstream answer to request `id`, whatever its form: a JSON body (one object, or a
/// batch array) or an SSE stream fed chunk by chunk. Notifications and server requests that
/// arrive before the response are returned in order; responses to other ids are ignored, and
/// so is everything after the response.
pub struct ReplyReader {
    id: Value,
    parser: SseParser,
    done: bool,
    endpoint: Option<String>,
    last_event_id: Option<String>,
    retry_ms: Option<u64>,
}

impl ReplyReader {
    /// A reader for the answer to request `id`, with the SSE parser's default event cap.
    pub fn new(id: Value) -> Self {
        Self::with_max_event_bytes(id, SseParser::DEFAULT_MAX_EVENT_BYTES)
    }

    /// The same, with another cap on one SSE event (bounds memory per upstream stream).
    pub fn with_max_event_bytes(id: Value, max: usize) -> Self {
        ReplyReader {
            id,
            parser: SseParser::new(max),
            done: false,
            endpoint: None,
            last_event_id: None,
            retry_ms: None,
        }
    }

    /// Waits for another request on the same stream (the legacy transport's one GET stream
    /// carries every response), keeping the parser state.
    pub fn expect(&mut self, id: Value) {
        self.id = id;
        self.done = false;
    }

    /// Feeds the next chunk of an SSE answer; messages are pushed to `out` as they complete.
    pub fn feed_sse(&mut self, chunk: &[u8], out: &mut Vec<Incoming>) -> Result<(), String> {
        // The parser is taken out while it hands events to `self.event`, which needs `self`.
        let mut parser = std::mem::take(&mut self.parser);
        let mut read = Ok(());
        let fed = parser.feed_each(chunk, |e| {
            if read.is_ok() {
                read = self.event(e, out);
            }
        });
        self.parser = parser;
        read?;
        fed.map_err(|e| format!("upstream stream: {e}"))
    }

    /// End of the SSE stream. Fails when it ended without the response, unless the stream gave
    /// an event id to resume from (2025-11-25 polling): then [`ReplyReader::resume`] says how.
    pub fn finish_sse(&mut self, out: &mut Vec<Incoming>) -> Result<(), String> {
        let mut parser = std::mem::take(&mut self.parser);
        let mut read = Ok(());
        let finished = parser.finish_each(|e| {
            if read.is_ok() {
                read = self.event(e, out);
            }
        });
        self.parser = parser;
        read?;
        finished.map_err(|e| format!("upstream stream: {e}"))?;
        if self.done || self.last_event_id.is_some() {
            Ok(())
        } else {
            Err(format!("the upstream closed its event stream before answering request {}", self.id))
        }
    }

    /// A JSON answer (the whole body): one message or a batch array. Fails when it holds no
    /// response to the awaited request, since nothing more will come.
    pub fn json_body(&self, body: &str) -> Result<Vec<Incoming>, String> {
        if body.trim().is_empty() {
            return Err(format!("the upstream answered request {} with an empty body", self.id));
        }
        let v: Value = serde_json::from_str(body)
            .map_err(|e| format!("the upstream's answer to request {} is not JSON ({e})", self.id))?;
        let items = match v {
            Value::Array(items) => items,
            other => vec![other],
        };
        let mut out = Vec::new();
        for m in items {
            match self.classify(&m) {
                Some(Kind::Response) => {
                    out.push(Incoming::Response(m));
                    return Ok(out);
                }
                Some(kind) => out.push(wrap(kind, m)),
                None => {}
            }
        }
        Err(format!("the upstream's answer holds no response to request {}", self.id))
    }

    /// The response has arrived; the caller may stop reading.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The legacy transport's `endpoint` event data, once seen (see [`resolve_endpoint`](super::legacy_sse::resolve_endpoint)).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// When a stream ended early but can be resumed: the last event id (for `Last-Event-ID`)
    /// and how long to wait first: the server's `retry` (SEP-1699: clients must honour it),
    /// else 1 s; at most a minute, so a huge hint cannot park a call.
    pub fn resume(&self) -> Option<(&str, u64)> {
        if self.done {
            return None;
        }
        self.last_event_id.as_deref().map(|id| (id, self.retry_ms.unwrap_or(1000).min(60_000)))
    }

    fn event(&mut self, e: SseEventRef<'_>, out: &mut Vec<Incoming>) -> Result<(), String> {
        if let Some(id) = e.id {
            self.last_event_id = if id.is_empty() { None } else { Some(id.to_string()) };
        }
        if e.retry.is_some() {
            self.retry_ms = e.retry;
        }
        match e.event {
            // The first one counts: a later one cannot redirect the session's posts.
            "endpoint" if self.endpoint.is_none() => self.endpoint = Some(e.data_text().trim().to_string()),
            "" | "message" if !self.done && !e.data.trim_ascii().is_empty() => {
                let v: Value =
                    read_json(e.data).map_err(|err| format!("the upstream sent an event that is not JSON ({err})"))?;
                let items = match v {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                for m in items {
                    match self.classify(&m) {
                        Some(Kind::Response) => {
                            self.done = true;
                            out.push(Incoming::Response(m));
                            break;
                        }
                        Some(kind) => out.push(wrap(kind, m)),
                        None => {}
                    }
                }
            }
            // Priming events (empty data) and event types MCP does not define.
            _ => {}
        }
        Ok(())
    }

    fn classify(&self, m: &Value) -> Option<Kind> {
        let obj = m.as_object()?;
        let id = obj.get("id").filter(|i| !i.is_null());
        if obj.get("method").is_some_and(Value::is_string) {
            return Some(if id.is_some() { Kind::ServerRequest } else { Kind::Notification });
        }
        let is_error = obj.contains_key("error");
        let is_response = is_error || obj.contains_key("result");
        match id {
            Some(id) if is_response && *id == self.id => Some(Kind::Response),
            // An error without an id is the server refusing a request it could not read: ours.
            None if is_error => Some(Kind::Response),
            _ => None,
        }
    }
}

fn wrap(kind: Kind, m: Value) -> Incoming {
    match kind {
        Kind::Notification => Incoming::Notification(m),
        Kind::ServerRequest => Incoming::ServerRequest(m),
        Kind::Response => Incoming::Response(m),
    }
}

/// The result of a response, or its error in words (see [`upstream_error_message`]).
pub fn response_result(app: &str, response: &Value) -> Result<Value, String> {
    if let Some(e) = response.get("error") {
        return Err(upstream_error_message(app, e));
    }
    response
        .get("result")
        .cloned()
        .ok_or_else(|| format!("upstream {app} sent a response with neither result nor error"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SAMPLE: &str = concat!(
        ": keep-alive\n\n",
        "id: ev-0\ndata:\n\n",
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"sampling/createMessage\",\"params\":{}}\r\n\r\n",
        "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\r\ndata: \"params\":{\"level\":\"info\",\"data\":\"é\"}}\r\n\r\n",
        "data: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n\n",
        "id: ev-5\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":2}}\n\n",
    );

    fn expected() -> Vec<Incoming> {
        vec![
            Incoming::Notification(
                json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}),
            ),
            Incoming::ServerRequest(
                json!({"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}),
            ),
            Incoming::Notification(
                json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"é"}}),
            ),
            Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}})),
        ]
    }

    #[test]
    fn sse_answer_split_at_every_byte() {
        let bytes = SAMPLE.as_bytes();
        for split in 0..=bytes.len() {
            let mut r = ReplyReader::new(json!(7));
            let mut out = Vec::new();
            r.feed_sse(&bytes[..split], &mut out).unwrap();
            r.feed_sse(&bytes[split..], &mut out).unwrap();
            r.finish_sse(&mut out).unwrap();
            assert_eq!(out, expected(), "split at {split}");
            assert!(r.is_done());
            assert_eq!(r.resume(), None);
        }
        // And one byte at a time.
        let mut r = ReplyReader::new(json!(7));
        let mut out = Vec::new();
        for b in bytes {
            r.feed_sse(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert!(r.is_done());
        r.finish_sse(&mut out).unwrap();
        assert_eq!(out, expected());
    }

    #[test]
    fn sse_answer_that_ends_early() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        r.feed_sse(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n", &mut out).unwrap();
        assert!(!r.is_done());
        let err = r.finish_sse(&mut out).unwrap_err();
        assert!(err.contains("request 1"), "{err}");
        assert_eq!(out.len(), 1);

        // A priming event with an id and retry: resumable, so not an error yet.
        let mut r = ReplyReader::new(json!(1));
        r.feed_sse(b"id: p-1\nretry: 2500\ndata:\n\n", &mut out).unwrap();
        r.finish_sse(&mut out).unwrap();
        assert_eq!(r.resume(), Some(("p-1", 2500)));
        // The resumed stream (after GET with Last-Event-ID) goes into the same reader.
        r.feed_sse(b"id: p-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &mut out).unwrap();
        r.finish_sse(&mut out).unwrap();
        assert!(r.is_done());
        assert_eq!(r.resume(), None);
        assert_eq!(out.last(), Some(&Incoming::Response(json!({"jsonrpc":"2.0","id":1,"result":{}}))));
        // No retry hint: 1 s; a huge one is capped at a minute.
        let mut r = ReplyReader::new(json!(1));
        r.feed_sse(b"id: a\ndata:\n\n", &mut out).unwrap();
        assert_eq!(r.resume(), Some(("a", 1000)));
        r.feed_sse(b"id: b\nretry: 99999999\ndata:\n\n", &mut out).unwrap();
        assert_eq!(r.resume(), Some(("b", 60_000)));
    }

    #[test]
    fn sse_message_with_a_stray_byte_arrives_with_a_replacement_character() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        r.feed_sse(b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"a\xFFb\"}}\n\n", &mut out).unwrap();
        assert_eq!(out, [Incoming::Response(json!({"jsonrpc":"2.0","id":1,"result":{"t":"a\u{FFFD}b"}}))]);
    }

    #[test]
    fn sse_errors() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        assert!(r.feed_sse(b"data: {not json\n\n", &mut out).unwrap_err().contains("not JSON"));
        let mut r = ReplyReader::with_max_event_bytes(json!(1), 16);
        let err = r.feed_sse(&[b'a'; 64], &mut out).unwrap_err();
        assert!(err.contains("16 bytes"), "{err}");
    }

    #[test]
    fn legacy_stream_endpoint_and_many_requests() {
        let mut r = ReplyReader::new(json!(1));
        let mut out = Vec::new();
        r.feed_sse(b"event: endpoint\ndata: /messages?sessionId=abc\n\n", &mut out).unwrap();
        assert_eq!(r.endpoint(), Some("/messages?sessionId=abc"));
        assert!(out.is_empty() && !r.is_done());
        r.feed_sse(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", &mut out).unwrap();
        assert!(r.is_done());
        r.expect(json!(2));
        assert!(!r.is_done());
        r.feed_sse(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-1,\"message\":\"m\"}}\n\n",
            &mut out,
        )
        .unwrap();
        assert!(r.is_done());
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn json_bodies() {
        let r = ReplyReader::new(json!(7));
        let ok = r.json_body(r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#).unwrap();
        assert_eq!(ok, vec![Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{"tools":[]}}))]);

        let batch = r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{}},
                       {"jsonrpc":"2.0","id":6,"result":{}},
                       {"jsonrpc":"2.0","id":"s","method":"roots/list"},
                       {"jsonrpc":"2.0","id":7,"result":{}},
                       {"jsonrpc":"2.0","method":"notifications/progress"}]"#;
        let got = r.json_body(batch).unwrap();
        assert_eq!(got.len(), 3);
        assert!(matches!(got[0], Incoming::Notification(_)));
        assert!(matches!(got[1], Incoming::ServerRequest(_)));
        assert_eq!(got[2], Incoming::Response(json!({"jsonrpc":"2.0","id":7,"result":{}})));

        let err = r.json_body(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#).unwrap_err();
        assert!(err.contains("no response to request 7"), "{err}");
        let string_id = r.json_body(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#);
        assert!(string_id.is_err(), "an id of another type is another id");

        let e = r.json_body(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}"#).unwrap();
        let Incoming::Response(resp) = &e[0] else { panic!("{e:?}") };
        assert_eq!(response_result("gh", resp).unwrap_err(), "upstream gh said: bad (code -32602)");
        // The server could not read our request: an error with a null id is still our answer.
        let e = r.json_body(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#).unwrap();
        assert!(matches!(e[0], Incoming::Response(_)));

        assert!(r.json_body("").unwrap_err().contains("empty body"));
        assert!(r.json_body("<html>").unwrap_err().contains("not JSON"));
        assert!(!r.is_done(), "json_body does not change the reader");
    }

    #[test]
    fn response_results_and_refusals() {
        assert_eq!(response_result("a", &json!({"id": 1, "result": {"x": 1}})), Ok(json!({"x": 1})));
        assert!(response_result("a", &json!({"id": 1})).unwrap_err().contains("neither"));
    }
}
