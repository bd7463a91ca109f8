/*
 * test_text_lm.c: the text_lm workload on its real corpus (cut from
 * Debian's fortunes by make into datasets/fortunes; skipped with the reason
 * when absent): the whole Transformer's loss and gradients against PyTorch
 * (Debian's python3-torch, in float64, on the same weights and batch;
 * skipped when torch is absent) to 1e-4 relative for every variant, the
 * windows' labels being their tokens shifted by one, the same steps twice
 * giving the same parameters bit for bit, and a short AdamW run reaching a
 * stated validation cross-entropy.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "workload/workload.h"

/* 300 AdamW steps of 32 windows (seed 2024, 2 threads) bring validation
 * from the uniform 5.55 nats/byte to 2.526 (perplexity 12.5, next-byte
 * accuracy 0.294), well below predicting the byte frequencies (3.31): the
 * model reads context. */
#define SHORT_RUN_STEPS 300
#define SHORT_RUN_TARGET 2.7

static apf_workload_spec *load_text(void)
{
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load(&w, "text_lm"));
	char *p = apf_path_join(w->dataset_path, "train.tab");
	int ok = access(p, R_OK) == 0;
	free(p);
	if (!ok) {
		apf_workload_spec_free(w);
		SKIP_BECAUSE("datasets/fortunes is not generated (make all "
			     "writes it from Debian's fortunes package)");
	}
	return w;
}

static void batch_labels_are_the_next_tokens(void **state)
{
	(void)state;
	apf_workload_spec *w = load_text();
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_trial_key key = {3, 0, 0};
	apf_workload *wl;
	assert_apf_ok(apf_workload_open(&wl, w, "base", be, &key, 0));
	int T, V;
	assert_apf_ok(apf_workload_tokens(w, &T, &V));
	assert_int_equal(T, 64);
	assert_int_equal(V, 256);
	apf_data_pos pos = {0, 0};
	apf_batch b;
	assert_apf_ok(apf_workload_next_batch(wl, &pos, 5, &b));
	assert_int_equal(b.ny, T);
	for (int i = 0; i < 5; i++)
		for (int t = 0; t < T; t++)
			assert_int_equal(b.y[i * T + t],
					 b.host_xi[i * (T + 1) + t + 1]);
	/* the windows are the corpus's text: mostly printable bytes */
	int printable = 0;
	for (int i = 0; i < 5 * (T + 1); i++)
		printable += (b.host_xi[i] >= 32 && b.host_xi[i] < 127) ||
			     b.host_xi[i] == '\n' || b.host_xi[i] == '\t';
	assert_true(printable > 5 * (T + 1) * 9 / 10);
	apf_workload_close(wl);
	apf_backend_free(be);
	apf_workload_spec_free(w);
}

/* loss and gradients of one batch against PyTorch's, for a variant */
static void check_variant(const apf_workload_spec *w, const char *variant)
{
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	apf_trial_key key = {11, 0, 3};
	apf_workload *wl;
	assert_apf_ok(apf_workload_open(&wl, w, variant, be, &key, 0));
	apf_net *net = apf_workload_net(wl);
	size_t np = apf_net_param_floats(net);
	float *params = calloc(np, sizeof *params), *g = calloc(np, sizeof *g);
	assert_apf_ok(apf_workload_bind(wl, params, NULL));
	assert_apf_ok(apf_workload_init(wl));
	/* move biases and norm parameters off 0 / 1 so theirs matter too */
	apf_rng_key rk = {5, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &rk, 0);
	for (size_t i = 0; i < np; i++)
		params[i] += 0.02f * apf_rng_normal(&r);
	enum { B = 6 };
	int T, V;
	assert_apf_ok(apf_workload_tokens(w, &T, &V));
	apf_data_pos pos = {0, 0};
	apf_batch b;
	assert_apf_ok(apf_workload_next_batch(wl, &pos, B, &b));
	double loss;
	assert_apf_ok(apf_workload_loss_grad(wl, &b, 0, &loss, g));

	char *dir = testlib_tmpdir();
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
	long width, layers, heads;
	double temperature;
	const char *norm, *mlp, *act;
	assert_apf_ok(apf_model_long(w, variant, "width", 0, 0, 1 << 20, &width));
	assert_apf_ok(apf_model_long(w, variant, "layers", 0, 0, 64, &layers));
	assert_apf_ok(apf_model_long(w, variant, "heads", 0, 0, 64, &heads));
	assert_apf_ok(apf_model_double(w, variant, "temperature", 1, 0, 1e3,
				       &temperature));
	apf_model_string(w, variant, "norm", "pre", &norm);
	apf_model_string(w, variant, "mlp", "plain", &mlp);
	apf_model_string(w, variant, "activation", "gelu", &act);
	json_t *m = json_pack("{s:i, s:i, s:I, s:I, s:I, s:f, s:s, s:s, s:s, "
			      "s:o}",
			      "batch", B, "context", T, "width",
			      (json_int_t)width, "layers", (json_int_t)layers,
			      "heads", (json_int_t)heads, "temperature",
			      temperature, "norm", norm, "mlp", mlp,
			      "activation", act, "params", jp);
	char *js = json_dumps(m, 0);
	testlib_write_str(dir, "model.json", js);
	free(js);
	json_decref(m);
	testlib_write(dir, "params.bin", params, np * sizeof(float), 0644);
	testlib_write(dir, "xi.bin", b.host_xi,
		      (size_t)B * (T + 1) * sizeof(int32_t), 0644);
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 TESTLIB_PYTHON " %s/tests/unit/lib/lm_torch.py %s",
		 testlib_root(), dir);
	assert_int_equal(system(cmd), 0);
	size_t len;
	double *t = (double *)testlib_read(dir, "torch.bin", &len);
	assert_int_equal(len, (1 + np) * sizeof(double));
	printf("    %s: loss %.8f, PyTorch %.8f\n", variant, loss, t[0]);
	if (fabs(loss - t[0]) > 1e-4 * fabs(t[0]))
		fail_msg("%s: loss %.8g, PyTorch %.8g", variant, loss, t[0]);
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
		assert_true(scale > 0); /* every parameter takes a gradient */
		if (err > 1e-4 * scale)
			fail_msg("%s: %s: gradient off by %.3g of its largest "
				 "%.3g",
				 variant, p->name, err, scale);
		worst = err / scale > worst ? err / scale : worst;
	}
	printf("    %s: gradients within %.2g of PyTorch's, relative\n",
	       variant, worst);
	free(t);
	testlib_tmpdir_free(dir);
	apf_workload_bind(wl, NULL, NULL);
	apf_workload_close(wl);
	free(params);
	free(g);
	apf_backend_free(be);
}

