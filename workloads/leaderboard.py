#!/usr/bin/python3
"""apf's own leaderboard: runs the benchmark for a list of submissions on
every base workload, under the AlgoPerf v0.6 rules, resumably and on one
machine class, then verifies, scores and publishes it.

    workloads/leaderboard.py run --ruleset self|external [--submissions a,b,...]
        [--studies 0,1,2] [--out DIR] [--threads T] [-j N] [--clock cpu|wall]
        [--slurm [SBATCH OPTIONS...]]
    workloads/leaderboard.py status [--out DIR]

The campaign (--out, default leaderboard/.runs) holds one entry and one run
directory per (ruleset, submission): external tuning is 3 studies x 5
trials drawn from the submission's search space, self-tuning 3 studies x 1
trial at 1.5 times the budget with the submission's own defaults (the
submission's code, packed with `ruleset` rewritten). Every submission of
the source tree is one (submissions/*/submission.ini by its [submission]
name).

Study-major order: study 0 of every submission, then study 1, ... so that
an interrupted campaign has compared every submission on the same number
of studies. A second invocation reuses what ended and resumes what was
interrupted (`apf run --resume`); an entry is packed again (deterministic,
SOURCE_DATE_EPOCH fixed) and must be byte-identical to the one its run
began with, so a submission edited halfway is refused instead of mixed.

One machine class: the first invocation records this machine's CPU
(/proc/cpuinfo vendor, family, model and name, the core count, the widest
vector ISA) with the clock, threads and budget scale in DIR/campaign.json;
another invocation on a machine that differs in any of them is refused.
Times-to-target from different machines do not belong in one profile, and
the check makes a campaign spread over sessions either all one class or
visibly not run. Each invocation's start, end and wall time go into
campaign.json: the campaign's wall time is their sum.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import APF_BIN, ROOT, ini_get, ini_set  # noqa: E402
import derive_targets  # noqa: E402

FORMAT = "apf-campaign/1"
RULES = "algoperf-0.6"
STUDIES = 3
TRIALS = {"external": 5, "self": 1}
BUDGET_MULTIPLIER = {"external": 1.0, "self": 1.5}
EPOCH = "1764547200"  # 2025-12-01: entries packed by a campaign are the same bytes


def die(msg):
    derive_targets.die(msg, who="leaderboard")


def apf(*args, env):
    return derive_targets.apf(*args, env=env, who="leaderboard")


def submissions():
    """[submission] name -> its directory, for every submission.ini under
    submissions/."""
    found = {}
    base = os.path.join(ROOT, "submissions")
    for d, _, files in sorted(os.walk(base)):
        if "submission.ini" in files:
            name = ini_get(os.path.join(d, "submission.ini"), "submission", "name")
            if name:
                found[name] = d
    return found


def machine():
    """This machine's class: what a time-to-target depends on besides the
    submission."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in ("vendor_id", "cpu family", "model", "model name", "flags") \
                        and k not in info:
                    info[k] = v.strip()
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline"
    return {"vendor": info.get("vendor_id", "?"), "family": info.get("cpu family", "?"),
            "model": info.get("model", "?"), "name": info.get("model name", "?"),
            "cores": len(os.sched_getaffinity(0)), "isa": isa}


def describe(m):
    return (f"{m['name']} (vendor {m['vendor']}, family {m['family']}, model {m['model']}, "
            f"{m['isa']}, {m['cores']} cores)")


