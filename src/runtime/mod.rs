//! The one boundary between the Worker and its runtime.
//!
//! Everything the shell does with the platform goes through [`Runtime`]: fetch with streamed
//! bodies, KV, D1, Durable Object stubs and storage, the rate-limit bindings, the clock, timers,
//! randomness, WebCrypto, `waitUntil`, logging and the Worker's settings. It is implemented once
//! for workers-rs (`workers`, wasm32 only) and once by the deterministic simulator (`crate::sim`,
//! host tests), so the whole request path above it compiles and runs under `cargo test`.
//! [`Worker`] is the other side: what the runtime calls (a request, a Durable Object's request
//! or alarm), implemented once by the shell.
//!
//! A thin `dyn` layer, not generics: one vtable call per platform call, each of which crosses
//! into JavaScript anyway, and the shell is compiled once rather than once per runtime (the wasm
//! bundle does not grow by a second copy of any function).

mod http;
pub mod timer;
#[cfg(target_arch = "wasm32")]
pub mod workers;

use std::cell::RefCell;
use std::rc::Rc;

pub use futures::future::LocalBoxFuture as Fut;
pub use http::{Body, ByteStream, Headers, InvalidHeader, LazyHeaders, Method, PlatformBody, Request, Response};

/// Which platform call failed: a caller that must tell failures apart (a D1 constraint from a
/// network failure, say) asks the kind, never the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An outbound `fetch`: it could not be sent, or no answer came.
    Fetch,
    /// A message body (a client's request, a backend's answer) could not be read.
    Body,
    Kv,
    D1,
    /// A Durable Object stub: the object could not be reached.
    Object,
    /// A Durable Object's own storage or alarm.
    Storage,
    RateLimit,
    Crypto,
    Random,
    /// A value to or from the platform is not the JSON it should be.
    Json,
}

/// What the runtime said when a platform call failed (a binding, storage, the network): its
/// kind and its message. Never holds a secret: callers pass it to logs and, scrubbed of URLs,
/// to clients. Shown as the message alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
    message: String,
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The runtime's words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same failure, as a call of `kind` (the Workers runtime converts its exceptions
    /// before it knows which call they belong to).
    pub fn of(self, kind: Kind) -> Error {
        Error { kind, ..self }
    }

    /// A D1 constraint violation that names `what` (a column, or `UNIQUE`): SQLite's words are
    /// the only place D1 says which constraint failed.
    pub fn violates(&self, what: &str) -> bool {
        self.kind == Kind::D1 && self.message.contains(what)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::new(Kind::Json, format!("JSON: {e}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One outbound request as the runtime's `fetch` sends it: redirects are never followed by the
/// runtime (`outbound` follows them by hand, after its guard accepts each `Location`).
pub struct Outbound {
    pub method: Method,
    pub url: String,
    pub headers: Headers,
    /// Bytes: a JSON or form text, or a multipart body with binary parts (file uploads).
    pub body: Option<Vec<u8>>,
}

/// A response to an [`Outbound`] request: its head read, its body not yet.
pub struct Fetched {
    pub status: u16,
    pub headers: Headers,
    pub body: Body,
    /// Stops the exchange (an unread body, a read past its deadline).
    pub abort: Box<dyn Abort>,
}

/// Stops an exchange in flight.
pub trait Abort {
    fn abort(&self);
}

/// A value bound into a D1 statement.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Text(String),
}

/// One D1 statement: SQL with `?1`… placeholders and their values.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub args: Vec<SqlValue>,
}

impl Statement {
    pub fn new(sql: impl Into<String>, args: Vec<SqlValue>) -> Statement {
        Statement { sql: sql.into(), args }
    }
}

/// A timer the runtime fires once per arming, calling the callback it was made with.
pub trait RuntimeTimer {
    /// Fires after `ms` milliseconds (replacing any earlier arming).
    fn set(&mut self, ms: u64);
    fn clear(&mut self);
}

/// A Durable Object's storage, as one instance sees it: JSON text by key, and one alarm.
pub trait ObjectStorage {
    fn get(&self, key: &str) -> Fut<'static, Result<Option<String>>>;
    fn put(&self, key: &str, json: &str) -> Fut<'static, Result<()>>;
    fn delete(&self, key: &str) -> Fut<'static, Result<()>>;
    fn delete_all(&self) -> Fut<'static, Result<()>>;
    /// Milliseconds since the epoch.
    fn set_alarm(&self, at_ms: u64) -> Fut<'static, Result<()>>;
    fn get_alarm(&self) -> Fut<'static, Result<Option<u64>>>;
    fn delete_alarm(&self) -> Fut<'static, Result<()>>;
}

/// Why a signature could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignError {
    /// The key does not import with these parameters.
    Import(String),
    Sign(String),
}

