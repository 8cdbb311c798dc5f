//! The call bridge (`pure::mcp::bridge` decides; this is the IO): a 2026-07-28 client's call of
//! a 2025 upstream's tool, run inside a Durable Object (`CallBridge`, bound as `BRIDGES`, one
//! per call) that holds the upstream's POST or SSE stream while the client answers the
//! upstream's requests in `input_required` rounds. The Worker side ([`start`], [`resume`])
//! hands the call and each retry to the object and turns its [`Reply`] into the client's answer.
//! While a client request is open (from its arrival until its reply) the object streams it, as
//! lines ([`Line`]), the call's progress and log messages that request takes, and the Worker
//! emits them on the client's SSE answer as for any call; what comes between requests is dropped.
//!
//! Bounds: each round waits for the client at most the app's `tool_call_timeout` (an alarm then
//! gives the call up and tells the upstream `notifications/cancelled`); the whole call is bounded
//! by the upstream client's own timeout. The object keeps the call in memory only: after a
//! restart a retry is told the call was lost, and the alarm cancels it upstream.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::json;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::pure::backend::mcp::session::Session;
use crate::pure::backend::mcp::transport::{first_transport, Transport};
use crate::pure::definition::AppDefinition;
use crate::pure::mcp::bridge::{self as pb, Bridge, Came, Line, Notes, Op, Reply, Start};
use crate::pure::mcp::input_required::{self as ir, Bind};
use crate::pure::mcp::relay::{self, Channel};
use crate::pure::mcp::server::{self, CallPlan};
use crate::pure::mcp::standalone;
use crate::pure::outcome::Outcome;
use crate::pure::protocol::jsonrpc::{RpcError, INVALID_PARAMS};
use crate::runtime::{Env, Fut, ObjectHandler, ObjectStorage, Request, Response};
use crate::shell::platform::now_ms;
use crate::shell::VERSION;

use super::client::{upstream_of, Client, Conn, Upstream};

const STATES: &str = "bridge-state";
const RECORD: &str = "call";
/// How often the object's alarm comes back while a call lives (an alarm keeps an object that
/// waits for its client in memory, and gives up a round past its bound).
const HEARTBEAT_MS: u64 = 30_000;

fn keys(env: &Env) -> Vec<[u8; 32]> {
    let masters = crate::shell::secrets::keys(env).unwrap_or_default();
    masters.iter().map(|k| relay::purpose_key(k, STATES)).collect()
}

// ---- the Worker's side ----

/// Whether this call goes through a bridge: a 2026-07-28 client that declared a capability an
/// upstream request needs, a 2025 upstream with a session (the answers must reach the call), a
/// plain call (not a task), and a sealing key.
pub fn wanted(plan: &CallPlan, input: &Map<String, Value>, client: &Client<'_>, env: &Env) -> bool {
    let session = match &client.conn {
        Some(Conn::Http(s)) => s.session_id.is_some() && !s.stateless,
        // A legacy upstream: the answers go to its message endpoint, as the object reads its stream.
        Some(Conn::Sse { .. } | Conn::Legacy(_)) => true,
        None => false,
    };
    asked_for(plan, input, env) && session && client.protocol().is_some_and(|v| !v.is_stateless())
}

/// Whether this call goes through a bridge, known before connecting: a plain call (the client
/// asked for no task) that [`wanted`] would bridge, to an upstream reached by the legacy
/// HTTP+SSE transport (its URL or its setting says so; the transport always keeps a session
/// and speaks a 2025 revision). Its connection cannot be handed to the object, so the Worker
/// opens none: one handshake a call, the object's.
pub fn wanted_before_connecting(
    plan: &CallPlan,
    input: &Map<String, Value>,
    up: &Upstream,
    task_asked: bool,
    env: &Env,
) -> bool {
    !task_asked
        && first_transport(up.choice, &up.url) == Transport::Sse
        && !up.protocol.is_some_and(|v| v.is_stateless())
        && asked_for(plan, input, env)
}

