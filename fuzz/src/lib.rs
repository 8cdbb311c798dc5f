//! What each fuzz target does with one input, shared by the libFuzzer binaries in
//! `fuzz_targets/` and by the main crate's `tests/fuzz_corpus.rs`, which replays the committed
//! corpus through these same functions on every `cargo test`.
//!
//! Every function must return normally for any input: a panic (including a failed assertion
//! of one of the invariants checked here) is a bug in Flowgate's core.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

mod console_bodies;
mod input;
mod list_cursor;
mod oauth_jwt;
mod param_headers;
mod sealed_ids;
mod uri_template;

pub use console_bodies::console_bodies;
pub use list_cursor::list_cursor;
pub use oauth_jwt::oauth_jwt;
pub use param_headers::param_headers;
pub use sealed_ids::sealed_ids;
pub use uri_template::uri_template;

use serde_json::{json, Map, Value};

use flowgate::pure::app::validate_app;
use flowgate::pure::backend::config::Backend;
use flowgate::pure::backend::dify::mode::DifyMode;
use flowgate::pure::definition::{AppDefinition, ServerDefinition, FORMAT};
use flowgate::pure::error::Errors;
use flowgate::pure::form::{form_to_dify, parse_form};
use flowgate::pure::mcp::server::{
    batch_allowed, finish_call, handle, handle_with, notification, relays, task_created, task_response,
    upstream_response, CallPlan, Progress, RequestHeaders, Step,
};
use flowgate::pure::mcp::tools::{tools, tools_with, Upstreams};
use flowgate::pure::mode::Mode;
use flowgate::pure::outcome::Outcome;
use flowgate::pure::outcome::Signal;
use flowgate::pure::protocol::jsonrpc::{classify, Message};
use flowgate::pure::protocol::tasks::{TaskOutcome, TaskView, MAX_TTL_MS, MIN_TTL_MS};
use flowgate::pure::protocol::version::Version;
use flowgate::pure::sse::{SseError, SseEvent, SseParser};
use flowgate::pure::url::{
    check_backend_url, follow_redirect, host_for_display, parse_outbound, private_host_reason, scrub_urls,
    PrivateAllow, Redirect,
};
use url::{Host, Url};

/// The version string the dispatcher reports as Flowgate's.
const SERVER_VERSION: &str = "0.0.0";
/// Cap on the messages of one batch that are dispatched (a batch is split by the shell).
const MAX_BATCH: usize = 16;

/// The fixed server the dispatcher targets run against: a workflow app whose form has a
/// required text input and a select, and a chat app that takes a `query`.
pub fn server_definition() -> ServerDefinition {
    ServerDefinition {
        format: FORMAT,
        server_id: "srv-fuzz".into(),
        name: "Fuzz Server".into(),
        description: "Summarises and chats".into(),
        status: flowgate::pure::server::Status::Active,
        parameters: Map::new(),
        auth: Default::default(),
        call_log_payloads: false,
        code_expires_at: None,
        apps: vec![
            AppDefinition::new(
                "a1".into(),
                "Summariser".into(),
                "Summarises text".into(),
                backend(
                    Mode::Dify(DifyMode::Workflow),
                    json!({"base_url": "http://x/v1", "api_key": "k", "task_support": "optional"}),
                ),
                json!([
                    {"text-input": {"variable": "text", "label": "Text", "required": true, "max_length": 200}},
                    {"select": {"variable": "lang", "options": ["en", "fr"], "default": "en"}}
                ]),
                json!([{"variable": "summary", "type": "string"}]),
            ),
            AppDefinition::new(
                "a2".into(),
                "Agent".into(),
                "".into(),
                backend(Mode::Dify(DifyMode::Chat), json!({"base_url": "http://x/v1", "api_key": "k"})),
                json!([]),
                json!([]),
            ),
        ],
    }
}

fn backend(mode: Mode, settings: serde_json::Value) -> Backend {
    Backend::from_settings(mode, &settings).expect("fixture settings read")
}

