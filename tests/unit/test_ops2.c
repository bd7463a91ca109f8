/*
 * test_ops2.c: the operations apf/ops.h's ABI 2 added, through the harness
 * a submission calls (the trial's context over a CPU backend), against
 * double-precision references: the elementwise functions with their special
 * values, matrix views of parameters, the matrix product on strided blocks,
 * the sums of squares of rows and columns, the inverse p-th root, scratch;
 * the same bits at any thread count; and misuse as one clear error through
 * the context, which fails the submission's call.
 *
 * The "submission" here is the test's own functions in an apf_submission
 * table: update_params runs whatever the test puts in `body`.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trial/internal.h"
#include "trial/trial.h"
#include "wire/wire.h"

#define SLOTN 40000 /* above the CPU backend's threshold for threads */
#define NPARAM 41

static apf_param table[3];

static int obj_loss_grad(void *user, const float *w, const apf_batch *b,
			 uint64_t step, double *loss, float *g)
{
	(void)user, (void)b, (void)step;
	*loss = 0;
	for (int i = 0; i < NPARAM; i++) {
		*loss += 0.5 * (double)w[i] * w[i];
		g[i] = w[i];
	}
	return 0;
}

static int obj_init(void *user, float *w, float *state)
{
	(void)user, (void)state;
	for (int i = 0; i < NPARAM; i++)
		w[i] = 0.1f * (float)i - 1.0f;
	return 0;
}

static void (*body)(apf_ctx *c);

static int s_batch(const char *w)
{
	(void)w;
	return 1;
}

static int s_init(apf_ctx *c, const apf_hparams *h, apf_prng r)
{
	(void)h, (void)r;
	apf_vec v;
	return apf_slot(c, "a", SLOTN, &v) || apf_slot(c, "b", SLOTN, &v) ||
			       apf_slot(c, "c", SLOTN, &v) ||
			       apf_slot(c, "d", SLOTN, &v)
		       ? -1
		       : 0;
}

static int s_update(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		    const apf_eval_results *e, int64_t s, apf_prng r,
		    const apf_train_state *t)
{
	(void)h, (void)b, (void)e, (void)s, (void)r, (void)t;
	if (body)
		body(c);
	return 0;
}

struct env {
	apf_backend *be;
	apf_trial *t;
	void *arena;
	apf_submission sub;
	apf_ctx *c;
};

/* A backend that says its memory is a device's (as quad_start_on): the
 * harness then reaches vectors through upload and download, as on cuda. */
static int device_memory;

static void env_start(struct env *e, int threads)
{
	memset(e, 0, sizeof *e);
	assert_apf_ok(apf_backend_cpu_new(&e->be, threads));
	e->be->device_memory = device_memory;
	memset(table, 0, sizeof table);
	strcpy(table[0].name, "fc.weight");
	table[0].kind = APF_PARAM_WEIGHT;
	table[0].ndim = 2, table[0].shape[0] = 3, table[0].shape[1] = 4;
	table[0].numel = 12;
	strcpy(table[1].name, "conv.weight");
	table[1].kind = APF_PARAM_CONV_WEIGHT;
	table[1].ndim = 4, table[1].shape[0] = 2, table[1].shape[1] = 2;
	table[1].shape[2] = 2, table[1].shape[3] = 3;
	table[1].offset = 12, table[1].numel = 24;
	strcpy(table[2].name, "fc.bias");
	table[2].kind = APF_PARAM_BIAS;
	table[2].ndim = 1, table[2].shape[0] = 5;
	table[2].offset = 36, table[2].numel = 5;
	static struct apf_objective obj;
	obj = (struct apf_objective){.nparams = 3, .params = table,
				     .param_floats = NPARAM,
				     .loss_grad = obj_loss_grad,
				     .init = obj_init};
	static const struct apf_trial_info info = {
		.workload = "ops", .variant = "base", .metric = "loss",
		.device = "cpu", .max_runtime_s = 100, .step_hint = 10};
	e->sub = (apf_submission){.batch_size = s_batch, .init = s_init,
				  .update = s_update};
	size_t cap = apf_arena_capacity(NPARAM, 0, 4 * SLOTN / NPARAM + 8);
	e->arena = calloc(1, cap);
	assert_non_null(e->arena);
	body = NULL;
	assert_apf_ok(apf_trial_new(&e->t, &obj, e->be, &e->sub, NULL, &info,
				    e->arena, cap));
	assert_apf_ok(apf_trial_init(e->t));
	e->c = (apf_ctx *)e->t;
}

