"""End-to-end: `apf verify RUN_DIR` on run directories.

What an auditor relies on: an untouched run verifies; any change to the log,
its signature, the files beside it or the timing they claim fails with exit
1 and names the check, the file and the record; a run that stopped without
run_end is exit 3; a directory that is not a run is exit 2.

The run under test comes from make_run(): a fake written by runfake (a valid
run directory made by the rules the runner follows, so scenarios a real run
rarely shows - resumes from a chosen eval, every way a trial ends, sessions,
variants - can be written on purpose), or, in VerifyTamperingRealRun, a run
made by `apf run`. The tamperings only use runfake.RunDir, which reads and
rewrites any run directory on disk (re-signing with the runner's key where
the test plays a runner that lies), so each of them runs on both.
"""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

import apftest
import runfake
from apftest import ApfCase
from runfake import FakeRun, RunDir, UnitScript

CHECK_LOG = "check 2 (log)"
CHECK_TIMING = "check 3 (timing)"
CHECK_CKPT = "check 4 (checkpoints)"
CHECK_HELDOUT = "check 6 (held-out)"


class RunCase(ApfCase):
    def make_run(self, out="run", **kw):
        """The run under test: a RunDir."""
        return FakeRun(self, **kw).write(self.path(out))

    def verify(self, run, *args):
        return self.apf("verify", run.path, *args)

    def verified(self, run, *args):
        r = self.ok("verify", run.path, *args)
        self.assertIn("verified", r.out)
        return r

    def rejected(self, run, check, *matches, code=1):
        """Verification fails with exit `code`, naming the check and each of
        `matches` in its one error line."""
        r = self.fails(code, "verify", run.path)
        line = r.err.strip().splitlines()[-1]
        self.assertIn(check, line, r)
        for m in matches:
            self.assertIn(m, line, r)
        return line

    # ---- finding records, on any run -----------------------------------

    def plain_unit(self, run, evals=3):
        """A unit without resumes that has at least `evals` evals and goes
        on after its second."""
        for u in run.units():
            if run.find("resume", u):
                continue
            if len(run.kept_evals(u)) >= evals:
                return u
        self.skipTest(f"the run has no unit with {evals} evals and no resume")

    def record(self, run, event, unit, **fields):
        found = run.find(event, unit, **fields)
        self.assertTrue(found, (event, unit, fields))
        return found[0]


