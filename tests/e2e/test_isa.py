"""End-to-end: a CPU result does not depend on the instruction set.

An auditor replays a run on their machine, whose CPU may offer wider or
narrower vectors than the operator's. apf's kernels compute every output
with the same sequence of float operations on every path (nn/cpu/gemm.h),
and APF_CPU_ISA forces a path, so one machine can stand in for another:
a run made under one path replays bit for bit under every other, and
training gives the same parameter digest under each.
"""
import json
import os
import re

import apftest
from apftest import ApfCase, BLOBS
from test_run import RunCase


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def paths():
    """The paths this CPU runs, narrowest first."""
    f = cpu_flags()
    out = ["scalar"]
    if {"avx2", "fma"} <= f:
        out.append("avx2")
    if "avx512f" in f:
        out.append("avx512")
    return out


class Choice(ApfCase):
    def test_an_unknown_or_missing_path_is_refused_before_anything_runs(self):
        self.ok("keygen")
        r = self.fails(2, "train", BLOBS, "--steps", "1", env={"APF_CPU_ISA": "sse9"})
        self.assertEqual(r.err, "apf: APF_CPU_ISA: unknown value 'sse9' (scalar, avx2 or avx512)\n")
        if "avx512" not in paths():
            r = self.fails(2, "train", BLOBS, "--steps", "1", env={"APF_CPU_ISA": "avx512"})
            self.assertIn("this CPU lacks AVX-512F", r.err)


class SameBits(RunCase):
    def test_training_digests_agree_on_every_path(self):
        table = {}
        workloads = [BLOBS]
        fm = os.path.exists("/usr/share/datasets/fashion-mnist")
        for name in paths():
            r = self.ok("train", BLOBS, "--steps", "100", "--threads", "2", "--json",
                        env={"APF_CPU_ISA": name})
            table.setdefault(BLOBS, {})[name] = json.loads(r.out)["digest"]
        if fm and len(paths()) > 1:
            # The shipped workloads, with their own data (not the test
            # workloads' directory).
            env = {"APF_WORKLOADS_DIR": os.path.join(apftest.ROOT, "workloads")}
            # The vector paths only: the scalar one evaluates the 60,000
            # training images at fmaf() speed (blobs_mlp covers it above).
            for wl in ("fmnist_mlp",):
                workloads.append(wl)
                for name in paths()[1:]:
                    r = self.ok("train", wl, "--steps", "20", "--batch", "64", "--json",
                                env={**env, "APF_CPU_ISA": name})
                    table.setdefault(wl, {})[name] = json.loads(r.out)["digest"]
        for wl in workloads:
            self.assertEqual(len(set(table[wl].values())), 1, (wl, table[wl]))
            self.assertEqual(len(table[wl]), len(paths()) - (wl != BLOBS))

    def test_a_run_under_one_path_replays_under_every_other(self):
        self.ok("keygen")
        entry = self.pack_baseline()
        run = self.path("run")
        first = paths()[-1] if len(paths()) < 3 else "avx2"
        r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1",
                     env={"APF_CPU_ISA": first}, timeout=300)
        self.assertEqual(r.rc, 0, r)
        for name in paths():
            r = self.apf("verify", run, "--replay", "all", env={"APF_CPU_ISA": name},
                         timeout=300)
            self.assertEqual(r.rc, 0, (name, r))
            self.assertRegex(r.out, r"5 replay +passed +\d+ of \d+ eval intervals replayed")
