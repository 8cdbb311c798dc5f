//! The audit log in words and names (`pure::audit_words`): each entry gets a `summary` and the
//! current name of its target, read in one query for the whole page.

use crate::json;
use serde_json::Value;

use crate::pure::audit_words::{self, TargetKind};
use crate::runtime::{SqlValue, Statement};

use crate::shell::http::Doing;

use super::{Console, Result};

impl Console<'_> {
    pub(super) async fn in_words(&self, mut entries: Vec<Value>) -> Result<Vec<Value>> {
        let ids: Vec<&str> = entries.iter().filter_map(|e| e["target"].as_str()).collect();
        // (kind, id, name): a page holds at most 500 entries, a list is enough (and less bundle).
        let mut names: Vec<(String, String, String)> = Vec::new();
        if !ids.is_empty() {
            let sql = "SELECT 'app' AS kind, id, name FROM apps WHERE id IN (SELECT value FROM json_each(?1)) \
                       UNION ALL SELECT 'server', id, name FROM mcp_servers WHERE id IN (SELECT value FROM json_each(?1)) \
                       UNION ALL SELECT 'token', id, name FROM console_tokens WHERE id IN (SELECT value FROM json_each(?1))";
            let rows = self
                .db
                .all(Statement::new(sql, vec![SqlValue::Text(json!(ids).to_string())]))
                .await
                .doing("reading the audit log's names")?;
            for r in rows {
                if let (Some(k), Some(id), Some(n)) = (r["kind"].as_str(), r["id"].as_str(), r["name"].as_str()) {
                    names.push((k.to_string(), id.to_string(), n.to_string()));
                }
            }
        }
        for e in &mut entries {
            let action = e["action"].as_str().unwrap_or("").to_string();
            let target = e["target"].as_str().map(str::to_string);
            let kinds: &[&str] = match audit_words::handler_of(&action).and_then(audit_words::target_kind) {
                Some(TargetKind::App) => &["app"],
                Some(TargetKind::Server) => &["server"],
                Some(TargetKind::Token) => &["token"],
                Some(TargetKind::AppOrServer) => &["server", "app"],
                None => &[],
            };
            let name = target.as_ref().and_then(|id| {
                kinds
                    .iter()
                    .find_map(|k| names.iter().find(|(nk, nid, _)| nk == k && nid == id).map(|(_, _, n)| n.clone()))
            });
            let status = e["status"].as_u64().unwrap_or(0) as u16;
            e["summary"] = json!(audit_words::summary(&action, target.as_deref(), name.as_deref(), status));
            e["target_name"] = json!(name);
        }
        Ok(entries)
    }
}
