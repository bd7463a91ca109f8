"""Interrupts of apf run, sent as an operator sends them: SIGINT or SIGTERM
to the whole process group (as a terminal's ^C and `timeout -s INT` do),
once or twice in a row, at delays spread over a run (its build, set-up,
steps, evals and checkpoints). Every unit must end as it would have or be
left resumable, never recorded as failed by the interrupt; and apf verify's
verdict and `apf run --resume` must agree, so the two never send the user
round in a loop.

A unit that did end (failed, here) in a session stopped before its run_end
is closed by the next run, not left for a --resume that would refuse it.
"""
import json
import os
import signal
import subprocess
import time

import apftest
import runfake
from apftest import BLOBS
import test_run
from test_run import RunCase

UNITS = [f"study_{s}/{BLOBS}/trial_1" for s in (0, 1)]


class Interrupt(RunCase):
    def pack_two_units(self):
        src = self.path("lion")
        with open(os.path.join(apftest.ROOT, "submissions", "lion", "submission.c")) as f:
            self.write("lion/submission.c", f.read())
        self.write("lion/submission.ini", "[submission]\nname = lion\nruleset = self\n"
                   "[tuning]\nstudies = 2\n")
        entry = self.path("lion.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry)
        return entry

    def interrupted_run(self, entry, run, delay, sigs):
        """apf run in its own process group, which gets sigs (0.05 s apart)
        after delay, as a terminal's foreground group gets ^C."""
        p = subprocess.Popen([apftest.APF, "run", entry, "-o", run], env=self.env,
                             cwd=self.tmp, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(delay)
        for k, sig in enumerate(sigs):
            if k:
                time.sleep(0.05)
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        _, err = p.communicate(timeout=120)
        return p.returncode, err

    def assert_no_failure(self, run, where):
        for name, path in apftest.unit_logs(run).items():
            with open(path, "rb") as f:
                lines = f.read().split(b"\n")
            for line in lines:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line (the second signal's)
                if rec["event"] in ("trial_end", "sandbox_fault"):
                    self.assertFalse(rec.get("failed", False) or rec["event"] == "sandbox_fault",
                                     f"{where}: {name}: {rec}")

    def test_signals_at_many_points_leave_every_unit_resumable_never_failed(self):
        entry = self.pack_two_units()
        t0 = time.time()
        self.ok("run", entry, "-o", self.path("clean"), timeout=300)
        length = time.time() - t0
        kinds = [(signal.SIGINT,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGINT),
                 (signal.SIGTERM, signal.SIGINT)]
        tries = 12
        resumed = 0
        # The delays span the clean run's length; a run that finished
        # before its signal went faster than the clean one (the load
        # changed), so the later delays are aimed earlier.
        scale = 1.0
        for k in range(tries):
            sigs = kinds[k % len(kinds)]
            # From the first build to the second unit's last eval.
            delay = 0.1 + (length * scale - 0.1) * k / (tries - 1)
            run = self.path(f"run{k}")
            rc, err = self.interrupted_run(entry, run, delay, sigs)
            where = (f"{'+'.join(signal.Signals(s).name for s in sigs)} at {delay:.2f}s "
                     f"of {length:.2f}s: rc {rc}: {err[-600:]}")
            self.assertNotIn("crashed", err, where)
            self.assertNotIn("failed:", err, where)
            self.assertNotIn("Sanitizer", err, where)
            self.assertIn(rc, (0, 3, -signal.SIGINT, -signal.SIGTERM), where)
            if not os.path.exists(os.path.join(run, "run.json")):
                # Stopped before the run directory was made: a new run.
                self.ok("run", entry, "-o", run, timeout=300)
                continue
            self.assert_no_failure(run, where)
            v = self.apf("verify", run)
            if v.rc == 3:
                # Incomplete: verify sends the user to --resume, which must
                # then finish the run.
                self.assertIn("apf run --resume continues it", v.err, where)
            else:
                self.assertEqual(v.rc, 0, f"{where}\n{v}")
            r = self.apf("run", entry, "-o", run, "--resume", timeout=300)
            self.assertEqual(r.rc, 0, f"{where}\n{r}")
            if "--resume" in err:
                resumed += 1
            else:
                scale *= 0.75
            self.assert_no_failure(run, where)
            self.ok("verify", run)
            recs = self.check_run(run)
            ends = [x for x in recs if x["event"] == "trial_end"]
            self.assertEqual(sorted(x["unit"] for x in ends), UNITS, where)
            # Resuming again has nothing left: not an error, not a loop.
            again = self.apf("run", entry, "-o", run, "--resume", timeout=300)
            self.assertEqual(again.rc, 0, f"{where}\n{again}")
            self.assertIn("not run again", again.err, where)
        # The signals landed inside runs, not only after them.
        self.assertGreater(resumed, tries // 2)

    def test_a_unit_ended_failed_in_a_session_stopped_before_run_end_is_closed(self):
        entry = self.pack_source("err7", test_run.ExitStatus.ERROR_AT_3)
        run = self.path("run")
        unit = f"study_0/{BLOBS}/trial_1"
        self.assertEqual(self.run_unit(entry, run).rc, 3)
        # The state a runner stopped between trial_end and run_end leaves
        # (apf before this fix, or a crash there): the log ends with the
        # failed trial_end, its head signed, the index not naming it yet.
        rd = runfake.RunDir(run, os.path.join(self.home, "keys", "default.key.pem"), unit=unit)
        self.assertEqual(rd.records[-1]["event"], "run_end")
        rd.records.pop()
        rd.save()
        rd.sign_index({}, replace=True)
        v = self.apf("verify", run)
        self.assertEqual(v.rc, 3, v)
        self.assertIn(f"the log of {unit} ends without run_end", v.err)
        self.assertIn("apf run --resume continues it", v.err)
        # --resume does what verify says: the run ends, nothing is rerun
        # and the failure stays the submission's.
        r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1", "--resume")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"apf: run: {unit}: had ended (failed) in a session stopped before "
                      "its run_end: closed its log\n", r.err)
        self.assertIn(f"{unit}: already ended in this run directory (failed); not run again",
                      r.err)
        self.ok("verify", run)
        recs = self.check_run(run)
        self.assertEqual([x["event"] for x in recs][-2:], ["trial_end", "run_end"])
        self.assertEqual([(x["failed"], x["reason"]) for x in recs if x["event"] == "trial_end"],
                         [(True, "error")])
        end = recs[-1]
        self.assertEqual((end["units"], end["completed"], end["failed"]), (1, 0, 1), end)

    def test_a_trial_that_kills_itself_with_sigint_is_its_own_crash_not_a_retry(self):
        # "Interrupted" is the supervisor's own signal flag, never how the
        # trial died: a submission cannot buy a retry by dying of SIGINT.
        code = test_run.HOSTILE_HEAD + "static void hostile(apf_ctx *c) { (void)c; raise(SIGINT); }\n"
        entry = self.pack_source("selfint", code)
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 3, r)
        self.assertIn("crashed: SIGINT", r.err)
        self.assertNotIn("--resume", r.err)
        ends = [x for x in self.check_run(run) if x["event"] == "trial_end"]
        self.assertEqual([x["failed"] for x in ends], [True])
        self.ok("verify", run)
        r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1", "--resume")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("already ended in this run directory (failed); not run again", r.err)
