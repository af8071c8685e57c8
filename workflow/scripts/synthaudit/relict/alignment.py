"""Augmentation-aware replica search: align a synthetic volume to its candidate training
volumes over the generator's augmentation group before measuring.

Why: RELICT's own Discussion names the blind spot. A generator trained with flips,
shifts and small rotations can emit a mirrored or shifted copy of a patient; voxel-wise
MAE/RMSE then see a large distance and call the copy novel. Here each synthetic volume
is mapped back into the training frame by the transform (flip axes, rotation, shift,
optionally an intensity affine) that minimises the squared error against each of its
top-K candidates, and MAE/RMSE are measured on the aligned pair.

How it stays affordable (cost linear in the number of synthetic volumes):
1. Pre-selection, all pairs, on block-averaged volumes (``preselect_downsample``): every
   flip and coarse rotation of the synthetic volume, every shift within range at once by
   cross-correlation in the Fourier domain. The K lowest squared errors are the candidates.
2. Full resolution, K candidates per synthetic volume: the same search, the best rotation
   refined locally (half a grid step either side), the best shift refined to sub-voxel
   precision by a parabola through the squared error of the neighbouring shifts.

Squared error for all shifts d at once, with the moved volume zero outside its grid:
SSD(d) = sum_x a(x-d)^2 [x in grid] + sum t^2 - 2 sum_x a(x-d) t(x); both sums over x
are correlations, computed with zero padding so that no shift within range wraps.

The identity is always in the group, and a pair keeps its plain value when that is
lower, so an aligned distance never exceeds the plain one and the search space ``none``
reproduces plain RELICT exactly.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import fft as sfft
from scipy import ndimage

from ..io import spacing_from_affine


@dataclass(frozen=True)
class SearchSpace:
    """The augmentation group searched (params.yaml ``relict.alignment.search``).

    flip_axes: every subset of these voxel axes is tried (axis 0 is left-right on the MNI grid).
    max_shift_mm: translations up to this many mm along each axis (0: none).
    subvoxel: refine the best integer shift to sub-voxel precision.
    rotation_deg: coarse grid of angles tried about each axis in ``rotation_axes``
        (0 is always included); the best is refined by half the smallest step either side.
    intensity_affine: after alignment, fit training ~ a * synthetic + b (least squares).
    """

    flip_axes: tuple[int, ...] = ()
    max_shift_mm: float = 0.0
    subvoxel: bool = False
    rotation_deg: tuple[float, ...] = ()
    rotation_axes: tuple[int, ...] = (0, 1, 2)
    intensity_affine: bool = False

    @classmethod
    def from_params(cls, p: dict | None) -> "SearchSpace":
        if not p:
            return cls()
        return cls(flip_axes=tuple(int(a) for a in p.get("flip_axes") or ()),
                   max_shift_mm=float(p.get("max_shift_mm") or 0.0), subvoxel=bool(p.get("subvoxel", False)),
                   rotation_deg=tuple(float(a) for a in p.get("rotation_deg") or () if float(a) != 0.0),
                   rotation_axes=tuple(int(a) for a in p.get("rotation_axes", (0, 1, 2))),
                   intensity_affine=bool(p.get("intensity_affine", False)))

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

    def refine_step(self) -> float:
        """Half the smallest gap of the coarse angle grid (0 included)."""
        grid = sorted(set(self.rotation_deg) | {0.0})
        gaps = [b - a for a, b in zip(grid, grid[1:])]
        return min(gaps) / 2.0 if gaps else 0.0


@dataclass
class Transform:
    """How a synthetic volume is mapped into the training frame: flip, then rotate about
    the grid centre, then shift; then intensity ``scale * x + offset``."""

    flips: tuple[int, ...] = ()
    rotation_axis: int = -1
    angle_deg: float = 0.0
    shift_vox: tuple[float, float, float] = (0.0, 0.0, 0.0)
    scale: float = 1.0
    offset: float = 0.0

    def describe(self, spacing_mm: Sequence[float]) -> str:
        """E.g. ``flip0 rot2=+7.5deg shift=(2.0,-4.0,0.0)mm``; ``identity`` for none."""
        parts = [f"flip{''.join(str(a) for a in self.flips)}"] if self.flips else []
        if self.rotation_axis >= 0 and self.angle_deg != 0:
            parts.append(f"rot{self.rotation_axis}={self.angle_deg:+.1f}deg")
        if any(abs(s) > 1e-6 for s in self.shift_vox):
            mm = [s * float(sp) for s, sp in zip(self.shift_vox, spacing_mm)]
            parts.append("shift=(" + ",".join(f"{m:.1f}" for m in mm) + ")mm")
        if self.scale != 1.0 or self.offset != 0.0:
            parts.append(f"intensity={self.scale:.3f}x{self.offset:+.3f}")
        return " ".join(parts) or "identity"


def block_mean(volume: np.ndarray, factor: int) -> np.ndarray:
    """Average over factor^3 blocks (the edge remainder is cropped): cheap and alias-free enough."""
    if factor <= 1:
        return np.asarray(volume, np.float32)
    v = np.asarray(volume, np.float32)
    s = [n // factor for n in v.shape]
    v = v[: s[0] * factor, : s[1] * factor, : s[2] * factor]
    return v.reshape(s[0], factor, s[1], factor, s[2], factor).mean(axis=(1, 3, 5))


def rotate(volume: np.ndarray, axis: int, angle_deg: float, spacing_mm: Sequence[float],
           order: int = 1) -> np.ndarray:
    """Rotate about the grid centre in physical space (anisotropic voxels respected), linear
    interpolation (``order``), zero outside; axis -1 or angle 0 returns the input unchanged."""
    if axis < 0 or angle_deg == 0:
        return volume
    a, b = [i for i in range(3) if i != axis]
    c, s = math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))
    rot = np.eye(3)
    rot[a, a], rot[a, b], rot[b, a], rot[b, b] = c, -s, s, c
    sp = np.asarray(spacing_mm, float)
    # pull-back: out(x) = in(M x + o), M = S^-1 R^T S in voxel units
    m = np.diag(1 / sp) @ rot.T @ np.diag(sp)
    centre = (np.asarray(volume.shape, float) - 1) / 2
    return ndimage.affine_transform(volume, m, offset=centre - m @ centre, order=order, mode="constant", cval=0.0)


def apply(volume: np.ndarray, t: Transform, spacing_mm: Sequence[float]) -> np.ndarray:
    """The synthetic volume in the training frame (see :class:`Transform`)."""
    out = np.asarray(volume, np.float32)
    if t.flips:
        out = np.flip(out, axis=t.flips)
    out = rotate(np.ascontiguousarray(out), t.rotation_axis, t.angle_deg, spacing_mm)
    if any(s != 0 for s in t.shift_vox):
        if all(float(s).is_integer() for s in t.shift_vox):
            out = _integer_shift(out, tuple(int(s) for s in t.shift_vox))
        else:
            out = ndimage.shift(out, t.shift_vox, order=1, mode="constant", cval=0.0)
    if t.scale != 1.0 or t.offset != 0.0:
        out = out * np.float32(t.scale) + np.float32(t.offset)
    return np.asarray(out, np.float32)


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

    def _fft(self, v: np.ndarray) -> np.ndarray:
        return sfft.rfftn(v, s=self.padded, workers=self.workers)

    def _ifft(self, f: np.ndarray) -> np.ndarray:
        full = sfft.irfftn(f, s=self.padded, workers=self.workers)
        return full[np.ix_(*self._idx)]

    def fixed(self, t: np.ndarray) -> tuple[np.ndarray, float]:
        t = np.asarray(t, np.float32)
        return self._fft(t), float(np.sum(t.astype(np.float64) ** 2))

    def moving(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The moving volume's FFT and its energy inside the grid for every shift."""
        a = np.asarray(a, np.float32)
        energy = self._ifft(np.conj(self._fft(a * a)) * self._grid_f)
        return self._fft(a), energy

    def ssd(self, moving: tuple[np.ndarray, np.ndarray], fixed: tuple[np.ndarray, float]) -> np.ndarray:
        """SSD(d) on the grid of shifts (array indexed like ``self.shifts``)."""
        a_f, energy = moving
        t_f, t_sq = fixed
        cross = self._ifft(np.conj(a_f) * t_f)
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


