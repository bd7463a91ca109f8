/*
 * cpu.c: the CPU backend, the readable reference every other backend is
 * tested against. Each layer is a plain `<layer>_forward` / `_backward` pair
 * over flat float arrays (shapes in the parameter names); GEMMs go to
 * apf's own GEMM (gemm.h) on the instruction-set path chosen when the
 * backend is created (isa.h: the best this CPU has, or APF_CPU_ISA).
 * Convolutions are im2col + GEMM over chunks of the batch; the default
 * backend routes the shapes fast.c takes (direct and Winograd convolutions,
 * fused batch norm) to its kernels, on the same path.
 *
 * Determinism: work is shared among be->threads threads by static splits
 * that depend only on sizes and the thread count; sums that cross a split
 * keep one partial per thread and add them in thread order. The GEMM's
 * summation order is fixed by its contract (gemm.h), the same on every
 * path and for every thread count. So a fixed thread count gives
 * bit-identical results. Statistics (batch norm, layer norm, reductions)
 * accumulate in double.
 */

/* The layer loops are the hot path outside BLAS; -O2's cheap vectoriser
 * leaves most of them scalar (possible aliasing, unknown trip counts).
 * The Makefile builds this file with -fno-math-errno, so that loops of
 * sqrtf vectorise too. */
#pragma GCC optimize("O3")

#include "nn/nn.h"
#include "nn/cpu/fast.h"
#include "nn/cpu/gemm.h"
#include "nn/cpu/isa.h"
#include "nn/mathf.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

/* Hot loops get an AVX2 clone chosen at run time. Both clones compute the
 * same bits: C17 mode keeps floating-point contraction off and nothing is
 * reassociated, so vector width changes only speed. */
#define HOT __attribute__((target_clones("avx2", "default")))

/* ---- thread pool -----------------------------------------------------------
 *
 * be->threads threads (the caller is thread 0) share each layer's work by a
 * static split that depends only on the sizes and the thread count, so the
 * result is the same run to run. Work that sums across the split (batch-norm
 * statistics, convolution weight gradients) keeps one partial per thread and
 * adds the partials in thread order. A GEMM called outside these regions
 * (cpu_gemm) shares its output among the pool's threads; one inside them
 * (a convolution's chunk) runs on the thread that calls it.
 */
#define MAX_THREADS 16
/* Below this many elements a split costs more than it saves. */
#define PAR_MIN 32768

typedef void (*task_fn)(void *arg, int t, int nt);

struct pool;

struct worker_arg {
	struct pool *p;
	int t;
};

struct pool {
	int n;
	pthread_t th[MAX_THREADS];
	struct worker_arg args[MAX_THREADS];
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	task_fn fn;
	void *arg;
	/* Written under mu; read without it by the spinning waits below. */
	atomic_ulong generation;
	atomic_int pending, stop;
	/* Workers asleep on `work` (a hint, read without the lock), and the
	 * nudges that send them back to polling without a task (pool_nudge). */
	atomic_int sleeping;
	unsigned long nudges;
	/* pool_barrier's: threads arrived, and the barriers passed so far */
	atomic_int arrived;
	atomic_uint passed;
	pthread_cond_t barrier;
	int fast; /* route the shapes fast.c takes to it */
	int isa;  /* the own kernels' path (isa.h): GEMM and fast.c */
	int numerics; /* nn.h's APF_NUMERICS: the activations' formulas,
		       * and from 3 subnormals flushed to zero */
	/* Each thread's packing room, reused GEMM after GEMM: thread t's in a
	 * region, thread 0's (the caller's) for cpu_gemm outside them. */
	struct apf_gemm_buf gemm_buf[MAX_THREADS];
	/* Sticky, as nn.h has it: the first failure since the last sync, and
	 * the layer it stopped (whose outputs were left unwritten). */
	int err;
	const char *err_layer;
};

/* A hand-off between regions waits this long by polling before it sleeps
 * on its condition variable. A step's regions mostly follow each other
 * within microseconds, and waking a sleeping thread costs tens of them on
 * a virtual machine (the other core halts and its host must schedule it
 * again). At 30 us, enough gaps of a step (a layer's serial set-up, the
 * loss, the next batch) outlasted the poll that every model's step ran
 * about 5% slower than at 100 us, and the DLRM's 11%; the process's CPU
 * time, which the cpu clock charges (design 3.4), did not rise (the waits
 * it would charge are those wake-ups' system time). Idle waits longer than
 * the poll still sleep and cost the clock nothing. */
#define SPIN_NS 100000

/* One pause of a bounded poll: false once SPIN_NS have passed since the
 * poll began (the clock is read every 64 pauses). */
struct spin {
	unsigned n;
	uint64_t until;
};

static bool spin_on(struct spin *sp)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
	if (++sp->n % 64)
		return true;
	uint64_t now = apf_now_ns();
	if (!sp->until)
		sp->until = now + SPIN_NS;
	return now < sp->until;
}

/* Polls until the generation moves from seen or the pool stops, or the
 * poll's time is up; the caller then checks again under the lock. */
static void spin_for_work(const struct pool *p, unsigned long seen)
{
	struct spin sp = {0};
	while (atomic_load_explicit(&p->generation, memory_order_acquire) ==
		       seen &&
	       !atomic_load_explicit(&p->stop, memory_order_relaxed) &&
	       spin_on(&sp))
		;
}

/* Polls until every worker has finished its share, or the time is up. */
static void spin_for_done(const struct pool *p)
{
	struct spin sp = {0};
	while (atomic_load_explicit(&p->pending, memory_order_acquire) &&
	       spin_on(&sp))
		;
}