class Campaign:
    def __init__(self, out):
        self.out = os.path.abspath(out)
        self.path = os.path.join(self.out, "campaign.json")
        self.env = dict(os.environ, APF_HOME=os.path.join(self.out, "home"),
                        SOURCE_DATE_EPOCH=EPOCH)
        self.state = None
        if os.path.exists(self.path):
            try:
                with open(self.path) as f:
                    self.state = json.load(f)
            except (OSError, ValueError) as e:
                die(f"{self.path}: {e}")
            if self.state.get("format") != FORMAT:
                die(f"{self.path}: not an {FORMAT} campaign")

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def pin(self, clock, threads, budget_scale, workloads):
        """Records the campaign's machine class and settings on its first
        invocation; refuses any later one that differs."""
        here = {"machine": machine(), "clock": clock, "threads": threads,
                "budget_scale": budget_scale, "workloads": workloads}
        if self.state is None:
            os.makedirs(self.out, exist_ok=True)
            self.state = {"format": FORMAT, "rules": RULES, **here, "invocations": []}
            self.save()
            return
        for k, v in here.items():
            if self.state.get(k) != v:
                was, now = self.state.get(k), v
                if k == "machine":
                    was, now = describe(was), describe(now)
                die(f"{self.out}: this campaign's {k} is {was}, here it is {now}: "
                    "a campaign runs on one machine class with one setting "
                    "(start another with --out)")

    def paths(self, ruleset, name):
        d = os.path.join(self.out, ruleset)
        return (os.path.join(self.out, "src", ruleset, name), os.path.join(d, name + ".apf"),
                os.path.join(d, name + ".run"))

    def entry(self, ruleset, name, src_dir, workloads):
        """Packs the submission for the ruleset; returns (entry, run). An
        entry whose run has begun must come out the same bytes again."""
        src, entry, run = self.paths(ruleset, name)
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(src_dir, src)
        ini = os.path.join(src, "submission.ini")
        ini_set(ini, "submission", "ruleset", ruleset)
        ini_set(ini, "tuning", "rules", RULES, add=True)
        ini_set(ini, "tuning", "studies", str(STUDIES), add=True)
        ini_set(ini, "tuning", "trials", str(TRIALS[ruleset]), add=True)
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        fresh = entry + ".new"
        apf("pack", src, "-w", ",".join(workloads), "-o", fresh, env=self.env)
        if os.path.exists(os.path.join(run, "run.json")):
            with open(fresh, "rb") as a, open(entry, "rb") as b:
                same = a.read() == b.read()
            os.unlink(fresh)
            if not same:
                die(f"{name}: its entry differs from the one {run} began with "
                    "(the submission, a workload or the toolchain changed): "
                    "finish the campaign with the sources it began with, or start another")
        else:
            os.replace(fresh, entry)
        return entry, run