static void env_finish(struct env *e)
{
	apf_trial_free(e->t);
	apf_backend_free(e->be);
	free(e->arena);
	body = NULL;
}

static apf_vec slot(struct env *e, const char *name)
{
	apf_vec v;
	assert_int_equal(apf_slot(e->c, name, 0, &v), 0);
	return v;
}

static int step(struct env *e)
{
	int complete;
	return apf_trial_step(e->t, &complete);
}

/* Deterministic uniform floats in [lo, hi). */
static uint64_t lcg_state;
static float unif(float lo, float hi)
{
	lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
	double u = (double)(lcg_state >> 11) * 0x1.0p-53;
	return (float)(lo + (hi - lo) * u);
}

/* Distance in float ulps (same-signed finite values). */
static long ulps(float a, float b)
{
	int32_t ia, ib;
	memcpy(&ia, &a, 4);
	memcpy(&ib, &b, 4);
	if (ia < 0)
		ia = INT32_MIN - ia;
	if (ib < 0)
		ib = INT32_MIN - ib;
	long d = (long)ia - ib;
	return d < 0 ? -d : d;
}

static int same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || !memcmp(&a, &b, 4);
}

/* ---- elementwise ---------------------------------------------------------- */

enum fn { F_EXP, F_LN, F_POW };

/* Every result within one ulp of double libm's, rounded, and nearly all
 * equal to it (the correctly rounded float, but for values whose double
 * lands within about 1e-16 of a rounding boundary). */
static void transcendental(enum fn f, float lo, float hi, float p)
{
	struct env e;
	env_start(&e, 1);
	apf_vec x = slot(&e, "a"), y = slot(&e, "b");
	lcg_state = 42 + f;
	for (size_t i = 0; i < x.n; i++)
		x.p[i] = unif(lo, hi);
	if (f == F_EXP)
		apf_exp(e.c, y, x);
	else if (f == F_LN)
		apf_ln(e.c, y, x);
	else
		apf_pow(e.c, y, x, p);
	size_t exact = 0;
	for (size_t i = 0; i < x.n; i++) {
		double r = f == F_EXP  ? exp((double)x.p[i])
			   : f == F_LN ? log((double)x.p[i])
				       : pow((double)x.p[i], (double)p);
		float want = (float)r;
		if (ulps(y.p[i], want) > 1)
			fail_msg("fn %d p %g: x %.9g gives %.9g, want %.9g", f, p,
				 x.p[i], y.p[i], want);
		exact += same_float(y.p[i], want);
	}
	if (exact < x.n - x.n / 1000)
		fail_msg("fn %d p %g: only %zu of %zu correctly rounded", f, p,
			 exact, x.n);
	env_finish(&e);
}

static void exp_ln_pow_match_double_references(void **state)
{
	(void)state;
	transcendental(F_EXP, -20.0f, 20.0f, 0);
	transcendental(F_EXP, -103.0f, 88.0f, 0);
	transcendental(F_LN, 1e-6f, 10.0f, 0);
	transcendental(F_LN, 1e-38f, 3e38f, 0);
	transcendental(F_POW, 1e-4f, 100.0f, 0.5f);
	transcendental(F_POW, 1e-4f, 100.0f, -0.25f);
	transcendental(F_POW, 1e-3f, 10.0f, 3.0f);
	transcendental(F_POW, -10.0f, 10.0f, 2.0f);
	transcendental(F_POW, -10.0f, 10.0f, -3.0f);
}

/* The special values ops.h promises, one op at a time, with IEEE
 * subnormals (numerics 1 and 2; numerics 3 flushes them, below). */
