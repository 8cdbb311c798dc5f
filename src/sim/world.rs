//! The simulated platform as one value: the clock, the executor, the seeded generator, the
//! in-memory bindings and the network, behind the `Runtime` trait the shell calls.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::{Rc, Weak};

use super::clock::{self, Clock, SimTimer};
use super::crypto;
use super::d1::D1;
use super::executor::Executor;
use super::faults::{FaultCounts, Faults};
use super::kv::Kv;
use super::network::{self, AbortHandle, AbortState, BackendRequest, BodyStream, Network, OutboundRecord, Reply};
use super::objects::Objects;
use super::rng::Rng;
use crate::runtime::{
    Body, Error, Fetched, Fut, Headers, Kind, Outbound, Request, Response, Result, Runtime, RuntimeTimer, SignError,
    Statement, Worker,
};

/// A response as the client saw it, body read to its end.
#[derive(Debug, Clone)]
pub struct ClientExchange {
    pub method: String,
    pub url: String,
    pub status: u16,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// The body stream failed part way (`body` holds what came before).
    pub body_error: Option<String>,
}

/// Per-binding rate limits: `limit` events per key per fixed window of `period_ms`.
#[derive(Default)]
pub struct RateLimits {
    pub config: BTreeMap<String, (u32, u64)>,
    pub counts: BTreeMap<(String, String, u64), u32>,
}

pub struct World {
    pub seed: u64,
    pub me: Weak<World>,
    pub clock: Rc<Clock>,
    pub exec: Executor,
    pub rng: RefCell<Rng>,
    pub worker: Rc<dyn Worker>,
    pub settings: RefCell<BTreeMap<String, String>>,
    pub logs: RefCell<Vec<String>>,
    pub trace_lines: RefCell<Vec<String>>,
    /// Every D1 statement the Worker ran (batches statement by statement), its SQL cut to 120
    /// characters: what tests count writes by.
    pub d1_statements: RefCell<Vec<String>>,
    pub responses: RefCell<Vec<ClientExchange>>,
    pub kv: Kv,
    pub d1: D1,
    pub objects: Objects,
    pub net: Network,
    pub rate: RefCell<RateLimits>,
    pub faults: RefCell<Faults>,
    pub counts: RefCell<FaultCounts>,
}

impl World {
    pub fn new(seed: u64, worker: Rc<dyn Worker>) -> Rc<World> {
        Rc::new_cyclic(|me| World {
            seed,
            me: me.clone(),
            clock: Rc::new(Clock::new()),
            exec: Executor::default(),
            rng: RefCell::new(Rng::new(seed)),
            worker,
            settings: RefCell::default(),
            logs: RefCell::default(),
            trace_lines: RefCell::default(),
            d1_statements: RefCell::default(),
            responses: RefCell::default(),
            kv: Kv::default(),
            d1: D1::default(),
            objects: Objects::default(),
            net: Network::default(),
            rate: RefCell::default(),
            faults: RefCell::default(),
            counts: RefCell::default(),
        })
    }

    fn me(&self) -> Rc<World> {
        self.me.upgrade().unwrap_or_else(|| unreachable!("a runtime call after the simulator ended"))
    }

    /// Runs `work` as a task of its own, named after the task that started it (what
    /// `Runtime::spawn` does, on the boundary revision that has it).
    pub fn spawn_beside(&self, work: Fut<'static, ()>) {
        let label = format!("spawned by {}", self.exec.current_label());
        self.exec.spawn(label, work);
    }

    fn count_d1(&self, stmts: &[Statement]) {
        let mut log = self.d1_statements.borrow_mut();
        log.extend(stmts.iter().map(|s| s.sql.chars().take(120).collect::<String>()));
    }

    pub fn trace(&self, line: String) {
        let at = self.clock.now() - clock::EPOCH_MS;
        self.trace_lines.borrow_mut().push(format!("{at:>9} {line}"));
    }

    /// Draws whether fault `kind` (probability `p`) happens now, and counts it.
    pub fn roll(&self, kind: &'static str, p: f64) -> bool {
        let hit = self.rng.borrow_mut().chance(p);
        self.counts.borrow_mut().record(kind, hit);
        if hit {
            self.trace(format!("fault {kind}"));
        }
        hit
    }

