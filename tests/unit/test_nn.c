/*
 * test_nn.c: the CPU backend's layers against double-precision references,
 * their gradients against central finite differences of those references,
 * the accumulate mode of every backward, the vector operations, and the
 * network layer on top: layout, binding, init, wiring of residuals,
 * eval-mode purity and run-to-run determinism.
 *
 * Each layer case gives a naive double forward (the reference), and calls
 * the backend's float forward and backward, on the plain CPU backend and on
 * the default one (fast kernels). The checker draws inputs, compares the
 * forwards, then compares every input's gradient of
 * L = sum(r * out) (r random) with (L(x+h) - L(x-h)) / 2h computed in double.
 * Causal self-attention is also checked for the same bits on 1, 2 and 3
 * threads and for probabilities that are causal and sum to 1.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include "hash/hash.h"
#include "nn/cpu/isa.h"
#include "nn/mathf.h"
#include "nn/nn.h"

#define MAXIN 3

struct lcase {
	const char *name;
	int nin;
	size_t in_n[MAXIN];
	size_t out_n;
	int B, H, W, C, OC, K, S, P, act;
	float p, smoothing;
	int T, NH;   /* attention: positions, heads (C the model width) */
	float scale; /* attention: the score scale */
	int uniform_dout; /* the backward takes one weight for all outputs */
	int no_accum;     /* the backward writes its gradients, never adds */
	void (*ref)(const struct lcase *c, double *const *in, double *out);
	void (*fwd)(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save);
	void (*bwd)(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum);
};

static int outdim(int n, int K, int S, int P)
{
	return (n + 2 * P - K) / S + 1;
}

/* ---- references (double) and adapters ------------------------------------ */

static void linear_ref(const struct lcase *c, double *const *in, double *out)
{
	for (int b = 0; b < c->B; b++)
		for (int o = 0; o < c->OC; o++) {
			double s = in[2][o];
			for (int i = 0; i < c->C; i++)
				s += in[0][b * c->C + i] * in[1][o * c->C + i];
			out[b * c->OC + o] = s;
		}
}
static void linear_fwd(const struct lcase *c, apf_backend *be,
		       float *const *in, float *out, float *save)
{
	(void)save;
	be->linear_forward(be, out, in[0], in[1], in[2], c->B, c->C, c->OC);
}
static void linear_bwd(const struct lcase *c, apf_backend *be,
		       float *const *in, const float *out, const float *dout,
		       float *const *din, float *save, int accum)
{
	(void)out, (void)save;
	be->linear_backward(be, din[0], din[1], din[2], dout, in[0], in[1],
			    c->B, c->C, c->OC, accum);
}

static void conv_ref(const struct lcase *c, double *const *in, double *out)
{
	int OH = outdim(c->H, c->K, c->S, c->P), OW = outdim(c->W, c->K, c->S, c->P);
	for (int b = 0; b < c->B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++)
				for (int o = 0; o < c->OC; o++) {
					double s = in[2][o];
					for (int kh = 0; kh < c->K; kh++)
						for (int kw = 0; kw < c->K; kw++) {
							int ih = oh * c->S - c->P + kh;
							int iw = ow * c->S - c->P + kw;
							if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W)
								continue;
							for (int i = 0; i < c->C; i++)
								s += in[0][((b * c->H + ih) * c->W + iw) * c->C + i] *
								     in[1][((o * c->K + kh) * c->K + kw) * c->C + i];
						}
					out[((b * OH + oh) * OW + ow) * c->OC + o] = s;
				}
}
static void conv_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		     float *out, float *save)
{
	be->conv2d_forward(be, out, in[0], in[1], in[2], c->B, c->H, c->W, c->C,
			   c->OC, c->K, c->S, c->P, save);
}
static void conv_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		     const float *out, const float *dout, float *const *din,
		     float *save, int accum)
{
	(void)out;
	be->conv2d_backward(be, din[0], din[1], din[2], dout, in[0], in[1],
			    c->B, c->H, c->W, c->C, c->OC, c->K, c->S, c->P,
			    save, accum);
}

/* rows = B*H*W, channels C */
static void bn_ref(const struct lcase *c, double *const *in, double *out)
{
	int N = c->B * c->H * c->W, C = c->C;
	for (int k = 0; k < C; k++) {
		double m = 0, v = 0;
		for (int n = 0; n < N; n++)
			m += in[0][n * C + k];
		m /= N;
		for (int n = 0; n < N; n++)
			v += (in[0][n * C + k] - m) * (in[0][n * C + k] - m);
		v /= N;
		for (int n = 0; n < N; n++)
			out[n * C + k] = (in[0][n * C + k] - m) / sqrt(v + 1e-5) *
					 in[1][k] + in[2][k];
	}
}
static void bn_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		   float *out, float *save)
{
	int N = c->B * c->H * c->W;
	/* running statistics live past the saved ones in the scratch */
	float *rm = save + 2 * c->C, *rv = save + 3 * c->C;
	be->batchnorm_forward(be, out, save, save + c->C, in[0], in[1], in[2],
			      rm, rv, N, c->C, 0.1f, 1e-5f, 1);
}
static void bn_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		   const float *out, const float *dout, float *const *din,
		   float *save, int accum)
{
	(void)out;
	be->batchnorm_backward(be, din[0], din[1], din[2], dout, in[0], in[1],
			       save, save + c->C, c->B * c->H * c->W, c->C,
			       accum);
}

static void ln_ref(const struct lcase *c, double *const *in, double *out)
{
	int N = c->B, C = c->C;
	for (int n = 0; n < N; n++) {
		double m = 0, v = 0;
		for (int k = 0; k < C; k++)
			m += in[0][n * C + k];
		m /= C;
		for (int k = 0; k < C; k++)
			v += (in[0][n * C + k] - m) * (in[0][n * C + k] - m);
		v /= C;
		for (int k = 0; k < C; k++)
			out[n * C + k] = (in[0][n * C + k] - m) / sqrt(v + 1e-5) *
					 in[1][k] + in[2][k];
	}
}
static void ln_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		   float *out, float *save)
{
	be->layernorm_forward(be, out, save, save + c->B, in[0], in[1], in[2],
			      c->B, c->C, 1e-5f);
}
static void ln_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		   const float *out, const float *dout, float *const *din,
		   float *save, int accum)
{
	(void)out;
	be->layernorm_backward(be, din[0], din[1], din[2], dout, in[0], in[1],
			       save, save + c->B, c->B, c->C, accum);
}

static double act_d(int act, double x)
{
	switch (act) {
	case APF_ACT_RELU:
		return x > 0 ? x : 0;
	case APF_ACT_GELU:
		return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case APF_ACT_SILU:
		return x / (1 + exp(-x));
	default:
		return tanh(x);
	}
}
static void act_ref(const struct lcase *c, double *const *in, double *out)
{
	for (size_t i = 0; i < c->out_n; i++)
		out[i] = act_d(c->act, in[0][i]);
}
static void act_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save)
{
	(void)save;
	be->activation_forward(be, c->act, out, in[0], c->out_n);
}
static void act_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum)
{
	(void)save;
	be->activation_backward(be, c->act, din[0], dout, in[0], out, c->out_n,
				accum);
}

static void pool_ref(const struct lcase *c, double *const *in, double *out,
		     int is_max)
{
	int OH = outdim(c->H, c->K, c->S, c->P), OW = outdim(c->W, c->K, c->S, c->P);
	for (int b = 0; b < c->B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++)
				for (int k = 0; k < c->C; k++) {
					double best = -INFINITY, sum = 0;
					for (int kh = 0; kh < c->K; kh++)
						for (int kw = 0; kw < c->K; kw++) {
							int ih = oh * c->S - c->P + kh;
							int iw = ow * c->S - c->P + kw;
							if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W)
								continue;
							double v = in[0][((b * c->H + ih) * c->W + iw) * c->C + k];
							best = v > best ? v : best;
							sum += v;
						}
					out[((b * OH + oh) * OW + ow) * c->C + k] =
						is_max ? best : sum / (c->K * c->K);
				}
}
static void maxpool_ref(const struct lcase *c, double *const *in, double *out)
{
	pool_ref(c, in, out, 1);
}
static void avgpool_ref(const struct lcase *c, double *const *in, double *out)
{
	pool_ref(c, in, out, 0);
}
static void maxpool_fwd(const struct lcase *c, apf_backend *be,
			float *const *in, float *out, float *save)
{
	be->maxpool2d_forward(be, out, (int32_t *)save, in[0], c->B, c->H, c->W,
			      c->C, c->K, c->S, c->P);
}
static void maxpool_bwd(const struct lcase *c, apf_backend *be,
			float *const *in, const float *out, const float *dout,
			float *const *din, float *save, int accum)
{
	(void)in, (void)out;
	be->maxpool2d_backward(be, din[0], dout, (const int32_t *)save, c->B,
			       c->H, c->W, c->C, c->K, c->S, c->P, accum);
}
static void avgpool_fwd(const struct lcase *c, apf_backend *be,
			float *const *in, float *out, float *save)
{
	(void)save;
	be->avgpool2d_forward(be, out, in[0], c->B, c->H, c->W, c->C, c->K,
			      c->S, c->P);
}
static void avgpool_bwd(const struct lcase *c, apf_backend *be,
			float *const *in, const float *out, const float *dout,
			float *const *din, float *save, int accum)
{
	(void)in, (void)out, (void)save;
	be->avgpool2d_backward(be, din[0], dout, c->B, c->H, c->W, c->C, c->K,
			       c->S, c->P, accum);
}

static void gap_ref(const struct lcase *c, double *const *in, double *out)
{
	int HW = c->H * c->W;
	for (int b = 0; b < c->B; b++)
		for (int k = 0; k < c->C; k++) {
			double s = 0;
			for (int p = 0; p < HW; p++)
				s += in[0][(b * HW + p) * c->C + k];
			out[b * c->C + k] = s / HW;
		}
}
static void gap_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save)
{
	(void)save;
	be->global_avgpool_forward(be, out, in[0], c->B, c->H * c->W, c->C);
}
static void gap_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum)
{
	(void)in, (void)out, (void)save;
	be->global_avgpool_backward(be, din[0], dout, c->B, c->H * c->W, c->C,
				    accum);
}

static const uint32_t drop_key[2] = {0x12345678u, 0x9abcdef0u};
static void dropout_ref(const struct lcase *c, double *const *in, double *out)
{
	for (size_t i = 0; i < c->out_n; i++) {
		int keep = apf_rng_to_uniform(apf_rng_word(drop_key, 5, i)) >= c->p;
		out[i] = keep ? in[0][i] / (1.0 - c->p) : 0.0;
	}
}
static void dropout_fwd(const struct lcase *c, apf_backend *be,
			float *const *in, float *out, float *save)
{
	(void)save;
	be->dropout_forward(be, out, in[0], c->out_n, c->p, drop_key, 5);
}
static void dropout_bwd(const struct lcase *c, apf_backend *be,
			float *const *in, const float *out, const float *dout,
			float *const *din, float *save, int accum)
{
	(void)in, (void)out, (void)save;
	be->dropout_backward(be, din[0], dout, c->out_n, c->p, drop_key, 5,
			     accum);
}

static void add_ref(const struct lcase *c, double *const *in, double *out)
{
	for (size_t i = 0; i < c->out_n; i++)
		out[i] = in[0][i] + in[1][i];
}
static void add_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save)
{
	(void)save;
	be->add_forward(be, out, in[0], in[1], c->out_n);
}
static void add_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum)
{
	(void)in, (void)out, (void)save;
	be->accumulate(be, din[0], dout, c->out_n, accum);
	be->accumulate(be, din[1], dout, c->out_n, accum);
}

static const int32_t xent_labels[4] = {2, 0, 4, 2};
static void xent_ref(const struct lcase *c, double *const *in, double *out)
{
	int V = c->C;
	for (int b = 0; b < c->B; b++) {
		const double *z = in[0] + b * V;
		double mx = z[0], s = 0;
		for (int v = 1; v < V; v++)
			mx = z[v] > mx ? z[v] : mx;
		for (int v = 0; v < V; v++)
			s += exp(z[v] - mx);
		double loss = 0;
		for (int v = 0; v < V; v++) {
			double t = c->smoothing / V +
				   (v == xent_labels[b] ? 1 - c->smoothing : 0);
			loss -= t * (z[v] - mx - log(s));
		}
		out[b] = loss;
	}
}
static void xent_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		     float *out, float *save)
{
	be->softmax_xent_forward(be, out, save, in[0], xent_labels, c->B, c->C,
				 c->smoothing);
}
static void xent_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		     const float *out, const float *dout, float *const *din,
		     float *save, int accum)
{
	(void)in, (void)out, (void)accum;
	be->softmax_xent_backward(be, din[0], save, xent_labels, c->B, c->C,
				  c->smoothing, dout[0]);
}

/* Sigmoid cross-entropy: logits (B) against 0/1 labels, smoothing s. */
static const int32_t sig_labels[5] = {1, 0, 0, 1, 1};
static void sigxent_ref(const struct lcase *c, double *const *in, double *out)
{
	for (int b = 0; b < c->B; b++) {
		double z = 4.0 * in[0][b]; /* reach the saturated parts too */
		double t = (1 - c->smoothing) * sig_labels[b] + 0.5 * c->smoothing;
		double p = 1.0 / (1.0 + exp(-z));
		out[b] = -(t * log(p) + (1 - t) * log(1 - p));
	}
}
static void sigxent_fwd(const struct lcase *c, apf_backend *be,
			float *const *in, float *out, float *save)
{
	float z[8];
	for (int b = 0; b < c->B; b++)
		z[b] = 4.0f * in[0][b];
	be->sigmoid_xent_forward(be, out, save, z, sig_labels, c->B,
				 c->smoothing);
}
static void sigxent_bwd(const struct lcase *c, apf_backend *be,
			float *const *in, const float *out, const float *dout,
			float *const *din, float *save, int accum)
{
	(void)in, (void)out, (void)accum;
	be->sigmoid_xent_backward(be, din[0], save, sig_labels, c->B,
				  c->smoothing, dout[0]);
	for (int b = 0; b < c->B; b++)
		din[0][b] *= 4.0f; /* the chain rule of the scaling above */
}

/* Embedding: two fields of 4 and 3 rows (V = 7, D = 3) read by B = 3
 * examples, rows 1 (field 0) and 4 (field 1's 0) twice each, so backward
 * must add rows hit more than once. */
static const int32_t emb_idx[6] = {1, 0, 1, 2, 3, 0};
static const int32_t emb_off[2] = {0, 4};
static void emb_ref(const struct lcase *c, double *const *in, double *out)
{
	for (int b = 0; b < c->B; b++)
		for (int f = 0; f < 2; f++)
			for (int d = 0; d < c->C; d++)
				out[(b * 2 + f) * c->C + d] =
					in[0][(emb_off[f] + emb_idx[b * 2 + f]) *
						      c->C + d];
}
static void emb_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save)
{
	(void)save;
	be->embedding_forward(be, out, emb_idx, 2, emb_off, in[0], c->B, 2,
			      c->C);
}
static void emb_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum)
{
	(void)in, (void)out, (void)save, (void)accum;
	be->embedding_backward(be, din[0], dout, emb_idx, 2, emb_off, c->B, 2,
			       7, c->C);
}

/* Dot interaction: dense (B,D), emb (B,E,D) -> (B, D + F(F-1)/2). */
static void inter_ref(const struct lcase *c, double *const *in, double *out)
{
	int E = c->W, D = c->C, F = E + 1;
	int OC = D + F * (F - 1) / 2;
	for (int b = 0; b < c->B; b++) {
		double *o = out + b * OC;
		const double *v[16];
		v[0] = in[0] + b * D;
		for (int k = 1; k < F; k++)
			v[k] = in[1] + (b * E + k - 1) * D;
		for (int d = 0; d < D; d++)
			o[d] = v[0][d];
		int p = D;
		for (int i = 1; i < F; i++)
			for (int j = 0; j < i; j++) {
				double s = 0;
				for (int d = 0; d < D; d++)
					s += v[i][d] * v[j][d];
				o[p++] = s;
			}
	}
}
static void inter_fwd(const struct lcase *c, apf_backend *be,
		      float *const *in, float *out, float *save)
{
	(void)save;
	be->interaction_forward(be, out, in[0], in[1], c->B, c->W, c->C);
}
static void inter_bwd(const struct lcase *c, apf_backend *be,
		      float *const *in, const float *out, const float *dout,
		      float *const *din, float *save, int accum)
{
	(void)out, (void)save;
	be->interaction_backward(be, din[0], din[1], dout, in[0], in[1], c->B,
				 c->W, c->C, accum, accum);
}

