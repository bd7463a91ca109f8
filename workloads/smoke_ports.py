#!/usr/bin/python3
"""Runs each port of the leading algorithms (submissions/<port>) sealed on
every workload and audits the run: the check that a port works everywhere,
not a timing campaign (the budgets are cut, and nothing is compared).

    workloads/smoke_ports.py [--ports shampoo,muon,...] [--scale 0.1]
        [--out DIR (default $TMPDIR/apf-smoke-ports)] [--workloads fmnist_mlp,...]

Each port is packed as a self-tuning entry (one study, one trial, its
published defaults) against scratch copies of the workloads whose CPU
budget is --scale of the real one and whose eval period is a third of
that, so every unit evaluates at least twice and replay has intervals to
check; then `apf run` and `apf verify --reeval --replay all`. Prints one
line per port and workload: steps, best validation metric, the unit's
state, and verify's outcome; exits 1 when any unit failed or any audit did
not pass. Runs already complete in --out are reused.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import APF_BIN, ROOT, evals_of, ini_get, ini_set, scratch_copy  # noqa: E402

PORTS = ["shampoo", "muon", "ademamix", "lion", "cautious_nadamw"]
WORKLOADS = ["clicks_dlrm", "fmnist_cnn", "fmnist_mlp", "fmnist_unet", "text_lm"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", default=",".join(PORTS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "apf-smoke-ports"))
    a = ap.parse_args()
    if not 0 < a.scale <= 1:
        sys.exit("apf: smoke_ports: --scale: in (0, 1]")
    out = os.path.abspath(a.out)
    wl_dir = os.path.join(out, "workloads")
    os.makedirs(wl_dir, exist_ok=True)
    workloads = a.workloads.split(",")
    for w in workloads:
        ini = scratch_copy(os.path.join(ROOT, "workloads", w), os.path.join(wl_dir, w))
        budget = float(ini_get(ini, "budget.cpu", "max_runtime_s")) * a.scale
        ini_set(ini, "budget.cpu", "max_runtime_s", f"{budget:g}")
        ini_set(ini, "budget.cpu", "eval_period_s", f"{budget / 3:g}")
    env = dict(os.environ, APF_WORKLOADS_DIR=wl_dir)
    bad = 0
    for port in a.ports.split(","):
        src = os.path.join(out, port)
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "submissions", port), src)
        ini = os.path.join(src, "submission.ini")
        text = open(ini).read().replace("ruleset = external", "ruleset = self")
        text = re.sub(r"^studies[ \t]*=.*\n", "", text, flags=re.M)
        text = text.replace("[tuning]\n", "[tuning]\nstudies = 1\n", 1)
        with open(ini, "w") as f:
            f.write(text)
        for space in ("tuning_search_space.ini", "tuning_search_space.json"):
            if os.path.exists(os.path.join(src, space)):
                os.remove(os.path.join(src, space))
        entry, run = os.path.join(out, f"{port}.apf"), os.path.join(out, f"{port}.run")
        if not os.path.exists(os.path.join(run, "run.json")):
            subprocess.run([APF_BIN, "pack", src, "-w", ",".join(workloads), "-o", entry],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            t0 = time.time()
            subprocess.run([APF_BIN, "run", entry, "-o", run, "-q"], env=env)
            print(f"{port}: ran in {time.time() - t0:.0f} s", flush=True)
        t0 = time.time()
        v = subprocess.run([APF_BIN, "verify", run, "--reeval", "--replay", "all", "--json"],
                           env=env, capture_output=True, text=True)
        try:
            checks = {c["name"]: c["outcome"] for c in json.loads(v.stdout)["checks"]}
        except (ValueError, KeyError):
            checks = {"verify": v.stderr.strip().splitlines()[-1:] or ["no output"]}
        verdict = "passed" if v.returncode == 0 else f"FAILED ({checks})"
        print(f"{port}: verify --reeval --replay all: {verdict} "
              f"({time.time() - t0:.0f} s)", flush=True)
        bad += v.returncode != 0
        st = json.loads(subprocess.run([APF_BIN, "status", run, "--json"], env=env,
                                       capture_output=True, text=True).stdout)
        states = {u["unit"].split("/")[1]: u["state"] for u in st["units"]}
        evs = evals_of(run)
        for w in workloads:
            unit = [u for u in evs if u.split("/")[1] == w]
            e = evs[unit[0]] if unit else []
            key = ini_get(os.path.join(wl_dir, w, "workload.ini"), "workload", "metric")
            vals = [x["metrics"].get(f"validation/{key}") for x in e]
            vals = [x for x in vals if x is not None]
            higher = ini_get(os.path.join(wl_dir, w, "workload.ini"), "workload",
                             "direction") == "max"
            best = (max if higher else min)(vals) if vals else float("nan")
            steps = e[-1]["global_step"] if e else 0
            state = states.get(w, "absent")
            bad += state != "done"
            print(f"  {port:16s} {w:12s} {state:8s} steps {steps:6d} "
                  f"evals {len(e):2d} best validation {key} {best:.4f}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
