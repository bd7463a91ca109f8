/*
 * test_gemm.c: apf's own GEMM (nn/cpu/gemm.h) against its contract, written
 * out here as a plain loop - acc = 0; acc = fmaf(a, b, acc) for k in order;
 * C = alpha * acc + beta * C, C unread when beta is 0 - on every
 * instruction-set path this CPU runs: random shapes with edges, transposes,
 * leading dimensions past the minimum, NaN in a C that beta 0 must not
 * read, the MLP's shapes; the bits must be equal, not close. Then the same
 * bits whatever the thread count (shares run one by one, and the CPU
 * backend's gemm on 1, 2 and 3 threads, and GEMM after GEMM through its
 * pool's hand-offs), and the APF_CPU_ISA choice with its refusals.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/cpu/gemm.h"
#include "nn/cpu/isa.h"
#include "nn/nn.h"

static const int all_paths[] = {APF_CPU_ISA_SCALAR, APF_CPU_ISA_AVX2,
				APF_CPU_ISA_AVX512};

static int path_runs_here(int isa)
{
	return (apf_cpu_isa_available() >> isa) & 1;
}

/* xorshift64*: the test's own stream, so the shapes do not move when
 * another generator changes. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static int below(int n)
{
	return (int)(next_u32() % (uint32_t)n);
}

/* Uniform in [-1, 1), with every bit of the mantissa in play. */
static float uniform(void)
{
	return (float)((double)next_u32() / 2147483648.0 - 1.0);
}