/// [`server_definition`] plus an upstream MCP app with a task toolset, and the tool list its
/// upstream reported, for the `handle_with` path.
pub fn server_with_upstream() -> (ServerDefinition, Upstreams) {
    let mut def = server_definition();
    def.apps.push(AppDefinition::new(
"a3".into(),
"Upstream".into(),
"".into(),
backend(
            Mode::Mcp,
            json!({"url": "http://up/mcp",
                   "task_toolsets": [{"name": "job", "submit_tool": "submit", "status_tool": "status", "cancel_tool": "cancel"}]}),
        ),
json!([]),
json!([]),
));
    let listed = vec![
        json!({"name": "search", "title": "Search", "description": "Searches",
               "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "submit", "inputSchema": {"type": "object"}}),
        json!({"name": "status"}),
        json!({"name": "cancel"}),
    ];
    (def, Upstreams(HashMap::from([("a3".to_string(), listed)])))
}

fn parse_json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

// ---------------------------------------------------------------------------------------------
// 1. jsonrpc_envelope

/// Classifies the message, then dispatches it (or each message of a batch) under several
/// header variants, against the plain server and the one with an upstream app.
pub fn jsonrpc_envelope(data: &[u8]) {
    let Some(value) = parse_json(data) else { return };
    // Leading whitespace leaves the JSON as it is, so its length picks the extra header variant.
    let leading = data.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let def = server_definition();
    let (up_def, upstreams) = server_with_upstream();
    let messages: Vec<&Value> = match &value {
        Value::Array(batch) => batch.iter().take(MAX_BATCH).collect(),
        single => vec![single],
    };
    for msg in messages {
        check_classify(msg);
        for h in header_variants(msg, leading) {
            if let Value::Array(batch) = &value {
                let _ = batch_allowed(&h, batch.len());
            }
            check_step(msg, &handle(&def, msg, &h, SERVER_VERSION));
            check_step(msg, &handle_with(&up_def, &upstreams, msg, &h, SERVER_VERSION));
        }
    }
}

fn check_classify(msg: &Value) {
    match classify(msg) {
        Ok(Message::Request { id, method, params }) => {
            assert!(id.is_string() || id.is_i64() || id.is_u64(), "request id {id}");
            assert_eq!(msg.get("method").and_then(Value::as_str), Some(method));
            assert_eq!(params, msg.get("params").and_then(Value::as_object));
        }
        Ok(Message::Notification { method, .. }) => {
            assert!(method.starts_with("notifications/") && msg.get("id").is_none(), "{msg}");
        }
        Ok(Message::Response) => assert!(msg.get("method").is_none(), "{msg}"),
        Err((echo, e)) => {
            assert!(echo.is_null() || echo.is_string() || echo.is_i64() || echo.is_u64(), "echoed id {echo}");
            let r = e.to_response(&echo);
            assert_eq!(r["jsonrpc"], "2.0");
            assert!(r["error"]["message"].is_string());
        }
    }
}

/// No header, 2025-06-18, and 2026-07-28 with `Mcp-Method` (and `Mcp-Name`) taken from the
/// body, always; plus one more chosen by the number of leading whitespace bytes of the input.
fn header_variants<'a>(msg: &'a Value, leading: usize) -> Vec<RequestHeaders<'a>> {
    let method = msg.get("method").and_then(Value::as_str);
    let name = msg.get("params").and_then(|p| p.get("name")).and_then(Value::as_str);
    let stateless = |mcp_method, mcp_name| RequestHeaders {
        protocol_version: Some("2026-07-28"),
        mcp_method,
        mcp_name,
        user_agent: Some("fuzz/1.0"),
        caller: Some("203.0.113.9"),
        identity: None,
        session_caps: None,
        headers: &[],
        task_min_ttl_ms: None,
    };
    let version = |v| RequestHeaders { protocol_version: Some(v), ..Default::default() };
    let extra = match leading % 8 {
        0 => version("2024-11-05"),
        1 => version("2025-03-26"),
        2 => version("2025-11-25"),
        3 => version("1999-01-01"),
        4 => stateless(Some("tools/call"), Some("Summariser")),
        5 => stateless(None, None),
        6 => RequestHeaders {
            protocol_version: Some("2025-11-25"),
            mcp_method: method,
            mcp_name: name,
            user_agent: None,
            caller: None,
            // A caller a client key identified (`pure::client_auth`).
            identity: Some("alice-laptop"),
            // What a client declared at initialize (Flowgate's sealed session id).
            session_caps: Some(flowgate::pure::mcp::relay::ClientCaps { sampling: true, ..Default::default() }),
            headers: &[],
            task_min_ttl_ms: None,
        },
        _ => RequestHeaders { user_agent: Some(""), ..Default::default() },
    };
    vec![RequestHeaders::default(), version("2025-06-18"), stateless(method, None), stateless(method, name), extra]
}

