//! A client's request to an upstream MCP app, end to end: its tool list and catalog (cached in
//! KV), a `tools/call` relayed with its notifications and the upstream's requests to the
//! client, and the other methods the gateway forwards.

use futures::StreamExt;

use crate::json;
use crate::runtime::Env;
use serde_json::Value;

use std::rc::Rc;

use crate::pure::backend::mcp::catalog::Catalog;
use crate::pure::backend::mcp::config::{McpConfig, DEFAULT_TOOLS_TTL_S};
use crate::pure::backend::mcp::session::{session_request, Session};
use crate::pure::backend::mcp::transport::Transport;
use crate::pure::backend::mcp::variant::{still_current, Variant};
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::mcp::gateway::Forward;
use crate::pure::mcp::relay::{self, Ticket};
use crate::pure::mcp::server::{self, CallPlan, CallRequest};
use crate::pure::mcp::standalone;
use crate::pure::mcp::upstream_tasks::{self, Handle};
use crate::pure::outcome::Outcome;

use crate::shell::kv::Kv;
use crate::shell::VERSION;

use super::bridge;
use super::client::*;

/// An upstream app's tool list as it offers it to a client that declared `declared`: KV first,
/// else fetched in a session that declares the same (and cached for the app's TTL, per variant).
pub async fn tools_of(app: &AppDefinition, env: &Env, refresh: bool, declared: Variant) -> Result<Vec<Value>, String> {
    let kv = Kv::new(env);
    let key = crate::shell::platform::upstream_tools_key(&app.id, &declared.key());
    if !refresh {
        if let Some(list) = cached_tools(&kv, &app.id, declared).await {
            return Ok(list);
        }
    }
    // Tool lists are shared by every client, so they are fetched with the app's own
    // credentials only, never with one client's forwarded headers.
    let mut upstream = upstream_of(app, env, None).await?;
    upstream.declared = declared;
    let mut client = Client::new(&upstream, env);
    if refresh {
        // A refresh starts from a new session; a cached old one is ended first.
        match kv.get_json::<Session>(&session_key(&upstream)).await {
            Ok(Some(old)) if old.transport == Transport::StreamableHttp => {
                client.conn = Some(Conn::Http(old));
                client.close().await;
            }
            _ => {}
        }
    }
    client.connect(!refresh).await?;
    let list = client.list_tools().await?;
    let ttl = app.backend.as_mcp().map_or(DEFAULT_TOOLS_TTL_S, McpConfig::tools_ttl_seconds);
    let entry = json!({"at": crate::shell::platform::now_ms(), "tools": list});
    let _ = kv.put_json(&key, &entry, ttl).await;
    Ok(list)
}

/// Drops `app_id`'s lists cached for a client that declared `declared` (its tools and its
/// catalog, in KV and in this isolate's memo), since its upstream said one changed: the next
/// request reads them from the upstream again.
pub async fn forget_lists(env: &Env, app_id: &str, declared: Variant) {
    let kv = Kv::new(env);
    let tools = crate::shell::platform::upstream_tools_key(app_id, &declared.key());
    let catalog = crate::shell::platform::upstream_catalog_key(app_id, &declared.key());
    let (a, b) = futures::future::join(kv.delete(&tools), kv.delete(&catalog)).await;
    if let Err(e) = a.and(b) {
        crate::shell::log::error(&format!("dropping the cached lists of an upstream app: {e}"));
    }
    crate::shell::memo::forget_catalog(&format!("{app_id}\n{}", declared.key()));
}

