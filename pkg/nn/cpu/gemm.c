/*
 * gemm.c: apf's own SGEMM with a fixed summation order (gemm.h has the
 * contract), one packed, register-blocked micro-kernel per path (isa.h).
 *
 * Layout of the packed operands: A panel p holds rows p*MR .. p*MR+MR-1 of
 * op(A), k-major (pa[p][k][r]); B panel q holds columns q*NR .. q*NR+NR-1 of
 * op(B), k-major (pb[q][k][c]); both zero-padded past M and N. A micro-kernel
 * keeps an MR x NR tile of accumulators in registers for the whole of K and
 * then applies the epilogue alpha * acc + beta * C. Tiles cut by the edge of
 * C go through a tile buffer and the scalar epilogue, which rounds exactly
 * as the vector one does (one product, one product, one sum).
 *
 * Packing an operand that is not k-major already (A not transposed, B
 * transposed) is a transpose; the vector paths do it in 8x8 register
 * blocks, which only move bits.
 *
 * Loop order inside a thread's share: blocks of B panels sized for the L2
 * cache, and for each block every A panel of the share against the block's
 * B panels (the A panel stays in L1 while the block streams from L2).
 *
 * Floating point: contraction is off (below), and every multiply-add of a
 * sum is an explicit fmaf / fmadd, so neither the optimiser nor the vector
 * width changes a bit.
 */

/* -O2 leaves the packing and epilogue loops scalar (cpu.c does the same).
 * Contraction stays off whatever -std the build uses (GNU modes and clang
 * turn it on): an epilogue fused into one FMA would round differently on
 * the paths that have FMA. */
#pragma GCC optimize("O3", "fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#include "nn/cpu/gemm.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "nn/cpu/isa.h"
#include "nn/cpu/transpose8.h"

#define TGT_AVX2 __attribute__((target("avx2,fma")))
#define TGT_AVX512 __attribute__((target("avx512f")))

/* Bytes of B panels a block keeps in L2 while every A panel passes. */
#define B_BLOCK_BYTES ((size_t)384 * 1024)

#define SCALAR_MR 4
#define SCALAR_NR 8
#define AVX2_MR 6
#define AVX2_NR 16
#define AVX512_MR 12
#define AVX512_NR 32

/* Thread t's share [*b, *e) of n items. */
static void share(size_t n, int t, int nt, size_t *b, size_t *e)
{
	size_t per = n / (size_t)nt, extra = n % (size_t)nt;
	size_t lo = (size_t)t * per + ((size_t)t < extra ? (size_t)t : extra);
	*b = lo;
	*e = lo + per + ((size_t)t < extra ? 1 : 0);
}

/* Rows and columns of tile (p, q) inside C. */
static size_t tile_rows(const struct apf_gemm *g, size_t p)
{
	size_t left = (size_t)g->M - p * (size_t)g->mr;
	return left < (size_t)g->mr ? left : (size_t)g->mr;
}

static size_t tile_cols(const struct apf_gemm *g, size_t q)
{
	size_t left = (size_t)g->N - q * (size_t)g->nr;
	return left < (size_t)g->nr ? left : (size_t)g->nr;
}

/* ---- packing ---------------------------------------------------------- */

/* dst[k][x] = src[x ld + k] for x0 <= x < n, k0 <= k < K: rows of src,
 * transposed into a panel of width w (the rest of its rows untouched). */
static void transpose_scalar(float *dst, size_t w, const float *src,
			     size_t ld, size_t x0, size_t n, size_t k0, size_t K)
{
	for (size_t x = x0; x < n; x++) {
		const float *s = src + x * ld;
		for (size_t k = k0; k < K; k++)
			dst[k * w + x] = s[k];
	}
}

/* The same in 8x8 blocks through registers (transpose8.h), then 4x4
 * blocks; the edges scalar.
 * Moves bits only, so the paths that run it (AVX2, AVX-512) pack exactly
 * what the scalar one does. */
