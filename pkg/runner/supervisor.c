/*
 * supervisor.c: `apf run` before and around the units: the checks before
 * anything runs (the entry verifies; workload specs and datasets on this
 * machine match the manifest's digests; the environment matches the
 * manifest's or the drift is allowed and logged; the kernel allows the
 * sandbox or --unsealed says otherwise), the run directory (new, resumed, or
 * one more unit of the same entry), and the loop over units.
 */
#include "runner/runner.h"

#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "entry/entry.h"
#include "hash/hash.h"
#include "host/host.h"
#include "nn/cpu/isa.h"
#include "nn/nn.h"
#include "rundir/events.h"
#include "rundir/resume.h"
#include "rundir/rundir.h"
#include "runlog/runlog.h"
#include "runner/internal.h"
#include "sandbox/sandbox.h"
#include "sign/sign.h"
#include "sysinfo/sysinfo.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

extern const char apf_build_id[];

static volatile sig_atomic_t stop_signal, preempt_signal;

/* SIGINT stops at once (the work since the last eval is lost); SIGTERM and
 * SIGUSR1 (Slurm's warning before it preempts or ends a job) preempt: the
 * unit under way stops at once too, logs the preemption and signs its
 * head, so that a resume goes on from its last eval. Neither makes an
 * eval (unit.c, preempt). */
static void on_signal(int sig)
{
	if (sig == SIGINT)
		stop_signal = sig;
	else
		preempt_signal = sig;
}

int apf_run_interrupted(void)
{
	return stop_signal != 0;
}

int apf_run_preempted(void)
{
	return preempt_signal != 0;
}

int apf_run_stopping(void)
{
	return stop_signal != 0 || preempt_signal != 0;
}

const char *apf_run_preempt_signal(void)
{
	return preempt_signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
}

static void unit_name(const struct apf_plan_unit *u, char *out, size_t size)
{
	apf_rundir_unit_name(out, size, u->study, u->workload, u->variant,
			     u->trial + 1);
}

