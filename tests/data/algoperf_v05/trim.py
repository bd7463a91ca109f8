#!/usr/bin/env python3
"""Trims the published AlgoPerf v0.5 external-tuning logs to what apf score
reads, as one deterministic archive for tests/e2e/test_score.py.

    tests/data/algoperf_v05/trim.py SOURCE [OUT]

SOURCE is algoperf_v05_external.tar.zst (the shared data set; see README.md
here for its provenance; unpacked with `tar --zstd`) or a directory it was
unpacked into. OUT defaults to algoperf_v05.tar.xz beside this script.

Kept, under the archive's root:
  external_tuning/<submission>/study_<k>/<workload>_<framework>/trial_<n>/
      eval_measurements.csv, with only the columns KEEP below and
      validation/<the workload's target metric>, every row, every value's
      text as published;
  the trial directories that hold no eval_measurements.csv, empty (the
      scorer counts them), and the CSVs of trial_<n> directories sitting
      directly in a study (the scorer counts those too; only KEEP is kept,
      as no workload names their metric);
  scoring/workload_targets_v05.json and
  scoring/held_out_workloads_algoperf_v05.json, unchanged.
Dropped: hparams.json and every other column. Members are sorted by name,
with mtime 0, owner 0:0 and modes 0644/0755, and compressed with xz -9e, so
the same SOURCE always gives the same bytes.
"""
import csv
import io
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile

# Scoring needs the time (score) and validation/<metric>; global_step is
# kept so the tests check its order on real logs too. pkg/score/csv.c also
# checks accumulated_{submission,eval,logging}_time, total_duration and
# preemption_count when a file has them, but they decide no score, and the
# three independent clocks alone would add about 5 MB compressed.
KEEP = ["global_step", "score"]
LOGS = os.path.join("previous_leaderboards", "algoperf_v05", "logs",
                    "external_tuning")
TARGETS = os.path.join("scoring", "workload_targets_v05.json")
HELDOUT = os.path.join("scoring", "algoperf_v05",
                       "held_out_workloads_algoperf_v05.json")


def trim_csv(path, metric):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    keep = [i for i, name in enumerate(header)
            if name in KEEP or (metric and name == "validation/" + metric)]
    if metric and not any(header[i] == "validation/" + metric for i in keep):
        sys.exit(f"{path}: no column validation/{metric}")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for row in rows:
        if not row:
            continue
        w.writerow([row[i] if i < len(row) else "" for i in keep])
    return out.getvalue().encode("utf-8")


def add(tar, name, data=None):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    else:
        info.mode = 0o644
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def trim(src, out):
    with open(os.path.join(src, TARGETS), encoding="utf-8") as f:
        targets = json.load(f)["workloads"]
    members = {}
    logs = os.path.join(src, LOGS)
    for dirpath, dirnames, filenames in os.walk(logs):
        rel = os.path.relpath(dirpath, logs)
        parts = [] if rel == "." else rel.split(os.sep)
        name = "/".join(["external_tuning"] + parts)
        if not re.fullmatch(r"trial_[0-9]+", os.path.basename(dirpath)):
            continue
        csv_path = os.path.join(dirpath, "eval_measurements.csv")
        if not os.path.isfile(csv_path):
            members[name + "/"] = None
            continue
        metric = None
        if len(parts) == 4:
            workload = re.sub(r"_(jax|pytorch)$", "", parts[2])
            metric = targets[workload]["target_metric_name"]
        members[name + "/eval_measurements.csv"] = trim_csv(csv_path, metric)
    for rel, arc in ((TARGETS, "scoring/workload_targets_v05.json"),
                     (HELDOUT,
                      "scoring/held_out_workloads_algoperf_v05.json")):
        with open(os.path.join(src, rel), "rb") as f:
            members[arc] = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            add(tar, name.rstrip("/"), members[name])
    data = lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME)
    with open(out, "wb") as f:
        f.write(data)
    files = sum(v is not None for v in members.values())
    print(f"{out}: {len(members)} members ({files} files), "
          f"{len(buf.getvalue())} bytes as tar, {len(data)} compressed")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: trim.py SOURCE [OUT]")
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "algoperf_v05.tar.xz")
    if os.path.isdir(src):
        trim(src, out)
        return
    with tempfile.TemporaryDirectory(prefix="apf-trim-") as tmp:
        subprocess.run(["tar", "--zstd", "-xf", src, "-C", tmp], check=True)
        trim(tmp, out)


if __name__ == "__main__":
    main()
