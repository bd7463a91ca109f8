/*
 * host.c: a sandboxed trial from the trusted side (host.h).
 *
 * Nothing the trial says is trusted beyond what it can only hurt itself
 * with: its lines go through the protocol checker (struct apf_proto), its
 * step count is bounded and monotonic, the shared memory is re-checked
 * before the arena is read, and a malformed message ends the trial as a
 * protocol fault.
 */
#include "host/host.h"
#include "sysinfo/sysinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "rundir/rundir.h"
#include "eval/eval.h"
#include "hash/hash.h"
#include "nn/cpu/isa.h"
#include "sandbox/sandbox.h"

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
#define BUILD_TIMEOUT_MS (5 * 60 * 1000)
#define SETUP_TIMEOUT_NS (10ull * 60 * 1000000000)
#define FAULT_MAX (APF_SANDBOX_TEXT_MAX + 64)
/* How often the wait looks at the trial's step count when an eval is near,
 * and how often the progress callback runs. */
#define WATCH_NS 1000000ull
#define TICK_NS 500000000ull
/* How far ahead of the step it names an eval is asked for (due_watch). */
#define LEAD_NS 50000000ull
#define LEAD_MAX_STEPS 100000ull
#define PACE_NS 5000000ull

/* The arena and control memfds are sealed against shrinking and growing
 * when made; they are re-checked before the supervisor reads through its
 * mapping, so that nothing a trial does to them can become a SIGBUS here. */
#define MEMFD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct apf_host {
	struct apf_host_opts o;
	struct apf_host_unit u;
	apf_workload_spec *spec;
	apf_backend *be;
	float *init_state;
	char *work, *log_dir, *scratch, *so, *hparams;
	int arena_fd, control_fd, chan_fd, train_fd;
	int train_sent; /* the trial process got the training split (at go) */
	struct apf_control *ctl;
	const void *arena_view;
	struct apf_chan ch;
	struct apf_proto pr;
	apf_sandbox *sb;
	/* When the next eval is asked for (due_watch: one rule for a run and
	 * a replay, so that the trial sees the same thing): a run's is due at
	 * due_ns, a replay's at step due_step. */
	uint64_t due_ns;
	int64_t due_step;
	int64_t due_after;    /* a replay's: the run's asked_after, 0: unknown */
	int64_t asked_after;  /* the step count the eval was asked after, 0:
				 not asked since the last go */
	int due_missed;       /* a replay's step went by before it was asked */
	int64_t pace_step;    /* the trial's pace (lead_steps): a step count, */
	uint64_t pace_ns;     /* when it was seen, */
	uint64_t per;         /* and the ns a step since the one before */
	uint64_t last_tick;
	uint64_t report_ns, copy_ns; /* the last report's (apf_host_report_times) */
	uint64_t init_ns, submission_init_ns;
	/* apf_host_next's deadline on the unit's clock (cpu clock only; 0:
	 * none) and the last CPU clock value read. */
	uint64_t clock_deadline, last_clock;
	int64_t batch;
	const char *end_kind;
	char fault[FAULT_MAX];
};

/* ---- the unit ------------------------------------------------------------------ */

int apf_host_find_self(char **exe, char **include_dir)
{
	*exe = *include_dir = NULL;
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
	if (n > 0) {
		buf[n] = 0;
		*exe = apf_strdup(buf);
	}
	char *root = *exe ? apf_strdup(*exe) : NULL;
	char *slash = root ? strrchr(root, '/') : NULL;
	if (slash)
		*slash = 0;
	char *cands[2] = {root ? apf_path_join(root, "../include") : NULL,
			  apf_path_join(APF_SOURCE_DIR, "include")};
	for (int i = 0; i < 2 && !*include_dir; i++) {
		char *hdr = cands[i] ? apf_path_join(cands[i], "apf/submission.h")
				     : NULL;
		struct stat st;
		if (hdr && stat(hdr, &st) == 0)
			*include_dir = realpath(cands[i], NULL);
		free(hdr);
	}
	free(cands[0]);
	free(cands[1]);
	free(root);
	if (*exe && *include_dir)
		return 0;
	free(*exe);
	free(*include_dir);
	*exe = *include_dir = NULL;
	return apf_error(APF_EINPUT, "run",
			 "cannot find apf's own binary and "
			 "include/apf/submission.h");
}

int apf_host_open(apf_host **out, const struct apf_host_opts *o)
{
	*out = NULL;
	apf_host *h = apf_calloc(1, sizeof *h);
	if (!h)
		return apf_error(APF_ENOMEM, "host", "out of memory");
	h->o = *o;
	/* The unit's directories are the host's to keep (and work/ to
	 * remove); the other strings must outlive it. */
	h->work = apf_strdup(o->work);
	h->log_dir = apf_strdup(o->log_dir);
	h->o.work = h->work;
	h->o.log_dir = h->log_dir;
	h->arena_fd = h->control_fd = h->chan_fd = h->train_fd = -1;
	h->ch.fd = -1;
	h->scratch = apf_path_join(o->work, "scratch");
	h->so = apf_path_join(o->work, "submission.so");
	h->hparams = apf_path_join(o->work, "hparams.json");
	int rc = h->work && h->log_dir && h->scratch && h->so && h->hparams
			 ? apf_mkdirs(h->scratch, 0700)
			 : apf_error(APF_ENOMEM, "host", "out of memory");
	char *wdir = rc ? NULL : apf_path_join(o->workloads_dir, o->workload);
	if (!rc)
		rc = wdir ? apf_workload_spec_load_dir(&h->spec, wdir)
			  : apf_error(APF_ENOMEM, "host", "out of memory");
	free(wdir);
	const struct apf_workload_variant *v =
		rc ? NULL : apf_workload_variant(h->spec, o->variant);
	if (!rc && !v)
		rc = apf_error(APF_EINPUT, h->spec->name, "no variant '%s'",
			       o->variant);
	const struct apf_budget *b =
		rc ? NULL : apf_workload_budget(h->spec, o->device);
	if (!rc && !b)
		rc = apf_error(APF_EINPUT, h->spec->name,
			       "no budget for device %s", o->device);
	struct apf_host_unit *u = &h->u;
	if (!rc) {
		u->spec = h->spec;
		u->validation_target = v->validation_target;
		u->test_target = v->test_target;
		double scale = o->budget_scale > 0 ? o->budget_scale : 1.0;
		u->budget_ns = apf_workload_budget_ns(b, o->budget_multiplier,
						      scale);
		u->eval_period_ns = apf_workload_eval_period_ns(b, scale);
		/* Untimed work of the submission's (loading it, its
		 * constructors, init_optimizer_state) gets a stated allowance:
		 * AlgoPerf leaves init untimed and gives it no data, and here
		 * it also has no loss or gradient, so an honest one needs
		 * milliseconds. Over it the unit faults, rather than the time
		 * being counted: a time counted would change scores against
		 * AlgoPerf's rules, a cap does not. */
		u->init_allowance_ns = apf_workload_init_allowance_ns(u->budget_ns);
	}
	/* The supervisor's own copy of the workload, with the data: the
	 * model's layout (its input shape comes from the data), the training
	 * split the trial gets, and the initial state it must leave as it is. */
	apf_trial_key key = {o->seed, o->study, o->trial};
	if (!rc)
		rc = apf_backend_cpu_new(&h->be, 1);
	if (!rc)
		rc = apf_workload_open(&u->wl, h->spec, o->variant, h->be, &key, 0);
	if (!rc) {
		u->param_floats = apf_net_param_floats(apf_workload_net(u->wl));
		u->state_floats = apf_net_state_floats(apf_workload_net(u->wl));
		u->capacity = apf_arena_capacity(u->param_floats, u->state_floats,
						 SLOT_FACTOR);
		h->init_state = apf_calloc(u->param_floats + u->state_floats + 1,
					   sizeof(float));
		u->init_state = h->init_state;
		if (!h->init_state)
			rc = apf_error(APF_ENOMEM, "host", "out of memory");
	}
	if (!rc)
		rc = apf_workload_bind(u->wl, h->init_state,
				       h->init_state + u->param_floats);
	if (!rc)
		rc = apf_workload_init(u->wl);
	/* hparams.json, for the trial. */
	if (!rc)
		rc = apf_host_write_hparams(h, h->hparams);
	if (rc) {
		apf_host_close(h);
		return rc;
	}
	*out = h;
	return 0;
}

