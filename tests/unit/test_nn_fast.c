/*
 * test_nn_fast.c: the CPU backend's fast (AVX2/FMA) kernels against its
 * plain ones, the oracle (apf_backend_cpu_plain_new): every layer the fast
 * kernels take, on the fmnist_cnn shapes and on odd ones (partial tiles,
 * strides, 5x5 kernels, shapes that fall back), forward and backward, write
 * and accumulate modes, one and two threads. The two agree to a tight
 * tolerance; each is bit-identical with itself run to run.
 *
 * Skips where the CPU has no AVX2/FMA: apf_backend_cpu_new is then the
 * plain backend, which test_nn.c covers.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/cpu/fast.h"

static float *rand_floats(apf_rng *r, size_t n, float lo, float hi)
{
	float *x = malloc(n * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = lo + (hi - lo) * apf_rng_uniform(r);
	return x;
}

static float *floats(size_t n, float v)
{
	float *x = malloc((n ? n : 1) * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = v;
	return x;
}

/* |got - want| <= tol * (1 + max |want|): scaled to the array, tight enough
 * that a wrong tap, channel or pixel shows (those are off by O(max)). */
static void assert_close(const char *what, const float *got, const float *want,
			 size_t n, double tol)
{
	double mx = 0;
	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(want[i]));
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= tol * (1 + mx)))
			fail_msg("%s[%zu] = %.8g, plain %.8g (max %.3g)", what,
				 i, got[i], want[i], mx);
}

static void require_fast(void)
{
	if (!apf_cpu_fast_supported())
		SKIP_BECAUSE("this CPU has no AVX2/FMA, so no fast kernels");
}

struct conv_shape {
	int B, H, W, C, OC, K, S, P, bias;
};

struct conv_out {
	float *y, *dx, *dxacc, *dw, *db;
};

static void conv_run(apf_backend *be, const struct conv_shape *s,
		     const float *x, const float *w, const float *bias,
		     const float *dy, struct conv_out *o)
{
	int OH = (s->H + 2 * s->P - s->K) / s->S + 1;
	int OW = (s->W + 2 * s->P - s->K) / s->S + 1;
	size_t nx = (size_t)s->B * s->H * s->W * s->C;
	size_t ny = (size_t)s->B * OH * OW * s->OC;
	size_t nw = (size_t)s->OC * s->K * s->K * s->C;
	size_t work = be->conv2d_work(be, s->B, s->H, s->W, s->C, s->OC, s->K,
				      s->S, s->P);
	float *ws = floats(work, NAN); /* garbage the kernels must not read */
	o->y = floats(ny, NAN);
	o->dx = floats(nx, NAN);
	o->dxacc = floats(nx, 0.5f);
	o->dw = floats(nw, NAN);
	o->db = floats((size_t)s->OC, NAN);
	be->conv2d_forward(be, o->y, x, w, s->bias ? bias : NULL, s->B, s->H,
			   s->W, s->C, s->OC, s->K, s->S, s->P, ws);
	be->conv2d_backward(be, o->dx, o->dw, s->bias ? o->db : NULL, dy, x, w,
			    s->B, s->H, s->W, s->C, s->OC, s->K, s->S, s->P,
			    ws, 0);
	float *dw2 = floats(nw, NAN);
	be->conv2d_backward(be, o->dxacc, dw2, NULL, dy, x, w, s->B, s->H,
			    s->W, s->C, s->OC, s->K, s->S, s->P, ws, 1);
	assert_memory_equal(dw2, o->dw, nw * sizeof *dw2);
	free(dw2);
	free(ws);
}

static void conv_out_free(struct conv_out *o)
{
	free(o->y), free(o->dx), free(o->dxacc), free(o->dw), free(o->db);
}

