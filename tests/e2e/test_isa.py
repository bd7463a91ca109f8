"""End-to-end: a CPU result does not depend on the instruction set.

An auditor replays a run on their machine, whose CPU may offer wider or
narrower vectors than the operator's. apf's kernels compute every output
with the same sequence of float operations on every path (the GEMM,
nn/cpu/gemm.h, and the convolutions' and batch norm's kernels,
nn/cpu/fast.h), and APF_CPU_ISA forces a path, so one machine can stand in for another:
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
    def digest(self, workload, steps, batch, isa, env=None, no_eval=True):
        args = ["train", workload, "--steps", str(steps), "--batch", str(batch),
                "--threads", "2", "--json"] + (["--no-eval"] if no_eval else [])
        r = self.ok(*args, env={**(env or {}), "APF_CPU_ISA": isa}, timeout=300)
        return json.loads(r.out)["digest"]

    def test_training_digests_agree_on_every_path(self):
        # The table: workload (and its sizes) x path -> parameter digest.
        # Every row must hold one digest, on every path this CPU runs.
        table = {}
        for name in paths():
            table.setdefault((BLOBS, 100, 128), {})[name] = self.digest(
                BLOBS, 100, 128, name, no_eval=False)
        if not os.path.exists("/usr/share/datasets/fashion-mnist"):
            self.skipTest("Debian's dataset-fashion-mnist is not installed: "
                          "the shipped workloads' rows cannot be made")
        # The shipped workloads, with their own data (not the test
        # workloads' directory), every one of them, 100 steps each, trained
        # without evaluations (--no-eval: the digest is the parameters' and
        # state's, and evaluating 70,000 images at fmaf() speed would take
        # the scalar path most of an hour). The scalar path computes one
        # fmaf() call per multiply-add (about 40x slower than AVX2 on the
        # CNN), so the rows with every path use batch 2: 100 steps take
        # about 3 s each here, most of it loading the dataset. The vector
        # paths also compare at batch 32, 100 steps.
        env = {"APF_WORKLOADS_DIR": os.path.join(apftest.ROOT, "workloads")}
        shipped = sorted(d for d in os.listdir(env["APF_WORKLOADS_DIR"])
                         if os.path.exists(os.path.join(env["APF_WORKLOADS_DIR"], d,
                                                        "workload.ini")))
        self.assertIn("fmnist_cnn", shipped)
        self.assertIn("fmnist_mlp", shipped)
        for wl in shipped:
            for name in paths():
                table.setdefault((wl, 100, 2), {})[name] = self.digest(wl, 100, 2, name, env)
            for name in paths()[1:]:
                table.setdefault((wl, 100, 32), {})[name] = self.digest(wl, 100, 32, name, env)
        for row, digests in table.items():
            self.assertEqual(len(set(digests.values())), 1, (row, digests))
            want = paths() if row[2] != 32 else paths()[1:]
            self.assertEqual(sorted(digests), sorted(want), row)
        # A digest is the parameters', not a constant: the workloads differ.
        self.assertEqual(len({next(iter(d.values())) for d in table.values()}),
                         len(table))

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


# A submission that reports, from inside its trial, what the trial's
# kernels compute with: the instruction-set path in its environment (all
# that nn/cpu/isa.c reads) and the core type the OpenBLAS the trial loads
# for submissions (pkg/trial/main.c) dispatches to.
TRIAL_ENV = r"""
#include <apf/submission.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)e; (void)r; (void)t;
	if (s == 0) {
		char *(*core)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT,
							     "openblas_get_corename");
		const char *isa = getenv("APF_CPU_ISA");
		printf("trial cpu.isa %s\ntrial blas.core %s\n", isa ? isa : "-",
		       core ? core() : "-");
		fflush(stdout);
	}
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));
	return 0;
}
"""


class TrialEnvironment(RunCase):
    def trial_view(self, run):
        logs = []
        for root, _, files in os.walk(run):
            logs += [os.path.join(root, f) for f in files if f == "trial.log"]
        self.assertEqual(len(logs), 1, logs)
        with open(logs[0]) as f:
            return dict(re.findall(r"^trial (\S+) (\S+)$", f.read(), re.M))

    def record(self, run):
        with open(os.path.join(run, "run.json")) as f:
            return json.load(f)["environment"]

    def test_the_record_names_the_path_the_trial_computes_on(self):
        # Forced to the narrowest path and to the widest: the record of the
        # run (run.json's environment, what verify and replay compare) says
        # what the trial itself runs, not what the supervisor would pick;
        # and the trial's OpenBLAS runs the core type the record names
        # (the runner pins it; apf's results use none of OpenBLAS, but a
        # submission may, and the record must describe what the trial
        # computed with).
        self.ok("keygen")
        entry = self.pack_source("envprobe", TRIAL_ENV)
        for name in sorted({paths()[0], paths()[-1]}):
            run = self.path("run-" + name)
            r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1",
                         env={"APF_CPU_ISA": name}, timeout=300)
            self.assertEqual(r.rc, 0, r)
            trial, record = self.trial_view(run), self.record(run)
            self.assertEqual(trial["cpu.isa"], name)
            self.assertEqual(record["cpu"]["isa"], name)
            self.assertEqual(trial["blas.core"], record["blas"]["core"])
        # Whatever the shell pins: the record follows the supervisor's
        # OpenBLAS, and the trial follows the record.
        for core in ("Haswell", "SkylakeX") if "avx512" in paths() else ("Haswell",):
            run = self.path("run-core-" + core)
            r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1",
                         "--allow-env-drift", env={"OPENBLAS_CORETYPE": core}, timeout=300)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(self.record(run)["blas"]["core"], core)
            self.assertEqual(self.trial_view(run)["blas.core"], core)
