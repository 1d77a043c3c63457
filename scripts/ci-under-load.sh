#!/usr/bin/env bash
# scripts/ci-under-load.sh [BUSY]: CI's entry point (.ci/run, which is
# `make test`) with both cores of a 2-core machine kept busy by an unrelated
# load: BUSY (default 2) busy loops at normal priority, started here and ended
# here (by their pids) when the run ends, however it ends. Prints the run's
# wall time and exit status; exits with the run's status. Issue 19's third
# acceptance run (docs/results/ci-runs.md).
set -uo pipefail
cd "$(dirname "$0")/.."
busy=${1:-2}
loops=()
stop_loops() {
	for p in "${loops[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${loops[@]}"; do wait "$p" 2>/dev/null; done
	loops=()
}
trap stop_loops EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$busy"); do
	bash -c 'while :; do :; done' &
	loops+=($!)
done
echo "ci-under-load: $busy busy loops (pids ${loops[*]}), then .ci/run; $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
began=$(date +%s)
bash .ci/run
rc=$?
echo "ci-under-load: .ci/run exited $rc after $(( $(date +%s) - began )) s; $(date -u +%FT%TZ)"
exit "$rc"
