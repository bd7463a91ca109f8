/*
 * kernels.cu: the CUDA backend's layers and vector operations, each the
 * CPU reference's formula (cpu/cpu.c) computed on the device.
 *
 * Sums keep the reference's precision: statistics in double, parameter
 * gradients of a row-wise layer (bias, layer-norm scale and bias) in float
 * in row order, one thread per column, so those match the CPU bit for bit.
 * Row statistics (softmax, layer norm) are a block's: each thread sums a
 * strided share in order, then a fixed tree adds the shares. Reductions to
 * the host (dot, sum, norm2, max_abs, count_correct) run RED_BLOCKS blocks
 * of partials and one block that adds them in a fixed tree. Nothing uses
 * atomics, so every result repeats bit for bit; those sums differ from the
 * CPU's sequential ones only by rounding. ABI 2's operations (sub through
 * copy_mat) go further: they give the CPU's bits, exp, log and pow by
 * mathf.h's sequences and the sums of squares one thread per row or
 * column in the CPU's order.
 */
#include "nn/cuda/cuda_impl.h"
#include "nn/mathf.h"

#include <math.h>

/* ---- Philox 4x32-10, as rng/philox.c ---------------------------------------
 * The same arithmetic, for the device: dropout's word for element i is word
 * i % 4 of block i / 4 at counter (i / 4 as two words, step as two words),
 * which is apf_rng_word(key, step, i). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__host__ __device__ static inline void philox4x32_10(const uint32_t ctr[4],
						     uint32_t k0, uint32_t k1,
						     uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	for (int round = 0; round < 10; round++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n1 = (uint32_t)p1;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		uint32_t n3 = (uint32_t)p0;
		c0 = n0, c1 = n1, c2 = n2, c3 = n3;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* ---- helpers ---------------------------------------------------------------- */

__device__ static inline size_t global_index(void)
{
	return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

/* Sums v over the block (blockDim.x a power of two, s of blockDim.x) in a
 * fixed tree; every thread gets the total. */
__device__ static double block_sum(double v, double *s)
{
	unsigned t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
		if (t < h)
			s[t] += s[t + h];
		__syncthreads();
	}
	double r = s[0];
	__syncthreads();
	return r;
}

__device__ static float block_max(float v, float *s)
{
	unsigned t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
		if (t < h)
			s[t] = s[t + h] > s[t] ? s[t + h] : s[t];
		__syncthreads();
	}
	float r = s[0];
	__syncthreads();
	return r;
}

static void launched(apf_backend *be, const char *what)
{
	cuda_check(be, what, cudaGetLastError());
}

/* ---- linear's helpers ---------------------------------------------------------- */

__global__ static void k_column_sums(float *dbias, const float *dout, size_t R,
				     int OC)
{
	size_t o = global_index();
	if (o >= (size_t)OC)
		return;
	float s = 0.0f;
	for (size_t r = 0; r < R; r++)
		s += dout[r * OC + o];
	dbias[o] = s;
}

// dbias (OC) = column sums of dout (R,OC), rows in order
void cu_column_sums(apf_backend *be, float *dbias, const float *dout, size_t R,
		    int OC)
{
	if (OC <= 0)
		return;
	k_column_sums<<<ew_blocks((size_t)OC), EW_THREADS, 0,
			impl_of(be)->stream>>>(dbias, dout, R, OC);
	launched(be, "linear_backward");
}

__global__ static void k_rows_copy(float *out, const float *row, size_t n,
				   int OC)
{
	size_t i = global_index();
	if (i < n)
		out[i] = row[i % OC];
}

// out (B,OC) = row (OC) in every row
void cu_rows_copy(apf_backend *be, float *out, const float *row, int B, int OC)
{
	size_t n = (size_t)B * OC;
	if (!n)
		return;
	k_rows_copy<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, row, n, OC);
	launched(be, "linear_forward");
}

/* ---- layer norm --------------------------------------------------------------- */

// out, inp (N,C); mean, rstd (N); scale, bias (C); one block per row
__global__ static void k_layernorm_forward(float *out, float *mean,
					   float *rstd, const float *inp,
					   const float *scale,
					   const float *bias, int C, float eps)
{
	__shared__ double s[ROW_THREADS];
	size_t n = blockIdx.x;
	const float *x = inp + n * C;
	float *y = out + n * C;
	double a = 0.0;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		a += x[c];
	double m = block_sum(a, s) / C;
	double q = 0.0;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		q += ((double)x[c] - m) * ((double)x[c] - m);
	double v = block_sum(q, s);
	float r = (float)(1.0 / sqrt(v / C + eps));
	float mf = (float)m;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		y[c] = (x[c] - mf) * r * scale[c] + bias[c];
	if (threadIdx.x == 0) {
		mean[n] = mf;
		rstd[n] = r;
	}
}

void cu_layernorm_forward(apf_backend *be, float *out, float *mean, float *rstd,
			  const float *inp, const float *scale,
			  const float *bias, int N, int C, float eps)
{
	if (N <= 0 || C <= 0)
		return;
	k_layernorm_forward<<<N, ROW_THREADS, 0, impl_of(be)->stream>>>(
		out, mean, rstd, inp, scale, bias, C, eps);
	launched(be, "layernorm_forward");
}

// dscale, dbias (C): one thread per column, rows in order, as the CPU
__global__ static void k_layernorm_param_grads(float *dscale, float *dbias,
					       const float *dout,
					       const float *inp,
					       const float *mean,
					       const float *rstd, int N, int C)
{
	size_t c = global_index();
	if (c >= (size_t)C)
		return;
	float gs = 0.0f, gb = 0.0f;
	for (int n = 0; n < N; n++) {
		size_t i = (size_t)n * C + c;
		float xhat = (inp[i] - mean[n]) * rstd[n];
		gb += dout[i];
		gs += dout[i] * xhat;
	}
	dscale[c] = gs;
	dbias[c] = gb;
}

// dinp (N,C) written or added; one block per row
__global__ static void k_layernorm_dinp(float *dinp, const float *dout,
					const float *inp, const float *scale,
					const float *mean, const float *rstd,
					int C, int accum)
{
	__shared__ double s[ROW_THREADS];
	size_t n = blockIdx.x;
	const float *x = inp + n * C, *d = dout + n * C;
	float m = mean[n], r = rstd[n];
	double a = 0.0, b = 0.0;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float xhat = (x[c] - m) * r;
		float dg = d[c] * scale[c];
		a += dg;
		b += (double)dg * xhat;
	}
	double sdg = block_sum(a, s), sdgx = block_sum(b, s);
	float fa = (float)(sdg / C), fb = (float)(sdgx / C);
	float *di = dinp + n * C;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float xhat = (x[c] - m) * r;
		float g = r * (d[c] * scale[c] - fa - xhat * fb);
		di[c] = accum ? di[c] + g : g;
	}
}

void cu_layernorm_backward(apf_backend *be, float *dinp, float *dscale,
			   float *dbias, const float *dout, const float *inp,
			   const float *scale, const float *mean,
			   const float *rstd, int N, int C, int accum)
{
	if (C <= 0)
		return;
	cudaStream_t st = impl_of(be)->stream;
	k_layernorm_param_grads<<<ew_blocks((size_t)C), EW_THREADS, 0, st>>>(
		dscale, dbias, dout, inp, mean, rstd, N, C);
	if (dinp && N > 0)
		k_layernorm_dinp<<<N, ROW_THREADS, 0, st>>>(
			dinp, dout, inp, scale, mean, rstd, C, accum);
	launched(be, "layernorm_backward");
}

/* ---- activations: the CPU's scalar formulas -------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__device__ static inline float gelu_tanh(float x)
{
	return tanhf(GELU_K * (x + GELU_C * x * x * x));
}

__device__ static inline float act_f(int act, float x)
{
	switch (act) {
	case APF_ACT_RELU:
		return x > 0.0f ? x : 0.0f;
	case APF_ACT_GELU:
		return 0.5f * x * (1.0f + gelu_tanh(x));
	case APF_ACT_SILU:
		return x / (1.0f + expf(-x));
	case APF_ACT_TANH:
		return tanhf(x);
	}
	return x;
}

/* d act / d x at x (tanh: from its output y) times dy */
__device__ static inline float act_b(int act, float dy, float x, float y)
{
	switch (act) {
	case APF_ACT_RELU:
		return x > 0.0f ? dy : 0.0f;
	case APF_ACT_GELU: {
		float t = gelu_tanh(x);
		float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
		return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
	}
	case APF_ACT_SILU: {
		float sg = 1.0f / (1.0f + expf(-x));
		return dy * (sg * (1.0f + x * (1.0f - sg)));
	}
	case APF_ACT_TANH:
		return dy * (1.0f - y * y);
	}
	return dy;
}

__global__ static void k_act_f(int act, float *out, const float *inp, size_t n)
{
	size_t i = global_index();
	if (i < n)
		out[i] = act_f(act, inp[i]);
}

__global__ static void k_act_b(int act, float *dinp, const float *dout,
			       const float *inp, const float *out, size_t n,
			       int accum)
{
	size_t i = global_index();
	if (i >= n)
		return;
	float g = act_b(act, dout[i], inp[i], act == APF_ACT_TANH ? out[i] : 0.0f);
	dinp[i] = accum ? dinp[i] + g : g;
}

void cu_activation_forward(apf_backend *be, int act, float *out,
			   const float *inp, size_t n)
{
	if (!n)
		return;
	k_act_f<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(act, out,
								       inp, n);
	launched(be, "activation_forward");
}

void cu_activation_backward(apf_backend *be, int act, float *dinp,
			    const float *dout, const float *inp,
			    const float *out, size_t n, int accum)
{
	if (!n)
		return;
	k_act_b<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		act, dinp, dout, inp, out, n, accum);
	launched(be, "activation_backward");
}

/* ---- dropout, residual ----------------------------------------------------- */

/* One thread per Philox block of four elements. */
__global__ static void k_dropout(float *out, const float *in, size_t n, float p,
				 float keep_scale, uint32_t k0, uint32_t k1,
				 uint64_t step, int accum)
{
	size_t blk = global_index();
	size_t i0 = blk * 4;
	if (i0 >= n)
		return;
	uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)((uint64_t)blk >> 32),
			   (uint32_t)step, (uint32_t)(step >> 32)};
	uint32_t w[4];
	philox4x32_10(ctr, k0, k1, w);
	for (size_t j = 0; j < 4 && i0 + j < n; j++) {
		size_t i = i0 + j;
		float u = (float)(w[j] >> 8) * (1.0f / 16777216.0f);
		float v = u >= p ? in[i] * keep_scale : 0.0f;
		out[i] = accum ? out[i] + v : v;
	}
}

