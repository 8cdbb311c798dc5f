//! Requests an upstream MCP server sends while a call runs, relayed to the client, and the
//! client's answers taken back (`pure::mcp::relay` decides and seals; this is the IO): the
//! Worker's sealing key, Flowgate's `Mcp-Session-Id` and the relayed requests' ids (the
//! delivery of an answer is `upstream::deliver_answer`).

use crate::runtime::Env;
use serde_json::{Map, Value};

use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::input_required::{self as ir, Bind};
use crate::pure::mcp::relay::{self, ClientCaps, Ticket, TicketRefused};
use crate::pure::mcp::upstream_tasks::{self, Handle};
use crate::pure::protocol::jsonrpc::{RpcError, INTERNAL_ERROR};
use crate::pure::protocol::version::Version;
use crate::pure::random::Unavailable;

const TICKETS: &str = "relay-ticket";
const SESSIONS: &str = "mcp-session";
const STATES: &str = "input-state";
const TASKS: &str = "upstream-task";

/// The keys for one purpose, derived from `SECRETS_KEY` (then `SECRETS_KEY_PREVIOUS`): none
/// when it is not set, and then nothing is relayed.
fn keys(env: &Env, purpose: &str) -> Vec<[u8; 32]> {
    let masters = crate::shell::secrets::keys(env).unwrap_or_default();
    masters.iter().map(|k| relay::purpose_key(k, purpose)).collect()
}

fn nonce() -> Result<[u8; 12], Unavailable> {
    let mut n = [0u8; 12];
    crate::runtime::fill_random(&mut n)?;
    Ok(n)
}

/// Why an id was not sealed for the client: the words the upstream or the client gets.
#[derive(Debug)]
pub enum NotSealed {
    /// No SECRETS_KEY: what is therefore not relayed, in a whole sentence.
    NoKey(&'static str),
    Random(Unavailable),
    /// `pure::mcp::relay`'s words.
    Failed(String),
}

impl std::fmt::Display for NotSealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotSealed::NoKey(sentence) => f.write_str(sentence),
            NotSealed::Random(e) => e.fmt(f),
            NotSealed::Failed(why) => f.write_str(why),
        }
    }
}

impl From<Unavailable> for NotSealed {
    fn from(e: Unavailable) -> NotSealed {
        NotSealed::Random(e)
    }
}

impl From<String> for NotSealed {
    fn from(why: String) -> NotSealed {
        NotSealed::Failed(why)
    }
}

/// What the client declared at `initialize`, from the `Mcp-Session-Id` it sent.
pub fn session_caps(env: &Env, session_id: Option<&str>, server_id: &str) -> Option<ClientCaps> {
    let sid = session_id.filter(|s| s.starts_with(relay::SESSION_PREFIX))?;
    relay::open_session(&keys(env, SESSIONS), sid, server_id)
}

/// The `Mcp-Session-Id` for a successful `initialize` of a revision that has sessions: the
/// client's declared capabilities, sealed. `None` for anything else, or without a key.
pub fn session_id_for(env: &Env, def: &ServerDefinition, request: &Value, response: &Value) -> Option<String> {
    if request.get("method").and_then(Value::as_str) != Some("initialize") {
        return None;
    }
    let version = response.pointer("/result/protocolVersion").and_then(Value::as_str)?;
    if Version::parse(version).is_none_or(Version::is_stateless) {
        return None;
    }
    let key = *keys(env, SESSIONS).first()?;
    let caps = ClientCaps::from_declared(request.pointer("/params/capabilities"));
    relay::seal_session(&key, nonce().ok()?, &def.server_id, version, caps).ok()
}

/// Opens the id a client answered, for `server_id` and the answering client's backend `user`;
/// `Err` says why it is refused.
pub fn open_ticket(env: &Env, token: &str, server_id: &str, user: &str) -> Result<Ticket, TicketRefused> {
    relay::open_ticket(&keys(env, TICKETS), token, server_id, user, crate::shell::platform::now_ms())
}

/// The id a relayed request goes to the client under.
pub fn seal_ticket(env: &Env, ticket: &Ticket) -> Result<String, NotSealed> {
    let key = *keys(env, TICKETS)
        .first()
        .ok_or(NotSealed::NoKey("Flowgate has no SECRETS_KEY to seal the request's id with, so it relays nothing"))?;
    Ok(relay::seal_ticket(&key, nonce()?, ticket)?)
}

/// The id a client gets for an upstream's task (`pure::mcp::upstream_tasks`).
pub fn seal_task(env: &Env, handle: &Handle) -> Result<String, NotSealed> {
    let key = *keys(env, TASKS).first().ok_or(NotSealed::NoKey(
        "Flowgate has no SECRETS_KEY to seal the upstream's task id with, so it relays no tasks",
    ))?;
    Ok(upstream_tasks::seal_handle(&key, nonce()?, handle)?)
}

/// Where a relayed task id leads, if Flowgate gave it for this server.
pub fn open_task(env: &Env, token: &str, server_id: &str) -> Option<Handle> {
    upstream_tasks::open_handle(&keys(env, TASKS), token, server_id)
}

/// A client's retry for the upstream: the `requestState` in its round-trip `params` opened
/// (`pure::mcp::input_required`), or the error the client gets.
pub fn open_state(env: &Env, params: &mut Map<String, Value>, bind: Bind) -> Result<(), RpcError> {
    ir::open_state(params, &keys(env, STATES), bind, crate::shell::platform::now_ms())
}

/// An upstream's response for a client of `version` that sent `params`: an `input_required`
/// result checked against what the client declared and its state sealed, or the error the
/// client gets.
pub fn seal_state(
    env: &Env,
    response: &mut Value,
    version: Version,
    params: &Map<String, Value>,
    bind: Bind,
) -> Result<(), RpcError> {
    if !ir::asks_input(response) {
        return Ok(());
    }
    if !version.is_stateless() {
        return Err(RpcError::new(
            200,
            INTERNAL_ERROR,
            format!(
                "Internal error: the upstream asked for input (an input_required result), which only MCP 2026-07-28 \
                 clients can give; this client speaks {}",
                version.as_str()
            ),
        ));
    }
    let key = keys(env, STATES).first().copied();
    let nonce = nonce().map_err(|e| RpcError::new(200, INTERNAL_ERROR, format!("Internal error: {e}")))?;
    ir::seal_result(
        &mut response["result"],
        ir::declared(params),
        key.as_ref(),
        nonce,
        bind,
        crate::shell::platform::now_ms(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the upstream (or the client) reads when an id is not sealed: the sentence naming
    /// the missing key, the platform's words, or the sealer's.
    #[test]
    fn not_sealed_says_why() {
        let sentence = "Flowgate has no SECRETS_KEY to seal the request's id with, so it relays nothing";
        assert_eq!(NotSealed::NoKey(sentence).to_string(), sentence);
        assert_eq!(NotSealed::from(Unavailable).to_string(), Unavailable.to_string());
        assert_eq!(NotSealed::from("sealing failed".to_string()).to_string(), "sealing failed");
    }
}
