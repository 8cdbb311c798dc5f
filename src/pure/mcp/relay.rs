//! Requests an upstream MCP server sends while one of its tools runs (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`), relayed to Flowgate's client, and the client's answer
//! taken back to the upstream; without any state kept between requests.
//!
//! - What a client can take: the capabilities it declared (2025 revisions: at `initialize`,
//!   carried afterwards in Flowgate's sealed `Mcp-Session-Id`; see [`seal_session`]), and
//!   whether the call has a stream to carry a request at all ([`Channel`]).
//! - A relayed request goes to the client with a sealed id, its [`Ticket`]: the upstream, the
//!   session and the request id the answer belongs to, bound to the server and to the caller
//!   (the hash of the client's backend `user`: a client key's name, an OAuth `sub`, or the
//!   client identity of a server without client authentication). Whichever isolate
//!   receives the client's answer opens the ticket and posts the answer to the upstream on that
//!   session; the upstream, which holds the call, resumes, and its result flows on the call's
//!   own stream. AES-256-GCM makes the ticket unreadable and unforgeable by the client.

use crate::json;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::pure::backend::mcp::session::Session;
use crate::pure::sealed;

use crate::pure::protocol::jsonrpc::METHOD_NOT_FOUND;

/// The requests an upstream may have relayed; anything else gets "method not found".
pub const RELAYED_METHODS: [&str; 3] = ["sampling/createMessage", "elicitation/create", "roots/list"];
/// How a relayed request's id starts (the rest is the sealed [`Ticket`]).
pub const TICKET_PREFIX: &str = "fg-relay.";
/// How Flowgate's `Mcp-Session-Id` starts (the rest is the sealed [`ClientCaps`]).
pub const SESSION_PREFIX: &str = "fg-session.";
const SEALED_PREFIX: &str = "enc:v1:";

/// What a client declared it can answer, of what an upstream may ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClientCaps {
    #[serde(rename = "s", default)]
    pub sampling: bool,
    /// `sampling.tools`: sampling requests that offer tools.
    #[serde(rename = "st", default)]
    pub sampling_tools: bool,
    #[serde(rename = "ef", default)]
    pub elicitation_form: bool,
    #[serde(rename = "eu", default)]
    pub elicitation_url: bool,
    #[serde(rename = "r", default)]
    pub roots: bool,
}

impl crate::pure::fields::FromFields for ClientCaps {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(ClientCaps {
            sampling: f.opt_flag("s")?.unwrap_or(false),
            sampling_tools: f.opt_flag("st")?.unwrap_or(false),
            elicitation_form: f.opt_flag("ef")?.unwrap_or(false),
            elicitation_url: f.opt_flag("eu")?.unwrap_or(false),
            roots: f.opt_flag("r")?.unwrap_or(false),
        })
    }
}
crate::pure::fields::deserialize_by_fields!(ClientCaps);

impl ClientCaps {
    /// From `capabilities` as a client declares them (`initialize`, or 2026-07-28's `_meta`).
    /// `elicitation: {}` is form mode, as before URL mode existed.
    pub fn from_declared(caps: Option<&Value>) -> ClientCaps {
        let Some(caps) = caps else { return ClientCaps::default() };
        let has = |v: &Value, k: &str| v.get(k).is_some_and(Value::is_object);
        let elicitation = caps.get("elicitation").filter(|e| e.is_object());
        let (form, url) = match elicitation {
            Some(e) if !has(e, "form") && !has(e, "url") => (true, false),
            Some(e) => (has(e, "form"), has(e, "url")),
            None => (false, false),
        };
        ClientCaps {
            sampling: has(caps, "sampling"),
            sampling_tools: caps.get("sampling").is_some_and(|s| has(s, "tools")),
            elicitation_form: form,
            elicitation_url: url,
            roots: has(caps, "roots"),
        }
    }
}

/// Whether a call can carry a request to its client, and if so what the client declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// A 2025 (or older) client reading the call's SSE stream.
    Stream(ClientCaps),
    /// No way to ask this client mid-call, for this reason.
    Closed(Closed),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The client takes only `application/json`: one answer, nothing before it.
    JsonOnly,
    /// A 2026-07-28 client: servers ask for input with `input_required` results instead.
    Stateless,
    /// A durable task: no client connection while it runs.
    Task,
}

