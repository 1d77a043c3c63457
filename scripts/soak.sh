#!/usr/bin/env bash
# `make soak` / scripts/soak.sh [minutes]: the shipped default config with a
# simulated fleet of 100 workers for N minutes (default 30); prints the
# collector's RSS and CPU over time (CSV, also kept in $CACHE/e2e-logs/soak.csv)
# and fails if RSS grows 5 % or more after warm-up. The same test runs for 2
# minutes in `make e2e` (TestReliabilitySoak). Needs `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
CACHE=${CACHE:-$HOME/.cache/workerwatch}
timeout_min=$(awk -v m="$minutes" 'BEGIN { printf "%d", m + 10 }')
WORKERWATCH_SOAK_MINUTES=$minutes WORKERWATCH_SOAK_CSV=${WORKERWATCH_SOAK_CSV:-$CACHE/e2e-logs/soak.csv} \
	go test -tags e2e -count=1 -timeout "${timeout_min}m" -v -run '^TestReliabilitySoak$' ./e2e/ 2>&1 |
	grep -vE 'e2e: started' | sed -e 's/^ *//'
exit "${PIPESTATUS[0]}"
