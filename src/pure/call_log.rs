//! The call log, without IO: one entry per finished `tools/call` (successes included), held in
//! the isolate's memory and written to D1 with the usage flush (never a write per call), the
//! console's query of it, and the redaction of arguments and results for servers that keep them.
//!
//! Bounded everywhere: at most [`PER_SERVER`] entries of a server wait in memory and stay in D1
//! (the flush trims the rest), [`MAX_PENDING`] entries wait in all, payloads are clipped.

use std::collections::{BTreeMap, BTreeSet};

use crate::json;
use serde_json::{Map, Value};

use crate::pure::error::BadField;
use crate::pure::usage::{clip, iso, Arg, Statement};

/// Calls kept per server, in D1 and waiting in memory.
pub const PER_SERVER: usize = 1000;
/// Calls one isolate holds between flushes, all servers together; past it the oldest goes.
pub const MAX_PENDING: usize = 4000;
/// Longest error text kept, in characters (the failures of usage metrics keep as many).
pub const MAX_ERROR_CHARS: usize = 300;
/// Longest arguments or result kept, in characters of their (redacted) JSON.
pub const MAX_PAYLOAD_CHARS: usize = 2000;
/// What a redacted value reads as.
pub const REDACTED: &str = "[redacted]";
/// Bound JSON of one insert statement, in bytes: well under D1's statement limits.
const BYTES_PER_STATEMENT: usize = 64 * 1024;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// A result with `isError: true` (the backend failed, bad arguments, an unknown tool).
    ToolError,
    /// A JSON-RPC error.
    Error,
    /// A streamed call whose client went away before the result.
    Gone,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Ok, Status::ToolError, Status::Error, Status::Gone];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::ToolError => "tool_error",
            Status::Error => "error",
            Status::Gone => "gone",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The status of a final JSON-RPC response, and the text the client was told when it failed.
    pub fn of_response(response: &Value) -> (Status, Option<String>) {
        match crate::pure::usage::failure_of(response) {
            None => (Status::Ok, None),
            Some(message) if response.get("error").is_some() => (Status::Error, Some(message)),
            Some(message) => (Status::ToolError, Some(message)),
        }
    }
}

/// Who made a call, as the log names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerKind {
    /// A client key's name (auth mode `key`).
    Key,
    /// An access token's subject (auth mode `oauth`).
    OAuth,
    /// How an unauthenticated client named itself (clientInfo, else its User-Agent).
    Client,
    /// A console user, from the tool playground.
    Console,
}

impl CallerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallerKind::Key => "key",
            CallerKind::OAuth => "oauth",
            CallerKind::Client => "client",
            CallerKind::Console => "console",
        }
    }
}

/// One finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub server_id: String,
    pub at_ms: u64,
    pub tool: String,
    pub caller_kind: CallerKind,
    pub caller: String,
    pub status: Status,
    pub duration_ms: u64,
    pub streamed: bool,
    pub error: Option<String>,
    /// Redacted and clipped JSON text; only for servers that keep payloads.
    pub arguments: Option<String>,
    pub result: Option<String>,
}

impl Entry {
    fn row(&self) -> Value {
        json!([
            self.server_id,
            self.at_ms,
            self.tool,
            self.caller_kind.as_str(),
            self.caller,
            self.status.as_str(),
            self.duration_ms,
            u8::from(self.streamed),
            self.error.as_deref().map(|e| clip(e, MAX_ERROR_CHARS)),
            self.arguments,
            self.result,
        ])
    }
}

/// The isolate's calls waiting for the next flush.
#[derive(Debug, Default)]
pub struct Pending {
    /// Oldest first (a `Vec`: removals happen in one pass, and a `VecDeque` would be more code
    /// in the bundle). Up to [`TRIM_SLACK`] past the bounds until [`Pending::settled`].
    entries: Vec<Entry>,
    /// Calls dropped because a bound was reached (the oldest go first); logged at the flush.
    pub dropped: u64,
}

