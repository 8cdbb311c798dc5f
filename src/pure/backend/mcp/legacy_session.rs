//! One legacy HTTP+SSE session kept across requests (the shell's `LegacySession` Durable
//! Object holds its event stream): what a message on the shared stream belongs to, the errors
//! the upstream gets for requests no call can take, when an idle session ends, the object's
//! name, and the lines the object streams back to the isolate that asked.
//!
//! One stream carries the answers of every request of the session and whatever the upstream
//! sends on its own; only responses and progress say which request they are about. So a log
//! message or a request of the upstream's goes to the call in flight only when there is
//! exactly one; otherwise it cannot be placed, and a request is refused at once with the reason
//! (no upstream request may wait on Flowgate's silence).

use crate::json;
use serde_json::Value;

use crate::pure::protocol::jsonrpc::METHOD_NOT_FOUND;
use crate::pure::sse::{read_json, SseParser};

/// How long a session with no call is kept before its stream is closed (5 minutes): long
/// enough for a conversation's pauses, short enough that idle callers hold no upstream stream.
pub const IDLE_MS: u64 = 300_000;

/// The Durable Object of one session: the app and the session scope (`binding::session_scope`:
/// origin, backend, caller, forwarded credentials), and the variant of the scope a later
/// dimension adds (the client's declared capabilities), empty for none.
pub fn object_name(app_id: &str, scope: &str, variant: &str) -> String {
    if variant.is_empty() {
        format!("legacy:{app_id}:{scope}")
    } else {
        format!("legacy:{app_id}:{scope}:{variant}")
    }
}

/// Whether a session last used at `last_used_ms` has been idle for its bound at `now_ms`.
pub fn is_idle(last_used_ms: u64, now_ms: u64, idle_ms: u64) -> bool {
    now_ms.saturating_sub(last_used_ms) >= idle_ms
}

/// One call in flight on the session: the id its request went upstream under, and the
/// client's progress token. Upstream, the token is the call's id ([`Calls::start`]): two
/// clients of one caller may both use `1`, and progress must still find its call.
#[derive(Debug, Clone, PartialEq)]
struct Flight {
    id: u64,
    progress_token: Option<Value>,
}

/// The calls in flight on one session, and the ids given to its requests.
#[derive(Debug, Default)]
pub struct Calls {
    flights: Vec<Flight>,
    next_id: u64,
}

/// Where one message of the shared stream goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// To the call whose request went up as this id: a notification or a request of the
    /// upstream's for it, relayed or refused by that call.
    To(u64, Value),
    /// The call's response: the call ends with it.
    Done(u64, Value),
    /// Answered by Flowgate at once: posted back to the upstream's endpoint.
    Answer(Value),
    /// Belongs to no call and asks nothing (a response to a call that ended, a notification
    /// with no call to show it to).
    Drop,
}

impl Calls {
    /// A new request of the session: the id it goes upstream under, which is also the
    /// progress token it carries upstream when the client gave one (restored on the way back).
    pub fn start(&mut self, progress_token: Option<Value>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.flights.push(Flight { id, progress_token });
        id
    }

    /// The request `id` ended (answered, timed out, or its caller went away).
    pub fn end(&mut self, id: u64) {
        self.flights.retain(|f| f.id != id);
    }

    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The one call in flight, if there is exactly one.
    fn only(&self) -> Option<u64> {
        match self.flights.as_slice() {
            [f] => Some(f.id),
            _ => None,
        }
    }

    /// Where `message` (one JSON-RPC message from the stream) goes.
    pub fn route(&self, message: &Value) -> Route {
        let Some(obj) = message.as_object() else { return Route::Drop };
        let id = obj.get("id").filter(|i| !i.is_null());
        if let Some(method) = obj.get("method").and_then(Value::as_str) {
            return match id {
                Some(_) => self.route_request(message, method),
                None => self.route_notification(message, method),
            };
        }
        if !(obj.contains_key("result") || obj.contains_key("error")) {
            return Route::Drop;
        }
        match id {
            Some(id) => match id.as_u64().filter(|n| self.flights.iter().any(|f| f.id == *n)) {
                Some(n) => Route::Done(n, message.clone()),
                None => Route::Drop,
            },
            // An error with no id is the upstream refusing a request it could not read: the
            // call's, when only one could have sent it.
            None if obj.contains_key("error") => match self.only() {
                Some(n) => Route::Done(n, message.clone()),
                None => Route::Drop,
            },
            None => Route::Drop,
        }
    }