static void conv_compare(const struct conv_shape *s, int threads)
{
	apf_backend *plain, *fast;
	assert_apf_ok(apf_backend_cpu_plain_new(&plain, threads));
	assert_apf_ok(apf_backend_cpu_new(&fast, threads));
	int OH = (s->H + 2 * s->P - s->K) / s->S + 1;
	int OW = (s->W + 2 * s->P - s->K) / s->S + 1;
	size_t nx = (size_t)s->B * s->H * s->W * s->C;
	size_t ny = (size_t)s->B * OH * OW * s->OC;
	size_t nw = (size_t)s->OC * s->K * s->K * s->C;
	apf_rng_key key = {11, (uint32_t)s->C, (uint32_t)s->OC, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)(s->H * 100 + s->K * 10 + s->S));
	float *x = rand_floats(&r, nx, -1, 1), *w = rand_floats(&r, nw, -0.5f, 0.5f);
	float *b = rand_floats(&r, (size_t)s->OC, -1, 1);
	float *dy = rand_floats(&r, ny, -1, 1);
	struct conv_out p, f, f2;
	conv_run(plain, s, x, w, b, dy, &p);
	conv_run(fast, s, x, w, b, dy, &f);
	conv_run(fast, s, x, w, b, dy, &f2);
	char what[160];
	snprintf(what, sizeof what, "conv B%d %dx%dx%d->%d K%d S%d P%d t%d",
		 s->B, s->H, s->W, s->C, s->OC, s->K, s->S, s->P, threads);
	assert_close(what, f.y, p.y, ny, 1e-5);
	assert_close(what, f.dx, p.dx, nx, 1e-5);
	assert_close(what, f.dw, p.dw, nw, 1e-5);
	if (s->bias)
		assert_close(what, f.db, p.db, (size_t)s->OC, 1e-5);
	/* accumulate adds exactly what write mode writes */
	for (size_t i = 0; i < nx; i++)
		if (f.dxacc[i] != 0.5f + f.dx[i])
			fail_msg("%s: accumulate [%zu] = %.8g, want 0.5 + %.8g",
				 what, i, f.dxacc[i], f.dx[i]);
	/* the fast path is deterministic with itself */
	assert_memory_equal(f.y, f2.y, ny * sizeof(float));
	assert_memory_equal(f.dx, f2.dx, nx * sizeof(float));
	assert_memory_equal(f.dw, f2.dw, nw * sizeof(float));
	conv_out_free(&p), conv_out_free(&f), conv_out_free(&f2);
	free(x), free(w), free(b), free(dy);
	apf_backend_free(plain);
	apf_backend_free(fast);
}

static void fast_conv_matches_plain_on_fmnist_cnn_shapes(void **state)
{
	(void)state;
	require_fast();
	static const struct conv_shape shapes[] = {
		{3, 28, 28, 1, 16, 3, 1, 1, 0},   /* stem */
		{3, 28, 28, 16, 16, 3, 1, 1, 0},  /* stage 1 */
		{3, 28, 28, 16, 32, 3, 2, 1, 0},  /* stage 2, first conv */
		{3, 28, 28, 16, 32, 1, 2, 0, 0},  /* stage 2 projection */
		{3, 14, 14, 32, 32, 3, 1, 1, 0},
		{3, 14, 14, 32, 64, 3, 2, 1, 0},
		{3, 14, 14, 32, 64, 1, 2, 0, 0},
		{3, 7, 7, 64, 64, 3, 1, 1, 1},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		for (int threads = 1; threads <= 2; threads++)
			conv_compare(&shapes[i], threads);
}

static void fast_conv_matches_plain_on_odd_shapes(void **state)
{
	(void)state;
	require_fast();
	static const struct conv_shape shapes[] = {
		{2, 9, 7, 16, 16, 5, 2, 2, 1},  /* 5x5, stride 2, odd sizes */
		{2, 7, 7, 16, 16, 3, 2, 1, 0},  /* stride 2 onto an odd map */
		{2, 6, 5, 32, 20, 3, 1, 1, 1},  /* forward falls back */
		{2, 5, 6, 24, 16, 3, 1, 0, 0},  /* input gradient falls back */
		{1, 4, 4, 16, 16, 3, 1, 2, 0},  /* padding wider than needed */
		{5, 3, 3, 8, 16, 3, 3, 1, 1},   /* stride 3, one pixel per row */
		{1, 11, 13, 48, 48, 3, 1, 1, 0},/* several 16-channel blocks */
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		for (int threads = 1; threads <= 2; threads++)
			conv_compare(&shapes[i], threads);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fast_conv_matches_plain_on_fmnist_cnn_shapes),
		cmocka_unit_test(fast_conv_matches_plain_on_odd_shapes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