/* Transposed 2x2 stride-2 convolution: inp (B,H,W,C), weight (OC,2,2,C),
 * bias (OC) when nin is 3 -> out (B,2H,2W,OC). */
static void upconv_ref(const struct lcase *c, double *const *in, double *out)
{
	int H = c->H, W = c->W, C = c->C, OC = c->OC;
	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < H; h++)
			for (int w = 0; w < W; w++)
				for (int i = 0; i < 2; i++)
					for (int j = 0; j < 2; j++)
						for (int o = 0; o < OC; o++) {
							double s = c->nin > 2 ? in[2][o] : 0;
							for (int k = 0; k < C; k++)
								s += in[0][((b * H + h) * W + w) * C + k] *
								     in[1][((o * 2 + i) * 2 + j) * C + k];
							out[((b * 2 * H + 2 * h + i) * 2 * W + 2 * w + j) * OC + o] = s;
						}
}
static void upconv_fwd(const struct lcase *c, apf_backend *be,
		       float *const *in, float *out, float *save)
{
	(void)save;
	be->upconv2x2_forward(be, out, in[0], in[1], c->nin > 2 ? in[2] : NULL,
			      c->B, c->H, c->W, c->C, c->OC);
}
static void upconv_bwd(const struct lcase *c, apf_backend *be,
		       float *const *in, const float *out, const float *dout,
		       float *const *din, float *save, int accum)
{
	(void)out, (void)save;
	be->upconv2x2_backward(be, din[0], din[1], c->nin > 2 ? din[2] : NULL,
			       dout, in[0], in[1], c->B, c->H, c->W, c->C,
			       c->OC, accum);
}

/* Concatenation: a (B,C), b (B,OC) -> (B,C+OC). */
static void concat_ref(const struct lcase *c, double *const *in, double *out)
{
	int Co = c->C + c->OC;
	for (int n = 0; n < c->B; n++) {
		for (int k = 0; k < c->C; k++)
			out[n * Co + k] = in[0][n * c->C + k];
		for (int k = 0; k < c->OC; k++)
			out[n * Co + c->C + k] = in[1][n * c->OC + k];
	}
}
static void concat_fwd(const struct lcase *c, apf_backend *be,
		       float *const *in, float *out, float *save)
{
	(void)save;
	be->concat_forward(be, out, in[0], in[1], c->B, c->C, c->OC);
}
static void concat_bwd(const struct lcase *c, apf_backend *be,
		       float *const *in, const float *out, const float *dout,
		       float *const *din, float *save, int accum)
{
	(void)in, (void)out, (void)save;
	be->concat_backward(be, din[0], din[1], dout, c->B, c->C, c->OC, accum,
			    accum);
}

/* Instance norm of inp (B, H*W, C) per (b, c), eps 1e-5. */
static void instnorm_ref(const struct lcase *c, double *const *in, double *out)
{
	int HW = c->H * c->W, C = c->C;
	for (int b = 0; b < c->B; b++)
		for (int k = 0; k < C; k++) {
			const double *x = in[0] + (size_t)b * HW * C + k;
			double m = 0, v = 0;
			for (int p = 0; p < HW; p++)
				m += x[p * C];
			m /= HW;
			for (int p = 0; p < HW; p++)
				v += (x[p * C] - m) * (x[p * C] - m);
			v /= HW;
			for (int p = 0; p < HW; p++)
				out[((size_t)b * HW + p) * C + k] =
					(x[p * C] - m) / sqrt(v + 1e-5) * in[1][k] +
					in[2][k];
		}
}
static void instnorm_fwd(const struct lcase *c, apf_backend *be,
			 float *const *in, float *out, float *save)
{
	be->instnorm_forward(be, out, save, save + c->B * c->C, in[0], in[1],
			     in[2], c->B, c->H * c->W, c->C, 1e-5f);
}
static void instnorm_bwd(const struct lcase *c, apf_backend *be,
			 float *const *in, const float *out, const float *dout,
			 float *const *din, float *save, int accum)
{
	(void)out;
	be->instnorm_backward(be, din[0], din[1], din[2], dout, in[0], in[1],
			      save, save + c->B * c->C, c->B, c->H * c->W,
			      c->C, accum);
}

/* L1 loss of pred (B, n = C) against a fixed target. */
static const float l1_target[10] = {0.3f,  -0.7f, 0.05f, 0.9f,  -0.2f,
				    -0.45f, 0.6f, -0.95f, 0.15f, 0.0f};
static void l1_ref(const struct lcase *c, double *const *in, double *out)
{
	for (int b = 0; b < c->B; b++) {
		double s = 0;
		for (int i = 0; i < c->C; i++)
			s += fabs(in[0][b * c->C + i] - l1_target[b * c->C + i]);
		out[b] = s / c->C;
	}
}
static void l1_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		   float *out, float *save)
{
	(void)save;
	be->l1_forward(be, out, in[0], l1_target, c->B, c->C);
}
static void l1_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		   const float *out, const float *dout, float *const *din,
		   float *save, int accum)
{
	(void)out, (void)save, (void)accum;
	be->l1_backward(be, din[0], in[0], l1_target, c->B, c->C, dout[0]);
}

/* Causal self-attention: qkv (B,T,3C) -> out (B,T,C), NH heads of C/NH. */
static void attn_ref(const struct lcase *c, double *const *in, double *out)
{
	int T = c->T, C = c->C, hs = C / c->NH;
	double *s = malloc((size_t)T * sizeof *s);
	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < c->NH; h++)
			for (int t = 0; t < T; t++) {
				const double *q = in[0] + (size_t)(b * T + t) * 3 * C + h * hs;
				double m = -INFINITY, sum = 0;
				for (int t2 = 0; t2 <= t; t2++) {
					const double *k = in[0] + (size_t)(b * T + t2) * 3 * C + C + h * hs;
					double d = 0;
					for (int i = 0; i < hs; i++)
						d += q[i] * k[i];
					s[t2] = c->scale * d;
					m = s[t2] > m ? s[t2] : m;
				}
				for (int t2 = 0; t2 <= t; t2++) {
					s[t2] = exp(s[t2] - m);
					sum += s[t2];
				}
				double *o = out + (size_t)(b * T + t) * C + h * hs;
				for (int i = 0; i < hs; i++) {
					double acc = 0;
					for (int t2 = 0; t2 <= t; t2++)
						acc += s[t2] / sum *
						       in[0][(size_t)(b * T + t2) * 3 * C + 2 * C + h * hs + i];
					o[i] = acc;
				}
			}
	free(s);
}
static void attn_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		     float *out, float *save)
{
	be->attention_forward(be, out, save, in[0], c->B, c->T, c->C, c->NH,
			      c->scale);
}
static void attn_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		     const float *out, const float *dout, float *const *din,
		     float *save, int accum)
{
	(void)out;
	be->attention_backward(be, din[0], dout, in[0], save, c->B, c->T, c->C,
			       c->NH, c->scale, accum);
}

/* Gated linear unit: inp (N,2H) -> act(first half) * second half, N = B,
 * H = C. */
static void glu_ref(const struct lcase *c, double *const *in, double *out)
{
	int H = c->C;
	for (int n = 0; n < c->B; n++)
		for (int j = 0; j < H; j++)
			out[n * H + j] = act_d(c->act, in[0][n * 2 * H + j]) *
					 in[0][n * 2 * H + H + j];
}
static void glu_fwd(const struct lcase *c, apf_backend *be, float *const *in,
		    float *out, float *save)
{
	(void)save;
	be->glu_forward(be, c->act, out, in[0], c->B, c->C);
}
static void glu_bwd(const struct lcase *c, apf_backend *be, float *const *in,
		    const float *out, const float *dout, float *const *din,
		    float *save, int accum)
{
	(void)out, (void)save;
	be->glu_backward(be, c->act, din[0], dout, in[0], c->B, c->C, accum);
}

/* ---- the checker ---------------------------------------------------------- */

static double *dup_d(const double *x, size_t n)
{
	double *d = malloc(n * sizeof *d);
	memcpy(d, x, n * sizeof *d);
	return d;
}

static double loss_of(const struct lcase *c, double *const *in, const double *r,
		      double *out)
{
	c->ref(c, in, out);
	double L = 0;
	for (size_t i = 0; i < c->out_n; i++)
		L += r[i] * out[i];
	return L;
}

static void check_layer_on(const struct lcase *c, apf_backend *be)
{
	apf_rng_key key = {7, 0, 0, APF_RNG_TEST};
	apf_rng rng;
	apf_rng_init(&rng, &key, (uint64_t)strlen(c->name));
	double *ind[MAXIN] = {0};
	float *inf[MAXIN] = {0}, *dinf[MAXIN] = {0}, *dacc[MAXIN] = {0};
	for (int k = 0; k < c->nin; k++) {
		ind[k] = malloc(c->in_n[k] * sizeof(double));
		inf[k] = malloc(c->in_n[k] * sizeof(float));
		dinf[k] = malloc(c->in_n[k] * sizeof(float));
		dacc[k] = malloc(c->in_n[k] * sizeof(float));
		for (size_t i = 0; i < c->in_n[k]; i++) {
			/* Values representable in float, so both sides see
			 * the same inputs. */
			inf[k][i] = 2.0f * apf_rng_uniform(&rng) - 1.0f;
			ind[k][i] = inf[k][i];
		}
	}
	double *outd = malloc(c->out_n * sizeof *outd);
	double *r = malloc(c->out_n * sizeof *r);
	float *outf = malloc(c->out_n * sizeof *outf);
	float *rf = malloc(c->out_n * sizeof *rf);
	float *save = calloc(1 << 16, sizeof *save);
	for (size_t i = 0; i < c->out_n; i++) {
		rf[i] = c->uniform_dout ? 0.37f : 2.0f * apf_rng_uniform(&rng) - 1.0f;
		r[i] = rf[i];
	}
	/* forward against the reference */
	c->ref(c, ind, outd);
	c->fwd(c, be, inf, outf, save);
	for (size_t i = 0; i < c->out_n; i++)
		if (fabs(outf[i] - outd[i]) > 1e-5 + 1e-4 * fabs(outd[i]))
			fail_msg("%s: forward[%zu] = %.7g, reference %.7g", c->name,
				 i, outf[i], outd[i]);
	/* backward against central differences of the reference */
	c->bwd(c, be, inf, outf, rf, dinf, save, 0);
	const double h = 1e-6;
	double *tmp = malloc(c->out_n * sizeof *tmp);
	for (int k = 0; k < c->nin; k++) {
		double *saved = dup_d(ind[k], c->in_n[k]);
		for (size_t i = 0; i < c->in_n[k]; i++) {
			ind[k][i] = saved[i] + h;
			double lp = loss_of(c, ind, r, tmp);
			ind[k][i] = saved[i] - h;
			double lm = loss_of(c, ind, r, tmp);
			ind[k][i] = saved[i];
			double num = (lp - lm) / (2 * h);
			if (fabs(dinf[k][i] - num) > 2e-4 + 2e-3 * fabs(num))
				fail_msg("%s: d input %d [%zu] = %.7g, finite "
					 "difference %.7g",
					 c->name, k, i, dinf[k][i], num);
		}
		free(saved);
	}
	/* accumulate mode adds exactly what write mode writes (softmax
	 * cross-entropy's backward has no accumulate mode) */
	if (c->ref != xent_ref && !c->no_accum) {
		for (int k = 0; k < c->nin; k++)
			for (size_t i = 0; i < c->in_n[k]; i++)
				dacc[k][i] = 0.5f;
		c->fwd(c, be, inf, outf, save);
		c->bwd(c, be, inf, outf, rf, dacc, save, 1);
		for (size_t i = 0; i < c->in_n[0]; i++)
			if (fabsf(dacc[0][i] - (0.5f + dinf[0][i])) > 1e-6f)
				fail_msg("%s: accumulate [%zu] = %g, want 0.5 + %g",
					 c->name, i, dacc[0][i], dinf[0][i]);
	}
	for (int k = 0; k < c->nin; k++) {
		free(ind[k]);
		free(inf[k]);
		free(dinf[k]);
		free(dacc[k]);
	}
	free(tmp);
	free(outd);
	free(r);
	free(outf);
	free(rf);
	free(save);
}

/* On the plain backend and on the default one (its fast kernels where the
 * CPU has them). */
static void check_layer(const struct lcase *c)
{
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_plain_new(&be, 1));
	check_layer_on(c, be);
	apf_backend_free(be);
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	check_layer_on(c, be);
	apf_backend_free(be);
}

static void linear_gradients_match_finite_differences(void **state)
{
	(void)state;
	struct lcase c = {.name = "linear", .nin = 3, .B = 3, .C = 5, .OC = 4,
			  .ref = linear_ref, .fwd = linear_fwd, .bwd = linear_bwd};
	c.in_n[0] = 15, c.in_n[1] = 20, c.in_n[2] = 4, c.out_n = 12;
	check_layer(&c);
}

static void conv_case(int B, int H, int W, int C, int OC, int K, int S, int P)
{
	struct lcase c = {.name = "conv2d", .nin = 3, .B = B, .H = H, .W = W,
			  .C = C, .OC = OC, .K = K, .S = S, .P = P,
			  .ref = conv_ref, .fwd = conv_fwd, .bwd = conv_bwd};
	c.in_n[0] = (size_t)B * H * W * C;
	c.in_n[1] = (size_t)OC * K * K * C;
	c.in_n[2] = (size_t)OC;
	c.out_n = (size_t)B * outdim(H, K, S, P) * outdim(W, K, S, P) * OC;
	check_layer(&c);
}

static void conv2d_gradients_match_finite_differences(void **state)
{
	(void)state;
	conv_case(2, 5, 4, 3, 4, 3, 1, 1); /* padded 3x3 */
	conv_case(2, 5, 5, 2, 3, 3, 2, 1); /* strided */
	conv_case(2, 3, 3, 4, 3, 1, 1, 0); /* pointwise: GEMM on the input */
	conv_case(1, 5, 5, 3, 2, 1, 2, 0); /* 1x1 projection, stride 2 */
	conv_case(1, 6, 6, 1, 2, 5, 1, 2); /* 5x5, one input channel */
	/* shapes the fast kernels take: Winograd, direct with stride 2 */
	conv_case(1, 4, 3, 16, 16, 3, 1, 1);
	conv_case(1, 5, 5, 16, 16, 3, 2, 1);
}

static void batchnorm_gradients_match_finite_differences(void **state)
{
	(void)state;
	struct lcase c = {.name = "batchnorm", .nin = 3, .B = 2, .H = 2, .W = 2,
			  .C = 3, .ref = bn_ref, .fwd = bn_fwd, .bwd = bn_bwd};
	c.in_n[0] = 24, c.in_n[1] = 3, c.in_n[2] = 3, c.out_n = 24;
	check_layer(&c);
	c.C = 10; /* a vector of 8 channels and a tail */
	c.in_n[0] = 80, c.in_n[1] = 10, c.in_n[2] = 10, c.out_n = 80;
	check_layer(&c);
}

static void layernorm_gradients_match_finite_differences(void **state)
{
	(void)state;
	struct lcase c = {.name = "layernorm", .nin = 3, .B = 4, .C = 5,
			  .ref = ln_ref, .fwd = ln_fwd, .bwd = ln_bwd};
	c.in_n[0] = 20, c.in_n[1] = 5, c.in_n[2] = 5, c.out_n = 20;
	check_layer(&c);
}