TGT_AVX2 static void transpose_avx2(float *dst, size_t w, const float *src,
				    size_t ld, size_t n, size_t K)
{
	size_t n8 = n / 8 * 8, K8 = K / 8 * 8;
	for (size_t x = 0; x < n8; x += 8) {
		const float *s = src + x * ld;
		for (size_t k = 0; k < K8; k += 8)
			apf_transpose8(dst + k * w + x, w, s + k, ld);
	}
	transpose_scalar(dst, w, src, ld, 0, n8, K8, K);
	/* four more rows in 4x4 blocks (the AVX-512 panel's rows 8 to 11,
	 * which went scalar: a third of its floats, two thirds of the time) */
	size_t n4 = n8 + 4 <= n ? n8 + 4 : n8, K4 = K / 4 * 4;
	for (size_t x = n8; x < n4; x += 4) {
		const float *s = src + x * ld;
		for (size_t k = 0; k < K4; k += 4) {
			__m128 r0 = _mm_loadu_ps(s + k);
			__m128 r1 = _mm_loadu_ps(s + ld + k);
			__m128 r2 = _mm_loadu_ps(s + 2 * ld + k);
			__m128 r3 = _mm_loadu_ps(s + 3 * ld + k);
			_MM_TRANSPOSE4_PS(r0, r1, r2, r3);
			float *d = dst + k * w + x;
			_mm_storeu_ps(d, r0);
			_mm_storeu_ps(d + w, r1);
			_mm_storeu_ps(d + 2 * w, r2);
			_mm_storeu_ps(d + 3 * w, r3);
		}
	}
	transpose_scalar(dst, w, src, ld, n8, n4, K4, K);
	transpose_scalar(dst, w, src, ld, n4, n, 0, K);
}

static void pack_transposed(int isa, float *dst, size_t w, const float *src,
			    size_t ld, size_t n, size_t K)
{
	if (isa == APF_CPU_ISA_SCALAR)
		transpose_scalar(dst, w, src, ld, 0, n, 0, K);
	else
		transpose_avx2(dst, w, src, ld, n, K);
}

/* Panel p of an op(A) stored the other way, op(A)[i][k] = A[i lda + k]
 * (A not transposed), or panel q of op(B)[k][j] = B[j ldb + k] (B
 * transposed): a transpose into a panel of width w, n of its columns from
 * src and the rest zero. */
static void pack_panel_transposed(const struct apf_gemm *g, float *dst,
				  size_t w, const float *src, size_t ld,
				  size_t n)
{
	size_t K = (size_t)g->K;
	pack_transposed(g->isa, dst, w, src, ld, n, K);
	for (size_t k = 0; n < w && k < K; k++)
		for (size_t x = n; x < w; x++)
			dst[k * w + x] = 0.0f;
}

/* Rows k0 .. k1-1 of one panel of width w (a constant where inlined), each
 * w floats of src at stride ld. */
static inline __attribute__((always_inline)) void
copy_rows(float *dst, size_t w, const float *src, size_t ld, size_t k0,
	  size_t k1)
{
	for (size_t k = k0; k < k1; k++)
		memcpy(dst + k * w, src + k * ld, w * sizeof *dst);
}

/* Panels p0 .. p1-1 of width w of an operand already k-major in memory
 * (op(X)[k][x] = src[k ld + x], x < n; the panels' columns past n zero):
 * a block of K_ROWS rows of src at a time (8 to 32 all ran alike) across
 * every panel, so that src streams in once however far apart its rows
 * are. Panel by panel, each row of src was a new cache line for 12 or 32
 * floats of it, and a whole A of 4 MiB passed for every panel (the
 * Transformer's weight gradients spent a quarter of their time here).
 * Moves bits only; with sum, also each column's sum over k in order from
 * 0 (gemm.h's asum), added from the rows just copied. */
static void pack_rows(float *base, size_t w, size_t K, const float *src,
		      size_t ld, size_t n, size_t p0, size_t p1, float *sum)
{
	enum { K_ROWS = 16 };
	size_t x1 = p1 * w < n ? p1 * w : n;
	if (sum && p0 * w < x1)
		memset(sum + p0 * w, 0, (x1 - p0 * w) * sizeof *sum);
	for (size_t k0 = 0; k0 < K; k0 += K_ROWS) {
		size_t k1 = K - k0 < K_ROWS ? K : k0 + K_ROWS;
		for (size_t p = p0; p < p1; p++) {
			float *d = base + p * w * K;
			const float *s = src + p * w;
			size_t cols = n - p * w < w ? n - p * w : w;
			if (cols < w) {
				for (size_t k = k0; k < k1; k++) {
					memcpy(d + k * w, s + k * ld,
					       cols * sizeof *d);
					memset(d + k * w + cols, 0,
					       (w - cols) * sizeof *d);
				}
			} else {
				/* the micro-tiles' widths as constants (1: a
				 * column kernel's B) */
				switch (w) {
				case 1: copy_rows(d, 1, s, ld, k0, k1); break;
				case 4: copy_rows(d, 4, s, ld, k0, k1); break;
				case 6: copy_rows(d, 6, s, ld, k0, k1); break;
				case 8: copy_rows(d, 8, s, ld, k0, k1); break;
				case 12: copy_rows(d, 12, s, ld, k0, k1); break;
				case 16: copy_rows(d, 16, s, ld, k0, k1); break;
				case 32: copy_rows(d, 32, s, ld, k0, k1); break;
				default: copy_rows(d, w, s, ld, k0, k1); break;
				}
			}
			/* the panel's columns' sums, the rows just copied
			 * added in order (from L1) */
			if (sum)
				for (size_t k = k0; k < k1; k++)
					for (size_t c = 0; c < cols; c++)
						sum[p * w + c] += d[k * w + c];
		}
	}
}

