//! SEP-2243 custom headers: a tool argument whose schema property says `x-mcp-header: <Name>`
//! also travels in an `Mcp-Param-<Name>` request header (2026-07-28), so that proxies can
//! route on it without reading the body. Both sides use this: Flowgate's server checks the
//! header against the argument, and its upstream client sends the header.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::pure::http_field::is_header_name;
use crate::pure::quote::plain_or_quoted;

/// The header name prefix (lowercase, as request headers are read).
pub const PREFIX: &str = "mcp-param-";

/// One argument that a tool mirrors into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The argument (a top-level property of the tool's `inputSchema`).
    pub argument: String,
    /// `<Name>` of `Mcp-Param-<Name>`, as the schema spells it.
    pub header: String,
}

/// The arguments a tool definition mirrors into headers (empty, without allocating, for a tool
/// that declares none); `Err` names what makes a declaration invalid, and a client must then
/// not use the tool: an `x-mcp-header` that is not a non-empty header-name token, is on a
/// property that is not a string, integer or boolean, or repeats another one's name (case
/// does not count).
pub fn declared(tool: &Value) -> Result<Vec<ParamHeader>, String> {
    let Some(props) = tool.get("inputSchema").and_then(|s| s.get("properties")).and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<ParamHeader> = Vec::new();
    for (argument, schema) in props {
        let Some(name) = schema.get("x-mcp-header") else { continue };
        let Some(name) = name.as_str().filter(|n| is_header_name(n)) else {
            return Err(format!(
                "property {} has x-mcp-header {}, which is not a header name (non-empty, visible ASCII, no spaces \
                 or separators)",
                plain_or_quoted(argument),
                match name.as_str() {
                    Some(s) => plain_or_quoted(s),
                    None => name.to_string(),
                }
            ));
        };
        if !primitive(schema.get("type")) {
            return Err(format!(
                "property {} has x-mcp-header but is not of type string, integer or boolean",
                plain_or_quoted(argument)
            ));
        }
        if let Some(other) = out.iter().find(|p| p.header.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "properties {} and {} both have x-mcp-header {}",
                plain_or_quoted(&other.argument),
                plain_or_quoted(argument),
                plain_or_quoted(name)
            ));
        }
        out.push(ParamHeader { argument: argument.clone(), header: name.to_string() });
    }
    Ok(out)
}

/// A schema `type` a header can carry: string, integer or boolean (`null` besides one of them
/// is allowed); no `type` at all is taken as allowed.
fn primitive(ty: Option<&Value>) -> bool {
    let ok = |t: &str| matches!(t, "string" | "integer" | "boolean");
    match ty {
        None => true,
        Some(Value::String(t)) => ok(t),
        Some(Value::Array(ts)) => {
            ts.iter().all(|t| t.as_str().is_some_and(|t| ok(t) || t == "null")) && ts.iter().any(|t| t != "null")
        }
        Some(_) => false,
    }
}

/// A value as an MCP header carries it: as is when it is visible ASCII (spaces inside allowed),
/// else (control characters, non-ASCII, leading or trailing whitespace, or the shape of the
/// encoded form itself, which the receiver would decode) `=?base64?<standard base64 of its
/// UTF-8>?=`.
pub fn encode_value(s: &str) -> String {
    let plain = s.bytes().all(|b| (0x20..0x7F).contains(&b))
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && encoded_part(s).is_none();
    if plain {
        s.to_string()
    } else {
        format!("=?base64?{}?=", crate::pure::base64::encode(s))
    }
}

/// A received header value (already trimmed of surrounding whitespace): `=?base64?…?=` is
/// decoded (strict: standard alphabet, canonical padding, UTF-8), anything else is literal
/// and must be visible ASCII. `Err` says what is wrong, without repeating the value.
pub fn decode_value(v: &str) -> Result<Cow<'_, str>, &'static str> {
    match encoded_part(v) {
        Some(inner) => {
            let bytes = crate::pure::base64::decode(inner)
                .map_err(|_| "its =?base64?…?= value is not valid base64 (standard alphabet, with padding)")?;
            String::from_utf8(bytes).map(Cow::Owned).map_err(|_| "its =?base64?…?= value is not UTF-8 text")
        }
        None if v.bytes().all(|b| b == b'\t' || (0x20..0x7F).contains(&b)) => Ok(Cow::Borrowed(v)),
        None => Err("it has characters that are not visible ASCII; such values must be sent =?base64?…?="),
    }
}

