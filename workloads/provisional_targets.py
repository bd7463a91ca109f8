#!/usr/bin/python3
"""Provisional targets for the workloads, from the reference AdamW.

AlgoPerf derives targets (docs/design.md section 6, workloads/README.md): the best baselines,
tuned, then rerun; validation target = median over reruns of the best
validation metric; test target = the worst test metric among the reruns
that met the validation target. Until the runner and the baselines exist,
this script applies the same rule to one fixed, untuned configuration of
apf's reference AdamW (`apf train`), rerun with several seeds, and prints
the lines to put in workload.ini (with `targets = provisional`).

    workloads/provisional_targets.py [--apf build/apf] [--seeds 3] [WORKLOAD...]

Runs are bit-for-bit reproducible for a seed and thread count, so anyone
can recompute the numbers in workloads/README.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# workload: apf train options (an epoch of the 55k train split is 215 steps
# at batch 256 and 430 at batch 128; evaluations once an epoch)
CONFIGS = {
    "fmnist_mlp": ["--batch", "256", "--steps", "860", "--eval-every", "215",
                   "--lr", "1e-3", "--weight-decay", "1e-4", "--warmup", "0.05"],
    "fmnist_cnn": ["--batch", "128", "--steps", "1290", "--eval-every", "430",
                   "--lr", "2e-3", "--weight-decay", "1e-4", "--warmup", "0.05"],
    # 781 steps an epoch of the 200k train rows at batch 256; evaluations
    # every quarter epoch, since the model overfits within two epochs
    "clicks_dlrm": ["--batch", "256", "--steps", "1560", "--eval-every", "195",
                    "--lr", "1e-3", "--weight-decay", "1e-4", "--warmup", "0.05"],
}

# workload: (metric, direction) where it is not accuracy, higher better
METRICS = {"clicks_dlrm": ("log_loss", -1)}


def run(apf, workload, seed):
    cmd = [apf, "train", workload, "--json", "--seed", str(seed), "--threads", "2",
           *CONFIGS[workload]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"apf: provisional targets: {' '.join(cmd)}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def derive(runs, metric="accuracy", direction=1):
    """The target rule (workloads/README.md), in the metric's direction: the worst
    test value is the lowest of a metric to maximise, the highest of one to
    minimise."""
    better = max if direction > 0 else min
    worse = min if direction > 0 else max
    best = [better(e["validation_" + metric] for e in r["evals"]) for r in runs]
    val_target = statistics.median(best)
    tests, times = [], []
    for r in runs:
        hit = next((e for e in r["evals"]
                    if (e["validation_" + metric] - val_target) * direction >= 0), None)
        if hit:
            tests.append(hit["test_" + metric])
            times.append(hit["seconds"])
    return val_target, worse(tests), best, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apf", default=os.path.join(ROOT, "build", "apf"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("workloads", nargs="*", default=sorted(CONFIGS))
    a = ap.parse_args()
    for w in a.workloads:
        runs = [run(a.apf, w, s) for s in range(a.seeds)]
        metric, direction = METRICS.get(w, ("accuracy", 1))
        val, test, best, times = derive(runs, metric, direction)
        print(f"# {w}: best validation {metric} per seed {', '.join(f'{b:.4f}' for b in best)}; "
              f"target met after {', '.join(f'{t:.0f}' for t in times)} s of training")
        print(f"[workload] # {w}\nvalidation_target = {val:.4f}\ntest_target = {test:.4f}\n"
              f"targets = provisional")


if __name__ == "__main__":
    main()
