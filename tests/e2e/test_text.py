"""End-to-end: the text_lm workload family (issue 15).

A small corpus in fortune(6)'s format goes through the same generator `make`
runs on Debian's fortunes (datagen/text.c: documents split by a hash of
their text, windows of context + 1 bytes), and backs a tiny Transformer
workload, so the real binary can pack, run sealed, verify (--reeval,
--replay) and score a baseline on it in seconds. From the attacker's side:
a trial's memory holds training windows and no validation or test window,
and opening the validation table is a sandbox fault.
"""
import csv
import glob
import json
import math
import os
import struct
import subprocess

import apftest
from test_run import RunCase
from test_seal import NO_INIT, HostileWorkload, scan_code, scan_found

GEN = os.path.join(os.path.dirname(apftest.APF), "datagen", "text")

INI = """[workload]
name = text_tiny
description = a small fortune corpus, 1-layer Transformer
model = transformer
loss = cross_entropy
metric = cross_entropy
metrics = cross_entropy, perplexity, accuracy
direction = min
validation_target = 2.6
test_target = 2.6
targets = provisional
max_steps = 400

[dataset]
name = text_tiny
path = @DATA@
digest = @DIGEST@
format = tokens
train = train.tab
validation = validation.tab
test = test.tab
context = 16
vocab = 256

[model]
width = 32
layers = 1
heads = 2
mlp = plain
norm = pre

[budget.cpu]
max_runtime_s = 120
eval_period_s = 0.001

[variant.glu]
mlp = glu
"""

WORDS = ("cat dog sat ran on the mat log sun moon and a of to is was "
         "bright dark old new red blue").split()


def corpus(d):
    """Two files of fortune-format documents of simple, learnable text."""
    os.makedirs(d)
    for f in range(2):
        docs = []
        for i in range(400):
            k = f * 400 + i
            words = [WORDS[(k * 7 + j * j * 3) % len(WORDS)] for j in range(6 + k % 5)]
            docs.append(f"Number {k} says: " + " ".join(words) + ".\n")
        with open(os.path.join(d, f"file{f}"), "w") as fh:
            fh.write("%\n".join(docs))
    # what the generator must skip: an index, a link, a dotted name
    with open(os.path.join(d, "file0.dat"), "wb") as fh:
        fh.write(b"\x00" * 64)
    os.symlink("file0", os.path.join(d, "file0.u8"))


def windows(path):
    """(context + 1, rows of the windows as tuples) of a token table."""
    with open(path, "rb") as f:
        d = f.read()
    nd, nc, n = struct.unpack("<IIQ", d[8:24])
    assert nd == 0
    head = 32 + 4 * nc
    cat = struct.unpack(f"<{n * nc}i", d[head:head + 4 * n * nc])
    return nc, [tuple(cat[i * nc:(i + 1) * nc]) for i in range(n)]