int apf_host_write_hparams(const apf_host *h, const char *path)
{
	json_t *hp = apf_hparams_to_json(h->o.hp);
	char *text = hp ? json_dumps(hp, JSON_INDENT(2) | JSON_REAL_PRECISION(17))
			: NULL;
	json_decref(hp);
	apf_buf t = {0};
	if (text)
		apf_buf_printf(&t, "%s\n", text);
	free(text);
	int rc = t.data ? apf_file_write(path, t.data, t.len, 0644, 0)
			: apf_error(APF_ENOMEM, path, "out of memory");
	apf_buf_free(&t);
	return rc;
}

const struct apf_host_unit *apf_host_unit(const apf_host *h)
{
	return &h->u;
}

void apf_host_close(apf_host *h)
{
	if (!h)
		return;
	if (h->sb)
		apf_sandbox_free(h->sb);
	if (h->chan_fd >= 0)
		close(h->chan_fd);
	if (h->ctl)
		munmap(h->ctl, 4096);
	if (h->arena_view)
		munmap((void *)h->arena_view, h->u.capacity);
	if (h->arena_fd >= 0)
		close(h->arena_fd);
	if (h->control_fd >= 0)
		close(h->control_fd);
	if (h->train_fd >= 0)
		close(h->train_fd);
	apf_workload_close(h->u.wl);
	if (h->be)
		apf_backend_free(h->be);
	free(h->init_state);
	if (h->o.work)
		apf_remove_tree(h->o.work);
	apf_workload_spec_free(h->spec);
	free(h->work);
	free(h->log_dir);
	free(h->scratch);
	free(h->so);
	free(h->hparams);
	free(h);
}

/* ---- the sandbox's configuration ------------------------------------------------- */

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

/* What the build and the trial sandboxes have in common. */
static void sandbox_base(struct apf_sandbox_config *c,
			 struct apf_sandbox_mount *m, size_t *nm,
			 const char *const *envp, const char *exe, int sealed,
			 const char *scratch)
{
	memset(c, 0, sizeof *c);
	c->mode = sealed ? APF_SANDBOX_SEALED : APF_SANDBOX_UNSEALED;
	c->envp = envp;
	*nm = 0;
	for (size_t i = 0; i < NSYS; i++)
		m[(*nm)++] = system_mounts[i];
	m[(*nm)++] = (struct apf_sandbox_mount){exe, NULL, APF_SANDBOX_READ, 0,
						0};
	c->mounts = m;
	c->scratch = scratch;
	c->scratch_bytes = 256ull << 20;
	c->hostname = "apf-trial";
}

static void base_config(apf_host *h, struct apf_sandbox_config *c,
			struct apf_sandbox_mount *m, size_t *nm,
			const char *const *envp)
{
	sandbox_base(c, m, nm, envp, h->o.exe, h->o.sealed, h->scratch);
}

/* ---- the build ------------------------------------------------------------------- */

/* The build's last line, for the log and the user: without the `apf __build`
 * process's own "apf: " prefix, and with the extracted submission's
 * temporary path shown as "submission" (it names a directory the user
 * never made and that is gone once the run ends). */
static void tidy_detail(char *detail, size_t size, const char *src)
{
	char out[1024];
	size_t n = 0, srclen = src ? strlen(src) : 0;
	const char *p = detail;
	if (!strncmp(p, "apf: ", 5))
		p += 5;
	while (*p && n + 1 < sizeof out) {
		if (srclen && !strncmp(p, src, srclen)) {
			n += (size_t)snprintf(out + n, sizeof out - n, "submission");
			if (n >= sizeof out)
				n = sizeof out - 1;
			p += srclen;
			continue;
		}
		out[n++] = *p++;
	}
	out[n] = 0;
	snprintf(detail, size, "%s", out);
}

/* One build: `apf __build src include_dir scratch/submission.so` in a
 * sandbox that sees copies of the sources and the headers and can write
 * only its scratch (the compiler's temporary files and the shared object);
 * the shared object comes back through a memfd (APF_FD_BUILD_OUT), which
 * the host writes to work/, and the compiler's output through the
 * sandbox's output pipe into log_dir/build.log. Nothing of the host's is
 * writable in there, and no host file's descriptor crosses. */
struct build {
	const char *exe, *src, *include_dir, *work, *scratch, *so, *log_dir;
	int sealed;
};

static int open_log_file(const char *dir, const char *name)
{
	char *p = apf_path_join(dir, name);
	int fd = p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
	free(p);
	return fd;
}

