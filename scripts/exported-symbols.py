#!/usr/bin/python3
"""Fails when libapf.a exports a symbol without the apf_ prefix.

Every global (defined, non-static) symbol of the installed library is part
of the namespace of whoever links it: STYLE.md has public symbols start with
`apf_` and everything else `static`. Reads `nm -A -g --defined-only ARCHIVE`
and names each offender by the object that defines it; an archive member's
name is only its basename (two workloads/*/model.o, two */main.o), so the
objects under OBJDIR (default: the archive's folder's obj/) say which
source it came from.

    scripts/exported-symbols.py [ARCHIVE [OBJDIR]]   (default build/libapf.a)

Exit 0 with a count, 1 listing the offenders by object file, 2 when nm
fails.
"""
import os
import subprocess
import sys

PREFIX = "apf_"
# AddressSanitizer's one-definition-rule indicator for a global variable X
# (gcc: __odr_asan.X, clang: __odr_asan_gen_X) is X's, not a name of its own:
# `make check` builds libapf.a with it.
INDICATORS = ("__odr_asan.", "__odr_asan_gen_")


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


def main(argv):
    archive = argv[1] if len(argv) > 1 else "build/libapf.a"
    objdir = argv[2] if len(argv) > 2 else os.path.join(
        os.path.dirname(archive) or ".", "obj")
    try:
        syms = defined_globals(archive)
    except OSError as e:
        print(f"apf: exported-symbols: {e}", file=sys.stderr)
        return 2
    bad = {}
    for member, kind, name in syms:
        if not owner(name).startswith(PREFIX):
            bad.setdefault(member, []).append(f"{name} ({kind})")
    if not bad:
        print(f"{archive}: all {len(syms)} global symbols are {PREFIX} names")
        return 0
    # Which object file under objdir is each offending member: the one(s)
    # with its basename that define the symbol.
    objs = {}
    for dirpath, _, files in os.walk(objdir):
        for f in files:
            if f.endswith(".o"):
                objs.setdefault(f, []).append(os.path.join(dirpath, f))
    by_obj = {}
    for member, names in bad.items():
        where = None
        for cand in sorted(objs.get(member, [])):
            try:
                defined = {s for _, _, s in defined_globals(cand)}
            except OSError:
                continue
            mine = [n for n in names if n.split(" ")[0] in defined]
            if mine:
                by_obj.setdefault(os.path.relpath(cand, objdir), []).extend(mine)
                names = [n for n in names if n not in mine]
        if names:
            by_obj.setdefault(f"{member} (member of {archive})", []).extend(names)
    n = sum(len(v) for v in by_obj.values())
    print(f"{archive}: {n} global symbol{'s' if n != 1 else ''} without the "
          f"{PREFIX} prefix (make them static, or name them {PREFIX}<noun>_<verb>):")
    for obj in sorted(by_obj):
        print(f"  {obj}: {', '.join(sorted(set(by_obj[obj])))}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
