"""Shared helpers for the end-to-end tests: run the real apf binary in a
private $APF_HOME, build small submissions, and rewrite entry archives the
way an attacker who knows the format would."""
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

ROOT = os.environ.get("APF_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APF = os.environ.get("APF_BIN") or os.path.join(ROOT, "build", "apf")
TEST_WORKLOADS = os.path.join(ROOT, "tests", "data", "workloads")

TRAILER_MAGIC = 0x184D2A5A


class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nstdout={self.out[-2000:]}\nstderr={self.err[-2000:]}"


class ApfCase(unittest.TestCase):
    """A test case with its own temporary directory and $APF_HOME."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apf-e2e-")
        self.home = os.path.join(self.tmp, "home")
        self.env = dict(os.environ)
        self.env["APF_HOME"] = self.home
        # apf run's work directories (and anything else apf puts in $TMPDIR)
        # live inside the case's directory: a run the test kills cannot
        # leave them behind in /tmp.
        self.scratch = os.path.join(self.tmp, "tmp")
        os.mkdir(self.scratch)
        self.env["TMPDIR"] = self.scratch
        self.env["APF_WORKLOADS_DIR"] = TEST_WORKLOADS
        self.env["SOURCE_DATE_EPOCH"] = "1700000000"
        self.env.pop("APF_FAULT", None)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def apf(self, *args, env=None, cwd=None, input=None, timeout=600):
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([APF, *args], env=e, cwd=cwd or self.tmp,
                           capture_output=True, text=True, input=input,
                           timeout=timeout, errors="replace")
        return Result(p.returncode, p.stdout, p.stderr)

    def at_terminal(self, *args, timeout=120):
        """apf with stdout and stderr on one pseudo-terminal, as a user
        at a terminal sees it: (exit status, what it showed, CR LF read as
        LF)."""
        import pty
        master, slave = pty.openpty()
        try:
            p = subprocess.Popen([APF, *args], env=self.env, cwd=self.tmp,
                                 stdin=subprocess.DEVNULL, stdout=slave,
                                 stderr=slave)
        finally:
            os.close(slave)
        shown = b""
        try:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed its side
                    break
                if not chunk:
                    break
                shown += chunk
        finally:
            os.close(master)
        rc = p.wait(timeout=timeout)
        return rc, shown.decode(errors="replace").replace("\r\n", "\n")

    def ok(self, *args, **kw):
        r = self.apf(*args, **kw)
        self.assertEqual(r.rc, 0, r)
        return r

    def fails(self, code, *args, match=None, **kw):
        """Runs apf expecting exit status `code` and one `apf: ...` line."""
        r = self.apf(*args, **kw)
        self.assertEqual(r.rc, code, r)
        lines = [l for l in r.err.splitlines() if l.strip()]
        self.assertTrue(lines and lines[-1].startswith("apf: "), r)
        self.assertNotIn("Sanitizer", r.err, r)
        if match:
            self.assertIn(match, lines[-1], r)
        return r

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write(self, rel, data, mode=0o644):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.chmod(p, mode)
        return p

    def make_submission(self, name="sub", ruleset="external", extra=None):
        """A small but real submission directory."""
        d = self.path(name)
        self.write(f"{name}/submission.ini",
                   f"[submission]\nname = {name}\nauthors = A. Author, B. Author\n"
                   f"ruleset = {ruleset}\n\n[tuning]\nstudies = 2\n"
                   f"trials = {3 if ruleset == 'external' else 1}\n")
        self.write(f"{name}/submission.c", "/* optimizer */\nint apf_abi_version = 1;\n")
        self.write(f"{name}/tools/run.sh", "#!/bin/sh\necho hi\n", 0o755)
        if ruleset == "external":
            self.write(f"{name}/tuning_search_space.ini",
                       "[learning_rate]\nmin = 1e-4\nmax = 1e-2\nscaling = log\n")
        for rel, data in (extra or {}).items():
            self.write(f"{name}/{rel}", data)
        return d

    def pack(self, sub, out="entry.apf", *extra):
        # make_submission's code is not a submission that builds: these
        # entries test packing, not the build (tests/e2e/test_pack_build).
        self.ok("pack", sub, "-w", "tiny", "-o", self.path(out), "--no-build", *extra)
        return self.path(out)


def one_unit_nadamw(case):
    """A copy of the NAdamW baseline whose plan is one unit (1 study x 1
    trial), in the case's directory: run whole, a run of it scores to that
    trial's time (a unit of the plan left out counts as a miss)."""
    src = case.path("nadamw")
    shutil.copytree(os.path.join(ROOT, "submissions", "baselines", "nadamw"), src)
    with open(os.path.join(src, "submission.ini"), "a") as f:
        f.write("studies = 1\ntrials = 1\n")
    return src


def split_entry(data):
    """Returns (zstd frame bytes, trailer bytes) of an entry file."""
    return data[:-44], data[-44:]


def trailer_for(body):
    return struct.pack("<II", TRAILER_MAGIC, 36) + b"apf1" + hashlib.sha256(body).digest()


def decompress(frame):
    return subprocess.run(["zstd", "-dc"], input=frame, capture_output=True, check=True).stdout


def compress(tar_bytes):
    return subprocess.run(["zstd", "-q", "-c", "--no-progress"], input=tar_bytes,
                          capture_output=True, check=True).stdout


def reseal(tar_bytes):
    """An entry with a correct integrity trailer around an altered tar, as an
    attacker who knows the format would make it."""
    frame = compress(tar_bytes)
    return frame + trailer_for(frame)


def members(entry_path):
    """An entry's tar members, in order, as (TarInfo, data or None)."""
    import io
    import tarfile
    with open(entry_path, "rb") as f:
        frame, _ = split_entry(f.read())
    tar = decompress(frame)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]


