#!/usr/bin/env bash
# Installs what the tests need beyond Go, on a brand-new Debian machine, as
# root (CI) or with sudo. Idempotent: skips what is already there.
#   - prometheus + promtool (e2e, alert rule tests), wrk (health API bench),
#     chromium (status page rendered in a real browser)
#   - Jaeger v2 (e2e trace backend), built from the Go module proxy in a
#     scratch module OUTSIDE this repository's go.mod, cached in $CACHE/bin
#   - telemetrygen (load generator for the overhead benchmark), same way
#   - the Node.js examples' npm packages
#   - redis-server (the BullMQ preset's end-to-end scenarios start their own,
#     one per scenario on a free loopback port; Debian's service is left alone)
set -euo pipefail
CACHE=${CACHE:-$HOME/.cache/workerwatch}
mkdir -p "$CACHE/bin"
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v promtool   >/dev/null || need_apt+=(prometheus)
command -v wrk        >/dev/null || need_apt+=(wrk)
command -v chromium   >/dev/null || need_apt+=(chromium)
command -v redis-server >/dev/null || need_apt+=(redis-server)
# The Node.js worker example (machines of this kind come with Node 20).
command -v npm        >/dev/null || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	echo "install-test-deps: apt-get install ${need_apt[*]}"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# Debian's prometheus package starts a service on :9090; tests start their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
	systemctl stop prometheus || true
fi
pkill -x prometheus 2>/dev/null || true

# go_tool NAME MODULE@VERSION PACKAGE: build a Go tool in its own scratch module.
go_tool() {
	local name=$1 modver=$2 pkg=$3 dir="$CACHE/src/$1"
	[ -x "$CACHE/bin/$name" ] && return 0
	echo "install-test-deps: building $name ($modver), once; cached in $CACHE/bin"
	mkdir -p "$dir"
	(cd "$dir" && { [ -f go.mod ] || go mod init "tool-$name" >/dev/null 2>&1; } &&
		GOFLAGS=-mod=mod go get -tool "$modver" >/dev/null &&
		go build -o "$CACHE/bin/$name" "$pkg")
}
go_tool jaeger github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 github.com/jaegertracing/jaeger/cmd/jaeger
go_tool telemetrygen github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@v0.161.0 github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen

for ex in examples/node-worker examples/bullmq-worker; do
	if [ -f "$ex/package-lock.json" ]; then
		(cd "$ex" && npm ci --no-audit --no-fund --silent)
	fi
done
echo "install-test-deps: ready"
