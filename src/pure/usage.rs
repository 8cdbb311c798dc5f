//! Usage metrics per server and tool, without IO: the isolate's in-memory aggregate, the D1
//! statements a flush runs (upserts that add counts and merge histograms), and the console query
//! (parameters, then series with p50/p95 from merged histograms).
//!
//! Latency is kept as a fixed log-scale histogram ([`BOUNDS_MS`]), never as raw samples: counts
//! add across isolates, minutes and hours, so percentiles of any range come from one merge.
//! Distinct callers are an exact set of 64-bit caller hashes per row, capped at [`MAX_CALLERS`]:
//! an MCP server has few callers a minute, so the common case is exact (a HyperLogLog of a
//! similar size would be off by a caller now and then where operators notice it most); past the
//! cap the row says "more than 64".

use std::collections::{BTreeMap, BTreeSet};

use crate::json;
use crate::pure::error::BadField;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Upper bounds (exclusive, ms) of the latency buckets; the last bucket is everything above.
/// Steps of at most ×1.67, so an interpolated percentile is within its bucket's width.
pub const BOUNDS_MS: [u64; 34] = [
    1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000, 7000, 10000,
    15000, 20000, 30000, 50000, 70000, 100000, 150000, 200000, 300000, 600000,
];
pub const BUCKETS: usize = BOUNDS_MS.len() + 1;
/// Distinct caller hashes kept per row (and per series in memory).
pub const MAX_CALLERS: usize = 64;
/// (server, tool, minute) series one isolate holds between flushes; past it a call is dropped
/// and counted in [`Aggregate::dropped`] (logged at the flush). A flush every minute empties it.
pub const MAX_SERIES: usize = 2048;
/// Failures kept per server (in memory and in D1), and in memory in all.
pub const FAILURES_PER_SERVER: usize = 50;
pub const MAX_PENDING_FAILURES: usize = 500;
/// Longest failure message stored, in characters.
pub const MAX_MESSAGE_CHARS: usize = 300;
/// Label of a `tools/call` that named no tool of the server (client input is not a series name).
pub const UNKNOWN_TOOL: &str = "(unknown)";
pub const MINUTE_RETENTION_S: i64 = 24 * 3600;
pub const HOUR_RETENTION_S: i64 = 30 * 24 * 3600;
/// Rows per upsert statement: one bound JSON parameter each, well under D1's size limits.
const ROWS_PER_STATEMENT: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Minute,
    Hour,
}

impl Step {
    pub fn seconds(self) -> i64 {
        match self {
            Step::Minute => 60,
            Step::Hour => 3600,
        }
    }
    pub fn table(self) -> &'static str {
        match self {
            Step::Minute => "usage_minute",
            Step::Hour => "usage_hour",
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Minute => "minute",
            Step::Hour => "hour",
        }
    }
}

// ---- histogram ----

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram(pub [u64; BUCKETS]);

impl Default for Histogram {
    fn default() -> Self {
        Histogram([0; BUCKETS])
    }
}

impl Histogram {
    pub fn bucket_of(ms: u64) -> usize {
        BOUNDS_MS.iter().position(|b| ms < *b).unwrap_or(BOUNDS_MS.len())
    }
    pub fn record(&mut self, ms: u64) {
        self.0[Self::bucket_of(ms)] += 1;
    }
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }
    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }
    /// The `q` quantile (0 < q ≤ 1) in ms, interpolated linearly inside its bucket (the last,
    /// open bucket answers its lower bound); `None` without samples. Rounded to 0.1 ms.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * n as f64;
        let mut before = 0u64;
        for (i, &c) in self.0.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (before + c) as f64 >= rank {
                let lower = if i == 0 { 0.0 } else { BOUNDS_MS[i - 1] as f64 };
                let Some(&upper) = BOUNDS_MS.get(i) else { return Some(lower) };
                let within = ((rank - before as f64) / c as f64).clamp(0.0, 1.0);
                let v = lower + (upper as f64 - lower) * within;
                return Some((v * 10.0).round() / 10.0);
            }
            before += c;
        }
        None
    }
}

// ---- distinct callers ----

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Callers {
    pub hashes: BTreeSet<u64>,
    /// More distinct callers were seen than the set keeps.
    pub full: bool,
}

