#!/usr/bin/python3
"""skimage's structural_similarity in numpy, for tests/unit/test_recon.c.

scikit-image is not a Debian dependency of apf, so this follows its
documented algorithm (skimage.metrics.structural_similarity, the defaults
fastMRI's evaluate.ssim uses: win_size 7, uniform filter, K1 0.01, K2 0.03,
use_sample_covariance) step by step: scipy.ndimage.uniform_filter (size 7,
mode 'reflect', i.e. numpy's 'symmetric' padding, one 1-D box filter per
axis) of x, y, x*x, y*y, x*y; variances and covariance scaled by
NP / (NP - 1); the SSIM map; its mean after cropping (7 - 1) // 2 pixels.
Everything in float64.

Usage: ssim_numpy.py DIR N H W. Reads DIR/x.bin and DIR/y.bin (N images of
(H, W) float32 each, y the reference) and DIR/range.bin (N float64
data_range values); writes DIR/ssim.bin (N float64).
"""
import os
import sys

import numpy as np

WIN = 7


def uniform_filter(a):
    r = (WIN - 1) // 2
    out = a
    for axis in range(a.ndim):
        pad = [(0, 0)] * a.ndim
        pad[axis] = (r, r)
        p = np.pad(out, pad, mode="symmetric")
        win = np.lib.stride_tricks.sliding_window_view(p, WIN, axis=axis)
        out = win.mean(axis=-1)
    return out


def structural_similarity(im1, im2, data_range, K1=0.01, K2=0.03):
    im1 = im1.astype(np.float64)
    im2 = im2.astype(np.float64)
    NP = WIN ** im1.ndim
    cov_norm = NP / (NP - 1)
    ux = uniform_filter(im1)
    uy = uniform_filter(im2)
    uxx = uniform_filter(im1 * im1)
    uyy = uniform_filter(im2 * im2)
    uxy = uniform_filter(im1 * im2)
    vx = cov_norm * (uxx - ux * ux)
    vy = cov_norm * (uyy - uy * uy)
    vxy = cov_norm * (uxy - ux * uy)
    C1 = (K1 * data_range) ** 2
    C2 = (K2 * data_range) ** 2
    A1, A2, B1, B2 = (2 * ux * uy + C1, 2 * vxy + C2,
                      ux ** 2 + uy ** 2 + C1, vx + vy + C2)
    S = (A1 * A2) / (B1 * B2)
    pad = (WIN - 1) // 2
    return S[pad:S.shape[0] - pad, pad:S.shape[1] - pad].mean(dtype=np.float64)


def main(d, n, h, w):
    x = np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32).reshape(n, h, w)
    y = np.fromfile(os.path.join(d, "y.bin"), dtype=np.float32).reshape(n, h, w)
    rng = np.fromfile(os.path.join(d, "range.bin"), dtype=np.float64)
    # fastMRI's argument order: the reference (gt) first.
    s = np.array([structural_similarity(y[i], x[i], rng[i]) for i in range(n)],
                 dtype=np.float64)
    s.tofile(os.path.join(d, "ssim.bin"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
