/*
 * unit.c: one unit of a run - build, trial, evaluations, checkpoints and
 * records - from the supervisor's side (see runner.h for the sequence).
 *
 * Timing is the supervisor's: a running interval starts when the trial is
 * resumed (SIGCONT after "go") and ends when its "eval" report arrives;
 * evaluation and logging happen while the trial is frozen and are accounted
 * apart. Nothing the trial says is trusted beyond what it can only hurt
 * itself with: its step count is bounded and monotonic, its arena is
 * checked before it is evaluated or checkpointed, and a malformed message
 * is a protocol fault.
 */
#include "runner/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "entry/entry.h"
#include "hash/hash.h"
#include "runlog/runlog.h"
#include "runner/internal.h"
#include "sandbox/sandbox.h"
#include "trial/trial.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

/* Under AddressSanitizer (make check) the sandboxed apf needs its shadow
 * memory, terabytes of address space, and its exit-time leak check would
 * ptrace: so no address-space limit and no leak check inside the sandbox;
 * and its own handlers must not turn a crash into an exit.
 * The memory-limit classification is then untestable, and its test skips. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#define ASAN_ENV \
	"ASAN_OPTIONS=detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0"
#else
#define UNDER_ASAN 0
#define ASAN_ENV NULL
#endif

#define SLOT_FACTOR 16
#define EVAL_TIMEOUT_MS (10 * 60 * 1000)
#define BUILD_TIMEOUT_MS (5 * 60 * 1000)
#define DEFAULT_MEMORY (16ull << 30)
#define SETUP_TIMEOUT_NS (10ull * 60 * 1000000000)

struct unit {
	struct run *r;
	size_t index;
	const struct apf_plan_unit *pu;
	struct unit_state *st;
	char name[512];
	char *dir, *work, *scratch, *so, *hparams;
	apf_workload_spec *spec;
	/* The supervisor's own copy of the workload: its dataset is what the
	 * trial's training split is cut from, and init_state (parameters, then
	 * model state) the initialisation the trial must leave untouched. */
	apf_backend *wl_be;
	apf_workload *wl;
	float *init_state;
	double val_target, test_target;
	size_t param_floats, state_floats, capacity;
	int arena_fd, control_fd, chan_fd, eval_fd, train_fd;
	struct apf_control *ctl;
	const void *arena_view;
	struct line_chan ch, ech;
	struct proto pr;
	pid_t eval_pid;
	apf_sandbox *sb;
	uint64_t budget_ns, eval_period_ns, grace_ns;
	uint64_t init_allowance_ns, init_ns, submission_init_ns;
	int64_t batch;
	uint64_t sub_ns, eval_ns, log_ns;
	int64_t evals, global_step, preemptions;
	uint64_t interval_start, next_due, last_eval_end;
	int64_t time_to_target_ns;
	int ended;
	/* How the trial ended when the supervisor did not end it: a fault kind
	 * of the log, or "error" (the submission's own); NULL while it runs. */
	const char *end_kind;
	char fault[APF_SANDBOX_TEXT_MAX + 64];
};

/* ---- records ---------------------------------------------------------------- */

static int record(struct unit *u, const char *event, json_t *fields, int sync)
{
	if (u->r->audit) { /* an auditor's replay logs nothing */
		json_decref(fields);
		return 0;
	}
	json_object_set_new(fields, "unit", json_string(u->name));
	/* "unit" first: move it to the front for readability. */
	json_t *ordered = json_object();
	json_object_set(ordered, "unit", json_object_get(fields, "unit"));
	const char *k;
	json_t *v;
	json_object_foreach(fields, k, v)
	{
		if (strcmp(k, "unit"))
			json_object_set(ordered, k, v);
	}
	int rc = apf_runlog_append(u->r->log, apf_now_ns(), event, ordered, sync);
	json_decref(ordered);
	json_decref(fields);
	return rc;
}

static int end_trial(struct unit *u, const char *reason, int failed,
		     const char *detail)
{
	if (u->ended)
		return 0;
	u->ended = 1;
	json_t *f = json_pack("{s:s, s:b, s:I, s:I, s:I, s:o}", "reason", reason,
			      "failed", failed, "global_step",
			      (json_int_t)u->global_step, "evals",
			      (json_int_t)u->evals, "accumulated_submission_ns",
			      (json_int_t)u->sub_ns, "time_to_target_ns",
			      u->time_to_target_ns >= 0
				      ? json_integer(u->time_to_target_ns)
				      : json_null());
	if (detail)
		json_object_set_new(f, "detail", json_string(detail));
	int rc = record(u, "trial_end", f, 1);
	if (!rc)
		rc = files_sign_head(u->r);
	if (failed)
		u->r->failed++;
	else
		u->r->completed++;
	if (!u->r->o->quiet && isatty(2))
		fprintf(stderr, "\r\033[K");
	fprintf(stderr, "apf: run: %s: %s%s\n", u->name,
		failed ? "failed: " : reason, failed ? reason : "");
	if (detail && failed) {
		/* The detail is the trial's or the compiler's text. */
		char safe[4 * sizeof u->fault];
		apf_text_escape(safe, sizeof safe, detail);
		fprintf(stderr, "apf: run: %s: %s\n", u->name, safe);
	}
	return rc;
}

static int fault(struct unit *u, const char *kind, const char *detail)
{
	json_t *f = json_pack("{s:s, s:s}", "kind", kind, "detail", detail);
	int rc = record(u, "sandbox_fault", f, 1);
	int rc2 = end_trial(u, "fault", 1, detail);
	return rc ? rc : rc2;
}

/* ---- processes ---------------------------------------------------------------- */

static const struct apf_sandbox_mount system_mounts[] = {
	{"/usr", NULL, APF_SANDBOX_READ, 0, 0},
	{"/lib", NULL, APF_SANDBOX_READ, 1, 0},
	{"/lib64", NULL, APF_SANDBOX_READ, 1, 0},
	{"/bin", NULL, APF_SANDBOX_READ, 1, 0},
	{"/etc/ld.so.cache", NULL, APF_SANDBOX_READ, 1, 0},
	{"/etc/alternatives", NULL, APF_SANDBOX_READ, 1, 0},
	{"/sys/devices/system/cpu", NULL, APF_SANDBOX_READ, 1, 0},
};
#define NSYS (sizeof system_mounts / sizeof system_mounts[0])

static void base_config(struct unit *u, struct apf_sandbox_config *c,
			struct apf_sandbox_mount *m, size_t *nm,
			const char *const *envp)
{
	memset(c, 0, sizeof *c);
	c->mode = u->r->sealed ? APF_SANDBOX_SEALED : APF_SANDBOX_UNSEALED;
	c->envp = envp;
	*nm = 0;
	for (size_t i = 0; i < NSYS; i++)
		m[(*nm)++] = system_mounts[i];
	m[(*nm)++] = (struct apf_sandbox_mount){u->r->exe, NULL,
						APF_SANDBOX_READ, 0, 0};
	c->mounts = m;
	c->scratch = u->scratch;
	c->scratch_bytes = 256ull << 20;
	c->hostname = "apf-trial";
}

static int open_log_file(struct unit *u, const char *name)
{
	/* An auditor's replay writes nothing into the run directory. */
	char *p = apf_path_join(u->r->audit ? u->work : u->dir, name);
	int fd = p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
	free(p);
	return fd;
}

