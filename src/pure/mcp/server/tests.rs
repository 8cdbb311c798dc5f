use crate::json;
use crate::pure::outcome::{Outcome, Signal};

use super::*;
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::definition::{AppDefinition, FORMAT};
use crate::pure::mode::Mode;
use crate::pure::protocol::tasks::TaskView;

fn def() -> ServerDefinition {
    ServerDefinition {
        format: FORMAT,
        server_id: "srv-1".into(),
        name: "My Server".into(),
        description: "Summarises text".into(),
        status: crate::pure::server::Status::Active,
        parameters: Map::new(),
        auth: Default::default(),
        call_log_payloads: false,
        code_expires_at: None,
        apps: vec![
            AppDefinition::new(
                "a1".into(),
                "Summariser".into(),
                "".into(),
                Backend::from_settings(
                    Mode::Dify(DifyMode::Workflow),
                    &json!({"base_url": "http://x/v1", "api_key": "k"}),
                )
                .unwrap(),
                json!([{"text-input": {"variable": "text", "required": true}},
                                         {"select": {"variable": "lang", "options": ["en", "fr"]}}]),
                json!([]),
            ),
            AppDefinition::new(
                "a2".into(),
                "Agent".into(),
                "".into(),
                Backend::example(Mode::Dify(DifyMode::AgentChat)),
                json!([]),
                json!([]),
            ),
        ],
    }
}

/// A server of one upstream MCP app (id "up") with `backend` as its settings.
fn upstream_def(backend: &Value) -> ServerDefinition {
    let mut d = def();
    let app = AppDefinition::new(
        "up".into(),
        "Up".into(),
        "".into(),
        Backend::from_settings(Mode::Mcp, backend).unwrap(),
        json!([]),
        json!([]),
    );
    d.apps = vec![app];
    d
}

fn headers(v: Option<&'static str>) -> RequestHeaders<'static> {
    RequestHeaders { protocol_version: v, ..Default::default() }
}

fn stateless_headers(method: &'static str, name: Option<&'static str>) -> RequestHeaders<'static> {
    RequestHeaders {
        protocol_version: Some("2026-07-28"),
        mcp_method: Some(method),
        mcp_name: name,
        ..Default::default()
    }
}

fn body(step: Step) -> (u16, Value) {
    match step {
        Step::Reply { status, body } => (status, body.unwrap_or(Value::Null)),
        other => panic!("unexpected step {other:?}"),
    }
}

fn stateless(method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {},
                             "io.modelcontextprotocol/clientInfo": {"name": "cli", "version": "1"}});
    json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
}

#[test]
fn initialize_echoes_or_falls_back() {
    for (asked, answered) in [("2024-11-05", "2024-11-05"), ("2025-06-18", "2025-06-18"), ("1999-01-01", "2025-11-25")]
    {
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
        // The header is never checked on initialize, even when it is nonsense.
        let (status, r) = body(handle(&def(), &msg, &headers(Some("garbage")), "0.1.0"));
        assert_eq!(status, 200);
        assert_eq!(r["result"]["protocolVersion"], answered);
        assert_eq!(r["result"]["instructions"], "Summarises text");
        assert_eq!(r["result"]["capabilities"]["tools"]["listChanged"], false);
        assert!(r["result"]["capabilities"].get("resources").is_none());
    }
}

#[test]
fn notifications_and_responses_get_202() {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(handle(&def(), &note, &headers(Some("1999-01-01")), "v"), Step::Reply { status: 202, body: None });
    let resp = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
    assert_eq!(handle(&def(), &resp, &headers(None), "v"), Step::Reply { status: 202, body: None });
}

#[test]
fn header_version_rules() {
    let list = json!({"jsonrpc": "2.0", "id": "x", "method": "tools/list"});
    let (status, r) = body(handle(&def(), &list, &headers(Some("1999-01-01")), "v"));
    assert_eq!((status, r["id"].clone(), r["error"]["code"].clone()), (400, json!("x"), json!(-32600)));
    assert!(r["error"]["message"].as_str().unwrap().contains("1999-01-01"));
    // No header: 2025-03-26, so no title or outputSchema.
    let (_, r) = body(handle(&def(), &list, &headers(None), "v"));
    assert!(r["result"]["tools"][0].get("outputSchema").is_none());
    let (_, r) = body(handle(&def(), &list, &headers(Some("2025-06-18")), "v"));
    assert_eq!(r["result"]["tools"][0]["outputSchema"], json!({"type": "object"}));
    // The stateless revision in the header without _meta is incomplete.
    let (status, r) = body(handle(&def(), &list, &headers(Some("2026-07-28")), "v"));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32602)));
}

#[test]
fn unknown_and_unoffered_methods() {
    for m in ["resources/list", "prompts/get", "completion/complete", "nope"] {
        let msg = json!({"jsonrpc": "2.0", "id": 2, "method": m});
        let (status, r) = body(handle(&def(), &msg, &headers(Some("2025-06-18")), "v"));
        assert_eq!(status, 200);
        assert_eq!(r["error"]["code"], -32601);
        assert!(r["error"]["message"].as_str().unwrap().contains(m));
    }
    let (status, r) =
        body(handle(&def(), &stateless("resources/list", json!({})), &stateless_headers("resources/list", None), "v"));
    assert_eq!((status, r["error"]["code"].clone()), (404, json!(-32601)));
    // ping and logging are gone in 2026-07-28.
    let (status, _) = body(handle(&def(), &stateless("ping", json!({})), &stateless_headers("ping", None), "v"));
    assert_eq!(status, 404);
}

