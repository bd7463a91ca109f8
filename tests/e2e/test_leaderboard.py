"""workloads/leaderboard.py, the leaderboard campaign, with the real apf on
the test workloads: studies run in order and resume, a campaign refuses a
machine of another class and an entry that changed since its run began,
publish refuses an unfinished campaign, verifies and scores a finished one
and its records score again to the same numbers without the run
directories; compare's tau and findings give the values worked out by
hand."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from apftest import APF, ROOT, TEST_WORKLOADS

PY = sys.executable
SCRIPT = os.path.join(ROOT, "workloads", "leaderboard.py")


def load():
    sys.path.insert(0, os.path.join(ROOT, "workloads"))
    spec = importlib.util.spec_from_file_location("leaderboard", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def result(times, scores=None):
    """A scoring as apf score --json gives it: {name: {workload: s}}."""
    ws = sorted({w for t in times.values() for w in t})
    return {"base_workloads": ws,
            "submissions": [{"name": n, "score": (scores or {}).get(n, 0.0),
                             "times": {w: t.get(w, "inf") for w in ws}}
                            for n, t in times.items()]}


class Pieces(unittest.TestCase):
    def setUp(self):
        self.lb = load()

    def test_groups_put_ties_together_best_first(self):
        self.assertEqual(self.lb.groups_by({"a": 0.5, "b": 0.7, "c": 0.5}),
                         [["b"], ["a", "c"]])

    def test_findings_count_gaps_over_20_percent_and_rank_misses_last(self):
        f = self.lb.findings(result({
            "a": {"w1": 10.0, "w2": 30.0},
            "b": {"w1": 11.0, "w2": 20.0},
            "c": {"w1": 13.0, "w2": "inf"}}))
        w1 = f["per_workload"]["w1"]
        # 11/10 and 13/11 are within 20%, 13/10 is not.
        self.assertEqual((w1["met"], w1["pairs"], w1["pairs_over_20pct"]), (3, 3, 1))
        self.assertEqual(w1["fastest"], ("a", 10.0))
        self.assertEqual(w1["slowest"], ("c", 13.0))
        w2 = f["per_workload"]["w2"]
        self.assertEqual((w2["met"], w2["pairs"], w2["pairs_over_20pct"]), (2, 1, 1))
        self.assertEqual(f["rankings"]["w1"], [["a"], ["b"], ["c"]])
        self.assertEqual(f["rankings"]["w2"], [["b"], ["a"], ["c"]])
        # One swap of three pairs: (2 - 1) / 3.
        self.assertAlmostEqual(f["tau_between_workloads"]["w1 vs w2"], 1 / 3)

    def test_readme_blocks_are_replaced_between_their_markers_only(self):
        tmp = tempfile.mkdtemp(prefix="apf-lb-")
        try:
            path = os.path.join(tmp, "README.md")
            with open(path, "w") as f:
                f.write("# t\n<!-- BEGIN SELF -->\nold\n<!-- END SELF -->\nkept\n")
            self.lb.replace_block(path, "SELF", "new 1\nnew 2\n")
            self.assertEqual(open(path).read(), "# t\n<!-- BEGIN SELF -->\nnew 1\nnew 2\n"
                                                "<!-- END SELF -->\nkept\n")
            with self.assertRaises(SystemExit) as e:
                self.lb.replace_block(path, "EXTERNAL", "x")
            self.assertEqual(str(e.exception), f"apf: leaderboard: {path}: no <!-- BEGIN "
                                               "EXTERNAL --> ... <!-- END EXTERNAL --> block")
        finally:
            shutil.rmtree(tmp)

    def test_the_seal_blanks_only_the_zeros_of_metrics_the_log_lacks(self):
        # An older runner wrote 0 for a metric its eval could not log (not
        # finite); the seal makes exactly those cells empty and leaves a
        # unit whose CSV does not pair with its log, or says anything but
        # 0 there, for verification to judge.
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        head = "global_step,score,v/loss,v/perplexity\n"

        def unit(name, csv, metrics):
            u = os.path.join(d, name)
            os.makedirs(u)
            with open(os.path.join(u, "log.jsonl"), "w") as f:
                f.write(json.dumps({"event": "run_start"}) + "\n")
                for step, m in metrics:
                    f.write(json.dumps({"event": "eval", "global_step": step,
                                        "metrics": m}) + "\n")
            with open(os.path.join(u, "eval_measurements.csv"), "w") as f:
                f.write(head + csv)
            return os.path.join(u, "eval_measurements.csv")

        good = unit("a", "1,0.5,5.5,244.7\n9,1.5,2e+09,0\n",
                    [(1, {"v/loss": 5.5, "v/perplexity": 244.7}),
                     (9, {"v/loss": 2e9})])
        other = unit("b", "9,1.5,2e+09,7\n", [(9, {"v/loss": 2e9})])
        short = unit("c", "9,1.5,2e+09,0\n", [])
        self.assertEqual(self.lb.blank_unheld_cells(d), 1)
        with open(good) as f:
            self.assertEqual(f.read(), head + "1,0.5,5.5,244.7\n9,1.5,2e+09,\n")
        for path, body in ((other, "9,1.5,2e+09,7\n"), (short, "9,1.5,2e+09,0\n")):
            with open(path) as f:
                self.assertEqual(f.read(), head + body)
        self.assertEqual(self.lb.blank_unheld_cells(d), 0)

    def test_compare_computes_tau_over_the_algorithms_both_have(self):
        tmp = tempfile.mkdtemp(prefix="apf-lb-")
        try:
            os.makedirs(os.path.join(tmp, "self"))
            with open(os.path.join(tmp, "self", "scores.json"), "w") as f:
                json.dump(result({"a": {"w": 1.0}, "b": {"w": 2.0}, "c": {"w": 3.0},
                                  "mine": {"w": 4.0}},
                                 {"a": 0.9, "b": 0.5, "c": 0.7, "mine": 0.1}), f)
            with open(os.path.join(tmp, "algoperf.json"), "w") as f:
                json.dump({"comparisons": [
                    {"name": "x", "ruleset": "self", "source": "s",
                     "scores": {"a": 0.4, "b": 0.3, "c": 0.1, "theirs": 0.9}},
                    {"name": "y", "ruleset": "external", "source": "s",
                     "scores": {"a": 1.0}}]}, f)
            p = subprocess.run([PY, SCRIPT, "compare", "--dest", tmp],
                               capture_output=True, text=True, env=dict(os.environ, APF_BIN=APF))
            self.assertEqual(p.returncode, 0, p.stderr)
            c = json.load(open(os.path.join(tmp, "comparison.json")))
            x = c["comparisons"][0]
            self.assertEqual(x["algorithms"], ["a", "b", "c"])
            # apf a > c > b, AlgoPerf a > b > c: one pair of three swapped.
            self.assertAlmostEqual(x["kendall_tau_b"], 1 / 3)
            self.assertIn("tau-b = +0.333 over 3 algorithms (a, b, c)", p.stdout)
            self.assertIn("y: no external scores published yet", p.stdout)
        finally:
            shutil.rmtree(tmp)


class Campaign(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-lb-")
        self.wl = os.path.join(self.tmp, "workloads")
        shutil.copytree(TEST_WORKLOADS, self.wl)
        # The workloads name their data as ../../datasets/<name>.
        shutil.copytree(os.path.join(ROOT, "tests", "data", "datasets"),
                        os.path.join(self.tmp, "datasets"))
        self.out = os.path.join(self.tmp, "runs")
        self.env = dict(os.environ, APF_BIN=APF, APF_WORKLOADS_DIR=self.wl,
                        TMPDIR=self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def lb(self, *args):
        return subprocess.run([PY, SCRIPT, *args, "--out", self.out], capture_output=True,
                              text=True, env=self.env, timeout=900)

    def run_(self, *args):
        return self.lb("run", "--ruleset", "self", "--submissions", "nadamw,adamw",
                       "--workloads", "blobs_mlp", "--toolchain", "here", "--replay-top", "1",
                       *args)

    def lb_mod(self):
        return load()

    def units(self, name):
        p = subprocess.run([APF, "status", os.path.join(self.out, "self", name + ".run"),
                            "--json"], capture_output=True, text=True, env=self.env)
        return {u["unit"]: u["state"] for u in json.loads(p.stdout)["units"]}

    def test_heldout_pass_runs_the_drawn_variants_apart_and_scores_them(self):
        """After the base runs, the held-out pass draws one variant per
        workload from every entry of the ruleset, runs only the variants'
        units (the same plan and hyperparameters) in run directories of
        their own, and publish verifies them and scores the board's
        records with them under the held-out rules."""
        p = self.run_("--studies", "0,1,2")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        p = self.run_("--heldout")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        hd = os.path.join(self.out, "self-heldout")
        draw = json.load(open(os.path.join(hd, "draw.json")))
        self.assertEqual([(d["base"], d["variant"]) for d in draw["draws"]],
                         [("blobs_mlp", "gelu")])
        # Every submission's entry seeds the draw, not only the two run.
        self.assertEqual(len(draw["entries"]), len(self.lb_mod().submissions()))
        p = subprocess.run([APF, "status", os.path.join(hd, "adamw.run"), "--json"],
                           capture_output=True, text=True, env=self.env)
        states = {u["unit"]: u["state"] for u in json.loads(p.stdout)["units"]}
        self.assertEqual({u: s for u, s in states.items() if "gelu" in u},
                         {f"study_{k}/blobs_mlp_gelu/trial_1": "done" for k in range(3)})
        self.assertEqual({s for u, s in states.items() if "gelu" not in u}, {"pending"})
        again = self.run_("--heldout")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout.count("sealed before, kept"), 2, again.stdout)

        dest = os.path.join(self.tmp, "board")
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertEqual(pub.returncode, 0, pub.stderr + pub.stdout)
        held_dir = os.path.join(dest, "self", "heldout")
        held = json.load(open(os.path.join(held_dir, "scores.json")))
        self.assertEqual(held["heldout_variants"],
                         [{"base": "blobs_mlp", "variant": "blobs_mlp_gelu"}])
        self.assertEqual(sorted(s["name"] for s in held["submissions"]), ["adamw", "nadamw"])
        runs = json.load(open(os.path.join(held_dir, "records", "runs.json")))
        self.assertEqual([r["submission"] for r in runs["runs"]], ["adamw", "nadamw"])
        self.assertEqual([r["variant_units"] for r in runs["runs"]], [3, 3])
        # The records alone give the same scores, by the command they name.
        cmd = runs["reproduce"].split()
        self.assertEqual(cmd[:2], ["apf", "score"])
        sub = os.path.join(held_dir, "records", "algoperf", "submissions")
        args = [os.path.join(sub, n) for n in sorted(os.listdir(sub))]
        args += ["--targets", os.path.join(held_dir, "records", "algoperf",
                                           "workload_targets.json"),
                 "--rules", "algoperf-0.6", "--self-tuning",
                 "--heldout", os.path.join(held_dir, "draw.json"), "--json"]
        again = subprocess.run([APF, "score", *args], capture_output=True, text=True,
                               env=self.env)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual({s["name"]: s["score"] for s in json.loads(again.stdout)["submissions"]},
                         {s["name"]: s["score"] for s in held["submissions"]})
        with open(os.path.join(dest, "algoperf.json"), "w") as f:
            json.dump({"comparisons": []}, f)
        c = subprocess.run([PY, SCRIPT, "compare", "--dest", dest], capture_output=True,
                           text=True, env=self.env, timeout=300)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("Self-tuning: what the held-out rules change (variants blobs_mlp_gelu)",
                      c.stdout)
        self.assertRegex(c.stdout, r"- ranking with the held-out rules against without: "
                                   r"Kendall's tau-b ")

    def test_campaign_resumes_pins_refuses_and_publishes(self):
        p = self.run_("--studies", "0")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        # --studies 0: study 0 of both, nothing of studies 1 and 2.
        self.assertEqual(self.units("adamw"), {"study_0/blobs_mlp/trial_1": "done",
                                               "study_1/blobs_mlp/trial_1": "pending",
                                               "study_2/blobs_mlp/trial_1": "pending"})
        # In the order given.
        self.assertLess(p.stdout.index("nadamw study 0: running"),
                        p.stdout.index("adamw study 0: running"))
        again = self.run_("--studies", "0")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout.count("ended before, kept"), 2, again.stdout)

        # publish refuses a campaign whose runs have not ended.
        dest = os.path.join(self.tmp, "board")
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertNotEqual(pub.returncode, 0)
        self.assertRegex(pub.stderr, r"^apf: leaderboard: .*adamw\.run: 2 of 3 units have "
                                     r"not ended")
        self.assertFalse(os.path.exists(dest))

        # Another machine class: refused before anything runs.
        cj = os.path.join(self.out, "campaign.json")
        state = json.load(open(cj))
        forged = json.loads(json.dumps(state))
        forged["machine"]["family"] = "999"
        json.dump(forged, open(cj, "w"))
        p = self.run_("--studies", "1")
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr, r"^apf: leaderboard: .*this campaign's machine is .*"
                                   r"family 999.*here it is ")
        self.assertEqual(self.units("adamw")["study_1/blobs_mlp/trial_1"], "pending")
        json.dump(state, open(cj, "w"))
        # Another setting (the clock) is refused the same way.
        p = self.run_("--studies", "1", "--clock", "wall")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("this campaign's clock is cpu, here it is wall", p.stderr)
        # The toolchain is pinned with the rest: the runs began with this
        # apf's build, and another build (a commit made since, rebuilt) is
        # refused rather than mixed into them.
        version = subprocess.run([APF, "--version"], capture_output=True,
                                 text=True).stdout.strip()
        self.assertEqual(state["toolchains"]["self"]["build"], version)
        self.assertEqual(state["toolchains"]["self"]["mode"], "here")
        forged = json.loads(json.dumps(state))
        forged["toolchains"]["self"]["build"] = "apf 0.1.0 (0123456789ab)"
        json.dump(forged, open(cj, "w"))
        p = self.run_("--studies", "1")
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr, r"^apf: leaderboard: .* is apf .*, the self ruleset's runs "
                                   r"were made with apf 0\.1\.0 \(0123456789ab\): one "
                                   r"campaign, one toolchain")
        self.assertEqual(self.units("adamw")["study_1/blobs_mlp/trial_1"], "pending")
        json.dump(state, open(cj, "w"))

        # A workload edited since the runs began: its entries differ, and
        # the campaign stops rather than mixing the two.
        ini = os.path.join(self.wl, "blobs_mlp", "workload.ini")
        text = open(ini).read()
        open(ini, "w").write(text.replace("validation_target = 0.9",
                                          "validation_target = 0.8"))
        p = self.run_("--studies", "1")
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr, r"^apf: leaderboard: nadamw: its entry differs from the one "
                                   r".* began with \(in workloads: ")
        self.assertEqual(self.units("adamw")["study_1/blobs_mlp/trial_1"], "pending")
        open(ini, "w").write(text)

        p = self.run_("--studies", "1,2")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        st = self.lb("status")
        self.assertRegex(st.stdout, r"self +nadamw +3/3 units ended")
        inv = json.load(open(cj))["invocations"]
        self.assertEqual([i["studies"] for i in inv], [[0], [0], [1], [1, 2]])
        self.assertTrue(all(i["end"] and i["wall_s"] >= 0 for i in inv))

        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertEqual(pub.returncode, 0, pub.stderr + pub.stdout)
        board = os.path.join(dest, "self")
        scores = json.load(open(os.path.join(board, "scores.json")))
        self.assertEqual(sorted(s["name"] for s in scores["submissions"]), ["adamw", "nadamw"])
        self.assertTrue(all(s["verified"] == "yes" for s in scores["submissions"]))
        self.assertEqual(scores["ruleset"], "self-tuning")
        self.assertIn("verified", open(os.path.join(board, "report.html")).read())
        runs = json.load(open(os.path.join(board, "records", "runs.json")))
        self.assertEqual([r["submission"] for r in runs["runs"]], ["adamw", "nadamw"])
        # The board's campaign record is its ruleset's: an external
        # invocation in the same campaign directory is neither timed nor
        # listed with it.
        full = json.load(open(cj))
        full["invocations"].append({"start": "2026-01-01T00:00:00Z", "end": None,
                                    "wall_s": 5000.0, "ruleset": "external"})
        full["toolchains"]["external"] = dict(full["toolchains"]["self"], build="other")
        json.dump(full, open(cj, "w"))
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertEqual(pub.returncode, 0, pub.stderr + pub.stdout)
        camp = json.load(open(os.path.join(board, "campaign.json")))
        self.assertEqual([i["ruleset"] for i in camp["invocations"]], ["self"] * 4)
        self.assertEqual(list(camp["toolchains"]), ["self"])
        self.assertAlmostEqual(camp["wall_s"], sum(i["wall_s"] for i in inv), places=0)
        text = self.lb_mod().board_markdown(scores, camp, runs)
        self.assertIn(f"Toolchain: {version}. Campaign: {camp['wall_s'] / 3600:.2f} h of wall "
                      "time in 4 invocations", text)
        # How each run was verified, in words a reader can run: its seal's
        # command and their time, then publish's own check.
        self.assertEqual(runs["seal_commands"], ["apf verify RUN --reeval --replay-top 1 --json"])
        self.assertRegex(text, r"2 runs, every one verified as it ended by `apf verify RUN "
                               r"--reeval --replay-top 1` \(\d+ s in all\), its checkpoints then "
                               r"deleted, and again at publish by `apf score --verify --pruned` "
                               r"\(\d+ s\)\. Machine: ")
        self.assertEqual(runs["unverified"], [])
        for r in runs["runs"]:
            self.assertTrue(os.path.exists(os.path.join(board, "records", "runs", r["submission"],
                                                        "index.dsse.json")))
        # No run directory, no checkpoint, in what is published.
        for d, _, files in os.walk(dest):
            self.assertFalse(any(f.endswith((".apf", ".ckpt", "log.jsonl")) for f in files),
                             (d, files))
        # The reproduction command, run by hand, gives the published scores.
        cmd = runs["reproduce"].split()
        self.assertEqual(cmd[:2], ["apf", "score"])
        sub = os.path.join(board, "records", "algoperf", "submissions")
        args = [os.path.join(sub, n) for n in sorted(os.listdir(sub))]
        args += ["--targets", os.path.join(board, "records", "algoperf", "workload_targets.json"),
                 "--rules", "algoperf-0.6", "--self-tuning", "--json"]
        again = subprocess.run([APF, "score", *args], capture_output=True, text=True,
                               env=self.env)
        self.assertEqual(again.returncode, 0, again.stderr)
        got = {s["name"]: (s["score"], s["times"]) for s in json.loads(again.stdout)["submissions"]}
        self.assertEqual(got, {s["name"]: (s["score"], s["times"])
                               for s in scores["submissions"]})
        self.assertTrue(any(s["score"] > 0 for s in scores["submissions"]), scores)

        # An operator's edit to a sealed run (a better time in one CSV),
        # archived again with the ledger's digests made to match, fails
        # verification: the published board is not replaced by one that
        # ranks the rest, and the reason is named.
        import glob
        ledger = os.path.join(self.tmp, "campaign")
        rec = json.load(open(cj))["sealed"]["self"]["adamw"]
        work = os.path.join(self.tmp, "edit")
        self.lb_mod().unpack_run(os.path.join(ledger, rec["archive"]), work)
        csv = sorted(glob.glob(os.path.join(work, "**", "eval_measurements.csv"),
                               recursive=True))[0]
        with open(csv) as f:
            rows = f.read().splitlines()
        head, first = rows[0].split(","), rows[1].split(",")
        first[head.index("score")] = "0.001"
        rows[1] = ",".join(first)
        with open(csv, "w") as f:
            f.write("\n".join(rows) + "\n")
        self.lb_mod().pack_run(work, os.path.join(ledger, rec["archive"]))
        for path in (cj, os.path.join(ledger, "campaign.json")):
            state = json.load(open(path))
            state["sealed"]["self"]["adamw"]["archive_sha256"] = self.lb_mod().sha256_file(
                os.path.join(ledger, rec["archive"]))
            json.dump(state, open(path, "w"))
        before = open(os.path.join(board, "scores.json")).read()
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertNotEqual(pub.returncode, 0, pub.stdout)
        self.assertRegex(pub.stderr, r"^apf: leaderboard: 1 of 2 runs failed verification "
                                     r"\(adamw: .*eval_measurements\.csv.*\): .* left as it was")
        self.assertEqual(open(os.path.join(board, "scores.json")).read(), before)

    def test_a_new_checkout_takes_the_campaign_up_from_the_ledger(self):
        """A run is verified with re-evaluation and replay as it ends, then
        sealed into the ledger without its checkpoints; a checkout without
        the work directory (another session) takes the campaign up from
        the ledger alone: sealed runs are kept, status counts them, and
        publish gives the same board. A sealed run changed in the ledger,
        or verified short of re-evaluation, is refused."""
        ledger = os.path.join(self.tmp, "campaign")
        p = self.run_("--submissions", "nadamw")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertIn("self nadamw: verified in ", p.stdout)
        # The checkpoints are gone from the work directory once sealed; the
        # ledger holds the run without them, its verdict and its key.
        run = os.path.join(self.out, "self", "nadamw.run")
        self.assertFalse([d for d, sub, _ in os.walk(run) if "ckpt" in sub])
        rec = json.load(open(os.path.join(ledger, "campaign.json")))["sealed"]["self"]["nadamw"]
        seal = json.load(open(os.path.join(ledger, rec["verify"])))
        self.assertTrue(seal["verdict"]["verified"])
        self.assertEqual(seal["command"], "apf verify RUN --reeval --replay-top 1 --json")
        self.assertIn("re-evaluated", {c["name"]: c for c in seal["verdict"]["checks"]}
                      ["checkpoints"]["detail"])
        listing = subprocess.run(f"zstd -dc {os.path.join(ledger, rec['archive'])} | tar -tf -",
                                 shell=True, capture_output=True, text=True).stdout
        self.assertIn("./study_2/blobs_mlp/trial_1/log.jsonl", listing)
        self.assertNotIn("ckpt", listing)
        # --until a time already past begins nothing.
        p = self.run_("--until", "2020-01-01T00:00Z")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("self nadamw: sealed before, kept", p.stdout)
        self.assertRegex(p.stdout, r"self adamw: not begun: it would take about \d+ min, "
                                   r"past --until 2020-01-01T00:00Z")
        self.assertFalse(os.path.exists(os.path.join(self.out, "self", "adamw.run")))
        p = self.run_("--until", "25:00")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--until 25:00: not HH:MM (UTC) or an ISO 8601 time", p.stderr)

        # Another checkout: no work directory, the ledger alone.
        shutil.rmtree(self.out)
        st = self.lb("status")
        self.assertEqual(st.returncode, 0, st.stderr)
        self.assertIn("taken up from the ledger", st.stderr)
        self.assertRegex(st.stdout, r"self +nadamw +3/3 units ended, sealed")
        p = self.run_()
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertIn("self nadamw: sealed before, kept", p.stdout)
        self.assertIn("self adamw: verified in ", p.stdout)
        dest = os.path.join(self.tmp, "board")
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertEqual(pub.returncode, 0, pub.stderr + pub.stdout)
        scores = json.load(open(os.path.join(dest, "self", "scores.json")))
        self.assertTrue(all(s["verified"] == "yes" for s in scores["submissions"]))
        self.assertEqual(scores["audit"], "pruned units accepted without their checkpoints "
                                          "(--pruned)")
        runs = json.load(open(os.path.join(dest, "self", "records", "runs.json")))
        # Each run names the key it was signed with (two sessions, two keys)
        # and carries the verdict it was sealed with.
        keys = [r["runner_keyid"] for r in runs["runs"]]
        self.assertEqual(len(set(keys)), 2, keys)
        for r in runs["runs"]:
            d = os.path.join(dest, "self", "records", "runs", r["submission"])
            self.assertTrue(json.load(open(os.path.join(d, "verify.json")))["verdict"]["verified"])
            self.assertTrue(os.path.exists(os.path.join(d, "runner.pub.pem")))

        # A ledger whose archive is not the one sealed is refused by name.
        cj = os.path.join(self.out, "campaign.json")
        arch = os.path.join(ledger, rec["archive"])
        blob = open(arch, "rb").read()
        open(arch, "wb").write(blob + b"\0")
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertNotEqual(pub.returncode, 0)
        self.assertRegex(pub.stderr, r"^apf: leaderboard: .*nadamw\.run\.tar\.zst: not the "
                                     r"file sealed")
        open(arch, "wb").write(blob)
        # A seal whose verification made no re-evaluation is no seal.
        vpath = os.path.join(ledger, rec["verify"])
        text = open(vpath).read()
        forged = json.loads(text)
        for c in forged["verdict"]["checks"]:
            if c["name"] == "checkpoints":
                c["detail"] = "1 file of the logged sizes and SHA-256 digests"
        open(vpath, "w").write(json.dumps(forged))
        for path in (cj, os.path.join(ledger, "campaign.json")):
            state = json.load(open(path))
            state["sealed"]["self"]["nadamw"]["verify_sha256"] = \
                self.lb_mod().sha256_file(vpath)
            json.dump(state, open(path, "w"))
        pub = self.lb("publish", "--ruleset", "self", "--dest", dest)
        self.assertNotEqual(pub.returncode, 0)
        self.assertIn("was not sealed with a passing verification with re-evaluation and "
                      "replay", pub.stderr)


if __name__ == "__main__":
    unittest.main()
