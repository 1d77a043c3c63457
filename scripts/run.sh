#!/usr/bin/env bash
# `make run`: the collector with its built-in default configuration, watching a
# simulated fleet of six real worker processes. Ctrl-C stops both and leaves
# no process behind (the fleet supervisor reaps every worker and run child).
#
# The fleet stops first and the collector last, so the workers' final events
# (runs given back at shutdown) reach it and its checkpoint: the collector runs
# in its own session, out of reach of the terminal's Ctrl-C, and is stopped by
# this script once the fleet is gone.
set -euo pipefail
collector=$1 sim=$2
logdir=${TMPDIR:-/tmp}/workerwatch-run
mkdir -p "$logdir"

collector_pid= fleet_pid=
stop() {
	trap - INT TERM EXIT
	echo
	echo "stopping..."
	# On Ctrl-C the terminal already signalled the fleet; a second signal
	# would make it kill its workers at once instead of letting them finish.
	if [ "$1" != INT ] && [ -n "$fleet_pid" ]; then kill -TERM "$fleet_pid" 2>/dev/null || true; fi
	[ -n "$fleet_pid" ] && { wait "$fleet_pid" 2>/dev/null || true; }
	[ -n "$collector_pid" ] && { kill -TERM "$collector_pid" 2>/dev/null || true; wait "$collector_pid" 2>/dev/null || true; }
	echo "stopped; logs in $logdir"
	exit 0
}
trap 'stop INT' INT
trap 'stop TERM' TERM
trap 'stop EXIT' EXIT

setsid "$collector" >"$logdir/collector.log" 2>&1 &
collector_pid=$!
# --run-rate 6: more work than the fleet can do, so runs are pending and the
# hang worker, which claims nothing, is stalled rather than merely idle.
"$sim" fleet --workers 6 --faults leak,hang,drop-claims,timeout,none,none --run-rate 6 \
	--otlp-endpoint 127.0.0.1:4318 >"$logdir/fleet.log" 2>&1 &
fleet_pid=$!

cat <<MSG
workerwatch is running: the collector (default config) and a simulated fleet of
six workers: worker-1 leak, worker-2 hang, worker-3 drop-claims, worker-4 timeout,
worker-5 and worker-6 healthy.

  status page            http://127.0.0.1:8090/
  health API             http://127.0.0.1:8090/health/workers
                         http://127.0.0.1:8090/health/workers/worker-1
  Prometheus endpoint    http://127.0.0.1:9464/metrics
  collector's own        http://127.0.0.1:8888/metrics
  logs                   $logdir/collector.log, $logdir/fleet.log

Ctrl-C stops everything.
MSG
# Wait for either to end; if one dies, stop the other.
wait -n "$collector_pid" "$fleet_pid" || true
echo "a process ended on its own; see $logdir"
stop EXIT
