//! Multi round-trip requests (MCP 2026-07-28, SEP-2322) of upstream servers, passed through
//! without state. An upstream that needs input answers `resultType: "input_required"` with
//! `inputRequests` and an opaque `requestState`; the client retries the same request with
//! `inputResponses` and that state. Flowgate hands the client its own `requestState` instead:
//! `fg-state.` + AES-256-GCM over {server, app, method, name, forwarded-credential scope, the
//! caller (`relay::caller_hash`), expiry, the upstream's state}. The retry is opened on any
//! isolate and the upstream gets its own state back, so a client can neither read it, alter it,
//! nor take it to another server, app, tool or set of credentials; nor can another client of
//! the same server continue the round with it.

use crate::json;
use serde_json::{Map, Value};

use super::relay::{self, Channel, ClientCaps};
use crate::pure::protocol::jsonrpc::{RpcError, INTERNAL_ERROR, INVALID_PARAMS};
use crate::pure::protocol::meta;
use crate::pure::protocol::tasks::MISSING_REQUIRED_CLIENT_CAPABILITY;

/// How Flowgate's `requestState` starts.
pub const STATE_PREFIX: &str = "fg-state.";
/// How long a client has to answer (a person may be filling in a form).
pub const STATE_TTL_MS: u64 = 3_600_000;

/// What a state is bound to: server id, app id, method, name (tool, prompt or URI), the hash
/// of the forwarded credentials (empty when none), and the caller's backend `user` (sealed as
/// its `relay::caller_hash`).
pub type Bind<'a> = [&'a str; 6];

/// How many claims of a sealed state are the bound ones and the expiry (the upstream's state,
/// or a bridged call's object and round, follow).
const BOUND: usize = 7;

fn invalid(why: &str) -> RpcError {
    RpcError::new(200, INVALID_PARAMS, format!("Invalid params: {why}"))
}

/// The params of a client's request that belong to an upstream's round trips: `inputResponses`
/// (an object of objects), `requestState` (a string) and, in `_meta`, the client capabilities
/// an input request may need (so the upstream asks only for what the client can answer).
pub fn client_params(params: &Map<String, Value>) -> Result<Map<String, Value>, RpcError> {
    let mut out = Map::new();
    match params.get("inputResponses") {
        None => {}
        Some(Value::Object(r)) if r.values().all(Value::is_object) => {
            out.insert("inputResponses".into(), Value::Object(r.clone()));
        }
        Some(_) => {
            return Err(invalid(
                "`inputResponses` must be an object of responses (objects), keyed as the inputRequests were",
            ))
        }
    }
    match params.get("requestState") {
        None => {}
        Some(s @ Value::String(_)) => {
            out.insert("requestState".into(), s.clone());
        }
        Some(_) => return Err(invalid("`requestState` must be the string the input_required result gave")),
    }
    if let Some(Value::Object(c)) = params.get("_meta").and_then(|m| m.get(meta::CLIENT_CAPABILITIES)) {
        let caps: Map<String, Value> = c
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "sampling" | "elicitation" | "roots"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.insert("_meta".into(), json!({ meta::CLIENT_CAPABILITIES: caps }));
    }
    Ok(out)
}

/// Replaces the client's `requestState` in `params` by the upstream's own; `Err` is the
/// `-32602` the client gets for a state Flowgate did not give, gave for something else, or
/// that has expired.
pub fn open_state(params: &mut Map<String, Value>, keys: &[[u8; 32]], bind: Bind, now_ms: u64) -> Result<(), RpcError> {
    let Some(token) = params.get("requestState").and_then(Value::as_str) else { return Ok(()) };
    let expired = "`requestState` has expired (a client has an hour to answer); send the request again without it";
    let mut extra = open_bound(STATE_PREFIX, keys, token, bind, now_ms, 1, expired)?;
    params.insert("requestState".into(), extra.remove(0));
    Ok(())
}

