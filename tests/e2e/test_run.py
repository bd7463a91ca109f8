"""End-to-end: apf run on real entries - the sealed runner.

A baseline is packed for a test workload that trains in about a second
(tests/data/workloads/blobs_mlp), run, and its run directory checked from
the outside: the log's chain and schema, the signed head (with openssl),
checkpoints against their digests, the CSV against the eval records,
time-to-target. Hostile submissions must each be stopped and named as a
sandbox fault, their trial failed, the run intact.
"""
import csv
import json
import os
import signal
import subprocess
import time
import hashlib

import apftest
from apftest import ApfCase, BLOBS

SCHEMAS = os.path.join(apftest.ROOT, "manifests")


def sandbox_available():
    """apf run fails closed when the kernel refuses namespaces."""
    probe = subprocess.run(["unshare", "-U", "-r", "-n", "-m", "-p", "-f", "true"],
                           capture_output=True)
    return probe.returncode == 0


class RunCase(ApfCase):
    metric = "accuracy"  # the workload's metric, as check_run compares it

    def setUp(self):
        super().setUp()
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        self.pub = os.path.join(self.home, "keys", "default.pub.pem")

    def pack_baseline(self, name="nadamw", out="e.apf"):
        src = os.path.join(apftest.ROOT, "submissions", "baselines", name)
        entry = self.path(out)
        self.ok("pack", src, "-w", BLOBS, "-o", entry)
        return entry

    def pack_source(self, name, code, ruleset="self", build=True):
        sub = self.path(name)
        self.write(f"{name}/submission.ini",
                   f"[submission]\nname = {name}\nauthors = tests\nruleset = {ruleset}\n"
                   "[tuning]\nstudies = 2\n")
        self.write(f"{name}/submission.c", code)
        entry = self.path(f"{name}.apf")
        self.packed = self.ok("pack", sub, "-w", BLOBS, "-o", entry,
                              *([] if build else ["--no-build"]))
        return entry

    def run_unit(self, entry, run_dir, *extra, study="0", trial="1"):
        return self.apf("run", entry, "-o", run_dir, "--study", study, "--trial", trial,
                        *extra, timeout=300)

    def check_run(self, run_dir):
        """Chain, head signature, schemas, checkpoints, CSVs."""
        import jsonschema
        recs, _ = apftest.read_log(run_dir)
        apftest.check_head_signature(run_dir, self.pub)
        with open(os.path.join(SCHEMAS, "log-events.schema.json")) as f:
            ev_schema = jsonschema.Draft202012Validator(json.load(f))
        with open(os.path.join(SCHEMAS, "run.schema.json")) as f:
            run_schema = jsonschema.Draft202012Validator(json.load(f))
        with open(os.path.join(run_dir, "run.json")) as f:
            run_schema.validate(json.load(f))
        for r in recs:
            ev_schema.validate(r)
        units = sorted({r["unit"] for r in recs if "unit" in r})
        for unit in units:
            mine = apftest.unit_records(recs, unit)
            evals = [r for r in mine if r["event"] == "eval"]
            d = os.path.join(run_dir, unit)
            for e in evals:
                with open(os.path.join(d, e["checkpoint"]["file"]), "rb") as f:
                    self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                                     e["checkpoint"]["sha256"], f"{unit} eval {e['index']}")
            if evals:
                with open(os.path.join(d, "eval_measurements.csv")) as f:
                    rows = list(csv.DictReader(f))
                self.assertEqual(len(rows), len(evals), unit)
                for row, e in zip(rows, evals):
                    self.assertEqual(int(row["global_step"]), e["global_step"])
                    self.assertAlmostEqual(float(row["score"]),
                                           e["accumulated_submission_ns"] / 1e9, places=8)
                    col = "validation/" + self.metric
                    self.assertAlmostEqual(float(row[col]), e["metrics"][col], places=8)
        return recs