static void loss_and_gradients_match_pytorch(void **state)
{
	(void)state;
	apf_workload_spec *w = load_text();
	if (!testlib_have_torch()) {
		apf_workload_spec_free(w);
		SKIP_BECAUSE("no PyTorch at " TESTLIB_PYTHON
			     " (Debian's python3-torch; make deps installs it)");
	}
	check_variant(w, "base");
	for (size_t i = 0; i < w->nvariants; i++)
		check_variant(w, w->variants[i].name);
	apf_workload_spec_free(w);
}

static struct apf_fit_result fit(const apf_workload_spec *w, long steps,
				 long eval_every, const char *variant)
{
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	apf_trial_key key = {2024, 0, 1};
	apf_workload *wl;
	assert_apf_ok(apf_workload_open(&wl, w, variant, be, &key, 0));
	struct apf_fit_opts o = {
		.steps = steps, .batch = 32, .eval_every = eval_every,
		.adamw = {.lr = 2e-3, .b1 = 0.9, .b2 = 0.99, .eps = 1e-8,
			  .weight_decay = 1e-4, .warmup_frac = 0.05}};
	struct apf_fit_result r;
	assert_apf_ok(apf_workload_fit(wl, &o, &r));
	apf_workload_close(wl);
	apf_backend_free(be);
	return r;
}

static void same_steps_twice_give_identical_parameters(void **state)
{
	(void)state;
	apf_workload_spec *w = load_text();
	for (int v = 0; v < 2; v++) {
		const char *variant = v ? "glu" : "base";
		struct apf_fit_result a = fit(w, 8, -1, variant);
		struct apf_fit_result b = fit(w, 8, -1, variant);
		assert_memory_equal(a.digest, b.digest, 32);
		assert_true(a.last_loss == b.last_loss);
	}
	apf_workload_spec_free(w);
}

static void short_run_reaches_stated_validation_cross_entropy(void **state)
{
	(void)state;
	apf_workload_spec *w = load_text();
	struct apf_fit_result r = fit(w, SHORT_RUN_STEPS, 0, "base");
	const struct apf_split_metrics *va = &r.last.split[APF_SPLIT_VALIDATION];
	printf("    %d steps: validation cross-entropy %.4f nats/byte, "
	       "perplexity %.2f, next-byte accuracy %.3f (%.1f s)\n",
	       SHORT_RUN_STEPS, va->cross_entropy, va->perplexity,
	       va->accuracy, r.train_seconds);
	assert_true(va->cross_entropy < SHORT_RUN_TARGET);
	assert_true(fabs(va->perplexity - exp(va->cross_entropy)) <
		    1e-9 * va->perplexity);
	assert_int_equal(va->n, 1210);
	apf_workload_spec_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(batch_labels_are_the_next_tokens),
		cmocka_unit_test(loss_and_gradients_match_pytorch),
		cmocka_unit_test(same_steps_twice_give_identical_parameters),
		cmocka_unit_test(short_run_reaches_stated_validation_cross_entropy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
