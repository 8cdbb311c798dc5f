//! The call bridge: a 2026-07-28 client calls a tool of a 2025 upstream that asks for input
//! mid-call (`sampling/createMessage`, `elicitation/create`, `roots/list`). The 2026-07-28
//! revision has no server-to-client requests: a server answers `resultType: "input_required"`
//! with `inputRequests`, and the client retries the same request with `inputResponses` and the
//! `requestState`. One Durable Object per call (`shell::backend::mcp::bridge`) holds the
//! upstream call open across those retries; this is what it decides:
//!
//! - [`Bridge`]: the call's rounds. The upstream's requests are queued; a round hands the queued
//!   ones to the client under keys; the client's answer for the open round becomes JSON-RPC
//!   responses under the upstream's own ids; an answer for a round already answered, or for a
//!   call that ended, is refused.
//! - The `requestState` the client gets: `fg-bridge.` + AES-256-GCM over the call's binding (as
//!   `input_required` states: server, app, tool, forwarded credentials, caller, expiry), the
//!   object's name and the round.
//! - [`Op`] and [`Reply`]: what the Worker and the object say to each other; the object's answer
//!   is [`Line`]s: the notifications of the call the client's request takes ([`Notes`]) as they
//!   come, then the reply.

use crate::json;
use serde_json::{Map, Value};

use super::input_required::{self as ir, Bind};
use super::server::{self, CallPlan};
use crate::pure::definition::AppDefinition;
use crate::pure::fields::{self, Fields};
use crate::pure::protocol::jsonrpc::RpcError;
use crate::pure::protocol::methods;

/// How a bridged call's `requestState` starts.
pub const STATE_PREFIX: &str = "fg-bridge.";

/// Whether a client's round-trip params (`input_required::client_params`) continue a bridged call.
pub fn continues_bridge(input: &Map<String, Value>) -> bool {
    input.get("requestState").and_then(Value::as_str).is_some_and(|s| s.starts_with(STATE_PREFIX))
}

/// The `requestState` of round `round` of the call held by object `object`, valid until
/// `expires_ms`.
pub fn seal_state(
    key: &[u8; 32],
    nonce: [u8; 12],
    bind: Bind,
    object: &str,
    round: u32,
    expires_ms: u64,
) -> Result<String, RpcError> {
    ir::seal_bound(STATE_PREFIX, key, nonce, bind, expires_ms, &[json!(object), json!(round)])
}

/// The object and round a retry's `requestState` names; `Err` is the `-32602` the client gets
/// for a state Flowgate did not give, gave for another request or client, or that expired.
pub fn open_state(token: &str, keys: &[[u8; 32]], bind: Bind, now_ms: u64) -> Result<(String, u32), RpcError> {
    let expired = "`requestState` has expired: the client did not answer within the tool's tool_call_timeout, and \
                   the upstream call was given up; call the tool again";
    let extra = ir::open_bound(STATE_PREFIX, keys, token, bind, now_ms, 2, expired)?;
    match (extra[0].as_str(), extra[1].as_u64().and_then(|r| u32::try_from(r).ok())) {
        (Some(object), Some(round)) => Ok((object.to_string(), round)),
        _ => Err(RpcError::new(
            200,
            crate::pure::protocol::jsonrpc::INVALID_PARAMS,
            "Invalid params: `requestState` is not one Flowgate gave",
        )),
    }
}

/// Where a request of the upstream's came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Came {
    /// On the call's own stream: it ends with the call (its result, or the
    /// `notifications/cancelled` a given-up call gets).
    WithCall,
    /// On the session's standalone stream, related to no request: nothing ends it but an
    /// answer, so one that can no longer reach the client is refused ([`Bridge::unanswerable`]).
    Beside,
}

/// One request of the upstream's, waiting for the client.
#[derive(Debug, Clone, PartialEq)]
struct Asked {
    key: String,
    upstream_id: Value,
    method: String,
    params: Value,
    came: Came,
}