def unit_states(run, env):
    """unit name -> state, from `apf status --json`; {} before the run
    directory exists."""
    if not os.path.exists(os.path.join(run, "run.json")):
        return {}
    p = subprocess.run([APF_BIN, "status", run, "--json"], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        die(f"apf status {run}: {p.stderr.strip()}")
    return {u["unit"]: u for u in json.loads(p.stdout)["units"]}


def study_ended(units, k):
    mine = [u for n, u in units.items() if n.startswith(f"study_{k}/")]
    return bool(mine) and all(u["state"] in ("done", "failed") for u in mine)


def base_workloads(env):
    p = subprocess.run([APF_BIN, "workloads", "--json"], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        die(f"apf workloads: {p.stderr.strip()}")
    return [w["name"] for w in json.loads(p.stdout)["workloads"]]


def parse_list(text, what, allowed=None):
    items = [x for x in (text or "").split(",") if x]
    if not items:
        die(f"{what}: empty list")
    for x in items:
        if allowed is not None and x not in allowed:
            die(f"{what}: no such {what.rstrip('s')} {x!r} (have: {', '.join(sorted(allowed))})")
    if len(set(items)) != len(items):
        die(f"{what}: {text}: named twice")
    return items


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_run(args):
    c = Campaign(args.out)
    subs = submissions()
    names = parse_list(args.submissions, "submissions", subs) if args.submissions \
        else sorted(subs)
    try:
        studies = [int(x) for x in parse_list(args.studies, "studies")]
    except ValueError:
        die(f"--studies {args.studies}: a list of study numbers")
    if any(k < 0 or k >= STUDIES for k in studies):
        die(f"--studies {args.studies}: the rules have studies 0 to {STUDIES - 1}")
    workloads = base_workloads(c.env)
    c.pin(args.clock, args.threads, args.budget_scale, workloads)
    flags = ["-q", "--clock", args.clock, "--threads", str(args.threads)]
    if args.jobs > 1:
        flags += ["-j", str(args.jobs)]
    if args.budget_scale != 1.0:
        flags += ["--budget-scale", repr(args.budget_scale)]
    inv = {"start": now(), "end": None, "wall_s": 0.0, "ruleset": args.ruleset,
           "submissions": names, "studies": studies, "slurm": args.slurm is not None,
           "units_ended": 0}
    c.state["invocations"].append(inv)
    c.save()
    t0 = time.monotonic()
    entries = {n: c.entry(args.ruleset, n, subs[n], workloads) for n in names}

    def close():
        inv["end"] = now()
        inv["wall_s"] = round(time.monotonic() - t0, 1)
        c.save()

    if args.slurm is not None:
        # One job array per submission, every unfinished unit of the
        # studies asked for; `run` again with --slurm after preemptions.
        for n in names:
            entry, run = entries[n]
            resume = ["--resume"] if os.path.exists(os.path.join(run, "run.json")) else []
            for k in studies:
                p = subprocess.run([APF_BIN, "run", entry, "-o", run, *flags, "--study", str(k),
                                    *resume, "--slurm", *args.slurm], env=c.env,
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    close()
                    die(f"{n} study {k}: apf run --slurm: {p.stderr.strip()[-400:]}")
                print(f"{args.ruleset} {n} study {k}: {p.stdout.strip()}", flush=True)
                resume = ["--resume"]
        close()
        return
    for k in studies:
        for n in names:
            entry, run = entries[n]
            units = unit_states(run, c.env)
            if study_ended(units, k):
                print(f"{args.ruleset} {n} study {k}: ended before, kept", flush=True)
                continue
            resume = ["--resume"] if units else []
            print(f"{args.ruleset} {n} study {k}: running ({now()})", flush=True)
            t = time.monotonic()
            p = subprocess.run([APF_BIN, "run", entry, "-o", run, *flags, "--study", str(k),
                                *resume], env=c.env, capture_output=True, text=True)
            units = unit_states(run, c.env)
            # A failed trial (a diverged configuration, a fault) is a
            # result the scorer counts; a study left unfinished is not.
            if not study_ended(units, k):
                close()
                die(f"{n} study {k}: the run did not finish (exit {p.returncode}): "
                    f"{p.stderr.strip()[-400:]}")
            inv["units_ended"] += sum(1 for u in units if u.startswith(f"study_{k}/"))
            failed = [u for u, s in units.items()
                      if u.startswith(f"study_{k}/") and s["state"] == "failed"]
            close()
            print(f"{args.ruleset} {n} study {k}: ended in {time.monotonic() - t:.0f} s"
                  + (f", failed: {', '.join(failed)}" if failed else ""), flush=True)
    close()


def progress(c):
    """(ruleset, submission) -> counts of its units' states."""
    out = {}
    for ruleset in ("external", "self"):
        d = os.path.join(c.out, ruleset)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".run"):
                units = unit_states(os.path.join(d, f), c.env)
                counts = {}
                for u in units.values():
                    counts[u["state"]] = counts.get(u["state"], 0) + 1
                out[(ruleset, f[:-4])] = counts, len(units)
    return out


def cmd_status(args):
    c = Campaign(args.out)
    if c.state is None:
        die(f"{c.out}: no campaign here (no campaign.json)")
    st = c.state
    print(f"campaign {c.out}: {st['rules']}, clock {st['clock']}, {st['threads']} threads"
          + (f", budget scale {st['budget_scale']} (unofficial)"
             if st["budget_scale"] != 1.0 else ""))
    print(f"machine: {describe(st['machine'])}")
    here = machine()
    if here != st["machine"]:
        print(f"this machine is another class: {describe(here)}")
    wall = sum(i["wall_s"] for i in st["invocations"])
    print(f"wall time so far: {wall / 3600:.2f} h over {len(st['invocations'])} invocations")
    for (ruleset, name), (counts, planned) in progress(c).items():
        ended = counts.get("done", 0) + counts.get("failed", 0)
        print(f"  {ruleset:8} {name:22} {ended}/{planned} units ended"
              + "".join(f", {v} {k}" for k, v in sorted(counts.items()) if k != "done"))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ruleset", required=True, choices=["external", "self"])
    r.add_argument("--submissions")
    r.add_argument("--studies", default=",".join(str(k) for k in range(STUDIES)))
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("-j", "--jobs", type=int, default=1)
    r.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    r.add_argument("--budget-scale", type=float, default=1.0,
                   help="a quick look (unofficial; pinned like the rest)")
    r.add_argument("--slurm", nargs=argparse.REMAINDER,
                   help="submit job arrays instead of running (the rest: apf run's "
                        "--slurm options)")
    s = sub.add_parser("status")
    for p in (r, s):
        p.add_argument("--out", default=os.path.join(ROOT, "leaderboard", ".runs"))
    args = ap.parse_args()
    if args.cmd == "run":
        if args.threads < 1 or args.jobs < 1:
            die("--threads and -j take N >= 1")
        if not 0 < args.budget_scale <= 1:
            die(f"--budget-scale {args.budget_scale}: must be in (0, 1]")
        cmd_run(args)
    else:
        cmd_status(args)


if __name__ == "__main__":
    main()
