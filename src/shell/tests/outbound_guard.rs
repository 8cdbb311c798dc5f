//! `shell::outbound` where the broader call tests leave it open: the error body's cap, redirects
//! that change the method, and the guard's and readers' own contracts, driven through the Worker
//! where a client can see the behaviour and through the module itself (in a one-request Worker
//! under the simulator) where only a caller of the module can.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::runtime::{Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Request, Response, Worker};
use crate::shell::outbound::{self, SendError};
use crate::sim::network::Scripted as ScriptedReply;
use crate::sim::{Backend, BackendRequest, BodyEnd, Chunk, Reply};

/// A public origin with a scripted answer per request.
const EDGE: &str = "https://edge.test";
const TOOL_KEY: &str = "tool-key-outbound-0123456789";

/// Every request an origin saw.
#[derive(Default)]
struct Seen(RefCell<Vec<BackendRequest>>);

fn scripted(fx: &Fx, origin: &str, f: impl Fn(&BackendRequest) -> Reply + 'static) -> Rc<Seen> {
    let seen = Rc::new(Seen::default());
    let s = seen.clone();
    let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, _now: u64| {
        s.0.borrow_mut().push(req.clone());
        f(req)
    });
    fx.sim.add_backend(origin, backend);
    seen
}

fn redirect(status: u16, location: &str) -> Reply {
    Reply::new(status, "", Vec::new()).with_header("location", location)
}

