//! The console API under `/console/api`: the app registry, Dify-compatible server routes and
//! console tokens. Every request is decided by `pure::console_roles` (the caller's role against
//! the route's) before it is routed.

use serde_json::{json, Map, Value};
use std::rc::Rc;

use crate::runtime::{Context, Db, Env, Method, Response};

use crate::pure::app::{self, AppSpec};
use crate::pure::backend::dify::import as dify_import;
use crate::pure::backend::mcp::aggregate::aggregate;
use crate::pure::backend::mcp::config::McpConfig;
use crate::pure::backend::mcp::failed_fetch;
use crate::pure::client_auth::{self, AuthMode, MAX_KEYS_PER_SERVER};
use crate::pure::config;
use crate::pure::console_access;
use crate::pure::console_roles::{self, Identity, NamedToken, Role};
use crate::pure::console_tokens::{self, MAX_TOKENS};
use crate::pure::definition::AppDefinition;
use crate::pure::error::ApiError;
use crate::pure::ids;
use crate::pure::mcp::names::{self, ToolOrigin};
use crate::pure::quote::quote_input;
use crate::pure::server::{validate_server, ServerBody, ServerFields, Status};
use crate::pure::usage;

use crate::shell::cache;
use crate::shell::backend::dify::import as dify;
use crate::shell::http::{self, internal, read_json, Incoming, MAX_CONSOLE_BODY};
use crate::shell::memo;
use crate::shell::platform;
use crate::shell::store::{self, AppRow, KeyInsert, NewServer, ServerRow};

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
    let public_url = env.runtime().setting(config::PUBLIC_URL);
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
    ids::new_id().map_err(|e| internal("drawing a random id", e))
}

struct Console<'a> {
    env: &'a Env,
    db: &'a Db,
    /// Where MCP URLs point: `PUBLIC_URL`, or the request's origin (`Err`: PUBLIC_URL is unusable).
    public_base: std::result::Result<String, String>,
    /// The `$NAME` references this Worker allows.
    refs: &'a config::RefPolicy,
}

