"""End-to-end: apf keygen, pack, verify and inspect on real files.

What an auditor relies on: identical inputs give identical entries, any
changed byte is caught and named, an untrusted signer is refused, a broken
file is an input error, and the signature checks out with OpenSSL alone.
"""
import base64
import io
import json
import os
import subprocess
import tarfile

import apftest
from apftest import ApfCase, members, rebuild


class PackAndVerify(ApfCase):
    def test_pack_verify_inspect_round_trip(self):
        sub = self.make_submission()
        entry = self.pack(sub)
        r = self.ok("verify", entry)
        self.assertIn("verified", r.out)
        self.assertIn("sub, external tuning, 4 files", r.out)
        names = [m.name for m, _ in members(entry)]
        self.assertEqual(names[0], "manifest.dsse.json")
        self.assertEqual(names[1:], sorted(names[1:]))
        self.assertIn("submission/tools/run.sh", names)
        r = self.ok("inspect", entry)
        self.assertIn("A. Author", r.out)
        self.assertIn("trusted", r.out)
        r = self.ok("verify", entry, "--json")
        self.assertTrue(json.loads(r.out)["verified"])
        # A run's audit asked of an entry is refused, not ignored: the
        # auditor would believe a replay was made.
        for audit in (["--reeval"], ["--replay", "2"], ["--replay-top", "1"], ["--pruned"]):
            self.fails(2, "verify", entry, *audit,
                       match=f"apf: verify: --reeval, --replay and --pruned are for a "
                             f"run directory; {entry} is an entry (its checks need no "
                             "options)")
        # A path that is not there is not called an entry.
        gone = self.path("gone.run")
        self.fails(2, "verify", gone, "--pruned",
                   match=f"apf: {gone}: open: No such file or directory")

    def test_manifest_matches_the_json_schema(self):
        import jsonschema
        with open(os.path.join(apftest.ROOT, "manifests", "entry.schema.json")) as f:
            schema = json.load(f)
        for ruleset in ("external", "self"):
            sub = self.make_submission(name=f"s_{ruleset}", ruleset=ruleset)
            entry = self.pack(sub, f"{ruleset}.apf")
            st = json.loads(self.ok("inspect", entry, "--json").out)["statement"]
            jsonschema.Draft202012Validator(schema).validate(st)
            self.assertEqual(st["predicate"]["tuning"]["ruleset"], ruleset)
            self.assertEqual(st["predicate"]["tuning"]["budget_multiplier"],
                             1.0 if ruleset == "external" else 1.5)
            subjects = {s["name"] for s in st["subject"]}
            self.assertEqual(subjects, {"submission", "dataset:tiny", "workload:tiny"})
            # The tree digest in the manifest is what apf hash prints.
            h = self.ok("hash", sub).out.split()[0]
            self.assertEqual(st["predicate"]["submission"]["tree_digest"], h)

    def test_two_packs_are_byte_identical_whatever_times_owners_umask_order(self):
        a = self.make_submission(name="a")
        entry_a = self.pack(a, "a.apf")
        # Same content, written in the opposite order, other times, umask,
        # and (as root) other owners.
        files = {}
        for dp, _, fs in os.walk(a):
            for f in fs:
                p = os.path.join(dp, f)
                files[os.path.relpath(p, a)] = (open(p, "rb").read(), os.stat(p).st_mode & 0o777)
        b = self.path("b_dir", "a")  # same basename is not needed; name is in the ini
        old = os.umask(0o077)
        try:
            for rel in sorted(files, reverse=True):
                data, mode = files[rel]
                p = os.path.join(b, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(data)
                os.chmod(p, 0o700 if mode & 0o100 else 0o600)
                os.utime(p, (123456789, 987654321))
                if os.geteuid() == 0:
                    os.chown(p, 4321, 8765)
        finally:
            os.umask(old)
        entry_b = self.pack(b, "b.apf")
        with open(entry_a, "rb") as fa, open(entry_b, "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_any_changed_byte_fails_verification_naming_the_check(self):
        entry = self.pack(self.make_submission())
        data = open(entry, "rb").read()
        n = len(data)
        offsets = sorted(set(list(range(0, min(n, 96))) + list(range(max(0, n - 96), n)) +
                             list(range(0, n, 13))))
        bad = self.path("bad.apf")
        for off in offsets:
            flipped = bytearray(data)
            flipped[off] ^= 0x20
            with open(bad, "wb") as f:
                f.write(flipped)
            r = self.apf("verify", bad)
            self.assertEqual(r.rc, 1, f"offset {off} of {n}: {r}")
            self.assertTrue(r.err.startswith("apf: ") and r.err.count("\n") == 1, r)
            self.assertTrue("changed" in r.err or "damaged" in r.err, r)

    def test_untrusted_key_is_refused(self):
        entry = self.pack(self.make_submission())
        other = self.path("other")
        self.ok("keygen", "-o", other, "--no-trust")
        self.fails(1, "verify", entry, "--key", other + ".pub.pem",
                   match="signature: no trusted key verifies it")
        # Another machine with no trusted keys at all: each command names
        # its own flag for the signer's key, and which key that is.
        from runfake import pem_keyid
        kid = pem_keyid(os.path.join(self.home, "keys", "default.pub.pem"))[:16]
        empty = {"APF_HOME": self.path("empty")}
        for args, flag in ((["verify", entry], "--key"), (["plan", entry], "--key"),
                           (["run", entry, "-o", self.path("r")], "--entry-key")):
            r = self.fails(1, *args, env=empty)
            self.assertTrue(r.err.endswith(
                f"signature: no trusted keys: signed by key id {kid}... (give its public "
                f"key with {flag} PUB.pem or add it to $APF_HOME/trusted/)\n"), r)
        self.fails(1, "verify", entry, "--key", other + ".pub.pem",
                   match="1 trusted key tried; give the signer's public key with --key PUB.pem)")
        # inspect still shows it, marked untrusted.
        r = self.ok("inspect", entry, "--key", other + ".pub.pem")
        self.assertIn("NOT TRUSTED", r.out)

    def test_truncated_empty_and_non_archives_are_input_errors(self):
        entry = self.pack(self.make_submission())
        data = open(entry, "rb").read()
        bad = self.path("bad.apf")
        for cut in sorted({1, 4, 10, len(data) // 3, len(data) // 2, len(data) - 45,
                           len(data) - 44, len(data) - 20, len(data) - 1}):
            with open(bad, "wb") as f:
                f.write(data[:cut])
            self.fails(2, "verify", bad, match="truncated")
        with open(bad, "wb") as f:
            f.write(b"")
        self.fails(2, "verify", bad, match="not an apf entry")
        with open(bad, "wb") as f:
            f.write(b"This is a text file, not an entry.\n" * 20)
        self.fails(2, "verify", bad, match="not an apf entry")
        self.fails(2, "verify", self.path("missing.apf"))
        self.fails(2, "verify", self.tmp)

    def test_signature_verifies_with_openssl_alone(self):
        entry = self.pack(self.make_submission())
        env = json.loads(dict((m.name, d) for m, d in members(entry))["manifest.dsse.json"])
        body = base64.b64decode(env["payload"])
        ptype = env["payloadType"].encode()
        pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(body), body)
        with open(self.path("pae.bin"), "wb") as f:
            f.write(pae)
        with open(self.path("sig.bin"), "wb") as f:
            f.write(base64.b64decode(env["signatures"][0]["sig"]))
        pub = os.path.join(self.home, "keys", "default.pub.pem")
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub,
                            "-rawin", "-in", self.path("pae.bin"), "-sigfile",
                            self.path("sig.bin")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("Signature Verified Successfully", p.stdout)
        # The key id in the envelope is the SHA-256 of the public key's DER.
        der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub, "-outform", "DER"],
                             capture_output=True, check=True).stdout
        import hashlib
        self.assertEqual(env["signatures"][0]["keyid"], hashlib.sha256(der).hexdigest())


