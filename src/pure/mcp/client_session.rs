//! A client that stays: a 2025-revision client that opens the standalone `GET` stream of its
//! Flowgate session gets `resources/subscribe` and the upstreams' `notifications/resources/updated`
//! and `…/list_changed` on it. The shell's `ClientSession` Durable Object (one per sealed session
//! id) holds that stream, the standalone streams of the upstream sessions it is subscribed on,
//! and per upstream app a session of its own whose stream carries the list changes; this module
//! decides what it is named, who may use it, what it remembers and what of an upstream's stream
//! reaches the client. No IO.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::pure::ids::sha256_hex;
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::version::Version;

/// How long the object keeps the client's stream (and with it the upstreams' streams and the
/// subscriptions) without anything reaching the client or any request of the client's through it.
pub const IDLE_MS: u64 = 30 * 60 * 1000;
/// A comment line on the client's stream after this long without output, so that proxies keep
/// it open and a client that went away is noticed.
pub const KEEPALIVE_MS: u64 = 15_000;
/// How long a `resources/subscribe` waits for the session's stream to be opened: the SDKs open
/// it without waiting after `initialize`, so it may arrive just after the first subscribe.
pub const STREAM_WAIT_MS: u64 = 2_000;
/// The most URIs one session may be subscribed to.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// The upstream notifications passed on to the client as they come (no URI to check), from the
/// upstream streams the object holds, once the session's cached lists of that app are dropped.
pub const LIST_CHANGED: [&str; 3] =
    ["notifications/tools/list_changed", "notifications/resources/list_changed", "notifications/prompts/list_changed"];
pub const RESOURCE_UPDATED: &str = "notifications/resources/updated";

/// The object of one client session of one server: the session id is a random sealed value, so
/// its hash names one object no other session reaches.
pub fn object_name(server_id: &str, session_id: &str) -> String {
    format!("client-session:{}", sha256_hex(&format!("{server_id}\n{session_id}")))
}

/// The caller as the object remembers it (a hash of the endpoint's caller tag: the client key,
/// OAuth subject or anonymous identity): a request of another caller presenting the session id
/// is refused.
pub fn owner(caller_tag: &str) -> String {
    sha256_hex(caller_tag)
}

/// Whether a client of `version` can have a stream held for it: the 2025 revisions with
/// Streamable HTTP (2024-11-05 clients use the legacy transport; 2026-07-28 has no sessions).
pub fn can_stay(version: Version) -> bool {
    version >= Version::V2025_03_26 && !version.is_stateless()
}

/// The URIs a session is subscribed to, each with the app it was forwarded to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Subscriptions(BTreeMap<String, String>);

impl Subscriptions {
    /// Records `uri` (owned by `app_id`); `Err` says why not.
    pub fn add(&mut self, uri: &str, app_id: &str) -> Result<(), String> {
        if !self.0.contains_key(uri) && self.0.len() >= MAX_SUBSCRIPTIONS {
            return Err(format!(
                "this session is subscribed to {MAX_SUBSCRIPTIONS} resources already, the most Flowgate keeps; \
                 unsubscribe from one first"
            ));
        }
        self.0.insert(uri.to_string(), app_id.to_string());
        Ok(())
    }

    /// Forgets `uri`; the app it was forwarded to, if no other subscription of the session is
    /// that app's (its upstream stream is no longer needed).
    pub fn remove(&mut self, uri: &str) -> Option<String> {
        let app = self.0.remove(uri)?;
        (!self.0.values().any(|a| *a == app)).then_some(app)
    }

    /// Whether `app_id`'s update of `uri` is for this session.
    pub fn wants(&self, app_id: &str, uri: &str) -> bool {
        self.0.get(uri).is_some_and(|a| a == app_id)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What becomes of one message of an upstream's standalone stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Relay {
    /// Sent to the client on its stream, as it is.
    Client(Value),
    /// A list changed: the session's cached lists of that app are dropped (the client will read
    /// them again), then this goes to the client.
    Changed(Value),
    /// A request of the upstream's: answered at once with this error (posted to the upstream).
    Refuse(Value),
    Drop,
}

/// Which of the object's upstream streams a message came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The caller's own upstream session, held for a subscription. Its list changes pass only
    /// when no stream of [`Source::Lists`] follows the app (else the client would get each
    /// change twice).
    Subscription { lists_followed: bool },
    /// The object's own session of the app, held for its list changes; the caller subscribed on
    /// another session, so no update of this one is for it.
    Lists,
}