class Run(RunCase):
    def test_baseline_run_reaches_target_with_a_verifiable_log(self):
        entry = self.pack_baseline()
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 0, r)
        recs = self.check_run(run)
        events = [x["event"] for x in recs]
        self.assertEqual(events[0], "run_start")
        self.assertEqual(events[-1], "run_end")
        for e in ("trial_start", "build", "clock_start", "step_block", "eval", "trial_end"):
            self.assertIn(e, events)
        end = [x for x in recs if x["event"] == "trial_end"][0]
        self.assertFalse(end["failed"], end)
        self.assertEqual(end["reason"], "targets")
        first = [x for x in recs if x["event"] == "eval" and x["validation_target_met"]][0]
        self.assertEqual(end["time_to_target_ns"], first["accumulated_submission_ns"])
        evals = [x for x in recs if x["event"] == "eval"]
        self.assertEqual(evals[0]["global_step"], 1)  # the first eval follows step 1
        # Submission time is the sum of the running intervals.
        blocks = [x for x in recs if x["event"] == "step_block"]
        self.assertEqual(sum(b["end_ns"] - b["start_ns"] for b in blocks),
                         evals[-1]["accumulated_submission_ns"])
        unit = os.path.join(run, "study_0", BLOBS, "trial_1")
        with open(os.path.join(unit, "hparams.json")) as f:
            hp = json.load(f)
        plan = json.loads(self.ok("plan", entry, "--json").out)
        self.assertEqual(hp, plan["units"][0]["hparams"])
        # The run directory is self-contained.
        with open(os.path.join(run, "entry.apf"), "rb") as a, open(entry, "rb") as b:
            self.assertEqual(a.read(), b.read())
        # apf score reads it.
        s = self.ok("score", run, "--csv", self.path("s.csv"))
        self.assertIn("nadamw", s.out)
        # The runner's work directory (extracted entry, built .so, scratch) is gone.
        self.assertEqual(os.listdir(self.scratch), [])

    def test_units_merge_into_one_run_directory(self):
        entry = self.pack_baseline()
        run = self.path("run")
        self.assertEqual(self.run_unit(entry, run).rc, 0)
        self.assertEqual(self.run_unit(entry, run, trial="2").rc, 0)
        recs = self.check_run(run)
        units = {x["unit"] for x in recs if x["event"] == "trial_end"}
        self.assertEqual(units, {f"study_0/{BLOBS}/trial_1", f"study_0/{BLOBS}/trial_2"})
        # A unit that is done is not run again.
        self.assertEqual(self.run_unit(entry, run).rc, 0)
        ends = [x for x in apftest.read_log(run)[0] if x["event"] == "trial_end"]
        self.assertEqual(len(ends), 2)

    def test_refusals_before_anything_runs(self):
        entry = self.pack_baseline()
        self.fails(2, "run", entry, "-o", self.path("r"), "--trial", "99", match="no unit")
        self.fails(2, "run", entry, "-o", self.path("r"), "--resume", match="no such run")
        # A workload spec changed after packing.
        wl = self.path("workloads")
        import shutil
        shutil.copytree(apftest.TEST_WORKLOADS, wl)
        with open(os.path.join(wl, BLOBS, "workload.ini"), "a") as f:
            f.write("\n; edited\n")
        self.fails(1, "run", entry, "-o", self.path("r2"), env={"APF_WORKLOADS_DIR": wl},
                   match="differs from the entry's")
        self.assertFalse(os.path.exists(self.path("r")))

    def test_no_unit_matching_names_the_values_given_and_what_the_plan_has(self):
        entry = self.pack_baseline()
        r = self.fails(2, "run", entry, "-o", self.path("r"), "--workload", "blobs_mpl")
        self.assertRegex(r.err, r"^apf: run: no unit of the plan matches --workload blobs_mpl "
                         r"\(the plan has workload blobs_mlp, studies 0-\d+, trials 1-\d+; "
                         r"see apf plan\)\n$")
        r = self.fails(2, "run", entry, "-o", self.path("r"), "--study", "0", "--trial", "99")
        self.assertIn("no unit of the plan matches --study 0 --trial 99 (the plan has "
                      "workload blobs_mlp, studies 0-", r.err)
        self.assertFalse(os.path.exists(self.path("r")))

    def test_an_empty_directory_is_a_new_run_directory_and_others_are_named(self):
        entry = self.pack_baseline()
        empty = self.path("empty")
        os.mkdir(empty)
        r = self.fails(2, "status", empty)
        self.assertEqual(r.err, f"apf: status: {empty}: not a run directory (no run.json)\n")
        self.fails(2, "run", entry, "-o", empty, "--resume",
                   match=f"{empty}: not a run directory (no run.json): nothing to resume")
        self.write("notes/todo.txt", "not a run\n")
        self.fails(2, "run", entry, "-o", self.path("notes"),
                   match="not a run directory (no run.json), and not empty: -o takes a new "
                         "or empty directory, or a run's")
        # -o out/ is out, made there.
        r = self.run_unit(entry, empty + "/")
        self.assertEqual(r.rc, 0, r)
        self.check_run(empty)
        self.ok("verify", empty)
        self.assertEqual(self.ok("status", empty).out.count(" done "), 1)
        self.assertEqual([n for n in os.listdir(self.tmp) if ".tmp." in n], [])
        # One more unit with other settings: the flags that would match.
        with open(os.path.join(empty, "run.json")) as f:
            threads = json.load(f)["threads"]
        r = self.fails(2, "run", entry, "-o", empty, "--study", "0", "--trial", "2",
                       "--threads", str(threads + 1), "--unsealed")
        s = "" if threads == 1 else "s"
        self.assertIn(f"{empty}: ran with other settings (device cpu, sealed, {threads} "
                      f"thread{s}; this run: device cpu, unsealed, {threads + 1} threads): "
                      f"give the same, --device cpu --threads {threads} and no --unsealed\n",
                      r.err)

    def test_environment_drift_is_refused_or_logged(self):
        # Packed in a container image; run outside it.
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry,
                env={"APF_IMAGE_DIGEST": "sha256:" + "ab" * 32})
        self.fails(1, "run", entry, "-o", self.path("r"), match="image_digest")
        self.assertFalse(os.path.exists(self.path("r")))
        r = self.run_unit(entry, self.path("r"), "--allow-env-drift")
        self.assertEqual(r.rc, 0, r)
        drift = [x for x in self.check_run(self.path("r")) if x["event"] == "env_drift"]
        self.assertEqual([f["field"] for f in drift[0]["fields"]], ["image_digest"])

    def test_a_drift_that_cannot_change_a_result_is_logged_not_refused(self):
        # Packed where the kernels took the scalar path, run where they take
        # the widest: the same bits (nn/cpu/gemm.h), so the run goes on,
        # says so and logs it; a field that can change a result beside it
        # is still refused, and named alone.
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry, env={"APF_CPU_ISA": "scalar"})
        here = json.loads(self.ok("env", "--json").out)["cpu"]["isa"]
        if here == "scalar":
            self.skipTest("this CPU has no vector path to differ from scalar")
        r = self.run_unit(entry, self.path("r"))
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f'apf: run: environment: cpu.isa (entry "scalar", here "{here}"): '
                      "differs from the entry's record without changing a result (logged; "
                      "times are this machine's)\n", r.err)
        drift = [x for x in self.check_run(self.path("r")) if x["event"] == "env_drift"]
        self.assertEqual([f["field"] for f in drift[0]["fields"]], ["cpu.isa"])
        self.ok("verify", self.path("r"))
        both = self.path("both.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", both,
                env={"APF_CPU_ISA": "scalar", "APF_IMAGE_DIGEST": "sha256:" + "cd" * 32})
        r = self.fails(1, "run", both, "-o", self.path("r2"))
        self.assertIn("1 field differs from the entry's record: image_digest", r.err)
        self.assertNotIn("cpu.isa", r.err)


