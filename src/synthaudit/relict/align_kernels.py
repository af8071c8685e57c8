"""Fused CPU kernels for the full-resolution step of the coarse-to-fine alignment (numba).

Why: at RELICT's n = 50 every synthetic volume is aligned to its 50 candidates at 1 mm,
and the full-resolution step then dominates the aligned ratio. Profiled on the NCCT bench
cohort (one synthetic volume x 50 candidates, 182 x 218 x 182, 2 cores), 17.3 s per
synthetic volume went to: the shift descent's dot products and the summed-area tables
of the moved volumes (~5 s: one pass over memory per shift, a padded copy of every
volume), the error sums of the shifted volume (~3.5 s: a shifted copy, then a float32
difference and two reductions, one pass each) and the 2 mm block means of the
candidates (~2.3 s). Each kernel here makes one pass:

* :func:`shift_ssd` sums ``(a(x - d) - t(x))^2`` for several integer shifts d in one
  sweep over the planes of t (the planes of a that a shift reads stay in cache), with no
  padding and no summed-area table, and without the cancellation of
  ``|a|^2 + |t|^2 - 2 <a, t>``.
* :func:`shifted_error_sums` gives ``sum |a_s - t|`` and ``sum (a_s - t)^2`` of ``a``
  shifted by a real-valued vector ``s`` as :func:`~synthaudit.relict.alignment._linear_shift`
  computes it (separable linear interpolation, axis 0 then 1 then 2, float32, zero where
  the source leaves the grid): the same float32 values voxel by voxel, never written out.
* :func:`block_mean_fast`: block means summed in float64.

Sums: float32 over one row (vectorised), then float64 per plane, then the planes in
order, so a result does not depend on the number of threads.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numba import njit, prange

from ..numerics import FASTMATH

from .kernels import kernel_threads


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _row_sq(x):  # pragma: no cover - compiled
    r = np.float32(0.0)
    for k in range(x.shape[0]):
        r += x[k] * x[k]
    return r


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _row_diff_sq(x, y):  # pragma: no cover - compiled
    """sum (x - y)^2 of two equal-length rows (slices: indices from 0, so the loop vectorises)."""
    r = np.float32(0.0)
    for k in range(x.shape[0]):
        v = x[k] - y[k]
        r += v * v
    return r


@njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True)
def _shift_ssd_planes(a, t, shifts, out):  # pragma: no cover - compiled
    n0, n1, n2 = t.shape
    m = shifts.shape[0]
    for i in prange(n0):
        acc = np.zeros(m)
        for j in range(n1):
            t_row = t[i, j]
            full = -1.0  # sum t^2 of the row, when some shift needs it whole
            for s in range(m):
                d0, d1, d2 = shifts[s, 0], shifts[s, 1], shifts[s, 2]
                si, sj = i - d0, j - d1
                k_lo, k_hi = max(0, d2), min(n2, n2 + d2)
                if si < 0 or si >= n0 or sj < 0 or sj >= n1 or k_lo >= k_hi:
                    # the source row leaves the grid: a(x - d) = 0 along it
                    if full < 0:
                        full = _row_sq(t_row)
                    acc[s] += full
                else:
                    acc[s] += (_row_sq(t_row[:k_lo]) + _row_diff_sq(a[si, sj, k_lo - d2:k_hi - d2], t_row[k_lo:k_hi])
                               + _row_sq(t_row[k_hi:]))
        for s in range(m):
            out[s, i] = acc[s]


def shift_ssd(a: np.ndarray, t: np.ndarray, shifts: Sequence[Sequence[int]], threads: int | None = None
              ) -> np.ndarray:
    """``sum_x (a(x - d) - t(x))^2`` for each integer shift ``d`` (rows of ``shifts``), float64.

    ``a(x - d)`` is 0 where ``x - d`` leaves the grid, as
    :func:`~synthaudit.relict.alignment._integer_shift` pads. Both volumes float32, same shape.
    """
    a = np.ascontiguousarray(a, np.float32)
    t = np.ascontiguousarray(t, np.float32)
    if a.shape != t.shape or a.ndim != 3:
        raise ValueError(f"shift_ssd needs two 3D volumes of one shape, got {a.shape} and {t.shape}")
    d = np.ascontiguousarray(np.asarray(shifts, np.int64).reshape(-1, 3))
    out = np.zeros((len(d), t.shape[0]))
    with kernel_threads(threads):
        _shift_ssd_planes(a, t, d, out)
    return out.sum(axis=1)


@njit(cache=True, inline="always")
def _axis_tested(src, dst, n, i0, wa, wb, lo, hi, start, stop):  # pragma: no cover - compiled
    """:func:`_axis_row` for x in [start, stop), each term's source tested."""
    for x in range(start, stop):
        r = np.float32(0.0)
        if lo <= x < hi:
            xa = x - i0
            if wa != 0 and 0 <= xa < n:
                r = wa * src[xa]
            xb = xa - 1
            if wb != 0 and 0 <= xb < n:
                r = r + wb * src[xb]
        dst[x] = r


