"""apf score --export-algoperf end to end: what apf scored, written in the
layout AlgoPerf's own scorer reads (mlcommons/submissions_algorithms,
scoring/score_submissions.py), so that scorer gives apf's scores.

On every clone: the published v0.5 logs (tests/data/algoperf_v05) and
hand-made apf runs exported and scored again from the export alone (apf
score reads AlgoPerf's layout; it reproduces the published leaderboards
from it), every file the reference scorer walks checked against what it
needs (each entry of the submission directory a directory of study
directories only: an apf run's entry.apf stopped it), and the export's
refusals from the attacker's side: a run.json naming its submission
"../x", a CSV changed after scoring, apf's own rules, a directory in the
way.

AlgoPerf's scorer itself cannot be committed here (code from elsewhere),
so the check that runs it is tests/e2e/algoperf_scorer.py, run by hand
with a checkout of mlcommons/submissions_algorithms (not part of make
test, which would only skip it).
"""
import json
import os
import shutil
import tempfile
import unittest

from test_score import apf, evals, unpack_v05, write


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def scores_of(proc):
    assert proc.returncode == 0, proc.stderr
    j = json.loads(proc.stdout)
    return {s["name"]: s for s in j["submissions"]}, j


def check_algoperf_layout(test, export):
    """What AlgoPerf's scorer walks: every entry of submissions/ a
    directory, every entry of those a study directory of workload
    directories, every trial directory's CSV there."""
    subs = os.path.join(export, "submissions")
    trials = 0
    for s in os.listdir(subs):
        sdir = os.path.join(subs, s)
        test.assertTrue(os.path.isdir(sdir), sdir)
        for study in os.listdir(sdir):
            test.assertRegex(study, r"^study_\d+$")
            stdir = os.path.join(sdir, study)
            test.assertTrue(os.path.isdir(stdir), stdir)
            for w in os.listdir(stdir):
                wdir = os.path.join(stdir, w)
                test.assertTrue(os.path.isdir(wdir), wdir)
                for t in os.listdir(wdir):
                    test.assertRegex(t, r"^trial_\d+$")
                    test.assertTrue(os.path.isfile(os.path.join(
                        wdir, t, "eval_measurements.csv")))
                    trials += 1
    return trials


class V05Logs(unittest.TestCase):
    """The published v0.5 external-tuning logs, exported under the v0.5
    rules with AlgoPerf's own targets and held-out list."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apf-export-")
        unpack_v05(cls.tmp)
        cls.logs = os.path.join(cls.tmp, "external_tuning")
        cls.targets = os.path.join(cls.tmp, "scoring",
                                   "workload_targets_v05.json")
        cls.heldout = os.path.join(cls.tmp, "scoring",
                                   "held_out_workloads_algoperf_v05.json")
        cls.export = os.path.join(cls.tmp, "export")
        cls.proc = apf("score", cls.logs, "--rules", "algoperf-0.5",
                       "--targets", cls.targets, "--heldout", cls.heldout,
                       "--json", "--export-algoperf", cls.export)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_export_scores_as_the_logs_did(self):
        before, j = scores_of(self.proc)
        again = apf("score", os.path.join(self.export, "submissions"),
                    "--targets", os.path.join(self.export,
                                              "workload_targets.json"),
                    "--json")
        after, j2 = scores_of(again)
        self.assertEqual(j2["rules"], "algoperf-0.5")  # the file's version
        self.assertEqual(set(before), set(after))
        for name in before:
            self.assertEqual(before[name]["score"], after[name]["score"],
                             name)
            self.assertEqual(before[name]["times"], after[name]["times"],
                             name)
        self.assertEqual(j["heldout_variants"], j2["heldout_variants"])
        self.assertIn(f"apf: score: wrote {self.export}; AlgoPerf's scorer",
                      self.proc.stderr)

    def test_the_layout_is_what_algoperfs_scorer_walks(self):
        n = check_algoperf_layout(self, self.export)
        logged = sum(1 for dp, _, fs in os.walk(self.logs)
                     if "eval_measurements.csv" in fs)
        # Every trial scored; the logs' workloads beyond the base and
        # held-out ones (other variants) are not.
        self.assertGreater(n, 0)
        self.assertLessEqual(n, logged)

    def test_csvs_are_copied_byte_for_byte(self):
        sub = os.path.join(self.export, "submissions")
        name = sorted(os.listdir(sub))[0]
        for dp, _, fs in os.walk(os.path.join(sub, name)):
            if "eval_measurements.csv" in fs:
                rel = os.path.relpath(dp, sub)
                self.assertEqual(
                    read(os.path.join(dp, "eval_measurements.csv"), "rb"),
                    read(os.path.join(self.logs, rel,
                                      "eval_measurements.csv"), "rb"))

    def test_targets_file_names_what_was_scored(self):
        t = json.loads(read(os.path.join(self.export,
                                         "workload_targets.json")))
        given = json.loads(read(self.targets))
        _, j = scores_of(self.proc)
        self.assertEqual(t["benchmark_version"], "0.5")
        self.assertEqual(t["base_workloads"], j["base_workloads"])
        self.assertEqual(sorted(t["held_out_workloads"]),
                         sorted(v["variant"] for v in j["heldout_variants"]))
        for w, spec in t["workloads"].items():
            self.assertEqual(spec, given["workloads"][w], w)

    def test_provenance_holds_apfs_result_and_the_command(self):
        p = json.loads(read(os.path.join(self.export, "apf_export.json")))
        _, j = scores_of(self.proc)
        self.assertEqual(p["format"], "apf-algoperf-export/1")
        self.assertEqual(p["apf_score"]["submissions"], j["submissions"])
        self.assertEqual(
            p["algoperf_command"],
            "python3 -m scoring.score_submissions --submission_directory "
            f"{self.export}/submissions --workload_targets "
            f"{self.export}/workload_targets.json "
            "--compute_performance_profiles")


WORKLOAD_INI = """[workload]
name = tiny_cls
model = mlp
loss = cross_entropy
metric = accuracy
direction = max
validation_target = 0.8
test_target = 0.78
max_steps = 1000
step_hint = 400
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