HOSTILE_HEAD = r"""
#include <apf/submission.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <signal.h>
#include <pthread.h>
#include <sys/socket.h>
#include <netinet/in.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)c; (void)h; (void)r; return 0; }
static void hostile(apf_ctx *c);
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)e; (void)r; (void)t;
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));
	if (s == 3)
		hostile(c);
	return 0;
}
"""

HOSTILE = {
    "inet_socket": ("syscall", "socket", r"""
static void hostile(apf_ctx *c) { (void)c;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	printf("socket: %d\n", fd); }"""),
    "read_key": ("path", "default.key.pem", r"""
static void hostile(apf_ctx *c) { (void)c;
	int fd = open("@KEY@", O_RDONLY);
	char buf[256]; if (fd >= 0 && read(fd, buf, sizeof buf) > 0) puts("got the key"); }"""),
    "write_dataset": ("path", "blobs", r"""
static void hostile(apf_ctx *c) { (void)c;
	int fd = open("@DATA@/train-labels-idx1-ubyte.gz", O_WRONLY | O_APPEND);
	if (fd >= 0) write(fd, "x", 1); }"""),
    "write_log": ("path", "log.jsonl", r"""
static void hostile(apf_ctx *c) { (void)c;
	int fd = open("@RUN@/log.jsonl", O_WRONLY | O_APPEND);
	if (fd >= 0) write(fd, "{}\n", 3); }"""),
    "fork_bomb": ("syscall", "clone", r"""
static void hostile(apf_ctx *c) { (void)c;
	for (int i = 0; i < 100000; i++) fork(); }"""),
    "memory": ("memory", "memory limit", r"""
static void hostile(apf_ctx *c) { (void)c;
	for (;;) { char *p = malloc(64 << 20); if (!p) abort(); memset(p, 1, 64 << 20); } }"""),
    "endless_loop": ("timeout", "budget", r"""
static void hostile(apf_ctx *c) { (void)c;
	volatile unsigned long x = 0; for (;;) x++; }"""),
    "segfault": ("crash", "SIGSEGV", r"""
static void hostile(apf_ctx *c) { (void)c;
	volatile int *p = NULL; *p = 1; }"""),
    "train_during_eval": ("syscall", "clone", r"""
static apf_ctx *ctx;
static void *background(void *arg) { (void)arg;
	for (;;) apf_scale(ctx, apf_all_params(ctx), 0.999f); return NULL; }
static void hostile(apf_ctx *c) { ctx = c;
	pthread_t t; pthread_create(&t, NULL, background, NULL); }"""),
}


