/*
 * train_step.c: apf's side of bench/train_step. Times whole training steps
 * (next batch from the real dataset, forward, backward, AdamW update) of a
 * workload's base model and prints samples per second, the share of the
 * machine's sgemm peak reached, and the process's peak memory.
 *
 *     train_step WORKLOAD BATCH THREADS STEPS REPS [serve]
 *
 * (serve: the same figures, but the steps' and the bound's on request,
 * as often as asked, from one process: serve() below.)
 *
 * Output, one figure per line:
 *     samples_per_s <median over REPS runs of STEPS steps, after warm-up>
 *     gflops <model GEMM FLOPs per second at that rate>
 *     sgemm_peak_gflops <best of square 1024 and 2048 sgemm, same threads,
 *                        OpenBLAS's or apf's own, whichever is faster>
 *     sgemm_openblas_gflops, sgemm_apf_gflops <each of the two alone>
 *     peak_rss_mib <VmHWM of this process: data + model + optimizer>
 *     step_bytes <bytes a step moves at the least, roofline model below>
 *     step_flops <the FLOPs above, per step>
 *     mem_gbps <best STREAM-style triad rate over arrays far beyond the
 *               caches, same threads>
 *
 * FLOPs count the multiply-adds of convolutions and linear layers, times 2
 * (multiply and add), times 3 (forward, input gradient, weight gradient).
 * Bytes: BATCH times apf_net_example_bytes (every stored tensor and its
 * gradient written once and read once), plus the parameters read forward
 * and backward and their gradient written, plus AdamW's read of
 * parameters, gradients and both moments and write of three: 10 floats a
 * parameter. The roofline bound of a step is the larger of its FLOPs at
 * the sgemm peak and its bytes at the triad rate.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "workload/workload.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* GFLOP/s of one square n x n x n sgemm by OpenBLAS (be NULL) or by apf's
 * backend be: the best of three timings after a warm-up. */
static double square_sgemm(apf_backend *be, int n, const float *a,
			   const float *b, float *c)
{
	double best = 0;
	for (int r = 0; r < 4; r++) {
		uint64_t t0 = apf_now_ns();
		if (be) {
			be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
				 n);
			if (be->sync(be))
				exit(2);
		} else {
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		}
		double g = 2.0 * n * n * (double)n / (double)(apf_now_ns() - t0);
		best = r > 0 && g > best ? g : best; /* skip the first */
	}
	return best;
}

/* The machine's sgemm rate on the step's threads: the best square 1024
 * and 2048 sgemm of OpenBLAS and of apf's own GEMM. Either alone can fall
 * short of the cores: Debian's OpenBLAS 0.3.21 runs its Haswell (AVX2)
 * kernel on CPUs it does not know, an AMD EPYC of family 26 among them,
 * where apf's AVX-512 GEMM ran 364-407 GFLOP/s against its 196-209, and
 * steps ran above that "peak", which then bounded nothing. */
static double sgemm_peak(apf_backend *be, double *openblas, double *own)
{
	*openblas = *own = 0;
	for (int n = 1024; n <= 2048; n *= 2) {
		float *a = calloc((size_t)n * n, sizeof *a);
		float *b = calloc((size_t)n * n, sizeof *b);
		float *c = calloc((size_t)n * n, sizeof *c);
		if (!a || !b || !c)
			exit(2);
		for (size_t i = 0; i < (size_t)n * n; i++)
			a[i] = b[i] = (float)(i % 13) * 1e-3f;
		double g = square_sgemm(NULL, n, a, b, c);
		*openblas = g > *openblas ? g : *openblas;
		g = square_sgemm(be, n, a, b, c);
		*own = g > *own ? g : *own;
		free(a);
		free(b);
		free(c);
	}
	return *openblas > *own ? *openblas : *own;
}

/* The triad a[i] = b[i] + s c[i] over arrays of 2^25 floats (128 MiB
 * each), each thread on its own slice (first touched by it), best of five
 * after one warm-up; STREAM's count of 12 bytes an element. */
enum { TRIAD_N = 1 << 25 };

struct triad {
	float *a, *b, *c;
	size_t lo, hi;
	int init;
};

