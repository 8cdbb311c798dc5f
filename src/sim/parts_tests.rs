//! The simulator's platform parts and scripted backends, driven through the `Runtime` trait as
//! the shell drives them: a one-request Worker runs each test's script.

use std::cell::RefCell;
use std::rc::Rc;

use futures::StreamExt;
use serde_json::{json, Value};

use super::backends::{dify, http_tool, mcp, oauth};
use super::*;
use crate::runtime::{
    Body, Env, Fut, Headers, Method, ObjectHandler, ObjectStorage, Outbound, Request, Response, SqlValue, Statement,
};

type Script = Box<dyn FnOnce(Env) -> Fut<'static, Value>>;

/// A Worker whose one request runs the script it was given; its answer is the script's value.
#[derive(Default)]
struct ScriptWorker {
    script: RefCell<Option<Script>>,
}

impl Worker for ScriptWorker {
    fn serve(&self, _req: Request, env: Env, _ctx: crate::runtime::Context) -> Fut<'static, Response> {
        let script = self.script.borrow_mut().take();
        Box::pin(async move {
            let v = match script {
                Some(s) => s(env).await,
                None => json!(null),
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
    sim: Sim,
    worker: Rc<ScriptWorker>,
}

impl Run {
    fn new(seed: u64) -> Run {
        let worker = Rc::new(ScriptWorker::default());
        Run { sim: Sim::new(seed, worker.clone()), worker }
    }

    /// Runs `script` as one request; its value.
    fn run<F: std::future::Future<Output = Value> + 'static>(&self, script: impl FnOnce(Env) -> F + 'static) -> Value {
        *self.worker.script.borrow_mut() = Some(Box::new(move |env| Box::pin(script(env))));
        let r = self.sim.request(Request {
            method: Method::Get,
            url: "https://flowgate.test/".into(),
            headers: Headers::new().into(),
            body: Body::Empty,
        });
        r.json().unwrap_or(Value::Null)
    }
}

fn outbound(method: Method, url: &str, headers: &[(&str, &str)], body: Option<Value>) -> Outbound {
    Outbound {
        method,
        url: url.into(),
        headers: headers.iter().copied().collect(),
        body: body.map(|b| b.to_string().into_bytes()),
    }
}

/// Status, content type and whole body text of a fetch (or its error).
async fn fetch_text(env: &Env, req: Outbound) -> Value {
    match env.runtime().fetch(req).await {
        Err(e) => json!({"error": e.message()}),
        Ok(f) => {
            let ct = f.headers.get("content-type");
            let sid = f.headers.get("mcp-session-id");
            match f.body.bytes().await {
                Ok(b) => json!({"status": f.status, "type": ct, "session": sid, "body": String::from_utf8_lossy(&b)}),
                Err(e) => json!({"status": f.status, "body_error": e.message()}),
            }
        }
    }
}

#[test]
fn kv_values_expire_on_the_virtual_clock() {
    let r = Run::new(1);
    let v = r.run(|env| async move {
        let rt = env.runtime();
        let short = rt.kv_put("CACHE", "k", "v", 30).await.is_err();
        rt.kv_put("CACHE", "k", "v", 60).await.ok();
        json!({"short_refused": short, "read": rt.kv_get("CACHE", "k").await.ok().flatten()})
    });
    assert_eq!(v, json!({"short_refused": true, "read": "v"}));
    r.sim.advance(59_999).unwrap();
    assert_eq!(r.sim.kv_get("CACHE", "k").as_deref(), Some("v"));
    r.sim.advance(1).unwrap();
    assert_eq!(r.sim.kv_get("CACHE", "k"), None);
}

#[test]
fn d1_has_the_schema_keeps_sqlite_errors_and_batches_all_or_nothing() {
    let r = Run::new(2);
    let app = |id: &str| {
        Statement::new(
            "INSERT INTO apps (id, name, mode, backend, created_at, updated_at) VALUES (?1, 'A', 'workflow', '{}', 1, 1)",
            vec![SqlValue::Text(id.into())],
        )
    };
    let server = |id: &str, hash: &str| {
        Statement::new(
            "INSERT INTO mcp_servers (id, name, code_hash, code_hint, created_at, updated_at) VALUES (?1, 'S', ?2, 'abcd', 1, 1)",
            vec![SqlValue::Text(id.into()), SqlValue::Text(hash.into())],
        )
    };
    assert_eq!(r.sim.d1_batch("DB", vec![app("a1"), server("s1", "h1")]).unwrap(), vec![1, 1]);
    let e = r.sim.d1_batch("DB", vec![app("a2"), server("s2", "h1")]).unwrap_err();
    assert!(e.violates("UNIQUE constraint failed: mcp_servers.code_hash"), "{e}");
    // The batch failed as a whole: a2 was not kept.
    let rows = r.sim.d1_rows("DB", Statement::new("SELECT id, NULL AS app_id FROM apps ORDER BY id", vec![])).unwrap();
    assert_eq!(rows, vec![json!({"id": "a1", "app_id": null})]);
    // The same through the runtime, as the shell sees it.
    let v = r.run(|env| async move {
        let rows = env
            .runtime()
            .d1_rows("DB", Statement::new("SELECT count(*) AS n, 'x' AS t FROM mcp_servers", vec![]))
            .await;
        json!(rows.map_err(|e| e.to_string()))
    });
    assert_eq!(v, json!({"Ok": [{"n": 1, "t": "x"}]}));
}

#[test]
fn runtime_timers_fire_at_their_virtual_time() {
    let r = Run::new(3);
    let v = r.run(|env| async move {
        let start = env.runtime().now_ms();
        crate::runtime::sleep(1_500).await;
        json!(env.runtime().now_ms() - start)
    });
    assert_eq!(v, json!(1_500));
}

fn slow_stream() -> Rc<dyn Backend> {
    Rc::new(|_: &BackendRequest, _: u64| Reply::sse((0..5).map(|i| format!("data: {i}\n\n")).collect(), 100))
}

#[test]
fn abort_ends_a_body_stream_and_unknown_origins_are_refused() {
    let r = Run::new(4);
    r.sim.add_backend("http://stream.test", slow_stream());
    let v = r.run(|env| async move {
        let refused = fetch_text(&env, outbound(Method::Get, "http://nowhere.test/x", &[], None)).await;
        let Ok(f) = env.runtime().fetch(outbound(Method::Get, "http://stream.test/s", &[], None)).await else {
            return json!("no fetch");
        };
        let mut s = f.body.into_stream();
        let first = s.next().await.and_then(Result::ok).map(|b| String::from_utf8_lossy(&b).into_owned());
        f.abort.abort();
        let after = s.next().await.map(|c| c.map_err(|e| e.to_string()).err());
        let end = s.next().await.is_none();
        json!({"refused": refused, "first": first, "after": after, "end": end})
    });
    assert_eq!(v["refused"]["error"], "fetch failed: connection refused");
    assert_eq!(v["first"], "data: 0\n\n");
    assert!(v["after"].as_str().is_some_and(|e| e.contains("AbortError")), "{v}");
    assert_eq!(v["end"], true);
    let out = r.sim.outbound();
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].outcome.as_str(), out[1].outcome.as_str()), ("connection refused", "200"));
}

