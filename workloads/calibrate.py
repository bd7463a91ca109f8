#!/usr/bin/python3
"""Measures what a workload's budget section needs, with apf itself: one
sealed NAdamW trial (the baseline's study 0, trial 1) per workload, for
--seconds of submission time on a scratch copy whose targets cannot be met,
under --clock (default cpu). From its log:

  steps_per_s    training steps per second of submission time;
  eval_s         the median wall time of one evaluation (the three splits,
                 the trial frozen);
  cpu_use        the trial's CPU time over its wall time and threads (how
                 close the cpu clock is to the wall clock on a quiet machine);
  eval_period_s  the period at which evaluation takes 15% of a run's time
                 (AlgoPerf's rule: 10 to 20%): eval_s * 0.85 / 0.15;
  step_hint      the steps NAdamW makes in --budget seconds (AlgoPerf's
                 step hint is the target-setting runs' step count), for
                 [workload] max_steps.

    workloads/calibrate.py fmnist_mlp clicks_dlrm ... [--seconds 30]
        [--budget fmnist_mlp=45 ...] [--record workloads/targets/calibration.json]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import (APF_BIN, ROOT, apf, copy_baseline, ini_get,  # noqa: E402
                            ini_set, make_column)

EVAL_SHARE = 0.15


def measure(run, unit_glob_workload):
    import glob
    logs = glob.glob(os.path.join(run, "study_0", unit_glob_workload, "trial_1", "log.jsonl"))
    recs = [json.loads(l) for l in open(logs[0])]
    start = [r for r in recs if r["event"] == "run_start"][0]
    blocks = [r for r in recs if r["event"] == "step_block"]
    evals = [r for r in recs if r["event"] == "eval"]
    # The first block is one step and the attach of the data: left out.
    body = [b for b in blocks if b["first_step"] > 1]
    steps = sum(b["last_step"] - b["first_step"] + 1 for b in body)
    sub = (blocks[-1]["accumulated_submission_ns"] - blocks[0]["accumulated_submission_ns"]) / 1e9
    wall = sum(b["end_ns"] - b["start_ns"] for b in body) / 1e9
    cpu = sum(b["cpu_ns"] for b in body) / 1e9
    return {"steps": blocks[-1]["last_step"], "steps_per_s": steps / sub,
            "eval_s": statistics.median((e["end_ns"] - e["start_ns"]) / 1e9 for e in evals),
            "cpu_use": cpu / (wall * start["threads"]), "threads": start["threads"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--budget", action="append", default=[], metavar="W=S",
                    help="the budget planned for W (for its step hint)")
    ap.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    ap.add_argument("--record")
    ap.add_argument("--workloads-dir", default=os.path.join(ROOT, "workloads"))
    args = ap.parse_args()
    budgets = dict((k, float(v)) for k, v in (b.split("=", 1) for b in args.budget))
    work = tempfile.mkdtemp(prefix="apf-calibrate-")
    env = dict(os.environ, APF_HOME=os.path.join(work, "home"),
               APF_WORKLOADS_DIR=os.path.join(work, "workloads"))
    out = {"clock": args.clock, "seconds": args.seconds, "workloads": {}}
    try:
        for w in args.workloads:
            name, _, _ = make_column(w, args.workloads_dir, env["APF_WORKLOADS_DIR"], "calibrate")
            ini = os.path.join(env["APF_WORKLOADS_DIR"], name, "workload.ini")
            ini_set(ini, "budget.cpu", "max_runtime_s", f"{args.seconds:g}")
            period = min(float(ini_get(ini, "budget.cpu", "eval_period_s")), args.seconds / 6)
            ini_set(ini, "budget.cpu", "eval_period_s", f"{period:g}")
            ini_set(ini, "workload", "max_steps", "1000000")
            src = copy_baseline(work, "nadamw", "sub_" + name, 1, 1)
            entry = os.path.join(work, name + ".apf")
            apf("pack", src, "-w", name, "-o", entry, env=env, who="calibrate")
            run = os.path.join(work, name + ".run")
            p = subprocess.run([APF_BIN, "run", entry, "-o", run, "-q", "--clock", args.clock],
                               env=env, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"apf: calibrate: {name}: {p.stderr.strip()}")
            m = measure(run, name)
            m["eval_period_s"] = m["eval_s"] * (1 - EVAL_SHARE) / EVAL_SHARE
            b = budgets.get(w)
            if b:
                m["budget_s"] = b
                m["step_hint"] = int(round(m["steps_per_s"] * b, -2))
            out["workloads"][w] = m
            print(f"{w}: {m['steps_per_s']:.1f} steps/s, eval {m['eval_s']:.2f} s "
                  f"(period for 15%: {m['eval_period_s']:.2f} s), CPU use {m['cpu_use']:.2f}"
                  + (f", step hint at {b:g} s: {m['step_hint']}" if b else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.record:
        with open(args.record, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
