/*
 * score.c: the scoring steps of score.h, and apf_score_compute, which runs
 * them over the logs.
 *
 * Floating point follows AlgoPerf's numpy code where it can matter at the
 * fourth decimal: tau is numpy.linspace(1, 4, 100) bit for bit (i * step +
 * 1, the last point exactly 4), a ratio that comes out NaN keeps the time it
 * came from (pandas' DataFrame.update skips NaN), and the median of an even
 * count is the mean of the two middle values.
 */
#include "score/score.h"
#include "rundir/rundir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long apf_score_first_hit(const double *v, size_t n, int direction,
			 double target)
{
	for (size_t i = 0; i < n; i++) {
		/* NaN compares false both ways, so it never meets a target. */
		if (direction > 0 ? v[i] >= target : v[i] <= target)
			return (long)i;
	}
	return -1;
}

int apf_score_study_best(const struct apf_score_trial *trials, size_t n,
			 enum apf_score_best best, double *time)
{
	int chosen = -1;
	for (size_t i = 0; i < n; i++) {
		const struct apf_score_trial *t = &trials[i];
		if (t->hit < 0)
			continue;
		if (chosen < 0) {
			chosen = (int)i;
			continue;
		}
		const struct apf_score_trial *c = &trials[chosen];
		/* Trials tied at the first eval go to the faster one, so the
		 * choice does not depend on a directory listing's order.
		 * Strict comparisons: a full tie keeps the earlier
		 * (lower-numbered) trial. */
		int better = best == APF_SCORE_BEST_FIRST_EVAL
				     ? t->hit < c->hit ||
					       (t->hit == c->hit &&
						t->time < c->time)
				     : t->time < c->time;
		if (better)
			chosen = (int)i;
	}
	*time = chosen < 0 ? INFINITY : trials[chosen].time;
	return chosen;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double apf_score_median(const double *v, size_t n)
{
	if (n == 0)
		return NAN;
	double *s = malloc(n * sizeof *s);
	if (!s)
		return NAN;
	for (size_t i = 0; i < n; i++) {
		if (isnan(v[i])) {
			free(s);
			return NAN;
		}
		s[i] = v[i];
	}
	qsort(s, n, sizeof *s, cmp_double);
	double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
	free(s);
	return m;
}

void apf_score_heldout_rules(double *t, size_t nsub, size_t ncols,
			     const size_t *var_col, const size_t *base_col,
			     size_t nvar)
{
	/* 1. A variant only counts where its base met its target. */
	for (size_t v = 0; v < nvar; v++)
		for (size_t s = 0; s < nsub; s++) {
			double b = t[s * ncols + base_col[v]];
			if (isinf(b) || isnan(b))
				t[s * ncols + var_col[v]] = INFINITY;
		}
	/* 2. Over 4x the best of its column is no better than missing. */
	for (size_t c = 0; c < ncols; c++) {
		double best = NAN;
		for (size_t s = 0; s < nsub; s++) {
			double x = t[s * ncols + c];
			if (!isnan(x) && (isnan(best) || x < best))
				best = x;
		}
		for (size_t s = 0; s < nsub; s++)
			if (t[s * ncols + c] > APF_SCORE_TAU_MAX * best)
				t[s * ncols + c] = INFINITY;
	}
	/* 3. A base only counts where its variant met its target. */
	for (size_t v = 0; v < nvar; v++)
		for (size_t s = 0; s < nsub; s++) {
			double x = t[s * ncols + var_col[v]];
			if (isinf(x) || isnan(x))
				t[s * ncols + base_col[v]] = INFINITY;
		}
}

void apf_score_taus(double tau[APF_SCORE_POINTS])
{
	const double step = (APF_SCORE_TAU_MAX - APF_SCORE_TAU_MIN) /
			    (APF_SCORE_POINTS - 1);
	for (int i = 0; i < APF_SCORE_POINTS; i++) {
		/* volatile: no fused multiply-add, as numpy does two steps. */
		volatile double p = (double)i * step;
		tau[i] = p + APF_SCORE_TAU_MIN;
	}
	tau[APF_SCORE_POINTS - 1] = APF_SCORE_TAU_MAX;
}

void apf_score_profile(const double *t, size_t nsub, size_t nbase,
		       double *ratio, double *rho)
{
	double tau[APF_SCORE_POINTS];
	apf_score_taus(tau);
	for (size_t c = 0; c < nbase; c++) {
		double best = NAN;
		for (size_t s = 0; s < nsub; s++) {
			double x = t[s * nbase + c];
			if (!isnan(x) && (isnan(best) || x < best))
				best = x;
		}
		for (size_t s = 0; s < nsub; s++) {
			double x = t[s * nbase + c], r = x / best;
			ratio[s * nbase + c] = isnan(r) ? x : r;
		}
	}
	for (size_t s = 0; s < nsub; s++)
		for (int i = 0; i < APF_SCORE_POINTS; i++) {
			size_t k = 0;
			for (size_t c = 0; c < nbase; c++)
				k += ratio[s * nbase + c] <= tau[i];
			rho[s * APF_SCORE_POINTS + i] =
				nbase ? (double)k / (double)nbase : 0;
		}
}

double apf_score_integrate(const double *y, const double *x, size_t n)
{
	if (n < 2 || x[n - 1] == x[0])
		return 0;
	double sum = 0;
	for (size_t i = 0; i + 1 < n; i++)
		sum += (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;
	return sum / (x[n - 1] - x[0]);
}

/* ---- compute -------------------------------------------------------------- */

void apf_score_result_free(apf_score_result *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nbase + r->nvar; i++)
		free(r->workloads ? r->workloads[i] : NULL);
	for (size_t i = 0; i < r->nvar; i++)
		free(r->variant_base ? r->variant_base[i] : NULL);
	for (size_t i = 0; i < r->nwarnings; i++)
		free(r->warnings[i]);
	free(r->warnings);
	free(r->workloads);
	free(r->variant_base);
	free(r->sub);
	free(r->raw);
	free(r->final);
	free(r->ratio);
	free(r->rho);
	free(r->score);
	free(r->early);
	free(r->implausible);
	for (size_t i = 0; i < r->nflags; i++) {
		free(r->flags[i].unit);
		free(r->flags[i].workload);
		free(r->flags[i].reference);
		free(r->flags[i].reference_run);
		free(r->flags[i].metric);
		free(r->flags[i].text);
	}
	free(r->flags);
	for (size_t i = 0; i < r->nplausibility_notes; i++)
		free(r->plausibility_notes[i]);
	free(r->plausibility_notes);
	free(r->references_dir);
	free(r->targets_source);
	free(r->heldout_source);
	free(r);
}

static int vwarn(apf_score_result *r, const char *fmt, va_list ap)
{
	va_list aq;
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	char *msg = n < 0 ? NULL : malloc((size_t)n + 1);
	char **nw = msg ? realloc(r->warnings, (r->nwarnings + 1) * sizeof *nw)
			: NULL;
	if (!nw) {
		free(msg);
		return apf_error(APF_ENOMEM, "score", "out of memory");
	}
	r->warnings = nw;
	vsnprintf(msg, (size_t)n + 1, fmt, ap);
	r->warnings[r->nwarnings++] = msg;
	return 0;
}

static int warn(apf_score_result *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int warn(apf_score_result *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vwarn(r, fmt, ap);
	va_end(ap);
	return rc;
}

/* What --strict refuses (APF_EINPUT) and the default only warns about. */
static int problem(apf_score_result *r, unsigned flags, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int problem(apf_score_result *r, unsigned flags, const char *fmt, ...)
{
	char why[1024];
	va_list ap;
	va_start(ap, fmt);
	int rc = 0;
	if (flags & APF_SCORE_STRICT) {
		vsnprintf(why, sizeof why, fmt, ap);
		rc = apf_error(APF_EINPUT, "score", "%s", why);
	} else {
		rc = vwarn(r, fmt, ap);
	}
	va_end(ap);
	return rc;
}

/* A growable list of workload names, for the columns. */
struct names {
	char **v;
	size_t n;
};

static long names_find(const struct names *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], s))
			return (long)i;
	return -1;
}

