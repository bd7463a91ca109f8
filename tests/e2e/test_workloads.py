"""apf workloads: the shipped workloads with their variants, targets and
budgets, as text and as JSON (checked against a schema), and one-line errors
with exit 2 for a missing or broken workload."""
import configparser
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import jsonschema

APF = os.environ.get("APF_BIN", "build/apf")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_WORKLOADS = os.path.join(ROOT, "tests", "data", "workloads")

SCHEMA = {
    "type": "object",
    "required": ["workloads"],
    "properties": {"workloads": {"type": "array", "items": {
        "type": "object",
        "required": ["name", "model", "metric", "direction", "validation_target",
                     "test_target", "targets", "parameters", "dataset", "budget",
                     "variants"],
        "properties": {
            "direction": {"enum": ["max", "min"]},
            "targets": {"enum": ["provisional", "derived"]},
            "parameters": {"type": "integer", "minimum": 1},
            "validation_target": {"type": "number"},
            "test_target": {"type": "number"},
            "dataset": {"type": "object", "required": ["name", "path"]},
            "budget": {"type": "object", "required": ["cpu", "gpu"],
                       "properties": {"cpu": {
                           "type": "object",
                           "required": ["max_runtime_s", "eval_period_s"]}}},
            "variants": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "overrides", "parameters",
                             "validation_target", "test_target"]}},
        }}}},
}


def apf(*args, env=None):
    e = dict(os.environ)
    e.pop("APF_WORKLOADS_DIR", None)
    e.update(env or {})
    return subprocess.run([APF, *args], capture_output=True, text=True, env=e)