#[test]
fn body_faults_cut_bodies_short_or_reset_them() {
    for (faults, expect_error) in [
        (Faults { body_reset: 1.0, ..Faults::default() }, true),
        (Faults { body_truncate: 1.0, ..Faults::default() }, false),
    ] {
        let r = Run::new(5);
        r.sim.add_backend("http://stream.test", slow_stream());
        r.sim.set_faults(faults);
        let v = r
            .run(|env| async move { fetch_text(&env, outbound(Method::Get, "http://stream.test/s", &[], None)).await });
        if expect_error {
            assert_eq!(v["body_error"], "Network connection lost.", "{v}");
        } else {
            let body = v["body"].as_str().unwrap_or("");
            assert!(
                body.len() < 5 * "data: 0\n\n".len()
                    && "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n".starts_with(body),
                "{v}"
            );
        }
    }
}

#[test]
fn rate_limits_count_per_key_and_window() {
    let r = Run::new(6);
    r.sim.set_rate_limit("MCP_RATE_LIMIT", 2, 60_000);
    let probe = |r: &Run| {
        r.run(|env| async move {
            let rt = env.runtime();
            let mut v = vec![];
            for key in ["a", "a", "a", "b"] {
                v.push(rt.rate_limit("MCP_RATE_LIMIT", key).await.unwrap_or(false));
            }
            v.push(rt.rate_limit("UNBOUND", "a").await.unwrap_or(false));
            json!(v)
        })
    };
    assert_eq!(probe(&r), json!([true, true, false, true, true]));
    r.sim.advance(60_000).unwrap();
    assert_eq!(probe(&r), json!([true, true, false, true, true]));
}

