# Flowgate: `make dev` runs it locally, `make test` runs every test. Both set up what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PORT ?= 8787

export PATH := $(HOME)/.cargo/bin:$(PATH)
export WRANGLER_SEND_METRICS := false
# V8's code cache for every node process make starts (wrangler's 10 MB CLI, the conformance
# CLI, the test files): a wrangler start parses and compiles it in 0.75 s of CPU instead of 0.93,
# and the tests start wrangler and those CLIs a few hundred times.
export NODE_COMPILE_CACHE ?= $(CURDIR)/node_modules/.cache/node-compile-cache

# wrangler 4 needs Node >= 22.12; setup installs Node 22 from npm.
NODE22 := node_modules/node/bin/node
WRANGLER := $(NODE22) node_modules/wrangler/bin/wrangler.js
# worker/stored-json.mjs, url.mjs and http.mjs are imported by the Rust code (wasm-bindgen bundles them with the wasm glue).
SOURCES := $(shell find src -name '*.rs') Cargo.toml Cargo.lock wasm/Cargo.toml wasm/lib.rs worker/stored-json.mjs worker/url.mjs worker/http.mjs
CONSOLE_SOURCES := $(shell find console -type f)

.PHONY: help setup setup-browser build dev test test-core test-integration test-fixtures schema check-schema clean

help:
	@echo "make dev [PORT=8787]   build and serve Flowgate locally (wrangler dev, local D1/KV)"
	@echo "make test              run every test (core, schema, fuzz smoke, fixtures, integration)"
	@echo "make fuzz              fuzz every target for FUZZ_SECONDS (600) each (docs/fuzzing.md)"

setup:
	@scripts/setup.sh

# setup, and what only the tests need: Debian's chromium for the web console's browser test
# (tests/integration/console-ui.test.mjs), the Python SDK 2.x and LangChain venvs for the docs' snippets.
setup-browser:
	@scripts/setup.sh --browser

build: setup build/index.js dist/console/index.html worker/console-files.mjs

# The cdylib is the `wasm` crate (see wasm/Cargo.toml), built by scripts/build-wasm.sh: std
# compiled with it for size when rust-src is there, and the wasm name section dropped (~13% of
# the gzip bundle).
build/index.js: $(SOURCES) scripts/build-wasm.sh scripts/strip-wasm-names.mjs scripts/order-wasm-functions.mjs scripts/shorten-wasm-imports.mjs scripts/wasm-module.mjs
	scripts/build-wasm.sh build

# The web console: static assets in dist/ (wrangler.toml [assets]), not in the wasm.
dist/console/index.html worker/console-files.mjs &: $(CONSOLE_SOURCES) scripts/build-console.mjs
	$(NODE22) scripts/build-console.mjs

.dev.vars:
	cp .dev.vars.example .dev.vars

# With DEMO=true in .dev.vars, scripts/demo-setup.mjs waits for the Worker in the background,
# creates (or finds) the demo apps and server, and prints the MCP URL and the console URL.
# wrangler.dev.toml is wrangler.toml run through scripts/dev-config.mjs: worker/dev.mjs as the
# entry, and no local asset router in front of every request (the script says why).
dev: build .dev.vars wrangler.dev.toml
	CI=true $(WRANGLER) d1 migrations apply DB --local -c wrangler.dev.toml
	$(NODE22) scripts/demo-setup.mjs --url http://127.0.0.1:$(PORT) & \
	$(WRANGLER) dev -c wrangler.dev.toml --local --ip 127.0.0.1 --port $(PORT)

wrangler.dev.toml: wrangler.toml scripts/dev-config.mjs
	$(NODE22) scripts/dev-config.mjs > $@

