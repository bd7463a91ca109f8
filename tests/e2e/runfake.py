"""runfake: valid apf run directories, made without the runner.

The verifier's tests cannot wait for `apf run`, so this module writes what the
runner writes (docs/design.md 2.6, manifests/run.schema.json,
manifests/log-events.schema.json): a real entry packed by `apf pack`,
run.json, a hash-chained log.jsonl, log.dsse.json signed by a runner key made
by `apf keygen` (the DSSE PAE signed by `openssl pkeyutl -rawin`), the
per-trial eval_measurements.csv, hparams.json (from `apf plan --json`) and
checkpoint files of random bytes.

Two layers:
  - RunDir: any run directory on disk (fake or real): its records, the
    helpers to rewrite the log (re-chained and re-signed, or not) and the
    CSVs. Tampering tests work through it, so they also run on real runs.
  - FakeRun: the generator. Each unit follows a script (how it ends,
    whether it crashes and resumes); times follow the runner's rules exactly
    (an independent Python statement of the timing semantics).

Timing semantics (per unit, integers in ns, docs/design.md 3.4, as pkg/runner
keeps them): step_block k runs [start_ns, end_ns]; the first block a
supervisor runs starts after its clock_start, block k > 1 after eval k-1
ended; eval k runs from block k's end_ns to its end_ns; accumulated
submission / eval time are the sums of those intervals; accumulated logging
time sums the gaps from each eval's end to the next block's start (a
supervisor's set-up before its first block counts nowhere); a later eval is
due when eval_period_ns has passed since the last eval ended (or since a
resumed supervisor's clock_start), except for the final eval. Every `apf
run` into the directory is a session: run_start, its records, run_end
unless it was killed; a unit interrupted by a crash goes on in a later
session after a resume record, with build and clock_start again (and a new
trial_start when it resumes from eval 0).
"""
import base64
import hashlib
import json
import os
import random
import struct
import subprocess
import tempfile

HEAD_TYPE = "application/vnd.apf.runlog-head+json"
INDEX_TYPE = "application/vnd.apf.run-index+json"
ZERO = "0" * 64
TIME_COLUMNS = ["accumulated_eval_time", "accumulated_logging_time",
                "accumulated_submission_time", "global_step",
                "preemption_count", "score", "total_duration"]


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def initial_ckpt(name):
    """A fake checkpoint 0 (the state after init_optimizer_state)."""
    return hashlib.sha256(b"init" + name.encode()).digest() * 2


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def pem_keyid(pub_pem_path):
    """Key id of docs/design.md 2.1: SHA-256 of the SubjectPublicKeyInfo DER,
    which is the PEM's base64 body."""
    with open(pub_pem_path) as f:
        body = "".join(l.strip() for l in f if l.strip() and not l.startswith("-----"))
    return sha256_hex(base64.b64decode(body))


def sign_dsse(key_path, payload_type, payload, keyid):
    """A DSSE envelope signed with OpenSSL alone: Ed25519 over the PAE."""
    t = payload_type.encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)
    # pkeyutl signs Ed25519 in one shot, so it wants a file, not a pipe.
    with tempfile.NamedTemporaryFile(prefix="apf-pae-") as f:
        f.write(pae)
        f.flush()
        sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", key_path,
                              "-rawin", "-in", f.name], capture_output=True,
                             check=True).stdout
    assert len(sig) == 64, sig
    return dumps({"payloadType": payload_type,
                  "payload": base64.b64encode(payload).decode(),
                  "signatures": [{"keyid": keyid, "sig": base64.b64encode(sig).decode()}]})


