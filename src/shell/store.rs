//! The registry in D1: apps, servers, and which apps each server exposes.

use crate::json;
use crate::runtime::{Db, SqlValue, Statement};
use serde_json::{Map, Value};

use crate::pure::app::{self, AppSpec};
use crate::pure::backend::config::Backend;
use crate::pure::client_auth::{AuthMode, ClientAuth, ClientKey};
use crate::pure::definition::{AppDefinition, ServerDefinition, FORMAT};
use crate::pure::error::ApiError;
use crate::pure::form::form_to_dify;
use crate::pure::oauth_resource::OAuthSettings;

use crate::pure::fields::{self, Fields, FromFields};
use crate::shell::http::internal;

/// One deploy serves one tenant today; the column keeps Dify's uniqueness rule
/// `(tenant_id, app_id)` and room for more.
pub const TENANT: &str = "default";

pub type Result<T> = std::result::Result<T, Error>;

/// Why the registry could not do what was asked.
#[derive(Debug)]
pub enum Error {
    /// D1 failed, or what it holds does not read: what was being done (`"storing the app"`),
    /// and why. A client is told the first only (503); the log gets both.
    Unavailable { doing: &'static str, cause: Cause },
    /// A second server for an app (a server's `app_id` is unique): 409.
    AppHasServer,
}

/// Why storage failed.
#[derive(Debug)]
pub enum Cause {
    /// The platform call (D1, KV) failed.
    Runtime(crate::runtime::Error),
    /// A row does not read (the message names the column).
    Row(String),
    /// A value to store does not encode.
    Encode(serde_json::Error),
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Runtime(e) => e.fmt(f),
            Cause::Row(why) => f.write_str(why),
            Cause::Encode(e) => e.fmt(f),
        }
    }
}

impl Error {
    pub fn unavailable(doing: &'static str, cause: impl Into<Cause>) -> Error {
        Error::Unavailable { doing, cause: cause.into() }
    }

    /// The answer a client gets; an `Unavailable` is logged in full first (`http::internal`).
    pub fn report(self) -> ApiError {
        match self {
            Error::Unavailable { doing, cause } => internal(doing, cause),
            Error::AppHasServer => {
                ApiError::conflict("this app already has an MCP server; update it with PUT or rotate its code")
            }
        }
    }
}

impl From<crate::runtime::Error> for Cause {
    fn from(e: crate::runtime::Error) -> Cause {
        Cause::Runtime(e)
    }
}

impl From<String> for Cause {
    fn from(why: String) -> Cause {
        Cause::Row(why)
    }
}

impl From<serde_json::Error> for Cause {
    fn from(e: serde_json::Error) -> Cause {
        Cause::Encode(e)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        e.report()
    }
}

pub mod codes;

#[derive(Debug)]
pub struct AppRow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub mode: String,
    pub backend: String,
    pub user_input_form: String,
    pub outputs: String,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug)]
pub struct ServerRow {
    pub id: String,
    pub app_id: Option<String>,
    pub name: String,
    pub description: String,
    pub code_hash: String,
    pub code_hint: String,
    pub status: String,
    pub parameters: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// `none`, `key` or `oauth` (`pure::client_auth::AuthMode`; the `client_auth` column).
    pub client_auth: String,
    /// The issuer settings of an `oauth` server (JSON, `pure::oauth_resource::OAuthSettings`).
    pub oauth: Option<String>,
    /// The call log keeps arguments and results (`call_log_payloads`, migration 0008).
    pub call_log_payloads: bool,
    /// The code sealed under SECRETS_KEY (`pure::server_code`), for an admin's reveal.
    pub code_sealed: Option<String>,
    /// The code before the last rotation, while a grace lets it work: hash, hint, end (unix ms).
    pub previous_code_hash: Option<String>,
    pub previous_code_hint: Option<String>,
    pub previous_code_until_ms: Option<i64>,
}

/// A client key as the console lists it (never the key, nor its hash).
#[derive(Debug)]
pub struct KeyRow {
    pub id: String,
    pub name: String,
    pub hint: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}

impl FromFields for KeyRow {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(KeyRow {
            id: f.text("id")?,
            name: f.text("name")?,
            hint: f.text("hint")?,
            created_at: f.int("created_at")?,
            last_used_at: f.opt_int("last_used_at")?,
        })
    }
}

