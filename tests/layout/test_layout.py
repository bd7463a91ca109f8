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


EXPORTS = os.path.join(ROOT, "pkg", "libapf.exports")


def compiler():
    """The C compiler the build used ($CC, else cc): apf cannot be built
    without one, so its absence is a failure, not a skip."""
    cc = os.environ.get("CC") or shutil.which("cc")
    assert cc, "no C compiler ($CC unset and no cc on PATH)"
    return cc


def build_lib(d, srcs, cc):
    """lib.a in d from {name: C text}, each compiled to obj/<name>/model.o."""
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
    return lib


class ExportedSymbols(unittest.TestCase):
    def test_libapf_exports_only_apf_symbols(self):
        lib = os.path.join(BUILD, "libapf.a")
        if not os.path.exists(lib):
            self.fail(f"{rel(lib)}: not built")
        p = script("exported-symbols.py", lib, os.path.join(BUILD, "obj"))
        if p.returncode != 0:
            self.fail(p.stdout + p.stderr)

    def test_libapf_exports_exactly_its_list(self):
        # The package-internal functions (APF_INTERNAL) are local in the
        # archive, so neither cmd/apf nor another package can call them.
        lib = os.path.join(BUILD, "libapf.a")
        if not os.path.exists(lib):
            self.fail(f"{rel(lib)}: not built")
        p = script("exported-symbols.py", "--list", EXPORTS, lib,
                   os.path.join(BUILD, "obj"))
        if p.returncode != 0:
            self.fail(p.stdout + p.stderr)
        with open(EXPORTS) as f:
            listed = {l.strip() for l in f if l.strip() and l[0] != "#"}
        for internal in ("apf_runner_unit", "apf_sandbox_policy_add",
                         "apf_sandbox_normalize", "apf_vx_record"):
            self.assertNotIn(internal, listed)

    def test_list_check_names_unlisted_and_missing(self):
        cc = compiler()
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            lib = build_lib(d, {
                "a": "int apf_a(void) { return 1; }\n"
                     "int apf_a_internal(void) { return 2; }\n",
                "b": "__attribute__((visibility(\"hidden\"))) "
                     "int apf_b_hidden(void) { return 3; }\n"
                     "int apf_b(void) { return apf_b_hidden(); }\n"}, cc)
            lst = os.path.join(d, "exports")
            with open(lst, "w") as f:
                f.write("# comment\napf_a\napf_b\napf_gone\n")
            p = script("exported-symbols.py", "--list", lst, lib,
                       os.path.join(d, "obj"))
            # A hidden symbol is still global in a plain archive: only the
            # partial link and --localize-hidden make it local.
            o = os.path.join(d, "obj", "b", "model.o")
            subprocess.run(["objcopy", "--localize-hidden", o], check=True)
            lib2 = os.path.join(d, "lib2.a")
            subprocess.run(["ar", "rcs", lib2,
                            os.path.join(d, "obj", "a", "model.o"), o],
                           check=True)
            with open(lst, "w") as f:
                f.write("apf_a\napf_a_internal\napf_b\n")
            q = script("exported-symbols.py", "--list", lst, lib2,
                       os.path.join(d, "obj"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("a/model.o: apf_a_internal (T)", p.stdout)
        self.assertIn("b/model.o: apf_b_hidden (T)", p.stdout)
        self.assertIn("does not export (take them off the list): apf_gone",
                      p.stdout)
        self.assertNotIn("apf_b (T)", p.stdout)
        self.assertEqual(q.returncode, 0, q.stdout + q.stderr)
        self.assertIn("its 3 global symbols are the ones", q.stdout)

    def test_symbol_check_names_offenders_by_object(self):
        # Two objects with one basename, as workloads/*/model.o are.
        cc = compiler()
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            lib = build_lib(d, {
                "a": "int helper(void) { return 1; }\n"
                     "int apf_a(void) { return helper(); }\n",
                "b": "const int table[2] = {1, 2};\n"
                     "int apf_b(void) { return table[0]; }\n"}, cc)
            p = script("exported-symbols.py", lib, os.path.join(d, "obj"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("a/model.o: helper (T)", p.stdout)
        self.assertIn("b/model.o: table (R)", p.stdout)


def nm_names(path, *flags):
    p = subprocess.run(["nm", *flags, path], capture_output=True, text=True)
    if p.returncode != 0:
        raise OSError(f"nm {path}: {p.stderr.strip()}")
    return {line.split()[-1] for line in p.stdout.splitlines() if line.split()}


def call_cycle(objdir):
    """A cycle of calls between the object files of one folder (each file
    a node, an edge where one uses a global the other defines), as a list
    of file names ending where it starts; None when they call down only."""
    objs = sorted(glob.glob(os.path.join(objdir, "*.o")))
    owner, uses = {}, {}
    for o in objs:
        name = os.path.basename(o)[:-2] + ".c"
        for sym in nm_names(o, "-g", "--defined-only"):
            owner[sym] = name
        uses[name] = nm_names(o, "-u")
    edges = {f: sorted({owner[s] for s in u if s in owner} - {f})
             for f, u in uses.items()}
    state = {}

    def visit(f, path):
        state[f] = 1
        for g in edges[f]:
            if state.get(g) == 1:
                return path[path.index(g):] + [g] if g in path else [f, g, f]
            if not state.get(g):
                c = visit(g, path + [g])
                if c:
                    return c
        state[f] = 2
        return None

    for f in sorted(edges):
        if not state.get(f):
            c = visit(f, [f])
            if c:
                return c
    return None


class FileCalls(unittest.TestCase):
    def test_sandbox_files_call_down_only(self):
        # The supervisor's sides (spawn.c, notify.c) over the plan, the
        # children, the policy: a circle would put the child side's
        # system-calls-only code, or the policy, back in reach of the
        # supervisor's allocations and state.
        objdir = os.path.join(BUILD, "obj", "pkg", "sandbox")
        if not glob.glob(os.path.join(objdir, "*.o")):
            self.fail(f"{rel(objdir)}: not built")
        cycle = call_cycle(objdir)
        self.assertIsNone(cycle, "pkg/sandbox's files call each other in a "
                          "circle: " + " -> ".join(cycle or []))

    def test_child_side_calls_no_other_file(self):
        objdir = os.path.join(BUILD, "obj", "pkg", "sandbox")
        owner = {}
        for o in glob.glob(os.path.join(objdir, "*.o")):
            for sym in nm_names(o, "-g", "--defined-only"):
                owner[sym] = os.path.basename(o)
        child = os.path.join(objdir, "child.o")
        if not os.path.exists(child):
            self.fail(f"{rel(child)}: not built")
        reached = sorted({owner[s] for s in nm_names(child, "-u")
                          if s in owner})
        self.assertEqual(reached, [], "child.c (system calls only, after a "
                         "fork) calls into other files of pkg/sandbox")

    def test_cycle_check_finds_a_circle(self):
        cc = compiler()
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            srcs = {"a": "int apf_b(void);\nint apf_a(void) { return apf_b(); }\n",
                    "b": "int apf_c(void);\nint apf_b(void) { return apf_c(); }\n",
                    "c": "int apf_a(void);\nint apf_c(void) { return apf_a(); }\n",
                    "d": "int apf_a(void);\nint apf_d(void) { return apf_a(); }\n"}
            for k, text in srcs.items():
                c = os.path.join(d, k + ".c")
                with open(c, "w") as f:
                    f.write(text)
                subprocess.run([cc, "-c", c, "-o", os.path.join(d, k + ".o")],
                               check=True)
            cycle = call_cycle(d)
            os.remove(os.path.join(d, "c.o"))
            none = call_cycle(d)
        self.assertEqual(cycle, ["a.c", "b.c", "c.c", "a.c"])
        self.assertIsNone(none)


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



class VectorState(unittest.TestCase):
    """No SSE code is reached with the vector registers' upper halves
    dirty (scripts/vector-state.py): the tile kernels' edge tiles once left
    every later SSE instruction in their thread 70 times slower."""

    def test_apf_reaches_no_sse_code_with_dirty_upper_halves(self):
        files = [os.path.join(BUILD, "apf")]
        cuda = os.path.join(BUILD, "lib", "apf-cuda.so")
        if os.path.exists(cuda):
            files.append(cuda)
        for f in files:
            if not os.path.exists(f):
                self.fail(f"{rel(f)}: missing (make BUILD={rel(BUILD)} builds it)")
        p = script("vector-state.py", *files)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("no SSE code reached", p.stdout)

    def test_the_check_names_a_dirty_call_and_a_dirty_tail_jump(self):
        asm = """\t.text
\t.type sse, @function
sse:\taddss %xmm0, %xmm1
\tret
\t.type dirty, @function
dirty:\tvmovaps %ymm0, %ymm1
\tmovq %rdi, %rax
\tcall sse
\tret
\t.type cleared, @function
cleared:\tvmovaps %zmm0, %zmm1
\tvzeroupper
\tcall sse
\tret
\t.type tail, @function
tail:\tvaddps %ymm0, %ymm1, %ymm2
\tjmp sse
\t.type avx, @function
avx:\tvaddps %ymm0, %ymm1, %ymm2
\tcall cleared
\tret
"""
        with tempfile.TemporaryDirectory(prefix="apf-layout-") as d:
            src, obj = os.path.join(d, "v.s"), os.path.join(d, "v.o")
            with open(src, "w") as f:
                f.write(asm)
            subprocess.run(["cc", "-c", src, "-o", obj], check=True)
            p = script("vector-state.py", obj)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout)
        self.assertRegex(lines[0], r": dirty: call .*<sse>: calls SSE code")
        self.assertRegex(lines[1], r": tail: jmp .*<sse>: calls SSE code")

    def test_the_check_refuses_a_file_it_cannot_read(self):
        p = script("vector-state.py", os.path.join(ROOT, "README.md"))
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("vector-state: ", p.stderr)

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
            cc = compiler()
            c = subprocess.run([cc, "-std=c17", "-Wall", "-Wextra", "-Werror",
                                *cf.stdout.split(), "-c", src, "-o",
                                os.path.join(d, "s.o")],
                               capture_output=True, text=True)
            self.assertEqual(c.returncode, 0, c.stderr)


if __name__ == "__main__":
    unittest.main()