#[test]
fn ping_and_logging() {
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(body(handle(&def(), &ping, &headers(None), "v")).1["result"], json!({}));
    let set = json!({"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": {"level": "warning"}});
    assert_eq!(body(handle(&def(), &set, &headers(None), "v")).1["result"], json!({}));
    let bad = json!({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": {"level": "loud"}});
    assert_eq!(body(handle(&def(), &bad, &headers(None), "v")).1["error"]["code"], -32602);
}

#[test]
fn stateless_requests() {
    let (status, r) = body(handle(
        &def(),
        &stateless("server/discover", json!({})),
        &stateless_headers("server/discover", None),
        "0.1.0",
    ));
    assert_eq!(status, 200);
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete");
    assert_eq!(res["supportedVersions"].as_array().unwrap().len(), 5);
    assert_eq!(res["_meta"]["io.modelcontextprotocol/serverInfo"]["version"], "0.1.0");
    assert_eq!(res["cacheScope"], "private");

    let (_, r) = body(handle(&def(), &stateless("tools/list", json!({})), &stateless_headers("tools/list", None), "v"));
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["tools"][0]["name"], "Summariser");

    // Header and _meta disagree; method header missing or wrong; tool name header wrong.
    let cases = [
        (
            RequestHeaders {
                protocol_version: Some("2025-11-25"),
                mcp_method: Some("tools/list"),
                ..Default::default()
            },
            -32020,
        ),
        (RequestHeaders { protocol_version: None, mcp_method: Some("tools/list"), ..Default::default() }, -32020),
        (RequestHeaders { protocol_version: Some("2026-07-28"), ..Default::default() }, -32020),
        (stateless_headers("tools/call", None), -32020),
    ];
    for (h, code) in cases {
        let (status, r) = body(handle(&def(), &stateless("tools/list", json!({})), &h, "v"));
        assert_eq!((status, r["error"]["code"].clone(), r["id"].clone()), (400, json!(code), json!(9)), "{h:?}");
    }
    let call = stateless("tools/call", json!({"name": "Summariser", "arguments": {"text": "x"}}));
    let (status, r) = body(handle(&def(), &call, &stateless_headers("tools/call", Some("Other")), "v"));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)));

    let mut no_caps = stateless("tools/list", json!({}));
    no_caps["params"]["_meta"].as_object_mut().unwrap().remove("io.modelcontextprotocol/clientCapabilities");
    let (status, r) = body(handle(&def(), &no_caps, &stateless_headers("tools/list", None), "v"));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32602)));

    let mut old = stateless("tools/list", json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-06-18");
    let h =
        RequestHeaders { protocol_version: Some("2025-06-18"), mcp_method: Some("tools/list"), ..Default::default() };
    let (status, r) = body(handle(&def(), &old, &h, "v"));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32022)));
    assert_eq!(r["error"]["data"]["requested"], "2025-06-18");
}

#[test]
fn tools_call_plans_a_dify_call() {
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "Summariser", "arguments": {"text": "hello", "extra": 1}}});
    let h = RequestHeaders {
        protocol_version: Some("2025-06-18"),
        user_agent: Some("claude-desktop/1.0"),
        ..Default::default()
    };
    let Step::Call(plan) = handle(&def(), &call, &h, "v") else { panic!() };
    assert_eq!(plan.request.path(), "/workflows/run");
    assert_eq!(plan.request.http_body().unwrap()["inputs"], json!({"text": "hello"}));
    assert_eq!(plan.client_name, "claude-desktop/1.0");
    assert!(plan.user.starts_with("mcp-") && plan.user.len() == 28);
    // Same server and client → same user.
    let Step::Call(again) = handle(&def(), &call, &h, "v") else { panic!() };
    assert_eq!(again.user, plan.user);

    let r = finish_call(&plan, Outcome::Ok { text: "{\"s\":1}".into(), structured: Some(json!({"s": 1})) }, "v");
    assert_eq!(r["result"]["structuredContent"], json!({"s": 1}));
    assert_eq!(r["result"]["isError"], false);
    let r = finish_call(&plan, Outcome::Failed("the workflow ended failed: boom".into()), "v");
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["text"], "the workflow ended failed: boom");

    let mut old = plan.clone();
    old.version = Version::V2024_11_05;
    let r = finish_call(&old, Outcome::Ok { text: "t".into(), structured: Some(json!({})) }, "v");
    assert!(r["result"].get("structuredContent").is_none());
}

#[test]
fn bad_calls() {
    let call = |params: Value, v: &'static str| {
        let msg = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params});
        body(handle(&def(), &msg, &headers(Some(v)), "v"))
    };
    let (_, r) = call(json!({"name": "Nope"}), "2025-11-25");
    assert_eq!(r["error"]["code"], -32602);
    assert!(r["error"]["message"].as_str().unwrap().contains("'Nope'"));
    let (_, r) = call(json!({}), "2025-11-25");
    assert!(r["error"]["message"].as_str().unwrap().contains("`name`"));
    let (_, r) = call(json!({"name": "Summariser", "arguments": [1]}), "2025-11-25");
    assert_eq!(r["error"]["code"], -32602);
    // Bad arguments: -32602 before 2025-11-25, a tool error from it on.
    let (_, r) = call(json!({"name": "Summariser", "arguments": {"lang": "de"}}), "2025-06-18");
    assert_eq!(r["error"]["code"], -32602);
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("missing required argument 'text'") && msg.contains("\"de\""), "{msg}");
    let (_, r) = call(json!({"name": "Summariser", "arguments": {"lang": "de"}}), "2025-11-25");
    assert_eq!(r["result"]["isError"], true);
    assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("missing required argument 'text'"));
}

