/*
 * portmodel.c: see portmodel.h.
 *
 * Everything the model is made of (a, w0, the targets) is drawn here from
 * a fixed splitmix64 stream and handed to PyTorch as bits, so the two
 * sides never compute the problem twice.
 */
#include "portmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/base.h"
#include "testlib.h"
#include "trial/trial.h"

const struct portmodel_param portmodel_params[PORTMODEL_NPARAMS] = {
	{"fc.weight", "weight", 2, {8, 12}, 0, 96},
	{"fc.bias", "bias", 1, {8}, 96, 8},
	{"conv.weight", "conv_weight", 4, {6, 3, 3, 2}, 104, 108},
	{"emb.weight", "embedding", 2, {10, 4}, 212, 40},
	{"norm.scale", "norm_scale", 1, {5}, 252, 5},
};

static const int kinds[PORTMODEL_NPARAMS] = {
	APF_PARAM_WEIGHT, APF_PARAM_BIAS, APF_PARAM_CONV_WEIGHT,
	APF_PARAM_EMBEDDING, APF_PARAM_NORM_SCALE,
};

struct model {
	double a[PORTMODEL_N];
	float w0[PORTMODEL_N];
	double *targets;   /* steps x n */
	int steps;
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
	return (double)(splitmix64(s) >> 11) * 0x1p-53;
}

static void model_make(struct model *m, int steps)
{
	uint64_t s = 2024;
	double centre[PORTMODEL_N], phase[PORTMODEL_N];
	for (int k = 0; k < PORTMODEL_NPARAMS; k++) {
		const struct portmodel_param *p = &portmodel_params[k];
		for (size_t j = 0; j < p->numel; j++) {
			size_t i = p->offset + j;
			m->a[i] = 0.05 * pow(100.0, uniform(&s));
			/* norm scales start near 1, the rest around 0 */
			double w = 2 * uniform(&s) - 1;
			m->w0[i] = (float)(kinds[k] == APF_PARAM_NORM_SCALE
						   ? 1 + 0.2 * w
						   : w);
			centre[i] = 0.8 * (2 * uniform(&s) - 1);
			phase[i] = 6.283185307179586 * uniform(&s);
		}
	}
	m->steps = steps;
	m->targets = apf_calloc((size_t)steps * PORTMODEL_N, sizeof(double));
	for (int t = 0; t < steps; t++)
		for (int i = 0; i < PORTMODEL_N; i++)
			m->targets[(size_t)t * PORTMODEL_N + i] =
				centre[i] + 0.5 * sin(0.9 * t + phase[i]);
}

static int model_loss_grad(void *user, const float *w, const apf_batch *b,
			   uint64_t step, double *loss, float *g)
{
	(void)b;
	const struct model *m = user;
	if (step >= (uint64_t)m->steps)
		return apf_error(APF_EINTERNAL, "portmodel",
				 "step %llu past the %d targets",
				 (unsigned long long)step, m->steps);
	const double *c = m->targets + step * PORTMODEL_N;
	*loss = 0;
	for (int i = 0; i < PORTMODEL_N; i++) {
		double d = (double)w[i] - c[i];
		*loss += 0.5 * m->a[i] * d * d;
		g[i] = (float)(m->a[i] * d);
	}
	return 0;
}

static int model_init(void *user, float *w, float *state)
{
	(void)state;
	const struct model *m = user;
	memcpy(w, m->w0, sizeof m->w0);
	return 0;
}

/* Tensor k's kind: the case's, or the table's. */
static const char *kind_name(const struct portmodel_opts *o, int k)
{
	return o->kinds ? o->kinds[k] : portmodel_params[k].kind;
}

static int kind_of(const char *name)
{
	static const char *const names[] = {
		[APF_PARAM_WEIGHT] = "weight",
		[APF_PARAM_BIAS] = "bias",
		[APF_PARAM_CONV_WEIGHT] = "conv_weight",
		[APF_PARAM_NORM_SCALE] = "norm_scale",
		[APF_PARAM_NORM_BIAS] = "norm_bias",
		[APF_PARAM_EMBEDDING] = "embedding",
	};
	for (int k = 1; k < (int)(sizeof names / sizeof *names); k++)
		if (names[k] && !strcmp(names[k], name))
			return k;
	return -1;
}

static json_t *model_json(const struct portmodel_opts *o)
{
	json_t *hp = json_object(), *params = json_array();
	for (size_t i = 0; i < o->nhp; i++)
		json_object_set_new(hp, o->hp_names[i],
				    o->hp_words && o->hp_words[i]
					    ? json_string(o->hp_words[i])
					    : json_real(o->hp_values[i]));
	for (int k = 0; k < PORTMODEL_NPARAMS; k++) {
		const struct portmodel_param *p = &portmodel_params[k];
		json_t *shape = json_array();
		for (int d = 0; d < p->ndim; d++)
			json_array_append_new(shape, json_integer(p->shape[d]));
		json_array_append_new(
			params, json_pack("{s:s, s:s, s:o, s:I, s:I}", "name",
					  p->name, "kind", kind_name(o, k),
					  "shape", shape,
					  "offset", (json_int_t)p->offset, "numel",
					  (json_int_t)p->numel));
	}
	return json_pack("{s:s, s:i, s:I, s:o, s:o}", "port", o->port, "steps",
			 o->steps, "step_hint", (json_int_t)o->step_hint,
			 "hparams", hp, "params", params);
}

