"""apf's --help texts, read into a structure: what scripts/gen-man.py and
scripts/gen-completion.py (and tests/e2e/test_docs.py) build from.

The texts come from the built binary (`apf --help`, `apf <command> --help`,
`apf <command> <sub> --help`), never from a copy, so a man page or a
completion cannot drift from the options the parser takes. The shape read is
the one cmd/apf/opts.c prints:

    usage: apf <synopsis>            (more "       apf ..." lines: subcommands;
           <continuation>             deeper-indented lines continue one)

    <summary paragraphs>

    options:
      -w, --workloads W[,W...]   help text
          --json                 help text

    <detail paragraphs>

    examples:
      apf pack submissions/baselines/nadamw -w fmnist_mlp -o nadamw.apf

and `apf --help`'s "commands:" list of "  <name>  <summary>" lines.
"""
import os
import re
import subprocess

# "  -w, --workloads W[,W...]   help" or "      --json   help". The
# argument has no spaces; a flag's name is followed by two or more spaces.
OPTION_RE = re.compile(r"^  (?:-(\w), |    )--([A-Za-z0-9][\w-]*)(?: (\S+))?(?: +(.*))?$")


class Option:
    def __init__(self, short, name, arg, help):
        self.short, self.name, self.arg, self.help = short, name, arg, help

    def spellings(self):
        """Every way to write the option: ['-w', '--workloads']."""
        return ([f"-{self.short}"] if self.short else []) + [f"--{self.name}"]


class Help:
    """One command's --help: synopses, paragraphs around the options, the
    options, and (for a command with subcommands) their names."""

    def __init__(self, path, text):
        self.path = path          # ["pack"] or ["heldout", "draw"]
        self.text = text
        self.synopses = []        # "pack SUBMISSION_DIR -w ..." (after "apf ")
        self.summary = []         # paragraphs: lists of lines as printed
        self.details = []
        self.options = []
        self.subcommands = []
        self.examples = []        # command lines, as printed under "examples:"
        self._parse(text)

    def _parse(self, text):
        lines = text.rstrip("\n").split("\n")
        if not lines or not lines[0].startswith("usage: apf "):
            raise ValueError(f"apf {' '.join(self.path)} --help: no 'usage: apf' line")
        i = 0
        while i < len(lines) and lines[i].strip():
            line = lines[i]
            m = re.match(r"^(?:usage: |\s+)apf (.*)$", line)
            if m:
                self.synopses.append(m.group(1).strip())
            elif self.synopses:
                self.synopses[-1] += " " + line.strip()
            i += 1
        rest = lines[i:]
        where = self.summary
        para = []
        in_options = False

        def flush():
            if para:
                where.append(list(para))
                para.clear()

        in_examples = False
        for line in rest:
            if line == "examples:":
                flush()
                in_examples = True
                continue
            if in_examples:
                if line.startswith("  ") and line.strip():
                    self.examples.append(line[2:])
                    continue
                in_examples = False
                if not line.strip():
                    continue
            if line == "options:":
                flush()
                in_options = True
                continue
            if in_options:
                if not line.strip():
                    in_options = False
                    where = self.details
                    continue
                m = OPTION_RE.match(line)
                if m:
                    self.options.append(Option(m.group(1), m.group(2), m.group(3),
                                               (m.group(4) or "").strip()))
                elif self.options and line.startswith("        "):
                    # a wrapped help text continues the option above
                    o = self.options[-1]
                    o.help = (o.help + " " + line.strip()).strip()
                else:
                    raise ValueError(f"apf {' '.join(self.path)} --help: "
                                     f"unreadable option line {line!r}")
                continue
            if not line.strip():
                flush()
            else:
                para.append(line)
        flush()
        if len(self.path) == 1:
            for s in self.synopses:
                words = s.split()
                if (len(words) > 1 and words[0] == self.path[0]
                        and re.fullmatch(r"[a-z][a-z0-9-]*", words[1])):
                    if words[1] not in self.subcommands:
                        self.subcommands.append(words[1])

    def option(self, spelling):
        for o in self.options:
            if spelling in o.spellings():
                return o
        return None

    def positionals(self):
        """The synopses' positional placeholders, in order, as (token,
        repeats): ("ENTRY.apf|RUN_DIR", False), ("ENTRY.apf", True). The
        first synopsis counts (a subcommand's own help has one)."""
        if not self.synopses:
            return []
        # an optional suffix of a word ("RUN_DIR[=LABEL]") is part of it
        syn = re.sub(r"(?<=[^\s\[])\[[^\[\]\s]*\]", "", self.synopses[0])
        words = syn.replace("[", " ").replace("]", " ").split()
        words = words[len(self.path):]
        out = []
        skip = False
        for w in words:
            if skip:
                skip = False
                continue
            if w.startswith("-"):
                o = self.option(w.split("=")[0])
                skip = bool(o and o.arg)
                continue
            if w == "...":
                if out:
                    out[-1] = (out[-1][0], True)
                continue
            if not re.search(r"[A-Z]", w):
                continue
            rep = w.endswith("...")
            out.append((w[:-3] if rep else w, rep))
        return out


def run_help(apf, args):
    env = dict(os.environ, LC_ALL="C")
    p = subprocess.run([apf, *args, "--help"], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{apf} {' '.join(args)} --help: exit {p.returncode}: "
                           f"{p.stderr.strip()}")
    return p.stdout


def commands(apf):
    """[(name, summary)] from `apf --help`'s "commands:" list."""
    text = run_help(apf, [])
    out = []
    inside = False
    for line in text.split("\n"):
        if line == "commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+) +(.*)$", line)
            if not m:
                break
            out.append((m.group(1), m.group(2).strip()))
    if not out:
        raise ValueError("apf --help: no commands: list")
    return text, out


def command_helps(apf):
    """{"pack": Help, "heldout": Help, "heldout draw": Help, ...} for every
    public command and subcommand."""
    _, cmds = commands(apf)
    helps = {}
    for name, _ in cmds:
        h = Help([name], run_help(apf, [name]))
        helps[name] = h
        for sub in h.subcommands:
            helps[f"{name} {sub}"] = Help([name, sub], run_help(apf, [name, sub]))
    return helps


def version(apf):
    p = subprocess.run([apf, "--version"], capture_output=True, text=True)
    words = p.stdout.split()
    return words[1] if p.returncode == 0 and len(words) > 1 else "unknown"


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
