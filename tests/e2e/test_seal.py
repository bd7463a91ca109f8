"""End-to-end: the seal, tried as a hostile submitter would (issue 10).

Each case packs a submission written against the public ABI that attacks
one boundary - training before the clock, reading validation or test data,
forging protocol messages, damaging the shared memory, memory the limit
would not see, telling a replay from a run, escape sequences for the
operator's terminal - runs it with the real `apf run`, and checks that it
ended contained: the unit faulted or failed with its kind named, or the
attack had no effect, the run directory verifies, and the next unit runs.
"""
import gzip
import hashlib
import json
import os
import re
import struct

import apftest
from apftest import BLOBS
from test_run import RunCase

BLOBS_DATA = os.path.join(apftest.ROOT, "tests", "data", "datasets", "blobs")

HEAD = r"""
#define _GNU_SOURCE
#include <apf/submission.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
static int init_hook(apf_ctx *c);
static void step_hook(apf_ctx *c, int64_t s);
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)h; (void)r; return init_hook(c); }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)e; (void)r; (void)t;
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));
	step_hook(c, s);
	return 0;
}
static void spin(double seconds)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec) < seconds);
}
"""

NO_INIT = "static int init_hook(apf_ctx *c) { (void)c; return 0; }\n"
NO_STEP = "static void step_hook(apf_ctx *c, int64_t s) { (void)c; (void)s; }\n"


def split_bytes(name, index):
    """Example `index` of an IDX image file of the blobs dataset."""
    d = gzip.open(os.path.join(BLOBS_DATA, name)).read()
    n, h, w = struct.unpack(">III", d[4:16])
    return d[16 + index * h * w:16 + (index + 1) * h * w], n


def c_bytes(b):
    """A C initialiser of the bytes XORed with 0x5a."""
    return "{" + ", ".join(str(x ^ 0x5a) for x in b) + "}"


# A trial that scans every readable mapping of its own process for three
# 64-byte records (a training, a validation and a test example) and prints
# which it found: the supervisor hands over the training split alone, so
# only the first may be there. `stride` is the alignment the scan steps by.
SCAN = r"""
#include <setjmp.h>
#include <signal.h>
static sigjmp_buf jump;
static void on_bus(int sig) { (void)sig; siglongjmp(jump, 1); }
/* Kept XORed, so that the only plain copies are the ones searched for. */
static const unsigned char masked[3][64] = {@TRAIN@, @VAL@, @TEST@};
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	unsigned char (*want)[64] = malloc(sizeof masked);
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 64; i++) want[k][i] = masked[k][i] ^ 0x5a;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f) { fprintf(stderr, "scan: no maps\n"); return; }
	char line[512]; size_t searched = 0; static volatile int found[3];
	while (fgets(line, sizeof line, f)) {
		unsigned long a, b; char perm[8];
		if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3 || perm[0] != 'r'
		    || strstr(line, "[vvar]") || strstr(line, "[vsyscall]")) continue;
		/* A file mapped past its end raises SIGBUS there: skip the rest. */
		signal(SIGBUS, on_bus);
		if (sigsetjmp(jump, 1) == 0) {
			for (volatile unsigned long p = a; p + 64 <= b; p += @STRIDE@) {
				for (int k = 0; k < 3; k++)
					if (!found[k] && (const void *)p != (const void *)want[k] &&
					    !memcmp((const void *)p, want[k], 64)) found[k] = 1;
			}
		}
		searched += b - a;
	}
	fclose(f);
	free(want);
	fprintf(stderr, "scan: %zu bytes, train %d validation %d test %d\n",
		searched, found[0], found[1], found[2]);
}
"""


def scan_code(train, val, test, stride=1):
    return (SCAN.replace("@TRAIN@", c_bytes(train)).replace("@VAL@", c_bytes(val))
            .replace("@TEST@", c_bytes(test)).replace("@STRIDE@", str(stride)))


def scan_found(case, run, end):
    """(train, validation, test) found, from the scan's line in trial.log."""
    with open(os.path.join(run, end["unit"], "trial.log")) as f:
        log = f.read()
    m = re.search(r"scan: (\d+) bytes, train (\d) validation (\d) test (\d)", log)
    case.assertTrue(m, log)
    case.assertGreater(int(m.group(1)), 1 << 20)
    return m.group(2, 3, 4)


