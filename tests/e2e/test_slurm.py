"""End-to-end: apf run --slurm on a real single-node Slurm cluster.

Where Debian's slurm-wlm and munge are installed (scripts/deps.sh's test
group) and the test runs as root, it writes a slurm.conf for this host into
a temporary directory, starts munged, slurmctld and slurmd from it (nothing
installed or started system-wide), submits a plan of the test workload as a
job array through `apf run --slurm`, waits for it (bounded), and verifies
the run; then it sends one array task USR1 mid-trial (`scancel --signal=USR1
--batch`, as Slurm does before a time limit) to show the unit checkpoint,
the task requeue itself and resume, and the run verify. The daemons are
stopped at the end. It is skipped, with the reason, where the tools are
missing, the test is not root, or the daemons do not start.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import apftest
from test_run import RunCase, sandbox_available

TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel",
         "scontrol", "sinfo")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """munged + slurmctld + slurmd for this host, all under one directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="apf-slurm-")
        os.chmod(self.dir, 0o700)
        self.procs = []
        self.env = dict(os.environ)
        self.host = socket.gethostname().split(".")[0]

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def start(self, timeout=60):
        """None, or why the cluster did not start."""
        d = self.path
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(d(sub), mode=0o700, exist_ok=True)
        key = d("munge", "munge.key")
        r = subprocess.run(["mungekey", "--create", "--keyfile", key],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "mungekey: " + (r.stderr.strip() or r.stdout.strip())
        os.chmod(key, 0o400)
        sock = d("munge", "munge.sock")
        r = subprocess.run(["munged", "--key-file", key, "--socket", sock,
                            "--pid-file", d("munge", "munged.pid"),
                            "--log-file", d("log", "munged.log"),
                            "--seed-file", d("munge", "munged.seed"), "--force"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "munged: " + (r.stderr.strip() or r.stdout.strip())
        self.munged_pid = d("munge", "munged.pid")
        cpus = os.cpu_count() or 1
        conf = f"""ClusterName=apftest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock},cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d("state")}
SlurmdSpoolDir={d("spool")}
SlurmctldPidFile={d("slurmctld.pid")}
SlurmdPidFile={d("slurmd.pid")}
SlurmctldLogFile={d("log", "slurmctld.log")}
SlurmdLogFile={d("log", "slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
MinJobAge=30
KillWait=5
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=apf Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(d("slurm.conf"), "w") as f:
            f.write(conf)
        self.env["SLURM_CONF"] = d("slurm.conf")
        for daemon in ("slurmctld", "slurmd"):
            r = subprocess.run([daemon, "-f", d("slurm.conf")], env=self.env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                return f"{daemon}: " + (r.stderr.strip() or r.stdout.strip())
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env,
                               capture_output=True, text=True)
            state = r.stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                return None
            time.sleep(0.5)
        return f"the node did not come up within {timeout} s (sinfo: {state!r}); " \
            + self.log_tail()

    def log_tail(self):
        out = []
        for f in ("slurmctld.log", "slurmd.log"):
            try:
                with open(self.path("log", f)) as fh:
                    out.append(f + ": " + " | ".join(fh.read().splitlines()[-3:]))
            except OSError:
                pass
        return "; ".join(out)

    def stop(self):
        for pid_file in ("slurmd.pid", "slurmctld.pid", os.path.join("munge", "munged.pid")):
            try:
                with open(self.path(pid_file)) as f:
                    pid = int(f.read().strip())
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def tool(self, *args):
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True)


class Slurm(RunCase):
    @classmethod
    def setUpClass(cls):
        missing = [t for t in TOOLS if not shutil.which(t)]
        if missing:
            raise unittest.SkipTest("slurm-wlm and munge are not installed (missing: "
                                    + ", ".join(missing) + "; scripts/deps.sh test)")
        if os.geteuid() != 0:
            raise unittest.SkipTest("starting slurmctld and slurmd needs root")
        if not sandbox_available():
            raise unittest.SkipTest("the kernel refuses user namespaces here")
        cls.cluster = Cluster()
        why = cls.cluster.start()
        if why:
            cls.cluster.stop()
            raise unittest.SkipTest("the Slurm daemons did not start: " + why)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def setUp(self):
        super().setUp()
        self.env["SLURM_CONF"] = self.cluster.env["SLURM_CONF"]

    def wait_done(self, job, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.cluster.tool("squeue", "-h", "-j", job, "-o", "%i %T")
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(0.5)
        self.cluster.tool("scancel", job)
        self.fail(f"job {job} still in squeue after {timeout} s: "
                  + self.cluster.tool("squeue", "-j", job).stdout + self.cluster.log_tail())

    def test_job_array_runs_the_plan_and_a_preempted_task_resumes(self):
        from test_verify import SLOW_SUBMISSION
        self.ok("keygen")
        # A fast plan of the test workload: two units, each a task.
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", "blobs_steps", "-o", entry)
        run = self.path("run")
        r = self.ok("run", entry, "-o", run, "--study", "0", "--trial", "1", "--slurm",
                    "--threads", "1", "--time", "5", "--", "--partition=apf")
        job = r.out.strip()
        self.assertRegex(job, r"^\d+$", r)
        self.assertIn(f"submitted job array {job}: 1 unit", r.err)
        self.wait_done(job)
        self.ok("verify", run)
        st = json.loads(self.ok("status", run, "--json").out)
        u = [x for x in st["units"] if x["unit"] == "study_0/blobs_steps/trial_1"][0]
        self.assertEqual(u["state"], "done")
        self.assertEqual((u["slurm"]["job_id"], u["slurm"]["array_task_id"]), (job, "0"))
        # --slurm --resume submits only the units that have not ended.
        r = self.ok("run", entry, "-o", run, "--study", "0", "--slurm", "--resume",
                    "--threads", "1")
        job2 = r.out.strip()
        self.assertIn(f"submitted job array {job2}: 4 units", r.err)
        self.wait_done(job2)
        self.ok("verify", run)
        st = json.loads(self.ok("status", run, "--json").out)
        self.assertEqual(st["counts"]["done"], 5)

        # A slow trial, sent USR1 mid-trial: it checkpoints, the task
        # requeues itself, and the requeued task resumes from there.
        self.write("slow/submission.ini", "[submission]\nname = slow\nauthors = tests\n"
                   "ruleset = external\n[tuning]\nstudies = 1\ntrials = 1\n")
        self.write("slow/submission.c", SLOW_SUBMISSION)
        self.write("slow/tuning_search_space.ini",
                   "[learning_rate]\nmin = 1e-4\nmax = 1e-2\nscaling = log\n")
        slow = self.path("slow.apf")
        self.ok("pack", self.path("slow"), "-w", apftest.BLOBS, "-o", slow)
        srun = self.path("srun")
        r = self.ok("run", slow, "-o", srun, "--slurm", "--threads", "1")
        job3 = r.out.strip()
        name = f"study_0/{apftest.BLOBS}/trial_1"
        log = os.path.join(srun, name, "log.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.exists(log):
                with open(log, "rb") as f:
                    if f.read().count(b'"event":"eval"') >= 2:
                        break
            time.sleep(0.05)
        else:
            self.fail("the slow trial did not reach its second eval: " + self.cluster.log_tail())
        time.sleep(0.4)
        r = self.cluster.tool("scancel", "--signal=USR1", "--batch", f"{job3}_0")
        self.assertEqual(r.returncode, 0, r.stderr)
        # The task requeues itself; Slurm holds a requeued job back for the
        # credential lifetime (cred_expire, 120 s by default, 10 s here).
        self.wait_done(job3)
        recs, _ = apftest.read_chain(log)
        events = [x["event"] for x in recs]
        outs = ""
        for f in sorted(os.listdir(os.path.join(srun, "slurm"))):
            if f.endswith(".out"):
                with open(os.path.join(srun, "slurm", f)) as fh:
                    outs += f"{f}: {fh.read()}"
        self.assertIn("preempt", events, outs)
        self.assertIn("resume", events, outs)
        self.assertIn("resume", events, events)
        self.assertEqual(events[-2:], ["trial_end", "run_end"])
        v = self.ok("verify", srun)
        self.assertIn("1 resume", v.out)
        st = json.loads(self.ok("status", srun, "--json").out)
        u = st["units"][0]
        self.assertEqual((u["state"], u["preemptions"]), ("done", 1))
        self.assertEqual(u["slurm"]["restart_count"], "1")


if __name__ == "__main__":
    unittest.main()