void apf_runner_notice(const struct run *r, const char *fmt, ...)
{
	if (!r->o->notice)
		return;
	char line[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	r->o->notice(r->o->user, line);
}

/* Appends a run-level record, checked against the log's format first:
 * the runner never writes what its verifier would refuse. */
static int append(apf_runlog *log, const char *event, const json_t *fields,
		  int sync)
{
	int rc = apf_rundir_event_check(event, fields);
	return rc ? rc : apf_runlog_append(log, apf_now_ns(), event, fields, sync);
}

static void now_iso(char out[32])
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- checks before anything runs ------------------------------------------ */

static int check_inputs(struct run *r)
{
	const apf_manifest *m = r->entry->manifest;
	for (size_t i = 0; i < m->nworkloads; i++) {
		const struct apf_manifest_workload *mw = &m->workloads[i];
		apf_workload_spec *w;
		int rc = apf_workload_spec_load(&w, mw->name);
		if (rc)
			return apf_error_prefix(rc, "workload");
		apf_tree *t = NULL;
		char hex[65];
		rc = apf_tree_hash(&t, w->dir, NULL);
		if (!rc) {
			apf_hex(hex, t->digest, APF_SHA256_LEN);
			if (strcmp(hex, mw->spec_digest))
				rc = apf_error(APF_EVERIFY, w->dir,
					       "workload '%s' differs from the "
					       "entry's (spec sha256 %.16s..., the "
					       "manifest says %.16s...)",
					       mw->name, hex, mw->spec_digest);
		}
		apf_tree_free(t);
		t = NULL;
		const struct apf_manifest_dataset *d =
			rc ? NULL : apf_manifest_find_dataset(m, mw->dataset);
		if (!rc && d) {
			rc = apf_tree_hash(&t, w->dataset_path, NULL);
			if (!rc) {
				apf_hex(hex, t->digest, APF_SHA256_LEN);
				if (strcmp(hex, d->tree_digest))
					rc = apf_error(
						APF_EVERIFY, w->dataset_path,
						"dataset '%s' differs from the "
						"entry's (sha256 %.16s..., the "
						"manifest says %.16s...)",
						d->name, hex, d->tree_digest);
			}
			apf_tree_free(t);
		}
		apf_workload_spec_free(w);
		if (rc)
			return rc;
	}
	return 0;
}

struct drift {
	json_t *fields;  /* every field that differs (the env_drift record) */
	apf_buf text;    /* those that can change a result */
	apf_buf benign;  /* those that cannot */
	int hard;
	int cpu_run;     /* the trials compute on the CPU */
};

/* Whether an environment field that differs can change what a CPU trial
 * computes. apf's kernels compute every output with the same float
 * operations on every instruction-set path (nn/cpu/gemm.h, nn/cpu/fast.h;
 * OpenBLAS computes none of a trial's results), so the CPU's model, core
 * count, memory, kernel, the path and BLAS cannot; a CPU that gains or
 * loses AVX2 and FMA can, through the C library: glibc picks an FMA
 * variant of expf there, which rounds two floats differently. So can the
 * compiler, the C library, apf itself, the OS and the image. Times still differ across machines:
 * apf score says so when it compares runs. */
static int drift_harmless(const char *field, const char *expected,
			  const char *actual, int cpu_run)
{
	/* The GPUs and the CUDA libraries installed (the record's gpus and
	 * cuda fields) compute nothing of a CPU trial's; a CUDA trial's bits
	 * are those of one GPU model (compute capability) and one driver,
	 * runtime, cuBLAS and cuDNN, so for it they are hard. */
	if (!strcmp(field, "cuda") || !strcmp(field, "gpus"))
		return cpu_run;
	static const char *const benign[] = {"cpu.model", "cpu.cores",
					     "cpu.isa", "memory_bytes",
					     "kernel", NULL};
	for (const char *const *b = benign; *b; b++)
		if (!strcmp(field, *b))
			return 1;
	if (!strncmp(field, "blas.", 5))
		return 1;
	if (!strcmp(field, "cpu.flags")) {
		int e = strstr(expected, "\"avx2\"") && strstr(expected, "\"fma\"");
		int a = strstr(actual, "\"avx2\"") && strstr(actual, "\"fma\"");
		return e == a;
	}
	return 0;
}

static void on_drift(void *user, const char *field, const char *expected,
		     const char *actual)
{
	struct drift *d = user;
	json_array_append_new(d->fields,
			      json_pack("{s:s, s:s, s:s}", "field", field,
					"expected", expected, "actual", actual));
	int benign = drift_harmless(field, expected, actual, d->cpu_run);
	apf_buf *b = benign ? &d->benign : &d->text;
	apf_buf_printf(b, "%s%s (entry %s, here %s)", b->len ? "; " : "", field,
		       expected, actual);
	d->hard += !benign;
}

/* ---- the run directory ---------------------------------------------------- */

static json_t *run_json(struct run *r)
{
	const apf_manifest *m = r->entry->manifest;
	const apf_plan *p = r->plan;
	json_t *units = json_array();
	for (size_t i = 0; i < p->n; i++)
		json_array_append_new(
			units, json_pack("{s:s, s:s, s:I, s:I}", "workload",
					 p->units[i].workload, "variant",
					 p->units[i].variant,
					 "study", (json_int_t)p->units[i].study,
					 "trial",
					 (json_int_t)p->units[i].trial + 1));
	char host[256] = "unknown";
	gethostname(host, sizeof host - 1);
	char keyid[APF_KEYID_HEX], created[32];
	apf_key_id(r->key, keyid);
	now_iso(created);
	const char *base = strrchr(r->entry->path, '/');
	json_t *j = json_pack(
		"{s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:s}, "
		"s:s, s:b, s:i, s:{s:s, s:s, s:I, s:I, s:I, s:f, s:o}, s:O, s:s}",
		"format", "apf-run-v1", "submission", m->submission.name, "entry",
		"file", base ? base + 1 : r->entry->path, "sha256",
		r->entry->file_digest, "manifest_sha256",
		r->entry->manifest_digest, "signer", r->entry->signer, "runner",
		"keyid", keyid, "host", host, "apf_version", APF_VERSION, "build",
		apf_build_id, "device", r->device, "sealed", r->sealed, "threads",
		r->threads, "plan", "ruleset", m->tuning.ruleset, "rules",
		m->tuning.rules, "studies", (json_int_t)m->tuning.studies,
		"trials", (json_int_t)m->tuning.trials, "seed",
		(json_int_t)m->tuning.seed, "budget_multiplier",
		m->tuning.budget_multiplier, "units", units, "environment",
		r->env, "created", created);
	/* Written only where they differ from a result's: a run directory
	 * of the wall clock at full budget reads as it always did. */
	json_t *plan = json_object_get(j, "plan");
	if (plan && r->clock != APF_CLOCK_WALL)
		json_object_set_new(plan, "clock",
				    json_string(apf_clock_name(r->clock)));
	if (plan && r->budget_scale != 1.0)
		json_object_set_new(plan, "budget_scale",
				    json_real(r->budget_scale));
	/* Always written: a run.json without it is one made before apf
	 * recorded its numerics, which computed with version 1. */
	if (j)
		json_object_set_new(j, "numerics", json_integer(r->numerics));
	return j;
}

static int copy_file(const char *from, const char *to)
{
	char *data;
	size_t len;
	int rc = apf_file_read(&data, &len, from, 1u << 30);
	if (rc)
		return rc;
	rc = apf_file_write(to, data, len, 0644, APF_ATOMIC_NOREPLACE);
	free(data);
	return rc;
}

static int log_run_start(struct run *r, const json_t *drift)
{
	json_t *f = json_pack("{s:s, s:s, s:s, s:b, s:s, s:i}", "run_json_sha256",
			      r->run_json_sha256, "entry_sha256",
			      r->entry->file_digest, "manifest_sha256",
			      r->entry->manifest_digest, "sealed", r->sealed,
			      "device", r->device, "threads", r->threads);
	int rc = append(r->log, "run_start", f, 0);
	json_decref(f);
	if (!rc && drift && json_array_size(drift)) {
		f = json_pack("{s:b, s:O}", "allowed", 1, "fields", drift);
		rc = append(r->log, "env_drift", f, 0);
		json_decref(f);
	}
	if (!rc && !r->sealed) {
		f = json_pack("{s:s}", "reason",
			      "--unsealed: no namespaces; the path checks can "
			      "race, and the host is visible");
		rc = append(r->log, "unsealed", f, 0);
		json_decref(f);
	}
	return rc ? rc : apf_runlog_sync(r->log);
}

/* The directory is made whole under a temporary name and renamed into
 * place, so a crash leaves either no run directory or one with run.json,
 * the entry and an empty signed index. The units' logs come with them. */
static int create_run_dir(struct run *r)
{
	apf_buf tmp = {0};
	apf_buf_printf(&tmp, "%s.tmp.XXXXXX", r->run_dir);
	if (!tmp.data || !mkdtemp(tmp.data)) {
		int e = errno;
		apf_buf_free(&tmp);
		return apf_error_errno(APF_EIO, e, r->run_dir, "create");
	}
	chmod(tmp.data, 0755);
	char *entry_copy = apf_path_join(tmp.data, "entry.apf");
	char *rj = apf_path_join(tmp.data, "run.json");
	json_t *j = run_json(r);
	char *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
	int rc = text ? 0 : apf_error(APF_ENOMEM, "run.json", "out of memory");
	if (!rc)
		rc = copy_file(r->entry->path, entry_copy);
	if (!rc && r->heldout) {
		char *h = apf_path_join(tmp.data, "heldout.json");
		rc = h ? copy_file(r->heldout, h)
		       : apf_error(APF_ENOMEM, "run", "out of memory");
		free(h);
	}
	if (!rc) {
		apf_buf b = {0};
		apf_buf_printf(&b, "%s\n", text);
		rc = apf_sha256_hex(r->run_json_sha256, b.data, b.len);
		if (!rc)
			rc = apf_file_write(rj, b.data, b.len, 0644,
					    APF_ATOMIC_NOREPLACE);
		apf_buf_free(&b);
	}
	if (!rc)
		rc = apf_rundir_index_update(tmp.data, r->key, r->run_json_sha256,
					     NULL, 0, NULL);
	if (!rc && rename(tmp.data, r->run_dir) != 0)
		rc = apf_error_errno(errno == EEXIST || errno == ENOTEMPTY
					     ? APF_EINPUT
					     : APF_EIO,
				     errno, r->run_dir, "create");
	if (!rc) {
		char *parent = apf_strdup(r->run_dir);
		char *slash = parent ? strrchr(parent, '/') : NULL;
		if (slash)
			*slash = 0;
		rc = apf_fsync_dir(slash ? parent : ".");
		free(parent);
	}
	if (rc)
		apf_remove_tree(tmp.data);
	free(text);
	json_decref(j);
	free(entry_copy);
	free(rj);
	apf_buf_free(&tmp);
	return rc;
}

/* An existing run directory must be of this entry, runner and settings. */
static int open_run_dir(struct run *r)
{
	char *rj = apf_path_join(r->run_dir, "run.json");
	char *logp = apf_path_join(r->run_dir, "log.jsonl");
	char *text = NULL;
	size_t len;
	struct stat st;
	int rc = 0;
	if (logp && lstat(logp, &st) == 0)
		rc = apf_error(APF_EINPUT, r->run_dir,
			       "a run of apf's single-log layout (one log.jsonl "
			       "for all units): apf verify, score and report "
			       "read it, but new units go into a new run "
			       "directory");
	if (!rc)
		rc = apf_file_read(&text, &len, rj, 1 << 24);
	json_t *j = NULL;
	if (!rc) {
		apf_sha256_hex(r->run_json_sha256, text, len);
		j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
		if (!j)
			rc = apf_error(APF_EINPUT, rj, "not valid JSON");
	}
	char keyid[APF_KEYID_HEX];
	apf_key_id(r->key, keyid);
	if (!rc) {
		const char *sha = json_string_value(
			json_object_get(json_object_get(j, "entry"), "sha256"));
		const char *kid = json_string_value(
			json_object_get(json_object_get(j, "runner"), "keyid"));
		const char *dev = json_string_value(json_object_get(j, "device"));
		json_t *sealed = json_object_get(j, "sealed");
		json_int_t threads = json_integer_value(json_object_get(j, "threads"));
		if (!sha || strcmp(sha, r->entry->file_digest))
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "a run of another entry");
		else if (!kid || strcmp(kid, keyid))
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "signed by another runner key");
		else if (!dev || strcmp(dev, r->device) ||
			 json_is_true(sealed) != r->sealed ||
			 threads != r->threads)
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "ran with other settings (device %s, "
				       "%s, %lld thread%s; this run: device %s, "
				       "%s, %d thread%s): give the same, "
				       "--device %s --threads %lld%s",
				       dev ? dev : "?",
				       json_is_true(sealed) ? "sealed" : "unsealed",
				       (long long)threads, threads == 1 ? "" : "s",
				       r->device, r->sealed ? "sealed" : "unsealed",
				       r->threads, r->threads == 1 ? "" : "s",
				       dev ? dev : "?",
				       (long long)threads,
				       json_is_true(sealed)
					       ? " and no --unsealed"
					       : " --unsealed");
		else if ((r->o->clock >= 0 &&
			  apf_clock_of_run(j) != r->clock) ||
			 (r->o->budget_scale > 0 &&
			  apf_budget_scale_of_run(j) != r->budget_scale))
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "ran with --clock %s --budget-scale %g; "
				       "give the same to add to it",
				       apf_clock_name(apf_clock_of_run(j)),
				       apf_budget_scale_of_run(j));
		int nx = apf_numerics_of_run(j);
		if (!rc && (nx < APF_NUMERICS_OLDEST ||
			    nx > APF_NUMERICS_LATEST))
			rc = nx < 0 ? apf_error(APF_EINPUT, rj,
						"numerics: not one apf writes")
				    : apf_error(APF_EINPUT, rj,
						"numerics %d: this apf computes "
						"numerics %d to %d",
						nx, APF_NUMERICS_OLDEST,
						APF_NUMERICS_LATEST);
		else if (!rc && r->o->numerics && nx != r->o->numerics)
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "computed with numerics %d: give "
				       "--numerics %d, or none, to add to it",
				       nx, nx);
		else if (!rc)
			r->numerics = nx; /* not given: the run directory's */
		if (!rc) {
			/* Not given: the run directory's own. */
			r->clock = apf_clock_of_run(j);
			r->budget_scale = apf_budget_scale_of_run(j);
			if (r->clock < 0 || !(r->budget_scale > 0))
				rc = apf_error(APF_EINPUT, rj,
					       "plan.clock or plan.budget_scale "
					       "is not one apf writes");
		}
	}
	free(text);
	json_decref(j);
	free(rj);
	free(logp);
	return rc;
}

