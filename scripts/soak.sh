#!/usr/bin/env bash
# `make soak` / scripts/soak.sh [minutes]: the shipped default config with a
# simulated fleet of 100 workers for N minutes (default 30). Measures, does
# not judge speed: it samples the collector's RSS, Go heap, CPU and tracked
# state (CSV in $CACHE/e2e-logs/soak.csv), fits a least-squares slope to RSS
# and to the heap after warm-up (the first third of the run) and writes the
# RESULT line to $CACHE/soak.txt (WORKERWATCH_SOAK_RESULT), the format of
# docs/results/soak.md. It fails only on what any run must hold (RSS under
# limit_mib, tracked state within its bounds, the collector alive). The same
# test runs for 2 minutes in `make e2e` (TestReliabilitySoak). Needs
# `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
CACHE=${CACHE:-$HOME/.cache/workerwatch}
mkdir -p "$CACHE/e2e-logs"
timeout_min=$(awk -v m="$minutes" 'BEGIN { printf "%d", m + 10 }')
result=${WORKERWATCH_SOAK_RESULT:-$CACHE/soak.txt}
rm -f "$result"
WORKERWATCH_SOAK_MINUTES=$minutes WORKERWATCH_SOAK_CSV=${WORKERWATCH_SOAK_CSV:-$CACHE/e2e-logs/soak.csv} \
WORKERWATCH_SOAK_RESULT=$result \
	go test -tags e2e -count=1 -timeout "${timeout_min}m" -v -run '^TestReliabilitySoak$' ./e2e/ 2>&1 |
	grep -vE 'e2e: started' | sed -e 's/^ *//'
rc=${PIPESTATUS[0]}
[ -s "$result" ] && echo "soak: result in $result: $(cat "$result")"
exit "$rc"
