"""workloads/derive_targets.py and workloads/baselines.py on the test
workloads, with the real apf: derive_targets' record holds every tuning
trial's evals with their submission times and targets that follow the rule
from them; baselines.py runs each baseline once over a workload and a
variant (the variant's model keys really in its copy), its times-to-target
are the first evals of the logs that meet each level, a second invocation
reuses the complete runs, and its pure pieces (relaxed targets, rankings,
Kendall's tau) give the values worked out by hand."""
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import unittest

from apftest import APF, ROOT, TEST_WORKLOADS

PY = sys.executable


def load(name):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "workloads", name + ".py"))
    sys.path.insert(0, os.path.join(ROOT, "workloads"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def script(name, *args, timeout=900):
    env = dict(os.environ, APF_BIN=APF)
    return subprocess.run([PY, os.path.join(ROOT, "workloads", name + ".py"), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


class Pieces(unittest.TestCase):
    def setUp(self):
        self.b = load("baselines")

    def test_relaxed_targets(self):
        # accuracy 0.90: error 0.10 -> 0.105 and 0.115
        self.assertAlmostEqual(self.b.relax(0.90, 1.05, True), 0.895)
        self.assertAlmostEqual(self.b.relax(0.90, 1.15, True), 0.885)
        # log loss 0.40 -> 0.42 and 0.46
        self.assertAlmostEqual(self.b.relax(0.40, 1.05, False), 0.42)
        self.assertAlmostEqual(self.b.relax(0.40, 1.15, False), 0.46)

    def test_time_to_target_takes_the_fastest_trial_first_hit(self):
        trials = {"trial_1": [(1.0, 1, {"v": 0.5}), (2.0, 2, {"v": 0.8}), (3.0, 3, {"v": 0.9})],
                  "trial_2": [(1.5, 1, {"v": 0.85}), (2.5, 2, {"v": 0.95})]}
        self.assertEqual(self.b.time_to(trials, "v", 0.8, True), (1.5, 1))
        self.assertEqual(self.b.time_to(trials, "v", 0.9, True), (2.5, 2))
        self.assertIsNone(self.b.time_to(trials, "v", 0.99, True))
        self.assertEqual(self.b.time_to(trials, "v", 0.5, False), (1.0, 1))

    def test_ranking_ties_at_one_eval_and_misses_last(self):
        hits = {"a": None, "b": (3.0, 3), "c": (1.0, 1), "d": None, "e": (1.2, 1)}
        self.assertEqual(self.b.ranking(hits), [["c", "e"], ["b"], ["a", "d"]])
        self.assertEqual(self.b.fmt_order(self.b.ranking(hits), hits), "c = e < b")

    def test_kendall_tau_b(self):
        tau = self.b.kendall_tau
        self.assertEqual(tau([["a"], ["b"], ["c"]], [["a"], ["b"], ["c"]]), 1.0)
        self.assertEqual(tau([["a"], ["b"], ["c"]], [["c"], ["b"], ["a"]]), -1.0)
        # one swap of three pairs: (2 - 1) / 3
        self.assertAlmostEqual(tau([["a"], ["b"], ["c"]], [["b"], ["a"], ["c"]]), 1 / 3)
        # a tie on one side: pairs (a,b) tied in y; (a,c), (b,c) concordant:
        # (2 - 0) / sqrt(3 * 2)
        self.assertAlmostEqual(tau([["a"], ["b"], ["c"]], [["a", "b"], ["c"]]), 2 / 6 ** 0.5)
        # nobody met it on one side: undefined, not 0
        self.assertIsNone(tau([["a"], ["b"]], [["a", "b"]]))


class IniTargets(unittest.TestCase):
    def test_a_section_gets_its_keys_before_the_next_sections_comment(self):
        # A comment right above a section header is that section's: the
        # keys added to the section before it go above the comment (they
        # once went below it, where a reader takes them for the next
        # section's).
        d = load("derive_targets")
        text = ("[workload]\nname = w\n\n; the post-norm order\n"
                "[variant.postln]\nnorm = post\n\n; a gated MLP\n"
                "[variant.glu]\nmlp = glu\n")
        with tempfile.TemporaryDirectory() as tmp:
            ini = os.path.join(tmp, "workload.ini")
            with open(ini, "w") as f:
                f.write(text)
            for sec in ("variant.postln", "variant.glu"):
                d.ini_set(ini, sec, "validation_target", "2.5", add=True)
                d.ini_set(ini, sec, "targets", "retuned", add=True)
            d.ini_set(ini, "variant.postln", "validation_target", "2.25")
            with open(ini) as f:
                got = f.read()
        self.assertEqual(got, "[workload]\nname = w\n\n; the post-norm order\n"
                              "[variant.postln]\nnorm = post\n"
                              "validation_target = 2.25\ntargets = retuned\n\n"
                              "; a gated MLP\n[variant.glu]\nmlp = glu\n"
                              "validation_target = 2.5\ntargets = retuned\n")


def log_evals(run):
    """unit -> [(submission s, validation accuracy)] straight from the logs."""
    out = {}
    for root, _, files in os.walk(run):
        if "log.jsonl" in files:
            with open(os.path.join(root, "log.jsonl")) as f:
                for line in f:
                    r = json.loads(line)
                    if r["event"] == "eval":
                        out.setdefault(r["unit"], []).append(
                            (r["accumulated_submission_ns"] / 1e9,
                             r["metrics"]["validation/accuracy"]))
    return out


class Scripts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-targets-test-")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    def test_derive_targets_follows_the_rule_resumes_and_derives_a_variant(self):
        import shutil
        wl = os.path.join(self.tmp, "workloads")
        shutil.copytree(TEST_WORKLOADS, wl)
        # The workloads name their data as ../../datasets/<name>.
        shutil.copytree(os.path.join(ROOT, "tests", "data", "datasets"),
                        os.path.join(self.tmp, "datasets"))
        out = os.path.join(self.tmp, "runs")
        recs = os.path.join(self.tmp, "targets")
        args = ["--algorithms", "nadamw,adamw", "--trials", "2", "--reruns", "3",
                "--variant-reruns", "2", "--out", out, "--record-dir", recs,
                "--workloads-dir", wl]
        p = script("derive_targets", "blobs_steps", *args)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        r = json.load(open(os.path.join(recs, "blobs_steps.json")))
        self.assertEqual([t["algorithm"] for t in r["tuning"]], ["nadamw"] * 2 + ["adamw"] * 2)
        self.assertEqual(r["rule"], "derived")
        self.assertEqual(r["setting_runtime_s"], 0.75 * r["budget_s"])
        for t in r["tuning"] + r["reruns"]:
            times = [e["submission_s"] for e in t["evals"]]
            self.assertGreater(len(times), 1)
            self.assertEqual(times, sorted(times))
        for t in r["tuning"]:
            self.assertEqual(t["best_validation"],
                             max(e["validation/accuracy"] for e in t["evals"]))
        best = max(r["tuning"], key=lambda t: t["best_validation"])
        self.assertEqual((r["algorithm"], r["hparams"]), (best["algorithm"], best["hparams"]))
        # The median of the reruns' best within 3/4 of the budget, and the
        # worst test value at the first eval meeting it.
        setting = r["setting_runtime_s"]
        bests = [max(e["validation/accuracy"] for e in x["evals"]
                     if e["submission_s"] <= setting) for x in r["reruns"]]
        self.assertEqual(len(bests), 3)
        self.assertEqual(r["validation_target"], statistics.median(bests))
        tests = []
        for x in r["reruns"]:
            hit = [e for e in x["evals"] if e["submission_s"] <= setting
                   and e["validation/accuracy"] >= r["validation_target"]]
            if hit:
                tests.append(hit[0]["test/accuracy"])
        self.assertEqual(r["test_target"], min(tests))
        met = [x for x in r["reruns"] if x["time_to_target_s"] is not None]
        self.assertEqual(r["share_meeting_within_budget"], len(met) / 3)
        self.assertGreaterEqual(r["share_meeting_within_budget"], 2 / 3)
        ini = open(os.path.join(wl, "blobs_steps", "workload.ini")).read()
        self.assertIn("targets = derived", ini)
        self.assertIn(f"validation_target = {r['validation_target']:.4f}", ini)
        # A second invocation reuses every complete run.
        p2 = script("derive_targets", "blobs_steps", *args, "--dry-run")
        self.assertEqual(p2.returncode, 0, p2.stderr + p2.stdout)
        self.assertEqual(p2.stdout.count(": reusing "), 3, p2.stdout)
        # The variant: the base's point retuned around its learning rate.
        p3 = script("derive_targets", "blobs_steps:gelu", *args)
        self.assertEqual(p3.returncode, 0, p3.stderr + p3.stdout)
        v = json.load(open(os.path.join(recs, "blobs_steps_gelu.json")))
        self.assertEqual(v["rule"], "retuned")
        lrs = [t["hparams"]["learning_rate"] for t in v["tuning"]]
        self.assertEqual(len(lrs), 5)
        for got, f in zip(lrs, [0.25, 0.5, 1, 2, 4]):
            self.assertAlmostEqual(got, r["hparams"]["learning_rate"] * f)
        self.assertEqual(len(v["reruns"]), 2)
        env = dict(os.environ, APF_WORKLOADS_DIR=wl)
        j = json.loads(subprocess.run([APF, "workloads", "--json", "blobs_steps"], env=env,
                                      capture_output=True, text=True).stdout)
        gelu = [x for x in j["workloads"][0]["variants"] if x["name"] == "gelu"][0]
        self.assertEqual(gelu["targets"], "retuned")
        self.assertAlmostEqual(gelu["validation_target"], v["validation_target"], places=4)
        # A variant before its base is refused, in one line.
        p4 = script("derive_targets", "blobs_mlp:gelu", *args[:-2], "--workloads-dir", wl)
        self.assertNotEqual(p4.returncode, 0)
        self.assertTrue(p4.stderr.startswith("apf: derive_targets: blobs_mlp:gelu: derive "
                                             "blobs_mlp first"), p4.stderr)

    def test_baselines_table_matches_the_logs_and_resumes(self):
        out = os.path.join(self.tmp, "bl")
        rec = os.path.join(self.tmp, "bl.json")
        args = ["blobs_steps", "blobs_steps:gelu", "--baselines", "nadamw,heavy_ball",
                "--trials", "1", "--out", out, "--record", rec,
                "--workloads-dir", TEST_WORKLOADS]
        p = script("baselines", *args)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertIn("blobs_steps-gelu (accuracy, max; level 0 median", p.stdout)
        self.assertIn("apf score ", p.stdout)
        self.assertIn("tau", p.stdout)
        ini = open(os.path.join(out, "workloads", "blobs_steps-gelu", "workload.ini")).read()
        self.assertIn("activation = gelu", ini)
        self.assertNotIn("[variant.", ini)
        r = json.load(open(rec))
        self.assertEqual([c["column"] for c in r["columns"]], ["blobs_steps", "blobs_steps-gelu"])
        for b in ("nadamw", "heavy_ball"):
            evs = log_evals(os.path.join(out, b + ".run"))
            for col in r["columns"]:
                unit = [u for u in evs if f"/{col['column']}/" in u]
                self.assertEqual(len(unit), 1)
                series = evs[unit[0]]
                self.assertEqual(col["best_validation"][b], max(v for _, v in series))
                for level in col["levels"]:
                    hits = [t for t, v in series if v >= level["target"]]
                    self.assertEqual(level["time_s"][b], hits[0] if hits else None)
                    flat = [x for g in level["ranking"] for x in g]
                    self.assertEqual(sorted(flat), ["heavy_ball", "nadamw"])
        # targets: level 0 is the median of the baselines' best (not derived)
        c0 = r["columns"][0]
        self.assertAlmostEqual(c0["levels"][0]["target"],
                               statistics.median(c0["best_validation"].values()))
        p2 = script("baselines", *args)
        self.assertEqual(p2.returncode, 0, p2.stderr + p2.stdout)
        self.assertIn("nadamw: reusing", p2.stdout)
        self.assertIn("heavy_ball: reusing", p2.stdout)

    def test_unknown_variant_is_one_line(self):
        p = script("baselines", "blobs_steps:nope", "--out", os.path.join(self.tmp, "x"),
                   "--workloads-dir", TEST_WORKLOADS)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("apf: baselines: "), p.stderr)


if __name__ == "__main__":
    unittest.main()
