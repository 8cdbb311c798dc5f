//! Streamed tool calls: the backend's SSE answer is read chunk by chunk, turned into progress
//! and log notifications as it arrives, and closed with the final JSON-RPC response. Memory is
//! bounded by one SSE event plus what the final result needs, whatever the stream's length.

use std::time::Duration;

use crate::runtime::{ByteStream, Context, Env, Headers, InvalidHeader, Method, Response};
use futures::channel::mpsc::{unbounded, UnboundedReceiver};
use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::StreamExt;
use serde_json::Value;

use crate::pure::backend::dify::call as dify_call;
use crate::pure::backend::dify::stream::DifyStream;
use crate::pure::backend::dify::{conversation, refusal};
use crate::pure::backend::http_tool::call as http_tool;
use crate::pure::backend::http_tool::stream::HttpToolStream;
use crate::pure::backend::stream_reader::StreamReader;
use std::rc::Rc;

use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::backend::run_record::RunRecord;
use crate::pure::mcp::prepared::Prepared;
use crate::pure::mcp::server::{self, CallPlan, CallRequest, Progress};
use crate::pure::outcome::{Outcome, Signal};
use crate::pure::sse::{write_comment, write_json_event, SseError, SseParser};

/// Longest silence toward the client: a comment goes out after it, which keeps intermediaries
/// from closing the stream and lets the runtime notice a client that went away (a disconnect
/// is only seen on a write), so that the backend run is stopped promptly.
const KEEPALIVE_MS: u64 = 1000;
/// How long a streamed call runs before its cancel record is also written to KV. A cancel
/// landing on another isolate sooner is missed (the run still stops when the client closes
/// its stream); a cancel on this isolate always finds it.
const SHARE_RUN_AFTER_MS: u64 = 2000;

use crate::runtime::timer::Timer;
use crate::shell::outbound::{self, SendError};
use crate::shell::VERSION;

/// Where and how to call an app's backend, resolved from its settings for one call.
#[derive(Clone)]
pub struct Target {
    pub app_name: String,
    pub base_url: String,
    pub api_key: String,
    pub first_byte: Duration,
    pub idle: Duration,
    pub total: Duration,
    pub max_result_bytes: usize,
    /// The setting behind `total`, named when it runs out.
    pub total_setting: &'static str,
}

enum Phase {
    Start,
    Reading(ByteStream),
    /// An upstream MCP call running beside the relay: its notifications and response arrive here.
    Relaying(UnboundedReceiver<Relayed>),
    Finished,
}

/// What an upstream MCP call running beside the relay sends it.
pub enum Relayed {
    /// The call went out as request `request_id` on this Streamable HTTP session (for
    /// `notifications/cancelled` from any isolate).
    Started { request_id: u64, session: Option<Value> },
    /// A notification for the client (already filtered by what it asked for).
    Note(Value),
    /// The final JSON-RPC response.
    Done(Value),
    /// The record that lets a `notifications/cancelled` stop the run (an async tool's run).
    Run(RunRecord),
    /// The backend answered (a status check): the call is not idle, though nothing is sent.
    Alive,
}

/// How a call answers, once it has something to send ([`CallStream::open`]).
pub enum Opening {
    /// Over at once: one JSON-RPC response.
    Whole(Value),
    /// Streaming: the SSE stream's first piece, the rest to come.
    Stream(Box<CallStream>, String),
}

/// A wait for the backend's next piece, cut short by the keep-alive tick.
enum Wait<T> {
    Item(T),
    Tick,
}

/// One streamed call from request to final response.
pub struct CallStream {
    plan: CallPlan,
    target: Target,
    phase: Phase,
    parser: SseParser,
    signals: Vec<Signal>,
    /// The reader of a streamed HTTP answer, by the request's kind (none for work that runs
    /// beside the relay: an upstream MCP call, a polled async tool).
    interp: Option<StreamReader>,
    progress: Progress,
    deadline_ms: u64,
    /// When the backend last sent a chunk (idle timeout) and we last wrote (keep-alive).
    last_chunk_ms: u64,
    last_write_ms: u64,
    final_response: Option<Value>,
    /// Whether the final response went out in a piece of its own (nothing before it there).
    final_alone: bool,
    cancel: CancelGuard,
    env: Env,
    /// Whether the run's task id was recorded for `notifications/cancelled`.
    registered: bool,
    /// The record, until it is also written to KV (calls that end sooner never write it).
    unshared: Option<String>,
    started_ms: u64,
    /// Counted in usage metrics when the final response goes out (a client call only).
    usage: Option<crate::shell::usage::Ticket>,
    /// Wakes a wait for the keep-alive, idle and total limits.
    timer: Timer,
}

