//! An async HTTP tool (the async tool protocol's submit/status/cancel endpoints, docs/async-tool-protocol.md) called without a task: the
//! call submits the work, then polls its status until it ends, and answers with its result.
//! What each status answer means for the call is decided here; the shell makes the calls.

use crate::json;

use crate::pure::outcome::{Outcome, Signal};
use crate::pure::task::{PollOutcome, Report, MIN_POLL_AFTER_S};

/// The interval when the app sets no `poll_interval_seconds`: shorter than a task's (5 s),
/// since a client is waiting on the open call.
pub const DEFAULT_INTERVAL_S: u64 = 2;

/// What the call does after one status answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Poll again after `wait_ms`; `signal` (progress) goes to the client if it asked for it.
    Poll { wait_ms: u64, signal: Option<Signal> },
    /// The call ends with this outcome.
    Done(Outcome),
}

/// The wait before the next status call: the backend's `poll_after_seconds` if usable, else the
/// interval; never under 1 s (a hint of 0.001 s must not become a loop of subrequests) and never
/// over the interval (a client is waiting; the app's timeout bounds the whole call anyway).
pub fn wait_ms(poll_after_s: Option<f64>, interval_s: u64) -> u64 {
    let interval = (interval_s as f64).max(MIN_POLL_AFTER_S);
    let s = poll_after_s.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(interval);
    (s.clamp(MIN_POLL_AFTER_S, interval) * 1000.0).ceil() as u64
}

/// Reads one status answer (already checked by `task::parse_async_status`): a final status ends
/// the call, a running one is polled again with a progress signal, and a transient error (the
/// status endpoint failing) is retried, its error reported as progress.
pub fn next(outcome: PollOutcome, app: &str, polls: u32, interval_s: u64) -> Next {
    let poll = |hint: Option<f64>, message: String| Next::Poll {
        wait_ms: wait_ms(hint, interval_s),
        signal: Some(Signal::Progress { message }),
    };
    match outcome {
        PollOutcome::Report(Report::Running { poll_after_s }) => {
            poll(poll_after_s, format!("the tool '{app}' is still working (status check {polls})"))
        }
        PollOutcome::Report(Report::InputRequired { poll_after_s, .. }) => {
            poll(poll_after_s, format!("the tool '{app}' is waiting for input (status check {polls})"))
        }
        PollOutcome::Report(Report::Completed { result, .. }) => Next::Done(Outcome::Ok {
            text: result.to_string(),
            structured: Some(if result.is_object() { result } else { json!({"result": result}) }),
        }),
        PollOutcome::Report(Report::Failed { error, .. }) => Next::Done(Outcome::Failed(error)),
        PollOutcome::Report(Report::Cancelled) => {
            Next::Done(Outcome::Failed(format!("the tool '{app}' cancelled the run before it finished")))
        }
        PollOutcome::Transient(e) => {
            poll(None, format!("checking the status of the tool '{app}' failed (status check {polls}): {e}"))
        }
        PollOutcome::Permanent(e) => Next::Done(Outcome::Failed(format!("the tool '{app}': {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::task::parse_async_status;
    use serde_json::Value;

    #[test]
    fn waits_follow_the_hint_within_one_second_and_the_interval() {
        assert_eq!(wait_ms(None, 2), 2000);
        assert_eq!(wait_ms(Some(1.5), 2), 1500);
        assert_eq!(wait_ms(Some(0.001), 2), 1000, "a tiny hint is not a busy loop");
        assert_eq!(wait_ms(Some(600.0), 2), 2000, "a long hint does not stall a waiting client");
        assert_eq!(wait_ms(Some(f64::NAN), 5), 5000);
        assert_eq!(wait_ms(None, 0), 1000);
    }

    #[test]
    fn status_answers_end_the_call_or_poll_again() {
        let read = |v: Value| next(parse_async_status(&v, "r-1"), "Geo", 3, 2);
        assert_eq!(
            read(json!({"task_id": "r-1", "status": "running", "poll_after_seconds": 1})),
            Next::Poll {
                wait_ms: 1000,
                signal: Some(Signal::Progress { message: "the tool 'Geo' is still working (status check 3)".into() })
            }
        );
        assert_eq!(
            read(json!({"task_id": "r-1", "status": "completed", "result": {"t": 21}})),
            Next::Done(Outcome::Ok { text: "{\"t\":21}".into(), structured: Some(json!({"t": 21})) })
        );
        assert_eq!(
            read(json!({"task_id": "r-1", "status": "completed", "result": 7})),
            Next::Done(Outcome::Ok { text: "7".into(), structured: Some(json!({"result": 7})) })
        );
        assert_eq!(
            read(json!({"task_id": "r-1", "status": "failed", "error": "no such city"})),
            Next::Done(Outcome::Failed("no such city".into()))
        );
        assert!(
            matches!(read(json!({"task_id": "r-1", "status": "cancelled"})), Next::Done(Outcome::Failed(m)) if m.contains("cancelled"))
        );
        assert!(
            matches!(read(json!({"task_id": "r-9", "status": "running"})), Next::Done(Outcome::Failed(m)) if m.contains("protocol violation"))
        );
        assert!(matches!(
            read(json!({"task_id": "r-1", "status": "input_required", "input_required": {}})),
            Next::Poll { wait_ms: 2000, .. }
        ));
        assert!(matches!(
            next(PollOutcome::Transient("HTTP 503".into()), "Geo", 1, 2),
            Next::Poll { wait_ms: 2000, signal: Some(Signal::Progress { message }) } if message.contains("HTTP 503")
        ));
    }
}
