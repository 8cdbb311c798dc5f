//! The JSON-RPC 2.0 envelope: classifying an incoming message and building responses.

use crate::json;
use serde_json::{Map, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// 2026-07-28: an `Mcp-*` header disagrees with the body (or a required one is missing).
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the requested protocol revision is not served.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A JSON-RPC error with the HTTP status it travels with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub status: u16,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(status: u16, code: i64, message: impl Into<String>) -> Self {
        RpcError { status, code, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn to_response(&self, id: &Value) -> Value {
        let mut error = Map::with_capacity(3);
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.clone().into());
        if let Some(d) = &self.data {
            error.insert("data".into(), d.clone());
        }
        json!({ "jsonrpc": "2.0", "id": id, "error": error })
    }
}

pub fn result_response(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// One incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
        params: Option<&'a Map<String, Value>>,
    },
    Notification {
        method: &'a str,
        params: Option<&'a Map<String, Value>>,
    },
    /// A response from the client (to a server request); accepted and ignored.
    Response,
}

/// Classifies one message. The error carries the id to echo (`null` when there is none).
// The error path is cold; its size does not matter.
#[allow(clippy::result_large_err)]
pub fn classify(v: &Value) -> Result<Message<'_>, (Value, RpcError)> {
    let Some(obj) = v.as_object() else {
        return Err((Value::Null, invalid("a JSON-RPC message must be a JSON object")));
    };
    let id = obj.get("id");
    let echo = id.filter(|i| is_valid_id(i)).cloned().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((echo, invalid("`jsonrpc` must be \"2.0\"")));
    }
    if let Some(id) = id {
        if !is_valid_id(id) {
            return Err((Value::Null, invalid("`id` must be a string or an integer")));
        }
    }
    match (obj.get("method"), id) {
        (Some(Value::String(method)), _) => {
            let params = match obj.get("params") {
                None | Some(Value::Null) => None,
                Some(Value::Object(p)) => Some(p),
                Some(_) => {
                    return Err((echo, RpcError::new(200, INVALID_PARAMS, "`params` must be an object")));
                }
            };
            match id {
                Some(id) => Ok(Message::Request { id, method, params }),
                None if method.starts_with("notifications/") => Ok(Message::Notification { method, params }),
                // Without an id nothing could answer it; say so instead of dropping it.
                None => Err((
                    Value::Null,
                    invalid(&format!(
                        "{} is a request and needs an `id` (only notifications/* may omit it)",
                        crate::pure::quote::quote_input(method)
                    )),
                )),
            }
        }
        (Some(_), _) => Err((echo, invalid("`method` must be a string"))),
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => Ok(Message::Response),
        (None, _) => {
            Err((echo, invalid("a request needs a `method` (and an `id`); a response needs `result` or `error`")))
        }
    }
}

fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.as_i64().is_some() || id.as_u64().is_some()
}

fn invalid(message: &str) -> RpcError {
    RpcError::new(400, INVALID_REQUEST, format!("Invalid request: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        let req = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
        assert!(matches!(classify(&req), Ok(Message::Request { method: "ping", params: None, .. })));
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(classify(&note), Ok(Message::Notification { method: "notifications/initialized", params: None }));
        let resp = json!({"jsonrpc": "2.0", "id": "a", "result": {}});
        assert_eq!(classify(&resp), Ok(Message::Response));
    }

    #[test]
    fn rejects_what_is_not_json_rpc() {
        let cases = [
            (json!(42), Value::Null, "JSON object"),
            (json!({"id": 1, "method": "ping"}), json!(1), "jsonrpc"),
            (json!({"jsonrpc": "2.0", "id": true, "method": "ping"}), Value::Null, "`id`"),
            (json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), Value::Null, "`id`"),
            (json!({"jsonrpc": "2.0", "id": "x", "method": 3}), json!("x"), "`method`"),
            (json!({"jsonrpc": "2.0", "id": 2}), json!(2), "needs a `method`"),
            (json!({"jsonrpc": "2.0", "method": "tools/list"}), Value::Null, "needs an `id`"),
            (json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": [1]}), json!(3), "`params`"),
        ];
        for (msg, id, needle) in cases {
            let (echo, err) = classify(&msg).unwrap_err();
            assert_eq!(echo, id, "{msg}");
            assert!(err.message.contains(needle), "{msg}: {}", err.message);
        }
    }

    #[test]
    fn error_response_shape() {
        let e = RpcError::new(400, UNSUPPORTED_PROTOCOL_VERSION, "nope").with_data(json!({"supported": []}));
        let r = e.to_response(&json!(5));
        assert_eq!(r["id"], 5);
        assert_eq!(r["error"]["code"], -32022);
        assert_eq!(r["error"]["data"]["supported"], json!([]));
    }

    #[test]
    fn error_codes_are_the_specs() {
        // JSON-RPC 2.0's reserved codes and MCP's 2026-07-28 ones, as clients match them.
        assert_eq!(
            [PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR],
            [-32700, -32600, -32601, -32602, -32603]
        );
        assert_eq!(HEADER_MISMATCH, -32020);
    }

    #[test]
    fn ids_are_strings_or_integers_of_either_sign() {
        for id in [json!("a"), json!(-1), json!(u64::MAX), json!(0)] {
            assert!(is_valid_id(&id), "{id}");
        }
        for id in [json!(null), json!(1.5), json!({}), json!([1]), json!(true)] {
            assert!(!is_valid_id(&id), "{id}");
        }
    }
}
