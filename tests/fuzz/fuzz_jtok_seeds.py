#!/usr/bin/python3
"""Seeds for fuzz_jtok: log lines of every event, as the runner writes them,
and small texts at the edges of the JSON grammar.

    fuzz_jtok_seeds.py CORPUS_DIR
"""
import json
import os
import sys

ZERO = "0" * 64
LINES = [
    {"seq": 0, "prev": ZERO, "t_ns": 5, "event": "run_start", "run_json_sha256": "ab" * 32,
     "entry_sha256": "cd" * 32, "manifest_sha256": "ef" * 32, "sealed": True,
     "device": "cpu", "threads": 1},
    {"seq": 7, "prev": ZERO, "t_ns": 9, "event": "step_block", "unit": "study_0/tiny/trial_1",
     "first_step": 1, "last_step": 12, "start_ns": 100, "end_ns": 200,
     "accumulated_submission_ns": 100},
    {"seq": 8, "prev": ZERO, "t_ns": 9, "event": "eval", "unit": "study_0/tiny/trial_1",
     "index": 1, "global_step": 1, "start_ns": 1, "end_ns": 2, "accumulated_submission_ns": 1,
     "accumulated_eval_ns": 1, "accumulated_logging_ns": 0, "total_duration_ns": 2,
     "preemption_count": 0, "metrics": {"validation/accuracy": 0.45500001311302185,
                                         "test/loss": 1.5e-3, "test/num_examples": 64},
     "validation_target_met": False, "test_target_met": False,
     "checkpoint": {"file": "study_0/tiny/trial_1/ckpt/1.bin", "sha256": "12" * 32, "bytes": 99}},
    {"seq": 9, "prev": ZERO, "t_ns": 9, "event": "trial_end", "unit": "study_0/tiny/trial_1",
     "reason": "budget", "failed": False, "global_step": 3, "evals": 1,
     "accumulated_submission_ns": 4, "time_to_target_ns": None, "detail": "caf\u00e9 \"q\""},
]
EDGES = [b'{"a":"\\ud83d\\ude00"}', b'{"a":-0.0e+00}', b'[[[]],{}]', b'{"\\u0061":1,"b":2}',
         b'"\xc3\xa9"', b'18446744073709551615', b'{"a":1e400}']


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for i, rec in enumerate(LINES):
        with open(os.path.join(out, f"line{i}"), "wb") as f:
            f.write(json.dumps(rec, separators=(",", ":")).encode())
    for i, e in enumerate(EDGES):
        with open(os.path.join(out, f"edge{i}"), "wb") as f:
            f.write(e)


if __name__ == "__main__":
    main()
