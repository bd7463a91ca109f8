/*
 * test_workload.c: workload.ini loading, strict validation with line
 * numbers, variants and the workloads directory lookup.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "workload/workload.h"

static const char *good =
	"[workload]\nname = w\nmodel = mlp\nloss = cross_entropy\n"
	"metric = accuracy\ndirection = max\nvalidation_target = 0.9\n"
	"test_target = 0.89\nmax_steps = 10\n"
	"[dataset]\nname = d\npath = data\n"
	"[model]\nwidth = 4\nactivation = relu\n"
	"[budget.cpu]\nmax_runtime_s = 60\neval_period_s = 5\n"
	"[variant.gelu]\nactivation = gelu\ntest_target = 0.8\n";

static apf_workload_spec *load_text(const char *text, int expect)
{
	char *root = testlib_tmpdir();
	testlib_write_str(root, "w/workload.ini", text);
	char *dir = apf_path_join(root, "w");
	apf_workload_spec *w = NULL;
	assert_int_equal(apf_workload_spec_load_dir(&w, dir), expect);
	if (w)
		assert_string_equal(w->dataset_path + strlen(w->dir), "/data");
	free(dir);
	testlib_tmpdir_free(root);
	return w;
}

static void loads_fields_and_variants(void **state)
{
	(void)state;
	apf_workload_spec *w = load_text(good, 0);
	assert_string_equal(w->name, "w");
	assert_int_equal(w->direction, 1);
	assert_true(w->validation_target == 0.9);
	assert_int_equal(w->max_steps, 10);
	assert_true(w->targets_provisional);
	assert_true(w->cpu.eval_period_s == 5);
	assert_null(apf_workload_budget(w, "cuda"));
	assert_int_equal(w->nvariants, 1);
	const struct apf_workload_variant *v = apf_workload_variant(w, "gelu");
	assert_non_null(v);
	assert_true(v->validation_target == 0.9);
	assert_true(v->test_target == 0.8);
	assert_null(apf_workload_variant(w, "nope"));
	assert_string_equal(apf_workload_model_value(w, "gelu", "activation"),
			    "gelu");
	assert_string_equal(apf_workload_model_value(w, "gelu", "width"), "4");
	assert_string_equal(apf_workload_model_value(w, NULL, "activation"),
			    "relu");
	assert_true(apf_workload_meets(1, 0.91, 0.9));
	assert_false(apf_workload_meets(-1, 0.91, 0.9));
	apf_workload_spec_free(w);
}

static void refuses_typos_with_line_numbers(void **state)
{
	(void)state;
	char *t = malloc(strlen(good) + 64);
	strcpy(t, good);
	strcat(t, "[budget.gpu]\nmax_runtime = 3\n");
	assert_null(load_text(t, APF_EINPUT));
	assert_string_equal(strstr(apf_error_message(), "line"),
			    "line 23: [budget.gpu] max_runtime: unknown key");
	strcpy(t, good);
	strcat(t, "[variant.x]\nwdth = 8\n");
	assert_null(load_text(t, APF_EINPUT));
	assert_non_null(strstr(apf_error_message(), "[variant.x] wdth"));
	strcpy(t, good);
	strcat(t, "[extra]\na = 1\n");
	assert_null(load_text(t, APF_EINPUT));
	assert_non_null(strstr(apf_error_message(), "[extra]: unknown section"));
	free(t);
	const char *bad_dir = "[workload]\nname = w\nmodel = m\nloss = l\n"
			      "metric = a\ndirection = up\n";
	assert_null(load_text(bad_dir, APF_EINPUT));
	assert_non_null(strstr(apf_error_message(), "expected max or min"));
}

static void name_must_match_directory(void **state)
{
	(void)state;
	char *t = strdup(good);
	memcpy(strstr(t, "name = w"), "name = v", 8);
	assert_null(load_text(t, APF_EINPUT));
	assert_non_null(strstr(apf_error_message(), "differs from its directory"));
	free(t);
}

static void finds_workloads_through_environment(void **state)
{
	(void)state;
	char *root = apf_path_join(testlib_root(), "tests/data/workloads");
	setenv("APF_WORKLOADS_DIR", root, 1);
	char **names;
	size_t n;
	assert_apf_ok(apf_workloads_list(&names, &n));
	assert_int_equal(n, 3);
	assert_string_equal(names[0], "blobs_mlp");
	assert_string_equal(names[1], "tiny");
	assert_string_equal(names[2], "toy");
	apf_workloads_list_free(names, n);
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load(&w, "tiny"));
	assert_true(apf_is_hex_digest(w->dataset_digest));
	apf_workload_spec_free(w);
	assert_int_equal(apf_workload_spec_load(&w, "absent"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "no such workload"));
	assert_int_equal(apf_workload_spec_load(&w, "../etc"), APF_EINPUT);
	unsetenv("APF_WORKLOADS_DIR");
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(loads_fields_and_variants),
		cmocka_unit_test(refuses_typos_with_line_numbers),
		cmocka_unit_test(name_must_match_directory),
		cmocka_unit_test(finds_workloads_through_environment),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