impl Callers {
    pub fn insert(&mut self, h: u64) {
        if self.hashes.contains(&h) {
            return;
        }
        if self.hashes.len() < MAX_CALLERS {
            self.hashes.insert(h);
        } else {
            self.full = true;
        }
    }
    /// Union; the result keeps at most `cap` hashes (the query merges beyond one row's cap).
    pub fn merge(&mut self, other: &Callers, cap: usize) {
        self.full |= other.full;
        for h in &other.hashes {
            if self.hashes.contains(h) {
                continue;
            }
            if self.hashes.len() < cap {
                self.hashes.insert(*h);
            } else {
                self.full = true;
            }
        }
    }
    pub fn to_json(&self) -> Value {
        Value::Array(self.hashes.iter().map(|h| Value::String(format!("{h:016x}"))).collect())
    }
    /// From a stored JSON array of 16-hex strings (anything else is skipped).
    pub fn from_stored(text: &str, full: bool) -> Callers {
        let list = match serde_json::from_str(text) {
            Ok(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        Callers { hashes: list.iter().filter_map(|s| u64::from_str_radix(s.as_str()?, 16).ok()).collect(), full }
    }
}

/// A caller's hash within a server: the caller's name itself (a key name, an OAuth subject)
/// is never stored with the metrics.
pub fn caller_hash(server_id: &str, caller: &str) -> u64 {
    let d = Sha256::new().chain_update(server_id).chain_update([0u8]).chain_update(caller).finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

// ---- one series' numbers ----

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub calls: u64,
    pub errors: u64,
    pub streamed: u64,
    pub latency: Histogram,
    pub callers: Callers,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats, callers_cap: usize) {
        self.calls += o.calls;
        self.errors += o.errors;
        self.streamed += o.streamed;
        self.latency.merge(&o.latency);
        self.callers.merge(&o.callers, callers_cap);
    }

    /// The row's values as one JSON array, in the order the upsert reads them.
    fn row(&self, server_id: &str, tool: &str, bucket: i64) -> Value {
        json!([
            server_id,
            tool,
            bucket,
            self.calls,
            self.errors,
            self.streamed,
            self.callers.to_json(),
            u8::from(self.callers.full),
            self.latency.0.to_vec()
        ])
    }

    fn summary(&self) -> Value {
        json!({
            "calls": self.calls,
            "errors": self.errors,
            "streamed": self.streamed,
            "p50_ms": self.latency.quantile(0.5),
            "p95_ms": self.latency.quantile(0.95),
            "callers": self.callers.hashes.len(),
            "callers_capped": self.callers.full,
        })
    }
}

// ---- the isolate's aggregate ----

/// One finished `tools/call` as the shell saw it.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub server_id: &'a str,
    pub tool: &'a str,
    pub at_ms: u64,
    pub latency_ms: u64,
    pub streamed: bool,
    /// Who called: the client key's name or OAuth subject, else the derived end user.
    pub caller: &'a str,
    /// What the client was told when the call failed.
    pub failure: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub server_id: String,
    pub tool: String,
    pub at_ms: u64,
    pub message: String,
}

#[derive(Debug, Default)]
pub struct Aggregate {
    /// (server, tool, minute start in unix seconds) → numbers.
    series: BTreeMap<(String, String, i64), Stats>,
    failures: Vec<Failure>,
    /// Calls not counted because [`MAX_SERIES`] was reached.
    pub dropped: u64,
}

