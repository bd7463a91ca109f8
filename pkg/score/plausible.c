/*
 * plausible.c: the plausibility backstop in `apf score`
 * (apf_score_plausibility, score.h; the rule is pkg/refcurve's, the same
 * as apf verify's). Each unit of an apf run that met the target the scorer
 * holds its workload to is judged at its first kept eval meeting it, in
 * training examples (global_step x the batch size its log records),
 * against the reference curve in the auditor's workloads directory. A
 * flagged unit marks its (submission, workload) cell; the score is not
 * changed. AlgoPerf's logs record no batch size, so they are said to be
 * unchecked rather than passed.
 */
#include "score/score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workload/workload.h"

#define NOMEM() apf_error(APF_ENOMEM, "score", "out of memory")

static int note(apf_score_result *r, apf_buf *b)
{
	char **nv = b->data ? realloc(r->plausibility_notes,
				      (r->nplausibility_notes + 1) * sizeof *nv)
			    : NULL;
	if (!nv) {
		apf_buf_free(b);
		return NOMEM();
	}
	r->plausibility_notes = nv;
	nv[r->nplausibility_notes++] = b->data;
	*b = (apf_buf){0};
	return 0;
}

/* One workload directory's curve, loaded once; NULL when there is none or
 * it does not apply (the note says which). */
struct curve_of {
	char *dir_name;
	apf_refcurve *c;
};

static int curve_for(apf_score_result *r, struct curve_of **cache,
		     size_t *n, const char *dir_name,
		     const struct apf_score_target *tg, apf_refcurve **out)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*cache)[i].dir_name, dir_name)) {
			*out = (*cache)[i].c;
			return 0;
		}
	struct curve_of *nc = realloc(*cache, (*n + 1) * sizeof *nc);
	if (!nc)
		return NOMEM();
	*cache = nc;
	struct curve_of *k = &nc[*n];
	k->c = NULL;
	if (!(k->dir_name = apf_strdup(dir_name)))
		return NOMEM();
	(*n)++;
	int rc = apf_refcurve_load(&k->c, r->references_dir, dir_name);
	if (rc == APF_ENOMEM)
		return rc;
	apf_buf b = {0};
	if (rc) {
		/* The auditor's file: said, not the scoring's failure. */
		char why[1024];
		apf_error_take(why, sizeof why);
		rc = apf_buf_printf(&b,
				    "the reference curve for %s cannot be read "
				    "(%s): not checked",
				    dir_name, why);
	} else if (!k->c) {
		rc = apf_buf_printf(&b, "no reference curve for %s (%s/%s/%s.json)",
				    dir_name, r->references_dir,
				    APF_REFCURVE_DIR, dir_name);
	} else if (strcmp(apf_refcurve_metric(k->c), tg->metric) ||
		   apf_refcurve_direction(k->c) != tg->direction) {
		rc = apf_buf_printf(
			&b,
			"the reference curve for %s (%s) is of validation/%s "
			"(%s), the target's metric is validation/%s (%s): not "
			"applied",
			dir_name, apf_refcurve_path(k->c),
			apf_refcurve_metric(k->c),
			apf_refcurve_direction(k->c) > 0 ? "max" : "min",
			tg->metric, tg->direction > 0 ? "max" : "min");
		apf_refcurve_free(k->c);
		k->c = NULL;
	}
	if (rc) {
		apf_buf_free(&b);
		return NOMEM();
	}
	*out = k->c;
	return b.data ? note(r, &b) : 0;
}

/* The column of submission s that unit u's workload directory is. */
static long column_of(const apf_score_result *r, size_t s,
		      const struct apf_score_unit *u)
{
	const struct apf_score_submission *sub = r->sub[s];
	for (size_t c = 0; c < r->nbase + r->nvar; c++)
		for (size_t i = 0; i < sub->nw; i++)
			if (!strcmp(sub->w[i].name, r->workloads[c]) &&
			    !strcmp(sub->w[i].dir_name, u->dir_name))
				return (long)c;
	return -1;
}

static int flag(apf_score_result *r, size_t s, long col,
		const struct apf_score_unit *u, const apf_refcurve *c,
		const struct apf_refcurve_verdict *v)
{
	struct apf_score_flag *nf =
		realloc(r->flags, (r->nflags + 1) * sizeof *nf);
	if (!nf)
		return NOMEM();
	r->flags = nf;
	struct apf_score_flag *f = &nf[r->nflags++];
	memset(f, 0, sizeof *f);
	apf_buf text = {0};
	char unit[600];
	snprintf(unit, sizeof unit, "%s: %s", r->sub[s]->name, u->name);
	int rc = apf_refcurve_describe(&text, c, unit, v);
	f->text = text.data;
	f->sub = s;
	f->col = col;
	f->unit = apf_strdup(u->name);
	f->workload = apf_strdup(u->dir_name);
	f->reference = apf_strdup(apf_refcurve_path(c));
	f->reference_run = apf_strdup(v->ref.run ? v->ref.run : "");
	f->metric = apf_strdup(apf_refcurve_metric(c));
	f->v = *v;
	f->v.ref.run = NULL;
	if (rc || !f->text || !f->unit || !f->workload || !f->reference ||
	    !f->reference_run || !f->metric)
		return NOMEM();
	if (col >= 0)
		r->implausible[s * (r->nbase + r->nvar) + (size_t)col] = 1;
	return 0;
}