impl CallStream {
    /// Records the call in usage metrics at its end (dropped unfinished: the client went away).
    pub fn with_usage(mut self, ticket: Option<crate::shell::usage::Ticket>) -> CallStream {
        self.usage = ticket;
        self
    }

    /// Prepares the call; `ctx` keeps a watcher alive that stops the backend run if the client
    /// goes away before the end (best effort, off the response path).
    pub fn new(plan: CallPlan, target: Target, env: &Env, ctx: &Context) -> CallStream {
        let stoppable = match &plan.request {
            CallRequest::Dify { mode, .. } => Some(*mode),
            CallRequest::HttpTool { .. } | CallRequest::Mcp { .. } => None,
        };
        let mut call = CallStream::detached(plan, target, env);
        call.registered = false;
        // Only a Dify run has a stop endpoint (and a task id to stop it by).
        if let Some(mode) = stoppable {
            let (tx, rx) = oneshot::channel::<String>();
            let (watch_env, user) = (env.clone(), call.plan.user.clone());
            let t = &call.target;
            let (base, key, name) = (t.base_url.clone(), t.api_key.clone(), t.app_name.clone());
            ctx.wait_until(async move {
                if let Ok(task_id) = rx.await {
                    stop_run(&watch_env, &base, &key, mode, &task_id, &user, &name).await;
                }
            });
            call.cancel.tx = Some(tx);
        }
        call
    }

    /// A call with no client connection to lose (inside a task's Durable Object): nothing
    /// watches for a disconnect.
    pub fn detached(plan: CallPlan, target: Target, env: &Env) -> CallStream {
        let interp = match &plan.request {
            CallRequest::Dify { mode, body } => {
                Some(StreamReader::Dify(DifyStream::new(*mode, target.max_result_bytes).answering(body)))
            }
            CallRequest::HttpTool { .. } => Some(StreamReader::Tool(HttpToolStream::new(&target.app_name))),
            CallRequest::Mcp { .. } => None,
        };
        CallStream::reading(plan, target, env, interp)
    }

