/*
 * test_unet.c: the fmnist_unet workload on Fashion-MNIST (Debian's
 * dataset-fashion-mnist; skipped with the reason when absent): the
 * corruption (a fixed function of each image, below the target in SSIM,
 * the model's input differing from its target), the whole U-Net's loss and
 * gradients against PyTorch (python3-torch, float64, same weights and
 * batch; skipped when torch is absent) to 1e-4 relative for every variant,
 * the same steps twice giving the same parameters bit for bit, and a short
 * AdamW run lifting the validation SSIM above the zero-filled input's.
 */
#include "testlib.h"
#include "wlcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "workload/recon.h"
#include "workload/workload.h"

/* 300 AdamW steps of 32 images (seed 2024, 2 threads): validation SSIM
 * 0.746, PSNR 18.9 dB, where the zero-filled input scores about 0.68 (the
 * first test prints it). */
#define SHORT_RUN_STEPS 300
#define SHORT_RUN_TARGET 0.72

static apf_workload_spec *load_unet(void)
{
	apf_workload_spec *w;
	assert_apf_ok(apf_workload_spec_load(&w, "fmnist_unet"));
	char *p = apf_path_join(w->dataset_path, "train-images-idx3-ubyte.gz");
	int ok = access(p, R_OK) == 0;
	free(p);
	if (!ok) {
		apf_workload_spec_free(w);
		SKIP_BECAUSE("no Fashion-MNIST at /usr/share/datasets/"
			     "fashion-mnist (Debian's dataset-fashion-mnist)");
	}
	return w;
}

static apf_workload *open_unet(const apf_workload_spec *w, const char *variant,
			       apf_backend **be, int threads)
{
	assert_apf_ok(apf_backend_cpu_new(be, threads));
	apf_trial_key key = {11, 0, 3};
	apf_workload *wl;
	assert_apf_ok(apf_workload_open(&wl, w, variant, *be, &key, 0));
	return wl;
}

/* The input is the target seen through the k-space mask: not the target,
 * the same each time the image is drawn, and far below it in SSIM. */
static void the_input_is_the_image_corrupted_the_same_way_each_time(void **state)
{
	(void)state;
	apf_workload_spec *w = load_unet();
	apf_backend *be;
	apf_workload *wl = open_unet(w, "base", &be, 1);
	enum { B = 16, N = 28 * 28 };
	apf_data_pos pos = {0, 0};
	apf_batch b;
	assert_apf_ok(apf_workload_next_batch(&b, wl, &pos, B));
	assert_int_equal(b.ny, N);
	assert_non_null(b.yf);
	float x[B * N], y[B * N];
	memcpy(x, b.x, sizeof x);
	memcpy(y, b.yf, sizeof y);
	double ssim = 0, diff = 0;
	for (int i = 0; i < B; i++) {
		float peak = 0;
		for (int k = 0; k < N; k++) {
			peak = y[i * N + k] > peak ? y[i * N + k] : peak;
			diff += fabs(x[i * N + k] - y[i * N + k]);
			assert_true(y[i * N + k] >= 0 && y[i * N + k] <= 1);
		}
		ssim += apf_ssim(x + i * N, y + i * N, 28, 28, peak);
	}
	ssim /= B;
	printf("    zero-filled input: SSIM %.3f, mean |input - target| %.4f\n",
	       ssim, diff / (B * N));
	assert_true(ssim < 0.7);
	assert_true(diff / (B * N) > 0.01);
	/* The same images from the same position: the same inputs. */
	apf_data_pos again = {0, 0};
	assert_apf_ok(apf_workload_next_batch(&b, wl, &again, B));
	assert_memory_equal(b.x, x, sizeof x);
	assert_memory_equal(b.yf, y, sizeof y);
	apf_workload_close(wl);
	apf_backend_free(be);
	apf_workload_spec_free(w);
}

static void check_variant(const apf_workload_spec *w, const char *variant)
{
	enum { B = 4 };
	struct wlcheck_batch c;
	wlcheck_batch(&c, w, variant, B);
	char *dir = testlib_tmpdir();
	long depth;
	const char *norm, *act;
	assert_apf_ok(apf_model_long(&depth, w, variant, "depth", 2, 1, 4));
	apf_model_string(&norm, w, variant, "norm", "instance");
	apf_model_string(&act, w, variant, "activation", "relu");
	json_t *m = json_pack("{s:i, s:i, s:i, s:I, s:s, s:s, s:o}", "batch", B,
			      "H", 28, "W", 28, "depth", (json_int_t)depth,
			      "norm", norm, "activation", act, "params",
			      wlcheck_params(c.net));
	testlib_write(dir, "x.bin", c.b.x, (size_t)B * 784 * sizeof(float),
		      0644);
	testlib_write(dir, "yf.bin", c.b.yf, (size_t)B * 784 * sizeof(float),
		      0644);
	wlcheck_torch(&c, "unet_torch.py", dir, m, variant);
	testlib_tmpdir_free(dir);
	wlcheck_batch_free(&c);
}

static void loss_and_gradients_match_pytorch(void **state)
{
	(void)state;
	apf_workload_spec *w = load_unet();
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
	return wlcheck_fit(w, variant, steps, eval_every, 32, 2e-3, 0.999);
}

static void same_steps_twice_give_identical_parameters(void **state)
{
	(void)state;
	apf_workload_spec *w = load_unet();
	for (int v = 0; v < 2; v++) {
		const char *variant = v ? "layernorm" : "base";
		struct apf_fit_result a = fit(w, 6, -1, variant);
		struct apf_fit_result b = fit(w, 6, -1, variant);
		assert_memory_equal(a.digest, b.digest, 32);
		assert_true(a.last_loss == b.last_loss);
	}
	apf_workload_spec_free(w);
}

static void short_run_reaches_stated_validation_ssim(void **state)
{
	(void)state;
	apf_workload_spec *w = load_unet();
	struct apf_fit_result r = fit(w, SHORT_RUN_STEPS, 0, "base");
	const struct apf_split_metrics *va = &r.last.split[APF_SPLIT_VALIDATION];
	printf("    %d steps: validation SSIM %.4f, PSNR %.2f dB, L1 %.4f "
	       "(%.1f s)\n",
	       SHORT_RUN_STEPS, va->ssim, va->psnr, va->l1_loss,
	       r.train_seconds);
	assert_true(va->ssim > SHORT_RUN_TARGET && va->ssim <= 1.0);
	assert_true(va->psnr > 10.0);
	assert_true(va->loss == va->l1_loss);
	/* the spec's first eval_examples of the 5000 validation images */
	assert_true(w->eval_examples > 0 && w->eval_examples <= 5000);
	assert_int_equal(va->n, w->eval_examples);
	apf_workload_spec_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_input_is_the_image_corrupted_the_same_way_each_time),
		cmocka_unit_test(loss_and_gradients_match_pytorch),
		cmocka_unit_test(same_steps_twice_give_identical_parameters),
		cmocka_unit_test(short_run_reaches_stated_validation_ssim),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