/* The shared object the build wrote into out (a memfd), as work/'s file. */
static int keep_build_output(int out, const char *so)
{
	struct stat st;
	if (fstat(out, &st) != 0)
		return apf_error_errno(APF_EIO, errno, "build", "fstat");
	if (st.st_size <= 0)
		return 0; /* nothing: "the build left no shared object" */
	char *data = NULL;
	size_t len = 0;
	int rc = lseek(out, 0, SEEK_SET) == 0
			 ? apf_file_read_fd(&data, &len, out, "the build's output",
					    256ull << 20)
			 : apf_error_errno(APF_EIO, errno, "build", "lseek");
	if (!rc)
		rc = apf_file_write(so, data, len, 0644, 0);
	free(data);
	return rc;
}

static int build_in_sandbox(const struct build *b, char *detail, size_t size,
			    char so_sha256[65])
{
	detail[0] = so_sha256[0] = 0;
	char *inner = apf_path_join(b->scratch, "submission.so");
	int out = memfd_create("apf-build-out", MFD_CLOEXEC);
	if (!inner || out < 0) {
		free(inner);
		if (out >= 0)
			close(out);
		return apf_error_errno(APF_EIO, inner ? errno : ENOMEM, "build",
				       "the output memfd");
	}
	const char *argv[] = {b->exe, "__build", b->src, b->include_dir, inner,
			      NULL};
	const char *envp[] = {"PATH=/usr/bin:/bin", "TMPDIR=", "LC_ALL=C",
			      ASAN_ENV, NULL};
	apf_buf tmpdir = {0};
	apf_buf_printf(&tmpdir, "TMPDIR=%s", b->scratch);
	if (!tmpdir.data)
		return apf_error(APF_ENOMEM, "build", "out of memory");
	envp[1] = tmpdir.data;
	struct apf_sandbox_config c;
	struct apf_sandbox_mount m[NSYS + 8];
	size_t nm;
	sandbox_base(&c, m, &nm, envp, b->exe, b->sealed, b->scratch);
	/* Copies (sealed): the sandbox's user need not be able to read the
	 * operator's directories, only the files. */
	m[nm++] = (struct apf_sandbox_mount){b->src, NULL, APF_SANDBOX_READ, 0,
					     b->sealed};
	m[nm++] = (struct apf_sandbox_mount){b->include_dir, NULL,
					     APF_SANDBOX_READ, 0, b->sealed};
	c.nmounts = nm;
	c.argv = argv;
	c.cwd = b->src;
	char *log_path = apf_path_join(b->log_dir, "build.log");
	c.output = log_path;
	struct apf_sandbox_fd fds[] = {{out, APF_FD_BUILD_OUT}};
	c.fds = fds;
	c.nfds = 1;
	c.limits = (struct apf_sandbox_limits){.address_space =
						       UNDER_ASAN ? 0 : 8ull << 30,
					       .file_size = 256ull << 20,
					       .spawns = 256};
	apf_sandbox *sb = NULL;
	int rc = log_path ? apf_sandbox_spawn(&sb, &c)
			  : apf_error(APF_ENOMEM, "build", "out of memory");
	apf_sandbox_end end;
	int done = 0;
	if (!rc)
		done = apf_sandbox_wait(sb, BUILD_TIMEOUT_MS, &end);
	if (!rc && done < 0)
		rc = done;
	free(log_path);
	free(inner);
	apf_buf_free(&tmpdir);
	if (!rc && done == 1 && end.outcome == APF_SANDBOX_EXITED &&
	    end.exit_code == 0)
		rc = keep_build_output(out, b->so);
	close(out);
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
		char *log = apf_path_join(b->log_dir, "build.log"), *text = NULL;
		size_t len = 0;
		if (log && apf_file_read(&text, &len, log, 1 << 20) == 0 && len) {
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
		apf_error_clear();
		free(text);
		free(log);
		tidy_detail(detail, size, b->src);
	}
	apf_sandbox_free(sb);
	uint8_t d[APF_SHA256_LEN];
	if (!detail[0] && apf_sha256_file(d, NULL, b->so) == 0)
		apf_hex(so_sha256, d, sizeof d);
	else if (!detail[0])
		snprintf(detail, size, "the build left no shared object");
	apf_error_clear();
	return 0;
}

int apf_host_build(apf_host *h, char *detail, size_t size, char so_sha256[65])
{
	const struct build b = {h->o.exe,    h->o.src,  h->o.include_dir,
				h->o.work,   h->scratch, h->so,
				h->o.log_dir, h->o.sealed};
	return build_in_sandbox(&b, detail, size, so_sha256);
}

/* build.log's text without the `apf __build` process's own lines (its
 * "apf: ..." verdict, which detail carries). */
static int compiler_output(const char *dir, apf_buf *out)
{
	char *log = apf_path_join(dir, "build.log"), *text = NULL;
	size_t len = 0;
	if (!log)
		return apf_error(APF_ENOMEM, "build", "out of memory");
	int rc = apf_file_read(&text, &len, log, 1 << 20);
	free(log);
	if (rc) {
		/* No log: the compiler printed nothing. */
		apf_error_clear();
		return 0;
	}
	for (const char *p = text; !rc && p < text + len;) {
		const char *nl = memchr(p, '\n', (size_t)(text + len - p));
		size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(text + len - p);
		if (strncmp(p, "apf: ", 5))
			rc = apf_buf_append(out, p, n);
		p += n;
	}
	free(text);
	return rc ? apf_error(APF_ENOMEM, "build", "out of memory") : 0;
}

int apf_host_check_build(const char *exe, const char *include_dir,
			 const char *src, int sealed, char *detail,
			 size_t size, apf_buf *compiler)
{
	detail[0] = 0;
	const char *tmp = getenv("TMPDIR");
	apf_buf work = {0};
	if (apf_buf_printf(&work, "%s/apf-check.XXXXXX",
			   tmp && *tmp ? tmp : "/tmp"))
		return apf_error(APF_ENOMEM, "build", "out of memory");
	if (!mkdtemp(work.data)) {
		int rc = apf_error_errno(APF_EINPUT, errno, work.data,
					 "cannot make a build directory");
		apf_buf_free(&work);
		return rc;
	}
	char *scratch = apf_path_join(work.data, "scratch");
	char *so = apf_path_join(work.data, "submission.so");
	char *canon = realpath(src, NULL);
	int rc = scratch && so ? apf_mkdirs(scratch, 0700)
			       : apf_error(APF_ENOMEM, "build", "out of memory");
	if (!rc && !canon)
		rc = apf_error_errno(APF_EINPUT, errno, src, "open");
	char sha[65];
	if (!rc) {
		const struct build b = {exe, canon, include_dir, work.data,
					scratch, so, work.data, sealed};
		rc = build_in_sandbox(&b, detail, size, sha);
	}
	if (!rc && compiler)
		rc = compiler_output(work.data, compiler);
	apf_remove_tree(work.data);
	free(canon);
	free(scratch);
	free(so);
	apf_buf_free(&work);
	return rc;
}

