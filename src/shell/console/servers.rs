//! Console routes of MCP servers: Dify-style servers (one per app), multi-app servers, and the
//! mechanics they share (insert, update, rotate, remove, the server's JSON).

use crate::json;
use serde_json::{Map, Value};

use crate::pure::backend::mcp::aggregate::aggregate;
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::error::ApiError;
use crate::pure::ids;
use crate::pure::protocol::names::{self};
use crate::pure::quote::quote_input;
use crate::pure::server::{validate_server, ServerBody, ServerFields, Status};

use crate::shell::cache;
use crate::shell::http::{internal, Incoming};
use crate::shell::platform;
use crate::shell::store::{self, NewServer, ServerRow};

use super::apps::{auth_json, origin, UpstreamName};
use super::{field_error, new_id, Console, Result};

impl Console<'_> {
    // ---- Dify-style servers (one per app) ----

    pub(super) async fn app_server_row(&self, app_id: &str) -> Result<ServerRow> {
        self.app_row(app_id).await?;
        store::get_server_of_app(self.db, app_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("app '{app_id}' has no MCP server; create one with POST")))
    }

    pub(super) async fn get_app_server(&self, app_id: &str) -> Result<Value> {
        let row = self.app_server_row(app_id).await?;
        self.server_json(&row, None).await
    }

    pub(super) async fn create_app_server(&self, app_id: &str, body: &Value) -> Result<Value> {
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

    pub(super) async fn update_app_server(&self, app_id: &str, body: &Value) -> Result<Value> {
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

    pub(super) async fn delete_app_server(&self, app_id: &str) -> Result<Value> {
        let row = self.app_server_row(app_id).await?;
        self.remove_server(&row).await
    }

    /// Dify keys this route by server id; an app id is accepted as well.
    pub(super) async fn rotate_app_server(&self, id: &str, grace_seconds: u64) -> Result<Value> {
        let row = match store::get_server(self.db, id).await? {
            Some(row) => row,
            None => store::get_server_of_app(self.db, id).await?.ok_or_else(|| {
                ApiError::not_found(format!("no MCP server (or app with a server) with id {}", quote_input(id)))
            })?,
        };
        self.rotate_code(row, grace_seconds).await
    }

    // ---- multi-app servers ----

    pub(super) async fn server_row(&self, id: &str) -> Result<ServerRow> {
        store::get_server(self.db, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no MCP server with id {}", quote_input(id))))
    }

    pub(super) async fn list_servers(&self) -> Result<Value> {
        let mut data = Vec::new();
        for row in store::list_servers(self.db).await? {
            data.push(self.server_json(&row, None).await?);
        }
        Ok(json!({ "data": data }))
    }

    pub(super) async fn create_server(&self, body: &Value) -> Result<Value> {
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

    pub(super) async fn check_apps_exist(&self, app_ids: &[String]) -> Result<()> {
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
    pub(super) async fn check_unique_tool_names(&self, app_ids: &[String]) -> Result<()> {
        // (tool name, app name, upstream name and whether prefixed, for an upstream's tools)
        let mut owners: Vec<(String, String, UpstreamName)> = Vec::new();
        for id in app_ids {
            let Some(app) = store::get_app(self.db, id).await?.and_then(|row| row.to_definition().ok()) else {
                continue;
            };
            let names: Vec<(String, UpstreamName)> = match app.backend.as_mcp() {
                Some(c) => {
                    match crate::shell::backend::mcp::call::tools_of(&app, self.env, false, Variant::none()).await {
                        Ok(list) => {
                            let prefixed = c.tool_name_prefix.unwrap_or(true);
                            aggregate(&app.name, &app.id, c, &list)
                                .into_iter()
                                .map(|t| (t.name, Some((t.upstream_name, prefixed))))
                                .collect()
                        }
                        Err(_) => Vec::new(),
                    }
                }
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

    pub(super) async fn get_server(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.server_json(&row, None).await
    }

    pub(super) async fn update_server(&self, id: &str, body: &Value) -> Result<Value> {
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

    pub(super) async fn delete_server(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.remove_server(&row).await
    }

    pub(super) async fn rotate_server(&self, id: &str, grace_seconds: u64) -> Result<Value> {
        let row = self.server_row(id).await?;
        self.rotate_code(row, grace_seconds).await
    }

    /// The newest console writes (`?limit=1..500`, default 100).
    pub(super) async fn audit_log(&self, req: &Incoming) -> Result<Value> {
        let url = req.url()?;
        let mut limit = 100u32;
        if let Some((_, v)) = url.query_pairs().find(|(k, _)| k == "limit") {
            limit = match v.parse::<u32>() {
                Ok(n @ 1..=500) => n,
                _ => return Err(field_error("limit", "must be an integer from 1 to 500")),
            };
        }
        Ok(json!({ "data": self.in_words(store::audit_log(self.db, limit).await?).await? }))
    }

    // ---- shared server mechanics ----

    pub(super) async fn insert_server(
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
            let drawn = self.draw_code(&id)?;
            let new = NewServer {
                id: &id,
                app_id,
                name,
                description,
                code_hash: &drawn.hash,
                code_hint: ids::code_hint(&drawn.code),
                code_sealed: drawn.sealed.as_deref(),
                parameters,
                app_ids,
                now: platform::now_s(),
            };
            if store::insert_server(self.db, &new).await? {
                let row = self.server_row(&id).await?;
                cache::write(self.env, self.db, &row).await?;
                return self.server_json(&row, Some(&drawn.code)).await;
            }
        }
        Err(internal("storing the server", "server code collided three times"))
    }

    pub(super) async fn apply_update(&self, mut row: ServerRow, fields: ServerFields) -> Result<Value> {
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

    pub(super) async fn remove_server(&self, row: &ServerRow) -> Result<Value> {
        store::delete_server(self.db, &row.id).await?;
        cache::remove_server(self.env, row).await?;
        Ok(json!({ "result": "success", "id": row.id }))
    }

    /// A server as the console shows it. The full code and MCP URL only when just drawn (an
    /// admin sees them again through `reveal_url`).
    pub(super) async fn server_json(&self, row: &ServerRow, code: Option<&str>) -> Result<Value> {
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
        super::server_code::codes_json(row, &mut out);
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
