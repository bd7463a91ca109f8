"""End-to-end: `apf verify RUN_DIR` on hostile run directories.

docs/design.md 3.8: the verifier never blocks and never reads unbounded - regular
files only, no symlink followed out of the run directory, every read capped.
Each case builds a valid run (runfake), makes one file of it hostile, and
checks the exit code, that the one error line names the file, and that apf
answered within seconds (a FIFO used to block it forever, /dev/zero to
read forever).

Exit codes (docs/design.md 4.2): a file that describes the run (entry.apf,
run.json, log.jsonl, log.dsse.json) refused is an input error, exit 2, as
when it is missing or malformed; a file the signed log describes
(hparams.json, eval_measurements.csv, a checkpoint, heldout.json) refused
is a verification failure, exit 1, naming its check.
"""
import json
import os
import shutil
import time

from apftest import ApfCase
from runfake import FakeRun

LIMIT_S = 20   # far above what any case takes; hitting it is the failure


class Hostile(ApfCase):
    def setUp(self):
        super().setUp()
        self.run = FakeRun(self).write(self.path("run"))

    def verify(self, *args, path=None):
        t0 = time.monotonic()
        r = self.apf("verify", path or self.run.path, *args, timeout=LIMIT_S)
        self.assertLess(time.monotonic() - t0, LIMIT_S, r)
        return r

    def refused(self, code, *matches, args=(), path=None):
        """One `apf: ...` line, exit `code`, holding every one of matches."""
        r = self.verify(*args, path=path)
        self.assertEqual(r.rc, code, r)
        lines = [l for l in r.err.splitlines() if l.strip()]
        self.assertTrue(lines and lines[-1].startswith("apf: "), r)
        for m in matches:
            self.assertIn(m, lines[-1], r)
        return r

    def replace_with_fifo(self, *rel):
        p = self.run.file(*rel)
        os.remove(p)
        os.mkfifo(p)
        return p

    def first_checkpoint(self):
        for u in self.run.units():
            for i in self.run.kept_evals(u):
                e = self.run.records[i]
                return u, self.run.file(u, "ckpt", f"{e['index']}.bin")
        self.fail("the run has no checkpoint")

    # ---- never blocks ------------------------------------------------------

    def test_log_that_is_a_fifo_is_refused_without_blocking(self):
        p = self.replace_with_fifo("log.jsonl")
        self.refused(2, p, "not a regular file (a FIFO)")

    def test_signature_that_is_a_fifo_is_refused_without_blocking(self):
        p = self.replace_with_fifo("log.dsse.json")
        self.refused(2, p, "not a regular file (a FIFO)")

    def test_hparams_that_is_a_fifo_fails_check_2(self):
        u = self.run.units()[0]
        p = self.replace_with_fifo(u, "hparams.json")
        self.refused(1, "check 2 (log)", p, "a FIFO")

    def test_csv_that_is_a_fifo_fails_check_3(self):
        u = self.run.units()[0]
        p = self.replace_with_fifo(u, "eval_measurements.csv")
        self.refused(1, "check 3 (timing)", p, "a FIFO")

    def test_checkpoint_that_is_a_fifo_fails_check_4(self):
        _, p = self.first_checkpoint()
        os.remove(p)
        os.mkfifo(p)
        self.refused(1, "check 4 (checkpoints)", p, "a FIFO")

    # ---- never reads unbounded -----------------------------------------------

    def test_entry_symlinked_to_dev_zero_is_refused_at_once(self):
        p = self.run.file("entry.apf")
        os.remove(p)
        os.symlink("/dev/zero", p)
        self.refused(2, p, "symbolic link")

    def test_entry_named_by_the_user_that_is_a_device_is_refused(self):
        # A path the user names may be a symlink; a device it leads to is
        # still not read.
        link = self.path("zero.apf")
        os.symlink("/dev/zero", link)
        self.refused(2, link, "not a regular file (a character device)", path=link)

    def test_sparse_run_json_over_the_cap_is_refused_unread(self):
        p = self.run.file("run.json")
        os.truncate(p, (64 << 20) + 1)
        self.refused(2, p, "larger than the 67108864-byte limit")

    def test_sparse_csv_over_the_cap_fails_check_3(self):
        u = self.run.units()[0]
        p = self.run.file(u, "eval_measurements.csv")
        os.truncate(p, (256 << 20) + 1)
        self.refused(1, "check 3 (timing)", p, "limit")

    def test_sparse_entry_over_the_cap_is_refused_unread(self):
        p = self.path("big.apf")
        with open(p, "wb") as f:
            f.truncate((1 << 30) + 1)
        self.refused(2, p, "larger than the 1073741824-byte limit", path=p)

    # ---- no symlink followed out of the run ------------------------------------

    def test_checkpoint_symlinked_outside_discloses_nothing_of_its_target(self):
        u, p = self.first_checkpoint()
        secret = self.path("secret.bin")
        with open(secret, "wb") as f:
            f.write(b"s" * 987654)
        os.remove(p)
        os.symlink(secret, p)
        r = self.refused(1, "check 4 (checkpoints)", p, "symbolic link")
        self.assertNotIn("987654", r.out + r.err, r)
        self.assertNotIn("secret", r.out + r.err, r)
        j = self.verify("--json")
        self.assertEqual(j.rc, 1, j)
        self.assertNotIn("987654", j.out + j.err, j)

    def test_study_directory_symlinked_out_of_the_run_fails(self):
        study = self.run.units()[0].split("/")[0]
        outside = self.path("elsewhere")
        shutil.move(self.run.file(study), outside)
        os.symlink(outside, self.run.file(study))
        self.refused(1, "check 2 (log)", f"{study} is a symbolic link")

    def test_heldout_symlinked_out_of_the_run_fails_check_6(self):
        outside = self.path("heldout.json")
        with open(outside, "w") as f:
            json.dump({"seed": "ab" * 32, "draws": []}, f)
        os.symlink(outside, self.run.file("heldout.json"))
        self.refused(1, "check 6 (held-out)", self.run.file("heldout.json"),
                     "symbolic link")

    def test_run_json_symlinked_is_refused(self):
        p = self.run.file("run.json")
        outside = self.path("run.json")
        shutil.move(p, outside)
        os.symlink(outside, p)
        self.refused(2, p, "symbolic link")


