"""scripts/bench.sh, the driver behind `make bench`, on stand-in benches in
a scratch copy of the tree: each of the three kinds of bench runs (run.sh,
an executable `run`, programs built from the bench's C files), every bench
runs even after one fails, the RESULT lines are repeated as a summary, a
bench that fails or prints a malformed RESULT line is named and makes the
whole command fail, and one that prints no RESULT line is a skip. Each
bench runs under scripts/quiet.py, whose verdicts on the machine's load
and on the rounds' spread are tested here on given figures (a test cannot
make a machine quiet or busy on demand)."""
import contextlib
import io
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from apftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import quiet  # noqa: E402

LOAD = ("foreign_cpu_share", "steal_share", "loadavg_before", "loadavg_after")

# name -> {file: (mode, text)}; "build:" files go under build/bench/<name>/.
BENCHES = {
    "alpha": {"run.sh": (0o644, "echo 'bench alpha: warming up'\n"
                         "echo 'RESULT alpha speed_ratio 1.25'\n"
                         "echo 'RESULT alpha size_ratio 0.5'\n")},
    "broken": {"run.sh": (0o644, "echo 'RESULT broken half 3'\n"
                          "echo 'peer missing' >&2\nexit 3\n")},
    "empty": {"README": (0o644, "nothing to run here\n")},
    "mute": {"run.sh": (0o644, "echo 'bench mute: skipped: no namespaces' >&2\n")},
    "prog": {"build:one": (0o755, "echo 'RESULT prog one_ms 2.5'\n"),
             "build:two": (0o755, "echo 'RESULT prog two_ms 1e-3'\n")},
    "script": {"run": (0o755, "test -d \"$1\" || exit 9\n"
                       "echo 'RESULT script build_dir_given 1'\n")},
    "sloppy": {"run.sh": (0o644, "echo 'RESULT sloppy ratio fast'\n")},
    # A bench whose rounds disagree, judged as the Python benches judge
    # theirs.
    "wobbly": {"run": (0o755, "echo 'RESULT wobbly ratio 2.5'\n"
                       "python3 scripts/quiet.py rounds wobbly "
                       "step/apf=1.0,1.02,0.99 step/peer=1.0,1.5,0.8\n")},
}


