//! `sealed_ids`: the ids and state Flowgate seals with AES-256-GCM and hands to clients, which
//! come back as attacker-chosen text: `fg-task.` (relayed upstream tasks), `fg-relay.` (relayed
//! requests' ids), `fg-state.` (an upstream's `requestState`), `fg-session.` (Flowgate's
//! `Mcp-Session-Id`), and `enc:v1:` (credentials at rest). Opening must refuse, never panic;
//! what is sealed opens to itself, for its own server and purpose only; a changed token never
//! opens.

use serde_json::{json, Map, Value};

use flowgate::pure::backend::mcp::session::Session;
use flowgate::pure::backend::mcp::transport::Transport;
use flowgate::pure::mcp::input_required::{self as ir, STATE_PREFIX, STATE_TTL_MS};
use flowgate::pure::mcp::relay::{self, ClientCaps, Ticket, SESSION_PREFIX, TICKET_PREFIX};
use flowgate::pure::mcp::upstream_tasks::{self, Handle, TASK_PREFIX};
use flowgate::pure::sealed;

use super::input::{tampered, Input};

/// The Worker's `SECRETS_KEY` and `SECRETS_KEY_PREVIOUS`, and a key this Worker does not have.
const CURRENT: [u8; 32] = [0x11; 32];
const PREVIOUS: [u8; 32] = [0x22; 32];
const FOREIGN: [u8; 32] = [0x33; 32];

/// The purposes the shell derives keys for (`shell/relay.rs`).
const TICKETS: &str = "relay-ticket";
const SESSIONS: &str = "mcp-session";
const STATES: &str = "input-state";
const TASKS: &str = "upstream-task";

fn keys(purpose: &str, masters: &[[u8; 32]]) -> Vec<[u8; 32]> {
    masters.iter().map(|m| relay::purpose_key(m, purpose)).collect()
}

/// A Worker's keys: its masters and each purpose's keys derived from them.
struct KeySet {
    masters: Vec<[u8; 32]>,
    /// By purpose, in the order of [`PURPOSES`].
    derived: Vec<Vec<[u8; 32]>>,
}

const PURPOSES: [&str; 4] = [TASKS, TICKETS, SESSIONS, STATES];

impl KeySet {
    fn new(masters: &[[u8; 32]]) -> KeySet {
        KeySet { masters: masters.to_vec(), derived: PURPOSES.iter().map(|p| keys(p, masters)).collect() }
    }

    fn of(&self, purpose: &str) -> &[[u8; 32]] {
        &self.derived[PURPOSES.iter().position(|p| *p == purpose).expect("a purpose")]
    }
}

/// [CURRENT, PREVIOUS]: what this target seals with (derived once).
fn worker_keys() -> &'static KeySet {
    static KEYS: std::sync::OnceLock<KeySet> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| KeySet::new(&[CURRENT, PREVIOUS]))
}

/// A Worker's keys that this target never seals with. Made-up tokens are opened under these:
/// libFuzzer copies the bytes the target compares into later inputs, so a token the target
/// sealed under [`worker_keys`] in one run can come back as another run's input and rightly
/// open there; under keys nothing was ever sealed with, opening would be a forgery.
fn unseen_keys() -> &'static KeySet {
    static KEYS: std::sync::OnceLock<KeySet> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| KeySet::new(&[[0x44; 32], [0x55; 32]]))
}

/// What each opener with `keys` says of `token`, for the request `bind` describes (server
/// `bind[0]`): `true` when it opened.
fn opens(keys: &KeySet, token: &str, bind: ir::Bind, now_ms: u64) -> [bool; 5] {
    let srv = bind[0];
    let mut params = Map::new();
    params.insert("requestState".into(), token.into());
    [
        upstream_tasks::open_handle(keys.of(TASKS), token, srv).is_some(),
        relay::open_ticket(keys.of(TICKETS), token, srv, bind[5], now_ms).is_ok(),
        relay::open_session(keys.of(SESSIONS), token, srv).is_some(),
        ir::open_state(&mut params, keys.of(STATES), bind, now_ms).is_ok(),
        sealed::open(&keys.masters, token).is_ok(),
    ]
}