class TamperedButResealed(ApfCase):
    """An attacker who rewrites the archive and recomputes the integrity
    trailer still fails on the signature and the member digests."""

    def setUp(self):
        super().setUp()
        self.entry = self.pack(self.make_submission())
        self.mems = members(self.entry)
        self.bad = self.path("bad.apf")

    def check(self, mems, match):
        with open(self.bad, "wb") as f:
            f.write(apftest.reseal(rebuild(mems)))
        self.fails(1, "verify", self.bad, match=match)

    def test_untouched_rebuild_still_verifies(self):
        with open(self.bad, "wb") as f:
            f.write(apftest.reseal(rebuild(self.mems)))
        self.ok("verify", self.bad)

    def test_changed_file_content(self):
        mems = [(m, (d.replace(b"optimizer", b"OPTIMIZER") if m.name.endswith(".c") else d))
                for m, d in self.mems]
        self.check(mems, "submission/submission.c: content differs from the manifest")

    def test_added_file(self):
        info = tarfile.TarInfo("submission/zz_extra.c")
        self.check(self.mems + [(info, b"int evil;\n")], "not in the manifest")

    def test_removed_file(self):
        mems = [x for x in self.mems if not x[0].name.endswith("run.sh")]
        self.check(mems, "tools/run.sh: in the manifest but missing from the archive")

    def test_changed_mode(self):
        mems = []
        for m, d in self.mems:
            if m.name.endswith("run.sh"):
                m.mode = 0o644
            mems.append((m, d))
        self.check(mems, "type or mode")

    def test_manifest_not_first(self):
        self.check(self.mems[1:] + self.mems[:1], "first member")

    def test_manifest_edited(self):
        mems = []
        for m, d in self.mems:
            if m.name == "manifest.dsse.json":
                env = json.loads(d)
                st = json.loads(base64.b64decode(env["payload"]))
                st["predicate"]["submission"]["authors"] = ["Mallory"]
                env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
                d = json.dumps(env).encode()
            mems.append((m, d))
        self.check(mems, "signature: no trusted key verifies it")

    def test_manifest_resigned_by_attacker(self):
        self.ok("keygen", "-o", self.path("mallory"), "--no-trust")
        other = self.make_submission(name="other", extra={"evil.c": "int evil;\n"})
        forged = self.path("forged.apf")
        self.ok("pack", other, "-w", "tiny", "-k", self.path("mallory.key.pem"), "-o", forged,
                "--no-build")
        self.fails(1, "verify", forged, match="no trusted key verifies it")


