"""apf report end to end: the page of the AlgoPerf v0.5 logs
(tests/data/algoperf_v05) and of a real apf run (the NAdamW baseline on
blobs_mlp, 1 study x 2 trials, as test_score.RealRuns makes it), parsed with
html.parser: the sections, one figure per workload with SVG curves and a
table of numbers, every number equal to `apf score --json` (the page's
apf-data block is that JSON; the table cells carry the same values), the
verifier's outcome equal to `apf verify --json`, unverified runs marked on
every plot and row, hostile names shown as text, and no URL to anything
outside the file. Headless Chromium, where it can start, renders both pages
without a console error and leaves PNG screenshots in
build/report-artifacts/.
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apftest  # noqa: E402
from apftest import ApfCase  # noqa: E402

DATA = os.path.join(apftest.ROOT, "tests", "data", "algoperf_v05")
ARTIFACTS = os.path.join(apftest.ROOT, "build", "report-artifacts")
HOSTILE = "<script>alert(1)</script>"


def sandbox_available():
    probe = subprocess.run(["unshare", "-U", "-r", "-n", "-m", "-p", "-f",
                            "true"], capture_output=True)
    return probe.returncode == 0


class Page(html.parser.HTMLParser):
    """What a test needs of a page: elements by id, tables with their cells,
    svgs with their paths, script blocks, every attribute and the text."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.ids = {}
        self.tables = []      # dicts: id, cls, rows (lists of cell dicts)
        self.svgs = []        # dicts: cls, paths, texts, in_view (m, x)
        self.scripts = {}     # id -> text; "" for the inline JS
        self.attrs = []       # (tag, name, value)
        self.text = []
        self.views = []       # (data-m, data-x, hidden, has_svg)
        self._stack = []
        self._table = None
        self._row = None
        self._cell = None
        self._svg = None
        self._script = None
        self._view = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k, v in attrs:
            self.attrs.append((tag, k, v))
        if "id" in a:
            self.ids[a["id"]] = tag
        if tag == "div" and "view" in (a.get("class") or "").split():
            self._view = [a.get("data-m"), a.get("data-x"),
                          "hidden" in a, False]
            self.views.append(self._view)
        if tag == "table":
            self._table = {"id": a.get("id"), "cls": a.get("class", ""),
                           "rows": []}
            self.tables.append(self._table)
        elif tag == "tr" and self._table is not None:
            self._row = {"attrs": a, "cells": []}
            self._table["rows"].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {"tag": tag, "attrs": a, "text": ""}
            self._row["cells"].append(self._cell)
        elif tag == "svg":
            self._svg = {"cls": a.get("class", ""), "paths": [], "texts": [],
                         "id": a.get("id")}
            self.svgs.append(self._svg)
            if self._view is not None and "plot" in self._svg["cls"]:
                self._view[3] = True
        elif tag == "path" and self._svg is not None:
            self._svg["paths"].append(a)
        elif tag == "script":
            self._script = a.get("id", "")
            self.scripts[self._script] = ""
        self._stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag == "tr":
            self._row = None
        elif tag in ("td", "th"):
            self._cell = None
        elif tag == "svg":
            self._svg = None
        elif tag == "script":
            self._script = None
        if tag == "div" and self._view is not None and self._stack and \
                self._stack[-1] == "div":
            self._view = None
        if self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[self._script] += data
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell["text"] += data
        if self._svg is not None and self._stack and self._stack[-1] == "text":
            self._svg["texts"].append(data)

    def table(self, id_):
        return next(t for t in self.tables if t["id"] == id_)

    def body_rows(self, t):
        return [r for r in t["rows"] if r["cells"] and
                r["cells"][0]["tag"] == "td"]


def exact(v):
    """The data-value the page writes for a JSON time."""
    if v is None:
        return "null"
    if v == "inf":
        return "inf"
    return repr(float(v))


def same_value(data_value, v):
    if v is None or v == "inf":
        return data_value == exact(v)
    return data_value not in ("null", "inf") and float(data_value) == float(v)


