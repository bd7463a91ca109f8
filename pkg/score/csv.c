/*
 * csv.c: the scorer's reading of one eval_measurements.csv, read as text by
 * the run directory's one CSV reader (apf_rundir_csv_parse: quoting, CRLF,
 * a byte-order mark, blank lines), and finding the first eval that meets
 * the target.
 *
 * Two kinds of problem, both named "score: <file>:<line>: <why>":
 *
 *   - the file is not a CSV the scorer can read (broken quoting, a row
 *     longer than the header, no metric or time column, empty): an error;
 *   - a number in it cannot be trusted: the trial is refused. The caller
 *     decides what that costs (apf score --strict: an error; else a warning
 *     and the trial never meets its target).
 *
 * Columns read: validation/<metric>, the time (score, else
 * accumulated_submission_time), and, when present, the other AlgoPerf
 * clocks and counters (accumulated_submission_time, accumulated_eval_time,
 * accumulated_logging_time, total_duration, global_step,
 * preemption_count). Each is checked on every row, so a bad value refuses
 * the whole trial instead of scoring what happened to parse. A number is a
 * plain decimal: an optional '-', digits, optionally '.' and digits, an
 * optional exponent (12, 0.5, 1e-3, 1.5E+2); no '+', hex, inf or nan words,
 * nor trailing text (spaces and tabs around it are dropped). Clocks and
 * counters must be present, >= 0 (so not -0) and finite, counters whole,
 * and none may go back from one row to the next (total_duration may across
 * a preemption, where the wall clock restarts). The metric may be empty or
 * "nan", the two ways AlgoPerf and apf write a missing value (the v0.5 logs
 * hold both); missing never meets a target. Otherwise it must be finite and
 * in its metric's range (apf_score_metric_range): accuracy 2.5 or inf is
 * refused, never met. As in pandas, which AlgoPerf's scorer reads these
 * files with: blank lines are skipped, and a short row is padded with empty
 * values (which a clock then may not be).
 */
#include "score/score.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rundir/rundir.h"

#define MAX_CSV_BYTES (1u << 30)

struct csv {
	const char *name;
	long rec_line;  /* line the current record starts on */
	char *refused;  /* "<name>:<line>: <why>" of a refused value */
};