static float *random_floats(size_t n)
{
	float *x = malloc((n ? n : 1) * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = uniform();
	return x;
}

struct problem {
	int ta, tb, M, N, K, lda, ldb, ldc;
	float alpha, beta;
	float *A, *B, *C; /* C: the initial contents */
	size_t nc;        /* floats of C, ldc included */
	float *crow;      /* beta's row for every row of C, or NULL */
};

static void problem_make(struct problem *p, int ta, int tb, int M, int N,
			 int K, int pad, float alpha, float beta)
{
	p->ta = ta, p->tb = tb, p->M = M, p->N = N, p->K = K;
	p->alpha = alpha, p->beta = beta;
	p->crow = NULL;
	p->lda = (ta ? M : K) + (pad ? below(4) : 0);
	p->ldb = (tb ? K : N) + (pad ? below(4) : 0);
	p->ldc = N + (pad ? below(4) : 0);
	if (p->lda < 1)
		p->lda = 1;
	if (p->ldb < 1)
		p->ldb = 1;
	p->A = random_floats((size_t)(ta ? K : M) * p->lda);
	p->B = random_floats((size_t)(tb ? N : K) * p->ldb);
	p->nc = (size_t)M * p->ldc;
	p->C = random_floats(p->nc);
	/* beta 0: C must not be read, so garbage in it must not show */
	if (beta == 0.0f)
		for (size_t i = 0; i < p->nc; i += 2)
			p->C[i] = NAN;
}

static void problem_free(struct problem *p)
{
	free(p->A), free(p->B), free(p->C), free(p->crow);
}

/* beta's term from one row (a bias) instead of C, which is then NaN where
 * the GEMM must not read it. */
static void problem_crow(struct problem *p)
{
	p->crow = random_floats((size_t)p->N);
	for (size_t i = 0; i < p->nc; i += 2)
		p->C[i] = NAN;
}

/* The contract, element by element. Columns past N in each row of C are
 * left as they were. */
static float *reference(const struct problem *p)
{
	float *C = malloc((p->nc ? p->nc : 1) * sizeof *C);
	assert_non_null(C);
	memcpy(C, p->C, p->nc * sizeof *C);
	for (int i = 0; i < p->M; i++)
		for (int j = 0; j < p->N; j++) {
			float acc = 0.0f;
			for (int k = 0; k < p->K; k++) {
				float a = p->ta ? p->A[(size_t)k * p->lda + i]
						: p->A[(size_t)i * p->lda + k];
				float b = p->tb ? p->B[(size_t)j * p->ldb + k]
						: p->B[(size_t)k * p->ldb + j];
				acc = fmaf(a, b, acc);
			}
			float *c = C + (size_t)i * p->ldc + j;
			float old = p->crow ? p->crow[j] : *c;
			if (p->beta == 0.0f)
				*c = p->alpha * acc;
			else
				*c = p->alpha * acc + p->beta * old;
		}
	return C;
}

/* One packing room lent to every GEMM of run_path, as the CPU backend lends
 * a thread's: it holds the last GEMM's panels when the next one starts, so
 * padding left to chance would show. */
static struct apf_gemm_buf lent;

/* p's GEMM on path isa as nt threads' shares, run one after the other
 * (packing in reverse order, so that no share can lean on an earlier
 * one's), in room from buf (NULL: its own); crow and asum as gemm.h has
 * them. */
static float *run_shares(const struct problem *p, int isa, int nt,
			 struct apf_gemm_buf *buf, float *asum)
{
	float *C = malloc((p->nc ? p->nc : 1) * sizeof *C);
	assert_non_null(C);
	memcpy(C, p->C, p->nc * sizeof *C);
	struct apf_gemm g = {.isa = isa, .trans_a = p->ta, .trans_b = p->tb,
			     .M = p->M, .N = p->N, .K = p->K,
			     .alpha = p->alpha, .A = p->A, .lda = p->lda,
			     .B = p->B, .ldb = p->ldb, .beta = p->beta, .C = C,
			     .ldc = p->ldc, .crow = p->crow, .asum = asum};
	assert_apf_ok(apf_gemm_prepare(&g, buf));
	for (int t = nt - 1; t >= 0; t--)
		apf_gemm_pack(&g, t, nt);
	for (int t = 0; t < nt; t++)
		apf_gemm_compute(&g, t, nt);
	apf_gemm_release(&g);
	return C;
}

static float *run_path(const struct problem *p, int isa)
{
	if (p->crow) /* only the prepared GEMM takes a row */
		return run_shares(p, isa, 1, &lent, NULL);
	float *C = malloc((p->nc ? p->nc : 1) * sizeof *C);
	assert_non_null(C);
	memcpy(C, p->C, p->nc * sizeof *C);
	assert_apf_ok(apf_gemm(&lent, isa, p->ta, p->tb, p->M, p->N, p->K,
			       p->alpha, p->A, p->lda, p->B, p->ldb, p->beta,
			       C, p->ldc));
	return C;
}


/* Bit for bit, NaNs included (memcmp, not ==). */
static void assert_same_bits(const char *what, const struct problem *p,
			     const float *got, const float *want)
{
	for (size_t i = 0; i < p->nc; i++)
		if (memcmp(got + i, want + i, sizeof *got)) {
			uint32_t g, w;
			memcpy(&g, got + i, 4);
			memcpy(&w, want + i, 4);
			fail_msg("%s: %s%s %dx%dx%d alpha %g beta %g ld %d,%d,%d: "
				 "C[%zu][%zu] = %.9g (0x%08x), want %.9g (0x%08x)",
				 what, p->ta ? "T" : "N", p->tb ? "T" : "N",
				 p->M, p->N, p->K, p->alpha, p->beta, p->lda,
				 p->ldb, p->ldc, i / p->ldc, i % p->ldc, got[i],
				 g, want[i], w);
		}
}

static void check_every_path(const struct problem *p)
{
	float *want = reference(p);
	for (size_t i = 0; i < sizeof all_paths / sizeof *all_paths; i++) {
		if (!path_runs_here(all_paths[i]))
			continue;
		float *got = run_path(p, all_paths[i]);
		assert_same_bits(apf_cpu_isa_name(all_paths[i]), p, got, want);
		free(got);
	}
	free(want);
}

static void every_path_computes_the_fma_loop_on_random_shapes(void **state)
{
	(void)state;
	static const float alphas[] = {1.0f, -0.5f, 1.7f, 3e-3f};
	static const float betas[] = {0.0f, 1.0f, 0.3f, -2.0f};
	for (int n = 0; n < 400; n++) {
		struct problem p;
		problem_make(&p, below(2), below(2), 1 + below(70),
			     1 + below(70), 1 + below(70), below(2),
			     alphas[below(4)], betas[below(4)]);
		if (n % 3 == 0)
			problem_crow(&p);
		check_every_path(&p);
		problem_free(&p);
	}
}

/* Tile edges exactly: sizes around every path's micro-tile (4, 6, 8, 12,
 * 16, 32) and K of 1. */
static void every_path_computes_the_fma_loop_at_tile_edges(void **state)
{
	(void)state;
	static const int sizes[] = {1, 3, 4, 5, 6, 7, 11, 12, 13, 15, 16, 17,
				    31, 32, 33};
	int n = (int)(sizeof sizes / sizeof *sizes);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j += 2) {
			struct problem p;
			problem_make(&p, i % 2, j % 4 == 0, sizes[i], sizes[j],
				     sizes[(i + j) % n], 1, 1.0f,
				     (i + j) % 3 ? 0.0f : 1.0f);
			check_every_path(&p);
			problem_free(&p);
		}
}

