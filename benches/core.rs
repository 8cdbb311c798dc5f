//! Host benchmark of the pure core (`cargo bench --bench core`; `make bench` runs it too and
//! appends its table to bench/results/latest.md). Plain `std::time::Instant` loops, no
//! framework: each measurement runs for a fixed time after a warm-up, in batches of ≈ 5 ms, and
//! reports the fastest batch as ns (or µs) per operation and operations per second. The fastest
//! rather than the median: this machine is shared, and a batch another process interrupted only
//! says how busy the machine was.
//!
//! Built with the release profile (`opt-level = "z"`, LTO), the same settings as the Worker's
//! wasm: the numbers are for the code as it ships, on the host CPU (no wasm, no runtime).
//!
//! Prints a Markdown table on stdout and one line `BENCH_JSON {...}` with the raw numbers.
//! Knobs: BENCH_CORE_SECONDS (time per measurement, default 0.5); BENCH_ONLY=sse (only the SSE
//! rows, for quick runs while working on the parser).

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use flowgate::pure::backend::dify::mode::DifyMode;
use flowgate::pure::backend::dify::stream::DifyStream;
use flowgate::pure::definition::{ServerDefinition, FORMAT};
use flowgate::pure::mcp::prepared::{response_text, Prepared};
use flowgate::pure::mcp::server::{handle, handle_with, RequestHeaders, Step};
use flowgate::pure::mcp::tools::{tools, Upstreams};
use flowgate::pure::sse::{SseEventRef, SseParser};

// ---------------------------------------------------------------------------------------------
// The server under test: the ONE place that knows the definition's shape. It is built from JSON
// text, as the Worker reads it from KV, so a change of the definition's types only needs this
// text (or this function) adapted.

/// A server of `n_apps` Dify workflow apps, each with a five-field form (text, paragraph,
/// select, number, checkbox) and two declared outputs.
fn server_with(n_apps: usize) -> ServerDefinition {
    let apps: Vec<String> = (0..n_apps)
        .map(|i| {
            format!(
                r#"{{
  "id": "app-{i:04}-7f3c9a51-2b1e-4d8e-9c3a-5e6f7a8b9c0d",
  "name": "Summarise documents {i}",
  "description": "Summarises a document in the language asked for, optionally as bullet points ({i}).",
  "mode": "workflow",
  "backend": {{"base_url": "https://dify.example.com/v1", "api_key": "app-Xk2v9QmB7pL4sT8wR1yN6cJ3"}},
  "user_input_form": [
    {{"text-input": {{"variable": "text", "label": "Document text", "required": true, "max_length": 4000}}}},
    {{"paragraph": {{"variable": "instructions", "label": "Extra instructions", "required": false, "max_length": 2000}}}},
    {{"select": {{"variable": "language", "label": "Language", "required": true, "options": ["en", "fr", "de", "ja", "zh"]}}}},
    {{"number": {{"variable": "max_words", "label": "Maximum words", "required": false}}}},
    {{"checkbox": {{"variable": "bullet_points", "label": "As bullet points", "required": false}}}}
  ],
  "outputs": [
    {{"variable": "summary", "type": "string", "description": "The summary"}},
    {{"variable": "keywords", "type": "array"}}
  ]
}}"#
            )
        })
        .collect();
    let text = format!(
        r#"{{
  "format": {FORMAT},
  "server_id": "srv-5d2c8e4a-1f0b-4c3d-9e8f-7a6b5c4d3e2f",
  "name": "Document tools",
  "description": "Summaries and keywords for documents",
  "status": "active",
  "parameters": {{"text": "The document to summarise", "language": "Language of the summary"}},
  "apps": [{}]
}}"#,
        apps.join(",")
    );
    serde_json::from_str(&text).expect("server_with: the definition text no longer matches ServerDefinition")
}

/// The arguments of a tools/call to one of those apps: all five fields, valid.
fn call_arguments() -> Value {
    json!({
        "text": "Flowgate publishes workflow and agent backends as remote MCP servers from a Cloudflare Worker. \
                 Each server is reached by a secret code; its tools are the apps behind it, and a call \
                 runs the app's workflow and returns its outputs as structured content. Clients that accept \
                 server-sent events get progress as the workflow moves from node to node.",
        "instructions": "Keep product names as they are.",
        "language": "fr",
        "max_words": 120,
        "bullet_points": true
    })
}

const PROTOCOL: &str = "2025-06-18";

