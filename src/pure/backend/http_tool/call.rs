//! Calling an HTTP tool (docs/http-tool-protocol.md): the request body, and reading an answer that comes in one
//! piece.

use serde_json::{Map, Value};

use super::config::HttpToolConfig;
use crate::pure::outcome::{http_failure, Outcome};

/// The JSON body of a call: the client's arguments, the configured `form` parameters, and
/// `"stream": true` when the app streams.
pub fn request_body(config: &HttpToolConfig, inputs: Map<String, Value>) -> Value {
    let mut body = inputs;
    let form_values = config.form_values.as_ref();
    let parameters = config.manifest.as_ref().and_then(|m| m.get("parameters")).and_then(Value::as_array);
    for p in parameters.into_iter().flatten() {
        if p.get("form").and_then(Value::as_str) != Some("form") {
            continue;
        }
        let Some(name) = p.get("name").and_then(Value::as_str) else { continue };
        if let Some(v) = form_values.and_then(|f| f.get(name)).or_else(|| p.get("default").filter(|d| !d.is_null())) {
            body.insert(name.to_string(), v.clone());
        }
    }
    if config.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

/// Reads a one-piece answer. The HTTP tool protocol's anti-patterns each get a message that names them.
pub fn read_response(tool: &str, status: u16, content_type: &str, retry_after: Option<&str>, body: &str) -> Outcome {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if !(200..300).contains(&status) {
        if let Some(msg) = parsed.as_ref().and_then(|v| v.get("error")).and_then(error_text) {
            let base = format!("the tool '{tool}' failed (HTTP {status}): {msg}");
            return Outcome::Failed(match (status, retry_after) {
                (429, Some(r)) => format!("{base}; retry after {} s", r.trim()),
                (429, None) => format!("{base}; retry later"),
                _ => base,
            });
        }
        return Outcome::Failed(http_failure(&format!("the tool '{tool}'"), status, retry_after, None, body));
    }
    if !content_type.to_ascii_lowercase().contains("application/json") {
        let shown = if content_type.is_empty() { "no Content-Type" } else { content_type };
        return Outcome::Failed(format!("the tool '{tool}' answered with {shown} instead of application/json"));
    }
    match parsed {
        Some(v @ Value::Object(_)) => Outcome::Ok { text: v.to_string(), structured: Some(v) },
        Some(_) => Outcome::Failed(format!("the tool '{tool}' answered JSON that is not an object")),
        None => Outcome::Failed(format!("the tool '{tool}' answered a body that is not valid JSON")),
    }
}

pub(super) fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            o.get("message").and_then(Value::as_str).map(str::to_string).or_else(|| Some(v.to_string()))
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::manifest;
    use super::*;

    #[test]
    fn body_has_form_values_defaults_and_stream() {
        let inputs = json!({"location": "Paris"}).as_object().unwrap().clone();
        let config = |v| crate::pure::fields::read::<HttpToolConfig>(v).unwrap();
        let body = request_body(&config(manifest()), inputs.clone());
        assert_eq!(body, json!({"location": "Paris", "unit": "fahrenheit", "verbose": false}));
        let mut streaming = manifest();
        streaming["stream"] = json!(true);
        assert_eq!(request_body(&config(streaming), inputs)["stream"], true);
    }

    #[test]
    fn one_piece_answers() {
        let ok = read_response("w", 200, "application/json; charset=utf-8", None, r#"{"temperature":72}"#);
        assert_eq!(
            ok,
            Outcome::Ok { text: r#"{"temperature":72}"#.into(), structured: Some(json!({"temperature": 72})) }
        );
        let cases = [
            (
                400,
                "application/json",
                None,
                r#"{"error":"Invalid location format."}"#,
                "the tool 'w' failed (HTTP 400): Invalid location format.",
            ),
            (
                429,
                "application/json",
                Some("7"),
                r#"{"error":"slow down"}"#,
                "the tool 'w' failed (HTTP 429): slow down; retry after 7 s",
            ),
            (500, "text/plain", None, "boom", "the tool 'w' answered HTTP 500: boom"),
            (200, "text/html", None, "<html>", "the tool 'w' answered with text/html instead of application/json"),
            (200, "application/json", None, "[1]", "the tool 'w' answered JSON that is not an object"),
            (200, "application/json", None, "{oops", "the tool 'w' answered a body that is not valid JSON"),
        ];
        for (status, ct, ra, body, want) in cases {
            assert_eq!(read_response("w", status, ct, ra, body), Outcome::Failed(want.into()), "{body}");
        }
    }
}