/* Compiles the submission inside a sandbox in its setup phase. */
static int build(struct unit *u, char *detail, size_t size)
{
	struct run *r = u->r;
	uint64_t t0 = apf_now_ns();
	const char *argv[] = {r->exe, "__build", r->src, r->include_dir, u->so,
			      NULL};
	const char *envp[] = {"PATH=/usr/bin:/bin", "TMPDIR=", "LC_ALL=C", ASAN_ENV,
			      NULL};
	apf_buf tmpdir = {0};
	apf_buf_printf(&tmpdir, "TMPDIR=%s", u->scratch);
	envp[1] = tmpdir.data;
	struct apf_sandbox_config c;
	struct apf_sandbox_mount m[NSYS + 8];
	size_t nm;
	base_config(u, &c, m, &nm, envp);
	m[nm++] = (struct apf_sandbox_mount){r->src, NULL, APF_SANDBOX_READ, 0,
					     0};
	m[nm++] = (struct apf_sandbox_mount){r->include_dir, NULL,
					     APF_SANDBOX_READ, 0, 0};
	m[nm++] = (struct apf_sandbox_mount){u->work, NULL, APF_SANDBOX_WRITE,
					     0, 0};
	c.nmounts = nm;
	c.argv = argv;
	c.cwd = r->src;
	int logfd = open_log_file(u, "build.log");
	struct apf_sandbox_fd fds[] = {{logfd, 1}, {logfd, 2}};
	c.fds = fds;
	c.nfds = logfd >= 0 ? 2 : 0;
	c.limits = (struct apf_sandbox_limits){.address_space =
						       UNDER_ASAN ? 0 : 8ull << 30,
					       .file_size = 256ull << 20,
					       .spawns = 256};
	apf_sandbox *sb = NULL;
	int rc = apf_sandbox_spawn(&sb, &c);
	apf_sandbox_end end;
	int done = 0;
	if (!rc)
		done = apf_sandbox_wait(sb, BUILD_TIMEOUT_MS, &end);
	if (!rc && done < 0)
		rc = done;
	if (logfd >= 0)
		close(logfd);
	apf_buf_free(&tmpdir);
	if (rc) {
		apf_sandbox_free(sb);
		return rc;
	}
	if (done == 0) {
		apf_sandbox_kill(sb);
		snprintf(detail, size, "the build ran past %d s",
			 BUILD_TIMEOUT_MS / 1000);
	} else if (end.outcome != APF_SANDBOX_EXITED || end.exit_code != 0) {
		/* The last line of the build's output says why. */
		char *log = apf_path_join(u->r->audit ? u->work : u->dir,
					  "build.log"),
		     *text = NULL;
		size_t len = 0;
		if (log && apf_file_read(log, 1 << 20, &text, &len) == 0 && len) {
			while (len && text[len - 1] == '\n')
				text[--len] = 0;
			char *last = strrchr(text, '\n');
			snprintf(detail, size, "%s",
				 end.outcome == APF_SANDBOX_EXITED
					 ? (last ? last + 1 : text)
					 : end.reason);
		} else {
			snprintf(detail, size, "%s", end.reason);
		}
		free(text);
		free(log);
	} else {
		detail[0] = 0;
	}
	apf_sandbox_free(sb);
	uint8_t d[APF_SHA256_LEN];
	char hex[65] = "";
	if (!detail[0] && apf_sha256_file(u->so, d, NULL) == 0)
		apf_hex(hex, d, sizeof d);
	else if (!detail[0])
		snprintf(detail, size, "the build left no shared object");
	if (detail[0])
		return 0;
	json_t *flags = json_array();
	for (const char *const *f = apf_submission_cflags; *f; f++)
		json_array_append_new(flags, json_string(*f));
	char compiler[200] = "cc";
	FILE *p = popen("cc --version 2>/dev/null", "r");
	if (p) {
		if (fgets(compiler, sizeof compiler, p))
			compiler[strcspn(compiler, "\n")] = 0;
		pclose(p);
	}
	json_t *f = json_pack("{s:s, s:s, s:o, s:I}", "so_sha256", hex,
			      "compiler", compiler, "flags", flags, "build_ns",
			      (json_int_t)(apf_now_ns() - t0));
	return record(u, "build", f, 0);
}

/* What the trial and evaluator processes are told; the same for a run,
 * a replay and a re-evaluation, so an audit runs what the runner ran. */
static struct unit_args unit_args_of(const struct unit *u)
{
	const struct run *r = u->r;
	return (struct unit_args){
		.workloads_dir = r->workloads_dir,
		.workload = u->pu->workload,
		.variant = u->pu->variant,
		.seed = r->entry->manifest->tuning.seed,
		.study = (uint32_t)u->pu->study,
		.trial = (uint32_t)u->pu->trial + 1,
		.threads = r->threads,
		.device = r->device,
		.so = u->so,
		.hparams = u->hparams,
		.max_steps = u->spec ? u->spec->max_steps : 0,
		.step_hint = u->spec ? u->spec->max_steps : 0,
		.budget_s = (double)u->budget_ns / 1e9,
		.arena_bytes = u->capacity};
}