/* ---- the log's story of each unit ------------------------------------------ */

static int selected(const struct run *r, const struct apf_plan_unit *u);

static long unit_index(struct run *r, const char *name)
{
	char buf[512];
	for (size_t i = 0; i < r->plan->n; i++) {
		unit_name(&r->plan->units[i], buf, sizeof buf);
		if (!strcmp(buf, name))
			return (long)i;
	}
	return -1;
}

static int scan_record(void *user, const struct apf_runlog_record *rec)
{
	struct run *r = user;
	const char *unit = json_string_value(json_object_get(rec->obj, "unit"));
	if (!unit)
		return 0;
	long i = unit_index(r, unit);
	if (i < 0)
		return 0;
	apf_rundir_unit_apply(&r->states[i], rec->event, rec->obj);
	return 0;
}

/* A unit's log whose last session ended (run_end) is signed and in the
 * index; a runner killed between its run_end and the index update left it
 * out, so it is signed and entered now (the log's chain was just read). */
static int settle_closed_log(struct run *r, const json_t *index,
			     const char *name, const char *logp)
{
	json_t *e = json_object_get(index, name);
	apf_runlog *l = NULL;
	int rc = apf_runlog_open_append(&l, logp, 0, NULL);
	if (rc)
		return rc;
	const char *head = json_string_value(json_object_get(e, "head"));
	if (!e || !head || strcmp(head, apf_runlog_head(l)) ||
	    (uint64_t)json_integer_value(json_object_get(e, "records")) !=
		    apf_runlog_count(l)) {
		char *dir = apf_path_join(r->run_dir, name);
		rc = dir ? apf_rundir_sign_head(dir, r->key, r->run_json_sha256, l)
			 : apf_error(APF_ENOMEM, "run", "out of memory");
		if (!rc)
			rc = apf_rundir_index_update(r->run_dir, r->key,
						     r->run_json_sha256, name,
						     apf_runlog_count(l),
						     apf_runlog_head(l));
		free(dir);
	}
	int crc = apf_runlog_close(l);
	return rc ? rc : crc;
}

static int last_event_cb(void *user, const struct apf_runlog_record *rec)
{
	*(int *)user = !strcmp(rec->event, "run_end");
	return 0;
}

/* A unit whose trial ended but whose last session was stopped (a signal
 * between trial_end and run_end, by an apf older than run_one's check, or
 * a crash there) has its result in the log already: the session is closed
 * now (run_end, the signed head, the index), so that the run can end and
 * apf verify's "apf run --resume continues it" holds, rather than leaving
 * a unit that no run will touch again. cut: a torn last record may go
 * (--resume). */
static int close_ended_log(struct run *r, size_t i, const char *name,
			   const char *logp, int cut)
{
	const struct apf_rundir_unit *st = &r->states[i];
	apf_runlog *l = NULL;
	uint64_t cut_bytes = 0;
	int rc = apf_runlog_open_append(&l, logp, cut, &cut_bytes);
	json_t *f = rc ? NULL
		       : json_pack("{s:I, s:I, s:I}", "units", (json_int_t)1,
				   "completed", (json_int_t)!st->failed,
				   "failed", (json_int_t)!!st->failed);
	if (!rc && !f)
		rc = apf_error(APF_ENOMEM, "run", "out of memory");
	if (!rc)
		rc = append(l, "run_end", f, 1);
	json_decref(f);
	char *dir = rc ? NULL : apf_path_join(r->run_dir, name);
	if (!rc && !dir)
		rc = apf_error(APF_ENOMEM, "run", "out of memory");
	if (!rc)
		rc = apf_rundir_sign_head(dir, r->key, r->run_json_sha256, l);
	if (!rc)
		rc = apf_rundir_index_update(r->run_dir, r->key,
					     r->run_json_sha256, name,
					     apf_runlog_count(l),
					     apf_runlog_head(l));
	free(dir);
	int crc = l ? apf_runlog_close(l) : 0;
	if (!rc && !crc)
		apf_runner_notice(r,
				  "%s: had ended (%s) in a session stopped "
				  "before its run_end: closed its log",
				  name, st->failed ? "failed" : "completed");
	return rc ? rc : crc;
}

/* Each selected unit's own log, as far as it is whole: a torn last line
 * (a crash) is cut when the unit is resumed. */
static int scan_logs(struct run *r)
{
	int rc = 0;
	for (size_t i = 0; i < r->plan->n; i++)
		apf_rundir_unit_init(&r->states[i]);
	json_t *index = NULL;
	rc = apf_rundir_index_get(&index, r->run_dir, r->key, r->run_json_sha256);
	for (size_t i = 0; !rc && i < r->plan->n; i++) {
		if (r->unit_locks[i] < 0)
			continue;
		char name[512];
		unit_name(&r->plan->units[i], name, sizeof name);
		apf_buf p = {0};
		apf_buf_printf(&p, "%s/%s/log.jsonl", r->run_dir, name);
		if (!p.data)
			return apf_error(APF_ENOMEM, "run", "out of memory");
		struct stat st;
		if (lstat(p.data, &st) == 0) {
			const struct apf_runlog_read_opts ro = {
				.fn = scan_record, .user = r, .json = 1};
			struct apf_runlog_summary sum = {0};
			rc = apf_runlog_walk(&sum, p.data, &ro);
			if (rc == APF_EVERIFY && sum.torn_bytes) {
				apf_error_clear();
				rc = 0;
				/* Only a resume goes on from a crash. */
				r->states[i].started = 1;
				if (r->states[i].ended && r->o->resume)
					rc = close_ended_log(r, i, name,
							     p.data, 1);
			} else if (!rc) {
				int closed = 0;
				const struct apf_runlog_read_opts lo = {
					.fn = last_event_cb, .user = &closed};
				struct apf_runlog_summary ls = {0};
				rc = apf_runlog_walk(&ls, p.data, &lo);
				if (!rc && closed)
					rc = settle_closed_log(r, index, name,
							       p.data);
				else if (!rc && r->states[i].ended)
					rc = close_ended_log(r, i, name,
							     p.data, 0);
			}
		}
		apf_buf_free(&p);
	}
	json_decref(index);
	return rc;
}

