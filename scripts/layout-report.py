#!/usr/bin/python3
"""What the code's layout costs an auditor, in lines (verify/README).

    scripts/layout-report.py [--build DIR]      (or: make layout-report)

Needs DIR/tests/layout/verify_only.map, which `make BUILD=DIR layout-tests`
writes when it links the verifier's link check (tests/layout/verify_only.c)
against DIR/libapf-verify.a alone. Prints:

(a) The lines an auditor must read to trust `apf verify`: the sources whose
    objects that link pulls in (verify.h's API and the evaluator's main,
    which --reeval and --replay start) - the map's "Archive member included"
    section, whose members are full paths (libapf-verify.a is a thin
    archive), so workloads/fmnist_cnn/model.o and workloads/fmnist_mlp/
    model.o stay apart - by folder, then by file, and the repository
    headers those objects were compiled from (their -MMD .d files). Lines
    are `wc -l` lines: comments and blank lines included, since an auditor
    reads those too. Also the members the link check allows that nothing
    reached, and apf verify's command-line layer (cmd/apf, a fixed list).
(b) The 8 longest functions of pkg/runner/*.c and of pkg/sandbox/*.c (the
    supervisor's and the sandbox's, where a long function hides most),
    from the signature's first line to the closing brace (this code's
    style: a function body opens with "{" alone at column 0 and closes
    with "}" alone at column 0;
    checked once against universal-ctags' end: field, same answer on every
    .c file).
(c) How many places implement each of three concepts that must not drift
    apart (STYLE.md), counted by grep over pkg/, verify/, cmd/, workloads/
    and include/ (not tests/), comments left out:
      unit directory names built   string literals containing "study_%"
      eval_measurements.csv parsed functions that compare a byte with ','
                                   (a CSV field splitter) in a file that
                                   says "csv" (a CSV reader, not a list
                                   splitter such as config.c's)
      heldout.json parsed          functions that read the draw list:
                                   json_object_get(<x>, "draws"), the
                                   member only a held-out draw file has
    and the functions that call each parser (its users).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCAN = ("pkg", "verify", "cmd", "workloads", "include")
# `apf verify`'s own command: the dispatcher, the shared option parser, the
# command, their header (the hidden __eval is one line of cmd/apf/run.c).
CLI = ("cmd/apf/main.c", "cmd/apf/opts.c", "cmd/apf/verify.c", "cmd/apf/cmd.h")


def lines_of(path):
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def rel(path):
    return os.path.relpath(path, ROOT)


# ---- (a) the link map ---------------------------------------------------------

def map_members(map_path):
    """[(member path, referencing file, symbol)] of the map's first
    section ("Archive member included to satisfy reference by file
    (symbol)"): a member at column 0, then its reason on the same line or,
    when the path is long, indented on the next; a blank line ends it."""
    with open(map_path, errors="replace") as f:
        lines = f.read().split("\n")
    try:
        i = next(k for k, l in enumerate(lines)
                 if l.startswith("Archive member included")) + 1
    except StopIteration:
        return []
    while i < len(lines) and not lines[i].strip():
        i += 1
    out = []
    while i < len(lines) and lines[i].strip():
        parts = lines[i].split(None, 1)
        if len(parts) == 1 and i + 1 < len(lines) and lines[i + 1][:1].isspace():
            i += 1
            parts.append(lines[i].strip())
        member, why = parts[0], parts[1] if len(parts) > 1 else ""
        m = re.match(r"(\S+) \((.*)\)$", why)
        out.append((member, m.group(1) if m else why, m.group(2) if m else ""))
        i += 1
    return out


def source_of(obj, build):
    """build/obj/pkg/x/y.o -> pkg/x/y.c (or .cu); build/obj/version.o ->
    build/gen/version.c."""
    objdir = os.path.join(build, "obj")
    r = os.path.relpath(obj, objdir)
    base = r[:-2]
    for ext in (".c", ".cu"):
        if os.path.exists(os.path.join(ROOT, base + ext)):
            return base + ext
    gen = os.path.join(build, "gen", base + ".c")
    if os.path.exists(gen):
        return rel(gen)
    return None


def headers_of(obj):
    """The repository headers a .d file lists for its object."""
    d = obj[:-2] + ".d"
    if not os.path.exists(d):
        return []
    with open(d) as f:
        text = f.read().replace("\\\n", " ")
    first = text.split("\n", 1)[0]
    deps = first.split(":", 1)[1].split() if ":" in first else []
    out = []
    for p in deps:
        full = os.path.normpath(os.path.join(ROOT, p))
        if full.endswith(".h") and full.startswith(ROOT + os.sep) and \
                os.path.exists(full):
            out.append(rel(full))
    return out


def folder(path):
    if path.startswith("build/") or "/gen/" in path:
        return "(generated)"
    parts = path.split("/")
    if parts[0] in ("pkg", "workloads", "include") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else "."


def report_link(build):
    map_path = os.path.join(build, "tests", "layout", "verify_only.map")
    lib = os.path.join(build, "libapf-verify.a")
    if not os.path.exists(map_path):
        sys.exit(f"apf: layout-report: {rel(map_path)}: missing "
                 f"(run make BUILD={rel(build)} layout-tests)")
    members = map_members(map_path)
    sources, headers, why, system, unknown = {}, {}, {}, [], []
    for member, by, sym in members:
        obj = os.path.normpath(os.path.join(ROOT, member))
        if not obj.startswith(build + os.sep):
            system.append(f"{member} ({sym})")  # libgcc's, libc's
            continue
        src = source_of(obj, build)
        if src is None:
            unknown.append(member)
            continue
        sources[src] = lines_of(os.path.join(ROOT, src))
        byobj = os.path.normpath(os.path.join(ROOT, by))
        bysrc = source_of(byobj, build) or rel(byobj)
        why.setdefault(src, (sym, bysrc))
        for h in headers_of(obj):
            headers[h] = lines_of(os.path.join(ROOT, h))
    # The members the link check allows (libapf-verify.a's) that nothing
    # the verifier calls reached.
    allowed = []
    if os.path.exists(lib):
        p = subprocess.run(["ar", "t", lib], capture_output=True, text=True)
        for m in p.stdout.split():
            obj = os.path.normpath(os.path.join(os.path.dirname(lib), m))
            src = source_of(obj, build)
            if src and src not in sources:
                allowed.append(src)

    print(f"(a) what an auditor reads to trust `apf verify`: the sources "
          f"whose objects tests/layout/verify_only links\n    from "
          f"{rel(lib)} ({rel(map_path)}), and the headers they include")
    by_folder = {}
    for s, n in sources.items():
        f = by_folder.setdefault(folder(s), [0, 0, 0])
        f[0] += 1
        f[1] += n
    for h, n in headers.items():
        by_folder.setdefault(folder(h), [0, 0, 0])[2] += n
    print(f"    {'folder':<22}{'.c files':>9}{'.c lines':>10}{'.h lines':>10}")
    for f in sorted(by_folder, key=lambda k: (k != "verify", k)):
        nf, nc, nh = by_folder[f]
        print(f"    {f:<22}{nf:>9}{nc:>10}{nh:>10}")
    tc, th = sum(sources.values()), sum(headers.values())
    print(f"    {'total':<22}{len(sources):>9}{tc:>10}{th:>10}"
          f"   = {tc + th} lines ({len(sources)} sources, "
          f"{len(headers)} headers)")
    print("    by file (lines, source, first reached for):")
    for s in sorted(sources, key=lambda k: (folder(k) != "verify", k)):
        sym, by = why[s]
        print(f"    {sources[s]:>6}  {s:<32} {sym} from {by}")
    for h in sorted(headers, key=lambda k: (folder(k) != "verify", k)):
        print(f"    {headers[h]:>6}  {h}")
    if allowed:
        print(f"    allowed by the link check but reached by nothing the "
              f"verifier calls ({len(allowed)}): {', '.join(sorted(allowed))}")
    cli = [(lines_of(os.path.join(ROOT, c)), c) for c in CLI
           if os.path.exists(os.path.join(ROOT, c))]
    print(f"    and the command around it (not in the link check): "
          + ", ".join(f"{c} {n}" for n, c in cli)
          + f" = {sum(n for n, _ in cli)} lines")
    if system:
        print(f"    and from the system's static libraries: {', '.join(system)}")
    for m in unknown:
        print(f"    (no source found for member {m}: counted nowhere)")
    return tc + th


# ---- (b) functions ----------------------------------------------------------

CALLEE = re.compile(r"([A-Za-z_]\w*)\s*$")
ATTR = re.compile(r"__attribute__\s*\(\(.*?\)\)")


def functions(path):
    """[(name, first line, last line)] of path's function definitions."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].rstrip() != "{":
            i += 1
            continue
        j = i - 1
        while j > 0 and lines[j][:1] in (" ", "\t"):
            j -= 1
        sig = ATTR.sub("", " ".join(l.strip() for l in lines[j:i]))
        k = i + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        m = CALLEE.search(sig.split("(", 1)[0]) if "(" in sig else None
        if m:
            out.append((m.group(1), j + 1, k + 1))
        i = k + 1
    return out


def enclosing(path, line, cache={}):
    if path not in cache:
        cache[path] = functions(os.path.join(ROOT, path))
    for name, a, b in cache[path]:
        if a <= line <= b:
            return name
    return "(file scope)"


def report_functions(folder, n=8):
    rows = []
    d = os.path.join(ROOT, folder)
    for f in sorted(os.listdir(d)):
        if f.endswith(".c"):
            p = os.path.join(folder, f)
            for name, a, b in functions(os.path.join(ROOT, p)):
                rows.append((b - a + 1, p, a, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    print(f"\n(b) the {n} longest functions of {folder}/*.c "
          f"(lines, file:line, name)")
    for length, p, a, name in rows[:n]:
        print(f"    {length:>6}  {p + ':' + str(a):<30} {name}")


# ---- (c) places -------------------------------------------------------------

def code_lines(path):
    """(line number, text) of path with comments blanked out (string
    literals kept)."""
    with open(os.path.join(ROOT, path), errors="replace") as f:
        text = f.read()
    out, i, n, in_block = [], 0, len(text), False
    buf, line = [], 1
    state = None  # None, '"', "'"
    while i < n:
        c = text[i]
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
                continue
            if c == "\n":
                out.append((line, "".join(buf)))
                buf, line = [], line + 1
            i += 1
            continue
        if state:
            buf.append(c)
            if c == "\\" and i + 1 < n:
                buf.append(text[i + 1])
                i += 2
                continue
            if c == state or c == "\n":
                state = None
            if c == "\n":
                out.append((line, "".join(buf[:-1])))
                buf, line = [], line + 1
            i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            state = c
        if c == "\n":
            out.append((line, "".join(buf)))
            buf, line = [], line + 1
        else:
            buf.append(c)
        i += 1
    out.append((line, "".join(buf)))
    return out


def c_files():
    for top in SCAN:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu")):
                    yield rel(os.path.join(dirpath, f))


UNIT_NAME = re.compile(r'"[^"]*study_%')
CSV_SPLIT = re.compile(r"[!=]=\s*','|case\s+','")
DRAWS = re.compile(r'json_object_get\s*\([^;]*?"draws"\s*\)')


def places():
    """{concept: [(file, line, function)]}."""
    found = {"unit": [], "csv": [], "heldout": []}
    for p in c_files():
        says_csv = "csv" in p.lower()
        lines = code_lines(p)
        if not says_csv:
            with open(os.path.join(ROOT, p), errors="replace") as f:
                says_csv = "csv" in f.read().lower()
        for n, text in lines:
            if UNIT_NAME.search(text):
                found["unit"].append((p, n, enclosing(p, n)))
            if says_csv and CSV_SPLIT.search(text):
                found["csv"].append((p, n, enclosing(p, n)))
            if DRAWS.search(text):
                found["heldout"].append((p, n, enclosing(p, n)))
    return found


def callers(name_re):
    """(file, function) pairs whose code calls a function matching name_re."""
    call = re.compile(r"\b(" + name_re + r")\s*\(")
    out = set()
    for p in c_files():
        if p.endswith(".h"):
            continue
        for n, text in code_lines(p):
            for m in call.finditer(text):
                fn = enclosing(p, n)
                if fn != m.group(1):
                    out.add((p, fn, m.group(1)))
    return sorted(out)


def exported_entry(path, func):
    """The apf_ function(s) of path that reach func within the file (the
    parser's entry points), by following calls inside the file."""
    fns = functions(os.path.join(ROOT, path))
    body = {}
    lines = code_lines(path)
    for name, a, b in fns:
        body[name] = " ".join(t for n, t in lines if a <= n <= b)
    reach = {func}
    changed = True
    while changed:
        changed = False
        for name, text in body.items():
            if name not in reach and any(
                    re.search(r"\b" + re.escape(r) + r"\s*\(", text)
                    for r in reach):
                reach.add(name)
                changed = True
    return sorted(r for r in reach if r.startswith("apf_"))


def report_places():
    found = places()
    print("\n(c) places that implement each concept (grep over "
          f"{', '.join(s + '/' for s in SCAN)}; comments left out)")
    titles = {
        "unit": ('unit directory names built', 'string literals with "study_%"'),
        "csv": ("eval_measurements.csv parsed",
                "functions comparing a byte with ',' in a file that says csv"),
        "heldout": ("heldout.json parsed",
                    'functions reading json_object_get(..., "draws")'),
    }
    for key in ("unit", "csv", "heldout"):
        hits = found[key]
        fns = sorted({(p, fn) for p, _, fn in hits})
        what, how = titles[key]
        nfiles = len({p for p, _ in fns})
        where = (f"{len(fns)} function{'s' if len(fns) != 1 else ''} of "
                 f"{nfiles} file{'s' if nfiles != 1 else ''}")
        if key == "unit":
            where = f"{len(hits)} literal{'s' if len(hits) != 1 else ''} in " + where
        print(f"    {what}: {where}  ({how})")
        for p, fn in fns:
            at = ", ".join(str(n) for q, n, f in hits if q == p and f == fn)
            entries = exported_entry(p, fn)
            users = callers("|".join(map(re.escape, entries))) if entries else []
            users = [u for u in users if u[0] != p]
            print(f"      {p}:{at}  {fn}"
                  + (f"  (entry: {', '.join(entries)}; used by "
                     f"{', '.join(f'{q}:{f}' for q, f, _ in users) or 'nothing outside its file'})"
                     if entries and entries != [fn] or users else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    build = os.path.abspath(os.path.join(ROOT, args.build))
    report_link(build)
    report_functions("pkg/runner")
    report_functions("pkg/sandbox")
    report_places()
    print("\n(regenerate: make BUILD=<dir> layout-report, or make BUILD=<dir> "
          "layout-tests; scripts/layout-report.py --build <dir>)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
