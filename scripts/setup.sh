#!/usr/bin/env bash
# Installs what building and testing Flowgate needs, skipping whatever is already there:
# the wasm target, rust-src, worker-build, wasm-bindgen-cli at the version Cargo.lock pins, npm packages
# (wrangler, esbuild, binaryen's wasm-opt, Node 22, the MCP SDK and conformance suite), and for
# the tests Debian's chromium for the web console's browser test and virtualenvs with the MCP
# Python SDK 1.x and 2.x and LangChain's MCP adapters for the docs' snippets.
#
#   scripts/setup.sh               the build's tools (`make dev`, `make build`)
#   scripts/setup.sh --test-tools  what only the tests need (venvs, chromium, jq): `make test`
#                                  installs these while the Rust compiles, as neither needs the other
#   scripts/setup.sh --browser     both
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

WORKER_BUILD_VERSION=0.8.7

say() { echo "setup: $*" >&2; }

# What to install: the build's tools (BUILD), the tests' tools (TESTS).
case "${1:-}" in
  '') BUILD=true; TESTS=false ;;
  --test-tools) BUILD=false; TESTS=true ;;
  --browser) BUILD=true; TESTS=true ;;
  *) say "unknown option $1 (known: --test-tools, --browser)"; exit 2 ;;
esac

if $BUILD; then
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi

  # The standard library's source: scripts/build-wasm.sh compiles std with the Worker, for a
  # smaller bundle. Without it (rustup offline, say) the build uses the prebuilt std instead.
  if ! rustup component list --installed | grep -qx 'rust-src'; then
    say "adding the rust-src component (std built with the Worker, for size)"
    rustup component add rust-src || say "rust-src could not be added: the Worker is built with the prebuilt std (a larger bundle)"
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
fi
$TESTS || exit 0

# Python virtualenvs, each from a requirements.txt that pins every package with its hashes
# (resolved for CPython 3.11 from the requirements.in beside it): a fresh venv only when that
# file changed since the last install. PYTHON=/path/to/python3.x picks the interpreter.
#   .venv            the MCP Python SDK 1.x (tests/python/client.py, python-sdk.test.mjs)
#   .venv-sdk2       the MCP Python SDK 2.x (the docs' 2.x snippets, docs-snippets.test.mjs)
#   .venv-langchain  LangChain's MCP adapters (the README's LangChain snippet)
# Only with --test-tools or --browser (`make test`): a build (`wrangler deploy` runs `make build`)
# needs none of them.
python_venv() {
  local venv=$1 lock=$2 what=$3
  local pystamp=$venv/.flowgate-installed
  if [ ! -f "$pystamp" ] || ! cmp -s "$lock" "$pystamp" || ! "$venv/bin/python" -c '' 2>/dev/null; then
    local python=${PYTHON:-$(command -v python3.11 || command -v python3 || true)}
    if [ -z "$python" ] || ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      say "$what needs Python >= 3.10 (3.11 preferred): install it or set PYTHON=/path/to/python3.11"; exit 1
    fi
    say "installing $what into $venv ($("$python" --version 2>&1))"
    rm -f "$pystamp"
    "$python" -m venv --clear "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$lock"
    cp "$lock" "$pystamp"
  fi
}
python_venv .venv tests/python/requirements.txt "the MCP Python SDK 1.x"
python_venv .venv-sdk2 tests/python/sdk2/requirements.txt "the MCP Python SDK 2.x"
python_venv .venv-langchain tests/python/langchain/requirements.txt "LangChain's MCP adapters"

# The web console's browser test drives Debian's chromium with playwright-core (no browser is
# downloaded at run time). With --test-tools (`make test`; not `make dev`), installed with apt when
# missing (CI runs as root).
if [ ! -x /usr/bin/chromium ]; then
  say "installing Debian's chromium (for tests/integration/console-ui.test.mjs)"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium
fi

# The docs' snippets (tests/integration/docs-snippets.test.mjs) use curl and jq, as a reader would.
if ! command -v jq >/dev/null; then
  say "installing jq (for the docs' snippets)"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends jq curl
fi