/// The client's half of [`wanted`]: a 2026-07-28 client that declared one of the capabilities
/// an upstream request needs, and a key to seal its states.
fn asked_for(plan: &CallPlan, input: &Map<String, Value>, env: &Env) -> bool {
    let caps = ir::declared(input);
    let declared = caps.sampling || caps.elicitation_form || caps.elicitation_url || caps.roots;
    plan.relay == Channel::Closed(relay::Closed::Stateless) && declared && !keys(env).is_empty()
}

/// What a bridged call needs of the Worker's request.
pub struct Call<'a> {
    pub plan: &'a CallPlan,
    pub app: &'a AppDefinition,
    pub bind: Bind<'a>,
}

/// Starts the call in a new object: the client's answer (the first round, or the result).
#[allow(clippy::too_many_arguments)]
pub async fn start(
    call: Call<'_>,
    env: &Env,
    incoming: &[(String, String)],
    tool: &str,
    arguments: &Value,
    input: &Map<String, Value>,
    params: &[(String, String)],
    emit: &mut dyn FnMut(Value),
    abort: impl std::future::Future<Output = ()>,
) -> Value {
    let mut id = [0u8; 16];
    if let Err(e) = crate::runtime::fill_random(&mut id) {
        return server::finish_call(call.plan, Outcome::Failed(format!("no randomness for the call: {e}")), VERSION);
    }
    let object = crate::pure::ids::hex(&id);
    let timeout_ms = call.app.backend.as_mcp().map_or(300_000, |b| b.call_timeout().as_millis() as u64);
    let op = Op::Start(Box::new(Start {
        app: call.app.clone(),
        tool: tool.to_string(),
        arguments: arguments.clone(),
        input: input.clone(),
        params: params.to_vec(),
        notes: Notes::of(call.plan),
        incoming: incoming.to_vec(),
        timeout_ms,
    }));
    let reply = ask(env, &object, &op, emit, abort).await;
    answer(&call, env, &object, reply)
}

/// A client's retry with a bridge's `requestState`: its `inputResponses` to the object that
/// holds the call, and the client's answer (the next round, or the result); the call's
/// notifications the retry takes go to `emit` meanwhile.
pub async fn resume(
    call: Call<'_>,
    env: &Env,
    input: &Map<String, Value>,
    emit: &mut dyn FnMut(Value),
    abort: impl std::future::Future<Output = ()>,
) -> Value {
    let token = input.get("requestState").and_then(Value::as_str).unwrap_or_default();
    let (object, round) = match pb::open_state(token, &keys(env), call.bind, now_ms()) {
        Ok(o) => o,
        Err(e) => return e.to_response(&call.plan.id),
    };
    let responses = input.get("inputResponses").and_then(Value::as_object).cloned().unwrap_or_default();
    let reply = ask(env, &object, &Op::Answer { round, responses, notes: Notes::of(call.plan) }, emit, abort).await;
    answer(&call, env, &object, reply)
}

/// Asks the call's object: the notifications it streams go to `emit` as they come, its reply
/// ends the answer. A client that goes away first (`abort`) cancels the call.
async fn ask(
    env: &Env,
    object: &str,
    op: &Op,
    emit: &mut dyn FnMut(Value),
    abort: impl std::future::Future<Output = ()>,
) -> Reply {
    let send = async {
        let req = Request::post("https://bridge/", op.to_json().to_string());
        let failed = |why: String| Reply::Failed(format!("the call's bridge failed: {why}"));
        let resp = match env.runtime().object_fetch(crate::shell::platform::BRIDGES, object, req).await {
            Ok(r) if r.status_code() == 200 => r,
            Ok(r) => return failed(format!("HTTP {}: {}", r.status_code(), r.text().await.unwrap_or_default())),
            Err(e) => return failed(e.to_string()),
        };
        let mut body = resp.into_parts().2.into_stream();
        let mut lines = crate::pure::lines::Lines::default();
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return failed(format!("its answer broke off ({e})")),
            };
            for line in lines.feed(&chunk) {
                match Line::decode(&line) {
                    Ok(Line::Note(n)) => emit(n),
                    Ok(Line::Reply(reply)) => return reply,
                    Err(why) => return failed(why),
                }
            }
        }
        failed("its answer ended without a reply".into())
    };
    futures::pin_mut!(send, abort);
    match futures::future::select(send, abort).await {
        futures::future::Either::Left((reply, _)) => reply,
        futures::future::Either::Right(_) => {
            let req = Request::post("https://bridge/", Op::Cancel.to_json().to_string());
            let _ = env.runtime().object_fetch(crate::shell::platform::BRIDGES, object, req).await;
            Reply::Failed("the call was cancelled".into())
        }
    }
}

