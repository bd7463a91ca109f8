#!/usr/bin/python3
"""Fails when libapf.a exports a symbol it should not.

Every global (defined, non-static) symbol of the installed library is part
of the namespace of whoever links it. STYLE.md has public symbols start
with `apf_` and everything else `static`; a function the files of one
package share (declared APF_INTERNAL in its internal header) is made local
when the package is linked into the library (Makefile: `ld -r`, `objcopy
--localize-hidden`). Reads `nm -A -g --defined-only ARCHIVE` and checks:

- every global starts with apf_;
- with --list FILE (pkg/libapf.exports for the real library), the globals
  are exactly the names FILE lists: one exported and not listed is an
  internal function that escaped (or a new API nobody decided on), one
  listed and not exported was removed or hidden without the list saying so.

Each offender is named by the object under OBJDIR (default: the archive's
folder's obj/) that defines it: an archive member's name is only its
basename (two workloads/*/model.o, two */main.o), or a package's
relocatable object (pkg.runner.o).

    scripts/exported-symbols.py [--list FILE] [ARCHIVE [OBJDIR]]
        (default build/libapf.a)
    scripts/exported-symbols.py --write FILE [ARCHIVE]
        writes the archive's globals as the list (after a reviewed change)

Exit 0 with a count, 1 listing the offenders by object file, 2 when nm
fails or the list cannot be read.
"""
import os
import subprocess
import sys

PREFIX = "apf_"
# AddressSanitizer's one-definition-rule indicator for a global variable X
# (gcc: __odr_asan.X, clang: __odr_asan_gen_X) is X's, not a name of its own:
# `make check` builds libapf.a with it.
INDICATORS = ("__odr_asan.", "__odr_asan_gen_")
LIST_HEAD = """\
# The symbols libapf.a exports: its packages' APIs (pkg/*/*.h but the
# internal headers, verify/verify.h), one name a line. Anything else a
# package defines is static, or APF_INTERNAL and made local in the archive.
# tests/layout/test_layout.py holds the built library to this list; after a
# change that adds or removes an API, rewrite it with
#     scripts/exported-symbols.py --write pkg/libapf.exports build/libapf.a
# and review the difference.
"""


def owner(name):
    for p in INDICATORS:
        if name.startswith(p):
            return name[len(p):]
    return name


def defined_globals(path):
    """[(member, type, symbol)] from nm; member is None for an object."""
    p = subprocess.run(["nm", "-A", "-g", "--defined-only", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise OSError(f"nm {path}: {p.stderr.strip()}")
    out = []
    for line in p.stdout.splitlines():
        # "lib.a:member.o:0000000000000000 T name" or "obj.o:0000 T name"
        # (a common symbol has no address column before its size)
        head, _, rest = line.rpartition(":")
        fields = rest.split()
        if len(fields) < 2:
            continue
        member = head.rsplit(":", 1)[-1] if path.endswith(".a") else None
        out.append((member, fields[-2], fields[-1]))
    return out


def read_list(path):
    names = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def locate(bad, objdir, archive):
    """{object: [entries]} for bad = {member: [(name, entry)]}: the objects
    under objdir with the member's basename that define each name, else any
    object there that does (a package's relocatable object), else the
    member itself."""
    objs = {}
    for dirpath, _, files in os.walk(objdir):
        for f in files:
            if f.endswith(".o"):
                objs.setdefault(f, []).append(os.path.join(dirpath, f))
    cache = {}

    def defined_in(path):
        if path not in cache:
            try:
                cache[path] = {s for _, _, s in defined_globals(path)}
            except OSError:
                cache[path] = set()
        return cache[path]

    every = sorted(p for v in objs.values() for p in v)
    by_obj = {}
    for member, items in bad.items():
        for name, entry in items:
            where = [p for p in sorted(objs.get(member, []))
                     if name in defined_in(p)]
            if not where:
                where = [p for p in every if name in defined_in(p)][:1]
            key = (os.path.relpath(where[0], objdir) if where
                   else f"{member} (member of {archive})")
            by_obj.setdefault(key, []).append(entry)
    return by_obj


def report(by_obj, head):
    print(head)
    for obj in sorted(by_obj):
        print(f"  {obj}: {', '.join(sorted(set(by_obj[obj])))}")


def main(argv):
    args = argv[1:]
    listed = write = None
    if len(args) >= 2 and args[0] in ("--list", "--write"):
        listed, write = (args[1], None) if args[0] == "--list" else (None, args[1])
        args = args[2:]
    archive = args[0] if args else "build/libapf.a"
    objdir = args[1] if len(args) > 1 else os.path.join(
        os.path.dirname(archive) or ".", "obj")
    try:
        syms = defined_globals(archive)
        want = read_list(listed) if listed else None
    except OSError as e:
        print(f"apf: exported-symbols: {e}", file=sys.stderr)
        return 2
    names = {owner(n) for _, _, n in syms}
    if write:
        tmp = write + ".tmp"
        with open(tmp, "w") as f:
            f.write(LIST_HEAD + "".join(n + "\n" for n in sorted(names)))
        os.replace(tmp, write)
        print(f"{write}: {len(names)} symbols")
        return 0
    bad = {}
    for member, kind, name in syms:
        if not owner(name).startswith(PREFIX):
            bad.setdefault(member, []).append((name, f"{name} ({kind})"))
    if bad:
        by_obj = locate(bad, objdir, archive)
        n = sum(len(set(v)) for v in by_obj.values())
        report(by_obj, f"{archive}: {n} global symbol{'s' if n != 1 else ''} "
               f"without the {PREFIX} prefix (make them static, or name "
               f"them {PREFIX}<noun>_<verb>):")
        return 1
    if want is not None:
        extra = {}
        for member, kind, name in syms:
            if owner(name) not in want:
                extra.setdefault(member, []).append((name, f"{name} ({kind})"))
        missing = sorted(want - names)
        if extra:
            by_obj = locate(extra, objdir, archive)
            n = sum(len(set(v)) for v in by_obj.values())
            report(by_obj, f"{archive}: {n} global symbol"
                   f"{'s' if n != 1 else ''} not in {listed} (make them "
                   f"static or APF_INTERNAL, or add them to the list if "
                   f"they are meant as an API):")
        if missing:
            print(f"{archive}: {len(missing)} symbol"
                  f"{'s' if len(missing) != 1 else ''} {listed} lists but "
                  f"the library does not export (take them off the list): "
                  f"{', '.join(missing)}")
        if extra or missing:
            return 1
        print(f"{archive}: its {len(names)} global symbols are the ones "
              f"{listed} lists")
        return 0
    print(f"{archive}: all {len(names)} global symbols are {PREFIX} names")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