/* A's panels [b, e), unless A is read in place. */
static void pack_a_share(const struct apf_gemm *g, size_t b, size_t e)
{
	size_t mr = (size_t)g->mr, K = (size_t)g->K, lda = (size_t)g->lda;
	if (!g->pack_a)
		return;
	if (g->trans_a) { /* op(A)[i][k] = A[k lda + i] */
		pack_rows(g->pack_a, mr, K, g->A, lda, (size_t)g->M, b, e,
			  g->asum);
		return;
	}
	/* packed panel i is panel rows_a + i (those before are read in
	 * place) */
	size_t v = g->rows_a;
	for (size_t i = b; i < e; i++)
		pack_panel_transposed(g, g->pack_a + i * mr * K, mr,
				      g->A + (v + i) * mr * lda, lda,
				      tile_rows(g, v + i));
}

/* B's panels [b, e), unless B is read in place. */
static void pack_b_share(const struct apf_gemm *g, size_t b, size_t e)
{
	size_t nr = (size_t)g->nr, K = (size_t)g->K, ldb = (size_t)g->ldb;
	if (!g->pack_b)
		return;
	if (!g->trans_b) { /* op(B)[k][j] = B[k ldb + j] */
		pack_rows(g->pack_b, nr, K, g->B, ldb, (size_t)g->N, b, e,
			  NULL);
		return;
	}
	for (size_t q = b; q < e; q++)
		pack_panel_transposed(g, g->pack_b + q * nr * K, nr,
				      g->B + q * nr * ldb, ldb,
				      tile_cols(g, q));
}

void apf_gemm_pack(struct apf_gemm *g, int t, int nt)
{
	size_t b, e;
	share(g->mp - g->rows_a, t, nt, &b, &e);
	pack_a_share(g, b, e);
	share(g->np, t, nt, &b, &e);
	pack_b_share(g, b, e);
}

/* ---- the epilogue ------------------------------------------------------ */

/* C tile at (i0, j0), rows x cols of it, from acc (row stride ldacc). The
 * same two products and one sum as the vector epilogues. */
static void store_tile(const struct apf_gemm *g, const float *acc,
		       size_t ldacc, size_t i0, size_t j0, size_t rows,
		       size_t cols)
{
	float alpha = g->alpha, beta = g->beta;
	for (size_t r = 0; r < rows; r++) {
		float *c = g->C + (i0 + r) * (size_t)g->ldc + j0;
		const float *s = g->crow ? g->crow + j0 : c;
		const float *a = acc + r * ldacc;
		if (beta == 0.0f)
			for (size_t j = 0; j < cols; j++)
				c[j] = alpha * a[j];
		else
			for (size_t j = 0; j < cols; j++)
				c[j] = alpha * a[j] + beta * s[j];
	}
}

/* ---- scalar: 4x8, fmaf ------------------------------------------------- */

static void kernel_scalar(const struct apf_gemm *g, size_t p, size_t q)
{
	size_t K = (size_t)g->K;
	const float *a = g->pa + p * SCALAR_MR * K;
	const float *b = g->pb + q * SCALAR_NR * K;
	float acc[SCALAR_MR][SCALAR_NR];
	for (int r = 0; r < SCALAR_MR; r++)
		for (int c = 0; c < SCALAR_NR; c++)
			acc[r][c] = 0.0f;
	for (size_t k = 0; k < K; k++) {
		for (int r = 0; r < SCALAR_MR; r++)
			for (int c = 0; c < SCALAR_NR; c++)
				acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
		a += SCALAR_MR;
		b += SCALAR_NR;
	}
	store_tile(g, &acc[0][0], SCALAR_NR, p * SCALAR_MR, q * SCALAR_NR,
		   tile_rows(g, p), tile_cols(g, q));
}

/* ---- AVX2 + FMA: 6x16, 12 accumulators --------------------------------- */

/* op(A)[p mr + r][k], from the packed panel a or, in place (a constant),
 * from row r of A itself (ar[r], A not transposed) */
#define A_AT(r) (in_place ? ar[r][k] : a[r])