    fn reading(plan: CallPlan, target: Target, env: &Env, interp: Option<StreamReader>) -> CallStream {
        let now = crate::shell::platform::now_ms();
        CallStream {
            interp,
            deadline_ms: now + target.total.as_millis() as u64,
            last_chunk_ms: now,
            last_write_ms: now,
            plan,
            target,
            phase: Phase::Start,
            parser: SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES),
            signals: Vec::new(),
            progress: Progress::default(),
            final_response: None,
            final_alone: false,
            cancel: CancelGuard { tx: None, task_id: None, upstream_abort: None },
            env: env.clone(),
            registered: true,
            unshared: None,
            started_ms: now,
            usage: None,
            timer: Timer::default(),
        }
    }

    /// An upstream MCP call through the same relay: keep-alives, the timeouts, and
    /// cancellation (a client that goes away, or a timeout, cancels the upstream request; so
    /// does a `notifications/cancelled` from the client, through the recorded request). The call
    /// starts now, kept alive by `ctx` when there is a client connection to lose.
    pub fn upstream(
        plan: CallPlan,
        target: Target,
        served: Rc<Prepared>,
        incoming: Vec<(String, String)>,
        env: &Env,
        ctx: Option<&Context>,
    ) -> CallStream {
        let (call_plan, call_env) = (plan.clone(), env.clone());
        CallStream::beside(plan, target, env, ctx, move |send, abort| async move {
            let response = crate::shell::backend::mcp::call::call(
                &call_plan,
                &served.def,
                &call_env,
                &incoming,
                &mut |request_id, session| send(Relayed::Started { request_id, session }),
                &mut |n| send(Relayed::Note(n)),
                abort,
            )
            .await;
            // A relay that went away dropped its receiver; the call has ended either way.
            send(Relayed::Done(response));
        })
    }

    /// Work that runs beside the relay and reports to it (an async HTTP tool polled to its end,
    /// `polled_call`): the relay's timeouts and keep-alives apply, and `work` gets a sender for
    /// what it has and a future that resolves when the relay gives up (the timeout, the client
    /// gone), upon which it stops. Kept alive by `ctx` when there is a client connection to lose.
    pub fn beside<F: std::future::Future<Output = ()> + 'static>(
        plan: CallPlan,
        target: Target,
        env: &Env,
        ctx: Option<&Context>,
        work: impl FnOnce(Box<dyn Fn(Relayed)>, futures::future::LocalBoxFuture<'static, ()>) -> F,
    ) -> CallStream {
        let mut call = CallStream::reading(plan, target, env, None);
        call.registered = false;
        let (tx, rx) = unbounded::<Relayed>();
        let (abort_tx, abort_rx) = oneshot::channel::<()>();
        call.cancel.upstream_abort = Some(abort_tx);
        call.phase = Phase::Relaying(rx);
        // A dropped sender (the call completed) is not a cancellation.
        let abort = Box::pin(async move {
            if abort_rx.await.is_err() {
                futures::future::pending::<()>().await;
            }
        });
        let send = Box::new(move |r: Relayed| {
            let _ = tx.unbounded_send(r);
        });
        let work = work(send, abort);
        match ctx {
            Some(ctx) => ctx.wait_until(work),
            None => crate::runtime::spawn(work),
        }
        call
    }

    /// The SSE response: notifications as they happen, the final response last.
    pub fn into_response(self, headers: Headers) -> crate::runtime::Result<Response> {
        Ok(Response::from_stream(Box::pin(self.into_chunks())).with_headers(headers))
    }

    fn into_chunks(self) -> impl futures::Stream<Item = crate::runtime::Result<Vec<u8>>> {
        futures::stream::unfold(self, |mut call| async move {
            call.next_chunk().await.map(|text| (Ok::<Vec<u8>, crate::runtime::Error>(text.into_bytes()), call))
        })
    }

    /// Runs the call until it has something to send. A call whose final response is the first
    /// thing it has (nothing to report, and over before a keep-alive was due) is answered whole,
    /// as JSON, so its HTTP status can say what kind of error it is (2026-07-28 answers some with
    /// 400); anything else starts the SSE stream with that first piece.
    pub async fn open(mut self) -> Opening {
        let first = self.next_chunk().await;
        if matches!(self.phase, Phase::Finished) && self.final_alone {
            if let Some(response) = self.final_response.take() {
                return Opening::Whole(response);
            }
        }
        match first {
            Some(first) => Opening::Stream(Box::new(self), first),
            None => Opening::Whole(server::finish_call(
                &self.plan,
                Outcome::Failed("the call ended without a result".into()),
                VERSION,
            )),
        }
    }

    /// The SSE response of an [`Opening::Stream`]: its first piece, then the rest as it comes.
    pub fn into_response_from(self, first: String, headers: Headers) -> crate::runtime::Result<Response> {
        let head = futures::stream::once(async move { Ok::<Vec<u8>, crate::runtime::Error>(first.into_bytes()) });
        Ok(Response::from_stream(Box::pin(head.chain(self.into_chunks()))).with_headers(headers))
    }

    /// Runs the call to its end for a client that takes only JSON: the final response alone.
    pub async fn into_final(mut self) -> Value {
        while self.next_chunk().await.is_some() {}
        self.final_response.take().unwrap_or_else(|| {
            server::finish_call(&self.plan, Outcome::Failed("the call ended without a result".into()), VERSION)
        })
    }

    /// The next piece of SSE text to send, or `None` once the final response went out.
    async fn next_chunk(&mut self) -> Option<String> {
        let mut out = String::new();
        loop {
            match std::mem::replace(&mut self.phase, Phase::Finished) {
                Phase::Finished => return None,
                Phase::Start => match self.connect().await {
                    Ok(body) => {
                        self.last_chunk_ms = crate::shell::platform::now_ms();
                        self.phase = Phase::Reading(body);
                    }
                    Err(outcome) => return Some(self.finish(outcome, &mut out)),
                },
                Phase::Reading(mut body) => match self.wait(body.next()).await {
                    Err(timeout) => return Some(self.abort(timeout, &mut out)),
                    Ok(Wait::Item(Some(Ok(chunk)))) => {
                        self.last_chunk_ms = crate::shell::platform::now_ms();
                        if let Err(e) = self.take_chunk(&chunk, &mut out) {
                            let bad =
                                Outcome::Failed(format!("the app '{}' sent a bad stream: {e}", self.target.app_name));
                            return Some(self.abort(bad, &mut out));
                        }
                        if !self.registered && !self.read_all() {
                            if let Some(task_id) = self.cancel.task_id.clone() {
                                self.registered = true;
                                let (app_index, user) = (self.plan.app_index, self.plan.user.clone());
                                self.register(&RunRecord::Dify { app_index, task_id, user }).await;
                            }
                        }
                        if self.read_all() {
                            let outcome = self.read_outcome();
                            return Some(self.finish(outcome, &mut out));
                        }
                        self.phase = Phase::Reading(body);
                        self.share_run().await;
                        if let Some(text) = self.flush(&mut out) {
                            return Some(text);
                        }
                    }
                    Ok(Wait::Item(Some(Err(e)))) => {
                        let outcome =
                            Outcome::Failed(format!("the app '{}' broke off its stream: {e}", self.target.app_name));
                        return Some(self.abort(outcome, &mut out));
                    }
                    Ok(Wait::Item(None)) => {
                        let mut parser = std::mem::take(&mut self.parser);
                        // A last line over the cap is dropped: the stream is over either way.
                        let _ = parser.finish_each(|ev| self.take_event(ev.data, &mut out));
                        self.parser = parser;
                        let outcome = self.read_outcome();
                        return Some(self.finish(outcome, &mut out));
                    }
                    Ok(Wait::Tick) => {
                        self.phase = Phase::Reading(body);
                        self.share_run().await;
                        if let Some(text) = self.keep_alive(&mut out) {
                            return Some(text);
                        }
                    }
                },
                Phase::Relaying(mut rx) => match self.wait(rx.next()).await {
                    Err(timeout) => return Some(self.abort(timeout, &mut out)),
                    Ok(Wait::Item(Some(Relayed::Started { request_id, session }))) => {
                        self.phase = Phase::Relaying(rx);
                        if !self.registered {
                            self.registered = true;
                            let record = RunRecord::Mcp { app_index: self.plan.app_index, request_id, session };
                            self.register(&record).await;
                        }
                    }
                    Ok(Wait::Item(Some(Relayed::Run(record)))) => {
                        self.last_chunk_ms = crate::shell::platform::now_ms();
                        self.phase = Phase::Relaying(rx);
                        if !self.registered {
                            self.registered = true;
                            self.register(&record).await;
                        }
                    }
                    Ok(Wait::Item(Some(Relayed::Alive))) => {
                        self.last_chunk_ms = crate::shell::platform::now_ms();
                        self.phase = Phase::Relaying(rx);
                        self.share_run().await;
                    }
                    Ok(Wait::Item(Some(Relayed::Note(n)))) => {
                        self.last_chunk_ms = crate::shell::platform::now_ms();
                        write_json_event(&mut out, &n);
                        self.phase = Phase::Relaying(rx);
                        self.share_run().await;
                        if let Some(text) = self.flush(&mut out) {
                            return Some(text);
                        }
                    }
                    Ok(Wait::Item(Some(Relayed::Done(response)))) => {
                        self.cancel.completed();
                        self.phase = Phase::Finished;
                        self.final_alone = out.is_empty();
                        write_json_event(&mut out, &response);
                        if let Some(t) = self.usage.take() {
                            t.finish(&response);
                        }
                        self.final_response = Some(response);
                        return Some(std::mem::take(&mut out));
                    }
                    Ok(Wait::Item(None)) => {
                        let outcome = Outcome::Failed("the upstream call ended without an answer".into());
                        return Some(self.finish(outcome, &mut out));
                    }
                    Ok(Wait::Tick) => {
                        self.phase = Phase::Relaying(rx);
                        self.share_run().await;
                        if let Some(text) = self.keep_alive(&mut out) {
                            return Some(text);
                        }
                    }
                },
            }
        }
    }

    /// Waits for the backend's next piece until the next keep-alive is due; `Err` is the
    /// outcome when the call's total or idle timeout has run out. One timer serves every wait
    /// of the call (see `timer.rs`): when it fires before anything is due (the limits moved on
    /// with the chunks that came meanwhile), the wait goes on.
    async fn wait<T>(&mut self, next: impl std::future::Future<Output = T>) -> Result<Wait<T>, Outcome> {
        futures::pin_mut!(next);
        loop {
            let now = crate::shell::platform::now_ms();
            if now >= self.deadline_ms {
                return Err(self.total_timeout());
            }
            let idle_at = self.last_chunk_ms + self.target.idle.as_millis() as u64;
            if now >= idle_at {
                return Err(self.idle_timeout());
            }
            let keepalive_at = self.last_write_ms + KEEPALIVE_MS;
            if now >= keepalive_at {
                return Ok(Wait::Tick);
            }
            self.timer.arm_by(idle_at.min(self.deadline_ms).min(keepalive_at), now);
            if let Either::Left((item, _)) = select(next.as_mut(), self.timer.fired()).await {
                return Ok(Wait::Item(item));
            }
        }
    }

    /// What went into `out` since the last write, or a keep-alive when the backend's chunk
    /// brought nothing for the client and the client has heard nothing for a while.
    fn flush(&mut self, out: &mut String) -> Option<String> {
        if out.is_empty() && self.last_chunk_ms >= self.last_write_ms + KEEPALIVE_MS {
            write_comment(out, "keep-alive");
        }
        if out.is_empty() {
            return None;
        }
        self.last_write_ms = crate::shell::platform::now_ms();
        Some(std::mem::take(out))
    }

    /// A keep-alive on the tick, unless a deadline is what woke the wait (the loop then ends
    /// the call).
    fn keep_alive(&mut self, out: &mut String) -> Option<String> {
        let now = crate::shell::platform::now_ms();
        if now < self.deadline_ms && now < self.last_chunk_ms + self.target.idle.as_millis() as u64 {
            write_comment(out, "keep-alive");
            self.last_write_ms = now;
            return Some(std::mem::take(out));
        }
        None
    }

    /// Records the run under the call's cancel key: at once in this isolate's memory, and in
    /// KV (so that a `notifications/cancelled` can stop it from any isolate) once the call has
    /// run `SHARE_RUN_AFTER_MS`: most calls end sooner and cost no KV write.
    async fn register(&mut self, record: &RunRecord) {
        let record = record.to_json().to_string();
        crate::shell::memo::remember_run(
            &self.plan.cancel_key,
            record.as_str().into(),
            crate::shell::platform::now_ms(),
        );
        self.unshared = Some(record);
        self.share_run().await;
    }

    /// Writes the run's record to KV once the call is old enough (called as the call goes on).
    async fn share_run(&mut self) {
        if self.unshared.is_none() || crate::shell::platform::now_ms() < self.started_ms + SHARE_RUN_AFTER_MS {
            return;
        }
        let Some(record) = self.unshared.take() else { return };
        let ttl = self.target.total.as_secs().max(60);
        let put = match crate::shell::kv::Kv::open(&self.env) {
            Ok(kv) => kv.put(&self.plan.cancel_key, &record, ttl).await,
            Err(e) => Err(e),
        };
        if let Err(e) = put {
            crate::shell::log::error(&format!("recording a run for cancellation: {e}"));
        }
    }

    fn total_timeout(&self) -> Outcome {
        let (b, secs) = (&self.target, self.target.total.as_secs());
        Outcome::Failed(if matches!(self.plan.request, CallRequest::Mcp { .. }) {
            // Worded like every other upstream failure: "upstream <app>: …".
            format!("upstream {}: no answer within {secs} s ({})", b.app_name, b.total_setting)
        } else {
            format!("the app '{}' did not finish within {secs} s ({})", b.app_name, b.total_setting)
        })
    }

    fn idle_timeout(&self) -> Outcome {
        Outcome::Failed(format!(
            "the app '{}' sent nothing for {} s (idle_timeout_seconds)",
            self.target.app_name,
            self.target.idle.as_secs()
        ))
    }

    /// Starts the backend run; `Err` is the outcome when it cannot start streaming.
    async fn connect(&mut self) -> Result<ByteStream, Outcome> {
        let b = &self.target;
        let mut headers = request_headers(&self.plan, b)?;
        headers.set("accept", "text/event-stream");
        let body = self.plan.request.streaming_body().unwrap_or(Value::Null);
        let url = format!("{}{}", b.base_url, self.plan.request.path());
        let first_byte = b.first_byte.min(b.total);
        let mut resp = match outbound::send(Method::Post, &url, headers, Some(&body), first_byte).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => return Err(first_byte_timed_out(&b.app_name, b, first_byte)),
            Err(e) => return Err(send_failed(&self.plan, b, e)),
        };
        let status = resp.status_code();
        let content_type = resp.headers().get("content-type").unwrap_or_default();
        if (200..300).contains(&status) && content_type.contains("text/event-stream") {
            return Ok(resp.stream());
        }
        // An error, or a backend that answered in one piece.
        let retry_after = resp.headers().get("retry-after");
        let cap = outbound::one_piece_cap(b.max_result_bytes);
        match outbound::text(&mut resp, b.idle, cap).await {
            Ok(text) => Err(read_whole(&self.plan, b, status, &content_type, retry_after.as_deref(), &text)),
            Err(SendError::TimedOut) => Err(self.idle_timeout()),
            Err(e) => Err(send_failed(&self.plan, b, e)),
        }
    }

    fn take_chunk(&mut self, chunk: &[u8], out: &mut String) -> Result<(), SseError> {
        // Events are handed over borrowed from the chunk: nothing is allocated per event. The
        // parser is taken out meanwhile, since `take_event` needs `self`.
        let mut parser = std::mem::take(&mut self.parser);
        let fed = parser.feed_each(chunk, |ev| {
            if !self.read_all() {
                self.take_event(ev.data, out);
            }
        });
        self.parser = parser;
        fed
    }

    fn take_event(&mut self, data: &[u8], out: &mut String) {
        let Some(interp) = self.interp.as_mut() else { return };
        let mut signals = std::mem::take(&mut self.signals);
        interp.on_event(data, &mut signals);
        if self.cancel.task_id.is_none() {
            self.cancel.task_id = interp.task_id().map(str::to_string);
        }
        for s in signals.drain(..) {
            if let Some(n) = server::notification(&self.plan, s, &mut self.progress) {
                write_json_event(out, &n);
            }
        }
        self.signals = signals;
    }

    /// Whether the streamed answer's final event has arrived.
    fn read_all(&self) -> bool {
        self.interp.as_ref().is_some_and(StreamReader::is_done)
    }

    /// The outcome of the streamed answer read so far (the reader is used up).
    fn read_outcome(&mut self) -> Outcome {
        match self.interp.take() {
            Some(reader) => reader.finish(),
            None => Outcome::Failed("the backend stream ended before a result".into()),
        }
    }

    /// Ends the call normally: the backend finished, so there is nothing to stop.
    fn finish(&mut self, outcome: Outcome, out: &mut String) -> String {
        self.cancel.completed();
        self.final_event(outcome, out)
    }

    /// Ends the call early: the backend run may still be going, so it is stopped.
    fn abort(&mut self, outcome: Outcome, out: &mut String) -> String {
        self.cancel.abandon();
        self.final_event(outcome, out)
    }

    fn final_event(&mut self, outcome: Outcome, out: &mut String) -> String {
        self.phase = Phase::Finished;
        let outcome = outcome.capped(&self.target.app_name, self.target.max_result_bytes);
        let response = server::finish_call(&self.plan, outcome, VERSION);
        self.final_alone = out.is_empty();
        write_json_event(out, &response);
        if let Some(t) = self.usage.take() {
            t.finish(&response);
        }
        self.final_response = Some(response);
        std::mem::take(out)
    }
}

