//! `param_headers`: `Mcp-Param-*` request headers (SEP-2243), which a client sends beside the
//! JSON-RPC body and Flowgate's server checks against the arguments, and Flowgate's upstream
//! client sends. Any value encodes to a header-safe string that decodes to itself; a decoded
//! header re-encodes to itself; and what Flowgate's client sends for a tool's arguments,
//! Flowgate's server accepts (in any header-name case), while a missing header is refused.

use serde_json::Value;

use flowgate::pure::protocol::param_headers::{check, declared, decode_value, encode_value, outgoing};

pub fn param_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    round_trip(&text);
    received(text.trim());
    if let Ok(tool) = serde_json::from_slice::<Value>(data) {
        tool_headers(&tool);
    }
}

/// decode(encode(x)) == x, and the encoded form is visible ASCII with no space at either end.
fn round_trip(value: &str) {
    let encoded = encode_value(value);
    assert!(encoded.bytes().all(|b| (0x20..0x7f).contains(&b)), "{value:?} encoded as {encoded:?}");
    assert!(!encoded.starts_with(' ') && !encoded.ends_with(' '), "{encoded:?}");
    assert_eq!(decode_value(&encoded).as_deref(), Ok(value), "{value:?} encoded as {encoded:?}");
}

/// A header as received: literal text is itself; whatever decodes, re-encodes to itself.
fn received(header: &str) {
    match decode_value(header) {
        Ok(value) => {
            if header.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")).is_none() {
                assert_eq!(value, header);
            }
            round_trip(&value);
        }
        Err(why) => assert!(!why.is_empty()),
    }
}

fn tool_headers(tool: &Value) {
    let Ok(params) = declared(tool) else { return };
    for (i, p) in params.iter().enumerate() {
        assert!(!p.header.is_empty() && p.header.bytes().all(|b| b.is_ascii_graphic()), "{:?}", p.header);
        assert!(!params[..i].iter().any(|q| q.header.eq_ignore_ascii_case(&p.header)), "{params:?}");
    }
    let args = tool.get("arguments").cloned().unwrap_or(Value::Null);
    let sent = outgoing(&params, &args);
    let carried = |a: &str| args.get(a).is_some_and(|v| !matches!(v, Value::Array(_) | Value::Object(_)));
    if !params.iter().all(|p| args.get(&p.argument).is_none() || carried(&p.argument)) {
        return;
    }
    let args = args.as_object();
    assert_eq!(check(&params, args, &sent), Ok(()), "{tool} sent as {sent:?}");
    // Header names arrive lower-cased from the runtime.
    let lower: Vec<(String, String)> = sent.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    assert_eq!(check(&params, args, &lower), Ok(()), "{tool} sent as {lower:?}");
    for i in 0..lower.len() {
        let mut fewer = lower.clone();
        fewer.remove(i);
        assert!(check(&params, args, &fewer).is_err(), "{tool}: {:?} left out, still accepted", lower[i]);
    }
}