    fn route_request(&self, message: &Value, method: &str) -> Route {
        // A liveness check of the session itself: the object is its client, and alive.
        if method == "ping" {
            return Route::Answer(json!({"jsonrpc": "2.0", "id": message["id"], "result": {}}));
        }
        match (self.only(), self.in_flight()) {
            (Some(n), _) => Route::To(n, message.clone()),
            (None, 0) => Route::Answer(refusal(message, &no_call(method))),
            (None, n) => Route::Answer(refusal(message, &several_calls(method, n))),
        }
    }

    fn route_notification(&self, message: &Value, method: &str) -> Route {
        if method == "notifications/progress" {
            let token = message.pointer("/params/progressToken").and_then(Value::as_u64);
            let owner = self.flights.iter().find(|f| Some(f.id) == token);
            let Some((id, Some(theirs))) = owner.map(|f| (f.id, f.progress_token.clone())) else { return Route::Drop };
            let mut m = message.clone();
            m["params"]["progressToken"] = theirs;
            return Route::To(id, m);
        }
        match self.only() {
            Some(n) => Route::To(n, message.clone()),
            None => Route::Drop,
        }
    }
}

/// The error the upstream gets for a request of its own no call can take.
pub fn refusal(request: &Value, why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {"code": METHOD_NOT_FOUND, "message": why},
    })
}

fn method_words(method: &str) -> String {
    crate::pure::quote::quote_input(method)
}

/// Why a request of the upstream's is refused when no call runs on the session.
pub fn no_call(method: &str) -> String {
    format!(
        "Flowgate cannot take {}: no call is running on this session, so there is no client to ask \
         (Flowgate relays requests only while the call they belong to runs)",
        method_words(method)
    )
}

/// Why it is refused when several calls run on the session.
pub fn several_calls(method: &str, n: usize) -> String {
    format!(
        "Flowgate cannot relay {}: {n} calls are running on this session and the legacy HTTP+SSE \
         transport does not say which one asked, so it is relayed only while one call runs",
        method_words(method)
    )
}

/// One thing the legacy stream said.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The `endpoint` event's data (the first one only: a later one cannot redirect the posts).
    Endpoint(String),
    /// One JSON-RPC message (a batch is split).
    Message(Value),
}

/// Reads the session's event stream, chunk by chunk, into [`StreamEvent`]s.
pub struct StreamReader {
    parser: SseParser,
    endpoint_seen: bool,
}

impl Default for StreamReader {
    fn default() -> Self {
        StreamReader { parser: SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES), endpoint_seen: false }
    }
}

impl StreamReader {
    /// The events a chunk completes. A message that is not JSON is an error: the stream is
    /// broken and the session is given up.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<StreamEvent>, String> {
        let mut out = Vec::new();
        let mut failed = None;
        let endpoint_seen = &mut self.endpoint_seen;
        let fed = self.parser.feed_each(chunk, |e| match e.event {
            "endpoint" if !*endpoint_seen => {
                *endpoint_seen = true;
                out.push(StreamEvent::Endpoint(e.data_text().trim().to_string()));
            }
            "" | "message" if !e.data.trim_ascii().is_empty() => match read_json::<Value>(e.data) {
                Ok(Value::Array(items)) => out.extend(items.into_iter().map(StreamEvent::Message)),
                Ok(v) => out.push(StreamEvent::Message(v)),
                Err(err) => failed = Some(format!("the upstream sent an event that is not JSON ({err})")),
            },
            _ => {}
        });
        fed.map_err(|e| format!("upstream stream: {e}"))?;
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// One line the object streams back for a request (newline-delimited JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// First: the session the request went on (as stored: `session::Session`'s JSON), the
    /// endpoint messages go to, the id the request went up under, and whether the session was
    /// opened for this request (and when it replaced one, why that one ended).
    Opened { session: Value, endpoint: String, id: u64, new: bool, ended: Option<String> },
    /// A notification or a request of the upstream's for this call.
    Message(Value),
    /// The response: the last line.
    Response(Value),
    /// The request failed (in words); the last line.
    Failed(String),
}

