/*
 * nn: float32 tensors in flat buffers, the backend interface every compute
 * device implements, and networks built from layers on top of it.
 *
 * Backends. struct apf_backend is a table of functions over flat float
 * buffers that the backend owns (host memory on CPU, device memory on CUDA).
 * Models call only these functions, so adding a backend never changes a
 * model. The CPU backend (nn/cpu) is the readable reference, llm.c style:
 * one `<layer>_forward` / `<layer>_backward` pair per layer, shapes in the
 * parameter names; faster backends are tested against it.
 *
 * Layout conventions: activations are row-major with the batch first; images
 * are NHWC (B,H,W,C), so a convolution is one GEMM over im2col rows and a
 * norm over channels is contiguous. Linear weights are (OC,C), convolution
 * weights (OC,KH,KW,C). Backward functions write parameter gradients (=) and
 * write or accumulate input gradients as `accum` says (0: =, 1: +=), so a
 * tensor read by several layers (a residual) sums its gradients without an
 * extra pass.
 *
 * Determinism. For a fixed thread count every function gives bit-identical
 * results run to run: reductions run in a fixed order (per channel or per
 * row, accumulated in double where they feed a statistic), GEMMs are apf's
 * own (cpu/gemm.h: every output summed in k order with fma, the same bits on
 * every instruction-set path and thread count), and randomness (dropout) comes from
 * counter-based Philox words addressed by element index (rng.h), never from
 * a thread's position.
 *
 * Threads. A backend runs its own compute threads (be->threads, the
 * caller's thread included) and is driven by one caller thread at a time.
 *
 * Errors. Compute functions return void: a backend reports a failure (a
 * device's failed launch, a layer's scratch memory the CPU could not get) at
 * the next sync() (sticky, first error wins), which callers check where
 * results leave the device. Allocation returns a status at once.
 */
#ifndef APF_NN_H
#define APF_NN_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "rng/rng.h"

/* Parameter kinds (docs/submitting.md, the ABI): what an optimizer may treat apart,
 * e.g. no weight decay on biases and norm parameters. */
enum apf_param_kind {
	APF_PARAM_WEIGHT = 1,
	APF_PARAM_BIAS,
	APF_PARAM_CONV_WEIGHT,
	APF_PARAM_NORM_SCALE,
	APF_PARAM_NORM_BIAS,
	APF_PARAM_EMBEDDING,
	APF_PARAM_ATTN_Q,
	APF_PARAM_ATTN_K,
	APF_PARAM_ATTN_V,
	APF_PARAM_ATTN_OUT,
};
const char *apf_param_kind_name(int kind);

enum apf_activation {
	APF_ACT_RELU = 1,
	APF_ACT_GELU,  /* tanh approximation, as GPT-2 and PyTorch's 'tanh' */
	APF_ACT_SILU,
	APF_ACT_TANH,
};
/* "relu", "gelu", "silu", "tanh" -> enum; 0 when unknown. */
int apf_activation_parse(const char *name);
const char *apf_activation_name(int act);

typedef struct apf_backend apf_backend;

/* The scalars and weight-decay segments of a fused AdamW pass (adamw). */
struct apf_adamw_pass {
	float b1, b2;     /* the moments' decays */
	float c1, c2, eps; /* the direction's bias corrections and epsilon */
	float step;       /* -lr: p += step d */
	int nseg;
	const size_t *end;  /* segment s is [end[s-1], end[s]) */
	const float *decay; /* its weight-decay factor, 1 for none */
};

struct apf_backend {
	const char *name; /* "cpu", "cuda" */
	int threads;      /* compute threads, pinned at creation */
	/* 1: what alloc returns is the device's memory, which the host reaches
	 * through upload and download only (cuda); 0: host memory (cpu). */
	int device_memory;

	/* ---- memory ---- */
	int (*alloc)(apf_backend *be, size_t nbytes, void **out); /* zeroed */
	void (*free)(apf_backend *be, void *p);
	void (*upload)(apf_backend *be, void *dst, const void *src, size_t n);
	void (*download)(apf_backend *be, void *dst, const void *src, size_t n);
	/* First error since the last sync, after waiting for queued work. */
	int (*sync)(apf_backend *be);
	/* Frees the backend itself; apf_backend_free calls it. */
	void (*destroy)(apf_backend *be);

	/* ---- GEMM, row-major: C = alpha op(A) op(B) + beta C ---- */
	void (*gemm)(apf_backend *be, int trans_a, int trans_b, int M, int N,
		     int K, float alpha, const float *A, int lda, const float *B,
		     int ldb, float beta, float *C, int ldc);

