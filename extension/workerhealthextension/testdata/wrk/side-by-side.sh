#!/usr/bin/env bash
# Runs TestWrkLoad (10,000 workers, wrk -t1 -c8 --latency on random ids) on a
# base revision and on the working tree, alternately, ROUNDS times each, and
# prints one line per run: the figures of docs/http-api.md side by side.
#
#   extension/workerhealthextension/testdata/wrk/side-by-side.sh BASE_REV [ROUNDS] [DURATION]
#
# The base is checked out into a temporary git worktree, removed at the end.
set -euo pipefail
base_rev=${1:?usage: side-by-side.sh BASE_REV [ROUNDS] [DURATION]}
rounds=${2:-3}
duration=${3:-30s}
here=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$here" worktree add --detach "$tmp/base" "$base_rev" >/dev/null 2>&1

run() { # tree label
	local out
	out=$(cd "$1" && WORKERHEALTH_WRK=1 WORKERHEALTH_WRK_DURATION=$duration \
		go test -count=1 -run TestWrkLoad -v ./extension/workerhealthextension/ 2>&1 || true)
	printf '%-8s load %-5s rps %-8s p50 %-6s p99 %-7s max %-8s unexpected %s socket_errors %s\n' "$2" \
		"$(cut -d' ' -f1 /proc/loadavg)" \
		"$(awk '/ww_rps/{print $2}' <<<"$out")" "$(awk '/ww_p50_ms/{print $2}' <<<"$out")" \
		"$(awk '/ww_p99_ms/{print $2}' <<<"$out")" "$(awk '/ww_max_ms/{print $2}' <<<"$out")" \
		"$(awk '/ww_unexpected/{print $2}' <<<"$out")" "$(awk '/ww_socket_errors/{print $2}' <<<"$out")"
}
echo "base $(git -C "$tmp/base" rev-parse --short HEAD), new = working tree of $(git -C "$here" rev-parse --short HEAD); ms; load = 1-minute load average at the end"
for _ in $(seq "$rounds"); do
	run "$tmp/base" base
	run "$here" new
done
