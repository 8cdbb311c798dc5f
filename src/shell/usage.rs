//! Usage metrics in the Worker: each finished `tools/call` is added to this isolate's aggregate
//! (`pure::usage`), and the aggregate goes to D1 in one batch at most once per
//! `USAGE_FLUSH_SECONDS` (default 60) per isolate, from `ctx.wait_until` of whichever MCP request
//! finds it due: no call waits for a storage write. Old rows are pruned in a flush at most once
//! an hour per isolate. The console's usage route flushes this isolate's share before it reads.
//! The call log (`shell::call_log`) is written in the same batch.

use std::cell::RefCell;

use crate::runtime::{Context, Db, Env, SqlValue};
use serde_json::Value;

use crate::pure::call_log::{self, CallerKind};
use crate::pure::client_auth::AuthMode;
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::{self, CallPlan, RequestHeaders, Step};
use crate::pure::mcp::tools::{tools_with, Upstreams};
use crate::pure::usage::{self, Aggregate, Arg, Call, Query, Row, Statement, UNKNOWN_TOOL};

use crate::shell::platform;

const PRUNE_EVERY_MS: u64 = 3_600_000;

#[derive(Default)]
struct State {
    pending: Aggregate,
    /// When this isolate last flushed (or first looked): flushes are at least an interval apart.
    last_flush_ms: Option<u64>,
    last_prune_ms: Option<u64>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// `USAGE_FLUSH_SECONDS`: how often an isolate writes its counts (0: on every request, tests).
/// Read once per isolate (`platform::settings`): every MCP request asks.
pub fn flush_seconds(env: &Env) -> u64 {
    crate::shell::platform::settings(env).usage_flush_seconds
}

/// A `tools/call` being served: recorded when it finishes (or, if dropped unfinished, as a
/// call whose client went away), in the usage metrics and in the call log.
pub struct Ticket {
    server_id: String,
    tool: String,
    caller: String,
    /// Who the call log names.
    log_caller: (CallerKind, String),
    /// The arguments as the call log keeps them (servers that keep payloads only).
    arguments: Option<String>,
    keep_result: bool,
    started_ms: u64,
    streamed: bool,
    done: bool,
}

/// Who the call log names for a call of `def`: the authenticated identity (a client key's
/// name, an OAuth subject) of a server that authenticates, else how the client named itself.
fn log_caller(def: &ServerDefinition, identity: Option<&str>, client: String) -> (CallerKind, String) {
    match (def.auth.mode, identity) {
        (AuthMode::Key, Some(name)) => (CallerKind::Key, name.to_string()),
        (AuthMode::OAuth, Some(sub)) => (CallerKind::OAuth, sub.to_string()),
        _ => (CallerKind::Client, client),
    }
}

/// A ticket for `msg` when it is a `tools/call` request that reached the server; `None` for
/// every other message (only tool calls are counted).
pub fn ticket(
    msg: &Value,
    step: &Step,
    def: &ServerDefinition,
    upstreams: &Upstreams,
    h: &RequestHeaders<'_>,
) -> Option<Ticket> {
    if msg.get("method").and_then(Value::as_str) != Some("tools/call") || msg.get("id").is_none() {
        return None;
    }
    let name = msg.get("params").and_then(|p| p.get("name")).and_then(Value::as_str);
    let (tool, caller) = match step {
        // A planned call matched one of the server's tools by this very name.
        Step::Call(plan) | Step::CreateTask { plan, .. } => {
            (name.unwrap_or(UNKNOWN_TOOL).to_string(), plan.user.clone())
        }
        Step::Reply { .. } => {
            // Refused before the call (unknown tool, bad arguments): client input becomes a
            // series name only when it is a tool of the server.
            let known = name.filter(|n| tools_with(def, upstreams).iter().any(|t| t.name == *n));
            (known.unwrap_or(UNKNOWN_TOOL).to_string(), server::caller_of(def, msg, h))
        }
        // Only tool calls are counted.
        _ => return None,
    };
    Some(Ticket::new(def, msg, tool, caller, log_caller(def, h.identity, server::client_of(msg, h))))
}

/// The ticket of a planned call (a streamed one: the step is consumed by the call).
pub fn ticket_of_plan(msg: &Value, plan: &CallPlan, def: &ServerDefinition) -> Ticket {
    let name = msg.get("params").and_then(|p| p.get("name")).and_then(Value::as_str);
    let identity = (def.auth.mode != AuthMode::None).then_some(plan.user.as_str());
    let caller = log_caller(def, identity, plan.client_name.clone());
    Ticket::new(def, msg, name.unwrap_or(UNKNOWN_TOOL).to_string(), plan.user.clone(), caller)
}

impl Ticket {
    fn new(def: &ServerDefinition, msg: &Value, tool: String, caller: String, log: (CallerKind, String)) -> Ticket {
        let keep = def.call_log_payloads;
        let arguments = msg.get("params").and_then(|p| p.get("arguments"));
        Ticket {
            server_id: def.server_id.clone(),
            tool,
            caller,
            log_caller: log,
            arguments: if keep { arguments.map(call_log::payload_text) } else { None },
            keep_result: keep,
            started_ms: platform::now_ms(),
            streamed: false,
            done: false,
        }
    }

    /// The call will answer as an SSE stream.
    pub fn streamed(mut self) -> Ticket {
        self.streamed = true;
        self
    }

    /// A call from the console's tool playground: the call log names the console user.
    pub fn by_console(mut self, actor: &str) -> Ticket {
        self.log_caller = (CallerKind::Console, actor.to_string());
        self
    }

