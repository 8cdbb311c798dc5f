//! Upstream text in Flowgate's own error messages: quoted on one bounded line, and an upstream's
//! JSON-RPC error put in words with the app it came from.

use serde_json::Value;

/// Upstream text quoted in an error (a body, a message) is cut here so one answer cannot flood
/// the error a person or a model reads.
const MAX_QUOTED: usize = 500;

/// Upstream text made fit to quote in an error: one line, trimmed, bounded.
pub(super) fn quote(s: &str) -> String {
    let one_line: String = s.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match one_line.char_indices().nth(MAX_QUOTED) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// An upstream JSON-RPC error in words with context: "upstream <app> said: <message> (code
/// <n>)". Takes the error object or the whole response.
pub fn upstream_error_message(app: &str, error: &Value) -> String {
    let e = error.get("error").unwrap_or(error);
    let message = match e.get("message").and_then(Value::as_str).map(quote) {
        Some(m) if !m.is_empty() => m,
        _ => "(no message)".to_string(),
    };
    match e.get("code").and_then(Value::as_i64) {
        Some(code) => format!("upstream {app} said: {message} (code {code})"),
        None => format!("upstream {app} said: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn upstream_errors_in_words() {
        let e = json!({"code": -32602, "message": "Unknown tool: foo"});
        assert_eq!(upstream_error_message("github", &e), "upstream github said: Unknown tool: foo (code -32602)");
        let whole = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom\nstack"}});
        assert_eq!(upstream_error_message("gh", &whole), "upstream gh said: boom stack (code -32603)");
        assert_eq!(upstream_error_message("gh", &json!({"code": 5})), "upstream gh said: (no message) (code 5)");
        assert_eq!(upstream_error_message("gh", &json!({"message": "m"})), "upstream gh said: m");
        let long = upstream_error_message("gh", &json!({"code": 1, "message": "z".repeat(10_000)}));
        assert!(long.len() < 1000, "{}", long.len());
    }
}
