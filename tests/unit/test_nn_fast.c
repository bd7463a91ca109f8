/*
 * test_nn_fast.c: the CPU backend's fast kernels (direct and Winograd
 * convolutions, fused batch norm) against its plain ones, the oracle
 * (apf_backend_cpu_plain_new): every layer the fast kernels take, on the
 * fmnist_cnn shapes and on odd ones (partial tiles, strides, 5x5 kernels,
 * shapes that fall back), forward and backward, write and accumulate modes,
 * one and two threads. The two agree to a tight tolerance; each is
 * bit-identical with itself run to run.
 *
 * And the contract across CPUs (fast.h): the same layers, and a whole
 * ResNet's step, give the same bits on every instruction-set path this CPU
 * runs (APF_CPU_ISA forces each), at one and at two threads, on shapes
 * chosen to reach every kernel's edge cases: partial pixel tiles, 16 and
 * 48 channels (the AVX-512 tile's 32 + 16), channel counts its 16 lanes do
 * not divide (8, 24: the AVX2 kernels take over), inputs of fewer than 8
 * channels (the weight gradient's lanes over output channels),
 * kernel rows that leave one or two columns (the 8-row weight-gradient
 * tiles), batch-norm channels past the last 16 and 8. Where the CPU has only the scalar path there is
 * nothing to compare, and those tests say so by skipping.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"
#include "nn/nn.h"
#include "nn/cpu/fast.h"
#include "nn/cpu/isa.h"

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

/* The default backend on path isa (APF_CPU_ISA, as a run sets it). */
static apf_backend *backend_on(int isa, int threads)
{
	apf_backend *be;
	assert_int_equal(setenv("APF_CPU_ISA", apf_cpu_isa_name(isa), 1), 0);
	assert_apf_ok(apf_backend_cpu_new(&be, threads));
	unsetenv("APF_CPU_ISA");
	return be;
}

/* The paths besides scalar this CPU runs; skips the test where none. */
static unsigned vector_paths(void)
{
	unsigned have = apf_cpu_isa_available() & ~(1u << APF_CPU_ISA_SCALAR);
	if (!have)
		SKIP_BECAUSE("this CPU runs the scalar path only: no second "
			     "path to compare");
	return have;
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
	static const struct conv_shape shapes[] = {
		{2, 9, 7, 16, 16, 5, 2, 2, 1},  /* 5x5, stride 2, odd sizes */
		{2, 7, 7, 16, 16, 3, 2, 1, 0},  /* stride 2 onto an odd map */
		{2, 6, 5, 32, 20, 3, 1, 1, 1},  /* forward falls back */
		{2, 5, 6, 24, 16, 3, 1, 0, 0},  /* input gradient falls back */
		{1, 4, 4, 16, 16, 3, 1, 2, 0},  /* padding wider than needed */
		{5, 3, 3, 8, 16, 3, 3, 1, 1},   /* stride 3, one pixel per row */
		{1, 11, 13, 48, 48, 3, 1, 1, 0},/* several 16-channel blocks */
		{3, 9, 7, 3, 24, 3, 1, 1, 1},   /* 3 channels: 16 + 8 lanes of OC */
		{2, 6, 5, 12, 32, 3, 1, 1, 0},  /* 12 channels: 36 columns */
		{2, 8, 8, 1, 8, 5, 1, 2, 1},    /* 5x5, 8 output channels */
		{2, 7, 6, 2, 16, 3, 1, 1, 0},   /* 6 columns: 4 + 2 */
		{2, 6, 5, 32, 64, 1, 2, 0, 0},  /* 1x1 of 32 channels */
		{2, 6, 6, 16, 12, 1, 2, 0, 1},  /* 1x1, 12 output channels */
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		for (int threads = 1; threads <= 2; threads++)
			conv_compare(&shapes[i], threads);
}

/* ---- batch norm + ReLU ------------------------------------------------- */

/* The fused layer against the plain backend's batch norm, add and ReLU:
 * forward in training and eval mode, running statistics, and backward from
 * the plain forward's output (so both see the same ReLU mask), write and
 * accumulate modes, with and without a residual. */
static void bn_relu_compare(int N, int C, int with_res, float offset,
			    int threads)
{
	apf_backend *plain, *fast;
	assert_apf_ok(apf_backend_cpu_plain_new(&plain, threads));
	assert_apf_ok(apf_backend_cpu_new(&fast, threads));
	assert_null(plain->batchnorm_relu_forward);
	assert_non_null(fast->batchnorm_relu_forward);
	size_t n = (size_t)N * C;
	apf_rng_key key = {12, (uint32_t)C, (uint32_t)with_res, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)N);
	float *x = rand_floats(&r, n, offset - 1, offset + 2);
	float *res = rand_floats(&r, n, -1, 1), *dy = rand_floats(&r, n, -1, 1);
	float *sc = rand_floats(&r, (size_t)C, 0.5f, 1.5f);
	float *bi = rand_floats(&r, (size_t)C, -0.5f, 0.5f);
	float *y_p = floats(n, NAN), *y_f = floats(n, NAN), *s_p = floats(n, NAN);
	float *m_p = floats((size_t)C, NAN), *r_p = floats((size_t)C, NAN);
	float *m_f = floats((size_t)C, NAN), *r_f = floats((size_t)C, NAN);
	float *rm_p = floats((size_t)C, 0.1f), *rv_p = floats((size_t)C, 2);
	float *rm_f = floats((size_t)C, 0.1f), *rv_f = floats((size_t)C, 2);
	const float *rp = with_res ? res : NULL;
	char what[96];
	snprintf(what, sizeof what, "bn+relu N%d C%d res%d offset %g t%d", N,
		 C, with_res, offset, threads);
	/* forward, training */
	plain->batchnorm_forward(plain, s_p, m_p, r_p, x, sc, bi, rm_p, rv_p, N,
				 C, 0.1f, 1e-5f, 1);
	if (with_res)
		plain->add_forward(plain, s_p, s_p, res, n);
	plain->activation_forward(plain, APF_ACT_RELU, y_p, s_p, n);
	fast->batchnorm_relu_forward(fast, y_f, m_f, r_f, x, rp, sc, bi, rm_f,
				     rv_f, N, C, 0.1f, 1e-5f, 1);
	assert_close(what, y_f, y_p, n, 1e-5);
	assert_close(what, m_f, m_p, (size_t)C, 1e-6);
	assert_close(what, r_f, r_p, (size_t)C, 1e-5);
	assert_close(what, rm_f, rm_p, (size_t)C, 1e-6);
	assert_close(what, rv_f, rv_p, (size_t)C, 1e-5);
	/* forward, eval: the running statistics, touched by neither */
	float *e_f = floats(n, NAN), *e_p = floats(n, NAN);
	plain->batchnorm_forward(plain, s_p, NULL, NULL, x, sc, bi, rm_p, rv_p,
				 N, C, 0.1f, 1e-5f, 0);
	if (with_res)
		plain->add_forward(plain, s_p, s_p, res, n);
	plain->activation_forward(plain, APF_ACT_RELU, e_p, s_p, n);
	fast->batchnorm_relu_forward(fast, e_f, NULL, NULL, x, rp, sc, bi,
				     rm_p, rv_p, N, C, 0.1f, 1e-5f, 0);
	assert_close(what, e_f, e_p, n, 1e-5);
	/* backward: relu, add, batch norm against the fused one */
	float *g = floats(n, NAN), *dx_p = floats(n, NAN), *dx_f = floats(n, NAN);
	float *dr_f = floats(n, NAN);
	float *ds_p = floats((size_t)C, NAN), *db_p = floats((size_t)C, NAN);
	float *ds_f = floats((size_t)C, NAN), *db_f = floats((size_t)C, NAN);
	plain->batchnorm_forward(plain, s_p, m_p, r_p, x, sc, bi, rm_p, rv_p, N,
				 C, 0.1f, 1e-5f, 1);
	if (with_res)
		plain->add_forward(plain, s_p, s_p, res, n);
	plain->activation_forward(plain, APF_ACT_RELU, y_p, s_p, n);
	plain->activation_backward(plain, APF_ACT_RELU, g, dy, s_p, y_p, n, 0);
	plain->batchnorm_backward(plain, dx_p, ds_p, db_p, g, x, sc, m_p, r_p,
				  N, C, 0);
	fast->batchnorm_relu_backward(fast, dx_f, with_res ? dr_f : NULL, ds_f,
				      db_f, dy, y_p, x, sc, m_p, r_p, N, C, 0,
				      0);
	assert_close(what, ds_f, ds_p, (size_t)C, 1e-5);
	assert_close(what, db_f, db_p, (size_t)C, 1e-5);
	assert_close(what, dx_f, dx_p, n, 1e-5);
	if (with_res)
		assert_memory_equal(dr_f, g, n * sizeof *g);
	/* accumulate adds exactly what write mode writes */
	float *ax = floats(n, 0.5f), *ar = floats(n, 0.25f);
	fast->batchnorm_relu_backward(fast, ax, with_res ? ar : NULL, ds_f,
				      db_f, dy, y_p, x, sc, m_p, r_p, N, C, 1,
				      1);
	for (size_t i = 0; i < n; i++) {
		if (ax[i] != 0.5f + dx_f[i])
			fail_msg("%s: accumulate dx[%zu]", what, i);
		if (with_res && ar[i] != 0.25f + dr_f[i])
			fail_msg("%s: accumulate dres[%zu]", what, i);
	}
	/* bit-identical with itself */
	float *y2 = floats(n, NAN), *dx2 = floats(n, NAN);
	fast->batchnorm_relu_forward(fast, y2, m_f, r_f, x, rp, sc, bi, rm_f,
				     rv_f, N, C, 0.1f, 1e-5f, 1);
	fast->batchnorm_relu_forward(fast, y_f, m_f, r_f, x, rp, sc, bi, rm_f,
				     rv_f, N, C, 0.1f, 1e-5f, 1);
	assert_memory_equal(y2, y_f, n * sizeof *y2);
	fast->batchnorm_relu_backward(fast, dx2, NULL, ds_f, db_f, dy, y_p, x,
				      sc, m_p, r_p, N, C, 0, 0);
	assert_memory_equal(dx2, dx_f, n * sizeof *dx2);
	free(x), free(res), free(dy), free(sc), free(bi), free(y_p), free(y_f);
	free(s_p), free(m_p), free(r_p), free(m_f), free(r_f), free(rm_p);
	free(rv_p), free(rm_f), free(rv_f), free(e_f), free(e_p), free(g);
	free(dx_p), free(dx_f), free(dr_f), free(ds_p), free(db_p), free(ds_f);
	free(db_f), free(ax), free(ar), free(y2), free(dx2);
	apf_backend_free(plain);
	apf_backend_free(fast);
}