    /// A storage call's injected latency, then its injected error.
    async fn storage_faults(self: Rc<Self>, what: &'static str) -> Result<()> {
        let f = self.faults.borrow().clone();
        let (lat_kind, lat_p, max, err_kind, err_p) = if what == "KV" {
            ("kv_latency", f.kv_latency, f.kv_latency_max_ms, "kv_error", f.kv_error)
        } else {
            ("d1_latency", f.d1_latency, f.d1_latency_max_ms, "d1_error", f.d1_error)
        };
        if self.roll(lat_kind, lat_p) {
            let ms = 1 + self.rng.borrow_mut().below(max.max(1));
            clock::sleep(&self.clock, ms, "injected storage latency").await;
        }
        if self.roll(err_kind, err_p) {
            let kind = if what == "KV" { Kind::Kv } else { Kind::D1 };
            return Err(Error::new(kind, format!("{what}: simulated failure (internal error)")));
        }
        Ok(())
    }

    pub async fn fetch_scripted(self: Rc<Self>, req: Outbound) -> Result<Fetched> {
        let parsed = network::origin_of(&req.url);
        let idx = {
            let mut out = self.net.outbound.borrow_mut();
            out.push(OutboundRecord {
                at_ms: self.clock.now(),
                method: req.method.as_str().to_string(),
                url: req.url.clone(),
                origin: parsed.as_ref().map(|p| p.0.clone()).unwrap_or_default(),
                headers: req.headers.clone(),
                body: String::from_utf8_lossy(req.body.as_deref().unwrap_or_default()).into_owned(),
                outcome: String::new(),
            });
            out.len() - 1
        };
        self.trace(format!("fetch → {} {}", req.method.as_str(), req.url));
        let outcome = |o: &str| {
            self.net.outbound.borrow_mut()[idx].outcome = o.to_string();
            self.trace(format!("fetch ← {o} {}", req.url));
        };
        let Some((origin, path)) = parsed else {
            outcome("invalid URL");
            return Err(Error::new(Kind::Fetch, "TypeError: Invalid URL"));
        };
        let backend = self.net.backends.borrow().get(&origin).cloned();
        let Some(backend) = backend else {
            outcome("connection refused");
            return Err(Error::new(Kind::Fetch, "fetch failed: connection refused"));
        };
        let f = self.faults.borrow().clone();
        if self.roll("fetch_reset", f.fetch_reset) {
            outcome("reset (fault)");
            return Err(Error::new(Kind::Fetch, "Network connection lost."));
        }
        if self.roll("fetch_hang", f.fetch_hang) {
            outcome("hang (fault)");
            return futures::future::pending().await;
        }
        let breq = BackendRequest {
            method: req.method.clone(),
            url: req.url.clone(),
            path,
            headers: req.headers.clone(),
            body: String::from_utf8_lossy(req.body.as_deref().unwrap_or_default()).into_owned(),
            bytes: req.body.clone().unwrap_or_default(),
        };
        let mut s = match backend.handle(&breq, self.clock.now()) {
            Reply::Hang => {
                outcome("hang");
                return futures::future::pending().await;
            }
            Reply::Reset => {
                outcome("reset");
                return Err(Error::new(Kind::Fetch, "Network connection lost."));
            }
            Reply::Respond(s) => s,
        };
        if s.delay_ms > 0 {
            clock::sleep(&self.clock, s.delay_ms, "a backend's response delay").await;
        }
        let total: usize = s.chunks.iter().map(|c| c.bytes.len()).sum();
        if total > 0 {
            if self.roll("body_reset", f.body_reset) {
                let at = self.rng.borrow_mut().below(total as u64) as usize;
                network::cut(&mut s.chunks, at);
                s.end = network::BodyEnd::Reset;
            } else if self.roll("body_truncate", f.body_truncate) {
                let at = self.rng.borrow_mut().below(total as u64) as usize;
                network::cut(&mut s.chunks, at);
            }
        }
        outcome(&s.status.to_string());
        let abort = Rc::new(AbortState::default());
        let body = BodyStream {
            clock: self.clock.clone(),
            chunks: VecDeque::from(s.chunks),
            end: s.end,
            sleep: None,
            abort: abort.clone(),
            finished: false,
        };
        Ok(Fetched {
            status: s.status,
            headers: s.headers,
            body: Body::Stream(Box::pin(body)),
            abort: Box::new(AbortHandle(abort)),
        })
    }
}

fn ready<T: 'static>(v: T) -> Fut<'static, T> {
    Box::pin(async move { v })
}

impl Runtime for World {
    fn spawn(&self, work: Fut<'static, ()>) {
        self.spawn_beside(work);
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.settings.borrow().get(name).cloned()
    }

    fn now_ms(&self) -> u64 {
        self.clock.now()
    }

    fn fill_random(&self, buf: &mut [u8]) -> Result<()> {
        self.rng.borrow_mut().fill(buf);
        Ok(())
    }

    fn timer(&self, on_fire: Rc<dyn Fn()>) -> Box<dyn RuntimeTimer> {
        let label = format!("timer of {}", self.exec.current_label());
        Box::new(SimTimer { clock: self.clock.clone(), label, on_fire, armed: None })
    }