/* ---- shared memory ------------------------------------------------------------- */

/* The memory shared with the trial: the arena and the control page,
 * sealed at their size so that the trial cannot shrink them under the
 * supervisor's mappings (a SIGBUS in the supervisor) or grow them past its
 * memory limit. */
int apf_host_arena(apf_host *h, const void *restore, size_t len)
{
	size_t cap = h->u.capacity;
	if (restore && len > cap)
		return apf_error(APF_EVERIFY, "arena",
				 "a checkpoint of %zu bytes is larger than the "
				 "model's arena (%zu)",
				 len, cap);
	h->arena_fd = memfd_create("apf-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	h->control_fd = memfd_create("apf-control",
				     MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (h->arena_fd < 0 || h->control_fd < 0 ||
	    ftruncate(h->arena_fd, (off_t)cap) != 0 ||
	    ftruncate(h->control_fd, 4096) != 0)
		return apf_error_errno(APF_EIO, errno, "arena", "shared memory");
	if (restore && pwrite(h->arena_fd, restore, len, 0) != (ssize_t)len)
		return apf_error_errno(APF_EIO, errno, "arena", "restore");
	if (fcntl(h->arena_fd, F_ADD_SEALS, MEMFD_SEALS) != 0 ||
	    fcntl(h->control_fd, F_ADD_SEALS, MEMFD_SEALS) != 0)
		return apf_error_errno(APF_EIO, errno, "arena",
				       "seal the shared memory");
	h->ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
		      h->control_fd, 0);
	h->arena_view = mmap(NULL, cap, PROT_READ, MAP_SHARED, h->arena_fd, 0);
	if (h->ctl == MAP_FAILED || h->arena_view == MAP_FAILED) {
		if (h->ctl != MAP_FAILED)
			munmap(h->ctl, 4096);
		if (h->arena_view != MAP_FAILED)
			munmap((void *)h->arena_view, cap);
		h->ctl = NULL;
		h->arena_view = NULL;
		return apf_error_errno(APF_EIO, errno, "arena", "map the arena");
	}
	return 0;
}

int apf_host_arena_load(apf_host *h, const void *data, size_t len)
{
	size_t cap = h->u.capacity;
	if (len > cap)
		return apf_error(APF_EVERIFY, "arena",
				 "a checkpoint of %zu bytes is larger than the "
				 "model's arena (%zu)",
				 len, cap);
	if (pwrite(h->arena_fd, data, len, 0) != (ssize_t)len)
		return apf_error_errno(APF_EIO, errno, "arena", "load");
	static const char zeros[65536];
	for (size_t off = len; off < cap;) {
		size_t n = cap - off < sizeof zeros ? cap - off : sizeof zeros;
		if (pwrite(h->arena_fd, zeros, n, (off_t)off) != (ssize_t)n)
			return apf_error_errno(APF_EIO, errno, "arena", "load");
		off += n;
	}
	return 0;
}

int apf_host_evaluator(apf_evaluator **out, apf_host *h)
{
	struct apf_unit_args a = apf_host_args(h);
	int logfd = open_log_file(h->log_dir, "evaluator.log");
	int rc = apf_evaluator_start(out, h->o.exe, &a, h->arena_fd, logfd);
	if (logfd >= 0)
		close(logfd);
	return rc;
}

int apf_host_arena_fd(const apf_host *h)
{
	return h->arena_fd;
}

const void *apf_host_arena_view(const apf_host *h)
{
	return h->arena_view;
}

static int memfd_intact(int fd, uint64_t bytes)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	return fstat(fd, &st) == 0 && (uint64_t)st.st_size == bytes &&
	       seals >= 0 && (seals & MEMFD_SEALS) == MEMFD_SEALS;
}

struct apf_unit_args apf_host_args(const apf_host *h)
{
	const struct apf_host_opts *o = &h->o;
	struct apf_train_layout l;
	if (apf_workload_train_layout(&l, h->u.wl))
		apf_error_clear(); /* zeros: the trial refuses them */
	return (struct apf_unit_args){
		.train_h = l.H,
		.train_w = l.W,
		.train_c = l.C,
		.train_classes = l.classes,
		.train_n = l.n,
		.workloads_dir = o->workloads_dir,
		.workload = o->workload,
		.variant = o->variant,
		.seed = o->seed,
		.study = o->study,
		.trial = o->trial,
		.threads = o->threads,
		.numerics = o->numerics,
		.device = o->device,
		.so = h->so,
		.hparams = h->hparams,
		.max_steps = h->spec->max_steps,
		.step_hint = h->spec->step_hint,
		.budget_s = (double)h->u.budget_ns / 1e9,
		.arena_bytes = h->u.capacity};
}

/* ---- endings ----------------------------------------------------------------------- */