/// The cached tool list of a variant, unless a refresh re-read the empty variant's list after
/// it was read (`variant::still_current`).
async fn cached_tools(kv: &Kv, app_id: &str, declared: Variant) -> Option<Vec<Value>> {
    let key = crate::shell::platform::upstream_tools_key(app_id, &declared.key());
    let read_at = |e: &Value| e["at"].as_u64();
    if declared == Variant::none() {
        return kv.get_json::<Value>(&key).await.ok()??["tools"].as_array().cloned();
    }
    let base_key = crate::shell::platform::upstream_tools_key(app_id, &Variant::none().key());
    let (entry, base) = futures::future::join(kv.get_json::<Value>(&key), kv.get_json::<Value>(&base_key)).await;
    let entry = entry.ok()??;
    let base_at = base.ok().flatten().as_ref().and_then(read_at);
    still_current(read_at(&entry)?, base_at).then(|| entry["tools"].as_array().cloned())?
}

/// Calls an upstream MCP tool; relayed notifications go to `emit` as they arrive. The final
/// JSON-RPC response for the client. When `abort` fires first (the client went away, or the
/// relay's timeout ran out) the call is dropped and the upstream told with
/// `notifications/cancelled`; the response then says so.
pub async fn call(
    plan: &CallPlan,
    def: &ServerDefinition,
    env: &Env,
    incoming: &[(String, String)],
    on_start: &mut dyn FnMut(u64, Option<Value>),
    emit: &mut dyn FnMut(Value),
    abort: impl std::future::Future<Output = ()>,
) -> Value {
    let Some(app) = def.apps.get(plan.app_index) else {
        return server::finish_call(plan, Outcome::Failed("the app behind this tool was removed".into()), VERSION);
    };
    let lookup = |name: &str| incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let upstream = match upstream_of(app, env, Some(&lookup)).await {
        Ok(u) => u,
        Err(e) => return server::finish_call(plan, Outcome::Failed(e), VERSION),
    };
    let (name, arguments, mut input, params, task_ttl_ms, if_offered) = match &plan.request {
        CallRequest::Mcp { tool, arguments, input, params, task_ttl_ms, task_if_offered } => {
            (tool.as_str(), arguments, input.clone(), params, *task_ttl_ms, *task_if_offered)
        }
        _ => return server::finish_call(plan, Outcome::Failed("not an upstream MCP call".into()), VERSION),
    };
    let scope = upstream.session_scope.as_str();
    let bind = [def.server_id.as_str(), app.id.as_str(), "tools/call", name, scope, plan.user.as_str()];
    let bridged = bridge::Call { plan, app, bind };
    if crate::pure::mcp::bridge::continues_bridge(&input) {
        return bridge::resume(bridged, env, &input, emit, abort).await;
    }
    if let Err(e) = crate::shell::backend::mcp::relay::open_state(env, &mut input, bind) {
        return e.to_response(&plan.id);
    }
    // A 2025 upstream's requests reach a 2026-07-28 client only through a bridge that holds
    // the call across the client's input rounds (the bridge opens its own connection, and the
    // session's standalone stream). A legacy SSE upstream's connection is known to be bridged
    // before it is opened: the Worker opens none.
    if bridge::wanted_before_connecting(plan, &input, &upstream, task_ttl_ms.is_some(), env) {
        return bridge::start(bridged, env, incoming, name, arguments, &input, params, emit, abort).await;
    }
    let mut client = Client::new(&upstream, env);
    if let Err(e) = client.connect(true).await {
        return server::finish_call(plan, Outcome::Failed(e), VERSION);
    }
    let task_ttl_ms =
        match upstream_tasks::ask(task_ttl_ms, if_offered, client.capabilities().as_ref(), plan.version, name) {
            upstream_tasks::Ask::Task(ttl) => Some(ttl),
            upstream_tasks::Ask::Plain => None,
            upstream_tasks::Ask::Refuse(e) => return e.to_response(&plan.id),
        };
    if task_ttl_ms.is_none() && bridge::wanted(plan, &input, &client, env) {
        drop(client);
        return bridge::start(bridged, env, incoming, name, arguments, &input, params, emit, abort).await;
    }
    // Before the call goes out, so that nothing the upstream sends on it meanwhile is lost.
    let standalone = super::standalone::open(&mut client, &upstream).await;
    // The call's request id is the client's next one (a re-initialized session may renumber
    // it; a cancel then names a request the upstream no longer has, which it ignores).
    on_start(client.last_request_id() + 1, client.http_session());
    let target = client.cancel_target();
    // Requests the upstream sends meanwhile, on the call's stream or the session's standalone
    // one, related to the call or not, go to the client (`ask_client`) or are refused; a
    // refusal is posted back to the upstream beside the call, which may wait for it.
    let live = client.live_target();
    let (refusals, mut refused) = futures::channel::mpsc::unbounded::<(Value, Option<(Session, String)>)>();
    let emit = std::cell::RefCell::new(emit);
    let ask = |n: Value, target: Option<(Session, String)>| match ask_client(
        &n,
        (plan.relay, &plan.user),
        def,
        &upstream,
        env,
        target.as_ref(),
    ) {
        Ok(relayed) => (*emit.borrow_mut())(relayed),
        Err(refusal) => {
            let _ = refusals.unbounded_send((refusal, target));
        }
    };
    let mut relay = |n: Value| {
        if n.get("id").is_some() {
            ask(n, live.borrow().clone());
        } else if server::relays(plan, &n) {
            (*emit.borrow_mut())(n);
        }
    };
    let stream_target = standalone.as_ref().map(super::standalone::Held::target);
    let from_standalone = |n: Value| match standalone::route(&n, plan) {
        standalone::Route::Ask => ask(n, stream_target.clone()),
        standalone::Route::Pass => (*emit.borrow_mut())(n),
        standalone::Route::Drop => {}
    };
    let poster = Client::new(&upstream, env);
    let answering = post_refusals(&poster, &mut refused);
    let answer = {
        // Ends with the call: the stream is aborted when this block drops it.
        let following = super::standalone::follow(standalone, &from_standalone);
        let call = client.call_tool_with(
            name,
            arguments,
            plan.progress_token.as_ref(),
            &input,
            params,
            task_ttl_ms,
            &mut relay,
        );
        futures::pin_mut!(call, abort, answering, following);
        let beside = futures::future::select(answering, following);
        let call = async {
            match futures::future::select(call, beside).await {
                futures::future::Either::Left((answer, _)) => answer,
                futures::future::Either::Right(_) => Err("the upstream call ended without an answer".into()),
            }
        };
        futures::pin_mut!(call);
        match futures::future::select(call, abort).await {
            futures::future::Either::Left((answer, _)) => Some(answer),
            futures::future::Either::Right(_) => None,
        }
    };
    // Refusals the call's end overtook still go out: no upstream request waits on silence.
    while let Ok((refusal, target)) = refused.try_recv() {
        if let Some(t) = target {
            let _ = poster.post_message(&t, &refusal).await;
        }
    }
    match answer {
        Some(Ok(response)) if upstream_tasks::created(&response["result"]).is_some() => {
            task_created(plan, def, &upstream, &response["result"], task_ttl_ms.is_some(), env)
        }
        Some(Ok(mut response)) => {
            match crate::shell::backend::mcp::relay::seal_state(env, &mut response, plan.version, &input, bind) {
                Ok(()) => server::upstream_response(plan, &app.name, &response, VERSION),
                Err(e) => e.to_response(&plan.id),
            }
        }
        Some(Err(e)) => server::finish_call(plan, Outcome::Failed(e), VERSION),
        None => {
            if let Some(target) = &target {
                client.notify_cancelled(target, client.last_request_id(), "the call was cancelled").await;
            }
            server::finish_call(
                plan,
                Outcome::Failed(format!("the call to upstream {} was cancelled", app.name)),
                VERSION,
            )
        }
    }
}