/* The file cannot be read as eval measurements. line 0: the whole file. */
static int malformed(struct csv *c, long line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int malformed(struct csv *c, long line, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (line > 0)
		return apf_error(APF_EINPUT, "score", "%s:%ld: %s", c->name,
				 line, why);
	return apf_error(APF_EINPUT, "score", "%s: %s", c->name, why);
}

/* A value of the current record that the scorer refuses. */
static int refuse(struct csv *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int refuse(struct csv *c, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	free(c->refused);
	if (asprintf(&c->refused, "%s:%ld: %s", c->name, c->rec_line, why) <
	    0) {
		c->refused = NULL;
		return apf_error(APF_ENOMEM, "score", "out of memory");
	}
	return apf_error(APF_EINPUT, "score", "%s", c->refused);
}

static int nomem(struct csv *c)
{
	return apf_error(APF_ENOMEM, "score", "%s: out of memory", c->name);
}

/* ---- the columns read ----------------------------------------------------- */

enum kind {
	METRIC,  /* the target metric: may be missing; its own range */
	CLOCK,   /* seconds: required, >= 0 */
	COUNTER, /* required, >= 0, whole */
};

/* The clocks and counters, in the order their problems are checked. Every
 * one of them accumulates over a trial. */
static const struct {
	const char *name;
	enum kind kind;
} counted[] = {
	{"score", CLOCK},
	{"accumulated_submission_time", CLOCK},
	{"accumulated_eval_time", CLOCK},
	{"accumulated_logging_time", CLOCK},
	{"total_duration", CLOCK},
	{"global_step", COUNTER},
	{"preemption_count", COUNTER},
};

#define NCOUNTED (sizeof counted / sizeof *counted)
#define NSLOTS (NCOUNTED + 1)
#define METRIC_SLOT NCOUNTED
#define PREEMPTION_SLOT 6
#define TOTAL_DURATION_SLOT 4

struct slot {
	const char *name;   /* the column */
	const char *metric; /* METRIC: the metric's own name */
	enum kind kind;
	double lo, hi;
	long col;           /* its column in the header; -1 when absent */
	double v;           /* this row's value and text (cut, for messages) */
	char text[48];
	int have_prev;      /* the previous row's */
	double prev;
	char prev_text[48];
	long prev_line;
};

static int blank_or_tab(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* -?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)? */
static int plain_decimal(const char *s)
{
	if (*s == '-')
		s++;
	if (*s < '0' || *s > '9')
		return 0;
	while (*s >= '0' && *s <= '9')
		s++;
	if (*s == '.') {
		s++;
		if (*s < '0' || *s > '9')
			return 0;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '-' || *s == '+')
			s++;
		if (*s < '0' || *s > '9')
			return 0;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == 0;
}

static int nonfinite_word(const char *s)
{
	if (*s == '-' || *s == '+')
		s++;
	return !strcasecmp(s, "inf") || !strcasecmp(s, "infinity") ||
	       !strcasecmp(s, "nan");
}

/* Sets sl->v from the field's text f, or refuses it. */
static int read_value(struct csv *c, struct slot *sl, apf_buf *f)
{
	char *s = f->data ? f->data : "";
	while (blank_or_tab(*s))
		s++;
	size_t n = strlen(s);
	while (n && blank_or_tab(s[n - 1]))
		s[--n] = 0;
	if (sl->kind == METRIC && (!n || !strcmp(s, "nan"))) {
		sl->v = NAN;
		return 0;
	}
	if (!n)
		return refuse(c, "column '%s': empty; a number is required",
			      sl->name);
	if (nonfinite_word(s))
		return refuse(c, "column '%s': '%s' is not a finite number",
			      sl->name, s);
	if (!plain_decimal(s))
		return refuse(c, "column '%s': '%s' is not a plain decimal "
				 "number",
			      sl->name, s);
	/* Underflow (ERANGE toward 0) still gives the nearest value. */
	double v = strtod(s, NULL);
	if (!isfinite(v))
		return refuse(c, "column '%s': '%s' is not a finite number "
				 "(too large)",
			      sl->name, s);
	if (sl->lo >= 0 && signbit(v))
		return refuse(c, "column '%s': '%s' is negative%s", sl->name, s,
			      v == 0 ? " zero" : "");
	if (sl->kind == COUNTER && floor(v) != v)
		return refuse(c, "column '%s': '%s' is not a whole number",
			      sl->name, s);
	if (v < sl->lo || v > sl->hi) {
		if (isinf(sl->hi))
			return refuse(c, "column '%s': %s is outside [%g, inf), "
					 "the range of %s",
				      sl->name, s, sl->lo, sl->metric);
		return refuse(c, "column '%s': %s is outside [%g, %g], the "
				 "range of %s",
			      sl->name, s, sl->lo, sl->hi, sl->metric);
	}
	sl->v = v;
	snprintf(sl->text, sizeof sl->text, "%s", s);
	return 0;
}

/* After a whole row: no clock or counter may go back. */
static int check_order(struct csv *c, struct slot *slots)
{
	const struct slot *pre = &slots[PREEMPTION_SLOT];
	int preempted = pre->col >= 0 && pre->have_prev && pre->v > pre->prev;
	for (size_t i = 0; i < NCOUNTED; i++) {
		struct slot *sl = &slots[i];
		if (sl->col < 0)
			continue;
		if (sl->have_prev && sl->v < sl->prev &&
		    !(i == TOTAL_DURATION_SLOT && preempted))
			return refuse(c, "column '%s' goes back from %s "
					 "(line %ld) to %s",
				      sl->name, sl->prev_text, sl->prev_line,
				      sl->text);
	}
	for (size_t i = 0; i < NCOUNTED; i++) {
		struct slot *sl = &slots[i];
		sl->have_prev = 1;
		sl->prev = sl->v;
		memcpy(sl->prev_text, sl->text, sizeof sl->text);
		sl->prev_line = c->rec_line;
	}
	return 0;
}

/* The header: finds the columns read (the reader has refused a column
 * named twice). */
static int read_header(struct csv *c, const apf_rundir_csv *t,
		       struct slot *slots)
{
	for (size_t i = 0; i < NSLOTS; i++)
		slots[i].col = apf_rundir_csv_column(t, slots[i].name);
	if (slots[METRIC_SLOT].col < 0)
		return malformed(c, t->header_line,
				 "no column '%s' (the target metric)",
				 slots[METRIC_SLOT].name);
	if (slots[0].col < 0 && slots[1].col < 0)
		return malformed(c, t->header_line,
				 "no time column ('score' or "
				 "'accumulated_submission_time')");
	return 0;
}

/* Sets f to a cell's text. */
static int cell_text(struct csv *c, apf_buf *f, const char *cell)
{
	f->len = 0;
	if (f->data)
		f->data[0] = 0;
	return apf_buf_puts(f, cell) ? nomem(c) : 0;
}

/* One data row: its values checked, in the order of its columns, as they
 * appear. */
static int read_row(struct csv *c, apf_buf *f, struct slot *slots,
		    const apf_rundir_csv *t, const struct apf_rundir_csv_row *row)
{
	int seen[NSLOTS] = {0};
	c->rec_line = row->line;
	for (size_t i = 0; i < row->n; i++) {
		if (i >= t->ncols)
			return malformed(c, c->rec_line,
					 "more fields than the %zu columns of "
					 "the header",
					 t->ncols);
		for (size_t k = 0; k < NSLOTS; k++) {
			if (slots[k].col != (long)i)
				continue;
			int rc = cell_text(c, f, row->cell[i]);
			if (!rc)
				rc = read_value(c, &slots[k], f);
			if (rc)
				return rc;
			seen[k] = 1;
		}
	}
	/* A short row: the columns it lacks are empty. */
	for (size_t k = 0; k < NSLOTS; k++)
		if (slots[k].col >= 0 && !seen[k]) {
			int rc = cell_text(c, f, "");
			if (!rc)
				rc = read_value(c, &slots[k], f);
			if (rc)
				return rc;
		}
	return check_order(c, slots);
}

/* The byte offset where physical line `line` (1-based) of text begins. */
static size_t line_offset(const char *text, size_t len, long line)
{
	size_t off = 0;
	for (long l = 1; l < line && off < len; l++) {
		const char *nl = memchr(text + off, '\n', len - off);
		off = nl ? (size_t)(nl - text) + 1 : len;
	}
	return off;
}

/* budget > 0: rows timed at or past it are read (their values checked)
 * but are no evals: AlgoPerf evaluates only while budget remains, so the
 * eval that ends a unit at its budget meets no target. *late: such a row
 * met the target and none before it did; *cut: the offset where the first
 * such row begins (len when none). */
static int parse_trial(const char *text, size_t len, const char *name,
		       const struct apf_score_target *target, double budget,
		       long *evals, long *hit, double *time, int *late,
		       size_t *cut, char **refused)
{
	*evals = 0;
	*hit = -1;
	*time = INFINITY;
	*late = 0;
	*cut = len;
	*refused = NULL;
	struct csv c = {name, 1, NULL};
	apf_buf col = {0}, f = {0};
	struct slot slots[NSLOTS];
	memset(slots, 0, sizeof slots);
	for (size_t i = 0; i < NSLOTS; i++) {
		slots[i].col = -1;
		if (i < NCOUNTED) {
			slots[i].name = counted[i].name;
			slots[i].kind = counted[i].kind;
			slots[i].lo = 0;
			slots[i].hi = INFINITY;
		}
	}
	int rc = apf_buf_printf(&col, "validation/%s", target->metric)
			 ? nomem(&c)
			 : 0;
	slots[METRIC_SLOT].name = col.data;
	slots[METRIC_SLOT].metric = target->metric;
	slots[METRIC_SLOT].kind = METRIC;
	apf_score_metric_range(target->metric, &slots[METRIC_SLOT].lo,
			       &slots[METRIC_SLOT].hi);
	apf_rundir_csv *t = NULL;
	if (!rc) {
		rc = apf_rundir_csv_parse(&t, NULL, text, len, name);
		if (rc)
			apf_error_prefix(rc, "score");
	}
	if (!rc && !t->header)
		rc = malformed(&c, 0, "empty file (no header line)");
	if (!rc)
		rc = read_header(&c, t, slots);
	/* score when present, else accumulated_submission_time. */
	const struct slot *tslot = slots[0].col >= 0 ? &slots[0] : &slots[1];
	for (size_t r = 0; !rc && r < t->nrows; r++) {
		rc = read_row(&c, &f, slots, t, &t->rows[r]);
		if (rc)
			break;
		double mv = slots[METRIC_SLOT].v;
		int meets = apf_score_first_hit(&mv, 1, target->direction,
						target->validation) == 0;
		if (budget > 0 && !(tslot->v < budget)) {
			if (*cut == len)
				*cut = line_offset(text, len, t->rows[r].line);
			if (meets && *hit < 0)
				*late = 1;
			continue;
		}
		if (*hit < 0 && meets) {
			*hit = *evals;
			*time = tslot->v;
		}
		(*evals)++;
	}
	if (rc) {
		*hit = -1;
		*time = INFINITY;
		*late = 0;
		*cut = len;
		*refused = c.refused;
	} else {
		free(c.refused);
	}
	apf_rundir_csv_free(t);
	apf_buf_free(&col);
	apf_buf_free(&f);
	return rc;
}

int apf_score_parse_trial(const char *text, size_t len, const char *name,
			  const struct apf_score_target *target, long *evals,
			  long *hit, double *time)
{
	int late;
	size_t cut;
	return apf_score_parse_trial_within(text, len, name, target, 0, evals,
					    hit, time, &late, &cut);
}

int apf_score_parse_trial_within(const char *text, size_t len,
				 const char *name,
				 const struct apf_score_target *target,
				 double budget, long *evals, long *hit,
				 double *time, int *late, size_t *cut)
{
	char *refused;
	int rc = parse_trial(text, len, name, target, budget, evals, hit, time,
			     late, cut, &refused);
	free(refused);
	return rc;
}

int apf_score_read_trial(struct apf_score_trial *trial,
			 const struct apf_score_target *target)
{
	char *text;
	size_t len;
	free(trial->refused);
	trial->refused = NULL;
	trial->late = 0;
	if (trial->missing) {
		trial->evals = 0;
		trial->hit = -1;
		trial->time = INFINITY;
		return 0;
	}
	int rc = apf_file_read(&text, &len, trial->csv, MAX_CSV_BYTES);
	if (rc)
		return rc;
	size_t cut;
	rc = parse_trial(text, len, trial->csv, target, trial->budget,
			 &trial->evals, &trial->hit, &trial->time, &trial->late,
			 &cut, &trial->refused);
	free(text);
	if (rc && trial->refused) {
		/* Refused, not unreadable: the caller weighs it. */
		apf_error_clear();
		rc = 0;
	}
	return rc;
}