static int names_add(struct names *l, const char *s)
{
	if (names_find(l, s) >= 0)
		return 0;
	char **nv = realloc(l->v, (l->n + 1) * sizeof *nv);
	if (!nv)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	l->v = nv;
	if (!(l->v[l->n] = apf_strdup(s)))
		return apf_error(APF_ENOMEM, "score", "out of memory");
	l->n++;
	return 0;
}

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads every trial of a workload and takes the per-study bests and the
 * median over studies. A refused trial is a problem (its hit is -1
 * already, so it never counts as met). */
static int time_workload(apf_score_result *r, struct apf_score_workload *w,
			 const struct apf_score_target *target,
			 const apf_score_rules *rules, unsigned flags)
{
	double *per_study = apf_calloc(w->nstudies, sizeof *per_study);
	if (!per_study)
		return apf_error(APF_ENOMEM, w->name, "out of memory");
	for (size_t i = 0; i < w->nstudies; i++) {
		struct apf_score_study *s = &w->studies[i];
		for (size_t j = 0; j < s->ntrials; j++) {
			struct apf_score_trial *t = &s->trials[j];
			int rc = apf_score_read_trial(t, target);
			if (!rc && t->refused)
				rc = problem(r, flags,
					     flags & APF_SCORE_STRICT
						     ? "%s"
						     : "%s; the trial counts "
						       "as never meeting its "
						       "target",
					     t->refused);
			if (rc) {
				free(per_study);
				return rc;
			}
		}
		s->best = apf_score_study_best(s->trials, s->ntrials,
					       rules->best, &s->time);
		per_study[i] = s->time;
	}
	w->time = apf_score_median(per_study, w->nstudies);
	w->read = 1;
	free(per_study);
	return 0;
}

static struct apf_score_workload *
sub_workload(const struct apf_score_submission *s, const char *name)
{
	for (size_t i = 0; i < s->nw; i++)
		if (!strcmp(s->w[i].name, name))
			return &s->w[i];
	return NULL;
}

