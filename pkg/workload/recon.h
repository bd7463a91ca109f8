/*
 * recon: the host-side pieces of an image-reconstruction workload in the
 * style of fastMRI, on small single-channel images (28x28 Fashion-MNIST):
 * the metric (fastMRI's SSIM), the corruption (a k-space row mask, as an
 * accelerated MRI scan drops phase-encoding lines) and the zero-filled
 * reconstruction a model starts from.
 *
 * Everything here is pure and deterministic: no allocation, no hidden state,
 * sums in double in a fixed order, randomness only from Philox words
 * addressed by (key, example index), so any example's corruption can be
 * recomputed anywhere (a data loader thread, a CUDA kernel, a test).
 *
 * Images are row-major (H,W) floats; row r is the r-th line along H, and the
 * mask acts on rows of the 2-D DFT, i.e. on the frequency along H.
 */
#ifndef APF_RECON_H
#define APF_RECON_H

#include <stdint.h>

/* The largest H and W apf_kspace_corrupt handles (its buffers are fixed). */
#define APF_RECON_MAX 64

/* SSIM of one single-channel image x against the reference y (H,W floats),
 * as fastMRI's evaluation computes it (skimage structural_similarity with
 * win_size 7, uniform filter, K1 0.01, K2 0.03, data_range given, sample
 * covariance: the window's variances and covariance scaled by
 * N/(N-1), N = 49), averaged over the (H-6)(W-6) window positions that fit
 * inside the image (skimage crops the (7-1)/2 border). Sums in double.
 * Needs H, W >= 7 and data_range > 0; returns NAN otherwise. Symmetric in
 * x and y, and exactly 1 when x == y. */
double apf_ssim(const float *x, const float *y, int H, int W, double data_range);

/* The k-space row mask of example `index` (H entries, 1 kept, 0 dropped):
 * the centre `center` rows (frequencies |k| < center/2 in DFT order, i.e.
 * rows 0..ceil(center/2)-1 and H-floor(center/2)..H-1) always kept, every
 * other row r kept with probability p_keep: kept when
 * apf_rng_to_uniform(apf_rng_word(key, index, r)) < p_keep (the example
 * index is the stream's step, the row its word). center is clamped to
 * [0, H]. */
void apf_kspace_mask(uint8_t *mask, int H, int center, double p_keep,
		     const uint32_t key[2], uint64_t index);

/* The corrupted image: 2-D DFT of x (H,W), rows of k-space not in mask set
 * to 0, inverse DFT, magnitude (the zero-filled reconstruction of
 * accelerated MRI). out (H,W). Computed in double as the same operator
 * along H alone (recon.c: a circular convolution of each column with the
 * inverse DFT of the mask; the W-axis transforms cancel), in a fixed
 * order. Needs 1 <= H, W <= APF_RECON_MAX; out is all NAN otherwise. */
void apf_kspace_corrupt(float *out, const float *x, int H, int W,
			const uint8_t *mask);

#endif
