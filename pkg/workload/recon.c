/*
 * recon.c: fastMRI's SSIM, the k-space row mask and the zero-filled
 * reconstruction (recon.h). Plain loops over small images: a 7x7 window sum
 * per SSIM position and naive O(N^2) DFTs with tabulated twiddles, which at
 * 28x28 cost less than reading the image and leave one obvious summation
 * order to reproduce elsewhere.
 */
#include "workload/recon.h"

#include <math.h>

#include "rng/rng.h"

#define SSIM_WIN 7
#define SSIM_K1 0.01
#define SSIM_K2 0.03

double apf_ssim(const float *x, const float *y, int H, int W, double data_range)
{
	if (H < SSIM_WIN || W < SSIM_WIN || !(data_range > 0))
		return NAN;
	const double np = SSIM_WIN * SSIM_WIN;
	const double cov_norm = np / (np - 1);
	const double c1 = (SSIM_K1 * data_range) * (SSIM_K1 * data_range);
	const double c2 = (SSIM_K2 * data_range) * (SSIM_K2 * data_range);
	double total = 0;
	for (int i = 0; i + SSIM_WIN <= H; i++) {
		for (int j = 0; j + SSIM_WIN <= W; j++) {
			double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
			for (int a = 0; a < SSIM_WIN; a++) {
				const float *xr = x + (size_t)(i + a) * W + j;
				const float *yr = y + (size_t)(i + a) * W + j;
				for (int b = 0; b < SSIM_WIN; b++) {
					double xv = xr[b], yv = yr[b];
					sx += xv;
					sy += yv;
					sxx += xv * xv;
					syy += yv * yv;
					sxy += xv * yv;
				}
			}
			/* skimage: filtered means, then the sample
			 * (co)variances from them. */
			double ux = sx / np, uy = sy / np;
			double uxx = sxx / np, uyy = syy / np, uxy = sxy / np;
			double vx = cov_norm * (uxx - ux * ux);
			double vy = cov_norm * (uyy - uy * uy);
			double vxy = cov_norm * (uxy - ux * uy);
			double a1 = 2 * ux * uy + c1, a2 = 2 * vxy + c2;
			double b1 = ux * ux + uy * uy + c1, b2 = vx + vy + c2;
			total += (a1 * a2) / (b1 * b2);
		}
	}
	return total / ((double)(H - SSIM_WIN + 1) * (W - SSIM_WIN + 1));
}

void apf_kspace_mask(uint8_t *mask, int H, int center, double p_keep,
		     const uint32_t key[2], uint64_t index)
{
	if (center < 0)
		center = 0;
	if (center > H)
		center = H;
	int lo = (center + 1) / 2; /* rows 0..lo-1: k = 0..ceil(c/2)-1 */
	int hi = H - center / 2;   /* rows hi..H-1: k = -floor(c/2)..-1 */
	for (int r = 0; r < H; r++) {
		if (r < lo || r >= hi) {
			mask[r] = 1;
			continue;
		}
		uint32_t w = apf_rng_word(key, index, (uint64_t)r);
		mask[r] = (double)apf_rng_to_uniform(w) < p_keep;
	}
}

/* cos and sin of 2 pi k / n for k in [0, n). */
static void twiddles(double *c, double *s, int n)
{
	for (int k = 0; k < n; k++) {
		double t = 2.0 * M_PI * (double)k / (double)n;
		c[k] = cos(t);
		s[k] = sin(t);
	}
}

/* One 1-D DFT of n complex values at stride `stride`, in place through the
 * scratch tr/ti: out[k] = sum_m in[m] e^(sign 2 pi i m k / n), m ascending.
 * Only the k with out_kept[k] != 0 (all when NULL) are computed; the
 * others are set to 0. Inputs m with in_kept[m] == 0 are known zeros and
 * left out of the sum (NULL: none are). */
static void dft_1d(double *re, double *im, int n, int stride, int sign,
		   const double *c, const double *s, const uint8_t *out_kept,
		   const uint8_t *in_kept, double *tr, double *ti)
{
	for (int m = 0; m < n; m++) {
		tr[m] = re[(size_t)m * stride];
		ti[m] = im[(size_t)m * stride];
	}
	for (int k = 0; k < n; k++) {
		double ar = 0, ai = 0;
		if (!out_kept || out_kept[k]) {
			for (int m = 0; m < n; m++) {
				if (in_kept && !in_kept[m])
					continue;
				int t = (int)(((long)m * k) % n);
				double wr = c[t], wi = sign * s[t];
				ar += tr[m] * wr - ti[m] * wi;
				ai += tr[m] * wi + ti[m] * wr;
			}
		}
		re[(size_t)k * stride] = ar;
		im[(size_t)k * stride] = ai;
	}
}

void apf_kspace_corrupt(float *out, const float *x, int H, int W,
			const uint8_t *mask)
{
	if (H < 1 || W < 1 || H > APF_RECON_MAX || W > APF_RECON_MAX) {
		for (long i = 0; i < (long)H * W; i++)
			out[i] = NAN;
		return;
	}
	double re[APF_RECON_MAX * APF_RECON_MAX];
	double im[APF_RECON_MAX * APF_RECON_MAX];
	double ch[APF_RECON_MAX], sh[APF_RECON_MAX];
	double cw[APF_RECON_MAX], sw[APF_RECON_MAX];
	double tr[APF_RECON_MAX], ti[APF_RECON_MAX];
	twiddles(ch, sh, H);
	twiddles(cw, sw, W);
	for (int i = 0; i < H * W; i++) {
		re[i] = x[i];
		im[i] = 0;
	}
	/* Forward: along W for every row, then along H for every column,
	 * computing only the kept k-space rows. */
	for (int r = 0; r < H; r++)
		dft_1d(re + (size_t)r * W, im + (size_t)r * W, W, 1, -1, cw, sw,
		       NULL, NULL, tr, ti);
	for (int k = 0; k < W; k++)
		dft_1d(re + k, im + k, H, W, -1, ch, sh, mask, NULL, tr, ti);
	/* Inverse: along H (the dropped rows are zeros), then along W. */
	for (int k = 0; k < W; k++)
		dft_1d(re + k, im + k, H, W, 1, ch, sh, NULL, mask, tr, ti);
	for (int r = 0; r < H; r++)
		dft_1d(re + (size_t)r * W, im + (size_t)r * W, W, 1, 1, cw, sw,
		       NULL, NULL, tr, ti);
	const double scale = 1.0 / ((double)H * W);
	for (int i = 0; i < H * W; i++) {
		double a = re[i] * scale, b = im[i] * scale;
		out[i] = (float)sqrt(a * a + b * b);
	}
}