class HostileUnfinished(ApfCase):
    def test_reeval_of_an_unfinished_run_says_why_it_is_unfinished(self):
        # Killed before any unit's clock started: verification passes as
        # far as the log goes, nothing is there to re-evaluate (not even
        # checkpoint 0), and the exit 3 verdict must keep its message (it
        # printed "unknown error").
        run = FakeRun(self, complete=False).write(self.path("run"))
        u = run.units()[0]
        cut = run.find("clock_start", u)[0]
        run.records = run.records[:cut]
        run.save()
        for name in run.units():
            os.remove(run.file(name, "eval_measurements.csv"))
        plain = self.apf("verify", run.path, timeout=LIMIT_S)
        self.assertEqual(plain.rc, 3, plain)
        t0 = time.monotonic()
        r = self.apf("verify", run.path, "--reeval", timeout=LIMIT_S * 6)
        self.assertLess(time.monotonic() - t0, LIMIT_S * 6, r)
        self.assertEqual(r.rc, 3, r)
        line = [l for l in r.err.splitlines() if l.strip()][-1]
        self.assertNotIn("unknown error", line, r)
        self.assertIn("without run_end", line, r)
        self.assertIn("log.jsonl", line, r)
        # Nothing to replay is reported as skipped, with the reason, not
        # as "0 of 0 intervals replayed" passed.
        r = self.apf("verify", run.path, "--replay", "3", "--json", timeout=LIMIT_S * 6)
        self.assertEqual(r.rc, 3, r)
        check = [c for c in json.loads(r.out)["checks"] if c["name"] == "replay"][0]
        self.assertEqual(check["outcome"], "skipped", check)
        self.assertIn("no eval interval can be replayed", check["detail"])