static void dropout_run(apf_backend *be, const char *what, float *out,
			const float *in, size_t n, float p,
			const uint32_t key[2], uint64_t step, int accum)
{
	if (!n)
		return;
	float keep_scale = 1.0f / (1.0f - p);
	size_t blocks = (n + 3) / 4;
	k_dropout<<<ew_blocks(blocks), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, in, n, p, keep_scale, key[0], key[1], step, accum);
	launched(be, what);
}

void cu_dropout_forward(apf_backend *be, float *out, const float *inp,
			size_t n, float p, const uint32_t key[2],
			uint64_t step)
{
	dropout_run(be, "dropout_forward", out, inp, n, p, key, step, 0);
}

void cu_dropout_backward(apf_backend *be, float *dinp, const float *dout,
			 size_t n, float p, const uint32_t key[2],
			 uint64_t step, int accum)
{
	dropout_run(be, "dropout_backward", dinp, dout, n, p, key, step, accum);
}

/* ---- elementwise operations ---------------------------------------------------
 * One kernel per operation, indexed by one thread per element. */

#define EW_KERNEL(name, params, body)                                         \
	__global__ static void name params                                     \
	{                                                                      \
		size_t i = global_index();                                     \
		if (i < n) {                                                   \
			body;                                                  \
		}                                                              \
	}

#define EW_LAUNCH(be, what, kernel, n, ...)                                    \
	do {                                                                   \
		if (n) {                                                       \
			kernel<<<ew_blocks(n), EW_THREADS, 0,                  \
				 impl_of(be)->stream>>>(__VA_ARGS__);          \
			launched(be, what);                                    \
		}                                                              \
	} while (0)

EW_KERNEL(k_add, (float *out, const float *a, const float *b, size_t n),
	  out[i] = a[i] + b[i])
EW_KERNEL(k_acc, (float *dst, const float *src, size_t n), dst[i] += src[i])
EW_KERNEL(k_fill, (float *x, float v, size_t n), x[i] = v)
EW_KERNEL(k_scale, (float *x, float a, size_t n), x[i] *= a)
EW_KERNEL(k_axpy, (float *y, float a, const float *x, size_t n),
	  y[i] += a * x[i])
EW_KERNEL(k_axpby, (float *y, float a, const float *x, float b, size_t n),
	  y[i] = a * x[i] + b * y[i])
EW_KERNEL(k_add_scalar, (float *x, float a, size_t n), x[i] += a)
EW_KERNEL(k_mul, (float *z, const float *x, const float *y, size_t n),
	  z[i] = x[i] * y[i])
EW_KERNEL(k_div, (float *z, const float *x, const float *y, size_t n),
	  z[i] = x[i] / y[i])
EW_KERNEL(k_sqrt, (float *y, const float *x, size_t n), y[i] = sqrtf(x[i]))
EW_KERNEL(k_max, (float *z, const float *x, const float *y, size_t n),
	  z[i] = x[i] > y[i] ? x[i] : y[i])
EW_KERNEL(k_clamp, (float *x, float lo, float hi, size_t n),
	  x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i])
EW_KERNEL(k_moments,
	  (float *m, float *v, const float *g, float b1, float b2, float a1,
	   float a2, size_t n),
	  m[i] = b1 * m[i] + a1 * g[i];
	  v[i] = b2 * v[i] + a2 * g[i] * g[i])
EW_KERNEL(k_adam_direction,
	  (float *d, const float *m, const float *v, float c1, float c2,
	   float eps, size_t n),
	  d[i] = m[i] * c1 / (sqrtf(v[i] * c2) + eps))

static void device_copy(apf_backend *be, const char *what, float *dst,
			const float *src, size_t n)
{
	if (!n || dst == src)
		return;
	cuda_check(be, what,
		   cudaMemcpyAsync(dst, src, n * sizeof *dst,
				   cudaMemcpyDeviceToDevice,
				   impl_of(be)->stream));
}

void cu_add_forward(apf_backend *be, float *out, const float *a,
		    const float *b, size_t n)
{
	EW_LAUNCH(be, "add_forward", k_add, n, out, a, b, n);
}

void cu_accumulate(apf_backend *be, float *dst, const float *src, size_t n,
		   int accum)
{
	if (!accum) {
		device_copy(be, "accumulate", dst, src, n);
		return;
	}
	EW_LAUNCH(be, "accumulate", k_acc, n, dst, src, n);
}

void cu_fill(apf_backend *be, float *x, float v, size_t n)
{
	EW_LAUNCH(be, "fill", k_fill, n, x, v, n);
}

void cu_copy(apf_backend *be, float *dst, const float *src, size_t n)
{
	device_copy(be, "copy", dst, src, n);
}

void cu_scale(apf_backend *be, float *x, float a, size_t n)
{
	EW_LAUNCH(be, "scale", k_scale, n, x, a, n);
}

void cu_axpy(apf_backend *be, float *y, float a, const float *x, size_t n)
{
	EW_LAUNCH(be, "axpy", k_axpy, n, y, a, x, n);
}

void cu_axpby(apf_backend *be, float *y, float a, const float *x, float b,
	      size_t n)
{
	EW_LAUNCH(be, "axpby", k_axpby, n, y, a, x, b, n);
}

void cu_add_scalar(apf_backend *be, float *x, float a, size_t n)
{
	EW_LAUNCH(be, "add_scalar", k_add_scalar, n, x, a, n);
}

void cu_mul(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n)
{
	EW_LAUNCH(be, "mul", k_mul, n, z, x, y, n);
}

void cu_div(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n)
{
	EW_LAUNCH(be, "div", k_div, n, z, x, y, n);
}

void cu_sqrt(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "sqrt", k_sqrt, n, y, x, n);
}

void cu_max(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n)
{
	EW_LAUNCH(be, "max", k_max, n, z, x, y, n);
}

void cu_clamp(apf_backend *be, float *x, float lo, float hi, size_t n)
{
	EW_LAUNCH(be, "clamp", k_clamp, n, x, lo, hi, n);
}

void cu_moments(apf_backend *be, float *m, float *v, const float *g, float b1,
		float b2, size_t n)
{
	float a1 = 1.0f - b1, a2 = 1.0f - b2;
	EW_LAUNCH(be, "moments", k_moments, n, m, v, g, b1, b2, a1, a2, n);
}

void cu_adam_direction(apf_backend *be, float *d, const float *m,
		       const float *v, float c1, float c2, float eps, size_t n)
{
	EW_LAUNCH(be, "adam_direction", k_adam_direction, n, d, m, v, c1, c2,
		  eps, n);
}

/* ---- ABI 2's elementwise operations ---------------------------------------------
 * Bit for bit the CPU's (apf/ops.h's contract), NaN payloads aside: each is
 * one IEEE operation written as its round-to-nearest intrinsic, so that no
 * contraction or approximate division can change it whatever the flags; or
 * comparisons and a choice, which move bits unchanged; or (exp, log, pow)
 * mathf.h's fixed double sequence, whose own operations are intrinsics on
 * the device. Every kernel reads an element before it writes it, so
 * outputs may alias inputs. */

EW_KERNEL(k_sub, (float *z, const float *x, const float *y, size_t n),
	  z[i] = __fsub_rn(x[i], y[i]))
/* the CPU's max mirrored: NaN in x gives y, NaN in y gives NaN, and of two
 * zeros, y */
EW_KERNEL(k_min, (float *z, const float *x, const float *y, size_t n),
	  float a = x[i];
	  float b = y[i];
	  z[i] = a < b ? a : b)
/* a zero and NaN fall through to themselves */
EW_KERNEL(k_sign, (float *y, const float *x, size_t n),
	  float v = x[i];
	  y[i] = v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v)
EW_KERNEL(k_abs, (float *y, const float *x, size_t n), y[i] = fabsf(x[i]))
EW_KERNEL(k_exp, (float *y, const float *x, size_t n), y[i] = apf_mf_exp(x[i]))
EW_KERNEL(k_log, (float *y, const float *x, size_t n), y[i] = apf_mf_log(x[i]))
EW_KERNEL(k_reciprocal, (float *y, const float *x, size_t n),
	  y[i] = __fdiv_rn(1.0f, x[i]))
/* x + eps rounded to float first, then its square root, then 1 / it */
EW_KERNEL(k_rsqrt, (float *y, const float *x, float eps, size_t n),
	  y[i] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(x[i], eps))))
EW_KERNEL(k_pow, (float *y, const float *x, float p, size_t n),
	  y[i] = apf_mf_pow(x[i], p))
/* the signs compared, as the CPU's, not the product: two tiny values of
 * one sign agree though their product underflows to 0 */
EW_KERNEL(k_agree, (float *z, const float *x, const float *y, size_t n),
	  float a = x[i];
	  float b = y[i];
	  z[i] = (a > 0.0f && b > 0.0f) || (a < 0.0f && b < 0.0f) ? 1.0f
								 : 0.0f)
EW_KERNEL(k_select,
	  (float *z, const float *c, const float *x, const float *y, size_t n),
	  float v = c[i] > 0.0f ? x[i] : y[i];
	  z[i] = v)

void cu_sub(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n)
{
	EW_LAUNCH(be, "sub", k_sub, n, z, x, y, n);
}

void cu_min(apf_backend *be, float *z, const float *x, const float *y,
	    size_t n)
{
	EW_LAUNCH(be, "min", k_min, n, z, x, y, n);
}

void cu_sign(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "sign", k_sign, n, y, x, n);
}

void cu_abs(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "abs", k_abs, n, y, x, n);
}

void cu_exp(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "exp", k_exp, n, y, x, n);
}

void cu_log(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "log", k_log, n, y, x, n);
}

void cu_reciprocal(apf_backend *be, float *y, const float *x, size_t n)
{
	EW_LAUNCH(be, "reciprocal", k_reciprocal, n, y, x, n);
}

void cu_rsqrt(apf_backend *be, float *y, const float *x, float eps, size_t n)
{
	EW_LAUNCH(be, "rsqrt", k_rsqrt, n, y, x, eps, n);
}

void cu_pow(apf_backend *be, float *y, const float *x, float p, size_t n)
{
	EW_LAUNCH(be, "pow", k_pow, n, y, x, p, n);
}

void cu_agree(apf_backend *be, float *z, const float *x, const float *y,
	      size_t n)
{
	EW_LAUNCH(be, "agree", k_agree, n, z, x, y, n);
}

void cu_select(apf_backend *be, float *z, const float *c, const float *x,
	       const float *y, size_t n)
{
	EW_LAUNCH(be, "select", k_select, n, z, c, x, y, n);
}

