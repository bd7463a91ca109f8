/*
 * test_dlrm.c: the clicks_dlrm workload on its real click log (built by
 * make into datasets/clicks; skipped with the reason when absent): the
 * whole model's loss and gradients against PyTorch (Debian's
 * python3-torch, in float64, on the same weights and batch; skipped when
 * torch is absent) to 1e-4 relative for three variants, the same steps
 * twice give the same parameters bit for bit, and a short AdamW run
 * reaches a stated validation log loss.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "wlcheck.h"
#include "workload/workload.h"

/* 800 AdamW steps of 256 (one epoch is 781): the validation log loss is
 * then 0.3665, AUC 0.839 (seed 2024, 2 threads; the teacher's floor is
 * 0.2771, the click rate's entropy 0.498). */
#define SHORT_RUN_TARGET 0.37

static apf_workload_spec *load_clicks(void)
{
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load(&w, "clicks_dlrm"));
	char *p = apf_path_join(w->dataset_path, "train.tab");
	int ok = access(p, R_OK) == 0;
	free(p);
	if (!ok) {
		apf_workload_spec_free(w);
		SKIP_BECAUSE("datasets/clicks is not generated (make all "
			     "writes it)");
	}
	return w;
}

static json_t *widths_json(const apf_workload_spec *w, const char *v,
			   const char *key)
{
	json_t *a = json_array();
	const char *s = apf_workload_model_value(w, v, key);
	for (const char *p = s; p && *p;) {
		char *end;
		long x = strtol(p, &end, 10);
		json_array_append_new(a, json_integer(x));
		p = *end == ',' ? end + 1 : end;
		if (end == p && !*end)
			break;
	}
	return a;
}

/* loss and gradients of one batch against PyTorch's, for a variant */
static void check_variant(const apf_workload_spec *w, const char *variant)
{
	enum { B = 64 };
	struct wlcheck_batch c;
	wlcheck_batch(&c, w, variant, B);
	char *dir = testlib_tmpdir();
	int rows[64], ncat;
	assert_apf_ok(apf_workload_table_rows(w, rows, 64, &ncat));
	json_t *jr = json_array();
	for (int f = 0; f < ncat; f++)
		json_array_append_new(jr, json_integer(rows[f]));
	long residual = 0;
	assert_apf_ok(apf_model_long(&residual, w, variant, "top_residual", 0, 0,
				     1));
	const char *norm;
	apf_model_string(&norm, w, variant, "norm", "none");
	json_t *m = json_pack("{s:i, s:i, s:o, s:o, s:o, s:s, s:I, s:o}",
			      "batch", B, "n_dense", 13, "rows", jr, "bottom",
			      widths_json(w, variant, "bottom"), "top",
			      widths_json(w, variant, "top"), "norm", norm,
			      "top_residual", (json_int_t)residual, "params",
			      wlcheck_params(c.net));
	testlib_write(dir, "x.bin", c.b.x, (size_t)B * 13 * sizeof(float), 0644);
	testlib_write(dir, "xi.bin", c.b.host_xi,
		      (size_t)B * ncat * sizeof(int32_t), 0644);
	testlib_write(dir, "y.bin", c.b.y, (size_t)B * sizeof(int32_t), 0644);
	wlcheck_torch(&c, "dlrm_torch.py", dir, m, variant);
	testlib_tmpdir_free(dir);
	wlcheck_batch_free(&c);
}

static void loss_and_gradients_match_pytorch(void **state)
{
	(void)state;
	apf_workload_spec *w = load_clicks();
	if (!testlib_have_torch()) {
		apf_workload_spec_free(w);
		SKIP_BECAUSE("no PyTorch at " TESTLIB_PYTHON " (Debian's python3-torch; "
			     "make deps installs it)");
	}
	check_variant(w, "base");
	check_variant(w, "layernorm");
	check_variant(w, "residual");
	apf_workload_spec_free(w);
}

static struct apf_fit_result fit(const apf_workload_spec *w, long steps,
				 long eval_every, const char *variant)
{
	return wlcheck_fit(w, variant, steps, eval_every, 256, 1e-3, 0.999);
}

static void same_steps_twice_give_identical_parameters(void **state)
{
	(void)state;
	apf_workload_spec *w = load_clicks();
	for (int v = 0; v < 2; v++) {
		const char *variant = v ? "embed_init" : "base";
		struct apf_fit_result a = fit(w, 60, -1, variant);
		struct apf_fit_result b = fit(w, 60, -1, variant);
		assert_memory_equal(a.digest, b.digest, 32);
		assert_true(a.last_loss == b.last_loss);
	}
	apf_workload_spec_free(w);
}

static void short_run_reaches_stated_validation_log_loss(void **state)
{
	(void)state;
	apf_workload_spec *w = load_clicks();
	struct apf_fit_result r = fit(w, 800, 0, "base");
	const struct apf_split_metrics *va = &r.last.split[APF_SPLIT_VALIDATION];
	printf("    800 steps: validation log loss %.4f, AUC %.4f (%.1f s)\n",
	       va->log_loss, va->auc, r.train_seconds);
	assert_true(va->log_loss < SHORT_RUN_TARGET);
	assert_true(va->auc > 0.8);
	/* the spec's first eval_examples of the 20000 validation rows */
	assert_true(w->eval_examples > 0 && w->eval_examples <= 20000);
	assert_int_equal(va->n, w->eval_examples);
	apf_workload_spec_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(loss_and_gradients_match_pytorch),
		cmocka_unit_test(same_steps_twice_give_identical_parameters),
		cmocka_unit_test(short_run_reaches_stated_validation_log_loss),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
