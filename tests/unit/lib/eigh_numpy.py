#!/usr/bin/python3
"""numpy's eigh and the inverse p-th root, for tests/unit/test_linalg.c.

The reference for apf_sym_eig and apf_sym_inv_root (pkg/nn/linalg.h),
computed by LAPACK through numpy, everything in float64: S = (A + A^T) / 2,
its eigenvalues w ascending and eigenvectors V (numpy.linalg.eigh), and
V diag((max(w, 0) + ridge)^(-1/p)) V^T.

Usage: eigh_numpy.py DIR N P RIDGE. Reads DIR/a.bin (N x N float64,
row-major); writes DIR/w.bin (N float64) and DIR/root.bin (N x N float64;
inf or NaN where the root does not exist).
"""
import os
import sys

import numpy as np


def main(d, n, p, ridge):
    a = np.fromfile(os.path.join(d, "a.bin"), dtype=np.float64).reshape(n, n)
    s = (a + a.T) / 2
    w, v = np.linalg.eigh(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (np.maximum(w, 0) + ridge) ** (-1.0 / p)
    root = (v * f) @ v.T
    w.astype(np.float64).tofile(os.path.join(d, "w.bin"))
    root.astype(np.float64).tofile(os.path.join(d, "root.bin"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
         float(sys.argv[4]))