class VerifyTampering(RunCase):
    """Every kind of tampering docs/design.md 3.8 promises to catch."""

    def setUp(self):
        super().setUp()
        self.run_dir = self.make_run()

    def test_untouched_run_verifies_with_every_check_reported(self):
        run = self.run_dir
        r = self.verified(run)
        for name in ("1 entry", "2 log", "3 timing", "4 checkpoints", "6 held-out"):
            self.assertRegex(r.out, name + r"\s+passed", r.out)
        self.assertRegex(r.out, r"5 replay\s+skipped")
        rep = json.loads(self.ok("verify", run.path, "--json").out)
        self.assertTrue(rep["verified"])
        self.assertTrue(rep["complete"])
        self.assertEqual(rep["exit_code"], 0)
        self.assertEqual(rep["records"], len(run.records))
        self.assertEqual(rep["units"], len(run.units()))
        self.assertEqual(rep["evals"], sum(len(run.kept_evals(u)) for u in run.units()))
        self.assertEqual([c["check"] for c in rep["checks"]], [1, 2, 3, 4, 5, 6])
        self.assertEqual({c["outcome"] for c in rep["checks"]}, {"passed", "skipped"})
        # The signed head is the log's last line, as sha256sum computes it.
        with open(run.log_file(), "rb") as f:
            last = f.read().rstrip(b"\n").split(b"\n")[-1]
        self.assertEqual(rep["head"], runfake.sha256_hex(last))

    def test_rewriting_a_log_without_its_chain_is_caught(self):
        """A byte changed in a metric, a timestamp or a step count: the next
        line's prev no longer matches."""
        run = self.run_dir
        u = self.plain_unit(run)
        i = run.kept_evals(u)[1]
        for field, edit in (("metrics", lambda r: r["metrics"].update(
                                {"train/loss": r["metrics"]["train/loss"] * 0.5})),
                            ("end_ns", lambda r: r.update(end_ns=r["end_ns"] + 1)),
                            ("global_step", lambda r: r.update(global_step=r["global_step"] + 1))):
            with self.subTest(field=field):
                lines = list(run.lines)
                rec = json.loads(lines[i])
                edit(rec)
                lines[i] = runfake.dumps(rec).encode()
                run.write_lines(lines)
                self.rejected(run, CHECK_LOG, f"line {i + 2}:", "prev does not match")
                run.save()  # restore a valid run for the next edit
                run.reload()

    def test_deleted_line(self):
        run = self.run_dir
        lines = list(run.lines)
        del lines[5]
        run.write_lines(lines)
        self.rejected(run, CHECK_LOG, "line 6:", "seq 6 where 5 was due")

    def test_swapped_lines(self):
        run = self.run_dir
        lines = list(run.lines)
        lines[4], lines[5] = lines[5], lines[4]
        run.write_lines(lines)
        self.rejected(run, CHECK_LOG, "line 5:", "seq 5 where 4 was due")

    def test_truncated_log(self):
        run = self.run_dir
        run.write_lines(run.lines[:-3])
        self.rejected(run, CHECK_LOG, "log.jsonl", "records were removed from the end")
        # Cut inside a line, as a crash would: still fewer than signed.
        with open(run.log_file(), "ab") as f:
            f.write(b'{"seq":')
        self.rejected(run, CHECK_LOG, "records were removed from the end")

    def test_signed_head_that_is_not_the_last_line(self):
        run = self.run_dir
        n = len(run.records)
        run.records.insert(n - 1, {"t_ns": run.records[-1]["t_ns"], "event": "env_drift",
                                   "allowed": True,
                                   "fields": [{"field": "cpu", "expected": "a", "actual": "b"}]})
        run.save(sign=False)
        # Still the old signature: over a head that is no longer the last
        # line's, or over fewer records.
        self.rejected(run, CHECK_LOG, "log.jsonl")
        run.sign_head(records=n)
        self.rejected(run, CHECK_LOG, f"line {n + 1} and after are not covered")

    def test_head_signed_by_an_untrusted_key(self):
        run = self.run_dir
        self.ok("keygen", "-o", self.path("mallory"), "--no-trust")
        run.sign_head(key=self.path("mallory.key.pem"),
                      keyid=runfake.pem_keyid(self.path("mallory.pub.pem")))
        # log.dsse.json, or (per-unit logs, whose index the attacker signs
        # too) index.dsse.json, read first.
        self.rejected(run, CHECK_LOG, "dsse.json", "no trusted key verifies it")
        # Trusting the attacker's key does not help: run.json names the
        # runner's.
        r = self.apf("verify", run.path, "--key", self.path("mallory.pub.pem"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("run.json names the runner key", r.err)

    def test_lying_runner_changes_a_timestamp(self):
        """Re-chained and re-signed: only the timing check can see it."""
        run = self.run_dir
        u = self.plain_unit(run)
        b = run.find("step_block", u)[1]
        run.records[b]["end_ns"] += 1000
        run.records[b]["t_ns"] += 1000
        run.save()
        self.rejected(run, CHECK_TIMING, f"line {b + 1} (step_block 2 of {u})",
                      "accumulated_submission_ns", "differs from the sum of the step blocks")

    def test_lying_runner_changes_a_step_count(self):
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[1]
        run.records[e]["global_step"] += 1
        run.save()
        self.rejected(run, CHECK_TIMING, f"line {e + 1} (eval 2 of {u})",
                      "is not its step block's last step")

    def test_lying_runner_changes_a_metric(self):
        """The log is consistent again, but the CSV still says what was
        measured."""
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[1]
        run.records[e]["metrics"]["train/loss"] += 0.25
        run.save()
        line = self.rejected(run, CHECK_TIMING, os.path.join(u, "eval_measurements.csv"),
                             "line 3 (eval 2 of", "train/loss")
        self.assertIn(f"log.jsonl line {e + 1}", line)

    def test_target_flag_that_the_metric_does_not_support(self):
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[0]
        rec = run.records[e]
        rec["validation_target_met"] = not rec["validation_target_met"]
        run.save()
        self.rejected(run, CHECK_TIMING, f"(eval 1 of {u})", "validation_target_met")

    def test_csv_value_differing_from_the_log(self):
        run = self.run_dir
        u = self.plain_unit(run)
        p = run.file(u, "eval_measurements.csv")
        with open(p) as f:
            rows = [l.split(",") for l in f.read().splitlines()]
        col = rows[0].index("accumulated_submission_time")
        rows[2][col] = "%.9f" % (float(rows[2][col]) + 0.001)
        with open(p, "w") as f:
            f.write("\n".join(",".join(r) for r in rows) + "\n")
        self.rejected(run, CHECK_TIMING, "eval_measurements.csv", "line 3 (eval 2",
                      "accumulated_submission_time")
        # A row too few, and a column too few.
        run.write_csv(u)
        with open(p) as f:
            text = f.read().splitlines()
        with open(p, "w") as f:
            f.write("\n".join(text[:-1]) + "\n")
        self.rejected(run, CHECK_TIMING, "eval_measurements.csv", "the file ends after")
        with open(p, "w") as f:
            f.write("\n".join(",".join(c for j, c in enumerate(l.split(",")) if j != 1)
                              for l in text) + "\n")
        self.rejected(run, CHECK_TIMING, "eval_measurements.csv", "accumulated_logging_time is missing")

    def test_csv_printed_with_other_digits_still_verifies(self):
        """Values are compared as numbers, not as text."""
        run = self.run_dir
        u = self.plain_unit(run)
        p = run.file(u, "eval_measurements.csv")
        with open(p) as f:
            rows = [l.split(",") for l in f.read().splitlines()]
        tcol = rows[0].index("score")
        for r in rows[1:]:
            r[tcol] = r[tcol].rstrip("0")
        with open(p, "w") as f:
            f.write("\r\n".join(",".join(r) for r in rows) + "\r\n")
        self.verified(run)

    def test_replaced_checkpoint(self):
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[1]
        p = run.file(u, "ckpt", "2.bin")
        size = os.path.getsize(p)
        with open(p, "wb") as f:
            f.write(os.urandom(size))
        self.rejected(run, CHECK_CKPT, os.path.join(u, "ckpt", "2.bin"),
                      "SHA-256", f"log.jsonl line {e + 1}")
        os.remove(p)
        self.rejected(run, CHECK_CKPT, "2.bin: missing")

    def test_hparams_differing_from_the_plan(self):
        run = self.run_dir
        u = run.units()[0]
        i = self.record(run, "trial_start", u)
        hp = run.records[i]["hparams"]
        if not hp:
            self.skipTest("self-tuning: no hyperparameters")
        name = sorted(hp)[0]
        if isinstance(hp[name], str):
            self.skipTest("a word-valued hyperparameter")
        # hparams.json alone.
        p = run.file(u, "hparams.json")
        with open(p) as f:
            orig = f.read()
        changed = dict(hp)
        changed[name] = hp[name] * 1.5
        with open(p, "w") as f:
            json.dump(changed, f)
        self.rejected(run, CHECK_LOG, "hparams.json", f"{name} differs from trial_start")
        # The log and hparams.json together, re-signed: the plan's draw is
        # recomputed from the entry.
        run.records[i]["hparams"] = changed
        run.save()
        self.rejected(run, CHECK_LOG, f"line {i + 1} (trial_start of {u})",
                      "hparams differ from the entry's plan", name)
        with open(p, "w") as f:
            f.write(orig)

    def test_eval_before_its_period(self):
        """A runner that evaluated early (and kept its arithmetic straight)."""
        run = self.run_dir
        u = self.plain_unit(run, evals=4)
        start = run.records[self.record(run, "trial_start", u)]
        period = start["eval_period_ns"]
        idx = run.unit_records(u)
        e1 = run.find("eval", u)[0]
        b2 = run.find("step_block", u)[1]
        new_end = run.records[e1]["end_ns"] + period - 1000
        d = run.records[b2]["end_ns"] - new_end
        self.assertGreater(d, 0)
        self.assertGreaterEqual(new_end, run.records[b2]["start_ns"])
        for i in idx:
            if i < b2:
                continue
            r = run.records[i]
            r["t_ns"] -= d
            for k in ("start_ns", "end_ns"):
                if k in r and not (i == b2 and k == "start_ns"):
                    r[k] -= d
            for k in ("accumulated_submission_ns", "total_duration_ns"):
                if k in r:
                    r[k] -= d
            if r["event"] == "trial_end" and r["time_to_target_ns"] is not None:
                r["time_to_target_ns"] -= d
        run.save()
        run.write_csv(u)
        e2 = run.find("eval", u)[1]
        self.rejected(run, CHECK_TIMING, f"line {e2 + 1} (eval 2 of {u})",
                      "came before the eval period")

    def test_trial_that_goes_on_after_meeting_both_targets(self):
        run = self.run_dir
        u = self.plain_unit(run)
        start = run.records[self.record(run, "trial_start", u)]
        e = run.kept_evals(u)[1]
        m = run.records[e]["metrics"]
        sign = 1 if start["direction"] == "max" else -1
        m["validation/" + start["metric"]] = start["validation_target"] + sign * 0.01
        m["test/" + start["metric"]] = start["test_target"] + sign * 0.01
        run.records[e]["validation_target_met"] = True
        run.records[e]["test_target_met"] = True
        run.save()
        run.write_csv(u)
        self.rejected(run, CHECK_TIMING, f"line {e + 1} (eval 2 of {u})",
                      "met both targets, so the trial had to end there")

    def test_trial_end_claims_that_the_log_does_not_support(self):
        run = self.run_dir
        u = self.plain_unit(run)
        end = run.trial_end(u)
        orig = dict(run.records[end])
        for field, value, why in (
                ("time_to_target_ns", 12345, "time_to_target_ns 12345"),
                ("evals", orig["evals"] + 1, "evals"),
                ("reason", "max_steps" if orig["reason"] != "max_steps" else "budget",
                 "reason")):
            with self.subTest(field=field):
                run.records[end] = dict(orig, **{field: value})
                run.save()
                self.rejected(run, CHECK_TIMING, f"line {end + 1} (trial_end of {u})", why)
        run.records[end] = orig
        run.save()
        self.verified(run)

    def test_run_json_and_entry_are_bound_to_the_log(self):
        run = self.run_dir
        rj = json.loads(run.run_json_bytes)
        rj["runner"]["host"] = "elsewhere"
        run.write_run_json(rj)
        # The signed head and run_start both hold run.json's digest.
        self.rejected(run, CHECK_LOG, "run.json was changed")
        run.sign_head()
        self.rejected(run, CHECK_LOG, "line 1 (run_start)", "run.json was changed")
        run.records[0]["run_json_sha256"] = runfake.sha256_hex(run.run_json_bytes)
        run.save()
        self.verified(run)
        # Another entry in the run directory.
        with open(run.file("entry.apf"), "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 1]))
        r = self.fails(1, "verify", run.path)
        self.assertIn("check 1 (entry)", r.err)

    def test_hparams_json_missing(self):
        run = self.run_dir
        u = run.units()[-1]
        os.remove(run.file(u, "hparams.json"))
        self.rejected(run, CHECK_LOG, os.path.join(u, "hparams.json"), "missing")

    def test_record_of_a_unit_not_in_run_json(self):
        run = self.run_dir
        u = run.units()[0]
        i = self.record(run, "build", u)
        run.records[i]["unit"] = "study_9/tiny/trial_1"
        run.save()
        self.rejected(run, CHECK_LOG, f"line {i + 1}", "study_9/tiny/trial_1 is not one of run.json's units")

    def test_record_of_the_wrong_form(self):
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[0]
        for edit, why in ((lambda r: r.pop("end_ns"), "field end_ns is missing"),
                          (lambda r: r.update(extra=1), "unknown field 'extra'"),
                          (lambda r: r.update(index=-1), "index must be an integer >= 1"),
                          (lambda r: r.update(event="evaluation"), "unknown event")):
            with self.subTest(why=why):
                saved = dict(run.records[e])
                edit(run.records[e])
                run.save()
                self.rejected(run, CHECK_LOG, f"line {e + 1}", why)
                run.records[e] = saved
        run.save()
        self.verified(run)

    def test_a_line_of_a_form_seen_before_is_read_as_strictly(self):
        """The reader keeps the form of the last eval it read and reads the
        next from its values (pkg/runlog/jtok.c); a runner with the key in
        hand writes an eval of that form but for bytes the full parse
        refuses, re-chains the lines after it and signs the head: refused at
        that line, for the reason the full parse gives."""
        run = self.run_dir
        u = self.plain_unit(run)
        e = run.kept_evals(u)[1]  # the unit's first eval set the form
        for edit, why in (
                (lambda t: t[:-1] + b',"index":1}', "duplicate key"),
                (lambda t: t.replace(b'"global_step":', b'"global_step":{"n":', 1)
                 .replace(b',"start_ns"', b'},"start_ns"', 1), "global_step must be"),
                (lambda t: t + b"x", "text after the value"),
                (lambda t: t.replace(b'"end_ns":', b'"end_ns":-.', 1), "invalid number"),
                (lambda t: t.replace(b'"end_ns":', b'"end_ns":0', 1), "expected ',' or '}'"),
                (lambda t: t.replace(b'"why":"', b'"why":"\xff', 1), "invalid UTF-8"),
                (lambda t: t.replace(b'"why":"', b'"why":"\x01', 1), "control character"),
                (lambda t: t.replace(b'"test_target_met":false', b'"test_target_met":fals', 1),
                 "invalid literal")):
            with self.subTest(why=why):
                lines = list(run.lines)
                lines[e] = edit(lines[e])
                for i in range(e + 1, len(lines)):
                    rec = json.loads(lines[i])
                    rec["prev"] = runfake.sha256_hex(lines[i - 1])
                    lines[i] = runfake.dumps(rec).encode()
                run.lines = lines
                with open(run.log_file(), "wb") as f:
                    f.write(b"".join(l + b"\n" for l in lines))
                run.sign_head()
                try:
                    self.rejected(run, CHECK_LOG, f"line {e + 1}", why)
                finally:
                    run.save()
                    run.reload()
        self.verified(run)

    def test_keys_are_chosen_on_the_command_line(self):
        run = self.run_dir
        runner_pub = run.runner_key.replace(".key.pem", ".pub.pem")
        self.ok("verify", run.path, "--key", runner_pub)
        self.ok("keygen", "-o", self.path("other"), "--no-trust")
        r = self.apf("verify", run.path, "--entry-key", self.path("other.pub.pem"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("check 1 (entry)", r.err)
        r = self.apf("verify", run.path, "--key", self.path("other.pub.pem"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("no trusted key verifies it", r.err)


class VerifyScenarios(RunCase):
    """Runs that follow the rules in less common ways verify; the ways a
    resume, a fault or a variant can go wrong are caught."""

    def test_resumed_run_discards_the_lost_work(self):
        run = self.make_run(scripts={
            "study_0/tiny/trial_2": UnitScript(crash=(4, 3), val_at=6),
            "study_1/tiny/trial_1": UnitScript(crash=(2, 0)),
        })
        u = "study_0/tiny/trial_2"
        self.assertEqual(len(run.find("resume")), 2)
        # The crashed supervisor logged eval 4; the resumed one logged it
        # again.
        self.assertEqual(len(run.find("eval", u, index=4)), 2)
        r = json.loads(self.ok("verify", run.path, "--json").out)
        self.assertEqual(r["resumes"], 2)
        # Discarded work is not checked, but it is chained: a lie inside it
        # is ignored, a changed byte is not.
        lost = run.find("eval", u, index=4)[0]
        run.records[lost]["accumulated_eval_ns"] += 7
        run.save()
        self.verified(run)
        lines = list(run.lines)
        lines[lost] = lines[lost].replace(b'"index":4', b'"index":5')
        run.write_lines(lines)
        self.rejected(run, CHECK_LOG, f"line {lost + 2}:", "prev does not match")

    def test_resume_rules(self):
        run = self.make_run(scripts={"study_0/tiny/trial_2": UnitScript(crash=(4, 3))})
        u = "study_0/tiny/trial_2"
        res = self.record(run, "resume", u)
        for field, value, why in (("preemption_count", 2, "preemption_count 2 after 0"),
                                  ("from_eval", 9, "from_eval 9, but the unit has 4 evals")):
            with self.subTest(field=field):
                saved = run.records[res][field]
                run.records[res][field] = value
                run.save()
                self.rejected(run, CHECK_TIMING, f"line {res + 1} (resume of {u})", why)
                run.records[res][field] = saved
        # The resumed block starts on the new supervisor's clock.
        resumed = [i for i in run.find("step_block", u) if i > res][0]
        clock = [i for i in run.find("clock_start", u) if i > res][0]
        run.records[resumed]["start_ns"] = run.records[clock]["t_ns"] - 1
        run.save()
        self.rejected(run, CHECK_TIMING, f"line {resumed + 1} (step_block 4 of {u})",
                      "is before clock_start's t_ns")

    def test_interleaved_units(self):
        """Records of several units may interleave in a session; each
        unit's are checked on their own (and on their own clock)."""
        run = self.make_run(interleave=True, scripts={
            "study_0/tiny/trial_1": UnitScript(end="targets", val_at=3, test_at=4)})
        units = [r.get("unit") for r in run.records if r.get("unit")]
        self.assertNotEqual(units, sorted(units, key=units.index))
        self.verified(run)

    def test_every_way_a_trial_ends(self):
        run = self.make_run(scripts={
            "study_0/tiny/trial_1": UnitScript(end="targets", val_at=2, test_at=5),
            "study_0/tiny/trial_2": UnitScript(end="complete", evals=4),
            "study_0/tiny/trial_3": UnitScript(end="fault", evals=3),
            "study_1/tiny/trial_1": UnitScript(step_ns=90_000_000),
            "study_1/tiny/trial_2": UnitScript(val_at=4),
        })
        reasons = {run.records[run.trial_end(u)]["reason"] for u in run.units()}
        self.assertEqual(reasons, {"targets", "complete", "fault", "max_steps", "budget"})
        rep = json.loads(self.ok("verify", run.path, "--json").out)
        self.assertEqual(rep["units_failed"], 1)
        # The final eval of a completed trial came before its period; that
        # is allowed only because the submission said it was complete
        # (why), which ends the trial there.
        u = "study_0/tiny/trial_2"
        ev = run.find("eval", u)[-1]
        self.assertEqual(run.records[ev]["why"], "complete")
        end = run.trial_end(u)
        run.records[end]["reason"] = "error"
        run.records[end]["failed"] = True
        rj = run.records[-1]
        rj["completed"] -= 1
        rj["failed"] += 1
        run.save()
        self.rejected(run, CHECK_TIMING, f"(eval 4 of {u})",
                      "met the submission's word that it is complete, so the "
                      "trial had to end there")

    def test_early_eval_claimed_as_due_fails(self):
        # An operator's runner evaluating where it likes (a preemption at a
        # chosen moment once made one): the completed trial's early final
        # eval relabelled as due, its trial_end left as complete.
        run = self.make_run(scripts={"study_0/tiny/trial_2": UnitScript(end="complete",
                                                                        evals=4)})
        u = "study_0/tiny/trial_2"
        ev = run.find("eval", u)[-1]
        self.assertEqual(run.records[ev]["why"], "complete")
        run.records[ev]["why"] = "due"
        run.save()
        self.rejected(run, CHECK_TIMING, f"(eval 4 of {u})",
                      "came before the eval period had passed since the last "
                      "eval, yet was asked for as due")

    def test_run_that_stopped_without_run_end(self):
        run = self.make_run(complete=False, scripts={
            "study_1/tiny/trial_3": UnitScript(evals=3, end="complete")})
        # The runner crashed after the last unit's eval 2: its later records
        # never came.
        u = "study_1/tiny/trial_3"
        cut = run.find("eval", u, index=2)[0] + 1
        run.records = run.records[:cut]
        run.save()
        run.write_csv(u)
        line = self.rejected(run, "log.jsonl", "without run_end", code=3)
        self.assertIn(f"line {cut}", line)
        self.assertIn("verified (incomplete)", self.apf("verify", run.path).out)

    def drop_units(self, run, names):
        """What a runner holding the key does to leave units out: off
        run.json's plan, their records off the log, their files gone,
        run_start bound to the new run.json, chained and signed again."""
        rj = json.loads(run.run_json_bytes)
        rj["plan"]["units"] = [u for u in rj["plan"]["units"]
                               if runfake.unit_name(u["workload"], u["variant"], u["study"],
                                                    u["trial"]) not in names]
        run.write_run_json(rj)
        run.records = [r for r in run.records if r.get("unit") not in names]
        # run_end counts its session's trial_end records: counted again.
        done = failed = 0
        for r in run.records:
            if r["event"] == "run_start":
                r["run_json_sha256"] = runfake.sha256_hex(run.run_json_bytes)
                done = failed = 0
            elif r["event"] == "trial_end":
                failed += bool(r["failed"])
                done += not r["failed"]
            elif r["event"] == "run_end":
                open_units = r["units"] - r["completed"] - r["failed"]
                r.update(units=done + failed + open_units, completed=done, failed=failed)
        run.save()
        for u in names:
            shutil.rmtree(run.file(u))

    def test_a_study_left_out_of_the_plan_is_caught(self):
        """The study that went worst, left out, would move the median over
        studies to the better ones; every record left checks out, so only
        the plan against the entry's can tell."""
        run = self.make_run(out="cut")
        planned = len(json.loads(run.run_json_bytes)["plan"]["units"])
        drop = sorted(u for u in run.units() if u.startswith("study_1/"))
        self.assertEqual(len(drop), 3)
        self.drop_units(run, drop)
        self.rejected(run, CHECK_LOG, "run.json", f"plan.units: {drop[0]} is missing",
                      f"the entry's plan has {planned} units (2 studies x 3 trials")
        # One trial left out is caught the same way.
        run = self.make_run(out="one")
        self.drop_units(run, ["study_0/tiny/trial_3"])
        self.rejected(run, CHECK_LOG, "run.json", "plan.units: study_0/tiny/trial_3 is missing")

    def test_a_drawn_variants_copy_left_out_is_caught(self):
        """The held-out rules make a base infinite when its variant is: a
        run without the variant unit that missed its target would escape
        them."""
        run = self.make_run(out="heldout", variant_units=[("wide", 0, 1)])
        r = self.verified(run)
        self.assertIn("6 held-out variant units in the plan (6 run) of 1 drawn workload",
                      r.out)
        self.drop_units(run, ["study_1/tiny_wide/trial_2"])
        self.rejected(run, CHECK_HELDOUT, "heldout.json",
                      "draws tiny_wide, but run.json does not run study_1/tiny_wide/trial_2")

    def test_held_out_variant_must_be_the_drawn_one(self):
        run = self.make_run(variant_units=[("wide", 0, 1)])
        self.verified(run)
        draw = json.load(open(run.file("heldout.json")))
        draw["draws"][0]["variant"] = "narrow"
        json.dump(draw, open(run.file("heldout.json"), "w"))
        self.rejected(run, CHECK_HELDOUT, "heldout.json", "narrow, which workload tiny does not have")
        os.remove(run.file("heldout.json"))
        self.rejected(run, CHECK_HELDOUT, "heldout.json", "missing")
        json.dump(["tiny_wide"], open(run.file("heldout.json"), "w"))
        self.rejected(run, CHECK_HELDOUT, "not an apf draw")
        json.dump({"seed": "x", "draws": []}, open(run.file("heldout.json"), "w"))
        self.rejected(run, CHECK_HELDOUT, "draws no variant of tiny")

    def heldout_detail(self, run):
        rep = json.loads(self.ok("verify", run.path, "--json").out)
        return rep["checks"][5]["detail"]

    def test_a_draw_from_entries_is_bound_to_them_and_a_seed_by_hand_is_said(self):
        """The held-out variants are only unknown in advance when the seed
        comes from the sealed entries. A seed given by hand verifies (an
        organiser may choose one) and the report says who chose the
        variants; a draw claiming to come from the entries must hold their
        seed and this run's entry."""
        run = self.make_run(out="drawn", variant_units=[("wide", 0, 1)])
        self.assertIn("the seed was given by hand, not derived from the entries: "
                      "whoever chose it chose the variants", self.heldout_detail(run))
        self.ok("heldout", "draw", run.file("entry.apf"), "-o", run.file("heldout.json"))
        self.assertIn("the seed recomputed from the draw's one entry, this run's",
                      self.heldout_detail(run))
        good = open(run.file("heldout.json")).read()
        # The operator's own seed in a file that says it came from the
        # entries (tiny has one variant, so the picks still check out).
        d = json.loads(good)
        d["seed"] = "cd" * 32
        json.dump(d, open(run.file("heldout.json"), "w"))
        self.rejected(run, CHECK_HELDOUT, "heldout.json", f"seed {'cd' * 8}... is not the "
                      "one the draw's entries give", "a draw from entries cannot choose its seed")
        # A draw made from another entry.
        other = self.make_submission(name="other")
        self.ok("pack", other, "-w", "tiny", "-o", self.path("other.apf"), "--no-build")
        self.ok("heldout", "draw", self.path("other.apf"), "-o", run.file("heldout.json"))
        self.rejected(run, CHECK_HELDOUT, "heldout.json", "made from 1 entry without this run's",
                      "its seed is not bound to this entry")
        open(run.file("heldout.json"), "w").write(good)
        self.verified(run)

    def test_a_draw_from_made_up_entries_does_not_score(self):
        """The submitter's way to choose the seed of a draw "from entries":
        list made-up entries beside their own until the variants suit them.
        One run cannot tell (its entry is among them; verify says the others
        are the draw's word), so apf score holds a draw's entries to the
        runs scored with it: an entry no run here runs is refused unless
        the scorer says the runs are part of a larger board, and a run the
        draw was made without is refused always."""
        run = self.make_run(out="drawn", variant_units=[("wide", 0, 1)])
        dummy = self.make_submission(name="dummy")
        self.ok("pack", dummy, "-w", "tiny", "-o", self.path("dummy.apf"), "--no-build")
        # tiny has one variant, so every seed draws it: the binding is
        # what is under test.
        self.ok("heldout", "draw", run.file("entry.apf"), self.path("dummy.apf"),
                "-o", run.file("heldout.json"))
        self.assertIn("this run's among them (the other 1 are the draw's word: apf "
                      "score holds them to the runs scored with it)", self.heldout_detail(run))
        for extra in ((), ("--verify",)):
            with self.subTest(extra=extra):
                r = self.fails(2, "score", run.path, *extra)
                self.assertIn("heldout.json: drawn from entry ", r.err)
                self.assertIn(" (dummy), which no run here runs: a draw's entries are "
                              "the runs scored with it", r.err)
        r = self.ok("score", run.path, "--heldout-subset", "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "the seed of 2 entries, 1 of them run here (--heldout-subset: "
                         "the others are the draw's word)")
        # A draw made without this run's entry, given by the scorer.
        self.ok("heldout", "draw", self.path("dummy.apf"), "-o", self.path("other.json"))
        r = self.fails(2, "score", run.path, "--heldout", self.path("other.json"),
                       "--heldout-subset")
        self.assertIn("other.json: not drawn from ", r.err)
        self.assertIn("could have been packed knowing the variants", r.err)
        # The honest draw: this run's entry alone.
        self.ok("heldout", "draw", run.file("entry.apf"), "-o", run.file("heldout.json"))
        r = self.ok("score", run.path, "--verify", "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "the seed of the 1 entry the runs here run")
        # A seed by hand is said, not refused (an organiser may choose one).
        self.ok("heldout", "draw", run.file("entry.apf"), "--seed", "7",
                "-o", run.file("heldout.json"))
        r = self.ok("score", run.path, "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "a seed given with --seed: whoever chose it chose the variants")

    def test_a_made_up_entry_is_not_run_by_a_directory_that_fails_verify(self):
        """The next step of the same cheat: beside the real run, a directory
        whose run.json names the made-up entry. It fails verification, so
        score --verify leaves it out, and its claim must go with it: the
        draw is then refused as if the directory were not there (the seed
        was chosen; the real run would be scored on the chosen variants)."""
        run = self.make_run(out="drawn", variant_units=[("wide", 0, 1)])
        dummy = self.make_submission(name="dummy")
        self.ok("pack", dummy, "-w", "tiny", "-o", self.path("dummy.apf"), "--no-build")
        self.ok("heldout", "draw", run.file("entry.apf"), self.path("dummy.apf"),
                "-o", run.file("heldout.json"))
        draw = json.load(open(run.file("heldout.json")))
        made_up = [e["manifest_sha256"] for e in draw["entries"]
                   if e["submission"] == "dummy"]
        self.assertEqual(len(made_up), 1, draw)
        fake = self.path("fake")
        shutil.copytree(run.path, fake)
        rj = json.load(open(os.path.join(fake, "run.json")))
        rj["entry"]["manifest_sha256"] = made_up[0]
        json.dump(rj, open(os.path.join(fake, "run.json"), "w"))
        self.fails(1, "verify", fake)
        r = self.fails(2, "score", run.path, f"{fake}=dummy", "--verify")
        self.assertIn(" (dummy), which no run here runs: a draw's entries are "
                      "the runs scored with it", r.err)
        # Said as what it is when the scorer asks for part of a board.
        r = self.ok("score", run.path, f"{fake}=dummy", "--verify", "--heldout-subset",
                    "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "the seed of 2 entries, 1 of them run here (--heldout-subset: "
                         "the others are the draw's word)")

    def test_edited_draw_is_recomputed_from_the_seed(self):
        # A runner that ran another variant than the seed draws, its
        # heldout.json, run.json and log all saying so (chained and signed):
        # check 6 recomputes the pick from the seed and the spec's variants.
        import hashlib
        seed = "ab" * 32
        variants = sorted(["wide", "narrow", "tanh", "deep", "gelu"])
        h = hashlib.sha256(b"apf-heldout-v1\0" + seed.encode() + b"\0" + b"toy").digest()
        drawn = variants[int.from_bytes(h[:8], "big") % len(variants)]
        other = [v for v in variants if v != drawn][0]
        run = self.make_run(workload="toy", variant_units=[(drawn, 0, 1)])
        r = self.verified(run)
        self.assertIn("6 held-out variant units in the plan (6 run) of 1 drawn workload", r.out)
        forged = self.make_run(workload="toy", variant_units=[(other, 0, 1)],
                               out="forged")
        self.rejected(forged, CHECK_HELDOUT, "heldout.json",
                      f"draws[0] (toy): variant '{other}'",
                      f"the seed and the workload's 5 variants give '{drawn}'")

    def test_variant_targets_come_from_the_spec(self):
        run = self.make_run(variant_units=[("wide", 1, 0)])
        u = "study_1/tiny_wide/trial_1"
        i = self.record(run, "trial_start", u)
        self.assertEqual(run.records[i]["validation_target"], 0.4)
        run.records[i]["validation_target"] = 0.5
        run.save()
        self.rejected(run, CHECK_LOG, f"(trial_start of {u})",
                      "validation_target is 0.5", "gives 0.40000000000000002")

    def test_self_tuning_run(self):
        run = self.make_run(ruleset="self")
        self.assertEqual(len(run.units()), 2)
        self.verified(run)

    def test_unsealed_run_says_so(self):
        run = self.make_run(sealed=False)
        r = self.verified(run)
        self.assertIn("UNSEALED", r.out)
        run.records = [r for r in run.records if r["event"] != "unsealed"]
        run.save()
        self.rejected(run, CHECK_LOG, "no unsealed record says why")

    def test_not_a_run_directory(self):
        os.makedirs(self.path("empty"))
        self.make_submission()
        r = self.fails(2, "verify", self.path("empty"))
        self.assertIn("not a run directory (no run.json)", r.err)
        self.fails(2, "verify", self.path("nothing"))
        self.fails(2, "verify", self.path("nothing"), "--entry-key", "x.pem")
        run = self.make_run()
        with open(run.file("run.json"), "w") as f:
            f.write("{}")
        self.fails(2, "verify", run.path, match="run.json")

    def test_crashed_run_is_incomplete_not_failed(self):
        """What a crash can leave: records after the last signed head, a
        torn last line, a CSV a row short, no signature yet. All verify as
        far as they go, and exit 3."""
        run = self.make_run(complete=False)
        u = run.units()[-1]
        # The supervisor died after eval 2 of the last unit was logged and
        # signed, while its third block was being logged.
        e2 = run.find("eval", u, index=2)[0]
        run.records = run.records[:e2 + 2]
        run.save(sign=False)
        run.sign_head(records=e2 + 1)
        run.write_csv(u)
        line = self.rejected(run, "without run_end", "last 1 records are not signed yet",
                             code=3)
        self.assertIn(f"line {e2 + 2}", line)
        with open(run.file("log.jsonl"), "ab") as f:
            f.write(b'{"seq":' + str(e2 + 2).encode() + b',"prev":"0')
        self.rejected(run, "without run_end", "a torn line of", code=3)
        # The eval's record reached the log; its CSV row did not.
        p = run.file(u, "eval_measurements.csv")
        rows = open(p).read().splitlines()
        with open(p, "w") as f:
            f.write("\n".join(rows[:-1]) + "\n")
        self.rejected(run, "without run_end", code=3)
        # But a second missing row is a failure.
        with open(p, "w") as f:
            f.write("\n".join(rows[:-2]) + "\n")
        self.rejected(run, CHECK_TIMING, "eval_measurements.csv", "the file ends after")
        # Killed before the first eval: nothing is signed yet.
        run2 = FakeRun(self, complete=False).write(self.path("run2"))
        first_eval = run2.find("eval")[0]
        run2.records = run2.records[:first_eval]
        run2.save(sign=False)
        os.remove(run2.file("log.dsse.json"))
        os.remove(run2.file(run2.units()[0], "eval_measurements.csv"))
        self.rejected(run2, "without run_end", f"last {first_eval} records are not signed",
                      code=3)
        # Deleting the signature of a finished run is not a crash.
        run3 = FakeRun(self).write(self.path("run3"))
        os.remove(run3.file("log.dsse.json"))
        self.rejected(run3, CHECK_LOG, "log.dsse.json is missing")

    def test_units_run_by_separate_sessions(self):
        run = self.make_run(split_after=(1, 3))
        starts = run.find("run_start")
        self.assertEqual(len(starts), 3)
        self.assertEqual(len(run.find("run_end")), 3)
        self.verified(run)
        # run_end counts its own session's trials.
        end = run.find("run_end")[1]
        run.records[end]["completed"] += 1
        run.save()
        self.rejected(run, CHECK_LOG, f"line {end + 1} (run_end)", "ended 2 trials")
        run.records[end]["completed"] -= 1
        # After run_end, only run_start.
        del run.records[starts[1]]
        run.save()
        self.rejected(run, CHECK_LOG, f"line {starts[1] + 1}",
                      "after run_end, only a new run_start may follow")

    def test_interrupted_unit_must_be_resumed(self):
        run = self.make_run(scripts={"study_0/tiny/trial_2": UnitScript(crash=(3, 2))})
        u = "study_0/tiny/trial_2"
        res = self.record(run, "resume", u)
        del run.records[res]
        run.save()
        self.rejected(run, CHECK_TIMING, f"line {res + 1} (build of {u})",
                      "interrupted in an earlier session and goes on without a resume")
        # A resume from eval 0 starts the trial again.
        run = FakeRun(self, scripts={u: UnitScript(crash=(2, 0))}).write(self.path("r0"))
        self.assertEqual(len(run.find("trial_start", u)), 2)
        self.verified(run)

    def test_head_signature_checks_out_with_openssl_alone(self):
        run = self.make_run()
        env = json.load(open(run.file("log.dsse.json")))
        import base64
        payload = base64.b64decode(env["payload"])
        t = env["payloadType"].encode()
        pae = b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)
        with open(self.path("pae.bin"), "wb") as f:
            f.write(pae)
        with open(self.path("sig.bin"), "wb") as f:
            f.write(base64.b64decode(env["signatures"][0]["sig"]))
        pub = run.runner_key.replace(".key.pem", ".pub.pem")
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub,
                            "-rawin", "-in", self.path("pae.bin"),
                            "-sigfile", self.path("sig.bin")], capture_output=True)
        self.assertEqual(p.returncode, 0, p)
        head = json.loads(payload)
        self.assertEqual(head["records"], len(run.lines))


# ---- real runs ----------------------------------------------------------------

# A submission that trains too slowly to meet the targets: its trials run
# to the budget, giving several evals to tamper with. Each step sleeps 2 ms,
# so the budget (6 s of submission time), not max_steps, ends the trial on
# a machine of any speed: about six evals at the 1 s eval period.
SLOW_SUBMISSION = r"""
#define _POSIX_C_SOURCE 200809L
#include <apf/submission.h>
#include <time.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 32; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)e; (void)s; (void)r; (void)t;
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -1e-7f, apf_all_grads(c));
	struct timespec pause = {0, 2000000};
	nanosleep(&pause, NULL);
	return 0;
}
"""


def sandbox_available():
    from test_run import sandbox_available as probe
    return probe()


def make_real_run(case, out):
    """Packs the slow submission for the test workload and runs study 0,
    trial 1 with `apf run` into out; returns the entry. A trial that failed
    or ended with fewer than 4 evals fails the test: the count does not
    depend on the machine's speed."""
    apftest_blobs = "blobs_mlp"
    case.write("slow/submission.ini", "[submission]\nname = slow\nauthors = tests\n"
               "ruleset = external\n[tuning]\nstudies = 1\ntrials = 2\n")
    case.write("slow/submission.c", SLOW_SUBMISSION)
    case.write("slow/tuning_search_space.ini",
               "[learning_rate]\nmin = 1e-4\nmax = 1e-2\nscaling = log\n")
    entry = case.path("slow.apf")
    case.ok("pack", case.path("slow"), "-w", apftest_blobs, "-o", entry)
    r = case.apf("run", entry, "-o", out, "--study", "0", "--trial", "1", timeout=300)
    case.assertEqual(r.rc, 0, r)
    end = [x for x in apftest.read_log(out)[0] if x["event"] == "trial_end"][-1]
    case.assertFalse(end["failed"], end)
    case.assertEqual(end["reason"], "budget", end)
    case.assertGreaterEqual(end["evals"], 4, end)
    return entry


class VerifyTamperingRealRun(VerifyTampering):
    """Every tampering test of VerifyTampering, on a run made by `apf run`
    (once per class; each test gets a copy)."""

    @classmethod
    def setUpClass(cls):
        if not sandbox_available():
            raise unittest.SkipTest("the kernel refuses user namespaces here")
        maker = ApfCase("run")
        maker.setUp()
        cls.maker = maker
        make_real_run(maker, maker.path("run"))

    @classmethod
    def tearDownClass(cls):
        cls.maker.tearDown()

    def make_run(self, **kw):
        if kw:
            self.skipTest("a scenario only the fake runner writes")
        shutil.copytree(self.maker.home, self.home)
        shutil.copytree(self.maker.path("run"), self.path("run"))
        return RunDir(self.path("run"), os.path.join(self.home, "keys", "default.key.pem"))


class VerifyRealCrash(RunCase):
    """kill -9 of `apf run` at points spread over a trial: the crashed
    directory verifies as far as it goes (exit 3, never a failure), and
    after --resume the whole run verifies."""

    def test_killed_then_resumed_runs_verify(self):
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        t0 = time.time()
        entry = make_real_run(self, self.path("clean"))
        self.verified(RunDir(self.path("clean"), None))
        length = time.time() - t0
        outcomes = []
        for k, frac in enumerate((0.2, 0.65)):
            run = self.path(f"run{k}")
            p = subprocess.Popen([apftest.APF, "run", entry, "-o", run, "--study", "0",
                                  "--trial", "1", "-q"], env=self.env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(frac * length)
            p.send_signal(signal.SIGKILL)
            p.wait()
            time.sleep(0.05)
            where = f"kill {k} at {frac:.2f} of {length:.1f}s"
            if os.path.exists(run):
                r = self.apf("verify", run)
                self.assertIn(r.rc, (0, 3), f"{where}: {r}")
                outcomes.append(r.rc)
            args = ["run", entry, "-o", run, "--study", "0", "--trial", "1"]
            if os.path.exists(run):
                args.append("--resume")
            r = self.apf(*args, timeout=300)
            self.assertEqual(r.rc, 0, f"{where}: {r}")
            r = self.apf("verify", run, "--json")
            self.assertEqual(r.rc, 0, f"{where}: {r}")
        # The kills landed inside the trial, not only after it.
        self.assertIn(3, outcomes)