	/* ---- layers ---- */
	/* out (B,OC) = inp (B,C) weight(OC,C)^T + bias (OC); bias may be NULL */
	void (*linear_forward)(apf_backend *be, float *out, const float *inp,
			       const float *weight, const float *bias, int B,
			       int C, int OC);
	/* dinp may be NULL (not needed); dbias NULL when there is no bias */
	void (*linear_backward)(apf_backend *be, float *dinp, float *dweight,
				float *dbias, const float *dout,
				const float *inp, const float *weight, int B,
				int C, int OC, int accum);
	/* out (B,OH,OW,OC) from inp (B,H,W,C), weight (OC,K,K,C), square
	 * kernel K, stride S, zero padding P; work holds conv_work floats. */
	void (*conv2d_forward)(apf_backend *be, float *out, const float *inp,
			       const float *weight, const float *bias, int B,
			       int H, int W, int C, int OC, int K, int S, int P,
			       float *work);
	void (*conv2d_backward)(apf_backend *be, float *dinp, float *dweight,
				float *dbias, const float *dout,
				const float *inp, const float *weight, int B,
				int H, int W, int C, int OC, int K, int S,
				int P, float *work, int accum);
	/* Floats of work the conv needs for these shapes. */
	size_t (*conv2d_work)(apf_backend *be, int B, int H, int W, int C,
			      int OC, int K, int S, int P);
	/* Batch norm over N rows of C channels. Training: normalise with the
	 * batch statistics, save mean and 1/std (C each) for backward, and
	 * update running mean / unbiased variance with momentum. Eval: use the
	 * running statistics and touch nothing else. */
	void (*batchnorm_forward)(apf_backend *be, float *out, float *save_mean,
				  float *save_rstd, const float *inp,
				  const float *scale, const float *bias,
				  float *run_mean, float *run_var, int N, int C,
				  float momentum, float eps, int train);
	void (*batchnorm_backward)(apf_backend *be, float *dinp, float *dscale,
				   float *dbias, const float *dout,
				   const float *inp, const float *scale,
				   const float *save_mean,
				   const float *save_rstd, int N, int C,
				   int accum);
	/* Batch norm, a residual added, and ReLU in one layer: out =
	 * relu(bn(inp) + res) (res NULL: none), train and eval as
	 * batchnorm_forward, whose statistics it saves. Optional: NULL where
	 * a backend has no fused kernel; nets then run the three layers. */
	void (*batchnorm_relu_forward)(apf_backend *be, float *out,
				       float *save_mean, float *save_rstd,
				       const float *inp, const float *res,
				       const float *scale, const float *bias,
				       float *run_mean, float *run_var, int N,
				       int C, float momentum, float eps,
				       int train);
	/* Its backward, from its output `out` and dout: dinp as
	 * batchnorm_backward's, dres the residual's gradient; either may be
	 * NULL; each written or added as accum / accum_res say. */
	void (*batchnorm_relu_backward)(apf_backend *be, float *dinp,
					float *dres, float *dscale,
					float *dbias, const float *dout,
					const float *out, const float *inp,
					const float *scale,
					const float *save_mean,
					const float *save_rstd, int N, int C,
					int accum, int accum_res);
	/* Layer norm of each of N rows of C features; mean, rstd (N). */
	void (*layernorm_forward)(apf_backend *be, float *out, float *mean,
				  float *rstd, const float *inp,
				  const float *scale, const float *bias, int N,
				  int C, float eps);
	void (*layernorm_backward)(apf_backend *be, float *dinp, float *dscale,
				   float *dbias, const float *dout,
				   const float *inp, const float *scale,
				   const float *mean, const float *rstd, int N,
				   int C, int accum);
	void (*activation_forward)(apf_backend *be, int act, float *out,
				   const float *inp, size_t n);
	void (*activation_backward)(apf_backend *be, int act, float *dinp,
				    const float *dout, const float *inp,
				    const float *out, size_t n, int accum);
	/* Max pooling, window K, stride S, padding P (padding never wins);
	 * argmax (B,OH,OW,C) int32 indices into inp, saved for backward. */
	void (*maxpool2d_forward)(apf_backend *be, float *out, int32_t *argmax,
				  const float *inp, int B, int H, int W, int C,
				  int K, int S, int P);
	void (*maxpool2d_backward)(apf_backend *be, float *dinp,
				   const float *dout, const int32_t *argmax,
				   int B, int H, int W, int C, int K, int S,
				   int P, int accum);
	/* Average pooling; padding counts as zeros (count_include_pad). */
	void (*avgpool2d_forward)(apf_backend *be, float *out, const float *inp,
				  int B, int H, int W, int C, int K, int S,
				  int P);
	void (*avgpool2d_backward)(apf_backend *be, float *dinp,
				   const float *dout, int B, int H, int W,
				   int C, int K, int S, int P, int accum);
	/* out (B,C) = mean over HW of inp (B,HW,C) */
	void (*global_avgpool_forward)(apf_backend *be, float *out,
				       const float *inp, int B, int HW, int C);
	void (*global_avgpool_backward)(apf_backend *be, float *dinp,
					const float *dout, int B, int HW, int C,
					int accum);
	/* Inverted dropout: element i is kept when its Philox word
	 * apf_rng_word(key, step, i) maps to a uniform >= p; kept values are
	 * scaled by 1/(1-p). Backward regenerates the mask from the same
	 * words, so no mask is stored. */
	void (*dropout_forward)(apf_backend *be, float *out, const float *inp,
				size_t n, float p, const uint32_t key[2],
				uint64_t step);
	void (*dropout_backward)(apf_backend *be, float *dinp,
				 const float *dout, size_t n, float p,
				 const uint32_t key[2], uint64_t step,
				 int accum);
	/* out = a + b (a residual join); its backward is `accumulate`. */
	void (*add_forward)(apf_backend *be, float *out, const float *a,
			    const float *b, size_t n);
	/* dst = src (accum 0) or dst += src (accum 1). */
	void (*accumulate)(apf_backend *be, float *dst, const float *src,
			   size_t n, int accum);
	/* Softmax cross-entropy of logits (B,V) against labels (B): losses
	 * (B) per example with label smoothing s (target (1-s) on the label,
	 * s/V spread over all classes); probs (B,V) saved for backward. */
	void (*softmax_xent_forward)(apf_backend *be, float *losses,
				     float *probs, const float *logits,
				     const int32_t *labels, int B, int V,
				     float smoothing);
	/* dlogits = dloss * (probs - target), dloss the weight of each
	 * example's loss (1/B for a mean). */
	void (*softmax_xent_backward)(apf_backend *be, float *dlogits,
				      const float *probs, const int32_t *labels,
				      int B, int V, float smoothing,
				      float dloss);
	/* How many rows of logits (B,V) have their first maximum at the label. */
	long (*count_correct)(apf_backend *be, const float *logits,
			      const int32_t *labels, int B, int V);
	/* Sigmoid cross-entropy of logits (B) against 0/1 labels (B), in the
	 * stable form max(z,0) - z t + log1p(exp(-|z|)) with the target
	 * t = (1-s) label + s/2 (label smoothing s): losses (B); probs (B)
	 * (sigmoid z) saved for backward. */
	void (*sigmoid_xent_forward)(apf_backend *be, float *losses,
				     float *probs, const float *logits,
				     const int32_t *labels, int B,
				     float smoothing);
	/* dlogits (B) = dloss * (probs - t) */
	void (*sigmoid_xent_backward)(apf_backend *be, float *dlogits,
				      const float *probs,
				      const int32_t *labels, int B,
				      float smoothing, float dloss);
	/* Embedding lookup: out (B,F,D), row (b,f) = table row
	 * offset[f] + idx[b*ldi + f] of table (V,D); offset (F) int32 in
	 * backend memory, NULL for all 0 (one table shared by the F
	 * positions, as a token embedding). Indices are the caller's to
	 * check (in [0, rows of field f)). */
	void (*embedding_forward)(apf_backend *be, float *out,
				  const int32_t *idx, int ldi,
				  const int32_t *offset, const float *table,
				  int B, int F, int D);
	/* dtable (V,D) written: zero, then each dout row (b,f) added to its
	 * table row in (b, f) order, so rows hit several times sum in a
	 * fixed order. */
	void (*embedding_backward)(apf_backend *be, float *dtable,
				   const float *dout, const int32_t *idx,
				   int ldi, const int32_t *offset, int B,
				   int F, int V, int D);
	/* DLRM's dot interaction of F = E + 1 vectors of D: dense (B,D) and
	 * emb (B,E,D) give out (B, D + F(F-1)/2) = the dense vector, then
	 * <v_i, v_j> for i = 1..F-1, j = 0..i-1 (v_0 the dense vector,
	 * v_k = emb[., k-1]), row by row of the lower triangle. Dots are
	 * accumulated in double in d order. */
	void (*interaction_forward)(apf_backend *be, float *out,
				    const float *dense, const float *emb,
				    int B, int E, int D);
	/* ddense (B,D), demb (B,E,D) written or added as accum_dense /
	 * accum_emb say; either may be NULL. */
	void (*interaction_backward)(apf_backend *be, float *ddense,
				     float *demb, const float *dout,
				     const float *dense, const float *emb,
				     int B, int E, int D, int accum_dense,
				     int accum_emb);