int portmodel_run(const struct portmodel_opts *o, const char *dir)
{
	for (int k = 0; k < PORTMODEL_NPARAMS; k++)
		if (kind_of(kind_name(o, k)) < 0)
			return apf_error(APF_EINPUT, "portmodel",
					 "%s: no kind '%s'",
					 portmodel_params[k].name, kind_name(o, k));
	struct model m;
	model_make(&m, o->steps);
	apf_param table[PORTMODEL_NPARAMS];
	memset(table, 0, sizeof table);
	for (int k = 0; k < PORTMODEL_NPARAMS; k++) {
		const struct portmodel_param *p = &portmodel_params[k];
		snprintf(table[k].name, sizeof table[k].name, "%s", p->name);
		table[k].kind = kind_of(kind_name(o, k));
		table[k].ndim = p->ndim;
		memcpy(table[k].shape, p->shape, sizeof p->shape);
		table[k].offset = p->offset;
		table[k].numel = p->numel;
	}
	struct apf_objective obj = {.user = &m,
				    .nparams = PORTMODEL_NPARAMS,
				    .params = table,
				    .param_floats = PORTMODEL_N,
				    .loss_grad = model_loss_grad,
				    .init = model_init};
	struct apf_trial_info info = {.workload = "portmodel",
				      .variant = "base",
				      .metric = "loss",
				      .device = "cpu",
				      .max_runtime_s = 100,
				      .max_steps = o->step_hint,
				      .step_hint = o->step_hint};
	apf_hparams hp = {0};
	hp.n = o->nhp;
	hp.names = apf_calloc(o->nhp + 1, sizeof(char *));
	hp.values = apf_calloc(o->nhp + 1, sizeof(double));
	hp.words = apf_calloc(o->nhp + 1, sizeof(char *));
	for (size_t i = 0; i < o->nhp; i++) {
		hp.names[i] = apf_strdup(o->hp_names[i]);
		hp.values[i] = o->hp_values[i];
		if (o->hp_words && o->hp_words[i]) {
			hp.values[i] = NAN;
			hp.words[i] = apf_strdup(o->hp_words[i]);
		}
	}

	char *src = apf_path_join(testlib_root(), o->submission);
	char *inc = apf_path_join(testlib_root(), "include");
	char *so = apf_path_join(dir, "sub.so");
	apf_submission *sub = NULL;
	apf_backend *be = NULL;
	apf_trial *trial = NULL;
	/* the runner's room for slots (pkg/host/host.c's SLOT_FACTOR): 16
	 * times the parameters, which Shampoo's factors need on small ones */
	size_t cap = apf_arena_capacity(PORTMODEL_N, 0, 16);
	void *arena = apf_calloc(1, cap);
	float *trace = apf_calloc((size_t)o->steps * PORTMODEL_N, sizeof(float));
	int rc = apf_submission_build(src, inc, so, NULL);
	if (!rc)
		rc = apf_submission_load(&sub, so);
	if (!rc)
		rc = apf_backend_cpu_new(&be, 1);
	if (!rc)
		rc = apf_trial_new(&trial, &obj, be, sub, &hp, &info, arena, cap);
	if (!rc)
		rc = apf_trial_init(trial);
	for (int t = 0; !rc && t < o->steps; t++) {
		int complete = 0;
		rc = apf_trial_step(trial, &complete);
		if (!rc && complete)
			rc = apf_error(APF_EINPUT, o->submission,
				       "ended training at step %d", t + 1);
		if (!rc)
			memcpy(trace + (size_t)t * PORTMODEL_N,
			       apf_arena_params(arena), PORTMODEL_N * sizeof(float));
	}
	if (!rc) {
		json_t *j = model_json(o);
		char *js = json_dumps(j, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
		json_decref(j);
		testlib_write_str(dir, "model.json", js);
		free(js);
		testlib_write(dir, "w0.bin", m.w0, sizeof m.w0, 0644);
		testlib_write(dir, "a.bin", m.a, sizeof m.a, 0644);
		testlib_write(dir, "targets.bin", m.targets,
			      (size_t)o->steps * PORTMODEL_N * sizeof(double),
			      0644);
		testlib_write(dir, "apf.bin", trace,
			      (size_t)o->steps * PORTMODEL_N * sizeof(float),
			      0644);
	}
	apf_trial_free(trial);
	apf_submission_free(sub);
	if (be)
		apf_backend_free(be);
	free(trace);
	free(arena);
	free(so);
	free(inc);
	free(src);
	free(m.targets);
	apf_hparams_free(&hp);
	return rc;
}
