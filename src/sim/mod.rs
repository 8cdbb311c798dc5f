//! The deterministic simulator: the whole Worker (`runtime::Worker`) run on the host against an
//! in-memory platform (`runtime::Runtime`), in the spirit of turmoil, madsim and FoundationDB's
//! simulation. One thread, one executor polling ready tasks in a seeded order, a virtual clock
//! that jumps to the next timer, every random draw and fault decision from the seed, and
//! scripted backends for the network. A run is a function of its seed: a failing test prints
//! `SIM_SEED=<n>`, and `SIM_SEED=<n> cargo test <name>` reruns just that seed (see [`seeds`]).

// The API serves the shell's simulated tests, which land after it: not all of it has a user yet.
#![allow(dead_code)]

pub mod backends;
mod clock;
pub mod crypto;
mod d1;
mod executor;
pub mod faults;
pub mod invariants;
mod kv;
pub mod network;
mod objects;
#[cfg(test)]
mod parts_tests;
mod rng;
#[cfg(test)]
mod tests;
mod world;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::{Rc, Weak};

use futures::StreamExt;

pub use clock::EPOCH_MS;
pub use faults::{FaultCounts, Faults};
pub use invariants::Secrets;
pub use network::{Backend, BackendRequest, BodyEnd, Chunk, OutboundRecord, Reply};
pub use world::ClientExchange;
use world::World;

use crate::runtime::{self, Context, Env, Request, Result, Statement, Worker};

/// The seeds a test runs: `SIM_SEED` alone when set (replaying a failure), else `default`.
pub fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    seeds_given(std::env::var("SIM_SEED").ok().as_deref(), default)
}

/// [`seeds`] with the variable's value given (a value that is not a number is ignored).
fn seeds_given(var: Option<&str>, default: std::ops::Range<u64>) -> Vec<u64> {
    match var.and_then(|s| s.trim().parse().ok()) {
        Some(seed) => vec![seed],
        None => default.collect(),
    }
}

/// Runs `scenario` (a run's trace for a seed) twice with `seed`: the first line where the two
/// traces differ, or `None`. A difference is entropy or time that bypasses the runtime, or state
/// one run left for the next.
pub fn replay_difference(seed: u64, scenario: impl Fn(u64) -> Vec<String>) -> Option<String> {
    let (a, b) = (scenario(seed), scenario(seed));
    if a == b {
        return None;
    }
    let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let line = |t: &[String]| t.get(i).cloned().unwrap_or_else(|| "(the trace ended)".into());
    Some(format!("SIM_SEED={seed}: line {i} differs between two runs:\n  {}\n  {}", line(&a), line(&b)))
}

/// [`replay_difference`] for each seed; panics at the first difference.
pub fn assert_replays(seeds: &[u64], scenario: impl Fn(u64) -> Vec<String>) {
    for &seed in seeds {
        if let Some(d) = replay_difference(seed, &scenario) {
            panic!("{d}");
        }
    }
}

/// How far a drive may go before it is called a hang.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Task polls over the whole run.
    pub max_steps: u64,
    /// Virtual milliseconds per drive (`request`, `run_until_idle`, `advance`).
    pub max_ms: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget { max_steps: 2_000_000, max_ms: 3_600_000 }
    }
}

/// A run that could not finish: why, when, and what every unfinished task last asked for.
#[derive(Debug, Clone)]
pub struct Hang {
    pub seed: u64,
    pub reason: String,
    /// Virtual ms since the run began.
    pub at_ms: u64,
    pub tasks: Vec<String>,
    pub timers: Vec<String>,
}

impl fmt::Display for Hang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "SIM_SEED={}: {} at +{}ms", self.seed, self.reason, self.at_ms)?;
        for t in &self.tasks {
            writeln!(f, "  unfinished: {t}")?;
        }
        for t in &self.timers {
            writeln!(f, "  timer: {t}")?;
        }
        Ok(())
    }
}