class Hostile(RunCase):
    def long_budget_workloads(self):
        src = os.path.join(apftest.TEST_WORKLOADS, BLOBS, "workload.ini")
        text = open(src).read()
        data = os.path.join(apftest.ROOT, "tests", "data", "datasets", "blobs")
        self.assertIn("path = ../../datasets/blobs\n", text)
        self.assertIn("max_runtime_s = 6\n", text)
        text = text.replace("path = ../../datasets/blobs\n", f"path = {data}\n")
        text = text.replace("max_runtime_s = 6\n", "max_runtime_s = 120\n")
        d = self.path("workloads")
        self.write(os.path.join("workloads", BLOBS, "workload.ini"), text)
        return d

    def hostile(self, name):
        kind, detail, body = HOSTILE[name]
        extra = []
        if name == "memory":
            extra = ["--memory-limit", "1024"]
            # Filling 1 GiB page by page is slow on a loaded machine: the
            # workload's 6 s budget could end the trial first (a timeout,
            # not the memory fault under test). A copy with a 120 s budget
            # makes the outcome independent of the machine's speed.
            self.env["APF_WORKLOADS_DIR"] = self.long_budget_workloads()
        run = self.path("run")
        code = HOSTILE_HEAD + body
        code = code.replace("@KEY@", os.path.join(self.home, "keys", "default.key.pem"))
        code = code.replace("@DATA@", os.path.join(apftest.ROOT, "tests", "data", "datasets", "blobs"))
        code = code.replace("@RUN@", run)
        self.ok("keygen")
        blobs = os.path.join(apftest.ROOT, "tests", "data", "datasets", "blobs")
        data_before = self.ok("hash", blobs).out
        entry = self.pack_source(name, code)
        t0 = time.time()
        r = self.run_unit(entry, run, *extra, trial="1")
        # A failed trial is a result (the run is intact and verifies), and
        # the exit status says a unit failed.
        self.assertEqual(r.rc, 3, r)
        self.assertIn("1 of 1 unit failed", r.err)
        self.assertLess(time.time() - t0, 240 if name == "memory" else 120)
        recs = self.check_run(run)
        faults = [x for x in recs if x["event"] == "sandbox_fault"]
        self.assertEqual(len(faults), 1, recs)
        self.assertEqual(faults[0]["kind"], kind, faults[0])
        self.assertIn(detail, faults[0]["detail"])
        end = [x for x in recs if x["event"] == "trial_end"][0]
        self.assertTrue(end["failed"])
        self.assertEqual(end["reason"], "fault")
        # Nothing outside the sandbox changed, and the run goes on.
        self.assertEqual(self.ok("hash", blobs).out, data_before)
        r = self.run_unit(entry, run, study="1")
        self.assertEqual(r.rc, 3, r)  # the same submission fails there too
        self.check_run(run)
        # Whatever the trial did, the runner removed its work directories.
        self.assertEqual(os.listdir(self.scratch), [])
        return faults[0]

    def test_inet_socket(self):
        self.hostile("inet_socket")

    def test_reading_the_runner_key(self):
        self.hostile("read_key")

    def test_writing_into_the_dataset(self):
        self.hostile("write_dataset")

    def test_writing_to_the_log(self):
        self.hostile("write_log")

    def test_fork_bomb(self):
        self.hostile("fork_bomb")

    def test_allocating_past_the_memory_limit(self):
        if os.environ.get("APF_SANITIZED"):
            self.skipTest("under AddressSanitizer a trial has no address-space limit "
                          "(its shadow memory needs terabytes)")
        self.hostile("memory")

    def test_endless_loop_past_the_budget(self):
        self.hostile("endless_loop")

    def test_segfault(self):
        self.hostile("segfault")

    def test_training_during_an_evaluation(self):
        self.hostile("train_during_eval")