fn headers() -> RequestHeaders<'static> {
    RequestHeaders {
        protocol_version: Some(PROTOCOL),
        user_agent: Some("flowgate-bench/1.0"),
        caller: Some("203.0.113.7"),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// timing

fn seconds_per_measurement() -> Duration {
    let s = std::env::var("BENCH_CORE_SECONDS").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.5);
    Duration::from_secs_f64(s.max(0.01))
}

/// Runs `f` in batches (each ≈ 5 ms) for `budget` after a warm-up of a fifth of it; the
/// fastest batch's time per call, in ns.
fn ns_per_op<T>(budget: Duration, mut f: impl FnMut() -> T) -> f64 {
    // Warm-up, and the batch size.
    let warm = budget / 5;
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < warm || calls < 3 {
        black_box(f());
        calls += 1;
    }
    let per_call = started.elapsed().as_secs_f64() / calls as f64;
    let batch = ((0.005 / per_call) as u64).max(1);
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || samples.len() < 5 {
        let t = Instant::now();
        for _ in 0..batch {
            black_box(f());
        }
        samples.push(t.elapsed().as_secs_f64() * 1e9 / batch as f64);
    }
    samples.into_iter().fold(f64::INFINITY, f64::min)
}

/// ns → "123 ns" or "12.3 µs" or "1.23 ms".
fn per_op(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

fn ops_per_s(ns: f64) -> String {
    let ops = 1e9 / ns;
    if ops >= 1e6 {
        format!("{:.2} M/s", ops / 1e6)
    } else if ops >= 1e3 {
        format!("{:.1} k/s", ops / 1e3)
    } else {
        format!("{ops:.0}/s")
    }
}

// ---------------------------------------------------------------------------------------------
// the SSE stream: what a Dify workflow sends while it runs

const SSE_TARGET_BYTES: usize = 64 << 20;
const SSE_CHUNK_BYTES: usize = 16 << 10;

/// ≈ 64 MiB of a Dify workflow's event stream: workflow_started, then nodes (node_started …
/// node_finished with inputs and outputs); inside every LLM node token-sized text_chunk events
/// (some non-ASCII); a bare `event: ping` keep-alive now and then; workflow_finished at the end.
/// Dify writes `data: <json>\n\n` with Python's default separators (", ", ": ").
fn dify_stream() -> Vec<u8> {
    const TOKENS: [&str; 16] = [
        "The",
        " quick",
        " brown",
        " fox",
        " jumps",
        " over",
        " the",
        " lazy",
        " dog",
        ".",
        " Résumé",
        " en",
        " français",
        "：",
        "摘要",
        " — done\\n",
    ];
    let task = "5ad4cb98-f0c7-4085-b384-88c403be6290";
    let run = "fcef2a4d-1b6a-4d5c-8e7f-0a9b8c7d6e5f";
    let mut out = Vec::with_capacity(SSE_TARGET_BYTES + (1 << 20));
    let push = |out: &mut Vec<u8>, json: String| {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(json.as_bytes());
        out.extend_from_slice(b"\n\n");
    };
    push(
        &mut out,
        format!(
            r#"{{"event": "workflow_started", "task_id": "{task}", "workflow_run_id": "{run}", "data": {{"id": "{run}", "workflow_id": "9b8a7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d", "inputs": {{"text": "A long document", "language": "fr", "sys.user_id": "mcp-3f2a9c1b7d4e5f6a7b8c9d0e", "sys.app_id": "1c2d3e4f"}}, "created_at": 1764576000}}}}"#
        ),
    );
    let mut node = 0u64;
    let mut token = 0usize;
    let mut events = 0u64;
    while out.len() < SSE_TARGET_BYTES {
        node += 1;
        let node_id = 1745912968134u64 + node;
        let started = format!(
            r#""id": "node-run-{node:08}-4c3d-9e8f-7a6b5c4d3e2f", "node_id": "{node_id}", "node_type": "llm", "title": "LLM step {node}", "index": {node}, "predecessor_node_id": "{}", "inputs": {{}}, "created_at": 1764576001"#,
            node_id - 1
        );
        push(
            &mut out,
            format!(
                r#"{{"event": "node_started", "task_id": "{task}", "workflow_run_id": "{run}", "data": {{{started}}}}}"#
            ),
        );
        let mut text = String::new();
        for _ in 0..200 {
            let t = TOKENS[token % TOKENS.len()];
            token += 1;
            text.push_str(t);
            push(
                &mut out,
                format!(
                    r#"{{"event": "text_chunk", "task_id": "{task}", "workflow_run_id": "{run}", "data": {{"text": "{t}", "from_variable_selector": ["{node_id}", "text"]}}}}"#
                ),
            );
            events += 1;
            if events.is_multiple_of(500) {
                out.extend_from_slice(b"event: ping\n\n");
            }
        }
        push(
            &mut out,
            format!(
                r#"{{"event": "node_finished", "task_id": "{task}", "workflow_run_id": "{run}", "data": {{{started}, "process_data": null, "outputs": {{"text": "{text}", "usage": {{"prompt_tokens": 812, "completion_tokens": 200, "total_tokens": 1012, "total_price": "0.0014160", "currency": "USD", "latency": 2.41}}, "finish_reason": "stop"}}, "status": "succeeded", "error": null, "elapsed_time": 2.412, "execution_metadata": {{"total_tokens": 1012, "total_price": "0.0014160", "currency": "USD"}}, "finished_at": 1764576003}}}}"#
            ),
        );
    }
    push(
        &mut out,
        format!(
            r#"{{"event": "workflow_finished", "task_id": "{task}", "workflow_run_id": "{run}", "data": {{"id": "{run}", "workflow_id": "9b8a7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d", "status": "succeeded", "outputs": {{"summary": "Résumé", "keywords": ["fox", "dog"]}}, "error": null, "elapsed_time": 12.5, "total_tokens": 1012, "total_steps": {node}, "created_at": 1764576000, "finished_at": 1764576013}}}}"#
        ),
    );
    out
}

/// One pass of the parser over `bytes` in 16 KiB chunks, each event handed over as the relay
/// takes it (borrowed, `feed_each`), its data read: (events, data bytes).
fn parse_pass(bytes: &[u8]) -> (u64, u64) {
    let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
    let (mut events, mut data) = (0u64, 0u64);
    let mut take = |e: SseEventRef<'_>| {
        events += 1;
        data += black_box(e.data).len() as u64;
    };
    for chunk in bytes.chunks(SSE_CHUNK_BYTES) {
        parser.feed_each(black_box(chunk), &mut take).expect("the stream parses");
    }
    parser.finish_each(&mut take).expect("the stream ends cleanly");
    (events, data)
}