/// What the object answers the Worker, for the client's request (the first call, or a retry).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The upstream asks: round `round`'s `inputRequests`, answerable until `expires_ms`.
    Ask { round: u32, requests: Map<String, Value>, expires_ms: u64 },
    /// The upstream's JSON-RPC response to the call.
    Final(Value),
    /// The call failed or ended: why, for a tool error.
    Failed(String),
    /// The retry is refused (`-32602`): why, in words the client can act on.
    Refused(String),
}

impl Reply {
    pub fn to_json(&self) -> Value {
        match self {
            Reply::Ask { round, requests, expires_ms } => {
                json!({"ask": {"round": round, "inputRequests": requests, "expires": expires_ms}})
            }
            Reply::Final(v) => json!({ "final": v }),
            Reply::Failed(why) => json!({ "failed": why }),
            Reply::Refused(why) => json!({ "refused": why }),
        }
    }

    pub fn from_json(v: Value) -> Result<Reply, String> {
        fields::read_with(v, |f: &mut Fields| {
            if let Some(ask) = f.opt_value("ask") {
                return fields::read_with(ask, |a: &mut Fields| {
                    Ok(Reply::Ask {
                        round: a.uint32("round")?,
                        requests: a.members("inputRequests")?,
                        expires_ms: a.uint("expires")?,
                    })
                });
            }
            if let Some(v) = f.opt_value("final") {
                return Ok(Reply::Final(v));
            }
            if let Some(why) = f.opt_text("failed")? {
                return Ok(Reply::Failed(why));
            }
            Ok(Reply::Refused(f.text("refused")?))
        })
    }
}

/// What one client request of a bridged call (the first, or a retry: each has its own `_meta`)
/// takes of the notifications the upstream sends while it is open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Notes {
    /// The request's `progressToken` (`None`: no progress).
    pub progress_token: Option<Value>,
    /// The least severe log level it takes (`None`: no log messages).
    pub log_level: Option<&'static str>,
}

impl Notes {
    pub fn of(plan: &CallPlan) -> Notes {
        Notes { progress_token: plan.progress_token.clone(), log_level: plan.log_level }
    }

    /// What the client gets of `note`, a notification of the upstream's during the call that went
    /// up with progress token `call_token` (the first request's): that call's progress, under
    /// this request's own token; a log message at or above this request's level. `None` for
    /// anything else (another request's progress, list changes, …), as in any call.
    pub fn for_client(&self, note: &Value, call_token: Option<&Value>) -> Option<Value> {
        match note.get("method").and_then(Value::as_str)? {
            methods::PROGRESS => {
                let token = self.progress_token.as_ref()?;
                if call_token.is_none() || note.pointer("/params/progressToken") != call_token {
                    return None;
                }
                let mut n = note.clone();
                n["params"]["progressToken"] = token.clone();
                Some(n)
            }
            methods::MESSAGE => {
                let level = note.pointer("/params/level").and_then(Value::as_str).unwrap_or("info");
                server::log_reaches(self.log_level, level).then(|| note.clone())
            }
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        json!({"progress": self.progress_token, "log": self.log_level})
    }

    fn read(f: &mut Fields) -> Result<Notes, String> {
        let progress_token = f.opt_value("progress").filter(|p| !p.is_null());
        let log_level = f.opt_text("log")?.as_deref().and_then(server::log_level);
        Ok(Notes { progress_token, log_level })
    }
}

/// One line of the object's answer to a client request: a notification for the client, as it
/// came, or the reply (the last line).
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Note(Value),
    Reply(Reply),
}

impl Line {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Line::Note(n) => crate::pure::lines::encode(&json!({ "note": n })),
            Line::Reply(r) => crate::pure::lines::encode(&r.to_json()),
        }
    }

    pub fn decode(text: &str) -> Result<Line, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("a line that is not JSON ({e})"))?;
        match v.get("note") {
            Some(n) => Ok(Line::Note(n.clone())),
            None => Reply::from_json(v).map(Line::Reply),
        }
    }
}

