//! Calling a Dify app through its Service API (blocking mode): the request per mode, and the
//! reading of the answer into a tool outcome.

use serde_json::{json, Map, Value};

use crate::pure::app::Mode;

/// What a tool call produced: text for every client, structured output for newer ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok {
        text: String,
        structured: Option<Value>,
    },
    /// A backend failure, said in words a person can act on.
    Failed(String),
}

impl Outcome {
    /// Applies an app's `max_result_bytes` to a finished result, on every path (one piece or
    /// streamed, any backend kind). A longer text is cut on a character boundary with a note;
    /// chat-style structured output (`{answer}`) follows the cut text. Other structured output
    /// cannot be cut without breaking its schema, so a result whose structured part is over the
    /// cap fails with a message saying how to fix it.
    pub fn capped(self, app: &str, max: usize) -> Outcome {
        let Outcome::Ok { mut text, structured } = self else { return self };
        let structured_len = structured.as_ref().map_or(0, |s| json_len(s));
        let is_answer = structured.as_ref().is_some_and(|s| {
            s.as_object().is_some_and(|o| o.len() == 1 && o.get("answer").is_some_and(Value::is_string))
        });
        if structured_len > max && !is_answer {
            return Outcome::Failed(format!(
                "the result of app '{app}' is larger than its max_result_bytes ({max} bytes); raise max_result_bytes \
                 or make the result smaller"
            ));
        }
        if text.len() <= max {
            return Outcome::Ok { text, structured };
        }
        let cut = crate::pure::dify_stream::truncate(&text, max).len();
        text.truncate(cut);
        text.push_str(&format!(
            "\n\n[truncated: the answer was longer than {max} bytes, the limit set by the app's max_result_bytes]"
        ));
        let structured = match structured {
            Some(_) if is_answer => Some(json!({"answer": text})),
            other => other,
        };
        Outcome::Ok { text, structured }
    }
}

