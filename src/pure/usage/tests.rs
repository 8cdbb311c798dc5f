use super::*;

fn call<'a>(
    server: &'a str,
    tool: &'a str,
    at_ms: u64,
    ms: u64,
    caller: &'a str,
    failure: Option<&'a str>,
) -> Call<'a> {
    Call { server_id: server, tool, at_ms, latency_ms: ms, streamed: false, caller, failure }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn buckets_are_increasing_and_every_latency_has_one() {
    assert!(BOUNDS_MS.windows(2).all(|w| w[0] < w[1] && w[1] * 10 <= w[0] * 20));
    assert_eq!(Histogram::bucket_of(0), 0);
    assert_eq!(Histogram::bucket_of(1), 1);
    assert_eq!(Histogram::bucket_of(99), 11);
    assert_eq!(Histogram::bucket_of(100), 12);
    assert_eq!(Histogram::bucket_of(u64::MAX), BUCKETS - 1);
}

#[test]
fn quantiles_interpolate_inside_the_bucket_and_stay_ordered() {
    let mut h = Histogram::default();
    assert_eq!(h.quantile(0.5), None);
    for _ in 0..10 {
        h.record(12); // bucket [10, 15)
    }
    assert_eq!(h.quantile(0.5), Some(12.5));
    assert_eq!(h.quantile(1.0), Some(15.0));
    h.record(800); // [700, 1000)
    let (p50, p95) = (h.quantile(0.5).unwrap(), h.quantile(0.95).unwrap());
    assert!((10.0..15.0).contains(&p50), "{p50}");
    assert!(p50 <= p95);
    // The open last bucket answers its lower bound.
    let mut slow = Histogram::default();
    slow.record(10_000_000);
    assert_eq!(slow.quantile(0.95), Some(600_000.0));
}

#[test]
fn merged_histograms_equal_one_histogram_of_all_samples() {
    let samples: Vec<u64> = (0..500).map(|i| (i * 37 % 2000) as u64).collect();
    let mut whole = Histogram::default();
    let (mut a, mut b) = (Histogram::default(), Histogram::default());
    for (i, s) in samples.iter().enumerate() {
        whole.record(*s);
        if i % 3 == 0 {
            a.record(*s)
        } else {
            b.record(*s)
        }
    }
    a.merge(&b);
    assert_eq!(a, whole);
    for q in [0.5, 0.95] {
        assert_eq!(a.quantile(q), whole.quantile(q));
    }
    // Within one bucket's width of the exact percentile.
    let mut sorted = samples.clone();
    sorted.sort();
    let exact = sorted[sorted.len() / 2] as f64;
    let got = whole.quantile(0.5).unwrap();
    assert!(got / exact < 1.7 && exact / got < 1.7, "{got} vs {exact}");
}

#[test]
fn callers_are_exact_up_to_the_cap_then_marked_full() {
    let mut c = Callers::default();
    for i in 0..MAX_CALLERS as u64 {
        c.insert(i);
        c.insert(i);
    }
    assert_eq!((c.hashes.len(), c.full), (MAX_CALLERS, false));
    c.insert(9999);
    assert_eq!((c.hashes.len(), c.full), (MAX_CALLERS, true));
    let stored = Callers::from_stored(&c.to_json().to_string(), c.full);
    assert_eq!(stored, c);
    assert_ne!(caller_hash("s1", "alice"), caller_hash("s2", "alice"));
    assert_eq!(caller_hash("s1", "alice"), caller_hash("s1", "alice"));
}

#[test]
fn the_aggregate_counts_per_server_tool_and_minute() {
    let mut a = Aggregate::default();
    assert!(a.is_empty());
    a.record(&call("s", "t", 60_000, 10, "alice", None));
    a.record(&call("s", "t", 119_999, 20, "bob", Some("boom")));
    a.record(&Call { streamed: true, ..call("s", "t", 120_000, 30, "alice", None) });
    a.record(&call("s", "u", 60_500, 5, "alice", None));
    assert_eq!(a.series_len(), 3);
    let s = &a.series[&("s".to_string(), "t".to_string(), 60)];
    assert_eq!((s.calls, s.errors, s.streamed, s.callers.hashes.len()), (2, 1, 0, 2));
    assert_eq!(a.failures.len(), 1);
    assert_eq!(a.failures[0].message, "boom");
}

#[test]
fn past_the_series_cap_calls_are_dropped_and_counted() {
    let mut a = Aggregate::default();
    let tools: Vec<String> = (0..MAX_SERIES + 5).map(|i| format!("t{i}")).collect();
    for t in &tools {
        a.record(&call("s", t, 0, 1, "c", None));
    }
    assert_eq!(a.series_len(), MAX_SERIES);
    assert_eq!(a.dropped, 5);
    // An existing series still counts.
    a.record(&call("s", "t0", 0, 1, "c", None));
    assert_eq!(a.series[&("s".to_string(), "t0".to_string(), 0)].calls, 2);
}

