/*
 * cuda.cu: the CUDA backend's table, memory, errors and GEMMs; the plugin's
 * one exported symbol, apf_cuda_plugin_new (cuda_plugin.h).
 *
 * Memory is device memory from cudaMalloc, zeroed; upload and download
 * wait for their copy, so the host buffer is free (or filled) when they
 * return. Everything else is queued on the backend's one stream; sync waits
 * for it and reports the first failure since the last sync. GEMMs are
 * cuBLAS's, in pedantic math (no TF32, no reduced-precision reductions),
 * with a fixed workspace configuration: the same bits run to run.
 */
#include "nn/cuda/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cuda_fail(apf_backend *be, const char *what, const char *why)
{
	struct cuda_impl *c = impl_of(be);
	if (c->failed)
		return;
	c->failed = 1;
	snprintf(c->fail, sizeof c->fail, "%s: %s", what, why);
}

void cuda_check(apf_backend *be, const char *what, cudaError_t err)
{
	if (err != cudaSuccess)
		cuda_fail(be, what, cudaGetErrorString(err));
}

void *cuda_scratch(apf_backend *be, size_t n)
{
	struct cuda_impl *c = impl_of(be);
	if (n <= c->scratch_bytes)
		return c->scratch;
	/* the old one may still be in use by queued kernels */
	cuda_check(be, "scratch", cudaStreamSynchronize(c->stream));
	if (c->scratch)
		cudaFree(c->scratch);
	c->scratch = NULL;
	c->scratch_bytes = 0;
	cudaError_t e = cudaMalloc(&c->scratch, n);
	if (e != cudaSuccess) {
		c->scratch = NULL;
		cuda_fail(be, "scratch", cudaGetErrorString(e));
		return NULL;
	}
	c->scratch_bytes = n;
	return c->scratch;
}

static void blas_check(apf_backend *be, const char *what, cublasStatus_t st)
{
	if (st != CUBLAS_STATUS_SUCCESS)
		cuda_fail(be, what, cublasGetStatusString(st));
}

/* ---- memory --------------------------------------------------------------- */

static int cu_alloc(apf_backend *be, size_t nbytes, void **out)
{
	struct cuda_impl *c = impl_of(be);
	*out = NULL;
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, nbytes ? nbytes : 1);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(p, 0, nbytes, c->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(c->stream);
	if (e != cudaSuccess) {
		if (p)
			cudaFree(p);
		snprintf(c->head.err, sizeof c->head.err,
			 "allocating %zu bytes of device memory: %s", nbytes,
			 cudaGetErrorString(e));
		return -1;
	}
	*out = p;
	return 0;
}

static void cu_free(apf_backend *be, void *p)
{
	if (p)
		cuda_check(be, "free", cudaFree(p));
}

static void cu_upload(apf_backend *be, void *dst, const void *src, size_t n)
{
	struct cuda_impl *c = impl_of(be);
	if (!n)
		return;
	cuda_check(be, "upload",
		   cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice,
				   c->stream));
	cuda_check(be, "upload", cudaStreamSynchronize(c->stream));
}

static void cu_download(apf_backend *be, void *dst, const void *src, size_t n)
{
	struct cuda_impl *c = impl_of(be);
	if (!n)
		return;
	cuda_check(be, "download",
		   cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost,
				   c->stream));
	cuda_check(be, "download", cudaStreamSynchronize(c->stream));
}

static int cu_sync(apf_backend *be)
{
	struct cuda_impl *c = impl_of(be);
	cuda_check(be, "sync", cudaStreamSynchronize(c->stream));
	/* a kernel's fault surfaces as the launch's error or here */
	cuda_check(be, "sync", cudaGetLastError());
	if (!c->failed)
		return 0;
	snprintf(c->head.err, sizeof c->head.err, "%s", c->fail);
	c->failed = 0;
	c->fail[0] = 0;
	return -1;
}

/* ---- GEMM, row-major on column-major cuBLAS --------------------------------
 *
 * A row-major (M,N) matrix with leading dimension ld is the column-major
 * (N,M) matrix with the same ld, its transpose. So C = op(A) op(B) becomes
 * C^T = op(B)^T op(A)^T: cuBLAS gets B first, A second, and N, M swapped,
 * each with its own transpose flag.
 */
static void cu_gemm(apf_backend *be, int trans_a, int trans_b, int M, int N,
		    int K, float alpha, const float *A, int lda,
		    const float *B, int ldb, float beta, float *C, int ldc)
{
	if (M == 0 || N == 0)
		return;
	struct cuda_impl *c = impl_of(be);
	blas_check(be, "gemm",
		   cublasSgemm(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
			       trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
			       &alpha, B, ldb, A, lda, &beta, C, ldc));
}

