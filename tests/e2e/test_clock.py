"""The clock a run's submission time is measured by (rundir.h "the clock"):
`apf run --clock wall|cpu`, the CPU time and run-queue wait every step block
records, blocks short of cores, and `--budget-scale` for a quick look - from
the runner's side and from the attacker's (an operator holding the runner
key who edits what the blocks claim)."""
import json
import os
import shutil
import unittest

import apftest
import runfake
from apftest import ApfCase, BLOBS
from test_run import sandbox_available

UNIT = f"study_0/{BLOBS}/trial_1"


class ClockCase(ApfCase):
    def setUp(self):
        super().setUp()
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        self.key = os.path.join(self.home, "keys", "default.key.pem")

    def entry(self, ruleset="external"):
        name = "nadamw"
        shutil.copytree(os.path.join(apftest.ROOT, "submissions", "baselines", name),
                        self.path(name))
        if ruleset == "self":
            self.write(f"{name}/submission.ini",
                       f"[submission]\nname = {name}\nruleset = self\n"
                       "[tuning]\nstudies = 1\n")
        out = self.path(f"{name}.apf")
        if not os.path.exists(out):
            self.ok("pack", self.path(name), "-w", BLOBS, "-o", out)
        return out

    def run_unit(self, entry, run, *extra, trial="1"):
        return self.apf("run", entry, "-o", run, "--study", "0", "--trial", trial,
                        "-q", *extra, timeout=300)

    def records(self, run, unit=UNIT):
        return runfake.RunDir(run, None, unit=unit).records

    def blocks(self, run, unit=UNIT):
        return [r for r in self.records(run, unit) if r["event"] == "step_block"]

    def run_json(self, run):
        with open(os.path.join(run, "run.json")) as f:
            return json.load(f)

    def sign(self, run, recs, unit=UNIT):
        rd = runfake.RunDir(run, self.key, unit=unit)
        rd.records = recs
        rd.save()


