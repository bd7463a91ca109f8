/*
 * cuda_impl.h: what the plugin's files share: the backend's state, its
 * error recording, and the table entries kernels.cu defines for cuda.cu's
 * table.
 *
 * One stream carries every call, in the order the caller made them, so the
 * results are those of a sequential program; every kernel has a fixed grid
 * for its shapes and sums in a fixed order (no atomics), so a run repeats
 * bit for bit on one GPU model and driver.
 */
#ifndef APF_NN_CUDA_IMPL_H
#define APF_NN_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "nn/cuda_plugin.h"
#include "nn/nn.h"
}

/* Reductions: RED_BLOCKS blocks of RED_THREADS threads each sum a strided
 * share into one double, then one block sums the RED_BLOCKS partials. */
#define RED_BLOCKS 256
#define RED_THREADS 256
/* Row kernels (softmax, layer norm): one block of ROW_THREADS per row. */
#define ROW_THREADS 256
/* Elementwise kernels. */
#define EW_THREADS 256

struct cuda_impl {
	struct apf_cuda_head head; /* first: the loader reads it */
	cudaStream_t stream;
	cublasHandle_t blas;
	/* sticky first error since the last sync */
	int failed;
	char fail[200];
	double *partials; /* device: RED_BLOCKS + 1 */
	double *result;   /* pinned host: 1 */
	/* device scratch for layers that need it (attention's backward),
	 * grown on demand, freed with the backend */
	void *scratch;
	size_t scratch_bytes;
};

static inline struct cuda_impl *impl_of(apf_backend *be)
{
	return (struct cuda_impl *)be->impl;
}

/* Records the first failure: `what` and CUDA's or cuBLAS's reason. */
void cuda_fail(apf_backend *be, const char *what, const char *why);
/* After a launch or an asynchronous call: records err unless it is success. */
void cuda_check(apf_backend *be, const char *what, cudaError_t err);

/* Device scratch of at least n bytes, valid until the next call; NULL
 * after recording the failure. Growing it waits for queued work. */
void *cuda_scratch(apf_backend *be, size_t n);

/* Elementwise grid for n items. */
static inline unsigned ew_blocks(size_t n)
{
	size_t b = (n + EW_THREADS - 1) / EW_THREADS;
	return (unsigned)(b ? b : 1);
}

/* ---- the entries kernels.cu defines ---- */
void cu_column_sums(apf_backend *be, float *dbias, const float *dout, size_t R,
		    int OC);
void cu_rows_copy(apf_backend *be, float *out, const float *row, int B, int OC);
void cu_layernorm_forward(apf_backend *be, float *out, float *mean, float *rstd,
			  const float *inp, const float *scale,
			  const float *bias, int N, int C, float eps);
void cu_layernorm_backward(apf_backend *be, float *dinp, float *dscale,
			   float *dbias, const float *dout, const float *inp,
			   const float *scale, const float *mean,
			   const float *rstd, int N, int C, int accum);
void cu_activation_forward(apf_backend *be, int act, float *out,
			   const float *inp, size_t n);
void cu_activation_backward(apf_backend *be, int act, float *dinp,
			    const float *dout, const float *inp,
			    const float *out, size_t n, int accum);
void cu_dropout_forward(apf_backend *be, float *out, const float *inp,
			size_t n, float p, const uint32_t key[2],
			uint64_t step);
void cu_dropout_backward(apf_backend *be, float *dinp, const float *dout,
			 size_t n, float p, const uint32_t key[2],
			 uint64_t step, int accum);
void cu_add_forward(apf_backend *be, float *out, const float *a,
		    const float *b, size_t n);
void cu_accumulate(apf_backend *be, float *dst, const float *src, size_t n,
		   int accum);
void cu_softmax_xent_forward(apf_backend *be, float *losses, float *probs,
			     const float *logits, const int32_t *labels, int B,
			     int V, float smoothing);
void cu_softmax_xent_backward(apf_backend *be, float *dlogits,
			      const float *probs, const int32_t *labels, int B,
			      int V, float smoothing, float dloss);
long cu_count_correct(apf_backend *be, const float *logits,
		      const int32_t *labels, int B, int V);
void cu_sigmoid_xent_forward(apf_backend *be, float *losses, float *probs,
			     const float *logits, const int32_t *labels, int B,
			     float smoothing);
void cu_sigmoid_xent_backward(apf_backend *be, float *dlogits,
			      const float *probs, const int32_t *labels, int B,
			      float smoothing, float dloss);
void cu_embedding_forward(apf_backend *be, float *out, const int32_t *idx,
			  int ldi, const int32_t *offset, const float *table,
			  int B, int F, int D);
void cu_embedding_backward(apf_backend *be, float *dtable, const float *dout,
			   const int32_t *idx, int ldi, const int32_t *offset,
			   int B, int F, int V, int D);
void cu_interaction_forward(apf_backend *be, float *out, const float *dense,
			    const float *emb, int B, int E, int D);
void cu_interaction_backward(apf_backend *be, float *ddense, float *demb,
			     const float *dout, const float *dense,
			     const float *emb, int B, int E, int D,
			     int accum_dense, int accum_emb);
void cu_l1_forward(apf_backend *be, float *losses, const float *pred,
		   const float *target, int B, int n);
void cu_l1_backward(apf_backend *be, float *dpred, const float *pred,
		    const float *target, int B, int n, float dloss);
void cu_concat_forward(apf_backend *be, float *out, const float *a,
		       const float *b, int N, int Ca, int Cb);
void cu_concat_backward(apf_backend *be, float *da, float *db,
			const float *dout, int N, int Ca, int Cb, int accum_a,
			int accum_b);
