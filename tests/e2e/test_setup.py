"""End-to-end: the README's set-up commands on a machine that has nothing.

A fresh Debian 12 image has no make, no compiler and empty package lists.
`sh make.sh TARGET` installs make first and runs the target; scripts/deps.sh
refreshes empty lists before installing, quietly, and says what failed only
when an install fails for good. apt-get, dpkg-query and make are stand-ins
here that record how they were called: the test installs nothing.
"""
import os
import shutil
import subprocess
import unittest

import apftest
from apftest import ApfCase

TOOLS = ("sh", "dirname", "mktemp", "rm", "cat", "ls", "grep", "env", "cp", "touch")

FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
{body}
"""


class Setup(ApfCase):
    def bin(self, fakes):
        """A PATH of the few real tools the scripts use and the fakes."""
        d = self.path("bin")
        os.makedirs(d, exist_ok=True)
        for t in TOOLS + ("basename",):
            real = shutil.which(t)
            self.assertIsNotNone(real, t)
            os.symlink(real, os.path.join(d, t))
        self.calls = self.path("calls")
        fakes.setdefault("id", 'echo 0')
        for name, body in fakes.items():
            self.write(f"bin/{name}", FAKE.format(log=self.calls, body=body), 0o755)
        return d

    def run_sh(self, script, *args, path, env=None):
        e = {"PATH": path, "TMPDIR": self.scratch}
        e.update(env or {})
        return subprocess.run(["sh", os.path.join(apftest.ROOT, script), *args], env=e,
                              capture_output=True, text=True, timeout=60)

    def logged(self):
        with open(self.calls) as f:
            return [l for l in f.read().splitlines() if not l.startswith("id ")]

    def test_make_sh_installs_make_first_on_a_bare_machine(self):
        # apt-get "installs" make by putting the stand-in on PATH.
        d = self.path("bin")
        path = self.bin({"apt-get": f'case "$*" in *" make") cp "{d}/fake-make" "{d}/make";; esac'})
        self.write("bin/fake-make", FAKE.format(log=self.calls, body=""), 0o755)
        r = self.run_sh("make.sh", "demo", path=path)
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(self.logged(), ["apt-get update -q",
                                         "apt-get install -y -q --no-install-recommends make",
                                         "make demo"])
        self.assertEqual(r.stderr, "apf: make.sh: make is not installed; installing it (apt-get)\n")
        self.assertEqual(os.listdir(self.scratch), [])

    def test_make_sh_is_make_where_make_exists(self):
        path = self.bin({"make": ""})
        r = self.run_sh("make.sh", "test", path=path)
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(self.logged(), ["make test"])

    def test_make_sh_says_why_when_apt_get_fails(self):
        path = self.bin({"apt-get": 'echo "E: Could not resolve deb.debian.org" >&2; exit 100'})
        r = self.run_sh("make.sh", "demo", path=path)
        self.assertEqual(r.returncode, 2, r)
        self.assertEqual(r.stderr.splitlines()[-2:], [
            "E: Could not resolve deb.debian.org",
            "apf: make.sh: could not install make with apt-get"])

    def test_deps_refreshes_empty_lists_first_and_quietly(self):
        lists = self.path("lists")
        os.mkdir(lists)
        path = self.bin({"dpkg-query": "exit 1",
                         "apt-get": 'echo "Reading package lists..."; echo "W: noise" >&2'})
        r = self.run_sh("scripts/deps.sh", "build", path=path, env={"APF_APT_LISTS": lists})
        self.assertEqual(r.returncode, 0, r)
        calls = self.logged()
        self.assertEqual(calls[-2], "apt-get update -q")
        self.assertTrue(calls[-1].startswith("apt-get install -y -q --no-install-recommends gcc make"),
                        calls)
        # One line: what it installs. No apt-get output, no "Unable to locate".
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("apf: deps: installing gcc make"), r.stderr)

    def test_deps_retries_once_after_a_refresh_then_says_what_failed(self):
        lists = self.path("lists")
        os.mkdir(lists)
        self.write("lists/deb_main_binary-amd64_Packages", "")
        # Stale lists: the first install fails, the refresh fixes it.
        flag = self.path("refreshed")
        path = self.bin({"dpkg-query": "exit 1",
                         "apt-get": f'case "$1" in update) touch "{flag}";; '
                                    f'install) [ -e "{flag}" ] || exit 100;; esac'})
        r = self.run_sh("scripts/deps.sh", "test", path=path, env={"APF_APT_LISTS": lists})
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual([c.split()[1] for c in self.logged() if c.startswith("apt-get")],
                         ["install", "update", "install"])
        # For good: the output is shown, and the packages are named.
        os.remove(self.calls)
        path2 = self.path("bin")
        self.write("bin/apt-get", FAKE.format(
            log=self.calls, body='echo "E: Unable to locate package libcmocka-dev" >&2; exit 100'),
            0o755)
        r = self.run_sh("scripts/deps.sh", "test", path=path2, env={"APF_APT_LISTS": lists})
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("E: Unable to locate package libcmocka-dev\n", r.stderr)
        self.assertIn("apf: deps: could not install: libcmocka-dev", r.stderr)
        self.assertEqual(os.listdir(self.scratch), [])


if __name__ == "__main__":
    unittest.main()
