//! The headers sent to an upstream MCP server besides the protocol's own: which names and values
//! may be sent at all, static and forwarded headers (`backend.headers`, `backend.forward_headers`),
//! and their order of precedence.

use serde_json::Value;

/// Headers Flowgate sets itself on upstream requests; forwarding them would break the protocol.
const RESERVED_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "last-event-id",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

/// A header value Flowgate refuses to send: CR, LF, NUL, other control characters (tab
/// included), non-ASCII, or leading/trailing whitespace. Refused rather than cleaned, because
/// HTTP stacks echo bad values into errors a model may see. Returns the reason, never the value.
pub fn header_value_problem(value: &str) -> Option<&'static str> {
    if value.contains(['\r', '\n']) {
        Some("contains a line break (CR or LF)")
    } else if value.contains('\0') {
        Some("contains a NUL character")
    } else if value.chars().any(|c| c.is_ascii_control()) {
        Some("contains a control character")
    } else if !value.is_ascii() {
        Some("contains non-ASCII characters")
    } else if value.starts_with(' ') || value.ends_with(' ') {
        Some("starts or ends with whitespace")
    } else {
        None
    }
}

/// An RFC 9110 field name (a `token`).
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Header precedence, lowest first: static < oauth < forwarded. Names compare
/// case-insensitively, so a later source replaces any case variant of a name.
pub fn merge_headers(layers: &[&[(String, String)]]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for layer in layers {
        for (name, value) in layer.iter() {
            out.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            out.push((name.clone(), value.clone()));
        }
    }
    out
}