/// How many entries may wait past [`MAX_PENDING`] before the bounds are applied, in one pass.
/// Applied at every call, they cost a scan of every waiting entry and a shift of most of them
/// (a tenth of a busy isolate's CPU per call once a server had [`PER_SERVER`] calls waiting);
/// every [`TRIM_SLACK`] calls, one pass over them all.
pub const TRIM_SLACK: usize = MAX_PENDING / 4;

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.dropped == 0
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds a call. What is kept is what dropping, at each call, the oldest of its server past
    /// [`PER_SERVER`] (only the last are kept in D1 anyway) and then the oldest of all past
    /// [`MAX_PENDING`] would keep; the drops are made in one pass when [`TRIM_SLACK`] more wait,
    /// and by [`Pending::settled`].
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
        if self.entries.len() >= MAX_PENDING + TRIM_SLACK {
            self.trim();
        }
    }

    /// The calls with the bounds applied: what a flush writes.
    pub fn settled(mut self) -> Pending {
        self.trim();
        self
    }

    /// Keeps the last [`PER_SERVER`] calls of each server and, of those, the last
    /// [`MAX_PENDING`]: the calls that dropping the oldest at each push would have kept (a call
    /// that is among the last of its server at the end was at every push before).
    fn trim(&mut self) {
        let mut per_server: BTreeMap<&str, usize> = BTreeMap::new();
        let mut kept = 0;
        // Newest first.
        let keep: Vec<bool> = self
            .entries
            .iter()
            .rev()
            .map(|e| {
                let of_server = per_server.entry(e.server_id.as_str()).or_default();
                *of_server += 1;
                let keep = *of_server <= PER_SERVER && kept < MAX_PENDING;
                kept += usize::from(keep);
                keep
            })
            .collect();
        let before = self.entries.len();
        let mut oldest_first = keep.into_iter().rev();
        self.entries.retain(|_| oldest_first.next().unwrap_or(true));
        self.dropped += (before - self.entries.len()) as u64;
    }

    /// The statements that write every waiting call of a [`Pending::settled`] one (the caller
    /// empties `self`): inserts of
    /// bound JSON arrays (calls of servers deleted meanwhile are skipped), then one trim to the
    /// last [`PER_SERVER`] of each server written. Empty when nothing waits.
    pub fn flush_plan(&self) -> Vec<Statement> {
        let mut out = Vec::new();
        if self.entries.is_empty() {
            return out;
        }
        let mut chunk: Vec<Value> = Vec::new();
        let mut bytes = 0;
        for e in &self.entries {
            let row = e.row();
            let size = row.to_string().len();
            if !chunk.is_empty() && bytes + size > BYTES_PER_STATEMENT {
                out.push(insert(std::mem::take(&mut chunk)));
                bytes = 0;
            }
            bytes += size;
            chunk.push(row);
        }
        out.push(insert(chunk));
        let servers: BTreeSet<&str> = self.entries.iter().map(|e| e.server_id.as_str()).collect();
        out.push(Statement {
            sql: format!(
                "DELETE FROM call_log WHERE server_id IN (SELECT value FROM json_each(?1)) AND id NOT IN \
                 (SELECT c.id FROM call_log c WHERE c.server_id = call_log.server_id \
                 ORDER BY c.at DESC, c.id DESC LIMIT {PER_SERVER})"
            ),
            args: vec![Arg::Text(json!(servers).to_string())],
        });
        out
    }
}

fn insert(rows: Vec<Value>) -> Statement {
    let pick = |i: usize| format!("json_extract(value, '$[{i}]')");
    let picks: Vec<String> = (0..11).map(pick).collect();
    Statement {
        sql: format!(
            "INSERT INTO call_log (server_id, at, tool, caller_kind, caller, status, duration_ms, streamed, error, \
             arguments, result) SELECT {} FROM json_each(?1) \
             WHERE EXISTS (SELECT 1 FROM mcp_servers s WHERE s.id = json_extract(value, '$[0]'))",
            picks.join(", ")
        ),
        args: vec![Arg::Text(Value::Array(rows).to_string())],
    }
}