class HostileWorkload:
    """A RunCase's hostile submissions on its own test workload
    (self.workload): packed, and run to show that opening a file the trial
    must not read is a sandbox fault."""

    def pack_hostile(self, name, code):
        sub = self.path(name)
        self.write(f"{name}/submission.ini",
                   f"[submission]\nname = {name}\nauthors = tests\nruleset = self\n"
                   "[tuning]\nstudies = 1\n")
        self.write(f"{name}/submission.c", HEAD + code)
        entry = self.path(f"{name}.apf")
        self.ok("pack", sub, "-w", self.workload, "-o", entry)
        return entry

    def hostile_open(self, name, path):
        self.ok("keygen")
        entry = self.pack_hostile(name, NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	int fd = open("@PATH@", O_RDONLY);
	char buf[64]; if (fd >= 0 && read(fd, buf, sizeof buf) > 0) puts("read it"); }
""".replace("@PATH@", path))
        run = self.path("run")
        r = self.apf("run", entry, "-o", run, "--study", "0", "--trial", "1", timeout=300)
        self.assertEqual(r.rc, 3, r)
        recs = self.check_run(run)
        faults = [x for x in recs if x["event"] == "sandbox_fault"]
        self.assertEqual([f["kind"] for f in faults], ["path"], recs)
        self.assertIn(os.path.basename(path), faults[0]["detail"])
        self.ok("verify", run)


class Seal(RunCase):
    def run_hostile(self, name, code, *extra):
        self.ok("keygen")
        entry = self.pack_source(name, HEAD + code)
        run = self.path("run")
        r = self.run_unit(entry, run, *extra)
        recs = self.check_run(run)
        ends = [x for x in recs if x["event"] == "trial_end"]
        self.assertEqual(len(ends), 1, recs)
        # A failed trial is a result (the run is intact), and the exit
        # status says whether one failed.
        self.assertEqual(r.rc, 3 if ends[0]["failed"] else 0, r)
        return entry, run, recs, ends[0], r

    def contained(self, name, code, kind, detail, *extra):
        """The unit faulted with `kind`, its detail naming `detail`; the run
        verifies and goes on with the next unit."""
        entry, run, recs, end, r = self.run_hostile(name, code, *extra)
        faults = [x for x in recs if x["event"] == "sandbox_fault"]
        self.assertEqual([f["kind"] for f in faults], [kind], recs)
        self.assertIn(detail, faults[0]["detail"])
        self.assertTrue(end["failed"])
        self.assertEqual(end["reason"], "fault")
        self.ok("verify", run)
        self.assertEqual(self.run_unit(entry, run, study="1").rc, 3 if end["failed"] else 0)
        self.check_run(run)
        return faults[0], r

    # -- 1. no training before the clock -----------------------------------------

    def test_loss_and_batches_in_init_are_refused(self):
        entry, run, recs, end, r = self.run_hostile("init_trains", r"""
static int init_hook(apf_ctx *c) {
	const apf_batch *b; double loss;
	if (apf_next_batch(c, &b) || apf_loss_grad(c, b, &loss))
		return -1;
	return 0; }
""" + NO_STEP)
        self.assertTrue(end["failed"])
        self.assertEqual(end["reason"], "error")
        self.assertIn("next_batch: called in init_optimizer_state", end["detail"])
        self.assertIn("update_params and data_selection only", r.err)
        self.assertFalse([x for x in recs if x["event"] == "clock_start"])

    def test_parameters_changed_in_init_are_a_fault(self):
        # What a harness bypass that trained in init would leave.
        self.contained("init_moves", r"""
static int init_hook(apf_ctx *c) { apf_scale(c, apf_all_params(c), 0.5f); return 0; }
""" + NO_STEP, "protocol", "parameters differ from the workload's initialisation")

    def test_data_stream_moved_before_the_clock_is_a_fault(self):
        # Writing the arena's header directly, past every harness check:
        # the header sits 4 KiB before the parameters (trial/trial.h).
        self.contained("init_reads", r"""
static int init_hook(apf_ctx *c) {
	char *arena = (char *)apf_all_params(c).p - 4096;
	uint64_t *pos = (uint64_t *)(arena + 80); /* data_epoch, data_index */
	pos[1] = 640;
	return 0; }
