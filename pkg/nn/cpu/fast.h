/*
 * fast.h: the CPU backend's fast kernels (fast.c), internal to nn/cpu.
 *
 * cpu.c keeps the plain kernels, the readable reference; the default
 * backend routes the shapes these kernels take to them. Each kernel here is
 * one thread's share of a layer, `(job, t, nt)`: cpu.c's pool runs it on
 * every thread, so this file knows nothing of threads. Shares depend only
 * on the sizes and nt, and every sum runs in a fixed order, so a fixed
 * thread count gives bit-identical results (nn.h); the bits differ from the
 * plain kernels' (FMA rounds once, sums group differently), within a tight
 * tolerance the tests check.
 *
 * The contract across CPUs: a job runs on the instruction-set path in its
 * `isa` (isa.h: scalar, AVX2/FMA or AVX-512), and every path computes each
 * output element with the same sequence of float operations (fast_ops.h),
 * so for a fixed thread count the results are the same bits on every path,
 * as the GEMM's are (gemm.h). The path decides speed only.
 */
#ifndef APF_NN_CPU_FAST_H
#define APF_NN_CPU_FAST_H

#include <stddef.h>

/* ---- direct convolution (NHWC, no im2col) ----------------------------------
 *
 * Forward and input gradient run one register-blocked micro-kernel over a
 * zero-padded copy of a few images at a time (the padding makes every tap of
 * every pixel a fixed offset from the pixel, so no bounds checks): 6 output
 * pixels x 16 output channels (AVX2; 6 x 32 on AVX-512). The input gradient
 * is the same kernel over the padded output gradient, one pass per residue
 * class of the stride. The weight gradient reduces over pixels with 4
 * output channels x 3 (tap, 8 or 16 channel) columns into one partial per
 * thread that the caller adds in thread order.
 *
 * An input whose channels 8 does not divide (a stem's one) has its weight
 * gradient computed as cpu.c's im2col + GEMM route computes it, bit for
 * bit, since that route is what every run made before this kernel
 * recorded: the route's chunks of gemm_chunk images, dealt to the threads
 * in turn (chunk t, t + nt, ...), each element summed over a chunk's pixels
 * in order from zero with FMA (the GEMM's k order, gemm.h), a chunk's sums
 * added to the thread's partial as the GEMM's epilogue adds them (acc +
 * partial), and the caller adding the partials of the threads that had a
 * chunk, in thread order. Only the im2col copy (nine copies of the input)
 * and the GEMM's packing go; the lanes run over output channels (8 or 16)
 * and the columns are (tap, channel) pairs, four at a time.
 */
struct apf_conv_job {
	int isa; /* isa.h's path the kernels run on */
	int B, H, W, C, OC, K, S, P, OH, OW;
	const float *inp;    /* (B,H,W,C) */
	const float *weight; /* (OC,K,K,C) */
	const float *bias;   /* (OC) or NULL, forward only */
	const float *dout;   /* (B,OH,OW,OC), backward only */
	float *out;          /* forward: (B,OH,OW,OC) */
	float *dinp;         /* input gradient (B,H,W,C), or NULL */
	int accum;           /* dinp: 0 write, 1 add */
	int gemm_chunk;      /* C % 8 != 0, weight gradient: images per chunk
			      * of the im2col + GEMM route (cpu.c) */
	float *wt;           /* transformed weights (= work): prepare* */
	float *work;         /* apf_cpu_conv_fast_work floats */
};

/* Which parts the fast kernels take for this shape. */
int apf_cpu_conv_fast_forward_ok(int C, int OC, int K);
int apf_cpu_conv_fast_dinp_ok(int C, int OC, int K);
int apf_cpu_conv_fast_dweight_ok(int C, int OC, int K);
/* Floats of work for B images on nt threads. */
size_t apf_cpu_conv_fast_work(int B, int H, int W, int C, int OC, int K,
			      int S, int P, int nt);
/* 1 when the Winograd F(2x2, 3x3) kernels take the shape (3x3, stride 1,
 * padding 1, channels in multiples of 16). */
int apf_cpu_conv_wino_ok(int C, int OC, int K, int S, int P);
/* Before the forward and the input gradient: thread t's share of the
 * transformed weights in job->wt (job->work's start), split over the
 * output channels (each entry computed alone, so the same bits at any
 * nt). Every share is written before any thread's forward or input
 * gradient reads job->wt; the weight gradient does not read it. */
void apf_cpu_conv_fast_prepare(struct apf_conv_job *j, int t, int nt);
/* 1 when the input gradient reads the transform (Winograd's; the direct
 * one reads the weights themselves), 0 when there is none to write: the
 * same answer on every thread, so each knows whether to wait for all. */
int apf_cpu_conv_fast_prepare_backward(struct apf_conv_job *j, int t,
				       int nt);