class PageChecks:
    """Checks that hold for every page."""

    def check_self_contained(self, text, page):
        self.assertNotIn("http://", text)
        self.assertNotIn("https://", text)
        for tag, name, value in page.attrs:
            if name in ("src", "href", "action", "xlink:href"):
                self.assertFalse(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:",
                                          value or ""), (tag, name, value))
            if name == "href":
                self.assertTrue(value.startswith("#"), value)
        self.assertNotIn("<link", text)
        self.assertNotIn("<img", text)
        self.assertNotIn("@import", text)
        self.assertNotIn("url(", text)

    def check_sections(self, page):
        for id_ in ("summary", "workloads", "submissions", "warnings",
                    "scores", "profile", "profile-table", "verification",
                    "toggles", "apf-data", "apf-verify", "apf-trials"):
            self.assertIn(id_, page.ids, id_)

    def check_against_score(self, page, score):
        data = json.loads(page.scripts["apf-data"])
        self.assertEqual(data, score)
        # The summary table: one row per submission, score, rank and every
        # time cell equal to the JSON's.
        rows = [r for r in page.body_rows(page.table("scores"))
                if "excluded" not in r["attrs"].get("class", "")]
        self.assertEqual(len(rows), len(score["submissions"]))
        cols = score["base_workloads"] + [v["variant"] for v in
                                          score["heldout_variants"]]
        for row, sub in zip(rows, score["submissions"]):
            self.assertEqual(row["attrs"]["data-sub"], sub["name"])
            cells = row["cells"]
            self.assertEqual(int(cells[0]["text"]), sub["rank"])
            self.assertEqual(cells[1]["text"], sub["name"])
            self.assertEqual(float(cells[2]["attrs"]["data-value"]),
                             sub["score"])
            self.assertEqual(cells[2]["text"], f"{sub['score']:.4f}")
            times = [c for c in cells if "data-col" in c["attrs"]]
            self.assertEqual([c["attrs"]["data-col"] for c in times], cols)
            for c in times:
                v = sub["times"][c["attrs"]["data-col"]]
                self.assertTrue(same_value(c["attrs"]["data-value"], v),
                                (sub["name"], c))
                shown = c["text"].rstrip("*! ")
                if v is None:
                    self.assertEqual(shown, "-")
                elif v == "inf":
                    self.assertEqual(shown, "inf")
                else:
                    # 4 significant digits (more before the point).
                    self.assertLessEqual(abs(float(shown) - v),
                                         max(abs(v), 1e-300) * 5e-4 + 1e-12,
                                         c)
        # The profile's table: rho at every tau.
        prof = page.body_rows(page.table("profile-table"))
        self.assertEqual(len(prof), len(score["tau"]))
        for i, row in enumerate(prof):
            vals = [float(c["attrs"]["data-value"]) for c in row["cells"]]
            self.assertEqual(vals[0], score["tau"][i])
            self.assertEqual(vals[1:], [s["profile"][i]
                                        for s in score["submissions"]])
        # Each workload figure's median table: raw and scored time.
        for t in page.tables:
            if "med" not in t["cls"].split():
                continue
            for row in page.body_rows(t):
                sub = next(s for s in score["submissions"]
                           if s["name"] == row["attrs"]["data-sub"])
                col = row["attrs"]["data-col"]
                raw, fin = [c for c in row["cells"] if "data-value" in
                            c["attrs"]]
                self.assertTrue(same_value(raw["attrs"]["data-value"],
                                           sub["raw_times"][col]))
                self.assertTrue(same_value(fin["attrs"]["data-value"],
                                           sub["times"][col]))

    def check_figures(self, page, score):
        cols = score["base_workloads"] + [v["variant"] for v in
                                          score["heldout_variants"]]
        figs = [i for i in page.ids if re.fullmatch(r"w\d+", i)]
        self.assertEqual(len(figs), len(cols))
        # Six views per figure, one shown; the shown one is a plot with
        # curves (paths with data) of every trial.
        self.assertEqual(len(page.views), 6 * len(cols))
        shown = [v for v in page.views if not v[2]]
        self.assertEqual(len(shown), len(cols))
        self.assertTrue(all(v[0] == "validation" and v[1] == "time" and v[3]
                            for v in shown))
        plots = [s for s in page.svgs if "plot" in s["cls"].split()]
        self.assertGreaterEqual(len(plots), len(cols) + 1)
        for s in plots:
            curves = [p for p in s["paths"] if "c" in
                      (p.get("class") or "").split() and p.get("d")]
            self.assertTrue(curves, s["id"])
        wl = [t for t in page.tables if "wl" in t["cls"].split()]
        self.assertEqual(len(wl), len(cols))
        for t in wl:
            self.assertTrue(page.body_rows(t), t["id"])


