#!/bin/bash
# bench/load: whether a busy machine moves apf's clock. The same sealed
# trial (NAdamW, fmnist_mlp, study 0 trial 1; a copy of the workload with a
# 60 s budget, a 2 s eval period and validation target 0.85) runs on a
# quiet machine and beside a load generator - as many busy loops as the
# machine has cores (`sh -c 'while :; do :; done'`, at the trial's
# priority) - under each clock (apf run --clock wall, --clock cpu),
# alternating, in one session. Reported per clock: the ratio of
# time-to-target loaded / quiet and of training steps per second of
# submission time loaded / quiet (medians over the rounds; 1.00 is a clock
# the load cannot move), and the share of step blocks short of cores.
# The spread over rounds of the cpu clock's steps per second, quiet and
# loaded: cpu_steps_per_s_quiet_spread, cpu_steps_per_s_loaded_spread.
# Usage: bench/load/run.sh BUILD_DIR   (APF_BENCH_ROUNDS rounds, default 9)
set -euo pipefail
build=${1:-build}
apf=$(realpath "$build/apf")
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${APF_BENCH_ROUNDS:-9}
work=$(mktemp -d "${TMPDIR:-/tmp}/apf-bench-load.XXXXXX")
loaders=()
stop_load() {
	for p in "${loaders[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${loaders[@]}"; do wait "$p" 2>/dev/null || true; done
	loaders=()
}
trap 'stop_load; rm -rf "$work"' EXIT
export APF_HOME="$work/home"

if ! unshare -U -r -m -p -n -f true 2>/dev/null; then
	echo "bench load: skipped: the kernel refuses user namespaces" >&2
	exit 0
fi
mkdir -p "$work/workloads"
cp -r "$root/workloads/fmnist_mlp" "$work/workloads/"
ini="$work/workloads/fmnist_mlp/workload.ini"
sed -i -e '/^\[budget.cpu\]/,/^\[/{s/^max_runtime_s = .*/max_runtime_s = 60/;s/^eval_period_s = .*/eval_period_s = 2/}' \
	-e 's/^validation_target = .*/validation_target = 0.85/' -e 's/^test_target = .*/test_target = 0.84/' "$ini"
export APF_WORKLOADS_DIR="$work/workloads"
"$apf" pack "$root/submissions/baselines/nadamw" -w fmnist_mlp -o "$work/e.apf" >/dev/null 2>&1
cores=$(nproc)

start_load() {
	for _ in $(seq "$cores"); do
		sh -c 'while :; do :; done' &
		loaders+=($!)
	done
}

# ttt steps_per_s short_share util of one run directory's log
measure() {
	python3 - "$1/study_0/fmnist_mlp/trial_1/log.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
blocks = [r for r in recs if r["event"] == "step_block"]
end = [r for r in recs if r["event"] == "trial_end"][0]
start = [r for r in recs if r["event"] == "run_start"][0]
steps = blocks[-1]["last_step"]
sub = blocks[-1]["accumulated_submission_ns"] / 1e9
wall = sum(b["end_ns"] - b["start_ns"] for b in blocks) / 1e9
cpu = sum(b["cpu_ns"] for b in blocks) / 1e9
# apf_clock_short (pkg/rundir/rundir.h)
short = sum(1 for b in blocks
            if b["wait_ns"] > 0.05 * (b["end_ns"] - b["start_ns"]) * start["threads"]
            and b["wait_ns"] > 50e6 * start["threads"])
ttt = end["time_to_target_ns"]
print(f'{ttt / 1e9 if ttt is not None else float("nan"):.3f} {steps / sub:.2f} '
      f'{short / len(blocks):.2f} {cpu / (wall * start["threads"]):.3f}')
PY
}

declare -A res
for r in $(seq "$rounds"); do
	for clock in wall cpu; do
		for cond in quiet loaded; do
			[ "$cond" = loaded ] && start_load
			"$apf" run "$work/e.apf" -o "$work/$clock-$cond-$r" --study 0 --trial 1 \
				--clock "$clock" -q >/dev/null 2>&1 || true
			[ "$cond" = loaded ] && stop_load
			m=$(measure "$work/$clock-$cond-$r")
			echo "round $r, --clock $clock, $cond: time-to-target s, steps/s, short share, CPU use = $m"
			res[$clock-$cond]+="$m;"
		done
	done
done

python3 - "$root/scripts" "${res[wall-quiet]}" "${res[wall-loaded]}" "${res[cpu-quiet]}" "${res[cpu-loaded]}" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv.pop(1))
import quiet
def rows(s):
    return [list(map(float, x.split())) for x in s.split(";") if x.strip()]
wq, wl, cq, cl = (rows(a) for a in sys.argv[1:5])
def med(rs, k):
    return statistics.median(r[k] for r in rs)
for name, q, l in (("wall", wq, wl), ("cpu", cq, cl)):
    print(f"--clock {name}: time-to-target {med(q, 0):.2f} s quiet, {med(l, 0):.2f} s loaded; "
          f"steps/s {med(q, 1):.1f} quiet, {med(l, 1):.1f} loaded; blocks short of cores "
          f"{med(q, 2):.0%} quiet, {med(l, 2):.0%} loaded")
    print(f"RESULT load {name}_ttt_loaded_over_quiet {med(l, 0) / med(q, 0):.3f}")
    print(f"RESULT load {name}_steps_per_s_loaded_over_quiet {med(l, 1) / med(q, 1):.3f}")
print(f"RESULT load cpu_use_quiet {med(wq, 3):.3f}")
# The claim is the cpu clock's: its steps per submission-second, quiet and
# loaded, must agree from round to round (the wall clock's loaded rounds
# are the load's, and vary as it does).
bad = quiet.steady("load", "cpu_steps_per_s", {"quiet": [r[1] for r in cq],
                                               "loaded": [r[1] for r in cl]})
sys.stdout.flush()
quiet.finish("load", bad)
PY
