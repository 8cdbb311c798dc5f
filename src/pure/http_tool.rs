//! Custom HTTP tools (seed 003): the manifest, the request body, and reading the answer, in one
//! piece or as an SSE stream of `thought` / `progress` / `result` events.

use serde_json::{json, Map, Value};

use crate::pure::error::Errors;
use crate::pure::form;
use crate::pure::outcome::{http_failure, truncate, Outcome, Signal};
use crate::pure::quote::quote_input;

const PARAM_TYPES: [&str; 5] = ["string", "number", "integer", "boolean", "object"];
const MAX_LOG_TEXT: usize = 2000;

/// Checks `backend.manifest` and derives the app's inputs from it: `form: llm` parameters (the
/// default) become the Dify-shaped `user_input_form` the tool schema is built from, and the
/// manifest's outputs become the app's `outputs`. `form: form` parameters are not shown to the
/// client; they take `backend.form_values[name]`, else their `default`.
pub fn derive_from_manifest(backend: &Map<String, Value>, errs: &mut Errors) -> (Value, Value) {
    let Some(manifest) = backend.get("manifest") else {
        return (json!([]), json!([]));
    };
    let Some(manifest) = manifest.as_object() else {
        errs.add("backend.manifest", "must be an object {name, description, parameters, outputs}");
        return (json!([]), json!([]));
    };
    let form_values = backend.get("form_values").and_then(Value::as_object);
    if backend.get("form_values").is_some_and(|v| !v.is_object()) {
        errs.add("backend.form_values", "must be an object mapping form parameters to values");
    }
    let mut items = Vec::new();
    for (i, p) in manifest.get("parameters").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("backend.manifest.parameters[{i}]");
        let name = match p.get("name").and_then(Value::as_str) {
            Some(n) if form::is_variable_name(n) => n,
            _ => {
                errs.add(format!("{at}.name"), "must be a valid parameter name (letters, digits, _)");
                continue;
            }
        };
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("string");
        let Some(kind) = (match ty {
            "string" => Some("text-input"),
            "number" | "integer" => Some("number"),
            "boolean" => Some("checkbox"),
            "object" => Some("json_object"),
            _ => None,
        }) else {
            errs.add(
                format!("{at}.type"),
                format!("{} is not supported; use one of {}", quote_input(ty), PARAM_TYPES.join(", ")),
            );
            continue;
        };
        let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
        match p.get("form").and_then(Value::as_str).unwrap_or("llm") {
            "llm" => {
                let mut body = json!({"variable": name, "label": p.get("description").and_then(Value::as_str).unwrap_or(name), "required": required});
                if let Some(d) = p.get("default").filter(|d| !d.is_null()) {
                    body["default"] = d.clone();
                }
                items.push(json!({ kind: body }));
            }
            "form" => {
                let has_value =
                    form_values.is_some_and(|f| f.contains_key(name)) || p.get("default").is_some_and(|d| !d.is_null());
                if required && !has_value {
                    errs.add(
                        at.clone(),
                        format!(
                            "{} is a required form parameter: give it a value in backend.form_values or a default",
                            quote_input(name)
                        ),
                    );
                }
            }
            other => errs.add(format!("{at}.form"), format!("{} is not llm or form", quote_input(other))),
        }
    }
    if manifest.get("parameters").is_some_and(|p| !p.is_array()) {
        errs.add("backend.manifest.parameters", "must be an array");
    }
    let outputs: Vec<Value> = manifest
        .get("outputs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let name = o.get("name").and_then(Value::as_str)?;
            let mut out = json!({"variable": name, "type": o.get("type").and_then(Value::as_str).unwrap_or("string")});
            if let Some(d) = o.get("description") {
                out["description"] = d.clone();
            }
            Some(out)
        })
        .collect();
    (Value::Array(items), Value::Array(outputs))
}

