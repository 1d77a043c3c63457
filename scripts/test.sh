#!/usr/bin/env bash
# scripts/test.sh: `make test`, the one command CI runs (.ci/run).
#
# The same stages as always, arranged so that the CPU works while the
# end-to-end suite waits on its systems. On 2 cores `e2e` is the longest
# stage and leaves much of the CPU idle, while a fresh machine's other stages
# are compiles that keep both cores busy (docs/results/ci-runs.md, fifth
# stop). So:
#   1. deps (Debian and npm packages, the Jaeger build) and build (the
#      binaries the tests run), side by side;
#   2. e2e, and beside it the checks at nice 19 (which holds them back
#      behind e2e only where the kernel does not group processes by session:
#      with autogroup scheduling, on here, each setsid session below is a
#      group of its own and gets an equal share whatever its nice value;
#      docs/results/ci-runs.md, ninth stop): the
#      lint and mdatagen builds, cross, fmt-check, lint (its govet runs
#      every analyzer of `go vet`: `make vet` alone is not run), check-generate,
#      then unit-build (the unit tests compiled with -race, not run);
#   3. unit (linked and run at normal priority, alone) and check-configs.
# A failed check stops the e2e run at once and prints the checks' log; a
# failed e2e run waits for the checks, so one run reports both.
# Each stage's time is printed as "make test: STAGE N s" (the checks' when
# they are done), the figures of docs/results/ci-runs.md.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
CACHE=${CACHE:-$HOME/.cache/workerwatch}
export CACHE
mkdir -p "$CACHE"
checks_log=$CACHE/checks.log

say() { echo "make test: $*"; }

# timed TARGET...: `make TARGET...`, its time printed under the first name.
timed() {
	local t
	t=$(date +%s)
	if $MAKE --no-print-directory "$@"; then
		say "$1 $(($(date +%s) - t)) s"
	else
		say "$1 FAILED after $(($(date +%s) - t)) s"
		return 1
	fi
}

checks() {
	local s
	# No `vet`: lint's govet (.golangci.yml: enable-all) runs every analyzer
	# `go vet` runs, on the same files and the e2e tag, and its compile of
	# every test's dependencies cost about 200 s of a fresh machine's run
	# (docs/results/ci-runs.md, seventh stop). `make vet` runs it alone.
	for s in tools cross fmt-check lint check-generate unit-build; do
		timed "$s" || return 1
	done
}

# The checks' half of 2, run by this script itself in a session of its own.
if [ "${1:-}" = --checks ]; then
	renice -n 19 -p $$ >/dev/null
	checks
	exit
fi

began=$(date +%s)

# 1. What e2e needs, both halves at once: the installs mostly wait on the
# network and dpkg, the Go builds on the CPU.
t=$(date +%s)
$MAKE --no-print-directory -j 2 deps build || {
	say "deps and build FAILED after $(($(date +%s) - t)) s"
	exit 1
}
say "deps and build $(($(date +%s) - t)) s"

# 2. e2e and the checks, each in a session of its own (so that it can be
# stopped with every process it started), the checks at nice 19. INT and
# TERM stop both.
e2e_pid= checks_pid=
stop() {
	[ -n "$e2e_pid" ] && kill -TERM -- "-$e2e_pid" 2>/dev/null
	[ -n "$checks_pid" ] && kill -TERM -- "-$checks_pid" 2>/dev/null
}
trap 'stop; exit 130' INT TERM
t=$(date +%s)
setsid "$0" --checks >"$checks_log" 2>&1 &
checks_pid=$!
setsid $MAKE --no-print-directory e2e &
e2e_pid=$!

e2e_rc= checks_rc=
while [ -z "$e2e_rc" ] || [ -z "$checks_rc" ]; do
	running=()
	[ -n "$e2e_rc" ] || running+=("$e2e_pid")
	[ -n "$checks_rc" ] || running+=("$checks_pid")
	# wait unsets done_pid before it assigns it, and leaves it unset when it
	# returns without a job's status (127: none of them left to wait for);
	# under set -u that printed "done_pid: unbound variable" instead of the
	# "lost track" message below.
	wait -n -p done_pid "${running[@]}"
	rc=$?
	done_pid=${done_pid:-}
	if [ "$done_pid" = "$e2e_pid" ]; then
		e2e_rc=$rc
		if [ "$rc" = 0 ]; then say "e2e $(($(date +%s) - t)) s"; else say "e2e FAILED after $(($(date +%s) - t)) s"; fi
	elif [ "$done_pid" = "$checks_pid" ]; then
		checks_rc=$rc
		if [ "$rc" = 0 ]; then
			grep '^make test: ' "$checks_log"
		else
			echo "---- the checks ($checks_log):"
			cat "$checks_log"
			echo "----"
			if [ -z "$e2e_rc" ]; then
				echo "make test: a check failed: stopping e2e"
				kill -TERM -- "-$e2e_pid" 2>/dev/null
			fi
		fi
	else
		say "lost track of the e2e and checks jobs (wait: $rc)"
		stop
		exit 1
	fi
done
trap - INT TERM
[ "$e2e_rc" = 0 ] && [ "$checks_rc" = 0 ] || exit 1

# 3. The unit tests, compiled in 2, alone at normal priority: many of them
# bound how long something takes, under -race.
timed unit || exit 1
timed check-configs || exit 1
say "all stages passed in $(($(date +%s) - began)) s"