#[test]
fn batches_only_for_old_revisions() {
    assert!(batch_allowed(&headers(None), 1).is_ok());
    assert!(batch_allowed(&headers(Some("2024-11-05")), MAX_BATCH_ITEMS).is_ok());
    let e = batch_allowed(&headers(Some("2025-06-18")), 2).unwrap_err();
    assert_eq!((e.status, e.code), (400, -32600));
    assert!(e.message.contains("2025-06-18"));
}

#[test]
fn batches_are_bounded() {
    let e = batch_allowed(&headers(None), MAX_BATCH_ITEMS + 1).unwrap_err();
    assert_eq!((e.status, e.code), (400, -32600));
    assert!(e.message.contains("at most 32 messages (this one has 33)"), "{}", e.message);
    let e = batch_allowed(&headers(None), 0).unwrap_err();
    assert!(e.message.contains("empty"), "{}", e.message);
}

#[test]
fn cancellation_is_bound_to_the_caller() {
    // Two clients that share a User-Agent and a request id, from different addresses, get
    // different cancel keys; the same client gets the key its call was recorded under.
    let d = def();
    let msg = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    let key_of = |caller: Option<&'static str>| {
        let h = RequestHeaders { user_agent: Some("same-agent/1.0"), caller, ..Default::default() };
        match handle(&d, &msg, &h, "v") {
            Step::Cancel { key } => key,
            other => panic!("{other:?}"),
        }
    };
    assert_ne!(key_of(Some("203.0.113.1")), key_of(Some("203.0.113.2")));
    assert_eq!(key_of(Some("203.0.113.1")), key_of(Some("203.0.113.1")));
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Summariser", "arguments": {"text": "x"}}});
    let h = RequestHeaders { user_agent: Some("same-agent/1.0"), caller: Some("203.0.113.1"), ..Default::default() };
    match handle(&d, &call, &h, "v") {
        Step::Call(plan) => assert_eq!(plan.cancel_key, key_of(Some("203.0.113.1"))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_authenticated_identity_is_the_user_and_binds_cancellation() {
    // A client key's name is the backend user, whatever the client says about itself; the
    // cancel key follows the identity, so another key holder cannot cancel the run.
    let d = def();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Summariser", "arguments": {"text": "x"}}});
    let as_key = |identity: Option<&'static str>, ua: &'static str| RequestHeaders {
        user_agent: Some(ua),
        caller: Some("203.0.113.1"),
        identity,
        ..Default::default()
    };
    let plan_of = |h: &RequestHeaders<'_>| match handle(&d, &call, h, "v") {
        Step::Call(plan) => plan,
        other => panic!("{other:?}"),
    };
    let alice = plan_of(&as_key(Some("alice-laptop"), "agent/1"));
    assert_eq!(alice.user, "alice-laptop");
    assert_eq!(alice.request.http_body().unwrap()["user"], "alice-laptop");
    assert_eq!(alice.client_name, "agent/1", "the end-user record still says how the client named itself");
    assert_eq!(plan_of(&as_key(Some("alice-laptop"), "agent/2")).user, "alice-laptop");
    let bob = plan_of(&as_key(Some("bob"), "agent/1"));
    assert_ne!(bob.cancel_key, alice.cancel_key);
    assert!(plan_of(&as_key(None, "agent/1")).user.starts_with("mcp-"));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    match handle(&d, &cancel, &as_key(Some("alice-laptop"), "something else/9"), "v") {
        Step::Cancel { key } => assert_eq!(key, alice.cancel_key),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_messages() {
    let (status, r) = body(handle(&def(), &json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}), &headers(None), "v"));
    assert_eq!((status, r["error"]["code"].clone(), r["id"].clone()), (400, json!(-32600), json!(1)));
}

#[test]
fn progress_and_log_notifications() {
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "Summariser", "arguments": {"text": "hello"}, "_meta": {"progressToken": "tok"}}});
    let Step::Call(plan) = handle(&def(), &call, &headers(Some("2025-06-18")), "v") else { panic!() };
    let mut p = Progress::default();
    let n1 = notification(&plan, Signal::Progress { message: "LLM succeeded".into() }, &mut p).unwrap();
    let n2 = notification(&plan, Signal::Progress { message: "End succeeded".into() }, &mut p).unwrap();
    assert_eq!(n1["params"], json!({"progressToken": "tok", "progress": 1, "message": "LLM succeeded"}));
    assert_eq!(n2["params"]["progress"], 2);
    let log = notification(&plan, Signal::Log { level: "info", data: json!({"x": 1}) }, &mut p).unwrap();
    assert_eq!(log["method"], "notifications/message");
    assert_eq!(log["params"]["level"], "info");
    assert!(notification(&plan, Signal::Log { level: "debug", data: json!({}) }, &mut p).is_none());

    // No progress token: no progress. 2024-11-05: no message field.
    let bare = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "Summariser", "arguments": {"text": "x"}}});
    let Step::Call(plan) = handle(&def(), &bare, &headers(Some("2024-11-05")), "v") else { panic!() };
    assert!(notification(&plan, Signal::Progress { message: "m".into() }, &mut p).is_none());
    let mut old = plan.clone();
    old.progress_token = Some(json!(3));
    assert!(notification(&old, Signal::Progress { message: "m".into() }, &mut p).unwrap()["params"]
        .get("message")
        .is_none());

    // 2026-07-28: logs only at the level the request asked for.
    let mut call26 = stateless("tools/call", json!({"name": "Summariser", "arguments": {"text": "x"}}));
    let Step::Call(plan) = handle(&def(), &call26, &stateless_headers("tools/call", Some("Summariser")), "v") else {
        panic!()
    };
    assert!(notification(&plan, Signal::Log { level: "error", data: json!({}) }, &mut p).is_none());
    call26["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("warning");
    let Step::Call(plan) = handle(&def(), &call26, &stateless_headers("tools/call", Some("Summariser")), "v") else {
        panic!()
    };
    assert!(notification(&plan, Signal::Log { level: "info", data: json!({}) }, &mut p).is_none());
    assert!(notification(&plan, Signal::Log { level: "warning", data: json!({}) }, &mut p).is_some());
}

