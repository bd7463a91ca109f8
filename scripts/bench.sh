#!/bin/bash
# Runs every benchmark, one after the other (each times itself against a
# peer measured in the same run, so they must not compete for the cores),
# and prints all their `RESULT <bench> <metric> <value>` lines (docs/design.md
# section 1.2) again at the end as a summary.
#
#   scripts/bench.sh BUILD_DIR       (make bench passes $(BUILD))
#
# A bench is bench/<name>/ and runs as the first of:
#   bench/<name>/run.sh BUILD_DIR    (bash)
#   bench/<name>/run BUILD_DIR       (an executable script)
#   BUILD_DIR/bench/<name>/<prog>    (each program built from bench/<name>/*.c)
# BENCH (default: all) is a space-separated list of bench names to run.
# Each bench's whole output is kept in BUILD_DIR/bench/<name>.log.
#
# Each bench runs under scripts/quiet.py, which adds its RESULT lines on
# the machine's load (foreign_cpu_share, steal_share, loadavg_before,
# loadavg_after) and fails the bench with status 75 when other work ran
# beside it; a bench that compares rounds fails with 75 too when they
# disagree (APF_BENCH_KEEP_GOING=1 keeps such figures, marked).
#
# A bench fails when it exits non-zero or prints a RESULT line that is not
# `RESULT <name> <metric> <number>`; the others still run, and the exit
# status is 1 when any failed. A bench that exits 0 without any RESULT line
# is reported as skipped, with its last line as the reason (e.g. the kernel
# refuses what it measures).
set -uo pipefail

one=""
if [ $# -eq 3 ] && [ "$1" = "--one" ]; then
	# Internal: bench $2 alone, as scripts/quiet.py runs it.
	one=$2
	shift 2
fi
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
skipped=()
ran=0
number='^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$|^-?(inf|nan)$'

# Runs one bench's programs in turn; the status is the first failure's.
run_bench() {
	local name=$1 dir=bench/$1 status=0 found=0 prog s
	if [ -f "$dir/run.sh" ]; then
		bash "$dir/run.sh" "$build"
		return
	fi
	if [ -x "$dir/run" ]; then
		"$dir/run" "$build"
		return
	fi
	for prog in "$build/bench/$name"/*; do
		[ -f "$prog" ] && [ -x "$prog" ] || continue
		found=1
		"$prog" || { s=$?; [ $status -eq 0 ] && status=$s; }
	done
	if [ $found -eq 0 ]; then
		echo "bench $name: no run.sh, no executable run, and no program" \
			"built in $build/bench/$name" >&2
		return 127
	fi
	return $status
}

if [ -n "$one" ]; then
	run_bench "$one"
	exit
fi

for dir in bench/*/; do
	name=$(basename "$dir")
	case " ${BENCH:-$name} " in *" $name "*) ;; *) continue ;; esac
	ran=$((ran + 1))
	log=$logs/$name.log
	echo "bench: $name"
	t0=$(date +%s)
	python3 scripts/quiet.py "$name" -- bash "$root/scripts/bench.sh" \
		--one "$name" "$build" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(($(date +%s) - t0))
	why=""
	if [ "$rc" -eq 75 ]; then
		why="not to be believed: $(grep -E '^bench .*: NOT (QUIET|STEADY): ' "$log" |
			head -n 1 | sed 's/^bench [^:]*: //')"
	elif [ "$rc" -ne 0 ]; then
		why="exit status $rc"
	fi
	# quiet.py's own lines (the load) do not make a bench's result: one
	# that printed nothing else is a skip, its reason its last line.
	mine="^(RESULT $name (foreign_cpu_share|steal_share|loadavg_before|loadavg_after) |bench $name: [0-9.]+ s; other work )"
	lines=$(grep '^RESULT ' "$log" || true)
	own=$(grep '^RESULT ' "$log" | grep -cvE "$mine" || true)
	these=()
	while read -r tag bench metric value extra; do
		[ -n "$tag" ] || continue
		if [ "$bench" != "$name" ] || [ -z "$metric" ] || [ -n "$extra" ] ||
			! [[ $value =~ $number ]]; then
			why=${why:-"malformed line '$tag $bench $metric $value${extra:+ $extra}'"}
			continue
		fi
		these+=("RESULT $bench $metric $value")
	done <<<"$lines"
	[ "$own" -gt 0 ] && summary+=("${these[@]}")
	if [ -n "$why" ]; then
		failed+=("$name ($why; log: $log)")
		echo "bench: $name FAILED after ${secs}s: $why" >&2
	elif [ "$own" -eq 0 ]; then
		last=$(grep -v '^[[:space:]]*$' "$log" | grep -vE "$mine" | tail -n 1)
		skipped+=("$name (${last:-no output}; log: $log)")
		echo "bench: $name skipped: no RESULT line"
	else
		echo "bench: $name done in ${secs}s"
	fi
done

if [ "$ran" -eq 0 ]; then
	echo "apf: bench: no bench matches '${BENCH:-}' under bench/*/" >&2
	exit 2
fi
echo
echo "bench summary: $((ran - ${#failed[@]} - ${#skipped[@]})) passed," \
	"${#failed[@]} failed, ${#skipped[@]} skipped"
for l in "${summary[@]}"; do
	echo "$l"
done
for s in "${skipped[@]}"; do
	echo "SKIPPED $s"
done
for f in "${failed[@]}"; do
	echo "FAILED $f"
done
[ ${#failed[@]} -eq 0 ]