impl KeyRow {
    pub fn to_console_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "hint": self.hint,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
        })
    }
}

fn parse_stored(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl FromFields for AppRow {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(AppRow {
            id: f.text("id")?,
            name: f.text("name")?,
            description: f.text("description")?,
            mode: f.text("mode")?,
            backend: f.text("backend")?,
            user_input_form: f.text("user_input_form")?,
            outputs: f.text("outputs")?,
            created_at: f.int("created_at")?,
            updated_at: f.int("updated_at")?,
        })
    }
}

impl AppRow {
    /// The app as the console shows it (credentials masked).
    pub fn to_console_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "mode": self.mode,
            "backend": crate::pure::backend::credentials::mask_backend(&parse_stored(&self.backend)),
            "user_input_form": parse_stored(&self.user_input_form),
            "outputs": parse_stored(&self.outputs),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        })
    }

    pub fn backend(&self) -> Value {
        parse_stored(&self.backend)
    }

    /// The app as the MCP endpoint uses it; `Err` for a mode this deploy does not know (a row
    /// written by a newer one) or settings that do not read, which is left out rather than
    /// called as something else.
    pub fn to_definition(&self) -> std::result::Result<AppDefinition, String> {
        let mode = crate::pure::mode::Mode::parse(&self.mode).ok_or("its mode is unknown to this deploy")?;
        Ok(AppDefinition::new(
            self.id.clone(),
            self.name.clone(),
            self.description.clone(),
            Backend::from_settings(mode, &parse_stored(&self.backend))?,
            parse_stored(&self.user_input_form),
            parse_stored(&self.outputs),
        ))
    }
}

impl FromFields for ServerRow {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(ServerRow {
            id: f.text("id")?,
            app_id: f.opt_text("app_id")?,
            name: f.text("name")?,
            description: f.text("description")?,
            code_hash: f.text("code_hash")?,
            code_hint: f.text("code_hint")?,
            status: f.text("status")?,
            parameters: f.text("parameters")?,
            created_at: f.int("created_at")?,
            updated_at: f.int("updated_at")?,
            client_auth: f.text("client_auth")?,
            oauth: f.opt_text("oauth")?,
            call_log_payloads: f.opt_int("call_log_payloads")?.unwrap_or(0) != 0,
            code_sealed: f.opt_text("code_sealed")?,
            previous_code_hash: f.opt_text("previous_code_hash")?,
            previous_code_hint: f.opt_text("previous_code_hint")?,
            previous_code_until_ms: f.opt_int("previous_code_until_ms")?,
        })
    }
}

impl ServerRow {
    /// The stored mode; an unreadable one reads as `key` (fail closed: no key matches a server
    /// whose keys cannot be trusted to be complete).
    pub fn auth_mode(&self) -> AuthMode {
        AuthMode::parse(&self.client_auth).unwrap_or(AuthMode::Key)
    }

    /// The stored issuer settings; unreadable ones read as none (an `oauth` server without
    /// them refuses every token: fail closed).
    pub fn oauth(&self) -> Option<OAuthSettings> {
        self.oauth.as_deref().and_then(|t| serde_json::from_str(t).ok())
    }