static void activation_gradients_match_finite_differences(void **state)
{
	(void)state;
	const int acts[] = {APF_ACT_RELU, APF_ACT_GELU, APF_ACT_SILU,
			    APF_ACT_TANH};
	for (int i = 0; i < 4; i++) {
		struct lcase c = {.name = apf_activation_name(acts[i]), .nin = 1,
				  .act = acts[i], .ref = act_ref,
				  .fwd = act_fwd, .bwd = act_bwd};
		c.in_n[0] = 37, c.out_n = 37;
		check_layer(&c);
	}
}

static void pool_case(const char *name, int is_max, int B, int H, int W, int C,
		      int K, int S, int P)
{
	struct lcase c = {.name = name, .nin = 1, .B = B, .H = H, .W = W,
			  .C = C, .K = K, .S = S, .P = P,
			  .ref = is_max ? maxpool_ref : avgpool_ref,
			  .fwd = is_max ? maxpool_fwd : avgpool_fwd,
			  .bwd = is_max ? maxpool_bwd : avgpool_bwd};
	c.in_n[0] = (size_t)B * H * W * C;
	c.out_n = (size_t)B * outdim(H, K, S, P) * outdim(W, K, S, P) * C;
	check_layer(&c);
}

static void pooling_gradients_match_finite_differences(void **state)
{
	(void)state;
	pool_case("maxpool", 1, 2, 4, 4, 2, 2, 2, 0);
	pool_case("maxpool overlapping", 1, 1, 5, 5, 2, 3, 2, 1);
	pool_case("avgpool", 0, 2, 4, 4, 2, 2, 2, 0);
	pool_case("avgpool padded", 0, 1, 5, 4, 3, 3, 1, 1);
	struct lcase g = {.name = "global_avgpool", .nin = 1, .B = 2, .H = 2,
			  .W = 3, .C = 3, .ref = gap_ref, .fwd = gap_fwd,
			  .bwd = gap_bwd};
	g.in_n[0] = 36, g.out_n = 6;
	check_layer(&g);
}

static void dropout_add_and_loss_gradients_match_finite_differences(void **state)
{
	(void)state;
	struct lcase d = {.name = "dropout", .nin = 1, .p = 0.3f,
			  .ref = dropout_ref, .fwd = dropout_fwd,
			  .bwd = dropout_bwd};
	d.in_n[0] = 41, d.out_n = 41;
	check_layer(&d);
	struct lcase a = {.name = "add", .nin = 2, .ref = add_ref,
			  .fwd = add_fwd, .bwd = add_bwd};
	a.in_n[0] = a.in_n[1] = 9, a.out_n = 9;
	check_layer(&a);
	for (int s = 0; s < 2; s++) {
		struct lcase x = {.name = "softmax_xent", .nin = 1, .B = 4,
				  .C = 5, .smoothing = s ? 0.1f : 0.0f,
				  .uniform_dout = 1, .ref = xent_ref,
				  .fwd = xent_fwd, .bwd = xent_bwd};
		x.in_n[0] = 20, x.out_n = 4;
		check_layer(&x);
	}
}

static void click_layers_gradients_match_finite_differences(void **state)
{
	(void)state;
	for (int s = 0; s < 2; s++) {
		struct lcase x = {.name = "sigmoid_xent", .nin = 1, .B = 5,
				  .smoothing = s ? 0.1f : 0.0f,
				  .uniform_dout = 1, .no_accum = 1,
				  .ref = sigxent_ref, .fwd = sigxent_fwd,
				  .bwd = sigxent_bwd};
		x.in_n[0] = 5, x.out_n = 5;
		check_layer(&x);
	}
	struct lcase e = {.name = "embedding", .nin = 1, .B = 3, .C = 3,
			  .no_accum = 1, .ref = emb_ref, .fwd = emb_fwd,
			  .bwd = emb_bwd};
	e.in_n[0] = 7 * 3, e.out_n = 3 * 2 * 3;
	check_layer(&e);
	struct lcase d = {.name = "interaction", .nin = 2, .B = 2, .W = 3,
			  .C = 4, .ref = inter_ref, .fwd = inter_fwd,
			  .bwd = inter_bwd};
	d.in_n[0] = 2 * 4, d.in_n[1] = 2 * 3 * 4, d.out_n = 2 * (4 + 6);
	check_layer(&d);
}

static void upconv_case(int nin)
{
	struct lcase c = {.name = nin > 2 ? "upconv2x2" : "upconv2x2 no bias",
			  .nin = nin, .B = 2, .H = 2, .W = 3, .C = 3, .OC = 2,
			  .ref = upconv_ref, .fwd = upconv_fwd,
			  .bwd = upconv_bwd};
	c.in_n[0] = 2 * 2 * 3 * 3, c.in_n[1] = 2 * 4 * 3, c.in_n[2] = 2;
	c.out_n = 2 * 4 * 6 * 2;
	check_layer(&c);
}

static void image_layers_gradients_match_finite_differences(void **state)
{
	(void)state;
	upconv_case(3);
	upconv_case(2);
	struct lcase k = {.name = "concat", .nin = 2, .B = 3, .C = 2, .OC = 4,
			  .ref = concat_ref, .fwd = concat_fwd,
			  .bwd = concat_bwd};
	k.in_n[0] = 3 * 2, k.in_n[1] = 3 * 4, k.out_n = 3 * 6;
	check_layer(&k);
	struct lcase n = {.name = "instnorm", .nin = 3, .B = 2, .H = 2, .W = 3,
			  .C = 3, .ref = instnorm_ref, .fwd = instnorm_fwd,
			  .bwd = instnorm_bwd};
	n.in_n[0] = 2 * 6 * 3, n.in_n[1] = 3, n.in_n[2] = 3, n.out_n = 2 * 6 * 3;
	check_layer(&n);
	struct lcase l = {.name = "l1", .nin = 1, .B = 2, .C = 5,
			  .uniform_dout = 1, .no_accum = 1, .ref = l1_ref,
			  .fwd = l1_fwd, .bwd = l1_bwd};
	l.in_n[0] = 10, l.out_n = 2;
	check_layer(&l);
}

/* One shape of image_layers_give_the_same_bits_on_one_and_two_threads. */
static void image_layers_bits_case(apf_backend *b1, apf_backend *b2, int B,
				   int H, int W, int C, int OC)
{
	apf_backend *be[2] = {b1, b2};
	size_t nx = (size_t)B * H * W * C, nw = (size_t)OC * 4 * C;
	size_t ny = (size_t)B * 4 * H * W * OC, nbc = (size_t)B * C;
	float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc(OC * 4);
	float *dy = malloc(ny * 4), *dz = malloc(nx * 4), *sc = malloc(C * 4);
	float *bi = malloc(C * 4), *y[2], *dx[2], *dw[2], *db[2], *z[2];
	float *m[2], *rs[2], *dxi[2], *ds[2], *dbi[2];
	apf_rng_key key = {9, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, (uint64_t)B);
	for (size_t i = 0; i < nx; i++)
		x[i] = apf_rng_normal(&r) + 0.5f, dz[i] = apf_rng_normal(&r);
	for (size_t i = 0; i < nw; i++)
		w[i] = apf_rng_normal(&r) * 0.2f;
	for (int o = 0; o < OC; o++)
		bias[o] = 0.01f * o;
	for (size_t i = 0; i < ny; i++)
		dy[i] = apf_rng_normal(&r);
	for (int c = 0; c < C; c++)
		sc[c] = 1.0f + 0.1f * c, bi[c] = 0.02f * c;
	for (int k = 0; k < 2; k++) {
		y[k] = malloc(ny * 4), dx[k] = malloc(nx * 4);
		dw[k] = malloc(nw * 4), db[k] = malloc(OC * 4);
		z[k] = malloc(nx * 4), m[k] = malloc(nbc * 4);
		rs[k] = malloc(nbc * 4), dxi[k] = malloc(nx * 4);
		ds[k] = malloc(C * 4), dbi[k] = malloc(C * 4);
		be[k]->upconv2x2_forward(be[k], y[k], x, w, bias, B, H, W, C, OC);
		be[k]->upconv2x2_backward(be[k], dx[k], dw[k], db[k], dy, x, w,
					  B, H, W, C, OC, 0);
		be[k]->instnorm_forward(be[k], z[k], m[k], rs[k], x, sc, bi, B,
					H * W, C, 1e-5f);
		be[k]->instnorm_backward(be[k], dxi[k], ds[k], dbi[k], dz, x,
					 sc, m[k], rs[k], B, H * W, C, 0);
		assert_apf_ok(be[k]->sync(be[k]));
	}
	assert_memory_equal(y[0], y[1], ny * 4);
	assert_memory_equal(dx[0], dx[1], nx * 4);
	assert_memory_equal(dw[0], dw[1], nw * 4);
	assert_memory_equal(db[0], db[1], OC * 4);
	assert_memory_equal(z[0], z[1], nx * 4);
	assert_memory_equal(m[0], m[1], nbc * 4);
	assert_memory_equal(rs[0], rs[1], nbc * 4);
	assert_memory_equal(dxi[0], dxi[1], nx * 4);
	assert_memory_equal(ds[0], ds[1], C * 4);
	assert_memory_equal(dbi[0], dbi[1], C * 4);
	/* no input gradient asked for: the parameter gradients keep their bits */
	b2->upconv2x2_backward(b2, NULL, dw[1], db[1], dy, x, w, B, H, W, C, OC,
			       0);
	b2->instnorm_backward(b2, NULL, ds[1], dbi[1], dz, x, sc, m[1], rs[1],
			      B, H * W, C, 0);
	assert_memory_equal(dw[0], dw[1], nw * 4);
	assert_memory_equal(db[0], db[1], OC * 4);
	assert_memory_equal(ds[0], ds[1], C * 4);
	assert_memory_equal(dbi[0], dbi[1], C * 4);
	for (int k = 0; k < 2; k++) {
		free(y[k]), free(dx[k]), free(dw[k]), free(db[k]), free(z[k]);
		free(m[k]), free(rs[k]), free(dxi[k]), free(ds[k]), free(dbi[k]);
	}
	free(x), free(w), free(bias), free(dy), free(dz), free(sc), free(bi);
}

/* Transposed convolution and instance norm never split a sum across
 * threads, so their bits do not depend on the thread count; the second
 * shape is large enough for the threaded scatter, gather and norm. */
static void image_layers_give_the_same_bits_on_one_and_two_threads(void **state)
{
	(void)state;
	apf_backend *b1, *b2;
	assert_apf_ok(apf_backend_cpu_new(&b1, 1));
	assert_apf_ok(apf_backend_cpu_new(&b2, 2));
	image_layers_bits_case(b1, b2, 4, 14, 14, 16, 8);
	image_layers_bits_case(b1, b2, 8, 14, 14, 32, 16);
	apf_backend_free(b1);
	apf_backend_free(b2);
}

static void attn_case(int B, int T, int C, int NH, float scale)
{
	struct lcase c = {.name = "attention", .nin = 1, .B = B, .T = T,
			  .C = C, .NH = NH, .scale = scale, .ref = attn_ref,
			  .fwd = attn_fwd, .bwd = attn_bwd};
	c.in_n[0] = (size_t)B * T * 3 * C;
	c.out_n = (size_t)B * T * C;
	check_layer(&c);
}

static void sequence_layers_gradients_match_finite_differences(void **state)
{
	(void)state;
	attn_case(2, 5, 6, 2, 1.0f / sqrtf(3.0f));
	attn_case(2, 5, 6, 2, 2.5f);  /* sharp softmax */
	attn_case(1, 7, 8, 1, 0.35f); /* one head, the whole width */
	attn_case(2, 1, 4, 2, 0.5f);  /* one position: attends to itself */
	/* head size 41 = blocks of 32, 8 and 1 columns; 18 keys span two
	 * register blocks of keys */
	attn_case(1, 18, 41, 1, 0.15f);
	const int acts[] = {APF_ACT_RELU, APF_ACT_GELU, APF_ACT_SILU,
			    APF_ACT_TANH};
	for (int i = 0; i < 4; i++) {
		struct lcase c = {.name = "glu", .nin = 1, .B = 3, .C = 7,
				  .act = acts[i], .ref = glu_ref,
				  .fwd = glu_fwd, .bwd = glu_bwd};
		c.in_n[0] = 3 * 2 * 7, c.out_n = 3 * 7;
		check_layer(&c);
	}
}

/* qkv (nqkv) and dout (nout): normal draws from key, in that order. */
static void attn_draws(const apf_rng_key *key, size_t nqkv, size_t nout,
		       float **qkv, float **dout)
{
	apf_rng r;
	apf_rng_init(&r, key, 0);
	*qkv = malloc(nqkv * 4);
	*dout = malloc(nout * 4);
	assert_non_null(*qkv);
	assert_non_null(*dout);
	for (size_t i = 0; i < nqkv; i++)
		(*qkv)[i] = apf_rng_normal(&r);
	for (size_t i = 0; i < nout; i++)
		(*dout)[i] = apf_rng_normal(&r);
}

/* Each (batch, head) pair is computed whole by one thread, so out, att and
 * dqkv have the same bits on any thread count; att is causal and each row
 * a distribution. */
static void attention_is_thread_count_invariant_and_causal(void **state)
{
	(void)state;
	enum { B = 3, T = 17, C = 32, NH = 4 };
	size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
	size_t natt = (size_t)B * NH * T * T;
	apf_rng_key key = {9, 0, 0, APF_RNG_TEST};
	float *qkv, *dout;
	attn_draws(&key, nqkv, nout, &qkv, &dout);
	float *out[3], *att[3], *dqkv[3];
	for (int k = 0; k < 3; k++) {
		apf_backend *be;
		assert_apf_ok(apf_backend_cpu_new(&be, k + 1));
		out[k] = malloc(nout * 4);
		att[k] = malloc(natt * 4);
		dqkv[k] = malloc(nqkv * 4);
		/* stale values the layer must overwrite */
		for (size_t i = 0; i < natt; i++)
			att[k][i] = 7.0f;
		for (size_t i = 0; i < nqkv; i++)
			dqkv[k][i] = 7.0f;
		be->attention_forward(be, out[k], att[k], qkv, B, T, C, NH,
				      0.25f);
		be->attention_backward(be, dqkv[k], dout, qkv, att[k], B, T, C,
				       NH, 0.25f, 0);
		assert_apf_ok(be->sync(be));
		apf_backend_free(be);
	}
	for (int k = 1; k < 3; k++) {
		assert_memory_equal(out[0], out[k], nout * 4);
		assert_memory_equal(att[0], att[k], natt * 4);
		assert_memory_equal(dqkv[0], dqkv[k], nqkv * 4);
	}
	for (size_t row = 0; row < (size_t)B * NH * T; row++) {
		size_t t = row % T;
		const float *a = att[0] + row * T;
		double sum = 0;
		for (size_t t2 = 0; t2 < T; t2++) {
			if (t2 > t && a[t2] != 0.0f)
				fail_msg("att row %zu [%zu] = %g above the "
					 "diagonal", row, t2, a[t2]);
			assert_true(a[t2] >= 0.0f);
			sum += a[t2];
		}
		if (fabs(sum - 1.0) > 1e-6)
			fail_msg("att row %zu sums to %.9g", row, sum);
	}
	/* dqkv fully written: no stale 7 left */
	for (size_t i = 0; i < nqkv; i++)
		assert_true(dqkv[0][i] != 7.0f);
	for (int k = 0; k < 3; k++)
		free(out[k]), free(att[k]), free(dqkv[k]);
	free(qkv), free(dout);
}

/* The CPU backend on path isa (isa.h, through APF_CPU_ISA) with threads
 * threads, or NULL where this CPU has no such path. */
static apf_backend *backend_on_path(int isa, int threads)
{
	if (!(apf_cpu_isa_available() & (1u << isa)))
		return NULL;
	apf_backend *be;
	assert_int_equal(setenv("APF_CPU_ISA", apf_cpu_isa_name(isa), 1), 0);
	assert_apf_ok(apf_backend_cpu_new(&be, threads));
	unsetenv("APF_CPU_ISA");
	return be;
}

