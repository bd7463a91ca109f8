/*
 * mathf.h: the elementwise functions of apf/ops.h ABI 2 whose result is not
 * one IEEE operation (exp, ln, pow), as fixed sequences of double
 * operations rounded once to float, so that every backend and every
 * instruction-set path computes the same bits (issue 17's contract): libm's
 * expf and logf are chosen per CPU at load time (glibc picks an FMA variant
 * where the CPU has one), and CUDA's differ again.
 *
 * Each function uses +, -, *, / in double (in this order, never contracted
 * into a fused multiply-add: C17 mode has contraction off, and device code
 * goes through __dadd_rn / __dmul_rn), comparisons, and frexp / ldexp /
 * floor, which are exact. The double result is within a few double ulps
 * of the true value, so the float is the correctly rounded one except when
 * the true value lies within about 1e-16 of a float rounding boundary; in
 * any case it is within one float ulp and the same everywhere.
 *
 * exp: x = k ln2 + r, |r| <= ln2/2, k = floor(x log2(e) + 1/2), ln2 split
 * in two so that k ln2_hi is exact; e^r by its Taylor series to degree 13
 * (remainder below 4e-18), scaled by 2^k.
 * log: x = m 2^e, m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s =
 * (m - 1)/(m + 1), |s| <= 0.1716, by the odd series to s^21 (remainder
 * below 1e-18).
 * pow: e^(p ln|x|) in double, with C's rules for the special cases.
 *
 * And, at the end, the layers' own e^x and tanh (apf_mf_exp_f,
 * apf_mf_tanh_f: the attention's softmax; GELU, SiLU, tanh and the
 * softmax loss under numerics 2): float operations only, cheaper and 1 or
 * 2 float ulps off rather than correctly rounded, and written so that a
 * CPU loop of them vectorises.
 */
#ifndef APF_MATHF_H
#define APF_MATHF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define APF_MF __host__ __device__ static inline
#else
#define APF_MF static inline
#endif

#if defined(__CUDA_ARCH__)
#define APF_MF_ADD(a, b) __dadd_rn((a), (b))
#define APF_MF_SUB(a, b) __dsub_rn((a), (b))
#define APF_MF_MUL(a, b) __dmul_rn((a), (b))
#define APF_MF_DIV(a, b) __ddiv_rn((a), (b))
#else
#define APF_MF_ADD(a, b) ((a) + (b))
#define APF_MF_SUB(a, b) ((a) - (b))
#define APF_MF_MUL(a, b) ((a) * (b))
#define APF_MF_DIV(a, b) ((a) / (b))
#endif

#define APF_MF_LN2_HI 6.93147180369123816490e-01 /* 32 significant bits */
#define APF_MF_LN2_LO 1.90821492927058770002e-10
#define APF_MF_LOG2E 1.44269504088896338700e+00

/* e^x for x in [-105, 90], in double. */
APF_MF double apf_mf_exp_d(double x)
{
	double k = floor(APF_MF_ADD(APF_MF_MUL(x, APF_MF_LOG2E), 0.5));
	double r = APF_MF_SUB(APF_MF_SUB(x, APF_MF_MUL(k, APF_MF_LN2_HI)),
			      APF_MF_MUL(k, APF_MF_LN2_LO));
	const double inv_fact[14] = {
		1.0,
		1.0,
		1.0 / 2,
		1.0 / 6,
		1.0 / 24,
		1.0 / 120,
		1.0 / 720,
		1.0 / 5040,
		1.0 / 40320,
		1.0 / 362880,
		1.0 / 3628800,
		1.0 / 39916800,
		1.0 / 479001600,
		1.0 / 6227020800.0,
	};
	double p = inv_fact[13];
	for (int i = 12; i >= 0; i--)
		p = APF_MF_ADD(APF_MF_MUL(p, r), inv_fact[i]);
	return ldexp(p, (int)k);
}

/* ln x for finite x > 0, in double. */
APF_MF double apf_mf_log_d(double x)
{
	int e;
	double m = frexp(x, &e); /* [0.5, 1) */
	if (m < 0.70710678118654752440) {
		m = APF_MF_MUL(m, 2.0);
		e -= 1;
	}
	double s = APF_MF_DIV(APF_MF_SUB(m, 1.0), APF_MF_ADD(m, 1.0));
	double s2 = APF_MF_MUL(s, s);
	/* 1 + s2/3 + s2^2/5 + ... + s2^10/21 */
	double q = 1.0 / 21;
	for (int j = 19; j >= 1; j -= 2)
		q = APF_MF_ADD(APF_MF_MUL(q, s2), 1.0 / j);
	double ls = APF_MF_MUL(APF_MF_MUL(2.0, s), q);
	double de = (double)e;
	return APF_MF_ADD(APF_MF_MUL(de, APF_MF_LN2_HI),
			  APF_MF_ADD(APF_MF_MUL(de, APF_MF_LN2_LO), ls));
}

APF_MF float apf_mf_exp(float x)
{
	if (x != x)
		return x;
	if (x > 90.0f)
		return INFINITY;
	if (x < -105.0f)
		return 0.0f;
	return (float)apf_mf_exp_d((double)x);
}

APF_MF float apf_mf_log(float x)
{
	if (x != x)
		return x;
	if (x < 0.0f)
		return NAN;
	if (x == 0.0f)
		return -INFINITY;
	if (x == INFINITY)
		return INFINITY;
	return (float)apf_mf_log_d((double)x);
}

