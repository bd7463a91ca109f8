#!/usr/bin/python3
"""Derives workloads' validation and test targets by AlgoPerf's rule
(DOCUMENTATION.md, "Defining target performance"), scaled to apf, with apf
itself (`apf pack`, `apf run`), and records every run behind them.

A base workload W:

1. tune: each target-setting algorithm (--algorithms, default NAdamW and
   AdamW) runs one study of --trials trials (default 20) from its
   algoperf-0.6 search space, each for 3/4 of the workload's budget (the
   target-setting runtime; the budget is 1/3 longer than those runs);
2. pick: the algorithm and trial with the best validation metric;
3. rerun: that configuration --reruns times (default 10; one trial per
   study, so each rerun draws its own randomness), each for the whole
   budget; its evals up to 3/4 of the budget are the target-setting run
   (the baselines schedule by the workload's step hint, never by the time
   budget, so the first 3/4 of a whole-budget run is a 3/4-budget run),
   the rest says whether it meets the target within the budget;
4. targets: validation = the median over the reruns of the best validation
   metric within 3/4 of the budget; test = the worst test metric, at the
   first eval meeting the validation target, among the reruns that met it.

A variant W:V (a documented cheaper rule than a tuning of its own): the
base's chosen algorithm and configuration, retuned around its point - its
learning rate times 1/4, 1/2, 1, 2 and 4, the other hyperparameters as
they are, 3/4 of the budget each - then the best of those rerun
--variant-reruns times (default 5) for the whole budget, and the same
median and worst-test rules. It needs the base's record.

Every run goes into --out (default workloads/.targets-runs, one folder per
workload): a second invocation reuses complete runs and resumes
interrupted ones (`apf run --resume`), so a campaign can be stopped and
started again. Runs use `apf run -j N --threads T --clock C` as given. The
record - every trial's hyperparameters, best value and eval series, the
reruns', the targets and the share of reruns meeting them - goes to
--record-dir/<W>.json (or <W>_<V>.json), and the targets into
workloads/<W>/workload.ini ([workload] for the base, [variant.V] for a
variant, each with `targets = derived` or `retuned`) unless --dry-run.

    workloads/derive_targets.py fmnist_mlp [fmnist_mlp:gelu ...] [--trials 20]
        [--reruns 10] [-j 2 --threads 1] [--clock cpu] [--out DIR]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = ["nadamw", "adamw", "sgd_nesterov", "heavy_ball"]
TARGET_SETTING = ["nadamw", "adamw"]
LR_FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]
SETTING_SHARE = 0.75

APF_BIN = os.environ.get("APF_BIN", os.path.join(ROOT, "build", "apf"))


def die(msg, who="derive_targets"):
    sys.exit(f"apf: {who}: {msg}")


def apf(*args, env, who="derive_targets"):
    p = subprocess.run([APF_BIN, *args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"apf {' '.join(args[:2])}: {p.stderr.strip()}", who)
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
        kept = []
        with open(log) as f:
            for line in f:
                r = json.loads(line)
                if r["event"] == "eval":
                    kept.append(r)
                elif r["event"] == "resume":
                    # A resume discards the evals after the one it goes on from.
                    kept = [e for e in kept if e["index"] <= r["from_eval"]]
        for r in kept:
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


def ini_set(path, section, key, value, add=False):
    """Sets key in [section]; with add, appends it to the section when it
    is not there."""
    text = open(path).read()
    pat = re.compile(rf"(\[{re.escape(section)}\][^\[]*?^){re.escape(key)}[ \t]*=[^\n]*", re.M | re.S)
    new, n = pat.subn(lambda m: f"{m.group(1)}{key} = {value}", text, count=1)
    if n != 1 and add:
        sec = re.compile(rf"(^\[{re.escape(section)}\][ \t]*\n(?:(?!^\[).*\n?)*)", re.M)
        m = sec.search(text)
        if m:
            # Comment and blank lines at the section's end introduce the
            # next section: the key goes before them.
            lines = m.group(1).rstrip("\n").split("\n")
            keep = len(lines)
            while keep > 1 and (not lines[keep - 1].strip() or
                                lines[keep - 1].lstrip().startswith((";", "#"))):
                keep -= 1
            rest = lines[keep:]
            while rest and not rest[0].strip():
                rest.pop(0)
            body = "\n".join(lines[:keep] + [f"{key} = {value}"]) + "\n"
            if rest:
                body += "\n" + "\n".join(rest) + "\n"
            tail = text[m.end():]
            new, n = text[:m.start()] + body + ("\n" if tail and not rest else "") + tail, 1
    if n != 1:
        die(f"{path}: no [{section}] {key}")
    with open(path, "w") as f:
        f.write(new)


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


def variant_keys(path, variant, who="derive_targets"):
    """The [variant.V] keys of a workload.ini, in order."""
    text = open(path).read()
    m = re.search(rf"^\[variant\.{re.escape(variant)}\][ \t]*\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        die(f"{path}: no [variant.{variant}]", who)
    out = []
    for line in m.group(1).splitlines():
        line = line.split(";", 1)[0].strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out.append((k.strip(), v.strip()))
    return out


def make_column(col, src_dir, wl_dir, who="derive_targets"):
    """Copies workload `col` (W or W:V) into wl_dir as a workload of its
    own (W-V: the variant's model keys in [model], no variants) with
    unreachable targets; returns (name, real workload.ini, variant or
    None)."""
    base, _, variant = col.partition(":")
    origin = os.path.join(src_dir, base)
    real = os.path.join(origin, "workload.ini")
    if not os.path.exists(real):
        die(f"{col}: no workload {base} in {src_dir}", who)
    name = f"{base}-{variant}" if variant else base
    ini = scratch_copy(origin, os.path.join(wl_dir, name))
    if variant:
        for k, v in variant_keys(real, variant, who):
            if k not in ("validation_target", "test_target", "targets"):
                ini_set(ini, "model", k, v)
        ini_set(ini, "workload", "name", name)
        text = open(ini).read()
        text = re.sub(r"^\[variant\.[^\]]*\].*?(?=^\[|\Z)", "", text, flags=re.M | re.S)
        with open(ini, "w") as f:
            f.write(text)
    unreachable_targets(ini)
    return name, real, variant or None


def run_status(run):
    """`apf status --json` of a run directory, or None when it has none."""
    if not os.path.exists(os.path.join(run, "run.json")):
        return None
    p = subprocess.run([APF_BIN, "status", run, "--json"], capture_output=True, text=True)
    return json.loads(p.stdout) if p.returncode == 0 else None


def run_complete(run):
    """Whether every planned unit of the run has ended: done, or failed (a
    trial that diverged is a result, as in AlgoPerf: it counts for the
    evals it made before it failed, and misses the targets after)."""
    st = run_status(run)
    if not st:
        return False
    c = st["counts"]
    return st["units_planned"] > 0 and c["done"] + c["failed"] == st["units_planned"]


def copy_baseline(work, baseline, name, studies, trials, points=None):
    """A baseline under external tuning with a plan of studies x trials;
    with points (a list of hyperparameter dicts), a search space of those
    points in order (trial N takes point N)."""
    src = os.path.join(work, name)
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "submissions", "baselines", baseline), src)
    with open(os.path.join(src, "submission.ini"), "w") as f:
        f.write(f"[submission]\nname = {baseline}\nauthors = apf baselines\n"
                f"ruleset = external\n\n[tuning]\nrules = algoperf-0.6\n"
                f"studies = {studies}\ntrials = {trials}\n")
    if points:
        # A list of points: trial t of every study takes point t.
        with open(os.path.join(src, "tuning_search_space.ini"), "w") as f:
            for i, pt in enumerate(points, 1):
                f.write(f"[point {i}]\n")
                for k, v in pt.items():
                    f.write(f"{k} = {float(v)!r}\n" if isinstance(v, (int, float))
                            else f"{k} = {v}\n")
                f.write("\n")
    return src


class Campaign:
    """The runs of one invocation: where they go, how apf runs them."""

    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.env = dict(os.environ)
        self.env["APF_HOME"] = os.path.join(self.out, "home")
        self.run_flags = ["-q", "--clock", args.clock]
        if args.jobs > 1:
            self.run_flags += ["-j", str(args.jobs)]
        if args.threads:
            self.run_flags += ["--threads", str(args.threads)]

    def workload_env(self, wl_dir):
        return dict(self.env, APF_WORKLOADS_DIR=wl_dir)

    def run(self, src, workload, env, name, where):
        """Packs src for workload and runs it into where/name.run, or
        reuses a complete run / resumes an interrupted one there."""
        entry = os.path.join(where, name + ".apf")
        run = os.path.join(where, name + ".run")
        if run_complete(run):
            print(f"  {name}: reusing {run}", flush=True)
            return entry, run
        if not os.path.exists(entry) or not os.path.exists(os.path.join(run, "run.json")):
            shutil.rmtree(run, ignore_errors=True)
            apf("pack", src, "-w", workload, "-o", entry, env=env)
            flags = []
        else:
            print(f"  {name}: resuming {run}", flush=True)
            flags = ["--resume"]
        p = subprocess.run([APF_BIN, "run", entry, "-o", run, *self.run_flags, *flags],
                           env=env, capture_output=True, text=True)
        # A failed trial (a diverged configuration) is a result; anything
        # else that leaves units unfinished is not.
        if not run_complete(run):
            die(f"{run}: the run did not finish: {p.stderr.strip()[-400:]}")
        return entry, run


def better_of(higher):
    return max if higher else min


def meets(v, target, higher):
    return v >= target if higher else v <= target


def best_within(evs, vkey, limit_s, higher):
    """The best validation value among the evals made within limit_s
    seconds of submission time, or None."""
    vals = [e["metrics"][vkey] for e in evs
            if e["accumulated_submission_ns"] / 1e9 <= limit_s + 1e-9]
    return better_of(higher)(vals) if vals else None


def first_meeting(evs, vkey, target, higher, limit_s=None):
    for e in evs:
        if limit_s is not None and e["accumulated_submission_ns"] / 1e9 > limit_s + 1e-9:
            return None
        if meets(e["metrics"][vkey], target, higher):
            return e
    return None


def targets_from_reruns(reruns, vkey, tkey, budget_s, higher):
    """The rule's targets from the reruns' eval records: (validation, test,
    per-rerun rows)."""
    setting = budget_s * SETTING_SHARE
    bests = [best_within(evs, vkey, setting, higher) for evs in reruns]
    if any(b is None for b in bests):
        die("a rerun made no eval within 3/4 of the budget")
    val_target = statistics.median(bests)
    tests = []
    rows = []
    for evs, b in zip(reruns, bests):
        hit = first_meeting(evs, vkey, val_target, higher, setting)
        if hit:
            tests.append(hit["metrics"][tkey])
        full = first_meeting(evs, vkey, val_target, higher)
        rows.append({"best_validation_at_3_4": b,
                     "met_within_3_4": hit is not None,
                     "time_to_target_s": (full["accumulated_submission_ns"] / 1e9
                                          if full else None)})
    test_target = better_of(not higher)(tests)
    return val_target, test_target, rows


def spec_of(env, name):
    listing = json.loads(apf("workloads", "--json", env=env))["workloads"]
    return [w for w in listing if w["name"] == name][0]


def derive(c, col):
    args = c.args
    base, _, variant = col.partition(":")
    tag = f"{base}_{variant}" if variant else base
    where = os.path.join(c.out, tag)
    os.makedirs(where, exist_ok=True)
    # Two copies of the column: its whole budget, and 3/4 of it.
    full_dir = os.path.join(where, "workloads")
    set_dir = os.path.join(where, "workloads-3-4")
    name, real, _ = make_column(col, args.workloads_dir, full_dir)
    make_column(col, args.workloads_dir, set_dir)
    set_ini = os.path.join(set_dir, name, "workload.ini")
    budget_s = float(ini_get(set_ini, "budget.cpu", "max_runtime_s"))
    ini_set(set_ini, "budget.cpu", "max_runtime_s", f"{budget_s * SETTING_SHARE:g}")
    full_env, set_env = c.workload_env(full_dir), c.workload_env(set_dir)
    spec = spec_of(full_env, name)
    metric = spec["metric"]
    higher = spec["direction"] == "max"
    better = better_of(higher)
    vkey, tkey = f"validation/{metric}", f"test/{metric}"
    record = {"workload": base, "variant": variant or None, "metric": metric,
              "direction": spec["direction"], "budget_s": budget_s,
              "setting_runtime_s": budget_s * SETTING_SHARE,
              "eval_period_s": spec["budget"]["cpu"]["eval_period_s"],
              "clock": args.clock, "threads": args.threads or None,
              "rule": "retuned" if variant else "derived", "tuning": [], "reruns": []}
    tuned = []  # (value, algorithm, hparams)
    if variant:
        base_rec = os.path.join(args.record_dir, base + ".json")
        if not os.path.exists(base_rec):
            die(f"{col}: derive {base} first (no {base_rec})")
        b = json.load(open(base_rec))
        algo, hp0 = b["algorithm"], b["hparams"]
        points = [dict(hp0, learning_rate=hp0["learning_rate"] * f) for f in LR_FACTORS]
        record["retuned_from"] = {"algorithm": algo, "hparams": hp0,
                                  "learning_rate_factors": LR_FACTORS}
        print(f"{col}: retuning {algo} around {base}'s point ({len(points)} trials)", flush=True)
        src = copy_baseline(where, algo, "sub_retune", 1, len(points), points)
        plans = [(algo, *c.run(src, name, set_env, "retune", where))]
    else:
        plans = []
        for algo in args.algorithms.split(","):
            print(f"{col}: tuning {algo} ({args.trials} trials at 3/4 budget)", flush=True)
            src = copy_baseline(where, algo, "sub_" + algo, 1, args.trials)
            plans.append((algo, *c.run(src, name, set_env, "tune_" + algo, where)))
    for algo, entry, run in plans:
        plan = json.loads(apf("plan", entry, "--json", env=set_env))
        for unit, evs in sorted(evals_of(run).items()):
            trial = int(unit.rsplit("_", 1)[1])
            hp = [u["hparams"] for u in plan["units"] if u["trial"] == trial][0]
            v = better(e["metrics"][vkey] for e in evs)
            record["tuning"].append({"algorithm": algo, "unit": unit, "hparams": hp,
                                     "best_validation": v, "evals": series(evs, vkey, tkey)})
            tuned.append((v, algo, hp))
    by_algo = {}
    for v, algo, _ in tuned:
        by_algo[algo] = better(by_algo.get(algo, v), v)
    record["best_by_algorithm"] = by_algo
    v, algo, hp = better(tuned, key=lambda t: t[0])
    print(f"  best: {algo} {json.dumps(hp)} ({vkey} {v:.4f})", flush=True)
    nre = args.variant_reruns if variant else args.reruns
    src = copy_baseline(where, algo, "sub_rerun", nre, 1, [hp])
    print(f"{col}: rerunning it {nre} times for the whole budget", flush=True)
    _, run = c.run(src, name, full_env, "rerun", where)
    reruns = [evs for _, evs in sorted(evals_of(run).items())]
    if len(reruns) != nre:
        die(f"{run}: {len(reruns)} reruns with evals, not {nre}")
    val_t, test_t, rows = targets_from_reruns(reruns, vkey, tkey, budget_s, higher)
    for (unit, evs), row in zip(sorted(evals_of(run).items()), rows):
        record["reruns"].append(dict(row, unit=unit, evals=series(evs, vkey, tkey)))
    met = [r for r in rows if r["time_to_target_s"] is not None]
    bests = [r["best_validation_at_3_4"] for r in rows]
    record.update({"algorithm": algo, "hparams": hp, "validation_target": val_t,
                   "test_target": test_t,
                   "reruns_spread": {"min": min(bests), "max": max(bests),
                                     "stdev": statistics.stdev(bests) if len(bests) > 1 else 0.0},
                   "share_meeting_within_budget": len(met) / len(rows)})
    print(f"{col}: targets validation {val_t:.4f}, test {test_t:.4f}; {len(met)} of "
          f"{len(rows)} reruns meet it within the budget", flush=True)
    if args.record_dir and not args.dry_run or args.record:
        path = args.record or os.path.join(args.record_dir, tag + ".json")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if not args.dry_run:
        section = f"variant.{variant}" if variant else "workload"
        ini_set(real, section, "validation_target", f"{val_t:.4f}", add=True)
        ini_set(real, section, "test_target", f"{test_t:.4f}", add=True)
        ini_set(real, section, "targets", "retuned" if variant else "derived", add=True)
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("columns", nargs="+", metavar="W[:V]")
    ap.add_argument("--algorithms", "--baselines", default=",".join(TARGET_SETTING))
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--reruns", type=int, default=10)
    ap.add_argument("--variant-reruns", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "workloads", ".targets-runs"))
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    ap.add_argument("--record", help="write the record here (one column only)")
    ap.add_argument("--record-dir", default=os.path.join(ROOT, "workloads", "targets"))
    ap.add_argument("--dry-run", action="store_true",
                    help="leave workload.ini (and --record-dir) as they are")
    ap.add_argument("--workloads-dir", default=os.path.join(ROOT, "workloads"))
    args = ap.parse_args()
    if args.record and len(args.columns) > 1:
        die("--record takes one column; --record-dir takes many")
    if args.trials < 1 or args.reruns < 1 or args.variant_reruns < 1:
        die("--trials, --reruns and --variant-reruns take N >= 1")
    args.workloads_dir = os.path.abspath(args.workloads_dir)
    c = Campaign(args)
    # Bases before their variants (a variant retunes around its base).
    cols = sorted(args.columns, key=lambda x: ":" in x)
    for col in cols:
        derive(c, col)


if __name__ == "__main__":
    main()