class Text(HostileWorkload, RunCase):
    metric = "cross_entropy"
    workload = "text_tiny"

    def setUp(self):
        super().setUp()
        if not os.access(GEN, os.X_OK):
            self.skipTest(f"{GEN} is not built (make all builds it)")
        self.src = self.path("fortunes")
        corpus(self.src)
        self.data = self.path("datasets", "text_tiny")
        os.makedirs(os.path.dirname(self.data))
        subprocess.run([GEN, "--source", self.src, "--context", "16", self.data],
                       check=True)
        digest = self.ok("hash", self.data).out.split()[0]
        self.write("workloads/text_tiny/workload.ini",
                   INI.replace("@DATA@", self.data).replace("@DIGEST@", digest))
        self.env["APF_WORKLOADS_DIR"] = self.path("workloads")

    def test_generator_splits_documents_by_their_text_into_windows(self):
        again = self.path("again")
        subprocess.run([GEN, "--source", self.src, "--context", "16", again], check=True)
        self.assertEqual(self.ok("hash", again).out.split()[0],
                         self.ok("hash", self.data).out.split()[0])
        splits = {}
        for s in ("train", "validation", "test"):
            nc, rows = windows(os.path.join(self.data, f"{s}.tab"))
            self.assertEqual(nc, 17)
            self.assertTrue(rows, s)
            # consecutive windows overlap by one byte: every byte after
            # the first is a label once
            for a, b in zip(rows, rows[1:]):
                self.assertEqual(a[-1], b[0])
            splits[s] = bytes(rows[0][:16] + sum((r[1:] for r in rows[1:]), ()))
        # the held-out splits are the documents whose hash says so: about
        # 3% each of 800, and a document is never cut across splits
        held = splits["validation"].count(b"Number ") + splits["test"].count(b"Number ")
        self.assertTrue(20 <= held <= 100, held)
        for s, text in splits.items():
            for doc in text.split(b"%\n")[1:-1]:
                self.assertTrue(doc.startswith(b"Number "), (s, doc))
        # another context, other windows of the same text
        other = self.path("other")
        subprocess.run([GEN, "--source", self.src, "--context", "8", other], check=True)
        self.assertEqual(windows(os.path.join(other, "train.tab"))[0], 9)
        r = subprocess.run([GEN, "--source", self.path("nowhere"), self.path("x")],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("apf: ", r.stderr)
        self.assertIn("fortunes", r.stderr)

    def test_workloads_lists_text_lm_and_its_variants(self):
        env = {"APF_WORKLOADS_DIR": os.path.join(apftest.ROOT, "workloads")}
        w = {x["name"]: x for x in json.loads(self.ok("workloads", "--json", env=env).out)["workloads"]}
        self.assertIn("text_lm", w)
        t = w["text_lm"]
        self.assertEqual((t["metric"], t["direction"], t["loss"]),
                         ("cross_entropy", "min", "cross_entropy"))
        self.assertEqual(sorted(v["name"] for v in t["variants"]),
                         ["glu", "postln", "temperature", "width"])
        self.assertEqual(t["metrics"], ["cross_entropy", "perplexity", "accuracy"])

    def test_a_spec_whose_context_is_not_the_files_is_refused(self):
        ini = self.path("workloads/text_tiny/workload.ini")
        with open(ini) as f:
            s = f.read()
        with open(ini, "w") as f:
            f.write(s.replace("context = 16", "context = 12"))
        self.ok("keygen")
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        self.ok("pack", src, "-w", "text_tiny", "-o", self.path("e.apf"))
        r = self.apf("run", self.path("e.apf"), "-o", self.path("run"), "--study", "0",
                     "--trial", "1", timeout=120)
        self.assertNotEqual(r.rc, 0)
        self.assertIn("context 12 needs 0 and 13", r.err)

    def test_sealed_baseline_run_verifies_and_scores_by_cross_entropy(self):
        self.ok("keygen")
        src = apftest.one_unit_nadamw(self)
        entry = self.path("nadamw.apf")
        self.ok("pack", src, "-w", "text_tiny", "-o", entry)
        run = self.path("run")
        self.ok("run", entry, "-o", run, "--study", "0", "--trial", "1", timeout=300)
        recs = self.check_run(run)
        evals = [x for x in recs if x["event"] == "eval"]
        self.assertGreater(len(evals), 1)
        m = evals[-1]["metrics"]
        for split in ("train", "validation", "test"):
            for name in ("loss", "cross_entropy", "perplexity", "accuracy"):
                self.assertIn(f"{split}/{name}", m)
            self.assertEqual(m[f"{split}/loss"], m[f"{split}/cross_entropy"])
            self.assertAlmostEqual(m[f"{split}/perplexity"],
                                   math.exp(m[f"{split}/cross_entropy"]), places=9)
        _, vrows = windows(os.path.join(self.data, "validation.tab"))
        self.assertEqual(m["validation/num_examples"], len(vrows))
        # It learns: from the uniform log 256 = 5.55 to below the target.
        self.assertGreater(evals[0]["metrics"]["validation/cross_entropy"], 5.0)
        self.assertLess(m["validation/cross_entropy"], 2.6)
        csvs = glob.glob(os.path.join(run, "study_0", "text_tiny", "trial_1",
                                      "eval_measurements.csv"))
        self.assertEqual(len(csvs), 1)
        with open(csvs[0]) as f:
            header = next(csv.reader(f))
        for col in ("validation/cross_entropy", "validation/perplexity", "test/accuracy"):
            self.assertIn(col, header)
        v = self.ok("verify", run, "--reeval", "--replay", "1", "--seed", "3")
        self.assertIn("verified", v.out)
        first = next(e for e in evals if e["metrics"]["validation/cross_entropy"] <= 2.6)
        s = json.loads(self.ok("score", run, "--json").out)
        times = s["submissions"][0]["times"]
        self.assertAlmostEqual(times["text_tiny"],
                               first["accumulated_submission_ns"] / 1e9, places=6)

    def test_trial_holds_the_training_windows_alone(self):
        if os.environ.get("APF_SANITIZED"):
            self.skipTest("under AddressSanitizer the trial's address space holds "
                          "terabytes of shadow memory, which no scan can cover")
        pick = {}
        for s in ("train", "validation", "test"):
            _, rows = windows(os.path.join(self.data, f"{s}.tab"))
            # 16 tokens (64 bytes as the table's int32s) that name a
            # document's number: text no other split holds
            r = next(r for r in rows if b"Number " in bytes(r[:9]))
            pick[s] = struct.pack("<16i", *r[:16])
        code = scan_code(pick["train"], pick["validation"], pick["test"], stride=4)
        self.ok("keygen")
        entry = self.pack_hostile("scan", NO_INIT + code)
        run = self.path("run")
        self.ok("run", entry, "-o", run, "--study", "0", "--trial", "1", timeout=300)
        recs = self.check_run(run)
        end = [x for x in recs if x["event"] == "trial_end"][0]
        self.assertFalse(end["failed"], end)
        self.assertEqual(scan_found(self, run, end), ("1", "0", "0"))

    def test_reading_the_validation_windows_is_a_fault(self):
        self.hostile_open("read_validation", os.path.join(self.data, "validation.tab"))