/* Every thread of a region waits here until all have arrived. */
static void pool_barrier(struct pool *p)
{
	unsigned phase = atomic_load(&p->passed);
	if (atomic_fetch_add(&p->arrived, 1) + 1 == p->n) {
		atomic_store(&p->arrived, 0);
		pthread_mutex_lock(&p->mu);
		atomic_fetch_add(&p->passed, 1);
		pthread_cond_broadcast(&p->barrier);
		pthread_mutex_unlock(&p->mu);
		return;
	}
	struct spin sp = {0};
	while (atomic_load(&p->passed) == phase && spin_on(&sp))
		;
	pthread_mutex_lock(&p->mu);
	while (atomic_load(&p->passed) == phase)
		pthread_cond_wait(&p->barrier, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* ---- subnormals ---------------------------------------------------------
 *
 * Numerics 3 computes with subnormal floats flushed to zero: MXCSR's
 * flush-to-zero (a result too small for a normal float is 0) and
 * denormals-are-zero (so is such an input), on every thread that computes
 * for a backend. Intel cores take a microcode assist, on the order of a
 * hundred cycles, for each subnormal result: an optimizer's state that
 * decays geometrically (Adam's first moment where a ReLU unit died and its
 * gradient is exactly 0: b1^t falls under 2^-126 within ~150 steps at b1
 * = 0.58) made a sealed NAdamW trial on fmnist_mlp 2.5x slower per step
 * from there on on a Xeon (issue 36), a cost GPUs do not charge, that fell
 * on some algorithms and not others (the AMD EPYC the leaderboard ran on
 * showed none: its cores charge little for them). TensorFlow's and XLA's
 * CPU thread pools run so too. Every path obeys MXCSR alike, so the paths
 * still give the same bits; versions 1 and 2 keep IEEE subnormals, so
 * their runs replay. */

#if defined(__SSE__)
#define MXCSR_FTZ_DAZ 0x8040u /* bit 15 flush-to-zero, bit 6 denormals-are-zero */

/* Sets the calling thread's mode for numerics version v; returns the mode
 * it had, for fp_restore. */
static unsigned fp_mode(int v)
{
	unsigned was = _mm_getcsr();
	unsigned want = v >= 3 ? was | MXCSR_FTZ_DAZ : was & ~MXCSR_FTZ_DAZ;
	if (want != was)
		_mm_setcsr(want);
	return was;
}

static void fp_restore(unsigned was)
{
	if (_mm_getcsr() != was)
		_mm_setcsr(was);
}
#else
#error "numerics 3 flushes subnormals through MXCSR: an x86-64 build"
#endif

static void *worker(void *v)
{
	struct worker_arg *wa = v;
	struct pool *p = wa->p;
	unsigned long seen = 0;
	for (;;) {
		spin_for_work(p, seen);
		pthread_mutex_lock(&p->mu);
		unsigned long nudged = p->nudges;
		while (p->generation == seen && !p->stop &&
		       p->nudges == nudged) {
			atomic_fetch_add(&p->sleeping, 1);
			pthread_cond_wait(&p->work, &p->mu);
			atomic_fetch_sub(&p->sleeping, 1);
		}
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		if (p->generation == seen) { /* nudged: poll again */
			pthread_mutex_unlock(&p->mu);
			continue;
		}
		seen = p->generation;
		task_fn fn = p->fn;
		void *arg = p->arg;
		pthread_mutex_unlock(&p->mu);
		fn(arg, wa->t, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

static int nthreads(const apf_backend *be)
{
	const struct pool *p = be->impl;
	return p->n;
}

static int use_fast(const apf_backend *be)
{
	const struct pool *p = be->impl;
	return p->fast;
}

/* Runs fn(arg, t, nt) on every thread and waits for all. */
static void parallel(apf_backend *be, task_fn fn, void *arg)
{
	struct pool *p = be->impl;
	/* The caller computes its share in the backend's mode, whichever
	 * backend its thread was made for. */
	unsigned was = fp_mode(p->numerics);
	if (p->n == 1) {
		fn(arg, 0, 1);
		fp_restore(was);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->pending = p->n - 1;
	p->generation++;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	spin_for_done(p);
	pthread_mutex_lock(&p->mu);
	while (p->pending)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
	fp_restore(was);
}

/* Wakes the sleeping workers without a task, so that they poll for the
 * next region (for SPIN_NS, then sleep again) instead of being woken by
 * it: on a virtual machine a wake-up takes tens of microseconds. */
static void pool_nudge(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->nudges++;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
}

/* Thread t's share [*b, *e) of n items, boundaries on multiples of align. */
static void split(size_t n, int t, int nt, size_t align, size_t *b, size_t *e)
{
	size_t blocks = (n + align - 1) / align;
	size_t per = blocks / (size_t)nt, extra = blocks % (size_t)nt;
	size_t lo = (size_t)t * per + ((size_t)t < extra ? (size_t)t : extra);
	size_t hi = lo + per + ((size_t)t < extra ? 1 : 0);
	*b = lo * align < n ? lo * align : n;
	*e = hi * align < n ? hi * align : n;
}

/* Convolutions run im2col over chunks of the batch whose column matrix stays
 * under this many floats: small enough to stay in the last-level cache, large
 * enough that each GEMM is efficient. */
#define CONV_CHUNK_FLOATS ((size_t)1 << 20)

/* ---- memory -------------------------------------------------------------- */

static int cpu_alloc(apf_backend *be, size_t nbytes, void **out)
{
	(void)be;
	/* 64-byte alignment for vector loads (huge pages for a layer's
	 * tensors of 2 MiB and more); zeroed like cudaMemset would. */
	size_t n = (nbytes + 63) / 64 * 64;
	void *p = apf_alloc_big(n ? n : 64);
	if (!p) {
		*out = NULL;
		return apf_error(APF_ENOMEM, "cpu backend",
				 "out of memory allocating %zu bytes", nbytes);
	}
	memset(p, 0, n ? n : 64);
	*out = p;
	return 0;
}

static void cpu_free(apf_backend *be, void *p)
{
	(void)be;
	free(p);
}

static void cpu_memcpy(apf_backend *be, void *dst, const void *src, size_t n)
{
	(void)be;
	if (n && dst != src)
		memmove(dst, src, n);
}

/* A layer could not get its scratch memory: it computes nothing, and the
 * next sync reports it. */
static void cpu_fail(apf_backend *be, const char *layer)
{
	struct pool *p = be->impl;
	if (!p->err) {
		p->err = APF_ENOMEM;
		p->err_layer = layer;
	}
}

static int cpu_sync(apf_backend *be)
{
	struct pool *p = be->impl;
	if (!p->err)
		return 0;
	int rc = apf_error(p->err, "cpu backend",
			   "%s: out of memory for its scratch", p->err_layer);
	p->err = 0;
	return rc;
}

/* ---- GEMM ----------------------------------------------------------------- */

/* Below this many multiply-adds a GEMM runs on the caller's thread alone:
 * the pool's two hand-offs would cost more than they save. */
#define GEMM_PAR_MIN ((size_t)1 << 18)
/* Below this many, also when a worker is asleep: waking it (tens of
 * microseconds on a VM, and the caller then sleeps and is woken in turn
 * when its own share is done first) costs more than computing its share.
 * The GEMM then runs on the caller while the workers are nudged awake for
 * the next region. A GEMM's bits do not depend on its threads (gemm.h),
 * so the choice, made on a racy hint, changes only the time. */
#define GEMM_WAKE_MIN ((size_t)1 << 22)

static int gemm_isa(const apf_backend *be)
{
	const struct pool *p = be->impl;
	return p->isa;
}

static struct apf_gemm_buf *gemm_bufs(apf_backend *be)
{
	struct pool *p = be->impl;
	return p->gemm_buf;
}

struct gemm_job {
	struct apf_gemm *g;
	struct pool *pool;
};

/* Every share is packed before any is computed: one region, a barrier
 * between the two halves. */
static void gemm_task(void *v, int t, int nt)
{
	struct gemm_job *j = v;
	apf_gemm_pack(j->g, t, nt);
	pool_barrier(j->pool);
	apf_gemm_compute(j->g, t, nt);
}

/* Whether a GEMM, or two at once, of macs multiply-adds in all runs on the
 * pool's threads. A GEMM's bits do not depend on its threads (gemm.h), so
 * the answer changes only the time. */
static int gemm_parallel(apf_backend *be, size_t macs)
{
	struct pool *p = be->impl;
	int par = nthreads(be) > 1 && macs >= GEMM_PAR_MIN;
	if (par && macs < GEMM_WAKE_MIN &&
	    atomic_load_explicit(&p->sleeping, memory_order_relaxed)) {
		pool_nudge(p);
		par = 0;
	}
	return par;
}

static size_t gemm_macs(const struct apf_gemm *g)
{
	return (size_t)g->M * (size_t)g->N * (size_t)g->K;
}

/* One GEMM, prepared in the caller's packing room, on every thread or on
 * the caller's alone. */
static void gemm_run(apf_backend *be, struct apf_gemm *g)
{
	if (g->M == 0 || g->N == 0)
		return;
	size_t macs = gemm_macs(g);
	if (apf_gemm_prepare(g, &gemm_bufs(be)[0])) {
		cpu_fail(be, "gemm");
		return;
	}
	if (gemm_parallel(be, macs)) {
		struct gemm_job j = {g, be->impl};
		parallel(be, gemm_task, &j);
	} else {
		apf_gemm_pack(g, 0, 1);
		apf_gemm_compute(g, 0, 1);
	}
	apf_gemm_release(g);
}

struct gemm_pair_job {
	struct apf_gemm *g[2];
	struct pool *pool;
};

/* Threads [0, nt/2) run the first GEMM's shares, [nt/2, nt) the second's.
 * Where each half is one thread, that thread packs and computes its GEMM
 * alone and no barrier is needed; else every thread passes the one
 * barrier between packing and computing. */
static void gemm_pair_task(void *v, int t, int nt)
{
	struct gemm_pair_job *j = v;
	int h = nt / 2, second = t >= h;
	struct apf_gemm *g = j->g[second];
	int gt = second ? t - h : t, gn = second ? nt - h : h;
	apf_gemm_pack(g, gt, gn);
	if (nt > 2)
		pool_barrier(j->pool);
	apf_gemm_compute(g, gt, gn);
}

/* Two GEMMs of equal work, neither reading what the other writes (a
 * linear layer's input and weight gradients): on an even number of
 * threads, each on its own half of them in one region, so neither's
 * operands, packed panels and output are handed from one core to another
 * (on a VM that hand-off runs at a few GB/s: a DLRM step's linear layers
 * paid more for it than for their multiply-adds); otherwise one after the
 * other on every thread. Either way every bit is gemm.h's. */
static void gemm_pair(apf_backend *be, struct apf_gemm *a, struct apf_gemm *b)
{
	size_t macs = gemm_macs(a) + gemm_macs(b);
	if (nthreads(be) % 2 || a->M == 0 || a->N == 0 || b->M == 0 ||
	    b->N == 0 || !gemm_parallel(be, macs)) {
		gemm_run(be, a);
		gemm_run(be, b);
		return;
	}
	struct apf_gemm_buf *bufs = gemm_bufs(be);
	/* each GEMM its own packing room: the caller's and that of the
	 * second half's first thread (no region runs beside this one) */
	if (apf_gemm_prepare(a, &bufs[0]) ||
	    apf_gemm_prepare(b, &bufs[nthreads(be) / 2])) {
		apf_gemm_release(a);
		apf_gemm_release(b);
		cpu_fail(be, "gemm");
		return;
	}
	struct gemm_pair_job j = {{a, b}, be->impl};
	parallel(be, gemm_pair_task, &j);
	apf_gemm_release(a);
	apf_gemm_release(b);
}

/* cpu_gemm with crow and asum (gemm.h): beta's term from that one row,
 * not C; op(A)'s row sums (op(A) = A^T) in asum. */
static void cpu_gemm_x(apf_backend *be, int trans_a, int trans_b, int M,
		       int N, int K, float alpha, const float *A, int lda,
		       const float *B, int ldb, float beta, const float *crow,
		       float *C, int ldc, float *asum)
{
	struct apf_gemm g = {.isa = gemm_isa(be), .trans_a = trans_a,
			     .trans_b = trans_b, .M = M, .N = N, .K = K,
			     .alpha = alpha, .A = A, .lda = lda, .B = B,
			     .ldb = ldb, .beta = beta, .C = C, .ldc = ldc,
			     .crow = crow, .asum = asum};
	gemm_run(be, &g);
}

static void cpu_gemm(apf_backend *be, int trans_a, int trans_b, int M, int N,
		     int K, float alpha, const float *A, int lda,
		     const float *B, int ldb, float beta, float *C, int ldc)
{
	cpu_gemm_x(be, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
		   NULL, C, ldc, NULL);
}

/* A layer's input and weight gradients from dout (R,N): dinp (R,C) =
 * dout weight (N,C), added to dinp where accum (none where dinp is NULL),
 * and dweight (N,C) = dout^T inp (R,C), with dout's column sums in dsum
 * where it is not NULL (gemm.h's asum). Their work is the same, R N C
 * multiply-adds each. */
static void grad_gemms(apf_backend *be, float *dinp, float *dweight,
		       float *dsum, const float *dout, const float *inp,
		       const float *weight, int R, int C, int N, int accum)
{
	struct apf_gemm gw = {.isa = gemm_isa(be), .trans_a = 1, .M = N,
			      .N = C, .K = R, .alpha = 1.0f, .A = dout,
			      .lda = N, .B = inp, .ldb = C, .C = dweight,
			      .ldc = C, .asum = dsum};
	if (!dinp) {
		gemm_run(be, &gw);
		return;
	}
	struct apf_gemm gi = {.isa = gemm_isa(be), .M = R, .N = C, .K = N,
			      .alpha = 1.0f, .A = dout, .lda = N,
			      .B = weight, .ldb = C,
			      .beta = accum ? 1.0f : 0.0f, .C = dinp, .ldc = C};
	/* Side by side only where the rows are no more than the wider of
	 * the other two sizes: the weight gradient's GEMM packs dout^T and
	 * inp (R (N + C) floats), the input gradient's only weight (N C),
	 * so with many rows (a Transformer's tokens, a U-Net's pixels) its
	 * half ran long: there the pair cost the Transformer's step 4% and
	 * the U-Net's 3% against one GEMM after the other */
	if (R <= (N > C ? N : C)) {
		gemm_pair(be, &gi, &gw);
	} else {
		gemm_run(be, &gi);
		gemm_run(be, &gw);
	}
}

struct colsum_arg {
	float *dbias;
	const float *dout;
	size_t R;
	int OC;
};

/* Thread t's columns (whole cache lines of them), every row in order. */
HOT static void colsum_task(void *v, int t, int nt)
{
	struct colsum_arg *a = v;
	size_t o0, o1;
	split((size_t)a->OC, t, nt, 16, &o0, &o1);
	float *d = a->dbias;
	memset(d + o0, 0, (o1 - o0) * sizeof *d);
	for (size_t r = 0; r < a->R; r++) {
		const float *row = a->dout + r * (size_t)a->OC;
		for (size_t o = o0; o < o1; o++)
			d[o] += row[o];
	}
}

/* dbias (OC) = column sums of dout (R,OC), rows in order; the threads
 * share the columns, never the rows, so every sum is the one-thread one. */
static void column_sums(apf_backend *be, float *dbias, const float *dout,
			size_t R, int OC)
{
	struct colsum_arg a = {dbias, dout, R, OC};
	if (R * (size_t)OC < PAR_MIN || OC < 32 || nthreads(be) == 1)
		colsum_task(&a, 0, 1);
	else
		parallel(be, colsum_task, &a);
}

/* ---- linear --------------------------------------------------------------- */

// out is (B,OC), inp is (B,C), weight is (OC,C), bias is (OC)
static void linear_forward(apf_backend *be, float *out, const float *inp,
			   const float *weight, const float *bias, int B, int C,
			   int OC)
{
	/* out = acc + bias: the bits of out filled with the bias and then
	 * beta 1, without that pass over out */
	cpu_gemm_x(be, 0, 1, B, OC, C, 1.0f, inp, C, weight, C,
		   bias ? 1.0f : 0.0f, bias, out, OC, NULL);
}

// dout is (B,OC); dinp (B,C), dweight (OC,C), dbias (OC)
static void linear_backward(apf_backend *be, float *dinp, float *dweight,
			    float *dbias, const float *dout, const float *inp,
			    const float *weight, int B, int C, int OC,
			    int accum)
{
	/* dbias: dout's column sums, taken while the weight gradient's GEMM
	 * packs dout^T (the bits of column_sums: each column's rows in
	 * order from 0), so dout is read once for both */
	grad_gemms(be, dinp, dweight, dbias, dout, inp, weight, B, C, OC,
		   accum);
	if (dbias && C == 0) /* no GEMM ran */
		column_sums(be, dbias, dout, (size_t)B, OC);
}

/* ---- conv2d (NHWC, im2col + GEMM) ----------------------------------------- */

static int conv_out(int n, int K, int S, int P)
{
	return (n + 2 * P - K) / S + 1;
}

/* Images per im2col chunk. */
static int conv_chunk(int B, int OH, int OW, int C, int K)
{
	size_t per = (size_t)OH * OW * K * K * C;
	size_t cb = CONV_CHUNK_FLOATS / (per ? per : 1);
	if (cb < 1)
		cb = 1;
	return cb > (size_t)B ? B : (int)cb;
}

/* A 1x1, stride 1, unpadded convolution is a GEMM on the input itself. */
static int conv_is_pointwise(int K, int S, int P)
{
	return K == 1 && S == 1 && P == 0;
}

// col is (nb*OH*OW, K*K*C) from inp (nb,H,W,C)
HOT static void im2col(float *col, const float *inp, int nb, int H, int W, int C,
		   int K, int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	for (int b = 0; b < nb; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					int row_ok = ih >= 0 && ih < H;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						/* A plain loop, not memcpy: C is
						 * often 1 to 64 floats. */
						if (row_ok && iw >= 0 && iw < W) {
							const float *x = inp + (((size_t)b * H + ih) * W + iw) * C;
							for (int c = 0; c < C; c++)
								col[c] = x[c];
						} else {
							for (int c = 0; c < C; c++)
								col[c] = 0.0f;
						}
						col += C;
					}
				}
			}
}

// dinp (nb,H,W,C) += scatter of dcol (nb*OH*OW, K*K*C); dinp zeroed by caller
HOT static void col2im(float *dinp, const float *dcol, int nb, int H, int W, int C,
		   int K, int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	for (int b = 0; b < nb; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++)
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					int row_ok = ih >= 0 && ih < H;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						if (row_ok && iw >= 0 && iw < W) {
							float *d = dinp + (((size_t)b * H + ih) * W + iw) * C;
							for (int c = 0; c < C; c++)
								d[c] += dcol[c];
						}
						dcol += C;
					}
				}
}

/* Images per chunk: fits CONV_CHUNK_FLOATS, and leaves every thread at
 * least one chunk when the batch allows. */
static int conv_chunk_for(const apf_backend *be, int B, int OH, int OW, int C,
			  int K)
{
	int cb = conv_chunk(B, OH, OW, C, K);
	int nt = nthreads(be);
	int even = (B + nt - 1) / nt;
	return cb < even ? cb : even;
}

/* Floats of one thread's column buffer: the input's columns, and for a
 * stride-1 backward also the output gradient's (see conv_bwd_task). */
static size_t conv_col_floats(int cb, int H, int W, int C, int OC, int K,
			      int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	size_t fwd = (size_t)cb * OH * OW * K * K * C;
	size_t bwd = S == 1 ? (size_t)cb * H * W * K * K * OC : 0;
	return fwd > bwd ? fwd : bwd;
}

static size_t conv2d_work(apf_backend *be, int B, int H, int W, int C, int OC,
			  int K, int S, int P)
{
	if (conv_is_pointwise(K, S, P))
		return 0;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int cb = conv_chunk_for(be, B, OH, OW, C, K);
	size_t nt = (size_t)nthreads(be);
	/* a column buffer per thread, a weight-gradient partial for each
	 * thread but the first, and the flipped weights */
	size_t plain = nt * conv_col_floats(cb, H, W, C, OC, K, S, P) +
		       (nt - 1) * (size_t)OC * K * K * C +
		       (size_t)OC * K * K * C;
	if (!use_fast(be))
		return plain;
	size_t fast = apf_cpu_conv_fast_work(B, H, W, C, OC, K, S, P,
					     (int)nt);
	return fast > plain ? fast : plain;
}

struct conv_arg {
	float *out, *dinp, *dweight, *work;
	const float *inp, *weight, *bias, *dout;
	int B, H, W, C, OC, K, S, P, OH, OW, cb, nchunks, accum;
	size_t col_floats;   /* per thread */
	float *wflip;        /* (C,K,K,OC): weights flipped, for stride 1 */
	int isa;             /* the GEMM's path */
	struct apf_gemm_buf *bufs; /* per thread, the pool's */
	int had_chunk[MAX_THREADS];
	int failed[MAX_THREADS]; /* a GEMM of this thread's had no memory */
};

/* Thread t's GEMM inside a convolution's region, on t alone; a failure is
 * kept for conv_failed, outside the region. */
static void conv_gemm(struct conv_arg *a, int t, int trans_a, int trans_b,
		      int M, int N, int K, const float *A, int lda,
		      const float *B, int ldb, float beta, float *C, int ldc)
{
	if (apf_gemm(&a->bufs[t], a->isa, trans_a, trans_b, M, N, K, 1.0f, A,
		     lda, B, ldb, beta, C, ldc))
		a->failed[t] = 1;
}

static void conv_failed(apf_backend *be, const struct conv_arg *a)
{
	for (int t = 0; t < nthreads(be); t++)
		if (a->failed[t]) {
			cpu_fail(be, "conv2d");
			return;
		}
}

static void conv_fwd_task(void *v, int t, int nt)
{
	struct conv_arg *a = v;
	int KKC = a->K * a->K * a->C;
	size_t in_img = (size_t)a->H * a->W * a->C;
	size_t rows_img = (size_t)a->OH * a->OW;
	float *col = a->work + (size_t)t * a->col_floats;
	for (int ch = t; ch < a->nchunks; ch += nt) {
		int b0 = ch * a->cb;
		int nb = a->B - b0 < a->cb ? a->B - b0 : a->cb;
		int rows = (int)(nb * rows_img);
		im2col(col, a->inp + b0 * in_img, nb, a->H, a->W, a->C, a->K,
		       a->S, a->P);
		float *o = a->out + b0 * rows_img * a->OC;
		float beta = 0.0f;
		if (a->bias) {
			for (int r = 0; r < rows; r++)
				memcpy(o + (size_t)r * a->OC, a->bias,
				       (size_t)a->OC * sizeof *o);
			beta = 1.0f;
		}
		conv_gemm(a, t, 0, 1, rows, a->OC, KKC, col, KKC, a->weight,
			  KKC, beta, o, a->OC);
	}
}

static void conv_bwd_task(void *v, int t, int nt)
{
	struct conv_arg *a = v;
	int KKC = a->K * a->K * a->C;
	size_t in_img = (size_t)a->H * a->W * a->C;
	size_t rows_img = (size_t)a->OH * a->OW;
	float *col = a->work + (size_t)t * a->col_floats;
	float *dw = t == 0 ? a->dweight
			   : a->work + (size_t)nt * a->col_floats +
				     (size_t)(t - 1) * a->OC * KKC;
	a->had_chunk[t] = 0;
	for (int ch = t; ch < a->nchunks; ch += nt) {
		int b0 = ch * a->cb;
		int nb = a->B - b0 < a->cb ? a->B - b0 : a->cb;
		int rows = (int)(nb * rows_img);
		const float *d = a->dout + b0 * rows_img * a->OC;
		im2col(col, a->inp + b0 * in_img, nb, a->H, a->W, a->C, a->K,
		       a->S, a->P);
		/* this thread's dweight (OC,KKC) += d^T col, chunks in order */
		conv_gemm(a, t, 1, 0, a->OC, KKC, rows, d, a->OC, col, KKC,
			  a->had_chunk[t] ? 1.0f : 0.0f, dw, KKC);
		a->had_chunk[t] = 1;
		if (!a->dinp)
			continue;
		float *di = a->dinp + b0 * in_img;
		if (a->wflip) {
			/* stride 1: dinp is the correlation of dout, padded by
			 * K-1-P, with the flipped weights: one im2col and one
			 * GEMM straight into dinp, no scatter */
			int KKO = a->K * a->K * a->OC;
			im2col(col, d, nb, a->OH, a->OW, a->OC, a->K, 1,
			       a->K - 1 - a->P);
			conv_gemm(a, t, 0, 1, (int)(nb * (size_t)a->H * a->W),
				  a->C, KKO, col, KKO, a->wflip, KKO,
				  a->accum ? 1.0f : 0.0f, di, a->C);
			continue;
		}
		/* dcol (rows,KKC) = d weight, reusing the column buffer, then
		 * scattered onto this chunk's own images */
		conv_gemm(a, t, 0, 0, rows, KKC, a->OC, d, a->OC, a->weight,
			  KKC, 0.0f, col, KKC);
		if (!a->accum)
			memset(di, 0, nb * in_img * sizeof *di);
		col2im(di, col, nb, a->H, a->W, a->C, a->K, a->S, a->P);
	}
}

/* A fast convolution's region: every thread transforms its share of the
 * weights, and after a barrier (every share written) runs its images. The
 * transform ran on the caller alone while the other threads waited: a
 * U-Net step's 2% of samples, as much again of idle polling. */
struct fast_conv {
	struct apf_conv_job *j;
	struct pool *pool;
};

static void fast_fwd_task(void *v, int t, int nt)
{
	struct fast_conv *f = v;
	apf_cpu_conv_fast_prepare(f->j, t, nt);
	pool_barrier(f->pool);
	apf_cpu_conv_fast_forward(f->j, t, nt);
}

/* The fast backward: each thread its weight-gradient partial, then its
 * images' input gradient (job->dinp NULL: none). Where that gradient reads
 * weights the threads transform first (Winograd's), a barrier comes after
 * the weight gradient (which does not read them); the direct one reads
 * the weights themselves, and a thread goes on at once. */
static void fast_bwd_task(void *v, int t, int nt)
{
	struct fast_conv *f = v;
	struct apf_conv_job *j = f->j;
	int transformed = apf_cpu_conv_fast_prepare_backward(j, t, nt);
	apf_cpu_conv_fast_dweight(j, t, nt);
	if (transformed)
		pool_barrier(f->pool);
	if (j->dinp)
		apf_cpu_conv_fast_dinp(j, t, nt);
}

static void fast_dinp_task(void *v, int t, int nt)
{
	struct fast_conv *f = v;
	if (apf_cpu_conv_fast_prepare_backward(f->j, t, nt))
		pool_barrier(f->pool);
	apf_cpu_conv_fast_dinp(f->j, t, nt);
}

// out (B,OH,OW,OC) = conv(inp (B,H,W,C), weight (OC,K,K,C)) + bias (OC)
static void conv2d_forward(apf_backend *be, float *out, const float *inp,
			   const float *weight, const float *bias, int B, int H,
			   int W, int C, int OC, int K, int S, int P,
			   float *work)
{
	if (conv_is_pointwise(K, S, P)) {
		/* a 1x1 stride-1 conv is one GEMM on the input itself */
		linear_forward(be, out, inp, weight, bias, B * H * W, C, OC);
		return;
	}
	if (use_fast(be) && apf_cpu_conv_fast_forward_ok(C, OC, K)) {
		struct apf_conv_job j = {
			.isa = gemm_isa(be),
			.B = B, .H = H, .W = W, .C = C, .OC = OC, .K = K,
			.S = S, .P = P, .OH = conv_out(H, K, S, P),
			.OW = conv_out(W, K, S, P), .inp = inp,
			.weight = weight, .bias = bias, .out = out,
			.work = work, .wt = work};
		struct fast_conv f = {&j, be->impl};
		parallel(be, fast_fwd_task, &f);
		return;
	}
	struct conv_arg a = {.out = out, .inp = inp, .weight = weight,
			     .bias = bias, .work = work, .B = B, .H = H, .W = W,
			     .C = C, .OC = OC, .K = K, .S = S, .P = P,
			     .isa = gemm_isa(be), .bufs = gemm_bufs(be)};
	a.OH = conv_out(H, K, S, P), a.OW = conv_out(W, K, S, P);
	a.cb = conv_chunk_for(be, B, a.OH, a.OW, C, K);
	a.nchunks = (B + a.cb - 1) / a.cb;
	a.col_floats = conv_col_floats(a.cb, H, W, C, OC, K, S, P);
	parallel(be, conv_fwd_task, &a);
	conv_failed(be, &a);
}

static void conv2d_backward(apf_backend *be, float *dinp, float *dweight,
			    float *dbias, const float *dout, const float *inp,
			    const float *weight, int B, int H, int W, int C,
			    int OC, int K, int S, int P, float *work, int accum)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	if (conv_is_pointwise(K, S, P)) {
		linear_backward(be, dinp, dweight, dbias, dout, inp, weight,
				B * H * W, C, OC, accum);
		return;
	}
	if (use_fast(be)) {
		struct apf_conv_job j = {
			.isa = gemm_isa(be),
			.B = B, .H = H, .W = W, .C = C, .OC = OC, .K = K,
			.S = S, .P = P, .OH = OH, .OW = OW, .inp = inp,
			.weight = weight, .dout = dout, .dinp = dinp,
			.accum = accum, .work = work, .wt = work};
		struct fast_conv f = {&j, be->impl};
		int fast_dinp = dinp && apf_cpu_conv_fast_dinp_ok(C, OC, K);
		if (apf_cpu_conv_fast_dweight_ok(C, OC, K) &&
		    (!dinp || fast_dinp)) {
			int nt = nthreads(be), parts = nt;
			if (C % 8) {
				/* the GEMM route's chunks (below), and only the
				 * threads that had one add their partial */
				j.gemm_chunk = conv_chunk_for(be, B, OH, OW, C, K);
				int nchunks = (B + j.gemm_chunk - 1) / j.gemm_chunk;
				parts = nchunks < nt ? nchunks : nt;
			}
			parallel(be, fast_bwd_task, &f);
			size_t nw = (size_t)OC * K * K * C;
			memcpy(dweight, apf_cpu_conv_fast_dweight_part(&j, 0, nt),
			       nw * sizeof *dweight);
			/* partials added in thread order */
			for (int t = 1; t < parts; t++) {
				const float *part =
					apf_cpu_conv_fast_dweight_part(&j, t, nt);
				for (size_t i = 0; i < nw; i++)
					dweight[i] += part[i];
			}
			if (dbias)
				column_sums(be, dbias, dout, (size_t)B * OH * OW,
					    OC);
			return;
		}
		if (fast_dinp) {
			/* the input gradient here, the rest plainly below */
			parallel(be, fast_dinp_task, &f);
			dinp = NULL;
		}
	}
	struct conv_arg a = {.dinp = dinp, .dweight = dweight, .dout = dout,
			     .inp = inp, .weight = weight, .work = work, .B = B,
			     .H = H, .W = W, .C = C, .OC = OC, .K = K, .S = S,
			     .P = P, .OH = OH, .OW = OW, .accum = accum,
			     .isa = gemm_isa(be), .bufs = gemm_bufs(be)};
	a.cb = conv_chunk_for(be, B, OH, OW, C, K);
	a.nchunks = (B + a.cb - 1) / a.cb;
	a.col_floats = conv_col_floats(a.cb, H, W, C, OC, K, S, P);
	size_t nw = (size_t)OC * K * K * C;
	int nt = nthreads(be);
	if (S == 1 && dinp) {
		/* wflip[c][kh][kw][o] = weight[o][K-1-kh][K-1-kw][c] */
		a.wflip = work + (size_t)nt * a.col_floats + (size_t)(nt - 1) * nw;
		for (int c = 0; c < C; c++)
			for (int kh = 0; kh < K; kh++)
				for (int kw = 0; kw < K; kw++)
					for (int o = 0; o < OC; o++)
						a.wflip[((size_t)(c * K + kh) * K + kw) * OC + o] =
							weight[((size_t)(o * K + K - 1 - kh) * K + K - 1 - kw) * C + c];
	}
	parallel(be, conv_bwd_task, &a);
	conv_failed(be, &a);
	/* partials added in thread order: fixed for a fixed thread count */
	for (int t = 1; t < nt; t++) {
		if (!a.had_chunk[t])
			continue;
		const float *part = work + (size_t)nt * a.col_floats +
				    (size_t)(t - 1) * nw;
		for (size_t i = 0; i < nw; i++)
			dweight[i] += part[i];
	}
	if (dbias)
		column_sums(be, dbias, dout, (size_t)B * OH * OW, OC);
}

/* ---- batch norm (N rows of C channels) ----------------------------------- */

/* Per-channel sums run over blocks of channels with double accumulators on
 * the stack: rows are read in order (cache-friendly for NHWC) and nothing is
 * allocated. */
#define BN_BLOCK 256

static void batchnorm_forward_s(apf_backend *be, float *out, float *save_mean,
			      float *save_rstd, const float *inp,
			      const float *scale, const float *bias,
			      float *run_mean, float *run_var, int N, int C,
			      float momentum, float eps, int train)
{
	(void)be;
	if (!train) {
		for (int n = 0; n < N; n++) {
			const float *x = inp + (size_t)n * C;
			float *y = out + (size_t)n * C;
			for (int c = 0; c < C; c++)
				y[c] = (x[c] - run_mean[c]) /
					       sqrtf(run_var[c] + eps) * scale[c] +
				       bias[c];
		}
		return;
	}
	float *mean = save_mean, *rstd = save_rstd;
	for (int c0 = 0; c0 < C; c0 += BN_BLOCK) {
		int nc = C - c0 < BN_BLOCK ? C - c0 : BN_BLOCK;
		double acc[BN_BLOCK];
		memset(acc, 0, sizeof acc);
		for (int n = 0; n < N; n++) {
			const float *x = inp + (size_t)n * C + c0;
			for (int c = 0; c < nc; c++)
				acc[c] += x[c];
		}
		for (int c = 0; c < nc; c++) {
			mean[c0 + c] = (float)(acc[c] / N);
			acc[c] = 0.0;
		}
		for (int n = 0; n < N; n++) {
			const float *x = inp + (size_t)n * C + c0;
			for (int c = 0; c < nc; c++) {
				double d = (double)x[c] - mean[c0 + c];
				acc[c] += d * d;
			}
		}
		for (int c = 0; c < nc; c++) {
			int k = c0 + c;
			double var = acc[c] / N;
			rstd[k] = (float)(1.0 / sqrt(var + eps));
			double unbiased = N > 1 ? acc[c] / (N - 1) : var;
			run_mean[k] = (1.0f - momentum) * run_mean[k] +
				      momentum * mean[k];
			run_var[k] = (1.0f - momentum) * run_var[k] +
				     momentum * (float)unbiased;
		}
	}
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *y = out + (size_t)n * C;
		for (int c = 0; c < C; c++)
			y[c] = (x[c] - mean[c]) * rstd[c] * scale[c] + bias[c];
	}
}