    pub fn parameters(&self) -> Map<String, Value> {
        match parse_stored(&self.parameters) {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }
}

fn s(v: &str) -> SqlValue {
    SqlValue::Text(v.to_string())
}

fn n(v: i64) -> SqlValue {
    SqlValue::Int(v)
}

fn stmt(sql: &str, args: &[SqlValue]) -> Statement {
    Statement::new(sql, args.to_vec())
}

/// `r` as the registry's result: a failure says what was being done.
pub fn doing<T, E: Into<Cause>>(doing: &'static str, r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|cause| Error::unavailable(doing, cause))
}

/// Every row of a query; `doing` says what failed.
async fn rows(db: &Db, doing: &'static str, stmt: Statement) -> Result<Vec<Value>> {
    self::doing(doing, db.all(stmt).await)
}

/// The first row of a query, as [`rows`].
async fn first(db: &Db, doing: &'static str, stmt: Statement) -> Result<Option<Value>> {
    self::doing(doing, db.first(stmt).await)
}

/// Runs one statement, as [`rows`].
async fn run(db: &Db, doing: &'static str, stmt: Statement) -> Result<()> {
    self::doing(doing, db.run(stmt).await).map(drop)
}

/// Runs statements in one transaction, all or none, as [`rows`].
async fn batch(db: &Db, doing: &'static str, stmts: Vec<Statement>) -> Result<()> {
    self::doing(doing, db.batch(stmts).await).map(drop)
}

/// A query's rows as `T`; `doing` says what failed, whether the query or a row's reading.
async fn typed<T: FromFields>(db: &Db, doing: &'static str, stmt: Statement) -> Result<Vec<T>> {
    self::doing(doing, fields::read_all(rows(db, doing, stmt).await?))
}

/// A query's first row as `T`, as [`typed`].
async fn typed_one<T: FromFields>(db: &Db, doing: &'static str, stmt: Statement) -> Result<Option<T>> {
    first_with(db, doing, stmt, T::from_fields).await
}

/// A query's rows, each read by `read` (a shape only that query has), as [`typed`].
async fn rows_with<T>(
    db: &Db,
    doing: &'static str,
    stmt: Statement,
    read: impl Fn(&mut Fields) -> ReadResult<T>,
) -> Result<Vec<T>> {
    let rows = rows(db, doing, stmt).await?;
    self::doing(doing, rows.into_iter().map(|row| fields::read_with(row, &read)).collect::<ReadResult<_>>())
}

/// A query's first row read by `read`, as [`rows_with`].
async fn first_with<T>(
    db: &Db,
    doing: &'static str,
    stmt: Statement,
    read: impl FnOnce(&mut Fields) -> ReadResult<T>,
) -> Result<Option<T>> {
    let first = first(db, doing, stmt).await?;
    self::doing(doing, first.map(|row| fields::read_with(row, read)).transpose())
}

/// A row's reading: `Err` names the column.
type ReadResult<T> = std::result::Result<T, String>;

const APP_COLUMNS: &str = "id, name, description, mode, backend, user_input_form, outputs, created_at, updated_at";
const SERVER_COLUMNS: &str = "id, app_id, name, description, code_hash, code_hint, status, parameters, created_at, \
     updated_at, client_auth, oauth, call_log_payloads, code_sealed, previous_code_hash, previous_code_hint, previous_code_until_ms";

pub async fn list_apps(db: &Db) -> Result<Vec<AppRow>> {
    let sql = format!("SELECT {APP_COLUMNS} FROM apps WHERE tenant_id = ?1 ORDER BY created_at, id");
    typed(db, "listing apps", stmt(&sql, &[s(TENANT)])).await
}

pub async fn get_app(db: &Db, id: &str) -> Result<Option<AppRow>> {
    let sql = format!("SELECT {APP_COLUMNS} FROM apps WHERE id = ?1 AND tenant_id = ?2");
    typed_one(db, "reading an app", stmt(&sql, &[s(id), s(TENANT)])).await
}

pub async fn insert_app(db: &Db, id: &str, spec: &AppSpec, now: i64) -> Result<()> {
    let sql = "INSERT INTO apps (id, tenant_id, name, description, mode, backend, user_input_form, outputs, created_at, updated_at)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)";
    run(db, "storing the app", stmt(sql, &app_args(id, spec, now))).await
}

fn app_args(id: &str, spec: &AppSpec, now: i64) -> [SqlValue; 9] {
    [
        s(id),
        s(TENANT),
        s(&spec.name),
        s(&spec.description),
        s(spec.config.mode().as_str()),
        s(&spec.backend.to_string()),
        s(&form_to_dify(&spec.user_input_form).to_string()),
        s(&app::outputs_to_json(&spec.outputs).to_string()),
        n(now),
    ]
}

/// Replaces an app; Dify-style servers take their name from their app, so they follow it.
pub async fn update_app(db: &Db, id: &str, spec: &AppSpec, now: i64) -> Result<()> {
    let update = "UPDATE apps SET name = ?3, description = ?4, mode = ?5, backend = ?6, user_input_form = ?7,
                  outputs = ?8, updated_at = ?9 WHERE id = ?1 AND tenant_id = ?2";
    let rename = "UPDATE mcp_servers SET name = ?2, updated_at = ?3 WHERE app_id = ?1";
    let stmts = vec![stmt(update, &app_args(id, spec, now)), stmt(rename, &[s(id), s(&spec.name), n(now)])];
    batch(db, "updating the app", stmts).await
}

/// Deletes an app with its Dify-style server and its place in multi-app servers.
pub async fn delete_app(db: &Db, id: &str) -> Result<()> {
    let stmts = vec![
        stmt("DELETE FROM mcp_server_apps WHERE app_id = ?1", &[s(id)]),
        stmt("DELETE FROM mcp_server_apps WHERE server_id IN (SELECT id FROM mcp_servers WHERE app_id = ?1)", &[s(id)]),
        stmt("DELETE FROM end_users WHERE server_id IN (SELECT id FROM mcp_servers WHERE app_id = ?1)", &[s(id)]),
        stmt("DELETE FROM server_keys WHERE server_id IN (SELECT id FROM mcp_servers WHERE app_id = ?1)", &[s(id)]),
        stmt("DELETE FROM mcp_servers WHERE app_id = ?1", &[s(id)]),
        stmt("DELETE FROM apps WHERE id = ?1 AND tenant_id = ?2", &[s(id), s(TENANT)]),
    ];
    batch(db, "deleting the app", stmts).await
}

/// The servers that expose an app (their cache entries change when the app does).
pub async fn servers_of_app(db: &Db, app_id: &str) -> Result<Vec<ServerRow>> {
    let sql = format!(
        "SELECT {} FROM mcp_servers s JOIN mcp_server_apps sa ON sa.server_id = s.id WHERE sa.app_id = ?1",
        prefixed(SERVER_COLUMNS, "s.")
    );
    typed(db, "finding the app's servers", stmt(&sql, &[s(app_id)])).await
}

fn prefixed(columns: &str, prefix: &str) -> String {
    columns.split(", ").map(|c| format!("{prefix}{c}")).collect::<Vec<_>>().join(", ")
}

pub async fn get_server(db: &Db, id: &str) -> Result<Option<ServerRow>> {
    let sql = format!("SELECT {SERVER_COLUMNS} FROM mcp_servers WHERE id = ?1 AND tenant_id = ?2");
    typed_one(db, "reading a server", stmt(&sql, &[s(id), s(TENANT)])).await
}

pub async fn get_server_of_app(db: &Db, app_id: &str) -> Result<Option<ServerRow>> {
    let sql = format!("SELECT {SERVER_COLUMNS} FROM mcp_servers WHERE app_id = ?1 AND tenant_id = ?2");
    typed_one(db, "reading a server", stmt(&sql, &[s(app_id), s(TENANT)])).await
}

/// Every server: one-app (Dify-style, also reachable under their app) and multi-app alike.
pub async fn list_servers(db: &Db) -> Result<Vec<ServerRow>> {
    let sql = format!("SELECT {SERVER_COLUMNS} FROM mcp_servers WHERE tenant_id = ?1 ORDER BY created_at, id");
    typed(db, "listing servers", stmt(&sql, &[s(TENANT)])).await
}

pub async fn app_ids_of_server(db: &Db, server_id: &str) -> Result<Vec<String>> {
    let sql = "SELECT app_id FROM mcp_server_apps WHERE server_id = ?1 ORDER BY position";
    rows_with(db, "listing a server's apps", stmt(sql, &[s(server_id)]), |f| f.text("app_id")).await
}

/// The ids among `ids` that name no app.
pub async fn missing_apps(db: &Db, ids: &[String]) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    for id in ids {
        if get_app(db, id).await?.is_none() {
            missing.push(id.clone());
        }
    }
    Ok(missing)
}