impl Aggregate {
    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.failures.is_empty() && self.dropped == 0
    }

    pub fn series_len(&self) -> usize {
        self.series.len()
    }

    pub fn record(&mut self, c: &Call<'_>) {
        let minute = (c.at_ms / 1000) as i64 / 60 * 60;
        let key = (c.server_id.to_string(), c.tool.to_string(), minute);
        if !self.series.contains_key(&key) && self.series.len() >= MAX_SERIES {
            self.dropped += 1;
            return;
        }
        let s = self.series.entry(key).or_default();
        s.calls += 1;
        s.streamed += u64::from(c.streamed);
        s.latency.record(c.latency_ms);
        s.callers.insert(caller_hash(c.server_id, c.caller));
        if let Some(message) = c.failure {
            s.errors += 1;
            self.push_failure(Failure {
                server_id: c.server_id.to_string(),
                tool: c.tool.to_string(),
                at_ms: c.at_ms,
                message: clip(message, MAX_MESSAGE_CHARS),
            });
        }
    }

    /// Keeps the newest failures: per server and in all (only the last ones are ever shown).
    fn push_failure(&mut self, f: Failure) {
        if self.failures.iter().filter(|x| x.server_id == f.server_id).count() >= FAILURES_PER_SERVER {
            if let Some(i) = self.failures.iter().position(|x| x.server_id == f.server_id) {
                self.failures.remove(i);
            }
        }
        if self.failures.len() >= MAX_PENDING_FAILURES {
            self.failures.remove(0);
        }
        self.failures.push(f);
    }

    /// The statements of a flush of everything held (the caller empties the aggregate): minute
    /// and hour rows upserted, failures inserted and trimmed to the last 50 per server, and old
    /// rows deleted when `prune_before_s` is given (now, in unix seconds).
    pub fn flush_plan(&self, prune_at_s: Option<i64>) -> Vec<Statement> {
        let mut out = Vec::new();
        let mut hours: BTreeMap<(&str, &str, i64), Stats> = BTreeMap::new();
        let mut minute_rows = Vec::with_capacity(self.series.len());
        for ((server, tool, minute), s) in &self.series {
            minute_rows.push(s.row(server, tool, *minute));
            hours.entry((server, tool, minute / 3600 * 3600)).or_default().merge(s, MAX_CALLERS);
        }
        let hour_rows: Vec<Value> = hours.iter().map(|((sv, t, h), s)| s.row(sv, t, *h)).collect();
        for (step, rows) in [(Step::Minute, minute_rows), (Step::Hour, hour_rows)] {
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                out.push(Statement {
                    sql: upsert_sql(step),
                    args: vec![Arg::Text(Value::Array(chunk.to_vec()).to_string())],
                });
            }
        }
        if !self.failures.is_empty() {
            let rows: Vec<Value> =
                self.failures.iter().map(|f| json!([f.server_id, f.at_ms, f.tool, f.message])).collect();
            out.push(Statement {
                sql: "INSERT INTO usage_failures (server_id, at, tool, message) SELECT json_extract(value, '$[0]'), \
                      json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]') \
                      FROM json_each(?1)"
                    .into(),
                args: vec![Arg::Text(Value::Array(rows).to_string())],
            });
            let servers: BTreeSet<&str> = self.failures.iter().map(|f| f.server_id.as_str()).collect();
            out.push(Statement {
                sql: format!(
                    "DELETE FROM usage_failures WHERE server_id IN (SELECT value FROM json_each(?1)) AND id NOT IN \
                     (SELECT f.id FROM usage_failures f WHERE f.server_id = usage_failures.server_id \
                     ORDER BY f.at DESC, f.id DESC LIMIT {FAILURES_PER_SERVER})"
                ),
                args: vec![Arg::Text(json!(servers).to_string())],
            });
        }
        if let Some(now) = prune_at_s {
            out.extend(prune_plan(now));
        }
        out
    }
}

/// Deletes minute rows older than a day, hour rows and failures older than 30 days.
pub fn prune_plan(now_s: i64) -> Vec<Statement> {
    vec![
        Statement {
            sql: "DELETE FROM usage_minute WHERE bucket < ?1".into(),
            args: vec![Arg::Int(now_s - MINUTE_RETENTION_S)],
        },
        Statement {
            sql: "DELETE FROM usage_hour WHERE bucket < ?1".into(),
            args: vec![Arg::Int(now_s - HOUR_RETENTION_S)],
        },
        Statement {
            sql: "DELETE FROM usage_failures WHERE at < ?1".into(),
            args: vec![Arg::Int((now_s - HOUR_RETENTION_S) * 1000)],
        },
    ]
}

/// One D1 statement with its bound values.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Text(String),
    Int(i64),
}

fn hist_columns() -> String {
    (0..BUCKETS).map(|i| format!("h{i}")).collect::<Vec<_>>().join(", ")
}

/// `INSERT … SELECT … FROM json_each(?1) … ON CONFLICT DO UPDATE`: every row of a flush in one
/// bound JSON array (D1 allows 100 bound parameters; a row has 43 values), counts added,
/// histograms added bucket by bucket, caller sets united up to [`MAX_CALLERS`].
pub fn upsert_sql(step: Step) -> String {
    let t = step.table();
    let picks: Vec<String> = (0..BUCKETS).map(|i| format!("json_extract(value, '$[8][{i}]')")).collect();
    let adds: Vec<String> = (0..BUCKETS).map(|i| format!("h{i} = h{i} + excluded.h{i}")).collect();
    let union = format!("SELECT value FROM json_each({t}.callers) UNION SELECT value FROM json_each(excluded.callers)");
    format!(
        "INSERT INTO {t} (server_id, tool, bucket, calls, errors, streamed, callers, callers_full, {cols}) \
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
         json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
         json_extract(value, '$[6]'), json_extract(value, '$[7]'), {picks} FROM json_each(?1) WHERE true \
         ON CONFLICT (server_id, tool, bucket) DO UPDATE SET calls = calls + excluded.calls, \
         errors = errors + excluded.errors, streamed = streamed + excluded.streamed, \
         callers = (SELECT json_group_array(value) FROM ({union} LIMIT {MAX_CALLERS})), \
         callers_full = max(callers_full, excluded.callers_full, (SELECT count(*) FROM ({union})) > {MAX_CALLERS}), \
         {adds}",
        cols = hist_columns(),
        picks = picks.join(", "),
        adds = adds.join(", "),
    )
}