#[test]
fn failures_keep_the_newest_fifty_per_server_clipped() {
    let mut a = Aggregate::default();
    let long = "é".repeat(1000);
    for i in 0..60u64 {
        a.record(&call("s", "t", i, 1, "c", Some(&long)));
    }
    a.record(&call("other", "t", 99, 1, "c", Some("x")));
    let of_s: Vec<_> = a.failures.iter().filter(|f| f.server_id == "s").collect();
    assert_eq!(of_s.len(), FAILURES_PER_SERVER);
    assert_eq!(of_s[0].at_ms, 10);
    assert_eq!(of_s[0].message.chars().count(), MAX_MESSAGE_CHARS + 1);
    assert!(of_s[0].message.ends_with('…'));
    assert_eq!(clip("short", 300), "short");
}

#[test]
fn a_flush_upserts_minute_and_hour_rows_and_trims_failures() {
    let mut a = Aggregate::default();
    a.record(&call("s", "t", 3_600_000, 10, "alice", None));
    a.record(&call("s", "t", 3_660_000, 10, "bob", Some("bad")));
    let plan = a.flush_plan(None);
    assert_eq!(plan.len(), 4, "{plan:#?}");
    assert!(plan[0].sql.starts_with("INSERT INTO usage_minute"));
    assert!(plan[1].sql.starts_with("INSERT INTO usage_hour"));
    assert!(plan[2].sql.starts_with("INSERT INTO usage_failures"));
    assert!(plan[3].sql.starts_with("DELETE FROM usage_failures"));
    let Arg::Text(minutes) = &plan[0].args[0] else { panic!() };
    let minutes: Value = serde_json::from_str(minutes).unwrap();
    assert_eq!(minutes.as_array().unwrap().len(), 2);
    let Arg::Text(hours) = &plan[1].args[0] else { panic!() };
    let hours: Value = serde_json::from_str(hours).unwrap();
    // Both minutes fall in hour 3600: one row with both calls, both callers, one error.
    assert_eq!(hours.as_array().unwrap().len(), 1);
    assert_eq!(hours[0][2], 3600);
    assert_eq!((hours[0][3].as_u64(), hours[0][4].as_u64()), (Some(2), Some(1)));
    assert_eq!(hours[0][6].as_array().unwrap().len(), 2);
    assert_eq!(hours[0][8].as_array().unwrap().len(), BUCKETS);
    assert!(!plan[0].sql.contains("alice"), "values are bound, never spliced into SQL");
    // Every histogram column is added, not replaced.
    let sql = upsert_sql(Step::Hour);
    for i in 0..BUCKETS {
        assert!(sql.contains(&format!("h{i} = h{i} + excluded.h{i}")));
    }
}

#[test]
fn pruning_deletes_by_retention() {
    let mut a = Aggregate::default();
    a.record(&call("s", "t", 0, 1, "c", None));
    let plan = a.flush_plan(Some(100 * 86400));
    let prune: Vec<_> = plan
        .iter()
        .filter(|s| s.sql.starts_with("DELETE FROM usage_minute") || s.sql.starts_with("DELETE FROM usage_hour"))
        .collect();
    assert_eq!(prune.len(), 2);
    assert_eq!(prune[0].args, vec![Arg::Int(99 * 86400)]);
    assert_eq!(prune[1].args, vec![Arg::Int(70 * 86400)]);
    assert!(Aggregate::default().flush_plan(None).is_empty());
}

#[test]
fn failure_of_reads_errors_and_is_error_results() {
    assert_eq!(failure_of(&json!({"error": {"code": -32602, "message": "Unknown tool"}})), Some("Unknown tool".into()));
    let failed = json!({"result": {"isError": true, "content": [{"type": "text", "text": "backend said no"}]}});
    assert_eq!(failure_of(&failed), Some("backend said no".into()));
    assert_eq!(failure_of(&json!({"result": {"isError": false, "content": []}})), None);
    assert_eq!(failure_of(&json!({"result": {"task": {"taskId": "x"}}})), None);
}

#[test]
fn times_parse_as_epoch_seconds_or_rfc3339() {
    assert_eq!(parse_time("0"), Some(0));
    assert_eq!(parse_time("1764583200"), Some(1_764_583_200));
    assert_eq!(parse_time("2025-12-01T10:00:00Z"), Some(1_764_583_200));
    assert_eq!(parse_time("2025-12-01T10:00Z"), Some(1_764_583_200));
    assert_eq!(parse_time("2025-12-01T10:00:00.123Z"), Some(1_764_583_200));
    assert_eq!(parse_time("2025-12-01T12:00:00+02:00"), Some(1_764_583_200));
    assert_eq!(parse_time("2025-12-01T05:30:00-04:30"), Some(1_764_583_200));
    assert_eq!(parse_time("2024-02-29T00:00:00Z"), Some(1_709_164_800));
    for bad in [
        "",
        "yesterday",
        "-5",
        "1.5",
        "2025-02-29T00:00:00Z",
        "2025-12-01",
        "2025-12-01T25:00:00Z",
        "2025-12-01T10:00:00",
        "2025-12-01T10:00:00+2:00",
        "2025-13-01T00:00:00Z",
        "2025-12-01T10:00:00.Z",
    ] {
        assert_eq!(parse_time(bad), None, "{bad}");
    }
    for t in [0, 1_709_164_800, 1_764_583_200, 4_102_444_799] {
        assert_eq!(parse_time(&iso(t)), Some(t));
    }
    assert_eq!(iso(1_764_583_200), "2025-12-01T10:00:00Z");
}