/* Appends a variant and its base, keeping the two lists aligned. */
static int pair_add(struct names *var, struct names *var_base,
		    const char *v, const char *b)
{
	if (names_find(var, v) >= 0)
		return 0;
	char **nv = realloc(var->v, (var->n + 1) * sizeof *nv);
	if (!nv)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	var->v = nv;
	char **nb = realloc(var_base->v, (var_base->n + 1) * sizeof *nb);
	if (!nb)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	var_base->v = nb;
	var->v[var->n] = apf_strdup(v);
	var_base->v[var_base->n] = apf_strdup(b);
	if (!var->v[var->n] || !var_base->v[var_base->n]) {
		free(var->v[var->n]);
		free(var_base->v[var_base->n]);
		return apf_error(APF_ENOMEM, "score", "out of memory");
	}
	var->n++;
	var_base->n++;
	return 0;
}

/* Which workloads are base workloads, and which held-out variants count. */
static int choose_columns(apf_score_result *r, apf_score_logs *logs,
			  apf_score_targets *targets,
			  const apf_score_heldout *heldout,
			  const apf_score_rules *rules, struct names *base,
			  struct names *var, struct names *var_base)
{
	size_t nb, nh;
	const char *const *tb = apf_score_targets_base(targets, &nb);
	const char *const *th = apf_score_targets_heldout(targets, &nh);
	/* The named variants: from the held-out file given, else from the
	 * targets file's own list. */
	const char *hsource = heldout ? heldout->source
			      : nh    ? apf_score_targets_source(targets)
				      : NULL;
	size_t nnamed = heldout ? heldout->n : nh;
	struct names ignored = {0};
	int rc = 0;

	/* Base workloads: the targets file's list, else every workload in
	 * the logs that is neither named as a variant nor a variant by its
	 * workload.ini, plus the bases of drawn variants. */
	for (size_t i = 0; !rc && i < nb; i++)
		rc = names_add(base, tb[i]) ? APF_ENOMEM : 0;
	for (size_t i = 0; !rc && !nb && i < logs->n; i++)
		for (size_t j = 0; !rc && j < logs->s[i].nw; j++) {
			const char *name = logs->s[i].w[j].name, *b = NULL;
			int named = 0;
			for (size_t k = 0; k < nnamed && !named; k++)
				named = !strcmp(name, heldout
							      ? heldout->v[k].variant
							      : th[k]);
			if (named)
				continue;
			struct apf_score_target tg;
			rc = apf_score_targets_find(&tg, &b, targets, rules,
						    name);
			if (rc)
				return rc;
			if (!b && names_add(base, name))
				rc = APF_ENOMEM;
		}
	for (size_t i = 0; !rc && !nb && heldout && i < heldout->n; i++)
		if (heldout->v[i].base && names_add(base, heldout->v[i].base))
			rc = APF_ENOMEM;
	if (rc)
		goto nomem;
	if (!nb)
		qsort(base->v, base->n, sizeof *base->v, cmp_str);

	for (size_t i = 0; i < nnamed; i++) {
		const char *v = heldout ? heldout->v[i].variant : th[i];
		const char *b = heldout && heldout->v[i].base
					? heldout->v[i].base
					: apf_score_base_of(
						  v, (const char *const *)base->v,
						  base->n);
		if (names_find(base, v) >= 0)
			return apf_error(APF_EINPUT, hsource,
					 "%s is a base workload, not a held-out "
					 "variant",
					 v);
		if (!b || names_find(base, b) < 0)
			return apf_error(APF_EINPUT, hsource,
					 "held-out variant %s: %s is not a base "
					 "workload",
					 v, b ? b : "its base");
		if (pair_add(var, var_base, v, b))
			goto nomem;
	}
	/* Other workloads in the logs. AlgoPerf's scorer, given no held-out
	 * list, scores each as a variant of the base its name contains; apf
	 * leaves them out. */
	for (size_t i = 0; i < logs->n; i++)
		for (size_t j = 0; j < logs->s[i].nw; j++) {
			const char *name = logs->s[i].w[j].name;
			if (names_find(base, name) >= 0 ||
			    names_find(var, name) >= 0 ||
			    names_find(&ignored, name) >= 0)
				continue;
			const char *b = apf_score_base_of(
				name, (const char *const *)base->v, base->n);
			if (rules->variants_from_logs && !hsource && b) {
				if (pair_add(var, var_base, name, b) ||
				    warn(r,
					 "%s: scored as a held-out variant of "
					 "%s, as AlgoPerf's scorer does when "
					 "no held-out list is given",
					 name, b))
					goto nomem;
			} else if (names_add(&ignored, name) ||
				   warn(r,
					"%s: neither a base workload nor a "
					"held-out variant%s; ignored",
					name,
					b && !hsource
						? " (pass --heldout to score "
						  "variants)"
						: "")) {
				goto nomem;
			}
		}
	names_free(&ignored);
	if (var->n) {
		const char *src = hsource ? hsource : "variants found in the logs";
		if (!(r->heldout_source = apf_strdup(src)))
			return apf_error(APF_ENOMEM, "score", "out of memory");
	}
	return 0;
nomem:
	names_free(&ignored);
	return apf_error(APF_ENOMEM, "score", "out of memory");
}

