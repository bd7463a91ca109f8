"""End-to-end: no claim in the run directory weakens `apf verify` (issue 29,
round 3).

The attacker here is a hostile operator holding the runner key: it may
rewrite run.json and the log and sign them again, so every check passes
that trusts what run.json says. run.json's device, CPU model, GPU model and
thread count are such claims: bound to the log (run_start's
run_json_sha256) and signed (every head's and the index's run_json_sha256),
so the runner vouches for them - but the runner is what is audited. Each
case makes a real sealed run on the blobs workload, edits one claim the way
that operator would, re-signs, and shows that the auditor's check is still
the one the auditor asked for: where it cannot be made here, check 5 fails
(exit 1) and names the claim and the option that would accept a weaker
check; with that option the report says what was given up, and why.

The runs use a private copy of the blobs workload with a GPU budget equal
to its CPU budget (as fmnist_mlp has one), so that a run relabelled cuda
still meets its workload's budget in check 2: the relabelling must be
caught by check 5, not by an accident of the test workload.
"""
import json
import os
import shutil
import struct

import apftest
import runfake
from apftest import BLOBS
from test_run import RunCase

UNIT = f"study_0/{BLOBS}/trial_1"
GPU = "NVIDIA Imaginary 9000"   # a model no auditor's machine has


def arena_params(data):
    """(offset, count) of an arena's parameters (pkg/wire/wire.h's header:
    magic, version, initialized, capacity, used, params_offset,
    params_floats)."""
    _, _, _, _, _, off, n = struct.unpack_from("<8sIIQQQQ", data, 0)
    return off, n


def resign(case, run_dir, edit_run_json=None, edit_records=None, unit=UNIT):
    """Rewrites run.json and the unit's log as a runner holding the key
    would: run_start bound to the new run.json, the log re-chained, its
    head and the run's index signed again."""
    rd = runfake.RunDir(run_dir, os.path.join(case.home, "keys", "default.key.pem"),
                        unit=unit)
    if edit_run_json:
        rj = json.loads(rd.run_json_bytes)
        edit_run_json(rj)
        rd.write_run_json(rj)
    sha = runfake.sha256_hex(rd.run_json_bytes)
    for r in rd.records:
        if r["event"] == "run_start":
            r["run_json_sha256"] = sha
    if edit_records:
        edit_records(rd.records)
    case.assertEqual(rd.records[-1]["event"], "run_end")
    rd.save()
    return rd


def private_blobs(case, edit):
    """A private copy of the blobs workload (its dataset where it is),
    its workload.ini passed through edit, as the case's workloads."""
    wl = case.path("workloads", BLOBS)
    os.makedirs(wl)
    with open(os.path.join(apftest.TEST_WORKLOADS, BLOBS, "workload.ini")) as f:
        ini = f.read()
    data = os.path.join(apftest.ROOT, "tests", "data", "datasets", "blobs")
    ini = ini.replace("path = ../../datasets/blobs", f"path = {data}")
    case.assertIn(data, ini)
    with open(os.path.join(wl, "workload.ini"), "w") as f:
        f.write(edit(ini))
    case.env["APF_WORKLOADS_DIR"] = case.path("workloads")