static void batchnorm_backward_s(apf_backend *be, float *dinp, float *dscale,
			       float *dbias, const float *dout,
			       const float *inp, const float *scale,
			       const float *mean, const float *rstd, int N,
			       int C, int accum)
{
	(void)be;
	for (int c0 = 0; c0 < C; c0 += BN_BLOCK) {
		int nc = C - c0 < BN_BLOCK ? C - c0 : BN_BLOCK;
		double sd[BN_BLOCK], sdx[BN_BLOCK];
		memset(sd, 0, sizeof sd);
		memset(sdx, 0, sizeof sdx);
		for (int n = 0; n < N; n++) {
			size_t o = (size_t)n * C + c0;
			const float *x = inp + o, *d = dout + o;
			for (int c = 0; c < nc; c++) {
				sd[c] += d[c];
				sdx[c] += (double)d[c] * (x[c] - mean[c0 + c]) *
					  rstd[c0 + c];
			}
		}
		for (int c = 0; c < nc; c++) {
			dbias[c0 + c] = (float)sd[c];
			dscale[c0 + c] = (float)sdx[c];
		}
	}
	if (!dinp)
		return;
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		const float *d = dout + (size_t)n * C;
		float *di = dinp + (size_t)n * C;
		for (int c = 0; c < C; c++) {
			float xhat = (x[c] - mean[c]) * rstd[c];
			float g = scale[c] * rstd[c] *
				  (d[c] - dbias[c] / N - xhat * dscale[c] / N);
			di[c] = accum ? di[c] + g : g;
		}
	}
}

/* The parallel batch norm: rows split across threads, per-thread partial
 * sums per channel added in thread order. Channels beyond one block fall
 * back to the serial version above. */
enum { BN_SUM = 1, BN_VAR, BN_NORM, BN_DSUMS, BN_DX };

struct bn_arg {
	int phase, N, C, accum;
	const float *inp, *dout, *scale, *bias;
	const float *mean, *rstd; /* per channel, for the phases after SUM */
	float *out, *dinp;
	float dmean[BN_BLOCK], dxhat[BN_BLOCK]; /* sums / N for BN_DX */
	double part[MAX_THREADS][2][BN_BLOCK];
};

HOT static void bn_task(void *v, int t, int nt)
{
	struct bn_arg *a = v;
	size_t b, e;
	split((size_t)a->N, t, nt, 1, &b, &e);
	int C = a->C;
	double *p0 = a->part[t][0], *p1 = a->part[t][1];
	switch (a->phase) {
	case BN_SUM:
		memset(p0, 0, (size_t)C * sizeof *p0);
		for (size_t n = b; n < e; n++) {
			const float *x = a->inp + n * C;
			for (int c = 0; c < C; c++)
				p0[c] += x[c];
		}
		break;
	case BN_VAR:
		memset(p1, 0, (size_t)C * sizeof *p1);
		for (size_t n = b; n < e; n++) {
			const float *x = a->inp + n * C;
			for (int c = 0; c < C; c++) {
				double d = (double)x[c] - a->mean[c];
				p1[c] += d * d;
			}
		}
		break;
	case BN_NORM:
		for (size_t n = b; n < e; n++) {
			const float *x = a->inp + n * C;
			float *y = a->out + n * C;
			for (int c = 0; c < C; c++)
				y[c] = (x[c] - a->mean[c]) * a->rstd[c] *
					       a->scale[c] +
				       a->bias[c];
		}
		break;
	case BN_DSUMS:
		memset(p0, 0, (size_t)C * sizeof *p0);
		memset(p1, 0, (size_t)C * sizeof *p1);
		for (size_t n = b; n < e; n++) {
			const float *x = a->inp + n * C, *d = a->dout + n * C;
			for (int c = 0; c < C; c++) {
				p0[c] += d[c];
				p1[c] += (double)d[c] * (x[c] - a->mean[c]) *
					 a->rstd[c];
			}
		}
		break;
	case BN_DX:
		for (size_t n = b; n < e; n++) {
			const float *x = a->inp + n * C, *d = a->dout + n * C;
			float *di = a->dinp + n * C;
			for (int c = 0; c < C; c++) {
				float xhat = (x[c] - a->mean[c]) * a->rstd[c];
				float g = a->scale[c] * a->rstd[c] *
					  (d[c] - a->dmean[c] - xhat * a->dxhat[c]);
				di[c] = a->accum ? di[c] + g : g;
			}
		}
		break;
	}
}

static void bn_run(apf_backend *be, struct bn_arg *a)
{
	if ((size_t)a->N * a->C < PAR_MIN || nthreads(be) == 1)
		bn_task(a, 0, 1);
	else
		parallel(be, bn_task, a);
}

/* Sum of the threads' partials for channel c, in thread order. */
static double bn_total(const apf_backend *be, const struct bn_arg *a, int k,
		       int c)
{
	int nt = (size_t)a->N * a->C < PAR_MIN ? 1 : nthreads(be);
	double s = 0.0;
	for (int t = 0; t < nt; t++)
		s += a->part[t][k][c];
	return s;
}

static void bn_fast_forward(apf_backend *be, float *out, float *save_mean,
			    float *save_rstd, const float *inp,
			    const float *res, const float *scale,
			    const float *bias, float *run_mean, float *run_var,
			    int N, int C, float momentum, float eps, int train,
			    int relu);
static void bn_fast_backward(apf_backend *be, float *dinp, float *dres,
			     float *dscale, float *dbias, const float *dout,
			     const float *out, const float *inp,
			     const float *scale, const float *mean,
			     const float *rstd, int N, int C, int accum,
			     int accum_res, int relu);

static void batchnorm_forward(apf_backend *be, float *out, float *save_mean,
			      float *save_rstd, const float *inp,
			      const float *scale, const float *bias,
			      float *run_mean, float *run_var, int N, int C,
			      float momentum, float eps, int train)
{
	if (C > BN_BLOCK) {
		batchnorm_forward_s(be, out, save_mean, save_rstd, inp, scale,
				    bias, run_mean, run_var, N, C, momentum,
				    eps, train);
		return;
	}
	if (use_fast(be)) {
		bn_fast_forward(be, out, save_mean, save_rstd, inp, NULL, scale,
				bias, run_mean, run_var, N, C, momentum, eps,
				train, 0);
		return;
	}
	struct bn_arg *a = malloc(sizeof *a);
	if (!a) {
		cpu_fail(be, "batch norm forward");
		return;
	}
	*a = (struct bn_arg){.N = N, .C = C, .inp = inp, .scale = scale,
			     .bias = bias, .out = out};
	float eval_rstd[BN_BLOCK];
	if (!train) {
		for (int c = 0; c < C; c++)
			eval_rstd[c] = 1.0f / sqrtf(run_var[c] + eps);
		a->mean = run_mean;
		a->rstd = eval_rstd;
	} else {
		a->phase = BN_SUM;
		bn_run(be, a);
		for (int c = 0; c < C; c++)
			save_mean[c] = (float)(bn_total(be, a, 0, c) / N);
		a->mean = save_mean;
		a->phase = BN_VAR;
		bn_run(be, a);
		for (int c = 0; c < C; c++) {
			double sq = bn_total(be, a, 1, c), var = sq / N;
			save_rstd[c] = (float)(1.0 / sqrt(var + eps));
			double unbiased = N > 1 ? sq / (N - 1) : var;
			run_mean[c] = (1.0f - momentum) * run_mean[c] +
				      momentum * save_mean[c];
			run_var[c] = (1.0f - momentum) * run_var[c] +
				     momentum * (float)unbiased;
		}
		a->rstd = save_rstd;
	}
	a->phase = BN_NORM;
	bn_run(be, a);
	free(a);
}

static void batchnorm_backward(apf_backend *be, float *dinp, float *dscale,
			       float *dbias, const float *dout,
			       const float *inp, const float *scale,
			       const float *mean, const float *rstd, int N,
			       int C, int accum)
{
	if (C > BN_BLOCK) {
		batchnorm_backward_s(be, dinp, dscale, dbias, dout, inp, scale,
				     mean, rstd, N, C, accum);
		return;
	}
	if (use_fast(be)) {
		bn_fast_backward(be, dinp, NULL, dscale, dbias, dout, NULL, inp,
				 scale, mean, rstd, N, C, accum, 0, 0);
		return;
	}
	struct bn_arg *a = malloc(sizeof *a);
	if (!a) {
		cpu_fail(be, "batch norm backward");
		return;
	}
	*a = (struct bn_arg){.phase = BN_DSUMS, .N = N, .C = C,
			     .accum = accum, .inp = inp, .dout = dout,
			     .scale = scale, .mean = mean, .rstd = rstd,
			     .dinp = dinp};
	bn_run(be, a);
	for (int c = 0; c < C; c++) {
		dbias[c] = (float)bn_total(be, a, 0, c);
		dscale[c] = (float)bn_total(be, a, 1, c);
		a->dmean[c] = dbias[c] / N;
		a->dxhat[c] = dscale[c] / N;
	}
	if (dinp) {
		a->phase = BN_DX;
		bn_run(be, a);
	}
	free(a);
}

/* ---- batch norm + ReLU, fused (fast.c) -------------------------------------- */

static void bnf_stats_task(void *v, int t, int nt)
{
	apf_cpu_bn_fast_stats(v, t, nt);
}

static void bnf_apply_task(void *v, int t, int nt)
{
	apf_cpu_bn_fast_apply(v, t, nt);
}

static void bnf_dsums_task(void *v, int t, int nt)
{
	apf_cpu_bn_fast_dsums(v, t, nt);
}

static void bnf_dx_task(void *v, int t, int nt)
{
	apf_cpu_bn_fast_dx(v, t, nt);
}

/* Runs a row-split task on the threads a layer of N x C deserves (batch
 * norm, layer norm, the softmax loss); returns how many took part (each
 * leaves one partial). */
static int run_rows(apf_backend *be, task_fn fn, void *arg, int N, int C)
{
	if ((size_t)N * C < PAR_MIN || nthreads(be) == 1) {
		fn(arg, 0, 1);
		return 1;
	}
	parallel(be, fn, arg);
	return nthreads(be);
}

/* Column c of the partials, added in thread order. */
static double bnf_total(const double *part, int nt, int C, int c)
{
	double s = 0.0;
	for (int t = 0; t < nt; t++)
		s += part[(size_t)t * 2 * C + c];
	return s;
}

/* out = bn(inp) [+ res], then ReLU when relu. */
static void bn_fast_forward(apf_backend *be, float *out, float *save_mean,
			    float *save_rstd, const float *inp,
			    const float *res, const float *scale,
			    const float *bias, float *run_mean, float *run_var,
			    int N, int C, float momentum, float eps, int train,
			    int relu)
{
	float *coef = malloc(2 * (size_t)C * sizeof *coef);
	double *part = malloc((size_t)nthreads(be) * 2 * C * sizeof *part);
	if (!coef || !part) {
		free(coef);
		free(part);
		cpu_fail(be, "batch norm forward");
		return;
	}
	float *a = coef, *shift = coef + C;
	struct apf_bn_job j = {.isa = gemm_isa(be), .N = N, .C = C,
			       .inp = inp, .res = res,
			       .shift = shift, .a = a, .b = bias, .y = out,
			       .relu = relu, .part = part};
	if (train) {
		memcpy(shift, inp, (size_t)C * sizeof *shift);
		int nt = run_rows(be, bnf_stats_task, &j, N, C);
		for (int c = 0; c < C; c++) {
			double m = bnf_total(part, nt, C, c) / N;
			double sq = bnf_total(part, nt, C, C + c) / N;
			double var = sq - m * m;
			var = var > 0.0 ? var : 0.0;
			double mean = shift[c] + m;
			save_mean[c] = (float)mean;
			save_rstd[c] = (float)(1.0 / sqrt(var + eps));
			double unbiased = N > 1 ? var * N / (N - 1) : var;
			run_mean[c] = (1.0f - momentum) * run_mean[c] +
				      momentum * save_mean[c];
			run_var[c] = (1.0f - momentum) * run_var[c] +
				     momentum * (float)unbiased;
			a[c] = scale[c] * save_rstd[c];
		}
		j.mean = save_mean;
	} else {
		for (int c = 0; c < C; c++)
			a[c] = scale[c] / sqrtf(run_var[c] + eps);
		j.mean = run_mean;
	}
	run_rows(be, bnf_apply_task, &j, N, C);
	free(coef);
	free(part);
}

/* The backward of bn_fast_forward; out is read only when relu. */
static void bn_fast_backward(apf_backend *be, float *dinp, float *dres,
			     float *dscale, float *dbias, const float *dout,
			     const float *out, const float *inp,
			     const float *scale, const float *mean,
			     const float *rstd, int N, int C, int accum,
			     int accum_res, int relu)
{
	float *coef = malloc(3 * (size_t)C * sizeof *coef);
	double *part = malloc((size_t)nthreads(be) * 2 * C * sizeof *part);
	if (!coef || !part) {
		free(coef);
		free(part);
		cpu_fail(be, "batch norm backward");
		return;
	}
	float *k0 = coef, *k1 = coef + C, *k2 = coef + 2 * C;
	struct apf_bn_job j = {.isa = gemm_isa(be), .N = N, .C = C,
			       .inp = inp, .dout = dout,
			       .out = out, .mean = mean, .k0 = k0, .k1 = k1,
			       .k2 = k2, .dinp = dinp, .dres = dres,
			       .relu = relu, .accum_inp = accum,
			       .accum_res = accum_res, .part = part};
	int nt = run_rows(be, bnf_dsums_task, &j, N, C);
	for (int c = 0; c < C; c++) {
		/* sum of g xhat = rstd * sum of g (x - mean) */
		dbias[c] = (float)bnf_total(part, nt, C, c);
		dscale[c] = (float)(bnf_total(part, nt, C, C + c) * rstd[c]);
		k0[c] = scale[c] * rstd[c];
		k1[c] = dbias[c] / N;
		k2[c] = rstd[c] * dscale[c] / N;
	}
	if (dinp || dres)
		run_rows(be, bnf_dx_task, &j, N, C);
	free(coef);
	free(part);
}

static void batchnorm_relu_forward(apf_backend *be, float *out,
				   float *save_mean, float *save_rstd,
				   const float *inp, const float *res,
				   const float *scale, const float *bias,
				   float *run_mean, float *run_var, int N, int C,
				   float momentum, float eps, int train)
{
	bn_fast_forward(be, out, save_mean, save_rstd, inp, res, scale, bias,
			run_mean, run_var, N, C, momentum, eps, train, 1);
}

static void batchnorm_relu_backward(apf_backend *be, float *dinp, float *dres,
				    float *dscale, float *dbias,
				    const float *dout, const float *out,
				    const float *inp, const float *scale,
				    const float *mean, const float *rstd, int N,
				    int C, int accum, int accum_res)
{
	bn_fast_backward(be, dinp, dres, dscale, dbias, dout, out, inp, scale,
			 mean, rstd, N, C, accum, accum_res, 1);
}

/* ---- layer norm ----------------------------------------------------------- */

/* Rows are independent: the forward and the input gradient split them
 * among the threads, each row computed as it always was (its sums in
 * double in column order). The scale and bias gradients sum over rows:
 * those split the columns instead and add the rows in order, in float.
 * Either way every bit is the one-thread loop's, at any thread count: a
 * run recorded before this re-evaluates and replays bit for bit. */
struct ln_arg {
	float *out, *mean, *rstd, *dinp, *dscale, *dbias;
	const float *inp, *dout, *scale, *bias, *smean, *srstd;
	int N, C, accum;
	float eps;
};

/* Row n's output from its mean m and its sum of squared deviations v. */
static inline void ln_norm_row(const struct ln_arg *a, size_t n, double m,
			       double v)
{
	int C = a->C;
	const float *restrict x = a->inp + n * C;
	float *restrict y = a->out + n * C;
	float r = (float)(1.0 / sqrt(v / C + a->eps));
	float mf = (float)m;
	for (int c = 0; c < C; c++)
		y[c] = (x[c] - mf) * r * a->scale[c] + a->bias[c];
	a->mean[n] = mf;
	a->rstd[n] = r;
}

