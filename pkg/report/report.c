/*
 * report.c: the page (report.h). Its parts, in the order a reader meets
 * them:
 *
 *   header     what was scored, under which rules and targets, and what
 *              was verified;
 *   summary    ranks and scores with the per-workload times, the
 *              performance profile with its table, the verification table,
 *              and the runs left out of the ranking;
 *   workloads  per base workload, then each held-out variant of it: one
 *              figure with six views (validation, train or test metric
 *              against submission time or global step; the toggles at the
 *              top choose), every trial of every submission drawn thin, each
 *              study's best trial thick with the study's dash and marker at
 *              its time-to-target, the target and the budget, a legend that
 *              marks unverified runs, and a table of the figure's numbers;
 *   submissions per submission: verification, provenance (the entry's
 *              manifest), environment (run.json's record), keys, and the
 *              hyperparameters of every trial, each row linked to its curve;
 *   warnings   the scorer's, as `apf score` prints them;
 *   data       apf-data (apf score --json, verbatim), apf-verify (apf verify
 *              --json per run), apf-trials (each trial's scored numbers).
 *
 * Numbers: scores, ranks, times, ratios and the profile are read back from
 * apf_score_format_json's own text, so the page and `apf score --json`
 * cannot disagree; per-trial numbers come from the same result's trials.
 * Each number cell carries its exact value in data-value ("%.17g", "inf"
 * or "null") beside the text shown (4 significant digits).
 */
#include "report/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "entry/entry.h"
#include "rundir/rundir.h"
#include "workload/workload.h"

#define NOMEM apf_error(APF_ENOMEM, "report", "out of memory")

/* Plot geometry, in SVG user units (pixels at 100%). */
#define PW 640
#define PH 330
#define ML 62
#define MR 14
#define MT 14
#define MB 42
#define NSTUDY_STYLES 5

enum { M_VAL, M_TRAIN, M_TEST, NMETRICS };
enum { X_TIME, X_STEP, NAXES };
static const char *const metric_key[NMETRICS] = {"validation", "train",
						 "test"};
static const char *const axis_key[NAXES] = {"time", "step"};

/* One trial of one submission in one workload column. */
struct tv {
	size_t sub;     /* ranked index */
	const struct apf_score_study *study;
	size_t study_index;
	const struct apf_score_trial *trial;
	int best;
	int read;       /* its curve was read */
	struct apf_report_curve c;
	json_t *hp;     /* its hparams.json, NULL when there is none */
};

/* One workload column (base or variant) with everything drawn in it. */
struct col {
	const char *name;
	const char *base;   /* variants: their base; NULL for a base */
	size_t index;       /* into r->workloads */
	int has_target;
	struct apf_score_target target;
	double budget;      /* seconds, NAN when unknown */
	struct tv *t;
	size_t nt;
	int has[NMETRICS];
	double ylo[NMETRICS], yhi[NMETRICS]; /* the views' y ranges */
	double xhi[NAXES];                   /* and x ranges, from 0 */
};

/* The writer: one buffer and one sticky status, so that the page is a
 * sequence of calls without a check after each. */
struct w {
	apf_buf *b;
	int rc;
};

static void put(struct w *w, const char *s)
{
	if (!w->rc && apf_buf_puts(w->b, s))
		w->rc = NOMEM;
}

