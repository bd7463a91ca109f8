/*
 * test_recon.c: the image-reconstruction pieces (workload/recon.h). SSIM:
 * exactly 1 on identical images, symmetric, the closed form on constant
 * images, an independent two-pass double implementation on an 8x8 pair,
 * falling as noise grows, and skimage's algorithm written in numpy
 * (tests/unit/lib/ssim_numpy.py; skipped when numpy is absent). The row
 * mask: centre rows always kept, the others at p_keep over 2000 examples,
 * a pure function of (key, index). The corruption: the identity (as a
 * magnitude) with every row kept, a single pixel's closed form, the column
 * mean when only the DC row survives, Parseval against a direct 2-D
 * DFT of the kept rows, and the bits of a cos and sin per term.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "rng/rng.h"
#include "workload/recon.h"

#define PYTHON "/usr/bin/python3"

static const uint32_t mask_key[2] = {0x9e3779b9u, 0x7f4a7c15u};

/* A Fashion-MNIST-like test image in [0, 1]: a smooth blob with texture. */
static void test_image(float *x, int H, int W, uint64_t seed, float noise)
{
	apf_rng_key k = {seed, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	for (int i = 0; i < H; i++) {
		for (int j = 0; j < W; j++) {
			double di = (i - 0.45 * H) / (0.3 * H);
			double dj = (j - 0.55 * W) / (0.25 * W);
			double v = 0.8 * exp(-(di * di + dj * dj)) +
				   noise * apf_rng_uniform(&r);
			x[i * W + j] = (float)v;
		}
	}
}

static void ssim_of_an_image_with_itself_is_one(void **state)
{
	(void)state;
	static const int sizes[4][2] = {{28, 28}, {7, 7}, {9, 13}, {64, 31}};
	float x[64 * 64];
	for (int s = 0; s < 4; s++) {
		int H = sizes[s][0], W = sizes[s][1];
		test_image(x, H, W, 10 + (uint64_t)s, 0.3f);
		double v = apf_ssim(x, x, H, W, 1.0);
		if (fabs(v - 1.0) > 1e-12)
			fail_msg("%dx%d: SSIM(x, x) = %.17g", H, W, v);
	}
}

static void ssim_is_symmetric_and_checks_its_arguments(void **state)
{
	(void)state;
	float x[28 * 28], y[28 * 28];
	test_image(x, 28, 28, 1, 0.3f);
	test_image(y, 28, 28, 2, 0.5f);
	double a = apf_ssim(x, y, 28, 28, 1.0), b = apf_ssim(y, x, 28, 28, 1.0);
	assert_true(a > -1 && a < 1);
	assert_true(fabs(a - b) <= 1e-15);
	assert_true(isnan(apf_ssim(x, y, 6, 28, 1.0)));
	assert_true(isnan(apf_ssim(x, y, 28, 6, 1.0)));
	assert_true(isnan(apf_ssim(x, y, 28, 28, 0.0)));
}

static void ssim_of_constant_images_is_the_luminance_term(void **state)
{
	(void)state;
	float x[10 * 12], y[10 * 12];
	for (int i = 0; i < 10 * 12; i++) {
		x[i] = 0.25f;
		y[i] = 0.5f;
	}
	/* Zero variances: SSIM = (2ab + C1) / (a^2 + b^2 + C1). */
	for (int t = 0; t < 2; t++) {
		double R = t ? 2.0 : 1.0, c1 = (0.01 * R) * (0.01 * R);
		double want = (2 * 0.25 * 0.5 + c1) /
			      (0.25 * 0.25 + 0.5 * 0.5 + c1);
		double got = apf_ssim(x, y, 10, 12, R);
		if (fabs(got - want) > 1e-12)
			fail_msg("R %g: SSIM %.17g, want %.17g", R, got, want);
	}
	/* One bright pixel at the corner changes only the window at (0, 0):
	 * there y is flat (no covariance), x has 48 pixels of 0.25 and one of
	 * 1, so SSIM = lum * C2 / (vx + C2); the other 23 windows keep the
	 * closed form above. */
	x[0] = 1.0f;
	double c1 = 0.0001, c2 = 0.0009;
	double flat = (2 * 0.25 * 0.5 + c1) / (0.25 * 0.25 + 0.5 * 0.5 + c1);
	double mx = 13.0 / 49.0;
	double vx = (48 * (0.25 - mx) * (0.25 - mx) + (1 - mx) * (1 - mx)) / 48;
	double corner = (2 * mx * 0.5 + c1) / (mx * mx + 0.25 + c1) * c2 /
			(vx + c2);
	double want = (23 * flat + corner) / 24;
	double got = apf_ssim(x, y, 10, 12, 1.0);
	if (fabs(got - want) > 1e-12)
		fail_msg("corner pixel: SSIM %.17g, want %.17g", got, want);
}

/* SSIM of one 7x7 window at (i, j), two-pass: the means first, then the
 * centred sums of squares and products over N - 1, then the product of the
 * luminance and contrast-structure terms. */
static double window_ssim_two_pass(const double *x, const double *y, int W,
				   int i, int j, double R)
{
	double mx = 0, my = 0;
	for (int a = 0; a < 7; a++)
		for (int b = 0; b < 7; b++) {
			mx += x[(i + a) * W + j + b];
			my += y[(i + a) * W + j + b];
		}
	mx /= 49;
	my /= 49;
	double sxx = 0, syy = 0, sxy = 0;
	for (int a = 0; a < 7; a++)
		for (int b = 0; b < 7; b++) {
			double dx = x[(i + a) * W + j + b] - mx;
			double dy = y[(i + a) * W + j + b] - my;
			sxx += dx * dx;
			syy += dy * dy;
			sxy += dx * dy;
		}
	double vx = sxx / 48, vy = syy / 48, cxy = sxy / 48;
	double c1 = 0.0001 * R * R, c2 = 0.0009 * R * R;
	double lum = (2 * mx * my + c1) / (mx * mx + my * my + c1);
	double cs = (2 * cxy + c2) / (vx + vy + c2);
	return lum * cs;
}

static void ssim_of_8x8_matches_a_two_pass_reference(void **state)
{
	(void)state;
	/* Integer-valued pixels (exact in float) of a small edge and ramp. */
	float xf[64], yf[64];
	double xd[64], yd[64];
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++) {
			int v = (j < 4 ? 20 : 200) + 3 * i;
			int u = (j < 5 ? 30 : 180) + ((i * 7 + j * 3) % 11);
			xf[i * 8 + j] = (float)v;
			yf[i * 8 + j] = (float)u;
			xd[i * 8 + j] = v;
			yd[i * 8 + j] = u;
		}
	double want = 0;
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			want += window_ssim_two_pass(xd, yd, 8, i, j, 255.0);
	want /= 4;
	double got = apf_ssim(xf, yf, 8, 8, 255.0);
	printf("    8x8: SSIM %.15f, two-pass reference %.15f\n", got, want);
	assert_true(want > 0.1 && want < 0.99);
	if (fabs(got - want) > 1e-10)
		fail_msg("SSIM %.17g, reference %.17g", got, want);
}

