#!/usr/bin/python3
"""AlgoPerf's own scorer over apf score --export-algoperf's output gives
apf score's numbers: the published v0.5 logs (ties broken) and hand-made
apf runs.

AlgoPerf's scorer cannot be committed here (code from elsewhere), so this
is not part of `make test` (where it could only be skipped): run it by
hand with a checkout of mlcommons/submissions_algorithms and Debian's
python3-pandas, python3-absl, python3-tabulate and python3-matplotlib:

    tests/e2e/algoperf_scorer.py /path/to/submissions_algorithms

(or APF_ALGOPERF_SCORING=DIR). A missing checkout or module is a failure
here, not a skip.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_algoperf_export as exported  # noqa: E402
from test_score import apf, unpack_v05  # noqa: E402


SCORER_MODULES = ("pandas", "absl", "tabulate", "matplotlib")


def scorer_python():
    """An interpreter that imports what AlgoPerf's scorer needs: Debian's
    /usr/bin/python3 (where python3-pandas and the rest install), else
    this one; None if neither does."""
    probe = "import " + ", ".join(SCORER_MODULES)
    for py in ("/usr/bin/python3", sys.executable):
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", probe], capture_output=True).returncode == 0:
            return py
    return None


def algoperf_scorer():
    """The checkout of mlcommons/submissions_algorithms and the interpreter
    to run its scorer with, or why not."""
    where = os.environ.get("APF_ALGOPERF_SCORING")
    if not where:
        return None, None, ("give a checkout of mlcommons/submissions_algorithms "
                            "(APF_ALGOPERF_SCORING or the first argument)")
    if not os.path.isfile(os.path.join(where, "scoring",
                                       "score_submissions.py")):
        return None, None, (f"APF_ALGOPERF_SCORING={where}: no "
                            "scoring/score_submissions.py")
    py = scorer_python()
    if not py:
        return None, None, ("AlgoPerf's scorer needs pandas, absl, tabulate "
                            "and matplotlib (Debian's python3-pandas, "
                            "python3-absl, python3-tabulate, "
                            "python3-matplotlib)")
    return where, py, None


# np.trapezoid is numpy 2's name for np.trapz (Debian 12 has numpy 1.24):
# the same function, given its new name before the scorer runs.
RUN_SCORER = """
import runpy, sys
import numpy as np
if not hasattr(np, "trapezoid"):
    np.trapezoid = np.trapz
sys.argv = ["score_submissions"] + sys.argv[1:]
runpy.run_module("scoring.score_submissions", run_name="__main__")
"""


class AlgoPerfsOwnScorer(unittest.TestCase):
    """AlgoPerf's scorer over an export gives apf score's numbers."""

    def setUp(self):
        where, py, why = algoperf_scorer()
        self.assertTrue(where, why)
        self.where, self.python = where, py
        self.tmp = tempfile.mkdtemp(prefix="apf-export-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def algoperf(self, export, self_tuning=False):
        out = os.path.join(self.tmp, "scored")
        args = [self.python, "-c", RUN_SCORER,
                "--submission_directory", os.path.join(export, "submissions"),
                "--workload_targets",
                os.path.join(export, "workload_targets.json"),
                "--compute_performance_profiles", "--output_dir", out]
        if self_tuning:
            args.append("--self_tuning_ruleset")
        p = subprocess.run(args, cwd=self.where, capture_output=True,
                           text=True, timeout=600,
                           env=dict(os.environ, MPLBACKEND="Agg"))
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(os.path.join(out, "scores.csv")) as f:
            return {row[""] if "" in row else row["submission"]:
                    float(row["score"]) for row in csv.DictReader(f)}

    def compare(self, proc, export):
        apf_scores, _ = exported.scores_of(proc)
        theirs = self.algoperf(export)
        self.assertEqual(set(theirs), set(apf_scores))
        for name, s in apf_scores.items():
            self.assertAlmostEqual(theirs[name], s["score"], places=9,
                                   msg=name)
        return theirs

    def test_v05_logs(self):
        """The published v0.5 logs with every tie at the earliest eval
        broken by deleting the slower tied trials' CSVs: apf counts the
        fastest of them anyway, so its scores stay; the reference's
        listing order then has nothing to decide."""
        unpack_v05(self.tmp)
        logs = os.path.join(self.tmp, "external_tuning")
        # The trimmed logs keep global_step, score and the metric; the
        # reference's summary table (not its scores) also reads
        # accumulated_submission_time, which AlgoPerf's runner logs as
        # score's own value: given back as a copy of score.
        for dp, _, fs in os.walk(logs):
            if "eval_measurements.csv" in fs:
                path = os.path.join(dp, "eval_measurements.csv")
                with open(path, newline="") as f:
                    rows = list(csv.reader(f))
                i = rows[0].index("score")
                with open(path, "w", newline="") as f:
                    csv.writer(f, lineterminator="\n").writerows(
                        [rows[0] + ["accumulated_submission_time"]] +
                        [r + [r[i]] for r in rows[1:]])
        targets = os.path.join(self.tmp, "scoring", "workload_targets_v05.json")
        heldout = os.path.join(self.tmp, "scoring",
                               "held_out_workloads_algoperf_v05.json")

        def score(export):
            return apf("score", logs, "--rules", "algoperf-0.5", "--targets",
                       targets, "--heldout", heldout, "--json",
                       "--export-algoperf", export)

        first = os.path.join(self.tmp, "first")
        p = score(first)
        x = json.loads(exported.read(os.path.join(first, "apf_export.json")))
        self.assertGreater(len(x["ties"]), 0)
        for t in x["ties"]:
            fastest = min(t["times"])
            wdir = next(d for d in os.listdir(os.path.join(
                logs, t["submission"], f"study_{t['study']}"))
                if re.sub(r"_(jax|pytorch)$", "", d) == t["workload"])
            for n, time in zip(t["trials"], t["times"]):
                if time != fastest:
                    os.remove(os.path.join(
                        logs, t["submission"], f"study_{t['study']}", wdir,
                        f"trial_{n}", "eval_measurements.csv"))
        export = os.path.join(self.tmp, "export")
        q = score(export)
        self.assertEqual(
            json.loads(exported.read(os.path.join(export, "apf_export.json")))["ties"],
            [])
        before, _ = exported.scores_of(p)
        after, _ = exported.scores_of(q)
        for name in before:
            self.assertEqual(before[name]["score"], after[name]["score"])
        self.compare(q, export)

    def test_apf_runs(self):
        case = exported.ApfRuns("test_apf_runs_export_and_score_the_same_again")
        case.setUp()
        try:
            p = case.score("--export-algoperf", case.export)
            self.compare(p, case.export)
        finally:
            case.tearDown()


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        os.environ["APF_ALGOPERF_SCORING"] = os.path.abspath(sys.argv.pop(1))
    unittest.main()