@njit(cache=True, inline="always")
def _axis_row(src, dst, n, i0, wa, wb, lo, hi):  # pragma: no cover - compiled
    """One axis of :func:`_linear_shift` along a row: dst[x] = wa src[x - i0] (+) wb src[x - i0 - 1],
    terms whose source leaves [0, n) left out (a zero weight too), 0 outside [lo, hi).

    Where every term's source is inside ([x0, x1)), one loop over slices indexed from 0 (vectorised:
    no test per voxel; the same products and sum in the same order); the ends tested voxel by voxel."""
    x0 = max(lo, i0 + (1 if wb != 0 else 0), 0)
    x1 = min(hi, n + i0, n)
    if wa == 0 or x0 >= x1:
        _axis_tested(src, dst, n, i0, wa, wb, lo, hi, 0, n)
        return
    _axis_tested(src, dst, n, i0, wa, wb, lo, hi, 0, x0)
    ua = src[x0 - i0:x1 - i0]
    out = dst[x0:x1]
    if wb != 0:
        ub = src[x0 - i0 - 1:x1 - i0 - 1]
        for k in range(x1 - x0):
            out[k] = wa * ua[k] + wb * ub[k]
    else:
        for k in range(x1 - x0):
            out[k] = wa * ua[k]
    _axis_tested(src, dst, n, i0, wa, wb, lo, hi, x1, n)


@njit(cache=True, inline="always")
def _combine(u, v, out, n, wa, wb, ok_a, ok_b, keep):  # pragma: no cover - compiled
    """out = wa u (+) wb v elementwise (terms with a zero weight or a source outside the grid
    left out), or 0 when the output row itself is outside the kept range: one branch-free loop
    per case (vectorised), the same products and sum in the same order."""
    use_a = keep and wa != 0 and ok_a
    use_b = keep and wb != 0 and ok_b
    if use_a and use_b:
        for x in range(n):
            out[x] = wa * u[x] + wb * v[x]
    elif use_a:
        for x in range(n):
            out[x] = wa * u[x]
    elif use_b:
        for x in range(n):
            out[x] = np.float32(0.0) + wb * v[x]
    else:
        for x in range(n):
            out[x] = np.float32(0.0)


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _row_errors(row, t_row):  # pragma: no cover - compiled
    """sum |row - t_row| and sum (row - t_row)^2 in float32 (vectorised), for a float64 total."""
    ra = np.float32(0.0)
    rq = np.float32(0.0)
    for x in range(row.shape[0]):  # both rows from index 0: vectorised
        d = row[x] - t_row[x]
        ra += abs(d)
        rq += d * d
    return ra, rq


