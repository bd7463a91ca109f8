#!/bin/sh
# make demo: the main job on the built-in default. Packs the NAdamW baseline
# for fmnist_mlp, runs one study x one trial in the sealed runner, verifies
# the run, scores it, writes its report, and says where they are and how
# long the trial took to reach the workload's validation target. Signing keys live in $APF_HOME (default
# ~/.config/apf); one is created on first use.
set -eu
build=${1:-build}
apf="$build/apf"
out="$build/demo"
mkdir -p "$out"
rm -rf "$out/nadamw.apf" "$out/nadamw.run"

echo "== apf keygen (once)"
if ! "$apf" keygen >/dev/null 2>"$out/keygen.err"; then
	grep -q "refusing to overwrite" "$out/keygen.err" || { cat "$out/keygen.err" >&2; exit 1; }
	echo "using the existing key in ${APF_HOME:-$HOME/.config/apf}/keys"
fi

unsealed=""
if ! unshare -U -r -m -p -n -f true 2>/dev/null; then
	echo "(this kernel refuses user namespaces: building and running --unsealed, as the log will say)"
	unsealed="--unsealed"
fi
echo "== apf pack submissions/baselines/nadamw -w fmnist_mlp"
"$apf" pack submissions/baselines/nadamw -w fmnist_mlp -o "$out/nadamw.apf" $unsealed
"$apf" verify "$out/nadamw.apf"

echo "== apf plan (first trials)"
"$apf" plan "$out/nadamw.apf" | head -4

echo "== apf run: study 0, trial 1 (a budget of 180 s of training time)"
"$apf" run "$out/nadamw.apf" -o "$out/nadamw.run" --study 0 --trial 1 $unsealed

echo "== apf verify $out/nadamw.run --reeval --replay 1"
"$apf" verify "$out/nadamw.run" --reeval --replay 1

echo "== apf score --verify"
"$apf" score "$out/nadamw.run" --verify

echo "== apf report --verify"
"$apf" report "$out/nadamw.run" --verify -o "$out/nadamw.html" >/dev/null
echo
echo "run directory: $out/nadamw.run"
echo "  log:          $out/nadamw.run/study_0/fmnist_mlp/trial_1/log.jsonl (signed head: log.dsse.json beside it;"
echo "                the run's index of unit heads: index.dsse.json)"
echo "  measurements: $out/nadamw.run/study_0/fmnist_mlp/trial_1/eval_measurements.csv"
echo "report:         $out/nadamw.html (one self-contained page; open it in a browser)"
log=$out/nadamw.run/study_0/fmnist_mlp/trial_1/log.jsonl
tail -n 1 "$log" >/dev/null
ttt=$(grep '"event":"trial_end"' "$log" | sed -n 's/.*"time_to_target_ns":\([0-9]*\).*/\1/p')
if [ -n "$ttt" ]; then
	echo "time to target: $(echo "$ttt" | awk '{printf "%.1f s of submission time", $1 / 1e9}')"
else
	# An untuned trial may miss a target set by tuned baselines.
	best=$(grep '"event":"eval"' "$log" |
		sed -n 's/.*"validation\/accuracy":\([0-9.e-]*\).*/\1/p' | sort -g | tail -n 1 | awk '{printf "%.4f", $1}')
	target=$(grep '"event":"trial_start"' "$log" |
		sed -n 's/.*"validation_target":\([0-9.e-]*\).*/\1/p' | awk '{printf "%.4f", $1}')
	echo "time to target: not reached within the budget (best validation accuracy $best, target $target);"
	echo "  this trial's hyperparameters are one untuned draw of the plan (apf plan)"
fi
