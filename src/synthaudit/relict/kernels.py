"""Fused CPU kernels for the all-pairs image measures (numba).

Why kernels of our own: a chain of torch operations makes one pass over memory per
operation (difference, absolute value, sum, square, sum, ...), so the all-pairs
MAE/RMSE ran at ~0.8 G voxel pairs/s on 2 cores, bound by memory traffic; a fused loop
does every operation on a voxel while it is in a register. Both kernels are
cache-blocked so that each voxel of a synthetic volume is read from memory once per
*block* of training volumes, not once per pair:

* :func:`error_sums` walks the volumes in chunks of voxels; within a chunk it compares
  every synthetic row with a block of training rows, four training volumes at a time
  (register blocking: one load of a synthetic voxel serves four pairs).
* :func:`ssim_sums` filters the product ``x~ y~`` plane by plane with the separable
  Gaussian taps (11 taps for sigma 1.5: ~33 multiply-adds per voxel instead of the
  ~1,000 a dense banded matrix product spends; the first axis last, from a ring of
  filtered planes) and evaluates the SSIM terms in the same pass over the output row,
  for each synthetic volume against a block of training volumes while that volume's
  planes are in cache.

Precision: differences and products are float32 (a difference of two float32 values
within a factor of two is exact; int16 CT values are exact in float32), summed in
float32 over short runs (one chunk or one row) and then in float64. The SSIM kernel
uses the same float32-rounded weights as the per-volume maps, which keeps the
covariance cancellation exact up to rounding (see ``image_measures``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numba
import numpy as np
from numba import njit, prange

from ..numerics import FASTMATH

# Voxels per chunk in :func:`error_sums`: 32 KiB of float32 per row, so a chunk of the
# synthetic rows plus four training rows stays in L2 while it is used.
ERROR_CHUNK = 8192


@contextlib.contextmanager
def kernel_threads(threads: int | None) -> Iterator[None]:
    """Run numba's parallel loops on ``threads`` threads inside the block (None: unchanged)."""
    if threads is None:
        yield
        return
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def error_sums(synthetic: np.ndarray, training: np.ndarray, chunk: int = ERROR_CHUNK,
               parts: int | None = None, squares: bool = True,
               pairs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``sum |s - t|`` and ``sum (s - t)^2`` of every (synthetic, training) row pair, float64.

    The voxels are split into ``parts`` contiguous ranges (default: 4 per thread) that
    the threads take in parallel, each walking its range in cache-sized chunks; the
    partial sums are added at the end. So each voxel of both sets is read from memory
    once per call, and the result does not depend on the number of threads.

    Args:
        synthetic: (S, N) float32 array (flattened volumes), C-contiguous.
        training: (T, N) float32 array, C-contiguous. (Convert compact types such as
            int16 once per block beforehand: a conversion inside the loop does not
            vectorise and costs more than the extra pass.)
        chunk: Voxels per chunk (cache blocking).
        parts: Voxel ranges summed separately (fixed for reproducible sums).
        squares: Also sum the squares (False: MAE only, ~1/3 less arithmetic; the
            second array is then zeros).
        pairs: Optional (S, T) mask of the pairs wanted (the shortlist search,
            ``relict.search``); a group of four training volumes is skipped for a
            synthetic volume that wants none of them. Pairs not wanted hold 0 or a
            value; the caller discards them. None: every pair.
    """
    n_vox, n_train = synthetic.shape[1], training.shape[0]
    if pairs is None:
        pairs = np.ones((synthetic.shape[0], n_train), np.uint8)
    pairs = np.ascontiguousarray(pairs, dtype=np.uint8)
    if pairs.shape != (synthetic.shape[0], n_train):
        raise ValueError(f"pairs has shape {pairs.shape}, expected {(synthetic.shape[0], n_train)}")
    if n_train % 4:
        # Pad to whole groups of four: every pair then goes through the same (vectorised)
        # code path, so its value does not depend on its position in the block, i.e. on
        # how the training set is sharded or blocked.
        padded = np.zeros((n_train + 4 - n_train % 4, n_vox), training.dtype)
        padded[:n_train] = training
        wanted = np.zeros((synthetic.shape[0], padded.shape[0]), np.uint8)
        wanted[:, :n_train] = pairs
        abs_sum, sq_sum = error_sums(synthetic, padded, chunk, parts, squares, wanted)
        return abs_sum[:, :n_train], sq_sum[:, :n_train]
    if parts is None:
        parts = max(1, min(16, n_vox // chunk))
    abs_parts = np.zeros((parts, synthetic.shape[0], training.shape[0]))
    sq_parts = np.zeros_like(abs_parts)
    _error_parts(synthetic, training, abs_parts, sq_parts, chunk, squares, pairs)
    return abs_parts.sum(axis=0), sq_parts.sum(axis=0)


@njit(fastmath=FASTMATH, cache=True, inline="always")
def _quad_abs(x, b0, b1, b2, b3):  # pragma: no cover - compiled
    """Sums of |x - b_i| over four 1D runs (1D slices: numba then emits plain vector loads)."""
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    for v in range(x.shape[0]):
        xv = x[v]
        a0 += abs(xv - b0[v])
        a1 += abs(xv - b1[v])
        a2 += abs(xv - b2[v])
        a3 += abs(xv - b3[v])
    return a0, a1, a2, a3


@njit(fastmath=FASTMATH, cache=True, inline="always")
def _quad_abs_sq(x, b0, b1, b2, b3):  # pragma: no cover - compiled
    """Sums of |x - b_i| and (x - b_i)^2 over four 1D runs."""
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    q0 = np.float32(0.0)
    q1 = np.float32(0.0)
    q2 = np.float32(0.0)
    q3 = np.float32(0.0)
    for v in range(x.shape[0]):
        xv = x[v]
        d0 = xv - b0[v]
        d1 = xv - b1[v]
        d2 = xv - b2[v]
        d3 = xv - b3[v]
        a0 += abs(d0)
        a1 += abs(d1)
        a2 += abs(d2)
        a3 += abs(d3)
        q0 += d0 * d0
        q1 += d1 * d1
        q2 += d2 * d2
        q3 += d3 * d3
    return a0, a1, a2, a3, q0, q1, q2, q3


@njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True)
def _error_parts(synthetic, training, abs_out, sq_out, chunk, squares, pairs):  # pragma: no cover - compiled
    """Voxel range ``p`` of the parts in parallel; within it, cache-sized chunks."""
    n_parts = abs_out.shape[0]
    n_syn, n_vox = synthetic.shape
    n_quad = training.shape[0]  # a multiple of 4 (see error_sums)
    per_part = (n_vox + n_parts - 1) // n_parts
    for p in prange(n_parts):
        lo = p * per_part
        hi = min(lo + per_part, n_vox)
        for v0 in range(lo, hi, chunk):
            v1 = min(v0 + chunk, hi)
            for s in range(n_syn):
                x = synthetic[s, v0:v1]
                for t in range(0, n_quad, 4):
                    if pairs[s, t] + pairs[s, t + 1] + pairs[s, t + 2] + pairs[s, t + 3] == 0:
                        continue
                    b0, b1 = training[t, v0:v1], training[t + 1, v0:v1]
                    b2, b3 = training[t + 2, v0:v1], training[t + 3, v0:v1]
                    if squares:
                        r = _quad_abs_sq(x, b0, b1, b2, b3)
                        for i in range(4):
                            abs_out[p, s, t + i] += r[i]
                            sq_out[p, s, t + i] += r[4 + i]
                    else:
                        r4 = _quad_abs(x, b0, b1, b2, b3)
                        for i in range(4):
                            abs_out[p, s, t + i] += r4[i]


def ssim_sums(x_shifted, x_cross, x_mean, x_alpha, x_beta,
              y_shifted, y_cross, y_mean, y_alpha, y_beta,
              weights, c1, c2k, out, pairs=None) -> None:
    """Add the sum over the interior of the SSIM map of every (x, y) pair to ``out``.

    Dispatches to :func:`_ssim_sums_11` for the 11-tap window of skimage's default
    (sigma 1.5, truncate 3.5), whose taps are written out so that every pass is one
    long vectorised loop, and to :func:`_ssim_sums_generic` for other windows. The two
    filter in a different order and form B1 differently (float32 rounding apart, the
    same sums: 1e-6 relative in the tests). Arguments as :func:`_ssim_sums_generic`;
    the 11-tap path does not read the ``alpha`` maps. ``pairs``: optional (S, T) mask
    of the pairs to compute (the shortlist search); the others are left as they are.
    """
    if pairs is None:
        pairs = np.ones(out.shape, np.uint8)
    pairs = np.ascontiguousarray(pairs, dtype=np.uint8)
    if pairs.shape != out.shape:
        raise ValueError(f"pairs has shape {pairs.shape}, expected {out.shape}")
    if weights.shape[0] == 11 and all(a.flags.c_contiguous for a in (x_shifted, y_shifted)):
        taps = tuple(np.float32(w) for w in weights)
        _ssim_sums_11(x_shifted, x_cross, x_mean, x_beta, y_shifted, y_cross, y_mean, y_beta, taps, c1, c2k, out,
                      pairs)
    else:
        _ssim_sums_generic(x_shifted, x_cross, x_mean, x_alpha, x_beta, y_shifted, y_cross, y_mean, y_alpha,
                           y_beta, weights, c1, c2k, out, pairs)


@njit(fastmath=FASTMATH, cache=True, inline="always", error_model="numpy")
def _fir11(src, step, dst, n, w):  # pragma: no cover - compiled
    """``dst[v] = sum_b w[b] src[v + b step]`` for v < n (11 taps; 1D slices: plain vector loads)."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10 = w
    a0 = src[:n]
    a1 = src[step:step + n]
    a2 = src[2 * step:2 * step + n]
    a3 = src[3 * step:3 * step + n]
    a4 = src[4 * step:4 * step + n]
    a5 = src[5 * step:5 * step + n]
    a6 = src[6 * step:6 * step + n]
    a7 = src[7 * step:7 * step + n]
    a8 = src[8 * step:8 * step + n]
    a9 = src[9 * step:9 * step + n]
    a10 = src[10 * step:10 * step + n]
    for v in range(n):
        dst[v] = (w0 * a0[v] + w1 * a1[v] + w2 * a2[v] + w3 * a3[v] + w4 * a4[v] + w5 * a5[v] + w6 * a6[v]
                  + w7 * a7[v] + w8 * a8[v] + w9 * a9[v] + w10 * a10[v])


@njit(fastmath=FASTMATH, cache=True, inline="always", error_model="numpy")
def _ring11(ring, i, dst, n, w):  # pragma: no cover - compiled
    """``dst[v] = sum_a w[a] ring[(i + a) % 11][v]`` for v < n: the first axis over a ring of 11 planes."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10 = w
    a0, a1, a2, a3 = ring[i % 11], ring[(i + 1) % 11], ring[(i + 2) % 11], ring[(i + 3) % 11]
    a4, a5, a6, a7 = ring[(i + 4) % 11], ring[(i + 5) % 11], ring[(i + 6) % 11], ring[(i + 7) % 11]
    a8, a9, a10 = ring[(i + 8) % 11], ring[(i + 9) % 11], ring[(i + 10) % 11]
    for v in range(n):
        dst[v] = (w0 * a0[v] + w1 * a1[v] + w2 * a2[v] + w3 * a3[v] + w4 * a4[v] + w5 * a5[v] + w6 * a6[v]
                  + w7 * a7[v] + w8 * a8[v] + w9 * a9[v] + w10 * a10[v])


@njit(fastmath=FASTMATH, cache=True, inline="always", error_model="numpy")
def _ssim_terms(q, xc, yc, xm, ym, xb, yb, c1f, c2f):  # pragma: no cover - compiled
    """Sum over one output row of ``a1 a2 / den`` (float32; error_model numpy: the division vectorises).

    ``B1 = mu_x^2 + mu_y^2 + C1`` is formed here from the means rather than read from
    the ``alpha`` maps: one map fewer per side to stream from memory (these terms are
    bound by that traffic; the kernel 15-20 % faster at NCCT size). B1 is a sum of positive terms,
    so forming it in float32 costs float32 rounding (~1e-7 relative), nothing more.
    """
    part = np.float32(0.0)
    for k in range(q.shape[0]):
        a2 = q[k] - xc[k] * yc[k] + c2f
        a1 = np.float32(2.0) * xm[k] * ym[k] + c1f
        den = (xm[k] * xm[k] + ym[k] * ym[k] + c1f) * (xb[k] + yb[k])
        part += a1 * a2 / den
    return part


@njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True, error_model="numpy")
def _ssim_sums_11(x_shifted, x_cross, x_mean, x_beta, y_shifted, y_cross, y_mean, y_beta,
                  w, c1, c2k, out, pairs):  # pragma: no cover - compiled
    """:func:`_ssim_sums_generic` for 11 taps (``w`` a tuple of 11 float32), passes as flat loops.

    Schedule, per synthetic volume (parallel) and input plane ``p``, for each training
    volume of the block: the product plane ``x~ y~`` (one multiply per voxel), the
    second axis, then the last axis, into slot ``p % 11`` of that training volume's
    ring of 11 filtered planes; once 11 planes are in the ring, the first axis combines
    them into output plane ``p - 10`` and the SSIM terms follow. Filtering the first
    axis last, from the ring, reads 11 filtered planes per output plane instead of the
    22 raw planes (11 of each volume) that filtering it first needs, and each product is
    formed once instead of 11 times: 10 % faster at NCCT size. The ring (4 x 11 planes,
    6.7 MB per thread at NCCT size) lives in L3.

    Each pass runs over a whole plane as one 1D loop (the second-axis pass reads rows
    ``b`` rows apart, the last-axis pass neighbours; it also fills the 10 columns
    between rows, which are never read), so loops are long and vectorise.
    """
    n_syn, nx, ny, nz = x_shifted.shape
    n_train = y_shifted.shape[0]
    r2 = 10
    oy, oz = ny - r2, nz - r2
    c1f = np.float32(c1)
    c2f = np.float32(c2k)
    n1 = ny * nz
    n2 = oy * nz
    n3 = n2 - r2
    for s in prange(n_syn):
        product = np.empty(n1, np.float32)
        p2 = np.empty(n2, np.float32)
        p3 = np.empty(n2, np.float32)
        ring = np.empty((n_train, 11, n2), np.float32)
        x = x_shifted[s].ravel()
        for p in range(nx):
            xp = x[p * n1:(p + 1) * n1]
            for t in range(n_train):
                if pairs[s, t] == 0:
                    continue
                yp = y_shifted[t].ravel()[p * n1:(p + 1) * n1]
                for v in range(n1):
                    product[v] = xp[v] * yp[v]
                _fir11(product, nz, p2, n2, w)
                _fir11(p2, 1, ring[t, p % 11], n3, w)
                if p >= r2:
                    i = p - r2
                    _ring11(ring[t], i, p3, n3, w)
                    row = 0.0
                    for j in range(oy):
                        row += _ssim_terms(p3[j * nz:j * nz + oz], x_cross[s, i, j], y_cross[t, i, j],
                                           x_mean[s, i, j], y_mean[t, i, j], x_beta[s, i, j], y_beta[t, i, j],
                                           c1f, c2f)
                    out[s, t] += row


@njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True)
def _ssim_sums_generic(x_shifted, x_cross, x_mean, x_alpha, x_beta,
                       y_shifted, y_cross, y_mean, y_alpha, y_beta,
                       weights, c1, c2k, out, pairs):  # pragma: no cover - compiled
    """Add the sum over the interior of the SSIM map of every (x, y) pair to ``out`` (any window).

    Per voxel: ``(2 mu_x mu_y + C1) (G'(x~ y~) - cross_x cross_y + C2/k) /
    ((alpha_x + alpha_y) (beta_x + beta_y))`` (notation of ``image_measures._SSIM``).

    Args:
        x_shifted: (S, X, Y, Z) float32 shifted synthetic volumes (image_measures._shift_of).
        x_cross, x_mean, x_alpha, x_beta: (S, X-2r, Y-2r, Z-2r) float32 per-volume maps.
        y_*: the same for a block of training volumes (leading axis T).
        weights: (2r+1,) float32 Gaussian taps.
        c1, c2k: C1 and C2 / k.
        out: (S, T) float64 sums.
    """
    n_syn, nx, ny, nz = x_shifted.shape
    n_train = y_shifted.shape[0]
    taps = weights.shape[0]
    r2 = taps - 1
    ox, oy, oz = nx - r2, ny - r2, nz - r2
    c1f = np.float32(c1)
    c2f = np.float32(c2k)
    for s in prange(n_syn):
        p1 = np.empty((ny, nz), np.float32)
        p2 = np.empty((oy, nz), np.float32)
        p3 = np.empty(oz, np.float32)
        for i in range(ox):
            for t in range(n_train):
                if pairs[s, t] == 0:
                    continue
                # pass 1 (first axis): weighted sum of the products of 2r+1 planes
                w = weights[0]
                for j in range(ny):
                    for k in range(nz):
                        p1[j, k] = w * (x_shifted[s, i, j, k] * y_shifted[t, i, j, k])
                for a in range(1, taps):
                    w = weights[a]
                    for j in range(ny):
                        for k in range(nz):
                            p1[j, k] += w * (x_shifted[s, i + a, j, k] * y_shifted[t, i + a, j, k])
                # pass 2 (second axis)
                for j in range(oy):
                    for k in range(nz):
                        p2[j, k] = weights[0] * p1[j, k]
                    for b in range(1, taps):
                        w = weights[b]
                        for k in range(nz):
                            p2[j, k] += w * p1[j + b, k]
                # pass 3 (last axis), then the SSIM terms of the output row
                row = 0.0
                for j in range(oy):
                    for k in range(oz):
                        p3[k] = weights[0] * p2[j, k]
                    for c in range(1, taps):
                        w = weights[c]
                        for k in range(oz):
                            p3[k] += w * p2[j, k + c]
                    part = np.float32(0.0)
                    for k in range(oz):
                        a2 = p3[k] - x_cross[s, i, j, k] * y_cross[t, i, j, k] + c2f
                        a1 = np.float32(2.0) * x_mean[s, i, j, k] * y_mean[t, i, j, k] + c1f
                        den = (x_alpha[s, i, j, k] + y_alpha[t, i, j, k]) * (x_beta[s, i, j, k] + y_beta[t, i, j, k])
                        part += a1 * a2 / den
                    row += part
                out[s, t] += row


@njit(parallel=True, fastmath=False, cache=True, nogil=True)
def ssim_moments(shifted, shift, weights, gain, c1, c2, cov_norm, k, cross, mean, alpha, beta):  # pragma: no cover
    """Per-volume SSIM maps of one shifted float32 volume (image_measures._shift_of), filtered in float64.

    The same maps as ``image_measures._SSIM.moments`` (which runs three dense banded
    matrix products per map, ~20x the arithmetic of the 11 taps): ``cross =
    G'(x~) / sqrt(g)``, ``mean = G'(x~) / g + shift``, ``alpha = mean^2 + C1/2``,
    ``beta = (cn var + C2/2) / k``. fastmath is off: the float64 sums must round as
    written so that ``var = G'(x~^2)/g - (G'(x~)/g)^2`` keeps its precision.

    Args:
        shifted: (X, Y, Z) float32 volume minus its shift.
        shift: the shift (float64).
        weights: (2r+1,) float64 taps (float32-rounded values).
        gain: total weight of the 3D filter.
        c1, c2, cov_norm, k: SSIM constants (see ``_SSIM``).
        cross, mean, alpha, beta: (X-2r, Y-2r, Z-2r) float32 outputs.
    """
    nx, ny, nz = shifted.shape
    taps = weights.shape[0]
    r2 = taps - 1
    ox, oy, oz = nx - r2, ny - r2, nz - r2
    root = np.sqrt(gain)
    for i in prange(ox):
        p1 = np.zeros((ny, nz))
        q1 = np.zeros((ny, nz))
        for a in range(taps):
            w = weights[a]
            for j in range(ny):
                for kk in range(nz):
                    v = np.float64(shifted[i + a, j, kk])
                    p1[j, kk] += w * v
                    q1[j, kk] += w * (v * v)
        p2 = np.zeros((oy, nz))
        q2 = np.zeros((oy, nz))
        for j in range(oy):
            for b in range(taps):
                w = weights[b]
                for kk in range(nz):
                    p2[j, kk] += w * p1[j + b, kk]
                    q2[j, kk] += w * q1[j + b, kk]
        p3 = np.empty(oz)
        q3 = np.empty(oz)
        for j in range(oy):
            for kk in range(oz):
                p3[kk] = 0.0
                q3[kk] = 0.0
            for c in range(taps):
                w = weights[c]
                for kk in range(oz):
                    p3[kk] += w * p2[j, kk + c]
                    q3[kk] += w * q2[j, kk + c]
            for kk in range(oz):
                m = p3[kk] / gain
                var = q3[kk] / gain - m * m
                mu = m + shift
                cross[i, j, kk] = p3[kk] / root
                mean[i, j, kk] = mu
                alpha[i, j, kk] = mu * mu + c1 / 2
                beta[i, j, kk] = (var * cov_norm + c2 / 2) / k
