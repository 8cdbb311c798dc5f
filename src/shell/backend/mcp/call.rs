//! A client's request to an upstream MCP app, end to end: its tool list and catalog (cached in
//! KV), a `tools/call` relayed with its notifications and the upstream's requests to the
//! client, and the other methods the gateway forwards.

use futures::StreamExt;

use crate::runtime::Env;
use serde_json::{json, Value};

use std::rc::Rc;

use crate::pure::backend::mcp::catalog::Catalog;
use crate::pure::backend::mcp::config::{McpConfig, DEFAULT_TOOLS_TTL_S};
use crate::pure::backend::mcp::session::{session_request, Session};
use crate::pure::backend::mcp::transport::Transport;
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::mcp::gateway::Forward;
use crate::pure::mcp::relay::{self, Ticket};
use crate::pure::mcp::server::{self, CallPlan, CallRequest};
use crate::pure::mcp::upstream_tasks::{self, Handle};
use crate::pure::outcome::Outcome;

use crate::shell::kv::Kv;
use crate::shell::VERSION;

/// KV expiry of a reused upstream session (upstreams drop idle sessions on their own anyway).
use super::client::*;

/// An upstream app's tool list: KV first, else fetched (and cached for the app's TTL).
pub async fn tools_of(app: &AppDefinition, env: &Env, refresh: bool) -> Result<Vec<Value>, String> {
    let kv = Kv::new(env);
    if !refresh {
        if let Ok(Some(Value::Array(list))) = kv.get_json::<Value>(&tools_key(&app.id)).await {
            return Ok(list);
        }
    }
    // Tool lists are shared by every client, so they are fetched with the app's own
    // credentials only, never with one client's forwarded headers.
    let upstream = upstream_of(app, env, None).await?;
    let mut client = Client::new(&upstream, env);
    if refresh {
        // A refresh starts from a new session; a cached old one is ended first.
        if let Ok(Some(old)) = kv.get_json::<Session>(&session_key(&app.id, &upstream.session_scope)).await {
            client.conn = Some(Conn::Http(old));
            client.close().await;
        }
    }
    client.connect(!refresh).await?;
    let list = client.list_tools().await?;
    let ttl = app.backend.as_mcp().map_or(DEFAULT_TOOLS_TTL_S, McpConfig::tools_ttl_seconds);
    let _ = kv.put_json(&tools_key(&app.id), &list, ttl).await;
    Ok(list)
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
    if let Err(e) = crate::shell::backend::mcp::relay::open_state(env, &mut input, bind) {
        return e.to_response(&plan.id);
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
    // The call's request id is the client's next one (a re-initialized session may renumber
    // it; a cancel then names a request the upstream no longer has, which it ignores).
    on_start(client.last_request_id() + 1, client.http_session());
    let target = client.cancel_target();
    // Requests the upstream sends meanwhile go to the client (`ask_client`), or are refused; a
    // refusal is posted back to the upstream beside the call, which waits for it.
    let live = client.live_target();
    let (refusals, mut refused) = futures::channel::mpsc::unbounded::<(Value, Option<(Session, String)>)>();
    let mut relay = |n: Value| {
        if n.get("id").is_some() {
            let target = live.borrow().clone();
            match ask_client(&n, plan, def, &upstream, env, target.as_ref()) {
                Ok(relayed) => emit(relayed),
                Err(refusal) => {
                    let _ = refusals.unbounded_send((refusal, target));
                }
            }
        } else if server::relays(plan, &n) {
            emit(n);
        }
    };
    let answering = async {
        let poster = Client::new(&upstream, env);
        while let Some((refusal, target)) = refused.next().await {
            if let Some(t) = target {
                let _ = poster.post_message(&t, &refusal).await;
            }
        }
        futures::future::pending::<()>().await
    };
    let answer = {
        let call = client.call_tool_with(
            name,
            arguments,
            plan.progress_token.as_ref(),
            &input,
            params,
            task_ttl_ms,
            &mut relay,
        );
        futures::pin_mut!(call, abort, answering);
        let call = async {
            match futures::future::select(call, answering).await {
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

/// What goes to the client for a request the upstream sent while the call runs: the request
/// under a sealed id (a `relay::Ticket` naming the session it came on), or `Err` with the error
/// the upstream gets instead.
fn ask_client(
    request: &Value,
    plan: &CallPlan,
    def: &ServerDefinition,
    up: &Upstream,
    env: &Env,
    target: Option<&(Session, String)>,
) -> Result<Value, Value> {
    let refuse = |why: &str| relay::refusal(request, why);
    relay::decide(request, plan.relay).map_err(|why| refuse(&why))?;
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
        caller: relay::caller_hash(&plan.user),
        expires_ms: crate::shell::platform::now_ms() + up.call_timeout.as_millis() as u64,
    };
    let token =
        crate::shell::backend::mcp::relay::seal_ticket(env, &ticket).map_err(|why| refuse(&format!("{why}")))?;
    Ok(relay::relayed_request(request, token))
}

/// An upstream app's catalog (capabilities, resources, templates, prompts): this isolate's memo,
/// else KV, else read from the upstream (each list whole) and cached for the app's
/// `tools_cache_ttl_seconds`, like its tools. `refresh` reads the upstream now.
pub async fn catalog_of(app: &AppDefinition, env: &Env, refresh: bool) -> Result<Rc<Catalog>, String> {
    let (now, fresh_ms) = (crate::shell::platform::now_ms(), crate::shell::memo::fresh_ms(env));
    let key = crate::shell::platform::upstream_catalog_key(&app.id);
    let kv = Kv::new(env);
    if !refresh {
        if let Some(c) = crate::shell::memo::catalog(&app.id, now, fresh_ms) {
            return Ok(c);
        }
        if let Ok(Some(c)) = kv.get_json::<Catalog>(&key).await {
            let c = Rc::new(c);
            crate::shell::memo::remember_catalog(&app.id, Rc::clone(&c), now);
            return Ok(c);
        }
    }
    // Shared by every client, so read with the app's own credentials only (as tool lists are).
    let upstream = upstream_of(app, env, None).await?;
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
    let mut c = Catalog { capabilities: capabilities.clone(), ..Catalog::default() };
    for list in Catalog::lists_for(&capabilities) {
        *c.items_mut(list) = client.list_all(list).await?;
    }
    let ttl = app.backend.as_mcp().map_or(DEFAULT_TOOLS_TTL_S, McpConfig::tools_ttl_seconds);
    if let Err(e) = kv.put_json(&key, &c, ttl).await {
        crate::shell::log::error(&format!("caching the catalog of upstream app '{}': {e}", app.name));
    }
    let c = Rc::new(c);
    crate::shell::memo::remember_catalog(&app.id, Rc::clone(&c), crate::shell::platform::now_ms());
    Ok(c)
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
    match client.request(&make, fwd.name.as_deref(), &[], upstream.call_timeout, &mut |_| {}).await {
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
