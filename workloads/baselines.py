#!/usr/bin/python3
"""Compares the four external-tuning baselines across workloads and their
variants, as the AlgoPerf paper does (Dahl, Schneider et al., 2023,
section 7): time-to-target of each baseline at the derived target and at two
easier ones, the ranking of the baselines per workload, whether that ranking
holds between workloads and between a base workload and its variants, and
`apf score` over the baselines' runs.

    workloads/baselines.py clicks_dlrm clicks_dlrm:layernorm text_lm ... \\
        --trials 2 --out runs/baselines [--record workloads/targets/baselines.json]

Each baseline is packed once for every column (a workload, or W:V, the
variant V of workload W run as a workload of its own, named W-V) and run
with `apf run` in the sealed runner: one study of --trials trials drawn
from the algoperf-0.6 search space, on scratch copies of the workloads whose
targets cannot be met, so every trial uses its whole budget (or its
max_steps) and one run answers every target level. Runs already complete in
--out are reused, so an interrupted comparison resumes.

Targets per column, in the workload's metric:
  level 0  the workload's derived validation target (workload.ini, targets =
           derived); for a variant, or a workload whose targets are not yet
           derived, the median of the four baselines' best validation values;
  level 1  the error 5% worse than level 0;
  level 2  the error 15% worse than level 0;
where the error is 1 - metric for metrics to maximise (accuracy, SSIM) and
the metric itself for those to minimise (log loss, cross-entropy). A
baseline's time-to-target is AlgoPerf's external-tuning figure for one
study: the fastest of its trials, in submission seconds, to an eval that
meets the target; "-" when none does.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import (BASELINES, ROOT, apf, copy_baseline, evals_of,  # noqa: E402
                            ini_set)

LEVELS = [("derived", 1.0), ("easier (+5% error)", 1.05), ("easier (+15% error)", 1.15)]


def ini_get(path, section, key):
    m = re.search(rf"^\[{re.escape(section)}\][^\[]*?^{re.escape(key)}[ \t]*=[ \t]*([^\n;]*)",
                  open(path).read(), re.M | re.S)
    return m.group(1).strip() if m else None


def variant_keys(path, variant):
    """The [variant.V] keys of a workload.ini, in order."""
    text = open(path).read()
    m = re.search(rf"^\[variant\.{re.escape(variant)}\][ \t]*\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        sys.exit(f"apf: baselines: {path}: no [variant.{variant}]")
    out = []
    for line in m.group(1).splitlines():
        line = line.split(";", 1)[0].strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out.append((k.strip(), v.strip()))
    return out


def make_column(col, src_dir, wl_dir):
    """Copies workload `col` (W or W:V) into wl_dir with unreachable
    targets; returns (name, real workload.ini, variant or None)."""
    base, _, variant = col.partition(":")
    origin = os.path.join(src_dir, base)
    real = os.path.join(origin, "workload.ini")
    if not os.path.exists(real):
        sys.exit(f"apf: baselines: {col}: no workload {base} in {src_dir}")
    name = f"{base}-{variant}" if variant else base
    dst = os.path.join(wl_dir, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(origin, dst)
    ini = os.path.join(dst, "workload.ini")
    path = ini_get(ini, "dataset", "path")
    if path and not path.startswith("/"):
        ini_set(ini, "dataset", "path", os.path.realpath(os.path.join(origin, path)))
    if variant:
        for k, v in variant_keys(real, variant):
            if k not in ("validation_target", "test_target"):
                ini_set(ini, "model", k, v)
        ini_set(ini, "workload", "name", name)
        text = open(ini).read()
        # the copy is the variant: no variants of its own
        text = re.sub(r"^\[variant\.[^\]]*\].*?(?=^\[|\Z)", "", text, flags=re.M | re.S)
        with open(ini, "w") as f:
            f.write(text)
    higher = ini_get(ini, "workload", "direction") == "max"
    ini_set(ini, "workload", "validation_target", "2" if higher else "-1")
    ini_set(ini, "workload", "test_target", "2" if higher else "-1")
    return name, real, variant or None


def run_complete(run):
    """Whether `apf status` says every unit of the run is done."""
    if not os.path.exists(os.path.join(run, "run.json")):
        return False
    p = subprocess.run([os.environ.get("APF_BIN", os.path.join(ROOT, "build", "apf")),
                        "status", run, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return False
    units = json.loads(p.stdout).get("units", [])
    return bool(units) and all(u.get("state") == "done" for u in units)


def run_series(run):
    """column -> trial -> [(submission s, metrics)] of a baseline's run."""
    out = {}
    for unit, evs in evals_of(run).items():
        _, workload, trial = unit.split("/")
        out.setdefault(workload, {})[trial] = [
            (e["accumulated_submission_ns"] / 1e9, e["metrics"]) for e in evs]
    return out


def relax(target, factor, higher):
    """The target whose error is `factor` times target's."""
    return 1.0 - (1.0 - target) * factor if higher else target * factor


def meets(v, target, higher):
    return v >= target if higher else v <= target


def time_to(trials, key, target, higher):
    best = None
    for evs in trials.values():
        for t, m in evs:
            if key in m and meets(m[key], target, higher):
                best = t if best is None else min(best, t)
                break
    return best


def ranking(times):
    """Baselines ordered by time (reached first), those that never reach it
    last in a tie; ties keep the list's order."""
    return sorted(times, key=lambda b: (times[b] is None, times[b] or 0.0))


