//! Following a streamed HTTP tool answer (docs/http-tool-protocol.md), event by event: `thought` and `progress`
//! events become notifications, `result` or `error` ends the call.

use crate::json;
use serde_json::Value;

use crate::pure::outcome::{truncate, Outcome, Signal};
use crate::pure::sse::read_json;

use super::call::error_text;

const MAX_LOG_TEXT: usize = 2000;

/// Follows a streamed answer: `{"type":"thought","message"}`, `{"type":"progress","percent",
/// "message"?}`, and the final `{"type":"result","result":{...}}` (the output may also sit
/// beside `type`, as the HTTP tool protocol's example has it). `{"type":"error","error"}` ends the call.
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

    pub fn on_event(&mut self, data: &[u8], out: &mut Vec<Signal>) {
        if self.done.is_some() || data.trim_ascii().is_empty() {
            return;
        }
        let Ok(Value::Object(mut v)) = read_json::<Value>(data) else {
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

    #[test]
    fn streamed_answers() {
        let run = |events: &[&str]| {
            let mut s = HttpToolStream::new("w");
            let mut out = Vec::new();
            for e in events {
                s.on_event(e.as_bytes(), &mut out);
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