#define AVX2_ROW(r)                                                           \
	do {                                                                  \
		__m256 av = _mm256_set1_ps(A_AT(r));                          \
		c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                   \
		c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                   \
	} while (0)

/* Panel p of op(A) for a tile kernel: where it is packed (*a), or in
 * place, the rows of A it reads (ar[0 .. mr-1]). mr is the kernel's
 * constant: with g->mr, GCC fills ar[] in a loop of stores at a variable
 * index that the kernel's loads of ar[] then wait on (a variant of the
 * AVX-512 kernel spent 16% of its samples there, 10% of a Transformer
 * step). */
static inline __attribute__((always_inline)) void
panel_a(const struct apf_gemm *g, size_t p, int in_place, const float **a,
	const float **ar, const size_t mr)
{
	if (in_place) {
		for (size_t r = 0; r < mr; r++)
			ar[r] = g->A + (p * mr + r) * (size_t)g->lda;
		*a = NULL;
	} else {
		*a = g->pa + (p - g->rows_a) * mr * (size_t)g->K;
	}
}

static inline __attribute__((always_inline)) TGT_AVX2 void
tile_avx2(const struct apf_gemm *g, size_t p, size_t q, const int in_place)
{
	size_t K = (size_t)g->K;
	const float *a, *ar[AVX2_MR];
	panel_a(g, p, in_place, &a, ar, AVX2_MR);
	const float *b = g->pb + q * AVX2_NR * K;
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00,
	       c20 = c00, c21 = c00, c30 = c00, c31 = c00, c40 = c00,
	       c41 = c00, c50 = c00, c51 = c00;
	for (size_t k = 0; k < K; k++) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
		AVX2_ROW(0);
		AVX2_ROW(1);
		AVX2_ROW(2);
		AVX2_ROW(3);
		AVX2_ROW(4);
		AVX2_ROW(5);
		if (!in_place)
			a += AVX2_MR;
		b += AVX2_NR;
	}
	__m256 acc[AVX2_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
				  {c30, c31}, {c40, c41}, {c50, c51}};
	size_t rows = tile_rows(g, p), cols = tile_cols(g, q);
	size_t i0 = p * AVX2_MR, j0 = q * AVX2_NR;
	if (rows < AVX2_MR || cols < AVX2_NR) {
		float t[AVX2_MR * AVX2_NR];
		for (int r = 0; r < AVX2_MR; r++) {
			_mm256_storeu_ps(t + r * AVX2_NR, acc[r][0]);
			_mm256_storeu_ps(t + r * AVX2_NR + 8, acc[r][1]);
		}
		_mm256_zeroupper(); /* store_tile is SSE code (col_zeroupper) */
		store_tile(g, t, AVX2_NR, i0, j0, rows, cols);
		return;
	}
	__m256 va = _mm256_set1_ps(g->alpha), vb = _mm256_set1_ps(g->beta);
	for (int r = 0; r < AVX2_MR; r++) {
		float *c = g->C + (i0 + (size_t)r) * (size_t)g->ldc + j0;
		const float *s = g->crow ? g->crow + j0 : c;
		__m256 v0 = _mm256_mul_ps(va, acc[r][0]);
		__m256 v1 = _mm256_mul_ps(va, acc[r][1]);
		if (g->beta != 0.0f) {
			v0 = _mm256_add_ps(v0, _mm256_mul_ps(vb, _mm256_loadu_ps(s)));
			v1 = _mm256_add_ps(v1, _mm256_mul_ps(vb, _mm256_loadu_ps(s + 8)));
		}
		_mm256_storeu_ps(c, v0);
		_mm256_storeu_ps(c + 8, v1);
	}
}

TGT_AVX2 static void kernel_avx2(const struct apf_gemm *g, size_t p, size_t q)
{
	if (p < g->rows_a)
		tile_avx2(g, p, q, 1);
	else
		tile_avx2(g, p, q, 0);
}

/* ---- AVX-512: 12x32, 24 accumulators ----------------------------------- */

#define AVX512_ROW(r)                                                         \
	do {                                                                  \
		__m512 av = _mm512_set1_ps(A_AT(r));                          \
		c##r##_0 = _mm512_fmadd_ps(av, b0, c##r##_0);                 \
		c##r##_1 = _mm512_fmadd_ps(av, b1, c##r##_1);                 \
	} while (0)