class PackErrors(ApfCase):
    def assert_no_leftovers(self, directory):
        left = [f for f in os.listdir(directory) if ".tmp." in f or f.endswith(".apf")]
        self.assertEqual(left, [], left)

    def test_usage_and_input_errors(self):
        sub = self.make_submission()
        self.fails(2, "pack", sub, match="-w")
        self.fails(2, "pack", sub, "-w", "nonexistent", match="no such workload")
        self.fails(2, "pack", sub, "-w", "tiny,tiny", match="named twice")
        self.fails(2, "pack", self.path("nodir"), "-w", "tiny")
        self.fails(2, "pack", sub, "-w", "tiny", "--bogus", match="unknown option")
        # Named before anything is built (the build check would refuse
        # this placeholder code with the same exit status).
        r = self.fails(2, "pack", sub, "-w", "tiny", "-o", self.path("no", "such", "dir.apf"))
        self.assertIn("its directory " + self.path("no", "such") + ": No such file or directory",
                      r.err)
        self.write("afile", "x")
        self.fails(2, "pack", sub, "-w", "tiny", "-o", self.path("afile", "dir.apf"),
                   match="is not a directory")
        os.remove(os.path.join(sub, "tuning_search_space.ini"))
        self.fails(2, "pack", sub, "-w", "tiny", match="tuning_search_space.ini")
        self.write("sub/submission.ini", "[submission]\nname = x\nruleset = sometimes\n")
        self.fails(2, "pack", sub, "-w", "tiny", match="line 3: [submission] ruleset")
        self.assert_no_leftovers(self.tmp)

    def test_dataset_digest_mismatch_is_refused(self):
        sub = self.make_submission()
        data = self.path("data", "tiny")
        os.makedirs(data)
        with open(os.path.join(data, "train.bin"), "wb") as f:
            f.write(b"not the declared data")
        self.fails(2, "pack", sub, "-w", "tiny", env={"APF_DATASETS_DIR": self.path("data")},
                   match="wrong or modified data")

    def test_injected_write_faults_leave_nothing_behind(self):
        sub = self.make_submission()
        self.ok("keygen")  # so the faults hit the entry, not the key
        for nth in (1, 2, 3, 5):
            r = self.apf("pack", sub, "-w", "tiny", "-o", self.path("e.apf"), "--no-build",
                         env={"APF_FAULT": f"write:{nth}"})
            if r.rc == 0:
                os.remove(self.path("e.apf"))
                break  # fewer writes than nth
            self.assertEqual(r.rc, 2, r)
            self.assertIn("write", r.err)
            self.assert_no_leftovers(self.tmp)
        for op in ("fsync", "rename"):
            r = self.apf("pack", sub, "-w", "tiny", "-o", self.path("e.apf"), "--no-build",
                         env={"APF_FAULT": f"{op}:1"})
            self.assertEqual(r.rc, 2, r)
            self.assert_no_leftovers(self.tmp)

    def test_existing_entry_is_replaced_atomically(self):
        sub = self.make_submission()
        entry = self.pack(sub)
        before = open(entry, "rb").read()
        self.write("sub/submission.c", "int changed;\n")
        r = self.apf("pack", sub, "-w", "tiny", "-o", entry, "--no-build",
                     env={"APF_FAULT": "rename:1"})
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(open(entry, "rb").read(), before)