/* Attention as every recorded run computed it: the digest of out, att and
 * dqkv (written, then added to a dqkv of 0.5s) for six shapes, on 1 and 2
 * threads on every path this CPU runs (the vector paths have their own
 * kernels where the head size is a multiple of their float vector: fma,
 * 4 to 8 keys a vector), taken from cpu.c's loops before any kernel was
 * added (re-evaluation and replay of an older run need these bits). The
 * inputs hold a head whose queries are 0 (every score 0: the softmax's
 * max of zeros), scores of 1e3 and -1e3 (all but one weight underflow),
 * and keys repeated exactly (ties for the max). */
static void attention_keeps_its_recorded_bits(void **state)
{
	(void)state;
	static const struct {
		int B, T, C, NH;
		float scale;
		const char *digest;
	} cases[] = {
		{2, 17, 32, 4, 0.35f,
		 "faebefe6ddb79ce94ca35ae9b96f0fa10b669d3a5a924090275a300e6b5e57df"},
		{1, 64, 64, 2, 0.17677669f,
		 "f4ecec311af0ac8d7e979a4e44b26bdb44b3192d2904c05085abdbb8ceb7bbc9"},
		{1, 18, 41, 1, 0.15f,
		 "5bed5cedc5000fe1497ed9d4d8f7247d690f553548565a18721fca4f8b542d54"},
		{3, 5, 6, 2, 2.5f,
		 "41d7c98e32fc001038f3ab41163ac4f44b85d100593f073467ea37a78233edb6"},
		{2, 23, 48, 3, 0.25f,
		 "ff18ff5328b0a85e3d2904357dab2d7acce3c8d3cac933f569b03ac97d9d1824"},
		{1, 9, 128, 2, 0.125f,
		 "b157240388f850f77a634b5f4778e986e4d4ea32b794944da5683975ab4f2c87"},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int B = cases[c].B, T = cases[c].T, C = cases[c].C;
		int NH = cases[c].NH, hs = C / NH;
		size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
		size_t natt = (size_t)B * NH * T * T;
		apf_rng_key key = {31, (uint32_t)c, 0, APF_RNG_TEST};
		float *qkv, *dout;
		attn_draws(&key, nqkv, nout, &qkv, &dout);
		for (int t = 0; t < T; t++) {
			float *row = qkv + (size_t)t * 3 * C;
			for (int d = 0; d < hs; d++) {
				row[d] = 0.0f; /* head 0 of batch 0: q = 0 */
				if (t % 3 == 1) /* keys of head 0 repeated */
					row[C + d] = qkv[C + d];
			}
			if (NH > 1 && t == T / 2) /* head 1: a huge score */
				row[hs] = 1e3f, row[C + hs] = 1e3f;
			if (NH > 1 && t == T / 2 + 1)
				row[hs] = -1e3f, row[C + hs] = 1.0f;
		}
		float *out = malloc(nout * 4), *att = malloc(natt * 4);
		float *dqkv = malloc(2 * nqkv * 4);
		for (int run = 0; run < 2 * (APF_CPU_ISA_AVX512 + 1); run++) {
			int threads = 1 + run % 2, isa = run / 2;
			apf_backend *be = backend_on_path(isa, threads);
			if (!be)
				continue;
			/* stale values the layers must overwrite */
			for (size_t i = 0; i < natt; i++)
				att[i] = 7.0f;
			for (size_t i = 0; i < nqkv; i++)
				dqkv[i] = 7.0f, dqkv[nqkv + i] = 0.5f;
			be->attention_forward(be, out, att, qkv, B, T, C, NH,
					      cases[c].scale);
			be->attention_backward(be, dqkv, dout, qkv, att, B, T,
					       C, NH, cases[c].scale, 0);
			be->attention_backward(be, dqkv + nqkv, dout, qkv, att,
					       B, T, C, NH, cases[c].scale, 1);
			assert_apf_ok(be->sync(be));
			apf_backend_free(be);
			char hex[APF_SHA256_HEX];
			testlib_digest_floats(hex, 3, (const float *[]){out, att, dqkv},
				   (size_t[]){nout, natt, 2 * nqkv});
			if (strcmp(hex, cases[c].digest))
				fail_msg("attention %dx%dx%d, %d heads, %s path, "
					 "%d threads: %s, recorded %s", B, T, C,
					 NH, apf_cpu_isa_name(isa), threads,
					 hex, cases[c].digest);
		}
		free(out), free(att), free(dqkv), free(qkv), free(dout);
	}
}

/* Layer norm as every recorded run computed it: the digest of y, mean,
 * rstd, dx (written, then added to), dscale and dbias for three shapes,
 * on 1, 2 and 3 threads, taken from the row-at-a-time loops before rows
 * were interleaved (re-evaluation and replay of an older run need these
 * bits). 1503, 33 and 7 rows over 1 to 3 threads leave 0 to 3 rows
 * after a thread's groups of four; rows whose mean dwarfs their spread
 * make the double sums count, and rows half of 1e16, or led by 1e30 and
 * -1e30, make them round, so that a changed order shows. */
static void layernorm_keeps_its_recorded_bits(void **state)
{
	(void)state;
	static const struct {
		int N, C;
		const char *digest;
	} cases[] = {
		{1503, 128,
		 "cfb75fc1077488d6cedf79d4911273a64c838734c342dfa40a5c8c1a0547b151"},
		{33, 100,
		 "b83d52aa7765ddb1fc430ae806ac1d0a05f1fec1d9e7cae06d30d0533fced640"},
		{7, 5,
		 "042d4fac4a4ed8eec99b0f15ec471ee0769704426a8abbd48594483d4ff000ae"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int N = cases[k].N, C = cases[k].C;
		size_t nx = (size_t)N * C;
		apf_rng_key key = {41, (uint32_t)k, 0, APF_RNG_TEST};
		apf_rng r;
		apf_rng_init(&r, &key, 0);
		float *x = malloc(nx * 4), *d = malloc(nx * 4);
		float *sc = malloc((size_t)C * 4), *bi = malloc((size_t)C * 4);
		for (size_t i = 0; i < nx; i++) {
			size_t n = i / (size_t)C, c = i % (size_t)C;
			x[i] = apf_rng_normal(&r) * (n % 3 ? 1.0f : 1e-3f) +
			       (n % 2 ? 300.0f : -0.5f);
			d[i] = apf_rng_normal(&r);
			/* rows whose double sums round, so that their order
			 * shows: half the row 1e16 times the rest */
			if (n % 4 == 3 && c < (size_t)C / 2)
				x[i] = 1e16f * (1 + apf_rng_normal(&r) * 0.01f);
			if (n % 6 == 5 && c < (size_t)C / 2)
				d[i] = 1e16f * (1 + apf_rng_normal(&r) * 0.01f);
			/* and rows that cancel: 1e30 and -1e30 first, so that
			 * in column order the rest survives, in any other not */
			if (n % 7 == 6 && c < 2)
				x[i] = c ? -1e30f : 1e30f;
			if (n % 9 == 8 && c < 2) {
				d[i] = c ? -1e30f : 1e30f;
				if (c) /* xhat too, so that dout xhat cancels */
					x[i] = x[i - 1];
			}
		}
		for (int c = 0; c < C; c++)
			sc[c] = 1 + apf_rng_normal(&r) * 0.1f,
			bi[c] = apf_rng_normal(&r);
		sc[0] = sc[1] = 1.0f; /* so dout's 1e30 and -1e30 cancel */
		float *y = malloc(nx * 4), *dx = malloc(nx * 4);
		float *st = malloc((size_t)2 * N * 4);
		float *dp = malloc((size_t)2 * C * 4);
		for (int threads = 1; threads <= 3; threads++) {
			apf_backend *be;
			assert_apf_ok(apf_backend_cpu_new(&be, threads));
			be->layernorm_forward(be, y, st, st + N, x, sc, bi, N, C,
					      1e-5f);
			be->layernorm_backward(be, dx, dp, dp + C, d, x, sc, st,
					       st + N, N, C, 0);
			be->layernorm_backward(be, dx, dp, dp + C, d, x, sc, st,
					       st + N, N, C, 1);
			assert_apf_ok(be->sync(be));
			apf_backend_free(be);
			char hex[APF_SHA256_HEX];
			testlib_digest_floats(hex, 4, (const float *[]){y, st, dx, dp},
				   (size_t[]){nx, (size_t)2 * N, nx,
					      (size_t)2 * C});
			if (strcmp(hex, cases[k].digest))
				fail_msg("layer norm %dx%d, %d threads: %s, "
					 "recorded %s", N, C, threads, hex,
					 cases[k].digest);
		}
		free(x), free(d), free(sc), free(bi), free(y), free(dx);
		free(st), free(dp);
	}
}

/* A DLRM-shaped net: dense (3) -> linear 4 -> relu; two embedding fields
 * of 5 and 3 rows (D 4); interaction; linear 6 -> relu -> linear 1. */
static apf_net *dlrm_net(apf_backend *be)
{
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 1, 1, 3));
	assert_apf_ok(apf_net_index_input(net, 2));
	int rows[2] = {5, 3};
	int b = apf_net_linear(net, 0, 4, 1, "bottom");
	b = apf_net_activation(net, b, APF_ACT_RELU);
	int e = apf_net_embedding(net, 0, 2, rows, 4, 0.5f, "emb");
	int t = apf_net_interaction(net, b, e);
	t = apf_net_linear(net, t, 6, 1, "top1");
	t = apf_net_activation(net, t, APF_ACT_TANH);
	t = apf_net_linear(net, t, 1, 1, "top2");
	assert_true(t > 0);
	assert_apf_ok(apf_net_finish(net, t));
	return net;
}

static void dlrm_net_gradient_matches_finite_differences(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net = dlrm_net(be);
	const apf_param *ep = apf_net_param(net, 2);
	assert_string_equal(ep->name, "emb.weight");
	assert_int_equal(ep->kind, APF_PARAM_EMBEDDING);
	assert_int_equal(ep->shape[0], 8);
	assert_int_equal(apf_net_out_features(net), 1);
	size_t np = apf_net_param_floats(net);
	float *params = calloc(np, 4), *g = calloc(np, 4);
	apf_net_bind(net, params, NULL);
	apf_rng_key key = {5, 0, 0, APF_RNG_INIT};
	assert_apf_ok(apf_net_init(net, &key, "he_normal"));
	for (size_t j = 0; j < ep->numel; j++) {
		float v = params[ep->offset + j];
		assert_true(v >= -0.5f && v <= 0.5f);
	}
	enum { B = 4 };
	float x[B * 3], r[B];
	int32_t idx[B * 2] = {4, 2, 0, 2, 4, 0, 1, 1};
	apf_rng rr;
	apf_rng_init(&rr, &key, 9);
	for (int i = 0; i < B * 3; i++)
		x[i] = apf_rng_normal(&rr);
	for (int i = 0; i < B; i++)
		r[i] = apf_rng_uniform(&rr) - 0.5f;
	const float *out;
	assert_apf_ok(apf_net_forward_idx(net, &out, x, idx, idx, B, 1, NULL, 0));
	assert_apf_ok(apf_net_backward(net, g, r));
	const float h = 1e-2f;
	int checked = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		for (size_t j = 0; j < p->numel; j++) {
			float *w = &params[p->offset + j], keep = *w;
			double L[2];
			for (int k = 0; k < 2; k++) {
				*w = keep + (k ? -h : h);
				assert_apf_ok(apf_net_forward_idx(
					net, &out, x, idx, idx, B, 1, NULL, 0));
				L[k] = 0;
				for (int b = 0; b < B; b++)
					L[k] += (double)r[b] * out[b];
			}
			*w = keep;
			double num = (L[0] - L[1]) / (2 * h);
			double got = g[p->offset + j];
			if (fabs(got - num) > 2e-3 + 3e-2 * fabs(num))
				fail_msg("%s[%zu]: backward %.6g, finite "
					 "difference %.6g",
					 p->name, j, got, num);
			checked++;
		}
	}
	assert_true(checked > 80);
	/* An index outside its field is refused before any lookup, and a
	 * forward without the indices is an error, not a read of NULL. */
	int32_t bad[B * 2] = {4, 2, 0, 3, 4, 0, 1, 1};
	assert_int_equal(apf_net_forward_idx(net, &out, x, bad, bad, B, 1,
					     NULL, 0),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "outside its field"));
	bad[3] = -1;
	assert_int_equal(apf_net_forward_idx(net, &out, x, bad, bad, B, 0,
					     NULL, 0),
			 APF_EINPUT);
	assert_int_equal(apf_net_forward(net, &out, x, B, 0, NULL, 0),
			 APF_EINTERNAL);
	free(params), free(g);
	apf_net_free(net);
	apf_backend_free(be);
}

static void dropout_keeps_the_stated_share(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	size_t n = 100000;
	float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
	for (size_t i = 0; i < n; i++)
		x[i] = 1.0f;
	be->dropout_forward(be, y, x, n, 0.25f, drop_key, 1);
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		assert_true(y[i] == 0.0f || fabsf(y[i] - 1.0f / 0.75f) < 1e-6f);
		kept += y[i] != 0.0f;
	}
	assert_true(fabs(kept / (double)n - 0.75) < 0.01);
	free(x);
	free(y);
	apf_backend_free(be);
}

/* Multi-chunk im2col (batches larger than one chunk) gives the same result
 * as the whole-batch reference, gradients included. */
static void conv_over_many_chunks_matches_reference(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	struct lcase c = {.B = 48, .H = 28, .W = 28, .C = 16, .OC = 16, .K = 3,
			  .S = 1, .P = 1};
	size_t nx = (size_t)c.B * 28 * 28 * 16, nw = 16 * 9 * 16;
	size_t work = be->conv2d_work(be, c.B, 28, 28, 16, 16, 3, 1, 1);
	assert_true(work < (size_t)c.B * 28 * 28 * 9 * 16); /* really chunked */
	float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = calloc(16, 4);
	float *y = malloc(nx * 4), *dy = malloc(nx * 4), *dx = malloc(nx * 4);
	float *dw = malloc(nw * 4), *db = malloc(16 * 4), *ws = malloc(work * 4);
	double *xd = malloc(nx * 8), *wd = malloc(nw * 8), *bd = calloc(16, 8);
	double *yd = malloc(nx * 8);
	apf_rng_key key = {3, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	for (size_t i = 0; i < nx; i++)
		xd[i] = x[i] = apf_rng_uniform(&r) - 0.5f;
	for (size_t i = 0; i < nw; i++)
		wd[i] = w[i] = apf_rng_uniform(&r) - 0.5f;
	for (size_t i = 0; i < nx; i++)
		dy[i] = 1.0f;
	be->conv2d_forward(be, y, x, w, b, c.B, 28, 28, 16, 16, 3, 1, 1, ws);
	double *in[3] = {xd, wd, bd};
	conv_ref(&c, in, yd);
	for (size_t i = 0; i < nx; i++)
		assert_true(fabs(y[i] - yd[i]) < 1e-4);
	be->conv2d_backward(be, dx, dw, db, dy, x, w, c.B, 28, 28, 16, 16, 3, 1,
			    1, ws, 0);
	/* with dout = 1: dbias = rows, dweight[o][kh][kw][i] = sum of the
	 * inputs the tap sees */
	assert_true(fabsf(db[0] - (float)(c.B * 784)) < 1e-2f);
	for (int kh = 0; kh < 3; kh++)
		for (int kw = 0; kw < 3; kw++) {
			double s = 0;
			for (int bb = 0; bb < c.B; bb++)
				for (int oh = 0; oh < 28; oh++)
					for (int ow = 0; ow < 28; ow++) {
						int ih = oh - 1 + kh, iw = ow - 1 + kw;
						if (ih >= 0 && ih < 28 && iw >= 0 && iw < 28)
							s += xd[((bb * 28 + ih) * 28 + iw) * 16 + 5];
					}
			float got = dw[((3 * 3 + kh) * 3 + kw) * 16 + 5];
			assert_true(fabs(got - s) < 1e-3 * (1 + fabs(s)));
		}
	free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw);
	free(db), free(ws), free(xd), free(wd), free(bd), free(yd);
	apf_backend_free(be);
}

