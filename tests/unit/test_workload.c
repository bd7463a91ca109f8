/*
 * test_workload.c: workload.ini loading, strict validation with line
 * numbers, variants and the workloads directory lookup.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	assert_int_equal(n, 4);
	assert_string_equal(names[0], "blobs_mlp");
	assert_string_equal(names[1], "blobs_steps");
	assert_string_equal(names[2], "tiny");
	assert_string_equal(names[3], "toy");
	apf_workloads_list_free(names, n);
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load(&w, "tiny"));
	assert_true(apf_is_hex_digest(w->dataset_digest));
	apf_workload_spec_free(w);
	assert_int_equal(apf_workload_spec_load(&w, "absent"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "no such workload in "));
	/* It says where it looked and what is there. */
	assert_non_null(strstr(apf_error_message(), root));
	assert_non_null(strstr(apf_error_message(),
			       "workloads there: blobs_mlp, blobs_steps, tiny, toy"));
	assert_int_equal(apf_workload_spec_load(&w, "../etc"), APF_EINPUT);
	unsetenv("APF_WORKLOADS_DIR");
	free(root);
}

static size_t numel_sum(apf_workload *wl)
{
	apf_net *net = apf_workload_net(wl);
	size_t n = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++)
		n += apf_net_param(net, i)->numel;
	return n;
}

/* The parameter count a listing shows (the model opened without data)
 * against the length of the parameter vector of the model opened on its
 * dataset, as a trial opens it. Returns the listing's count. */
static size_t listed_equals_trained(const char *dir, const char *variant)
{
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load_dir(&w, dir));
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_workload *listed, *trained;
	assert_apf_ok(apf_workload_open(&listed, w, variant, be, NULL,
					APF_WORKLOAD_NO_DATA));
	assert_true(apf_workload_shape_known(listed));
	assert_apf_ok(apf_workload_open(&trained, w, variant, be, NULL, 0));
	assert_true(apf_workload_shape_known(trained));
	size_t n = numel_sum(listed);
	assert_int_equal(n, numel_sum(trained));
	assert_int_equal(apf_net_param_floats(apf_workload_net(listed)),
			 apf_net_param_floats(apf_workload_net(trained)));
	apf_workload_close(listed);
	apf_workload_close(trained);
	apf_backend_free(be);
	apf_workload_spec_free(w);
	return n;
}

static void listing_counts_blobs_mlp_on_its_8x8_inputs(void **state)
{
	(void)state;
	char *dir = apf_path_join(testlib_root(),
				  "tests/data/workloads/blobs_mlp");
	/* 64-32-10 with biases, not 784 inputs */
	assert_int_equal(listed_equals_trained(dir, "base"),
			 64 * 32 + 32 + 32 * 10 + 10);
	assert_int_equal(listed_equals_trained(dir, "gelu"), 2410);
	free(dir);
}

/* A trial's workload before the clock: built for the training split's
 * layout, holding no example, refusing batches; the split attached at go
 * must have that layout. */
static void deferred_split_comes_at_go_with_its_layout(void **state)
{
	(void)state;
	char *dir = apf_path_join(testlib_root(),
				  "tests/data/workloads/blobs_mlp");
	apf_workload_spec *w;
	apf_backend *be;
	assert_int_equal(apf_workload_spec_load_dir(&w, dir), 0);
	assert_int_equal(apf_backend_cpu_new(&be, 1), 0);
	apf_trial_key key = {1, 0, 1};
	apf_workload *host, *trial;
	assert_int_equal(apf_workload_open(&host, w, "base", be, &key, 0), 0);
	struct apf_train_layout l;
	assert_int_equal(apf_workload_train_layout(&l, host), 0);
	assert_true(l.H == 8 && l.W == 8 && l.C == 1 && l.classes == 10 && l.n > 0);
	int fd = -1;
	assert_int_equal(apf_dataset_export_train(&fd, apf_workload_dataset(host)),
			 0);

	assert_int_equal(apf_workload_open_deferred(&trial, w, "base", be, &key, &l),
			 0);
	assert_null(apf_workload_dataset(trial));
	apf_data_pos pos = {0, 0};
	apf_batch b;
	assert_int_not_equal(apf_workload_next_batch(&b, trial, &pos, 8), 0);
	apf_error_clear();
	assert_int_equal(apf_workload_attach_train(trial, fd), 0);
	assert_int_equal(apf_workload_next_batch(&b, trial, &pos, 8), 0);
	/* Once only. */
	assert_int_not_equal(apf_workload_attach_train(trial, fd), 0);
	apf_error_clear();
	apf_workload_close(trial);

	/* A model built for another layout refuses the split. */
	struct apf_train_layout other = l;
	other.n += 1;
	assert_int_equal(apf_workload_open_deferred(&trial, w, "base", be, &key,
						    &other),
			 0);
	assert_int_equal(apf_workload_attach_train(trial, fd), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "the model was built for"));
	apf_error_clear();
	apf_workload_close(trial);
	close(fd);
	apf_workload_close(host);
	apf_backend_free(be);
	apf_workload_spec_free(w);
	free(dir);
}

