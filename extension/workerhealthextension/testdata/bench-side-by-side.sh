#!/usr/bin/env bash
# Runs the extension's benchmarks matching REGEX on a base revision and on the
# working tree, alternately, ROUNDS times each (go test -bench, one -count a
# round), and prints each line with the tree it came from: the side-by-side
# figures of docs/http-api.md. A benchmark missing from the base is simply
# not printed for it.
#
#   extension/workerhealthextension/testdata/bench-side-by-side.sh BASE_REV [ROUNDS] [REGEX] [BENCHTIME]
set -euo pipefail
base_rev=${1:?usage: bench-side-by-side.sh BASE_REV [ROUNDS] [REGEX] [BENCHTIME]}
rounds=${2:-3}
regex=${3:-.}
benchtime=${4:-1s}
here=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$here" worktree add --detach "$tmp/base" "$base_rev" >/dev/null 2>&1
echo "base $(git -C "$tmp/base" rev-parse --short HEAD), new = working tree of $(git -C "$here" rev-parse --short HEAD)"
for _ in $(seq "$rounds"); do
	for tree in "$tmp/base" "$here"; do
		label=new
		[ "$tree" = "$here" ] || label=base
		(cd "$tree" && go test -run '^$' -bench "$regex" -benchtime "$benchtime" -benchmem ./extension/workerhealthextension/ 2>&1) |
			awk -v l="$label" -v load="$(cut -d' ' -f1 /proc/loadavg)" '/^Benchmark/ {print l, "load", load, $0}'
	done
done
