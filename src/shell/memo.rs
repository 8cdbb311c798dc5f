//! What an isolate keeps between requests (policy in `pure::memo`): resolved server definitions,
//! prepared (`pure::mcp::prepared`), so a hot server costs no storage round trip; and the end
//! users already recorded, so a call writes to D1 at most once per server, user and hour; the
//! client keys whose use was recorded, likewise at most once per key and hour; and
//! the streamed calls running here, so a cancel landing on this isolate needs no KV read; and
//! console tokens by hash, for a few seconds, so a burst of console calls reads D1 once (their
//! use recorded at most once per token and hour, like client keys); and upstream MCP apps'
//! catalogs, so a hot `resources/list` or `prompts/list` reads no KV, and for a few seconds
//! their failed fetches, so a dead upstream is not asked per request; and, for a second, the
//! server codes the rate limiter refused, so a flood over the limit costs no binding call each;
//! and sealed credentials opened, for a minute, so a hot app's call runs no AES per call; and
//! what upstream MCP servers were found to be, for an hour ([`UpstreamFact`]), so a request
//! sends none of the probes they would refuse.
//!
//! Revocation: a console write updates the memo of the isolate that made it at once; every
//! other isolate serves its copy for at most `DEFINITION_MEMO_SECONDS` (default 5), then once
//! more while it refreshes from KV, and drops it after twice that. KV itself takes up to ~60 s
//! to carry a change to other locations (see `cache`).

use std::cell::RefCell;
use std::rc::Rc;

use crate::runtime::Env;

use crate::pure::backend::mcp::catalog::Catalog;
use crate::pure::backend::mcp::failed_fetch;
use crate::pure::console_roles::Identity;
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::prepared::Prepared;
use crate::pure::memo::{Lookup, Memo};

/// Server codes one isolate keeps; more evicts the oldest.
const DEFINITIONS_CAPACITY: usize = 512;
/// (server, end user) pairs one isolate remembers having recorded.
const END_USERS_CAPACITY: usize = 8192;
const END_USER_WINDOW_MS: u64 = 3_600_000;
/// Client keys one isolate remembers having recorded the use of.
const KEYS_CAPACITY: usize = 4096;
const KEY_USE_WINDOW_MS: u64 = 3_600_000;

/// Console tokens one isolate keeps, and how long one is trusted without reading D1 again: a
/// token revoked at another isolate works here for at most this long.
const CONSOLE_TOKENS_CAPACITY: usize = 256;
pub const CONSOLE_TOKEN_FRESH_MS: u64 = 5_000;
const CONSOLE_TOKEN_USE_WINDOW_MS: u64 = 3_600_000;

/// Streamed calls running in this isolate, by cancel key (their record for a cancel).
const RUNS_CAPACITY: usize = 4096;
/// A run record outlives any call (calls end within MAX_TIMEOUT_SECONDS).
const RUN_WINDOW_MS: u64 = 3_600_000;

/// Server codes whose rate-limit refusal one isolate remembers, and for how long: a code over
/// its limit is refused from memory for this long, without asking the binding again (it would
/// refuse too; the client was told to retry after the whole period).
const RATE_REFUSED_CAPACITY: usize = 1024;
const RATE_REFUSED_MS: u64 = 1_000;

/// Sealed credentials one isolate keeps opened, and for how long. A sealed text opens to the
/// same value for the isolate's life (its keys are the deployment's secrets); the window only
/// bounds how long a credential no call uses stays in memory.
const OPENED_CAPACITY: usize = 256;
const OPENED_MS: u64 = 60_000;

/// Facts about upstream URLs (by app) one isolate keeps, and for how long: as long as a stored
/// upstream session.
const UPSTREAM_FACTS_CAPACITY: usize = 1024;
const UPSTREAM_FACT_MS: u64 = 3_600_000;

