"""End-to-end: per-unit logs, the signed index, apf run -j.

Each unit of a run writes its own hash-chained log and signed head in its
directory, and the run keeps index.dsse.json, the runner's signature over
every unit's head; `apf verify` checks each chain, each head and the index.
Tested from the operator's side (who holds the runner key and wants to fake
a result by moving, cutting, copying or dropping unit logs, or replaying an
older index) and from an outsider's (who forges the index). Runs made before
per-unit logs (tests/data/runs/single_log) still verify and score. `apf run
-j 2` runs two units at once, and each unit computes bit for bit what it
computes alone (tests/data/workloads/blobs_steps evaluates at fixed steps,
so the trajectories are comparable whatever the machine's speed).
"""
import base64
import csv
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

import apftest
import runfake
from test_run import RunCase, sandbox_available

STEPS = "blobs_steps"
CHECK_LOG = "check 2 (log)"


def unit(trial, study=0):
    return f"study_{study}/{STEPS}/trial_{trial}"


class Units(RunCase):
    """A real run of two units (and another run of the same entry), made
    once per class; each test gets a copy."""

    @classmethod
    def setUpClass(cls):
        if not sandbox_available():
            raise unittest.SkipTest("the kernel refuses user namespaces here")
        m = apftest.ApfCase("run")
        m.setUp()
        cls.maker = m
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        cls.entry = m.path("e.apf")
        m.ok("pack", src, "-w", STEPS, "-o", cls.entry)
        for t in ("1", "2"):
            m.ok("run", cls.entry, "-o", m.path("run"), "--study", "0", "--trial", t,
                 "--threads", "1", timeout=300)
        # Another run of the same entry (other settings, so another run.json).
        m.ok("run", cls.entry, "-o", m.path("other"), "--study", "0", "--trial", "2",
             "--threads", "2", timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.maker.tearDown()

    def setUp(self):
        super().setUp()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(self.maker.home, self.home)
        for d in ("run", "other"):
            shutil.copytree(self.maker.path(d), self.path(d))
        shutil.copy(self.entry, self.path("e.apf"))
        self.run = self.path("run")
        self.key = os.path.join(self.home, "keys", "default.key.pem")

    def rundir(self, path=None):
        """The run as a runner holding its key rewrites it (one unit log:
        runfake.RunDir takes the only one there is)."""
        return runfake.RunDir(path or self.run, self.key)

    def index(self, path=None):
        with open(os.path.join(path or self.run, "index.dsse.json")) as f:
            return json.loads(base64.b64decode(json.load(f)["payload"]))

    def sign_index(self, units, path=None, key=None, keyid=None):
        """index.dsse.json naming exactly these units, signed."""
        path = path or self.run
        with open(os.path.join(path, "run.json"), "rb") as f:
            rj = f.read()
        payload = json.dumps({"format": "apf-run-index-v1",
                              "run_json_sha256": runfake.sha256_hex(rj),
                              "units": units}, separators=(",", ":")).encode()
        env = runfake.sign_dsse(key or self.key, runfake.INDEX_TYPE, payload,
                                keyid or json.loads(rj)["runner"]["keyid"])
        with open(os.path.join(path, "index.dsse.json"), "w") as f:
            f.write(env)

    def rejected(self, *matches, code=1, run=None):
        r = self.fails(code, "verify", run or self.run)
        line = r.err.strip().splitlines()[-1]
        for m in matches:
            self.assertIn(m, line, r)
        return line

    # ---- the layout ------------------------------------------------------

    def test_each_unit_has_its_own_signed_log_bound_to_the_run(self):
        r = self.ok("verify", self.run)
        self.assertRegex(r.out, r"2 log +passed +\d+ records chained in 2 unit logs")
        self.assertFalse(os.path.exists(os.path.join(self.run, "log.jsonl")))
        with open(os.path.join(self.run, "run.json"), "rb") as f:
            rj_sha = runfake.sha256_hex(f.read())
        pub = os.path.join(self.home, "keys", "default.pub.pem")
        apftest.check_head_signature(self.run, pub)  # heads and index, openssl
        idx = self.index()
        self.assertEqual(sorted(idx["units"]), [unit(1), unit(2)])
        self.assertEqual(idx["run_json_sha256"], rj_sha)
        for t in (1, 2):
            recs, head = apftest.read_chain(os.path.join(self.run, unit(t), "log.jsonl"))
            self.assertEqual(recs[0]["event"], "run_start")
            self.assertEqual(recs[0]["run_json_sha256"], rj_sha)
            self.assertEqual(recs[-1]["event"], "run_end")
            self.assertEqual({x["unit"] for x in recs if "unit" in x}, {unit(t)})
            self.assertEqual(idx["units"][unit(t)], {"records": len(recs), "head": head})

    # ---- the operator's side (holds the runner key) ------------------------

    def test_truncated_unit_log_fails_naming_it(self):
        p = os.path.join(self.run, unit(2), "log.jsonl")
        with open(p, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        with open(p, "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines[:-2]))
        self.rejected(CHECK_LOG, unit(2), "records were removed from the end")

    def test_truncated_and_resigned_unit_log_fails_against_the_index(self):
        rd = runfake.RunDir.__new__(runfake.RunDir)
        rd.path, rd.runner_key = self.run, self.key
        rd.unit = unit(2)
        rd.log_rel, rd.head_rel = f"{rd.unit}/log.jsonl", f"{rd.unit}/log.dsse.json"
        with open(rd.log_file(), "rb") as f:
            rd.lines = f.read().split(b"\n")[:-1]
        with open(os.path.join(self.run, "run.json"), "rb") as f:
            rd.run_json_bytes = f.read()
        rd.run_json = json.loads(rd.run_json_bytes)
        # Its last eval and end cut, the head re-signed: the index still
        # names the whole log.
        rd.write_lines(rd.lines[:-3])
        rd.sign_head()
        self.rejected(CHECK_LOG, unit(2), "index.dsse.json names line")

    def test_swapped_unit_logs_fail_naming_the_unit(self):
        a, b = os.path.join(self.run, unit(1)), os.path.join(self.run, unit(2))
        for f in ("log.jsonl", "log.dsse.json"):
            os.rename(os.path.join(a, f), os.path.join(a, f + ".x"))
            os.rename(os.path.join(b, f), os.path.join(a, f))
            os.rename(os.path.join(a, f + ".x"), os.path.join(b, f))
        self.rejected(CHECK_LOG, f"a record of {unit(2)} in the log of {unit(1)}")

    def test_unit_dropped_from_the_index_fails_naming_it(self):
        idx = self.index()
        del idx["units"][unit(2)]
        self.sign_index(idx["units"])
        self.rejected(CHECK_LOG, unit(2), "no entry in index.dsse.json")

    def test_an_older_index_replayed_fails(self):
        # The index as it was after unit 1 alone, restored after unit 2 ran.
        run = self.path("grow")
        self.ok("run", self.path("e.apf"), "-o", run, "--study", "0", "--trial", "1",
                "--threads", "1", timeout=300)
        old = open(os.path.join(run, "index.dsse.json")).read()
        self.ok("run", self.path("e.apf"), "-o", run, "--study", "0", "--trial", "2",
                "--threads", "1", timeout=300)
        self.ok("verify", run)
        with open(os.path.join(run, "index.dsse.json"), "w") as f:
            f.write(old)
        self.rejected(CHECK_LOG, unit(2), "no entry in index.dsse.json", run=run)
        # An index naming an earlier line of a unit's finished log.
        idx = self.index()
        e = idx["units"][unit(1)]
        recs, _ = apftest.read_chain(os.path.join(self.run, unit(1), "log.jsonl"))
        with open(os.path.join(self.run, unit(1), "log.jsonl"), "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        idx["units"][unit(1)] = {"records": e["records"] - 1,
                                 "head": runfake.sha256_hex(lines[e["records"] - 2])}
        self.sign_index(idx["units"])
        self.rejected(CHECK_LOG, unit(1), "an older index?")

    def test_index_naming_a_unit_outside_the_plan_or_without_a_log_fails(self):
        idx = self.index()
        with self.subTest("not in the plan"):
            self.sign_index({**idx["units"], "study_9/blobs_steps/trial_1":
                             idx["units"][unit(1)]})
            self.rejected(CHECK_LOG, "study_9/blobs_steps/trial_1",
                          "not in run.json's plan")
        with self.subTest("no log"):
            self.sign_index({**idx["units"], unit(3): idx["units"][unit(1)]})
            self.rejected(CHECK_LOG, unit(3), "which has no log")
        with self.subTest("another unit's head"):
            self.sign_index({unit(1): idx["units"][unit(2)],
                             unit(2): idx["units"][unit(2)]})
            self.rejected(CHECK_LOG, unit(1))

    def test_unit_log_copied_from_another_run_fails(self):
        # Unit 2 of the other run (its log, head, CSV, checkpoints) put in
        # place of this run's, and the index re-signed to name its head.
        dst = os.path.join(self.run, unit(2))
        shutil.rmtree(dst)
        shutil.copytree(os.path.join(self.path("other"), unit(2)), dst)
        idx = self.index()
        idx["units"][unit(2)] = self.index(self.path("other"))["units"][unit(2)]
        self.sign_index(idx["units"])
        self.rejected(CHECK_LOG, unit(2), "run.json")

    def test_a_runner_killed_before_the_index_update_is_settled_by_the_next(self):
        # As if killed after unit 2's run_end was written, before its head
        # was signed and the index updated.
        idx = self.index()
        del idx["units"][unit(2)]
        self.sign_index(idx["units"])
        rd = runfake.RunDir(self.run, self.key, unit=unit(2))
        rd.sign_head(records=len(rd.lines) - 1)
        self.fails(1, "verify", self.run)
        self.ok("run", self.path("e.apf"), "-o", self.run, "--study", "0", "--trial", "2",
                "--threads", "1", timeout=300)
        self.ok("verify", self.run)
        self.assertIn(unit(2), self.index()["units"])

    # ---- an outsider's side (no runner key) --------------------------------

    def test_forged_index_fails(self):
        self.ok("keygen", "-o", self.path("mallory"), "--no-trust")
        idx = self.index()
        with self.subTest("signed by another key"):
            self.sign_index(idx["units"], key=self.path("mallory.key.pem"),
                            keyid=runfake.pem_keyid(self.path("mallory.pub.pem")))
            self.rejected(CHECK_LOG, "index.dsse.json", "no trusted key verifies it")
        with self.subTest("payload changed under the runner's signature"):
            self.sign_index(idx["units"])
            p = os.path.join(self.run, "index.dsse.json")
            env = json.load(open(p))
            body = json.loads(base64.b64decode(env["payload"]))
            del body["units"][unit(2)]
            env["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
            with open(p, "w") as f:
                json.dump(env, f)
            self.rejected(CHECK_LOG, "index.dsse.json", "no trusted key verifies it")
        with self.subTest("missing"):
            os.remove(os.path.join(self.run, "index.dsse.json"))
            self.rejected("index.dsse.json", code=2)

    def test_runner_refuses_an_index_it_did_not_sign(self):
        self.ok("keygen", "-o", self.path("mallory"), "--no-trust")
        self.sign_index(self.index()["units"], key=self.path("mallory.key.pem"),
                        keyid=runfake.pem_keyid(self.path("mallory.pub.pem")))
        r = self.apf("run", self.path("e.apf"), "-o", self.run, "--study", "0",
                     "--trial", "3", "--threads", "1", timeout=300)
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("not signed by this runner's key", r.err)

    # ---- concurrent writers ---------------------------------------------

    def test_two_runners_on_one_run_directory_keep_both_index_entries(self):
        ps = [subprocess.Popen([apftest.APF, "run", self.path("e.apf"), "-o", self.run,
                                "--study", "0", "--trial", t, "--threads", "1", "-q"],
                               env=self.env, cwd=self.tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
              for t in ("3", "4")]
        for p in ps:
            out, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(sorted(self.index()["units"]), [unit(t) for t in (1, 2, 3, 4)])
        r = self.ok("verify", self.run)
        self.assertIn("4 units run (4 ended, 0 failed)", r.out)

    def test_a_unit_being_run_is_not_run_twice(self):
        p = subprocess.Popen([apftest.APF, "run", self.path("e.apf"), "-o", self.run,
                              "--study", "0", "--trial", "3", "--threads", "1", "-q"],
                             env=self.env, cwd=self.tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        log = os.path.join(self.run, unit(3), "log.jsonl")
        deadline = time.monotonic() + 120
        while not os.path.exists(log) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if p.poll() is not None:
            p.communicate()
            self.skipTest("the unit ended before a second runner could try it")
        os.kill(p.pid, signal.SIGSTOP)
        try:
            r = self.apf("run", self.path("e.apf"), "-o", self.run, "--study", "0",
                         "--trial", "3", "--threads", "1", "--resume", timeout=300)
            st = json.loads(self.ok("status", self.run, "--json").out)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        states = {u["unit"]: u["state"] for u in st["units"]}
        self.assertEqual(states[unit(3)], "running", st)
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{unit(3)} is being run by another apf process", r.err)
        self.ok("verify", self.run)


    def test_status_says_where_each_unit_stands(self):
        st = json.loads(self.ok("status", self.run, "--json").out)
        self.assertEqual(st["layout"], "per-unit")
        self.assertEqual(st["units_planned"], 15)
        self.assertEqual(st["counts"], {"pending": 13, "running": 0, "done": 2,
                                        "failed": 0, "preempted": 0})
        u1 = [u for u in st["units"] if u["unit"] == unit(1)][0]
        self.assertEqual((u1["state"], u1["evals"], u1["budget_s"], u1["indexed"]),
                         ("done", 2, 600.0, True))
        self.assertGreater(u1["submission_s"], 0)
        # A unit stopped by a signal mid-trial is preempted until resumed.
        p = subprocess.Popen([apftest.APF, "run", self.path("e.apf"), "-o", self.run,
                              "--study", "0", "--trial", "3", "--threads", "1", "-q"],
                             env=self.env, cwd=self.tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        log = os.path.join(self.run, unit(3), "log.jsonl")
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if os.path.exists(log) and b'"trial_start"' in open(log, "rb").read():
                break
            time.sleep(0.01)
        if p.poll() is not None:
            p.communicate()
            self.skipTest("the unit ended before the signal")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=300)
        self.assertEqual(p.returncode, 3)
        st = json.loads(self.ok("status", self.run, "--json").out)
        u3 = [u for u in st["units"] if u["unit"] == unit(3)][0]
        self.assertEqual(u3["state"], "preempted", st)
        self.assertFalse(u3["indexed"])
        self.ok("run", self.path("e.apf"), "-o", self.run, "--study", "0", "--trial", "3",
                "--threads", "1", "--resume", timeout=300)
        st = json.loads(self.ok("status", self.run, "--json").out)
        self.assertEqual(st["counts"]["done"], 3)
        self.ok("verify", self.run)
        out = self.ok("status", self.run).out
        self.assertIn(f"{self.run}: 15 units planned: 3 done, 0 running, 0 failed, "
                      "0 preempted, 12 pending", out)
        self.assertRegex(out, unit(1) + r" +done +2 evals +\d+\.\d\d / 600\.00 s\n")
        # The budget is checked at evals, so the last block before the eval
        # that ends a trial may take it past its budget: status says why.
        rd = runfake.RunDir(self.run, self.key, unit=unit(1))
        rd.records[rd.find("trial_start", unit(1))[0]]["budget_ns"] = 1000
        rd.save()
        out = self.ok("status", self.run).out
        self.assertRegex(out, unit(1) + r" +done +2 evals +\d+\.\d\d / 0\.00 s "
                         r"\(over: the budget is checked at evals\)\n")


class SingleLogLayout(apftest.ApfCase):
    """A run made by apf before per-unit logs (tests/data/runs/single_log:
    nadamw on blobs_mlp, study 0 trial 1, one RUN/log.jsonl)."""

    DATA = os.path.join(apftest.ROOT, "tests", "data", "runs", "single_log")

    def setUp(self):
        super().setUp()
        self.run = self.path("run")
        shutil.copytree(os.path.join(self.DATA, "run"), self.run)
        self.pub = os.path.join(self.DATA, "key.pub.pem")

    def test_it_still_verifies_reevaluates_and_replays(self):
        r = self.ok("verify", self.run, "--key", self.pub, "--entry-key", self.pub,
                    "--reeval", "--replay", "all", timeout=300)
        self.assertRegex(r.out, r"2 log +passed +10 records chained, head")
        self.assertRegex(r.out, r"5 replay +passed +2 of 2 eval intervals")

    def test_it_scores_without_a_warning_about_its_log(self):
        r = self.ok("score", self.run, "--json")
        warnings = json.loads(r.out)["warnings"]
        self.assertFalse([w for w in warnings if "log" in w or "incomplete" in w], warnings)

    def test_tampering_is_still_caught(self):
        p = os.path.join(self.run, "log.jsonl")
        with open(p, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        with open(p, "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines[:-1]))
        r = self.fails(1, "verify", self.run, "--key", self.pub, "--entry-key", self.pub)
        self.assertIn("records were removed from the end", r.err)

    def test_the_runner_does_not_add_units_to_it(self):
        r = self.fails(2, "run", os.path.join(self.run, "entry.apf"), "-o", self.run,
                       "--entry-key", self.pub, "--study", "0", "--trial", "2",
                       "--allow-env-drift")
        self.assertIn("single-log layout", r.err)


class Preemption(RunCase):
    """SIGTERM or SIGUSR1 mid-trial: the unit stops where it is, making no
    eval, and --resume goes on from its last eval's checkpoint. A signal
    at a chosen moment buys no measurement there (issue 29: an operator
    who preempted at chosen moments once got evals the cadence would
    never have made, and a met target ended the unit at one)."""

    def start(self, sig):
        from test_verify import SLOW_SUBMISSION
        self.ok("keygen")
        self.write("slow/submission.ini", "[submission]\nname = slow\nauthors = tests\n"
                   "ruleset = external\n[tuning]\nstudies = 1\ntrials = 2\n")
        self.write("slow/submission.c", SLOW_SUBMISSION)
        self.write("slow/tuning_search_space.ini",
                   "[learning_rate]\nmin = 1e-4\nmax = 1e-2\nscaling = log\n")
        self.entry = self.path("slow.apf")
        self.ok("pack", self.path("slow"), "-w", apftest.BLOBS, "-o", self.entry)
        self.run = self.path("run")
        self.name = f"study_0/{apftest.BLOBS}/trial_1"
        p = subprocess.Popen([apftest.APF, "run", self.entry, "-o", self.run, "--study", "0",
                              "--trial", "1", "-q"], env=self.env, cwd=self.tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log = os.path.join(self.run, self.name, "log.jsonl")
        deadline = time.monotonic() + 120
        # Mid-trial: after its second eval (the budget allows about six).
        while p.poll() is None and time.monotonic() < deadline:
            if os.path.exists(log) and open(log, "rb").read().count(b'"event":"eval"') >= 2:
                break
            time.sleep(0.02)
        # Well inside the next eval period (1 s): where the old runner
        # made an early eval for the preemption.
        time.sleep(0.4)
        self.assertIsNone(p.poll(), "the trial ended before the signal")
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        return p.returncode, err

    def test_sigusr1_stops_without_an_eval_and_resumes(self):
        rc, err = self.start(signal.SIGUSR1)
        self.assertEqual(rc, 3, err)
        self.assertIn("preempted by SIGUSR1: stopped; a resume goes on from eval", err)
        self.assertIn("--resume", err.strip().splitlines()[-1])
        recs, _ = apftest.read_chain(os.path.join(self.run, self.name, "log.jsonl"))
        evals = [x for x in recs if x["event"] == "eval"]
        self.assertEqual([x["event"] for x in recs[-3:]], ["eval", "preempt", "run_end"])
        pre = recs[-2]
        self.assertEqual((pre["signal"], pre["after_eval"]), ("SIGUSR1", evals[-1]["index"]))
        # No eval at the signal: the last one is the cadence's, made
        # before it (the preemption came 0.4 s into the next period).
        self.assertEqual(len(evals), 2, evals)
        self.assertGreater(pre["t_ns"] - evals[-1]["end_ns"], 200_000_000)
        self.assertTrue(all(x["why"] == "due" for x in evals), evals)
        st = json.loads(self.ok("status", self.run, "--json").out)
        self.assertEqual(st["units"][0]["state"], "preempted")
        # Verified as far as it goes: incomplete (exit 3), never failed.
        r = self.fails(3, "verify", self.run)
        self.assertIn("interrupted and not resumed", r.err)
        # The requeued task: --resume goes on from the last eval.
        self.ok("run", self.entry, "-o", self.run, "--study", "0", "--trial", "1",
                "--resume", "-q", timeout=300)
        recs, _ = apftest.read_chain(os.path.join(self.run, self.name, "log.jsonl"))
        res = [x for x in recs if x["event"] == "resume"]
        self.assertEqual([(x["from_eval"], x["preemption_count"]) for x in res],
                         [(pre["after_eval"], 1)])
        self.assertEqual(recs[-2]["event"], "trial_end")
        r = self.ok("verify", self.run, "--replay", "all", timeout=600)
        self.assertIn("1 resume", r.out)
        self.assertRegex(r.out, r"\d+ replay +passed")
        with open(os.path.join(self.run, self.name, "eval_measurements.csv")) as f:
            rows = list(csv.DictReader(f))
        counts = [int(x["preemption_count"]) for x in rows]
        k = pre["after_eval"]
        self.assertEqual(counts, [0] * k + [1] * (len(rows) - k))

    def test_sigterm_stops_too_and_a_resume_must_go_on_from_its_eval(self):
        rc, err = self.start(signal.SIGTERM)
        self.assertEqual(rc, 3, err)
        self.assertIn("preempted by SIGTERM", err)
        self.ok("run", self.entry, "-o", self.run, "--study", "0", "--trial", "1",
                "--resume", "-q", timeout=300)
        self.ok("verify", self.run)
        # An operator's runner that drops an eval it disliked by resuming
        # from an earlier one than the preemption named: refused.
        rd = runfake.RunDir(self.run, os.path.join(self.home, "keys", "default.key.pem"))
        pre = [x for x in rd.records if x["event"] == "preempt"][0]
        res = [x for x in rd.records if x["event"] == "resume"][0]
        self.assertEqual(res["from_eval"], pre["after_eval"])
        res["from_eval"] = pre["after_eval"] - 1
        rd.save()
        r = self.fails(1, "verify", self.run)
        self.assertIn(f"but the unit was preempted after eval {pre['after_eval']}", r.err)


class Jobs(RunCase):
    def test_j2_runs_verify_and_each_unit_matches_its_run_alone(self):
        self.ok("keygen")
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", STEPS, "-o", entry)
        r = self.ok("run", entry, "-o", self.path("par"), "--study", "0", "-j", "2",
                    "--threads", "1", "--json", timeout=600)
        out = json.loads(r.out)
        self.assertEqual((out["completed"], out["failed"]), (5, 0))
        self.assertEqual(sorted(u["unit"] for u in out["units"]),
                         [unit(t) for t in range(1, 6)])
        v = self.ok("verify", self.path("par"))
        self.assertIn("5 units run (5 ended, 0 failed)", v.out)
        # A run of part of its plan verifies, and says what it has not run
        # (each counts as a miss when scored).
        planned = len(json.loads(self.ok("plan", entry, "--json").out)["units"])
        self.assertGreater(planned, 5)
        self.assertIn(f"; {planned - 5} of the plan's {planned} units not run (a score "
                      "counts each as a miss)", v.out)
        self.assertEqual(json.loads(self.ok("verify", self.path("par"), "--json").out)
                         ["units_planned"], planned)
        # Two at a time: some unit started before another ended.
        spans = []
        for t in range(1, 6):
            recs, _ = apftest.read_chain(os.path.join(self.path("par"), unit(t), "log.jsonl"))
            self.assertEqual(recs[0]["threads"], 1)
            spans.append((recs[0]["t_ns"], recs[-1]["t_ns"]))
        spans.sort()
        self.assertTrue(any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans)
        # Each unit alone, with the same thread count.
        for t in range(1, 6):
            self.ok("run", entry, "-o", self.path("seq"), "--study", "0", "--trial",
                    str(t), "--threads", "1", "-q", timeout=300)
        self.ok("verify", self.path("seq"))

        def trajectory(run, t):
            recs, _ = apftest.read_chain(os.path.join(self.path(run), unit(t), "log.jsonl"))
            start = [x for x in recs if x["event"] == "clock_start"][0]
            return [start["checkpoint"]["sha256"]] + [
                (x["index"], x["global_step"], x["metrics"], x["checkpoint"]["sha256"])
                for x in recs if x["event"] == "eval"]

        for t in range(1, 6):
            a, b = trajectory("par", t), trajectory("seq", t)
            self.assertEqual(len(a), 3, a)  # the initial state, steps 1 and 40
            self.assertEqual(a, b, unit(t))
            for ck in ("0.bin", "1.bin", "2.bin"):
                with open(os.path.join(self.path("par"), unit(t), "ckpt", ck), "rb") as f:
                    x = f.read()
                with open(os.path.join(self.path("seq"), unit(t), "ckpt", ck), "rb") as f:
                    self.assertEqual(x, f.read(), (unit(t), ck))

    def test_j_with_one_unit_left_runs_it(self):
        self.ok("keygen")
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", STEPS, "-o", entry)
        r = self.ok("run", entry, "-o", self.path("one"), "--study", "1", "--trial", "2",
                    "-j", "4", "--threads", "1", timeout=300)
        self.assertIn("1 unit completed, 0 failed", r.err)
        self.ok("verify", self.path("one"))

    def test_j_is_checked(self):
        r = self.fails(2, "run", "x.apf", "-j", "0")
        self.assertIn("-j takes 1 to 64", r.err)


if __name__ == "__main__":
    unittest.main()