static inline __attribute__((always_inline)) TGT_AVX512 void
tile_avx512(const struct apf_gemm *g, size_t p, size_t q, const int in_place)
{
	size_t K = (size_t)g->K;
	const float *a, *ar[AVX512_MR];
	panel_a(g, p, in_place, &a, ar, AVX512_MR);
	const float *b = g->pb + q * AVX512_NR * K;
	__m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0,
	       c1_1 = c0_0, c2_0 = c0_0, c2_1 = c0_0, c3_0 = c0_0,
	       c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
	       c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0,
	       c7_1 = c0_0, c8_0 = c0_0, c8_1 = c0_0, c9_0 = c0_0,
	       c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
	       c11_1 = c0_0;
	for (size_t k = 0; k < K; k++) {
		__m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
		AVX512_ROW(0);
		AVX512_ROW(1);
		AVX512_ROW(2);
		AVX512_ROW(3);
		AVX512_ROW(4);
		AVX512_ROW(5);
		AVX512_ROW(6);
		AVX512_ROW(7);
		AVX512_ROW(8);
		AVX512_ROW(9);
		AVX512_ROW(10);
		AVX512_ROW(11);
		if (!in_place)
			a += AVX512_MR;
		b += AVX512_NR;
	}
	__m512 acc[AVX512_MR][2] = {
		{c0_0, c0_1}, {c1_0, c1_1}, {c2_0, c2_1},   {c3_0, c3_1},
		{c4_0, c4_1}, {c5_0, c5_1}, {c6_0, c6_1},   {c7_0, c7_1},
		{c8_0, c8_1}, {c9_0, c9_1}, {c10_0, c10_1}, {c11_0, c11_1}};
	size_t rows = tile_rows(g, p), cols = tile_cols(g, q);
	size_t i0 = p * AVX512_MR, j0 = q * AVX512_NR;
	if (rows < AVX512_MR || cols < AVX512_NR) {
		float t[AVX512_MR * AVX512_NR];
		for (int r = 0; r < AVX512_MR; r++) {
			_mm512_storeu_ps(t + r * AVX512_NR, acc[r][0]);
			_mm512_storeu_ps(t + r * AVX512_NR + 16, acc[r][1]);
		}
		_mm256_zeroupper(); /* store_tile is SSE code (col_zeroupper) */
		store_tile(g, t, AVX512_NR, i0, j0, rows, cols);
		return;
	}
	__m512 va = _mm512_set1_ps(g->alpha), vb = _mm512_set1_ps(g->beta);
	for (int r = 0; r < AVX512_MR; r++) {
		float *c = g->C + (i0 + (size_t)r) * (size_t)g->ldc + j0;
		const float *s = g->crow ? g->crow + j0 : c;
		__m512 v0 = _mm512_mul_ps(va, acc[r][0]);
		__m512 v1 = _mm512_mul_ps(va, acc[r][1]);
		if (g->beta != 0.0f) {
			v0 = _mm512_add_ps(v0, _mm512_mul_ps(vb, _mm512_loadu_ps(s)));
			v1 = _mm512_add_ps(v1, _mm512_mul_ps(vb, _mm512_loadu_ps(s + 16)));
		}
		_mm512_storeu_ps(c, v0);
		_mm512_storeu_ps(c + 16, v1);
	}
}

TGT_AVX512 static void kernel_avx512(const struct apf_gemm *g, size_t p,
				     size_t q)
{
	if (p < g->rows_a)
		tile_avx512(g, p, q, 1);
	else
		tile_avx512(g, p, q, 0);
}

/* ---- one column: up to 8 vectors of rows x 1 ---------------------------
 *
 * A C of one column (a layer with one output: the U-Net's last 1x1
 * convolution, the DLRM's logit; or one row, transposed in
 * apf_gemm_prepare) would fill one of NR columns of every tile, and every
 * tile would be an edge tile. These kernels keep the rows in the vector
 * instead: a panel of mr rows of op(A) (a multiple of the vector width, at
 * most 8 vectors, no more than M needs), k-major as every A panel is,
 * against the column broadcast one k at a time, so each row's sum is still
 * acc = fma(op(A)[i][k], op(B)[k][0], acc) over k in order; up to eight
 * sums run side by side. The epilogue is the scalar one (store_tile). */
#define COL_VECTORS 8
enum { KERNEL_AVX2_COL = 16, KERNEL_AVX512_COL };

/* col_zeroupper: the column kernels, and the tile kernels' edge tiles,
 * hand their sums to store_tile, a plain (SSE) function. GCC puts no
 * VZEROUPPER before that call (it keeps the call's registers by what it
 * knows store_tile clobbers) nor before the kernel's return, so store_tile
 * and whatever ran after the GEMM ran with the upper halves dirty, and
 * every SSE instruction paid for a merge: apf's own scalar loops, and libm
 * called from them (the DLRM's sigmoid loss after its one-column logit
 * layer took 0.12 ms a step more, whenever no glibc memcpy, which ends in
 * VZEROUPPER, came between; the scalar GEMM after a vector one with an
 * edge tile, 129 ns a multiply-add against 1.8). The kernels clear the
 * upper halves themselves; scripts/vector-state.py checks the binary. */