/* Each selected unit is flock'd (RUN/<unit>/.lock) while this process
 * works on it, so two runners - two apf run -j, two Slurm tasks - never
 * write one unit's log; apf status reads the lock to tell a unit that is
 * running from one that was stopped. */
static int lock_units(struct run *r)
{
	for (size_t i = 0; i < r->plan->n; i++)
		r->unit_locks[i] = -1;
	for (size_t i = 0; i < r->plan->n; i++) {
		if (!selected(r, &r->plan->units[i]))
			continue;
		char name[512];
		unit_name(&r->plan->units[i], name, sizeof name);
		apf_buf p = {0};
		apf_buf_printf(&p, "%s/%s", r->run_dir, name);
		int rc = p.data ? apf_mkdirs(p.data, 0755)
				: apf_error(APF_ENOMEM, "run", "out of memory");
		if (!rc)
			apf_buf_puts(&p, "/.lock");
		int fd = rc ? -1
			    : open(p.data, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
				   0644);
		if (!rc && fd < 0)
			rc = apf_error_errno(APF_EIO, errno, p.data, "open");
		if (!rc && flock(fd, LOCK_EX | LOCK_NB) != 0)
			rc = errno == EWOULDBLOCK
				     ? apf_error(APF_EINPUT, r->run_dir,
						 "%s is being run by another "
						 "apf process",
						 name)
				     : apf_error_errno(APF_EIO, errno, p.data,
						       "lock");
		apf_buf_free(&p);
		if (rc) {
			if (fd >= 0)
				close(fd);
			return rc;
		}
		r->unit_locks[i] = fd;
	}
	return 0;
}

/* ---- the run ------------------------------------------------------------------ */

static int selected(const struct run *r, const struct apf_plan_unit *u)
{
	const struct apf_run_opts *o = r->o;
	return (!o->workload || !strcmp(o->workload, u->workload)) &&
	       (!o->variant || !strcmp(o->variant, u->variant)) &&
	       (o->study < 0 || o->study == u->study) &&
	       (o->trial < 0 || o->trial == u->trial + 1);
}

/* The selectors given and what the plan has, so that the one line shows
 * the typo or the off-by-one (--trial counts from 1, --study from 0). */
static int no_unit_matches(const struct run *r)
{
	const struct apf_run_opts *o = r->o;
	apf_buf given = {0}, names = {0}, variants = {0};
	if (o->workload)
		apf_buf_printf(&given, " --workload %s", o->workload);
	if (o->variant)
		apf_buf_printf(&given, " --variant %s", o->variant);
	if (o->study >= 0)
		apf_buf_printf(&given, " --study %ld", o->study);
	if (o->trial >= 0)
		apf_buf_printf(&given, " --trial %ld", o->trial);
	long studies = 0, trials = 0;
	for (size_t i = 0; i < r->plan->n; i++) {
		const struct apf_plan_unit *u = &r->plan->units[i];
		size_t k = 0;
		while (k < i && strcmp(r->plan->units[k].workload, u->workload))
			k++;
		if (k == i)
			apf_buf_printf(&names, "%s%s", i ? ", " : "",
				       u->workload);
		/* The held-out variants too, named as --variant takes them. */
		k = 0;
		while (k < i && strcmp(r->plan->units[k].variant, u->variant))
			k++;
		if (k == i && strcmp(u->variant, "base"))
			apf_buf_printf(&variants, ", %s", u->variant);
		studies = u->study + 1 > studies ? u->study + 1 : studies;
		trials = u->trial + 1 > trials ? u->trial + 1 : trials;
	}
	/* Variants are named only where the plan has held-out ones or
	 * --variant was given: "variants base, gelu, ". */
	apf_buf vs = {0};
	if (variants.data || o->variant)
		apf_buf_printf(&vs, "variants base%s, ",
			       variants.data ? variants.data : "");
	int rc = apf_error(APF_EUSAGE, "run",
			   "no unit of the plan matches%s (the plan has "
			   "workload%s %s, %sstudies 0-%ld, trials 1-%ld; see "
			   "apf plan)",
			   given.data ? given.data : "",
			   strchr(names.data ? names.data : "", ',') ? "s" : "",
			   names.data ? names.data : "none",
			   vs.data ? vs.data : "", studies - 1, trials);
	apf_buf_free(&vs);
	apf_buf_free(&given);
	apf_buf_free(&names);
	apf_buf_free(&variants);
	return rc;
}

char *apf_run_default_dir(const char *entry)
{
	const char *base = strrchr(entry, '/');
	base = base ? base + 1 : entry;
	size_t n = strlen(base);
	if (n > 4 && !strcmp(base + n - 4, ".apf"))
		n -= 4;
	apf_buf b = {0};
	apf_buf_printf(&b, "%.*s.run", (int)n, base);
	return b.data;
}

static void summary(struct run *r)
{
	if (r->already)
		apf_runner_notice(r,
				  "%s: %zu unit%s completed, %zu failed; %zu "
				  "selected unit%s had already ended",
				  r->run_dir, r->completed,
				  r->completed == 1 ? "" : "s", r->failed,
				  r->already, r->already == 1 ? "" : "s");
	else
		apf_runner_notice(r, "%s: %zu unit%s completed, %zu failed",
				  r->run_dir, r->completed,
				  r->completed == 1 ? "" : "s", r->failed);
}

static void run_free(struct run *r)
{
	if (r->work)
		apf_remove_tree(r->work);
	if (r->work_lock > 0)
		close(r->work_lock);
	free(r->work);
	for (size_t i = 0; r->unit_locks && r->plan && i < r->plan->n; i++)
		if (r->unit_locks[i] >= 0)
			close(r->unit_locks[i]);
	free(r->unit_locks);
	free(r->unit_dir);
	free(r->src);
	free(r->run_dir);
	free(r->heldout);
	for (size_t i = 0; i < r->nvariants; i++)
		free(r->variants[i]);
	free(r->variants);
	free(r->workloads_dir);
	free(r->include_dir);
	free(r->exe);
	apf_runlog_close(r->log);
	apf_key_free(r->key);
	json_decref(r->env);
	for (size_t i = 0; r->states && r->plan && i < r->plan->n; i++)
		apf_rundir_unit_free(&r->states[i]);
	free(r->states);
	apf_plan_free(r->plan);
	apf_entry_free(r->entry);
}

/* A work directory with no .lock is one still being created (between
 * mkdtemp and lock_work_dir's rename, microseconds) or one whose runner was
 * killed in that window. Only lock_work_dir writes there before the lock
 * (.lock.new, nothing else), so a directory holding nothing else, untouched
 * for an hour, has no runner; one holding anything more (an older apf's,
 * which did not lock) is not ours to judge. */
