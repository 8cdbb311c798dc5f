//! Usage metrics in the Worker: each finished `tools/call` is added to this isolate's aggregate
//! (`pure::usage`), and the aggregate goes to D1 in one batch at most once per
//! `USAGE_FLUSH_SECONDS` (default 60) per isolate, from `ctx.wait_until` of whichever MCP request
//! finds it due: no call waits for a storage write. Old rows are pruned in a flush at most once
//! an hour per isolate. The console's usage route flushes this isolate's share before it reads.

use std::cell::RefCell;

use crate::runtime::{Context, Db, Env, SqlValue};
use serde_json::Value;

use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::{self, CallPlan, RequestHeaders, Step};
use crate::pure::mcp::tools::{tools_with, Upstreams};
use crate::pure::usage::{self, failure_of, Aggregate, Arg, Call, Query, Row, Statement, UNKNOWN_TOOL};

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
/// call whose client went away).
pub struct Ticket {
    server_id: String,
    tool: String,
    caller: String,
    started_ms: u64,
    streamed: bool,
    done: bool,
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
    Some(Ticket {
        server_id: def.server_id.clone(),
        tool,
        caller,
        started_ms: platform::now_ms(),
        streamed: false,
        done: false,
    })
}

/// The ticket of a planned call (a streamed one: the step is consumed by the call).
pub fn ticket_of_plan(msg: &Value, plan: &CallPlan, def: &ServerDefinition) -> Ticket {
    let name = msg.get("params").and_then(|p| p.get("name")).and_then(Value::as_str);
    Ticket {
        server_id: def.server_id.clone(),
        tool: name.unwrap_or(UNKNOWN_TOOL).to_string(),
        caller: plan.user.clone(),
        started_ms: platform::now_ms(),
        streamed: false,
        done: false,
    }
}

impl Ticket {
    /// The call will answer as an SSE stream.
    pub fn streamed(mut self) -> Ticket {
        self.streamed = true;
        self
    }

    /// Records the call with its final JSON-RPC response.
    pub fn finish(mut self, response: &Value) {
        self.record(failure_of(response).as_deref());
    }

    fn record(&mut self, failure: Option<&str>) {
        if self.done {
            return;
        }
        self.done = true;
        let now = platform::now_ms();
        let call = Call {
            server_id: &self.server_id,
            tool: &self.tool,
            at_ms: now,
            latency_ms: now.saturating_sub(self.started_ms),
            streamed: self.streamed,
            caller: &self.caller,
            failure,
        };
        STATE.with(|s| s.borrow_mut().pending.record(&call));
    }
}

impl Drop for Ticket {
    /// A streamed call whose client went away before the result: counted as a failure.
    fn drop(&mut self) {
        self.record(Some("the client went away before the result"));
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
        if now_ms < last + interval_ms || (s.pending.is_empty() && !prune_due) {
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
        let plan = pending.flush_plan(prune_at);
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