/// The step is well formed, and whatever it asks the shell to do next can be finished.
fn check_step(msg: &Value, step: &Step) {
    match step {
        Step::Reply { status, body: None } => {
            assert_eq!(*status, 202);
            assert!(msg.get("method").is_none() || msg.get("id").is_none(), "202 for a request: {msg}");
        }
        Step::Reply { status, body: Some(body) } => {
            assert!((200..600).contains(status), "status {status}");
            check_response(body);
        }
        Step::Call(plan) => check_plan(msg, plan),
        Step::CreateTask { plan, ttl_ms } => {
            check_plan(msg, plan);
            assert!((MIN_TTL_MS..=MAX_TTL_MS).contains(ttl_ms), "ttl {ttl_ms}");
            let view = task_view("working", None);
            check_response(&task_created(plan, &view, SERVER_VERSION));
        }
        Step::Task(req) => {
            assert_eq!(Some(&req.id), msg.get("id"));
            assert!(!req.task_id.is_empty() && req.task_id.len() <= 128);
            let outcomes = [
                ("working", None),
                ("completed", Some(TaskOutcome::Result(json!({"content": [], "isError": false})))),
                ("failed", Some(TaskOutcome::Result(json!({"content": [], "isError": true})))),
                ("failed", Some(TaskOutcome::Error { code: -32603, message: "boom".into() })),
                ("cancelled", None),
            ];
            check_response(&task_response(req, None, false, SERVER_VERSION).1);
            for (status, outcome) in outcomes {
                let view = task_view(status, outcome);
                for was_terminal in [false, true] {
                    check_response(&task_response(req, Some(&view), was_terminal, SERVER_VERSION).1);
                }
            }
        }
        Step::Cancel { key } => assert!(key.starts_with("cancel:"), "{key}"),
        // Only a response whose id is a relay ticket; the ticket is opened by the shell.
        Step::Answer { token, message, user } => {
            assert!(token.starts_with(flowgate::pure::mcp::relay::TICKET_PREFIX), "{token}");
            assert!(!user.is_empty(), "an answer names its caller");
            assert!(message.get("method").is_none(), "{message}");
        }
        Step::ToolsList { id, .. } => assert_eq!(Some(id), msg.get("id")),
        // Whatever the upstream answers, the client gets one well-formed response.
        Step::Forward(fwd) => {
            assert_eq!(Some(&fwd.id), msg.get("id"));
            for answer in [
                json!({"jsonrpc": "2.0", "id": 1, "result": {"contents": []}}),
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no"}}),
                json!({"jsonrpc": "2.0", "id": 1, "result": "odd"}),
                json!({}),
            ] {
                check_response(&flowgate::pure::mcp::server::forwarded_response(fwd, "up", &answer, SERVER_VERSION));
            }
        }
    }
}

fn task_view(status: &str, outcome: Option<TaskOutcome>) -> TaskView {
    use flowgate::pure::named::Named;
    TaskView {
        task_id: "t-1".into(),
        status: flowgate::pure::protocol::tasks::McpTaskStatus::from_name(status).expect("an MCP task status"),
        status_message: Some("fuzz".into()),
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_001_000,
        ttl_ms: 60_000,
        poll_interval_ms: 1_000,
        outcome,
    }
}