/// The length of a value as JSON, without building the text.
fn json_len(v: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// The Service API path and JSON body for one blocking call.
pub fn request(mode: Mode, inputs: Map<String, Value>, query: String, user: &str) -> (&'static str, Value) {
    match mode {
        Mode::Workflow => ("/workflows/run", json!({"inputs": inputs, "response_mode": "blocking", "user": user})),
        Mode::Completion => {
            ("/completion-messages", json!({"inputs": inputs, "query": "", "response_mode": "blocking", "user": user}))
        }
        // Chat modes; agent-chat is served streaming by Dify (see `needs_streaming`).
        _ => ("/chat-messages", json!({"query": query, "inputs": inputs, "response_mode": "blocking", "user": user})),
    }
}

/// The endpoint that stops a running task of `mode` (streaming runs only, as in Dify).
pub fn stop_path(mode: Mode, task_id: &str) -> String {
    match mode {
        Mode::Workflow => format!("/workflows/tasks/{task_id}/stop"),
        Mode::Completion => format!("/completion-messages/{task_id}/stop"),
        _ => format!("/chat-messages/{task_id}/stop"),
    }
}

/// Dify serves agent-chat apps only in streaming mode.
pub fn needs_streaming(mode: Mode) -> bool {
    mode == Mode::AgentChat
}

/// Reads a Dify answer (`status`, `Retry-After` and body text) into an outcome.
pub fn read_blocking(mode: Mode, status: u16, retry_after: Option<&str>, body: &str) -> Outcome {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if !(200..300).contains(&status) {
        return Outcome::Failed(http_failure("the Dify app", status, retry_after, parsed.as_ref(), body));
    }
    let Some(v) = parsed.filter(Value::is_object) else {
        return Outcome::Failed(format!("the Dify app answered HTTP {status} with a body that is not a JSON object"));
    };
    if mode == Mode::Workflow {
        let data = &v["data"];
        match data["status"].as_str() {
            Some("succeeded") | None => {}
            Some(other) => {
                let err = data["error"].as_str().filter(|e| !e.is_empty()).unwrap_or("no error message");
                return Outcome::Failed(format!("the workflow ended {other}: {err}"));
            }
        }
        let outputs = data.get("outputs").cloned().unwrap_or(Value::Null);
        let text = if outputs.is_null() { "{}".to_string() } else { outputs.to_string() };
        let structured = match outputs {
            Value::Object(_) => Some(outputs),
            Value::Null => Some(json!({})),
            _ => None,
        };
        return Outcome::Ok { text, structured };
    }
    match v.get("answer") {
        Some(Value::String(answer)) => {
            Outcome::Ok { text: answer.clone(), structured: Some(json!({"answer": answer})) }
        }
        _ => Outcome::Failed("the Dify app's answer has no `answer` text".into()),
    }
}

/// A non-2xx answer of `who` in words; a 429 says when to retry.
pub fn http_failure(who: &str, status: u16, retry_after: Option<&str>, parsed: Option<&Value>, body: &str) -> String {
    let message = http_failure_text(who, status, parsed, body);
    match (status, retry_after.map(str::trim).filter(|r| !r.is_empty())) {
        (429, Some(r)) if r.bytes().all(|b| b.is_ascii_digit()) => format!("{message}; retry after {r} s"),
        (429, Some(r)) => format!("{message}; retry after {}", r.chars().take(64).collect::<String>()),
        (429, None) => format!("{message}; retry later"),
        _ => message,
    }
}

fn http_failure_text(who: &str, status: u16, parsed: Option<&Value>, body: &str) -> String {
    if let Some(message) = parsed.and_then(|v| v.get("message")).and_then(Value::as_str) {
        let code = parsed.and_then(|v| v.get("code")).and_then(Value::as_str).unwrap_or("error");
        return format!("{who} refused the call (HTTP {status}, {code}): {message}");
    }
    let snippet: String = body.trim().chars().take(200).collect();
    if snippet.is_empty() {
        format!("{who} answered HTTP {status} with an empty body")
    } else {
        format!("{who} answered HTTP {status}: {snippet}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_are_capped_on_every_path() {
        let ok = |text: &str, structured: Option<Value>| Outcome::Ok { text: text.into(), structured };
        // Within the cap: unchanged.
        assert_eq!(ok("short", None).capped("A", 10), ok("short", None));
        // A longer text is cut on a character boundary, with the note.
        let Outcome::Ok { text, structured } = ok("héllo wörld", None).capped("A", 2) else { panic!() };
        assert!(text.starts_with("h\n\n[truncated: the answer was longer than 2 bytes"), "{text}");
        assert_eq!(structured, None);
        // A chat answer's structured output follows the cut text.
        let Outcome::Ok { text, structured } = ok("abcdef", Some(json!({"answer": "abcdef"}))).capped("A", 3) else {
            panic!()
        };
        assert!(text.starts_with("abc\n\n[truncated"));
        assert_eq!(structured, Some(json!({"answer": text})));
        // Other structured output over the cap fails, naming the app and the setting.
        let big = json!({"report": "x".repeat(100)});
        match ok(&big.to_string(), Some(big)).capped("Reports", 50) {
            Outcome::Failed(m) => {
                assert!(m.contains("app 'Reports'") && m.contains("max_result_bytes (50 bytes)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // Failures pass through.
        assert_eq!(Outcome::Failed("x".into()).capped("A", 0), Outcome::Failed("x".into()));
        assert_eq!(json_len(&json!({"a": [1, "é"]})), json!({"a": [1, "é"]}).to_string().len());
    }

    use super::*;

    #[test]
    fn request_per_mode() {
        let inputs = json!({"a": 1}).as_object().unwrap().clone();
        let (p, b) = request(Mode::Workflow, inputs.clone(), String::new(), "u1");
        assert_eq!(p, "/workflows/run");
        assert_eq!(b, json!({"inputs": {"a": 1}, "response_mode": "blocking", "user": "u1"}));
        let (p, b) = request(Mode::Completion, inputs.clone(), "ignored".into(), "u1");
        assert_eq!(p, "/completion-messages");
        assert_eq!(b["query"], "");
        let (p, b) = request(Mode::AdvancedChat, inputs, "hello".into(), "u1");
        assert_eq!(p, "/chat-messages");
        assert_eq!(b["query"], "hello");
        assert!(needs_streaming(Mode::AgentChat) && !needs_streaming(Mode::Chat));
    }

    #[test]
    fn reads_answers() {
        let wf = r#"{"workflow_run_id":"r","task_id":"t","data":{"status":"succeeded","outputs":{"summary":"s"}}}"#;
        assert_eq!(
            read_blocking(Mode::Workflow, 200, None, wf),
            Outcome::Ok { text: r#"{"summary":"s"}"#.into(), structured: Some(json!({"summary": "s"})) }
        );
        let chat = r#"{"event":"message","answer":"Paris"}"#;
        assert_eq!(
            read_blocking(Mode::Chat, 200, None, chat),
            Outcome::Ok { text: "Paris".into(), structured: Some(json!({"answer": "Paris"})) }
        );
    }

    #[test]
    fn failures_carry_the_backend_message() {
        let failed = r#"{"data":{"status":"failed","error":"Node LLM failed: model timeout","outputs":{}}}"#;
        assert_eq!(
            read_blocking(Mode::Workflow, 200, None, failed),
            Outcome::Failed("the workflow ended failed: Node LLM failed: model timeout".into())
        );
        let quota = r#"{"code":"provider_quota_exceeded","message":"Your quota ... exhausted.","status":400}"#;
        assert_eq!(
            read_blocking(Mode::Chat, 400, None, quota),
            Outcome::Failed(
                "the Dify app refused the call (HTTP 400, provider_quota_exceeded): Your quota ... exhausted.".into()
            )
        );
        assert_eq!(
            read_blocking(Mode::Chat, 500, None, "Internal Server Error"),
            Outcome::Failed("the Dify app answered HTTP 500: Internal Server Error".into())
        );
        assert_eq!(
            read_blocking(Mode::Chat, 502, None, ""),
            Outcome::Failed("the Dify app answered HTTP 502 with an empty body".into())
        );
        assert!(
            matches!(read_blocking(Mode::Chat, 200, None, "<html>"), Outcome::Failed(m) if m.contains("not a JSON object"))
        );
        assert!(matches!(read_blocking(Mode::Chat, 200, None, "{}"), Outcome::Failed(m) if m.contains("no `answer`")));
        let limited = r#"{"code":"too_many_requests","message":"Too many requests","status":429}"#;
        assert_eq!(
            read_blocking(Mode::Chat, 429, Some("7"), limited),
            Outcome::Failed(
                "the Dify app refused the call (HTTP 429, too_many_requests): Too many requests; retry after 7 s"
                    .into()
            )
        );
        assert!(matches!(read_blocking(Mode::Chat, 429, None, ""), Outcome::Failed(m) if m.ends_with("retry later")));
        assert_eq!(stop_path(Mode::Workflow, "t1"), "/workflows/tasks/t1/stop");
        assert_eq!(stop_path(Mode::AgentChat, "t1"), "/chat-messages/t1/stop");
        assert_eq!(stop_path(Mode::Completion, "t1"), "/completion-messages/t1/stop");
    }
}