/* Judges one unit of submission s. */
static int judge(apf_score_result *r, size_t s, const struct apf_score_unit *u,
		 apf_score_targets *targets, const apf_score_rules *rules,
		 struct curve_of **cache, size_t *ncache)
{
	size_t n = json_array_size(u->evals);
	if (!n)
		return 0;
	struct apf_score_target tg;
	if (apf_score_targets_find(&tg, NULL, targets, rules, u->dir_name)) {
		/* No target for it: the scoring says so where it matters. */
		apf_error_clear();
		return 0;
	}
	apf_refcurve *c = NULL;
	int rc = curve_for(r, cache, ncache, u->dir_name, &tg, &c);
	if (rc)
		return rc;
	uint64_t *steps = apf_calloc(n, sizeof *steps);
	double *vals = apf_calloc(n, sizeof *vals);
	char key[300];
	snprintf(key, sizeof key, "validation/%s", tg.metric);
	if (!steps || !vals) {
		free(steps);
		free(vals);
		return NOMEM();
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(u->evals, i);
		const json_t *g = json_object_get(e, "global_step"),
			     *m = json_object_get(json_object_get(e, "metrics"),
						  key);
		steps[i] = json_is_integer(g) && json_integer_value(g) > 0
				   ? (uint64_t)json_integer_value(g)
				   : 0;
		vals[i] = json_is_number(m) ? json_number_value(m) : NAN;
	}
	if (c) {
		struct apf_refcurve_verdict v;
		apf_refcurve_judge(&v, c, tg.validation,
				   u->batch_size > 0 ? (uint64_t)u->batch_size : 0,
				   steps, vals, n);
		r->plausibility_checked += v.met;
		if (v.implausible)
			rc = flag(r, s, column_of(r, s, u), u, c, &v);
	} else {
		size_t i = 0;
		while (i < n && !apf_refcurve_meets(vals[i], tg.validation,
						    tg.direction))
			i++;
		r->plausibility_uncurved += i < n;
	}
	free(steps);
	free(vals);
	return rc;
}

int apf_score_plausibility(apf_score_result *r, apf_score_targets *targets,
			   const apf_score_rules *rules)
{
	size_t nc = r->nbase + r->nvar;
	if (!r->implausible &&
	    !(r->implausible = apf_calloc(r->nsub * nc + 1, 1)))
		return NOMEM();
	const char *dir = apf_score_targets_dir(targets);
	int rc = 0;
	size_t logs = 0, unlogged = 0;
	for (size_t s = 0; s < r->nsub; s++) {
		logs += !r->sub[s]->apf_run;
		unlogged += r->sub[s]->apf_run &&
			    (!r->sub[s]->run || !r->sub[s]->run->log_found);
	}
	apf_buf b = {0};
	if (logs && (rc = apf_buf_printf(&b, "%zu AlgoPerf log director%s: not "
					     "checked (their logs record no "
					     "batch size)",
					 logs, logs == 1 ? "y" : "ies")) == 0)
		rc = note(r, &b);
	for (size_t s = 0; !rc && s < r->nsub; s++)
		if (r->sub[s]->apf_run &&
		    (!r->sub[s]->run || !r->sub[s]->run->log_found) &&
		    !(rc = apf_buf_printf(&b, "%s: not checked (no log to read "
					      "batch sizes and evals from)",
					  r->sub[s]->name)))
			rc = note(r, &b);
	if (rc)
		return rc == APF_ENOMEM ? NOMEM() : rc;
	if (logs + unlogged == r->nsub)
		return 0;
	if (dir) {
		r->references_dir = apf_strdup(dir);
	} else if ((rc = apf_workloads_dir(&r->references_dir))) {
		apf_error_clear();
		if (apf_buf_printf(&b, "not checked: no workloads directory to "
				       "read reference curves from (set "
				       "APF_WORKLOADS_DIR)"))
			return NOMEM();
		return note(r, &b);
	}
	if (!r->references_dir)
		return NOMEM();
	struct curve_of *cache = NULL;
	size_t ncache = 0;
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		const apf_score_run *run = r->sub[s]->run;
		for (size_t i = 0; !rc && run && i < run->nunits; i++)
			rc = judge(r, s, &run->units[i], targets, rules, &cache,
				   &ncache);
	}
	for (size_t i = 0; i < ncache; i++) {
		free(cache[i].dir_name);
		apf_refcurve_free(cache[i].c);
	}
	free(cache);
	return rc;
}