HOT static void ln_fwd_rows(const struct ln_arg *a, size_t n0, size_t n1)
{
	int C = a->C;
	size_t n = n0;
	/* four rows' chains side by side (each a chain of double adds in
	 * column order, bound by the add's latency one row at a time) */
	for (; n + 4 <= n1; n += 4) {
		const float *restrict x = a->inp + n * C;
		double s[4] = {0}, m[4], v[4] = {0};
		for (int c = 0; c < C; c++)
			for (int k = 0; k < 4; k++)
				s[k] += x[k * C + c];
		for (int k = 0; k < 4; k++)
			m[k] = s[k] / C;
		for (int c = 0; c < C; c++)
			for (int k = 0; k < 4; k++) {
				double d = (double)x[k * C + c] - m[k];
				v[k] += d * d;
			}
		for (int k = 0; k < 4; k++)
			ln_norm_row(a, n + k, m[k], v[k]);
	}
	for (; n < n1; n++) {
		const float *restrict x = a->inp + n * C;
		double s = 0.0;
		for (int c = 0; c < C; c++)
			s += x[c];
		double m = s / C, v = 0.0;
		for (int c = 0; c < C; c++)
			v += ((double)x[c] - m) * ((double)x[c] - m);
		ln_norm_row(a, n, m, v);
	}
}

/* Column c's terms of row n's two sums for its input gradient (dout
 * scale, and that times xhat), each sum a double chain in column order. */
static inline void ln_dx_sums(const struct ln_arg *a, size_t n, int c,
			      double *sdg, double *sdgx)
{
	const float *restrict x = a->inp + n * a->C;
	const float *restrict d = a->dout + n * a->C;
	float xhat = (x[c] - a->smean[n]) * a->srstd[n];
	float dg = d[c] * a->scale[c];
	*sdg += dg;
	*sdgx += (double)dg * xhat;
}

// row n's input gradient from its sums
static inline void ln_dx_row(const struct ln_arg *a, size_t n, double sdg,
			     double sdgx)
{
	int C = a->C;
	const float *restrict scale = a->scale;
	const float *restrict x = a->inp + n * C;
	const float *restrict d = a->dout + n * C;
	float m = a->smean[n], r = a->srstd[n];
	float ga = (float)(sdg / C), gb = (float)(sdgx / C);
	float *restrict di = a->dinp + n * C;
	if (a->accum)
		for (int c = 0; c < C; c++) {
			float xhat = (x[c] - m) * r;
			di[c] += r * (d[c] * scale[c] - ga - xhat * gb);
		}
	else
		for (int c = 0; c < C; c++) {
			float xhat = (x[c] - m) * r;
			di[c] = r * (d[c] * scale[c] - ga - xhat * gb);
		}
}

// the input gradient of rows [n0, n1), four rows' chains side by side
HOT static void ln_dx_rows(const struct ln_arg *a, size_t n0, size_t n1)
{
	int C = a->C;
	size_t n = n0;
	for (; n + 4 <= n1; n += 4) {
		double sdg[4] = {0}, sdgx[4] = {0};
		for (int c = 0; c < C; c++)
			for (int k = 0; k < 4; k++)
				ln_dx_sums(a, n + k, c, &sdg[k], &sdgx[k]);
		for (int k = 0; k < 4; k++)
			ln_dx_row(a, n + k, sdg[k], sdgx[k]);
	}
	for (; n < n1; n++) {
		double sdg = 0.0, sdgx = 0.0;
		for (int c = 0; c < C; c++)
			ln_dx_sums(a, n, c, &sdg, &sdgx);
		ln_dx_row(a, n, sdg, sdgx);
	}
}

// dscale, dbias for columns [c0, c1), the rows added in order
HOT static void ln_dparam_cols(const struct ln_arg *a, int c0, int c1)
{
	int C = a->C;
	float *restrict ds = a->dscale, *restrict db = a->dbias;
	for (int c = c0; c < c1; c++)
		ds[c] = db[c] = 0.0f;
	for (size_t n = 0; n < (size_t)a->N; n++) {
		const float *restrict x = a->inp + n * C;
		const float *restrict d = a->dout + n * C;
		float m = a->smean[n], r = a->srstd[n];
		for (int c = c0; c < c1; c++) {
			float xhat = (x[c] - m) * r;
			db[c] += d[c];
			ds[c] += d[c] * xhat;
		}
	}
}

static void ln_fwd_task(void *v, int t, int nt)
{
	struct ln_arg *a = v;
	size_t n0, n1;
	split((size_t)a->N, t, nt, 1, &n0, &n1);
	ln_fwd_rows(a, n0, n1);
}

static void ln_bwd_task(void *v, int t, int nt)
{
	struct ln_arg *a = v;
	size_t c0, c1, n0, n1;
	/* columns in whole 16s, so each thread's run stays vectorised */
	split((size_t)a->C, t, nt, 16, &c0, &c1);
	ln_dparam_cols(a, (int)c0, (int)c1);
	if (a->dinp) {
		split((size_t)a->N, t, nt, 1, &n0, &n1);
		ln_dx_rows(a, n0, n1);
	}
}

// out, inp are (N,C); mean, rstd (N); scale, bias (C)
static void layernorm_forward(apf_backend *be, float *out, float *mean,
			      float *rstd, const float *inp, const float *scale,
			      const float *bias, int N, int C, float eps)
{
	struct ln_arg a = {.out = out, .mean = mean, .rstd = rstd,
			   .inp = inp, .scale = scale, .bias = bias, .N = N,
			   .C = C, .eps = eps};
	run_rows(be, ln_fwd_task, &a, N, C);
}

static void layernorm_backward(apf_backend *be, float *dinp, float *dscale,
			       float *dbias, const float *dout,
			       const float *inp, const float *scale,
			       const float *mean, const float *rstd, int N,
			       int C, int accum)
{
	struct ln_arg a = {.dinp = dinp, .dscale = dscale, .dbias = dbias,
			   .dout = dout, .inp = inp, .scale = scale,
			   .smean = mean, .srstd = rstd, .N = N, .C = C,
			   .accum = accum};
	run_rows(be, ln_bwd_task, &a, N, C);
}

/* ---- activations ---------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* The scalar formulas, shared by the activations and the gated linear
 * units, so both compute the same bits. The `_of` forms take the function's
 * transcendental (GELU's tanh, SiLU's e^-x) so that a value and its
 * derivative can share one call. */
static inline float relu_f(float x)
{
	return x > 0.0f ? x : 0.0f;
}

static inline float gelu_tanh(float x)
{
	return tanhf(GELU_K * (x + GELU_C * x * x * x));
}

static inline float gelu_of(float x, float t)
{
	return 0.5f * x * (1.0f + t);
}

static inline float gelu_f(float x)
{
	return gelu_of(x, gelu_tanh(x));
}

static inline float gelu_grad_of(float x, float t)
{
	float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

static inline float silu_of(float x, float e) /* e = e^-x */
{
	return x / (1.0f + e);
}

static inline float silu_f(float x)
{
	return silu_of(x, expf(-x));
}

static inline float silu_grad_of(float x, float e)
{
	float sg = 1.0f / (1.0f + e);
	return sg * (1.0f + x * (1.0f - sg));
}

/* Numerics 2 (nn.h): the same formulas on mathf.h's tanh and e^x, which
 * vectorise. The layers take nn.h's activation codes; under numerics 2
 * the backend hands its loops these in their place (act_code), so each
 * loop stays one formula without a branch. */
enum { ACT_GELU2 = 16, ACT_SILU2, ACT_TANH2 };

static inline float gelu2_tanh(float x)
{
	return apf_mf_tanh_f(GELU_K * (x + GELU_C * x * x * x));
}

static inline float gelu2_f(float x)
{
	return gelu_of(x, gelu2_tanh(x));
}

static inline float silu2_f(float x)
{
	return silu_of(x, apf_mf_exp_f(-x));
}

static int act_code(const apf_backend *be, int act)
{
	const struct pool *p = be->impl;
	if (p->numerics < 2)
		return act;
	return act == APF_ACT_GELU   ? ACT_GELU2
	       : act == APF_ACT_SILU ? ACT_SILU2
	       : act == APF_ACT_TANH ? ACT_TANH2
				     : act;
}

HOT static void activation_forward_s(apf_backend *be, int act, float *out,
			       const float *inp, size_t n)
{
	(void)be;
	switch (act) {
	case APF_ACT_RELU:
		for (size_t i = 0; i < n; i++)
			out[i] = relu_f(inp[i]);
		break;
	case APF_ACT_GELU:
		for (size_t i = 0; i < n; i++)
			out[i] = gelu_f(inp[i]);
		break;
	case APF_ACT_SILU:
		for (size_t i = 0; i < n; i++)
			out[i] = silu_f(inp[i]);
		break;
	case APF_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			out[i] = tanhf(inp[i]);
		break;
	case ACT_GELU2:
		for (size_t i = 0; i < n; i++)
			out[i] = gelu2_f(inp[i]);
		break;
	case ACT_SILU2:
		for (size_t i = 0; i < n; i++)
			out[i] = silu2_f(inp[i]);
		break;
	case ACT_TANH2:
		for (size_t i = 0; i < n; i++)
			out[i] = apf_mf_tanh_f(inp[i]);
		break;
	}
}

/* One loop per activation and per write mode (no branch inside), so each
 * vectorises; `dinp` is never read when writing (it may hold anything). */
#define ACT_LOOP(expr)                                                        \
	do {                                                                  \
		if (accum)                                                    \
			for (size_t i = 0; i < n; i++)                        \
				dinp[i] += (expr);                            \
		else                                                          \
			for (size_t i = 0; i < n; i++)                        \
				dinp[i] = (expr);                             \
	} while (0)

static inline float gelu_grad(float x)
{
	return gelu_grad_of(x, gelu_tanh(x));
}

static inline float silu_grad(float x)
{
	return silu_grad_of(x, expf(-x));
}

HOT static void activation_backward_s(apf_backend *be, int act, float *dinp,
				const float *dout, const float *inp,
				const float *out, size_t n, int accum)
{
	(void)be;
	switch (act) {
	case APF_ACT_RELU:
		ACT_LOOP(inp[i] > 0.0f ? dout[i] : 0.0f);
		break;
	case APF_ACT_GELU:
		ACT_LOOP(dout[i] * gelu_grad(inp[i]));
		break;
	case APF_ACT_SILU:
		ACT_LOOP(dout[i] * silu_grad(inp[i]));
		break;
	case APF_ACT_TANH:
	case ACT_TANH2:
		ACT_LOOP(dout[i] * (1.0f - out[i] * out[i]));
		break;
	case ACT_GELU2:
		ACT_LOOP(dout[i] * gelu_grad_of(inp[i], gelu2_tanh(inp[i])));
		break;
	case ACT_SILU2:
		ACT_LOOP(dout[i] * silu_grad_of(inp[i], apf_mf_exp_f(-inp[i])));
		break;
	}
}

/* ---- pooling (NHWC) ------------------------------------------------------- */

static void maxpool2d_forward(apf_backend *be, float *out, int32_t *argmax,
			      const float *inp, int B, int H, int W, int C,
			      int K, int S, int P)
{
	(void)be;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				size_t o = (((size_t)b * OH + oh) * OW + ow) * C;
				for (int c = 0; c < C; c++) {
					float best = -INFINITY;
					int32_t at = -1;
					for (int kh = 0; kh < K; kh++) {
						int ih = oh * S - P + kh;
						if (ih < 0 || ih >= H)
							continue;
						for (int kw = 0; kw < K; kw++) {
							int iw = ow * S - P + kw;
							if (iw < 0 || iw >= W)
								continue;
							int32_t i = (int32_t)((((size_t)b * H + ih) * W + iw) * C + c);
							if (at < 0 || inp[i] > best) {
								best = inp[i];
								at = i;
							}
						}
					}
					out[o + c] = best;
					argmax[o + c] = at;
				}
			}
}

static void maxpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			       const int32_t *argmax, int B, int H, int W,
			       int C, int K, int S, int P, int accum)
{
	(void)be;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	if (!accum)
		memset(dinp, 0, (size_t)B * H * W * C * sizeof *dinp);
	size_t n = (size_t)B * OH * OW * C;
	for (size_t i = 0; i < n; i++)
		dinp[argmax[i]] += dout[i];
}

/* Average pooling: images split across the pool when the tensor pays for
 * the hand-off. An output (or, backward, an input gradient) belongs to one
 * image and is summed in tap order whatever the split. */
struct avgpool_arg {
	float *out;
	const float *inp;
	int B, H, W, C, K, S, P, accum;
};

HOT static void avgpool_fwd_task(void *v, int t, int nt)
{
	struct avgpool_arg *a = v;
	int H = a->H, W = a->W, C = a->C, K = a->K, S = a->S, P = a->P;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	float inv = 1.0f / (float)(K * K);
	size_t b0, b1;
	split((size_t)a->B, t, nt, 1, &b0, &b1);
	for (size_t b = b0; b < b1; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				float *o = a->out + ((b * OH + oh) * OW + ow) * C;
				for (int c = 0; c < C; c++)
					o[c] = 0.0f;
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					if (ih < 0 || ih >= H)
						continue;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						if (iw < 0 || iw >= W)
							continue;
						const float *x = a->inp + ((b * H + ih) * W + iw) * C;
						for (int c = 0; c < C; c++)
							o[c] += x[c];
					}
				}
				for (int c = 0; c < C; c++)
					o[c] *= inv;
			}
}

// here out is dinp (B,H,W,C) and inp dout (B,OH,OW,C)
HOT static void avgpool_bwd_task(void *v, int t, int nt)
{
	struct avgpool_arg *a = v;
	int H = a->H, W = a->W, C = a->C, K = a->K, S = a->S, P = a->P;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	float inv = 1.0f / (float)(K * K);
	size_t b0, b1;
	split((size_t)a->B, t, nt, 1, &b0, &b1);
	if (!a->accum && b1 > b0)
		memset(a->out + b0 * H * W * C, 0,
		       (b1 - b0) * H * W * C * sizeof *a->out);
	for (size_t b = b0; b < b1; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				const float *d = a->inp + ((b * OH + oh) * OW + ow) * C;
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					if (ih < 0 || ih >= H)
						continue;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						if (iw < 0 || iw >= W)
							continue;
						float *x = a->out + ((b * H + ih) * W + iw) * C;
						for (int c = 0; c < C; c++)
							x[c] += d[c] * inv;
					}
				}
			}
}

static void avgpool_run(apf_backend *be, task_fn fn, struct avgpool_arg *a)
{
	if ((size_t)a->B * a->H * a->W * a->C < PAR_MIN || nthreads(be) == 1)
		fn(a, 0, 1);
	else
		parallel(be, fn, a);
}

static void avgpool2d_forward(apf_backend *be, float *out, const float *inp,
			      int B, int H, int W, int C, int K, int S, int P)
{
	struct avgpool_arg a = {.out = out, .inp = inp, .B = B, .H = H,
				.W = W, .C = C, .K = K, .S = S, .P = P};
	avgpool_run(be, avgpool_fwd_task, &a);
}

static void avgpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			       int B, int H, int W, int C, int K, int S, int P,
			       int accum)
{
	struct avgpool_arg a = {.out = dinp, .inp = dout, .B = B, .H = H,
				.W = W, .C = C, .K = K, .S = S, .P = P,
				.accum = accum};
	avgpool_run(be, avgpool_bwd_task, &a);
}

// out (B,C) = mean over HW of inp (B,HW,C)
static void global_avgpool_forward(apf_backend *be, float *out,
				   const float *inp, int B, int HW, int C)
{
	(void)be;
	float inv = 1.0f / (float)HW;
	for (int b = 0; b < B; b++) {
		float *o = out + (size_t)b * C;
		memset(o, 0, (size_t)C * sizeof *o);
		for (int p = 0; p < HW; p++) {
			const float *x = inp + ((size_t)b * HW + p) * C;
			for (int c = 0; c < C; c++)
				o[c] += x[c];
		}
		for (int c = 0; c < C; c++)
			o[c] *= inv;
	}
}

static void global_avgpool_backward(apf_backend *be, float *dinp,
				    const float *dout, int B, int HW, int C,
				    int accum)
{
	(void)be;
	float inv = 1.0f / (float)HW;
	for (int b = 0; b < B; b++)
		for (int p = 0; p < HW; p++) {
			float *x = dinp + ((size_t)b * HW + p) * C;
			const float *d = dout + (size_t)b * C;
			for (int c = 0; c < C; c++)
				x[c] = (accum ? x[c] : 0.0f) + d[c] * inv;
		}
}

/* ---- dropout, residual ---------------------------------------------------- */

/* Calls fn(i, keep) for each element, drawing four mask words per Philox
 * block, as apf_rng_word(key, step, i) addresses them. */
static void dropout_apply(float *out, const float *in, size_t n, float p,
			  const uint32_t key[2], uint64_t step, int accum,
			  size_t base)
{
	/* base: index of out[0] in the whole tensor, a multiple of 4 */
	out -= base, in -= base;
	float keep_scale = 1.0f / (1.0f - p);
	uint32_t ctr[4] = {0, 0, (uint32_t)step, (uint32_t)(step >> 32)};
	for (size_t i0 = base; i0 < base + n; i0 += 4) {
		uint32_t w[4];
		uint64_t blk = i0 / 4;
		ctr[0] = (uint32_t)blk;
		ctr[1] = (uint32_t)(blk >> 32);
		apf_philox4x32_10(ctr, key, w);
		for (size_t j = 0; j < 4 && i0 + j < base + n; j++) {
			size_t i = i0 + j;
			float v = apf_rng_to_uniform(w[j]) >= p
					  ? in[i] * keep_scale
					  : 0.0f;
			out[i] = accum ? out[i] + v : v;
		}
	}
}

