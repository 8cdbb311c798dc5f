//! Console routes of the call log: a server's recent calls, filtered (`pure::call_log`), and
//! whether its log keeps arguments and results.

use crate::json;
use serde_json::Value;

use crate::pure::call_log;
use crate::runtime::{SqlValue, Statement};

use crate::shell::cache;
use crate::shell::http::{Doing, Incoming};
use crate::shell::platform;
use crate::shell::usage::bind;

use super::{field_error, Console, Result};

impl Console<'_> {
    /// `GET /servers/{id}/calls?tool=&caller=&status=&limit=&before=`: newest first. This
    /// isolate's unwritten calls (and usage) are flushed first.
    pub(super) async fn call_log(&self, server_id: &str, req: &Incoming) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        let url = req.url()?;
        let pairs: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let q = call_log::parse_query(&pairs)?;
        if let Err(e) = crate::shell::usage::flush_now(self.env).await {
            crate::shell::log::error(&format!("writing usage metrics and the call log: {e}"));
        }
        let rows = self.db.all(bind(&call_log::select(server_id, &q))).await.doing("reading the call log")?;
        let mut out = call_log::page(&q, &rows);
        out["server_id"] = json!(server_id);
        out["record_payloads"] = json!(row.call_log_payloads);
        out["flush_seconds"] = json!(crate::shell::usage::flush_seconds(self.env));
        Ok(out)
    }

    /// `GET /servers/{id}/calls/settings`.
    pub(super) async fn call_log_settings(&self, server_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        Ok(json!({ "record_payloads": row.call_log_payloads }))
    }

    /// `PUT /servers/{id}/calls/settings` `{record_payloads}`: from the next call on (the
    /// server's cached definition is rewritten before this answers).
    pub(super) async fn set_call_log_settings(&self, server_id: &str, body: &Value) -> Result<Value> {
        self.server_row(server_id).await?;
        let Some(on) = body.get("record_payloads").and_then(Value::as_bool) else {
            return Err(field_error(
                "record_payloads",
                "is required: true to keep arguments and results, false not to",
            ));
        };
        let sql = "UPDATE mcp_servers SET call_log_payloads = ?2, updated_at = ?3 WHERE id = ?1";
        let args =
            vec![SqlValue::Text(server_id.into()), SqlValue::Int(i64::from(on)), SqlValue::Int(platform::now_s())];
        self.db.run(Statement::new(sql, args)).await.doing("changing the call log settings")?;
        let row = self.server_row(server_id).await?;
        cache::write(self.env, self.db, &row).await?;
        Ok(json!({ "record_payloads": row.call_log_payloads }))
    }
}