/* Drops variant i of the aligned lists. */
static void pair_drop(struct names *var, struct names *var_base, size_t i)
{
	free(var->v[i]);
	free(var_base->v[i]);
	memmove(&var->v[i], &var->v[i + 1], (var->n - i - 1) * sizeof *var->v);
	memmove(&var_base->v[i], &var_base->v[i + 1],
		(var_base->n - i - 1) * sizeof *var_base->v);
	var->n--;
	var_base->n--;
}

/* A base workload no submission has any logs for is left out of the
 * profile, with its held-out variants: AlgoPerf's current targets file
 * lists finewebedu_lm, which came after the v0.6 leaderboard, and counting
 * it would take the same share from every profile (the reference scorer
 * stops with a KeyError instead). --strict makes it an error. A base that
 * some submissions have stays, and is infinite for the others. */
static int drop_unlogged(apf_score_result *r, const apf_score_logs *logs,
			 struct names *base, struct names *var,
			 struct names *var_base, unsigned flags)
{
	size_t kept = 0, c = 0;
	int rc = 0;
	for (; !rc && c < base->n; c++) {
		int have = 0;
		for (size_t s = 0; s < logs->n && !have; s++)
			have = sub_workload(&logs->s[s], base->v[c]) != NULL;
		if (have) {
			base->v[kept++] = base->v[c];
			continue;
		}
		rc = problem(r, flags,
			     "%s: no submission has logs for this base "
			     "workload%s",
			     base->v[c],
			     flags & APF_SCORE_STRICT
				     ? ""
				     : "; left out of the profile");
		if (rc) {
			base->v[kept++] = base->v[c];
			break;
		}
		for (size_t v = var->n; v-- > 0;)
			if (!strcmp(var_base->v[v], base->v[c]))
				pair_drop(var, var_base, v);
		free(base->v[c]);
	}
	/* On an error the rest stay, so the list still owns every name. */
	for (c++; rc && c < base->n; c++)
		base->v[kept++] = base->v[c];
	base->n = kept;
	if (!var->n) {
		free(r->heldout_source);
		r->heldout_source = NULL;
	}
	return rc;
}

/* Trials without logs and study or trial counts the rules don't expect. */
static int check_counts(apf_score_result *r,
			const struct apf_score_submission *s,
			const struct apf_score_workload *w,
			const apf_score_rules *rules, unsigned flags)
{
	int rc = 0;
	if (w->skipped)
		rc = problem(r, flags,
			     "%s: %s: %zu trial director%s without "
			     "eval_measurements.csv%s",
			     s->name, w->dir_name, w->skipped,
			     w->skipped == 1 ? "y" : "ies",
			     flags & APF_SCORE_STRICT ? "" : "; skipped");
	if (rc || !rules->studies)
		return rc;
	if (w->nstudies != (size_t)rules->studies)
		rc = problem(r, flags, "%s: %s: %zu stud%s with logs; %s expects %d",
			     s->name, w->dir_name, w->nstudies,
			     w->nstudies == 1 ? "y" : "ies", rules->name,
			     rules->studies);
	size_t odd = 0;
	for (size_t i = 0; i < w->nstudies; i++)
		odd += w->studies[i].ntrials != (size_t)rules->trials;
	if (!rc && odd)
		rc = problem(r, flags,
			     "%s: %s: %zu stud%s with other than %d logged "
			     "trial%s",
			     s->name, w->dir_name, odd, odd == 1 ? "y" : "ies",
			     rules->trials, rules->trials == 1 ? "" : "s");
	return rc;
}

/* Up to three names of the units that match, then ", ..." when more do. */
static int unit_list(apf_buf *b, const apf_score_run *run,
		     int (*match)(const struct apf_score_unit *))
{
	size_t k = 0;
	int rc = 0;
	for (size_t i = 0; !rc && i < run->nunits; i++) {
		const struct apf_score_unit *u = &run->units[i];
		if (!match(u))
			continue;
		if (k == 3) {
			rc = apf_buf_puts(b, ", ...");
			break;
		}
		rc = apf_buf_printf(b, "%s%s", k ? ", " : "", u->name);
		if (!rc && u->state == APF_SCORE_UNIT_FAILED)
			rc = u->fault[0] ? apf_buf_printf(b, " (%s: %s)",
							  u->reason, u->fault)
					 : apf_buf_printf(b, " (%s)", u->reason);
		k++;
	}
	return rc;
}

static int planned_without_csv(const struct apf_score_unit *u)
{
	return u->planned && !u->has_csv;
}

static int unit_failed(const struct apf_score_unit *u)
{
	return u->state == APF_SCORE_UNIT_FAILED;
}

static int unit_interrupted(const struct apf_score_unit *u)
{
	return u->state == APF_SCORE_UNIT_INTERRUPTED;
}

