"""scripts/bench.sh, the driver behind `make bench`, on stand-in benches in
a scratch copy of the tree: every bench runs even after one fails, the
RESULT lines are repeated as a summary, and a bench that fails, prints no
RESULT line or a malformed one is named and makes the whole command fail."""
import os
import shutil
import subprocess
import tempfile
import unittest

from apftest import ROOT

BENCHES = {
    "alpha": "echo 'bench alpha: warming up'\necho 'RESULT alpha speed_ratio 1.25'\n"
             "echo 'RESULT alpha size_ratio 0.5'\n",
    "broken": "echo 'RESULT broken half 3'\necho 'peer missing' >&2\nexit 3\n",
    "mute": "echo 'nothing to report'\n",
    "sloppy": "echo 'RESULT sloppy ratio fast'\n",
    "zulu": "test -d \"$1\" || exit 9\necho \"RESULT zulu build_dir_given 1\"\n",
}


class BenchScript(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-bench-")
        os.makedirs(os.path.join(self.tmp, "scripts"))
        shutil.copy(os.path.join(ROOT, "scripts", "bench.sh"),
                    os.path.join(self.tmp, "scripts", "bench.sh"))
        for name, body in BENCHES.items():
            d = os.path.join(self.tmp, "bench", name)
            os.makedirs(d)
            with open(os.path.join(d, "run.sh"), "w") as f:
                f.write("#!/bin/bash\n" + body)
        os.makedirs(os.path.join(self.tmp, "build"))

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
        self.assertEqual(summary[0], "bench summary: 2 passed, 3 failed")
        self.assertEqual(summary[1:5], [
            "RESULT alpha speed_ratio 1.25", "RESULT alpha size_ratio 0.5",
            "RESULT broken half 3", "RESULT zulu build_dir_given 1"])
        failed = [l for l in summary if l.startswith("FAILED ")]
        self.assertEqual(len(failed), 3, out)
        self.assertIn("FAILED broken (exit status 3;", failed[0])
        self.assertIn("FAILED mute (printed no RESULT line;", failed[1])
        self.assertIn("FAILED sloppy (malformed line 'RESULT sloppy ratio fast'",
                      failed[2])
        self.assertIn("bench: broken FAILED", p.stderr)
        # Each bench's whole output is kept, stderr included.
        with open(os.path.join(self.tmp, "build", "bench", "broken.log")) as f:
            self.assertIn("peer missing", f.read())

    def test_selection_and_success(self):
        p = self.bench("build", env={"BENCH": "alpha zulu"})
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("bench summary: 2 passed, 0 failed", p.stdout)
        self.assertNotIn("mute", p.stdout)
        p = self.bench("build", env={"BENCH": "nosuch"})
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("apf: bench: no bench matches", p.stderr)

    def test_usage(self):
        p = self.bench()
        self.assertEqual(p.returncode, 2)
        self.assertTrue(p.stderr.startswith("apf: bench: usage"), p.stderr)
        p = self.bench(os.path.join(self.tmp, "absent"))
        self.assertEqual(p.returncode, 2)
