#!/usr/bin/python3
"""Writes containers/seccomp.json: a container runtime's default seccomp
profile plus exactly what apf's sealed runner needs (ADDED below), nothing
else changed.

    scripts/gen-seccomp.py [--from DEFAULT] [-o OUT]

DEFAULT is the runtime's own profile, by default the one Debian 12 installs
for podman and buildah (/usr/share/containers/seccomp.json, from
golang-github-containers-common, Apache-2.0). The output keeps the default's
rules in their order; each added syscall leaves the rules that
allowed it only with a capability (and refused it without) and joins the
rule that allows the unconditional syscalls.
"""
import argparse
import json
import sys

DEFAULT = "/usr/share/containers/seccomp.json"

# syscall -> why apf's sandbox makes it (pkg/sandbox/child.c)
ADDED = {
    "sethostname": "the sealed trial's UTS namespace gets its own host name, "
                   "so the machine's name never reaches the submission; the "
                   "default allows it only to a container with CAP_SYS_ADMIN",
}


def derive(profile):
    rules = []
    allow = None
    for rule in profile["syscalls"]:
        unconditional = (rule.get("action") == "SCMP_ACT_ALLOW" and not rule.get("args")
                         and not rule.get("includes") and not rule.get("excludes"))
        names = rule["names"]
        if not unconditional:
            names = [n for n in names if n not in ADDED]
            if not names:
                continue
        rule = dict(rule, names=names)
        if unconditional and allow is None:
            allow = rule
        rules.append(rule)
    if allow is None:
        sys.exit("apf: gen-seccomp: the default profile has no unconditional allow rule")
    allow["names"] = sorted(set(allow["names"]) | set(ADDED))
    return dict(profile, syscalls=rules)


def main():
    ap = argparse.ArgumentParser(description="apf's container seccomp profile")
    ap.add_argument("--from", dest="src", default=DEFAULT)
    ap.add_argument("-o", dest="out", default="-")
    a = ap.parse_args()
    try:
        with open(a.src) as f:
            profile = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"apf: gen-seccomp: {a.src}: {e}")
    text = json.dumps(derive(profile), indent=1) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        import os
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
