/*
 * layers.c: the CUDA backend against the CPU reference, on a GPU machine.
 * tests/gpu/run builds and runs it; it loads the plugin as apf does
 * (APF_CUDA_PLUGIN, else beside the executable: tests/gpu/run points it at
 * build/lib/apf-cuda.so).
 *
 *     layers [STEPS]
 *     layers --against-cpu [STEPS]
 *
 * (--against-cpu: the CPU's fast kernels in CUDA's place, to check this
 * program itself on a machine without a GPU.)
 *
 * For every entry the plugin implements, the same random inputs go to the
 * plain CPU backend and to CUDA, and the outputs are compared:
 *
 *     RESULT gpu <op>_max_rel_err <value> tolerance <tol> <ok|FAIL>
 *
 * the error being max |cuda - cpu| / max |cpu| over each output (for a
 * reduction, its one value; max |cpu| over its finite values), an element
 * whose bits agree, or that is NaN on both (whatever the payload: x86's
 * default NaN has the sign bit set, CUDA's not), counting 0. Tolerance 0
 * means bit for bit: there a zero of the other sign counts as an infinite
 * error too. ABI 2's operations (sub to copy_mat) are held to 0, the CPU's
 * bits being their contract; their inputs carry a quarter of special
 * values (signed zeros, infinities, NaN, subnormals, values past exp's
 * range, ...) among the random ones. Then STEPS (200) steps of each workload
 * (fmnist_mlp, fmnist_cnn, clicks_dlrm, text_lm, fmnist_unet) twice on
 * CUDA, whose parameters must agree bit for bit
 * (RESULT gpu <workload>_repeat_bitwise 1; SKIP: with the reason when a
 * workload cannot open, e.g. its dataset is absent), with its training
 * rate (samples/s; fmnist_mlp's also as a fraction of the SGEMM rate), and
 * cuBLAS's SGEMM rate (RESULT gpu sgemm_gflops). Without a device: one
 * line, SKIP: <reason>, exit 0. Exit 1 when any comparison fails.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "workload/workload.h"

#define MAXB 12

/* Shapes: rows, features, outputs, classes. */
enum { B = 96, C = 300, OC = 200, V = 1000, NV = 100003 };

struct gcase {
	const char *name;
	int nb;              /* buffers */
	size_t n[MAXB];      /* floats (or int32 labels) each */
	unsigned out;        /* bit k: buffer k is an output */
	int labels;          /* buffer holding labels in [0, V), or -1 */
	float lo, hi;        /* inputs uniform in [lo, hi) */
	double tol;
	/* runs the entry; returns its scalar result, or NAN for none */
	double (*run)(apf_backend *be, float **b);
};

static const uint32_t dkey[2] = {0x1234u, 0xabcdu};

/* ---- the cases: b[] are backend buffers, in the order of .n ---- */

#define RUN(name) static double name(apf_backend *be, float **b)

