//! Clients that stay: a 2025-revision client's standalone `GET` stream of its Flowgate session,
//! held by a `ClientSession` Durable Object (binding `CLIENT_SESSIONS`, one per sealed session
//! id, `pure::mcp::client_session` decides) with upstream sessions' own standalone streams
//! (`standalone::hold` / `follow`):
//!
//! - of the caller's sessions of the upstreams it is subscribed to, so that `resources/subscribe`
//!   can be forwarded to the upstream that owns the URI and its `notifications/resources/updated`
//!   reach the client. Held only while a subscription needs it: otherwise the caller's calls use it;
//! - of a session of each upstream app that is the object's own (opened with the app's own
//!   credentials, declaring what the client declared, as the lists Flowgate serves it are read),
//!   so that the upstreams' list changes reach the client, after the session's cached lists of
//!   that app are dropped. No call uses these sessions; they are ended (`DELETE`) with the object's
//!   hold on them.
//!
//! Everything lives in the object's memory: the client's stream closing, the idle bound (the
//! object's alarm) or the object's restart ends the upstream streams and forgets the
//! subscriptions.
//!
//! The Worker's side: [`open_stream`] (the `GET`), [`subscribe`] (`resources/subscribe` and
//! `resources/unsubscribe` from a client with a session).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use serde_json::{json, Value};

use crate::pure::backend::mcp::binding::CALLER_ENTRY;
use crate::pure::backend::mcp::session::Session;
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::mcp::client_session::{self as cs, NoStream, Relay, Source, Subscriptions};
use crate::pure::mcp::gateway::Forward;
use crate::pure::mcp::standalone::has_stream;
use crate::pure::protocol::jsonrpc::RpcError;
use crate::runtime::{Context, Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Request, Response};
use crate::shell::outbound;

use super::client::{upstream_of, Client, Conn};
use super::standalone;

/// How long the Worker waits for the object to answer a subscription's check (it waits
/// `STREAM_WAIT_MS` at most itself).
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// The header of the object's answer to a `GET` that names the apps whose list changes it
/// follows already (their ids, comma-separated): the Worker opens sessions for the others. Not
/// passed on to the client.
const FOLLOWED: &str = "x-flowgate-followed";

async fn ask(env: &Env, object: &str, path: &str, body: &Value) -> Result<Response, String> {
    let req = Request::post(&format!("https://client-session{path}"), body.to_string());
    match env.runtime().object_fetch(crate::shell::platform::CLIENT_SESSIONS, object, req).await {
        Ok(r) => Ok(r),
        Err(e) => Err(format!("the session object could not be reached: {e}")),
    }
}

fn caller_of(incoming: &[(String, String)]) -> String {
    incoming.iter().find(|(k, _)| k == CALLER_ENTRY).map(|(_, v)| v.clone()).unwrap_or_default()
}

fn lookup(incoming: &[(String, String)]) -> impl Fn(&str) -> Option<String> + '_ {
    |name: &str| incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
}

/// The standalone stream of a client's session (the `GET`), as the object holds it; `Err` is
/// the object's refusal or failure (status, words). An upstream's own stream is opened at the
/// first subscription to one of its resources ([`subscribe`]), not here: until then a call of
/// the caller's uses it (`standalone`).
///
/// Once the stream is open, the Worker opens (beside the answer, kept alive by `ctx`) a session
/// of its own with each upstream app whose list changes the object does not follow yet,
/// declaring `declared` (what the client declared), and hands them to the object.
pub async fn open_stream(
    env: &Env,
    ctx: &Context,
    def: &ServerDefinition,
    session_id: &str,
    incoming: &[(String, String)],
    declared: Variant,
) -> Result<Response, (u16, String)> {
    let object = cs::object_name(&def.server_id, session_id);
    let owner = cs::owner(&caller_of(incoming));
    let mut resp = ask(env, &object, "/stream", &json!({"owner": owner})).await.map_err(|e| (503, e))?;
    if resp.status_code() != 200 {
        let status = resp.status_code();
        return Err((status, resp.text().await.unwrap_or_default()));
    }
    let followed = resp.headers().get(FOLLOWED).unwrap_or_default();
    resp.headers_mut().delete(FOLLOWED);
    let apps: Vec<AppDefinition> = def
        .apps
        .iter()
        .filter(|a| a.backend.as_mcp().is_some() && !followed.split(',').any(|f| f == a.id))
        .cloned()
        .collect();
    if !apps.is_empty() {
        let env = env.clone();
        ctx.wait_until(async move {
            // One after the other: nothing waits for them but the list changes.
            let mut targets = Vec::new();
            for app in &apps {
                targets.extend(own_target(&env, app, declared).await);
            }
            if targets.is_empty() {
                return;
            }
            let body = json!({"owner": owner, "variant": declared.key(), "targets": targets});
            if let Err(e) = ask(&env, &object, "/lists", &body).await {
                crate::shell::log::error(&format!("handing a client session its upstream sessions: {e}"));
            }
        });
    }
    Ok(resp)
}

