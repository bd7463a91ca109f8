/*
 * recon.c: fastMRI's SSIM, the k-space row mask and the zero-filled
 * reconstruction (recon.h). Plain loops over small images: a 7x7 window sum
 * per SSIM position, and the reconstruction as one circular convolution per
 * column, with one obvious summation order to reproduce elsewhere.
 */
#include "workload/recon.h"

#include <math.h>

#include "rng/rng.h"

/* Two doubles: one SSE2 register (GCC's vector extension). */
typedef double recon_v2 __attribute__((vector_size(2 * sizeof(double))));

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

/* Dropping rows of k-space acts along H alone: the W-axis transform and
 * its inverse cancel, so each column c of the image is filtered by itself,
 *
 *     z[r, c] = sum_m p[(r - m) mod H] x[m, c],
 *     p[d] = (1/H) sum_{k kept} e^(2 pi i k d / H),
 *
 * a circular convolution with the kernel p of the kept frequencies (the
 * inverse DFT of the mask), and the output is |z|. That is the zero-filled
 * reconstruction of the 2-D DFT with those rows zeroed, exactly, at H^2 W
 * multiply-adds instead of the transforms' H W (H + W) complex ones. */
void apf_kspace_corrupt(float *out, const float *x, int H, int W,
			const uint8_t *mask)
{
	if (H < 1 || W < 1 || H > APF_RECON_MAX || W > APF_RECON_MAX) {
		for (long i = 0; i < (long)H * W; i++)
			out[i] = NAN;
		return;
	}
	/* The H angles 2 pi t / H, each computed once: the sums below take
	 * the same values in the same order as calling cos and sin for each
	 * (k, d) did (H^2 calls an image, most of a batch's time). */
	double ct[APF_RECON_MAX], st[APF_RECON_MAX];
	for (int t = 0; t < H; t++) {
		double th = 2.0 * M_PI * (double)t / (double)H;
		ct[t] = cos(th);
		st[t] = sin(th);
	}
	double pr[APF_RECON_MAX], pi[APF_RECON_MAX];
	for (int d = 0; d < H; d++) {
		double a = 0, b = 0;
		for (int k = 0; k < H; k++) {
			if (!mask[k])
				continue;
			int t = (int)(((long)k * d) % H);
			a += ct[t];
			b += st[t];
		}
		pr[d] = a / H;
		pi[d] = b / H;
	}
	/* Each output's two sums over m ascending, each term a product then
	 * a sum (contraction is off); four columns at a time as two vectors
	 * of two doubles (SSE2's width, which every x86-64 build has), which
	 * changes which sums run side by side, not their order. */
	for (int r = 0; r < H; r++) {
		int c = 0;
		for (; c + 4 <= W; c += 4) {
			recon_v2 ar0 = {0, 0}, ar1 = ar0, ai0 = ar0, ai1 = ar0;
			for (int m = 0; m < H; m++) {
				int d = (r - m + H) % H;
				const float *xm = x + (size_t)m * W + c;
				recon_v2 x0 = {xm[0], xm[1]}, x1 = {xm[2], xm[3]};
				recon_v2 vr = {pr[d], pr[d]}, vi = {pi[d], pi[d]};
				ar0 += vr * x0;
				ar1 += vr * x1;
				ai0 += vi * x0;
				ai1 += vi * x1;
			}
			recon_v2 n0 = ar0 * ar0 + ai0 * ai0,
				 n1 = ar1 * ar1 + ai1 * ai1;
			float *o = out + (size_t)r * W + c;
			o[0] = (float)sqrt(n0[0]);
			o[1] = (float)sqrt(n0[1]);
			o[2] = (float)sqrt(n1[0]);
			o[3] = (float)sqrt(n1[1]);
		}
		for (; c < W; c++) {
			double zr = 0, zi = 0;
			for (int m = 0; m < H; m++) {
				int d = (r - m + H) % H;
				double xm = x[(size_t)m * W + c];
				zr += pr[d] * xm;
				zi += pi[d] * xm;
			}
			out[(size_t)r * W + c] = (float)sqrt(zr * zr + zi * zi);
		}
	}
}
