//! One durable background task as a pure state machine.
//!
//! The shell keeps a `TaskState` per Durable Object, sets its alarm at `next_wake_ms`, performs
//! the call `due_action` names and feeds the answer back here. Everything that decides what
//! happens next (scheduling, backoff, limits, the protocol checks of an answer) lives in this
//! file so it can be tested without a clock or a network. The rules follow deer-flow's durable
//! MCP tasks (see the reference notes, section 1.2).

use std::fmt;

use crate::pure::error::json_kind;
use crate::pure::protocol::tasks::McpTaskStatus;
use serde::Serialize;
use serde_json::{Map, Value};

/// Persisted errors are bounded so one chatty backend cannot bloat task storage.
pub const MAX_ERROR_CHARS: usize = 4000;
/// `input_required` and `result_artifact` are small control payloads; anything larger is a
/// protocol violation rather than something to truncate into a different meaning.
pub const MAX_JSON_BYTES: usize = 65_536;
/// Remote task ids are stored and echoed back on every call; 255 matches deer-flow's schema.
pub const MAX_REMOTE_ID: usize = 255;
/// How long a task that ended at or after the end of its TTL is kept: long enough for a client
/// polling at the usual pace to read why it ended, and for a few tries (5, 10 and 20 s apart
/// with the default interval) to cancel its run at the backend. Bounded, so a backend that
/// never confirms the cancel cannot keep the task alive. `TASK_GRACE_SECONDS` overrides it
/// (tests set a few seconds, so they need not wait 30 s for a deletion).
pub const TTL_GRACE_MS: u64 = 30_000;
/// The longest grace `TASK_GRACE_SECONDS` may set: still bounded.
pub const MAX_GRACE_MS: u64 = 3_600_000;

/// The grace of the `TASK_GRACE_SECONDS` setting: whole seconds, at most [`MAX_GRACE_MS`];
/// [`TTL_GRACE_MS`] when it is unset or not a number.
pub fn grace_ms_setting(value: Option<&str>) -> u64 {
    value.and_then(|v| v.trim().parse::<u64>().ok()).map_or(TTL_GRACE_MS, |s| s.saturating_mul(1000).min(MAX_GRACE_MS))
}

/// How a task is polled and how much of its answer is kept; the defaults are deer-flow's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    /// Seconds between polls when the backend gives no hint, and the base of the backoff.
    pub interval_s: u64,
    /// The longest wait between retries after errors, so a recovered backend is noticed soon.
    pub max_backoff_s: u64,
    /// A task waiting for a person changes slowly; it is polled no faster than this.
    pub input_required_min_s: u64,
    /// Caps a backend's `poll_after_seconds` hint so a bad hint cannot park a task forever.
    pub poll_after_max_s: u64,
    /// Consecutive poll errors after which the task is reported as tracking degraded.
    pub degraded_after_errors: u32,
    /// A result whose compact JSON is larger is replaced by a text preview.
    pub max_result_bytes: usize,
    /// Characters of compact JSON kept as the preview of an oversized result.
    pub preview_chars: usize,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            interval_s: 5,
            max_backoff_s: 300,
            input_required_min_s: 60,
            poll_after_max_s: 86_400,
            degraded_after_errors: 3,
            max_result_bytes: 65_536,
            preview_chars: 2_000,
        }
    }
}

/// Where a task is in its life; the first three are still polled, the last three are final.
#[derive(Serialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl crate::pure::named::Named for Status {
    const ALL: &'static [Self] = &[
        Status::Submitted,
        Status::Working,
        Status::InputRequired,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
    ];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Status);

impl Status {
    /// A terminal task is never polled or cancelled again; only its expiry remains.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// The status as MCP tasks name it; MCP has no "submitted", so it reads as working.
    pub fn mcp_status(self) -> McpTaskStatus {
        match self {
            Status::Submitted | Status::Working => McpTaskStatus::Working,
            Status::InputRequired => McpTaskStatus::InputRequired,
            Status::Completed => McpTaskStatus::Completed,
            Status::Failed => McpTaskStatus::Failed,
            Status::Cancelled => McpTaskStatus::Cancelled,
        }
    }

    /// The stored name (snake case), for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Submitted => "submitted",
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// What the backend said in a status (or cancel) answer, already validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Running { poll_after_s: Option<f64> },
    InputRequired { input_required: Value, poll_after_s: Option<f64> },
    Completed { result: Value, result_artifact: Option<Value> },
    Failed { error: String, error_code: Option<String> },
    Cancelled,
}

impl Report {
    /// A terminal report ends the task; the others keep it polled.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Report::Completed { .. } | Report::Failed { .. } | Report::Cancelled)
    }

    fn remote_status(&self) -> &'static str {
        match self {
            Report::Running { .. } => "running",
            Report::InputRequired { .. } => "input_required",
            Report::Completed { .. } => "completed",
            Report::Failed { .. } => "failed",
            Report::Cancelled => "cancelled",
        }
    }
}

/// The outcome of one status or cancel call, as the shell hands it back.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    /// The backend answered with a valid report.
    Report(Report),
    /// retried with backoff; counts toward degraded
    Transient(String),
    /// task_not_found, protocol violations: the task fails for good
    Permanent(String),
}

/// What the shell must do when its alarm fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// nothing due
    None,
    /// Call the backend's status endpoint and feed the answer to `on_poll`.
    Poll,
    /// Call the backend's cancel endpoint and feed the answer to `on_cancel`.
    Cancel,
}

/// Why a cancel request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelError {
    /// The task already ended; MCP answers -32602 rather than pretending to cancel it.
    AlreadyTerminal,
}

impl fmt::Display for CancelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelError::AlreadyTerminal => f.write_str("the task has already finished and cannot be cancelled"),
        }
    }
}

impl std::error::Error for CancelError {}

/// Everything stored about one task (JSON in Durable Object storage: written by serde, read
/// by hand through `pure::fields`).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct TaskState {
    pub status: Status,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The backend's handle; `None` for work that runs inside the task.
    pub remote_id: Option<String>,
    pub next_poll_at_ms: Option<u64>,
    /// Every status call whose answer was applied, failed ones included.
    pub poll_count: u32,
    pub consecutive_errors: u32,
    /// The latest transient poll error (kept after recovery, for diagnosis).
    pub last_error: Option<String>,
    pub result: Option<Value>,
    pub result_preview: Option<String>,
    pub result_truncated: bool,
    pub result_artifact: Option<Value>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub input_required: Option<Value>,
    pub cancel_requested_at_ms: Option<u64>,
    /// Cancel calls made so far; keys the cancel backoff.
    pub cancel_attempts: u32,
    pub next_cancel_at_ms: Option<u64>,
    pub last_cancel_error: Option<String>,
    pub completed_at_ms: Option<u64>,
    /// How long the task lives, counted from `created_at_ms`: a task still running at its end
    /// is ended (`end_if_ttl_ran_out`), and its storage is deleted then (`delete_at_ms`).
    pub ttl_ms: u64,
    /// How long a task that ended at or after its TTL's end is kept (`TTL_GRACE_MS` unless the
    /// deployment set `TASK_GRACE_SECONDS` when the task was created).
    pub grace_ms: u64,
}

impl crate::pure::fields::FromFields for TaskState {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(TaskState {
            status: f.named("status")?,
            created_at_ms: f.uint("created_at_ms")?,
            updated_at_ms: f.uint("updated_at_ms")?,
            remote_id: f.opt_text("remote_id")?,
            next_poll_at_ms: f.opt_uint("next_poll_at_ms")?,
            poll_count: f.uint32("poll_count")?,
            consecutive_errors: f.uint32("consecutive_errors")?,
            last_error: f.opt_text("last_error")?,
            result: f.opt_value("result"),
            result_preview: f.opt_text("result_preview")?,
            result_truncated: f.flag("result_truncated")?,
            result_artifact: f.opt_value("result_artifact"),
            error: f.opt_text("error")?,
            error_code: f.opt_text("error_code")?,
            input_required: f.opt_value("input_required"),
            cancel_requested_at_ms: f.opt_uint("cancel_requested_at_ms")?,
            cancel_attempts: f.uint32("cancel_attempts")?,
            next_cancel_at_ms: f.opt_uint("next_cancel_at_ms")?,
            last_cancel_error: f.opt_text("last_cancel_error")?,
            completed_at_ms: f.opt_uint("completed_at_ms")?,
            ttl_ms: f.uint("ttl_ms")?,
            // Tasks stored before the setting existed have the default.
            grace_ms: f.opt_uint("grace_ms")?.unwrap_or(TTL_GRACE_MS),
        })
    }
}
crate::pure::fields::deserialize_by_fields!(TaskState);

impl TaskState {
    /// A task whose submit call has not answered yet.
    pub fn new(now_ms: u64, ttl_ms: u64) -> Self {
        TaskState {
            status: Status::Submitted,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            remote_id: None,
            next_poll_at_ms: None,
            poll_count: 0,
            consecutive_errors: 0,
            last_error: None,
            result: None,
            result_preview: None,
            result_truncated: false,
            result_artifact: None,
            error: None,
            error_code: None,
            input_required: None,
            cancel_requested_at_ms: None,
            cancel_attempts: 0,
            next_cancel_at_ms: None,
            last_cancel_error: None,
            completed_at_ms: None,
            ttl_ms,
            grace_ms: TTL_GRACE_MS,
        }
    }

    /// The same task with another grace (see [`grace_ms_setting`]).
    pub fn with_grace_ms(self, grace_ms: u64) -> Self {
        TaskState { grace_ms, ..self }
    }

