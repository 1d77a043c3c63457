#!/usr/bin/env bash
# Installs what `make test` needs beyond Go, on a Debian machine, as root (CI)
# or with sudo. `make test` runs it first, so the README's two commands are
# all the set-up. Idempotent and quick when everything is there: it skips what
# is installed and never touches anything it did not start.
#
#   - Debian packages: prometheus + promtool (e2e, alert rule tests), wrk
#     (health API bench), chromium (status page in a real browser), node + npm,
#     redis-server (the BullMQ scenarios start their own, one per scenario on
#     a free loopback port), python3-celery + python3-redis (Debian's Celery
#     5.2.6 for the Celery preset's e2e and receiver tests) and rabbitmq-server
#     (the celery receiver's AMQP transport; no service is left running)
#   - Go tools built in scratch modules OUTSIDE this repository's go.mod,
#     cached in $CACHE/bin: Jaeger v2 (e2e trace backend), telemetrygen (load)
#   - the npm packages of every examples/*/ with a package-lock.json
#
# To add a dependency: `need_cmd COMMAND PACKAGE...` for a Debian package,
# `go_tool` for a Go tool; an example with a package-lock.json is picked up
# by itself.
set -euo pipefail
CACHE=${CACHE:-$HOME/.cache/workerwatch}
mkdir -p "$CACHE/bin"
cd "$(dirname "$0")/.."

say() { echo "install-test-deps: $*"; }

# need_cmd COMMAND PACKAGE...: install the Debian PACKAGEs when COMMAND is
# not on PATH.
apt_pkgs=()
need_cmd() {
	command -v "$1" >/dev/null || apt_pkgs+=("${@:2}")
}
need_cmd prometheus prometheus
need_cmd promtool prometheus
need_cmd wrk wrk
need_cmd chromium chromium
need_cmd node nodejs
need_cmd npm npm
need_cmd redis-server redis-server
# Celery has no command of its own on Debian (python3 -m celery): by import.
/usr/bin/python3 -c 'import celery, redis' 2>/dev/null || apt_pkgs+=(python3-celery python3-redis)
command -v rabbitmq-server >/dev/null || [ -x /usr/sbin/rabbitmq-server ] || apt_pkgs+=(rabbitmq-server)

if [ ${#apt_pkgs[@]} -gt 0 ]; then
	mapfile -t apt_pkgs < <(printf '%s\n' "${apt_pkgs[@]}" | sort -u)
	if ! command -v apt-get >/dev/null; then
		say "missing ${apt_pkgs[*]} and no apt-get here: install them yourself (the tests that need them skip locally, fail in CI)"
		[ "${CI:-}" = true ] && exit 1
	else
		SUDO=
		[ "$(id -u)" = 0 ] || SUDO=sudo
		say "apt-get install ${apt_pkgs[*]}"
		# Packages such as prometheus (and redis-server) start a system service
		# on their default port when installed. The tests start their own on
		# free ports and need none, so this install starts no service: the
		# standard policy-rc.d answer 101 ("action forbidden") for the length
		# of the install, unless the machine already has a policy of its own
		# (a container image's), which is then left as it is.
		policy=/usr/sbin/policy-rc.d
		own_policy=
		if [ ! -e "$policy" ]; then
			printf '#!/bin/sh\n# install-test-deps.sh: no service starts during its install\nexit 101\n' |
				$SUDO tee "$policy" >/dev/null
			$SUDO chmod 755 "$policy"
			own_policy=1
			trap '$SUDO rm -f "$policy"' EXIT
		fi
		$SUDO apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
		if [ -n "$own_policy" ]; then
			$SUDO rm -f "$policy"
			trap - EXIT
		fi
	fi
fi

# go_tool NAME MODULE@VERSION PACKAGE: build a Go tool in its own scratch
# module (so it cannot move this repository's dependencies), once. Another
# checkout's `make test` building the same tool at the same time waits for
# it (flock) instead of racing it; the binary appears complete or not at all.
go_tool() {
	local name=$1 modver=$2 pkg=$3 dir="$CACHE/src/$1"
	[ -x "$CACHE/bin/$name" ] && return 0
	mkdir -p "$dir"
	(
		flock 9
		[ -x "$CACHE/bin/$name" ] && exit 0
		say "building $name ($modver), once; cached in $CACHE/bin"
		cd "$dir" && { [ -f go.mod ] || go mod init "tool-$name" >/dev/null 2>&1; } &&
			GOFLAGS=-mod=mod go get -tool "$modver" >/dev/null &&
			go build -o "$CACHE/bin/$name.tmp" "$pkg" && mv "$CACHE/bin/$name.tmp" "$CACHE/bin/$name"
	) 9>"$dir.lock"
}
go_tool jaeger github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 github.com/jaegertracing/jaeger/cmd/jaeger
go_tool telemetrygen github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@v0.161.0 github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen

# npm_ci DIR: the exact packages of DIR/package-lock.json, installed again
# only when the lock file changed since the last install (a stamp in
# node_modules holds its hash).
npm_ci() {
	local dir=$1 stamp="$1/node_modules/.install-test-deps.sha256" sum
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] && return 0
	if ! command -v npm >/dev/null; then
		say "npm missing: $dir not installed"
		[ "${CI:-}" = true ] && exit 1
		return 0
	fi
	say "npm ci in $dir"
	(cd "$dir" && npm ci --no-audit --no-fund --silent)
	echo "$sum" >"$stamp"
}
for lock in examples/*/package-lock.json; do
	[ -f "$lock" ] && npm_ci "$(dirname "$lock")"
done
say "ready"