static void special_values_are_as_documented(void **state)
{
	(void)state;
	struct env e;
	assert_int_equal(apf_numerics_set(2), 0);
	env_start(&e, 1);
	const float inf = INFINITY, nan = NAN, den = 1e-40f;
	const float in[] = {0.0f, -0.0f, 1.0f, -2.0f, inf, -inf, nan, den, -den};
	enum { K = sizeof in / sizeof in[0] };
	apf_vec a = slot(&e, "a"), b = slot(&e, "b");
	apf_vec x = apf_slice(e.c, a, 0, K), y = apf_slice(e.c, b, 0, K);
	memcpy(x.p, in, sizeof in);
	struct {
		const char *op;
		float want[K];
	} cases[] = {
		{"sign", {0.0f, -0.0f, 1, -1, 1, -1, nan, 1, -1}},
		{"abs", {0, 0, 1, 2, inf, inf, nan, den, den}},
		{"exp", {1, 1, 2.71828183f, 0.135335283f, inf, 0, nan, 1, 1}},
		{"ln", {-inf, -inf, 0, nan, inf, nan, nan, -92.1034037f, nan}},
		{"reciprocal", {inf, -inf, 1, -0.5f, 0, -0.0f, nan, inf, -inf}},
		{"rsqrt", {1e3f, 1e3f, 0.999999500f, nan, 0, nan, nan, 1e3f, 1e3f}},
		{"pow.5", {0, 0, 1, nan, inf, inf, nan, 1e-20f, nan}},
		{"pow-1", {inf, -inf, 1, -0.5f, 0, -0.0f, nan, inf, -inf}},
		{"pow0", {1, 1, 1, 1, 1, 1, 1, 1, 1}},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const char *op = cases[k].op;
		if (!strcmp(op, "sign"))
			apf_sign(e.c, y, x);
		else if (!strcmp(op, "abs"))
			apf_abs(e.c, y, x);
		else if (!strcmp(op, "exp"))
			apf_exp(e.c, y, x);
		else if (!strcmp(op, "ln"))
			apf_ln(e.c, y, x);
		else if (!strcmp(op, "reciprocal"))
			apf_reciprocal(e.c, y, x);
		else if (!strcmp(op, "rsqrt"))
			apf_rsqrt(e.c, y, x, 1e-6f);
		else if (!strcmp(op, "pow.5"))
			apf_pow(e.c, y, x, 0.5f);
		else if (!strcmp(op, "pow-1"))
			apf_pow(e.c, y, x, -1.0f);
		else
			apf_pow(e.c, y, x, 0.0f);
		for (int i = 0; i < K; i++) {
			float w = cases[k].want[i];
			int ok = isnan(w) ? isnan(y.p[i])
				 : isinf(w) || w == 0
					 ? same_float(y.p[i], w)
					 : fabsf(y.p[i] - w) <= 1e-5f * fabsf(w);
			if (!ok)
				fail_msg("%s(%g) = %g, want %g", op, in[i],
					 y.p[i], w);
		}
	}
	/* exp's edges: the largest finite result, then inf; underflow to
	 * subnormals, then 0 */
	x.p[0] = 88.72283f, x.p[1] = 88.7229f, x.p[2] = -100.0f;
	x.p[3] = -104.0f;
	apf_exp(e.c, y, x);
	assert_true(isfinite(y.p[0]) && y.p[0] > 3.4e38f);
	assert_true(isinf(y.p[1]));
	assert_true(y.p[2] > 0 && y.p[2] < 1.2e-38f);
	assert_true(y.p[3] == 0.0f);
	/* binary forms */
	apf_vec z = apf_slice(e.c, slot(&e, "c"), 0, K);
	const float u[] = {1, -1, 0, 2, -3, nan, 5, -0.0f, 1};
	const float v[] = {2, 3, 1, -1, -1, 1, nan, -1, 0};
	memcpy(x.p, u, sizeof u);
	memcpy(y.p, v, sizeof v);
	apf_agree(e.c, z, x, y);
	const float agree[] = {1, 0, 0, 0, 1, 0, 0, 0, 0};
	for (int i = 0; i < K; i++)
		assert_true(same_float(z.p[i], agree[i]));
	apf_sub(e.c, z, x, y);
	for (int i = 0; i < K; i++)
		assert_true(same_float(z.p[i], u[i] - v[i]));
	apf_min(e.c, z, x, y);
	for (int i = 0; i < K; i++)
		assert_true(same_float(z.p[i], u[i] < v[i] ? u[i] : v[i]));
	apf_vec m = apf_slice(e.c, slot(&e, "d"), 0, K);
	const float mk[] = {1, 0, -1, nan, 2, 1, 1, 0.5f, -0.0f};
	memcpy(m.p, mk, sizeof mk);
	apf_select(e.c, z, m, x, y);
	for (int i = 0; i < K; i++)
		assert_true(same_float(z.p[i], mk[i] > 0 ? u[i] : v[i]));
	/* outputs may alias inputs */
	apf_sub(e.c, x, x, y);
	for (int i = 0; i < K; i++)
		assert_true(same_float(x.p[i], u[i] - v[i]));
	assert_int_equal(step(&e), 0);
	env_finish(&e);
	assert_int_equal(apf_numerics_set(APF_NUMERICS_LATEST), 0);
}

