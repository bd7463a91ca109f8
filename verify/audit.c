/*
 * audit.c: checks 4 and 5 beyond the digests (verify.h, apf_verify_audit):
 * re-evaluating kept checkpoints and replaying eval intervals, on the
 * checkpoints the verified walk of the log keeps (the report's `kept`).
 *
 * Nothing here reaches the runner (pkg/runner): re-evaluation runs the
 * evaluator process (pkg/eval), replay hosts the submission's trial in the
 * sandbox (pkg/host), both started with the arguments and environment the
 * runner gives them (apf_host_args), so that an audit runs what the run
 * ran. Everything an audit writes - the extracted entry, each unit's work
 * directory, the build's, trial's and evaluator's logs - lies under one
 * private temporary directory, removed at the end; the run directory and
 * other runs' work directories are only read (or not touched at all).
 *
 * Which intervals: every (unit, k -> k+1) of the kept checkpoints, k = 0
 * the state init_optimizer_state left. --replay N takes the first N in
 * the order of SHA-256("apf-replay-v1 <seed> <unit> <k>") with a printed
 * seed, so an operator cannot know which will be checked; --replay-top Q
 * first takes the Q whose parameters changed most between the two
 * checkpoints (large updates are where a forged trajectory is cheapest to
 * hide); all replays every interval.
 */
#include "verify/verifier.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eval/eval.h"
#include "hash/hash.h"
#include "host/host.h"
#include "rundir/rundir.h"
#include "sandbox/sandbox.h"
#include "sysinfo/sysinfo.h"

/* Replayed intervals shorter than this are timed and reported, but not held
 * against the timing tolerance: a few steps are dominated by the replay's
 * first touches of its memory. */
#define MIN_TIMED_S 0.1
/* What --replay-top reads of a checkpoint at most (no model at hand). */
#define APF_MAX_REPLAY_CKPT ((size_t)1 << 31)
#define REPLAY_TIMEOUT_NS (30ull * 60 * 1000000000)

struct audit {
	apf_verify_report *r;
	const struct apf_audit_opts *o;
	char *tmp;          /* the private temporary directory */
	apf_entry *entry;
	apf_plan *plan;
	char **variants;
	size_t nvariants;
	char *workloads_dir, *exe, *include_dir, *src;
	int sealed, extracted;
	size_t nwork;       /* work directories made so far */
	/* --replay-top's ranking: change[u][c], the L2 norm of the parameters'
	 * change from kept unit u's checkpoint c-1 to c, found where c is
	 * read for another reason (check 4) or by one pass over the unit's
	 * checkpoints; change[u] is NULL until then. */
	double **change;
};