enum { WORK_DIR_GRACE_S = 3600 };

static int died_before_its_lock(const char *dir, const struct stat *st)
{
	if (time(NULL) - st->st_mtime < WORK_DIR_GRACE_S)
		return 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int only_ours = 1;
	struct dirent *de;
	while (only_ours && (de = readdir(d)))
		only_ours = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
			    !strcmp(de->d_name, ".lock.new");
	closedir(d);
	return only_ours;
}

/* Work directories are $TMPDIR/apf-run-XXXXXX, each holding .lock, which
 * its runner keeps flock'd while it lives. A runner that was killed (kill
 * -9, power loss) cannot remove its own, so every runner removes those of
 * its user whose lock it can take: their owner is gone; and those that
 * died before their lock (above). */
static void sweep_dead_work_dirs(const char *tmpdir)
{
	DIR *d = opendir(tmpdir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "apf-run-", 8) || strlen(de->d_name) != 14)
			continue;
		char *dir = apf_path_join(tmpdir, de->d_name);
		char *lock = dir ? apf_path_join(dir, ".lock") : NULL;
		struct stat st;
		if (lock && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
		    st.st_uid == geteuid()) {
			int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			if ((fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) ||
			    (fd < 0 && errno == ENOENT && died_before_its_lock(dir, &st)))
				apf_remove_tree(dir); /* best effort */
			if (fd >= 0)
				close(fd);
		}
		free(lock);
		free(dir);
	}
	closedir(d);
	apf_error_clear();
}

/* The lock is taken on a file under another name and renamed into place,
 * so a sweeping runner never sees .lock unlocked while we live. */
static int lock_work_dir(struct run *r)
{
	char *tmp = apf_path_join(r->work, ".lock.new");
	char *lock = apf_path_join(r->work, ".lock");
	int rc = tmp && lock ? 0 : apf_error(APF_ENOMEM, "run", "out of memory");
	int fd = rc ? -1
		    : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (!rc && (fd < 0 || flock(fd, LOCK_EX) != 0 || rename(tmp, lock) != 0))
		rc = apf_error_errno(APF_EIO, errno, r->work, "lock the work directory");
	if (rc && fd >= 0)
		close(fd);
	else if (!rc)
		r->work_lock = fd;
	free(tmp);
	free(lock);
	return rc;
}

/* A private work directory (locked while we live; dead runners' swept)
 * and the entry extracted into it, its signer trusted. */
static int extract_entry(struct run *r)
{
	const struct apf_run_opts *o = r->o;
	apf_keyring *kr = NULL;
	int rc = apf_keyring_default(&kr, o->trust_key, "--entry-key");
	if (!rc) {
		const char *t = getenv("TMPDIR");
		t = t && *t ? t : "/tmp";
		sweep_dead_work_dirs(t);
		apf_buf b = {0};
		apf_buf_printf(&b, "%s/apf-run-XXXXXX", t);
		r->work = b.data;
		if (!r->work || !mkdtemp(r->work))
			rc = apf_error_errno(APF_EIO, errno, "run",
					     "create a work directory");
		if (!rc)
			rc = lock_work_dir(r);
	}
	if (!rc) {
		char *real = realpath(r->work, NULL);
		if (real) {
			free(r->work);
			r->work = real;
		}
		char *dest = apf_path_join(r->work, "entry");
		rc = dest ? apf_entry_extract(&r->entry, o->entry, dest, kr)
			  : apf_error(APF_ENOMEM, "run", "out of memory");
		r->src = dest ? apf_path_join(dest, "submission") : NULL;
		free(dest);
	}
	apf_keyring_free(kr);
	return rc;
}

static int prepare(struct run *r)
{
	const struct apf_run_opts *o = r->o;
	r->device = o->device ? o->device : "cpu";
	if (strcmp(r->device, "cpu") && strcmp(r->device, "cuda"))
		return apf_error(APF_EUSAGE, "run",
				 "--device %s: unknown device (cpu or cuda)",
				 r->device);
	r->clock = o->clock < 0 ? APF_CLOCK_WALL : o->clock;
	if (r->clock != APF_CLOCK_WALL && r->clock != APF_CLOCK_CPU)
		return apf_error(APF_EUSAGE, "run", "--clock: wall or cpu");
	r->numerics = o->numerics ? o->numerics : APF_NUMERICS_LATEST;
	if (r->numerics < APF_NUMERICS_OLDEST ||
	    r->numerics > APF_NUMERICS_LATEST)
		return apf_error(APF_EUSAGE, "run",
				 "--numerics %d: this apf computes numerics "
				 "%d to %d",
				 r->numerics, APF_NUMERICS_OLDEST,
				 APF_NUMERICS_LATEST);
	/* A GPU's work is no CPU time of the trial's: the cpu clock would
	 * count its waits, not its work. */
	if (r->clock == APF_CLOCK_CPU && !strcmp(r->device, "cuda"))
		return apf_error(APF_EUSAGE, "run",
				 "--clock cpu: measures CPU work, and a cuda "
				 "trial's work is on the GPU; use --clock "
				 "wall");
	r->budget_scale = o->budget_scale > 0 ? o->budget_scale : 1.0;
	if (!(r->budget_scale > 0 && r->budget_scale <= 1))
		return apf_error(APF_EUSAGE, "run",
				 "--budget-scale %g: expected a number in (0, "
				 "1]",
				 r->budget_scale);
	if (!strcmp(r->device, "cuda")) {
		char why[512];
		if (apf_cuda_probe(why, sizeof why))
			return apf_error(APF_EINPUT, "run", "--device cuda: %s",
					 why);
	}
	r->sealed = !o->unsealed;
	/* A forced instruction-set path this CPU lacks (or a misspelt one)
	 * is refused before anything is made. */
	int isa;
	int rc = apf_cpu_isa(&isa);
	if (rc)
		return rc;
	/* 1. the entry */
	rc = extract_entry(r);
	if (!rc)
		rc = apf_entry_plan(&r->plan, r->entry);
	if (!rc) {
		/* Threads: as recorded in the entry, so a CPU trial computes
		 * bit for bit what the submitter's machine did. */
		json_int_t rec = json_integer_value(json_object_get(
			json_object_get(r->entry->manifest->environment, "blas"),
			"threads"));
		r->threads = o->threads > 0 ? o->threads
			     : rec > 0	    ? (int)rec
					    : apf_cpu_count();
	}
	if (!rc && r->heldout)
		rc = apf_rundir_plan_heldout(r->plan, r->entry->manifest,
					     r->heldout, &r->variants,
					     &r->nvariants);
	if (!rc) {
		r->states = apf_calloc(r->plan->n, sizeof *r->states);
		r->unit_locks = apf_calloc(r->plan->n, sizeof *r->unit_locks);
		for (size_t i = 0; r->unit_locks && i < r->plan->n; i++)
			r->unit_locks[i] = -1;
		if (!r->states || !r->unit_locks)
			rc = apf_error(APF_ENOMEM, "run", "out of memory");
	}
	/* 2. inputs on this machine */
	if (!rc)
		rc = apf_workloads_dir(&r->workloads_dir);
	if (!rc) {
		/* Sandbox mounts want canonical paths. */
		char *real = realpath(r->workloads_dir, NULL);
		if (real) {
			free(r->workloads_dir);
			r->workloads_dir = real;
		}
	}
	if (!rc)
		rc = check_inputs(r);
	/* 3. the environment */
	if (!rc)
		rc = apf_env_capture(&r->env);
	if (!rc && r->threads > 0) {
		/* The run's BLAS threads are part of the record. */
		json_object_set_new(json_object_get(r->env, "blas"), "threads",
				    json_integer(r->threads));
	}
	/* 4. the sandbox */
	if (!rc && r->sealed) {
		rc = apf_sandbox_probe(APF_SANDBOX_SEALED);
		if (rc)
			apf_error_prefix(rc, "run: cannot seal the trial (use "
					     "--unsealed to run anyway, "
					     "recorded in the log)");
	}
	if (!rc)
		rc = apf_host_find_self(&r->exe, &r->include_dir);
	return rc;
}