/* A bias gradient's column sums are shared among the threads by columns
 * (cache lines of them), never by rows, so every sum runs over the rows in
 * order at any thread count: the same bits on one and two threads, for
 * widths that split unevenly and ones too narrow to split. */
static void bias_gradients_are_thread_count_invariant(void **state)
{
	(void)state;
	static const int shapes[][2] = {{700, 100}, {4096, 40}, {3000, 16},
					{64, 512}};
	apf_backend *b1, *b2;
	assert_apf_ok(apf_backend_cpu_new(&b1, 1));
	assert_apf_ok(apf_backend_cpu_new(&b2, 2));
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
		int B = shapes[k][0], OC = shapes[k][1], C = 3;
		apf_rng_key key = {9, (uint32_t)B, (uint32_t)OC, APF_RNG_TEST};
		apf_rng r;
		apf_rng_init(&r, &key, 0);
		float *x = malloc((size_t)B * C * 4), *w = malloc((size_t)OC * C * 4);
		float *dy = malloc((size_t)B * OC * 4);
		float *dw1 = malloc((size_t)OC * C * 4), *dw2 = malloc((size_t)OC * C * 4);
		float *db1 = malloc((size_t)OC * 4), *db2 = malloc((size_t)OC * 4);
		for (size_t i = 0; i < (size_t)B * C; i++)
			x[i] = apf_rng_normal(&r);
		for (size_t i = 0; i < (size_t)OC * C; i++)
			w[i] = apf_rng_normal(&r);
		for (size_t i = 0; i < (size_t)B * OC; i++)
			dy[i] = apf_rng_normal(&r) * 100.0f; /* rounding shows */
		b1->linear_backward(b1, NULL, dw1, db1, dy, x, w, B, C, OC, 0);
		b2->linear_backward(b2, NULL, dw2, db2, dy, x, w, B, C, OC, 0);
		assert_memory_equal(db1, db2, (size_t)OC * 4);
		double s = 0; /* and they are the sums, rows in order */
		for (int b = 0; b < B; b++)
			s = (float)(s + dy[(size_t)b * OC + OC - 1]);
		assert_true(db1[OC - 1] == (float)s);
		free(x), free(w), free(dy), free(dw1), free(dw2), free(db1);
		free(db2);
	}
	apf_backend_free(b1);
	apf_backend_free(b2);
}

/* A linear layer's backward runs its input gradient's and its weight
 * gradient's GEMMs side by side, each on its own half of an even number
 * of threads (cpu.c's gemm_pair) where the batch's rows are no more than
 * the layer's wider size, and one after the other on every thread
 * otherwise or on an odd number: the bits of one thread on 1 to 4
 * threads, accumulating into the input gradient or not, every element
 * gemm.h's fma chain (checked at the last row and column, where edge
 * tiles end). The DLRM's two top layers and a pair whose sizes leave
 * partial tiles everywhere, then two layers of more rows than width, one
 * after the other. */
static void linear_backward_gives_one_threads_bits_on_any_count(void **state)
{
	(void)state;
	static const int shapes[][3] = {
		{256, 367, 256}, {256, 256, 128}, {61, 97, 45}, {256, 64, 16},
		{97, 45, 61}};
	apf_backend *be[4];
	for (int t = 0; t < 4; t++)
		assert_apf_ok(apf_backend_cpu_new(&be[t], t + 1));
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
		for (int accum = 0; accum <= 1; accum++) {
			int B = shapes[k][0], C = shapes[k][1];
			int OC = shapes[k][2];
			size_t nx = (size_t)B * C, nw = (size_t)OC * C;
			size_t ny = (size_t)B * OC;
			apf_rng_key key = {10, (uint32_t)k, (uint32_t)accum,
					   APF_RNG_TEST};
			apf_rng r;
			apf_rng_init(&r, &key, 0);
			float *x = malloc(nx * 4), *w = malloc(nw * 4);
			float *dy = malloc(ny * 4), *dx0 = malloc(nx * 4);
			float *dx[4], *dw[4], *db[4];
			for (size_t i = 0; i < nx; i++)
				x[i] = apf_rng_normal(&r);
			for (size_t i = 0; i < nw; i++)
				w[i] = apf_rng_normal(&r);
			for (size_t i = 0; i < ny; i++)
				dy[i] = apf_rng_normal(&r);
			for (size_t i = 0; i < nx; i++)
				dx0[i] = apf_rng_normal(&r);
			for (int t = 0; t < 4; t++) {
				dx[t] = malloc(nx * 4);
				dw[t] = malloc(nw * 4);
				db[t] = malloc((size_t)OC * 4);
				memcpy(dx[t], dx0, nx * 4);
				be[t]->linear_backward(be[t], dx[t], dw[t],
						       db[t], dy, x, w, B, C,
						       OC, accum);
				assert_apf_ok(be[t]->sync(be[t]));
			}
			for (int t = 1; t < 4; t++) {
				assert_memory_equal(dx[t], dx[0], nx * 4);
				assert_memory_equal(dw[t], dw[0], nw * 4);
				assert_memory_equal(db[t], db[0], (size_t)OC * 4);
			}
			int i = B - 1, j = C - 1, o = OC - 1;
			float acc = 0.0f;
			for (int q = 0; q < OC; q++)
				acc = fmaf(dy[(size_t)i * OC + q],
					   w[(size_t)q * C + j], acc);
			float want = accum ? acc + dx0[(size_t)i * C + j] : acc;
			assert_true(dx[0][(size_t)i * C + j] == want);
			float accw = 0.0f, sum = 0.0f;
			for (int b = 0; b < B; b++) {
				accw = fmaf(dy[(size_t)b * OC + o],
					    x[(size_t)b * C + j], accw);
				sum += dy[(size_t)b * OC + o];
			}
			assert_true(dw[0][(size_t)o * C + j] == accw);
			assert_true(db[0][o] == sum);
			for (int t = 0; t < 4; t++)
				free(dx[t]), free(dw[t]), free(db[t]);
			free(x), free(w), free(dy), free(dx0);
		}
	for (int t = 0; t < 4; t++)
		apf_backend_free(be[t]);
}

/* The threaded paths (taken above 32k elements with more than one thread)
 * against the same layers on one thread: elementwise work is bit-identical,
 * sums split across threads agree to rounding. */