@njit(cache=True, inline="always")
def _shifted_row(a, x0, x1, ints, was, wbs, los, his, moved, a_ok, b_ok, keep0, r00, r01, r1, r2,
                 reuse=False):  # pragma: no cover
    """Row (x0, x1) of ``a`` shifted as :func:`~synthaudit.relict.alignment._linear_shift` (axis 0, then 1,
    then 2, float32), into ``r2`` (``r00``, ``r01``, ``r1``: scratch rows). ``reuse``: ``r01`` already
    holds the axis-0 row at y = x1 - i1 - 1 (the caller's ``r00`` of row x1 - 1, swapped in), so each
    axis-0 row is computed once along a plane, not twice."""
    n0, n1, n2 = a.shape
    # axis 1 needs the axis-0 result at rows y = x1 - i1 and x1 - i1 - 1
    for which in range(2):
        y = x1 - ints[1] - which if moved[1] else x1
        dst = r00 if which == 0 else r01
        if y < 0 or y >= n1 or (which == 1 and reuse):
            continue
        if moved[0]:
            _combine(a[x0 - ints[0] if a_ok else 0, y], a[x0 - ints[0] - 1 if b_ok else 0, y], dst, n2,
                     was[0], wbs[0], a_ok, b_ok, keep0)
        else:
            for x in range(n2):
                dst[x] = a[x0, y, x]
        if not moved[1]:
            break
    if moved[1]:
        ya, yb = x1 - ints[1], x1 - ints[1] - 1
        _combine(r00, r01, r1, n2, was[1], wbs[1], 0 <= ya < n1, 0 <= yb < n1, los[1] <= x1 < his[1])
    else:
        for x in range(n2):
            r1[x] = r00[x]
    if moved[2]:
        _axis_row(r1, r2, n2, ints[2], was[2], wbs[2], los[2], his[2])
    else:
        for x in range(n2):
            r2[x] = r1[x]


# No fastmath here: the interpolation must round as numpy's float32 operations do (no fused
# multiply-adds), so the shifted values are _linear_shift's, bit for bit.
@njit(parallel=True, cache=True, nogil=True)
def _shifted_error_planes(a, t, ints, was, wbs, los, his, moved, abs_out, sq_out):  # pragma: no cover
    n0, n1, n2 = t.shape
    for x0 in prange(n0):
        r00 = np.empty(n2, np.float32)  # axis-0 rows at y = x1 - i1 and x1 - i1 - 1
        r01 = np.empty(n2, np.float32)
        r1 = np.empty(n2, np.float32)
        r2 = np.empty(n2, np.float32)
        keep0 = los[0] <= x0 < his[0]
        a_ok = 0 <= x0 - ints[0] < n0
        b_ok = 0 <= x0 - ints[0] - 1 < n0
        pa = 0.0
        pq = 0.0
        for x1 in range(n1):
            if x1 > 0:  # row x1 - 1's axis-0 row at y is this row's at y - 1
                r00, r01 = r01, r00
            _shifted_row(a, x0, x1, ints, was, wbs, los, his, moved, a_ok, b_ok, keep0, r00, r01, r1, r2, x1 > 0)
            ra, rq = _row_errors(r2, t[x0, x1])
            pa += ra
            pq += rq
        abs_out[x0] = pa
        sq_out[x0] = pq


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _row_errors_where(row, m_row, t_row, level):  # pragma: no cover - compiled
    """:func:`_row_errors` over the voxels where ``m_row`` reaches ``level``, and their count."""
    ra = np.float32(0.0)
    rq = np.float32(0.0)
    c = 0
    for x in range(row.shape[0]):
        if m_row[x] >= level:
            d = row[x] - t_row[x]
            ra += abs(d)
            rq += d * d
            c += 1
    return ra, rq, c