/* The MLP's GEMMs at batch 256: forward (N,T), input gradient (N,N),
 * weight gradient (T,N). */
static void every_path_computes_the_fma_loop_on_the_mlp_shapes(void **state)
{
	(void)state;
	struct problem p;
	problem_make(&p, 0, 1, 256, 1024, 784, 0, 1.0f, 1.0f);
	check_every_path(&p);
	problem_free(&p);
	problem_make(&p, 0, 0, 256, 784, 1024, 0, 1.0f, 0.0f);
	check_every_path(&p);
	problem_free(&p);
	problem_make(&p, 1, 0, 1024, 784, 256, 0, 1.0f, 0.0f);
	check_every_path(&p);
	problem_free(&p);
}

/* A row for beta's term (a layer's bias): one row of C (restated as a
 * column on the vector paths, the row copied into C first), tile edges
 * and whole tiles, beta 0 (the row unread too), and the linear layer's
 * forward at batch 256. */
static void every_path_takes_beta_s_term_from_a_row(void **state)
{
	(void)state;
	static const int sizes[] = {1, 2, 5, 12, 13, 16, 17, 32, 33, 45};
	int n = (int)(sizeof sizes / sizeof *sizes);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			struct problem p;
			problem_make(&p, 0, 1, i % 3 ? sizes[i] : 1, sizes[j],
				     sizes[(i + j) % n], j % 2, 1.0f,
				     (i + j) % 4 ? 1.0f : 0.0f);
			problem_crow(&p);
			check_every_path(&p);
			problem_free(&p);
		}
	struct problem p;
	problem_make(&p, 0, 1, 256, 1024, 784, 0, 1.0f, 1.0f);
	problem_crow(&p);
	check_every_path(&p);
	problem_free(&p);
}

/* Infinities and NaNs in A and B go through the same operations on every
 * path, so they come out the same (a NaN's payload included). */
static void every_path_agrees_on_infinities_and_nans(void **state)
{
	(void)state;
	struct problem p;
	problem_make(&p, 0, 0, 29, 37, 19, 1, 1.0f, 0.5f);
	p.A[3] = INFINITY;
	p.A[(size_t)5 * p.lda + 7] = -INFINITY;
	p.B[(size_t)7 * p.ldb + 2] = 0.0f;
	p.B[(size_t)11 * p.ldb + 20] = NAN;
	p.C[40] = INFINITY;
	check_every_path(&p);
	problem_free(&p);
}

