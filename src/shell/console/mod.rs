//! The console API under `/console/api`: the app registry, Dify-compatible server routes and
//! console tokens. Every request is resolved against the one route table
//! (`pure::console_routes`) and decided by `pure::console_roles` (the caller's role against the
//! route's) before the route's handler runs.

use crate::json;
use std::rc::Rc;

use crate::runtime::{Context, Db, Env, Method, Response};

use crate::pure::config;
use crate::pure::console_access;
use crate::pure::console_roles::{self, Identity, NamedToken, Role};
use crate::pure::console_routes::{self, Handler, Matched};
use crate::pure::error::ApiError;
use crate::pure::ids;
use crate::pure::quote::quote_input;

use crate::shell::http::{self, read_json, Doing, Incoming, MAX_CONSOLE_BODY};
use crate::shell::memo;
use crate::shell::platform;
use crate::shell::store::{self};

mod access;
mod activity;
mod apps;
mod audit;
mod call_log;
mod connection_test;
mod edits;
mod playground;
mod server_code;
mod servers;

type Result<T> = std::result::Result<T, ApiError>;

/// Runs `/console/api/<rest>` for `caller` once the route table has a route for it and the
/// caller's role allows the route; every write (and
/// code rotation), refused ones included, is recorded in the audit log under the caller's name.
/// `shown_path` is the path as messages may quote it.
pub async fn handle(
    req: Incoming,
    env: &Env,
    ctx: &Context,
    caller: &Identity,
    rest: &[&str],
    shown_path: &str,
) -> Result<Response> {
    let method = req.method();
    let writes = !matches!(method, Method::Get | Method::Head | Method::Options) || rest.last() == Some(&"refresh");
    let decision = console_roles::decide(console_routes::resolve(rest, method.as_ref()), caller.role);
    let result = match decision.into_result(caller, method.as_ref(), shown_path) {
        Ok(found) => run(req, env, ctx, caller, found, shown_path).await,
        Err(refused) => Err(refused),
    };
    if writes {
        let status = match &result {
            Ok(r) => r.status_code(),
            Err(e) => e.status,
        };
        audit(env, &caller.actor(), method.as_ref(), rest, status).await;
    }
    result
}

/// The caller a console token's SHA-256 names, or `None` when no stored token has it (unknown,
/// or revoked). Memoized on this isolate for a few seconds; its use is recorded at most once per
/// token and hour per isolate, off the response path.
pub async fn token_identity(env: &Env, ctx: &Context, hash: &str) -> Result<Option<Identity>> {
    let now = platform::now_ms();
    let identity = match memo::console_token(hash, now) {
        Some(known) => Identity::clone(&known),
        None => {
            let db = env.d1(platform::D1);
            let Some(row) = store::console_token_by_hash(&db, hash).await? else {
                memo::forget_console_token(hash);
                return Ok(None);
            };
            // The column is CHECKed; a role this deploy does not know opens nothing.
            let Some(role) = Role::parse(&row.role) else {
                crate::shell::log::error(&format!("console token {} has an unknown role; refused", row.id));
                return Ok(None);
            };
            let identity = Identity::named(role, NamedToken { id: row.id, name: row.name });
            memo::remember_console_token(hash, Rc::new(identity.clone()), now);
            identity
        }
    };
    if let Some(token) = &identity.token {
        if memo::first_use_of_console_token(&token.id, now) {
            let (env, id) = (env.clone(), token.id.clone());
            ctx.wait_until(async move {
                let db = env.d1(platform::D1);
                if let Err(e) = store::touch_console_token(&db, &id, platform::now_s()).await {
                    crate::shell::log::error(&format!("recording a console token's use: {}", e.report().message));
                }
            });
        }
    }
    Ok(Some(identity))
}

async fn audit(env: &Env, actor: &str, method: &str, rest: &[&str], status: u16) {
    let db = env.d1(platform::D1);
    // Ids are replaced in the action so that actions group; the first id is the target.
    let is_id = |s: &str| s.len() >= 16 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let action =
        format!("{method} /{}", rest.iter().map(|s| if is_id(s) { "{id}" } else { s }).collect::<Vec<_>>().join("/"));
    let target = rest.iter().find(|s| is_id(s)).map(|s| s.to_string());
    if let Err(e) = store::record_audit(
        &db,
        &crate::shell::log::request_id(),
        actor,
        &action,
        target.as_deref(),
        status,
        platform::now_ms() as i64,
    )
    .await
    {
        crate::shell::log::error(&format!("writing the audit log: {}", e.report().message));
    }
}