/* ---- ABI 2's matrix views ----------------------------------------------------------
 * Sums of squares: one thread per row (per column) adds the squares in
 * index order in double, each product and sum an intrinsic (never a fused
 * multiply-add), and rounds once: the CPU's sequence, so its bits. */

// out is (rows), a is (rows,cols) with leading dimension lda
__global__ static void k_row_sumsq(float *out, const float *a, int rows,
				   int cols, int lda)
{
	size_t r = global_index();
	if (r >= (size_t)rows)
		return;
	const float *p = a + r * lda;
	double s = 0.0;
	for (int c = 0; c < cols; c++) {
		double v = p[c];
		s = __dadd_rn(s, __dmul_rn(v, v));
	}
	out[r] = __double2float_rn(s);
}

// out is (cols), a is (rows,cols) with leading dimension lda
__global__ static void k_col_sumsq(float *out, const float *a, int rows,
				   int cols, int lda)
{
	size_t c = global_index();
	if (c >= (size_t)cols)
		return;
	double s = 0.0;
	for (int r = 0; r < rows; r++) {
		double v = a[(size_t)r * lda + c];
		s = __dadd_rn(s, __dmul_rn(v, v));
	}
	out[c] = __double2float_rn(s);
}

void cu_row_sumsq(apf_backend *be, float *out, const float *a, int rows,
		  int cols, int lda)
{
	size_t n = rows > 0 ? (size_t)rows : 0;
	EW_LAUNCH(be, "row_sumsq", k_row_sumsq, n, out, a, rows,
		  cols > 0 ? cols : 0, lda);
}

void cu_col_sumsq(apf_backend *be, float *out, const float *a, int rows,
		  int cols, int lda)
{
	size_t n = cols > 0 ? (size_t)cols : 0;
	EW_LAUNCH(be, "col_sumsq", k_col_sumsq, n, out, a, rows > 0 ? rows : 0,
		  cols, lda);
}

// dst is (rows,cols) with leading dimension ldd, src with lds
void cu_copy_mat(apf_backend *be, float *dst, int ldd, const float *src,
		 int lds, int rows, int cols)
{
	if (rows <= 0 || cols <= 0 || (dst == src && ldd == lds))
		return;
	cuda_check(be, "copy_mat",
		   cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof *dst, src,
				     (size_t)lds * sizeof *src,
				     (size_t)cols * sizeof *dst, (size_t)rows,
				     cudaMemcpyDeviceToDevice,
				     impl_of(be)->stream));
}

/* ---- softmax cross-entropy -------------------------------------------------- */

// losses (B), probs (B,V) from logits (B,V), labels (B); one block per row
__global__ static void k_softmax_xent_forward(float *losses, float *probs,
					      const float *logits,
					      const int32_t *labels, int V,
					      float smoothing)
{
	__shared__ double s[ROW_THREADS];
	__shared__ float f[ROW_THREADS];
	size_t b = blockIdx.x;
	const float *z = logits + b * V;
	float *p = probs + b * V;
	float mx = z[0];
	for (int v = threadIdx.x; v < V; v += blockDim.x)
		mx = z[v] > mx ? z[v] : mx;
	mx = block_max(mx, f);
	double se = 0.0, sz = 0.0;
	for (int v = threadIdx.x; v < V; v += blockDim.x) {
		p[v] = expf(z[v] - mx);
		se += p[v];
		sz += z[v];
	}
	double sum = block_sum(se, s), szs = block_sum(sz, s);
	float inv = (float)(1.0 / sum);
	for (int v = threadIdx.x; v < V; v += blockDim.x)
		p[v] *= inv;
	if (threadIdx.x == 0) {
		double lse = mx + log(sum);
		double nll = lse - z[labels[b]];
		double smooth = lse - szs / V;
		losses[b] = (float)((1.0 - smoothing) * nll + smoothing * smooth);
	}
}

void cu_softmax_xent_forward(apf_backend *be, float *losses, float *probs,
			     const float *logits, const int32_t *labels, int B,
			     int V, float smoothing)
{
	if (B <= 0 || V <= 0)
		return;
	k_softmax_xent_forward<<<B, ROW_THREADS, 0, impl_of(be)->stream>>>(
		losses, probs, logits, labels, V, smoothing);
	launched(be, "softmax_xent_forward");
}

__global__ static void k_softmax_xent_backward(float *dlogits,
					       const float *probs,
					       const int32_t *labels, size_t n,
					       int V, float off, float on,
					       float dloss)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t b = i / V;
	int v = (int)(i % V);
	float d = dloss * (probs[i] - off);
	if (v == labels[b])
		d -= on;
	dlogits[i] = d;
}

void cu_softmax_xent_backward(apf_backend *be, float *dlogits,
			      const float *probs, const int32_t *labels, int B,
			      int V, float smoothing, float dloss)
{
	size_t n = (size_t)B * (V > 0 ? V : 0);
	float off = smoothing / (float)V, on = dloss * (1.0f - smoothing);
	EW_LAUNCH(be, "softmax_xent_backward", k_softmax_xent_backward, n,
		  dlogits, probs, labels, n, V, off, on, dloss);
}

/* ---- reductions to the host ------------------------------------------------- */

/* Partials: block k sums items k*RED_THREADS + t + j*RED_BLOCKS*RED_THREADS
 * per thread t, in j order, then its tree. */
enum { R_SUM = 1, R_DOT, R_CORRECT };

__global__ static void k_reduce_partials(int op, const float *x,
					 const float *y, const int32_t *labels,
					 size_t n, int V, double *part)
{
	__shared__ double s[RED_THREADS];
	double a = 0.0;
	size_t stride = (size_t)RED_BLOCKS * RED_THREADS;
	for (size_t i = global_index(); i < n; i += stride) {
		switch (op) {
		case R_SUM:
			a += x[i];
			break;
		case R_DOT:
			a += (double)x[i] * y[i];
			break;
		case R_CORRECT: {
			/* row i of logits x (n,V): its first maximum */
			const float *z = x + i * V;
			int best = 0;
			for (int v = 1; v < V; v++)
				if (z[v] > z[best])
					best = v;
			a += best == labels[i];
			break;
		}
		}
	}
	double t = block_sum(a, s);
	if (threadIdx.x == 0)
		part[blockIdx.x] = t;
}

__global__ static void k_reduce_max_abs(const float *x, size_t n, double *part)
{
	__shared__ float f[RED_THREADS];
	float m = 0.0f;
	size_t stride = (size_t)RED_BLOCKS * RED_THREADS;
	for (size_t i = global_index(); i < n; i += stride) {
		float a = fabsf(x[i]);
		m = a > m ? a : m;
	}
	float t = block_max(m, f);
	if (threadIdx.x == 0)
		part[blockIdx.x] = t;
}

/* part[RED_BLOCKS] = the partials' sum (max: their maximum), one block. */
__global__ static void k_reduce_final(double *part, int max)
{
	__shared__ double s[RED_BLOCKS];
	unsigned t = threadIdx.x;
	s[t] = part[t];
	__syncthreads();
	for (unsigned h = RED_BLOCKS / 2; h > 0; h /= 2) {
		if (t < h)
			s[t] = max ? (s[t + h] > s[t] ? s[t + h] : s[t])
				   : s[t] + s[t + h];
		__syncthreads();
	}
	if (t == 0)
		part[RED_BLOCKS] = s[0];
}