/// The client's JSON-RPC response for the object's reply.
fn answer(call: &Call<'_>, env: &Env, object: &str, reply: Reply) -> Value {
    let plan = call.plan;
    match reply {
        Reply::Ask { round, requests, expires_ms } => {
            let Some(key) = keys(env).first().copied() else {
                return server::finish_call(plan, Outcome::Failed("Flowgate has no SECRETS_KEY".into()), VERSION);
            };
            let mut nonce = [0u8; 12];
            if let Err(e) = crate::runtime::fill_random(&mut nonce) {
                return server::finish_call(plan, Outcome::Failed(format!("no randomness: {e}")), VERSION);
            }
            match pb::seal_state(&key, nonce, call.bind, object, round, expires_ms) {
                Ok(state) => {
                    let result =
                        json!({"resultType": "input_required", "inputRequests": requests, "requestState": state});
                    server::upstream_response(
                        plan,
                        &call.app.name,
                        &json!({"jsonrpc": "2.0", "id": 0, "result": result}),
                        VERSION,
                    )
                }
                Err(e) => e.to_response(&plan.id),
            }
        }
        Reply::Final(response) => server::upstream_response(plan, &call.app.name, &response, VERSION),
        Reply::Failed(why) => server::finish_call(plan, Outcome::Failed(why), VERSION),
        Reply::Refused(why) => {
            RpcError::new(200, INVALID_PARAMS, format!("Invalid params: {why}")).to_response(&plan.id)
        }
    }
}

// ---- the object ----

/// A call in flight, in the object's memory.
struct Live {
    machine: RefCell<Bridge>,
    /// Fetches waiting for the machine to change.
    waiters: RefCell<Vec<oneshot::Sender<()>>>,
    up: Upstream,
    /// Where the call went (session and message URL): answers and the cancel go there.
    target: RefCell<Option<(Session, String)>>,
    request_id: Cell<u64>,
    /// When the open round's wait for the client ends.
    round_deadline_ms: Cell<u64>,
    timeout_ms: u64,
    /// Ends the upstream call (it runs beside the object's requests).
    stop: RefCell<Option<futures::future::AbortHandle>>,
    storage: Rc<dyn ObjectStorage>,
    /// The client request open now (from its arrival until its reply is decided): where the
    /// call's notifications go.
    listener: RefCell<Option<mpsc::UnboundedSender<Value>>>,
    /// What the latest client request takes of them (between requests: what would have gone).
    notes: RefCell<Notes>,
    /// The progress token the upstream call went up with (the first request's).
    call_token: Option<Value>,
    /// Notifications the client would have taken that came while none of its requests was open.
    dropped: Cell<u32>,
}

impl Live {
    fn wake(&self) {
        for w in self.waiters.borrow_mut().drain(..) {
            let _ = w.send(());
        }
    }

    /// A notification of the upstream's during the call (on either stream): to the client's
    /// open request if it takes it; counted if it would have but no request is open.
    fn note(&self, note: &Value) {
        let Some(out) = self.notes.borrow().for_client(note, self.call_token.as_ref()) else { return };
        let sent = self.listener.borrow().as_ref().is_some_and(|to| to.unbounded_send(out).is_ok());
        if !sent {
            self.dropped.set(self.dropped.get() + 1);
        }
    }