/// Whether `request` (from the upstream) may go to the client: `Err` says why not, for the
/// error the upstream gets.
pub fn decide(request: &Value, channel: Channel) -> Result<(), String> {
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
    if !RELAYED_METHODS.contains(&method) {
        return Err(format!("Flowgate does not relay {method} to its clients (only {})", RELAYED_METHODS.join(", ")));
    }
    let caps = match channel {
        Channel::Stream(caps) => caps,
        Channel::Closed(why) => {
            let why = match why {
                Closed::JsonOnly => "the client takes only JSON answers, so nothing can reach it before the result",
                Closed::Stateless => {
                    "the client speaks MCP 2026-07-28, where a server asks for input with an input_required \
                     result, not with a request during the call"
                }
                Closed::Task => "the call runs as a durable task, which has no connection to the client",
            };
            return Err(format!("Flowgate cannot relay {method} to its client: {why}"));
        }
    };
    let params = request.get("params");
    let missing = match method {
        "sampling/createMessage" if !caps.sampling => Some("sampling"),
        "sampling/createMessage"
            if params.is_some_and(|p| p.get("tools").is_some() || p.get("toolChoice").is_some())
                && !caps.sampling_tools =>
        {
            Some("sampling.tools")
        }
        "elicitation/create" => {
            let url_mode = params.and_then(|p| p.get("mode")).and_then(Value::as_str) == Some("url");
            match url_mode {
                true if !caps.elicitation_url => Some("elicitation.url"),
                false if !caps.elicitation_form => Some("elicitation (form mode)"),
                _ => None,
            }
        }
        "roots/list" if !caps.roots => Some("roots"),
        _ => None,
    };
    match missing {
        Some(cap) => Err(format!("the client does not support {method}: it did not declare the {cap} capability")),
        None => Ok(()),
    }
}

/// The error an upstream gets for a request that is not relayed.
pub fn refusal(request: &Value, why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": { "code": METHOD_NOT_FOUND, "message": why },
    })
}

/// The error for a request an upstream sends while it answers a request Flowgate forwarded
/// (`during`: `prompts/get`, `resources/read`, `completion/complete`): that answer goes to the
/// client in one piece, so nothing can reach the client before it.
pub fn refusal_during(request: &Value, during: &str) -> Value {
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
    refusal(
        request,
        &format!(
            "Flowgate cannot relay {method} to its client: it came during {during}, whose answer reaches the client in \
             one piece (only tool calls, and a task's tasks/result, carry requests to the client)"
        ),
    )
}

/// The upstream's request as the client gets it: the same, under the ticket's id.
pub fn relayed_request(request: &Value, ticket_id: String) -> Value {
    let mut r = request.clone();
    r["id"] = ticket_id.into();
    r
}

/// Where a relayed request's answer goes: sealed into the id the client sees.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ticket {
    /// The server the call was made through: an answer through another server is refused.
    #[serde(rename = "s")]
    pub server_id: String,
    #[serde(rename = "a")]
    pub app_id: String,
    /// Where the upstream takes messages of this session (its URL, or the legacy endpoint).
    #[serde(rename = "u")]
    pub url: String,
    #[serde(rename = "t")]
    pub session: Session,
    /// The upstream's own id of the request.
    #[serde(rename = "i")]
    pub request_id: Value,
    /// The forwarded credentials the call used (hashed; empty when none): the answer must
    /// carry the same ones.
    #[serde(rename = "c")]
    pub scope: String,
    /// The caller the request was relayed to ([`caller_hash`] of its backend `user`): an
    /// answer by another client of the same server is refused.
    #[serde(rename = "o")]
    pub caller: String,
    #[serde(rename = "e")]
    pub expires_ms: u64,
}

impl crate::pure::fields::FromFields for Ticket {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(Ticket {
            server_id: f.text("s")?,
            app_id: f.text("a")?,
            url: f.text("u")?,
            session: f.object("t")?,
            request_id: f.value("i")?,
            scope: f.text("c")?,
            caller: f.text("o")?,
            expires_ms: f.uint("e")?,
        })
    }
}
crate::pure::fields::deserialize_by_fields!(Ticket);

/// What a sealed id carries of its caller (relay tickets, `input_required` states): a hash of
/// the client's backend `user` (a client key's name, an OAuth `sub`, or the per-client identity
/// of a server without client authentication), so the id names no one even to Flowgate's logs.
pub fn caller_hash(user: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"flowgate-caller\n");
    h.update(user.as_bytes());
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A key for one purpose, from the Worker's sealing key: a ticket is never a session id.
pub fn purpose_key(master: &[u8; 32], purpose: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"flowgate:");
    h.update(purpose.as_bytes());
    h.update([0u8]);
    h.update(master);
    h.finalize().into()
}

