/*
 * cpu.c: the CPU backend, the readable reference every other backend is
 * tested against. Each layer is a plain `<layer>_forward` / `_backward` pair
 * over flat float arrays (shapes in the parameter names); GEMMs go to
 * OpenBLAS with its thread count pinned at creation.
 *
 * Determinism: everything outside OpenBLAS runs on the calling thread in a
 * fixed order; OpenBLAS's sgemm partitions work by thread count only, so a
 * fixed count gives bit-identical results. Statistics (batch norm, layer
 * norm, reductions) accumulate in double.
 */
#include "nn/nn.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Convolutions run im2col over chunks of the batch whose column matrix stays
 * under this many floats: small enough to stay in the last-level cache, large
 * enough that each GEMM is efficient. */
#define CONV_CHUNK_FLOATS ((size_t)1 << 22)

/* ---- memory -------------------------------------------------------------- */

static int cpu_alloc(apf_backend *be, size_t nbytes, void **out)
{
	(void)be;
	/* 64-byte alignment for vector loads; zeroed like cudaMemset would. */
	size_t n = (nbytes + 63) / 64 * 64;
	void *p = aligned_alloc(64, n ? n : 64);
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

static int cpu_sync(apf_backend *be)
{
	(void)be;
	return 0;
}

/* ---- GEMM ----------------------------------------------------------------- */

static void cpu_gemm(apf_backend *be, int trans_a, int trans_b, int M, int N,
		     int K, float alpha, const float *A, int lda,
		     const float *B, int ldb, float beta, float *C, int ldc)
{
	(void)be;
	if (M == 0 || N == 0)
		return;
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
		    B, ldb, beta, C, ldc);
}

/* dbias (OC) = column sums of dout (R,OC), rows in order. */
static void column_sums(float *dbias, const float *dout, size_t R, int OC)
{
	memset(dbias, 0, (size_t)OC * sizeof *dbias);
	for (size_t r = 0; r < R; r++) {
		const float *row = dout + r * OC;
		for (int o = 0; o < OC; o++)
			dbias[o] += row[o];
	}
}

/* ---- linear --------------------------------------------------------------- */