/// A session of `app`'s upstream of the object's own, for its list changes: opened with the
/// app's own credentials, declaring `declared`. `None` for an upstream without a standalone
/// stream (stateless, legacy SSE, 2026-07-28) or that cannot be reached (logged).
async fn own_target(env: &Env, app: &AppDefinition, declared: Variant) -> Option<Value> {
    let why_not = |e: String| {
        crate::shell::log::info(
            "a client session cannot follow an upstream's list changes",
            json!({"app": app.name, "why": e}),
        );
    };
    let mut up = upstream_of(app, env, None).await.map_err(why_not).ok()?;
    up.declared = declared;
    let mut client = Client::new(&up, env);
    let session = client.open_own_session().await.map_err(why_not).ok()??;
    if !has_stream(&session) {
        return None;
    }
    let headers = client.stream_headers(&session).ok()?;
    let pairs: Vec<Value> = headers.iter().map(|(k, v)| json!([k, v])).collect();
    Some(json!({"app": app.name, "app_id": app.id, "url": up.url, "session": session, "headers": pairs}))
}

/// What the object needs to open `app`'s standalone stream on the caller's session: `None` for
/// an upstream whose session has none (stateless, legacy SSE, 2026-07-28) or that cannot be
/// reached (logged).
async fn target(
    env: &Env,
    app: &crate::pure::definition::AppDefinition,
    incoming: &[(String, String)],
) -> Option<Value> {
    let look = lookup(incoming);
    let up = match upstream_of(app, env, Some(&look)).await {
        Ok(u) => u,
        Err(e) => {
            crate::shell::log::info("a client session cannot watch an upstream", json!({"app": app.name, "why": e}));
            return None;
        }
    };
    let mut client = Client::new(&up, env);
    if let Err(e) = client.connect(true).await {
        crate::shell::log::info("a client session cannot watch an upstream", json!({"app": app.name, "why": e}));
        return None;
    }
    let Some(Conn::Http(session)) = &client.conn else { return None };
    if !has_stream(session) {
        return None;
    }
    let headers = client.stream_headers(session).ok()?;
    let pairs: Vec<Value> = headers.iter().map(|(k, v)| json!([k, v])).collect();
    Some(json!({"app": app.name, "url": up.url, "session": session, "headers": pairs}))
}

/// `resources/subscribe` or `resources/unsubscribe` of a client with a session: refused unless
/// the session's stream is open (held by its object, for this caller), else forwarded to the
/// upstream that owns the URI, on the caller's session, and recorded by the object, which then
/// holds that session's standalone stream.
pub async fn subscribe(fwd: &Forward, def: &ServerDefinition, env: &Env, incoming: &[(String, String)]) -> Value {
    let refuse = |why: NoStream| cs::no_stream(fwd.method, fwd.version, why).to_response(&fwd.id);
    let Some(session_id) = lookup(incoming)("mcp-session-id") else { return refuse(NoStream::NoSession) };
    let object = cs::object_name(&def.server_id, &session_id);
    let owner = cs::owner(&caller_of(incoming));
    match ask(env, &object, "/check", &json!({"owner": owner})).await {
        Ok(r) if r.status_code() == 200 => {}
        Ok(_) => return refuse(NoStream::NotOpen),
        Err(e) => return refuse(NoStream::Unavailable(e)),
    }
    let answer = super::call::forward(fwd, def, env, incoming).await;
    if answer.get("error").is_some() {
        return answer;
    }
    let Some(app) = def.apps.get(fwd.app_index) else { return answer };
    let uri = fwd.params.get("uri").and_then(Value::as_str).unwrap_or_default();
    let target = target(env, app, incoming).await;
    let body = json!({"owner": owner, "method": fwd.method, "uri": uri, "app_id": app.id, "target": target});
    match ask(env, &object, "/subscribe", &body).await {
        Ok(r) if r.status_code() == 200 => answer,
        Ok(r) if r.status_code() == 409 => refuse(NoStream::NotOpen),
        Ok(r) => {
            let why = r.text().await.unwrap_or_default();
            RpcError::new(200, crate::pure::protocol::jsonrpc::INVALID_PARAMS, format!("Invalid params: {why}"))
                .to_response(&fwd.id)
        }
        Err(e) => refuse(NoStream::Unavailable(e)),
    }
}

