/*
 * linalg.c: the symmetric eigendecomposition and inverse p-th root of
 * linalg.h, from the mathematics (no LAPACK: the bits must not depend on
 * the machine).
 *
 * Storage. The matrix being reduced lives in the lower triangle of an
 * n x n row-major buffer, so every step reads and writes whole contiguous
 * rows. The reduction eliminates row i (i = n - 1 down to 2) with a
 * reflection H_i = I - u u^T / h acting on indices 0..i-1, and leaves u in
 * that row. The eigenvectors are built as the rows of z (z = V^T): the
 * reflections are accumulated into Q = H_{n-1} ... H_2 by left
 * multiplication (row combinations), transposed once, and every QL
 * rotation then combines two contiguous rows of z. apf_sym_eig transposes
 * z into its column layout at the end.
 *
 * The QL sweep. With shift sigma, one sweep over the unreduced block
 * l..m is the explicit QL step T - sigma I = Q L, T' = L Q + sigma I,
 * computed in one pass from the bottom: rotation k (plane k, k+1) is
 * (c, s) = (x, -beta_k) / r, r = |(x, beta_k)|, where x is the pivot the
 * previous rotation left (x = d_m - sigma first). Each new off-diagonal
 * comes out as a product, e'_{k+1} = -s_{k+1} r and e'_l = -s_l x_l,
 * rather than as a difference of large terms, so it keeps its relative
 * accuracy as it goes to zero; that is what lets it pass the relative
 * negligibility test below instead of stalling at rounding noise.
 *
 * Invariants: one thread; every sum in a fixed index order (the blocked
 * loops change which element is done when, never the operations on one);
 * no fused multiply-adds (the pragmas below; gcc's C17 mode has them off
 * anyway); scaling by powers of two through ldexp, exact away from
 * underflow. The same input gives the same bits on every IEEE machine with
 * any compiler and instruction set (checked with gcc -O0 to -O3 -mfma and
 * clang -mfma). O3 for the vectorised row loops: twice as fast as -O2.
 */
#pragma GCC optimize("O3", "fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#include "nn/linalg.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "nn/mathf.h"

/* e_k is negligible when |e_k| <= EPS (|d_k| + |d_k+1|), or below TINY,
 * far below any entry that matters once the largest is near 1. */
#define EPS DBL_EPSILON
#define TINY 1e-150
/* Columns of z per pass of the blocked loops (CHUNK n doubles stay in
 * cache), and rotations kept per batch. */
#define CHUNK 32
#define ROTATIONS 32768

static int refuse(const char **why, int code, const char *reason)
{
	if (why)
		*why = reason;
	return code;
}

/* sqrt(x^2 + y^2) without overflow or harmful underflow. */
static double norm2(double x, double y)
{
	x = fabs(x);
	y = fabs(y);
	if (x < y) {
		double t = x;
		x = y;
		y = t;
	}
	if (x == 0)
		return 0;
	double t = y / x;
	return x * sqrt(1.0 + t * t);
}

/* x . y as four running sums (k mod 4), added (s0 + s1) + (s2 + s3), then
 * the tail: four independent chains instead of one, which the compiler
 * may put in vector lanes without changing any rounding. */
static double dot(const double *x, const double *y, int n)
{
	double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	int k = 0;
	for (; k + 4 <= n; k += 4) {
		s0 += x[k] * y[k];
		s1 += x[k + 1] * y[k + 1];
		s2 += x[k + 2] * y[k + 2];
		s3 += x[k + 3] * y[k + 3];
	}
	double acc = (s0 + s1) + (s2 + s3);
	for (; k < n; k++)
		acc += x[k] * y[k];
	return acc;
}

/* y += alpha x */
static void axpy(double *restrict y, double alpha, const double *restrict x,
		 int n)
{
	for (int k = 0; k < n; k++)
		y[k] += alpha * x[k];
}

/* (x, y) <- (c x + s y, c y - s x): the rows of one plane rotation. */
static void rotate(double *restrict x, double *restrict y, double c, double s,
		   int n)
{
	for (int k = 0; k < n; k++) {
		double xk = x[k], yk = y[k];
		x[k] = c * xk + s * yk;
		y[k] = c * yk - s * xk;
	}
}