/// The relay's whole per-event work on a Dify workflow stream: the parser, then each event's
/// data read by `DifyStream` (the signals it gives are taken and dropped): (events, signals).
fn interpret_pass(bytes: &[u8]) -> (u64, u64) {
    let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
    let mut reader = DifyStream::new(DifyMode::Workflow, 1 << 20);
    let mut signals = Vec::new();
    let (mut events, mut signalled) = (0u64, 0u64);
    let mut take = |e: SseEventRef<'_>| {
        events += 1;
        reader.on_event(black_box(e.data), &mut signals);
        signalled += signals.len() as u64;
        signals.clear();
    };
    for chunk in bytes.chunks(SSE_CHUNK_BYTES) {
        parser.feed_each(black_box(chunk), &mut take).expect("the stream parses");
    }
    parser.finish_each(&mut take).expect("the stream ends cleanly");
    (events, signalled)
}

/// The physical limit: finding every line end in the same chunks, and nothing else.
fn newline_pass(bytes: &[u8]) -> u64 {
    bytes.chunks(SSE_CHUNK_BYTES).map(|c| memchr::memchr_iter(b'\n', black_box(c)).count() as u64).sum()
}

/// Rounds of the SSE passes: each round runs each pass once.
const SSE_ROUNDS: usize = 15;

/// The fastest (least disturbed) seconds of each pass over `rounds` rounds after a warm-up
/// round. The passes take turns, one of each per round, so that the machine's slower drifts
/// (other tenants, clock changes) fall on all of them alike and their ratio holds.
fn fastest_in_turns<const N: usize>(rounds: usize, mut passes: [&mut dyn FnMut() -> u64; N]) -> [f64; N] {
    for pass in passes.iter_mut() {
        black_box(pass());
    }
    let mut fastest = [f64::INFINITY; N];
    for _ in 0..rounds {
        for (pass, best) in passes.iter_mut().zip(&mut fastest) {
            let t = Instant::now();
            black_box(pass());
            *best = best.min(t.elapsed().as_secs_f64());
        }
    }
    fastest
}

// ---------------------------------------------------------------------------------------------

struct Row {
    measure: String,
    per_op: String,
    rate: String,
    target: String,
    met: String,
}

