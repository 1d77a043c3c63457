#!/usr/bin/env bash
# `make overhead` / scripts/overhead.sh [rounds]: issue 6's performance goal.
# The same telemetrygen trace load at a fixed rate through two collectors that
# differ only by the worker_health processor in the traces pipeline, alternated
# A/B `rounds` times (default 5) in one run; prints the collector CPU of each
# phase and the median ratio (goal: with/without <= 1.15). Needs `make build`
# and telemetrygen (scripts/install-test-deps.sh). Environment:
# WORKERWATCH_OVERHEAD_SECONDS (per phase, default 10),
# WORKERWATCH_OVERHEAD_RATE (telemetrygen's --rate per worker, 4 workers,
# default 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERWATCH_OVERHEAD=1 WORKERWATCH_OVERHEAD_ROUNDS=${1:-5} \
	go test -tags e2e -count=1 -timeout 30m -v -run '^TestReliabilityOverhead$' ./e2e/ 2>&1 |
	grep -E 'e2e: (overhead|RESULT|with|without)|^(--- |FAIL|ok|PASS)|_test.go:[0-9]+: [^e]' | sed -e 's/^ *//'
exit "${PIPESTATUS[0]}"