#[test]
fn cancellation_finds_the_call() {
    let h = RequestHeaders { protocol_version: Some("2025-06-18"), user_agent: Some("ua/1"), ..Default::default() };
    let call = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "Summariser", "arguments": {"text": "x"}}});
    let Step::Call(plan) = handle(&def(), &call, &h, "v") else { panic!() };
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77, "reason": "user"}});
    assert_eq!(handle(&def(), &cancel, &h, "v"), Step::Cancel { key: plan.cancel_key.clone() });
    // Another client cannot cancel it.
    let other = RequestHeaders { user_agent: Some("ua/2"), ..h };
    assert_ne!(handle(&def(), &cancel, &other, "v"), Step::Cancel { key: plan.cancel_key.clone() });
    let no_id = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}});
    assert_eq!(handle(&def(), &no_id, &h, "v"), Step::Reply { status: 202, body: None });
}

fn task_def(support: &str) -> ServerDefinition {
    let mut d = def();
    let settings = json!({"base_url": "http://x/v1", "api_key": "k", "task_support": support});
    d.apps[0].backend = Backend::from_settings(Mode::Dify(DifyMode::Workflow), &settings).unwrap();
    d
}

#[test]
fn tools_become_tasks_per_revision() {
    let h = headers(Some("2025-11-25"));
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "Summariser", "arguments": {"text": "x"}, "task": {"ttl": 120000}}});
    let Step::CreateTask { plan, ttl_ms } = handle(&task_def("optional"), &call, &h, "v") else { panic!() };
    assert_eq!(ttl_ms, 120_000);
    assert_eq!(plan.request.path(), "/workflows/run");
    // Forbidden tools refuse params.task; required tools refuse plain calls.
    let (_, r) = body(handle(&task_def("forbidden"), &call, &h, "v"));
    assert_eq!(r["error"]["code"], -32601);
    let mut plain = call.clone();
    plain["params"].as_object_mut().unwrap().remove("task");
    let (_, r) = body(handle(&task_def("required"), &plain, &h, "v"));
    assert_eq!(r["error"]["code"], -32601);

    // Capabilities and execution.taskSupport only where a tool supports tasks.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    let (_, r) = body(handle(&task_def("optional"), &init, &h, "v"));
    assert_eq!(r["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}));
    let (_, r) = body(handle(&def(), &init, &h, "v"));
    assert!(r["result"]["capabilities"].get("tasks").is_none());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (_, r) = body(handle(&task_def("required"), &list, &h, "v"));
    assert_eq!(r["result"]["tools"][0]["execution"]["taskSupport"], "required");
    let (_, r) = body(handle(&task_def("required"), &list, &headers(Some("2025-06-18")), "v"));
    assert!(r["result"]["tools"][0].get("execution").is_none());
}

#[test]
fn task_methods_per_revision() {
    let d = task_def("optional");
    let get = |v: Option<&'static str>, method: &str| {
        let msg = json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": {"taskId": "abc"}});
        handle(&d, &msg, &headers(v), "v")
    };
    assert_eq!(
        get(Some("2025-11-25"), "tasks/get"),
        Step::Task(TaskRequest {
            id: json!(4),
            version: Version::V2025_11_25,
            op: TaskOp::Get,
            task_id: "abc".into(),
            owner: None,
            input_responses: None,
            user: end_user(&d, &client_name(&Map::new(), &headers(None)), &headers(None)),
            relay: Channel::Stream(relay::ClientCaps::default()),
        })
    );
    assert!(matches!(get(Some("2025-11-25"), "tasks/result"), Step::Task(TaskRequest { op: TaskOp::Result, .. })));
    // On a server with client keys the task must be the caller's.
    let msg = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "abc"}});
    let h = RequestHeaders { protocol_version: Some("2025-11-25"), identity: Some("alice"), ..Default::default() };
    match handle(&d, &msg, &h, "v") {
        Step::Task(req) => assert_eq!((req.owner.as_deref(), req.user.as_str()), (Some("alice"), "alice")),
        other => panic!("{other:?}"),
    }
    // What the client declared reaches a relayed task's upstream requests, as a call's.
    let caps = relay::ClientCaps { elicitation_form: true, ..Default::default() };
    let h = RequestHeaders { protocol_version: Some("2025-11-25"), session_caps: Some(caps), ..Default::default() };
    match handle(&d, &msg, &h, "v") {
        Step::Task(req) => assert_eq!(req.relay, Channel::Stream(caps)),
        other => panic!("{other:?}"),
    }
    for (v, m) in
        [(Some("2025-11-25"), "tasks/list"), (Some("2025-06-18"), "tasks/get"), (Some("2025-11-25"), "tasks/update")]
    {
        let (_, r) = body(get(v, m));
        assert_eq!(r["error"]["code"], -32601, "{m} on {v:?}");
    }
    // 2026: extension required; tasks/result is gone.
    let with_ext = |method: &str| {
        let mut msg = stateless(method, json!({"taskId": "abc"}));
        msg["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        msg
    };
    assert!(matches!(
        handle(&d, &with_ext("tasks/get"), &stateless_headers("tasks/get", Some("abc")), "v"),
        Step::Task(TaskRequest { op: TaskOp::Get, .. })
    ));
    let (status, r) = body(handle(
        &d,
        &stateless("tasks/get", json!({"taskId": "abc"})),
        &stateless_headers("tasks/get", Some("abc")),
        "v",
    ));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32021)));
    let (status, r) = body(handle(&d, &with_ext("tasks/result"), &stateless_headers("tasks/result", None), "v"));
    assert_eq!((status, r["error"]["code"].clone()), (404, json!(-32601)));

    let req = TaskRequest {
        id: json!(4),
        version: Version::V2025_11_25,
        op: TaskOp::Cancel,
        task_id: "abc".into(),
        owner: None,
        input_responses: None,
        user: "u".into(),
        relay: Channel::Closed(Closed::JsonOnly),
    };
    let view = TaskView {
        task_id: "abc".into(),
        status: crate::pure::protocol::tasks::McpTaskStatus::Completed,
        status_message: None,
        created_at_ms: 0,
        updated_at_ms: 0,
        ttl_ms: 1,
        poll_interval_ms: 1,
        outcome: None,
    };
    assert_eq!(task_response(&req, Some(&view), true, "v").1["error"]["code"], -32602);
    assert_eq!(task_response(&req, None, false, "v").1["error"]["code"], -32602);
    let req26 = TaskRequest { version: Version::V2026_07_28, ..req.clone() };
    assert_eq!(
        task_response(&req26, Some(&view), true, "v").1["result"],
        json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "Flowgate", "version": "v"}}})
    );
}

