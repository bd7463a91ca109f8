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
import runfake
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
#include <sys/stat.h>
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

    def test_no_training_example_is_in_the_trial_before_the_clock(self):
        # The red team trained a copy of the model in init_optimizer_state
        # by calling the objective directly, past the harness's phase
        # check. Whatever init calls, it has nothing to learn from: it
        # scans every readable mapping of its process for a training
        # image (the same scan finds one once the clock runs) and records
        # what it found in a slot.
        if os.environ.get("APF_SANITIZED"):
            self.skipTest("under AddressSanitizer the trial's address space holds "
                          "terabytes of shadow memory, which no scan can cover")
        train, n = split_bytes("train-images-idx3-ubyte.gz", 0)
        val, _ = split_bytes("train-images-idx3-ubyte.gz", n - 500)
        test, _ = split_bytes("t10k-images-idx3-ubyte.gz", 0)
        code = scan_code(train, val, test).replace(
            "static void step_hook(apf_ctx *c, int64_t s) { (void)c;\n\tif (s != 3) return;",
            "static void scan_all(const char *when) {")
        code = code.replace('fprintf(stderr, "scan: %zu bytes',
                            'fprintf(stderr, "%s scan: %zu bytes').replace(
                            '\t\tsearched, found[0]', '\t\twhen, searched, found[0]')
        code = code.replace("static volatile int found[3];", "volatile int found[3] = {0, 0, 0};")
        code += r"""
static int init_hook(apf_ctx *c) { (void)c; scan_all("init"); return 0; }
static void step_hook(apf_ctx *c, int64_t s) { (void)c; if (s == 3) scan_all("step"); }
"""
        entry, run, recs, end, r = self.run_hostile("scan_init", code)
        self.assertFalse(end["failed"], end)
        with open(os.path.join(run, end["unit"], "trial.log")) as f:
            log = f.read()
        got = dict(re.findall(r"(init|step) scan: \d+ bytes, train (\d)", log))
        self.assertEqual(got, {"init": "0", "step": "1"}, log)

    def test_state_slots_a_run_began_with_are_recomputed_by_replay(self):
        # The initial-state check once compared parameters, model state,
        # step and data position, not the optimizer's slots: a run could
        # begin with state init_optimizer_state never computed (a head
        # start learned elsewhere) and verify. Here the operator, runner
        # key in hand, forges a slot the submission never reads after init
        # into every checkpoint - so that each interval still replays bit
        # for bit from its own - fixes the digests and re-signs. The
        # replay from the initial state runs init_optimizer_state again
        # and compares the whole arena, slots included, with checkpoint 0.
        entry, run, recs, end, r = self.run_hostile("slot_init", r"""
static int init_hook(apf_ctx *c) {
	apf_vec head;
	if (apf_slot(c, "head_start", apf_all_params(c).n, &head)) return -1;
	apf_fill(c, head, 0.0f);
	return 0; }
""" + NO_STEP)
        self.assertFalse(end["failed"], end)
        self.assertGreaterEqual(end["evals"], 2, end)
        self.ok("verify", run, "--reeval", "--replay", "all", timeout=600)
        rd = runfake.RunDir(run, os.path.join(self.home, "keys", "default.key.pem"))
        unit_dir = os.path.join(run, end["unit"])
        new_sha = {}
        for name in sorted(os.listdir(os.path.join(unit_dir, "ckpt"))):
            path = os.path.join(unit_dir, "ckpt", name)
            data = bytearray(open(path, "rb").read())
            nslots = struct.unpack_from("<I", data, 104)[0]
            for i in range(nslots):
                at = 112 + 72 * i
                slot = data[at:at + 48].split(b"\0")[0]
                off, n = struct.unpack_from("<QQ", data, at + 48)
                if slot == b"head_start":
                    struct.pack_into(f"<{n}f", data, off, *([0.25] * n))
            open(path, "wb").write(bytes(data))
            new_sha["ckpt/" + name] = hashlib.sha256(bytes(data)).hexdigest()
        for x in rd.records:
            ck = x.get("checkpoint")
            if isinstance(ck, dict):
                ck["sha256"] = new_sha[ck["file"]]
        rd.save()
        # Checks 1 to 4 pass: the chain, the timing, the digests and every
        # re-evaluation are consistent (the slot changes no metric) ...
        r = self.fails(1, "verify", run, "--reeval", "--replay", "all", timeout=600,
                       match="check 5 (replay)")
        # ... and the replay from the initial state says what is wrong.
        self.assertIn("replayed from the initial state", r.err)
        self.assertIn("init_optimizer_state run again does not leave checkpoint 0", r.err)
        self.assertIn("head_start", r.err)

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
        # Between its eval report and "copied" the trial runs unfrozen: a
        # submission that reports for the harness when an eval is due and
        # then keeps training 1.5 s before "copied" once had 100 ms of
        # that free on every eval (issue 29). The interval now ends when
        # the supervisor has frozen the trial after "copied": all of it is
        # the submission's, on every device, and the verifier holds the
        # copy inside its step block.
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
        # The block, which ends at the freeze, holds the whole stall, and
        # the eval adds nothing to it.
        self.assertGreaterEqual(block["end_ns"] - block["start_ns"], ev["copy_ns"])
        self.assertEqual(ev["accumulated_submission_ns"], block["accumulated_submission_ns"])
        self.assertEqual(ev["start_ns"], block["end_ns"])
        # The log's timing is consistent with the charge: checks 1 to 3 pass.
        rep = json.loads(self.ok("verify", run, "--json").out)
        checks = {c["check"]: c["outcome"] for c in rep["checks"]}
        self.assertEqual([checks[1], checks[2], checks[3]], ["passed"] * 3, rep)
        # An operator's runner that leaves the copy out of the block
        # (ending it at the report, as the old one did): the verifier
        # finds the copy longer than its block's remainder.
        rd = runfake.RunDir(run, os.path.join(self.home, "keys", "default.key.pem"))
        b = [x for x in rd.records if x["event"] == "step_block"
             and x["last_step"] == block["last_step"]][0]
        cut = b["end_ns"] - b["start_ns"] - 1000
        for x in rd.records:
            if x.get("unit") != ev["unit"] or x["seq"] < b["seq"]:
                continue
            if x is b:
                x["end_ns"] -= cut
            if x["event"] == "eval" and x["index"] == ev["index"]:
                x["start_ns"] -= cut  # the copy moved into the eval
            if "accumulated_submission_ns" in x:
                x["accumulated_submission_ns"] -= cut
            if "accumulated_eval_ns" in x:
                x["accumulated_eval_ns"] += cut
            if x["event"] == "trial_end" and x["time_to_target_ns"] is not None and \
                    x["time_to_target_ns"] >= ev["accumulated_submission_ns"]:
                x["time_to_target_ns"] -= cut
        rd.save()
        r = self.fails(1, "verify", run)
        self.assertIn("is longer than its step block", r.err)

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

    # -- 4. the trial touches nothing of the host's ----------------------------------

    def host_files(self, *trees):
        """Mode, owner and ctime of the host files a trial could reach if
        it got out: the /dev nodes it is given, and every file under the
        given trees (the run directory, the workloads, the entry)."""
        seen = {}
        for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"):
            st = os.stat(p)
            seen[p] = (st.st_mode, st.st_uid, st.st_gid, st.st_ctime_ns)
        for top in trees:
            for d, dirs, files in os.walk(top):
                for name in dirs + files:
                    p = os.path.join(d, name)
                    st = os.lstat(p)
                    seen[p] = (st.st_mode, st.st_uid, st.st_gid, st.st_ctime_ns)
        return seen

    def assert_no_set_id(self, tree):
        for d, dirs, files in os.walk(tree):
            for name in dirs + files:
                p = os.path.join(d, name)
                mode = os.lstat(p).st_mode
                self.assertFalse(mode & 0o6000, f"{p} has mode {mode:o}")
                if os.path.isfile(p):
                    self.assertFalse(mode & 0o111, f"{p} is executable ({mode:o})")

    def test_trial_output_is_a_pipe_and_changing_it_is_a_fault(self):
        # The red team's host escape: the trial's stdout was trial.log
        # itself; it rewrote the file through the descriptor and made it a
        # setuid-root executable (fchmod is not a path the filter saw).
        # Now fd 1 is a pipe the supervisor drains, and a metadata change
        # in any form is a fault.
        entry, run, recs, end, r = self.run_hostile("setuid_log", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	char link[256] = ""; ssize_t n = readlink("/proc/self/fd/1", link, sizeof link - 1);
	if (n > 0) link[n] = 0;
	fprintf(stderr, "fd1 -> %s\n", link); fflush(stderr);
	static const char elf[] = "\x7f" "ELF\x02\x01\x01";
	if (write(1, elf, sizeof elf - 1) < 0) {}
	fprintf(stderr, "seek %lld\n", (long long)lseek(1, 0, SEEK_SET)); fflush(stderr);
	fchmod(1, 04755); }