class Clock(ClockCase):
    def test_cpu_clock_times_each_block_by_the_trials_cpu_time(self):
        entry = self.entry()
        run = self.path("cpu.run")
        r = self.run_unit(entry, run, "--clock", "cpu")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.run_json(run)["plan"]["clock"], "cpu")
        acc = 0
        blocks = self.blocks(run)
        self.assertTrue(blocks)
        for b in blocks:
            self.assertIn("cpu_ns", b)
            self.assertIn("wait_ns", b)
            acc += b["cpu_ns"] // 2
            self.assertEqual(b["accumulated_submission_ns"], acc, b)
        self.assertGreater(blocks[-1]["cpu_ns"], 0)
        v = self.ok("verify", run)
        self.assertIn("clock       cpu (the trial's CPU time over 2 cores)", v.out)
        j = json.loads(self.ok("verify", run, "--json").out)
        self.assertEqual(j["clock"]["name"], "cpu")
        self.assertEqual(j["clock"]["blocks"], len(blocks))
        self.assertTrue(j["official"])
        page = self.path("page.html")
        self.ok("report", run, "-o", page)
        with open(page) as f:
            self.assertIn("cpu: the trial&#39;s CPU time over 2 cores", f.read().replace("'", "&#39;"))

    def test_wall_clock_run_records_cpu_and_wait_and_reads_as_before(self):
        entry = self.entry()
        run = self.path("wall.run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 0, r)
        plan = self.run_json(run)["plan"]
        self.assertNotIn("clock", plan)
        self.assertNotIn("budget_scale", plan)
        acc = 0
        for b in self.blocks(run):
            acc += b["end_ns"] - b["start_ns"]
            self.assertEqual(b["accumulated_submission_ns"], acc)
            self.assertGreaterEqual(b["cpu_ns"], 0)
            self.assertGreaterEqual(b["wait_ns"], 0)
        v = self.ok("verify", run)
        self.assertIn("clock       wall (wall time, AlgoPerf's rule)", v.out)

    def test_budget_scale_shrinks_budget_and_period_and_is_unofficial(self):
        entry = self.entry(ruleset="self")
        run = self.path("quick.run")
        r = self.apf("run", entry, "-o", run, "-q", "--budget-scale", "0.5", timeout=300)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.run_json(run)["plan"]["budget_scale"], 0.5)
        start = [x for x in self.records(run) if x["event"] == "trial_start"][0]
        # blobs_mlp: 6 s and 1 s; self-tuning's budget is 1.5 times.
        self.assertEqual(start["budget_ns"], 4_500_000_000)
        self.assertEqual(start["eval_period_ns"], 500_000_000)
        # apf plan says beforehand what the run then gets.
        plan = json.loads(self.ok("plan", entry, "--budget-scale", "0.5", "--json").out)
        self.assertEqual(plan["budget"]["workloads"],
                         [{"workload": BLOBS, "budget_s": 4.5, "eval_period_s": 0.5,
                           "units": len(plan["units"])}])
        self.assertEqual(plan["budget"]["total_budget_s"], 4.5 * len(plan["units"]))
        text = self.ok("plan", entry, "--budget-scale", "0.5").out
        self.assertIn(f"{BLOBS} 4.5 s a trial (eval every 0.5 s)", text)
        self.assertIn("budgets x0.5: an unofficial run", text)
        self.assertNotIn("unofficial", self.ok("plan", entry).out)
        self.fails(2, "plan", entry, "--budget-scale", "1.5",
                   match="--budget-scale takes a number in (0, 1]")
        self.fails(2, "plan", entry, "--device", "tpu", match="--device takes cpu or cuda")
        v = self.ok("verify", run)
        self.assertIn("budget      scaled x0.5: UNOFFICIAL", v.out)
        self.assertFalse(json.loads(self.ok("verify", run, "--json").out)["official"])
        s = self.apf("score", run)
        self.assertIn("budget scaled x0.5 (apf run --budget-scale): a quick look, "
                      "unofficial", s.out + s.err)
        self.fails(2, "score", run, "--strict", match="budget scaled x0.5")

    def test_a_run_directory_keeps_its_clock_and_scale(self):
        entry = self.entry()
        run = self.path("keep.run")
        self.assertEqual(self.run_unit(entry, run, "--clock", "cpu").rc, 0)
        self.fails(2, "run", entry, "-o", run, "--study", "0", "--trial", "2", "-q",
                   "--clock", "wall", match="ran with --clock cpu --budget-scale 1; "
                   "give the same to add to it")
        self.fails(2, "run", entry, "-o", run, "--study", "0", "--trial", "2", "-q",
                   "--budget-scale", "0.5", match="ran with --clock cpu")
        # Not given: the directory's own.
        r = self.run_unit(entry, run, trial="2")
        self.assertEqual(r.rc, 0, r)
        acc = 0
        for b in self.blocks(run, f"study_0/{BLOBS}/trial_2"):
            acc += b["cpu_ns"] // 2
            self.assertEqual(b["accumulated_submission_ns"], acc)
        self.ok("verify", run)

    def test_bad_options_are_refused_before_anything_runs(self):
        entry = self.entry()
        run = self.path("bad.run")
        self.fails(2, "run", entry, "-o", run, "--clock", "tsc",
                   match="--clock takes wall or cpu")
        for bad in ("0", "1.5", "-1", "half", "nan"):
            self.fails(2, "run", entry, "-o", run, "--budget-scale", bad,
                       match="--budget-scale takes a number in (0, 1]")
        self.fails(2, "run", entry, "-o", run, "--clock", "cpu", "--device", "cuda",
                   match="--clock cpu: measures CPU work")
        self.assertFalse(os.path.exists(run))