/// An HTTP tool at `EDGE/run`, published; its code.
fn tool_server(fx: &Fx) -> String {
    fx.secret(TOOL_KEY);
    let manifest = json!({"name": "get_weather", "description": "Weather.",
        "parameters": [{"name": "location", "type": "string", "required": true, "description": "City"}]});
    let backend = json!({"api_endpoint": format!("{EDGE}/run"), "api_key": TOOL_KEY, "manifest": manifest});
    let body = json!({"name": "Weather", "description": "d", "mode": "http-tool", "backend": backend});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "creating the tool: {}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

/// The result's first text, and whether it is an error.
fn outcome(resp: &ClientResponse) -> (bool, String) {
    let v = last(resp);
    let r = &v["result"];
    (r["isError"].as_bool().unwrap_or(false), r["content"][0]["text"].as_str().unwrap_or_default().to_string())
}

/// An upstream MCP app at `origin`/mcp (not published); its id.
fn mcp_app(fx: &Fx, name: &str, origin: &str) -> String {
    let b = json!({"name": name, "description": "d", "mode": "mcp", "backend": {"url": format!("{origin}/mcp")}});
    let r = fx.console(Method::Post, "/apps", Some(&b));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Through the Worker

#[test]
fn an_upstream_error_body_is_read_up_to_64_kib_and_quoted() {
    let fx = Fx::new(401);
    // HTTP 500 to everything, with a body of the length the path's origin names.
    for (origin, len) in [("https://big.test", 60 * 1024), ("https://huge.test", 64 * 1024 + 1)] {
        scripted(&fx, origin, move |_| {
            let mut body = "upstream exploded ".to_string();
            body.push_str(&"x".repeat(len - body.len()));
            Reply::new(500, "text/plain", body)
        });
    }
    let big = mcp_app(&fx, "Big", "https://big.test");
    let r = fx.console(Method::Post, &format!("/apps/{big}/tools/refresh"), None);
    assert_eq!(r.status, 422, "{}", r.text());
    // Read whole (60 KiB is under the cap), quoted in part.
    assert!(r.text().contains("HTTP 500: upstream exploded xxx"), "{}", r.text());
    let huge = mcp_app(&fx, "Huge", "https://huge.test");
    let r = fx.console(Method::Post, &format!("/apps/{huge}/tools/refresh"), None);
    assert_eq!(r.status, 422, "{}", r.text());
    // One byte over the cap: not read, so not quoted.
    assert!(r.text().contains("HTTP 500") && !r.text().contains("upstream exploded"), "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn a_post_redirected_by_301_or_302_becomes_a_get_without_body() {
    for status in [301, 302] {
        let fx = Fx::new(402);
        let code = tool_server(&fx);
        let edge = scripted(&fx, EDGE, move |req| {
            if req.path == "/run" {
                redirect(status, "/result")
            } else {
                Reply::json(200, &json!({"method": req.method.as_str()}))
            }
        });
        let r = fx.call(&code, "Weather", json!({"location": "Paris"}));
        assert_eq!(outcome(&r), (false, json!({"method": "GET"}).to_string()), "{status}: {}", r.text());
        let seen = edge.0.borrow();
        assert_eq!((seen[0].method.clone(), seen[1].method.clone()), (Method::Post, Method::Get), "{status}");
        assert_eq!(seen[1].body, "", "{status}: the body does not follow");
        // Same origin: the key does.
        assert_eq!(seen[1].bearer().as_deref(), Some(TOOL_KEY));
        drop(seen);
        fx.assert_invariants();
    }
}

#[test]
fn a_cross_origin_redirect_without_body_sends_neither_content_type_nor_key() {
    let fx = Fx::new(403);
    let code = tool_server(&fx);
    scripted(&fx, EDGE, |_| redirect(303, "https://other.test/result"));
    let other = scripted(&fx, "https://other.test", |_| Reply::json(200, &json!({"ok": true})));
    let r = fx.call(&code, "Weather", json!({"location": "Paris"}));
    assert!(!outcome(&r).0, "{}", r.text());
    let seen = other.0.borrow();
    assert_eq!(seen.len(), 1);
    let h = &seen[0].headers;
    assert_eq!((seen[0].method.clone(), seen[0].body.as_str()), (Method::Get, ""));
    // No body, so no content type; the key stays home.
    assert_eq!(h.get("content-type"), None, "{h:?}");
    assert_eq!(h.get("authorization"), None, "{h:?}");
}

#[test]
fn a_failed_fetch_says_what_the_runtime_said() {
    let fx = Fx::new(404);
    let code = tool_server(&fx);
    // No backend at the origin: the runtime's own words, after the host.
    let (is_error, text) = outcome(&fx.call(&code, "Weather", json!({"location": "x"})));
    // (A refused connection also names the setting to check: `pure::backend::advice`.)
    assert!(is_error && text.contains("edge.test: ") && text.contains("(fetch failed: connection refused)"), "{text}");
    // A body that breaks off: the same, from the body's read.
    scripted(&fx, EDGE, |_| Reply::json(200, &json!({"a": "b".repeat(100)})).ending(BodyEnd::Reset));
    let (is_error, text) = outcome(&fx.call(&code, "Weather", json!({"location": "x"})));
    assert!(is_error && text.contains("Network connection lost"), "{text}");
    fx.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// The module itself, in a one-request Worker under the simulator

type Script = Box<dyn FnOnce(Env) -> Fut<'static, Value>>;

/// A Worker whose one request runs the script it was given; its answer is the script's value.
#[derive(Default)]
struct ScriptWorker(RefCell<Option<Script>>);

impl Worker for ScriptWorker {
    fn serve(&self, _req: Request, env: Env, _ctx: crate::runtime::Context) -> Fut<'static, Response> {
        let script = self.0.borrow_mut().take();
        Box::pin(async move {
            let v = match script {
                Some(s) => s(env).await,
                None => Value::Null,
            };
            Response::from_json(&v).unwrap_or_else(|_| Response::empty())
        })
    }
    fn open_object(&self, _: &str, _: Rc<dyn ObjectStorage>, _: Env) -> Option<Rc<dyn ObjectHandler>> {
        None
    }
    fn evict_isolate(&self) {}
}

struct Run {
    sim: crate::sim::Sim,
    worker: Rc<ScriptWorker>,
}

impl Run {
    fn new(seed: u64) -> Run {
        let worker = Rc::new(ScriptWorker::default());
        Run { sim: crate::sim::Sim::new(seed, worker.clone()), worker }
    }

    fn backend(&self, origin: &str, f: impl Fn(&BackendRequest) -> Reply + 'static) {
        let backend: Rc<dyn Backend> = Rc::new(move |req: &BackendRequest, _now: u64| f(req));
        self.sim.add_backend(origin, backend);
    }

    /// Runs `script` as the one request (the event's guard read first, as `serve` does); its value.
    fn run<F: std::future::Future<Output = Value> + 'static>(&self, script: impl FnOnce(Env) -> F + 'static) -> Value {
        *self.worker.0.borrow_mut() = Some(Box::new(move |env| {
            Box::pin(async move {
                outbound::guard_from_env(&env);
                script(env).await
            })
        }));
        let r = self.sim.request(request(Method::Get, "https://flowgate.test/", &[], None));
        r.json().unwrap_or(Value::Null)
    }
}

/// What a send and a read of its body came to: the body, or the error's kind.
fn read_outcome(sent: Result<outbound::Answer, SendError>, read: Option<Result<String, SendError>>) -> Value {
    let word = |e: &SendError| match e {
        SendError::Unreachable(why) => json!({"unreachable": why.to_string()}),
        SendError::TimedOut => json!("timed out"),
        SendError::TooLarge(cap) => json!({"too large": cap}),
    };
    match (sent, read) {
        (Err(e), _) => word(&e),
        (Ok(_), Some(Err(e))) => word(&e),
        (Ok(_), Some(Ok(text))) => json!({"text": text}),
        (Ok(a), None) => json!({"status": a.status_code()}),
    }
}

/// A 200 answer of `chunks` (`delay_ms` apart from the previous), with `headers`, ending `end`.
fn answer(headers: &[(&str, &str)], chunks: Vec<(u64, Vec<u8>)>, end: BodyEnd) -> Reply {
    let mut h = Headers::new();
    for (k, v) in headers {
        h.set(k, v);
    }
    let chunks = chunks.into_iter().map(|(delay_ms, bytes)| Chunk { delay_ms, bytes }).collect();
    Reply::Respond(ScriptedReply { status: 200, headers: h, delay_ms: 0, chunks, end })
}

/// GETs `url` (headers within `send_s`) and reads its body within `read_s` up to `cap` bytes.
async fn get_and_read(url: &str, send_s: u64, read_s: u64, cap: usize) -> Value {
    let sent = outbound::send(Method::Get, url, Headers::new(), None, Duration::from_secs(send_s)).await;
    match sent {
        Ok(mut a) => {
            let read = outbound::text(&mut a, Duration::from_secs(read_s), cap).await;
            read_outcome(Ok(a), Some(read))
        }
        Err(e) => read_outcome(Err(e), None),
    }
}

#[test]
fn a_body_past_its_cap_is_not_read_further_announced_or_not_encoded_or_not() {
    // A first chunk over the 1 KiB cap, then nothing ever: reading stops at the cap, it does
    // not wait for the rest (a small compressed body can inflate without bound).
    let cases: [&[(&str, &str)]; 3] =
        [&[], &[("content-length", "100"), ("content-encoding", "gzip")], &[("content-encoding", "br")]];
    for (i, headers) in cases.into_iter().enumerate() {
        let r = Run::new(410 + i as u64);
        let h: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        r.backend(EDGE, move |_| {
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            answer(&h, vec![(0, vec![b'x'; 2048])], BodyEnd::Hang)
        });
        let v = r.run(|_| async { get_and_read(&format!("{EDGE}/big"), 5, 30, 1024).await });
        assert_eq!(v, json!({"too large": 1024}), "{headers:?}");
        // At once: no timer ran out first.
        assert!(r.sim.now_ms() - crate::sim::EPOCH_MS < 1000, "{headers:?}: {}", r.sim.now_ms());
    }
}

#[test]
fn an_announced_body_is_read_whole_and_judged_by_what_came() {
    let r = Run::new(420);
    r.backend(EDGE, |req| {
        let body = if req.path == "/small" { vec![b'a'; 10] } else { vec![b'b'; 3000] };
        // `/liar` announces 10 bytes and sends 3000.
        answer(&[("content-length", "10")], vec![(0, body)], BodyEnd::Complete)
    });
    let v = r.run(|_| async {
        json!([
            get_and_read(&format!("{EDGE}/small"), 5, 5, 1024).await,
            get_and_read(&format!("{EDGE}/liar"), 5, 5, 1024).await,
        ])
    });
    assert_eq!(v, json!([{"text": "a".repeat(10)}, {"too large": 1024}]));
}

#[test]
fn the_body_read_gets_its_own_timeout_from_when_it_starts() {
    // Headers at once, the body 5 s later: a 2 s exchange with a 10 s read reads it; a 2 s read
    // does not.
    let r = Run::new(430);
    r.backend(EDGE, |_| answer(&[], vec![(5000, b"late".to_vec())], BodyEnd::Complete));
    let v = r.run(|_| async {
        json!([
            get_and_read(&format!("{EDGE}/a"), 2, 10, 1024).await,
            get_and_read(&format!("{EDGE}/b"), 2, 2, 1024).await,
        ])
    });
    assert_eq!(v, json!([{"text": "late"}, "timed out"]));
}

#[test]
fn a_deadline_counts_down_on_the_clock_to_zero() {
    let r = Run::new(440);
    let v = r.run(|_| async {
        let d = outbound::Deadline::after(Duration::from_millis(5000));
        let at_start = d.left_ms();
        crate::runtime::sleep(2000).await;
        let later = d.left_ms();
        crate::runtime::sleep(4000).await;
        json!([at_start, later, d.left_ms()])
    });
    assert_eq!(v, json!([5000, 3000, 0]));
}

#[test]
fn why_a_body_gave_no_chunk_is_said_in_words() {
    use outbound::ChunkEnd;
    assert_eq!(ChunkEnd::Closed.to_string(), "the stream closed");
    assert_eq!(ChunkEnd::TimedOut.to_string(), "no answer in time");
    assert_eq!(
        ChunkEnd::Broken(crate::runtime::Error::new(crate::runtime::Kind::Body, "reset")).to_string(),
        "the stream broke: reset"
    );
}
