"""End-to-end: the plausibility backstop (pkg/refcurve) in `apf verify` and
`apf score`.

A cheat that no check knows the mechanism of still has to show progress:
here a lying runner's forged log (runfake, signed with its key) claims the
blobs_mlp target at the first eval, after one step of 32 examples, where the
reference curve recorded from the NAdamW baseline
(tests/data/workloads/references/blobs_mlp.json) had not reached it after
about 35,000. verify warns and names the unit, the examples, the reference
and the ratio, and still verifies (a flag, not a failure); score marks the
cell and keeps the time. An honest run of the same baseline is not flagged,
and a workload without a curve is said, never passed in silence. The curve
is the auditor's: one planted in the run directory is never read.
"""
import csv
import json
import os
import shutil
import unittest

import apftest
from apftest import BLOBS, ApfCase
from runfake import FakeRun, UnitScript
from test_cli import sandbox_available

CHEAT = f"study_0/{BLOBS}/trial_1"
REFERENCE = os.path.join(apftest.TEST_WORKLOADS, "references", f"{BLOBS}.json")


class ForgedLog(ApfCase):
    def setUp(self):
        super().setUp()
        with open(REFERENCE) as f:
            ref = json.load(f)
        # The reference's bound at the target: the fastest run's last eval
        # below it.
        below = []
        for run in ref["runs"]:
            pts = run["points"]
            first = next(i for i, (_, v) in enumerate(pts) if v >= 0.9)
            below.append((pts[first - 1][0], run["label"]))
        self.bound, self.bound_run = min(below)
        self.assertGreater(self.bound, 4 * 32)
        # study_0 trial_1: the forged target at eval 1 (step 1, batch 32);
        # study_1 trial_1: meets it at eval 3 after 5,000 steps an eval;
        # the others never meet it.
        scripts = {CHEAT: UnitScript(val_at=1, test_at=1),
                   f"study_1/{BLOBS}/trial_1": UnitScript(
                       val_at=3, test_at=3, step_ns=200_000)}
        self.run = FakeRun(self, workload=BLOBS, scripts=scripts).write(
            self.path("run"))

    def auditor_workloads(self, reference=None):
        """A copy of the test workloads (the datasets beside them, as the
        specs' relative paths want) with this reference file, or none."""
        root = self.path("auditor")
        wl = os.path.join(root, "workloads")
        shutil.copytree(apftest.TEST_WORKLOADS, wl, symlinks=True)
        os.symlink(os.path.join(apftest.ROOT, "tests", "data", "datasets"),
                   os.path.join(root, "datasets"))
        refs = os.path.join(wl, "references")
        shutil.rmtree(refs)
        if reference is not None:
            os.makedirs(refs)
            with open(os.path.join(refs, f"{BLOBS}.json"), "w") as f:
                f.write(reference)
        return wl

    def test_verify_warns_about_the_forged_target_and_still_verifies(self):
        r = self.ok("verify", self.run.path)
        self.assertIn("verified", r.out)
        self.assertIn("plausibility  2 of 2 units that met their validation "
                      "target held against reference curves (flagged under "
                      "1/4 of the fastest reference run's examples): 1 "
                      "flagged\n", r.out)
        warn = [l for l in r.out.splitlines() if "WARNING" in l]
        self.assertEqual(len(warn), 1, r.out)
        self.assertIn(f"WARNING: implausible progress: {CHEAT} reached "
                      f"validation/accuracy 0.9 (its target) after 32 examples "
                      f"(step 1 x batch 32): ", warn[0])
        self.assertIn(f" of the {self.bound} examples by which no reference "
                      f"run had reached it (the last eval below it: "
                      f"{self.bound_run}; ", warn[0])
        self.assertIn(REFERENCE, warn[0])
        self.assertTrue(warn[0].endswith("under 1/4"), warn[0])

        j = json.loads(self.ok("verify", self.run.path, "--json").out)
        self.assertTrue(j["verified"])
        self.assertEqual(j["exit_code"], 0)
        p = j["plausibility"]
        self.assertEqual(p["factor"], 0.25)
        self.assertEqual(p["checked"], 2)
        self.assertEqual(p["references"], [REFERENCE])
        self.assertEqual(len(p["flagged"]), 1)
        f = p["flagged"][0]
        self.assertEqual(f["unit"], CHEAT)
        self.assertEqual(f["workload"], BLOBS)
        self.assertEqual((f["global_step"], f["batch_size"], f["examples"]),
                         (1, 32, 32))
        self.assertEqual(f["reference_examples"], self.bound)
        self.assertAlmostEqual(f["ratio"], 32 / self.bound)
        self.assertEqual(f["reference"], REFERENCE)
        self.assertEqual(f["level"], 0.9)

    def test_score_marks_the_cell_and_keeps_the_time(self):
        r = self.ok("score", self.run.path)
        line = next(l for l in r.out.splitlines() if " fakesub " in l)
        self.assertTrue(line.endswith("?"), line)
        self.assertIn("\n?: a unit behind it reached its target in implausibly "
                      "few training examples against the\n", r.out)
        self.assertIn(f"  WARNING: implausible progress: fakesub: {CHEAT} "
                      f"reached validation/accuracy 0.9 (its target) after 32 "
                      f"examples", r.out)
        j = json.loads(self.ok("score", self.run.path, "--json").out)
        sub = j["submissions"][0]
        self.assertEqual([(x["unit"], x["column"], x["examples"],
                           x["reference_examples"]) for x in sub["implausible"]],
                         [(CHEAT, BLOBS, 32, self.bound)])
        self.assertEqual(j["plausibility"]["units_flagged"], 1)
        out = self.path("s.csv")
        self.ok("score", self.run.path, "--csv", out)
        with open(out, newline="") as f:
            rows = list(csv.reader(f))
        self.assertEqual(rows[0], ["submission", "score", BLOBS, "implausible"])
        self.assertEqual(rows[1][-1], BLOBS)
        # The score and times are the ones without any curve.
        bare = self.auditor_workloads()
        k = json.loads(self.ok("score", self.run.path, "--json",
                               env={"APF_WORKLOADS_DIR": bare}).out)
        self.assertEqual(k["submissions"][0]["times"], sub["times"])
        self.assertEqual(k["submissions"][0]["score"], sub["score"])
        self.assertEqual(k["submissions"][0]["implausible"], [])
        self.assertIn(f"no reference curve for {BLOBS} ({bare}/references/"
                      f"{BLOBS}.json)", k["plausibility"]["notes"])

    def test_a_curve_in_the_run_directory_is_never_read(self):
        # The operator ships a reference that the forged unit would pass.
        planted = json.dumps({
            "format": "apf-reference-curve-v1", "workload": BLOBS,
            "metric": "accuracy", "direction": "max",
            "runs": [{"label": "operator", "points": [[0, 1.0]]}]})
        for rel in ("references", "workloads/references"):
            os.makedirs(os.path.join(self.run.path, rel))
            with open(os.path.join(self.run.path, rel, f"{BLOBS}.json"), "w") as f:
                f.write(planted)
        j = json.loads(self.ok("verify", self.run.path, "--json").out)
        self.assertEqual([f["unit"] for f in j["plausibility"]["flagged"]], [CHEAT])
        # Without a curve of the auditor's, it is said, not passed.
        bare = self.auditor_workloads()
        r = self.ok("verify", self.run.path, env={"APF_WORKLOADS_DIR": bare})
        self.assertEqual(r.out.count(f"no reference curve for {BLOBS} "), 1, r.out)
        self.assertIn("0 of 2 units that met their validation target held "
                      "against reference curves", r.out)
        self.assertNotIn("WARNING", r.out)

    def test_an_unreadable_curve_of_the_auditor_is_said_and_fails_no_run(self):
        # The auditor's file is broken, not the run: the verdict stays the
        # run's, and the line says which file and why.
        wl = self.auditor_workloads('{"format": "apf-reference-curve-v1"')
        env = {"APF_WORKLOADS_DIR": wl}
        want = (f"the reference curve for {BLOBS} cannot be read "
                f"({wl}/references/{BLOBS}.json: line 1")
        r = self.ok("verify", self.run.path, env=env)
        self.assertIn(want, r.out)
        self.assertNotIn("WARNING", r.out)
        j = json.loads(self.ok("score", self.run.path, "--verify", "--json",
                               env=env).out)
        self.assertEqual(j["submissions"][0]["verified"], "yes")
        self.assertTrue(j["plausibility"]["notes"][0].startswith(want))
        # A curve of another metric is not held against the target.
        shutil.rmtree(os.path.dirname(wl))
        wl = self.auditor_workloads(json.dumps({
            "format": "apf-reference-curve-v1", "workload": BLOBS,
            "metric": "loss", "direction": "min",
            "runs": [{"label": "x", "points": [[100000, 0.1]]}]}))
        r = self.ok("verify", self.run.path, env={"APF_WORKLOADS_DIR": wl})
        self.assertIn(f"is of validation/loss (min), the workload's metric is "
                      f"validation/accuracy (max): not applied", r.out)
        self.assertNotIn("WARNING", r.out)


