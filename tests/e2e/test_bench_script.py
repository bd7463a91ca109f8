"""scripts/bench.sh, the driver behind `make bench`, on stand-in benches in
a scratch copy of the tree: each of the three kinds of bench runs (run.sh,
an executable `run`, programs built from the bench's C files), every bench
runs even after one fails, the RESULT lines are repeated as a summary, a
bench that fails or prints a malformed RESULT line is named and makes the
whole command fail, and one that prints no RESULT line is a skip."""
import os
import shutil
import subprocess
import tempfile
import unittest

from apftest import ROOT

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
}


class BenchScript(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-bench-")
        os.makedirs(os.path.join(self.tmp, "scripts"))
        shutil.copy(os.path.join(ROOT, "scripts", "bench.sh"),
                    os.path.join(self.tmp, "scripts", "bench.sh"))
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
        return subprocess.run(["bash", os.path.join(self.tmp, "scripts", "bench.sh"),
                               *args], cwd=self.tmp, capture_output=True, text=True,
                              env=dict(os.environ, **(env or {})), timeout=60)

    def test_all_run_failures_named_summary_at_the_end(self):
        p = self.bench("build")
        self.assertEqual(p.returncode, 1, p)
        out = p.stdout
        summary = out[out.index("bench summary:"):].splitlines()
        self.assertEqual(summary[0], "bench summary: 3 passed, 3 failed, 1 skipped")
        self.assertEqual(summary[1:7], [
            "RESULT alpha speed_ratio 1.25", "RESULT alpha size_ratio 0.5",
            "RESULT broken half 3", "RESULT prog one_ms 2.5",
            "RESULT prog two_ms 1e-3", "RESULT script build_dir_given 1"])
        self.assertTrue(summary[7].startswith(
            "SKIPPED mute (bench mute: skipped: no namespaces; log:"), summary)
        failed = [l for l in summary if l.startswith("FAILED ")]
        self.assertEqual(len(failed), 3, out)
        self.assertIn("FAILED broken (exit status 3;", failed[0])
        self.assertIn("FAILED empty (exit status 127;", failed[1])
        self.assertIn("FAILED sloppy (malformed line 'RESULT sloppy ratio fast'",
                      failed[2])
        self.assertIn("bench: broken FAILED", p.stderr)
        # Each bench's whole output is kept, stderr included.
        with open(os.path.join(self.tmp, "build", "bench", "broken.log")) as f:
            self.assertIn("peer missing", f.read())
        with open(os.path.join(self.tmp, "build", "bench", "empty.log")) as f:
            self.assertIn("no run.sh, no executable run, and no program", f.read())

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