/* fn(g, p, nv) with nv (1 to COL_VECTORS) a constant in each call, so
 * that each inlined body keeps its accumulators in registers. */
#define COL_DISPATCH(fn, g, p, nv)                                            \
	do {                                                                  \
		switch (nv) {                                                 \
		case 1: fn(g, p, 1); break;                                   \
		case 2: fn(g, p, 2); break;                                   \
		case 3: fn(g, p, 3); break;                                   \
		case 4: fn(g, p, 4); break;                                   \
		case 5: fn(g, p, 5); break;                                   \
		case 6: fn(g, p, 6); break;                                   \
		case 7: fn(g, p, 7); break;                                   \
		default: fn(g, p, COL_VECTORS); break;                        \
		}                                                             \
	} while (0)

/* The panel's rows for a C of M rows on a path of w floats a vector. */
static int col_rows(int M, int w)
{
	int v = (M + w - 1) / w;
	return (v < COL_VECTORS ? (v > 0 ? v : 1) : COL_VECTORS) * w;
}

static inline __attribute__((always_inline)) TGT_AVX2 void
col_avx2(const struct apf_gemm *g, size_t p, const int nv)
{
	size_t K = (size_t)g->K, mr = (size_t)nv * 8;
	const float *a = g->pa + p * mr * K;
	const float *b = g->pb;
	__m256 c[COL_VECTORS];
	for (int v = 0; v < nv; v++)
		c[v] = _mm256_setzero_ps();
	for (size_t k = 0; k < K; k++) {
		__m256 bk = _mm256_broadcast_ss(b + k);
		for (int v = 0; v < nv; v++)
			c[v] = _mm256_fmadd_ps(_mm256_loadu_ps(a + 8 * v), bk,
					       c[v]);
		a += mr;
	}
	float t[COL_VECTORS * 8];
	for (int v = 0; v < nv; v++)
		_mm256_storeu_ps(t + 8 * v, c[v]);
	/* store_tile is SSE code, and GCC leaves the vector registers' upper
	 * halves dirty across this call (col_zeroupper) */
	_mm256_zeroupper();
	store_tile(g, t, 1, p * mr, 0, tile_rows(g, p), 1);
}

TGT_AVX2 static void kernel_avx2_col(const struct apf_gemm *g, size_t p,
				     size_t q)
{
	(void)q;
	COL_DISPATCH(col_avx2, g, p, g->mr / 8);
}

static inline __attribute__((always_inline)) TGT_AVX512 void
col_avx512(const struct apf_gemm *g, size_t p, const int nv)
{
	size_t K = (size_t)g->K, mr = (size_t)nv * 16;
	const float *a = g->pa + p * mr * K;
	const float *b = g->pb;
	__m512 c[COL_VECTORS];
	for (int v = 0; v < nv; v++)
		c[v] = _mm512_setzero_ps();
	for (size_t k = 0; k < K; k++) {
		__m512 bk = _mm512_set1_ps(b[k]);
		for (int v = 0; v < nv; v++)
			c[v] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 16 * v), bk,
					       c[v]);
		a += mr;
	}
	float t[COL_VECTORS * 16];
	for (int v = 0; v < nv; v++)
		_mm512_storeu_ps(t + 16 * v, c[v]);
	_mm256_zeroupper(); /* as in col_avx2 */
	store_tile(g, t, 1, p * mr, 0, tile_rows(g, p), 1);
}

TGT_AVX512 static void kernel_avx512_col(const struct apf_gemm *g, size_t p,
					 size_t q)
{
	(void)q;
	COL_DISPATCH(col_avx512, g, p, g->mr / 16);
}

/* ---- driver ------------------------------------------------------------ */

typedef void (*kernel_fn)(const struct apf_gemm *g, size_t p, size_t q);

static kernel_fn kernel_of(int kernel)
{
	switch (kernel) {
	case APF_CPU_ISA_AVX2:
		return kernel_avx2;
	case APF_CPU_ISA_AVX512:
		return kernel_avx512;
	case KERNEL_AVX2_COL:
		return kernel_avx2_col;
	case KERNEL_AVX512_COL:
		return kernel_avx512_col;
	default:
		return kernel_scalar;
	}
}

