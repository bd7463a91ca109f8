#!/usr/bin/python3
"""Derives a workload's validation and test targets the way AlgoPerf does
(DESIGN.md section 5), with apf itself:

1. tune: every baseline runs a small external-tuning plan (one study of
   `--trials` trials) for its full budget;
2. pick: the baseline and trial with the best validation metric;
3. rerun: that baseline with exactly those hyperparameters, `--reruns`
   times with different randomness (one trial per study);
4. targets: validation target = the median over reruns of the best
   validation metric; test target = the worst test metric, at the eval that
   met the validation target, among the reruns that met it.

Runs go through `apf pack` and `apf run` on a scratch copy of the workload
whose targets cannot be met, so no trial stops early. The result is written
into workloads/<name>/workload.ini (targets = derived) unless --dry-run, and
a JSON record of every run's best metrics and time goes to --record.

    workloads/derive_targets.py fmnist_mlp [--trials 3] [--reruns 5]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = ["nadamw", "adamw", "sgd_nesterov", "heavy_ball"]


APF_BIN = os.environ.get("APF_BIN", os.path.join(ROOT, "build", "apf"))


def apf(*args, env):
    p = subprocess.run([APF_BIN, *args],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"apf {' '.join(args[:2])}: {p.stderr.strip()}")
    return p.stdout


def evals_of(run_dir):
    """unit -> its eval records: from each unit's own log, or the single
    log of a run made before per-unit logs."""
    import glob
    out = {}
    single = os.path.join(run_dir, "log.jsonl")
    logs = [single] if os.path.exists(single) else sorted(
        glob.glob(os.path.join(run_dir, "study_*", "*", "trial_*", "log.jsonl")))
    for log in logs:
        with open(log) as f:
            for line in f:
                r = json.loads(line)
                if r["event"] == "eval":
                    out.setdefault(r["unit"], []).append(r)
    return out


def series(evs, vkey, tkey):
    """A unit's evals as the record keeps them: step, submission seconds
    (the time a target is met at) and the two metrics."""
    return [{"step": e["global_step"], "submission_s": e["accumulated_submission_ns"] / 1e9,
             vkey: e["metrics"][vkey], tkey: e["metrics"][tkey]} for e in evs]


def ini_get(path, section, key):
    m = re.search(rf"^\[{re.escape(section)}\][^\[]*?^{re.escape(key)}[ \t]*=[ \t]*([^\n;]*)",
                  open(path).read(), re.M | re.S)
    return m.group(1).strip() if m else None


def unreachable_targets(ini):
    """Sets a scratch copy's targets where no trial meets them, so every
    trial runs its whole budget."""
    higher = ini_get(ini, "workload", "direction") == "max"
    ini_set(ini, "workload", "validation_target", "2" if higher else "-1")
    ini_set(ini, "workload", "test_target", "2" if higher else "-1")


def scratch_copy(origin, dst):
    """Copies the workload folder origin to dst, its relative dataset path
    made absolute (it is relative to origin); returns the copy's ini."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(origin, dst)
    ini = os.path.join(dst, "workload.ini")
    path = ini_get(ini, "dataset", "path")
    if path and not path.startswith("/"):
        ini_set(ini, "dataset", "path", os.path.realpath(os.path.join(origin, path)))
    return ini


def ini_set(path, section, key, value):
    text = open(path).read()
    pat = re.compile(rf"(\[{re.escape(section)}\][^\[]*?^){re.escape(key)}[ \t]*=[^\n]*", re.M | re.S)
    new, n = pat.subn(lambda m: f"{m.group(1)}{key} = {value}", text, count=1)
    if n != 1:
        sys.exit(f"{path}: no [{section}] {key}")
    with open(path, "w") as f:
        f.write(new)