#[test]
fn client_input_in_messages_is_bounded() {
    let long = "m".repeat(5000);
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": long}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": long}}),
    ] {
        let (_, r) = body(handle(&def(), &msg, &headers(Some("2025-06-18")), "v"));
        let m = r["error"]["message"].as_str().unwrap();
        assert!(!m.contains(&"m".repeat(65)) && m.contains("(5000 characters)"), "{m}");
    }
    let h = RequestHeaders { protocol_version: Some(&long), ..Default::default() };
    let (_, r) = body(handle(&def(), &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &h, "v"));
    let m = r["error"]["message"].as_str().unwrap();
    assert!(!m.contains(&"m".repeat(65)) && m.contains("(5000 characters)"), "{m}");
}

#[test]
fn call_requests_round_trip_through_a_stored_task() {
    let dify = CallRequest::Dify { mode: DifyMode::Chat, body: json!({"query": "q"}) };
    let tool = CallRequest::HttpTool { body: json!({"a": 1}) };
    let mcp = CallRequest::Mcp {
        tool: "search".into(),
        arguments: json!({"q": "x"}),
        input: Map::new(),
        params: vec![],
        task_ttl_ms: None,
        task_if_offered: false,
    };
    for (mode, req) in [(Mode::Dify(DifyMode::Chat), dify), (Mode::HttpTool, tool), (Mode::Mcp, mcp)] {
        let (path, body) = req.to_stored();
        assert_eq!(CallRequest::from_stored(&Backend::example(mode), &path, &body), Some(req));
    }
    assert_eq!(
        CallRequest::Dify { mode: DifyMode::Workflow, body: json!({}) }.to_stored().0,
        "/workflows/run",
        "the path a task stores is the mode's, as earlier deploys stored it"
    );
    // A path that is not the Dify app's, or an MCP body without a tool name, is not guessed.
    let workflow = Backend::example(Mode::Dify(DifyMode::Workflow));
    assert_eq!(CallRequest::from_stored(&workflow, "/elsewhere", &json!({})), None);
    assert_eq!(CallRequest::from_stored(&workflow, "/chat-messages", &json!({})), None);
    assert_eq!(CallRequest::from_stored(&Backend::example(Mode::Mcp), "", &json!({"arguments": {}})), None);
}