/* K = 0: C = beta C (alpha * 0 with beta 0); M or N = 0: nothing. */
static void empty_sums_and_empty_outputs(void **state)
{
	(void)state;
	struct problem p;
	problem_make(&p, 0, 0, 9, 21, 0, 0, 2.0f, 0.0f);
	check_every_path(&p);
	problem_free(&p);
	problem_make(&p, 1, 1, 9, 21, 0, 1, 2.0f, -3.0f);
	check_every_path(&p);
	problem_free(&p);
	float c = 7.0f;
	for (size_t i = 0; i < sizeof all_paths / sizeof *all_paths; i++) {
		if (!path_runs_here(all_paths[i]))
			continue;
		assert_apf_ok(apf_gemm(NULL, all_paths[i], 0, 0, 0, 5, 3, 1.0f, &c,
				       3, &c, 5, 0.0f, &c, 5));
		assert_apf_ok(apf_gemm(NULL, all_paths[i], 0, 0, 1, 0, 3, 1.0f, &c,
				       3, &c, 1, 0.0f, &c, 1));
	}
	assert_true(c == 7.0f);
}

/* Shares run one after the other: the split (rows or columns, by which
 * has more panels) changes which thread writes an element, never its bits. */
static void thread_shares_give_the_same_bits(void **state)
{
	(void)state;
	static const int shapes[][5] = {
		/* ta, tb, M, N, K: tall (rows split), wide (columns split) */
		{0, 1, 200, 40, 57}, {1, 0, 37, 300, 64}, {0, 0, 5, 7, 3},
		{1, 1, 97, 97, 97},
	};
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		struct problem p;
		problem_make(&p, shapes[s][0], shapes[s][1], shapes[s][2],
			     shapes[s][3], shapes[s][4], 1, 1.0f, 1.0f);
		float *want = reference(&p);
		for (size_t i = 0; i < sizeof all_paths / sizeof *all_paths; i++) {
			if (!path_runs_here(all_paths[i]))
				continue;
			for (int nt = 1; nt <= 3; nt++) {
				float *C = run_shares(&p, all_paths[i], nt, NULL,
						      NULL);
				assert_same_bits(apf_cpu_isa_name(all_paths[i]),
						 &p, C, want);
				free(C);
			}
		}
		free(want);
		problem_free(&p);
	}
}

/* The CPU backend's gemm on its thread pool: 1, 2 and 3 threads, the same
 * bits as the contract's loop. */
static void backend_gemm_is_the_contract_on_any_thread_count(void **state)
{
	(void)state;
	unsetenv("APF_CPU_ISA");
	struct problem p;
	problem_make(&p, 0, 1, 256, 300, 200, 0, 1.0f, 0.0f);
	float *want = reference(&p);
	for (int threads = 1; threads <= 3; threads++) {
		apf_backend *be;
		assert_apf_ok(apf_backend_cpu_new(&be, threads));
		float *C = malloc(p.nc * sizeof *C);
		assert_non_null(C);
		memcpy(C, p.C, p.nc * sizeof *C);
		be->gemm(be, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A, p.lda,
			 p.B, p.ldb, p.beta, C, p.ldc);
		assert_apf_ok(be->sync(be));
		assert_same_bits("backend", &p, C, want);
		free(C);
		apf_backend_free(be);
	}
	free(want);
	problem_free(&p);
}

/* The pool's hand-offs: each GEMM packs every share, waits at a barrier
 * and then computes, in one region. Back-to-back GEMMs on other data (a
 * share computed before the other thread packed would multiply the last
 * GEMM's panels), with pauses longer than the pool's polling so that its
 * threads also fall asleep and are woken, on more threads than cores too
 * (a thread preempted at the barrier). A GEMM under GEMM_WAKE_MIN that
 * finds a worker asleep runs on the caller and nudges the workers awake,
 * so the small shapes take that route after a pause, and the next GEMM
 * (the large one among them runs on the pool whatever it finds) meets
 * workers just nudged. */
