/*
 * refcurve.c: reading reference files and the plausibility rule
 * (refcurve.h). The file is the auditor's own (under its workloads
 * directory), never the run's; it is read strictly anyway, so that a typo
 * is an error and not a curve silently missing.
 */
#include "refcurve/refcurve.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct refrun {
	char *label;
	size_t n;
	uint64_t *examples;
	double *value;
};

struct apf_refcurve {
	char *path, *workload, *metric;
	int direction;
	struct refrun *runs;
	size_t nruns;
};

void apf_refcurve_free(apf_refcurve *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nruns; i++) {
		free(c->runs[i].label);
		free(c->runs[i].examples);
		free(c->runs[i].value);
	}
	free(c->runs);
	free(c->path);
	free(c->workload);
	free(c->metric);
	free(c);
}

const char *apf_refcurve_path(const apf_refcurve *c)
{
	return c->path;
}

const char *apf_refcurve_metric(const apf_refcurve *c)
{
	return c->metric;
}

int apf_refcurve_direction(const apf_refcurve *c)
{
	return c->direction;
}

size_t apf_refcurve_runs(const apf_refcurve *c)
{
	return c->nruns;
}

static const char *top_keys[] = {"format",   "workload", "metric",
				 "direction", "runs",     "provenance",
				 NULL};

static int read_run(struct refrun *r, const json_t *o, size_t i,
		    const char *name)
{
	if (!json_is_object(o))
		return apf_error(APF_EINPUT, name, "runs[%zu]: not an object",
				 i);
	const json_t *label = json_object_get(o, "label"),
		     *pts = json_object_get(o, "points");
	if (!json_is_string(label) || !*json_string_value(label))
		return apf_error(APF_EINPUT, name,
				 "runs[%zu].label: missing, or not a non-empty "
				 "string",
				 i);
	if (!json_is_array(pts) || !json_array_size(pts))
		return apf_error(APF_EINPUT, name,
				 "runs[%zu].points: missing, or not a non-empty "
				 "array",
				 i);
	size_t n = json_array_size(pts);
	r->label = apf_strdup(json_string_value(label));
	r->examples = apf_calloc(n, sizeof *r->examples);
	r->value = apf_calloc(n, sizeof *r->value);
	if (!r->label || !r->examples || !r->value)
		return apf_error(APF_ENOMEM, name, "out of memory");
	for (size_t j = 0; j < n; j++) {
		const json_t *p = json_array_get(pts, j),
			     *e = json_array_get(p, 0), *v = json_array_get(p, 1);
		if (!json_is_array(p) || json_array_size(p) != 2 ||
		    !json_is_integer(e) || json_integer_value(e) < 0 ||
		    !json_is_number(v) || !isfinite(json_number_value(v)))
			return apf_error(APF_EINPUT, name,
					 "runs[%zu].points[%zu]: not [examples "
					 "(an integer >= 0), value (a finite "
					 "number)]",
					 i, j);
		r->examples[j] = (uint64_t)json_integer_value(e);
		r->value[j] = json_number_value(v);
		if (j && r->examples[j] < r->examples[j - 1])
			return apf_error(APF_EINPUT, name,
					 "runs[%zu].points[%zu]: examples go "
					 "back (%" PRIu64 " after %" PRIu64 ")",
					 i, j, r->examples[j], r->examples[j - 1]);
		r->n = j + 1;
	}
	return 0;
}

static int from_json(apf_refcurve *c, const json_t *root, const char *name,
		     const char *workload)
{
	if (!json_is_object(root))
		return apf_error(APF_EINPUT, name, "not a JSON object");
	const char *key;
	const json_t *val;
	json_object_foreach((json_t *)root, key, val)
	{
		size_t k = 0;
		while (top_keys[k] && strcmp(top_keys[k], key))
			k++;
		if (!top_keys[k])
			return apf_error(APF_EINPUT, name, "%s: unknown key",
					 key);
	}
	const char *format = json_string_value(json_object_get(root, "format"));
	if (!format || strcmp(format, APF_REFCURVE_FORMAT))
		return apf_error(APF_EINPUT, name, "format: not \"%s\"",
				 APF_REFCURVE_FORMAT);
	const char *w = json_string_value(json_object_get(root, "workload"));
	if (!w)
		return apf_error(APF_EINPUT, name,
				 "workload: missing, or not a string");
	if (workload && strcmp(w, workload))
		return apf_error(APF_EINPUT, name,
				 "workload: %s, but the file is %s's", w,
				 workload);
	const char *m = json_string_value(json_object_get(root, "metric"));
	if (!m || !*m)
		return apf_error(APF_EINPUT, name,
				 "metric: missing, or not a non-empty string");
	const char *d = json_string_value(json_object_get(root, "direction"));
	if (!d || (strcmp(d, "max") && strcmp(d, "min")))
		return apf_error(APF_EINPUT, name,
				 "direction: not \"max\" or \"min\"");
	const json_t *prov = json_object_get(root, "provenance");
	if (prov && !json_is_object(prov))
		return apf_error(APF_EINPUT, name,
				 "provenance: not an object");
	const json_t *runs = json_object_get(root, "runs");
	if (!json_is_array(runs) || !json_array_size(runs))
		return apf_error(APF_EINPUT, name,
				 "runs: missing, or not a non-empty array");
	c->direction = d[1] == 'a' ? 1 : -1;
	c->workload = apf_strdup(w);
	c->metric = apf_strdup(m);
	c->runs = apf_calloc(json_array_size(runs), sizeof *c->runs);
	if (!c->workload || !c->metric || !c->runs)
		return apf_error(APF_ENOMEM, name, "out of memory");
	for (size_t i = 0; i < json_array_size(runs); i++) {
		c->nruns = i + 1;
		int rc = read_run(&c->runs[i], json_array_get(runs, i), i, name);
		if (rc)
			return rc;
	}
	return 0;
}

