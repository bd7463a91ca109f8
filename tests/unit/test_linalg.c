/*
 * test_linalg.c: the symmetric eigendecomposition and inverse p-th root
 * behind ops.h's inv_root (nn/linalg.h). Eigenvalues ascending and
 * eigenvectors orthonormal that rebuild the matrix to 1e-12 of its norm,
 * for closed forms (a diagonal, a 2 x 2), random matrices of several
 * sizes, repeated eigenvalues (the identity, identity plus rank one) and a
 * singular Hilbert-like matrix; only the lower triangle read. inv_root:
 * out^p (S + ridge I) = I for p = 1, 2, 3, 4, negative eigenvalues taken
 * as 0, a null space refused without a ridge, the symmetric part of a
 * non-symmetric input, out in place of a. Refusals: NaN and inf, n, p and
 * ridge out of range. Determinism: two calls give the same bits, and a
 * pinned digest of one decomposition and one root catches a machine or
 * compiler that changes them. And numpy's eigh in float64
 * (tests/unit/lib/eigh_numpy.py; skipped when numpy is absent).
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "hash/hash.h"
#include "nn/linalg.h"
#include "rng/rng.h"

static double *doubles(size_t n)
{
	double *p = malloc(sizeof(double) * (n ? n : 1));
	assert_non_null(p);
	return p;
}

/* Uniform [-1, 1) entries from Philox, exact in double on every machine
 * (apf_rng_normal goes through libm). Symmetric when sym. */
static double *random_matrix(int n, uint64_t seed, int sym)
{
	apf_rng_key k = {seed, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	double *a = doubles((size_t)n * n);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			if (sym && j > i)
				continue;
			double v = 2.0 * apf_rng_uniform(&r) - 1.0;
			a[(size_t)i * n + j] = v;
			if (sym)
				a[(size_t)j * n + i] = v;
		}
	return a;
}

/* A B^T / n + shift I for B random: symmetric positive definite with its
 * eigenvalues in [shift, shift + about 4]. */
static double *random_spd(int n, uint64_t seed, double shift)
{
	double *b = random_matrix(n, seed, 0);
	double *a = doubles((size_t)n * n);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			double s = 0;
			for (int k = 0; k < n; k++)
				s += b[(size_t)i * n + k] *
				     b[(size_t)j * n + k];
			a[(size_t)i * n + j] = s / n + (i == j ? shift : 0);
		}
	free(b);
	return a;
}

static double max_abs(const double *a, size_t len)
{
	double m = 0;
	for (size_t i = 0; i < len; i++)
		m = fabs(a[i]) > m ? fabs(a[i]) : m;
	return m;
}

/* The largest |V diag(w) V^T - S| and |V^T V - I|, S = a's lower triangle
 * mirrored, relative to S's largest entry; fails the test past tol. */
static void check_decomposition(int n, const double *a, const double *w,
				const double *v, double tol, const char *what)
{
	double norm = 0, rec = 0, orth = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			norm = fmax(norm, fabs(a[(size_t)i * n + j]));
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++) {
			double s = 0, o = 0;
			for (int k = 0; k < n; k++) {
				s += v[(size_t)i * n + k] * w[k] *
				     v[(size_t)j * n + k];
				o += v[(size_t)k * n + i] *
				     v[(size_t)k * n + j];
			}
			rec = fmax(rec, fabs(s - a[(size_t)i * n + j]));
			orth = fmax(orth, fabs(o - (i == j)));
		}
	if (norm > 0)
		rec /= norm;
	for (int k = 1; k < n; k++)
		if (!(w[k - 1] <= w[k]))
			fail_msg("%s: w[%d] = %.17g > w[%d] = %.17g", what,
				 k - 1, w[k - 1], k, w[k]);
	if (!(rec <= tol && orth <= tol))
		fail_msg("%s: |V W V^T - S| %.3g, |V^T V - I| %.3g (tol %.3g)",
			 what, rec, orth, tol);
	printf("    %s: |V W V^T - S| %.2g, |V^T V - I| %.2g\n", what, rec,
	       orth);
}