/// The platform, as the shell uses it. Every method is one platform call; policy stays above.
pub trait Runtime {
    /// Runs `work` to its end beside the current event (a Durable Object's background work).
    fn spawn(&self, work: Fut<'static, ()>);

    /// A plain-text var or secret of the Worker (`None`: not set).
    fn setting(&self, name: &str) -> Option<String>;

    /// Milliseconds since the epoch.
    fn now_ms(&self) -> u64;
    /// Cryptographically random bytes.
    fn fill_random(&self, buf: &mut [u8]) -> Result<()>;
    /// A timer that calls `on_fire` each time it fires.
    fn timer(&self, on_fire: Rc<dyn Fn()>) -> Box<dyn RuntimeTimer>;
    /// One log line (a JSON object's text).
    fn log(&self, line: &str);

    /// Sends one request; `Err` when it could not be sent or no answer came (the reason).
    fn fetch(&self, req: Outbound) -> Fut<'static, Result<Fetched>>;

    fn kv_get(&self, binding: &str, key: &str) -> Fut<'static, Result<Option<String>>>;
    /// Writes `value` under `key`, to expire after `ttl_seconds` (at least 60, as in KV).
    fn kv_put(&self, binding: &str, key: &str, value: &str, ttl_seconds: u64) -> Fut<'static, Result<()>>;
    fn kv_delete(&self, binding: &str, key: &str) -> Fut<'static, Result<()>>;

    /// Every row of a query, each a JSON object of its columns.
    fn d1_rows(&self, binding: &str, stmt: Statement) -> Fut<'static, Result<Vec<serde_json::Value>>>;
    /// Statements run in one transaction; the rows each changed.
    fn d1_batch(&self, binding: &str, stmts: Vec<Statement>) -> Fut<'static, Result<Vec<u64>>>;

    /// A request to the Durable Object named `name` of the namespace bound as `namespace`.
    fn object_fetch(&self, namespace: &str, name: &str, req: Request) -> Fut<'static, Result<Response>>;

    /// One more event for `key` in the rate limiter bound as `binding`: `Ok(true)` when within
    /// the limit. `Ok(true)` as well when the deployment has no such binding.
    fn rate_limit(&self, binding: &str, key: &str) -> Fut<'static, Result<bool>>;

    /// WebCrypto's `verify` with a public key given as a JWK (JSON text); `import` and `verify`
    /// are the algorithm parameters (JSON text) of `importKey` and `verify`.
    fn verify_signature(
        &self,
        jwk: &str,
        import: &str,
        verify: &str,
        signature: &[u8],
        data: &[u8],
    ) -> Fut<'static, Result<bool>>;
    /// WebCrypto's `sign` with a PKCS#8 private key; `data: None` only checks that it imports.
    fn sign(
        &self,
        pkcs8: &[u8],
        import: &str,
        sign: &str,
        data: Option<&[u8]>,
    ) -> Fut<'static, Result<Vec<u8>, SignError>>;
}

thread_local! {
    /// The runtime this thread serves: set once by the Worker's entry points, per run by the
    /// simulator.
    static CURRENT: RefCell<Option<Rc<dyn Runtime>>> = const { RefCell::new(None) };
}

/// Makes `rt` the runtime every [`Env`] and ambient call of this thread uses.
pub fn install(rt: Rc<dyn Runtime>) {
    CURRENT.with(|c| *c.borrow_mut() = Some(rt));
}

/// The installed runtime. Installed before any event reaches the shell; a thread without one
/// (a unit test that forgot) fails loudly here rather than acting on no platform.
fn current() -> Rc<dyn Runtime> {
    CURRENT.with(|c| c.borrow().clone()).unwrap_or_else(|| panic!("no runtime installed on this thread"))
}

/// The Worker's handle on its platform: settings, bindings, and the calls above.
#[derive(Clone)]
pub struct Env {
    rt: Rc<dyn Runtime>,
}

impl Env {
    /// The installed runtime's handle.
    pub fn current() -> Env {
        Env { rt: current() }
    }

    /// An `Env` on `rt` (the simulator's, or the Worker's at its entry points).
    pub fn new(rt: Rc<dyn Runtime>) -> Env {
        Env { rt }
    }

    pub fn runtime(&self) -> &dyn Runtime {
        &*self.rt
    }

    /// The D1 database bound as `binding`.
    pub fn d1(&self, binding: &'static str) -> Db {
        Db { env: self.clone(), binding }
    }
}

/// A D1 database: statements in, rows (JSON objects of their columns) out.
#[derive(Clone)]
pub struct Db {
    env: Env,
    binding: &'static str,
}

impl Db {
    /// Every row of the query.
    pub async fn all(&self, stmt: Statement) -> Result<Vec<serde_json::Value>> {
        self.env.rt.d1_rows(self.binding, stmt).await
    }

    /// The first row of the query; `None` when there is none.
    pub async fn first(&self, stmt: Statement) -> Result<Option<serde_json::Value>> {
        Ok(self.all(stmt).await?.into_iter().next())
    }

    /// Runs one statement; the rows it changed.
    pub async fn run(&self, stmt: Statement) -> Result<u64> {
        Ok(self.batch(vec![stmt]).await?.first().copied().unwrap_or(0))
    }