impl Console<'_> {
    // ---- apps ----

    async fn list_apps(&self) -> Result<Value> {
        let apps = store::list_apps(self.db).await?;
        Ok(json!({ "data": apps.iter().map(AppRow::to_console_json).collect::<Vec<_>>() }))
    }

    async fn app_row(&self, id: &str) -> Result<AppRow> {
        store::get_app(self.db, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no app with id {}", quote_input(id))))
    }

    /// Backends inside private networks are refused unless `ALLOW_PRIVATE_BACKENDS` is set.
    fn check_private(&self, urls: &[(&'static str, &str)]) -> Result<()> {
        if crate::shell::outbound::guard_from_env(self.env) {
            return Ok(());
        }
        // Hosts listed in ALLOW_PRIVATE_BACKENDS (instead of `true`) are allowed, and only they.
        let allow = crate::shell::outbound::private_allow();
        let mut urls = urls.to_vec();
        urls.retain(|(_, u)| {
            let host = crate::pure::web_url::Url::parse(u).ok();
            !host.as_ref().and_then(|u| u.host_str()).is_some_and(|h| allow.allows(h))
        });
        let bad = crate::pure::url::private_backend_urls(&urls);
        if bad.is_empty() {
            return Ok(());
        }
        Err(ApiError::validation(
            bad.into_iter()
                .map(|(field, why)| crate::pure::error::FieldError {
                    field: field.to_string(),
                    message: format!("{why}; private backends need ALLOW_PRIVATE_BACKENDS=true"),
                })
                .collect(),
        ))
    }

    /// An upstream OAuth private key (`private_key_jwt`) must be one WebCrypto imports.
    async fn check_signing_key(&self, spec: &AppSpec) -> Result<()> {
        crate::shell::backend::mcp::client_assertion::check_key(self.env, &spec.backend)
            .await
            .map_err(|e| field_error("backend.oauth.private_key", &e))
    }

    /// Literal credentials are stored only sealed.
    fn seal(&self, spec: &mut AppSpec) -> Result<()> {
        crate::shell::secrets::seal_backend(self.env, &mut spec.backend).map_err(|e| match e.split_once(' ') {
            Some((field, message)) if field.starts_with("backend.") => field_error(field, message),
            _ => field_error("backend", &e),
        })
    }

    /// The base of MCP URLs, checked before a code is drawn (a code is shown only once).
    fn public_base(&self) -> Result<&str> {
        self.public_base.as_deref().map_err(|e| ApiError::new(503, "misconfigured", e.clone()))
    }

    async fn create_app(&self, body: &Value) -> Result<Value> {
        let mut spec = app::validate_app_in(body, None, self.refs)?;
        self.check_private(&spec.config.urls())?;
        self.check_signing_key(&spec).await?;
        self.seal(&mut spec)?;
        let id = new_id()?;
        store::insert_app(self.db, &id, &spec, platform::now_s()).await?;
        self.app_response(&id, &spec).await
    }

    async fn app_response(&self, id: &str, spec: &AppSpec) -> Result<Value> {
        let mut out = self.app_row(id).await?.to_console_json();
        out["warnings"] = json!(app::warnings(spec));
        Ok(out)
    }

    async fn import_app(&self, body: &Value) -> Result<Value> {
        let field = |k: &str| body.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        let (Some(base_url), Some(api_key)) = (field("base_url"), field("api_key")) else {
            let mut errs = crate::pure::error::Errors::default();
            if field("base_url").is_none() {
                errs.add("base_url", "is required: the Dify Service API base URL, e.g. https://api.dify.ai/v1");
            }
            if field("api_key").is_none() {
                errs.add("api_key", "is required: the app's API key (app-…) or a $SECRET_NAME");
            }
            return Err(ApiError::validation(errs.0));
        };
        if let Err(why) = crate::pure::url::check_backend_url(base_url) {
            return Err(ApiError::validation(vec![crate::pure::error::FieldError {
                field: "base_url".into(),
                message: why.into(),
            }]));
        }
        let base = base_url.trim_end_matches('/');
        self.check_private(&[("backend.base_url", base)])?;
        // A sealed value would be opened and sent to `base_url`: a credential from the console is
        // never taken as already sealed.
        if crate::pure::sealed::is_sealed(api_key) {
            return Err(field_error("api_key", crate::pure::sealed::REFUSED_FROM_CONSOLE));
        }
        let key = crate::shell::secrets::resolve(self.env, api_key).map_err(|e| field_error("api_key", &e))?;
        let info = dify::get_json(base, &key, "/info").await?;
        let parameters = dify::get_json(base, &key, "/parameters").await?;
        let app_body = dify_import::app_body_from_dify(&info, &parameters, base, api_key, body.get("outputs"))
            .map_err(|m| ApiError::new(422, "not_a_dify_app", m))?;
        // Dify's form may hold what Flowgate refuses; say so as an import problem.
        let mut spec = app::validate_app_in(&app_body, None, self.refs).map_err(|e| {
            ApiError::new(
                422,
                "unsupported_dify_app",
                format!("the Dify app's settings cannot be imported: {}", e.message),
            )
        })?;
        self.seal(&mut spec)?;
        let id = new_id()?;
        store::insert_app(self.db, &id, &spec, platform::now_s()).await?;
        let mut out = self.app_response(&id, &spec).await?;
        if dify_import::needs_outputs_note(app_body["mode"].as_str().unwrap_or_default(), app_body.get("outputs")) {
            out["note"] = json!(dify_import::OUTPUTS_NOTE.replace("{id}", &id));
        }
        Ok(out)
    }

    /// Re-seals every stored literal credential with the current `SECRETS_KEY` (step two of a
    /// key rotation, after setting `SECRETS_KEY_PREVIOUS` to the old key).
    async fn reseal_all(&self) -> Result<Value> {
        let mut resealed = 0;
        for row in store::list_apps(self.db).await? {
            let mut backend = row.backend();
            let changed = crate::shell::secrets::reseal_backend(self.env, &mut backend)
                .map_err(|e| ApiError::new(409, "reseal_failed", e))?;
            if changed {
                store::update_app_backend(self.db, &row.id, &backend, platform::now_s()).await?;
                self.rewrite_cache_of_app(&row.id).await?;
                resealed += 1;
            }
        }
        Ok(json!({ "resealed_apps": resealed }))
    }

    async fn replace_app(&self, id: &str, body: &Value) -> Result<Value> {
        let row = self.app_row(id).await?;
        let mut spec = app::validate_app_in(body, Some(&row.backend()), self.refs)?;
        self.check_private(&spec.config.urls())?;
        self.check_signing_key(&spec).await?;
        self.seal(&mut spec)?;
        store::update_app(self.db, id, &spec, platform::now_s()).await?;
        self.rewrite_cache_of_app(id).await?;
        self.app_response(id, &spec).await
    }

    async fn delete_app(&self, id: &str) -> Result<Value> {
        self.app_row(id).await?;
        let servers = store::servers_of_app(self.db, id).await?;
        store::delete_app(self.db, id).await?;
        for server in &servers {
            match store::get_server(self.db, &server.id).await? {
                Some(still) => cache::write(self.env, self.db, &still).await?,
                None => cache::remove(self.env, &server.code_hash).await?,
            }
        }
        Ok(json!({ "result": "success", "id": id }))
    }

    async fn rewrite_cache_of_app(&self, app_id: &str) -> Result<()> {
        for server in store::servers_of_app(self.db, app_id).await? {
            cache::write(self.env, self.db, &server).await?;
        }
        Ok(())
    }

    /// Re-reads an upstream MCP app's tool list now (a new session) and caches it.
    async fn refresh_tools(&self, id: &str) -> Result<Value> {
        let row = self.app_row(id).await?;
        if row.mode != "mcp" {
            return Err(ApiError::bad_request(format!(
                "app '{id}' is a {} app; only mcp apps have upstream tools",
                row.mode
            )));
        }
        let app =
            row.to_definition().map_err(|why| ApiError::bad_request(format!("app '{id}' cannot be used: {why}")))?;
        let tools = crate::shell::backend::mcp::call::tools_of(&app, self.env, true)
            .await
            .map_err(|e| ApiError::new(422, "upstream_failed", e))?;
        // The endpoint of this isolate asks again at once rather than after a failure's window.
        crate::shell::memo::forget_failed_fetch(&failed_fetch::key(failed_fetch::List::Tools, &app, ""));
        let exposed = aggregate(&app.name, &app.id, mcp_config(&app)?, &tools);
        let mut out = json!({
            "upstream_tools": tools.iter().filter_map(|t| t["name"].as_str()).collect::<Vec<_>>(),
            "exposed_tools": exposed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        });
        // Resources, templates and prompts are re-read with the tools; per server the app is
        // in, what it exposes and the URIs another app of that server already serves.
        match crate::shell::backend::mcp::call::catalog_of(&app, self.env, true).await {
            Ok(catalog) => {
                crate::shell::memo::forget_failed_fetch(&failed_fetch::key(failed_fetch::List::Catalog, &app, ""));
                out["capabilities"] = catalog.capabilities.clone();
                let mut servers = Vec::new();
                for row in store::servers_of_app(self.db, id).await? {
                    let def = store::load_definition(self.db, &row).await?;
                    let mut catalogs = crate::pure::mcp::gateway::Catalogs::default();
                    for other in def.apps.iter().filter(|a| a.backend.as_mcp().is_some()) {
                        match crate::shell::backend::mcp::call::catalog_of(other, self.env, false).await {
                            Ok(c) => {
                                catalogs.0.insert(other.id.clone(), c);
                            }
                            Err(e) => crate::shell::log::error(&format!("catalog of upstream app '{}': {e}", other.name)),
                        }
                    }
                    let g = crate::pure::mcp::gateway::Gateway::new(&def, &catalogs);
                    for c in g.collisions() {
                        crate::shell::log::error(&format!("server '{}': {c}", def.name));
                    }
                    servers.push(json!({
                        "server_id": def.server_id,
                        "resources": g.resource_uris(),
                        "prompts": g.prompt_names(),
                        "skills": g.skill_uris(),
                        "collisions": g.collisions(),
                    }));
                }
                out["servers"] = servers.into();
            }
            Err(e) => out["catalog_error"] = e.into(),
        }
        Ok(out)
    }

    // ---- Dify-style servers (one per app) ----

    async fn app_server_row(&self, app_id: &str) -> Result<ServerRow> {
        self.app_row(app_id).await?;
        store::get_server_of_app(self.db, app_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("app '{app_id}' has no MCP server; create one with POST")))
    }

    async fn get_app_server(&self, app_id: &str) -> Result<Value> {
        let row = self.app_server_row(app_id).await?;
        self.server_json(&row, None).await
    }

    async fn create_app_server(&self, app_id: &str, body: &Value) -> Result<Value> {
        let fields = validate_server(body, ServerBody::CreateForApp)?;
        let app = self.app_row(app_id).await?;
        if store::get_server_of_app(self.db, app_id).await?.is_some() {
            return Err(ApiError::conflict(format!(
                "app '{app_id}' already has an MCP server; update it with PUT or rotate its code"
            )));
        }
        let description = fields.description.unwrap_or_else(|| app.description.clone());
        self.insert_server(
            Some(app_id),
            &app.name,
            &description,
            &fields.parameters.unwrap_or_default(),
            std::slice::from_ref(&app.id),
        )
        .await
    }

    async fn update_app_server(&self, app_id: &str, body: &Value) -> Result<Value> {
        let fields = validate_server(body, ServerBody::UpdateForApp)?;
        let row = self.app_server_row(app_id).await?;
        if fields.id.as_deref() != Some(row.id.as_str()) {
            return Err(ApiError::validation(vec![crate::pure::error::FieldError {
                field: "id".into(),
                message: format!("is not the id of app '{app_id}''s server ({})", row.id),
            }]));
        }
        self.apply_update(row, fields).await
    }

    async fn delete_app_server(&self, app_id: &str) -> Result<Value> {
        let row = self.app_server_row(app_id).await?;
        self.remove_server(&row).await
    }

    /// Dify keys this route by server id; an app id is accepted as well.
    async fn rotate_app_server(&self, id: &str) -> Result<Value> {
        let row = match store::get_server(self.db, id).await? {
            Some(row) => row,
            None => store::get_server_of_app(self.db, id).await?.ok_or_else(|| {
                ApiError::not_found(format!("no MCP server (or app with a server) with id {}", quote_input(id)))
            })?,
        };
        self.rotate(row).await
    }

    // ---- multi-app servers ----

    async fn server_row(&self, id: &str) -> Result<ServerRow> {
        store::get_server(self.db, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no MCP server with id {}", quote_input(id))))
    }

    async fn list_servers(&self) -> Result<Value> {
        let mut data = Vec::new();
        for row in store::list_servers(self.db).await? {
            data.push(self.server_json(&row, None).await?);
        }
        Ok(json!({ "data": data }))
    }

    async fn create_server(&self, body: &Value) -> Result<Value> {
        let fields = validate_server(body, ServerBody::CreateMulti)?;
        let app_ids = fields.app_ids.unwrap_or_default();
        self.check_apps_exist(&app_ids).await?;
        self.insert_server(
            None,
            fields.name.as_deref().unwrap_or_default(),
            fields.description.as_deref().unwrap_or_default(),
            &fields.parameters.unwrap_or_default(),
            &app_ids,
        )
        .await
    }

    async fn check_apps_exist(&self, app_ids: &[String]) -> Result<()> {
        let missing = store::missing_apps(self.db, app_ids).await?;
        if missing.is_empty() {
            return self.check_unique_tool_names(app_ids).await;
        }
        Err(ApiError::validation(vec![crate::pure::error::FieldError {
            field: "app_ids".into(),
            message: format!(
                "no app with id {}",
                missing.iter().map(|m| quote_input(m)).collect::<Vec<_>>().join(", ")
            ),
        }]))
    }

    /// The tools of a multi-app server must have distinct names; an upstream MCP app's names
    /// come from its (cached) tool list. An upstream that cannot be listed now is not held
    /// against the config.
    async fn check_unique_tool_names(&self, app_ids: &[String]) -> Result<()> {
        // (tool name, app name, upstream name and whether prefixed, for an upstream's tools)
        let mut owners: Vec<(String, String, UpstreamName)> = Vec::new();
        for id in app_ids {
            let Some(app) = store::get_app(self.db, id).await?.and_then(|row| row.to_definition().ok()) else {
                continue;
            };
            let names: Vec<(String, UpstreamName)> = match app.backend.as_mcp() {
                Some(c) => match crate::shell::backend::mcp::call::tools_of(&app, self.env, false).await {
                    Ok(list) => {
                        let prefixed = c.tool_name_prefix.unwrap_or(true);
                        aggregate(&app.name, &app.id, c, &list)
                            .into_iter()
                            .map(|t| (t.name, Some((t.upstream_name, prefixed))))
                            .collect()
                    }
                    Err(_) => Vec::new(),
                },
                None => vec![(names::sanitize_name(&app.name, &app.id), None)],
            };
            for (name, upstream) in names {
                if let Some((_, other, other_upstream)) = owners.iter().find(|(n, ..)| *n == name) {
                    let message =
                        names::clash_message(&name, (other, origin(other_upstream)), (&app.name, origin(&upstream)));
                    return Err(field_error("app_ids", &message));
                }
                owners.push((name, app.name.clone(), upstream));
            }
        }
        Ok(())
    }

    async fn get_server(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.server_json(&row, None).await
    }

    async fn update_server(&self, id: &str, body: &Value) -> Result<Value> {
        let fields = validate_server(body, ServerBody::UpdateMulti)?;
        let row = self.server_row(id).await?;
        if row.app_id.is_some() && fields.app_ids.is_some() {
            return Err(ApiError::validation(vec![crate::pure::error::FieldError {
                field: "app_ids".into(),
                message: "this server belongs to one app (created under /apps/{id}/server); its apps cannot change"
                    .into(),
            }]));
        }
        if let Some(ids) = &fields.app_ids {
            self.check_apps_exist(ids).await?;
        }
        self.apply_update(row, fields).await
    }

    async fn delete_server(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.remove_server(&row).await
    }

    async fn rotate_server(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.rotate(row).await
    }

    /// The newest console writes (`?limit=1..500`, default 100).
    async fn audit_log(&self, req: &Incoming) -> Result<Value> {
        let url = req.url()?;
        let mut limit = 100u32;
        if let Some((_, v)) = url.query_pairs().find(|(k, _)| k == "limit") {
            limit = match v.parse::<u32>() {
                Ok(n @ 1..=500) => n,
                _ => return Err(field_error("limit", "must be an integer from 1 to 500")),
            };
        }
        Ok(json!({ "data": store::audit_log(self.db, limit).await? }))
    }

    // ---- client authentication ----

    async fn get_auth(&self, server_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        Ok(auth_json(&row))
    }

    /// Sets how the server's clients authenticate; the cached definition follows at once.
    async fn set_auth(&self, server_id: &str, body: &Value) -> Result<Value> {
        let (mode, oauth) = client_auth::validate_auth_body(body)?;
        let row = self.server_row(server_id).await?;
        if let Some(o) = &oauth {
            let mut urls = vec![("oauth.issuer", o.issuer.as_str())];
            urls.extend(o.jwks_uri.as_deref().map(|u| ("oauth.jwks_uri", u)));
            self.check_private(&urls)?;
        }
        store::set_auth_mode(self.db, &row.id, mode, oauth.as_ref(), platform::now_s()).await?;
        let row = self.server_row(&row.id).await?;
        cache::write(self.env, self.db, &row).await?;
        let mut out = self.server_json(&row, None).await?;
        let no_keys = mode == AuthMode::Key && store::list_keys(self.db, &row.id).await?.is_empty();
        out["warnings"] = json!(if no_keys {
            vec![format!(
                "the server has no client key yet: every MCP request is refused until one is created with \
                 POST /console/api/servers/{}/keys",
                row.id
            )]
        } else {
            Vec::new()
        });
        Ok(out)
    }

    async fn list_keys(&self, server_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        let keys = store::list_keys(self.db, &row.id).await?;
        Ok(json!({ "data": keys.iter().map(store::KeyRow::to_console_json).collect::<Vec<_>>() }))
    }

    /// Draws a client key: shown in this answer only, stored as its SHA-256 and a hint.
    async fn create_key(&self, server_id: &str, body: &Value) -> Result<Value> {
        let name = client_auth::validate_key_body(body)?;
        let row = self.server_row(server_id).await?;
        // The name's uniqueness and the cap are the insert's to decide (one statement: see
        // `store::insert_key`), so nothing is read first.
        let taken = || {
            ApiError::conflict(format!(
                "server '{}' already has a client key named {}; choose another name, or revoke that key first",
                row.id,
                quote_input(&name)
            ))
        };
        let full = || {
            ApiError::conflict(format!(
                "server '{}' has {MAX_KEYS_PER_SERVER} client keys, the most it may have; revoke one first",
                row.id
            ))
        };
        let id = new_id()?;
        // Two random 190-bit keys hashing alike is not expected; retry a few times anyway.
        for _ in 0..3 {
            let key = client_auth::new_key().map_err(|e| internal("drawing a client key", e))?;
            let new = store::NewKey {
                id: &id,
                server_id: &row.id,
                name: &name,
                key_hash: &key.hash,
                hint: &key.hint,
                now: platform::now_s(),
            };
            match store::insert_key(self.db, &new, MAX_KEYS_PER_SERVER).await? {
                KeyInsert::Stored => {}
                KeyInsert::NameTaken => return Err(taken()),
                KeyInsert::Full => return Err(full()),
                KeyInsert::HashCollision => continue,
            }
            cache::write(self.env, self.db, &row).await?;
            let stored = store::get_key(self.db, &row.id, &id)
                .await?
                .ok_or_else(|| internal("storing the client key", "the key was not found after it was stored"))?;
            return Ok(json!({
                "id": stored.id,
                "name": stored.name,
                "key": key.secret,
                "hint": stored.hint,
                "created_at": stored.created_at,
            }));
        }
        Err(internal("storing the client key", "the key's hash collided three times"))
    }

    /// Revokes a client key; on this isolate it stops working before the answer.
    async fn revoke_key(&self, server_id: &str, key_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        if store::get_key(self.db, &row.id, key_id).await?.is_none() {
            return Err(ApiError::not_found(format!(
                "server '{}' has no client key with id {}",
                row.id,
                quote_input(key_id)
            )));
        }
        store::delete_key(self.db, &row.id, key_id).await?;
        cache::write(self.env, self.db, &row).await?;
        Ok(json!({ "result": "success", "id": key_id }))
    }

    // ---- console tokens ----

    async fn list_tokens(&self) -> Result<Value> {
        let tokens = store::list_console_tokens(self.db).await?;
        Ok(json!({ "data": tokens.iter().map(store::ConsoleTokenRow::to_console_json).collect::<Vec<_>>() }))
    }

    /// Draws a console token: shown in this answer only, stored as its SHA-256 and a hint.
    async fn create_token(&self, caller: &Identity, body: &Value) -> Result<Value> {
        let (name, role) = console_tokens::validate_token_body(body)?;
        let taken = || {
            ApiError::conflict(format!(
                "a console token named {} already exists; choose another name, or revoke that token first",
                quote_input(&name)
            ))
        };
        let full = || {
            ApiError::conflict(format!(
                "there are {MAX_TOKENS} console tokens, the most there may be; revoke one first"
            ))
        };
        let id = new_id()?;
        let created_by = caller.actor();
        // Two random 190-bit tokens hashing alike is not expected; retry a few times anyway.
        for _ in 0..3 {
            let token = console_tokens::new_token().map_err(|e| internal("drawing a console token", e))?;
            let new = store::NewConsoleToken {
                id: &id,
                name: &name,
                role: role.as_str(),
                token_hash: &token.hash,
                hint: &token.hint,
                created_by: &created_by,
                now: platform::now_s(),
            };
            match store::insert_console_token(self.db, &new, MAX_TOKENS).await? {
                KeyInsert::Stored => {}
                KeyInsert::NameTaken => return Err(taken()),
                KeyInsert::Full => return Err(full()),
                KeyInsert::HashCollision => continue,
            }
            let stored = store::get_console_token(self.db, &id)
                .await?
                .ok_or_else(|| internal("storing the console token", "the token was not found after it was stored"))?;
            let mut out = stored.to_console_json();
            out["token"] = json!(token.secret);
            return Ok(out);
        }
        Err(internal("storing the console token", "the token's hash collided three times"))
    }

    /// Revokes a console token: D1 first, then this isolate's memo, so here it stops working
    /// before the answer (other isolates within the memo's few seconds).
    async fn revoke_token(&self, id: &str) -> Result<Value> {
        let Some(hash) = store::console_token_hash(self.db, id).await? else {
            return Err(ApiError::not_found(format!("no console token with id {}", quote_input(id))));
        };
        store::delete_console_token(self.db, id).await?;
        memo::forget_console_token(&hash);
        Ok(json!({ "result": "success", "id": id }))
    }

    // ---- durable tasks ----

    /// `?limit=1..100` (default 50), newest first; `?before=<created_at>` pages back.
    async fn list_tasks(&self, server_id: &str, req: &Incoming) -> Result<Value> {
        self.server_row(server_id).await?;
        let url = req.url()?;
        let mut limit = 50u32;
        let mut before = i64::MAX;
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "limit" => match v.parse::<u32>() {
                    Ok(n @ 1..=100) => limit = n,
                    _ => return Err(field_error("limit", "must be an integer from 1 to 100")),
                },
                "before" => {
                    before = v
                        .parse()
                        .map_err(|_| field_error("before", "must be a created_at value from an earlier page"))?
                }
                _ => {}
            }
        }
        let rows = store::list_tasks(self.db, server_id, before, limit).await?;
        let next = (rows.len() == limit as usize).then(|| rows.last().and_then(|r| r["created_at"].as_i64())).flatten();
        Ok(json!({ "data": rows, "next_before": next }))
    }

    async fn task(&self, server_id: &str, task_id: &str) -> Result<Value> {
        self.server_row(server_id).await?;
        store::get_task(self.db, server_id, task_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("server '{server_id}' has no task {}", quote_input(task_id))))
    }

    async fn cancel_task(&self, server_id: &str, task_id: &str) -> Result<Value> {
        let row = self.task(server_id, task_id).await?;
        if matches!(row["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
            return Err(ApiError::conflict(format!(
                "task '{task_id}' is already {}",
                row["status"].as_str().unwrap_or("")
            )));
        }
        let cancel = crate::pure::task_contract::TaskCall::Cancel { server_id: server_id.to_string(), owner: None };
        crate::shell::tasks::call(self.env, task_id, &cancel)
            .await
            .map_err(|e| internal("cancelling the task", e))?
            .ok_or_else(|| ApiError::not_found(format!("task '{task_id}' has expired")))?;
        self.task(server_id, task_id).await
    }

    // ---- usage metrics ----

    /// `?from=&to=&step=` (`pure::usage::parse_query`): series per tool and in all, and the
    /// server's last 50 failures. This isolate's unflushed counts are written first.
    async fn usage(&self, server_id: &str, req: &Incoming) -> Result<Value> {
        self.server_row(server_id).await?;
        let url = req.url()?;
        let pairs: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let q =
            usage::parse_query(&pairs, platform::now_s()).map_err(|(field, message)| field_error(field, &message))?;
        if let Err(e) = crate::shell::usage::flush_now(self.env).await {
            crate::shell::log::error(&format!("writing usage metrics: {e}"));
        }
        let (rows, failures) =
            crate::shell::usage::read(self.db, server_id, &q).await.map_err(|e| internal("reading usage metrics", e))?;
        let mut out = usage::report(&q, &rows);
        out["server_id"] = json!(server_id);
        out["failures"] = Value::Array(failures);
        out["flush_seconds"] = json!(crate::shell::usage::flush_seconds(self.env));
        Ok(out)
    }

    // ---- shared server mechanics ----

    async fn insert_server(
        &self,
        app_id: Option<&str>,
        name: &str,
        description: &str,
        parameters: &Map<String, Value>,
        app_ids: &[String],
    ) -> Result<Value> {
        self.public_base()?;
        let id = new_id()?;
        // A collision of two random 95-bit codes is not expected; retry a few times anyway.
        for _ in 0..3 {
            let code = ids::new_server_code().map_err(|e| internal("drawing a server code", e))?;
            let hash = ids::sha256_hex(&code);
            let new = NewServer {
                id: &id,
                app_id,
                name,
                description,
                code_hash: &hash,
                code_hint: ids::code_hint(&code),
                parameters,
                app_ids,
                now: platform::now_s(),
            };
            if store::insert_server(self.db, &new).await? {
                let row = self.server_row(&id).await?;
                cache::write(self.env, self.db, &row).await?;
                return self.server_json(&row, Some(&code)).await;
            }
        }
        Err(internal("storing the server", "server code collided three times"))
    }

    async fn apply_update(&self, mut row: ServerRow, fields: ServerFields) -> Result<Value> {
        if let Some(name) = fields.name {
            row.name = name;
        }
        if let Some(d) = fields.description {
            row.description = d;
        }
        if let Some(p) = fields.parameters {
            row.parameters = Value::Object(p).to_string();
        }
        if let Some(st) = fields.status {
            row.status = st.as_str().to_string();
        }
        store::update_server(self.db, &row, fields.app_ids.as_deref(), platform::now_s()).await?;
        let row = self.server_row(&row.id).await?;
        cache::write(self.env, self.db, &row).await?;
        self.server_json(&row, None).await
    }

    async fn rotate(&self, row: ServerRow) -> Result<Value> {
        self.public_base()?;
        for _ in 0..3 {
            let code = ids::new_server_code().map_err(|e| internal("drawing a server code", e))?;
            let hash = ids::sha256_hex(&code);
            if store::rotate_code(self.db, &row.id, &hash, ids::code_hint(&code), platform::now_s()).await? {
                // The old code must stop working: its entry goes, the new one is written.
                cache::remove(self.env, &row.code_hash).await?;
                let fresh = self.server_row(&row.id).await?;
                cache::write(self.env, self.db, &fresh).await?;
                return self.server_json(&fresh, Some(&code)).await;
            }
        }
        Err(internal("rotating the server code", "server code collided three times"))
    }

    async fn remove_server(&self, row: &ServerRow) -> Result<Value> {
        store::delete_server(self.db, &row.id).await?;
        cache::remove(self.env, &row.code_hash).await?;
        Ok(json!({ "result": "success", "id": row.id }))
    }

    /// A server as the console shows it. The full code and MCP URL only when just drawn.
    async fn server_json(&self, row: &ServerRow, code: Option<&str>) -> Result<Value> {
        let mut out = json!({
            "id": row.id,
            "name": row.name,
            "description": row.description,
            "status": Status::parse(&row.status).map_or("inactive", Status::as_str),
            "parameters": row.parameters(),
            "server_code_hint": row.code_hint,
            "auth": auth_json(row),
            "created_at": row.created_at,
            "updated_at": row.updated_at,
        });
        // `kind` says which routes manage it: `/apps/{app_id}/server` or `/servers/{id}`.
        match &row.app_id {
            Some(app_id) => {
                out["kind"] = json!("app");
                out["app_id"] = json!(app_id);
            }
            None => {
                out["kind"] = json!("multi");
                out["app_ids"] = json!(store::app_ids_of_server(self.db, &row.id).await?);
            }
        }
        if let Some(code) = code {
            out["server_code"] = json!(code);
            out["mcp_url"] = json!(format!("{}/mcp/server/{code}/mcp", self.public_base()?));
        }
        Ok(out)
    }
}

/// A server's client authentication as the console shows it: the mode, and an `oauth`
/// server's issuer settings.
fn auth_json(row: &ServerRow) -> Value {
    match (row.auth_mode(), row.oauth()) {
        (AuthMode::OAuth, Some(o)) => json!({ "mode": "oauth", "oauth": o.to_console_json() }),
        (mode, _) => json!({ "mode": mode.as_str() }),
    }
}

/// The upstream settings of an app the caller knows is an `mcp` app.
fn mcp_config(app: &AppDefinition) -> Result<&McpConfig> {
    app.backend.as_mcp().ok_or_else(|| ApiError::bad_request(format!("app '{}' is not an mcp app", app.id)))
}

/// For a tool of an upstream MCP app: its upstream name, and whether the app prefixes it.
type UpstreamName = Option<(String, bool)>;

/// How a clashing tool came to have its name (`check_unique_tool_names`).
fn origin(upstream: &UpstreamName) -> ToolOrigin<'_> {
    match upstream {
        Some((upstream_name, prefixed)) => ToolOrigin::Upstream { upstream_name, prefixed: *prefixed },
        None => ToolOrigin::App,
    }
}