static const char *fault_kind(const apf_sandbox_end *end)
{
	switch (end->outcome) {
	case APF_SANDBOX_FAULTED:
		return end->path_fault ? "path" : "syscall";
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

void apf_host_end(apf_host *h, const char *kind, const char *detail)
{
	if (h->sb)
		apf_sandbox_kill(h->sb);
	if (h->end_kind)
		return;
	h->end_kind = kind;
	snprintf(h->fault, sizeof h->fault, "%s", detail);
}

const char *apf_host_ending(const apf_host *h, const char **detail)
{
	if (detail)
		*detail = h->fault;
	return h->end_kind;
}

/* The trial ended without being asked to, or sent an error line (after
 * which it exits by itself): how, from the way its sandbox ended. An error
 * line is the submission's own error, not a sandbox fault. */
static void trial_gone(apf_host *h, const char *error_line)
{
	if (h->end_kind)
		return;
	apf_sandbox_end end;
	if (apf_sandbox_reap(h->sb, &end) != 1 &&
	    apf_sandbox_wait(h->sb, 5000, &end) != 1) {
		apf_sandbox_kill(h->sb);
		apf_sandbox_wait(h->sb, -1, &end);
	}
	const char *kind = fault_kind(&end), *detail = end.reason;
	if (error_line && end.outcome == APF_SANDBOX_EXITED)
		kind = "error", detail = error_line;
	else if (end.outcome == APF_SANDBOX_EXITED)
		detail = "the trial exited without a report";
	h->end_kind = kind;
	snprintf(h->fault, sizeof h->fault, "%s", detail);
}

/* ---- the trial process --------------------------------------------------------------- */

/* Where the trial sees its files when sealed: fixed paths, so that nothing
 * it can read (its arguments, its environment, its mount table's mount
 * points) says where the operator keeps the run, or tells a replay from a
 * run. Unsealed there is no mount namespace, and host paths are used. */
#define TRIAL_EXE "/apf/bin/apf"
#define TRIAL_WORKLOADS "/apf/workloads"
#define TRIAL_UNIT "/apf/unit"
#define TRIAL_SCRATCH "/apf/scratch"
#define TRIAL_CUDA_PLUGIN "/apf/bin/lib/apf-cuda.so" /* beside TRIAL_EXE */
#define CUDA_MAX_NODES 20

/* What a CUDA trial needs beyond a CPU one, and nothing more: the NVIDIA
 * device nodes (the control node, the unified-memory node and one per
 * GPU, bound read-write: the driver's interface is ioctl and mmap on
 * them, which the filter leaves to the kernel's own permission checks),
 * the plugin (copied, where the loader looks beside the sealed binary),
 * and read access to what the driver library reads at cuInit: its
 * parameters and capabilities under /proc/driver/nvidia, /proc/devices
 * (the major numbers) and the PCI tree of sysfs, which is not mounted and
 * so reads as absent. The CUDA runtime and the driver library come from
 * /usr, which every trial has. Their threads and device memory are made in
 * the set-up phase (apf __trial creates the context before it asks for
 * the lock); the locked phase forbids new threads for CUDA as for BLAS.
 * No RLIMIT_AS: the driver reserves address space far beyond what it
 * maps (unified memory), so only a cgroup can hold a CUDA trial's host
 * memory (apf_sandbox_memory_mechanism says which one did). cuda_mounts
 * adds the mounts to m (names and plugin hold their paths) or returns an
 * error. */
static const struct apf_sandbox_path cuda_paths[] = {
	{"/proc/driver/nvidia", APF_SANDBOX_READ},
	{"/proc/devices", APF_SANDBOX_READ},
	{"/sys/bus/pci", APF_SANDBOX_READ},
	{"/sys/devices", APF_SANDBOX_READ},
	{"/sys/module/nvidia", APF_SANDBOX_READ},
};

static int cuda_mounts(int sealed, struct apf_sandbox_mount *m, size_t *nm,
		       char names[][40], char *plugin, size_t plen)
{
	char why[512];
	if (apf_cuda_plugin_path(plugin, plen, why, sizeof why))
		return apf_error(APF_EINPUT, "trial", "--device cuda: %s", why);
	m[(*nm)++] = (struct apf_sandbox_mount){
		plugin, sealed ? TRIAL_CUDA_PLUGIN : NULL, APF_SANDBOX_READ, 0,
		sealed};
	int k = 0;
	snprintf(names[k++], 40, "/dev/nvidiactl");
	snprintf(names[k++], 40, "/dev/nvidia-uvm");
	for (int g = 0; k < CUDA_MAX_NODES; g++) {
		char p[40];
		snprintf(p, sizeof p, "/dev/nvidia%d", g);
		if (access(p, F_OK))
			break;
		snprintf(names[k++], 40, "%s", p);
	}
	for (int i = 0; i < k; i++)
		m[(*nm)++] = (struct apf_sandbox_mount){
			names[i], NULL, APF_SANDBOX_WRITE, i == 1, 0};
	return 0;
}

static int spawn_trial(apf_host *h)
{
	const struct apf_host_opts *o = &h->o;
	struct apf_unit_args a = apf_host_args(h);
	const char *exe = o->exe, *scratch = h->scratch;
	if (o->sealed) {
		exe = TRIAL_EXE;
		scratch = TRIAL_SCRATCH;
		a.workloads_dir = TRIAL_WORKLOADS;
		a.so = TRIAL_UNIT "/submission.so";
		a.hparams = TRIAL_UNIT "/hparams.json";
	}
	int rc = h->train_fd >= 0
			 ? 0
			 : apf_dataset_export_train(&h->train_fd,
						    apf_workload_dataset(h->u.wl));
	if (rc)
		return rc;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return apf_error_errno(APF_EIO, errno, "trial", "socketpair");
	const char *argv[40];
	size_t n = 0;
	apf_buf storage = {0}, threads = {0}, home = {0};
	argv[n++] = exe;
	argv[n++] = "__trial";
	rc = apf_unit_args_to_argv(&a, 1, (char **)argv, &n, &storage);
	argv[n] = NULL;
	apf_buf_printf(&threads, "OPENBLAS_NUM_THREADS=%d", o->threads);
	apf_buf_printf(&home, "HOME=%s", scratch);
	/* The kernels' instruction-set path is the supervisor's decision
	 * (APF_CPU_ISA, else the best this CPU has), handed on explicitly:
	 * the trial's environment is otherwise empty. The paths give the same
	 * bits; this makes a forced one reach the trial of a run and of a
	 * replay. */
	int isa = 0;
	char isa_env[32] = "";
	if (!rc)
		rc = apf_cpu_isa(&isa);
	if (!rc)
		snprintf(isa_env, sizeof isa_env, "APF_CPU_ISA=%s",
			 apf_cpu_isa_name(isa));
	/* OpenBLAS picks its kernels per core type, and they differ in their
	 * bits: the trial's is pinned to the supervisor's, the one the
	 * environment record names (blas.core). A name that is not plain
	 * letters and digits is not handed on (OpenBLAS detects then). */
	char blas_env[64] = "";
	const char *core = apf_blas_core();
	if (core && *core && strlen(core) < 32 &&
	    strspn(core, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			 "0123456789") == strlen(core))
		snprintf(blas_env, sizeof blas_env, "OPENBLAS_CORETYPE=%s", core);
	if (!rc && (!threads.data || !home.data))
		rc = apf_error(APF_ENOMEM, "trial", "out of memory");
	const char *envp[] = {threads.data, home.data, "PATH=/usr/bin:/bin",
			      "LC_ALL=C", isa_env, blas_env, ASAN_ENV, NULL};
	struct apf_sandbox_config c;
	struct apf_sandbox_mount m[NSYS + 8 + CUDA_MAX_NODES];
	size_t nm;
	base_config(h, &c, m, &nm, envp);
	int cuda = !strcmp(o->device, "cuda");
	/* No dataset is mounted: the training split comes with the first go.
	 * The binary, the trial's own workload spec and the unit's files are
	 * copies, so that not even the mount table's root column names their
	 * host paths. */
	char *wdir = apf_path_join(o->workloads_dir, o->workload);
	char wtarget[300];
	snprintf(wtarget, sizeof wtarget, TRIAL_WORKLOADS "/%s", o->workload);
	if (o->sealed) {
		m[nm - 1].target = TRIAL_EXE; /* base_config's last: the binary */
		m[nm - 1].copy = 1;
		c.scratch = TRIAL_SCRATCH;
	}
	m[nm++] = (struct apf_sandbox_mount){
		wdir ? wdir : o->workloads_dir, o->sealed ? wtarget : NULL,
		APF_SANDBOX_READ, 0, o->sealed};
	m[nm++] = (struct apf_sandbox_mount){o->work,
					     o->sealed ? TRIAL_UNIT : NULL,
					     APF_SANDBOX_READ, 0, o->sealed};
	char cuda_nodes[CUDA_MAX_NODES][40], plugin[PATH_MAX];
	if (!rc && cuda) {
		rc = cuda_mounts(o->sealed, m, &nm, cuda_nodes, plugin,
				 sizeof plugin);
		c.paths = cuda_paths;
		c.npaths = sizeof cuda_paths / sizeof cuda_paths[0];
	}
	c.nmounts = nm;
	c.argv = argv;
	c.cwd = scratch;
	char *log_path = apf_path_join(h->log_dir, "trial.log");
	c.output = log_path;
	/* Not the training split: that comes with the first go. */
	struct apf_sandbox_fd fds[] = {{h->arena_fd, APF_FD_ARENA},
				       {h->control_fd, APF_FD_CONTROL},
				       {sv[1], APF_FD_CHANNEL}};
	c.fds = fds;
	c.nfds = 3;
	h->train_sent = 0;
	if (!rc && !log_path)
		rc = apf_error(APF_ENOMEM, "trial", "out of memory");
	uint64_t limit = apf_host_memory_limit(h);
	c.limits = (struct apf_sandbox_limits){
		.address_space = UNDER_ASAN || cuda ? 0 : limit,
		/* One limit that counts everything the trial can hold (its
		 * memfds, scratch and page cache too) where a cgroup can be
		 * had; apf_sandbox_memory_mechanism says which, logged. */
		.memory = limit,
		.open_files = 256,
		.file_size = 256ull << 20,
		.spawns = 256};
	if (!rc)
		rc = apf_sandbox_spawn(&h->sb, &c);
	free(wdir);
	free(log_path);
	close(sv[1]);
	apf_buf_free(&storage);
	apf_buf_free(&threads);
	apf_buf_free(&home);
	if (rc) {
		close(sv[0]);
		return rc;
	}
	h->chan_fd = sv[0];
	h->ch.fd = sv[0];
	return 0;
}

uint64_t apf_host_memory_limit(const apf_host *h)
{
	return h->o.memory_limit ? h->o.memory_limit : APF_HOST_DEFAULT_MEMORY;
}

const char *apf_host_memory_mechanism(const apf_host *h)
{
	return apf_sandbox_memory_mechanism(h->sb);
}

static int interrupted(const apf_host *h)
{
	return h->o.interrupted && h->o.interrupted();
}

/* Asks for the eval at the end of step `at`, the trial having been seen
 * after step `seen`. */
static void ask_eval(apf_host *h, int64_t seen, int64_t at)
{
	h->asked_after = seen;
	apf_proto_request(&h->pr, at);
	__atomic_store_n(&h->ctl->eval_at, at, __ATOMIC_RELEASE);
	h->due_ns = 0;
	h->due_step = 0;
}

/* The trial's recent pace, in ns a step (0: no step seen yet), over the
 * last stretch of at least PACE_NS (a trial's first steps are slow: its
 * data being attached, its caches cold), and the lead: how many steps the
 * trial takes in LEAD_NS at that pace. */
static uint64_t lead_steps(apf_host *h, int64_t seen, uint64_t now,
			   uint64_t *per)
{
	if (seen > h->pace_step && now - h->pace_ns >= PACE_NS) {
		h->per = (now - h->pace_ns) / (uint64_t)(seen - h->pace_step);
		h->pace_step = seen;
		h->pace_ns = now;
	}
	*per = h->per;
	if (!*per)
		return 0;
	uint64_t lead = LEAD_NS / *per;
	return lead > LEAD_MAX_STEPS ? LEAD_MAX_STEPS : lead;
}

/* The eval due (see struct apf_host), looked at on every turn of the wait:
 * asks for it when its moment has come, and returns how long the wait may
 * sleep before looking again (ns).
 * A run asks, once due_ns has passed and the trial's pace is known, for
 * the step that ends about LEAD_NS later at that pace: seen + 1 + lead.
 * A replay asks for its step S
 * at the moment the same rule would name S (seen + 1 + lead >= S). So in
 * both the trial sees eval_at written about LEAD_NS before the step it
 * names ends, to a value one step plus a lead ahead of its count; and the
 * replay has LEAD_NS of slack for its own scheduling before S would go by
 * unasked (due_missed). */
static uint64_t due_watch(apf_host *h, uint64_t now)
{
	uint64_t wait = 500000000ull, per;
	int64_t seen = __atomic_load_n(&h->ctl->step, __ATOMIC_ACQUIRE);
	uint64_t lead = lead_steps(h, seen, now, &per);
	if (h->due_ns) {
		if (now < h->due_ns)
			return h->due_ns - now < wait ? h->due_ns - now : wait;
		/* Not before the pace is known: a lead of 0 steps at an
		 * unknown pace would leave its replay one step, perhaps a few
		 * microseconds, to ask in. */
		if (!per)
			return WATCH_NS;
		ask_eval(h, seen, seen + 1 + (int64_t)lead);
		return wait;
	}
	if (!h->due_step)
		return wait;
	if (seen >= h->due_step) {
		/* Its step ended before it could be asked for: the replay
		 * ends elsewhere and fails, and says why. */
		h->due_missed = 1;
		ask_eval(h, seen, seen + 1);
		return wait;
	}
	/* Where the run asked (its log's asked_after_step), else where the
	 * rule would. */
	if (h->due_after > 0 ? seen >= h->due_after
			     : seen + 1 + (int64_t)lead >= h->due_step) {
		ask_eval(h, seen, h->due_step);
		return wait;
	}
	if (h->due_after > 0) {
		/* The lead the run had, at this trial's pace. */
		lead = (uint64_t)(h->due_step - 1 - h->due_after);
	}
	if (!per)
		return WATCH_NS; /* no step yet to know the pace by */
	/* Sleep half the time until the moment comes, and never more than a
	 * quarter of the lead (the pace may pick up), then look again. */
	uint64_t until = per * (uint64_t)(h->due_step - 1 - seen - (int64_t)lead);
	wait = until / 2 < LEAD_NS / 4 ? until / 2 : LEAD_NS / 4;
	return wait > WATCH_NS ? wait : WATCH_NS;
}

/* Serves the sandbox and waits for a line from the trial, up to
 * deadline_ns (0: none). Returns 1 with a line, 0 on timeout or
 * interruption, 2 when the trial ended (h->end_kind says how), or an
 * error. */
static int await_line(apf_host *h, char *line, size_t size,
		      uint64_t deadline_ns, int progress)
{
	for (;;) {
		int t = apf_chan_try(&h->ch, line, size);
		if (t == 1)
			return 1;
		if (t < 0) {
			apf_host_end(h, "protocol", apf_error_message());
			apf_error_clear();
			return 2;
		}
		apf_sandbox_end end;
		int ended = apf_sandbox_reap(h->sb, &end);
		if (ended == 1 || t == 2) {
			trial_gone(h, NULL);
			return 2;
		}
		if (interrupted(h))
			return 0;
		uint64_t now = apf_now_ns();
		if (deadline_ns && now >= deadline_ns)
			return 0;
		/* The due watch and the deadline of apf_host_next are on the
		 * unit's clock. */
		uint64_t cnow = h->o.clock == APF_CLOCK_CPU &&
					(progress || h->clock_deadline)
				? apf_host_clock_ns(h)
				: now;
		if (h->clock_deadline && cnow >= h->clock_deadline)
			return 0;
		uint64_t wait = progress ? due_watch(h, cnow) : 500000000ull;
		if (h->clock_deadline && h->clock_deadline - cnow < wait)
			wait = h->clock_deadline - cnow;
		if (deadline_ns && deadline_ns - now < wait)
			wait = deadline_ns - now;
		struct pollfd p[4] = {{h->chan_fd, POLLIN, 0},
				      {apf_sandbox_notify_fd(h->sb), POLLIN, 0},
				      {apf_sandbox_exit_fd(h->sb), POLLIN, 0},
				      {apf_sandbox_output_fd(h->sb), POLLIN, 0}};
		struct timespec ts = {(time_t)(wait / 1000000000ull),
				      (long)(wait % 1000000000ull)};
		int pr = ppoll(p, 4, &ts, NULL);
		if (pr < 0 && errno != EINTR)
			return apf_error_errno(APF_EIO, errno, "trial", "poll");
		if (pr > 0 && p[3].revents)
			apf_sandbox_output_drain(h->sb);
		if (pr > 0 && (p[1].revents & POLLIN)) {
			apf_sandbox_event ev;
			int rc = apf_sandbox_notify_handle(h->sb, &ev);
			if (rc)
				return rc;
		}
		if (progress && h->o.tick && now - h->last_tick >= TICK_NS) {
			h->last_tick = now;
			h->o.tick(h->o.user,
				  __atomic_load_n(&h->ctl->step, __ATOMIC_RELAXED),
				  now);
		}
	}
}

int apf_host_start(apf_host *h, int64_t step)
{
	uint64_t spawn_t = apf_now_ns();
	/* The control page starts where the arena does: the step count a
	 * replay's watch compares with is right before the first step. */
	__atomic_store_n(&h->ctl->step, step, __ATOMIC_RELEASE);
	__atomic_store_n(&h->ctl->eval_at, 0, __ATOMIC_RELEASE);
	h->due_ns = 0;
	h->due_step = 0;
	int rc = spawn_trial(h);
	if (rc)
		return rc;
	char line[APF_LINE_MAX];
	uint64_t deadline = spawn_t + SETUP_TIMEOUT_NS, locked_t = 0;
	int64_t max = h->spec->max_steps > 0 ? h->spec->max_steps : 0;
	h->pr = (struct apf_proto){APF_PROTO_SETUP, step, max, 0, 0};
	for (;;) {
		int w = await_line(h, line, sizeof line, deadline, 0);
		struct apf_proto_msg m;
		if (w < 0)
			return w;
		if (w == 0 && interrupted(h))
			return 0;
		if (w == 2)
			return 0;
		if (w == 0) {
			char msg[200];
			if (locked_t)
				snprintf(msg, sizeof msg,
					 "loading the submission and "
					 "init_optimizer_state ran past their "
					 "allowance of %.1f s",
					 (double)h->u.init_allowance_ns / 1e9);
			else
				snprintf(msg, sizeof msg,
					 "set-up took more than %llu s",
					 SETUP_TIMEOUT_NS / 1000000000ull);
			apf_host_end(h, "timeout", msg);
			return 0;
		}
		if (apf_proto_accept(&h->pr, line, &m)) {
			apf_host_end(h, "protocol", apf_error_message());
			apf_error_clear();
			return 0;
		}
		if (m.kind == APF_PROTO_ERROR) {
			trial_gone(h, m.text);
			return 0;
		}
		if (m.kind == APF_PROTO_WARN) {
			if (h->o.warn)
				h->o.warn(h->o.user, m.text);
			continue;
		}
		if (m.kind == APF_PROTO_LOCK) {
			rc = apf_sandbox_set_phase(h->sb, APF_SANDBOX_LOCKED);
			if (rc == APF_EABORT) {
				apf_host_end(h, "syscall", apf_error_message());
				apf_error_clear();
				return 0;
			}
			if (!rc)
				rc = apf_chan_send(h->chan_fd, "locked");
			if (rc)
				return rc;
			apf_proto_locked(&h->pr);
			locked_t = apf_now_ns();
			deadline = locked_t + h->u.init_allowance_ns;
			continue;
		}
		uint64_t now = apf_now_ns(); /* APF_PROTO_READY */
		h->init_ns = now - spawn_t;
		h->submission_init_ns = now - locked_t;
		h->batch = m.batch;
		return 1;
	}
}

void apf_host_setup_times(const apf_host *h, uint64_t *init_ns,
			  uint64_t *submission_init_ns, int64_t *batch)
{
	*init_ns = h->init_ns;
	*submission_init_ns = h->submission_init_ns;
	*batch = h->batch;
}


int apf_host_go(apf_host *h, uint64_t sub_ns, int64_t evals,
		const json_t *m, int64_t eval_at)
{
	const char *mn = h->spec->metric;
	apf_proto_go(&h->pr, eval_at);
	__atomic_store_n(&h->ctl->eval_at, eval_at, __ATOMIC_RELEASE);
	h->pace_step = h->pr.step;
	h->pace_ns = apf_host_clock_ns(h); /* due_watch's clock */
	h->per = 0;
	h->asked_after = 0;
	/* The first go of a trial process carries the training split: until
	 * the clock runs there is nothing in the trial to train on. */
	int fd = h->train_sent ? -1 : h->train_fd;
	h->train_sent = 1;
	return apf_chan_send_fd(
		h->chan_fd, fd,
		"go %llu %lld %.17g %.17g %.17g %.17g %.17g %.17g",
		(unsigned long long)sub_ns, (long long)evals,
		apf_eval_metric(m, "train", "loss"), apf_eval_metric(m, "train", mn),
		apf_eval_metric(m, "validation", "loss"), apf_eval_metric(m, "validation", mn),
		apf_eval_metric(m, "test", "loss"), apf_eval_metric(m, "test", mn));
}

void apf_host_due(apf_host *h, uint64_t at_ns)
{
	h->due_ns = at_ns;
	h->due_step = 0;
}

void apf_host_due_step(apf_host *h, int64_t step, int64_t after)
{
	h->due_ns = 0;
	h->due_step = step;
	h->due_after = after > 0 && after < step ? after : 0;
	h->due_missed = 0;
}

int64_t apf_host_asked_after(const apf_host *h)
{
	return h->asked_after;
}

int apf_host_due_missed(const apf_host *h)
{
	return h->due_missed;
}

/* The wall-time backstop of a deadline on the cpu clock (apf_host_next). */
static uint64_t wall_backstop(apf_host *h, uint64_t deadline_ns)
{
	uint64_t cnow = apf_host_clock_ns(h);
	uint64_t left = deadline_ns > cnow ? deadline_ns - cnow : 0;
	/* The clock runs at threads / cores of wall time with every core
	 * the trial's. */
	double pace = h->o.threads > 0 && h->o.threads < APF_CLOCK_CPU_CORES
			      ? (double)APF_CLOCK_CPU_CORES / h->o.threads
			      : 1.0;
	return apf_now_ns() + (uint64_t)(4.0 * pace * (double)left) +
	       30000000000ull;
}

static int next_report(apf_host *h, uint64_t wall_deadline, int64_t *step,
		       enum apf_proto_why *why)
{
	char line[APF_LINE_MAX];
	struct apf_proto_msg m;
	int copying = 0;
	do {
		int w = await_line(h, line, sizeof line, wall_deadline,
				   !copying);
		uint64_t now = apf_now_ns();
		if (w < 0)
			return w;
		if (w == 0 && copying && !interrupted(h)) {
			apf_host_end(h, "timeout", "the trial reported an eval "
						   "but did not copy its arena "
						   "within the budget");
			return APF_HOST_ENDED;
		}
		if (w == 0)
			return APF_HOST_TIMEOUT;
		if (w == 2)
			return APF_HOST_ENDED;
		if (apf_proto_accept(&h->pr, line, &m)) {
			apf_host_end(h, "protocol", apf_error_message());
			apf_error_clear();
			return APF_HOST_ENDED;
		}
		if (m.kind == APF_PROTO_ERROR) {
			trial_gone(h, m.text);
			return APF_HOST_ENDED;
		}
		if (m.kind == APF_PROTO_WARN && h->o.warn)
			h->o.warn(h->o.user, m.text);
		if (m.kind == APF_PROTO_EVAL) {
			*step = m.step;
			*why = m.why;
			h->report_ns = now;
			copying = 1;
		} else if (m.kind == APF_PROTO_COPIED) {
			h->copy_ns = now - h->report_ns;
			copying = 0;
		}
	} while (m.kind != APF_PROTO_COPIED);
	return APF_HOST_REPORT;
}

int apf_host_next(apf_host *h, uint64_t deadline_ns, int64_t *step,
		  enum apf_proto_why *why)
{
	uint64_t wall_deadline = deadline_ns;
	if (h->o.clock == APF_CLOCK_CPU && deadline_ns) {
		h->clock_deadline = deadline_ns;
		wall_deadline = wall_backstop(h, deadline_ns);
	}
	int rc = next_report(h, wall_deadline, step, why);
	h->clock_deadline = 0;
	return rc;
}

uint64_t apf_host_clock_ns(apf_host *h)
{
	if (h->o.clock != APF_CLOCK_CPU)
		return apf_now_ns();
	uint64_t ns;
	if (h->sb && !apf_sandbox_cpu_ns(h->sb, &ns))
		h->last_clock = ns / APF_CLOCK_CPU_CORES;
	else
		apf_error_clear();
	return h->last_clock;
}

int apf_host_usage(apf_host *h, struct apf_sandbox_usage *u)
{
	*u = (struct apf_sandbox_usage){0};
	return h->sb ? apf_sandbox_usage(h->sb, u)
		     : apf_error(APF_EIO, "host", "no trial process");
}

void apf_host_report_times(const apf_host *h, uint64_t *report_ns,
			   uint64_t *copy_ns)
{
	*report_ns = h->report_ns;
	*copy_ns = h->copy_ns;
}

int apf_host_freeze(apf_host *h)
{
	if (apf_sandbox_stop(h->sb)) {
		apf_error_clear();
		trial_gone(h, NULL);
		return 0;
	}
	if (!memfd_intact(h->arena_fd, h->u.capacity) ||
	    !memfd_intact(h->control_fd, 4096)) {
		apf_host_end(h, "protocol", "the arena or control memory lost "
					    "its size or seals");
		return 0;
	}
	return 1;
}

int apf_host_resume(apf_host *h)
{
	if (apf_sandbox_cont(h->sb)) {
		apf_error_clear();
		trial_gone(h, NULL);
		return 0;
	}
	return 1;
}

void apf_host_kill(apf_host *h)
{
	if (h->sb)
		apf_sandbox_kill(h->sb);
}

void apf_host_stop(apf_host *h)
{
	if (!h->sb)
		return;
	/* A cleanup, as apf_evaluator_stop: the caller's pending error
	 * survives it. */
	char keep[1024];
	apf_error_take(keep, sizeof keep);
	apf_chan_send(h->chan_fd, "stop");
	apf_sandbox_cont(h->sb);
	apf_sandbox_end end;
	if (apf_sandbox_wait(h->sb, 3000, &end) != 1)
		apf_sandbox_kill(h->sb);
	apf_error_restore(0, keep);
}