/// The app's credentials (or the caller's id an HTTP tool gets) hold characters an HTTP header
/// cannot carry: the app's name.
#[derive(Debug)]
pub struct BadCredentials(pub String);

impl From<BadCredentials> for Outcome {
    fn from(BadCredentials(app): BadCredentials) -> Outcome {
        Outcome::Failed(format!("the credentials of app '{app}' contain characters not allowed in an HTTP header"))
    }
}

/// The headers of a backend call: the key (when there is one), and for HTTP tools the
/// conversation and user ids of docs/http-tool-protocol.md.
pub fn request_headers(plan: &CallPlan, b: &Target) -> Result<Headers, BadCredentials> {
    call_headers(plan, b).map_err(|_| BadCredentials(b.app_name.clone()))
}

fn call_headers(plan: &CallPlan, b: &Target) -> Result<Headers, InvalidHeader> {
    let mut headers = Headers::new();
    headers.set("content-type", "application/json");
    if !b.api_key.is_empty() {
        headers.try_set("authorization", &format!("Bearer {}", b.api_key))?;
    }
    if let CallRequest::HttpTool { .. } = plan.request {
        // MCP has no conversations; each client is one continuing conversation with the tool.
        headers.try_set("x-dify-conversation-id", &plan.user)?;
        headers.try_set("x-dify-user-id", &plan.user)?;
    }
    Ok(headers)
}

