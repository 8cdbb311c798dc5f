//! Editing what exists: a server in place (`PATCH /servers/{id}`, rules in `pure::server_edit`),
//! and where each app is published (the apps list and an app's page name the servers).

use crate::json;
use serde_json::Value;

use crate::pure::server_edit::{check_parameters, validate_edit, ServerKind};

use crate::shell::store::{self, codes};

use super::{Console, Result};

impl Console<'_> {
    /// Changes any of a server's name, description, parameter descriptions, status and (one of
    /// several apps) its apps; the cached definition is rewritten before the answer, as every
    /// console write does.
    pub(super) async fn edit_server(&self, id: &str, body: &Value) -> Result<Value> {
        let row = self.server_row(id).await?;
        let kind = if row.app_id.is_some() { ServerKind::OneApp } else { ServerKind::Multi };
        let fields = validate_edit(body, kind, row.app_id.as_deref())?;
        let app_ids = match &fields.app_ids {
            Some(ids) => {
                self.check_apps_exist(ids).await?;
                ids.clone()
            }
            None => store::app_ids_of_server(self.db, &row.id).await?,
        };
        if let Some(parameters) = &fields.parameters {
            let mut inputs = Vec::new();
            for app_id in &app_ids {
                if let Some(app) = store::get_app(self.db, app_id).await?.and_then(|a| a.to_definition().ok()) {
                    inputs.push((app.name, app.form.iter().map(|f| f.variable.clone()).collect()));
                }
            }
            check_parameters(parameters, &inputs)?;
        }
        self.apply_update(row, fields).await
    }

    /// An app as the console shows it, with the servers that publish it.
    pub(super) async fn get_app(&self, id: &str) -> Result<Value> {
        let mut one = vec![self.app_row(id).await?.to_console_json()];
        self.add_publications(&mut one).await?;
        Ok(one.pop().unwrap_or_default())
    }

    /// Adds to each app (console JSON) `servers`: the servers that publish it, `{id, name, kind}`
    /// (`app` for its own one-app server, `multi` for a server of several apps).
    pub(super) async fn add_publications(&self, apps: &mut [Value]) -> Result<()> {
        let all = codes::publications(self.db).await?;
        for app in apps.iter_mut() {
            let id = app["id"].as_str().unwrap_or_default().to_string();
            let servers: Vec<Value> = all
                .iter()
                .filter(|p| p.app_id == id)
                .map(|p| json!({"id": p.server_id, "name": p.server_name, "kind": if p.one_app { "app" } else { "multi" }}))
                .collect();
            app["servers"] = Value::Array(servers);
        }
        Ok(())
    }
}
