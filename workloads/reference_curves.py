#!/usr/bin/python3
"""Records a workload's reference curve: its validation metric against the
training examples seen (global_step x batch size) in the target-setting and
baseline runs, for the plausibility backstop of `apf verify` and `apf score`
(pkg/refcurve; workloads/README.md, "Reference curves").

    workloads/reference_curves.py fmnist_mlp --make-run /tmp/ref/fmnist_mlp \\
        --stop-at-target --from-record --out workloads/references/fmnist_mlp.json

Where the curves come from:
  --make-run DIR   runs the workload's target-setting configuration (the
                   baseline and hyperparameters of workloads/targets/<w>.json)
                   once, sealed, with `apf pack` and `apf run`, as
                   derive_targets.py reran it: a search space of single
                   points, the study of the fastest rerun that met the
                   target (--study to choose another), on a scratch copy of
                   the workload whose targets cannot be met (so the trial runs
                   on past them) with the budget times --budget-scale (a
                   loaded machine takes fewer steps a second; the curve is in
                   examples, so more seconds only let it go as far as a quiet
                   machine's run) and, with --eval-period, a shorter eval
                   period (a denser curve: the check's bound is the
                   reference's last eval below a level). --baseline B without
                   a targets record packs baseline B with its own search space
                   (the tests' blobs_mlp) and runs --study/--trial of it, or
                   with --all-units every unit of its plan.
                   --stop-at-target keeps the workload's targets instead, so
                   the trial stops at the first eval meeting both (the curve
                   then ends there: enough for the check, which is made at
                   the target, and less of a shared machine's time).
  --run DIR        an existing apf run directory: every unit of the workload.
  --from-record    the reruns and tuning trials that workloads/targets/<w>.json
                   recorded eval by eval (steps and metrics), at the batch
                   size the runs above logged for the same workload (every
                   baseline's get_batch_size is the same function).

The file: {"format": "apf-reference-curve-v1", "workload", "metric",
"direction", "runs": [{"label", "points": [[examples, value], ...] (in
order, the evals the rule can use: each improvement, the one before it,
the last), "batch_size", ...}], "provenance": {...}}. It lives in
<workloads dir>/references/<w>.json, outside the workload's own folder, so
the workload's tree digest (in every entry's manifest) does not change.
Timing is not used: only global_step, the logged batch size and the
metrics.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import (APF_BIN, ROOT, apf, copy_baseline, ini_get,  # noqa: E402
                            ini_set, scratch_copy, unreachable_targets)

FORMAT = "apf-reference-curve-v1"


def unit_logs(run_dir, workload):
    """{unit: log path} of the workload's units: each unit's own log, or
    the single log of a run made before per-unit logs."""
    single = os.path.join(run_dir, "log.jsonl")
    if os.path.exists(single):
        return {None: single}
    out = {}
    for log in sorted(glob.glob(os.path.join(run_dir, "study_*", workload, "trial_*",
                                             "log.jsonl"))):
        unit = os.path.relpath(os.path.dirname(log), run_dir)
        out[unit] = log
    return out


def unit_curves(run_dir, workload, key):
    """unit -> (batch size, [(global_step, value)]) of the workload's units,
    as a resume reads the log (evals after the one resumed from are lost)."""
    out = {}
    for only, log in unit_logs(run_dir, workload).items():
        with open(log) as f:
            for line in f:
                r = json.loads(line)
                unit = r.get("unit")
                if not unit or (only and unit != only) or unit.split("/")[1] != workload:
                    continue
                batch, evs = out.setdefault(unit, [None, []])
                if r["event"] == "clock_start":
                    if batch is not None and batch != r["batch_size"]:
                        sys.exit(f"apf: reference_curves: {log}: {unit} changes its "
                                 f"batch size ({batch}, then {r['batch_size']})")
                    out[unit][0] = r["batch_size"]
                elif r["event"] == "eval" and key in r["metrics"]:
                    evs.append((r["global_step"], r["metrics"][key]))
                elif r["event"] == "resume":
                    del evs[r["from_eval"]:]
    return {u: (b, evs) for u, (b, evs) in out.items() if b and evs}


def thin(points, higher):
    """The evals the check can use: each one that improves on the best so
    far, the one before it (the last eval below that level: the check's
    bound) and the last (how far the run went). The rule's figures are the
    same from these as from every eval."""
    keep, best = set(), None
    for i, (_, v) in enumerate(points):
        if best is None or (v > best if higher else v < best):
            keep.update((i, i - 1) if i else (i,))
            best = v
    keep.add(len(points) - 1)
    return [points[i] for i in sorted(keep)]


def met(v, target, higher):
    return v >= target if higher else v <= target


def first_met(points, target, higher):
    hit = [e for e, v in points if met(v, target, higher)]
    return hit[0] if hit else None


def spec_of(name, wl_dir, env):
    env = dict(env, APF_WORKLOADS_DIR=wl_dir)
    listing = json.loads(apf("workloads", "--json", env=env))["workloads"]
    found = [w for w in listing if w["name"] == name]
    if not found:
        sys.exit(f"apf: reference_curves: no workload {name} in {wl_dir}")
    return found[0]


def make_run(args, record, env):
    """One sealed run of the target-setting configuration; returns (run
    directory, what was done, for the provenance)."""
    work = os.path.abspath(args.make_run)
    os.makedirs(work, exist_ok=True)
    env["APF_HOME"] = os.path.join(work, "home")
    wl_dir = os.path.join(work, "workloads")
    shutil.rmtree(wl_dir, ignore_errors=True)
    origin = os.path.join(args.workloads_dir, args.workload)
    ini = scratch_copy(origin, os.path.join(wl_dir, args.workload))
    if not args.stop_at_target:
        unreachable_targets(ini)
    budget = float(ini_get(ini, "budget.cpu", "max_runtime_s"))
    period = float(ini_get(ini, "budget.cpu", "eval_period_s"))
    if args.budget_scale != 1:
        ini_set(ini, "budget.cpu", "max_runtime_s", f"{budget * args.budget_scale:g}")
    if args.eval_period:
        ini_set(ini, "budget.cpu", "eval_period_s", f"{args.eval_period:g}")
    done = {"scratch_workload": {"targets": "the workload's (the trial stops at the first eval "
                                            "meeting both)" if args.stop_at_target else
                                 "unreachable (the trial runs its whole budget)",
                                 "max_runtime_s": budget * args.budget_scale,
                                 "eval_period_s": args.eval_period or period,
                                 "workload_ini_budget_s": budget,
                                 "workload_ini_eval_period_s": period}}
    if record:
        # derive_targets' records name the "algorithm" (older ones the
        # "baseline").
        b, hp = record.get("algorithm") or record["baseline"], record["hparams"]
        studies = max(1, len(record.get("reruns", [])))
        study = args.study
        if study is None:
            # the rerun that met the target in the fewest steps
            higher = spec_of(args.workload, args.workloads_dir, env)["direction"] == "max"
            vkey = f"validation/{record['metric']}"
            best = None
            for r in record.get("reruns", []):
                pts = [(e["step"], e[vkey]) for e in r["evals"]]
                s = first_met(pts, record["validation_target"], higher)
                k = int(r["unit"].split("/")[0].split("_")[1])
                if s is not None and (best is None or s < best[0]):
                    best = (s, k)
            study = best[1] if best else 0
        src = copy_baseline(work, b, "sub_" + b, studies=studies, trials=1)
        with open(os.path.join(src, "tuning_search_space.ini"), "w") as f:
            for k, val in hp.items():
                f.write(f"[{k}]\nfeasible_points = {val}\n\n")
        trial = 1
        done.update({"baseline": b, "hparams": hp, "studies_packed": studies,
                     "study": study, "trial": trial,
                     "as": "derive_targets.py's rerun of the target-setting "
                           "configuration (workloads/targets/%s.json)" % args.workload})
    else:
        b = args.baseline
        src = os.path.join(ROOT, "submissions", "baselines", b)
        study, trial = args.study or 0, args.trial
        done.update({"baseline": b, "study": "all" if args.all_units else study,
                     "trial": "all" if args.all_units else trial,
                     "as": "the baseline packed as it is (its own search space)"})
    entry = os.path.join(work, b + ".apf")
    env["APF_WORKLOADS_DIR"] = wl_dir
    apf("pack", src, "-w", args.workload, "-o", entry, env=env)
    run = os.path.join(work, "run")
    shutil.rmtree(run, ignore_errors=True)
    cmd = [APF_BIN, "run", entry, "-o", run, "-q"]
    if not args.all_units:
        cmd += ["--study", str(study), "--trial", str(trial)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    print(f"{args.workload}: running {b} "
          f"{'every unit of its plan' if args.all_units else f'study {study} trial {trial}'}",
          flush=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    ended = datetime.datetime.now(datetime.timezone.utc)
    if p.returncode != 0:
        sys.exit(f"apf run {entry}: {p.stderr.strip()}")
    done.update({"started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "ended": ended.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return run, done


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--out", required=True, help="the reference file to write")
    ap.add_argument("--run", action="append", default=[], metavar="DIR",
                    help="an apf run directory to take the workload's units from")
    ap.add_argument("--make-run", metavar="DIR", help="run the target-setting configuration here")
    ap.add_argument("--baseline", help="with --make-run and no targets record: this baseline")
    ap.add_argument("--study", type=int)
    ap.add_argument("--trial", type=int, default=1)
    ap.add_argument("--all-units", action="store_true",
                    help="--make-run --baseline: every unit of the baseline's own plan")
    ap.add_argument("--budget-scale", type=float, default=1.0)
    ap.add_argument("--eval-period", type=float)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--from-record", action="store_true")
    ap.add_argument("--stop-at-target", action="store_true",
                    help="--make-run: keep the workload's targets, so the trial stops at "
                    "the first eval meeting both (the curve ends there)")
    ap.add_argument("--note", action="append", default=[],
                    help="a line for the provenance (e.g. what else ran on the machine)")
    ap.add_argument("--workloads-dir", default=os.path.join(ROOT, "workloads"))
    args = ap.parse_args()

    env = dict(os.environ)
    spec = spec_of(args.workload, args.workloads_dir, env)
    metric, higher = spec["metric"], spec["direction"] == "max"
    vkey = f"validation/{metric}"
    target = float(ini_get(os.path.join(args.workloads_dir, args.workload, "workload.ini"),
                           "workload", "validation_target"))
    rec_path = os.path.join(ROOT, "workloads", "targets", args.workload + ".json")
    record = None
    if os.path.exists(rec_path) and not args.baseline:
        with open(rec_path) as f:
            record = json.load(f)

    runs, made = [], None
    run_dirs = list(args.run)
    if args.make_run:
        run, made = make_run(args, record, env)
        run_dirs.append(run)
    batch_seen = set()
    for d in run_dirs:
        for unit, (batch, evs) in sorted(unit_curves(d, args.workload, vkey).items()):
            batch_seen.add(batch)
            pts = thin([[s * batch, v] for s, v in evs], higher)
            label = f"{os.path.basename(os.path.normpath(d))} {unit}"
            if made and d == run_dirs[-1]:
                label = f"{made['baseline']} {unit}"
            runs.append({"label": label, "source": os.path.abspath(d), "unit": unit,
                         "batch_size": batch, "evals": len(evs), "points": pts,
                         "target_met_examples": first_met(pts, target, higher)})
    if args.from_record:
        if not record:
            sys.exit(f"apf: reference_curves: --from-record: no {rec_path}")
        if len(batch_seen) != 1:
            sys.exit("apf: reference_curves: --from-record needs a run of the workload "
                     "(--run or --make-run) to say its batch size")
        batch = batch_seen.pop()
        for kind in ("reruns", "tuning"):
            for r in record.get(kind, []):
                if "evals" not in r:
                    continue
                b = r.get("algorithm") or r.get("baseline") or \
                    record.get("algorithm") or record["baseline"]
                pts = thin([[e["step"] * batch, e[vkey]] for e in r["evals"]], higher)
                runs.append({"label": f"{b} {r['unit']} ({kind[:-1] if kind == 'reruns' else 'tuning'}"
                                      f" in workloads/targets/{args.workload}.json)",
                             "source": f"workloads/targets/{args.workload}.json {kind}",
                             "unit": r["unit"], "batch_size": batch,
                             "evals": len(r["evals"]), "points": pts,
                             "target_met_examples": first_met(pts, target, higher)})
    if not runs:
        sys.exit("apf: reference_curves: no curves (give --run, --make-run or --from-record)")

    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty",
                             "--abbrev=40"], capture_output=True, text=True).stdout.strip()
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")][0]
    except (OSError, IndexError):
        pass
    met_at = [r["target_met_examples"] for r in runs if r["target_met_examples"] is not None]
    out = {
        "format": FORMAT,
        "workload": args.workload,
        "metric": metric,
        "direction": spec["direction"],
        "runs": runs,
        "provenance": {
            "command": shlex.join(["workloads/reference_curves.py"] + sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "apf_commit": commit,
            "machine": f"{cpu}, {os.cpu_count()} cores ({platform.machine()})",
            "timing": "not used: examples = global_step x the logged batch size; "
                      "a loaded machine changes how far a budget-limited run gets, "
                      "not its curve",
            "validation_target": target,
            "target_met": (f"fastest run at {min(met_at)} examples" if met_at else
                           "no run met the validation target: the curve holds the "
                           "levels they reached"),
            "made": made,
            "notes": args.note,
        },
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    text = json.dumps(out, indent=1)
    # a point per line
    text = re.sub(r"\[\s+([-+0-9.eE]+),\s+([-+0-9.eE]+)\s+\]", r"[\1, \2]", text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    for r in runs:
        print(f"  {r['label']}: {r['evals']} evals, batch {r['batch_size']}, "
              f"target met at {r['target_met_examples']} examples", flush=True)
    print(f"{args.out}: {len(runs)} curves", flush=True)


if __name__ == "__main__":
    main()