fn check_plan(msg: &Value, plan: &CallPlan) {
    assert_eq!(Some(&plan.id), msg.get("id"));
    // Derived from the client, or the identity a client key gave (see `header_variants`).
    assert!(plan.user.starts_with("mcp-") || plan.user == "alice-laptop", "{}", plan.user);
    assert!(plan.cancel_key.starts_with("cancel:"));
    for outcome in [
        Outcome::Ok { text: "{\"summary\":\"s\"}".into(), structured: Some(json!({"summary": "s"})) },
        Outcome::Ok { text: "plain".into(), structured: None },
        Outcome::Failed("the workflow failed".into()),
    ] {
        check_response(&finish_call(plan, outcome, SERVER_VERSION));
    }
    let mut progress = Progress::default();
    for signal in [
        Signal::Progress { message: "LLM succeeded".into() },
        Signal::Percent { percent: 50.0, message: "half".into() },
        Signal::Percent { percent: 10.0, message: "back".into() },
        Signal::Log { level: "warning", data: json!({"x": 1}) },
    ] {
        if let Some(n) = notification(plan, signal, &mut progress) {
            assert_eq!(n["jsonrpc"], "2.0");
            assert!(relays(plan, &n) || n["method"] == "notifications/message" || plan.progress_token.is_none());
        }
    }
    for response in [
        json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}], "structuredContent": {}}}),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "upstream says no"}}),
    ] {
        check_response(&upstream_response(plan, "Upstream", &response, SERVER_VERSION));
    }
}