static void eig_of_a_diagonal_matrix_is_its_sorted_diagonal(void **state)
{
	(void)state;
	enum { N = 5 };
	static const double diag[N] = {3, -1, 2, 0, -7};
	static const double sorted[N] = {-7, -1, 0, 2, 3};
	static const int from[N] = {4, 1, 3, 2, 0}; /* where each came from */
	double a[N * N] = {0}, w[N], v[N * N];
	for (int i = 0; i < N; i++)
		a[i * N + i] = diag[i];
	const char *why = NULL;
	assert_int_equal(apf_sym_eig(w, v, &why, N, a), 0);
	for (int j = 0; j < N; j++) {
		assert_true(w[j] == sorted[j]);
		for (int i = 0; i < N; i++)
			assert_true(fabs(v[i * N + j]) == (i == from[j]));
	}
}

static void eig_of_a_2x2_matches_its_closed_form(void **state)
{
	(void)state;
	/* [[2, 1], [1, 2]]: 1 along (1, -1), 3 along (1, 1). */
	double a[4] = {2, 1, 1, 2}, w[2], v[4];
	assert_int_equal(apf_sym_eig(w, v, NULL, 2, a), 0);
	assert_true(fabs(w[0] - 1) < 1e-15 && fabs(w[1] - 3) < 1e-15);
	double r = sqrt(0.5);
	assert_true(fabs(fabs(v[0]) - r) < 1e-15 && fabs(v[2] + v[0]) < 1e-15);
	assert_true(fabs(fabs(v[1]) - r) < 1e-15 && fabs(v[3] - v[1]) < 1e-15);
	/* [[a, b], [b, c]]: (a + c)/2 -+ sqrt(((a - c)/2)^2 + b^2). */
	double b[4] = {1e-3, 0, 5e-4, -2};
	assert_int_equal(apf_sym_eig(w, v, NULL, 2, b), 0);
	double mid = (1e-3 - 2) / 2, rad = sqrt(pow((1e-3 + 2) / 2, 2) + 25e-8);
	assert_true(fabs(w[0] - (mid - rad)) < 1e-15);
	assert_true(fabs(w[1] - (mid + rad)) < 1e-15);
	check_decomposition(2, b, w, v, 1e-15, "2x2");
}

static void eig_reconstructs_random_symmetric_matrices(void **state)
{
	(void)state;
	static const int sizes[] = {1, 2, 3, 4, 7, 50, 200};
	for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
		int n = sizes[s];
		double *a = random_matrix(n, 1000 + (uint64_t)n, 1);
		double *w = doubles((size_t)n), *v = doubles((size_t)n * n);
		assert_int_equal(apf_sym_eig(w, v, NULL, n, a), 0);
		char what[32];
		snprintf(what, sizeof what, "random n = %d", n);
		check_decomposition(n, a, w, v, 1e-12, what);
		free(a);
		free(w);
		free(v);
	}
}

