/*
 * slurm.c: `apf run --slurm`: the plan's unfinished units as one Slurm job
 * array, with Slurm's own tools (sbatch to submit, squeue to see whether an
 * earlier array of the run is still there, scontrol to requeue a preempted
 * task); no scheduler of apf's own.
 *
 * The run directory is made (or checked) on the submitting machine; then
 * RUN/slurm/ gets, per submission, units-<stamp>.tsv (array task i runs line
 * i + 1: workload, study, trial, variant) and task.sh, the batch script
 * every task runs: `apf run RUN/entry.apf -o RUN --workload W --variant V
 * --study K --trial N --resume` in the background (one unit: a held-out
 * variant's unit shares the rest with its base unit), SIGUSR1 and SIGTERM passed on to it (Slurm
 * sends USR1 90 s before the time limit, --signal=B:USR1@90, and TERM when
 * it preempts), and, when such a signal made it checkpoint and stop, the
 * task requeued (`scontrol requeue`), so that it resumes from that
 * checkpoint. Job ids go to RUN/slurm/jobs, one a line.
 *
 * Cluster assumptions: RUN is on a file system every node shares (with
 * working flock, as NFS has on Linux); every node has the same apf build at
 * the same path, the entry's workloads and datasets, and the runner key
 * (each task checks the entry, the inputs and its node's environment
 * against the manifest, as apf run does, and refuses what differs).
 */
#include "runner/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "entry/entry.h"
#include "runner/internal.h"
#include "tuning/tuning.h"

extern char **environ;

/* Single quotes for sh, every ' as '\'' . */
static int sh_quote(apf_buf *b, const char *s)
{
	int rc = apf_buf_puts(b, "'");
	for (const char *p = s; !rc && *p; p++)
		rc = *p == '\'' ? apf_buf_puts(b, "'\\''")
				: apf_buf_append(b, p, 1);
	return rc ? rc : apf_buf_puts(b, "'");
}