static void pool_hand_offs_keep_every_gemm_whole(void **state)
{
	(void)state;
	unsetenv("APF_CPU_ISA");
	enum { NP = 6, ROUNDS = 240 };
	struct problem p[NP];
	float *want[NP];
	for (int i = 0; i < NP; i++) {
		/* three shapes, so that the panel counts change too; the
		 * last over GEMM_WAKE_MIN multiply-adds */
		if (i == NP - 1)
			problem_make(&p[i], 0, 1, 256, 256, 80, 1, 1.0f, 0.0f);
		else if (i % 3 == 2)
			problem_make(&p[i], 1, 0, 96, 72, 64, 1, 1.0f, 0.5f);
		else
			problem_make(&p[i], 0, 1, 72, 96, 64, 1, 1.0f, 0.0f);
		want[i] = reference(&p[i]);
	}
	for (int threads = 2; threads <= 4; threads++) {
		apf_backend *be;
		assert_apf_ok(apf_backend_cpu_new(&be, threads));
		for (int r = 0; r < ROUNDS; r++) {
			const struct problem *q = &p[r % NP];
			float *C = malloc(q->nc * sizeof *C);
			assert_non_null(C);
			memcpy(C, q->C, q->nc * sizeof *C);
			be->gemm(be, q->ta, q->tb, q->M, q->N, q->K, q->alpha,
				 q->A, q->lda, q->B, q->ldb, q->beta, C,
				 q->ldc);
			assert_apf_ok(be->sync(be));
			assert_same_bits("hand-off", q, C, want[r % NP]);
			free(C);
			if (r % 16 == 15 || r % 7 == 3)
				usleep(r % 2 ? 1000 : 300); /* past SPIN_NS */
		}
		apf_backend_free(be);
	}
	for (int i = 0; i < NP; i++) {
		free(want[i]);
		problem_free(&p[i]);
	}
}

static void assert_refused(const char *value, unsigned available,
			   const char *message)
{
	int isa = -1;
	assert_int_equal(apf_cpu_isa_choose(&isa, value, available),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(), message);
}

static void isa_choice_and_its_refusals(void **state)
{
	(void)state;
	unsigned scalar = 1u << APF_CPU_ISA_SCALAR;
	unsigned avx2 = scalar | 1u << APF_CPU_ISA_AVX2;
	unsigned avx512 = avx2 | 1u << APF_CPU_ISA_AVX512;
	int isa;
	/* unset or empty: the best the CPU has */
	assert_apf_ok(apf_cpu_isa_choose(&isa, NULL, scalar));
	assert_int_equal(isa, APF_CPU_ISA_SCALAR);
	assert_apf_ok(apf_cpu_isa_choose(&isa, "", avx2));
	assert_int_equal(isa, APF_CPU_ISA_AVX2);
	assert_apf_ok(apf_cpu_isa_choose(&isa, NULL, avx512));
	assert_int_equal(isa, APF_CPU_ISA_AVX512);
	/* forced below the best */
	assert_apf_ok(apf_cpu_isa_choose(&isa, "scalar", avx512));
	assert_int_equal(isa, APF_CPU_ISA_SCALAR);
	assert_apf_ok(apf_cpu_isa_choose(&isa, "avx2", avx512));
	assert_int_equal(isa, APF_CPU_ISA_AVX2);
	assert_apf_ok(apf_cpu_isa_choose(&isa, "avx512", avx512));
	assert_int_equal(isa, APF_CPU_ISA_AVX512);
	/* what the CPU lacks */
	assert_refused("avx512", avx2,
		       "APF_CPU_ISA: avx512: this CPU lacks AVX-512F");
	assert_refused("avx2", scalar,
		       "APF_CPU_ISA: avx2: this CPU lacks AVX2 and FMA");
	/* names nothing */
	assert_refused("sse9", avx512,
		       "APF_CPU_ISA: unknown value 'sse9' (scalar, avx2 or avx512)");
	assert_refused("AVX2", avx512,
		       "APF_CPU_ISA: unknown value 'AVX2' (scalar, avx2 or avx512)");
	assert_refused("avx2 ", avx512,
		       "APF_CPU_ISA: unknown value 'avx2 ' (scalar, avx2 or avx512)");
	assert_string_equal(apf_cpu_isa_name(APF_CPU_ISA_AVX512), "avx512");
	assert_null(apf_cpu_isa_name(0));
	/* this CPU: scalar always, and the best is one it has */
	unsigned here = apf_cpu_isa_available();
	assert_true(here & scalar);
	assert_true((here >> apf_cpu_isa_best()) & 1);
}

