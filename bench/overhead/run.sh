#!/bin/bash
# bench/overhead: what sealing costs. The same trial (NAdamW, fmnist_mlp,
# study 0 trial 1, a 40 s budget and 1 s eval period, validation target
# 0.84) runs sealed and --unsealed, alternating, in one session; reported:
# seconds of submission time per training step and time-to-target of each,
# their ratios, and the median cost of one eval point (the evaluation while
# the trial is frozen, and the checkpoint + log + signature after it).
# The step-time ratio is the median of the rounds' own ratios, and is
# judged by their spread (step_ratio_spread); each mode's spread over its
# rounds (step_sealed_spread, step_unsealed_spread) only says whether the
# machine's speed wandered (scripts/quiet.py).
# Usage: bench/overhead/run.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
apf=$(realpath "$build/apf")
root=$(cd "$(dirname "$0")/../.." && pwd)
# Step times on a shared VM vary by +-10% from run to run; medians of five
# alternating rounds resolve a few percent.
rounds=${APF_BENCH_ROUNDS:-9}
work=$(mktemp -d "${TMPDIR:-/tmp}/apf-bench-overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT
export APF_HOME="$work/home"

if ! unshare -U -r -m -p -n -f true 2>/dev/null; then
	echo "bench overhead: skipped: the kernel refuses user namespaces" >&2
	exit 0
fi
# A shorter copy of fmnist_mlp: same model and data, a budget for a bench.
mkdir -p "$work/workloads"
cp -r "$root/workloads/fmnist_mlp" "$work/workloads/"
ini="$work/workloads/fmnist_mlp/workload.ini"
sed -i -e 's/^max_runtime_s = .*/max_runtime_s = 40/' -e 's/^eval_period_s = .*/eval_period_s = 1/' \
	-e 's/^validation_target = .*/validation_target = 0.84/' -e 's/^test_target = .*/test_target = 0.83/' "$ini"
export APF_WORKLOADS_DIR="$work/workloads"
"$apf" pack "$root/submissions/baselines/nadamw" -w fmnist_mlp -o "$work/e.apf" >/dev/null 2>&1

# step_s ttt eval_ms logging_ms of one run directory's log
measure() {
	python3 - "$1/study_0/fmnist_mlp/trial_1/log.jsonl" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
blocks = [r for r in recs if r["event"] == "step_block" and r["last_step"] > r["first_step"]]
steps = sum(r["last_step"] - r["first_step"] + 1 for r in blocks)
ns = sum(r["end_ns"] - r["start_ns"] for r in blocks)
evals = [r for r in recs if r["event"] == "eval"]
end = [r for r in recs if r["event"] == "trial_end"][0]
ev_ms = statistics.median((e["end_ns"] - e["start_ns"]) / 1e6 for e in evals)
logs = [(b["start_ns"] - e["end_ns"]) / 1e6 for e, b in zip(evals, blocks)]
log_ms = statistics.median(logs) if logs else float("nan")
ttt = end["time_to_target_ns"]
print(ns / 1e9 / steps, ttt / 1e9 if ttt is not None else float("nan"), ev_ms, log_ms)
PY
}

declare -a sealed unsealed
for r in $(seq "$rounds"); do
	# A B, then B A: a steady drift of the VM's speed favours neither mode
	order="sealed unsealed"; [ $((r % 2)) = 0 ] && order="unsealed sealed"
	for mode in $order; do
		flag=""; [ "$mode" = unsealed ] && flag="--unsealed"
		"$apf" run "$work/e.apf" -o "$work/$mode$r" --study 0 --trial 1 -q $flag >/dev/null 2>&1
		m=$(measure "$work/$mode$r")
		echo "round $r $mode: s/step ttt eval_ms logging_ms = $m"
		if [ "$mode" = sealed ]; then sealed+=("$m"); else unsealed+=("$m"); fi
	done
done
python3 - "$root/scripts" "${sealed[@]}" -- "${unsealed[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv.pop(1))
import quiet
args = sys.argv[1:]
cut = args.index("--")
def rows(xs): return [list(map(float, x.split())) for x in xs]
s, u = rows(args[:cut]), rows(args[cut + 1:])
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"RESULT overhead sealed_step_ms {med(s, 0) * 1e3:.3f}")
print(f"RESULT overhead unsealed_step_ms {med(u, 0) * 1e3:.3f}")
# the ratio is judged by its pairs (a round's sealed step over the same
# round's unsealed one): the VM's speed may wander between rounds
ratio, bad, wander = quiet.pairs("overhead", "step", {"sealed": [r[0] for r in s],
                                                      "unsealed": [r[0] for r in u]})
print(f"RESULT overhead step_time_ratio_sealed_vs_unsealed {ratio:.4f}")
print(f"RESULT overhead sealed_time_to_target_s {med(s, 1):.2f}")
print(f"RESULT overhead unsealed_time_to_target_s {med(u, 1):.2f}")
print(f"RESULT overhead time_to_target_ratio_sealed_vs_unsealed {med(s, 1) / med(u, 1):.4f}")
print(f"RESULT overhead eval_frozen_ms {med(s, 2):.1f}")
print(f"RESULT overhead checkpoint_and_log_ms {med(s, 3):.1f}")
sys.stdout.flush()
quiet.finish("overhead", bad, wander)
PY