/// A one-piece answer read by the rules of the backend's kind.
pub fn read_whole(
    plan: &CallPlan,
    b: &Target,
    status: u16,
    content_type: &str,
    retry_after: Option<&str>,
    text: &str,
) -> Outcome {
    match &plan.request {
        CallRequest::HttpTool { .. } => http_tool::read_response(&b.app_name, status, content_type, retry_after, text),
        CallRequest::Dify { mode, body } => match dify_call::read_blocking(*mode, status, retry_after, text, body) {
            // A refusal gets its fix, unless it is about a conversation (which says its own).
            Outcome::Failed(m) if !(200..300).contains(&status) && !conversation::is_refusal(body, status) => {
                Outcome::Failed(refusal::with_fix(m, refusal::fix(*mode, status, text, &b.base_url)))
            }
            outcome => outcome,
        },
        CallRequest::Mcp { .. } => Outcome::Failed(format!("upstream {}: not an MCP answer", b.app_name)),
    }
}

/// A call that failed on the way out or while its answer was read. The message names the app
/// and the backend's host, never its full URL (which may carry a key in its query).
pub fn send_failed(plan: &CallPlan, b: &Target, e: SendError) -> Outcome {
    let kind = match plan.request {
        CallRequest::HttpTool { .. } => "tool",
        CallRequest::Dify { .. } => "Dify app",
        CallRequest::Mcp { .. } => "upstream",
    };
    let host = crate::pure::url::host_for_display(&b.base_url);
    // The app setting that holds the address, named when the connection itself failed.
    let setting = match plan.request {
        CallRequest::HttpTool { .. } => "api_endpoint",
        CallRequest::Dify { .. } => "base_url",
        CallRequest::Mcp { .. } => "url",
    };
    Outcome::Failed(match e {
        SendError::Unreachable(e) => {
            let why = crate::shell::outbound::advice(&e, setting);
            format!("could not reach the {kind} '{}' at {host}: {why}", b.app_name)
        }
        SendError::TooLarge(cap) => format!(
            "the {kind} '{}' answered more than {} KiB in one piece, more than its max_result_bytes ({} bytes) \
             allows; raise max_result_bytes or make the answer smaller",
            b.app_name,
            cap / 1024,
            b.max_result_bytes
        ),
        SendError::TimedOut => format!("the {kind} '{}' did not answer in time", b.app_name),
    })
}