/* The final value to the host; 0 after a failure (sync reports it). */
static double reduce_result(apf_backend *be, const char *what, int max)
{
	struct cuda_impl *c = impl_of(be);
	k_reduce_final<<<1, RED_BLOCKS, 0, c->stream>>>(c->partials, max);
	launched(be, what);
	*c->result = 0.0;
	cudaError_t e = cudaMemcpyAsync(c->result, c->partials + RED_BLOCKS,
					sizeof(double), cudaMemcpyDeviceToHost,
					c->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(c->stream);
	cuda_check(be, what, e);
	return e == cudaSuccess ? *c->result : 0.0;
}

static double reduce(apf_backend *be, const char *what, int op,
		     const float *x, const float *y, const int32_t *labels,
		     size_t n, int V)
{
	struct cuda_impl *c = impl_of(be);
	k_reduce_partials<<<RED_BLOCKS, RED_THREADS, 0, c->stream>>>(
		op, x, y, labels, n, V, c->partials);
	launched(be, what);
	return reduce_result(be, what, 0);
}

double cu_dot(apf_backend *be, const float *x, const float *y, size_t n)
{
	return reduce(be, "dot", R_DOT, x, y, NULL, n, 0);
}

double cu_sum(apf_backend *be, const float *x, size_t n)
{
	return reduce(be, "sum", R_SUM, x, NULL, NULL, n, 0);
}

double cu_norm2(apf_backend *be, const float *x, size_t n)
{
	return sqrt(cu_dot(be, x, x, n));
}

double cu_max_abs(apf_backend *be, const float *x, size_t n)
{
	struct cuda_impl *c = impl_of(be);
	k_reduce_max_abs<<<RED_BLOCKS, RED_THREADS, 0, c->stream>>>(
		x, n, c->partials);
	launched(be, "max_abs");
	return reduce_result(be, "max_abs", 1);
}

long cu_count_correct(apf_backend *be, const float *logits,
		      const int32_t *labels, int B, int V)
{
	if (B <= 0 || V <= 0)
		return 0;
	return (long)reduce(be, "count_correct", R_CORRECT, logits, NULL,
			    labels, (size_t)B, V);
}

/* ---- click-through layers: sigmoid loss, embeddings, dot interaction ------- */

// losses, probs (B) from logits (B) and 0/1 labels (B), in double as the CPU
__global__ static void k_sigmoid_xent_forward(float *losses, float *probs,
					      const float *logits,
					      const int32_t *labels, int B,
					      float smoothing)
{
	size_t b = global_index();
	if (b >= (size_t)B)
		return;
	double z = logits[b];
	double t = (1.0 - smoothing) * (labels[b] ? 1.0 : 0.0) +
		   0.5 * smoothing;
	double l = (z > 0 ? z : 0.0) - z * t + log1p(exp(-fabs(z)));
	losses[b] = (float)l;
	probs[b] = (float)(z >= 0 ? 1.0 / (1.0 + exp(-z))
				  : exp(z) / (1.0 + exp(z)));
}

void cu_sigmoid_xent_forward(apf_backend *be, float *losses, float *probs,
			     const float *logits, const int32_t *labels, int B,
			     float smoothing)
{
	if (B <= 0)
		return;
	k_sigmoid_xent_forward<<<ew_blocks((size_t)B), EW_THREADS, 0,
				 impl_of(be)->stream>>>(losses, probs, logits,
							labels, B, smoothing);
	launched(be, "sigmoid_xent_forward");
}

// dlogits (B) = dloss (probs - t)
__global__ static void k_sigmoid_xent_backward(float *dlogits,
					       const float *probs,
					       const int32_t *labels, int B,
					       float smoothing, float dloss)
{
	size_t b = global_index();
	if (b >= (size_t)B)
		return;
	float t = (1.0f - smoothing) * (labels[b] ? 1.0f : 0.0f) +
		  0.5f * smoothing;
	dlogits[b] = dloss * (probs[b] - t);
}

void cu_sigmoid_xent_backward(apf_backend *be, float *dlogits,
			      const float *probs, const int32_t *labels, int B,
			      float smoothing, float dloss)
{
	if (B <= 0)
		return;
	k_sigmoid_xent_backward<<<ew_blocks((size_t)B), EW_THREADS, 0,
				  impl_of(be)->stream>>>(dlogits, probs, labels,
							 B, smoothing, dloss);
	launched(be, "sigmoid_xent_backward");
}

// out (B,F,D) from table (V,D) at rows offset[f] + idx (B,ldi)[b,f]
__global__ static void k_embedding_forward(float *out, const int32_t *idx,
					   int ldi, const int32_t *offset,
					   const float *table, int F, int D,
					   size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t bf = i / D, k = i % D;
	size_t b = bf / F, f = bf % F;
	size_t row = (size_t)idx[b * ldi + f] + (offset ? (size_t)offset[f] : 0);
	out[i] = table[row * D + k];
}

void cu_embedding_forward(apf_backend *be, float *out, const int32_t *idx,
			  int ldi, const int32_t *offset, const float *table,
			  int B, int F, int D)
{
	size_t n = (size_t)B * F * D;
	if (!n)
		return;
	k_embedding_forward<<<ew_blocks(n), EW_THREADS, 0,
			      impl_of(be)->stream>>>(out, idx, ldi, offset,
						     table, F, D, n);
	launched(be, "embedding_forward");
}

/* Embedding backward without atomics: thread (slice s, column k) owns
 * column k of the table rows r with r % EMB_SLICES == s and walks every
 * (b, f) in order, adding the rows it owns; so each table entry sums its
 * dout rows in (b, f) order, as the CPU. */
#define EMB_SLICES 256

// dtable (V,D) += dout (B,F,D) rows; dtable zeroed before
__global__ static void k_embedding_scatter(float *dtable, const float *dout,
					   const int32_t *idx, int ldi,
					   const int32_t *offset, int B, int F,
					   int D)
{
	size_t i = global_index();
	if (i >= (size_t)EMB_SLICES * D)
		return;
	size_t s = i / D, k = i % D;
	for (int b = 0; b < B; b++)
		for (int f = 0; f < F; f++) {
			size_t row = (size_t)idx[(size_t)b * ldi + f] +
				     (offset ? (size_t)offset[f] : 0);
			if (row % EMB_SLICES != s)
				continue;
			dtable[row * D + k] += dout[((size_t)b * F + f) * D + k];
		}
}

void cu_embedding_backward(apf_backend *be, float *dtable, const float *dout,
			   const int32_t *idx, int ldi, const int32_t *offset,
			   int B, int F, int V, int D)
{
	struct cuda_impl *c = impl_of(be);
	size_t nt = (size_t)V * D;
	if (!nt)
		return;
	cuda_check(be, "embedding_backward",
		   cudaMemsetAsync(dtable, 0, nt * sizeof *dtable, c->stream));
	if (B <= 0 || F <= 0)
		return;
	size_t n = (size_t)EMB_SLICES * D;
	k_embedding_scatter<<<ew_blocks(n), EW_THREADS, 0, c->stream>>>(
		dtable, dout, idx, ldi, offset, B, F, D);
	launched(be, "embedding_backward");
}

/* Vector k of example b: the dense vector, then the embeddings. */
__device__ static inline const float *ivec(const float *dense,
					   const float *emb, size_t b, int k,
					   int E, int D)
{
	return k == 0 ? dense + b * D : emb + (b * E + (k - 1)) * D;
}

// out (B, D + F(F-1)/2) from dense (B,D) and emb (B,E,D); one thread per output
__global__ static void k_interaction_forward(float *out, const float *dense,
					     const float *emb, int E, int D,
					     size_t OC, size_t n)
{
	size_t x = global_index();
	if (x >= n)
		return;
	size_t b = x / OC, p = x % OC;
	if (p < (size_t)D) {
		out[x] = dense[b * D + p];
		return;
	}
	/* pair (i, j) at position p - D of the lower triangle, row by row */
	size_t q = p - D;
	int i = 1;
	while ((size_t)i * (i + 1) / 2 <= q)
		i++;
	int j = (int)(q - (size_t)i * (i - 1) / 2);
	const float *vi = ivec(dense, emb, b, i, E, D);
	const float *vj = ivec(dense, emb, b, j, E, D);
	double s = 0.0;
	for (int k = 0; k < D; k++)
		s += (double)vi[k] * vj[k];
	out[x] = (float)s;
}

void cu_interaction_forward(apf_backend *be, float *out, const float *dense,
			    const float *emb, int B, int E, int D)
{
	int F = E + 1;
	size_t OC = (size_t)D + (size_t)F * (F - 1) / 2;
	size_t n = (size_t)B * OC;
	if (!n)
		return;
	k_interaction_forward<<<ew_blocks(n), EW_THREADS, 0,
				impl_of(be)->stream>>>(out, dense, emb, E, D,
						       OC, n);
	launched(be, "interaction_forward");
}

/* Thread (b, vector k, column x) sums its gradient in double in the CPU's
 * order: the dense part of dout (k = 0), then the pairs (k, j), j < k, then
 * the pairs (i, k), i > k, which is the pairs' output order. */
__global__ static void k_interaction_backward(float *ddense, float *demb,
					      const float *dout,
					      const float *dense,
					      const float *emb, int E, int D,
					      size_t OC, int accum_dense,
					      int accum_emb, size_t n)
{
	size_t t = global_index();
	if (t >= n)
		return;
	int F = E + 1;
	size_t b = t / ((size_t)F * D), r = t % ((size_t)F * D);
	int k = (int)(r / D), x = (int)(r % D);
	const float *d = dout + b * OC;
	double g = k == 0 ? (double)d[x] : 0.0;
	size_t row = (size_t)D + (size_t)k * (k - 1) / 2;
	for (int j = 0; j < k; j++) {
		double w = d[row + j];
		g += w * ivec(dense, emb, b, j, E, D)[x];
	}
	for (int i = k + 1; i < F; i++) {
		double w = d[(size_t)D + (size_t)i * (i - 1) / 2 + k];
		g += w * ivec(dense, emb, b, i, E, D)[x];
	}
	if (k == 0) {
		if (ddense) {
			float *dst = ddense + b * D + x;
			*dst = accum_dense ? *dst + (float)g : (float)g;
		}
	} else if (demb) {
		float *dst = demb + (b * E + (k - 1)) * D + x;
		*dst = accum_emb ? *dst + (float)g : (float)g;
	}
}

void cu_interaction_backward(apf_backend *be, float *ddense, float *demb,
			     const float *dout, const float *dense,
			     const float *emb, int B, int E, int D,
			     int accum_dense, int accum_emb)
{
	int F = E + 1;
	size_t OC = (size_t)D + (size_t)F * (F - 1) / 2;
	size_t n = (size_t)B * F * D;
	if (!n || (!ddense && !demb))
		return;
	k_interaction_backward<<<ew_blocks(n), EW_THREADS, 0,
				 impl_of(be)->stream>>>(ddense, demb, dout,
							dense, emb, E, D, OC,
							accum_dense, accum_emb,
							n);
	launched(be, "interaction_backward");
}

/* ---- L1 loss, channel concatenation ---------------------------------------- */

// losses (B) = mean over n of |pred - target|; one block per example
__global__ static void k_l1_forward(float *losses, const float *pred,
				    const float *target, int n)
{
	__shared__ double s[ROW_THREADS];
	size_t b = blockIdx.x;
	const float *p = pred + b * n, *q = target + b * n;
	double a = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		a += fabs((double)p[i] - q[i]);
	double t = block_sum(a, s);
	if (threadIdx.x == 0)
		losses[b] = (float)(t / n);
}

void cu_l1_forward(apf_backend *be, float *losses, const float *pred,
		   const float *target, int B, int n)
{
	if (B <= 0)
		return;
	k_l1_forward<<<B, ROW_THREADS, 0, impl_of(be)->stream>>>(losses, pred,
								 target, n);
	launched(be, "l1_forward");
}

// dpred (B n) = dloss sign(pred - target) / n, written
__global__ static void k_l1_backward(float *dpred, const float *pred,
				     const float *target, float g, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	dpred[i] = pred[i] > target[i] ? g : pred[i] < target[i] ? -g : 0.0f;
}

void cu_l1_backward(apf_backend *be, float *dpred, const float *pred,
		    const float *target, int B, int n, float dloss)
{
	size_t N = (size_t)B * n;
	if (!N)
		return;
	k_l1_backward<<<ew_blocks(N), EW_THREADS, 0, impl_of(be)->stream>>>(
		dpred, pred, target, dloss / (float)n, N);
	launched(be, "l1_backward");
}

// out (N,Ca+Cb) = rows of a (N,Ca) followed by rows of b (N,Cb)
__global__ static void k_concat_forward(float *out, const float *a,
					const float *b, int Ca, int Cb,
					size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t Co = (size_t)Ca + Cb, r = i / Co, c = i % Co;
	out[i] = c < (size_t)Ca ? a[r * Ca + c] : b[r * Cb + (c - Ca)];
}

void cu_concat_forward(apf_backend *be, float *out, const float *a,
		       const float *b, int N, int Ca, int Cb)
{
	size_t n = (size_t)N * ((size_t)Ca + Cb);
	if (!n)
		return;
	k_concat_forward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, a, b, Ca, Cb, n);
	launched(be, "concat_forward");
}

// dst (N,Cd) = or += columns [c0, c0+Cd) of dout (N,Co)
__global__ static void k_concat_part_backward(float *dst, const float *dout,
					      int Cd, size_t Co, int c0,
					      int accum, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	float v = dout[(i / Cd) * Co + c0 + i % Cd];
	dst[i] = accum ? dst[i] + v : v;
}

static void concat_part(apf_backend *be, float *dst, const float *dout, int N,
			int Cd, size_t Co, int c0, int accum)
{
	size_t n = (size_t)N * Cd;
	if (!n)
		return;
	k_concat_part_backward<<<ew_blocks(n), EW_THREADS, 0,
				 impl_of(be)->stream>>>(dst, dout, Cd, Co, c0,
							accum, n);
	launched(be, "concat_backward");
}

