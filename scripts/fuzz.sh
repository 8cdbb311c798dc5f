#!/usr/bin/env bash
# Fuzzes Flowgate's pure core with cargo-fuzz (libFuzzer). Every target in fuzz/fuzz_targets/
# (what each checks: fuzz/src/lib.rs), FUZZ_JOBS at a time (default 2).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]          the long run: SECONDS each (default 600)
#   scripts/fuzz.sh --smoke [SECONDS] [TARGET...]  the smoke run of `make test`: SECONDS each
#                                                   (default 5), fixed seed, corpus read only
#
# `make fuzz` is the long run (FUZZ_SECONDS), `make test-fuzz` the smoke run (FUZZ_SMOKE_SECONDS).
# Both build every target first (a target that no longer builds fails the run), then replay the
# committed seeds of fuzz/corpus/<target>/ and mutate from there. A target that crashes, hangs
# on one input (-timeout) or is missing fails the run, and its panic is printed.
#
# The long run adds the inputs it finds to fuzz/generated/<target>/ (git-ignored), the smoke run
# to a temporary directory it deletes: fuzz/corpus/ only ever holds committed seeds, which
# `cargo test` replays too (tests/fuzz_corpus.rs). A crash is saved under fuzz/artifacts/<target>/;
# reproduce it with
#
#   fuzz/target/x86_64-unknown-linux-gnu/release/<target> fuzz/artifacts/<target>/crash-...
#
# and once fixed, commit it as fuzz/corpus/<target>/<descriptive-name> so it stays fixed.
#
# Builds are `cargo fuzz build -O` into fuzz/target (never the shared CARGO_TARGET_DIR: the
# sanitizer flags differ), with the fuzz crate's release profile deciding debug assertions
# (see fuzz/Cargo.toml for why -O). cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 unlocks
# them on the stable toolchain. cargo-fuzz itself is installed when missing.
# Environment: FUZZ_JOBS (targets run at once, default 2), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
CARGO_FUZZ_VERSION=0.13.2

SMOKE=false
if [ "${1:-}" = "--smoke" ]; then
    SMOKE=true
    shift
fi
if $SMOKE; then SECONDS_EACH="${1:-5}"; else SECONDS_EACH="${1:-600}"; fi
shift || true
case "$SECONDS_EACH" in
    '' | *[!0-9]* | 0) echo "usage: scripts/fuzz.sh [--smoke] [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
JOBS="${FUZZ_JOBS:-2}"
ALL_TARGETS=()
for f in fuzz/fuzz_targets/*.rs; do ALL_TARGETS+=("$(basename "$f" .rs)"); done
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
for t in "${TARGETS[@]}"; do
    [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "no fuzz target '$t' (have: ${ALL_TARGETS[*]})" >&2; exit 2; }
    [ -d "fuzz/corpus/$t" ] || { echo "fuzz target '$t' has no seed corpus fuzz/corpus/$t/" >&2; exit 2; }
done

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION (once, about two minutes)"
    # A temporary target directory of its own: not the project's, nor a shared one.
    env -u CARGO_TARGET_DIR cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --quiet
fi

export CARGO_TARGET_DIR="$PWD/fuzz/target"
if $SMOKE; then
    # The smoke run executes a few thousand inputs a target: unoptimized code builds in less than
    # half the CPU time, and the profile (not -Cdebug-assertions for every crate, as --dev would
    # add) still decides the assertions. Its own target directory keeps the long run's build.
    export CARGO_TARGET_DIR="$PWD/fuzz/target-smoke"
    export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
    # Without AddressSanitizer: the fuzzed core has no unsafe code, where ASan finds what Rust's
    # own checks do not, and the build takes a third less CPU (48 s of user time, not 68). The
    # long run keeps it, for the dependencies' unsafe code.
    SANITIZER=(-s none)
else
    SANITIZER=()
fi
BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"
echo "== building fuzz targets"
cargo fuzz build -O "${SANITIZER[@]}"
for t in "${TARGETS[@]}"; do
    [ -x "$BIN/$t" ] || { echo "fuzz target '$t' was not built: is it a [[bin]] of fuzz/Cargo.toml?" >&2; exit 1; }
done

# cargo-fuzz sets this for its runs: Rust's and the sanitizer's symbols are alike otherwise.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"
if $SMOKE; then
    LOGS=fuzz/generated/smoke-logs
    SCRATCH=$(mktemp -d)
    trap 'rm -rf "$SCRATCH"' EXIT
else
    LOGS=fuzz/generated/logs
fi
mkdir -p "$LOGS"

run_one() {
    local t="$1" new
    if $SMOKE; then new="$SCRATCH/$t"; else new="fuzz/generated/$t"; fi
    mkdir -p "$new" "fuzz/artifacts/$t"
    local flags=(-max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1
        -artifact_prefix="fuzz/artifacts/$t/")
    # The same mutations on every smoke run: a failure there is one anybody can repeat.
    if $SMOKE; then flags+=(-seed=1); fi
    # The first corpus directory receives new inputs; the committed seeds are only read. The
    # outer timeout is for a run that hangs outside any one input (libFuzzer's own exit).
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    timeout --kill-after=10 $((SECONDS_EACH + 120)) \
        "$BIN/$t" "$new" "fuzz/corpus/$t" "${flags[@]}" ${FUZZ_ARGS:-} >"$LOGS/$t.log" 2>&1
}

# One line a target: executions, coverage (edges), features, corpus size, and the result.
summary() {
    local t="$1" result="$2" log="$LOGS/$1.log"
    local runs last
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+.*cov:' "$log" | tail -n 1 || true)
    printf '== %-18s %-7s executions %-10s cov %-6s ft %-6s corp %s\n' "$t" "$result" "${runs:-?}" \
        "$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")" "$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")" \
        "$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")"
}

declare -A PIDS=()
FAILED=()
wait_for() {
    local t="$1"
    if wait "${PIDS[$t]}"; then
        summary "$t" ok
    else
        summary "$t" FAILED
        echo "   log: $LOGS/$t.log, crash input: fuzz/artifacts/$t/" >&2
        # What went wrong, without the stack: the panic, or libFuzzer's verdict.
        grep -E -A3 'panicked at|^==[0-9]+==ERROR|^SUMMARY|ALARM|out-of-memory|Test unit written' "$LOGS/$t.log" \
            | head -n 30 >&2 || true
        FAILED+=("$t")
    fi
    unset "PIDS[$t]"
}

if $SMOKE; then what="smoke run"; else what="fuzzing"; fi
echo "== $what: ${TARGETS[*]} for ${SECONDS_EACH}s each, $JOBS at a time (logs in $LOGS/)"
QUEUE=()
for t in "${TARGETS[@]}"; do
    run_one "$t" &
    PIDS[$t]=$!
    QUEUE+=("$t")
    if [ "${#QUEUE[@]}" -ge "$JOBS" ]; then
        wait_for "${QUEUE[0]}"
        QUEUE=("${QUEUE[@]:1}")
    fi
done
for t in "${QUEUE[@]}"; do
    wait_for "$t"
done

if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "fuzzing found problems in: ${FAILED[*]}" >&2
    exit 1
fi
echo "== no crashes"
