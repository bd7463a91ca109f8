/*
 * wlcheck.c: what the tests of whole workloads share (wlcheck.h).
 */
#include "testlib.h"
#include "wlcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

json_t *wlcheck_params(const apf_net *net)
{
	json_t *jp = json_array();
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		json_t *shape = json_array();
		for (int k = 0; k < p->ndim; k++)
			json_array_append_new(shape, json_integer(p->shape[k]));
		json_array_append_new(
			jp, json_pack("{s:s, s:o, s:I, s:I}", "name", p->name,
				      "shape", shape, "offset",
				      (json_int_t)p->offset, "numel",
				      (json_int_t)p->numel));
	}
	return jp;
}

void wlcheck_batch(struct wlcheck_batch *c, const apf_workload_spec *w,
		   const char *variant, int B)
{
	assert_apf_ok(apf_backend_cpu_new(&c->be, 2));
	apf_trial_key key = {11, 0, 3};
	assert_apf_ok(apf_workload_open(&c->wl, w, variant, c->be, &key, 0));
	c->net = apf_workload_net(c->wl);
	c->np = apf_net_param_floats(c->net);
	c->params = calloc(c->np, sizeof *c->params);
	c->grads = calloc(c->np, sizeof *c->grads);
	assert_non_null(c->params);
	assert_non_null(c->grads);
	assert_apf_ok(apf_workload_bind(c->wl, c->params, NULL));
	assert_apf_ok(apf_workload_init(c->wl));
	apf_rng_key rk = {5, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &rk, 0);
	for (size_t i = 0; i < c->np; i++)
		c->params[i] += 0.02f * apf_rng_normal(&r);
	apf_data_pos pos = {0, 0};
	assert_apf_ok(apf_workload_next_batch(&c->b, c->wl, &pos, B));
	assert_apf_ok(apf_workload_loss_grad(c->wl, &c->b, 0, &c->loss,
					     c->grads));
}

void wlcheck_batch_free(struct wlcheck_batch *c)
{
	apf_workload_bind(c->wl, NULL, NULL);
	apf_workload_close(c->wl);
	free(c->params);
	free(c->grads);
	apf_backend_free(c->be);
}

static double *run_torch(const char *script, const char *dir, size_t np)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, TESTLIB_PYTHON " %s/tests/unit/lib/%s %s",
		 testlib_root(), script, dir);
	assert_int_equal(system(cmd), 0);
	size_t len;
	double *t = (double *)testlib_read(dir, "torch.bin", &len);
	assert_int_equal(len, (1 + np) * sizeof(double));
	return t;
}

void wlcheck_torch(const struct wlcheck_batch *c, const char *script,
		   const char *dir, json_t *m, const char *what)
{
	char *js = json_dumps(m, 0);
	testlib_write_str(dir, "model.json", js);
	free(js);
	json_decref(m);
	testlib_write(dir, "params.bin", c->params, c->np * sizeof(float), 0644);
	double *t = run_torch(script, dir, c->np);
	wlcheck_compare(what, c->net, c->loss, c->grads, t);
	free(t);
}

struct apf_fit_result wlcheck_fit(const apf_workload_spec *w,
				  const char *variant, long steps,
				  long eval_every, int batch, double lr,
				  double b2)
{
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	apf_trial_key key = {2024, 0, 1};
	apf_workload *wl;
	assert_apf_ok(apf_workload_open(&wl, w, variant, be, &key, 0));
	struct apf_fit_opts o = {
		.steps = steps, .batch = batch, .eval_every = eval_every,
		.adamw = {.lr = lr, .b1 = 0.9, .b2 = b2, .eps = 1e-8,
			  .weight_decay = 1e-4, .warmup_frac = 0.05}};
	struct apf_fit_result r;
	assert_apf_ok(apf_workload_fit(&r, wl, &o));
	apf_workload_close(wl);
	apf_backend_free(be);
	return r;
}

void wlcheck_compare(const char *what, const apf_net *net, double loss,
			const float *g, const double *t)
{
	printf("    %s: loss %.8f, PyTorch %.8f\n", what, loss, t[0]);
	if (fabs(loss - t[0]) > 1e-4 * fabs(t[0]))
		fail_msg("%s: loss %.8g, PyTorch %.8g", what, loss, t[0]);
	double worst = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		double scale = 0, err = 0;
		for (size_t j = 0; j < p->numel; j++) {
			double tv = t[1 + p->offset + j];
			scale = fabs(tv) > scale ? fabs(tv) : scale;
			double e = fabs(g[p->offset + j] - tv);
			err = e > err ? e : err;
		}
		if (!(scale > 0)) /* every parameter takes a gradient */
			fail_msg("%s: %s: PyTorch's gradient is 0", what,
				 p->name);
		if (err > 1e-4 * scale)
			fail_msg("%s: %s: gradient off by %.3g of its largest "
				 "%.3g",
				 what, p->name, err, scale);
		worst = err / scale > worst ? err / scale : worst;
	}
	printf("    %s: gradients within %.2g of PyTorch's, relative\n", what,
	       worst);
}