class NoCurve(ApfCase):
    def test_a_workload_without_a_curve_is_said_once(self):
        run = FakeRun(self, workload="tiny", scripts={
            f"study_0/tiny/trial_{t}": UnitScript(val_at=1, test_at=1)
            for t in (1, 2)}).write(self.path("run"))
        r = self.ok("verify", run.path)
        want = (f"no reference curve for tiny ({apftest.TEST_WORKLOADS}/"
                f"references/tiny.json)")
        self.assertEqual(r.out.count(want), 1, r.out)
        self.assertIn("0 of 2 units that met their validation target held "
                      "against reference curves", r.out)
        j = json.loads(self.ok("verify", run.path, "--json").out)
        self.assertEqual(j["plausibility"]["notes"], [want])
        self.assertEqual(j["plausibility"]["met_without_curve"], 2)
        s = self.ok("score", run.path)
        self.assertIn(f"  {want}\n", s.out)
        self.assertNotIn("?", s.out.split("base workloads")[1].split("score:")[0])


class RecordedCurves(ApfCase):
    """The five workloads' recorded curves (workloads/references/) load, are
    of their workload's metric, and hold a forged log that claims the
    target at the first eval."""

    def test_each_recorded_curve_flags_a_target_at_the_first_eval(self):
        wl = os.path.join(apftest.ROOT, "workloads")
        self.env["APF_WORKLOADS_DIR"] = wl
        for w in ("fmnist_mlp", "fmnist_cnn", "clicks_dlrm", "text_lm",
                  "fmnist_unet"):
            with self.subTest(workload=w):
                ref = os.path.join(wl, "references", f"{w}.json")
                self.assertTrue(os.path.exists(ref), ref)
                try:
                    run = FakeRun(self, workload=w, scripts={
                        f"study_0/{w}/trial_1": UnitScript(val_at=1, test_at=1)}
                    ).write(self.path(f"run_{w}"))
                except AssertionError as e:
                    if "dataset" in str(e) or "no such" in str(e).lower():
                        self.skipTest(f"{w}: its dataset is not here ({e})")
                    raise
                j = json.loads(self.ok("verify", run.path, "--json").out)
                p = j["plausibility"]
                self.assertEqual(p["references"], [ref])
                self.assertEqual(p["notes"], [])
                self.assertEqual([(f["unit"], f["examples"], f["reference"])
                                  for f in p["flagged"]],
                                 [(f"study_0/{w}/trial_1", 32, ref)])
                self.assertGreater(p["flagged"][0]["reference_examples"], 4 * 32)


class HonestRun(ApfCase):
    """The NAdamW baseline on blobs_mlp, the baseline the curve was
    recorded from, run for real: not flagged."""

    def test_the_baseline_against_its_own_curve_is_not_flagged(self):
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        entry = self.path("e.apf")
        self.ok("pack", os.path.join(apftest.ROOT, "submissions", "baselines",
                                     "nadamw"), "-w", BLOBS, "-o", entry)
        run = self.path("run")
        self.ok("run", entry, "-o", run, "--study", "0", "--trial", "1", "-q",
                "--allow-env-drift", timeout=300)
        j = json.loads(self.ok("verify", run, "--json").out)
        p = j["plausibility"]
        self.assertEqual((p["checked"], p["flagged"]), (1, []), p)
        self.assertEqual(p["references"], [REFERENCE])
        s = json.loads(self.ok("score", run, "--json").out)
        self.assertEqual(s["submissions"][0]["implausible"], [])
        self.assertEqual(s["plausibility"]["checked"], 1)


if __name__ == "__main__":
    unittest.main()