static void fused_batchnorm_relu_matches_the_three_layers(void **state)
{
	(void)state;
	for (int threads = 1; threads <= 2; threads++) {
		bn_relu_compare(3000, 16, 0, 0.0f, threads); /* threaded rows */
		bn_relu_compare(3000, 16, 1, 0.0f, threads);
		bn_relu_compare(517, 64, 1, 0.0f, threads);
		bn_relu_compare(999, 12, 1, 0.0f, threads);  /* scalar tail */
		bn_relu_compare(40, 3, 0, 0.0f, threads);
		/* a mean far from zero against its spread */
		bn_relu_compare(3000, 16, 0, 300.0f, threads);
	}
}

/* Plain batch norm (no ReLU): the fast backend's two-pass kernels against
 * the plain three-pass ones. */
static void bn_compare(int N, int C, float offset, int threads)
{
	apf_backend *plain, *fast;
	assert_apf_ok(apf_backend_cpu_plain_new(&plain, threads));
	assert_apf_ok(apf_backend_cpu_new(&fast, threads));
	size_t n = (size_t)N * C;
	apf_rng_key key = {14, (uint32_t)C, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)N);
	float *x = rand_floats(&r, n, offset - 1, offset + 2);
	float *dy = rand_floats(&r, n, -1, 1);
	float *sc = rand_floats(&r, (size_t)C, 0.5f, 1.5f);
	float *bi = rand_floats(&r, (size_t)C, -0.5f, 0.5f);
	float *y[2], *m[2], *rs[2], *rm[2], *rv[2], *dx[2], *ds[2], *db[2];
	apf_backend *be[2] = {plain, fast};
	for (int k = 0; k < 2; k++) {
		y[k] = floats(n, NAN), dx[k] = floats(n, NAN);
		m[k] = floats((size_t)C, NAN), rs[k] = floats((size_t)C, NAN);
		rm[k] = floats((size_t)C, 0.1f), rv[k] = floats((size_t)C, 2);
		ds[k] = floats((size_t)C, NAN), db[k] = floats((size_t)C, NAN);
		be[k]->batchnorm_forward(be[k], y[k], m[k], rs[k], x, sc, bi,
					 rm[k], rv[k], N, C, 0.1f, 1e-5f, 1);
		/* both from the plain path's statistics */
		be[k]->batchnorm_backward(be[k], dx[k], ds[k], db[k], dy, x, sc,
					  m[0], rs[0], N, C, 0);
	}
	char what[64];
	snprintf(what, sizeof what, "bn N%d C%d offset %g t%d", N, C, offset,
		 threads);
	assert_close(what, y[1], y[0], n, 1e-5);
	assert_close(what, m[1], m[0], (size_t)C, 1e-6);
	assert_close(what, rs[1], rs[0], (size_t)C, 1e-5);
	assert_close(what, rv[1], rv[0], (size_t)C, 1e-5);
	assert_close(what, dx[1], dx[0], n, 1e-5);
	assert_close(what, ds[1], ds[0], (size_t)C, 1e-5);
	assert_close(what, db[1], db[0], (size_t)C, 1e-5);
	float *acc = floats(n, 0.5f);
	fast->batchnorm_backward(fast, acc, ds[1], db[1], dy, x, sc, m[0], rs[0],
				 N, C, 1);
	for (size_t i = 0; i < n; i++)
		if (acc[i] != 0.5f + dx[1][i])
			fail_msg("%s: accumulate [%zu]", what, i);
	/* eval mode */
	for (int k = 0; k < 2; k++)
		be[k]->batchnorm_forward(be[k], y[k], NULL, NULL, x, sc, bi,
					 rm[0], rv[0], N, C, 0.1f, 1e-5f, 0);
	assert_close(what, y[1], y[0], n, 1e-5);
	for (int k = 0; k < 2; k++) {
		free(y[k]), free(dx[k]), free(m[k]), free(rs[k]), free(rm[k]);
		free(rv[k]), free(ds[k]), free(db[k]);
	}
	free(x), free(dy), free(sc), free(bi), free(acc);
	apf_backend_free(plain);
	apf_backend_free(fast);
}