/* C's pow(x, p) for floats. */
APF_MF float apf_mf_pow(float x, float p)
{
	if (x == 1.0f || p == 0.0f)
		return 1.0f;
	if (x != x || p != p)
		return NAN;
	double dp = (double)p;
	int integer = floor(dp) == dp;
	int odd = integer && floor(APF_MF_MUL(dp, 0.5)) != APF_MF_MUL(dp, 0.5);
	int neg = signbit(x) != 0;
	if (neg && !integer && x != 0.0f && x != -INFINITY)
		return NAN;
	float ax = fabsf(x), mag;
	if (ax == 0.0f)
		mag = p > 0 ? 0.0f : INFINITY;
	else if (ax == INFINITY)
		mag = p > 0 ? INFINITY : 0.0f;
	else if (ax == 1.0f)
		mag = 1.0f; /* (-1)^(+-inf) */
	else if (p == INFINITY)
		mag = ax > 1.0f ? INFINITY : 0.0f;
	else if (p == -INFINITY)
		mag = ax > 1.0f ? 0.0f : INFINITY;
	else {
		double y = APF_MF_MUL(dp, apf_mf_log_d((double)ax));
		mag = y > 90.0 ? INFINITY
		      : y < -105.0 ? 0.0f
				   : (float)apf_mf_exp_d(y);
	}
	return neg && odd ? -mag : mag;
}

/* x = n ln2 + r with |r| <= ln2/2: n by the 1.5 * 2^23 rounding shift
 * (it sits in the low bits of t), ln2 split so that n ln2_hi is exact;
 * *scale = 2^n built in the exponent bits. For |x| <= 87. */
APF_MF float apf_mf_reduce_f(float x, float *scale)
{
	const float magic = 12582912.0f;
	float t = x * 1.44269504f + magic;
	float n = t - magic;
	float r = x - n * 0.693359375f; /* ln2's high bits: n * hi exact */
	r = r - n * -2.12194440e-4f;    /* ln2 - hi */
	uint32_t ut, umagic;
	memcpy(&ut, &t, sizeof ut);
	memcpy(&umagic, &magic, sizeof umagic);
	uint32_t bits = (ut - umagic + 127u) << 23;
	memcpy(scale, &bits, sizeof *scale);
	return r;
}

/* The layers' own e^x and tanh, in float: plain float and integer
 * operations only, with no branch, so that a CPU loop of them vectorises
 * (libm's expf and tanhf are one call per element, and expf is chosen per
 * CPU) and every instruction-set path and the CUDA kernels (built with
 * --fmad=false, so nothing is contracted) compute the same bits. Both
 * clamp on the bits rather than by float compares, which could trap and
 * so would not vectorise. The attention's softmax has used apf_mf_exp_f
 * from the start; GELU, SiLU, tanh and the softmax loss use them under
 * numerics 2 (nn.h), libm's under numerics 1.
 *
 * e^x: |x| clamped to 87 (e^-87 ~ 1.6e-38, still normal; NaN stays NaN),
 * x = n ln2 + r (apf_mf_reduce_f), e^r by its Taylor series to r^7
 * (truncation below 1e-8 relative), times 2^n. Within 1 ulp of e^x over
 * every 97th float of the whole range (44 M). */
APF_MF float apf_mf_exp_f(float x)
{
	const uint32_t lim = 0x42ae0000u; /* 87.0f */
	uint32_t ux;
	memcpy(&ux, &x, sizeof ux);
	uint32_t mag = ux & 0x7fffffffu;
	mag = mag > lim && mag <= 0x7f800000u ? lim : mag;
	ux = (ux & 0x80000000u) | mag;
	memcpy(&x, &ux, sizeof x);
	float scale;
	float r = apf_mf_reduce_f(x, &scale);
	float p = 1.0f / 5040.0f;
	p = p * r + 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	return p * scale;
}

/* tanh u, odd by construction: on a = |u| clamped to 9 (tanh 9 rounds to
 * 1 in float; a NaN is returned as it came), tanh a = E / (E + 2) with
 * E = e^(2a) - 1 = 2^n (e^r - 1) + (2^n - 1), 2a = n ln2 + r
 * (apf_mf_reduce_f), and e^r - 1 by its series to r^8 without the leading
 * 1, so that E keeps its relative accuracy near 0, where
 * 1 - 2 / (e^(2a) + 1) would cancel; then u's sign (tanh -0 is -0).
 * Within 2 ulps of tanh over every 97th float of the whole range (44 M). */
APF_MF float apf_mf_tanh_f(float u)
{
	const uint32_t lim = 0x41100000u; /* 9.0f */
	uint32_t uu, ur;
	memcpy(&uu, &u, sizeof uu);
	/* a min, not a compare and branch: GCC would split off the clamped
	 * path (its result is the constant 1) and leave a branch around
	 * the division that keeps the loop scalar; NaN is put back at the
	 * end instead */
	uint32_t mag = uu & 0x7fffffffu;
	uint32_t cl = mag < lim ? mag : lim;
	float a;
	memcpy(&a, &cl, sizeof a);
	float scale;
	float r = apf_mf_reduce_f(a + a, &scale);
	float p = 1.0f / 40320.0f;
	p = p * r + 1.0f / 5040.0f;
	p = p * r + 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r * r + r; /* e^r - 1 */
	float e = scale * p + (scale - 1.0f);
	float y = e / (e + 2.0f);
	memcpy(&ur, &y, sizeof ur);
	ur |= uu & 0x80000000u;
	/* NaN in, NaN out, by a mask rather than a select (which GCC
	 * would turn into a branch around the whole computation) */
	uint32_t nan = 0u - (uint32_t)(mag > 0x7f800000u);
	ur = (ur & ~nan) | (uu & nan);
	memcpy(&y, &ur, sizeof y);
	return y;
}

#endif