pub struct NewServer<'a> {
    pub id: &'a str,
    pub app_id: Option<&'a str>,
    pub name: &'a str,
    pub description: &'a str,
    pub code_hash: &'a str,
    pub code_hint: &'a str,
    /// The code sealed (`None` without SECRETS_KEY: its URL cannot be shown again).
    pub code_sealed: Option<&'a str>,
    pub parameters: &'a Map<String, Value>,
    pub app_ids: &'a [String],
    pub now: i64,
}

/// Inserts a server and its app list in one transaction. `Ok(false)` when the code hash
/// collided (the caller draws a new code).
pub async fn insert_server(db: &Db, new: &NewServer<'_>) -> Result<bool> {
    let insert = "INSERT INTO mcp_servers (id, tenant_id, app_id, name, description, code_hash, code_hint, status, parameters, created_at, updated_at, code_sealed)
                  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'active', ?8, ?9, ?9, ?10)";
    let mut batch = vec![stmt(
        insert,
        &[
            s(new.id),
            s(TENANT),
            new.app_id.map_or(SqlValue::Null, s),
            s(new.name),
            s(new.description),
            s(new.code_hash),
            s(new.code_hint),
            s(&Value::Object(new.parameters.clone()).to_string()),
            n(new.now),
            new.code_sealed.map_or(SqlValue::Null, s),
        ],
    )];
    batch.extend(server_app_rows(new.id, new.app_ids));
    match db.batch(batch).await {
        Ok(_) => Ok(true),
        Err(e) if e.violates("code_hash") => Ok(false),
        Err(e) if e.violates("UNIQUE") => Err(Error::AppHasServer),
        Err(e) => Err(Error::unavailable("storing the server", e)),
    }
}

