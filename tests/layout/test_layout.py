"""The code's layout: what the verifier links, what libapf exports, which
folders include which, and what `make install` installs.

Run by tests/run.py (APF_BUILD names the build directory; `make test` and
`make check` build what these read: `make layout-tests` links
tests/layout/verify_only against libapf-verify.a and records the outcome
in $APF_BUILD/tests/layout/verify_only.link). Each check is also a script a
person can run alone: scripts/exported-symbols.py, scripts/include-cycles.py;
scripts/layout-report.py counts what the link pulled in.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("APF_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("APF_BUILD") or os.path.join(ROOT, "build")
LAYOUT = os.path.join(BUILD, "tests", "layout")
FORBIDDEN = ("pkg/runner", "pkg/trial")


def rel(p):
    return os.path.relpath(p, ROOT)


def defined_by(objdir):
    """{symbol: object} of the global symbols the objects under objdir
    define."""
    out = {}
    for o in sorted(glob.glob(os.path.join(objdir, "**", "*.o"), recursive=True)):
        p = subprocess.run(["nm", "-g", "--defined-only", o],
                           capture_output=True, text=True)
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 2:
                out.setdefault(f[-1], rel(o))
    return out


def script(name, *args, **kw):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name),
                           *args], cwd=ROOT, capture_output=True, text=True,
                          **kw)


def link_outcome(case, program):
    """(the link's exit status, the linker's output) of a layout program,
    as make layout-tests recorded it in <program>.link."""
    path = os.path.join(LAYOUT, program + ".link")
    if not os.path.exists(path):
        case.fail(f"{rel(path)}: missing (make BUILD={rel(BUILD)} "
                  f"layout-tests builds it)")
    with open(path, errors="replace") as f:
        text = f.read()
    m = re.search(r"exit status (\d+)\s*$", text)
    return (int(m.group(1)) if m else -1), text


class VerifierLink(unittest.TestCase):
    """`apf verify` can be trusted without reading the runner or the trial:
    verify_only, linked against libapf-verify.a alone, links."""

    def outcome(self):
        return link_outcome(self, "verify_only")

    def test_verify_only_links_without_runner_or_trial(self):
        rc, text = self.outcome()
        if rc == 0:
            return
        # Name each missing symbol's owner: a runner or trial symbol is the
        # layout broken; anything else is some other link failure.
        owners = {}
        for sub in FORBIDDEN:
            for sym, obj in defined_by(os.path.join(BUILD, "obj", sub)).items():
                owners[sym] = obj
        why = []
        for m in re.finditer(r"^(?:.*?: )?(\S+?\.o): in function [`'](\S+)'"
                             r"[^\n]*\n[^\n]*undefined reference to [`'](\S+)'",
                             text, re.M):
            obj, fn, sym = m.groups()
            owner = owners.get(sym)
            why.append(f"{rel(os.path.join(ROOT, obj)) if not obj.startswith('/') else obj}"
                       f" ({fn}) calls {sym}"
                       + (f", defined in {owner}" if owner else
                          " (defined nowhere in the allowed packages)"))
        self.fail("verify_only does not link against libapf-verify.a alone"
                  + (":\n  " + "\n  ".join(sorted(set(why))) if why else "")
                  + "\nlinker:\n" + text[-3000:])

    def test_verify_only_runs(self):
        rc, text = self.outcome()
        if rc != 0:
            self.skipTest("verify_only did not link (see "
                          "test_verify_only_links_without_runner_or_trial)")
        p = subprocess.run([os.path.join(LAYOUT, "verify_only")], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("verify_only: ok", p.stdout)

    def test_libapf_verify_holds_every_verify_object_and_no_runner_or_trial(self):
        lib = os.path.join(BUILD, "libapf-verify.a")
        p = subprocess.run(["ar", "t", lib], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        members = {os.path.relpath(os.path.normpath(os.path.join(BUILD, m)),
                                   os.path.join(BUILD, "obj"))
                   for m in p.stdout.split()}
        bad = sorted(m for m in members if m.startswith(FORBIDDEN))
        self.assertEqual(bad, [], "libapf-verify.a holds runner or trial objects")
        want = {f[:-2] + ".o" for f in
                (rel(x) for x in glob.glob(os.path.join(ROOT, "verify", "*.c")))}
        self.assertEqual(sorted(want - members), [],
                         "verify/ objects missing from libapf-verify.a")

    def test_every_verify_object_is_in_the_link(self):
        # The link only pulls in what is reached; every verify/ object must
        # be, or one of them could reach the runner unnoticed.
        rc, _ = self.outcome()
        if rc != 0:
            self.skipTest("verify_only did not link")
        with open(os.path.join(LAYOUT, "verify_only.map"), errors="replace") as f:
            text = f.read()
        linked = set(re.findall(r"(\S*/obj/verify/[^/\s()]+\.o)", text))
        linked = {os.path.basename(x)[:-2] for x in linked}
        want = {os.path.basename(x)[:-2]
                for x in glob.glob(os.path.join(ROOT, "verify", "*.c"))}
        self.assertEqual(sorted(want - linked), [],
                         "verify/ sources whose objects verify_only does not "
                         "link (so the link check does not cover them)")


class RunnerLink(unittest.TestCase):
    """The runner never calls the trial's code: runner_only, linked against
    libapf-runner.a (every object but pkg/trial's) alone, links, and the
    link pulls in every pkg/runner object."""

    def outcome(self):
        return link_outcome(self, "runner_only")

    def test_runner_only_links_without_the_trial(self):
        rc, text = self.outcome()
        if rc == 0:
            return
        owners = defined_by(os.path.join(BUILD, "obj", "pkg", "trial"))
        why = sorted({f"{obj} ({fn}) calls {sym}"
                      + (f", defined in {owners[sym]}" if sym in owners else "")
                      for obj, fn, sym in re.findall(
                          r"^(?:.*?: )?(\S+?\.o): in function [`'](\S+)'"
                          r"[^\n]*\n[^\n]*undefined reference to [`'](\S+)'",
                          text, re.M)})
        self.fail("runner_only does not link against libapf-runner.a alone"
                  + (":\n  " + "\n  ".join(why) if why else "")
                  + "\nlinker:\n" + text[-3000:])

    def test_runner_only_runs(self):
        rc, _ = self.outcome()
        if rc != 0:
            self.skipTest("runner_only did not link (see "
                          "test_runner_only_links_without_the_trial)")
        p = subprocess.run([os.path.join(LAYOUT, "runner_only")], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("runner_only: ok", p.stdout)

    def test_the_archive_holds_no_trial_object_and_the_link_every_runner_one(self):
        p = subprocess.run(["ar", "t", os.path.join(BUILD, "libapf-runner.a")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        members = {os.path.relpath(os.path.normpath(os.path.join(BUILD, m)),
                                   os.path.join(BUILD, "obj"))
                   for m in p.stdout.split()}
        self.assertEqual(sorted(m for m in members if m.startswith("pkg/trial")), [])
        rc, _ = self.outcome()
        if rc != 0:
            self.skipTest("runner_only did not link")
        with open(os.path.join(LAYOUT, "runner_only.map"), errors="replace") as f:
            text = f.read()
        linked = {os.path.basename(x)[:-2]
                  for x in re.findall(r"(\S*/obj/pkg/runner/[^/\s()]+\.o)", text)}
        want = {os.path.basename(x)[:-2]
                for x in glob.glob(os.path.join(ROOT, "pkg", "runner", "*.c"))}
        self.assertEqual(sorted(want - linked), [],
                         "pkg/runner sources whose objects runner_only does not "
                         "link (so the link check does not cover them)")


class ExportedSymbols(unittest.TestCase):
    def test_libapf_exports_only_apf_symbols(self):
        lib = os.path.join(BUILD, "libapf.a")
        if not os.path.exists(lib):
            self.fail(f"{rel(lib)}: not built")
        p = script("exported-symbols.py", lib, os.path.join(BUILD, "obj"))
        if p.returncode != 0:
            self.fail(p.stdout + p.stderr)

    def test_symbol_check_names_offenders_by_object(self):
        # Two objects with one basename, as workloads/*/model.o are.
        cc = os.environ.get("CC") or shutil.which("cc")
        if not cc:
            self.skipTest("no C compiler")
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            srcs = {"a": "int helper(void) { return 1; }\n"
                         "int apf_a(void) { return helper(); }\n",
                    "b": "const int table[2] = {1, 2};\n"
                         "int apf_b(void) { return table[0]; }\n"}
            objs = []
            for k, text in srcs.items():
                os.makedirs(os.path.join(d, "obj", k))
                c = os.path.join(d, k + ".c")
                with open(c, "w") as f:
                    f.write(text)
                o = os.path.join(d, "obj", k, "model.o")
                subprocess.run([cc, "-c", c, "-o", o], check=True)
                objs.append(o)
            lib = os.path.join(d, "lib.a")
            subprocess.run(["ar", "rcs", lib, *objs], check=True)
            p = script("exported-symbols.py", lib, os.path.join(d, "obj"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("a/model.o: helper (T)", p.stdout)
        self.assertIn("b/model.o: table (R)", p.stdout)


class IncludeCycles(unittest.TestCase):
    def test_no_include_cycle_between_folders(self):
        p = script("include-cycles.py")
        if p.returncode != 0:
            self.fail(p.stdout + p.stderr)

    def test_cycle_check_names_a_cycle(self):
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            files = {"pkg/a/a.h": '#include "b/b.h"\n',
                     "pkg/b/b.h": '#include "base/base.h"\n',
                     "pkg/b/b.c": '#include "b/b.h"\n#include "a/a.h"\n',
                     "pkg/base/base.h": "",
                     "verify/v.c": '#include "a/a.h"\n'}
            for path, text in files.items():
                os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(d, path), "w") as f:
                    f.write(text)
            p = script("include-cycles.py", "--root", d)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("include cycle: pkg/a -> pkg/b -> pkg/a", p.stdout)
        self.assertIn("pkg/b/b.c:2", p.stdout)


class Install(unittest.TestCase):
    def test_install_puts_only_public_headers(self):
        for f in ("apf", "libapf.a"):
            if not os.path.exists(os.path.join(BUILD, f)):
                self.skipTest(f"{rel(os.path.join(BUILD, f))}: not built")
        if not shutil.which("pkg-config"):
            self.skipTest("no pkg-config")
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
        with tempfile.TemporaryDirectory(prefix="apf-install-") as d:
            # -o all: install what is built, rebuild nothing.
            p = subprocess.run(["make", "--no-print-directory", "-s", "-o", "all",
                                f"BUILD={BUILD}", f"PREFIX={d}", "install"],
                               cwd=ROOT, env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            inc = os.path.join(d, "include")
            got = sorted(os.path.relpath(os.path.join(dp, f), inc)
                         for dp, _, fs in os.walk(inc) for f in fs)
            want = sorted(os.path.relpath(h, os.path.join(ROOT, "include"))
                          for h in glob.glob(os.path.join(ROOT, "include", "apf", "*.h")))
            self.assertEqual(got, want)
            self.assertTrue(os.path.exists(os.path.join(d, "lib", "libapf.a")))
            # The pkg-config file's flags compile a submission's includes.
            penv = dict(env, PKG_CONFIG_PATH=os.path.join(d, "lib", "pkgconfig"))
            cf = subprocess.run(["pkg-config", "--cflags", "apf"], env=penv,
                                capture_output=True, text=True)
            self.assertEqual(cf.returncode, 0, cf.stderr)
            src = os.path.join(d, "s.c")
            with open(src, "w") as f:
                f.write("#include <apf/schedule.h>\n#include <apf/submission.h>\n"
                        "int main(void) { return 0; }\n")
            cc = os.environ.get("CC") or "cc"
            c = subprocess.run([cc, "-std=c17", "-Wall", "-Wextra", "-Werror",
                                *cf.stdout.split(), "-c", src, "-o",
                                os.path.join(d, "s.o")],
                               capture_output=True, text=True)
            self.assertEqual(c.returncode, 0, c.stderr)


if __name__ == "__main__":
    unittest.main()