fn main() {
    let budget = seconds_per_measurement();
    let mut rows: Vec<Row> = Vec::new();
    let mut raw = serde_json::Map::new();

    let only_sse = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "sse");
    if !only_sse {
        mcp_rows(budget, &mut rows, &mut raw);
    }
    sse_rows(&mut rows, &mut raw);
    print_rows(&rows, budget, raw);
}

fn push_row(rows: &mut Vec<Row>, measure: String, ns: f64) {
    rows.push(Row { measure, per_op: per_op(ns), rate: ops_per_s(ns), target: String::new(), met: String::new() })
}

fn mcp_rows(budget: Duration, rows: &mut Vec<Row>, raw: &mut serde_json::Map<String, Value>) {
    let row = push_row;
    // tools/list through the public entry point, for servers of 1, 10 and 50 apps.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let h = headers();
    for n in [1usize, 10, 50] {
        let def = server_with(n);
        let answer = match handle(&def, &list, &h, "0.1.0") {
            Step::Reply { status: 200, body: Some(b) } => b,
            other => panic!("tools/list did not answer 200: {other:?}"),
        };
        assert_eq!(answer["result"]["tools"].as_array().map(Vec::len), Some(n), "tools/list lists every app");
        let answer_bytes = serde_json::to_vec(&answer).unwrap().len();
        let ns = ns_per_op(budget, || handle(black_box(&def), black_box(&list), &h, "0.1.0"));
        row(rows, format!("tools/list, {n} app(s), built: handle() ({answer_bytes} B answer)"), ns);
        raw.insert(format!("tools_list_{n}_ns"), ns.into());
    }
    // The hot path as the Worker takes it: handle_with() says `ToolsList`, and the answer is
    // the list the prepared definition serialized once, copied around the id.
    for n in [1usize, 10, 50] {
        let prepared = Prepared::new(server_with(n));
        let body = serde_json::to_vec(&list).unwrap();
        let ns = ns_per_op(budget, || {
            let msg: Value = serde_json::from_str(std::str::from_utf8(black_box(&body)).unwrap()).unwrap();
            match handle_with(&prepared.def, &Upstreams::default(), &msg, &h, "0.1.0") {
                Step::ToolsList { id, version } => response_text(&id, &prepared.tools_list(version, "0.1.0")),
                other => panic!("a hot tools/list is a ToolsList step: {other:?}"),
            }
        });
        row(rows, format!("tools/list, {n} app(s), prepared: body bytes → answer bytes (the Worker's hot path)"), ns);
        raw.insert(format!("tools_list_prepared_{n}_ns"), ns.into());
    }
    // The same, as the Worker does it around handle(): body bytes in, answer bytes out.
    {
        let def = server_with(10);
        let body = serde_json::to_vec(&list).unwrap();
        let ns = ns_per_op(budget, || {
            let msg: Value = serde_json::from_str(std::str::from_utf8(black_box(&body)).unwrap()).unwrap();
            match handle(&def, &msg, &h, "0.1.0") {
                Step::Reply { body: Some(b), .. } => serde_json::to_vec(&b).unwrap(),
                _ => Vec::new(),
            }
        });
        row(rows, "tools/list, 10 apps: body bytes → parse → handle() → answer bytes".into(), ns);
        raw.insert("tools_list_10_bytes_ns".into(), ns.into());
    }
    // The definition read back from its cached JSON text (today: on every MCP request).
    for n in [1usize, 10, 50] {
        let text = serde_json::to_string(&server_with(n)).unwrap();
        let ns = ns_per_op(budget, || serde_json::from_str::<ServerDefinition>(black_box(&text)).unwrap());
        row(rows, format!("definition decode from its KV JSON text, {n} app(s) ({} B)", text.len()), ns);
        raw.insert(format!("definition_decode_{n}_ns"), ns.into());
    }

    // Argument checking of a tools/call with five typed arguments.
    {
        let def = server_with(10);
        let all = tools(&def);
        let tool = &all[3];
        let args = call_arguments();
        let args = args.as_object().unwrap();
        assert!(tool.check_arguments(Some(args)).is_ok(), "the bench arguments are valid");
        let ns = ns_per_op(budget, || tool.check_arguments(black_box(Some(args))));
        row(rows, "tools/call argument check, 5 typed arguments (Tool::check_arguments)".into(), ns);
        raw.insert("check_arguments_ns".into(), ns.into());

        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": tool.name, "arguments": args}});
        match handle(&def, &call, &h, "0.1.0") {
            Step::Call(_) => {}
            other => panic!("tools/call did not plan a backend call: {other:?}"),
        }
        let ns = ns_per_op(budget, || handle(black_box(&def), black_box(&call), &h, "0.1.0"));
        row(rows, "tools/call, 10-app server, 5 arguments: handle() → the call plan".into(), ns);
        raw.insert("tools_call_plan_ns".into(), ns.into());
    }
}