static void fast_batchnorm_matches_plain(void **state)
{
	(void)state;
	for (int threads = 1; threads <= 2; threads++) {
		bn_compare(3000, 32, 0.0f, threads);
		bn_compare(700, 20, 0.0f, threads);
		bn_compare(3000, 16, -500.0f, threads);
	}
}

/* ---- instance norm + ReLU ------------------------------------------------ */

/* The fused layer against the same backend's instance norm and ReLU, one
 * after the other, bit for bit: forward (output, mean, rstd) and backward
 * in write and accumulate modes and without an input gradient. Image 0's
 * channel 0 is constant and its bias 0, so its norm output is exactly 0
 * and the ReLU passes no gradient there; channel 1's bias pushes most of
 * its outputs below 0. */
static void in_relu_compare(int B, int HW, int C, int threads)
{
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, threads));
	assert_non_null(be->instnorm_relu_forward);
	assert_non_null(be->instnorm_relu_backward);
	size_t n = (size_t)B * HW * C, bc = (size_t)B * C;
	apf_rng_key key = {17, (uint32_t)C, (uint32_t)HW, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)B);
	float *x = rand_floats(&r, n, -1, 2), *dy = rand_floats(&r, n, -1, 1);
	float *sc = rand_floats(&r, (size_t)C, 0.5f, 1.5f);
	float *bi = rand_floats(&r, (size_t)C, -0.5f, 0.5f);
	for (int p = 0; p < HW; p++)
		x[(size_t)p * C] = 0.25f;
	bi[0] = 0.0f;
	if (C > 1)
		bi[1] = -1.5f;
	char what[96];
	snprintf(what, sizeof what, "in+relu B%d HW%d C%d t%d", B, HW, C,
		 threads);
	/* forward: the two layers, then the fused one */
	float *z = floats(n, NAN), *y2 = floats(n, NAN), *y1 = floats(n, NAN);
	float *st2 = floats(2 * bc, NAN), *st1 = floats(2 * bc, NAN);
	be->instnorm_forward(be, z, st2, st2 + bc, x, sc, bi, B, HW, C, 1e-5f);
	be->activation_forward(be, APF_ACT_RELU, y2, z, n);
	be->instnorm_relu_forward(be, y1, st1, st1 + bc, x, sc, bi, B, HW, C,
				  1e-5f);
	if (memcmp(y1, y2, n * 4) || memcmp(st1, st2, 2 * bc * 4))
		fail_msg("%s: forward not the two layers' bits", what);
	size_t zeros = 0;
	for (size_t i = 0; i < n; i++)
		zeros += y1[i] == 0.0f;
	assert_true(zeros > (size_t)HW); /* the mask is exercised */
	/* backward, written, accumulated and without dinp */
	float *dz = floats(n, NAN);
	for (int accum = 0; accum <= 2; accum++) {
		float *dx2 = floats(n, 0.5f), *dx1 = floats(n, 0.5f);
		float *g2 = floats(2 * (size_t)C, NAN), *g1 = floats(2 * (size_t)C, NAN);
		int acc = accum == 1;
		be->activation_backward(be, APF_ACT_RELU, dz, dy, z, y2, n, 0);
		be->instnorm_backward(be, accum == 2 ? NULL : dx2, g2, g2 + C, dz,
				      x, sc, st2, st2 + bc, B, HW, C, acc);
		be->instnorm_relu_backward(be, accum == 2 ? NULL : dx1, g1,
					   g1 + C, dy, y1, x, sc, st1,
					   st1 + bc, B, HW, C, acc);
		if (memcmp(dx1, dx2, n * 4) || memcmp(g1, g2, 2 * (size_t)C * 4))
			fail_msg("%s: backward (mode %d) not the two layers' "
				 "bits", what, accum);
		free(dx2), free(dx1), free(g2), free(g1);
	}
	free(x), free(dy), free(sc), free(bi), free(z), free(y2), free(y1);
	free(st2), free(st1), free(dz);
	apf_backend_free(be);
}

static void fused_instnorm_relu_gives_the_two_layers_bits(void **state)
{
	(void)state;
	for (int threads = 1; threads <= 2; threads++) {
		in_relu_compare(3, 49, 16, threads);
		in_relu_compare(2, 30, 48, threads); /* two channel blocks */
		in_relu_compare(2, 9, 5, threads);
		in_relu_compare(32, 784, 16, threads); /* the U-Net's, pooled */
	}
}

/* A net of instance norm -> ReLU chains (the first on the input, which has
 * no gradient): fused on the fast backend, two layers on the plain one,
 * and the same logits and gradients bit for bit; the fused net stores
 * neither norm's output. */
