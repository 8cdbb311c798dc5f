//! Console routes of what servers did: durable tasks, usage metrics.

use crate::json;
use serde_json::Value;

use crate::pure::error::ApiError;
use crate::pure::quote::quote_input;
use crate::pure::usage;

use crate::shell::http::{Doing, Incoming};
use crate::shell::platform;
use crate::shell::store::{self};

use super::{field_error, Console, Result};

impl Console<'_> {
    // ---- durable tasks ----

    /// `?limit=1..100` (default 50), newest first; `?before=<created_at>` pages back.
    pub(super) async fn list_tasks(&self, server_id: &str, req: &Incoming) -> Result<Value> {
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

    pub(super) async fn task(&self, server_id: &str, task_id: &str) -> Result<Value> {
        self.server_row(server_id).await?;
        let mut row = store::get_task(self.db, server_id, task_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("server '{server_id}' has no task {}", quote_input(task_id))))?;
        // A finished task's result (or error) lives with its Durable Object until it expires.
        row["result"] = Value::Null;
        row["error"] = Value::Null;
        if matches!(row["status"].as_str(), Some("completed" | "failed")) {
            let get = crate::pure::task_contract::TaskCall::Get { server_id: server_id.to_string(), owner: None };
            match crate::shell::tasks::call(self.env, task_id, &get).await {
                Ok(Some(a)) => {
                    row["result"] = a.result.unwrap_or(Value::Null);
                    row["error"] =
                        a.error.map_or(Value::Null, |(code, message)| json!({"code": code, "message": message}));
                }
                Ok(None) => row["error"] = json!({"code": null, "message": "the task has expired: its result is gone"}),
                Err(e) => crate::shell::log::error(&format!("reading task {task_id}'s result: {e}")),
            }
        }
        Ok(row)
    }

    pub(super) async fn cancel_task(&self, server_id: &str, task_id: &str) -> Result<Value> {
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
            .doing("cancelling the task")?
            .ok_or_else(|| ApiError::not_found(format!("task '{task_id}' has expired")))?;
        self.task(server_id, task_id).await
    }

    // ---- usage metrics ----

    /// `?from=&to=&step=` (`pure::usage::parse_query`): series per tool and in all, and the
    /// server's last 50 failures. This isolate's unflushed counts are written first.
    pub(super) async fn usage(&self, server_id: &str, req: &Incoming) -> Result<Value> {
        self.server_row(server_id).await?;
        let url = req.url()?;
        let pairs: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let q = usage::parse_query(&pairs, platform::now_s())?;
        if let Err(e) = crate::shell::usage::flush_now(self.env).await {
            crate::shell::log::error(&format!("writing usage metrics: {e}"));
        }
        let (rows, failures) =
            crate::shell::usage::read(self.db, server_id, &q).await.doing("reading usage metrics")?;
        let mut out = usage::report(&q, &rows);
        out["server_id"] = json!(server_id);
        out["failures"] = Value::Array(failures);
        out["flush_seconds"] = json!(crate::shell::usage::flush_seconds(self.env));
        Ok(out)
    }
}
