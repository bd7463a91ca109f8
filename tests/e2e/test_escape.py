"""End-to-end: text from an entry or a run reaches the terminal escaped
(issue 29, "Seal it, round 3").

The attackers: a submitter who crafts an entry (and signs the archive
without `apf pack`, so pack's own refusal is no defence) and an operator
who holds the runner key, writes anything into a run directory and signs
it again. Their names, authors, git fields, workload and dataset names,
run.json claims, log details and log directory names hold terminal escape
sequences (OSC retitling the window, CSI clearing the screen), BEL, CR,
backspace, the C1 CSI as UTF-8 (U+009B), a right-to-left override
(U+202E) and bytes that are not UTF-8. Every command that prints them -
inspect, verify, plan, heldout, status, score, report, run - must print
no such byte raw: the text shows as \\xNN. JSON output stays valid,
complete JSON (in ASCII), and HTML shows a name like <script> as text.
"""
import json
import os
import shutil
import subprocess
import unicodedata

import apftest
from apftest import ApfCase
import runfake
from runfake import FakeRun, UnitScript
from test_run import RunCase

# What a terminal acts on: OSC (retitle), CSI (clear), BEL, CR,
# backspace, the C1 CSI as UTF-8, a right-to-left override.
EVIL = "\x1b]0;owned\x07\x1b[2J\r\bX\u009b31m\u202eevil"
EVIL_SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x08X\\xc2\\x9b31m\\xe2\\x80\\xaeevil"
MARKUP = "<script>alert(1)</script>"
# Code points no output may hold raw.
BIDI = {chr(c) for c in (0x2028, 0x2029, *range(0x202a, 0x202f),
                         *range(0x2066, 0x206a))}


