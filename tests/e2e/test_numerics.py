"""End-to-end: a run computes with the numerics it records, and is audited
under them (docs/design.md 1.4, rationale 11).

The CPU layers' formulas are versioned: version 1 is GELU, SiLU, tanh and
the softmax loss's e^x through libm (every run made before apf recorded a
version), version 2 through mathf.h's vectorisable tanh and e^x. A run
writes its version into run.json; its trials and evaluator compute with
it, and so do the verifier's re-evaluation and replay, so that a run made
under an older version still verifies bit for bit under a later apf. The
runs here train a private copy of the blobs workload with GELU, which
with the softmax loss is where the versions differ.

From the attacker's side: a runner holding the key who writes another
version into run.json (or drops it, which reads as 1) and signs again
gets past the log checks and fails re-evaluation and replay; a version no
apf has fails before anything is recomputed; adding units under another
version to a run directory is refused; a board of runs under two versions
is said to be one (`apf score --strict` refuses it).
"""
import json
import os
import shutil

import apftest
from apftest import BLOBS
from test_claims import private_blobs, resign
from test_run import RunCase

UNIT0 = f"study_0/{BLOBS}/trial_1"
LATEST = 3  # pkg/nn/nn.h APF_NUMERICS_LATEST


class Numerics(RunCase):
    def setUp(self):
        super().setUp()

        def gelu(ini):
            ini = ini.replace("[model]\nhidden = 32\nactivation = relu\n",
                              "[model]\nhidden = 32\nactivation = gelu\n")
            self.assertIn("activation = gelu", ini.split("[variant")[0])
            return ini
        private_blobs(self, gelu)
        src = self.path("nadamw")
        shutil.copytree(os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw"),
                        src)
        self.write("nadamw/submission.ini",
                   "[submission]\nname = nadamw\nruleset = self\n[tuning]\nstudies = 2\n")
        self.entry = self.path("nadamw.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", self.entry)

    def run_unit(self, out, *extra, study=0):
        run = self.path(out)
        only = [] if study is None else ["--study", str(study)]
        r = self.apf("run", self.entry, "-o", run, *only, *extra, timeout=300)
        self.assertEqual(r.rc, 0, r)
        return run

    def run_json(self, run):
        with open(os.path.join(run, "run.json")) as f:
            return json.load(f)

    def ckpt(self, run, k):
        with open(os.path.join(run, UNIT0, "ckpt", f"{k}.bin"), "rb") as f:
            return f.read()

    def test_a_run_records_its_numerics_and_the_auditor_computes_with_them(self):
        old = self.run_unit("old.run", "--numerics", "1")
        new = self.run_unit("new.run")
        self.assertEqual(self.run_json(old)["numerics"], 1)
        self.assertEqual(self.run_json(new)["numerics"], LATEST)
        # The same initialisation, then other bits: the versions' GELU
        # differ, so which one a check computes with decides its outcome.
        self.assertEqual(self.ckpt(old, 0), self.ckpt(new, 0))
        self.assertNotEqual(self.ckpt(old, 1), self.ckpt(new, 1))
        for run, n in ((old, 1), (new, LATEST)):
            r = self.ok("verify", run, "--reeval", "--replay", "all", timeout=300)
            self.assertRegex(r.out, r"4 checkpoints +passed .*re-evaluated in a "
                                    rf"clean process \(numerics {n}\)")
            self.assertRegex(r.out, r"5 replay +passed")
            j = json.loads(self.ok("verify", run, "--json").out)
            self.assertEqual(j["numerics"], n)

    def test_units_added_to_a_run_directory_use_its_numerics(self):
        run = self.run_unit("r.run", "--numerics", "1")
        r = self.fails(2, "run", self.entry, "-o", run, "--study", "1",
                       "--numerics", str(LATEST), timeout=300)
        self.assertEqual(r.err.splitlines()[-1],
                         f"apf: {run}: computed with numerics 1: give "
                         "--numerics 1, or none, to add to it")
        self.run_unit("r.run", study=1)
        self.assertEqual(self.run_json(run)["numerics"], 1)
        self.ok("verify", run, "--reeval", "--replay", "all", timeout=300)
        for bad in ("0", str(LATEST + 1), "-1"):
            self.fails(2, "run", self.entry, "-o", self.path("x" + bad),
                       "--numerics", bad,
                       match=f"--numerics takes 1 to {LATEST}, the versions "
                             "this apf computes")
            self.assertFalse(os.path.exists(self.path("x" + bad)))

    def test_a_run_relabelled_to_other_numerics_fails_reeval_and_replay(self):
        run = self.run_unit("r.run")
        self.ok("verify", run, "--reeval", timeout=300)
        for relabel in (lambda rj: rj.update(numerics=1),
                        lambda rj: rj.pop("numerics")):
            resign(self, run, relabel, unit=UNIT0)
            # Everything the key signs is consistent again ...
            self.ok("verify", run)
            # ... and recomputing under the claimed version does not give
            # the logged metrics and checkpoints.
            r = self.fails(1, "verify", run, "--reeval", timeout=300)
            self.assertIn("check 4 (checkpoints)", r.err)
            r = self.fails(1, "verify", run, "--replay", "all", timeout=300)
            self.assertIn("check 5", r.err)
        # A version this apf lacks, or no version at all: refused before
        # anything is recomputed, naming what it has.
        resign(self, run, lambda rj: rj.update(numerics=LATEST + 1), unit=UNIT0)
        self.fails(2, "verify", run,
                   match=f"numerics {LATEST + 1}: this apf computes numerics "
                         f"1 to {LATEST}")
        resign(self, run, lambda rj: rj.update(numerics=0), unit=UNIT0)
        self.fails(2, "verify", run, match="numerics: expected a version number")
        # Put back, it verifies again: the failures were the claim's.
        resign(self, run, lambda rj: rj.update(numerics=LATEST), unit=UNIT0)
        self.ok("verify", run, "--reeval", "--replay", "all", timeout=300)

    def test_a_board_under_two_numerics_is_said_to_be_one(self):
        # Whole runs (both studies) under the cpu clock, so that nothing
        # else --strict refuses (a plan left undone; a step block short of
        # cores on a busy machine) comes first.
        cpu = ("--clock", "cpu")
        a = self.run_unit("a.run", "--numerics", "1", *cpu, study=None)
        b = self.run_unit("b.run", *cpu, study=None)
        want = (f"runs differ in numerics (one: 1; latest: {LATEST}): "
                "time-to-target is comparable only under one numerics version")
        r = self.ok("score", f"{a}=one", f"{b}=latest")
        self.assertIn(want, r.out + r.err)
        self.fails(2, "score", f"{a}=one", f"{b}=latest", "--strict", match=want)
        c = self.run_unit("c.run", "--numerics", "1", *cpu, study=None)
        r = self.ok("score", f"{a}=one", f"{c}=again", "--strict")
        self.assertNotIn("runs differ in numerics", r.out + r.err)


class TrainNumerics(apftest.ApfCase):
    def test_apf_train_computes_with_the_version_it_is_given(self):
        # apf train (targets, calibration) takes the same versions: the
        # digests of the GELU variant differ between them, each repeats.
        def digest(*extra):
            r = self.ok("train", BLOBS, "--variant", "gelu", "--steps", "30",
                        "--batch", "64", "--no-eval", "--json", *extra, timeout=300)
            j = json.loads(r.out)
            return j["numerics"], j["digest"]
        one, latest = digest("--numerics", "1"), digest()
        self.assertEqual(one[0], 1)
        self.assertEqual(latest, (LATEST, digest("--numerics", str(LATEST))[1]))
        self.assertNotEqual(one[1], latest[1])
        self.assertEqual(one, digest("--numerics", "1"))
        self.fails(2, "train", BLOBS, "--numerics", str(LATEST + 1),
                   match=f"--numerics takes 1 to {LATEST}, the versions this "
                         "apf computes")
