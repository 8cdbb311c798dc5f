//! D1 as what it is underneath: SQLite, one in-memory database per binding, with the
//! repository's migrations applied in order (`migrations/` is the source of truth; `schema.sql`
//! is generated from it). Errors keep SQLite's own text (the shell matches on some of it).

use std::cell::RefCell;
use std::collections::BTreeMap;

use rusqlite::types::{Value as Sqlite, ValueRef};
use rusqlite::Connection;
use serde_json::{Map, Value};

use crate::runtime::{Error, Kind, Result, SqlValue, Statement};

const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_registry.sql"),
    include_str!("../../migrations/0002_tasks.sql"),
    include_str!("../../migrations/0003_audit_log.sql"),
    include_str!("../../migrations/0004_client_keys.sql"),
    include_str!("../../migrations/0005_console_tokens.sql"),
    include_str!("../../migrations/0006_server_oauth.sql"),
    include_str!("../../migrations/0007_usage.sql"),
    include_str!("../../migrations/0008_call_log.sql"),
    include_str!("../../migrations/0009_server_code_sealed.sql"),
];

#[derive(Default)]
pub struct D1 {
    dbs: RefCell<BTreeMap<String, Connection>>,
}

/// D1's way of reporting SQLite's error: its text, prefixed.
fn d1_error(e: rusqlite::Error) -> Error {
    let text = match &e {
        rusqlite::Error::SqliteFailure(_, Some(msg)) => msg.clone(),
        other => other.to_string(),
    };
    Error::new(Kind::D1, format!("D1_ERROR: {text}"))
}

fn open() -> Result<Connection> {
    let conn = Connection::open_in_memory().map_err(d1_error)?;
    // D1 enforces foreign keys.
    conn.execute_batch("PRAGMA foreign_keys = ON;").map_err(d1_error)?;
    for m in MIGRATIONS {
        conn.execute_batch(m).map_err(d1_error)?;
    }
    Ok(conn)
}

fn bind(stmt: &mut rusqlite::Statement<'_>, args: &[SqlValue]) -> Result<()> {
    for (i, a) in args.iter().enumerate() {
        let v = match a {
            SqlValue::Null => Sqlite::Null,
            SqlValue::Int(n) => Sqlite::Integer(*n),
            SqlValue::Text(s) => Sqlite::Text(s.clone()),
        };
        stmt.raw_bind_parameter(i + 1, v).map_err(d1_error)?;
    }
    Ok(())
}

fn json_of(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::from(n),
        ValueRef::Real(f) => Value::from(f),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Array(b.iter().map(|x| Value::from(*x)).collect()),
    }
}

/// Runs one statement: its rows, and the rows it changed (0 for a read).
fn run(conn: &Connection, s: &Statement) -> Result<(Vec<Value>, u64)> {
    let mut stmt = conn.prepare(&s.sql).map_err(d1_error)?;
    bind(&mut stmt, &s.args)?;
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let readonly = stmt.readonly();
    let mut out = Vec::new();
    let mut rows = stmt.raw_query();
    while let Some(row) = rows.next().map_err(d1_error)? {
        let mut obj = Map::new();
        for (i, n) in names.iter().enumerate() {
            obj.insert(n.clone(), json_of(row.get_ref(i).map_err(d1_error)?));
        }
        out.push(Value::Object(obj));
    }
    drop(rows);
    let changes = if readonly { 0 } else { conn.changes() };
    Ok((out, changes))
}

impl D1 {
    fn with<T>(&self, binding: &str, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut dbs = self.dbs.borrow_mut();
        if !dbs.contains_key(binding) {
            dbs.insert(binding.to_string(), open()?);
        }
        let conn = dbs.get_mut(binding).ok_or_else(|| Error::new(Kind::D1, "D1: no database"))?;
        f(conn)
    }

    pub fn rows(&self, binding: &str, stmt: &Statement) -> Result<Vec<Value>> {
        self.with(binding, |c| run(c, stmt).map(|(rows, _)| rows))
    }

    /// All or nothing, as D1's batch.
    pub fn batch(&self, binding: &str, stmts: &[Statement]) -> Result<Vec<u64>> {
        self.with(binding, |c| {
            let tx = c.transaction().map_err(d1_error)?;
            let mut changes = Vec::new();
            for s in stmts {
                changes.push(run(&tx, s)?.1);
            }
            tx.commit().map_err(d1_error)?;
            Ok(changes)
        })
    }
}