class ClockForgery(ClockCase):
    """An operator with the runner key edits what the blocks claim."""

    def cpu_run(self):
        entry = self.entry()
        run = self.path("cpu.run")
        r = self.run_unit(entry, run, "--clock", "cpu")
        self.assertEqual(r.rc, 0, r)
        return run

    def test_a_block_without_its_cpu_time_fails_under_the_cpu_clock(self):
        run = self.cpu_run()
        recs = self.records(run)
        for r in recs:
            if r["event"] == "step_block":
                del r["cpu_ns"]
                break
        self.sign(run, recs)
        self.fails(1, "verify", run, match="has no cpu_ns, and the run's clock is cpu")

    def test_a_smaller_cpu_time_with_the_sums_left_fails_check_3(self):
        run = self.cpu_run()
        recs = self.records(run)
        b = [r for r in recs if r["event"] == "step_block"][-1]
        b["cpu_ns"] //= 2
        self.sign(run, recs)
        self.fails(1, "verify", run, match="differs from the sum of the step blocks")

    def test_the_clock_cannot_be_switched_in_run_json(self):
        # A cpu-clock run whose run.json is rewritten to say wall (re-bound
        # and re-signed): every sum is then the wall sum's, which it is not.
        run = self.cpu_run()
        rd = runfake.RunDir(run, self.key, unit=UNIT)
        rj = dict(rd.run_json)
        del rj["plan"]["clock"]
        rd.write_run_json(rj)
        sha = runfake.sha256_hex(rd.run_json_bytes)
        for r in rd.records:
            if r["event"] == "run_start":
                r["run_json_sha256"] = sha
        rd.save()
        rd.sign_index({UNIT: {"records": len(rd.lines),
                              "head": runfake.sha256_hex(rd.lines[-1])}}, replace=True)
        self.fails(1, "verify", run, match="differs from the sum of the step blocks")

    def test_under_reported_cpu_time_breaks_the_cadence(self):
        # Every block after the first claims a thousandth of its CPU time,
        # with every sum, the CSV and time-to-target consistent: each eval
        # then came before its period of the clock had passed, which only
        # a trial's final eval may. What is left to shave off is the lead
        # of each block (the steps after an eval was asked for), and the
        # replay, timed by the same clock, holds that against the claim.
        run = self.cpu_run()
        recs = self.records(run)
        sub, ttt = 0, None
        for r in recs:
            if r["event"] == "step_block":
                if r["first_step"] > 1:
                    r["cpu_ns"] //= 1000
                sub += r["cpu_ns"] // 2
                r["accumulated_submission_ns"] = sub
            elif r["event"] == "eval":
                r["accumulated_submission_ns"] = sub
                r["total_duration_ns"] = (sub + r["accumulated_eval_ns"]
                                          + r["accumulated_logging_ns"])
                if r["validation_target_met"] and ttt is None:
                    ttt = sub
            elif r["event"] == "trial_end":
                r["accumulated_submission_ns"] = sub
                r["time_to_target_ns"] = ttt
        self.sign(run, recs)
        runfake.RunDir(run, self.key, unit=UNIT).write_csv(UNIT)
        r = self.fails(1, "verify", run, match="check 3 (timing)")
        self.assertIn("came before the eval period had passed", r.err)

    def test_an_honest_cpu_clock_run_replays_within_the_tolerance(self):
        # Replays are timed by the run's clock: an honest run's claimed /
        # replayed ratio is near 1 whatever else this machine runs (the
        # tolerance of 20 leaves room for a machine that is not quiet).
        run = self.cpu_run()
        r = self.ok("verify", run, "--replay", "all", "--timing-tolerance", "20",
                    timeout=600)
        self.assertIn("within the tolerance", r.out)


class ShortOfCores(ClockCase):
    """Blocks whose threads waited for a core: the wait each records is the
    runner's word, so these tests set it in the log (re-signed) rather
    than load the machine, whose outcome would depend on its timing."""

    def starved(self, clock):
        entry = self.entry(ruleset="self")
        run = self.path(f"{clock}.run")
        r = self.apf("run", entry, "-o", run, "-q", "--clock", clock, timeout=300)
        self.assertEqual(r.rc, 0, r)
        recs = self.records(run)
        threads = self.run_json(run)["threads"]
        n = 0
        for r in recs:
            if r["event"] == "step_block":
                # Half their thread-time: short, where that is also over
                # 50 ms a thread (rundir.h; the first block, one step,
                # is not).
                r["wait_ns"] = (r["end_ns"] - r["start_ns"]) * threads // 2
                n += r["wait_ns"] > 50_000_000 * threads
        self.assertGreater(n, 0)
        self.sign(run, recs)
        return run, n

    def test_under_the_wall_clock_they_are_said_and_strict_refuses_them(self):
        run, n = self.starved("wall")
        v = self.ok("verify", run)
        self.assertRegex(v.out, f" {n} of \\d+ step blocks short of cores")
        self.assertIn("their times are the machine's as much as the submission's", v.out)
        j = json.loads(self.ok("verify", run, "--json").out)
        self.assertEqual(j["clock"]["short_of_cores"], n)
        s = self.apf("score", run)
        self.assertRegex(s.out + s.err, f"{n} of \\d+ step blocks short of cores under "
                         "the wall clock")
        self.fails(2, "score", run, "--strict", match="short of cores under the wall clock")

    def test_under_the_cpu_clock_they_are_said_not_refused(self):
        run, n = self.starved("cpu")
        v = self.ok("verify", run)
        self.assertRegex(v.out, f" {n} of \\d+ step blocks short of cores")
        self.assertIn("not counted by this clock", v.out)
        # Nothing the clock counted: no warning, and --strict scores it.
        s = self.ok("score", run, "--strict")
        self.assertNotIn("short of cores", s.out + s.err)


if __name__ == "__main__":
    unittest.main()
