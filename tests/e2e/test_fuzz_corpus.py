"""Every libFuzzer target (tests/fuzz/fuzz_*.c), built without libFuzzer
(tests/fuzz/replay.c), over its committed inputs: the seeds
(tests/fuzz/seeds/<target>/) and the reproducers of what fuzzing once found
(tests/fuzz/reproducers/<target>/). Each target aborts on a broken
invariant, so an input that once crashed a parser stays a test; under
make check the targets run sanitized.
"""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("APF_ROOT") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("APF_BUILD") or os.path.join(ROOT, "build")
TARGETS = sorted(os.path.basename(p)[:-2]
                 for p in glob.glob(os.path.join(ROOT, "tests", "fuzz", "fuzz_*.c")))


class FuzzCorpus(unittest.TestCase):
    def replay(self, target):
        binary = os.path.join(BUILD, "tests", "fuzz", target)
        self.assertTrue(os.path.exists(binary), f"{binary}: not built (make unit-tests)")
        dirs = [d for d in (os.path.join(ROOT, "tests", "fuzz", kind, target)
                            for kind in ("seeds", "reproducers")) if os.path.isdir(d)]
        with tempfile.TemporaryDirectory(prefix="apf-fuzz-corpus-") as tmp:
            # The seeds a target's generator writes at fuzz time, too.
            gen = os.path.join(ROOT, "tests", "fuzz", f"{target}_seeds.py")
            if os.path.exists(gen):
                made = os.path.join(tmp, "generated")
                os.mkdir(made)
                subprocess.run([sys.executable, gen, made], check=True, timeout=300)
                dirs.append(made)
            self.assertTrue(dirs, f"{target}: no committed or generated inputs")
            env = dict(os.environ)
            env["TMPDIR"] = tmp
            p = subprocess.run([binary, *dirs], capture_output=True, text=True,
                               timeout=600, env=env, errors="replace")
        self.assertEqual(p.returncode, 0, f"{target}: rc {p.returncode}\n"
                         f"{p.stderr[-3000:]}")
        n = int(p.stdout.split()[0])
        self.assertGreater(n, 0)


def _make(target):
    def test(self):
        self.replay(target)
    test.__name__ = f"test_{target}"
    return test


for _t in TARGETS:
    setattr(FuzzCorpus, f"test_{_t}", _make(_t))