fn server_app_rows(server_id: &str, app_ids: &[String]) -> Vec<Statement> {
    app_ids
        .iter()
        .enumerate()
        .map(|(i, app_id)| {
            stmt(
                "INSERT INTO mcp_server_apps (server_id, app_id, position) VALUES (?1, ?2, ?3)",
                &[s(server_id), s(app_id), n(i as i64)],
            )
        })
        .collect()
}

/// Writes the editable fields of a server (and, when given, its app list) in one transaction.
pub async fn update_server(db: &Db, row: &ServerRow, app_ids: Option<&[String]>, now: i64) -> Result<()> {
    let mut batch = vec![stmt("UPDATE mcp_servers SET name = ?2, description = ?3, status = ?4, parameters = ?5, updated_at = ?6 WHERE id = ?1",
        &[s(&row.id), s(&row.name), s(&row.description), s(&row.status), s(&row.parameters), n(now)],
    )];
    if let Some(ids) = app_ids {
        batch.push(stmt("DELETE FROM mcp_server_apps WHERE server_id = ?1", &[s(&row.id)]));
        batch.extend(server_app_rows(&row.id, ids));
    }
    self::batch(db, "updating the server", batch).await
}

pub async fn delete_server(db: &Db, id: &str) -> Result<()> {
    let stmts = vec![
        stmt("DELETE FROM mcp_server_apps WHERE server_id = ?1", &[s(id)]),
        stmt("DELETE FROM end_users WHERE server_id = ?1", &[s(id)]),
        stmt("DELETE FROM server_keys WHERE server_id = ?1", &[s(id)]),
        stmt("DELETE FROM call_log WHERE server_id = ?1", &[s(id)]),
        stmt("DELETE FROM mcp_servers WHERE id = ?1", &[s(id)]),
    ];
    batch(db, "deleting the server", stmts).await
}

/// Everything the MCP endpoint needs about a server, read from D1.
pub async fn load_definition(db: &Db, server: &ServerRow) -> Result<ServerDefinition> {
    let sql = format!(
        "SELECT {} FROM apps a JOIN mcp_server_apps sa ON sa.app_id = a.id WHERE sa.server_id = ?1 ORDER BY sa.position",
        prefixed(APP_COLUMNS, "a.")
    );
    let apps: Vec<AppRow> = typed(db, "reading a server's apps", stmt(&sql, &[s(&server.id)])).await?;
    let mode = server.auth_mode();
    // Only a key server's keys are read: the other modes never look at them.
    let keys = if mode == AuthMode::Key { key_hashes(db, &server.id).await? } else { Vec::new() };
    let oauth = if mode == AuthMode::OAuth { server.oauth() } else { None };
    let auth = ClientAuth { mode, keys, oauth };
    Ok(ServerDefinition {
        format: FORMAT,
        server_id: server.id.clone(),
        name: server.name.clone(),
        description: server.description.clone(),
        // Stored values were validated; an unreadable one reads as inactive (fail closed).
        status: crate::pure::server::Status::parse(&server.status).unwrap_or(crate::pure::server::Status::Inactive),
        parameters: server.parameters(),
        auth,
        call_log_payloads: server.call_log_payloads,
        code_expires_at: None,
        apps: apps
            .iter()
            .filter_map(|a| match a.to_definition() {
                Ok(def) => Some(def),
                Err(why) => {
                    crate::shell::log::error(&format!("app {} is left out: {why}", a.id));
                    None
                }
            })
            .collect(),
    })
}