class Hash(ApfCase):
    def test_listing_recomputes_the_digest_with_sha256sum(self):
        sub = self.make_submission()
        digest = self.ok("hash", sub).out.split()[0]
        listing = self.ok("hash", "--list", sub).out
        p = subprocess.run(["sha256sum"], input=listing.encode(), capture_output=True, check=True)
        self.assertEqual(p.stdout.decode().split()[0], digest)
        for line in listing.splitlines():
            kind, mode, size, sha, path = line.split(" ", 4)
            self.assertIn(kind, "fl")
            self.assertIn(mode, ("644", "755", "777"))
            self.assertEqual(int(size), os.path.getsize(os.path.join(sub, path)))
            with open(os.path.join(sub, path), "rb") as f:
                import hashlib
                self.assertEqual(sha, hashlib.sha256(f.read()).hexdigest())

    def test_file_digest_is_sha256sum(self):
        p = self.write("f.bin", os.urandom(100000))
        want = subprocess.run(["sha256sum", p], capture_output=True, text=True).stdout.split()[0]
        self.assertEqual(self.ok("hash", p).out.split()[0], want)


class KeygenAndCli(ApfCase):
    def test_keygen_default_and_named(self):
        r = self.ok("keygen")
        keyid = r.out.strip()
        self.assertEqual(len(keyid), 64)
        priv = os.path.join(self.home, "keys", "default.key.pem")
        self.assertEqual(os.stat(priv).st_mode & 0o777, 0o600)
        self.assertTrue(os.path.exists(os.path.join(self.home, "trusted", keyid[:16] + ".pub.pem")))
        self.fails(2, "keygen", match="refusing to overwrite")
        self.ok("keygen", "-o", self.path("k"))
        self.fails(2, "keygen", "-o", self.path("k"), match="refusing to overwrite")

    def test_help_and_version(self):
        r = self.ok("--help")
        for cmd in ("keygen", "hash", "env", "pack", "inspect", "verify"):
            self.assertIn(cmd, r.out)
            self.assertIn("usage: apf " + cmd, self.ok(cmd, "--help").out)
        self.assertRegex(self.ok("--version").out, r"^apf \d+\.\d+\.\d+ \(")
        self.fails(2, "frobnicate", match="unknown command")
        # apf help [COMMAND [SUBCOMMAND]] is --help by another name.
        self.assertEqual(self.ok("help").out, r.out)
        self.assertEqual(self.ok("help", "run").out, self.ok("run", "--help").out)
        self.assertIn("usage: apf heldout draw", self.ok("help", "heldout", "draw").out)
        self.fails(2, "help", "frobnicate", match="no command 'frobnicate'")
        self.fails(2, "help", "__trial", match="no command '__trial'")
        # An unknown device is a usage error, told apart from a known one
        # this build lacks.
        r = self.fails(2, "run", self.path("x.apf"), "--device", "tpu",
                       match="--device tpu: unknown device (cpu or cuda)")

    def test_env_json_is_the_manifest_environment(self):
        import jsonschema
        with open(os.path.join(apftest.ROOT, "manifests", "entry.schema.json")) as f:
            schema = json.load(f)
        env = json.loads(self.ok("env", "--json").out)
        jsonschema.Draft202012Validator(schema["$defs"]["environment"]).validate(env)
        self.assertEqual(env["cpu"]["cores"], len(os.sched_getaffinity(0)))