	/* ---- sequence layers (decoder Transformers: text_lm) ---- */
	/* Causal multi-head self-attention over T positions: qkv (B,T,3C) holds
	 * q, k, v (each C = NH heads of C/NH, head h at columns [h hs, (h+1) hs));
	 * out (B,T,C) = per head softmax(scale q k^T, causal: key t2 <= query t)
	 * v, heads concatenated. att (B,NH,T,T) saves the probabilities for
	 * backward (entries above the diagonal written 0); it is the only
	 * (B,NH,T,T) buffer: backward works row by row with O(T) scratch. Scores
	 * and the softmax sum accumulate in double in key order. */
	void (*attention_forward)(apf_backend *be, float *out, float *att,
				  const float *qkv, int B, int T, int C, int NH,
				  float scale);
	/* dqkv (B,T,3C) written (accum 0) or added (accum 1) from dout (B,T,C),
	 * the forward's qkv and att. */
	void (*attention_backward)(apf_backend *be, float *dqkv, const float *dout,
				   const float *qkv, const float *att, int B, int T,
				   int C, int NH, float scale, int accum);
	/* Gated linear unit: inp (N,2H) -> out (N,H), out = act(a) * g with
	 * a = inp[n, 0..H), g = inp[n, H..2H) (act GELU: GEGLU, SILU: SwiGLU). */
	void (*glu_forward)(apf_backend *be, int act, float *out, const float *inp,
			    int N, int H);
	/* dinp (N,2H) written or added as accum says. */
	void (*glu_backward)(apf_backend *be, int act, float *dinp, const float *dout,
			     const float *inp, int N, int H, int accum);