def preselect(synthetic: Sequence[np.ndarray], training: Sequence[np.ndarray], space: SearchSpace,
              spacing_mm: Sequence[float], k: int, factor: int, n_hypotheses: int = 2, workers: int = 1,
              progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, list[list[list[Hypothesis]]]]:
    """Candidates and their most likely transforms, from block-averaged volumes.

    Returns:
        ``(candidates, hypotheses)``: training indices (S, k) with the lowest group-searched
        squared error (ties by training index), and per synthetic volume and candidate the
        ``n_hypotheses`` (flips, axis, angle) with the lowest squared error plus the best one
        of every flip subset, best first: the full-resolution search starts from these
        instead of the whole group.
    """
    k = min(k, len(training))
    sp = [float(s) * factor for s in spacing_mm]
    small_t = [block_mean(t, factor) for t in training]
    search = ShiftSearch(small_t[0].shape, _shift_vox(space, spacing_mm, factor), workers)
    fixed = [search.fixed(t) for t in small_t]
    group = [(f, ax, an) for f in space.flips() for ax, an in space.rotations()]
    out = np.empty((len(synthetic), k), np.int64)
    hyps = []
    for i, s in enumerate(synthetic):
        small = block_mean(s, factor)
        score = np.empty((len(group), len(training)))
        for g, (flips, axis, angle) in enumerate(group):
            flipped = np.ascontiguousarray(np.flip(small, axis=flips) if flips else small)
            mov = search.moving(rotate(flipped, axis, angle, sp))
            for j, f in enumerate(fixed):
                score[g, j] = float(search.ssd(mov, f).min())
        best = score.min(axis=0)
        out[i] = np.lexsort((np.arange(len(training)), best))[:k]
        per_pair = []
        for j in out[i]:
            order = np.argsort(score[:, j], kind="stable")
            # the n best overall, and the best of every flip subset: at coarse resolution a
            # mirrored-and-shifted head can beat the plain shift of a nearly symmetric one
            keep = list(order[:n_hypotheses])
            keep += [next(g for g in order if group[g][0] == f) for f in space.flips()]
            per_pair.append([group[g] for g in dict.fromkeys(sorted(keep, key=lambda g: score[g, j]))])
        hyps.append(per_pair)
        if progress:
            progress(i + 1, len(synthetic))
    return out, hyps


