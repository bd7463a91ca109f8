"""End-to-end: the fmnist_unet workload family (issue 15).

A small U-Net workload on Debian's Fashion-MNIST (2,000 training images,
500 for validation) goes through the real binary: pack, a sealed NAdamW
run scored by SSIM (higher is better), `apf verify --reeval --replay 1`
(the evaluator recomputes the corruption, the reconstructions and their
SSIM bit for bit), and `apf score`. From the attacker's side: a workload
whose corruption keys are malformed, or that gives them to a classifier, is
refused before anything runs.
"""
import csv
import glob
import json
import os

import apftest
from test_run import RunCase

DATA = "/usr/share/datasets/fashion-mnist"

INI = """[workload]
name = unet_tiny
description = a small U-Net on 2,000 Fashion-MNIST images
model = unet
loss = l1
metric = ssim
metrics = ssim, psnr, l1_loss
direction = max
validation_target = 0.99
test_target = 0.99
targets = provisional
max_steps = 120
eval_examples = 500

[dataset]
name = fashion-mnist
path = /usr/share/datasets/fashion-mnist
digest = 6eeb8e27457c005dce8106105de6cb2b03d7eb4fccbf90435c38f283cc7c0442
format = idx
train_images = train-images-idx3-ubyte.gz
train_labels = train-labels-idx1-ubyte.gz
test_images = t10k-images-idx3-ubyte.gz
test_labels = t10k-labels-idx1-ubyte.gz
validation_size = 500
train_size = 2000
corruption = kspace_rows
center_rows = 4
keep_rows = 0.125
corruption_seed = 7

[model]
channels = 4
depth = 1
norm = instance

[budget.cpu]
max_runtime_s = 120
eval_period_s = 1
"""


class Unet(RunCase):
    metric = "ssim"

    def setUp(self):
        super().setUp()
        if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
            self.skipTest("Debian's dataset-fashion-mnist is not installed")
        self.write("workloads/unet_tiny/workload.ini", INI)
        self.env["APF_WORKLOADS_DIR"] = self.path("workloads")

    def test_sealed_baseline_run_verifies_and_scores_by_ssim(self):
        self.ok("keygen")
        src = apftest.one_unit_nadamw(self)
        entry = self.path("nadamw.apf")
        self.ok("pack", src, "-w", "unet_tiny", "-o", entry)
        run = self.path("run")
        self.ok("run", entry, "-o", run, "--study", "0", "--trial", "1", timeout=600)
        recs = self.check_run(run)
        evals = [x for x in recs if x["event"] == "eval"]
        self.assertGreater(len(evals), 1)
        m = evals[-1]["metrics"]
        for split in ("train", "validation", "test"):
            for name in ("loss", "ssim", "psnr", "l1_loss"):
                self.assertIn(f"{split}/{name}", m)
            self.assertEqual(m[f"{split}/loss"], m[f"{split}/l1_loss"])
            self.assertTrue(-1.0 <= m[f"{split}/ssim"] <= 1.0)
        self.assertNotIn("validation/accuracy", m)
        # eval_examples: the first 500 of each split (test has 10,000),
        # so that the evals, and this test's time, do not grow with a
        # slow machine's (or a sanitized build's) count of them.
        self.assertEqual(m["validation/num_examples"], 500)
        self.assertEqual(m["test/num_examples"], 500)
        # It learns: the L1 loss falls from the first eval to the last.
        self.assertLess(m["validation/l1_loss"], evals[0]["metrics"]["validation/l1_loss"])
        csvs = glob.glob(os.path.join(run, "study_0", "unet_tiny", "trial_1",
                                      "eval_measurements.csv"))
        with open(csvs[0]) as f:
            header = next(csv.reader(f))
        for col in ("validation/ssim", "validation/psnr", "test/l1_loss"):
            self.assertIn(col, header)
        v = self.ok("verify", run, "--reeval", "--replay", "1", "--seed", "3", timeout=600)
        self.assertIn("verified", v.out)
        # scored by SSIM, higher is better: with a target met at an eval
        # after the first, the time is that eval's submission time
        best = max(e["metrics"]["validation/ssim"] for e in evals)
        target = (evals[0]["metrics"]["validation/ssim"] + best) / 2
        if best > evals[0]["metrics"]["validation/ssim"]:
            first = next(e for e in evals if e["metrics"]["validation/ssim"] >= target)
            tfile = self.path("targets.json")
            with open(tfile, "w") as f:
                json.dump({"workloads": {"unet_tiny": {
                    "target_metric_name": "ssim", "validation_target_value": target}}}, f)
            s = json.loads(self.ok("score", run, "--targets", tfile, "--json").out)
            self.assertAlmostEqual(s["submissions"][0]["times"]["unet_tiny"],
                                   first["accumulated_submission_ns"] / 1e9, places=6)

    def test_malformed_corruption_is_refused_before_anything_runs(self):
        for bad, why in (("keep_rows = 0.125", "keep_rows = 1.5"),
                         ("corruption = kspace_rows", "corruption = blur"),
                         ("corruption_seed = 7\n", "")):
            ini = self.path("workloads/unet_tiny/workload.ini")
            with open(ini, "w") as f:
                f.write(INI.replace(bad, why))
            r = self.apf("workloads", "unet_tiny")
            self.assertNotEqual(r.rc, 0, why)
            self.assertEqual(len(r.err.strip().splitlines()), 1, r.err)
            self.assertTrue(r.err.startswith("apf: "), r.err)
        with open(ini, "w") as f:
            f.write(INI.replace("loss = l1", "loss = cross_entropy")
                    .replace("metric = ssim", "metric = accuracy")
                    .replace("metrics = ssim, psnr, l1_loss", "metrics = accuracy"))
        r = self.apf("workloads", "unet_tiny")
        self.assertNotEqual(r.rc, 0)
        self.assertIn("corruption", r.err)