static void threaded_layers_agree_with_one_thread(void **state)
{
	(void)state;
	apf_backend *b1, *b2;
	assert_apf_ok(apf_backend_cpu_new(&b1, 1));
	assert_apf_ok(apf_backend_cpu_new(&b2, 2));
	enum { N = 3000, C = 24 };
	size_t n = (size_t)N * C;
	float *x = malloc(n * 4), *d = malloc(n * 4), *y1 = malloc(n * 4);
	float *y2 = malloc(n * 4), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
	apf_rng_key key = {8, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	for (size_t i = 0; i < n; i++) {
		x[i] = apf_rng_normal(&r) + 0.5f;
		d[i] = apf_rng_normal(&r);
	}
	float sc[C], bi[C], m1[C], s1[C], m2[C], s2[C];
	float rm1[C] = {0}, rv1[C], rm2[C] = {0}, rv2[C];
	float ds1[C], db1[C], ds2[C], db2[C];
	for (int c = 0; c < C; c++)
		sc[c] = 1.0f + 0.1f * c, bi[c] = 0.01f * c, rv1[c] = rv2[c] = 1;
	b1->batchnorm_forward(b1, y1, m1, s1, x, sc, bi, rm1, rv1, N, C, 0.1f,
			      1e-5f, 1);
	b2->batchnorm_forward(b2, y2, m2, s2, x, sc, bi, rm2, rv2, N, C, 0.1f,
			      1e-5f, 1);
	for (size_t i = 0; i < n; i++)
		assert_true(fabsf(y1[i] - y2[i]) < 1e-5f);
	for (int c = 0; c < C; c++)
		assert_true(fabsf(rv1[c] - rv2[c]) < 1e-6f);
	b1->batchnorm_backward(b1, g1, ds1, db1, d, x, sc, m1, s1, N, C, 0);
	b2->batchnorm_backward(b2, g2, ds2, db2, d, x, sc, m2, s2, N, C, 0);
	for (size_t i = 0; i < n; i++)
		assert_true(fabsf(g1[i] - g2[i]) < 1e-4f);
	for (int c = 0; c < C; c++)
		assert_true(fabsf(ds1[c] - ds2[c]) < 1e-3f * (1 + fabsf(ds1[c])));
	for (int act = APF_ACT_RELU; act <= APF_ACT_TANH; act++) {
		b1->activation_forward(b1, act, y1, x, n);
		b2->activation_forward(b2, act, y2, x, n);
		assert_memory_equal(y1, y2, n * 4);
		b1->activation_backward(b1, act, g1, d, x, y1, n, 0);
		b2->activation_backward(b2, act, g2, d, x, y2, n, 0);
		assert_memory_equal(g1, g2, n * 4);
	}
	b1->dropout_forward(b1, y1, x, n, 0.3f, drop_key, 9);
	b2->dropout_forward(b2, y2, x, n, 0.3f, drop_key, 9);
	assert_memory_equal(y1, y2, n * 4);
	memcpy(y1, x, n * 4), memcpy(y2, x, n * 4);
	memcpy(g1, d, n * 4), memcpy(g2, d, n * 4);
	b1->moments(b1, y1, g1, d, 0.9f, 0.99f, n);
	b2->moments(b2, y2, g2, d, 0.9f, 0.99f, n);
	assert_memory_equal(y1, y2, n * 4);
	assert_memory_equal(g1, g2, n * 4);
	b1->adam_direction(b1, y1, x, g1, 2.0f, 3.0f, 1e-8f, n);
	b2->adam_direction(b2, y2, x, g2, 2.0f, 3.0f, 1e-8f, n);
	assert_memory_equal(y1, y2, n * 4);
	b1->axpy(b1, y1, 0.5f, x, n);
	b2->axpy(b2, y2, 0.5f, x, n);
	b1->scale(b1, y1, 0.25f, n);
	b2->scale(b2, y2, 0.25f, n);
	assert_memory_equal(y1, y2, n * 4);
	free(x), free(d), free(y1), free(y2), free(g1), free(g2);
	apf_backend_free(b1);
	apf_backend_free(b2);
}

/* The embedding's gather and scatter-add give the bits of one thread's
 * (b, f)-order loop, written out here, on 1, 2 and 3 threads: DLRM-shaped
 * fields with row offsets, and a token table that every position indexes,
 * its rows drawn many times each (a skewed draw) and the gradients of
 * magnitudes 2^-20 to 2^20, where a sum in any other order rounds
 * differently (a scatter walked field by field, or two threads adding to
 * the same rows, fails here). Both shapes are over the 32k elements at
 * which other layers take their threaded paths, so a threaded embedding
 * would be checked here; the index columns sit one apart from the next
 * example's (ldi = F + 1). */
static void embeddings_give_the_same_bits_on_any_thread_count(void **state)
{
	(void)state;
	static const int field_rows[] = {7, 1, 40, 3, 600};
	struct {
		int B, F, D, V;
		const int *rows; /* per field, or NULL: one table of V rows */
	} shapes[] = {{500, 5, 16, 651, field_rows}, {200, 32, 8, 50, NULL}};
	apf_rng_key key = {9, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		int B = shapes[s].B, F = shapes[s].F, D = shapes[s].D,
		    V = shapes[s].V, ldi = F + 1;
		int32_t *idx = malloc((size_t)B * ldi * sizeof *idx);
		int32_t offset[sizeof field_rows / sizeof *field_rows];
		size_t nout = (size_t)B * F * D, ntab = (size_t)V * D;
		float *table = malloc(ntab * 4), *dout = malloc(nout * 4);
		float *want_out = malloc(nout * 4), *out = malloc(nout * 4);
		float *want_tab = calloc(ntab, 4), *dtab = malloc(ntab * 4);
		assert_non_null(idx && table && dout && want_out && out &&
				want_tab && dtab);
		for (int f = 0, at = 0; shapes[s].rows && f < F; f++)
			offset[f] = at, at += shapes[s].rows[f];
		for (int b = 0; b < B; b++)
			for (int f = 0; f < ldi; f++) {
				int n = V; /* the token table */
				if (shapes[s].rows)
					n = f < F ? shapes[s].rows[f] : 1;
				float u = apf_rng_uniform(&r);
				idx[(size_t)b * ldi + f] = (int32_t)(u * u * n) % n;
			}
		for (size_t i = 0; i < ntab; i++)
			table[i] = apf_rng_normal(&r);
		for (size_t i = 0; i < nout; i++)
			dout[i] = ldexpf(apf_rng_normal(&r),
					 (int)(apf_rng_uniform(&r) * 41) - 20);
		const int32_t *off = shapes[s].rows ? offset : NULL;
		for (int b = 0; b < B; b++)
			for (int f = 0; f < F; f++) {
				size_t row = (size_t)idx[(size_t)b * ldi + f] +
					     (off ? (size_t)off[f] : 0);
				float *o = want_out + ((size_t)b * F + f) * D;
				const float *d = dout + ((size_t)b * F + f) * D;
				for (int k = 0; k < D; k++) {
					o[k] = table[row * D + k];
					want_tab[row * D + k] += d[k];
				}
			}
		for (int threads = 1; threads <= 3; threads++) {
			apf_backend *be;
			assert_apf_ok(apf_backend_cpu_new(&be, threads));
			memset(out, 0xff, nout * 4);
			memset(dtab, 0xff, ntab * 4);
			be->embedding_forward(be, out, idx, ldi, off, table, B, F,
					      D);
			be->embedding_backward(be, dtab, dout, idx, ldi, off, B,
					       F, V, D);
			if (memcmp(out, want_out, nout * 4) ||
			    memcmp(dtab, want_tab, ntab * 4))
				fail_msg("embedding %dx%dx%d of %d rows, %d "
					 "threads: other bits than one loop's",
					 B, F, D, V, threads);
			apf_backend_free(be);
		}
		free(idx), free(table), free(dout), free(want_out), free(out);
		free(want_tab), free(dtab);
	}
}

/* ---- the layers' e^x and tanh (mathf.h), and the numerics ------------------ */

/* Distance in float ulps between y and the float nearest to the double d. */
static double ulps(float y, double d)
{
	float w = (float)d;
	int32_t a, b;
	memcpy(&a, &y, 4), memcpy(&b, &w, 4);
	a = a < 0 ? INT32_MIN - a : a; /* sign-magnitude to ordered */
	b = b < 0 ? INT32_MIN - b : b;
	return fabs((double)a - (double)b);
}

/* A loop the compiler vectorises (its AVX2 clone, on a CPU that has it) and
 * the same function one call at a time (the barrier keeps it scalar). */
__attribute__((optimize("O3"), target_clones("avx2", "default")))
static void mf_loop(float *y, const float *x, size_t n, int tanh_)
{
	if (tanh_)
		for (size_t i = 0; i < n; i++)
			y[i] = apf_mf_tanh_f(x[i]);
	else
		for (size_t i = 0; i < n; i++)
			y[i] = apf_mf_exp_f(x[i]);
}

static void mf_one_by_one(float *y, const float *x, size_t n, int tanh_)
{
	for (size_t i = 0; i < n; i++) {
		y[i] = tanh_ ? apf_mf_tanh_f(x[i]) : apf_mf_exp_f(x[i]);
		__asm__ volatile("" ::: "memory");
	}
}

static void layer_exp_and_tanh_are_close_exact_at_the_edges_and_vectorise(
	void **state)
{
	(void)state;
	/* [-87, 87] at a stride, and floats near 0 */
	enum { N = 1 << 20 };
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	float *z = malloc(N * sizeof *z);
	assert_non_null(x), assert_non_null(y), assert_non_null(z);
	for (int i = 0; i < N / 2; i++)
		x[i] = -87.0f + 174.0f * (float)i / (N / 2);
	for (int i = N / 2; i < N; i++)
		x[i] = ldexpf(1.0f + (float)(i % 977) / 977, -(i % 60)) *
		       (i % 2 ? -1.0f : 1.0f);
	double worst_exp = 0, worst_tanh = 0;
	for (int i = 0; i < N; i++) {
		double u = ulps(apf_mf_exp_f(x[i]), exp((double)x[i]));
		worst_exp = u > worst_exp ? u : worst_exp;
		u = ulps(apf_mf_tanh_f(x[i]), tanh((double)x[i]));
		worst_tanh = u > worst_tanh ? u : worst_tanh;
	}
	/* at most 1 and 2 ulps over every 97th float of the whole range (44 M
	 * of them, a one-off sweep); the bounds leave one ulp of room, so a
	 * wrong coefficient, reduction or clamp fails */
	if (worst_exp > 2 || worst_tanh > 3)
		fail_msg("exp_f %.0f ulps, tanh_f %.0f ulps from double's",
			 worst_exp, worst_tanh);
	/* tanh is odd bit for bit, keeps -0, saturates, and passes NaN */
	for (int i = 0; i < N; i += 7) {
		float a = apf_mf_tanh_f(x[i]), b = apf_mf_tanh_f(-x[i]);
		assert_true(a == -b);
	}
	assert_true(signbit(apf_mf_tanh_f(-0.0f)) && apf_mf_tanh_f(-0.0f) == 0);
	assert_true(apf_mf_tanh_f(9.5f) == 1.0f && apf_mf_tanh_f(-1e30f) == -1.0f);
	assert_true(apf_mf_tanh_f(INFINITY) == 1.0f);
	assert_true(isnan(apf_mf_tanh_f(NAN)) && isnan(apf_mf_exp_f(NAN)));
	assert_true(apf_mf_exp_f(0.0f) == 1.0f && apf_mf_exp_f(-0.0f) == 1.0f);
	/* clamped at +-87: finite and normal at both ends, as documented */
	assert_true(apf_mf_exp_f(200.0f) == apf_mf_exp_f(87.0f));
	assert_true(isnormal(apf_mf_exp_f(-INFINITY)));
	assert_true(apf_mf_exp_f(-INFINITY) < 2e-38f);
	/* the vectorised loop gives the one-at-a-time bits */
	for (int f = 0; f < 2; f++) {
		mf_loop(y, x, N, f);
		mf_one_by_one(z, x, N, f);
		if (memcmp(y, z, N * sizeof *y))
			fail_msg("%s: the vector loop's bits differ",
				 f ? "tanh_f" : "exp_f");
	}
	free(x), free(y), free(z);
}

/* What each numerics version computes, written out as nn.h says, one
 * element at a time: version 1 libm's tanhf and expf, version 2 mathf.h's
 * (the barrier keeps the compiler from fusing or vectorising it). */
static float gelu_ref(float x, int v)
{
	const float k = 0.7978845608028654f, c = 0.044715f;
	float u = k * (x + c * x * x * x);
	float t = v == 1 ? tanhf(u) : apf_mf_tanh_f(u);
	__asm__ volatile("" ::: "memory");
	return 0.5f * x * (1.0f + t);
}

static float silu_ref(float x, int v)
{
	float e = v == 1 ? expf(-x) : apf_mf_exp_f(-x);
	__asm__ volatile("" ::: "memory");
	return x / (1.0f + e);
}

/* GELU, SiLU and tanh, plain and gated, on a backend made under each
 * version give that version's formula bit for bit at 1 and 2 threads; the
 * versions differ (so the choice reaches the layers); a backend keeps the
 * version it was made under; a version apf lacks is refused. */
/* Numerics 3 flushes subnormals (results: FTZ; inputs: DAZ) on every
 * thread that computes for the backend - the pool's workers, the caller's
 * share of a region, the caller's own arithmetic once it made the
 * backend - and versions 1 and 2 keep IEEE subnormals, so their runs
 * replay. The moments are m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2
 * (the ABI's, each element alone). */
static void numerics_3_flushes_subnormals_on_every_thread(void **state)
{
	(void)state;
	enum { N = 1 << 18 };
	float *m = malloc(N * sizeof *m), *v = malloc(N * sizeof *v);
	float *g = calloc(N, sizeof *g);
	assert_non_null(m), assert_non_null(v), assert_non_null(g);
	for (int ver = 2; ver <= 3; ver++)
		for (int threads = 1; threads <= 2; threads++) {
			assert_int_equal(apf_numerics_set(ver), 0);
			apf_backend *be = NULL;
			assert_int_equal(apf_backend_cpu_new(&be, threads), 0);
			/* m: 2^-120 times b1 = 2^-10 is 2^-130, a subnormal
			 * result; v: an input already subnormal (2^-140),
			 * times b2 = 1 */
			for (int i = 0; i < N; i++) {
				m[i] = 0x1p-120f;
				v[i] = 0x1p-140f;
			}
			be->moments(be, m, v, g, 0x1p-10f, 1.0f, N);
			assert_int_equal(be->sync(be), 0);
			float wm = ver >= 3 ? 0.0f : 0x1p-130f;
			float wv = ver >= 3 ? 0.0f : 0x1p-140f;
			for (int i = 0; i < N; i++)
				if (m[i] != wm || v[i] != wv)
					fail_msg("numerics %d, %d threads, "
						 "element %d of %d: m %a v %a, "
						 "want %a %a",
						 ver, threads, i, N, m[i], v[i],
						 wm, wv);
			/* the maker's own arithmetic (a submission's loops) */
			volatile float a = 0x1p-120f, b = 0x1p-10f;
			float c = a * b;
			assert_true(c == (ver >= 3 ? 0.0f : 0x1p-130f));
			apf_backend_free(be);
		}
	/* A backend made under 3 sets its maker's mode, whatever the
	 * thread's was, and its workers inherit it. */
	assert_int_equal(apf_numerics_set(3), 0);
	_mm_setcsr(_mm_getcsr() & ~0x8040u);
	for (int threads = 1; threads <= 2; threads++) {
		apf_backend *be = NULL;
		assert_int_equal(apf_backend_cpu_new(&be, threads), 0);
		volatile float a = 0x1p-120f, b = 0x1p-10f;
		float c = a * b;
		assert_true(c == 0.0f);
		for (int i = 0; i < N; i++)
			m[i] = 0x1p-120f, v[i] = 1.0f;
		/* a region (two threads) sets it for the caller's share
		 * whatever the thread's mode is by then */
		if (threads == 2)
			_mm_setcsr(_mm_getcsr() & ~0x8040u);
		be->moments(be, m, v, g, 0x1p-10f, 1.0f, N);
		assert_int_equal(be->sync(be), 0);
		for (int i = 0; i < N; i++)
			assert_true(m[i] == 0.0f);
		apf_backend_free(be);
	}
	/* A version-3 backend's regions flush on its caller's thread even
	 * after a version-2 backend was made there. */
	assert_int_equal(apf_numerics_set(3), 0);
	apf_backend *three = NULL, *two = NULL;
	assert_int_equal(apf_backend_cpu_new(&three, 2), 0);
	assert_int_equal(apf_numerics_set(2), 0);
	assert_int_equal(apf_backend_cpu_new(&two, 2), 0);
	for (int i = 0; i < N; i++)
		m[i] = 0x1p-120f, v[i] = 1.0f;
	three->moments(three, m, v, g, 0x1p-10f, 1.0f, N);
	assert_int_equal(three->sync(three), 0);
	for (int i = 0; i < N; i++)
		assert_true(m[i] == 0.0f);
	apf_backend_free(three);
	apf_backend_free(two);
	assert_int_equal(apf_numerics_set(APF_NUMERICS_LATEST), 0);
	free(m), free(v), free(g);
}

static void each_numerics_version_computes_its_own_formulas(void **state)
{
	(void)state;
	assert_int_equal(apf_numerics_get(), APF_NUMERICS_LATEST);
	assert_int_equal(apf_numerics_set(0), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "this apf computes numerics"));
	assert_int_equal(apf_numerics_set(APF_NUMERICS_LATEST + 1), APF_EINPUT);
	apf_error_clear();
	assert_int_equal(apf_numerics_get(), APF_NUMERICS_LATEST);
	enum { N = 70001, H = 97, R = N / H };
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	float *g = malloc(2 * N * sizeof *g), *gy = malloc(N * sizeof *gy);
	assert_non_null(x), assert_non_null(y), assert_non_null(g);
	assert_non_null(gy);
	for (int i = 0; i < N; i++)
		x[i] = -9.0f + 18.0f * (float)((i * 7919) % N) / N;
	/* GLU rows: the first half of each (2H) row the activation's input,
	 * the second the gate */
	for (int r = 0; r < R; r++)
		for (int i = 0; i < H; i++) {
			g[(size_t)r * 2 * H + i] = x[r * H + i];
			g[(size_t)r * 2 * H + H + i] = 0.5f + x[(r * H + i + 1) % N];
		}
	static const int acts[] = {APF_ACT_GELU, APF_ACT_SILU, APF_ACT_TANH};
	apf_backend *kept = NULL;
	for (int v = APF_NUMERICS_OLDEST; v <= APF_NUMERICS_LATEST; v++)
		for (int threads = 1; threads <= 2; threads++) {
			assert_int_equal(apf_numerics_set(v), 0);
			apf_backend *be = NULL;
			assert_int_equal(apf_backend_cpu_new(&be, threads), 0);
			if (v == APF_NUMERICS_OLDEST && threads == 1)
				kept = be;
			for (int a = 0; a < 3; a++) {
				be->activation_forward(be, acts[a], y, x, N);
				be->glu_forward(be, acts[a], gy, g, R, H);
				assert_int_equal(be->sync(be), 0);
				for (int i = 0; i < N; i++) {
					float want =
						acts[a] == APF_ACT_GELU ? gelu_ref(x[i], v)
						: acts[a] == APF_ACT_SILU
							? silu_ref(x[i], v)
						: v == 1 ? tanhf(x[i])
							 : apf_mf_tanh_f(x[i]);
					if (memcmp(&y[i], &want, sizeof want))
						fail_msg("numerics %d, act %d, %d "
							 "threads: %a at %a, "
							 "want %a",
							 v, acts[a], threads,
							 y[i], x[i], want);
				}
				for (int r = 0; r < R; r += 13)
					for (int i = 0; i < H; i++) {
						size_t k = (size_t)r * H + i;
						float act = acts[a] == APF_ACT_GELU
								    ? gelu_ref(x[k], v)
							    : acts[a] == APF_ACT_SILU
								    ? silu_ref(x[k], v)
							    : v == 1 ? tanhf(x[k])
								     : apf_mf_tanh_f(x[k]);
						float want = act * g[(size_t)r * 2 * H + H + i];
						assert_true(gy[k] == want);
					}
			}
			if (be != kept)
				apf_backend_free(be);
		}
	/* the softmax loss's probabilities: e^(z - max) by the version's
	 * exp, summed in double in column order */
	enum { B = 37, V = 301 };
	float *probs = malloc((size_t)B * V * sizeof *probs), loss[B];
	int32_t labels[B];
	assert_non_null(probs);
	for (int b = 0; b < B; b++)
		labels[b] = (b * 31) % V;
	for (int v = APF_NUMERICS_OLDEST; v <= APF_NUMERICS_LATEST; v++) {
		assert_int_equal(apf_numerics_set(v), 0);
		apf_backend *be = NULL;
		assert_int_equal(apf_backend_cpu_new(&be, 2), 0);
		be->softmax_xent_forward(be, loss, probs, x, labels, B, V, 0.1f);
		assert_int_equal(be->sync(be), 0);
		apf_backend_free(be);
		for (int b = 0; b < B; b++) {
			const float *z = x + (size_t)b * V;
			float mx = z[0], e[V];
			for (int k = 1; k < V; k++)
				mx = z[k] > mx ? z[k] : mx;
			double sum = 0;
			for (int k = 0; k < V; k++) {
				e[k] = v == 1 ? expf(z[k] - mx)
					      : apf_mf_exp_f(z[k] - mx);
				sum += e[k];
			}
			float inv = (float)(1.0 / sum);
			for (int k = 0; k < V; k++)
				if (probs[(size_t)b * V + k] != e[k] * inv)
					fail_msg("numerics %d: softmax row %d "
						 "column %d", v, b, k);
		}
	}
	free(probs);
	/* the two versions' GELU differ (which is why a run records its
	 * version) */
	size_t differ = 0;
	for (int i = 0; i < N; i++)
		differ += gelu_ref(x[i], 1) != gelu_ref(x[i], 2);
	assert_true(differ > 0);
	/* made under version 1, the backend still computes it under 2 */
	assert_int_equal(apf_numerics_get(), APF_NUMERICS_LATEST);
	kept->activation_forward(kept, APF_ACT_GELU, y, x, N);
	assert_int_equal(kept->sync(kept), 0);
	for (int i = 0; i < N; i += 101)
		assert_true(y[i] == gelu_ref(x[i], 1));
	apf_backend_free(kept);
	free(x), free(y), free(g), free(gy);
}

/* ---- row layers: the same bits on any thread count --------------------- */

/* Vector k of example b: the dense one, then the embeddings. */
static const float *ivec_ref(const float *dense, const float *emb, int b,
			     int k, int E, int D)
{
	return k ? emb + ((size_t)b * E + k - 1) * D : dense + (size_t)b * D;
}

/* The instance norm's forward as every recorded run computed it, per
 * (image, channel): the sum of x in pixel order in double, the mean that
 * sum / HW, the sum of (x - mean)^2 in double, rstd = 1 / sqrt(that / HW +
 * eps) rounded to float, y = (x - (float)mean) rstd scale + bias in float.
 * At 16, 32 and 48 channels (whole blocks, which the kernel keeps in
 * registers) and 5, on both backends and 1 and 2 threads. */
static void instnorm_forward_keeps_its_recorded_bits(void **state)
{
	(void)state;
	static const int shapes[][3] = {{3, 49, 16}, {2, 30, 32}, {2, 17, 48},
					{3, 11, 5}};
	apf_rng_key key = {29, 0, 0, APF_RNG_TEST};
	apf_rng rg;
	apf_rng_init(&rg, &key, 0);
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		int B = shapes[s][0], HW = shapes[s][1], C = shapes[s][2];
		size_t n = (size_t)B * HW * C;
		float *x = malloc(n * 4), *y = malloc(n * 4), *want = malloc(n * 4);
		float *m = malloc((size_t)B * C * 4), *r = malloc((size_t)B * C * 4);
		float *wm = malloc((size_t)B * C * 4), *wr = malloc((size_t)B * C * 4);
		float *sc = malloc((size_t)C * 4), *bi = malloc((size_t)C * 4);
		assert_true(x && y && want && m && r && wm && wr && sc && bi);
		/* odd channels: a mean far larger than the spread, where the
		 * variance taken about the float mean comes out otherwise */
		for (size_t i = 0; i < n; i++)
			x[i] = i % C % 2 ? 1000.3f + apf_rng_normal(&rg) * 0.01f
					 : 3.0f + apf_rng_normal(&rg) *
							  (1.0f + (float)(i % 7));
		for (int c = 0; c < C; c++)
			sc[c] = 0.5f + 0.03f * c, bi[c] = -0.1f + 0.01f * c;
		for (int b = 0; b < B; b++)
			for (int c = 0; c < C; c++) {
				const float *xb = x + (size_t)b * HW * C + c;
				double sum = 0, q = 0;
				for (int p = 0; p < HW; p++)
					sum += xb[(size_t)p * C];
				sum /= HW;
				for (int p = 0; p < HW; p++) {
					double d = (double)xb[(size_t)p * C] - sum;
					q += d * d;
				}
				float mf = (float)sum;
				float rf = (float)(1.0 / sqrt(q / HW + 1e-5f));
				wm[b * C + c] = mf, wr[b * C + c] = rf;
				for (int p = 0; p < HW; p++)
					want[(size_t)b * HW * C + (size_t)p * C + c] =
						(xb[(size_t)p * C] - mf) * rf * sc[c] +
						bi[c];
			}
		for (int k = 0; k < 4; k++) {
			apf_backend *be;
			assert_apf_ok(k < 2 ? apf_backend_cpu_new(&be, 1 + k)
					    : apf_backend_cpu_plain_new(&be, k - 1));
			be->instnorm_forward(be, y, m, r, x, sc, bi, B, HW, C,
					     1e-5f);
			assert_apf_ok(be->sync(be));
			apf_backend_free(be);
			if (memcmp(m, wm, (size_t)B * C * 4) ||
			    memcmp(r, wr, (size_t)B * C * 4) ||
			    memcmp(y, want, n * 4))
				fail_msg("%d x %d x %d, backend %d: not the "
					 "recorded bits", B, HW, C, k);
		}
		free(x), free(y), free(want), free(m), free(r), free(wm);
		free(wr), free(sc), free(bi);
	}
}