static int unit_warned(const struct apf_score_unit *u)
{
	return u->warnings > 0;
}

static size_t count_units(const apf_score_run *run,
			  int (*match)(const struct apf_score_unit *))
{
	size_t k = 0;
	for (size_t i = 0; i < run->nunits; i++)
		k += match(&run->units[i]) != 0;
	return k;
}

/* What an apf run says of itself that its CSVs do not: units of its plan
 * that are not there, an interrupted run, failed units (score.h). */
static int check_run(apf_score_result *r, const struct apf_score_submission *s,
		     unsigned flags)
{
	const apf_score_run *run = s->run;
	apf_buf b = {0};
	int rc = 0;
	if (!run->plan_known)
		rc = problem(r, flags,
			     "%s: run.json lists no plan units; which units "
			     "the run should hold is unknown",
			     s->name);
	size_t missing = count_units(run, planned_without_csv);
	if (!rc && missing) {
		if (unit_list(&b, run, planned_without_csv))
			goto nomem;
		rc = problem(r, flags,
			     "%s: %zu of the plan's %zu units ha%s no "
			     "eval_measurements.csv (%s)",
			     s->name, missing, run->nplanned,
			     missing == 1 ? "s" : "ve", b.data);
	}
	const char *unknown = "; whether the run finished and which of its "
			      "units failed is unknown";
	if (!rc && !run->log_found)
		rc = problem(r, flags, "%s: no log.jsonl%s", s->name, unknown);
	else if (!rc && run->log_error)
		rc = problem(r, flags, "%s: %s%s", s->name, run->log_error,
			     unknown);
	size_t stopped = count_units(run, unit_interrupted);
	if (!rc && run->log_found && !run->log_error &&
	    (!run->ended || stopped)) {
		apf_buf_free(&b);
		if (stopped && (apf_buf_printf(&b, "; %zu unit%s did not end: ",
					       stopped,
					       stopped == 1 ? "" : "s") ||
				unit_list(&b, run, unit_interrupted)))
			goto nomem;
		rc = problem(r, flags,
			     "%s: incomplete: %s%s",
			     s->name,
			     run->log_torn ? "the log ends in a torn line (the "
					     "run was interrupted while writing)"
			     : !run->ended ? "the log ends without run_end (the "
					     "run was interrupted or is still "
					     "running)"
					   : "the run ended with units "
					     "unfinished",
			     b.data ? b.data : "");
	}
	size_t failed = count_units(run, unit_failed);
	if (!rc && failed) {
		apf_buf_free(&b);
		if (unit_list(&b, run, unit_failed))
			goto nomem;
		rc = problem(r, flags, "%s: %zu unit%s failed: %s", s->name,
			     failed, failed == 1 ? "" : "s", b.data);
	}
	/* The trials' own warnings (a misspelt hyperparameter reads its
	 * default in every trial): said where the scores are read, not only
	 * on the terminal of the run; --strict refuses them. */
	size_t warned = count_units(run, unit_warned);
	if (!rc && warned) {
		const struct apf_score_unit *first = NULL;
		long total = 0;
		for (size_t i = 0; i < run->nunits; i++) {
			total += run->units[i].warnings;
			if (!first && run->units[i].warnings)
				first = &run->units[i];
		}
		rc = problem(r, flags,
			     "%s: %ld warning%s from the trials of %zu unit%s "
			     "(their logs hold each); the first, %s: %s",
			     s->name, total, total == 1 ? "" : "s", warned,
			     warned == 1 ? "" : "s", first->name,
			     first->warning[0] ? first->warning
					       : "(no detail)");
	}
	if (!rc && (run->clock < 0 || !(run->budget_scale > 0)))
		rc = problem(r, flags,
			     "%s: run.json's plan.clock or plan.budget_scale "
			     "is not one apf writes; how its times were "
			     "measured is unknown",
			     s->name);
	else if (!rc && run->budget_scale != 1.0)
		rc = problem(r, flags,
			     "%s: budget scaled x%g (apf run --budget-scale): "
			     "a quick look, unofficial; its times are not "
			     "results",
			     s->name, run->budget_scale);
	if (!rc && run->short_blocks && run->clock == APF_CLOCK_WALL)
		rc = problem(r, flags,
			     "%s: %llu of %llu step blocks short of cores "
			     "under the wall clock (the trial's threads waited "
			     "over %.0f%% of their time for one): those times "
			     "are the machine's as much as the submission's "
			     "(run on a quiet machine, or with --clock cpu)",
			     s->name, (unsigned long long)run->short_blocks,
			     (unsigned long long)run->blocks,
			     100 * APF_CLOCK_SHORT_SHARE);
	/* Under the cpu clock a wait is not counted: nothing to warn of
	 * (verify and report still say how many blocks waited). */
	apf_buf_free(&b);
	return rc;
nomem:
	apf_buf_free(&b);
	return apf_error(APF_ENOMEM, "score", "out of memory");
}