void cu_attention_forward(apf_backend *be, float *out, float *att,
			  const float *qkv, int B, int T, int C, int NH,
			  float scale);
void cu_attention_backward(apf_backend *be, float *dqkv, const float *dout,
			   const float *qkv, const float *att, int B, int T,
			   int C, int NH, float scale, int accum);
void cu_glu_forward(apf_backend *be, int act, float *out, const float *inp,
		    int N, int H);
void cu_glu_backward(apf_backend *be, int act, float *dinp, const float *dout,
		     const float *inp, int N, int H, int accum);
size_t cu_conv2d_work(apf_backend *be, int B, int H, int W, int C, int OC,
		      int K, int S, int P);
void cu_conv2d_forward(apf_backend *be, float *out, const float *inp,
		       const float *weight, const float *bias, int B, int H,
		       int W, int C, int OC, int K, int S, int P, float *work);
void cu_conv2d_backward(apf_backend *be, float *dinp, float *dweight,
			float *dbias, const float *dout, const float *inp,
			const float *weight, int B, int H, int W, int C, int OC,
			int K, int S, int P, float *work, int accum);
void cu_maxpool2d_forward(apf_backend *be, float *out, int32_t *argmax,
			  const float *inp, int B, int H, int W, int C, int K,
			  int S, int P);
void cu_maxpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			   const int32_t *argmax, int B, int H, int W, int C,
			   int K, int S, int P, int accum);
void cu_avgpool2d_forward(apf_backend *be, float *out, const float *inp, int B,
			  int H, int W, int C, int K, int S, int P);
void cu_avgpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			   int B, int H, int W, int C, int K, int S, int P,
			   int accum);
void cu_global_avgpool_forward(apf_backend *be, float *out, const float *inp,
			       int B, int HW, int C);
void cu_global_avgpool_backward(apf_backend *be, float *dinp, const float *dout,
				int B, int HW, int C, int accum);
void cu_batchnorm_forward(apf_backend *be, float *out, float *save_mean,
			  float *save_rstd, const float *inp,
			  const float *scale, const float *bias,
			  float *run_mean, float *run_var, int N, int C,
			  float momentum, float eps, int train);
void cu_batchnorm_backward(apf_backend *be, float *dinp, float *dscale,
			   float *dbias, const float *dout, const float *inp,
			   const float *scale, const float *save_mean,
			   const float *save_rstd, int N, int C, int accum);
void cu_instnorm_forward(apf_backend *be, float *out, float *mean, float *rstd,
			 const float *inp, const float *scale,
			 const float *bias, int B, int HW, int C, float eps);
void cu_instnorm_backward(apf_backend *be, float *dinp, float *dscale,
			  float *dbias, const float *dout, const float *inp,
			  const float *scale, const float *mean,
			  const float *rstd, int B, int HW, int C, int accum);
void cu_upconv2x2_forward(apf_backend *be, float *out, const float *inp,
			  const float *weight, const float *bias, int B, int H,
			  int W, int C, int OC);
void cu_upconv2x2_backward(apf_backend *be, float *dinp, float *dweight,
			   float *dbias, const float *dout, const float *inp,
			   const float *weight, int B, int H, int W, int C,
			   int OC, int accum);
void cu_fill(apf_backend *be, float *x, float v, size_t n);
void cu_copy(apf_backend *be, float *dst, const float *src, size_t n);
void cu_scale(apf_backend *be, float *x, float a, size_t n);
void cu_axpy(apf_backend *be, float *y, float a, const float *x, size_t n);
void cu_axpby(apf_backend *be, float *y, float a, const float *x, float b,
	      size_t n);
void cu_add_scalar(apf_backend *be, float *x, float a, size_t n);
void cu_mul(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n);
void cu_div(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n);
void cu_sqrt(apf_backend *be, float *y, const float *x, size_t n);
void cu_max(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n);
void cu_clamp(apf_backend *be, float *x, float lo, float hi, size_t n);
void cu_moments(apf_backend *be, float *m, float *v, const float *g, float b1,
		float b2, size_t n);
void cu_adam_direction(apf_backend *be, float *d, const float *m,
		       const float *v, float c1, float c2, float eps, size_t n);
double cu_dot(apf_backend *be, const float *x, const float *y, size_t n);
double cu_sum(apf_backend *be, const float *x, size_t n);
double cu_norm2(apf_backend *be, const float *x, size_t n);
double cu_max_abs(apf_backend *be, const float *x, size_t n);
void cu_sub(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n);
void cu_min(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n);
void cu_sign(apf_backend *be, float *y, const float *x, size_t n);
void cu_abs(apf_backend *be, float *y, const float *x, size_t n);
void cu_exp(apf_backend *be, float *y, const float *x, size_t n);
void cu_log(apf_backend *be, float *y, const float *x, size_t n);
void cu_reciprocal(apf_backend *be, float *y, const float *x, size_t n);
void cu_rsqrt(apf_backend *be, float *y, const float *x, float eps, size_t n);
void cu_pow(apf_backend *be, float *y, const float *x, float p, size_t n);
void cu_agree(apf_backend *be, float *z, const float *x, const float *y,
	      size_t n);
void cu_select(apf_backend *be, float *z, const float *c, const float *x,
	       const float *y, size_t n);
void cu_row_sumsq(apf_backend *be, float *out, const float *a, int rows,
		  int cols, int lda);
void cu_col_sumsq(apf_backend *be, float *out, const float *a, int rows,
		  int cols, int lda);
void cu_copy_mat(apf_backend *be, float *dst, int ldd, const float *src,
		 int lds, int rows, int cols);

#endif