class EscapeCase(ApfCase):
    def raw(self, *args, env=None, timeout=300):
        """apf's stdout and stderr as bytes, as a terminal would get them."""
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([apftest.APF, *args], env=e, cwd=self.tmp,
                           capture_output=True, timeout=timeout)
        return p

    def assert_clean(self, data, what):
        """Valid UTF-8 with no control but newline, no C1 control and no
        bidi or line-separator character."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{what}: not UTF-8 ({e}): {data[-600:]!r}")
        for ch in text:
            bad = (ch != "\n" and unicodedata.category(ch) == "Cc") or ch in BIDI
            self.assertFalse(bad, f"{what}: raw {ch!r} in {text[-1500:]!r}")
        return text

    def shows(self, *args, rc=0, escaped=(EVIL_SHOWN,), env=None):
        """Runs apf; both streams clean, the exit status rc, and every one
        of `escaped` printed somewhere. Returns (stdout, stderr) text."""
        p = self.raw(*args, env=env)
        out = self.assert_clean(p.stdout, f"apf {args[0]} stdout")
        err = self.assert_clean(p.stderr, f"apf {args[0]} stderr")
        self.assertEqual(p.returncode, rc, f"apf {' '.join(args)}\n{out}\n{err}")
        for e in escaped:
            self.assertIn(e, out + err, f"apf {' '.join(args)}\n{out}\n{err}")
        return out, err

    def json_of(self, *args, rc=0):
        """--json output: clean (ASCII), complete, parsed."""
        p = self.raw(*args, "--json")
        out = self.assert_clean(p.stdout, f"apf {args[0]} --json")
        self.assert_clean(p.stderr, f"apf {args[0]} --json stderr")
        self.assertEqual(p.returncode, rc, p)
        self.assertTrue(out.isascii(), out)
        return json.loads(out)

    def keys(self):
        return (os.path.join(self.home, "keys", "default.key.pem"),
                os.path.join(self.home, "keys", "default.pub.pem"))

    def hostile_entry(self, edit=None, name="hostile.apf"):
        """A benign entry, its statement rewritten and signed again with
        this machine's (trusted) key: what a submitter who signs archives
        themselves can hand in."""
        entry = self.pack(self.make_submission(name="benign"), "benign.apf")

        def evil(st):
            p = st["predicate"]
            p["submission"]["name"] = "sub " + EVIL
            p["submission"]["authors"] = ["A. " + EVIL, MARKUP]
            # The commit is checked for its length (40 bytes) alone.
            commit = EVIL + "0" * (40 - len(EVIL.encode()))
            p["submission"]["git"] = {"repository": True, "commit": commit,
                                      "branch": "b" + EVIL, "remote": "r" + EVIL,
                                      "path": "p" + EVIL, "dirty": False}
            p["environment"]["cpu"]["model"] = "cpu" + EVIL
            p["environment"]["os"] = "os" + EVIL
            return edit(st) if edit else st
        return apftest.resign_manifest(entry, self.path(name), evil, *self.keys())


class HostileEntry(EscapeCase):
    """A submitter's entry, signed outside apf pack."""

    def setUp(self):
        super().setUp()
        self.entry = self.hostile_entry()

    def test_inspect_prints_the_manifest_escaped(self):
        out, _ = self.shows("inspect", self.entry)
        self.assertIn("submission   sub " + EVIL_SHOWN, out)
        self.assertIn("  author     A. " + EVIL_SHOWN, out)
        self.assertIn("  git        " + EVIL_SHOWN + "00000000000 on b" + EVIL_SHOWN
                      + " from r" + EVIL_SHOWN, out)
        self.assertIn("cpu" + EVIL_SHOWN, out)

    def test_inspect_json_is_ascii_and_keeps_the_text(self):
        j = self.json_of("inspect", self.entry)
        sub = j["statement"]["predicate"]["submission"]
        self.assertEqual(sub["name"], "sub " + EVIL)
        self.assertEqual(sub["authors"], ["A. " + EVIL, MARKUP])

    def test_verify_entry_prints_the_manifest_escaped(self):
        out, _ = self.shows("verify", self.entry)
        self.assertIn("submission  sub " + EVIL_SHOWN, out)
        j = self.json_of("verify", self.entry)
        self.assertEqual(j["submission"], "sub " + EVIL)

    def test_plan_prints_the_entry_escaped(self):
        # The entry's file name is the submitter's choice too.
        named = self.path("e" + EVIL.replace("\r", "") + ".apf")
        shutil.copy(self.entry, named)
        out, _ = self.shows("plan", named, escaped=("e\\x1b]0;owned",))
        self.assertIn("learning_rate", out)
        j = self.json_of("plan", named)
        self.assertEqual(j["entry"], named)

    def test_renamed_workload_and_dataset_print_escaped(self):
        def rename(st):
            p = st["predicate"]
            p["workloads"][0]["variant"] = "v" + EVIL
            p["datasets"][0]["name"] = "d" + EVIL
            p["workloads"][0]["dataset"] = "d" + EVIL
            for s in st["subject"]:
                if s["name"].startswith("dataset:"):
                    s["name"] = "dataset:d" + EVIL
            return st
        entry = self.hostile_entry(rename, "renamed.apf")
        both = ("v" + EVIL_SHOWN, "d" + EVIL_SHOWN)
        self.shows("inspect", entry, escaped=both)
        self.shows("verify", entry, escaped=both)
        # The plan and the draw go by the workload's name; whatever they
        # print of the rest is clean too.
        self.shows("plan", entry, escaped=())
        self.shows("heldout", "draw", entry)

    def test_heldout_draw_prints_the_entry_escaped(self):
        out, _ = self.shows("heldout", "draw", self.entry)
        self.assertIn("sub " + EVIL_SHOWN, out)
        j = self.json_of("heldout", "draw", self.entry)
        self.assertEqual(j["entries"][0]["submission"], "sub " + EVIL)

    def test_untrusted_entry_is_inspected_escaped_too(self):
        # Inspecting needs no trust: a stranger's entry is printed.
        shutil.rmtree(os.path.join(self.home, "trusted"))
        out, _ = self.shows("inspect", self.entry)
        self.assertIn("NOT TRUSTED", out)

    def test_manifest_that_is_not_utf8_is_refused_cleanly(self):
        def not_utf8(st):
            text = json.dumps(st, ensure_ascii=False).encode()
            return text.replace(b"sub ", b"sub \xff\xfe\xc0\xaf", 1)
        entry = self.hostile_entry(not_utf8, "bytes.apf")
        for cmd in ("inspect", "verify", "plan"):
            for extra in ((), ("--json",)):
                p = self.raw(cmd, entry, *extra)
                self.assert_clean(p.stdout, cmd)
                err = self.assert_clean(p.stderr, cmd)
                # Refused as a manifest that does not parse, in one line
                # that shows the byte; never a crash.
                self.assertIn(p.returncode, (1, 2), err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn("0xff", err)


class PackCourtesy(EscapeCase):
    """apf pack tells an honest submitter about a stray control character;
    the printing does not rely on it."""

    def test_control_characters_in_submission_ini_are_refused(self):
        for key, value in (("name", "x\x1b[2J"), ("authors", "A, B\x07"),
                           ("description", "d\u202eb"), ("name", "x\u009by")):
            sub = self.make_submission(name="s_" + key)
            ini = self.path("s_" + key, "submission.ini")
            with open(ini, encoding="utf-8") as f:
                text = f.read()
            if key == "description":
                text = text.replace("[tuning]", f"description = {value}\n\n[tuning]")
            else:
                text = "\n".join(f"{key} = {value}" if l.startswith(key + " =") else l
                                 for l in text.splitlines()) + "\n"
            with open(ini, "w", encoding="utf-8") as f:
                f.write(text)
            p = self.raw("pack", sub, "-w", "tiny", "-o", self.path("x.apf"), "--no-build")
            err = self.assert_clean(p.stderr, "pack")
            self.assertEqual(p.returncode, 2, err)
            self.assertRegex(err.splitlines()[-1], r"^apf: .*submission\.ini: line \d+: "
                             r"\[submission\] " + key + r": holds a control character", err)
            self.assertIn("\\x", err)

    def test_odd_hyperparameter_name_is_refused_escaped(self):
        sub = self.make_submission(name="hp", extra={
            "tuning_search_space.ini": "[lr\x1b[2J\x07]\nmin = 1e-4\nmax = 1e-2\n"})
        p = self.raw("pack", sub, "-w", "tiny", "-o", self.path("x.apf"), "--no-build")
        err = self.assert_clean(p.stderr, "pack")
        self.assertEqual(p.returncode, 2, err)
        self.assertIn("[lr\\x1b[2J\\x07]: a hyperparameter name is letters", err)

    def test_bytes_that_are_not_utf8_are_refused(self):
        sub = self.make_submission(name="bytes")
        ini = self.path("bytes", "submission.ini")
        with open(ini, "rb") as f:
            data = f.read()
        with open(ini, "wb") as f:
            f.write(data.replace(b"name = bytes", b"name = by\xfftes"))
        p = self.raw("pack", sub, "-w", "tiny", "-o", self.path("x.apf"), "--no-build")
        err = self.assert_clean(p.stderr, "pack")
        self.assertEqual(p.returncode, 2, err)
        self.assertIn("line 2: [submission] name: holds a control character", err)
        self.assertIn("by\\xfftes", err)


class HostileRun(EscapeCase):
    """A run of the hostile entry whose operator also wrote into run.json
    and the log, and signed the log again."""

    def setUp(self):
        super().setUp()
        case = self

        class Run(FakeRun):
            def prepare(self):
                super().prepare()
                # The run's entry is the submitter's hostile one.
                case.hostile_entry(name="fakesub.apf")
                self.statement = json.loads(case.ok("inspect", self.entry, "--json").out)
                self.plan = json.loads(case.ok("plan", self.entry, "--json").out)

        first = "study_0/tiny/trial_1"
        self.run = Run(self, scripts={first: UnitScript(end="fault", evals=2)}).write(
            self.path("run"))
        # The operator's claims, signed again.
        rj = self.run.run_json
        rj["runner"]["host"] = "host" + EVIL
        rj["environment"]["cpu"]["model"] = "cpu" + EVIL
        self.run.write_run_json(rj)
        for r in self.run.records:
            if r["event"] == "run_start":
                r["run_json_sha256"] = runfake.sha256_hex(self.run.run_json_bytes)
            if r["event"] == "sandbox_fault":
                r["detail"] = "fault" + EVIL
        at = self.run.find("eval", first)[0]
        w = {"t_ns": self.run.records[at]["t_ns"], "event": "warning",
             "unit": first, "detail": "warn" + EVIL}
        self.run.records.insert(at + 1, w)
        self.run.save()
        self.pub = self.path("runner.pub.pem")

    def test_verify_run_prints_escaped(self):
        p = self.raw("verify", self.run.path, "--key", self.pub)
        out = self.assert_clean(p.stdout, "verify")
        err = self.assert_clean(p.stderr, "verify")
        self.assertIn(EVIL_SHOWN, out + err, out + err)
        p = self.raw("verify", self.run.path, "--key", self.pub, "--json")
        self.assert_clean(p.stdout, "verify --json")
        self.assertTrue(p.stdout.decode().isascii())
        j = json.loads(p.stdout)
        self.assertEqual(j["submission"], "sub " + EVIL)

    def test_status_prints_escaped(self):
        # The directory is named by whoever handed the run over.
        named = self.path("r" + EVIL)
        os.symlink(self.run.path, named)
        self.shows("status", named)
        j = self.json_of("status", named)
        self.assertEqual(j["run_dir"], named)
        self.assertEqual(len(j["units"]), 6)

    def test_score_prints_escaped(self):
        out, err = self.shows("score", self.run.path)
        self.assertIn("sub " + EVIL_SHOWN, out)
        j = self.json_of("score", self.run.path)
        self.assertEqual(j["submissions"][0]["name"], "sub " + EVIL)
        self.assertIn("cpu" + EVIL, j["submissions"][0]["run"]["hardware"]["cpu_model"])

    def test_report_shows_names_as_text(self):
        page = self.path("page.html")
        self.shows("report", self.run.path, "-o", page, escaped=())
        with open(page, encoding="utf-8") as f:
            html = f.read()
        self.assertNotIn(MARKUP, html)
        self.assertNotIn("<script>alert", html)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", html)
        self.assertNotIn("\x1b", html)


class HostileLogDirectories(EscapeCase):
    """AlgoPerf log directories: the submission's name is its directory's,
    and the directory's name is any bytes the file system takes."""

    CSV = ("accumulated_eval_time,accumulated_logging_time,"
           "accumulated_submission_time,global_step,preemption_count,score,"
           "total_duration,train/accuracy,validation/accuracy,test/accuracy,"
           "validation/num_examples,test/num_examples\n"
           "1.0,0.1,4.0,1,0,4.0,6.0,0.9,0.9,0.9,100,100\n")

    def setUp(self):
        super().setUp()
        self.logs = os.path.join(self.tmp.encode(), b"logs")
        # A directory name cannot hold a slash: the markup is unclosed.
        for name in (("evil " + EVIL + "<script>alert(1)").encode() + b"\xff\xfe",
                     b"plain"):
            d = os.path.join(self.logs, name, b"study_0", b"tiny_jax", b"trial_1")
            os.makedirs(d)
            with open(os.path.join(d, b"eval_measurements.csv"), "w") as f:
                f.write(self.CSV)

    def test_score_table_and_warnings_are_escaped(self):
        out, err = self.shows("score", self.logs.decode(errors="surrogateescape"),
                              escaped=("evil " + EVIL_SHOWN,))
        self.assertIn("\\xff\\xfe", out)

    def test_score_json_keeps_every_submission(self):
        j = self.json_of("score", self.logs.decode(errors="surrogateescape"))
        names = sorted(s["name"] for s in j["submissions"])
        self.assertEqual(len(names), 2, names)
        self.assertTrue(names[0].startswith("evil " + EVIL + "<script>alert(1)"), names)
        self.assertTrue(names[0].endswith("\\xff\\xfe"), names)

    def test_report_page_holds_no_markup_from_a_name(self):
        page = self.path("page.html")
        self.shows("report", self.logs.decode(errors="surrogateescape"), "-o", page,
                   escaped=())
        with open(page, encoding="utf-8") as f:
            html = f.read()
        self.assertNotIn("<script>alert", html)
        self.assertIn("&lt;script&gt;alert(1)", html)

    def test_csv_and_svg_are_well_formed(self):
        import csv
        import xml.etree.ElementTree as ET
        out = self.path("s.csv")
        svg = self.path("s.svg")
        self.shows("score", self.logs.decode(errors="surrogateescape"), "--csv", out,
                   "--svg", svg, escaped=())
        with open(out, newline="", encoding="utf-8", errors="surrogateescape") as f:
            rows = list(csv.reader(f))
        self.assertEqual(len(rows), 3, rows)
        self.assertEqual({r[0][:4] for r in rows[1:]}, {"evil", "plai"})
        root = ET.parse(svg).getroot()
        self.assertTrue(root.tag.endswith("svg"))


class HostileEntryRunForReal(RunCase, EscapeCase):
    """apf run on a real, building entry whose signed environment record
    the submitter rewrote: the runner's drift notice quotes it."""

    def test_run_notices_and_the_run_directory_print_escaped(self):
        entry = self.pack_baseline()
        key, pub = self.keys()

        def evil(st):
            st["predicate"]["environment"]["cpu"]["model"] = "cpu" + EVIL
            st["predicate"]["submission"]["name"] = "sub " + EVIL
            return st
        hostile = apftest.resign_manifest(entry, self.path("h.apf"), evil, key, pub)
        run = self.path("run")
        # cpu.model cannot change a result: the run goes on and says so,
        # quoting the record as JSON (C0 controls are \uXXXX there; the
        # C1 CSI and the override are escaped where the notice prints).
        _, err = self.shows("run", hostile, "-o", run, "--study", "0", "--trial", "1",
                            escaped=("\\xc2\\x9b31m\\xe2\\x80\\xaeevil",))
        self.assertIn("apf: run: environment: cpu.model", err)
        out, _ = self.shows("verify", run, escaped=("sub " + EVIL_SHOWN,))
        self.shows("status", run, escaped=())
        out, _ = self.shows("score", run, escaped=("sub " + EVIL_SHOWN,))
        j = self.json_of("score", run)
        self.assertEqual(j["submissions"][0]["name"], "sub " + EVIL)