/* The environment variable reaches the backend: a bad value fails its
 * creation with the message, a good one is the path its gemm runs. */
static void backend_honours_and_refuses_apf_cpu_isa(void **state)
{
	(void)state;
	apf_backend *be = NULL;
	setenv("APF_CPU_ISA", "sse9", 1);
	assert_int_equal(apf_backend_cpu_new(&be, 2), APF_EINPUT);
	assert_null(be);
	assert_string_equal(apf_error_message(),
			    "APF_CPU_ISA: unknown value 'sse9' (scalar, avx2 or avx512)");
	assert_int_equal(apf_backend_cpu_plain_new(&be, 1), APF_EINPUT);
	if (!path_runs_here(APF_CPU_ISA_AVX512)) {
		setenv("APF_CPU_ISA", "avx512", 1);
		assert_int_equal(apf_backend_cpu_new(&be, 1), APF_EINPUT);
		assert_string_equal(apf_error_message(),
				    "APF_CPU_ISA: avx512: this CPU lacks AVX-512F");
	}
	setenv("APF_CPU_ISA", "scalar", 1);
	int isa;
	assert_apf_ok(apf_cpu_isa(&isa));
	assert_int_equal(isa, APF_CPU_ISA_SCALAR);
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	apf_backend_free(be);
	unsetenv("APF_CPU_ISA");
	assert_apf_ok(apf_cpu_isa(&isa));
	assert_int_equal(isa, apf_cpu_isa_best());
}

static void prepare_refuses_bad_arguments(void **state)
{
	(void)state;
	float x[64] = {0};
	struct apf_gemm g = {.isa = APF_CPU_ISA_SCALAR, .M = 4, .N = 4,
			     .K = 4, .alpha = 1, .A = x, .lda = 3, .B = x,
			     .ldb = 4, .C = x, .ldc = 4};
	assert_int_equal(apf_gemm_prepare(&g, NULL), APF_EINPUT);
	g.lda = 4;
	g.trans_b = 1, g.K = 5; /* op(B) (5,4) is B (4,5): ldb >= 5 */
	assert_int_equal(apf_gemm_prepare(&g, NULL), APF_EINPUT);
	g.K = 4;
	g.isa = 9;
	assert_int_equal(apf_gemm_prepare(&g, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "path 9"));
	g.isa = APF_CPU_ISA_SCALAR;
	assert_apf_ok(apf_gemm_prepare(&g, NULL));
	apf_gemm_release(&g);
	float sums[4];
	g.asum = sums; /* op(A)'s row sums are A's column sums: A^T only */
	assert_int_equal(apf_gemm_prepare(&g, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "A^T"));
}

/* An operand that is already its one panel (op(A) = A^T of M rows, or
 * op(B) = B of N columns, the panel's width, at a leading dimension of
 * that width) is read in place rather than packed: the contract still,
 * with the leading dimension exact and padded, against the other operand
 * packed, for every path's widths (1 for the column kernels). */
static void every_path_reads_one_panel_operands_in_place(void **state)
{
	(void)state;
	static const int widths[] = {1, 4, 6, 8, 12, 16, 32, 48};
	int n = (int)(sizeof widths / sizeof *widths);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			for (int v = 0; v < 8; v++) {
				/* v: the transposes (the other ones are not
				 * k-major, and their look-alikes must still
				 * be packed: K = M or N makes them so),
				 * K, padding */
				int ta = v & 1, tb = v >> 1 & 1, pad = v >> 2;
				int K = pad ? 37 : ta ? widths[j] : widths[i];
				struct problem p;
				problem_make(&p, ta, tb, widths[i], widths[j], K,
					     pad, 1.0f, j % 2 ? 0.0f : 0.5f);
				check_every_path(&p);
				problem_free(&p);
			}
}

