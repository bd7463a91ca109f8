#!/usr/bin/python3
"""apf test runner.

Runs every unit test binary (cmocka, built from tests/unit/test_*.c), every
end-to-end module (tests/e2e/test_*.py, which drive the real apf binary) and
every layout module (tests/layout/test_*.py: how the code is laid out - what
the verifier links, what libapf exports, which folders include which), a
few at a time, and prints one line per test case. Skipped tests are listed
with their reason and never counted as passed. The last line is always
`N passed, N failed`.

    tests/run.py [--build DIR] [--sanitized] [-k PATTERN] [--kind KIND] [-j N]
"""
import argparse
import concurrent.futures as cf
import glob
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CMOCKA_LINE = re.compile(r"^\[\s*(OK|FAILED|SKIPPED|ERROR)\s*\] (\S+)\s*$")


def run_unit(path, env, timeout):
    """Runs one cmocka binary; returns (results, output)."""
    name = os.path.basename(path)
    t0 = time.time()
    try:
        p = subprocess.run([path], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, errors="replace")
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return [("FAIL", f"unit/{name}", f"timed out after {timeout}s")], out
    results, seen = [], set()
    skip_reason = {}
    last_msg = []
    for line in out.splitlines():
        m = CMOCKA_LINE.match(line.strip())
        if not m:
            if not line.startswith("[ RUN"):
                last_msg.append(line)
            continue
        status, case = m.groups()
        if case in ("test(s)", "test(s).", "test(s),") or case.isdigit():
            continue
        if (status, case) in seen:
            continue
        seen.add((status, case))
        reason = "\n".join(l for l in last_msg if l.strip())[-2000:]
        last_msg = []
        if status == "OK":
            results.append(("ok", f"unit/{name}:{case}", ""))
        elif status == "SKIPPED":
            r = [l for l in reason.splitlines() if "skip" in l.lower()]
            results.append(("skip", f"unit/{name}:{case}",
                            (r[-1] if r else reason.splitlines()[-1] if reason else "skipped").strip()))
        else:
            results.append(("FAIL", f"unit/{name}:{case}", reason))
    if rc != 0 and not any(r[0] == "FAIL" for r in results):
        results.append(("FAIL", f"unit/{name}",
                        f"exit status {rc} after {time.time() - t0:.1f}s\n{out[-4000:]}"))
    if not results:
        results.append(("FAIL", f"unit/{name}", "no test cases ran\n" + out[-2000:]))
    return results, out


def run_module(path, env, timeout):
    """Runs one e2e or layout module (unittest) in a child interpreter;
    returns (results, output), each case named <kind>/<module>:<case>."""
    name = os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path)[:-3]
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path],
                           cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return [("FAIL", name, f"timed out after {timeout}s")], ""
    results = []
    details = {}
    cur = None
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT "):
            _, status, case, *rest = line.split(" ", 3)
            results.append([status, f"{name}:{case}", rest[0] if rest else ""])
        elif line.startswith("@@DETAIL "):
            cur = line.split(" ", 1)[1]
            details.setdefault(cur, [])
        elif cur is not None:
            details[cur].append(line)
    for r in results:
        case = r[1].split(":", 1)[1]
        if r[0] == "FAIL" and case in details:
            r[2] = "\n".join(details[case])[-4000:]
    if p.returncode != 0 and not any(r[0] == "FAIL" for r in results):
        results.append(["FAIL", name, f"exit status {p.returncode}\n{p.stderr[-4000:]}"])
    if not results:
        results.append(["FAIL", name, "no test cases ran\n" + p.stderr[-2000:]])
    return [tuple(r) for r in results], p.stdout


def child(path):
    """Loads one e2e or layout module and runs its unittest cases, printing
    markers."""
    import importlib.util
    import unittest
    import traceback
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)

    class Result(unittest.TestResult):
        def _id(self, test):
            return test.id().split(".")[-1]

        def addSuccess(self, test):
            print(f"@@RESULT ok {self._id(test)}", flush=True)

        def _fail(self, test, err):
            print(f"@@DETAIL {self._id(test)}")
            print("".join(traceback.format_exception(*err)))
            print(f"@@RESULT FAIL {self._id(test)}", flush=True)

        addFailure = _fail
        addError = _fail

        # A failing subTest fails its test: unittest then calls neither
        # addSuccess nor addFailure for the test itself, so without this
        # the test would vanish from the count, neither passed nor failed.
        failed_ids = set()

        def addSubTest(self, test, subtest, err):
            if err is None:
                return
            print(f"@@DETAIL {self._id(test)}")
            print(f"{subtest.id()}:")
            print("".join(traceback.format_exception(*err)))
            if self._id(test) not in self.failed_ids:
                self.failed_ids.add(self._id(test))
                print(f"@@RESULT FAIL {self._id(test)}", flush=True)

        def addSkip(self, test, reason):
            print(f"@@RESULT skip {self._id(test)} {reason}", flush=True)

    suite.run(Result())
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--sanitized", action="store_true")
    ap.add_argument("-k", dest="pattern", default=None,
                    help="only test files whose name contains this")
    ap.add_argument("--kind", choices=("unit", "e2e", "layout"),
                    help="only the unit, e2e or layout tests")
    ap.add_argument("-j", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child)

    build = os.path.abspath(os.path.join(ROOT, args.build))
    env = dict(os.environ)
    env["APF_BIN"] = os.path.join(build, "apf")
    env["APF_BUILD"] = build
    env["APF_ROOT"] = ROOT
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.sanitized:
        env["APF_SANITIZED"] = "1"

    units = sorted(glob.glob(os.path.join(build, "tests", "test_*")))
    units = [u for u in units if os.access(u, os.X_OK) and not u.endswith(".d")]
    modules = sorted(glob.glob(os.path.join(ROOT, "tests", "e2e", "test_*.py")) +
                     glob.glob(os.path.join(ROOT, "tests", "layout", "test_*.py")))
    if args.kind:
        units = units if args.kind == "unit" else []
        modules = [e for e in modules
                   if os.path.basename(os.path.dirname(e)) == args.kind]
    if args.pattern:
        units = [u for u in units if args.pattern in os.path.basename(u)]
        modules = [e for e in modules if args.pattern in os.path.basename(e)]
    if not os.path.exists(env["APF_BIN"]):
        print(f"apf: test: {env['APF_BIN']}: not built (run make)", file=sys.stderr)

    jobs = [(run_unit, u) for u in units] + [(run_module, e) for e in modules]
    passed = failed = 0
    skipped = []
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=args.j) as ex:
        futs = {ex.submit(fn, path, env, args.timeout): path for fn, path in jobs}
        for fut in cf.as_completed(futs):
            results, _ = fut.result()
            for status, name, detail in results:
                if status == "ok":
                    passed += 1
                    print(f"ok    {name}")
                elif status == "skip":
                    skipped.append((name, detail))
                    print(f"skip  {name}: {detail}")
                else:
                    failed += 1
                    print(f"FAIL  {name}")
                    for l in detail.rstrip().splitlines():
                        print(f"      {l}")
            sys.stdout.flush()
    print(f"\n{len(skipped)} skipped (not counted as passed), "
          f"{time.time() - t0:.0f}s")
    for name, why in skipped:
        print(f"  skipped {name}: {why}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