// dout (N,Ca+Cb); da (N,Ca), db (N,Cb), either NULL
void cu_concat_backward(apf_backend *be, float *da, float *db,
			const float *dout, int N, int Ca, int Cb, int accum_a,
			int accum_b)
{
	size_t Co = (size_t)Ca + Cb;
	if (da)
		concat_part(be, da, dout, N, Ca, Co, 0, accum_a);
	if (db)
		concat_part(be, db, dout, N, Cb, Co, Ca, accum_b);
}

/* ---- sequence layers: causal self-attention, gated linear units ------------ */

/* Attention runs one block per query row (b, h, t) in the forward and in
 * the backward's dq, and one block per key row (b, h, t2) for dk and dv, so
 * nothing is shared between blocks and no (T,T) scratch is needed beyond
 * att. Every dot product sums in d order (the scores in double, dout.v in
 * float) and every weighted sum of rows adds them in row order, as the
 * CPU; the softmax's sum and the backward's sum of att * datt are block
 * trees in double. The exponential is mathf.h's apf_mf_exp_f, float
 * arithmetic only, so it gives the CPU's bits. */

__device__ static double block_max_d(double v, double *s)
{
	unsigned t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
		if (t < h)
			s[t] = s[t + h] > s[t] ? s[t + h] : s[t];
		__syncthreads();
	}
	double r = s[0];
	__syncthreads();
	return r;
}

// q (hs) . k (hs) in double, d order, times scale
__device__ static inline double attn_score(const float *q, const float *k,
					   int hs, float scale)
{
	double s = 0.0;
	for (int d = 0; d < hs; d++)
		s += (double)q[d] * k[d];
	return s * scale;
}

// out (B,T,C), att (B,NH,T,T) from qkv (B,T,3C); block (b,h,t)
__global__ static void k_attention_forward(float *out, float *att,
					   const float *qkv, int T, int C,
					   int NH, float scale)
{
	__shared__ double s[ROW_THREADS];
	size_t row = blockIdx.x; /* (b,h,t) */
	int t = (int)(row % T);
	size_t bh = row / T, b = bh / NH, h = bh % NH;
	int hs = C / NH, n = t + 1;
	size_t ld = (size_t)3 * C;
	const float *base = qkv + b * T * ld + h * hs;
	const float *q = base + (size_t)t * ld;
	float *a = att + row * T;
	double m = -INFINITY;
	for (int t2 = threadIdx.x; t2 < n; t2 += blockDim.x) {
		double v = attn_score(q, base + C + (size_t)t2 * ld, hs, scale);
		m = v > m ? v : m;
	}
	m = block_max_d(m, s);
	double sum = 0.0;
	for (int t2 = threadIdx.x; t2 < n; t2 += blockDim.x) {
		double v = attn_score(q, base + C + (size_t)t2 * ld, hs, scale);
		a[t2] = apf_mf_exp_f((float)(v - m));
		sum += a[t2];
	}
	double inv = 1.0 / block_sum(sum, s);
	for (int t2 = threadIdx.x; t2 < T; t2 += blockDim.x)
		a[t2] = t2 < n ? (float)(a[t2] * inv) : 0.0f;
	__syncthreads();
	const float *v = base + 2 * (size_t)C;
	float *o = out + (b * T + t) * C + h * hs;
	for (int d = threadIdx.x; d < hs; d += blockDim.x) {
		float acc = 0.0f;
		for (int t2 = 0; t2 < n; t2++)
			acc += a[t2] * v[(size_t)t2 * ld + d];
		o[d] = acc;
	}
}

void cu_attention_forward(apf_backend *be, float *out, float *att,
			  const float *qkv, int B, int T, int C, int NH,
			  float scale)
{
	size_t rows = (size_t)B * NH * T;
	if (!rows)
		return;
	k_attention_forward<<<(unsigned)rows, ROW_THREADS, 0,
			      impl_of(be)->stream>>>(out, att, qkv, T, C, NH,
						     scale);
	launched(be, "attention_forward");
}

// dout (hs) . v (hs) in float, d order
__device__ static inline float attn_dot_f(const float *x, const float *y,
					  int hs)
{
	float s = 0.0f;
	for (int d = 0; d < hs; d++)
		s += x[d] * y[d];
	return s;
}

/* Block (b,h,t): sd[row] = sum over t2 <= t of att * (dout . v[t2]), then
 * dq[t] = sum over t2 of dp[t2] k[t2] in t2 order, dp the softmax's
 * backward (scale folded in), a chunk of ROW_THREADS keys at a time. */
__global__ static void k_attention_dq(float *dqkv, double *sd_out,
				      const float *dout, const float *qkv,
				      const float *att, int T, int C, int NH,
				      float scale, int accum)
{
	__shared__ double s[ROW_THREADS];
	__shared__ float dp[ROW_THREADS];
	size_t row = blockIdx.x;
	int t = (int)(row % T);
	size_t bh = row / T, b = bh / NH, h = bh % NH;
	int hs = C / NH, n = t + 1;
	size_t ld = (size_t)3 * C;
	const float *base = qkv + b * T * ld + h * hs;
	const float *o = dout + (b * T + t) * C + h * hs;
	const float *a = att + row * T;
	double acc = 0.0;
	for (int t2 = threadIdx.x; t2 < n; t2 += blockDim.x)
		acc += (double)a[t2] *
		       attn_dot_f(o, base + 2 * (size_t)C + (size_t)t2 * ld, hs);
	double sd = block_sum(acc, s);
	if (threadIdx.x == 0)
		sd_out[row] = sd;
	/* hs may exceed the block: each thread owns columns d = tid + j bs */
	float dq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int c0 = 0; c0 < n; c0 += blockDim.x) {
		int t2 = c0 + threadIdx.x;
		if (t2 < n) {
			float datt = attn_dot_f(o, base + 2 * (size_t)C +
							   (size_t)t2 * ld,
						hs);
			dp[threadIdx.x] = (float)((double)scale * a[t2] *
						  (datt - sd));
		}
		__syncthreads();
		int m = n - c0 < (int)blockDim.x ? n - c0 : (int)blockDim.x;
		for (int j = 0; j < 4; j++) {
			int d = threadIdx.x + j * blockDim.x;
			if (d >= hs)
				break;
			float v = dq[j];
			for (int i = 0; i < m; i++)
				v += dp[i] * base[C + (size_t)(c0 + i) * ld + d];
			dq[j] = v;
		}
		__syncthreads();
	}
	float *dst = dqkv + (b * T + t) * ld + h * hs;
	for (int j = 0; j < 4; j++) {
		int d = threadIdx.x + j * blockDim.x;
		if (d >= hs)
			break;
		dst[d] = accum ? dst[d] + dq[j] : dq[j];
	}
}

/* Block (b,h,t2): dk[t2] = sum over t >= t2 of dp[t][t2] q[t], dv[t2] =
 * sum of att[t][t2] dout[t], in t order, a chunk of ROW_THREADS query rows
 * at a time (dp recomputed from the saved sd). */
__global__ static void k_attention_dkv(float *dqkv, const double *sd_in,
				       const float *dout, const float *qkv,
				       const float *att, int T, int C, int NH,
				       float scale, int accum)
{
	__shared__ float dp[ROW_THREADS];
	__shared__ float aw[ROW_THREADS];
	size_t row = blockIdx.x;
	int t2 = (int)(row % T);
	size_t bh = row / T, b = bh / NH, h = bh % NH;
	int hs = C / NH;
	size_t ld = (size_t)3 * C;
	const float *base = qkv + b * T * ld + h * hs;
	const float *ob = dout + b * T * C + h * hs;
	const float *vr = base + 2 * (size_t)C + (size_t)t2 * ld;
	const float *ab = att + bh * T * T;
	float dk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	float dv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int c0 = t2; c0 < T; c0 += blockDim.x) {
		int t = c0 + threadIdx.x;
		if (t < T) {
			float a = ab[(size_t)t * T + t2];
			float datt = attn_dot_f(ob + (size_t)t * C, vr, hs);
			dp[threadIdx.x] = (float)((double)scale * a *
						  (datt - sd_in[bh * T + t]));
			aw[threadIdx.x] = a;
		}
		__syncthreads();
		int m = T - c0 < (int)blockDim.x ? T - c0 : (int)blockDim.x;
		for (int j = 0; j < 4; j++) {
			int d = threadIdx.x + j * blockDim.x;
			if (d >= hs)
				break;
			float k = dk[j], v = dv[j];
			for (int i = 0; i < m; i++) {
				k += dp[i] * base[(size_t)(c0 + i) * ld + d];
				v += aw[i] * ob[(size_t)(c0 + i) * C + d];
			}
			dk[j] = k;
			dv[j] = v;
		}
		__syncthreads();
	}
	float *dst = dqkv + (b * T + t2) * ld + h * hs;
	for (int j = 0; j < 4; j++) {
		int d = threadIdx.x + j * blockDim.x;
		if (d >= hs)
			break;
		float *k = dst + C + d, *v = dst + 2 * (size_t)C + d;
		*k = accum ? *k + dk[j] : dk[j];
		*v = accum ? *v + dv[j] : dv[j];
	}
}

// dqkv (B,T,3C) from dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T)
void cu_attention_backward(apf_backend *be, float *dqkv, const float *dout,
			   const float *qkv, const float *att, int B, int T,
			   int C, int NH, float scale, int accum)
{
	struct cuda_impl *c = impl_of(be);
	size_t rows = (size_t)B * NH * T;
	if (!rows)
		return;
	if (C / NH > 4 * ROW_THREADS) {
		cuda_fail(be, "attention_backward", "head size over 1024");
		return;
	}
	double *sd = (double *)cuda_scratch(be, rows * sizeof *sd);
	if (!sd)
		return;
	k_attention_dq<<<(unsigned)rows, ROW_THREADS, 0, c->stream>>>(
		dqkv, sd, dout, qkv, att, T, C, NH, scale, accum);
	launched(be, "attention_backward");
	k_attention_dkv<<<(unsigned)rows, ROW_THREADS, 0, c->stream>>>(
		dqkv, sd, dout, qkv, att, T, C, NH, scale, accum);
	launched(be, "attention_backward");
}

// out (N,H) = act(a) g from inp (N,2H) = [a | g]
__global__ static void k_glu_forward(int act, float *out, const float *inp,
				     int H, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t r = i / H, k = i % H;
	const float *x = inp + r * 2 * H;
	out[i] = act_f(act, x[k]) * x[H + k];
}