""" + NO_STEP, "protocol", "data stream moved before the clock started")

    def test_init_past_its_allowance_is_a_fault(self):
        _, r = self.contained("init_slow", r"""
static int init_hook(apf_ctx *c) { (void)c; spin(120); return 0; }
""" + NO_STEP, "timeout", "allowance of 5.0 s")

    def test_constructor_work_counts_against_the_allowance(self):
        self.contained("ctor_slow", r"""
__attribute__((constructor)) static void early(void) { spin(120); }
""" + NO_INIT + NO_STEP, "timeout", "allowance of 5.0 s")

    def test_honest_run_logs_its_initial_state_and_init_time(self):
        entry = self.pack_baseline()
        run = self.path("run")
        self.assertEqual(self.run_unit(entry, run).rc, 0)
        recs = self.check_run(run)
        start = [x for x in recs if x["event"] == "trial_start"][0]
        clock = [x for x in recs if x["event"] == "clock_start"][0]
        self.assertEqual(start["init_allowance_ns"], 5_000_000_000)
        self.assertLess(clock["submission_init_ns"], start["init_allowance_ns"])
        self.assertEqual(clock["checkpoint"]["file"], "ckpt/0.bin")
        unit = clock["unit"]
        with open(os.path.join(run, unit, "ckpt", "0.bin"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             clock["checkpoint"]["sha256"])
        r = self.ok("verify", run, "--reeval", "--replay", "1", "--seed", "1",
                    timeout=600)
        self.assertIn("1 initial state equals the workload's initialisation", r.out)
        self.assertIn("1 of", r.out)
        # Check 4 hashes checkpoint 0 with the others: one changed byte.
        path = os.path.join(run, unit, "ckpt", "0.bin")
        data = bytearray(open(path, "rb").read())
        data[-1] ^= 1
        open(path, "wb").write(bytes(data))
        self.fails(1, "verify", run, match="check 4 (checkpoints)")
        r = self.apf("verify", run)
        self.assertIn("the initial state of", r.err)

    # -- 2. the trial holds only the training examples ----------------------------

    def test_validation_and_test_examples_are_not_in_the_trial(self):
        # Scans every readable mapping of its own process for the first
        # validation and test images; the supervisor hands over the train
        # split alone, so they are not there.
        if os.environ.get("APF_SANITIZED"):
            self.skipTest("under AddressSanitizer the trial's address space holds "
                          "terabytes of shadow memory, which no scan can cover")
        train, n = split_bytes("train-images-idx3-ubyte.gz", 0)
        val, _ = split_bytes("train-images-idx3-ubyte.gz", n - 500)
        test, _ = split_bytes("t10k-images-idx3-ubyte.gz", 0)
        code = scan_code(train, val, test)
        entry, run, recs, end, r = self.run_hostile("scan", NO_INIT + code)
        self.assertFalse(end["failed"], end)
        # The search works (it finds a training image) and finds neither
        # a validation nor a test image.
        self.assertEqual(scan_found(self, run, end), ("1", "0", "0"))

    def test_reading_the_dataset_files_is_a_fault(self):
        self.contained("read_test", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	int fd = open("@DATA@/t10k-images-idx3-ubyte.gz", O_RDONLY);
	char buf[64]; if (fd >= 0 && read(fd, buf, sizeof buf) > 0) puts("read the test split"); }
""".replace("@DATA@", BLOBS_DATA), "path", "t10k-images")

    # -- 3. the supervisor trusts nothing from the trial ---------------------------

    def test_forged_eval_report_is_a_protocol_fault(self):
        self.contained("forge", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s == 3 && write(5, "eval 4 due\n", 11) != 11) abort(); }
