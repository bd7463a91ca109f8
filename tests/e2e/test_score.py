"""apf score end to end: the published AlgoPerf v0.5 leaderboard reproduced
from its logs, the CSV and SVG a person would use, apf run directories with
workload.ini targets and a held-out draw, clear one-line errors (exit 2)
for bad input, leaving no half-written output behind, and the numbers the
scorer refuses: a warning naming file and line and the trial never meeting
its target, or with --strict an error.

The AlgoPerf logs are the trimmed copy in tests/data/algoperf_v05 (its
README.md says how it was made, and holds the published leaderboard), so
this runs on every clone.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import unittest
import xml.etree.ElementTree as ET

ROOT = os.environ.get(
    "APF_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
APF = os.environ.get("APF_BIN", os.path.join(ROOT, "build", "apf"))
DATA = os.path.join(ROOT, "tests", "data", "algoperf_v05")
ARCHIVE = os.path.join(DATA, "algoperf_v05.tar.xz")
# Hand-made targets and logs; their README.md works out each score.
FIXTURES = os.path.join(ROOT, "tests", "data", "score")
SVG_NS = "{http://www.w3.org/2000/svg}"


def published_leaderboard(readme):
    """The | submission | score | rows of the data README."""
    rows = {}
    with open(readme, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*([A-Za-z0-9_]+)\s*\|\s*([0-9]+\.[0-9]{4})\s*\|\s*$",
                         line)
            if m:
                rows[m.group(1)] = m.group(2)
    return rows


def apf(*args, env=None):
    return subprocess.run([APF, *args], capture_output=True, text=True,
                          env=env, timeout=300)


def unpack_v05(dest):
    """The trimmed v0.5 logs into dest: external_tuning/ and scoring/."""
    with tarfile.open(ARCHIVE) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)


class AlgoPerfV05Leaderboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apf-score-")
        unpack_v05(cls.tmp)
        cls.logs = os.path.join(cls.tmp, "external_tuning")
        cls.targets = os.path.join(cls.tmp, "scoring",
                                   "workload_targets_v05.json")
        cls.heldout = os.path.join(cls.tmp, "scoring",
                                   "held_out_workloads_algoperf_v05.json")
        cls.published = published_leaderboard(os.path.join(DATA, "README.md"))
        cls.csv = os.path.join(cls.tmp, "scores.csv")
        cls.svg = os.path.join(cls.tmp, "profiles.svg")
        cls.proc = apf("score", cls.logs, "--rules", "algoperf-0.5",
                      "--targets", cls.targets, "--heldout", cls.heldout,
                      "--csv", cls.csv, "--svg", cls.svg, "--json")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def result(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        return json.loads(self.proc.stdout)

    def test_every_published_score_to_4_decimals(self):
        self.assertEqual(len(self.published), 11)
        got = {s["name"]: s["score"] for s in self.result()["submissions"]}
        self.assertEqual(set(got), set(self.published))
        for name, want in self.published.items():
            self.assertEqual(f"{got[name]:.4f}", want, name)

    def test_held_out_rules_and_workloads(self):
        r = self.result()
        self.assertEqual(r["rules"], "algoperf-0.5")
        self.assertEqual(r["best_trial"], "first-eval")
        self.assertEqual(len(r["base_workloads"]), 8)
        self.assertEqual(len(r["heldout_variants"]), 6)
        self.assertIn({"base": "criteo1tb", "variant": "criteo1tb_embed_init"},
                      r["heldout_variants"])
        caspr = next(s for s in r["submissions"] if s["name"] == "caspr_adaptive")
        # No wmt_glu_tanh logs at all: its wmt target was met, without credit.
        self.assertIsNone(caspr["times"]["wmt_glu_tanh"])
        self.assertIsInstance(caspr["raw_times"]["wmt"], float)
        self.assertEqual(caspr["times"]["wmt"], "inf")
        self.assertEqual(len(caspr["profile"]), 100)
        self.assertEqual(r["tau"][0], 1.0)
        self.assertEqual(r["tau"][-1], 4.0)

    def test_csv_rows(self):
        self.result()
        with open(self.csv, newline="") as f:
            rows = list(csv.reader(f))
        self.assertEqual(rows[0][:2], ["submission", "score"])
        self.assertEqual(len(rows[0]), 2 + 8 + 6)
        self.assertEqual(len(rows), 1 + 11)
        by_name = {row[0]: row for row in rows[1:]}
        for name, want in self.published.items():
            self.assertEqual(f"{float(by_name[name][1]):.4f}", want)
        ip = rows[0].index("imagenet_resnet")
        self.assertEqual(by_name["shampoo_submission"][ip], "inf")
        self.assertGreater(float(by_name["generalized_adam"][ip]), 0)

    def test_svg_profile_plot(self):
        self.result()
        root = ET.parse(self.svg).getroot()
        self.assertEqual(root.tag, SVG_NS + "svg")
        paths = root.findall(f".//{SVG_NS}path")
        self.assertEqual(len(paths), 11)
        self.assertEqual({p.get("data-submission") for p in paths},
                         set(self.published))
        self.assertEqual(len({p.get("stroke") for p in paths}), 11)
        texts = " ".join(t.text or "" for t in root.iter(SVG_NS + "text"))
        self.assertIn("shampoo_submission (0.7784)", texts)
        self.assertIn("Performance profiles", texts)
        for tick in ("1.0", "2.5", "4.0", "0.2"):
            self.assertIn(tick, texts.split())

    def test_fastest_trial_rule_differs(self):
        # The published scorer takes the trial that met the target at the
        # earliest eval; taking the fastest moves lawa_ema by 0.005.
        p = apf("score", self.logs, "--rules", "apf", "--targets",
                self.targets, "--heldout", self.heldout, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = {s["name"]: s["score"] for s in json.loads(p.stdout)["submissions"]}
        self.assertEqual(f"{got['lawa_ema']:.4f}", "0.3434")
        self.assertNotEqual(f"{got['lawa_ema']:.4f}", self.published["lawa_ema"])

    def test_table_defaults_to_the_targets_version(self):
        p = apf("score", self.logs, "--targets", self.targets, "--heldout",
                self.heldout)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("rules: algoperf-0.5", p.stdout)
        line = next(l for l in p.stdout.splitlines()
                    if " shampoo_submission " in l and "0.7784" in l)
        self.assertTrue(line.lstrip().startswith("1 "), line)
        # What the scorer skipped is said on stderr, one line each.
        self.assertIn("apf: score: warning: schedule_free_adamw: 18 trial "
                      "directories directly in a study", p.stderr)
        # Every published number passes the checks: no trial is refused.
        self.assertNotIn("never meeting", p.stderr)

    def test_targets_file_alone_gives_the_same_scores(self):
        # The archive's workload_targets_v05.json is in AlgoPerf's current
        # format: its benchmark_version chooses the rules and its
        # held_out_workloads are the published draw, so no --rules and no
        # --heldout give the published leaderboard too.
        p = apf("score", self.logs, "--targets", self.targets, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["rules"], "algoperf-0.5")
        self.assertEqual(r["heldout"], self.targets)
        self.assertEqual(len(r["heldout_variants"]), 6)
        got = {s["name"]: f"{s['score']:.4f}" for s in r["submissions"]}
        self.assertEqual(got, self.published)
        self.assertEqual(r["submissions"], self.result()["submissions"])

    def test_strict_refuses_the_published_counts(self):
        # AlgoPerf's own --strict fails on these logs too: some trials
        # were never logged.
        p = apf("score", self.logs, "--targets", self.targets, "--heldout",
                self.heldout, "--strict")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertEqual(p.stderr, "apf: score: amos: criteo1tb_jax: 20 trial "
                         "directories without eval_measurements.csv\n")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


WORKLOAD_INI = """[workload]
name = tiny_cls
model = mlp
loss = cross_entropy
metric = accuracy
direction = max
validation_target = 0.8
test_target = 0.78
[dataset]
name = tiny
path = data
[model]
hidden = 8
[budget.cpu]
max_runtime_s = 60
eval_period_s = 1
[variant.wide]
hidden = 32
validation_target = 0.7
"""

HEADER = ("accumulated_eval_time,accumulated_logging_time,"
          "accumulated_submission_time,global_step,preemption_count,score,"
          "total_duration,train/accuracy,validation/accuracy,test/accuracy,"
          "validation/num_examples,test/num_examples\n")


def evals(rows):
    """rows: (score, validation accuracy) pairs as AlgoPerf columns."""
    out = HEADER
    for i, (t, acc) in enumerate(rows):
        out += f"1.0,0.1,{t},{i + 1},0,{t},{t + 2},{acc},{acc},{acc},100,100\n"
    return out


class ApfRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-score-")
        self.env = dict(os.environ,
                        APF_WORKLOADS_DIR=os.path.join(self.tmp, "workloads"))
        write(os.path.join(self.tmp, "workloads", "tiny_cls", "workload.ini"),
              WORKLOAD_INI)
        runs = os.path.join(self.tmp, "runs")
        # Run a: named by run.json; two studies, the fastest trial of
        # study 0 is trial 2.
        a = os.path.join(runs, "run-a")
        write(os.path.join(a, "run.json"),
              json.dumps({"submission": "adamw", "plan": {"studies": 2}}))
        write(os.path.join(a, "study_0/tiny_cls/trial_1/eval_measurements.csv"),
              evals([(1.0, 0.5), (9.0, 0.85)]))
        write(os.path.join(a, "study_0/tiny_cls/trial_2/eval_measurements.csv"),
              evals([(1.0, 0.5), (2.0, 0.6), (6.0, 0.81)]))
        write(os.path.join(a, "study_1/tiny_cls/trial_1/eval_measurements.csv"),
              evals([(8.0, 0.82)]))
        write(os.path.join(a, "study_0/tiny_cls_wide/trial_1/eval_measurements.csv"),
              evals([(3.0, 0.72)]))
        # Run b: run.json without a name; slower, and no variant logs.
        b = os.path.join(runs, "sgd")
        write(os.path.join(b, "run.json"), "{}")
        write(os.path.join(b, "study_0/tiny_cls/trial_1/eval_measurements.csv"),
              evals([(4.0, 0.9)]))
        self.runs = runs
        self.draw = os.path.join(self.tmp, "draw.json")
        write(self.draw, json.dumps({"seed": "00ff", "draws": [
            {"base": "tiny_cls", "variant": "wide"}]}))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_apf_rules_by_default_with_workload_ini_targets(self):
        p = apf("score", self.runs, "--json", env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["rules"], "apf")
        self.assertEqual(r["base_workloads"], ["tiny_cls"])
        subs = {s["name"]: s for s in r["submissions"]}
        self.assertEqual(set(subs), {"adamw", "sgd"})
        # adamw: median of study bests 6 and 8.
        self.assertEqual(subs["adamw"]["times"]["tiny_cls"], 7.0)
        self.assertEqual(subs["sgd"]["times"]["tiny_cls"], 4.0)
        self.assertEqual(subs["sgd"]["score"], 1.0)
        self.assertEqual(subs["adamw"]["kind"], "apf-run")
        self.assertIn("tiny_cls_wide: neither a base workload nor a held-out "
                      "variant (pass --heldout", p.stderr)

    def test_a_target_met_only_at_first_evals_is_said(self):
        # sgd's one trial met the target at its first eval: its time is
        # when that eval came. adamw's study 1 did too, but its study 0
        # trials met it later: their times rank training.
        p = apf("score", self.runs, "--json", env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        first = [w for w in json.loads(p.stdout)["warnings"]
                 if "at its first eval" in w]
        self.assertEqual(first, [
            "sgd: tiny_cls: every trial that met the target (1) met it at "
            "its first eval: the times are when that eval came, not how "
            "fast they trained (a shorter eval period would tell them "
            "apart)"])

    def test_held_out_draw_takes_credit_from_a_missing_variant(self):
        p = apf("score", self.runs, "--heldout", self.draw, "--json",
                env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["heldout_variants"],
                         [{"base": "tiny_cls", "variant": "tiny_cls_wide"}])
        subs = {s["name"]: s for s in r["submissions"]}
        self.assertEqual(subs["sgd"]["times"]["tiny_cls"], "inf")
        self.assertEqual(subs["sgd"]["raw_times"]["tiny_cls"], 4.0)
        self.assertEqual(subs["sgd"]["score"], 0.0)
        self.assertEqual(subs["adamw"]["score"], 1.0)
        self.assertEqual(r["submissions"][0]["name"], "adamw")

    def test_algoperf_rules_on_apf_runs(self):
        # Study 0: trial 1 met the target at eval 1, trial 2 at eval 2.
        p = apf("score", self.runs, "--rules", "algoperf-0.6", "--json",
                env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        subs = {s["name"]: s for s in r["submissions"]}
        self.assertEqual(subs["adamw"]["raw_times"]["tiny_cls"], 8.5)
        self.assertEqual(r["ruleset"], "external")
        self.assertIn("adamw: tiny_cls: 2 studies with logs; algoperf-0.6 "
                      "expects 3", p.stderr)
        self.assertIn("adamw: tiny_cls: 2 studies with other than 5 logged "
                      "trials", p.stderr)

    def test_self_tuning_expects_one_trial_per_study(self):
        p = apf("score", self.runs, "--rules", "algoperf-0.5",
                "--self-tuning", env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("self-tuning ruleset: one trial per study, runtime "
                      "budget x3 of external tuning's", p.stdout)
        self.assertIn("adamw: tiny_cls: 1 study with other than 1 logged "
                      "trial\n", p.stderr)

    def test_runs_scored_together_hold_one_draw(self):
        """Each run's own heldout.json is the draw when --heldout is not
        given; two runs bringing two draws (one with a seed chosen for it)
        are refused, naming both, and --heldout chooses."""
        write(os.path.join(self.runs, "run-a", "heldout.json"), json.dumps(
            {"seed": "00ff", "draws": [{"base": "tiny_cls", "variant": "wide"}]}))
        write(os.path.join(self.runs, "sgd", "heldout.json"), json.dumps(
            {"seed": "0fff", "draws": [{"base": "tiny_cls", "variant": "wide"}]}))
        p = apf("score", os.path.join(self.runs, "run-a"), os.path.join(self.runs, "sgd"),
                env=self.env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("sgd/heldout.json: differs from ", p.stderr)
        self.assertIn("run-a/heldout.json: runs scored together hold one held-out draw "
                      "(--heldout FILE chooses one)", p.stderr)
        p = apf("score", os.path.join(self.runs, "run-a"), os.path.join(self.runs, "sgd"),
                "--heldout", self.draw, "--json", env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["heldout_variants"],
                         [{"base": "tiny_cls", "variant": "tiny_cls_wide"}])

    def test_a_study_missing_from_the_directory_counts_as_a_miss(self):
        """An operator deletes the study that went worst (its directory,
        and what the log says of it): run.json's plan still lists it, and
        its units count as trials that never met the target, so the median
        does not move to the studies that went well."""
        run = os.path.join(self.tmp, "cut", "adamw")
        units = [{"workload": "tiny_cls", "variant": "base", "study": k, "trial": t}
                 for k in range(3) for t in (1, 2)]
        write(os.path.join(run, "run.json"),
              json.dumps({"submission": "adamw", "plan": {"studies": 3, "units": units}}))
        write(os.path.join(run, "study_0/tiny_cls/trial_1/eval_measurements.csv"),
              evals([(1.0, 0.5), (6.0, 0.81)]))
        write(os.path.join(run, "study_0/tiny_cls/trial_2/eval_measurements.csv"),
              evals([(1.0, 0.5), (9.0, 0.85)]))
        write(os.path.join(run, "study_1/tiny_cls/trial_1/eval_measurements.csv"),
              evals([(1.0, 0.5), (8.0, 0.82)]))
        write(os.path.join(run, "study_1/tiny_cls/trial_2/eval_measurements.csv"),
              evals([(1.0, 0.5), (7.0, 0.83)]))
        p = apf("score", run, "--json", env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        sub = r["submissions"][0]
        # Studies 6, 7 and a miss: the median is 7, not the 6.5 of the two
        # left, and the time is marked as one a unit that never ran is in.
        self.assertEqual(sub["times"]["tiny_cls"], 7.0)
        self.assertIn("adamw: 2 of the plan's 6 units have no eval_measurements.csv "
                      "(study_2/tiny_cls/trial_1, study_2/tiny_cls/trial_2)", r["warnings"])
        t = apf("score", run, env=self.env)
        self.assertIn("!: a unit behind it stopped early (failed, the run was "
                      "interrupted, or it never ran)", t.stdout)
        # The page draws the trials that have curves (a missing one has
        # none to read).
        page = os.path.join(self.tmp, "cut.html")
        p = apf("report", run, "-o", page, env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("study_2/tiny_cls/trial_1", open(page).read())
        # Trial 2 of study 1 gone as well: study 1 is trial 1's 8 now.
        shutil.rmtree(os.path.join(run, "study_1", "tiny_cls", "trial_2"))
        r = json.loads(apf("score", run, "--json", env=self.env).stdout)
        self.assertEqual(r["submissions"][0]["times"]["tiny_cls"], 8.0)
        # The export would let AlgoPerf's scorer take the median of what is
        # left: refused.
        targets = os.path.join(self.tmp, "targets.json")
        write(targets, json.dumps({"workloads": {"tiny_cls": {
            "target_metric_name": "accuracy", "validation_target_value": 0.8,
            "step_hint": 100}}}))
        x = apf("score", run, "--rules", "algoperf-0.6", "--targets", targets,
                "--export-algoperf", os.path.join(self.tmp, "x"), env=self.env)
        self.assertEqual(x.returncode, 2, x.stderr)
        self.assertIn("adamw: study_1/tiny_cls/trial_2 has no eval_measurements.csv: apf "
                      "counts it as never meeting its target, AlgoPerf's scorer would "
                      "leave it out", x.stderr)

    def test_each_argument_may_be_a_submission(self):
        p = apf("score", os.path.join(self.runs, "sgd"),
                os.path.join(self.runs, "run-a"), "--csv",
                os.path.join(self.tmp, "out.csv"), env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.tmp, "out.csv")) as f:
            rows = list(csv.reader(f))
        self.assertEqual(rows[0], ["submission", "score", "tiny_cls"])
        self.assertEqual(rows[1][:2], ["sgd", "1.000000"])
        self.assertIn("rules: apf", p.stdout)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-score-")
        self.targets = os.path.join(self.tmp, "targets.json")
        write(self.targets, json.dumps({
            "benchmark_version": "0.5", "base_workloads": ["w"],
            "held_out_workloads": [],
            "workloads": {"w": {"target_metric_name": "accuracy",
                                "validation_target_value": 0.8,
                                "step_hint": 100}}}))
        self.sub = os.path.join(self.tmp, "logs", "sub")
        self.csv = os.path.join(self.sub, "study_0", "w_jax", "trial_1",
                                "eval_measurements.csv")
        write(self.csv, "score,validation/accuracy\n1,0.5\n2,0.9\n")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_fails(self, p, *parts):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("apf: "), lines[0])
        for part in parts:
            self.assertIn(part, lines[0])
        self.assertEqual(p.stdout, "")

    def test_good_input_scores(self):
        p = apf("score", self.sub, "--targets", self.targets)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("sub", p.stdout)

    def test_missing_directory(self):
        missing = os.path.join(self.tmp, "nope")
        self.assert_fails(apf("score", missing, "--targets", self.targets),
                          missing, "No such file or directory")

    def test_a_run_json_too_large_or_symlinked_is_refused_at_once(self):
        # A run directory is someone else's: its run.json is read as the
        # verifier reads it (a regular file inside the run, at most 64 MiB),
        # not loaded whole whatever its size or wherever it points.
        rj = os.path.join(self.sub, "run.json")
        with open(rj, "wb") as f:
            f.truncate((64 << 20) + 1)
        self.assert_fails(apf("score", self.sub, "--targets", self.targets),
                          "run.json", "larger than")
        os.remove(rj)
        elsewhere = os.path.join(self.tmp, "elsewhere.json")
        write(elsewhere, "{}")
        os.symlink(elsewhere, rj)
        self.assert_fails(apf("score", self.sub, "--targets", self.targets), "run.json")

    def test_directory_without_logs(self):
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        self.assert_fails(apf("score", empty, "--targets", self.targets),
                          "no submission logs here")

    def test_malformed_csvs_name_file_and_line(self):
        # Not a CSV the scorer can read: an error, --strict or not.
        cases = [
            ("score,validation/accuracy\n1,\"0.5\n", ":2: quoted field "
             "never closed"),
            ("score,validation/loss\n1,0.5\n", ":1: no column "
             "'validation/accuracy' (the target metric)"),
            ("score,validation/accuracy\n1,0.5,3\n", ":2: more fields than "
             "the 2 columns of the header"),
            ("", ": empty file (no header line)"),
        ]
        out = os.path.join(self.tmp, "out.csv")
        for text, want in cases:
            with self.subTest(want=want):
                write(self.csv, text)
                p = apf("score", self.sub, "--targets", self.targets, "--csv",
                        out)
                self.assert_fails(p)
                self.assertEqual(p.stderr,
                                 f"apf: score: {self.csv}{want}\n")
                # Nothing half-written: no output file, no temporary.
                self.assertEqual(sorted(os.listdir(self.tmp)),
                                 ["logs", "targets.json"])

    def test_bad_options_and_files(self):
        self.assert_fails(apf("score", self.sub, "--rules", "algoperf-9"),
                          "unknown rules 'algoperf-9'")
        self.assert_fails(apf("score", self.sub, "--targets",
                              os.path.join(self.tmp, "none.json")),
                          "none.json", "No such file")
        write(os.path.join(self.tmp, "broken.json"), "{\"workloads\": [")
        self.assert_fails(apf("score", self.sub, "--targets",
                              os.path.join(self.tmp, "broken.json")),
                          "broken.json: line")
        self.assert_fails(apf("score", self.sub, "--targets", self.targets,
                              "--heldout", self.targets),
                          "expected AlgoPerf's held-out list")
        self.assert_fails(apf("score"), "missing argument")
        self.assert_fails(apf("score", self.sub, "--targets", self.targets,
                              "--svg", os.path.join(self.tmp, "no", "x.svg")),
                          "x.svg")

    def test_no_target_for_a_workload(self):
        env = dict(os.environ, APF_WORKLOADS_DIR=self.tmp)
        self.assert_fails(apf("score", self.sub, env=env), "w: no target")

    def test_help(self):
        p = apf("score", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("--heldout FILE", p.stdout)
        self.assertIn("--strict", p.stdout)
        self.assertIn("error (exit 2)", p.stdout)


def scores_of(proc):
    return {s["name"]: s["score"]
            for s in json.loads(proc.stdout)["submissions"]}


class CurrentTargetsFormat(unittest.TestCase):
    """AlgoPerf's workload_targets JSON as mlcommons/submissions_algorithms
    has it now: the file chooses the rules and the base workloads."""

    LOGS = os.path.join(FIXTURES, "logs")
    V05 = os.path.join(FIXTURES, "targets_v05.json")
    V06 = os.path.join(FIXTURES, "targets_v06.json")
    LM_WARNING = ("lm: no submission has logs for this base workload; left "
                  "out of the profile")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-score-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def score(self, *args):
        p = apf("score", *args, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        return p, json.loads(p.stdout)

    def assert_hand_computed(self, proc):
        got = scores_of(proc)
        self.assertEqual(set(got), {"s1", "s2"})
        self.assertAlmostEqual(got["s1"], 1.0, places=12)
        self.assertAlmostEqual(got["s2"], 41.25 / 99, places=12)

    def test_benchmark_version_chooses_the_rules(self):
        for path, rules in ((self.V05, "algoperf-0.5"),
                            (self.V06, "algoperf-0.6")):
            with self.subTest(rules):
                p, r = self.score(self.LOGS, "--targets", path)
                self.assertEqual(r["rules"], rules)
                self.assertEqual(r["base_workloads"], ["wa", "wb"])
                self.assert_hand_computed(p)
                # The table says which rules it used, too.
                t = apf("score", self.LOGS, "--targets", path)
                self.assertEqual(t.returncode, 0, t.stderr)
                self.assertIn(f"rules: {rules}\n", t.stdout)

    def test_explicit_rules_win_over_the_version(self):
        for path in (self.V05, self.V06):
            with self.subTest(path=os.path.basename(path)):
                p, r = self.score(self.LOGS, "--targets", path, "--rules",
                                  "apf")
                self.assertEqual(r["rules"], "apf")
                self.assert_hand_computed(p)
        p, r = self.score(self.LOGS, "--targets", self.V06, "--rules",
                          "algoperf-0.5")
        self.assertEqual(r["rules"], "algoperf-0.5")
        self.assertIn("scoring with algoperf-0.5 but the targets are "
                      "AlgoPerf 0.6's", p.stderr)

    def test_base_workload_without_logs_is_left_out_with_a_warning(self):
        p, r = self.score(self.LOGS, "--targets", self.V06)
        self.assertEqual(r["base_workloads"], ["wa", "wb"])
        self.assertIn(self.LM_WARNING, r["warnings"])
        self.assertIn(f"apf: score: warning: {self.LM_WARNING}\n", p.stderr)
        self.assertEqual(p.stderr.count("lm:"), 1)
        # s2 has no wb logs while s1 has: wb stays, missed by s2.
        s2 = next(s for s in r["submissions"] if s["name"] == "s2")
        self.assertIsNone(s2["times"]["wb"])
        self.assert_hand_computed(p)
        # The v0.5 file does not list lm: nothing to say.
        p, r = self.score(self.LOGS, "--targets", self.V05)
        self.assertNotIn("lm:", p.stderr)

    def test_base_workload_without_logs_is_an_error_with_strict(self):
        out = os.path.join(self.tmp, "out.csv")
        p = apf("score", self.LOGS, "--targets", self.V06, "--strict",
                "--csv", out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertEqual(p.stderr, "apf: score: lm: no submission has logs "
                         "for this base workload\n")
        self.assertFalse(os.path.exists(out))

    def test_tied_trials_go_to_the_fastest(self):
        # tie/: trials 1 (60 s) and 2 (20 s) of a's study both first meet
        # the target at eval index 1; trial 3 meets it later (index 2) at
        # 15 s. See tests/data/score/README.md for the sums.
        tie = os.path.join(FIXTURES, "tie")
        logs = os.path.join(tie, "logs")
        targets = os.path.join(tie, "targets.json")
        for rules in ("algoperf-0.6", "algoperf-0.5"):
            with self.subTest(rules):
                p, r = self.score(logs, "--targets", targets, "--rules", rules)
                a = next(s for s in r["submissions"] if s["name"] == "a")
                self.assertEqual(a["times"]["wa"], 20.0)
                got = scores_of(p)
                self.assertAlmostEqual(got["a"], 1.0, places=12)
                self.assertAlmostEqual(got["b"], 80.5 / 99, places=12)
                # Not what taking trial 1 (the lowest number) would give.
                self.assertNotAlmostEqual(got["a"], 68.5 / 99, places=3)
        p, r = self.score(logs, "--targets", targets, "--rules", "apf")
        got = scores_of(p)
        self.assertAlmostEqual(got["a"], 1.0, places=12)
        self.assertAlmostEqual(got["b"], 63.5 / 99, places=12)

    def test_help_says_how_ties_and_versions_are_decided(self):
        p = apf("score", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        text = " ".join(p.stdout.split())
        self.assertIn("Among trials that first met the target at the same "
                      "eval, the fastest (smallest score there) counts", text)
        self.assertIn("Default: the targets file's benchmark_version (0.5 or "
                      "0.6; any other is an error)", text)

    def malformed(self, doc, text=None):
        path = os.path.join(self.tmp, "targets.json")
        write(path, text if text is not None else json.dumps(doc))
        return path

    def test_malformed_files_are_refused_naming_the_key(self):
        with open(self.V06) as f:
            good = f.read()

        def edit(fn):
            doc = json.loads(good)
            fn(doc)
            return doc

        def setw(key, value):
            return lambda d: d["workloads"]["wa"].__setitem__(key, value)

        def dropw(key):
            return lambda d: d["workloads"]["wa"].pop(key)

        unknown_w = ("unknown key (expected target_metric_name, "
                     "validation_target_value, step_hint)")
        cases = [
            (setw("validation_target_value", "0.8"),
             "workloads.wa.validation_target_value: not a number"),
            (setw("validation_target_value", None),
             "workloads.wa.validation_target_value: not a number"),
            (dropw("validation_target_value"),
             "workloads.wa.validation_target_value: missing"),
            (setw("target_metric_name", 3),
             "workloads.wa.target_metric_name: not a metric name"),
            (dropw("target_metric_name"),
             "workloads.wa.target_metric_name: missing"),
            (dropw("step_hint"), "workloads.wa.step_hint: missing"),
            (setw("step_hint", 1.5),
             "workloads.wa.step_hint: not a positive integer"),
            (setw("target", 0.8), "workloads.wa.target: " + unknown_w),
            (lambda d: d["workloads"].__setitem__("wa", 0.8),
             "workloads.wa: not an object"),
            (lambda d: d.__setitem__("workloads", []),
             "workloads: not an object"),
            (lambda d: d.pop("workloads"),
             "workloads: missing (expected AlgoPerf's workload_targets JSON)"),
            (lambda d: d.__setitem__("held_out", []),
             "held_out: unknown key (expected _comment, benchmark_version, "
             "base_workloads, held_out_workloads, workloads)"),
            (lambda d: d.__setitem__("_comment", 1), "_comment: not a string"),
            (lambda d: d.__setitem__("benchmark_version", 0.6),
             "benchmark_version: not a version string"),
            (lambda d: d.pop("base_workloads"), "base_workloads: missing"),
            (lambda d: d.pop("held_out_workloads"),
             "held_out_workloads: missing"),
            (lambda d: d.__setitem__("base_workloads", "wa"),
             "base_workloads: not an array of workload names"),
            (lambda d: d.__setitem__("base_workloads", ["wa", 3]),
             "base_workloads[1]: not a workload name"),
            (lambda d: d.__setitem__("base_workloads", ["wa", "wb", "wa"]),
             "base_workloads: wa is listed twice"),
            (lambda d: d.__setitem__("held_out_workloads", ["wb"]),
             "held_out_workloads: wb is also a base workload"),
            (lambda d: d["base_workloads"].append("zz"),
             "base_workloads[3]: zz has no entry in workloads"),
        ]
        for fn, want in cases:
            with self.subTest(want):
                path = self.malformed(edit(fn))
                p = apf("score", self.LOGS, "--targets", path)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertEqual(p.stderr, f"apf: {path}: {want}\n")
        # Duplicate keys, at the top level and in an entry.
        for old, new in (('"benchmark_version": "0.6",',
                          '"benchmark_version": "0.6", "benchmark_version": '
                          '"0.5",'),
                         ('"validation_target_value": 0.8,',
                          '"validation_target_value": 0.8, '
                          '"validation_target_value": 0.9,')):
            with self.subTest(duplicate=old):
                self.assertIn(old, good)
                path = self.malformed(None, good.replace(old, new, 1))
                p = apf("score", self.LOGS, "--targets", path)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
                self.assertTrue(p.stderr.startswith(f"apf: {path}: line "),
                                p.stderr)
                self.assertIn("duplicate object key", p.stderr)

    def test_unknown_version_is_an_error_unless_rules_are_given(self):
        with open(self.V06) as f:
            doc = json.load(f)
        for version in ("0.7", "0.6.1", "v0.6"):
            with self.subTest(version):
                doc["benchmark_version"] = version
                path = self.malformed(doc)
                p = apf("score", self.LOGS, "--targets", path)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertEqual(
                    p.stderr,
                    f"apf: {path}: benchmark_version: '{version}' is not a "
                    "version apf can score (0.5 or 0.6); pass --rules to "
                    "choose the rules\n")
                p, r = self.score(self.LOGS, "--targets", path, "--rules",
                                  "algoperf-0.6")
                self.assertEqual(r["rules"], "algoperf-0.6")
                self.assert_hand_computed(p)

    def test_short_form_without_version_still_accepted(self):
        # apf's shorter form: no benchmark_version, lists or step_hint.
        path = self.malformed({"base_workloads": ["wa", "wb"], "workloads": {
            "wa": {"target_metric_name": "accuracy",
                   "validation_target_value": 0.8},
            "wb": {"target_metric_name": "loss",
                   "validation_target_value": 0.5}}})
        p, r = self.score(self.LOGS, "--targets", path)
        self.assertEqual(r["rules"], "algoperf-0.6")
        self.assert_hand_computed(p)


# Each number the scorer refuses: (CSV of submission a, line, why). Read
# leniently, as apf score did before, each would meet the target before
# b's 50 s and win.
REFUSALS = [
    ("hex float", "score,validation/accuracy\n0x1p3,0.9\n", 2,
     "column 'score': '0x1p3' is not a plain decimal number"),
    ("minus zero", "score,validation/accuracy\n-0,0.9\n", 2,
     "column 'score': '-0' is negative zero"),
    ("negative", "score,accumulated_eval_time,validation/accuracy\n"
     "1,-3.5,0.9\n", 2, "column 'accumulated_eval_time': '-3.5' is negative"),
    ("inf", "score,validation/accuracy\n1,inf\n", 2,
     "column 'validation/accuracy': 'inf' is not a finite number"),
    ("nan time", "score,validation/accuracy\n1,0.9\nnan,0.95\n", 3,
     "column 'score': 'nan' is not a finite number"),
    ("accuracy 2.5", "score,validation/accuracy\n1,2.5\n", 2,
     "column 'validation/accuracy': 2.5 is outside [0, 1], the range of "
     "accuracy"),
    ("time going back", "score,validation/accuracy\n10,0.1\n5,0.9\n", 3,
     "column 'score' goes back from 10 (line 2) to 5"),
    ("step going back", "global_step,score,validation/accuracy\n"
     "10,1,0.1\n5,2,0.9\n", 3,
     "column 'global_step' goes back from 10 (line 2) to 5"),
    ("trailing junk", "score,validation/accuracy\n1,0.9\n2,0.9x\n", 3,
     "column 'validation/accuracy': '0.9x' is not a plain decimal number"),
    ("leading plus", "score,validation/accuracy\n+1,0.9\n", 2,
     "column 'score': '+1' is not a plain decimal number"),
]


class RefusedNumbers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-score-")
        self.targets = os.path.join(self.tmp, "targets.json")
        write(self.targets, json.dumps({
            "base_workloads": ["w"],
            "workloads": {"w": {"target_metric_name": "accuracy",
                                "validation_target_value": 0.8}}}))
        self.logs = os.path.join(self.tmp, "logs")
        self.csv = os.path.join(self.logs, "a", "study_0", "w_jax", "trial_1",
                                "eval_measurements.csv")
        write(os.path.join(self.logs, "b", "study_0", "w_jax", "trial_1",
                           "eval_measurements.csv"),
              "score,validation/accuracy\n50,0.9\n")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def score(self, *extra):
        return apf("score", self.logs, "--rules", "apf", "--targets",
                   self.targets, *extra)

    def test_each_refusal_is_a_missed_trial_or_with_strict_an_error(self):
        out = os.path.join(self.tmp, "out.csv")
        for name, text, line, why in REFUSALS:
            with self.subTest(name):
                write(self.csv, text)
                where = f"{self.csv}:{line}: {why}"
                warning = where + ("; the trial counts as never meeting its "
                                   "target")
                p = self.score("--json")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr,
                                 f"apf: score: warning: {warning}\n")
                r = json.loads(p.stdout)
                self.assertEqual(r["warnings"], [warning])
                subs = {s["name"]: s for s in r["submissions"]}
                self.assertEqual(subs["a"]["times"]["w"], "inf")
                self.assertEqual(subs["a"]["score"], 0.0)
                self.assertEqual(subs["b"]["score"], 1.0)
                self.assertEqual(r["submissions"][0]["name"], "b")

                p = self.score("--strict", "--csv", out)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertEqual(p.stderr, f"apf: score: {where}\n")
                self.assertFalse(os.path.exists(out))

    def test_good_file_scores_as_before(self):
        write(self.csv, "score,global_step,validation/accuracy\n"
              "1e-3,0,\n2,10,nan\n2,10,0.5\n12.5,20,0.81\n")
        for extra in ((), ("--strict",)):
            with self.subTest(extra=extra):
                p = self.score("--json", *extra)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr, "")
                r = json.loads(p.stdout)
                self.assertEqual(r["warnings"], [])
                subs = {s["name"]: s for s in r["submissions"]}
                self.assertEqual(subs["a"]["times"]["w"], 12.5)
                self.assertEqual(subs["a"]["score"], 1.0)
                # 50 / 12.5 = 4: the last point of the profile.
                self.assertGreater(subs["b"]["score"], 0.0)
                self.assertLess(subs["b"]["score"], 0.01)



import apftest  # noqa: E402
from apftest import ApfCase  # noqa: E402 (its runs need signed entries)


class HeldOutDrawHasOneReader(ApfCase):
    """A draw file of `apf heldout draw` is read by its one reader
    (apf_heldout_parse) wherever apf takes one: apf score --heldout and apf
    run --heldout refuse a malformed draw with the same line, and one with
    its "format" taken out is not read in a looser way instead."""

    def test_malformed_draw_is_refused_alike_by_score_and_run(self):
        entry = self.pack(self.make_submission(ruleset="self"))
        draw = json.loads(self.ok("heldout", "draw", entry, "--json").out)
        self.write("runs/s/run.json", "{}")
        self.write("runs/s/study_0/tiny/trial_1/eval_measurements.csv",
                   "score,validation/accuracy\n1,0.5\n")
        good = self.write("good.json", json.dumps(draw))
        self.ok("score", self.path("runs"), "--heldout", good)
        cases = [
            (lambda d: d.__setitem__("note", 1),
             'draw file: unknown field "note"'),
            (lambda d: d["draws"][0].__setitem__("spec_sha256", "c0ffee"),
             'draws[0]: "spec_sha256": expected 64 lowercase hex digits'),
            (lambda d: d.__setitem__("seed", "not hex"),
             "seed: a seed from entries is 64 lowercase hex digits"),
            (lambda d: d.__setitem__("format", "apf-heldout-v0"),
             'format: expected "apf-heldout-v1"'),
            (lambda d: d.pop("format"),
             "method: unknown key (a draw by hand holds only"),
        ]
        for edit, why in cases:
            with self.subTest(why=why):
                d = json.loads(json.dumps(draw))
                edit(d)
                bad = self.write("bad.json", json.dumps(d))
                s = self.fails(2, "score", self.path("runs"), "--heldout", bad)
                r = self.fails(2, "run", entry, "-o", self.path("run"),
                               "--heldout", bad)
                line = s.err.splitlines()[-1]
                self.assertTrue(line.startswith(f"apf: {bad}: {why}"), line)
                self.assertEqual(r.err.splitlines()[-1], line)
                self.assertFalse(os.path.exists(self.path("run", "log.jsonl")))


# ---- apf runs made by `apf run`, and hostile copies of them --------------

def sandbox_available():
    from test_run import sandbox_available as probe
    return probe()


HW_NOTE = "time-to-target is comparable only on the same hardware"


class RealRuns(ApfCase):
    """apf score on runs made by `apf run` (the NAdamW baseline on the test
    workload blobs_mlp, a plan of 1 study x 2 trials, about 4 s a run; made
    once for the class), and on copies an operator edited: a deleted unit,
    an edited CSV, a cut log. The scorer says what the run itself records
    (run.json's plan and machine, the log's ends and failures), and
    --verify runs the verifier first."""

    @classmethod
    def setUpClass(cls):
        if not sandbox_available():
            raise unittest.SkipTest("the kernel refuses user namespaces here")
        m = ApfCase("run")
        m.setUp()
        cls.maker = m
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        shutil.copytree(src, m.path("nadamw"))
        with open(m.path("nadamw", "submission.ini"), "a") as f:
            f.write("studies = 1\ntrials = 2\n")
        entry = m.path("nadamw.apf")
        m.ok("pack", m.path("nadamw"), "-w", apftest.BLOBS, "-o", entry)
        # The thread counts may differ from the one the entry recorded
        # (the test runner's BLAS setting): a drift, logged and allowed.
        # The cpu clock: under the wall clock a machine busy with other
        # tests makes blocks short of cores, which the scorer warns of
        # (test_clock sets those waits deterministically).
        m.ok("run", entry, "-o", m.path("two"), "--threads", "2",
             "--allow-env-drift", "-q", "--clock", "cpu", timeout=300)
        m.ok("run", entry, "-o", m.path("one"), "--threads", "1",
             "--allow-env-drift", "-q", "--clock", "cpu", timeout=300)
        bad = os.path.join(apftest.ROOT, "tests", "data", "submissions",
                           "returns_error")
        m.ok("pack", bad, "-w", apftest.BLOBS, "-o", m.path("bad.apf"))
        r = m.apf("run", m.path("bad.apf"), "-o", m.path("failed"),
                  "--study", "0", "--threads", "2", "--allow-env-drift",
                  "-q", "--clock", "cpu", timeout=300)
        assert r.rc == 3, r

    @classmethod
    def tearDownClass(cls):
        cls.maker.tearDown()

    def setUp(self):
        super().setUp()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(self.maker.home, self.home)

    def run_copy(self, name, as_name=None):
        dst = self.path(as_name or name)
        shutil.copytree(self.maker.path(name), dst)
        return dst

    def score(self, *args):
        return self.apf("score", *args)

    def json_of(self, *args):
        r = self.ok("score", *args, "--json")
        return r, json.loads(r.out)

    def test_a_verified_run_exports_for_algoperfs_scorer(self):
        # The run directory itself holds entry.apf, run.json and logs,
        # which AlgoPerf's scorer stops on; the export holds its CSVs in
        # AlgoPerf's layout, with the machine run.json records.
        run = self.run_copy("two")
        out = self.path("algoperf")
        r = self.ok("score", run, "--verify", "--rules", "algoperf-0.6",
                    "--export-algoperf", out, "--json")
        scored = json.loads(r.out)["submissions"][0]
        sub = os.path.join(out, "submissions")
        self.assertEqual(os.listdir(sub), ["nadamw"])
        self.assertEqual(os.listdir(os.path.join(sub, "nadamw")), ["study_0"])
        trials = os.path.join(sub, "nadamw", "study_0", "blobs_mlp")
        self.assertEqual(sorted(os.listdir(trials)), ["trial_1", "trial_2"])
        t1 = os.path.join(trials, "trial_1")
        self.assertEqual(sorted(os.listdir(t1)),
                         ["eval_measurements.csv", "flags_0.json",
                          "hparams.json", "meta_data_0.json"])
        with open(os.path.join(t1, "eval_measurements.csv"), "rb") as f, \
                open(os.path.join(run, "study_0", "blobs_mlp", "trial_1",
                                  "eval_measurements.csv"), "rb") as g:
            self.assertEqual(f.read(), g.read())
        with open(os.path.join(t1, "meta_data_0.json")) as f:
            meta = json.load(f)
        self.assertIs(meta["apf.verified"], True)
        self.assertEqual(meta["apf.threads"], 2)
        self.assertEqual(meta["apf.device"], "cpu")
        self.assertEqual(meta["cpu_model_name"],
                         scored["run"]["hardware"]["cpu_model"])
        again = self.ok("score", sub, "--targets",
                        os.path.join(out, "workload_targets.json"), "--json")
        self.assertEqual(json.loads(again.out)["submissions"][0]["times"],
                         scored["times"])

    def test_a_whole_run_scores_quietly_and_says_it_is_unverified(self):
        run = self.run_copy("two")
        r, j = self.json_of(run)
        self.assertEqual(j["warnings"], [])
        self.assertEqual(r.err, "")
        self.assertEqual(j["verification"], "none")
        sub = j["submissions"][0]
        self.assertEqual(sub["verified"], "no")
        self.assertEqual(sub["run"]["plan_units"], 2)
        self.assertTrue(sub["run"]["complete"])
        self.assertEqual(sub["run"]["hardware"]["threads"], 2)
        t = self.ok("score", run)
        self.assertIn("verified: no - 1 apf run scored unverified, as on "
                      "disk (pass --verify)\n", t.out)
        self.assertRegex(t.out, r"hardware: cpu .+ \(\d+ cores?\), 2 "
                         r"threads, no GPU\n")
        # Four significant digits: 0.978 s and 0.999 s stay apart.
        line = next(l for l in t.out.splitlines() if " nadamw " in l)
        cell = line.split()[-1]
        self.assertRegex(cell, r"^(\d{4,}|\d{3}\.\d|\d{2}\.\d{2}|\d\.\d{3}|"
                         r"0\.\d{4,})$")
        v = self.ok("score", run, "--verify", "--strict")
        self.assertIn("verified: 1 apf run (apf verify's checks, no "
                      "re-evaluation or replay)\n", v.out)

    def test_units_missing_from_the_directory_are_named(self):
        run = self.run_copy("two", "partial")
        shutil.rmtree(os.path.join(run, "study_0", apftest.BLOBS, "trial_2"))
        want = (f"nadamw: 1 of the plan's 2 units has no "
                f"eval_measurements.csv (study_0/{apftest.BLOBS}/trial_2)")
        r, j = self.json_of(run)
        self.assertEqual(j["warnings"], [want])
        self.assertEqual(j["submissions"][0]["run"]["plan_units_with_csv"], 1)
        self.assertEqual(r.err, f"apf: score: warning: {want}\n")
        t = self.ok("score", run)
        self.assertIn(f"\nwarnings (1):\n  {want}\n", t.out)
        # Piped, the table's block and stderr each have it; at a terminal
        # the table's block says it once.
        self.assertEqual(t.err, f"apf: score: warning: {want}\n")
        rc, shown = self.at_terminal("score", run)
        self.assertEqual(rc, 0, shown)
        self.assertIn(f"\nwarnings (1):\n  {want}\n", shown)
        self.assertEqual(shown.count(want), 1, shown)
        s = self.fails(2, "score", run, "--strict")
        self.assertEqual(s.err, f"apf: score: {want}\n")
        self.assertEqual(s.out, "")

    def test_a_run_holding_one_unit_of_fifteen_is_said(self):
        # The baseline's own plan (3 studies x 5 trials), one unit run.
        m = self.maker
        entry = self.path("full.apf")
        self.ok("pack", os.path.join(apftest.ROOT, "submissions", "baselines",
                                     "nadamw"), "-w", apftest.BLOBS, "-o",
                entry)
        self.ok("run", entry, "-o", self.path("one_unit"), "--study", "0",
                "--trial", "1", "--threads", "2", "--allow-env-drift", "-q",
                "--clock", "cpu", timeout=300)
        del m
        r, j = self.json_of(self.path("one_unit"))
        self.assertEqual(j["warnings"][0],
                         f"nadamw: 14 of the plan's 15 units have no "
                         f"eval_measurements.csv (study_0/{apftest.BLOBS}"
                         f"/trial_2, study_0/{apftest.BLOBS}/trial_3, "
                         f"study_0/{apftest.BLOBS}/trial_4, ...)")

    def test_interrupted_run_is_said(self):
        run = self.run_copy("two", "cut")
        log = os.path.join(run, "study_0", apftest.BLOBS, "trial_2", "log.jsonl")
        with open(log, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        # The second unit's trial_end and the run_end are gone, as if the
        # runner had been killed before writing them.
        self.assertEqual(json.loads(lines[-1])["event"], "run_end")
        self.assertEqual(json.loads(lines[-2])["event"], "trial_end")
        with open(log, "wb") as f:
            f.write(b"\n".join(lines[:-2]) + b"\n")
        want = (f"nadamw: incomplete: the log ends without run_end (the run "
                f"was interrupted or is still running); 1 unit did not end: "
                f"study_0/{apftest.BLOBS}/trial_2")
        r, j = self.json_of(run)
        self.assertEqual(j["warnings"], [want])
        run_j = j["submissions"][0]["run"]
        self.assertFalse(run_j["complete"])
        self.assertEqual(run_j["interrupted"], [f"study_0/{apftest.BLOBS}/trial_2"])
        s = self.fails(2, "score", run, "--strict")
        self.assertEqual(s.err, f"apf: score: {want}\n")
        # A torn last line says so too.
        with open(log, "ab") as f:
            f.write(b'{"seq":')
        r, j = self.json_of(run)
        self.assertIn("nadamw: incomplete: the log ends in a torn line",
                      j["warnings"][0])

    def test_failed_unit_is_named_and_its_inf_marked(self):
        good = self.run_copy("two")
        bad = self.run_copy("failed")
        r, j = self.json_of(good, bad)
        want = (f"returns_error: 1 unit failed: study_0/{apftest.BLOBS}/"
                f"trial_1 (error)")
        self.assertIn(want, j["warnings"])
        subs = {s["name"]: s for s in j["submissions"]}
        self.assertEqual(subs["returns_error"]["stopped_early"], [apftest.BLOBS])
        self.assertEqual(subs["returns_error"]["run"]["failed"],
                         [{"unit": f"study_0/{apftest.BLOBS}/trial_1",
                           "reason": "error", "fault": None}])
        self.assertEqual(subs["nadamw"]["stopped_early"], [])
        t = self.ok("score", good, bad)
        line = next(l for l in t.out.splitlines() if " returns_error " in l)
        self.assertTrue(line.endswith(" inf!"), line)
        self.assertIn("\n!: a unit behind it stopped early (failed, the run "
                      "was interrupted, or it never ran)\n   before meeting its "
                      "target", t.out)
        self.fails(2, "score", good, bad, "--strict")

    def test_edited_csv_ranks_without_verify_and_is_excluded_with_it(self):
        good = self.run_copy("two")
        edited = self.run_copy("two", "edited")
        csv_path = os.path.join(edited, "study_0", apftest.BLOBS, "trial_1",
                                "eval_measurements.csv")
        with open(csv_path, newline="") as f:
            rows = list(csv.reader(f))
        head = rows[0]
        # The row that met the target claims a tenth of its time.
        for col in ("score", "accumulated_submission_time"):
            i = head.index(col)
            rows[-1][i] = f"{float(rows[-1][i]) / 10:.9f}"
        with open(csv_path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        r, j = self.json_of(good + "=honest", edited + "=edited")
        self.assertEqual(j["submissions"][0]["name"], "edited")
        self.assertEqual(j["submissions"][0]["score"], 1.0)

        r, j = self.json_of(good + "=honest", edited + "=edited", "--verify")
        self.assertEqual([s["name"] for s in j["submissions"]], ["honest"])
        self.assertEqual(j["submissions"][0]["verified"], "yes")
        self.assertEqual(len(j["excluded"]), 1)
        x = j["excluded"][0]
        self.assertEqual(x["name"], "edited")
        self.assertTrue(x["reason"].startswith("check 3 (timing): "), x)
        self.assertIn("eval_measurements.csv", x["reason"])
        self.assertEqual(j["warnings"], [f"edited: not verified: {x['reason']}"])
        t = self.ok("score", good + "=honest", edited + "=edited", "--verify")
        self.assertIn(f"\nnot ranked (1):\n  edited: not verified: "
                      f"{x['reason']}\n", t.out)
        self.assertIn("; 1 failed, not ranked\n", t.out)
        s = self.fails(1, "score", good + "=honest", edited + "=edited",
                       "--verify", "--strict")
        self.assertEqual(s.err, f"apf: score: edited: not verified: "
                         f"{x['reason']}\n")
        self.assertEqual(s.out, "")

    def test_runs_on_different_thread_counts_are_warned_about(self):
        two, one = self.run_copy("two"), self.run_copy("one")
        want = f"runs differ in threads (2t: 2; 1t: 1): {HW_NOTE}"
        r, j = self.json_of(two + "=2t", one + "=1t")
        self.assertEqual(j["warnings"], [want])
        t = self.ok("score", two + "=2t", one + "=1t")
        self.assertNotIn("\nhardware:", t.out)
        self.assertIn(f"  {want}\n", t.out)
        s = self.fails(2, "score", two + "=2t", one + "=1t", "--strict")
        self.assertEqual(s.err, f"apf: score: {want}\n")

    def test_labels_score_two_runs_of_one_submission(self):
        a, b = self.run_copy("two", "a"), self.run_copy("two", "b")
        s = self.fails(2, "score", a, b)
        self.assertEqual(s.err, f"apf: {b}: submission 'nadamw' is also {a}; "
                         "names must be unique (label them: DIR=LABEL)\n")
        r, j = self.json_of(a + "=first", b + "=second")
        self.assertEqual(sorted(x["name"] for x in j["submissions"]),
                         ["first", "second"])
        self.assertEqual({x["label"] for x in j["submissions"]},
                         {"first", "second"})
        s = self.fails(2, "score", a + "=same", b + "=same")
        self.assertEqual(s.err, f"apf: {b}: label 'same' is also {a}'s; "
                         "labels must be unique\n")
        # '=' in a directory's name: the whole is the path when it exists,
        # and only the last '=' splits off a label.
        eq = self.run_copy("two", "x=y")
        r, j = self.json_of(eq)
        self.assertEqual(j["submissions"][0]["name"], "nadamw")
        r, j = self.json_of(eq + "=lab")
        self.assertEqual(j["submissions"][0]["name"], "lab")
        self.assertEqual(j["submissions"][0]["path"], eq)
        s = self.fails(2, "score", self.path("nope=lab"))
        self.assertIn("nope=lab: cannot read", s.err)

    def test_help_names_the_new_options(self):
        r = self.ok("score", "--help")
        text = " ".join(r.out.split())
        self.assertIn("RUN_DIR[=LABEL]", text)
        self.assertIn("--verify", text)
        self.assertIn("DIR=LABEL scores one submission under LABEL", text)
        self.assertIn("split at its last '=' only when it is not a directory "
                      "itself", text)


class VerifyAlgoPerfLogs(unittest.TestCase):
    def test_algoperf_logs_are_said_unverifiable_once(self):
        logs = os.path.join(FIXTURES, "logs")
        targets = os.path.join(FIXTURES, "targets_v05.json")
        p = apf("score", logs, "--targets", targets, "--verify", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        once = ("2 AlgoPerf log directories (no run.json, log or signature) "
                "cannot be verified; scored as logged")
        self.assertEqual(r["warnings"].count(once), 1)
        self.assertEqual(p.stderr.count("cannot be verified"), 1)
        self.assertEqual({s["verified"] for s in r["submissions"]},
                         {"not verifiable"})
        t = apf("score", logs, "--targets", targets, "--verify")
        self.assertIn("verified: 0 apf runs (apf verify's checks, no "
                      "re-evaluation or replay); 2 AlgoPerf log directories, "
                      "not verifiable\n", t.stdout)


if __name__ == "__main__":
    unittest.main()


class TargetPastTheBudget(ApfCase):
    """A unit's last eval comes at or past its budget (the unit trains on
    to its next due eval, then stops for `budget`). AlgoPerf's runner makes
    no eval once the budget is spent, so a target met there must count for
    nothing: apf score skips that row and says so, apf status and apf run
    give no time to target for it, and the AlgoPerf export leaves the row
    out so that AlgoPerf's own scorer agrees. The log keeps the eval (what
    happened), and verify passes it as it is."""

    def setUp(self):
        super().setUp()
        from runfake import FakeRun, UnitScript
        self.late = "study_0/tiny/trial_1"
        # study_0: trial_1 meets the target only at its budget-ending
        # eval, the others never; study_1: trial_2 meets both targets at
        # eval 2 and stops there.
        self.run = FakeRun(self, scripts={
            self.late: UnitScript(val_at="budget"),
            "study_1/tiny/trial_2": UnitScript(val_at=2, test_at=2),
        }).write(self.path("run"))

    def log_of(self, unit):
        return [self.run.records[i] for i in self.run.unit_records(unit)]

    def test_the_late_target_is_logged_and_verifies(self):
        recs = self.log_of(self.late)
        start = next(r for r in recs if r["event"] == "trial_start")
        end = next(r for r in recs if r["event"] == "trial_end")
        evals = [r for r in recs if r["event"] == "eval"]
        self.assertEqual(end["reason"], "budget")
        # Only the last eval meets it, and it is past the budget.
        self.assertEqual([e["validation_target_met"] for e in evals],
                         [False] * (len(evals) - 1) + [True])
        self.assertGreaterEqual(evals[-1]["accumulated_submission_ns"],
                                start["budget_ns"])
        self.assertEqual(end["time_to_target_ns"],
                         evals[-1]["accumulated_submission_ns"])
        self.ok("verify", self.run.path)

    def test_score_counts_no_target_met_past_the_budget(self):
        r = self.ok("score", self.run.path, "--json")
        j = json.loads(r.out)
        sub = j["submissions"][0]
        # study_0 missed, study_1 met: the median of the two is a miss.
        self.assertEqual(sub["times"]["tiny"], "inf")
        late = [w for w in j["warnings"] if "past the budget" in w]
        self.assertEqual(len(late), 1, j["warnings"])
        self.assertIn("tiny: 1 trial met the validation target only at the "
                      "eval at or past the budget (the first, study_0 "
                      "trial_1", late[0])
        self.assertIn("not counted", late[0])
        text = self.ok("score", self.run.path).out
        self.assertIn("not counted, as AlgoPerf makes no eval once the "
                      "budget is spent", text)

    def test_an_operator_who_widens_the_budget_fails_verify(self):
        # The runner key in hand: trial_start's budget raised past the
        # late eval, the log re-chained and its head re-signed, so that
        # the scorer would count the late target. verify recomputes the
        # budget from the workload and the rules, and score --verify
        # ranks nothing it refused.
        i = self.run.find("trial_start", self.late)[0]
        last = self.run.records[self.run.kept_evals(self.late)[-1]]
        self.run.records[i]["budget_ns"] = last["accumulated_submission_ns"] + 1
        self.run.save()
        r = self.apf("verify", self.run.path)
        self.assertNotEqual(r.rc, 0, r.out)
        self.assertIn("budget_ns is", r.out + r.err)
        # Unverified, the scorer takes the log's word (and says the run
        # is unverified): only verify stands between it and the score.
        j = json.loads(self.ok("score", self.run.path, "--json").out)
        self.assertIsInstance(j["submissions"][0]["times"]["tiny"], float)
        self.assertIn("verified: no", self.ok("score", self.run.path).out)
        v = self.apf("score", self.run.path, "--verify", "--json")
        self.assertNotEqual(v.rc, 0, v.out)
        self.assertIn("1 failed verification", v.err)
        self.assertIn("budget_ns is", v.err)

    def test_a_target_met_before_the_budget_still_counts(self):
        # The control: the same unit meeting it one eval earlier counts.
        from runfake import FakeRun, UnitScript
        recs = self.log_of(self.late)
        n = sum(r["event"] == "eval" for r in recs)
        run = FakeRun(self, scripts={
            self.late: UnitScript(val_at=n - 1),
            "study_1/tiny/trial_2": UnitScript(val_at=2),
        }).write(self.path("early"))
        j = json.loads(self.ok("score", run.path, "--json").out)
        self.assertIsInstance(j["submissions"][0]["times"]["tiny"], float)
        self.assertFalse([w for w in j["warnings"] if "past the budget" in w])

    def test_status_gives_no_time_to_target_past_the_budget(self):
        st = json.loads(self.ok("status", self.run.path, "--json").out)
        units = {u["unit"]: u for u in st["units"]}
        self.assertNotIn("time_to_target_s", units[self.late])
        self.assertIn("time_to_target_s", units["study_1/tiny/trial_2"])

    def test_the_algoperf_export_leaves_the_late_row_out(self):
        out = self.path("algoperf")
        r = self.ok("score", self.run.path, "--verify", "--rules",
                    "algoperf-0.6", "--export-algoperf", out, "--json")
        scored = json.loads(r.out)["submissions"][0]
        name = scored["name"] if "name" in scored else "fakesub"
        csv_of = os.path.join("study_0", "tiny", "trial_1",
                              "eval_measurements.csv")
        with open(os.path.join(self.run.path, csv_of)) as f:
            ran = f.read().splitlines()
        with open(os.path.join(out, "submissions", name, csv_of)) as f:
            exported = f.read().splitlines()
        # The same bytes but for the last row, the eval past the budget
        # (every unit that stopped for its budget loses that row; one that
        # stopped for its targets keeps all of them).
        self.assertEqual(exported, ran[:-1])
        other = os.path.join("study_1", "tiny", "trial_2",
                             "eval_measurements.csv")
        with open(os.path.join(self.run.path, other), "rb") as f, \
                open(os.path.join(out, "submissions", name, other),
                     "rb") as g:
            self.assertEqual(f.read(), g.read())
        # Scored as AlgoPerf's logs, without budgets: the same times.
        again = self.ok("score", os.path.join(out, "submissions"),
                        "--targets", os.path.join(out,
                                                  "workload_targets.json"),
                        "--json")
        self.assertEqual(json.loads(again.out)["submissions"][0]["times"],
                         scored["times"])
