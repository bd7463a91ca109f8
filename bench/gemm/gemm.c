/*
 * gemm.c: apf's side of bench/gemm. Times apf's own GEMM (nn/cpu/gemm.h)
 * on each instruction-set path this CPU runs, and OpenBLAS's cblas_sgemm
 * in the same process, on the shapes the workloads' training steps use,
 * and prints a digest of each one's result bits.
 *
 *     gemm THREADS REPS [--openblas-only] [CASE]
 *
 * CASE runs that case alone; --openblas-only leaves apf's paths out (for
 * runs under another OPENBLAS_CORETYPE). Output, one line per figure:
 *     core <OpenBLAS's core type, as openblas_get_corename says>
 *     gflops <case> <impl> <median GFLOP/s over REPS timings>
 *     digest <case> <impl> <FNV-1a 64 of C's bits>
 * impl is openblas, or scalar, avx2, avx512 for apf's paths. "Pool" cases
 * run as a layer outside a parallel region does: apf's through the CPU
 * backend's gemm on THREADS threads (APF_CPU_ISA set to the path when the
 * backend is made), OpenBLAS with THREADS threads. "Serial" cases run as a
 * convolution's chunk inside a region does: one thread each. OpenBLAS's core
 * type is whatever it picks or OPENBLAS_CORETYPE says (bench/gemm/run runs
 * this program under each).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "nn/cpu/gemm.h"
#include "nn/cpu/isa.h"
#include "nn/nn.h"

struct gemm_case {
	const char *name;
	int ta, tb, M, N, K;
	int serial;
};

/* fmnist_mlp (784-1024-1024-10, batch 256): each layer's forward (N,T),
 * input gradient (N,N) and weight gradient (T,N); clicks_dlrm (batch 256):
 * the top MLP's first layer, 367 interaction features to 256, the same
 * three (its K and N are no multiple of a tile); fmnist_cnn (batch 128 on
 * two threads, so 64 images per chunk): the stem's weight gradient as the
 * im2col route would run it (C = 1: training takes the direct kernel,
 * which gives its bits), and a 3x3 16->16 forward as im2col would run
 * it; text_lm's Transformer (batch 32 windows of 64 tokens, width 128):
 * its feed-forward layers' forward, input gradient and weight gradient,
 * 128 -> 512 and 512 -> 128; the square peak shape; and the submission
 * ABI's matrix product at 512. */
static const struct gemm_case cases[] = {
	{"mlp_fc1_fwd", 0, 1, 256, 1024, 784, 0},
	{"mlp_fc1_dw", 1, 0, 1024, 784, 256, 0},
	{"mlp_fc2_fwd", 0, 1, 256, 1024, 1024, 0},
	{"mlp_fc2_dinp", 0, 0, 256, 1024, 1024, 0},
	{"mlp_fc2_dw", 1, 0, 1024, 1024, 256, 0},
	{"mlp_fc3_fwd", 0, 1, 256, 10, 1024, 0},
	{"dlrm_top1_fwd", 0, 1, 256, 256, 367, 0},
	{"dlrm_top1_dinp", 0, 0, 256, 367, 256, 0},
	{"dlrm_top1_dw", 1, 0, 256, 367, 256, 0},
	{"cnn_stem_dw", 1, 0, 16, 9, 50176, 1},
	{"cnn_conv16_fwd", 0, 1, 12544, 16, 144, 1},
	{"lm_fc1_fwd", 0, 1, 2048, 512, 128, 0},
	{"lm_fc1_dinp", 0, 0, 2048, 128, 512, 0},
	{"lm_fc1_dw", 1, 0, 512, 128, 2048, 0},
	{"lm_fc2_fwd", 0, 1, 2048, 128, 512, 0},
	{"lm_fc2_dinp", 0, 0, 2048, 512, 128, 0},
	{"lm_fc2_dw", 1, 0, 128, 512, 2048, 0},
	{"square_1024", 0, 0, 1024, 1024, 1024, 0},
	/* apf_matmul (ops.h ABI 2) is this GEMM on the trial's backend: a
	 * 512 cube as issue 30 sizes it, and a Shampoo factor's G G^T */
	{"matmul_512", 0, 0, 512, 512, 512, 0},
	{"matmul_512_ggt", 0, 1, 512, 512, 512, 0},
};

static uint64_t rng = 0x853c49e6748fea9bull;

static float uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng >> 40) / 8388608.0 - 1.0);
}

static uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct operands {
	const struct gemm_case *c;
	float *A, *B, *C;
	int lda, ldb;
};

typedef void (*gemm_run)(const struct operands *o, void *ctx);

static void run_openblas(const struct operands *o, void *ctx)
{
	(void)ctx;
	const struct gemm_case *c = o->c;
	cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans,
		    c->tb ? CblasTrans : CblasNoTrans, c->M, c->N, c->K, 1.0f,
		    o->A, o->lda, o->B, o->ldb, 0.0f, o->C, c->N);
}