static void *triad_slice(void *arg)
{
	struct triad *t = arg;
	if (t->init)
		for (size_t i = t->lo; i < t->hi; i++) {
			t->a[i] = 0.0f;
			t->b[i] = 1.0f;
			t->c[i] = 2.0f;
		}
	else
		for (size_t i = t->lo; i < t->hi; i++)
			t->a[i] = t->b[i] + 3.0f * t->c[i];
	return NULL;
}

static double triad_gbps(int threads)
{
	float *a = malloc(TRIAD_N * sizeof *a), *b = malloc(TRIAD_N * sizeof *b),
	      *c = malloc(TRIAD_N * sizeof *c);
	pthread_t *tid = calloc((size_t)threads, sizeof *tid);
	struct triad *sl = calloc((size_t)threads, sizeof *sl);
	if (!a || !b || !c || !tid || !sl)
		exit(2);
	double best = 0;
	for (int r = -2; r < 5; r++) {
		uint64_t t0 = apf_now_ns();
		for (int k = 0; k < threads; k++) {
			sl[k] = (struct triad){a, b, c,
					       (size_t)TRIAD_N * k / threads,
					       (size_t)TRIAD_N * (k + 1) / threads,
					       r == -2};
			if (pthread_create(&tid[k], NULL, triad_slice, &sl[k]))
				exit(2);
		}
		for (int k = 0; k < threads; k++)
			pthread_join(tid[k], NULL);
		double g = 12.0 * TRIAD_N / (double)(apf_now_ns() - t0);
		if (r >= 0 && g > best)
			best = g;
	}
	/* Keeps the loop's stores observable. */
	if (a[TRIAD_N / 2] != 7.0f)
		exit(3);
	free(a);
	free(b);
	free(c);
	free(tid);
	free(sl);
	return best;
}

static long peak_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kib;
}

static int die(void)
{
	fprintf(stderr, "train_step: %s\n", apf_error_message());
	return 2;
}

/* One workload's model, data and AdamW state, stepping on. */
struct stepper {
	apf_workload *wl;
	apf_net *net;
	apf_backend *be;
	float *params, *grads, *scratch, *m, *v;
	struct apf_adamw h;
	apf_data_pos pos;
	long t;
	int B;
};

/* Samples per second of n steps, or a negative number on an error (said
 * by apf_error_message()). */
static double run_steps(struct stepper *s, long n)
{
	uint64_t t0 = apf_now_ns();
	for (long k = 0; k < n; k++) {
		apf_batch b;
		double loss;
		if (apf_workload_next_batch(&b, s->wl, &s->pos, s->B) ||
		    apf_workload_loss_grad(s->wl, &b, (uint64_t)s->t, &loss,
					   s->grads))
			return -1;
		s->t++;
		apf_adamw_update(s->be, s->net, s->params, s->grads, s->m, s->v,
				 s->scratch, &s->h, s->h.lr, s->t);
	}
	if (s->be->sync(s->be))
		return -1;
	return (double)n * s->B * 1e9 / (double)(apf_now_ns() - t0);
}

/* The median of reps runs of n steps each; negative on an error. */
static double median_rate(struct stepper *s, long n, long reps)
{
	double rates[100];
	for (long r = 0; r < reps; r++)
		if ((rates[r] = run_steps(s, n)) < 0)
			return -1;
	qsort(rates, (size_t)reps, sizeof *rates, cmp_double);
	return rates[reps / 2];
}

static void print_model(double step_flops, double step_bytes)
{
	printf("step_flops %.0f\n", step_flops);
	printf("step_bytes %.0f\n", step_bytes);
	printf("numerics %d\n", apf_numerics_get());
}

static void print_bound(apf_backend *be, int threads)
{
	double openblas, own;
	printf("sgemm_peak_gflops %.1f\n", sgemm_peak(be, &openblas, &own));
	printf("sgemm_openblas_gflops %.1f\n", openblas);
	printf("sgemm_apf_gflops %.1f\n", own);
	printf("mem_gbps %.2f\n", triad_gbps(threads));
}