pub fn sealed_ids(data: &[u8]) {
    // 1. The input as a token, bare and behind each prefix: nothing opens under keys nothing
    //    was sealed with (a forgery would need the key).
    let raw = String::from_utf8_lossy(data);
    for prefix in ["", TASK_PREFIX, TICKET_PREFIX, SESSION_PREFIX, STATE_PREFIX, "enc:v1:"] {
        let token = format!("{prefix}{raw}");
        assert_eq!(
            opens(unseen_keys(), &token, ["srv-1", "a1", "tools/call", "t", "", "alice"], 0),
            [false; 5],
            "{token:?} opened"
        );
    }

    // 2. Values taken from the input, sealed, then opened, moved and altered.
    let mut r = Input::new(data);
    let nonce: [u8; 12] = r.array();
    let (how, pos, to) = (r.byte(), r.byte(), r.byte());
    let caps_bits = r.byte();
    // A clock a Worker could have (no year-300000 overflow of `now + TTL`).
    let now_ms = r.u64() % (1 << 48);
    let (srv, app, scope, user, other) = (r.text(), r.text(), r.text(), r.text(), r.text());
    let other_srv = format!("{srv}-other");
    let masters = [CURRENT, PREVIOUS];
    let only_foreign = [FOREIGN];

    // Sealed under the previous key (a rotation happened since): still opens.
    let handle = Handle {
        server_id: srv.clone(),
        app_id: app.clone(),
        scope: scope.clone(),
        user: user.clone(),
        upstream_id: other.clone(),
    };
    let task = upstream_tasks::seal_handle(&keys(TASKS, &[PREVIOUS])[0], nonce, &handle).expect("sealing a handle");
    assert!(task.starts_with(TASK_PREFIX));
    assert_eq!(upstream_tasks::open_handle(&keys(TASKS, &masters), &task, &srv), Some(handle.clone()));
    assert_eq!(upstream_tasks::open_handle(&keys(TASKS, &masters), &task, &other_srv), None);
    assert_eq!(upstream_tasks::open_handle(&keys(TASKS, &only_foreign), &task, &srv), None);

    let caps = ClientCaps {
        sampling: caps_bits & 1 != 0,
        sampling_tools: caps_bits & 2 != 0,
        elicitation_form: caps_bits & 4 != 0,
        elicitation_url: caps_bits & 8 != 0,
        roots: caps_bits & 16 != 0,
    };
    let session =
        relay::seal_session(&keys(SESSIONS, &masters)[0], nonce, &srv, &other, caps).expect("sealing a session");
    assert_eq!(relay::open_session(&keys(SESSIONS, &masters), &session, &srv), Some(caps));
    assert_eq!(relay::open_session(&keys(SESSIONS, &masters), &session, &other_srv), None);

    let expires_ms = now_ms + 60_000;
    let ticket = Ticket {
        server_id: srv.clone(),
        app_id: app.clone(),
        url: other.clone(),
        session: Session {
            transport: if caps_bits & 32 != 0 { Transport::Sse } else { Transport::StreamableHttp },
            protocol_version: scope.clone(),
            session_id: (caps_bits & 64 != 0).then(|| app.clone()),
            stateless: caps_bits & 128 != 0,
            capabilities: Some(json!({"tools": {}})),
        },
        request_id: if how & 1 != 0 { Value::from(other.clone()) } else { Value::from(now_ms) },
        scope: scope.clone(),
        caller: relay::caller_hash(&user),
        expires_ms,
    };
    let relayed = relay::seal_ticket(&keys(TICKETS, &masters)[0], nonce, &ticket).expect("sealing a ticket");
    let mut expected = ticket.clone();
    expected.session.capabilities = None;
    let other_user = format!("{user}-other");
    assert_eq!(relay::open_ticket(&keys(TICKETS, &masters), &relayed, &srv, &user, expires_ms), Ok(expected));
    assert!(relay::open_ticket(&keys(TICKETS, &masters), &relayed, &srv, &user, expires_ms + 1).is_err());
    assert!(relay::open_ticket(&keys(TICKETS, &masters), &relayed, &other_srv, &user, now_ms).is_err());
    // Bound to the caller: another client of the same server never answers it.
    assert!(relay::open_ticket(&keys(TICKETS, &masters), &relayed, &srv, &other_user, now_ms).is_err());

    let bind = [srv.as_str(), app.as_str(), "tools/call", other.as_str(), scope.as_str(), user.as_str()];
    let upstream_state = Value::from(r.rest_text());
    let mut result = json!({"resultType": "input_required", "inputRequests": {}, "requestState": upstream_state});
    ir::seal_result(&mut result, caps, Some(&keys(STATES, &masters)[0]), nonce, bind, now_ms).expect("sealing a state");
    let state = result["requestState"].as_str().expect("a sealed state").to_string();
    let open_state = |token: &str, bind: ir::Bind, now: u64| {
        let mut p = Map::new();
        p.insert("requestState".into(), token.into());
        ir::open_state(&mut p, &keys(STATES, &masters), bind, now).map(|()| p["requestState"].clone())
    };
    assert_eq!(open_state(&state, bind, now_ms + STATE_TTL_MS), Ok(upstream_state));
    assert!(open_state(&state, bind, now_ms + STATE_TTL_MS + 1).is_err());
    let elsewhere = [other_srv.as_str(), bind[1], bind[2], bind[3], bind[4], bind[5]];
    assert!(open_state(&state, elsewhere, now_ms).is_err());
    let by_another = [bind[0], bind[1], bind[2], bind[3], bind[4], other_user.as_str()];
    assert!(open_state(&state, by_another, now_ms).is_err());
    let other_tool = [bind[0], bind[1], bind[2], "another-tool", bind[4], bind[5]];
    if bind[3] != "another-tool" {
        assert!(open_state(&state, other_tool, now_ms).is_err());
    }

    let secret = sealed::seal(&CURRENT, nonce, &other).expect("sealing a credential");
    assert_eq!(sealed::open(&[FOREIGN, CURRENT], &secret), Ok(other.clone()));
    assert!(sealed::open(&[FOREIGN], &secret).is_err());

    // Each token is good for its own purpose only: under another prefix it opens nowhere
    // (another prefix means another key), and altered it opens nowhere.
    let all = [&task, &relayed, &session, &state, &secret];
    let prefixes = [TASK_PREFIX, TICKET_PREFIX, SESSION_PREFIX, STATE_PREFIX, "enc:v1:"];
    for (i, token) in all.iter().enumerate() {
        let body = &token[prefixes[i].len()..];
        for (j, prefix) in prefixes.iter().enumerate() {
            let moved = format!("{prefix}{body}");
            let mut expect = [false; 5];
            expect[i] = i == j;
            assert_eq!(opens(worker_keys(), &moved, bind, now_ms), expect, "{moved:?} (sealed as {:?})", prefixes[i]);
        }
        if let Some(changed) = tampered(token, how, pos, to) {
            assert_eq!(
                opens(worker_keys(), &changed, bind, now_ms),
                [false; 5],
                "{token:?} altered to {changed:?} opened"
            );
        }
    }
}