class Plan(ApfCase):
    def test_plan_is_fixed_by_the_entry(self):
        sub = self.make_submission()
        entry = self.pack(sub)
        a = json.loads(self.ok("plan", entry, "--json").out)
        b = json.loads(self.ok("plan", entry, "--json").out)
        self.assertEqual(a, b)
        self.assertEqual(len(a["units"]), 2 * 3)  # studies x trials, one workload
        lrs = [u["hparams"]["learning_rate"] for u in a["units"]]
        self.assertEqual(len(set(lrs)), len(lrs))
        self.assertTrue(all(1e-4 <= x <= 1e-2 for x in lrs))
        # Another seed draws other points; the same seed on another pack
        # (another machine) draws the same ones.
        c = json.loads(self.ok("plan", self.pack(sub, "c.apf", "--seed", "7"), "--json").out)
        self.assertNotEqual([u["hparams"] for u in c["units"]], [u["hparams"] for u in a["units"]])
        d = json.loads(self.ok("plan", self.pack(sub, "d.apf", "--seed", "7"), "--json").out)
        self.assertEqual(c["units"], d["units"])
        text = self.ok("plan", entry).out
        self.assertIn("2 studies x 3 trials", text)
        self.assertEqual([l for l in text.splitlines() if l != l.rstrip()],
                         [])

    def test_self_tuning_plan_has_no_search(self):
        sub = self.make_submission(name="st", ruleset="self")
        entry = self.pack(sub)
        p = json.loads(self.ok("plan", entry, "--json").out)
        self.assertEqual(p["trials"], 1)
        self.assertIn("2 studies x 1 trial,", self.ok("plan", entry).out)
        # One of each, in the singular, wherever the plan is told.
        ini = os.path.join(sub, "submission.ini")
        with open(ini) as f:
            text = f.read()
        with open(ini, "w") as f:
            f.write(text.replace("studies = 2", "studies = 1"))
        one = self.pack(sub, "one.apf")
        self.assertIn("1 study x 1 trial,", self.ok("plan", one).out)
        self.assertIn("1 study x 1 trial,", self.ok("inspect", one).out)
        self.assertEqual(p["budget_multiplier"], 1.5)
        self.assertTrue(all(u["hparams"] == {} for u in p["units"]))
        self.ok("keygen", "-o", self.path("other"), "--no-trust")
        self.fails(1, "plan", entry, "--key", self.path("other.pub.pem"), match="signature")
        self.fails(2, "plan", entry, "--key", os.devnull, match="empty")


class ExampleManifests(ApfCase):
    """make manifests' committed entries verify with the committed key and
    match the schema."""

    def test_examples_verify_with_their_public_key(self):
        import glob
        import jsonschema
        d = os.path.join(apftest.ROOT, "manifests", "examples")
        entries = sorted(glob.glob(os.path.join(d, "*.apf")))
        if not entries:
            self.skipTest("no example entries (make manifests writes them)")
        with open(os.path.join(apftest.ROOT, "manifests", "entry.schema.json")) as f:
            schema = jsonschema.Draft202012Validator(json.load(f))
        pub = os.path.join(d, "signing.pub.pem")
        for e in entries:
            r = self.ok("verify", e, "--key", pub)
            self.assertIn("verified", r.out)
            st = json.loads(self.ok("inspect", e, "--json", "--key", pub).out)
            schema.validate(st["statement"])
            self.assertEqual({w["name"] for w in st["statement"]["predicate"]["workloads"]},
                             {"fmnist_mlp", "fmnist_cnn"})