static void listing_counts_fashion_mnist_models_as_trained(void **state)
{
	(void)state;
	char *mlp = apf_path_join(testlib_root(), "workloads/fmnist_mlp");
	char *cnn = apf_path_join(testlib_root(), "workloads/fmnist_cnn");
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load_dir(&w, mlp));
	char *images = apf_path_join(w->dataset_path,
				     "train-images-idx3-ubyte.gz");
	int have = access(images, R_OK) == 0;
	free(images);
	apf_workload_spec_free(w);
	if (!have) {
		free(mlp);
		free(cnn);
		SKIP_BECAUSE("Fashion-MNIST not found (the Debian package "
			     "dataset-fashion-mnist; make deps installs it)");
	}
	assert_int_equal(listed_equals_trained(mlp, "base"),
			 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 +
				 10);
	assert_int_equal(listed_equals_trained(mlp, "narrow"),
			 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
	assert_true(listed_equals_trained(cnn, "base") > 0);
	assert_true(listed_equals_trained(cnn, "wide") >
		    listed_equals_trained(cnn, "base"));
	free(mlp);
	free(cnn);
}

/* A spec whose training images are not there (not named, not installed)
 * still opens for a listing, saying its shape is not known; one whose
 * images file is not IDX images is refused naming the file. */
static void listing_without_images_says_the_shape_is_unknown(void **state)
{
	(void)state;
	const char *texts[] = {
		"[workload]\nname = w\nmodel = mlp\nloss = cross_entropy\n"
		"metric = accuracy\ndirection = max\nvalidation_target = 0.9\n"
		"test_target = 0.89\n[dataset]\nname = d\npath = data\n"
		"[model]\nhidden = 4\n"
		"[budget.cpu]\nmax_runtime_s = 60\neval_period_s = 5\n",
		"[workload]\nname = w\nmodel = mlp\nloss = cross_entropy\n"
		"metric = accuracy\ndirection = max\nvalidation_target = 0.9\n"
		"test_target = 0.89\n[dataset]\nname = d\npath = data\n"
		"train_images = train.gz\n[model]\nhidden = 4\n"
		"[budget.cpu]\nmax_runtime_s = 60\neval_period_s = 5\n",
	};
	char *root = testlib_tmpdir();
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	for (int i = 0; i < 2; i++) {
		testlib_write_str(root, "w/workload.ini", texts[i]);
		char *dir = apf_path_join(root, "w");
		apf_workload_spec *w;
		assert_apf_ok(apf_workload_spec_load_dir(&w, dir));
		apf_workload *wl;
		assert_apf_ok(apf_workload_open(&wl, w, "base", be, NULL,
						APF_WORKLOAD_NO_DATA));
		assert_false(apf_workload_shape_known(wl));
		apf_workload_close(wl);
		if (i == 1) {
			testlib_write_str(root, "w/data/train.gz", "not idx");
			assert_int_equal(apf_workload_open(&wl, w, "base", be,
							   NULL,
							   APF_WORKLOAD_NO_DATA),
					 APF_EINPUT);
			assert_non_null(
				strstr(apf_error_message(), "data/train.gz: "));
			assert_int_equal(strncmp(apf_error_message(), "w: ", 3),
					 0);
		}
		apf_workload_spec_free(w);
		free(dir);
	}
	apf_backend_free(be);
	testlib_tmpdir_free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(loads_fields_and_variants),
		cmocka_unit_test(refuses_typos_with_line_numbers),
		cmocka_unit_test(name_must_match_directory),
		cmocka_unit_test(finds_workloads_through_environment),
		cmocka_unit_test(listing_counts_blobs_mlp_on_its_8x8_inputs),
		cmocka_unit_test(deferred_split_comes_at_go_with_its_layout),
		cmocka_unit_test(listing_counts_fashion_mnist_models_as_trained),
		cmocka_unit_test(listing_without_images_says_the_shape_is_unknown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
