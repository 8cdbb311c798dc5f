#!/usr/bin/env bash
# Fuzzes Flowgate's pure core with cargo-fuzz (libFuzzer): every target in fuzz/fuzz_targets/
# for SECONDS each (default 600), two at a time. `make fuzz` runs this; `make fuzz FUZZ_SECONDS=60`
# passes a shorter time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 60 sse_parser
#
# Targets: jsonrpc_envelope, sse_parser, arguments, form_schema, url_guard (see fuzz/src/lib.rs
# for what each checks). To run one target by hand, from the repository root:
#
#   mkdir -p fuzz/generated/sse_parser
#   RUSTC_BOOTSTRAP=1 cargo fuzz run sse_parser fuzz/generated/sse_parser fuzz/corpus/sse_parser \
#       -- -max_total_time=600
#
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 unlocks them on the stable toolchain.
# Plain `cargo fuzz run sse_parser -- -max_total_time=600` works too, but then libFuzzer adds
# its finds to fuzz/corpus/sse_parser/ (fuzz/.gitignore keeps those SHA-1-named files out).
# New inputs the fuzzer finds go to fuzz/generated/<target>/ (git-ignored); fuzz/corpus/<target>/
# holds only the committed seeds, which `cargo test` replays (tests/fuzz_corpus.rs). A crash is
# saved under fuzz/artifacts/<target>/; reproduce it with
#
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/crash-...
#
# and once fixed, commit it as fuzz/corpus/<target>/<descriptive-name> so it stays fixed.
# Environment: FUZZ_JOBS (targets run at once, default 2), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1

SECONDS_EACH="${1:-600}"
shift || true
case "$SECONDS_EACH" in
    '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
JOBS="${FUZZ_JOBS:-2}"
ALL_TARGETS=(jsonrpc_envelope sse_parser arguments form_schema url_guard)
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
for t in "${TARGETS[@]}"; do
    [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "no fuzz target '$t' (have: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

echo "== building fuzz targets"
cargo fuzz build

LOGS=fuzz/generated/logs
mkdir -p "$LOGS"

run_one() {
    local t="$1"
    mkdir -p "fuzz/generated/$t"
    # The first corpus directory receives new inputs; the committed seeds are only read.
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    cargo fuzz run "$t" "fuzz/generated/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 ${FUZZ_ARGS:-} \
        >"$LOGS/$t.log" 2>&1
}

declare -A PIDS=()
FAILED=()
wait_for() {
    local t="$1"
    if wait "${PIDS[$t]}"; then
        echo "== $t: ok after ${SECONDS_EACH}s"
    else
        echo "== $t: FAILED (log: $LOGS/$t.log, crash inputs: fuzz/artifacts/$t/)"
        FAILED+=("$t")
    fi
    # libFuzzer's last status line and its final counters.
    grep -E '^#[0-9]+.*(DONE|cov:)' "$LOGS/$t.log" | tail -n 1 || true
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|^SUMMARY|panicked at' "$LOGS/$t.log" || true
    unset "PIDS[$t]"
}

echo "== fuzzing ${TARGETS[*]} for ${SECONDS_EACH}s each, $JOBS at a time (logs in $LOGS/)"
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