class Notices(RunCase):
    """What the terminal says of each unit: how it ended (time-to-target
    or the best metric against the target), and that a unit which already
    ended in the run directory is not run again."""

    def test_unit_end_lines_and_a_finished_unit_run_again(self):
        import re
        self.ok("keygen")
        entry = self.pack_baseline()
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 0, r)
        end = re.compile(r"^apf: run: study_0/blobs_mlp/trial_1: targets: validation target "
                         r"met at \d+\.?\d* s of submission time \(accuracy (\d\.\d{4}), "
                         r"target 0\.9000\), (\d+) evals$", re.M)
        m = end.search(r.err)
        self.assertTrue(m, r.err)
        self.assertGreaterEqual(float(m.group(1)), 0.9)
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err, "apf: run: study_0/blobs_mlp/trial_1: already ended in this run "
                         "directory (completed); not run again\n"
                         f"apf: run: {run}: 0 units completed, 0 failed; 1 selected unit had "
                         "already ended\n")
        self.ok("verify", run)

    def test_a_missed_target_says_the_best_metric(self):
        self.ok("keygen")
        # Training that never moves: the budget ends it, below the target.
        code = HOSTILE_HEAD.replace("apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));",
                                    "(void)loss;").replace("	if (s == 3)\n		hostile(c);\n", "") + \
            "static void hostile(apf_ctx *c) { (void)c; }\n"
        entry = self.pack_source("still", code)
        r = self.run_unit(entry, self.path("run"))  # blobs_mlp's budget: 6 s
        self.assertEqual(r.rc, 0, r)
        # The budget or max_steps ends it, whichever comes first on this CPU.
        self.assertRegex(r.err, r"study_0/blobs_mlp/trial_1: (budget|max_steps): validation "
                         r"target not met "
                         r"in \d+\.?\d* s \(best accuracy 0\.\d{4}, target 0\.9000\), \d+ evals\n")