# schema.sql is every migration in order: what a fresh database holds.
schema: schema.sql
schema.sql: $(wildcard migrations/*.sql) scripts/schema.sh
	scripts/schema.sh > $@

check-schema:
	@scripts/schema.sh | cmp -s - schema.sql || { echo "schema.sql is out of date with migrations/: run 'make schema'"; exit 1; }

test-core:
	cargo fmt --check
	$(NODE22) scripts/check-cycles.mjs
	cargo test

# A test that hangs fails after TEST_TIMEOUT_MS with its name; a file whose tests are done
# exits even if something it started is still open (--test-force-exit: a file whose `before`
# failed used to keep its fixture servers, and the run, alive for ever); and the whole run ends
# within INTEGRATION_TIMEOUT seconds whatever happens, so CI always gets a report.
TEST_TIMEOUT_MS ?= 300000
INTEGRATION_TIMEOUT ?= 1800
# Flowgate's tests (tests/integration) and the tests of the fixtures themselves (tests/fixtures:
# the fakes and the harness the integration tests stand on) run as two steps, each with its own
# totals and its own PASS/FAIL line; both always run, and either failing fails the target. Only
# this full run writes the conformance outcomes (CONFORMANCE_WRITE=1: tests/conformance/results/
# and docs/conformance.md); a run of one file, filtered or not, leaves them as they are.
# The slowest files first, by the wall times the last runs printed (tests/support/file-times.mjs;
# 2026-12-05, the machine loaded by other builds: conformance 133 s, conformance-tasks 120 s,
# docs-snippets 77 s, upstream-mcp 67 s (its 60 s KV TTL), conformance-input-required 56 s, then
# 48 to 36 s; every other file 34 s or less): started last, one of them would end the run alone
# while the other slots stand idle. upstream-mcp mostly waits, so it starts beside two that work.
SLOW_FIRST := $(patsubst %,tests/integration/%.test.mjs,conformance-client conformance conformance-tasks upstream-mcp docs-snippets \
	conformance-input-required tasks everything mcp-stream hardening console-playground python-sdk conformance-relay client-oauth)
INTEGRATION_FILES := $(SLOW_FIRST) $(filter-out $(SLOW_FIRST),$(sort $(wildcard tests/integration/*.test.mjs)))
# Three files at a time on two cores: the integration files mostly wait (on TTLs, expiries, polls
# and fixtures), so the run used under half the machine's CPU with two (320 s); with three it
# averages 1.66 of the 2 cores (246-276 s), and four, CPU-bound, was no faster (241 s in the
# tree). A clean-clone run had a file hang at three and one at four (docs/testing.md); a file
# stopped at its limit now names the test it was in.
TEST_CONCURRENCY ?= 3
# tests/support/run-tests.mjs is `node --test` (spec reporter, --test-force-exit) that starts
# the files in the order given (`node --test` sorts them by name, so SLOW_FIRST did nothing) and
# prints, after the totals, each file's wall time, slowest first, with when it started and
# ended (tests/support/file-times.mjs): the run's critical path.
# $(call RUN_TESTS,N): N files at a time.
RUN_TESTS = timeout --kill-after=30 $(INTEGRATION_TIMEOUT) $(NODE22) tests/support/run-tests.mjs \
	  --concurrency=$(1) --timeout=$(TEST_TIMEOUT_MS)
NODE_TEST = $(call RUN_TESTS,$(TEST_CONCURRENCY))
FIXTURE_FILES := $(sort $(wildcard tests/fixtures/*.test.mjs))
# The fixture controls run beside the integration files, two at a time (about 40 s of file
# time, mostly waiting), their report printed after the integration files' own.
test-integration: build setup-browser
	@fixtures=PASS; flowgate=PASS; log=$$(mktemp); \
	$(call RUN_TESTS,2) $(FIXTURE_FILES) >"$$log" 2>&1 & controls=$$!; \
	CONFORMANCE_WRITE=1 $(NODE_TEST) $(INTEGRATION_FILES) || flowgate=FAIL; \
	wait $$controls || fixtures=FAIL; \
	echo; echo "== the fixture controls (tests/fixtures):"; cat "$$log"; rm -f "$$log"; \
	echo "fixture tests (tests/fixtures): $$fixtures"; \
	echo "Flowgate integration tests (tests/integration): $$flowgate"; \
	[ $$fixtures = PASS ] && [ $$flowgate = PASS ]

test-fixtures: build
	$(NODE_TEST) $(FIXTURE_FILES)

# The host half (cargo test, then the fuzz smoke run) and the wasm build run side by side: cargo
# takes its jobs from make's jobserver, so together they use the machine's cores without
# oversubscribing them, and one's serial stretches (linking, LTO, wasm-opt) fill the other's
# idle core. The integration tests start once both are done, on a quiet machine.
TEST_JOBS ?= 2
# What only the tests need (Python venvs, chromium, jq: `setup.sh --test-tools`, mostly
# downloads and unpacking) is installed beside the compile, its output shown when it is done.
test: check-schema
	@scripts/setup.sh
	@log=$$(mktemp); scripts/setup.sh --test-tools >"$$log" 2>&1 & tools=$$!; \
	$(MAKE) -j$(TEST_JOBS) --output-sync=line test-host build; rc=$$?; \
	wait $$tools || { echo "setup of the tests' tools failed:"; rc=1; }; \
	cat "$$log"; rm -f "$$log"; exit $$rc
	$(MAKE) test-integration

.PHONY: test-host
test-host:
	$(MAKE) test-core
	$(MAKE) test-fuzz

clean:
	rm -rf build dist target/wasm32-unknown-unknown

# Fuzzing (cargo-fuzz on stable via RUSTC_BOOTSTRAP; scripts/fuzz.sh installs it when missing):
# `make fuzz` runs each target for FUZZ_SECONDS, two at a time; `make test-fuzz` (part of
# `make test`) builds every target and runs each for FUZZ_SMOKE_SECONDS with a fixed seed over
# its committed corpus, so a target that crashes or no longer builds fails the tests. See
# scripts/fuzz.sh for one target, docs/fuzzing.md for what each covers and the last long run.
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 3
.PHONY: fuzz test-fuzz
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

test-fuzz:
	scripts/fuzz.sh --smoke $(FUZZ_SMOKE_SECONDS)

# Benchmarks: Flowgate against a peer Worker written with the official MCP TypeScript SDK
# (bench/peer), both under `wrangler dev --local`, loaded with wrk (installed from Debian when
# missing). A few minutes; prints one table and writes bench/results/latest.md. Not part of
# `make test`.
.PHONY: bench bench-hello
bench: build bench-hello
	$(NODE22) bench/run.mjs

# The hello-world workers-rs Worker the benchmarks load beside Flowgate (bench/hello-rs), built
# with the Worker's toolchain into bench/hello-rs/build/ (a no-op when that is up to date).
bench-hello: setup
	bench/hello-rs/build.sh

# Where the Worker's CPU goes per request: V8's sampling profiler through the Worker's inspector,
# on a build that keeps wasm function names (built into target/named/, not build/), self time
# per function. PROFILE_KIND=tools/list|tools/call|tools/call-stream|healthz; PROFILE_MODE=cpu for CPU per request
# only (bench/profile.mjs says more). Not part of `make test`.
.PHONY: profile
profile: setup
	scripts/build-wasm.sh target/named --keep-names
	PROFILE_BUILD=target/named $(NODE22) bench/profile.mjs

# Worker CPU per request of this checkout's build, loaded at once with the SDK peer, the floor,
# the hello-world workers-rs Worker and, with COMPARE_WITH=<checkout with its build/ made>,
# another build: whether a change saves CPU, and how far from the floor (bench/compare.mjs;
# COMPARE_ENTRIES=deployed,dev also runs it as `make dev` does).
.PHONY: compare
compare: build bench-hello
	$(NODE22) bench/compare.mjs
