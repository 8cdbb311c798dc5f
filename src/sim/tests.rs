//! The simulator's own tests (fixture controls, not tests of Flowgate): a toy Worker that reads
//! KV, writes D1, calls a backend under a deadline, starts a Durable Object task finished by its
//! alarm, and does work after the response; with a bug it can be told to plant.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;

use futures::future::{select, Either};
use serde_json::{json, Value};

use super::*;
use crate::runtime::{
    sleep, Body, Context, Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Outbound, Request, Response,
    SqlValue, Statement, Worker,
};

const SECRET: &str = "sk-toy-backend-key";

#[derive(Default)]
struct Toy {
    /// The bug to plant, by name ("" for none).
    plant: RefCell<String>,
    /// Isolate memory (dropped by `evict_isolate`).
    cached: RefCell<Option<String>>,
    evictions: Cell<u32>,
    /// Alarms to fail before one succeeds.
    alarm_failures: Rc<Cell<u32>>,
}

fn json_response(status: u16, v: Value) -> Response {
    Response::from_json(&v).map(|r| r.with_status(status)).unwrap_or_else(|_| Response::empty().with_status(500))
}

fn path(url: &str) -> String {
    url::Url::parse(url).map(|u| u.path().to_string()).unwrap_or_default()
}

impl Toy {
    fn planted(&self, bug: &str) -> bool {
        *self.plant.borrow() == bug
    }
}

/// Calls the backend; with no deadline, waits as long as it takes.
async fn call_backend(env: &Env, url: &str, deadline_ms: Option<u64>) -> Result<String, String> {
    let rt = env.runtime();
    let mut headers = Headers::new();
    headers.set("authorization", &format!("Bearer {SECRET}"));
    let out = Outbound { method: Method::Post, url: url.to_string(), headers, body: Some(b"{\"q\":1}".to_vec()) };
    let exchange = async {
        let f = rt.fetch(out).await.map_err(|e| e.to_string())?;
        let status = f.status;
        let text = f.body.bytes().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(format!("{status} {}", String::from_utf8_lossy(&text)))
    };
    let Some(deadline_ms) = deadline_ms else { return exchange.await };
    match select(Box::pin(exchange), Box::pin(sleep(deadline_ms))).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err("deadline".into()),
    }
}