void cu_glu_forward(apf_backend *be, int act, float *out, const float *inp,
		    int N, int H)
{
	size_t n = (size_t)N * H;
	if (!n)
		return;
	k_glu_forward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		act, out, inp, H, n);
	launched(be, "glu_forward");
}

// dinp (N,2H): da = dout g act'(a), dg = dout act(a), written or added
__global__ static void k_glu_backward(int act, float *dinp, const float *dout,
				      const float *inp, int H, int accum,
				      size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t r = i / H, k = i % H;
	const float *x = inp + r * 2 * H;
	float a = x[k], g = x[H + k], d = dout[i];
	float y = act == APF_ACT_TANH ? tanhf(a) : 0.0f;
	float da = act_b(act, d * g, a, y);
	float dg = d * act_f(act, a);
	float *dx = dinp + r * 2 * H;
	dx[k] = accum ? dx[k] + da : da;
	dx[H + k] = accum ? dx[H + k] + dg : dg;
}

void cu_glu_backward(apf_backend *be, int act, float *dinp, const float *dout,
		     const float *inp, int N, int H, int accum)
{
	size_t n = (size_t)N * H;
	if (!n)
		return;
	k_glu_backward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		act, dinp, dout, inp, H, accum, n);
	launched(be, "glu_backward");
}

/* ---- conv2d (NHWC, im2col + cuBLAS GEMM), pooling ---------------------------
 *
 * The convolution runs chunks of images as the CPU: im2col of the chunk into
 * the caller's work buffer, one GEMM, the chunks in order (dweight sums the
 * chunks' GEMMs in order). The input gradient is the GEMM dcol = dout weight
 * into the same buffer, then a gather onto each input element of its dcol
 * entries in the CPU's scatter order ((oh, ow) increasing), so no atomics.
 * A 1x1 stride-1 unpadded convolution is linear on the pixels, as the CPU.
 */
#define CONV_CHUNK_FLOATS ((size_t)1 << 24) /* im2col floats per chunk */

__host__ __device__ static inline int conv_out(int n, int K, int S, int P)
{
	return (n + 2 * P - K) / S + 1;
}

static int conv_is_pointwise(int K, int S, int P)
{
	return K == 1 && S == 1 && P == 0;
}

/* Images per chunk. */
static int conv_chunk(int B, int OH, int OW, int C, int K)
{
	size_t per = (size_t)OH * OW * K * K * C;
	size_t cb = CONV_CHUNK_FLOATS / (per ? per : 1);
	if (cb < 1)
		cb = 1;
	return cb > (size_t)B ? B : (int)cb;
}

size_t cu_conv2d_work(apf_backend *be, int B, int H, int W, int C, int OC,
		      int K, int S, int P)
{
	(void)be;
	(void)OC;
	if (conv_is_pointwise(K, S, P) || B <= 0)
		return 0;
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int cb = conv_chunk(B, OH, OW, C, K);
	return (size_t)cb * OH * OW * K * K * C;
}

// col (nb*OH*OW, K*K*C) from inp (nb,H,W,C), one thread per entry
__global__ static void k_im2col(float *col, const float *inp, int H, int W,
				int C, int K, int S, int P, int OH, int OW,
				size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t KKC = (size_t)K * K * C;
	size_t r = i / KKC, e = i % KKC;
	int c = (int)(e % C), kw = (int)(e / C % K), kh = (int)(e / C / K);
	int ow = (int)(r % OW), oh = (int)(r / OW % OH);
	size_t b = r / OW / OH;
	int ih = oh * S - P + kh, iw = ow * S - P + kw;
	col[i] = ih >= 0 && ih < H && iw >= 0 && iw < W
			 ? inp[((b * H + ih) * W + iw) * C + c]
			 : 0.0f;
}

/* dinp (nb,H,W,C) = or += the dcol (nb*OH*OW, K*K*C) entries of each input
 * element, (oh, ow) increasing: the CPU's col2im order. */
__global__ static void k_col2im(float *dinp, const float *dcol, int H, int W,
				int C, int K, int S, int P, int OH, int OW,
				int accum, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	int c = (int)(i % C), iw = (int)(i / C % W), ih = (int)(i / C / W % H);
	size_t b = i / C / W / H;
	size_t KKC = (size_t)K * K * C;
	float acc = accum ? dinp[i] : 0.0f;
	for (int kh = K - 1; kh >= 0; kh--) {
		int t = ih + P - kh;
		if (t < 0 || t % S)
			continue;
		int oh = t / S;
		if (oh >= OH)
			continue;
		for (int kw = K - 1; kw >= 0; kw--) {
			int u = iw + P - kw;
			if (u < 0 || u % S)
				continue;
			int ow = u / S;
			if (ow >= OW)
				continue;
			acc += dcol[((b * OH + oh) * OW + ow) * KKC +
				    ((size_t)kh * K + kw) * C + c];
		}
	}
	dinp[i] = acc;
}

static void conv_im2col(apf_backend *be, float *col, const float *inp, int nb,
			int H, int W, int C, int K, int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	size_t n = (size_t)nb * OH * OW * K * K * C;
	if (!n)
		return;
	k_im2col<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		col, inp, H, W, C, K, S, P, OH, OW, n);
	launched(be, "conv2d");
}

// out (B,OH,OW,OC) = conv(inp (B,H,W,C), weight (OC,K,K,C)) + bias (OC)
void cu_conv2d_forward(apf_backend *be, float *out, const float *inp,
		       const float *weight, const float *bias, int B, int H,
		       int W, int C, int OC, int K, int S, int P, float *work)
{
	if (conv_is_pointwise(K, S, P)) {
		be->linear_forward(be, out, inp, weight, bias, B * H * W, C, OC);
		return;
	}
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int cb = conv_chunk(B, OH, OW, C, K), KKC = K * K * C;
	size_t in_img = (size_t)H * W * C, rows_img = (size_t)OH * OW;
	for (int b0 = 0; b0 < B; b0 += cb) {
		int nb = B - b0 < cb ? B - b0 : cb;
		int rows = (int)(nb * rows_img);
		conv_im2col(be, work, inp + b0 * in_img, nb, H, W, C, K, S, P);
		float *o = out + b0 * rows_img * OC;
		float beta = 0.0f;
		if (bias) {
			cu_rows_copy(be, o, bias, rows, OC);
			beta = 1.0f;
		}
		be->gemm(be, 0, 1, rows, OC, KKC, 1.0f, work, KKC, weight, KKC,
			 beta, o, OC);
	}
}

void cu_conv2d_backward(apf_backend *be, float *dinp, float *dweight,
			float *dbias, const float *dout, const float *inp,
			const float *weight, int B, int H, int W, int C, int OC,
			int K, int S, int P, float *work, int accum)
{
	if (conv_is_pointwise(K, S, P)) {
		be->linear_backward(be, dinp, dweight, dbias, dout, inp, weight,
				    B * H * W, C, OC, accum);
		return;
	}
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	int cb = conv_chunk(B, OH, OW, C, K), KKC = K * K * C;
	size_t in_img = (size_t)H * W * C, rows_img = (size_t)OH * OW;
	for (int b0 = 0; b0 < B; b0 += cb) {
		int nb = B - b0 < cb ? B - b0 : cb;
		int rows = (int)(nb * rows_img);
		const float *d = dout + b0 * rows_img * OC;
		conv_im2col(be, work, inp + b0 * in_img, nb, H, W, C, K, S, P);
		/* dweight (OC,KKC) = or += d^T col, chunks in order */
		be->gemm(be, 1, 0, OC, KKC, rows, 1.0f, d, OC, work, KKC,
			 b0 ? 1.0f : 0.0f, dweight, KKC);
		if (!dinp)
			continue;
		be->gemm(be, 0, 0, rows, KKC, OC, 1.0f, d, OC, weight, KKC,
			 0.0f, work, KKC);
		size_t n = nb * in_img;
		k_col2im<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
			dinp + b0 * in_img, work, H, W, C, K, S, P, OH, OW,
			accum, n);
		launched(be, "conv2d_backward");
	}
	if (dbias)
		cu_column_sums(be, dbias, dout, (size_t)B * OH * OW, OC);
}

// out, argmax (B,OH,OW,C) from inp (B,H,W,C); the first maximum wins
__global__ static void k_maxpool_forward(float *out, int32_t *argmax,
					 const float *inp, int H, int W, int C,
					 int K, int S, int P, int OH, int OW,
					 size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	int c = (int)(i % C), ow = (int)(i / C % OW), oh = (int)(i / C / OW % OH);
	size_t b = i / C / OW / OH;
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
			int32_t x = (int32_t)(((b * H + ih) * W + iw) * C + c);
			if (at < 0 || inp[x] > best) {
				best = inp[x];
				at = x;
			}
		}
	}
	out[i] = best;
	argmax[i] = at;
}

void cu_maxpool2d_forward(apf_backend *be, float *out, int32_t *argmax,
			  const float *inp, int B, int H, int W, int C, int K,
			  int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	size_t n = (size_t)B * OH * OW * C;
	if (!n)
		return;
	k_maxpool_forward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, argmax, inp, H, W, C, K, S, P, OH, OW, n);
	launched(be, "maxpool2d_forward");
}

/* Pooling backward as a gather: input element i adds the outputs whose
 * window holds it, (oh, ow) increasing, the order of the CPU's scatter;
 * max pooling only those whose argmax is i, average pooling d / K^2. */
__global__ static void k_pool_backward(float *dinp, const float *dout,
				       const int32_t *argmax, int H, int W,
				       int C, int K, int S, int P, int OH,
				       int OW, float inv, int accum, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	int c = (int)(i % C), iw = (int)(i / C % W), ih = (int)(i / C / W % H);
	size_t b = i / C / W / H;
	float acc = accum ? dinp[i] : 0.0f;
	for (int kh = K - 1; kh >= 0; kh--) {
		int t = ih + P - kh;
		if (t < 0 || t % S || t / S >= OH)
			continue;
		int oh = t / S;
		for (int kw = K - 1; kw >= 0; kw--) {
			int u = iw + P - kw;
			if (u < 0 || u % S || u / S >= OW)
				continue;
			size_t o = ((b * OH + oh) * OW + u / S) * C + c;
			if (!argmax)
				acc += dout[o] * inv;
			else if ((size_t)argmax[o] == i)
				acc += dout[o];
		}
	}
	dinp[i] = acc;
}

static void pool_backward(apf_backend *be, float *dinp, const float *dout,
			  const int32_t *argmax, int B, int H, int W, int C,
			  int K, int S, int P, int accum, const char *what)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	size_t n = (size_t)B * H * W * C;
	if (!n)
		return;
	k_pool_backward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		dinp, dout, argmax, H, W, C, K, S, P, OH, OW,
		1.0f / (float)(K * K), accum, n);
	launched(be, what);
}

