/*
 * plausible.c: the plausibility backstop in `apf verify` (verify.h's struct
 * apf_verify_plausibility; the rule is pkg/refcurve's). After check 3 has
 * passed, every unit that met its validation target is held against its
 * workload's reference curve at the first kept eval meeting it: examples =
 * global_step x the batch size its clock_start records. The curves come
 * from the auditor's workloads directory (the one the specs were loaded
 * from and checked against the manifest), never from the run directory, so
 * an operator cannot supply a slower reference. A flagged unit is a
 * warning in the report, not a failed check; a workload without a curve is
 * said once, and so is one that cannot be read (the auditor's file: the
 * run's verdict stays the run's).
 */
#include "verify/verifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOMEM() apf_error(APF_ENOMEM, "plausibility", "out of memory")

void apf_vx_plausibility_free(struct apf_verify_plausibility *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nflagged; i++) {
		struct apf_verify_flag *f = &p->flagged[i];
		free(f->unit);
		free(f->workload);
		free(f->reference);
		free(f->reference_run);
		free(f->metric);
		free(f->text);
	}
	free(p->flagged);
	for (size_t i = 0; i < p->nnotes; i++)
		free(p->notes[i]);
	free(p->notes);
	for (size_t i = 0; i < p->nreferences; i++)
		free(p->references[i]);
	free(p->references);
	free(p);
}

static int push_str(char ***v, size_t *n, char *s)
{
	char **nv = s ? realloc(*v, (*n + 1) * sizeof *nv) : NULL;
	if (!nv) {
		free(s);
		return NOMEM();
	}
	*v = nv;
	(*v)[(*n)++] = s;
	return 0;
}

/* One workload directory's curve, loaded once. */
struct curve_of {
	const char *dir_name;
	apf_refcurve *c;   /* NULL: none, or it does not apply */
};

static int load_curve(struct curve_of *k, const struct vx_unit *u,
		      const char *root, struct apf_verify_plausibility *p)
{
	k->dir_name = u->dir_name;
	int rc = apf_refcurve_load(&k->c, root, u->dir_name);
	if (rc == APF_ENOMEM)
		return rc;
	apf_buf note = {0};
	if (rc) {
		/* The auditor's file, not the run's fault: said, and the
		 * run's verdict stays the run's. */
		char why[1024];
		apf_error_take(why, sizeof why);
		rc = apf_buf_printf(&note,
				    "the reference curve for %s cannot be read "
				    "(%s): not checked",
				    u->dir_name, why)
			     ? NOMEM()
			     : 0;
	} else if (!k->c) {
		rc = apf_buf_printf(&note,
				    "no reference curve for %s (%s/%s/%s.json)",
				    u->dir_name, root, APF_REFCURVE_DIR,
				    u->dir_name)
			     ? NOMEM()
			     : 0;
	} else if (strcmp(apf_refcurve_metric(k->c), u->spec->metric) ||
		   apf_refcurve_direction(k->c) != u->direction) {
		rc = apf_buf_printf(
			&note,
			"the reference curve for %s (%s) is of validation/%s "
			"(%s), the workload's metric is validation/%s (%s): "
			"not applied",
			u->dir_name, apf_refcurve_path(k->c),
			apf_refcurve_metric(k->c),
			apf_refcurve_direction(k->c) > 0 ? "max" : "min",
			u->spec->metric, u->direction > 0 ? "max" : "min")
			     ? NOMEM()
			     : 0;
		apf_refcurve_free(k->c);
		k->c = NULL;
	} else {
		char *path = apf_strdup(apf_refcurve_path(k->c));
		rc = push_str(&p->references, &p->nreferences, path);
	}
	if (rc) {
		apf_buf_free(&note);
		return rc;
	}
	return note.data ? push_str(&p->notes, &p->nnotes, note.data) : 0;
}

static int judge_unit(const struct vx_unit *u, const apf_refcurve *c,
		      struct apf_verify_plausibility *p, int *met)
{
	uint64_t *steps = apf_calloc(u->nevals, sizeof *steps);
	double *vals = apf_calloc(u->nevals, sizeof *vals);
	if (!steps || !vals) {
		free(steps);
		free(vals);
		return NOMEM();
	}
	size_t vi = 0;
	while (vi < u->nmnames && strcmp(u->mnames[vi], u->vkey))
		vi++;
	for (size_t e = 0; e < u->nevals; e++) {
		const struct vx_eval *x = &u->evals[e];
		steps[e] = x->global_step;
		vals[e] = NAN;
		for (uint32_t j = 0; j < x->nm; j++)
			if (x->mname[j] == vi)
				vals[e] = x->mval[j];
	}
	struct apf_refcurve_verdict v;
	if (c) {
		apf_refcurve_judge(&v, c, u->vtarget, u->batch_size, steps, vals,
				   u->nevals);
		*met = v.met;
	} else {
		/* No curve: whether it met the target, for the count. */
		size_t e = 0;
		while (e < u->nevals &&
		       !apf_refcurve_meets(vals[e], u->vtarget, u->direction))
			e++;
		*met = e < u->nevals;
	}
	free(steps);
	free(vals);
	if (!c || !v.implausible)
		return 0;
	struct apf_verify_flag *nf =
		realloc(p->flagged, (p->nflagged + 1) * sizeof *nf);
	if (!nf)
		return NOMEM();
	p->flagged = nf;
	struct apf_verify_flag *f = &p->flagged[p->nflagged++];
	memset(f, 0, sizeof *f);
	apf_buf text = {0};
	int rc = apf_refcurve_describe(&text, c, u->name, &v);
	f->text = text.data;
	f->unit = apf_strdup(u->name);
	f->workload = apf_strdup(u->dir_name);
	f->reference = apf_strdup(apf_refcurve_path(c));
	f->reference_run = apf_strdup(v.ref.run ? v.ref.run : "");
	f->metric = apf_strdup(apf_refcurve_metric(c));
	f->v = v;
	f->v.ref.run = NULL;
	if (rc || !f->text || !f->unit || !f->workload || !f->reference ||
	    !f->reference_run || !f->metric)
		return NOMEM();
	return 0;
}