/// Opens a `requestState` sealed by [`seal_bound`] under `prefix`: its `extra` claims after the
/// bound ones, once those match `bind` and the state has not expired (`expired` says so);
/// `Err` is the `-32602` the client gets, which never says whose a state was.
pub fn open_bound(
    prefix: &str,
    keys: &[[u8; 32]],
    token: &str,
    bind: Bind,
    now_ms: u64,
    extra: usize,
    expired: &str,
) -> Result<Vec<Value>, RpcError> {
    let mut claims: Vec<Value> = relay::open_as(prefix, keys, token)
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(|c: &Vec<Value>| c.len() == BOUND + extra)
        .ok_or_else(|| {
            invalid("`requestState` is not one Flowgate gave (altered, made up, or sealed with a key it no longer has)")
        })?;
    let bound: Vec<&str> = claims[..6].iter().map(|v| v.as_str().unwrap_or_default()).collect();
    if bound[0] != bind[0] {
        return Err(invalid("`requestState` was given by another MCP server"));
    }
    if bound[5] != relay::caller_hash(bind[5]) {
        return Err(invalid(
            "`requestState` was given to another client: only the client that got it (the same client key, OAuth \
             subject, or client name) can send it back",
        ));
    }
    if bound[..5] != bind[..5] {
        return Err(invalid(
            "`requestState` was given for another request (another app, tool, prompt or resource, or other forwarded credentials)",
        ));
    }
    if claims[6].as_u64().is_none_or(|e| now_ms > e) {
        return Err(invalid(expired));
    }
    Ok(claims.split_off(BOUND))
}

/// A `requestState` under `prefix`: `bind` (the caller as its hash), the expiry and `extra`,
/// sealed under `key`.
pub fn seal_bound(
    prefix: &str,
    key: &[u8; 32],
    nonce: [u8; 12],
    bind: Bind,
    expires_ms: u64,
    extra: &[Value],
) -> Result<String, RpcError> {
    let caller = relay::caller_hash(bind[5]);
    let mut claims = vec![json!(bind[0]), json!(bind[1]), json!(bind[2]), json!(bind[3]), json!(bind[4])];
    claims.extend([json!(caller), json!(expires_ms)]);
    claims.extend(extra.iter().cloned());
    relay::seal_as(prefix, key, nonce, &Value::Array(claims).to_string())
        .map_err(|e| RpcError::new(200, INTERNAL_ERROR, format!("Internal error: {e}")))
}

/// Whether an upstream's response is an `input_required` result.
pub fn asks_input(response: &Value) -> bool {
    response.pointer("/result/resultType").and_then(Value::as_str) == Some("input_required")
}

/// Makes an upstream's `input_required` result ready for a client that declared `caps`: each
/// input request must be one the client can answer (else `-32021`, naming the capability), and
/// the upstream's `requestState` is sealed under `key`.
pub fn seal_result(
    result: &mut Value,
    caps: ClientCaps,
    key: Option<&[u8; 32]>,
    nonce: [u8; 12],
    bind: Bind,
    now_ms: u64,
) -> Result<(), RpcError> {
    let requests = result.get("inputRequests").and_then(Value::as_object).ok_or_else(|| {
        RpcError::new(
            200,
            INTERNAL_ERROR,
            "Internal error: the upstream's input_required result has no inputRequests object",
        )
    })?;
    for request in requests.values() {
        if let Err(why) = relay::decide(request, Channel::Stream(caps)) {
            let cap = match request.get("method").and_then(Value::as_str) {
                Some("sampling/createMessage") => "sampling",
                Some("elicitation/create") => "elicitation",
                Some("roots/list") => "roots",
                _ => {
                    return Err(RpcError::new(
                        200,
                        INTERNAL_ERROR,
                        format!("Internal error: the upstream asked for input: {why}"),
                    ))
                }
            };
            return Err(RpcError::new(
                200,
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!("Missing required client capability: {why}"),
            )
            .with_data(json!({"requiredCapabilities": {cap: {}}})));
        }
    }
    let Some(state) = result.get("requestState").cloned() else { return Ok(()) };
    let key = key.ok_or_else(|| {
        RpcError::new(
            200,
            INTERNAL_ERROR,
            "Internal error: Flowgate has no SECRETS_KEY to seal the upstream's requestState with",
        )
    })?;
    result["requestState"] = seal_bound(STATE_PREFIX, key, nonce, bind, now_ms + STATE_TTL_MS, &[state])?.into();
    Ok(())
}