/* asum: op(A)'s row sums (A's column sums, op(A) = A^T), each over k in
 * order from 0, as a bias gradient's column sums are, taken while A is
 * packed: on every path, for 1 to 3 threads' shares, beside a GEMM whose
 * C is still the contract's. Shapes with one row (restated as a column),
 * one column, no columns and K 0 included; a column of -0 sums to +0, as
 * 0 + -0 does. */
static void every_path_sums_op_a_rows_while_packing(void **state)
{
	(void)state;
	static const int shapes[][3] = {
		/* M, N, K (the last three with A one panel on some path) */
		{512, 128, 70}, {37, 300, 64}, {13, 5, 17}, {1, 40, 33},
		{29, 1, 50},	{7, 0, 9},     {9, 12, 0},  {12, 32, 16},
		{16, 1, 300},	{1, 16, 500},  {4, 8, 21},
	};
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes + 20; s++) {
		struct problem p;
		int M, N, K;
		if (s < sizeof shapes / sizeof *shapes)
			M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
		else
			M = 1 + below(70), N = 1 + below(70), K = below(70);
		problem_make(&p, 1, below(2), M, N, K,
			     s >= sizeof shapes / sizeof *shapes, 1.0f, 0.0f);
		if (p.ldc < 1) /* N 0: C holds nothing, ldc must be >= 1 */
			p.ldc = 1;
		for (int k = 0; k < K; k++) /* column 0: -0 in every row */
			p.A[(size_t)k * p.lda] = -0.0f;
		float *want_sum = malloc((size_t)M * sizeof *want_sum);
		assert_non_null(want_sum);
		for (int i = 0; i < M; i++) {
			float acc = 0.0f;
			for (int k = 0; k < K; k++)
				acc += p.A[(size_t)k * p.lda + i];
			want_sum[i] = acc;
		}
		float *want = reference(&p);
		for (size_t i = 0; i < sizeof all_paths / sizeof *all_paths; i++) {
			if (!path_runs_here(all_paths[i]))
				continue;
			for (int nt = 1; nt <= 3; nt++) {
				float *sum = malloc((size_t)M * sizeof *sum);
				assert_non_null(sum);
				for (int m = 0; m < M; m++)
					sum[m] = NAN; /* must all be written */
				float *C = run_shares(&p, all_paths[i], nt,
						      &lent, sum);
				assert_same_bits(apf_cpu_isa_name(all_paths[i]),
						 &p, C, want);
				for (int m = 0; m < M; m++)
					if (memcmp(sum + m, want_sum + m,
						   sizeof *sum))
						fail_msg("%s, %d threads: %dx%dx%d: "
							 "asum[%d] = %.9g, want "
							 "%.9g",
							 apf_cpu_isa_name(
								 all_paths[i]),
							 nt, M, N, K, m, sum[m],
							 want_sum[m]);
				free(C);
				free(sum);
			}
		}
		free(want);
		free(want_sum);
		problem_free(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_path_computes_the_fma_loop_on_random_shapes),
		cmocka_unit_test(every_path_computes_the_fma_loop_at_tile_edges),
		cmocka_unit_test(every_path_computes_the_fma_loop_on_the_mlp_shapes),
		cmocka_unit_test(every_path_takes_beta_s_term_from_a_row),
		cmocka_unit_test(every_path_agrees_on_infinities_and_nans),
		cmocka_unit_test(empty_sums_and_empty_outputs),
		cmocka_unit_test(thread_shares_give_the_same_bits),
		cmocka_unit_test(backend_gemm_is_the_contract_on_any_thread_count),
		cmocka_unit_test(pool_hand_offs_keep_every_gemm_whole),
		cmocka_unit_test(isa_choice_and_its_refusals),
		cmocka_unit_test(backend_honours_and_refuses_apf_cpu_isa),
		cmocka_unit_test(prepare_refuses_bad_arguments),
		cmocka_unit_test(every_path_reads_one_panel_operands_in_place),
		cmocka_unit_test(every_path_sums_op_a_rows_while_packing),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	apf_gemm_buf_free(&lent);
	return failed;
}