// ---- payloads ----

/// Member names whose values are never kept: credentials by their usual names.
const SECRET_NAMES: [&str; 12] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "credential",
    "private_key",
    "cookie",
    "session",
];

/// Words that are credentials by their shape: Flowgate's own keys and tokens, Dify app keys,
/// common provider keys (JWTs are known by theirs, and the word after `Bearer`).
const SECRET_PREFIXES: [&str; 7] = ["fgk_", "fgc_", "app-", "sk-", "ghp_", "xoxb-", "AKIA"];

fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|s| lower.contains(s))
}

fn secret_word(w: &str) -> bool {
    SECRET_PREFIXES.iter().any(|p| w.starts_with(p) && w.len() >= p.len() + 8) || is_jwt(w)
}

/// Three base64url parts, the first of a JSON header (`eyJ`).
fn is_jwt(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3
        && s.starts_with("eyJ")
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
}

/// `s` with every credential-shaped word in it replaced (a result's text often quotes its
/// input); `None` when there is none. Words are runs of ASCII letters, digits and `-_.+/=`.
fn redact_words(s: &str) -> Option<String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'/' | b'=');
    let bytes = s.as_bytes();
    let (mut out, mut copied, mut after_bearer, mut i) = (String::new(), 0, false, 0);
    while i < bytes.len() {
        if !word(bytes[i]) {
            after_bearer &= bytes[i] == b' ';
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        // Word boundaries are ASCII bytes, so these are char boundaries.
        let w = &s[start..i];
        if (after_bearer && w.len() >= 8) || secret_word(w) {
            out.push_str(&s[copied..start]);
            out.push_str(REDACTED);
            copied = i;
        }
        after_bearer = w.eq_ignore_ascii_case("bearer") && bytes.get(i) == Some(&b' ');
    }
    (copied > 0).then(|| {
        out.push_str(&s[copied..]);
        out
    })
}

/// `v` with credentials replaced by [`REDACTED`]: values of members named like a credential,
/// and strings shaped like one, at any depth (deeper than 32 levels: redacted whole).
pub fn redact(v: &Value) -> Value {
    redact_at(v, 0)
}

fn redact_at(v: &Value, depth: usize) -> Value {
    if depth > 32 {
        return Value::String(REDACTED.into());
    }
    match v {
        Value::String(s) => Value::String(redact_words(s).unwrap_or_else(|| s.clone())),
        Value::Array(items) => Value::Array(items.iter().map(|i| redact_at(i, depth + 1)).collect()),
        Value::Object(members) => {
            let mut out = Map::new();
            for (k, x) in members {
                let kept = if secret_name(k) && !x.is_null() {
                    Value::String(REDACTED.into())
                } else {
                    redact_at(x, depth + 1)
                };
                out.insert(k.clone(), kept);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The redacted JSON text of a payload, clipped to [`MAX_PAYLOAD_CHARS`].
pub fn payload_text(v: &Value) -> String {
    clip(&redact(v).to_string(), MAX_PAYLOAD_CHARS)
}

/// What a final response is kept as: its `result` (or `error`), redacted and clipped.
pub fn result_text(response: &Value) -> Option<String> {
    response.get("result").or_else(|| response.get("error")).map(payload_text)
}

// ---- the console query ----

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 500;

/// `GET …/calls`: the filters and the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub tool: Option<String>,
    pub caller: Option<String>,
    pub status: Option<Status>,
    pub limit: u32,
    /// The `next` cursor of an earlier page: calls before it (`at`, then `id`).
    pub before: Option<(i64, i64)>,
}

/// Reads `tool`, `caller`, `status`, `limit` and `before`; `Err` names the field at fault, for a 400.
/// Empty values are no filter; unknown parameters are ignored.
pub fn parse_query(pairs: &[(String, String)]) -> Result<Query, BadField> {
    let get = |k: &str| pairs.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let quote = crate::pure::quote::quote_input;
    let status = match get("status") {
        None => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            BadField("status", format!("must be one of ok, tool_error, error, gone (got {})", quote(s)))
        })?),
    };
    let limit = match get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.parse::<u32>() {
            Ok(n @ 1..=MAX_LIMIT) => n,
            _ => return Err(BadField("limit", format!("must be an integer from 1 to {MAX_LIMIT} (got {})", quote(v)))),
        },
    };
    let before = match get("before") {
        None => None,
        Some(v) => Some(parse_cursor(v).ok_or_else(|| {
            BadField("before", format!("must be the `next` value of an earlier page (got {})", quote(v)))
        })?),
    };
    let text = |k: &str| get(k).map(|v| v.chars().take(200).collect::<String>());
    Ok(Query { tool: text("tool"), caller: text("caller"), status, limit, before })
}