@njit(parallel=True, cache=True, nogil=True)
def _masked_error_planes(a, o, t, ints, was, wbs, los, his, moved, level, abs_out, sq_out, n_out):  # pragma: no cover
    n0, n1, n2 = t.shape
    for x0 in prange(n0):
        r00 = np.empty(n2, np.float32)
        r01 = np.empty(n2, np.float32)
        r1 = np.empty(n2, np.float32)
        r2 = np.empty(n2, np.float32)
        m2 = np.empty(n2, np.float32)
        o00 = np.empty(n2, np.float32)  # the ones-volume's axis-0 rows
        o01 = np.empty(n2, np.float32)
        keep0 = los[0] <= x0 < his[0]
        a_ok = 0 <= x0 - ints[0] < n0
        b_ok = 0 <= x0 - ints[0] - 1 < n0
        pa = 0.0
        pq = 0.0
        pn = 0
        for x1 in range(n1):
            if x1 > 0:  # as in _shifted_error_planes, for each of the two volumes
                r00, r01 = r01, r00
                o00, o01 = o01, o00
            _shifted_row(o, x0, x1, ints, was, wbs, los, his, moved, a_ok, b_ok, keep0, o00, o01, r1, m2, x1 > 0)
            _shifted_row(a, x0, x1, ints, was, wbs, los, his, moved, a_ok, b_ok, keep0, r00, r01, r1, r2, x1 > 0)
            ra, rq, c = _row_errors_where(r2, m2, t[x0, x1], level)
            pa += ra
            pq += rq
            pn += c
        abs_out[x0] = pa
        sq_out[x0] = pq
        n_out[x0] = pn


def linear_shift_axis(s: float, n: int) -> tuple[int, np.float32, int, int]:
    """One axis of a linear shift by ``s`` voxels over ``n``: out(x) = (1 - f) u(x - i) + f u(x - i - 1)
    with ``i = floor(s)``, ``f = s - i`` (float32), kept for x in [lo, hi) (source inside [0, n - 1]).
    Shared by :func:`~synthaudit.relict.alignment._linear_shift` and :func:`shifted_error_sums`, so
    both shift alike."""
    i = math.floor(s)
    return i, np.float32(s - i), max(0, math.ceil(s)), max(0, min(n, math.floor(n - 1 + s) + 1))


def _shift_plan(shift: Sequence[float], shape: Sequence[int]):
    """The per-axis arrays of :func:`_shifted_row` for a shift by ``shift`` voxels over ``shape``."""
    ints = np.zeros(3, np.int64)
    was = np.ones(3, np.float32)
    wbs = np.zeros(3, np.float32)
    los = np.zeros(3, np.int64)
    his = np.asarray(shape, np.int64).copy()
    moved = np.zeros(3, np.bool_)
    for k, s in enumerate(shift):
        if float(s) == 0:
            continue
        i, f, lo, hi = linear_shift_axis(float(s), shape[k])
        moved[k] = True
        ints[k] = i
        was[k], wbs[k] = np.float32(1) - f, f
        los[k], his[k] = lo, hi
    return ints, was, wbs, los, his, moved