void cu_maxpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			   const int32_t *argmax, int B, int H, int W, int C,
			   int K, int S, int P, int accum)
{
	pool_backward(be, dinp, dout, argmax, B, H, W, C, K, S, P, accum,
		      "maxpool2d_backward");
}

// out (B,OH,OW,C): window sums in (kh, kw) order times 1/K^2 (padding zeros)
__global__ static void k_avgpool_forward(float *out, const float *inp, int H,
					 int W, int C, int K, int S, int P,
					 int OH, int OW, float inv, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	int c = (int)(i % C), ow = (int)(i / C % OW), oh = (int)(i / C / OW % OH);
	size_t b = i / C / OW / OH;
	float s = 0.0f;
	for (int kh = 0; kh < K; kh++) {
		int ih = oh * S - P + kh;
		if (ih < 0 || ih >= H)
			continue;
		for (int kw = 0; kw < K; kw++) {
			int iw = ow * S - P + kw;
			if (iw < 0 || iw >= W)
				continue;
			s += inp[((b * H + ih) * W + iw) * C + c];
		}
	}
	out[i] = s * inv;
}

void cu_avgpool2d_forward(apf_backend *be, float *out, const float *inp, int B,
			  int H, int W, int C, int K, int S, int P)
{
	int OH = conv_out(H, K, S, P), OW = conv_out(W, K, S, P);
	size_t n = (size_t)B * OH * OW * C;
	if (!n)
		return;
	k_avgpool_forward<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, inp, H, W, C, K, S, P, OH, OW, 1.0f / (float)(K * K), n);
	launched(be, "avgpool2d_forward");
}

void cu_avgpool2d_backward(apf_backend *be, float *dinp, const float *dout,
			   int B, int H, int W, int C, int K, int S, int P,
			   int accum)
{
	pool_backward(be, dinp, dout, NULL, B, H, W, C, K, S, P, accum,
		      "avgpool2d_backward");
}

// out (B,C) = pixel sums in order times 1/HW; one thread per (b, c)
__global__ static void k_global_avgpool_forward(float *out, const float *inp,
						int HW, int C, float inv,
						size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t b = i / C, c = i % C;
	const float *x = inp + b * HW * C + c;
	float s = 0.0f;
	for (int p = 0; p < HW; p++)
		s += x[(size_t)p * C];
	out[i] = s * inv;
}

void cu_global_avgpool_forward(apf_backend *be, float *out, const float *inp,
			       int B, int HW, int C)
{
	size_t n = (size_t)B * C;
	if (!n)
		return;
	k_global_avgpool_forward<<<ew_blocks(n), EW_THREADS, 0,
				   impl_of(be)->stream>>>(out, inp, HW, C,
							  1.0f / (float)HW, n);
	launched(be, "global_avgpool_forward");
}

// dinp (B,HW,C) = or += dout (B,C) / HW
__global__ static void k_global_avgpool_backward(float *dinp,
						 const float *dout, int HW,
						 int C, float inv, int accum,
						 size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t c = i % C, b = i / C / HW;
	dinp[i] = (accum ? dinp[i] : 0.0f) + dout[b * C + c] * inv;
}

void cu_global_avgpool_backward(apf_backend *be, float *dinp, const float *dout,
				int B, int HW, int C, int accum)
{
	size_t n = (size_t)B * HW * C;
	if (!n)
		return;
	k_global_avgpool_backward<<<ew_blocks(n), EW_THREADS, 0,
				    impl_of(be)->stream>>>(
		dinp, dout, HW, C, 1.0f / (float)HW, accum, n);
	launched(be, "global_avgpool_backward");
}

/* ---- batch norm, instance norm ---------------------------------------------
 *
 * Both sum per channel with blocks of NORM_CH channels by NORM_LANES lanes
 * (NORM_CH consecutive channels read together): lane l sums the rows
 * (pixels) l, l + NORM_LANES, ... of its share in double, then a fixed tree
 * adds the lanes. Batch norm splits the rows into BN_CHUNKS fixed shares,
 * one block each, and a second kernel adds the shares' partials in order;
 * instance norm has one block per (image, channel group). The formulas are
 * the CPU's, operation for operation. */
#define NORM_CH 32
#define NORM_LANES 8
#define BN_CHUNKS 64

// the sum of v over the block's lanes for its channel; every thread gets it
__device__ static double lane_sum(double v, double (*s)[NORM_CH])
{
	unsigned ch = threadIdx.x % NORM_CH, lane = threadIdx.x / NORM_CH;
	s[lane][ch] = v;
	__syncthreads();
	for (unsigned h = NORM_LANES / 2; h > 0; h /= 2) {
		if (lane < h)
			s[lane][ch] += s[lane + h][ch];
		__syncthreads();
	}
	double r = s[0][ch];
	__syncthreads();
	return r;
}

enum { BN_PASS_SUM, BN_PASS_VAR, BN_PASS_DSUMS };

/* part (BN_CHUNKS, 2, C): chunk blockIdx.y's sums for channel group
 * blockIdx.x: of x (SUM), of (x - mean)^2 (VAR), of d and d xhat (DSUMS). */
__global__ static void k_bn_partials(double *part, int pass, const float *inp,
				     const float *dout, const float *mean,
				     const float *rstd, int N, int C)
{
	__shared__ double s[NORM_LANES][NORM_CH];
	int c = blockIdx.x * NORM_CH + threadIdx.x % NORM_CH;
	unsigned lane = threadIdx.x / NORM_CH;
	size_t lo = (size_t)N * blockIdx.y / BN_CHUNKS;
	size_t hi = (size_t)N * (blockIdx.y + 1) / BN_CHUNKS;
	double a0 = 0.0, a1 = 0.0;
	if (c < C) {
		float m = pass == BN_PASS_SUM ? 0.0f : mean[c];
		float r = pass == BN_PASS_DSUMS ? rstd[c] : 0.0f;
		for (size_t n = lo + lane; n < hi; n += NORM_LANES) {
			float x = inp[n * C + c];
			if (pass == BN_PASS_SUM) {
				a0 += x;
			} else if (pass == BN_PASS_VAR) {
				double d = (double)x - m;
				a0 += d * d;
			} else {
				float d = dout[n * C + c];
				a0 += d;
				a1 += (double)d * (x - m) * r;
			}
		}
	}
	a0 = lane_sum(a0, s);
	a1 = lane_sum(a1, s);
	if (c < C && lane == 0) {
		part[((size_t)blockIdx.y * 2) * C + c] = a0;
		part[((size_t)blockIdx.y * 2 + 1) * C + c] = a1;
	}
}

// the chunks' partial k for channel c, in chunk order
__device__ static double bn_total(const double *part, int k, int c, int C)
{
	double s = 0.0;
	for (int j = 0; j < BN_CHUNKS; j++)
		s += part[((size_t)j * 2 + k) * C + c];
	return s;
}

__global__ static void k_bn_mean(float *mean, const double *part, int N, int C)
{
	size_t c = global_index();
	if (c < (size_t)C)
		mean[c] = (float)(bn_total(part, 0, (int)c, C) / N);
}

__global__ static void k_bn_var(float *rstd, float *run_mean, float *run_var,
				const float *mean, const double *part, int N,
				int C, float momentum, float eps)
{
	size_t c = global_index();
	if (c >= (size_t)C)
		return;
	double sq = bn_total(part, 0, (int)c, C), var = sq / N;
	rstd[c] = (float)(1.0 / sqrt(var + eps));
	double unbiased = N > 1 ? sq / (N - 1) : var;
	run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean[c];
	run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)unbiased;
}

// out (N,C) = (inp - mean) rstd scale + bias; eval: rstd from run_var
__global__ static void k_bn_apply(float *out, const float *inp,
				  const float *mean, const float *rstd,
				  const float *run_var, const float *scale,
				  const float *bias, int C, float eps, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t c = i % C;
	float r = rstd ? rstd[c] : 1.0f / sqrtf(run_var[c] + eps);
	out[i] = (inp[i] - mean[c]) * r * scale[c] + bias[c];
}

static double *bn_part(apf_backend *be, int C)
{
	return (double *)cuda_scratch(be, (size_t)BN_CHUNKS * 2 * C *
						  sizeof(double));
}

void cu_batchnorm_forward(apf_backend *be, float *out, float *save_mean,
			  float *save_rstd, const float *inp,
			  const float *scale, const float *bias,
			  float *run_mean, float *run_var, int N, int C,
			  float momentum, float eps, int train)
{
	cudaStream_t st = impl_of(be)->stream;
	size_t n = (size_t)N * C;
	if (C <= 0)
		return;
	if (!train) {
		if (n)
			k_bn_apply<<<ew_blocks(n), EW_THREADS, 0, st>>>(
				out, inp, run_mean, NULL, run_var, scale, bias,
				C, eps, n);
		launched(be, "batchnorm_forward");
		return;
	}
	double *part = bn_part(be, C);
	if (!part)
		return;
	dim3 grid((C + NORM_CH - 1) / NORM_CH, BN_CHUNKS);
	unsigned threads = NORM_CH * NORM_LANES;
	k_bn_partials<<<grid, threads, 0, st>>>(part, BN_PASS_SUM, inp, NULL,
						NULL, NULL, N, C);
	k_bn_mean<<<ew_blocks((size_t)C), EW_THREADS, 0, st>>>(save_mean, part,
								N, C);
	k_bn_partials<<<grid, threads, 0, st>>>(part, BN_PASS_VAR, inp, NULL,
						save_mean, NULL, N, C);
	k_bn_var<<<ew_blocks((size_t)C), EW_THREADS, 0, st>>>(
		save_rstd, run_mean, run_var, save_mean, part, N, C, momentum,
		eps);
	if (n)
		k_bn_apply<<<ew_blocks(n), EW_THREADS, 0, st>>>(
			out, inp, save_mean, save_rstd, NULL, scale, bias, C,
			eps, n);
	launched(be, "batchnorm_forward");
}

__global__ static void k_bn_dsums(float *dscale, float *dbias,
				  const double *part, int C)
{
	size_t c = global_index();
	if (c >= (size_t)C)
		return;
	dbias[c] = (float)bn_total(part, 0, (int)c, C);
	dscale[c] = (float)bn_total(part, 1, (int)c, C);
}

// dinp (N,C) = or += scale rstd (d - dbias/N - xhat dscale/N)
__global__ static void k_bn_dinp(float *dinp, const float *dout,
				 const float *inp, const float *scale,
				 const float *mean, const float *rstd,
				 const float *dscale, const float *dbias, int N,
				 int C, int accum, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	size_t c = i % C;
	float xhat = (inp[i] - mean[c]) * rstd[c];
	float g = scale[c] * rstd[c] *
		  (dout[i] - dbias[c] / N - xhat * dscale[c] / N);
	dinp[i] = accum ? dinp[i] + g : g;
}