#[test]
fn the_webcrypto_stand_in_signs_and_verifies_consistently() {
    let r = Run::new(7);
    let v = r.run(|env| async move {
        let rt = env.runtime();
        let rsa = r#"{"name":"RSASSA-PKCS1-v1_5","hash":"SHA-256"}"#;
        let ec = r#"{"name":"ECDSA","namedCurve":"P-256"}"#;
        let ec_sign = r#"{"name":"ECDSA","hash":"SHA-256"}"#;
        let mut out = vec![];
        for (alg, import, params) in [("RS256", rsa, rsa), ("ES256", ec, ec_sign)] {
            let key = crypto::SimKey::new("k1", alg);
            let jwk = key.jwk().to_string();
            let sig = rt.sign(&key.pkcs8, import, params, Some(b"data")).await.unwrap_or_default();
            out.push(json!([
                sig == key.sign(b"data"),
                rt.verify_signature(&jwk, import, params, &sig, b"data").await.ok(),
                rt.verify_signature(&jwk, import, params, &sig, b"date").await.ok(),
                rt.verify_signature(&crypto::SimKey::new("k2", alg).jwk().to_string(), import, params, &sig, b"data")
                    .await
                    .ok(),
            ]));
        }
        // An RSA key imported for ECDSA does not import.
        let rsa_jwk = crypto::SimKey::new("k1", "RS256").jwk().to_string();
        out.push(json!(rt.verify_signature(&rsa_jwk, ec, ec_sign, b"", b"").await.is_err()));
        json!(out)
    });
    assert_eq!(v, json!([[true, true, false, false], [true, true, false, false], true]));
}

#[test]
fn the_dify_backend_answers_blocking_and_streaming_runs() {
    let r = Run::new(8);
    let d = Rc::new(dify::Dify::default());
    d.add_app("wf-key", dify::App { outputs: Some(json!({"text": "abcdef"})), ..dify::App::new("workflow") });
    d.add_app("chat-key", dify::App::new("chat"));
    r.sim.add_backend("http://dify.test", d.clone());
    let v = r.run(|env| async move {
        let run = |key: &str, path: &str, mode: &str| {
            outbound(
                Method::Post,
                &format!("http://dify.test/v1/{path}"),
                &[("authorization", &format!("Bearer {key}")), ("content-type", "application/json")],
                Some(json!({"inputs": {"q": "hi"}, "user": "u1", "response_mode": mode, "query": "hi"})),
            )
        };
        json!([
            fetch_text(&env, run("wf-key", "workflows/run", "blocking")).await,
            fetch_text(&env, run("chat-key", "chat-messages", "streaming")).await,
            fetch_text(&env, run("nobody", "chat-messages", "blocking")).await,
            fetch_text(&env, run("wf-key", "chat-messages", "blocking")).await,
        ])
    });
    let blocking: Value = serde_json::from_str(v[0]["body"].as_str().unwrap_or("")).unwrap_or_default();
    assert_eq!(blocking["data"]["outputs"], json!({"text": "abcdef"}));
    assert_eq!(blocking["data"]["status"], "succeeded");
    assert!(v[1]["type"].as_str().is_some_and(|t| t.starts_with("text/event-stream")));
    let events: Vec<Value> = invariants::sse_data(v[1]["body"].as_str().unwrap_or(""))
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["message", "message", "message", "message_end"]);
    let answer: String = events.iter().filter_map(|e| e["answer"].as_str()).collect();
    assert_eq!(answer, "Hello from the simulated Dify.");
    assert_eq!((v[2]["status"].as_u64(), v[3]["status"].as_u64()), (Some(401), Some(400)));
    assert_eq!(d.requests_for("chat-key").len(), 1);
}