    /// The backend accepted the work: remote id ≤ 255 chars (else Err, and the task is Failed permanently — the caller then sends a compensating cancel), status Working, first poll at now + interval.
    ///
    /// An Err always means "this remote id is not tracked by the task", so the caller cancels
    /// it: also when the task is no longer `Submitted` (already ended, or submitted twice), in
    /// which case the task itself is left as it is. A cancel requested before the submit
    /// answered stays pending and due, and no poll is scheduled.
    pub fn submitted(&mut self, remote_id: &str, cfg: &PollConfig, now_ms: u64) -> Result<(), String> {
        if self.status != Status::Submitted {
            return Err(format!(
                "the task is already {}; remote task {:?} is not tracked",
                self.status.as_str(),
                clip_chars(remote_id, MAX_REMOTE_ID)
            ));
        }
        if let Err(e) = check_remote_id(remote_id) {
            self.fail(e.clone(), None, now_ms);
            return Err(e);
        }
        self.remote_id = Some(remote_id.to_string());
        self.status = Status::Working;
        self.updated_at_ms = now_ms;
        if self.cancel_requested_at_ms.is_none() {
            self.next_poll_at_ms = Some(after(now_ms, secs_ms(cfg.interval_s)));
        }
        Ok(())
    }

    /// Work that runs to completion inside the task (no remote id): straight to a terminal report.
    ///
    /// Ignored on a terminal task. A non-terminal report cannot be polled without a remote
    /// id, so it fails the task instead of leaving it waiting forever.
    pub fn finished(&mut self, report: Report, cfg: &PollConfig, now_ms: u64) {
        if self.status.is_terminal() {
            return;
        }
        if report.is_terminal() {
            self.apply_terminal(report, cfg, now_ms);
        } else {
            let msg = format!("the work ended while still {} and cannot be polled", report.remote_status());
            self.fail(msg, None, now_ms);
        }
    }

    /// What the alarm at `now_ms` must do. Cancel comes before Poll; nothing when not yet due,
    /// nor when terminal (except the cancel of a run its TTL ended). While a cancel is pending no
    /// poll is made: its answer would be discarded.
    pub fn due_action(&self, now_ms: u64) -> Action {
        if self.status.is_terminal() {
            return match self.next_cancel_at_ms {
                Some(t) if t <= now_ms => Action::Cancel,
                _ => Action::None,
            };
        }
        if self.cancel_requested_at_ms.is_some() {
            return match self.next_cancel_at_ms {
                Some(t) if t <= now_ms => Action::Cancel,
                _ => Action::None,
            };
        }
        match self.next_poll_at_ms {
            Some(t) if t <= now_ms => Action::Poll,
            _ => Action::None,
        }
    }

    /// Applies a status answer; `returned_at_ms` is when the call returned (backoff counts from there). Ignored (returns false) when the task is terminal or a cancel was requested meanwhile — a cancel discards any poll result still in flight.
    pub fn on_poll(&mut self, outcome: PollOutcome, cfg: &PollConfig, returned_at_ms: u64) -> bool {
        if self.status.is_terminal() || self.cancel_requested_at_ms.is_some() {
            return false;
        }
        self.poll_count = self.poll_count.saturating_add(1);
        self.updated_at_ms = returned_at_ms;
        match outcome {
            PollOutcome::Report(Report::Running { poll_after_s }) => {
                self.consecutive_errors = 0;
                self.status = Status::Working;
                self.input_required = None;
                let wait = poll_wait_ms(poll_after_s, cfg.interval_s, 0, cfg.poll_after_max_s);
                self.next_poll_at_ms = Some(after(returned_at_ms, wait));
            }
            PollOutcome::Report(Report::InputRequired { input_required, poll_after_s }) => {
                self.consecutive_errors = 0;
                self.status = Status::InputRequired;
                self.input_required = Some(input_required);
                let wait = poll_wait_ms(poll_after_s, cfg.interval_s, cfg.input_required_min_s, cfg.poll_after_max_s);
                self.next_poll_at_ms = Some(after(returned_at_ms, wait));
            }
            PollOutcome::Report(report) => {
                self.consecutive_errors = 0;
                self.apply_terminal(report, cfg, returned_at_ms);
            }
            PollOutcome::Transient(msg) => {
                let before = self.consecutive_errors;
                self.consecutive_errors = before.saturating_add(1);
                self.last_error = Some(clip_error(&msg));
                self.next_poll_at_ms = Some(after(returned_at_ms, secs_ms(backoff_s(cfg, before))));
            }
            PollOutcome::Permanent(msg) => self.fail(msg, None, returned_at_ms),
        }
        true
    }

    /// Err(AlreadyTerminal) on a terminal task (the MCP layer answers -32602). Otherwise records the request; the next action is Cancel, due now.
    ///
    /// Polling stops at once. A repeated request is accepted but changes nothing, so it cannot
    /// cut short the backoff of a cancel that is failing.
    pub fn request_cancel(&mut self, now_ms: u64) -> Result<(), CancelError> {
        if self.status.is_terminal() {
            return Err(CancelError::AlreadyTerminal);
        }
        if self.cancel_requested_at_ms.is_none() {
            self.cancel_requested_at_ms = Some(now_ms);
            self.next_cancel_at_ms = Some(now_ms);
            self.next_poll_at_ms = None;
            self.updated_at_ms = now_ms;
        }
        Ok(())
    }

    /// The answer to a cancel call: a terminal Report ends the task (Cancelled, or Completed/Failed if the backend says it finished first); a Permanent one fails it (the cancel can never be confirmed); anything else (a non-terminal report, Transient) is retried with the same backoff keyed on cancel_attempts.
    ///
    /// On a terminal task only the cancel its TTL started is followed: a final answer (or a
    /// permanent failure) ends it, anything else is retried; the task itself stays as it
    /// ended. For work without a remote id the shell stops the work itself and reports
    /// `Cancelled` here.
    pub fn on_cancel(&mut self, outcome: PollOutcome, cfg: &PollConfig, returned_at_ms: u64) {
        if self.status.is_terminal() {
            self.after_ttl_cancel(outcome, cfg, returned_at_ms);
            return;
        }
        let before = self.cancel_attempts;
        self.cancel_attempts = before.saturating_add(1);
        self.updated_at_ms = returned_at_ms;
        let failure = match outcome {
            PollOutcome::Report(report) if report.is_terminal() => {
                self.apply_terminal(report, cfg, returned_at_ms);
                return;
            }
            PollOutcome::Report(report) => {
                format!("the backend answered the cancel with status {} instead of a final one", report.remote_status())
            }
            // The backend will never confirm this cancel (it does not know the task, or its
            // answer breaks the protocol): retrying would go on for ever, so the task ends.
            PollOutcome::Permanent(msg) => {
                self.fail(format!("the cancel could not be confirmed: {msg}"), None, returned_at_ms);
                return;
            }
            PollOutcome::Transient(msg) => msg,
        };
        // A cancel call was made, so cancellation is under way even if the shell skipped the request.
        self.cancel_requested_at_ms.get_or_insert(returned_at_ms);
        self.next_poll_at_ms = None;
        self.last_cancel_error = Some(clip_error(&failure));
        self.next_cancel_at_ms = Some(after(returned_at_ms, secs_ms(backoff_s(cfg, before))));
    }

    /// Whether polling keeps failing (consecutive_errors >= degraded_after_errors); the task is
    /// not failed for it, because the remote work may still be running. Never set on a
    /// terminal task.
    pub fn tracking_degraded(&self, cfg: &PollConfig) -> bool {
        !self.status.is_terminal() && self.consecutive_errors >= cfg.degraded_after_errors
    }

    /// For MCP `statusMessage`: e.g. "tracking degraded: 3 consecutive errors polling the backend (last: <error>)", "waiting for input", "cancelling", the error of a failed task.
    pub fn status_message(&self, cfg: &PollConfig) -> Option<String> {
        match self.status {
            Status::Failed => self.error.clone(),
            Status::Cancelled if self.cancel_requested_at_ms.is_some() => Some("cancelled on request".into()),
            Status::Cancelled => Some("cancelled by the backend".into()),
            Status::Completed => None,
            _ if self.cancel_requested_at_ms.is_some() => Some(match &self.last_cancel_error {
                Some(e) => format!("cancelling ({} failed: {e})", plural(self.cancel_attempts, "attempt")),
                None => "cancelling".into(),
            }),
            _ if self.tracking_degraded(cfg) => Some(format!(
                "tracking degraded: {} polling the backend (last: {})",
                plural(self.consecutive_errors, "consecutive error"),
                self.last_error.as_deref().unwrap_or("unknown error")
            )),
            Status::InputRequired => Some("waiting for input".into()),
            _ => None,
        }
    }

    /// When the Durable Object must wake next: the earliest of next poll, next cancel and the
    /// TTL's end (a task still running then is ended by it); for a terminal task the deletion of
    /// its storage, or a cancel of the backend's run still due before that.
    pub fn next_wake_ms(&self) -> Option<u64> {
        let earliest = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.status.is_terminal() {
            return earliest(self.delete_at_ms(), self.next_cancel_at_ms);
        }
        earliest(earliest(self.next_poll_at_ms, self.next_cancel_at_ms), Some(self.expires_at_ms()))
    }

    /// Whether the task's storage may be deleted: it is terminal and past `delete_at_ms`.
    pub fn deletable(&self, now_ms: u64) -> bool {
        self.status.is_terminal() && self.delete_at_ms().is_some_and(|t| now_ms >= t)
    }