/* Numerics 3 (ops.h): a subnormal input reads as a zero of its sign and a
 * subnormal result is written as one, on every thread count; the values
 * that are not subnormal are as above. Set out element by element, each
 * against its IEEE value (numerics 2), so the two are seen to differ. */
static void subnormals_are_zeros_under_numerics_3(void **state)
{
	(void)state;
	const float den = 0x1p-133f; /* subnormal: below 2^-126 */
	const float in[] = {den, -den, 1.0f, -100.0f, 0x1p-63f, 0x1p-70f};
	enum { K = sizeof in / sizeof in[0] };
	/* what each op gives under 2, then under 3 */
	struct {
		const char *op;
		float ieee[K], flushed[K];
	} cases[] = {
		/* 1 / den overflows either way; 1 / 0 is inf */
		{"reciprocal", {INFINITY, -INFINITY, 1, -0.01f, 0x1p63f, 0x1p70f},
		 {INFINITY, -INFINITY, 1, -0.01f, 0x1p63f, 0x1p70f}},
		/* ln of a zero is -inf; ln 2^-133 is -92.19 */
		{"ln", {-92.1887302f, NAN, 0, NAN, -43.6682358f, -48.5203026f},
		 {-INFINITY, -INFINITY, 0, NAN, -43.6682358f, -48.5203026f}},
		/* e^-100 is subnormal (3.7e-44) */
		{"exp", {1, 1, 2.71828183f, 0x1.bp-145f, 1, 1},
		 {1, 1, 2.71828183f, 0, 1, 1}},
		/* squares: (2^-63)^2 = 2^-126 is normal, (2^-70)^2 is not */
		{"square", {0, 0, 1, 1e4f, 0x1p-126f, 0x1p-140f},
		 {0, 0, 1, 1e4f, 0x1p-126f, 0}},
	};
	for (int ver = 2; ver <= 3; ver++)
		for (int threads = 1; threads <= 2; threads++) {
			assert_int_equal(apf_numerics_set(ver), 0);
			struct env e;
			env_start(&e, threads);
			apf_vec x = apf_slice(e.c, slot(&e, "a"), 0, K);
			apf_vec y = apf_slice(e.c, slot(&e, "b"), 0, K);
			for (size_t k = 0; k < sizeof cases / sizeof cases[0];
			     k++) {
				const char *op = cases[k].op;
				memcpy(x.p, in, sizeof in);
				if (!strcmp(op, "reciprocal"))
					apf_reciprocal(e.c, y, x);
				else if (!strcmp(op, "ln"))
					apf_ln(e.c, y, x);
				else if (!strcmp(op, "exp"))
					apf_exp(e.c, y, x);
				else
					apf_mul(e.c, y, x, x);
				const float *want = ver >= 3 ? cases[k].flushed
							     : cases[k].ieee;
				for (int i = 0; i < K; i++) {
					float w = want[i], got = y.p[i];
					int ok = isnan(w) ? isnan(got)
						 : isinf(w) || w == 0
							 ? same_float(got, w)
							 : fabsf(got - w) <=
								   1e-5f * fabsf(w);
					/* the flushed result is a zero of
					 * the right sign, bit for bit */
					if (!ok)
						fail_msg("numerics %d, %d "
							 "threads: %s(%a) = "
							 "%a, want %a",
							 ver, threads, op,
							 (double)in[i],
							 (double)got,
							 (double)w);
				}
			}
			assert_int_equal(step(&e), 0);
			env_finish(&e);
		}
	assert_int_equal(apf_numerics_set(APF_NUMERICS_LATEST), 0);
}