class Workloads(unittest.TestCase):
    def test_json_lists_both_fashion_mnist_workloads_with_three_variants(self):
        p = apf("workloads", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        jsonschema.validate(doc, SCHEMA)
        by = {w["name"]: w for w in doc["workloads"]}
        self.assertIn("fmnist_mlp", by)
        self.assertIn("fmnist_cnn", by)
        for w in (by["fmnist_mlp"], by["fmnist_cnn"]):
            self.assertGreaterEqual(len(w["variants"]), 3)
            self.assertEqual(w["metric"], "accuracy")
        for w in doc["workloads"]:
            # Derived targets name the record of the runs behind them
            # (workloads/derive_targets.py), and it holds those targets.
            if w["targets"] == "derived":
                self.assertTrue(w["target_record"], w["name"])
                with open(w["target_record"]) as f:
                    rec = json.load(f)
                self.assertAlmostEqual(rec["validation_target"], w["validation_target"],
                                       places=4)
            for v in w["variants"]:
                self.assertIn(v["targets"], ("base", "provisional", "derived", "retuned"))
            # Budgets for use: a minute or so each, an eval period that
            # leaves a dozen evals or more to time a target by.
            cpu = w["budget"]["cpu"]
            self.assertLessEqual(cpu["max_runtime_s"], 120, w["name"])
            self.assertLessEqual(cpu["eval_period_s"] * 12, cpu["max_runtime_s"], w["name"])
            self.assertGreater(w["step_hint"], 0, w["name"])
        # One pass of the five: about five minutes of submission time.
        self.assertEqual(doc["one_pass_s"]["cpu"],
                         sum(w["budget"]["cpu"]["max_runtime_s"] for w in doc["workloads"]))
        self.assertLessEqual(doc["one_pass_s"]["cpu"], 300)
        for w in (by["fmnist_mlp"], by["fmnist_cnn"]):
            self.assertEqual(w["dataset"]["digest"],
                             "6eeb8e27457c005dce8106105de6cb2b03d7eb4fccbf90435c38f283cc7c0442")
        for w in doc["workloads"]:
            # No GPU budget is derived yet: each says so, the CPU's never.
            self.assertIs(w["budget"]["gpu"]["provisional"], True, w["name"])
            self.assertIs(w["budget"]["cpu"]["provisional"], False, w["name"])
        # 784-1024-1024-10 with biases
        self.assertEqual(by["fmnist_mlp"]["parameters"],
                         784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
        narrow = [v for v in by["fmnist_mlp"]["variants"] if v["name"] == "narrow"][0]
        self.assertEqual(narrow["overrides"]["hidden"], "256, 256")
        self.assertEqual(narrow["parameters"], 784 * 256 + 256 + 256 * 256 + 256 + 2570)

    def test_text_names_targets_budgets_and_variants(self):
        p = apf("workloads", "fmnist_cnn")
        self.assertEqual(p.returncode, 0, p.stderr)
        ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
        ini.read(os.path.join(ROOT, "workloads", "fmnist_cnn", "workload.ini"))
        val = format(float(ini["workload"]["validation_target"]), "g")
        test = format(float(ini["workload"]["test_target"]), "g")
        how = "" if ini["workload"]["targets"] == "derived" else " (provisional)"
        self.assertIn(f"targets{how}: validation {val}, test {test}\n", p.stdout)
        # A variant's own targets, from its [variant.silu] section.
        sv = format(float(ini["variant.silu"]["validation_target"]), "g")
        st = format(float(ini["variant.silu"]["test_target"]), "g")
        self.assertIn(f"silu         activation = silu, targets = retuned; 77754 parameters; "
                      f"targets {sv} / {st} (retuned)", p.stdout)
        cpu = ini["budget.cpu"]
        self.assertIn(f"budget cpu: {cpu['max_runtime_s']} s, eval every {cpu['eval_period_s']} s "
                      f"on the first {ini['workload']['eval_examples']} examples of each split; "
                      "gpu: 120 s, eval every 10 s (provisional)", p.stdout)
        self.assertIn("silu", p.stdout)
        self.assertNotIn("fmnist_mlp", p.stdout)

    def test_a_budget_marked_other_than_true_or_false_is_a_one_line_error(self):
        d = tempfile.mkdtemp()
        try:
            shutil.copytree(os.path.join(ROOT, "workloads", "fmnist_mlp"),
                            os.path.join(d, "fmnist_mlp"))
            ini = os.path.join(d, "fmnist_mlp", "workload.ini")
            with open(ini) as f:
                text = f.read()
            with open(ini, "w") as f:
                f.write(text.replace("provisional = true", "provisional = maybe"))
            p = apf("workloads", "fmnist_mlp", env={"APF_WORKLOADS_DIR": d})
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            self.assertIn("provisional", p.stderr)
            self.assertIn("expected true or false, got 'maybe'", p.stderr)
        finally:
            shutil.rmtree(d)

    def test_unknown_workload_is_a_one_line_error(self):
        p = apf("workloads", "nope")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertEqual(len(p.stderr.splitlines()), 1)
        self.assertTrue(p.stderr.startswith("apf: nope: no such workload"))

    def test_unknown_workload_names_where_it_looked_and_what_is_there(self):
        d = os.path.join(ROOT, "tests", "data", "workloads")
        p = apf("workloads", "blobs_mpl", env={"APF_WORKLOADS_DIR": d})
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, f"apf: blobs_mpl: no such workload in {d} "
                         "(APF_WORKLOADS_DIR); workloads there: blobs_mlp, blobs_steps, "
                         "tiny, toy\n")
        p = apf("workloads", "blobs_mpl")
        self.assertEqual(p.returncode, 2)
        self.assertIn("(apf's own workloads; APF_WORKLOADS_DIR names another directory); "
                      "workloads there: ", p.stderr)
        self.assertIn("fmnist_mlp", p.stderr)

    def test_a_relative_workloads_dir_is_taken_from_where_apf_starts(self):
        exe = os.path.abspath(APF)
        env = dict(os.environ, APF_WORKLOADS_DIR="data/workloads")
        p = subprocess.run([exe, "workloads", "blobs_mlp", "--json"], capture_output=True,
                           text=True, env=env, cwd=os.path.join(ROOT, "tests"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["workloads"][0]["name"], "blobs_mlp")
        with tempfile.TemporaryDirectory() as elsewhere:
            p = subprocess.run([exe, "workloads", "blobs_mlp"], capture_output=True,
                               text=True, env=env, cwd=elsewhere)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr, f"apf: {os.path.realpath(elsewhere)}/data/workloads: "
                             "APF_WORKLOADS_DIR is not a directory\n")

    def test_broken_model_keys_are_refused_with_the_reason(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "bad"))
            with open(os.path.join(d, "bad", "workload.ini"), "w") as f:
                f.write("[workload]\nname = bad\nmodel = mlp\nloss = cross_entropy\n"
                        "metric = accuracy\ndirection = max\nvalidation_target = 0.5\n"
                        "test_target = 0.5\n[dataset]\nname = d\npath = d\n"
                        "[model]\nactivation = swish\n"
                        "[budget.cpu]\nmax_runtime_s = 1\neval_period_s = 1\n")
            p = apf("workloads", "--json", env={"APF_WORKLOADS_DIR": d})
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stdout, "")
            self.assertEqual(p.stderr.strip(),
                             "apf: bad: [model] activation: 'swish' (relu, gelu, silu, tanh)")

    def test_one_bad_workload_is_one_line_and_the_others_are_listed(self):
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(os.path.join(TEST_WORKLOADS, "blobs_mlp"),
                            os.path.join(d, "blobs_mlp"))
            for name, text in (("bad", "[workload]\nname = bad\nmodle = mlp\n"),
                               ("worse", "[workload\n")):
                os.makedirs(os.path.join(d, name))
                with open(os.path.join(d, name, "workload.ini"), "w") as f:
                    f.write(text)
            # blobs_mlp's dataset path is relative to its old directory
            env = {"APF_WORKLOADS_DIR": d,
                   "APF_DATASETS_DIR": os.path.join(ROOT, "tests", "data", "datasets")}
            p = apf("workloads", env=env)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertTrue(p.stdout.startswith("blobs_mlp\n"), p.stdout)
            self.assertIn("model mlp, 2410 parameters", p.stdout)
            errors = p.stderr.splitlines()
            self.assertEqual(len(errors), 2, p.stderr)
            self.assertTrue(errors[0].startswith(f"apf: {d}/bad/workload.ini: line 3: "), errors)
            self.assertIn("modle: unknown key", errors[0])
            self.assertTrue(errors[1].startswith(f"apf: {d}/worse/workload.ini: "), errors)
            p = apf("workloads", "--json", env=env)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual([w["name"] for w in json.loads(p.stdout)["workloads"]],
                             ["blobs_mlp"])
            self.assertEqual(len(p.stderr.splitlines()), 2, p.stderr)

    def test_blobs_mlp_counts_its_8x8_inputs(self):
        env = {"APF_WORKLOADS_DIR": TEST_WORKLOADS}
        p = apf("workloads", "blobs_mlp", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        # 64-32-10 with biases: the dataset's 8x8 images, not 28x28
        self.assertIn("model mlp, 2410 parameters;", p.stdout)
        self.assertIn("gelu         activation = gelu; 2410 parameters;", p.stdout)
        p = apf("workloads", "blobs_mlp", "--json", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        w = json.loads(p.stdout)["workloads"][0]
        self.assertEqual(w["parameters"], 64 * 32 + 32 + 32 * 10 + 10)
        self.assertEqual([v["parameters"] for v in w["variants"]], [2410])

    def test_a_dataset_that_is_not_here_is_listed_without_a_count(self):
        p = apf("workloads", "fmnist_mlp", env={"APF_DATASETS_DIR": "/nonexistent"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("model mlp, parameters not counted (no training images here",
                      p.stdout)
        self.assertNotIn("1863690", p.stdout)
        p = apf("workloads", "fmnist_mlp", "--json", env={"APF_DATASETS_DIR": "/nonexistent"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIsNone(json.loads(p.stdout)["workloads"][0]["parameters"])

    def test_images_that_are_not_idx_are_an_error_naming_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "fashion-mnist"))
            bad = os.path.join(d, "fashion-mnist", "train-images-idx3-ubyte.gz")
            # A valid IDX file, but of one dimension (labels, not images).
            with gzip.open(bad, "wb") as f:
                f.write(b"\x00\x00\x08\x01\x00\x00\x00\x05" + b"\x00" * 5)
            p = apf("workloads", "fmnist_mlp", env={"APF_DATASETS_DIR": d})
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stdout, "")
            self.assertTrue(p.stderr.startswith(f"apf: fmnist_mlp: {bad}: expected IDX images"),
                            p.stderr)
            # Not IDX at all: the header reader's own reason.
            with gzip.open(bad, "wb") as f:
                f.write(b"PK\x03\x04" + b"\x00" * 12)
            p = apf("workloads", "fmnist_mlp", env={"APF_DATASETS_DIR": d})
            self.assertEqual(p.returncode, 2)
            self.assertTrue(p.stderr.startswith(f"apf: fmnist_mlp: {bad}: not an IDX file"),
                            p.stderr)

    def test_usage_errors_exit_2(self):
        p = apf("workloads", "--jsn")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option", p.stderr)


if __name__ == "__main__":
    unittest.main()