/* The held-out draw in force: the one given, else the run directory's
 * own; a given one must be the run's own when it has one. */
static int heldout_in_force(struct run *r)
{
	const struct apf_run_opts *o = r->o;
	char *own = r->run_dir ? apf_path_join(r->run_dir, "heldout.json") : NULL;
	struct stat hst;
	int has_own = own && stat(own, &hst) == 0;
	int rc = 0;
	if (o->heldout && has_own) {
		char *a = NULL, *b = NULL;
		size_t al = 0, bl = 0;
		rc = apf_file_read(&a, &al, o->heldout, 1 << 24);
		if (!rc)
			rc = apf_file_read(&b, &bl, own, 1 << 24);
		if (!rc && (al != bl || memcmp(a, b, al)))
			rc = apf_error(APF_EINPUT, o->heldout,
				       "differs from the draw the run directory "
				       "was started with");
		free(a);
		free(b);
	}
	const char *h = o->heldout ? o->heldout : has_own ? own : NULL;
	r->heldout = h ? apf_strdup(h) : NULL;
	if (!rc && h && !r->heldout)
		rc = apf_error(APF_ENOMEM, "run", "out of memory");
	free(own);
	return rc;
}

/* This machine's environment against the entry's record. */
static int check_environment(struct run *r, struct drift *d)
{
	apf_env_compare(r->entry->manifest->environment, r->env, on_drift, d);
	int n = d->hard;
	if (n && !r->o->allow_env_drift)
		return apf_error(APF_EVERIFY, "environment",
				 "%d field%s differ%s from the entry's record: "
				 "%s (--allow-env-drift runs anyway and logs it)",
				 n, n == 1 ? "" : "s", n == 1 ? "s" : "",
				 d->text.data);
	if (d->benign.len)
		apf_runner_notice(r,
				  "environment: %s: differ%s from the entry's "
				  "record without changing a result (logged; "
				  "times are this machine's)",
				  d->benign.data,
				  strchr(d->benign.data, ';') ? "" : "s");
	return 0;
}

/* The run directory: opened (resumed, or one more unit of the same
 * entry) or created; *fresh when created (run_start is then logged). */
static int open_or_create(struct run *r, int *fresh)
{
	*fresh = 0;
	int created = 0;
	int rc = apf_key_open_signing(&r->key, r->o->key_path, &created);
	if (!rc && created)
		apf_runner_notice(r, "created runner key in $APF_HOME/keys (trusted on "
			  "this machine)");
	struct stat st;
	if (rc)
		return rc;
	int empty = stat(r->run_dir, &st) == 0 && apf_dir_is_empty(r->run_dir);
	if (empty && !r->o->resume) {
		/* An empty directory is a new run directory (made for it, or
		 * by a job script): the new one is renamed over it. */
		rc = create_run_dir(r);
		*fresh = 1;
	} else if (empty || (stat(r->run_dir, &st) == 0 &&
			     apf_rundir_check(r->run_dir))) {
		rc = apf_error(APF_EINPUT, r->run_dir,
			       empty ? "not a run directory (no run.json): "
				       "nothing to resume"
				     : "not a run directory (no run.json), and "
				       "not empty: -o takes a new or empty "
				       "directory, or a run's");
	} else if (stat(r->run_dir, &st) == 0)
		rc = open_run_dir(r);
	else if (r->o->resume)
		rc = apf_error(APF_EINPUT, r->run_dir,
			       "no such run directory to resume");
	else {
		rc = create_run_dir(r);
		*fresh = 1;
	}
	if (!rc)
		rc = lock_units(r);
	if (!rc)
		rc = scan_logs(r);
	/* A unit that started and did not end was interrupted: only
	 * --resume continues it. */
	for (size_t i = 0; !rc && i < r->plan->n; i++)
		if (r->states[i].started && !r->states[i].ended &&
		    !r->o->resume && selected(r, &r->plan->units[i])) {
			char name[512];
			unit_name(&r->plan->units[i], name, sizeof name);
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "%s was interrupted: continue it with "
				       "--resume",
				       name);
		}
	return rc;
}

/* One session of one unit in its own log (created, or continued: a torn
 * last line cut on --resume): run_start and what it says of this machine,
 * the unit's records, and, unless a signal stopped it, run_end, the signed
 * head and the unit's entry in the run's index. */
static int run_one(struct run *r, size_t i)
{
	char name[512];
	unit_name(&r->plan->units[i], name, sizeof name);
	free(r->unit_dir);
	r->unit_dir = apf_path_join(r->run_dir, name);
	char *logp = r->unit_dir ? apf_path_join(r->unit_dir, "log.jsonl") : NULL;
	if (!logp)
		return apf_error(APF_ENOMEM, "run", "out of memory");
	/* .running is held only while the unit runs (its .lock is held by
	 * whoever has it selected, running or queued): apf status reads it. */
	char *running = apf_path_join(r->unit_dir, ".running");
	int run_fd = running ? open(running, O_RDWR | O_CREAT | O_CLOEXEC |
						  O_NOFOLLOW, 0644)
			     : -1;
	if (run_fd >= 0)
		flock(run_fd, LOCK_EX | LOCK_NB);
	free(running);
	struct stat st;
	int rc;
	if (lstat(logp, &st) != 0) {
		rc = apf_runlog_create(&r->log, logp);
	} else {
		uint64_t cut = 0;
		rc = apf_runlog_open_append(&r->log, logp, r->o->resume, &cut);
		if (rc == APF_EVERIFY && !r->o->resume)
			rc = apf_error(APF_EINPUT, r->run_dir,
				       "%s: its log ends in a torn record (a "
				       "crash?): continue it with --resume",
				       name);
		else if (rc == APF_EVERIFY)
			rc = APF_EINPUT;
		if (!rc && cut)
			apf_runner_notice(r,
					  "%s: cut %llu bytes of a torn record "
					  "from its log's end",
					  name, (unsigned long long)cut);
	}
	free(logp);
	if (!rc)
		rc = apf_runner_slurm_note(r->unit_dir);
	if (!rc)
		rc = log_run_start(r, r->drift);
	size_t completed = r->completed, failed = r->failed;
	if (!rc)
		rc = apf_runner_unit(r, i);
	/* A unit whose trial ended in this session is closed even when ^C came
	 * after its trial_end: its result is logged, and a log left open
	 * would send the user to a --resume that has nothing to run. */
	int ended = r->completed + r->failed > completed + failed;
	if (r->log && (!stop_signal || ended) && (!rc || rc == APF_EABORT)) {
		json_t *f = json_pack("{s:I, s:I, s:I}", "units", (json_int_t)1,
				      "completed",
				      (json_int_t)(r->completed - completed),
				      "failed", (json_int_t)(r->failed - failed));
		int lrc = f ? append(r->log, "run_end", f, 1)
			    : apf_error(APF_ENOMEM, "run", "out of memory");
		json_decref(f);
		if (!lrc)
			lrc = apf_rundir_sign_head(r->unit_dir, r->key,
						   r->run_json_sha256, r->log);
		if (!lrc)
			lrc = apf_rundir_index_update(
				r->run_dir, r->key, r->run_json_sha256, name,
				apf_runlog_count(r->log), apf_runlog_head(r->log));
		if (!rc)
			rc = lrc;
	}
	int crc = r->log ? apf_runlog_close(r->log) : 0;
	r->log = NULL;
	if (run_fd >= 0)
		close(run_fd);
	return rc ? rc : crc;
}