/// Errors for the upstream's requests that cannot go to the client, with the session each came on.
pub(super) type Refusals = futures::channel::mpsc::UnboundedReceiver<(Value, Option<(Session, String)>)>;

/// Posts each refusal to the upstream as it comes (the upstream may be waiting for it to go on);
/// never ends.
pub(super) async fn post_refusals(poster: &Client<'_>, refused: &mut Refusals) {
    while let Some((refusal, target)) = refused.next().await {
        if let Some(t) = target {
            let _ = poster.post_message(&t, &refusal).await;
        }
    }
    futures::future::pending::<()>().await
}

/// The answer to a `tools/call` whose upstream created a task (`result`): the task under
/// Flowgate's id, or a tool error saying why it cannot be relayed.
fn task_created(
    plan: &CallPlan,
    def: &ServerDefinition,
    up: &Upstream,
    result: &Value,
    asked: bool,
    env: &Env,
) -> Value {
    let fail = |why: String| server::finish_call(plan, Outcome::Failed(why), VERSION);
    if !asked {
        return fail(format!("upstream {} answered with a task, which this call did not ask for", up.app_name));
    }
    let Some(task) = upstream_tasks::created(result) else {
        return fail(format!("upstream {} answered with a task Flowgate cannot read", up.app_name));
    };
    let upstream_id = match upstream_tasks::upstream_id(task) {
        Ok(i) => i.to_string(),
        Err(why) => return fail(format!("upstream {} created a task Flowgate cannot relay: {why}", up.app_name)),
    };
    let handle = Handle {
        server_id: def.server_id.clone(),
        app_id: up.app_id.clone(),
        scope: up.session_scope.clone(),
        user: plan.user.clone(),
        upstream_id,
    };
    match crate::shell::backend::mcp::relay::seal_task(env, &handle) {
        Ok(id) => server::relayed_task_created(plan, &upstream_tasks::normalize(task, &id, None), VERSION),
        Err(why) => fail(format!("{why}")),
    }
}