async fn serve_toy(toy: Rc<Toy>, req: Request, env: Env, ctx: Context) -> Response {
    let rt = env.runtime();
    let p = path(&req.url);
    match p.as_str() {
        "/toy/call" => {
            let greeting = match rt.kv_get("CACHE", "greeting").await {
                Ok(Some(g)) => g,
                Ok(None) => {
                    let _ = rt.kv_put("CACHE", "greeting", "hello", 60).await;
                    "hello".to_string()
                }
                Err(_) => return json_response(503, json!({"error": "cache unavailable"})),
            };
            *toy.cached.borrow_mut() = Some(greeting.clone());
            let row = Statement::new(
                "INSERT INTO audit_log (at, request_id, actor, action, status) VALUES (?1, ?2, 'toy', 'call', 200)",
                vec![SqlValue::Int(rt.now_ms() as i64), SqlValue::Text("r".into())],
            );
            if rt.d1_batch("DB", vec![row]).await.is_err() {
                return json_response(503, json!({"error": "database unavailable"}));
            }
            if toy.planted("log_secret") {
                rt.log(&format!("{{\"calling with\":\"{SECRET}\"}}"));
            }
            let target =
                if toy.planted("private_address") { "http://10.0.0.1/echo" } else { "http://backend.test/echo" };
            match call_backend(&env, target, Some(5_000)).await {
                Ok(text) => json_response(200, json!({"greeting": greeting, "backend": text})),
                Err(_) => json_response(502, json!({"error": "backend unavailable"})),
            }
        }
        "/toy/no_deadline" => match call_backend(&env, "http://backend.test/echo", None).await {
            Ok(t) => json_response(200, json!({ "backend": t })),
            Err(_) => json_response(502, json!({"error": "backend unavailable"})),
        },
        "/toy/spin" => loop {
            sleep(1_000).await;
        },
        // Wakes itself at once, forever: never idle, never a timer.
        "/toy/busy" => loop {
            std::future::poll_fn(|cx| {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending::<()>
            })
            .await;
        },
        "/toy/task" => {
            let name = req.headers.get("x-task").unwrap_or_else(|| "t".into());
            match rt.object_fetch("TASKS", &name, Request::post("https://object/start", "{}".into())).await {
                Ok(r) => {
                    let (status, headers, body) = r.into_parts();
                    Response::new(status, headers, body)
                }
                Err(_) => json_response(503, json!({"error": "task store unavailable"})),
            }
        }
        "/toy/later" => {
            for i in 0..3u64 {
                let env = env.clone();
                ctx.wait_until(async move {
                    sleep(10 * (3 - i)).await;
                    let _ = env.runtime().kv_put("CACHE", &format!("later-{i}"), "x", 60).await;
                });
            }
            json_response(200, json!({"ok": true}))
        }
        "/mcp/server/x/mcp" => {
            if toy.planted("bad_json_rpc") {
                return json_response(200, json!({"result": 1}));
            }
            json_response(200, json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        }
        "/console/api/new" if toy.planted("secret_in_body") => json_response(201, json!({ "key": SECRET })),
        _ => {
            if toy.planted("text_error") {
                return Response::text_with_status("not found", 404);
            }
            json_response(404, json!({"error": "not found"}))
        }
    }
}

struct ToyObject {
    storage: Rc<dyn ObjectStorage>,
    alarm_failures: Rc<Cell<u32>>,
}

impl ObjectHandler for ToyObject {
    fn fetch(&self, _req: Request) -> Fut<'_, Response> {
        Box::pin(async move {
            if self.storage.put("state", "\"running\"").await.is_err() {
                return json_response(500, json!({"error": "storage"}));
            }
            let at = crate::runtime::now_ms() + 1_000;
            let _ = self.storage.set_alarm(at).await;
            json_response(202, json!({"state": "running"}))
        })
    }

    fn alarm(&self) -> Fut<'_, crate::runtime::Result<()>> {
        Box::pin(async move {
            if self.alarm_failures.get() > 0 {
                self.alarm_failures.set(self.alarm_failures.get() - 1);
                return Err(crate::runtime::Error::new(crate::runtime::Kind::Storage, "the toy's alarm failed"));
            }
            self.storage.put("state", "\"done\"").await
        })
    }
}

impl Worker for Rc<Toy> {
    fn serve(&self, req: Request, env: Env, ctx: Context) -> Fut<'static, Response> {
        Box::pin(serve_toy(self.clone(), req, env, ctx))
    }

    fn open_object(&self, namespace: &str, storage: Rc<dyn ObjectStorage>, _env: Env) -> Option<Rc<dyn ObjectHandler>> {
        (namespace == "TASKS").then(|| Rc::new(ToyObject { storage, alarm_failures: self.alarm_failures.clone() }) as _)
    }

    fn evict_isolate(&self) {
        self.cached.borrow_mut().take();
        self.evictions.set(self.evictions.get() + 1);
    }
}

fn post(path: &str) -> Request {
    Request {
        method: Method::Post,
        url: format!("https://flowgate.test{path}"),
        headers: Headers::new().into(),
        body: Body::Empty,
    }
}

fn echo_backend() -> Rc<dyn Backend> {
    Rc::new(|req: &BackendRequest, _now: u64| {
        Reply::Respond(network::Scripted {
            status: 200,
            headers: Headers::new(),
            delay_ms: 20,
            chunks: vec![
                Chunk { delay_ms: 5, bytes: b"echo:".to_vec() },
                Chunk { delay_ms: 5, bytes: req.body.clone().into_bytes() },
            ],
            end: BodyEnd::Complete,
        })
    })
}

fn toy_sim(seed: u64) -> (Sim, Rc<Toy>) {
    let toy = Rc::new(Toy::default());
    let sim = Sim::new(seed, Rc::new(toy.clone()));
    sim.add_backend("http://backend.test", echo_backend());
    (sim, toy)
}