/// A response as the client saw it: status, headers, the whole body.
pub type ClientResponse = ClientExchange;

impl ClientExchange {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

pub struct Sim {
    world: Rc<World>,
    budget: RefCell<Budget>,
    requests: RefCell<u64>,
}

impl Sim {
    /// A simulator running `worker`, every choice drawn from `seed`. Installs itself as this
    /// thread's runtime (again at every drive, so two simulators on one thread do not mix).
    pub fn new(seed: u64, worker: Rc<dyn Worker>) -> Sim {
        let sim = Sim { world: World::new(seed, worker), budget: RefCell::default(), requests: RefCell::new(0) };
        sim.install();
        // A fresh isolate: the Worker keeps its isolate memory in thread-locals, which outlive
        // an earlier simulator on this thread (and would make two runs of one seed differ).
        sim.world.worker.evict_isolate();
        sim
    }

    fn install(&self) {
        runtime::install(self.world.clone());
    }

    pub fn seed(&self) -> u64 {
        self.world.seed
    }

    pub fn set_setting(&self, name: &str, value: &str) {
        self.world.settings.borrow_mut().insert(name.to_string(), value.to_string());
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.world.faults.borrow_mut() = faults;
    }

    pub fn fault_counts(&self) -> FaultCounts {
        self.world.counts.borrow().clone()
    }

    pub fn set_budget(&self, budget: Budget) {
        *self.budget.borrow_mut() = budget;
    }

    /// Serves `origin` (`scheme://host[:port]`, as `url` serialises it) by `backend`.
    pub fn add_backend(&self, origin: &str, backend: Rc<dyn Backend>) {
        self.world.net.backends.borrow_mut().insert(origin.to_string(), backend);
    }

    /// The rate limiter bound as `binding` allows `limit` events per key per `period_ms`.
    pub fn set_rate_limit(&self, binding: &str, limit: u32, period_ms: u64) {
        self.world.rate.borrow_mut().config.insert(binding.to_string(), (limit, period_ms));
    }

    pub fn now_ms(&self) -> u64 {
        self.world.clock.now()
    }

    /// Sends a client request and reads its response to the end (an event stream included),
    /// virtual time advancing as the Worker waits. Panics with the seed on a hang.
    pub fn request(&self, req: Request) -> ClientResponse {
        self.try_request(req).unwrap_or_else(|h| panic!("{h}"))
    }

    pub fn try_request(&self, req: Request) -> Result<ClientResponse, Hang> {
        let mut answers = self.try_requests(vec![req])?;
        answers.pop().ok_or_else(|| self.hang("no answer".into()))
    }

    /// Sends every request at once (their tasks interleaved as the seed decides) and reads
    /// every response to its end; in the order given. Panics with the seed on a hang.
    pub fn requests_at_once(&self, reqs: Vec<Request>) -> Vec<ClientResponse> {
        self.try_requests(reqs).unwrap_or_else(|h| panic!("{h}"))
    }

    pub fn try_requests(&self, reqs: Vec<Request>) -> Result<Vec<ClientResponse>, Hang> {
        self.install();
        let started: Vec<_> = reqs.into_iter().map(|r| self.start_request(r)).collect();
        let w = &self.world;
        self.drive(|| started.iter().all(|(task, _)| w.exec.is_finished(*task)), true)?;
        let mut answers = Vec::new();
        for (_, slot) in started {
            let answer = slot.borrow_mut().take();
            answers.push(answer.ok_or_else(|| self.hang("a request task ended without a response".into()))?);
        }
        Ok(answers)
    }