/* ---- linear --------------------------------------------------------------- */

// out is (B,OC), inp is (B,C), weight is (OC,C), bias is (OC)
static void cu_linear_forward(apf_backend *be, float *out, const float *inp,
			      const float *weight, const float *bias, int B,
			      int C, int OC)
{
	float beta = 0.0f;
	if (bias) {
		cu_rows_copy(be, out, bias, B, OC);
		beta = 1.0f;
	}
	cu_gemm(be, 0, 1, B, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

// dout is (B,OC); dinp (B,C), dweight (OC,C), dbias (OC)
static void cu_linear_backward(apf_backend *be, float *dinp, float *dweight,
			       float *dbias, const float *dout,
			       const float *inp, const float *weight, int B,
			       int C, int OC, int accum)
{
	if (dinp)
		cu_gemm(be, 0, 0, B, C, OC, 1.0f, dout, OC, weight, C,
			accum ? 1.0f : 0.0f, dinp, C);
	cu_gemm(be, 1, 0, OC, C, B, 1.0f, dout, OC, inp, C, 0.0f, dweight, C);
	if (dbias)
		cu_column_sums(be, dbias, dout, (size_t)B, OC);
}

/* ---- the table ------------------------------------------------------------ */

static void cu_destroy(apf_backend *be);

static apf_backend cuda_template(void)
{
	apf_backend t;
	memset(&t, 0, sizeof t);
	t.name = "cuda";
	t.threads = 1;
	t.device_memory = 1;
	t.alloc = cu_alloc;
	t.free = cu_free;
	t.upload = cu_upload;
	t.download = cu_download;
	t.sync = cu_sync;
	t.destroy = cu_destroy;
	t.gemm = cu_gemm;
	t.linear_forward = cu_linear_forward;
	t.linear_backward = cu_linear_backward;
	t.layernorm_forward = cu_layernorm_forward;
	t.layernorm_backward = cu_layernorm_backward;
	t.activation_forward = cu_activation_forward;
	t.activation_backward = cu_activation_backward;
	t.dropout_forward = cu_dropout_forward;
	t.dropout_backward = cu_dropout_backward;
	t.add_forward = cu_add_forward;
	t.accumulate = cu_accumulate;
	t.softmax_xent_forward = cu_softmax_xent_forward;
	t.softmax_xent_backward = cu_softmax_xent_backward;
	t.count_correct = cu_count_correct;
	t.sigmoid_xent_forward = cu_sigmoid_xent_forward;
	t.sigmoid_xent_backward = cu_sigmoid_xent_backward;
	t.embedding_forward = cu_embedding_forward;
	t.embedding_backward = cu_embedding_backward;
	t.interaction_forward = cu_interaction_forward;
	t.interaction_backward = cu_interaction_backward;
	t.l1_forward = cu_l1_forward;
	t.l1_backward = cu_l1_backward;
	t.concat_forward = cu_concat_forward;
	t.concat_backward = cu_concat_backward;
	t.attention_forward = cu_attention_forward;
	t.attention_backward = cu_attention_backward;
	t.glu_forward = cu_glu_forward;
	t.glu_backward = cu_glu_backward;
	t.conv2d_forward = cu_conv2d_forward;
	t.conv2d_backward = cu_conv2d_backward;
	t.conv2d_work = cu_conv2d_work;
	t.maxpool2d_forward = cu_maxpool2d_forward;
	t.maxpool2d_backward = cu_maxpool2d_backward;
	t.avgpool2d_forward = cu_avgpool2d_forward;
	t.avgpool2d_backward = cu_avgpool2d_backward;
	t.global_avgpool_forward = cu_global_avgpool_forward;
	t.global_avgpool_backward = cu_global_avgpool_backward;
	t.batchnorm_forward = cu_batchnorm_forward;
	t.batchnorm_backward = cu_batchnorm_backward;
	t.instnorm_forward = cu_instnorm_forward;
	t.instnorm_backward = cu_instnorm_backward;
	t.upconv2x2_forward = cu_upconv2x2_forward;
	t.upconv2x2_backward = cu_upconv2x2_backward;
	t.fill = cu_fill;
	t.copy = cu_copy;
	t.scale = cu_scale;
	t.axpy = cu_axpy;
	t.axpby = cu_axpby;
	t.add_scalar = cu_add_scalar;
	t.mul = cu_mul;
	t.div = cu_div;
	t.sqrt = cu_sqrt;
	t.max = cu_max;
	t.clamp = cu_clamp;
	t.moments = cu_moments;
	t.adam_direction = cu_adam_direction;
	t.dot = cu_dot;
	t.sum = cu_sum;
	t.norm2 = cu_norm2;
	t.max_abs = cu_max_abs;
	t.sub = cu_sub;
	t.min = cu_min;
	t.sign = cu_sign;
	t.abs = cu_abs;
	t.exp = cu_exp;
	t.log = cu_log;
	t.reciprocal = cu_reciprocal;
	t.rsqrt = cu_rsqrt;
	t.pow = cu_pow;
	t.agree = cu_agree;
	t.select = cu_select;
	t.row_sumsq = cu_row_sumsq;
	t.col_sumsq = cu_col_sumsq;
	t.copy_mat = cu_copy_mat;
	return t;
}

static void release(struct cuda_impl *c)
{
	if (c->partials)
		cudaFree(c->partials);
	if (c->scratch)
		cudaFree(c->scratch);
	if (c->result)
		cudaFreeHost(c->result);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

static void cu_destroy(apf_backend *be)
{
	struct cuda_impl *c = impl_of(be);
	cudaStreamSynchronize(c->stream);
	release(c);
	free(be);
}

/* "13.0" from CUDA's 1000 major + 10 minor encoding. */
static void cuda_version(char *s, size_t n, int v)
{
	snprintf(s, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

static int setup_failed(struct cuda_impl *c, char *err, size_t errlen,
			const char *what, const char *why)
{
	snprintf(err, errlen, "%s: %s", what, why);
	release(c);
	return APF_CUDA_FAILED;
}

/*
 * The CUDA backend on device 0 (cuda_plugin.h). It implements the memory
 * functions, sync, gemm, linear, conv2d, batch norm, the poolings (max,
 * average, global average), layer norm, the activations (relu, gelu
 * tanh-approximated, silu, tanh), dropout, add, accumulate, softmax
 * cross-entropy, count_correct, sigmoid cross-entropy, embedding, the dot
 * interaction, causal self-attention, the gated linear units, the 2x2
 * transposed convolution, concat, instance norm, L1 loss, every vector
 * operation (ABI 2's included) and the matrix views' sums of squares and
 * copy. These entries stay NULL: batchnorm_relu_forward and
 * batchnorm_relu_backward (optional: nets then run batch norm, add and
 * ReLU as three layers), instnorm_relu_forward and instnorm_relu_backward
 * (likewise: instance norm and ReLU as two).
 */
extern "C" __attribute__((visibility("default"))) int
apf_cuda_plugin_new(apf_backend **out, char *err, size_t errlen)
{
	*out = NULL;
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		snprintf(err, errlen, "%s",
			 cudaGetErrorString(e != cudaSuccess ? e
							     : cudaErrorNoDevice));
		cudaGetLastError(); /* not sticky: clear it */
		return APF_CUDA_NO_DEVICE;
	}
	struct cuda_impl *c = (struct cuda_impl *)calloc(1, sizeof *c);
	apf_backend *be = (apf_backend *)malloc(sizeof *be);
	if (!c || !be) {
		free(c);
		free(be);
		snprintf(err, errlen, "cuda backend: out of memory");
		return APF_CUDA_FAILED;
	}
	c->head.abi = APF_CUDA_PLUGIN_ABI;
	c->head.table_bytes = sizeof(apf_backend);
	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) !=
		    cudaSuccess ||
	    (e = cudaMalloc(&c->partials, (RED_BLOCKS + 1) * sizeof(double))) !=
		    cudaSuccess ||
	    (e = cudaMallocHost(&c->result, sizeof(double))) != cudaSuccess) {
		free(be);
		return setup_failed(c, err, errlen, "cuda backend",
				    cudaGetErrorString(e));
	}
	/* cuBLAS reads its workspace configuration when the handle is made;
	 * a fixed one keeps its GEMMs' reduction order fixed. */
	setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
	cublasStatus_t st = cublasCreate(&c->blas);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasSetStream(c->blas, c->stream);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH);
	if (st != CUBLAS_STATUS_SUCCESS) {
		free(be);
		return setup_failed(c, err, errlen, "cuBLAS",
				    cublasGetStatusString(st));
	}
	cudaDeviceProp prop;
	memset(&prop, 0, sizeof prop);
	int drv = 0, rt = 0, bv = 0;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		snprintf(prop.name, sizeof prop.name, "unknown device");
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	cublasGetVersion(c->blas, &bv);
	char ds[16], rs[16];
	cuda_version(ds, sizeof ds, drv);
	cuda_version(rs, sizeof rs, rt);
	snprintf(c->head.what, sizeof c->head.what,
		 "%.120s, compute %d.%d, driver %s, runtime %s, cuBLAS %d.%d.%d",
		 prop.name, prop.major, prop.minor, ds, rs, bv / 10000,
		 (bv / 100) % 100, bv % 100);
	*be = cuda_template();
	be->impl = c;
	*out = be;
	return 0;
}