/// The client keys of a server as the MCP endpoint checks them (id, name, hash), oldest first.
async fn key_hashes(db: &Db, server_id: &str) -> Result<Vec<ClientKey>> {
    let sql = "SELECT id, name, key_hash FROM server_keys WHERE server_id = ?1 ORDER BY created_at, rowid";
    rows_with(db, "reading a server's client keys", stmt(sql, &[s(server_id)]), |f| {
        Ok(ClientKey { id: f.text("id")?, name: f.text("name")?, hash: f.text("key_hash")? })
    })
    .await
}

/// Sets the mode, and the issuer settings of an `oauth` server (cleared for the other modes).
pub async fn set_auth_mode(db: &Db, id: &str, mode: AuthMode, oauth: Option<&OAuthSettings>, now: i64) -> Result<()> {
    let sql = "UPDATE mcp_servers SET client_auth = ?2, oauth = ?3, updated_at = ?4 WHERE id = ?1";
    let oauth = match doing("encoding the oauth settings", oauth.map(serde_json::to_string).transpose())? {
        Some(text) => s(&text),
        None => SqlValue::Null,
    };
    run(db, "setting the client authentication mode", stmt(sql, &[s(id), s(mode.as_str()), oauth, n(now)])).await
}

const KEY_COLUMNS: &str = "id, name, hint, created_at, last_used_at";

/// A server's client keys for the console, oldest first.
pub async fn list_keys(db: &Db, server_id: &str) -> Result<Vec<KeyRow>> {
    let sql = format!("SELECT {KEY_COLUMNS} FROM server_keys WHERE server_id = ?1 ORDER BY created_at, rowid");
    typed(db, "listing client keys", stmt(&sql, &[s(server_id)])).await
}

pub async fn get_key(db: &Db, server_id: &str, key_id: &str) -> Result<Option<KeyRow>> {
    let sql = format!("SELECT {KEY_COLUMNS} FROM server_keys WHERE server_id = ?1 AND id = ?2");
    typed_one(db, "reading a client key", stmt(&sql, &[s(server_id), s(key_id)])).await
}

pub struct NewKey<'a> {
    pub id: &'a str,
    pub server_id: &'a str,
    pub name: &'a str,
    pub key_hash: &'a str,
    pub hint: &'a str,
    pub now: i64,
}

/// What storing a new key came to.
pub enum KeyInsert {
    Stored,
    /// The server already has a key of this name.
    NameTaken,
    /// Two random keys hashed alike (not expected): the caller draws another.
    HashCollision,
    /// There are as many as the cap allows: nothing was stored.
    Full,
}

/// A credential row's insert, stored only while its table (or its server's part of it) holds
/// fewer than the cap: the count and the insert are one statement, so two creates at once
/// cannot both take the last place, as a count read before the insert would let them.
/// `RETURNING` gives a row when one was stored.
async fn insert_capped(db: &Db, sql: &str, args: &[SqlValue], column: &str, doing: &'static str) -> Result<KeyInsert> {
    match db.first(stmt(sql, args)).await {
        Ok(Some(_)) => Ok(KeyInsert::Stored),
        Ok(None) => Ok(KeyInsert::Full),
        Err(e) if e.violates(column) => Ok(KeyInsert::HashCollision),
        Err(e) if e.violates("UNIQUE") => Ok(KeyInsert::NameTaken),
        Err(e) => Err(Error::unavailable(doing, e)),
    }
}

/// Stores a client key while its server has fewer than `cap`.
pub async fn insert_key(db: &Db, new: &NewKey<'_>, cap: usize) -> Result<KeyInsert> {
    let sql = "INSERT INTO server_keys (id, server_id, name, key_hash, hint, created_at)
               SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE (SELECT COUNT(*) FROM server_keys WHERE server_id = ?2) < ?7
               RETURNING id";
    let args = [s(new.id), s(new.server_id), s(new.name), s(new.key_hash), s(new.hint), n(new.now), n(cap as i64)];
    insert_capped(db, sql, &args, "key_hash", "storing the client key").await
}

pub async fn delete_key(db: &Db, server_id: &str, key_id: &str) -> Result<()> {
    let sql = "DELETE FROM server_keys WHERE server_id = ?1 AND id = ?2";
    run(db, "revoking the client key", stmt(sql, &[s(server_id), s(key_id)])).await
}

