"""apf's generated documentation against the binary it documents: the bash
completion (scripts/gen-completion.py) offers each command and every option
each --help lists, and completes values and files by kind; the man pages
(scripts/gen-man.py) exist for every command, render without a warning and
name every option; `make install` puts binary, pages and completion where
the Makefile says; and every `apf ...` line of docs/submitting.md names a
real command with real options.

What a command offers is read here from its --help with a deliberately
simpler reading than scripts/apfhelp.py's (every --word in the options
list), so a fault in the generators' reader cannot hide itself."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apftest import APF, BLOBS, ROOT, TEST_WORKLOADS, ApfCase  # noqa: E402

BUILD = os.environ.get("APF_BUILD") or os.path.dirname(os.path.abspath(APF))
DOC = os.path.join(ROOT, "docs", "submitting.md")


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def help_text(*words):
    p = run([APF, *words, "--help"])
    assert p.returncode == 0, p
    return p.stdout


def public_commands():
    text = help_text()
    block = text.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    return [l.split()[0] for l in block.splitlines() if l.startswith("  ")]


def subcommands(cmd):
    usage = help_text(cmd).split("\n\n", 1)[0]  # the synopses, not the examples
    return sorted(set(re.findall(rf"^(?:usage: |\s+)apf {cmd} ([a-z]+)\b", usage, re.M)))


def all_commands():
    """["pack", ..., "heldout draw", "heldout verify"]: what has options."""
    out = []
    for c in public_commands():
        out.append(c)
        out += [f"{c} {s}" for s in subcommands(c)]
    return out


def options_of(cmd):
    """{"--workloads": "W[,W...]" or None, "-w": ...} from the options list."""
    text = help_text(*cmd.split())
    block = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0] if "\noptions:\n" in text else ""
    opts = {"-h": None, "--help": None}
    for l in block.splitlines():
        # an option sits at column 2 ("  -o, --output") or 6; a wrapped
        # help line that starts with "--strict)" sits at the help column
        m = re.match(r"^  (?:(-\w), |    )(--[\w-]+)(?: (\S+))?", l)
        if m:
            # a flag's help starts after a run of spaces, so no argument
            arg = m.group(3)
            opts[m.group(2)] = arg
            if m.group(1):
                opts[m.group(1)] = arg
    return opts


class Generated(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apf-docs-")
        cls.completion = os.path.join(cls.tmp, "apf.bash")
        cls.man = os.path.join(cls.tmp, "man")
        for args in (["scripts/gen-completion.py", "--apf", APF, "-o", cls.completion],
                     ["scripts/gen-man.py", "--apf", APF, "--out", cls.man]):
            p = run([sys.executable, *args], cwd=ROOT)
            assert p.returncode == 0, p.stdout + p.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class Completion(Generated):
    def complete(self, *words, cwd=None):
        """COMPREPLY for the command line `words`, the last word the one
        being completed."""
        script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                  '_apf; printf "%s\\n" "${COMPREPLY[@]}"')
        env = dict(os.environ, APF_WORKLOADS_DIR=TEST_WORKLOADS)
        p = run(["bash", "--norc", "--noprofile", "-c", script, "bash", self.completion,
                 *words], env=env, cwd=cwd)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        return [w for w in p.stdout.split("\n") if w]

    def test_completes_a_command_from_its_prefix(self):
        self.assertEqual(self.complete("apf", "pa"), ["pack"])
        self.assertEqual(sorted(self.complete("apf", "")),
                         sorted(public_commands() + ["help"]))

    def test_completes_an_option_from_its_prefix(self):
        self.assertEqual(self.complete("apf", "run", "--th"), ["--threads"])
        self.assertEqual(self.complete("apf", "run", "x.apf", "--unse"), ["--unsealed"])

    def test_offers_every_option_of_every_command_and_no_other(self):
        cmds = all_commands()
        self.assertIn("heldout draw", cmds)
        for cmd in cmds:
            with self.subTest(cmd=cmd):
                got = self.complete("apf", *cmd.split(), "-")
                self.assertEqual(sorted(got), sorted(options_of(cmd)))

    def test_completes_subcommands_and_help_topics(self):
        self.assertEqual(self.complete("apf", "heldout", ""), ["draw", "verify"])
        self.assertEqual(self.complete("apf", "help", "heldo"), ["heldout"])
        self.assertEqual(self.complete("apf", "help", "heldout", "v"), ["verify"])

    def test_completes_the_values_an_option_names(self):
        self.assertEqual(self.complete("apf", "run", "e.apf", "--device", ""), ["cpu", "cuda"])
        self.assertEqual(sorted(self.complete("apf", "score", "--rules", "")),
                         ["algoperf-0.5", "algoperf-0.6", "apf"])
        self.assertEqual(self.complete("apf", "score", "-r", "algoperf-0.5", "--rules", "=",
                                       "algoperf-0.6"), ["algoperf-0.6"])
        self.assertEqual(self.complete("apf", "verify", "r", "--replay", "a"), ["all"])

    def test_completes_workload_names_from_apf_workloads(self):
        env = dict(os.environ, APF_WORKLOADS_DIR=TEST_WORKLOADS)
        out = run([APF, "workloads"], env=env).stdout
        names = sorted(l for l in out.splitlines() if l and not l[0].isspace())
        self.assertGreaterEqual(len(names), 2, out)
        self.assertEqual(sorted(self.complete(APF, "pack", "sub", "-w", "")), names)
        self.assertEqual(sorted(self.complete(APF, "pack", "sub", "--workloads", f"{names[0]},")),
                         sorted(f"{names[0]},{n}" for n in names))
        self.assertEqual(sorted(self.complete(APF, "run", "e.apf", "--workload", "")), names)
        self.assertEqual(sorted(self.complete(APF, "train", "")), names)
        # a workload's variants for train -v, from `apf workloads NAME`
        with_variants = [n for n in names
                         if "variants:" in run([APF, "workloads", n], env=env).stdout]
        self.assertTrue(with_variants)
        w = with_variants[0]
        listed = run([APF, "workloads", w], env=env).stdout.split("  variants:\n", 1)[1]
        variants = sorted(l.split()[0] for l in listed.splitlines() if l.startswith("    "))
        self.assertEqual(sorted(self.complete(APF, "train", w, "-v", "")), variants)

    def test_completes_files_by_kind(self):
        d = os.path.join(self.tmp, "files")
        os.makedirs(os.path.join(d, "nadamw.run"), exist_ok=True)
        for f in ("a.apf", "b.txt", "draw.json", "k.pem"):
            open(os.path.join(d, f), "w").close()
        self.assertEqual(sorted(self.complete("apf", "inspect", "", cwd=d)),
                         ["a.apf", "nadamw.run"])
        self.assertEqual(sorted(self.complete("apf", "verify", "", cwd=d)),
                         ["a.apf", "nadamw.run"])
        self.assertEqual(self.complete("apf", "score", "", cwd=d), ["nadamw.run"])
        self.assertEqual(self.complete("apf", "score", "x.run", "", cwd=d), ["nadamw.run"])
        self.assertEqual(self.complete("apf", "pack", "", cwd=d), ["nadamw.run"])
        self.assertEqual(sorted(self.complete("apf", "verify", "x", "--key", "", cwd=d)),
                         ["k.pem", "nadamw.run"])
        self.assertEqual(sorted(self.complete("apf", "heldout", "verify", "", cwd=d)),
                         ["draw.json", "nadamw.run"])
        self.assertEqual(sorted(self.complete("apf", "heldout", "verify", "d.json", "", cwd=d)),
                         ["a.apf", "nadamw.run"])
        # an option's value is not an argument: the entry is still the first
        self.assertEqual(sorted(self.complete("apf", "run", "-o", "x.run", "", cwd=d)),
                         ["a.apf", "nadamw.run"])
        self.assertEqual(self.complete("apf", "run", "a.apf", "", cwd=d), [])


class ManPages(Generated):
    def page(self, name):
        return os.path.join(self.man, f"{name}.1")

    def rendered(self, name):
        """The page as text, and what rendering it said on stderr."""
        env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="")
        p = run(["man", "-l", "-Tutf8", self.page(name)], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        g = run(["groff", "-man", "-ww", "-z", self.page(name)])
        text = run(["groff", "-man", "-Tascii", "-P-cbou", self.page(name)]).stdout
        return text, p.stderr + g.stderr

    def setUp(self):
        for tool in ("man", "groff"):
            if not shutil.which(tool):
                self.skipTest(f"no {tool}")

    def test_a_page_for_apf_and_each_command_and_no_other(self):
        want = sorted(["apf.1"] + [f"apf-{c}.1" for c in public_commands()])
        self.assertEqual(sorted(os.listdir(self.man)), want)

    def test_every_page_renders_without_warnings(self):
        for name in ["apf"] + [f"apf-{c}" for c in public_commands()]:
            with self.subTest(page=name):
                text, err = self.rendered(name)
                self.assertEqual(err, "")
                self.assertIn("NAME", text)
                self.assertIn("SYNOPSIS", text)

    def test_every_page_names_every_option_of_its_command(self):
        for cmd in all_commands():
            top = cmd.split()[0]
            with self.subTest(cmd=cmd):
                text, _ = self.rendered(f"apf-{top}")
                words = set(re.findall(r"(?<![\w-])--?[\w][\w-]*", text))
                missing = sorted(set(options_of(cmd)) - words)
                self.assertEqual(missing, [])

    def test_apf_page_lists_every_command(self):
        text, _ = self.rendered("apf")
        for c in public_commands():
            self.assertIn(f"apf-{c}(1)", text)


class Install(unittest.TestCase):
    def test_make_install_puts_binary_pages_and_completion_in_place(self):
        if not os.path.exists(os.path.join(BUILD, "apf")):
            self.skipTest(f"{BUILD}/apf: not built")
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
        with tempfile.TemporaryDirectory(prefix="apf-install-") as d:
            # -o all: install what the runner built; rebuild (relink) nothing.
            p = run(["make", "--no-print-directory", "-s", "-o", "all", f"BUILD={BUILD}",
                     f"DESTDIR={d}", "PREFIX=/opt/apf", "install"], cwd=ROOT, env=env)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            prefix = os.path.join(d, "opt", "apf")
            binary = os.path.join(prefix, "bin", "apf")
            self.assertTrue(os.access(binary, os.X_OK))
            with open(binary, "rb") as a, open(os.path.join(BUILD, "apf"), "rb") as b:
                self.assertEqual(a.read(), b.read())
            man1 = os.path.join(prefix, "share", "man", "man1")
            self.assertEqual(sorted(os.listdir(man1)),
                             sorted(["apf.1"] + [f"apf-{c}.1" for c in public_commands()]))
            comp = os.path.join(prefix, "share", "bash-completion", "completions", "apf")
            q = run(["bash", "--norc", "--noprofile", "-c",
                     'source "$1" && complete -p apf', "bash", comp])
            self.assertEqual(q.returncode, 0, q.stderr)
            self.assertEqual(q.stdout.strip(), "complete -F _apf apf")
            # man finds the installed pages by name
            if shutil.which("man"):
                w = run(["man", "-M", os.path.join(prefix, "share", "man"), "-w", "apf-run"])
                self.assertEqual(w.stdout.strip(), os.path.join(man1, "apf-run.1"), w.stderr)


SHELL_STOP = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "2>&1", "&"}


def doc_commands(path=DOC):
    """(line number, words) of every `apf ...` line in docs/submitting.md's
    ```sh blocks, continuation lines joined, shell redirections cut off."""
    out = []
    block = None
    pending, start = "", 0
    with open(path) as f:
        for n, l in enumerate(f, 1):
            s = l.rstrip("\n")
            if block is None:
                if s.strip().startswith("```"):
                    block = s.strip()[3:].strip()
                continue
            if s.strip() == "```":
                block = None
                continue
            if block != "sh":
                continue
            if not pending:
                start = n
            if s.endswith("\\"):
                pending += s[:-1] + " "
                continue
            cmd, pending = (pending + s).strip(), ""
            if not cmd.startswith("apf "):
                continue
            words = []
            for w in shlex.split(cmd, comments=True):
                if w in SHELL_STOP or re.match(r"^\d?>", w):
                    break
                words.append(w)
            out.append((start, words))
    return out


