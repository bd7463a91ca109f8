"""docs/design.md against the code it describes: every package folder
under pkg/, every log event (manifests/log-events.schema.json and the
apf_rundir_events table of pkg/rundir/events.c) and every public command
of cmd/apf/main.c's table is named in it, and README.md links it.

It reads source files only: no apf binary is needed (apftest is not
imported), so it runs on a clone that has not been built. Each failure
names what the design leaves out; the checks' own readers are tested on
made-up text so that a reader that finds nothing cannot pass quietly."""
import json
import os
import re
import unittest

ROOT = os.environ.get("APF_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DESIGN = os.path.join(ROOT, "docs", "design.md")
SCHEMA = os.path.join(ROOT, "manifests", "log-events.schema.json")
EVENTS_C = os.path.join(ROOT, "pkg", "rundir", "events.c")
MAIN_C = os.path.join(ROOT, "cmd", "apf", "main.c")
README = os.path.join(ROOT, "README.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- what the code declares ---------------------------------------------------

def pkg_folders(root=ROOT):
    pkg = os.path.join(root, "pkg")
    return sorted(d for d in os.listdir(pkg)
                  if os.path.isdir(os.path.join(pkg, d)) and not d.startswith("."))


def schema_events(text):
    """The event names of the log-events schema: its event enum and the
    event of every if/then branch."""
    s = json.loads(text)
    names = set(s["properties"]["event"]["enum"])
    for branch in s.get("allOf", []):
        const = branch.get("if", {}).get("properties", {}).get("event", {}).get("const")
        if const:
            names.add(const)
    return sorted(names)


def table_events(text):
    """The names of the apf_rundir_events table in events.c:
    `[APF_EV_X] = {"name", f_x},` inside `apf_rundir_events[...] = { ... };`."""
    m = re.search(r"apf_rundir_events\s*\[[^\]]*\]\s*=\s*\{(.*?)\n\};", text, re.S)
    if not m:
        return []
    return sorted(set(re.findall(r'\[APF_EV_\w+\]\s*=\s*\{\s*"([a-z_]+)"', m.group(1))))


def public_commands(text):
    """The commands of main.c's table that have a summary (the hidden
    __build, __trial and __eval have NULL)."""
    m = re.search(r"struct apf_command commands\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    if not m:
        return []
    return [name for name, summary in
            re.findall(r'\{\s*"([^"]+)"\s*,\s*cmd_\w+\s*,\s*(NULL|")', m.group(1))
            if summary != "NULL"]


# ---- what the design names ------------------------------------------------------

def missing_folders(doc, folders):
    return [f"pkg/{d}" for d in folders
            if not re.search(rf"pkg/{re.escape(d)}(?![A-Za-z0-9_])", doc)]


def missing_events(doc, events):
    # Backticked: eval, build, warning and resume are ordinary words too.
    return [e for e in events if f"`{e}`" not in doc]


def missing_commands(doc, commands):
    return [f"apf {c}" for c in commands
            if not re.search(rf"apf {re.escape(c)}(?![A-Za-z0-9_-])", doc)]


def links_design(readme):
    return re.search(r"\]\((?:\./)?docs/design\.md(?:#[^)]*)?\)", readme) is not None


class DesignNamesTheCode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(DESIGN):
            raise AssertionError(f"{os.path.relpath(DESIGN, ROOT)}: missing")
        cls.doc = read(DESIGN)

    def test_every_pkg_folder_is_named(self):
        folders = pkg_folders()
        self.assertTrue(folders, "no folders found under pkg/")
        missing = missing_folders(self.doc, folders)
        self.assertEqual(missing, [], "docs/design.md does not name these "
                         "package folders: " + ", ".join(missing))

    def assert_all_named(self, names, source, missing_of, what):
        """names, read from source, are all in the design; an empty read
        fails too (the source's form has changed under the reader)."""
        self.assertTrue(names, f"nothing read from {source} (has its form changed?)")
        missing = missing_of(self.doc, names)
        self.assertEqual(missing, [], f"docs/design.md does not name these "
                         f"{what} of {source}: " + ", ".join(missing))

    def test_every_schema_event_is_named(self):
        self.assert_all_named(schema_events(read(SCHEMA)),
                              "manifests/log-events.schema.json", missing_events,
                              "log events")

    def test_every_event_table_entry_is_named(self):
        self.assert_all_named(table_events(read(EVENTS_C)),
                              "pkg/rundir/events.c's apf_rundir_events",
                              missing_events, "log events")

    def test_every_public_command_is_named(self):
        self.assert_all_named(public_commands(read(MAIN_C)),
                              "cmd/apf/main.c's table", missing_commands,
                              "commands")

    def test_readme_links_the_design(self):
        self.assertTrue(links_design(read(README)),
                        "README.md has no link to docs/design.md")

    def test_no_source_cites_the_old_shared_design(self):
        """Section numbers of the superseded DESIGN.md rot silently: the
        sources cite docs/design.md's."""
        cites = []
        for top in ["pkg", "cmd", "verify", "include", "tests", "workloads",
                    "scripts", "bench", "datagen"]:
            for d, _, files in os.walk(os.path.join(ROOT, top)):
                for name in files:
                    if not name.endswith((".c", ".h", ".cu", ".py", ".sh",
                                          ".md", ".ini")):
                        continue
                    path = os.path.join(d, name)
                    if os.path.samefile(path, __file__):
                        continue
                    with open(path, encoding="utf-8", errors="replace") as f:
                        for i, line in enumerate(f, 1):
                            if "DESIGN.md" in line:
                                cites.append(f"{os.path.relpath(path, ROOT)}:{i}")
        for name in ["Makefile", "README.md"]:
            for i, line in enumerate(read(os.path.join(ROOT, name)).splitlines(), 1):
                if "DESIGN.md" in line:
                    cites.append(f"{name}:{i}")
        self.assertEqual(cites, [], "these cite the old DESIGN.md, not "
                         "docs/design.md: " + ", ".join(cites))


class CheckersFindWhatIsMissing(unittest.TestCase):
    """The readers and checks above, on made-up text."""

    def test_folder_check_names_the_missing_folder(self):
        doc = "pkg/runner and pkg/rundir/events.c"
        self.assertEqual(missing_folders(doc, ["runner", "rundir", "run", "wire"]),
                         ["pkg/run", "pkg/wire"])

    def test_event_readers_and_check(self):
        schema = json.dumps({
            "properties": {"event": {"enum": ["run_start", "eval"]}},
            "allOf": [{"if": {"properties": {"event": {"const": "preempt"}}},
                       "then": {}}]})
        self.assertEqual(schema_events(schema), ["eval", "preempt", "run_start"])
        table = ('const struct apf_event_def apf_rundir_events[APF_EV_COUNT] = {\n'
                 '\t[APF_EV_RUN_START] = {"run_start", f_run_start},\n'
                 '\t[APF_EV_EVAL] = {"eval", f_eval},\n};\n')
        self.assertEqual(table_events(table), ["eval", "run_start"])
        self.assertEqual(missing_events("an eval, then `run_start`",
                                        ["eval", "run_start"]), ["eval"])

    def test_command_reader_and_check(self):
        main = ('static const struct apf_command commands[] = {\n'
                '\t{"run", cmd_run, "run an entry"},\n'
                '\t{"runs", cmd_runs, "hypothetical"},\n'
                '\t{"__trial", cmd_trial_internal, NULL},\n};\n')
        self.assertEqual(public_commands(main), ["run", "runs"])
        self.assertEqual(missing_commands("`apf run` only", ["run", "runs"]),
                         ["apf runs"])

    def test_link_check(self):
        self.assertTrue(links_design("see [the design](docs/design.md)."))
        self.assertFalse(links_design("see docs/design.md."))


if __name__ == "__main__":
    unittest.main()
