//! A Dify workflow run followed by a durable task: `GET /v1/workflows/run/{id}` read as the task
//! state machine's poll outcome (`pure::task`).

use crate::json;
use serde_json::Value;

use crate::pure::error::json_kind;
use crate::pure::task::{clip_chars, clip_error, PollOutcome, Report};

/// Maps Dify `GET /v1/workflows/run/{id}` JSON ({status: running|succeeded|failed|stopped|paused, outputs, error}) to an outcome: running/paused → Running, succeeded → Completed{result: outputs}, failed → Failed{error}, stopped → Cancelled; malformed → Permanent.
///
/// Dify's `partial-succeeded` (a run that finished with handled node errors) also counts as
/// Completed: it has outputs. Missing outputs read as `{}`, and outputs sent as a JSON string
/// (older Dify) are decoded.
pub fn parse_dify_run(v: &Value) -> PollOutcome {
    let Some(obj) = v.as_object() else {
        return PollOutcome::Permanent(format!("the Dify workflow run is {} instead of a JSON object", json_kind(v)));
    };
    let Some(status) = obj.get("status").and_then(Value::as_str) else {
        return PollOutcome::Permanent("the Dify workflow run has no status".into());
    };
    let report = match status {
        "running" | "paused" => Report::Running { poll_after_s: None },
        "succeeded" | "partial-succeeded" => {
            Report::Completed { result: dify_outputs(obj.get("outputs")), result_artifact: None }
        }
        "failed" => {
            let error = match obj.get("error") {
                Some(Value::String(e)) if !e.trim().is_empty() => clip_error(e),
                None | Some(Value::Null) | Some(Value::String(_)) => {
                    "the workflow run failed without an error message".into()
                }
                Some(other) => clip_error(&other.to_string()),
            };
            Report::Failed { error, error_code: None }
        }
        "stopped" => Report::Cancelled,
        other => {
            return PollOutcome::Permanent(format!(
                "the Dify workflow run has an unknown status {:?}",
                clip_chars(other, 64)
            ))
        }
    };
    PollOutcome::Report(report)
}

fn dify_outputs(outputs: Option<&Value>) -> Value {
    match outputs {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::String(s.clone()),
        },
        Some(v) => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::task::tests::{completed, permanent_message, running};

    #[test]
    fn dify_run_statuses() {
        let run = |v: Value| parse_dify_run(&v);
        assert_eq!(run(json!({"id": "w", "status": "running", "outputs": null})), running(None));
        assert_eq!(run(json!({"status": "paused"})), running(None));
        assert_eq!(run(json!({"status": "succeeded", "outputs": {"text": "hi"}})), completed(json!({"text": "hi"})));
        assert_eq!(run(json!({"status": "succeeded", "outputs": null})), completed(json!({})));
        assert_eq!(run(json!({"status": "succeeded"})), completed(json!({})));
        assert_eq!(run(json!({"status": "succeeded", "outputs": "{\"a\":1}"})), completed(json!({"a": 1})));
        assert_eq!(run(json!({"status": "succeeded", "outputs": "plain"})), completed(json!("plain")));
        assert_eq!(run(json!({"status": "partial-succeeded", "outputs": {"a": 1}})), completed(json!({"a": 1})));
        assert_eq!(
            run(json!({"status": "failed", "error": "node llm failed"})),
            PollOutcome::Report(Report::Failed { error: "node llm failed".into(), error_code: None })
        );
        match run(json!({"status": "failed", "error": null})) {
            PollOutcome::Report(Report::Failed { error, .. }) => assert!(error.contains("without an error")),
            other => panic!("{other:?}"),
        }
        match run(json!({"status": "failed", "error": "x".repeat(5000)})) {
            PollOutcome::Report(Report::Failed { error, .. }) => assert_eq!(error.len(), 4000),
            other => panic!("{other:?}"),
        }
        assert_eq!(run(json!({"status": "stopped"})), PollOutcome::Report(Report::Cancelled));
    }

    #[test]
    fn dify_run_malformed_is_permanent() {
        assert!(permanent_message(parse_dify_run(&json!("running"))).contains("JSON object"));
        assert!(permanent_message(parse_dify_run(&json!({"outputs": {}}))).contains("no status"));
        assert!(permanent_message(parse_dify_run(&json!({"status": 1}))).contains("no status"));
        assert!(
            permanent_message(parse_dify_run(&json!({"status": "exploded"}))).contains("unknown status \"exploded\"")
        );
        // Dify's own error body for an unknown run id.
        assert!(matches!(
            parse_dify_run(&json!({"code": "not_found", "message": "Workflow run not found", "status": 404})),
            PollOutcome::Permanent(_)
        ));
    }
}