static void eig_handles_repeated_eigenvalues(void **state)
{
	(void)state;
	enum { N = 40 };
	double *a = doubles(N * N), *v = doubles(N * N), w[N];
	memset(a, 0, sizeof(double) * N * N);
	for (int i = 0; i < N; i++)
		a[i * N + i] = 1;
	assert_int_equal(apf_sym_eig(w, v, NULL, N, a), 0);
	for (int i = 0; i < N; i++)
		assert_true(w[i] == 1);
	check_decomposition(N, a, w, v, 1e-15, "identity");
	/* I + x x^T: 1, N - 1 times, and 1 + |x|^2 along x. */
	double x[N], xx = 0;
	for (int i = 0; i < N; i++) {
		x[i] = 0.1 * (i % 7) - 0.25;
		xx += x[i] * x[i];
	}
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			a[i * N + j] = x[i] * x[j] + (i == j);
	assert_int_equal(apf_sym_eig(w, v, NULL, N, a), 0);
	for (int i = 0; i < N - 1; i++)
		assert_true(fabs(w[i] - 1) < 1e-13);
	assert_true(fabs(w[N - 1] - (1 + xx)) < 1e-13 * (1 + xx));
	double along = 0; /* the last eigenvector is x / |x| (up to sign) */
	for (int i = 0; i < N; i++)
		along += v[i * N + N - 1] * x[i];
	assert_true(fabs(fabs(along) - sqrt(xx)) < 1e-13);
	check_decomposition(N, a, w, v, 1e-12, "identity + rank one");
	/* A rank-three matrix: N - 3 eigenvalues 0. */
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			a[i * N + j] = x[i] * x[j] + sin(i) * sin(j) +
				       cos(0.3 * i) * cos(0.3 * j);
	assert_int_equal(apf_sym_eig(w, v, NULL, N, a), 0);
	check_decomposition(N, a, w, v, 1e-12, "rank three");
	double top = fmax(fabs(w[0]), fabs(w[N - 1]));
	int zeros = 0;
	for (int i = 0; i < N; i++)
		zeros += fabs(w[i]) < 1e-13 * top;
	assert_int_equal(zeros, N - 3);
	/* Hilbert's matrix: eigenvalues down to 1e-18 of the largest. */
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			a[i * N + j] = 1.0 / (i + j + 1);
	assert_int_equal(apf_sym_eig(w, v, NULL, N, a), 0);
	check_decomposition(N, a, w, v, 1e-12, "Hilbert");
	free(a);
	free(v);
}

static void eig_reads_only_the_lower_triangle(void **state)
{
	(void)state;
	enum { N = 9 };
	double *a = random_matrix(N, 7, 1);
	double b[N * N], w[N], v[N * N], w2[N], v2[N * N];
	memcpy(b, a, sizeof b);
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			b[i * N + j] = j % 2 ? NAN : 1e300;
	assert_int_equal(apf_sym_eig(w, v, NULL, N, a), 0);
	assert_int_equal(apf_sym_eig(w2, v2, NULL, N, b), 0);
	assert_memory_equal(w, w2, sizeof w);
	assert_memory_equal(v, v2, sizeof v);
	free(a);
}

static void eig_of_zero_and_empty_matrices(void **state)
{
	(void)state;
	double z[9] = {0}, w[3], v[9];
	assert_int_equal(apf_sym_eig(w, v, NULL, 3, z), 0);
	for (int i = 0; i < 3; i++) {
		assert_true(w[i] == 0);
		for (int j = 0; j < 3; j++)
			assert_true(v[i * 3 + j] == (i == j));
	}
	assert_int_equal(apf_sym_eig(w, v, NULL, 0, z), 0);
	assert_int_equal(apf_sym_inv_root(v, NULL, 0, z, 2, 0), 0);
	/* One entry: itself, and its inverse root. */
	double one = 4, w1, v1, r1;
	assert_int_equal(apf_sym_eig(&w1, &v1, NULL, 1, &one), 0);
	assert_true(w1 == 4 && v1 == 1);
	assert_int_equal(apf_sym_inv_root(&r1, NULL, 1, &one, 2, 0), 0);
	assert_true(r1 == 0.5);
}

/* out^p (S + ridge I), as p - 1 products by out and one by S + ridge I. */
static double root_check(int n, const double *s, const double *out, int p,
			 double ridge)
{
	size_t nn = (size_t)n * n;
	double *m = doubles(nn), *t = doubles(nn);
	for (size_t i = 0; i < nn; i++)
		m[i] = s[i] + (i % (size_t)(n + 1) == 0 ? ridge : 0);
	for (int r = 0; r < p; r++) {
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				double acc = 0;
				for (int k = 0; k < n; k++)
					acc += out[(size_t)i * n + k] *
					       m[(size_t)k * n + j];
				t[(size_t)i * n + j] = acc;
			}
		memcpy(m, t, sizeof(double) * nn);
	}
	double err = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			err = fmax(err, fabs(m[(size_t)i * n + j] - (i == j)));
	free(m);
	free(t);
	return err;
}

