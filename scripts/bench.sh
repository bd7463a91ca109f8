#!/bin/sh
# Runs every benchmark: for each bench/<name>/, its `run` script when it has
# one (given the build directory), else each program built from it. Each
# figure is printed as "RESULT <bench> <metric> <value>" (DESIGN.md section 1).
# Usage: scripts/bench.sh BUILD_DIR
set -eu
build="${1:-build}"
cd "$(dirname "$0")/.."
status=0
for dir in bench/*/; do
	name=$(basename "$dir")
	echo "== bench/$name"
	if [ -x "$dir/run" ]; then
		"$dir/run" "$build" || status=1
	else
		for prog in "$build/bench/$name"/*; do
			[ -x "$prog" ] || continue
			"$prog" || status=1
		done
	fi
done
exit $status
