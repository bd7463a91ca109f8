"""Crash test of the sealed runner: kill -9 the supervisor at random points
of a run, then `apf run --resume`; every time, the finished run's log chain,
signed head, checkpoints and CSVs must check out, with no torn line.

The points are drawn from a fixed seed so a failure reproduces; the seed
and the kill time are in every failure message.
"""
import fcntl
import os
import random
import signal
import subprocess
import time

import apftest
from apftest import BLOBS
from test_run import RunCase

KILLS = int(os.environ.get("APF_CRASH_KILLS", "20"))


def wait_for_free_locks(tmpdir, limit_s=60):
    """Until no apf-run-*/.lock under tmpdir is held (at most limit_s)."""
    deadline = time.monotonic() + limit_s
    while True:
        held = []
        for d in os.listdir(tmpdir):
            lock = os.path.join(tmpdir, d, ".lock")
            if not d.startswith("apf-run-") or not os.path.exists(lock):
                continue
            with open(lock) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(f, fcntl.LOCK_UN)
                except BlockingIOError:
                    held.append(d)
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.05)


class Crash(RunCase):
    def test_kill_9_at_random_points_then_resume(self):
        src = self.path("sfa")
        base = os.path.join(apftest.ROOT, "submissions", "baselines", "schedule_free_adamw")
        for f in ("submission.c", "tuning_search_space.ini"):
            with open(os.path.join(base, f)) as a:
                self.write(f"sfa/{f}", a.read())
        self.write("sfa/submission.ini", "[submission]\nname = sfa\nruleset = self\n"
                   "[tuning]\nstudies = 2\n")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry)
        # How long an uninterrupted run takes, to spread the kills over it.
        t0 = time.time()
        clean = self.path("clean")
        self.assertEqual(self.apf("run", entry, "-o", clean, timeout=300).rc, 0)
        length = time.time() - t0
        rng = random.Random(1130)
        from_evals = []
        env = dict(self.env)
        for k in range(KILLS):
            run = self.path(f"run{k}")
            delay = rng.uniform(0.0, length)
            p = subprocess.Popen([apftest.APF, "run", entry, "-o", run, "-q"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait()
            # The killed runner's children (the sandbox, the evaluator)
            # share its work directory's lock until their death signals
            # reach them, which a loaded machine delays: wait for the
            # lock, not a fixed time, so the sweep below does not depend
            # on the load.
            wait_for_free_locks(self.scratch)
            args = ["run", entry, "-o", run]
            if os.path.exists(run):
                args.append("--resume")
            r = self.apf(*args, timeout=300)
            where = f"kill {k} at {delay:.2f}s of {length:.2f}s (seed 1130)"
            self.assertEqual(r.rc, 0, f"{where}: {r}")
            recs = self.check_run(run)
            ends = [x for x in recs if x["event"] == "trial_end"]
            self.assertEqual(sorted(x["unit"] for x in ends),
                             [f"study_{s}/{BLOBS}/trial_1" for s in (0, 1)], where)
            self.assertTrue(all(not x["failed"] for x in ends), f"{where}: {ends}")
            # Resumed units say so, and count their preemptions.
            resumes = [x for x in recs if x["event"] == "resume"]
            for x in resumes:
                self.assertGreaterEqual(x["preemption_count"], 1, where)
            from_evals += [x["from_eval"] for x in resumes]
            # The killed runner's work directory was swept by the next run
            # (its lock was free), and that run removed its own.
            self.assertEqual(os.listdir(self.scratch), [], where)
        # The kills landed inside trials too, not only around them.
        self.assertTrue(any(f > 0 for f in from_evals), from_evals)