/// A run touching every part, under faults: its trace.
fn scenario(seed: u64) -> Vec<String> {
    let (sim, _toy) = toy_sim(seed);
    sim.set_faults(Faults::all(0.2, 50));
    for i in 0..4 {
        sim.request(post("/toy/call"));
        sim.request(post("/toy/later"));
        let mut t = post("/toy/task");
        let mut headers = (*t.headers).clone();
        headers.set("x-task", &format!("task-{i}"));
        t.headers = headers.into();
        sim.request(t);
    }
    sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    let mut random = [0u8; 8];
    crate::runtime::fill_random(&mut random).ok();
    let mut trace = sim.trace();
    trace.push(format!("random {random:?}"));
    trace
}

fn toy_secrets() -> Secrets {
    Secrets {
        secrets: vec![SECRET.into()],
        credentials: vec![(SECRET.into(), "http://backend.test".into())],
        ..Secrets::default()
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in seeds(0..5) {
        let a = scenario(seed);
        let b = scenario(seed);
        assert!(a.len() > 50, "a real run: {} lines", a.len());
        assert_eq!(a, b, "SIM_SEED={seed}: two runs of one seed differ");
    }
    assert_replays(&seeds(0..3), scenario);
}

#[test]
fn entropy_that_bypasses_the_runtime_is_caught_by_a_replay() {
    // The host's entropy (what a Worker drawing ids outside the runtime would use) in a trace.
    let leaky = |seed: u64| {
        let mut t = scenario(seed);
        let mut host = [0u8; 8];
        getrandom::getrandom(&mut host).ok();
        t.insert(3, format!("id {host:?}"));
        t
    };
    let d = replay_difference(1, leaky).expect("a difference");
    assert!(d.starts_with("SIM_SEED=1: line 3 differs"), "{d}");
    assert_eq!(replay_difference(1, scenario), None);
}

#[test]
fn different_seeds_differ_in_scheduling_and_faults() {
    let traces: BTreeSet<Vec<String>> = (0..8).map(scenario).collect();
    assert!(traces.len() >= 7, "only {} distinct traces of 8 seeds", traces.len());
    // Scheduling alone, no faults: the three waitUntil tasks ready at once are polled in
    // orders that differ between seeds.
    let orders: BTreeSet<Vec<String>> = (0..16)
        .map(|seed| {
            let (sim, _) = toy_sim(seed);
            sim.request(post("/toy/later"));
            sim.trace().into_iter().filter(|l| l.contains("poll task#")).map(|l| l[10..].to_string()).collect()
        })
        .collect();
    assert!(orders.len() > 1, "every seed polled the tasks in one order");
}

#[test]
fn a_hung_backend_is_reported_with_the_task_and_its_call() {
    let (sim, _) = toy_sim(1);
    sim.add_backend("http://backend.test", Rc::new(|_: &BackendRequest, _: u64| Reply::Hang));
    let h = sim.try_request(post("/toy/no_deadline")).expect_err("a hang, not an answer");
    assert!(h.reason.contains("nothing is left"), "{h}");
    assert!(
        h.tasks.iter().any(|t| t.contains("request #1 POST") && t.contains("fetch POST http://backend.test/echo")),
        "{h}"
    );
    // With a deadline, the same backend is a 502, not a hang.
    let r = sim.request(post("/toy/call"));
    assert_eq!(r.status, 502);
}

#[test]
fn a_request_that_never_ends_runs_out_of_virtual_time() {
    let (sim, _) = toy_sim(2);
    sim.set_budget(Budget { max_steps: 1_000_000, max_ms: 60_000 });
    let h = sim.try_request(post("/toy/spin")).expect_err("a hang");
    assert!(h.reason.contains("time budget"), "{h}");
    assert!(h.timers.iter().any(|t| t.contains("request #1")), "{h}");
    assert!(sim.now_ms() - EPOCH_MS <= 61_000);
}

#[test]
fn a_task_that_never_yields_runs_out_of_steps() {
    let (sim, _) = toy_sim(3);
    sim.set_budget(Budget { max_steps: 10_000, max_ms: 60_000 });
    let h = sim.try_request(post("/toy/busy")).expect_err("a hang");
    assert!(h.reason.contains("step budget"), "{h}");
}

#[test]
fn a_new_simulator_starts_with_a_fresh_isolate() {
    let toy = Rc::new(Toy::default());
    *toy.cached.borrow_mut() = Some("left by an earlier run".into());
    let _sim = Sim::new(1, Rc::new(toy.clone()));
    assert_eq!(*toy.cached.borrow(), None);
}

#[test]
fn a_clean_run_keeps_every_invariant() {
    for seed in seeds(0..5) {
        let (sim, _) = toy_sim(seed);
        sim.request(post("/toy/call"));
        sim.request(post("/toy/nowhere"));
        sim.request(post("/mcp/server/x/mcp"));
        sim.assert_invariants(&toy_secrets());
    }
}

#[test]
fn planted_bugs_break_invariants() {
    let cases = [
        ("log_secret", "a secret in a log line"),
        ("private_address", "a request to a refused address"),
        ("bad_json_rpc", "is not JSON-RPC"),
        ("text_error", "an error without a JSON body"),
    ];
    for (bug, expected) in cases {
        let (sim, toy) = toy_sim(7);
        *toy.plant.borrow_mut() = bug.into();
        sim.request(post("/toy/call"));
        sim.request(post("/mcp/server/x/mcp"));
        sim.request(post("/toy/nowhere"));
        sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
        let v = sim.check_invariants(&toy_secrets());
        assert!(v.iter().any(|x| x.contains(expected)), "{bug}: {v:?}");
    }
    // The same leak on an exempt path (the console's one showing of a new code) is allowed.
    let (sim, toy) = toy_sim(7);
    *toy.plant.borrow_mut() = "secret_in_body".into();
    sim.request(post("/console/api/new"));
    sim.request(post("/toy/nowhere"));
    let leak = |v: &Vec<String>| v.iter().any(|x| x.contains("a secret in the body"));
    assert!(leak(&sim.check_invariants(&toy_secrets())));
    let exempt = Secrets { exempt_paths: vec!["/console/api/".into()], ..toy_secrets() };
    let v = sim.check_invariants(&exempt);
    assert!(v.is_empty(), "{v:?}");
    // A credential sent to another origin than its own.
    let (sim, _) = toy_sim(7);
    sim.request(post("/toy/call"));
    let mut s = toy_secrets();
    s.credentials = vec![(SECRET.into(), "http://elsewhere.test".into())];
    let v = sim.check_invariants(&s);
    assert!(v.iter().any(|x| x.contains("a credential bound to http://elsewhere.test")), "{v:?}");
}

#[test]
fn faults_occur_at_their_configured_rates() {
    let (sim, _) = toy_sim(11);
    sim.set_faults(Faults { kv_error: 0.25, fetch_reset: 0.5, ..Faults::default() });
    let mut statuses = Vec::new();
    for _ in 0..2_000 {
        statuses.push(sim.request(post("/toy/call")).status);
    }
    let c = sim.fault_counts();
    let kv_rate = c.happened("kv_error") as f64 / c.considered("kv_error") as f64;
    assert!((0.21..0.29).contains(&kv_rate), "kv_error at {kv_rate}");
    let reset_rate = c.happened("fetch_reset") as f64 / c.considered("fetch_reset") as f64;
    assert!((0.46..0.54).contains(&reset_rate), "fetch_reset at {reset_rate}");
    // What the toy saw matches what happened: a KV error is a 503, a reset a 502.
    let n503 = statuses.iter().filter(|s| **s == 503).count() as u64;
    let n502 = statuses.iter().filter(|s| **s == 502).count() as u64;
    assert!(n503 >= c.happened("kv_error") && c.happened("fetch_reset") == n502, "{n503} {n502} {c:?}");
    assert_eq!(c.happened("d1_error"), 0);
}

#[test]
fn every_fault_kind_happens_and_the_run_still_ends() {
    let (sim, toy) = toy_sim(5);
    sim.set_faults(Faults::all(0.3, 100));
    for i in 0..60 {
        sim.request(post("/toy/call"));
        let mut t = post("/toy/task");
        let mut headers = (*t.headers).clone();
        headers.set("x-task", &format!("t{}", i % 5));
        t.headers = headers.into();
        sim.request(t);
    }
    sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    let c = sim.fault_counts();
    for kind in [
        "kv_error",
        "kv_latency",
        "d1_error",
        "d1_latency",
        "fetch_hang",
        "fetch_reset",
        "body_reset",
        "body_truncate",
        "object_restart",
        "isolate_evict",
    ] {
        assert!(c.happened(kind) > 0, "{kind} never happened: {c:?}");
    }
    // One eviction at the start (a fresh isolate), then one per fault.
    assert_eq!(toy.evictions.get() as u64, 1 + c.happened("isolate_evict"));
    assert!(sim.trace().iter().any(|l| l.contains("object restart")));
}

#[test]
fn object_alarms_fire_on_the_clock_and_failed_ones_are_retried_with_backoff() {
    let (sim, toy) = toy_sim(12);
    toy.alarm_failures.set(2);
    let r = sim.request(post("/toy/task"));
    assert_eq!((r.status, r.json()), (202, Some(json!({"state": "running"}))));
    let started = sim.now_ms();
    assert_eq!(sim.object_alarm("TASKS", "t"), Some(started + 1_000));
    // The test's own check: every task the toy accepted ends "done".
    let mut spec = toy_secrets();
    spec.checks.push(Rc::new(|sim: &Sim| {
        sim.objects()
            .into_iter()
            .filter(|(_, name)| sim.object_storage("TASKS", name).get("state").map(String::as_str) != Some("\"done\""))
            .map(|(_, name)| format!("task {name} did not end"))
            .collect()
    }));
    assert_eq!(invariants::check(&sim, &spec), vec!["task t did not end".to_string()]);
    // Storage outlives the instance.
    sim.restart_object("TASKS", "t");
    assert_eq!(sim.object_storage("TASKS", "t").get("state").map(String::as_str), Some("\"running\""));
    sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert_eq!(sim.object_storage("TASKS", "t").get("state").map(String::as_str), Some("\"done\""));
    assert_eq!(sim.object_alarm("TASKS", "t"), None);
    assert!(sim.check_invariants(&spec).is_empty());
    // Fired at +1 s, failed; retried 2 s later, failed; then 4 s later, done.
    let fires: Vec<u64> = sim
        .trace()
        .iter()
        .filter(|l| l.contains("alarm fires TASKS/t"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let at = started - EPOCH_MS;
    assert_eq!(fires, vec![at + 1_000, at + 3_000, at + 7_000]);
    // The restart made the alarm open a new instance.
    assert_eq!(sim.trace().iter().filter(|l| l.contains("object open TASKS/t")).count(), 2);
}

#[test]
fn a_task_left_unfinished_is_a_violation() {
    let (sim, _) = toy_sim(13);
    sim.add_backend("http://backend.test", Rc::new(|_: &BackendRequest, _: u64| Reply::Hang));
    let toy_later = post("/toy/later");
    sim.request(toy_later);
    sim.run_until_idle().unwrap_or_else(|h| panic!("{h}"));
    assert!(sim.check_invariants(&toy_secrets()).is_empty());
    // A request stuck on a backend that never answers is still there at the end.
    let h = sim.try_request(post("/toy/no_deadline"));
    assert!(h.is_err());
    let v = sim.check_invariants(&toy_secrets());
    assert!(v.iter().any(|x| x.contains("unfinished at the end of the run") && x.contains("fetch POST")), "{v:?}");
}

#[test]
fn requests_at_once_interleave_as_the_seed_decides() {
    let orders: BTreeSet<Vec<String>> = (0..12)
        .map(|seed| {
            let (sim, _) = toy_sim(seed);
            let answers = sim.requests_at_once((0..3).map(|_| post("/toy/call")).collect());
            assert!(answers.iter().all(|a| a.status == 200), "SIM_SEED={seed}");
            sim.trace()
                .into_iter()
                .filter(|l| l.contains("client ←") || l.contains("fetch →"))
                .map(|l| l[10..].to_string())
                .collect()
        })
        .collect();
    // The three calls overlap, and their order differs between seeds.
    assert!(orders.len() > 1, "one order for every seed");
}