impl Line {
    /// The line's text, newline included.
    pub fn encode(&self) -> Vec<u8> {
        let v = match self {
            Line::Opened { session, endpoint, id, new, ended } => {
                json!({"opened": {"session": session, "endpoint": endpoint, "id": id, "new": new, "ended": ended}})
            }
            Line::Message(m) => json!({"message": m}),
            Line::Response(r) => json!({"response": r}),
            Line::Failed(why) => json!({"error": why}),
        };
        crate::pure::lines::encode(&v)
    }

    fn decode(text: &str) -> Result<Line, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("the session object sent a bad line ({e})"))?;
        if let Some(o) = v.get("opened") {
            let endpoint = o["endpoint"].as_str().unwrap_or_default().to_string();
            let id = o["id"].as_u64().ok_or("the session object sent no request id")?;
            let ended = o["ended"].as_str().map(str::to_string);
            return Ok(Line::Opened { session: o["session"].clone(), endpoint, id, new: o["new"] == true, ended });
        }
        if let Some(m) = v.get("message") {
            return Ok(Line::Message(m.clone()));
        }
        if let Some(r) = v.get("response") {
            return Ok(Line::Response(r.clone()));
        }
        match v.get("error").and_then(Value::as_str) {
            Some(why) => Ok(Line::Failed(why.to_string())),
            None => Err("the session object sent a line Flowgate does not know".into()),
        }
    }
}

/// Splits the object's answer into [`Line`]s as its chunks arrive.
#[derive(Debug, Default)]
pub struct LineReader {
    lines: crate::pure::lines::Lines,
}

