/*
 * transpose8.h: an 8 x 8 block of floats transposed through AVX2
 * registers (8 loads, 24 shuffles, 8 stores, against 64 scattered
 * stores), for the GEMM's packing (gemm.c) and attention's key and value
 * panels (attn_body.h). Moves bits only.
 */
#ifndef APF_NN_CPU_TRANSPOSE8_H
#define APF_NN_CPU_TRANSPOSE8_H

#include <immintrin.h>
#include <stddef.h>

/* dst[c ldd + r] = src[r lds + c] for r, c < 8. */
static inline __attribute__((always_inline, target("avx2"))) void
apf_transpose8(float *dst, size_t ldd, const float *src, size_t lds)
{
	__m256 r0 = _mm256_loadu_ps(src);
	__m256 r1 = _mm256_loadu_ps(src + lds);
	__m256 r2 = _mm256_loadu_ps(src + 2 * lds);
	__m256 r3 = _mm256_loadu_ps(src + 3 * lds);
	__m256 r4 = _mm256_loadu_ps(src + 4 * lds);
	__m256 r5 = _mm256_loadu_ps(src + 5 * lds);
	__m256 r6 = _mm256_loadu_ps(src + 6 * lds);
	__m256 r7 = _mm256_loadu_ps(src + 7 * lds);
	__m256 t0 = _mm256_unpacklo_ps(r0, r1);
	__m256 t1 = _mm256_unpackhi_ps(r0, r1);
	__m256 t2 = _mm256_unpacklo_ps(r2, r3);
	__m256 t3 = _mm256_unpackhi_ps(r2, r3);
	__m256 t4 = _mm256_unpacklo_ps(r4, r5);
	__m256 t5 = _mm256_unpackhi_ps(r4, r5);
	__m256 t6 = _mm256_unpacklo_ps(r6, r7);
	__m256 t7 = _mm256_unpackhi_ps(r6, r7);
	__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);
	__m256 u1 = _mm256_shuffle_ps(t0, t2, 0xee);
	__m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44);
	__m256 u3 = _mm256_shuffle_ps(t1, t3, 0xee);
	__m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44);
	__m256 u5 = _mm256_shuffle_ps(t4, t6, 0xee);
	__m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44);
	__m256 u7 = _mm256_shuffle_ps(t5, t7, 0xee);
	_mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
	_mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
	_mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
	_mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
	_mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
	_mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
	_mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
	_mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

#endif
