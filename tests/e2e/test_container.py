"""The image and the sealed runner in a container (issue 14).

A Debian 12 minbase made with debootstrap from the Debian archive is imported
into podman as the base image, the Dockerfile is built on it with
--build-arg BASE=, and the test workload runs sealed inside the container
with the shipped seccomp profile; the run is then verified outside the
container with the apf under test. The base image is kept in podman's
storage between runs (localhost/apf-test-base:bookworm), so only the first
run pays for debootstrap; the image of this tree is rebuilt (its packages'
layer cached) and tagged per source tree, so two checkouts testing at once
never build over each other's tag.

Skipped, with the reason, where podman cannot run containers here (not
root, podman or runc not installed, no user namespaces) or where debootstrap
cannot reach the archive; a build or a run that fails is a failure.
"""
import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import unittest

import apftest
from apftest import ApfCase, BLOBS

ROOT = apftest.ROOT
PROFILE = os.path.join(ROOT, "containers", "seccomp.json")
RUNTIME_DEFAULT = "/usr/share/containers/seccomp.json"
BASE = "localhost/apf-test-base:bookworm"
IMAGE = "localhost/apf-test:" + hashlib.sha256(ROOT.encode()).hexdigest()[:12]
UNMASK = "--security-opt=unmask=/proc/*"
SECCOMP = f"--security-opt=seccomp={PROFILE}"


def sh(args, timeout=600, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          errors="replace", **kw)


def mirror():
    """The Debian archive this machine installs from (debootstrap's mirror)."""
    if os.environ.get("APF_DEBIAN_MIRROR"):
        return os.environ["APF_DEBIAN_MIRROR"]
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            text = open(path).read()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and "security" not in line:
                return [w for w in words[1:] if "://" in w][0]
    return "http://deb.debian.org/debian"