static void inv_root_to_the_p_times_the_matrix_is_identity(void **state)
{
	(void)state;
	enum { N = 60 };
	double *s = random_spd(N, 31, 0.05);
	double *out = doubles(N * N);
	static const int ps[] = {1, 2, 3, 4};
	static const double ridges[] = {0, 1e-3};
	for (int i = 0; i < 4; i++)
		for (int r = 0; r < 2; r++) {
			const char *why = NULL;
			int rc = apf_sym_inv_root(out, &why, N, s, ps[i],
						  ridges[r]);
			if (rc != 0)
				fail_msg("p %d: %s", ps[i], why);
			for (int a = 0; a < N; a++)
				for (int b = 0; b < a; b++)
					assert_true(out[a * N + b] ==
						    out[b * N + a]);
			double err = root_check(N, s, out, ps[i], ridges[r]);
			printf("    p %d, ridge %g: |out^p (S + ridge I) - I| "
			       "%.2g\n",
			       ps[i], ridges[r], err);
			assert_true(err < 1e-9);
		}
	free(s);
	free(out);
}

static void inv_root_takes_negative_eigenvalues_as_zero(void **state)
{
	(void)state;
	/* -1 along (c, s) and 4 along (-s, c): (0 + 1)^(-1/2) and
	 * (4 + 1)^(-1/2) along the same directions. */
	double c = 0.6, s = 0.8;
	double a[4] = {-c * c + 4 * s * s, -5 * c * s, -5 * c * s,
		       -s * s + 4 * c * c};
	double out[4];
	assert_int_equal(apf_sym_inv_root(out, NULL, 2, a, 2, 1), 0);
	double f0 = 1, f1 = 1 / sqrt(5);
	double want[4] = {f0 * c * c + f1 * s * s, (f0 - f1) * c * s,
			  (f0 - f1) * c * s, f0 * s * s + f1 * c * c};
	for (int i = 0; i < 4; i++)
		assert_true(fabs(out[i] - want[i]) < 1e-15);
}

static void inv_root_refuses_a_null_space_without_ridge(void **state)
{
	(void)state;
	enum { N = 12 };
	/* x x^T + y y^T: rank two, a null space of N - 2. */
	double a[N * N], out[N * N];
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			a[i * N + j] = (double)((i + 1) * (j + 1)) +
				       (double)((i % 2) * (j % 2));
	/* Rounding leaves a null space's eigenvalues near 0, either side
	 * of it; a diagonal 0 is exactly 0. */
	double d[9] = {2, 0, 0, 0, 0, 0, 0, 0, 5};
	const char *why = NULL;
	assert_int_equal(apf_sym_inv_root(out, &why, 3, d, 2, 0), APF_EINPUT);
	assert_non_null(why);
	assert_string_equal(why,
			    "eigenvalue 0 with ridge 0 has no inverse root");
	assert_int_equal(apf_sym_inv_root(out, &why, 3, d, 2, 0.25), 0);
	assert_true(out[0] == 1 / sqrt(2.25) && out[4] == 2 &&
		    out[8] == 1 / sqrt(5.25) && out[1] == 0);
	/* The zero matrix; the rank-two one with a ridge. */
	double z[4] = {0};
	why = NULL;
	assert_int_equal(apf_sym_inv_root(out, &why, 2, z, 4, 0), APF_EINPUT);
	assert_string_equal(why,
			    "eigenvalue 0 with ridge 0 has no inverse root");
	assert_int_equal(apf_sym_inv_root(out, &why, N, a, 2, 1e-2), 0);
	assert_true(root_check(N, a, out, 2, 1e-2) < 1e-9);
}

