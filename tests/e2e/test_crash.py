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


def killed_before_its_lock(tmpdir, name):
    """A work directory as lock_work_dir leaves it before its lock."""
    return set(os.listdir(os.path.join(tmpdir, name))) <= {".lock.new"}


class Crash(RunCase):
    def test_a_runner_killed_before_its_lock_is_swept_an_hour_later(self):
        entry = self.pack_baseline()
        hours_ago = time.time() - 2 * 3600

        def work_dir(name, *files, mtime=hours_ago):
            d = os.path.join(self.scratch, name)
            os.mkdir(d)
            for f in files:
                self.write(os.path.join(d, f), "")
            os.utime(d, (mtime, mtime))
            return d

        # Killed before the lock, two hours ago: empty, or with .lock.new.
        work_dir("apf-run-Old0Aa")
        work_dir("apf-run-Old1Bb", ".lock.new")
        # Another runner between mkdtemp and its lock right now.
        work_dir("apf-run-New0Cc", ".lock.new", mtime=time.time())
        # An older apf's (it did not lock): not the sweep's to judge.
        work_dir("apf-run-Old2Dd", "hparams.json")
        # A link under a work directory's name, to an old empty directory.
        target = os.path.join(self.tmp, "elsewhere")
        os.mkdir(target)
        os.utime(target, (hours_ago, hours_ago))
        os.symlink(target, os.path.join(self.scratch, "apf-run-Lnk0Ee"))
        kept = ["apf-run-Lnk0Ee", "apf-run-New0Cc", "apf-run-Old2Dd"]
        if os.geteuid() == 0:
            # Another user's, planted to look dead both ways (as root, CI,
            # the test can give it away): not this runner's to remove.
            for name, f in (("apf-run-Oth0Ff", ".lock.new"), ("apf-run-Oth1Gg", ".lock")):
                d = work_dir(name, f)
                os.chown(os.path.join(d, f), 65534, 65534)
                os.chown(d, 65534, 65534)
                os.utime(d, (hours_ago, hours_ago))
                kept.append(name)
        self.assertEqual(self.run_unit(entry, self.path("r")).rc, 0)
        self.assertEqual(sorted(os.listdir(self.scratch)), sorted(kept))
        self.assertTrue(os.path.isdir(target))

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
            # (its lock was free), and that run removed its own. A kill
            # between mkdtemp and the lock leaves a directory with nothing
            # but .lock.new, which runs sweep an hour later (the test below).
            self.assertEqual([d for d in os.listdir(self.scratch)
                              if not killed_before_its_lock(self.scratch, d)], [], where)
        # The kills landed inside trials too, not only around them.
        self.assertTrue(any(f > 0 for f in from_evals), from_evals)
