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
meets the target; "-" when none does. Evals come once an eval period, so
baselines that meet a target at the same eval are ranked as a tie; the
rankings of two columns are compared by Kendall's tau-b at each level
("n/a" where one ranking is a single tie, e.g. when no baseline met it).
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
from derive_targets import (APF_BIN, BASELINES, ROOT, copy_baseline,  # noqa: E402
                            evals_of, ini_get, make_column as _make_column,
                            run_complete, run_status)
import derive_targets  # noqa: E402

LEVELS = [("derived", 1.0), ("easier (+5% error)", 1.05), ("easier (+15% error)", 1.15)]


def make_column(col, src_dir, wl_dir):
    return _make_column(col, src_dir, wl_dir, who="baselines")


def apf(*args, env):
    return derive_targets.apf(*args, env=env, who="baselines")


def failed_units(run):
    st = run_status(run) or {"units": []}
    return [u["unit"] for u in st["units"] if u["state"] == "failed"]


def run_series(run):
    """column -> trial -> [(submission s, eval index, metrics)] of a
    baseline's run."""
    out = {}
    for unit, evs in evals_of(run).items():
        _, workload, trial = unit.split("/")
        out.setdefault(workload, {})[trial] = [
            (e["accumulated_submission_ns"] / 1e9, e["index"], e["metrics"]) for e in evs]
    return out


def relax(target, factor, higher):
    """The target whose error is `factor` times target's."""
    return 1.0 - (1.0 - target) * factor if higher else target * factor


def meets(v, target, higher):
    return v >= target if higher else v <= target


def time_to(trials, key, target, higher):
    """(submission s, eval index) of the fastest trial's first eval that
    meets target, or None."""
    best = None
    for evs in trials.values():
        for t, idx, m in evs:
            if key in m and meets(m[key], target, higher):
                if best is None or (idx, t) < (best[1], best[0]):
                    best = (t, idx)
                break
    return best


def ranking(hits):
    """The baselines in groups, fastest first: hits (baseline -> (s, eval
    index) or None) at the same eval index are a tie, since evals come once
    an eval period and nothing tells apart two trials that met the target
    between the same two evals; those that never meet it are the last
    group."""
    idx = sorted({h[1] for h in hits.values() if h is not None})
    groups = [[b for b in hits if hits[b] is not None and hits[b][1] == i] for i in idx]
    missed = [b for b in hits if hits[b] is None]
    return groups + ([missed] if missed else [])


def kendall_tau(a, b):
    """Kendall's tau-b between two rankings in groups (ties allowed) of the
    same items; None when either ranking is one big tie."""
    ra = {x: i for i, g in enumerate(a) for x in g}
    rb = {x: i for i, g in enumerate(b) for x in g}
    items = sorted(ra)
    conc = disc = ta = tb = 0
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            da = ra[items[i]] - ra[items[j]]
            db = rb[items[i]] - rb[items[j]]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ta += 1
            elif db == 0:
                tb += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    den = ((conc + disc + ta) * (conc + disc + tb)) ** 0.5
    return (conc - disc) / den if den else None


def fmt_order(groups, hits):
    met = [g for g in groups if all(hits[b] is not None for b in g)]
    return " < ".join(" = ".join(g) for g in met) or "none met it"


def fmt_tau(tau):
    return "n/a" if tau is None else f"{tau:+.2f}"


def fmt_time(h):
    return "-" if h is None else f"{h[0]:.1f}"


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
        p = subprocess.run([APF_BIN, "run", entry, "-o", run, "-q", *extra], env=env,
                           capture_output=True, text=True)
        # A run whose trials failed exits non-zero; that is a result when
        # every unit ended. Anything else (no run, units left) is an error.
        if p.returncode != 0 and not run_complete(run):
            sys.exit(f"apf run {entry}: {p.stderr.strip()}")
        for u in failed_units(run):
            print(f"  {u}: failed (its trial.log says why); its evals before the failure count",
                  flush=True)

    data = {b: run_series(runs[b]) for b in baselines}
    ends = {}
    for b in baselines:
        ends[b] = {}
        for unit, evs in evals_of(runs[b]).items():
            _, workload, trial = unit.split("/")
            ends[b].setdefault(workload, {})[trial] = max(e["global_step"] for e in evs)
    record = {"baselines": baselines, "trials": args.trials, "columns": []}
    lines = []
    rank0 = {}
    for name, real, variant in cols:
        spec = listing[name]
        metric, higher = spec["metric"], spec["direction"] == "max"
        key = f"validation/{metric}"
        bests = {}
        for b in baselines:
            vals = [m[key] for evs in data[b].get(name, {}).values() for _, _, m in evs if key in m]
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
            hits = {b: time_to(data[b].get(name, {}), key, target, higher) for b in baselines}
            order = ranking(hits)
            rank0.setdefault(name, []).append(order)
            col["levels"].append({"label": label, "target": target,
                                  "time_s": {b: h and h[0] for b, h in hits.items()},
                                  "eval_index": {b: h and h[1] for b, h in hits.items()},
                                  "ranking": order})
            lines.append(f"| {label} {target:.4f} | " +
                         " | ".join(fmt_time(hits[b]) for b in baselines) +
                         " | " + fmt_order(order, hits) + " |")
        lines.append("| best validation | " +
                     " | ".join(f"{bests[b]:.4f}" for b in baselines) + " | |")
        # A budget in seconds gives a loaded machine fewer steps: each
        # trial's steps say whether the baselines ran alike.
        steps = {b: [ends[b].get(name, {}).get(t) for t in sorted(data[b].get(name, {}))]
                 for b in baselines}
        col["steps"] = steps
        lines.append("| steps at the last eval (per trial) | " +
                     " | ".join("/".join("?" if n is None else str(n) for n in steps[b])
                                for b in baselines) + " | |")
        record["columns"].append(col)

    lines.append("\nRanking stability (Kendall's tau-b at levels 0 / 1 / 2; 1: the same "
                 "order, -1: reversed; baselines meeting a target at the same eval tie):")
    first = names[0]

    def compare(a, b, what):
        taus = [kendall_tau(x, y) for x, y in zip(rank0[a], rank0[b])]
        lines.append(f"  {b} against {what}: " + " / ".join(fmt_tau(t) for t in taus))
        record.setdefault("stability", []).append({"a": a, "b": b, "tau": taus})

    for name, _, variant in cols:
        if variant:
            base = name.split("-", 1)[0]
            if base in rank0:
                compare(base, name, f"its base {base}")
        elif name != first:
            compare(first, name, first)

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