Loader = Callable[[object], tuple[np.ndarray, np.ndarray]]  # a volume's reference -> (data, affine)


def preselect_volumes(synthetic: Sequence, training: Sequence, load: Loader, space: SearchSpace, k: int,
                      factor: int, n_hypotheses: int = 2, workers: int = 1,
                      progress: Callable[[int, int], None] | None = None
                      ) -> tuple[np.ndarray, list[list[list[Hypothesis]]], list[float]]:
    """:func:`preselect` on volumes read by ``load``, each read once and kept only block-averaged
    (all of them at full resolution need not fit in memory).

    Returns:
        ``(candidates, hypotheses, spacing_mm)``; the full-resolution spacing is the first
        synthetic volume's (the caller checks that all share one grid).
    """
    spacing = None
    small_syn, small_train = [], []
    for ref in synthetic:
        v, affine = load(ref)
        spacing = spacing if spacing is not None else [float(x) for x in spacing_from_affine(affine)]
        small_syn.append(block_mean(v, factor))
    for ref in training:
        small_train.append(block_mean(load(ref)[0], factor))
    candidates, hypotheses = preselect(small_syn, small_train, space, [s * factor for s in spacing], k, factor=1,
                                       n_hypotheses=n_hypotheses, workers=workers, progress=progress)
    return candidates, hypotheses, spacing