	/* ---- image-to-image layers (U-Nets: fmnist_unet) ---- */
	/* Transposed convolution, kernel 2 stride 2 (a U-Net's up-sampling):
	 * inp (B,H,W,C), weight (OC,2,2,C), bias (OC) or NULL -> out (B,2H,2W,OC),
	 * out[b,2h+i,2w+j,o] = bias[o] + sum_c inp[b,h,w,c] weight[o,i,j,c]. */
	void (*upconv2x2_forward)(apf_backend *be, float *out, const float *inp,
				  const float *weight, const float *bias, int B,
				  int H, int W, int C, int OC);
	/* dinp (B,H,W,C) written or added (accum; may be NULL), dweight and
	 * dbias (NULL: none) written. */
	void (*upconv2x2_backward)(apf_backend *be, float *dinp, float *dweight,
				   float *dbias, const float *dout, const float *inp,
				   const float *weight, int B, int H, int W, int C,
				   int OC, int accum);
	/* Channel concatenation of N rows: a (N,Ca), b (N,Cb) -> out (N,Ca+Cb). */
	void (*concat_forward)(apf_backend *be, float *out, const float *a,
			       const float *b, int N, int Ca, int Cb);
	/* da, db (either NULL) written or added as accum_a / accum_b say. */
	void (*concat_backward)(apf_backend *be, float *da, float *db,
				const float *dout, int N, int Ca, int Cb, int accum_a,
				int accum_b);
	/* Instance norm: each (image b, channel c) of inp (B,HW,C) normalised
	 * over its HW pixels (biased variance, eps), then scale[c], bias[c];
	 * mean, rstd (B,C) saved. Statistics in double, pixels in order. */
	void (*instnorm_forward)(apf_backend *be, float *out, float *mean,
				 float *rstd, const float *inp, const float *scale,
				 const float *bias, int B, int HW, int C, float eps);
	void (*instnorm_backward)(apf_backend *be, float *dinp, float *dscale,
				  float *dbias, const float *dout, const float *inp,
				  const float *scale, const float *mean,
				  const float *rstd, int B, int HW, int C, int accum);
	/* Instance norm and ReLU in one layer: out = relu(instnorm(inp)),
	 * the bits of instnorm_forward then activation_forward's ReLU, the
	 * norm's output never stored. Optional: NULL where a backend has no
	 * fused kernel; nets then run the two layers. */
	void (*instnorm_relu_forward)(apf_backend *be, float *out, float *mean,
				      float *rstd, const float *inp,
				      const float *scale, const float *bias,
				      int B, int HW, int C, float eps);
	/* Its backward, from its output `out` and dout: the bits of
	 * activation_backward's ReLU (g = out > 0 ? dout : 0, as the norm's
	 * output is > 0 just where out is) then instnorm_backward of g. */
	void (*instnorm_relu_backward)(apf_backend *be, float *dinp,
				       float *dscale, float *dbias,
				       const float *dout, const float *out,
				       const float *inp, const float *scale,
				       const float *mean, const float *rstd,
				       int B, int HW, int C, int accum);
	/* L1 loss of pred against target, n values per example, B examples:
	 * losses (B) = mean over the n of |pred - target| (summed in double). */
	void (*l1_forward)(apf_backend *be, float *losses, const float *pred,
			   const float *target, int B, int n);
	/* dpred (B n) = dloss * sign(pred - target) / n (sign(0) = 0). */
	void (*l1_backward)(apf_backend *be, float *dpred, const float *pred,
			    const float *target, int B, int n, float dloss);