#[test]
fn the_query_has_defaults_and_precise_errors() {
    let now = 1_764_583_230; // 2025-12-01T10:00:30Z
    let q = parse_query(&[], now).unwrap();
    assert_eq!((q.step, q.from, q.to, q.points()), (Step::Minute, 1_764_579_600, 1_764_583_260, 61));
    // In the first second of a minute, that minute (where a call just made was counted) is in.
    let q = parse_query(&[], 1_764_583_200).unwrap();
    assert_eq!((q.from, q.to, q.points()), (1_764_579_600, 1_764_583_260, 61));
    let q = parse_query(&pairs(&[("step", "hour")]), now).unwrap();
    assert_eq!((q.step, q.points()), (Step::Hour, 25));
    let q = parse_query(&pairs(&[("step", "hour")]), 1_764_583_200).unwrap();
    assert_eq!((q.to, q.points()), (1_764_586_800, 25));
    let err = |p: &[(&str, &str)]| parse_query(&pairs(p), now).unwrap_err();
    let BadField(field, msg) = err(&[("step", "day")]);
    assert_eq!((field, msg.as_str()), ("step", "must be minute or hour (got \"day\")"));
    let BadField(field, msg) = err(&[("from", "yesterday")]);
    assert_eq!(field, "from");
    assert!(msg.starts_with("must be epoch seconds or an ISO-8601 time"), "{msg}");
    assert_eq!(err(&[("to", "x")]).0, "to");
    let BadField(field, msg) = err(&[("from", "1764583230"), ("to", "1764583000")]);
    assert_eq!(field, "from");
    assert!(msg.contains("must be before to"), "{msg}");
    let BadField(field, msg) = err(&[("from", "2025-11-29T00:00:00Z")]);
    assert_eq!(field, "from");
    assert!(msg.contains("use step=hour"), "{msg}");
    assert!(parse_query(&pairs(&[("from", "2025-11-29T00:00:00Z"), ("step", "hour")]), now).is_ok());
    assert!(err(&[("from", "2025-10-01T00:00:00Z"), ("step", "hour")]).1.contains("30 days"));
    let BadField(field, msg) = err(&[("to", "2026-12-01T00:00:00Z"), ("from", "2025-12-01T09:00:00Z")]);
    assert_eq!(field, "to");
    assert!(msg.contains("at most 1440"), "{msg}");
}

#[test]
fn the_report_merges_rows_into_dense_series_and_totals() {
    let q = Query { from: 0, to: 180, step: Step::Minute };
    let mut a = Aggregate::default();
    a.record(&call("s", "t", 0, 10, "alice", None));
    a.record(&call("s", "t", 1_000, 100, "bob", Some("x")));
    a.record(&call("s", "u", 120_000, 1000, "alice", None));
    // Rows as D1 gives them back: through the flush's JSON.
    let rows: Vec<Row> = a
        .series
        .iter()
        .map(|((_, tool, bucket), s)| {
            let r = s.row("s", tool, *bucket);
            let mut o = json!({"tool": r[1], "bucket": r[2], "calls": r[3], "errors": r[4], "streamed": r[5], "callers": r[6].to_string(), "callers_full": r[7]});
            for (i, c) in r[8].as_array().unwrap().iter().enumerate() {
                o[format!("h{i}")] = c.clone();
            }
            Row::from_json(&o).unwrap()
        })
        .collect();
    let v = report(&q, &rows);
    assert_eq!(v["total"]["calls"], 3);
    assert_eq!(v["total"]["errors"], 1);
    assert_eq!(v["total"]["callers"], 2, "alice counted once across tools");
    assert_eq!(v["total"]["series"].as_array().unwrap().len(), 3);
    assert_eq!(v["total"]["series"][1]["calls"], 0);
    assert_eq!(v["total"]["series"][1]["p50_ms"], Value::Null);
    assert_eq!(v["total"]["series"][2]["t"], 120);
    assert_eq!(v["tools"][0]["tool"], "t");
    assert_eq!(v["tools"][0]["calls"], 2);
    assert_eq!(v["tools"][1]["tool"], "u");
    let (p50, p95) = (v["total"]["p50_ms"].as_f64().unwrap(), v["total"]["p95_ms"].as_f64().unwrap());
    assert!(p50 <= p95);
    assert_eq!(v["step"], "minute");
    assert_eq!(v["from_iso"], "1970-01-01T00:00:00Z");
}
