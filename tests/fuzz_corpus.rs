//! Replays every committed fuzz corpus file (fuzz/corpus/<target>/*) through the same function
//! the fuzz target runs, so the seeds and the reproducers of fixed bugs stay green on every
//! `cargo test`, without a nightly toolchain or libFuzzer. To fuzz, see scripts/fuzz.sh.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "../fuzz/src/lib.rs"]
mod fuzz_targets;

/// A fuzz target's name (its corpus directory) and what it does with one input.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 11] = [
    ("jsonrpc_envelope", fuzz_targets::jsonrpc_envelope),
    ("sse_parser", fuzz_targets::sse_parser),
    ("arguments", fuzz_targets::arguments),
    ("form_schema", fuzz_targets::form_schema),
    ("url_guard", fuzz_targets::url_guard),
    ("oauth_jwt", fuzz_targets::oauth_jwt),
    ("sealed_ids", fuzz_targets::sealed_ids),
    ("list_cursor", fuzz_targets::list_cursor),
    ("uri_template", fuzz_targets::uri_template),
    ("param_headers", fuzz_targets::param_headers),
    ("console_bodies", fuzz_targets::console_bodies),
];

fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8])) {
    let files = corpus_files(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target} has no seeds");
    for file in files {
        let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Name the input that failed; the panic itself says what went wrong.
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target}: {} panicked (see above)", file.display());
    }
}

#[test]
fn jsonrpc_envelope_corpus() {
    replay(TARGETS[0].0, TARGETS[0].1);
}

#[test]
fn sse_parser_corpus() {
    replay(TARGETS[1].0, TARGETS[1].1);
}

#[test]
fn arguments_corpus() {
    replay(TARGETS[2].0, TARGETS[2].1);
}

#[test]
fn form_schema_corpus() {
    replay(TARGETS[3].0, TARGETS[3].1);
}

#[test]
fn url_guard_corpus() {
    replay(TARGETS[4].0, TARGETS[4].1);
}

#[test]
fn oauth_jwt_corpus() {
    replay(TARGETS[5].0, TARGETS[5].1);
}

#[test]
fn sealed_ids_corpus() {
    replay(TARGETS[6].0, TARGETS[6].1);
}

#[test]
fn list_cursor_corpus() {
    replay(TARGETS[7].0, TARGETS[7].1);
}

#[test]
fn uri_template_corpus() {
    replay(TARGETS[8].0, TARGETS[8].1);
}

#[test]
fn param_headers_corpus() {
    replay(TARGETS[9].0, TARGETS[9].1);
}

#[test]
fn console_bodies_corpus() {
    replay(TARGETS[10].0, TARGETS[10].1);
}

/// Every fuzz target (a file of fuzz/fuzz_targets/, a [[bin]] of fuzz/Cargo.toml) is replayed
/// here: a target added without its corpus and replay, or left out of the fuzz build, fails.
#[test]
fn every_fuzz_target_is_built_and_replayed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut files: Vec<String> = fs::read_dir(root.join("fuzz_targets"))
        .expect("fuzz/fuzz_targets")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8 name"))
        .filter_map(|n| n.strip_suffix(".rs").map(String::from))
        .collect();
    files.sort();
    let mut replayed: Vec<String> = TARGETS.iter().map(|(t, _)| t.to_string()).collect();
    replayed.sort();
    assert_eq!(files, replayed, "fuzz/fuzz_targets/ and the TARGETS replayed here differ");
    for t in &files {
        let bin = format!("[[bin]]\nname = \"{t}\"\npath = \"fuzz_targets/{t}.rs\"");
        assert!(manifest.contains(&bin), "fuzz/Cargo.toml has no [[bin]] for {t}");
    }
}

/// Every target directory is replayed, and nothing else sits in fuzz/corpus unreplayed.
#[test]
fn every_corpus_directory_has_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for entry in fs::read_dir(&root).expect("fuzz/corpus") {
        let name = entry.expect("entry").file_name().into_string().expect("utf-8 name");
        assert!(TARGETS.iter().any(|(t, _)| *t == name), "fuzz/corpus/{name} is replayed by no test");
    }
}

/// The fixed app body of the form_schema target is valid with an empty form, so a rejection
/// there can only come from the form.
#[test]
fn form_schema_baseline_app_is_valid() {
    let body = serde_json::json!({"name": "x", "mode": "workflow",
                                  "backend": {"base_url": "http://x/v1", "api_key": "k"}, "user_input_form": []});
    assert!(flowgate::pure::app::validate_app(&body, None).is_ok());
}

/// The fixed server's tools are the ones the seeds name.
#[test]
fn fixed_servers_have_the_seeded_tools() {
    let def = fuzz_targets::server_definition();
    let names: Vec<String> = flowgate::pure::mcp::tools::tools(&def).iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["Summariser", "Agent"]);
    let (def, upstreams) = fuzz_targets::server_with_upstream();
    let names: Vec<String> =
        flowgate::pure::mcp::tools::tools_with(&def, &upstreams).iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["Summariser", "Agent", "Upstream_search", "Upstream_submit"]);
}