def copy_baseline(work, baseline, name, studies, trials):
    """A baseline under external tuning with a plan of studies x trials."""
    src = os.path.join(work, name)
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "submissions", "baselines", baseline), src)
    with open(os.path.join(src, "submission.ini"), "w") as f:
        f.write(f"[submission]\nname = {baseline}\nauthors = apf baselines\n"
                f"ruleset = external\n\n[tuning]\nrules = algoperf-0.6\n"
                f"studies = {studies}\ntrials = {trials}\n")
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--record", help="write every run's figures here (JSON)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--keep", help="keep the runs in this directory")
    ap.add_argument("--workloads-dir", default=os.path.join(ROOT, "workloads"))
    ap.add_argument("--tuning-runs", metavar="DIR",
                    help="take step 1 from workloads/baselines.py's runs in DIR "
                    "(DIR/<baseline>.run and .apf, which hold this workload's "
                    "trials) instead of running it again")
    args = ap.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="apf-targets-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env["APF_HOME"] = os.path.join(work, "home")
    wl_dir = os.path.join(work, "workloads")
    shutil.rmtree(wl_dir, ignore_errors=True)
    origin = os.path.join(args.workloads_dir, args.workload)
    ini = scratch_copy(origin, os.path.join(wl_dir, args.workload))
    unreachable_targets(ini)
    env["APF_WORKLOADS_DIR"] = wl_dir
    listing = json.loads(apf("workloads", "--json", env=env))["workloads"]
    spec = [w for w in listing if w["name"] == args.workload][0]
    metric = spec["metric"]
    higher = spec["direction"] == "max"
    better = max if higher else min
    vkey, tkey = f"validation/{metric}", f"test/{metric}"

    record = {"workload": args.workload, "metric": metric, "tuning": [], "reruns": []}
    best = None  # (value, baseline, hparams)
    for b in args.baselines.split(","):
        if args.tuning_runs:
            entry = os.path.join(args.tuning_runs, b + ".apf")
            run = os.path.join(args.tuning_runs, b + ".run")
            if not os.path.exists(entry) or not os.path.isdir(run):
                sys.exit(f"apf: derive_targets: {run}: no tuning run of {b}")
            print(f"tuning {b}: the trials of {run}", flush=True)
            # its entry is signed by the key baselines.py made there
            plan_env = dict(env, APF_HOME=os.path.join(args.tuning_runs, "home"))
        else:
            plan_env = env
            src = copy_baseline(work, b, "sub_" + b, studies=1, trials=args.trials)
            entry = os.path.join(work, b + ".apf")
            apf("pack", src, "-w", args.workload, "-o", entry, env=env)
            run = os.path.join(work, b + ".run")
            shutil.rmtree(run, ignore_errors=True)
            print(f"tuning {b}: {args.trials} trials", flush=True)
            apf("run", entry, "-o", run, "-q", env=env)
        plan = json.loads(apf("plan", entry, "--json", env=plan_env))
        units = {u: e for u, e in evals_of(run).items()
                 if u.split("/")[1] == args.workload}
        if not units:
            sys.exit(f"apf: derive_targets: {run}: no trial of {args.workload}")
        for unit, evs in sorted(units.items()):
            trial = int(unit.rsplit("_", 1)[1])
            hp = [u["hparams"] for u in plan["units"]
                  if u["trial"] == trial and u["workload"] == args.workload][0]
            v = better(e["metrics"][vkey] for e in evs)
            record["tuning"].append({"baseline": b, "unit": unit, "hparams": hp,
                                     "best_validation": v, "evals": series(evs, vkey, tkey)})
            print(f"  {unit}: best {vkey} {v:.4f}", flush=True)
            if best is None or better(v, best[0]) == v and v != best[0]:
                best = (v, b, hp)
    v, b, hp = best
    print(f"best: {b} with {hp} ({vkey} {v:.4f})", flush=True)

    # Rerun the best setting: a search space of single points.
    src = copy_baseline(work, b, "rerun", studies=args.reruns, trials=1)
    with open(os.path.join(src, "tuning_search_space.ini"), "w") as f:
        for k, val in hp.items():
            f.write(f"[{k}]\nfeasible_points = {val}\n\n")
    entry = os.path.join(work, "rerun.apf")
    apf("pack", src, "-w", args.workload, "-o", entry, env=env)
    run = os.path.join(work, "rerun.run")
    shutil.rmtree(run, ignore_errors=True)
    print(f"rerunning {b}: {args.reruns} times", flush=True)
    apf("run", entry, "-o", run, "-q", env=env)
    bests = []
    for unit, evs in sorted(evals_of(run).items()):
        bv = better(e["metrics"][vkey] for e in evs)
        bests.append((bv, evs))
        record["reruns"].append({"unit": unit, "best_validation": bv,
                                 "evals": series(evs, vkey, tkey)})
    val_target = statistics.median(bv for bv, _ in bests)
    tests = []
    for _, evs in bests:
        hit = [e for e in evs if (e["metrics"][vkey] >= val_target if higher
                                  else e["metrics"][vkey] <= val_target)]
        if hit:
            tests.append(hit[0]["metrics"][tkey])
    test_target = min(tests) if higher else max(tests)
    record.update({"baseline": b, "hparams": hp, "validation_target": val_target,
                   "test_target": test_target})
    print(f"targets: validation {val_target:.4f}, test {test_target:.4f}", flush=True)
    if args.record:
        with open(args.record, "w") as f:
            json.dump(record, f, indent=2)
    if not args.dry_run:
        real = os.path.join(origin, "workload.ini")
        ini_set(real, "workload", "validation_target", f"{val_target:.4f}")
        ini_set(real, "workload", "test_target", f"{test_target:.4f}")
        ini_set(real, "workload", "targets", "derived")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