static void transpose(double *z, int n)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++) {
			double t = z[(size_t)i * n + j];
			z[(size_t)i * n + j] = z[(size_t)j * n + i];
			z[(size_t)j * n + i] = t;
		}
}

/* Reduces the symmetric matrix in a's lower triangle to the tridiagonal
 * T = Q^T A Q: d (n) its diagonal, e (n) its off-diagonal, e[k] coupling k
 * and k + 1 (e[n-1] = 0). Row i of a keeps, in 0..i-1, the u of H_i, and
 * h[i] its h (0: no reflection, H_i = I). p: n doubles of scratch. */
static void tridiagonalise(double *d, double *e, double *h, double *a,
			   double *p, int n)
{
	e[n - 1] = 0;
	h[0] = 0;
	for (int i = n - 1; i >= 1; i--) {
		double *x = a + (size_t)i * n;
		d[i] = x[i]; /* no later step touches (i, i) */
		double m = 0;
		for (int j = 0; j < i - 1; j++)
			m = fabs(x[j]) > m ? fabs(x[j]) : m;
		if (m == 0) { /* already tridiagonal in this row */
			e[i - 1] = x[i - 1];
			h[i] = 0;
			continue;
		}
		m = fabs(x[i - 1]) > m ? fabs(x[i - 1]) : m;
		/* Scaled by 2^-ex into [1/2, 1) so that the squares neither
		 * overflow nor underflow; H does not depend on u's scale. */
		int ex;
		frexp(m, &ex);
		for (int j = 0; j < i; j++)
			x[j] = ldexp(x[j], -ex);
		double sigma = dot(x, x, i);
		double last = x[i - 1];
		double alpha = last >= 0 ? -sqrt(sigma) : sqrt(sigma);
		/* u = x - alpha e_{i-1}, h = u^T u / 2 = sigma - last alpha
		 * (no cancellation: last and alpha have opposite signs), and
		 * H x = alpha e_{i-1}. */
		double hi = sigma - last * alpha;
		x[i - 1] = last - alpha;
		e[i - 1] = ldexp(alpha, ex);
		h[i] = hi;
		/* B <- H B H on the leading i x i block B: p = B u / h,
		 * q = p - (u^T p / 2h) u, B <- B - u q^T - q u^T. */
		memset(p, 0, sizeof(double) * (size_t)i);
		for (int r = 0; r < i; r++) {
			const double *b = a + (size_t)r * n;
			double t = dot(b, x, r);
			axpy(p, x[r], b, r);
			p[r] += t + b[r] * x[r];
		}
		for (int r = 0; r < i; r++)
			p[r] /= hi;
		double k = dot(x, p, i) / (2 * hi);
		for (int r = 0; r < i; r++)
			p[r] -= k * x[r];
		for (int r = 0; r < i; r++) {
			double *b = a + (size_t)r * n;
			double ur = x[r], qr = p[r];
			for (int c = 0; c <= r; c++)
				b[c] -= ur * p[c] + qr * x[c];
		}
	}
	d[0] = a[0];
}

/* z (n x n) = Q^T, Q = H_{n-1} ... H_2 from what tridiagonalise left in a
 * and h. Q is built by left multiplication, H_i M = M - u (u^T M) / h:
 * before step i, M differs from I only in its leading (i-1) x (i-1) block,
 * so the step works on the leading i x i block. Each column of M goes
 * through its own sequence of operations, so the columns are taken CHUNK
 * at a time through all the steps, a block that stays in cache, with the
 * same result as step by step over the whole matrix. r: n doubles of
 * scratch. */
