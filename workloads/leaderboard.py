#!/usr/bin/python3
"""apf's own leaderboard: runs the benchmark for a list of submissions on
every base workload, under the AlgoPerf v0.6 rules, resumably and on one
machine class, then verifies, scores and publishes it.

    workloads/leaderboard.py run --ruleset self|external [--submissions a,b,...]
        [--workloads W,...] [--studies 0,1,2] [--out DIR] [--threads T] [-j N] [--clock cpu|wall]
        [--toolchain clone|here] [--heldout] [--until TIME] [--replay-top Q]
        [--ledger DIR] [--slurm [SBATCH OPTIONS...]]
    workloads/leaderboard.py status [--out DIR] [--ledger DIR]
    workloads/leaderboard.py publish --ruleset R [--out DIR] [--ledger DIR]
        [--dest leaderboard]
    workloads/leaderboard.py compare [--dest leaderboard]

The campaign (--out, default leaderboard/.runs) holds one entry and one run
directory per (ruleset, submission): external tuning is 3 studies x 5
trials drawn from the submission's search space, self-tuning 3 studies x 1
trial at 1.5 times the budget with the submission's own defaults (the
submission's code, packed with `ruleset` rewritten). Every submission of
the source tree is one (submissions/*/submission.ini by its [submission]
name).

Submission-major order: each submission's studies in turn, then its run
is sealed (below), then the next. A second invocation in the same work
directory reuses what ended and resumes what was interrupted (`apf run
--resume`); an entry is packed again and must claim what the one its run
began with claims, so a submission edited halfway is refused instead of
mixed. --until TIME begins no submission whose budgets (times
WALL_PER_BUDGET) would not end by then.

The ledger (--ledger, default campaign/ beside --out: leaderboard/campaign,
committed). The work directory is one checkout's, and an external campaign
(750 units, about 14 h) spans sessions that may each start from a fresh
clone; every eval's checkpoint of it would also be hundreds of GB. So a
run whose every unit has ended is sealed: verified with `apf verify
--reeval --replay-top Q` (every checkpoint re-evaluated, the Q intervals
whose parameters changed most replayed), then archived without its
checkpoints into LEDGER/KIND/NAME.run.tar.zst (deterministic tar, zstd)
with the verdict (NAME.verify.json, with the signed index's digest) and
the public key its runner signed with (NAME.runner.pub.pem), recorded in
LEDGER/campaign.json with their digests, and its checkpoints deleted. The
runner key's private half never leaves the work directory: a run is made,
verified and sealed in one checkout, each with its own key. A work
directory without campaign.json takes the campaign up from the ledger
(campaign.json, the sealed runs unpacked with their entries and keys, the
held-out draw), and the toolchain is cloned again at its pinned commit and
held to its build string. Commit the ledger after each invocation
(`status` says when it is not).

The held-out pass (run --heldout), after the base runs: one variant per
base workload drawn by `apf heldout draw` over every entry of the ruleset
(DIR/RULESET-heldout/draw.json, made once, its digest in campaign.json,
recomputed from the entries at every invocation), and each submission's
drawn variants run from the same entry, so with the same plan and
hyperparameters, into a run directory of their own
(DIR/RULESET-heldout/NAME.run, `apf run --heldout DRAW --variant V`): only
the variants' units run there, the base units stay pending (the base run
has them). AlgoPerf v0.6 has no held-out variants, so the board is scored
without them; publish, once every variant unit has ended, verifies the
held-out runs as it does the board's and scores the board's records plus
the variants' CSVs with the draw (DEST/RULESET/heldout/: scores, the draw,
the runs' records), and compare says what the held-out rules change.

One toolchain: a ruleset's first invocation clones this tree's HEAD into
DIR/toolchain/RULESET and builds it (--toolchain here: takes this tree's
apf as it is); its runs and publish use that apf, its submissions and its
workloads, and a later invocation whose apf reports another build is
refused. So commits made while a campaign spans sessions change nothing
in it. The run keeps the entry it began with: one packed again must claim
the same submission, workloads, datasets and tuning (the machine's record
may differ where apf run allows it).

One machine class: the first invocation records this machine's CPU
(/proc/cpuinfo vendor, family, model and name, the core count, the widest
vector ISA) with the clock, threads and budget scale in DIR/campaign.json;
another invocation on a machine that differs in any of them is refused.
Times-to-target from different machines do not belong in one profile, and
the check makes a campaign spread over sessions either all one class or
visibly not run. Each invocation's start, end and wall time go into
campaign.json: the campaign's wall time is their sum.

publish: every run of the ruleset must have ended and been sealed. It
publishes what the ledger holds: each sealed run unpacked afresh (under
OUT/publish/) and held to its seal (a verdict that passed with
re-evaluation and replay and pruned nothing, over the signed index
unpacked). One `apf score --verify --pruned` verifies each run again,
whole but for the deleted checkpoints (one that fails is not ranked),
scores the runs under algoperf-0.6, writes the report page (--report) and
exports what it scored in AlgoPerf's layout. Into DEST/RULESET/:
scores.json and scores.txt (apf score's JSON and table), profile.svg,
report.html, and records/: the export (every trial's
eval_measurements.csv, hyperparameters, workload_targets.json), each run's
run.json, signed index (index.dsse.json: run.json's digest and every
unit's log head), the runner's public key and the verdict it was sealed
with (records/runs/NAME/), and the entries' digests in records/runs.json. No run directory is committed:
the digests and signed heads identify them, and the export scores to the
same numbers, which publish checks by scoring it again:

    apf score DEST/RULESET/records/algoperf/submissions/* \
        --targets DEST/RULESET/records/algoperf/workload_targets.json \
        --rules algoperf-0.6 [--self-tuning]

compare: Kendall's tau-b between the published scores and AlgoPerf's
(leaderboard/algoperf.json: the figures and where they come from), over the
algorithms both have, and the paper's findings on apf's suite from the
scores' times: per workload the fastest and slowest time-to-target and how
many pairs of submissions are more than 20% apart, and the rankings per
workload against each other. Into DEST/comparison.json and, as Markdown,
on stdout.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_targets import APF_BIN, ROOT, ini_get, ini_set  # noqa: E402
import derive_targets  # noqa: E402
from baselines import kendall_tau  # noqa: E402

FORMAT = "apf-campaign/1"
RULES = "algoperf-0.6"
STUDIES = 3
TRIALS = {"external": 5, "self": 1}
BUDGET_MULTIPLIER = {"external": 1.0, "self": 1.5}
EPOCH = "1764547200"  # 2025-12-01: entries packed by a campaign are the same bytes


# The apf a ruleset's runs are made and verified with, and the source tree
# its submissions and workloads come from: this tree's, until Campaign.tool
# pins the ruleset's own.
TOOL = {"bin": APF_BIN, "root": ROOT}


def die(msg):
    derive_targets.die(msg, who="leaderboard")


def apf(*args, env):
    p = subprocess.run([TOOL["bin"], *args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"apf {' '.join(args[:2])}: {p.stderr.strip()}")
    return p.stdout


def submissions():
    """[submission] name -> its directory, for every submission.ini under
    submissions/."""
    found = {}
    base = os.path.join(TOOL["root"], "submissions")
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


def default_ledger(out):
    """The ledger beside the work directory: leaderboard/campaign for the
    default leaderboard/.runs."""
    return os.path.join(os.path.dirname(os.path.abspath(out)), "campaign")


class Campaign:
    def __init__(self, out, ledger=None):
        self.out = os.path.abspath(out)
        self.ledger = os.path.abspath(ledger or default_ledger(out))
        self.path = os.path.join(self.out, "campaign.json")
        self.env = dict(os.environ, APF_HOME=os.path.join(self.out, "home"),
                        SOURCE_DATE_EPOCH=EPOCH)
        self.state = None
        kept = os.path.join(self.ledger, "campaign.json")
        # The work directory is this checkout's; the ledger is committed.
        # A checkout without the work directory (another session, another
        # machine of the class) takes the campaign up from the ledger.
        src = self.path if os.path.exists(self.path) else kept
        if os.path.exists(src):
            try:
                with open(src) as f:
                    self.state = json.load(f)
            except (OSError, ValueError) as e:
                die(f"{src}: {e}")
            if not isinstance(self.state, dict) or self.state.get("format") != FORMAT:
                die(f"{src}: not an {FORMAT} campaign")
            if src == kept:
                print(f"leaderboard: {self.out} has no campaign: taken up from the ledger "
                      f"{self.ledger}", file=sys.stderr)
                os.makedirs(self.out, exist_ok=True)
                self.save()

    def save(self):
        """campaign.json in the work directory and in the ledger."""
        for path in (self.path, os.path.join(self.ledger, "campaign.json")):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_file(path, json.dumps(self.state, indent=1) + "\n")

    def sealed(self, kind):
        """name -> the record of each run of kind (a ruleset, or
        RULESET-heldout) sealed into the ledger."""
        return self.state.get("sealed", {}).get(kind, {}) if self.state else {}

    def seal(self, kind, name, run, replay_top):
        """A run whose every planned unit (of its kind) has ended, into the
        ledger: verified first with re-evaluation of every checkpoint and
        replay of the replay_top intervals whose parameters changed most
        (apf verify --reeval --replay-top, its JSON verdict kept as
        KIND/NAME.verify.json), then archived without its checkpoints
        (KIND/NAME.run.tar.zst, deterministic), with the public key its
        runner signed with (KIND/NAME.runner.pub.pem), and its checkpoints
        deleted here. The runner key's private half never leaves this
        work directory: a run is made, verified and sealed within one
        checkout. Returns the record."""
        t = time.monotonic()
        blanked = blank_unheld_cells(run)
        p = subprocess.run([TOOL["bin"], "verify", run, "--reeval", "--replay-top",
                            str(replay_top), "--json"], env=self.env, capture_output=True,
                           text=True)
        try:
            verdict = json.loads(p.stdout)
        except ValueError:
            verdict = {}
        if p.returncode != 0 or not sealing_verdict(verdict):
            die(f"{kind} {name}: {run} failed verification, not sealed: "
                f"{(verdict.get('error') or p.stderr.strip() or 'no verdict')[-400:]}")
        verify_s = time.monotonic() - t
        d = os.path.join(self.ledger, kind)
        os.makedirs(d, exist_ok=True)
        archive = os.path.join(d, name + ".run.tar.zst")
        pack_run(run, archive)
        vpath = os.path.join(d, name + ".verify.json")
        write_file(vpath, json.dumps({
            "command": f"apf verify RUN --reeval --replay-top {replay_top} --json",
            "seconds": round(verify_s, 1),
            "index_dsse_sha256": sha256_file(os.path.join(run, "index.dsse.json")),
            "verdict": verdict}, indent=1) + "\n")
        key = os.path.join(d, name + ".runner.pub.pem")
        shutil.copy(os.path.join(self.out, "home", "keys", "default.pub.pem"), key + ".tmp")
        os.replace(key + ".tmp", key)
        rec = {"sealed": now(), "units_ended": verdict.get("units_ended"),
               "archive": os.path.relpath(archive, self.ledger),
               "archive_sha256": sha256_file(archive),
               "verify": os.path.relpath(vpath, self.ledger),
               "verify_sha256": sha256_file(vpath), "verify_s": round(verify_s, 1),
               "runner_key": os.path.relpath(key, self.ledger),
               "runner_keyid": verdict.get("runner_signer")}
        if blanked:
            rec["csv_cells_blanked"] = blanked
        self.state.setdefault("sealed", {}).setdefault(kind, {})[name] = rec
        self.save()
        # What was verified is kept; the bytes are not (hundreds of GB over
        # an external campaign).
        for dd, subdirs, _ in os.walk(run):
            if "ckpt" in subdirs:
                shutil.rmtree(os.path.join(dd, "ckpt"))
                subdirs.remove("ckpt")
        print(f"{kind} {name}: verified in {verify_s:.0f} s and sealed into "
              f"{os.path.relpath(archive, ROOT) if archive.startswith(ROOT) else archive}",
              flush=True)
        return rec

    def restore(self):
        """Every sealed run that this work directory lacks, from the
        ledger (its archive's digest checked first), with its entry beside
        it and its runner's key trusted; the draws of held-out passes too."""
        for kind, runs in sorted(self.state.get("sealed", {}).items()):
            for name, rec in sorted(runs.items()):
                for f in ("archive", "verify", "runner_key"):
                    path = os.path.join(self.ledger, rec[f])
                    if not os.path.exists(path):
                        die(f"{path}: the ledger lacks the sealed {kind} run {name}'s {f}")
                    if f != "runner_key" and sha256_file(path) != rec[f + "_sha256"]:
                        die(f"{path}: not the file sealed ({rec[f + '_sha256'][:16]}...)")
                run = os.path.join(self.out, kind, name + ".run")
                if not os.path.exists(os.path.join(run, "run.json")):
                    unpack_run(os.path.join(self.ledger, rec["archive"]), run)
                entry = os.path.join(self.out, kind, name + ".apf")
                if not kind.endswith("-heldout") and not os.path.exists(entry):
                    shutil.copy(os.path.join(run, "entry.apf"), entry)
                trusted = os.path.join(self.out, "home", "trusted")
                os.makedirs(trusted, exist_ok=True)
                mine = os.path.join(trusted, f"{rec['runner_keyid'][:16]}.pub.pem")
                if not os.path.exists(mine):
                    shutil.copy(os.path.join(self.ledger, rec["runner_key"]), mine)
        for ruleset, rec in self.state.get("heldout", {}).items():
            kept = os.path.join(self.ledger, ruleset + "-heldout", "draw.json")
            draw = os.path.join(self.heldout_dir(ruleset), "draw.json")
            if not os.path.exists(draw) and os.path.exists(kept):
                os.makedirs(os.path.dirname(draw), exist_ok=True)
                shutil.copy(kept, draw)

    def pin(self, **here):
        """Records the campaign's machine class and settings, each on the
        first invocation that names it; refuses any later one that
        differs."""
        if "machine" in here:
            here["machine"] = machine()
        if self.state is None:
            os.makedirs(self.out, exist_ok=True)
            self.state = {"format": FORMAT, "rules": RULES, "invocations": []}
        for k, v in here.items():
            if k not in self.state:
                self.state[k] = v
                self.save()
            elif self.state[k] != v:
                was, now = self.state[k], v
                if k == "machine":
                    was, now = describe(was), describe(now)
                die(f"{self.out}: this campaign's {k} is {was}, here it is {now}: "
                    "a campaign runs on one machine class with one setting "
                    "(start another with --out)")

    def tool(self, ruleset, mode=None):
        """Pins the apf and the sources the ruleset's runs are made with, on
        its first invocation, and uses them on every later one (run and
        publish): a campaign spread over sessions of development is one
        toolchain, or refused. mode "clone" (run's default) clones this
        tree's HEAD into OUT/toolchain/RULESET and builds it there, so that
        commits made here meanwhile change nothing; "here" takes this
        tree's apf as it is and refuses a later invocation whose apf
        reports another build. A ruleset whose runs began before
        toolchains were pinned keeps this tree's apf."""
        TOOL["bin"], TOOL["root"] = APF_BIN, ROOT
        if "APF_WORKLOADS_DIR" in os.environ:
            self.env["APF_WORKLOADS_DIR"] = os.environ["APF_WORKLOADS_DIR"]
        else:
            self.env.pop("APF_WORKLOADS_DIR", None)
        tcs = self.state.setdefault("toolchains", {})
        rec = tcs.get(ruleset)
        rdir = os.path.join(self.out, ruleset)
        if rec is None:
            began = os.path.isdir(rdir) and any(f.endswith(".run") for f in os.listdir(rdir))
            if began or mode is None:
                return
            if mode == "clone":
                rec = {"mode": "clone", "dir": os.path.join("toolchain", ruleset),
                       "commit": git(ROOT, "rev-parse", "HEAD")}
                if git(ROOT, "status", "--porcelain", "--untracked-files=no"):
                    print(f"leaderboard: {ROOT} has uncommitted changes; the toolchain is "
                          f"its HEAD, {rec['commit'][:12]}, without them", file=sys.stderr)
                d = os.path.join(self.out, rec["dir"])
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                subprocess.run(["git", "clone", "-q", "--no-hardlinks", ROOT, d], check=True)
                git(d, "checkout", "-q", "--detach", rec["commit"])
                build_tool(d)
                rec["build"] = version(os.path.join(d, "build", "apf"))
            else:
                rec = {"mode": "here", "dir": None, "commit": None,
                       "build": version(APF_BIN)}
            rec["pinned"] = now()
            tcs[ruleset] = rec
            self.save()
        if rec["mode"] == "clone":
            d = os.path.join(self.out, rec["dir"])
            if not os.path.isdir(os.path.join(d, ".git")):
                # Another checkout takes the campaign up: the pinned commit
                # again, built here, and held to the build string below.
                print(f"leaderboard: the {ruleset} ruleset's toolchain, commit "
                      f"{rec['commit'][:12]}, is cloned again into {d}", file=sys.stderr)
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                subprocess.run(["git", "clone", "-q", "--no-hardlinks", ROOT, d], check=True)
                git(d, "checkout", "-q", "--detach", rec["commit"])
            head = git(d, "rev-parse", "HEAD")
            if head != rec["commit"] or git(d, "status", "--porcelain",
                                            "--untracked-files=no"):
                die(f"{d}: the {ruleset} ruleset's toolchain is pinned at {rec['commit'][:12]}, "
                    f"the clone is at {head[:12]}"
                    + (" with changes" if head == rec["commit"] else "")
                    + ": restore it (git checkout -f) to go on")
            binary = os.path.join(d, "build", "apf")
            if not os.access(binary, os.X_OK):
                build_tool(d)  # the same commit, on a machine of the same class
            TOOL["bin"], TOOL["root"] = binary, d
            # This apf's own workloads, whatever the caller's environment says.
            self.env["APF_WORKLOADS_DIR"] = os.path.join(d, "workloads")
        built = version(TOOL["bin"])
        if built != rec["build"]:
            die(f"{TOOL['bin']} is {built}, the {ruleset} ruleset's runs were made with "
                f"{rec['build']}: one campaign, one toolchain (build that apf, or start "
                "another campaign with --out)")

    def heldout_dir(self, ruleset):
        return os.path.join(self.out, ruleset + "-heldout")

    def draw(self, ruleset, entries):
        """The ruleset's held-out draw, `apf heldout draw` over every entry
        of the ruleset, made once (DIR/RULESET-heldout/draw.json, its digest
        in campaign.json) and recomputed from the entries at every later
        invocation (`apf heldout verify`). Returns its path and the
        (base, variant) pairs it draws."""
        d = self.heldout_dir(ruleset)
        path = os.path.join(d, "draw.json")
        recs = self.state.setdefault("heldout", {})
        paths = [e for e, _ in entries.values()]
        if ruleset not in recs:
            os.makedirs(d, exist_ok=True)
            apf("heldout", "draw", *paths, "-o", path, env=self.env)
            kept = os.path.join(self.ledger, ruleset + "-heldout", "draw.json")
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            shutil.copy(path, kept)
            recs[ruleset] = {"sha256": sha256_file(path), "entries": len(paths),
                             "made": now()}
            self.save()
        elif not os.path.exists(path) or sha256_file(path) != recs[ruleset]["sha256"]:
            die(f"{path}: not the draw this campaign made ({recs[ruleset]['sha256'][:16]}...)")
        apf("heldout", "verify", path, *paths, env=self.env)
        with open(path) as f:
            pairs = [(x["base"], x["variant"]) for x in json.load(f)["draws"]]
        return path, pairs

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
            # The run keeps the entry it began with. The new one must say the
            # same of the submission, workloads, datasets and tuning; the
            # machine's record may differ (another session's kernel), and
            # apf run refuses what of it could change a trial's bits.
            was, new = claims(entry, self.env), claims(fresh, self.env)
            os.unlink(fresh)
            if was != new:
                what = sorted(k for k in set(was) | set(new) if was.get(k) != new.get(k))
                die(f"{name}: its entry differs from the one {run} began with "
                    f"(in {', '.join(what)}: the submission, a workload or the toolchain "
                    "changed): finish the campaign with the sources it began with, "
                    "or start another")
        else:
            os.replace(fresh, entry)
        return entry, run


def blank_unheld_cells(run):
    """eval_measurements.csv's cells of metrics that their eval's log
    record lacks, written as 0 by runners before b55c12b (a value that was
    not finite, which the log's JSON cannot hold; e^loss of a diverged
    text_lm trial), made empty as the verifier expects and the fixed
    writer writes. Only such cells change: a unit whose CSV rows do not
    pair one to one, step for step, with its log's eval records, or whose
    cell is anything but 0, is left as it is for verification to judge;
    every other byte stays. The CSV is derived from the log, and `apf
    verify` holds every cell to it afterwards, so this can make no CSV
    say what its log does not. Returns the number of cells blanked."""
    import csv
    import io
    blanked = 0
    for d, _, files in os.walk(run):
        if "log.jsonl" not in files or "eval_measurements.csv" not in files:
            continue
        with open(os.path.join(d, "log.jsonl")) as f:
            evals = [r for r in (json.loads(line) for line in f if line.strip())
                     if r.get("event") == "eval"]
        path = os.path.join(d, "eval_measurements.csv")
        with open(path, newline="") as f:
            text = f.read()
        rows = list(csv.reader(io.StringIO(text)))
        if len(rows) < 2 or len(rows) - 1 != len(evals):
            continue
        same = io.StringIO()
        csv.writer(same, lineterminator="\n").writerows(rows)
        head, body = rows[0], rows[1:]
        if same.getvalue() != text or "global_step" not in head:
            continue  # not as apf writes it: not this tool's to touch
        step = head.index("global_step")
        if any(r[step] != str(e.get("global_step")) or len(r) != len(head)
               for r, e in zip(body, evals)):
            continue
        n = 0
        for r, e in zip(body, evals):
            for i, col in enumerate(head):
                if "/" in col and col not in e.get("metrics", {}) and r[i] == "0":
                    r[i] = ""
                    n += 1
        if n:
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerows([head] + body)
            write_file(path, out.getvalue())
            print(f"leaderboard: {os.path.relpath(path, run)}: {n} cell(s) of metrics "
                  "its log lacks (not finite) made empty, as apf writes them since "
                  "b55c12b", flush=True)
            blanked += n
    return blanked


def pack_run(run, archive):
    """run, without its checkpoints, as a deterministic tar (sorted names,
    no times or owners) compressed by zstd, written through a temporary
    file and a rename."""
    tmp = archive + ".tmp"
    with open(tmp, "wb") as f:
        tar = subprocess.Popen(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                                "--numeric-owner", "--format=gnu", "--exclude=ckpt",
                                "--exclude=index.lock", "-C", run, "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        z = subprocess.run(["zstd", "-q", "-19", "-c"], stdin=tar.stdout, stdout=f)
        tar.stdout.close()
        if tar.wait() != 0 or z.returncode != 0:
            die(f"{run}: could not archive it into {archive} (tar | zstd failed)")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, archive)


def unpack_run(archive, run):
    """The archive into run (through a temporary directory and a rename),
    refusing anything but plain files and directories beneath it."""
    tmp = run + ".restore"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    listing = subprocess.run(f"zstd -dc {shlex.quote(archive)} | tar -tvf -", shell=True,
                             capture_output=True, text=True)
    if listing.returncode != 0:
        die(f"{archive}: not a tar.zst archive: {listing.stderr.strip()[-200:]}")
    for line in listing.stdout.splitlines():
        name = line.split()[-1]
        if line[0] not in "-d" or name.startswith("/") or ".." in name.split("/"):
            die(f"{archive}: {name}: not a plain file beneath the run directory")
    p = subprocess.run(f"zstd -dc {shlex.quote(archive)} | tar -xf - -C {shlex.quote(tmp)}",
                       shell=True, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"{archive}: could not extract it: {p.stderr.strip()[-200:]}")
    os.makedirs(os.path.dirname(run), exist_ok=True)
    os.replace(tmp, run)


def claims(entry, env):
    """What an entry says of what it runs: its manifest's predicate without
    the environment record, the packing date and the git commit of the
    copy it was packed from (the tree's HEAD of the day; the files and
    their tree digest say what the submission is)."""
    pred = json.loads(apf("inspect", entry, "--json", env=env))["statement"]["predicate"]
    out = {k: v for k, v in pred.items() if k not in ("environment", "created")}
    out["submission"] = {k: v for k, v in out.get("submission", {}).items() if k != "git"}
    return out


def git(d, *args):
    p = subprocess.run(["git", "-C", d, *args], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"git {' '.join(args)} in {d}: {p.stderr.strip()}")
    return p.stdout.strip()


def version(binary):
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"{binary} --version: {p.stderr.strip() or 'failed'}")
    return p.stdout.strip()