class AlgoPerfV05(ApfCase, PageChecks):
    """The page of AlgoPerf's own v0.5 logs: 11 submissions, 8 base
    workloads and 6 held-out variants."""

    @classmethod
    def setUpClass(cls):
        cls.tmp_class = tempfile.mkdtemp(prefix="apf-report-")
        with tarfile.open(os.path.join(DATA, "algoperf_v05.tar.xz")) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(cls.tmp_class, filter="data")
            else:
                tar.extractall(cls.tmp_class)
        root = cls.tmp_class
        cls.args = [os.path.join(root, "external_tuning"), "--rules",
                    "algoperf-0.5", "--targets",
                    os.path.join(root, "scoring", "workload_targets_v05.json"),
                    "--heldout", os.path.join(
                        root, "scoring", "held_out_workloads_algoperf_v05.json")]
        cls.out = os.path.join(root, "v05.html")
        cls.proc = subprocess.run([apftest.APF, "report", *cls.args, "-o",
                                   cls.out], capture_output=True, text=True,
                                  timeout=300)
        cls.score = subprocess.run([apftest.APF, "score", *cls.args,
                                    "--json"], capture_output=True, text=True,
                                   timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp_class, ignore_errors=True)

    def page(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        with open(self.out, encoding="utf-8") as f:
            text = f.read()
        return text, Page(text)

    def test_numbers_equal_apf_score_json(self):
        text, page = self.page()
        self.assertEqual(self.score.returncode, 0, self.score.stderr)
        score = json.loads(self.score.stdout)
        self.assertEqual(len(score["submissions"]), 11)
        self.check_against_score(page, score)

    def test_sections_figures_and_tables(self):
        text, page = self.page()
        score = json.loads(self.score.stdout)
        self.check_sections(page)
        self.check_figures(page, score)
        self.assertEqual(len(score["base_workloads"]) +
                         len(score["heldout_variants"]), 14)
        # The variants say whose variant they are.
        self.assertIn("held-out variant of criteo1tb", "".join(page.text))

    def test_small_and_self_contained(self):
        text, page = self.page()
        self.assertLess(os.path.getsize(self.out), 5 * 1000 * 1000)
        self.check_self_contained(text, page)
        # The warnings apf score prints are the page's too.
        warnings = json.loads(self.score.stdout)["warnings"]
        self.assertTrue(warnings)
        shown = "".join(page.text)
        for w in warnings[:5]:
            self.assertIn(w, shown)

    def test_algoperf_logs_are_not_verifiable_not_unverified(self):
        text, page = self.page()
        rows = page.body_rows(page.table("verification"))
        self.assertEqual(len(rows), 11)
        for r in rows:
            self.assertIn("not verifiable", r["cells"][1]["text"])
        self.assertNotIn("UNVERIFIED", "".join(page.text))

    def test_trial_numbers_are_the_scorers(self):
        text, page = self.page()
        trials = json.loads(page.scripts["apf-trials"])
        self.assertEqual(trials["columns"][:4],
                         ["submission", "workload", "study", "trial"])
        cols = trials["columns"]
        rows = [dict(zip(cols, r)) for r in trials["rows"]]
        self.assertGreater(len(rows), 1000)
        # Each study's best trial is the one apf-data's median rests on:
        # its time is the smallest under min-time, and for every study
        # exactly one trial is best where any trial met the target.
        by_study = {}
        for r in rows:
            by_study.setdefault((r["submission"], r["workload"], r["study"]),
                                []).append(r)
        for key, rs in by_study.items():
            best = [r for r in rs if r["best"]]
            met = [r for r in rs if r["time"] not in ("inf", "nan")]
            self.assertEqual(len(best), 1 if met else 0, key)


class HostileNames(ApfCase, PageChecks):
    """Names come from whoever made the logs: a submission directory named
    like markup, and a label, show as text and run nothing."""

    def test_names_are_escaped(self):
        with tarfile.open(os.path.join(DATA, "algoperf_v05.tar.xz")) as tar:
            members = [m for m in tar.getmembers()
                       if m.name.startswith("external_tuning/baseline/")
                       or m.name.startswith("scoring/")]
            if hasattr(tarfile, "data_filter"):
                tar.extractall(self.tmp, members=members, filter="data")
            else:
                tar.extractall(self.tmp, members=members)
        logs = self.path("logs")
        os.mkdir(logs)
        evil = '<img src=x onerror="alert(2)">&amp;'
        os.rename(self.path("external_tuning", "baseline"),
                  os.path.join(logs, evil))
        shutil.copytree(os.path.join(logs, evil), self.path("second"))
        out = self.path("page.html")
        r = self.ok("report", logs, self.path("second") + "=" + HOSTILE,
                    "--rules", "algoperf-0.5", "--targets",
                    self.path("scoring", "workload_targets_v05.json"),
                    "-o", out)
        self.assertEqual(r.out, out + "\n")
        with open(out, encoding="utf-8") as f:
            text = f.read()
        self.assertNotIn(HOSTILE, text)
        self.assertNotIn("<img", text)
        self.assertEqual(text.count("<script"), 4)  # 3 data blocks + the JS
        page = Page(text)
        shown = "".join(page.text)
        self.assertIn(HOSTILE, shown)
        self.assertIn(evil, shown)
        data = json.loads(page.scripts["apf-data"])
        self.assertEqual(sorted(s["name"] for s in data["submissions"]),
                         sorted([HOSTILE, evil]))
        for tag, name, value in page.attrs:
            self.assertFalse(name.startswith("on"), (tag, name, value))
        self.check_self_contained(text, page)


class UsageErrors(ApfCase):
    def test_output_is_required(self):
        self.fails(2, "report", self.tmp, match="-o FILE is required")

    def test_missing_input_writes_nothing(self):
        out = self.path("page.html")
        self.fails(2, "report", self.path("nothing"), "-o", out)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(self.tmp), ["home", "tmp"]
                         if os.path.exists(self.home) else ["tmp"])

    def test_unknown_rules(self):
        self.fails(2, "report", self.tmp, "--rules", "nope", "-o",
                   self.path("x.html"), match="unknown rules 'nope'")