    /// The end of the task's TTL, counted from its creation (as MCP tasks count it).
    pub fn expires_at_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.ttl_ms)
    }

    /// When a terminal task's storage is deleted: at the end of its TTL; a task that ended at or
    /// after that moment (its TTL ended it, or its last answer came back later) is kept
    /// `grace_ms` more, so its end can still be read and its backend's run cancelled.
    fn delete_at_ms(&self) -> Option<u64> {
        let completed = self.completed_at_ms?;
        let expires = self.expires_at_ms();
        Some(if completed >= expires { completed.saturating_add(self.grace_ms) } else { expires })
    }

    /// At the end of its TTL a task that has not finished ends `failed`, with a message naming
    /// the TTL, and the backend's run (if one was started) is cancelled as `tasks/cancel` does,
    /// retried with backoff until the storage is deleted. Returns whether the TTL ended it.
    pub fn end_if_ttl_ran_out(&mut self, now_ms: u64) -> bool {
        if self.status.is_terminal() || now_ms < self.expires_at_ms() {
            return false;
        }
        let msg = format!(
            "the task did not finish within its ttl of {} ms (counted from its creation); {}",
            self.ttl_ms,
            if self.remote_id.is_some() { "its run at the backend is cancelled" } else { "it was stopped" }
        );
        self.fail(msg, Some("ttl_expired".into()), now_ms);
        if self.remote_id.is_some() {
            self.cancel_requested_at_ms.get_or_insert(now_ms);
            self.next_cancel_at_ms = Some(now_ms);
        }
        true
    }

    fn after_ttl_cancel(&mut self, outcome: PollOutcome, cfg: &PollConfig, returned_at_ms: u64) {
        if self.next_cancel_at_ms.is_none() {
            return;
        }
        let before = self.cancel_attempts;
        self.cancel_attempts = before.saturating_add(1);
        let failure = match outcome {
            PollOutcome::Report(report) if report.is_terminal() => None,
            PollOutcome::Report(report) => Some(format!(
                "the backend answered the cancel with status {} instead of a final one",
                report.remote_status()
            )),
            PollOutcome::Permanent(msg) => {
                self.last_cancel_error = Some(clip_error(&msg));
                None
            }
            PollOutcome::Transient(msg) => Some(msg),
        };
        self.next_cancel_at_ms = failure.map(|failure| {
            self.last_cancel_error = Some(clip_error(&failure));
            after(returned_at_ms, secs_ms(backoff_s(cfg, before)))
        });
    }

    fn apply_terminal(&mut self, report: Report, cfg: &PollConfig, now_ms: u64) {
        match report {
            Report::Completed { result, result_artifact } => {
                self.store_result(result, cfg);
                self.result_artifact = result_artifact;
                self.end(Status::Completed, now_ms);
            }
            Report::Failed { error, error_code } => self.fail(error, error_code, now_ms),
            Report::Cancelled => self.end(Status::Cancelled, now_ms),
            // Callers only pass terminal reports; a stray one is a failure, not a hang.
            other => {
                let msg = format!("internal: non-terminal report {} taken as final", other.remote_status());
                self.fail(msg, None, now_ms);
            }
        }
    }

    /// Oversized results are never cut into invalid JSON: a text preview is kept instead.
    fn store_result(&mut self, result: Value, cfg: &PollConfig) {
        let compact = result.to_string();
        if compact.len() > cfg.max_result_bytes {
            self.result = None;
            self.result_preview = Some(clip_chars(&compact, cfg.preview_chars).to_string());
            self.result_truncated = true;
        } else {
            self.result = Some(result);
            self.result_preview = None;
            self.result_truncated = false;
        }
    }

    fn fail(&mut self, error: String, error_code: Option<String>, now_ms: u64) {
        self.error = Some(clip_error(&error));
        self.error_code = error_code.map(|c| clip_error(&c));
        self.end(Status::Failed, now_ms);
    }

    fn end(&mut self, status: Status, now_ms: u64) {
        self.status = status;
        self.completed_at_ms = Some(now_ms);
        self.updated_at_ms = now_ms;
        self.next_poll_at_ms = None;
        self.next_cancel_at_ms = None;
        self.input_required = None;
    }
}

/// The wait before retry number `consecutive_errors_before + 1`:
/// min(interval * 2^min(errors,16), max_backoff) → 5,10,20,40,80,160,300,300 with defaults.
pub fn backoff_s(cfg: &PollConfig, consecutive_errors_before: u32) -> u64 {
    let factor = 1u64 << consecutive_errors_before.min(16);
    cfg.interval_s.saturating_mul(factor).min(cfg.max_backoff_s)
}

/// Validates an async-tool status answer, docs/async-tool-protocol.md (the tool result's structuredContent): status in running|input_required|completed|failed|cancelled; returned task_id must equal `expected_remote_id` (else Permanent); error truncated to 4000 chars; error_code "task_not_found" → Permanent; input_required and result_artifact must be valid JSON values of ≤ 64 KiB compact (else Permanent, never truncated); poll_after_seconds honoured only when finite and > 0 (else treated as absent); anything malformed (not an object, missing/unknown status) → Permanent protocol violation with a message naming the problem.
///
/// Also used for cancel answers: their non-terminal statuses are retried by `on_cancel`.
pub fn parse_async_status(v: &Value, expected_remote_id: &str) -> PollOutcome {
    match read_async_status(v, expected_remote_id) {
        Ok(report) => PollOutcome::Report(report),
        Err(msg) => PollOutcome::Permanent(clip_error(&msg)),
    }
}

fn read_async_status(v: &Value, expected_remote_id: &str) -> Result<Report, String> {
    let Some(obj) = v.as_object() else {
        return Err(format!("protocol violation: the status answer is {} instead of a JSON object", json_kind(v)));
    };
    let error = optional_string(obj, "error")?.map(|e| clip_error(&e));
    let error_code = optional_string(obj, "error_code")?.map(|c| clip_error(&c));
    if error_code.as_deref() == Some("task_not_found") {
        return Err(match error {
            Some(e) => format!("the backend no longer knows the task (task_not_found): {e}"),
            None => "the backend no longer knows the task (task_not_found)".into(),
        });
    }
    let task_id = match obj.get("task_id") {
        Some(Value::String(id)) => id,
        None | Some(Value::Null) => return Err("protocol violation: the status answer has no task_id".into()),
        Some(other) => {
            return Err(format!(
                "protocol violation: task_id in the status answer is {} instead of a string",
                json_kind(other)
            ))
        }
    };
    if task_id != expected_remote_id {
        return Err(format!(
            "protocol violation: the status answer is for task {:?}, not {:?}",
            clip_chars(task_id, MAX_REMOTE_ID),
            expected_remote_id
        ));
    }
    let status = match obj.get("status") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => return Err("protocol violation: the status answer has no status".into()),
        Some(other) => {
            return Err(format!(
                "protocol violation: status in the status answer is {} instead of a string",
                json_kind(other)
            ))
        }
    };
    let input_required = bounded_json(obj, "input_required")?;
    let result_artifact = bounded_json(obj, "result_artifact")?;
    let poll_after_s = obj.get("poll_after_seconds").and_then(Value::as_f64).and_then(valid_poll_after);
    match status {
        "running" => Ok(Report::Running { poll_after_s }),
        "input_required" => match input_required {
            Some(input_required) => Ok(Report::InputRequired { input_required, poll_after_s }),
            None => Err("protocol violation: status input_required without an input_required payload".into()),
        },
        "completed" => {
            Ok(Report::Completed { result: obj.get("result").cloned().unwrap_or(Value::Null), result_artifact })
        }
        "failed" => Ok(Report::Failed {
            error: error.unwrap_or_else(|| "the backend reported the task failed without an error message".into()),
            error_code,
        }),
        "cancelled" => Ok(Report::Cancelled),
        other => Err(format!(
            "protocol violation: unknown status {:?} (expected running, input_required, completed, failed or cancelled)",
            clip_chars(other, 64)
        )),
    }
}

/// Validates a submit answer: must be {task_id: string ≤255, status: "running"}.
pub fn parse_async_submit(v: &Value) -> Result<String, String> {
    let Some(obj) = v.as_object() else {
        return Err(format!("protocol violation: the submit answer is {} instead of a JSON object", json_kind(v)));
    };
    match obj.get("status") {
        Some(Value::String(s)) if s == "running" => {}
        Some(Value::String(s)) => {
            return Err(format!(
                "protocol violation: the submit answer has status {:?} instead of \"running\"",
                clip_chars(s, 64)
            ))
        }
        None | Some(Value::Null) => return Err("protocol violation: the submit answer has no status".into()),
        Some(other) => return Err(format!("protocol violation: status in the submit answer is {}", json_kind(other))),
    }
    match obj.get("task_id") {
        Some(Value::String(id)) => {
            check_remote_id(id)?;
            Ok(id.clone())
        }
        None | Some(Value::Null) => Err("protocol violation: the submit answer has no task_id".into()),
        Some(other) => {
            Err(format!("protocol violation: task_id in the submit answer is {} instead of a string", json_kind(other)))
        }
    }
}

/// A remote id must be storable and sendable back: non-blank and at most 255 characters.
fn check_remote_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("protocol violation: the remote task id is empty".into());
    }
    let n = id.chars().count();
    if n > MAX_REMOTE_ID {
        return Err(format!(
            "protocol violation: the remote task id is {n} characters long; at most {MAX_REMOTE_ID} are allowed"
        ));
    }
    Ok(())
}

fn optional_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => {
            Err(format!("protocol violation: {key} in the status answer is {} instead of a string", json_kind(other)))
        }
    }
}

/// A control payload that must fit whole; absent and null both mean "not given".
fn bounded_json(obj: &Map<String, Value>, key: &str) -> Result<Option<Value>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = v.to_string().len();
            if n > MAX_JSON_BYTES {
                Err(format!("protocol violation: {key} is {n} bytes of JSON; at most {MAX_JSON_BYTES} are allowed"))
            } else {
                Ok(Some(v.clone()))
            }
        }
    }
}

