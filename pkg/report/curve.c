/*
 * curve.c: one trial's eval_measurements.csv as curves to draw, and a
 * polyline as a compact SVG path. The scorer decides what a trial scores
 * (pkg/score); this only reads what to draw, with the same CSV reader
 * (pkg/rundir), and draws nothing it cannot parse as a plain number.
 */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rundir/rundir.h"

#define NOMEM apf_error(APF_ENOMEM, "report", "out of memory")

static double number(const apf_rundir_csv *t, size_t row, long col)
{
	if (col < 0 || (size_t)col >= t->rows[row].n)
		return NAN;
	const char *s = t->rows[row].cell[col];
	/* Plain decimals only, as the scorer reads them: no hex, inf or
	 * nan spelled out (those are not drawn). */
	if (!*s || s[strspn(s, "0123456789.eE+-")])
		return NAN;
	char *end;
	double v = strtod(s, &end);
	return *end || !isfinite(v) ? NAN : v;
}

static long column(const apf_rundir_csv *t, const char *split,
		   const char *metric)
{
	char name[256];
	snprintf(name, sizeof name, "%s/%s", split, metric);
	return apf_rundir_csv_column(t, name);
}

void apf_report_curve_free(struct apf_report_curve *c)
{
	if (!c)
		return;
	free(c->step);
	free(c->time);
	free(c->val);
	free(c->train);
	free(c->test);
	memset(c, 0, sizeof *c);
}

int apf_report_curve_read(struct apf_report_curve *out, const char *csv_path,
			  const char *metric)
{
	memset(out, 0, sizeof *out);
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read_regular(&text, &len, csv_path,
				       APF_MAX_CSV_BYTES);
	apf_rundir_csv *t = NULL;
	if (!rc)
		rc = apf_rundir_csv_parse(&t, NULL, text, len, csv_path);
	free(text);
	if (rc)
		return rc;
	long step = apf_rundir_csv_column(t, "global_step");
	long time = apf_rundir_csv_column(t, "score");
	if (time < 0)
		time = apf_rundir_csv_column(t, "accumulated_submission_time");
	long val = column(t, "validation", metric),
	     train = column(t, "train", metric),
	     test = column(t, "test", metric);
	size_t n = t->nrows;
	size_t cap = n ? n : 1;
	out->step = malloc(cap * sizeof(double));
	out->time = malloc(cap * sizeof(double));
	out->val = malloc(cap * sizeof(double));
	out->train = malloc(cap * sizeof(double));
	out->test = malloc(cap * sizeof(double));
	if (!out->step || !out->time || !out->val || !out->train ||
	    !out->test) {
		apf_rundir_csv_free(t);
		apf_report_curve_free(out);
		return NOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		out->step[i] = number(t, i, step);
		out->time[i] = number(t, i, time);
		out->val[i] = number(t, i, val);
		out->train[i] = number(t, i, train);
		out->test[i] = number(t, i, test);
	}
	out->n = n;
	out->has_step = step >= 0;
	out->has_train = train >= 0;
	out->has_test = test >= 0;
	apf_rundir_csv_free(t);
	return 0;
}

/* "<c><n>" for path data, without printf: the page holds a million of
 * these. A positive number after a number needs a space. */
static int put_num(apf_buf *out, char c, long v, int space)
{
	char b[32], *p = b + sizeof b;
	unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	else if (space)
		*--p = ' ';
	if (c)
		*--p = c;
	return apf_buf_append(out, p, (size_t)(b + sizeof b - p));
}

int apf_report_svg_path(apf_buf *out, const double *x, const double *y,
			size_t n, double tol)
{
	int bad = 0, pen = 0; /* pen: a point of the current line is kept */
	long lx = 0, ly = 0;
	if (tol < 1)
		tol = 1;
	for (size_t i = 0; !bad && i < n; i++) {
		if (!isfinite(x[i]) || !isfinite(y[i]) || fabs(x[i]) > 1e6 ||
		    fabs(y[i]) > 1e6) {
			pen = 0;
			continue;
		}
		long px = lround(x[i]), py = lround(y[i]);
		if (!pen) {
			bad = put_num(out, 'M', px, 0) ||
			      put_num(out, 0, py, 1);
			lx = px, ly = py, pen = 1;
			continue;
		}
		/* The next point is the last of its line when it is missing,
		 * not finite or there is none: keep this one then. */
		int last = i + 1 == n || !isfinite(x[i + 1]) ||
			   !isfinite(y[i + 1]);
		if (!last && labs(px - lx) < tol && labs(py - ly) < tol)
			continue;
		if (px == lx && py == ly)
			continue;
		bad = put_num(out, 'l', px - lx, 0) ||
		      put_num(out, 0, py - ly, 1);
		lx = px, ly = py;
	}
	return bad ? NOMEM : 0;
}
