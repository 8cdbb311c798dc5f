//! Calling a Dify app through its Service API (blocking mode): the request per mode, and the
//! reading of the answer into a tool outcome.

use crate::json;
use serde_json::{Map, Value};

use super::conversation;
use super::mode::DifyMode;
use crate::pure::outcome::{http_failure, Outcome};

/// The Service API path that runs an app of `mode`.
pub fn run_path(mode: DifyMode) -> &'static str {
    match mode {
        DifyMode::Workflow => "/workflows/run",
        DifyMode::Completion => "/completion-messages",
        // Chat modes; agent-chat is served streaming by Dify (see `needs_streaming`).
        DifyMode::Chat | DifyMode::AdvancedChat | DifyMode::AgentChat => "/chat-messages",
    }
}

/// The JSON body of one blocking call (sent to [`run_path`]).
pub fn request(mode: DifyMode, inputs: Map<String, Value>, query: String, user: &str) -> Value {
    match mode {
        DifyMode::Workflow => json!({"inputs": inputs, "response_mode": "blocking", "user": user}),
        DifyMode::Completion => json!({"inputs": inputs, "query": "", "response_mode": "blocking", "user": user}),
        DifyMode::Chat | DifyMode::AdvancedChat | DifyMode::AgentChat => {
            json!({"query": query, "inputs": inputs, "response_mode": "blocking", "user": user})
        }
    }
}

/// The endpoint that stops a running task of `mode` (streaming runs only, as in Dify).
pub fn stop_path(mode: DifyMode, task_id: &str) -> String {
    match mode {
        DifyMode::Workflow => format!("/workflows/tasks/{task_id}/stop"),
        _ => format!("{}/{task_id}/stop", run_path(mode)),
    }
}

/// Dify serves agent-chat apps only in streaming mode.
pub fn needs_streaming(mode: DifyMode) -> bool {
    mode == DifyMode::AgentChat
}

/// Reads a Dify answer (`status`, `Retry-After` and body text) into an outcome; `sent` is the
/// request body the answer is to (`Value::Null` when it is not at hand).
pub fn read_blocking(mode: DifyMode, status: u16, retry_after: Option<&str>, body: &str, sent: &Value) -> Outcome {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if !(200..300).contains(&status) {
        if let Some(refusal) = conversation::refused(sent, status) {
            return Outcome::Failed(refusal);
        }
        return Outcome::Failed(http_failure("the Dify app", status, retry_after, parsed.as_ref(), body));
    }
    let Some(v) = parsed.filter(Value::is_object) else {
        return Outcome::Failed(format!("the Dify app answered HTTP {status} with a body that is not a JSON object"));
    };
    if mode == DifyMode::Workflow {
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
            let mut structured = json!({"answer": answer});
            super::file_outputs::attach_message_files(&mut structured, &v);
            conversation::attach(Outcome::Ok { text: answer.clone(), structured: Some(structured) }, sent, &v)
        }
        _ => Outcome::Failed("the Dify app's answer has no `answer` text".into()),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn request_per_mode() {
        let inputs = json!({"a": 1}).as_object().unwrap().clone();
        let b = request(DifyMode::Workflow, inputs.clone(), String::new(), "u1");
        assert_eq!(run_path(DifyMode::Workflow), "/workflows/run");
        assert_eq!(b, json!({"inputs": {"a": 1}, "response_mode": "blocking", "user": "u1"}));
        let b = request(DifyMode::Completion, inputs.clone(), "ignored".into(), "u1");
        assert_eq!(run_path(DifyMode::Completion), "/completion-messages");
        assert_eq!(b["query"], "");
        let b = request(DifyMode::AdvancedChat, inputs, "hello".into(), "u1");
        assert_eq!(run_path(DifyMode::AdvancedChat), "/chat-messages");
        assert_eq!(b["query"], "hello");
        assert!(needs_streaming(DifyMode::AgentChat) && !needs_streaming(DifyMode::Chat));
    }

    #[test]
    fn reads_answers() {
        let wf = r#"{"workflow_run_id":"r","task_id":"t","data":{"status":"succeeded","outputs":{"summary":"s"}}}"#;
        assert_eq!(
            read_blocking(DifyMode::Workflow, 200, None, wf, &Value::Null),
            Outcome::Ok { text: r#"{"summary":"s"}"#.into(), structured: Some(json!({"summary": "s"})) }
        );
        let chat = r#"{"event":"message","answer":"Paris"}"#;
        assert_eq!(
            read_blocking(DifyMode::Chat, 200, None, chat, &Value::Null),
            Outcome::Ok { text: "Paris".into(), structured: Some(json!({"answer": "Paris"})) }
        );
    }

    #[test]
    fn a_chat_answers_files_come_along() {
        let chat = r#"{"event":"message","answer":"Done","message_files":[{"id":"f","type":"document","belongs_to":"assistant","url":"https://d.example/files/r.pdf"}]}"#;
        let Outcome::Ok { structured: Some(s), .. } = read_blocking(DifyMode::Chat, 200, None, chat, &Value::Null)
        else {
            panic!()
        };
        assert_eq!(s["files"][0]["url"], "https://d.example/files/r.pdf");
    }

    #[test]
    fn failures_carry_the_backend_message() {
        let failed = r#"{"data":{"status":"failed","error":"Node LLM failed: model timeout","outputs":{}}}"#;
        assert_eq!(
            read_blocking(DifyMode::Workflow, 200, None, failed, &Value::Null),
            Outcome::Failed("the workflow ended failed: Node LLM failed: model timeout".into())
        );
        let quota = r#"{"code":"provider_quota_exceeded","message":"Your quota ... exhausted.","status":400}"#;
        assert_eq!(
            read_blocking(DifyMode::Chat, 400, None, quota, &Value::Null),
            Outcome::Failed(
                "the Dify app refused the call (HTTP 400, provider_quota_exceeded): Your quota ... exhausted.".into()
            )
        );
        assert_eq!(
            read_blocking(DifyMode::Chat, 500, None, "Internal Server Error", &Value::Null),
            Outcome::Failed("the Dify app answered HTTP 500: Internal Server Error".into())
        );
        assert_eq!(
            read_blocking(DifyMode::Chat, 502, None, "", &Value::Null),
            Outcome::Failed("the Dify app answered HTTP 502 with an empty body".into())
        );
        assert!(
            matches!(read_blocking(DifyMode::Chat, 200, None, "<html>", &Value::Null), Outcome::Failed(m) if m.contains("not a JSON object"))
        );
        assert!(
            matches!(read_blocking(DifyMode::Chat, 200, None, "{}", &Value::Null), Outcome::Failed(m) if m.contains("no `answer`"))
        );
        let limited = r#"{"code":"too_many_requests","message":"Too many requests","status":429}"#;
        assert_eq!(
            read_blocking(DifyMode::Chat, 429, Some("7"), limited, &Value::Null),
            Outcome::Failed(
                "the Dify app refused the call (HTTP 429, too_many_requests): Too many requests; retry after 7 s"
                    .into()
            )
        );
        assert!(
            matches!(read_blocking(DifyMode::Chat, 429, None, "", &Value::Null), Outcome::Failed(m) if m.ends_with("retry later"))
        );
        assert_eq!(stop_path(DifyMode::Workflow, "t1"), "/workflows/tasks/t1/stop");
        assert_eq!(stop_path(DifyMode::AgentChat, "t1"), "/chat-messages/t1/stop");
        assert_eq!(stop_path(DifyMode::Completion, "t1"), "/completion-messages/t1/stop");
    }
}