    /// Records the call with its final JSON-RPC response.
    pub fn finish(mut self, response: &Value) {
        self.record(Some(response));
    }

    /// `None`: the client went away before the result.
    fn record(&mut self, response: Option<&Value>) {
        if self.done {
            return;
        }
        self.done = true;
        let now = platform::now_ms();
        let (status, failure) = match response {
            Some(r) => call_log::Status::of_response(r),
            None => (call_log::Status::Gone, Some("the client went away before the result".to_string())),
        };
        let latency_ms = now.saturating_sub(self.started_ms);
        let call = Call {
            server_id: &self.server_id,
            tool: &self.tool,
            at_ms: now,
            latency_ms,
            streamed: self.streamed,
            caller: &self.caller,
            failure: failure.as_deref(),
        };
        STATE.with(|s| s.borrow_mut().pending.record(&call));
        let (caller_kind, caller) = std::mem::replace(&mut self.log_caller, (CallerKind::Client, String::new()));
        crate::shell::call_log::record(call_log::Entry {
            server_id: std::mem::take(&mut self.server_id),
            at_ms: now,
            tool: std::mem::take(&mut self.tool),
            caller_kind,
            caller,
            status,
            duration_ms: latency_ms,
            streamed: self.streamed,
            error: failure,
            arguments: self.arguments.take(),
            result: if self.keep_result { response.and_then(call_log::result_text) } else { None },
        });
    }
}

impl Drop for Ticket {
    /// A streamed call whose client went away before the result: counted as a failure.
    fn drop(&mut self) {
        self.record(None);
    }
}

/// Flushes this isolate's counts off the response path when the interval has passed: checked
/// on every MCP request (no timers).
pub fn maybe_flush(env: &Env, ctx: &Context) {
    let interval_ms = flush_seconds(env) * 1000;
    let Some(plan) = take_due(platform::now_ms(), interval_ms) else { return };
    let env = env.clone();
    ctx.wait_until(async move {
        if let Err(e) = run(&env, plan).await {
            crate::shell::log::error(&format!("writing usage metrics: {e}"));
        }
    });
}

/// Flushes this isolate's counts now (the console's usage route, before it reads).
pub async fn flush_now(env: &Env) -> crate::runtime::Result<()> {
    match take_due(platform::now_ms(), 0) {
        Some(plan) => run(env, plan).await,
        None => Ok(()),
    }
}

/// The statements of a flush when one is due, the aggregate taken; `None` when not due or
/// there is nothing to write.
fn take_due(now_ms: u64, interval_ms: u64) -> Option<Vec<Statement>> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let last = *s.last_flush_ms.get_or_insert(now_ms);
        let prune_due = s.last_prune_ms.is_none_or(|p| now_ms >= p + PRUNE_EVERY_MS);
        let calls_wait = !crate::shell::call_log::is_empty();
        if now_ms < last + interval_ms || (s.pending.is_empty() && !calls_wait && !prune_due) {
            return None;
        }
        s.last_flush_ms = Some(now_ms);
        let pending = std::mem::take(&mut s.pending);
        if pending.dropped > 0 {
            crate::shell::log::error(&format!(
                "usage metrics: {} calls not counted (more than {} series between flushes)",
                pending.dropped,
                crate::pure::usage::MAX_SERIES
            ));
        }
        let prune_at = prune_due.then(|| {
            s.last_prune_ms = Some(now_ms);
            (now_ms / 1000) as i64
        });
        let mut plan = pending.flush_plan(prune_at);
        // The call log goes in the same batch: one write for both, never one per call.
        let calls = crate::shell::call_log::take();
        if calls.dropped > 0 {
            crate::shell::log::error(&format!(
                "call log: {} calls not kept (more than {} waited between flushes)",
                calls.dropped,
                crate::pure::call_log::MAX_PENDING
            ));
        }
        plan.extend(calls.flush_plan());
        (!plan.is_empty()).then_some(plan)
    })
}

async fn run(env: &Env, plan: Vec<Statement>) -> crate::runtime::Result<()> {
    let db = env.d1(platform::D1);
    let statements = plan.iter().map(bind).collect();
    // One batch: D1 runs it as one transaction, so a flush is counted whole or not at all.
    db.batch(statements).await?;
    Ok(())
}

/// A planned statement (`pure::usage`) as the runtime runs it.
pub fn bind(s: &Statement) -> crate::runtime::Statement {
    let args = s
        .args
        .iter()
        .map(|a| match a {
            Arg::Text(t) => SqlValue::Text(t.clone()),
            Arg::Int(n) => SqlValue::Int(*n),
        })
        .collect();
    crate::runtime::Statement::new(s.sql.clone(), args)
}

/// The stored rows of `server_id` in the query's range, and its last failures (newest first).
pub async fn read(db: &Db, server_id: &str, q: &Query) -> crate::runtime::Result<(Vec<Row>, Vec<Value>)> {
    let select = Statement {
        sql: usage::select_sql(q.step),
        args: vec![Arg::Text(server_id.to_string()), Arg::Int(q.from), Arg::Int(q.to)],
    };
    let failures = Statement { sql: usage::FAILURES_SQL.to_string(), args: vec![Arg::Text(server_id.to_string())] };
    let rows: Vec<Value> = db.all(bind(&select)).await?;
    let failed: Vec<Value> = db.all(bind(&failures)).await?;
    Ok((rows.iter().filter_map(Row::from_json).collect(), failed.iter().map(usage::failure_json).collect()))
}

/// Forgets this isolate's unflushed counts (an isolate evicted: they are lost, as in the runtime).
pub fn forget_pending() {
    STATE.with(|s| *s.borrow_mut() = State::default());
}
