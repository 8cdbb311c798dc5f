#!/usr/bin/env bash
# Installs what building and testing Flowgate needs, skipping whatever is already there:
# the wasm target, worker-build, wasm-bindgen-cli at the version Cargo.lock pins, npm packages
# (wrangler, esbuild, binaryen's wasm-opt, Node 22, the MCP SDK and conformance suite).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

WORKER_BUILD_VERSION=0.8.7

say() { echo "setup: $*" >&2; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(worker-build --version 2>/dev/null)" != "$WORKER_BUILD_VERSION" ]; then
  say "installing worker-build $WORKER_BUILD_VERSION"
  cargo install --quiet worker-build --version "$WORKER_BUILD_VERSION"
fi

# The CLI must equal the wasm-bindgen library in Cargo.lock (pinned with = in Cargo.toml).
bindgen_version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [ -z "$bindgen_version" ]; then
  say "cannot read the wasm-bindgen version from Cargo.lock"; exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $bindgen_version" ]; then
  say "installing wasm-bindgen-cli $bindgen_version (takes a few minutes once)"
  cargo install --quiet wasm-bindgen-cli --version "$bindgen_version" --force
fi

# npm ci only when package-lock.json changed since the last install.
stamp=node_modules/.flowgate-installed
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  say "installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
