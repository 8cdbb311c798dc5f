//! Console routes of the app registry: create, import, replace, delete, reseal, and refresh an
//! upstream app's tools.

use crate::json;
use serde_json::Value;

use crate::pure::app::{self, AppSpec};
use crate::pure::backend::dify::import as dify_import;
use crate::pure::backend::mcp::aggregate::aggregate;
use crate::pure::backend::mcp::config::McpConfig;
use crate::pure::backend::mcp::failed_fetch;
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::client_auth::AuthMode;
use crate::pure::definition::AppDefinition;
use crate::pure::error::ApiError;
use crate::pure::mode::Mode;
use crate::pure::protocol::names::ToolOrigin;
use crate::pure::quote::quote_input;

use crate::shell::backend::dify::import as dify;
use crate::shell::cache;
use crate::shell::platform;
use crate::shell::store::{self, AppRow, ServerRow};

use super::{field_error, misconfigured, new_id, reseal_failed, Console, Result};

impl Console<'_> {
    // ---- apps ----

    pub(super) async fn list_apps(&self) -> Result<Value> {
        let apps = store::list_apps(self.db).await?;
        let mut data: Vec<Value> = apps.iter().map(AppRow::to_console_json).collect();
        self.add_publications(&mut data).await?;
        Ok(json!({ "data": data }))
    }

    pub(super) async fn app_row(&self, id: &str) -> Result<AppRow> {
        store::get_app(self.db, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no app with id {}", quote_input(id))))
    }

    /// Backends inside private networks are refused unless `ALLOW_PRIVATE_BACKENDS` is set.
    pub(super) fn check_private(&self, urls: &[(&'static str, &str)]) -> Result<()> {
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
    pub(super) async fn check_signing_key(&self, spec: &AppSpec) -> Result<()> {
        Ok(crate::shell::backend::mcp::client_assertion::check_key(self.env, &spec.backend).await?)
    }

    /// Literal credentials are stored only sealed.
    pub(super) fn seal(&self, spec: &mut AppSpec) -> Result<()> {
        Ok(crate::shell::secrets::seal_backend(self.env, &mut spec.backend)?)
    }

    /// The base of MCP URLs, checked before a code is drawn (a code is shown only once).
    pub(super) fn public_base(&self) -> Result<&str> {
        match &self.public_base {
            Ok(base) => Ok(base),
            Err(why) => Err(misconfigured(why)),
        }
    }

    pub(super) async fn create_app(&self, body: &Value) -> Result<Value> {
        let mut spec = app::validate_app_in(body, None, self.refs)?;
        self.check_private(&spec.config.urls())?;
        self.check_signing_key(&spec).await?;
        self.seal(&mut spec)?;
        let id = new_id()?;
        store::insert_app(self.db, &id, &spec, platform::now_s()).await?;
        self.app_response(&id, &spec).await
    }

    pub(super) async fn app_response(&self, id: &str, spec: &AppSpec) -> Result<Value> {
        let mut out = self.app_row(id).await?.to_console_json();
        let mut warnings = app::warnings(spec);
        warnings.extend(crate::shell::secrets::unset_references(self.env, &spec.backend));
        out["warnings"] = json!(warnings);
        Ok(out)
    }

    pub(super) async fn import_app(&self, body: &Value) -> Result<Value> {
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
        let key =
            crate::shell::secrets::resolve(self.env, api_key).map_err(|e| field_error("api_key", &format!("{e}")))?;
        let info = dify::get_json(base, &key, "/info").await?;
        dify_import::check_expected_mode(body.get("mode"), &info)?;
        let parameters = dify::get_json(base, &key, "/parameters").await?;
        let app_body = dify_import::app_body_from_dify(&info, &parameters, base, api_key, body.get("outputs"))?;
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
        if dify_import::needs_outputs_note(app_body["mode"].as_str().and_then(Mode::parse), app_body.get("outputs")) {
            out["note"] = json!(dify_import::OUTPUTS_NOTE.replace("{id}", &id));
        }
        Ok(out)
    }

    /// Re-seals every stored literal credential with the current `SECRETS_KEY` (step two of a
    /// key rotation, after setting `SECRETS_KEY_PREVIOUS` to the old key).
    pub(super) async fn reseal_all(&self) -> Result<Value> {
        let mut resealed = 0;
        for row in store::list_apps(self.db).await? {
            let mut backend = row.backend();
            let changed = crate::shell::secrets::reseal_backend(self.env, &mut backend).map_err(reseal_failed)?;
            if changed {
                store::update_app_backend(self.db, &row.id, &backend, platform::now_s()).await?;
                self.rewrite_cache_of_app(&row.id).await?;
                resealed += 1;
            }
        }
        Ok(json!({ "resealed_apps": resealed, "resealed_server_codes": self.reseal_codes().await? }))
    }

    pub(super) async fn replace_app(&self, id: &str, body: &Value) -> Result<Value> {
        let row = self.app_row(id).await?;
        let mut spec = app::validate_app_in(body, Some(&row.backend()), self.refs)?;
        self.check_private(&spec.config.urls())?;
        self.check_signing_key(&spec).await?;
        self.seal(&mut spec)?;
        store::update_app(self.db, id, &spec, platform::now_s()).await?;
        self.rewrite_cache_of_app(id).await?;
        self.app_response(id, &spec).await
    }

    pub(super) async fn delete_app(&self, id: &str) -> Result<Value> {
        self.app_row(id).await?;
        let servers = store::servers_of_app(self.db, id).await?;
        store::delete_app(self.db, id).await?;
        for server in &servers {
            match store::get_server(self.db, &server.id).await? {
                Some(still) => cache::write(self.env, self.db, &still).await?,
                None => cache::remove_server(self.env, server).await?,
            }
        }
        Ok(json!({ "result": "success", "id": id }))
    }

    pub(super) async fn rewrite_cache_of_app(&self, app_id: &str) -> Result<()> {
        for server in store::servers_of_app(self.db, app_id).await? {
            cache::write(self.env, self.db, &server).await?;
        }
        Ok(())
    }

    /// Re-reads an upstream MCP app's tool list now (a new session) and caches it.
    pub(super) async fn refresh_tools(&self, id: &str) -> Result<Value> {
        let row = self.app_row(id).await?;
        if Mode::parse(&row.mode) != Some(Mode::Mcp) {
            return Err(ApiError::bad_request(format!(
                "app '{id}' is a {} app; only mcp apps have upstream tools",
                row.mode
            )));
        }
        let app =
            row.to_definition().map_err(|why| ApiError::bad_request(format!("app '{id}' cannot be used: {why}")))?;
        let tools = crate::shell::backend::mcp::call::tools_of(&app, self.env, true, Variant::none())
            .await
            .map_err(|e| ApiError::new(422, "upstream_failed", e))?;
        // The endpoint of this isolate asks again at once rather than after a failure's window.
        for v in Variant::all() {
            crate::shell::memo::forget_failed_fetch(&failed_fetch::key(failed_fetch::List::Tools, &app, &v.key()));
        }
        let exposed = aggregate(&app.name, &app.id, mcp_config(&app)?, &tools);
        let mut out = json!({
            "upstream_tools": tools.iter().filter_map(|t| t["name"].as_str()).collect::<Vec<_>>(),
            "exposed_tools": exposed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        });
        // Resources, templates and prompts are re-read with the tools; per server the app is
        // in, what it exposes and the URIs another app of that server already serves.
        match crate::shell::backend::mcp::call::catalog_of(&app, self.env, true, Variant::none()).await {
            Ok(catalog) => {
                for v in Variant::all() {
                    let key = failed_fetch::key(failed_fetch::List::Catalog, &app, &v.key());
                    crate::shell::memo::forget_failed_fetch(&key);
                }
                out["capabilities"] = catalog.capabilities.clone();
                let mut servers = Vec::new();
                for row in store::servers_of_app(self.db, id).await? {
                    let def = store::load_definition(self.db, &row).await?;
                    let mut catalogs = crate::pure::mcp::gateway::Catalogs::default();
                    for other in def.apps.iter().filter(|a| a.backend.as_mcp().is_some()) {
                        match crate::shell::backend::mcp::call::catalog_of(other, self.env, false, Variant::none())
                            .await
                        {
                            Ok(c) => {
                                catalogs.0.insert(other.id.clone(), c);
                            }
                            Err(e) => {
                                crate::shell::log::error(&format!("catalog of upstream app '{}': {e}", other.name))
                            }
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
}

/// A server's client authentication as the console shows it: the mode, and an `oauth`
/// server's issuer settings.
pub(super) fn auth_json(row: &ServerRow) -> Value {
    match (row.auth_mode(), row.oauth()) {
        (AuthMode::OAuth, Some(o)) => json!({ "mode": "oauth", "oauth": o.to_console_json() }),
        (mode, _) => json!({ "mode": mode.as_str() }),
    }
}

/// The upstream settings of an app the caller knows is an `mcp` app.
pub(super) fn mcp_config(app: &AppDefinition) -> Result<&McpConfig> {
    app.backend.as_mcp().ok_or_else(|| ApiError::bad_request(format!("app '{}' is not an mcp app", app.id)))
}

/// For a tool of an upstream MCP app: its upstream name, and whether the app prefixes it.
pub(super) type UpstreamName = Option<(String, bool)>;

/// How a clashing tool came to have its name (`check_unique_tool_names`).
pub(super) fn origin(upstream: &UpstreamName) -> ToolOrigin<'_> {
    match upstream {
        Some((upstream_name, prefixed)) => ToolOrigin::Upstream { upstream_name, prefixed: *prefixed },
        None => ToolOrigin::App,
    }
}
