"""End-to-end: the ported submissions (submissions/<port>, the algorithms
that lead AlgoPerf, written for apf) each pack, run sealed, verify with
re-evaluation and every interval replayed, and give the same checkpoints
on every CPU instruction-set path.

The workload is blobs_steps: the blobs_mlp model and data with a budget of
40 steps and evaluations at steps 1 and 40 whatever the machine's speed,
so that runs under different APF_CPU_ISA paths end in checkpoints that can
be compared digest for digest (a time budget would stop each run at a
different step). One unit (study 0, trial 1, the search space's first
draw) per path; the first path's run is verified. Each port's runs serve
all of its assertions. A port whose folder is missing fails: the five are
part of the tree.

Shampoo's published points take their first roots at step 100, past
blobs_steps' 40: its runs take a copy whose point 1 (the unit that runs)
has roots every 10 steps, so that the inverse roots are computed,
compared across paths and replayed (and its blocks are halved to fit the
arena, which the trial log says).
"""
import json
import os
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


def _case(port):
    def test(self):
        self.check_port(port)
    test.__doc__ = f"submissions/{port} packs, runs sealed, verifies, same bits on every path"
    return test


for _p in PORTS:
    setattr(Ports, f"test_{_p}_runs_sealed_verifies_and_agrees_on_every_isa_path", _case(_p))