static void run_clock(const apf_score_run *run, char *out, size_t size)
{
	snprintf(out, size, "%s", apf_clock_name(run->clock));
}

static void run_numerics(const apf_score_run *run, char *out, size_t size)
{
	snprintf(out, size, "%d", run->numerics);
}

/* One problem when the apf runs differ in a field of run.json other than
 * the hardware's: "runs differ in <field> (<name>: <value>; ...):
 * time-to-target is comparable <only>". */
static int runs_differ(apf_score_result *r, const apf_score_logs *logs,
		       unsigned flags, const char *field,
		       void (*value)(const apf_score_run *, char *, size_t),
		       const char *only)
{
	char first[64] = "", v[64];
	int differ = 0;
	for (size_t i = 0; i < logs->n && !differ; i++) {
		if (!logs->s[i].run)
			continue;
		value(logs->s[i].run, v, sizeof v);
		differ = first[0] && strcmp(first, v);
		if (!first[0])
			memcpy(first, v, sizeof v);
	}
	if (!differ)
		return 0;
	apf_buf b = {0};
	for (size_t k = 0; k < logs->n; k++) {
		if (!logs->s[k].run)
			continue;
		value(logs->s[k].run, v, sizeof v);
		if (apf_buf_printf(&b, "%s%s: %s", b.len ? "; " : "",
				   logs->s[k].name, v)) {
			apf_buf_free(&b);
			return apf_error(APF_ENOMEM, "score", "out of memory");
		}
	}
	int rc = problem(r, flags,
			 "runs differ in %s (%s): time-to-target is "
			 "comparable %s",
			 field, b.data, only);
	apf_buf_free(&b);
	return rc;
}

/* Excluded runs, what could not be verified, each apf run's own account,
 * and the machines the apf runs ran on. */
static int check_submissions(apf_score_result *r, const apf_score_logs *logs,
			     unsigned flags)
{
	int rc = 0;
	for (size_t i = 0; !rc && i < logs->nexcluded; i++)
		rc = warn(r, "%s: not verified: %s", logs->excluded[i].name,
			  logs->excluded[i].reason);
	size_t algoperf = 0, nruns = 0;
	for (size_t i = 0; i < logs->n; i++) {
		algoperf += !logs->s[i].apf_run;
		nruns += logs->s[i].run != NULL;
	}
	if (!rc && (flags & APF_SCORE_VERIFY) && algoperf)
		rc = warn(r,
			  "%zu AlgoPerf log director%s (no run.json, log or "
			  "signature) cannot be verified; scored as logged",
			  algoperf, algoperf == 1 ? "y" : "ies");
	for (size_t i = 0; !rc && i < logs->n; i++)
		if (logs->s[i].run)
			rc = check_run(r, &logs->s[i], flags);
	if (rc || nruns < 2)
		return rc;
	const char **names = apf_calloc(nruns, sizeof *names);
	const struct apf_score_hardware **hw = apf_calloc(nruns, sizeof *hw);
	char **diff = NULL;
	size_t ndiff = 0;
	if (!names || !hw)
		rc = apf_error(APF_ENOMEM, "score", "out of memory");
	for (size_t i = 0, k = 0; !rc && i < logs->n; i++)
		if (logs->s[i].run) {
			names[k] = logs->s[i].name;
			hw[k++] = &logs->s[i].run->hw;
		}
	if (!rc)
		rc = apf_score_hardware_compare(&diff, &ndiff, names, hw, nruns);
	/* Times of two clocks estimate the same thing but are not the same
	 * measurement; two numerics are two sets of kernels (nn.h), which
	 * may differ in speed as two apf builds do. */
	if (!rc)
		rc = runs_differ(r, logs, flags, "clock", run_clock,
				 "only under one clock");
	if (!rc)
		rc = runs_differ(r, logs, flags, "numerics", run_numerics,
				 "only under one numerics version");
	for (size_t i = 0; !rc && i < ndiff; i++)
		rc = problem(r, flags, "%s", diff[i]);
	for (size_t i = 0; i < ndiff; i++)
		free(diff[i]);
	free(diff);
	free(names);
	free(hw);
	return rc;
}

/* Whether submission s's time for workload w involves a unit that stopped
 * early (failed or interrupted) or never ran, without meeting its
 * target. */
static int stopped_early(const struct apf_score_submission *s,
			 const struct apf_score_workload *w)
{
	if (!s->run || !w)
		return 0;
	for (size_t i = 0; i < s->run->nunits; i++) {
		const struct apf_score_unit *u = &s->run->units[i];
		/* A unit of the plan without a CSV never ran (or its
		 * files are gone): it counts as a miss, and says so. */
		int gone = u->planned && !u->has_csv;
		if ((u->state != APF_SCORE_UNIT_FAILED &&
		     u->state != APF_SCORE_UNIT_INTERRUPTED && !gone) ||
		    strcmp(u->dir_name, w->dir_name))
			continue;
		int met = 0;
		for (size_t k = 0; k < w->nstudies && !met; k++) {
			const struct apf_score_study *st = &w->studies[k];
			if (st->number != u->study)
				continue;
			for (size_t j = 0; j < st->ntrials; j++)
				if (st->trials[j].number == u->trial)
					met = st->trials[j].hit >= 0;
		}
		if (!met)
			return 1;
	}
	return 0;
}