void apf_gemm_compute(const struct apf_gemm *g, int t, int nt)
{
	if (!g->mp || !g->np)
		return;
	kernel_fn kernel = kernel_of(g->kernel);
	/* Threads take whole panels of the dimension that has more, so each
	 * has a share whatever the shape; the bits do not depend on it. */
	size_t p0 = 0, p1 = g->mp, q0 = 0, q1 = g->np;
	if (g->np >= g->mp)
		share(g->np, t, nt, &q0, &q1);
	else
		share(g->mp, t, nt, &p0, &p1);
	size_t panel = (size_t)g->K * (size_t)g->nr * sizeof(float);
	size_t nb = panel ? B_BLOCK_BYTES / panel : q1 - q0;
	if (nb < 1)
		nb = 1;
	for (size_t qb = q0; qb < q1; qb += nb) {
		size_t qe = qb + nb < q1 ? qb + nb : q1;
		for (size_t p = p0; p < p1; p++)
			for (size_t q = qb; q < qe; q++)
				kernel(g, p, q);
	}
}

/* The micro-tile of path isa for a C of N columns: the AVX-512 path runs
 * the AVX2 kernel (every AVX-512 CPU it runs on has AVX2 and FMA, isa.c)
 * where 32 columns would be mostly padding, and a vector path its column
 * kernel where C has one. */
static int micro_tile(int isa, int M, int N, int *kernel, int *mr, int *nr)
{
	switch (isa) {
	case APF_CPU_ISA_SCALAR:
		*kernel = isa, *mr = SCALAR_MR, *nr = SCALAR_NR;
		return 0;
	case APF_CPU_ISA_AVX512:
		if (N == 1) {
			*kernel = KERNEL_AVX512_COL, *mr = col_rows(M, 16),
			*nr = 1;
			return 0;
		}
		if (N > AVX2_NR) {
			*kernel = isa, *mr = AVX512_MR, *nr = AVX512_NR;
			return 0;
		}
		/* fall through */
	case APF_CPU_ISA_AVX2:
		if (N == 1) {
			*kernel = KERNEL_AVX2_COL, *mr = col_rows(M, 8),
			*nr = 1;
			return 0;
		}
		*kernel = APF_CPU_ISA_AVX2, *mr = AVX2_MR, *nr = AVX2_NR;
		return 0;
	}
	return apf_error(APF_EINPUT, "gemm", "unknown instruction-set path %d",
			 isa);
}

/* buf with room for n floats, 64-byte aligned; NULL when out of memory
 * (buf unchanged). */
static float *room_for(struct apf_gemm_buf *buf, size_t n)
{
	if (buf->p && buf->floats >= n)
		return buf->p;
	/* a whole number of lines; never 0 bytes; huge pages from 2 MiB */
	size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
	float *p = apf_alloc_big(bytes ? bytes : 64);
	if (!p)
		return NULL;
	free(buf->p);
	buf->p = p;
	buf->floats = n;
	return p;
}

/* sum[x] = the sum of src[k ld + x] over k in order, from 0, for x < n. */
static void sum_columns(float *sum, const float *src, size_t ld, size_t n,
			size_t K)
{
	memset(sum, 0, n * sizeof *sum);
	for (size_t k = 0; k < K; k++)
		for (size_t x = 0; x < n; x++)
			sum[x] += src[k * ld + x];
}

static int at_least_1(int n)
{
	return n > 1 ? n : 1;
}

/* op(X) with op(X)[k][x] = X[k ld + x] (x < n) is already its one panel
 * of width w when n fills it and ld is w. */
static int one_panel(int k_major, int n, int ld, int w)
{
	return k_major && n == w && ld == w;
}

