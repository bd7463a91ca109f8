#!/usr/bin/python3
"""Writes apf's man pages from the built binary's --help texts.

    scripts/gen-man.py --apf BUILD/apf --out BUILD/man
    (or: make man; make install puts them in $(PREFIX)/share/man/man1/)

apf(1) comes from `apf --help`, and apf-<command>(1) from `apf <command>
--help` for every command that list names (a command with subcommands, like
heldout, gets one page with a subsection per subcommand, from `apf heldout
<sub> --help`). Nothing is copied: the --help texts are the one source, read
by scripts/apfhelp.py, so a page cannot describe an option the parser lacks.

Why not help2man: it titles every page after the program it runs (apf), takes
one --help per page and needs a --version from each command, so
apf-<command> pages and the heldout subcommands would need a wrapper per
command and editing afterwards; the --help shape (cmd/apf/opts.c) is one
format, simple to read here.

The page date is $SOURCE_DATE_EPOCH when set, else the binary's mtime, so the
same binary gives the same pages. Pages in --out that no command makes any
more are removed.
"""
import argparse
import glob
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apfhelp  # noqa: E402


def esc(text):
    """Roff-escapes running text (no line may start a request)."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return text


def line(text):
    t = esc(text)
    if t.startswith((".", "'")):
        t = "\\&" + t
    return t


def paragraph(lines, out):
    """One --help paragraph: running lines filled, deeper-indented lines
    (a format, an example) kept as they are."""
    runs = []
    for ln in lines:
        pre = ln.startswith("    ")
        if runs and runs[-1][0] == pre:
            runs[-1][1].append(ln)
        else:
            runs.append((pre, [ln]))
    out.append(".PP")
    for pre, lns in runs:
        if pre:
            out += [".RS 4", ".nf"]
            out += [line(ln[4:]) for ln in lns]
            out += [".fi", ".RE"]
        else:
            out.append(line(" ".join(ln.strip() for ln in lns)))


def synopsis(s, out):
    words = s.split()
    cmd = []
    while words and re.fullmatch(r"[a-z][a-z0-9-]*", words[0]):
        cmd.append(words.pop(0))
    out.append(f".B apf {esc(' '.join(cmd))}")
    if words:
        out.append(line(" ".join(words)))


def options(h, out):
    for o in h.options:
        names = ", ".join(f"\\fB{esc(s)}\\fR" for s in o.spellings())
        arg = f" \\fI{esc(o.arg)}\\fR" if o.arg else ""
        out += [".TP", names + arg, line(o.help)]


def is_exit(para):
    return para[0].startswith("Exit ")


def see_also(texts, own):
    """apf(1) and the apf-<command>(1) pages that a text mentions."""
    pages = {"apf"}
    for t in texts:
        for m in re.finditer(r"\bapf ([a-z]+)\b", t):
            pages.add(f"apf-{m.group(1)}")
    pages.discard(own)
    return pages


def header(name, date, ver, out):
    out += [f'.TH {esc(name.upper())} 1 "{date}" "apf {ver}" "apf manual"',
            # no hyphenation, ragged right: option names and paths stay whole
            ".nh", ".ad l", ".SH NAME"]


def command_page(name, summary, helps, cmd_names, date, ver):
    h = helps[name]
    subs = [helps[f"{name} {s}"] for s in h.subcommands]
    out = []
    header(f"apf-{name}", date, ver, out)
    out.append(line(f"apf-{name} - {summary}"))
    out.append(".SH SYNOPSIS")
    syns = h.synopses
    for i, s in enumerate(syns):
        if i:
            out.append(".br")
        synopsis(s, out)
    out.append(".SH DESCRIPTION")
    seen = []
    exits = []
    for para in h.summary + h.details:
        if is_exit(para):
            exits.append(para)
            continue
        paragraph(para, out)
        seen.append(para)
    if h.options and not subs:
        out.append(".SH OPTIONS")
        options(h, out)
    if subs:
        out.append(".SH COMMANDS")
        for sh in subs:
            out.append(f'.SS "apf {esc(" ".join(sh.path))}"')
            for s in sh.synopses:
                out.append(".PP")
                synopsis(s, out)
            for para in sh.summary + sh.details:
                if para in seen:  # the method the parent's help gave already
                    continue
                if is_exit(para):
                    exits.append(para)
                    continue
                paragraph(para, out)
                seen.append(para)
            if sh.options:
                out.append(".PP")
                out.append("Options:")
                options(sh, out)
    examples = h.examples + [e for sh in subs for e in sh.examples]
    if examples:
        out += [".SH EXAMPLES", ".RS 4", ".nf"]
        out += [line(e) for e in examples]
        out += [".fi", ".RE"]
    if exits:
        out.append(".SH EXIT STATUS")
        for para in exits:
            paragraph(para, out)
    texts = [h.text] + [s.text for s in subs]
    pages = sorted(p for p in see_also(texts, f"apf-{name}")
                   if p == "apf" or p[4:] in cmd_names)
    out.append(".SH SEE ALSO")
    out.append(",\n".join(f".BR {p} (1)" for p in pages))
    return "\n".join(out) + "\n"


def main_page(text, cmds, date, ver):
    lines = text.rstrip("\n").split("\n")
    usage = lines[0][len("usage: "):]
    paras, para = [], []
    commands_at = None
    for ln in lines[1:]:
        if ln == "commands:":
            commands_at = len(paras) + (1 if para else 0)
        if not ln.strip() or ln == "commands:":
            if para:
                paras.append(para)
            para = []
            continue
        if commands_at is not None and len(paras) == commands_at and \
                re.match(r"^  \S", ln):
            continue  # the command list itself, written below as a table
        para.append(ln)
    if para:
        paras.append(para)
    out = []
    header("apf", date, ver, out)
    first = " ".join(p.strip() for p in paras[0]) if paras else ""
    out.append(line("apf - " + re.sub(r"^apf ", "", first).rstrip(".")))
    out.append(".SH SYNOPSIS")
    words = usage.split()
    out.append(f".B {esc(words[0])}")
    out.append(line(" ".join(words[1:])))
    out.append(".SH DESCRIPTION")
    for p in paras[:commands_at]:
        paragraph(p, out)
    out.append(".SH COMMANDS")
    for name, summary in cmds:
        out += [".TP", f"\\fB{esc(name)}\\fR",
                f"{line(summary)} (\\fBapf\\-{esc(name)}\\fR(1))"]
    for p in paras[commands_at:]:
        paragraph(p, out)
    out.append(".SH SEE ALSO")
    out.append(",\n".join(f".BR apf\\-{esc(n)} (1)" for n, _ in cmds))
    return "\n".join(out) + "\n"


def page_date(apf):
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    t = int(sde) if sde and sde.isdigit() else int(os.stat(apf).st_mtime)
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apf", required=True, help="the built apf binary")
    ap.add_argument("--out", required=True, help="the directory for the pages")
    a = ap.parse_args()
    try:
        text, cmds = apfhelp.commands(a.apf)
        helps = apfhelp.command_helps(a.apf)
        date, ver = page_date(a.apf), apfhelp.version(a.apf)
        names = {n for n, _ in cmds}
        pages = {"apf.1": main_page(text, cmds, date, ver)}
        for name, summary in cmds:
            pages[f"apf-{name}.1"] = command_page(name, summary, helps, names,
                                                  date, ver)
        os.makedirs(a.out, exist_ok=True)
        for fn, page in pages.items():
            apfhelp.write_atomic(os.path.join(a.out, fn), page)
        for old in glob.glob(os.path.join(a.out, "apf*.1")):
            if os.path.basename(old) not in pages:
                os.unlink(old)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"apf: gen-man: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