/// A bridged call as the Worker hands it to its object: the app, the upstream tool and what the
/// call sends it, the client's headers (for forwarded credentials; kept in memory only), and how
/// long the call and each wait for the client may take.
#[derive(Debug, Clone)]
pub struct Start {
    pub app: AppDefinition,
    pub tool: String,
    pub arguments: Value,
    /// The client's round-trip params (`input_required::client_params`): its capabilities.
    pub input: Map<String, Value>,
    /// The call's `Mcp-Param-*` headers.
    pub params: Vec<(String, String)>,
    /// What the first request takes; its progress token is the one the upstream call gets.
    pub notes: Notes,
    pub incoming: Vec<(String, String)>,
    pub timeout_ms: u64,
}

/// What the Worker asks of a call's object.
#[derive(Debug, Clone)]
pub enum Op {
    /// Start the upstream call; answers with the first round or the result.
    Start(Box<Start>),
    /// The client's `inputResponses` for round `round`; answers with the next round or the
    /// result, after the notifications the retry takes.
    Answer { round: u32, responses: Map<String, Value>, notes: Notes },
    /// The client went away: cancel the upstream call.
    Cancel,
}

fn pairs(list: &[(String, String)]) -> Value {
    Value::Array(list.iter().map(|(k, v)| json!([k, v])).collect())
}

fn read_notes(f: &mut Fields) -> Result<Notes, String> {
    fields::read_with(f.value("notes")?, Notes::read)
}

fn read_pairs(v: Vec<Value>) -> Vec<(String, String)> {
    v.iter().filter_map(|p| Some((p.get(0)?.as_str()?.to_string(), p.get(1)?.as_str()?.to_string()))).collect()
}

impl Op {
    pub fn to_json(&self) -> Value {
        match self {
            Op::Start(s) => json!({"op": "start", "app": s.app.to_value(), "tool": s.tool, "arguments": s.arguments,
                "input": s.input, "params": pairs(&s.params), "notes": s.notes.to_json(),
                "incoming": pairs(&s.incoming), "timeout": s.timeout_ms}),
            Op::Answer { round, responses, notes } => {
                json!({"op": "answer", "round": round, "responses": responses, "notes": notes.to_json()})
            }
            Op::Cancel => json!({"op": "cancel"}),
        }
    }

    pub fn from_json(v: Value) -> Result<Op, String> {
        fields::read_with(v, |f: &mut Fields| match f.text("op")?.as_str() {
            "start" => Ok(Op::Start(Box::new(Start {
                app: f.object("app")?,
                tool: f.text("tool")?,
                arguments: f.value("arguments")?,
                input: f.members("input")?,
                params: read_pairs(f.values("params")?),
                notes: read_notes(f)?,
                incoming: read_pairs(f.values("incoming")?),
                timeout_ms: f.uint("timeout")?,
            }))),
            "answer" => {
                Ok(Op::Answer { round: f.uint32("round")?, responses: f.members("responses")?, notes: read_notes(f)? })
            }
            "cancel" => Ok(Op::Cancel),
            other => Err(format!("unknown bridge operation {other}")),
        })
    }
}

/// Why a client's answer is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The round was answered already (a replayed or concurrent retry).
    Answered,
    /// The call ended (given up, failed, or its object restarted): why.
    Ended(String),
    /// The answer does not fit the round's requests; the round stays open.
    Invalid(String),
}

impl Refusal {
    /// The `-32602` message the client gets.
    pub fn message(&self) -> String {
        match self {
            Refusal::Answered => "`requestState` names a round of input that was answered already: retry with the \
                                  requestState of the latest input_required result"
                .into(),
            Refusal::Ended(why) => {
                format!("the upstream call this `requestState` continues has ended ({why}); call the tool again")
            }
            Refusal::Invalid(why) => format!("`inputResponses` {why}"),
        }
    }
}

/// The rounds of one bridged call.
#[derive(Debug, Clone, Default)]
pub struct Bridge {
    /// The latest round handed to the client (0: none yet).
    round: u32,
    /// Whether that round waits for the client's answer.
    open: bool,
    asked: Vec<Asked>,
    queued: Vec<Asked>,
    next_key: u32,
    done: Option<Reply>,
    /// Why the call ended without a result of the upstream's (given up, lost).
    ended: Option<String>,
}

