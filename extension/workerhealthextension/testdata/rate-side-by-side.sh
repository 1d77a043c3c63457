#!/usr/bin/env bash
# Runs TestAPIAtRate (GET /health/workers/{id} at a fixed rate while an
# evaluation is published every 10 s) on a base revision and on the working
# tree, alternately, ROUNDS times each, and prints each RESULT line with the
# tree it came from: the side-by-side figures of docs/results/http-api.md.
# Both sides use the working tree's load generator (rate_test.go and the
# bench_test.go helpers it calls are copied into the base), so only the
# extension differs. The WORKERHEALTH_RATE_* variables pass through
# (WORKERHEALTH_RATE_TIER=1: the first of a tier of three).
#
#   extension/workerhealthextension/testdata/rate-side-by-side.sh BASE_REV [ROUNDS]
set -euo pipefail
base_rev=${1:?usage: rate-side-by-side.sh BASE_REV [ROUNDS]}
rounds=${2:-3}
here=$(git rev-parse --show-toplevel)
pkg=extension/workerhealthextension
tmp=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$here" worktree add --detach "$tmp/base" "$base_rev" >/dev/null 2>&1
cp "$here/$pkg/rate_test.go" "$here/$pkg/bench_test.go" "$tmp/base/$pkg/"
echo "base $(git -C "$tmp/base" rev-parse --short HEAD), new = working tree of $(git -C "$here" rev-parse --short HEAD)"
for _ in $(seq "$rounds"); do
	for tree in "$tmp/base" "$here"; do
		label=new
		[ "$tree" = "$here" ] || label=base
		(cd "$tree" && WORKERHEALTH_RATE=1 go test -count=1 -run '^TestAPIAtRate$' -v "./$pkg/" 2>&1) |
			awk -v l="$label" -v load="$(cut -d' ' -f1 /proc/loadavg)" '/RESULT|FAIL/ {sub(/^.*RESULT /, ""); print l, "load", load, $0}'
	done
done