static void accumulate(double *z, const double *a, const double *h, double *r,
		       int n)
{
	memset(z, 0, sizeof(double) * (size_t)n * n);
	for (int i = 0; i < n; i++)
		z[(size_t)i * n + i] = 1;
	for (int c0 = 0; c0 < n; c0 += CHUNK) {
		for (int i = c0 + 1 > 2 ? c0 + 1 : 2; i < n; i++) {
			if (h[i] == 0)
				continue;
			int w = (i < c0 + CHUNK ? i : c0 + CHUNK) - c0;
			const double *u = a + (size_t)i * n;
			memset(r, 0, sizeof(double) * (size_t)w);
			for (int row = 0; row < i; row++)
				axpy(r, u[row], z + (size_t)row * n + c0, w);
			for (int c = 0; c < w; c++)
				r[c] /= h[i];
			for (int row = 0; row < i; row++)
				axpy(z + (size_t)row * n + c0, -u[row], r, w);
		}
	}
	transpose(z, n);
}

/* The QL iteration's rotations, kept until a batch is full and then applied
 * to the rows of z CHUNK columns at a time: each element of z still sees
 * the rotations in their order, so the bits are those of applying each at
 * once, but z passes through the cache once a batch instead of once a
 * sweep. */
struct rotations {
	double *c, *s;
	int *k; /* rotation t combines rows k[t] and k[t] + 1 */
	int len, cap;
};

static void rotations_flush(struct rotations *rot, double *z, int n)
{
	for (int c0 = 0; c0 < n; c0 += CHUNK) {
		int w = n - c0 < CHUNK ? n - c0 : CHUNK;
		for (int t = 0; t < rot->len; t++) {
			double *x = z + (size_t)rot->k[t] * n + c0;
			rotate(x, x + n, rot->c[t], rot->s[t], w);
		}
	}
	rot->len = 0;
}

static void rotations_add(struct rotations *rot, double *z, int n, int k,
			  double c, double s)
{
	if (rot->len == rot->cap)
		rotations_flush(rot, z, n);
	rot->c[rot->len] = c;
	rot->s[rot->len] = s;
	rot->k[rot->len] = k;
	rot->len++;
}

static void rotations_free(struct rotations *rot)
{
	free(rot->c);
	free(rot->s);
	free(rot->k);
}

static int negligible(const double *d, const double *e, int k)
{
	double ek = fabs(e[k]);
	return ek <= EPS * (fabs(d[k]) + fabs(d[k + 1])) || ek < TINY;
}

/* Diagonalises the 2 x 2 block (l, l+1) with one rotation: tan(theta) = t,
 * the root of t^2 - 2 zeta t - 1 = 0 of magnitude at most 1, zeta =
 * (d_l+1 - d_l) / 2 e_l, which zeroes the off-diagonal; the diagonal then
 * moves by e_l t. */
static void solve_2x2(double *d, double *e, struct rotations *rot, double *z,
		      int l, int n)
{
	double a = d[l], b = e[l], c = d[l + 1];
	double zeta = (c - a) / (2 * b);
	double t = 1 / (fabs(zeta) + norm2(zeta, 1.0));
	if (zeta >= 0)
		t = -t;
	double cs = 1 / sqrt(1 + t * t), sn = t * cs;
	d[l] = a + b * t;
	d[l + 1] = c - b * t;
	e[l] = 0;
	rotations_add(rot, z, n, l, cs, sn);
}

/* One QL sweep with Wilkinson's shift over the unreduced block l..m
 * (m >= l + 2), rotating the rows of z with it (see the top of the file). */
static void ql_sweep(double *d, double *e, struct rotations *rot, double *z,
		     int l, int m, int n)
{
	/* The eigenvalue of the leading 2 x 2 block nearer d_l. */
	double delta = (d[l + 1] - d[l]) / 2;
	double rad = norm2(delta, e[l]);
	double shift = d[l] - e[l] * (e[l] / (delta >= 0 ? delta + rad
							 : delta - rad));
	double x = d[m] - shift; /* the pivot */
	double dd = d[m];        /* d_k+1 as the previous rotation left it */
	double cp = 1, sp = 0;   /* the previous rotation */
	for (int k = m - 1; k >= l; k--) {
		double beta = e[k]; /* untouched so far */
		double r = norm2(x, beta); /* > 0: beta is not negligible */
		if (k < m - 1)
			e[k + 1] = -sp * r;
		double c = x / r, s = -beta / r;
		double a = d[k], bb = cp * beta;
		double cc = c * c, ss = s * s, cs2 = 2 * (bb * c * s);
		d[k + 1] = a * ss - cs2 + dd * cc;
		dd = a * cc + cs2 + dd * ss;
		x = c * (a - shift) + s * bb;
		rotations_add(rot, z, n, k, c, s);
		cp = c;
		sp = s;
	}
	d[l] = dd;
	e[l] = -sp * x;
}