impl Bridge {
    /// The upstream asked `request` (one the client declared the capability for), on the
    /// stream `came` says.
    pub fn upstream_asked(&mut self, request: &Value, came: Came) {
        let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = method.split('/').next().unwrap_or("input");
        self.next_key += 1;
        self.queued.push(Asked {
            key: format!("{kind}-{}", self.next_key),
            upstream_id: request.get("id").cloned().unwrap_or(Value::Null),
            method,
            params: request.get("params").cloned().unwrap_or_else(|| json!({})),
            came,
        });
    }

    /// The upstream call is over: `reply` is its result (`Final`) or why it failed (`Failed`).
    pub fn finished(&mut self, reply: Reply) {
        if self.done.is_none() {
            self.done = Some(reply);
        }
    }

    /// The call is given up (`why`; the first reason stands): a waiting or later retry is told so.
    pub fn end(&mut self, why: &str) {
        self.ended.get_or_insert_with(|| why.to_string());
        // The open round's requests will never be answered now: back with the unasked ones.
        if self.open {
            let mut stranded = std::mem::take(&mut self.asked);
            stranded.append(&mut self.queued);
            self.queued = stranded;
        }
        self.open = false;
        self.finished(Reply::Failed(why.to_string()));
    }

    /// What the client waiting now gets, if anything is due: a new round of the queued
    /// requests, the result, or nothing yet (`None`: wait). A round waiting for the client's
    /// answer gives nothing.
    pub fn next(&mut self, expires_ms: u64) -> Option<Reply> {
        if self.open {
            return None;
        }
        if let Some(done) = &self.done {
            return Some(done.clone());
        }
        if self.queued.is_empty() {
            return None;
        }
        self.round += 1;
        self.open = true;
        self.asked = std::mem::take(&mut self.queued);
        let requests =
            self.asked.iter().map(|a| (a.key.clone(), json!({"method": a.method, "params": a.params}))).collect();
        Some(Reply::Ask { round: self.round, requests, expires_ms })
    }

    /// The refusals (JSON-RPC errors under the upstream's ids) of the requests that came beside
    /// the call and will never reach the client now that it is over: those no round handed out
    /// (the call ended first) and, when it was given up, those of the round it left open. Each
    /// is given once; nothing while the call runs.
    pub fn unanswerable(&mut self) -> Vec<Value> {
        if self.done.is_none() {
            return Vec::new();
        }
        let why = match &self.ended {
            Some(why) => format!("the call it came during was given up ({why})"),
            None => "the call it came during ended before its client could be asked".to_string(),
        };
        let (beside, with_call) = std::mem::take(&mut self.queued).into_iter().partition(|a| a.came == Came::Beside);
        self.queued = with_call;
        beside
            .into_iter()
            .map(|a: Asked| {
                let request = json!({"jsonrpc": "2.0", "id": a.upstream_id, "method": a.method});
                super::relay::refusal(&request, &format!("Flowgate cannot put {} to its client: {why}", a.method))
            })
            .collect()
    }

    /// Whether a round waits for the client's answer.
    pub fn waiting_for_client(&self) -> bool {
        self.open
    }

