#!/usr/bin/python3
"""Seeds for fuzz_jtok_shape: pairs of log lines (the form, a newline, the
text read by it): the same event with other values of every kind, and with
the bytes between values changed.

    fuzz_jtok_shape_seeds.py CORPUS_DIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_jtok_seeds  # noqa: E402 - its LINES

ZERO = "0" * 64


def other(v):
    """Another value of another length, and sometimes another kind."""
    if isinstance(v, bool):
        return None if v else 1234567890123
    if isinstance(v, int):
        return v * 1000003 + 17
    if isinstance(v, float):
        return -v / 3e7
    if isinstance(v, str):
        return v + "\u00e9\"\\n" * 2
    if v is None:
        return True
    if isinstance(v, dict):
        return {k: other(x) for k, x in v.items()}
    if isinstance(v, list):
        return [other(x) for x in v]
    return v


def dump(rec):
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    n = 0
    for rec in fuzz_jtok_seeds.LINES:
        base = dump(rec)
        changed = dump({k: other(v) for k, v in rec.items()})
        pairs = [base + b"\n" + changed, changed + b"\n" + base,
                 base + b"\n" + base.replace(b",", b" ,", 1),
                 base + b"\n" + base[:-1],
                 base + b"\n" + base + b"x",
                 base + b"\n" + base.replace(b'"unit"', b'"seq"')]
        for p in pairs:
            with open(os.path.join(out, f"pair{n}"), "wb") as f:
                f.write(p)
            n += 1


if __name__ == "__main__":
    main()