/// What goes to the client for a request the upstream sent while the call (or a task's
/// `tasks/result`) runs, by what the client can take and who it is (`relay::Channel`, backend
/// `user`): the request under a sealed id (a `relay::Ticket` naming the session it came on), or
/// `Err` with the error the upstream gets instead.
pub(super) fn ask_client(
    request: &Value,
    (channel, user): (relay::Channel, &str),
    def: &ServerDefinition,
    up: &Upstream,
    env: &Env,
    target: Option<&(Session, String)>,
) -> Result<Value, Value> {
    let refuse = |why: &str| relay::refusal(request, why);
    relay::decide(request, channel).map_err(|why| refuse(&why))?;
    let Some((session, url)) = target.filter(|(s, _)| s.transport == Transport::Sse || s.session_id.is_some()) else {
        return Err(refuse(&format!(
            "Flowgate cannot relay this request: upstream {} keeps no session, so the client's answer could not \
             reach the call that asked",
            up.app_name
        )));
    };
    let ticket = Ticket {
        server_id: def.server_id.clone(),
        app_id: up.app_id.clone(),
        url: url.clone(),
        session: session.clone(),
        request_id: request.get("id").cloned().unwrap_or(Value::Null),
        scope: up.session_scope.clone(),
        caller: relay::caller_hash(user),
        expires_ms: crate::shell::platform::now_ms() + up.call_timeout.as_millis() as u64,
    };
    let token =
        crate::shell::backend::mcp::relay::seal_ticket(env, &ticket).map_err(|why| refuse(&format!("{why}")))?;
    Ok(relay::relayed_request(request, token))
}