    /// Says once how many notifications found no client request open.
    fn report_dropped(&self) {
        let count = self.dropped.replace(0);
        if count > 0 {
            crate::shell::log::info(
                "notifications the upstream sent during a bridged call were not relayed (they came while its \
                 2026-07-28 client had no request open: between its input rounds)",
                json!({"app": self.up.app_name, "count": count}),
            );
        }
    }
}

/// The Durable Object class of a bridged call (bound as `BRIDGES`, class `CallBridge`).
pub struct CallBridge {
    core: Rc<Core>,
}

/// The object's state; its answers hold it while they stream.
struct Core {
    storage: Rc<dyn ObjectStorage>,
    env: Env,
    live: RefCell<Option<Rc<Live>>>,
}

impl Drop for Core {
    // An instance that goes (a restart) takes its call with it, as the platform does.
    fn drop(&mut self) {
        if let Some(live) = self.live.borrow_mut().take() {
            if let Some(stop) = live.stop.borrow_mut().take() {
                stop.abort();
            }
        }
    }
}

/// The object's answer to a client request: the notifications `notes` carries as they come,
/// then `reply`'s outcome (which closes the request to them). The reply is worked out beside the answer, so that the call goes on even if
/// the Worker stops reading (a client that went away: its `Op::Cancel` ends the call).
fn streamed(
    notes: mpsc::UnboundedReceiver<Value>,
    reply: impl std::future::Future<Output = Reply> + 'static,
) -> Response {
    let (decided, replied) = oneshot::channel();
    crate::runtime::spawn(async move {
        let _ = decided.send(reply.await);
    });
    let answer = futures::stream::unfold(Some((notes, replied)), |state| async move {
        let (mut notes, mut replied) = state?;
        // The notes first (`select` polls them first): the reply goes out only once every note
        // queued before it was decided has.
        let first = match futures::future::select(notes.next(), &mut replied).await {
            futures::future::Either::Left((note, _)) => Ok(note),
            futures::future::Either::Right((r, _)) => Err(r),
        };
        let gone = |_| Reply::Failed("the call's bridge stopped before its reply".into());
        let bytes = match first {
            Ok(Some(note)) => return Some((Ok(Line::Note(note).encode()), Some((notes, replied)))),
            // No request of the client's listens (a refused retry): the reply alone.
            Ok(None) => Line::Reply(replied.await.unwrap_or_else(gone)).encode(),
            Err(r) => Line::Reply(r.unwrap_or_else(gone)).encode(),
        };
        Some((Ok::<Vec<u8>, crate::runtime::Error>(bytes), None))
    });
    let mut r = Response::from_stream(Box::pin(answer));
    r.headers_mut().set("content-type", "application/x-ndjson");
    r
}

impl ObjectHandler for CallBridge {
    fn fetch(&self, req: Request) -> Fut<'_, Response> {
        let core = self.core.clone();
        Box::pin(async move {
            crate::shell::outbound::guard_from_env(&core.env);
            let op = match req
                .text()
                .await
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()).and_then(Op::from_json))
            {
                Ok(op) => op,
                Err(e) => return Response::text_with_status(format!("not a bridge operation: {e}"), 400),
            };
            let (listener, notes) = mpsc::unbounded();
            match op {
                Op::Start(start) => streamed(notes, Box::pin(async move { core.start(*start, listener).await })),
                Op::Answer { round, responses, notes: takes } => {
                    streamed(notes, Box::pin(async move { core.answer(round, &responses, takes, listener).await }))
                }
                Op::Cancel => {
                    core.give_up("the client's request ended (it went away, or the call's timeout ran out)").await;
                    Response::from_bytes(Line::Reply(Reply::Failed("the call was cancelled".into())).encode())
                }
            }
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(async move {
            crate::shell::log::begin();
            let core = &self.core;
            crate::shell::outbound::guard_from_env(&core.env);
            let live = core.live.borrow().clone();
            let Some(live) = live else {
                core.lost().await;
                return Ok(());
            };
            let now = now_ms();
            if live.machine.borrow().waiting_for_client() && now >= live.round_deadline_ms.get() {
                let why = format!("the client did not answer within {} s", live.timeout_ms / 1000);
                core.give_up(&why).await;
                return Ok(());
            }
            if live.stop.borrow().is_some() {
                core.arm(&live).await;
            }
            Ok(())
        })
    }
}