class HyperparameterWarnings(RunCase):
    """A hyperparameter read under a name the search space lacks trains on
    the default without a word; one the space has that nothing reads is
    tuned for nothing. Both are said on the terminal and in the log, and
    change nothing else: the unit completes and the run verifies."""

    CODE = HOSTILE_HEAD.replace(
        "(void)h; (void)e; (void)r; (void)t;\n\tdouble loss;",
        "(void)e; (void)r; (void)t;\n\tdouble loss;\n"
        "\tdouble lr = apf_hp(c, h, \"learnig_rate\", 0.05);\n"
        "\t(void)apf_hp(c, h, \"momentum\", 0.9);") \
        .replace("-0.05f, apf_all_grads(c)", "-(float)lr, apf_all_grads(c)") \
        .replace("	if (s == 3)\n		hostile(c);\n", "") + \
        "static void hostile(apf_ctx *c) { (void)c; }\n"
    SPACE = ("[learning_rate]\nmin = 0.01\nmax = 0.1\nscaling = log\n\n"
             "[momentum]\nfeasible_points = 0.9\n\n"
             "[weight_decay]\nfeasible_points = 0.0\n\n"
             "[dropout_rate]\nfeasible_points = 0.0\n")

    def test_an_unknown_read_and_an_unread_dimension_are_warned_and_logged(self):
        self.ok("keygen")
        self.write("hpw/tuning_search_space.ini", self.SPACE)
        entry = self.pack_source("hpw", self.CODE, ruleset="external")
        # pack reads the names in the code and says so before any run.
        line = self.CODE[:self.CODE.index('"learnig_rate"')].count("\n") + 1
        self.assertIn(f"apf: pack: warning: submission.c:{line}: the code reads "
                      "hyperparameter 'learnig_rate', which tuning_search_space.ini does "
                      "not have (it gets its default); did you mean 'learning_rate'?\n",
                      self.packed.err)
        self.assertNotIn("'momentum'", self.packed.err)
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 0, r)
        unit = "study_0/blobs_mlp/trial_1"
        unknown = ("the submission reads hyperparameter 'learnig_rate', which the search "
                   "space does not have (it gets its default); did you mean "
                   "'learning_rate'?")
        unread = ("search-space hyperparameter '{}' was not read by init_optimizer_state "
                  "or the first update_params (nor used by the runner)")
        self.assertIn(f"apf: run: {unit}: warning: {unknown}\n", r.err)
        for name in ("learning_rate", "weight_decay"):
            self.assertIn(f"apf: run: {unit}: warning: {unread.format(name)}\n", r.err)
        # momentum is read; dropout_rate is the runner's (blobs_mlp's MLP
        # has dropout), so neither is warned about.
        self.assertNotIn("'momentum'", r.err)
        self.assertNotIn("'dropout_rate'", r.err)
        recs = self.check_run(run)
        warns = [x["detail"] for x in recs if x["event"] == "warning"]
        self.assertEqual(sorted(warns), sorted([unknown, unread.format("learning_rate"),
                                                unread.format("weight_decay")]), recs)
        self.ok("verify", run)
        # They reach whoever reads the scores, not only the run's terminal.
        j = json.loads(self.ok("score", run, "--json").out)
        self.assertIn(f"hpw: 3 warnings from the trials of 1 unit (their logs hold "
                      f"each); the first, {unit}: {unknown}", j["warnings"])

    def test_self_tuning_reads_defaults_without_warnings(self):
        self.ok("keygen")
        entry = self.pack_source("selfhp", self.CODE)
        r = self.run_unit(entry, self.path("run"))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("warning", r.err)

    def test_a_flood_of_warnings_is_a_protocol_fault(self):
        # The trial is untrusted: its warnings are bounded, and the
        # channel's descriptor is open to the submission's code.
        self.ok("keygen")
        code = HOSTILE_HEAD + r"""
static void hostile(apf_ctx *c) { (void)c;
	for (int i = 0; i < 1000; i++) write(5, "warn flood\n", 11); }"""
        entry = self.pack_source("flood", code)
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 3, r)
        recs = self.check_run(run)
        fault = [x for x in recs if x["event"] == "sandbox_fault"][0]
        self.assertEqual(fault["kind"], "protocol", fault)
        self.assertIn("more warnings than the protocol allows", fault["detail"])
        self.assertEqual(len([x for x in recs if x["event"] == "warning"]), 48)
        self.ok("verify", run)