/// Records that a key was used (called at most once per key and hour per isolate).
pub async fn touch_key(db: &Db, key_id: &str, now: i64) -> Result<()> {
    let sql = "UPDATE server_keys SET last_used_at = ?2 WHERE id = ?1";
    run(db, "recording a client key's use", stmt(sql, &[s(key_id), n(now)])).await
}

/// Records that a client used a server (the `user` sent to its backends). A row is found by
/// server and user: a client key's name is a user on every server that has a key of that name,
/// so the row's id is made from both (rows written before client keys have the user as id).
pub async fn touch_end_user(db: &Db, server_id: &str, user: &str, name: &str, now: i64) -> Result<()> {
    let sql = "INSERT INTO end_users (id, server_id, session_key, name, created_at, last_seen_at)
               VALUES (?1, ?2, ?3, ?4, ?5, ?5)
               ON CONFLICT (server_id, session_key) DO UPDATE SET last_seen_at = excluded.last_seen_at";
    let id = format!("eu-{}", &crate::pure::ids::sha256_hex(&format!("{server_id}\n{user}"))[..32]);
    run(db, "recording an end user", stmt(sql, &[s(&id), s(server_id), s(user), s(name), n(now)])).await
}

const TASK_COLUMNS: &str = "id, app_id, tool, status, status_message, created_at, updated_at, poll_count, consecutive_errors, last_error, next_poll_at, degraded, cancel_requested, completed_at";

/// Task rows for the console (booleans as booleans), newest first.
pub async fn list_tasks(db: &Db, server_id: &str, before: i64, limit: u32) -> Result<Vec<Value>> {
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE server_id = ?1 AND created_at < ?2 ORDER BY created_at DESC LIMIT ?3"
    );
    let rows = rows(db, "listing tasks", stmt(&sql, &[s(server_id), n(before), n(i64::from(limit))])).await?;
    Ok(rows.into_iter().map(task_json).collect())
}

pub async fn get_task(db: &Db, server_id: &str, task_id: &str) -> Result<Option<Value>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE server_id = ?1 AND id = ?2");
    Ok(first(db, "reading a task", stmt(&sql, &[s(server_id), s(task_id)])).await?.map(task_json))
}

fn task_json(mut row: Value) -> Value {
    for flag in ["degraded", "cancel_requested"] {
        let on = row[flag].as_f64().is_some_and(|v| v != 0.0);
        row[flag] = Value::Bool(on);
    }
    row
}

pub async fn record_audit(
    db: &Db,
    request_id: &str,
    actor: &str,
    action: &str,
    target: Option<&str>,
    status: u16,
    at: i64,
) -> Result<()> {
    let sql = "INSERT INTO audit_log (at, request_id, actor, action, target, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    let args = [n(at), s(request_id), s(actor), s(action), target.map_or(SqlValue::Null, s), n(i64::from(status))];
    run(db, "writing the audit log", stmt(sql, &args)).await
}

pub async fn audit_log(db: &Db, limit: u32) -> Result<Vec<Value>> {
    let sql = "SELECT at, request_id, actor, action, target, status FROM audit_log ORDER BY id DESC LIMIT ?1";
    rows(db, "reading the audit log", stmt(sql, &[n(i64::from(limit))])).await
}

pub async fn update_app_backend(db: &Db, id: &str, backend: &Value, now: i64) -> Result<()> {
    let sql = "UPDATE apps SET backend = ?2, updated_at = ?3 WHERE id = ?1";
    run(db, "updating an app", stmt(sql, &[s(id), s(&backend.to_string()), n(now)])).await
}

// ---- console tokens ----

/// A console token as the console lists it (never the token, nor its hash).
#[derive(Debug)]
pub struct ConsoleTokenRow {
    pub id: String,
    pub name: String,
    pub role: String,
    pub hint: String,
    pub created_by: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}

impl FromFields for ConsoleTokenRow {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(ConsoleTokenRow {
            id: f.text("id")?,
            name: f.text("name")?,
            role: f.text("role")?,
            hint: f.text("hint")?,
            created_by: f.text("created_by")?,
            created_at: f.int("created_at")?,
            last_used_at: f.opt_int("last_used_at")?,
        })
    }
}