class Claims(RunCase):
    def setUp(self):
        super().setUp()
        private_blobs(self, lambda ini: ini + "\n[budget.gpu]\nmax_runtime_s = 6\n"
                                              "eval_period_s = 1\n")
        self.run_dir = self.sealed_run()

    def sealed_run(self):
        """One unit of the NAdamW baseline, run sealed: two evals (step 1
        and the target), so two intervals to replay."""
        src = self.path("nadamw")
        shutil.copytree(os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw"),
                        src)
        self.write("nadamw/submission.ini",
                   "[submission]\nname = nadamw\nruleset = self\n[tuning]\nstudies = 1\n")
        entry = self.path("nadamw.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry)
        run = self.path("nadamw.run")
        r = self.apf("run", entry, "-o", run, timeout=300)
        self.assertEqual(r.rc, 0, r)
        return run

    # ---- what the hostile operator does -------------------------------------

    def resign(self, edit_run_json=None, edit_records=None):
        return resign(self, self.run_dir, edit_run_json, edit_records)

    def cut_submission_time(self, records, keep=0.2):
        """Books 1 - keep of every timed block after the first as logging
        time: the blocks start later and end where they ended, and every
        sum and the time-to-target follow, so checks 1-4 pass."""
        sub = moved_total = 0
        ttt = None
        for r in records:
            if r["event"] == "step_block":
                if r["first_step"] > 1:
                    moved = int((r["end_ns"] - r["start_ns"]) * (1 - keep))
                    r["start_ns"] += moved
                    moved_total += moved
                sub += r["end_ns"] - r["start_ns"]
                r["accumulated_submission_ns"] = sub
            elif r["event"] == "eval":
                r["accumulated_submission_ns"] = sub
                r["accumulated_logging_ns"] += moved_total
                if r["validation_target_met"] and ttt is None:
                    ttt = sub
            elif r["event"] == "trial_end":
                r["accumulated_submission_ns"] = sub
                r["time_to_target_ns"] = ttt
        self.assertGreater(moved_total, 0)

    def rewrite_csv(self, rd):
        """eval_measurements.csv's times as the runner would write them
        for the rewritten log (the other columns kept)."""
        import csv
        path = rd.file(UNIT, "eval_measurements.csv")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        evals = [rd.records[i] for i in rd.kept_evals(UNIT)]
        self.assertEqual(len(rows), len(evals))
        for row, e in zip(rows, evals):
            row["accumulated_submission_time"] = runfake.secs(e["accumulated_submission_ns"])
            row["score"] = row["accumulated_submission_time"]
            row["accumulated_logging_time"] = runfake.secs(e["accumulated_logging_ns"])
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)

    def under_reported(self, edit_run_json):
        """The run with its submission time cut by 80% and run.json's CPU
        claim edited, all re-signed: checks 1-4 pass."""
        rd = self.resign(edit_run_json, self.cut_submission_time)
        self.rewrite_csv(rd)
        self.ok("verify", self.run_dir)
        return rd

    def relabel_cuda(self, rj):
        rj["device"] = "cuda"
        rj["environment"]["gpus"] = [{"name": GPU, "memory_bytes": 150 << 30,
                                      "compute_capability": "9.0"}]

    def forge_last_checkpoint(self, rel=1e-4):
        """Scales every parameter of the unit's last checkpoint by 1 + rel
        and names the forged file's digest in the log (re-chained and
        re-signed): a checkpoint the submission never computed, whose
        metrics the log still gives as the honest ones."""
        rd = runfake.RunDir(self.run_dir, os.path.join(self.home, "keys", "default.key.pem"),
                            unit=UNIT)
        last = rd.records[rd.kept_evals(UNIT)[-1]]
        path = rd.file(UNIT, last["checkpoint"]["file"])
        with open(path, "rb") as f:
            data = bytearray(f.read())
        off, n = arena_params(data)
        params = struct.unpack_from(f"<{n}f", data, off)
        struct.pack_into(f"<{n}f", data, off, *[p * (1 + rel) for p in params])
        self.assertNotEqual(bytes(data), open(path, "rb").read())
        with open(path, "wb") as f:
            f.write(data)
        last["checkpoint"]["sha256"] = runfake.sha256_hex(bytes(data))
        rd.save()
        return last["index"]

    def check5(self, out):
        return [l for l in out.splitlines() if l.strip().startswith("5 replay")][0]

    # ---- --timing-tolerance on a CPU claim -----------------------------------

    def test_an_edited_cpu_claim_fails_the_timing_tolerance_unless_accepted(self):
        """Before: the times compared only where run.json's CPU model was
        this machine's, so an operator who cut its submission time by 80%
        and named another CPU in run.json passed `--timing-tolerance 2`
        (exit 0, "timing not compared"). Now the check fails, naming the
        claim and --accept-other-hardware; with that option, the auditor's,
        it passes and says the times were not compared, and why."""
        self.under_reported(
            lambda rj: rj["environment"]["cpu"].update(model="Imaginary CPU 9000"))
        r = self.fails(1, "verify", self.run_dir, "--replay", "all",
                       "--timing-tolerance", "2", timeout=600, match="check 5 (replay)")
        line = r.err.strip().splitlines()[-1]
        self.assertIn("timing: this CPU (", line)
        self.assertIn("is not the run's (Imaginary CPU 9000)", line)
        self.assertIn("--timing-tolerance compares on the run's CPU model only", line)
        self.assertIn("give --accept-other-hardware", line)
        j = self.apf("verify", self.run_dir, "--replay", "all", "--timing-tolerance", "2",
                     "--json", timeout=600)
        self.assertEqual(j.rc, 1, j)
        report = json.loads(j.out)
        replay = {c["name"]: c for c in report["checks"]}["replay"]
        self.assertEqual(replay["outcome"], "failed")
        self.assertEqual(report["replay"]["timing"], "not compared")
        self.assertIn("Imaginary CPU 9000", report["replay"]["timing_why"])
        r = self.ok("verify", self.run_dir, "--replay", "all", "--timing-tolerance", "2",
                    "--accept-other-hardware", timeout=600)
        line = self.check5(r.out)
        self.assertIn("passed", line)
        self.assertIn("timing not compared (accepted by --accept-other-hardware): "
                      "this CPU (", line)
        self.assertIn("is not the run's (Imaginary CPU 9000)", line)

    def test_a_removed_cpu_claim_fails_the_timing_tolerance_unless_accepted(self):
        """No CPU model in run.json was "unrecorded", timing not compared,
        exit 0: a claim taken away chose the weaker check as well."""
        self.under_reported(lambda rj: rj["environment"]["cpu"].pop("model"))
        r = self.fails(1, "verify", self.run_dir, "--replay", "all",
                       "--timing-tolerance", "2", timeout=600, match="check 5 (replay)")
        line = r.err.strip().splitlines()[-1]
        self.assertIn("timing: the run records no CPU model (run.json "
                      "environment.cpu.model)", line)
        self.assertIn("give --accept-other-hardware", line)
        r = self.ok("verify", self.run_dir, "--replay", "all", "--timing-tolerance", "2",
                    "--accept-other-hardware", timeout=600)
        self.assertIn("timing not compared (accepted by --accept-other-hardware): "
                      "the run records no CPU model", self.check5(r.out))
        self.assertIn("CPU not recorded", r.out)

    # ---- a cpu run relabelled cuda -------------------------------------------

    def test_a_cpu_run_relabelled_cuda_does_not_buy_a_forged_checkpoint_the_tolerance(self):
        """Before: a run claiming cuda on a GPU model this machine lacks was
        replayed on the CPU within 1% by default (--replay-compare auto).
        Relabelled so, this CPU run's last checkpoint scaled by 1 + 1e-4
        (about 1e-4 of the interval's parameter change, which is of the
        order of the parameters' norm on blobs; its logged metrics those of
        the honest state, which the CPU replay reproduces exactly) landed
        well within the tolerance: `--replay all` passed a checkpoint the
        submission never computed. Now the default is exact, a cuda run off
        its GPU model fails check 5 with the option to accept a tolerant
        replay, and that option, the auditor's, says so in the line."""
        self.resign(self.relabel_cuda, lambda recs: [
            r.update(device="cuda") for r in recs if r["event"] == "run_start"])
        index = self.forge_last_checkpoint()
        self.ok("verify", self.run_dir)     # checks 1-4 cannot tell
        r = self.fails(1, "verify", self.run_dir, "--replay", "all", timeout=600,
                       match="check 5 (replay)")
        line = r.err.strip().splitlines()[-1]
        self.assertIn(f"replay: the run claims device cuda on {GPU}", line)
        self.assertIn("give --replay-compare tolerant", line)
        # exact, asked for by name, is the same check.
        self.fails(1, "verify", self.run_dir, "--replay", "all", "--replay-compare", "exact",
                   timeout=600, match=f"the run claims device cuda on {GPU}")
        # The old default, by name, is refused, not a way back.
        self.fails(2, "verify", self.run_dir, "--replay", "all", "--replay-compare", "auto",
                   match="--replay-compare auto is gone")
        # The auditor's tolerant replay: the forgery is within 1% of its
        # interval (what tolerant means), and the line says whose choice
        # that was.
        r = self.ok("verify", self.run_dir, "--replay", "all", "--replay-compare", "tolerant",
                    timeout=600)
        line = self.check5(r.out)
        self.assertIn("on the CPU for a cuda run, each ending within 0.01", line)
        self.assertIn("(tolerant: the auditor's --replay-compare tolerant)", line)
        self.assertIn("timing not compared: this machine's GPU (", line)
        # The same forgery on the run as it was (a cpu run) fails exactly.
        self.resign(lambda rj: rj.update(device="cpu"), lambda recs: [
            r.update(device="cpu") for r in recs if r["event"] == "run_start"])
        r = self.fails(1, "verify", self.run_dir, "--replay", "all", timeout=600,
                       match="check 5 (replay)")
        line = r.err.strip().splitlines()[-1]
        self.assertIn(f"{UNIT}: steps ", line)
        self.assertIn(f"replayed from eval {index - 1}", line)
        self.assertIn("differ", line)

    # ---- the claims, stated --------------------------------------------------

    def test_the_report_states_the_hardware_claims_as_claims(self):
        r = self.ok("verify", self.run_dir)
        with open(os.path.join(self.run_dir, "run.json")) as f:
            env = json.load(f)["environment"]
        cpu = env["cpu"]["model"]
        self.assertIn("  hardware    claimed by the runner, signed, not proven: "
                      f"device cpu, CPU {cpu}, threads ", r.out)
        self.resign(self.relabel_cuda, lambda recs: [
            r.update(device="cuda") for r in recs if r["event"] == "run_start"])
        r = self.ok("verify", self.run_dir)
        self.assertIn("  hardware    claimed by the runner, signed, not proven: "
                      f"device cuda ({GPU}), CPU {cpu}, threads ", r.out)
        report = json.loads(self.ok("verify", self.run_dir, "--json").out)
        claims = report["claims"]
        self.assertEqual(claims["device"], "cuda")
        self.assertEqual(claims["gpu_model"], GPU)
        self.assertEqual(claims["cpu_model"], cpu)
        self.assertGreaterEqual(claims["threads"], 1)
        self.assertEqual(claims["source"], "run.json")
        self.assertIs(claims["signed"], True)
        self.assertIs(claims["proven"], False)
        # Nothing replayed: nothing said of a comparison.
        self.assertIsNone(report["replay"])
        # A replay's comparison and its reason, in JSON too.
        report = json.loads(self.apf("verify", self.run_dir, "--replay", "1", "--json",
                                     timeout=600).out)
        self.assertEqual(report["replay"]["compare"], "exact")
        self.assertIsNone(report["replay"]["on"])
        self.assertIn("give --replay-compare tolerant", report["replay"]["compare_why"])