/// What an upstream MCP server was found to be, by a request it refused.
#[derive(Clone, Copy)]
pub enum UpstreamFact {
    /// Speaks only the legacy HTTP+SSE transport: auto mode's Streamable HTTP probes fell back.
    /// Forgotten when its stream fails (the server may have moved to Streamable HTTP).
    LegacyOnly,
    /// Answers a session's standalone `GET` with 405: it offers no standalone stream, which the
    /// spec makes a property of the endpoint, not of one session.
    NoStandaloneStream,
}

fn fact_key(fact: UpstreamFact, app_id: &str, url: &str) -> String {
    let tag = match fact {
        UpstreamFact::LegacyOnly => "legacy",
        UpstreamFact::NoStandaloneStream => "no-standalone",
    };
    format!("{tag}\n{app_id}\n{url}")
}

/// Failed fetches of upstream tool lists and catalogs one isolate remembers
/// (`pure::backend::mcp::failed_fetch`).
const FAILED_FETCHES_CAPACITY: usize = 512;

/// Upstream apps whose catalog one isolate keeps.
const CATALOGS_CAPACITY: usize = 512;

thread_local! {
    static CATALOGS: RefCell<Memo<Rc<Catalog>>> = RefCell::new(Memo::new(CATALOGS_CAPACITY));
    static FAILED_FETCHES: RefCell<Memo<()>> = RefCell::new(Memo::new(FAILED_FETCHES_CAPACITY));
    static DEFINITIONS: RefCell<Memo<Rc<Prepared>>> = RefCell::new(Memo::new(DEFINITIONS_CAPACITY));
    static END_USERS: RefCell<Memo<()>> = RefCell::new(Memo::new(END_USERS_CAPACITY));
    static KEYS_USED: RefCell<Memo<()>> = RefCell::new(Memo::new(KEYS_CAPACITY));
    static RUNS: RefCell<Memo<Rc<str>>> = RefCell::new(Memo::new(RUNS_CAPACITY));
    static CONSOLE_TOKENS: RefCell<Memo<Rc<Identity>>> = RefCell::new(Memo::new(CONSOLE_TOKENS_CAPACITY));
    static CONSOLE_TOKENS_USED: RefCell<Memo<()>> = RefCell::new(Memo::new(CONSOLE_TOKENS_CAPACITY));
    static RATE_REFUSED: RefCell<Memo<()>> = RefCell::new(Memo::new(RATE_REFUSED_CAPACITY));
    static OPENED: RefCell<Memo<Rc<str>>> = RefCell::new(Memo::new(OPENED_CAPACITY));
    static UPSTREAM_FACTS: RefCell<Memo<()>> = RefCell::new(Memo::new(UPSTREAM_FACTS_CAPACITY));
}

/// The value `sealed` opened to on this isolate within the last minute.
pub fn opened(sealed: &str, now_ms: u64) -> Option<Rc<str>> {
    match OPENED.with(|m| m.borrow_mut().get(sealed, now_ms, OPENED_MS)) {
        Lookup::Fresh(v) => Some(v),
        // Opening again is the refresh.
        Lookup::Refresh(_) | Lookup::Missing => None,
    }
}

pub fn remember_opened(sealed: &str, value: Rc<str>, now_ms: u64) {
    OPENED.with(|m| m.borrow_mut().put(sealed, value, now_ms));
}

/// How long a memoized definition is served without looking again (`DEFINITION_MEMO_SECONDS`,
/// 0 turns the memo off).
pub fn fresh_ms(env: &Env) -> u64 {
    crate::shell::platform::settings(env).definition_memo_seconds * 1000
}

pub fn definition(code_hash: &str, now_ms: u64, fresh_ms: u64) -> Lookup<Rc<Prepared>> {
    DEFINITIONS.with(|m| m.borrow_mut().get(code_hash, now_ms, fresh_ms))
}

/// Keeps `def` for `code_hash` (after a lookup, a refresh, or a console write of this isolate).
pub fn remember(code_hash: &str, def: ServerDefinition, now_ms: u64) -> Rc<Prepared> {
    let prepared = Rc::new(Prepared::new(def));
    DEFINITIONS.with(|m| m.borrow_mut().put(code_hash, Rc::clone(&prepared), now_ms));
    prepared
}