class BenchScript(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-bench-")
        os.makedirs(os.path.join(self.tmp, "scripts"))
        for f in ("bench.sh", "quiet.py"):
            shutil.copy(os.path.join(ROOT, "scripts", f), os.path.join(self.tmp, "scripts", f))
        for name, files in BENCHES.items():
            os.makedirs(os.path.join(self.tmp, "bench", name))
            for f, (mode, body) in files.items():
                if f.startswith("build:"):
                    p = os.path.join(self.tmp, "build", "bench", name, f[6:])
                else:
                    p = os.path.join(self.tmp, "bench", name, f)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w") as fh:
                    fh.write(("#!/bin/bash\n" if f != "README" else "") + body)
                os.chmod(p, mode)
        os.makedirs(os.path.join(self.tmp, "build"), exist_ok=True)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def bench(self, *args, env=None):
        # The machine's own load is not what these tests are about (judge()
        # is, in QuietVerdicts): under a busy machine - make check beside
        # make test - its stand-in benches would be said NOT QUIET, so the
        # limits are opened here (a test may still set its own).
        quiet_any = {"APF_BENCH_MAX_FOREIGN": "1", "APF_BENCH_MAX_STEAL": "1"}
        return subprocess.run(["bash", os.path.join(self.tmp, "scripts", "bench.sh"),
                               *args], cwd=self.tmp, capture_output=True, text=True,
                              env={**os.environ, **quiet_any, **(env or {})},
                              timeout=60)

    def test_all_run_failures_named_summary_at_the_end(self):
        p = self.bench("build")
        self.assertEqual(p.returncode, 1, p)
        out = p.stdout
        summary = out[out.index("bench summary:"):].splitlines()
        self.assertEqual(summary[0], "bench summary: 3 passed, 4 failed, 1 skipped")
        results = [l for l in summary if l.startswith("RESULT ")]
        self.assertEqual([l for l in results if l.split()[2] not in LOAD], [
            "RESULT alpha speed_ratio 1.25", "RESULT alpha size_ratio 0.5",
            "RESULT broken half 3", "RESULT prog one_ms 2.5",
            "RESULT prog two_ms 1e-3", "RESULT script build_dir_given 1",
            "RESULT wobbly ratio 2.5", "RESULT wobbly step_apf_spread 0.030",
            "RESULT wobbly step_peer_spread 0.700"])
        # Every bench with results has the machine's load beside them; a
        # skipped one's load lines do not make it a result.
        for bench in ("alpha", "broken", "prog", "script", "wobbly"):
            self.assertEqual([l.split()[2] for l in results
                              if l.split()[1] == bench and l.split()[2] in LOAD],
                             list(LOAD), bench)
        self.assertFalse([l for l in results if l.split()[1] in ("mute", "empty")])
        skipped = [l for l in summary if l.startswith("SKIPPED ")]
        self.assertEqual(len(skipped), 1, out)
        self.assertTrue(skipped[0].startswith(
            "SKIPPED mute (bench mute: skipped: no namespaces; log:"), summary)
        failed = [l for l in summary if l.startswith("FAILED ")]
        self.assertEqual(len(failed), 4, out)
        self.assertIn("FAILED broken (exit status 3;", failed[0])
        self.assertIn("FAILED empty (exit status 127;", failed[1])
        self.assertIn("FAILED sloppy (malformed line 'RESULT sloppy ratio fast'",
                      failed[2])
        self.assertIn("FAILED wobbly (not to be believed: step: NOT STEADY: peer's 3 "
                      "rounds spread 70% of their median (limit 10%);", failed[3])
        self.assertIn("bench: broken FAILED", p.stderr)
        # Each bench's whole output is kept, stderr included.
        with open(os.path.join(self.tmp, "build", "bench", "broken.log")) as f:
            self.assertIn("peer missing", f.read())
        with open(os.path.join(self.tmp, "build", "bench", "empty.log")) as f:
            self.assertIn("no run.sh, no executable run, and no program", f.read())

    def test_figures_kept_when_asked_and_said_to_be_unsteady(self):
        p = self.bench("build", env={"BENCH": "wobbly", "APF_BENCH_KEEP_GOING": "1"})
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("bench summary: 1 passed, 0 failed, 0 skipped", p.stdout)
        self.assertIn("bench wobbly: step: NOT STEADY: peer's 3 rounds spread 70% of "
                      "their median (limit 10%) (kept: APF_BENCH_KEEP_GOING)", p.stdout)
        p = self.bench("build", env={"BENCH": "wobbly", "APF_BENCH_MAX_SPREAD": "0.8"})
        self.assertEqual(p.returncode, 0, p)
        self.assertNotIn("NOT STEADY", p.stdout + p.stderr)
        p = self.bench("build", env={"BENCH": "wobbly", "APF_BENCH_MAX_SPREAD": "ten"})
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("apf: bench: APF_BENCH_MAX_SPREAD='ten': not a number", p.stdout)

    def test_selection_and_success(self):
        p = self.bench("build", env={"BENCH": "alpha script mute"})
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("bench summary: 2 passed, 0 failed, 1 skipped", p.stdout)
        self.assertNotIn("sloppy", p.stdout)
        p = self.bench("build", env={"BENCH": "nosuch"})
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("apf: bench: no bench matches", p.stderr)

    def test_usage(self):
        p = self.bench()
        self.assertEqual(p.returncode, 2)
        self.assertTrue(p.stderr.startswith("apf: bench: usage"), p.stderr)
        p = self.bench(os.path.join(self.tmp, "absent"))
        self.assertEqual(p.returncode, 2)


class QuietVerdicts(unittest.TestCase):
    """scripts/quiet.py's verdicts, on given measurements."""

    def test_other_work_and_steal_make_a_run_not_quiet(self):
        # 10 s on 2 cores: 20 core-seconds. The bench's own 9.5 s of the
        # 10 busy leave 0.5 s to others: 2.5%, quiet.
        foreign, steal, why, judged = quiet.judge(10, 2, 10.0, 0.0, 9.5, 0.05, 0.05)
        self.assertEqual((round(foreign, 3), steal, why, judged), (0.025, 0.0, None, True))
        # A busy loop beside it: one core's 10 s more.
        foreign, _, why, _ = quiet.judge(10, 2, 20.0, 0.0, 9.5, 0.05, 0.05)
        self.assertAlmostEqual(foreign, 0.525)
        self.assertEqual(why, "other work took 52% of the 2 cores' time (limit 5%)")
        _, steal, why, _ = quiet.judge(10, 2, 9.5, 2.0, 9.5, 0.05, 0.05)
        self.assertAlmostEqual(steal, 0.1)
        self.assertEqual(why, "the hypervisor took 10% of it for other guests (limit 5%)")
        # The bench's own time over the ticks counted (rounding) is not
        # negative work by others.
        self.assertEqual(quiet.judge(10, 2, 9.0, 0.0, 9.5, 0.05, 0.05)[0], 0.0)

    def test_a_run_too_short_for_the_ticks_is_not_judged(self):
        foreign, _, why, judged = quiet.judge(0.5, 2, 1.0, 0.0, 0.0, 0.05, 0.05)
        self.assertEqual((foreign, why, judged), (1.0, None, False))

    def test_spread(self):
        self.assertAlmostEqual(quiet.spread([100, 110, 90]), 0.2)
        self.assertEqual(quiet.spread([5.0]), 0.0)
        self.assertIsNone(quiet.unsteady("b", "c", "apf", 0.1, 3))
        self.assertEqual(quiet.unsteady("b", "c", "apf", 0.11, 3),
                         "bench b: c: NOT STEADY: apf's 3 rounds spread 11% of their "
                         "median (limit 10%)")

    def test_the_spread_is_the_median_s_95_percent_interval(self):
        # The ranks of the distribution-free interval: P(Binomial(n, 1/2)
        # < k) <= 2.5%, whole range below 9 rounds.
        self.assertEqual([quiet.interval_rank(n) for n in range(2, 16)],
                         [1] * 7 + [2, 2, 2, 3, 3, 3, 4])
        for n, k in ((9, 2), (12, 3), (15, 4)):
            miss = sum(math.comb(n, i) for i in range(k)) / 2 ** n
            self.assertLessEqual(miss, 0.025)
            self.assertGreater(miss + math.comb(n, k) / 2 ** n, 0.025)
        # One stalled round in nine cannot move the median, and is left
        # out as the median leaves it out ...
        stalled = [100, 101, 99, 100, 102, 98, 100, 101, 40]
        self.assertEqual(quiet.median_interval(stalled), (98, 101))
        self.assertAlmostEqual(quiet.spread(stalled), 0.03)
        # ... but below nine rounds it counts, as before.
        self.assertAlmostEqual(quiet.spread(stalled[1:]), (102 - 40) / 100)
        # A side that is two things at once (a thread pool that spins
        # against another: PyTorch's default threading, issue 36) is not
        # steady however many rounds it has.
        bimodal = [50, 100] * 6 + [100]
        self.assertGreater(quiet.spread(bimodal), 0.4)
        # Two stalls on the same side are more than one interval of nine
        # leaves out.
        self.assertGreater(quiet.spread([100] * 7 + [40, 45]), 0.5)
        self.assertEqual(
            quiet.unsteady("b", "c", "apf", 0.5, 9),
            "bench b: c: NOT STEADY: apf's 9 rounds spread 50% of their median "
            "(the median's 95% interval: all but the highest and the lowest) "
            "(limit 10%)")

    def test_a_ratio_is_judged_by_its_pairs(self):
        # The machine's speed halves and comes back between rounds: both
        # sides wander 67%, each pair's ratio is 3.0 or near it.
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ratio, bad, wander = quiet.pairs("b", "c", {"apf": [300, 150, 306],
                                                        "torch": [100, 50, 100]})
        self.assertAlmostEqual(ratio, 3.0)
        self.assertEqual(bad, [])
        self.assertEqual(wander, [
            "bench b: c: WANDERS: apf's 3 rounds spread 52% of their median (limit "
            "10%): its figure is the machine's of the moment; the ratio is judged by "
            "its pairs",
            "bench b: c: WANDERS: torch's 3 rounds spread 50% of their median (limit "
            "10%): its figure is the machine's of the moment; the ratio is judged by "
            "its pairs"])
        self.assertEqual(out.getvalue().splitlines(), [
            "RESULT b c_apf_spread 0.520", "RESULT b c_torch_spread 0.500",
            "RESULT b c_ratio_spread 0.020"])
        # The peer alone slowed in one round: apf steady, its pairs
        # disagree. The ratio is not to be believed, however steady a
        # side.
        with contextlib.redirect_stdout(io.StringIO()):
            ratio, bad, wander = quiet.pairs("b", "c", {"apf": [300, 300, 300],
                                                        "torch": [100, 80, 100]})
        self.assertEqual(ratio, 3.0)
        self.assertEqual([w.split(":")[2] for w in wander], [" WANDERS"])
        self.assertIn("torch's 3 rounds spread 20%", wander[0])
        self.assertEqual(bad, ["bench b: c: NOT STEADY: ratio's 3 pairs spread 25% of "
                               "their median (limit 10%)"])
        with self.assertRaises(ValueError):
            quiet.pairs("b", "c", {"apf": [1.0, 2.0], "torch": [1.0]})
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(quiet.judged("b", "c", "roofline_fraction", [0.5, 0.7, 0.5]),
                             ["bench b: c: NOT STEADY: roofline_fraction's 3 rounds "
                              "spread 40% of their median (limit 10%)"])

    def test_command_line(self):
        q = [sys.executable, os.path.join(ROOT, "scripts", "quiet.py")]
        p = subprocess.run(q + ["x", "--", "sh", "-c", "echo hi; exit 3"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 3, p)
        self.assertTrue(p.stdout.startswith("hi\nbench x: "), p.stdout)
        self.assertIn("(too short to judge)", p.stdout)
        self.assertEqual([l.split()[2] for l in p.stdout.splitlines()
                          if l.startswith("RESULT x ")], list(LOAD))
        for bad in ([], ["x", "sh"], ["", "--", "true"]):
            p = subprocess.run(q + bad, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, (bad, p))
            self.assertIn("apf: bench: usage: scripts/quiet.py", p.stderr)
        p = subprocess.run(q + ["x", "--", "/nonexistent/prog"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 127, p)
        self.assertIn("apf: bench: /nonexistent/prog: No such file or directory", p.stderr)


def load_train_step_run():
    """bench/train_step/run as a module (it has no .py suffix)."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(ROOT, "bench", "train_step", "run")
    loader = importlib.machinery.SourceFileLoader("train_step_run", path)
    spec = importlib.util.spec_from_loader("train_step_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


# A stand-in for a side in its serve mode (train_step.c's serve(),
# peer_torch.py's serve()): its static figures and `ready`, then answers.
FAKE_SIDE = r"""
import sys
how = sys.argv[1]
print("step_flops 1000\nready", flush=True)
asked = 0
for line in iter(sys.stdin.readline, ""):
    asked += 1
    if how == "dies" and asked == 2:
        sys.exit("fake side: out of memory at its second command")
    if how == "garbles":
        print("samples_per_s fast")
    elif line == "steps\n":
        print(f"samples_per_s {100 * asked}")
    else:
        print("sgemm_peak_gflops 300\nmem_gbps 20")
    print("done", flush=True)
print("peak_rss_mib 42\ndone", flush=True)
sys.exit(3 if how == "fails" else 0)
"""


class TrainStepServer(unittest.TestCase):
    """bench/train_step/run's Server: each side one process for all its
    rounds, its figures asked for command by command; a side that dies,
    garbles or fails is named in one line, never taken for a figure."""

    def setUp(self):
        self.run_mod = load_train_step_run()
        fd, self.fake = tempfile.mkstemp(prefix="apf-fake-side-", suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(FAKE_SIDE)

    def tearDown(self):
        os.unlink(self.fake)

    def side(self, how):
        return self.run_mod.Server([sys.executable, self.fake, how], "fake side")

    def test_figures_round_by_round(self):
        s = self.side("well")
        self.assertEqual(s.figures, {"step_flops": 1000.0})
        self.assertEqual(s.ask("steps"), {"samples_per_s": 100.0})
        self.assertEqual(s.ask("bound"), {"sgemm_peak_gflops": 300.0, "mem_gbps": 20.0})
        self.assertEqual(s.ask("steps"), {"samples_per_s": 300.0})
        self.assertEqual(s.close(), {"peak_rss_mib": 42.0})

    def test_a_side_that_goes_wrong_is_named(self):
        for how, said in (("dies", "fake side: out of memory at its second command"),
                          ("garbles", "not a figure: 'samples_per_s fast'"),
                          ("fails", "exit status 3")):
            s = self.side(how)
            with self.assertRaises(SystemExit) as e:
                for _ in range(2):
                    s.ask("steps")
                s.close()
            msg = str(e.exception.code)
            self.assertTrue(msg.startswith("apf: bench train_step: fake side ("), msg)
            self.assertTrue(msg.endswith(said), (how, msg))
            self.assertEqual(msg.count("\n"), 0, msg)
