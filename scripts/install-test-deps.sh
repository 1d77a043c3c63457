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
#     cached by version in $CACHE/bin: Jaeger v2 (e2e trace backend).
#     (telemetrygen, the e2e suite's load, is a tool of the module, built by
#     `make build` into bin/.)
#   - the npm packages of every examples/*/ with a package-lock.json, once
#     per lock file in $CACHE/npm, each example's node_modules a hard-linked
#     copy of it
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

# apt_install: the missing Debian packages, if any. (Every status is
# explicit: it runs in a background job's && list, where set -e does not stop
# at a failed command.)
apt_install() {
	[ ${#apt_pkgs[@]} -gt 0 ] || return 0
	mapfile -t apt_pkgs < <(printf '%s\n' "${apt_pkgs[@]}" | sort -u)
	if ! command -v apt-get >/dev/null; then
		say "missing ${apt_pkgs[*]} and no apt-get here: install them yourself (the tests that need them skip locally, fail in CI)"
		[ "${CI:-}" != true ]
		return
	fi
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
	local rc=0
	$SUDO apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null ||
		rc=$?
	if [ -n "$own_policy" ]; then
		$SUDO rm -f "$policy"
		trap - EXIT
	fi
	return $rc
}

# go_tool NAME MODULE@VERSION PACKAGE [GCFLAGS]: build a Go tool in its own scratch
# module (so it cannot move this repository's dependencies), once per
# version: $CACHE/bin/NAME-VERSION, and $CACHE/bin/NAME a link to it (what
# the tests run), so a new version here is built, never an old binary kept.
# Another checkout's `make test` building the same tool at the same time
# waits for it (flock) instead of racing it; the binary appears complete or
# not at all.
go_tool() {
	local name=$1 modver=$2 pkg=$3 gcflags=${4:-}
	local bin="$CACHE/bin/$name-${modver##*@}" dir="$CACHE/src/$name-${modver##*@}"
	# A binary from before tools were cached by version is adopted when
	# `go version -m` shows it was built from that module version.
	if [ ! -x "$bin" ] && [ -x "$CACHE/bin/$name" ] && [ ! -L "$CACHE/bin/$name" ] &&
		go version -m "$CACHE/bin/$name" 2>/dev/null | awk -v pkg="$pkg" -v ver="${modver##*@}" '
			$1 == "path" && $2 == pkg { p = 1 }
			($1 == "dep" || $1 == "mod") && $3 == ver && index(pkg "/", $2 "/") == 1 { d = 1 }
			END { exit !(p && d) }'; then
		mv "$CACHE/bin/$name" "$bin" 2>/dev/null || true
	fi
	if [ ! -x "$bin" ]; then
		mkdir -p "$dir"
		(
			flock 9
			[ -x "$bin" ] && exit 0
			say "building $name ($modver), once; cached in $CACHE/bin"
			cd "$dir" && { [ -f go.mod ] || go mod init "tool-$name" >/dev/null 2>&1; } &&
				GOFLAGS=-mod=mod go get -tool "$modver" >/dev/null &&
				go build -trimpath ${gcflags:+-gcflags="$gcflags"} -ldflags='-s -w' -o "$bin.tmp" "$pkg" && mv "$bin.tmp" "$bin"
		) 9>"$dir.lock" || return 1
	fi
	[ "$(readlink "$CACHE/bin/$name" 2>/dev/null)" = "${bin##*/}" ] || ln -sfn "${bin##*/}" "$CACHE/bin/$name"
}

# npm_ci DIR: the exact packages of DIR/package-lock.json. They are installed
# once per lock file in $CACHE/npm/<example>-<hash of the lock>/ and copied
# into DIR/node_modules as hard links (under a second for the three
# examples), so a fresh clone on a machine that has run the tests before
# costs a copy, not an `npm ci` (about 30 s). A copy, not a symbolic link:
# OpenFn's engine did not run its jobs from a linked node_modules (its
# example's test timed out). DIR's node_modules is made again only when the
# lock file changed since (a stamp in it holds the lock's hash), as `npm ci`
# would.
npm_ci() {
	local dir=$1 sum stamp target
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	stamp="$dir/node_modules/.install-test-deps.sha256"
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] && return 0
	target="$CACHE/npm/$(basename "$dir")-${sum:0:16}"
	if [ ! -f "$target/.installed" ]; then
		if ! command -v npm >/dev/null; then
			say "npm missing: $dir not installed"
			[ "${CI:-}" != true ] # a failure in CI only; the tests that need it skip elsewhere
			return
		fi
		mkdir -p "$target"
		(
			flock 9
			[ -f "$target/.installed" ] && exit 0
			say "npm ci for $dir, once; cached in $target"
			cp "$dir/package.json" "$dir/package-lock.json" "$target/" &&
				(cd "$target" && npm ci --no-audit --no-fund --silent) && touch "$target/.installed"
		) 9>"$target.lock" || return 1
	fi
	rm -rf "$dir/node_modules"
	# Hard links where the cache and DIR share a file system, else a copy.
	cp -al "$target/node_modules" "$dir/node_modules" 2>/dev/null || {
		rm -rf "$dir/node_modules"
		cp -a "$target/node_modules" "$dir/node_modules"
	} || return 1
	echo "$sum" >"$stamp"
}
npm_all() {
	local lock
	for lock in examples/*/package-lock.json; do
		[ -f "$lock" ] || continue
		npm_ci "$(dirname "$lock")" || return 1
	done
	return 0
}

# packages: the Debian packages, then the npm packages (npm comes with them).
packages() { apt_install && npm_all; }

# The installs overlap: the Debian packages and then the npm packages (both
# mostly waiting on the network and dpkg) in one background job, each Go
# tool's download and build (CPU) in another; the script waits for all and
# fails if any failed. On a fresh machine the Jaeger build is the longest
# (issue 19: about 12 minutes cold); the apt and npm installs now take none
# of the wall time beside it.
pids=() names=()
bg() {
	"${@:2}" &
	pids+=($!) names+=("$1")
}
bg "Debian and npm packages" packages
# Jaeger without the compiler's optimizations and inlining (-N -l): it only
# stores the e2e suite's few traces in memory and answers a few queries, and
# its build is the longest on a fresh machine: 439 CPU-seconds against 622
# for v1.76.0 (229 s against 330 s of wall time alone on 2 cores, its modules
# already downloaded; docs/results/ci-runs.md, seventh stop). v1.75.0: the
# list of Go modules served on these machines names v1.76.0 as served but
# not an approved release.
bg jaeger go_tool jaeger github.com/jaegertracing/jaeger/cmd/jaeger@v1.75.0 github.com/jaegertracing/jaeger/cmd/jaeger 'all=-N -l'
failed=()
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
	say "failed: ${failed[*]}"
	exit 1
fi
say "ready"
