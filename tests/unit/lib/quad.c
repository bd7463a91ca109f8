/*
 * quad.c: see quad.h.
 */
#include "quad.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "testlib.h"

const double quad_a[QUAD_N] = {1.0, 0.5, 2.0, 0.1, 3.0, 1.5, 0.7, 1.2, 0.3};
const double quad_c[QUAD_N] = {0.3, -1.0, 0.5, 2.0, -0.2, 0.0, 1.0, -0.5, 0.25};
const double quad_w0[QUAD_N] = {1.0, 0.5, -0.5, 0.0, 0.4, -1.2, 0.3, 0.9, -0.7};

static apf_param table[2];

static int quad_loss_grad(void *user, const float *w, const apf_batch *b,
			  uint64_t step, double *loss, float *g)
{
	(void)user;
	(void)b;
	(void)step;
	*loss = 0;
	for (int i = 0; i < QUAD_N; i++) {
		double d = (double)w[i] - quad_c[i];
		*loss += 0.5 * quad_a[i] * d * d;
		g[i] = (float)(quad_a[i] * d);
	}
	return 0;
}

static int quad_init(void *user, float *w, float *state)
{
	(void)user;
	(void)state;
	for (int i = 0; i < QUAD_N; i++)
		w[i] = (float)quad_w0[i];
	return 0;
}

int quad_build(struct quad_run *r, const char *src)
{
	memset(r, 0, sizeof *r);
	r->dir = testlib_tmpdir();
	char *srcdir = src[0] == '/' ? apf_strdup(src)
				     : apf_path_join(testlib_root(), src);
	char *inc = apf_path_join(testlib_root(), "include");
	char *so = apf_path_join(r->dir, "sub.so");
	int rc = apf_submission_build(srcdir, inc, so, NULL);
	free(srcdir);
	free(inc);
	free(so);
	return rc;
}

int quad_start(struct quad_run *r, const apf_hparams *hp, const void *arena)
{
	return quad_start_on(r, hp, arena, 0);
}

int quad_start_on(struct quad_run *r, const apf_hparams *hp, const void *arena,
		  int device_memory)
{
	char *so = apf_path_join(r->dir, "sub.so");
	int rc = apf_submission_load(&r->sub, so);
	free(so);
	if (rc)
		return rc;
	rc = apf_backend_cpu_new(&r->be, 1);
	if (rc)
		return rc;
	r->be->device_memory = device_memory;
	memset(table, 0, sizeof table);
	strcpy(table[0].name, "layer.weight");
	table[0].kind = APF_PARAM_WEIGHT;
	table[0].ndim = 2, table[0].shape[0] = 2, table[0].shape[1] = 3;
	table[0].numel = QUAD_NW;
	strcpy(table[1].name, "layer.bias");
	table[1].kind = APF_PARAM_BIAS;
	table[1].ndim = 1, table[1].shape[0] = QUAD_NB;
	table[1].offset = QUAD_NW, table[1].numel = QUAD_NB;
	struct apf_objective obj = {.nparams = 2, .params = table,
				    .param_floats = QUAD_N,
				    .loss_grad = quad_loss_grad,
				    .init = quad_init};
	struct apf_trial_info info = {.workload = "quadratic",
				      .variant = "base",
				      .metric = "loss",
				      .device = "cpu",
				      .max_runtime_s = 100,
				      .step_hint = QUAD_STEP_HINT};
	r->cap = apf_arena_capacity(QUAD_N, 0, 8);
	r->arena = calloc(1, r->cap);
	if (arena)
		memcpy(r->arena, arena, ((const struct apf_arena_header *)arena)->used);
	rc = apf_trial_new(&r->trial, &obj, r->be, r->sub, hp, &info, r->arena,
			   r->cap);
	return rc ? rc : apf_trial_init(r->trial);
}

void quad_finish(struct quad_run *r)
{
	apf_trial_free(r->trial);
	apf_submission_free(r->sub);
	if (r->be)
		apf_backend_free(r->be);
	free(r->arena);
	testlib_tmpdir_free(r->dir);
	memset(r, 0, sizeof *r);
}

apf_hparams quad_hparams(const char **names, const double *values, size_t n)
{
	apf_hparams h = {0};
	h.n = n;
	h.names = apf_calloc(n, sizeof(char *));
	h.values = apf_calloc(n, sizeof(double));
	h.words = apf_calloc(n, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		h.names[i] = apf_strdup(names[i]);
		h.values[i] = values[i];
	}
	return h;
}