/// The capabilities a client declared in a request's params (as [`client_params`] kept them).
pub fn declared(params: &Map<String, Value>) -> ClientCaps {
    ClientCaps::from_declared(params.get("_meta").and_then(|m| m.get(meta::CLIENT_CAPABILITIES)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: [u8; 32] = [8u8; 32];
    const B: Bind = ["srv", "app", "tools/call", "ask", "", "alice"];

    fn asking(state: Option<&str>) -> Value {
        let mut r = json!({"resultType": "input_required", "inputRequests": {
            "who": {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}}});
        if let Some(s) = state {
            r["requestState"] = s.into();
        }
        r
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn client_params_keep_what_the_upstream_needs_and_refuse_malformed_input() {
        let p = client_params(&params(
            json!({"name": "t", "inputResponses": {"a": {"action": "accept"}}, "requestState": "s",
            "_meta": {meta::CLIENT_CAPABILITIES: {"sampling": {}, "extensions": {"x": {}}}, "other": 1}}),
        ))
        .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"inputResponses": {"a": {"action": "accept"}}, "requestState": "s", "_meta": {meta::CLIENT_CAPABILITIES: {"sampling": {}}}})
        );
        for bad in
            [json!({"inputResponses": {"a": 12345}}), json!({"inputResponses": null}), json!({"requestState": 3})]
        {
            assert_eq!(client_params(&params(bad)).unwrap_err().code, INVALID_PARAMS);
        }
        assert!(client_params(&Map::new()).unwrap().is_empty());
    }

    #[test]
    fn states_are_sealed_bound_and_opened() {
        let caps = ClientCaps { elicitation_form: true, ..ClientCaps::default() };
        let mut r = asking(Some("upstream-secret"));
        seal_result(&mut r, caps, Some(&K), [1; 12], B, 1_000).unwrap();
        let token = r["requestState"].as_str().unwrap().to_string();
        assert!(token.starts_with(STATE_PREFIX) && !token.contains("upstream-secret"));
        let retry = |t: &str| params(json!({"requestState": t, "inputResponses": {}}));
        let mut p = retry(&token);
        open_state(&mut p, &[K], B, 2_000).unwrap();
        assert_eq!(p["requestState"], "upstream-secret");
        let msg = |b: Bind, now: u64, t: &str| open_state(&mut retry(t), &[K], b, now).unwrap_err().message;
        assert!(msg(["other", "app", "tools/call", "ask", "", "alice"], 0, &token).contains("another MCP server"));
        assert!(msg(["srv", "app", "tools/call", "other", "", "alice"], 0, &token).contains("another request"));
        assert!(msg(["srv", "app", "tools/call", "ask", "creds", "alice"], 0, &token).contains("another request"));
        assert!(msg(B, 1_000 + STATE_TTL_MS + 1, &token).contains("expired"));
        // Bound to its caller: another client of the same server (another key, another OAuth
        // subject, another client name) cannot continue the round, and is not told whose it is.
        for other in ["bob", "", "alice "] {
            let m = msg(["srv", "app", "tools/call", "ask", "", other], 0, &token);
            assert!(m.contains("another client") && !m.contains("alice"), "{m}");
        }
        assert!(msg(B, 0, &format!("{token}-TAMPERED")).contains("not one Flowgate gave"));
        assert!(msg(B, 0, "upstream-secret").contains("not one Flowgate gave"));
        assert!(open_state(&mut retry(&token), &[[9; 32]], B, 0).is_err());
        // No state, nothing to open; no state from the upstream, none sealed.
        open_state(&mut Map::new(), &[K], B, 0).unwrap();
        let mut r = asking(None);
        seal_result(&mut r, caps, None, [1; 12], B, 0).unwrap();
        assert!(r.get("requestState").is_none());
        assert!(seal_result(&mut asking(Some("s")), caps, None, [1; 12], B, 0)
            .unwrap_err()
            .message
            .contains("SECRETS_KEY"));
    }

    #[test]
    fn input_requests_need_the_clients_capabilities() {
        let e = seal_result(&mut asking(Some("s")), ClientCaps::default(), Some(&K), [1; 12], B, 0).unwrap_err();
        assert_eq!(e.code, MISSING_REQUIRED_CLIENT_CAPABILITY);
        assert_eq!(e.data, Some(json!({"requiredCapabilities": {"elicitation": {}}})));
        let mut ping = json!({"resultType": "input_required", "inputRequests": {"p": {"method": "ping"}}});
        assert_eq!(
            seal_result(&mut ping, ClientCaps::default(), Some(&K), [1; 12], B, 0).unwrap_err().code,
            INTERNAL_ERROR
        );
        assert!(asks_input(&json!({"result": asking(None)})) && !asks_input(&json!({"result": {"content": []}})));
        let p = params(json!({"_meta": {meta::CLIENT_CAPABILITIES: {"roots": {}}}}));
        assert!(declared(&p).roots && !declared(&p).sampling);
    }
}