static apf_net *in_net(apf_backend *be)
{
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 6, 5, 16));
	int t = apf_net_instnorm(net, 0, 1e-5f, "in1");
	t = apf_net_activation(net, t, APF_ACT_RELU);
	t = apf_net_instnorm(net, t, 1e-5f, "in2");
	t = apf_net_activation(net, t, APF_ACT_RELU);
	t = apf_net_global_avgpool(net, t);
	t = apf_net_linear(net, t, 4, 1, "head");
	assert_true(t > 0);
	assert_apf_ok(apf_net_finish(net, t));
	return net;
}

static void in_net_run(apf_backend *be, float *logits, float **grads,
		       size_t *np, double *bytes)
{
	apf_net *net = in_net(be);
	*np = apf_net_param_floats(net);
	*bytes = apf_net_example_bytes(net);
	float *params = calloc(*np, 4);
	*grads = calloc(*np, 4);
	apf_net_bind(net, params, NULL);
	apf_rng_key key = {18, 0, 0, APF_RNG_INIT};
	assert_apf_ok(apf_net_init(net, &key, "kaiming_uniform"));
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		if (!strcmp(p->name, "in2.bias")) /* some channels dead */
			for (size_t k = 0; k < p->numel; k += 3)
				params[p->offset + k] = -0.8f;
	}
	enum { B = 3 };
	apf_rng r;
	apf_rng_init(&r, &key, 1);
	float *x = rand_floats(&r, (size_t)B * 30 * 16, -1, 2);
	float *dl = rand_floats(&r, (size_t)B * 4, -0.1f, 0.1f);
	const float *out;
	assert_apf_ok(apf_net_forward(net, &out, x, B, 1, NULL, 0));
	memcpy(logits, out, B * 4 * sizeof *logits);
	assert_apf_ok(apf_net_backward(net, *grads, dl));
	free(params), free(x), free(dl);
	apf_net_free(net);
}

static void instnorm_relu_net_fused_matches_unfused_bit_for_bit(void **state)
{
	(void)state;
	apf_backend *plain;
	assert_apf_ok(apf_backend_cpu_plain_new(&plain, 1));
	assert_null(plain->instnorm_relu_forward);
	float lp[12], lf[12], *gp, *gf;
	size_t np;
	double bp, bf;
	in_net_run(plain, lp, &gp, &np, &bp);
	for (int threads = 1; threads <= 2; threads++) {
		apf_backend *fast;
		assert_apf_ok(apf_backend_cpu_new(&fast, threads));
		in_net_run(fast, lf, &gf, &np, &bf);
		assert_memory_equal(lf, lp, sizeof lf);
		assert_memory_equal(gf, gp, np * sizeof *gf);
		/* two 6x5x16 norm outputs and their gradients not stored */
		assert_true(bp - bf == 4.0 * 2 * 30 * 16 * sizeof(float));
		free(gf);
		apf_backend_free(fast);
	}
	free(gp);
	apf_backend_free(plain);
}

/* ---- a whole ResNet ------------------------------------------------------ */

/* The fmnist_cnn shape at small size: stem, an identity block, a strided
 * block with a projection; conv-bn-relu and conv-bn-add-relu chains (fused
 * on the fast backend), a projection batch norm that stays unfused. */
static apf_net *resnet(apf_backend *be)
{
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 12, 12, 1));
	int t = apf_net_conv2d(net, 0, 16, 3, 1, 1, 0, "stem");
	t = apf_net_batchnorm(net, t, 0.1f, 1e-5f, "stem.bn");
	t = apf_net_activation(net, t, APF_ACT_RELU);
	int a = apf_net_conv2d(net, t, 16, 3, 1, 1, 0, "b1.a");
	a = apf_net_batchnorm(net, a, 0.1f, 1e-5f, "b1.a.bn");
	a = apf_net_activation(net, a, APF_ACT_RELU);
	a = apf_net_conv2d(net, a, 16, 3, 1, 1, 0, "b1.b");
	a = apf_net_batchnorm(net, a, 0.1f, 1e-5f, "b1.b.bn");
	t = apf_net_activation(net, apf_net_add(net, a, t), APF_ACT_RELU);
	a = apf_net_conv2d(net, t, 32, 3, 2, 1, 0, "b2.a");
	a = apf_net_batchnorm(net, a, 0.1f, 1e-5f, "b2.a.bn");
	a = apf_net_activation(net, a, APF_ACT_RELU);
	a = apf_net_conv2d(net, a, 32, 3, 1, 1, 0, "b2.b");
	a = apf_net_batchnorm(net, a, 0.1f, 1e-5f, "b2.b.bn");
	int p = apf_net_conv2d(net, t, 32, 1, 2, 0, 0, "b2.proj");
	p = apf_net_batchnorm(net, p, 0.1f, 1e-5f, "b2.proj.bn");
	t = apf_net_activation(net, apf_net_add(net, a, p), APF_ACT_RELU);
	t = apf_net_global_avgpool(net, t);
	t = apf_net_linear(net, t, 10, 1, "head");
	assert_true(t > 0);
	assert_apf_ok(apf_net_finish(net, t));
	return net;
}

/* Logits, parameter gradients and running statistics after two training
 * steps' forward and backward (the second from the first's statistics). */
static void resnet_run(apf_backend *be, float **logits, float **grads,
		       float **state, size_t *np, size_t *ns)
{
	apf_net *net = resnet(be);
	*np = apf_net_param_floats(net), *ns = apf_net_state_floats(net);
	float *params = calloc(*np, 4);
	*grads = calloc(*np, 4), *state = calloc(*ns, 4);
	apf_net_bind(net, params, *state);
	apf_rng_key key = {13, 0, 0, APF_RNG_INIT};
	assert_apf_ok(apf_net_init(net, &key, "kaiming_uniform"));
	enum { B = 6 };
	apf_rng r;
	apf_rng_init(&r, &key, 1);
	float *x = rand_floats(&r, (size_t)B * 144, -1, 1);
	float *dl = rand_floats(&r, (size_t)B * 10, -0.1f, 0.1f);
	const float *out;
	*logits = malloc(B * 10 * sizeof **logits);
	for (int step = 0; step < 2; step++) {
		assert_apf_ok(apf_net_forward(net, &out, x, B, 1, NULL, 0));
		memcpy(*logits, out, B * 10 * sizeof **logits);
		assert_apf_ok(apf_net_backward(net, *grads, dl));
	}
	free(params), free(x), free(dl);
	apf_net_free(net);
}

