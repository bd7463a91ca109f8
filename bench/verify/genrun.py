"""Writes the run directories bench/verify times, with tests/e2e/runfake.

    genrun.py OUT_DIR RECORDS EVALS_PER_UNIT CKPT_BYTES

OUT_DIR/home is the $APF_HOME (its trusted keys verify both runs) and
OUT_DIR/workloads the workloads: `bench`, the test workload with a budget
long enough for the evals asked for. OUT_DIR/log is a run of about RECORDS
records, written without its CSVs and checkpoints (the log checks alone are
timed on it); OUT_DIR/run a complete run with EVALS_PER_UNIT evals per unit
and checkpoints of CKPT_BYTES.
"""
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, "tests", "e2e"))
import apftest  # noqa: E402
import runfake  # noqa: E402


def workload(out, evals_per_unit):
    d = os.path.join(out, "workloads", "bench")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(apftest.TEST_WORKLOADS, "tiny", "workload.ini")) as f:
        ini = f.read()
    data = os.path.join(root, "tests", "data", "datasets", "tiny")
    ini = (ini.replace("name = tiny\ndescription", "name = bench\ndescription")
           .replace("path = ../../datasets/tiny", "path = " + data)
           .replace("max_steps = 100", "max_steps = 0")
           .replace("max_runtime_s = 10", f"max_runtime_s = {evals_per_unit}"))
    with open(os.path.join(d, "workload.ini"), "w") as f:
        f.write(ini)


def make(out, name, evals_per_unit, **kw):
    wdir = os.path.join(out, "w_" + name)
    workload(wdir, evals_per_unit)
    case = apftest.ApfCase()
    case.setUp()
    case.home = os.path.join(out, "home")
    case.env["APF_HOME"] = case.home
    case.env["APF_WORKLOADS_DIR"] = os.path.join(wdir, "workloads")
    try:
        runfake.FakeRun(case, workload="bench", **kw).write(os.path.join(out, name), load=False)
    finally:
        case.tearDown()


def main():
    out, records, evals, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    # The test submission plans 2 studies x 3 trials; a unit logs two
    # records per eval.
    make(out, "log", max(1, records // 12), outputs=False)
    make(out, "run", evals, ckpt_bytes=ckpt)


if __name__ == "__main__":
    main()