RUN(r_gemm_nn) { be->gemm(be, 0, 0, B, OC, C, 1.5f, b[0], C, b[1], OC, 0.5f, b[2], OC); return NAN; }
RUN(r_gemm_nt) { be->gemm(be, 0, 1, B, OC, C, 1.0f, b[0], C, b[1], C, 0.0f, b[2], OC); return NAN; }
RUN(r_gemm_tn) { be->gemm(be, 1, 0, B, OC, C, 1.0f, b[0], B, b[1], OC, 1.0f, b[2], OC); return NAN; }
RUN(r_gemm_tt) { be->gemm(be, 1, 1, B, OC, C, -1.0f, b[0], B, b[1], C, 0.0f, b[2], OC); return NAN; }
RUN(r_linear_forward) { be->linear_forward(be, b[0], b[1], b[2], b[3], B, C, OC); return NAN; }
RUN(r_linear_forward_nobias) { be->linear_forward(be, b[0], b[1], b[2], NULL, B, C, OC); return NAN; }
RUN(r_linear_backward)
{
	be->linear_backward(be, b[0], b[1], b[2], b[3], b[4], b[5], B, C, OC, 1);
	return NAN;
}
RUN(r_linear_backward_nodinp)
{
	be->linear_backward(be, NULL, b[1], NULL, b[3], b[4], b[5], B, C, OC, 0);
	return NAN;
}
RUN(r_layernorm_forward)
{
	be->layernorm_forward(be, b[0], b[1], b[2], b[3], b[4], b[5], B, C, 1e-5f);
	return NAN;
}
RUN(r_layernorm_backward)
{
	/* consistent statistics: the forward's, on this backend */
	be->layernorm_forward(be, b[3], b[6], b[7], b[4], b[5], b[5], B, C, 1e-5f);
	be->layernorm_backward(be, b[0], b[1], b[2], b[3], b[4], b[5], b[6],
			       b[7], B, C, 1);
	return NAN;
}
#define ACT_CASES(act, tag)                                                  \
	RUN(r_act_f_##tag) { be->activation_forward(be, act, b[0], b[1], (size_t)B * C); return NAN; } \
	RUN(r_act_b_##tag)                                                   \
	{                                                                    \
		be->activation_forward(be, act, b[3], b[2], (size_t)B * C);  \
		be->activation_backward(be, act, b[0], b[1], b[2], b[3],     \
					(size_t)B * C, 1);                   \
		return NAN;                                                  \
	}
ACT_CASES(APF_ACT_RELU, relu)
ACT_CASES(APF_ACT_GELU, gelu)
ACT_CASES(APF_ACT_SILU, silu)
ACT_CASES(APF_ACT_TANH, tanh)
RUN(r_dropout_forward) { be->dropout_forward(be, b[0], b[1], NV, 0.3f, dkey, 77); return NAN; }
RUN(r_dropout_backward) { be->dropout_backward(be, b[0], b[1], NV, 0.3f, dkey, 77, 1); return NAN; }
RUN(r_add_forward) { be->add_forward(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_accumulate_write) { be->accumulate(be, b[0], b[1], NV, 0); return NAN; }
RUN(r_accumulate_add) { be->accumulate(be, b[0], b[1], NV, 1); return NAN; }
RUN(r_softmax_xent_forward)
{
	be->softmax_xent_forward(be, b[0], b[1], b[2], (const int32_t *)b[3], B, V, 0.1f);
	return NAN;
}
RUN(r_softmax_xent_backward)
{
	be->softmax_xent_backward(be, b[0], b[1], (const int32_t *)b[2], B, V, 0.1f, 1.0f / B);
	return NAN;
}
RUN(r_count_correct)
{
	return (double)be->count_correct(be, b[0], (const int32_t *)b[1], B, 3);
}
RUN(r_fill) { be->fill(be, b[0], 0.625f, NV); return NAN; }
RUN(r_copy) { be->copy(be, b[0], b[1], NV); return NAN; }
RUN(r_scale) { be->scale(be, b[0], -0.37f, NV); return NAN; }
RUN(r_axpy) { be->axpy(be, b[0], 0.3f, b[1], NV); return NAN; }
RUN(r_axpby) { be->axpby(be, b[0], 0.3f, b[1], 0.9f, NV); return NAN; }
RUN(r_add_scalar) { be->add_scalar(be, b[0], 1.25f, NV); return NAN; }
RUN(r_mul) { be->mul(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_div) { be->div(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_sqrt) { be->sqrt(be, b[0], b[1], NV); return NAN; }
RUN(r_max) { be->max(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_clamp) { be->clamp(be, b[0], 0.2f, 0.7f, NV); return NAN; }
RUN(r_moments) { be->moments(be, b[0], b[1], b[2], 0.9f, 0.999f, NV); return NAN; }
RUN(r_adam_direction)
{
	be->adam_direction(be, b[0], b[1], b[2], 10.0f, 1000.0f, 1e-8f, NV);
	return NAN;
}
RUN(r_dot) { return be->dot(be, b[0], b[1], NV); }
RUN(r_sum) { return be->sum(be, b[0], NV); }
RUN(r_norm2) { return be->norm2(be, b[0], NV); }
RUN(r_max_abs) { return be->max_abs(be, b[0], NV); }

/* ABI 2's operations. Each case's special values (case_specials): the
 * edges of its domain; in sp_all, +-1e-30 and the subnormals make products
 * that underflow to 0 (agree compares signs, not the product). */
static const float sp_all[] = {0.0f,     -0.0f,    INFINITY, -INFINITY,
			       NAN,      1e-40f,   -1e-40f,  1e-30f,
			       -1e-30f,  FLT_MIN,  FLT_MAX,  -FLT_MAX,
			       1.0f,     -1.0f};
/* past 88.72 the float is inf, below -103.97 0, between them subnormal */
static const float sp_exp[] = {0.0f,    -0.0f,   INFINITY, -INFINITY, NAN,
			       88.7f,   88.73f,  89.9f,    90.1f,     -87.4f,
			       -103.9f, -104.5f, -104.9f,  -105.1f,   1e-40f};
static const float sp_log[] = {0.0f,   -0.0f,  -1.0f,   INFINITY, -INFINITY,
			       NAN,    1e-40f, 1.4e-45f, FLT_MIN, FLT_MAX,
			       1.0f,   2.0f,   0.5f};
static const float sp_pow[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f,
			       -1.0f, 1e-40f, FLT_MAX, 0.5f, -0.5f};
/* -1e-8 + eps is 0: 1 / sqrt(0) is inf; -1 gives NaN */
static const float sp_rsqrt[] = {0.0f,  -0.0f,   -1e-8f,  -1.0f, INFINITY,
				 NAN,   1e-40f,  FLT_MIN, FLT_MAX};

RUN(r_sub) { be->sub(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_min) { be->min(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_sign) { be->sign(be, b[0], b[1], NV); return NAN; }
RUN(r_abs) { be->abs(be, b[0], b[1], NV); return NAN; }
RUN(r_exp) { be->exp(be, b[0], b[1], NV); return NAN; }
RUN(r_log) { be->log(be, b[0], b[1], NV); return NAN; }
RUN(r_reciprocal) { be->reciprocal(be, b[0], b[1], NV); return NAN; }
RUN(r_rsqrt) { be->rsqrt(be, b[0], b[1], 1e-8f, NV); return NAN; }
RUN(r_pow)
{
	/* a root and a negative power of positive inputs */
	be->pow(be, b[0], b[2], 0.5f, NV);
	be->pow(be, b[1], b[2], -1.7f, NV);
	return NAN;
}
RUN(r_pow_integer)
{
	/* odd and even integer powers keep negative inputs' signs or not */
	be->pow(be, b[0], b[2], 3.0f, NV);
	be->pow(be, b[1], b[2], -2.0f, NV);
	return NAN;
}
RUN(r_agree) { be->agree(be, b[0], b[1], b[2], NV); return NAN; }
RUN(r_select) { be->select(be, b[0], b[1], b[2], b[3], NV); return NAN; }
RUN(r_select_inplace)
{
	/* the output over the condition */
	be->select(be, b[0], b[0], b[1], b[2], NV);
	return NAN;
}
/* a (B,C) view with a padded leading dimension; copy_mat between two
 * differently padded ones, its destination's padding left alone */
enum { MLD = C + 5, MLDD = C + 3, MLDS = C + 11 };
RUN(r_row_sumsq) { be->row_sumsq(be, b[0], b[1], B, C, MLD); return NAN; }
RUN(r_col_sumsq) { be->col_sumsq(be, b[0], b[1], B, C, MLD); return NAN; }
RUN(r_copy_mat) { be->copy_mat(be, b[0], MLDD, b[1], MLDS, B, C); return NAN; }

/* click-through shapes: F fields of EROWS rows each, vectors of ED */
enum { EF = 4, ELDI = 5, EROWS = 40, EV = EF * EROWS, ED = 16, IE = 5 };
static const int32_t eoffset[EF] = {0, EROWS, 2 * EROWS, 3 * EROWS};
#define IOC ((size_t)ED + (size_t)(IE + 1) * IE / 2)

RUN(r_sigmoid_xent_forward)
{
	be->sigmoid_xent_forward(be, b[0], b[1], b[2], (const int32_t *)b[3], B, 0.1f);
	return NAN;
}
RUN(r_sigmoid_xent_backward)
{
	be->sigmoid_xent_backward(be, b[0], b[1], (const int32_t *)b[2], B, 0.1f, 1.0f / B);
	return NAN;
}
RUN(r_embedding_forward)
{
	be->upload(be, b[3], eoffset, sizeof eoffset);
	be->embedding_forward(be, b[0], (const int32_t *)b[1], ELDI,
			      (const int32_t *)b[3], b[2], B, EF, ED);
	return NAN;
}
RUN(r_embedding_forward_shared)
{
	be->embedding_forward(be, b[0], (const int32_t *)b[1], ELDI, NULL, b[2],
			      B, EF, ED);
	return NAN;
}
RUN(r_embedding_backward)
{
	be->upload(be, b[3], eoffset, sizeof eoffset);
	be->embedding_backward(be, b[0], b[1], (const int32_t *)b[2], ELDI,
			       (const int32_t *)b[3], B, EF, EV, ED);
	return NAN;
}
RUN(r_embedding_backward_shared)
{
	be->embedding_backward(be, b[0], b[1], (const int32_t *)b[2], ELDI, NULL,
			       B, EF, EV, ED);
	return NAN;
}
RUN(r_interaction_forward) { be->interaction_forward(be, b[0], b[1], b[2], B, IE, ED); return NAN; }
RUN(r_interaction_backward)
{
	be->interaction_backward(be, b[0], b[1], b[2], b[3], b[4], B, IE, ED, 1, 0);
	return NAN;
}
RUN(r_interaction_backward_noddense)
{
	be->interaction_backward(be, NULL, b[1], b[2], b[3], b[4], B, IE, ED, 0, 1);
	return NAN;
}
RUN(r_l1_forward) { be->l1_forward(be, b[0], b[1], b[2], B, C); return NAN; }
RUN(r_l1_backward) { be->l1_backward(be, b[0], b[1], b[2], B, C, 1.0f / B); return NAN; }
RUN(r_concat_forward) { be->concat_forward(be, b[0], b[1], b[2], B, C, OC); return NAN; }
RUN(r_concat_backward) { be->concat_backward(be, b[0], b[1], b[2], B, C, OC, 1, 0); return NAN; }
RUN(r_concat_backward_noda)
{
	be->concat_backward(be, NULL, b[1], b[2], B, C, OC, 0, 1);
	return NAN;
}

/* attention shapes: (AB, AT, AC, ANH) with T not a multiple of anything, and
 * a long one past a block of keys */
enum { AB = 4, AT = 37, AC = 64, ANH = 4, LT = 300, LC = 32, LNH = 2 };
#define ATTN_CASES(tag, Bq, Tq, Cq, NHq)                                     \
	RUN(r_attn_f_##tag)                                                  \
	{                                                                    \
		be->attention_forward(be, b[0], b[1], b[2], Bq, Tq, Cq, NHq, \
				      1.0f / sqrtf((float)(Cq / NHq)));      \
		return NAN;                                                  \
	}                                                                    \
	RUN(r_attn_b_##tag)                                                  \
	{                                                                    \
		float sc = 1.0f / sqrtf((float)(Cq / NHq));                  \
		be->attention_forward(be, b[4], b[3], b[2], Bq, Tq, Cq, NHq, sc); \
		be->attention_backward(be, b[0], b[1], b[2], b[3], Bq, Tq, Cq, \
				       NHq, sc, 1);                          \
		return NAN;                                                  \
	}
ATTN_CASES(short, AB, AT, AC, ANH)
ATTN_CASES(long, 1, LT, LC, LNH)
#define AFN(Bq, Tq, Cq, NHq) {(size_t)Bq * Tq * Cq, (size_t)Bq * NHq * Tq * Tq, (size_t)Bq * Tq * 3 * Cq}
#define ABN(Bq, Tq, Cq, NHq) {(size_t)Bq * Tq * 3 * Cq, (size_t)Bq * Tq * Cq, \
			      (size_t)Bq * Tq * 3 * Cq, (size_t)Bq * NHq * Tq * Tq, \
			      (size_t)Bq * Tq * Cq}
#define GLU_CASES(act, tag)                                                  \
	RUN(r_glu_f_##tag) { be->glu_forward(be, act, b[0], b[1], B, C); return NAN; } \
	RUN(r_glu_b_##tag) { be->glu_backward(be, act, b[0], b[1], b[2], B, C, 1); return NAN; }
GLU_CASES(APF_ACT_RELU, relu)
GLU_CASES(APF_ACT_GELU, gelu)
GLU_CASES(APF_ACT_SILU, silu)
GLU_CASES(APF_ACT_TANH, tanh)

/* image shapes: (IB, IH, IW, IC) -> OC2 channels, kernel 3; pooling 3/2/1 */
enum { IB = 6, IH = 11, IW = 9, IC = 5, OC2 = 7 };
#define IMG ((size_t)IB * IH * IW * IC)
#define CONV_CASES(tag, Kq, Sq, Pq)                                          \
	enum { OH_##tag = (IH + 2 * Pq - Kq) / Sq + 1,                        \
	       OW_##tag = (IW + 2 * Pq - Kq) / Sq + 1 };                      \
	RUN(r_conv_f_##tag)                                                  \
	{                                                                    \
		float *w = NULL;                                             \
		size_t n = be->conv2d_work(be, IB, IH, IW, IC, OC2, Kq, Sq, Pq); \
		if (be->alloc(be, n * sizeof *w, (void **)&w))               \
			return INFINITY;                                     \
		be->conv2d_forward(be, b[0], b[1], b[2], b[3], IB, IH, IW, IC, \
				   OC2, Kq, Sq, Pq, w);                      \
		be->sync(be);                                                \
		be->free(be, w);                                             \
		return NAN;                                                  \
	}                                                                    \
	RUN(r_conv_b_##tag)                                                  \
	{                                                                    \
		float *w = NULL;                                             \
		size_t n = be->conv2d_work(be, IB, IH, IW, IC, OC2, Kq, Sq, Pq); \
		if (be->alloc(be, n * sizeof *w, (void **)&w))               \
			return INFINITY;                                     \
		be->conv2d_backward(be, b[0], b[1], b[2], b[3], b[4], b[5],  \
				    IB, IH, IW, IC, OC2, Kq, Sq, Pq, w, 1);  \
		be->conv2d_backward(be, NULL, b[6], NULL, b[3], b[4], b[5],  \
				    IB, IH, IW, IC, OC2, Kq, Sq, Pq, w, 0);  \
		be->sync(be);                                                \
		be->free(be, w);                                             \
		return NAN;                                                  \
	}
CONV_CASES(k3s2, 3, 2, 1)
CONV_CASES(k3s1, 3, 1, 1)
CONV_CASES(k1, 1, 1, 0)
#define CONVF(tag, Kq) {(size_t)IB * OH_##tag * OW_##tag * OC2, IMG, (size_t)OC2 * Kq * Kq * IC, OC2}
#define CONVB(tag, Kq) {IMG, (size_t)OC2 * Kq * Kq * IC, OC2,                   \
		       (size_t)IB * OH_##tag * OW_##tag * OC2, IMG,               \
		       (size_t)OC2 * Kq * Kq * IC, (size_t)OC2 * Kq * Kq * IC}
enum { PK = 3, PS = 2, PP = 1, POH = (IH + 2 * PP - PK) / PS + 1,
       POW = (IW + 2 * PP - PK) / PS + 1 };
#define POUT ((size_t)IB * POH * POW * IC)
RUN(r_maxpool_forward)
{
	be->maxpool2d_forward(be, b[0], (int32_t *)b[1], b[2], IB, IH, IW, IC, PK, PS, PP);
	return NAN;
}
RUN(r_maxpool_backward)
{
	be->maxpool2d_forward(be, b[3], (int32_t *)b[2], b[4], IB, IH, IW, IC, PK, PS, PP);
	be->maxpool2d_backward(be, b[0], b[1], (const int32_t *)b[2], IB, IH, IW,
			       IC, PK, PS, PP, 1);
	return NAN;
}
RUN(r_maxpool_backward_write)
{
	/* 2/2/0: windows that do not overlap, every input written */
	be->maxpool2d_forward(be, b[3], (int32_t *)b[2], b[4], IB, IH, IW, IC, 2, 2, 0);
	be->maxpool2d_backward(be, b[0], b[1], (const int32_t *)b[2], IB, IH, IW,
			       IC, 2, 2, 0, 0);
	return NAN;
}
RUN(r_avgpool_forward)
{
	be->avgpool2d_forward(be, b[0], b[1], IB, IH, IW, IC, PK, PS, PP);
	return NAN;
}
RUN(r_avgpool_backward)
{
	be->avgpool2d_backward(be, b[0], b[1], IB, IH, IW, IC, PK, PS, PP, 1);
	return NAN;
}
RUN(r_avgpool_backward_write)
{
	be->avgpool2d_backward(be, b[0], b[1], IB, IH, IW, IC, PK, PS, PP, 0);
	return NAN;
}
RUN(r_gap_forward) { be->global_avgpool_forward(be, b[0], b[1], IB, IH * IW, IC); return NAN; }
RUN(r_gap_backward)
{
	be->global_avgpool_backward(be, b[0], b[1], IB, IH * IW, IC, 1);
	return NAN;
}
RUN(r_gap_backward_write)
{
	be->global_avgpool_backward(be, b[0], b[1], IB, IH * IW, IC, 0);
	return NAN;
}

/* batch norm over NN rows (past BN's row shares) of NC channels (past one
 * channel group, not a multiple of it) */
enum { NN = 1000, NC = 45 };
#define NNC ((size_t)NN * NC)
RUN(r_bn_forward_train)
{
	be->batchnorm_forward(be, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			      NN, NC, 0.1f, 1e-5f, 1);
	return NAN;
}
RUN(r_bn_forward_eval)
{
	be->batchnorm_forward(be, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			      NN, NC, 0.1f, 1e-5f, 0);
	return NAN;
}
RUN(r_bn_backward)
{
	/* consistent statistics: the forward's, on this backend */
	be->batchnorm_forward(be, b[8], b[6], b[7], b[4], b[5], b[5], b[9], b[10],
			      NN, NC, 0.1f, 1e-5f, 1);
	be->batchnorm_backward(be, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			       NN, NC, 1);
	return NAN;
}
RUN(r_bn_backward_nodinp)
{
	be->batchnorm_forward(be, b[8], b[6], b[7], b[4], b[5], b[5], b[9], b[10],
			      NN, NC, 0.1f, 1e-5f, 1);
	be->batchnorm_backward(be, NULL, b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			       NN, NC, 0);
	return NAN;
}
/* instance norm: IB images of IH*IW pixels, NC channels */
#define INB ((size_t)IB * NC)
#define INX ((size_t)IB * IH * IW * NC)
RUN(r_in_forward)
{
	be->instnorm_forward(be, b[0], b[1], b[2], b[3], b[4], b[5], IB, IH * IW,
			     NC, 1e-5f);
	return NAN;
}
RUN(r_in_backward)
{
	be->instnorm_forward(be, b[8], b[6], b[7], b[4], b[5], b[5], IB, IH * IW,
			     NC, 1e-5f);
	be->instnorm_backward(be, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			      IB, IH * IW, NC, 1);
	return NAN;
}
RUN(r_in_backward_nodinp)
{
	be->instnorm_forward(be, b[8], b[6], b[7], b[4], b[5], b[5], IB, IH * IW,
			     NC, 1e-5f);
	be->instnorm_backward(be, NULL, b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			      IB, IH * IW, NC, 0);
	return NAN;
}
/* 2x2 transposed convolution of (IB, IH, IW, IC) images to OC2 channels */
#define UIN ((size_t)IB * IH * IW * IC)
#define UOUT ((size_t)IB * 4 * IH * IW * OC2)
#define UW ((size_t)OC2 * 4 * IC)
RUN(r_up_forward) { be->upconv2x2_forward(be, b[0], b[1], b[2], b[3], IB, IH, IW, IC, OC2); return NAN; }
RUN(r_up_forward_nobias) { be->upconv2x2_forward(be, b[0], b[1], b[2], NULL, IB, IH, IW, IC, OC2); return NAN; }
RUN(r_up_backward)
{
	be->upconv2x2_backward(be, b[0], b[1], b[2], b[3], b[4], b[5], IB, IH, IW,
			       IC, OC2, 1);
	return NAN;
}
RUN(r_up_backward_nodinp)
{
	be->upconv2x2_backward(be, NULL, b[1], NULL, b[3], b[4], b[5], IB, IH, IW,
			       IC, OC2, 0);
	return NAN;
}

#define BC ((size_t)B * C)
#define BO ((size_t)B * OC)
#define OCC ((size_t)OC * C)
#define BV ((size_t)B * V)

static const struct gcase cases[] = {
	{"gemm_nn", 3, {BC, OCC, BO}, 4, -1, -1, 1, 1e-5, r_gemm_nn},
	{"gemm_nt", 3, {BC, OCC, BO}, 4, -1, -1, 1, 1e-5, r_gemm_nt},
	{"gemm_tn", 3, {BC, OCC, BO}, 4, -1, -1, 1, 1e-5, r_gemm_tn},
	{"gemm_tt", 3, {BC, OCC, BO}, 4, -1, -1, 1, 1e-5, r_gemm_tt},
	{"linear_forward", 4, {BO, BC, OCC, OC}, 1, -1, -1, 1, 1e-5, r_linear_forward},
	{"linear_forward_nobias", 3, {BO, BC, OCC}, 1, -1, -1, 1, 1e-5,
	 r_linear_forward_nobias},
	{"linear_backward", 6, {BC, OCC, OC, BO, BC, OCC}, 7, -1, -1, 1, 1e-5,
	 r_linear_backward},
	{"linear_backward_nodinp", 6, {BC, OCC, OC, BO, BC, OCC}, 2, -1, -1, 1,
	 1e-5, r_linear_backward_nodinp},
	{"layernorm_forward", 6, {BC, B, B, BC, C, C}, 7, -1, -3, 5, 1e-5,
	 r_layernorm_forward},
	{"layernorm_backward", 8, {BC, C, C, BC, BC, C, B, B}, 7, -1, -1, 1,
	 1e-5, r_layernorm_backward},
	{"activation_forward_relu", 2, {BC, BC}, 1, -1, -4, 4, 1e-6, r_act_f_relu},
	{"activation_forward_gelu", 2, {BC, BC}, 1, -1, -4, 4, 1e-5, r_act_f_gelu},
	{"activation_forward_silu", 2, {BC, BC}, 1, -1, -4, 4, 1e-5, r_act_f_silu},
	{"activation_forward_tanh", 2, {BC, BC}, 1, -1, -4, 4, 1e-5, r_act_f_tanh},
	{"activation_backward_relu", 4, {BC, BC, BC, BC}, 1, -1, -4, 4, 1e-6, r_act_b_relu},
	{"activation_backward_gelu", 4, {BC, BC, BC, BC}, 1, -1, -4, 4, 1e-5, r_act_b_gelu},
	{"activation_backward_silu", 4, {BC, BC, BC, BC}, 1, -1, -4, 4, 1e-5, r_act_b_silu},
	{"activation_backward_tanh", 4, {BC, BC, BC, BC}, 1, -1, -4, 4, 1e-5, r_act_b_tanh},
	{"dropout_forward", 2, {NV, NV}, 1, -1, -1, 1, 1e-7, r_dropout_forward},
	{"dropout_backward", 2, {NV, NV}, 1, -1, -1, 1, 1e-7, r_dropout_backward},
	{"add_forward", 3, {NV, NV, NV}, 1, -1, -1, 1, 1e-7, r_add_forward},
	{"accumulate_write", 2, {NV, NV}, 1, -1, -1, 1, 0, r_accumulate_write},
	{"accumulate_add", 2, {NV, NV}, 1, -1, -1, 1, 1e-7, r_accumulate_add},
	{"softmax_xent_forward", 4, {B, BV, BV, B}, 3, 3, -8, 8, 1e-5,
	 r_softmax_xent_forward},
	{"softmax_xent_backward", 3, {BV, BV, B}, 1, 2, 0, 1, 1e-6,
	 r_softmax_xent_backward},
	{"count_correct", 2, {(size_t)B * 3, B}, 0, 1, -1, 1, 0, r_count_correct},
	{"sigmoid_xent_forward", 4, {B, B, B, B}, 3, 3, -8, 8, 1e-6,
	 r_sigmoid_xent_forward},
	{"sigmoid_xent_backward", 3, {B, B, B}, 1, 2, 0, 1, 1e-6,
	 r_sigmoid_xent_backward},
	{"embedding_forward", 4, {(size_t)B * EF * ED, (size_t)B * ELDI,
				   (size_t)EV * ED, EF}, 1, 1, -1, 1, 0,
	 r_embedding_forward},
	{"embedding_forward_shared", 3, {(size_t)B * EF * ED, (size_t)B * ELDI,
					  (size_t)EV * ED}, 1, 1, -1, 1, 0,
	 r_embedding_forward_shared},
	{"embedding_backward", 4, {(size_t)EV * ED, (size_t)B * EF * ED,
				    (size_t)B * ELDI, EF}, 1, 2, -1, 1, 1e-6,
	 r_embedding_backward},
	{"embedding_backward_shared", 3, {(size_t)EV * ED, (size_t)B * EF * ED,
					   (size_t)B * ELDI}, 1, 2, -1, 1, 1e-6,
	 r_embedding_backward_shared},
	{"interaction_forward", 3, {B * IOC, (size_t)B * ED, (size_t)B * IE * ED},
	 1, -1, -1, 1, 1e-6, r_interaction_forward},
	{"interaction_backward", 5, {(size_t)B * ED, (size_t)B * IE * ED, B * IOC,
				      (size_t)B * ED, (size_t)B * IE * ED}, 3, -1,
	 -1, 1, 1e-6, r_interaction_backward},
	{"interaction_backward_noddense", 5, {(size_t)B * ED, (size_t)B * IE * ED,
					       B * IOC, (size_t)B * ED,
					       (size_t)B * IE * ED}, 3, -1, -1, 1,
	 1e-6, r_interaction_backward_noddense},
	{"l1_forward", 3, {B, BC, BC}, 1, -1, -1, 1, 1e-6, r_l1_forward},
	{"l1_backward", 3, {BC, BC, BC}, 1, -1, -1, 1, 1e-7, r_l1_backward},
	{"concat_forward", 3, {B * ((size_t)C + OC), BC, BO}, 1, -1, -1, 1, 0,
	 r_concat_forward},
	{"concat_backward", 3, {BC, BO, B * ((size_t)C + OC)}, 3, -1, -1, 1, 1e-7,
	 r_concat_backward},
	{"concat_backward_noda", 3, {BC, BO, B * ((size_t)C + OC)}, 3, -1, -1, 1,
	 1e-7, r_concat_backward_noda},
	{"attention_forward", 3, AFN(AB, AT, AC, ANH), 3, -1, -1, 1, 1e-5,
	 r_attn_f_short},
	{"attention_backward", 5, ABN(AB, AT, AC, ANH), 1, -1, -1, 1, 1e-5,
	 r_attn_b_short},
	{"attention_forward_long", 3, AFN(1, LT, LC, LNH), 3, -1, -1, 1, 1e-5,
	 r_attn_f_long},
	{"attention_backward_long", 5, ABN(1, LT, LC, LNH), 1, -1, -1, 1, 1e-5,
	 r_attn_b_long},
	{"glu_forward_relu", 2, {BC, 2 * BC}, 1, -1, -4, 4, 1e-6, r_glu_f_relu},
	{"glu_forward_gelu", 2, {BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_f_gelu},
	{"glu_forward_silu", 2, {BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_f_silu},
	{"glu_forward_tanh", 2, {BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_f_tanh},
	{"glu_backward_relu", 3, {2 * BC, BC, 2 * BC}, 1, -1, -4, 4, 1e-6, r_glu_b_relu},
	{"glu_backward_gelu", 3, {2 * BC, BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_b_gelu},
	{"glu_backward_silu", 3, {2 * BC, BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_b_silu},
	{"glu_backward_tanh", 3, {2 * BC, BC, 2 * BC}, 1, -1, -4, 4, 1e-5, r_glu_b_tanh},
	{"conv2d_forward_k3s2", 4, CONVF(k3s2, 3), 1, -1, -1, 1, 1e-5, r_conv_f_k3s2},
	{"conv2d_forward_k3s1", 4, CONVF(k3s1, 3), 1, -1, -1, 1, 1e-5, r_conv_f_k3s1},
	{"conv2d_forward_k1", 4, CONVF(k1, 1), 1, -1, -1, 1, 1e-5, r_conv_f_k1},
	{"conv2d_backward_k3s2", 7, CONVB(k3s2, 3), 0x47, -1, -1, 1, 1e-5,
	 r_conv_b_k3s2},
	{"conv2d_backward_k3s1", 7, CONVB(k3s1, 3), 0x47, -1, -1, 1, 1e-5,
	 r_conv_b_k3s1},
	{"conv2d_backward_k1", 7, CONVB(k1, 1), 0x47, -1, -1, 1, 1e-5,
	 r_conv_b_k1},
	{"maxpool2d_forward", 3, {POUT, POUT, IMG}, 3, -1, -1, 1, 0,
	 r_maxpool_forward},
	{"maxpool2d_backward", 5, {IMG, POUT, POUT, POUT, IMG}, 1, -1, -1, 1, 1e-7,
	 r_maxpool_backward},
	{"maxpool2d_backward_write", 5, {IMG, POUT, POUT, POUT, IMG}, 1, -1, -1, 1,
	 1e-7, r_maxpool_backward_write},
	{"avgpool2d_forward", 2, {POUT, IMG}, 1, -1, -1, 1, 1e-7, r_avgpool_forward},
	{"avgpool2d_backward", 2, {IMG, POUT}, 1, -1, -1, 1, 1e-7, r_avgpool_backward},
	{"avgpool2d_backward_write", 2, {IMG, POUT}, 1, -1, -1, 1, 1e-7,
	 r_avgpool_backward_write},
	{"global_avgpool_forward", 2, {(size_t)IB * IC, IMG}, 1, -1, -1, 1, 1e-6,
	 r_gap_forward},
	{"global_avgpool_backward", 2, {IMG, (size_t)IB * IC}, 1, -1, -1, 1, 1e-7,
	 r_gap_backward},
	{"global_avgpool_backward_write", 2, {IMG, (size_t)IB * IC}, 1, -1, -1, 1,
	 1e-7, r_gap_backward_write},
	{"batchnorm_forward_train", 8, {NNC, NC, NC, NNC, NC, NC, NC, NC}, 0xc7, -1,
	 0.5f, 2, 1e-5, r_bn_forward_train},
	{"batchnorm_forward_eval", 8, {NNC, NC, NC, NNC, NC, NC, NC, NC}, 1, -1,
	 0.5f, 2, 1e-5, r_bn_forward_eval},
	{"batchnorm_backward", 11, {NNC, NC, NC, NNC, NNC, NC, NC, NC, NNC, NC, NC},
	 7, -1, -1, 1, 1e-5, r_bn_backward},
	{"batchnorm_backward_nodinp", 11, {NNC, NC, NC, NNC, NNC, NC, NC, NC, NNC,
					   NC, NC}, 6, -1, -1, 1, 1e-5,
	 r_bn_backward_nodinp},
	{"instnorm_forward", 6, {INX, INB, INB, INX, NC, NC}, 7, -1, -1, 3, 1e-5,
	 r_in_forward},
	{"instnorm_backward", 9, {INX, NC, NC, INX, INX, NC, INB, INB, INX}, 7, -1,
	 -1, 1, 1e-5, r_in_backward},
	{"instnorm_backward_nodinp", 9, {INX, NC, NC, INX, INX, NC, INB, INB, INX},
	 6, -1, -1, 1, 1e-5, r_in_backward_nodinp},
	{"upconv2x2_forward", 4, {UOUT, UIN, UW, OC2}, 1, -1, -1, 1, 1e-5,
	 r_up_forward},
	{"upconv2x2_forward_nobias", 3, {UOUT, UIN, UW}, 1, -1, -1, 1, 1e-5,
	 r_up_forward_nobias},
	{"upconv2x2_backward", 6, {UIN, UW, OC2, UOUT, UIN, UW}, 7, -1, -1, 1, 1e-5,
	 r_up_backward},
	{"upconv2x2_backward_nodinp", 6, {UIN, UW, OC2, UOUT, UIN, UW}, 2, -1, -1,
	 1, 1e-5, r_up_backward_nodinp},
	{"fill", 1, {NV}, 1, -1, -1, 1, 0, r_fill},
	{"copy", 2, {NV, NV}, 1, -1, -1, 1, 0, r_copy},
	{"scale", 1, {NV}, 1, -1, -1, 1, 1e-7, r_scale},
	{"axpy", 2, {NV, NV}, 1, -1, -1, 1, 1e-7, r_axpy},
	{"axpby", 2, {NV, NV}, 1, -1, -1, 1, 1e-7, r_axpby},
	{"add_scalar", 1, {NV}, 1, -1, -1, 1, 1e-7, r_add_scalar},
	{"mul", 3, {NV, NV, NV}, 1, -1, -1, 1, 1e-7, r_mul},
	{"div", 3, {NV, NV, NV}, 1, -1, 0.5f, 2, 1e-7, r_div},
	{"sqrt", 2, {NV, NV}, 1, -1, 0, 4, 1e-7, r_sqrt},
	{"max", 3, {NV, NV, NV}, 1, -1, -1, 1, 0, r_max},
	{"clamp", 1, {NV}, 1, -1, -1, 1, 0, r_clamp},
	{"moments", 3, {NV, NV, NV}, 3, -1, 0, 1, 1e-7, r_moments},
	{"adam_direction", 3, {NV, NV, NV}, 1, -1, 0.01f, 1, 1e-6, r_adam_direction},
	{"dot", 2, {NV, NV}, 0, -1, -1, 1, 1e-10, r_dot},
	{"sum", 1, {NV}, 0, -1, -1, 1, 1e-10, r_sum},
	{"norm2", 1, {NV}, 0, -1, -1, 1, 1e-10, r_norm2},
	{"max_abs", 1, {NV}, 0, -1, -1, 1, 0, r_max_abs},
	/* ABI 2: tolerance 0, bit for bit (NaN payloads aside) */
	{"sub", 3, {NV, NV, NV}, 1, -1, -1, 1, 0, r_sub},
	{"min", 3, {NV, NV, NV}, 1, -1, -1, 1, 0, r_min},
	{"sign", 2, {NV, NV}, 1, -1, -1, 1, 0, r_sign},
	{"abs", 2, {NV, NV}, 1, -1, -1, 1, 0, r_abs},
	{"exp", 2, {NV, NV}, 1, -1, -20, 20, 0, r_exp},
	{"log", 2, {NV, NV}, 1, -1, 0, 100, 0, r_log},
	{"reciprocal", 2, {NV, NV}, 1, -1, -2, 2, 0, r_reciprocal},
	{"rsqrt", 2, {NV, NV}, 1, -1, 0, 4, 0, r_rsqrt},
	{"pow", 3, {NV, NV, NV}, 3, -1, 0, 4, 0, r_pow},
	{"pow_integer", 3, {NV, NV, NV}, 3, -1, -3, 3, 0, r_pow_integer},
	{"agree", 3, {NV, NV, NV}, 1, -1, -1, 1, 0, r_agree},
	{"select", 4, {NV, NV, NV, NV}, 1, -1, -1, 1, 0, r_select},
	{"select_inplace", 3, {NV, NV, NV}, 1, -1, -1, 1, 0, r_select_inplace},
	{"row_sumsq", 2, {B, (size_t)B * MLD}, 1, -1, -2, 2, 0, r_row_sumsq},
	{"col_sumsq", 2, {C, (size_t)B * MLD}, 1, -1, -2, 2, 0, r_col_sumsq},
	{"copy_mat", 2, {(size_t)B * MLDD, (size_t)B * MLDS}, 1, -1, -1, 1, 0,
	 r_copy_mat},
};

/* ---- the comparison ---- */

/* Special values among a case's inputs: each element one of them instead
 * with probability 1/4; none for the cases not named here. */
#define SPECIAL(a) a, sizeof a / sizeof *a
static const struct {
	const char *name;
	const float *v;
	size_t n;
} specials[] = {
	{"sub", SPECIAL(sp_all)},         {"min", SPECIAL(sp_all)},
	{"sign", SPECIAL(sp_all)},        {"abs", SPECIAL(sp_all)},
	{"exp", SPECIAL(sp_exp)},         {"log", SPECIAL(sp_log)},
	{"reciprocal", SPECIAL(sp_all)},  {"rsqrt", SPECIAL(sp_rsqrt)},
	{"pow", SPECIAL(sp_pow)},         {"pow_integer", SPECIAL(sp_pow)},
	{"agree", SPECIAL(sp_all)},       {"select", SPECIAL(sp_all)},
	{"select_inplace", SPECIAL(sp_all)}, {"copy_mat", SPECIAL(sp_all)},
};

static const float *case_specials(const char *name, size_t *n)
{
	for (size_t i = 0; i < sizeof specials / sizeof *specials; i++)
		if (!strcmp(name, specials[i].name)) {
			*n = specials[i].n;
			return specials[i].v;
		}
	*n = 0;
	return NULL;
}

struct outputs {
	float *host[MAXB];
	double value;
};

/* Labels are classes in [0, V), except: count_correct's 3, the sigmoid's
 * 0/1, embedding indices within one field's rows. */
static int label_classes(const char *name)
{
	if (!strcmp(name, "count_correct"))
		return 3;
	if (!strncmp(name, "sigmoid_xent", 12))
		return 2;
	if (!strncmp(name, "embedding", 9))
		return EROWS;
	return V;
}

/* Fills the case's inputs from one seed, runs it on be, downloads outputs. */
static int run_case(apf_backend *be, const struct gcase *c, struct outputs *o)
{
	apf_rng_key key = {42, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &key, 0);
	size_t nspecial;
	const float *special = case_specials(c->name, &nspecial);
	float *dev[MAXB] = {0};
	int rc = 0;
	for (int k = 0; k < c->nb && !rc; k++) {
		size_t n = c->n[k];
		float *h = malloc(n * sizeof *h);
		if (!h)
			return fprintf(stderr, "layers: out of memory\n"), -1;
		if (k == c->labels) {
			int32_t *l = (int32_t *)h;
			int classes = label_classes(c->name);
			for (size_t i = 0; i < n; i++)
				l[i] = (int32_t)apf_rng_below(&r, (uint32_t)classes);
		} else {
			for (size_t i = 0; i < n; i++) {
				h[i] = c->lo + (c->hi - c->lo) * apf_rng_uniform(&r);
				if (nspecial && apf_rng_below(&r, 4) == 0)
					h[i] = special[apf_rng_below(
						&r, (uint32_t)nspecial)];
			}
		}
		rc = be->alloc(be, n * sizeof *h, (void **)&dev[k]);
		if (!rc)
			be->upload(be, dev[k], h, n * sizeof *h);
		o->host[k] = h;
	}
	if (!rc) {
		o->value = c->run(be, dev);
		for (int k = 0; k < c->nb; k++)
			if (c->out >> k & 1)
				be->download(be, o->host[k], dev[k],
					     c->n[k] * sizeof(float));
		rc = be->sync(be);
	}
	for (int k = 0; k < c->nb; k++)
		if (dev[k])
			be->free(be, dev[k]);
	if (rc)
		fprintf(stderr, "layers: %s on %s: %s\n", c->name, be->name,
			apf_error_message());
	return rc;
}

static double rel_err(const struct gcase *c, const struct outputs *a,
		      const struct outputs *ref)
{
	double worst = 0.0;
	if (!isnan(ref->value) || !isnan(a->value)) {
		double d = fabs(a->value - ref->value);
		worst = d / (fabs(ref->value) > 0 ? fabs(ref->value) : 1.0);
		if (isnan(d))
			worst = INFINITY;
	}
	for (int k = 0; k < c->nb; k++) {
		if (!(c->out >> k & 1))
			continue;
		double dmax = 0.0, rmax = 0.0;
		for (size_t i = 0; i < c->n[k]; i++) {
			float g = a->host[k][i], w = ref->host[k][i];
			double d = 0.0;
			if (memcmp(&g, &w, sizeof g) && !(isnan(g) && isnan(w))) {
				d = fabs((double)g - w);
				/* NaN against a number, inf against another
				 * value; at tolerance 0, +0 against -0 */
				if (isnan(d) || (d == 0.0 && c->tol == 0))
					d = INFINITY;
			}
			dmax = d > dmax ? d : dmax;
			double m = fabs((double)w);
			if (isfinite(m))
				rmax = m > rmax ? m : rmax;
		}
		double e = dmax / (rmax > 0 ? rmax : 1.0);
		worst = e > worst ? e : worst;
	}
	return worst;
}

static void free_outputs(struct outputs *o, int nb)
{
	for (int k = 0; k < nb; k++)
		free(o->host[k]);
}

/* ---- a workload twice ---- */

enum { FIT_BATCH = 128 };

static int fit_digest(apf_backend *be, const char *name, long steps,
		      uint8_t digest[32], double *seconds, double *macs,
		      char *why, size_t wn)
{
	apf_workload_spec *spec;
	apf_workload *wl;
	apf_trial_key key = {7, 0, 1};
	if (apf_workload_spec_load(&spec, name)) {
		snprintf(why, wn, "%s", apf_error_message());
		return -1;
	}
	if (apf_workload_open(&wl, spec, "base", be, &key, 0)) {
		snprintf(why, wn, "%s", apf_error_message());
		apf_workload_spec_free(spec);
		return -1;
	}
	struct apf_fit_opts o = {
		.steps = steps, .batch = FIT_BATCH, .eval_every = -1,
		.adamw = {.lr = 1e-3, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8,
			  .weight_decay = 1e-4, .warmup_frac = 0.05}};
	struct apf_fit_result res;
	int rc = apf_workload_fit(&res, wl, &o);
	if (rc)
		snprintf(why, wn, "%s", apf_error_message());
	else {
		memcpy(digest, res.digest, 32);
		*seconds = res.train_seconds;
		*macs = apf_net_forward_macs(apf_workload_net(wl));
	}
	apf_workload_close(wl);
	apf_workload_spec_free(spec);
	return rc;
}

/* ---- SGEMM rate ---- */

static double sgemm_gflops(apf_backend *be)
{
	enum { S = 4096, REPS = 20 };
	size_t n = (size_t)S * S;
	float *a, *b, *c;
	if (be->alloc(be, n * 4, (void **)&a) || be->alloc(be, n * 4, (void **)&b) ||
	    be->alloc(be, n * 4, (void **)&c))
		return NAN;
	be->fill(be, a, 0.5f, n);
	be->fill(be, b, 0.25f, n);
	be->gemm(be, 0, 0, S, S, S, 1.0f, a, S, b, S, 0.0f, c, S);
	be->sync(be);
	uint64_t t0 = apf_now_ns();
	for (int r = 0; r < REPS; r++)
		be->gemm(be, 0, 0, S, S, S, 1.0f, a, S, b, S, 0.0f, c, S);
	int rc = be->sync(be);
	double s = (double)(apf_now_ns() - t0) / 1e9;
	be->free(be, a);
	be->free(be, b);
	be->free(be, c);
	return rc ? NAN : 2.0 * S * S * (double)S * REPS / s / 1e9;
}

int main(int argc, char **argv)
{
	int against_cpu = argc > 1 && !strcmp(argv[1], "--against-cpu");
	long steps = argc > 1 + against_cpu ? atol(argv[1 + against_cpu]) : 200;
	char what[512];
	if (!against_cpu && apf_cuda_probe(what, sizeof what)) {
		printf("SKIP: %s\n", what);
		return 0;
	}
	printf("device: %s\n", against_cpu ? "the CPU's fast kernels" : what);
	apf_backend *cpu, *cuda;
	if (apf_backend_cpu_plain_new(&cpu, 1) ||
	    (against_cpu ? apf_backend_cpu_new(&cuda, 1)
			 : apf_backend_cuda_new(&cuda, 1))) {
		fprintf(stderr, "layers: %s\n", apf_error_message());
		return 1;
	}
	int failed = 0;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const struct gcase *c = &cases[i];
		struct outputs ref = {0}, got = {0};
		int rc = run_case(cpu, c, &ref);
		if (!rc)
			rc = run_case(cuda, c, &got);
		double e = rc ? INFINITY : rel_err(c, &got, &ref);
		int ok = e <= c->tol;
		failed |= !ok;
		printf("RESULT gpu %s_max_rel_err %.3g tolerance %.0e %s\n",
		       c->name, e, c->tol, ok ? "ok" : "FAIL");
		free_outputs(&ref, c->nb);
		free_outputs(&got, c->nb);
	}
	fflush(stdout);
	double peak = sgemm_gflops(cuda);
	/* every workload twice: the same parameters bit for bit */
	static const char *const workloads[] = {"fmnist_mlp", "fmnist_cnn",
						"clicks_dlrm", "text_lm",
						"fmnist_unet"};
	for (size_t w = 0; w < sizeof workloads / sizeof *workloads; w++) {
		const char *name = workloads[w];
		uint8_t d1[32], d2[32];
		double s1 = 0, s2 = 0, macs = 0;
		char why[512];
		if (fit_digest(cuda, name, steps, d1, &s1, &macs, why, sizeof why) ||
		    fit_digest(cuda, name, steps, d2, &s2, &macs, why, sizeof why)) {
			printf("SKIP: %s_repeat_bitwise: %s\n", name, why);
			fflush(stdout);
			continue;
		}
		int same = !memcmp(d1, d2, 32);
		failed |= !same;
		double rate = FIT_BATCH * (double)steps * 2.0 / (s1 + s2);
		printf("RESULT gpu %s_repeat_bitwise %d\n", name, same);
		printf("RESULT gpu %s_samples_per_s %.1f\n", name, rate);
		if (w == 0)
			/* a training step is about 3 forward passes of
			 * multiply-adds */
			printf("RESULT gpu fmnist_mlp_sgemm_fraction %.4f\n",
			       rate * 6.0 * macs / 1e9 / peak);
		fflush(stdout);
	}
	printf("RESULT gpu sgemm_gflops %.1f\n", peak);
	apf_backend_free(cuda);
	apf_backend_free(cpu);
	return failed;
}
