#!/usr/bin/env bash
# Builds the hello-world workers-rs Worker into bench/hello-rs/build/ with the toolchain of the
# Worker's own build (scripts/build-wasm.sh: worker-build with the local wasm-bindgen, esbuild and
# wasm-opt; std built with it for size, panics that abort at once, the name section dropped), so
# that the two differ only in what their code does. `make bench-hello` runs it; a no-op when the
# build is newer than its sources.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export ESBUILD_BIN="$root/node_modules/.bin/esbuild"
export WASM_OPT_BIN="$root/node_modules/.bin/wasm-opt"
export CARGO_NET_OFFLINE=true

if [ -f "$here/build/index.js" ] && [ -z "$(find "$here/src" "$here/Cargo.toml" "$here/Cargo.lock" "$0" -newer "$here/build/index.js" | head -1)" ]; then
  exit 0
fi
if [ -z "${FLOWGATE_PREBUILT_STD:-}" ] && [ -d "$(rustc --print sysroot)/lib/rustlib/src/rust/library/std" ]; then
  export RUSTC_BOOTSTRAP=1
  export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
  export CARGO_UNSTABLE_BUILD_STD_FEATURES=optimize_for_size
  if rustc -Zunstable-options -Cpanic=immediate-abort --print cfg --target wasm32-unknown-unknown >/dev/null 2>&1; then
    export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Zunstable-options -Cpanic=immediate-abort"
  fi
fi
cd "$here"
worker-build --release --out-dir "$here/build" .
"$root/node_modules/node/bin/node" "$root/scripts/strip-wasm-names.mjs" "$here/build/index_bg.wasm"