/// The rows of one server within `[from, to)` of the query's step.
pub fn select_sql(step: Step) -> String {
    format!(
        "SELECT tool, bucket, calls, errors, streamed, callers, callers_full, {} FROM {} \
         WHERE server_id = ?1 AND bucket >= ?2 AND bucket < ?3",
        hist_columns(),
        step.table()
    )
}

pub const FAILURES_SQL: &str = "SELECT at, tool, message FROM usage_failures WHERE server_id = ?1 \
     ORDER BY at DESC, id DESC LIMIT 50";

/// A char-boundary-safe cut with an ellipsis.
pub fn clip(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// What the client was told when a `tools/call` response failed: a JSON-RPC error's message,
/// or the text of a result with `isError` (a task-created result is not a failure).
pub fn failure_of(response: &Value) -> Option<String> {
    if let Some(e) = response.get("error") {
        return Some(e.get("message").and_then(Value::as_str).unwrap_or("JSON-RPC error").to_string());
    }
    let result = response.get("result")?;
    if result.get("isError") != Some(&Value::Bool(true)) {
        return None;
    }
    let text: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(|i| i.get("text").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    Some(if text.is_empty() { "the tool reported an error".to_string() } else { text.join(" ") })
}

// ---- the console query ----

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Aligned to the step: the first bucket's start, and the end (exclusive).
    pub from: i64,
    pub to: i64,
    pub step: Step,
}

impl Query {
    pub fn points(&self) -> i64 {
        (self.to - self.from) / self.step.seconds()
    }
}

pub const MAX_MINUTE_POINTS: i64 = 24 * 60;
pub const MAX_HOUR_POINTS: i64 = 31 * 24;

/// `from`, `to` (epoch seconds or ISO-8601 / RFC 3339) and `step` (`minute`|`hour`) of
/// `GET …/usage`; `Err` names the field at fault, for a 400. Defaults: `to` now, `step` minute, `from`
/// an hour before `to` (a day before with `step=hour`). Unknown parameters are ignored.
pub fn parse_query(pairs: &[(String, String)], now_s: i64) -> Result<Query, BadField> {
    let get = |k: &str| pairs.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let step = match get("step") {
        None | Some("minute") => Step::Minute,
        Some("hour") => Step::Hour,
        Some(other) => {
            return Err(BadField(
                "step",
                format!("must be minute or hour (got {})", crate::pure::quote::quote_input(other)),
            ))
        }
    };
    // The default end is just past `now`, so the current bucket is in the range even in the
    // first second of a minute or hour (the range's end is exclusive).
    let to = match get("to") {
        None => now_s + 1,
        Some(v) => parse_time(v).ok_or(BadField("to", time_message(v)))?,
    };
    let from = match get("from") {
        None => to - if step == Step::Minute { 3600 } else { 24 * 3600 },
        Some(v) => parse_time(v).ok_or(BadField("from", time_message(v)))?,
    };
    if from >= to {
        return Err(BadField("from", format!("must be before to ({} is not before {})", iso(from), iso(to))));
    }
    let (retention, kept) = match step {
        Step::Minute => (MINUTE_RETENTION_S, "minute buckets are kept for 24 hours; use step=hour for older ranges"),
        Step::Hour => (HOUR_RETENTION_S, "hour buckets are kept for 30 days"),
    };
    if from < now_s - retention - step.seconds() {
        return Err(BadField("from", format!("{} is too old: {kept}", iso(from))));
    }
    let s = step.seconds();
    let q = Query { from: from.div_euclid(s) * s, to: (to + s - 1).div_euclid(s) * s, step };
    let max = if step == Step::Minute { MAX_MINUTE_POINTS } else { MAX_HOUR_POINTS };
    if q.points() > max {
        return Err(BadField(
            "to",
            format!(
                "the range holds {} {}s; at most {max} per request (narrow it or use a larger step)",
                q.points(),
                step.as_str()
            ),
        ));
    }
    Ok(q)
}

fn time_message(v: &str) -> String {
    format!(
        "must be epoch seconds or an ISO-8601 time such as 2026-12-01T10:00:00Z (got {})",
        crate::pure::quote::quote_input(v)
    )
}

/// Epoch seconds (digits) or RFC 3339 `YYYY-MM-DDTHH:MM[:SS[.fff]](Z|±HH:MM)` (a space or `t`
/// for `T` too); fractions of a second are dropped.
pub fn parse_time(v: &str) -> Option<i64> {
    let v = v.trim();
    if !v.is_empty() && v.len() <= 11 && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok();
    }
    let b = v.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = v.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok()).flatten()
    };
    if b.len() < 17 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    let (y, mo, d, h, mi) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?);
    let mut i = 16;
    let mut sec = 0;
    if b.get(i) == Some(&b':') {
        sec = num(17..19)?;
        i = 19;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == start {
                return None;
            }
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec.min(59) - offset)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `YYYY-MM-DDTHH:MM:SSZ` of epoch seconds.
pub fn iso(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86400), t.rem_euclid(86400));
    let (y, m, d) = super::time::civil_date(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// One stored row, as D1 returns it (a JSON object per row).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub tool: String,
    pub bucket: i64,
    pub stats: Stats,
}

