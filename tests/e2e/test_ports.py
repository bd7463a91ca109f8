"""End-to-end: the ported submissions (submissions/<port>, the algorithms
that lead AlgoPerf, written for apf) each pack, run sealed, verify with
re-evaluation and every interval replayed, and give the same checkpoints
on every CPU instruction-set path.

The workload is blobs_steps: the blobs_mlp model and data with a budget of
40 steps and evaluations at steps 1 and 40 whatever the machine's speed,
so that runs under different APF_CPU_ISA paths end in checkpoints that can
be compared digest for digest (a time budget would stop each run at a
different step). One unit (study 0, trial 1, the search space's first
draw) per path; the first (scalar) path's run is verified, its intervals
replayed on the machine's own path. Each port's runs serve
all of its assertions. A port whose folder is missing fails: the five are
part of the tree.

Shampoo's published points take their first roots at step 100, past
blobs_steps' 40: its runs take a copy whose point 1 (the unit that runs)
has roots every 10 steps, so that the inverse roots are computed,
compared across paths and replayed (and its blocks are halved to fit the
arena, which the trial log says).

apf packs a folder under the one ruleset its submission.ini names; a port
folder is external (its search space) with the published self-tuning
defaults in its code, and its self-tuning entry is the same folder with
`ruleset = self`. That entry is made, packed and run here too, on the
first path: no hyperparameters reach the trial, and it trains on the
defaults without a warning. (A folder that is `ruleset = self` itself is
that entry, and its runs above are the check.)
"""
import json
import os
import re
import shutil

import apftest
from test_isa import paths
from test_run import RunCase

WORKLOAD = "blobs_steps"
PORTS = ["lion", "ademamix", "cautious_nadamw", "shampoo", "muon"]
# Hyperparameters a port's first point takes instead of its published ones.
POINT_1 = {"shampoo": {"precondition_frequency": "10"}}


def point_1_with(src, dst, changes):
    """A copy of submission folder src whose search space's [point 1] has
    `changes` (the other points as they are)."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "tuning_search_space.ini")
    with open(path) as f:
        lines = f.read().splitlines()
    section = None
    for i, line in enumerate(lines):
        if line.startswith("["):
            section = line
        key = line.split("=")[0].strip()
        if section == "[point 1]" and "=" in line and key in changes:
            lines[i] = f"{key} = {changes[key]}"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Ports(RunCase):
    def evals(self, run):
        unit = f"study_0/{WORKLOAD}/trial_1"
        recs = apftest.unit_records(apftest.read_log(run)[0], unit)
        return recs, [r for r in recs if r["event"] == "eval"]

    def check_port(self, port):
        src = os.path.join(apftest.ROOT, "submissions", port)
        self.assertTrue(os.path.isfile(os.path.join(src, "submission.ini")),
                        f"submissions/{port} is missing")
        if port in POINT_1:
            point_1_with(src, self.path(port), POINT_1[port])
            src = self.path(port)
        entry = self.path(f"{port}.apf")
        self.ok("pack", src, "-w", WORKLOAD, "-o", entry, timeout=300)
        digests = {}
        runs = {}
        for isa in paths():
            run = runs[isa] = self.path(f"{port}-{isa}.run")
            r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1",
                         "--threads", "1", "-q", env={"APF_CPU_ISA": isa},
                         timeout=300)
            self.assertEqual(r.rc, 0, (port, isa, r))
            recs, evals = self.evals(run)
            end = [x for x in recs if x["event"] == "trial_end"][-1]
            self.assertFalse(end["failed"], (port, isa, end))
            self.assertEqual(end["reason"], "max_steps", (port, isa, end))
            # The search space names what the code reads, and the code
            # reads all the space holds.
            warnings = [x for x in recs if x["event"] == "warning"]
            self.assertEqual(warnings, [], (port, isa))
            self.assertEqual([e["global_step"] for e in evals], [1, 40], (port, isa))
            digests[isa] = [e["checkpoint"]["sha256"] for e in evals]
        first = paths()[0]
        for isa, d in digests.items():
            self.assertEqual(d, digests[first], (port, isa, "differs from", first))
        # Training moved the parameters: the two checkpoints differ.
        self.assertNotEqual(digests[first][0], digests[first][1], port)
        r = self.apf("verify", runs[first], "--reeval", "--replay", "all",
                     timeout=300)
        self.assertEqual(r.rc, 0, (port, r))
        self.assertRegex(r.out, r"5 replay +passed")
        with open(os.path.join(src, "submission.ini")) as f:
            external = re.search(r"(?m)^ruleset *= *external *$", f.read())
        if external:  # a `ruleset = self` folder was its own entry above
            self.check_self_tuning(port, src, first, digests[first])

    def check_self_tuning(self, port, src, isa, external):
        sub = self.path(f"{port}_self")
        shutil.copytree(src, sub)
        ini = os.path.join(sub, "submission.ini")
        with open(ini) as f:
            text = f.read()
        text = re.sub(r"(?m)^ruleset *=.*$", "ruleset = self", text)
        text = re.sub(r"(?m)^name *=.*$", f"name = {port}_self", text)
        with open(ini, "w") as f:
            f.write(text)
        entry = self.path(f"{port}_self.apf")
        self.ok("pack", sub, "-w", WORKLOAD, "-o", entry, timeout=300)
        run = self.path(f"{port}_self.run")
        r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1",
                     "--threads", "1", "-q", env={"APF_CPU_ISA": isa}, timeout=300)
        self.assertEqual(r.rc, 0, (port, "self-tuning", r))
        recs, evals = self.evals(run)
        end = [x for x in recs if x["event"] == "trial_end"][-1]
        self.assertFalse(end["failed"], (port, "self-tuning", end))
        self.assertEqual([x for x in recs if x["event"] == "warning"], [], port)
        with open(os.path.join(run, "study_0", WORKLOAD, "trial_1", "hparams.json")) as f:
            self.assertEqual(json.load(f), {}, port)
        self.assertEqual(len(evals), 2, port)
        # The defaults are not the external draw: another trajectory.
        self.assertNotEqual(evals[1]["checkpoint"]["sha256"], external[1], port)


def _case(port):
    def test(self):
        self.check_port(port)
    test.__doc__ = f"submissions/{port} packs, runs sealed, verifies, same bits on every path"
    return test


for _p in PORTS:
    setattr(Ports, f"test_{_p}_runs_sealed_verifies_and_agrees_on_every_isa_path", _case(_p))