	/* ---- vector operations (what optimizers are written with) ----
	 * All over n floats; outputs may alias inputs. Reductions accumulate
	 * in double in index order and return to the host. */
	void (*fill)(apf_backend *be, float *x, float v, size_t n);
	void (*copy)(apf_backend *be, float *dst, const float *src, size_t n);
	void (*scale)(apf_backend *be, float *x, float a, size_t n); /* x *= a */
	void (*axpy)(apf_backend *be, float *y, float a, const float *x,
		     size_t n);                                /* y += a x */
	void (*axpby)(apf_backend *be, float *y, float a, const float *x,
		      float b, size_t n);                      /* y = a x + b y */
	void (*add_scalar)(apf_backend *be, float *x, float a, size_t n);
	void (*mul)(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n);                                 /* z = x * y */
	void (*div)(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n);                                 /* z = x / y */
	void (*sqrt)(apf_backend *be, float *y, const float *x, size_t n);
	void (*max)(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n);                                 /* z = max(x, y) */
	void (*clamp)(apf_backend *be, float *x, float lo, float hi, size_t n);
	/* Adam-style moments, one pass: m = b1 m + (1-b1) g,
	 * v = b2 v + (1-b2) g^2. */
	void (*moments)(apf_backend *be, float *m, float *v, const float *g,
			float b1, float b2, size_t n);
	/* The Adam direction, one pass: d = (m c1) / (sqrt(v c2) + eps), with
	 * c1, c2 the bias corrections 1/(1-b1^t), 1/(1-b2^t). */
	void (*adam_direction)(apf_backend *be, float *d, const float *m,
			       const float *v, float c1, float c2, float eps,
			       size_t n);
	/* AdamW's whole update in one pass, optional (NULL: the caller
	 * composes the four ops it stands for; the CUDA plugin has none).
	 * Over n floats, no two of p, m, v, g overlapping, it gives the bits
	 * of moments(m, v, g, b1, b2), adam_direction(d, m, v, c1, c2, eps),
	 * then on each segment s whose decay[s] is not 1 scale(p, decay[s]),
	 * then axpy(p, step, d). Segment s ends at end[s]: ascending, the
	 * last at n. */
	void (*adamw)(apf_backend *be, float *p, float *m, float *v,
		      const float *g, const struct apf_adamw_pass *a,
		      size_t n);
	double (*dot)(apf_backend *be, const float *x, const float *y,
		      size_t n);
	double (*sum)(apf_backend *be, const float *x, size_t n);
	double (*norm2)(apf_backend *be, const float *x, size_t n);
	double (*max_abs)(apf_backend *be, const float *x, size_t n);