#[test]
fn the_mcp_upstream_keeps_sessions_and_answers_json_rpc() {
    let r = Run::new(9);
    r.sim.add_backend("http://upstream.test", Rc::new(mcp::McpUpstream::new(true, true)));
    let v = r.run(|env| async move {
        let call = |session: Option<&str>, body: Value| {
            let mut h = vec![("accept", "application/json, text/event-stream"), ("content-type", "application/json")];
            if let Some(s) = session {
                h.push(("mcp-session-id", s));
            }
            outbound(Method::Post, "http://upstream.test/mcp", &h, Some(body))
        };
        let init = fetch_text(&env, call(None, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}))).await;
        let sid = init["session"].as_str().unwrap_or("").to_string();
        let no_session = fetch_text(&env, call(None, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))).await;
        let echo = fetch_text(&env, call(Some(&sid), json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}))).await;
        let note = fetch_text(&env, call(Some(&sid), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))).await;
        json!([init, no_session, echo, note])
    });
    assert_eq!(v[0]["session"], "sim-session-1");
    assert_eq!(v[1]["status"], 400);
    let echo = invariants::sse_data(v[2]["body"].as_str().unwrap_or(""));
    let echo: Value = serde_json::from_str(&echo[0]).unwrap_or_default();
    assert!(invariants::is_json_rpc(&echo));
    assert_eq!(echo["result"]["structuredContent"], json!({"text": "hi"}));
    assert_eq!(v[3]["status"], 202);
}

#[test]
fn the_oauth_issuer_mints_tokens_the_stand_in_verifies() {
    let r = Run::new(10);
    let issuer = Rc::new(oauth::OAuthIssuer::new("http://issuer.test", "https://flowgate.test/mcp"));
    issuer.add_client("c1", "s1");
    r.sim.add_backend("http://issuer.test", issuer.clone());
    let v = r.run(|env| async move {
        let form = |secret: &str| Outbound {
            method: Method::Post,
            url: "http://issuer.test/token".into(),
            headers: [("content-type", "application/x-www-form-urlencoded")].into_iter().collect(),
            body: Some(format!("grant_type=client_credentials&client_id=c1&client_secret={secret}").into_bytes()),
        };
        let token = fetch_text(&env, form("s1")).await;
        let bad = fetch_text(&env, form("nope")).await;
        let jwks = fetch_text(&env, outbound(Method::Get, "http://issuer.test/jwks", &[], None)).await;
        let token: Value = serde_json::from_str(token["body"].as_str().unwrap_or("")).unwrap_or_default();
        let jwks: Value = serde_json::from_str(jwks["body"].as_str().unwrap_or("")).unwrap_or_default();
        let at = token["access_token"].as_str().unwrap_or("").to_string();
        let (input, sig) = at.rsplit_once('.').unwrap_or(("", ""));
        use base64::Engine;
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(sig).unwrap_or_default();
        let alg = r#"{"name":"RSASSA-PKCS1-v1_5","hash":"SHA-256"}"#;
        let ok =
            env.runtime().verify_signature(&jwks["keys"][0].to_string(), alg, alg, &sig, input.as_bytes()).await.ok();
        json!({"verified": ok, "bad_status": bad["status"], "kid": jwks["keys"][0]["kid"]})
    });
    assert_eq!(v, json!({"verified": true, "bad_status": 401, "kid": "sim-rs256-1"}));
}