impl ConsoleTokenRow {
    pub fn to_console_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "hint": self.hint,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
        })
    }
}

/// What authenticating with a console token needs: who it is and its role.
#[derive(Debug)]
pub struct ConsoleTokenAuth {
    pub id: String,
    pub name: String,
    pub role: String,
}

impl FromFields for ConsoleTokenAuth {
    fn from_fields(f: &mut Fields) -> std::result::Result<Self, String> {
        Ok(ConsoleTokenAuth { id: f.text("id")?, name: f.text("name")?, role: f.text("role")? })
    }
}

const TOKEN_COLUMNS: &str = "id, name, role, hint, created_by, created_at, last_used_at";

pub async fn list_console_tokens(db: &Db) -> Result<Vec<ConsoleTokenRow>> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM console_tokens ORDER BY created_at, name");
    typed(db, "listing console tokens", stmt(&sql, &[])).await
}

pub async fn get_console_token(db: &Db, id: &str) -> Result<Option<ConsoleTokenRow>> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM console_tokens WHERE id = ?1");
    typed_one(db, "reading a console token", stmt(&sql, &[s(id)])).await
}

/// The hash of a token, for forgetting it from the isolate's memo when it is revoked.
pub async fn console_token_hash(db: &Db, id: &str) -> Result<Option<String>> {
    let sql = "SELECT token_hash FROM console_tokens WHERE id = ?1";
    first_with(db, "reading a console token", stmt(sql, &[s(id)]), |f| f.text("token_hash")).await
}

/// The token whose SHA-256 is `hash`: one indexed read (the column is UNIQUE).
pub async fn console_token_by_hash(db: &Db, hash: &str) -> Result<Option<ConsoleTokenAuth>> {
    let sql = "SELECT id, name, role FROM console_tokens WHERE token_hash = ?1";
    typed_one(db, "looking up a console token", stmt(sql, &[s(hash)])).await
}

pub struct NewConsoleToken<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub role: &'a str,
    pub token_hash: &'a str,
    pub hint: &'a str,
    pub created_by: &'a str,
    pub now: i64,
}

/// Stores a console token while there are fewer than `cap`; the outcomes are those of a client
/// key's insert.
pub async fn insert_console_token(db: &Db, new: &NewConsoleToken<'_>, cap: usize) -> Result<KeyInsert> {
    let sql = "INSERT INTO console_tokens (id, name, role, token_hash, hint, created_by, created_at)
               SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE (SELECT COUNT(*) FROM console_tokens) < ?8
               RETURNING id";
    let args = [
        s(new.id),
        s(new.name),
        s(new.role),
        s(new.token_hash),
        s(new.hint),
        s(new.created_by),
        n(new.now),
        n(cap as i64),
    ];
    insert_capped(db, sql, &args, "token_hash", "storing the console token").await
}

pub async fn delete_console_token(db: &Db, id: &str) -> Result<()> {
    run(db, "revoking the console token", stmt("DELETE FROM console_tokens WHERE id = ?1", &[s(id)])).await
}

/// Records that a token was used (called at most once per token and hour per isolate).
pub async fn touch_console_token(db: &Db, id: &str, now: i64) -> Result<()> {
    let sql = "UPDATE console_tokens SET last_used_at = ?2 WHERE id = ?1";
    run(db, "recording a console token's use", stmt(sql, &[s(id), n(now)])).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Kind;

    #[test]
    fn a_storage_failure_answers_503_without_its_cause() {
        let cause = crate::runtime::Error::new(Kind::D1, "D1_ERROR: no such table: apps");
        let api = ApiError::from(Error::unavailable("listing apps", cause));
        assert_eq!((api.status, api.code), (503, "storage_unavailable"));
        assert_eq!(api.message, "listing apps failed; retry, and check the Worker logs if it persists");
        let row = Error::unavailable("reading a server", "column code_hash is not text".to_string());
        assert!(matches!(&row, Error::Unavailable { cause: Cause::Row(_), .. }));
        assert!(!row.report().message.contains("code_hash"));
    }

    #[test]
    fn a_second_server_for_an_app_is_a_conflict() {
        let api = Error::AppHasServer.report();
        assert_eq!((api.status, api.code), (409, "conflict"));
        assert_eq!(api.message, "this app already has an MCP server; update it with PUT or rotate its code");
    }
}