__attribute__((format(printf, 2, 3))) static void putf(struct w *w,
						       const char *fmt, ...)
{
	if (w->rc)
		return;
	char small[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0) {
		w->rc = apf_error(APF_EINTERNAL, "report", "cannot format");
		return;
	}
	if ((size_t)n < sizeof small) {
		put(w, small);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		w->rc = NOMEM;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	put(w, big);
	free(big);
}

/* Untrusted text, escaped. */
static void esc(struct w *w, const char *s)
{
	if (!w->rc)
		w->rc = apf_report_html_text(w->b, s);
}

/* ---- numbers ------------------------------------------------------------- */

/* A JSON time: a real, "inf", or null (no logs). */
static double jtime(const json_t *v)
{
	if (json_is_number(v))
		return json_number_value(v);
	if (json_is_string(v) && !strcmp(json_string_value(v), "inf"))
		return INFINITY;
	return NAN;
}

static void exact(char *out, size_t size, double v)
{
	if (isnan(v))
		snprintf(out, size, "null");
	else if (isinf(v))
		snprintf(out, size, v > 0 ? "inf" : "-inf");
	else
		snprintf(out, size, "%.17g", v);
}

/* A table cell of a time: its exact value and 4 significant digits, "inf"
 * for a miss, "-" without logs; extra is appended (escaped). */
static void time_cell(struct w *w, double t, const char *cls,
		      const char *extra)
{
	char ex[32], shown[48];
	exact(ex, sizeof ex, t);
	if (isnan(t))
		snprintf(shown, sizeof shown, "-");
	else
		apf_score_format_seconds(shown, sizeof shown, t, 4, 0);
	putf(w, "<td class=\"n%s%s\" data-value=\"%s\">%s", cls ? " " : "",
	     cls ? cls : "", ex, shown);
	if (extra)
		esc(w, extra);
	put(w, "</td>");
}

static void num_cell(struct w *w, double v, int prec)
{
	char ex[32];
	exact(ex, sizeof ex, v);
	if (isfinite(v))
		putf(w, "<td class=\"n\" data-value=\"%s\">%.*f</td>", ex, prec,
		     v);
	else
		putf(w, "<td class=\"n\" data-value=\"%s\">%s</td>", ex,
		     isnan(v) ? "-" : "inf");
}

/* "%g" with a few digits, for axis labels. */
static void tick_label(char *out, size_t size, double v, double step)
{
	if (fabs(v) < step * 1e-9)
		v = 0;
	if (fabs(v) >= 1e5 || (v != 0 && fabs(v) < 1e-3))
		snprintf(out, size, "%.2g", v);
	else {
		int d = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
		if (d > 6)
			d = 6;
		snprintf(out, size, "%.*f", d, v);
	}
}

static double nice_step(double range, int n)
{
	double raw = range / n, p = pow(10, floor(log10(raw))), f = raw / p;
	return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

/* ---- verification -------------------------------------------------------- */

enum vstate { V_NONE, V_UNVERIFIED, V_VERIFIED, V_INCOMPLETE, V_FAILED };

static json_t *verdict_of(const struct apf_report_opts *o, const char *name)
{
	return o->verdicts ? json_object_get(o->verdicts, name) : NULL;
}

static enum vstate vstate_of(const struct apf_report_opts *o,
			     const struct apf_score_submission *s)
{
	if (!s->apf_run)
		return V_NONE;
	json_t *v = verdict_of(o, s->name);
	if (!v)
		return V_UNVERIFIED;
	if (!json_is_true(json_object_get(v, "verified")))
		return V_FAILED;
	return json_is_true(json_object_get(v, "complete")) ? V_VERIFIED
							    : V_INCOMPLETE;
}

static const char *vstate_text(enum vstate v)
{
	switch (v) {
	case V_NONE:
		return "not verifiable (AlgoPerf logs)";
	case V_UNVERIFIED:
		return "UNVERIFIED";
	case V_VERIFIED:
		return "verified";
	case V_INCOMPLETE:
		return "verified, incomplete";
	default:
		return "FAILED verification";
	}
}

static const char *vstate_class(enum vstate v)
{
	return v == V_VERIFIED	 ? "ok"
	       : v == V_NONE	 ? "na"
	       : v == V_FAILED	 ? "bad"
				 : "warn";
}

static void badge(struct w *w, enum vstate v)
{
	putf(w, "<span class=\"badge %s\">%s</span>", vstate_class(v),
	     vstate_text(v));
}

/* ---- reading what is drawn ----------------------------------------------- */

static void cols_free(struct col *c, size_t n)
{
	for (size_t i = 0; c && i < n; i++) {
		for (size_t k = 0; k < c[i].nt; k++) {
			apf_report_curve_free(&c[i].t[k].c);
			json_decref(c[i].t[k].hp);
		}
		free(c[i].t);
	}
	free(c);
}

/* The budget of an apf run's workload: workload.ini's max_runtime_s for
 * the run's device, times the plan's budget multiplier. */
static double budget_of(const char *workload, const char *device,
			double multiplier)
{
	apf_workload_spec *spec = NULL;
	if (apf_workload_spec_load(&spec, workload)) {
		apf_error_clear();
		return NAN;
	}
	const struct apf_budget *b =
		apf_workload_budget(spec, device ? device : "cpu");
	double t = b && b->max_runtime_s > 0 ? b->max_runtime_s * multiplier
					     : NAN;
	apf_workload_spec_free(spec);
	return t;
}

static json_t *read_json_beneath(const char *dir, const char *rel,
				 size_t max)
{
	char *text = NULL;
	size_t len = 0;
	if (apf_file_read_beneath(&text, &len, dir, rel, max,
				  APF_FILE_MISSING_OK)) {
		apf_error_clear();
		return NULL;
	}
	json_t *j = text ? json_loadb(text, len, 0, NULL) : NULL;
	free(text);
	return j;
}

/* hparams.json beside a trial's eval_measurements.csv, if it is an
 * object. */
static json_t *hparams_of(const char *csv)
{
	char *dir = csv ? strdup(csv) : NULL;
	char *slash = dir ? strrchr(dir, '/') : NULL;
	json_t *h = NULL;
	if (slash) {
		*slash = 0;
		h = read_json_beneath(dir, "hparams.json",
				      APF_MAX_SMALL_JSON_BYTES);
	}
	free(dir);
	if (!json_is_object(h)) {
		json_decref(h);
		h = NULL;
	}
	return h;
}

static double plan_multiplier(const json_t *run_json)
{
	json_t *m = json_object_get(json_object_get(run_json, "plan"),
				    "budget_multiplier");
	double scale = apf_budget_scale_of_run(run_json);
	return (json_is_number(m) ? json_number_value(m) : 1.0) *
	       (scale > 0 ? scale : 1.0);
}

static int y_range(const struct col *k, int metric, double *lo,
		   double *hi);
static double x_max(const struct col *k, int axis);

static int cols_read(struct col **out, size_t *nout,
		     const apf_score_result *r, apf_score_targets *targets,
		     json_t *const *run_json)
{
	size_t nc = r->nbase + r->nvar;
	struct col *cols = apf_calloc(nc ? nc : 1, sizeof *cols);
	if (!cols)
		return NOMEM;
	int rc = 0;
	for (size_t c = 0; !rc && c < nc; c++) {
		struct col *k = &cols[c];
		k->name = r->workloads[c];
		k->index = c;
		k->base = c >= r->nbase ? r->variant_base[c - r->nbase] : NULL;
		k->budget = NAN;
		const char *base = NULL;
		if (apf_score_targets_find(&k->target, &base, targets,
					   r->rules, k->name) == 0)
			k->has_target = 1;
		else
			apf_error_clear();
		size_t cap = 0;
		for (size_t s = 0; !rc && s < r->nsub; s++) {
			const struct apf_score_submission *sub = r->sub[s];
			for (size_t i = 0; i < sub->nw; i++) {
				const struct apf_score_workload *wl = &sub->w[i];
				if (strcmp(wl->name, k->name))
					continue;
				if (sub->apf_run && isnan(k->budget))
					k->budget = budget_of(
						base ? base : k->name,
						sub->run ? sub->run->hw.device
							 : NULL,
						plan_multiplier(run_json[s]));
				for (size_t st = 0; st < wl->nstudies; st++)
					cap += wl->studies[st].ntrials;
			}
		}
		k->t = apf_calloc(cap ? cap : 1, sizeof *k->t);
		if (!k->t) {
			rc = NOMEM;
			break;
		}
		for (size_t s = 0; !rc && s < r->nsub; s++) {
			const struct apf_score_submission *sub = r->sub[s];
			for (size_t i = 0; !rc && i < sub->nw; i++) {
				const struct apf_score_workload *wl = &sub->w[i];
				if (strcmp(wl->name, k->name))
					continue;
				for (size_t st = 0; st < wl->nstudies; st++) {
					const struct apf_score_study *sy =
						&wl->studies[st];
					for (size_t t = 0; t < sy->ntrials; t++) {
						/* A unit of the plan without
						 * its CSV has no curve to draw
						 * (the scores count it as a
						 * miss; the warnings name it). */
						if (sy->trials[t].missing)
							continue;
						struct tv *v = &k->t[k->nt++];
						v->sub = s;
						v->study = sy;
						v->study_index = st;
						v->trial = &sy->trials[t];
						v->best = sy->best == (int)t;
					}
				}
			}
		}
		for (size_t i = 0; !rc && i < k->nt; i++) {
			struct tv *v = &k->t[i];
			v->hp = hparams_of(v->trial->csv);
			if (!k->has_target)
				continue;
			int e = apf_report_curve_read(&v->c, v->trial->csv,
						      k->target.metric);
			if (e == APF_ENOMEM)
				rc = e;
			else if (e)
				apf_error_clear();
			else {
				v->read = 1;
				k->has[M_VAL] = 1;
				k->has[M_TRAIN] |= v->c.has_train;
				k->has[M_TEST] |= v->c.has_test;
			}
		}
	}
	for (size_t c = 0; !rc && c < nc; c++)
		for (int m = 0; !rc && m < NMETRICS; m++)
			rc = y_range(&cols[c], m, &cols[c].ylo[m],
				     &cols[c].yhi[m]);
	for (size_t c = 0; !rc && c < nc; c++)
		for (int a = 0; a < NAXES; a++)
			cols[c].xhi[a] = x_max(&cols[c], a);
	if (rc) {
		cols_free(cols, nc);
		return rc;
	}
	*out = cols;
	*nout = nc;
	return 0;
}

static const double *xs(const struct tv *v, int axis)
{
	return axis == X_TIME ? v->c.time : v->c.step;
}

static const double *ys(const struct tv *v, int metric)
{
	return metric == M_VAL ? v->c.val
	       : metric == M_TRAIN ? v->c.train
				   : v->c.test;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The y range: the 1st to 99th percentile of every value drawn (so one
 * diverged trial does not flatten the rest), widened to the target. */
static int y_range(const struct col *k, int metric, double *lo, double *hi)
{
	size_t n = 0;
	for (size_t i = 0; i < k->nt; i++)
		n += k->t[i].c.n;
	double *v = malloc((n ? n : 1) * sizeof *v);
	if (!v)
		return NOMEM;
	size_t m = 0;
	for (size_t i = 0; i < k->nt; i++) {
		const double *y = ys(&k->t[i], metric);
		for (size_t j = 0; y && j < k->t[i].c.n; j++)
			if (isfinite(y[j]))
				v[m++] = y[j];
	}
	/* Percentiles of an even sample of at most 8192 values are close
	 * enough for a frame, and cheap for 200,000 evals. */
	if (m > 8192) {
		size_t stride = m / 8192 + 1, kept = 0;
		for (size_t i = 0; i < m; i += stride)
			v[kept++] = v[i];
		m = kept;
	}
	if (m == 0) {
		*lo = 0, *hi = 1;
	} else {
		qsort(v, m, sizeof *v, cmp_double);
		*lo = v[(size_t)((double)(m - 1) * 0.01)];
		*hi = v[(size_t)((double)(m - 1) * 0.99 + 0.5)];
		/* The first evals (a loss at its start) lie far from where
		 * the trials spend their time: zoom on the bulk, on the
		 * side away from better; what is cut off is clipped at the
		 * frame. */
		double mid = v[(m - 1) / 2];
		int dir = k->has_target ? k->target.direction : 0;
		if (dir < 0 && mid + 3 * (mid - *lo) < *hi)
			*hi = mid + 3 * (mid - *lo);
		if (dir > 0 && mid - 3 * (*hi - mid) > *lo)
			*lo = mid - 3 * (*hi - mid);
	}
	free(v);
	if (metric == M_VAL && k->has_target) {
		*lo = fmin(*lo, k->target.validation);
		*hi = fmax(*hi, k->target.validation);
	}
	if (!(*hi > *lo)) {
		double d = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 0.5;
		*lo -= d, *hi += d;
	}
	double pad = (*hi - *lo) * 0.04;
	*lo -= pad, *hi += pad;
	return 0;
}

static double x_max(const struct col *k, int axis)
{
	double m = 0;
	for (size_t i = 0; i < k->nt; i++) {
		const double *x = xs(&k->t[i], axis);
		for (size_t j = 0; j < k->t[i].c.n; j++)
			if (isfinite(x[j]) && x[j] > m)
				m = x[j];
	}
	if (axis == X_TIME && isfinite(k->budget) && k->budget > m)
		m = k->budget;
	return m > 0 ? m * 1.02 : 1;
}

/* ---- drawing -------------------------------------------------------------- */

/* "UNVERIFIED: a, b" at (x, y) of a plot, naming the apf runs on it (all of
 * the scoring's, or those with a trial in column k) that were not verified
 * or failed: the mark every plot carries. */
static void unverified_line(struct w *w, const apf_score_result *r,
			    const struct col *k, int x, int y)
{
	int any = 0;
	for (size_t s = 0; s < r->nsub; s++) {
		if (!r->sub[s]->apf_run ||
		    r->sub[s]->verified == APF_SCORE_VERIFIED)
			continue;
		int here = !k;
		for (size_t i = 0; k && i < k->nt && !here; i++)
			here = k->t[i].sub == s;
		if (!here)
			continue;
		if (!any)
			putf(w, "<text class=\"unv\" x=\"%d\" y=\"%d\">"
				"UNVERIFIED: ",
			     x, y);
		else
			put(w, ", ");
		esc(w, r->sub[s]->name);
		any = 1;
	}
	if (any)
		put(w, "</text>");
}

struct frame {
	double x0, x1, y0, y1;
};

static double px(const struct frame *f, double x)
{
	return ML + (x - f->x0) / (f->x1 - f->x0) * (PW - ML - MR);
}

static double py(const struct frame *f, double y)
{
	double t = (y - f->y0) / (f->y1 - f->y0);
	if (t < -0.02)
		t = -0.02;
	if (t > 1.02)
		t = 1.02;
	return PH - MB - t * (PH - MT - MB);
}

static void axes(struct w *w, const struct frame *f, const char *xlabel,
		 const char *ylabel)
{
	putf(w, "<rect class=\"fr\" x=\"%d\" y=\"%d\" width=\"%d\" "
		"height=\"%d\"/>",
	     ML, MT, PW - ML - MR, PH - MT - MB);
	char lab[32];
	double sx = nice_step(f->x1 - f->x0, 6);
	for (double x = ceil(f->x0 / sx) * sx; x <= f->x1 + sx * 1e-9;
	     x += sx) {
		tick_label(lab, sizeof lab, x, sx);
		putf(w, "<path class=\"gr\" d=\"M%.1f %dv%d\"/>"
			"<text x=\"%.1f\" y=\"%d\" class=\"tx\">%s</text>",
		     px(f, x), MT, PH - MT - MB, px(f, x), PH - MB + 14, lab);
	}
	double sy = nice_step(f->y1 - f->y0, 5);
	for (double y = ceil(f->y0 / sy) * sy; y <= f->y1 + sy * 1e-9;
	     y += sy) {
		tick_label(lab, sizeof lab, y, sy);
		putf(w, "<path class=\"gr\" d=\"M%d %.1fh%d\"/>"
			"<text x=\"%d\" y=\"%.1f\" class=\"ty\">%s</text>",
		     ML, py(f, y), PW - ML - MR, ML - 4, py(f, y) + 4, lab);
	}
	putf(w, "<text x=\"%d\" y=\"%d\" class=\"tx\">", (ML + PW - MR) / 2,
	     PH - 8);
	esc(w, xlabel);
	putf(w, "</text><text transform=\"translate(14 %d) rotate(-90)\" "
		"class=\"tx\">",
	     (MT + PH - MB) / 2);
	esc(w, ylabel);
	put(w, "</text>");
}

/* A marker of study style k at (x, y): circle, square, triangle, diamond,
 * cross. */
static void marker(struct w *w, size_t k, double x, double y,
		   const char *cls)
{
	switch (k % NSTUDY_STYLES) {
	case 0:
		putf(w, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\"/>",
		     cls, x, y);
		break;
	case 1:
		putf(w, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"7\" "
			"height=\"7\"/>",
		     cls, x - 3.5, y - 3.5);
		break;
	case 2:
		putf(w, "<path class=\"%s\" d=\"M%.1f %.1fl4 7h-8z\"/>", cls, x,
		     y - 4.5);
		break;
	case 3:
		putf(w, "<path class=\"%s\" d=\"M%.1f %.1fl4.5 4.5-4.5 "
			"4.5-4.5-4.5z\"/>",
		     cls, x, y - 4.5);
		break;
	default:
		putf(w, "<path class=\"%s x\" d=\"M%.1f %.1fl8 8m0-8l-8 8\"/>",
		     cls, x - 4, y - 4);
	}
}

static void trial_key(char *out, size_t size, const struct tv *v)
{
	snprintf(out, size, "k%zu_%d_%d", v->sub, v->study->number,
		 v->trial->number);
}

/* One view of a workload figure: metric against axis. */
static void view(struct w *w, const struct col *k,
		 const apf_score_result *r, int metric, int axis, double tol)
{
	int shown = metric == M_VAL && axis == X_TIME;
	putf(w, "<div class=\"view\" data-m=\"%s\" data-x=\"%s\"%s>",
	     metric_key[metric], axis_key[axis], shown ? "" : " hidden");
	int has_x = 0;
	for (size_t i = 0; i < k->nt && !has_x; i++)
		has_x = axis == X_TIME || k->t[i].c.has_step;
	if (!k->has[metric] || !has_x) {
		put(w, "<p class=\"na\">");
		putf(w, "%s/", metric_key[metric]);
		esc(w, k->has_target ? k->target.metric : "?");
		putf(w, " %s not in these logs.</p></div>",
		     axis == X_STEP && !has_x ? "or global_step" : "is");
		return;
	}
	struct frame f = {0, k->xhi[axis], k->ylo[metric], k->yhi[metric]};
	char ylabel[200];
	snprintf(ylabel, sizeof ylabel, "%s/%s", metric_key[metric],
		 k->target.metric);
	putf(w, "<svg class=\"plot\" viewBox=\"0 0 %d %d\" role=\"img\" "
		"aria-label=\"",
	     PW, PH);
	esc(w, ylabel);
	put(w, " against ");
	put(w, axis == X_TIME ? "submission time" : "global step");
	put(w, "\">");
	axes(w, &f, axis == X_TIME ? "submission time (s)" : "global step",
	     ylabel);
	if (metric == M_VAL && k->has_target) {
		double y = py(&f, k->target.validation);
		putf(w, "<path class=\"target\" d=\"M%d %.1fh%d\"/>"
			"<text class=\"tl\" x=\"%d\" y=\"%.1f\">target %.6g"
			"</text>",
		     ML, y, PW - ML - MR, PW - MR - 4, y - 3,
		     k->target.validation);
	}
	if (axis == X_TIME && isfinite(k->budget)) {
		double x = px(&f, k->budget);
		putf(w, "<path class=\"budget\" d=\"M%.1f %dv%d\"/>"
			"<text class=\"bl\" x=\"%.1f\" y=\"%d\">budget %.6g s"
			"</text>",
		     x, MT, PH - MT - MB, x - 3, MT + 10, k->budget);
	}
	apf_buf pts = {0};
	double *xb = NULL, *yb = NULL;
	size_t cap = 0;
	/* Thin trials first, then the best ones over them. The first view
	 * (validation against time, the one shown) draws each trial as its
	 * own path, named by its key so that its row can find it; the other
	 * five draw a submission's thin trials as one path, at 4 times the
	 * tolerance, to keep the page small. */
	int own = metric == M_VAL && axis == X_TIME;
	size_t open_sub = (size_t)-1; /* the merged path being written */
	for (int pass = 0; pass < 2 && !w->rc; pass++) {
		for (size_t i = 0; i < k->nt && !w->rc; i++) {
			const struct tv *v = &k->t[i];
			if (!v->read || v->best != pass || !v->c.n)
				continue;
			if (v->c.n > cap) {
				cap = v->c.n;
				free(xb);
				free(yb);
				xb = malloc(cap * sizeof *xb);
				yb = malloc(cap * sizeof *yb);
				if (!xb || !yb) {
					w->rc = NOMEM;
					break;
				}
			}
			const double *x = xs(v, axis), *y = ys(v, metric);
			for (size_t j = 0; j < v->c.n; j++) {
				xb[j] = isfinite(x[j]) ? px(&f, x[j]) : NAN;
				yb[j] = isfinite(y[j]) ? py(&f, y[j]) : NAN;
			}
			pts.len = 0;
			if (pts.data)
				pts.data[0] = 0;
			if (apf_report_svg_path(&pts, xb, yb, v->c.n,
						pass ? 1 : own ? tol : 4 * tol)) {
				w->rc = NOMEM;
				break;
			}
			if (!pts.len)
				continue;
			char key[64];
			trial_key(key, sizeof key, v);
			if (!pass && !own) {
				if (open_sub != v->sub) {
					if (open_sub != (size_t)-1)
						put(w, "\"/>");
					putf(w, "<path class=\"c s%zu\" d=\"",
					     v->sub);
					open_sub = v->sub;
				}
				put(w, pts.data);
				continue;
			}
			if (open_sub != (size_t)-1) {
				put(w, "\"/>");
				open_sub = (size_t)-1;
			}
			if (pass) {
				putf(w, "<path class=\"c s%zu b d%zu %s\" "
					"d=\"%s\"><title>",
				     v->sub, v->study_index % NSTUDY_STYLES, key,
				     pts.data);
				esc(w, r->sub[v->sub]->name);
				putf(w, ": study %d, trial %d (best)</title>"
					"</path>",
				     v->study->number, v->trial->number);
			} else
				putf(w, "<path class=\"c s%zu %s\" d=\"%s\"/>",
				     v->sub, key, pts.data);
		}
		if (open_sub != (size_t)-1) {
			put(w, "\"/>");
			open_sub = (size_t)-1;
		}
	}
	/* Time-to-target marks, on the metric the target is on. */
	for (size_t i = 0; metric == M_VAL && i < k->nt && !w->rc; i++) {
		const struct tv *v = &k->t[i];
		long h = v->trial->hit;
		if (!v->best || !v->read || h < 0 || (size_t)h >= v->c.n ||
		    !isfinite(v->trial->time))
			continue;
		double x = axis == X_TIME ? v->trial->time : v->c.step[h];
		if (!isfinite(x) || !isfinite(v->c.val[h]))
			continue;
		char cls[32];
		snprintf(cls, sizeof cls, "m s%zu", v->sub);
		marker(w, v->study_index, px(&f, x), py(&f, v->c.val[h]), cls);
	}
	free(xb);
	free(yb);
	apf_buf_free(&pts);
	/* Unverified and failed runs, named on the plot itself. */
	unverified_line(w, r, k, ML + 6, MT + 14);
	put(w, "</svg></div>");
}

static void legend(struct w *w, const apf_score_result *r,
		   const struct apf_report_opts *o, const struct col *k)
{
	put(w, "<ul class=\"legend\">");
	for (size_t s = 0; s < r->nsub; s++) {
		int here = k == NULL;
		for (size_t i = 0; k && i < k->nt && !here; i++)
			here = k->t[i].sub == s;
		if (!here)
			continue;
		char c[8];
		apf_score_colour(c, s);
		putf(w, "<li><svg class=\"sw\" viewBox=\"0 0 28 10\"><path "
			"class=\"c s%zu b\" d=\"M1 5h26\"/></svg>",
		     s);
		esc(w, r->sub[s]->name);
		/* AlgoPerf logs are all alike: the header says it once. */
		if (r->sub[s]->apf_run) {
			put(w, " ");
			badge(w, vstate_of(o, r->sub[s]));
		}
		put(w, "</li>");
	}
	put(w, "<li class=\"studies\">studies:");
	for (size_t k2 = 0; k2 < NSTUDY_STYLES; k2++) {
		putf(w, " <svg class=\"sw\" viewBox=\"0 0 40 10\"><path "
			"class=\"c b d%zu ink\" d=\"M1 5h26\"/>",
		     k2);
		marker(w, k2, 34, 5, "m ink");
		putf(w, "</svg>%zu", k2);
	}
	put(w, " (then again from 0) &#8212; thick: the study's best "
	       "trial, marked where it met the target; thin: its other "
	       "trials</li></ul>");
}

/* The numbers of a workload figure: per submission and study, the best
 * trial, its time-to-target and where it met the target; then the median
 * over studies (what the scoring uses), before and after the held-out
 * rules, read from the score JSON. */
static void workload_table(struct w *w, const struct col *k,
			   const apf_score_result *r,
			   const struct apf_report_opts *o,
			   const json_t *jsubs)
{
	size_t nc = r->nbase + r->nvar;
	putf(w, "<table class=\"data wl\" id=\"t%zu\"><caption>Numbers of "
		"the plot: each study's best trial (",
	     k->index);
	put(w, r->rules->best == APF_SCORE_BEST_FIRST_EVAL
		       ? "first to meet the target"
		       : "fastest to the target");
	put(w, "), its time-to-target (s) and the workload's median over "
	       "studies as scored; every point of every curve is in the "
	       "trial's eval_measurements.csv.</caption><thead><tr>"
	       "<th>submission</th><th>verified</th><th>study</th><th>best "
	       "trial</th><th>trials met</th><th>time-to-target (s)</th>"
	       "<th>global step</th><th>validation metric</th></tr></thead>"
	       "<tbody>");
	for (size_t s = 0; s < r->nsub; s++) {
		const struct apf_score_study *last = NULL;
		for (size_t i = 0; i < k->nt; i++) {
			const struct tv *v = &k->t[i];
			if (v->sub != s || v->study == last)
				continue;
			last = v->study;
			const struct apf_score_study *sy = v->study;
			size_t met = 0;
			for (size_t t = 0; t < sy->ntrials; t++)
				met += isfinite(sy->trials[t].time);
			const struct tv *b = NULL;
			for (size_t j = i; j < k->nt && k->t[j].study == sy;
			     j++)
				if (k->t[j].best)
					b = &k->t[j];
			putf(w, "<tr class=\"s%zu\" data-sub=\"", s);
			esc(w, r->sub[s]->name);
			put(w, "\"><td>");
			esc(w, r->sub[s]->name);
			put(w, "</td><td>");
			badge(w, vstate_of(o, r->sub[s]));
			putf(w, "</td><td class=\"n\">%d</td>", sy->number);
			if (b) {
				char key[64];
				trial_key(key, sizeof key, b);
				putf(w, "<td class=\"n\"><a href=\"#h%zu_%s\">%d"
					"</a></td>",
				     k->index, key, b->trial->number);
			} else
				put(w, "<td>-</td>");
			putf(w, "<td class=\"n\">%zu/%zu</td>", met, sy->ntrials);
			time_cell(w, sy->time, "study", NULL);
			long h = b ? b->trial->hit : -1;
			if (b && b->read && h >= 0 && (size_t)h < b->c.n) {
				num_cell(w, b->c.step[h], 0);
				char ex[32];
				exact(ex, sizeof ex, b->c.val[h]);
				putf(w, "<td class=\"n\" data-value=\"%s\">"
					"%.4g</td>",
				     ex, b->c.val[h]);
			} else
				put(w, "<td>-</td><td>-</td>");
			put(w, "</tr>");
		}
	}
	put(w, "</tbody></table><table class=\"data med\"><caption>"
	       "Median over studies (s): raw, and after the held-out rules "
	       "(the time the profile uses)</caption><thead><tr><th>"
	       "submission</th><th>verified</th><th>median</th><th>scored"
	       "</th></tr></thead><tbody>");
	for (size_t s = 0; s < r->nsub; s++) {
		json_t *js = json_array_get(jsubs, s);
		double raw = jtime(json_object_get(
			       json_object_get(js, "raw_times"), k->name)),
		       fin = jtime(json_object_get(
			       json_object_get(js, "times"), k->name));
		putf(w, "<tr class=\"s%zu\" data-sub=\"", s);
		esc(w, r->sub[s]->name);
		putf(w, "\" data-col=\"");
		esc(w, k->name);
		put(w, "\"><td>");
		esc(w, r->sub[s]->name);
		put(w, "</td><td>");
		badge(w, vstate_of(o, r->sub[s]));
		put(w, "</td>");
		time_cell(w, raw, "raw", NULL);
		time_cell(w, fin, "final",
			  r->early[s * nc + k->index] ? " !" : NULL);
		put(w, "</tr>");
	}
	put(w, "</tbody></table>");
}

static void workload_figure(struct w *w, const struct col *k,
			    const apf_score_result *r,
			    const struct apf_report_opts *o,
			    const json_t *jsubs, double tol)
{
	putf(w, "<section class=\"fig\" id=\"w%zu\"><h3>", k->index);
	esc(w, k->name);
	if (k->base) {
		put(w, " <small>held-out variant of ");
		esc(w, k->base);
		put(w, "</small>");
	}
	put(w, "</h3><p class=\"sub\">");
	if (k->has_target) {
		putf(w, "target: validation/");
		esc(w, k->target.metric);
		putf(w, " %s %.6g", k->target.direction > 0 ? "&#8805;" : "&#8804;",
		     k->target.validation);
	} else
		put(w, "no target known for this workload");
	if (isfinite(k->budget))
		putf(w, "; budget %.6g s", k->budget);
	else
		put(w, "; budget not recorded in the logs");
	put(w, "</p><div class=\"row\"><div class=\"plots\">");
	for (int m = 0; m < NMETRICS; m++)
		for (int a = 0; a < NAXES; a++)
			view(w, k, r, m, a, tol);
	legend(w, r, o, k);
	put(w, "</div><div class=\"tables\">");
	workload_table(w, k, r, o, jsubs);
	put(w, "</div></div></section>");
}

/* ---- the summary ---------------------------------------------------------- */

static void profile_plot(struct w *w, const apf_score_result *r,
			 const struct apf_report_opts *o, const json_t *jroot)
{
	json_t *jsubs = json_object_get(jroot, "submissions"),
	       *jtau = json_object_get(jroot, "tau");
	struct frame f = {APF_SCORE_TAU_MIN, APF_SCORE_TAU_MAX, -0.04, 1.06};
	put(w, "<div class=\"row\"><div class=\"plots\"><svg class=\"plot\" "
	       "id=\"profile\" ");
	putf(w, "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"performance "
		"profiles\">",
	     PW, PH);
	axes(w, &f, "tau (time / best time)",
	     "rho: share of workloads within tau");
	apf_buf pts = {0};
	double x[APF_SCORE_POINTS * 2], y[APF_SCORE_POINTS * 2];
	for (size_t s = 0; s < r->nsub && !w->rc; s++) {
		json_t *p = json_object_get(json_array_get(jsubs, s), "profile");
		/* rho is a step function of tau: draw it as steps. */
		size_t n = 0;
		for (size_t i = 0; i < APF_SCORE_POINTS; i++) {
			double t = json_number_value(json_array_get(jtau, i));
			double v = json_number_value(json_array_get(p, i));
			if (i > 0) {
				x[n] = px(&f, t);
				y[n] = y[n - 1];
				n++;
			}
			x[n] = px(&f, t);
			y[n++] = py(&f, v);
		}
		pts.len = 0;
		if (apf_report_svg_path(&pts, x, y, n, 1)) {
			w->rc = NOMEM;
			break;
		}
		putf(w, "<path class=\"c s%zu b prof\" d=\"%s\"><title>", s,
		     pts.data ? pts.data : "");
		esc(w, r->sub[s]->name);
		put(w, "</title></path>");
	}
	apf_buf_free(&pts);
	unverified_line(w, r, NULL, ML + 6, PH - MB - 8);
	put(w, "</svg>");
	legend(w, r, o, NULL);
	put(w, "</div><div class=\"tables\"><div class=\"scroll\"><table "
	       "class=\"data\" id=\"profile-table\"><caption>rho(tau) per "
	       "submission, at the 100 points the score integrates"
	       "</caption><thead><tr><th>tau</th>");
	for (size_t s = 0; s < r->nsub; s++) {
		put(w, "<th>");
		esc(w, r->sub[s]->name);
		put(w, "</th>");
	}
	put(w, "</tr></thead><tbody>");
	for (size_t i = 0; i < APF_SCORE_POINTS; i++) {
		put(w, "<tr>");
		num_cell(w, json_number_value(json_array_get(jtau, i)), 4);
		for (size_t s = 0; s < r->nsub; s++)
			num_cell(w,
				 json_number_value(json_array_get(
					 json_object_get(json_array_get(jsubs, s),
							 "profile"),
					 i)),
				 4);
		put(w, "</tr>");
	}
	put(w, "</tbody></table></div></div></div>");
}

static void summary_table(struct w *w, const apf_score_result *r,
			  const struct apf_report_opts *o, const json_t *jroot)
{
	json_t *jsubs = json_object_get(jroot, "submissions");
	size_t nc = r->nbase + r->nvar;
	put(w, "<div class=\"scroll\"><table class=\"data\" id=\"scores\">"
	       "<caption>Benchmark scores (the profile's integral over tau in "
	       "[1, 4], divided by 3) and the time-to-target per workload in "
	       "seconds, as scored: inf = target missed; inf* = met, but the "
	       "held-out rules took the credit; ! = a unit stopped early; - = "
	       "no logs</caption><thead><tr><th>rank</th><th>submission</th>"
	       "<th>score</th><th>verified</th>");
	for (size_t c = 0; c < nc; c++) {
		putf(w, "<th class=\"%s\"><a href=\"#w%zu\">",
		     c < r->nbase ? "base" : "var", c);
		esc(w, r->workloads[c]);
		put(w, "</a></th>");
	}
	put(w, "</tr></thead><tbody>");
	for (size_t s = 0; s < r->nsub; s++) {
		json_t *js = json_array_get(jsubs, s);
		enum vstate v = vstate_of(o, r->sub[s]);
		putf(w, "<tr class=\"s%zu v-%s\" data-sub=\"", s,
		     vstate_class(v));
		esc(w, r->sub[s]->name);
		putf(w, "\"><td class=\"n rank\">%lld</td><td><a href=\"#s%zu\">",
		     (long long)json_integer_value(json_object_get(js, "rank")),
		     s);
		esc(w, r->sub[s]->name);
		put(w, "</a></td>");
		double score = json_number_value(json_object_get(js, "score"));
		char ex[32];
		exact(ex, sizeof ex, score);
		putf(w, "<td class=\"n score\" data-value=\"%s\">%.4f</td><td>",
		     ex, score);
		badge(w, v);
		put(w, "</td>");
		for (size_t c = 0; c < nc; c++) {
			double fin = jtime(json_object_get(
				json_object_get(js, "times"), r->workloads[c]));
			double raw = jtime(json_object_get(
				json_object_get(js, "raw_times"), r->workloads[c]));
			const char *mark = isinf(fin) && isfinite(raw) ? "*"
					   : r->early[s * nc + c]      ? " !"
								       : NULL;
			putf(w, "<td class=\"n t\" data-col=\"");
			esc(w, r->workloads[c]);
			char shown[48];
			exact(ex, sizeof ex, fin);
			if (isnan(fin))
				snprintf(shown, sizeof shown, "-");
			else
				apf_score_format_seconds(shown, sizeof shown,
							 fin, 4, 0);
			putf(w, "\" data-value=\"%s\">%s%s</td>", ex, shown,
			     mark ? mark : "");
		}
		put(w, "</tr>");
	}
	for (size_t i = 0; r->logs && i < r->logs->nexcluded; i++) {
		const struct apf_score_excluded *x = &r->logs->excluded[i];
		put(w, "<tr class=\"excluded v-bad\" data-sub=\"");
		esc(w, x->name);
		put(w, "\"><td>-</td><td>");
		esc(w, x->name);
		put(w, "</td><td>-</td><td>");
		badge(w, V_FAILED);
		putf(w, "</td><td colspan=\"%zu\">not ranked: ", nc ? nc : 1);
		esc(w, x->reason);
		put(w, "</td></tr>");
	}
	put(w, "</tbody></table></div>");
}

static void verification_table(struct w *w, const apf_score_result *r,
			       const struct apf_report_opts *o)
{
	put(w, "<table class=\"data\" id=\"verification\"><caption>What was "
	       "verified: apf verify's checks over each apf run (");
	int napf = r->logs && r->logs->nexcluded;
	for (size_t s = 0; s < r->nsub; s++)
		napf |= r->sub[s]->apf_run;
	if (o->verdicts) {
		put(w, "run with --verify: entry, log chain and signature, "
		       "timing and CSVs against the log, checkpoint digests, "
		       "held-out draw; ");
		esc(w, r->audit[0] ? r->audit : "no re-evaluation or replay");
	} else
		put(w, napf ? "not asked: this page was made without "
			      "--verify, so every apf run on it is "
			      "UNVERIFIED, scored as found on disk"
			    : "AlgoPerf logs hold nothing signed");
	put(w, ")</caption><thead><tr><th>submission</th><th>status</th>"
	       "<th>sealed</th><th>units</th><th>evals</th><th>checkpoints"
	       "</th><th>checks</th></tr></thead><tbody>");
	size_t n = r->nsub + (r->logs ? r->logs->nexcluded : 0);
	for (size_t i = 0; i < n; i++) {
		const char *name, *reason = NULL;
		enum vstate v;
		if (i < r->nsub) {
			name = r->sub[i]->name;
			v = vstate_of(o, r->sub[i]);
		} else {
			const struct apf_score_excluded *x =
				&r->logs->excluded[i - r->nsub];
			name = x->name;
			reason = x->reason;
			v = V_FAILED;
		}
		json_t *j = verdict_of(o, name);
		putf(w, "<tr class=\"v-%s\" data-sub=\"", vstate_class(v));
		esc(w, name);
		put(w, "\"><td>");
		esc(w, name);
		put(w, "</td><td>");
		badge(w, v);
		if (!j) {
			putf(w, "</td><td colspan=\"5\">%s",
			     v == V_NONE ? "AlgoPerf log directory: nothing "
					   "signed to verify"
					 : "not verified");
			if (reason) {
				put(w, ": ");
				esc(w, reason);
			}
			put(w, "</td></tr>");
			continue;
		}
		putf(w, "</td><td>%s</td>",
		     json_is_true(json_object_get(j, "sealed")) ? "yes" : "NO");
		putf(w, "<td class=\"n\" data-key=\"units\">%lld</td>"
			"<td class=\"n\" data-key=\"evals\">%lld</td>"
			"<td class=\"n\" data-key=\"checkpoints\">%lld</td><td>",
		     (long long)json_integer_value(json_object_get(j, "units")),
		     (long long)json_integer_value(json_object_get(j, "evals")),
		     (long long)json_integer_value(
			     json_object_get(j, "checkpoints")));
		json_t *err = json_object_get(j, "error");
		if (json_is_string(err)) {
			put(w, "<p class=\"bad\">");
			esc(w, json_string_value(err));
			put(w, "</p>");
		}
		put(w, "<ol class=\"checks\">");
		size_t ci;
		json_t *c;
		json_array_foreach(json_object_get(j, "checks"), ci, c)
		{
			const char *out = json_string_value(
				json_object_get(c, "outcome"));
			putf(w, "<li class=\"o-");
			esc(w, out);
			put(w, "\"><b>");
			esc(w, json_string_value(json_object_get(c, "name")));
			put(w, "</b> ");
			esc(w, out);
			const char *d =
				json_string_value(json_object_get(c, "detail"));
			if (d && *d) {
				put(w, ": ");
				esc(w, d);
			}
			put(w, "</li>");
		}
		put(w, "</ol></td></tr>");
	}
	put(w, "</tbody></table>");
}

/* ---- per submission ------------------------------------------------------- */

static void kv(struct w *w, const char *k, const char *v)
{
	put(w, "<tr><th>");
	esc(w, k);
	put(w, "</th><td>");
	esc(w, v ? v : "-");
	put(w, "</td></tr>");
}

static const char *jstr(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void provenance(struct w *w, const struct apf_score_submission *s,
		       const struct apf_report_opts *o, const json_t *run_json)
{
	put(w, "<h4>Provenance</h4><table class=\"kv prov\">");
	apf_entry *e = NULL;
	char *path = apf_path_join(s->path, "entry.apf");
	if (!path) {
		w->rc = NOMEM;
		return;
	}
	int erc = apf_entry_inspect(&e, path, o->entry_keys);
	free(path);
	if (erc) {
		char why[512];
		apf_error_take(why, sizeof why);
		kv(w, "entry", why);
	} else {
		const apf_manifest *m = e->manifest;
		char line[512];
		kv(w, "submission", m->submission.name);
		for (size_t i = 0; i < m->submission.nauthors; i++)
			kv(w, "author", m->submission.authors[i]);
		if (!m->submission.nauthors)
			kv(w, "authors", "(none named)");
		kv(w, "ruleset", m->submission.ruleset);
		snprintf(line, sizeof line, "sha256:%s",
			 m->submission.tree_digest);
		kv(w, "submission tree", line);
		json_t *g = m->submission.git;
		if (json_is_true(json_object_get(g, "repository"))) {
			kv(w, "git commit", jstr(g, "commit"));
			kv(w, "git branch", jstr(g, "branch"));
			kv(w, "git remote", jstr(g, "remote"));
			kv(w, "git dirty",
			   json_is_true(json_object_get(g, "dirty"))
				   ? "DIRTY: the tree differs from the commit"
				   : "clean");
		} else
			kv(w, "git", "not in a git repository");
		snprintf(line, sizeof line, "%s, %s, %ld stud%s x %ld trial%s, "
			 "budget x%g, seed %u",
			 m->tuning.ruleset, m->tuning.rules, m->tuning.studies,
			 m->tuning.studies == 1 ? "y" : "ies", m->tuning.trials,
			 m->tuning.trials == 1 ? "" : "s",
			 m->tuning.budget_multiplier, m->tuning.seed);
		kv(w, "tuning plan", line);
		kv(w, "apf", m->apf_version);
		kv(w, "created", m->created);
		snprintf(line, sizeof line, "sha256:%s", e->file_digest);
		kv(w, "entry.apf", line);
		snprintf(line, sizeof line, "sha256:%s", e->manifest_digest);
		kv(w, "manifest", line);
		snprintf(line, sizeof line, "%s (%s)", e->signer,
			 e->signature_trusted ? "trusted here"
					      : "NOT trusted on this machine");
		kv(w, "entry signed by", line);
	}
	json_t *runner = json_object_get(run_json, "runner");
	json_t *v = verdict_of(o, s->name);
	if (v && json_is_string(json_object_get(v, "runner_signer")) &&
	    *jstr(v, "runner_signer"))
		kv(w, "log signed by", jstr(v, "runner_signer"));
	else {
		char line[160];
		snprintf(line, sizeof line, "%s (as run.json claims; not "
			 "verified)",
			 jstr(runner, "keyid") ? jstr(runner, "keyid") : "-");
		kv(w, "log signed by", line);
	}
	kv(w, "runner host", jstr(runner, "host"));
	kv(w, "sealed", json_is_true(json_object_get(run_json, "sealed"))
				? "yes"
				: json_is_false(json_object_get(run_json,
								"sealed"))
					  ? "NO (--unsealed)"
					  : "-");
	{
		char line[400];
		int clock = apf_clock_of_run(run_json);
		snprintf(line, sizeof line, "%s",
			 clock == APF_CLOCK_CPU
				 ? "cpu: the trial's CPU time over 2 cores "
				   "(apf run --clock cpu)"
			 : clock == APF_CLOCK_WALL
				 ? "wall: wall time, AlgoPerf's rule"
				 : "- (not one apf writes)");
		if (s->run && s->run->short_blocks)
			snprintf(line + strlen(line), sizeof line - strlen(line),
				 "; %llu of %llu step blocks short of cores%s",
				 (unsigned long long)s->run->short_blocks,
				 (unsigned long long)s->run->blocks,
				 clock == APF_CLOCK_CPU
					 ? " (not counted by this clock)"
					 : ": their times are the machine's as "
					   "much as the submission's");
		kv(w, "clock", line);
		int nx = apf_numerics_of_run(run_json);
		if (nx > 0)
			snprintf(line, sizeof line, "%d%s", nx,
				 json_object_get(run_json, "numerics")
					 ? ""
					 : " (run.json has none: a run made "
					   "before apf recorded it)");
		else
			snprintf(line, sizeof line, "- (not one apf writes)");
		kv(w, "numerics", line);
		double scale = apf_budget_scale_of_run(run_json);
		if (scale != 1.0) {
			snprintf(line, sizeof line,
				 "x%g: UNOFFICIAL, a quick look (apf run "
				 "--budget-scale), not a result",
				 scale);
			kv(w, "budget scale", line);
		}
	}
	kv(w, "run created", jstr(run_json, "created"));
	put(w, "</table>");
	apf_entry_free(e);
}

static void environment(struct w *w, const struct apf_score_submission *s,
			const json_t *run_json)
{
	json_t *env = json_object_get(run_json, "environment");
	put(w, "<h4>Environment (run.json)</h4><table class=\"kv env\">");
	apf_buf hw = {0};
	if (s->run && !apf_score_hardware_describe(&hw, &s->run->hw))
		kv(w, "machine", hw.data);
	apf_buf_free(&hw);
	kv(w, "os", jstr(env, "os"));
	kv(w, "kernel", jstr(env, "kernel"));
	kv(w, "compiler", jstr(env, "compiler"));
	kv(w, "libc", jstr(env, "libc"));
	json_t *cpu = json_object_get(env, "cpu");
	char line[1024];
	snprintf(line, sizeof line, "%s, %lld cores",
		 jstr(cpu, "model") ? jstr(cpu, "model") : "-",
		 (long long)json_integer_value(json_object_get(cpu, "cores")));
	kv(w, "cpu", line);
	apf_buf fl = {0};
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(cpu, "flags"), i, x)
	{
		if (json_is_string(x) &&
		    (apf_buf_puts(&fl, i ? " " : "") ||
		     apf_buf_puts(&fl, json_string_value(x))))
			w->rc = NOMEM;
	}
	kv(w, "cpu flags", fl.data ? fl.data : "");
	apf_buf_free(&fl);
	json_t *mem = json_object_get(env, "memory_bytes");
	if (json_is_integer(mem)) {
		snprintf(line, sizeof line, "%.1f GiB",
			 (double)json_integer_value(mem) / (1 << 30));
		kv(w, "memory", line);
	}
	json_t *blas = json_object_get(env, "blas");
	long long bthreads =
		(long long)json_integer_value(json_object_get(blas, "threads"));
	snprintf(line, sizeof line, "%s %s, kernel %s, %lld thread%s",
		 jstr(blas, "name") ? jstr(blas, "name") : "-",
		 jstr(blas, "version") ? jstr(blas, "version") : "",
		 jstr(blas, "core") ? jstr(blas, "core") : "-", bthreads,
		 bthreads == 1 ? "" : "s");
	kv(w, "BLAS", line);
	kv(w, "BLAS config", jstr(blas, "config"));
	json_t *gpus = json_object_get(env, "gpus");
	if (json_array_size(gpus) == 0)
		kv(w, "GPUs", "none");
	json_array_foreach(gpus, i, x)
	{
		json_t *gm = json_object_get(x, "memory_bytes");
		const char *cap = jstr(x, "compute_capability");
		snprintf(line, sizeof line, "%s, %.1f GiB, compute capability %s",
			 jstr(x, "name") ? jstr(x, "name") : "-",
			 (double)json_integer_value(gm) / (1 << 30),
			 cap ? cap : "not known");
		kv(w, "GPU", line);
	}
	/* The libraries apf found, named (the record is validated: each is a
	 * string or null); "not installed" for a null. */
	json_t *cuda = json_object_get(env, "cuda");
	if (cuda && !json_is_null(cuda)) {
		static const char *const lib[][2] = {{"driver", "driver"},
						     {"runtime", "runtime"},
						     {"cublas", "cuBLAS"},
						     {"cudnn", "cuDNN"}};
		size_t n = 0;
		line[0] = 0;
		for (size_t l = 0; l < sizeof lib / sizeof lib[0]; l++) {
			const char *v = jstr(cuda, lib[l][0]);
			int k = snprintf(line + n, sizeof line - n, "%s%s %s",
					 l ? ", " : "", lib[l][1],
					 v ? v : "not installed");
			if (k < 0 || (size_t)k >= sizeof line - n)
				break;
			n += (size_t)k;
		}
		kv(w, "CUDA", line);
	}
	kv(w, "container image", jstr(env, "image_digest"));
	json_t *apf = json_object_get(env, "apf");
	snprintf(line, sizeof line, "%s (build %s)",
		 jstr(apf, "version") ? jstr(apf, "version") : "-",
		 jstr(apf, "build") ? jstr(apf, "build") : "-");
	kv(w, "apf", line);
	put(w, "</table>");
}

/* The hyperparameters of every trial of s, per workload: hparams.json
 * beside each eval_measurements.csv. Each row links to its curve. */
static void hp_value(struct w *w, const json_t *v);

static void hparams(struct w *w, size_t si, const struct col *cols,
		    size_t nc)
{
	put(w, "<h4>Trials and hyperparameters</h4>");
	for (size_t c = 0; c < nc && !w->rc; c++) {
		const struct col *k = &cols[c];
		size_t first = k->nt, last = 0;
		for (size_t i = 0; i < k->nt; i++)
			if (k->t[i].sub == si) {
				if (first == k->nt)
					first = i;
				last = i;
			}
		if (first == k->nt)
			continue;
		/* Read every trial's hparams.json; the columns are the
		 * union of their keys, in the first file's order. */
		size_t n = last - first + 1;
		json_t *keys = json_array();
		if (!keys) {
			w->rc = NOMEM;
			return;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *const h = k->t[first + i].hp;
			if (!h)
				continue;
			const char *key;
			json_t *val;
			json_object_foreach(h, key, val)
			{
				int seen = 0;
				size_t j;
				json_t *kk;
				json_array_foreach(keys, j, kk) if (!strcmp(
					json_string_value(kk), key)) seen = 1;
				if (!seen)
					json_array_append_new(keys,
							      json_string(key));
			}
		}
		putf(w, "<div class=\"scroll\"><table class=\"data hp\">"
			"<caption><a href=\"#w%zu\">",
		     k->index);
		esc(w, k->name);
		put(w, "</a>: every trial (click a row to show its curve)"
		       "</caption><thead><tr><th>study</th><th>trial</th>"
		       "<th>best</th><th>evals</th><th>time-to-target (s)</th>");
		size_t j;
		json_t *kk;
		json_array_foreach(keys, j, kk)
		{
			put(w, "<th>");
			esc(w, json_string_value(kk));
			put(w, "</th>");
		}
		put(w, "</tr></thead><tbody>");
		for (size_t i = 0; i < n; i++) {
			const struct tv *v = &k->t[first + i];
			char key[64];
			trial_key(key, sizeof key, v);
			/* Lean cells (CSS aligns the first five): a
			 * submission can have thousands of these rows. */
			putf(w, "<tr id=\"h%zu_%s\"%s><td>%d</td><td>%d</td>"
				"<td>%s</td><td>%ld</td>",
			     k->index, key,
			     v->best ? " class=\"best\"" : "", v->study->number,
			     v->trial->number, v->best ? "best" : "",
			     v->trial->evals);
			char shown[48];
			apf_score_format_seconds(shown, sizeof shown,
						 v->trial->time, 4, 0);
			putf(w, "<td>%s</td>", shown);
			json_array_foreach(keys, j, kk)
			{
				json_t *val = v->hp ? json_object_get(
						v->hp, json_string_value(kk))
						    : NULL;
				hp_value(w, val);
			}
			put(w, "</tr>");
			if (v->trial->refused) {
				putf(w, "<tr class=\"refused\"><td colspan="
					"\"%zu\">refused: ",
				     5 + json_array_size(keys));
				esc(w, v->trial->refused);
				put(w, "</td></tr>");
			}
		}
		if (json_array_size(keys) == 0)
			putf(w, "<tr><td colspan=\"5\">no hparams.json in these "
				"logs</td></tr>");
		put(w, "</tbody></table></div>");
		json_decref(keys);
	}
}

/* A hyperparameter's cell: a real in 6 significant digits, as apf plan
 * prints it, with the fewest digits that read back to the same double in
 * data-value (0.06733926164, not 0.067339261639999995: the value the trial
 * was given); anything else as compact JSON. */
static void hp_value(struct w *w, const json_t *v)
{
	if (!v) {
		put(w, "<td>-</td>");
		return;
	}
	if (json_is_real(v) && isfinite(json_real_value(v))) {
		double x = json_real_value(v);
		char b[40];
		/* %g drops trailing zeros, and a double whose shortest form
		 * has at most 15 digits rounds to it at 15. */
		for (int p = 15; p <= 17; p++) {
			snprintf(b, sizeof b, "%.*g", p, x);
			if (strtod(b, NULL) == x)
				break;
		}
		putf(w, "<td class=\"n\" data-value=\"%s\">%.6g", b, x);
		/* Still a real to the reader: 0.0, not 0. */
		char shown[40];
		snprintf(shown, sizeof shown, "%.6g", x);
		put(w, shown[strspn(shown, "0123456789-")] ? "</td>" : ".0</td>");
		return;
	}
	char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	put(w, "<td>");
	esc(w, d ? d : "-");
	put(w, "</td>");
	free(d);
}

static void submission_section(struct w *w, size_t si,
			       const apf_score_result *r,
			       const struct apf_report_opts *o,
			       const struct col *cols, size_t nc,
			       const json_t *run_json)
{
	const struct apf_score_submission *s = r->sub[si];
	putf(w, "<section class=\"subm\" id=\"s%zu\"><h3>", si);
	esc(w, s->name);
	put(w, " ");
	badge(w, vstate_of(o, s));
	put(w, "</h3><table class=\"kv\">");
	kv(w, "path", s->path);
	kv(w, "kind", s->apf_run ? "apf run" : "AlgoPerf log directory");
	if (s->label)
		kv(w, "label", s->label);
	put(w, "</table>");
	if (s->apf_run) {
		provenance(w, s, o, run_json);
		environment(w, s, run_json);
	} else
		put(w, "<p class=\"na\">AlgoPerf logs carry no manifest, "
		       "signature or environment record: nothing here says "
		       "what code ran, or where.</p>");
	hparams(w, si, cols, nc);
	put(w, "</section>");
}

/* ---- the page ------------------------------------------------------------- */

static const char css[] =
	"body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:"
	"1500px;padding:0 16px;color:#222}"
	"h1{font-size:22px}h2{border-bottom:2px solid #444;margin-top:32px}"
	"h3{margin:20px 0 4px}h3 small{font-weight:normal;color:#666}"
	"p.sub{margin:0 0 6px;color:#444}"
	".row{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}"
	".plots{flex:0 1 660px;min-width:320px}.tables{flex:1 1 420px;"
	"min-width:320px}"
	"svg.plot{width:100%;height:auto;background:#fff}"
	".fr{fill:none;stroke:#888}.gr{stroke:#eee}"
	".tx{font-size:11px;text-anchor:middle;fill:#333}"
	".ty{font-size:11px;text-anchor:end;fill:#333}"
	".target{stroke:#000;stroke-dasharray:6 3;stroke-width:1.2}"
	".tl{font-size:11px;text-anchor:end}"
	".budget{stroke:#b00;stroke-dasharray:2 3;stroke-width:1.2}"
	".bl{font-size:11px;text-anchor:end;fill:#b00}"
	".unv{font-size:12px;font-weight:bold;fill:#b00}"
	".c{fill:none;stroke-width:.8;stroke-opacity:.35;stroke-linejoin:"
	"round}"
	".c.b{stroke-width:2;stroke-opacity:1}.c.hl{stroke-width:4;"
	"stroke-opacity:1}"
	".d1{stroke-dasharray:7 3}.d2{stroke-dasharray:2 2}"
	".d3{stroke-dasharray:9 3 2 3}.d4{stroke-dasharray:4 4}"
	".m{stroke:#000;stroke-width:.8}.m.x{fill:none;stroke-width:2}"
	".ink{stroke:#333}.m.ink{fill:#fff}"
	"svg.sw{width:40px;height:10px;vertical-align:middle}"
	"ul.legend{list-style:none;padding:0;margin:4px 0;columns:2;"
	"font-size:12px}ul.legend li.studies{column-span:all}"
	"table{border-collapse:collapse;margin:6px 0}"
	"table.data td,table.data th{border:1px solid #ccc;padding:2px 6px;"
	"font-size:12px}table.data th{background:#f3f3f3}"
	"caption{text-align:left;font-size:12px;color:#555;caption-side:top}"
	"td.n{text-align:right;font-variant-numeric:tabular-nums}"
	"table.kv th{text-align:left;padding-right:12px;font-weight:600;"
	"vertical-align:top}table.kv td{font-family:monospace;word-break:"
	"break-all}"
	".scroll{overflow:auto;max-height:420px}"
	".badge{font-size:11px;padding:1px 5px;border-radius:3px;"
	"white-space:nowrap}"
	".badge.ok{background:#d8f0d8;color:#060}.badge.warn{background:"
	"#ffe2b3;color:#850}.badge.bad{background:#f8d0d0;color:#900}"
	".badge.na{background:#eee;color:#555}"
	"tr.v-warn td,tr.v-bad td{background:#fff6f0}"
	"p.bad,.o-failed{color:#900}.na{color:#666}"
	"ol.checks{margin:0;padding-left:18px}"
	"table.hp td:nth-child(-n+5){text-align:right}"
	"tr.best td{font-weight:600}tr.refused td{color:#900}"
	"tr.link{cursor:pointer}tr.hl td{background:#ffffb0}"
	"#toggles{position:sticky;top:0;background:#fafafa;border:1px solid "
	"#ddd;padding:6px;z-index:1}#toggles label{margin-right:10px}"
	"nav a{margin-right:12px}";

/* Toggles: which metric and axis the figures show, which submissions are
 * drawn; a trial's row and its curves highlight each other. */
static const char js[] =
	"(function(){"
	"function q(s,e){return Array.prototype.slice.call((e||document)."
	"querySelectorAll(s));}"
	"function sel(n){var i=document.querySelector('input[name='+n+']:"
	"checked');return i?i.value:'';}"
	"function show(){var m=sel('metric'),x=sel('xaxis');q('.view')."
	"forEach(function(v){v.hidden=!(v.getAttribute('data-m')===m&&v."
	"getAttribute('data-x')===x);});}"
	"q('input[name=metric],input[name=xaxis]').forEach(function(i){i."
	"addEventListener('change',show);});"
	"q('input.subt').forEach(function(i){i.addEventListener('change',"
	"function(){document.body.classList.toggle('hide'+i.getAttribute("
	"'data-s'),!i.checked);});});"
	"function hl(f,k){q('.hl').forEach(function(e){e.classList.remove("
	"'hl');});var fig=document.getElementById(f);if(!fig)return;q('.'+k,"
	"fig).forEach(function(e){e.classList.add('hl');});var r=document."
	"getElementById('h'+f.slice(1)+'_'+k);if(r)r.classList.add('hl');}"
	"function first(){q('input[name=metric]')[0].checked=true;q('input"
	"[name=xaxis]')[0].checked=true;show();}"
	"q('tr[id^=h]').forEach(function(r){var m=/^h(\\d+)_(k.*)$/.exec(r.id);"
	"if(!m)return;r.classList.add('link');r.addEventListener('click',"
	"function(){first();hl('w'+m[1],m[2]);document.getElementById('w'+"
	"m[1]).scrollIntoView();});});"
	"q('section.fig').forEach(function(fig){fig.addEventListener('click',"
	"function(ev){var t=ev.target;if(!t.classList||!t.classList."
	"contains('c'))return;var k=null;t.classList.forEach(function(c){if("
	"c.charAt(0)==='k')k=c;});if(!k)return;hl(fig.id,k);var r=document."
	"getElementById('h'+fig.id.slice(1)+'_'+k);if(r)r.scrollIntoView({"
	"block:'center'});});});"
	"show();})();";

static void head(struct w *w, const apf_score_result *r,
		 const struct apf_report_opts *o)
{
	put(w, "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
	       "<meta name=\"viewport\" content=\"width=device-width,"
	       "initial-scale=1\"><meta http-equiv=\"Content-Security-Policy\" "
	       "content=\"default-src 'none'; style-src 'unsafe-inline'; "
	       "script-src 'unsafe-inline'; img-src data:\"><title>");
	esc(w, o->title ? o->title : "apf report");
	put(w, "</title><style>");
	put(w, css);
	for (size_t s = 0; s < r->nsub; s++) {
		char c[8];
		apf_score_colour(c, s);
		putf(w, ".s%zu.c{stroke:%s}.s%zu.m{fill:%s}.hide%zu .s%zu.c,"
			".hide%zu .s%zu.m{display:none}",
		     s, c, s, c, s, s, s, s);
	}
	put(w, "</style></head><body>");
}

static void header(struct w *w, const apf_score_result *r,
		   const struct apf_report_opts *o)
{
	put(w, "<header><h1>");
	esc(w, o->title ? o->title : "apf report");
	put(w, "</h1><table class=\"kv\" id=\"about\">");
	apf_buf in = {0};
	for (size_t i = 0; i < o->ninputs; i++)
		if (apf_buf_puts(&in, i ? "  " : "") ||
		    apf_buf_puts(&in, o->inputs[i]))
			w->rc = NOMEM;
	kv(w, "inputs", in.data ? in.data : "");
	apf_buf_free(&in);
	char line[512];
	kv(w, "rules", r->rules->summary);
	kv(w, "targets", r->targets_source);
	kv(w, "held-out", r->heldout_source ? r->heldout_source
					    : "no held-out rules applied");
	if (r->heldout_source && r->heldout_binding[0])
		kv(w, "held-out seed", r->heldout_binding);
	size_t napf = 0, nver = 0, nfail = r->logs ? r->logs->nexcluded : 0;
	for (size_t s = 0; s < r->nsub; s++) {
		napf += r->sub[s]->apf_run;
		nver += r->sub[s]->apf_run &&
			r->sub[s]->verified == APF_SCORE_VERIFIED;
	}
	if (napf + nfail == 0)
		snprintf(line, sizeof line, "AlgoPerf logs only: nothing "
			 "signed, nothing to verify");
	else if (!o->verdicts)
		snprintf(line, sizeof line, "NONE: %zu apf run%s scored "
			 "unverified, as found on disk (make the page with "
			 "--verify)",
			 napf, napf == 1 ? "" : "s");
	else
		snprintf(line, sizeof line, "%zu of %zu apf runs passed apf "
			 "verify's checks; %zu failed and %s not ranked",
			 nver, napf + nfail, nfail, nfail == 1 ? "is" : "are");
	kv(w, "verification", line);
	snprintf(line, sizeof line, "%zu", r->nwarnings);
	kv(w, "warnings", line);
	put(w, "</table><nav><a href=\"#summary\">summary</a><a href="
	       "\"#workloads\">workloads</a><a href=\"#submissions\">"
	       "submissions</a><a href=\"#warnings\">warnings</a></nav>"
	       "</header>");
}

static void toggles(struct w *w, const apf_score_result *r)
{
	put(w, "<div id=\"toggles\"><b>metric</b> "
	       "<label><input type=\"radio\" name=\"metric\" value="
	       "\"validation\" checked> validation</label>"
	       "<label><input type=\"radio\" name=\"metric\" value=\"train\">"
	       " train</label><label><input type=\"radio\" name=\"metric\" "
	       "value=\"test\"> test</label> <b>x axis</b> "
	       "<label><input type=\"radio\" name=\"xaxis\" value=\"time\" "
	       "checked> submission time</label><label><input type=\"radio\" "
	       "name=\"xaxis\" value=\"step\"> global step</label> "
	       "<b>show</b> ");
	for (size_t s = 0; s < r->nsub; s++) {
		putf(w, "<label><input type=\"checkbox\" class=\"subt\" "
			"data-s=\"%zu\" checked> ",
		     s);
		esc(w, r->sub[s]->name);
		put(w, "</label>");
	}
	put(w, "</div>");
}

static void data_block(struct w *w, const char *id, const char *json)
{
	putf(w, "<script type=\"application/json\" id=\"%s\">", id);
	if (!w->rc)
		w->rc = apf_report_json_script(w->b, json);
	put(w, "</script>");
}

/* Each trial's scored numbers, for readers of the page's data: one row
 * per trial, the columns named once. */
static char *trials_json(const struct col *cols, size_t nc,
			 const apf_score_result *r)
{
	/* The names are directory names or run.json's: made valid UTF-8
	 * (apf_buf_utf8), which jansson requires, once each. */
	apf_buf *sub = apf_calloc(r->nsub, sizeof *sub);
	apf_buf *wl = apf_calloc(nc, sizeof *wl);
	int bad = !sub || !wl;
	for (size_t s = 0; !bad && s < r->nsub; s++)
		bad = apf_buf_utf8(&sub[s], r->sub[s]->name);
	for (size_t c = 0; !bad && c < nc; c++)
		bad = apf_buf_utf8(&wl[c], cols[c].name);
	json_t *rows = bad ? NULL : json_array();
	json_t *o = json_pack("{s:[s,s,s,s,s,s,s,s], s:o}", "columns",
			      "submission", "workload", "study", "trial",
			      "best", "evals", "hit", "time", "rows", rows);
	for (size_t c = 0; o && c < nc; c++)
		for (size_t i = 0; o && i < cols[c].nt; i++) {
			const struct tv *v = &cols[c].t[i];
			double t = v->trial->time;
			json_t *row = json_pack(
				"[s, s, i, i, b, I, I, o]", sub[v->sub].data,
				wl[c].data, v->study->number, v->trial->number,
				v->best, (json_int_t)v->trial->evals,
				(json_int_t)v->trial->hit,
				isfinite(t) ? json_real(t)
					    : json_string(isnan(t) ? "nan"
								   : "inf"));
			if (!row || json_array_append_new(rows, row)) {
				json_decref(o);
				o = NULL;
			}
		}
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	for (size_t s = 0; sub && s < r->nsub; s++)
		apf_buf_free(&sub[s]);
	for (size_t c = 0; wl && c < nc; c++)
		apf_buf_free(&wl[c]);
	free(sub);
	free(wl);
	return text;
}

static int render(apf_buf *out, const apf_score_result *r,
		  const struct apf_report_opts *o, json_t *jroot,
		  const char *score_json, const struct col *cols, size_t nc,
		  json_t *const *run_json, double tol);

int apf_report_html(apf_buf *out, const apf_score_result *r,
		    apf_score_targets *targets,
		    const struct apf_report_opts *o)
{
	apf_buf data = {0};
	int rc = apf_score_format_json(&data, r);
	if (rc)
		return rc;
	json_error_t je;
	json_t *jroot = json_loadb(data.data, data.len, 0, &je);
	if (!jroot) {
		apf_buf_free(&data);
		return apf_error(APF_EINTERNAL, "report",
				 "the score's JSON does not parse: %s", je.text);
	}
	json_t **run_json = apf_calloc(r->nsub ? r->nsub : 1, sizeof *run_json);
	if (!run_json) {
		json_decref(jroot);
		apf_buf_free(&data);
		return NOMEM;
	}
	for (size_t s = 0; s < r->nsub; s++)
		if (r->sub[s]->apf_run)
			run_json[s] = read_json_beneath(
				r->sub[s]->path, "run.json",
				APF_MAX_RUN_JSON_BYTES);
	struct col *cols = NULL;
	size_t nc = 0;
	rc = cols_read(&cols, &nc, r, targets, run_json);
	/* Over max_bytes, the thin curves are drawn coarser until it fits
	 * (or they are at 16 pixels): 1, 4, 16, as each pass costs as much
	 * as the next. */
	size_t start = out->len;
	for (double tol = o->tolerance > 0 ? o->tolerance : 1; !rc;
	     tol *= 4) {
		out->len = start;
		if (out->data)
			out->data[start] = 0;
		rc = render(out, r, o, jroot, data.data, cols, nc, run_json,
			    tol);
		if (rc || !o->max_bytes || out->len - start <= o->max_bytes ||
		    tol >= 16)
			break;
	}
	cols_free(cols, nc);
	for (size_t s = 0; s < r->nsub; s++)
		json_decref(run_json[s]);
	free(run_json);
	json_decref(jroot);
	apf_buf_free(&data);
	return rc;
}

static int render(apf_buf *out, const apf_score_result *r,
		  const struct apf_report_opts *o, json_t *jroot,
		  const char *score_json, const struct col *cols, size_t nc,
		  json_t *const *run_json, double tol)
{
	json_t *jsubs = json_object_get(jroot, "submissions");
	struct w w = {out, 0};
	head(&w, r, o);
	header(&w, r, o);

	put(&w, "<main><section id=\"summary\"><h2>Summary</h2>");
	summary_table(&w, r, o, jroot);
	put(&w, "<h3>Performance profiles</h3><p class=\"sub\">rho(tau): the "
		"share of base workloads on which a submission's time is "
		"within tau times the best submission's; the score is its "
		"integral over [1, 4] divided by 3.</p>");
	profile_plot(&w, r, o, jroot);
	put(&w, "<h3>Verification</h3>");
	verification_table(&w, r, o);
	put(&w, "</section>");

	put(&w, "<section id=\"workloads\"><h2>Workloads</h2><p class=\"sub\">"
		"Every trial of every submission: the target metric against "
		"submission time (or global step). Markers: each study's "
		"time-to-target, shaped by study.</p>");
	toggles(&w, r);
	for (size_t c = 0; c < r->nbase; c++) {
		workload_figure(&w, &cols[c], r, o, jsubs, tol);
		for (size_t v = r->nbase; v < nc; v++)
			if (!strcmp(cols[v].base, cols[c].name))
				workload_figure(&w, &cols[v], r, o, jsubs, tol);
	}
	/* A variant whose base has no column of its own. */
	for (size_t v = r->nbase; v < nc; v++) {
		int placed = 0;
		for (size_t c = 0; c < r->nbase && !placed; c++)
			placed = !strcmp(cols[v].base, cols[c].name);
		if (!placed)
			workload_figure(&w, &cols[v], r, o, jsubs, tol);
	}
	put(&w, "</section>");

	put(&w, "<section id=\"submissions\"><h2>Submissions</h2>");
	for (size_t s = 0; s < r->nsub; s++)
		submission_section(&w, s, r, o, cols, nc, run_json[s]);
	for (size_t i = 0; r->logs && i < r->logs->nexcluded; i++) {
		const struct apf_score_excluded *x = &r->logs->excluded[i];
		put(&w, "<section class=\"subm excluded\"><h3>");
		esc(&w, x->name);
		put(&w, " ");
		badge(&w, V_FAILED);
		put(&w, "</h3><table class=\"kv\">");
		kv(&w, "path", x->path);
		kv(&w, "not ranked", x->reason);
		put(&w, "</table></section>");
	}
	put(&w, "</section>");

	put(&w, "<section id=\"warnings\"><h2>Warnings</h2>");
	if (r->nwarnings == 0)
		put(&w, "<p>none</p>");
	else {
		put(&w, "<ul>");
		for (size_t i = 0; i < r->nwarnings; i++) {
			put(&w, "<li>");
			esc(&w, r->warnings[i]);
			put(&w, "</li>");
		}
		put(&w, "</ul>");
	}
	put(&w, "</section></main>");

	data_block(&w, "apf-data", score_json);
	char *vj = o->verdicts ? json_dumps(o->verdicts, JSON_COMPACT)
			       : strdup("{}");
	char *tj = trials_json(cols, nc, r);
	if (!vj || !tj)
		w.rc = w.rc ? w.rc : NOMEM;
	else {
		data_block(&w, "apf-verify", vj);
		data_block(&w, "apf-trials", tj);
	}
	free(vj);
	free(tj);
	put(&w, "<script>");
	put(&w, js);
	put(&w, "</script></body></html>\n");
	return w.rc;
}
