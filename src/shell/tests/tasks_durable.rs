//! Durable tasks against restarts and their TTL: a TaskRunner restarted between its alarms
//! resumes from storage, a lost alarm is re-armed by the next request, and the TTL ends a task
//! at its alarm before anything is polled, and in the very alarm a step that outlived it returns.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::{json, Value};

use super::*;
use crate::runtime::Method;
use crate::shell::platform::TASKS;
use crate::sim::{Backend, BackendRequest, Reply};

/// An async HTTP tool: submit, status and cancel endpoints.
const JOBS: &str = "https://jobs.test";
const JOBS_KEY: &str = "jobs-key-0123456789";

/// The remote job: when it is done, how long a submit takes, every request with its time.
#[derive(Default)]
struct Jobs {
    done_at_ms: Cell<u64>,
    submit_delay_ms: Cell<u64>,
    seen: RefCell<Vec<(u64, String)>>,
}

fn jobs(fx: &Fx) -> Rc<Jobs> {
    let j = Rc::new(Jobs::default());
    let s = j.clone();
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, now: u64| {
        s.seen.borrow_mut().push((now, req.path.clone()));
        match req.path.as_str() {
            "/submit" => {
                Reply::json(200, &json!({"task_id": "r-1", "status": "running"})).delayed(s.submit_delay_ms.get())
            }
            "/status" if now >= s.done_at_ms.get() => {
                Reply::json(200, &json!({"task_id": "r-1", "status": "completed", "result": {"answer": 42}}))
            }
            "/status" => Reply::json(200, &json!({"task_id": "r-1", "status": "running"})),
            _ => Reply::json(200, &json!({"task_id": "r-1", "status": "cancelled"})),
        }
    });
    fx.sim.add_backend(JOBS, backend);
    j
}

