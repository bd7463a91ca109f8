/*
 * fast_ops.h: one instruction-set path's inner kernels for fast.c, internal
 * to nn/cpu. fast.c owns everything that decides an order: the geometry,
 * the threads' shares, the chunks of images, the pixel order, the blocks of
 * batch-norm rows; a path (fast_scalar.c, fast_avx2.c, fast_avx512.c) owns
 * only the kernels below, which it runs with vectors of its width.
 *
 * The contract (fast.h): every path computes each output element with the
 * same sequence of float operations. A lane of a vector does what the
 * scalar path does for that element, so the width decides which outputs are
 * computed together, never the order of a sum; partial sums (batch-norm
 * statistics, the weight gradient) are per element or per channel, and
 * their grouping (pixels in tiles of 6, rows in blocks of 16) is fixed here,
 * not by a width. Each kernel documents the sequence it computes.
 */
#ifndef APF_NN_CPU_FAST_OPS_H
#define APF_NN_CPU_FAST_OPS_H

#include <stddef.h>

#include "nn/cpu/fast.h"

#define APF_FAST_TILE_PX 6 /* pixels per group of statistics and tiles */
#define APF_FAST_MAX_TAPS 64

/* Output pixels (img, row, col) of a chunk, in that order, with the strides
 * that place each pixel's input base and output. */
struct apf_fast_grid {
	const float *in; /* padded chunk */
	ptrdiff_t in_img, in_row, in_col;
	float *out;
	ptrdiff_t out_img, out_row, out_col;
	int rows, cols, nimg;
};

/* One chunk of the direct weight gradient. */
struct apf_fast_dw {
	int K, C, OC, S, OH, OW, Wp, nb;
	size_t in_img; /* floats of one padded input image */
};

struct apf_fast_ops {
	/* For every pixel p of the grid and output channel o < cout (a
	 * multiple of 16): acc = 0; for tap t < ntaps, channel c < cin in
	 * order: acc = fma(in(p)[toff[t] + c], tw[t][c ldw + o], acc); then
	 * out(p)[o] = acc, or out + acc when accum, or bias[o] + acc with a
	 * bias. */
	void (*tiles)(const struct apf_fast_grid *g, const ptrdiff_t *toff,
		      const float *const *tw, int ntaps, int cin, int ldw,
		      int cout, const float *bias, int accum);
	/* Kernel row kh of a chunk's weight gradient: for every o < OC, kw,
	 * c < C: acc = part[o][kh][kw][c]; for images, output rows, output
	 * columns in order: acc = fma(dy[pixel][o], x[pixel][kw][c], acc);
	 * stored back. x is the padded chunk from row kh. With C % 8 == 0
	 * (OC % 4 == 0) the lanes run over input channels, otherwise
	 * (OC % 8 == 0) over output channels: the same sequence per element
	 * either way. */
	void (*dweight_row)(float *part, const float *dy, const float *x,
			    int kh, const struct apf_fast_dw *d);
	/* One of a Winograd group's 16 GEMMs, the sums tiles computes with
	 * one tap, no bias and no accum: for rows s < n and o < cout (a
	 * multiple of 16): acc = 0; for c < cin in order: acc = fma(v[s cin +
	 * c], u[c cout + o], acc); m[s cout + o] = acc. NULL on a path whose
	 * tiles already fill its registers (fast.c then calls tiles). */
	void (*wino_gemm)(float *m, const float *v, const float *u, int n,
			  int cin, int cout);
	/* Winograd transforms of one tile, channel by channel (fast.c says
	 * which sums; each is the same per channel on every path). */
	void (*wino_in)(float *V, size_t vs, const float *d, size_t row,
			int cin);
	void (*wino_out)(float *y, size_t yrow, int nh, int nw, const float *M,
			 size_t ms, int cout, const float *bias, int accum);
	void (*wino_dy)(float *Z, size_t zs, const float *y, size_t yrow,
			int nh, int nw, int OC);
	/* du (OC, C) += over slots s < n in order: fma(z[s OC + o],
	 * v[s C + c], du[o][c]). */
	void (*wino_reduce)(float *du, const float *z, const float *v, int OC,
			    int C, int n);
	/* Batch norm over rows [r0, r1) (one block of at most 16 for the
	 * sums) and channels [c0, C): see fast.c. */
	void (*bn_stats)(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q);
	void (*bn_apply)(const struct apf_bn_job *j, int r0, int r1, int c0);
	void (*bn_dsums)(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q);
	void (*bn_dx)(const struct apf_bn_job *j, int r0, int r1, int c0);
	/* The dot interaction (fast.h, inter_body.h) over lanes of
	 * inter_lanes examples; 0 and NULL on a path without its own. */
	int inter_lanes;
	apf_inter_fn inter_fwd, inter_bwd;
	/* Causal self-attention (fast.h, attn_body.h) for head sizes that
	 * are multiples of attn_floats; 0 and NULL on a path without. */
	int attn_floats;
	apf_attn_fwd_fn attn_fwd;
	apf_attn_bwd_fn attn_bwd;
};

/* The weight gradient's columns where the input's channels do not fill a
 * vector (the stem's one channel; fast.h), whose lanes run over
 * output channels instead: up to 4 columns of kernel row kh from column c0
 * on, column k being tap (kh, kw) and input channel c with k = kw C + c:
 * its offset in a pixel's padded input row (xoff) and in an output
 * channel's weights (dwoff). Returns how many. */
static inline int apf_fast_dw_columns(int kh, int K, int C, int c0,
				      ptrdiff_t xoff[4], ptrdiff_t dwoff[4])
{
	int n = K * C - c0 < 4 ? K * C - c0 : 4;
	for (int k = 0; k < n; k++) {
		int kw = (c0 + k) / C, c = (c0 + k) % C;
		xoff[k] = (ptrdiff_t)kw * C + c;
		dwoff[k] = (ptrdiff_t)(kh * K + kw) * C + c;
	}
	return n;
}

extern const struct apf_fast_ops apf_fast_scalar_ops;
extern const struct apf_fast_ops apf_fast_avx2_ops;
extern const struct apf_fast_ops apf_fast_avx512_ops;

#endif