class HeldOut(RunCase):
    def test_run_with_a_held_out_draw_runs_the_variant_units(self):
        entry = self.pack_baseline()
        draw = self.write("draw.json", json.dumps(
            {"seed": "test", "draws": [{"base": BLOBS, "variant": "gelu"}]}))
        run = self.path("run")
        r = self.run_unit(entry, run, "--heldout", draw)
        self.assertEqual(r.rc, 0, r)
        recs = self.check_run(run)
        units = sorted(x["unit"] for x in recs if x["event"] == "trial_end")
        self.assertEqual(units, [f"study_0/{BLOBS}/trial_1", f"study_0/{BLOBS}_gelu/trial_1"])
        start = [x for x in recs if x["event"] == "trial_start" and x["variant"] == "gelu"][0]
        self.assertEqual(start["workload"], BLOBS)
        with open(os.path.join(run, "heldout.json")) as a, open(draw) as b:
            self.assertEqual(a.read(), b.read())
        # Check 6 counts the plan's variant units and the ones that ran.
        v = self.ok("verify", run).out
        planned = len([u for u in json.load(open(os.path.join(run, "run.json")))["plan"]["units"]
                       if u["variant"] != "base"])
        self.assertGreater(planned, 1)
        self.assertIn(f"{planned} held-out variant units in the plan (1 run) of 1 drawn "
                      "workload", v)
        # --variant takes one of the pair: the variant's unit of trial 2
        # alone (as a Slurm task does, one unit each), then its base's.
        self.assertEqual(self.run_unit(entry, run, "--variant", "gelu", trial="2").rc, 0)
        states = {u["unit"]: u["state"] for u in json.loads(
            self.ok("status", run, "--json").out)["units"]}
        self.assertEqual(states[f"study_0/{BLOBS}_gelu/trial_2"], "done")
        self.assertEqual(states[f"study_0/{BLOBS}/trial_2"], "pending")
        r = self.fails(2, "run", entry, "-o", run, "--variant", "glu")
        self.assertIn("no unit of the plan matches --variant glu (the plan has workload "
                      f"{BLOBS}, variants base, gelu, studies 0-", r.err)
        # A later session needs no --heldout; another draw is refused.
        self.assertEqual(self.run_unit(entry, run, "--variant", "base", trial="2").rc, 0)
        other = self.write("other.json", json.dumps(
            {"seed": "x", "draws": [{"base": BLOBS, "variant": "gelu"}], "note": 1}))
        self.fails(2, "run", entry, "-o", run, "--trial", "3", "--heldout", other,
                   match="differs from the draw")
        s = self.ok("score", run)
        self.assertIn(f"{BLOBS}_gelu", s.out)
        self.fails(2, "run", entry, "-o", self.path("r2"), "--heldout",
                   self.write("bad.json", json.dumps(
                       {"seed": "t", "draws": [{"base": BLOBS, "variant": "nope"}]})),
                   match="does not have")