static void fast_resnet_matches_plain_and_repeats_bit_for_bit(void **state)
{
	(void)state;
	apf_backend *plain;
	assert_apf_ok(apf_backend_cpu_plain_new(&plain, 1));
	float *lp, *gp, *sp;
	size_t np, ns;
	resnet_run(plain, &lp, &gp, &sp, &np, &ns);
	for (int threads = 1; threads <= 2; threads++) {
		apf_backend *fast;
		assert_apf_ok(apf_backend_cpu_new(&fast, threads));
		float *lf, *gf, *sf, *lf2, *gf2, *sf2;
		resnet_run(fast, &lf, &gf, &sf, &np, &ns);
		resnet_run(fast, &lf2, &gf2, &sf2, &np, &ns);
		assert_close("resnet logits", lf, lp, 60, 1e-4);
		assert_close("resnet state", sf, sp, ns, 1e-4);
		apf_net *net = resnet(fast);
		for (size_t i = 0; i < apf_net_nparams(net); i++) {
			const apf_param *p = apf_net_param(net, i);
			assert_close(p->name, gf + p->offset, gp + p->offset,
				     p->numel, 1e-4);
		}
		apf_net_free(net);
		assert_memory_equal(lf, lf2, 60 * sizeof *lf);
		assert_memory_equal(gf, gf2, np * sizeof *gf);
		assert_memory_equal(sf, sf2, ns * sizeof *sf);
		free(lf), free(gf), free(sf), free(lf2), free(gf2), free(sf2);
		apf_backend_free(fast);
	}
	free(lp), free(gp), free(sp);
	apf_backend_free(plain);
}

/* ---- the same bits on every path ---------------------------------------- */

/* Every output of the convolution on each vector path against the scalar
 * path's, bit for bit, through the backend (as a trial runs it). */
static void conv_same_bits(const struct conv_shape *s, int threads,
			   unsigned paths)
{
	int OH = (s->H + 2 * s->P - s->K) / s->S + 1;
	int OW = (s->W + 2 * s->P - s->K) / s->S + 1;
	size_t nx = (size_t)s->B * s->H * s->W * s->C;
	size_t ny = (size_t)s->B * OH * OW * s->OC;
	size_t nw = (size_t)s->OC * s->K * s->K * s->C;
	apf_rng_key key = {15, (uint32_t)s->C, (uint32_t)s->OC, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)(s->H * 100 + s->K * 10 + s->S));
	float *x = rand_floats(&r, nx, -1, 1), *w = rand_floats(&r, nw, -0.5f, 0.5f);
	float *b = rand_floats(&r, (size_t)s->OC, -1, 1);
	float *dy = rand_floats(&r, ny, -1, 1);
	apf_backend *ref = backend_on(APF_CPU_ISA_SCALAR, threads);
	struct conv_out want;
	conv_run(ref, s, x, w, b, dy, &want);
	char what[160];
	for (int isa = APF_CPU_ISA_AVX2; isa <= APF_CPU_ISA_AVX512; isa++) {
		if (!(paths & (1u << isa)))
			continue;
		snprintf(what, sizeof what,
			 "conv B%d %dx%dx%d->%d K%d S%d P%d t%d on %s", s->B,
			 s->H, s->W, s->C, s->OC, s->K, s->S, s->P, threads,
			 apf_cpu_isa_name(isa));
		apf_backend *be = backend_on(isa, threads);
		struct conv_out got;
		conv_run(be, s, x, w, b, dy, &got);
		if (memcmp(got.y, want.y, ny * sizeof *got.y) ||
		    memcmp(got.dx, want.dx, nx * sizeof *got.dx) ||
		    memcmp(got.dxacc, want.dxacc, nx * sizeof *got.dx) ||
		    memcmp(got.dw, want.dw, nw * sizeof *got.dw) ||
		    (s->bias && memcmp(got.db, want.db, (size_t)s->OC * 4)))
			fail_msg("%s: not the scalar path's bits", what);
		conv_out_free(&got);
		apf_backend_free(be);
	}
	conv_out_free(&want);
	free(x), free(w), free(b), free(dy);
	apf_backend_free(ref);
}