/// Routes a message `app_id`'s upstream sent on a standalone stream of `source`.
pub fn route(app_id: &str, subs: &Subscriptions, source: Source, message: &Value) -> Relay {
    let method = message.get("method").and_then(Value::as_str);
    match (method, message.get("id"), source) {
        (Some(m), Some(_), _) => Relay::Refuse(refusal(message, m)),
        (Some(m), None, Source::Lists | Source::Subscription { lists_followed: false })
            if LIST_CHANGED.contains(&m) =>
        {
            Relay::Changed(json!({"jsonrpc": "2.0", "method": m}))
        }
        (Some(RESOURCE_UPDATED), None, Source::Subscription { .. }) => {
            match message.pointer("/params/uri").and_then(Value::as_str) {
                Some(uri) if subs.wants(app_id, uri) => {
                    Relay::Client(json!({"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": uri}}))
                }
                _ => Relay::Drop,
            }
        }
        _ => Relay::Drop,
    }
}

/// Which lists some upstream says it tells its clients about changes to (`listChanged: true` in
/// the capabilities of its `initialize`): those Flowgate passes changes of on, and declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListChanges {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
}

impl ListChanges {
    /// From the upstreams' capabilities.
    pub fn of<'a>(upstreams: impl IntoIterator<Item = &'a Value>) -> ListChanges {
        let mut c = ListChanges::default();
        for caps in upstreams {
            let says = |list: &str| caps.get(list).and_then(|l| l.get("listChanged")) == Some(&Value::Bool(true));
            c.tools |= says("tools");
            c.resources |= says("resources");
            c.prompts |= says("prompts");
        }
        c
    }
}

/// The error a request on the held standalone stream gets: no call runs, so no client is asked.
fn refusal(request: &Value, method: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {
            "code": jsonrpc::METHOD_NOT_FOUND,
            "message": format!(
                "Flowgate cannot take {} on this stream: it holds the stream for notifications only, and no call \
                 of the client is running to ask (Flowgate relays requests while a tool call runs)",
                crate::pure::quote::quote_input(method)
            ),
        },
    })
}

/// One message as an event of the client's stream.
pub fn sse_event(message: &Value) -> Vec<u8> {
    format!("event: message\ndata: {message}\n\n").into_bytes()
}

/// The `initialize` result of a client that can stay (by the revision it agreed), its
/// capabilities widened to what the session's stream delivers: `resources.subscribe` (when it
/// declares resources), and `listChanged` on each list some upstream tells changes of
/// (`changes`). Declared before the client opens the stream (the spec puts it in `initialize`);
/// without the stream, `resources/subscribe` is refused saying so, and no change is told.
pub fn declare(result: &mut Value, changes: ListChanges) {
    let version = result.get("protocolVersion").and_then(Value::as_str).and_then(Version::parse);
    if !version.is_some_and(can_stay) {
        return;
    }
    let Some(caps) = result.get_mut("capabilities").and_then(Value::as_object_mut) else { return };
    if let Some(o) = caps.get_mut("resources").and_then(Value::as_object_mut) {
        o.insert("subscribe".into(), json!(true));
    }
    for (list, changed) in [("tools", changes.tools), ("resources", changes.resources), ("prompts", changes.prompts)] {
        if let Some(o) = caps.get_mut(list).and_then(Value::as_object_mut).filter(|_| changed) {
            o.insert("listChanged".into(), json!(true));
        }
    }
}

/// The refusal of `resources/subscribe` (or `unsubscribe`) from a client with no stream for it
/// to be delivered on: `why` says which case.
pub fn no_stream(method: &str, version: Version, why: NoStream) -> RpcError {
    let words = match why {
        NoStream::Stateless => "this client's revision has no sessions, so there is no stream to send \
             notifications/resources/updated on; read the resource again instead"
            .to_string(),
        NoStream::NoSession => "it needs this server's session: send the Mcp-Session-Id Flowgate gave at \
             initialize (a Worker without SECRETS_KEY gives none, and then keeps no subscriptions)"
            .to_string(),
        NoStream::NotOpen => "open this session's stream first (GET on the MCP URL with the Mcp-Session-Id and \
             Accept: text/event-stream): updates are delivered there, and subscriptions last as long as it does"
            .to_string(),
        NoStream::Unavailable(e) => format!("the session's stream cannot be reached now ({e}); open it again"),
    };
    RpcError::new(
        version.method_not_found_status(),
        jsonrpc::METHOD_NOT_FOUND,
        format!("Method not found: {method} ({words})"),
    )
}

/// Why a subscription has no stream.
#[derive(Debug, Clone, PartialEq)]
pub enum NoStream {
    Stateless,
    NoSession,
    NotOpen,
    Unavailable(String),
}

#[cfg(test)]
mod tests;