/// The JSON body of a call: the client's arguments, the configured `form` parameters, and
/// `"stream": true` when the app streams.
pub fn request_body(backend: &Value, inputs: Map<String, Value>) -> Value {
    let mut body = inputs;
    let form_values = backend.get("form_values").and_then(Value::as_object);
    for p in backend["manifest"]["parameters"].as_array().into_iter().flatten() {
        if p.get("form").and_then(Value::as_str) != Some("form") {
            continue;
        }
        let Some(name) = p.get("name").and_then(Value::as_str) else { continue };
        if let Some(v) = form_values.and_then(|f| f.get(name)).or_else(|| p.get("default").filter(|d| !d.is_null())) {
            body.insert(name.to_string(), v.clone());
        }
    }
    if streams(backend) {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

pub fn streams(backend: &Value) -> bool {
    backend.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

/// Reads a one-piece answer. Seed 003's anti-patterns each get a message that names them.
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

fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            o.get("message").and_then(Value::as_str).map(str::to_string).or_else(|| Some(v.to_string()))
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Follows a streamed answer: `{"type":"thought","message"}`, `{"type":"progress","percent",
/// "message"?}`, and the final `{"type":"result","result":{...}}` (the output may also sit
/// beside `type`, as seed 003's example has it). `{"type":"error","error"}` ends the call.
#[derive(Debug)]
pub struct HttpToolStream {
    tool: String,
    done: Option<Outcome>,
    malformed: u32,
}

impl HttpToolStream {
    pub fn new(tool: &str) -> Self {
        HttpToolStream { tool: tool.to_string(), done: None, malformed: 0 }
    }

    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    pub fn on_event(&mut self, data: &str, out: &mut Vec<Signal>) {
        if self.done.is_some() || data.trim().is_empty() {
            return;
        }
        let Ok(Value::Object(mut v)) = serde_json::from_str::<Value>(data) else {
            self.malformed += 1;
            out.push(Signal::Log {
                level: "warning",
                data: json!({"event": "malformed", "message": "the tool sent an event that is not a JSON object; it was skipped"}),
            });
            return;
        };
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "thought" => {
                let m = v.get("message").or_else(|| v.get("thought")).and_then(Value::as_str).unwrap_or("");
                out.push(Signal::Log {
                    level: "info",
                    data: json!({"event": "thought", "thought": truncate(m, MAX_LOG_TEXT)}),
                });
            }
            "progress" => {
                let percent =
                    v.get("percent").and_then(Value::as_f64).filter(|p| p.is_finite()).map(|p| p.clamp(0.0, 100.0));
                let message = v.get("message").and_then(Value::as_str).unwrap_or("").to_string();
                out.push(match percent {
                    Some(percent) => Signal::Percent { percent, message },
                    None => Signal::Progress { message },
                });
            }
            "result" => {
                let result = match v.remove("result") {
                    Some(r @ Value::Object(_)) => r,
                    Some(other) => json!({"result": other}),
                    None => {
                        v.remove("type");
                        Value::Object(v)
                    }
                };
                self.done = Some(Outcome::Ok { text: result.to_string(), structured: Some(result) });
            }
            "error" => {
                let msg = v
                    .get("error")
                    .or_else(|| v.get("message"))
                    .and_then(error_text)
                    .unwrap_or_else(|| "no message".into());
                self.done = Some(Outcome::Failed(format!("the tool '{}' reported an error: {msg}", self.tool)));
            }
            _ => {}
        }
    }

    pub fn finish(self) -> Outcome {
        self.done.unwrap_or_else(|| Outcome::Failed("the backend stream ended before a result".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Value {
        json!({
            "api_endpoint": "https://tools.example.com/weather",
            "form_values": {"unit": "fahrenheit"},
            "manifest": {
                "name": "get_weather",
                "parameters": [
                    {"name": "location", "type": "string", "required": true, "description": "City and state", "form": "llm"},
                    {"name": "days", "type": "integer", "required": false, "default": 1},
                    {"name": "unit", "type": "string", "form": "form", "default": "celsius"},
                    {"name": "verbose", "type": "boolean", "form": "form", "default": false}
                ],
                "outputs": [{"name": "temperature", "type": "number", "description": "Now"}, {"name": "condition", "type": "string"}]
            }
        })
    }

    #[test]
    fn manifest_becomes_form_and_outputs() {
        let mut errs = Errors::default();
        let (form, outputs) = derive_from_manifest(manifest().as_object().unwrap(), &mut errs);
        assert!(errs.is_empty(), "{:?}", errs.0);
        assert_eq!(
            form,
            json!([
                {"text-input": {"variable": "location", "label": "City and state", "required": true}},
                {"number": {"variable": "days", "label": "days", "required": false, "default": 1}}
            ])
        );
        assert_eq!(outputs[0], json!({"variable": "temperature", "type": "number", "description": "Now"}));
    }

    #[test]
    fn bad_manifests_name_the_field() {
        let mut errs = Errors::default();
        let b = json!({"manifest": {"parameters": [
            {"name": "x y"}, {"name": "a", "type": "array"}, {"name": "b", "form": "ui"}, {"name": "c", "form": "form", "required": true}
        ]}, "form_values": 3});
        derive_from_manifest(b.as_object().unwrap(), &mut errs);
        let fields: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "backend.form_values",
                "backend.manifest.parameters[0].name",
                "backend.manifest.parameters[1].type",
                "backend.manifest.parameters[2].form",
                "backend.manifest.parameters[3]"
            ]
        );
    }

    #[test]
    fn body_has_form_values_defaults_and_stream() {
        let inputs = json!({"location": "Paris"}).as_object().unwrap().clone();
        let body = request_body(&manifest(), inputs.clone());
        assert_eq!(body, json!({"location": "Paris", "unit": "fahrenheit", "verbose": false}));
        let mut streaming = manifest();
        streaming["stream"] = json!(true);
        assert_eq!(request_body(&streaming, inputs)["stream"], true);
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

    #[test]
    fn streamed_answers() {
        let run = |events: &[&str]| {
            let mut s = HttpToolStream::new("w");
            let mut out = Vec::new();
            for e in events {
                s.on_event(e, &mut out);
            }
            (s.finish(), out)
        };
        let (outcome, signals) = run(&[
            r#"{"type":"thought","message":"Looking"}"#,
            r#"{"type":"progress","percent":50,"message":"half"}"#,
            r#"{"type":"result","result":{"temperature":72}}"#,
        ]);
        assert_eq!(
            outcome,
            Outcome::Ok { text: r#"{"temperature":72}"#.into(), structured: Some(json!({"temperature": 72})) }
        );
        assert_eq!(signals[1], Signal::Percent { percent: 50.0, message: "half".into() });
        let (flat, _) = run(&[r#"{"type":"result","temperature":70}"#]);
        assert!(matches!(flat, Outcome::Ok { structured: Some(s), .. } if s == json!({"temperature": 70})));
        let (early, _) = run(&[r#"{"type":"thought","message":"x"}"#]);
        assert_eq!(early, Outcome::Failed("the backend stream ended before a result".into()));
        let (err, _) = run(&[r#"{"type":"error","error":"no such city"}"#]);
        assert_eq!(err, Outcome::Failed("the tool 'w' reported an error: no such city".into()));
        let (_, warn) = run(&["not json", r#"{"type":"result","result":{}}"#]);
        assert!(matches!(&warn[0], Signal::Log { level: "warning", .. }));
    }
}