	/* ---- more vector operations (ABI 2 of apf/ops.h, which documents
	 * their special values); each element computed alone, exp, log and
	 * pow by apf_mathf.h's double sequences, so every backend and path
	 * gives the same bits. ---- */
	void (*sub)(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n);                                 /* z = x - y */
	void (*min)(apf_backend *be, float *z, const float *x, const float *y,
		    size_t n);                                 /* z = min(x, y) */
	void (*sign)(apf_backend *be, float *y, const float *x, size_t n);
	void (*abs)(apf_backend *be, float *y, const float *x, size_t n);
	void (*exp)(apf_backend *be, float *y, const float *x, size_t n);
	void (*log)(apf_backend *be, float *y, const float *x, size_t n);
	void (*reciprocal)(apf_backend *be, float *y, const float *x, size_t n);
	/* y = 1 / sqrt(x + eps) */
	void (*rsqrt)(apf_backend *be, float *y, const float *x, float eps,
		      size_t n);
	void (*pow)(apf_backend *be, float *y, const float *x, float p,
		    size_t n);
	/* z = 1 where x, y are both > 0 or both < 0, else 0 */
	void (*agree)(apf_backend *be, float *z, const float *x, const float *y,
		      size_t n);
	/* z = c > 0 ? x : y */
	void (*select)(apf_backend *be, float *z, const float *c,
		       const float *x, const float *y, size_t n);
	/* Row-major views (element (r, c) at a[r lda + c]): out (rows) the
	 * sums of squares of each row, out (cols) of each column, in double
	 * in index order, rounded once; dst = src. */
	void (*row_sumsq)(apf_backend *be, float *out, const float *a, int rows,
			  int cols, int lda);
	void (*col_sumsq)(apf_backend *be, float *out, const float *a, int rows,
			  int cols, int lda);
	void (*copy_mat)(apf_backend *be, float *dst, int ldd, const float *src,
			 int lds, int rows, int cols);

	void *impl;
};

/* The CPU backend with `threads` compute threads (<= 0: 1), its kernels on
 * the instruction-set path APF_CPU_ISA names or the best this CPU has
 * (cpu/isa.h; an unknown or unavailable one is refused). */
int apf_backend_cpu_new(apf_backend **out, int threads);
/* The same backend with its plain kernels only: the reference its fast
 * (AVX2/FMA) kernels are tested against. apf_backend_cpu_new takes the fast
 * ones where the CPU has them; both are deterministic, but their bits
 * differ. */
int apf_backend_cpu_plain_new(apf_backend **out, int threads);

/* The CPU backend's numerics: the formulas its layers compute with. A
 * recorded run means the bits its layers gave (re-evaluation and replay
 * compare bit for bit), so a later apf keeps every version and computes a
 * run with the one it was made with (run.json's "numerics"):
 *   1  GELU, SiLU, tanh and the softmax loss's e^x through libm's tanhf
 *      and expf: every run made before apf recorded its numerics
 *      (run.json without the field);
 *   2  the same through mathf.h's apf_mf_tanh_f and apf_mf_exp_f, within
 *      2 and 1 ulps, which vectorise (GELU about 12x faster) and are the
 *      same bits on every CPU (libm's expf is chosen per CPU);
 *   3  version 2 with subnormal floats flushed to zero (MXCSR's FTZ and
 *      DAZ) on every thread that computes for the backend, its maker's
 *      included: Intel cores take a microcode assist for each subnormal
 *      result, which made an Adam-family trial on a Xeon 2.5x slower per
 *      step once its state decayed below 2^-126 (cpu.c).
 * Every other layer is the same in every version. A new version is a new
 * number here, never a change to an old one. */
#define APF_NUMERICS_OLDEST 1
#define APF_NUMERICS_LATEST 3
/* Sets the numerics of the CPU backends made after it in this process
 * (until then APF_NUMERICS_LATEST), and the calling thread's subnormal
 * mode to the version's; a version this apf lacks is APF_EINPUT
 * ("numerics 4: this apf computes numerics 1 to 3"). */
int apf_numerics_set(int version);
int apf_numerics_get(void);
/* The CUDA backend, on device 0: loads the plugin (build/lib/apf-cuda.so,
 * or $APF_CUDA_PLUGIN) with dlopen, so apf itself links no CUDA; `threads`
 * is recorded as be->threads (the host side needs no pool). Fails with one
 * line naming why: an apf built without CUDA, a plugin that does not load,
 * no usable device. */
int apf_backend_cuda_new(apf_backend **out, int threads);
/* 0 and a description of device 0 in what ("NVIDIA H200, compute 9.0,
 * driver 13.0, runtime 13.0, cuBLAS 13.1.0") when apf_backend_cuda_new would
 * succeed; else nonzero and the reason in what. Records no error, and
 * leaves no CUDA state in the caller: it asks in a child process (fork, so
 * call it before the caller starts threads). */
int apf_cuda_probe(char *what, size_t n);
/* The CUDA plugin's path as apf_backend_cuda_new looks for it ($APF_CUDA_PLUGIN,
 * beside the executable, the installed tree) in path, 0; or nonzero with
 * the reason in why. For the runner, which hands it into the sandbox. */
int apf_cuda_plugin_path(char *path, size_t n, char *why, size_t wn);
/* Any backend, by its own destroy. */
void apf_backend_free(apf_backend *be);