/// The Durable Object class of a client session (bound as `CLIENT_SESSIONS`, class
/// `ClientSession`).
pub struct ClientSession {
    storage: Rc<dyn ObjectStorage>,
    env: Env,
    inner: Rc<Inner>,
}

/// An upstream session's standalone stream the object follows.
struct Watcher {
    session_id: Option<String>,
    stop: futures::future::AbortHandle,
    /// A session of the object's own: where (URL, headers) to end it when the object lets go.
    own: Option<(String, Headers)>,
}

impl Watcher {
    /// Stops following; a session of the object's own is ended (best effort: the upstream
    /// ends an idle session on its own too).
    fn end(self) {
        self.stop.abort();
        if let Some((url, headers)) = self.own {
            end_session(url, headers);
        }
    }
}

/// `DELETE` of a session of the object's own, beside whatever runs.
fn end_session(url: String, headers: Headers) {
    crate::runtime::spawn(async move {
        let _ = outbound::send(Method::Delete, &url, headers, None, POST_TIMEOUT).await;
    });
}

/// Where a target (see `own_target`) is ended: its URL and the headers of its session.
fn target_reach(target: &Value) -> (String, Headers) {
    let mut headers = Headers::new();
    for pair in target["headers"].as_array().into_iter().flatten() {
        if let (Some(k), Some(v)) = (pair[0].as_str(), pair[1].as_str()) {
            let _ = headers.try_set(k, v);
        }
    }
    (target["url"].as_str().unwrap_or_default().to_string(), headers)
}

#[derive(Default)]
struct Inner {
    /// The client's stream: where its events go, and which opening it is.
    client: RefCell<Option<(UnboundedSender<Vec<u8>>, u64)>>,
    generation: Cell<u64>,
    owner: RefCell<Option<String>>,
    subs: RefCell<Subscriptions>,
    /// The caller's upstream sessions held for subscriptions, by app id.
    watchers: RefCell<BTreeMap<String, Watcher>>,
    /// The object's own upstream sessions held for list changes, by app id.
    lists: RefCell<BTreeMap<String, Watcher>>,
    /// What the client declared (`Variant::key`): whose cached lists a change drops.
    variant: RefCell<String>,
    last_used_ms: Cell<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let watchers = std::mem::take(self.watchers.get_mut());
        let lists = std::mem::take(self.lists.get_mut());
        for (_, w) in watchers.into_iter().chain(lists) {
            w.end();
        }
    }
}

impl Inner {
    /// Ends the session of `generation` (if it still is): the client's stream, the upstreams'
    /// streams, the subscriptions.
    fn end(&self, generation: u64, why: &str) {
        if self.client.borrow().as_ref().is_none_or(|(_, g)| *g != generation) {
            return;
        }
        self.client.borrow_mut().take();
        let watchers = std::mem::take(&mut *self.watchers.borrow_mut());
        let lists = std::mem::take(&mut *self.lists.borrow_mut());
        for (_, w) in watchers.into_iter().chain(lists) {
            w.end();
        }
        *self.subs.borrow_mut() = Subscriptions::default();
        self.owner.borrow_mut().take();
        crate::shell::log::info("a client session's stream ended", json!({"why": why}));
    }

    fn send(&self, message: &Value) -> bool {
        let sent =
            self.client.borrow().as_ref().is_some_and(|(tx, _)| tx.unbounded_send(cs::sse_event(message)).is_ok());
        if sent {
            self.last_used_ms.set(crate::shell::platform::now_ms());
        }
        sent
    }

    fn is_open_for(&self, owner: &str) -> bool {
        self.client.borrow().is_some() && self.owner.borrow().as_deref() == Some(owner)
    }
}

/// Ends the session when the client's stream goes (the client closed it, or it was replaced).
struct StreamGuard {
    inner: Weak<Inner>,
    generation: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.end(self.generation, "the client's stream closed");
        }
    }
}