# A click model whose target metric, log_loss, AlgoPerf's scorer has no
# direction for: exported as its loss.
CLICKS_INI = """[workload]
name = tiny_clicks
model = dlrm
loss = sigmoid_xent
metric = log_loss
metrics = log_loss, auc
direction = min
validation_target = 0.4
test_target = 0.41
max_steps = 500
[dataset]
name = tiny
path = data
[model]
hidden = 8
[budget.cpu]
max_runtime_s = 60
eval_period_s = 1
"""

def click_evals(rows, loss=None):
    """rows: (score, validation log loss); loss: validation/loss's values
    when they are not the log loss."""
    out = ("accumulated_eval_time,accumulated_logging_time,"
           "accumulated_submission_time,global_step,preemption_count,score,"
           "total_duration,validation/auc,validation/log_loss,"
           "validation/loss,validation/num_examples\n")
    for i, (t, ll) in enumerate(rows):
        l = ll if loss is None else loss[i]
        out += f"1.0,0.1,{t},{i + 1},0,{t},{t + 2},0.7,{ll},{l},100\n"
    return out


class ApfRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-export-")
        wl = os.path.join(self.tmp, "workloads")
        self.env = dict(os.environ, APF_WORKLOADS_DIR=wl)
        write(os.path.join(wl, "tiny_cls", "workload.ini"), WORKLOAD_INI)
        write(os.path.join(wl, "tiny_clicks", "workload.ini"), CLICKS_INI)
        self.runs = os.path.join(self.tmp, "runs")
        a = os.path.join(self.runs, "run-a")
        write(os.path.join(a, "run.json"),
              json.dumps({"submission": "adamw", "plan": {"studies": 2}}))
        write(os.path.join(a, "entry.apf"), "not a directory")
        for k, rows in ((0, [(1.0, 0.5), (9.0, 0.85)]),
                        (1, [(2.0, 0.6), (8.0, 0.82)])):
            write(os.path.join(a, f"study_{k}/tiny_cls/trial_1/"
                               "eval_measurements.csv"), evals(rows))
        write(os.path.join(a, "study_0/tiny_cls/trial_2/"
                           "eval_measurements.csv"),
              evals([(1.0, 0.5), (2.0, 0.6), (6.0, 0.81)]))
        write(os.path.join(a, "study_0/tiny_cls/trial_2/hparams.json"),
              '{"learning_rate": 0.001}\n')
        write(os.path.join(a, "study_0/tiny_cls_wide/trial_1/"
                           "eval_measurements.csv"), evals([(3.0, 0.72)]))
        write(os.path.join(a, "study_0/tiny_clicks/trial_1/"
                           "eval_measurements.csv"),
              click_evals([(1.0, 0.6), (5.0, 0.39)]))
        b = os.path.join(self.runs, "sgd")
        write(os.path.join(b, "run.json"), "{}")
        write(os.path.join(b, "study_0/tiny_cls/trial_1/"
                           "eval_measurements.csv"), evals([(4.0, 0.9)]))
        write(os.path.join(b, "study_0/tiny_clicks/trial_1/"
                           "eval_measurements.csv"),
              click_evals([(2.0, 0.45), (7.0, 0.38)]))
        self.export = os.path.join(self.tmp, "export")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def score(self, *args):
        return apf("score", self.runs, "--rules", "algoperf-0.6", "--json",
                   *args, env=self.env)

    def test_apf_runs_export_and_score_the_same_again(self):
        p = self.score("--export-algoperf", self.export)
        before, j = scores_of(p)
        check_algoperf_layout(self, self.export)
        sub = os.path.join(self.export, "submissions")
        self.assertEqual(sorted(os.listdir(sub)), ["adamw", "sgd"])
        # Nothing of the run but its logs: no entry.apf, no run.json.
        self.assertEqual(sorted(os.listdir(os.path.join(sub, "adamw"))),
                         ["study_0", "study_1"])
        again = apf("score", sub, "--targets",
                    os.path.join(self.export, "workload_targets.json"),
                    "--json", env=self.env)
        after, j2 = scores_of(again)
        self.assertEqual(j2["rules"], "algoperf-0.6")
        for name in before:
            self.assertEqual(before[name]["score"], after[name]["score"])
            self.assertEqual(before[name]["times"], after[name]["times"])
        # tiny_cls_wide was scored as a held-out variant (AlgoPerf's rule
        # without a list); the export lists it so.
        t = json.loads(read(os.path.join(self.export,
                                         "workload_targets.json")))
        self.assertEqual(t["base_workloads"], ["tiny_clicks", "tiny_cls"])
        self.assertEqual(t["held_out_workloads"], ["tiny_cls_wide"])
        self.assertEqual(t["workloads"]["tiny_cls"],
                         {"target_metric_name": "accuracy",
                          "validation_target_value": 0.8,
                          "step_hint": 400})
        # log_loss, which AlgoPerf's scorer knows no direction for, by the
        # loss that holds it; the step hint defaults to max_steps.
        self.assertEqual(t["workloads"]["tiny_clicks"],
                         {"target_metric_name": "loss",
                          "validation_target_value": 0.4,
                          "step_hint": 500})

    def test_each_trial_has_what_algoperfs_runner_writes(self):
        self.score("--export-algoperf", self.export)
        trial = os.path.join(self.export, "submissions", "adamw", "study_0",
                             "tiny_cls", "trial_2")
        self.assertEqual(sorted(os.listdir(trial)),
                         ["eval_measurements.csv", "flags_0.json",
                          "hparams.json", "meta_data_0.json"])
        self.assertEqual(read(os.path.join(trial, "hparams.json")),
                         '{"learning_rate": 0.001}\n')
        flags = json.loads(read(os.path.join(trial, "flags_0.json")))
        self.assertEqual(flags, {"framework": "apf", "workload": "tiny_cls",
                                 "tuning_ruleset": "external",
                                 "experiment_name": "adamw",
                                 "num_tuning_trials": 2})
        meta = json.loads(read(os.path.join(trial, "meta_data_0.json")))
        self.assertEqual(meta["apf.unit"], "study_0/tiny_cls/trial_2")
        self.assertIs(meta["apf.verified"], False)
        self.assertEqual(meta["workload.step_hint"], 400)

    def test_apfs_own_rules_cannot_be_exported(self):
        p = apf("score", self.runs, "--export-algoperf", self.export,
                env=self.env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.splitlines(), [
            "apf: --export-algoperf: scored by the apf rules (each study's "
            "fastest trial); AlgoPerf's scorer takes the trial that met the "
            "target at the earliest eval: score with --rules algoperf-0.6 "
            "(or algoperf-0.5) to export"])
        self.assertEqual(p.stdout, "")
        self.assertFalse(os.path.exists(self.export))

    def test_a_directory_in_the_way_is_left_alone(self):
        write(os.path.join(self.export, "keep"), "mine")
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"apf: {self.export}: exists and is not an empty "
                      "directory; remove it or export elsewhere", p.stderr)
        self.assertEqual(os.listdir(self.export), ["keep"])
        # An empty directory is taken.
        shutil.rmtree(self.export)
        os.mkdir(self.export)
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("submissions", os.listdir(self.export))

    def test_a_submission_name_cannot_climb_out(self):
        write(os.path.join(self.runs, "sgd", "run.json"),
              json.dumps({"submission": "../../escaped"}))
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("apf: --export-algoperf: submission name "
                      "'../../escaped' cannot name a directory of the export",
                      p.stderr)
        self.assertIn("score it as DIR=LABEL", p.stderr)
        self.assertFalse(os.path.exists(self.export))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "escaped")))
        leftovers = [n for n in os.listdir(self.tmp) if ".tmp-" in n]
        self.assertEqual(leftovers, [])
        # Labelled, it exports.
        p = apf("score", os.path.join(self.runs, "run-a"),
                os.path.join(self.runs, "sgd") + "=sgd", "--rules",
                "algoperf-0.6", "--export-algoperf", self.export,
                env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(self.export,
                                                        "submissions"))),
                         ["adamw", "sgd"])

    def test_a_csv_that_links_elsewhere_is_not_copied(self):
        # The export copies only files of the run itself: a CSV that is a
        # symlink (to anything on the operator's machine) is refused, not
        # followed into the export.
        outside = os.path.join(self.tmp, "outside.csv")
        write(outside, evals([(4.0, 0.9)]))
        csv_path = os.path.join(self.runs, "sgd", "study_0/tiny_cls/trial_1/"
                                "eval_measurements.csv")
        os.remove(csv_path)
        os.symlink(outside, csv_path)
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.splitlines()[-1],
                         f"apf: {csv_path}: a symbolic link, not a regular "
                         "file; not followed")
        self.assertFalse(os.path.exists(self.export))

    def test_a_refused_trial_stops_the_export(self):
        write(os.path.join(self.runs, "sgd", "study_0/tiny_cls/trial_1/"
                           "eval_measurements.csv"),
              evals([(4.0, 0.9)]).replace("0.9,0.9,0.9", "0.9,1.5,0.9"))
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("refused when scored, so AlgoPerf's scorer would read "
                      "it otherwise", p.stderr)
        self.assertFalse(os.path.exists(self.export))

    def test_a_loss_that_is_not_the_metric_stops_the_export(self):
        write(os.path.join(self.runs, "sgd", "study_0/tiny_clicks/trial_1/"
                           "eval_measurements.csv"),
              click_evals([(2.0, 0.45), (7.0, 0.38)], loss=[0.45, 0.5]))
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertRegex(p.stderr, r"eval_measurements\.csv: line 3: "
                         r"validation/loss is not validation/log_loss")
        self.assertFalse(os.path.exists(self.export))

    def test_ties_at_the_earliest_eval_are_said(self):
        # Study 1 of adamw: trials 1 and 2 both meet the target at eval 2,
        # at 8.0 and 7.0 s.
        write(os.path.join(self.runs, "run-a", "study_1/tiny_cls/trial_2/"
                           "eval_measurements.csv"),
              evals([(2.0, 0.6), (7.0, 0.9)]))
        p = self.score("--export-algoperf", self.export)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("apf: score: warning: 1 study in which trials first met "
                      "the target at the same eval at different times (adamw: "
                      "study 1 of tiny_cls at eval 2): apf counts the fastest, "
                      "AlgoPerf's scorer whichever its directory listing "
                      "returns first, so its times there may differ "
                      "(apf_export.json lists them all)\n", p.stderr)
        x = json.loads(read(os.path.join(self.export, "apf_export.json")))
        self.assertEqual(len(x["export_warnings"]), 1)
        self.assertEqual(x["ties"], [{"submission": "adamw",
                                      "workload": "tiny_cls", "study": 1,
                                      "eval": 2, "trials": [1, 2],
                                      "times": [8.0, 7.0]}])

    def test_a_workload_without_step_hint_in_a_targets_file(self):
        targets = os.path.join(self.tmp, "targets.json")
        write(targets, json.dumps({"workloads": {
            "tiny_cls": {"target_metric_name": "accuracy",
                         "validation_target_value": 0.8},
            "tiny_cls_wide": {"target_metric_name": "accuracy",
                              "validation_target_value": 0.7},
            "tiny_clicks": {"target_metric_name": "loss",
                            "validation_target_value": 0.4}}}))
        p = apf("score", self.runs, "--rules", "algoperf-0.6", "--targets",
                targets, "--export-algoperf", self.export, env=self.env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("give no step_hint, which AlgoPerf's targets file "
                      "needs", p.stderr)


if __name__ == "__main__":
    unittest.main()