static void inv_root_uses_the_symmetric_part(void **state)
{
	(void)state;
	enum { N = 30 };
	double *spd = random_spd(N, 5, 0.1);
	double *skew = random_matrix(N, 6, 0);
	double *a = doubles(N * N), *out = doubles(N * N);
	double *want = doubles(N * N);
	/* a = spd + K, K antisymmetric: its symmetric part s, as the test
	 * computes it, is spd up to rounding and positive definite. */
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			double k = i == j ? 0
				   : i < j ? skew[i * N + j]
					   : -skew[j * N + i];
			a[i * N + j] = spd[i * N + j] + k;
		}
	assert_true(a[1] != a[N]);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			spd[i * N + j] = (a[i * N + j] + a[j * N + i]) / 2;
	assert_int_equal(apf_sym_inv_root(want, NULL, N, spd, 4, 0), 0);
	assert_int_equal(apf_sym_inv_root(out, NULL, N, a, 4, 0), 0);
	assert_memory_equal(out, want, sizeof(double) * N * N);
	assert_true(root_check(N, spd, out, 4, 0) < 1e-9);
	/* out may be a. */
	assert_int_equal(apf_sym_inv_root(a, NULL, N, a, 4, 0), 0);
	assert_memory_equal(a, want, sizeof(double) * N * N);
	free(spd);
	free(skew);
	free(a);
	free(out);
	free(want);
}

static void non_finite_input_and_bad_arguments_are_refused(void **state)
{
	(void)state;
	enum { N = 6 };
	double *a = random_spd(N, 9, 0.5);
	double w[N], v[N * N], out[N * N];
	const char *why;
	static const double bad[] = {NAN, INFINITY, -INFINITY};
	for (int b = 0; b < 3; b++) {
		double save = a[3 * N + 1];
		a[3 * N + 1] = bad[b];
		why = NULL;
		assert_int_equal(apf_sym_eig(w, v, &why, N, a), APF_EINPUT);
		assert_string_equal(why, "non-finite input");
		why = NULL;
		assert_int_equal(apf_sym_inv_root(out, &why, N, a, 2, 0.1),
				 APF_EINPUT);
		assert_string_equal(why, "non-finite input");
		/* inv_root reads the upper triangle too. */
		a[3 * N + 1] = save;
		save = a[1 * N + 3];
		a[1 * N + 3] = bad[b];
		why = NULL;
		assert_int_equal(apf_sym_inv_root(out, &why, N, a, 2, 0.1),
				 APF_EINPUT);
		assert_string_equal(why, "non-finite input");
		a[1 * N + 3] = save;
	}
	/* Off-diagonal halves whose sum would overflow: S is
	 * [[1, b], [b, 1]], eigenvalues 1 -+ b, so out is about
	 * [[1, -1], [-1, 1]] / 2 with ridge 1. */
	double big[4] = {1, 1.5e308, 1.5e308, 1};
	assert_int_equal(apf_sym_inv_root(out, &why, 2, big, 2, 1), 0);
	assert_true(fabs(out[0] - 0.5) < 1e-15 && fabs(out[1] + 0.5) < 1e-15);
	static const double ps[] = {0, -1, NAN, INFINITY};
	for (int i = 0; i < 4; i++) {
		why = NULL;
		assert_int_equal(apf_sym_inv_root(out, &why, N, a, ps[i], 0),
				 APF_EINPUT);
		assert_non_null(why);
	}
	static const double ridges[] = {-1e-300, NAN, INFINITY};
	for (int i = 0; i < 3; i++) {
		why = NULL;
		assert_int_equal(
			apf_sym_inv_root(out, &why, N, a, 2, ridges[i]),
			APF_EINPUT);
		assert_non_null(why);
	}
	why = NULL;
	assert_int_equal(apf_sym_eig(w, v, &why, -1, a), APF_EINPUT);
	assert_string_equal(why, "matrix size out of range");
	assert_int_equal(apf_sym_eig(w, v, &why, APF_LINALG_MAX_N + 1, a),
			 APF_EINPUT);
	assert_int_equal(apf_sym_inv_root(out, &why, APF_LINALG_MAX_N + 1, a,
					  2, 0),
			 APF_EINPUT);
	/* An inverse root past the largest double. */
	double tiny[1] = {1e-300};
	why = NULL;
	assert_int_equal(apf_sym_inv_root(out, &why, 1, tiny, 0.5, 0),
			 APF_EINPUT);
	assert_non_null(why);
	free(a);
}