static void run_backend(const struct operands *o, void *ctx)
{
	apf_backend *be = ctx;
	const struct gemm_case *c = o->c;
	be->gemm(be, c->ta, c->tb, c->M, c->N, c->K, 1.0f, o->A, o->lda, o->B,
		 o->ldb, 0.0f, o->C, c->N);
}

/* A convolution chunk's GEMM: one thread, its packing room reused. */
struct serial {
	int isa;
	struct apf_gemm_buf buf;
};

static void run_serial(const struct operands *o, void *ctx)
{
	struct serial *sr = ctx;
	int isa = sr->isa;
	const struct gemm_case *c = o->c;
	if (apf_gemm(&sr->buf, isa, c->ta, c->tb, c->M, c->N, c->K, 1.0f, o->A, o->lda,
		     o->B, o->ldb, 0.0f, o->C, c->N)) {
		fprintf(stderr, "gemm: %s\n", apf_error_message());
		exit(2);
	}
}

/* Median GFLOP/s over reps timings, each of enough calls to last ~40 ms. */
static double time_gemm(const struct operands *o, gemm_run fn, void *ctx,
			int reps)
{
	const struct gemm_case *c = o->c;
	double flop = 2.0 * c->M * c->N * (double)c->K;
	uint64_t t0 = apf_now_ns();
	fn(o, ctx); /* warm-up, and the size of a timing */
	double once = (double)(apf_now_ns() - t0);
	long calls = once > 0 ? (long)(40e6 / once) : 1;
	if (calls < 1)
		calls = 1;
	double *g = calloc((size_t)reps, sizeof *g);
	if (!g)
		exit(2);
	for (int r = 0; r < reps; r++) {
		t0 = apf_now_ns();
		for (long i = 0; i < calls; i++)
			fn(o, ctx);
		g[r] = flop * (double)calls / (double)(apf_now_ns() - t0);
	}
	qsort(g, (size_t)reps, sizeof *g, cmp_double);
	double med = g[reps / 2];
	free(g);
	return med;
}

static void report(const struct operands *o, const char *impl, double gflops)
{
	printf("gflops %s %s %.2f\n", o->c->name, impl, gflops);
	printf("digest %s %s %016" PRIx64 "\n", o->c->name, impl,
	       fnv1a(o->C, (size_t)o->c->M * o->c->N * sizeof(float)));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5) {
		fprintf(stderr, "usage: gemm THREADS REPS [--openblas-only] "
				"[CASE]\n");
		return 2;
	}
	int threads = atoi(argv[1]), reps = atoi(argv[2]);
	int openblas_only = argc > 3 && !strcmp(argv[3], "--openblas-only");
	const char *only = argc > 3 + openblas_only ? argv[3 + openblas_only]
						    : NULL;
	if (threads < 1 || reps < 1 || reps > 100)
		return fprintf(stderr, "gemm: bad arguments\n"), 2;
	unsigned have = openblas_only ? 0 : apf_cpu_isa_available();
	printf("core %s\n", openblas_get_corename());
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const struct gemm_case *c = &cases[i];
		if (only && strcmp(only, c->name))
			continue;
		struct operands o = {.c = c};
		size_t na = (size_t)c->M * c->K, nb = (size_t)c->K * c->N;
		o.A = malloc(na * sizeof *o.A);
		o.B = malloc(nb * sizeof *o.B);
		o.C = malloc((size_t)c->M * c->N * sizeof *o.C);
		if (!o.A || !o.B || !o.C)
			return fprintf(stderr, "gemm: out of memory\n"), 2;
		for (size_t k = 0; k < na; k++)
			o.A[k] = uniform();
		for (size_t k = 0; k < nb; k++)
			o.B[k] = uniform();
		o.lda = c->ta ? c->M : c->K;
		o.ldb = c->tb ? c->K : c->N;
		int nt = c->serial ? 1 : threads;
		openblas_set_num_threads(nt);
		report(&o, "openblas", time_gemm(&o, run_openblas, NULL, reps));
		for (int isa = APF_CPU_ISA_SCALAR; isa <= APF_CPU_ISA_AVX512;
		     isa++) {
			if (!((have >> isa) & 1))
				continue;
			/* the scalar path is the reference, not a contender:
			 * fewer timings keep the bench short */
			int r = isa == APF_CPU_ISA_SCALAR ? 1 : reps;
			double g;
			if (c->serial) {
				struct serial sr = {.isa = isa};
				g = time_gemm(&o, run_serial, &sr, r);
				apf_gemm_buf_free(&sr.buf);
			} else {
				apf_backend *be;
				setenv("APF_CPU_ISA", apf_cpu_isa_name(isa), 1);
				if (apf_backend_cpu_new(&be, threads)) {
					fprintf(stderr, "gemm: %s\n",
						apf_error_message());
					return 2;
				}
				g = time_gemm(&o, run_backend, be, r);
				if (be->sync(be)) {
					fprintf(stderr, "gemm: %s\n",
						apf_error_message());
					return 2;
				}
				apf_backend_free(be);
			}
			report(&o, apf_cpu_isa_name(isa), g);
		}
		free(o.A);
		free(o.B);
		free(o.C);
	}
	return 0;
}