impl CallBridge {
    pub fn new(storage: Rc<dyn ObjectStorage>, env: Env) -> CallBridge {
        CallBridge { core: Rc::new(Core { storage, env, live: RefCell::new(None) }) }
    }
}

impl Core {
    /// Starts the call; the first request listens on `listener` until its reply.
    async fn start(&self, start: Start, listener: mpsc::UnboundedSender<Value>) -> Reply {
        if self.live.borrow().is_some() || self.storage.get(RECORD).await.ok().flatten().is_some() {
            return Reply::Failed("the call's bridge is already in use".into());
        }
        let lookup =
            |name: &str| start.incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        let up = match upstream_of(&start.app, &self.env, Some(&lookup)).await {
            Ok(u) => u,
            Err(e) => return Reply::Failed(e),
        };
        let live = Rc::new(Live {
            machine: RefCell::default(),
            waiters: RefCell::default(),
            up,
            target: RefCell::new(None),
            request_id: Cell::new(0),
            round_deadline_ms: Cell::new(u64::MAX),
            timeout_ms: start.timeout_ms,
            stop: RefCell::new(None),
            storage: self.storage.clone(),
            listener: RefCell::new(Some(listener)),
            notes: RefCell::new(start.notes.clone()),
            call_token: start.notes.progress_token.clone(),
            dropped: Cell::new(0),
        });
        *self.live.borrow_mut() = Some(live.clone());
        let record = json!({"app": start.app.to_value(), "started": now_ms()});
        if let Err(e) = self.storage.put(RECORD, &record.to_string()).await {
            crate::shell::log::error(&format!("recording a bridged call: {e}"));
        }
        let (run, stop) = futures::future::abortable(run_call(live.clone(), self.env.clone(), start));
        *live.stop.borrow_mut() = Some(stop);
        let done = live.clone();
        crate::runtime::spawn(async move {
            if run.await.is_err() {
                done.machine.borrow_mut().end("the call was given up");
            }
            done.stop.borrow_mut().take();
            done.wake();
        });
        self.arm(&live).await;
        let reply = self.next(&live).await;
        live.listener.borrow_mut().take();
        reply
    }

    /// A retry's answers for round `round`; once taken, the retry listens on `listener` (for what
    /// `notes` says it takes) until its reply.
    async fn answer(
        &self,
        round: u32,
        responses: &Map<String, Value>,
        notes: Notes,
        listener: mpsc::UnboundedSender<Value>,
    ) -> Reply {
        let live = self.live.borrow().clone();
        let Some(live) = live else {
            return match self.lost().await {
                true => Reply::Refused(
                    pb::Refusal::Ended(
                        "Flowgate's bridge for the call restarted, and the upstream call was lost".into(),
                    )
                    .message(),
                ),
                false => Reply::Refused(pb::Refusal::Ended("it finished or was given up".into()).message()),
            };
        };
        let answers = match live.machine.borrow_mut().answer(round, responses) {
            Ok(a) => a,
            Err(refusal) => return Reply::Refused(refusal.message()),
        };
        // The round is this request's: what the upstream sends from now on is for it.
        *live.notes.borrow_mut() = notes;
        *live.listener.borrow_mut() = Some(listener);
        live.round_deadline_ms.set(u64::MAX);
        let target = live.target.borrow().clone();
        if let Some(target) = target {
            let poster = Client::new(&live.up, &self.env);
            for a in &answers {
                match poster.post_message(&target, a).await {
                    Ok(s) if (200..300).contains(&s) => {}
                    Ok(s) => {
                        crate::shell::log::error(&format!("upstream {} refused an answer (HTTP {s})", live.up.app_name))
                    }
                    Err(e) => {
                        crate::shell::log::error(&format!("posting an answer to upstream {}: {e}", live.up.app_name))
                    }
                }
            }
        }
        let reply = self.next(&live).await;
        live.listener.borrow_mut().take();
        reply
    }
    /// Waits for the next reply (a round, or the call's end).
    async fn next(&self, live: &Rc<Live>) -> Reply {
        loop {
            let expires = now_ms() + live.timeout_ms;
            let reply = live.machine.borrow_mut().next(expires);
            match reply {
                Some(r @ Reply::Ask { .. }) => {
                    live.round_deadline_ms.set(expires);
                    self.arm(live).await;
                    return r;
                }
                Some(r) => {
                    self.refuse_unanswerable(live).await;
                    self.finish().await;
                    return r;
                }
                None => {}
            }
            let (tx, rx) = oneshot::channel();
            live.waiters.borrow_mut().push(tx);
            // The call ends on its own timeout; this bound is a backstop against a call that
            // neither ends nor asks.
            let wait = crate::runtime::sleep(live.timeout_ms + 10_000);
            futures::pin_mut!(wait);
            if let futures::future::Either::Right(_) = futures::future::select(rx, wait).await {
                self.give_up("the upstream neither answered nor asked within the tool's tool_call_timeout").await;
            }
        }
    }