/* The eigenvalues of the symmetric matrix in a's lower triangle (which it
 * destroys) into d, ascending, and the eigenvectors as the rows of z. */
static int eig_rows(double *d, double *z, const char **why, double *a, int n)
{
	if (n < 0 || n > APF_LINALG_MAX_N)
		return refuse(why, APF_EINPUT, "matrix size out of range");
	double amax = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++) {
			double v = fabs(a[(size_t)i * n + j]);
			if (!(v <= DBL_MAX))
				return refuse(why, APF_EINPUT,
					      "non-finite input");
			amax = v > amax ? v : amax;
		}
	if (n == 0)
		return 0;
	if (amax == 0) {
		memset(d, 0, sizeof(double) * (size_t)n);
		memset(z, 0, sizeof(double) * (size_t)n * n);
		for (int i = 0; i < n; i++)
			z[(size_t)i * n + i] = 1;
		return 0;
	}
	int ex;
	frexp(amax, &ex);
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			a[(size_t)i * n + j] = ldexp(a[(size_t)i * n + j], -ex);

	/* A small matrix needs fewer (about n^2 in all); the batch size
	 * changes no bit. */
	struct rotations rot = {0};
	rot.cap = n < 128 ? 2 * n * n : ROTATIONS;
	double *e = malloc(sizeof(double) * 3 * (size_t)n);
	rot.c = malloc(sizeof(double) * (size_t)rot.cap);
	rot.s = malloc(sizeof(double) * (size_t)rot.cap);
	rot.k = malloc(sizeof(int) * (size_t)rot.cap);
	if (!e || !rot.c || !rot.s || !rot.k) {
		free(e);
		rotations_free(&rot);
		return refuse(why, APF_ENOMEM, "out of memory");
	}
	double *h = e + n, *tmp = h + n;
	tridiagonalise(d, e, h, a, tmp, n);
	accumulate(z, a, h, tmp, n);

	long sweeps = 0, max_sweeps = 30L * n;
	for (int l = 0; l < n - 1; l++) {
		for (;;) {
			int m = l;
			while (m < n - 1 && !negligible(d, e, m))
				m++;
			if (m == l)
				break;
			if (m == l + 1) {
				solve_2x2(d, e, &rot, z, l, n);
				break;
			}
			if (++sweeps > max_sweeps) {
				free(e);
				rotations_free(&rot);
				return refuse(why, APF_EINPUT,
					      "eigendecomposition did not "
					      "converge");
			}
			ql_sweep(d, e, &rot, z, l, m, n);
		}
	}
	rotations_flush(&rot, z, n);
	rotations_free(&rot);
	free(e);

	/* Ascending, by selection sort: a fixed sequence of swaps. */
	for (int i = 0; i < n - 1; i++) {
		int k = i;
		for (int j = i + 1; j < n; j++)
			if (d[j] < d[k])
				k = j;
		if (k == i)
			continue;
		double t = d[i];
		d[i] = d[k];
		d[k] = t;
		double *zi = z + (size_t)i * n, *zk = z + (size_t)k * n;
		for (int j = 0; j < n; j++) {
			t = zi[j];
			zi[j] = zk[j];
			zk[j] = t;
		}
	}
	for (int i = 0; i < n; i++)
		d[i] = ldexp(d[i], ex);
	return 0;
}