def kendall_tau(a, b):
    """Kendall's tau between two orderings of the same items."""
    pos = {x: i for i, x in enumerate(b)}
    n, s = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            s += 1 if pos[a[i]] < pos[a[j]] else -1
    return s / (n * (n - 1) / 2) if n > 1 else 1.0


def fmt_time(t):
    return "-" if t is None else f"{t:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("columns", nargs="+", metavar="W[:VARIANT]")
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--out", required=True, help="the runs go here (kept; reused when complete)")
    ap.add_argument("--threads", help="apf run --threads")
    ap.add_argument("--record", help="write the figures here (JSON)")
    ap.add_argument("--workloads-dir", default=os.path.join(ROOT, "workloads"))
    args = ap.parse_args()
    baselines = args.baselines.split(",")

    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ)
    env["APF_HOME"] = os.path.join(args.out, "home")
    wl_dir = os.path.join(args.out, "workloads")
    os.makedirs(wl_dir, exist_ok=True)
    cols = [make_column(c, args.workloads_dir, wl_dir) for c in args.columns]
    names = [c[0] for c in cols]
    if len(set(names)) != len(names):
        sys.exit("apf: baselines: a column is named twice")
    env["APF_WORKLOADS_DIR"] = wl_dir
    listing = {w["name"]: w for w in json.loads(apf("workloads", "--json", env=env))["workloads"]}

    runs = {}
    for b in baselines:
        run = os.path.join(args.out, b + ".run")
        runs[b] = run
        entry = os.path.join(args.out, b + ".apf")
        if run_complete(run) and os.path.exists(entry):
            print(f"{b}: reusing {run}", flush=True)
            continue
        src = copy_baseline(args.out, b, "sub_" + b, studies=1, trials=args.trials)
        apf("pack", src, "-w", ",".join(names), "-o", entry, env=env)
        shutil.rmtree(run, ignore_errors=True)
        print(f"{b}: {args.trials} trials on {len(names)} workloads", flush=True)
        extra = ["--threads", args.threads] if args.threads else []
        apf("run", entry, "-o", run, "-q", *extra, env=env)

    data = {b: run_series(runs[b]) for b in baselines}
    record = {"baselines": baselines, "trials": args.trials, "columns": []}
    lines = []
    rank0 = {}
    for name, real, variant in cols:
        spec = listing[name]
        metric, higher = spec["metric"], spec["direction"] == "max"
        key = f"validation/{metric}"
        bests = {}
        for b in baselines:
            vals = [m[key] for evs in data[b].get(name, {}).values() for _, m in evs if key in m]
            if not vals:
                sys.exit(f"apf: baselines: {runs[b]}: no evals of {name}")
            bests[b] = max(vals) if higher else min(vals)
        derived = (not variant and ini_get(real, "workload", "targets") == "derived")
        t0 = float(ini_get(real, "workload", "validation_target")) if derived \
            else statistics.median(bests.values())
        col = {"column": name, "metric": metric, "direction": spec["direction"],
               "best_validation": bests, "levels": []}
        lines.append(f"\n{name} ({metric}, {'max' if higher else 'min'}; "
                     f"level 0 {'derived' if derived else 'median of the baselines best'})")
        lines.append("| target | " + " | ".join(baselines) + " | ranking |")
        lines.append("| --- |" + " --- |" * (len(baselines) + 1))
        for li, (label, factor) in enumerate(LEVELS):
            target = relax(t0, factor, higher)
            times = {b: time_to(data[b].get(name, {}), key, target, higher) for b in baselines}
            order = ranking(times)
            if li == 0:
                rank0[name] = order
            col["levels"].append({"label": label, "target": target, "time_s": times,
                                  "ranking": order})
            lines.append(f"| {label} {target:.4f} | " +
                         " | ".join(fmt_time(times[b]) for b in baselines) +
                         " | " + " < ".join(b for b in order if times[b] is not None) + " |")
        lines.append("| best validation | " +
                     " | ".join(f"{bests[b]:.4f}" for b in baselines) + " | |")
        record["columns"].append(col)

    lines.append("\nRanking stability at level 0 (Kendall's tau, 1 = the same order):")
    first = names[0]
    for name, _, variant in cols:
        if variant:
            base = name.split("-", 1)[0]
            if base in rank0:
                tau = kendall_tau(rank0[base], rank0[name])
                lines.append(f"  {name} against its base {base}: tau {tau:+.2f}")
                record.setdefault("stability", []).append({"a": base, "b": name, "tau": tau})
        elif name != first:
            tau = kendall_tau(rank0[first], rank0[name])
            lines.append(f"  {name} against {first}: tau {tau:+.2f}")
            record.setdefault("stability", []).append({"a": first, "b": name, "tau": tau})

    # apf score over the four runs, at level 0 of every column.
    targets = {"workloads": {c["column"]: {"target_metric_name": c["metric"],
                                          "validation_target_value": c["levels"][0]["target"]}
                             for c in record["columns"]}}
    tfile = os.path.join(args.out, "targets.json")
    with open(tfile, "w") as f:
        json.dump(targets, f, indent=2)
    score = apf("score", *[f"{runs[b]}={b}" for b in baselines], "--targets", tfile, env=env)
    lines.append("\napf score " + " ".join(f"{b}.run={b}" for b in baselines) +
                 " --targets targets.json:\n" + score)
    record["score"] = score
    print("\n".join(lines))
    if args.record:
        with open(args.record, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
