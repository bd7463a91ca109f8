#!/bin/sh
# make demo: the main job on the built-in default. Two submissions - the
# NAdamW and AdamW baselines, each at the configuration fmnist_mlp's
# target-setting runs found best for it (workloads/targets/fmnist_mlp.json,
# one search-space point) - are packed, run in the sealed runner on
# fmnist_mlp as one study of three trials at that point (three seeds: a
# study scores its fastest trial, and the target, the median of the
# target-setting reruns' best, was met by 7 of 10 single runs of the
# best configuration within the budget), each trial a 40 s budget under
# --clock cpu (the trial's CPU time over 2 cores, which a busy machine
# cannot move), verified with a re-evaluation and a replay, scored
# against each other and reported. It ends with each one's time-to-target
# and score. Signing keys live in
# $APF_HOME (default ~/.config/apf); one is created on first use.
set -eu
build=${1:-build}
apf="$build/apf"
out="$build/demo"
record=workloads/targets/fmnist_mlp.json
mkdir -p "$out"
rm -rf "$out"/*.apf "$out"/*.run "$out"/*.html "$out"/src

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

# Each baseline as a submission of one study of three trials, each at the
# best point its target-setting trials found on fmnist_mlp.
for algo in nadamw adamw; do
	python3 - "$record" "$algo" "$out/src/$algo" <<'PY'
import json, os, shutil, sys
record, algo, dst = sys.argv[1:4]
rec = json.load(open(record))
best = max((t for t in rec["tuning"] if t["algorithm"] == algo),
           key=lambda t: t["best_validation"] if rec["direction"] == "max" else -t["best_validation"])
shutil.copytree(os.path.join("submissions", "baselines", algo), dst)
with open(os.path.join(dst, "submission.ini"), "w") as f:
    f.write(f"[submission]\nname = {algo}\nauthors = apf baselines\nruleset = external\n\n"
            "[tuning]\nrules = algoperf-0.6\nstudies = 1\ntrials = 3\n")
with open(os.path.join(dst, "tuning_search_space.ini"), "w") as f:
    f.write(f"; {algo}'s best point of fmnist_mlp's target-setting trials ({best['unit']}),\n"
            "; once for each trial: the trials differ by their seeds only\n")
    for n in (1, 2, 3):
        f.write(f"\n[point {n}]\n")
        for k, v in best["hparams"].items():
            f.write(f"{k} = {v!r}\n")
PY
	echo "== apf pack $algo (tuned for fmnist_mlp) -w fmnist_mlp"
	"$apf" pack "$out/src/$algo" -w fmnist_mlp -o "$out/$algo.apf" $unsealed
done

echo "== apf plan $out/nadamw.apf"
"$apf" plan "$out/nadamw.apf"

for algo in nadamw adamw; do
	echo "== apf run $out/$algo.apf --clock cpu (3 trials, each a budget of 40 s of training time)"
	"$apf" run "$out/$algo.apf" -o "$out/$algo.run" --clock cpu $unsealed
done

echo "== apf verify $out/nadamw.run --reeval --replay 1"
"$apf" verify "$out/nadamw.run" --reeval --replay 1

echo "== apf score --verify"
"$apf" score "$out/nadamw.run" "$out/adamw.run" --verify

echo "== apf report --verify"
"$apf" report "$out/nadamw.run" "$out/adamw.run" --verify -o "$out/demo.html" >/dev/null
echo
echo "run directories: $out/nadamw.run, $out/adamw.run"
echo "  log:          <run>/study_0/fmnist_mlp/trial_N/log.jsonl (signed head: log.dsse.json beside it;"
echo "                the run's index of unit heads: index.dsse.json)"
echo "  measurements: <run>/study_0/fmnist_mlp/trial_N/eval_measurements.csv"
echo "report:         $out/demo.html (one self-contained page; open it in a browser)"
"$apf" score "$out/nadamw.run" "$out/adamw.run" --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
for s in r["submissions"]:
    t = s["times"]["fmnist_mlp"]
    when = "not reached in the budget" if t in ("inf", None) else f"{float(t):.1f} s of submission time"
    name, score = s["name"], s["score"]
    print(f"time to target: {name}: {when}; score {score:.4f}")
'