static int spawn_evaluator(struct unit *u, struct unit_args *a)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return apf_error_errno(APF_EIO, errno, "run", "socketpair");
	char *argv[40];
	size_t n = 0;
	apf_buf storage = {0};
	argv[n++] = u->r->exe;
	argv[n++] = "__eval";
	int rc = unit_args_to_argv(a, 0, argv, &n, &storage);
	argv[n] = NULL;
	int logfd = open_log_file(u, "evaluator.log");
	pid_t pid = rc ? -1 : fork();
	if (pid == 0) {
		/* Child: only async-signal-safe calls until exec. Descriptors
		 * go up out of the way first, so none lands on another's
		 * target, and dup2 clears close-on-exec on the copies. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int arena = fcntl(u->arena_fd, F_DUPFD_CLOEXEC, 100);
		int chan = fcntl(sv[1], F_DUPFD_CLOEXEC, 100);
		int log = logfd >= 0 ? fcntl(logfd, F_DUPFD_CLOEXEC, 100) : -1;
		if (arena < 0 || chan < 0 || dup2(arena, FD_ARENA) < 0 ||
		    dup2(chan, FD_CHANNEL) < 0)
			_exit(126);
		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		execv(u->r->exe, argv);
		_exit(127);
	}
	close(sv[1]);
	if (logfd >= 0)
		close(logfd);
	apf_buf_free(&storage);
	if (pid < 0) {
		close(sv[0]);
		return rc ? rc : apf_error_errno(APF_EIO, errno, "run", "fork");
	}
	u->eval_pid = pid;
	u->eval_fd = sv[0];
	u->ech.fd = sv[0];
	return 0;
}

/* Where the trial sees its files when sealed: fixed paths, so that nothing
 * it can read (its arguments, its environment, its mount table's mount
 * points) says where the operator keeps the run, or tells a replay from a
 * run. Unsealed there is no mount namespace, and host paths are used. */
#define TRIAL_EXE "/apf/bin/apf"
#define TRIAL_WORKLOADS "/apf/workloads"
#define TRIAL_UNIT "/apf/unit"
#define TRIAL_SCRATCH "/apf/scratch"

static int spawn_trial(struct unit *u, const struct unit_args *args)
{
	struct run *r = u->r;
	struct unit_args a = *args;
	const char *exe = r->exe, *scratch = u->scratch;
	if (r->sealed) {
		exe = TRIAL_EXE;
		scratch = TRIAL_SCRATCH;
		a.workloads_dir = TRIAL_WORKLOADS;
		a.so = TRIAL_UNIT "/submission.so";
		a.hparams = TRIAL_UNIT "/hparams.json";
	}
	int rc = apf_image_dataset_export_train(&u->train_fd,
						apf_workload_dataset(u->wl));
	if (rc)
		return rc;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return apf_error_errno(APF_EIO, errno, "run", "socketpair");
	const char *argv[40];
	size_t n = 0;
	apf_buf storage = {0}, threads = {0}, home = {0};
	argv[n++] = exe;
	argv[n++] = "__trial";
	rc = unit_args_to_argv(&a, 1, (char **)argv, &n, &storage);
	argv[n] = NULL;
	apf_buf_printf(&threads, "OPENBLAS_NUM_THREADS=%d", r->threads);
	apf_buf_printf(&home, "HOME=%s", scratch);
	const char *envp[] = {threads.data, home.data, "PATH=/usr/bin:/bin",
			      "LC_ALL=C", ASAN_ENV, NULL};
	struct apf_sandbox_config c;
	struct apf_sandbox_mount m[NSYS + 8];
	size_t nm;
	base_config(u, &c, m, &nm, envp);
	/* No dataset is mounted: the training split comes as FD_TRAIN. The
	 * binary, the trial's own workload spec and the unit's files are
	 * copies, so that not even the mount table's root column names their
	 * host paths. */
	char *wdir = apf_path_join(r->workloads_dir, u->pu->workload);
	char wtarget[300];
	snprintf(wtarget, sizeof wtarget, TRIAL_WORKLOADS "/%s", u->pu->workload);
	if (r->sealed) {
		m[nm - 1].target = TRIAL_EXE; /* base_config's last: the binary */
		m[nm - 1].copy = 1;
		c.scratch = TRIAL_SCRATCH;
	}
	m[nm++] = (struct apf_sandbox_mount){
		wdir ? wdir : r->workloads_dir, r->sealed ? wtarget : NULL,
		APF_SANDBOX_READ, 0, r->sealed};
	m[nm++] = (struct apf_sandbox_mount){u->work,
					     r->sealed ? TRIAL_UNIT : NULL,
					     APF_SANDBOX_READ, 0, r->sealed};
	c.nmounts = nm;
	c.argv = argv;
	c.cwd = scratch;
	int logfd = open_log_file(u, "trial.log");
	struct apf_sandbox_fd fds[] = {{u->arena_fd, FD_ARENA},
				       {u->control_fd, FD_CONTROL},
				       {sv[1], FD_CHANNEL},
				       {u->train_fd, FD_TRAIN},
				       {logfd, 1},
				       {logfd, 2}};
	c.fds = fds;
	c.nfds = logfd >= 0 ? 6 : 4;
	c.limits = (struct apf_sandbox_limits){
		.address_space = UNDER_ASAN		? 0
				 : r->o->memory_limit ? r->o->memory_limit
						      : DEFAULT_MEMORY,
		/* One limit that counts everything the trial can hold (its
		 * memfds, scratch and page cache too) where a cgroup can be
		 * had; apf_sandbox_memory_mechanism says which, logged. */
		.memory = r->o->memory_limit ? r->o->memory_limit
					     : DEFAULT_MEMORY,
		.open_files = 256,
		.file_size = 256ull << 20,
		.spawns = 256};
	if (!rc)
		rc = apf_sandbox_spawn(&u->sb, &c);
	free(wdir);
	close(sv[1]);
	if (logfd >= 0)
		close(logfd);
	apf_buf_free(&storage);
	apf_buf_free(&threads);
	apf_buf_free(&home);
	if (rc) {
		close(sv[0]);
		return rc;
	}
	u->chan_fd = sv[0];
	u->ch.fd = sv[0];
	return 0;
}

static void ended_as(struct unit *u, const char *kind, const char *detail);

/* Serves the sandbox and waits for a line from the trial, up to
 * deadline_ns (0: none). Returns 1 with a line, 0 on timeout, 2 when the
 * trial ended (u->fault says how), or an error. */
static int await_trial(struct unit *u, char *line, size_t size,
		       uint64_t deadline_ns, int progress)
{
	for (;;) {
		int t = chan_try(&u->ch, line, size);
		if (t == 1)
			return 1;
		if (t < 0) {
			ended_as(u, "protocol", apf_error_message());
			return 2;
		}
		apf_sandbox_end end;
		int ended = apf_sandbox_reap(u->sb, &end);
		if (ended == 1 || t == 2) {
			if (ended != 1) {
				/* The channel closed: the trial is going. */
				apf_sandbox_wait(u->sb, 5000, &end);
				if (apf_sandbox_reap(u->sb, &end) != 1) {
					apf_sandbox_kill(u->sb);
					apf_sandbox_wait(u->sb, -1, &end);
				}
			}
			return 2;
		}
		if (apf_run_interrupted())
			return 0;
		uint64_t now = apf_now_ns();
		if (deadline_ns && now >= deadline_ns)
			return 0;
		if (u->next_due && now >= u->next_due) {
			/* At the end of the step under way: any step after the
			 * last eval's is at or past this one. */
			int64_t at = u->global_step + 1;
			proto_request(&u->pr, at);
			__atomic_store_n(&u->ctl->eval_at, at, __ATOMIC_RELEASE);
			u->next_due = 0;
		}
		int wait = 500;
		if (deadline_ns && (deadline_ns - now) / 1000000 < (uint64_t)wait)
			wait = (int)((deadline_ns - now) / 1000000) + 1;
		if (u->next_due && u->next_due > now &&
		    (u->next_due - now) / 1000000 < (uint64_t)wait)
			wait = (int)((u->next_due - now) / 1000000) + 1;
		struct pollfd p[3] = {{u->chan_fd, POLLIN, 0},
				      {apf_sandbox_notify_fd(u->sb), POLLIN, 0},
				      {apf_sandbox_exit_fd(u->sb), POLLIN, 0}};
		int pr = poll(p, 3, wait);
		if (pr < 0 && errno != EINTR)
			return apf_error_errno(APF_EIO, errno, "run", "poll");
		if (pr > 0 && (p[1].revents & POLLIN)) {
			apf_sandbox_event ev;
			int rc = apf_sandbox_notify_handle(u->sb, &ev);
			if (rc)
				return rc;
			if (ev.verdict == APF_SANDBOX_FAULT)
				snprintf(u->fault, sizeof u->fault, "%s",
					 ev.text);
		}
		if (progress && !u->r->o->quiet && isatty(2)) {
			int64_t step = __atomic_load_n(&u->ctl->step,
						       __ATOMIC_RELAXED);
			double sub = (double)(u->sub_ns + now - u->interval_start) / 1e9;
			fprintf(stderr,
				"\r%s  step %lld  %.1f/%.0f s  evals %lld\033[K",
				u->name, (long long)step, sub,
				(double)u->budget_ns / 1e9, (long long)u->evals);
		}
	}
}

static const char *fault_kind(const struct unit *u, const apf_sandbox_end *end)
{
	(void)u;
	switch (end->outcome) {
	case APF_SANDBOX_FAULTED:
		return strstr(end->reason, "outside the sandbox") ||
				       strstr(end->reason, "read-only") ||
				       strstr(end->reason, "(\"/")
			       ? "path"
			       : "syscall";
	case APF_SANDBOX_MEMORY_LIMIT:
		return "memory";
	case APF_SANDBOX_CRASHED:
	case APF_SANDBOX_CPU_LIMIT:
	case APF_SANDBOX_FILE_LIMIT:
		return "crash";
	default:
		return "protocol";
	}
}

/* The unit ends for a reason the supervisor found (a protocol fault, a
 * timeout, a damaged arena): kill what is left and say so. The first
 * reason stays. */
static void ended_as(struct unit *u, const char *kind, const char *detail)
{
	if (u->sb)
		apf_sandbox_kill(u->sb);
	if (u->end_kind)
		return;
	u->end_kind = kind;
	snprintf(u->fault, sizeof u->fault, "%s", detail);
}

/* The trial ended without being asked to, or sent an error line (after
 * which it exits by itself): how, from the way its sandbox ended. An error
 * line is the submission's own error, not a sandbox fault. */
static void trial_gone(struct unit *u, const char *error_line)
{
	if (u->end_kind)
		return;
	apf_sandbox_end end;
	if (apf_sandbox_reap(u->sb, &end) != 1 &&
	    apf_sandbox_wait(u->sb, 5000, &end) != 1) {
		apf_sandbox_kill(u->sb);
		apf_sandbox_wait(u->sb, -1, &end);
	}
	const char *kind = fault_kind(u, &end), *detail = end.reason;
	if (end.outcome == APF_SANDBOX_MEMORY_LIMIT)
		kind = "memory";
	else if (error_line && end.outcome == APF_SANDBOX_EXITED)
		kind = "error", detail = error_line;
	else if (end.outcome == APF_SANDBOX_EXITED)
		detail = "the trial exited without a report";
	u->end_kind = kind;
	snprintf(u->fault, sizeof u->fault, "%s", detail);
}

/* Logs how the trial ended (ended_as, trial_gone) and ends the unit. */
static int record_ending(struct unit *u)
{
	if (!u->end_kind)
		return apf_error(APF_EINTERNAL, "run", "no ending to record");
	if (!strcmp(u->end_kind, "error"))
		return end_trial(u, "error", 1, u->fault);
	return fault(u, u->end_kind, u->fault);
}

/* ---- evaluation and checkpoint -------------------------------------------------- */

static int evaluate(struct unit *u, json_t **metrics, char *err, size_t size)
{
	*metrics = NULL;
	int rc = chan_send(u->eval_fd, "eval");
	char line[LINE_MAX_BYTES];
	int r = rc ? -2 : chan_recv(&u->ech, line, sizeof line, EVAL_TIMEOUT_MS);
	if (r != 1) {
		snprintf(err, size, "the evaluator %s",
			 r == -1 ? "timed out" : "went away");
		return 0;
	}
	if (!strncmp(line, "error ", 6)) {
		snprintf(err, size, "%.500s", line + 6);
		return 0;
	}
	json_error_t je;
	*metrics = strncmp(line, "ok ", 3) ? NULL
					   : json_loads(line + 3, 0, &je);
	if (!*metrics)
		snprintf(err, size, "the evaluator answered '%.60s'", line);
	return 0;
}

static int checkpoint(struct unit *u, char *hex, uint64_t *bytes)
{
	const struct apf_arena_header *h = u->arena_view;
	int rc = apf_arena_check(u->arena_view, u->capacity);
	if (rc)
		return rc;
	*bytes = h->used;
	char name[64];
	snprintf(name, sizeof name, "ckpt/%lld.bin", (long long)u->evals);
	char *path = apf_path_join(u->dir, name);
	rc = apf_file_write(path, u->arena_view, h->used, 0644, 0);
	free(path);
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_buf(u->arena_view, h->used, d);
	if (!rc)
		apf_hex(hex, d, sizeof d);
	return rc;
}

static double metric(const json_t *m, const char *split, const char *name)
{
	char key[128];
	snprintf(key, sizeof key, "%s/%s", split, name);
	json_t *v = json_object_get(m, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Lets the trial go on, with an eval due at the end of step eval_at (0:
 * when the supervisor asks), and what it may see of the last eval. */
static int go(struct unit *u, const json_t *m, int64_t eval_at)
{
	const char *mn = u->spec->metric;
	proto_go(&u->pr, eval_at);
	__atomic_store_n(&u->ctl->eval_at, eval_at, __ATOMIC_RELEASE);
	return chan_send(u->chan_fd, "go %llu %lld %.17g %.17g %.17g %.17g %.17g %.17g",
			 (unsigned long long)u->sub_ns, (long long)u->evals,
			 metric(m, "train", "loss"), metric(m, "train", mn),
			 metric(m, "validation", "loss"),
			 metric(m, "validation", mn), metric(m, "test", "loss"),
			 metric(m, "test", mn));
}

/* The arena and control memfds are sealed against shrinking and growing
 * when made; this re-checks size and seals before the supervisor reads
 * through its mapping, so that nothing a trial does to them can become a
 * SIGBUS in the supervisor. */
#define MEMFD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
static int memfd_intact(int fd, uint64_t bytes)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	return fstat(fd, &st) == 0 && (uint64_t)st.st_size == bytes &&
	       seals >= 0 && (seals & MEMFD_SEALS) == MEMFD_SEALS;
}

/* One eval point: the trial has reported `step` (accepted by the protocol)
 * for reason `why`. Returns 1 when the trial goes on, 0 when the unit
 * ended (u->ended, or u->end_kind for record_ending), or an error of the
 * run itself. */
static int eval_point(struct unit *u, int64_t step, enum proto_why why,
		      uint64_t t_end)
{
	int rc = apf_sandbox_stop(u->sb);
	if (rc) {
		trial_gone(u, NULL);
		return 0;
	}
	u->sub_ns += t_end - u->interval_start;
	json_t *f = json_pack("{s:I, s:I, s:I, s:I, s:I}", "first_step",
			      (json_int_t)u->global_step + 1, "last_step",
			      (json_int_t)step, "start_ns",
			      (json_int_t)u->interval_start, "end_ns",
			      (json_int_t)t_end, "accumulated_submission_ns",
			      (json_int_t)u->sub_ns);
	rc = record(u, "step_block", f, 0);
	if (rc)
		return rc;
	u->global_step = step;
	if (!memfd_intact(u->arena_fd, u->capacity) ||
	    !memfd_intact(u->control_fd, 4096)) {
		ended_as(u, "protocol", "the arena or control memory lost its "
					"size or seals");
		return 0;
	}
	/* Evaluate the frozen arena. */
	json_t *m;
	char err[600] = "";
	rc = evaluate(u, &m, err, sizeof err);
	uint64_t eval_end = apf_now_ns();
	if (rc)
		return rc;
	if (!m) {
		ended_as(u, "protocol", err);
		return 0;
	}
	u->evals++;
	u->eval_ns += eval_end - t_end;
	char hex[65];
	uint64_t bytes = 0;
	rc = checkpoint(u, hex, &bytes);
	if (rc == APF_EVERIFY) {
		json_decref(m);
		char msg[400];
		snprintf(msg, sizeof msg, "the trial damaged its arena: %s",
			 apf_error_message());
		ended_as(u, "protocol", msg);
		return 0;
	}
	if (rc) {
		json_decref(m);
		return rc;
	}
	double val = metric(m, "validation", u->spec->metric);
	double test = metric(m, "test", u->spec->metric);
	int val_met = !isnan(val) &&
		      apf_workload_meets(u->spec->direction, val, u->val_target);
	int test_met = !isnan(test) &&
		       apf_workload_meets(u->spec->direction, test, u->test_target);
	if (val_met && u->time_to_target_ns < 0)
		u->time_to_target_ns = (int64_t)u->sub_ns;
	char ck[64];
	snprintf(ck, sizeof ck, "ckpt/%lld.bin", (long long)u->evals);
	json_t *ev = json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:O, s:b, s:b, "
		"s:{s:s, s:s, s:I}}",
		"index", (json_int_t)u->evals, "global_step", (json_int_t)step,
		"start_ns", (json_int_t)t_end, "end_ns", (json_int_t)eval_end,
		"accumulated_submission_ns", (json_int_t)u->sub_ns,
		"accumulated_eval_ns", (json_int_t)u->eval_ns,
		"accumulated_logging_ns", (json_int_t)u->log_ns,
		"total_duration_ns", (json_int_t)(u->sub_ns + u->eval_ns + u->log_ns),
		"preemption_count", (json_int_t)u->preemptions, "metrics", m,
		"validation_target_met", val_met, "test_target_met", test_met,
		"checkpoint", "file", ck, "sha256", hex, "bytes",
		(json_int_t)bytes);
	json_t *row = json_deep_copy(ev);
	rc = record(u, "eval", ev, 1);
	if (!u->st->rows)
		u->st->rows = json_array();
	json_array_append_new(u->st->rows, row);
	char *csv = apf_path_join(u->dir, "eval_measurements.csv");
	if (!rc)
		rc = files_write_csv(csv, u->st->rows);
	free(csv);
	if (!rc)
		rc = files_sign_head(u->r);
	u->last_eval_end = eval_end;
	const char *stop = u->sub_ns >= u->budget_ns ? "budget"
			   : val_met && test_met     ? "targets"
			   : why == WHY_COMPLETE     ? "complete"
			   : why == WHY_MAX_STEPS    ? "max_steps"
						     : NULL;
	if (!rc && stop) {
		json_decref(m);
		rc = end_trial(u, stop, 0, NULL);
		chan_send(u->chan_fd, "stop");
		apf_sandbox_cont(u->sb);
		return rc;
	}
	if (!rc) {
		u->next_due = eval_end + u->eval_period_ns;
		rc = go(u, m, 0);
	}
	json_decref(m);
	if (rc)
		return rc;
	uint64_t resume = apf_now_ns();
	u->log_ns += resume - eval_end;
	u->interval_start = resume;
	rc = apf_sandbox_cont(u->sb);
	if (rc) {
		trial_gone(u, NULL);
		return 0;
	}
	return 1;
}

/* ---- the unit ------------------------------------------------------------------ */

static int prepare(struct unit *u)
{
	struct run *r = u->r;
	const apf_manifest *man = r->entry->manifest;
	unit_name(u->pu, u->name, sizeof u->name);
	u->dir = apf_path_join(r->run_dir, u->name);
	char wname[32];
	snprintf(wname, sizeof wname, "unit_%zu", u->index);
	u->work = apf_path_join(r->work, wname);
	u->scratch = u->work ? apf_path_join(u->work, "scratch") : NULL;
	u->so = u->work ? apf_path_join(u->work, "submission.so") : NULL;
	u->hparams = u->work ? apf_path_join(u->work, "hparams.json") : NULL;
	char *ck = u->dir ? apf_path_join(r->audit ? u->work : u->dir, "ckpt")
			  : NULL;
	int rc = ck && u->scratch && u->so && u->hparams
			 ? 0
			 : apf_error(APF_ENOMEM, "run", "out of memory");
	if (!rc)
		rc = apf_mkdirs(ck, 0755);
	if (!rc)
		rc = apf_mkdirs(u->scratch, 0700);
	free(ck);
	char *wdir = rc ? NULL : apf_path_join(r->workloads_dir, u->pu->workload);
	if (!rc)
		rc = apf_workload_spec_load_dir(&u->spec, wdir);
	free(wdir);
	if (rc)
		return rc;
	const struct apf_workload_variant *v =
		apf_workload_variant(u->spec, u->pu->variant);
	if (!v)
		return apf_error(APF_EINPUT, u->spec->name, "no variant '%s'",
				 u->pu->variant);
	u->val_target = v->validation_target;
	u->test_target = v->test_target;
	const struct apf_budget *b = apf_workload_budget(u->spec, r->device);
	if (!b)
		return apf_error(APF_EINPUT, u->spec->name,
				 "no budget for device %s", r->device);
	u->budget_ns = (uint64_t)(b->max_runtime_s * man->tuning.budget_multiplier *
				  1e9);
	u->eval_period_ns = (uint64_t)(b->eval_period_s * 1e9);
	u->grace_ns = u->eval_period_ns + (uint64_t)fmax(5e9, 0.1 * u->budget_ns);
	/* Untimed work of the submission's (loading it, its constructors,
	 * init_optimizer_state) gets a stated allowance: AlgoPerf leaves init
	 * untimed and gives it no data, and here it also has no loss or
	 * gradient, so an honest one needs milliseconds. Over the allowance
	 * the unit faults, rather than the time being counted: a time counted
	 * would change scores against AlgoPerf's rules, a cap does not. */
	u->init_allowance_ns = apf_workload_init_allowance_ns(u->budget_ns);
	/* The supervisor's own copy of the workload, with the data: the
	 * model's layout (its input shape comes from the data), the training
	 * split the trial gets, and the initial state it must leave as it is. */
	apf_trial_key key = {man->tuning.seed, (uint32_t)u->pu->study,
			     (uint32_t)u->pu->trial + 1};
	rc = apf_backend_cpu_new(&u->wl_be, 1);
	if (!rc)
		rc = apf_workload_open(&u->wl, u->spec, u->pu->variant, u->wl_be,
				       &key, 0);
	if (!rc) {
		u->param_floats = apf_net_param_floats(apf_workload_net(u->wl));
		u->state_floats = apf_net_state_floats(apf_workload_net(u->wl));
		u->capacity = apf_arena_capacity(u->param_floats, u->state_floats,
						 SLOT_FACTOR);
		u->init_state = apf_calloc(u->param_floats + u->state_floats + 1,
					   sizeof(float));
		if (!u->init_state)
			rc = apf_error(APF_ENOMEM, "run", "out of memory");
	}
	if (!rc)
		rc = apf_workload_bind(u->wl, u->init_state,
				       u->init_state + u->param_floats);
	if (!rc)
		rc = apf_workload_init(u->wl);
	if (rc)
		return rc;
	/* hparams.json, for the auditor and for the trial. */
	json_t *hp = apf_hparams_to_json(&u->pu->hp);
	char *text = hp ? json_dumps(hp, JSON_INDENT(2) | JSON_REAL_PRECISION(17))
			: NULL;
	json_decref(hp);
	if (!text)
		return apf_error(APF_ENOMEM, "run", "out of memory");
	char *pub = apf_path_join(r->audit ? u->work : u->dir, "hparams.json");
	apf_buf b2 = {0};
	apf_buf_printf(&b2, "%s\n", text);
	rc = apf_file_write(pub, b2.data, b2.len, 0644, 0);
	if (!rc)
		rc = apf_file_write(u->hparams, b2.data, b2.len, 0644, 0);
	apf_buf_free(&b2);
	free(pub);
	free(text);
	return rc;
}

/* The memory shared with the trial: the arena and the control page,
 * sealed at their size so that the trial cannot shrink them under the
 * supervisor's mappings (a SIGBUS in the supervisor) or grow them past its
 * memory limit; and the training split, sealed read-only. */
static int make_arena(struct unit *u, const void *restore, size_t restore_len)
{
	u->arena_fd = memfd_create("apf-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	u->control_fd = memfd_create("apf-control",
				     MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (u->arena_fd < 0 || u->control_fd < 0 ||
	    ftruncate(u->arena_fd, (off_t)u->capacity) != 0 ||
	    ftruncate(u->control_fd, 4096) != 0)
		return apf_error_errno(APF_EIO, errno, "run", "shared memory");
	if (restore && pwrite(u->arena_fd, restore, restore_len, 0) !=
			       (ssize_t)restore_len)
		return apf_error_errno(APF_EIO, errno, "run", "restore arena");
	if (fcntl(u->arena_fd, F_ADD_SEALS, MEMFD_SEALS) != 0 ||
	    fcntl(u->control_fd, F_ADD_SEALS, MEMFD_SEALS) != 0)
		return apf_error_errno(APF_EIO, errno, "run",
				       "seal the shared memory");
	u->ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
		      u->control_fd, 0);
	u->arena_view = mmap(NULL, u->capacity, PROT_READ, MAP_SHARED,
			     u->arena_fd, 0);
	if (u->ctl == MAP_FAILED || u->arena_view == MAP_FAILED) {
		u->ctl = NULL;
		u->arena_view = NULL;
		return apf_error_errno(APF_EIO, errno, "run", "map the arena");
	}
	return 0;
}

/* Restoring a checkpoint: its file must be the one the log names. */
static int load_checkpoint(struct unit *u, char **data, size_t *len)
{
	char name[64];
	snprintf(name, sizeof name, "ckpt/%lld.bin", (long long)u->st->last_eval);
	char *path = apf_path_join(u->dir, name);
	int rc = apf_file_read(path, u->capacity, data, len);
	char hex[65];
	if (!rc)
		rc = apf_sha256_hex(*data, *len, hex);
	if (!rc && strcmp(hex, u->st->ckpt_sha256))
		rc = apf_error(APF_EVERIFY, path,
			       "differs from the checkpoint the log names");
	if (!rc)
		rc = apf_arena_check(*data, *len);
	free(path);
	if (rc) {
		free(*data);
		*data = NULL;
	}
	return rc;
}

static void cleanup(struct unit *u)
{
	if (u->sb)
		apf_sandbox_free(u->sb);
	if (u->eval_pid > 0) {
		chan_send(u->eval_fd, "quit");
		int status;
		for (int i = 0; i < 50; i++) {
			if (waitpid(u->eval_pid, &status, WNOHANG) == u->eval_pid) {
				u->eval_pid = 0;
				break;
			}
			usleep(20000);
		}
		if (u->eval_pid > 0) {
			kill(u->eval_pid, SIGKILL);
			waitpid(u->eval_pid, &status, 0);
		}
	}
	if (u->eval_fd > 0)
		close(u->eval_fd);
	if (u->chan_fd > 0)
		close(u->chan_fd);
	if (u->ctl)
		munmap(u->ctl, 4096);
	if (u->arena_view)
		munmap((void *)u->arena_view, u->capacity);
	if (u->arena_fd > 0)
		close(u->arena_fd);
	if (u->control_fd > 0)
		close(u->control_fd);
	if (u->train_fd > 0)
		close(u->train_fd);
	apf_workload_close(u->wl);
	if (u->wl_be)
		apf_backend_free(u->wl_be);
	free(u->init_state);
	if (u->work)
		apf_remove_tree(u->work);
	apf_workload_spec_free(u->spec);
	free(u->dir);
	free(u->work);
	free(u->scratch);
	free(u->so);
	free(u->hparams);
}

static int start_records(struct unit *u, int *restore_eval)
{
	struct unit_state *st = u->st;
	*restore_eval = 0;
	if (st->started && !st->ended) {
		/* Resume: from the last eval's checkpoint, or from scratch. */
		*restore_eval = (int)st->last_eval;
		u->preemptions = st->preemptions + 1;
		json_t *f = json_pack("{s:I, s:I, s:I}", "cut_bytes", (json_int_t)0,
				      "from_eval", (json_int_t)st->last_eval,
				      "preemption_count",
				      (json_int_t)u->preemptions);
		int rc = record(u, "resume", f, 1);
		if (rc || st->last_eval > 0) {
			u->evals = st->last_eval;
			u->global_step = st->global_step;
			u->sub_ns = st->sub_ns;
			u->eval_ns = st->eval_ns;
			u->log_ns = st->log_ns;
			u->time_to_target_ns = st->time_to_target_ns;
			return rc;
		}
		json_decref(st->rows);
		st->rows = NULL;
	}
	const apf_workload_spec *s = u->spec;
	json_t *f = json_pack(
		"{s:s, s:s, s:I, s:I, s:o, s:I, s:I, s:I, s:f, s:f, s:s, s:s}",
		"workload", u->pu->workload, "variant", u->pu->variant, "study",
		(json_int_t)u->pu->study, "trial", (json_int_t)u->pu->trial + 1,
		"hparams", apf_hparams_to_json(&u->pu->hp), "budget_ns", (json_int_t)u->budget_ns, "eval_period_ns",
		(json_int_t)u->eval_period_ns, "max_steps",
		(json_int_t)s->max_steps, "validation_target", u->val_target,
		"test_target", u->test_target, "metric", s->metric, "direction",
		s->direction > 0 ? "max" : "min");
	json_object_set_new(f, "init_allowance_ns",
			    json_integer((json_int_t)u->init_allowance_ns));
	return record(u, "trial_start", f, 1);
}

/* A unit of the plan, before prepare(). */
static struct unit unit_of(struct run *r, size_t index)
{
	return (struct unit){.r = r,
			     .index = index,
			     .pu = &r->plan->units[index],
			     .st = &r->states[index],
			     .time_to_target_ns = -1};
}

/* Serves the trial's set-up the same way for a run and a replay: its own
 * set-up (data, backend, thread pool), "lock", then the submission's load
 * (its constructors) and init_optimizer_state, which must end in "ready"
 * within the allowance. 1: ready, the trial waiting for go; 0: it ended
 * (u->end_kind says how; nothing recorded yet) or the run was interrupted;
 * or an error of the supervisor. */
static int setup_trial(struct unit *u, uint64_t spawn_t)
{
	char line[LINE_MAX_BYTES];
	uint64_t deadline = spawn_t + SETUP_TIMEOUT_NS, locked_t = 0;
	u->pr = (struct proto){PROTO_SETUP, u->global_step,
			       u->spec->max_steps > 0 ? u->spec->max_steps : 0, 0};
	for (;;) {
		int w = await_trial(u, line, sizeof line, deadline, 0);
		struct proto_msg m;
		if (w < 0)
			return w;
		if (w == 0 && apf_run_interrupted())
			return 0;
		if (w == 2) {
			trial_gone(u, NULL);
			return 0;
		}
		if (w == 0) {
			char msg[200];
			if (locked_t)
				snprintf(msg, sizeof msg,
					 "loading the submission and "
					 "init_optimizer_state ran past their "
					 "allowance of %.1f s",
					 (double)u->init_allowance_ns / 1e9);
			else
				snprintf(msg, sizeof msg,
					 "set-up took more than %llu s",
					 SETUP_TIMEOUT_NS / 1000000000ull);
			ended_as(u, "timeout", msg);
			return 0;
		}
		if (proto_accept(&u->pr, line, &m)) {
			ended_as(u, "protocol", apf_error_message());
			return 0;
		}
		if (m.kind == PROTO_ERROR) {
			trial_gone(u, m.text);
			return 0;
		}
		if (m.kind == PROTO_LOCK) {
			int rc = apf_sandbox_set_phase(u->sb, APF_SANDBOX_LOCKED);
			if (rc == APF_EABORT) {
				ended_as(u, "syscall", apf_error_message());
				return 0;
			}
			if (!rc)
				rc = chan_send(u->chan_fd, "locked");
			if (rc)
				return rc;
			proto_locked(&u->pr);
			locked_t = apf_now_ns();
			deadline = locked_t + u->init_allowance_ns;
			continue;
		}
		uint64_t now = apf_now_ns(); /* PROTO_READY */
		u->init_ns = now - spawn_t;
		u->submission_init_ns = now - locked_t;
		u->batch = m.batch;
		return 1;
	}
}

/* Names how an arena of `bytes` (live memory or checkpoint 0) differs
 * from what init_optimizer_state must leave: the workload's initialisation
 * for the trial's seed, bit for bit, at step 0, with the data stream
 * untouched. why is empty when it does not. */
static void initial_differs(const struct unit *u, const void *arena,
			    size_t bytes, char *why, size_t size)
{
	const struct apf_arena_header *h = arena;
	why[0] = 0;
	if (apf_arena_check(arena, bytes))
		snprintf(why, size, "the arena is damaged: %s",
			 apf_error_message());
	else if (h->params_floats != u->param_floats ||
		 h->state_floats != u->state_floats)
		snprintf(why, size, "the arena is laid out for another model");
	else if (!h->initialized || h->global_step != 0 || h->evals != 0)
		snprintf(why, size, "the arena is not at step 0 after "
				    "init_optimizer_state");
	else if (h->data_epoch != 0 || h->data_index != 0)
		snprintf(why, size, "the data stream moved before the clock "
				    "started (epoch %llu, example %llu)",
			 (unsigned long long)h->data_epoch,
			 (unsigned long long)h->data_index);
	if (why[0])
		return;
	const char *base = arena;
	const char *got[2] = {base + h->params_offset, base + h->state_offset};
	const float *want[2] = {u->init_state, u->init_state + u->param_floats};
	size_t n[2] = {u->param_floats, u->state_floats};
	static const char *const what[2] = {"parameters", "model state"};
	for (int k = 0; k < 2; k++) {
		if (!memcmp(got[k], want[k], n[k] * sizeof(float)))
			continue;
		size_t i = 0;
		while (memcmp(got[k] + i * sizeof(float), want[k] + i,
			      sizeof(float)) == 0)
			i++;
		snprintf(why, size,
			 "after init_optimizer_state the %s differ from the "
			 "workload's initialisation (from value %zu on)",
			 what[k], i);
		return;
	}
}

/* After init_optimizer_state, from scratch: the trial is frozen and its
 * arena must hold the workload's initialisation for the trial's seed
 * (parameters and model state bit for bit), at step 0 with the data
 * stream untouched; then it is checkpoint 0. 1: it is (hex and bytes
 * describe ckpt/0.bin; the trial stays frozen), 0: it is not (u->end_kind
 * set), or an error. */
static int check_initial_state(struct unit *u, char hex[65], uint64_t *bytes)
{
	if (apf_sandbox_stop(u->sb)) {
		trial_gone(u, NULL);
		return 0;
	}
	if (!memfd_intact(u->arena_fd, u->capacity)) {
		ended_as(u, "protocol", "the arena lost its size or seals");
		return 0;
	}
	char why[200];
	initial_differs(u, u->arena_view, u->capacity, why, sizeof why);
	if (why[0]) {
		ended_as(u, "protocol", why);
		return 0;
	}
	int rc = checkpoint(u, hex, bytes);
	if (rc == APF_EVERIFY) {
		ended_as(u, "protocol", apf_error_message());
		return 0;
	}
	return rc ? rc : 1;
}

int unit_run(struct run *r, size_t index)
{
	struct unit u = unit_of(r, index);
	int rc = prepare(&u);
	int restore_eval = 0;
	char *restore = NULL;
	size_t restore_len = 0;
	if (!rc)
		rc = start_records(&u, &restore_eval);
	if (!rc && restore_eval > 0) {
		/* The CSV may lag the log by the eval the crash interrupted. */
		char *csv = apf_path_join(u.dir, "eval_measurements.csv");
		rc = files_write_csv(csv, u.st->rows);
		free(csv);
		/* The eval resumed from may already have ended the trial. */
		json_t *last = json_array_get(u.st->rows,
					      json_array_size(u.st->rows) - 1);
		const char *stop =
			u.sub_ns >= u.budget_ns ? "budget"
			: json_is_true(json_object_get(last, "validation_target_met")) &&
					json_is_true(json_object_get(last, "test_target_met"))
				? "targets"
			: u.spec->max_steps > 0 && u.global_step >= u.spec->max_steps
				? "max_steps"
				: NULL;
		if (!rc && stop) {
			rc = end_trial(&u, stop, 0, NULL);
			cleanup(&u);
			return rc;
		}
	}
	if (!rc && restore_eval > 0)
		rc = load_checkpoint(&u, &restore, &restore_len);
	char detail[600] = "";
	if (!rc)
		rc = build(&u, detail, sizeof detail);
	if (!rc && detail[0]) {
		rc = end_trial(&u, "error", 1, detail);
		cleanup(&u);
		return rc;
	}
	if (!rc)
		rc = make_arena(&u, restore, restore_len);
	free(restore);
	struct unit_args a = unit_args_of(&u);
	if (!rc)
		rc = spawn_evaluator(&u, &a);
	uint64_t spawn_t = apf_now_ns();
	if (!rc)
		rc = spawn_trial(&u, &a);
	if (!rc)
		rc = setup_trial(&u, spawn_t);
	int ready = rc > 0;
	rc = rc > 0 ? 0 : rc;
	if (!rc && !ready && u.end_kind)
		rc = record_ending(&u);
	/* From scratch, the trial must have left the workload's initial state
	 * as it is (checkpoint 0, which the verifier can replay from). */
	char init_hex[65] = "";
	uint64_t init_bytes = 0;
	if (!rc && ready && restore_eval == 0) {
		rc = check_initial_state(&u, init_hex, &init_bytes);
		if (rc > 0) {
			rc = 0;
		} else if (!rc) {
			ready = 0;
			rc = record_ending(&u);
		}
	}
	if (!rc && ready) {
		json_t *f = json_pack("{s:I, s:I, s:I}", "init_ns",
				      (json_int_t)u.init_ns,
				      "submission_init_ns",
				      (json_int_t)u.submission_init_ns,
				      "batch_size", (json_int_t)u.batch);
		json_object_set_new(f, "memory_limit",
				    json_pack("{s:I, s:s}", "bytes",
					      (json_int_t)(r->o->memory_limit
								   ? r->o->memory_limit
								   : DEFAULT_MEMORY),
					      "mechanism",
					      apf_sandbox_memory_mechanism(u.sb)));
		if (init_hex[0])
			json_object_set_new(
				f, "checkpoint",
				json_pack("{s:s, s:s, s:I}", "file", "ckpt/0.bin",
					  "sha256", init_hex, "bytes",
					  (json_int_t)init_bytes));
		rc = record(&u, "clock_start", f, 0);
		/* The first eval comes after the first step. */
		if (u.evals > 0)
			u.next_due = apf_now_ns() + u.eval_period_ns;
		if (!rc)
			rc = go(&u, u.st->rows ? json_object_get(
							 json_array_get(u.st->rows,
									json_array_size(u.st->rows) - 1),
							 "metrics")
					       : NULL,
				u.evals == 0 ? u.global_step + 1 : 0);
		u.interval_start = apf_now_ns();
		if (!rc && init_hex[0] && apf_sandbox_cont(u.sb)) {
			trial_gone(&u, NULL);
			rc = record_ending(&u);
		}
	}
	/* Training. */
	char line[LINE_MAX_BYTES];
	while (!rc && ready && !u.ended && !apf_run_interrupted()) {
		uint64_t deadline = u.interval_start +
				    (u.budget_ns > u.sub_ns ? u.budget_ns - u.sub_ns
							    : 0) +
				    u.grace_ns;
		int w = await_trial(&u, line, sizeof line, deadline, 1);
		uint64_t t_end = apf_now_ns();
		struct proto_msg m;
		if (w < 0) {
			rc = w;
			break;
		}
		if (w == 0 && apf_run_interrupted())
			break;
		if (w == 2)
			trial_gone(&u, NULL);
		else if (w == 0)
			ended_as(&u, "timeout",
				 "no eval report within the budget (a step ran "
				 "past it)");
		else if (proto_accept(&u.pr, line, &m))
			ended_as(&u, "protocol", apf_error_message());
		else if (m.kind == PROTO_ERROR)
			trial_gone(&u, m.text);
		else if ((rc = eval_point(&u, m.step, m.why, t_end)) > 0)
			rc = 0;
		if (!rc && !u.ended && u.end_kind)
			rc = record_ending(&u);
	}
	if (!u.ended && apf_run_interrupted() && u.sb)
		apf_sandbox_kill(u.sb);
	if (!rc && u.ended && u.sb) {
		/* Let a stopped trial exit on its own, briefly. */
		apf_sandbox_end end;
		if (apf_sandbox_wait(u.sb, 3000, &end) != 1)
			apf_sandbox_kill(u.sb);
	}
	cleanup(&u);
	return rc;
}

/* ---- replay (apf verify --replay) ------------------------------------------------ */

/* Names the first difference between two arenas of the same layout. */
static void diff_arenas(const void *got, const void *want, size_t n, char *why,
			size_t size)
{
	const struct apf_arena_header *g = got, *w = want;
	const char *gb = got, *wb = want;
	if (memcmp(got, want, APF_ARENA_HEADER)) {
		if (g->global_step != w->global_step)
			snprintf(why, size, "header: global step %lld, the "
					    "checkpoint has %lld",
				 (long long)g->global_step,
				 (long long)w->global_step);
		else if (g->data_epoch != w->data_epoch ||
			 g->data_index != w->data_index)
			snprintf(why, size, "header: the data position differs");
		else
			snprintf(why, size, "header: differs (slots or sizes)");
		return;
	}
	struct part {
		const char *name;
		uint64_t off, bytes;
	} parts[2 + APF_ARENA_MAX_SLOTS];
	size_t np = 0;
	parts[np++] = (struct part){"parameters", w->params_offset,
					 w->params_floats * sizeof(float)};
	parts[np++] = (struct part){"model state", w->state_offset,
					 w->state_floats * sizeof(float)};
	for (uint32_t i = 0; i < w->nslots; i++)
		parts[np++] = (struct part){
			w->slots[i].name, w->slots[i].offset,
			w->slots[i].n * (w->slots[i].kind == APF_SLOT_SCALAR
						 ? sizeof(double)
						 : sizeof(float))};
	for (size_t p = 0; p < np; p++) {
		if (parts[p].off + parts[p].bytes > n ||
		    !memcmp(gb + parts[p].off, wb + parts[p].off, parts[p].bytes))
			continue;
		size_t k = 0;
		while (k < parts[p].bytes &&
		       gb[parts[p].off + k] == wb[parts[p].off + k])
			k++;
		snprintf(why, size, "%s%s differ%s from byte %zu on",
			 p >= 2 ? "slot " : "", parts[p].name,
			 p >= 2 ? "s" : "", k);
		return;
	}
	snprintf(why, size, "padding between sections differs");
}

int unit_replay(struct run *r, size_t index, struct replay_spec *rs,
		char *why, size_t size)
{
	struct unit u = unit_of(r, index);
	why[0] = 0;
	int rc = prepare(&u);
	char detail[600] = "";
	if (!rc)
		rc = build(&u, detail, sizeof detail);
	if (!rc && detail[0])
		rc = apf_error(APF_EINPUT, "replay", "%s", detail);
	if (!rc && (rs->from_len > u.capacity || rs->expect_len > u.capacity))
		rc = apf_error(APF_EVERIFY, "replay",
			       "a checkpoint is larger than the model's arena");
	if (!rc)
		rc = make_arena(&u, rs->from, rs->from_len);
	u.global_step = rs->from_step;
	u.sub_ns = rs->sub_ns;
	u.evals = rs->eval_index;
	/* The same arguments and environment as the run's trial: where the
	 * replay stops is the supervisor's business (eval_at), not the trial's. */
	struct unit_args a = unit_args_of(&u);
	if (!rc)
		rc = spawn_trial(&u, &a);
	if (!rc)
		rc = setup_trial(&u, apf_now_ns());
	int ready = rc > 0;
	rc = rc > 0 ? 0 : rc;
	if (!rc && ready)
		rc = go(&u, rs->metrics, rs->to_step);
	/* Timed as the run times a trial: from the go to the eval report. */
	uint64_t t_go = apf_now_ns();
	char line[LINE_MAX_BYTES];
	uint64_t deadline = apf_now_ns() + 30ull * 60 * 1000000000;
	while (!rc && ready && !u.end_kind) {
		int w = await_trial(&u, line, sizeof line, deadline, 0);
		struct proto_msg m = {0};
		if (w < 0)
			rc = w;
		else if (w == 2)
			trial_gone(&u, NULL);
		else if (w == 0)
			rc = apf_error(APF_EVERIFY, "replay",
				       apf_run_interrupted()
					       ? "interrupted"
					       : "no report within 30 minutes");
		else if (proto_accept(&u.pr, line, &m))
			ended_as(&u, "protocol", apf_error_message());
		else if (m.kind == PROTO_ERROR)
			trial_gone(&u, m.text);
		else {
			rs->replayed_ns = apf_now_ns() - t_go;
			rc = apf_sandbox_stop(u.sb);
			if (!rc && m.step != rs->to_step)
				snprintf(why, size,
					 "the replay reported step %lld, the "
					 "log step %lld",
					 (long long)m.step, (long long)rs->to_step);
			else if (!rc && !memfd_intact(u.arena_fd, u.capacity))
				snprintf(why, size, "the arena lost its size or "
						    "seals");
			else if (!rc) {
				const struct apf_arena_header *h = u.arena_view;
				if (h->used != rs->expect_len)
					snprintf(why, size,
						 "the arena holds %llu bytes, "
						 "the checkpoint %zu",
						 (unsigned long long)h->used,
						 rs->expect_len);
				else if (memcmp(u.arena_view, rs->expect,
						rs->expect_len))
					diff_arenas(u.arena_view, rs->expect,
						    rs->expect_len, why, size);
			}
			apf_sandbox_kill(u.sb);
			break;
		}
	}
	if (!rc && !ready && !u.end_kind && !why[0])
		rc = apf_error(APF_EVERIFY, "replay", "interrupted");
	if (!rc && u.end_kind)
		rc = apf_error(APF_EVERIFY, "replay", "the trial ended (%s): %s",
			       u.end_kind, u.fault);
	cleanup(&u);
	return rc;
}

/* ---- re-evaluation (apf verify --reeval) ------------------------------------------ */

int unit_reeval(struct run *r, size_t index, const void *ckpt, size_t len,
		const json_t *logged, char *why, size_t size)
{
	struct unit u = unit_of(r, index);
	why[0] = 0;
	int rc = prepare(&u);
	if (!rc && len > u.capacity)
		rc = apf_error(APF_EVERIFY, "reeval",
			       "the checkpoint is larger than the model's arena");
	if (!rc)
		rc = make_arena(&u, ckpt, len);
	struct unit_args a = unit_args_of(&u);
	if (!rc)
		rc = spawn_evaluator(&u, &a);
	json_t *m = NULL;
	char err[600] = "";
	if (!rc)
		rc = evaluate(&u, &m, err, sizeof err);
	if (!rc && !m)
		rc = apf_error(APF_EVERIFY, "reeval", "%s", err);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)logged, key, v)
	{
		if (rc || why[0])
			break;
		json_t *w = json_object_get(m, key);
		/* Bit-exact on the CPU: the logged numbers were printed with
		 * 17 significant digits and parse back to the same double. */
		if (!w || !json_equal(v, w) ||
		    (json_is_real(v) && json_real_value(v) != json_real_value(w)))
			snprintf(why, size, "%s: re-evaluated %.17g, logged %.17g",
				 key, w ? json_number_value(w) : NAN,
				 json_number_value(v));
	}
	if (!rc && !why[0] && json_object_size(m) != json_object_size(logged))
		snprintf(why, size, "the logged metrics are not the evaluator's "
				    "set");
	json_decref(m);
	cleanup(&u);
	return rc;
}

/* ---- the initial state (apf verify --reeval) ---------------------------------------- */

int unit_check_initial(struct run *r, size_t index, const void *ckpt,
		       size_t len, char *why, size_t size)
{
	struct unit u = unit_of(r, index);
	why[0] = 0;
	int rc = prepare(&u);
	if (!rc && len > u.capacity)
		rc = apf_error(APF_EVERIFY, "initial state",
			       "checkpoint 0 is larger than the model's arena");
	if (!rc)
		initial_differs(&u, ckpt, len, why, size);
	cleanup(&u);
	return rc;
}