/* ---- the same bits at any thread count -------------------------------------- */

static void run_everything(struct env *e, float *out, size_t nout)
{
	apf_vec a = slot(e, "a"), b = slot(e, "b"), c = slot(e, "c"),
		d = slot(e, "d");
	lcg_state = 7;
	for (size_t i = 0; i < a.n; i++) {
		a.p[i] = unif(-3, 3);
		b.p[i] = unif(-3, 3);
	}
	size_t o = 0;
#define KEEP(v)                                                                \
	do {                                                                   \
		assert_true(o + (v).n <= nout);                                \
		memcpy(out + o, (v).p, (v).n * sizeof(float));                 \
		o += (v).n;                                                    \
	} while (0)
	apf_exp(e->c, c, a);
	KEEP(c);
	apf_abs(e->c, d, a);
	apf_ln(e->c, c, d);
	KEEP(c);
	apf_pow(e->c, c, d, -0.25f);
	KEEP(c);
	apf_rsqrt(e->c, c, d, 1e-8f);
	KEEP(c);
	apf_sign(e->c, c, a);
	KEEP(c);
	apf_agree(e->c, c, a, b);
	KEEP(c);
	apf_select(e->c, c, a, b, d);
	KEEP(c);
	apf_sub(e->c, c, a, b);
	KEEP(c);
	apf_min(e->c, c, a, b);
	KEEP(c);
	apf_reciprocal(e->c, c, a);
	KEEP(c);
	/* a 200 x 200 product of blocks, and the sums of squares */
	apf_mat A = apf_mat_of(e->c, apf_slice(e->c, a, 0, 40000), 200, 200);
	apf_mat B = apf_mat_of(e->c, apf_slice(e->c, b, 0, 40000), 200, 200);
	apf_mat C = apf_mat_of(e->c, apf_slice(e->c, c, 0, 40000), 200, 200);
	apf_matmul(e->c, C, 1.0f, A, 0, B, 1, 0.0f);
	KEEP(c);
	apf_vec r = apf_slice(e->c, d, 0, 200), s = apf_slice(e->c, d, 200, 200);
	apf_row_sumsq(e->c, r, A);
	KEEP(r);
	apf_col_sumsq(e->c, s, A);
	KEEP(s);
#undef KEEP
}

static void same_bits_at_any_thread_count(void **state)
{
	(void)state;
	size_t n = 13 * (size_t)SLOTN;
	float *one = calloc(n, sizeof(float)), *three = calloc(n, sizeof(float));
	assert_non_null(one);
	assert_non_null(three);
	struct env e;
	env_start(&e, 1);
	run_everything(&e, one, n);
	env_finish(&e);
	env_start(&e, 3);
	run_everything(&e, three, n);
	env_finish(&e);
	for (size_t i = 0; i < n; i++)
		if (memcmp(&one[i], &three[i], 4))
			fail_msg("float %zu: %.9g on 1 thread, %.9g on 3", i,
				 one[i], three[i]);
	free(one);
	free(three);
}

/* ---- matrices ---------------------------------------------------------------- */

static void parameters_have_their_documented_views(void **state)
{
	(void)state;
	struct env e;
	env_start(&e, 1);
	const int want[3][2] = {{3, 4}, {2, 12}, {1, 5}};
	apf_vec w = apf_all_params(e.c), g = apf_all_grads(e.c);
	for (int i = 0; i < 3; i++) {
		apf_mat m = apf_param_mat(e.c, i), gm = apf_grad_mat(e.c, i);
		assert_int_equal(m.rows, want[i][0]);
		assert_int_equal(m.cols, want[i][1]);
		assert_int_equal(m.ld, want[i][1]);
		assert_ptr_equal(m.v.p, w.p + table[i].offset);
		assert_int_equal(m.v.n, table[i].numel);
		assert_ptr_equal(gm.v.p, g.p + table[i].offset);
		assert_int_equal(gm.rows, want[i][0]);
	}
	env_finish(&e);
}

