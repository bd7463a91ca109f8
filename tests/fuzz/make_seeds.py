#!/usr/bin/python3
"""Writes the seed inputs of the parser fuzz targets under
tests/fuzz/seeds/<target>/: small, valid examples of each format, made the
way apf makes them (the real binary packs entries and draws), so the fuzzer
starts from inputs that get past the first checks. The output is committed;
rerun this after a format changes.

    tests/fuzz/make_seeds.py [--apf build/apf]

scripts/fuzz.sh copies tests/fuzz/seeds/<target>/ into the target's corpus.
"""
import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
WORKLOADS = os.path.join(ROOT, "tests", "data", "workloads")

SPACES = {
    "external.ini": "[learning_rate]\nmin = 1e-4\nmax = 1e-2\nscaling = log\n",
    "mixed.ini": ("[learning_rate]\nmin = 1e-4\nmax = 1e-1\nscaling = log\n"
                  "[one_minus_beta1]\nmin = 0.01\nmax = 0.5\nscaling = linear\n"
                  "[warmup]\nfeasible_points = 0.02, 0.05, 0.1\n"
                  "[nesterov]\nfeasible_points = true, false\n"),
    "points.ini": "; comment\n[dropout]\nfeasible_points = 0.0\n",
}

SUBMISSION_INI = ("[submission]\nname = seed\nauthors = A. Author, B. Author\n"
                  "ruleset = external\n\n[tuning]\nstudies = 2\ntrials = 3\n")