#[test]
fn upstream_catalogs_declare_capabilities_and_route_requests() {
    use crate::pure::backend::mcp::catalog::Catalog;
    use std::rc::Rc;
    let d = upstream_def(&json!({"url": "https://mcp.example/mcp"}));
    let mut catalogs = Catalogs::default();
    let cat = Catalog {
        capabilities: json!({"resources": {}, "prompts": {}}),
        resources: vec![json!({"uri": "a://b", "name": "b"})],
        prompts: vec![json!({"name": "p"})],
        ..Default::default()
    };
    catalogs.0.insert("up".into(), Rc::new(cat));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    let run = |msg: &Value, h: &RequestHeaders<'_>| handle_full(&d, &Upstreams::default(), &catalogs, msg, h, "v");
    let (_, r) = body(run(&init, &headers(None)));
    let caps = &r["result"]["capabilities"];
    assert_eq!(caps["resources"], json!({"subscribe": false, "listChanged": false}));
    assert_eq!(caps["prompts"], json!({"listChanged": false}));
    assert!(caps.get("completions").is_none(), "the upstream does not complete");
    // Without catalogs (a Dify-only server, or none loaded) nothing is declared.
    let (_, r) = body(handle(&def(), &init, &headers(None), "v"));
    assert!(r["result"]["capabilities"].get("resources").is_none());

    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "a://b"}});
    let Step::Forward(fwd) = run(&read, &headers(Some("2025-06-18"))) else { panic!("not forwarded") };
    assert_eq!((fwd.app_index, fwd.method), (0, "resources/read"));
    // The caller, whose `requestState` an upstream's round trip is sealed to.
    assert_eq!(fwd.user, caller_of(&def(), &read, &headers(Some("2025-06-18"))));
    let alice = RequestHeaders { identity: Some("alice"), ..headers(Some("2025-06-18")) };
    let Step::Forward(fwd_alice) = run(&read, &alice) else { panic!("not forwarded") };
    assert_eq!(fwd_alice.user, "alice");
    let ok =
        json!({"jsonrpc": "2.0", "id": 9, "result": {"contents": [{"uri": "a://b", "text": "t"}], "_meta": {"x": 1}}});
    let r = forwarded_response(&fwd, "Up", &ok, "v");
    assert_eq!(r, json!({"jsonrpc": "2.0", "id": 2, "result": {"contents": [{"uri": "a://b", "text": "t"}]}}));
    let err = json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32602, "message": "no such thing", "data": {"uri": "a://b"}}});
    let r = forwarded_response(&fwd, "Up", &err, "v");
    assert_eq!(r["error"]["code"], -32602);
    assert!(r["error"]["message"].as_str().unwrap().contains("upstream Up said"), "{r}");
    assert_eq!(r["error"]["data"], json!({"uri": "a://b"}));
    let odd = forwarded_response(&fwd, "Up", &json!({"result": "x"}), "v");
    assert_eq!(odd["error"]["code"], -32603);

    // 2026-07-28: Mcp-Name must repeat the URI, and the result gets resultType and cache hints.
    let read26 = stateless("resources/read", json!({"uri": "a://b"}));
    let (status, r) = body(run(&read26, &stateless_headers("resources/read", None)));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)));
    let Step::Forward(fwd) = run(&read26, &stateless_headers("resources/read", Some("a://b"))) else { panic!() };
    let r = forwarded_response(&fwd, "Up", &ok, "v");
    assert_eq!((r["result"]["resultType"].clone(), r["result"]["ttlMs"].clone()), (json!("complete"), json!(0)));
}