impl Row {
    pub fn from_json(v: &Value) -> Option<Row> {
        let int = |k: &str| v.get(k).and_then(Value::as_f64).map(|f| f as i64);
        let mut latency = Histogram::default();
        for (i, slot) in latency.0.iter_mut().enumerate() {
            *slot = int(&format!("h{i}")).unwrap_or(0).max(0) as u64;
        }
        Some(Row {
            tool: v.get("tool")?.as_str()?.to_string(),
            bucket: int("bucket")?,
            stats: Stats {
                calls: int("calls")?.max(0) as u64,
                errors: int("errors").unwrap_or(0).max(0) as u64,
                streamed: int("streamed").unwrap_or(0).max(0) as u64,
                latency,
                callers: Callers::from_stored(
                    v.get("callers").and_then(Value::as_str).unwrap_or("[]"),
                    int("callers_full").unwrap_or(0) != 0,
                ),
            },
        })
    }
}

/// Unions of caller sets across rows are capped far above one row's cap (a range of many
/// buckets), so a total stays exact for all but very busy servers.
const QUERY_CALLERS_CAP: usize = 100_000;

/// The console's answer: totals and dense series (every bucket of the range, zeros included)
/// for the whole server and for each tool with calls in the range, tools by name.
pub fn report(q: &Query, rows: &[Row]) -> Value {
    let n = q.points().max(0) as usize;
    let s = q.step.seconds();
    let mut total = vec![Stats::default(); n];
    let mut tools: BTreeMap<&str, Vec<Stats>> = BTreeMap::new();
    for r in rows {
        if r.bucket < q.from || r.bucket >= q.to {
            continue;
        }
        let i = ((r.bucket - q.from) / s) as usize;
        total[i].merge(&r.stats, QUERY_CALLERS_CAP);
        tools.entry(&r.tool).or_insert_with(|| vec![Stats::default(); n])[i].merge(&r.stats, QUERY_CALLERS_CAP);
    }
    let series = |points: &[Stats]| {
        let mut sum = Stats::default();
        let list: Vec<Value> = points
            .iter()
            .enumerate()
            .map(|(i, p)| {
                sum.merge(p, QUERY_CALLERS_CAP);
                let mut v = p.summary();
                v["t"] = json!(q.from + i as i64 * s);
                v
            })
            .collect();
        let mut out = sum.summary();
        out["series"] = Value::Array(list);
        out
    };
    let tool_list: Vec<Value> = tools
        .iter()
        .map(|(name, points)| {
            let mut v = series(points);
            v["tool"] = json!(name);
            v
        })
        .collect();
    json!({
        "from": q.from,
        "to": q.to,
        "from_iso": iso(q.from),
        "to_iso": iso(q.to),
        "step": q.step.as_str(),
        "total": series(&total),
        "tools": tool_list,
    })
}

/// A failure row for the console: `at` in unix ms with its ISO form.
pub fn failure_json(v: &Value) -> Value {
    let at = v.get("at").and_then(Value::as_f64).unwrap_or(0.0) as i64;
    json!({
        "at": at,
        "at_iso": iso(at.div_euclid(1000)),
        "tool": v.get("tool").cloned().unwrap_or(Value::Null),
        "message": v.get("message").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests;