int apf_sym_eig(double *w, double *v, const char **why, int n,
		const double *a)
{
	if (n < 0 || n > APF_LINALG_MAX_N)
		return refuse(why, APF_EINPUT, "matrix size out of range");
	if (n == 0)
		return 0;
	double *work = malloc(sizeof(double) * (size_t)n * n);
	if (!work)
		return refuse(why, APF_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		memcpy(work + (size_t)i * n, a + (size_t)i * n,
		       sizeof(double) * (size_t)(i + 1));
	int rc = eig_rows(w, v, why, work, n);
	free(work);
	if (rc == 0)
		transpose(v, n);
	return rc;
}

/* (x + ridge)^(-1/p) for x + ridge > 0; sqrt for p = 2 and 4, where it is
 * exact to the last bit, 1/x for p = 1, else mathf.h's exp and ln. */
static double inv_root_of(double x, double p)
{
	if (p == 1)
		return 1 / x;
	if (p == 2)
		return 1 / sqrt(x);
	if (p == 4)
		return 1 / sqrt(sqrt(x));
	double y = -apf_mf_log_d(x) / p;
	if (y > 709.75) /* past e^709.78, the largest finite double */
		return INFINITY;
	if (y < -745.2) /* below the least subnormal */
		return 0;
	return apf_mf_exp_d(y);
}

int apf_sym_inv_root(double *out, const char **why, int n, const double *a,
		     double p, double ridge)
{
	if (n < 0 || n > APF_LINALG_MAX_N)
		return refuse(why, APF_EINPUT, "matrix size out of range");
	if (!(p > 0 && p <= DBL_MAX))
		return refuse(why, APF_EINPUT, "p must be positive and finite");
	if (!(ridge >= 0 && ridge <= DBL_MAX))
		return refuse(why, APF_EINPUT,
			      "ridge must be non-negative and finite");
	if (n == 0)
		return 0;
	/* S's lower triangle, in place: S_ij (j <= i) reads a_ij and a_ji,
	 * and writes only a_ij, so out may be a. Halving each term first
	 * cannot overflow, and equals (a_ij + a_ji) / 2 away from
	 * underflow. */
	double *s = out;
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			s[(size_t)i * n + j] = a[(size_t)i * n + j] * 0.5 +
					       a[(size_t)j * n + i] * 0.5;
	double *z = malloc(sizeof(double) * ((size_t)n * n + 2 * (size_t)n));
	if (!z)
		return refuse(why, APF_ENOMEM, "out of memory");
	double *lambda = z + (size_t)n * n, *f = lambda + n;
	int rc = eig_rows(lambda, z, why, s, n);
	if (rc != 0) {
		free(z);
		return rc;
	}
	/* An eigenvalue within the decomposition's rounding of 0 (n ulps of
	 * the largest) is 0: a singular S (two equal rows of statistics)
	 * leaves one of about 1e-16 of the largest, whose root would
	 * amplify noise by 1e4 (p = 4) instead of being refused or met by
	 * the ridge. */
	double top = fabs(lambda[0]) > fabs(lambda[n - 1]) ? fabs(lambda[0])
							   : fabs(lambda[n - 1]);
	double tol = (double)n * DBL_EPSILON * top;
	for (int k = 0; k < n; k++) {
		double x = (lambda[k] > tol ? lambda[k] : 0) + ridge;
		if (x == 0) {
			free(z);
			return refuse(why, APF_EINPUT,
				      "eigenvalue 0 with ridge 0 has no "
				      "inverse root");
		}
		f[k] = inv_root_of(x, p);
		if (!(f[k] <= DBL_MAX)) {
			free(z);
			return refuse(why, APF_EINPUT,
				      "an eigenvalue's inverse root "
				      "overflows");
		}
	}
	/* out_ij = sum_k (f_k z_ki) z_kj for j <= i: row i accumulates the
	 * rows of z, k ascending; then the mirror image above. */
	for (int i = 0; i < n; i++) {
		double *o = out + (size_t)i * n;
		memset(o, 0, sizeof(double) * (size_t)(i + 1));
		for (int k = 0; k < n; k++) {
			const double *zk = z + (size_t)k * n;
			axpy(o, f[k] * zk[i], zk, i + 1);
		}
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			out[(size_t)j * n + i] = out[(size_t)i * n + j];
	free(z);
	return 0;
}