/* Dot (i, j) of example b as every recorded run computed it: summed in
 * double in k order. */
static float interaction_dot_ref(const float *dense, const float *emb, int b,
				 int i, int j, int E, int D)
{
	const float *vi = ivec_ref(dense, emb, b, i, E, D),
		    *vj = ivec_ref(dense, emb, b, j, E, D);
	double s = 0;
	for (int k = 0; k < D; k++)
		s += (double)vi[k] * vj[k];
	return (float)s;
}

/* The dot interaction's gradients as every recorded run computed them:
 * the pairs walked in output order, pair (i, j) adding w v_j to v_i's and
 * w v_i to v_j's gradient in double; the dense part's from its own output
 * gradient. ddense is added to, demb written. */
static void interaction_backward_ref(float *ddense, float *demb,
				     const float *dout, const float *dense,
				     const float *emb, int B, int E, int D)
{
	int F = E + 1, OC = D + F * (F - 1) / 2;
	double *g = malloc((size_t)F * D * sizeof *g);
	assert_non_null(g);
	for (int b = 0; b < B; b++) {
		const float *d = dout + (size_t)b * OC;
		for (int x = 0; x < D; x++)
			g[x] = d[x];
		for (int x = D; x < F * D; x++)
			g[x] = 0;
		int p = D;
		for (int i = 1; i < F; i++)
			for (int j = 0; j < i; j++, p++) {
				const float *vi = ivec_ref(dense, emb, b, i, E, D),
					    *vj = ivec_ref(dense, emb, b, j, E, D);
				double w = d[p];
				for (int x = 0; x < D; x++) {
					g[i * D + x] += w * vj[x];
					g[j * D + x] += w * vi[x];
				}
			}
		for (int x = 0; x < D; x++)
			ddense[(size_t)b * D + x] += (float)g[x];
		for (int x = 0; x < E * D; x++)
			demb[(size_t)b * E * D + x] = (float)g[D + x];
	}
	free(g);
}

/* The interaction, forward and backward, gives the bits of the plain
 * loops every recorded run was made with, on every path this CPU runs
 * (each vector path has kernels of its own) at 1 and 2 threads: the DLRM's
 * shape and others (31 and 40 embeddings, width 4, none); signed zeros, a
 * huge value, and cancellations that come out otherwise in any other
 * order of the sums (a faster kernel must keep them). */
static void interaction_gives_the_recorded_bits_on_every_path(void **state)
{
	(void)state;
	static const int shapes[][3] = {{200, 26, 16}, {40, 31, 16},
					{30, 40, 16}, {50, 5, 4}, {9, 0, 16}};
	apf_rng_key key = {23, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		int B = shapes[s][0], E = shapes[s][1], D = shapes[s][2];
		int F = E + 1, OC = D + F * (F - 1) / 2;
		size_t nd = (size_t)B * D, ne = (size_t)B * E * D,
		       no = (size_t)B * OC;
		float *dense = malloc(nd * 4), *emb = malloc(ne ? ne * 4 : 4);
		float *dout = malloc(no * 4), *out = malloc(no * 4);
		float *dd = malloc(nd * 4), *de = malloc(ne ? ne * 4 : 4);
		float *rd = malloc(nd * 4), *re = malloc(ne ? ne * 4 : 4);
		assert_true(dense && emb && dout && out && dd && de && rd && re);
		for (size_t i = 0; i < nd; i++)
			dense[i] = apf_rng_normal(&r);
		for (size_t i = 0; i < ne; i++)
			emb[i] = i % 97 == 3 ? -0.0f
				 : i % 89 == 5 ? 3e30f
					       : apf_rng_normal(&r) * 0.1f;
		for (size_t i = 0; i < no; i++)
			dout[i] = i % 83 == 1 ? -0.0f : apf_rng_normal(&r);
		/* Example 0 cancels: v_0 = 1, v_1 = 1e17 = -v_2 and every
		 * pair's gradient 1, so that a gradient summed in another
		 * order than n ascending keeps or loses v_0's 1; and v_3 =
		 * (1e17, 1, -1e17, 0, ...) against v_4 = 1, whose dot is 0
		 * only in k order. */
		if (E >= 4 && D >= 3) {
			for (int x = 0; x < D; x++) {
				dense[x] = 1.0f;
				emb[x] = 1e17f;
				emb[2 * D + x] = x == 0 ? 1e17f
						 : x == 1 ? 1.0f
						 : x == 2 ? -1e17f
							  : 0.0f;
				emb[3 * D + x] = 1.0f;
			}
			for (int i = 0; i < OC; i++)
				dout[i] = 1.0f;
		}
		if (ne > 2 * (size_t)D)
			for (int x = 0; x < D; x++)
				emb[D + x] = -emb[x]; /* v_2 = -v_1 */
		/* Example 1: v_1 = (1, 1e17, -1e17, 0, ...) against v_2 = v_5
		 * = 1, whose dots are 0 in k order and 1 in the reverse one
		 * (pairs (2, 1) and (5, 1): in one block of dots or two, by
		 * the path's block). */
		if (B > 1 && E >= 5 && D >= 3)
			for (int x = 0; x < D; x++) {
				float *v1 = emb + (size_t)E * D;
				v1[x] = x == 0	 ? 1.0f
					: x == 1 ? 1e17f
					: x == 2 ? -1e17f
						 : 0.0f;
				v1[D + x] = v1[4 * D + x] = 1.0f;
			}
		for (size_t i = 0; i < nd; i++)
			dd[i] = rd[i] = 0.25f;
		for (int run = 0; run < 2 * (APF_CPU_ISA_AVX512 + 1); run++) {
			/* 1 and 2 threads on every path this CPU runs (the
			 * vector paths have their own kernels: fma, and 8
			 * examples a vector on AVX-512) */
			int t = 1 + run % 2, isa = run / 2;
			apf_backend *be = backend_on_path(isa, t);
			if (!be)
				continue;
			for (size_t i = 0; i < nd; i++)
				dd[i] = rd[i] = 0.25f;
			be->interaction_forward(be, out, dense, emb, B, E, D);
			be->interaction_backward(be, dd, de, dout, dense, emb, B,
						 E, D, 1, 0);
			assert_apf_ok(be->sync(be));
			apf_backend_free(be);
			for (int b = 0; b < B; b++) {
				const float *o = out + (size_t)b * OC;
				int p = D;
				for (int i = 1; i < F; i++)
					for (int j = 0; j < i; j++, p++) {
						float want = interaction_dot_ref(
							dense, emb, b, i, j, E, D);
						if (memcmp(&o[p], &want, 4))
							fail_msg("shape %zu, %s, %d "
								 "threads: dot %d of "
								 "example %d",
								 s, apf_cpu_isa_name(isa),
								 t, p, b);
					}
			}
			interaction_backward_ref(rd, re, dout, dense, emb, B, E, D);
			if (memcmp(dd, rd, nd * 4) || (ne && memcmp(de, re, ne * 4)))
				fail_msg("shape %zu, %s, %d threads: the gradients "
					 "are not the pair walk's bits",
					 s, apf_cpu_isa_name(isa), t);
		}
		free(dense), free(emb), free(dout), free(out);
		free(dd), free(de), free(rd), free(re);
	}
}

/* Layer norm, the softmax loss and the dot interaction split rows (or, for
 * layer norm's parameter gradients, columns) among the threads: 1, 2 and 3
 * threads give the same bits, and those are the plain loops' that every
 * recorded run was made with (re-evaluation and replay of an older run
 * need them bit for bit): the interaction's dots summed in double in k
 * order, layer norm's row mean in double in column order. */
static void row_layers_give_the_same_bits_on_any_thread_count(void **state)
{
	(void)state;
	enum { N = 1500, C = 100, V = 96, B = 300, E = 26, D = 16 };
	enum { F = E + 1, OC = D + F * (F - 1) / 2 };
	apf_rng_key key = {21, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	size_t nx = (size_t)N * C;
	float *x = malloc(nx * 4), *d = malloc(nx * 4), *sc = malloc(C * 4);
	float *bi = malloc(C * 4), *lg = malloc((size_t)N * V * 4);
	float *dense = malloc((size_t)B * D * 4);
	float *emb = malloc((size_t)B * E * D * 4);
	float *dint = malloc((size_t)B * OC * 4);
	int32_t *lab = malloc(N * sizeof *lab);
	for (size_t i = 0; i < nx; i++)
		x[i] = apf_rng_normal(&r) * 2 + 0.3f, d[i] = apf_rng_normal(&r);
	for (int c = 0; c < C; c++)
		sc[c] = 1 + apf_rng_normal(&r) * 0.1f, bi[c] = apf_rng_normal(&r);
	for (size_t i = 0; i < (size_t)N * V; i++)
		lg[i] = apf_rng_normal(&r) * 3;
	for (int i = 0; i < N; i++)
		lab[i] = (int32_t)(apf_rng_uniform(&r) * V) % V;
	for (size_t i = 0; i < (size_t)B * D; i++)
		dense[i] = apf_rng_normal(&r);
	for (size_t i = 0; i < (size_t)B * E * D; i++)
		emb[i] = apf_rng_normal(&r) * 0.1f;
	for (size_t i = 0; i < (size_t)B * OC; i++)
		dint[i] = apf_rng_normal(&r);
	/* per thread count: ln y, mean, rstd, dx (written, then added),
	 * dscale, dbias; losses, probs; interaction out, ddense, demb */
	size_t sz[11] = {nx, N, N, nx, C, C, N, (size_t)N * V,
			 (size_t)B * OC, (size_t)B * D, (size_t)B * E * D};
	float *got[3][11];
	for (int t = 0; t < 3; t++) {
		apf_backend *be;
		assert_apf_ok(apf_backend_cpu_new(&be, t + 1));
		for (int k = 0; k < 11; k++) {
			got[t][k] = malloc(sz[k] * 4);
			assert_non_null(got[t][k]);
		}
		float **g = got[t];
		be->layernorm_forward(be, g[0], g[1], g[2], x, sc, bi, N, C, 1e-5f);
		be->layernorm_backward(be, g[3], g[4], g[5], d, x, sc, g[1], g[2],
				       N, C, 0);
		be->layernorm_backward(be, g[3], g[4], g[5], d, x, sc, g[1], g[2],
				       N, C, 1);
		be->softmax_xent_forward(be, g[6], g[7], lg, lab, N, V, 0.1f);
		be->interaction_forward(be, g[8], dense, emb, B, E, D);
		for (size_t i = 0; i < (size_t)B * D; i++)
			g[9][i] = 0.5f;
		be->interaction_backward(be, g[9], g[10], dint, dense, emb, B, E,
					 D, 1, 0);
		assert_apf_ok(be->sync(be));
		apf_backend_free(be);
	}
	for (int t = 1; t < 3; t++)
		for (int k = 0; k < 11; k++)
			if (memcmp(got[t][k], got[0][k], sz[k] * 4))
				fail_msg("output %d on %d threads: not one "
					 "thread's bits", k, t + 1);
	/* the interaction's dots, summed in double in k order */
	for (int b = 0; b < B; b++) {
		const float *o = got[0][8] + (size_t)b * OC;
		int p = D;
		for (int i = 1; i < F; i++)
			for (int j = 0; j < i; j++, p++)
				assert_true(o[p] == interaction_dot_ref(dense, emb, b,
									i, j, E, D));
	}
	/* layer norm's mean: the row's sum in double in column order */
	for (int n = 0; n < N; n += 61) {
		double sum = 0;
		for (int c = 0; c < C; c++)
			sum += x[(size_t)n * C + c];
		assert_true(got[0][1][n] == (float)(sum / C));
	}
	/* the softmax's probabilities sum to 1 */
	for (int n = 0; n < N; n += 97) {
		const float *pr = got[0][7] + (size_t)n * V;
		double s = 0;
		for (int v = 0; v < V; v++)
			s += pr[v];
		assert_true(fabs(s - 1) < 1e-5);
	}
	for (int t = 0; t < 3; t++)
		for (int k = 0; k < 11; k++)
			free(got[t][k]);
	free(x), free(d), free(sc), free(bi), free(lg), free(dense), free(emb);
	free(dint), free(lab);
}

static void batchnorm_running_statistics_and_eval_mode(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	float x[8] = {1, 10, 3, 20, 5, 30, 7, 40}; /* 4 rows, 2 channels */
	float scale[2] = {1, 2}, bias[2] = {0, 1}, y[8], m[2], rs[2];
	float rm[2] = {0, 0}, rv[2] = {1, 1};
	be->batchnorm_forward(be, y, m, rs, x, scale, bias, rm, rv, 4, 2, 0.1f,
			      1e-5f, 1);
	/* channel 0: mean 4, biased var 5, unbiased 20/3 */
	assert_true(fabsf(rm[0] - 0.4f) < 1e-6f);
	assert_true(fabsf(rv[0] - (0.9f + 0.1f * 20.0f / 3.0f)) < 1e-5f);
	assert_true(fabsf(rm[1] - 2.5f) < 1e-5f);
	float rm0[2] = {rm[0], rm[1]}, rv0[2] = {rv[0], rv[1]};
	be->batchnorm_forward(be, y, m, rs, x, scale, bias, rm, rv, 4, 2, 0.1f,
			      1e-5f, 0);
	assert_memory_equal(rm, rm0, sizeof rm); /* eval leaves them alone */
	assert_memory_equal(rv, rv0, sizeof rv);
	float want = (x[3] - rm[1]) / sqrtf(rv[1] + 1e-5f) * 2 + 1;
	assert_true(fabsf(y[3] - want) < 1e-5f);
	apf_backend_free(be);
}

/* ---- vector operations ---------------------------------------------------- */

static void vector_ops_compute_what_they_say(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	enum { N = 7 };
	float x[N], y[N], z[N], m[N], v[N], g[N], d[N];
	for (int i = 0; i < N; i++) {
		x[i] = (float)(i + 1);
		y[i] = (float)(2 * i - 5);
	}
	be->fill(be, z, 3.0f, N);
	for (int i = 0; i < N; i++)
		assert_true(z[i] == 3.0f);
	be->copy(be, z, x, N);
	assert_memory_equal(z, x, sizeof z);
	be->scale(be, z, 2.0f, N);
	assert_true(z[6] == 14.0f);
	be->axpy(be, z, -2.0f, x, N);
	assert_true(z[0] == 0.0f && z[6] == 0.0f);
	be->copy(be, z, y, N);
	be->axpby(be, z, 2.0f, x, 0.5f, N); /* z = 2x + 0.5y */
	assert_true(z[0] == 2.0f - 2.5f);
	be->add_scalar(be, z, 1.0f, N);
	assert_true(z[0] == 0.5f);
	be->mul(be, z, x, y, N);
	assert_true(z[1] == -6.0f);
	be->div(be, z, y, x, N);
	assert_true(z[3] == 0.25f);
	be->sqrt(be, z, x, N);
	assert_true(z[3] == 2.0f);
	be->max(be, z, x, y, N);
	assert_true(z[0] == 1.0f && z[6] == 7.0f);
	be->copy(be, z, y, N);
	be->clamp(be, z, -1.0f, 2.0f, N);
	assert_true(z[0] == -1.0f && z[3] == 1.0f && z[6] == 2.0f);
	be->mul(be, z, z, z, N); /* aliasing is allowed */
	assert_true(z[0] == 1.0f);
	assert_true(be->dot(be, x, y, N) == 84.0);
	assert_true(be->sum(be, x, N) == 28.0);
	assert_true(fabs(be->norm2(be, x, N) - sqrt(140.0)) < 1e-12);
	assert_true(be->max_abs(be, y, N) == 7.0);
	for (int i = 0; i < N; i++) {
		m[i] = 1.0f, v[i] = 4.0f, g[i] = (float)i;
	}
	be->moments(be, m, v, g, 0.9f, 0.99f, N);
	assert_true(fabsf(m[2] - (0.9f + 0.1f * 2)) < 1e-6f);
	assert_true(fabsf(v[2] - (0.99f * 4 + 0.01f * 4)) < 1e-6f);
	be->adam_direction(be, d, m, v, 2.0f, 0.5f, 1e-8f, N);
	float want = m[2] * 2.0f / (sqrtf(v[2] * 0.5f) + 1e-8f);
	assert_true(fabsf(d[2] - want) < 1e-6f);
	apf_backend_free(be);
}

/* ---- networks ------------------------------------------------------------- */

/* conv-bn-gelu, a residual join read twice, pooling, GAP, linear. `smooth`
 * swaps max pooling for average pooling: finite differences of a float
 * forward need a step large enough to flip a max. */
static apf_net *small_net(apf_backend *be, int with_dropout, int smooth)
{
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 6, 6, 2));
	int t = apf_net_conv2d(net, 0, 4, 3, 1, 1, 0, "stem");
	t = apf_net_batchnorm(net, t, 0.1f, 1e-5f, "stem.bn");
	t = apf_net_activation(net, t, APF_ACT_GELU);
	int a = apf_net_conv2d(net, t, 4, 3, 1, 1, 1, "res");
	a = apf_net_layernorm(net, a, 1e-5f, "res.ln");
	int sum = apf_net_add(net, a, t); /* t read twice */
	int p = smooth ? apf_net_avgpool2d(net, sum, 2, 2, 0)
		       : apf_net_maxpool2d(net, sum, 2, 2, 0);
	int q = apf_net_avgpool2d(net, p, 3, 1, 1);
	q = apf_net_global_avgpool(net, q);
	if (with_dropout)
		q = apf_net_dropout(net, q, 0.2f);
	q = apf_net_linear(net, q, 3, 1, "head");
	assert_true(q > 0);
	assert_apf_ok(apf_net_finish(net, q));
	return net;
}