static void conv_gives_the_same_bits_on_every_path(void **state)
{
	(void)state;
	unsigned paths = vector_paths();
	static const struct conv_shape shapes[] = {
		{3, 28, 28, 1, 16, 3, 1, 1, 0},   /* stem */
		{3, 28, 28, 16, 16, 3, 1, 1, 0},  /* Winograd, 16 channels */
		{3, 28, 28, 16, 32, 3, 2, 1, 0},  /* direct, stride 2 */
		{3, 28, 28, 16, 32, 1, 2, 0, 0},  /* projection */
		{2, 7, 7, 64, 64, 3, 1, 1, 1},    /* Winograd 64, bias */
		{2, 9, 7, 16, 16, 5, 2, 2, 1},    /* 5x5, stride 2, odd sizes */
		{2, 5, 7, 48, 48, 3, 1, 1, 1},    /* 32 + 16 channels, odd map */
		{2, 6, 9, 32, 16, 3, 1, 1, 1},    /* Winograd 32 -> 16 */
		{3, 10, 10, 16, 32, 3, 1, 1, 0},  /* Winograd 16 -> 32 */
		{2, 6, 5, 48, 16, 3, 2, 1, 0},    /* direct, 48 -> 16 */
		{2, 6, 5, 24, 48, 3, 2, 1, 0},    /* 24 channels: 16 + 8 */
		{3, 5, 4, 8, 16, 3, 1, 1, 1},     /* 8 channels, direct */
		{2, 6, 5, 32, 20, 3, 1, 1, 1},    /* forward falls back */
		{5, 3, 3, 8, 16, 3, 3, 1, 1},     /* stride 3, one pixel a row */
		{3, 9, 7, 3, 24, 3, 2, 1, 1},     /* 3 channels, 24 outputs */
		{2, 6, 5, 12, 32, 3, 1, 1, 0},    /* 12 channels */
		{2, 8, 8, 1, 8, 5, 1, 2, 1},      /* 1 channel, 8 outputs */
		{2, 7, 6, 2, 16, 3, 1, 1, 0},     /* 2 channels */
		{2, 6, 5, 32, 64, 1, 2, 0, 0},    /* 1x1 of 32: 2 and 4 columns */
		{2, 6, 6, 16, 12, 1, 2, 0, 1},    /* 12 outputs: no 8-row tiles */
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		for (int threads = 1; threads <= 2; threads++)
			conv_same_bits(&shapes[i], threads, paths);
}

/* The Winograd convolution as every recorded run computed it: the digest
 * of y, dx (written, then added to 0.5s), dw and db on 1 and 2 threads, on
 * every path this CPU runs, for shapes whose tiles lie inside the image,
 * across one border or across two (7x7: a 4x4 window of a 2x2 tile reaches
 * past both ends; 3x2 and 1x1: no tile lies inside), taken before the
 * padded copy of each image was dropped (re-evaluation and replay of an
 * older run need these bits). Inputs far from zero on the border pixels
 * (+-100) show any window that reads a neighbour's pixel for a zero. */
static void winograd_conv_keeps_its_recorded_bits(void **state)
{
	(void)state;
	static const struct {
		struct conv_shape s;
		const char *digest[2]; /* 1 thread, 2 threads */
	} cases[] = {
		{{3, 28, 28, 16, 16, 3, 1, 1, 0},
		 {"bd7ab8a6260f4fedaf9027c5d42f5befdc8c178898c497b8440aaf12b6b3aa6e",
		  "b3371fcf4a60b408385eae192398ab3871a5e086c20c0cb66c77beb0150a54e8"}},
		{{2, 7, 7, 64, 64, 3, 1, 1, 1},
		 {"37913cd2ef0ce1e012d23abb61632105f71287bf4549211a67a43d94313cbbc8",
		  "bf2244c766ef8f912392084e7fe583639532004fa5aa4f59cebd41762ec7290b"}},
		{{2, 5, 7, 48, 48, 3, 1, 1, 1},
		 {"263cf4f008da5524d0c1449476f50be594bc9cc933ada6e67c5eac9a3bc58b5f",
		  "55c3a867e29c5b9032866807440e95650663debddd02d0fcdcba50e5ffc18b8e"}},
		{{2, 6, 9, 32, 16, 3, 1, 1, 1},
		 {"b066da77515b749f56b013b4192edda67a76ef6d4c1d3a72d5675b7e925885d0",
		  "9a74382ca0bed40589d780a3eb81c7eae59308fb1a0ba17f30ad79335370bcfa"}},
		{{3, 10, 10, 16, 32, 3, 1, 1, 0},
		 {"da57d7b2296cbdf5e091c73549fff178e21891f57db1c402fa7ea2bb1835302a",
		  "b18be68b3860160b4738984b2d338d728cfb0ac1d1b96a3f422b4c9fde87ddfb"}},
		{{2, 3, 2, 16, 16, 3, 1, 1, 1},
		 {"748a6743bf74e9db441cde2408f185c9f0f4da226d1179ea294010f40b12661c",
		  "09d1cc3d16530d5c93c3dc097194b71def8ef4932eb91e489b19e76c6476e41a"}},
		{{3, 1, 1, 16, 32, 3, 1, 1, 0},
		 {"23598a7e9ff9f78b62e94947c39b4e3b2aa48ac6679ade539cdf9fefee655fb4",
		  "c257514eea13dcc309efc892e218499a4ca3178415f8ee62bc76caa39a358080"}},
	};
	unsigned have = apf_cpu_isa_available();
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		const struct conv_shape *s = &cases[c].s;
		assert_true(apf_cpu_conv_wino_ok(s->C, s->OC, s->K, s->S, s->P));
		size_t nx = (size_t)s->B * s->H * s->W * s->C;
		size_t ny = (size_t)s->B * s->H * s->W * s->OC;
		size_t nw = (size_t)s->OC * 9 * s->C;
		apf_rng_key key = {18, (uint32_t)c, 0, APF_RNG_TEST};
		apf_rng r;
		apf_rng_init(&r, &key, 0);
		float *x = rand_floats(&r, nx, -1, 1);
		float *w = rand_floats(&r, nw, -0.5f, 0.5f);
		float *b = rand_floats(&r, (size_t)s->OC, -1, 1);
		float *dy = rand_floats(&r, ny, -1, 1);
		for (size_t i = 0; i < nx; i++) { /* the border pixels */
			size_t px = i / (size_t)s->C;
			int h = (int)(px / (size_t)s->W % (size_t)s->H);
			int wc = (int)(px % (size_t)s->W);
			if (h == 0 || wc == 0 || h == s->H - 1 || wc == s->W - 1)
				x[i] *= 100.0f;
		}
		for (int threads = 1; threads <= 2; threads++)
			for (int isa = APF_CPU_ISA_SCALAR; isa <= APF_CPU_ISA_AVX512; isa++) {
				if (!(have & (1u << isa)))
					continue;
				apf_backend *be = backend_on(isa, threads);
				struct conv_out o;
				conv_run(be, s, x, w, b, dy, &o);
				apf_backend_free(be);
				char hex[APF_SHA256_HEX];
				testlib_digest_floats(hex, 5,
					   (const float *[]){o.y, o.dx, o.dxacc, o.dw, o.db},
					   (size_t[]){ny, nx, nx, nw,
						      s->bias ? (size_t)s->OC : 0});
				if (strcmp(hex, cases[c].digest[threads - 1]))
					fail_msg("Winograd B%d %dx%dx%d->%d, %d threads on %s: "
						 "%s, recorded %s", s->B, s->H, s->W, s->C,
						 s->OC, threads, apf_cpu_isa_name(isa), hex,
						 cases[c].digest[threads - 1]);
				conv_out_free(&o);
			}
		free(x), free(w), free(b), free(dy);
	}
}

/* The kernels themselves, called with each path in the job (no backend in
 * between): one forward on one thread, against the scalar path's. */
static void conv_kernels_compute_the_scalar_bits(void **state)
{
	(void)state;
	unsigned paths = vector_paths();
	static const struct conv_shape shapes[] = {
		{2, 9, 9, 16, 48, 3, 1, 1, 1}, /* Winograd */
		{2, 9, 9, 16, 48, 3, 2, 1, 1}, /* direct */
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		const struct conv_shape *s = &shapes[i];
		int OH = (s->H + 2 * s->P - s->K) / s->S + 1;
		int OW = (s->W + 2 * s->P - s->K) / s->S + 1;
		size_t nx = (size_t)s->B * s->H * s->W * s->C;
		size_t ny = (size_t)s->B * OH * OW * s->OC;
		size_t nw = (size_t)s->OC * s->K * s->K * s->C;
		apf_rng_key key = {16, 0, 0, APF_RNG_TEST};
		apf_rng r;
		apf_rng_init(&r, &key, i);
		float *x = rand_floats(&r, nx, -1, 1);
		float *w = rand_floats(&r, nw, -0.5f, 0.5f);
		float *b = rand_floats(&r, (size_t)s->OC, -1, 1);
		size_t nwork = apf_cpu_conv_fast_work(s->B, s->H, s->W, s->C,
						      s->OC, s->K, s->S, s->P, 1);
		float *want = NULL;
		for (int isa = APF_CPU_ISA_SCALAR; isa <= APF_CPU_ISA_AVX512; isa++) {
			if (isa != APF_CPU_ISA_SCALAR && !(paths & (1u << isa)))
				continue;
			float *y = floats(ny, NAN), *ws = floats(nwork, NAN);
			struct apf_conv_job j = {
				.isa = isa, .B = s->B, .H = s->H, .W = s->W,
				.C = s->C, .OC = s->OC, .K = s->K, .S = s->S,
				.P = s->P, .OH = OH, .OW = OW, .inp = x,
				.weight = w, .bias = b, .out = y, .work = ws,
				.wt = ws};
			apf_cpu_conv_fast_prepare(&j, 0, 1);
			apf_cpu_conv_fast_forward(&j, 0, 1);
			free(ws);
			if (!want) {
				want = y;
				continue;
			}
			if (memcmp(y, want, ny * sizeof *y))
				fail_msg("conv kernel %zu on %s: not the scalar "
					 "path's bits", i, apf_cpu_isa_name(isa));
			free(y);
		}
		free(want), free(x), free(w), free(b);
	}
}