def align_candidates(synthetic: Sequence, training: Sequence, load: Loader, candidates: np.ndarray,
                     hypotheses: Sequence[Sequence[Sequence[Hypothesis]]], space: SearchSpace,
                     spacing_mm: Sequence[float], workers: int = 1, progress: Callable[[int], None] | None = None,
                     cache_bytes: float = 2e9) -> list[list[PairResult]]:
    """The full-resolution search (:func:`align_pair_set`) of every synthetic volume against its candidates.

    Candidate lists of different synthetic volumes overlap (the same few training scans
    are close to many), so training volumes are kept in a bounded cache instead of being
    read K times per synthetic volume; at least K fit, about ``cache_bytes`` in all.
    Cached volumes are read-only: they are shared between pairs.
    """
    k = candidates.shape[1]

    def read(j: int) -> np.ndarray:
        v = load(training[j])[0]
        v.setflags(write=False)
        return v

    training_volume = None
    pairs = []
    for i, ref in enumerate(synthetic):
        s = load(ref)[0]
        if training_volume is None:
            training_volume = functools.lru_cache(maxsize=max(k, int(cache_bytes // max(s.nbytes, 1))))(read)
        targets = [training_volume(int(j)) for j in candidates[i]]
        pairs.append(align_pair_set(s, targets, space, spacing_mm, hypotheses[i], workers=workers))
        if progress:
            progress(i + 1)
    return pairs


def align_pair_set(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace,
                   spacing_mm: Sequence[float], hypotheses: Sequence[Sequence[Hypothesis]] | None = None,
                   workers: int = 1) -> list[PairResult]:
    """Align one synthetic volume to each target at full resolution; MAE and RMSE of each aligned pair.

    ``hypotheses[j]``: the (flips, axis, angle) to try for target j (from :func:`preselect`);
    None tries the whole group for every target. Every shift in range is tried for each,
    then the best angle is refined locally and the shift to sub-voxel precision.
    """
    s = np.asarray(s, np.float32)
    search = ShiftSearch(s.shape, _shift_vox(space, spacing_mm), workers)
    fixed = [search.fixed(t) for t in targets]
    best: list[tuple[float, Transform]] = [(math.inf, Transform()) for _ in targets]
    if hypotheses is None:
        group = [(f, ax, an) for f in space.flips() for ax, an in space.rotations()]
        hypotheses = [group] * len(targets)
    todo: dict[Hypothesis, list[int]] = {}
    for j, hs in enumerate(hypotheses):
        for h in hs:
            todo.setdefault((tuple(h[0]), int(h[1]), float(h[2])), []).append(j)

    cache: dict[Hypothesis, tuple[np.ndarray, tuple]] = {}

    def moved(flips, axis, angle):
        """The flipped and rotated synthetic volume and its FFTs (each transform computed once)."""
        key = (tuple(flips), axis, angle)
        if key not in cache:
            base = np.ascontiguousarray(np.flip(s, axis=flips) if flips else s)
            vol = rotate(base, axis, angle, spacing_mm)
            cache[key] = (vol, search.moving(vol))
        return cache[key]

    def consider(flips, axis, angle, only):
        mov = moved(flips, axis, angle)[1]
        for j in only:
            shift, value = search.best(search.ssd(mov, fixed[j]), subvoxel=False)
            if value < best[j][0] - 1e-9 * max(1.0, value):
                best[j] = (value, Transform(flips=tuple(flips), rotation_axis=axis, angle_deg=angle,
                                            shift_vox=shift))

    for (flips, axis, angle), only in todo.items():
        consider(flips, axis, angle, only)
    step = space.refine_step()
    if step > 0:  # local refinement about each pair's best coarse angle, shared where pairs agree
        refine: dict[Hypothesis, list[int]] = {}
        for j in range(len(targets)):
            t0 = best[j][1]
            for axis in ([t0.rotation_axis] if t0.rotation_axis >= 0 else sorted(set(space.rotation_axes))):
                for angle in (t0.angle_deg - step, t0.angle_deg + step):
                    if angle != 0:
                        refine.setdefault((t0.flips, axis, angle), []).append(j)
        for (flips, axis, angle), only in refine.items():
            consider(flips, axis, angle, only)
    out = []
    for j, t in enumerate(targets):
        tr = best[j][1]
        vol, mov = moved(tr.flips, tr.rotation_axis, tr.angle_deg)
        if space.subvoxel and any(_shift_vox(space, spacing_mm)):
            tr.shift_vox, _ = search.best(search.ssd(mov, fixed[j]), subvoxel=True)
        aligned = apply(vol, Transform(shift_vox=tr.shift_vox), spacing_mm)
        t = np.asarray(t, np.float32)
        if space.intensity_affine:
            x, y = aligned.ravel().astype(np.float64), t.ravel().astype(np.float64)
            var = x.var()
            tr.scale = float(((x - x.mean()) * (y - y.mean())).mean() / var) if var > 0 else 1.0
            tr.offset = float(y.mean() - tr.scale * x.mean())
            aligned = aligned * np.float32(tr.scale) + np.float32(tr.offset)
        diff = aligned.astype(np.float64) - t
        out.append(PairResult(tr, float(np.abs(diff).mean()), float(np.sqrt((diff ** 2).mean()))))
    return out


def aligned_matrices(plain: dict[str, np.ndarray], candidates: np.ndarray,
                     pairs: list[list[PairResult]], spacing_mm: Sequence[float]) -> dict[str, np.ndarray]:
    """Plain MAE/RMSE matrices with each candidate pair replaced by its aligned value when lower.

    Returns ``{measure: values}`` for the measures in ``plain`` and, per measure,
    ``{measure}_transform``: the description of the transform behind each value
    (``identity`` where the plain value stands, empty where the pair was not searched).
    """
    out = {}
    for m, values in plain.items():
        v = np.array(values, np.float64, copy=True)
        desc = np.full(v.shape, "", dtype=object)
        for i, row in enumerate(pairs):
            for j, pr in zip(candidates[i], row):
                got = getattr(pr, m)
                if got < v[i, j]:
                    v[i, j] = got
                    desc[i, j] = pr.transform.describe(spacing_mm)
                else:
                    desc[i, j] = "identity"
        out[m] = v
        out[f"{m}_transform"] = desc.astype(str)
    return out


def alignment_columns(measures: Sequence[str]) -> list[str]:
    """Columns of alignment.tsv."""
    return ["synthetic_id", "candidate_rank", "training_id", "transform", "flip_axes", "rotation_axis", "angle_deg",
            "shift_x_mm", "shift_y_mm", "shift_z_mm"] + [f"{m}_{k}" for m in measures for k in ("plain", "aligned")]


def alignment_rows(synthetic_ids: Sequence[str], training_ids: Sequence[str], candidates: np.ndarray,
                   pairs: list[list[PairResult]], plain: dict[str, np.ndarray], spacing_mm: Sequence[float]
                   ) -> list[dict]:
    """One row per searched pair (alignment.tsv): its transform and each measure plain and aligned."""
    rows = []
    for i, row in enumerate(pairs):
        for rank, (j, pr) in enumerate(zip(candidates[i], row), start=1):
            t = pr.transform
            r = {"synthetic_id": synthetic_ids[i], "candidate_rank": rank, "training_id": training_ids[j],
                 "transform": t.describe(spacing_mm), "flip_axes": "".join(map(str, t.flips)),
                 "rotation_axis": t.rotation_axis if t.angle_deg else "", "angle_deg": t.angle_deg,
                 **{f"shift_{a}_mm": t.shift_vox[n] * spacing_mm[n] for n, a in enumerate("xyz")}}
            for m, values in plain.items():
                r[f"{m}_plain"], r[f"{m}_aligned"] = float(values[i, j]), float(getattr(pr, m))
            rows.append(r)
    return rows