    fn log(&self, line: &str) {
        self.trace(format!("log {line}"));
        self.logs.borrow_mut().push(line.to_string());
    }

    fn fetch(&self, req: Outbound) -> Fut<'static, Result<Fetched>> {
        self.exec.note(&format!("fetch {} {}", req.method.as_str(), req.url));
        Box::pin(self.me().fetch_scripted(req))
    }

    fn kv_get(&self, binding: &str, key: &str) -> Fut<'static, Result<Option<String>>> {
        self.exec.note(&format!("kv_get {binding} {key}"));
        let (w, b, k) = (self.me(), binding.to_string(), key.to_string());
        Box::pin(async move {
            w.clone().storage_faults("KV").await?;
            Ok(w.kv.get(&b, &k, w.clock.now()))
        })
    }

    fn kv_put(&self, binding: &str, key: &str, value: &str, ttl_seconds: u64) -> Fut<'static, Result<()>> {
        self.exec.note(&format!("kv_put {binding} {key}"));
        let (w, b, k, v) = (self.me(), binding.to_string(), key.to_string(), value.to_string());
        Box::pin(async move {
            w.clone().storage_faults("KV").await?;
            w.kv.put(&b, &k, &v, ttl_seconds, w.clock.now())
        })
    }

    fn kv_delete(&self, binding: &str, key: &str) -> Fut<'static, Result<()>> {
        self.exec.note(&format!("kv_delete {binding} {key}"));
        let (w, b, k) = (self.me(), binding.to_string(), key.to_string());
        Box::pin(async move {
            w.clone().storage_faults("KV").await?;
            w.kv.delete(&b, &k);
            Ok(())
        })
    }

    fn d1_rows(&self, binding: &str, stmt: Statement) -> Fut<'static, Result<Vec<serde_json::Value>>> {
        self.exec.note(&format!("d1_rows {binding} {}", stmt.sql));
        self.count_d1(std::slice::from_ref(&stmt));
        let (w, b) = (self.me(), binding.to_string());
        Box::pin(async move {
            w.clone().storage_faults("D1").await?;
            w.d1.rows(&b, &stmt)
        })
    }

    fn d1_batch(&self, binding: &str, stmts: Vec<Statement>) -> Fut<'static, Result<Vec<u64>>> {
        self.exec.note(&format!("d1_batch {binding} ({} statements)", stmts.len()));
        self.count_d1(&stmts);
        let (w, b) = (self.me(), binding.to_string());
        Box::pin(async move {
            w.clone().storage_faults("D1").await?;
            w.d1.batch(&b, &stmts)
        })
    }

    fn object_fetch(&self, namespace: &str, name: &str, req: Request) -> Fut<'static, Result<Response>> {
        self.exec.note(&format!("object_fetch {namespace}/{name} {}", req.url));
        let (w, ns, n) = (self.me(), namespace.to_string(), name.to_string());
        Box::pin(async move {
            let p = w.faults.borrow().object_restart;
            if w.roll("object_restart", p) {
                w.restart_instance(&ns, &n);
            }
            let handler = w.instance(&ns, &n)?;
            w.trace(format!("object fetch {ns}/{n} {}", req.url));
            Ok(handler.fetch(req).await)
        })
    }

    fn rate_limit(&self, binding: &str, key: &str) -> Fut<'static, Result<bool>> {
        let mut rate = self.rate.borrow_mut();
        let Some(&(limit, period)) = rate.config.get(binding) else { return ready(Ok(true)) };
        let window = self.clock.now() / period.max(1);
        let n = rate.counts.entry((binding.to_string(), key.to_string(), window)).or_default();
        *n += 1;
        let ok = *n <= limit;
        drop(rate);
        self.trace(format!("rate_limit {binding} {}", if ok { "ok" } else { "limited" }));
        ready(Ok(ok))
    }

    fn verify_signature(
        &self,
        jwk: &str,
        import: &str,
        verify: &str,
        signature: &[u8],
        data: &[u8],
    ) -> Fut<'static, Result<bool>> {
        let r = crypto::verify(jwk, import, verify, signature, data);
        self.trace(format!("crypto verify → {r:?}"));
        ready(r)
    }

    fn sign(
        &self,
        pkcs8: &[u8],
        import: &str,
        sign: &str,
        data: Option<&[u8]>,
    ) -> Fut<'static, Result<Vec<u8>, SignError>> {
        let r = crypto::sign(pkcs8, import, sign, data);
        self.trace(format!("crypto sign → {}", if r.is_ok() { "ok" } else { "error" }));
        ready(r)
    }
}