""", "protocol", "'eval 4 due' from the trial: an eval the supervisor did not ask for")

    def test_stalling_in_the_copy_window_is_charged_to_the_submission(self):
        # Between its eval report (where the clock stops) and "copied" the
        # trial runs unfrozen: a submission that reports for the harness
        # when an eval is due and then keeps the window open 1.5 s would
        # train untimed there. Past APF_COPY_ALLOWANCE_NS (0.1 s) the window
        # is the submission's: the eval's accumulated time carries the
        # excess, and the verifier's timing check recomputes it.
        entry, run, recs, end, r = self.run_hostile("copy_stall", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	static volatile int64_t *page; static int done;
	if (!page) page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, 4, 0);
	if (done || page == MAP_FAILED || page[0] <= 0 || s + 1 < page[0]) return;
	char line[64]; int n = snprintf(line, sizeof line, "eval %lld due\n", (long long)s + 1);
	if (write(5, line, (size_t)n) != n) abort();
	spin(1.5);
	if (write(5, "copied\n", 7) != 7) abort();
	done = 1; }
""")
        seq = [x for x in recs if x.get("unit") and x["event"] in ("step_block", "eval")]
        stalled = [i for i, x in enumerate(seq)
                   if x["event"] == "eval" and x["copy_ns"] >= 1_000_000_000]
        self.assertEqual(len(stalled), 1, seq)
        ev, block = seq[stalled[0]], seq[stalled[0] - 1]
        self.assertEqual(block["event"], "step_block")
        self.assertEqual(ev["accumulated_submission_ns"],
                         block["accumulated_submission_ns"] + ev["copy_ns"] - 100_000_000)
        self.assertLessEqual(ev["copy_ns"], ev["end_ns"] - ev["start_ns"])
        # Every honest copy (nothing to copy on the CPU) is free.
        for x in seq:
            if x["event"] == "eval" and x is not ev:
                self.assertLess(x["copy_ns"], 100_000_000, x)
        # The log's timing is consistent with the charge: checks 1 to 3 pass.
        rep = json.loads(self.ok("verify", run, "--json").out)
        checks = {c["check"]: c["outcome"] for c in rep["checks"]}
        self.assertEqual([checks[1], checks[2], checks[3]], ["passed"] * 3, rep)

    def test_eval_request_written_into_the_control_page_is_a_protocol_fault(self):
        self.contained("forge_page", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	int64_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, 4, 0);
	if (page != MAP_FAILED) page[0] = 1; /* eval_at */ }
""", "protocol", "did not ask for")

    def test_random_message_streams_are_protocol_faults(self):
        # A seeded stream of near-miss lines, as the unit test and the fuzz
        # target send without a trial; here through the real channel.
        self.contained("noise", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	static const char *const w[] = {"lock", "ready 0 64", "eval 3 due", "eval 2 complete",
		"eval 99999999 max_steps", "go 0 0", "error", "eval 4 due\r", "\033[2J"};
	uint64_t x = 88172645463325252ull; char line[64];
	for (int i = 0; i < 200; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		int n = snprintf(line, sizeof line, "%s%s\n", w[x % 9], x % 3 ? "" : " 7");
		if (write(5, line, (size_t)n) != n) break;
	} }
""", "protocol", "from the trial")

    def test_shrinking_or_growing_the_shared_memory_is_refused(self):
        # Shrinking the control page once made apf run die of SIGBUS (and
        # every resume after it); the memfds are sealed, so each call fails
        # and the trial trains on.
        entry, run, recs, end, r = self.run_hostile("shrink", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	for (int fd = 3; fd <= 6; fd++) {
		int a = ftruncate(fd, 0), e1 = errno;
		int b = ftruncate(fd, 64 << 20), e2 = errno; /* under RLIMIT_FSIZE */
		fprintf(stderr, "fd %d: shrink %d (%d) grow %d (%d)\n", fd, a, e1, b, e2);
		if (a == 0 || b == 0) abort();
	} }
""")
        self.assertFalse(end["failed"], end)
        self.assertIn(end["reason"], ("targets", "budget"))
        self.ok("verify", run)
        self.assertEqual(self.run_unit(entry, run, study="1").rc, 3 if end["failed"] else 0)

    def test_punching_the_arena_damages_only_the_trial(self):
        # Zeroing the arena's pages (the seals allow it) damages only the
        # trial: the supervisor checks the arena before it reads it, and
        # here the harness finds its header gone first.
        entry, run, recs, end, r = self.run_hostile("punch", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s == 3) fallocate(3, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20); }
""")
        self.assertTrue(end["failed"], end)
        self.assertIn(end["reason"], ("fault", "error"))
        self.assertEqual(end["evals"], 1, end)
        self.ok("verify", run)
        self.assertEqual(self.run_unit(entry, run, study="1").rc, 3 if end["failed"] else 0)

    # -- 5. memory the limit would not see --------------------------------------------

    def test_memfd_memory_past_the_limit_is_a_fault(self):
        # 2 GB of memfd under a 1 GiB limit, never mapped: RLIMIT_AS did
        # not see it.
        fault, r = self.contained("memfd", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	int fd = memfd_create("hog", 0);
	if (fd >= 0 && fallocate(fd, 0, 0, 2l << 30) == 0) puts("2 GB held"); }