    /// Statements run in one transaction, all or none; the rows each changed.
    pub async fn batch(&self, stmts: Vec<Statement>) -> Result<Vec<u64>> {
        self.env.rt.d1_batch(self.binding, stmts).await
    }
}

/// Milliseconds since the epoch, by the installed runtime's clock.
pub fn now_ms() -> u64 {
    CURRENT.with(|c| c.borrow().as_ref().map(|rt| rt.now_ms())).unwrap_or(0)
}

/// Random bytes from the installed runtime.
pub fn fill_random(buf: &mut [u8]) -> Result<(), crate::pure::random::Unavailable> {
    Ok(current().fill_random(buf)?)
}

impl From<Error> for crate::pure::random::Unavailable {
    fn from(_: Error) -> crate::pure::random::Unavailable {
        crate::pure::random::Unavailable
    }
}

/// Sends one request through the installed runtime.
pub fn fetch(req: Outbound) -> Fut<'static, Result<Fetched>> {
    current().fetch(req)
}

/// Runs `work` beside the current event, through the installed runtime.
pub fn spawn(work: impl std::future::Future<Output = ()> + 'static) {
    current().spawn(Box::pin(work));
}

/// One log line through the installed runtime.
pub fn log_line(line: &str) {
    if let Some(rt) = CURRENT.with(|c| c.borrow().clone()) {
        rt.log(line);
    }
}

/// A timer of the installed runtime.
fn timer_of_runtime(on_fire: Rc<dyn Fn()>) -> Box<dyn RuntimeTimer> {
    current().timer(on_fire)
}

/// Work that goes on after the response (`waitUntil`).
#[derive(Clone)]
pub struct Context {
    wait_until: Rc<dyn Fn(Fut<'static, ()>)>,
}

impl Context {
    pub fn new(wait_until: Rc<dyn Fn(Fut<'static, ()>)>) -> Context {
        Context { wait_until }
    }

    pub fn wait_until(&self, work: impl std::future::Future<Output = ()> + 'static) {
        (self.wait_until)(Box::pin(work));
    }
}

/// Completes after `ms` milliseconds of the runtime's clock.
pub async fn sleep(ms: u64) {
    let mut timer = timer::Timer::default();
    let at = now_ms().saturating_add(ms);
    loop {
        let now = now_ms();
        if now >= at {
            return;
        }
        timer.arm_by(at, now);
        timer.fired().await;
    }
}

/// A Durable Object instance: one per object id, single-threaded, its storage its own.
pub trait ObjectHandler {
    fn fetch(&self, req: Request) -> Fut<'_, Response>;
    /// The alarm fired; `Err` makes the runtime retry it.
    fn alarm(&self) -> Fut<'_, Result<()>>;
}

/// What the runtime calls: the shell, as a whole.
pub trait Worker {
    /// A client's request.
    fn serve(&self, req: Request, env: Env, ctx: Context) -> Fut<'static, Response>;
    /// A new instance of the Durable Object class bound as `namespace` (`None`: no such class).
    fn open_object(&self, namespace: &str, storage: Rc<dyn ObjectStorage>, env: Env) -> Option<Rc<dyn ObjectHandler>>;
    /// Forgets everything the isolate keeps in memory (an isolate evicted and started again).
    fn evict_isolate(&self);
}

/// The value stored under `key` in a Durable Object's storage, read from its JSON.
pub async fn storage_get<T: serde::de::DeserializeOwned>(storage: &dyn ObjectStorage, key: &str) -> Result<Option<T>> {
    let Some(text) = storage.get(key).await? else { return Ok(None) };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::new(Kind::Storage, format!("a stored value does not read: {e}")))
}

/// Stores `value` under `key` in a Durable Object's storage, as JSON.
pub async fn storage_put<T: serde::Serialize>(storage: &dyn ObjectStorage, key: &str, value: &T) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| Error::new(Kind::Storage, format!("a value to store: {e}")))?;
    storage.put(key, &text).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shows_the_runtimes_words_alone_and_keeps_its_kind() {
        let e = Error::new(Kind::Kv, "KV GET failed: 500");
        assert_eq!(e.to_string(), "KV GET failed: 500");
        assert_eq!((e.kind(), e.message()), (Kind::Kv, "KV GET failed: 500"));
        assert_eq!(e.of(Kind::D1).kind(), Kind::D1);
        let json = Error::from(serde_json::from_str::<u8>("x").unwrap_err());
        assert_eq!(json.kind(), Kind::Json);
        assert!(json.message().starts_with("JSON: "), "{json}");
    }

    #[test]
    fn only_a_d1_failure_violates_a_constraint() {
        let d1 = Error::new(Kind::D1, "D1_ERROR: UNIQUE constraint failed: mcp_servers.code_hash");
        assert!(d1.violates("UNIQUE") && d1.violates("code_hash"));
        assert!(!d1.violates("key_hash"));
        // The same words from another call (a backend's answer, say) are not D1's.
        let fetch = Error::new(Kind::Fetch, "UNIQUE constraint failed: mcp_servers.code_hash");
        assert!(!fetch.violates("UNIQUE"));
    }
}