/* ---- networks ------------------------------------------------------------
 *
 * An apf_net is a list of layers over numbered tensors, built once by model
 * code (tensor 0 is the input). Building fixes the layout of parameters and
 * model state (batch-norm running statistics); the caller then provides that
 * memory with apf_net_bind, so all trainable state can live in one arena the
 * caller owns (shared memory, a checkpoint). Activations, gradients and
 * workspace belong to the net. Forward in eval mode reads the bound memory
 * and never writes it.
 */

#define APF_NET_MAX_DIMS 4

typedef struct apf_param {
	char name[64];           /* "block1.conv1.weight" */
	int kind;                /* enum apf_param_kind */
	int ndim;
	int shape[APF_NET_MAX_DIMS];
	size_t offset;           /* floats from the start of the parameters */
	size_t numel;
	int fan_in;              /* for initialisation */
	float init_bound;        /* embeddings: uniform in [-b, b] */
} apf_param;

/* Model state the net keeps besides parameters (running statistics). */
typedef struct apf_state_entry {
	char name[64];
	size_t offset, numel;    /* floats from the start of the model state */
} apf_state_entry;

typedef struct apf_net apf_net;

/* input: H, W, C of one example (an MLP's flat input is 1, 1, features;
 * C 0 for a net whose inputs are indices alone). */
int apf_net_new(apf_net **out, apf_backend *be, int H, int W, int C);
void apf_net_free(apf_net *net);

/* Layers. Each returns the output tensor's id (>= 0) or a negative status.
 * `name` prefixes the layer's parameter names. */
int apf_net_linear(apf_net *net, int in, int out_features, int bias,
		   const char *name);
int apf_net_conv2d(apf_net *net, int in, int out_channels, int kernel,
		   int stride, int pad, int bias, const char *name);
int apf_net_batchnorm(apf_net *net, int in, float momentum, float eps,
		      const char *name);
int apf_net_layernorm(apf_net *net, int in, float eps, const char *name);
int apf_net_activation(apf_net *net, int in, int act);
int apf_net_maxpool2d(apf_net *net, int in, int kernel, int stride, int pad);
int apf_net_avgpool2d(apf_net *net, int in, int kernel, int stride, int pad);
int apf_net_global_avgpool(apf_net *net, int in);
int apf_net_dropout(apf_net *net, int in, float p);
int apf_net_add(apf_net *net, int a, int b);
/* Index inputs: each example also carries n int32 indices (categorical
 * ids, tokens), given to apf_net_forward_idx. Declared once, before the
 * layers that read them. */
int apf_net_index_input(apf_net *net, int n);
/* Embedding lookup of indices [first, first + nfields) of each example:
 * field f has rows[f] rows of D in one table parameter `name.weight`
 * (kind embedding, (sum rows, D), field f's rows after those of fields
 * before it), initialised uniform in [-init_bound, init_bound]. Output
 * (1, nfields, D). An index outside [0, rows[f]) is refused by
 * apf_net_forward_idx. */
int apf_net_embedding(apf_net *net, int first, int nfields, const int *rows,
		      int D, float init_bound, const char *name);
/* DLRM's dot interaction (backend interaction_forward): dense (1,1,D) and
 * emb (1,E,D) give (1,1, D + (E+1)E/2). */
int apf_net_interaction(apf_net *net, int dense, int emb);
/* Sequences. A sequence of T positions of C features is a (1, T, C)
 * tensor; layernorm, activation, dropout and add work on it row by row as
 * they do on images. */
/* Linear over the last axis, applied at every position: (H, W, C) ->
 * (H, W, out_features), one weight (out_features, C). */
int apf_net_dense(apf_net *net, int in, int out_features, int bias,
		  const char *name);
/* Token embedding of index inputs [first, first + T): one table
 * `name.weight` (V, D) shared by the T positions, initialised uniform in
 * [-init_bound, init_bound]; output (1, T, D). An index outside [0, V) is
 * refused by apf_net_forward_idx. */
int apf_net_token_embedding(apf_net *net, int first, int T, int V, int D,
			    float init_bound, const char *name);
/* Learned positions: out = in + `name.weight` (H W, C), the same for every
 * example (kind embedding, uniform in [-init_bound, init_bound]). */
int apf_net_position(apf_net *net, int in, float init_bound, const char *name);
/* Causal self-attention of `heads` heads (backend attention_forward) of a
 * (1, T, 3C) tensor of q, k, v: output (1, T, C); scores scaled by scale
 * (1/sqrt(C/heads) is the usual). */