    /// Spawns the task that sends `req` and reads its response into the slot.
    fn start_request(&self, req: Request) -> (executor::TaskId, Rc<RefCell<Option<ClientExchange>>>) {
        let w = &self.world;
        let n = {
            let mut r = self.requests.borrow_mut();
            *r += 1;
            *r
        };
        let p = w.faults.borrow().isolate_evict;
        if w.roll("isolate_evict", p) {
            w.worker.evict_isolate();
        }
        let (method, url) = (req.method.as_str().to_string(), req.url.clone());
        w.trace(format!("client → #{n} {method} {url}"));
        let weak: Weak<World> = Rc::downgrade(w);
        let ctx = Context::new(Rc::new(move |fut| {
            if let Some(w) = weak.upgrade() {
                w.exec.spawn(format!("waitUntil of request #{n}"), fut);
            }
        }));
        let served = w.worker.serve(req, Env::current(), ctx);
        let slot: Rc<RefCell<Option<ClientExchange>>> = Rc::default();
        let out = slot.clone();
        let world = w.clone();
        let task = w.exec.spawn(
            format!("request #{n} {method} {url}"),
            Box::pin(async move {
                let (status, headers, body) = served.await.into_parts();
                let mut stream = body.into_stream();
                let (mut bytes, mut body_error) = (Vec::new(), None);
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(c) => bytes.extend_from_slice(&c),
                        Err(e) => {
                            body_error = Some(e.to_string());
                            break;
                        }
                    }
                }
                world.trace(format!("client ← #{n} {status} ({} bytes)", bytes.len()));
                let ex = ClientExchange { method, url, status, headers, body: bytes, body_error };
                world.responses.borrow_mut().push(ex.clone());
                *out.borrow_mut() = Some(ex);
            }),
        );
        (task, slot)
    }

    /// Runs every task and fires every timer until nothing is left to do.
    pub fn run_until_idle(&self) -> Result<(), Hang> {
        self.install();
        self.drive(|| false, false)
    }

    /// Lets `ms` of virtual time pass, firing the timers due in it.
    pub fn advance(&self, ms: u64) -> Result<(), Hang> {
        self.install();
        let w = &self.world;
        let until = w.clock.now().saturating_add(ms);
        let budget = *self.budget.borrow();
        loop {
            self.run_ready(budget)?;
            match w.clock.next_at() {
                Some(at) if at <= until => {
                    if let Some(label) = w.clock.fire_next() {
                        w.trace(format!("fire {label}"));
                    }
                }
                _ => break,
            }
        }
        w.clock.set_now(until);
        self.run_ready(budget)
    }

    fn run_ready(&self, budget: Budget) -> Result<(), Hang> {
        let w = &self.world;
        let mut lines = Vec::new();
        let r = w.exec.run_ready(&w.rng, budget.max_steps, &mut |l| lines.push(l));
        for l in lines {
            w.trace(l);
        }
        r.map_err(|_| self.hang(format!("the step budget ({} polls) ran out", budget.max_steps)))
    }

    /// Runs until `done`, or (with `done` never true) until no timer is left. `need_done`: no
    /// timer left before `done` is a hang.
    fn drive(&self, done: impl Fn() -> bool, need_done: bool) -> Result<(), Hang> {
        let w = &self.world;
        let budget = *self.budget.borrow();
        let start = w.clock.now();
        loop {
            self.run_ready(budget)?;
            if done() {
                return Ok(());
            }
            match w.clock.next_at() {
                None if need_done => return Err(self.hang("nothing is left that could wake the request".into())),
                None => return Ok(()),
                Some(at) if at - start > budget.max_ms => {
                    return Err(self.hang(format!("the time budget ({} ms) ran out", budget.max_ms)));
                }
                Some(_) => {
                    if let Some(label) = w.clock.fire_next() {
                        w.trace(format!("fire {label}"));
                    }
                }
            }
        }
    }

    fn hang(&self, reason: String) -> Hang {
        let w = &self.world;
        let h = Hang {
            seed: w.seed,
            reason,
            at_ms: w.clock.now() - EPOCH_MS,
            tasks: w.exec.describe(),
            timers: w.clock.labels(),
        };
        w.trace(format!("hang: {}", h.reason));
        h
    }

    /// Unfinished tasks and what each last asked for.
    pub fn pending_tasks(&self) -> Vec<String> {
        self.world.exec.describe()
    }

    pub fn logs(&self) -> Vec<String> {
        self.world.logs.borrow().clone()
    }

    pub fn outbound(&self) -> Vec<OutboundRecord> {
        self.world.net.outbound.borrow().clone()
    }

    pub fn responses(&self) -> Vec<ClientExchange> {
        self.world.responses.borrow().clone()
    }

    /// Everything that happened, one line each, with its virtual time: polls, timers, calls,
    /// faults, logs. The same seed gives the same lines.
    pub fn trace(&self) -> Vec<String> {
        self.world.trace_lines.borrow().clone()
    }

    /// Every D1 statement the Worker has run so far (SQL cut to 120 characters), in order.
    pub fn d1_statements(&self) -> Vec<String> {
        self.world.d1_statements.borrow().clone()
    }

    pub fn kv_get(&self, binding: &str, key: &str) -> Option<String> {
        self.world.kv.get(binding, key, self.now_ms())
    }

    pub fn kv_put(&self, binding: &str, key: &str, value: &str, ttl_seconds: u64) -> Result<()> {
        self.world.kv.put(binding, key, value, ttl_seconds, self.now_ms())
    }

    /// Rows of a query on the database bound as `binding` (setting up or inspecting).
    pub fn d1_rows(&self, binding: &str, stmt: Statement) -> Result<Vec<serde_json::Value>> {
        self.world.d1.rows(binding, &stmt)
    }

    pub fn d1_batch(&self, binding: &str, stmts: Vec<Statement>) -> Result<Vec<u64>> {
        self.world.d1.batch(binding, &stmts)
    }

    /// Every Durable Object that exists (namespace, name).
    pub fn objects(&self) -> Vec<(String, String)> {
        self.world.objects.states.borrow().keys().cloned().collect()
    }

    pub fn object_storage(&self, ns: &str, name: &str) -> BTreeMap<String, String> {
        self.world.objects.state(ns, name).data.borrow().clone()
    }

    pub fn object_alarm(&self, ns: &str, name: &str) -> Option<u64> {
        self.world.objects.state(ns, name).alarm.get()
    }

    /// Drops the instance (storage and alarm kept): the next call or alarm opens a new one.
    pub fn restart_object(&self, ns: &str, name: &str) {
        self.world.restart_instance(ns, name);
    }

    /// Takes the namespace's binding away: every call to its objects fails as on a deployment
    /// without it.
    pub fn unbind_object(&self, ns: &str) {
        self.world.objects.unbound.borrow_mut().insert(ns.to_string());
    }

    /// Drops the object's alarm (storage kept), as when it was lost with a restart.
    pub fn lose_alarm(&self, ns: &str, name: &str) {
        self.world.lose_alarm(ns, name);
    }

    pub fn evict_isolate(&self) {
        self.world.trace("isolate evicted".into());
        self.world.worker.evict_isolate();
    }

    /// Every broken invariant (see [`invariants`]); call it after `run_until_idle`.
    pub fn check_invariants(&self, secrets: &Secrets) -> Vec<String> {
        let mut v = invariants::check(self, secrets);
        for t in self.pending_tasks() {
            v.push(format!("unfinished at the end of the run: {t}"));
        }
        v
    }

    /// Runs until idle, then panics (with the seed) on any broken invariant.
    pub fn assert_invariants(&self, secrets: &Secrets) {
        if let Err(h) = self.run_until_idle() {
            panic!("{h}");
        }
        let v = self.check_invariants(secrets);
        assert!(v.is_empty(), "SIM_SEED={}: invariants broken:\n  {}", self.seed(), v.join("\n  "));
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("SIM_SEED={} (rerun just this seed with SIM_SEED={0})", self.world.seed);
        }
        // Tasks and instances hold the runtime: drop them so the run's memory goes with it.
        self.world.exec.clear();
        self.world.objects.clear();
    }
}