/// The client's event stream: what the object sends, a keep-alive comment after
/// `KEEPALIVE_MS` of silence, until the object ends it.
fn client_stream(rx: UnboundedReceiver<Vec<u8>>, guard: StreamGuard) -> Response {
    let mut r = Response::from_stream(crate::shell::http::event_stream(rx, cs::KEEPALIVE_MS, Box::new(guard)));
    r.headers_mut().set("content-type", "text/event-stream");
    r.headers_mut().set("cache-control", "no-cache");
    r
}

impl ObjectHandler for ClientSession {
    fn fetch(&self, req: Request) -> Fut<'_, Response> {
        Box::pin(async move {
            self.answer(req)
                .await
                .unwrap_or_else(|e| Response::text_with_status(format!("the client session failed: {e}"), 500))
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(async move {
            let now = crate::shell::platform::now_ms();
            let Some(generation) = self.inner.client.borrow().as_ref().map(|(_, g)| *g) else { return Ok(()) };
            let last = self.inner.last_used_ms.get();
            if now.saturating_sub(last) >= cs::IDLE_MS {
                self.inner.end(generation, &format!("it was idle for {} s", cs::IDLE_MS / 1000));
                return Ok(());
            }
            self.storage.set_alarm(last.max(now) + cs::IDLE_MS).await
        })
    }
}

impl ClientSession {
    pub fn new(storage: Rc<dyn ObjectStorage>, env: Env) -> Self {
        ClientSession { storage, env, inner: Rc::default() }
    }

    async fn touch(&self) -> crate::runtime::Result<()> {
        let now = crate::shell::platform::now_ms();
        self.inner.last_used_ms.set(now);
        self.storage.set_alarm(now + cs::IDLE_MS).await
    }

    async fn answer(&self, req: Request) -> crate::runtime::Result<Response> {
        crate::shell::outbound::guard_from_env(&self.env);
        let path = req.url.rsplit('/').next().unwrap_or_default().to_string();
        let body: Value = serde_json::from_str(&req.text().await?).unwrap_or(Value::Null);
        let owner = body["owner"].as_str().unwrap_or_default().to_string();
        let inner = &self.inner;
        let foreign = || Response::text_with_status("this session's stream belongs to another caller", 403);
        match path.as_str() {
            "stream" => {
                if inner.client.borrow().is_some() && inner.owner.borrow().as_deref() != Some(owner.as_str()) {
                    return Ok(foreign());
                }
                // A new GET replaces the stream before it (the subscriptions stay).
                let generation = inner.generation.get() + 1;
                inner.generation.set(generation);
                let (tx, rx) = unbounded();
                *inner.client.borrow_mut() = Some((tx, generation));
                *inner.owner.borrow_mut() = Some(owner);
                self.touch().await?;
                let mut resp = client_stream(rx, StreamGuard { inner: Rc::downgrade(inner), generation });
                let followed: Vec<String> = inner.lists.borrow().keys().cloned().collect();
                resp.headers_mut().set(FOLLOWED, &followed.join(","));
                Ok(resp)
            }
            "lists" => {
                let targets = body["targets"].as_array().cloned().unwrap_or_default();
                if !inner.is_open_for(&owner) {
                    // The stream went meanwhile: the sessions opened for it are not needed.
                    for t in &targets {
                        let (url, headers) = target_reach(t);
                        end_session(url, headers);
                    }
                    return Ok(Response::text_with_status("no stream is open for this caller", 409));
                }
                *inner.variant.borrow_mut() = body["variant"].as_str().unwrap_or("none").to_string();
                for t in &targets {
                    let app_id = t["app_id"].as_str().unwrap_or_default();
                    if inner.lists.borrow().contains_key(app_id) {
                        let (url, headers) = target_reach(t);
                        end_session(url, headers);
                    } else if let Some(w) = self.follow(app_id, t, true) {
                        inner.lists.borrow_mut().insert(app_id.to_string(), w);
                    }
                }
                Ok(Response::text_with_status("ok", 200))
            }
            "check" => {
                // The SDKs open the stream without waiting after initialize: a subscribe may come first.
                let mut waited = 0;
                while inner.client.borrow().is_none() && waited < cs::STREAM_WAIT_MS {
                    crate::runtime::sleep(50).await;
                    waited += 50;
                }
                Ok(match (inner.client.borrow().is_some(), inner.is_open_for(&owner)) {
                    (false, _) => Response::text_with_status("no stream is open", 409),
                    (true, false) => foreign(),
                    (true, true) => Response::text_with_status("open", 200),
                })
            }
            "subscribe" => {
                if !inner.is_open_for(&owner) {
                    return Ok(Response::text_with_status("no stream is open for this caller", 409));
                }
                let app_id = body["app_id"].as_str().unwrap_or_default().to_string();
                let uri = body["uri"].as_str().unwrap_or_default();
                if body["method"] == "resources/unsubscribe" {
                    // The app's last subscription: its stream goes back to the caller's calls.
                    let released = inner.subs.borrow_mut().remove(uri);
                    if let Some(w) = released.and_then(|app| inner.watchers.borrow_mut().remove(&app)) {
                        w.end();
                    }
                } else {
                    if let Err(why) = inner.subs.borrow_mut().add(uri, &app_id) {
                        return Ok(Response::text_with_status(why, 400));
                    }
                    if let Some(target) = body.get("target").filter(|t| t.is_object()) {
                        self.watch(&app_id, target);
                    }
                }
                self.touch().await?;
                Ok(Response::text_with_status("ok", 200))
            }
            _ => Ok(Response::text_with_status("no such route", 404)),
        }
    }

