"""End-to-end: apf verify --reeval and --replay (checks 4 and 5 of docs/design.md
section 3.8) on real runs.

Both pass on an honest CPU run; replay fails on a run whose submission
keeps state outside its slots (tests/data/submissions/state_outside_slots);
re-evaluation fails on a run whose runner logged a metric the checkpoint
does not give, even though the log is chained and signed.
"""
import csv
import hashlib
import json
import os
import re
import shutil

import apftest
import runfake
from apftest import BLOBS
from test_run import RunCase


class Audit(RunCase):
    def run_source(self, name, src_dir, ruleset="self", studies=1):
        shutil.copytree(src_dir, self.path(name))
        self.write(f"{name}/submission.ini",
                   f"[submission]\nname = {name}\nruleset = {ruleset}\n"
                   f"[tuning]\nstudies = {studies}\n")
        entry = self.path(f"{name}.apf")
        self.ok("pack", self.path(name), "-w", BLOBS, "-o", entry)
        run = self.path(f"{name}.run")
        r = self.apf("run", entry, "-o", run, timeout=300)
        self.assertEqual(r.rc, 0, r)
        return run

    def test_honest_run_reevaluates_and_replays_bit_for_bit(self):
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        r = self.ok("verify", run, "--reeval", "--replay", "2", "--seed", "11", "--json",
                    timeout=600)
        report = json.loads(r.out)
        checks = {c["name"]: c for c in report["checks"]}
        self.assertEqual(checks["checkpoints"]["outcome"], "passed")
        self.assertIn("re-evaluated", checks["checkpoints"]["detail"])
        self.assertEqual(checks["replay"]["outcome"], "passed")
        self.assertIn("(seed 11)", checks["replay"]["detail"])
        # The intervals from each unit's initial state (checkpoint 0, which
        # --reeval checked against the workload's initialisation) count:
        # as many intervals as evals.
        evals = len([x for x in apftest.read_log(run)[0] if x["event"] == "eval"])
        self.assertIn(f"2 of {evals} eval intervals replayed", checks["replay"]["detail"])
        # apf score and apf report --verify take the same words and make
        # the same checks: the page carries their outcome and names them.
        page = self.path("nadamw.html")
        self.ok("report", run, "--verify", "--reeval", "--replay", "2", "--seed", "11",
                "-o", page, timeout=600)
        with open(page) as f:
            text = f.read()
        v = json.loads(re.search(r'<script type="application/json" id="apf-verify">'
                                 r'(.*?)</script>', text, re.S).group(1))["nadamw"]
        shown = {c["name"]: c for c in v["checks"]}
        self.assertTrue(v["verified"])
        for name in ("checkpoints", "replay"):
            self.assertEqual(shown[name]["outcome"], "passed")
        self.assertEqual(shown["checkpoints"]["detail"], checks["checkpoints"]["detail"])
        # The same intervals (the replay's times are this moment's).
        self.assertEqual(shown["replay"]["detail"].split(";")[0],
                         checks["replay"]["detail"].split(";")[0])
        self.assertIn("held-out draw; re-evaluation of every checkpoint; replay of 2 "
                      "intervals by seed 11)", text)
        t = self.ok("score", run, "--verify", "--reeval", timeout=600).out
        self.assertIn("verified: 1 apf run (apf verify's checks, with re-evaluation of "
                      "every checkpoint)\n", t)
        self.fails(2, "score", run, "--replay", "1",
                   match="apf: score: --reeval, --replay and --pruned are checks of "
                         "--verify: give --verify too")
        self.fails(2, "report", run, "--verify", "--replay", "most", "-o", page,
                   match="apf: report: --replay takes N >= 1 or all")
        # Every interval, and the ones whose parameters changed most.
        r = self.ok("verify", run, "--replay", "all", timeout=900)
        self.assertIn(f"{evals} of {evals} eval intervals replayed (all)", r.out)
        r = self.ok("verify", run, "--replay-top", "2", timeout=600)
        self.assertIn(f"2 of {evals} eval intervals replayed (those with the largest "
                      "parameter change)", r.out)
        self.fails(2, "verify", run, "--replay", "0")
        self.fails(2, "verify", run, "--replay", "most")
        # The auditor wrote nothing into the run directory.
        before = sorted(os.listdir(os.path.join(run, "study_0", BLOBS, "trial_1")))
        self.ok("verify", run, "--replay", "1", timeout=600)
        self.assertEqual(sorted(os.listdir(os.path.join(run, "study_0", BLOBS, "trial_1"))),
                         before)

    def test_pruned_units_are_checked_without_their_checkpoints_and_named(self):
        """A campaign verifies each study as it ends and deletes its
        checkpoints; later verifications accept those units without them
        only when the auditor says --pruned, and name every one."""
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        units = sorted(os.path.relpath(d, run) for d, subdirs, _ in os.walk(run)
                       if "ckpt" in subdirs)
        self.assertGreaterEqual(len(units), 3, units)
        shutil.rmtree(os.path.join(run, units[0], "ckpt"))
        # Without the auditor's word, a missing checkpoint fails check 4.
        self.fails(1, "verify", run, match="check 4 (checkpoints)")
        self.fails(2, "verify", os.path.join(self.path("nadamw.apf")), "--pruned",
                   match="--pruned are for a run directory")
        r = self.ok("verify", run, "--pruned", "--reeval", "--replay-top", "1", "--json",
                    timeout=600)
        report = json.loads(r.out)
        self.assertTrue(report["verified"])
        self.assertEqual(report["pruned_units"], [units[0]])
        checks = {c["name"]: c for c in report["checks"]}
        self.assertIn("the pruned units' checkpoints are not here (--pruned) and were "
                      "not re-evaluated", checks["checkpoints"]["detail"])
        self.assertEqual(checks["replay"]["outcome"], "passed")
        full = json.loads(self.ok("verify", run, "--pruned", "--json").out)
        self.assertIn("1 unit pruned (--pruned: none of its checkpoint files here",
                      {c["name"]: c for c in full["checks"]}["checkpoints"]["detail"])
        # The others' checkpoints are still read: one changed fails.
        other = os.path.join(run, units[1], "ckpt", "1.bin")
        with open(other, "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 1]))
        self.fails(1, "verify", run, "--pruned", match="check 4 (checkpoints)")
        with open(other, "r+b") as f:
            f.write(b)
        # A unit with some of its files left is no pruned unit: every
        # missing file fails.
        left = sorted(os.listdir(os.path.join(run, units[1], "ckpt")))
        for name in left[1:]:
            os.unlink(os.path.join(run, units[1], "ckpt", name))
        r = self.fails(1, "verify", run, "--pruned", match="check 4 (checkpoints)")
        self.assertIn("missing", r.err)
        shutil.rmtree(os.path.join(run, units[1], "ckpt"))
        # apf score takes the word with --verify only, and its line of what
        # was checked says so.
        self.fails(2, "score", run, "--pruned",
                   match="--pruned are checks of --verify: give --verify too")
        j = json.loads(self.ok("score", run, "--verify", "--pruned", "--json").out)
        self.assertEqual(j["submissions"][0]["verified"], "yes")
        self.assertEqual(j["audit"], "pruned units accepted without their checkpoints "
                                     "(--pruned)")

    def test_state_outside_slots_fails_replay(self):
        run = self.run_source("leaky", os.path.join(apftest.ROOT, "tests", "data",
                                                    "submissions", "state_outside_slots"))
        self.ok("verify", run)          # the log itself is honest
        self.ok("verify", run, "--reeval", timeout=600)
        # Two intervals: from the initial state (checkpoint 0) to eval 1,
        # where the static buffer is still what the replay starts with, and
        # from eval 1 to eval 2, where it is not.
        r = self.fails(1, "verify", run, "--replay", "2", "--seed", "3", timeout=600,
                       match="check 5 (replay)")
        self.assertIn("differ", r.err)
        self.assertIn("(seed 3)", r.err)
        # score and report --verify make the same replay when asked: the
        # run is then not verified, not ranked, and the page says why
        # (beside an honest run, which stays ranked).
        honest = self.run_source("honest", os.path.join(apftest.ROOT, "submissions",
                                                        "baselines", "nadamw"))
        j = json.loads(self.ok("score", run, honest, "--verify", "--json").out)
        self.assertEqual([x["name"] for x in j["excluded"]], [])
        self.assertIsNone(j["audit"])
        j = json.loads(self.ok("score", run, honest, "--verify", "--replay", "2",
                               "--seed", "3", "--json", timeout=600).out)
        self.assertEqual(j["audit"], "replay of 2 intervals by seed 3")
        self.assertEqual([x["name"] for x in j["excluded"]], ["leaky"])
        self.assertEqual([x["name"] for x in j["submissions"]], ["honest"])
        self.assertIn("check 5 (replay)", j["excluded"][0]["reason"])
        self.fails(1, "score", run, honest, "--verify", "--replay", "2", "--seed", "3",
                   "--strict", timeout=600, match="leaky: not verified: check 5 (replay)")
        page = self.path("leaky.html")
        self.ok("report", run, honest, "--verify", "--replay", "2", "--seed", "3",
                "-o", page, timeout=600)
        with open(page) as f:
            text = f.read()
        v = json.loads(re.search(r'<script type="application/json" id="apf-verify">'
                                 r'(.*?)</script>', text, re.S).group(1))
        self.assertFalse(v["leaky"]["verified"])
        self.assertEqual({c["name"]: c["outcome"] for c in v["leaky"]["checks"]}["replay"],
                         "failed")
        self.assertIn("FAILED verification", text)
        self.assertIn("held-out draw; replay of 2 intervals by seed 3)", text)

    def test_state_carried_in_scratch_fails_replay(self):
        # Scratch (apf_scratch, ABI 2) is released at every call and not
        # checkpointed: a submission that reads last step's scratch trains
        # in its own process, and the replay of an interval that does not
        # start at the unit's beginning exposes it.
        run = self.run_source("carry", os.path.join(apftest.ROOT, "tests", "data",
                                                    "submissions", "scratch_carry"))
        self.ok("verify", run, "--reeval", timeout=600)
        r = self.fails(1, "verify", run, "--replay", "all", timeout=600,
                       match="check 5 (replay)")
        self.assertIn("differ", r.err)

    def test_tolerant_replay_says_so_and_holds_the_landing_against_the_interval(self):
        # A cpu run replays bit for bit by default; --replay-compare
        # tolerant is the auditor's choice (what a cuda run off its GPU
        # model can meet), and the line says which was made and why.
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        r = self.ok("verify", run, "--replay", "1", "--seed", "4", timeout=600)
        self.assertIn("on the CPU, each ending in its checkpoint bit for bit", r.out)
        r = self.ok("verify", run, "--replay", "1", "--seed", "4",
                    "--replay-compare", "tolerant", timeout=600)
        self.assertIn("each ending within 0.01 of its interval's parameter change", r.out)
        self.assertIn("(tolerant: the auditor's --replay-compare tolerant)", r.out)
        # An honest CPU replay lands exactly: nothing off, no metric moved.
        self.assertIn("(largest: 0 of the change, 0 of the parameters' norm; metrics 0)",
                      r.out)
        self.fails(2, "verify", run, "--replay", "1", "--replay-compare", "close")
        self.fails(2, "verify", run, "--replay", "1", "--replay-rtol", "0")
        self.fails(2, "verify", run, "--replay", "1", "--replay-rtol", "2")
        # exact is the default, by name too.
        self.ok("verify", run, "--replay", "1", "--replay-compare", "exact", timeout=600)

    def test_a_wobbling_submission_fails_exact_replay_and_meets_a_tolerant_one(self):
        run = self.run_source("drifts", os.path.join(apftest.ROOT, "tests", "data",
                                                     "submissions", "drifts"))
        # Every interval: a single step's wobble (the first interval's) can
        # round away in float32, a thousand steps' cannot.
        self.fails(1, "verify", run, "--replay", "all", timeout=600,
                   match="check 5 (replay)")
        r = self.ok("verify", run, "--replay", "all",
                    "--replay-compare", "tolerant", timeout=600)
        m = re.search(r"largest: ([0-9.e+-]+) of the change", r.out)
        self.assertTrue(m, r.out)
        off = float(m.group(1))
        # A few parts in a million of each step: off, but far within 1%.
        self.assertGreater(off, 0)
        self.assertLess(off, 1e-3)
        # A tolerance tighter than the wobble catches it.
        r = self.fails(1, "verify", run, "--replay", "all",
                       "--replay-compare", "tolerant", "--replay-rtol", "1e-9",
                       timeout=600, match="check 5 (replay)")
        self.assertIn("of the interval's change from the checkpoint's", r.err)

    def test_state_outside_slots_fails_a_tolerant_replay_too(self):
        run = self.run_source("leaky", os.path.join(apftest.ROOT, "tests", "data",
                                                    "submissions", "state_outside_slots"))
        r = self.fails(1, "verify", run, "--replay", "all", "--replay-compare", "tolerant",
                       timeout=600, match="check 5 (replay)")
        self.assertIn("over the tolerance 0.01", r.err)

    def rechain_and_sign(self, run, recs):
        """Writes the records as a runner holding the key would: chained,
        the head signed (and, for a unit's own log, the index)."""
        rd = runfake.RunDir(run, os.path.join(self.home, "keys", "default.key.pem"),
                            unit=f"study_0/{BLOBS}/trial_1")
        rd.records = recs
        rd.save()

    def csv_path(self, run):
        return os.path.join(run, "study_0", BLOBS, "trial_1", "eval_measurements.csv")

    def read_csv(self, run):
        with open(self.csv_path(run), newline="") as f:
            return list(csv.DictReader(f))

    def write_csv(self, run, rows):
        """The unit's eval_measurements.csv as the runner would write it."""
        with open(self.csv_path(run), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)

    def test_under_reported_submission_time_fails_the_timing_tolerance(self):
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"))
        # Replayed times depend on the machine's load at the moment, so the
        # margins are wide: the honest run passes a tolerance of 20 (its
        # replay would have to run 20 times slower than the run did to
        # fail), and the forgery below claims a thousandth of the time it
        # took, 50 times beyond that tolerance.
        r = self.ok("verify", run, "--replay", "all", "--timing-tolerance", "20",
                    timeout=600)
        self.assertIn("within the tolerance", r.out)
        # The operator books 999/1000 of every timed block after the first
        # as logging time: the blocks start later, end where they ended, and
        # every sum, the CSV and the time-to-target follow (an eval's copy,
        # inside the block before it, shrinks with it), so the log is
        # consistent and checks 1-4 pass.
        recs = runfake.RunDir(run, None, unit=f"study_0/{BLOBS}/trial_1").records
        sub = moved_total = 0
        ttt = None
        shrunk = False
        for r in recs:
            if r["event"] == "step_block":
                shrunk = r["first_step"] > 1
                if shrunk:
                    moved = (r["end_ns"] - r["start_ns"]) * 999 // 1000
                    r["start_ns"] += moved
                    moved_total += moved
                sub += r["end_ns"] - r["start_ns"]
                r["accumulated_submission_ns"] = sub
            elif r["event"] == "eval":
                # The copy (eval's copy_ns) lies inside the block before.
                if shrunk and r.get("copy_ns"):
                    r["copy_ns"] -= r["copy_ns"] * 999 // 1000
                r["accumulated_submission_ns"] = sub
                r["accumulated_logging_ns"] += moved_total
                if r["validation_target_met"] and ttt is None:
                    ttt = sub
            elif r["event"] == "trial_end":
                r["accumulated_submission_ns"] = sub
                r["time_to_target_ns"] = ttt
        self.assertGreater(moved_total, 0)
        self.assertEqual(recs[-1]["event"], "run_end")
        self.rechain_and_sign(run, recs)
        rows = self.read_csv(run)
        evals = [r for r in recs if r["event"] == "eval"]
        for row, e in zip(rows, evals):
            row["accumulated_submission_time"] = "%.9f" % (e["accumulated_submission_ns"] / 1e9)
            row["score"] = row["accumulated_submission_time"]
            row["accumulated_logging_time"] = "%.9f" % (e["accumulated_logging_ns"] / 1e9)
        self.write_csv(run, rows)
        self.ok("verify", run)
        r = self.fails(1, "verify", run, "--replay", "all", "--timing-tolerance", "20",
                       timeout=600, match="check 5 (replay)")
        self.assertIn("under 1/20", r.err)

    def test_timing_on_another_cpu_fails_unless_the_auditor_accepts_it(self):
        # run.json says the run had another CPU (re-bound, re-chained and
        # re-signed). That claim must not turn the auditor's timing check
        # off: check 5 fails, naming the CPUs and the option that accepts
        # replays whose times are not compared; with it, replays still
        # check the bits, and the report says the times were not held
        # against the tolerance, and why (test_claims has the attacks).
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"))
        path = os.path.join(run, "run.json")
        rj = json.load(open(path))
        rj["environment"]["cpu"]["model"] = "Imaginary CPU 9000"
        with open(path, "w") as f:
            json.dump(rj, f, indent=2)
            f.write("\n")
        recs = runfake.RunDir(run, None, unit=f"study_0/{BLOBS}/trial_1").records
        with open(path, "rb") as f:
            sha = runfake.sha256_hex(f.read())
        for r in recs:
            if r["event"] == "run_start":
                r["run_json_sha256"] = sha
        self.rechain_and_sign(run, recs)
        r = self.fails(1, "verify", run, "--replay", "all", "--timing-tolerance", "1.5",
                       timeout=600, match="check 5 (replay)")
        self.assertIn("timing: this CPU", r.err)
        self.assertIn("is not the run's (Imaginary CPU 9000)", r.err)
        self.assertIn("give --accept-other-hardware", r.err)
        r = self.ok("verify", run, "--replay", "all", "--timing-tolerance", "1.5",
                    "--accept-other-hardware", timeout=600)
        self.assertIn("timing not compared (accepted by --accept-other-hardware): "
                      "this CPU", r.out)
        self.assertIn("is not the run's (Imaginary CPU 9000)", r.out)
        self.assertIn("each ending in its checkpoint bit for bit", r.out)

    def test_metric_the_checkpoint_does_not_give_fails_reeval(self):
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        # A runner (holding the key) logs a slightly better train loss,
        # re-chains the log and re-signs its head: checks 1-4 cannot tell.
        recs = runfake.RunDir(run, None, unit=f"study_0/{BLOBS}/trial_1").records
        next(r for r in recs if r["event"] == "eval")["metrics"]["train/loss"] *= 0.999
        self.rechain_and_sign(run, recs)
        # The CSV carries train/loss too: rewrite it as the runner would.
        rows = self.read_csv(run)
        first = [r for r in recs if r["event"] == "eval"][0]
        rows[0]["train/loss"] = "%.9g" % first["metrics"]["train/loss"]
        self.write_csv(run, rows)
        self.ok("verify", run)
        self.fails(1, "verify", run, "--reeval", timeout=600,
                   match="check 4 (checkpoints)")
        r = self.apf("verify", run, "--reeval", timeout=600)
        self.assertIn("train/loss", r.err)

    def test_a_checkpoint_the_evaluator_cannot_load_fails_reeval_with_its_reason(self):
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        # A runner (holding the key) logs a checkpoint whose arena header
        # is broken, with its digest: checks 1-4 without --reeval pass.
        # The failure must name its reason after the evaluator, started
        # for the checkpoint before it, is stopped (it used to clear the
        # message, leaving "not verified: " with nothing after it).
        recs = runfake.RunDir(run, None, unit=f"study_0/{BLOBS}/trial_1").records
        evals = [r for r in recs if r["event"] == "eval" and r.get("checkpoint")]
        # checkpoint 0 is checked without the evaluator, 1 starts it
        self.assertEqual([r["index"] for r in evals], [1, 2])
        ck = evals[1]["checkpoint"]
        path = os.path.join(run, "study_0", BLOBS, "trial_1", ck["file"])
        data = bytearray(open(path, "rb").read())
        data[:8] = b"NOTANARN"
        with open(path, "wb") as f:
            f.write(data)
        ck["sha256"] = runfake.sha256_hex(bytes(data))
        self.rechain_and_sign(run, recs)
        self.ok("verify", run)
        self.fails(1, "verify", run, "--reeval", timeout=600,
                   match="apf: reeval: arena: not an apf arena")
        # apf score (and so the leaderboard's publish) names it too.
        self.fails(2, "score", run, "--verify", "--reeval", timeout=600,
                   match="1 failed verification (first: nadamw: reeval: arena: "
                         "not an apf arena (magic or version))")

    @staticmethod
    def tree(top):
        """Every file and directory under top: size, mtime and content."""
        out = {}
        for d, dirs, files in os.walk(top):
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                data = b""
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as f:
                        data = f.read()
                out[os.path.relpath(p, top)] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                                hashlib.sha256(data).hexdigest())
        return out

    def test_reeval_writes_nothing_outside_its_own_temporary_directory(self):
        run = self.run_source("nadamw", os.path.join(apftest.ROOT, "submissions",
                                                     "baselines", "nadamw"),
                              ruleset="external")
        # Another runner's work directory in $TMPDIR, its owner gone (its
        # .lock not held): apf run sweeps those, an audit must not touch it.
        other = os.path.join(self.scratch, "apf-run-Ab12Cd")
        os.makedirs(os.path.join(other, "unit_0"))
        self.write(os.path.join(other, ".lock"), "")
        self.write(os.path.join(other, "unit_0", "hparams.json"), "{}\n")
        before = {d: self.tree(d) for d in (run, self.scratch, self.home)}
        r = self.ok("verify", run, "--reeval", timeout=600)
        self.assertIn("re-evaluated in a clean process", r.out)
        after = {d: self.tree(d) for d in (run, self.scratch, self.home)}
        for d in before:
            self.assertEqual(before[d], after[d], d)