def f32(x):
    """Metrics as a float32 model computes them."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def secs(ns):
    return "%.9f" % (ns / 1e9)


def unit_name(workload, variant, study, trial):
    """study 0-based, trial 1-based, as in the log and the directories."""
    wdir = workload if variant == "base" else f"{workload}_{variant}"
    return f"study_{study}/{wdir}/trial_{trial}"


class RunDir:
    """A run directory on disk and the key that signs its log head. Its log
    is the single-log layout's RUN/log.jsonl or, in the per-unit layout (what
    apf run writes), the one unit log there is (self.unit), whose head
    index.dsse.json names too."""

    def __init__(self, path, runner_key, unit=None):
        self.path = path
        self.runner_key = runner_key
        self.want_unit = unit
        self.reload()

    def log_file(self):
        return self.file(self.log_rel)

    def head_file(self):
        return self.file(self.head_rel)

    def find_log(self):
        self.unit = None
        self.log_rel, self.head_rel = "log.jsonl", "log.dsse.json"
        if os.path.exists(self.file("log.jsonl")):
            return
        with open(self.file("run.json")) as f:
            rj = json.load(f)
        logs = []
        for u in rj["plan"]["units"]:
            name = unit_name(u["workload"], u["variant"], u["study"], u["trial"])
            if os.path.exists(self.file(name, "log.jsonl")):
                logs.append(name)
        want = getattr(self, "want_unit", None)
        if want:
            assert want in logs, f"{want} has no log"
            logs = [want]
        assert len(logs) == 1, f"RunDir takes one unit log, not {logs}"
        self.unit = logs[0]
        self.log_rel = f"{self.unit}/log.jsonl"
        self.head_rel = f"{self.unit}/log.dsse.json"

    def reload(self):
        self.find_log()
        with open(self.log_file(), "rb") as f:
            self.lines = f.read().split(b"\n")
        assert self.lines[-1] == b"", "log ends without a newline"
        self.lines.pop()
        self.records = [json.loads(l) for l in self.lines]
        with open(self.file("run.json"), "rb") as f:
            self.run_json_bytes = f.read()
        self.run_json = json.loads(self.run_json_bytes)

    def file(self, *rel):
        return os.path.join(self.path, *rel)

    # ---- finding records ------------------------------------------------

    def units(self):
        seen = []
        for r in self.records:
            if r["event"] == "trial_start" and r["unit"] not in seen:
                seen.append(r["unit"])
        return seen

    def find(self, event, unit=None, **fields):
        """Indexes of the records of an event (of a unit) with these fields."""
        return [i for i, r in enumerate(self.records)
                if r["event"] == event and (unit is None or r.get("unit") == unit)
                and all(r.get(k) == v for k, v in fields.items())]

    def unit_records(self, unit):
        return [i for i, r in enumerate(self.records) if r.get("unit") == unit]

    def kept_evals(self, unit):
        """Indexes of the unit's eval records that a resume did not discard."""
        kept = []
        for i, r in enumerate(self.records):
            if r.get("unit") != unit:
                continue
            if r["event"] == "eval":
                kept.append(i)
            elif r["event"] == "resume":
                kept = [k for k in kept if self.records[k]["index"] <= r["from_eval"]]
        return kept

    def trial_end(self, unit):
        return self.find("trial_end", unit)[-1]

    # ---- rewriting -------------------------------------------------------

    def chain(self, records):
        out, prev = [], ZERO
        for seq, r in enumerate(records):
            d = {"seq": seq, "prev": prev, "t_ns": r["t_ns"], "event": r["event"]}
            for k, v in r.items():
                if k not in d:
                    d[k] = v
            line = dumps(d).encode()
            out.append(line)
            prev = sha256_hex(line)
        return out

    def write_lines(self, lines):
        with open(self.log_file(), "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines))
        self.lines = list(lines)
        self.records = [json.loads(l) for l in lines]

    def save(self, sign=True, key=None, keyid=None):
        """Rewrites the log from self.records with a correct chain, and signs
        the new head (what a runner that lies would do)."""
        self.write_lines(self.chain(self.records))
        if sign:
            self.sign_head(key=key, keyid=keyid)

    def sign_head(self, records=None, key=None, keyid=None):
        """Signs the head of the first `records` lines (default: all)."""
        n = len(self.lines) if records is None else records
        head = sha256_hex(self.lines[n - 1]) if n else ZERO
        payload = dumps({"format": "apf-runlog-head-v1",
                         "run_json_sha256": sha256_hex(self.run_json_bytes),
                         "records": n, "head": head}).encode()
        key = key or self.runner_key
        keyid = keyid or self.run_json["runner"]["keyid"]
        env = sign_dsse(key, HEAD_TYPE, payload, keyid)
        with open(self.head_file(), "w") as f:
            f.write(env)
        if self.unit and n and json.loads(self.lines[n - 1])["event"] == "run_end":
            self.sign_index({self.unit: {"records": n, "head": head}}, key, keyid)

    def index_units(self):
        with open(self.file("index.dsse.json")) as f:
            env = json.load(f)
        return json.loads(base64.b64decode(env["payload"]))["units"]

    def sign_index(self, units, key=None, keyid=None, replace=False):
        """index.dsse.json naming these units' heads (added to the ones it
        names, or instead of them), signed."""
        all_units = {} if replace else self.index_units()
        all_units.update(units)
        payload = json.dumps({"format": "apf-run-index-v1",
                              "run_json_sha256": sha256_hex(self.run_json_bytes),
                              "units": all_units}, separators=(",", ":"),
                             sort_keys=True).encode()
        env = sign_dsse(key or self.runner_key, INDEX_TYPE, payload,
                        keyid or self.run_json["runner"]["keyid"])
        with open(self.file("index.dsse.json"), "w") as f:
            f.write(env)

    def write_run_json(self, obj):
        self.run_json_bytes = (json.dumps(obj, indent=2) + "\n").encode()
        self.run_json = obj
        with open(self.file("run.json"), "wb") as f:
            f.write(self.run_json_bytes)

    def write_csv(self, unit):
        """eval_measurements.csv of a unit as the runner writes it."""
        evals = [self.records[i] for i in self.kept_evals(unit)]
        metrics = []
        for e in evals:
            for k in e["metrics"]:
                if k not in metrics:
                    metrics.append(k)
        cols = TIME_COLUMNS + metrics
        rows = [",".join(cols)]
        for e in evals:
            v = {"accumulated_eval_time": secs(e["accumulated_eval_ns"]),
                 "accumulated_logging_time": secs(e["accumulated_logging_ns"]),
                 "accumulated_submission_time": secs(e["accumulated_submission_ns"]),
                 "global_step": str(e["global_step"]),
                 "preemption_count": str(e["preemption_count"]),
                 "score": secs(e["accumulated_submission_ns"]),
                 "total_duration": secs(e["total_duration_ns"])}
            for k in metrics:
                v[k] = "%.9g" % e["metrics"][k] if k in e["metrics"] else ""
            rows.append(",".join(v[c] for c in cols))
        p = self.file(unit, "eval_measurements.csv")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("\n".join(rows) + "\n")

    def write_outputs(self, unit, rng):
        """hparams.json and the checkpoints of a unit's kept evals."""
        start = self.records[self.find("trial_start", unit)[0]]
        d = self.file(unit)
        os.makedirs(os.path.join(d, "ckpt"), exist_ok=True)
        with open(os.path.join(d, "hparams.json"), "w") as f:
            f.write(json.dumps(start["hparams"], indent=2) + "\n")
        self.write_csv(unit)


class UnitScript:
    """How one unit goes. end: budget | targets | max_steps | complete |
    fault. crash: (c, j): the process dies after eval c and part of block
    c + 1, and the unit resumes from eval j <= c (evals j+1..c discarded).
    val_at / test_at: the eval at which the validation / test metric first
    meets its target (None: never; "budget": the eval at or past the
    budget, which ends the unit)."""

    def __init__(self, end="budget", crash=None, val_at=None, test_at=None,
                 evals=None, step_ns=None):
        self.end, self.crash = end, crash
        self.val_at, self.test_at = val_at, test_at
        self.evals, self.step_ns = evals, step_ns


class FakeRun:
    """Writes a valid run directory of an entry packed from the test's
    submission (tests/e2e/apftest.py ApfCase)."""

    def __init__(self, case, seed=1, scripts=None, variant_units=(),
                 interleave=False, complete=True, device="cpu", sealed=True,
                 workload="tiny", ruleset="external", extra_metrics=0,
                 outputs=True, ckpt_bytes=None, split_after=()):
        self.case = case
        self.rng = random.Random(seed)
        self.scripts = scripts or {}
        self.variant_units = variant_units   # [(variant, study, trial0)]: see units()
        self.interleave = interleave
        self.complete = complete
        self.device = device
        self.sealed = sealed
        self.workload = workload
        self.ruleset = ruleset
        self.extra_metrics = extra_metrics
        # outputs=False writes the log only (benchmarks of the log checks);
        # ckpt_bytes fixes the checkpoints' size (default: 64 to 127).
        self.outputs = outputs
        self.ckpt_bytes = ckpt_bytes
        # Units run by separate `apf run`s: a session ends after each unit
        # index listed.
        self.split_after = split_after

    # ---- inputs ----------------------------------------------------------

    def prepare(self):
        c = self.case
        sub = c.make_submission(name="fakesub", ruleset=self.ruleset)
        self.entry = c.path("fakesub.apf")
        # A fake run needs an entry, not a submission that builds.
        c.ok("pack", sub, "-w", self.workload, "-o", self.entry, "--no-build")
        self.runner_key = c.path("runner.key.pem")
        self.runner_pub = c.path("runner.pub.pem")
        if not os.path.exists(self.runner_key):  # one runner per test
            out = c.ok("keygen", "-o", c.path("runner")).out
            assert pem_keyid(self.runner_pub) in out, out
        self.runner_keyid = pem_keyid(self.runner_pub)
        self.plan = json.loads(c.ok("plan", self.entry, "--json").out)
        self.statement = json.loads(c.ok("inspect", self.entry, "--json").out)
        self.environment = json.loads(c.ok("env", "--json").out)
        self.spec = read_workload_ini(os.path.join(c.env["APF_WORKLOADS_DIR"],
                                                   self.workload, "workload.ini"),
                                      "gpu" if self.device == "cuda" else "cpu")

    # ---- one unit --------------------------------------------------------

    def unit_records(self, u, clock):
        """The records of unit u (dict with workload, variant, study,
        trial0, hparams), on a supervisor clock starting at `clock`."""
        rng, spec = self.rng, self.spec
        name = unit_name(u["workload"], u["variant"], u["study"], u["trial0"] + 1)
        script = self.scripts.get(name, UnitScript())
        budget = spec["budget"]
        period = int(round(float(budget["eval_period_s"]) * 1e9))
        budget_ns = int(round(float(budget["max_runtime_s"]) *
                              self.plan["budget_multiplier"] * 1e9))
        max_steps = int(spec["workload"]["max_steps"])
        vt = float(spec["variant"].get(u["variant"], {}).get(
            "validation_target", spec["workload"]["validation_target"]))
        tt = float(spec["variant"].get(u["variant"], {}).get(
            "test_target", spec["workload"]["test_target"]))
        metric = spec["workload"]["metric"]
        direction = spec["workload"]["direction"]
        sign = 1 if direction == "max" else -1
        # A step takes long enough that max_steps is not reached before the
        # budget unless the script asks for it.
        step_ns = script.step_ns or (period // 8 + rng.randrange(1000))
        recs = []
        t = clock

        def rec(event, t_ns, **f):
            r = {"t_ns": t_ns, "event": event, "unit": name}
            r.update(f)
            recs.append(r)
            return r

        def trial_start(t):
            rec("trial_start", t, workload=u["workload"], variant=u["variant"],
                study=u["study"], trial=u["trial0"] + 1, hparams=u["hparams"],
                budget_ns=budget_ns, eval_period_ns=period, max_steps=max_steps,
                validation_target=vt, test_target=tt, metric=metric,
                direction=direction,
                init_allowance_ns=max(5_000_000_000, budget_ns // 100))
            st["fresh"] = True
            return t + 1_000_000 + rng.randrange(10_000)

        def build(t):
            rec("build", t, so_sha256=sha256_hex(b"so" + name.encode()),
                compiler="gcc 12.2.0", flags=["-O2", "-fPIC"],
                build_ns=900_000)
            return t + 5_000_000 + rng.randrange(10_000)

        def clock_start(t):
            """The supervisor's trial is ready: the clock starts. The next
            block starts a little later, and its eval is due a period after
            this (after the first step, for a fresh trial)."""
            extra = {}
            if st.pop("fresh", False):
                # From scratch: the state init_optimizer_state left.
                extra["checkpoint"] = {"file": "ckpt/0.bin",
                                       "sha256": sha256_hex(initial_ckpt(name)),
                                       "bytes": 64}
            rec("clock_start", t, init_ns=3_000_000, submission_init_ns=1_000_000,
                batch_size=32, memory_limit={"bytes": 16 << 30, "mechanism": "cgroup1"},
                **extra)
            st["ref"] = t
            st["after_clock"] = True

        st = {"k": 0, "step": 0, "sub": 0, "ev": 0, "log": 0, "ref": 0,
              "after_clock": True, "pre": 0, "ttt": None, "kept": []}
        clock_start(build(trial_start(t)))

        def metric_value(k, at, target):
            """Crosses the target at eval `at` (never when None)."""
            if at == "budget":
                at = k if st["sub"] >= budget_ns else None
            if at is None:
                return f32(target - sign * (0.2 + 0.01 / k))
            return f32(target + sign * 0.01 * (k - at + 0.5))

        def metrics(k):
            m = {"train/loss": f32(2.3 / (1 + 0.3 * k)),
                 f"train/{metric}": f32(0.1 + 0.8 * (1 - 1 / (1 + 0.2 * k))),
                 f"validation/{metric}": metric_value(k, script.val_at, vt),
                 "validation/loss": f32(2.3 / (1 + 0.25 * k)),
                 "validation/num_examples": 64,
                 f"test/{metric}": metric_value(k, script.test_at, tt),
                 "test/loss": f32(2.3 / (1 + 0.24 * k)),
                 "test/num_examples": 64}
            for x in range(self.extra_metrics):
                m[f"train/extra_{x}"] = f32(rng.random())
            return m

        def met(v, target):
            return v >= target if sign > 0 else v <= target

        evals_cap = script.evals
        crashed = False
        ended = None
        while ended is None:
            k = st["k"] + 1
            if st["after_clock"]:
                start = st["ref"] + 50_000 + rng.randrange(10_000)
            else:
                start = st["ref"] + 2_000_000 + rng.randrange(500_000)
                st["log"] += start - st["ref"]
            st["after_clock"] = False
            first = st["step"] + 1
            if k == 1:
                n = 1
            else:
                n = -(-(st["ref"] + period - start) // step_ns)
                n = max(n, 1)
            final_reason = None
            if script.end == "complete" and evals_cap and k == evals_cap and k > 1:
                n = max(1, n // 2)   # the submission said it was done
                final_reason = "complete"
            if max_steps and first + n - 1 >= max_steps:
                n = max_steps - first + 1
                final_reason = final_reason or "max_steps"
            end = start + n * step_ns
            st["step"] = first + n - 1
            st["sub"] += end - start
            rec("step_block", end, first_step=first, last_step=st["step"],
                start_ns=start, end_ns=end, accumulated_submission_ns=st["sub"])
            if script.crash and not crashed and k == script.crash[0] + 1:
                # The supervisor dies after block k; the next `apf run
                # --resume` (a new session, a new clock) resumes from eval
                # j: from scratch (a new trial_start) when j is 0.
                crashed = True
                j = script.crash[1]
                keep = [e for e in st["kept"] if e["index"] <= j]
                t = end + 7_000_000_000_000 + rng.randrange(10**9)
                recs.append({"event": "_session", "t_ns": t - 1_000_000})
                st["pre"] += 1
                rec("resume", t, cut_bytes=0, from_eval=j, preemption_count=st["pre"])
                t += 1_000_000
                if j == 0:
                    st.update(k=0, step=0, sub=0, ev=0, log=0, ttt=None, kept=[])
                    t = trial_start(t)
                else:
                    last = keep[-1]
                    st.update(k=j, step=last["global_step"],
                              sub=last["accumulated_submission_ns"],
                              ev=last["accumulated_eval_ns"],
                              log=last["accumulated_logging_ns"], kept=keep,
                              ttt=next((e["accumulated_submission_ns"] for e in keep
                                        if e["validation_target_met"]), None))
                clock_start(build(t))
                continue
            # Why the trial reported: the submission's word or max_steps
            # may come before the period; every other eval is due.
            why = final_reason if final_reason in ("complete", "max_steps") else "due"
            eval_end = end + 40_000_000 + rng.randrange(1_000_000)
            st["ev"] += eval_end - end
            m = metrics(k)
            vm = met(m[f"validation/{metric}"], vt)
            tm = met(m[f"test/{metric}"], tt)
            if vm and st["ttt"] is None:
                st["ttt"] = st["sub"]
            if vm and tm:
                final_reason = "targets"
            elif st["sub"] >= budget_ns:
                final_reason = "budget"
            elif script.end == "complete" and evals_cap and k >= evals_cap:
                final_reason = "complete"
            ck_bytes = self.ckpt_bytes or 64 + rng.randrange(64)
            ck = rng.randbytes(ck_bytes) if self.outputs else name.encode() + b"%d" % k
            e = rec("eval", eval_end + 1_000_000, index=k, global_step=st["step"],
                    start_ns=end, end_ns=eval_end,
                    accumulated_submission_ns=st["sub"], accumulated_eval_ns=st["ev"],
                    accumulated_logging_ns=st["log"],
                    total_duration_ns=st["sub"] + st["ev"] + st["log"],
                    preemption_count=st["pre"], metrics=m,
                    validation_target_met=vm, test_target_met=tm,
                    checkpoint={"file": f"{name}/ckpt/{k}.bin",
                                "sha256": sha256_hex(ck), "bytes": ck_bytes},
                    why=why)
            e["_ckpt"] = ck
            st["kept"].append(e)
            st["k"] = k
            st["ref"] = eval_end
            if final_reason:
                ended = final_reason
            elif script.end == "fault" and evals_cap and k >= evals_cap:
                rec("sandbox_fault", eval_end + 3_000_000, kind="syscall",
                    detail="blocked syscall ptrace (101)")
                ended = "fault"
        last_t = recs[-1]["t_ns"] + 2_000_000
        rec("trial_end", last_t, reason=ended, failed=ended in ("fault", "error"),
            global_step=st["step"], evals=len(st["kept"]),
            accumulated_submission_ns=st["sub"], time_to_target_ns=st["ttt"])
        return recs

    # ---- the run ---------------------------------------------------------

    def units(self):
        us = []
        for pu in self.plan["units"]:
            us.append(dict(workload=pu["workload"], variant="base", study=pu["study"],
                           trial0=pu["trial"] - 1, hparams=pu["hparams"]))
        # A drawn variant runs a copy of every unit of its base, as the
        # runner's plan has it (verify's check 6 wants them all): the units
        # named in variant_units first, the rest after.
        named = [(v, s, t) for v, s, t in self.variant_units]
        for variant in sorted({v for v, _, _ in self.variant_units}):
            named += [(variant, p["study"], p["trial"] - 1) for p in self.plan["units"]
                      if (variant, p["study"], p["trial"] - 1) not in named]
        for variant, study, trial0 in named:
            pu = next(p for p in self.plan["units"]
                      if p["study"] == study and p["trial"] == trial0 + 1)
            us.append(dict(workload=pu["workload"], variant=variant, study=study,
                           trial0=trial0, hparams=pu["hparams"]))
        return us

    def write(self, path, load=True):
        """Writes the run directory; returns its RunDir (None without
        `load`, which spares a huge log's reading back)."""
        self.prepare()
        os.makedirs(path)
        with open(self.entry, "rb") as f:
            entry_bytes = f.read()
        with open(os.path.join(path, "entry.apf"), "wb") as f:
            f.write(entry_bytes)
        us = self.units()
        tuning = self.statement["statement"]["predicate"]["tuning"]
        run_json = {
            "format": "apf-run-v1",
            "submission": self.statement["statement"]["predicate"]["submission"]["name"],
            "entry": {"file": os.path.basename(self.entry),
                      "sha256": sha256_hex(entry_bytes),
                      "manifest_sha256": self.plan["manifest_sha256"],
                      "signer": self.statement["signature"]["keyid"]},
            "runner": {"keyid": self.runner_keyid, "host": "fakehost",
                       "apf_version": "0.1.0", "build": "runfake"},
            "device": self.device, "sealed": self.sealed, "threads": 1,
            "plan": {"ruleset": tuning["ruleset"], "rules": tuning["rules"],
                     "studies": tuning["studies"], "trials": tuning["trials"],
                     "seed": tuning["seed"],
                     "budget_multiplier": tuning["budget_multiplier"],
                     "units": [{"workload": u["workload"], "variant": u["variant"],
                                "study": u["study"], "trial": u["trial0"] + 1} for u in us]},
            "environment": self.environment,
            "created": "2024-05-01T12:00:00Z",
        }
        run_json_bytes = (json.dumps(run_json, indent=2) + "\n").encode()
        with open(os.path.join(path, "run.json"), "wb") as f:
            f.write(run_json_bytes)
        clock = 1_000_000_000_000 + self.rng.randrange(10**9)

        def session(t):
            """What every `apf run` into the directory logs first."""
            recs = [{"t_ns": t, "event": "run_start",
                     "run_json_sha256": sha256_hex(run_json_bytes),
                     "entry_sha256": run_json["entry"]["sha256"],
                     "manifest_sha256": run_json["entry"]["manifest_sha256"],
                     "sealed": self.sealed, "device": self.device, "threads": 1}]
            if not self.sealed:
                recs.append({"t_ns": t + 1000, "event": "unsealed",
                             "reason": "user namespaces are disabled (--unsealed)"})
            return recs

        head = session(clock)
        per_unit = []
        for i, u in enumerate(us):
            # Units run by separate processes have unrelated clocks.
            recs = self.unit_records(u, clock + 10_000_000 + self.rng.randrange(10**6))
            if i in self.split_after:
                t = recs[-1]["t_ns"] + 10**12
                recs += [{"event": "_end_session", "t_ns": recs[-1]["t_ns"] + 1000},
                         {"event": "_session", "t_ns": t}]
            per_unit.append(recs)
            clock = per_unit[-1][-1]["t_ns"] if not self.interleave else \
                clock + 10**12 * (len(per_unit))
        if self.interleave:
            body = merge_keep_order(per_unit, self.rng)
        else:
            body = [r for recs in per_unit for r in recs]
        records = list(head)

        def run_end(t):
            """Closes the last session, counting its trial_ends."""
            last = max(i for i, r in enumerate(records) if r["event"] == "run_start")
            ends = [r for r in records[last:] if r["event"] == "trial_end"]
            failed = sum(1 for r in ends if r["failed"])
            return {"t_ns": t, "event": "run_end", "units": len(ends),
                    "completed": len(ends) - failed, "failed": failed}

        for r in body:
            # A crashed supervisor's work goes on in a new session.
            if r["event"] == "_session":
                records.extend(session(r["t_ns"]))
            elif r["event"] == "_end_session":
                records.append(run_end(r["t_ns"]))
            else:
                records.append(r)
        if self.complete:
            records.append(run_end(records[-1]["t_ns"] + 1_000_000))
        ckpts = {}
        for r in records:
            if r["event"] == "eval":
                ckpts[(r["unit"], r["index"])] = r.pop("_ckpt")
        run = RunDir.__new__(RunDir)
        run.path, run.runner_key = path, self.runner_key
        # The fake writes the single-log layout.
        run.unit, run.log_rel, run.head_rel = None, "log.jsonl", "log.dsse.json"
        run.run_json, run.run_json_bytes = run_json, run_json_bytes
        run.records = records
        run.lines = run.chain(records)
        with open(run.file("log.jsonl"), "wb") as f:
            f.write(b"".join(l + b"\n" for l in run.lines))
        run.sign_head()
        for name in run.units() if self.outputs else ():
            run.write_outputs(name, self.rng)
            if run.find("clock_start", name):
                with open(run.file(name, "ckpt", "0.bin"), "wb") as f:
                    f.write(initial_ckpt(name))
            for i in run.kept_evals(name):
                e = run.records[i]
                with open(run.file(name, "ckpt", f"{e['index']}.bin"), "wb") as f:
                    f.write(ckpts[(name, e["index"])])
        if self.variant_units:
            with open(os.path.join(path, "heldout.json"), "w") as f:
                json.dump({"seed": "ab" * 32,
                           "draws": [{"base": self.workload, "variant": v}
                                     for v in sorted({v for v, _, _ in self.variant_units})]},
                          f, indent=2)
        return RunDir(path, self.runner_key) if load else None


def merge_keep_order(lists, rng):
    """Interleaves lists at random, each keeping its own order."""
    idx = [0] * len(lists)
    out = []
    while True:
        live = [i for i, l in enumerate(lists) if idx[i] < len(l)]
        if not live:
            return out
        i = rng.choice(live)
        n = rng.randrange(1, 4)
        out.extend(lists[i][idx[i]:idx[i] + n])
        idx[i] += n


def read_workload_ini(path, hw="cpu"):
    """The few workload.ini values the generator needs."""
    import configparser
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    cp.read(path)
    spec = {"workload": dict(cp["workload"]), "budget": dict(cp["budget." + hw]),
            "variant": {}}
    for s in cp.sections():
        if s.startswith("variant."):
            spec["variant"][s[len("variant."):]] = dict(cp[s])
    return spec