def rebuild(mems):
    """A tar (pax) of (TarInfo, data) pairs in the given order."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in mems:
            if data is not None:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()


def resign_manifest(entry_path, out_path, edit, key_pem, pub_pem):
    """The entry with its signed statement rewritten and signed again with
    key_pem, as a submitter who signs archives without `apf pack` would
    make it: edit(statement) returns the new statement (a dict), or the
    payload's bytes themselves (to write what json.dumps would not)."""
    import base64
    import json
    from runfake import pem_keyid, sign_dsse
    mems = []
    for info, data in members(entry_path):
        if info.name == "manifest.dsse.json":
            env = json.loads(data)
            payload = edit(json.loads(base64.b64decode(env["payload"])))
            if not isinstance(payload, bytes):
                payload = json.dumps(payload, ensure_ascii=False).encode()
            data = sign_dsse(key_pem, env["payloadType"], payload,
                             pem_keyid(pub_pem)).encode()
        mems.append((info, data))
    with open(out_path, "wb") as f:
        f.write(reseal(rebuild(mems)))
    return out_path


# ---- run directories -----------------------------------------------------

BLOBS = "blobs_mlp"


def read_chain(path):
    """One log's records, after checking seq and the prev chain; and its head."""
    import json
    recs = []
    prev = "0" * 64
    with open(path, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n"), f"{path} ends in a torn line"
    for i, line in enumerate(data.split(b"\n")[:-1]):
        rec = json.loads(line)
        assert rec["seq"] == i, f"{path} line {i + 1}: seq {rec['seq']}"
        assert rec["prev"] == prev, f"{path} line {i + 1}: prev breaks the chain"
        prev = hashlib.sha256(line).hexdigest()
        recs.append(rec)
    return recs, prev


def unit_names(run_dir):
    """run.json's plan units, as unit directory names."""
    import json
    with open(os.path.join(run_dir, "run.json")) as f:
        rj = json.load(f)
    out = []
    for u in rj["plan"]["units"]:
        wl = u["workload"] if u["variant"] == "base" else f"{u['workload']}_{u['variant']}"
        out.append(f"study_{u['study']}/{wl}/trial_{u['trial']}")
    return out


def unit_logs(run_dir):
    """{unit: path of its log.jsonl} of the units that have one (per-unit layout)."""
    out = {}
    for name in unit_names(run_dir):
        p = os.path.join(run_dir, name, "log.jsonl")
        if os.path.exists(p):
            out[name] = p
    return out


def read_log(run_dir):
    """The run's records, each log's chain checked: the single-log layout's
    RUN/log.jsonl, or every unit's own log one after another (run.json's
    order); and the head of the run-level log (None for per-unit logs)."""
    single = os.path.join(run_dir, "log.jsonl")
    if os.path.exists(single):
        return read_chain(single)
    recs = []
    for name, path in unit_logs(run_dir).items():
        recs += read_chain(path)[0]
    return recs, None


def read_dsse(path, pubkey):
    """A DSSE envelope's payload, its signature checked with openssl."""
    import base64
    import json
    import tempfile
    with open(path) as f:
        env = json.load(f)
    body = base64.b64decode(env["payload"])
    ptype = env["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(body), body)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "pae"), "wb") as f:
            f.write(pae)
        with open(os.path.join(d, "sig"), "wb") as f:
            f.write(base64.b64decode(env["signatures"][0]["sig"]))
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pubkey,
                            "-rawin", "-in", os.path.join(d, "pae"), "-sigfile",
                            os.path.join(d, "sig")], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(body)


def check_head_signature(run_dir, pubkey):
    """log.dsse.json signs the last line's hash, checked with openssl: the
    run's (single-log layout), or every unit's, and index.dsse.json names
    each unit's head. Returns the (last) signed head payload."""
    single = os.path.join(run_dir, "log.jsonl")
    if os.path.exists(single):
        _, head = read_chain(single)
        payload = read_dsse(os.path.join(run_dir, "log.dsse.json"), pubkey)
        assert payload["head"] == head, "the signed head is not the last line"
        return payload
    index = read_dsse(os.path.join(run_dir, "index.dsse.json"), pubkey)
    payload = None
    for name, path in unit_logs(run_dir).items():
        recs, head = read_chain(path)
        payload = read_dsse(os.path.join(os.path.dirname(path), "log.dsse.json"), pubkey)
        assert payload["head"] == head, f"{name}: the signed head is not the last line"
        if recs[-1]["event"] == "run_end":
            assert index["units"][name] == {"records": len(recs), "head": head}, name
    return payload


def unit_records(recs, unit):
    """A unit's records after discarding work lost to crashes (from_eval)."""
    out = []
    for r in recs:
        if r.get("unit") != unit:
            continue
        if r["event"] == "resume":
            keep = r["from_eval"]
            if keep == 0:
                out = []
            else:
                idx = [i for i, x in enumerate(out) if x["event"] == "eval" and x["index"] == keep]
                assert idx, f"resume from eval {keep} that is not in the log"
                out = out[:idx[0] + 1]
            continue
        out.append(r)
    return out