// out is (B,OC), inp is (B,C), weight is (OC,C), bias is (OC)
static void linear_forward(apf_backend *be, float *out, const float *inp,
			   const float *weight, const float *bias, int B, int C,
			   int OC)
{
	float beta = 0.0f;
	if (bias) {
		for (int b = 0; b < B; b++)
			memcpy(out + (size_t)b * OC, bias, (size_t)OC * sizeof *out);
		beta = 1.0f;
	}
	cpu_gemm(be, 0, 1, B, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

// dout is (B,OC); dinp (B,C), dweight (OC,C), dbias (OC)
static void linear_backward(apf_backend *be, float *dinp, float *dweight,
			    float *dbias, const float *dout, const float *inp,
			    const float *weight, int B, int C, int OC,
			    int accum)
{
	if (dinp)
		cpu_gemm(be, 0, 0, B, C, OC, 1.0f, dout, OC, weight, C,
			 accum ? 1.0f : 0.0f, dinp, C);
	cpu_gemm(be, 1, 0, OC, C, B, 1.0f, dout, OC, inp, C, 0.0f, dweight, C);
	if (dbias)
		column_sums(dbias, dout, (size_t)B, OC);
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
static void im2col(float *col, const float *inp, int nb, int H, int W, int C,
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
static void col2im(float *dinp, const float *dcol, int nb, int H, int W, int C,
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

static size_t conv2d_work(apf_backend *be, int B, int H, int W, int C, int OC,
			  int K, int S, int P)
{
	(void)be;
	(void)OC;
	if (conv_is_pointwise(K, S, P))
		return 0;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int cb = conv_chunk(B, OH, OW, C, K);
	return (size_t)cb * OH * OW * K * K * C;
}

// out (B,OH,OW,OC) = conv(inp (B,H,W,C), weight (OC,K,K,C)) + bias (OC)
static void conv2d_forward(apf_backend *be, float *out, const float *inp,
			   const float *weight, const float *bias, int B, int H,
			   int W, int C, int OC, int K, int S, int P,
			   float *work)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int KKC = K * K * C;
	size_t in_img = (size_t)H * W * C, out_rows_img = (size_t)OH * OW;
	int cb = conv_is_pointwise(K, S, P) ? B : conv_chunk(B, OH, OW, C, K);
	for (int b0 = 0; b0 < B; b0 += cb) {
		int nb = B - b0 < cb ? B - b0 : cb;
		int rows = (int)(nb * out_rows_img);
		const float *col = inp + b0 * in_img;
		if (!conv_is_pointwise(K, S, P)) {
			im2col(work, col, nb, H, W, C, K, S, P);
			col = work;
		}
		float *o = out + b0 * out_rows_img * OC;
		float beta = 0.0f;
		if (bias) {
			for (int r = 0; r < rows; r++)
				memcpy(o + (size_t)r * OC, bias,
				       (size_t)OC * sizeof *o);
			beta = 1.0f;
		}
		cpu_gemm(be, 0, 1, rows, OC, KKC, 1.0f, col, KKC, weight, KKC,
			 beta, o, OC);
	}
}

static void conv2d_backward(apf_backend *be, float *dinp, float *dweight,
			    float *dbias, const float *dout, const float *inp,
			    const float *weight, int B, int H, int W, int C,
			    int OC, int K, int S, int P, float *work, int accum)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int KKC = K * K * C;
	size_t in_img = (size_t)H * W * C, out_rows_img = (size_t)OH * OW;
	int pointwise = conv_is_pointwise(K, S, P);
	int cb = pointwise ? B : conv_chunk(B, OH, OW, C, K);
	if (dinp && !accum && !pointwise)
		memset(dinp, 0, (size_t)B * in_img * sizeof *dinp);
	for (int b0 = 0; b0 < B; b0 += cb) {
		int nb = B - b0 < cb ? B - b0 : cb;
		int rows = (int)(nb * out_rows_img);
		const float *d = dout + b0 * out_rows_img * OC;
		const float *col = inp + b0 * in_img;
		if (!pointwise) {
			im2col(work, col, nb, H, W, C, K, S, P);
			col = work;
		}
		/* dweight (OC,KKC) += d^T (OC,rows) col (rows,KKC); chunks in
		 * order, so the sum's order is fixed. */
		cpu_gemm(be, 1, 0, OC, KKC, rows, 1.0f, d, OC, col, KKC,
			 b0 ? 1.0f : 0.0f, dweight, KKC);
		if (!dinp)
			continue;
		if (pointwise) {
			cpu_gemm(be, 0, 0, rows, C, OC, 1.0f, d, OC, weight, C,
				 accum ? 1.0f : 0.0f, dinp + b0 * in_img, C);
		} else {
			/* dcol (rows,KKC) = d (rows,OC) weight (OC,KKC), reusing
			 * the column buffer, then scattered back. */
			cpu_gemm(be, 0, 0, rows, KKC, OC, 1.0f, d, OC, weight,
				 KKC, 0.0f, work, KKC);
			col2im(dinp + b0 * in_img, work, nb, H, W, C, K, S, P);
		}
	}
	if (dbias)
		column_sums(dbias, dout, (size_t)B * out_rows_img, OC);
}

/* ---- batch norm (N rows of C channels) ----------------------------------- */

/* Per-channel sums run over blocks of channels with double accumulators on
 * the stack: rows are read in order (cache-friendly for NHWC) and nothing is
 * allocated. */
#define BN_BLOCK 256

static void batchnorm_forward(apf_backend *be, float *out, float *save_mean,
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

static void batchnorm_backward(apf_backend *be, float *dinp, float *dscale,
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

/* ---- layer norm ----------------------------------------------------------- */

// out, inp are (N,C); mean, rstd (N); scale, bias (C)
static void layernorm_forward(apf_backend *be, float *out, float *mean,
			      float *rstd, const float *inp, const float *scale,
			      const float *bias, int N, int C, float eps)
{
	(void)be;
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *y = out + (size_t)n * C;
		double s = 0.0;
		for (int c = 0; c < C; c++)
			s += x[c];
		double m = s / C, v = 0.0;
		for (int c = 0; c < C; c++)
			v += ((double)x[c] - m) * ((double)x[c] - m);
		float r = (float)(1.0 / sqrt(v / C + eps));
		float mf = (float)m;
		for (int c = 0; c < C; c++)
			y[c] = (x[c] - mf) * r * scale[c] + bias[c];
		mean[n] = mf;
		rstd[n] = r;
	}
}

static void layernorm_backward(apf_backend *be, float *dinp, float *dscale,
			       float *dbias, const float *dout,
			       const float *inp, const float *scale,
			       const float *mean, const float *rstd, int N,
			       int C, int accum)
{
	(void)be;
	memset(dscale, 0, (size_t)C * sizeof *dscale);
	memset(dbias, 0, (size_t)C * sizeof *dbias);
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
		float m = mean[n], r = rstd[n];
		double sdg = 0.0, sdgx = 0.0;
		for (int c = 0; c < C; c++) {
			float xhat = (x[c] - m) * r;
			float dg = d[c] * scale[c];
			dbias[c] += d[c];
			dscale[c] += d[c] * xhat;
			sdg += dg;
			sdgx += (double)dg * xhat;
		}
		if (!dinp)
			continue;
		float a = (float)(sdg / C), bb = (float)(sdgx / C);
		float *di = dinp + (size_t)n * C;
		for (int c = 0; c < C; c++) {
			float xhat = (x[c] - m) * r;
			float g = r * (d[c] * scale[c] - a - xhat * bb);
			di[c] = accum ? di[c] + g : g;
		}
	}
}

/* ---- activations ---------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static void activation_forward(apf_backend *be, int act, float *out,
			       const float *inp, size_t n)
{
	(void)be;
	switch (act) {
	case APF_ACT_RELU:
		for (size_t i = 0; i < n; i++)
			out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
		break;
	case APF_ACT_GELU:
		for (size_t i = 0; i < n; i++) {
			float x = inp[i];
			out[i] = 0.5f * x *
				 (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x)));
		}
		break;
	case APF_ACT_SILU:
		for (size_t i = 0; i < n; i++)
			out[i] = inp[i] / (1.0f + expf(-inp[i]));
		break;
	case APF_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			out[i] = tanhf(inp[i]);
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
	float t = tanhf(GELU_K * (x + GELU_C * x * x * x));
	float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

static inline float silu_grad(float x)
{
	float sg = 1.0f / (1.0f + expf(-x));
	return sg * (1.0f + x * (1.0f - sg));
}

static void activation_backward(apf_backend *be, int act, float *dinp,
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
		ACT_LOOP(dout[i] * (1.0f - out[i] * out[i]));
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

static void avgpool2d_forward(apf_backend *be, float *out, const float *inp,
			      int B, int H, int W, int C, int K, int S, int P)
{
	(void)be;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	float inv = 1.0f / (float)(K * K);
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				float *o = out + (((size_t)b * OH + oh) * OW + ow) * C;
				memset(o, 0, (size_t)C * sizeof *o);
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					if (ih < 0 || ih >= H)
						continue;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						if (iw < 0 || iw >= W)
							continue;
						const float *x = inp + (((size_t)b * H + ih) * W + iw) * C;
						for (int c = 0; c < C; c++)
							o[c] += x[c];
					}
				}
				for (int c = 0; c < C; c++)
					o[c] *= inv;
			}
}

static void avgpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			       int B, int H, int W, int C, int K, int S, int P,
			       int accum)
{
	(void)be;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	float inv = 1.0f / (float)(K * K);
	if (!accum)
		memset(dinp, 0, (size_t)B * H * W * C * sizeof *dinp);
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				const float *d = dout + (((size_t)b * OH + oh) * OW + ow) * C;
				for (int kh = 0; kh < K; kh++) {
					int ih = oh * S - P + kh;
					if (ih < 0 || ih >= H)
						continue;
					for (int kw = 0; kw < K; kw++) {
						int iw = ow * S - P + kw;
						if (iw < 0 || iw >= W)
							continue;
						float *x = dinp + (((size_t)b * H + ih) * W + iw) * C;
						for (int c = 0; c < C; c++)
							x[c] += d[c] * inv;
					}
				}
			}
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
			  const uint32_t key[2], uint64_t step, int accum)
{
	float keep_scale = 1.0f / (1.0f - p);
	uint32_t ctr[4] = {0, 0, (uint32_t)step, (uint32_t)(step >> 32)};
	for (size_t i0 = 0; i0 < n; i0 += 4) {
		uint32_t w[4];
		uint64_t blk = i0 / 4;
		ctr[0] = (uint32_t)blk;
		ctr[1] = (uint32_t)(blk >> 32);
		apf_philox4x32_10(ctr, key, w);
		for (size_t j = 0; j < 4 && i0 + j < n; j++) {
			size_t i = i0 + j;
			float v = apf_rng_to_uniform(w[j]) >= p
					  ? in[i] * keep_scale
					  : 0.0f;
			out[i] = accum ? out[i] + v : v;
		}
	}
}

static void dropout_forward(apf_backend *be, float *out, const float *inp,
			    size_t n, float p, const uint32_t key[2],
			    uint64_t step)
{
	(void)be;
	dropout_apply(out, inp, n, p, key, step, 0);
}

static void dropout_backward(apf_backend *be, float *dinp, const float *dout,
			     size_t n, float p, const uint32_t key[2],
			     uint64_t step, int accum)
{
	(void)be;
	dropout_apply(dinp, dout, n, p, key, step, accum);
}

static void add_forward(apf_backend *be, float *out, const float *a,
			const float *b, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

static void accumulate(apf_backend *be, float *dst, const float *src, size_t n,
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

// losses (B), probs (B,V) from logits (B,V) and labels (B)
static void softmax_xent_forward(apf_backend *be, float *losses, float *probs,
				 const float *logits, const int32_t *labels,
				 int B, int V, float smoothing)
{
	(void)be;
	for (int b = 0; b < B; b++) {
		const float *z = logits + (size_t)b * V;
		float *p = probs + (size_t)b * V;
		float mx = z[0];
		for (int v = 1; v < V; v++)
			mx = z[v] > mx ? z[v] : mx;
		double s = 0.0, sz = 0.0;
		for (int v = 0; v < V; v++) {
			p[v] = expf(z[v] - mx);
			s += p[v];
			sz += z[v];
		}
		float inv = (float)(1.0 / s);
		for (int v = 0; v < V; v++)
			p[v] *= inv;
		double lse = mx + log(s);
		/* -sum_v t_v log p_v with t = (1-s) onehot + s/V */
		double nll = lse - z[labels[b]];
		double smooth = lse - sz / V;
		losses[b] = (float)((1.0 - smoothing) * nll + smoothing * smooth);
	}
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

static void v_scale(apf_backend *be, float *x, float a, size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		x[i] *= a;
}

static void v_axpy(apf_backend *be, float *y, float a, const float *x,
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

static void v_moments(apf_backend *be, float *m, float *v, const float *g,
		      float b1, float b2, size_t n)
{
	(void)be;
	float a1 = 1.0f - b1, a2 = 1.0f - b2;
	for (size_t i = 0; i < n; i++) {
		m[i] = b1 * m[i] + a1 * g[i];
		v[i] = b2 * v[i] + a2 * g[i] * g[i];
	}
}

static void v_adam_direction(apf_backend *be, float *d, const float *m,
			     const float *v, float c1, float c2, float eps,
			     size_t n)
{
	(void)be;
	for (size_t i = 0; i < n; i++)
		d[i] = m[i] * c1 / (sqrtf(v[i] * c2) + eps);
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

/* ---- the table ------------------------------------------------------------ */

static const apf_backend cpu_template = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_memcpy,
	.download = cpu_memcpy,
	.sync = cpu_sync,
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
	.dot = v_dot,
	.sum = v_sum,
	.norm2 = v_norm2,
	.max_abs = v_max_abs,
};

int apf_backend_cpu_new(apf_backend **out, int threads)
{
	*out = NULL;
	apf_backend *be = malloc(sizeof *be);
	if (!be)
		return apf_error(APF_ENOMEM, "cpu backend", "out of memory");
	*be = cpu_template;
	be->threads = threads > 0 ? threads : 1;
	openblas_set_num_threads(be->threads);
	*out = be;
	return 0;
}

void apf_backend_free(apf_backend *be)
{
	free(be);
}