/// The async tool as a task-capable app, polled every `poll_s`; its server code.
fn job_server(fx: &Fx, poll_s: u64) -> String {
    fx.secret(JOBS_KEY);
    let manifest = json!({"name": "job", "description": "A long job.",
        "parameters": [{"name": "what", "type": "string", "required": true, "description": "What to do"}]});
    let backend = json!({"api_endpoint": format!("{JOBS}/submit"), "api_key": JOBS_KEY, "manifest": manifest,
        "task_support": "optional", "poll_interval_seconds": poll_s, "timeout_seconds": 120, "first_byte_timeout_seconds": 90,
        "async": {"status_endpoint": format!("{JOBS}/status"), "cancel_endpoint": format!("{JOBS}/cancel")}});
    let r = fx.console(
        Method::Post,
        "/apps",
        Some(&json!({"name": "Job", "description": "d", "mode": "http-tool", "backend": backend})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

fn rpc(fx: &Fx, code: &str, method: &str, params: Value) -> Value {
    last(&fx.mcp(code, &json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})))
}

/// Starts the job as a task with a TTL of 60 s; its id.
fn start(fx: &Fx, code: &str) -> String {
    let created =
        rpc(fx, code, "tools/call", json!({"name": "Job", "arguments": {"what": "x"}, "task": {"ttl": 60_000}}));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{created}");
    id
}

fn status(fx: &Fx, code: &str, id: &str) -> Value {
    rpc(fx, code, "tasks/get", json!({"taskId": id}))["result"].clone()
}

fn advance(fx: &Fx, ms: u64) {
    fx.sim.advance(ms).unwrap_or_else(|h| panic!("{h}"));
}

/// When each request of `path` came, since `t0`.
fn times(j: &Jobs, path: &str, t0: u64) -> Vec<u64> {
    j.seen.borrow().iter().filter(|(_, p)| p == path).map(|(t, _)| t - t0).collect()
}

fn opened(fx: &Fx, id: &str) -> usize {
    let line = format!("object open {TASKS}/{id}");
    fx.sim.trace().iter().filter(|l| l.ends_with(&line)).count()
}

#[test]
fn a_task_runner_restarted_between_its_alarms_resumes_polling_from_storage() {
    for seed in crate::sim::seeds(800..803) {
        let fx = Fx::new(seed);
        let j = jobs(&fx);
        let code = job_server(&fx, 1);
        let t0 = fx.sim.now_ms();
        j.done_at_ms.set(t0 + 12_000);
        let id = start(&fx, &code);
        // A restart every 1.5 s: no instance sees more than two alarms.
        for _ in 0..10 {
            advance(&fx, 1_500);
            fx.sim.restart_object(TASKS, &id);
        }
        assert!(opened(&fx, &id) >= 8, "restarted: {}", opened(&fx, &id));
        let result = rpc(&fx, &code, "tasks/result", json!({"taskId": id}));
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert_eq!(result["result"]["structuredContent"]["answer"], 42, "{result}");
        let polls = times(&j, "/status", t0);
        assert!(polls.len() >= 10 && polls.iter().any(|&t| t >= 12_000), "{polls:?}");
        assert_eq!(times(&j, "/submit", t0).len(), 1, "submitted once");
        assert_eq!(status(&fx, &code, &id)["status"], "completed");
        fx.assert_invariants();
    }
}

#[test]
fn a_lost_alarm_is_armed_again_by_the_next_request_and_the_task_ends() {
    let fx = Fx::new(803);
    let j = jobs(&fx);
    let code = job_server(&fx, 1);
    let t0 = fx.sim.now_ms();
    j.done_at_ms.set(t0 + 5_000);
    let id = start(&fx, &code);
    advance(&fx, 1_500);
    fx.sim.restart_object(TASKS, &id);
    fx.sim.lose_alarm(TASKS, &id);
    // Nothing wakes it: no polls while nobody asks.
    let polls = times(&j, "/status", t0).len();
    advance(&fx, 20_000);
    assert_eq!(times(&j, "/status", t0).len(), polls, "polled without an alarm?");
    assert_eq!(status(&fx, &code, &id)["status"], "working");
    // That request armed it again: the overdue poll runs at once and finds the job done.
    assert!(fx.sim.object_alarm(TASKS, &id).is_some(), "not armed again");
    advance(&fx, 1_000);
    let got = status(&fx, &code, &id);
    assert_eq!(got["status"], "completed", "{got}");
    fx.assert_invariants();
}

#[test]
fn the_ttl_ends_a_task_at_its_alarm_before_anything_is_polled() {
    let fx = Fx::new(804);
    let j = jobs(&fx);
    let code = job_server(&fx, 5);
    let t0 = fx.sim.now_ms();
    // The job would report done at the very moment the TTL runs out.
    j.done_at_ms.set(t0 + 60_000);
    let id = start(&fx, &code);
    advance(&fx, 61_000);
    let got = status(&fx, &code, &id);
    assert_eq!(got["status"], "failed", "{got}");
    let msg = got["statusMessage"].as_str().unwrap_or_default();
    assert!(msg.contains("did not finish within its ttl of 60000 ms"), "{msg}");
    let polls = times(&j, "/status", t0);
    assert!(!polls.is_empty(), "it was polled while it ran");
    assert!(polls.iter().all(|&t| t < 60_000), "polled at or after its TTL: {polls:?}");
    assert_eq!(times(&j, "/cancel", t0).len(), 1, "its run is cancelled: {:?}", j.seen.borrow());
    fx.assert_invariants();
}

#[test]
fn a_step_that_outlives_the_ttl_ends_the_task_in_the_alarm_it_returns_in() {
    let fx = Fx::new(805);
    let j = jobs(&fx);
    let code = job_server(&fx, 5);
    let t0 = fx.sim.now_ms();
    j.done_at_ms.set(u64::MAX);
    // The submit answers after the TTL: the job started, but too late.
    j.submit_delay_ms.set(61_000);
    let id = start(&fx, &code);
    advance(&fx, 62_000);
    let got = status(&fx, &code, &id);
    assert_eq!(got["status"], "failed", "{got}");
    assert!(got["statusMessage"].as_str().is_some_and(|m| m.contains("its run at the backend is cancelled")), "{got}");
    // Ended in the alarm that took the submit's answer: the next alarm is the cancel's.
    let alarm = format!("alarm fires {TASKS}/{id}");
    let after: Vec<String> = fx
        .sim
        .trace()
        .into_iter()
        .filter(|l| l.ends_with(&alarm))
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t >= t0 - crate::sim::EPOCH_MS + 61_000)
        })
        .collect();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(times(&j, "/cancel", t0), vec![61_000], "cancelled at once");
    assert!(times(&j, "/status", t0).is_empty(), "never polled");
    fx.assert_invariants();
}