#[test]
fn relayed_answers_and_what_a_call_may_relay() {
    let d = def();
    // A response whose id is a relay ticket is an answer to take upstream; any other response
    // answers nothing Flowgate asked.
    let answer = json!({"jsonrpc": "2.0", "id": "fg-relay.abc", "result": {"action": "accept"}});
    match handle(&d, &answer, &headers(Some("2025-06-18")), "v") {
        Step::Answer { token, message, user } => {
            assert_eq!(token, "fg-relay.abc");
            assert_eq!(message, answer);
            assert_eq!(user, caller_of(&d, &answer, &headers(Some("2025-06-18"))));
            assert!(user.starts_with("mcp-"), "{user}");
        }
        other => panic!("{other:?}"),
    }
    let alice = RequestHeaders { identity: Some("alice"), ..headers(Some("2025-06-18")) };
    assert!(matches!(handle(&d, &answer, &alice, "v"), Step::Answer { user, .. } if user == "alice"));
    let stray = json!({"jsonrpc": "2.0", "id": "fg-other", "result": {}});
    assert_eq!(body(handle(&d, &stray, &headers(None), "v")), (202, Value::Null));

    // A call may relay to its client what the session id says the client declared; a
    // 2026-07-28 client gets no requests mid-call.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Summariser", "arguments": {"text": "x"}}});
    let caps = relay::ClientCaps { sampling: true, ..Default::default() };
    let h = RequestHeaders { protocol_version: Some("2025-11-25"), session_caps: Some(caps), ..Default::default() };
    match handle(&d, &call, &h, "v") {
        Step::Call(plan) => assert_eq!(plan.relay, Channel::Stream(caps)),
        other => panic!("{other:?}"),
    }
    match handle(&d, &call, &headers(Some("2025-11-25")), "v") {
        Step::Call(plan) => assert_eq!(plan.relay, Channel::Stream(relay::ClientCaps::default())),
        other => panic!("{other:?}"),
    }
    let call26 = stateless("tools/call", json!({"name": "Summariser", "arguments": {"text": "x"}}));
    match handle(&d, &call26, &stateless_headers("tools/call", Some("Summariser")), "v") {
        Step::Call(plan) => assert_eq!(plan.relay, Channel::Closed(Closed::Stateless)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_upstreams_forbidden_task_support_is_kept_as_it_gave_it() {
    let d = upstream_def(&json!({"url": "https://mcp.example/mcp", "tool_name_prefix": false}));
    let mut upstreams = Upstreams::default();
    upstreams.0.insert(
        "up".into(),
        vec![
            json!({"name": "plain", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "forbidden"}}),
            json!({"name": "bare", "inputSchema": {"type": "object"}}),
            json!({"name": "odd", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "sometimes"}}),
        ],
    );
    let tool = |version: Version, name: &str| {
        let list = tools_list_result(&d, &upstreams, version, "v");
        list["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned().unwrap()
    };
    for version in [Version::V2025_11_25, Version::V2026_07_28] {
        assert_eq!(tool(version, "plain")["execution"], json!({"taskSupport": "forbidden"}), "{version:?}");
        // Nothing is made up where the upstream said nothing, or something Flowgate cannot read.
        assert!(tool(version, "bare").get("execution").is_none(), "{version:?}");
        assert!(tool(version, "odd").get("execution").is_none(), "{version:?}");
    }
    // A revision without tasks has no such field.
    assert!(tool(Version::V2025_06_18, "plain").get("execution").is_none());
}

#[test]
fn an_upstreams_task_tools_run_as_its_tasks() {
    use crate::pure::backend::mcp::catalog::Catalog;
    use std::rc::Rc;
    let d = upstream_def(&json!({"url": "https://mcp.example/mcp", "tool_name_prefix": false}));
    let mut upstreams = Upstreams::default();
    upstreams.0.insert(
        "up".into(),
        vec![
            json!({"name": "greet", "inputSchema": {"type": "object"}}),
            json!({"name": "slow", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}),
            json!({"name": "maybe", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}}),
        ],
    );
    let mut catalogs = Catalogs::default();
    let ext = json!({"tools": {}, "extensions": {(tasks::EXTENSION): {}}});
    catalogs.0.insert("up".into(), Rc::new(Catalog { capabilities: ext, ..Default::default() }));
    let run = |msg: &Value, h: &RequestHeaders<'_>| handle_full(&d, &upstreams, &catalogs, msg, h, "v");
    let with_ext = |name: &str| {
        let mut m = stateless("tools/call", json!({"name": name, "arguments": {}}));
        m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {(tasks::EXTENSION): {}}});
        m
    };
    let ttl = |step: Step| match step {
        Step::Call(plan) => match plan.request {
            CallRequest::Mcp { task_ttl_ms, .. } => task_ttl_ms,
            other => panic!("not an upstream call: {other:?}"),
        },
        other => panic!("not a call: {other:?}"),
    };
    // 2026-07-28: the upstream's task tools run as its tasks when the client speaks the extension.
    assert_eq!(
        ttl(run(&with_ext("slow"), &stateless_headers("tools/call", Some("slow")))),
        Some(tasks::DEFAULT_TTL_MS)
    );
    assert_eq!(
        ttl(run(&with_ext("maybe"), &stateless_headers("tools/call", Some("maybe")))),
        Some(tasks::DEFAULT_TTL_MS)
    );
    // A tool that declares no task support: the opt-in goes along, used if the upstream offers
    // the extension (decided by the shell once the session shows it).
    let asked = |step: Step| match step {
        Step::Call(plan) => match plan.request {
            CallRequest::Mcp { task_ttl_ms, task_if_offered, .. } => (task_ttl_ms, task_if_offered),
            other => panic!("not an upstream call: {other:?}"),
        },
        other => panic!("not a call: {other:?}"),
    };
    assert_eq!(
        asked(run(&with_ext("greet"), &stateless_headers("tools/call", Some("greet")))),
        (Some(tasks::DEFAULT_TTL_MS), true)
    );
    assert_eq!(
        asked(run(&with_ext("slow"), &stateless_headers("tools/call", Some("slow")))),
        (Some(tasks::DEFAULT_TTL_MS), false),
        "a declared task tool is asked for a task whatever the capabilities say"
    );
    let plain = stateless("tools/call", json!({"name": "greet", "arguments": {}}));
    assert_eq!(asked(run(&plain, &stateless_headers("tools/call", Some("greet")))), (None, false));
    let v1 = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "greet", "arguments": {}, "task": {"ttl": 120_000}}});
    assert_eq!(asked(run(&v1, &headers(Some("2025-11-25")))), (Some(120_000), true), "not refused: passed on");
    let plain = stateless("tools/call", json!({"name": "maybe", "arguments": {}}));
    assert_eq!(ttl(run(&plain, &stateless_headers("tools/call", Some("maybe")))), None, "optional runs sync");
    let plain = stateless("tools/call", json!({"name": "slow", "arguments": {}}));
    let (status, r) = body(run(&plain, &stateless_headers("tools/call", Some("slow"))));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32021)));
    // 2025-11-25: `params.task`, with its ttl.
    let v1 = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {}, "task": {"ttl": 120_000}}});
    assert_eq!(ttl(run(&v1, &headers(Some("2025-11-25")))), Some(120_000));
    // The tools list says so, and the server declares tasks because the upstream does.
    let list = tools_list_result(&d, &upstreams, Version::V2026_07_28, "v");
    let slow = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "slow").unwrap();
    assert_eq!(slow["execution"], json!({"taskSupport": "required"}));
    let (_, r) = body(run(&stateless("server/discover", json!({})), &stateless_headers("server/discover", None)));
    assert!(r["result"]["capabilities"]["extensions"].get(tasks::EXTENSION).is_some(), "{r}");
    // A relayed task id may be longer than Flowgate's own; it goes to the shell as a task request.
    let long = format!("{}{}", upstream_tasks::TASK_PREFIX, "x".repeat(300));
    let mut get = stateless("tasks/get", json!({"taskId": long}));
    get["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {(tasks::EXTENSION): {}}});
    let h = RequestHeaders { mcp_name: Some(long.as_str()), ..stateless_headers("tasks/get", None) };
    assert!(matches!(run(&get, &h), Step::Task(TaskRequest { op: TaskOp::Get, .. })));
}

#[test]
fn a_missing_client_capability_is_http_400_for_stateless_clients() {
    let missing = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32021, "message": "m"}});
    assert_eq!(call_status(Version::V2026_07_28, &missing), 400);
    assert_eq!(call_status(Version::V2025_11_25, &missing), 200);
    let other = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "m"}});
    assert_eq!(call_status(Version::V2026_07_28, &other), 200);
    assert_eq!(call_status(Version::V2026_07_28, &json!({"jsonrpc": "2.0", "id": 1, "result": {}})), 200);
}