pub fn seal_as(prefix: &str, key: &[u8; 32], nonce: [u8; 12], plaintext: &str) -> Result<String, String> {
    let sealed = sealed::seal(key, nonce, plaintext)?;
    Ok(format!("{prefix}{}", sealed.strip_prefix(SEALED_PREFIX).unwrap_or(&sealed)))
}

pub fn open_as(prefix: &str, keys: &[[u8; 32]], token: &str) -> Option<String> {
    let body = token.strip_prefix(prefix)?;
    sealed::open(keys, &format!("{SEALED_PREFIX}{body}")).ok()
}

/// The id of a relayed request. The session's capabilities are left out (not needed to answer).
pub fn seal_ticket(key: &[u8; 32], nonce: [u8; 12], ticket: &Ticket) -> Result<String, String> {
    let mut t = ticket.clone();
    t.session.capabilities = None;
    let text = serde_json::to_string(&t).map_err(|e| e.to_string())?;
    seal_as(TICKET_PREFIX, key, nonce, &text)
}

/// Why a client's answer to a relayed request is refused (never whose the request was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketRefused {
    /// Altered, made up, or sealed with a key this Worker no longer has.
    NotOurs,
    OtherServer,
    OtherClient,
    /// The call that asked has ended.
    Ended,
}

impl std::fmt::Display for TicketRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TicketRefused::NotOurs => {
                "the id is not one Flowgate gave to a request it relayed (altered, made up, or sealed with a key it no \
                 longer has)"
            }
            TicketRefused::OtherServer => "the request was relayed through another MCP server",
            TicketRefused::OtherClient => {
                "the request was relayed to another client: only the client that made the call (the same client \
                 key, OAuth subject, or client name) can answer it"
            }
            TicketRefused::Ended => "the call that asked has ended (its tool_call_timeout ran out)",
        })
    }
}

/// Opens a relayed request's id, for `server_id` and the answering client's backend `user`, at
/// `now_ms`; `Err` says why it is refused.
pub fn open_ticket(
    keys: &[[u8; 32]],
    token: &str,
    server_id: &str,
    user: &str,
    now_ms: u64,
) -> Result<Ticket, TicketRefused> {
    let ticket: Ticket = open_as(TICKET_PREFIX, keys, token)
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or(TicketRefused::NotOurs)?;
    if ticket.server_id != server_id {
        return Err(TicketRefused::OtherServer);
    }
    if ticket.caller != caller_hash(user) {
        return Err(TicketRefused::OtherClient);
    }
    if now_ms > ticket.expires_ms {
        return Err(TicketRefused::Ended);
    }
    Ok(ticket)
}

#[derive(Serialize)]
struct SessionClaims {
    s: String,
    v: String,
    c: ClientCaps,
}

impl crate::pure::fields::FromFields for SessionClaims {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(SessionClaims { s: f.text("s")?, v: f.text("v")?, c: f.object("c")? })
    }
}
crate::pure::fields::deserialize_by_fields!(SessionClaims);

/// Flowgate's `Mcp-Session-Id` for a client of `server_id` that initialized with `version` and
/// declared `caps`: nothing is stored, the id itself says what the client declared.
pub fn seal_session(
    key: &[u8; 32],
    nonce: [u8; 12],
    server_id: &str,
    version: &str,
    caps: ClientCaps,
) -> Result<String, String> {
    let claims = SessionClaims { s: server_id.into(), v: version.into(), c: caps };
    seal_as(SESSION_PREFIX, key, nonce, &serde_json::to_string(&claims).map_err(|e| e.to_string())?)
}

/// What a session id says the client declared; `None` for an id that is not Flowgate's, was
/// altered, or belongs to another server (the client then counts as having declared nothing).
pub fn open_session(keys: &[[u8; 32]], token: &str, server_id: &str) -> Option<ClientCaps> {
    let claims: SessionClaims = serde_json::from_str(&open_as(SESSION_PREFIX, keys, token)?).ok()?;
    (claims.s == server_id).then_some(claims.c)
}