#[test]
fn the_http_tool_checks_its_key_and_streams() {
    let r = Run::new(11);
    let tools = Rc::new(http_tool::HttpTool::default());
    let path = tools.add_tool(
        "weather",
        http_tool::Tool { api_key: "tool-secret".into(), result: Some(json!({"t": 72})), ..Default::default() },
    );
    r.sim.add_backend("http://tools.test", tools.clone());
    let v = r.run(move |env| async move {
        let url = format!("http://tools.test{path}");
        let call = |key: &str, body: Value| {
            outbound(Method::Post, &url, &[("authorization", &format!("Bearer {key}"))], Some(body))
        };
        json!([
            fetch_text(&env, call("tool-secret", json!({"city": "x"}))).await,
            fetch_text(&env, call("wrong", json!({}))).await,
            fetch_text(&env, call("tool-secret", json!({"stream": true}))).await,
        ])
    });
    assert_eq!(v[0]["body"], json!({"t": 72}).to_string());
    assert_eq!(v[1]["status"], 401);
    let last = invariants::sse_data(v[2]["body"].as_str().unwrap_or("")).pop().unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<Value>(&last).unwrap_or_default(),
        json!({"type": "result", "result": {"t": 72}})
    );
    assert_eq!(tools.requests.borrow().len(), 3);
}

#[test]
fn refused_destinations_json_rpc_shapes_and_seed_replay() {
    for url in [
        "http://127.0.0.1:9/x",
        "http://2130706433/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest",
        "http://[::1]/",
        "http://[::ffff:192.168.0.1]/",
        "http://localhost:8787/",
        "http://metadata.google.internal/",
        "http://100.64.0.1/",
    ] {
        assert!(invariants::refused_destination(url), "{url}");
    }
    for url in ["https://api.dify.ai/v1", "http://8.8.8.8/", "http://[2001:db8::1]/"] {
        assert!(!invariants::refused_destination(url), "{url}");
    }
    for (v, ok) in [
        (json!({"jsonrpc": "2.0", "id": 1, "result": {}}), true),
        (json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}), true),
        (json!({"jsonrpc": "2.0", "method": "notifications/progress"}), true),
        (json!([{"jsonrpc": "2.0", "id": 1, "result": 1}]), true),
        (json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}), false),
        (json!({"id": 1, "result": {}}), false),
        (json!([]), false),
    ] {
        assert_eq!(invariants::is_json_rpc(&v), ok, "{v}");
    }
    assert_eq!(
        invariants::sse_data("event: message\ndata: {\"a\":\ndata: 1}\n\n: ping\n\ndata: 2\n\n"),
        vec!["{\"a\":\n1}", "2"]
    );
    assert_eq!(seeds_given(Some("42"), 0..3), vec![42]);
    assert_eq!(seeds_given(Some("x"), 0..3), vec![0, 1, 2]);
    assert_eq!(seeds_given(None, 0..2), vec![0, 1]);
}