int apf_net_attention(apf_net *net, int qkv, int heads, float scale);
/* Gated linear unit (backend glu_forward): (H, W, 2F) -> (H, W, F). */
int apf_net_glu(apf_net *net, int in, int act);
/* Images to images (U-Nets). */
/* Transposed convolution, kernel 2 stride 2 (backend upconv2x2_forward):
 * (H, W, C) -> (2H, 2W, out_channels); weight `name.weight`
 * (out_channels, 2, 2, C) (kind conv weight). */
int apf_net_upconv2x2(apf_net *net, int in, int out_channels, int bias,
		      const char *name);
/* Channels of a then b, at the same H, W: (H, W, Ca + Cb). */
int apf_net_concat(apf_net *net, int a, int b);
/* Instance norm: each image's channel over its H W pixels, then a scale
 * and bias per channel (`name.scale`, `name.bias`). */
int apf_net_instnorm(apf_net *net, int in, float eps, const char *name);
/* Declares the output tensor: logits (1, 1, classes), a sequence's
 * per-position logits (1, positions, classes), or an image (H, W, C) a
 * reconstruction compares with its target; no layer may be added after. */
int apf_net_finish(apf_net *net, int out);

/* Shape of one example of a tensor (H, W, C). */
void apf_net_tensor_shape(const apf_net *net, int t, int *H, int *W, int *C);
size_t apf_net_nparams(const apf_net *net);
const apf_param *apf_net_param(const apf_net *net, size_t i);
size_t apf_net_param_floats(const apf_net *net);
size_t apf_net_nstate(const apf_net *net);
const apf_state_entry *apf_net_state(const apf_net *net, size_t i);
size_t apf_net_state_floats(const apf_net *net);
int apf_net_out_features(const apf_net *net);
/* The output tensor's id (apf_net_tensor_shape gives its shape); -1
 * before apf_net_finish. */
int apf_net_output(const apf_net *net);
/* Positions of the output: 1, or T for per-position logits. */
int apf_net_out_positions(const apf_net *net);
/* Multiply-adds of one example's forward pass (for FLOP figures). */
double apf_net_forward_macs(const apf_net *net);
/* Bytes one example's training step moves at the least, by the roofline
 * model of bench/train_step: the input read once; every tensor the net
 * stores written forward and read backward, and its gradient written and
 * read; attention's probabilities written and read. The parameters'
 * traffic (per step, not per example) is the caller's to add. */
double apf_net_example_bytes(const apf_net *net);

/* Binds the caller's parameter and model-state buffers (backend memory of
 * param_floats and state_floats floats); may be called again to rebind. */
void apf_net_bind(apf_net *net, float *params, float *state);
/* Initialises the bound parameters and state: weights from the `init`
 * scheme ("kaiming_uniform" as PyTorch's default, "he_normal",
 * "lecun_normal"), biases 0, norm scale 1 / bias 0, running mean 0 / var 1.
 * Draws from (key, step 0) in parameter order, so the result depends only on
 * the key and the layout. */
int apf_net_init(apf_net *net, const apf_rng_key *key, const char *init);

/* Sizes activation buffers for batches up to max_batch; with_grads also
 * allocates what backward needs. Called implicitly by forward. */
int apf_net_reserve(apf_net *net, int max_batch, int with_grads);
/* Forward of x (B,H,W,C) (backend memory); returns the logits (B,V) in
 * backend memory owned by the net. train: batch statistics, running
 * statistics updated, dropout on (its words from dropout_key at
 * dropout_step); eval: running statistics, no dropout, bound memory only
 * read. */
int apf_net_forward(apf_net *net, const float **logits, const float *x,
		    int B, int train, const uint32_t dropout_key[2],
		    uint64_t dropout_step);
/* The same for a net with index inputs: idx (B, n) int32 in backend
 * memory, checked against each embedding's field sizes on the host side
 * (host_idx, the same indices in host memory) before any lookup. */
int apf_net_forward_idx(apf_net *net, const float **logits, const float *x,
			const int32_t *idx, const int32_t *host_idx, int B,
			int train, const uint32_t dropout_key[2],
			uint64_t dropout_step);
/* Index inputs per example (0: none). */
int apf_net_index_count(const apf_net *net);
/* Backward of the latest training forward from dlogits (B,V): writes the
 * parameter gradients, laid out as the parameters, to grads (backend
 * memory of param_floats floats). */
int apf_net_backward(apf_net *net, float *grads, const float *dlogits);

#endif