void apf_cpu_conv_fast_forward(struct apf_conv_job *j, int t, int nt);
void apf_cpu_conv_fast_dinp(struct apf_conv_job *j, int t, int nt);
/* Thread t's weight gradient (OC,K,K,C) over its images, written to
 * apf_cpu_conv_fast_dweight_part(j, t, nt); for C % 8 != 0 over its chunks
 * (see above), the partial of a thread without one left unwritten. */
void apf_cpu_conv_fast_dweight(struct apf_conv_job *j, int t, int nt);
float *apf_cpu_conv_fast_dweight_part(const struct apf_conv_job *j, int t,
				      int nt);

/* ---- batch norm fused with ReLU ---------------------------------------------
 *
 * Forward: statistics in one pass (sums of x - shift and of its square),
 * then out = max(0, (x - mean) a + b [+ res]) in one more; backward: the sums of g
 * and g (x - mean), g = dout where out > 0, then in one pass the input
 * gradient k0 (g - k1 - (x - mean) k2) and the residual's gradient g. ReLU
 * only: its derivative is read from the output, so nothing else is stored.
 * With relu 0 the same passes are a plain batch norm (g = dout).
 * Rows (N of C channels) split across threads; part holds each thread's
 * 2 C double sums, which the caller adds in thread order.
 */
struct apf_bn_job {
	int isa; /* isa.h's path the kernels run on */
	int N, C;
	const float *inp, *res, *dout, *out;
	const float *shift;              /* stats */
	const float *a, *b;              /* apply (with mean) */
	const float *mean, *k0, *k1, *k2; /* apply, dsums, dx */
	float *y, *dinp, *dres;
	int relu;                        /* 0: plain batch norm, no mask */
	int accum_inp, accum_res;
	double *part;
};
void apf_cpu_bn_fast_stats(struct apf_bn_job *j, int t, int nt);
void apf_cpu_bn_fast_apply(struct apf_bn_job *j, int t, int nt);
void apf_cpu_bn_fast_dsums(struct apf_bn_job *j, int t, int nt);
void apf_cpu_bn_fast_dx(struct apf_bn_job *j, int t, int nt);

/* ---- the DLRM's dot interaction ---------------------------------------------
 *
 * out (B, D + F(F-1)/2) = each example's dense vector, then the dots of its
 * F = E + 1 vectors (dense (B,D), then emb (B,E,D)) pairwise, (i, j) for j
 * < i in order, each summed in double in k order; the backward sums each
 * vector's gradient in double in pair order, from the dense part's own
 * output gradient. inter_body.h has the kernels, over lanes of examples. */
struct apf_inter_job {
	const float *dense, *emb, *dout;
	float *out, *ddense, *demb;
	int E, D, accum_dense, accum_emb;
};

/* Vector k of example b: the dense vector, then the embeddings. */
static inline const float *apf_inter_vec(const struct apf_inter_job *a,
					 size_t b, int k)
{
	return k == 0 ? a->dense + b * (size_t)a->D
		      : a->emb + (b * (size_t)a->E + (size_t)(k - 1)) *
				       (size_t)a->D;
}

/* Examples [b0, b1) (whole lanes but the last), with a thread's slab. */
typedef void (*apf_inter_fn)(const struct apf_inter_job *j, size_t b0,
			     size_t b1, void *slab);
/* Path isa's own kernels and their lane width (fused multiply-adds, 4
 * lanes on AVX2, 8 on AVX-512); 0 where it has none (the caller's generic
 * kernels then run, with the same bits). */
int apf_cpu_inter_kernels(int isa, apf_inter_fn *fwd, apf_inter_fn *bwd);

/* ---- causal self-attention, one (batch, head) pair -------------------------
 *
 * cpu.c's attention_head_forward and attention_head_backward hold the
 * contract; attn_body.h has the vector paths' kernels, with the same bits.
 * The forward: out (T, hs) at stride C and att (T, T) from qkv (T, 3C), all
 * at the head; the backward: dqkv from dout, qkv and att (written, or
 * added to when accum). slab: the thread's scratch (cpu.c's
 * attn_slab_bytes). Keys are padded to apf_attn_padded(T). */
typedef void (*apf_attn_fwd_fn)(float *out, float *att, const float *qkv,
				int T, int C, int hs, float scale, char *slab);
typedef void (*apf_attn_bwd_fn)(float *dqkv, const float *dout,
				const float *qkv, const float *att, int T,
				int C, int hs, float scale, int accum,
				char *slab);

static inline int apf_attn_padded(int T)
{
	return (T + 31) / 32 * 32;
}

/* Path isa's own kernels for heads of hs, and 1; 0 where it has none or hs
 * is not a multiple of its float vector (the caller's generic kernels then
 * run, with the same bits). */
int apf_cpu_attn_kernels(int isa, int hs, apf_attn_fwd_fn *fwd,
			 apf_attn_bwd_fn *bwd);

#endif