#[test]
fn dify_stops_are_as_strict_as_the_fixture_and_run_details_follow_the_run() {
    let r = Run::new(12);
    let d = Rc::new(dify::Dify::default());
    d.add_app("wf", dify::App { stream_end: dify::StreamEnd::HangAfterFirst, ..dify::App::new("workflow") });
    d.add_app("other", dify::App::new("workflow"));
    r.sim.add_backend("http://dify.test", d.clone());
    let v = r.run(|env| async move {
        let post = |key: &str, path: &str, body: Value| {
            outbound(
                Method::Post,
                &format!("http://dify.test/v1/{path}"),
                &[("authorization", &format!("Bearer {key}"))],
                Some(body),
            )
        };
        let get = |path: &str| {
            outbound(Method::Get, &format!("http://dify.test/v1/{path}"), &[("authorization", "Bearer wf")], None)
        };
        // A streamed run that hangs after its first event: read just that event.
        let Ok(f) = env
            .runtime()
            .fetch(post("wf", "workflows/run", json!({"inputs": {}, "user": "u1", "response_mode": "streaming"})))
            .await
        else {
            return json!("no fetch");
        };
        let mut s = f.body.into_stream();
        let first = s.next().await.and_then(Result::ok).unwrap_or_default();
        let first: Value = serde_json::from_str(invariants::sse_data(&String::from_utf8_lossy(&first))[0].as_str())
            .unwrap_or_default();
        let (task, run) = (
            first["task_id"].as_str().unwrap_or("").to_string(),
            first["workflow_run_id"].as_str().unwrap_or("").to_string(),
        );
        let running = fetch_text(&env, get(&format!("workflows/run/{run}"))).await;
        let wrong_user =
            fetch_text(&env, post("wf", &format!("workflows/tasks/{task}/stop"), json!({"user": "u2"}))).await;
        let wrong_app =
            fetch_text(&env, post("other", &format!("workflows/tasks/{task}/stop"), json!({"user": "u1"}))).await;
        let stopped =
            fetch_text(&env, post("wf", &format!("workflows/tasks/{task}/stop"), json!({"user": "u1"}))).await;
        let after = fetch_text(&env, get(&format!("workflows/run/{run}"))).await;
        f.abort.abort();
        let status = |x: &Value| {
            serde_json::from_str::<Value>(x["body"].as_str().unwrap_or("")).unwrap_or_default()["status"].clone()
        };
        json!([status(&running), wrong_user["status"], wrong_app["status"], stopped["status"], status(&after)])
    });
    assert_eq!(v, json!(["running", 403, 404, 200, "stopped"]));
    assert_eq!(d.stops.borrow().len(), 1);
    assert_eq!(d.stop_refusals.borrow().len(), 2);
}

#[test]
fn settings_and_log_lines_reach_the_test() {
    let r = Run::new(13);
    r.sim.set_setting("FLOWGATE_PUBLIC_URL", "https://flowgate.test");
    let v = r.run(|env| async move {
        env.runtime().log("{\"event\":\"hello\"}");
        json!([env.runtime().setting("FLOWGATE_PUBLIC_URL"), env.runtime().setting("UNSET")])
    });
    assert_eq!(v, json!(["https://flowgate.test", null]));
    assert_eq!(r.sim.logs(), vec!["{\"event\":\"hello\"}".to_string()]);
}

#[test]
fn the_mcp_upstream_streams_progress_on_the_virtual_clock() {
    let r = Run::new(14);
    r.sim.add_backend("http://upstream.test", Rc::new(mcp::McpUpstream::new(false, true)));
    let v = r.run(|env| async move {
        let h = [("accept", "application/json, text/event-stream"), ("content-type", "application/json")];
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "slow_progress", "arguments": {"steps": 3, "delayMs": 500}, "_meta": {"progressToken": "p1"}}});
        let start = env.runtime().now_ms();
        let Ok(f) = env.runtime().fetch(outbound(Method::Post, "http://upstream.test/mcp", &h, Some(body))).await else { return json!("no fetch") };
        let mut s = f.body.into_stream();
        let mut seen = vec![];
        while let Some(Ok(chunk)) = s.next().await {
            let text = String::from_utf8_lossy(&chunk).into_owned();
            let methods: Vec<Value> = invariants::sse_data(&text)
                .iter()
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .map(|m| m.get("method").cloned().unwrap_or_else(|| m["result"]["content"][0]["text"].clone()))
                .collect();
            seen.push(json!([env.runtime().now_ms() - start, methods]));
        }
        json!(seen)
    });
    let step = json!(["notifications/progress", "notifications/message"]);
    assert_eq!(v, json!([[500, step], [1000, step], [1500, step], [2000, ["done 3"]]]));
}