/// An upstream app's catalog (capabilities, resources, templates, prompts) as it offers it to a
/// client that declared `declared`: this isolate's memo, else KV, else read from the upstream
/// (each list whole) in a session declaring the same, and cached per variant for the app's
/// `tools_cache_ttl_seconds`, like its tools. `refresh` reads the upstream now.
pub async fn catalog_of(
    app: &AppDefinition,
    env: &Env,
    refresh: bool,
    declared: Variant,
) -> Result<Rc<Catalog>, String> {
    let (now, fresh_ms) = (crate::shell::platform::now_ms(), crate::shell::memo::fresh_ms(env));
    let key = crate::shell::platform::upstream_catalog_key(&app.id, &declared.key());
    let memo_key = format!("{}\n{}", app.id, declared.key());
    let kv = Kv::new(env);
    if !refresh {
        if let Some(c) = crate::shell::memo::catalog(&memo_key, now, fresh_ms) {
            return Ok(c);
        }
        if let Some(c) = cached_catalog(&kv, &app.id, declared).await {
            let c = Rc::new(c);
            crate::shell::memo::remember_catalog(&memo_key, Rc::clone(&c), now);
            return Ok(c);
        }
    }
    // Shared by every client, so read with the app's own credentials only (as tool lists are).
    let mut upstream = upstream_of(app, env, None).await?;
    upstream.declared = declared;
    let mut client = Client::new(&upstream, env);
    client.connect(true).await?;
    // A session cached before capabilities were kept with it: start one that knows them.
    let capabilities = match client.capabilities() {
        Some(c) => c,
        None => {
            client.connect(false).await?;
            client.capabilities().unwrap_or_else(|| json!({}))
        }
    };
    let has_stream = matches!(&client.conn, Some(Conn::Http(s)) if standalone::has_stream(s));
    let mut c = Catalog { capabilities: capabilities.clone(), fetched_ms: now, has_stream, ..Catalog::default() };
    for list in Catalog::lists_for(&capabilities) {
        *c.items_mut(list) = client.list_all(list).await?;
    }
    let ttl = app.backend.as_mcp().map_or(DEFAULT_TOOLS_TTL_S, McpConfig::tools_ttl_seconds);
    if let Err(e) = kv.put_json(&key, &c, ttl).await {
        crate::shell::log::error(&format!("caching the catalog of upstream app '{}': {e}", app.name));
    }
    let c = Rc::new(c);
    crate::shell::memo::remember_catalog(&memo_key, Rc::clone(&c), crate::shell::platform::now_ms());
    Ok(c)
}

/// The cached catalog of a variant, unless a refresh re-read the empty variant's after it was
/// read (`variant::still_current`).
async fn cached_catalog(kv: &Kv, app_id: &str, declared: Variant) -> Option<Catalog> {
    let key = crate::shell::platform::upstream_catalog_key(app_id, &declared.key());
    if declared == Variant::none() {
        return kv.get_json::<Catalog>(&key).await.ok()?;
    }
    let base_key = crate::shell::platform::upstream_catalog_key(app_id, &Variant::none().key());
    let (entry, base) = futures::future::join(kv.get_json::<Catalog>(&key), kv.get_json::<Catalog>(&base_key)).await;
    let entry = entry.ok()??;
    let base_at = base.ok().flatten().map(|b| b.fetched_ms);
    still_current(entry.fetched_ms, base_at).then_some(entry)
}