int apf_vx_plausibility(struct vx *v)
{
	struct apf_verify_plausibility *p = apf_calloc(1, sizeof *p);
	struct curve_of *curves = apf_calloc(v->nunits + 1, sizeof *curves);
	size_t ncurves = 0;
	char *root = NULL;
	int rc = p && curves ? 0 : NOMEM();
	if (!rc) {
		v->rep->plausibility = p;
		/* The workloads directory the specs came from. */
		rc = apf_workloads_dir(&root);
	}
	for (size_t i = 0; !rc && i < v->nunits; i++) {
		const struct vx_unit *u = &v->units[i];
		if (!u->nevals)
			continue;
		size_t k = 0;
		while (k < ncurves && strcmp(curves[k].dir_name, u->dir_name))
			k++;
		if (k == ncurves)
			rc = load_curve(&curves[ncurves++], u, root, p);
		int met = 0;
		if (!rc)
			rc = judge_unit(u, curves[k].c, p, &met);
		if (met && curves[k].c)
			p->checked++;
		else if (met)
			p->met_uncurved++;
	}
	for (size_t k = 0; k < ncurves; k++)
		apf_refcurve_free(curves[k].c);
	free(curves);
	free(root);
	return rc;
}

/* ---- the report ----------------------------------------------------------- */

int apf_verify_plausibility_text(apf_buf *out, const apf_verify_report *r)
{
	const struct apf_verify_plausibility *p = r->plausibility;
	if (!p)
		return 0;
	size_t met = p->checked + p->met_uncurved;
	int rc;
	if (!met)
		rc = apf_buf_puts(out, "  plausibility  no unit met its "
				       "validation target: nothing to hold "
				       "against the reference curves\n");
	else
		rc = apf_buf_printf(
			out,
			"  plausibility  %zu of %zu unit%s that met %s "
			"validation target held against reference curves "
			"(flagged under " APF_REFCURVE_FACTOR_TEXT " of the "
			"fastest reference run's examples): %zu flagged\n",
			p->checked, met, met == 1 ? "" : "s",
			met == 1 ? "its" : "their", p->nflagged);
	for (size_t i = 0; !rc && i < p->nflagged; i++)
		rc = apf_buf_printf(out,
				    "    WARNING: implausible progress: %s\n",
				    p->flagged[i].text);
	for (size_t i = 0; !rc && i < p->nnotes; i++)
		rc = apf_buf_printf(out, "    %s\n", p->notes[i]);
	return rc ? NOMEM() : 0;
}

static json_t *str_array(char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_string(v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *apf_verify_plausibility_json(const apf_verify_report *r)
{
	const struct apf_verify_plausibility *p = r->plausibility;
	if (!p)
		return json_null();
	json_t *flagged = json_array();
	for (size_t i = 0; flagged && i < p->nflagged; i++) {
		const struct apf_verify_flag *f = &p->flagged[i];
		json_t *o = json_pack(
			"{s:s, s:s, s:s, s:f, s:f, s:I, s:I, s:I, s:I, s:o, "
			"s:f, s:s, s:s, s:s}",
			"unit", f->unit, "workload", f->workload, "metric",
			f->metric, "level", f->v.level, "value", f->v.value,
			"global_step", (json_int_t)f->v.global_step,
			"batch_size", (json_int_t)f->v.batch_size, "examples",
			(json_int_t)f->v.examples, "reference_examples",
			(json_int_t)f->v.ref.below, "reference_first",
			f->v.ref.reached ? json_integer((json_int_t)f->v.ref.first)
					 : json_null(),
			"ratio", f->v.ratio, "reference", f->reference,
			"reference_run", f->reference_run, "text", f->text);
		if (!o || json_array_append_new(flagged, o)) {
			json_decref(flagged);
			flagged = NULL;
		}
	}
	json_t *o = json_pack("{s:f, s:I, s:I, s:o*, s:o*, s:o*}", "factor",
			      APF_REFCURVE_FACTOR, "checked",
			      (json_int_t)p->checked, "met_without_curve",
			      (json_int_t)p->met_uncurved, "flagged", flagged,
			      "notes", str_array(p->notes, p->nnotes),
			      "references",
			      str_array(p->references, p->nreferences));
	return o ? o : json_null();
}
