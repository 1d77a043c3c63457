#!/usr/bin/env bash
# `make bench`: every component's benchmark side by side with its peer, in one
# run each (these machines are noisy: read the ratios, not the absolutes).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "== $*"; }

step "worker_process receiver vs the hostmetrics process scraper vs the stat+statm floor"
echo "   (spawns ~1,000 idle processes and a 50-process worker tree)"
go test -run '^$' -bench 'BenchmarkScrape' -benchtime 30x ./receiver/workerprocessreceiver/

step "worker_health processor vs the spanmetrics connector, per span"
go test -run '^$' -bench 'BenchmarkSpans' -benchmem -benchtime 3000x ./processor/workerhealthprocessor/
step "worker_health processor: a steady fleet's evaluation and emission into the Prometheus exporter, resend_interval 0 vs 1m"
go test -run '^$' -bench 'BenchmarkSteadyEmission' -benchtime 30x ./processor/workerhealthprocessor/
step "worker_health processor state size with 100,000 workers"
go test -count=1 -run 'TestStateSize' -v ./processor/workerhealthprocessor/ | grep -E 'B per|bytes|---|ok'

step "worker_health extension handlers"
go test -run '^$' -bench . -benchmem ./extension/workerhealthextension/...
if command -v wrk >/dev/null; then
	step "worker_health extension under wrk -t1 -c8 -d30s, 10,000 workers"
	WORKERHEALTH_WRK=1 go test -count=1 -run TestWrkLoad -v ./extension/workerhealthextension/ | grep -vE '^=== RUN'
fi

if [ -x scripts/overhead.sh ]; then
	step "collector CPU with and without worker_health in the traces pipeline (telemetrygen)"
	scripts/overhead.sh
fi