/* Batch norm, fused with ReLU (and a residual) and plain, forward in
 * training and eval mode and backward in write and accumulate modes, on
 * each path against the scalar path, bit for bit. */
enum { BN_Y, BN_MEAN, BN_RSTD, BN_RUN_MEAN, BN_RUN_VAR, BN_EVAL_Y, BN_DX,
       BN_DRES, BN_DSCALE, BN_DBIAS, BN_DX_ACC, BN_DRES_ACC, BN_PLAIN_Y,
       BN_PLAIN_DX, BN_PLAIN_DSCALE, BN_PLAIN_DBIAS, BN_NOUT };

static const struct {
	const char *name;
	int per_row; /* N x C, else C */
} bn_outs[BN_NOUT] = {
	{"y", 1}, {"mean", 0}, {"rstd", 0}, {"run_mean", 0}, {"run_var", 0},
	{"eval y", 1}, {"dx", 1}, {"dres", 1}, {"dscale", 0}, {"dbias", 0},
	{"dx accumulated", 1}, {"dres accumulated", 1}, {"plain y", 1},
	{"plain dx", 1}, {"plain dscale", 0}, {"plain dbias", 0},
};

/* o[BN_*]: every output of the fused layer (with res or without) and of
 * the plain batch norm on be. */
static void bn_run(apf_backend *be, int N, int C, const float *x,
		   const float *res, const float *dy, const float *sc,
		   const float *bi, float *o[BN_NOUT])
{
	size_t n = (size_t)N * C;
	for (int i = 0; i < BN_NOUT; i++)
		o[i] = floats(bn_outs[i].per_row ? n : (size_t)C, NAN);
	for (size_t i = 0; i < n; i++)
		o[BN_DX_ACC][i] = 0.5f, o[BN_DRES_ACC][i] = 0.25f;
	for (int c = 0; c < C; c++)
		o[BN_RUN_MEAN][c] = 0.1f, o[BN_RUN_VAR][c] = 2;
	be->batchnorm_relu_forward(be, o[BN_Y], o[BN_MEAN], o[BN_RSTD], x, res,
				   sc, bi, o[BN_RUN_MEAN], o[BN_RUN_VAR], N, C,
				   0.1f, 1e-5f, 1);
	be->batchnorm_relu_forward(be, o[BN_EVAL_Y], NULL, NULL, x, res, sc, bi,
				   o[BN_RUN_MEAN], o[BN_RUN_VAR], N, C, 0.1f,
				   1e-5f, 0);
	be->batchnorm_relu_backward(be, o[BN_DX], res ? o[BN_DRES] : NULL,
				    o[BN_DSCALE], o[BN_DBIAS], dy, o[BN_Y], x,
				    sc, o[BN_MEAN], o[BN_RSTD], N, C, 0, 0);
	be->batchnorm_relu_backward(be, o[BN_DX_ACC], res ? o[BN_DRES_ACC] : NULL,
				    o[BN_DSCALE], o[BN_DBIAS], dy, o[BN_Y], x,
				    sc, o[BN_MEAN], o[BN_RSTD], N, C, 1, 1);
	float *pm = floats((size_t)C, NAN), *pr = floats((size_t)C, NAN);
	be->batchnorm_forward(be, o[BN_PLAIN_Y], pm, pr, x, sc, bi,
			      o[BN_RUN_MEAN], o[BN_RUN_VAR], N, C, 0.1f, 1e-5f,
			      1);
	be->batchnorm_backward(be, o[BN_PLAIN_DX], o[BN_PLAIN_DSCALE],
			       o[BN_PLAIN_DBIAS], dy, x, sc, pm, pr, N, C, 0);
	free(pm), free(pr);
}

static void bn_same_bits(int N, int C, int with_res, float offset,
			 int threads, unsigned paths)
{
	size_t n = (size_t)N * C;
	apf_rng_key key = {17, (uint32_t)C, (uint32_t)with_res, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)N);
	float *x = rand_floats(&r, n, offset - 1, offset + 2);
	float *res = rand_floats(&r, n, -1, 1), *dy = rand_floats(&r, n, -1, 1);
	float *sc = rand_floats(&r, (size_t)C, 0.5f, 1.5f);
	float *bi = rand_floats(&r, (size_t)C, -0.5f, 0.5f);
	apf_backend *ref = backend_on(APF_CPU_ISA_SCALAR, threads);
	float *want[BN_NOUT], *got[BN_NOUT];
	bn_run(ref, N, C, x, with_res ? res : NULL, dy, sc, bi, want);
	for (int isa = APF_CPU_ISA_AVX2; isa <= APF_CPU_ISA_AVX512; isa++) {
		if (!(paths & (1u << isa)))
			continue;
		apf_backend *be = backend_on(isa, threads);
		bn_run(be, N, C, x, with_res ? res : NULL, dy, sc, bi, got);
		for (int i = 0; i < BN_NOUT; i++) {
			size_t len = bn_outs[i].per_row ? n : (size_t)C;
			if (memcmp(got[i], want[i], len * sizeof(float)))
				fail_msg("bn N%d C%d res%d offset %g t%d on %s: "
					 "%s not the scalar path's bits", N, C,
					 with_res, offset, threads,
					 apf_cpu_isa_name(isa), bn_outs[i].name);
			free(got[i]);
		}
		apf_backend_free(be);
	}
	for (int i = 0; i < BN_NOUT; i++)
		free(want[i]);
	free(x), free(res), free(dy), free(sc), free(bi);
	apf_backend_free(ref);
}