    /// Follows `app_id`'s upstream session stream (`target`) for a subscription, unless it
    /// already does for that session; a watcher of another session of the app (renewed
    /// upstream) is replaced.
    fn watch(&self, app_id: &str, target: &Value) {
        let session_id = target["session"]["session_id"].as_str().map(str::to_string);
        if self.inner.watchers.borrow().get(app_id).is_some_and(|w| w.session_id == session_id) {
            return;
        }
        let Some(w) = self.follow(app_id, target, false) else { return };
        if let Some(old) = self.inner.watchers.borrow_mut().insert(app_id.to_string(), w) {
            old.end();
        }
    }

    /// Starts following `app_id`'s upstream session stream (`target`): a session of the
    /// object's own for list changes (`own`), or the caller's for a subscription.
    fn follow(&self, app_id: &str, target: &Value, own: bool) -> Option<Watcher> {
        let session: Session = match crate::pure::fields::read(target["session"].clone()) {
            Ok(s) => s,
            Err(e) => {
                crate::shell::log::info("a client session cannot watch an upstream", json!({"why": e}));
                return None;
            }
        };
        let (url, headers) = target_reach(target);
        let app = target["app"].as_str().unwrap_or("app").to_string();
        let session_id = session.session_id.clone();
        let (inner, id, env) = (Rc::downgrade(&self.inner), app_id.to_string(), self.env.clone());
        let (post_url, post_headers) = (url.clone(), headers.clone());
        let ends = own.then(|| (url.clone(), headers.clone()));
        let work = async move {
            let held = standalone::hold(session, url, headers, app).await;
            let on_message = |m: Value| {
                let Some(inner) = inner.upgrade() else { return };
                let source = match own {
                    true => Source::Lists,
                    false => Source::Subscription { lists_followed: inner.lists.borrow().contains_key(&id) },
                };
                let relay = cs::route(&id, &inner.subs.borrow(), source, &m);
                match relay {
                    Relay::Client(n) => {
                        inner.send(&n);
                    }
                    Relay::Changed(n) => {
                        // The client reads the list again: not from what was cached before.
                        let declared = Variant::parse(&inner.variant.borrow());
                        let (env, id, weak) = (env.clone(), id.clone(), Rc::downgrade(&inner));
                        crate::runtime::spawn(async move {
                            super::call::forget_lists(&env, &id, declared).await;
                            if let Some(inner) = weak.upgrade() {
                                inner.send(&n);
                            }
                        });
                    }
                    Relay::Refuse(answer) => {
                        let (url, mut h) = (post_url.clone(), post_headers.clone());
                        h.set("accept", "application/json, text/event-stream");
                        h.set("content-type", "application/json");
                        crate::runtime::spawn(async move {
                            let _ = outbound::send(Method::Post, &url, h, Some(&answer), POST_TIMEOUT).await;
                        });
                    }
                    Relay::Drop => {}
                }
            };
            standalone::follow(held, &on_message).await;
        };
        let (work, stop) = futures::future::abortable(work);
        crate::runtime::spawn(async move {
            let _ = work.await;
        });
        Some(Watcher { session_id, stop, own: ends })
    }
}