static double score_of(const apf_score_result *r, size_t i)
{
	return r->score[i];
}

/* A time-to-target is the submission time of the first eval meeting the
 * target: where every trial that met it did so at its first eval, the
 * times say when that eval came, not how fast the trials trained, and
 * nothing among them is ranked by training (--strict refuses it). For apf
 * runs, whose first eval comes after step 1, so that a trial meeting the
 * target there says the target or the eval period is wrong; AlgoPerf's
 * logs are scored as published. */
static int check_first_evals(apf_score_result *r,
			     const struct apf_score_submission *sub,
			     const struct apf_score_workload *w, unsigned flags)
{
	if (!sub->apf_run)
		return 0;
	size_t met = 0, first = 0;
	for (size_t k = 0; k < w->nstudies; k++)
		for (size_t t = 0; t < w->studies[k].ntrials; t++) {
			const struct apf_score_trial *tr =
				&w->studies[k].trials[t];
			met += tr->hit >= 0;
			first += tr->hit == 0;
		}
	if (!met || first != met)
		return 0;
	return problem(r, flags,
		       "%s: %s: every trial that met the target (%zu) met "
		       "it at its first eval: the times are when that eval "
		       "came, not how fast they trained (a shorter eval "
		       "period would tell them apart)",
		       sub->name, w->name, met);
}

/* Trials that met the target only at the eval that ended them at or past
 * their budget: the rules give them nothing (AlgoPerf's runner makes no
 * eval once the budget is spent; apf's unit makes that one for the
 * record), and the warning says so, so that a log read beside the score
 * does not look like a miscount. */
static int check_late(apf_score_result *r,
		      const struct apf_score_submission *sub,
		      const struct apf_score_workload *w)
{
	size_t late = 0;
	const struct apf_score_trial *first = NULL;
	int study = 0;
	for (size_t k = 0; k < w->nstudies; k++)
		for (size_t t = 0; t < w->studies[k].ntrials; t++) {
			const struct apf_score_trial *tr =
				&w->studies[k].trials[t];
			if (!tr->late)
				continue;
			if (!late++) {
				first = tr;
				study = w->studies[k].number;
			}
		}
	if (!late)
		return 0;
	return warn(r,
		    "%s: %s: %zu trial%s met the validation target only at "
		    "the eval at or past the budget (the first, study_%d "
		    "trial_%d, past %.4g s): not counted, as AlgoPerf makes "
		    "no eval once the budget is spent",
		    sub->name, w->name, late, late == 1 ? "" : "s", study,
		    first->number, first->budget);
}