static void ssim_falls_as_noise_grows(void **state)
{
	(void)state;
	float x[28 * 28], y[28 * 28], n[28 * 28];
	test_image(x, 28, 28, 3, 0.0f);
	apf_rng_key k = {4, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	for (int i = 0; i < 28 * 28; i++)
		n[i] = apf_rng_normal(&r);
	static const float sigma[6] = {0.0f, 0.01f, 0.03f, 0.1f, 0.3f, 1.0f};
	double prev = 2;
	for (int s = 0; s < 6; s++) {
		for (int i = 0; i < 28 * 28; i++)
			y[i] = x[i] + sigma[s] * n[i];
		double v = apf_ssim(y, x, 28, 28, 0.8);
		printf("    sigma %.2f: SSIM %.6f\n", sigma[s], v);
		if (!(v < prev))
			fail_msg("sigma %g: SSIM %.9g not below %.9g", sigma[s],
				 v, prev);
		prev = v;
	}
	assert_true(prev < 0.2);
}

static void ssim_matches_skimages_algorithm(void **state)
{
	(void)state;
	if (!testlib_have_numpy())
		SKIP_BECAUSE("no numpy at " PYTHON " (Debian's python3-numpy)");
	enum { N = 6 };
	static const int sizes[3][2] = {{28, 28}, {7, 9}, {16, 11}};
	for (int s = 0; s < 3; s++) {
		int H = sizes[s][0], W = sizes[s][1];
		float *x = malloc(sizeof(float) * N * H * W);
		float *y = malloc(sizeof(float) * N * H * W);
		double range[N], got[N];
		assert_non_null(x);
		assert_non_null(y);
		for (int e = 0; e < N; e++) {
			float *xe = x + (size_t)e * H * W, *ye = y + (size_t)e * H * W;
			test_image(ye, H, W, 100 + (uint64_t)e, 0.2f);
			test_image(xe, H, W, 200 + (uint64_t)e, 0.1f * e);
			/* fastMRI's data_range: the reference's maximum. */
			float m = ye[0];
			for (int i = 1; i < H * W; i++)
				m = ye[i] > m ? ye[i] : m;
			range[e] = m;
			got[e] = apf_ssim(xe, ye, H, W, range[e]);
		}
		char *dir = testlib_tmpdir();
		testlib_write(dir, "x.bin", x, sizeof(float) * N * H * W, 0644);
		testlib_write(dir, "y.bin", y, sizeof(float) * N * H * W, 0644);
		testlib_write(dir, "range.bin", range, sizeof range, 0644);
		char cmd[4096];
		snprintf(cmd, sizeof cmd,
			 PYTHON " %s/tests/unit/lib/ssim_numpy.py %s %d %d %d",
			 testlib_root(), dir, N, H, W);
		assert_int_equal(system(cmd), 0);
		char *p = apf_path_join(dir, "ssim.bin");
		FILE *f = fopen(p, "rb");
		assert_non_null(f);
		double want[N];
		assert_int_equal(fread(want, sizeof(double), N, f), N);
		fclose(f);
		free(p);
		for (int e = 0; e < N; e++) {
			if (fabs(got[e] - want[e]) > 1e-12)
				fail_msg("%dx%d #%d: SSIM %.17g, numpy %.17g", H,
					 W, e, got[e], want[e]);
		}
		printf("    %dx%d: %d pairs agree with numpy to 1e-12 "
		       "(SSIM %.4f .. %.4f)\n",
		       H, W, N, got[N - 1], got[0]);
		testlib_tmpdir_free(dir);
		free(x);
		free(y);
	}
}

static void mask_keeps_the_centre_and_samples_the_rest(void **state)
{
	(void)state;
	enum { H = 28, EXAMPLES = 2000 };
	uint8_t m[H], again[H], first[H];
	static const int centers[4] = {4, 5, 1, 0};
	for (int c = 0; c < 4; c++) {
		int center = centers[c];
		int lo = (center + 1) / 2, hi = H - center / 2;
		long kept = 0, others = 0, differ = 0;
		for (uint64_t e = 0; e < EXAMPLES; e++) {
			apf_kspace_mask(m, H, center, 0.25, mask_key, e);
			for (int r = 0; r < H; r++) {
				assert_true(m[r] == 0 || m[r] == 1);
				if (r < lo || r >= hi) {
					assert_int_equal(m[r], 1);
				} else {
					others++;
					kept += m[r];
				}
			}
			apf_kspace_mask(again, H, center, 0.25, mask_key, e);
			assert_memory_equal(m, again, H);
			if (e == 0)
				memcpy(first, m, H);
			else
				differ += memcmp(first, m, H) != 0;
		}
		double frac = (double)kept / (double)others;
		printf("    centre %d: %ld of %ld other rows kept (%.4f)\n",
		       center, kept, others, frac);
		assert_int_equal(others, (long)EXAMPLES * (H - center));
		assert_true(fabs(frac - 0.25) < 0.01);
		assert_true(differ > EXAMPLES * 9 / 10);
	}
	/* The centre rows of an even and an odd count, spelled out. */
	apf_kspace_mask(m, 8, 4, 0.0, mask_key, 7);
	static const uint8_t want4[8] = {1, 1, 0, 0, 0, 0, 1, 1};
	assert_memory_equal(m, want4, 8);
	apf_kspace_mask(m, 8, 3, 0.0, mask_key, 7);
	static const uint8_t want3[8] = {1, 1, 0, 0, 0, 0, 0, 1};
	assert_memory_equal(m, want3, 8);
	apf_kspace_mask(m, 8, 3, 1.0, mask_key, 7);
	for (int r = 0; r < 8; r++)
		assert_int_equal(m[r], 1);
	apf_kspace_mask(m, 8, 99, 0.0, mask_key, 7);
	for (int r = 0; r < 8; r++)
		assert_int_equal(m[r], 1);
	/* The mask is Philox's words of (key, step = index, word = row). */
	apf_kspace_mask(m, H, 0, 0.5, mask_key, 1234);
	for (int r = 0; r < H; r++) {
		float u = apf_rng_to_uniform(apf_rng_word(mask_key, 1234,
							  (uint64_t)r));
		assert_int_equal(m[r], u < 0.5f);
	}
	/* Another key, another mask. */
	const uint32_t other[2] = {mask_key[0] ^ 1u, mask_key[1]};
	apf_kspace_mask(again, H, 0, 0.5, other, 1234);
	assert_true(memcmp(m, again, H) != 0);
}

static void corrupt_with_every_row_kept_is_the_magnitude(void **state)
{
	(void)state;
	static const int sizes[3][2] = {{28, 28}, {12, 20}, {64, 64}};
	static float x[64 * 64], out[64 * 64];
	uint8_t all[64];
	memset(all, 1, sizeof all);
	for (int s = 0; s < 3; s++) {
		int H = sizes[s][0], W = sizes[s][1];
		test_image(x, H, W, 30 + (uint64_t)s, 0.4f);
		for (int i = 0; i < H * W; i += 3)
			x[i] -= 0.5f; /* some negatives: out is |x| */
		apf_kspace_corrupt(out, x, H, W, all);
		double worst = 0;
		for (int i = 0; i < H * W; i++) {
			double e = fabs(out[i] - fabsf(x[i]));
			worst = e > worst ? e : worst;
		}
		printf("    %dx%d: every row kept, within %.2g of |x|\n", H, W,
		       worst);
		assert_true(worst < 1e-5);
	}
	/* Out of range sizes give NANs, not a silent image. */
	apf_kspace_corrupt(out, x, 65, 2, all);
	assert_true(isnan(out[0]) && isnan(out[129]));
}

static void corrupt_of_a_single_pixel_has_its_closed_form(void **state)
{
	(void)state;
	enum { H = 28, W = 20, R0 = 5, C0 = 13 };
	float x[H * W], out[H * W];
	memset(x, 0, sizeof x);
	x[R0 * W + C0] = 1.0f;
	uint8_t m[H];
	apf_kspace_mask(m, H, 4, 0.3, mask_key, 42);
	/* k-space of a unit pixel is e^(-2 pi i (ky r0 / H + kx c0 / W)); the
	 * masked inverse is nonzero only in column c0, where row r is
	 * |(1/H) sum over kept ky of e^(2 pi i ky (r - r0) / H)|. */
	apf_kspace_corrupt(out, x, H, W, m);
	int nkept = 0;
	for (int k = 0; k < H; k++)
		nkept += m[k];
	assert_true(nkept > 4 && nkept < H);
	for (int r = 0; r < H; r++) {
		double re = 0, im = 0;
		for (int k = 0; k < H; k++) {
			if (!m[k])
				continue;
			double t = 2 * M_PI * k * (r - R0) / H;
			re += cos(t);
			im += sin(t);
		}
		double want = sqrt(re * re + im * im) / H;
		for (int c = 0; c < W; c++) {
			double w = c == C0 ? want : 0;
			if (fabs(out[r * W + c] - w) > 1e-6)
				fail_msg("(%d, %d): %.9g, want %.9g", r, c,
					 out[r * W + c], w);
		}
	}
	assert_true(fabs(out[R0 * W + C0] - (double)nkept / H) < 1e-6);
	/* Only the DC row kept: every row of column c0 is 1/H. */
	apf_kspace_mask(m, H, 1, 0.0, mask_key, 0);
	apf_kspace_corrupt(out, x, H, W, m);
	for (int r = 0; r < H; r++)
		assert_true(fabs(out[r * W + C0] - 1.0 / H) < 1e-7);
}

static void corrupt_with_the_dc_row_alone_is_the_column_mean(void **state)
{
	(void)state;
	enum { H = 16, W = 9 };
	float x[H * W], out[H * W];
	test_image(x, H, W, 50, 0.5f);
	for (int i = 0; i < H * W; i += 2)
		x[i] = -x[i];
	uint8_t m[H];
	apf_kspace_mask(m, H, 1, 0.0, mask_key, 3);
	apf_kspace_corrupt(out, x, H, W, m);
	for (int c = 0; c < W; c++) {
		double s = 0;
		for (int r = 0; r < H; r++)
			s += x[r * W + c];
		for (int r = 0; r < H; r++)
			assert_true(fabs(out[r * W + c] - fabs(s / H)) < 1e-6);
	}
}

static void corrupt_keeps_parsevals_energy_of_the_kept_rows(void **state)
{
	(void)state;
	static const int sizes[2][2] = {{28, 28}, {12, 20}};
	float x[28 * 28], out[28 * 28];
	uint8_t m[28];
	for (int s = 0; s < 2; s++) {
		int H = sizes[s][0], W = sizes[s][1];
		test_image(x, H, W, 60 + (uint64_t)s, 0.5f);
		apf_kspace_mask(m, H, 4, 0.25, mask_key, 9 + (uint64_t)s);
		apf_kspace_corrupt(out, x, H, W, m);
		/* A direct 2-D DFT of the kept rows, angles from cos/sin. */
		double kspace = 0, image = 0, recon = 0;
		for (int ky = 0; ky < H; ky++) {
			if (!m[ky])
				continue;
			for (int kx = 0; kx < W; kx++) {
				double re = 0, im = 0;
				for (int r = 0; r < H; r++)
					for (int c = 0; c < W; c++) {
						double t = -2 * M_PI *
							   ((double)ky * r / H +
							    (double)kx * c / W);
						re += x[r * W + c] * cos(t);
						im += x[r * W + c] * sin(t);
					}
				kspace += re * re + im * im;
			}
		}
		kspace /= (double)H * W;
		for (int i = 0; i < H * W; i++) {
			image += (double)x[i] * x[i];
			recon += (double)out[i] * out[i];
		}
		printf("    %dx%d: energy %.6f of %.6f, kept rows' k-space "
		       "%.6f\n",
		       H, W, recon, image, kspace);
		assert_true(recon <= image);
		assert_true(recon < 0.999 * image); /* something was dropped */
		assert_true(fabs(recon - kspace) < 1e-5 * kspace);
	}
}

/* The corruption as every recorded run computed it: cos and sin called
 * for each (row, frequency) term. */
static void corrupt_ref(float *out, const float *x, int H, int W,
			const uint8_t *mask)
{
	double pr[APF_RECON_MAX], pi[APF_RECON_MAX];
	for (int d = 0; d < H; d++) {
		double a = 0, b = 0;
		for (int k = 0; k < H; k++) {
			if (!mask[k])
				continue;
			int t = (int)(((long)k * d) % H);
			double th = 2.0 * M_PI * (double)t / (double)H;
			a += cos(th);
			b += sin(th);
		}
		pr[d] = a / H;
		pi[d] = b / H;
	}
	for (int r = 0; r < H; r++) {
		double zr[APF_RECON_MAX] = {0}, zi[APF_RECON_MAX] = {0};
		for (int m = 0; m < H; m++) {
			int d = (r - m + H) % H;
			for (int c = 0; c < W; c++) {
				zr[c] += pr[d] * x[m * W + c];
				zi[c] += pi[d] * x[m * W + c];
			}
		}
		for (int c = 0; c < W; c++)
			out[r * W + c] =
				(float)sqrt(zr[c] * zr[c] + zi[c] * zi[c]);
	}
}

/* The angles are computed once an image now (a table of H): the bits are
 * those of a cos and a sin per term, on every size up to the largest,
 * with many masks. */
static void corrupt_gives_the_recorded_bits(void **state)
{
	(void)state;
	float x[APF_RECON_MAX * APF_RECON_MAX];
	float out[APF_RECON_MAX * APF_RECON_MAX];
	float want[APF_RECON_MAX * APF_RECON_MAX];
	uint8_t m[APF_RECON_MAX];
	for (int H = 1; H <= APF_RECON_MAX; H += 3)
		for (int i = 0; i < 8; i++) {
			int W = 1 + (H * 7 + i * 5) % APF_RECON_MAX;
			test_image(x, H, W, 100 + (uint64_t)(H * 8 + i), 0.5f);
			apf_kspace_mask(m, H, H < 4 ? 1 : 4, 0.3, mask_key,
					(uint64_t)(H * 8 + i));
			apf_kspace_corrupt(out, x, H, W, m);
			corrupt_ref(want, x, H, W, m);
			if (memcmp(out, want, (size_t)H * W * sizeof *out))
				fail_msg("%dx%d, image %d: not the bits of a "
					 "cos and sin per term",
					 H, W, i);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ssim_of_an_image_with_itself_is_one),
		cmocka_unit_test(ssim_is_symmetric_and_checks_its_arguments),
		cmocka_unit_test(ssim_of_constant_images_is_the_luminance_term),
		cmocka_unit_test(ssim_of_8x8_matches_a_two_pass_reference),
		cmocka_unit_test(ssim_falls_as_noise_grows),
		cmocka_unit_test(ssim_matches_skimages_algorithm),
		cmocka_unit_test(mask_keeps_the_centre_and_samples_the_rest),
		cmocka_unit_test(corrupt_with_every_row_kept_is_the_magnitude),
		cmocka_unit_test(corrupt_of_a_single_pixel_has_its_closed_form),
		cmocka_unit_test(corrupt_with_the_dc_row_alone_is_the_column_mean),
		cmocka_unit_test(corrupt_keeps_parsevals_energy_of_the_kept_rows),
		cmocka_unit_test(corrupt_gives_the_recorded_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
