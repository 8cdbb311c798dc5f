//! The headers sent to an upstream MCP server besides the protocol's own: which names and values
//! may be sent at all, static and forwarded headers (`backend.headers`, `backend.forward_headers`),
//! and their order of precedence.

use crate::pure::http_field::is_header_name;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

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

/// What a call does when a header it forwards is missing from the client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMissing {
    /// Refuse the call, naming the header.
    #[default]
    Deny,
    /// Call without it.
    Passthrough,
}

impl crate::pure::named::Named for OnMissing {
    const ALL: &'static [Self] = &[OnMissing::Deny, OnMissing::Passthrough];

    fn name(self) -> &'static str {
        match self {
            OnMissing::Deny => "deny",
            OnMissing::Passthrough => "passthrough",
        }
    }
}

/// Checks `backend.forward_headers: {"<upstream header>": "<incoming header>"}` and
/// `backend.on_missing: deny|passthrough` as stored: names valid, none Flowgate sets itself.
pub fn check_forward_headers(config: &Map<String, Value>) -> Result<(), String> {
    let map = match config.get("forward_headers") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(
                "backend.forward_headers must be an object {\"<upstream header>\": \"<incoming header>\"}".into()
            )
        }
    };
    match config.get("on_missing") {
        None | Some(Value::Null) => {}
        Some(v) if v == "deny" || v == "passthrough" => {}
        Some(_) => return Err("backend.on_missing must be \"deny\" or \"passthrough\"".into()),
    }
    for (upstream, from) in map {
        if !is_header_name(upstream) {
            return Err(format!("backend.forward_headers: {upstream:?} is not a valid header name"));
        }
        let lower = upstream.to_ascii_lowercase();
        // `Mcp-Param-*` too: Flowgate sends them from the call's arguments (SEP-2243).
        if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("mcp-param-") {
            return Err(format!("backend.forward_headers.{upstream}: Flowgate sets this header itself"));
        }
        if !from.as_str().is_some_and(is_header_name) {
            return Err(format!("backend.forward_headers.{upstream} must name an incoming header"));
        }
    }
    Ok(())
}

/// The headers to forward from the incoming request (`forward`: upstream name → incoming name,
/// checked when stored). Errors name the missing incoming header or the unsafe header, by name
/// only; an unsafe value is refused whatever `on_missing` says.
pub fn forwarded_headers(
    forward: &BTreeMap<String, String>,
    on_missing: OnMissing,
    incoming: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::with_capacity(forward.len());
    for (upstream, from) in forward {
        match incoming(from) {
            Some(v) if !v.is_empty() => {
                if let Some(why) = header_value_problem(&v) {
                    return Err(format!(
                        "the request's {from} header (forwarded as {upstream}) {why}, so it was not sent"
                    ));
                }
                out.push((upstream.clone(), v));
            }
            _ if on_missing == OnMissing::Deny => {
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
        let fwd =
            |p: &[(&str, &str)]| p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeMap<_, _>>();
        let deny = OnMissing::Deny;
        let got = forwarded_headers(&fwd(&[("Authorization", "X-User-Token")]), deny, &incoming);
        assert_eq!(got, Ok(pairs(&[("Authorization", "tok-123")])));
        assert_eq!(forwarded_headers(&BTreeMap::new(), deny, &incoming), Ok(Vec::new()));

        // deny (the default): a missing or empty header stops the call, named.
        for from in ["X-Missing", "X-Empty"] {
            let err = forwarded_headers(&fwd(&[("X-Up", from)]), deny, &incoming).unwrap_err();
            assert!(err.contains(from) && err.contains("X-Up"), "{err}");
        }
        // passthrough: the call goes on without it.
        let got = forwarded_headers(
            &fwd(&[("X-Up", "X-Missing"), ("X-Tok", "x-user-token")]),
            OnMissing::Passthrough,
            &incoming,
        );
        assert_eq!(got, Ok(pairs(&[("X-Tok", "tok-123")])));

        // Unsafe values are refused whatever on_missing says, and never echoed.
        for on_missing in [OnMissing::Deny, OnMissing::Passthrough] {
            let err = forwarded_headers(&fwd(&[("X-Up", "X-Evil")]), on_missing, &incoming).unwrap_err();
            assert!(err.contains("X-Evil") && err.contains("line break"), "{err}");
            assert!(!err.contains("secret") && !err.contains("Injected"), "{err}");
        }
    }

    #[test]
    fn checking_stored_forward_headers() {
        let ok = json!({"forward_headers": {"Authorization": "X-User-Token"}, "on_missing": "passthrough"});
        assert_eq!(check_forward_headers(ok.as_object().unwrap()), Ok(()));
        for (cfg, needle) in [
            (json!({"forward_headers": ["x"]}), "must be an object"),
            (json!({"forward_headers": {"X-Up": "X-User-Token"}, "on_missing": "ignore"}), "on_missing"),
            (json!({"forward_headers": {"Bad Name": "X-User-Token"}}), "not a valid header name"),
            (json!({"forward_headers": {"X-Up": 3}}), "must name an incoming header"),
            (json!({"forward_headers": {"X-Up": "Bad Name"}}), "must name an incoming header"),
            (json!({"forward_headers": {"mcp-session-id": "X-User-Token"}}), "sets this header itself"),
            (json!({"forward_headers": {"Mcp-Param-Region": "X-Region"}}), "sets this header itself"),
        ] {
            let err = check_forward_headers(cfg.as_object().unwrap()).unwrap_err();
            assert!(err.contains(needle), "{cfg}: {err}");
        }
    }
}