/* C = alpha op(A) op(B) + beta C on strided blocks, against double. */
static void matmul_matches_double_reference_on_blocks(void **state)
{
	(void)state;
	struct env e;
	env_start(&e, 2);
	apf_vec a = slot(&e, "a"), b = slot(&e, "b"), c = slot(&e, "c");
	lcg_state = 99;
	for (size_t i = 0; i < a.n; i++) {
		a.p[i] = unif(-1, 1);
		b.p[i] = unif(-1, 1);
		c.p[i] = unif(-1, 1);
	}
	/* 100 x 400 storage each; blocks from (3, 5) */
	apf_mat SA = apf_mat_of(e.c, a, 100, 400), SB = apf_mat_of(e.c, b, 100, 400),
		SC = apf_mat_of(e.c, c, 100, 400);
	enum { M = 37, N = 29, K = 53 };
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int bz = 0; bz < 2; bz++) {
				apf_mat A = apf_block(e.c, SA, 3, 5, ta ? K : M,
						      ta ? M : K);
				apf_mat B = apf_block(e.c, SB, 3, 5, tb ? N : K,
						      tb ? K : N);
				apf_mat C = apf_block(e.c, SC, 3, 5, M, N);
				float beta = bz ? 0.5f : 0.0f;
				double want[M][N];
				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double s = 0;
						for (int k = 0; k < K; k++) {
							float x = ta ? A.v.p[k * A.ld + i]
								     : A.v.p[i * A.ld + k];
							float y = tb ? B.v.p[j * B.ld + k]
								     : B.v.p[k * B.ld + j];
							s += (double)x * y;
						}
						double old = C.v.p[i * C.ld + j];
						want[i][j] = 1.5 * s +
							     (bz ? beta * old : 0);
					}
				if (!bz) /* beta 0 ignores C, NaN included */
					C.v.p[0] = NAN;
				float right = C.v.p[N];
				apf_matmul(e.c, C, 1.5f, A, ta, B, tb, beta);
				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double got = C.v.p[i * C.ld + j];
						if (!(fabs(got - want[i][j]) <=
						      1e-5 * (1 + fabs(want[i][j]))))
							fail_msg("ta %d tb %d beta %g "
								 "(%d,%d): %.9g, want "
								 "%.9g",
								 ta, tb, beta, i, j,
								 got, want[i][j]);
					}
				/* outside the block: untouched */
				assert_true(same_float(
					C.v.p[N], right));
			}
	assert_int_equal(step(&e), 0);
	env_finish(&e);
}

static void sums_of_squares_are_summed_in_double_in_order(void **state)
{
	(void)state;
	struct env e;
	env_start(&e, 3);
	apf_vec a = slot(&e, "a"), o = slot(&e, "b");
	lcg_state = 5;
	for (size_t i = 0; i < a.n; i++)
		a.p[i] = unif(-2, 2);
	apf_mat S = apf_mat_of(e.c, a, 200, 200);
	apf_mat B = apf_block(e.c, S, 7, 11, 150, 180);
	apf_vec r = apf_slice(e.c, o, 0, 150), cl = apf_slice(e.c, o, 1000, 180);
	apf_row_sumsq(e.c, r, B);
	apf_col_sumsq(e.c, cl, B);
	for (int i = 0; i < 150; i++) {
		double s = 0;
		for (int j = 0; j < 180; j++)
			s += (double)B.v.p[i * 200 + j] * B.v.p[i * 200 + j];
		assert_true(same_float(r.p[i], (float)s));
	}
	for (int j = 0; j < 180; j++) {
		double s = 0;
		for (int i = 0; i < 150; i++)
			s += (double)B.v.p[i * 200 + j] * B.v.p[i * 200 + j];
		assert_true(same_float(cl.p[j], (float)s));
	}
	env_finish(&e);
}

/* (S + ridge I)^(-1/p) of an SPD matrix, a block of a slot: out^p (S +
 * ridge I) = I; out may be A itself; a singular S with ridge 0 fails the
 * call with the reason. */
static int root_case;

