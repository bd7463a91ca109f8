#!/usr/bin/python3
"""Makes the run directory fuzz_verify_log and fuzz_verify_run_json start
from (tests/fuzz/data/verify_run/) and their seeds.

    tests/fuzz/make_verify_run.py      (needs build/apf and openssl)

The run is a valid one written by tests/e2e/runfake.py (two studies of the
test workload "tiny", three trials each; two trials crash and resume, one
from an eval and one from scratch), so the
verifier passes it; the directory keeps entry.apf, run.json, the runner's
key pair, the entry signer's public key, and the log with its signed head. Seeds: fuzz_verify_log's are the
log's records without seq and prev (the target chains and signs what it is
given), one per line, whole and cut short; fuzz_verify_run_json's is
run.json. Rerun it when the log's or run.json's format changes.
"""
import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import apftest  # noqa: E402
import runfake  # noqa: E402


class Maker(apftest.ApfCase):
    def runTest(self):
        pass


def main():
    c = Maker()
    c.setUp()
    try:
        scripts = {"study_0/tiny/trial_2": runfake.UnitScript(crash=(4, 3), val_at=6),
                   "study_1/tiny/trial_1": runfake.UnitScript(crash=(2, 0))}
        fake = runfake.FakeRun(c, scripts=scripts)
        run = fake.write(c.path("run"))
        c.ok("verify", run.path, "--key", fake.runner_pub)
        out = os.path.join(HERE, "data", "verify_run")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for f in ("entry.apf", "run.json", "log.jsonl", "log.dsse.json"):
            shutil.copy(os.path.join(run.path, f), out)
        shutil.copy(fake.runner_key, os.path.join(out, "runner.key.pem"))
        shutil.copy(fake.runner_pub, os.path.join(out, "runner.pub.pem"))
        shutil.copy(os.path.join(c.home, "keys", "default.pub.pem"),
                    os.path.join(out, "entry.pub.pem"))
        lines = []
        for r in run.records:
            r = dict(r)
            del r["seq"], r["prev"]
            lines.append(json.dumps(r, separators=(",", ":")))
        seeds = os.path.join(HERE, "seeds", "fuzz_verify_log")
        shutil.rmtree(seeds, ignore_errors=True)
        os.makedirs(seeds)
        whole = "\n".join(lines) + "\n"
        cuts = {"whole": whole, "first_unit": "\n".join(lines[:len(lines) // 2]) + "\n",
                "no_run_end": "\n".join(lines[:-1]) + "\n"}
        for name, text in cuts.items():
            with open(os.path.join(seeds, name), "w") as f:
                f.write(text)
        seeds = os.path.join(HERE, "seeds", "fuzz_verify_run_json")
        shutil.rmtree(seeds, ignore_errors=True)
        os.makedirs(seeds)
        shutil.copy(os.path.join(run.path, "run.json"), os.path.join(seeds, "run.json"))
        print(f"{out}: {len(lines)} records")
    finally:
        c.tearDown()


if __name__ == "__main__":
    main()
