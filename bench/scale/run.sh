#!/bin/bash
# bench/scale: apf run -j 2 against one unit at a time. A plan of 8 units
# (NAdamW with 2 studies x 4 trials, on the test workload blobs_mlp, which
# ends each trial at its validation target after about a second of
# training) runs twice in one session: -j 2 --threads 1 (two units at once,
# each pinned to one core) and sequentially with --threads 2. Reported:
# units per second of wall time for each, and their ratio; both runs are
# verified. Set-up (build, sandbox, evaluator) is part of every unit, as it
# is for every unit of a real run.
# Each mode's spread over the rounds: run_j2_spread, run_sequential_spread.
# Usage: bench/scale/run.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
apf=$(realpath "$build/apf")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/apf-bench-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT
export APF_HOME="$work/home" APF_WORKLOADS_DIR="$root/tests/data/workloads"

if ! unshare -U -r -m -p -n -f true 2>/dev/null; then
	echo "bench scale: skipped: the kernel refuses user namespaces" >&2
	exit 0
fi
cp -r "$root/submissions/baselines/nadamw" "$work/sub"
printf '\nstudies = 2\ntrials = 4\n' >>"$work/sub/submission.ini"
"$apf" pack "$work/sub" -w blobs_mlp -o "$work/e.apf" >/dev/null 2>&1
units=$("$apf" plan "$work/e.apf" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["units"]))')

timed() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	t1=$(date +%s.%N)
	echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
# The two modes alternate, APF_BENCH_ROUNDS rounds (default 3); the figures
# are the medians, and each mode's spread over its rounds is judged.
rounds=${APF_BENCH_ROUNDS:-3}
pars=() seqs=()
for r in $(seq "$rounds"); do
	pars+=("$(timed "$apf" run "$work/e.apf" -o "$work/par$r" -j 2 --threads 1 -q --allow-env-drift)")
	seqs+=("$(timed "$apf" run "$work/e.apf" -o "$work/seq$r" --threads 2 -q --allow-env-drift)")
	"$apf" verify "$work/par$r" >/dev/null
	"$apf" verify "$work/seq$r" >/dev/null
	rm -rf "$work/par$r" "$work/seq$r"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
par=$(median "${pars[@]}")
seq=$(median "${seqs[@]}")
echo "bench scale: $units units, $rounds rounds; -j 2 (1 thread each) ${par} s, sequential (2 threads each) ${seq} s (medians)"
awk -v n="$units" -v p="$par" -v s="$seq" 'BEGIN {
	printf "RESULT scale units %d\n", n
	printf "RESULT scale j2_units_per_s %.3f\n", n / p
	printf "RESULT scale sequential_units_per_s %.3f\n", n / s
	printf "RESULT scale throughput_ratio %.3f\n", s / p
}'
csv() { local IFS=,; echo "$*"; }
python3 "$root/scripts/quiet.py" rounds scale "run/j2=$(csv "${pars[@]}")" \
	"run/sequential=$(csv "${seqs[@]}")"