class RealRun(ApfCase, PageChecks):
    """The page of a run made by `apf run`: unverified without --verify
    (marked on every plot and row), verified with it, with the entry's
    provenance, the run's environment and each trial's hyperparameters."""

    @classmethod
    def setUpClass(cls):
        if not sandbox_available():
            raise unittest.SkipTest("the kernel refuses user namespaces here")
        m = ApfCase("run")
        m.setUp()
        cls.maker = m
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        shutil.copytree(src, m.path("nadamw"))
        with open(m.path("nadamw", "submission.ini"), "a") as f:
            f.write("studies = 1\ntrials = 2\n")
        entry = m.path("nadamw.apf")
        m.ok("pack", m.path("nadamw"), "-w", apftest.BLOBS, "-o", entry)
        m.ok("run", entry, "-o", m.path("run"), "--threads", "2",
             "--allow-env-drift", "-q", timeout=300)
        cls.run_dir = m.path("run")
        cls.unverified = m.path("unverified.html")
        cls.verified = m.path("verified.html")
        m.ok("report", cls.run_dir, "-o", cls.unverified)
        m.ok("report", cls.run_dir, "--verify", "-o", cls.verified)
        # A copy whose CSV was edited after the run: it fails check 3.
        cls.tampered = m.path("tampered")
        shutil.copytree(cls.run_dir, cls.tampered)
        csv = os.path.join(cls.tampered, "study_0", apftest.BLOBS, "trial_1",
                           "eval_measurements.csv")
        with open(csv) as f:
            lines = f.read().splitlines(True)
        lines[1] = "1" + lines[1][1:] if lines[1][0] == "0" else \
            "0" + lines[1]
        with open(csv, "w") as f:
            f.writelines(lines)
        cls.mixed = m.path("mixed.html")
        m.ok("report", cls.run_dir, cls.tampered + "=edited", "--verify",
             "-o", cls.mixed)

    @classmethod
    def tearDownClass(cls):
        cls.maker.tearDown()

    def read(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return text, Page(text)

    def test_unverified_run_is_marked_on_every_plot_and_row(self):
        text, page = self.read(self.unverified)
        self.check_sections(page)
        plots = [s for s in page.svgs if "plot" in s["cls"].split()]
        self.assertTrue(plots)
        for s in plots:
            self.assertIn("UNVERIFIED: nadamw", "".join(s["texts"]), s["id"])
        for t in page.tables:
            for row in page.body_rows(t):
                if "data-sub" in row["attrs"]:
                    self.assertIn("UNVERIFIED", "".join(
                        c["text"] for c in row["cells"]), t["id"])
        self.assertEqual(json.loads(page.scripts["apf-verify"]), {})

    def test_numbers_equal_apf_score_json(self):
        for path, extra in ((self.unverified, []), (self.verified,
                                                     ["--verify"])):
            with self.subTest(page=os.path.basename(path)):
                r = self.maker.ok("score", self.run_dir, *extra, "--json")
                score = json.loads(r.out)
                text, page = self.read(path)
                self.check_against_score(page, score)
                self.check_figures(page, score)
                self.check_self_contained(text, page)

    def test_verified_run_shows_apf_verify_json(self):
        text, page = self.read(self.verified)
        v = json.loads(self.maker.ok("verify", self.run_dir, "--json").out)
        got = json.loads(page.scripts["apf-verify"])["nadamw"]
        for c in v["checks"]:
            c.pop("seconds")
        self.assertEqual(got, v)
        rows = page.body_rows(page.table("verification"))
        self.assertEqual(len(rows), 1)
        cells = rows[0]["cells"]
        self.assertEqual(cells[1]["text"], "verified")
        by_key = {c["attrs"]["data-key"]: int(c["text"]) for c in cells
                  if "data-key" in c["attrs"]}
        self.assertEqual(by_key, {"units": v["units"], "evals": v["evals"],
                                  "checkpoints": v["checkpoints"]})
        for c in v["checks"]:
            self.assertIn(f"{c['name']} {c['outcome']}", cells[-1]["text"])
        self.assertNotIn("UNVERIFIED", "".join(page.text))

    def test_score_report_is_the_report_page_from_one_verification(self):
        # apf score --report writes the page apf report writes for the same
        # inputs, from the scoring it prints: the same bytes, the same
        # verdicts (the tampered copy failing), the same numbers.
        page = self.maker.path("from-score.html")
        args = [self.run_dir, self.tampered + "=edited", "--verify"]
        r = self.maker.ok("score", *args, "--json", "--report", page, "--title", "t")
        self.maker.ok("report", *args, "--title", "t", "-o", self.maker.path("same.html"))
        with open(page, "rb") as a, open(self.maker.path("same.html"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        text, parsed = self.read(page)
        self.assertEqual(json.loads(parsed.scripts["apf-data"]), json.loads(r.out))
        self.assertEqual(json.loads(parsed.scripts["apf-verify"])["edited"]["verified"], False)
        bad = self.maker.apf("score", self.run_dir, "--title", "t")
        self.assertEqual(bad.rc, 2)
        self.assertEqual(bad.err, "apf: score: --title is for --report's page\n")

    def test_failed_run_is_marked_and_not_ranked(self):
        text, page = self.read(self.mixed)
        score = json.loads(self.maker.ok(
            "score", self.run_dir, self.tampered + "=edited", "--verify",
            "--json").out)
        self.assertEqual([x["name"] for x in score["excluded"]], ["edited"])
        self.check_against_score(page, score)
        why = score["excluded"][0]["reason"]
        self.assertIn("check 3 (timing)", why)
        rows = [r for r in page.body_rows(page.table("scores"))
                if r["attrs"].get("data-sub") == "edited"]
        self.assertEqual(len(rows), 1)
        shown = "".join(c["text"] for c in rows[0]["cells"])
        self.assertIn("FAILED verification", shown)
        self.assertIn("not ranked: " + why, shown)
        ver = {r["attrs"]["data-sub"]: r for r in
               page.body_rows(page.table("verification"))}
        self.assertEqual(set(ver), {"nadamw", "edited"})
        failed = "".join(c["text"] for c in ver["edited"]["cells"])
        self.assertIn("FAILED verification", failed)
        self.assertIn("timing failed", failed)
        v = json.loads(page.scripts["apf-verify"])
        self.assertFalse(v["edited"]["verified"])
        self.assertEqual(v["edited"]["exit_code"], 1)
        self.assertTrue(v["nadamw"]["verified"])

    def test_provenance_environment_and_hyperparameters(self):
        text, page = self.read(self.unverified)
        inspect = json.loads(self.maker.ok(
            "inspect", os.path.join(self.run_dir, "entry.apf"),
            "--json").out)
        pred = inspect["statement"]["predicate"]
        shown = "".join(page.text)
        sub = pred["submission"]
        tree = next(s for s in inspect["statement"]["subject"]
                    if s["name"] == "submission")["digest"]["sha256"]
        self.assertIn("sha256:" + tree, shown)
        self.assertIn(inspect["signature"]["keyid"], shown)
        self.assertIn(inspect["entry_sha256"], shown)
        self.assertIn(sub["ruleset"], shown)
        with open(os.path.join(self.run_dir, "run.json")) as f:
            run = json.load(f)
        env = run["environment"]
        self.assertIn(env["blas"]["config"], shown)
        self.assertIn(env["cpu"]["model"], shown)
        self.assertIn(run["runner"]["keyid"], shown)
        # One row per trial, with hparams.json's values, linked to the
        # trial's curve in the first view.
        for t in (1, 2):
            unit = os.path.join(self.run_dir, "study_0", apftest.BLOBS,
                                f"trial_{t}")
            with open(os.path.join(unit, "hparams.json")) as f:
                hp = json.load(f)
            row = next(r for tb in page.tables for r in tb["rows"]
                       if r["attrs"].get("id") == f"h0_k0_0_{t}")
            # Shown in 6 digits as apf plan prints them (a whole number
            # still written as a real), each cell's data-value the value
            # itself.
            cells = {c["text"]: c["attrs"].get("data-value")
                     for c in row["cells"]}
            reals = [v for v in hp.values() if isinstance(v, float)]
            self.assertTrue(reals)
            for v in reals:
                shown = f"{v:.6g}"
                if not any(ch in shown for ch in ".e"):
                    shown += ".0"
                self.assertIn(shown, cells)
                self.assertEqual(float(cells[shown]), v)
            curve = [p for s in page.svgs for p in s["paths"]
                     if f"k0_0_{t}" in (p.get("class") or "").split()]
            self.assertTrue(curve)

    def test_gpu_and_cuda_rows_are_words(self):
        # A run made where the CUDA toolkit is installed but no driver
        # (a build machine), and one with a GPU: the rows name each
        # library and device, never the record's raw JSON.
        d = self.maker.path("gpu")
        shutil.copytree(self.run_dir, d)
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
        env = run["environment"]
        env["gpus"] = [{"name": "NVIDIA H200", "memory_bytes": 150 << 30,
                        "compute_capability": "9.0"},
                       {"name": "NVIDIA H200", "memory_bytes": 150 << 30,
                        "compute_capability": None}]
        env["cuda"] = {"driver": None, "runtime": "13.0", "cublas": None,
                       "cudnn": "9.14.0"}
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(run, f)
        out = self.maker.path("gpu.html")
        self.maker.ok("report", d, "-o", out)
        rows = self.kv_rows(out)
        self.assertEqual(rows["GPU"], [
            "NVIDIA H200, 150.0 GiB, compute capability 9.0",
            "NVIDIA H200, 150.0 GiB, compute capability not known"])
        self.assertEqual(rows["CUDA"], [
            "driver not installed, runtime 13.0, cuBLAS not installed, "
            "cuDNN 9.14.0"])
        self.assertNotIn("GPUs", rows)
        # The run as made here: its GPUs (none on a machine without),
        # and the BLAS row's thread count in words that agree with it.
        rows = self.kv_rows(self.unverified)
        with open(os.path.join(self.run_dir, "run.json")) as f:
            env = json.load(f)["environment"]
        if not env["gpus"]:
            self.assertEqual(rows["GPUs"], ["none"])
        threads = env["blas"]["threads"]
        self.assertTrue(rows["BLAS"][0].endswith(
            f", {threads} thread{'' if threads == 1 else 's'}"),
            rows["BLAS"])

    def kv_rows(self, path):
        """The provenance tables' rows: heading -> the values shown."""
        text, page = self.read(path)
        rows = {}
        for t in page.tables:
            for r in t["rows"]:
                c = r["cells"]
                if len(c) == 2 and c[0]["tag"] == "th":
                    rows.setdefault(c[0]["text"], []).append(c[1]["text"])
        return rows

    def test_budget_and_target_are_drawn(self):
        text, page = self.read(self.unverified)
        plot = next(s for s in page.svgs if "plot" in s["cls"].split() and
                    any("target" in (p.get("class") or "") for p in
                        s["paths"]))
        kinds = {c for p in plot["paths"]
                 for c in (p.get("class") or "").split()}
        self.assertIn("budget", kinds)
        self.assertIn("target 0.9", "".join(plot["texts"]))
        self.assertIn("budget 6 s", "".join(plot["texts"]))


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Chromium(ApfCase):
    """Both pages open in headless Chromium from file:// without a console
    error; the screenshots are kept in build/report-artifacts/."""

    def browse(self, page, png):
        exe = chromium()
        if not exe:
            self.skipTest("chromium is not installed (apt-get install "
                          "chromium)")
        common = [exe, "--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking",
                  "--disable-component-update", "--no-first-run",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]
        url = "file://" + os.path.abspath(page)
        prof = tempfile.mkdtemp(prefix="chromium-", dir=self.tmp)
        try:
            dom = subprocess.run(common + ["--user-data-dir=" + prof,
                                           "--enable-logging=stderr", "--v=0",
                                           "--dump-dom", url],
                                 capture_output=True, text=True,
                                 timeout=180, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            self.skipTest(f"chromium cannot start here: {e}")
        if dom.returncode != 0 or "<html" not in dom.stdout:
            self.skipTest("chromium cannot start here: " +
                          dom.stderr.strip().splitlines()[-1:][0]
                          if dom.stderr.strip() else "no output")
        console = [l for l in dom.stderr.splitlines()
                   if "CONSOLE" in l or "Uncaught" in l]
        self.assertFalse([l for l in console if "Uncaught" in l or
                          "Error" in l], console)
        # The script ran: it chose the views (the first shown, the other
        # five hidden), and every plot is still there.
        after = Page(dom.stdout)
        self.assertTrue(after.views)
        self.assertEqual(sum(1 for v in after.views if not v[2]) * 6,
                         len(after.views))
        prof2 = tempfile.mkdtemp(prefix="chromium-", dir=self.tmp)
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = subprocess.run(common + ["--user-data-dir=" + prof2,
                                        "--screenshot=" + png,
                                        "--window-size=1280,2000", url],
                              capture_output=True, text=True, timeout=180,
                              errors="replace")
        self.assertEqual(shot.returncode, 0, shot.stderr[-2000:])
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(png), 10000)

    def test_v05_page_renders(self):
        with tarfile.open(os.path.join(DATA, "algoperf_v05.tar.xz")) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(self.tmp, filter="data")
            else:
                tar.extractall(self.tmp)
        out = self.path("v05.html")
        self.ok("report", self.path("external_tuning"), "--rules",
                "algoperf-0.5", "--targets",
                self.path("scoring", "workload_targets_v05.json"),
                "--heldout",
                self.path("scoring", "held_out_workloads_algoperf_v05.json"),
                "-o", out)
        self.browse(out, os.path.join(ARTIFACTS, "v05.png"))

    def test_run_page_renders(self):
        if not chromium():
            self.skipTest("chromium is not installed (apt-get install "
                          "chromium)")
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        shutil.copytree(src, self.path("nadamw"))
        with open(self.path("nadamw", "submission.ini"), "a") as f:
            f.write("studies = 1\ntrials = 2\n")
        self.ok("pack", self.path("nadamw"), "-w", apftest.BLOBS, "-o",
                self.path("nadamw.apf"))
        self.ok("run", self.path("nadamw.apf"), "-o", self.path("run"),
                "--threads", "2", "--allow-env-drift", "-q", timeout=300)
        out = self.path("run.html")
        self.ok("report", self.path("run"), "--verify", "-o", out)
        self.browse(out, os.path.join(ARTIFACTS, "run.png"))


if __name__ == "__main__":
    unittest.main()
