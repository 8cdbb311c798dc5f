#!/usr/bin/env bash
# Builds the Worker (worker-build on the `wasm` crate) into OUT_DIR (relative to the repository,
# or absolute).
#
#   scripts/build-wasm.sh OUT_DIR [--keep-names]
#
# When the toolchain has rustup's rust-src (scripts/setup.sh adds it), the standard library is
# compiled with the Worker instead of linked prebuilt (cargo's build-std, an unstable cargo
# feature, enabled here with RUSTC_BOOTSTRAP for this build only), so that:
#   - std and core are built for size (optimize_for_size) and LTO'd with Flowgate;
#   - a panic aborts at once (-Cpanic=immediate-abort): no panic message formatting, no
#     locations, no hook. Flowgate's request paths answer errors rather than panic (no
#     unwrap or expect in src/shell); a panic would end the isolate with "RuntimeError:
#     unreachable" instead of its message.
# Together 39 KiB less gzip bundle (506 → 467 KiB for the wasm at the time), and no slower in
# alternating CPU runs. Without rust-src the prebuilt std is used and the bundle is that much
# larger; FLOWGATE_PREBUILT_STD=1 asks for that build.
#
# --keep-names keeps the wasm name section (function names in profiles and stack traces);
# otherwise it is removed, about a seventh of the gzip bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# worker-build would download these; use the ones setup installs.
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt"

out=${1:?usage: scripts/build-wasm.sh OUT_DIR [--keep-names]}
keep_names=${2:-}

if [ -z "${FLOWGATE_PREBUILT_STD:-}" ] && [ -d "$(rustc --print sysroot)/lib/rustlib/src/rust/library/std" ]; then
  export RUSTC_BOOTSTRAP=1
  export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
  export CARGO_UNSTABLE_BUILD_STD_FEATURES=optimize_for_size
  # Only the wasm target gets these: with --target, cargo keeps RUSTFLAGS off build scripts.
  # A rustc without the immediate-abort strategy (it came in late 2025) keeps panic=abort.
  if rustc -Zunstable-options -Cpanic=immediate-abort --print cfg --target wasm32-unknown-unknown >/dev/null 2>&1; then
    export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Zunstable-options -Cpanic=immediate-abort"
  fi
else
  echo "build-wasm: building with the prebuilt std (no rust-src, or FLOWGATE_PREBUILT_STD): a larger bundle" >&2
fi

case "$keep_names" in
  --keep-names | "") ;;
  *) echo "build-wasm: unknown option $keep_names" >&2; exit 2 ;;
esac

mkdir -p "$out"
out=$(cd "$out" && pwd)
worker-build --release --out-dir "$out" wasm

# The functions reordered so that look-alikes sit together for gzip (scripts/order-wasm-functions.mjs:
# about 15 KiB less gzip bundle), and wasm-opt's -Oz once more on the result (about 1 KiB). The
# flags are wasm/Cargo.toml's, which worker-build's own wasm-opt run used.
node=node_modules/node/bin/node
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$node scripts/order-wasm-functions.mjs keys "$out/index_bg.wasm" "$work/keyed.wasm" "$work/names.json"
"$WASM_OPT_BIN" "$work/keyed.wasm" -Oz --low-memory-unused --enable-bulk-memory --enable-nontrapping-float-to-int \
  --reorder-functions-by-name --debuginfo -o "$out/index_bg.wasm"
if [ "$keep_names" = --keep-names ]; then
  $node scripts/order-wasm-functions.mjs names "$out/index_bg.wasm" "$work/names.json"
else
  $node scripts/strip-wasm-names.mjs "$out/index_bg.wasm"
  # Short import names (scripts/shorten-wasm-imports.mjs): about 3 KB less gzip wasm and 2 KB
  # less gzip glue. A build that keeps names keeps wasm-bindgen's, which say what each import is.
  $node scripts/shorten-wasm-imports.mjs "$out"
fi