static void digest(char hex[APF_SHA256_HEX], const double *a, size_t len)
{
	assert_int_equal(apf_sha256_hex(hex, a, sizeof(double) * len), 0);
}

static void two_calls_give_identical_and_pinned_bits(void **state)
{
	(void)state;
	enum { N = 48 };
	double *a = random_matrix(N, 2024, 1);
	double *spd = random_spd(N, 2025, 0.01);
	double w[2][N], *v[2], *out[2];
	for (int t = 0; t < 2; t++) {
		v[t] = doubles(N * N);
		out[t] = doubles(N * N);
		assert_int_equal(apf_sym_eig(w[t], v[t], NULL, N, a), 0);
		assert_int_equal(
			apf_sym_inv_root(out[t], NULL, N, spd, 3, 1e-4), 0);
	}
	assert_memory_equal(w[0], w[1], sizeof w[0]);
	assert_memory_equal(v[0], v[1], sizeof(double) * N * N);
	assert_memory_equal(out[0], out[1], sizeof(double) * N * N);
	/* The bits linalg.h promises on every machine: a change here is a
	 * change of the algorithm (update the digests) or a compiler or CPU
	 * that breaks the promise (a bug). */
	char hw[APF_SHA256_HEX], hv[APF_SHA256_HEX], ho[APF_SHA256_HEX];
	digest(hw, w[0], N);
	digest(hv, v[0], (size_t)N * N);
	digest(ho, out[0], (size_t)N * N);
	printf("    digests: w %s\n             v %s\n             root %s\n",
	       hw, hv, ho);
	assert_string_equal(hw, "fa3874d0f9be67e6acd249de3f6482bc"
				"0977fe81c187bd4c1a5397e94f40944b");
	assert_string_equal(hv, "802de61d4c546aff3ecdd726265a5e82"
				"395852b8eea41966d720fef5b4e923e4");
	assert_string_equal(ho, "3b5a31dc1bbb98fabfdfa7d1debbdbbc"
				"052c840a3211565fb5281fb0eaed33ac");
	for (int t = 0; t < 2; t++) {
		free(v[t]);
		free(out[t]);
	}
	free(a);
	free(spd);
}

/* What eigh_numpy.py wrote to dir/name: len doubles. */
static void read_doubles(const char *dir, const char *name, double *out,
			 size_t len)
{
	size_t got;
	char *data = testlib_read(dir, name, &got);
	assert_int_equal(got, sizeof(double) * len);
	memcpy(out, data, got);
	free(data);
}