/* ---- apf run -j N: units at once ---------------------------------------------
 *
 * Each unit runs in a child process forked from this supervisor once the
 * checks are done: the child runs exactly what one-at-a-time runs
 * (run_one: its own log, its own trial, evaluator and work directory), so
 * a unit computes the same bits either way; processes rather than threads
 * because the supervisor's state (the run, the host, the signal flag) is
 * one unit's, and a crash of one unit's supervisor cannot take the others
 * with it. Each child is pinned (sched_setaffinity, inherited by its build,
 * trial and evaluator) to its slot's share of the usable cores - slot s of
 * N gets cores s*T .. s*T+T-1 of the usable list, T the run's threads -
 * and reports what it would have told the user through a pipe, one
 * fixed-size message per write (atomic: under PIPE_BUF). It exits 0 (the
 * unit completed), 1 (its trial failed: a result), 2 (an error of the run,
 * sent first) or 3 (interrupted). */

enum { MSG_NOTICE = 1, MSG_PROGRESS, MSG_UNIT_END, MSG_ERROR };

struct msg {
	int kind;
	int code;
	struct apf_run_progress p;
	struct apf_run_unit_end e;
	char unit[256], metric[32], reason[32];
	char text[3072];
};

_Static_assert(sizeof(struct msg) <= PIPE_BUF, "a message is one write");

struct child {
	pid_t pid;
	int fd;
	int slot;
};

static void send_msg(int fd, const struct msg *m)
{
	ssize_t n;
	do
		n = write(fd, m, sizeof *m);
	while (n < 0 && errno == EINTR);
}

static void child_notice(void *user, const char *line)
{
	struct msg m = {.kind = MSG_NOTICE};
	snprintf(m.text, sizeof m.text, "%s", line);
	send_msg(*(int *)user, &m);
}

static void child_progress(void *user, const struct apf_run_progress *p)
{
	struct msg m = {.kind = MSG_PROGRESS, .p = *p};
	snprintf(m.unit, sizeof m.unit, "%s", p->unit ? p->unit : "");
	snprintf(m.metric, sizeof m.metric, "%s", p->metric ? p->metric : "");
	send_msg(*(int *)user, &m);
}

static void child_unit_end(void *user, const struct apf_run_unit_end *e)
{
	struct msg m = {.kind = MSG_UNIT_END, .e = *e};
	snprintf(m.unit, sizeof m.unit, "%s", e->unit ? e->unit : "");
	snprintf(m.metric, sizeof m.metric, "%s", e->metric ? e->metric : "");
	snprintf(m.reason, sizeof m.reason, "%s", e->reason ? e->reason : "");
	snprintf(m.text, sizeof m.text, "%s", e->detail ? e->detail : "");
	send_msg(*(int *)user, &m);
}

/* The usable cores of slot (of the run's threads each), as a set. */
static void slot_cpus(const struct run *r, int slot, cpu_set_t *out)
{
	cpu_set_t all;
	CPU_ZERO(out);
	if (sched_getaffinity(0, sizeof all, &all) != 0)
		return;
	int cpus[CPU_SETSIZE], n = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all))
			cpus[n++] = c;
	for (int k = 0; n && k < r->threads; k++)
		CPU_SET(cpus[((size_t)slot * (size_t)r->threads + (size_t)k) %
			     (size_t)n],
			out);
}

/* The child: one unit, then _exit (never the parent's clean-up: its work
 * directory and locks are the parent's). */
static void child_main(struct run *r, size_t i, int slot, int fd)
{
	struct apf_run_opts co = *r->o;
	co.notice = r->o->notice ? child_notice : NULL;
	co.progress = r->o->progress ? child_progress : NULL;
	co.unit_end = r->o->unit_end ? child_unit_end : NULL;
	co.user = &fd;
	r->o = &co;
	r->slot = slot;
	cpu_set_t set;
	slot_cpus(r, slot, &set);
	if (CPU_COUNT(&set))
		sched_setaffinity(0, sizeof set, &set);
	size_t failed = r->failed;
	int rc = run_one(r, i);
	int code = stop_signal || preempt_signal ? 3
		   : rc				  ? 2
		   : r->failed > failed		  ? 1
						  : 0;
	if (rc && !stop_signal && !preempt_signal) {
		struct msg m = {.kind = MSG_ERROR, .code = rc};
		snprintf(m.text, sizeof m.text, "%s", apf_error_message());
		send_msg(fd, &m);
	}
	close(fd);
	_exit(code);
}

/* One message from a child, passed on to the user's callbacks. */
static void relay(struct run *r, struct msg *m, int *err, char *err_text,
		  size_t size)
{
	const struct apf_run_opts *o = r->o;
	if (m->kind == MSG_NOTICE && o->notice) {
		o->notice(o->user, m->text);
	} else if (m->kind == MSG_PROGRESS && o->progress) {
		m->p.unit = m->unit;
		m->p.metric = m->metric;
		o->progress(o->user, &m->p);
	} else if (m->kind == MSG_UNIT_END && o->unit_end) {
		m->e.unit = m->unit;
		m->e.metric = m->metric[0] ? m->metric : NULL;
		m->e.reason = m->reason[0] ? m->reason : NULL;
		m->e.detail = m->text[0] ? m->text : NULL;
		o->unit_end(o->user, &m->e);
	} else if (m->kind == MSG_ERROR && !*err) {
		*err = m->code ? m->code : APF_EINTERNAL;
		snprintf(err_text, size, "%s", m->text);
	}
}