    /// Ends the call: the upstream told `notifications/cancelled`, the call stopped, a waiting
    /// or later retry told `why`.
    async fn give_up(&self, why: &str) {
        let live = self.live.borrow().clone();
        let Some(live) = live else { return };
        live.machine.borrow_mut().end(why);
        live.report_dropped();
        // A call that already ended upstream has nothing left to cancel.
        let running = live.stop.borrow_mut().take();
        if let Some(stop) = running {
            stop.abort();
            let target = live.target.borrow().clone();
            if let Some(target) = target {
                let client = Client::new(&live.up, &self.env);
                client.notify_cancelled(&target, live.request_id.get(), why).await;
            }
        }
        self.refuse_unanswerable(&live).await;
        live.wake();
        self.finish().await;
    }

    /// Refuses what came beside the call (on the standalone stream) and can no longer reach the
    /// client, now that the call is over: no upstream request waits on silence.
    async fn refuse_unanswerable(&self, live: &Live) {
        let refusals = live.machine.borrow_mut().unanswerable();
        let target = live.target.borrow().clone();
        if let (false, Some(target)) = (refusals.is_empty(), target) {
            let poster = Client::new(&live.up, &self.env);
            for r in &refusals {
                let _ = poster.post_message(&target, r).await;
            }
        }
    }

    /// The call is over: nothing stored, no alarm.
    async fn finish(&self) {
        let _ = self.storage.delete_all().await;
        let _ = self.storage.delete_alarm().await;
    }

    /// The next alarm: the open round's deadline, or the heartbeat.
    async fn arm(&self, live: &Live) {
        let at = (now_ms() + HEARTBEAT_MS).min(live.round_deadline_ms.get());
        if let Err(e) = self.storage.set_alarm(at).await {
            crate::shell::log::error(&format!("arming a bridged call's alarm: {e}"));
        }
    }

    /// A call recorded but not in memory (the object restarted): the upstream told it is
    /// cancelled (with the app's own credentials: the client's forwarded ones were never
    /// stored), the record forgotten, and `true`.
    async fn lost(&self) -> bool {
        let Some(text) = self.storage.get(RECORD).await.ok().flatten() else { return false };
        self.finish().await;
        let record = serde_json::from_str::<Value>(&text).unwrap_or_default();
        let read = crate::pure::fields::read_with(record, |f| {
            Ok((
                f.object::<AppDefinition>("app")?,
                f.opt_object::<Session>("session")?,
                f.opt_text("url")?,
                f.opt_uint("request")?,
            ))
        });
        if let Ok((app, Some(session), Some(url), Some(request))) = read {
            if let Ok(up) = upstream_of(&app, &self.env, None).await {
                let why = "Flowgate's bridge for the call restarted, and the call was lost";
                Client::new(&up, &self.env).notify_cancelled(&(session, url), request, why).await;
            }
        }
        true
    }
}