void cu_batchnorm_backward(apf_backend *be, float *dinp, float *dscale,
			   float *dbias, const float *dout, const float *inp,
			   const float *scale, const float *save_mean,
			   const float *save_rstd, int N, int C, int accum)
{
	cudaStream_t st = impl_of(be)->stream;
	if (C <= 0)
		return;
	double *part = bn_part(be, C);
	if (!part)
		return;
	dim3 grid((C + NORM_CH - 1) / NORM_CH, BN_CHUNKS);
	k_bn_partials<<<grid, NORM_CH * NORM_LANES, 0, st>>>(
		part, BN_PASS_DSUMS, inp, dout, save_mean, save_rstd, N, C);
	k_bn_dsums<<<ew_blocks((size_t)C), EW_THREADS, 0, st>>>(dscale, dbias,
								 part, C);
	size_t n = (size_t)N * C;
	if (dinp && n)
		k_bn_dinp<<<ew_blocks(n), EW_THREADS, 0, st>>>(
			dinp, dout, inp, scale, save_mean, save_rstd, dscale,
			dbias, N, C, accum, n);
	launched(be, "batchnorm_backward");
}

// block (image b, channel group): statistics over HW pixels, then out
__global__ static void k_instnorm_forward(float *out, float *mean, float *rstd,
					  const float *inp, const float *scale,
					  const float *bias, int HW, int C,
					  float eps, int ngroups)
{
	__shared__ double s[NORM_LANES][NORM_CH];
	size_t b = blockIdx.x / ngroups;
	int c = (int)(blockIdx.x % ngroups) * NORM_CH + threadIdx.x % NORM_CH;
	unsigned lane = threadIdx.x / NORM_CH;
	const float *x = inp + b * HW * C + c;
	double a = 0.0;
	if (c < C)
		for (int p = lane; p < HW; p += NORM_LANES)
			a += x[(size_t)p * C];
	double m = lane_sum(a, s) / HW;
	double q = 0.0;
	if (c < C)
		for (int p = lane; p < HW; p += NORM_LANES) {
			double d = (double)x[(size_t)p * C] - m;
			q += d * d;
		}
	q = lane_sum(q, s);
	if (c >= C)
		return;
	float mf = (float)m, r = (float)(1.0 / sqrt(q / HW + eps));
	float sc = scale[c], bi = bias[c];
	if (lane == 0) {
		mean[b * C + c] = mf;
		rstd[b * C + c] = r;
	}
	float *y = out + b * HW * C + c;
	for (int p = lane; p < HW; p += NORM_LANES)
		y[(size_t)p * C] = (x[(size_t)p * C] - mf) * r * sc + bi;
}

void cu_instnorm_forward(apf_backend *be, float *out, float *mean, float *rstd,
			 const float *inp, const float *scale,
			 const float *bias, int B, int HW, int C, float eps)
{
	if (B <= 0 || C <= 0)
		return;
	int ng = (C + NORM_CH - 1) / NORM_CH;
	k_instnorm_forward<<<(unsigned)((size_t)B * ng), NORM_CH * NORM_LANES,
			     0, impl_of(be)->stream>>>(out, mean, rstd, inp,
						       scale, bias, HW, C, eps,
						       ng);
	launched(be, "instnorm_forward");
}

/* block (image b, channel group): sums of d and d xhat (kept per (b, c) in
 * sums (2,B,C)), then dinp = rstd (d scale - mean(d scale) - xhat
 * mean(d scale xhat)) */
__global__ static void k_instnorm_backward(float *dinp, double *sums,
					   const float *dout, const float *inp,
					   const float *scale,
					   const float *mean,
					   const float *rstd, int B, int HW,
					   int C, int accum, int ngroups)
{
	__shared__ double s[NORM_LANES][NORM_CH];
	size_t b = blockIdx.x / ngroups;
	int c = (int)(blockIdx.x % ngroups) * NORM_CH + threadIdx.x % NORM_CH;
	unsigned lane = threadIdx.x / NORM_CH;
	size_t off = b * HW * C + c;
	const float *x = inp + off, *d = dout + off;
	float m = c < C ? mean[b * C + c] : 0.0f;
	float r = c < C ? rstd[b * C + c] : 0.0f;
	double sd = 0.0, sdx = 0.0;
	if (c < C)
		for (int p = lane; p < HW; p += NORM_LANES) {
			size_t k = (size_t)p * C;
			float xhat = (x[k] - m) * r;
			sd += d[k];
			sdx += (double)d[k] * xhat;
		}
	sd = lane_sum(sd, s);
	sdx = lane_sum(sdx, s);
	if (c >= C)
		return;
	if (lane == 0) {
		sums[b * C + c] = sd;
		sums[(size_t)B * C + b * C + c] = sdx;
	}
	if (!dinp)
		return;
	float sc = scale[c];
	float mdy = (float)(sc * sd / HW), mdyx = (float)(sc * sdx / HW);
	float *di = dinp + off;
	for (int p = lane; p < HW; p += NORM_LANES) {
		size_t k = (size_t)p * C;
		float xhat = (x[k] - m) * r;
		float g = r * (d[k] * sc - mdy - xhat * mdyx);
		di[k] = accum ? di[k] + g : g;
	}
}

// dscale, dbias (C): the (b, c) sums over the images in order
__global__ static void k_instnorm_params(float *dscale, float *dbias,
					 const double *sums, int B, int C)
{
	size_t c = global_index();
	if (c >= (size_t)C)
		return;
	double s = 0.0, sx = 0.0;
	for (int b = 0; b < B; b++) {
		s += sums[(size_t)b * C + c];
		sx += sums[(size_t)B * C + (size_t)b * C + c];
	}
	dbias[c] = (float)s;
	dscale[c] = (float)sx;
}

void cu_instnorm_backward(apf_backend *be, float *dinp, float *dscale,
			  float *dbias, const float *dout, const float *inp,
			  const float *scale, const float *mean,
			  const float *rstd, int B, int HW, int C, int accum)
{
	cudaStream_t st = impl_of(be)->stream;
	if (C <= 0)
		return;
	size_t BC = (size_t)B * C;
	double *sums = (double *)cuda_scratch(be, (BC ? 2 * BC : 1) *
							  sizeof(double));
	if (!sums)
		return;
	int ng = (C + NORM_CH - 1) / NORM_CH;
	if (B > 0)
		k_instnorm_backward<<<(unsigned)((size_t)B * ng),
				      NORM_CH * NORM_LANES, 0, st>>>(
			dinp, sums, dout, inp, scale, mean, rstd, B, HW, C,
			accum, ng);
	k_instnorm_params<<<ew_blocks((size_t)C), EW_THREADS, 0, st>>>(
		dscale, dbias, sums, B, C);
	launched(be, "instnorm_backward");
}

/* ---- transposed convolution 2x2 stride 2 -------------------------------------
 * As the CPU: one GEMM Y (BHW, 4OC) = inp weight^T, Y scattered onto the
 * 2x2 blocks (plus bias); backward gathers dout into the same (BHW, 4OC)
 * layout G, then dinp = G weight and dweight = G^T inp. */

// out (B,2H,2W,OC) = scatter of y (B*H*W, OC,2,2) + bias (OC); one per output
__global__ static void k_upconv_scatter(float *out, const float *y,
					const float *bias, int H, int W,
					int OC, size_t n)
{
	size_t i = global_index();
	if (i >= n)
		return;
	int o = (int)(i % OC);
	size_t ox = i / OC % (2 * (size_t)W), oy = i / OC / (2 * (size_t)W) % (2 * (size_t)H);
	size_t b = i / OC / (2 * (size_t)W) / (2 * (size_t)H);
	size_t p = (b * H + oy / 2) * W + ox / 2;
	float v = y[p * 4 * OC + 4 * (size_t)o + (oy % 2) * 2 + ox % 2];
	out[i] = bias ? v + bias[o] : v;
}

// g (B*H*W, OC,2,2) = gather of dout (B,2H,2W,OC); one per entry of g
__global__ static void k_upconv_gather(float *g, const float *dout, int H,
				       int W, int OC, size_t n)
{
	size_t k = global_index();
	if (k >= n)
		return;
	size_t p = k / (4 * (size_t)OC), e = k % (4 * (size_t)OC);
	int o = (int)(e / 4), i = (int)(e % 4 / 2), j = (int)(e % 2);
	size_t b = p / ((size_t)H * W), h = p / W % H, w = p % W;
	g[k] = dout[((b * 2 * H + 2 * h + i) * 2 * W + 2 * w + j) * OC + o];
}

void cu_upconv2x2_forward(apf_backend *be, float *out, const float *inp,
			  const float *weight, const float *bias, int B, int H,
			  int W, int C, int OC)
{
	size_t P = (size_t)B * H * W;
	if (P == 0 || OC == 0)
		return;
	float *y = (float *)cuda_scratch(be, P * 4 * OC * sizeof *y);
	if (!y)
		return;
	be->gemm(be, 0, 1, (int)P, 4 * OC, C, 1.0f, inp, C, weight, C, 0.0f,
		 y, 4 * OC);
	size_t n = P * 4 * OC;
	k_upconv_scatter<<<ew_blocks(n), EW_THREADS, 0, impl_of(be)->stream>>>(
		out, y, bias, H, W, OC, n);
	launched(be, "upconv2x2_forward");
}

void cu_upconv2x2_backward(apf_backend *be, float *dinp, float *dweight,
			   float *dbias, const float *dout, const float *inp,
			   const float *weight, int B, int H, int W, int C,
			   int OC, int accum)
{
	size_t P = (size_t)B * H * W, n = P * 4 * OC;
	float *g = (float *)cuda_scratch(be, (n ? n : 1) * sizeof *g);
	if (!g)
		return;
	if (n) {
		k_upconv_gather<<<ew_blocks(n), EW_THREADS, 0,
				  impl_of(be)->stream>>>(g, dout, H, W, OC, n);
		launched(be, "upconv2x2_backward");
	}
	if (dinp)
		be->gemm(be, 0, 0, (int)P, C, 4 * OC, 1.0f, g, 4 * OC, weight,
			 C, accum ? 1.0f : 0.0f, dinp, C);
	be->gemm(be, 1, 0, 4 * OC, C, (int)P, 1.0f, g, 4 * OC, inp, C, 0.0f,
		 dweight, C);
	if (dbias)
		cu_column_sums(be, dbias, dout, 4 * P, OC);
}