/// Makes a request the gateway routed to its upstream app (`resources/read`, `prompts/get`,
/// `completion/complete`), with the client's forwarded headers as a tool call has them; the
/// JSON-RPC response for the client.
pub async fn forward(fwd: &Forward, def: &ServerDefinition, env: &Env, incoming: &[(String, String)]) -> Value {
    let Some(app) = def.apps.get(fwd.app_index) else {
        return server::forward_failed(fwd, "the upstream app was removed from this server");
    };
    let lookup = |name: &str| incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let upstream = match upstream_of(app, env, Some(&lookup)).await {
        Ok(u) => u,
        Err(e) => return server::forward_failed(fwd, &e),
    };
    let name = fwd.name.as_deref().or_else(|| fwd.params.get("name").and_then(Value::as_str)).unwrap_or_default();
    let scope = upstream.session_scope.as_str();
    let bind = [def.server_id.as_str(), app.id.as_str(), fwd.method, name, scope, fwd.user.as_str()];
    let mut params = fwd.params.clone();
    if let Err(e) = crate::shell::backend::mcp::relay::open_state(env, &mut params, bind) {
        return e.to_response(&fwd.id);
    }
    let mut client = Client::new(&upstream, env);
    if let Err(e) = client.connect(true).await {
        return server::forward_failed(fwd, &e);
    }
    let make = |id, s: &Session| session_request(id, fwd.method, params.clone(), s);
    // The answer goes to the client whole: a request the upstream sends meanwhile is refused
    // at once, never left waiting.
    let live = client.live_target();
    let (refusals, mut refused) = futures::channel::mpsc::unbounded();
    let mut refuse = |n: Value| {
        if n.get("id").is_some() {
            let _ = refusals.unbounded_send((relay::refusal_during(&n, fwd.method), live.borrow().clone()));
        }
    };
    let poster = Client::new(&upstream, env);
    let answer = {
        let request = client.request(&make, fwd.name.as_deref(), &[], upstream.call_timeout, &mut refuse);
        let answering = post_refusals(&poster, &mut refused);
        futures::pin_mut!(request, answering);
        match futures::future::select(request, answering).await {
            futures::future::Either::Left((answer, _)) => answer,
            futures::future::Either::Right(_) => Err("the upstream request ended without an answer".into()),
        }
    };
    match answer {
        Ok(mut response) => {
            match crate::shell::backend::mcp::relay::seal_state(env, &mut response, fwd.version, &params, bind) {
                Ok(()) => server::forwarded_response(fwd, &app.name, &response, VERSION),
                Err(e) => e.to_response(&fwd.id),
            }
        }
        Err(e) => server::forward_failed(fwd, &e),
    }
}

/// Takes a client's answer to a relayed request to the upstream that asked, on the session the
/// call runs on: (202, nothing) once the upstream took it, else an HTTP error with a JSON-RPC
/// error saying why (no id: the message answered was a response). `user` is the answering
/// client's backend `user`: the request must have been relayed to it.
pub async fn deliver_answer(
    env: &Env,
    def: &ServerDefinition,
    incoming: &[(String, String)],
    token: &str,
    answer: &Value,
    user: &str,
) -> (u16, Option<Value>) {
    let refuse = |status: u16, why: String| {
        let e = json!({"jsonrpc": "2.0", "id": null, "error": {"code": crate::pure::protocol::jsonrpc::INVALID_REQUEST, "message": why}});
        (status, Some(e))
    };
    let ticket = match crate::shell::backend::mcp::relay::open_ticket(env, token, &def.server_id, user) {
        Ok(t) => t,
        Err(why) => return refuse(400, format!("Answer refused: {why}")),
    };
    let Some(app) = def.apps.iter().find(|a| a.id == ticket.app_id) else {
        return refuse(400, "Answer refused: the app that asked is no longer on this server".into());
    };
    let body = match relay::answer_for_upstream(answer, &ticket) {
        Ok(b) => b,
        Err(why) => return refuse(400, format!("Answer refused: {why}")),
    };
    let lookup = |name: &str| incoming.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let up = match upstream_of(app, env, Some(&lookup)).await {
        Ok(u) => u,
        Err(why) => return refuse(502, format!("The answer could not be passed on: {why}")),
    };
    if up.session_scope != ticket.scope {
        return refuse(
            400,
            "Answer refused: it must come from the caller of the call that asked, with the same forwarded credentials"
                .into(),
        );
    }
    let target = (ticket.session, ticket.url);
    match Client::new(&up, env).post_message(&target, &body).await {
        Ok(status) if (200..300).contains(&status) => (202, None),
        Ok(status) => {
            refuse(502, format!("upstream {} refused the answer (HTTP {status}); the call may have ended", app.name))
        }
        Err(why) => refuse(502, format!("upstream {} could not be reached: {why}", app.name)),
    }
}