#[test]
fn upstream_skills_are_declared_listed_with_cache_hints_and_forwarded() {
    use crate::pure::backend::mcp::catalog::{Catalog, SKILLS_EXTENSION};
    use std::rc::Rc;
    let d = upstream_def(&json!({"url": "https://mcp.example/mcp"}));
    let entry =
        json!({"uri": "skill://s/SKILL.md", "frontmatter": {"name": "s", "description": "d"}, "resources": "dynamic"});
    let cat = Catalog {
        capabilities: json!({"extensions": {(tasks::EXTENSION): {}, (SKILLS_EXTENSION): {"directoryRead": true}}}),
        skills: vec![entry.clone()],
        ..Default::default()
    };
    let mut catalogs = Catalogs::default();
    catalogs.0.insert("up".into(), Rc::new(cat));
    let run = |msg: &Value, h: &RequestHeaders<'_>| handle_full(&d, &Upstreams::default(), &catalogs, msg, h, "v");
    let (_, r) = body(run(&stateless("server/discover", json!({})), &stateless_headers("server/discover", None)));
    let caps = &r["result"]["capabilities"];
    assert_eq!(caps["extensions"], json!({(tasks::EXTENSION): {}, (SKILLS_EXTENSION): {"directoryRead": true}}));
    assert!(caps["resources"].is_object(), "{caps}");
    let (_, r) = body(run(&stateless("skills/list", json!({})), &stateless_headers("skills/list", None)));
    assert_eq!(r["result"]["skills"], json!([entry]));
    assert_eq!((r["result"]["ttlMs"].clone(), r["result"]["cacheScope"].clone()), (json!(0), json!("private")));
    let get = stateless("skills/get", json!({"uri": "skill://s/SKILL.md"}));
    let Step::Forward(fwd) = run(&get, &stateless_headers("skills/get", None)) else { panic!("not forwarded") };
    let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "skill": entry, "ttlMs": 5, "cacheScope": "public"}});
    let r = forwarded_response(&fwd, "Up", &ok, "v");
    assert_eq!((r["result"]["skill"].clone(), r["result"]["ttlMs"].clone()), (entry.clone(), json!(0)));
    let dir = stateless("resources/directory/read", json!({"uri": "skill://s"}));
    let Step::Forward(mut fwd) = run(&dir, &stateless_headers("resources/directory/read", None)) else { panic!() };
    fwd.hide = vec!["skill://s/hidden.md".into()];
    let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"resources": [{"uri": "skill://s/SKILL.md"}, {"uri": "skill://s/hidden.md"}]}});
    let r = forwarded_response(&fwd, "Up", &ok, "v");
    assert_eq!(r["result"]["resources"], json!([{"uri": "skill://s/SKILL.md"}]));
    assert_eq!(r["result"]["resultType"], "complete");
    // A 2025-11-25 client is not offered the extension.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    let (_, r) = body(run(&init, &headers(None)));
    assert!(r["result"]["capabilities"].get("extensions").is_none(), "{r}");
}

#[test]
fn mcp_param_headers_are_checked_for_2026_calls_and_passed_upstream() {
    let d = upstream_def(&json!({"url": "https://mcp.example/mcp", "tool_name_prefix": false}));
    let mut ups = Upstreams::default();
    ups.0.insert(
        "up".into(),
        vec![
            json!({"name": "where", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}, "q": {"type": "string"}}}}),
            json!({"name": "broken", "inputSchema": {"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}}}}),
        ],
    );
    // A tool with an invalid declaration is not offered (SEP-2243: clients exclude it).
    let names: Vec<String> = tools_with(&d, &ups).iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["where"]);

    let call = stateless("tools/call", json!({"name": "where", "arguments": {"region": "Région", "q": "x"}}));
    let sent = |v: &str| vec![("mcp-param-region".to_string(), v.to_string())];
    let with = |params: &[(String, String)]| {
        let h = RequestHeaders { headers: params, ..stateless_headers("tools/call", Some("where")) };
        handle_with(&d, &ups, &call, &h, "v")
    };
    let (status, r) = body(with(&[]));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)));
    assert_eq!(
        r["error"]["message"],
        "Header mismatch: the Mcp-Param-Region header is required: arguments.region is set (send =?base64?UsOpZ2lvbg==?=)"
    );
    let (status, r) = body(with(&sent("eu-west1")));
    assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)));
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Mcp-Param-Region header (eu-west1) does not match arguments.region"));
    let (_, r) = body(with(&sent("=?base64?UsOpZ2lvbg?=")));
    assert!(r["error"]["message"].as_str().unwrap().contains("not valid base64"), "{r}");
    // The right header: the call goes upstream, with the header to repeat there.
    let Step::Call(plan) = with(&sent("=?base64?UsOpZ2lvbg==?=")) else { panic!("not called") };
    let CallRequest::Mcp { params, .. } = &plan.request else { panic!("not an MCP call") };
    assert_eq!(params, &[("Mcp-Param-Region".to_string(), "=?base64?UsOpZ2lvbg==?=".to_string())]);
    // A 2025 client has no such headers to send.
    let old = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "where", "arguments": {"region": "eu"}}});
    assert!(matches!(handle_with(&d, &ups, &old, &headers(Some("2025-11-25")), "v"), Step::Call(_)));
}

#[test]
fn the_task_methods_repeat_the_task_id_in_mcp_name() {
    let stateless = |method: &str, params: Value| {
        let mut msg = stateless(method, params);
        msg["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        msg
    };
    let get = stateless("tasks/get", json!({"taskId": "t-1"}));
    for (name, want) in [(None, "is required"), (Some("t-2"), "does not match params.taskId")] {
        let (status, r) = body(handle(&def(), &get, &stateless_headers("tasks/get", name), "v"));
        assert_eq!((status, r["error"]["code"].clone()), (400, json!(-32020)), "{name:?}");
        assert!(r["error"]["message"].as_str().unwrap().contains(want), "{r}");
    }
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let msg = stateless(method, json!({"taskId": "t-1"}));
        assert!(
            matches!(handle(&def(), &msg, &stateless_headers(method, Some("t-1")), "v"), Step::Task(_)),
            "{method}"
        );
    }
}