fn sse_rows(rows: &mut Vec<Row>, raw: &mut serde_json::Map<String, Value>) {
    // The SSE parser against a bare newline scan over the same bytes and chunks.
    let stream = dify_stream();
    let (events, data) = parse_pass(&stream);
    let lines = newline_pass(&stream);
    assert!(events > 1000 && lines > 2 * events, "the stream has events");
    let mb = stream.len() as f64 / 1e6;
    let (mut parse, mut scan, mut interpret) =
        (|| parse_pass(&stream).0, || newline_pass(&stream), || interpret_pass(&stream).0);
    let [parse_s, scan_s, interpret_s] = fastest_in_turns(SSE_ROUNDS, [&mut parse, &mut scan, &mut interpret]);
    let (parse_mbs, scan_mbs) = (mb / parse_s, mb / scan_s);
    let ratio = parse_mbs / scan_mbs;
    let mib = stream.len() as f64 / (1 << 20) as f64;
    rows.push(Row {
        measure: format!(
            "SSE parser: {mib:.0} MiB of Dify workflow events ({events} events, {:.0} B on average) in 16 KiB chunks",
            stream.len() as f64 / events as f64
        ),
        per_op: format!("{:.1} ms per pass, {:.0} ns/event", parse_s * 1e3, parse_s * 1e9 / events as f64),
        rate: format!("{parse_mbs:.0} MB/s"),
        target: String::new(),
        met: String::new(),
    });
    rows.push(Row {
        measure: "memchr newline count over the same bytes and chunks (the physical limit)".into(),
        per_op: format!("{:.1} ms per pass", scan_s * 1e3),
        rate: format!("{scan_mbs:.0} MB/s"),
        target: String::new(),
        met: String::new(),
    });
    rows.push(Row {
        measure: "SSE parser / memchr scan".into(),
        per_op: String::new(),
        rate: format!("{ratio:.2}×"),
        target: "≥ 0.5×".into(),
        met: if ratio >= 0.5 { "yes".into() } else { "**no**".into() },
    });
    // What the relay does with each event on top of parsing it.
    let (interpreted, signalled) = interpret_pass(&stream);
    assert_eq!(interpreted, events, "every event reaches the reader");
    assert!(signalled > 0, "node events give progress and log signals");
    rows.push(Row {
        measure: format!(
            "SSE parser + Dify stream reader (the relay's work per event: {signalled} signals from {events} events, the rest skipped)"
        ),
        per_op: format!("{:.1} ms per pass, {:.0} ns/event", interpret_s * 1e3, interpret_s * 1e9 / events as f64),
        rate: format!("{:.0} MB/s", mb / interpret_s),
        target: String::new(),
        met: String::new(),
    });
    raw.insert("sse_interpret_mb_s".into(), (mb / interpret_s).into());
    raw.insert("sse_bytes".into(), (stream.len() as u64).into());
    raw.insert("sse_events".into(), events.into());
    raw.insert("sse_data_bytes".into(), data.into());
    raw.insert("sse_parse_mb_s".into(), parse_mbs.into());
    raw.insert("sse_memchr_mb_s".into(), scan_mbs.into());
    raw.insert("sse_ratio".into(), ratio.into());
}

fn print_rows(rows: &[Row], budget: Duration, mut raw: serde_json::Map<String, Value>) {
    println!("| Pure core (host, cargo bench --bench core) | per op | ops/s | Target | Met |");
    println!("|:---|---:|---:|---|---|");
    for r in rows {
        println!("| {} | {} | {} | {} | {} |", r.measure, r.per_op, r.rate, r.target, r.met);
    }
    println!();
    println!(
        "Host CPU, release profile (opt-level \"z\", LTO: the Worker's settings, natively rather than in wasm); \
         fastest of ≈ 5 ms batches over {:.1} s per row after a warm-up; SSE rows: fastest of {SSE_ROUNDS} passes, the three passes taking turns. MB = 10^6 bytes.",
        budget.as_secs_f64()
    );
    raw.insert("seconds_per_measurement".into(), budget.as_secs_f64().into());
    println!("BENCH_JSON {}", Value::Object(raw));
}