static void batchnorm_gives_the_same_bits_on_every_path(void **state)
{
	(void)state;
	unsigned paths = vector_paths();
	for (int threads = 1; threads <= 2; threads++) {
		bn_same_bits(3000, 16, 1, 0.0f, threads, paths);
		bn_same_bits(517, 64, 1, 0.0f, threads, paths);
		bn_same_bits(999, 12, 1, 0.0f, threads, paths); /* 8 + 4 */
		bn_same_bits(301, 27, 0, 0.0f, threads, paths); /* 16 + 8 + 3 */
		bn_same_bits(40, 3, 0, 0.0f, threads, paths);
		bn_same_bits(3000, 48, 0, 300.0f, threads, paths);
	}
}

static void resnet_gives_the_same_bits_on_every_path(void **state)
{
	(void)state;
	unsigned paths = vector_paths();
	for (int threads = 1; threads <= 2; threads++) {
		float *lw, *gw, *sw;
		size_t np, ns;
		apf_backend *ref = backend_on(APF_CPU_ISA_SCALAR, threads);
		resnet_run(ref, &lw, &gw, &sw, &np, &ns);
		for (int isa = APF_CPU_ISA_AVX2; isa <= APF_CPU_ISA_AVX512; isa++) {
			if (!(paths & (1u << isa)))
				continue;
			apf_backend *be = backend_on(isa, threads);
			float *l, *g, *st;
			resnet_run(be, &l, &g, &st, &np, &ns);
			assert_memory_equal(l, lw, 60 * sizeof *l);
			assert_memory_equal(g, gw, np * sizeof *g);
			assert_memory_equal(st, sw, ns * sizeof *st);
			free(l), free(g), free(st);
			apf_backend_free(be);
		}
		free(lw), free(gw), free(sw);
		apf_backend_free(ref);
	}
}

/* ---- the weight gradient of few input channels -------------------------- */

/* One backward's weight gradient on be (no input gradient, as for a
 * model's first layer). */
static float *dweight_of(apf_backend *be, const struct conv_shape *s,
			 const float *x, const float *w, const float *dy)
{
	size_t nw = (size_t)s->OC * s->K * s->K * s->C;
	size_t work = be->conv2d_work(be, s->B, s->H, s->W, s->C, s->OC, s->K,
				      s->S, s->P);
	float *ws = floats(work, NAN), *dw = floats(nw, NAN);
	be->conv2d_backward(be, NULL, dw, NULL, dy, x, w, s->B, s->H, s->W,
			    s->C, s->OC, s->K, s->S, s->P, ws, 0);
	assert_int_equal(be->sync(be), 0);
	free(ws);
	return dw;
}

static void few_channel_dweight_is_the_gemm_route_s_bits(void **state)
{
	(void)state;
	/* A first layer's weight gradient over fewer channels than a vector
	 * (the stems) through the direct kernel gives the bits of the im2col
	 * + GEMM route (the plain backend's, and every recorded run's) on
	 * every path: batches of several GEMM chunks a thread (the stem's
	 * chunk is 148 images), chunks left to one thread, fewer images than
	 * threads, and sums that cancel (inputs of one sign and its
	 * opposite), where any other grouping of a sum gives other bits. */
	static const struct conv_shape shapes[] = {
		{300, 28, 28, 1, 16, 3, 1, 1, 0}, /* the stem, 3 chunks */
		{1, 28, 28, 1, 16, 3, 1, 1, 0},   /* one image, two threads */
		{40, 9, 7, 3, 24, 3, 2, 1, 0},
		{30, 8, 8, 1, 8, 5, 1, 2, 0},
		{25, 6, 5, 12, 32, 3, 1, 1, 0},
	};
	unsigned have = apf_cpu_isa_available();
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		const struct conv_shape *s = &shapes[i];
		int OH = (s->H + 2 * s->P - s->K) / s->S + 1;
		int OW = (s->W + 2 * s->P - s->K) / s->S + 1;
		size_t nx = (size_t)s->B * s->H * s->W * s->C;
		size_t ny = (size_t)s->B * OH * OW * s->OC;
		size_t nw = (size_t)s->OC * s->K * s->K * s->C;
		apf_rng_key key = {17, (uint32_t)s->C, (uint32_t)s->OC, APF_RNG_TEST};
		apf_rng r;
		apf_rng_init(&r, &key, i);
		float *x = rand_floats(&r, nx, 0, 1);
		float *w = rand_floats(&r, nw, -0.5f, 0.5f);
		float *dy = rand_floats(&r, ny, -1, 1);
		/* large terms of both signs: sums that cancel */
		for (size_t k = 0; k < ny; k++)
			dy[k] = (k % 3 ? 1e4f : -2e4f) * dy[k];
		for (int threads = 1; threads <= 2; threads++) {
			apf_backend *plain;
			assert_apf_ok(apf_backend_cpu_plain_new(&plain, threads));
			float *want = dweight_of(plain, s, x, w, dy);
			apf_backend_free(plain);
			for (int isa = APF_CPU_ISA_SCALAR; isa <= APF_CPU_ISA_AVX512; isa++) {
				if (!(have & (1u << isa)))
					continue;
				apf_backend *be = backend_on(isa, threads);
				float *got = dweight_of(be, s, x, w, dy);
				apf_backend_free(be);
				if (memcmp(got, want, nw * sizeof *got))
					fail_msg("B%d %dx%dx%d->%d K%d S%d, %d threads on "
						 "%s: not the GEMM route's bits",
						 s->B, s->H, s->W, s->C, s->OC, s->K,
						 s->S, threads, apf_cpu_isa_name(isa));
				free(got);
			}
			free(want);
		}
		free(x), free(w), free(dy);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fast_conv_matches_plain_on_fmnist_cnn_shapes),
		cmocka_unit_test(fast_conv_matches_plain_on_odd_shapes),
		cmocka_unit_test(fused_batchnorm_relu_matches_the_three_layers),
		cmocka_unit_test(fused_instnorm_relu_gives_the_two_layers_bits),
		cmocka_unit_test(instnorm_relu_net_fused_matches_unfused_bit_for_bit),
		cmocka_unit_test(fast_batchnorm_matches_plain),
		cmocka_unit_test(fast_resnet_matches_plain_and_repeats_bit_for_bit),
		cmocka_unit_test(conv_gives_the_same_bits_on_every_path),
		cmocka_unit_test(conv_kernels_compute_the_scalar_bits),
		cmocka_unit_test(winograd_conv_keeps_its_recorded_bits),
		cmocka_unit_test(batchnorm_gives_the_same_bits_on_every_path),
		cmocka_unit_test(resnet_gives_the_same_bits_on_every_path),
		cmocka_unit_test(few_channel_dweight_is_the_gemm_route_s_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
