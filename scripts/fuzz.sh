#!/bin/sh
# Runs every libFuzzer binary in a directory for a short time each.
#
#   scripts/fuzz.sh DIR          (make fuzz passes build/fuzz/bin)
#
# FUZZ_SECONDS (default 60) is the time per target; FUZZ_JOBS (default 1)
# the parallel fuzzing processes per target; FUZZ_TARGETS (default: all) a
# space-separated list of target names to run. Corpora grow in
# build/fuzz/corpus/<target>, seeded with the committed examples in
# tests/fuzz/seeds/<target>/ (made by tests/fuzz/make_seeds.py) and by
# tests/fuzz/<target>_seeds.py when it exists; crashing inputs land in
# build/fuzz/crashes/<target>/. The exit status is non-zero when any target
# found a crash, leak or timeout.
set -eu

dir=$(cd "${1:?usage: scripts/fuzz.sh FUZZ_BINARY_DIR}" && pwd)
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/build/fuzz
status=0
# Targets write scratch files under TMPDIR; memory is faster than disk.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
	export TMPDIR=/dev/shm
fi

for bin in "$dir"/fuzz_*; do
	[ -x "$bin" ] || continue
	name=$(basename "$bin")
	case " ${FUZZ_TARGETS:-$name} " in *" $name "*) ;; *) continue ;; esac
	corpus=$work/corpus/$name
	crashes=$work/crashes/$name
	mkdir -p "$corpus" "$crashes"
	seeds=$root/tests/fuzz/${name}_seeds.py
	if [ -f "$seeds" ] && [ -z "$(ls -A "$corpus")" ]; then
		/usr/bin/python3 "$seeds" "$corpus"
	fi
	# The committed seeds and reproducers join the corpus every time (a no-op
	# once there).
	for kept in seeds reproducers; do
		if [ -d "$root/tests/fuzz/$kept/$name" ]; then
			cp -n "$root/tests/fuzz/$kept/$name"/* "$corpus"/ 2>/dev/null || true
		fi
	done
	echo "fuzz: $name for ${secs}s ($(ls "$corpus" | wc -l) inputs in corpus)"
	par=""
	[ "$jobs" -gt 1 ] && par="-jobs=$jobs -workers=$jobs"
	# From $work, where libFuzzer's per-job logs land.
	# shellcheck disable=SC2086
	if ! (cd "$work" && "$bin" -max_total_time="$secs" -timeout=20 \
		-rss_limit_mb=2048 $par -print_final_stats=1 \
		-artifact_prefix="$crashes/" "$corpus") >"$work/$name.log" 2>&1; then
		echo "fuzz: $name FAILED; see $work/$name.log and $crashes/" >&2
		status=1
	fi
	grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done ' \
		"$work/$name.log" || true
done
exit $status