static void say(const struct audit *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void say(const struct audit *a, const char *fmt, ...)
{
	if (!a->o->progress)
		return;
	char line[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	a->o->progress(a->o->user, line);
}

/* ---- the audit's context ------------------------------------------------------ */

/* The entry (verified again: check 1 passed, but the file is read anew),
 * its plan with the run's held-out variants, this apf and the workloads. */
static int audit_open(struct audit *a, int extract)
{
	const char *t = getenv("TMPDIR");
	apf_buf b = {0};
	apf_buf_printf(&b, "%s/apf-verify-XXXXXX", t && *t ? t : "/tmp");
	a->tmp = b.data;
	if (!a->tmp)
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	if (!mkdtemp(a->tmp)) {
		int rc = apf_error_errno(APF_EIO, errno, "verify",
					 "create a temporary directory");
		free(a->tmp);
		a->tmp = NULL;
		return rc;
	}
	char *entry = apf_path_join(a->r->run_dir, "entry.apf");
	char *dest = apf_path_join(a->tmp, "entry");
	int rc = entry && dest ? 0 : apf_error(APF_ENOMEM, "verify", "out of memory");
	if (!rc && extract) {
		rc = apf_entry_extract(&a->entry, entry, dest, a->o->entry_keys);
		a->src = apf_path_join(dest, "submission");
		a->extracted = 1;
	} else if (!rc) {
		rc = apf_entry_verify(&a->entry, entry, a->o->entry_keys);
	}
	free(entry);
	free(dest);
	if (!rc)
		rc = apf_entry_plan(&a->plan, a->entry);
	char *h = rc ? NULL : apf_path_join(a->r->run_dir, "heldout.json");
	struct stat st;
	if (h && stat(h, &st) == 0)
		rc = apf_rundir_plan_heldout(a->plan, a->entry->manifest, h,
					     &a->variants, &a->nvariants);
	free(h);
	if (!rc)
		rc = apf_workloads_dir(&a->workloads_dir);
	if (!rc) {
		/* Sandbox mounts want canonical paths. */
		char *real = realpath(a->workloads_dir, NULL);
		if (real) {
			free(a->workloads_dir);
			a->workloads_dir = real;
		}
		rc = apf_host_find_self(&a->exe, &a->include_dir);
	}
	/* Replay sealed where the kernel allows it; an auditor's machine that
	 * refuses namespaces still replays, with the filter. */
	a->sealed = extract && apf_sandbox_probe(APF_SANDBOX_SEALED) == 0;
	if (!rc)
		apf_error_clear();
	return rc;
}

static void audit_close(struct audit *a)
{
	if (a->tmp)
		apf_remove_tree(a->tmp);
	free(a->tmp);
	for (size_t i = 0; i < a->nvariants; i++)
		free(a->variants[i]);
	free(a->variants);
	apf_plan_free(a->plan);
	apf_entry_free(a->entry);
	free(a->workloads_dir);
	free(a->exe);
	free(a->include_dir);
	free(a->src);
	for (size_t u = 0; a->change && u < a->r->nkept; u++)
		free(a->change[u]);
	free(a->change);
}

/* The plan's unit a kept unit is, or NULL. */
static const struct apf_plan_unit *plan_unit(const struct audit *a,
					     const struct apf_verify_kept *k)
{
	for (size_t i = 0; i < a->plan->n; i++) {
		const struct apf_plan_unit *u = &a->plan->units[i];
		if (u->study == k->study && u->trial + 1 == k->trial &&
		    !strcmp(u->workload, k->workload) &&
		    !strcmp(u->variant, k->variant))
			return u;
	}
	return NULL;
}

/* A host for one kept unit, its work and log directories under tmp. */
static int host_open(struct audit *a, const struct apf_verify_kept *k,
		     const char *device, apf_host **out, char **dir)
{
	*out = NULL;
	const struct apf_plan_unit *u = plan_unit(a, k);
	if (!u)
		return apf_error(APF_EVERIFY, k->unit, "not a unit of the entry's plan");
	char name[32];
	snprintf(name, sizeof name, "unit_%zu", a->nwork++);
	*dir = apf_path_join(a->tmp, name);
	char *work = *dir ? apf_path_join(*dir, "work") : NULL;
	int rc = work ? apf_mkdirs(*dir, 0700)
		      : apf_error(APF_ENOMEM, "verify", "out of memory");
	const apf_manifest *m = a->entry->manifest;
	struct apf_host_opts ho = {.exe = a->exe,
				   .workloads_dir = a->workloads_dir,
				   .include_dir = a->include_dir,
				   .src = a->src,
				   .work = work,
				   .log_dir = *dir,
				   .sealed = a->sealed,
				   .workload = k->workload,
				   .variant = k->variant,
				   .device = device,
				   .seed = m->tuning.seed,
				   .study = (uint32_t)k->study,
				   .trial = (uint32_t)k->trial,
				   .threads = (int)a->r->threads,
				   /* Computed as the run was (nn.h). */
				   .numerics = a->r->numerics,
				   .budget_multiplier = m->tuning.budget_multiplier,
				   .budget_scale = a->r->budget_scale,
				   /* Timed as the run was: a replay's time is
				    * held against the claimed one. */
				   .clock = a->r->clock,
				   .hp = &u->hp};
	if (!rc)
		rc = apf_host_open(out, &ho);
	free(work);
	return rc;
}

/* A kept checkpoint's bytes, read whole and checked against the digest the
 * log names: an audit reads no other. */
static int read_ckpt(const struct audit *a, const struct apf_verify_kept *k,
		     size_t c, size_t max, char **data, size_t *len)
{
	*data = NULL;
	char rel[600];
	apf_rundir_ckpt_name(rel, sizeof rel, k->unit, k->ckpt[c].index);
	int fd = -1;
	int rc = apf_file_open_beneath(&fd, NULL, a->r->run_dir, rel, 0);
	if (!rc)
		rc = apf_file_read_fd(data, len, fd, rel, max);
	if (fd >= 0)
		close(fd);
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_buf(d, *data, *len);
	if (!rc && memcmp(d, k->ckpt[c].sha256, 32))
		rc = apf_error(APF_EVERIFY, rel,
			       "differs from the checkpoint the log names");
	if (rc) {
		free(*data);
		*data = NULL;
	}
	return rc;
}

/* L2 distances between the parameters of arenas x and y (and |y|). */
static void param_distance(const struct apf_arena_header *x,
			   const struct apf_arena_header *y, double *dist,
			   double *ynorm)
{
	const float *px = (const float *)((const char *)x + x->params_offset);
	const float *py = (const float *)((const char *)y + y->params_offset);
	double d = 0, n = 0;
	for (uint64_t i = 0; i < x->params_floats; i++) {
		double e = (double)px[i] - (double)py[i];
		d += e * e;
		n += (double)py[i] * (double)py[i];
	}
	*dist = sqrt(d);
	*ynorm = sqrt(n);
}

/* The change of the parameters from checkpoint bytes f to t of unit k. */
static int interval_change(const struct apf_verify_kept *k, const char *f,
			   size_t flen, const char *t, size_t tlen, double *out)
{
	*out = 0;
	int rc = apf_arena_check(f, flen);
	if (!rc)
		rc = apf_arena_check(t, tlen);
	const struct apf_arena_header *hf = (const void *)f, *ht = (const void *)t;
	if (!rc && (hf->params_offset != ht->params_offset ||
		    hf->params_floats != ht->params_floats))
		rc = apf_error(APF_EVERIFY, k->unit,
			       "two checkpoints of one unit with different "
			       "layouts");
	double unused;
	if (!rc)
		param_distance(ht, hf, out, &unused);
	return rc;
}

/* ---- check 4: re-evaluation ------------------------------------------------------ */

static int metrics_differ(const json_t *logged, const json_t *m, char *why,
			  size_t size)
{
	const char *key;
	json_t *v;
	why[0] = 0;
	json_object_foreach((json_t *)logged, key, v)
	{
		json_t *w = json_object_get(m, key);
		/* Bit-exact on the CPU: the logged numbers were printed with
		 * 17 significant digits and parse back to the same double. */
		if (!w || !json_is_number(w) ||
		    json_number_value(v) != json_number_value(w)) {
			snprintf(why, size, "%s: re-evaluated %.17g, logged %.17g",
				 key, w ? json_number_value(w) : NAN,
				 json_number_value(v));
			return 1;
		}
	}
	if (json_object_size(m) != json_object_size(logged)) {
		snprintf(why, size, "the logged metrics are not the evaluator's "
				    "set");
		return 1;
	}
	return 0;
}

/* Every kept checkpoint of one unit: the initial state against the
 * workload's initialisation, the others re-evaluated in one clean
 * evaluator process, one after another in the same arena. */
static int reeval_unit(struct audit *a, const struct apf_verify_kept *k,
		       size_t *done, size_t *initial, char *why, size_t size)
{
	apf_host *h = NULL;
	apf_evaluator *ev = NULL;
	char *dir = NULL;
	/* The evaluator computes on the CPU for every device (pkg/eval), so
	 * a re-evaluation is bit for bit on any machine. */
	int rc = host_open(a, k, "cpu", &h, &dir);
	const struct apf_host_unit *hu = rc ? NULL : apf_host_unit(h);
	if (!rc)
		rc = apf_host_arena(h, NULL, 0);
	why[0] = 0;
	/* --replay-top ranks the intervals by the checkpoints read here, so
	 * none is read a second time for it. */
	double *change = NULL;
	if (!rc && a->o->top > 0 && !(change = apf_calloc(k->n, sizeof *change)))
		rc = apf_error(APF_ENOMEM, "verify", "out of memory");
	char *prev = NULL;
	size_t prev_len = 0;
	for (size_t c = 0; !rc && !why[0] && c < k->n; c++) {
		const struct apf_verify_ckpt *ck = &k->ckpt[c];
		say(a, "%s %s checkpoint %llu",
		    ck->index ? "re-evaluating" : "checking", k->unit,
		    (unsigned long long)ck->index);
		char *data = NULL;
		size_t len = 0;
		rc = read_ckpt(a, k, c, hu->capacity, &data, &len);
		if (!rc && change && c > 0)
			rc = interval_change(k, prev, prev_len, data, len,
					     &change[c]);
		if (!rc && ck->index == 0) {
			apf_arena_initial_differs(data, len, hu->init_state,
						  hu->param_floats,
						  hu->state_floats, why, size);
			apf_error_clear();
			*initial += !why[0];
		} else if (!rc) {
			/* Each checkpoint into a fresh evaluator's view: the
			 * arena is rewritten whole, zeros past its bytes. */
			rc = apf_host_arena_load(h, data, len);
			if (!rc && !ev)
				rc = apf_host_evaluator(&ev, h);
			json_t *m = NULL;
			char err[600];
			if (!rc)
				rc = apf_evaluator_eval(ev, &m, err, sizeof err);
			if (!rc && !m)
				rc = apf_error(APF_EVERIFY, "reeval", "%s", err);
			if (!rc)
				metrics_differ(ck->metrics, m, why, size);
			json_decref(m);
		}
		free(prev);
		prev = data;
		prev_len = len;
		if (!rc && !why[0])
			(*done)++;
		if (!rc && why[0]) {
			char msg[900], rel[600];
			apf_rundir_ckpt_name(rel, sizeof rel, k->unit,
					     ck->index);
			snprintf(msg, sizeof msg, "%s/%s: %s", a->r->run_dir,
				 rel, why);
			snprintf(why, size, "%s", msg);
		}
	}
	free(prev);
	/* Kept only when every interval of the unit was measured. */
	if (!rc && !why[0] && change)
		a->change[k - a->r->kept] = change;
	else
		free(change);
	apf_evaluator_stop(ev);
	apf_host_close(h);
	if (dir)
		apf_remove_tree(dir);
	free(dir);
	return rc;
}

/* ---- check 5: replay ------------------------------------------------------------- */

/* a->change[u], where check 4 has not measured it: one pass over kept unit
 * u's checkpoints, each read once. */
static int unit_changes(struct audit *a, size_t u)
{
	const struct apf_verify_kept *k = &a->r->kept[u];
	if (a->change[u] || k->n < 2)
		return 0;
	double *change = apf_calloc(k->n, sizeof *change);
	if (!change)
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	char *prev = NULL;
	size_t prev_len = 0;
	int rc = 0;
	for (size_t c = 0; !rc && c < k->n; c++) {
		char *data = NULL;
		size_t len = 0;
		if (c > 0)
			say(a, "ranking %s interval %zu", k->unit, c);
		rc = read_ckpt(a, k, c, APF_MAX_REPLAY_CKPT, &data, &len);
		if (!rc && c > 0)
			rc = interval_change(k, prev, prev_len, data, len,
					     &change[c]);
		free(prev);
		prev = data;
		prev_len = len;
	}
	free(prev);
	if (rc)
		free(change);
	else
		a->change[u] = change;
	return rc;
}

/* An interval's two checkpoints, read once for all the tries at it. */
struct interval_bytes {
	char *f, *t;
	size_t flen, tlen;
};

/* Replays interval c -> c+1 of a unit: the submission, built from the
 * run's entry in the sandbox, restarted from checkpoint c (its step, its
 * submission time and the metrics of its eval handed to the trial as the
 * run handed them) up to checkpoint c+1's step, its arena then compared
 * with checkpoint c+1 byte for byte. Timed as the runner times a trial:
 * from its go to its eval report. why names the first difference. */
/* How far a tolerant replay landed from its checkpoint. */
struct landing {
	double off_step;   /* |replayed - checkpoint| / |checkpoint - start| */
	double off_norm;   /* |replayed - checkpoint| / |checkpoint| */
	double metric;     /* largest relative metric difference */
};

/* Tolerant comparison of a replay's end (live, the frozen trial's arena)
 * with checkpoint `to`, the interval having started at `from`: the
 * parameters within rtol of the interval's own change, the replayed
 * state's metrics (evaluated here, on the CPU) within rtol relative
 * of the logged ones. why names the first miss. */
static int land(apf_host *h, const struct apf_arena_header *live,
		const char *f, size_t flen, const char *t, size_t tlen,
		const json_t *logged, double rtol, struct landing *out,
		char *why, size_t size)
{
	const struct apf_arena_header *hf = (const void *)f, *ht = (const void *)t;
	int rc = apf_arena_check(f, flen);
	if (!rc)
		rc = apf_arena_check(t, tlen);
	if (rc)
		return rc;
	if (hf->params_floats != ht->params_floats ||
	    live->params_floats != ht->params_floats) {
		snprintf(why, size, "the replay holds %llu parameters, the "
				    "checkpoint %llu",
			 (unsigned long long)live->params_floats,
			 (unsigned long long)ht->params_floats);
		return 0;
	}
	double off, norm, step, unused;
	param_distance(live, ht, &off, &norm);
	param_distance(hf, ht, &step, &unused);
	out->off_step = step > 0 ? off / step : off > 0 ? INFINITY : 0;
	out->off_norm = norm > 0 ? off / norm : off;
	if (!(out->off_step <= rtol)) {
		snprintf(why, size,
			 "the replayed parameters lie %.3g of the interval's "
			 "change from the checkpoint's (L2), over the tolerance "
			 "%g",
			 out->off_step, rtol);
		return 0;
	}
	apf_evaluator *ev = NULL;
	json_t *m = NULL;
	char err[600];
	rc = apf_host_evaluator(&ev, h);
	if (!rc)
		rc = apf_evaluator_eval(ev, &m, err, sizeof err);
	if (!rc && !m)
		rc = apf_error(APF_EVERIFY, "replay", "evaluating the replayed "
						      "state: %s", err);
	const char *key;
	json_t *v;
	out->metric = 0;
	json_object_foreach((json_t *)logged, key, v)
	{
		if (rc || why[0])
			break;
		json_t *w = json_object_get(m, key);
		double l = json_number_value(v);
		double d = w && json_is_number(w)
				   ? fabs(json_number_value(w) - l) /
					     fmax(fabs(l), 1e-3)
				   : INFINITY;
		if (d > out->metric || isnan(d))
			out->metric = d;
		if (!(d <= rtol))
			snprintf(why, size,
				 "%s of the replayed state %.6g, logged %.6g "
				 "(over %g relative)",
				 key, w ? json_number_value(w) : NAN, l,
				 rtol);
	}
	json_decref(m);
	apf_evaluator_stop(ev);
	return rc;
}

static int replay(struct audit *a, const struct apf_verify_kept *k, size_t c,
		  struct interval_bytes *b, const char *device, int exact,
		  struct landing *landed, char *why, size_t size,
		  uint64_t *replayed_ns, int *missed)
{
	*replayed_ns = 0;
	*missed = 0;
	why[0] = 0;
	const struct apf_verify_ckpt *from = &k->ckpt[c], *to = &k->ckpt[c + 1];
	apf_host *h = NULL;
	char *dir = NULL;
	int rc = host_open(a, k, device, &h, &dir);
	const struct apf_host_unit *hu = rc ? NULL : apf_host_unit(h);
	/* Read on the first try, kept for the others. */
	if (!rc && !b->f)
		rc = read_ckpt(a, k, c, hu->capacity, &b->f, &b->flen);
	if (!rc && !b->t)
		rc = read_ckpt(a, k, c + 1, hu->capacity, &b->t, &b->tlen);
	const char *f = b->f, *t = b->t;
	size_t flen = b->flen, tlen = b->tlen;
	char detail[600], so[65];
	if (!rc)
		rc = apf_host_build(h, detail, sizeof detail, so);
	if (!rc && detail[0])
		rc = apf_error(APF_EINPUT, "replay", "the build failed: %s", detail);
	/* From the initial state, the replay runs init_optimizer_state
	 * again in an empty arena: what it leaves - the whole arena, the
	 * submission's state slots included - must be checkpoint 0 bit for
	 * bit, so no state the run began with came from anywhere but this
	 * submission's init (which holds no training example: the split
	 * comes with the clock). Later intervals start from their
	 * checkpoint. */
	int from_init = from->index == 0;
	if (!rc)
		rc = apf_host_arena(h, from_init ? NULL : f, from_init ? 0 : flen);
	int ready = 0;
	if (!rc) {
		rc = apf_host_start(h, (int64_t)from->global_step);
		ready = rc > 0;
		rc = rc > 0 ? 0 : rc;
	}
	if (!rc && ready && from_init) {
		if (!apf_host_freeze(h)) {
			ready = 0;
		} else {
			const struct apf_arena_header *ah = apf_host_arena_view(h);
			if (ah->used != flen)
				snprintf(why, size,
					 "init_optimizer_state left an arena of "
					 "%llu bytes, checkpoint 0 has %zu",
					 (unsigned long long)ah->used, flen);
			else
				apf_arena_diff(ah, f, flen, why, size);
			if (why[0]) {
				char msg[700];
				snprintf(msg, sizeof msg,
					 "init_optimizer_state run again does not "
					 "leave checkpoint 0: %s",
					 why);
				snprintf(why, size, "%s", msg);
				ready = 0;
			}
		}
	}
	/* Asked for its eval as a run asks (apf_host_due_step): the first
	 * eval of a trial at step 1, given with the go; any other when the
	 * trial nears the logged step. */
	int first = from_init && to->global_step == 1;
	if (!rc && ready && !first)
		apf_host_due_step(h, (int64_t)to->global_step,
				  (int64_t)to->asked_after);
	if (!rc && ready)
		rc = apf_host_go(h, from->submission_ns, (int64_t)from->index,
				 from->metrics, first ? 1 : 0);
	uint64_t t_go = h ? apf_host_clock_ns(h) : 0;
	if (!rc && ready && from_init && !apf_host_resume(h))
		ready = 0;
	int64_t step = 0;
	enum apf_proto_why w_why;
	int w = rc || !ready ? APF_HOST_ENDED
			     : apf_host_next(h, t_go + REPLAY_TIMEOUT_NS, &step,
					     &w_why);
	if (!rc && w < 0)
		rc = w;
	if (!rc && ready && w == APF_HOST_TIMEOUT)
		rc = apf_error(APF_EVERIFY, "replay", "no report within 30 minutes");
	if (!rc && ready && w == APF_HOST_REPORT) {
		static const char *const whys[] = {"due", "complete",
						   "max_steps"};
		/* Timed as the runner times an interval: to the freeze. */
		if (!apf_host_freeze(h))
			ready = 0;
		*replayed_ns = apf_host_clock_ns(h) - t_go;
		if (!ready)
			;
		else if ((*missed = apf_host_due_missed(h)))
			snprintf(why, size,
				 "the replay's step %llu ended before it could be "
				 "asked for (it reported step %lld): its steps sped "
				 "up past the supervisor's lead; replay it again",
				 (unsigned long long)to->global_step,
				 (long long)step);
		else if (step != (int64_t)to->global_step)
			snprintf(why, size,
				 "the replay reported step %lld, the log step %llu",
				 (long long)step,
				 (unsigned long long)to->global_step);
		else if ((int)w_why != to->why && to->why >= 0 && to->why < 3)
			snprintf(why, size,
				 "the replay reported its eval as %s, the log "
				 "as %s",
				 whys[w_why], whys[to->why]);
		else {
			const struct apf_arena_header *ah = apf_host_arena_view(h);
			if (ah->used != tlen)
				snprintf(why, size,
					 "the arena holds %llu bytes, the "
					 "checkpoint %zu",
					 (unsigned long long)ah->used, tlen);
			else if (exact)
				apf_arena_diff(ah, t, tlen, why, size);
			else
				rc = land(h, ah, f, flen, t, tlen, to->metrics,
					  a->o->rtol > 0 ? a->o->rtol
							 : APF_REPLAY_RTOL,
					  landed, why, size);
		}
	}
	const char *detail2 = NULL;
	const char *kind = h ? apf_host_ending(h, &detail2) : NULL;
	if (!rc && !why[0] && kind)
		rc = apf_error(APF_EVERIFY, "replay", "the trial ended (%s): %s",
			       kind, detail2);
	else if (!rc && !why[0] && !ready)
		rc = apf_error(APF_EVERIFY, "replay", "the trial did not start");
	apf_host_close(h);
	if (dir)
		apf_remove_tree(dir);
	free(dir);
	return rc;
}

/* One interval of the kept checkpoints: unit u, k -> k+1. */
struct interval {
	size_t unit, k;
	uint8_t key[32];
	double change; /* L2 norm of the parameters' change; --replay-top */
	int top;       /* one of the --replay-top choices */
};

static int cmp_interval(const void *a, const void *b)
{
	return memcmp(((const struct interval *)a)->key,
		      ((const struct interval *)b)->key, 32);
}

/* Largest change first, then the seeded order. */
static int cmp_change(const void *a, const void *b)
{
	const struct interval *x = a, *y = b;
	if (x->change != y->change)
		return x->change < y->change ? 1 : -1;
	return cmp_interval(a, b);
}

/* Chosen (top, then seeded) first, in that order; the rest after. */
static int cmp_chosen(const void *a, const void *b)
{
	const struct interval *x = a, *y = b;
	if (x->top != y->top)
		return y->top - x->top;
	if (x->top)
		return cmp_change(a, b);
	return cmp_interval(a, b);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void set_check(apf_verify_report *r, int c, int outcome,
		      const char *detail)
{
	free(r->check[c].detail);
	r->check[c].outcome = outcome;
	r->check[c].detail = apf_strdup(detail);
}

static int check4(struct audit *a)
{
	apf_verify_report *r = a->r;
	size_t done = 0, initial = 0;
	char why[1000], line[1200];
	int rc = 0;
	for (size_t u = 0; !rc && u < r->nkept; u++) {
		rc = reeval_unit(a, &r->kept[u], &done, &initial, why, sizeof why);
		if (!rc && why[0]) {
			set_check(r, APF_VERIFY_CHECKPOINTS, APF_VERIFY_FAILED, why);
			return apf_error(APF_EVERIFY, "check 4 (checkpoints)", "%s",
					 why);
		}
	}
	if (rc)
		return rc;
	snprintf(line, sizeof line,
		 "%zu checkpoints' digests match; %zu initial state%s equal%s "
		 "the workload's initialisation for the seed, and re-evaluated "
		 "in a clean process (numerics %d) the %zu others' metrics "
		 "equal the log's bit for bit%s",
		 done, initial, initial == 1 ? "" : "s", initial == 1 ? "s" : "",
		 r->numerics, done - initial,
		 r->npruned ? "; the pruned units' checkpoints are not here "
			      "(--pruned) and were not re-evaluated"
			    : "");
	set_check(r, APF_VERIFY_CHECKPOINTS, APF_VERIFY_PASSED, line);
	return 0;
}

/* The intervals, each with its seeded key; ordered, chosen first. *nchosen
 * and *ntop say how many are replayed and how many of them are top. */
static int choose(struct audit *a, struct interval **out, size_t *niv,
		  size_t *ntop, size_t *nseeded)
{
	const apf_verify_report *r = a->r;
	const struct apf_audit_opts *o = a->o;
	size_t n = 0;
	for (size_t u = 0; u < r->nkept; u++)
		n += r->kept[u].n > 1 ? r->kept[u].n - 1 : 0;
	*out = NULL;
	*niv = n;
	*ntop = *nseeded = 0;
	if (!n)
		return 0;
	struct interval *iv = apf_calloc(n, sizeof *iv);
	if (!iv)
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	size_t m = 0;
	for (size_t u = 0; u < r->nkept; u++)
		for (size_t k = 0; k + 1 < r->kept[u].n; k++) {
			char msg[700];
			int len = snprintf(msg, sizeof msg, "apf-replay-v1 %u %s %zu",
					   o->seed, r->kept[u].unit, k);
			iv[m] = (struct interval){.unit = u, .k = k};
			apf_sha256_buf(iv[m].key, msg, (size_t)len);
			m++;
		}
	int rc = 0;
	/* --replay-top Q: the Q intervals whose parameters changed most. */
	for (size_t u = 0; !rc && o->top > 0 && u < r->nkept; u++)
		rc = unit_changes(a, u);
	for (size_t i = 0; !rc && o->top > 0 && i < n; i++)
		iv[i].change = a->change[iv[i].unit][iv[i].k + 1];
	if (rc) {
		free(iv);
		return rc;
	}
	if (o->top > 0) {
		qsort(iv, n, sizeof *iv, cmp_change);
		for (size_t i = 0; i < n && (long)i < o->top; i++, (*ntop)++)
			iv[i].top = 1;
	}
	qsort(iv, n, sizeof *iv, cmp_chosen);
	size_t rest = n - *ntop;
	*nseeded = o->replay == APF_AUDIT_ALL ? rest
		   : o->replay > 0 && (size_t)o->replay < rest ? (size_t)o->replay
		   : o->replay > 0			       ? rest
							       : 0;
	*out = iv;
	return 0;
}

/* What check 5 does here, settled before anything is replayed, from the
 * auditor's options and this machine alone: the run's device and models
 * are claims (verify.h), so they may narrow what can be compared but never
 * widen a tolerance or excuse a comparison the auditor asked for. */
struct how {
	const char *device; /* where the replays run: "cpu" or "cuda" */
	int exact;          /* bit for bit, else within rtol on the CPU */
	int timed;          /* replayed times comparable with the claimed */
	char compare[300];  /* where and how, for the check's line */
	char compare_why[900];
	char timing_why[400];
	char refused[900];  /* why check 5 fails unreplayed, or "" */
};

/* A cpu run replays on the CPU, bit for bit: the CPU backend's steps do
 * not depend on the instruction set (nn/cpu/isa.h). A cuda run replays on
 * CUDA, bit for bit, where this machine's first GPU is the model the run
 * claims (cuDNN and cuBLAS run deterministic algorithms, whose bits are
 * the model's); anywhere else an exact replay cannot match, and check 5
 * fails rather than fall back: a cpu run relabelled cuda would otherwise
 * buy a forged checkpoint the tolerance. Tolerant, only when the auditor
 * asks, replays on the CPU, the reference every device is checked against
 * (on the run's GPU too). Times compare only where the replay runs on the
 * hardware the run claims: its CPU model, and for a cuda run its GPU
 * model with the replay on it; a run that claims another, or none, fails
 * --timing-tolerance unless the auditor accepts that. */
static void replay_plan(const struct audit *a, struct how *p)
{
	json_t *env = NULL;
	int rc = apf_env_capture(&env);
	const char *here = rc ? NULL
			      : json_string_value(json_object_get(
					json_object_get(env, "cpu"), "model"));
	const char *gpu = rc ? NULL
			     : json_string_value(json_object_get(
				       json_array_get(json_object_get(env, "gpus"), 0),
				       "name"));
	apf_error_clear();
	const apf_verify_report *r = a->r;
	const struct apf_audit_opts *o = a->o;
	const char *ran = r->cpu_model, *ran_gpu = r->gpu_model;
	int cuda = !strcmp(r->device, "cuda");
	int same_gpu = cuda && gpu && *gpu && ran_gpu && !strcmp(gpu, ran_gpu);
	int same_cpu = here && *here && ran && *ran && !strcmp(here, ran);
	memset(p, 0, sizeof *p);
	p->exact = o->compare != APF_REPLAY_TOLERANT;
	p->device = same_gpu && p->exact ? "cuda" : "cpu";
	double rtol = o->rtol > 0 ? o->rtol : APF_REPLAY_RTOL;
	if (p->exact && cuda && !same_gpu) {
		snprintf(p->refused, sizeof p->refused,
			 "replay: the run claims device cuda on %s, this "
			 "machine has %s: a cuda run's steps match bit for bit "
			 "on its GPU model only (give --replay-compare tolerant "
			 "to replay on the CPU within --replay-rtol, default "
			 "%g)",
			 ran_gpu && *ran_gpu ? ran_gpu : "an unrecorded GPU",
			 gpu && *gpu ? gpu : "no GPU", APF_REPLAY_RTOL);
		snprintf(p->compare_why, sizeof p->compare_why, "%s",
			 p->refused);
	} else if (p->exact) {
		snprintf(p->compare, sizeof p->compare,
			 "on the %s, each ending in its checkpoint bit for bit",
			 cuda ? gpu : "CPU");
		if (cuda)
			snprintf(p->compare_why, sizeof p->compare_why,
				 "the run claims cuda on %s, this machine's "
				 "GPU model",
				 gpu);
		else
			snprintf(p->compare_why, sizeof p->compare_why,
				 "the run claims cpu, whose steps are the same "
				 "on any x86-64 CPU");
	} else {
		snprintf(p->compare, sizeof p->compare,
			 "on the CPU for a %s run, each ending within %g of its "
			 "interval's parameter change of its checkpoint (L2) "
			 "and with metrics within %g relative",
			 cuda ? "cuda" : "cpu", rtol, rtol);
		snprintf(p->compare_why, sizeof p->compare_why,
			 "tolerant: the auditor's --replay-compare tolerant");
	}
	p->timed = same_cpu && (!cuda || (same_gpu && p->exact));
	if (!same_cpu && ran && *ran)
		snprintf(p->timing_why, sizeof p->timing_why,
			 "this CPU (%s) is not the run's (%s)",
			 here && *here ? here : "unknown", ran);
	else if (!same_cpu)
		snprintf(p->timing_why, sizeof p->timing_why,
			 "the run records no CPU model (run.json "
			 "environment.cpu.model), this CPU is %s",
			 here && *here ? here : "unknown");
	else if (cuda && !same_gpu)
		snprintf(p->timing_why, sizeof p->timing_why,
			 "this machine's GPU (%s) is not the run's (%s)",
			 gpu && *gpu ? gpu : "none",
			 ran_gpu && *ran_gpu ? ran_gpu : "unrecorded");
	else if (cuda && !p->exact)
		snprintf(p->timing_why, sizeof p->timing_why,
			 "the replays ran on the CPU (--replay-compare "
			 "tolerant), the run on %s",
			 ran_gpu);
	else if (cuda)
		snprintf(p->timing_why, sizeof p->timing_why,
			 "replayed on the CPU model (%s) and GPU model (%s) "
			 "the run claims",
			 ran, ran_gpu);
	else
		snprintf(p->timing_why, sizeof p->timing_why,
			 "replayed on the CPU model the run claims (%s)", ran);
	/* Checked after the comparison: a cuda run the auditor cannot
	 * replay exactly is refused for that first. */
	if (!p->refused[0] && !p->timed && o->tolerance > 0 &&
	    !o->accept_other_hardware)
		snprintf(p->refused, sizeof p->refused,
			 "timing: %s: --timing-tolerance compares %s only (give "
			 "--accept-other-hardware to replay without comparing "
			 "times)",
			 p->timing_why,
			 cuda ? "a cuda run's times replayed on its GPU model, "
				"with its CPU model,"
			      : "on the run's CPU model");
	json_decref(env);
}

/* The report's record of how check 5 compared (verify.h). */
static int keep_how(apf_verify_report *r, const struct how *p,
		    const struct apf_audit_opts *o)
{
	struct apf_verify_replay_how *h = &r->replay_how;
	snprintf(h->compare, sizeof h->compare, "%s",
		 p->exact ? "exact" : "tolerant");
	snprintf(h->on, sizeof h->on, "%s", p->compare[0] ? p->device : "");
	snprintf(h->timing, sizeof h->timing, "%s",
		 !p->timed	    ? "not compared"
		 : o->tolerance > 0 ? "compared"
				    : "reported");
	free(h->compare_why);
	free(h->timing_why);
	h->compare_why = apf_strdup(p->compare_why);
	h->timing_why = apf_strdup(p->timing_why);
	if (!h->compare_why || !h->timing_why)
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	return 0;
}

static int check5(struct audit *a)
{
	apf_verify_report *r = a->r;
	const struct apf_audit_opts *o = a->o;
	struct interval *iv = NULL;
	size_t niv = 0, ntop = 0, nseeded = 0;
	int rc = choose(a, &iv, &niv, &ntop, &nseeded);
	if (rc)
		return rc;
	if (!niv) {
		/* Nothing replayed is not a pass. */
		set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_SKIPPED,
			  "skipped: no unit keeps two checkpoints, so no eval "
			  "interval can be replayed");
		return 0;
	}
	struct how p;
	replay_plan(a, &p);
	rc = keep_how(r, &p, o);
	char why[700], line[2400];
	if (!rc && p.refused[0]) {
		snprintf(line, sizeof line, "%s: %s", r->run_dir, p.refused);
		set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_FAILED, line);
		rc = apf_error(APF_EVERIFY, "check 5 (replay)", "%s", line);
	}
	if (rc) {
		free(iv);
		return rc;
	}
	/* Each replay is timed like a trial: claimed / replayed submission
	 * time per interval, held against the tolerance where timed. */
	double *ratios = apf_calloc(ntop + nseeded + 1, sizeof *ratios);
	if (!ratios) {
		free(iv);
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	}
	struct landing worst = {0};
	size_t replayed = 0;
	for (size_t i = 0; !rc && i < ntop + nseeded; i++) {
		const struct apf_verify_kept *k = &r->kept[iv[i].unit];
		const struct apf_verify_ckpt *from = &k->ckpt[iv[i].k];
		const struct apf_verify_ckpt *to = &k->ckpt[iv[i].k + 1];
		unsigned long long s0 = from->global_step, s1 = to->global_step;
		say(a, "replaying %s steps %llu to %llu", k->unit, s0 + 1, s1);
		uint64_t replayed_ns = 0;
		struct landing landed = {0};
		/* A replay whose step went by before it could be asked for
		 * (the trial sped up past the lead, or this machine held the
		 * verifier up) says nothing of the run: it is replayed again,
		 * twice at most. */
		int missed = 0;
		struct interval_bytes bytes = {0};
		for (int tries = 0; tries < 3; tries++) {
			rc = replay(a, k, iv[i].k, &bytes, p.device, p.exact,
				    &landed, why, sizeof why, &replayed_ns,
				    &missed);
			if (rc || !missed)
				break;
			say(a, "replaying %s steps %llu to %llu again (its step "
			       "went by before it was asked for)",
			    k->unit, s0 + 1, s1);
		}
		free(bytes.f);
		free(bytes.t);
		worst.off_step = fmax(worst.off_step, landed.off_step);
		worst.off_norm = fmax(worst.off_norm, landed.off_norm);
		worst.metric = fmax(worst.metric, landed.metric);
		double claimed = (double)(to->submission_ns - from->submission_ns) / 1e9;
		double again = (double)replayed_ns / 1e9;
		ratios[replayed] = again > 0 ? claimed / again : 0;
		if (!rc && !why[0] && p.timed && o->tolerance > 0 &&
		    again >= MIN_TIMED_S && claimed * o->tolerance < again)
			snprintf(why, sizeof why,
				 "claimed %.3f s of submission time, replayed "
				 "here in %.3f s (claimed/replayed %.2f, under "
				 "1/%g)",
				 claimed, again, ratios[replayed], o->tolerance);
		if (!rc && why[0]) {
			char chosen[64], origin[64];
			if (iv[i].top)
				snprintf(chosen, sizeof chosen,
					 "a largest parameter change");
			else
				snprintf(chosen, sizeof chosen, "seed %u", o->seed);
			if (from->index)
				snprintf(origin, sizeof origin, "eval %llu",
					 (unsigned long long)from->index);
			else
				snprintf(origin, sizeof origin, "the initial state");
			snprintf(line, sizeof line,
				 "%s/%s: steps %llu to %llu replayed from %s (%s): %s",
				 r->run_dir, k->unit, s0 + 1, s1, origin, chosen,
				 why);
			set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_FAILED, line);
			rc = apf_error(APF_EVERIFY, "check 5 (replay)", "%s", line);
		}
		replayed++;
	}
	if (!rc) {
		char how[200], timing[700], off[300] = "";
		if (!p.exact)
			snprintf(off, sizeof off,
				 " (largest: %.3g of the change, %.3g of the "
				 "parameters' norm; metrics %.3g)",
				 worst.off_step, worst.off_norm, worst.metric);
		if (ntop && nseeded)
			snprintf(how, sizeof how,
				 "%zu with the largest parameter change, %zu "
				 "chosen by seed %u",
				 ntop, nseeded, o->seed);
		else if (ntop)
			snprintf(how, sizeof how,
				 "those with the largest parameter change");
		else if (o->replay == APF_AUDIT_ALL)
			snprintf(how, sizeof how, "all");
		else
			snprintf(how, sizeof how, "seed %u", o->seed);
		qsort(ratios, replayed, sizeof *ratios, cmp_double);
		if (p.timed)
			snprintf(timing, sizeof timing,
				 "; claimed/replayed submission time %.2f to "
				 "%.2f (median %.2f: the time the run claims "
				 "for an interval's steps over the time they "
				 "took here; above 1 the run was slower than "
				 "this replay, below 1 faster)%s, %s",
				 ratios[0], ratios[replayed - 1],
				 ratios[replayed / 2],
				 o->tolerance > 0 ? ", within the tolerance where "
						    "replayed for 0.1 s or more"
						  : "",
				 p.timing_why);
		else if (o->tolerance > 0)
			snprintf(timing, sizeof timing,
				 "; timing not compared (accepted by "
				 "--accept-other-hardware): %s",
				 p.timing_why);
		else
			snprintf(timing, sizeof timing,
				 "; timing not compared: %s", p.timing_why);
		snprintf(line, sizeof line,
			 "%zu of %zu eval intervals replayed (%s) %s (%s)%s%s",
			 replayed, niv, how, p.compare, p.compare_why, off,
			 timing);
		set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_PASSED, line);
	}
	free(ratios);
	free(iv);
	return rc;
}

int apf_verify_audit(apf_verify_report *r, const struct apf_audit_opts *o)
{
	int replaying = o->replay != 0 || o->top > 0;
	if (!o->reeval && !replaying)
		return 0;
	struct audit a = {.r = r, .o = o};
	int rc = audit_open(&a, replaying);
	if (!rc && o->top > 0 && r->nkept &&
	    !(a.change = apf_calloc(r->nkept, sizeof *a.change)))
		rc = apf_error(APF_ENOMEM, "verify", "out of memory");
	if (!rc && o->reeval)
		rc = check4(&a);
	if (!rc && replaying)
		rc = check5(&a);
	audit_close(&a);
	return rc;
}