class SubmittingGuide(unittest.TestCase):
    def test_every_apf_command_in_the_guide_is_real(self):
        cmds = public_commands()
        found = set()
        lines = doc_commands()
        for n, words in lines:
            where = f"docs/submitting.md:{n}: {' '.join(words)}"
            self.assertIn(words[1], cmds, where)
            cmd, rest = words[1], words[2:]
            subs = subcommands(cmd)
            if subs:
                self.assertTrue(rest and rest[0] in subs, where)
                cmd, rest = f"{cmd} {rest[0]}", rest[1:]
            found.add(cmd)
            opts = options_of(cmd)
            i = 0
            while i < len(rest):
                w = rest[i]
                if w == "--":
                    break
                if w.startswith("-") and w != "-":
                    name = w.split("=", 1)[0] if w.startswith("--") else w[:2]
                    self.assertIn(name, opts, f"{where}: no option {name}")
                    if opts[name] and "=" not in w and len(w) == len(name):
                        self.assertLess(i + 1, len(rest), f"{where}: {name} needs a value")
                        i += 1
                i += 1
        # the guide walks a submission through its whole life
        for c in ("train", "pack", "inspect", "plan", "run", "verify", "score"):
            self.assertIn(c, found)

    def test_guide_reader_joins_continuations_and_stops_at_the_shell(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "g.md")
            with open(p, "w") as f:
                f.write("```sh\napf run e.apf \\\n    --unsealed | tail -1\n"
                        "ls\n```\n```\napf nothing --here\n```\n"
                        "```sh\napf verify r.run > out.txt\n```\n")
            self.assertEqual(doc_commands(p), [(2, ["apf", "run", "e.apf", "--unsealed"]),
                                               (10, ["apf", "verify", "r.run"])])

if __name__ == "__main__":
    unittest.main()


class GuideSkeleton(ApfCase):
    """The guide's from-scratch submission is code that works: it packs,
    trains sealed on the test workload and replays bit for bit."""

    def skeleton(self):
        with open(DOC) as f:
            text = f.read()
        part = text.split("### A submission from scratch", 1)[1]
        return part.split("```c\n", 1)[1].split("```", 1)[0]

    def test_the_skeleton_packs_runs_and_replays(self):
        sub = self.path("signum")
        os.makedirs(sub)
        with open(os.path.join(sub, "submission.c"), "w") as f:
            f.write(self.skeleton())
        with open(os.path.join(sub, "submission.ini"), "w") as f:
            f.write("[submission]\nname = signum\nruleset = self\n"
                    "[tuning]\nstudies = 1\n")
        entry = self.path("signum.apf")
        self.ok("pack", sub, "-w", BLOBS, "-o", entry)
        run = self.path("signum.run")
        self.ok("run", entry, "-o", run, timeout=300)
        self.ok("verify", run, "--replay", "all", timeout=600)