/// The client's answer as the upstream gets it: its `result` or `error`, under the upstream's
/// own request id.
pub fn answer_for_upstream(answer: &Value, ticket: &Ticket) -> Result<Value, String> {
    let id = ticket.request_id.clone();
    if let Some(result) = answer.get("result").filter(|r| r.is_object()) {
        return Ok(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    match answer.get("error") {
        Some(e) if e.get("code").is_some_and(Value::is_i64) && e.get("message").is_some_and(Value::is_string) => {
            Ok(json!({"jsonrpc": "2.0", "id": id, "error": e}))
        }
        _ => Err("the answer needs a `result` object or an `error` with `code` and `message`".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::backend::mcp::transport::Transport;

    const K: [u8; 32] = [3u8; 32];
    const OTHER: [u8; 32] = [4u8; 32];

    fn ticket() -> Ticket {
        Ticket {
            server_id: "srv-1".into(),
            app_id: "app-1".into(),
            url: "https://up.example/mcp".into(),
            session: Session {
                transport: Transport::StreamableHttp,
                protocol_version: "2025-11-25".into(),
                session_id: Some("sess-9".into()),
                stateless: false,
                capabilities: Some(json!({"tools": {}})),
            },
            request_id: json!(0),
            scope: String::new(),
            caller: caller_hash("alice"),
            expires_ms: 10_000,
        }
    }

    #[test]
    fn declared_capabilities() {
        let c = ClientCaps::from_declared(Some(
            &json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}}),
        ));
        assert_eq!(
            c,
            ClientCaps {
                sampling: true,
                sampling_tools: false,
                elicitation_form: true,
                elicitation_url: false,
                roots: true
            }
        );
        let c = ClientCaps::from_declared(Some(&json!({"sampling": {"tools": {}}, "elicitation": {"url": {}}})));
        assert!(c.sampling_tools && c.elicitation_url && !c.elicitation_form && !c.roots);
        assert_eq!(ClientCaps::from_declared(Some(&json!({"sampling": true}))), ClientCaps::default());
        assert_eq!(ClientCaps::from_declared(None), ClientCaps::default());
    }

    #[test]
    fn what_is_relayed_to_whom() {
        let all = ClientCaps::from_declared(Some(
            &json!({"sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}, "roots": {}}),
        ));
        let none = ClientCaps::default();
        let req = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": params});
        let sampling = req("sampling/createMessage", json!({"messages": [], "maxTokens": 5}));
        let tool_sampling = req("sampling/createMessage", json!({"messages": [], "maxTokens": 5, "tools": []}));
        let form = req("elicitation/create", json!({"message": "m", "requestedSchema": {}}));
        let url =
            req("elicitation/create", json!({"mode": "url", "message": "m", "url": "https://x", "elicitationId": "e"}));
        let roots = req("roots/list", json!({}));
        for r in [&sampling, &tool_sampling, &form, &url, &roots] {
            assert_eq!(decide(r, Channel::Stream(all)), Ok(()), "{r}");
            let why = decide(r, Channel::Stream(none)).unwrap_err();
            assert!(why.contains("did not declare"), "{why}");
        }
        let plain = ClientCaps { sampling: true, elicitation_form: true, ..none };
        assert!(decide(&tool_sampling, Channel::Stream(plain)).unwrap_err().contains("sampling.tools"));
        assert!(decide(&url, Channel::Stream(plain)).unwrap_err().contains("elicitation.url"));
        assert_eq!(decide(&form, Channel::Stream(plain)), Ok(()));
        // Whatever the client declared, a closed channel relays nothing, and says why.
        for (why, needle) in
            [(Closed::JsonOnly, "only JSON"), (Closed::Stateless, "2026-07-28"), (Closed::Task, "task")]
        {
            let e = decide(&sampling, Channel::Closed(why)).unwrap_err();
            assert!(e.contains(needle) && e.contains("sampling/createMessage"), "{e}");
        }
        // Methods outside the three are never relayed.
        let e = decide(&req("tools/call", json!({})), Channel::Stream(all)).unwrap_err();
        assert!(e.contains("does not relay tools/call"), "{e}");
        let refused = refusal(&sampling, "no");
        assert_eq!(refused, json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "no"}}));
        let during = refusal_during(&roots, "prompts/get");
        assert_eq!((&during["id"], &during["error"]["code"]), (&json!(4), &json!(-32601)));
        let why = during["error"]["message"].as_str().unwrap_or_default();
        assert!(why.starts_with("Flowgate cannot relay roots/list") && why.contains("during prompts/get"), "{why}");
    }

    #[test]
    fn tickets_round_trip_and_refuse_what_they_should() {
        let id = seal_ticket(&K, [1; 12], &ticket()).unwrap();
        assert!(id.starts_with(TICKET_PREFIX) && !id.contains("sess-9") && !id.contains("up.example"));
        let opened = open_ticket(&[K], &id, "srv-1", "alice", 9_999).unwrap();
        assert_eq!(opened.session.session_id.as_deref(), Some("sess-9"));
        assert_eq!(opened.session.capabilities, None, "left out of the id");
        assert_eq!(opened.request_id, json!(0));
        // Rotation: the previous key still opens it.
        assert!(open_ticket(&[OTHER, K], &id, "srv-1", "alice", 0).is_ok());
        let refused = |keys: &[[u8; 32]], server: &str, user: &str, now: u64| {
            open_ticket(keys, &id, server, user, now).unwrap_err().to_string()
        };
        assert!(refused(&[OTHER], "srv-1", "alice", 0).contains("not one Flowgate gave"));
        assert!(refused(&[K], "srv-2", "alice", 0).contains("another MCP server"));
        assert!(refused(&[K], "srv-1", "alice", 10_001).contains("ended"));
        // Bound to its caller: another client of the same server is refused, and not told whose.
        let bob = refused(&[K], "srv-1", "bob", 0);
        assert!(bob.contains("another client") && !bob.contains("alice"), "{bob}");
        assert_eq!(open_ticket(&[K], &id, "srv-1", "", 0).unwrap_err(), TicketRefused::OtherClient);
        assert!(!id.contains(&caller_hash("alice")), "the caller is sealed too");
        // Any altered character is refused.
        let mut bytes = id.clone().into_bytes();
        for i in [TICKET_PREFIX.len() + 3, bytes.len() - 1] {
            let original = bytes[i];
            bytes[i] = if original == b'A' { b'B' } else { b'A' };
            assert!(open_ticket(&[K], std::str::from_utf8(&bytes).unwrap(), "srv-1", "alice", 0).is_err());
            bytes[i] = original;
        }
        assert!(open_ticket(&[K], "fg-relay.made-up", "srv-1", "alice", 0).is_err());
        // A session id is not a ticket, even under the same key.
        let session = seal_session(&K, [2; 12], "srv-1", "2025-11-25", ClientCaps::default()).unwrap();
        assert!(open_ticket(&[K], &session, "srv-1", "alice", 0).is_err());
    }

    #[test]
    fn session_ids_carry_what_was_declared() {
        let caps = ClientCaps { sampling: true, roots: true, ..ClientCaps::default() };
        let sid = seal_session(&K, [5; 12], "srv-1", "2025-06-18", caps).unwrap();
        assert!(sid.starts_with(SESSION_PREFIX));
        assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII, as the spec asks");
        assert_eq!(open_session(&[K], &sid, "srv-1"), Some(caps));
        assert_eq!(open_session(&[K], &sid, "srv-2"), None, "bound to its server");
        assert_eq!(open_session(&[OTHER], &sid, "srv-1"), None);
        assert_eq!(open_session(&[K], "some-other-session", "srv-1"), None);
        let ticket = seal_ticket(&K, [6; 12], &ticket()).unwrap();
        assert_eq!(open_session(&[K], &ticket, "srv-1"), None, "a ticket is not a session id");
        assert_ne!(purpose_key(&K, "relay"), purpose_key(&K, "session"));
    }

    #[test]
    fn answers_for_the_upstream() {
        let t = ticket();
        let ok =
            answer_for_upstream(&json!({"jsonrpc": "2.0", "id": "fg-relay.x", "result": {"action": "accept"}}), &t);
        assert_eq!(ok.unwrap(), json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "accept"}}));
        let err = answer_for_upstream(&json!({"id": "x", "error": {"code": -1, "message": "user said no"}}), &t);
        assert_eq!(err.unwrap()["error"]["message"], "user said no");
        assert!(answer_for_upstream(&json!({"id": "x", "result": 3}), &t).is_err());
        assert!(answer_for_upstream(&json!({"id": "x", "error": {"code": "bad"}}), &t).is_err());
        let relayed = relayed_request(&json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}), "fg-relay.t".into());
        assert_eq!(relayed["id"], "fg-relay.t");
        assert_eq!(relayed["method"], "roots/list");
    }
}