int apf_score_compute(apf_score_result **out, apf_score_logs *logs,
		      apf_score_targets *targets,
		      const apf_score_heldout *heldout,
		      const apf_score_rules *rules, unsigned flags)
{
	*out = NULL;
	apf_score_result *r = apf_calloc(1, sizeof *r);
	if (!r)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	r->rules = rules;
	r->verify = (flags & APF_SCORE_VERIFY) != 0;
	r->logs = logs;
	struct names base = {0}, var = {0}, var_base = {0};
	int rc = 0;
	if (!logs->n) {
		rc = logs->nexcluded
			     ? apf_error(APF_EINPUT, "score",
					 "no submissions to score: %zu failed "
					 "verification (first: %s: %s)",
					 logs->nexcluded, logs->excluded[0].name,
					 logs->excluded[0].reason)
			     : apf_error(APF_EINPUT, "score",
					 "no submissions to score");
		goto fail;
	}
	if (!(r->targets_source = apf_strdup(apf_score_targets_source(targets))))
		goto nomem;
	rc = choose_columns(r, logs, targets, heldout, rules, &base, &var,
			    &var_base);
	if (!rc)
		rc = drop_unlogged(r, logs, &base, &var, &var_base, flags);
	if (rc)
		goto fail;
	if (!base.n) {
		rc = apf_error(APF_EINPUT, "score",
			       "no base workloads to score");
		goto fail;
	}
	if ((rc = check_submissions(r, logs, flags)))
		goto fail;
	size_t ncols = base.n + var.n, nsub = logs->n;
	r->nsub = nsub;
	r->nbase = base.n;
	r->nvar = var.n;
	r->workloads = apf_calloc(ncols, sizeof *r->workloads);
	r->variant_base = apf_calloc(var.n, sizeof *r->variant_base);
	r->sub = apf_calloc(nsub, sizeof *r->sub);
	r->raw = apf_calloc(nsub * ncols, sizeof *r->raw);
	r->final = apf_calloc(nsub * ncols, sizeof *r->final);
	r->ratio = apf_calloc(nsub * base.n, sizeof *r->ratio);
	r->rho = apf_calloc(nsub * APF_SCORE_POINTS, sizeof *r->rho);
	r->score = apf_calloc(nsub, sizeof *r->score);
	r->early = apf_calloc(nsub * ncols, sizeof *r->early);
	if (!r->workloads || !r->variant_base || !r->sub || !r->raw ||
	    !r->final || !r->ratio || !r->rho || !r->score || !r->early)
		goto nomem;
	for (size_t c = 0; c < ncols; c++) {
		r->workloads[c] = c < base.n ? base.v[c] : var.v[c - base.n];
		if (c >= base.n)
			r->variant_base[c - base.n] = var_base.v[c - base.n];
	}
	/* The result owns the strings now. */
	free(base.v);
	free(var.v);
	free(var_base.v);
	base = var = var_base = (struct names){0};

	for (size_t s = 0; s < nsub; s++) {
		struct apf_score_submission *sub = &logs->s[s];
		r->sub[s] = sub;
		if (sub->stray &&
		    warn(r, "%s: %zu trial director%s directly in a study "
			    "(outside any workload); ignored",
			 sub->name, sub->stray, sub->stray == 1 ? "y" : "ies"))
			goto nomem;
		for (size_t c = 0; c < ncols; c++) {
			struct apf_score_workload *w =
				sub_workload(sub, r->workloads[c]);
			r->raw[s * ncols + c] = NAN;
			if (!w)
				continue;
			struct apf_score_target tg;
			rc = apf_score_targets_find(&tg, NULL, targets,
						    rules, w->name);
			if (!rc && !w->read) {
				rc = time_workload(r, w, &tg, rules, flags);
				if (!rc)
					rc = check_late(r, sub, w);
			}
			if (!rc)
				rc = check_counts(r, sub, w, rules, flags);
			if (!rc)
				rc = check_first_evals(r, sub, w, flags);
			if (rc)
				goto fail;
			r->raw[s * ncols + c] = w->time;
		}
	}
	memcpy(r->final, r->raw, nsub * ncols * sizeof *r->raw);
	if (r->nvar) {
		size_t *vc = apf_calloc(r->nvar, sizeof *vc);
		size_t *bc = apf_calloc(r->nvar, sizeof *bc);
		if (!vc || !bc) {
			free(vc);
			free(bc);
			goto nomem;
		}
		for (size_t v = 0; v < r->nvar; v++) {
			vc[v] = r->nbase + v;
			for (size_t c = 0; c < r->nbase; c++)
				if (!strcmp(r->workloads[c],
					    r->variant_base[v]))
					bc[v] = c;
		}
		apf_score_heldout_rules(r->final, nsub, ncols, vc, bc, r->nvar);
		free(vc);
		free(bc);
	}
	/* The profile is over the base columns only. */
	double *bt = apf_calloc(nsub * r->nbase, sizeof *bt);
	if (!bt)
		goto nomem;
	for (size_t s = 0; s < nsub; s++)
		memcpy(&bt[s * r->nbase], &r->final[s * ncols],
		       r->nbase * sizeof *bt);
	apf_score_profile(bt, nsub, r->nbase, r->ratio, r->rho);
	free(bt);
	apf_score_taus(r->tau);
	for (size_t s = 0; s < nsub; s++)
		r->score[s] = apf_score_integrate(&r->rho[s * APF_SCORE_POINTS],
						  r->tau, APF_SCORE_POINTS);
	/* Rank: score, then name; rows of every table move together. */
	for (size_t i = 1; i < nsub; i++)
		for (size_t j = i; j > 0; j--) {
			double a = score_of(r, j - 1), b = score_of(r, j);
			if (a > b || (a == b && strcmp(r->sub[j - 1]->name,
						       r->sub[j]->name) <= 0))
				break;
			const struct apf_score_submission *ts = r->sub[j];
			r->sub[j] = r->sub[j - 1];
			r->sub[j - 1] = ts;
			double tsc = r->score[j];
			r->score[j] = r->score[j - 1];
			r->score[j - 1] = tsc;
			struct {
				double *p;
				size_t w;
			} rows[] = {{r->raw, ncols},
				    {r->final, ncols},
				    {r->ratio, r->nbase},
				    {r->rho, APF_SCORE_POINTS}};
			for (size_t k = 0; k < 4; k++)
				for (size_t c = 0; c < rows[k].w; c++) {
					double *x = &rows[k].p[j * rows[k].w + c];
					double *y =
						&rows[k].p[(j - 1) * rows[k].w + c];
					double t = *x;
					*x = *y;
					*y = t;
				}
		}
	/* After the ranking, so the marks follow the ranked rows. */
	for (size_t i = 0; i < nsub; i++)
		for (size_t c = 0; c < ncols; c++)
			r->early[i * ncols + c] = (unsigned char)stopped_early(
				r->sub[i], sub_workload(r->sub[i],
							r->workloads[c]));
	if ((rc = apf_score_plausibility(r, targets, rules)))
		goto fail;
	*out = r;
	return 0;
nomem:
	rc = apf_error(APF_ENOMEM, "score", "out of memory");
fail:
	names_free(&base);
	names_free(&var);
	names_free(&var_base);
	apf_score_result_free(r);
	return rc;
}