/// `backend.forward_headers: {"<upstream header>": "<incoming header>"}` with
/// `backend.on_missing: deny|passthrough` (default deny): the headers to forward from the
/// incoming request. Errors name the missing incoming header or the unsafe header, by name
/// only; an unsafe value is refused whatever `on_missing` says.
pub fn forwarded_headers(
    config: &Value,
    incoming: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let map = match config.get("forward_headers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(
                "backend.forward_headers must be an object {\"<upstream header>\": \"<incoming header>\"}".into()
            )
        }
    };
    let deny = match config.get("on_missing") {
        None | Some(Value::Null) => true,
        Some(v) if v == "deny" => true,
        Some(v) if v == "passthrough" => false,
        Some(_) => return Err("backend.on_missing must be \"deny\" or \"passthrough\"".into()),
    };
    let mut out = Vec::with_capacity(map.len());
    for (upstream, from) in map {
        if !is_header_name(upstream) {
            return Err(format!("backend.forward_headers: {upstream:?} is not a valid header name"));
        }
        if RESERVED_HEADERS.contains(&upstream.to_ascii_lowercase().as_str()) {
            return Err(format!("backend.forward_headers.{upstream}: Flowgate sets this header itself"));
        }
        let Some(from) = from.as_str().filter(|f| is_header_name(f)) else {
            return Err(format!("backend.forward_headers.{upstream} must name an incoming header"));
        };
        match incoming(from) {
            Some(v) if !v.is_empty() => {
                if let Some(why) = header_value_problem(&v) {
                    return Err(format!(
                        "the request's {from} header (forwarded as {upstream}) {why}, so it was not sent"
                    ));
                }
                out.push((upstream.clone(), v));
            }
            _ if deny => {
                return Err(format!(
                    "the request has no {from} header, which this app forwards to its MCP server as {upstream} \
                     (backend.on_missing is deny)"
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::pairs;
    use super::*;

    #[test]
    fn header_value_problems() {
        assert_eq!(header_value_problem("Bearer abc.def"), None);
        assert_eq!(header_value_problem(""), None);
        assert_eq!(header_value_problem("a\rb"), Some("contains a line break (CR or LF)"));
        assert_eq!(header_value_problem("a\nb"), Some("contains a line break (CR or LF)"));
        assert_eq!(header_value_problem("a\0b"), Some("contains a NUL character"));
        for c in ['\x01', '\x0b', '\x0c', '\t', '\x1f', '\x7f'] {
            assert_eq!(header_value_problem(&format!("a{c}b")), Some("contains a control character"), "{c:?}");
        }
        assert_eq!(header_value_problem("clé"), Some("contains non-ASCII characters"));
        assert_eq!(header_value_problem(" a"), Some("starts or ends with whitespace"));
        assert_eq!(header_value_problem("a "), Some("starts or ends with whitespace"));
        assert_eq!(header_value_problem("a b"), None);
        assert!(
            is_header_name("X-Api-Key") && !is_header_name("X Key") && !is_header_name("") && !is_header_name("a:b")
        );
    }

    #[test]
    fn merge_precedence_is_case_insensitive() {
        let statics = pairs(&[("Authorization", "Static s"), ("X-Team", "a"), ("x-keep", "k")]);
        let oauth = pairs(&[("authorization", "Bearer oauth")]);
        let forwarded = pairs(&[("AUTHORIZATION", "Bearer user"), ("X-TEAM", "b")]);
        let merged = merge_headers(&[&statics, &oauth, &forwarded]);
        assert_eq!(merged, pairs(&[("x-keep", "k"), ("AUTHORIZATION", "Bearer user"), ("X-TEAM", "b")]));
        let merged = merge_headers(&[&statics, &oauth, &[]]);
        assert_eq!(merged, pairs(&[("X-Team", "a"), ("x-keep", "k"), ("authorization", "Bearer oauth")]));
        assert_eq!(merge_headers(&[]), Vec::new());
        // Within one layer the later entry wins too.
        assert_eq!(merge_headers(&[&pairs(&[("a", "1"), ("A", "2")])]), pairs(&[("A", "2")]));
    }

    #[test]
    fn forwarding_headers() {
        let incoming = |name: &str| match name.to_ascii_lowercase().as_str() {
            "x-user-token" => Some("tok-123".to_string()),
            "x-empty" => Some(String::new()),
            "x-evil" => Some("secret\r\nX-Injected: 1".to_string()),
            _ => None,
        };
        let cfg = json!({"forward_headers": {"Authorization": "X-User-Token"}});
        assert_eq!(forwarded_headers(&cfg, &incoming), Ok(pairs(&[("Authorization", "tok-123")])));
        assert_eq!(forwarded_headers(&json!({}), &incoming), Ok(Vec::new()));

        // deny (the default): a missing or empty header stops the call, named.
        for from in ["X-Missing", "X-Empty"] {
            let cfg = json!({"forward_headers": {"X-Up": from}});
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains(from) && err.contains("X-Up"), "{err}");
        }
        // passthrough: the call goes on without it.
        let cfg =
            json!({"forward_headers": {"X-Up": "X-Missing", "X-Tok": "x-user-token"}, "on_missing": "passthrough"});
        assert_eq!(forwarded_headers(&cfg, &incoming), Ok(pairs(&[("X-Tok", "tok-123")])));

        // Unsafe values are refused whatever on_missing says, and never echoed.
        for on_missing in ["deny", "passthrough"] {
            let cfg = json!({"forward_headers": {"X-Up": "X-Evil"}, "on_missing": on_missing});
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains("X-Evil") && err.contains("line break"), "{err}");
            assert!(!err.contains("secret") && !err.contains("Injected"), "{err}");
        }

        for (cfg, needle) in [
            (json!({"forward_headers": ["x"]}), "must be an object"),
            (json!({"forward_headers": {"X-Up": "X-User-Token"}, "on_missing": "ignore"}), "on_missing"),
            (json!({"forward_headers": {"Bad Name": "X-User-Token"}}), "not a valid header name"),
            (json!({"forward_headers": {"X-Up": 3}}), "must name an incoming header"),
            (json!({"forward_headers": {"mcp-session-id": "X-User-Token"}}), "sets this header itself"),
        ] {
            let err = forwarded_headers(&cfg, &incoming).unwrap_err();
            assert!(err.contains(needle), "{cfg}: {err}");
        }
    }
}
