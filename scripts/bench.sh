#!/bin/bash
# Runs every benchmark: each bench/<name>/run.sh BUILD_DIR, one after the
# other (they time themselves against peers measured in the same run, so
# they must not compete for the cores), and prints all their
# `RESULT <bench> <metric> <value>` lines again at the end as a summary.
#
#   scripts/bench.sh BUILD_DIR       (make bench passes $(BUILD))
#
# BENCH (default: all) is a space-separated list of bench names to run.
# Each bench's full output is kept in BUILD_DIR/bench/<name>.log. A bench
# fails when it exits non-zero, prints no RESULT line, or prints a RESULT
# line that is not `RESULT <name> <metric> <number>`; the others still run,
# and the exit status is 1 when any failed.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "apf: bench: usage: scripts/bench.sh BUILD_DIR (a built tree)" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
logs=$build/bench
mkdir -p "$logs"
cd "$root" || exit 2

summary=()
failed=()
ran=0
number='^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$|^-?(inf|nan)$'

for run in bench/*/run.sh; do
	[ -f "$run" ] || continue
	name=$(basename "$(dirname "$run")")
	case " ${BENCH:-$name} " in *" $name "*) ;; *) continue ;; esac
	ran=$((ran + 1))
	log=$logs/$name.log
	echo "bench: $name"
	t0=$(date +%s)
	bash "$run" "$build" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(($(date +%s) - t0))
	why=""
	[ "$rc" -ne 0 ] && why="exit status $rc"
	lines=$(grep '^RESULT ' "$log" || true)
	if [ -z "$why" ] && [ -z "$lines" ]; then
		why="printed no RESULT line"
	fi
	while read -r tag bench metric value extra; do
		[ -n "$tag" ] || continue
		if [ "$bench" != "$name" ] || [ -z "$metric" ] || [ -n "$extra" ] ||
			! [[ $value =~ $number ]]; then
			why=${why:-"malformed line '$tag $bench $metric $value${extra:+ $extra}'"}
			continue
		fi
		summary+=("RESULT $bench $metric $value")
	done <<<"$lines"
	if [ -n "$why" ]; then
		failed+=("$name ($why; log: $log)")
		echo "bench: $name FAILED after ${secs}s: $why" >&2
	else
		echo "bench: $name done in ${secs}s"
	fi
done

if [ "$ran" -eq 0 ]; then
	echo "apf: bench: no bench matches '${BENCH:-}' under bench/*/run.sh" >&2
	exit 2
fi
echo
echo "bench summary: $((ran - ${#failed[@]})) passed, ${#failed[@]} failed"
for l in "${summary[@]}"; do
	echo "$l"
done
for f in "${failed[@]}"; do
	echo "FAILED $f"
done
[ ${#failed[@]} -eq 0 ]