static void eig_and_inv_root_match_numpy(void **state)
{
	(void)state;
	if (!testlib_have_numpy())
		SKIP_BECAUSE("no numpy at " TESTLIB_PYTHON
			     " (Debian's python3-numpy)");
	static const struct {
		int n, spd;
		double p, ridge;
	} cases[] = {
		{1, 1, 2, 0},     {2, 0, 2, 1.5}, {5, 1, 4, 0},
		{60, 0, 2, 0.25}, {60, 1, 4, 0},  {60, 1, 3, 1e-3},
		{150, 1, 2, 1e-6}, {150, 0, 1.5, 0.5},
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		int n = cases[c].n;
		size_t nn = (size_t)n * n;
		/* Non-symmetric: both sides take the symmetric part. */
		double *a = cases[c].spd ? random_spd(n, 300 + c, 0.01)
					 : random_matrix(n, 300 + c, 0);
		if (cases[c].spd)
			a[n - 1] += 0.125; /* a[0][n-1]: not symmetric */
		double *w = doubles((size_t)n), *v = doubles(nn);
		double *out = doubles(nn), *s = doubles(nn);
		double *nw = doubles((size_t)n), *nout = doubles(nn);
		for (size_t i = 0; i < (size_t)n; i++)
			for (size_t j = 0; j < (size_t)n; j++)
				s[i * n + j] = (a[i * n + j] + a[j * n + i]) / 2;
		assert_int_equal(apf_sym_eig(w, v, NULL, n, s), 0);
		const char *why = NULL;
		int rc = apf_sym_inv_root(out, &why, n, a, cases[c].p,
					  cases[c].ridge);
		char *dir = testlib_tmpdir();
		testlib_write(dir, "a.bin", a, sizeof(double) * nn, 0644);
		char cmd[4096];
		snprintf(cmd, sizeof cmd,
			 TESTLIB_PYTHON
			 " %s/tests/unit/lib/eigh_numpy.py %s %d %.17g %.17g",
			 testlib_root(), dir, n, cases[c].p, cases[c].ridge);
		assert_int_equal(system(cmd), 0);
		read_doubles(dir, "w.bin", nw, (size_t)n);
		double wtop = max_abs(nw, (size_t)n), werr = 0;
		for (int i = 0; i < n; i++)
			werr = fmax(werr, fabs(w[i] - nw[i]));
		werr /= wtop;
		double rerr = -1;
		/* numpy's root exists exactly when every max(w, 0) + ridge
		 * is positive; with ridge 0 an SPD matrix's are. */
		int rootable = cases[c].ridge > 0 || nw[0] > 0;
		if (rootable) {
			if (rc != 0)
				fail_msg("n %d: inv_root: %s", n, why);
			read_doubles(dir, "root.bin", nout, nn);
			rerr = 0;
			for (size_t i = 0; i < nn; i++)
				rerr = fmax(rerr, fabs(out[i] - nout[i]));
			rerr /= max_abs(nout, nn);
		}
		printf("    n %d p %g ridge %g: eigenvalues %.2g, root %.2g "
		       "(relative to the largest)\n",
		       n, cases[c].p, cases[c].ridge, werr, rerr);
		if (!(werr <= 1e-10 && rerr <= 1e-10))
			fail_msg("n %d: numpy differs: eigenvalues %.3g, "
				 "root %.3g",
				 n, werr, rerr);
		testlib_tmpdir_free(dir);
		free(a);
		free(w);
		free(v);
		free(out);
		free(nw);
		free(nout);
		free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(eig_of_a_diagonal_matrix_is_its_sorted_diagonal),
		cmocka_unit_test(eig_of_a_2x2_matches_its_closed_form),
		cmocka_unit_test(eig_reconstructs_random_symmetric_matrices),
		cmocka_unit_test(eig_handles_repeated_eigenvalues),
		cmocka_unit_test(eig_reads_only_the_lower_triangle),
		cmocka_unit_test(eig_of_zero_and_empty_matrices),
		cmocka_unit_test(inv_root_to_the_p_times_the_matrix_is_identity),
		cmocka_unit_test(inv_root_takes_negative_eigenvalues_as_zero),
		cmocka_unit_test(inv_root_refuses_a_null_space_without_ridge),
		cmocka_unit_test(inv_root_uses_the_symmetric_part),
		cmocka_unit_test(non_finite_input_and_bad_arguments_are_refused),
		cmocka_unit_test(two_calls_give_identical_and_pinned_bits),
		cmocka_unit_test(eig_and_inv_root_match_numpy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
