"""The augmentation group and the transforms: the search space from params, a found transform, block means,
the background level, and applying a transform (integer and linear shifts, flips, rotations)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import fft as sfft

from ..geometry import axis_rotation, rigid_warp, rotate
from ..geometry import rotvec_matrix as _rotvec_matrix


@dataclass(frozen=True)
class SearchSpace:
    """The augmentation group searched (params.yaml ``relict.alignment.search``).

    flip_axes: every subset of these voxel axes is tried (axis 0 is left-right on the MNI grid).
    max_shift_mm: translations up to this many mm along each axis (0: none).
    subvoxel: refine the best integer shift to sub-voxel precision.
    rotation_deg: coarse grid of angles tried about each axis in ``rotation_axes``
        (0 is always included); the best is refined by half the smallest step either side.
    intensity_affine: after alignment, fit training ~ a * synthetic + b (least squares).
    refine_top: the closest candidates of each synthetic volume whose rotation and shift are
        then refined jointly about any 3D axis (:func:`refine_rigid`); 0: the grid only.
    refine_block_mm: block-mean size of that refinement.
    """

    flip_axes: tuple[int, ...] = ()
    max_shift_mm: float = 0.0
    subvoxel: bool = False
    rotation_deg: tuple[float, ...] = ()
    rotation_axes: tuple[int, ...] = (0, 1, 2)
    intensity_affine: bool = False
    refine_top: int = 0
    refine_block_mm: float = 3.0

    @classmethod
    def from_params(cls, p: dict | None) -> "SearchSpace":
        if not p:
            return cls()
        # params loaded through synthaudit.config carry every key (the schema's defaults filled)
        return cls(flip_axes=tuple(int(a) for a in p["flip_axes"]), max_shift_mm=float(p["max_shift_mm"]),
                   subvoxel=bool(p["subvoxel"]),
                   rotation_deg=tuple(float(a) for a in p["rotation_deg"] if float(a) != 0.0),
                   rotation_axes=tuple(int(a) for a in p["rotation_axes"]),
                   intensity_affine=bool(p["intensity_affine"]),
                   refine_top=int(p["refine_top"]), refine_block_mm=float(p["refine_block_mm"]))

    @property
    def is_identity(self) -> bool:
        return (not self.flip_axes and self.max_shift_mm <= 0 and not self.rotation_deg
                and not self.intensity_affine)

    def flips(self) -> list[tuple[int, ...]]:
        """Every subset of ``flip_axes`` (the empty one first)."""
        axes = sorted(set(self.flip_axes))
        return [c for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]

    def rotations(self) -> list[tuple[int, float]]:
        """(axis, angle) pairs: (-1, 0.0) for none, then each grid angle about each axis."""
        out = [(-1, 0.0)]
        if self.rotation_deg:
            out += [(ax, a) for ax in sorted(set(self.rotation_axes)) for a in sorted(set(self.rotation_deg))]
        return out

    @property
    def max_angle_deg(self) -> float:
        """The largest rotation in the group (0 without rotations)."""
        return max((abs(a) for a in self.rotation_deg), default=0.0)

    def refine_step(self) -> float:
        """Half the smallest gap of the coarse angle grid (0 included)."""
        grid = sorted(set(self.rotation_deg) | {0.0})
        gaps = [b - a for a, b in zip(grid, grid[1:])]
        return min(gaps) / 2.0 if gaps else 0.0


@dataclass
class Transform:
    """How a synthetic volume is mapped into the training frame: flip, then rotate about
    the grid centre, then shift; then intensity ``scale * x + offset``.

    The rotation is either one grid element (``rotation_axis``, ``angle_deg``) or, after
    :func:`refine_rigid`, any rotation: ``rotvec_deg``, the rotation vector (axis times
    angle in degrees) in the grid's physical axes, which then replaces the other two.
    """

    flips: tuple[int, ...] = ()
    rotation_axis: int = -1
    angle_deg: float = 0.0
    shift_vox: tuple[float, float, float] = (0.0, 0.0, 0.0)
    scale: float = 1.0
    offset: float = 0.0
    rotvec_deg: tuple[float, float, float] | None = None

    def rotation_matrix(self) -> np.ndarray:
        """The rotation as a 3x3 matrix in physical axes (:func:`rotate`'s convention)."""
        if self.rotvec_deg is not None:
            return _rotvec_matrix(np.deg2rad(np.asarray(self.rotvec_deg, float)))
        return axis_rotation(self.rotation_axis, self.angle_deg)

    @property
    def total_angle_deg(self) -> float:
        if self.rotvec_deg is not None:
            return float(np.linalg.norm(self.rotvec_deg))
        return abs(self.angle_deg) if self.rotation_axis >= 0 else 0.0

    def describe(self, spacing_mm: Sequence[float]) -> str:
        """E.g. ``flip0 rot2=+7.5deg shift=(2.0,-4.0,0.0)mm``, ``rot=(+1.2,-4.0,+0.3)deg`` for a
        refined rotation (its rotation vector); ``identity`` for none."""
        parts = [f"flip{''.join(str(a) for a in self.flips)}"] if self.flips else []
        if self.rotvec_deg is not None:
            if any(abs(a) > 1e-6 for a in self.rotvec_deg):
                parts.append("rot=(" + ",".join(f"{a:+.1f}" for a in self.rotvec_deg) + ")deg")
        elif self.rotation_axis >= 0 and self.angle_deg != 0:
            parts.append(f"rot{self.rotation_axis}={self.angle_deg:+.1f}deg")
        if any(abs(s) > 1e-6 for s in self.shift_vox):
            mm = [s * float(sp) for s, sp in zip(self.shift_vox, spacing_mm)]
            parts.append("shift=(" + ",".join(f"{m:.1f}" for m in mm) + ")mm")
        if self.scale != 1.0 or self.offset != 0.0:
            parts.append(f"intensity={self.scale:.3f}x{self.offset:+.3f}")
        return " ".join(parts) or "identity"


def block_mean(volume: np.ndarray, factor: int) -> np.ndarray:
    """Average over factor^3 blocks: cheap and alias-free enough.

    The remainder n mod factor is cropped evenly from both ends (the odd voxel at the end),
    so the block grid is centred on the voxel grid: flipping or rotating block means about
    their centre then matches flipping or rotating the volume (with an end crop, a flip of
    182 voxels in 4-blocks is off by half a block, and a mirrored replica is missed).
    """
    if factor <= 1:
        return np.asarray(volume, np.float32)
    v = np.asarray(volume, np.float32)
    s = [n // factor for n in v.shape]
    c = _crop_start(v.shape, factor)
    v = v[c[0]:c[0] + s[0] * factor, c[1]:c[1] + s[1] * factor, c[2]:c[2] + s[2] * factor]
    return v.reshape(s[0], factor, s[1], factor, s[2], factor).mean(axis=(1, 3, 5))


def edge_level(volume: np.ndarray) -> float:
    """Median of a volume's six faces: the value around the anatomy (air, -1,000 HU in CT kept
    in HU; about 0 in MRI and in windowed CT). On a tight crop whose faces cut tissue it is a
    tissue value, still closer to what lies beyond the grid than an arbitrary 0."""
    v = np.asarray(volume)
    faces = [v[0], v[-1], v[:, 0], v[:, -1], v[:, :, 0], v[:, :, -1]]
    return float(np.median(np.concatenate([np.ravel(f) for f in faces])))


def background_level(volumes: Sequence[np.ndarray]) -> float:
    """The training set's background: the median of its volumes' :func:`edge_level`. One value
    for the whole search, so that every pair is measured after the same constant shift and
    MAE/RMSE are exactly those of the volumes as they are."""
    levels = [edge_level(v) for v in volumes]
    return float(np.median(levels)) if levels else 0.0


def _crop_start(shape: Sequence[int], factor: int) -> list[int]:
    """First voxel of :func:`block_mean`'s block grid per axis."""
    return [(n - (n // factor) * factor) // 2 for n in shape]


def apply(volume: np.ndarray, t: Transform, spacing_mm: Sequence[float], fast: bool = False) -> np.ndarray:
    """The synthetic volume in the training frame (see :class:`Transform`). ``fast``: a joint
    rotation by :func:`~synthaudit.relict.align_kernels.affine_linear` (see
    :func:`~synthaudit.relict.geometry.rigid_warp`)."""
    out = np.asarray(volume, np.float32)
    if t.flips:
        out = np.flip(out, axis=t.flips)
    if t.rotvec_deg is not None:  # any rotation and the shift in one interpolation
        out = rigid_warp(np.ascontiguousarray(out), t.rotation_matrix(),
                         np.asarray(t.shift_vox, float) * np.asarray(spacing_mm, float), spacing_mm, fast=fast)
        if t.scale != 1.0 or t.offset != 0.0:
            out = out * np.float32(t.scale) + np.float32(t.offset)
        return np.asarray(out, np.float32)
    out = rotate(np.ascontiguousarray(out), t.rotation_axis, t.angle_deg, spacing_mm)
    if any(s != 0 for s in t.shift_vox):
        if all(float(s).is_integer() for s in t.shift_vox):
            out = _integer_shift(out, tuple(int(s) for s in t.shift_vox))
        else:
            out = _linear_shift(out, t.shift_vox)
    if t.scale != 1.0 or t.offset != 0.0:
        out = out * np.float32(t.scale) + np.float32(t.offset)
    return np.asarray(out, np.float32)


def _linear_shift(v: np.ndarray, shift: Sequence[float]) -> np.ndarray:
    """``ndimage.shift(v, shift, order=1, mode="constant", cval=0)`` in float32, one axis at a time.

    Why: out(x) = v(x - s) by trilinear interpolation is separable, so three 1D linear
    interpolations (two slices each) replace scipy's per-voxel 3D loop (0.1 s instead of
    0.3 s at 182 x 218 x 182). As in scipy's ``constant`` mode, a voxel whose source
    x - s lies outside [0, n - 1] on any axis is 0 (no interpolation towards the padding).
    """
    from ..align_kernels import linear_shift_axis

    out = np.asarray(v, np.float32)
    for axis, s in enumerate(shift):
        s = float(s)
        if s == 0:
            continue
        n = out.shape[axis]
        i, f, lo, hi = linear_shift_axis(s, n)
        res = np.zeros_like(out)
        for k, w in ((i, np.float32(1) - f), (i + 1, f)):  # out(x) = (1-f) v(x - i) + f v(x - i - 1)
            if w == 0 or abs(k) >= n:
                continue
            src = [slice(None)] * out.ndim
            dst = [slice(None)] * out.ndim
            src[axis] = slice(max(0, -k), n - max(0, k))
            dst[axis] = slice(max(0, k), n - max(0, -k))
            res[tuple(dst)] += w * out[tuple(src)]
        keep = [slice(None)] * out.ndim  # source x - s inside [0, n - 1]: [lo, hi)
        if lo > 0:
            keep[axis] = slice(0, lo)
            res[tuple(keep)] = 0
        if hi < n:
            keep[axis] = slice(max(hi, 0), n)
            res[tuple(keep)] = 0
        out = res
    return out


def _integer_shift(v: np.ndarray, shift: tuple[int, int, int]) -> np.ndarray:
    """out(x) = v(x - shift), zero where x - shift leaves the grid (exact, no interpolation)."""
    out = np.zeros_like(v)
    src, dst = [], []
    for s, n in zip(shift, v.shape):
        if abs(s) >= n:
            return out
        src.append(slice(max(0, -s), n - max(0, s)))
        dst.append(slice(max(0, s), n - max(0, -s)))
    out[tuple(dst)] = v[tuple(src)]
    return out


class ShiftSearch:
    """Squared error of a moving volume against fixed volumes for every shift within
    ``max_shift`` voxels per axis, by zero-padded FFT correlations (see the module doc)."""

    def __init__(self, shape: Sequence[int], max_shift: Sequence[int], workers: int = 1):
        self.shape = tuple(int(n) for n in shape)
        self.max_shift = tuple(int(m) for m in max_shift)
        self.padded = tuple(sfft.next_fast_len(n + m, real=True) for n, m in zip(self.shape, self.max_shift))
        self.workers = workers
        grid = np.zeros(self.padded, np.float32)
        grid[tuple(slice(0, n) for n in self.shape)] = 1.0
        self._grid_f = self._fft(grid)
        # the shifts in range, as indices into the (circular) correlation array
        self._idx = [np.r_[0:m + 1, p - m:p] if m else np.array([0]) for m, p in zip(self.max_shift, self.padded)]
        self.shifts = [np.r_[0:m + 1, -m:0] if m else np.array([0]) for m in self.max_shift]
        self._pruned = self._pruned_dft() if self._pruned_cheaper() else None

    def _pruned_cheaper(self) -> bool:
        """Whether the inverse transform at the shifts in range only (:meth:`_pruned_dft`) is the faster:
        where those are at most a quarter of axis 0 and the padded grid is not tiny (measured on 2 cores:
        3 mm block means of a 1.5 mm head CT, 7 of 72 per axis, 0.38 against 2.29 ms; a 1 mm grid's
        full-resolution search, 21 of 192, 15 against 46 ms; a 36 x 40 x 36 grid, 11 of 36, 0.75
        against 0.41 ms)."""
        return 4 * len(self._idx[0]) <= self.padded[0] and math.prod(self.padded) >= 2 ** 17

    def _pruned_dft(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The inverse real DFT's matrices at the output indices ``self._idx``: axis 0 and 1 complex
        (e^{2 pi i k n / P} / P), axis 2 the half spectrum's cosine and sine rows (weights 1 at k = 0
        and k = P/2, 2 between: irfft's Hermitian sum)."""
        p0, p1, p2 = self.padded
        h = p2 // 2 + 1

        def rows(idx, p):
            return (np.exp(2j * np.pi * np.outer(idx, np.arange(p)) / p) / p).astype(np.complex64)

        weight = np.full(h, 2.0)
        weight[0] = 1.0
        if p2 % 2 == 0:
            weight[-1] = 1.0
        angle = 2 * np.pi * np.outer(self._idx[2], np.arange(h)) / p2
        cos = (weight * np.cos(angle) / p2).astype(np.float32)
        sin = (weight * np.sin(angle) / p2).astype(np.float32)
        return (rows(self._idx[0], p0), rows(self._idx[1], p1), np.ascontiguousarray(cos.T),
                np.ascontiguousarray(sin.T))

    def _fft(self, v: np.ndarray) -> np.ndarray:
        return sfft.rfftn(v, s=self.padded, workers=self.workers)

    def _ifft(self, f: np.ndarray) -> np.ndarray:
        """The inverse FFT at the shifts in range (indexed like ``self.shifts``).

        Why pruned: the search needs (2m + 1)^3 of the correlation's values (343 of 389,000 on a
        1.5 mm head CT's 3 mm block means); an inverse over axis 0 at those indices only, as one
        matrix product, then axes 1 and 2 on what is left, replaced the whole inverse FFT that was
        a third of the coarse stage (issue 47)."""
        if self._pruned is None:
            full = sfft.irfftn(f, s=self.padded, workers=self.workers)
            return full[np.ix_(*self._idx)]
        e0, e1, cos, sin = self._pruned
        p0, p1, h = f.shape
        g = (e0 @ f.reshape(p0, p1 * h)).reshape(len(e0), p1, h)  # axis 0
        g = np.matmul(e1, g)  # axis 1: (n1 x p1) @ (p1 x h), per row of axis 0
        return (g.real @ cos - g.imag @ sin).astype(np.float32)  # axis 2, the real inverse

    def fixed(self, t: np.ndarray) -> tuple[np.ndarray, float]:
        t = np.asarray(t, np.float32)
        return self._fft(t), float(np.sum(t.astype(np.float64) ** 2))

    def moving(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The moving volume's FFT, conjugated (what :meth:`ssd` multiplies by), and its energy inside the
        grid for every shift."""
        a = np.asarray(a, np.float32)
        energy = self._ifft(np.conj(self._fft(a * a)) * self._grid_f)
        return np.conj(self._fft(a)), energy

    def ssd(self, moving: tuple[np.ndarray, np.ndarray], fixed: tuple[np.ndarray, float]) -> np.ndarray:
        """SSD(d) on the grid of shifts (array indexed like ``self.shifts``); ``moving``'s transform is
        held conjugated (:meth:`moving`: once per moved volume, not per pair)."""
        a_f_conj, energy = moving
        t_f, t_sq = fixed
        cross = self._ifft(a_f_conj * t_f)
        return np.maximum(energy + t_sq - 2.0 * cross, 0.0)

    def best(self, ssd: np.ndarray, subvoxel: bool) -> tuple[tuple[float, float, float], float]:
        """Shift with the lowest SSD (ties: the smallest shift), optionally refined by a parabola per axis."""
        flat = np.argmin(ssd)
        idx = np.unravel_index(flat, ssd.shape)
        shift = [float(self.shifts[k][i]) for k, i in enumerate(idx)]
        if subvoxel:
            for k in range(3):
                m = self.max_shift[k]
                i = idx[k]
                s = int(self.shifts[k][i])
                if m == 0 or abs(s) == m:
                    continue
                lo, hi = list(idx), list(idx)
                lo[k] = (i - 1) % ssd.shape[k]
                hi[k] = (i + 1) % ssd.shape[k]
                y0, y1, y2 = float(ssd[tuple(lo)]), float(ssd[idx]), float(ssd[tuple(hi)])
                den = y0 - 2 * y1 + y2
                if den > 0:
                    shift[k] = s + float(np.clip(0.5 * (y0 - y2) / den, -0.5, 0.5))
        return (shift[0], shift[1], shift[2]), float(ssd[idx])


def _shift_vox(space: SearchSpace, spacing_mm: Sequence[float], factor: int = 1) -> tuple[int, int, int]:
    return tuple(int(math.floor(space.max_shift_mm / (float(s) * factor) + 1e-9)) for s in spacing_mm)


@dataclass
class PairResult:
    transform: Transform
    mae: float
    rmse: float


Hypothesis = tuple  # (flips, rotation axis, angle in degrees)


Loader = Callable[[object], tuple[np.ndarray, np.ndarray]]  # a volume's reference -> (data, affine)


def _less(v: np.ndarray, background: float) -> np.ndarray:
    """float32 ``v - background`` (``v`` itself when the background is 0)."""
    v = np.asarray(v, np.float32)
    return v - np.float32(background) if background else v


def _rows_of(t, idx: np.ndarray):
    """``t[idx]`` of a torch tensor: a NumPy row copy on the CPU (~4x faster than
    ``index_select`` for the pre-selection's 100-kB rows, measured), ``index_select`` elsewhere."""
    import torch

    if t.device.type == "cpu":
        return torch.from_numpy(np.ascontiguousarray(t.numpy()[idx]))
    return t.index_select(0, torch.from_numpy(np.asarray(idx)).to(t.device))