int apf_gemm_prepare(struct apf_gemm *g, struct apf_gemm_buf *buf)
{
	g->pa = g->pb = g->owned = NULL;
	g->pack_a = g->pack_b = NULL;
	g->mp = g->np = g->rows_a = 0;
	int rc = micro_tile(g->isa, g->M, g->N, &g->kernel, &g->mr, &g->nr);
	if (rc)
		return rc;
	if (g->M < 0 || g->N < 0 || g->K < 0)
		return apf_error(APF_EINPUT, "gemm", "negative size %dx%dx%d",
				 g->M, g->N, g->K);
	int need_a = g->trans_a ? g->M : g->K, need_b = g->trans_b ? g->K : g->N;
	if (g->lda < at_least_1(need_a) || g->ldb < at_least_1(need_b) ||
	    g->ldc < at_least_1(g->N))
		return apf_error(APF_EINPUT, "gemm",
				 "leading dimensions %d, %d, %d too small for "
				 "%dx%dx%d", g->lda, g->ldb, g->ldc, g->M, g->N,
				 g->K);
	if (g->asum && !g->trans_a)
		return apf_error(APF_EINPUT, "gemm",
				 "op(A)'s row sums need op(A) = A^T");
	if (g->asum && (!g->N || g->M == 1 ||
			one_panel(g->trans_a, g->M, g->lda, g->mr))) {
		/* no packing of A to ride on (nothing to compute, the
		 * one-row restatement below packs A as B, or A is read in
		 * place): the same sums */
		sum_columns(g->asum, g->A, (size_t)g->lda, (size_t)g->M,
			    (size_t)g->K);
		g->asum = NULL;
	}
	if (!g->M || !g->N)
		return 0;
	if (g->M == 1 && g->N > 1 && g->isa != APF_CPU_ISA_SCALAR) {
		/* One row: C^T (N,1) = op(B)^T op(A)^T, one column, whose
		 * sums are the same fmas (the two factors swapped, which an
		 * fma does not see) in the same k order. C's row is the
		 * column, ldc 1; a crow is that row, so it is copied there
		 * and beta reads C as usual. */
		if (g->crow && g->beta != 0.0f)
			memmove(g->C, g->crow, (size_t)g->N * sizeof *g->C);
		g->crow = NULL;
		const float *A = g->A;
		int lda = g->lda, ta = g->trans_a;
		g->A = g->B, g->lda = g->ldb, g->trans_a = !g->trans_b;
		g->B = A, g->ldb = lda, g->trans_b = !ta;
		g->M = g->N, g->N = 1, g->ldc = 1;
		rc = micro_tile(g->isa, g->M, g->N, &g->kernel, &g->mr,
				&g->nr);
		if (rc)
			return rc;
	}
	size_t mp = ((size_t)g->M + (size_t)g->mr - 1) / (size_t)g->mr;
	size_t np = ((size_t)g->N + (size_t)g->nr - 1) / (size_t)g->nr;
	int view_a = one_panel(g->trans_a, g->M, g->lda, g->mr);
	int view_b = one_panel(!g->trans_b, g->N, g->ldb, g->nr);
	/* The vector tile kernels read a whole panel of an A stored row by
	 * row (not transposed) in place, each of its rows a stream along k:
	 * no transposing pack, which cost as much as a third of such a GEMM
	 * (M 2048, N 128, K 512) */
	g->rows_a = !g->trans_a && (g->kernel == APF_CPU_ISA_AVX2 ||
				    g->kernel == APF_CPU_ISA_AVX512)
			    ? (size_t)g->M / (size_t)g->mr
			    : 0;
	size_t na = view_a ? 0 : (mp - g->rows_a) * (size_t)g->mr * (size_t)g->K;
	size_t nb = view_b ? 0 : np * (size_t)g->nr * (size_t)g->K;
	struct apf_gemm_buf own = {0};
	float *room = room_for(buf ? buf : &own, na + nb);
	if (!room)
		return apf_error(APF_ENOMEM, "gemm",
				 "out of memory packing %dx%dx%d", g->M, g->N,
				 g->K);
	g->owned = buf ? NULL : room;
	g->pack_a = view_a || mp == g->rows_a ? NULL : room;
	g->pack_b = view_b ? NULL : room + na;
	g->pa = view_a ? g->A : g->pack_a;
	g->pb = view_b ? g->B : g->pack_b;
	g->mp = mp;
	g->np = np;
	return 0;
}

void apf_gemm_release(struct apf_gemm *g)
{
	free(g->owned);
	g->pa = g->pb = g->owned = NULL;
	g->pack_a = g->pack_b = NULL;
	g->mp = g->np = 0;
}

void apf_gemm_buf_free(struct apf_gemm_buf *buf)
{
	free(buf->p);
	buf->p = NULL;
	buf->floats = 0;
}

int apf_gemm(struct apf_gemm_buf *buf, int isa, int trans_a, int trans_b,
	     int M, int N, int K, float alpha, const float *A, int lda,
	     const float *B, int ldb, float beta, float *C, int ldc)
{
	struct apf_gemm g = {.isa = isa, .trans_a = trans_a,
			     .trans_b = trans_b, .M = M, .N = N, .K = K,
			     .alpha = alpha, .A = A, .lda = lda, .B = B,
			     .ldb = ldb, .beta = beta, .C = C, .ldc = ldc};
	int rc = apf_gemm_prepare(&g, buf);
	if (rc)
		return rc;
	apf_gemm_pack(&g, 0, 1);
	apf_gemm_compute(&g, 0, 1);
	apf_gemm_release(&g);
	return 0;
}