/// The base64 of a value in the encoded form `=?base64?…?=`.
fn encoded_part(v: &str) -> Option<&str> {
    v.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?="))
}

/// An argument as a header shows it: strings as they are, numbers and booleans as JSON writes
/// them; `None` for null (no header), `Err` for an object or array (no header can carry it).
fn rendered(v: &Value) -> Result<Option<Cow<'_, str>>, &'static str> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(Cow::Borrowed(s))),
        Value::Bool(b) => Ok(Some(Cow::Borrowed(if *b { "true" } else { "false" }))),
        Value::Number(n) => Ok(Some(Cow::Owned(n.to_string()))),
        Value::Array(_) => Err("an array"),
        Value::Object(_) => Err("an object"),
    }
}

/// The `Mcp-Param-*` headers for a call with `args` of a tool that declares `params` (what
/// Flowgate's client sends a 2026-07-28 upstream): one per declared argument that is present
/// and not null, its value encoded by [`encode_value`].
pub fn outgoing(params: &[ParamHeader], args: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in params {
        if let Some(Ok(Some(v))) = args.get(&p.argument).map(rendered) {
            out.push((format!("Mcp-Param-{}", p.header), encode_value(&v)));
        }
    }
    out
}

/// The value of the request header `Mcp-Param-<name>` among `headers` (any case), trimmed.
fn sent<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| {
            k.len() == PREFIX.len() + name.len()
                && k.get(..PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
                && k.get(PREFIX.len()..).is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .map(|(_, v)| v.trim())
}

/// Checks a call's `Mcp-Param-*` headers against its arguments (the server side, for a
/// 2026-07-28 request): each declared argument that is present must be repeated in its header
/// (decoded by [`decode_value`]; numbers compare as numbers), and a header may not be sent
/// for an argument that is absent. `Err` is the mismatch, naming the header and the argument.
pub fn check(
    params: &[ParamHeader],
    args: Option<&Map<String, Value>>,
    headers: &[(String, String)],
) -> Result<(), String> {
    for p in params {
        let header = format!("Mcp-Param-{}", p.header);
        let arg = plain_or_quoted(&p.argument);
        let value = args.and_then(|a| a.get(&p.argument)).map(rendered).unwrap_or(Ok(None));
        match (sent(headers, &p.header), value) {
            (None, Ok(None)) => {}
            (Some(_), Ok(None)) => {
                return Err(format!("the {header} header is sent but arguments.{arg} is absent or null"));
            }
            (_, Err(kind)) => {
                return Err(format!(
                    "arguments.{arg} is {kind}, which the {header} header cannot carry (x-mcp-header is for strings, \
                     integers and booleans)"
                ));
            }
            (None, Ok(Some(v))) => {
                return Err(format!(
                    "the {header} header is required: arguments.{arg} is set (send {})",
                    plain_or_quoted(&encode_value(&v))
                ));
            }
            (Some(raw), Ok(Some(v))) => {
                let got = decode_value(raw).map_err(|why| format!("the {header} header is invalid: {why}"))?;
                let number = args.and_then(|a| a.get(&p.argument)).and_then(Value::as_f64);
                if !(got == v || number.is_some() && as_number(&got) == number) {
                    return Err(format!(
                        "the {header} header ({}) does not match arguments.{arg} ({})",
                        plain_or_quoted(&got),
                        plain_or_quoted(&v)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A header value read as a JSON number (so `42.0` and `1e3` match `42` and `1000`), with the
/// JSON reader the Worker has anyway.
fn as_number(s: &str) -> Option<f64> {
    serde_json::from_str::<Value>(s).ok().as_ref().and_then(Value::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(props: Value) -> Value {
        json!({"name": "t", "inputSchema": {"type": "object", "properties": props}})
    }

    fn ph(argument: &str, header: &str) -> ParamHeader {
        ParamHeader { argument: argument.into(), header: header.into() }
    }

    #[test]
    fn declarations_are_read_and_invalid_ones_refused() {
        assert_eq!(declared(&json!({"name": "t"})), Ok(vec![]));
        assert_eq!(declared(&tool(json!({"q": {"type": "string"}}))), Ok(vec![]));
        let ok = tool(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "verbose": {"type": ["boolean", "null"], "x-mcp-header": "Verbose"},
            "query": {"type": "string"},
        }));
        let mut got = declared(&ok).unwrap();
        got.sort_by(|a, b| a.argument.cmp(&b.argument));
        assert_eq!(got, vec![ph("priority", "Priority"), ph("region", "Region"), ph("verbose", "Verbose")]);
        // The conformance suite's invalid declarations (http-invalid-tool-headers).
        for (props, why) in [
            (json!({"v": {"type": "string", "x-mcp-header": ""}}), "not a header name"),
            (json!({"v": {"type": "string", "x-mcp-header": 7}}), "not a header name"),
            (json!({"v": {"type": "string", "x-mcp-header": "My Region"}}), "not a header name"),
            (json!({"v": {"type": "string", "x-mcp-header": "Region:Primary"}}), "not a header name"),
            (json!({"v": {"type": "string", "x-mcp-header": "Région"}}), "not a header name"),
            (json!({"v": {"type": "string", "x-mcp-header": "Region\t1"}}), "not a header name"),
            (json!({"v": {"type": "object", "x-mcp-header": "Data"}}), "not of type"),
            (json!({"v": {"type": "array", "x-mcp-header": "Items"}}), "not of type"),
            (json!({"v": {"type": "null", "x-mcp-header": "Nil"}}), "not of type"),
            (json!({"v": {"type": "number", "x-mcp-header": "Score"}}), "not of type"),
            (
                json!({"a": {"type": "string", "x-mcp-header": "Region"}, "b": {"type": "string", "x-mcp-header": "Region"}}),
                "both",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": "MyField"}, "b": {"type": "string", "x-mcp-header": "myfield"}}),
                "both",
            ),
        ] {
            let e = declared(&tool(props.clone())).unwrap_err();
            assert!(e.contains(why), "{props}: {e}");
        }
    }

    #[test]
    fn values_are_encoded_as_sep_2243_asks() {
        assert_eq!(encode_value("us-west1"), "us-west1");
        assert_eq!(encode_value("us west 1"), "us west 1");
        assert_eq!(encode_value(""), "");
        assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_value("us-west1 "), "=?base64?dXMtd2VzdDEg?=");
        assert_eq!(encode_value("\tindented"), "=?base64?CWluZGVudGVk?=");
        assert_eq!(encode_value("line1\r\nline2"), "=?base64?bGluZTENCmxpbmUy?=");
        assert_eq!(encode_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        for s in ["Hello, 世界", " x", "a\nb", "plain"] {
            assert_eq!(decode_value(&encode_value(s)).unwrap(), s, "round trip");
        }
    }

    /// A plain value shaped like the encoded form would be decoded by the receiver (found by
    /// the param_headers fuzz target): it is encoded too.
    #[test]
    fn a_value_that_looks_encoded_is_encoded() {
        for s in ["=?base64?YQ==?=", "=?base64?!!?=", "=?base64??="] {
            assert_eq!(decode_value(&encode_value(s)).as_deref(), Ok(s), "round trip of {s:?}");
        }
        assert_eq!(encode_value("=?base64?YQ==?="), "=?base64?PT9iYXNlNjQ/WVE9PT89?=");
        // Only the whole form: a prefix alone stays plain (the receiver reads it literally).
        assert_eq!(encode_value("=?base64?x"), "=?base64?x");
    }

    #[test]
    fn outgoing_headers_mirror_present_arguments() {
        let params = [ph("region", "Region"), ph("priority", "Priority"), ph("verbose", "Verbose"), ph("name", "Name")];
        let args = json!({"region": "us-west1", "priority": 42, "verbose": null, "name": " ü ", "query": "SELECT 1"});
        assert_eq!(
            outgoing(&params, &args),
            [
                ("Mcp-Param-Region".to_string(), "us-west1".to_string()),
                ("Mcp-Param-Priority".to_string(), "42".to_string()),
                ("Mcp-Param-Name".to_string(), "=?base64?IMO8IA==?=".to_string()),
            ]
        );
        assert_eq!(
            outgoing(&[ph("debug", "Debug")], &json!({"debug": false})),
            [("Mcp-Param-Debug".into(), "false".into())]
        );
        assert!(outgoing(&params, &json!({})).is_empty());
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_server_check_follows_the_conformance_cases() {
        let params = [ph("region", "Region")];
        let args = |v: Value| json!({ "region": v }).as_object().unwrap().clone();
        let hello = args(json!("Hello"));
        let ok = |h: &[(&str, &str)], a: &Map<String, Value>| check(&params, Some(a), &headers(h));
        assert_eq!(ok(&[("mcp-param-region", "=?base64?SGVsbG8=?=")], &hello), Ok(()));
        assert_eq!(ok(&[("MCP-PARAM-REGION", "  Hello ")], &hello), Ok(()), "names any case, values trimmed");
        // Without the full wrapper a value is literal.
        assert_eq!(ok(&[("mcp-param-region", "SGVsbG8=")], &args(json!("SGVsbG8="))), Ok(()));
        assert_eq!(ok(&[("mcp-param-region", "=?base64?SGVsbG8=")], &args(json!("=?base64?SGVsbG8="))), Ok(()));
        for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="] {
            let e = ok(&[("mcp-param-region", bad)], &hello).unwrap_err();
            assert!(e.contains("Mcp-Param-Region header is invalid") && e.contains("not valid base64"), "{e}");
        }
        let e = ok(&[("mcp-param-region", "=?base64?/w==?=")], &hello).unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
        let e = ok(&[("mcp-param-region", "Hellö")], &args(json!("Hellö"))).unwrap_err();
        assert!(e.contains("must be sent =?base64?"), "{e}");
        let e = ok(&[("mcp-param-region", "eu")], &hello).unwrap_err();
        assert_eq!(e, "the Mcp-Param-Region header (eu) does not match arguments.region (Hello)");
        let e = ok(&[], &args(json!("test-value"))).unwrap_err();
        assert_eq!(e, "the Mcp-Param-Region header is required: arguments.region is set (send test-value)");
        let e = ok(&[("mcp-param-region", "eu")], &Map::new()).unwrap_err();
        assert!(e.contains("is sent but arguments.region is absent"), "{e}");
        let e = ok(&[("mcp-param-region", "x")], &args(json!({"a": 1}))).unwrap_err();
        assert!(e.contains("arguments.region is an object"), "{e}");
        // Absent on both sides, or null: nothing to check; other headers are not looked at.
        assert_eq!(check(&params, None, &headers(&[("mcp-param-other", "x")])), Ok(()));
        assert_eq!(ok(&[], &args(Value::Null)), Ok(()));
        // Numbers and booleans as JSON writes them; numbers compare as numbers.
        let n = [ph("n", "N"), ph("b", "B")];
        let a = json!({"n": 42, "b": true}).as_object().unwrap().clone();
        assert_eq!(check(&n, Some(&a), &headers(&[("mcp-param-n", "42"), ("mcp-param-b", "true")])), Ok(()));
        assert_eq!(check(&n, Some(&a), &headers(&[("mcp-param-n", "42.0"), ("mcp-param-b", "true")])), Ok(()));
        assert!(check(&n, Some(&a), &headers(&[("mcp-param-n", "43"), ("mcp-param-b", "true")])).is_err());
        assert!(check(&n, Some(&a), &headers(&[("mcp-param-n", "42"), ("mcp-param-b", "True")])).is_err());
        // A tool that declares nothing checks nothing.
        assert_eq!(check(&[], Some(&a), &headers(&[("mcp-param-n", "1")])), Ok(()));
    }
}