""", "syscall", "memfd_create", "--memory-limit", "1024")

    # -- 7. the smaller ones -------------------------------------------------------------

    def test_replay_and_run_look_the_same_to_the_trial(self):
        # The submission folds its command line and environment into every
        # update: a replay that the trial could tell from the run by either
        # would end in other parameters.
        entry, run, recs, end, r = self.run_hostile("telltale", NO_INIT + r"""
static float telltale;
static void read_all(const char *path, uint64_t *h) {
	int fd = open(path, O_RDONLY); char buf[4096]; ssize_t n;
	while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
		for (ssize_t i = 0; i < n; i++) *h = (*h ^ (unsigned char)buf[i]) * 1099511628211ull;
	if (fd >= 0) close(fd); }
static void step_hook(apf_ctx *c, int64_t s) { (void)s;
	if (telltale == 0) {
		uint64_t h = 1469598103934665603ull;
		read_all("/proc/self/cmdline", &h);
		read_all("/proc/self/environ", &h);
		telltale = 1e-4f * (float)(h % 1000 + 1);
	}
	apf_add_scalar(c, apf_all_params(c), telltale); }
""")
        self.assertGreaterEqual(end["evals"], 2, end)
        r = self.ok("verify", run, "--replay", str(end["evals"]), timeout=600)
        self.assertIn(f"{end['evals']} of {end['evals']} eval intervals replayed", r.out)

    def test_the_trial_sees_no_host_paths(self):
        entry, run, recs, end, r = self.run_hostile("paths", NO_INIT + r"""
static void show(const char *path) {
	int fd = open(path, O_RDONLY); char buf[8192]; ssize_t n;
	while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
		for (ssize_t i = 0; i < n; i++) fputc(buf[i] ? buf[i] : '\n', stderr);
	if (fd >= 0) close(fd); }
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	fprintf(stderr, "==mountinfo\n"); show("/proc/self/mountinfo");
	fprintf(stderr, "==cmdline\n"); show("/proc/self/cmdline");
	fprintf(stderr, "==environ\n"); show("/proc/self/environ");
	char cwd[512]; fprintf(stderr, "==cwd %s\n", getcwd(cwd, sizeof cwd)); }
""")
        with open(os.path.join(run, end["unit"], "trial.log")) as f:
            log = f.read()
        self.assertIn("==mountinfo", log)
        mounts = log.split("==mountinfo")[1].split("==cmdline")[0]
        rows = [l.split() for l in mounts.splitlines() if len(l.split()) > 4]
        self.assertTrue(rows, mounts)
        # The binary, the workload spec and the unit's files are copies in
        # the sandbox's root, not bind mounts: the mount table (its root
        # column included), the arguments, the environment and the working
        # directory name nothing of where the operator keeps apf or the run.
        self.assertNotIn("/apf/unit", [r[4] for r in rows])
        self.assertIn("/apf/unit/submission.so", log)
        for host in (self.tmp, apftest.ROOT, os.path.dirname(apftest.APF)):
            self.assertNotIn(host, log)

    def test_compiler_output_reaches_the_terminal_escaped(self):
        self.ok("keygen")
        code = '#error "\x1b]0;owned\x07\x1b[2J"\n'
        # pack's own build refuses it, escaped too ...
        self.write("esc/submission.ini", "[submission]\nname = esc\nruleset = self\n")
        self.write("esc/submission.c", code)
        r = self.fails(2, "pack", self.path("esc"), "-w", BLOBS, "-o", self.path("x.apf"))
        self.assertNotIn("\x1b", r.err)
        self.assertIn("\\x1b]0;owned\\x07", r.err)
        # ... and an entry packed without that check meets the runner's.
        entry = self.pack_source("esc", code, build=False)
        r = self.run_unit(entry, self.path("run"))
        self.assertEqual(r.rc, 3, r)  # the unit failed: its build did
        self.assertNotIn("\x1b", r.err)
        self.assertNotIn("\x07", r.err)
        self.assertIn("\\x1b]0;owned\\x07", r.err)
