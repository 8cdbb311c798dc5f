//! The console API under `/console/api`: the app registry, Dify-compatible server routes and
//! console tokens. Every request is decided by `pure::console_roles` (the caller's role against
//! the route's) before it is routed.

use serde_json::json;
use std::rc::Rc;

use crate::runtime::{Context, Db, Env, Method, Response};

use crate::pure::config;
use crate::pure::console_access;
use crate::pure::console_roles::{self, Identity, NamedToken, Role};
use crate::pure::error::ApiError;
use crate::pure::ids;
use crate::pure::quote::quote_input;

use crate::shell::http::{self, internal, read_json, Incoming, MAX_CONSOLE_BODY};
use crate::shell::memo;
use crate::shell::platform;
use crate::shell::store::{self};

mod access;
mod activity;
mod apps;
mod servers;

type Result<T> = std::result::Result<T, ApiError>;

/// Routes `/console/api/<rest>` for `caller` once its role allows the route; every write (and
/// code rotation), refused ones included, is recorded in the audit log under the caller's name.
/// `shown_path` is the path as messages may quote it.
pub async fn handle(req: Incoming, env: &Env, caller: &Identity, rest: &[&str], shown_path: &str) -> Result<Response> {
    let method = req.method();
    let writes = !matches!(method, Method::Get | Method::Head | Method::Options) || rest.last() == Some(&"refresh");
    let decision = console_roles::decide(rest, method.as_ref(), caller.role);
    let result = match decision.error(caller, method.as_ref(), shown_path) {
        Some(refused) => Err(refused),
        None => route(req, env, caller, rest, shown_path).await,
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
                    crate::shell::log::error(&format!("recording a console token's use: {}", e.message));
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
        crate::shell::log::error(&format!("writing the audit log: {}", e.message));
    }
}