static void reply_done(void)
{
	printf("done\n");
	fflush(stdout);
}

/* serve: after the warm-up, its static figures (peak_rss_mib among them:
 * the steps' memory is all allocated by then, and the bound's arrays
 * would count later) and `ready`, then one command a line on stdin, each
 * answered by figures and `done`: `steps` (samples_per_s, the median of
 * REPS runs of STEPS steps) and `bound` (the sgemm peak and triad rate,
 * measured now); the end of stdin is answered by `done`.
 * bench/train_step/run alternates it with PyTorch's process, which serves
 * the same way, so a pair's two figures are taken a fraction of a second
 * apart, not a process's start-up apart. */
static int serve(struct stepper *s, int threads, long steps, long reps)
{
	printf("peak_rss_mib %.1f\n", peak_rss_kib() / 1024.0);
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (!strcmp(line, "steps\n")) {
			double rate = median_rate(s, steps, reps);
			if (rate < 0)
				return die();
			printf("samples_per_s %.1f\n", rate);
		} else if (!strcmp(line, "bound\n")) {
			print_bound(s->be, threads);
		} else {
			fprintf(stderr, "train_step: serve: unknown command "
					"%.20s\n", line);
			return 2;
		}
		reply_done();
	}
	printf("done\n");
	return 0;
}

int main(int argc, char **argv)
{
	int serving = argc == 7 && !strcmp(argv[6], "serve");
	if (argc != 6 && !serving) {
		fprintf(stderr, "usage: train_step WORKLOAD BATCH THREADS STEPS "
				"REPS [serve]\n");
		return 2;
	}
	const char *name = argv[1];
	int B = atoi(argv[2]), threads = atoi(argv[3]);
	long steps = atol(argv[4]), reps = atol(argv[5]);
	if (B <= 0 || threads <= 0 || steps <= 0 || reps <= 0 || reps > 100)
		return fprintf(stderr, "train_step: bad arguments\n"), 2;
	apf_workload_spec *spec;
	apf_backend *be;
	apf_workload *wl;
	apf_trial_key key = {1, 0, 0};
	if (apf_workload_spec_load(&spec, name) ||
	    apf_backend_cpu_new(&be, threads) ||
	    apf_workload_open(&wl, spec, "base", be, &key, 0))
		return die();
	apf_net *net = apf_workload_net(wl);
	size_t np = apf_net_param_floats(net), ns = apf_net_state_floats(net);
	float *arena, *grads, *scratch;
	if (be->alloc(be, (3 * np + ns) * sizeof(float), (void **)&arena) ||
	    be->alloc(be, np * sizeof(float), (void **)&grads) ||
	    be->alloc(be, np * sizeof(float), (void **)&scratch))
		return die();
	float *params = arena, *state = arena + np;
	if (apf_workload_bind(wl, params, state) || apf_workload_init(wl))
		return die();
	struct stepper s = {
		.wl = wl, .net = net, .be = be, .params = params,
		.grads = grads, .scratch = scratch, .m = state + ns,
		.v = state + ns + np,
		.h = {1e-3, 0.9, 0.999, 1e-8, 1e-4, 0.0}, .B = B};
	if (run_steps(&s, steps / 4 > 2 ? steps / 4 : 2) < 0)
		return die();
	double flops = 6.0 * apf_net_forward_macs(net);
	int rc = 0;
	double bytes = B * apf_net_example_bytes(net) + 10.0 * sizeof(float) * np;
	if (serving) {
		print_model(flops * B, bytes);
		rc = serve(&s, threads, steps, reps);
	} else {
		double rate = median_rate(&s, steps, reps);
		if (rate < 0)
			return die();
		printf("samples_per_s %.1f\n", rate);
		printf("gflops %.1f\n", rate * flops / 1e9);
		printf("peak_rss_mib %.1f\n", peak_rss_kib() / 1024.0);
		print_model(flops * B, bytes);
		print_bound(be, threads);
	}
	be->free(be, arena);
	be->free(be, grads);
	be->free(be, scratch);
	apf_workload_close(wl);
	apf_workload_spec_free(spec);
	apf_backend_free(be);
	return rc;
}
