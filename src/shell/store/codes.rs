//! Server codes in D1 (`pure::server_code`): the rotation with its grace, the lookup that finds
//! a previous code too, re-sealing, and where each app is published.

use crate::runtime::{Db, SqlValue};

use super::{n, rows_with, run, s, stmt, typed_one, Error, Result, ServerRow, SERVER_COLUMNS};

/// A new code for a server; with it, the code it replaces when a grace keeps it working.
pub struct Rotation<'a> {
    pub code_hash: &'a str,
    pub code_hint: &'a str,
    pub code_sealed: Option<&'a str>,
    /// (hash, hint, end in unix ms) of the code being replaced; `None`: it stops at once (and
    /// so does a previous code still in an earlier grace).
    pub previous: Option<(&'a str, &'a str, i64)>,
}

/// Replaces the code (and the previous one); `Ok(false)` when the new hash collided.
pub async fn rotate(db: &Db, id: &str, r: &Rotation<'_>, now: i64) -> Result<bool> {
    let sql = "UPDATE mcp_servers SET code_hash = ?2, code_hint = ?3, code_sealed = ?4, previous_code_hash = ?5,
               previous_code_hint = ?6, previous_code_until_ms = ?7, updated_at = ?8 WHERE id = ?1";
    let opt = |v: Option<&str>| v.map_or(SqlValue::Null, s);
    let args = [
        s(id),
        s(r.code_hash),
        s(r.code_hint),
        opt(r.code_sealed),
        opt(r.previous.map(|p| p.0)),
        opt(r.previous.map(|p| p.1)),
        r.previous.map_or(SqlValue::Null, |p| n(p.2)),
        n(now),
    ];
    match db.run(stmt(sql, &args)).await {
        Ok(_) => Ok(true),
        Err(e) if e.violates("code_hash") => Ok(false),
        Err(e) => Err(Error::unavailable("rotating the server code", e)),
    }
}

/// The server whose current or previous code has this hash (whether the previous one still
/// works is `pure::server_code::Codes::of`'s to say).
pub async fn server_by_any_code(db: &Db, code_hash: &str) -> Result<Option<ServerRow>> {
    let sql = format!("SELECT {SERVER_COLUMNS} FROM mcp_servers WHERE code_hash = ?1 OR previous_code_hash = ?1");
    typed_one(db, "looking up a server code", stmt(&sql, &[s(code_hash)])).await
}

/// Stores a code sealed again (with the current key, after a key rotation).
pub async fn set_sealed(db: &Db, id: &str, sealed: &str) -> Result<()> {
    run(
        db,
        "re-sealing a server code",
        stmt("UPDATE mcp_servers SET code_sealed = ?2 WHERE id = ?1", &[s(id), s(sealed)]),
    )
    .await
}

/// Where an app is published: a server exposing it.
#[derive(Debug)]
pub struct Publication {
    pub app_id: String,
    pub server_id: String,
    pub server_name: String,
    /// A one-app (Dify-style) server rather than one of several apps.
    pub one_app: bool,
}

/// Every (app, server exposing it), servers oldest first.
pub async fn publications(db: &Db) -> Result<Vec<Publication>> {
    let sql = "SELECT sa.app_id AS app_id, s.id AS id, s.name AS name, s.app_id IS NOT NULL AS one_app
               FROM mcp_server_apps sa JOIN mcp_servers s ON s.id = sa.server_id
               WHERE s.tenant_id = ?1 ORDER BY s.created_at, s.rowid";
    rows_with(db, "listing where apps are published", stmt(sql, &[s(super::TENANT)]), |f| {
        Ok(Publication {
            app_id: f.text("app_id")?,
            server_id: f.text("id")?,
            server_name: f.text("name")?,
            one_app: f.int("one_app")? != 0,
        })
    })
    .await
}