class ExitStatus(RunCase):
    """What a script running apf run can rely on: exit 0 only when every
    unit it ran completed, 3 (docs/design.md 4.2: the run stopped abnormally)
    when a trial failed - with the count, and the submission's own error in
    the unit's line - and 2 for options out of range, before anything runs."""

    ERROR_AT_3 = HOSTILE_HEAD.replace("	if (s == 3)\n		hostile(c);\n	return 0;",
                                      "	return s == 3 ? -7 : 0;") + \
        "static void hostile(apf_ctx *c) { (void)c; }\n"

    def test_a_failed_unit_is_exit_3_naming_the_count_and_the_error(self):
        self.ok("keygen")
        entry = self.pack_source("err7", self.ERROR_AT_3)
        run = self.path("run")
        r = self.run_unit(entry, run)
        self.assertEqual(r.rc, 3, r)
        self.assertIn("study_0/blobs_mlp/trial_1: failed: error", r.err)
        self.assertIn("update_params returned -7 at step 3", r.err)
        self.assertIn("0 units completed, 1 failed", r.err)
        self.assertTrue(r.err.rstrip().endswith(
            "1 of 1 unit failed (the log and each unit's trial.log say why)"), r.err)
        # The failed trial is still a result: logged, signed, verifiable.
        end = [x for x in apftest.read_log(run)[0] if x["event"] == "trial_end"][0]
        self.assertEqual((end["reason"], end["failed"]), ("error", True), end)
        self.assertIn("update_params returned -7 at step 3", end["detail"])
        self.ok("verify", run)

    def test_json_says_each_units_outcome_whatever_the_exit(self):
        self.ok("keygen")
        entry = self.pack_source("err7", self.ERROR_AT_3)
        run = self.path("run")
        r = self.apf("run", entry, "-o", run, "--study", "0", "--json", timeout=300)
        self.assertEqual(r.rc, 3, r)
        j = json.loads(r.out)
        self.assertEqual((j["run_dir"], j["exit"], j["completed"], j["failed"]), (run, 3, 0, 1), j)
        self.assertIn("1 of 1 unit failed", j["error"])
        (u,) = j["units"]
        self.assertEqual((u["unit"], u["state"], u["reason"]),
                         ("study_0/blobs_mlp/trial_1", "failed", "error"), u)
        self.assertIn("update_params returned -7 at step 3", u["detail"])
        self.assertIsNone(u["time_to_target_s"])
        # Run again: nothing runs, and the JSON says why.
        r = self.apf("run", entry, "-o", run, "--study", "0", "--json", timeout=300)
        self.assertEqual(r.rc, 0, r)
        j = json.loads(r.out)
        self.assertEqual(j["already_ended"], 1, j)
        self.assertEqual((j["units"][0]["state"], j["units"][0]["failed"]),
                         ("already_ended", True), j)
        # A refusal before anything ran is JSON too, with the error.
        r = self.apf("run", self.path("missing.apf"), "-o", run, "--json")
        self.assertEqual(r.rc, 2, r)
        j = json.loads(r.out)
        self.assertEqual((j["exit"], j["units"]), (2, []), j)
        self.assertIn("missing.apf", j["error"])

    def test_options_out_of_range_are_refused_before_anything_runs(self):
        self.ok("keygen")
        entry = self.pack_source("err7", self.ERROR_AT_3)
        for args, why in ((["--study", "-1"], "--study K counts from 0"),
                          (["--trial", "-1"], "--trial N counts from 1"),
                          (["--trial", "0"], "--trial N counts from 1"),
                          (["--threads", "0"], "--threads takes 1 to 4096"),
                          (["--memory-limit", "0"], "--memory-limit takes MiB >= 1")):
            r = self.apf("run", entry, "-o", self.path("run"), *args)
            self.assertEqual(r.rc, 2, (args, r))
            self.assertEqual(r.err, f"apf: run: {why}\n", args)
            self.assertFalse(os.path.exists(self.path("run")), args)

    def test_a_build_failure_names_the_submission_not_the_runners_paths(self):
        self.ok("keygen")
        self.write("nosrc/submission.ini",
                   "[submission]\nname = nosrc\nruleset = self\n[tuning]\nstudies = 1\n")
        self.write("nosrc/README", "no sources here\n")
        entry = self.path("nosrc.apf")
        # pack refuses it (test_pack_build); an entry packed without that
        # check, or by hand, still meets the runner's own build.
        self.ok("pack", self.path("nosrc"), "-w", BLOBS, "-o", entry, "--no-build")
        r = self.run_unit(entry, self.path("run"))
        self.assertEqual(r.rc, 3, r)
        self.assertIn("study_0/blobs_mlp/trial_1: submission: no C sources (*.c) to build\n",
                      r.err)
        # Neither the build process's own prefix nor the runner's temporary
        # directory reaches the user.
        self.assertNotIn("apf-run-", r.err)
        self.assertNotIn("trial_1: apf: ", r.err)