HOT static void add_forward_s(apf_backend *be, float *out, const float *a,
			const float *b, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

HOT static void accumulate_s(apf_backend *be, float *dst, const float *src, size_t n,
		       int accum)
{
	(void)be;
	if (!accum) {
		cpu_memcpy(be, dst, src, n * sizeof *dst);
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* ---- loss ----------------------------------------------------------------- */

struct xent_arg {
	float *losses, *probs;
	const float *logits;
	const int32_t *labels;
	int B, V;
	float smoothing;
	int numerics; /* nn.h: 1 libm's expf, 2 apf_mf_exp_f */
};

// rows [b0, b1) of softmax_xent_forward
HOT static void xent_rows(const struct xent_arg *a, size_t b0, size_t b1)
{
	int V = a->V;
	for (size_t b = b0; b < b1; b++) {
		const float *restrict z = a->logits + b * V;
		float *restrict p = a->probs + b * V;
		float mx = z[0];
		for (int v = 1; v < V; v++)
			mx = z[v] > mx ? z[v] : mx;
		/* e^(z - max) in a loop of its own, which vectorises under
		 * numerics 2; the sums in double in column order either way */
		if (a->numerics >= 2)
			for (int v = 0; v < V; v++)
				p[v] = apf_mf_exp_f(z[v] - mx);
		else
			for (int v = 0; v < V; v++)
				p[v] = expf(z[v] - mx);
		double s = 0.0, sz = 0.0;
		for (int v = 0; v < V; v++) {
			s += p[v];
			sz += z[v];
		}
		float inv = (float)(1.0 / s);
		for (int v = 0; v < V; v++)
			p[v] *= inv;
		double lse = mx + log(s);
		/* -sum_v t_v log p_v with t = (1-s) onehot + s/V */
		double nll = lse - z[a->labels[b]];
		double smooth = lse - sz / V;
		a->losses[b] = (float)((1.0 - a->smoothing) * nll +
				       a->smoothing * smooth);
	}
}

static void xent_task(void *v, int t, int nt)
{
	struct xent_arg *a = v;
	size_t b0, b1;
	split((size_t)a->B, t, nt, 1, &b0, &b1);
	xent_rows(a, b0, b1);
}

// losses (B), probs (B,V) from logits (B,V) and labels (B); rows are
// independent, so any split of them gives the same bits
static void softmax_xent_forward(apf_backend *be, float *losses, float *probs,
				 const float *logits, const int32_t *labels,
				 int B, int V, float smoothing)
{
	const struct pool *p = be->impl;
	struct xent_arg a = {.losses = losses, .probs = probs,
			     .logits = logits, .labels = labels, .B = B,
			     .V = V, .smoothing = smoothing,
			     .numerics = p->numerics};
	run_rows(be, xent_task, &a, B, V);
}

static void softmax_xent_backward(apf_backend *be, float *dlogits,
				  const float *probs, const int32_t *labels,
				  int B, int V, float smoothing, float dloss)
{
	(void)be;
	float off = smoothing / (float)V;
	for (int b = 0; b < B; b++) {
		const float *p = probs + (size_t)b * V;
		float *d = dlogits + (size_t)b * V;
		for (int v = 0; v < V; v++)
			d[v] = dloss * (p[v] - off);
		d[labels[b]] -= dloss * (1.0f - smoothing);
	}
}

static long count_correct(apf_backend *be, const float *logits,
			  const int32_t *labels, int B, int V)
{
	(void)be;
	long n = 0;
	for (int b = 0; b < B; b++) {
		const float *z = logits + (size_t)b * V;
		int best = 0;
		for (int v = 1; v < V; v++)
			if (z[v] > z[best])
				best = v;
		n += best == labels[b];
	}
	return n;
}

/* ---- click-through layers: sigmoid loss, embeddings, dot interaction ----- */

// losses (B), probs (B) from logits (B) and 0/1 labels (B)
static void sigmoid_xent_forward(apf_backend *be, float *losses, float *probs,
				 const float *logits, const int32_t *labels,
				 int B, float smoothing)
{
	(void)be;
	for (int b = 0; b < B; b++) {
		double z = logits[b];
		double t = (1.0 - smoothing) * (labels[b] ? 1.0 : 0.0) +
			   0.5 * smoothing;
		/* max(z,0) - z t + log(1 + exp(-|z|)): no exp overflows, and
		 * log1p keeps the small tail exact. */
		double l = (z > 0 ? z : 0.0) - z * t + log1p(exp(-fabs(z)));
		losses[b] = (float)l;
		probs[b] = (float)(z >= 0 ? 1.0 / (1.0 + exp(-z))
					  : exp(z) / (1.0 + exp(z)));
	}
}

static void sigmoid_xent_backward(apf_backend *be, float *dlogits,
				  const float *probs, const int32_t *labels,
				  int B, float smoothing, float dloss)
{
	(void)be;
	for (int b = 0; b < B; b++) {
		float t = (1.0f - smoothing) * (labels[b] ? 1.0f : 0.0f) +
			  0.5f * smoothing;
		dlogits[b] = dloss * (probs[b] - t);
	}
}

// out (B,F,D) from table (V,D) at rows offset[f] + idx (B,ldi)[b,f]
HOT static void embedding_forward(apf_backend *be, float *out,
				  const int32_t *idx, int ldi,
				  const int32_t *offset, const float *table,
				  int B, int F, int D)
{
	(void)be;
	for (int b = 0; b < B; b++)
		for (int f = 0; f < F; f++) {
			size_t row = (size_t)idx[(size_t)b * ldi + f] +
				     (offset ? (size_t)offset[f] : 0);
			float *o = out + ((size_t)b * F + f) * D;
			const float *t = table + row * D;
			/* 16 floats a copy of constant size, which the
			 * compiler inlines as a few vector moves: a row is
			 * 16 floats or so (the DLRM's), where a call to
			 * memcpy costs as much as the copy */
			int k = 0;
			for (; k + 16 <= D; k += 16)
				memcpy(o + k, t + k, 16 * sizeof *o);
			if (k < D)
				memcpy(o + k, t + k, (size_t)(D - k) * sizeof *o);
		}
}

// dtable (V,D) = scatter-add of dout (B,F,D) rows, in (b, f) order
static void embedding_backward(apf_backend *be, float *dtable,
			       const float *dout, const int32_t *idx, int ldi,
			       const int32_t *offset, int B, int F, int V,
			       int D)
{
	(void)be;
	memset(dtable, 0, (size_t)V * D * sizeof *dtable);
	for (int b = 0; b < B; b++)
		for (int f = 0; f < F; f++) {
			size_t row = (size_t)idx[(size_t)b * ldi + f] +
				     (offset ? (size_t)offset[f] : 0);
			float *g = dtable + row * D;
			const float *d = dout + ((size_t)b * F + f) * D;
			for (int k = 0; k < D; k++)
				g[k] += d[k];
		}
}

/* The dot interaction works on lanes of examples (inter_body.h), the
 * examples split among the threads in whole lanes. Each example's
 * arithmetic is the same as when it was done alone - every dot summed in
 * double in k order, every gradient summed in double in pair order - with
 * the examples of a lane side by side in one vector of doubles, so the bits
 * depend on neither the thread count nor the path. Here: four examples in
 * GCC's generic vector (one AVX2 register in the AVX2 clone; a wider type
 * would have no register mode there and live in memory), for the plain
 * backend and the scalar path; the fast backend's AVX2 and AVX-512 paths
 * run their own (fast_avx2.c, fast_avx512.c: fused multiply-adds, exact
 * here, and 8 examples a vector on AVX-512). */
typedef double inter_v __attribute__((vector_size(4 * sizeof(double))));
#define IB_V inter_v
#define IB_L 4
#define IB_MADD(s, x, y) ((s) + (x) * (y))
#define IB_FN HOT static
#define IB_SUFFIX generic
#include "nn/cpu/inter_body.h"

struct inter_arg {
	struct apf_inter_job job;
	int B, lanes;
	apf_inter_fn fn;
	char *scratch;
	size_t slab; /* bytes per thread */
};

static void inter_task(void *v, int t, int nt)
{
	struct inter_arg *a = v;
	size_t b0, b1;
	split((size_t)a->B, t, nt, (size_t)a->lanes, &b0, &b1);
	a->fn(&a->job, b0, b1, a->scratch + (size_t)t * a->slab);
}

/* Runs the forward or the backward with a slab of scratch per thread: a
 * lane's vectors (F*D lanes of doubles) and the forward's dots (one lane
 * a pair) or the backward's gradients (F*D) and pair gradients (one a
 * pair). */
static void inter_run(apf_backend *be, struct inter_arg *a, int backward)
{
	apf_inter_fn fwd = inter_fwd_rows_generic, bwd = inter_bwd_rows_generic;
	a->lanes = 4;
	if (use_fast(be)) {
		apf_inter_fn f, b;
		int lanes = apf_cpu_inter_kernels(gemm_isa(be), &f, &b);
		if (lanes)
			fwd = f, bwd = b, a->lanes = lanes;
	}
	a->fn = backward ? bwd : fwd;
	size_t F = (size_t)a->job.E + 1, D = (size_t)a->job.D;
	size_t need = (2 * F * D + F * (F - 1) / 2) * (size_t)a->lanes *
		      sizeof(double);
	a->slab = (need + 63) / 64 * 64;
	int nt = (size_t)a->B * F * D < PAR_MIN / 8 ? 1 : nthreads(be);
	a->scratch = aligned_alloc(64, a->slab * (size_t)nt);
	if (!a->scratch) {
		cpu_fail(be, "interaction");
		return;
	}
	if (nt == 1)
		inter_task(a, 0, 1);
	else
		parallel(be, inter_task, a);
	free(a->scratch);
}

// out (B, D + F(F-1)/2) from dense (B,D) and emb (B,E,D), F = E + 1
static void interaction_forward(apf_backend *be, float *out,
				const float *dense, const float *emb, int B,
				int E, int D)
{
	struct inter_arg a = {.job = {.out = out, .dense = dense, .emb = emb,
				      .E = E, .D = D},
			      .B = B};
	inter_run(be, &a, 0);
}

static void interaction_backward(apf_backend *be, float *ddense, float *demb,
				 const float *dout, const float *dense,
				 const float *emb, int B, int E, int D,
				 int accum_dense, int accum_emb)
{
	struct inter_arg a = {.job = {.ddense = ddense, .demb = demb,
				      .dout = dout, .dense = dense, .emb = emb,
				      .E = E, .D = D,
				      .accum_dense = accum_dense,
				      .accum_emb = accum_emb},
			      .B = B};
	inter_run(be, &a, 1);
}

/* ---- vector operations ---------------------------------------------------- */

static void v_fill(apf_backend *be, float *x, float v, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		x[i] = v;
}

static void v_copy(apf_backend *be, float *dst, const float *src, size_t n)
{
	cpu_memcpy(be, dst, src, n * sizeof *dst);
}

HOT static void v_scale_s(apf_backend *be, float *x, float a, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		x[i] *= a;
}

HOT static void v_axpy_s(apf_backend *be, float *y, float a, const float *x,
		   size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void v_axpby(apf_backend *be, float *y, float a, const float *x,
		    float b, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		y[i] = a * x[i] + b * y[i];
}

static void v_add_scalar(apf_backend *be, float *x, float a, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		x[i] += a;
}

static void v_mul(apf_backend *be, float *z, const float *x, const float *y,
		  size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		z[i] = x[i] * y[i];
}

static void v_div(apf_backend *be, float *z, const float *x, const float *y,
		  size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		z[i] = x[i] / y[i];
}

static void v_sqrt(apf_backend *be, float *y, const float *x, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		y[i] = sqrtf(x[i]);
}

static void v_max(apf_backend *be, float *z, const float *x, const float *y,
		  size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		z[i] = x[i] > y[i] ? x[i] : y[i];
}

static void v_clamp(apf_backend *be, float *x, float lo, float hi, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

/* The Adam arithmetic, written once: moments and adam_direction below and
 * the fused AdamW pass (adamw_span) compute each element by these, so the
 * fused pass gives the composed ops' bits by construction (no contraction:
 * -std=c17 keeps -ffp-contract=off). */
static inline float adam_m(float m, float g, float b1, float a1)
{
	return b1 * m + a1 * g;
}

static inline float adam_v(float v, float g, float b2, float a2)
{
	return b2 * v + a2 * g * g;
}

static inline float adam_d(float m, float v, float c1, float c2, float eps)
{
	return m * c1 / (sqrtf(v * c2) + eps);
}

HOT static void v_moments_s(apf_backend *be, float *m, float *v, const float *g,
		      float b1, float b2, size_t n)
{
	(void)be;
	float a1 = 1.0f - b1, a2 = 1.0f - b2;
	for (size_t i = 0; i < n; i++) {
		m[i] = adam_m(m[i], g[i], b1, a1);
		v[i] = adam_v(v[i], g[i], b2, a2);
	}
}

HOT static void v_adam_direction_s(apf_backend *be, float *d, const float *m,
			     const float *v, float c1, float c2, float eps,
			     size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		d[i] = adam_d(m[i], v[i], c1, c2, eps);
}

static double v_dot(apf_backend *be, const float *x, const float *y, size_t n)
{
	(void)be;
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * y[i];
	return s;
}

static double v_sum(apf_backend *be, const float *x, size_t n)
{
	(void)be;
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += x[i];
	return s;
}

static double v_norm2(apf_backend *be, const float *x, size_t n)
{
	return sqrt(v_dot(be, x, x, n));
}

static double v_max_abs(apf_backend *be, const float *x, size_t n)
{
	(void)be;
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		m = a > m ? a : m;
	}
	return m;
}

/* ---- elementwise work, split across threads -------------------------------- */

enum {
	EW_ACT_F = 1, EW_ACT_B, EW_ADD, EW_ACC, EW_SCALE, EW_AXPY, EW_MOMENTS,
	EW_ADAM_DIR, EW_DROPOUT, EW_FN,
};

struct ew_arg {
	int op, act, accum;
	float *out, *out2;
	const float *a, *b, *c;
	float s1, s2, s3, s4;
	size_t n;
	const uint32_t *key;
	uint64_t step;
	/* EW_FN: elements [b, e) of the operation */
	void (*fn)(const struct ew_arg *a, size_t b, size_t e);
};

static void ew_task(void *v, int t, int nt)
{
	struct ew_arg *a = v;
	size_t b, e;
	split(a->n, t, nt, 16, &b, &e);
	if (b >= e)
		return;
	size_t k = e - b;
	switch (a->op) {
	case EW_ACT_F:
		activation_forward_s(NULL, a->act, a->out + b, a->a + b, k);
		break;
	case EW_ACT_B:
		activation_backward_s(NULL, a->act, a->out + b, a->a + b,
				      a->b + b, a->c + b, k, a->accum);
		break;
	case EW_ADD:
		add_forward_s(NULL, a->out + b, a->a + b, a->b + b, k);
		break;
	case EW_ACC:
		accumulate_s(NULL, a->out + b, a->a + b, k, a->accum);
		break;
	case EW_SCALE:
		v_scale_s(NULL, a->out + b, a->s1, k);
		break;
	case EW_AXPY:
		v_axpy_s(NULL, a->out + b, a->s1, a->a + b, k);
		break;
	case EW_MOMENTS:
		v_moments_s(NULL, a->out + b, a->out2 + b, a->a + b, a->s1,
			    a->s2, k);
		break;
	case EW_ADAM_DIR:
		v_adam_direction_s(NULL, a->out + b, a->a + b, a->b + b, a->s1,
				   a->s2, a->s3, k);
		break;
	case EW_DROPOUT:
		dropout_apply(a->out + b, a->a + b, k, a->s1, a->key, a->step,
			      a->accum, b);
		break;
	case EW_FN:
		a->fn(a, b, e);
		break;
	}
}

static void ew_run(apf_backend *be, struct ew_arg *a)
{
	if (a->n < PAR_MIN || nthreads(be) == 1)
		ew_task(a, 0, 1);
	else
		parallel(be, ew_task, a);
}

static void activation_forward(apf_backend *be, int act, float *out,
			       const float *inp, size_t n)
{
	struct ew_arg a = {.op = EW_ACT_F, .act = act_code(be, act),
			   .out = out, .a = inp, .n = n};
	ew_run(be, &a);
}

static void activation_backward(apf_backend *be, int act, float *dinp,
				const float *dout, const float *inp,
				const float *out, size_t n, int accum)
{
	struct ew_arg a = {.op = EW_ACT_B, .act = act_code(be, act),
			   .out = dinp, .a = dout, .b = inp, .c = out, .n = n,
			   .accum = accum};
	ew_run(be, &a);
}

static void add_forward(apf_backend *be, float *out, const float *x,
			const float *y, size_t n)
{
	struct ew_arg a = {.op = EW_ADD, .out = out, .a = x, .b = y, .n = n};
	ew_run(be, &a);
}

static void accumulate(apf_backend *be, float *dst, const float *src, size_t n,
		       int accum)
{
	struct ew_arg a = {.op = EW_ACC, .out = dst, .a = src, .n = n,
			   .accum = accum};
	ew_run(be, &a);
}

static void dropout_forward(apf_backend *be, float *out, const float *inp,
			    size_t n, float p, const uint32_t key[2],
			    uint64_t step)
{
	struct ew_arg a = {.op = EW_DROPOUT, .out = out, .a = inp, .n = n,
			   .s1 = p, .key = key, .step = step};
	ew_run(be, &a);
}

static void dropout_backward(apf_backend *be, float *dinp, const float *dout,
			     size_t n, float p, const uint32_t key[2],
			     uint64_t step, int accum)
{
	struct ew_arg a = {.op = EW_DROPOUT, .out = dinp, .a = dout, .n = n,
			   .s1 = p, .key = key, .step = step, .accum = accum};
	ew_run(be, &a);
}

static void v_scale(apf_backend *be, float *x, float s, size_t n)
{
	struct ew_arg a = {.op = EW_SCALE, .out = x, .s1 = s, .n = n};
	ew_run(be, &a);
}

static void v_axpy(apf_backend *be, float *y, float s, const float *x, size_t n)
{
	struct ew_arg a = {.op = EW_AXPY, .out = y, .a = x, .s1 = s, .n = n};
	ew_run(be, &a);
}

static void v_moments(apf_backend *be, float *m, float *v, const float *g,
		      float b1, float b2, size_t n)
{
	struct ew_arg a = {.op = EW_MOMENTS, .out = m, .out2 = v, .a = g,
			   .s1 = b1, .s2 = b2, .n = n};
	ew_run(be, &a);
}

static void v_adam_direction(apf_backend *be, float *d, const float *m,
			     const float *v, float c1, float c2, float eps,
			     size_t n)
{
	struct ew_arg a = {.op = EW_ADAM_DIR, .out = d, .a = m, .b = v,
			   .s1 = c1, .s2 = c2, .s3 = eps, .n = n};
	ew_run(be, &a);
}

/* AdamW's update in one pass (nn.h's adamw): g, m, v and p read once and
 * m, v and p written once, where moments, adam_direction, scale and axpy
 * move thirteen streams over four passes. Where decay is 1 the composed
 * update skips scale; p * 1.0f here gives the same bits (x * 1 is x for
 * every value, a NaN quieted as the add after it would quiet it). */
HOT static void adamw_span(float *restrict p, float *restrict m,
			   float *restrict v, const float *restrict g,
			   const struct apf_adamw_pass *a, float decay,
			   size_t n)
{
	float b1 = a->b1, b2 = a->b2, a1 = 1.0f - b1, a2 = 1.0f - b2;
	float c1 = a->c1, c2 = a->c2, eps = a->eps, step = a->step;
	for (size_t i = 0; i < n; i++) {
		float mi = adam_m(m[i], g[i], b1, a1);
		float vi = adam_v(v[i], g[i], b2, a2);
		m[i] = mi, v[i] = vi;
		p[i] = p[i] * decay + step * adam_d(mi, vi, c1, c2, eps);
	}
}

struct adamw_arg {
	float *p, *m, *v;
	const float *g;
	const struct apf_adamw_pass *a;
	size_t n;
};

/* A thread's elements [b, e), cut at the segments' ends. */
static void adamw_task(void *arg, int t, int nt)
{
	struct adamw_arg *w = arg;
	const struct apf_adamw_pass *a = w->a;
	size_t b, e;
	split(w->n, t, nt, 16, &b, &e);
	for (int s = 0; s < a->nseg && b < e; s++) {
		size_t s1 = a->end[s] < e ? a->end[s] : e;
		if (s1 <= b)
			continue;
		adamw_span(w->p + b, w->m + b, w->v + b, w->g + b, a,
			   a->decay[s], s1 - b);
		b = s1;
	}
}

static void v_adamw(apf_backend *be, float *p, float *m, float *v,
		    const float *g, const struct apf_adamw_pass *a, size_t n)
{
	struct adamw_arg w = {.p = p, .m = m, .v = v, .g = g, .a = a, .n = n};
	if (n < PAR_MIN || nthreads(be) == 1)
		adamw_task(&w, 0, 1);
	else
		parallel(be, adamw_task, &w);
}

/* ---- ABI 2 vector operations ----------------------------------------------
 *
 * Each element is computed alone, by one IEEE operation or by mathf.h's
 * fixed double sequence, so splitting the elements among threads (ew_run)
 * changes nothing and every path gives the same bits. */

#define EW2(name, expr)                                                        \
	static void name##_k(const struct ew_arg *a, size_t b, size_t e)       \
	{                                                                      \
		float *z = a->out;                                             \
		const float *x = a->a, *y = a->b, *c = a->c;                   \
		float s = a->s1;                                               \
		(void)x, (void)y, (void)c, (void)s;                            \
		for (size_t i = b; i < e; i++)                                 \
			z[i] = (expr);                                         \
	}

EW2(v_sub, x[i] - y[i])
EW2(v_min, x[i] < y[i] ? x[i] : y[i])
EW2(v_sign, x[i] > 0.0f ? 1.0f : x[i] < 0.0f ? -1.0f : x[i])
EW2(v_abs, fabsf(x[i]))
EW2(v_exp, apf_mf_exp(x[i]))
EW2(v_log, apf_mf_log(x[i]))
EW2(v_reciprocal, 1.0f / x[i])
EW2(v_rsqrt, 1.0f / sqrtf(x[i] + s))
EW2(v_pow, apf_mf_pow(x[i], s))
EW2(v_agree, (x[i] > 0.0f && y[i] > 0.0f) || (x[i] < 0.0f && y[i] < 0.0f)
		     ? 1.0f
		     : 0.0f)
EW2(v_select, c[i] > 0.0f ? x[i] : y[i])

static void ew_fn(apf_backend *be, void (*fn)(const struct ew_arg *, size_t,
					       size_t),
		  float *z, const float *x, const float *y, const float *c,
		  float s, size_t n)
{
	struct ew_arg a = {.op = EW_FN, .fn = fn, .out = z, .a = x, .b = y,
			   .c = c, .s1 = s, .n = n};
	ew_run(be, &a);
}

static void v_sub(apf_backend *be, float *z, const float *x, const float *y,
		  size_t n)
{
	ew_fn(be, v_sub_k, z, x, y, NULL, 0, n);
}

static void v_min(apf_backend *be, float *z, const float *x, const float *y,
		  size_t n)
{
	ew_fn(be, v_min_k, z, x, y, NULL, 0, n);
}

static void v_sign(apf_backend *be, float *y, const float *x, size_t n)
{
	ew_fn(be, v_sign_k, y, x, NULL, NULL, 0, n);
}

static void v_abs(apf_backend *be, float *y, const float *x, size_t n)
{
	ew_fn(be, v_abs_k, y, x, NULL, NULL, 0, n);
}

static void v_exp(apf_backend *be, float *y, const float *x, size_t n)
{
	ew_fn(be, v_exp_k, y, x, NULL, NULL, 0, n);
}

static void v_log(apf_backend *be, float *y, const float *x, size_t n)
{
	ew_fn(be, v_log_k, y, x, NULL, NULL, 0, n);
}

static void v_reciprocal(apf_backend *be, float *y, const float *x, size_t n)
{
	ew_fn(be, v_reciprocal_k, y, x, NULL, NULL, 0, n);
}

static void v_rsqrt(apf_backend *be, float *y, const float *x, float eps,
		    size_t n)
{
	ew_fn(be, v_rsqrt_k, y, x, NULL, NULL, eps, n);
}

static void v_pow(apf_backend *be, float *y, const float *x, float p, size_t n)
{
	ew_fn(be, v_pow_k, y, x, NULL, NULL, p, n);
}

static void v_agree(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n)
{
	ew_fn(be, v_agree_k, z, x, y, NULL, 0, n);
}

static void v_select(apf_backend *be, float *z, const float *c, const float *x,
		     const float *y, size_t n)
{
	ew_fn(be, v_select_k, z, x, y, c, 0, n);
}

/* Sums of squares of rows and columns: each output summed alone, in index
 * order, in double; rows (columns) split among threads as whole outputs. */
struct sumsq_arg {
	float *out;
	const float *a;
	int rows, cols, lda, by_col;
};

static void sumsq_task(void *v, int t, int nt)
{
	struct sumsq_arg *s = v;
	int n = s->by_col ? s->cols : s->rows;
	size_t b, e;
	split((size_t)n, t, nt, 1, &b, &e);
	if (!s->by_col) {
		for (size_t r = b; r < e; r++) {
			const float *row = s->a + r * (size_t)s->lda;
			double acc = 0.0;
			for (int c = 0; c < s->cols; c++)
				acc += (double)row[c] * row[c];
			s->out[r] = (float)acc;
		}
		return;
	}
	/* Columns in strips of 64, rows in order: each column's sum still
	 * runs r = 0, 1, ... */
	double acc[64];
	for (size_t c0 = b; c0 < e; c0 += 64) {
		size_t w = e - c0 < 64 ? e - c0 : 64;
		for (size_t j = 0; j < w; j++)
			acc[j] = 0.0;
		for (int r = 0; r < s->rows; r++) {
			const float *row = s->a + (size_t)r * s->lda + c0;
			for (size_t j = 0; j < w; j++)
				acc[j] += (double)row[j] * row[j];
		}
		for (size_t j = 0; j < w; j++)
			s->out[c0 + j] = (float)acc[j];
	}
}

static void sumsq(apf_backend *be, float *out, const float *a, int rows,
		  int cols, int lda, int by_col)
{
	struct sumsq_arg s = {out, a, rows, cols, lda, by_col};
	if ((size_t)rows * cols < PAR_MIN || nthreads(be) == 1)
		sumsq_task(&s, 0, 1);
	else
		parallel(be, sumsq_task, &s);
}

static void v_row_sumsq(apf_backend *be, float *out, const float *a, int rows,
			int cols, int lda)
{
	sumsq(be, out, a, rows, cols, lda, 0);
}

static void v_col_sumsq(apf_backend *be, float *out, const float *a, int rows,
			int cols, int lda)
{
	sumsq(be, out, a, rows, cols, lda, 1);
}

static void v_copy_mat(apf_backend *be, float *dst, int ldd, const float *src,
		       int lds, int rows, int cols)
{
	(void)be;
	for (int r = 0; r < rows; r++)
		memcpy(dst + (size_t)r * ldd, src + (size_t)r * lds,
		       (size_t)cols * sizeof *dst);
}

/* ---- sequence layers: causal self-attention, gated linear units ---------- */

/* Attention works head by head: the B*NH (b,h) pairs are split statically
 * among the threads and each pair is computed whole by one thread in a fixed
 * order, so the bits do not depend on the thread count. Within a head, query
 * row t reads keys 0..t only. K (forward) and V (backward) are first copied
 * transposed, (hs,Tp) with Tp = apf_attn_padded(T) (fast.h: a multiple of
 * 32, so of ATTN_KB and ATTN_KBF) and zero columns after T, so a row's dot
 * products run along the keys, a block of keys at a time in registers,
 * each summed in d order: the scores in double, the backward's dout.v in
 * float. Weighted sums of rows (out, dq) keep up to 32 columns in
 * registers and add the rows in key order. Each thread's scratch is linear
 * in T (a few (T,hs) panels and rows of T), never (T,T). These loops are
 * the contract; the vector paths run attn_body.h's kernels, with the same
 * bits, where the head size is a multiple of their float vector. */

#define ATTN_KB 16  /* keys per register block of the double dots */
#define ATTN_KBF 32 /* the same for float dots */
#define ATTN_QG 4   /* query rows per group in the backward */

struct attn_arg {
	float *out, *att, *dqkv;
	const float *qkv, *dout, *att_in;
	int B, T, C, NH, accum;
	float scale;
	apf_attn_fwd_fn fwd; /* the path's kernels (fast.h), or these */
	apf_attn_bwd_fn bwd;
	char *scratch;      /* one slab per thread */
	size_t slab_bytes;
};

/* Bytes of one thread's scratch, enough for forward and backward here and
 * in attn_body.h: 4 Tp doubles, then a (hs,Tp) and two (T,hs) float
 * panels, 4 rows of hs and 4 rows of Tp floats (ATTN_QG and attn_body.h's
 * AB_R are 4); a multiple of 64 so every slab stays aligned. */
static size_t attn_slab_bytes(int T, int hs)
{
	size_t Tp = (size_t)apf_attn_padded(T);
	size_t b = 4 * Tp * sizeof(double) +
		   (Tp * hs + (size_t)2 * T * hs + (size_t)4 * hs +
		    (size_t)4 * Tp) * sizeof(float);
	return (b + 63) / 64 * 64;
}

// xT (hs,Tp) = rows x[t] (hs each, stride ld) for t < T, zero after
static inline void attn_transpose(float *restrict xT, const float *restrict x,
				  size_t ld, int T, int Tp, int hs)
{
	for (int d = 0; d < hs; d++) {
		float *restrict r = xT + (size_t)d * Tp;
		for (int t = 0; t < T; t++)
			r[t] = x[t * ld + d];
		for (int t = T; t < Tp; t++)
			r[t] = 0.0f;
	}
}

// s (n rounded up to ATTN_KB) = y (hs) . xT[:, t2], in double in d order
static inline void attn_dots(double *restrict s, const float *restrict y,
			     const float *restrict xT, int Tp, int hs, int n)
{
	for (int t0 = 0; t0 < n; t0 += ATTN_KB) {
		double acc[ATTN_KB] = {0};
		for (int d = 0; d < hs; d++) {
			double yd = y[d];
			const float *restrict xr = xT + (size_t)d * Tp + t0;
			for (int j = 0; j < ATTN_KB; j++)
				acc[j] += yd * xr[j];
		}
		for (int j = 0; j < ATTN_KB; j++)
			s[t0 + j] = acc[j];
	}
}

/* attn_dots for two rows y0, y1 at once, sharing each load of xT: the same
 * bits as two calls */
static inline void attn_dots2(double *restrict s0, double *restrict s1,
			      const float *restrict y0,
			      const float *restrict y1,
			      const float *restrict xT, int Tp, int hs, int n)
{
	for (int t0 = 0; t0 < n; t0 += ATTN_KB) {
		double a0[ATTN_KB] = {0}, a1[ATTN_KB] = {0};
		for (int d = 0; d < hs; d++) {
			double u = y0[d], w = y1[d];
			const float *restrict xr = xT + (size_t)d * Tp + t0;
			for (int j = 0; j < ATTN_KB; j++) {
				double x = xr[j];
				a0[j] += u * x;
				a1[j] += w * x;
			}
		}
		for (int j = 0; j < ATTN_KB; j++) {
			s0[t0 + j] = a0[j];
			s1[t0 + j] = a1[j];
		}
	}
}

// s (n rounded up to ATTN_KBF) = y (hs) . xT[:, t2], in float in d order
static inline void attn_dots_f(float *restrict s, const float *restrict y,
			       const float *restrict xT, int Tp, int hs, int n)
{
	for (int t0 = 0; t0 < n; t0 += ATTN_KBF) {
		float acc[ATTN_KBF] = {0};
		for (int d = 0; d < hs; d++) {
			float yd = y[d];
			const float *restrict xr = xT + (size_t)d * Tp + t0;
			for (int j = 0; j < ATTN_KBF; j++)
				acc[j] += yd * xr[j];
		}
		for (int j = 0; j < ATTN_KBF; j++)
			s[t0 + j] = acc[j];
	}
}

/* sum over t2 < n of a[t2] b[t2] in double: four partials over t2 mod 4,
 * then the tail, in a fixed order */
static inline double attn_dot_d(const float *restrict a,
				const float *restrict b, int n)
{
	double p[4] = {0};
	int i = 0;
	for (; i + 4 <= n; i += 4)
		for (int j = 0; j < 4; j++)
			p[j] += (double)a[i + j] * b[i + j];
	double s = (p[0] + p[1]) + (p[2] + p[3]);
	for (; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* y (hs) += w[j s] x[j] for rows j = 0..3 (stride lx) in order, in one
 * pass: the same bits as four axpys. */
static inline void attn_rank4(float *restrict y, const float *restrict w,
			      size_t s, const float *restrict x, size_t lx,
			      int hs)
{
	float w0 = w[0], w1 = w[s], w2 = w[2 * s], w3 = w[3 * s];
	const float *restrict x1 = x + lx, *restrict x2 = x + 2 * lx;
	const float *restrict x3 = x + 3 * lx;
	for (int d = 0; d < hs; d++) {
		float v = y[d];
		v += w0 * x[d];
		v += w1 * x1[d];
		v += w2 * x2[d];
		v += w3 * x3[d];
		y[d] = v;
	}
}

/* y (W) = sum over t2 < n of w[t2] x[t2] (rows of stride ld), in t2 order;
 * W a constant once inlined, so acc lives in registers. */
static inline void attn_wsum_block(float *restrict y, const float *restrict w,
				   const float *restrict x, size_t ld, int n,
				   const int W)
{
	float acc[32] = {0};
	for (int t2 = 0; t2 < n; t2++) {
		float wt = w[t2];
		const float *restrict xr = x + t2 * ld;
		for (int j = 0; j < W; j++)
			acc[j] += wt * xr[j];
	}
	for (int j = 0; j < W; j++)
		y[j] = acc[j];
}

// y (hs) = sum over t2 < n of w[t2] x[t2] (hs each, stride ld)
static inline void attn_wsum(float *restrict y, const float *restrict w,
			     const float *restrict x, size_t ld, int n, int hs)
{
	int d = 0;
	for (; d + 32 <= hs; d += 32)
		attn_wsum_block(y + d, w, x + d, ld, n, 32);
	for (; d + 8 <= hs; d += 8)
		attn_wsum_block(y + d, w, x + d, ld, n, 8);
	for (; d < hs; d++)
		attn_wsum_block(y + d, w, x + d, ld, n, 1);
}

// y (n) += a x (n)
static inline void attn_axpy(float *restrict y, float a,
			     const float *restrict x, int n)
{
	for (int i = 0; i < n; i++)
		y[i] += a * x[i];
}

// y (n) = x, or += x when accum
static inline void attn_store(float *restrict y, const float *restrict x,
			      int n, int accum)
{
	if (accum)
		for (int i = 0; i < n; i++)
			y[i] += x[i];
	else
		for (int i = 0; i < n; i++)
			y[i] = x[i];
}

// out (T,hs) of head (b,h), stride C; att (T,T); qkv (T,3C) at head h
HOT static void attention_head_forward(float *out, float *att,
				       const float *qkv, int T, int C, int hs,
				       float scale, char *slab)
{
	size_t ld = (size_t)3 * C;
	int Tp = apf_attn_padded(T);
	double *s = (double *)slab; /* two rows of Tp scores */
	float *kT = (float *)(s + 2 * (size_t)Tp);
	float *orow = kT + (size_t)Tp * hs;
	attn_transpose(kT, qkv + C, ld, T, Tp, hs);
	/* query rows two at a time, sharing the loads of K */
	for (int t0 = 0; t0 < T; t0 += 2) {
		int rows = T - t0 < 2 ? 1 : 2;
		const float *q = qkv + t0 * ld;
		if (rows == 2)
			attn_dots2(s, s + Tp, q, q + ld, kT, Tp, hs, t0 + 2);
		else
			attn_dots(s, q, kT, Tp, hs, t0 + 1);
		for (int r = 0; r < rows; r++) {
			int t = t0 + r, n = t + 1;
			double *sr = s + (size_t)r * Tp;
			float *a = att + (size_t)t * T;
			double m = -INFINITY;
			for (int t2 = 0; t2 < n; t2++) {
				sr[t2] *= scale;
				m = sr[t2] > m ? sr[t2] : m;
			}
			for (int t2 = 0; t2 < n; t2++)
				a[t2] = apf_mf_exp_f((float)(sr[t2] - m));
			double sum = 0.0;
			for (int t2 = 0; t2 < n; t2++)
				sum += a[t2];
			double inv = 1.0 / sum;
			for (int t2 = 0; t2 < n; t2++)
				a[t2] = (float)(a[t2] * inv);
			for (int t2 = n; t2 < T; t2++)
				a[t2] = 0.0f;
			attn_wsum(orow, a, qkv + 2 * (size_t)C, ld, n, hs);
			memcpy(out + (size_t)t * C, orow,
			       (size_t)hs * sizeof *orow);
		}
	}
}

// dqkv (T,3C) at head h from dout (T,hs) stride C, qkv, att (T,T)
HOT static void attention_head_backward(float *dqkv, const float *dout,
					const float *qkv, const float *att,
					int T, int C, int hs, float scale,
					int accum, char *slab)
{
	size_t ld = (size_t)3 * C;
	int Tp = apf_attn_padded(T);
	float *datt = (float *)slab;
	float *vT = datt + Tp;
	float *dk = vT + (size_t)Tp * hs, *dv = dk + (size_t)T * hs;
	float *dq = dv + (size_t)T * hs, *dpre = dq + hs;
	attn_transpose(vT, qkv + 2 * (size_t)C, ld, T, Tp, hs);
	memset(dk, 0, (size_t)2 * T * hs * sizeof *dk);
	/* Query rows in groups of ATTN_QG: each row's dq as it comes, then
	 * the group's terms of dk, dv added row after row (t increasing) in
	 * one pass over each key's row, the order the rows would give one at
	 * a time. */
	for (int t0 = 0; t0 < T; t0 += ATTN_QG) {
		int G = T - t0 < ATTN_QG ? T - t0 : ATTN_QG;
		for (int j = 0; j < G; j++) {
			int t = t0 + j, n = t + 1;
			const float *a = att + (size_t)t * T;
			float *dp = dpre + (size_t)j * T;
			attn_dots_f(datt, dout + (size_t)t * C, vT, Tp, hs, n);
			double sd = attn_dot_d(a, datt, n);
			/* the softmax's backward, the score scale folded in */
			for (int t2 = 0; t2 < n; t2++)
				dp[t2] = (float)((double)scale * a[t2] *
						 (datt[t2] - sd));
			attn_wsum(dq, dp, qkv + C, ld, n, hs);
			attn_store(dqkv + t * ld, dq, hs, accum);
		}
		const float *a0 = att + (size_t)t0 * T;
		const float *q0 = qkv + t0 * ld, *o0 = dout + (size_t)t0 * C;
		int t2 = 0;
		if (G == ATTN_QG)
			/* keys every row of the group reads */
			for (; t2 <= t0; t2++) {
				attn_rank4(dk + (size_t)t2 * hs, dpre + t2,
					   (size_t)T, q0, ld, hs);
				attn_rank4(dv + (size_t)t2 * hs, a0 + t2,
					   (size_t)T, o0, (size_t)C, hs);
			}
		for (; t2 < t0 + G; t2++)
			for (int j = t2 > t0 ? t2 - t0 : 0; j < G; j++) {
				attn_axpy(dk + (size_t)t2 * hs,
					  dpre[(size_t)j * T + t2],
					  q0 + j * ld, hs);
				attn_axpy(dv + (size_t)t2 * hs,
					  a0[(size_t)j * T + t2],
					  o0 + (size_t)j * C, hs);
			}
	}
	for (int t2 = 0; t2 < T; t2++) {
		attn_store(dqkv + t2 * ld + C, dk + (size_t)t2 * hs, hs, accum);
		attn_store(dqkv + t2 * ld + 2 * (size_t)C, dv + (size_t)t2 * hs,
			   hs, accum);
	}
}

static void attn_task(void *v, int t, int nt, int backward)
{
	struct attn_arg *a = v;
	int T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	size_t lo, hi;
	split((size_t)a->B * NH, t, nt, 1, &lo, &hi);
	char *slab = a->scratch + (size_t)t * a->slab_bytes;
	for (size_t bh = lo; bh < hi; bh++) {
		size_t b = bh / NH, h = bh % NH;
		size_t row0 = b * T;  /* first (b,t) row */
		const float *qkv = a->qkv + row0 * 3 * C + h * hs;
		if (backward)
			a->bwd(a->dqkv + row0 * 3 * C + h * hs,
			       a->dout + row0 * C + h * hs, qkv,
			       a->att_in + bh * T * T, T, C, hs, a->scale,
			       a->accum, slab);
		else
			a->fwd(a->out + row0 * C + h * hs, a->att + bh * T * T,
			       qkv, T, C, hs, a->scale, slab);
	}
}

static void attn_fwd_task(void *v, int t, int nt)
{
	attn_task(v, t, nt, 0);
}

static void attn_bwd_task(void *v, int t, int nt)
{
	attn_task(v, t, nt, 1);
}

/* The kernels, and scratch for every thread, or NULL after reporting the
 * failure. */
static char *attn_scratch(apf_backend *be, struct attn_arg *a)
{
	a->fwd = attention_head_forward;
	a->bwd = attention_head_backward;
	if (use_fast(be))
		apf_cpu_attn_kernels(gemm_isa(be), a->C / a->NH, &a->fwd,
				     &a->bwd);
	a->slab_bytes = attn_slab_bytes(a->T, a->C / a->NH);
	char *p = aligned_alloc(64, a->slab_bytes * nthreads(be));
	if (!p)
		cpu_fail(be, "attention");
	return p;
}

// out (B,T,C), att (B,NH,T,T) from qkv (B,T,3C)
static void attention_forward(apf_backend *be, float *out, float *att,
			      const float *qkv, int B, int T, int C, int NH,
			      float scale)
{
	if (B <= 0 || T <= 0)
		return;
	struct attn_arg a = {.out = out, .att = att, .qkv = qkv, .B = B,
			     .T = T, .C = C, .NH = NH, .scale = scale};
	a.scratch = attn_scratch(be, &a);
	if (!a.scratch)
		return;
	parallel(be, attn_fwd_task, &a);
	free(a.scratch);
}

// dqkv (B,T,3C) from dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T)
static void attention_backward(apf_backend *be, float *dqkv, const float *dout,
			       const float *qkv, const float *att, int B, int T,
			       int C, int NH, float scale, int accum)
{
	if (B <= 0 || T <= 0)
		return;
	struct attn_arg a = {.dqkv = dqkv, .dout = dout, .qkv = qkv,
			     .att_in = att, .B = B, .T = T, .C = C, .NH = NH,
			     .scale = scale, .accum = accum};
	a.scratch = attn_scratch(be, &a);
	if (!a.scratch)
		return;
	parallel(be, attn_bwd_task, &a);
	free(a.scratch);
}

/* Gated linear units: elementwise per row, so any split of the rows gives
 * the same bits. One loop per activation (no branch inside). */

// out (H) = act(x) * g, x and g (H)
HOT static void glu_row_forward(int act, float *restrict out,
				const float *restrict x,
				const float *restrict g, int H)
{
	switch (act) {
	case APF_ACT_RELU:
		for (int i = 0; i < H; i++)
			out[i] = relu_f(x[i]) * g[i];
		break;
	case APF_ACT_GELU:
		for (int i = 0; i < H; i++)
			out[i] = gelu_f(x[i]) * g[i];
		break;
	case APF_ACT_SILU:
		for (int i = 0; i < H; i++)
			out[i] = silu_f(x[i]) * g[i];
		break;
	case APF_ACT_TANH:
		for (int i = 0; i < H; i++)
			out[i] = tanhf(x[i]) * g[i];
		break;
	case ACT_GELU2:
		for (int i = 0; i < H; i++)
			out[i] = gelu2_f(x[i]) * g[i];
		break;
	case ACT_SILU2:
		for (int i = 0; i < H; i++)
			out[i] = silu2_f(x[i]) * g[i];
		break;
	case ACT_TANH2:
		for (int i = 0; i < H; i++)
			out[i] = apf_mf_tanh_f(x[i]) * g[i];
		break;
	}
}

/* dx = dout g act'(x), dg = dout act(x), written or added; `pre` computes
 * the activation's transcendental once for both. */
#define GLU_LOOP(pre, dx_expr, dg_expr)                                       \
	do {                                                                  \
		if (accum)                                                    \
			for (int i = 0; i < H; i++) {                         \
				pre;                                          \
				dx[i] += (dx_expr);                           \
				dg[i] += (dg_expr);                           \
			}                                                     \
		else                                                          \
			for (int i = 0; i < H; i++) {                         \
				pre;                                          \
				dx[i] = (dx_expr);                            \
				dg[i] = (dg_expr);                            \
			}                                                     \
	} while (0)

HOT static void glu_row_backward(int act, float *restrict dx,
				 float *restrict dg,
				 const float *restrict dout,
				 const float *restrict x,
				 const float *restrict g, int H, int accum)
{
	switch (act) {
	case APF_ACT_RELU:
		GLU_LOOP((void)0, x[i] > 0.0f ? dout[i] * g[i] : 0.0f,
			 dout[i] * relu_f(x[i]));
		break;
	case APF_ACT_GELU:
		GLU_LOOP(float t = gelu_tanh(x[i]),
			 dout[i] * g[i] * gelu_grad_of(x[i], t),
			 dout[i] * gelu_of(x[i], t));
		break;
	case APF_ACT_SILU:
		GLU_LOOP(float e = expf(-x[i]),
			 dout[i] * g[i] * silu_grad_of(x[i], e),
			 dout[i] * silu_of(x[i], e));
		break;
	case APF_ACT_TANH:
		GLU_LOOP(float t = tanhf(x[i]),
			 dout[i] * g[i] * (1.0f - t * t),
			 dout[i] * t);
		break;
	case ACT_GELU2:
		GLU_LOOP(float t = gelu2_tanh(x[i]),
			 dout[i] * g[i] * gelu_grad_of(x[i], t),
			 dout[i] * gelu_of(x[i], t));
		break;
	case ACT_SILU2:
		GLU_LOOP(float e = apf_mf_exp_f(-x[i]),
			 dout[i] * g[i] * silu_grad_of(x[i], e),
			 dout[i] * silu_of(x[i], e));
		break;
	case ACT_TANH2:
		GLU_LOOP(float t = apf_mf_tanh_f(x[i]),
			 dout[i] * g[i] * (1.0f - t * t),
			 dout[i] * t);
		break;
	}
}

struct glu_arg {
	int act, N, H, accum;
	float *out;
	const float *inp, *dout;
};

static void glu_fwd_task(void *v, int t, int nt)
{
	struct glu_arg *a = v;
	size_t lo, hi, H = (size_t)a->H;
	split((size_t)a->N, t, nt, 1, &lo, &hi);
	for (size_t n = lo; n < hi; n++)
		glu_row_forward(a->act, a->out + n * H, a->inp + n * 2 * H,
				a->inp + n * 2 * H + H, a->H);
}

static void glu_bwd_task(void *v, int t, int nt)
{
	struct glu_arg *a = v;
	size_t lo, hi, H = (size_t)a->H;
	split((size_t)a->N, t, nt, 1, &lo, &hi);
	for (size_t n = lo; n < hi; n++)
		glu_row_backward(a->act, a->out + n * 2 * H,
				 a->out + n * 2 * H + H, a->dout + n * H,
				 a->inp + n * 2 * H, a->inp + n * 2 * H + H,
				 a->H, a->accum);
}

static void glu_run(apf_backend *be, task_fn fn, struct glu_arg *a)
{
	if ((size_t)a->N * a->H < PAR_MIN || nthreads(be) == 1)
		fn(a, 0, 1);
	else
		parallel(be, fn, a);
}

// out (N,H) from inp (N,2H)
static void glu_forward(apf_backend *be, int act, float *out, const float *inp,
			int N, int H)
{
	struct glu_arg a = {.act = act_code(be, act), .N = N, .H = H,
			    .out = out, .inp = inp};
	glu_run(be, glu_fwd_task, &a);
}

// dinp (N,2H) from dout (N,H), inp (N,2H)
static void glu_backward(apf_backend *be, int act, float *dinp,
			 const float *dout, const float *inp, int N, int H,
			 int accum)
{
	struct glu_arg a = {.act = act_code(be, act), .N = N, .H = H,
			    .accum = accum, .out = dinp, .inp = inp,
			    .dout = dout};
	glu_run(be, glu_bwd_task, &a);
}

/* ---- image-to-image layers: transposed convolution, concatenation,
 * instance norm, L1 loss ------------------------------------------------------ */

/* Transposed convolution, kernel 2 stride 2. Each input pixel feeds its own
 * 2x2 block of output pixels and no two blocks overlap, so the layer is one
 * GEMM per direction over the pixels, with the weight read as a matrix
 * (4 OC, C) of rows (o,i,j): forward Y (BHW, 4OC) = inp (BHW, C) W^T, then
 * Y scattered onto the blocks; backward gathers dout into the same G
 * (BHW, 4OC) layout, so dinp = G W and dweight = G^T inp, both straight in
 * their own layouts. Every GEMM runs over the whole batch, so its bits do
 * not depend on the thread count (gemm.h); the gather and scatter are
 * elementwise. */
struct upconv_arg {
	float *out, *g;        /* scatter's output, gather's G (BHW, 4OC) */
	const float *y, *dout; /* scatter's Y (BHW, 4OC), gather's input */
	const float *bias;     /* NULL: none */
	int B, H, W, OC;
};

// out (B,2H,2W,OC) = scatter of y (B*H*W, OC,2,2) + bias (OC), pixels [p0,p1)
HOT static void upconv_scatter(float *out, const float *y, const float *bias,
			       size_t p0, size_t p1, int H, int W, int OC)
{
	size_t HW = (size_t)H * W;
	for (size_t p = p0; p < p1; p++) {
		size_t b = p / HW, h = p / W % H, w = p % W;
		const float *src = y + p * 4 * OC;
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 2; j++) {
				float *dst = out + ((b * 2 * H + 2 * h + i) * 2 * W +
						    2 * w + j) * OC;
				const float *s = src + i * 2 + j;
				if (bias)
					for (int o = 0; o < OC; o++)
						dst[o] = s[4 * o] + bias[o];
				else
					for (int o = 0; o < OC; o++)
						dst[o] = s[4 * o];
			}
	}
}

// g (B*H*W, OC,2,2) = gather of dout (B,2H,2W,OC), pixels [p0,p1)
HOT static void upconv_gather(float *g, const float *dout, size_t p0, size_t p1,
			      int H, int W, int OC)
{
	size_t HW = (size_t)H * W;
	for (size_t p = p0; p < p1; p++) {
		size_t b = p / HW, h = p / W % H, w = p % W;
		float *dst = g + p * 4 * OC;
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 2; j++) {
				const float *s = dout + ((b * 2 * H + 2 * h + i) * 2 * W +
							 2 * w + j) * OC;
				float *d = dst + i * 2 + j;
				for (int o = 0; o < OC; o++)
					d[4 * o] = s[o];
			}
	}
}

static void upconv_scatter_task(void *v, int t, int nt)
{
	struct upconv_arg *a = v;
	size_t p0, p1;
	split((size_t)a->B * a->H * a->W, t, nt, 1, &p0, &p1);
	upconv_scatter(a->out, a->y, a->bias, p0, p1, a->H, a->W, a->OC);
}

static void upconv_gather_task(void *v, int t, int nt)
{
	struct upconv_arg *a = v;
	size_t p0, p1;
	split((size_t)a->B * a->H * a->W, t, nt, 1, &p0, &p1);
	upconv_gather(a->g, a->dout, p0, p1, a->H, a->W, a->OC);
}

/* Runs fn over the pixels: on the pool when the output is large enough to
 * pay for the hand-off. */
static void upconv_run(apf_backend *be, task_fn fn, struct upconv_arg *a)
{
	size_t n = (size_t)a->B * a->H * a->W * 4 * a->OC;
	if (n < PAR_MIN || nthreads(be) == 1)
		fn(a, 0, 1);
	else
		parallel(be, fn, a);
}

// out (B,2H,2W,OC) from inp (B,H,W,C), weight (OC,2,2,C), bias (OC) or NULL
static void upconv2x2_forward(apf_backend *be, float *out, const float *inp,
			      const float *weight, const float *bias, int B,
			      int H, int W, int C, int OC)
{
	size_t P = (size_t)B * H * W;
	if (P == 0 || OC == 0)
		return;
	float *y = malloc(P * 4 * OC * sizeof *y);
	if (!y) {
		cpu_fail(be, "upconv2x2");
		return;
	}
	cpu_gemm(be, 0, 1, (int)P, 4 * OC, C, 1.0f, inp, C, weight, C, 0.0f,
		 y, 4 * OC);
	struct upconv_arg a = {.out = out, .y = y, .bias = bias, .B = B, .H = H,
			       .W = W, .OC = OC};
	upconv_run(be, upconv_scatter_task, &a);
	free(y);
}

// dout (B,2H,2W,OC); dinp (B,H,W,C) or NULL, dweight (OC,2,2,C), dbias (OC) or NULL
static void upconv2x2_backward(apf_backend *be, float *dinp, float *dweight,
			       float *dbias, const float *dout,
			       const float *inp, const float *weight, int B,
			       int H, int W, int C, int OC, int accum)
{
	size_t P = (size_t)B * H * W;
	float *g = malloc((P ? P : 1) * 4 * OC * sizeof *g);
	if (!g) {
		cpu_fail(be, "upconv2x2");
		return;
	}
	struct upconv_arg a = {.g = g, .dout = dout, .B = B, .H = H, .W = W,
			       .OC = OC};
	upconv_run(be, upconv_gather_task, &a);
	/* the weight gradient's K is every pixel of the batch: not split, so
	 * thread-count free */
	grad_gemms(be, dinp, dweight, NULL, g, inp, weight, (int)P, C, 4 * OC,
		   accum);
	if (dbias)
		column_sums(be, dbias, dout, 4 * P, OC);
	free(g);
}

/* Concatenation along channels: row by row, rows split across the pool
 * when the tensor pays for the hand-off. Copies and, in accumulate mode,
 * one add per element: the same bits however the rows are split. */
struct concat_arg {
	float *out, *da, *db;
	const float *a, *b, *dout;
	int N, Ca, Cb, accum_a, accum_b;
};

// rows [n0,n1) of out (N,Ca+Cb) = a (N,Ca) then b (N,Cb)
HOT static void concat_rows(float *out, const float *a, const float *b,
			    size_t n0, size_t n1, int Ca, int Cb)
{
	size_t Co = (size_t)Ca + Cb;
	for (size_t n = n0; n < n1; n++) {
		float *o = out + n * Co;
		const float *x = a + n * Ca, *y = b + n * Cb;
		for (int c = 0; c < Ca; c++)
			o[c] = x[c];
		for (int c = 0; c < Cb; c++)
			o[Ca + c] = y[c];
	}
}

// rows [n0,n1) of dst (N,Cd) = or += columns [c0, c0+Cd) of dout (N,Co)
HOT static void concat_part_backward(float *dst, const float *dout, size_t n0,
				     size_t n1, int Cd, size_t Co, int c0,
				     int accum)
{
	for (size_t n = n0; n < n1; n++) {
		const float *s = dout + n * Co + c0;
		float *d = dst + n * Cd;
		if (accum)
			for (int c = 0; c < Cd; c++)
				d[c] += s[c];
		else
			for (int c = 0; c < Cd; c++)
				d[c] = s[c];
	}
}

static void concat_fwd_task(void *v, int t, int nt)
{
	struct concat_arg *a = v;
	size_t n0, n1;
	split((size_t)a->N, t, nt, 1, &n0, &n1);
	concat_rows(a->out, a->a, a->b, n0, n1, a->Ca, a->Cb);
}

static void concat_bwd_task(void *v, int t, int nt)
{
	struct concat_arg *a = v;
	size_t n0, n1, Co = (size_t)a->Ca + a->Cb;
	split((size_t)a->N, t, nt, 1, &n0, &n1);
	if (a->da)
		concat_part_backward(a->da, a->dout, n0, n1, a->Ca, Co, 0,
				     a->accum_a);
	if (a->db)
		concat_part_backward(a->db, a->dout, n0, n1, a->Cb, Co, a->Ca,
				     a->accum_b);
}

static void concat_run(apf_backend *be, task_fn fn, struct concat_arg *a)
{
	if ((size_t)a->N * ((size_t)a->Ca + a->Cb) < PAR_MIN ||
	    nthreads(be) == 1)
		fn(a, 0, 1);
	else
		parallel(be, fn, a);
}

// out (N,Ca+Cb) = rows of a (N,Ca) followed by rows of b (N,Cb)
static void concat_forward(apf_backend *be, float *out, const float *a,
			   const float *b, int N, int Ca, int Cb)
{
	struct concat_arg c = {.out = out, .a = a, .b = b, .N = N, .Ca = Ca,
			       .Cb = Cb};
	concat_run(be, concat_fwd_task, &c);
}

// dout (N,Ca+Cb); da (N,Ca), db (N,Cb), either NULL
static void concat_backward(apf_backend *be, float *da, float *db,
			    const float *dout, int N, int Ca, int Cb,
			    int accum_a, int accum_b)
{
	struct concat_arg c = {.da = da, .db = db, .dout = dout, .N = N,
			       .Ca = Ca, .Cb = Cb, .accum_a = accum_a,
			       .accum_b = accum_b};
	concat_run(be, concat_bwd_task, &c);
}

/* Instance norm. The work items are (image, block of IN_BLOCK channels):
 * each item owns its channels' statistics over all the image's pixels,
 * read in pixel order with double accumulators on the stack, so a
 * statistic never crosses a thread split and the bits do not depend on the
 * thread count. Backward keeps each item's sums per (b, c) and adds them
 * over b in order afterwards for dscale and dbias. */
#define IN_BLOCK 32

struct in_arg {
	float *out, *dinp, *mean, *rstd;
	const float *inp, *dout, *scale, *bias;
	const float *smean, *srstd; /* backward: the saved statistics */
	const float *y;             /* fused backward: the ReLU's output */
	double *sum_d, *sum_dx;     /* backward: (B,C) sums of d, d xhat */
	int B, HW, C, nblk, accum;
	int relu;                   /* fused with a ReLU after it */
	float eps;
};

/* The gradient reaching the norm's output: dout itself, or through the
 * fused ReLU as activation_backward has it, out > 0 ? dout : +0 (out > 0
 * where the norm's output is). The select is written as a mask of the
 * bits, which are the same (+0 is all zeros): written as a select, GCC
 * turned it into a conditional sum and left the loop scalar. */
static inline float in_grad(const float *d, const float *y, int c, int relu)
{
	float dv = d[c];
	if (!relu)
		return dv;
	uint32_t u;
	memcpy(&u, &dv, sizeof u);
	u &= -(uint32_t)(y[c] > 0.0f);
	memcpy(&dv, &u, sizeof dv);
	return dv;
}

/* Image b's statistics over nc channels from c0 (sums of x, then of (x -
 * mean)^2, in pixel order, in double) into m (float means) and r (rstds).
 * nc is a constant where inlined for a whole block (16 or 32), so that the
 * double accumulators stay in registers: in memory, each pixel's add
 * waited on the store of the last. */
static inline __attribute__((always_inline)) void
in_stats(const struct in_arg *a, size_t b, int c0, const int nc, float *m,
	 float *r)
{
	int C = a->C, HW = a->HW;
	const float *x0 = a->inp + b * HW * C + c0;
	double s[IN_BLOCK] = {0}, q[IN_BLOCK] = {0};
	for (int p = 0; p < HW; p++) {
		const float *x = x0 + (size_t)p * C;
		for (int c = 0; c < nc; c++)
			s[c] += x[c];
	}
	for (int c = 0; c < nc; c++)
		s[c] /= HW;
	for (int p = 0; p < HW; p++) {
		const float *x = x0 + (size_t)p * C;
		for (int c = 0; c < nc; c++) {
			double d = (double)x[c] - s[c];
			q[c] += d * d;
		}
	}
	for (int c = 0; c < nc; c++) {
		m[c] = (float)s[c];
		r[c] = (float)(1.0 / sqrt(q[c] / HW + a->eps));
	}
}

HOT static void in_fwd_task(void *v, int t, int nt)
{
	struct in_arg *a = v;
	size_t lo, hi;
	split((size_t)a->B * a->nblk, t, nt, 1, &lo, &hi);
	int C = a->C, HW = a->HW;
	for (size_t it = lo; it < hi; it++) {
		size_t b = it / a->nblk;
		int c0 = (int)(it % a->nblk) * IN_BLOCK;
		int nc = C - c0 < IN_BLOCK ? C - c0 : IN_BLOCK;
		float mf[IN_BLOCK], r[IN_BLOCK], sc[IN_BLOCK], bi[IN_BLOCK];
		if (nc == 16)
			in_stats(a, b, c0, 16, mf, r);
		else if (nc == 32)
			in_stats(a, b, c0, 32, mf, r);
		else
			in_stats(a, b, c0, nc, mf, r);
		for (int c = 0; c < nc; c++) {
			sc[c] = a->scale[c0 + c];
			bi[c] = a->bias[c0 + c];
			a->mean[b * C + c0 + c] = mf[c];
			a->rstd[b * C + c0 + c] = r[c];
		}
		/* the normalisation, its count not a constant: GCC vectorises
		 * this loop, and left the unrolled one scalar */
		const float *x0 = a->inp + b * HW * C + c0;
		float *y0 = a->out + b * HW * C + c0;
		for (int p = 0; p < HW; p++) {
			const float *x = x0 + (size_t)p * C;
			float *y = y0 + (size_t)p * C;
			if (a->relu)
				for (int c = 0; c < nc; c++)
					y[c] = relu_f((x[c] - mf[c]) * r[c] *
						      sc[c] + bi[c]);
			else
				for (int c = 0; c < nc; c++)
					y[c] = (x[c] - mf[c]) * r[c] * sc[c] +
					       bi[c];
		}
	}
}

/* in_bwd_task's body, relu a constant in each of its two calls so that
 * each loop vectorises without a test inside. */
static inline __attribute__((always_inline)) void
in_bwd_body(struct in_arg *a, int t, int nt, const int relu)
{
	size_t lo, hi;
	split((size_t)a->B * a->nblk, t, nt, 1, &lo, &hi);
	int C = a->C, HW = a->HW;
	for (size_t it = lo; it < hi; it++) {
		size_t b = it / a->nblk;
		int c0 = (int)(it % a->nblk) * IN_BLOCK;
		int nc = C - c0 < IN_BLOCK ? C - c0 : IN_BLOCK;
		size_t off = b * HW * C + c0;
		const float *x0 = a->inp + off, *d0 = a->dout + off;
		const float *o0 = relu ? a->y + off : d0;
		float m[IN_BLOCK], r[IN_BLOCK], sc[IN_BLOCK];
		for (int c = 0; c < nc; c++) {
			m[c] = a->smean[b * C + c0 + c];
			r[c] = a->srstd[b * C + c0 + c];
			sc[c] = a->scale[c0 + c];
		}
		double sd[IN_BLOCK] = {0}, sdx[IN_BLOCK] = {0};
		for (int p = 0; p < HW; p++) {
			const float *x = x0 + (size_t)p * C;
			const float *d = d0 + (size_t)p * C;
			const float *o = o0 + (size_t)p * C;
			for (int c = 0; c < nc; c++) {
				float xhat = (x[c] - m[c]) * r[c];
				float g = in_grad(d, o, c, relu);
				sd[c] += g;
				sdx[c] += (double)g * xhat;
			}
		}
		for (int c = 0; c < nc; c++) {
			a->sum_d[b * C + c0 + c] = sd[c];
			a->sum_dx[b * C + c0 + c] = sdx[c];
		}
		if (!a->dinp)
			continue;
		/* dinp = rstd (dy - mean(dy) - xhat mean(dy xhat)), dy = dout scale */
		float mdy[IN_BLOCK], mdyx[IN_BLOCK];
		for (int c = 0; c < nc; c++) {
			mdy[c] = (float)(sc[c] * sd[c] / HW);
			mdyx[c] = (float)(sc[c] * sdx[c] / HW);
		}
		float *di0 = a->dinp + off;
		for (int p = 0; p < HW; p++) {
			const float *x = x0 + (size_t)p * C;
			const float *d = d0 + (size_t)p * C;
			const float *o = o0 + (size_t)p * C;
			float *di = di0 + (size_t)p * C;
			for (int c = 0; c < nc; c++) {
				float xhat = (x[c] - m[c]) * r[c];
				float g = r[c] * (in_grad(d, o, c, relu) * sc[c] -
						  mdy[c] - xhat * mdyx[c]);
				di[c] = a->accum ? di[c] + g : g;
			}
		}
	}
}

HOT static void in_bwd_task(void *v, int t, int nt)
{
	struct in_arg *a = v;
	if (a->relu)
		in_bwd_body(a, t, nt, 1);
	else
		in_bwd_body(a, t, nt, 0);
}

/* Items on the pool when the tensor is large enough to pay for it. */
static void in_run(apf_backend *be, task_fn fn, struct in_arg *a)
{
	if ((size_t)a->B * a->HW * a->C < PAR_MIN || nthreads(be) == 1)
		fn(a, 0, 1);
	else
		parallel(be, fn, a);
}

static void in_forward(apf_backend *be, float *out, float *mean, float *rstd,
		       const float *inp, const float *scale, const float *bias,
		       int B, int HW, int C, float eps, int relu)
{
	struct in_arg a = {.out = out, .mean = mean, .rstd = rstd, .inp = inp,
			   .scale = scale, .bias = bias, .B = B, .HW = HW,
			   .C = C, .nblk = (C + IN_BLOCK - 1) / IN_BLOCK,
			   .relu = relu, .eps = eps};
	in_run(be, in_fwd_task, &a);
}

// out, inp (B,HW,C); mean, rstd (B,C); scale, bias (C)
static void instnorm_forward(apf_backend *be, float *out, float *mean,
			     float *rstd, const float *inp, const float *scale,
			     const float *bias, int B, int HW, int C, float eps)
{
	in_forward(be, out, mean, rstd, inp, scale, bias, B, HW, C, eps, 0);
}

static void instnorm_relu_forward(apf_backend *be, float *out, float *mean,
				  float *rstd, const float *inp,
				  const float *scale, const float *bias, int B,
				  int HW, int C, float eps)
{
	in_forward(be, out, mean, rstd, inp, scale, bias, B, HW, C, eps, 1);
}

/* y: the fused ReLU's output, or NULL for the norm alone. */
static void in_backward(apf_backend *be, float *dinp, float *dscale,
			float *dbias, const float *dout, const float *y,
			const float *inp, const float *scale,
			const float *mean, const float *rstd, int B, int HW,
			int C, int accum)
{
	size_t BC = (size_t)B * C;
	double *sums = malloc((BC ? 2 * BC : 1) * sizeof *sums);
	if (!sums) {
		cpu_fail(be, "instnorm");
		return;
	}
	struct in_arg a = {.dinp = dinp, .inp = inp, .dout = dout,
			   .scale = scale, .smean = mean, .srstd = rstd, .y = y,
			   .sum_d = sums, .sum_dx = sums + BC, .B = B, .HW = HW,
			   .C = C, .nblk = (C + IN_BLOCK - 1) / IN_BLOCK,
			   .accum = accum, .relu = y != NULL};
	in_run(be, in_bwd_task, &a);
	/* over the images in order */
	for (int c = 0; c < C; c++) {
		double s = 0.0, sx = 0.0;
		for (int b = 0; b < B; b++) {
			s += a.sum_d[(size_t)b * C + c];
			sx += a.sum_dx[(size_t)b * C + c];
		}
		dbias[c] = (float)s;
		dscale[c] = (float)sx;
	}
	free(sums);
}

// dout, inp (B,HW,C); dinp (B,HW,C) or NULL; dscale, dbias (C) written
static void instnorm_backward(apf_backend *be, float *dinp, float *dscale,
			      float *dbias, const float *dout,
			      const float *inp, const float *scale,
			      const float *mean, const float *rstd, int B,
			      int HW, int C, int accum)
{
	in_backward(be, dinp, dscale, dbias, dout, NULL, inp, scale, mean,
		    rstd, B, HW, C, accum);
}

static void instnorm_relu_backward(apf_backend *be, float *dinp,
				   float *dscale, float *dbias,
				   const float *dout, const float *out,
				   const float *inp, const float *scale,
				   const float *mean, const float *rstd, int B,
				   int HW, int C, int accum)
{
	in_backward(be, dinp, dscale, dbias, dout, out, inp, scale, mean,
		    rstd, B, HW, C, accum);
}

// losses (B) = mean over n of |pred - target|, pred and target (B,n)
static void l1_forward(apf_backend *be, float *losses, const float *pred,
		       const float *target, int B, int n)
{
	(void)be;
	for (int b = 0; b < B; b++) {
		const float *p = pred + (size_t)b * n, *q = target + (size_t)b * n;
		double s = 0.0;
		for (int i = 0; i < n; i++)
			s += fabs((double)p[i] - q[i]);
		losses[b] = (float)(s / n);
	}
}

// dpred (B,n) = dloss sign(pred - target) / n, written
static void l1_backward(apf_backend *be, float *dpred, const float *pred,
			const float *target, int B, int n, float dloss)
{
	(void)be;
	float g = dloss / (float)n;
	size_t N = (size_t)B * n;
	for (size_t i = 0; i < N; i++)
		dpred[i] = pred[i] > target[i] ? g
			   : pred[i] < target[i] ? -g
						 : 0.0f;
}

/* ---- the table ------------------------------------------------------------ */

static void cpu_destroy(apf_backend *be);

static const apf_backend cpu_template = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_memcpy,
	.download = cpu_memcpy,
	.sync = cpu_sync,
	.destroy = cpu_destroy,
	.gemm = cpu_gemm,
	.linear_forward = linear_forward,
	.linear_backward = linear_backward,
	.conv2d_forward = conv2d_forward,
	.conv2d_backward = conv2d_backward,
	.conv2d_work = conv2d_work,
	.batchnorm_forward = batchnorm_forward,
	.batchnorm_backward = batchnorm_backward,
	.layernorm_forward = layernorm_forward,
	.layernorm_backward = layernorm_backward,
	.activation_forward = activation_forward,
	.activation_backward = activation_backward,
	.maxpool2d_forward = maxpool2d_forward,
	.maxpool2d_backward = maxpool2d_backward,
	.avgpool2d_forward = avgpool2d_forward,
	.avgpool2d_backward = avgpool2d_backward,
	.global_avgpool_forward = global_avgpool_forward,
	.global_avgpool_backward = global_avgpool_backward,
	.dropout_forward = dropout_forward,
	.dropout_backward = dropout_backward,
	.add_forward = add_forward,
	.accumulate = accumulate,
	.softmax_xent_forward = softmax_xent_forward,
	.softmax_xent_backward = softmax_xent_backward,
	.count_correct = count_correct,
	.sigmoid_xent_forward = sigmoid_xent_forward,
	.sigmoid_xent_backward = sigmoid_xent_backward,
	.embedding_forward = embedding_forward,
	.embedding_backward = embedding_backward,
	.interaction_forward = interaction_forward,
	.interaction_backward = interaction_backward,
	/* sequence layers */
	.attention_forward = attention_forward,
	.attention_backward = attention_backward,
	.glu_forward = glu_forward,
	.glu_backward = glu_backward,
	/* image-to-image layers */
	.upconv2x2_forward = upconv2x2_forward,
	.upconv2x2_backward = upconv2x2_backward,
	.concat_forward = concat_forward,
	.concat_backward = concat_backward,
	.instnorm_forward = instnorm_forward,
	.instnorm_backward = instnorm_backward,
	.l1_forward = l1_forward,
	.l1_backward = l1_backward,
	.fill = v_fill,
	.copy = v_copy,
	.scale = v_scale,
	.axpy = v_axpy,
	.axpby = v_axpby,
	.add_scalar = v_add_scalar,
	.mul = v_mul,
	.div = v_div,
	.sqrt = v_sqrt,
	.max = v_max,
	.clamp = v_clamp,
	.moments = v_moments,
	.adam_direction = v_adam_direction,
	.adamw = v_adamw,
	.dot = v_dot,
	.sum = v_sum,
	.norm2 = v_norm2,
	.max_abs = v_max_abs,
	.sub = v_sub,
	.min = v_min,
	.sign = v_sign,
	.abs = v_abs,
	.exp = v_exp,
	.log = v_log,
	.reciprocal = v_reciprocal,
	.rsqrt = v_rsqrt,
	.pow = v_pow,
	.agree = v_agree,
	.select = v_select,
	.row_sumsq = v_row_sumsq,
	.col_sumsq = v_col_sumsq,
	.copy_mat = v_copy_mat,
};

static void pool_stop(struct pool *p, int started)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i <= started; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->barrier);
}

static int cpu_new(apf_backend **out, int threads, int fast)
{
	*out = NULL;
	if (threads > MAX_THREADS)
		return apf_error(APF_EINPUT, "cpu backend",
				 "%d threads (at most %d)", threads,
				 MAX_THREADS);
	int isa;
	int rc = apf_cpu_isa(&isa);
	if (rc)
		return rc;
	apf_backend *be = malloc(sizeof *be);
	struct pool *p = apf_calloc(1, sizeof *p);
	if (!be || !p) {
		free(be);
		free(p);
		return apf_error(APF_ENOMEM, "cpu backend", "out of memory");
	}
	*be = cpu_template;
	be->threads = threads > 0 ? threads : 1;
	be->impl = p;
	p->n = be->threads;
	p->fast = fast;
	p->isa = isa;
	p->numerics = apf_numerics_get();
	/* The thread that makes a backend is the one that calls it: what it
	 * computes between the backend's regions (a submission's own loops)
	 * takes the backend's mode too, and the workers started below inherit
	 * it (a new thread starts with its creator's floating-point
	 * environment). */
	fp_mode(p->numerics);
	if (fast) {
		be->batchnorm_relu_forward = batchnorm_relu_forward;
		be->batchnorm_relu_backward = batchnorm_relu_backward;
		be->instnorm_relu_forward = instnorm_relu_forward;
		be->instnorm_relu_backward = instnorm_relu_backward;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	pthread_cond_init(&p->barrier, NULL);
	for (int i = 1; i < p->n; i++) {
		p->args[i] = (struct worker_arg){p, i};
		int e = pthread_create(&p->th[i], NULL, worker, &p->args[i]);
		if (e) {
			pool_stop(p, i - 1);
			free(p);
			free(be);
			return apf_error_errno(APF_EIO, e, "cpu backend",
					       "start compute thread");
		}
	}
	*out = be;
	return 0;
}

/* Set once, before the backends are made (a trial's, an evaluator's and a
 * replay's main set it from --numerics); each backend keeps its own copy.
 * It sets the calling thread's subnormal mode too. */
static int numerics = APF_NUMERICS_LATEST;

int apf_numerics_set(int version)
{
	if (version < APF_NUMERICS_OLDEST || version > APF_NUMERICS_LATEST)
		return apf_error(APF_EINPUT, "numerics",
				 "%d: this apf computes numerics %d to %d",
				 version, APF_NUMERICS_OLDEST,
				 APF_NUMERICS_LATEST);
	numerics = version;
	fp_mode(version);
	return 0;
}

int apf_numerics_get(void)
{
	return numerics;
}

int apf_backend_cpu_new(apf_backend **out, int threads)
{
	return cpu_new(out, threads, 1);
}

int apf_backend_cpu_plain_new(apf_backend **out, int threads)
{
	return cpu_new(out, threads, 0);
}

void apf_backend_free(apf_backend *be)
{
	if (be)
		be->destroy(be);
}

static void cpu_destroy(apf_backend *be)
{
	struct pool *p = be->impl;
	pool_stop(p, p->n - 1);
	for (int t = 0; t < MAX_THREADS; t++)
		apf_gemm_buf_free(&p->gemm_buf[t]);
	free(p);
	free(be);
}