CONFIGS = {
    "submission.ini": SUBMISSION_INI,
    "merged.ini": "[a]\nx = 1\n[b]\n[a]\ny = yes\nlist = p, q , r\n",
    "typed.ini": "# hash comment\n[t]\nd = -2.5e3\nl = 42\nb = false\ns = word\n",
}


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def envelope_of(entry):
    """manifest.dsse.json from an entry: zstd frame + 44-byte trailer."""
    with open(entry, "rb") as f:
        frame = f.read()[:-44]
    tar = subprocess.run(["zstd", "-dc"], input=frame, capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return t.extractfile("manifest.dsse.json").read()


def runlog(events):
    """A hash-chained log as docs/design.md 2.7 and pkg/runlog define it."""
    prev, lines = "0" * 64, []
    for seq, (event, fields) in enumerate(events):
        head = (f'{{"seq":{seq},"prev":"{prev}","t_ns":{1000 * (seq + 1)},'
                f'"event":{json.dumps(event)}')
        rest = json.dumps(fields, separators=(",", ":"))[1:]
        line = head + ("," + rest if rest != "}" else "}")
        lines.append(line)
        prev = hashlib.sha256(line.encode()).hexdigest()
    return "".join(l + "\n" for l in lines)


def idx(dims, data):
    """An unsigned-byte IDX file: magic 0 0 8 ndim, big-endian dims, data."""
    return (bytes([0, 0, 8, len(dims)]) +
            b"".join(struct.pack(">I", x) for x in dims) + bytes(data))


# The run.json digest fuzz_run_index.c decodes against.
RUN_JSON_SHA256 = "0f343b0931126a20f133d67c2b018a3b5e6f2a5e5f1ef1c5e0c2bb0d2f1f5c11"


def small_formats():
    """Seeds of the targets whose formats need no apf to make: IDX files,
    score's targets files, the run index's payload, the unit arguments."""
    images = idx([3, 2, 2], range(12))
    write("fuzz_idx", "images", images)
    write("fuzz_idx", "images.gz", gzip.compress(images, mtime=0))
    write("fuzz_idx", "labels", idx([3], [1, 0, 9]))
    write("fuzz_idx", "rgb4d", idx([2, 2, 2, 3], range(24)))

    for v in ("05", "06"):
        with open(os.path.join(ROOT, "tests", "data", "score",
                               f"targets_v{v}.json")) as f:
            write("fuzz_score_targets", f"targets_v{v}.json", f.read())
    write("fuzz_score_targets", "short.json", json.dumps({"workloads": {
        "tiny_cls": {"target_metric_name": "accuracy",
                     "validation_target_value": 0.8},
        "tiny_lm": {"target_metric_name": "loss",
                    "validation_target_value": 3.5}}}, indent=1) + "\n")

    def index(units):
        return json.dumps({"format": "apf-run-index-v1",
                           "run_json_sha256": RUN_JSON_SHA256,
                           "units": units}, separators=(",", ":"))
    write("fuzz_run_index", "two_units", index({
        "study_0/blobs_mlp/trial_1": {"records": 12, "head": "a" * 64},
        "study_0/blobs_mlp/trial_2": {"records": 1, "head": "b" * 64}}))
    write("fuzz_run_index", "empty", index({}))
    write("fuzz_run_index", "zero_records",
          index({"u": {"records": 0, "head": "a" * 64}}))

    trial = ["--workloads", "/apf/workloads", "--workload", "text_lm",
             "--variant", "base", "--seed", "4269987789", "--study", "0",
             "--trial", "3", "--threads", "2", "--device", "cpu",
             "--arena-bytes", "32023552", "--so", "/apf/unit/submission.so",
             "--hparams", "/apf/unit/hparams.json", "--max-steps", "1800",
             "--step-hint", "370", "--budget-s", "52.5",
             "--train-layout", "1,1,0,256,37902"]
    evaluator = trial[:18]
    for name, words in (
            ("trial", trial), ("eval", evaluator),
            ("bad_threads", ["--workloads", "w", "--workload", "x",
                             "--threads", "0", "--arena-bytes", "1"]),
            ("layout", evaluator + ["--train-layout", "28,28,1,10"])):
        write("fuzz_unit_args", name, b"\0".join(w.encode() for w in words))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apf", default=os.path.join(ROOT, "build", "apf"))
    args = ap.parse_args()
    for t in ("fuzz_config", "fuzz_workload", "fuzz_search_space",
              "fuzz_manifest", "fuzz_dsse", "fuzz_runlog", "fuzz_heldout",
              "fuzz_idx", "fuzz_score_targets", "fuzz_run_index",
              "fuzz_unit_args"):
        shutil.rmtree(os.path.join(SEEDS, t), ignore_errors=True)
    small_formats()

    for name in sorted(os.listdir(WORKLOADS)):
        with open(os.path.join(WORKLOADS, name, "workload.ini")) as f:
            text = f.read()
        write("fuzz_workload", f"{name}.ini", text)
        write("fuzz_config", f"workload_{name}.ini", text)
    for name, text in SPACES.items():
        write("fuzz_search_space", name, text)
        write("fuzz_config", f"space_{name}", text)
    for name, text in CONFIGS.items():
        write("fuzz_config", name, text)

    write("fuzz_runlog", "empty.jsonl", "")
    events = [("run_start", {"entry": "a" * 64}),
              ("trial_start", {"workload": "tiny", "study": 0, "trial": 0}),
              ("eval", {"global_step": 10, "metrics": {"validation/accuracy": 0.5}}),
              ("trial_end", {"reason": "target"}),
              ("run_end", {})]
    log = runlog(events)
    write("fuzz_runlog", "run.jsonl", log)
    write("fuzz_runlog", "torn.jsonl", log + log.splitlines()[1][:40])

    tmp = tempfile.mkdtemp(prefix="apf-seeds-")
    try:
        env = dict(os.environ, APF_HOME=os.path.join(tmp, "home"),
                   APF_WORKLOADS_DIR=WORKLOADS, SOURCE_DATE_EPOCH="1700000000")
        entries = []
        for ruleset in ("external", "self"):
            sub = os.path.join(tmp, ruleset)
            os.makedirs(sub)
            with open(os.path.join(sub, "submission.ini"), "w") as f:
                f.write(SUBMISSION_INI.replace("name = seed", f"name = {ruleset}")
                        .replace("ruleset = external", f"ruleset = {ruleset}")
                        .replace("trials = 3", "trials = 3" if ruleset == "external"
                                 else "trials = 1"))
            with open(os.path.join(sub, "submission.c"), "w") as f:
                f.write("int apf_abi_version = 1;\n")
            if ruleset == "external":
                with open(os.path.join(sub, "tuning_search_space.ini"), "w") as f:
                    f.write(SPACES["external.ini"])
            entry = os.path.join(tmp, f"{ruleset}.apf")
            subprocess.run([args.apf, "pack", sub, "-w", "tiny,toy", "-o", entry],
                           env=env, check=True, capture_output=True)
            entries.append(entry)
            env_bytes = envelope_of(entry)
            write("fuzz_dsse", f"{ruleset}.dsse.json", env_bytes)
            payload = base64.b64decode(json.loads(env_bytes)["payload"])
            write("fuzz_manifest", f"{ruleset}.json", payload)
        write("fuzz_dsse", "small.dsse.json", json.dumps({
            "payloadType": "text/plain", "payload": "aGk=",
            "signatures": [{"keyid": "ab" * 32, "sig": "A" * 86 + "=="}]}))
        for extra, name in (([], "entries.json"), (["--seed", "3"], "seed.json")):
            out = subprocess.run([args.apf, "heldout", "draw", *entries, "--json",
                                  *extra], env=env, check=True,
                                 capture_output=True).stdout
            write("fuzz_heldout", name, out)
        write("fuzz_heldout", "undrawn.json", json.dumps({
            "format": "apf-heldout-v1", "method": "seed", "seed": "0",
            "entries": [], "draws": [],
            "undrawn": [{"base": "bare", "spec_sha256": "0" * 64}]}))
        write("fuzz_heldout", "algoperf_list.json",
              json.dumps(["criteo1tb_embed_init", "wmt_glu_tanh"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
