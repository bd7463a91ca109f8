/*
 * gemm.h: apf's own single-precision GEMM (nn/cpu), with a summation order
 * fixed by contract, so its bits do not depend on the CPU it runs on.
 *
 *     C (M,N) = alpha op(A) (M,K) op(B) (K,N) + beta C, row-major,
 *     op(X) = X or X^T as trans_a / trans_b say.
 *
 * The contract. Every output element is computed as
 *
 *     acc = 0; for k = 0 .. K-1 in order: acc = fma(op(A)[i][k], op(B)[k][j], acc);
 *     C[i][j] = alpha * acc + beta * C[i][j]      (two products, one sum)
 *
 * and with beta == 0, C[i][j] = alpha * acc: C is not read, so whatever it
 * held (NaN included) does not leak. A row crow (struct apf_gemm) may stand
 * for every row of C in beta's term. Every path runs exactly that sequence:
 * scalar with fmaf() (correctly rounded, so equal to a hardware FMA), AVX2
 * with _mm256_fmadd_ps, AVX-512 with _mm512_fmadd_ps. The vector width
 * decides which outputs are computed together, never the order of a sum:
 * K is not split (each micro-tile runs the whole of K in registers), and
 * threads share the output, never K. So the bits are the same on every
 * path (isa.h) and for every thread count.
 *
 * The kernels: A and B are packed into zero-padded panels (MR rows of A,
 * NR columns of B, k-major; an operand that is already one such panel is
 * read in place, and so are the whole panels of an A not transposed on the
 * vector paths, each of their MR rows a stream along k), and a
 * register-blocked micro-kernel computes
 * one MR x NR tile of C over the whole of K: scalar 4x8, AVX2 6x16,
 * AVX-512 12x32 (6x16 where N <= 16, so a narrow C is not padded to 32
 * columns). A C of one column runs the vector paths' column kernels, up to
 * 8 vectors of rows x 1 (64 rows on AVX2, 128 on AVX-512), and a C of one
 * row is computed as its transpose, one column (op(B)^T op(A)^T: the same
 * fmas with their two factors swapped, which an fma does not see, in the
 * same k order). Padding rows and columns are computed and dropped.
 *
 * Threads. A prepared GEMM (struct apf_gemm) is run in two phases, each a
 * share (t of nt) that the caller's thread pool runs on every thread:
 * apf_gemm_pack (each thread packs its share of the panels), then, after
 * all have packed, apf_gemm_compute (each thread its share of the tiles).
 * apf_gemm runs both phases on the calling thread.
 */
#ifndef APF_NN_CPU_GEMM_H
#define APF_NN_CPU_GEMM_H

#include <stddef.h>

struct apf_gemm {
	/* the problem, as cblas_sgemm's row-major arguments (a one-row
	 * problem is restated by apf_gemm_prepare as its one-column
	 * transpose: read C, not these, after it) */
	int isa; /* isa.h's APF_CPU_ISA_* path */
	int trans_a, trans_b, M, N, K;
	float alpha;
	const float *A;
	int lda;
	const float *B;
	int ldb;
	float beta;
	float *C;
	int ldc;
	/* When not NULL (and beta not 0): beta's term is crow[j], one row
	 * of N floats for every row of C, in place of C[i][j], and C is not
	 * read: C = alpha acc + beta crow[j], the bits of C filled with crow
	 * row by row first (a layer's bias, without that pass over C). */
	const float *crow;
	/* When not NULL (op(A) = A^T only): asum[i] = the sum over k in
	 * order, from 0, of op(A)[i][k], for i < M: A's column sums (a
	 * layer's bias gradient beside its weight gradient), added while A
	 * is packed, so A is read once for both. Written by apf_gemm_pack's
	 * shares (or by apf_gemm_prepare where A is not packed as A). */
	float *asum;
	/* set by apf_gemm_prepare */
	int kernel;     /* the micro-kernel's path (see micro_tile) */
	int mr, nr;     /* its micro-tile */
	size_t mp, np;  /* panels of A (MR rows) and of B (NR columns) */
	/* The panels the kernels read: packed into room by apf_gemm_pack,
	 * or op(X) itself where it is one whole panel stored as one (k-major,
	 * its leading dimension the panel's width: a one-column GEMM's
	 * operands, such as a layer with one output's weight gradient) */
	const float *pa, *pb;
	float *pack_a, *pack_b; /* where apf_gemm_pack writes; NULL: op(X) */
	/* The first rows_a panels of an A not transposed, read row by row
	 * where A is by the vector tile kernels; pa (pack_a) holds the
	 * panels after them, from its start. */
	size_t rows_a;
	float *owned;   /* what release frees: the room when none was lent */
};

/* Room for packed panels that one thread's GEMMs reuse, so a training step
 * does not map and fault in fresh pages for every GEMM: grown on demand,
 * never shrunk, freed by apf_gemm_buf_free. Zeroed: empty. */
struct apf_gemm_buf {
	float *p;
	size_t floats;
};
void apf_gemm_buf_free(struct apf_gemm_buf *buf);

/* Checks the problem (a bad path or leading dimension is APF_EINPUT) and
 * finds room for the packed panels in buf, grown as needed, or with buf
 * NULL in an allocation of its own (APF_ENOMEM). M or N 0: nothing to do,
 * and the phases do nothing. Every prepared GEMM is released; buf must
 * outlive it and serve no other GEMM meanwhile. */
int apf_gemm_prepare(struct apf_gemm *g, struct apf_gemm_buf *buf);
/* Thread t of nt: its share of the packing. */
void apf_gemm_pack(struct apf_gemm *g, int t, int nt);
/* Thread t of nt: its share of C, once every share is packed. */
void apf_gemm_compute(const struct apf_gemm *g, int t, int nt);
void apf_gemm_release(struct apf_gemm *g);

/* The whole GEMM on the calling thread, on path isa; buf as for
 * apf_gemm_prepare (NULL: an allocation of its own). */
int apf_gemm(struct apf_gemm_buf *buf, int isa, int trans_a, int trans_b, int M, int N, int K,
	     float alpha, const float *A, int lda, const float *B, int ldb,
	     float beta, float *C, int ldc);

#endif