pub fn forget(code_hash: &str) {
    DEFINITIONS.with(|m| m.borrow_mut().remove(code_hash));
}

pub fn refresh_failed(code_hash: &str) {
    DEFINITIONS.with(|m| m.borrow_mut().refresh_failed(code_hash));
}

/// An upstream app's catalog kept here, while fresh (`DEFINITION_MEMO_SECONDS`, like the
/// definitions: KV carries a console refresh to the other isolates).
pub fn catalog(app_id: &str, now_ms: u64, fresh_ms: u64) -> Option<Rc<Catalog>> {
    match CATALOGS.with(|m| m.borrow_mut().get(app_id, now_ms, fresh_ms)) {
        Lookup::Fresh(c) => Some(c),
        Lookup::Refresh(_) | Lookup::Missing => None,
    }
}

pub fn remember_catalog(app_id: &str, catalog: Rc<Catalog>, now_ms: u64) {
    CATALOGS.with(|m| m.borrow_mut().put(app_id, catalog, now_ms));
}

/// Drops a catalog kept here (its upstream said a list changed; other isolates keep theirs
/// while fresh).
pub fn forget_catalog(app_id: &str) {
    CATALOGS.with(|m| m.borrow_mut().remove(app_id));
}

/// Whether a fetch (`failed_fetch::key`) failed on this isolate within
/// `failed_fetch::REMEMBER_MS` (past the window one request fetches again while the others
/// still do without).
pub fn failed_lately(key: &str, now_ms: u64) -> bool {
    let seen = FAILED_FETCHES.with(|m| m.borrow_mut().get(key, now_ms, failed_fetch::REMEMBER_MS));
    matches!(seen, Lookup::Fresh(()))
}

pub fn remember_failed_fetch(key: &str, now_ms: u64) {
    FAILED_FETCHES.with(|m| m.borrow_mut().put(key, (), now_ms));
}

pub fn forget_failed_fetch(key: &str) {
    FAILED_FETCHES.with(|m| m.borrow_mut().remove(key));
}

/// Whether this isolate has not recorded `user` of `server_id` within the hour (and now has).
pub fn first_sight_of_end_user(server_id: &str, user: &str, now_ms: u64) -> bool {
    let key = format!("{server_id}\n{user}");
    END_USERS.with(|m| m.borrow_mut().first_in(&key, now_ms, END_USER_WINDOW_MS))
}

/// Whether this isolate has not recorded a use of client key `key_id` within the hour (and now
/// has): `last_used_at` is accurate to the hour, and a warm isolate writes nothing per call.
pub fn first_use_of_key(key_id: &str, now_ms: u64) -> bool {
    KEYS_USED.with(|m| m.borrow_mut().first_in(key_id, now_ms, KEY_USE_WINDOW_MS))
}

/// Keeps the record of a streamed call for `notifications/cancelled` landing on this isolate.
pub fn remember_run(cancel_key: &str, record: Rc<str>, now_ms: u64) {
    RUNS.with(|m| m.borrow_mut().put(cancel_key, record, now_ms));
}

/// The record of a streamed call of this isolate, taken (a run is cancelled once).
pub fn take_run(cancel_key: &str, now_ms: u64) -> Option<Rc<str>> {
    RUNS.with(|m| {
        let mut m = m.borrow_mut();
        let found = match m.get(cancel_key, now_ms, RUN_WINDOW_MS) {
            Lookup::Fresh(r) | Lookup::Refresh(r) => Some(r),
            Lookup::Missing => None,
        };
        m.remove(cancel_key);
        found
    })
}

