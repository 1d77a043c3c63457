# workerwatch: `make run` to see it work, `make test` to prove it.
# `make run` needs only Go. `make test` (and `make e2e`, `make check-configs`)
# first runs scripts/install-test-deps.sh (`make deps`), which installs what
# the tests need beyond Go (prometheus, chromium, wrk, node, a Jaeger build,
# the examples' npm packages) and skips what is there.

SHELL      := /bin/bash
GO         ?= go
BIN        := $(CURDIR)/bin
CACHE      ?= $(HOME)/.cache/workerwatch
COLLECTOR  := $(BIN)/otelcol-workerwatch
SIM        := $(BIN)/workersim
# mdatagen for collector v0.165 is not served; v0.155.0 is, and its output
# compiles against v0.165. It cannot be a tool of this module (it would pull
# old collector modules in), so it is built in a scratch module in $(CACHE).
MDATAGEN_VERSION := v0.155.0
MDATAGEN   := $(CACHE)/mdatagen-$(MDATAGEN_VERSION)/mdatagen
# golangci-lint v2 (.golangci.yml), built once in a scratch module in $(CACHE)
# for the same reason: as a tool of this module it would move the
# collector's dependencies.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
# Components with a metadata.yaml, whose internal/metadata is generated.
METADATA   := $(wildcard receiver/*/metadata.yaml processor/*/metadata.yaml extension/*/metadata.yaml)
# What `make generate` writes; `make check-generate` fails if it changes any.
GENERATED  := $(addprefix cmd/otelcol-workerwatch/,main.go main_others.go main_windows.go components.go) \
	$(foreach d,$(dir $(METADATA)),$(d)internal/metadata $(d)internal/metadatatest \
		$(d)generated_component_test.go $(d)generated_package_test.go $(d)documentation.md)

.PHONY: slow-clients scale-figures all build run deps tools test lint vet cross cross-link unit-build fmt-check check-generate generate unit e2e check-configs bench fuzz soak flood overhead clean

all: build

# telemetrygen (the e2e suite's trace load) is a tool of this module: built
# in the same `go build` as the collector, it compiles 9 packages of its own
# and shares the other 475 with the collector (`go list -deps` of both,
# compared with comm); built on its own, in a scratch module at its own
# versions with -trimpath, it compiled every package again on a fresh machine.
build:
	$(GO) build -o $(BIN)/ ./cmd/otelcol-workerwatch ./cmd/workersim \
		github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen

# Collector with the built-in default config + a fleet of six simulated
# workers (two healthy, one leak, one hang, one drop-claims, one timeout).
run: build
	@scripts/run.sh "$(COLLECTOR)" "$(SIM)"

# The stages of `make test` (scripts/test.sh): deps and build side by side,
# then e2e with the checks beside it at low CPU priority (tools, cross,
# fmt-check, lint, check-generate, unit-build), then unit and check-configs.
# Each stage's time is printed as "make test: STAGE N s", the figures of
# docs/results/ci-runs.md.
test:
	@scripts/test.sh

# The Go tools `make test` builds from source, each once per version.
tools: $(GOLANGCI_LINT) $(MDATAGEN)

# What the tests need beyond Go; idempotent, quick when all is there. Its
# installs overlap (scripts/install-test-deps.sh).
deps:
	@scripts/install-test-deps.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...

# The distribution builds for macOS and Windows too: the Linux-only code (the
# worker_process receiver's /proc reader and proc connector, the simulator)
# sits behind build tags; elsewhere the receiver's Start reports the platform
# as unsupported. For each OS, `make cross` type-checks every package of the
# module and its tests, with every dependency, from source
# (internal/tools/typecheck), naming each error's file and line as `go build`
# does. It compiles nothing: compiling for another OS (`go build`, `go list
# -export`) compiles the whole dependency graph once more: 305 s of a fresh
# 2-core machine's run, against 18 s for the type-check with the tests
# (docs/results/ci-runs.md, fifth stop). This module has no cgo or assembly
# whose build a type-check would miss.
# `make cross-link` compiles and links the commands for darwin and windows
# (`go build ./...`), for a release or a change that touches linking (cgo,
# //go:linkname).
# Vet runs on Linux only (`make vet`): vetting per OS compiled every test
# dependency again for each OS, 394 s of a 1,747 s cold windows stage on the
# loaded 2-core machine (docs/results/ci-runs.md), to check the few per-OS
# stub files the type-check covers. The e2e suite, tag e2e, drives Linux
# process trees and is built for Linux only.
# `make test` checks windows only: every file of this module with a build
# constraint is `linux`, `!linux`, `windows` or `!windows`, so windows
# type-checks each non-Linux file there is.
# `make cross CROSS_GOOS="darwin windows"` checks both.
CROSS_GOOS ?= windows
cross:
	@$(GO) build -o $(BIN)/typecheck ./internal/tools/typecheck
	@for os in $(CROSS_GOOS); do GOOS=$$os $(BIN)/typecheck -test ./... || exit 1; done

cross-link:
	@for os in darwin windows; do echo "cross-link: GOOS=$$os"; \
		GOOS=$$os $(GO) build ./... || exit 1; done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The linters of .golangci.yml (close to contrib's); zero findings. Another
# run on the machine (another checkout) is waited for, not a failure.
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run --allow-serial-runners ./...

$(GOLANGCI_LINT):
	mkdir -p $(dir $@)
	cd $(dir $@) && { [ -f go.mod ] || $(GO) mod init golangci-lint-tool >/dev/null 2>&1; } && \
		GOFLAGS=-mod=mod $(GO) get -tool github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) && \
		$(GO) build -trimpath -ldflags="-s -w" -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# The unit tests, in two passes. The first, with -race, is every package but
# the distribution's command (it links every component) and leaves out the
# test files built `!race`: the few that drive a peer component (the
# loadbalancing exporter's ring, the Prometheus exporter, a whole collector,
# the hostmetrics scraper). With them the -race build took in a Kubernetes
# client, cloud SDKs and Prometheus, 1,591 packages compiled a second time
# for no race in this module's code; without them, about 700 (`go list -deps`,
# docs/results/ci-runs.md, fifth stop). The second pass, without -race, runs
# the command's tests and every Test in a `!race` file, against the packages
# the binary's build compiled.
# -vet=off: `make vet` (a stage before, in `make test`) ran every vet
# check on the same packages; go test's own subset would run them again.
# The collector binary is built first (the e2e stage needs it too) and the
# distribution's tests run it rather than link their own
# (WORKERWATCH_COLLECTOR_BIN).
# -ldflags=-w: no DWARF in the test binaries (a failing test's stack trace
# needs none); each of the ~40 test binaries is linked on every run (links
# are not cached), and -w cut a race-built link by a third (12.2 -> 6.9 s,
# 8.2 -> 5.4 s for the processor's, `go test -race -c` side by side).
RACE_PKGS    = $(filter-out %/cmd/otelcol-workerwatch,$(shell $(GO) list ./...))
NORACE_FILES = $(shell grep -l '^//go:build.*!race' $$(git ls-files '*_test.go'))
NORACE_TESTS = $(shell grep -ho '^func Test[A-Za-z0-9_]*' $(NORACE_FILES) | cut -c6- | paste -sd'|')
NORACE_PKGS  = ./cmd/otelcol-workerwatch/ $(sort $(foreach f,$(NORACE_FILES),$(if $(shell grep -l '^func Test' $(f)),./$(dir $(f)))))
UNIT_FLAGS   = -count=1 -vet=off -ldflags=-w
unit: build
	WORKERWATCH_COLLECTOR_BIN=$(COLLECTOR) $(GO) test -race $(UNIT_FLAGS) $(RACE_PKGS)
	WORKERWATCH_COLLECTOR_BIN=$(COLLECTOR) $(GO) test $(UNIT_FLAGS) ./cmd/otelcol-workerwatch/
	WORKERWATCH_COLLECTOR_BIN=$(COLLECTOR) $(GO) test $(UNIT_FLAGS) -run '^($(NORACE_TESTS))$$' $(filter-out ./cmd/otelcol-workerwatch/,$(NORACE_PKGS))

# The unit tests' packages compiled as `make unit` builds them, neither linked
# nor run (`go list -export` compiles each package and caches it; links are
# not cached): `make test` does this beside e2e at low priority, so that
# `make unit` after it only links and runs.
unit-build:
	$(GO) list -race -test -export $(RACE_PKGS) >/dev/null
	$(GO) list -test -export $(NORACE_PKGS) >/dev/null

# End-to-end through the real binary with real Prometheus, Jaeger
# and the Node.js example (`make deps` installs them).
# The whole log is kept in $(CACHE)/e2e.log; the summary is printed, line by
# line (`make test` prints the checks' lines beside it).
# Scenarios that bound latency or count events run first, alone; the others
# (parallel(t, ...)) then run side by side, up to E2E_PARALLEL at once, the
# longest first (e2e/slots_test.go: the suite's own slots, so go test's
# -parallel is set out of their way). The presets' scenarios mostly wait on
# their systems (Redis, Celery, the OpenFn engine, Lightning), so more than
# GOMAXPROCS (docs/results/ci-runs.md, fourth stop: the suite beside two busy
# loops, load average 29).
E2E_PARALLEL ?= 12
e2e: deps build
	@mkdir -p $(CACHE)
	@E2E_PARALLEL=$(E2E_PARALLEL) $(GO) test -tags e2e -count=1 -timeout 45m -parallel 256 -v ./e2e/... 2>&1 | tee $(CACHE)/e2e.log | \
		grep --line-buffered -E '^\s*(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:|_test.go:[0-9]+:' ; exit $${PIPESTATUS[0]}

# (testdata/bad-*.yaml are refused with their exact errors by
# cmd/otelcol-workerwatch/badconfig_test.go.)
# Every collector config shipped is valid for the real binary (with the
# environment the deploy/ manifests set), and the
# Prometheus rules load and pass their unit tests.
# An *.overlay.yaml is valid merged onto the shipped config it names on its
# first line ("# overlay of deploy/collector/X.yaml [and Y.yaml]").
CONFIG_ENV := GATEWAY_ENDPOINT=gateway:4317 TRACES_ENDPOINT=tempo:4317 LOGS_ENDPOINT=http://loki:3100/otlp \
	K8S_NODE_NAME=node-a POD_NAME=worker-0 WORKERWATCH_SELF=gw-1.example.internal:4317 WORKERWATCH_API_TOKEN=t0ken WORKERWATCH_HEALTH_ENDPOINT=127.0.0.1:0
check-configs: deps build
	@for f in config.yaml $$(git ls-files 'deploy/collector/*.yaml' 'testdata/*.yaml' 'e2e/testdata/*.yaml' 'presets/*/collector.yaml' | grep -v '/bad-' | grep -v '\.overlay\.yaml$$'); do \
		$(CONFIG_ENV) $(COLLECTOR) validate --config $$f >/dev/null || { echo "invalid: $$f"; exit 1; }; echo "valid: $$f"; done
	@for o in $$(git ls-files '*.overlay.yaml'); do \
		for base in $$(head -1 $$o | grep -o 'deploy/collector/[a-z-]*\.yaml'); do \
		$(CONFIG_ENV) $(COLLECTOR) validate --config $$base --config $$o >/dev/null || { echo "invalid: $$base + $$o"; exit 1; }; \
		echo "valid: $$base + $$o"; done; done
	promtool check rules deploy/prometheus/alerts.yaml
	promtool test rules deploy/prometheus/alerts_test.yaml
	promtool check config --syntax-only deploy/prometheus/prometheus.yml

generate: $(MDATAGEN)
	$(GO) tool builder --config builder-config.yaml --skip-compilation --skip-get-modules
	gofmt -w cmd/otelcol-workerwatch
	@for m in $(METADATA); do (cd $$(dirname $$m) && $(MDATAGEN) metadata.yaml) || exit 1; done

check-generate: generate
	@if [ -n "$$(git status --porcelain --untracked-files=all -- $(GENERATED))" ]; then \
		echo "Generated files differ from what is committed (run 'make generate' and commit):"; \
		git status --porcelain --untracked-files=all -- $(GENERATED); git diff --stat -- $(GENERATED); exit 1; fi
	@echo "check-generate: generated sources are up to date"

$(MDATAGEN):
	mkdir -p $(dir $@)
	cd $(dir $@) && { [ -f go.mod ] || $(GO) mod init mdatagen-tool >/dev/null 2>&1; } && \
		GOFLAGS=-mod=mod $(GO) get -tool go.opentelemetry.io/collector/cmd/mdatagen@$(MDATAGEN_VERSION) && \
		$(GO) build -trimpath -ldflags="-s -w" -o $@ go.opentelemetry.io/collector/cmd/mdatagen

bench:
	@scripts/bench.sh

# The figures of docs/scaling.md: how the ring spreads 1,000,000 ids; memory
# per worker by component (DENSITY_WORKERS, docs/results/density.md); 1 shard
# vs 3 shards side by side (events/s and CPU, memory at 100,000 workers,
# health API latency through one address), and beside them for memory and
# the API, one shard scraped (prometheus-exporter.overlay.yaml), as the
# gateway shipped before issue 24; each tier measured alone.
DENSITY_WORKERS ?= 10000
scale-figures: build
	WORKERWATCH_SCALE_FIGURES=1 $(GO) test -count=1 -run TestRingSpread -v ./internal/ring/ | grep -E 'RESULT|^(ok|FAIL)'
	WORKERWATCH_DENSITY=$(DENSITY_WORKERS) $(GO) test -count=1 -timeout 60m -run '^TestDensity$$' -v ./extension/workerhealthextension/ | \
		grep -E 'RESULT|^  |^(ok|FAIL)'
	WORKERWATCH_SCALE_FIGURES=1 WORKERWATCH_SCALE_ALONE=1 $(GO) test -tags e2e -count=1 -timeout 60m -run TestScaleFigures -v ./e2e/ 2>&1 | \
		grep -E 'RESULT|^ |--- |^(ok|FAIL)'

# Issue 14's flood (docs/reliability.md): the default config under
# FLOOD_WORKERS distinct worker ids and FLOOD_RUNS run ids over OTLP/gRPC,
# real workers sending meanwhile, then a restart on the flood's state; RSS
# against limit_mib, the real workers' requests accepted, the health API's
# p99, printed as tables (a 1 % version runs in `make e2e`).
FLOOD_WORKERS ?= 1000000
FLOOD_RUNS ?= 10000000
# Every shipped config's listeners against thousands of slow clients
# (docs/reliability.md); alone, outside `make test` (issue 19: beside the
# suite it starved the other scenarios on 2 cores).
slow-clients: build
	WORKERWATCH_SLOW_CLIENTS=1 $(GO) test -tags e2e -count=1 -timeout 30m -v -run TestReliabilitySlowClients ./e2e/

flood: build
	@mkdir -p $(CACHE)
	WORKERWATCH_FLOOD_WORKERS=$(FLOOD_WORKERS) WORKERWATCH_FLOOD_RUNS=$(FLOOD_RUNS) \
	WORKERWATCH_FLOOD_AFTER_SECONDS=60 WORKERWATCH_STRICT_LATENCY=1 WORKERWATCH_FLOOD_PPROF=1 \
		$(GO) test -tags e2e -count=1 -timeout 90m -v -run '^TestReliabilityFlood$$' ./e2e/ 2>&1 | tee $(CACHE)/flood.log | \
		grep -E '^\s*(--- |PASS|FAIL|ok)|e2e: |_test.go:[0-9]+: [a-z-]+: |^\s+(\||t\(s\)|[0-9]+ +(warm-up|flood|after|stopping|restart) )' ; \
		exit $${PIPESTATUS[0]}

# Memory over time, measured (not in `make test`): the default config with
# 100 simulated workers for MINUTES (30); a least-squares slope of RSS and of
# the Go heap after warm-up, written to $(CACHE)/soak.txt (a line for
# docs/results/soak.md) and the samples to $(CACHE)/e2e-logs/soak.csv. The
# 2-minute version in `make e2e` asserts only what a short run shows
# (docs/e2e.md, "Time"; docs/reliability.md, "Soak").
MINUTES ?= 30
soak: build
	@scripts/soak.sh $(MINUTES)

# worker_health processor CPU overhead with telemetrygen, A/B alternated.
ROUNDS ?= 5
overhead: build
	@scripts/overhead.sh $(ROUNDS)

# Each fuzz target for FUZZTIME (plain `go test`, so `make test`, replays the
# committed seed corpora under each package's testdata/fuzz/).
FUZZTIME ?= 2m
FUZZ := procfs:FuzzParseStat procfs:FuzzParsePidList \
	procfs:FuzzKeyValueFiles procfs:FuzzCgroupFiles \
	procfs:FuzzEnviron workerhealthprocessor:FuzzMapLogs \
	workerhealthprocessor:FuzzMapSpans workerhealthextension:FuzzRouter \
	requestguard:FuzzTargetGuard requestguard:FuzzPlainPath
fuzz:
	@for f in $(FUZZ); do pkg=$${f%%:*}; fn=$${f##*:}; dir=$$(ls -d */$$pkg */*/internal/$$pkg 2>/dev/null | head -1); \
		echo "== $$fn ($$dir, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$dir || exit 1; done

clean:
	rm -rf $(BIN)