static double net_loss(apf_net *net, const float *x, int B, const float *r)
{
	const float *out;
	assert_apf_ok(apf_net_forward(net, &out, x, B, 1, NULL, 0));
	double L = 0;
	for (int i = 0; i < B * 3; i++)
		L += (double)r[i] * out[i];
	return L;
}

static void net_layout_names_kinds_and_aligned_offsets(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net = small_net(be, 0, 0);
	assert_int_equal(apf_net_nparams(net), 9);
	const apf_param *p0 = apf_net_param(net, 0);
	assert_string_equal(p0->name, "stem.weight");
	assert_int_equal(p0->kind, APF_PARAM_CONV_WEIGHT);
	assert_int_equal(p0->numel, 4 * 3 * 3 * 2);
	assert_int_equal(apf_net_param(net, 1)->kind, APF_PARAM_NORM_SCALE);
	assert_string_equal(apf_net_param(net, 8)->name, "head.bias");
	size_t end = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		assert_int_equal(p->offset % 16, 0);
		assert_true(p->offset >= end);
		end = p->offset + p->numel;
	}
	assert_true(apf_net_param_floats(net) >= end);
	assert_int_equal(apf_net_nstate(net), 2);
	assert_string_equal(apf_net_state(net, 1)->name, "stem.bn.running_var");
	assert_string_equal(apf_param_kind_name(APF_PARAM_ATTN_Q), "attention_q");
	apf_net_free(net);
	apf_backend_free(be);
}

/* A backend may leave entries NULL (the CUDA plugin does): a net that
 * needs one is refused when it is finished, naming layer and entry. */
static void net_refuses_a_layer_its_backend_lacks(void **state)
{
	(void)state;
	apf_backend *cpu;
	assert_apf_ok(apf_backend_cpu_new(&cpu, 1));
	apf_backend partial = *cpu;
	partial.name = "cuda";
	partial.attention_forward = NULL;
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, &partial, 1, 4, 6));
	int t = apf_net_attention(net, 0, 2, 0.5f);
	assert_true(t > 0);
	assert_int_equal(apf_net_finish(net, t), APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "net: attention: backend cuda has no "
			    "attention_forward");
	apf_net_free(net);
	/* the whole table: the same net is accepted */
	assert_apf_ok(apf_net_new(&net, cpu, 1, 4, 6));
	t = apf_net_attention(net, 0, 2, 0.5f);
	assert_apf_ok(apf_net_finish(net, t));
	apf_net_free(net);
	/* a backward entry counts too */
	partial = *cpu;
	partial.layernorm_backward = NULL;
	assert_apf_ok(apf_net_new(&net, &partial, 1, 1, 8));
	t = apf_net_linear(net, 0, 4, 1, "fc");
	t = apf_net_layernorm(net, t, 1e-5f, "ln");
	assert_int_equal(apf_net_finish(net, t), APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "net: layernorm: backend cpu has no "
			    "layernorm_backward");
	apf_net_free(net);
	apf_backend_free(cpu);
}

static void net_gradient_matches_finite_differences(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net = small_net(be, 0, 1);
	size_t np = apf_net_param_floats(net), ns = apf_net_state_floats(net);
	float *params = calloc(np, 4), *st = calloc(ns, 4), *g = calloc(np, 4);
	apf_net_bind(net, params, st);
	apf_rng_key key = {5, 0, 0, APF_RNG_INIT};
	assert_apf_ok(apf_net_init(net, &key, "he_normal"));
	enum { B = 3 };
	float x[B * 72], r[B * 3];
	apf_rng rr;
	apf_rng_init(&rr, &key, 9);
	for (int i = 0; i < B * 72; i++)
		x[i] = apf_rng_normal(&rr);
	for (int i = 0; i < B * 3; i++)
		r[i] = apf_rng_uniform(&rr) - 0.5f;
	/* perturb norm parameters away from 1 / 0 so their gradients matter */
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		for (size_t j = 0; j < p->numel; j++)
			params[p->offset + j] += 0.1f * apf_rng_normal(&rr);
	}
	net_loss(net, x, B, r);
	assert_apf_ok(apf_net_backward(net, g, r));
	/* float forward, so a larger step and tolerance; a wiring mistake
	 * (a missed residual gradient, a wrong accumulate) is far larger */
	const float h = 1e-2f;
	int checked = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		for (size_t j = 0; j < p->numel; j += 3) {
			float *w = &params[p->offset + j], keep = *w;
			*w = keep + h;
			double lp = net_loss(net, x, B, r);
			*w = keep - h;
			double lm = net_loss(net, x, B, r);
			*w = keep;
			double num = (lp - lm) / (2 * h);
			double got = g[p->offset + j];
			if (fabs(got - num) > 2e-3 + 3e-2 * fabs(num))
				fail_msg("%s[%zu]: backward %.6g, finite "
					 "difference %.6g",
					 p->name, j, got, num);
			checked++;
		}
	}
	assert_true(checked > 50);
	free(params), free(st), free(g);
	apf_net_free(net);
	apf_backend_free(be);
}

static void digest(const float *p, size_t n, char hex[APF_SHA256_HEX])
{
	testlib_digest_floats(hex, 1, &p, &n);
}

static void net_runs_are_bit_identical_and_eval_is_read_only(void **state)
{
	(void)state;
	/* [run][train output, gradients, eval output] */
	char h[2][3][APF_SHA256_HEX];
	enum { B = 64 };
	for (int run = 0; run < 2; run++) {
		apf_backend *be;
		assert_apf_ok(apf_backend_cpu_new(&be, 2));
		apf_net *net = small_net(be, 1, 0);
		size_t np = apf_net_param_floats(net);
		size_t ns = apf_net_state_floats(net);
		float *params = calloc(np, 4), *st = calloc(ns, 4);
		float *g = calloc(np, 4), *pcopy = malloc(np * 4);
		apf_net_bind(net, params, st);
		apf_rng_key key = {11, 2, 3, APF_RNG_INIT};
		assert_apf_ok(apf_net_init(net, &key, NULL));
		float *x = malloc(B * 72 * 4), r[B * 3];
		apf_rng rr;
		apf_rng_init(&rr, &key, 1);
		for (int i = 0; i < B * 72; i++)
			x[i] = apf_rng_normal(&rr);
		for (int i = 0; i < B * 3; i++)
			r[i] = apf_rng_uniform(&rr);
		const float *out;
		uint32_t dk[2] = {1, 2};
		assert_apf_ok(apf_net_forward(net, &out, x, B, 1, dk, 4));
		digest(out, B * 3, h[run][0]);
		assert_apf_ok(apf_net_backward(net, g, r));
		digest(g, np, h[run][1]);
		/* eval reads the bound memory and writes none of it */
		char before[APF_SHA256_HEX], after[APF_SHA256_HEX];
		digest(st, ns, before);
		memcpy(pcopy, params, np * 4);
		assert_apf_ok(apf_net_forward(net, &out, x, B, 0, NULL, 0));
		digest(st, ns, after);
		assert_string_equal(before, after);
		assert_memory_equal(params, pcopy, np * 4);
		digest(out, B * 3, h[run][2]);
		free(x), free(pcopy), free(params), free(st), free(g);
		apf_net_free(net);
		apf_backend_free(be);
	}
	for (int i = 0; i < 3; i++)
		assert_string_equal(h[0][i], h[1][i]);
}

static void net_refuses_bad_graphs(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 4, 4, 1));
	int a = apf_net_conv2d(net, 0, 2, 3, 1, 1, 0, "c");
	int b = apf_net_conv2d(net, 0, 3, 3, 1, 1, 0, "d");
	assert_int_equal(apf_net_add(net, a, b), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "adding tensors"));
	int g = apf_net_global_avgpool(net, a);
	int o = apf_net_linear(net, g, 2, 1, "o");
	/* tensor b never reaches the output */
	assert_int_equal(apf_net_finish(net, o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "does not reach"));
	apf_net_free(net);
	assert_apf_ok(apf_net_new(&net, be, 4, 4, 1));
	assert_int_equal(apf_net_conv2d(net, 0, 2, 9, 1, 1, 0, "big"), APF_EINPUT);
	assert_int_equal(apf_net_dropout(net, 0, 1.0f), APF_EINPUT);
	a = apf_net_linear(net, 0, 2, 0, "x");
	assert_int_equal(apf_net_linear(net, a, 2, 0, "x"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "two parameters"));
	apf_net_free(net);
	apf_backend_free(be);
}

static void init_depends_on_key_only(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net = small_net(be, 0, 0);
	size_t np = apf_net_param_floats(net), ns = apf_net_state_floats(net);
	float *p1 = calloc(np, 4), *p2 = calloc(np, 4), *st = calloc(ns, 4);
	apf_rng_key k1 = {1, 0, 0, APF_RNG_INIT}, k2 = {1, 0, 1, APF_RNG_INIT};
	apf_net_bind(net, p1, st);
	assert_apf_ok(apf_net_init(net, &k1, "lecun_normal"));
	apf_net_bind(net, p2, st);
	assert_apf_ok(apf_net_init(net, &k1, "lecun_normal"));
	assert_memory_equal(p1, p2, np * 4);
	assert_apf_ok(apf_net_init(net, &k2, "lecun_normal"));
	assert_memory_not_equal(p1, p2, np * 4);
	assert_true(apf_net_param(net, 1)->kind == APF_PARAM_NORM_SCALE &&
		    p2[apf_net_param(net, 1)->offset] == 1.0f);
	assert_true(st[apf_net_state(net, 1)->offset] == 1.0f); /* var */
	assert_int_equal(apf_net_init(net, &k1, "xavier"), APF_EINPUT);
	free(p1), free(p2), free(st);
	apf_net_free(net);
	apf_backend_free(be);
}

/* bench/train_step's roofline model: the input read once, every stored
 * tensor and its gradient written and read once (4 passes), a tensor
 * fused into a conv-bn-relu chain nothing. */
static void example_bytes_count_what_the_step_stores(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	apf_net *net;
	assert_apf_ok(apf_net_new(&net, be, 1, 1, 8));
	int t = apf_net_linear(net, 0, 4, 1, "fc1");
	t = apf_net_activation(net, t, APF_ACT_RELU);
	t = apf_net_linear(net, t, 2, 1, "fc2");
	assert_apf_ok(apf_net_finish(net, t));
	/* 8 + 4 x (4 + 4 + 2) floats */
	assert_true(apf_net_example_bytes(net) == 48.0 * sizeof(float));
	apf_net_free(net);
	assert_apf_ok(apf_net_new(&net, be, 4, 4, 1));
	t = apf_net_conv2d(net, 0, 2, 3, 1, 1, 0, "c");
	t = apf_net_batchnorm(net, t, 0.1f, 1e-5f, "bn");
	t = apf_net_activation(net, t, APF_ACT_RELU);
	t = apf_net_global_avgpool(net, t);
	t = apf_net_linear(net, t, 3, 1, "head");
	assert_apf_ok(apf_net_finish(net, t));
	/* 16 + 4 x (32 conv + 0 bn (fused) + 32 relu + 2 pool + 3 head) */
	assert_true(apf_net_example_bytes(net) == 292.0 * sizeof(float));
	apf_net_free(net);
	apf_backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(example_bytes_count_what_the_step_stores),
		cmocka_unit_test(linear_gradients_match_finite_differences),
		cmocka_unit_test(conv2d_gradients_match_finite_differences),
		cmocka_unit_test(batchnorm_gradients_match_finite_differences),
		cmocka_unit_test(layernorm_gradients_match_finite_differences),
		cmocka_unit_test(activation_gradients_match_finite_differences),
		cmocka_unit_test(pooling_gradients_match_finite_differences),
		cmocka_unit_test(dropout_add_and_loss_gradients_match_finite_differences),
		cmocka_unit_test(click_layers_gradients_match_finite_differences),
		cmocka_unit_test(image_layers_gradients_match_finite_differences),
		cmocka_unit_test(sequence_layers_gradients_match_finite_differences),
		cmocka_unit_test(attention_is_thread_count_invariant_and_causal),
		cmocka_unit_test(attention_keeps_its_recorded_bits),
		cmocka_unit_test(layernorm_keeps_its_recorded_bits),
		cmocka_unit_test(dlrm_net_gradient_matches_finite_differences),
		cmocka_unit_test(dropout_keeps_the_stated_share),
		cmocka_unit_test(conv_over_many_chunks_matches_reference),
		cmocka_unit_test(threaded_layers_agree_with_one_thread),
		cmocka_unit_test(bias_gradients_are_thread_count_invariant),
		cmocka_unit_test(linear_backward_gives_one_threads_bits_on_any_count),
		cmocka_unit_test(embeddings_give_the_same_bits_on_any_thread_count),
		cmocka_unit_test(layer_exp_and_tanh_are_close_exact_at_the_edges_and_vectorise),
		cmocka_unit_test(each_numerics_version_computes_its_own_formulas),
		cmocka_unit_test(numerics_3_flushes_subnormals_on_every_thread),
		cmocka_unit_test(row_layers_give_the_same_bits_on_any_thread_count),
		cmocka_unit_test(interaction_gives_the_recorded_bits_on_every_path),
		cmocka_unit_test(instnorm_forward_keeps_its_recorded_bits),
		cmocka_unit_test(image_layers_give_the_same_bits_on_one_and_two_threads),
		cmocka_unit_test(batchnorm_running_statistics_and_eval_mode),
		cmocka_unit_test(vector_ops_compute_what_they_say),
		cmocka_unit_test(net_layout_names_kinds_and_aligned_offsets),
		cmocka_unit_test(net_gradient_matches_finite_differences),
		cmocka_unit_test(net_refuses_a_layer_its_backend_lacks),
		cmocka_unit_test(net_runs_are_bit_identical_and_eval_is_read_only),
		cmocka_unit_test(net_refuses_bad_graphs),
		cmocka_unit_test(init_depends_on_key_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