def build_tool(d):
    print(f"leaderboard: building the campaign's toolchain in {d} ({now()})", flush=True)
    p = subprocess.run(["make", "-C", d, "all"], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"make -C {d} all: {p.stderr.strip()[-600:]}")


def unit_states(run, env):
    """unit name -> state, from `apf status --json`; {} before the run
    directory exists."""
    if not os.path.exists(os.path.join(run, "run.json")):
        return {}
    p = subprocess.run([TOOL["bin"], "status", run, "--json"], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        die(f"apf status {run}: {p.stderr.strip()}")
    return {u["unit"]: u for u in json.loads(p.stdout)["units"]}


def study_ended(units, k):
    mine = [u for n, u in units.items() if n.startswith(f"study_{k}/")]
    return bool(mine) and all(u["state"] in ("done", "failed") for u in mine)


def workloads_json(env):
    """`apf workloads --json`'s list: the base workloads and their specs."""
    p = subprocess.run([TOOL["bin"], "workloads", "--json"], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        die(f"apf workloads: {p.stderr.strip()}")
    return json.loads(p.stdout)["workloads"]


def base_workloads(env):
    return [w["name"] for w in workloads_json(env)]


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
    c = Campaign(args.out, args.ledger)
    c.pin(machine=None, clock=args.clock, threads=args.threads,
          budget_scale=args.budget_scale)
    c.tool(args.ruleset, args.toolchain)
    subs = submissions()
    names = parse_list(args.submissions, "submissions", subs) if args.submissions \
        else sorted(subs)
    try:
        studies = [int(x) for x in parse_list(args.studies, "studies")]
    except ValueError:
        die(f"--studies {args.studies}: a list of study numbers")
    if any(k < 0 or k >= STUDIES for k in studies):
        die(f"--studies {args.studies}: the rules have studies 0 to {STUDIES - 1}")
    bases = base_workloads(c.env)
    workloads = parse_list(args.workloads, "workloads", bases) if args.workloads else bases
    c.pin(workloads=workloads)
    flags = ["-q", "--clock", args.clock, "--threads", str(args.threads)]
    if args.jobs > 1:
        flags += ["-j", str(args.jobs)]
    if args.budget_scale != 1.0:
        flags += ["--budget-scale", repr(args.budget_scale)]
    if args.heldout and args.slurm is not None:
        die("--heldout runs here, not through --slurm (yet)")
    inv = {"start": now(), "end": None, "wall_s": 0.0, "ruleset": args.ruleset,
           "submissions": names, "studies": studies, "slurm": args.slurm is not None,
           "units_ended": 0}
    if args.heldout:
        inv["heldout"] = True
    c.state["invocations"].append(inv)
    c.save()
    t0 = time.monotonic()

    def note():
        inv["end"] = now()
        inv["wall_s"] = round(time.monotonic() - t0, 1)
        c.save()

    try:
        c.restore()
        until = parse_until(args.until) if args.until else None
        kind = args.ruleset + ("-heldout" if args.heldout else "")
        sealed = c.sealed(kind)
        if args.heldout:
            # The draw is over every entry of the ruleset, whichever are
            # run now.
            entries = {n: c.entry(args.ruleset, n, subs[n], workloads) for n in sorted(subs)}
            draw, pairs = c.draw(args.ruleset, entries)
            drawn = {f"{b}_{v}": b for b, v in pairs}
        else:
            entries = {n: c.entry(args.ruleset, n, subs[n], workloads)
                       for n in names if n not in sealed}
        if args.slurm is not None:
            submit(args, flags, [n for n in names if n not in sealed], entries, studies, c.env)
            return
        # Submission-major: a run is made, verified and sealed within one
        # checkout (its runner key's private half never leaves it), so an
        # invocation finishes the submissions it starts.
        for n in names:
            if n in sealed:
                print(f"{kind} {n}: sealed before, kept", flush=True)
                continue
            entry, run = entries[n]
            if args.heldout:
                run = os.path.join(c.heldout_dir(args.ruleset), n + ".run")
            if until is not None:
                need = estimate_s(c, entry, run, drawn if args.heldout else None)
                if time.time() + need > until:
                    what = "not continued" if os.path.exists(run) else "not begun"
                    print(f"{kind} {n}: {what}: it would take about {need / 60:.0f} min, "
                          f"past --until {args.until}; the invocation stops here", flush=True)
                    break
            for k in studies:
                if args.heldout:
                    run_heldout_study(c, args.ruleset, n, k, entry, draw, pairs, flags, inv)
                else:
                    run_study(args.ruleset, n, k, entries[n], flags, c.env, inv)
                note()
            units = unit_states(run, c.env)
            if args.heldout:
                units = {u: x for u, x in units.items() if u.split("/")[1] in drawn}
            if units and all(x["state"] in ("done", "failed") for x in units.values()):
                c.seal(kind, n, run, args.replay_top)
            note()
    finally:
        # Refused or interrupted, an invocation's time is the campaign's.
        note()


def parse_until(text):
    """--until: HH:MM (UTC, the next such time) or an ISO 8601 UTC time
    (2026-12-05T08:00Z); returns seconds since the epoch."""
    utc = datetime.timezone.utc
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", text)
    if m and int(m[1]) < 24 and int(m[2]) < 60:
        t = datetime.datetime.now(utc).replace(hour=int(m[1]), minute=int(m[2]), second=0,
                                               microsecond=0)
        if t.timestamp() <= time.time():
            t += datetime.timedelta(days=1)
        return t.timestamp()
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        die(f"--until {text}: not HH:MM (UTC) or an ISO 8601 time")
    if t.tzinfo is None:
        die(f"--until {text}: say the time zone (Z for UTC)")
    return t.timestamp()


# Wall time per second of budget, verification included: a study of 25
# external units took 1669 s on the wall for about 1440 s of budgets, and
# verifying with re-evaluation about 12 s a unit more.
WALL_PER_BUDGET = 1.4


def estimate_s(c, entry, run, dirs=None):
    """About how long the rest of one submission's run takes on the wall:
    the budgets of its planned units not ended yet times WALL_PER_BUDGET.
    dirs (a held-out pass): variant directory -> base workload, each
    planned unit of a drawn base counting once per variant."""
    plan = json.loads(apf("plan", entry, "--json", "--budget-scale",
                          repr(c.state["budget_scale"]), env=c.env))
    budget = {w["workload"]: w["budget_s"] for w in plan["budget"]["workloads"]}
    ended = {u for u, x in unit_states(run, c.env).items() if x["state"] in ("done", "failed")}
    todo = 0.0
    for u in plan["units"]:
        w = u["workload"]
        for d in ([w] if dirs is None else [d for d, b in dirs.items() if b == w]):
            if f"study_{u['study']}/{d}/trial_{u['trial']}" not in ended:
                todo += budget[w]
    return WALL_PER_BUDGET * todo


def submit(args, flags, names, entries, studies, env):
    """One job array per submission and study: every unfinished unit;
    `run --slurm` again after preemptions."""
    for n in names:
        entry, run = entries[n]
        resume = ["--resume"] if os.path.exists(os.path.join(run, "run.json")) else []
        for k in studies:
            p = subprocess.run([TOOL["bin"], "run", entry, "-o", run, *flags, "--study", str(k),
                                *resume, "--slurm", *args.slurm], env=env,
                               capture_output=True, text=True)
            if p.returncode != 0:
                die(f"{n} study {k}: apf run --slurm: {p.stderr.strip()[-400:]}")
            print(f"{args.ruleset} {n} study {k}: {p.stdout.strip()}", flush=True)
            resume = ["--resume"]


def run_heldout_study(c, ruleset, n, k, entry, draw, pairs, flags, inv):
    """Study k of the drawn variants of submission n, into a run directory
    of their own (DIR/RULESET-heldout/NAME.run): the same entry, plan and
    hyperparameters as its base run, the draw given from the first
    invocation, and only the variants' units run (`apf run --variant`); the
    base units there stay pending (the base run has them)."""
    run = os.path.join(c.heldout_dir(ruleset), n + ".run")
    dirs = {f"{b}_{v}" for b, v in pairs}

    def mine(units):
        return {u: s for u, s in units.items()
                if u.startswith(f"study_{k}/") and u.split("/")[1] in dirs}

    units = mine(unit_states(run, c.env))
    if units and all(s["state"] in ("done", "failed") for s in units.values()):
        print(f"{ruleset} held-out {n} study {k}: ended before, kept", flush=True)
        return
    print(f"{ruleset} held-out {n} study {k}: running ({now()})", flush=True)
    t = time.monotonic()
    for base, variant in pairs:
        began = os.path.exists(os.path.join(run, "run.json"))
        p = subprocess.run([TOOL["bin"], "run", entry, "-o", run, *flags, "--heldout", draw,
                            "--workload", base, "--variant", variant, "--study", str(k),
                            *(["--resume"] if began else [])],
                           env=c.env, capture_output=True, text=True)
        if "no unit of the plan matches" in p.stderr:
            continue  # a drawn workload this entry does not run
        if p.returncode not in (0, 3):
            die(f"{n} held-out study {k}: apf run: {p.stderr.strip()[-400:]}")
    units = mine(unit_states(run, c.env))
    if not units or not all(s["state"] in ("done", "failed") for s in units.values()):
        die(f"{n} held-out study {k}: the run did not finish")
    inv["units_ended"] += len(units)
    failed = [u for u, s in units.items() if s["state"] == "failed"]
    print(f"{ruleset} held-out {n} study {k}: ended in {time.monotonic() - t:.0f} s"
          + (f", failed: {', '.join(failed)}" if failed else ""), flush=True)


def run_study(ruleset, n, k, entry_run, flags, env, inv):
    entry, run = entry_run
    units = unit_states(run, env)
    if study_ended(units, k):
        print(f"{ruleset} {n} study {k}: ended before, kept", flush=True)
        return
    resume = ["--resume"] if units else []
    print(f"{ruleset} {n} study {k}: running ({now()})", flush=True)
    t = time.monotonic()
    p = subprocess.run([TOOL["bin"], "run", entry, "-o", run, *flags, "--study", str(k), *resume],
                       env=env, capture_output=True, text=True)
    units = unit_states(run, env)
    # A failed trial (a diverged configuration, a fault) is a result the
    # scorer counts; a study left unfinished is not.
    if not study_ended(units, k):
        die(f"{n} study {k}: the run did not finish (exit {p.returncode}): "
            f"{p.stderr.strip()[-400:]}")
    mine = {u: s for u, s in units.items() if u.startswith(f"study_{k}/")}
    inv["units_ended"] += len(mine)
    failed = [u for u, s in mine.items() if s["state"] == "failed"]
    print(f"{ruleset} {n} study {k}: ended in {time.monotonic() - t:.0f} s"
          + (f", failed: {', '.join(failed)}" if failed else ""), flush=True)


def progress(c):
    """(ruleset, submission) -> (counts of its units' states, units, the
    budget seconds its unfinished units have left: a pending unit's is its
    workload's cpu budget times the ruleset's multiplier and the scale; an
    entry whose run has not begun, its plan's whole budget)."""
    out = {}
    for ruleset in ("external", "self", "external-heldout", "self-heldout"):
        d = os.path.join(c.out, ruleset)
        if not os.path.isdir(d):
            continue
        c.tool(ruleset.split("-")[0])
        budgets = {w["name"]: w["budget"]["cpu"]["max_runtime_s"]
                   for w in workloads_json(c.env)}
        if not ruleset.endswith("-heldout"):
            for f in sorted(os.listdir(d)):
                if f.endswith(".apf") and not os.path.exists(os.path.join(d, f[:-4] + ".run")):
                    plan = json.loads(apf("plan", os.path.join(d, f), "--json", "--budget-scale",
                                          repr(c.state["budget_scale"]), env=c.env))
                    out[(ruleset, f[:-4])] = ({"pending": len(plan["units"])},
                                              len(plan["units"]),
                                              plan["budget"]["total_budget_s"])
        # A held-out run counts its variants' units: its base units are the
        # base run's, and stay pending there.
        drawn = None
        if ruleset.endswith("-heldout"):
            with open(os.path.join(d, "draw.json")) as f:
                drawn = {f"{x['base']}_{x['variant']}" for x in json.load(f)["draws"]}
        for f in sorted(os.listdir(d)):
            if f.endswith(".run"):
                units = unit_states(os.path.join(d, f), c.env)
                if drawn is not None:
                    units = {n: u for n, u in units.items() if n.split("/")[1] in drawn}
                counts, left = {}, 0.0
                for u in units.values():
                    counts[u["state"]] = counts.get(u["state"], 0) + 1
                    if u["state"] in ("done", "failed"):
                        continue
                    budget = u["budget_s"]
                    if budget is None:
                        w = u["unit"].split("/")[1]
                        budget = budgets.get(w, 0.0) \
                            * BUDGET_MULTIPLIER[ruleset.split("-")[0]] \
                            * c.state["budget_scale"]
                    left += max(0.0, budget - (u["submission_s"] or 0.0))
                out[(ruleset, f[:-4])] = counts, len(units), left
    return out


def cmd_status(args):
    c = Campaign(args.out, args.ledger)
    if c.state is None:
        die(f"{c.out}: no campaign here (no campaign.json)")
    c.restore()
    st = c.state
    print(f"campaign {c.out}: {st['rules']}, clock {st['clock']}, {st['threads']} threads"
          + (f", budget scale {st['budget_scale']} (unofficial)"
             if st["budget_scale"] != 1.0 else ""))
    print(f"machine: {describe(st['machine'])}")
    here = machine()
    if here != st["machine"]:
        print(f"this machine is another class: {describe(here)}")
    parts = []
    for ruleset in ("self", "external"):
        inv = [i for i in st["invocations"] if i["ruleset"] == ruleset]
        if inv:
            tc = st.get("toolchains", {}).get(ruleset)
            parts.append(f"{ruleset} {sum(i['wall_s'] for i in inv) / 3600:.2f} h over "
                         f"{len(inv)} invocation{'s' if len(inv) != 1 else ''}"
                         + (f" ({tc['build']})" if tc else ""))
    print(f"wall time so far: {'; '.join(parts) or 'none'}")
    total = 0.0
    for (ruleset, name), (counts, planned, left) in sorted(progress(c).items()):
        ended = counts.get("done", 0) + counts.get("failed", 0)
        total += left
        print(f"  {ruleset:16} {name:22} {ended}/{planned} units ended"
              + "".join(f", {v} {k}" for k, v in sorted(counts.items()) if k != "done")
              + (", sealed" if name in c.sealed(ruleset) else ""))
    print(f"left: at most {total / 60:.0f} min of the budgets of unfinished units (a trial "
          "meeting its targets stops sooner; each unit also starts, builds and evaluates)")
    changed = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", c.ledger],
                             capture_output=True, text=True).stdout.strip()
    if changed and c.ledger.startswith(ROOT + os.sep):
        print(f"ledger {os.path.relpath(c.ledger, ROOT)}: not committed yet "
              f"({len(changed.splitlines())} paths): commit it, or a new checkout loses "
              "what it holds")


def write_file(path, data):
    """Writes path through a temporary file and a rename."""
    tmp = path + ".tmp"
    with open(tmp, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sha256_file(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def score_args(ruleset):
    return ["--rules", RULES] + (["--self-tuning"] if ruleset == "self" else [])


def apf_out(args, env, what, ok=(0,)):
    p = subprocess.run([TOOL["bin"], *args], capture_output=True, text=True, env=env)
    if p.returncode not in ok:
        die(f"{what}: {p.stderr.strip()[-600:]}")
    return p


def reproduce_command(ruleset, records):
    return " ".join(["apf", "score", os.path.join(records, "algoperf", "submissions", "*"),
                     "--targets", os.path.join(records, "algoperf", "workload_targets.json"),
                     *score_args(ruleset)])


def cmd_publish(args):
    import glob
    c = Campaign(args.out, args.ledger)
    if c.state is None:
        die(f"{c.out}: no campaign here (no campaign.json)")
    c.tool(args.ruleset)
    c.restore()
    rdir = os.path.join(c.out, args.ruleset)
    sealed = c.sealed(args.ruleset)
    for run in sorted(glob.glob(os.path.join(rdir, "*.run"))):
        units = unit_states(run, c.env)
        left = [u for u, s in units.items() if s["state"] not in ("done", "failed")]
        if left:
            die(f"{run}: {len(left)} of {len(units)} units have not ended "
                f"({left[0]}, ...): run the campaign to its end first")
        if os.path.basename(run)[:-4] not in sealed:
            die(f"{run}: ended but not sealed into the ledger: `leaderboard.py run` "
                "again seals it (verified with re-evaluation and replay, then archived)")
    if not sealed:
        die(f"{rdir}: no runs of the {args.ruleset} ruleset")
    # What is published is what the ledger holds: each sealed run unpacked
    # afresh and held to the verdict it was sealed with.
    runs, counts = sealed_runs(c, args.ruleset), {}
    for run in runs:
        counts[run] = len(unit_states(run, c.env))
    dest = os.path.join(os.path.abspath(args.dest), args.ruleset)
    stage = dest + ".new"
    shutil.rmtree(stage, ignore_errors=True)
    records = os.path.join(stage, "records")
    os.makedirs(records)
    # Each run was verified with re-evaluation and replay when it ended,
    # before its checkpoints were deleted (check_sealed holds that verdict
    # to the run); here every run again, whole but for the checkpoints.
    verify = ["--verify", "--pruned"]
    names = [os.path.basename(r)[:-4] for r in runs]
    title = f"apf leaderboard: {'self-tuning' if args.ruleset == 'self' else 'external tuning'}"
    # One verification for everything: the table on stdout, the page, the
    # plot, and the export, which holds apf score's JSON result.
    t = time.monotonic()
    export = os.path.join(records, "algoperf")
    table = apf_out(["score", *runs, *score_args(args.ruleset), *verify,
                     "--svg", os.path.join(stage, "profile.svg"),
                     "--report", os.path.join(stage, "report.html"), "--title", title,
                     "--export-algoperf", export], c.env, "apf score")
    verify_s = time.monotonic() - t
    with open(os.path.join(export, "apf_export.json")) as f:
        result = json.load(f)["apf_score"]
    unverified = [s["name"] for s in result["submissions"] if s.get("verified") != "yes"]
    unverified += [x.get("name", "?") for x in result.get("excluded", [])]
    if unverified:
        # The board claims every run verified: one that failed leaves the
        # published board (and the README) as they were, and the staged
        # one, with apf score's reasons, for whoever looks into it.
        write_file(os.path.join(stage, "scores.txt"), table.stdout)
        reasons = "; ".join(f"{x.get('name', '?')}: {x.get('reason') or 'no reason given'}"
                            for x in result.get("excluded", []))
        die(f"{len(unverified)} of {len(runs)} runs failed verification ({reasons}): "
            f"{dest} left as it was; apf score's table is in {stage}/scores.txt")
    write_file(os.path.join(stage, "scores.json"), json.dumps(result, indent=1) + "\n")
    write_file(os.path.join(stage, "scores.txt"), table.stdout)
    # The records alone must give the same scores and times.
    again = apf_out(["score", *sorted(glob.glob(os.path.join(export, "submissions", "*"))),
                     "--targets", os.path.join(export, "workload_targets.json"),
                     *score_args(args.ruleset), "--json"], c.env, "apf score (records)")
    mine = {s["name"]: (s["score"], s["times"]) for s in result["submissions"]}
    back = {s["name"]: (s["score"], s["times"]) for s in json.loads(again.stdout)["submissions"]}
    if mine != back:
        die(f"the records do not score to the run directories' scores: {back} != {mine}")
    listing, seal_commands = [], set()
    for run, name in zip(runs, names):
        d = os.path.join(records, "runs", name)
        os.makedirs(d)
        for f in ("run.json", "index.dsse.json"):
            shutil.copy(os.path.join(run, f), os.path.join(d, f))
        rec = sealed[name]
        shutil.copy(os.path.join(c.ledger, rec["runner_key"]),
                    os.path.join(d, "runner.pub.pem"))
        shutil.copy(os.path.join(c.ledger, rec["verify"]), os.path.join(d, "verify.json"))
        with open(os.path.join(c.ledger, rec["verify"])) as f:
            seal_commands.add(json.load(f)["command"])
        listing.append({"submission": name, "entry_sha256": sha256_file(os.path.join(run, "entry.apf")),
                        "run_json_sha256": sha256_file(os.path.join(run, "run.json")),
                        "index_dsse_sha256": sha256_file(os.path.join(run, "index.dsse.json")),
                        "runner_keyid": rec["runner_keyid"],
                        "sealed": rec["sealed"], "verify_s": rec["verify_s"],
                        "units": counts[run]})
    write_file(os.path.join(records, "runs.json"), json.dumps(
        {"ruleset": args.ruleset, "rules": RULES, "runs": listing,
         "verification": "each run as it ended: apf verify RUN --reeval --replay-top Q "
                         "(runs/NAME/verify.json says Q and the verdict), then its "
                         "checkpoints deleted; at publish: apf score --verify --pruned",
         "seal_commands": sorted(seal_commands),
         "verify_and_score_s": round(verify_s, 1), "unverified": unverified,
         "reproduce": reproduce_command(args.ruleset, os.path.relpath(
             os.path.join(dest, "records"), ROOT))}, indent=1) + "\n")
    # The ruleset's own invocations and toolchain: one ruleset's board is
    # not timed by another's campaign.
    held = heldout_board(c, args, stage, export, result)
    camp = dict(c.state)
    camp["invocations"] = [i for i in camp["invocations"] if i["ruleset"] == args.ruleset]
    camp["toolchains"] = {k: v for k, v in camp.get("toolchains", {}).items()
                          if k == args.ruleset}
    camp["wall_s"] = round(sum(i["wall_s"] for i in camp["invocations"]), 1)
    write_file(os.path.join(stage, "campaign.json"), json.dumps(camp, indent=1) + "\n")
    with open(os.path.join(records, "runs.json")) as f:
        runs_info = json.load(f)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(stage, dest)
    readme = os.path.join(os.path.dirname(dest), "README.md")
    if os.path.exists(readme):
        replace_block(readme, args.ruleset.upper(), board_markdown(result, camp, runs_info))
    print(table.stdout, end="")
    print(f"published {dest} ({len(runs)} runs; verification and scoring {verify_s:.0f} s)")
    if held:
        print(f"published {os.path.join(dest, 'heldout')}: the board's records and the "
              f"held-out pass's variants, scored with the held-out rules")


def sealing_verdict(v):
    """Whether `apf verify --json`'s verdict v seals a run: verified and
    complete, no unit pruned, every checkpoint re-evaluated, the replay
    passed. One test for the seal made and the seal published."""
    checks = {x.get("name"): x for x in v.get("checks", [])}
    ckpt, replay = checks.get("checkpoints", {}), checks.get("replay", {})
    return bool(v.get("verified") and v.get("complete") and not v.get("pruned_units")
                and ckpt.get("outcome") == "passed"
                and "re-evaluated" in ckpt.get("detail", "")
                and replay.get("outcome") == "passed")


def sealed_runs(c, kind):
    """The sealed runs of kind, unpacked from the ledger into
    OUT/publish/KIND/NAME.run, each held to its seal: the verdict it was
    sealed with passed re-evaluation of every checkpoint and the replay,
    with no unit pruned, over the run whose signed index is the one
    unpacked. Returns their paths, by name."""
    base = os.path.join(c.out, "publish", kind)
    shutil.rmtree(base, ignore_errors=True)
    runs = []
    for name, rec in sorted(c.sealed(kind).items()):
        run = os.path.join(base, name + ".run")
        unpack_run(os.path.join(c.ledger, rec["archive"]), run)
        with open(os.path.join(c.ledger, rec["verify"])) as f:
            seal = json.load(f)
        if not sealing_verdict(seal["verdict"]):
            die(f"{rec['verify']}: {kind} {name} was not sealed with a passing verification "
                "with re-evaluation and replay")
        if sha256_file(os.path.join(run, "index.dsse.json")) != seal["index_dsse_sha256"]:
            die(f"{rec['archive']}: its signed index is not the one verified when it was "
                "sealed")
        runs.append(run)
    return runs


def heldout_board(c, args, stage, export, result):
    """The held-out pass beside the board (DEST/RULESET/heldout/): once
    every submission's drawn variants have ended, each held-out run is
    verified as the board's runs are, and the board's export plus the
    variants' CSVs, in AlgoPerf's layout, are scored with the held-out rules
    and the draw. None when there is no pass, or it has not ended."""
    import glob
    hd = c.heldout_dir(args.ruleset)
    draw = os.path.join(hd, "draw.json")
    if not os.path.exists(draw):
        return None
    with open(draw) as f:
        dirs = {f"{x['base']}_{x['variant']}": x["base"] for x in json.load(f)["draws"]}
    kind = args.ruleset + "-heldout"
    names = sorted(s["name"] for s in result["submissions"])
    sealed = c.sealed(kind)
    if any(n not in sealed for n in names):
        left = [n for n in names if n not in sealed]
        print(f"leaderboard: the held-out pass has not ended ({len(left)} of {len(names)} "
              f"submissions' variant runs not sealed: {', '.join(left)}): the board is "
              "published without it", file=sys.stderr)
        return None
    t = time.monotonic()
    # Sealed with re-evaluation and replay (sealed_runs holds each to its
    # verdict); here each again, whole but for the checkpoints.
    paths = {os.path.basename(r)[:-4]: r for r in sealed_runs(c, kind)}
    runs = {}
    for n in names:
        run = paths[n]
        units = {u: s for u, s in unit_states(run, c.env).items() if u.split("/")[1] in dirs}
        runs[n] = (run, sorted(units))
        p = subprocess.run([TOOL["bin"], "verify", run, "--pruned"], env=c.env,
                           capture_output=True, text=True)
        if p.returncode != 0:
            die(f"held-out pass: {run} failed verification "
                f"({(p.stderr.strip().splitlines() or ['?'])[-1]}): the board is left as it was")
    verify_s = time.monotonic() - t
    out = os.path.join(stage, "heldout")
    tree = os.path.join(out, "records", "algoperf")
    shutil.copytree(export, tree)
    for n, (run, units) in runs.items():
        for u in units:
            src = os.path.join(run, u, "eval_measurements.csv")
            if os.path.exists(src):
                os.makedirs(os.path.join(tree, "submissions", n, u))
                shutil.copy(src, os.path.join(tree, "submissions", n, u,
                                              "eval_measurements.csv"))
    # Each variant's target from its spec, beside its base's metric.
    tpath = os.path.join(tree, "workload_targets.json")
    with open(tpath) as f:
        targets = json.load(f)
    vt = {f"{w['name']}_{v['name']}": v["validation_target"]
          for w in workloads_json(c.env) for v in w.get("variants", [])}
    for d, b in dirs.items():
        if b in targets["workloads"]:
            targets["workloads"][d] = dict(targets["workloads"][b],
                                           validation_target_value=vt[d])
    write_file(tpath, json.dumps(targets, indent=1) + "\n")
    shutil.copy(draw, os.path.join(out, "draw.json"))
    score = ["score", *sorted(glob.glob(os.path.join(tree, "submissions", "*"))),
             "--targets", tpath, *score_args(args.ruleset), "--heldout", draw]
    table = apf_out(score, c.env, "apf score (held-out rules)")
    held = json.loads(apf_out(score + ["--json"], c.env, "apf score (held-out rules)").stdout)
    write_file(os.path.join(out, "scores.txt"), table.stdout)
    write_file(os.path.join(out, "scores.json"), json.dumps(held, indent=1) + "\n")
    listing = []
    for n, (run, units) in runs.items():
        d = os.path.join(out, "records", "runs", n)
        os.makedirs(d)
        for f in ("run.json", "index.dsse.json"):
            shutil.copy(os.path.join(run, f), os.path.join(d, f))
        listing.append({"submission": n,
                        "entry_sha256": sha256_file(os.path.join(run, "entry.apf")),
                        "run_json_sha256": sha256_file(os.path.join(run, "run.json")),
                        "index_dsse_sha256": sha256_file(os.path.join(run, "index.dsse.json")),
                        "variant_units": len(units)})
    write_file(os.path.join(out, "records", "runs.json"), json.dumps(
        {"draw_sha256": sha256_file(draw), "runs": listing,
         "verification": "each run as it ended: apf verify RUN --reeval --replay-top Q "
                         "(the ledger's RULESET-heldout/NAME.verify.json), then its "
                         "checkpoints deleted; at publish: apf verify RUN --pruned",
         "verify_s": round(verify_s, 1),
         "reproduce": " ".join(["apf", *score[:1],
                                os.path.join("heldout", "records", "algoperf", "submissions",
                                             "*"), "--targets",
                                os.path.join("heldout", "records", "algoperf",
                                             "workload_targets.json"),
                                *score_args(args.ruleset), "--heldout",
                                os.path.join("heldout", "draw.json")])}, indent=1) + "\n")
    return held


def replace_block(path, tag, text):
    """Puts text between <!-- BEGIN tag --> and <!-- END tag --> in the
    file at path (both markers must be there)."""
    try:
        with open(path) as f:
            doc = f.read()
    except OSError as e:
        die(f"{path}: {e.strerror}")
    begin, end = f"<!-- BEGIN {tag} -->\n", f"<!-- END {tag} -->"
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        die(f"{path}: no {begin.strip()} ... {end} block")
    write_file(path, doc[:i + len(begin)] + text + doc[j:])


def fmt_s(t):
    return "inf" if t in (None, "inf") or float(t) == float("inf") else f"{float(t):.1f}"


def board_markdown(result, camp, runs_info):
    """The published leaderboard of one ruleset as Markdown: scores, the
    median times-to-target, and what it ran on."""
    ws = result["base_workloads"]
    rows = ["| rank | submission | score | " + " | ".join(ws) + " | verified |",
            "|---|---|---|" + "---|" * len(ws) + "---|"]
    for s in result["submissions"]:
        rows.append(f"| {s['rank']} | {s['name']} | {s['score']:.4f} | "
                    + " | ".join(fmt_s(s["times"].get(w)) for w in ws)
                    + f" | {s.get('verified', 'no')} |")
    m = camp["machine"]
    first = min(i["start"] for i in camp["invocations"])
    last = max(i["end"] or i["start"] for i in camp["invocations"])
    return ("\n".join(rows) + "\n\n"
            f"Median time-to-target over the studies, in submission seconds (`--clock "
            f"{camp['clock']}`, {camp['threads']} threads; inf: the target was missed). "
            + (f"**Budgets scaled x{camp['budget_scale']}: a quick look, not a result.** "
               if camp["budget_scale"] != 1.0 else "") +
            f"Rules {runs_info['rules']}; {len(runs_info['runs'])} runs, "
            + verified_words(runs_info) + f". Machine: {describe(m)}. "
            + toolchain_words(camp) +
            f"Campaign: {camp['wall_s'] / 3600:.2f} h of wall time in "
            f"{len(camp['invocations'])} invocation{'s' if len(camp['invocations']) != 1 else ''}, "
            f"{first} to {last}.\n")


def duration_words(s):
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def verified_words(runs_info):
    """How the board's runs were verified, in words: each sealed as it
    ended (the seal's command and the time all the seals took), then all
    of them again at publish, without their checkpoints."""
    but = (f" except {', '.join(runs_info['unverified'])}" if runs_info["unverified"]
           else "")
    sealed_s = sum(r["verify_s"] for r in runs_info["runs"])
    return (f"every one verified{but} as it ended by "
            + " or ".join(f"`{x.replace(' --json', '')}`" for x in runs_info["seal_commands"])
            + f" ({duration_words(sealed_s)} in all), its checkpoints then deleted, and again "
            f"at publish by `apf score --verify --pruned` "
            f"({duration_words(runs_info['verify_and_score_s'])})")


def toolchain_words(camp):
    tc = next(iter(camp.get("toolchains", {}).values()), None)
    if not tc:
        return ""
    return (f"Toolchain: {tc['build']}"
            + (f", built from commit {tc['commit'][:12]} in a clone of its own"
               if tc["mode"] == "clone" else "") + ". ")


def groups_by(values, higher=True):
    """Rank groups (ties together) of {name: value}, best first."""
    order = sorted(set(values.values()), reverse=higher)
    return [sorted(n for n, v in values.items() if v == x) for x in order]


def findings(result):
    """The paper's observations on a scoring: per workload the spread of
    median times-to-target and how many pairs are more than 20% apart, and
    how far the per-workload rankings agree."""
    times = {s["name"]: s["times"] for s in result["submissions"]}
    per = {}
    rankings = {}
    for w in result["base_workloads"]:
        met = {n: float(t[w]) for n, t in times.items()
               if t.get(w) not in (None, "inf", "-") and float(t[w]) != float("inf")}
        pairs = [(a, b) for a in met for b in met if a < b]
        apart = [(a, b) for a, b in pairs
                 if max(met[a], met[b]) > 1.2 * min(met[a], met[b])]
        per[w] = {"met": len(met), "of": len(times),
                  "fastest": min(met.items(), key=lambda x: x[1]) if met else None,
                  "slowest": max(met.items(), key=lambda x: x[1]) if met else None,
                  "pairs": len(pairs), "pairs_over_20pct": len(apart)}
        # Missing the target ranks last, all misses tied.
        rankings[w] = groups_by({n: -met.get(n, float("inf")) for n in times})
    between = {}
    ws = list(rankings)
    for i, a in enumerate(ws):
        for b in ws[i + 1:]:
            between[f"{a} vs {b}"] = kendall_tau(rankings[a], rankings[b])
    return {"per_workload": per, "rankings": rankings, "tau_between_workloads": between}


def heldout_change(base, held):
    """What the held-out rules change: each submission's score without and
    with them, the base workloads on which it keeps no credit (its variant
    missed, or took over 4 times the best), and the two rankings' tau-b."""
    was = {s["name"]: s for s in base["submissions"]}
    now_ = {s["name"]: s for s in held["submissions"]}
    subs = {}
    for n in sorted(was, key=lambda n: -was[n]["score"]):
        if n not in now_:
            continue
        lost = [w for w in base["base_workloads"]
                if was[n]["times"].get(w) not in (None, "inf")
                and now_[n]["times"].get(w) in (None, "inf")]
        subs[n] = {"score": was[n]["score"], "heldout_score": now_[n]["score"], "lost": lost}
    common = list(subs)
    tau = kendall_tau(groups_by({n: subs[n]["score"] for n in common}),
                      groups_by({n: subs[n]["heldout_score"] for n in common})) \
        if len(common) >= 2 else None
    variants = [v["variant"] for v in held.get("heldout_variants", [])]
    return {"variants": variants, "submissions": subs, "kendall_tau_b": tau}


def cmd_compare(args):
    dest = os.path.abspath(args.dest)
    try:
        with open(os.path.join(dest, "algoperf.json")) as f:
            ref = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{dest}/algoperf.json: {e}")
    out = {"comparisons": [], "findings": {}}
    lines = []
    for cmp in ref["comparisons"]:
        path = os.path.join(dest, cmp["ruleset"], "scores.json")
        if not os.path.exists(path):
            lines.append(f"- {cmp['name']}: no {cmp['ruleset']} scores published yet")
            continue
        with open(path) as f:
            result = json.load(f)
        ours = {s["name"]: s["score"] for s in result["submissions"]}
        theirs = {a: v for a, v in cmp["scores"].items() if a in ours}
        common = sorted(theirs)
        tau = kendall_tau(groups_by({a: ours[a] for a in common}),
                          groups_by(theirs)) if len(common) >= 2 else None
        out["comparisons"].append({"name": cmp["name"], "source": cmp["source"],
                                   "algorithms": common, "apf": {a: ours[a] for a in common},
                                   "algoperf": theirs, "kendall_tau_b": tau})
        lines.append(f"- {cmp['name']}: Kendall's tau-b = "
                     + (f"{tau:+.3f}" if tau is not None else "n/a")
                     + f" over {len(common)} algorithms ({', '.join(common)})")
        if cmp["ruleset"] not in out["findings"]:
            out["findings"][cmp["ruleset"]] = findings(result)
    for ruleset in ("self", "external"):
        hp = os.path.join(dest, ruleset, "heldout", "scores.json")
        bp = os.path.join(dest, ruleset, "scores.json")
        if not (os.path.exists(hp) and os.path.exists(bp)):
            continue
        with open(hp) as f, open(bp) as g:
            h = heldout_change(json.load(g), json.load(f))
        out.setdefault("heldout", {})[ruleset] = h
        lines.append(f"\n{'Self-tuning' if ruleset == 'self' else 'External tuning'}: what "
                     f"the held-out rules change (variants {', '.join(h['variants'])})\n")
        for n, x in h["submissions"].items():
            lines.append(f"- {n}: {x['score']:.4f} -> {x['heldout_score']:.4f}"
                         + (f"; no credit on {', '.join(x['lost'])}" if x["lost"] else ""))
        lines.append("- ranking with the held-out rules against without: Kendall's tau-b "
                     + (f"{h['kendall_tau_b']:+.3f}" if h["kendall_tau_b"] is not None
                        else "n/a"))
    write_file(os.path.join(dest, "comparison.json"), json.dumps(out, indent=1) + "\n")
    for ruleset, f in out["findings"].items():
        lines.append(f"\n{'Self-tuning' if ruleset == 'self' else 'External tuning'}: "
                     "per workload, median time-to-target (s)\n")
        for w, x in f["per_workload"].items():
            if x["met"] == 1:
                lines.append(f"- {w}: 1 of {x['of']} met it, {x['fastest'][0]} at "
                             f"{x['fastest'][1]:.1f}")
            elif x["fastest"]:
                lines.append(f"- {w}: {x['met']} of {x['of']} met it; fastest "
                             f"{x['fastest'][0]} {x['fastest'][1]:.1f}, slowest "
                             f"{x['slowest'][0]} {x['slowest'][1]:.1f} "
                             f"({x['slowest'][1] / x['fastest'][1]:.2f}x); "
                             f"{x['pairs_over_20pct']} of {x['pairs']} pairs more than 20% apart")
            else:
                lines.append(f"- {w}: none of {x['of']} met it")
        taus = {k: v for k, v in f["tau_between_workloads"].items() if v is not None}
        if taus:
            lo = min(taus, key=taus.get)
            hi = max(taus, key=taus.get)
            lines.append(f"- rankings between workloads (Kendall's tau-b, misses tied last): "
                         f"from {taus[lo]:+.2f} ({lo}) to {taus[hi]:+.2f} ({hi}) over "
                         f"{len(taus)} pairs")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    readme = os.path.join(dest, "README.md")
    if os.path.exists(readme):
        replace_block(readme, "COMPARISON", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ruleset", required=True, choices=["external", "self"])
    r.add_argument("--submissions")
    r.add_argument("--workloads", help="these base workloads only (default: every one)")
    r.add_argument("--studies", default=",".join(str(k) for k in range(STUDIES)))
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("-j", "--jobs", type=int, default=1)
    r.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    r.add_argument("--budget-scale", type=float, default=1.0,
                   help="a quick look (unofficial; pinned like the rest)")
    r.add_argument("--heldout", action="store_true",
                   help="the held-out pass: every submission's drawn variants, after its "
                        "base runs")
    r.add_argument("--until", metavar="TIME",
                   help="begin no submission that would not end by TIME (HH:MM UTC, or ISO "
                        "8601): the invocation stops between submissions")
    r.add_argument("--replay-top", type=int, default=2,
                   help="sealing a run verifies it with --reeval and --replay-top Q")
    r.add_argument("--toolchain", default="clone", choices=["clone", "here"],
                   help="a ruleset's first invocation: build HEAD in a clone of its own "
                        "(default), or take this tree's apf as it is")
    r.add_argument("--slurm", nargs=argparse.REMAINDER,
                   help="submit job arrays instead of running (the rest: apf run's "
                        "--slurm options)")
    s = sub.add_parser("status")
    pb = sub.add_parser("publish")
    pb.add_argument("--ruleset", required=True, choices=["external", "self"])
    cm = sub.add_parser("compare")
    for p in (r, s, pb):
        p.add_argument("--out", default=os.path.join(ROOT, "leaderboard", ".runs"))
        p.add_argument("--ledger", help="the committed record of the campaign (default: "
                                        "campaign/ beside --out, leaderboard/campaign)")
    for p in (pb, cm):
        p.add_argument("--dest", default=os.path.join(ROOT, "leaderboard"))
    args = ap.parse_args()
    if args.cmd == "run":
        if args.threads < 1 or args.jobs < 1:
            die("--threads and -j take N >= 1")
        if not 0 < args.budget_scale <= 1:
            die(f"--budget-scale {args.budget_scale}: must be in (0, 1]")
        if args.replay_top < 1:
            die("--replay-top takes Q >= 1")
        cmd_run(args)
    elif args.cmd == "publish":
        cmd_publish(args)
    elif args.cmd == "compare":
        cmd_compare(args)
    else:
        cmd_status(args)


if __name__ == "__main__":
    main()