/// The console token of SHA-256 `hash` if this isolate read it within
/// [`CONSOLE_TOKEN_FRESH_MS`]; older entries are not served (no stale-while-revalidate here:
/// "a few seconds at most" is the revocation window).
pub fn console_token(hash: &str, now_ms: u64) -> Option<Rc<Identity>> {
    CONSOLE_TOKENS.with(|m| match m.borrow_mut().get(hash, now_ms, CONSOLE_TOKEN_FRESH_MS) {
        Lookup::Fresh(id) => Some(id),
        Lookup::Refresh(_) | Lookup::Missing => None,
    })
}

pub fn remember_console_token(hash: &str, identity: Rc<Identity>, now_ms: u64) {
    CONSOLE_TOKENS.with(|m| m.borrow_mut().put(hash, identity, now_ms));
}

/// A revoked token (or one D1 no longer has) stops working on this isolate at once.
pub fn forget_console_token(hash: &str) {
    CONSOLE_TOKENS.with(|m| m.borrow_mut().remove(hash));
}

/// Whether this isolate has not recorded a use of console token `id` within the hour (and now
/// has).
pub fn first_use_of_console_token(id: &str, now_ms: u64) -> bool {
    CONSOLE_TOKENS_USED.with(|m| m.borrow_mut().first_in(id, now_ms, CONSOLE_TOKEN_USE_WINDOW_MS))
}

/// Whether the rate limiter refused `code_hash` on this isolate within the last second.
pub fn refused_lately(code_hash: &str, now_ms: u64) -> bool {
    RATE_REFUSED.with(|m| m.borrow().within(code_hash, now_ms, RATE_REFUSED_MS))
}

pub fn remember_refusal(code_hash: &str, now_ms: u64) {
    RATE_REFUSED.with(|m| m.borrow_mut().put(code_hash, (), now_ms));
}

/// Whether `fact` was found of `app_id`'s upstream at `url` on this isolate within the hour.
pub fn upstream_fact(fact: UpstreamFact, app_id: &str, url: &str, now_ms: u64) -> bool {
    UPSTREAM_FACTS.with(|m| m.borrow().within(&fact_key(fact, app_id, url), now_ms, UPSTREAM_FACT_MS))
}

pub fn remember_upstream_fact(fact: UpstreamFact, app_id: &str, url: &str, now_ms: u64) {
    UPSTREAM_FACTS.with(|m| m.borrow_mut().put(&fact_key(fact, app_id, url), (), now_ms));
}

pub fn forget_upstream_fact(fact: UpstreamFact, app_id: &str, url: &str) {
    UPSTREAM_FACTS.with(|m| m.borrow_mut().remove(&fact_key(fact, app_id, url)));
}

/// Forgets everything this isolate kept (an isolate started again).
pub fn forget_all() {
    CATALOGS.with(|m| *m.borrow_mut() = Memo::new(CATALOGS_CAPACITY));
    FAILED_FETCHES.with(|m| *m.borrow_mut() = Memo::new(FAILED_FETCHES_CAPACITY));
    DEFINITIONS.with(|m| *m.borrow_mut() = Memo::new(DEFINITIONS_CAPACITY));
    END_USERS.with(|m| *m.borrow_mut() = Memo::new(END_USERS_CAPACITY));
    KEYS_USED.with(|m| *m.borrow_mut() = Memo::new(KEYS_CAPACITY));
    RUNS.with(|m| *m.borrow_mut() = Memo::new(RUNS_CAPACITY));
    CONSOLE_TOKENS.with(|m| *m.borrow_mut() = Memo::new(CONSOLE_TOKENS_CAPACITY));
    CONSOLE_TOKENS_USED.with(|m| *m.borrow_mut() = Memo::new(CONSOLE_TOKENS_CAPACITY));
    RATE_REFUSED.with(|m| *m.borrow_mut() = Memo::new(RATE_REFUSED_CAPACITY));
    OPENED.with(|m| *m.borrow_mut() = Memo::new(OPENED_CAPACITY));
    UPSTREAM_FACTS.with(|m| *m.borrow_mut() = Memo::new(UPSTREAM_FACTS_CAPACITY));
}