static int run_parallel(struct run *r)
{
	int jobs = r->o->jobs;
	struct child *ch = apf_calloc((size_t)jobs, sizeof *ch);
	if (!ch)
		return apf_error(APF_ENOMEM, "run", "out of memory");
	for (int s = 0; s < jobs; s++)
		ch[s].pid = -1;
	r->slots = jobs;
	int err = 0, running = 0, forwarded = 0;
	char err_text[3072] = "";
	size_t next = 0;
	for (;;) {
		/* Start units while there are free slots. */
		for (int s = 0; s < jobs && !err && !stop_signal && !preempt_signal;
		     s++) {
			if (ch[s].pid >= 0)
				continue;
			while (next < r->plan->n &&
			       (!selected(r, &r->plan->units[next]) ||
				r->states[next].ended))
				next++;
			if (next >= r->plan->n)
				break;
			int p[2];
			if (pipe2(p, O_CLOEXEC) != 0) {
				err = apf_error_errno(APF_EIO, errno, "run", "pipe");
				snprintf(err_text, sizeof err_text, "%s",
					 apf_error_message());
				break;
			}
			r->ordinal++;
			fflush(NULL);
			pid_t pid = fork();
			if (pid == 0) {
				close(p[0]);
				for (int k = 0; k < jobs; k++)
					if (ch[k].pid >= 0)
						close(ch[k].fd);
				child_main(r, next, s, p[1]);
			}
			close(p[1]);
			if (pid < 0) {
				close(p[0]);
				err = apf_error_errno(APF_EIO, errno, "run", "fork");
				snprintf(err_text, sizeof err_text, "%s",
					 apf_error_message());
				break;
			}
			ch[s] = (struct child){pid, p[0], s};
			running++;
			next++;
		}
		if (!running)
			break;
		if ((stop_signal || preempt_signal) && !forwarded) {
			/* Ctrl-C reaches the children with us; a signal sent
			 * to this process alone is passed on. */
			for (int s = 0; s < jobs; s++)
				if (ch[s].pid > 0)
					kill(ch[s].pid, stop_signal ? stop_signal
								    : preempt_signal);
			forwarded = 1;
		}
		struct pollfd pf[jobs];
		int map[jobs], n = 0;
		for (int s = 0; s < jobs; s++)
			if (ch[s].pid >= 0) {
				pf[n] = (struct pollfd){ch[s].fd, POLLIN, 0};
				map[n++] = s;
			}
		if (poll(pf, (nfds_t)n, 500) < 0 && errno != EINTR)
			break;
		for (int k = 0; k < n; k++) {
			if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			struct child *c = &ch[map[k]];
			struct msg m;
			ssize_t got = read(c->fd, &m, sizeof m);
			if (got == (ssize_t)sizeof m) {
				relay(r, &m, &err, err_text, sizeof err_text);
				continue;
			}
			if (got < 0 && errno == EINTR)
				continue;
			/* End of the pipe: the child is done. */
			int status = 0;
			while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR)
				;
			close(c->fd);
			int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
			if (code == 0)
				r->completed++;
			else if (code == 1)
				r->failed++;
			else if (code != 3 && !err) {
				err = APF_EINTERNAL;
				snprintf(err_text, sizeof err_text,
					 "run: the supervisor of a unit ended "
					 "abnormally (status %d)",
					 status);
			}
			c->pid = -1;
			running--;
		}
	}
	free(ch);
	r->slots = 0;
	if (err)
		apf_error_restore(err, err_text);
	return err;
}

/* The selected units, one after another, until done or interrupted; then
 * run_end (unless a signal stopped the run: the log stays resumable). */
static int run_units(struct run *r, size_t nsel)
{
	int rc = 0;
	struct sigaction sa = {0}, old_int, old_term, old_usr1;
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGUSR1, &sa, &old_usr1);
	size_t before = 0;
	for (size_t i = 0; i < r->plan->n; i++) {
		if (!selected(r, &r->plan->units[i]))
			continue;
		if (!r->states[i].ended) {
			r->to_run++;
			continue;
		}
		/* Re-running a finished unit is not an error, but it is not
		 * run again either: say so, and how it ended. */
		char name[512];
		const struct apf_plan_unit *pu = &r->plan->units[i];
		apf_rundir_unit_name(name, sizeof name, pu->study, pu->workload,
				     pu->variant, pu->trial + 1);
		apf_runner_notice(r, "%s: already ended in this run directory "
				     "(%s); not run again",
				  name, r->states[i].failed ? "failed"
							    : "completed");
		if (r->o->unit_end) {
			const struct apf_rundir_unit *st = &r->states[i];
			struct apf_run_unit_end e = {
				.unit = name,
				.already = 1,
				.failed = st->failed,
				.time_to_target_s =
					apf_rundir_ttt_counts(st->time_to_target_ns,
							      st->budget_ns)
						? (double)st->time_to_target_ns / 1e9
						: -1,
				.submission_s = (double)st->sub_ns / 1e9,
				.evals = st->last_eval,
				.global_step = st->global_step,
				.best_validation = NAN,
				.target = NAN};
			r->o->unit_end(r->o->user, &e);
		}
		before++;
	}
	r->already = before;
	(void)nsel;
	int parallel = r->o->jobs > 1 && r->to_run > 1;
	if (parallel)
		rc = run_parallel(r);
	for (size_t i = 0; !parallel && !rc && i < r->plan->n && !stop_signal &&
			   !preempt_signal;
	     i++) {
		if (!selected(r, &r->plan->units[i]) || r->states[i].ended)
			continue;
		r->ordinal++;
		rc = run_one(r, i);
	}
	if (!rc && stop_signal)
		rc = apf_error(APF_EABORT, "run",
			       "interrupted; continue with apf run %s -o %s "
			       "--resume",
			       r->o->entry, r->run_dir);
	else if (!rc && preempt_signal)
		rc = apf_error(APF_EABORT, "run",
			       "preempted by %s: the units under way stopped "
			       "at their last eval; continue with apf run "
			       "%s -o %s --resume",
			       apf_run_preempt_signal(), r->o->entry, r->run_dir);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGUSR1, &old_usr1, NULL);
	return rc;
}

int apf_run(const struct apf_run_opts *o)
{
	struct run r = {0};
	r.o = o;
	r.run_dir = o->run_dir ? apf_strdup(o->run_dir) : apf_run_default_dir(o->entry);
	/* "-o out/" is out: the new directory is made beside it, as
	 * out.tmp.XXXXXX, and renamed onto it. */
	for (size_t n = r.run_dir ? strlen(r.run_dir) : 0;
	     n > 1 && r.run_dir[n - 1] == '/'; n--)
		r.run_dir[n - 1] = 0;
	int rc = r.run_dir ? heldout_in_force(&r)
			   : apf_error(APF_ENOMEM, "run", "out of memory");
	if (!rc)
		rc = prepare(&r);
	struct drift d = {json_array(), {0}, {0}, 0, 0};
	if (!rc) {
		d.cpu_run = !strcmp(r.device, "cpu");
		rc = check_environment(&r, &d);
	}
	size_t nsel = 0;
	for (size_t i = 0; !rc && i < r.plan->n; i++)
		nsel += selected(&r, &r.plan->units[i]);
	if (!rc && nsel == 0)
		rc = no_unit_matches(&r);
	int fresh = 0;
	r.drift = d.fields;
	if (!rc)
		rc = open_or_create(&r, &fresh);
	if (!rc && o->slurm) {
		/* Submit the selected units that have not ended; run none. */
		size_t *todo = apf_calloc(r.plan->n + 1, sizeof *todo), n = 0;
		for (size_t i = 0; todo && i < r.plan->n; i++)
			if (selected(&r, &r.plan->units[i]) && !r.states[i].ended)
				todo[n++] = i;
		rc = todo ? apf_runner_slurm_submit(&r, todo, n)
			  : apf_error(APF_ENOMEM, "run", "out of memory");
		free(todo);
		json_decref(d.fields);
		apf_buf_free(&d.text);
		apf_buf_free(&d.benign);
		run_free(&r);
		return rc;
	}
	if (!rc)
		rc = run_units(&r, nsel);
	if (!rc)
		summary(&r);
	/* A failed trial is a result, logged and verifiable, but not a
	 * success: a script must be able to tell (exit 3, docs/design.md 4.2). */
	if (!rc && r.failed)
		rc = apf_error(APF_EABORT, "run",
			       "%s: %zu of %zu unit%s failed (the log and each "
			       "unit's trial.log say why)",
			       r.run_dir, r.failed, r.completed + r.failed,
			       r.completed + r.failed == 1 ? "" : "s");
	json_decref(d.fields);
	apf_buf_free(&d.text);
	apf_buf_free(&d.benign);
	run_free(&r);
	return rc;
}