/// Runs the handler of a route the table resolved and the caller's role allows.
async fn run(
    mut req: Incoming,
    env: &Env,
    ctx: &Context,
    caller: &Identity,
    found: Matched<'_>,
    shown_path: &str,
) -> Result<Response> {
    let db = env.d1(platform::D1);
    let method = req.method();
    let origin = req.url().map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    let public_url = platform::settings(env).public_url.clone();
    let path = quote_input(shown_path);
    let refs = crate::shell::secrets::ref_policy(env);
    let c =
        Console { env, ctx, db: &db, public_base: config::public_base(public_url.as_deref(), &origin), refs: &refs };
    let route = found.route;
    if route.writes {
        console_access::writing_get(caller, method.as_ref(), &path)?;
    }
    let [id, sub] = found.params;
    let req = &mut req;
    let body = match route.handler {
        // The index: where the OpenAPI document of this API is (a static asset, see wrangler.toml),
        // and who the caller is (the web console asks it to learn whether Access signed it in).
        Handler::Index => json!({
            "openapi": "/console/api/openapi.json",
            "version": crate::shell::VERSION,
            "caller": {"actor": caller.actor(), "role": caller.role.as_str()},
        }),
        Handler::ListApps => c.list_apps().await?,
        Handler::CreateApp => c.create_app(&json_body(req).await?).await?,
        Handler::ImportApp => c.import_app(&json_body(req).await?).await?,
        Handler::GetApp => c.get_app(id).await?,
        Handler::ReplaceApp => c.replace_app(id, &json_body(req).await?).await?,
        Handler::DeleteApp => c.delete_app(id).await?,
        Handler::RefreshTools => c.refresh_tools(id).await?,
        Handler::GetAppServer => c.get_app_server(id).await?,
        // An empty body is an empty object here: publishing needs no field.
        Handler::CreateAppServer => c.create_app_server(id, &read_json(req, MAX_CONSOLE_BODY, true).await?).await?,
        Handler::UpdateAppServer => c.update_app_server(id, &json_body(req).await?).await?,
        Handler::DeleteAppServer => c.delete_app_server(id).await?,
        Handler::RotateAppServer => c.rotate_app_server(id, server_code::rotation_grace(req).await?).await?,
        Handler::ListServers => c.list_servers().await?,
        Handler::CreateServer => c.create_server(&json_body(req).await?).await?,
        Handler::GetServer => c.get_server(id).await?,
        Handler::UpdateServer => c.update_server(id, &json_body(req).await?).await?,
        Handler::DeleteServer => c.delete_server(id).await?,
        Handler::RotateServer => c.rotate_server(id, server_code::rotation_grace(req).await?).await?,
        Handler::GetAuth => c.get_auth(id).await?,
        Handler::SetAuth => c.set_auth(id, &json_body(req).await?).await?,
        Handler::ListKeys => c.list_keys(id).await?,
        Handler::CreateKey => c.create_key(id, &json_body(req).await?).await?,
        Handler::RevokeKey => c.revoke_key(id, sub).await?,
        Handler::ListTasks => c.list_tasks(id, req).await?,
        Handler::GetTask => c.task(id, sub).await?,
        Handler::CancelTask => c.cancel_task(id, sub).await?,
        Handler::Usage => c.usage(id, req).await?,
        Handler::AuditLog => c.audit_log(req).await?,
        Handler::ResealSecrets => c.reseal_all().await?,
        Handler::ListTokens => c.list_tokens().await?,
        Handler::CreateToken => c.create_token(caller, &json_body(req).await?).await?,
        Handler::RevokeToken => c.revoke_token(id).await?,
        Handler::ListTools => c.list_tools(id).await?,
        // The endpoint's own answer: an SSE stream, or one JSON-RPC response.
        Handler::CallTool => return c.call_tool(id, &caller.actor(), &json_body(req).await?).await,
        Handler::CallLog => c.call_log(id, req).await?,
        Handler::GetCallLogSettings => c.call_log_settings(id).await?,
        Handler::SetCallLogSettings => c.set_call_log_settings(id, &json_body(req).await?).await?,
        Handler::EditServer => c.edit_server(id, &json_body(req).await?).await?,
        Handler::RevealServerUrl => c.reveal_url(id).await?,
        Handler::TestApp => c.test_app(id).await?,
    };
    Ok(http::json(route.ok, &body))
}

/// A console request's JSON body (required).
async fn json_body(req: &mut Incoming) -> Result<serde_json::Value> {
    read_json(req, MAX_CONSOLE_BODY, false).await
}

fn field_error(field: &str, message: &str) -> ApiError {
    ApiError::field(field, message.to_string())
}

/// 503: a setting of this Worker (PUBLIC_URL, SECRETS_KEY) does not read.
fn misconfigured(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(503, "misconfigured", format!("{why}"))
}

/// 409: a stored secret could not be sealed again under the current key (step two of a key
/// rotation stops at it).
fn reseal_failed(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(409, "reseal_failed", format!("{why}"))
}

fn new_id() -> Result<String> {
    ids::new_id_from(&mut crate::runtime::fill_random).doing("drawing a random id")
}

struct Console<'a> {
    env: &'a Env,
    /// The request's context: what runs beside the answer (a playground call's stream).
    ctx: &'a Context,
    db: &'a Db,
    /// Where MCP URLs point: `PUBLIC_URL`, or the request's origin (`Err`: PUBLIC_URL is unusable).
    public_base: std::result::Result<String, String>,
    /// The `$NAME` references this Worker allows.
    refs: &'a config::RefPolicy,
}