def podman_flags():
    """What podman run and build need on this host: runc (crun fails on a
    hybrid cgroup hierarchy), and limits no higher than the host's own hard
    limits (podman's defaults exceed them on some hosts, and runc then
    cannot set them)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1048576)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return ["--runtime", shutil.which("runc"), f"--ulimit=nofile={nofile}:{nofile}",
            f"--ulimit=nproc={nproc}:{nproc}"]


class Profile(unittest.TestCase):
    def test_the_profile_is_the_runtime_default_plus_what_the_sandbox_needs(self):
        if not os.path.exists(RUNTIME_DEFAULT):
            self.skipTest(f"{RUNTIME_DEFAULT} (podman's default profile) is not installed")
        r = sh(["python3", os.path.join(ROOT, "scripts", "gen-seccomp.py")])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(PROFILE) as f:
            self.assertEqual(f.read(), r.stdout,
                             "containers/seccomp.json is not this runtime's default plus "
                             "apf's additions: rerun scripts/gen-seccomp.py -o "
                             "containers/seccomp.json and review the difference")
        shipped, default = json.loads(r.stdout), json.load(open(RUNTIME_DEFAULT))

        def allowed(p):
            return {n for rule in p["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
                    and not rule.get("args") and not rule.get("includes")
                    for n in rule["names"]}
        self.assertEqual(allowed(shipped) - allowed(default), {"sethostname"})
        self.assertEqual(allowed(default) - allowed(shipped), set())
        self.assertEqual(shipped["defaultAction"], default["defaultAction"])


class Container(ApfCase):
    @classmethod
    def setUpClass(cls):
        cls.skip = None
        why = cls.cannot_run()
        if why:
            cls.skip = why
            return
        cls.flags = podman_flags()
        why = cls.base_image()
        if why:
            cls.skip = why
            return
        before = sh(["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE]).stdout.strip()
        r = sh(["podman", "build", *cls.flags, "--network=host", "--build-arg", f"BASE={BASE}",
                "--build-arg", "APF_TEST=0", "-t", IMAGE, ROOT], timeout=1200)
        if r.returncode != 0:
            raise AssertionError("podman build of the Dockerfile failed:\n" +
                                 (r.stdout + r.stderr)[-4000:])
        r = sh(["podman", "image", "inspect", "--format", "{{.Digest}}", IMAGE])
        assert r.returncode == 0, r.stderr
        cls.digest = r.stdout.strip()
        # The tree's previous image, now untagged, would pile up run after
        # run; its packages' layer stays, shared with the new one.
        after = sh(["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE]).stdout.strip()
        if before and before != after:
            sh(["podman", "rmi", before])

    @classmethod
    def cannot_run(cls):
        if os.geteuid() != 0:
            return "the container test runs podman as root"
        for tool in ("podman", "runc", "debootstrap"):
            if not shutil.which(tool):
                return f"{tool} is not installed (scripts/deps.sh test installs it)"
        if not os.path.exists(PROFILE):
            return "containers/seccomp.json is missing"
        r = sh(["podman", "info"], timeout=120)
        if r.returncode != 0:
            return "podman cannot start here: " + (r.stderr.strip().splitlines() or ["?"])[-1]
        return None

    @classmethod
    def base_image(cls):
        """Makes the Debian 12 minbase image once per machine; two test runs
        at once take turns (a lock), the second finding the first's image."""
        with open("/var/tmp/apf-test-base.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if sh(["podman", "image", "exists", BASE]).returncode == 0:
                return None
            tmp = tempfile.mkdtemp(prefix="apf-debootstrap-", dir="/var/tmp")
            try:
                root = os.path.join(tmp, "rootfs")
                r = sh(["debootstrap", "--variant=minbase", "bookworm", root, mirror()],
                       timeout=900)
                if r.returncode != 0:
                    return (f"debootstrap could not make a Debian 12 base from {mirror()}: " +
                            (r.stdout + r.stderr).strip().splitlines()[-1:][0])
                shutil.rmtree(os.path.join(root, "var", "cache", "apt", "archives"),
                              ignore_errors=True)
                tar = subprocess.Popen(["tar", "-C", root, "--numeric-owner", "-c", "."],
                                       stdout=subprocess.PIPE)
                r = subprocess.run(["podman", "import", "-", BASE], stdin=tar.stdout,
                                   capture_output=True, text=True, timeout=600)
                tar.stdout.close()
                tar.wait()
                if r.returncode != 0 or tar.returncode != 0:
                    # podman's storage refusing a layer (inside another
                    # container, say) is this machine's limit, not apf's.
                    return ("podman cannot import an image here: " +
                            (r.stderr.strip().splitlines() or ["tar failed"])[-1])
                # podman itself may still be unable to start a container
                # here (no user namespaces in this kernel, say): a reason
                # to skip, found before anything is built.
                r = sh(["podman", "run", "--rm", *podman_flags(), "--network=none", BASE,
                        "true"])
                if r.returncode != 0:
                    sh(["podman", "rmi", BASE])
                    return "podman cannot start a container here: " + r.stderr.strip()[-300:]
                return None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def setUp(self):
        if self.skip:
            self.skipTest(self.skip)
        super().setUp()
        self.ok("keygen")

    def podman(self, *args, security=(SECCOMP, UNMASK), digest=None, timeout=300):
        """apf ARGS in the image: the case's $APF_HOME and directory mounted,
        the test workloads read-only, no network."""
        cmd = ["podman", "run", "--rm", *self.flags, "--network=none", *security,
               "-v", f"{self.home}:/apf", "-v", f"{self.tmp}:/work",
               "-v", f"{os.path.join(ROOT, 'tests', 'data')}:/t:ro",
               "-v", f"{os.path.join(ROOT, 'submissions')}:/s:ro",
               "-e", "APF_WORKLOADS_DIR=/t/workloads",
               "-e", f"APF_IMAGE_DIGEST={digest or self.digest}", IMAGE, *args]
        return sh(cmd, timeout=timeout)

    def pack_inside(self):
        r = self.podman("pack", "/s/baselines/nadamw", "-w", BLOBS, "-o", "/work/e.apf")
        self.assertEqual(r.returncode, 0, r.stderr)
        return "/work/e.apf"

    def test_a_sealed_run_in_the_container_verifies_outside_it(self):
        entry = self.pack_inside()
        r = self.podman("run", entry, "-o", "/work/run", "--study", "0", "--trial", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 unit completed, 0 failed", r.stderr)
        with open(self.path("run", "run.json")) as f:
            meta = json.load(f)
        self.assertTrue(meta["sealed"])
        self.assertEqual(meta["environment"]["image_digest"], self.digest)
        # The auditor's side: this tree's apf, outside the container.
        r = self.ok("verify", self.path("run"), "--reeval", "--replay", "all", timeout=300)
        self.assertIn("5 replay       passed", r.out)

    def test_the_runtime_default_profile_fails_closed_naming_the_profile(self):
        entry = self.pack_inside()
        r = self.podman("run", entry, "-o", "/work/run", "--study", "0", "--trial", "1",
                        security=(UNMASK,))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("sandbox: sethostname: Operation not permitted (a container's default "
                      "seccomp profile forbids it: run the container with --security-opt "
                      "seccomp=seccomp.json", r.stderr)
        self.assertFalse(os.path.exists(self.path("run", "log.jsonl")))

    def test_a_masked_proc_fails_closed_naming_the_flag(self):
        entry = self.pack_inside()
        r = self.podman("run", entry, "-o", "/work/run", "--study", "0", "--trial", "1",
                        security=(SECCOMP,))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("sandbox: mount /proc: Operation not permitted (in a container, a /proc "
                      "with masked parts forbids a fresh one: run the container with "
                      "--security-opt unmask=/proc/* (podman)", r.stderr)

    def test_an_entry_packed_in_another_image_is_refused(self):
        # The operator claims another image than the one the entry was
        # packed in: the image digest is compared like the compiler's.
        entry = self.pack_inside()
        other = "sha256:" + "0" * 64
        r = self.podman("run", entry, "-o", "/work/run", "--study", "0", "--trial", "1",
                        digest=other)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f'differs from the entry\'s record: image_digest (entry "{self.digest}", '
                      f'here "{other}")', r.stderr)
        self.assertFalse(os.path.exists(self.path("run", "log.jsonl")))


if __name__ == "__main__":
    unittest.main()