int apf_refcurve_parse(apf_refcurve **out, const char *text, size_t len,
		       const char *name, const char *workload)
{
	*out = NULL;
	apf_refcurve *c = apf_calloc(1, sizeof *c);
	if (!c || !(c->path = apf_strdup(name))) {
		free(c);
		return apf_error(APF_ENOMEM, name, "out of memory");
	}
	json_error_t err;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	int rc = root ? from_json(c, root, name, workload)
		      : apf_error(APF_EINPUT, name, "line %d: %s", err.line,
				  err.text);
	json_decref(root);
	if (rc) {
		apf_refcurve_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int apf_refcurve_load(apf_refcurve **out, const char *workloads_dir,
		      const char *workload)
{
	*out = NULL;
	apf_buf p = {0};
	if (apf_buf_printf(&p, "%s/%s/%s.json", workloads_dir,
			   APF_REFCURVE_DIR, workload))
		return apf_error(APF_ENOMEM, workload, "out of memory");
	struct stat st;
	int rc = 0;
	if (stat(p.data, &st) == 0) {
		char *text = NULL;
		size_t len = 0;
		rc = apf_file_read(&text, &len, p.data, APF_MAX_REFCURVE_BYTES);
		if (!rc)
			rc = apf_refcurve_parse(out, text, len, p.data, workload);
		free(text);
	}
	apf_buf_free(&p);
	return rc;
}

/* ---- the rule ------------------------------------------------------------- */

int apf_refcurve_meets(double value, double level, int direction)
{
	return direction > 0 ? value >= level : value <= level;
}

void apf_refcurve_bound(struct apf_refcurve_bound *out, const apf_refcurve *c,
			double level)
{
	memset(out, 0, sizeof *out);
	uint64_t most = 0;
	const char *most_run = c->nruns ? c->runs[0].label : NULL;
	for (size_t i = 0; i < c->nruns; i++) {
		const struct refrun *r = &c->runs[i];
		double best = NAN;
		size_t j;
		for (j = 0; j < r->n; j++) {
			double v = r->value[j];
			if (isnan(best) || apf_refcurve_meets(v, best, c->direction))
				best = v;
			if (apf_refcurve_meets(best, level, c->direction))
				break;
		}
		if (j == r->n) {
			/* It never got there: it had seen all its examples
			 * without. */
			if (r->examples[r->n - 1] > most) {
				most = r->examples[r->n - 1];
				most_run = r->label;
			}
			continue;
		}
		/* Its best so far was still short at eval j - 1. */
		uint64_t below = j ? r->examples[j - 1] : 0;
		if (!out->reached || below < out->below) {
			out->below = below;
			out->run = r->label;
		}
		if (!out->reached || r->examples[j] < out->first)
			out->first = r->examples[j];
		out->reached = 1;
	}
	if (!out->reached) {
		out->below = most;
		out->run = most_run;
	}
}

void apf_refcurve_judge(struct apf_refcurve_verdict *out,
			const apf_refcurve *c, double level,
			uint64_t batch_size, const uint64_t *steps,
			const double *values, size_t n)
{
	memset(out, 0, sizeof *out);
	out->level = level;
	out->batch_size = batch_size;
	out->ratio = INFINITY;
	size_t i = 0;
	while (i < n && !apf_refcurve_meets(values[i], level, c->direction))
		i++;
	if (i == n)
		return;
	out->met = 1;
	out->value = values[i];
	out->global_step = steps[i];
	out->examples = batch_size && steps[i] > UINT64_MAX / batch_size
				? UINT64_MAX
				: steps[i] * batch_size;
	apf_refcurve_bound(&out->ref, c, level);
	if (out->ref.below > 0)
		out->ratio = (double)out->examples / (double)out->ref.below;
	out->implausible = batch_size > 0 && out->ref.below > 0 &&
			   (double)out->examples <
				   APF_REFCURVE_FACTOR * (double)out->ref.below;
}

int apf_refcurve_describe(apf_buf *out, const apf_refcurve *c,
			  const char *unit,
			  const struct apf_refcurve_verdict *v)
{
	int rc = apf_buf_printf(out,
				"%s reached validation/%s %.6g (its target) "
				"after %" PRIu64 " examples (step %" PRIu64
				" x batch %" PRIu64 "): %.3g of the %" PRIu64
				" examples ",
				unit, c->metric, v->level, v->examples,
				v->global_step, v->batch_size, v->ratio,
				v->ref.below);
	if (!rc && v->ref.reached)
		rc = apf_buf_printf(out,
				    "by which no reference run had reached it "
				    "(the last eval below it: %s; first "
				    "reached at %" PRIu64 "; %s)",
				    v->ref.run, v->ref.first, c->path);
	else if (!rc)
		rc = apf_buf_printf(out,
				    "in which no reference run reached it (the "
				    "longest: %s; %s)",
				    v->ref.run, c->path);
	if (!rc)
		rc = apf_buf_printf(out, ", %s " APF_REFCURVE_FACTOR_TEXT,
				    v->implausible ? "under" : "not under");
	return rc ? apf_error(APF_ENOMEM, "refcurve", "out of memory") : 0;
}