fn valid_poll_after(s: f64) -> Option<f64> {
    (s.is_finite() && s > 0.0).then_some(s)
}

/// The wait before the next poll: the backend's hint if usable, else the interval; at least
/// `floor_s`, at most `cap_s`.
/// The shortest wait a backend's `poll_after_seconds` can ask for: a hint of 0.001 s must not
/// turn the poller into a loop of subrequests against the backend.
pub const MIN_POLL_AFTER_S: f64 = 1.0;

fn poll_wait_ms(poll_after_s: Option<f64>, interval_s: u64, floor_s: u64, cap_s: u64) -> u64 {
    let s = poll_after_s.and_then(valid_poll_after).unwrap_or(interval_s as f64);
    let s = s.max(floor_s as f64).max(MIN_POLL_AFTER_S).min(cap_s as f64);
    // `s` is finite and within [0, cap_s]; ceil keeps a tiny positive hint from meaning "now".
    (s * 1000.0).ceil() as u64
}

fn secs_ms(s: u64) -> u64 {
    s.saturating_mul(1000)
}

fn after(t: u64, wait_ms: u64) -> u64 {
    t.saturating_add(wait_ms)
}

pub(crate) fn clip_error(s: &str) -> String {
    clip_chars(s, MAX_ERROR_CHARS).to_string()
}