/// No response headers within the first-byte timeout (or the total one, when it is shorter).
pub fn first_byte_timed_out(app: &str, b: &Target, waited: Duration) -> Outcome {
    let setting = if waited < b.first_byte { "timeout_seconds" } else { "first_byte_timeout_seconds" };
    Outcome::Failed(format!("the app '{app}' did not answer within {} s ({setting})", waited.as_secs()))
}

/// Tells the watcher to stop the backend run unless the call completed; dropping it (the
/// client disconnected mid-stream) counts as abandoning the run.
struct CancelGuard {
    tx: Option<oneshot::Sender<String>>,
    task_id: Option<String>,
    /// Cancels an upstream MCP call running beside the relay.
    upstream_abort: Option<oneshot::Sender<()>>,
}

impl CancelGuard {
    fn completed(&mut self) {
        self.tx.take();
        self.upstream_abort.take();
    }

    fn abandon(&mut self) {
        if let Some(abort) = self.upstream_abort.take() {
            let _ = abort.send(());
        }
        if let (Some(tx), Some(task)) = (self.tx.take(), self.task_id.take()) {
            let _ = tx.send(task);
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// `POST {base}/…/{task_id}/stop` with `{user}`: best effort, errors only logged.
pub async fn stop_run(_env: &Env, base: &str, key: &str, mode: DifyMode, task_id: &str, user: &str, app: &str) {
    let mut headers = Headers::new();
    let auth = format!("Bearer {key}");
    headers.set("content-type", "application/json");
    if headers.try_set("authorization", &auth).is_err() {
        return;
    }
    let url = format!("{base}{}", dify_call::stop_path(mode, task_id));
    let body = crate::json!({ "user": user });
    match outbound::send(Method::Post, &url, headers, Some(&body), Duration::from_secs(10)).await {
        Ok(r) if (200..300).contains(&r.status_code()) => {}
        Ok(r) => crate::shell::log::error(&format!("stopping a run of app '{app}': HTTP {}", r.status_code())),
        Err(_) => {
            crate::shell::log::error(&format!("stopping a run of app '{app}': the stop endpoint could not be reached"))
        }
    }
}