static void root_body(apf_ctx *c)
{
	apf_vec a, b;
	apf_slot(c, "a", 0, &a);
	apf_slot(c, "b", 0, &b);
	enum { n = 24, ld = 30 };
	apf_mat G = apf_mat_of(c, apf_slice(c, b, 0, n * n), n, n);
	apf_mat S = apf_block(c, apf_mat_of(c, apf_slice(c, a, 0, ld * ld), ld, ld),
			      2, 3, n, n);
	lcg_state = 17;
	for (int i = 0; i < n * n; i++)
		G.v.p[i] = unif(-1, 1);
	/* S = G G^T (+ I unless the case wants it singular: then G's last
	 * row is its first, and S has a null space within rounding) */
	if (root_case == 1)
		for (int j = 0; j < n; j++)
			G.v.p[(n - 1) * n + j] = G.v.p[j];
	apf_matmul(c, S, 1.0f, G, 0, G, 1, 0.0f);
	if (root_case == 0)
		for (int i = 0; i < n; i++)
			S.v.p[i * ld + i] += 1.0f;
	double Sd[n][n];
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			Sd[i][j] = S.v.p[i * ld + j];
	apf_mat out = apf_mat_of(c, apf_slice(c, b, 1000, n * n), n, n);
	double ridge = root_case == 0 ? 0.01 : 0.0;
	apf_inv_root(c, root_case == 2 ? out : S, S, root_case == 2 ? -1 : 2,
		     ridge);
	if (root_case != 0)
		return;
	/* R = out (in S's place); R R (S + ridge I) = I */
	double err = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			double v = 0;
			for (int k = 0; k < n; k++) {
				double rr = 0;
				for (int l = 0; l < n; l++)
					rr += (double)S.v.p[i * ld + l] *
					      S.v.p[l * ld + k];
				v += rr * (Sd[k][j] + (k == j ? ridge : 0));
			}
			double e = fabs(v - (i == j));
			err = e > err ? e : err;
		}
	if (err > 1e-4)
		fail_msg("inv_root: |R^2 (S + ridge I) - I| = %g", err);
	/* the floats around the block are untouched */
	assert_true(S.v.p[-1] == 0.0f && S.v.p[n] == 0.0f);
}

static void inverse_root_inverts_and_refuses_what_it_cannot(void **state)
{
	(void)state;
	const char *want[] = {
		NULL,
		"update_params: inv_root: ",
		"update_params: inv_root: p -1, ridge 0 (p > 0, ridge >= 0, "
		"finite)",
	};
	for (int k = 0; k < 4; k++) {
		/* the last: the first again, the matrices copied as a device's */
		root_case = k % 3;
		device_memory = k == 3;
		struct env e;
		env_start(&e, 2);
		body = root_body;
		int rc = step(&e);
		if (!want[root_case])
			assert_apf_ok(rc);
		else if (rc != APF_EINPUT ||
			 !strstr(apf_error_message(), want[root_case]))
			fail_msg("case %d: got %d '%s'", root_case, rc,
				 apf_error_message());
		env_finish(&e);
	}
	device_memory = 0;
}

/* ---- misuse: one clear error through the context ---------------------------- */

static int misuse_case;

static void misuse_body(apf_ctx *c)
{
	apf_vec a, b;
	apf_slot(c, "a", 0, &a);
	apf_slot(c, "b", 0, &b);
	apf_mat A = apf_mat_of(c, apf_slice(c, a, 0, 12), 3, 4);
	apf_mat B = apf_mat_of(c, apf_slice(c, b, 0, 20), 5, 4);
	apf_mat C = apf_mat_of(c, apf_slice(c, b, 100, 9), 3, 3);
	static float mine[16];
	apf_vec outside = {mine, 16};
	switch (misuse_case) {
	case 0:
		apf_matmul(c, C, 1, A, 0, B, 0, 0);
		break;
	case 1:
		apf_matmul(c, apf_mat_of(c, apf_slice(c, a, 0, 9), 3, 3), 1,
			   A, 0, A, 1, 0);
		break;
	case 2:
		apf_block(c, A, 2, 1, 2, 2);
		break;
	case 3:
		apf_mat_of(c, apf_slice(c, a, 0, 12), 5, 2);
		break;
	case 4:
		apf_row_sumsq(c, apf_slice(c, b, 0, 4), A);
		break;
	case 5:
		apf_matmul(c, C, 1, A, 2, A, 1, 0);
		break;
	case 6:
		apf_exp(c, outside, outside);
		break;
	case 7: {
		apf_vec s;
		apf_scratch(c, ((size_t)1 << 28) + 1, &s);
		break;
	}
	case 8: {
		apf_mat bad = A;
		bad.ld = 2;
		apf_copy_mat(c, bad, A);
		break;
	}
	case 9:
		apf_sub(c, apf_slice(c, a, 0, 4), apf_slice(c, a, 0, 4),
			apf_slice(c, b, 0, 5));
		break;
	}
}