/// The upstream call, beside the object's requests: requests the client declared a capability
/// for go to the machine (for the client's next round), others are refused at once; the same
/// for those on the session's standalone stream, held while the call runs. Notifications
/// (progress, logs, on either stream) go to the client's open request (`Live::note`); those
/// that came between its requests are counted in one log line at the end.
async fn run_call(live: Rc<Live>, env: Env, start: Start) {
    let caps = ir::declared(&start.input);
    let mut client = Client::new(&live.up, &env);
    if let Err(e) = client.connect(true).await {
        live.machine.borrow_mut().finished(Reply::Failed(e));
        live.wake();
        return;
    }
    // Before the call goes out, so that nothing the upstream sends on it meanwhile is lost (a
    // 404 starts a new session first, which the call then uses). It ends with this future: the
    // call's result, or its being given up (which drops the future).
    let held = super::standalone::open(&mut client, &live.up).await;
    live.request_id.set(client.last_request_id() + 1);
    *live.target.borrow_mut() = client.cancel_target();
    // What a restarted object needs to tell the upstream the call is gone.
    if let Some((session, url)) = client.cancel_target() {
        let record =
            json!({"app": start.app.to_value(), "session": session, "url": url, "request": live.request_id.get()});
        if let Err(e) = live.storage.put(RECORD, &record.to_string()).await {
            crate::shell::log::error(&format!("recording a bridged call: {e}"));
        }
    }
    let asked_on = client.live_target();
    let (refusals, mut refused) = mpsc::unbounded::<(Value, Option<(Session, String)>)>();
    // One decision for a request of the upstream's, whichever stream it came on.
    let asked = |n: &Value, came: Came, target: Option<(Session, String)>| match relay::decide(n, Channel::Stream(caps))
    {
        Ok(()) => {
            live.machine.borrow_mut().upstream_asked(n, came);
            live.wake();
        }
        Err(why) => {
            let _ = refusals.unbounded_send((relay::refusal(n, &why), target));
        }
    };
    let mut on_note = |n: Value| {
        if n.get("id").is_none() {
            live.note(&n);
            return;
        }
        let target = asked_on.borrow().clone();
        if target.is_some() {
            live.target.borrow_mut().clone_from(&target);
        }
        asked(&n, Came::WithCall, target);
    };
    let stream_target = held.as_ref().map(super::standalone::Held::target);
    let from_standalone = |n: Value| {
        if standalone::is_request(&n) {
            asked(&n, Came::Beside, stream_target.clone());
        } else if n.get("method").is_some() {
            live.note(&n);
        }
    };
    let poster = Client::new(&live.up, &env);
    let reply = {
        let answering = async {
            while let Some((refusal, target)) = refused.next().await {
                if let Some(t) = target {
                    let _ = poster.post_message(&t, &refusal).await;
                }
            }
            futures::future::pending::<()>().await
        };
        let following = super::standalone::follow(held, &from_standalone);
        let call = client.call_tool_with(
            &start.tool,
            &start.arguments,
            start.notes.progress_token.as_ref(),
            &start.input,
            &start.params,
            None,
            &mut on_note,
        );
        futures::pin_mut!(call, answering, following);
        match futures::future::select(call, futures::future::select(answering, following)).await {
            futures::future::Either::Left((Ok(response), _)) => Reply::Final(response),
            futures::future::Either::Left((Err(e), _)) => Reply::Failed(e),
            futures::future::Either::Right(_) => Reply::Failed("the upstream call ended without an answer".into()),
        }
    };
    // Refusals the call's end overtook still go out.
    while let Ok((refusal, target)) = refused.try_recv() {
        if let Some(t) = target {
            let _ = poster.post_message(&t, &refusal).await;
        }
    }
    live.report_dropped();
    live.machine.borrow_mut().finished(reply);
    live.wake();
}