fn parse_cursor(v: &str) -> Option<(i64, i64)> {
    let (at, id) = v.split_once('-')?;
    Some((at.parse().ok()?, id.parse().ok()?))
}

/// The select of one server's calls under the query's filters, newest first (one more row
/// than the page, to know whether there is a next one).
pub fn select(server_id: &str, q: &Query) -> Statement {
    let mut sql = String::from(
        "SELECT id, at, tool, caller_kind, caller, status, duration_ms, streamed, error, arguments, result \
         FROM call_log WHERE server_id = ?1",
    );
    let mut args = vec![Arg::Text(server_id.to_string())];
    let mut bind = |sql: &mut String, clause: &str, a: Arg| {
        args.push(a);
        sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
    };
    if let Some(t) = &q.tool {
        bind(&mut sql, " AND tool = ?", Arg::Text(t.clone()));
    }
    if let Some(c) = &q.caller {
        bind(&mut sql, " AND caller = ?", Arg::Text(c.clone()));
    }
    if let Some(s) = q.status {
        bind(&mut sql, " AND status = ?", Arg::Text(s.as_str().to_string()));
    }
    if let Some((at, id)) = q.before {
        bind(&mut sql, " AND (at < ?", Arg::Int(at));
        bind(&mut sql, " OR (at = ?", Arg::Int(at));
        bind(&mut sql, " AND id < ?))", Arg::Int(id));
    }
    sql.push_str(&format!(" ORDER BY at DESC, id DESC LIMIT {}", q.limit + 1));
    Statement { sql, args }
}

/// The console's answer from the selected rows: `data` (at most `limit`) and `next`, the
/// cursor of the following page (null on the last).
pub fn page(q: &Query, rows: &[Value]) -> Value {
    let shown = &rows[..rows.len().min(q.limit as usize)];
    let next = (rows.len() > q.limit as usize)
        .then(|| shown.last().map(|r| format!("{}-{}", int(r, "at"), int(r, "id"))))
        .flatten();
    json!({ "data": shown.iter().map(entry_json).collect::<Vec<_>>(), "next": next })
}

fn int(r: &Value, k: &str) -> i64 {
    r.get(k).and_then(Value::as_f64).unwrap_or(0.0) as i64
}

fn entry_json(r: &Value) -> Value {
    let at = int(r, "at");
    let text = |k: &str| r.get(k).and_then(Value::as_str).map_or(Value::Null, |s| Value::String(s.to_string()));
    json!({
        "at": at,
        "at_iso": iso(at.div_euclid(1000)),
        "tool": text("tool"),
        "caller_kind": text("caller_kind"),
        "caller": text("caller"),
        "status": text("status"),
        "duration_ms": int(r, "duration_ms"),
        "streamed": int(r, "streamed") != 0,
        "error": text("error"),
        "arguments": text("arguments"),
        "result": text("result"),
    })
}

#[cfg(test)]
mod tests;