static void misuse_fails_the_call_with_one_clear_line(void **state)
{
	(void)state;
	const char *want[] = {
		"update_params: matmul: 3 x 4 times 5 x 4 into 3 x 3",
		"update_params: matmul: the output overlaps an input",
		"update_params: block: 2 x 2 at (2, 1) outside a 3 x 4 view",
		"update_params: mat_of: 5 x 2 is not a vector of 12",
		"update_params: row_sumsq: 4 floats for a 3 x 4 matrix's 3 rows",
		"update_params: matmul: transpose flags 2, 1 (0 or 1)",
		"update_params: exp: a vector outside the parameters, gradients, "
		"slots and scratch",
		"update_params: scratch: 268435457 floats (1 to 268435456)",
		"update_params: copy_mat: not a matrix view (3 x 4, ld 2",
		"update_params: sub: vectors of 4 and 5 floats",
	};
	for (misuse_case = 0; misuse_case < (int)(sizeof want / sizeof *want);
	     misuse_case++) {
		struct env e;
		env_start(&e, 1);
		body = misuse_body;
		int rc = step(&e);
		if (rc != APF_EINPUT || !strstr(apf_error_message(), want[misuse_case]))
			fail_msg("case %d: got %d '%s', want '%s'", misuse_case,
				 rc, apf_error_message(), want[misuse_case]);
		env_finish(&e);
	}
}

/* ---- scratch ----------------------------------------------------------------- */

static float *first_p, *second_p;
static int scratch_calls;

static void scratch_body(apf_ctx *c)
{
	apf_vec s1, s2, big;
	assert_int_equal(apf_scratch(c, 100, &s1), 0);
	assert_int_equal(apf_scratch(c, 100, &s2), 0);
	/* distinct, usable by every operation */
	assert_true(s2.p >= s1.p + 100 || s1.p >= s2.p + 100);
	apf_fill(c, s1, 2.0f);
	apf_copy(c, s2, s1);
	assert_true(s2.p[99] == 2.0f);
	/* more than the first chunk holds: a second one */
	assert_int_equal(apf_scratch(c, (size_t)1 << 19, &big), 0);
	apf_fill(c, big, 1.0f);
	apf_mat m = apf_mat_of(c, apf_slice(c, big, 0, 64), 8, 8);
	apf_matmul(c, apf_mat_of(c, apf_slice(c, big, 64, 64), 8, 8), 1, m, 0,
		   m, 0, 0);
	assert_true(big.p[64] == 8.0f);
	if (scratch_calls++ == 0)
		first_p = s1.p, second_p = s2.p;
	else /* released at every call: the same memory again */
		assert_true(s1.p == first_p && s2.p == second_p);
}

static void scratch_is_released_at_every_call(void **state)
{
	(void)state;
	struct env e;
	env_start(&e, 1);
	body = scratch_body;
	scratch_calls = 0;
	for (int i = 0; i < 3; i++)
		assert_apf_ok(step(&e));
	assert_int_equal(scratch_calls, 3);
	/* outside a call of the submission it is refused */
	apf_vec s;
	assert_int_not_equal(apf_scratch(e.c, 10, &s), 0);
	body = NULL;
	int rc = step(&e);
	assert_int_equal(rc, APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "scratch: outside a call of the submission"));
	env_finish(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exp_ln_pow_match_double_references),
		cmocka_unit_test(special_values_are_as_documented),
		cmocka_unit_test(subnormals_are_zeros_under_numerics_3),
		cmocka_unit_test(same_bits_at_any_thread_count),
		cmocka_unit_test(parameters_have_their_documented_views),
		cmocka_unit_test(matmul_matches_double_reference_on_blocks),
		cmocka_unit_test(sums_of_squares_are_summed_in_double_in_order),
		cmocka_unit_test(inverse_root_inverts_and_refuses_what_it_cannot),
		cmocka_unit_test(misuse_fails_the_call_with_one_clear_line),
		cmocka_unit_test(scratch_is_released_at_every_call),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
