/*
 * outputs.c: the files a run directory holds beside its log, against the
 * log (which checks 2 and 3 have verified by then):
 *
 *   RUN/<unit>/hparams.json           trial_start's hparams (check 2)
 *   RUN/<unit>/eval_measurements.csv  one row per kept eval with the
 *       AlgoPerf columns: the accumulated times and total duration in
 *       seconds (ns / 1e9, printed %.9f), score = accumulated submission
 *       time, global_step, preemption_count, every metric (printed %.9g);
 *       a metric an eval lacks is an empty cell (check 3)
 *   RUN/<unit>/ckpt/<i>.bin           size and SHA-256 of eval i's
 *       checkpoint record, hashed on all cores (check 4)
 *
 * Values are compared as numbers, so a CSV printed with other digits of
 * the same value still passes; a CSV cell that differs in value fails. The
 * CSV is read by the run directory's one reader (apf_rundir_csv_parse), the
 * one the scorer reads it with: a file the two would read differently
 * cannot pass here.
 */
#include "verify/verifier.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"
#include "rundir/rundir.h"

static char *unit_file(const struct vx *v, const struct vx_unit *u,
		       const char *rel)
{
	apf_buf b = {0};
	if (apf_buf_printf(&b, "%s/%s/%s", v->dir, u->name, rel)) {
		apf_buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* A unit's file, read the way every file of the run is (base.h): inside
 * the run directory, no symlink followed, regular, capped. *text is NULL
 * when it is missing. A file the log describes that cannot be read so is
 * evidence against the run: APF_EVERIFY. */
static int read_unit_file(const struct vx *v, const struct vx_unit *u,
			  const char *rel, size_t max, char **text, size_t *len)
{
	apf_buf r = {0};
	if (apf_buf_printf(&r, "%s/%s", u->name, rel)) {
		apf_buf_free(&r);
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	}
	int rc = apf_file_read_beneath(text, len, v->dir, r.data, max,
				       APF_FILE_MISSING_OK);
	apf_buf_free(&r);
	return rc == APF_EINPUT ? APF_EVERIFY : rc;
}

/* ---- hparams.json ------------------------------------------------------------ */

static int json_values_equal(json_t *a, json_t *b)
{
	if (json_is_number(a) && json_is_number(b))
		return json_number_value(a) == json_number_value(b);
	if (json_is_string(a) && json_is_string(b))
		return !strcmp(json_string_value(a), json_string_value(b));
	return json_equal(a, b);
}

int apf_vx_hparams_files(struct vx *v)
{
	for (size_t i = 0; i < v->nunits; i++) {
		const struct vx_unit *u = &v->units[i];
		if (!u->hparams)
			continue;
		char *file = unit_file(v, u, "hparams.json");
		if (!file)
			return apf_error(APF_ENOMEM, v->dir, "out of memory");
		json_error_t je;
		char *text = NULL;
		size_t len = 0;
		int rc = read_unit_file(v, u, "hparams.json",
					APF_MAX_SMALL_JSON_BYTES, &text, &len);
		int missing = !rc && !text;
		json_t *h = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES,
					      &je)
				 : NULL;
		free(text);
		if (rc)
			;
		else if (missing)
			rc = apf_error(APF_EVERIFY, file,
				       "missing (the trial started at %s line "
				       "%" PRIu64 ")",
				       apf_vx_log_of(v, u), u->start_line);
		else if (!h)
			rc = apf_error(APF_EVERIFY, file, "line %d: %s", je.line,
				       je.text);
		else if (!json_is_object(h) ||
			 json_object_size(h) != json_object_size(u->hparams))
			rc = apf_error(APF_EVERIFY, file,
				       "not the hyperparameters of trial_start "
				       "(%s line %" PRIu64 ")",
				       apf_vx_log_of(v, u), u->start_line);
		const char *k;
		json_t *x;
		json_object_foreach(rc ? NULL : u->hparams, k, x)
		{
			json_t *y = json_object_get(h, k);
			if (!y || !json_values_equal(x, y)) {
				rc = apf_error(APF_EVERIFY, file,
					       "%s differs from trial_start's "
					       "(%s line %" PRIu64 ")",
					       k, apf_vx_log_of(v, u), u->start_line);
				break;
			}
		}
		json_decref(h);
		free(file);
		if (rc)
			return apf_error_prefix(rc, apf_vx_label(v, APF_VERIFY_LOG));
	}
	return 0;
}

/* ---- eval_measurements.csv ----------------------------------------------------- */

enum col_kind { C_EVAL, C_LOGGING, C_SUBMISSION, C_STEP, C_PREEMPT, C_SCORE,
		C_TOTAL, C_METRIC };

static const char *const time_cols[] = {
	"accumulated_eval_time", "accumulated_logging_time",
	"accumulated_submission_time", "global_step", "preemption_count",
	"score", "total_duration"};
#define NTIME (sizeof time_cols / sizeof time_cols[0])

/* Whether s is a whole number in range, in *out. */
static bool parse_double(double *out, const char *s)
{
	if (!*s)
		return false;
	char *end;
	errno = 0;
	*out = strtod(s, &end);
	return !*end && errno != ERANGE;
}

/* A cell against the text the runner prints for a value: equal text, or
 * equal as numbers. */
static int same_value(const char *cell, const char *want)
{
	if (!strcmp(cell, want))
		return 1;
	double a, b;
	return parse_double(&a, cell) && parse_double(&b, want) && a == b;
}

static int same_integer(const char *cell, uint64_t want)
{
	if (!*cell || *cell == '-' || *cell == '+')
		return 0;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(cell, &end, 10);
	return !*end && !errno && x == want;
}

static void seconds_text(uint64_t ns, char out[48])
{
	snprintf(out, 48, "%.9f", (double)ns / 1e9);
}

struct csv_ctx {
	struct vx *v;
	const struct vx_unit *u;
	const char *file;
};

static int csv_fail(const struct csv_ctx *c, size_t line,
		    const struct vx_eval *e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int csv_fail(const struct csv_ctx *c, size_t line,
		    const struct vx_eval *e, const char *fmt, ...)
{
	char why[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (e)
		return apf_error(APF_EVERIFY, apf_vx_label(c->v, APF_VERIFY_TIMING),
				 "%s: line %zu (eval %" PRIu64 " of %s, %s "
				 "line %" PRIu64 "): %s",
				 c->file, line, e->index, c->u->name,
				 apf_vx_log_of(c->v, c->u), e->line, why);
	return apf_error(APF_EVERIFY, apf_vx_label(c->v, APF_VERIFY_TIMING),
			 "%s: line %zu: %s", c->file, line, why);
}

static int check_row(const struct csv_ctx *c, const apf_rundir_csv *t,
		     const int *kind, const long *metric,
		     const struct apf_rundir_csv_row *row,
		     const struct vx_eval *e)
{
	size_t line = (size_t)row->line;
	if (row->n != t->ncols)
		return csv_fail(c, line, e, "%zu cells, the header has %zu",
				row->n, t->ncols);
	for (size_t i = 0; i < row->n; i++) {
		const char *cell = row->cell[i];
		char want[48];
		uint64_t ns = 0;
		int ok;
		switch (kind[i]) {
		case C_STEP:
			ok = same_integer(cell, e->global_step);
			snprintf(want, sizeof want, "%" PRIu64, e->global_step);
			break;
		case C_PREEMPT:
			ok = same_integer(cell, e->preempt);
			snprintf(want, sizeof want, "%" PRIu64, e->preempt);
			break;
		case C_METRIC: {
			size_t m;
			for (m = 0; m < e->nm && e->mname[m] != metric[i]; m++)
				;
			if (m == e->nm) {
				ok = !*cell;
				snprintf(want, sizeof want, "(empty)");
			} else {
				snprintf(want, sizeof want, "%.9g", e->mval[m]);
				ok = same_value(cell, want);
			}
			break;
		}
		default:
			ns = kind[i] == C_EVAL		  ? e->ev
			     : kind[i] == C_LOGGING	  ? e->log
			     : kind[i] == C_TOTAL	  ? e->sub + e->ev + e->log
							  : e->sub;
			seconds_text(ns, want);
			ok = same_value(cell, want);
		}
		if (!ok)
			return csv_fail(c, line, e, "%s is '%.40s', the log says %s",
					t->header[i], cell, want);
	}
	return 0;
}

static int check_csv(struct vx *v, const struct vx_unit *u)
{
	char *file = unit_file(v, u, "eval_measurements.csv");
	if (!file)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	struct csv_ctx c = {v, u, file};
	char *text = NULL;
	size_t len = 0;
	int rc = read_unit_file(v, u, "eval_measurements.csv", APF_MAX_CSV_BYTES,
				&text, &len);
	if (rc) {
		free(file);
		return apf_error_prefix(rc, apf_vx_label(v, APF_VERIFY_TIMING));
	}
	if (!text) {
		if (u->nevals > (!v->rep->complete && u->state != U_ENDED))
			rc = csv_fail(&c, 0, NULL,
				      "missing, but the log has %zu evals",
				      u->nevals);
		free(file);
		return rc;
	}
	apf_rundir_csv *t = NULL;
	struct apf_rundir_csv_fault fault;
	rc = apf_rundir_csv_parse(&t, &fault, text, len, file);
	free(text);
	if (rc == APF_EINPUT && fault.kind == APF_RUNDIR_CSV_NUL)
		rc = apf_error(APF_EVERIFY, apf_vx_label(v, APF_VERIFY_TIMING),
			       "%s: holds a NUL byte; not a CSV file", file);
	else if (rc == APF_EINPUT && fault.kind == APF_RUNDIR_CSV_TWICE)
		rc = csv_fail(&c, (size_t)fault.line, NULL, "column %s twice",
			      fault.column);
	else if (rc == APF_EINPUT)
		rc = csv_fail(&c, (size_t)fault.line, NULL, "malformed quoting");
	if (rc) {
		free(file);
		return rc;
	}
	int *kind = t->ncols ? calloc(t->ncols, sizeof *kind) : NULL;
	long *metric = t->ncols ? calloc(t->ncols, sizeof *metric) : NULL;
	if (t->ncols && (!kind || !metric))
		rc = apf_error(APF_ENOMEM, file, "out of memory");
	size_t hline = (size_t)t->header_line;
	int have[NTIME] = {0};
	size_t nmetrics = 0;
	for (size_t i = 0; !rc && i < t->ncols; i++) {
		size_t k;
		for (k = 0; k < NTIME && strcmp(time_cols[k], t->header[i]); k++)
			;
		if (k < NTIME) {
			kind[i] = (int)k;
			have[k] = 1;
			continue;
		}
		size_t m;
		for (m = 0; m < u->nmnames && strcmp(u->mnames[m], t->header[i]); m++)
			;
		if (m == u->nmnames)
			rc = csv_fail(&c, hline, NULL,
				      "column %.80s is no metric the log has",
				      t->header[i]);
		kind[i] = C_METRIC;
		metric[i] = (long)m;
		nmetrics++;
	}
	for (size_t k = 0; !rc && t->header && k < NTIME; k++)
		if (!have[k])
			rc = csv_fail(&c, hline, NULL, "column %s is missing",
				      time_cols[k]);
	if (!rc && t->header && nmetrics != u->nmnames)
		for (size_t m = 0; !rc && m < u->nmnames; m++)
			if (apf_rundir_csv_column(t, u->mnames[m]) < 0)
				rc = csv_fail(&c, hline, NULL,
					      "column %s is missing",
					      u->mnames[m]);
	size_t evals = 0;
	for (size_t r = 0; !rc && r < t->nrows; r++, evals++) {
		if (evals >= u->nevals)
			rc = csv_fail(&c, (size_t)t->rows[r].line, NULL,
				      "a row past the log's %zu evals",
				      u->nevals);
		else
			rc = check_row(&c, t, kind, metric, &t->rows[r],
				       &u->evals[evals]);
	}
	if (!rc && !t->header && u->nevals)
		rc = csv_fail(&c, 1, NULL, "empty, but the log has %zu evals",
			      u->nevals);
	/* The runner writes the CSV after the eval's record: a crash
	 * between the two leaves it one row short. */
	int lagging = evals + 1 == u->nevals && !v->rep->complete &&
		      u->state != U_ENDED;
	if (!rc && evals < u->nevals && !lagging)
		rc = csv_fail(&c, (size_t)t->lines, &u->evals[evals],
			      "the file ends after %zu rows, but the log has "
			      "%zu evals",
			      evals, u->nevals);
	apf_rundir_csv_free(t);
	free(kind);
	free(metric);
	free(file);
	return rc;
}

int apf_vx_csvs(struct vx *v)
{
	for (size_t i = 0; i < v->nunits; i++) {
		if (v->units[i].state == U_NONE)
			continue;
		int rc = check_csv(v, &v->units[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- checkpoints ------------------------------------------------------------------ */

struct ckpt_job {
	const struct vx_unit *u;
	const struct vx_eval *e;
	int rc;             /* 0, or what was wrong: */
	int missing;
	char refused[300];  /* why it was not read (not a regular file in
			     * the run, too large, unreadable) */
	uint64_t size;
	uint8_t sha[32];
};

struct ckpt_pool {
	const struct vx *v;
	struct ckpt_job *jobs;
	size_t n, next;
	pthread_mutex_t lock;
};

/* Runs on a worker thread: what goes wrong is kept in the job, as the
 * error message is the thread's own. Nothing of a file that is not a
 * regular file inside the run is measured or read, so a symlink to a file
 * elsewhere discloses nothing of it (not even its size). */
static void hash_job(const struct vx *v, struct ckpt_job *j)
{
	char rel[600];
	apf_rundir_ckpt_name(rel, sizeof rel, j->u->name, j->e->index);
	int fd;
	struct stat st;
	int rc = apf_file_open_beneath(&fd, &st, v->dir, rel,
				       APF_FILE_MISSING_OK);
	if (rc == APF_ENOMEM) {
		j->rc = APF_ENOMEM;
	} else if (rc) {
		j->rc = rc;
		apf_error_take(j->refused, sizeof j->refused);
	} else if (fd < 0) {
		j->missing = 1;
	} else if ((uint64_t)st.st_size != j->e->bytes) {
		j->size = (uint64_t)st.st_size;
	} else if ((uint64_t)st.st_size > APF_MAX_CKPT_BYTES) {
		j->rc = APF_EINPUT;
		snprintf(j->refused, sizeof j->refused,
			 "%llu bytes, larger than the %llu-byte limit",
			 (unsigned long long)st.st_size,
			 (unsigned long long)APF_MAX_CKPT_BYTES);
	} else {
		j->rc = apf_sha256_fd(j->sha, &j->size, fd, APF_MAX_CKPT_BYTES,
				      "checkpoint");
		if (j->rc)
			apf_error_take(j->refused, sizeof j->refused);
	}
	if (fd >= 0)
		close(fd);
}

static void *ckpt_worker(void *arg)
{
	struct ckpt_pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		size_t k = p->next++;
		pthread_mutex_unlock(&p->lock);
		if (k >= p->n)
			return NULL;
		hash_job(p->v, &p->jobs[k]);
	}
}

/* --pruned: a unit none of whose checkpoint files is here (every job of
 * it found its file missing, and the log names each one right) is pruned,
 * and named in the report in the log's order; one with any file here is
 * checked whole. */
static int mark_pruned(struct vx *v, const struct ckpt_pool *p)
{
	for (size_t i = 0, k = 0; i < v->nunits; i++) {
		struct vx_unit *u = &v->units[i];
		size_t n = u->nevals + (size_t)u->has_init, gone = 0;
		for (size_t e = 0; e < n; e++, k++)
			gone += p->jobs[k].missing && p->jobs[k].e->file_ok &&
				!p->jobs[k].rc;
		if (!n || gone < n)
			continue;
		u->pruned = 1;
		char **np = realloc(v->rep->pruned,
				    (v->rep->npruned + 1) * sizeof *np);
		if (!np)
			return apf_error(APF_ENOMEM, v->dir, "out of memory");
		v->rep->pruned = np;
		if (!(np[v->rep->npruned] = apf_strdup(u->name)))
			return apf_error(APF_ENOMEM, v->dir, "out of memory");
		v->rep->npruned++;
	}
	return 0;
}

int apf_vx_checkpoints(struct vx *v)
{
	size_t n = 0;
	for (size_t i = 0; i < v->nunits; i++)
		n += v->units[i].nevals + (size_t)v->units[i].has_init;
	struct ckpt_pool p = {.v = v, .n = n};
	p.jobs = apf_calloc(n ? n : 1, sizeof *p.jobs);
	if (!p.jobs)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < v->nunits; i++) {
		if (v->units[i].has_init) {
			p.jobs[k].u = &v->units[i];
			p.jobs[k++].e = &v->units[i].init;
		}
		for (size_t e = 0; e < v->units[i].nevals; e++) {
			p.jobs[k].u = &v->units[i];
			p.jobs[k++].e = &v->units[i].evals[e];
		}
	}
	pthread_mutex_init(&p.lock, NULL);
	int threads = apf_cpu_count();
	pthread_t tid[64];
	int started = 0;
	for (int i = 1; i < threads && i < 64; i++)
		if (pthread_create(&tid[started], NULL, ckpt_worker, &p) == 0)
			started++;
	ckpt_worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&p.lock);
	int rc = v->o->pruned ? mark_pruned(v, &p) : 0;
	/* The failure on the earliest log line is the one to report. */
	const struct ckpt_job *bad = NULL;
	for (size_t i = 0; !rc && i < n; i++) {
		const struct ckpt_job *j = &p.jobs[i];
		if (j->rc == APF_ENOMEM) {
			rc = apf_error(APF_ENOMEM, v->dir, "out of memory");
			break;
		}
		if (j->u->pruned)
			continue;
		int wrong = !j->e->file_ok || j->missing || j->rc ||
			    j->size != j->e->bytes || memcmp(j->sha, j->e->sha, 32);
		if (wrong && (!bad || j->e->line < bad->e->line))
			bad = j;
		v->rep->checkpoints++;
		v->rep->checkpoint_bytes += j->size;
	}
	if (!rc && bad) {
		char rel[64];
		apf_rundir_ckpt_name(rel, sizeof rel, NULL, bad->e->index);
		char *file = unit_file(v, bad->u, rel);
		char got[65];
		apf_hex(got, bad->sha, 32);
		const char *what = "";
		char why[200];
		if (!bad->e->file_ok)
			what = "checkpoint.file does not name it";
		else if (bad->missing)
			what = "missing";
		else if (bad->rc)
			what = bad->refused[0] ? bad->refused : "unreadable";
		else if (bad->size != bad->e->bytes) {
			snprintf(why, sizeof why,
				 "%" PRIu64 " bytes, the log says %" PRIu64,
				 bad->size, bad->e->bytes);
			what = why;
		} else {
			char want[65];
			apf_hex(want, bad->e->sha, 32);
			snprintf(why, sizeof why,
				 "SHA-256 %.16s..., the log says %.16s...", got,
				 want);
			what = why;
		}
		/* A refusal's message names the file already. */
		int named = bad->refused[0] && file &&
			    !strncmp(bad->refused, file, strlen(file));
		char whose[40];
		if (bad->e->index)
			snprintf(whose, sizeof whose, "eval %" PRIu64,
				 bad->e->index);
		else
			snprintf(whose, sizeof whose, "the initial state");
		rc = apf_error(APF_EVERIFY, apf_vx_label(v, APF_VERIFY_CHECKPOINTS),
			       "%s%s%s (%s of %s, %s line %" PRIu64 ")",
			       named ? "" : file ? file : rel, named ? "" : ": ",
			       what, whose,
			       bad->u->name, apf_vx_log_of(v, bad->u), bad->e->line);
		free(file);
	}
	free(p.jobs);
	return rc;
}
