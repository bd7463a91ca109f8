/*
 * linalg.h: the symmetric eigendecomposition behind apf/ops.h's inv_root
 * (ABI 2), written out in C instead of taken from LAPACK: a LAPACK build
 * picks its kernels per CPU and per thread count, and inv_root must give the
 * same bits on every machine, so that a replayed or verified run repeats a
 * Shampoo-like optimizer exactly.
 *
 * The method: the matrix is scaled by a power of two (exact) so that its
 * largest entry lies in [1/2, 1); Householder reflections reduce it to
 * tridiagonal form, eliminating one row at a time from the last; the
 * implicit QL algorithm with Wilkinson's shift then diagonalises the
 * tridiagonal matrix, a 2 x 2 block being diagonalised directly by one
 * rotation; every reflection and rotation is accumulated into the
 * eigenvectors. Everything is a fixed sequence of IEEE double operations
 * (+, -, *, /, sqrt, with contraction into fused multiply-adds off) on one
 * thread, with ldexp and frexp for the exact scalings, so the bits depend
 * on the input alone (test_linalg pins a digest of them). Memory: n * n
 * doubles besides the outputs, up to 640 KiB for a batch of rotations, and
 * O(n). Cost: 4/3 n^3 flops to reduce,
 * 4/3 n^3 to accumulate the reflections, and about 6 n^3 for the QL
 * rotations (two sweeps per eigenvalue are usual), n^3 more for the
 * root's product.
 *
 * Both functions return 0, or a negative APF_E* code (base.h) with *why
 * (which may be NULL) set to a short static reason for the caller to put
 * in its message: APF_EINPUT for an input refused (an n outside [0, 4096],
 * a non-finite entry, p or ridge out of range, an eigenvalue without an
 * inverse root, a QL iteration that does not converge), APF_ENOMEM. On
 * failure the outputs hold scratch (so does a, when inv_root's out is a).
 */
#ifndef APF_NN_LINALG_H
#define APF_NN_LINALG_H

/* The largest n either function accepts: inv_root's limit in apf/ops.h. */
#define APF_LINALG_MAX_N 4096

/* w (n) the eigenvalues of the symmetric n x n matrix a (row-major) in
 * ascending order; v (n x n, row-major) the orthonormal eigenvectors as
 * columns, v[i n + j] = component i of the eigenvector of w[j]. Only the
 * lower triangle of a (a[i n + j], j <= i) is read; v may not overlap a.
 * The QL iteration gets 30 n sweeps for the whole matrix (about 2 per
 * eigenvalue are usual). An eigenvector's sign is whatever the
 * transformations leave, the same on every machine. */
int apf_sym_eig(double *w, double *v, const char **why, int n,
		const double *a);

/* out (n x n, row-major) = (S + ridge I)^(-1/p), S = (a + a^T)/2 the
 * symmetric part of the n x n row-major matrix a, p > 0, ridge >= 0 (both
 * finite). With S = V diag(lambda) V^T, each eigenvalue lambda at most
 * n DBL_EPSILON max|lambda| (below 0, or within the decomposition's rounding
 * of it) is taken as 0, and each is mapped to f = (lambda + ridge)^(-1/p)
 * (1/x, 1/sqrt(x) and 1/sqrt(sqrt(x)) for p = 1, 2, 4; else mathf.h's exp
 * and ln in double);
 * an f that is inf or NaN (an eigenvalue 0 with ridge 0) refuses the call.
 * out[i n + j] = sum over k of (f_k v_ik) v_jk, k in ascending eigenvalue
 * order, for j <= i, mirrored above the diagonal, so out is exactly
 * symmetric. out may be a. */
int apf_sym_inv_root(double *out, const char **why, int n, const double *a,
		     double p, double ridge);

#endif
