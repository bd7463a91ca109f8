"""apf train: the reference AdamW loop from the command line on real
Fashion-MNIST (skipped with the reason when Debian's dataset-fashion-mnist is
missing): reproducible digests and metrics, JSON output, one-line errors."""
import json
import os
import subprocess
import unittest

APF = os.environ.get("APF_BIN", "build/apf")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def apf(*args):
    return subprocess.run([APF, *args], capture_output=True, text=True)


@unittest.skipUnless(os.path.exists(DATA),
                     "Fashion-MNIST not found (the Debian package dataset-fashion-mnist; "
                     "make deps installs it)")
class TrainOnFashionMnist(unittest.TestCase):
    def test_two_runs_give_the_same_digest_and_metrics(self):
        args = ["train", "fmnist_mlp", "--variant", "narrow", "--steps", "40",
                "--batch", "64", "--eval-every", "20", "--json", "--seed", "3"]
        a, b = apf(*args), apf(*args)
        self.assertEqual(a.returncode, 0, a.stderr)
        ra, rb = json.loads(a.stdout), json.loads(b.stdout)
        self.assertEqual(ra["digest"], rb["digest"])
        self.assertEqual([e["validation_accuracy"] for e in ra["evals"]],
                         [e["validation_accuracy"] for e in rb["evals"]])
        self.assertEqual([e["step"] for e in ra["evals"]], [20, 40])
        self.assertEqual(ra["variant"], "narrow")
        # 40 steps of a 256-wide MLP already beat chance by far
        self.assertGreater(ra["evals"][-1]["validation_accuracy"], 0.6)
        c = apf(*args[:-1], "4")
        self.assertNotEqual(json.loads(c.stdout)["digest"], ra["digest"])

    def test_no_eval_trains_the_same_and_evaluates_nothing(self):
        args = ["train", "fmnist_mlp", "-v", "narrow", "-n", "10", "-b", "32", "--json"]
        a, b = apf(*args), apf(*args, "--no-eval", "--eval-every", "5")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(b.returncode, 0, b.stderr)
        ra, rb = json.loads(a.stdout), json.loads(b.stdout)
        self.assertEqual(rb["digest"], ra["digest"])
        self.assertEqual(len(ra["evals"]), 1)
        self.assertEqual(rb["evals"], [])
        p = apf("train", "fmnist_mlp", "-v", "narrow", "-n", "10", "-b", "32", "--no-eval")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1)
        self.assertIn("10 steps in", p.stdout)

    def test_text_output_has_one_line_per_evaluation(self):
        p = apf("train", "fmnist_mlp", "-v", "narrow", "-n", "10", "-b", "32", "-e", "5")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith("step      5"))
        self.assertIn("10 steps in", lines[2])


class TrainErrors(unittest.TestCase):
    def test_bad_arguments_and_names_are_one_line_errors(self):
        for args, why in [(["fmnist_mlp", "--lr", "-1"], "--lr"),
                          (["fmnist_mlp", "--variant", "nope"], "no variant 'nope'"),
                          (["no_such"], "no such workload"),
                          (["fmnist_mlp", "--steps", "x"], "expected an integer")]:
            p = apf("train", *args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            self.assertIn(why, p.stderr)
            self.assertTrue(p.stderr.startswith("apf: "))

    def test_missing_dataset_is_named(self):
        env = dict(os.environ, APF_DATASETS_DIR="/nonexistent")
        p = subprocess.run([APF, "train", "fmnist_mlp", "-n", "1"], capture_output=True,
                           text=True, env=env)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.splitlines()), 1)
        self.assertIn("/nonexistent/fashion-mnist/train-images-idx3-ubyte.gz: cannot open",
                      p.stderr)


if __name__ == "__main__":
    unittest.main()