/// The first `max` characters of `s` (never splits a character).
pub(crate) fn clip_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    const T0: u64 = 1_000_000;
    const TTL: u64 = 3_600_000;
    const S: u64 = 1000;

    fn cfg() -> PollConfig {
        PollConfig::default()
    }

    fn working() -> TaskState {
        let mut t = TaskState::new(T0, TTL);
        t.submitted("r-1", &cfg(), T0).unwrap();
        t
    }

    pub(crate) fn running(poll_after_s: Option<f64>) -> PollOutcome {
        PollOutcome::Report(Report::Running { poll_after_s })
    }

    fn input(poll_after_s: Option<f64>) -> PollOutcome {
        PollOutcome::Report(Report::InputRequired { input_required: json!({"question": "which?"}), poll_after_s })
    }

    pub(crate) fn completed(result: Value) -> PollOutcome {
        PollOutcome::Report(Report::Completed { result, result_artifact: None })
    }

    fn transient(msg: &str) -> PollOutcome {
        PollOutcome::Transient(msg.into())
    }

    fn wait_after_running(poll_after_s: Option<f64>) -> u64 {
        let mut t = working();
        assert!(t.on_poll(running(poll_after_s), &cfg(), T0 + 7 * S));
        t.next_poll_at_ms.unwrap() - (T0 + 7 * S)
    }

    fn wait_after_input(poll_after_s: Option<f64>) -> u64 {
        let mut t = working();
        assert!(t.on_poll(input(poll_after_s), &cfg(), T0 + 7 * S));
        t.next_poll_at_ms.unwrap() - (T0 + 7 * S)
    }

    fn status_answer(extra: Value) -> Value {
        let mut v = json!({"task_id": "r-1", "status": "running"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    pub(crate) fn permanent_message(outcome: PollOutcome) -> String {
        match outcome {
            PollOutcome::Permanent(m) => m,
            other => panic!("expected Permanent, got {other:?}"),
        }
    }

    // --- Status -------------------------------------------------------------------------

    #[test]
    fn status_terminality_and_mcp_names() {
        let all = [
            (Status::Submitted, false, "working"),
            (Status::Working, false, "working"),
            (Status::InputRequired, false, "input_required"),
            (Status::Completed, true, "completed"),
            (Status::Failed, true, "failed"),
            (Status::Cancelled, true, "cancelled"),
        ];
        for (s, terminal, mcp) in all {
            assert_eq!(s.is_terminal(), terminal, "{s:?}");
            assert_eq!(s.mcp_status().as_str(), mcp, "{s:?}");
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
    }

    #[test]
    fn defaults_are_the_reference_values() {
        let c = cfg();
        assert_eq!((c.interval_s, c.max_backoff_s, c.input_required_min_s, c.poll_after_max_s), (5, 300, 60, 86_400));
        assert_eq!((c.degraded_after_errors, c.max_result_bytes, c.preview_chars), (3, 65_536, 2_000));
        assert_eq!((MAX_ERROR_CHARS, MAX_JSON_BYTES, MAX_REMOTE_ID), (4000, 65_536, 255));
    }

    // --- Transitions ----------------------------------------------------------------------

    #[test]
    fn new_task_is_submitted_with_nothing_due() {
        let t = TaskState::new(T0, TTL);
        assert_eq!(t.status, Status::Submitted);
        assert_eq!((t.created_at_ms, t.updated_at_ms, t.ttl_ms), (T0, T0, TTL));
        assert_eq!(t.due_action(u64::MAX), Action::None);
        // Only the end of its TTL is due: a task whose submit never answers still ends.
        assert_eq!(t.next_wake_ms(), Some(T0 + TTL));
        assert!(!t.deletable(u64::MAX));
        assert_eq!(t.status_message(&cfg()), None);
    }

    #[test]
    fn submitted_starts_working_and_polls_after_the_interval() {
        let mut t = TaskState::new(T0, TTL);
        t.submitted("r-1", &cfg(), T0 + S).unwrap();
        assert_eq!(t.status, Status::Working);
        assert_eq!(t.remote_id.as_deref(), Some("r-1"));
        assert_eq!(t.next_poll_at_ms, Some(T0 + 6 * S));
        assert_eq!(t.updated_at_ms, T0 + S);
        assert_eq!(t.due_action(T0 + 6 * S - 1), Action::None);
        assert_eq!(t.due_action(T0 + 6 * S), Action::Poll);
        assert_eq!(t.next_wake_ms(), Some(T0 + 6 * S));
    }

    #[test]
    fn lifecycle_working_input_required_working_completed() {
        let c = cfg();
        let mut t = working();

        assert!(t.on_poll(running(None), &c, T0 + 6 * S));
        assert_eq!(t.status, Status::Working);
        assert_eq!(t.next_poll_at_ms, Some(T0 + 11 * S));

        assert!(t.on_poll(input(None), &c, T0 + 12 * S));
        assert_eq!(t.status, Status::InputRequired);
        assert_eq!(t.status.mcp_status(), McpTaskStatus::InputRequired);
        assert_eq!(t.input_required, Some(json!({"question": "which?"})));
        assert_eq!(t.next_poll_at_ms, Some(T0 + 72 * S));
        assert_eq!(t.status_message(&c).as_deref(), Some("waiting for input"));

        // Input was given elsewhere: the backend is working again.
        assert!(t.on_poll(running(None), &c, T0 + 73 * S));
        assert_eq!(t.status, Status::Working);
        assert_eq!(t.input_required, None);
        assert_eq!(t.next_poll_at_ms, Some(T0 + 78 * S));
        assert_eq!(t.status_message(&c), None);

        assert!(t.on_poll(completed(json!({"answer": 42})), &c, T0 + 80 * S));
        assert_eq!(t.status, Status::Completed);
        assert_eq!(t.result, Some(json!({"answer": 42})));
        assert!(!t.result_truncated && t.result_preview.is_none());
        assert_eq!(t.completed_at_ms, Some(T0 + 80 * S));
        assert_eq!(t.updated_at_ms, T0 + 80 * S);
        assert_eq!(t.next_poll_at_ms, None);
        assert_eq!(t.poll_count, 4);
        assert_eq!(t.due_action(u64::MAX), Action::None);
        // Deleted at the end of the TTL, counted from the creation, not from the end.
        assert_eq!(t.next_wake_ms(), Some(T0 + TTL));
        assert_eq!(t.status_message(&c), None);

        // A terminal task ignores late answers.
        let before = t.clone();
        assert!(!t.on_poll(running(None), &c, T0 + 90 * S));
        assert!(!t.on_poll(transient("late"), &c, T0 + 90 * S));
        assert_eq!(t, before);
    }

    #[test]
    fn completed_keeps_the_result_artifact() {
        let mut t = working();
        let artifact = json!({"uri": "https://files.example/r.pdf", "mime_type": "application/pdf"});
        let r = Report::Completed { result: json!("done"), result_artifact: Some(artifact.clone()) };
        assert!(t.on_poll(PollOutcome::Report(r), &cfg(), T0 + 6 * S));
        assert_eq!(t.result, Some(json!("done")));
        assert_eq!(t.result_artifact, Some(artifact));
    }

    #[test]
    fn failed_report_fails_with_error_and_code() {
        let mut t = working();
        let r = Report::Failed { error: "disk full".into(), error_code: Some("quota".into()) };
        assert!(t.on_poll(PollOutcome::Report(r), &cfg(), T0 + 6 * S));
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.error.as_deref(), Some("disk full"));
        assert_eq!(t.error_code.as_deref(), Some("quota"));
        assert_eq!(t.completed_at_ms, Some(T0 + 6 * S));
        assert_eq!(t.status_message(&cfg()).as_deref(), Some("disk full"));
        assert_eq!(t.poll_count, 1);
    }

    #[test]
    fn permanent_outcome_fails_the_task_for_good() {
        let mut t = working();
        t.on_poll(transient("blip"), &cfg(), T0 + 6 * S);
        assert!(t.on_poll(PollOutcome::Permanent("task_not_found".into()), &cfg(), T0 + 20 * S));
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.error.as_deref(), Some("task_not_found"));
        assert_eq!(t.error_code, None);
        assert_eq!(t.completed_at_ms, Some(T0 + 20 * S));
        assert_eq!(t.due_action(u64::MAX), Action::None);
        assert!(!t.tracking_degraded(&cfg()));
    }

    #[test]
    fn backend_cancelled_report_ends_the_task() {
        let mut t = working();
        assert!(t.on_poll(PollOutcome::Report(Report::Cancelled), &cfg(), T0 + 6 * S));
        assert_eq!(t.status, Status::Cancelled);
        assert_eq!(t.status_message(&cfg()).as_deref(), Some("cancelled by the backend"));
    }

    #[test]
    fn input_required_cleared_when_the_task_ends() {
        let mut t = working();
        t.on_poll(input(None), &cfg(), T0 + 6 * S);
        t.on_poll(completed(json!(1)), &cfg(), T0 + 70 * S);
        assert_eq!(t.input_required, None);
    }

    // --- Cancellation ---------------------------------------------------------------------

    #[test]
    fn cancel_while_running() {
        let c = cfg();
        let mut t = working();
        t.request_cancel(T0 + 2 * S).unwrap();
        assert_eq!(t.cancel_requested_at_ms, Some(T0 + 2 * S));
        assert_eq!(t.next_cancel_at_ms, Some(T0 + 2 * S));
        assert_eq!(t.next_poll_at_ms, None);
        assert_eq!(t.due_action(T0 + 2 * S), Action::Cancel);
        // Even long after the poll would have been due, nothing but the cancel is done.
        assert_eq!(t.due_action(T0 + 1000 * S), Action::Cancel);
        assert_eq!(t.next_wake_ms(), Some(T0 + 2 * S));
        assert_eq!(t.status_message(&c).as_deref(), Some("cancelling"));
        assert_eq!(t.status.mcp_status(), McpTaskStatus::Working);

        t.on_cancel(PollOutcome::Report(Report::Cancelled), &c, T0 + 3 * S);
        assert_eq!(t.status, Status::Cancelled);
        assert_eq!(t.cancel_attempts, 1);
        assert_eq!(t.completed_at_ms, Some(T0 + 3 * S));
        assert_eq!(t.next_cancel_at_ms, None);
        assert_eq!(t.due_action(u64::MAX), Action::None);
        assert_eq!(t.next_wake_ms(), Some(T0 + TTL));
        assert_eq!(t.status_message(&c).as_deref(), Some("cancelled on request"));
        assert_eq!(t.poll_count, 0);
    }

    #[test]
    fn cancel_while_waiting_for_input() {
        let mut t = working();
        t.on_poll(input(None), &cfg(), T0 + 6 * S);
        t.request_cancel(T0 + 7 * S).unwrap();
        assert_eq!(t.due_action(T0 + 7 * S), Action::Cancel);
        assert_eq!(t.status_message(&cfg()).as_deref(), Some("cancelling"));
        t.on_cancel(PollOutcome::Report(Report::Cancelled), &cfg(), T0 + 8 * S);
        assert_eq!(t.status, Status::Cancelled);
        assert_eq!(t.input_required, None);
    }

    #[test]
    fn cancel_discards_a_poll_in_flight() {
        let mut t = working();
        // The poll started at T0+5s; the cancel arrives before it returns.
        t.request_cancel(T0 + 6 * S).unwrap();
        let before = t.clone();
        for outcome in
            [completed(json!("late")), running(None), transient("timeout"), PollOutcome::Permanent("bad".into())]
        {
            assert!(!t.on_poll(outcome, &cfg(), T0 + 7 * S));
            assert_eq!(t, before);
        }
        assert_eq!(t.due_action(T0 + 7 * S), Action::Cancel);
    }

    #[test]
    fn cancel_on_a_terminal_task_is_refused() {
        for end in [completed(json!(1)), PollOutcome::Permanent("x".into()), PollOutcome::Report(Report::Cancelled)] {
            let mut t = working();
            t.on_poll(end, &cfg(), T0 + 6 * S);
            assert!(t.status.is_terminal());
            let before = t.clone();
            assert_eq!(t.request_cancel(T0 + 7 * S), Err(CancelError::AlreadyTerminal));
            assert_eq!(t, before);
        }
        assert!(CancelError::AlreadyTerminal.to_string().contains("already finished"));
    }

    #[test]
    fn repeated_cancel_request_changes_nothing() {
        let mut t = working();
        t.request_cancel(T0 + S).unwrap();
        t.on_cancel(transient("down"), &cfg(), T0 + 2 * S);
        let before = t.clone();
        assert_eq!(t.request_cancel(T0 + 3 * S), Ok(()));
        assert_eq!(t, before);
        assert_eq!(t.next_cancel_at_ms, Some(T0 + 7 * S));
    }

    #[test]
    fn cancel_retried_with_backoff_until_terminal() {
        let c = cfg();
        let mut t = working();
        t.request_cancel(T0).unwrap();
        let failures = [
            transient("connection reset"),
            PollOutcome::Report(Report::Running { poll_after_s: Some(1.0) }),
            transient("500 from backend"),
            input(None),
        ];
        let expected_waits = [5, 10, 20, 40];
        let mut returned = T0 + S;
        for (i, (outcome, wait)) in failures.into_iter().zip(expected_waits).enumerate() {
            assert_eq!(t.due_action(returned - 1), Action::Cancel);
            t.on_cancel(outcome, &c, returned);
            assert_eq!(t.status, Status::Working, "attempt {i}");
            assert_eq!(t.cancel_attempts, i as u32 + 1);
            assert_eq!(t.next_cancel_at_ms, Some(returned + wait * S), "attempt {i}");
            assert_eq!(t.due_action(returned + wait * S - 1), Action::None);
            assert_eq!(t.next_wake_ms(), Some(returned + wait * S));
            assert!(t.last_cancel_error.is_some());
            returned += wait * S + 3 * S;
        }
        assert!(t.last_cancel_error.as_deref().unwrap().contains("input_required"));
        assert_eq!(
            t.status_message(&c).as_deref(),
            Some("cancelling (4 attempts failed: the backend answered the cancel with status input_required instead of a final one)")
        );
        // The backend finished before it could be cancelled: the real result wins.
        t.on_cancel(completed(json!({"ok": true})), &c, returned);
        assert_eq!(t.status, Status::Completed);
        assert_eq!(t.result, Some(json!({"ok": true})));
        assert_eq!(t.cancel_attempts, 5);
        assert_eq!(t.completed_at_ms, Some(returned));
        assert_eq!(t.next_cancel_at_ms, None);
        // Later cancel answers are ignored.
        let before = t.clone();
        t.on_cancel(PollOutcome::Report(Report::Cancelled), &c, returned + S);
        assert_eq!(t, before);
    }

    #[test]
    fn cancel_answered_failed_fails_the_task() {
        let mut t = working();
        t.request_cancel(T0).unwrap();
        let r = Report::Failed { error: "crashed".into(), error_code: None };
        t.on_cancel(PollOutcome::Report(r), &cfg(), T0 + S);
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.error.as_deref(), Some("crashed"));
    }

    #[test]
    fn cancel_requested_before_the_submit_answered() {
        let mut t = TaskState::new(T0, TTL);
        t.request_cancel(T0 + S).unwrap();
        assert_eq!(t.due_action(T0 + S), Action::Cancel);
        t.submitted("r-9", &cfg(), T0 + 2 * S).unwrap();
        assert_eq!(t.status, Status::Working);
        assert_eq!(t.next_poll_at_ms, None);
        assert_eq!(t.due_action(T0 + 2 * S), Action::Cancel);
        assert_eq!(t.next_wake_ms(), Some(T0 + S));
    }

    // --- Run-to-completion work -------------------------------------------------------------

    #[test]
    fn finished_goes_straight_to_a_terminal_state() {
        let c = cfg();
        let mut t = TaskState::new(T0, TTL);
        t.finished(Report::Completed { result: json!({"text": "hi"}), result_artifact: None }, &c, T0 + 4 * S);
        assert_eq!(t.status, Status::Completed);
        assert_eq!(t.remote_id, None);
        assert_eq!(t.result, Some(json!({"text": "hi"})));
        assert_eq!(t.completed_at_ms, Some(T0 + 4 * S));
        assert_eq!(t.next_wake_ms(), Some(T0 + TTL));
        assert_eq!(t.poll_count, 0);

        // Ignored once terminal.
        let before = t.clone();
        t.finished(Report::Cancelled, &c, T0 + 5 * S);
        assert_eq!(t, before);

        let mut t = TaskState::new(T0, TTL);
        t.finished(Report::Failed { error: "HTTP 500".into(), error_code: None }, &c, T0 + S);
        assert_eq!((t.status, t.error.as_deref()), (Status::Failed, Some("HTTP 500")));

        let mut t = TaskState::new(T0, TTL);
        t.request_cancel(T0).unwrap();
        t.finished(Report::Cancelled, &c, T0 + S);
        assert_eq!(t.status, Status::Cancelled);
        assert_eq!(t.status_message(&c).as_deref(), Some("cancelled on request"));

        // A non-terminal report cannot be polled without a remote id: it fails the task.
        let mut t = TaskState::new(T0, TTL);
        t.finished(Report::Running { poll_after_s: None }, &c, T0 + S);
        assert_eq!(t.status, Status::Failed);
        assert!(t.error.as_deref().unwrap().contains("running"));
    }

    #[test]
    fn finished_applies_the_result_limit() {
        let mut t = TaskState::new(T0, TTL);
        let big = json!("x".repeat(70_000));
        t.finished(Report::Completed { result: big, result_artifact: None }, &cfg(), T0);
        assert_eq!(t.result, None);
        assert!(t.result_truncated);
        assert_eq!(t.result_preview.as_ref().unwrap().chars().count(), 2000);
    }

    // --- Backoff and degraded tracking -------------------------------------------------

    #[test]
    fn backoff_sequence() {
        let c = cfg();
        let seq: Vec<u64> = (0..8).map(|e| backoff_s(&c, e)).collect();
        assert_eq!(seq, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff_s(&c, 16), 300);
        assert_eq!(backoff_s(&c, u32::MAX), 300);
        let huge = PollConfig { interval_s: u64::MAX / 2, max_backoff_s: u64::MAX, ..c };
        assert_eq!(backoff_s(&huge, 16), u64::MAX);
        let uncapped = PollConfig { max_backoff_s: u64::MAX, ..c };
        assert_eq!(backoff_s(&uncapped, 40), 5 << 16);
    }

    #[test]
    fn transient_errors_back_off_from_when_the_call_returned() {
        let c = cfg();
        let mut t = working();
        let mut returned = T0 + 6 * S;
        for (i, wait) in [5u64, 10, 20, 40, 80, 160, 300, 300].into_iter().enumerate() {
            assert!(t.on_poll(transient(&format!("timeout {i}")), &c, returned));
            assert_eq!(t.next_poll_at_ms, Some(returned + wait * S), "error {i}");
            assert_eq!(t.consecutive_errors, i as u32 + 1);
            assert_eq!(t.status, Status::Working);
            assert_eq!(t.last_error.as_deref(), Some(format!("timeout {i}").as_str()));
            // The next call starts when due and takes 1.5 s to fail.
            returned = t.next_poll_at_ms.unwrap() + 1500;
        }
        assert_eq!(t.poll_count, 8);
        assert_eq!(t.error, None);
    }

    #[test]
    fn degraded_after_three_errors_then_recovers() {
        let c = cfg();
        let mut t = working();
        t.on_poll(transient("e1"), &c, T0 + 6 * S);
        t.on_poll(transient("e2"), &c, T0 + 12 * S);
        assert!(!t.tracking_degraded(&c));
        assert_eq!(t.status_message(&c), None);
        t.on_poll(transient("503 Service Unavailable"), &c, T0 + 30 * S);
        assert!(t.tracking_degraded(&c));
        assert_eq!(
            t.status_message(&c).as_deref(),
            Some("tracking degraded: 3 consecutive errors polling the backend (last: 503 Service Unavailable)")
        );
        assert_eq!(t.status, Status::Working);

        assert!(t.on_poll(running(None), &c, T0 + 60 * S));
        assert_eq!(t.consecutive_errors, 0);
        assert!(!t.tracking_degraded(&c));
        assert_eq!(t.status_message(&c), None);
        assert_eq!(t.status, Status::Working);
        assert_eq!(t.next_poll_at_ms, Some(T0 + 65 * S));
        // The backoff starts over after a success.
        t.on_poll(transient("again"), &c, T0 + 66 * S);
        assert_eq!(t.next_poll_at_ms, Some(T0 + 71 * S));
    }

    #[test]
    fn degraded_waiting_for_input_says_degraded() {
        let c = cfg();
        let mut t = working();
        t.on_poll(input(None), &c, T0 + 6 * S);
        for i in 0..3 {
            t.on_poll(transient("down"), &c, T0 + (100 + i) * S);
        }
        assert_eq!(t.status, Status::InputRequired);
        assert!(t.status_message(&c).unwrap().starts_with("tracking degraded: 3 consecutive errors"));
    }

    // --- Poll scheduling ----------------------------------------------------------------------

    #[test]
    fn a_cancel_the_backend_can_never_confirm_fails_the_task_instead_of_retrying() {
        let c = cfg();
        let mut t = working();
        t.request_cancel(T0).unwrap();
        t.on_cancel(PollOutcome::Permanent("task_not_found: Task not found".into()), &c, T0 + S);
        assert_eq!(t.status, Status::Failed);
        // Only the TTL's deletion is left to wake for.
        assert_eq!((t.next_poll_at_ms, t.next_cancel_at_ms), (None, None));
        assert_eq!(t.error.as_deref(), Some("the cancel could not be confirmed: task_not_found: Task not found"));
    }

    #[test]
    fn poll_after_honoured_ignored_or_capped() {
        assert_eq!(wait_after_running(None), 5 * S);
        assert_eq!(wait_after_running(Some(12.5)), 12_500);
        assert_eq!(wait_after_running(Some(1.0)), S);
        // A hint below the floor waits the floor: the poller never spins.
        assert_eq!(wait_after_running(Some(0.0004)), S);
        assert_eq!(wait_after_running(Some(0.5)), S);
        assert_eq!(wait_after_running(Some(1.5)), 1_500);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, -3.0] {
            assert_eq!(wait_after_running(Some(bad)), 5 * S, "{bad}");
        }
        assert_eq!(wait_after_running(Some(86_400.0)), 86_400 * S);
        assert_eq!(wait_after_running(Some(86_401.0)), 86_400 * S);
        assert_eq!(wait_after_running(Some(1e300)), 86_400 * S);
        assert_eq!(wait_after_running(Some(f64::MAX)), 86_400 * S);
    }

    #[test]
    fn input_required_polled_no_faster_than_every_minute() {
        assert_eq!(wait_after_input(None), 60 * S);
        assert_eq!(wait_after_input(Some(10.0)), 60 * S);
        assert_eq!(wait_after_input(Some(f64::NAN)), 60 * S);
        assert_eq!(wait_after_input(Some(-1.0)), 60 * S);
        assert_eq!(wait_after_input(Some(120.0)), 120 * S);
        assert_eq!(wait_after_input(Some(1e9)), 86_400 * S);
    }

    #[test]
    fn due_action_follows_the_schedule() {
        let mut t = working();
        let due = t.next_poll_at_ms.unwrap();
        assert_eq!(t.due_action(due - 1), Action::None);
        assert_eq!(t.due_action(due), Action::Poll);
        assert_eq!(t.due_action(due + 60 * S), Action::Poll);
        t.on_poll(completed(json!(null)), &cfg(), due);
        assert_eq!(t.due_action(due + 60 * S), Action::None);
    }

    #[test]
    fn poll_count_counts_every_applied_status_call() {
        let c = cfg();
        let mut t = working();
        t.on_poll(transient("a"), &c, T0 + 6 * S);
        t.on_poll(running(None), &c, T0 + 12 * S);
        t.on_poll(input(None), &c, T0 + 18 * S);
        assert_eq!(t.poll_count, 3);
        t.on_poll(PollOutcome::Permanent("gone".into()), &c, T0 + 80 * S);
        assert_eq!(t.poll_count, 4);
        assert!(!t.on_poll(running(None), &c, T0 + 90 * S));
        assert_eq!(t.poll_count, 4);
    }

    // --- Limits ---------------------------------------------------------------------------------

    #[test]
    fn errors_are_truncated_to_4000_characters() {
        let long = "é".repeat(5000);
        let c = cfg();

        let mut t = working();
        t.on_poll(PollOutcome::Transient(long.clone()), &c, T0 + 6 * S);
        assert_eq!(t.last_error.as_ref().unwrap().chars().count(), 4000);

        let mut t = working();
        t.on_poll(PollOutcome::Permanent(long.clone()), &c, T0 + 6 * S);
        assert_eq!(t.error.as_ref().unwrap().chars().count(), 4000);

        let mut t = working();
        let r = Report::Failed { error: long.clone(), error_code: Some(long.clone()) };
        t.on_poll(PollOutcome::Report(r), &c, T0 + 6 * S);
        assert_eq!(t.error.as_ref().unwrap().chars().count(), 4000);
        assert_eq!(t.error_code.as_ref().unwrap().chars().count(), 4000);

        let mut t = working();
        t.request_cancel(T0).unwrap();
        t.on_cancel(PollOutcome::Transient(long.clone()), &c, T0 + S);
        assert_eq!(t.last_cancel_error.as_ref().unwrap().chars().count(), 4000);

        let exact = "a".repeat(4000);
        let mut t = working();
        t.on_poll(PollOutcome::Permanent(exact.clone()), &c, T0 + 6 * S);
        assert_eq!(t.error.as_deref(), Some(exact.as_str()));

        let answer = json!({"task_id": "r-1", "status": "failed", "error": long});
        match parse_async_status(&answer, "r-1") {
            PollOutcome::Report(Report::Failed { error, .. }) => assert_eq!(error.chars().count(), 4000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn remote_id_limit() {
        let c = cfg();
        let ok = "é".repeat(255);
        let mut t = TaskState::new(T0, TTL);
        t.submitted(&ok, &c, T0).unwrap();
        assert_eq!(t.remote_id.as_deref(), Some(ok.as_str()));

        let mut t = TaskState::new(T0, TTL);
        let err = t.submitted(&"a".repeat(256), &c, T0 + S).unwrap_err();
        assert!(err.contains("256") && err.contains("255"), "{err}");
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.error.as_deref(), Some(err.as_str()));
        assert_eq!(t.remote_id, None);
        assert_eq!(t.completed_at_ms, Some(T0 + S));
        assert_eq!(t.due_action(u64::MAX), Action::None);

        let mut t = TaskState::new(T0, TTL);
        assert!(t.submitted("  ", &c, T0).is_err());
        assert_eq!(t.status, Status::Failed);
    }

    #[test]
    fn submitted_twice_or_after_the_end_is_refused_without_touching_the_task() {
        let c = cfg();
        let mut t = working();
        let before = t.clone();
        assert!(t.submitted("r-2", &c, T0 + S).unwrap_err().contains("already working"));
        assert_eq!(t, before);

        let mut t = TaskState::new(T0, TTL);
        t.finished(Report::Failed { error: "submit timed out".into(), error_code: None }, &c, T0 + S);
        let before = t.clone();
        assert!(t.submitted("r-3", &c, T0 + 2 * S).is_err());
        assert_eq!(t, before);
    }

    #[test]
    fn oversized_result_becomes_a_char_safe_preview() {
        let c = cfg();
        let mut t = working();
        let artifact = json!({"uri": "r2://big", "mime_type": "application/json"});
        let result = json!({"text": "ü".repeat(40_000)}); // 80 000+ bytes compact
        let r = Report::Completed { result: result.clone(), result_artifact: Some(artifact.clone()) };
        t.on_poll(PollOutcome::Report(r), &c, T0 + 6 * S);
        assert_eq!(t.status, Status::Completed);
        assert_eq!(t.result, None);
        assert!(t.result_truncated);
        let preview = t.result_preview.as_deref().unwrap();
        assert_eq!(preview.chars().count(), 2000);
        assert!(result.to_string().starts_with(preview));
        assert!(preview.starts_with("{\"text\":\"üü"));
        assert_eq!(t.result_artifact, Some(artifact));

        // Exactly at the limit the result is kept whole.
        let mut t = working();
        let fits = json!("x".repeat(65_536 - 2));
        assert_eq!(fits.to_string().len(), 65_536);
        t.on_poll(completed(fits.clone()), &c, T0 + 6 * S);
        assert_eq!(t.result, Some(fits));
        assert!(!t.result_truncated);
        assert_eq!(t.result_preview, None);

        let mut t = working();
        t.on_poll(completed(json!("x".repeat(65_536 - 1))), &c, T0 + 6 * S);
        assert!(t.result_truncated);
    }

    // --- parse_async_status ---------------------------------------------------------------------

    #[test]
    fn async_status_good_answers() {
        let p = |extra: Value| parse_async_status(&status_answer(extra), "r-1");
        assert_eq!(p(json!({})), running(None));
        assert_eq!(p(json!({"poll_after_seconds": 2.5})), running(Some(2.5)));
        assert_eq!(p(json!({"poll_after_seconds": 30})), running(Some(30.0)));
        assert_eq!(
            p(json!({"status": "input_required", "input_required": {"q": "name?"}, "poll_after_seconds": 90})),
            PollOutcome::Report(Report::InputRequired {
                input_required: json!({"q": "name?"}),
                poll_after_s: Some(90.0)
            })
        );
        assert_eq!(
            p(json!({"status": "completed", "result": {"rows": [1, 2]},
                     "result_artifact": {"uri": "s3://b/k", "mime_type": "text/csv"}})),
            PollOutcome::Report(Report::Completed {
                result: json!({"rows": [1, 2]}),
                result_artifact: Some(json!({"uri": "s3://b/k", "mime_type": "text/csv"}))
            })
        );
        assert_eq!(p(json!({"status": "completed"})), completed(Value::Null));
        assert_eq!(
            p(json!({"status": "failed", "error": "boom", "error_code": "oom"})),
            PollOutcome::Report(Report::Failed { error: "boom".into(), error_code: Some("oom".into()) })
        );
        match p(json!({"status": "failed"})) {
            PollOutcome::Report(Report::Failed { error, error_code: None }) => {
                assert!(error.contains("without an error"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p(json!({"status": "cancelled"})), PollOutcome::Report(Report::Cancelled));
        // Unknown extra fields are ignored; null optional fields mean absent.
        assert_eq!(p(json!({"progress": 0.5, "error": null, "result_artifact": null})), running(None));
    }

    #[test]
    fn async_status_poll_after_invalid_is_absent() {
        for bad in [json!(0), json!(-1), json!(-0.5), json!("10"), json!(null), json!(true), json!([5])] {
            assert_eq!(
                parse_async_status(&status_answer(json!({"poll_after_seconds": bad})), "r-1"),
                running(None),
                "{bad}"
            );
        }
    }

    #[test]
    fn async_status_bad_answers_are_permanent() {
        let p = |v: Value| permanent_message(parse_async_status(&v, "r-1"));
        assert!(p(json!("running")).contains("a string instead of a JSON object"));
        assert!(p(json!([1])).contains("an array instead of a JSON object"));
        assert!(p(json!(null)).contains("null instead of a JSON object"));
        assert!(p(json!({"task_id": "r-1"})).contains("has no status"));
        assert!(p(json!({"task_id": "r-1", "status": 3})).contains("status in the status answer is a number"));
        let m = p(json!({"task_id": "r-1", "status": "done"}));
        assert!(m.contains("unknown status \"done\""), "{m}");
        assert!(p(json!({"status": "running"})).contains("has no task_id"));
        assert!(p(json!({"task_id": 1, "status": "running"})).contains("task_id in the status answer is a number"));
        let m = p(json!({"task_id": "r-2", "status": "running"}));
        assert!(m.contains("\"r-2\"") && m.contains("\"r-1\""), "{m}");
        assert!(p(status_answer(json!({"error": {"msg": "x"}}))).contains("error in the status answer is an object"));
        assert!(p(status_answer(json!({"status": "input_required"}))).contains("without an input_required payload"));
        assert!(p(json!({"task_id": "r-1", "status": "input_required", "input_required": null}))
            .contains("without an input_required payload"));
        for m in [
            p(json!({"task_id": "r-1", "status": "done"})),
            p(json!({"task_id": "r-2", "status": "running"})),
            p(json!({"status": "running"})),
        ] {
            assert!(m.starts_with("protocol violation"), "{m}");
        }
    }

    #[test]
    fn async_status_task_not_found_is_permanent() {
        let m = permanent_message(parse_async_status(
            &json!({"task_id": "r-1", "status": "failed", "error_code": "task_not_found", "error": "no such task"}),
            "r-1",
        ));
        assert!(m.contains("task_not_found") && m.contains("no such task"), "{m}");
        let m = permanent_message(parse_async_status(&json!({"error_code": "task_not_found"}), "r-1"));
        assert!(m.contains("task_not_found"), "{m}");
        let mut t = working();
        t.on_poll(parse_async_status(&json!({"error_code": "task_not_found"}), "r-1"), &cfg(), T0 + 6 * S);
        assert_eq!(t.status, Status::Failed);
    }

    #[test]
    fn async_status_json_payloads_limited_to_64_kib() {
        // {"q":"…"} is 8 bytes plus the string.
        let fits = json!({"q": "x".repeat(MAX_JSON_BYTES - 8)});
        assert_eq!(fits.to_string().len(), MAX_JSON_BYTES);
        let over = json!({"q": "x".repeat(MAX_JSON_BYTES - 7)});
        let p = |extra: Value| parse_async_status(&status_answer(extra), "r-1");

        assert_eq!(
            p(json!({"status": "input_required", "input_required": fits.clone()})),
            PollOutcome::Report(Report::InputRequired { input_required: fits.clone(), poll_after_s: None })
        );
        let m = permanent_message(p(json!({"status": "input_required", "input_required": over.clone()})));
        assert!(m.contains("input_required") && m.contains("65537") && m.contains("65536"), "{m}");

        match p(json!({"status": "completed", "result": 1, "result_artifact": fits.clone()})) {
            PollOutcome::Report(Report::Completed { result_artifact: Some(a), .. }) => assert_eq!(a, fits),
            other => panic!("{other:?}"),
        }
        let m = permanent_message(p(json!({"status": "completed", "result": 1, "result_artifact": over})));
        assert!(m.contains("result_artifact"), "{m}");

        // A big result is fine here: the state machine keeps a preview of it.
        let big = json!("x".repeat(100_000));
        assert_eq!(p(json!({"status": "completed", "result": big.clone()})), completed(big));
    }

    // --- parse_async_submit ---------------------------------------------------------------------

    #[test]
    fn async_submit_answers() {
        assert_eq!(parse_async_submit(&json!({"task_id": "remote-123", "status": "running"})), Ok("remote-123".into()));
        assert_eq!(
            parse_async_submit(&json!({"task_id": "a".repeat(255), "status": "running", "eta": 5})),
            Ok("a".repeat(255))
        );

        let bad = [
            (json!("remote-123"), "instead of a JSON object"),
            (json!({"task_id": "r"}), "no status"),
            (json!({"task_id": "r", "status": "completed"}), "\"completed\" instead of \"running\""),
            (json!({"task_id": "r", "status": 1}), "status in the submit answer"),
            (json!({"status": "running"}), "no task_id"),
            (json!({"task_id": 7, "status": "running"}), "a number instead of a string"),
            (json!({"task_id": "", "status": "running"}), "empty"),
            (json!({"task_id": "a".repeat(256), "status": "running"}), "256 characters"),
        ];
        for (v, want) in bad {
            let e = parse_async_submit(&v).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }

    // --- parse_dify_run --------------------------------------------------------------------------

    // --- Persistence, wake-ups and expiry ------------------------------------------------------

    #[test]
    fn task_state_serde_round_trip() {
        let c = cfg();
        let mut t = working();
        t.on_poll(transient("slow"), &c, T0 + 6 * S);
        t.on_poll(input(Some(90.0)), &c, T0 + 12 * S);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["status"], "input_required");
        assert_eq!(json["remote_id"], "r-1");
        let back: TaskState = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);

        let mut done = working();
        done.request_cancel(T0 + S).unwrap();
        done.on_cancel(transient("x"), &c, T0 + 2 * S);
        done.on_cancel(
            PollOutcome::Report(Report::Completed {
                result: json!("y".repeat(70_000)),
                result_artifact: Some(json!({"uri": "u", "mime_type": "m"})),
            }),
            &c,
            T0 + 9 * S,
        );
        let text = serde_json::to_string(&done).unwrap();
        let back: TaskState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, done);
        assert!(back.result_truncated);
        assert_eq!(back.status, Status::Completed);
    }

    #[test]
    fn next_wake_and_expiry() {
        let c = cfg();
        let mut t = working();
        assert_eq!(t.next_wake_ms(), Some(T0 + 5 * S));
        t.on_poll(running(Some(30.0)), &c, T0 + 6 * S);
        assert_eq!(t.next_wake_ms(), Some(T0 + 36 * S));
        assert!(!t.deletable(u64::MAX));

        // The earlier of a poll and a cancel, should both ever be set.
        let mut both = t.clone();
        both.next_cancel_at_ms = Some(T0 + 10 * S);
        assert_eq!(both.next_wake_ms(), Some(T0 + 10 * S));
        both.next_cancel_at_ms = Some(T0 + 100 * S);
        assert_eq!(both.next_wake_ms(), Some(T0 + 36 * S));

        t.request_cancel(T0 + 7 * S).unwrap();
        assert_eq!(t.next_wake_ms(), Some(T0 + 7 * S));
        t.on_cancel(PollOutcome::Report(Report::Cancelled), &c, T0 + 8 * S);
        let expiry = T0 + TTL;
        assert_eq!(t.next_wake_ms(), Some(expiry));
        assert!(!t.deletable(expiry - 1));
        assert!(t.deletable(expiry));
        assert!(t.deletable(expiry + 1));

        let mut forever = TaskState::new(T0, u64::MAX);
        forever.finished(Report::Cancelled, &c, T0);
        assert_eq!(forever.next_wake_ms(), Some(u64::MAX));
        assert!(!forever.deletable(u64::MAX - 1));
    }

    // --- The TTL, counted from the creation ---------------------------------------------------

    #[test]
    fn a_running_task_wakes_at_its_ttl_and_is_ended_then_with_its_run_cancelled() {
        let c = cfg();
        let mut t = TaskState::new(T0, 60 * S);
        t.submitted("r-1", &c, T0).unwrap();
        // Polled every 5 s: the poll is the next wake while it comes first ...
        assert_eq!(t.next_wake_ms(), Some(T0 + 5 * S));
        // ... and the TTL's end is one even when a backend's hint pushes the poll past it.
        t.on_poll(running(Some(600.0)), &c, T0 + 10 * S);
        assert_eq!(t.next_wake_ms(), Some(T0 + 60 * S));

        assert!(!t.end_if_ttl_ran_out(T0 + 60 * S - 1));
        assert_eq!(t.status, Status::Working);
        assert!(t.end_if_ttl_ran_out(T0 + 60 * S));
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.error_code.as_deref(), Some("ttl_expired"));
        let msg = t.status_message(&c).unwrap();
        assert!(msg.contains("ttl of 60000 ms (counted from its creation)"), "{msg}");
        assert!(t.request_cancel(T0 + 61 * S).is_err(), "a task its TTL ended is final");
        // Once ended, the TTL does not end it again.
        assert!(!t.end_if_ttl_ran_out(T0 + 62 * S));

        // The backend's run is cancelled at once, retried with backoff on failure ...
        assert_eq!(t.due_action(T0 + 60 * S), Action::Cancel);
        assert_eq!(t.next_wake_ms(), Some(T0 + 60 * S));
        t.on_cancel(transient("HTTP 500"), &c, T0 + 61 * S);
        assert_eq!(t.status, Status::Failed, "a cancel answer does not change how the task ended");
        assert_eq!(t.due_action(T0 + 65 * S), Action::None);
        assert_eq!(t.due_action(T0 + 66 * S), Action::Cancel);
        assert_eq!(t.next_wake_ms(), Some(T0 + 66 * S));
        t.on_cancel(PollOutcome::Report(Report::Cancelled), &c, T0 + 67 * S);
        assert_eq!((t.status, t.cancel_attempts, t.next_cancel_at_ms), (Status::Failed, 2, None));
        assert!(t.error.as_deref().unwrap().contains("ttl"));
        // ... and the task is kept for the grace after it ended, then deleted.
        assert_eq!(t.due_action(u64::MAX), Action::None);
        assert_eq!(t.next_wake_ms(), Some(T0 + 60 * S + TTL_GRACE_MS));
        assert!(!t.deletable(T0 + 60 * S + TTL_GRACE_MS - 1));
        assert!(t.deletable(T0 + 60 * S + TTL_GRACE_MS));
    }

    #[test]
    fn the_grace_setting_sets_when_a_task_its_ttl_ended_is_deleted() {
        assert_eq!(grace_ms_setting(None), TTL_GRACE_MS);
        assert_eq!(grace_ms_setting(Some("")), TTL_GRACE_MS);
        assert_eq!(grace_ms_setting(Some("soon")), TTL_GRACE_MS);
        assert_eq!(grace_ms_setting(Some(" 3 ")), 3 * S);
        assert_eq!(grace_ms_setting(Some("0")), 0);
        assert_eq!(grace_ms_setting(Some("99999999999999999999")), TTL_GRACE_MS, "not a u64");
        assert_eq!(grace_ms_setting(Some("86400")), MAX_GRACE_MS, "bounded");

        let mut t = TaskState::new(T0, 60 * S).with_grace_ms(3 * S);
        t.submitted("r-1", &cfg(), T0).unwrap();
        assert!(t.end_if_ttl_ran_out(T0 + 60 * S));
        t.on_cancel(PollOutcome::Report(Report::Cancelled), &cfg(), T0 + 60 * S);
        assert_eq!(t.next_wake_ms(), Some(T0 + 63 * S));
        assert!(!t.deletable(T0 + 63 * S - 1));
        assert!(t.deletable(T0 + 63 * S));
        // Kept with the task: the grace it was created with, after a restart too.
        let back: TaskState = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(back.grace_ms, 3 * S);
        // A task stored before the setting existed has the default.
        let mut old = serde_json::to_value(&t).unwrap();
        old.as_object_mut().unwrap().remove("grace_ms");
        let old: TaskState = serde_json::from_value(old).unwrap();
        assert_eq!(old.grace_ms, TTL_GRACE_MS);
        assert!(!old.deletable(T0 + 60 * S + TTL_GRACE_MS - 1));
    }

    #[test]
    fn a_backend_that_never_confirms_the_ttl_cancel_does_not_keep_the_task() {
        let c = cfg();
        let mut t = TaskState::new(T0, 60 * S);
        t.submitted("r-1", &c, T0).unwrap();
        assert!(t.end_if_ttl_ran_out(T0 + 70 * S));
        let mut now = T0 + 70 * S;
        for _ in 0..20 {
            let Some(wake) = t.next_wake_ms() else { break };
            now = wake.max(now);
            if t.deletable(now) {
                break;
            }
            assert_eq!(t.due_action(now), Action::Cancel);
            t.on_cancel(transient("unreachable"), &c, now);
        }
        assert!(t.deletable(now), "deleted within the grace although every cancel failed");
        assert_eq!(now, T0 + 70 * S + TTL_GRACE_MS);
        assert_eq!(t.cancel_attempts, 3, "tried at 0, 5 and 15 s into the grace");
        // A cancel the backend can never confirm is not retried.
        let mut t = TaskState::new(T0, 60 * S);
        t.submitted("r-1", &c, T0).unwrap();
        t.end_if_ttl_ran_out(T0 + 60 * S);
        t.on_cancel(PollOutcome::Permanent("task_not_found".into()), &c, T0 + 61 * S);
        assert_eq!((t.status, t.next_cancel_at_ms), (Status::Failed, None));
        assert_eq!(t.next_wake_ms(), Some(T0 + 60 * S + TTL_GRACE_MS));
    }

    #[test]
    fn the_ttl_ends_a_task_in_any_unfinished_state() {
        let c = cfg();
        // Not yet submitted (no remote run): ended, nothing to cancel.
        let mut t = TaskState::new(T0, 60 * S);
        assert!(t.end_if_ttl_ran_out(T0 + 60 * S));
        assert_eq!((t.status, t.next_cancel_at_ms), (Status::Failed, None));
        assert!(t.error.as_deref().unwrap().contains("it was stopped"));
        // Waiting for input.
        let mut t = TaskState::new(T0, 60 * S);
        t.submitted("r-1", &c, T0).unwrap();
        t.on_poll(
            PollOutcome::Report(Report::InputRequired { input_required: json!({}), poll_after_s: None }),
            &c,
            T0 + S,
        );
        assert!(t.end_if_ttl_ran_out(T0 + 60 * S));
        assert_eq!((t.status, t.input_required.clone()), (Status::Failed, None));
        assert_eq!(t.due_action(T0 + 60 * S), Action::Cancel);
        // Cancelling on request, the cancel failing: the TTL still ends it.
        let mut t = TaskState::new(T0, 60 * S);
        t.submitted("r-1", &c, T0).unwrap();
        t.request_cancel(T0 + S).unwrap();
        t.on_cancel(transient("HTTP 503"), &c, T0 + 2 * S);
        assert!(t.end_if_ttl_ran_out(T0 + 60 * S));
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.due_action(T0 + 60 * S), Action::Cancel);
        // A finished task is not touched, and goes at the end of its TTL, not TTL after its end.
        let mut t = working();
        t.on_poll(completed(json!(1)), &c, T0 + 10 * S);
        assert!(!t.end_if_ttl_ran_out(T0 + TTL));
        assert_eq!(t.status, Status::Completed);
        assert_eq!(t.next_wake_ms(), Some(T0 + TTL));
        // An answer that arrives after the TTL's end (a run longer than the TTL) is kept for the grace.
        let mut t = TaskState::new(T0, 60 * S);
        t.finished(Report::Completed { result: json!(1), result_artifact: None }, &c, T0 + 90 * S);
        assert_eq!(t.next_wake_ms(), Some(T0 + 90 * S + TTL_GRACE_MS));
    }
}