""")
        faults = [x for x in recs if x["event"] == "sandbox_fault"]
        self.assertEqual([f["kind"] for f in faults], ["syscall"], recs)
        self.assertIn("fchmod(1, 04755) changes a file's metadata", faults[0]["detail"])
        log_path = os.path.join(run, end["unit"], "trial.log")
        with open(log_path, "rb") as f:
            log = f.read()
        self.assertIn(b"fd1 -> pipe:[", log)
        self.assertIn(b"seek -1", log)  # a pipe has no offset to rewrite from
        self.assertIn(b"\\x7fELF", log)  # kept as text, escaped
        self.assertNotIn(b"\x7fELF", log)
        self.assertEqual(os.stat(log_path).st_mode & 0o7777, 0o644)
        self.assert_no_set_id(run)
        self.ok("verify", run)

    def test_changing_a_host_device_is_a_fault_and_changes_nothing(self):
        # The sandbox's /dev nodes are the host's inodes: the red team
        # changed the mode of the host's /dev/full, in the run and again
        # in the auditor's replay.
        before = self.host_files()
        entry, run, recs, end, r = self.run_hostile("chmod_dev", NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c;
	if (s != 3) return;
	chmod("/dev/full", 0666); }
""")
        faults = [x for x in recs if x["event"] == "sandbox_fault"]
        self.assertEqual([f["kind"] for f in faults], ["syscall"], recs)
        self.assertIn('chmod("/dev/full", 0666) changes a file\'s metadata',
                      faults[0]["detail"])
        self.assertEqual(self.host_files(), before)

    def test_a_run_and_its_replay_leave_no_set_id_file_and_no_changed_host_file(self):
        # Every step, what a trial can do with what it holds without a
        # fault: write an executable's bytes to its output, try to seek
        # and rewrite it, write to the /dev nodes, reopen its output.
        # Nothing of the host's changes - not in the run, not in the
        # auditor's replay of every interval (as root here in CI).
        entry = self.pack_source("quiet", HEAD + NO_INIT + r"""
static void step_hook(apf_ctx *c, int64_t s) { (void)c; (void)s;
	static const char elf[] = "\x7f" "ELF\x02\x01\x01\x00\n";
	if (write(1, elf, sizeof elf - 1) < 0) {}
	if (pwrite(1, "x", 1, 0) < 0) {}
	if (lseek(2, 0, SEEK_SET) < 0) {}
	int fd = open("/dev/full", O_WRONLY); if (fd >= 0) { if (write(fd, "x", 1) < 0) {} close(fd); }
	fd = open("/dev/null", O_WRONLY); if (fd >= 0) { if (write(fd, "x", 1) < 0) {} close(fd); }
	fd = open("/proc/self/fd/1", O_WRONLY); if (fd >= 0) { if (write(fd, "y\n", 2) < 0) {} close(fd); } }
""")
        workloads = os.environ.get("APF_WORKLOADS_DIR") or os.path.join(apftest.ROOT, "tests", "data", "workloads")
        before = self.host_files(workloads)
        entry_st = os.stat(entry)
        run = self.path("run")
        self.assertEqual(self.run_unit(entry, run).rc, 0)
        self.assertEqual(self.host_files(workloads), before)
        self.assert_no_set_id(run)
        snap = self.host_files(run)
        self.ok("verify", run, "--replay", "all", timeout=600)
        after = self.host_files(run, workloads)
        for p, v in snap.items():
            self.assertEqual(after.get(p), v, p)
        for p, v in before.items():
            self.assertEqual(after.get(p), v, p)
        self.assertEqual(os.stat(entry).st_mtime_ns, entry_st.st_mtime_ns)
        self.assert_no_set_id(run)

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

    def test_replay_asks_for_its_evals_as_the_run_did(self):
        # A replay once wrote the eval's step into the control page at its
        # go, where a run writes it only when the eval falls due: a trial
        # could tell them apart, and be honest only when replayed. This
        # one folds what it sees of the control page at the first step of
        # every interval into its parameters: a replay that showed it
        # anything else than the run did would end elsewhere.
        self.ok("keygen")
        entry = self.pack_source("peek", r"""
#include <apf/submission.h>
#include <stdint.h>
#include <sys/mman.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)r; (void)t;
	static volatile int64_t *page; static int last = -1;
	if (!page) page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, 4, 0);
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));
	if (e->index != last && page != MAP_FAILED) {
		/* The first step of an interval: is an eval asked for yet,
		 * and how far ahead? */
		int64_t at = page[0];
		float seen = at ? 1e-3f + 1e-6f * (float)(at - s) : 0.0f;
		apf_add_scalar(c, apf_all_params(c), seen);
		last = e->index;
	}
	return 0;
}
""")
        run = self.path("run")
        self.assertEqual(self.run_unit(entry, run).rc, 0)
        recs = self.check_run(run)
        evals = [x for x in recs if x["event"] == "eval"]
        self.assertGreaterEqual(len(evals), 2, evals)
        r = self.ok("verify", run, "--replay", "all", timeout=600)
        self.assertIn(f"{len(evals)} of {len(evals)} eval intervals replayed", r.out)
        # The run asked for every eval but the first after a step of its
        # interval, which the replay asked after too.
        self.assertTrue(all(x["asked_after_step"] > 1 for x in evals[1:]), evals)

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