/* Runs argv, its stdout into out (capped); 0 when it exited 0. */
static int run_tool(char *const argv[], apf_buf *out, const char *what)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return apf_error_errno(APF_EIO, errno, what, "pipe");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	pid_t pid;
	int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (e) {
		close(p[0]);
		return apf_error_errno(APF_EINPUT, e, what, "cannot run %s",
				       argv[0]);
	}
	char buf[4096];
	ssize_t n;
	while ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0 && out->len < (1u << 20))
			apf_buf_append(out, buf, (size_t)n);
	close(p[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return apf_error(APF_EINPUT, what, "%s failed (status %d)",
				 argv[0], status);
	return 0;
}

/* An earlier array of this run that Slurm still has (queued or running):
 * resubmitting now would run its units twice. */
static int earlier_array_active(const char *jobs_path, char *active,
				size_t size)
{
	char *text = NULL;
	size_t len = 0;
	if (apf_file_read(&text, &len, jobs_path, 1 << 20)) {
		apf_error_clear();
		return 0;
	}
	int found = 0;
	for (char *line = strtok(text, "\n"); line && !found;
	     line = strtok(NULL, "\n")) {
		char *argv[] = {"squeue", "-h", "-j", line, "-o", "%i", NULL};
		apf_buf out = {0};
		if (run_tool(argv, &out, "squeue") == 0 && out.len)
			found = snprintf(active, size, "%s", line) > 0;
		apf_error_clear();
		apf_buf_free(&out);
	}
	free(text);
	return found;
}

static int write_script(struct run *r, const char *path, const char *units)
{
	const struct apf_run_opts *o = r->o;
	apf_buf b = {0}, cmd = {0};
	char *entry = apf_path_join(r->run_dir, "entry.apf");
	int rc = entry ? 0 : apf_error(APF_ENOMEM, "run", "out of memory");
	/* The command every task runs, its unit read from the units file. */
	if (!rc)
		rc = sh_quote(&cmd, r->exe) || apf_buf_puts(&cmd, " run ") ||
		     sh_quote(&cmd, entry) || apf_buf_puts(&cmd, " -o ") ||
		     sh_quote(&cmd, r->run_dir) ||
		     apf_buf_printf(&cmd, " --threads %d --device %s -q --resume",
				    r->threads, r->device);
	if (!rc && o->key_path)
		rc = apf_buf_puts(&cmd, " -k ") || sh_quote(&cmd, o->key_path);
	if (!rc && o->trust_key)
		rc = apf_buf_puts(&cmd, " --entry-key ") ||
		     sh_quote(&cmd, o->trust_key);
	if (!rc && o->unsealed)
		rc = apf_buf_puts(&cmd, " --unsealed");
	if (!rc && o->allow_env_drift)
		rc = apf_buf_puts(&cmd, " --allow-env-drift");
	if (!rc && o->memory_limit)
		rc = apf_buf_printf(&cmd, " --memory-limit %llu",
				    (unsigned long long)(o->memory_limit >> 20));
	if (!rc) {
		rc = apf_buf_puts(&b,
			"#!/bin/sh\n"
			"# apf run --slurm: one unit of the plan per array task "
			"(line TASK+1 of the\n# units file: workload, study, "
			"trial, variant), into the shared run directory.\n"
			"set -u\nunits=") ||
		     sh_quote(&b, units) ||
		     apf_buf_printf(&b, "\n%s",
			"line=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" \"$units\")\n"
			"w=$(printf '%s' \"$line\" | cut -f1)\n"
			"s=$(printf '%s' \"$line\" | cut -f2)\n"
			"t=$(printf '%s' \"$line\" | cut -f3)\n"
			"v=$(printf '%s' \"$line\" | cut -f4)\n"
			"[ -n \"$v\" ] || { echo \"apf: slurm: task $SLURM_ARRAY_TASK_ID: "
			"no unit in $units\" >&2; exit 2; }\n"
			"got=\n") ||
		     apf_buf_puts(&b, cmd.data) ||
		     apf_buf_puts(&b,
			" --workload \"$w\" --variant \"$v\" --study \"$s\" "
			"--trial \"$t\" &\n"
			"pid=$!\n"
			"# Slurm's warning (USR1) or preemption (TERM): apf "
			"checkpoints at the end\n# of its current step and "
			"stops; the task is then requeued to resume.\n"
			"trap 'got=1; kill -USR1 $pid 2>/dev/null' USR1\n"
			"trap 'got=1; kill -TERM $pid 2>/dev/null' TERM\n"
			"rc=0\n"
			"wait $pid || rc=$?\n"
			"while kill -0 $pid 2>/dev/null; do rc=0; wait $pid || rc=$?; done\n"
			"if [ -n \"$got\" ] && [ \"$rc\" -eq 3 ]; then\n"
			"\tscontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
			"\texit 0\n"
			"fi\n"
			"exit $rc\n");
		if (rc)
			rc = apf_error(APF_ENOMEM, "run", "out of memory");
	}
	if (!rc)
		rc = apf_file_write(path, b.data, b.len, 0755, 0);
	apf_buf_free(&b);
	apf_buf_free(&cmd);
	free(entry);
	return rc;
}

int apf_runner_slurm_submit(struct run *r, const size_t *units, size_t n)
{
	struct apf_slurm_opts *so = r->o->slurm;
	so->job_id[0] = 0;
	so->submitted = 0;
	if (!n) {
		apf_runner_notice(r, "%s: every selected unit has ended; nothing "
				     "to submit",
				  r->run_dir);
		return 0;
	}
	char *real = realpath(r->run_dir, NULL);
	if (!real)
		return apf_error_errno(APF_EIO, errno, r->run_dir, "realpath");
	free(r->run_dir);
	r->run_dir = real;
	char *dir = apf_path_join(r->run_dir, "slurm");
	char *jobs = dir ? apf_path_join(dir, "jobs") : NULL;
	int rc = jobs ? apf_mkdirs(dir, 0755)
		      : apf_error(APF_ENOMEM, "run", "out of memory");
	char active[64];
	if (!rc && earlier_array_active(jobs, active, sizeof active))
		rc = apf_error(APF_EINPUT, r->run_dir,
			       "job %s of this run is still queued or running "
			       "(squeue): wait for it or scancel it before "
			       "resubmitting",
			       active);
	/* units-<stamp>.tsv: line i + 1 is array task i's unit. */
	char stamp[64];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(stamp, sizeof stamp, "%lld-%09ld", (long long)ts.tv_sec,
		 ts.tv_nsec);
	apf_buf tsv = {0}, upath = {0}, spath = {0};
	int nomem = 0;
	for (size_t k = 0; !rc && k < n; k++) {
		const struct apf_plan_unit *u = &r->plan->units[units[k]];
		nomem |= apf_buf_printf(&tsv, "%s\t%ld\t%ld\t%s\n",
					u->workload, u->study, u->trial + 1,
					u->variant) != 0;
	}
	if (!rc) {
		nomem |= apf_buf_printf(&upath, "%s/units-%s.tsv", dir, stamp) != 0;
		nomem |= apf_buf_printf(&spath, "%s/task-%s.sh", dir, stamp) != 0;
		if (nomem)
			rc = apf_error(APF_ENOMEM, "run", "out of memory");
	}
	if (!rc)
		rc = apf_file_write(upath.data, tsv.data, tsv.len, 0644, 0);
	if (!rc)
		rc = write_script(r, spath.data, upath.data);
	/* sbatch --parsable ... task.sh */
	char array[64], out[600], name[200];
	if (so->array_parallelism > 0)
		snprintf(array, sizeof array, "--array=0-%zu%%%ld", n - 1,
			 so->array_parallelism);
	else
		snprintf(array, sizeof array, "--array=0-%zu", n - 1);
	snprintf(out, sizeof out, "--output=%s/%%A_%%a.out", dir);
	snprintf(name, sizeof name, "--job-name=apf-%s",
		 r->entry->manifest->submission.name);
	char cpus[48];
	snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", r->threads);
	size_t na = 0, cap = 16 + so->nsbatch_args;
	char **argv = apf_calloc(cap, sizeof *argv);
	apf_buf part = {0}, gres = {0}, tm = {0};
	if (!rc && !argv)
		rc = apf_error(APF_ENOMEM, "run", "out of memory");
	if (!rc) {
		argv[na++] = (char *)(so->sbatch ? so->sbatch : "sbatch");
		argv[na++] = "--parsable";
		argv[na++] = name;
		argv[na++] = array;
		argv[na++] = "--requeue";
		argv[na++] = "--signal=B:USR1@90";
		argv[na++] = out;
		argv[na++] = cpus;
		if (so->partition && !apf_buf_printf(&part, "--partition=%s",
						     so->partition))
			argv[na++] = part.data;
		if (so->gres && !apf_buf_printf(&gres, "--gres=%s", so->gres))
			argv[na++] = gres.data;
		if (so->time && !apf_buf_printf(&tm, "--time=%s", so->time))
			argv[na++] = tm.data;
		for (size_t k = 0; k < so->nsbatch_args; k++)
			argv[na++] = so->sbatch_args[k];
		argv[na++] = spath.data;
		argv[na] = NULL;
	}
	apf_buf got = {0};
	if (!rc)
		rc = run_tool(argv, &got, "sbatch");
	if (!rc) {
		/* --parsable: "<job id>[;<cluster>]\n" */
		size_t k = 0;
		while (k < got.len && k < sizeof so->job_id - 1 &&
		       got.data[k] >= '0' && got.data[k] <= '9')
			k++;
		if (!k)
			rc = apf_error(APF_EINPUT, "sbatch",
				       "printed no job id");
		else {
			memcpy(so->job_id, got.data, k);
			so->job_id[k] = 0;
			so->submitted = n;
		}
	}
	if (!rc) {
		int fd = open(jobs, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		char line[80];
		int len = snprintf(line, sizeof line, "%s\n", so->job_id);
		if (fd < 0 || apf_write_all(fd, line, (size_t)len, jobs))
			rc = apf_error_errno(APF_EIO, errno, jobs, "write");
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	if (!rc)
		apf_runner_notice(r,
				  "%s: submitted job array %s: %zu unit%s, one "
				  "per task (%s; task i runs line i + 1)",
				  r->run_dir, so->job_id, n, n == 1 ? "" : "s",
				  upath.data);
	free(argv);
	apf_buf_free(&part);
	apf_buf_free(&gres);
	apf_buf_free(&tm);
	apf_buf_free(&got);
	apf_buf_free(&tsv);
	apf_buf_free(&upath);
	apf_buf_free(&spath);
	free(jobs);
	free(dir);
	return rc;
}

int apf_runner_slurm_note(const char *unit_dir)
{
	const char *job = getenv("SLURM_ARRAY_JOB_ID");
	const char *task = getenv("SLURM_ARRAY_TASK_ID");
	const char *restarts = getenv("SLURM_RESTART_COUNT");
	if (!job || !task)
		return 0;
	json_t *j = json_pack("{s:s, s:s, s:s}", "job_id", job, "array_task_id",
			      task, "restart_count", restarts ? restarts : "0");
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	char *path = apf_path_join(unit_dir, "slurm.json");
	int rc = text && path
			 ? apf_file_write(path, text, strlen(text), 0644, 0)
			 : apf_error(APF_ENOMEM, "run", "out of memory");
	free(text);
	free(path);
	return rc;
}