impl LineReader {
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Line>, String> {
        self.lines.feed(chunk).iter().map(|l| Line::decode(l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str, method: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
    }

    #[test]
    fn responses_go_to_the_call_whose_id_they_carry() {
        let mut calls = Calls::default();
        let a = calls.start(None);
        let b = calls.start(None);
        assert_ne!(a, b);
        let ra = json!({"jsonrpc": "2.0", "id": a, "result": {}});
        let rb = json!({"jsonrpc": "2.0", "id": b, "error": {"code": -1, "message": "no"}});
        assert_eq!(calls.route(&ra), Route::Done(a, ra.clone()));
        assert_eq!(calls.route(&rb), Route::Done(b, rb.clone()));
        // A call that ended gets nothing more; nor does an id of another type.
        calls.end(a);
        assert_eq!(calls.route(&ra), Route::Drop);
        assert_eq!(calls.route(&json!({"jsonrpc": "2.0", "id": b.to_string(), "result": {}})), Route::Drop);
        assert_eq!(calls.in_flight(), 1);
    }

    #[test]
    fn an_error_without_an_id_is_the_only_calls() {
        let mut calls = Calls::default();
        let e = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}});
        assert_eq!(calls.route(&e), Route::Drop);
        let a = calls.start(None);
        assert_eq!(calls.route(&e), Route::Done(a, e.clone()));
        calls.start(None);
        assert_eq!(calls.route(&e), Route::Drop);
    }

    #[test]
    fn a_request_of_the_upstreams_goes_to_the_only_call_and_is_refused_otherwise() {
        let mut calls = Calls::default();
        let roots = request("s-1", "roots/list");
        let Route::Answer(none) = calls.route(&roots) else { panic!("not refused with no call") };
        assert_eq!(none["id"], "s-1");
        assert_eq!(none["error"]["code"], METHOD_NOT_FOUND);
        let why = none["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("roots/list") && why.contains("no call is running"), "{why}");

        let a = calls.start(None);
        assert_eq!(calls.route(&roots), Route::To(a, roots.clone()));

        calls.start(None);
        let Route::Answer(two) = calls.route(&roots) else { panic!("not refused with two calls") };
        let why = two["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("2 calls are running") && why.contains("roots/list"), "{why}");
    }

    #[test]
    fn ping_is_answered_by_the_session_itself() {
        let mut calls = Calls::default();
        let ping = request("p", "ping");
        let want = Route::Answer(json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
        assert_eq!(calls.route(&ping), want);
        calls.start(None);
        assert_eq!(calls.route(&ping), want);
    }

    #[test]
    fn progress_goes_by_its_token_and_other_notifications_to_the_only_call() {
        let mut calls = Calls::default();
        let log =
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}});
        assert_eq!(calls.route(&log), Route::Drop);
        let a = calls.start(Some(json!("tok-a")));
        assert_eq!(calls.route(&log), Route::To(a, log.clone()));
        let b = calls.start(Some(json!(7)));
        assert_eq!(calls.route(&log), Route::Drop, "a log among two calls cannot be placed");
        let progress = |t: Value| json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}});
        // Upstream, each call's token is its id; the client's own comes back.
        assert_eq!(calls.route(&progress(json!(b))), Route::To(b, progress(json!(7))));
        assert_eq!(calls.route(&progress(json!(a))), Route::To(a, progress(json!("tok-a"))));
        assert_eq!(calls.route(&progress(json!("tok-a"))), Route::Drop, "the client's token is not what goes upstream");
        assert_eq!(calls.route(&progress(json!(99))), Route::Drop);
        // Two calls with the same client token are still told apart.
        let c = calls.start(Some(json!(7)));
        assert_eq!(calls.route(&progress(json!(c))), Route::To(c, progress(json!(7))));
        // A call without a token gets no progress, not even under its id.
        calls.end(a);
        calls.end(b);
        calls.end(c);
        let d = calls.start(None);
        assert_eq!(calls.route(&progress(json!(d))), Route::Drop);
        assert_eq!(calls.route(&json!("not a message")), Route::Drop);
        assert_eq!(calls.route(&json!({"jsonrpc": "2.0", "id": 1})), Route::Drop);
    }

    #[test]
    fn idle_bound_and_object_names() {
        assert!(!is_idle(1_000, 1_000 + IDLE_MS - 1, IDLE_MS));
        assert!(is_idle(1_000, 1_000 + IDLE_MS, IDLE_MS));
        assert!(!is_idle(5_000, 1_000, IDLE_MS), "a clock behind the last use is not idle");
        assert_eq!(object_name("app1", "abc", ""), "legacy:app1:abc");
        assert_eq!(object_name("app1", "abc", "caps1"), "legacy:app1:abc:caps1");
        assert_ne!(object_name("app1", "abc", ""), object_name("app1", "abd", ""));
    }

    #[test]
    fn the_stream_gives_its_endpoint_once_and_its_messages_split_anywhere() {
        let text = concat!(
            ": hello\n\n",
            "event: endpoint\ndata: /messages?sessionId=1\n\n",
            "event: endpoint\ndata: https://evil.example/m\n\n",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            "data: [{\"jsonrpc\":\"2.0\",\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"method\":\"b\"}]\n\n",
            "event: other\ndata: {}\n\n",
        );
        let want = vec![
            StreamEvent::Endpoint("/messages?sessionId=1".into()),
            StreamEvent::Message(json!({"jsonrpc":"2.0","id":1,"result":{}})),
            StreamEvent::Message(json!({"jsonrpc":"2.0","method":"a"})),
            StreamEvent::Message(json!({"jsonrpc":"2.0","method":"b"})),
        ];
        for split in 0..=text.len() {
            let mut r = StreamReader::default();
            let mut got = r.feed(&text.as_bytes()[..split]).unwrap();
            got.extend(r.feed(&text.as_bytes()[split..]).unwrap());
            assert_eq!(got, want, "split at {split}");
        }
        let mut r = StreamReader::default();
        assert!(r.feed(b"data: {nope\n\n").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn lines_round_trip_whatever_the_chunks() {
        let lines = vec![
            Line::Opened {
                session: json!({"transport": "sse"}),
                endpoint: "https://u.test/m?s=1".into(),
                id: 4,
                new: true,
                ended: Some("idle for 300 s".into()),
            },
            Line::Opened { session: json!({}), endpoint: "https://u.test/m".into(), id: 5, new: false, ended: None },
            Line::Message(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "é\n"}})),
            Line::Response(json!({"jsonrpc": "2.0", "id": 4, "result": {}})),
            Line::Failed("the upstream closed its stream".into()),
        ];
        let bytes: Vec<u8> = lines.iter().flat_map(Line::encode).collect();
        for split in 0..=bytes.len() {
            let mut r = LineReader::default();
            let mut got = r.feed(&bytes[..split]).unwrap();
            got.extend(r.feed(&bytes[split..]).unwrap());
            assert_eq!(got, lines, "split at {split}");
        }
        let mut r = LineReader::default();
        assert!(r.feed(b"{\"what\":1}\n").is_err());
        assert!(r.feed(b"not json\n").is_err());
    }
}