    /// The client's `responses` to round `round`: the JSON-RPC responses for the upstream (under
    /// its ids), and the round closed; or why they are refused.
    pub fn answer(&mut self, round: u32, responses: &Map<String, Value>) -> Result<Vec<Value>, Refusal> {
        if let Some(why) = &self.ended {
            return Err(Refusal::Ended(why.clone()));
        }
        if round != self.round || !self.open {
            return Err(Refusal::Answered);
        }
        let mut out = Vec::new();
        for a in &self.asked {
            let Some(Value::Object(result)) = responses.get(&a.key) else {
                return Err(Refusal::Invalid(format!(
                    "has no response (an object) for `{}`, which this round asked",
                    a.key
                )));
            };
            let mut result = result.clone();
            // The 2026-07-28 result tag means nothing to a 2025 upstream.
            result.remove("resultType");
            out.push(json!({"jsonrpc": "2.0", "id": a.upstream_id, "result": result}));
        }
        if let Some(extra) = responses.keys().find(|k| !self.asked.iter().any(|a| &a.key == *k)) {
            return Err(Refusal::Invalid(format!("has `{extra}`, which this round did not ask for")));
        }
        self.open = false;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::protocol::jsonrpc::INVALID_PARAMS;

    const K: [u8; 32] = [7u8; 32];
    const B: Bind = ["srv", "app", "tools/call", "ask", "", "alice"];

    fn elicit(id: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {"message": "Name?"}})
    }

    fn responses(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_round_asks_what_the_upstream_asked_and_maps_the_answers_back_under_its_ids() {
        let mut b = Bridge::default();
        assert_eq!(b.next(9), None, "nothing asked yet");
        b.upstream_asked(&elicit("up-1"), Came::WithCall);
        b.upstream_asked(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {"maxTokens": 5}}),
            Came::Beside,
        );
        let Some(Reply::Ask { round, requests, expires_ms }) = b.next(9) else { panic!("no round") };
        assert_eq!((round, expires_ms), (1, 9));
        assert_eq!(
            Value::Object(requests),
            json!({"elicitation-1": {"method": "elicitation/create", "params": {"message": "Name?"}},
                   "sampling-2": {"method": "sampling/createMessage", "params": {"maxTokens": 5}}})
        );
        assert!(b.waiting_for_client());
        assert_eq!(b.next(9), None, "an open round waits for the client");
        let answers = b
            .answer(
                1,
                &responses(
                    json!({"elicitation-1": {"action": "accept", "content": {"n": "x"}, "resultType": "complete"},
                                  "sampling-2": {"role": "assistant", "content": {"type": "text", "text": "t"}}}),
                ),
            )
            .unwrap();
        assert_eq!(
            answers[0],
            json!({"jsonrpc": "2.0", "id": "up-1", "result": {"action": "accept", "content": {"n": "x"}}})
        );
        assert_eq!(answers[1]["id"], 7);
        assert_eq!(answers[1]["result"]["role"], "assistant");
        assert!(!b.waiting_for_client());
        // A second request makes a second round, keyed anew.
        b.upstream_asked(&elicit("up-2"), Came::WithCall);
        let Some(Reply::Ask { round: 2, requests, .. }) = b.next(10) else { panic!("no second round") };
        assert!(requests.contains_key("elicitation-3"), "{requests:?}");
        b.answer(2, &responses(json!({"elicitation-3": {"action": "decline"}}))).unwrap();
        b.finished(Reply::Final(json!({"id": 1, "result": {"content": []}})));
        assert_eq!(b.next(10), Some(Reply::Final(json!({"id": 1, "result": {"content": []}}))));
    }

    #[test]
    fn replayed_incomplete_and_late_answers_are_refused() {
        let mut b = Bridge::default();
        b.upstream_asked(&elicit("up-1"), Came::WithCall);
        b.next(0);
        // Incomplete or with a key not asked: refused, the round stays open.
        let missing = b.answer(1, &responses(json!({}))).unwrap_err();
        assert!(matches!(&missing, Refusal::Invalid(m) if m.contains("elicitation-1")), "{missing:?}");
        let extra = b.answer(1, &responses(json!({"elicitation-1": {"action": "accept"}, "x": {}}))).unwrap_err();
        assert!(matches!(&extra, Refusal::Invalid(m) if m.contains("`x`")), "{extra:?}");
        assert_eq!(
            b.answer(1, &responses(json!({"elicitation-1": 3}))).unwrap_err(),
            Refusal::Invalid("has no response (an object) for `elicitation-1`, which this round asked".into())
        );
        assert_eq!(b.answer(2, &responses(json!({"elicitation-1": {}}))).unwrap_err(), Refusal::Answered);
        b.answer(1, &responses(json!({"elicitation-1": {"action": "accept"}}))).unwrap();
        // The same answer again (a replay): refused, nothing for the upstream.
        assert_eq!(
            b.answer(1, &responses(json!({"elicitation-1": {"action": "accept"}}))).unwrap_err(),
            Refusal::Answered
        );
        assert!(Refusal::Answered.message().contains("answered already"));
        b.upstream_asked(&elicit("up-2"), Came::WithCall);
        b.next(0);
        b.end("the client did not answer within 30 s");
        b.end("the call was given up");
        let gone = b.answer(2, &responses(json!({"elicitation-2": {"action": "accept"}}))).unwrap_err();
        assert!(gone.message().contains("did not answer within 30 s"), "{gone:?}");
        assert_eq!(b.next(0), Some(Reply::Failed("the client did not answer within 30 s".into())));
    }

    #[test]
    fn requests_that_came_beside_the_call_are_refused_once_they_can_no_longer_reach_the_client() {
        let roots = |id: &str| json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"});
        let refused_ids = |v: Vec<Value>| v.iter().map(|r| r["id"].clone()).collect::<Vec<_>>();
        // Asked and answered in a round, then the call ends: nothing left to refuse.
        let mut b = Bridge::default();
        b.upstream_asked(&roots("s-1"), Came::Beside);
        b.next(0);
        assert!(b.unanswerable().is_empty(), "the call runs: the round may yet be answered");
        b.answer(1, &responses(json!({"roots-1": {"roots": []}}))).unwrap();
        // One more beside the call and one with it, queued when the result comes: the one beside
        // is refused (once), the call's own ends with the call.
        b.upstream_asked(&roots("s-2"), Came::Beside);
        b.upstream_asked(&elicit("c-1"), Came::WithCall);
        assert!(b.unanswerable().is_empty(), "not before the call is over");
        b.finished(Reply::Final(json!({"id": 1, "result": {}})));
        let refused = b.unanswerable();
        assert_eq!(refused_ids(refused.clone()), vec![json!("s-2")]);
        assert_eq!(refused[0]["error"]["code"], -32601);
        let m = refused[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("roots/list") && m.contains("ended before its client could be asked"), "{m}");
        assert!(b.unanswerable().is_empty(), "each refused once");

        // Given up with a round open: its request beside the call is refused with the reason,
        // the call's own is not (the call's cancellation covers it).
        let mut b = Bridge::default();
        b.upstream_asked(&roots("s-1"), Came::Beside);
        b.upstream_asked(&elicit("c-1"), Came::WithCall);
        b.next(0);
        b.upstream_asked(&roots("s-2"), Came::Beside);
        b.end("the client did not answer within 30 s");
        let refused = b.unanswerable();
        assert_eq!(refused_ids(refused.clone()), vec![json!("s-1"), json!("s-2")]);
        let m = refused[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("given up (the client did not answer within 30 s)"), "{m}");
        assert!(b.unanswerable().is_empty());

        // Given up after its round was answered: the answered request is not refused.
        let mut b = Bridge::default();
        b.upstream_asked(&roots("s-1"), Came::Beside);
        b.next(0);
        b.answer(1, &responses(json!({"roots-1": {"roots": []}}))).unwrap();
        b.end("the call was given up");
        assert!(b.unanswerable().is_empty());
    }

    #[test]
    fn a_request_takes_the_calls_progress_under_its_own_token_and_logs_from_its_level_up() {
        let progress = |t: Value| json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}});
        let log = |level: &str| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": "d"}});
        let call = json!("first-token");
        // A retry with a token of its own: the call's progress (it went up with the first
        // request's token) comes back under the retry's.
        let retry = Notes { progress_token: Some(json!(42)), log_level: Some("warning") };
        assert_eq!(retry.for_client(&progress(call.clone()), Some(&call)), Some(progress(json!(42))));
        assert_eq!(retry.for_client(&progress(json!("other")), Some(&call)), None, "another request's progress");
        assert_eq!(retry.for_client(&progress(call.clone()), None), None, "the call asked for no progress");
        assert_eq!(retry.for_client(&log("error"), Some(&call)), Some(log("error")));
        assert_eq!(retry.for_client(&log("warning"), Some(&call)), Some(log("warning")));
        assert_eq!(retry.for_client(&log("info"), Some(&call)), None, "below the request's level");
        let listed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        assert_eq!(retry.for_client(&listed, Some(&call)), None);
        assert_eq!(retry.for_client(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}), Some(&call)), None);
        // A request that asked for neither takes nothing.
        let plain = Notes::default();
        assert_eq!(plain.for_client(&progress(call.clone()), Some(&call)), None);
        assert_eq!(plain.for_client(&log("emergency"), Some(&call)), None);
    }

    #[test]
    fn states_name_the_object_and_round_and_are_bound_like_input_required_states() {
        let token = seal_state(&K, [1; 12], B, "obj-1", 3, 5_000).unwrap();
        assert!(token.starts_with(STATE_PREFIX) && !token.contains("obj-1"));
        assert!(continues_bridge(&responses(json!({"requestState": token}))));
        assert!(!continues_bridge(&responses(json!({"requestState": "fg-state.x"}))));
        assert_eq!(open_state(&token, &[K], B, 4_000).unwrap(), ("obj-1".into(), 3));
        let err = |b: Bind, now: u64, t: &str| open_state(t, &[K], b, now).unwrap_err();
        let foreign = err(["srv", "app", "tools/call", "ask", "", "bob"], 0, &token);
        assert!(foreign.message.contains("another client") && !foreign.message.contains("alice"));
        assert!(err(["srv", "app", "tools/call", "other", "", "alice"], 0, &token).message.contains("another request"));
        assert!(err(B, 5_001, &token).message.contains("expired"));
        assert_eq!(err(B, 0, &format!("{token}A")).code, INVALID_PARAMS);
        // An input_required state is not a bridge state, even under the same key.
        let mut r = json!({"resultType": "input_required", "inputRequests": {}, "requestState": "s"});
        ir::seal_result(&mut r, Default::default(), Some(&K), [2; 12], B, 0).unwrap();
        assert!(err(B, 0, r["requestState"].as_str().unwrap()).message.contains("not one Flowgate gave"));
    }

    #[test]
    fn ops_and_replies_survive_the_trip_between_worker_and_object() {
        let r = Reply::Ask {
            round: 2,
            requests: responses(json!({"roots-1": {"method": "roots/list", "params": {}}})),
            expires_ms: 8,
        };
        for reply in [r, Reply::Final(json!({"id": 1})), Reply::Failed("f".into()), Reply::Refused("r".into())] {
            assert_eq!(Reply::from_json(reply.to_json()).unwrap(), reply);
        }
        let takes = Notes { progress_token: Some(json!("p-2")), log_level: Some("warning") };
        let answer = Op::Answer { round: 4, responses: responses(json!({"a": {}})), notes: takes.clone() };
        let Op::Answer { round, responses: got, notes } = Op::from_json(answer.to_json()).unwrap() else {
            panic!("not an answer")
        };
        assert_eq!((round, got, notes), (4, responses(json!({"a": {}})), takes));
        let none = Op::Answer { round: 1, responses: Map::new(), notes: Notes::default() };
        let Op::Answer { notes, .. } = Op::from_json(none.to_json()).unwrap() else { panic!("not an answer") };
        assert_eq!(notes, Notes::default());
        let lines = [Line::Note(json!({"method": "notifications/progress"})), Line::Reply(Reply::Failed("f".into()))];
        let bytes: Vec<u8> = lines.iter().flat_map(Line::encode).collect();
        let got: Vec<Line> =
            crate::pure::lines::Lines::default().feed(&bytes).iter().map(|l| Line::decode(l).unwrap()).collect();
        assert_eq!(got, lines);
        assert!(Line::decode("{\"what\": 1}").is_err() && Line::decode("nope").is_err());
        assert!(matches!(Op::from_json(Op::Cancel.to_json()), Ok(Op::Cancel)));
        assert!(Op::from_json(json!({"op": "explode"})).is_err());
    }
}