async fn route(mut req: Incoming, env: &Env, caller: &Identity, rest: &[&str], shown_path: &str) -> Result<Response> {
    let db = env.d1(platform::D1);
    let method = req.method();
    let origin = req.url().map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    let public_url = platform::settings(env).public_url.clone();
    let path = quote_input(shown_path);
    let not_allowed = |allow: &'static str| Err(ApiError::method_not_allowed(method.as_ref(), &path, allow));
    let refs = crate::shell::secrets::ref_policy(env);
    let c = Console { env, db: &db, public_base: config::public_base(public_url.as_deref(), &origin), refs: &refs };
    let (status, body) = match (rest, &method) {
        // The index: where the OpenAPI document of this API is (a static asset, see wrangler.toml),
        // and who the caller is (the web console asks it to learn whether Access signed it in).
        ([], Method::Get) => (
            200,
            json!({
                "openapi": "/console/api/openapi.json",
                "version": crate::shell::VERSION,
                "caller": {"actor": caller.actor(), "role": caller.role.as_str()},
            }),
        ),
        ([], _) => return not_allowed("GET"),
        (["apps"], Method::Get) => (200, c.list_apps().await?),
        (["apps"], Method::Post) => (201, c.create_app(&read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?),
        (["apps"], _) => return not_allowed("GET, POST"),
        (["apps", "import"], Method::Post) => {
            (201, c.import_app(&read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["apps", "import"], _) => return not_allowed("POST"),
        (["apps", id], Method::Get) => (200, c.app_row(id).await?.to_console_json()),
        (["apps", id], Method::Put) => {
            (200, c.replace_app(id, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["apps", id], Method::Delete) => (200, c.delete_app(id).await?),
        (["apps", _], _) => return not_allowed("GET, PUT, DELETE"),
        (["apps", id, "tools", "refresh"], Method::Post) => (200, c.refresh_tools(id).await?),
        (["apps", _, "tools", "refresh"], _) => return not_allowed("POST"),
        (["apps", id, "server"], Method::Get) => (200, c.get_app_server(id).await?),
        (["apps", id, "server"], Method::Post) => {
            (201, c.create_app_server(id, &read_json(&mut req, MAX_CONSOLE_BODY, true).await?).await?)
        }
        (["apps", id, "server"], Method::Put) => {
            (200, c.update_app_server(id, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["apps", id, "server"], Method::Delete) => (200, c.delete_app_server(id).await?),
        (["apps", _, "server"], _) => return not_allowed("GET, POST, PUT, DELETE"),
        // Dify's route is a GET keyed by the server id; POST is accepted too, and so is the app id.
        (["apps", id, "server", "refresh"], Method::Get | Method::Post) => {
            console_access::writing_get(caller, method.as_ref(), &path)?;
            (200, c.rotate_app_server(id).await?)
        }
        (["apps", _, "server", "refresh"], _) => return not_allowed("GET, POST"),
        (["servers"], Method::Get) => (200, c.list_servers().await?),
        (["servers"], Method::Post) => {
            (201, c.create_server(&read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["servers"], _) => return not_allowed("GET, POST"),
        (["servers", id], Method::Get) => (200, c.get_server(id).await?),
        (["servers", id], Method::Put) => {
            (200, c.update_server(id, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["servers", id], Method::Delete) => (200, c.delete_server(id).await?),
        (["servers", _], _) => return not_allowed("GET, PUT, DELETE"),
        (["servers", id, "refresh"], Method::Get | Method::Post) => {
            console_access::writing_get(caller, method.as_ref(), &path)?;
            (200, c.rotate_server(id).await?)
        }
        (["servers", _, "refresh"], _) => return not_allowed("GET, POST"),
        (["servers", id, "auth"], Method::Get) => (200, c.get_auth(id).await?),
        (["servers", id, "auth"], Method::Put) => {
            (200, c.set_auth(id, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["servers", _, "auth"], _) => return not_allowed("GET, PUT"),
        (["servers", id, "keys"], Method::Get) => (200, c.list_keys(id).await?),
        (["servers", id, "keys"], Method::Post) => {
            (201, c.create_key(id, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["servers", _, "keys"], _) => return not_allowed("GET, POST"),
        (["servers", id, "keys", key_id], Method::Delete) => (200, c.revoke_key(id, key_id).await?),
        (["servers", _, "keys", _], _) => return not_allowed("DELETE"),
        (["servers", id, "tasks"], Method::Get) => (200, c.list_tasks(id, &req).await?),
        (["servers", _, "tasks"], _) => return not_allowed("GET"),
        (["servers", id, "tasks", task], Method::Get) => (200, c.task(id, task).await?),
        (["servers", _, "tasks", _], _) => return not_allowed("GET"),
        (["servers", id, "tasks", task, "cancel"], Method::Post) => (200, c.cancel_task(id, task).await?),
        (["servers", _, "tasks", _, "cancel"], _) => return not_allowed("POST"),
        (["servers", id, "usage"], Method::Get) => (200, c.usage(id, &req).await?),
        (["servers", _, "usage"], _) => return not_allowed("GET"),
        (["audit"], Method::Get) => (200, c.audit_log(&req).await?),
        (["secrets", "reseal"], Method::Post) => (200, c.reseal_all().await?),
        (["secrets", "reseal"], _) => return not_allowed("POST"),
        (["audit"], _) => return not_allowed("GET"),
        (["tokens"], Method::Get) => (200, c.list_tokens().await?),
        (["tokens"], Method::Post) => {
            (201, c.create_token(caller, &read_json(&mut req, MAX_CONSOLE_BODY, false).await?).await?)
        }
        (["tokens"], _) => return not_allowed("GET, POST"),
        (["tokens", id], Method::Delete) => (200, c.revoke_token(id).await?),
        (["tokens", _], _) => return not_allowed("DELETE"),
        _ => return Err(ApiError::not_found(format!("no console route {} {path}", method.as_ref()))),
    };
    Ok(http::json(status, &body))
}

fn field_error(field: &str, message: &str) -> ApiError {
    ApiError::validation(vec![crate::pure::error::FieldError { field: field.into(), message: message.into() }])
}

fn new_id() -> Result<String> {
    ids::new_id_from(&mut crate::runtime::fill_random).map_err(|e| internal("drawing a random id", e))
}

struct Console<'a> {
    env: &'a Env,
    db: &'a Db,
    /// Where MCP URLs point: `PUBLIC_URL`, or the request's origin (`Err`: PUBLIC_URL is unusable).
    public_base: std::result::Result<String, String>,
    /// The `$NAME` references this Worker allows.
    refs: &'a config::RefPolicy,
}