/// A JSON-RPC response: version, an id, and exactly one of `result` and `error`.
fn check_response(body: &Value) {
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body.get("id").is_some(), "{body}");
    match (body.get("result"), body.get("error")) {
        (Some(_), None) => {}
        (None, Some(e)) => {
            assert!(e["code"].is_i64(), "{body}");
            assert!(e["message"].is_string(), "{body}");
        }
        _ => panic!("not exactly one of result and error: {body}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 2. sse_parser

/// The limit the SSE target parses with: small, so that the cap is reached often.
pub const SSE_MAX_EVENT_BYTES: usize = 4096;

/// What parsing produced: the events dispatched (also those before an error), and the result.
type Parsed = (Vec<SseEvent>, Result<(), SseError>);

fn parse_sse<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Parsed {
    let mut parser = SseParser::new(SSE_MAX_EVENT_BYTES);
    let mut out = Vec::new();
    for chunk in chunks {
        if let Err(e) = parser.feed(chunk, &mut out) {
            return (out, Err(e));
        }
    }
    let result = parser.finish(&mut out);
    (out, result)
}

/// Differential: the stream parses the same in one chunk, split in two at a position taken
/// from the first byte (with an empty chunk between), and one byte at a time.
pub fn sse_parser(data: &[u8]) {
    let whole = parse_sse([data]);
    let at = data.first().map_or(0, |&b| b as usize * data.len() / 255);
    let split = parse_sse([&data[..at], &[][..], &data[at..]]);
    assert_eq!(split, whole, "split at {at} differs from one chunk");
    let bytes = parse_sse(data.chunks(1));
    assert_eq!(bytes, whole, "byte-at-a-time differs from one chunk");
    // Every event holds what a client can carry: data without CR, no empty-data events.
    for e in &whole.0 {
        assert!(!e.event.contains(['\r', '\n']) && !e.data.contains('\r'), "{e:?}");
        assert!(e.id.as_deref().is_none_or(|i| !i.contains(['\0', '\r', '\n'])), "{e:?}");
        // The parser holds data as bytes, decoded when read: each U+FFFD (3 bytes) in the text
        // stands for at least one byte the cap counted.
        let data_bytes = e.data.len() - 2 * e.data.matches('\u{FFFD}').count();
        assert!(e.event.len() + data_bytes + e.id.as_ref().map_or(0, String::len) <= SSE_MAX_EVENT_BYTES);
    }
    // A parser is reusable after finish: the same stream again gives the same events.
    let mut parser = SseParser::new(SSE_MAX_EVENT_BYTES);
    let mut out = Vec::new();
    let _ = parser.feed(b"data: before\n", &mut out).and_then(|()| parser.finish(&mut out));
    out.clear();
    let again = parser.feed(data, &mut out).and_then(|()| parser.finish(&mut out));
    assert_eq!((out, again), whole, "a reused parser differs from a new one");
}

// ---------------------------------------------------------------------------------------------
// 3. arguments

/// Validates a JSON object as the arguments of every tool of the fixed server (without and
/// with upstream tools), then sends it as a `tools/call` to each tool under several revisions.
pub fn arguments(data: &[u8]) {
    let Some(Value::Object(args)) = parse_json(data) else { return };
    let def = server_definition();
    let (up_def, upstreams) = server_with_upstream();
    for tool in tools(&def).iter().chain(tools_with(&up_def, &upstreams).iter()) {
        let _ = tool.check_arguments(None);
        match tool.check_arguments(Some(&args)) {
            Ok((inputs, query)) if tool.upstream.is_some() => {
                assert_eq!(inputs, args);
                assert!(query.is_empty());
            }
            Ok((inputs, query)) => {
                for (k, v) in &inputs {
                    assert!(
                        tool.form.iter().any(|f| &f.variable == k && f.ty.reaches_mcp()),
                        "input {k} not in the form"
                    );
                    assert_eq!(Some(v), args.get(k));
                }
                if tool.app.backend.as_dify().is_some_and(|c| c.app_mode.takes_query()) {
                    assert_eq!(Some(query.as_str()), args.get("query").and_then(Value::as_str));
                } else {
                    assert!(query.is_empty());
                }
            }
            Err(problems) => assert!(!problems.is_empty()),
        }
    }
    let names: Vec<String> = tools_with(&up_def, &upstreams).iter().map(|t| t.name.clone()).collect();
    for name in &names {
        let plain = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": name, "arguments": args}});
        for v in ["2025-06-18", "2025-11-25"] {
            let h = RequestHeaders { protocol_version: Some(v), ..Default::default() };
            check_step(&plain, &handle(&def, &plain, &h, SERVER_VERSION));
            check_step(&plain, &handle_with(&up_def, &upstreams, &plain, &h, SERVER_VERSION));
        }
        let stateless = json!({"jsonrpc": "2.0", "id": "s", "method": "tools/call",
                               "params": {"name": name, "arguments": args,
                                          "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                                    "io.modelcontextprotocol/clientCapabilities": {}}}});
        let h = RequestHeaders {
            protocol_version: Some("2026-07-28"),
            mcp_method: Some("tools/call"),
            mcp_name: Some(name),
            user_agent: None,
            caller: None,
            identity: None,
            session_caps: None,
            headers: &[],
            task_min_ttl_ms: None,
        };
        check_step(&stateless, &handle_with(&up_def, &upstreams, &stateless, &h, SERVER_VERSION));
    }
}

// ---------------------------------------------------------------------------------------------
// 4. form_schema

/// Parses a Dify `user_input_form`; a form that parses cleanly round-trips through the stored
/// shape, gives a consistent input schema in every revision, and is accepted by `validate_app`
/// exactly when it parses without errors.
pub fn form_schema(data: &[u8]) {
    let Some(value) = parse_json(data) else { return };
    let mut errs = Errors::default();
    let fields = parse_form(&value, "user_input_form", &mut errs);
    if errs.is_empty() {
        let mut again_errs = Errors::default();
        let again = parse_form(&form_to_dify(&fields), "user_input_form", &mut again_errs);
        assert!(again_errs.is_empty(), "stored shape does not parse: {:?}", again_errs.0);
        assert_eq!(again, fields, "stored shape does not round-trip");
    }
    {
        for mode in ["workflow", "chat"] {
            let mut def = server_definition();
            def.apps.truncate(1);
            if let Backend::Dify(c) = &mut def.apps[0].backend {
                c.app_mode = Mode::parse(mode).and_then(Mode::dify).unwrap_or(DifyMode::Workflow);
            }
            def.apps[0].user_input_form = value.clone();
            let all = tools(&def);
            let tool = &all[0];
            let schema = tool.input_schema(&def);
            check_schema(&schema, mode == "workflow");
            for version in Version::ALL {
                let t = tool.to_json(&def, version);
                assert_eq!(t["inputSchema"], schema);
            }
            let _ = tool.check_arguments(None);
        }
    }
    let body = json!({"name": "x", "mode": "workflow", "backend": {"base_url": "http://x/v1", "api_key": "k"},
                      "user_input_form": value});
    let result = validate_app(&body, None);
    if !value.is_null() {
        assert_eq!(result.is_ok(), errs.is_empty(), "validate_app and parse_form disagree: {:?}", errs.0);
    }
    if let Ok(spec) = result {
        if !value.is_null() {
            assert_eq!(spec.user_input_form, fields);
        }
        let _ = flowgate::pure::app::warnings(&spec);
    }
}

/// An object schema whose `required` names only its properties (each once, in a workflow
/// app; a chat app's form may also use `query` when it was never validated).
fn check_schema(schema: &Value, unique: bool) {
    assert_eq!(schema["type"], "object");
    let props = schema["properties"].as_object().expect("properties");
    let required = schema["required"].as_array().expect("required");
    for (i, r) in required.iter().enumerate() {
        let r = r.as_str().expect("required names are strings");
        assert!(props.contains_key(r), "required '{r}' is not a property");
        if unique {
            assert!(!required[..i].iter().any(|x| x == r), "'{r}' required twice");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. url_guard

/// The input as a URL, as the host of an http URL, as a redirect `Location`, and inside an
/// error text: the guard judges the host `url::Url` parses, refuses exactly the non-public
/// hosts (by this file's own table of ranges), fetches what it judged, and never shows a
/// URL's userinfo or query.
pub fn url_guard(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    // Hosts mixing capitals and non-ASCII (plain or percent-encoded) included: idna_adapter 1.0
    // debug-asserts against them, so the fuzz build turns its debug assertions off, as the main
    // crate's dev profile does (fuzz/Cargo.toml).
    check_guard(s);
    check_guard(&format!("http://{s}/"));
    check_redirect(s);
    check_scrub(s);
    check_scrub(&format!("fetch failed: {s} (retry)"));
}

/// Non-public IPv4 networks as (network, prefix length), written from the IANA registry.
const V4_NON_PUBLIC: [(u32, u32); 14] = [
    (0x0000_0000, 8),  // this network
    (0x0a00_0000, 8),  // private
    (0x6440_0000, 10), // shared (CGNAT)
    (0x7f00_0000, 8),  // loopback
    (0xa9fe_0000, 16), // link-local, cloud metadata
    (0xac10_0000, 12), // private
    (0xc000_0000, 24), // IETF protocol assignments
    (0xc000_0200, 24), // TEST-NET-1
    (0xc0a8_0000, 16), // private
    (0xc612_0000, 15), // benchmarking
    (0xc633_6400, 24), // TEST-NET-2
    (0xcb00_7100, 24), // TEST-NET-3
    (0xe000_0000, 4),  // multicast
    (0xf000_0000, 4),  // reserved, broadcast
];

/// Non-public IPv6 networks that carry no IPv4 address.
const V6_NON_PUBLIC: [(u128, u32); 7] = [
    (0xfc00 << 112, 7),           // unique local
    (0xfe80 << 112, 10),          // link-local
    (0xfec0 << 112, 10),          // site-local
    (0xff00 << 112, 8),           // multicast
    (0x2001_0db8 << 96, 32),      // documentation
    (0x0100 << 112, 64),          // discard-only
    (0x0064_ff9b_0001 << 80, 48), // local-use NAT64
];

fn v4_non_public(a: Ipv4Addr) -> bool {
    let a = u32::from(a);
    V4_NON_PUBLIC.iter().any(|&(net, len)| a >> (32 - len) == net >> (32 - len))
}

fn v6_non_public(a: Ipv6Addr) -> bool {
    let bits = u128::from(a);
    let low = Ipv4Addr::from(bits as u32);
    // ::/96 (compatible, also :: and ::1), ::ffff:0:0/96 (mapped), ::ffff:0:0:0/96
    // (translated), 64:ff9b::/96 (NAT64): the last 32 bits are the IPv4 host reached.
    if matches!(bits >> 32, 0 | 0xffff | 0xffff_0000) || bits >> 32 == 0x0064_ff9b << 64 {
        return v4_non_public(low);
    }
    if bits >> 112 == 0x2002 {
        return v4_non_public(Ipv4Addr::from((bits >> 80) as u32));
    }
    V6_NON_PUBLIC.iter().any(|&(net, len)| bits >> (128 - len) == net >> (128 - len))
}

fn non_public(u: &Url) -> bool {
    match u.host() {
        None => true,
        Some(Host::Domain(d)) => {
            let name = d.trim_end_matches('.');
            name.is_empty() || name.rsplit('.').next().is_some_and(|last| last == "localhost" || last == "internal")
        }
        Some(Host::Ipv4(a)) => v4_non_public(a),
        Some(Host::Ipv6(a)) => v6_non_public(a),
    }
}

fn fetchable(u: &Url) -> bool {
    matches!(u.scheme(), "http" | "https") && u.username().is_empty() && u.password().is_none()
}

fn check_guard(s: &str) {
    let reason = private_host_reason(s);
    let shown = host_for_display(s);
    assert!(!shown.contains(['@', '?', '/', '#']), "{s:?} shown as {shown:?}");
    let Ok(u) = Url::parse(s) else {
        assert_eq!(reason, Some("is not a valid URL"), "{s:?}");
        assert_eq!(shown, "an invalid URL");
        assert!(parse_outbound(s, &PrivateAllow::Everything).is_err(), "{s:?}");
        assert!(check_backend_url(s).is_err(), "{s:?}");
        return;
    };
    let private = non_public(&u);
    assert_eq!(reason.is_some(), private, "{s:?} parsed as {:?}: {reason:?}", u.host());
    if let Some(h) = u.host_str().filter(|h| !h.is_empty()) {
        let expect = u.port().map_or_else(|| h.to_string(), |p| format!("{h}:{p}"));
        assert_eq!(shown, expect, "{s:?}");
    }
    let own_host = PrivateAllow::Hosts(u.host_str().into_iter().map(String::from).collect());
    for (allow, refuses_private) in
        [(PrivateAllow::Nothing, true), (PrivateAllow::Everything, false), (own_host, false)]
    {
        match parse_outbound(s, &allow) {
            Ok(out) => {
                // What is fetched is what was judged.
                assert_eq!(out.as_str(), u.as_str(), "{s:?}");
                assert!(fetchable(&u), "{s:?} fetched despite scheme or credentials");
                assert!(!(refuses_private && private), "{s:?} fetched a non-public host under {allow:?}");
            }
            Err(e) => {
                assert!(!fetchable(&u) || (refuses_private && private), "{s:?} refused under {allow:?}: {e}");
            }
        }
    }
    if check_backend_url(s).is_ok() {
        assert!(fetchable(&u) && u.fragment().is_none() && u.host_str().is_some_and(|h| !h.is_empty()), "{s:?}");
        assert!(!s.chars().any(|c| c.is_whitespace() || c.is_control()), "{s:?}");
    }
}

fn check_redirect(location: &str) {
    const FROM: &str = "https://api.example.com/v1/run?key=k";
    let from = Url::parse(FROM).expect("a valid base");
    let joined = from.join(location).ok();
    let judged_from = flowgate::pure::web_url::Url::parse(FROM).expect("a valid base");
    for status in [302, 307] {
        match follow_redirect(&judged_from, status, true, Some(location), 0, &PrivateAllow::Nothing) {
            Redirect::Follow { url, method_becomes_get, same_origin } => {
                assert_eq!(Some(url.as_str()), joined.as_ref().map(Url::as_str), "{location:?}");
                let url = Url::parse(url.as_str()).expect("a followed URL parses");
                assert!(fetchable(&url) && !non_public(&url), "{location:?} followed to {url}");
                assert_eq!(method_becomes_get, status == 302);
                assert_eq!(same_origin, url.origin() == from.origin());
            }
            Redirect::Refuse(why) => {
                assert!(!why.contains(['@', '?']), "{location:?} refused as {why:?}");
                let fine = joined.as_ref().is_some_and(|j| fetchable(j) && !non_public(j));
                assert!(!fine || location.trim().is_empty(), "{location:?} refused: {why}");
            }
        }
    }
}

/// After scrubbing, whatever follows `http://` or `https://` up to whitespace holds no `@`
/// and no `?`; a text without such a URL is unchanged.
fn check_scrub(text: &str) {
    let out = scrub_urls(text);
    let lower = out.to_ascii_lowercase();
    let mut found = false;
    for (at, _) in lower.match_indices("http") {
        let tail = &out[at..];
        let rest = ["http://", "https://"].iter().find_map(|p| lower[at..].strip_prefix(p).map(|_| &tail[p.len()..]));
        let Some(rest) = rest else { continue };
        found = true;
        let run = rest.split(|c: char| c.is_whitespace() || c.is_control()).next().unwrap_or("");
        assert!(!run.contains(['@', '?']), "{text:?} scrubbed to {out:?}");
    }
    let had = text.to_ascii_lowercase().contains("http://") || text.to_ascii_lowercase().contains("https://");
    if !had {
        assert_eq!(out, text);
    }
    assert_eq!(found, had, "{text:?} scrubbed to {out:?}");
}