def _two_volumes(a: np.ndarray, t: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    a = np.ascontiguousarray(a, np.float32)
    t = np.ascontiguousarray(t, np.float32)
    if a.shape != t.shape or a.ndim != 3:
        raise ValueError(f"{name} needs two 3D volumes of one shape, got {a.shape} and {t.shape}")
    return a, t


def shifted_error_sums(a: np.ndarray, t: np.ndarray, shift: Sequence[float], threads: int | None = None
                       ) -> tuple[float, float]:
    """``(sum |a_s - t|, sum (a_s - t)^2)``, with ``a_s`` the volume ``a`` shifted by ``shift``
    (voxels, real-valued) exactly as :func:`~synthaudit.relict.alignment._linear_shift`
    computes it (an integer shift: as :func:`~synthaudit.relict.alignment._integer_shift`).

    Each axis with a non-zero shift s interpolates out(x) = (1 - f) u(x - i) + f u(x - i - 1)
    (i = floor(s), f = s - i, float32, the terms in that order) and sets out(x) = 0 where
    x - s lies outside [0, n - 1]; axis 0 first, then 1, then 2.
    """
    a, t = _two_volumes(a, t, "shifted_error_sums")
    abs_out = np.zeros(a.shape[0])
    sq_out = np.zeros(a.shape[0])
    with kernel_threads(threads):
        _shifted_error_planes(a, t, *_shift_plan(shift, a.shape), abs_out, sq_out)
    return float(abs_out.sum()), float(sq_out.sum())


def masked_error_sums(a: np.ndarray, inside: np.ndarray, t: np.ndarray, shift: Sequence[float], level: float,
                      threads: int | None = None) -> tuple[float, float, int]:
    """:func:`shifted_error_sums` over the voxels where ``inside`` shifted alike reaches ``level``, and
    their count: ``(sum |a_s - t|, sum (a_s - t)^2, n)`` over ``inside_s >= level``.

    Why: a rotated candidate's overlap is its rotated ones-volume shifted with it
    (:func:`~synthaudit.relict.alignment.overlap`); writing out both shifted volumes and indexing
    with the mask took about a third of the 1.5 mm head CT's alignment (issue 47). The shifted
    values are :func:`_linear_shift`'s, bit for bit, as in :func:`shifted_error_sums`."""
    a, t = _two_volumes(a, t, "masked_error_sums")
    o, _ = _two_volumes(inside, t, "masked_error_sums")
    abs_out = np.zeros(a.shape[0])
    sq_out = np.zeros(a.shape[0])
    n_out = np.zeros(a.shape[0], np.int64)
    with kernel_threads(threads):
        _masked_error_planes(a, o, t, *_shift_plan(shift, a.shape), np.float32(level), abs_out, sq_out, n_out)
    return float(abs_out.sum()), float(sq_out.sum()), int(n_out.sum())


@njit(parallel=True, cache=True, nogil=True)
def _block_sums(v, factor, c0, c1, c2, out):  # pragma: no cover - compiled
    s0, s1, s2 = out.shape
    for b0 in prange(s0):
        acc = np.zeros((s1, s2))
        for u in range(factor):
            i = c0 + b0 * factor + u
            for j in range(s1 * factor):
                b1 = j // factor
                row = v[i, c1 + j]
                for b2 in range(s2):
                    base = c2 + b2 * factor
                    for w in range(factor):
                        acc[b1, b2] += row[base + w]
        for b1 in range(s1):
            for b2 in range(s2):
                out[b0, b1, b2] = acc[b1, b2]


def block_mean_fast(volume: np.ndarray, factor: int, crop_start: Sequence[int], threads: int | None = None
                    ) -> np.ndarray:
    """Means over ``factor``^3 blocks starting at ``crop_start``, summed in float64, as float32:
    :func:`~synthaudit.relict.alignment.block_mean`'s blocks (its values to float32 rounding),
    one pass instead of a six-dimensional reduction (~5x faster at 182 x 218 x 182)."""
    v = np.ascontiguousarray(volume, np.float32)
    shape = tuple(n // factor for n in v.shape)
    out = np.empty(shape)
    with kernel_threads(threads):
        _block_sums(v, int(factor), int(crop_start[0]), int(crop_start[1]), int(crop_start[2]), out)
    return (out / float(factor) ** 3).astype(np.float32)


@njit(cache=True, inline="always")
def _trilinear(v, x, y, z, h0, h1, h2):  # pragma: no cover - compiled
    """``v`` at the point (x, y, z) inside [0, h]^3 by trilinear interpolation (float64 arithmetic), the
    upper neighbours clamped to the grid: :func:`affine_linear`'s and :func:`affine_error_sums`'s value."""
    fx, fy, fz = math.floor(x), math.floor(y), math.floor(z)
    ix, iy, iz = int(fx), int(fy), int(fz)
    tx, ty, tz = x - fx, y - fy, z - fz
    jx, jy, jz = min(ix + 1, h0), min(iy + 1, h1), min(iz + 1, h2)
    c00 = v[ix, iy, iz] * (1.0 - tz) + v[ix, iy, jz] * tz
    c01 = v[ix, jy, iz] * (1.0 - tz) + v[ix, jy, jz] * tz
    c10 = v[jx, iy, iz] * (1.0 - tz) + v[jx, iy, jz] * tz
    c11 = v[jx, jy, iz] * (1.0 - tz) + v[jx, jy, jz] * tz
    c0 = c00 * (1.0 - ty) + c01 * ty
    c1 = c10 * (1.0 - ty) + c11 * ty
    return c0 * (1.0 - tx) + c1 * tx


@njit(parallel=True, cache=True, nogil=True)
def _affine_linear(v, m, off, out):  # pragma: no cover - compiled
    n0, n1, n2 = v.shape
    o0, o1, o2 = out.shape
    h0, h1, h2 = n0 - 1, n1 - 1, n2 - 1
    for i in prange(o0):
        for j in range(o1):
            b0 = m[0, 0] * i + m[0, 1] * j + off[0]
            b1 = m[1, 0] * i + m[1, 1] * j + off[1]
            b2 = m[2, 0] * i + m[2, 1] * j + off[2]
            for k in range(o2):
                x = b0 + m[0, 2] * k
                y = b1 + m[1, 2] * k
                z = b2 + m[2, 2] * k
                if x < 0.0 or y < 0.0 or z < 0.0 or x > h0 or y > h1 or z > h2:
                    out[i, j, k] = 0.0
                    continue
                out[i, j, k] = _trilinear(v, x, y, z, h0, h1, h2)


def affine_linear(volume: np.ndarray, matrix: np.ndarray, offset: Sequence[float], threads: int | None = None
                  ) -> np.ndarray:
    """``scipy.ndimage.affine_transform(volume, matrix, offset, order=1, mode="constant", cval=0)``
    in float32: out(o) = volume(M o + offset) by trilinear interpolation (float64 arithmetic),
    0 where M o + offset leaves [0, n - 1] on any axis.

    Why: SciPy's generic resampler was the coarse-to-fine search's largest remaining cost at
    1 mm (0.13 s per 182 x 218 x 182 rotation on 2 threads, 16-20 rotations per synthetic
    volume). Agrees with SciPy to float32 rounding (tested), not bit for bit, so only the
    coarse-to-fine path uses it; the demo's full-resolution search keeps SciPy's.
    """
    v = np.ascontiguousarray(volume, np.float32)
    out = np.empty(v.shape, np.float32)
    with kernel_threads(threads):
        _affine_linear(v, np.ascontiguousarray(matrix, np.float64), np.ascontiguousarray(offset, np.float64), out)
    return out


@njit(parallel=True, cache=True, nogil=True)
def _lk_planes(a, t, centre, sp, shift, out):  # pragma: no cover - compiled
    n0, n1, n2 = a.shape
    for i in prange(n0):
        acc = np.zeros(27)
        v = np.empty(6)
        p0 = (i - centre[0]) * sp[0] - shift[0]
        i_lo, i_hi = max(i - 1, 0), min(i + 1, n0 - 1)
        for j in range(n1):
            p1 = (j - centre[1]) * sp[1] - shift[1]
            j_lo, j_hi = max(j - 1, 0), min(j + 1, n1 - 1)
            for k in range(n2):
                p2 = (k - centre[2]) * sp[2] - shift[2]
                k_lo, k_hi = max(k - 1, 0), min(k + 1, n2 - 1)
                # np.gradient, edge_order 1: central differences inside, one-sided at the faces
                g0 = (np.float64(a[i_hi, j, k]) - np.float64(a[i_lo, j, k])) / ((i_hi - i_lo) * sp[0])
                g1 = (np.float64(a[i, j_hi, k]) - np.float64(a[i, j_lo, k])) / ((j_hi - j_lo) * sp[1])
                g2 = (np.float64(a[i, j, k_hi]) - np.float64(a[i, j, k_lo])) / ((k_hi - k_lo) * sp[2])
                v[0] = p1 * g2 - p2 * g1
                v[1] = p2 * g0 - p0 * g2
                v[2] = p0 * g1 - p1 * g0
                v[3] = g0
                v[4] = g1
                v[5] = g2
                r = np.float64(a[i, j, k]) - np.float64(t[i, j, k])
                c = 0
                for u in range(6):
                    for w in range(u, 6):
                        acc[c] += v[u] * v[w]
                        c += 1
                    acc[21 + u] -= v[u] * r
        out[i] = acc


def lk_normal_equations(moved: np.ndarray, target: np.ndarray, centre: Sequence[float], spacing: Sequence[float],
                        shift: Sequence[float], threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss-Newton system ``(J^T J, J^T r)`` of :func:`~synthaudit.relict.alignment.refine_rigid` in one
    pass: per voxel p the gradient g of ``moved`` (np.gradient's, edge order 1, in mm), the Jacobian row
    -((p - c - d) x g, g) and the residual r = moved - target, all float64.

    Why: refine_rigid built the (voxels x 6) Jacobian with NumPy, a gradient volume and a cross product
    per iteration, about half of the joint refinement of the closest pairs, the largest per-volume cost
    of the 1.5 mm head CT's alignment after the coarse stage was pruned (issue 47). Planes are summed in
    order: the result does not depend on the thread count."""
    a, t = _two_volumes(moved, target, "lk_normal_equations")
    if min(a.shape) < 2:
        raise ValueError(f"lk_normal_equations needs at least 2 voxels per axis, got {a.shape}")
    out = np.zeros((a.shape[0], 27))
    with kernel_threads(threads):
        _lk_planes(a, t, np.asarray(centre, np.float64), np.asarray(spacing, np.float64),
                   np.asarray(shift, np.float64), out)
    tot = out.sum(axis=0)
    h = np.empty((6, 6))
    c = 0
    for u in range(6):
        for w in range(u, 6):
            h[u, w] = h[w, u] = tot[c]
            c += 1
    return h, tot[21:].copy()


@njit(parallel=True, cache=True, nogil=True)
def _affine_error_planes(v, t, m, off, abs_out, sq_out, n_out):  # pragma: no cover - compiled
    n0, n1, n2 = v.shape
    h0, h1, h2 = n0 - 1, n1 - 1, n2 - 1
    for i in prange(n0):
        pa = 0.0
        pq = 0.0
        pn = 0
        for j in range(n1):
            ra = np.float32(0.0)
            rq = np.float32(0.0)
            b0 = m[0, 0] * i + m[0, 1] * j + off[0]
            b1 = m[1, 0] * i + m[1, 1] * j + off[1]
            b2 = m[2, 0] * i + m[2, 1] * j + off[2]
            for k in range(n2):
                x = b0 + m[0, 2] * k
                y = b1 + m[1, 2] * k
                z = b2 + m[2, 2] * k
                if x < 0.0 or y < 0.0 or z < 0.0 or x > h0 or y > h1 or z > h2:
                    continue  # outside the moved volume's data: not compared
                d = np.float32(_trilinear(v, x, y, z, h0, h1, h2)) - t[i, j, k]
                ra += abs(d)
                rq += d * d
                pn += 1
            pa += ra
            pq += rq
        abs_out[i] = pa
        sq_out[i] = pq
        n_out[i] = pn


def affine_error_sums(volume: np.ndarray, t: np.ndarray, matrix: np.ndarray, offset: Sequence[float],
                      threads: int | None = None) -> tuple[float, float, int]:
    """``(sum |w - t|, sum (w - t)^2, n)`` over the voxels where :func:`affine_linear`'s warp ``w`` of
    ``volume`` has data (its source point inside the grid), without writing ``w`` or a mask out.

    Why: the joint refinement's pairs were measured by warping the volume and a ones-volume (the
    overlap: :func:`affine_linear` gives a ones-volume exactly 1 where the source lies inside and 0
    elsewhere) and indexing with the mask, three passes over the full grid for each of the closest
    pairs (issue 47). The warped values are :func:`affine_linear`'s, float32; rows summed in
    float32, then float64."""
    v, t = _two_volumes(volume, t, "affine_error_sums")
    abs_out = np.zeros(v.shape[0])
    sq_out = np.zeros(v.shape[0])
    n_out = np.zeros(v.shape[0], np.int64)
    with kernel_threads(threads):
        _affine_error_planes(v, t, np.ascontiguousarray(matrix, np.float64), np.ascontiguousarray(offset, np.float64),
                             abs_out, sq_out, n_out)
    return float(abs_out.sum()), float(sq_out.sum()), int(n_out.sum())
