"""The candidates' drivers: every candidate aligned at full resolution, or ranked at a coarse stage first
(coarse-to-fine) and the best aligned, with the volumes streamed through a byte-bounded cache."""

from __future__ import annotations

import collections.abc
import math
from typing import Callable, Sequence

import numpy as np

from .group import (
    Hypothesis, Loader, PairResult, SearchSpace, ShiftSearch, Transform, _crop_start, _less, _shift_vox,
    block_mean,
)
from .refine import (
    _group_search, _measured, _never_above_plain, _refine_closest, _restore_offsets, _rotate_fast, align_pair_set,
)


def align_candidates(synthetic: Sequence, training: Sequence, load: Loader, candidates: np.ndarray,
                     hypotheses: Sequence[Sequence[Sequence[Hypothesis]]], space: SearchSpace,
                     spacing_mm: Sequence[float], workers: int = 1, progress: Callable[[int], None] | None = None,
                     cache_bytes: float = 2e9, factor: int = 1, background: float = 0.0,
                     plain: tuple[np.ndarray, np.ndarray] | None = None) -> list[list[PairResult]]:
    """The full-resolution search (:func:`align_pair_set`, or with ``factor`` > 1
    :func:`align_pair_set_coarse_to_fine` from ``factor``-block means) of every synthetic
    volume against its candidates: :func:`align_candidates_ranked` keeping them all."""
    return align_candidates_ranked(synthetic, training, load, candidates, hypotheses, space, spacing_mm,
                                   workers=workers, progress=progress, cache_bytes=cache_bytes, factor=factor,
                                   background=background, plain=plain)[1]


class _ByteLRU:
    """A least-recently-used cache of ``compute(key)`` holding about ``max_bytes`` (at least ``min_items``)."""

    def __init__(self, compute: Callable, max_bytes: float, min_items: int):
        from collections import OrderedDict

        self.compute, self.max_bytes, self.min_items = compute, float(max_bytes), int(min_items)
        self.items: OrderedDict = OrderedDict()
        self.size = None

    def __call__(self, key):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        value = self.compute(key)
        if self.size is None:
            parts = value if isinstance(value, tuple) else (value,)
            self.size = max(1, sum(getattr(x, "nbytes", 0) for x in parts))
        self.items[key] = value
        while len(self.items) > max(self.min_items, int(self.max_bytes // self.size)):
            self.items.popitem(last=False)
        return value


def align_candidates_ranked(synthetic: Sequence, training: Sequence, load: Loader, candidates: np.ndarray,
                            hypotheses: Sequence[Sequence[Sequence[Hypothesis]]], space: SearchSpace,
                            spacing_mm: Sequence[float], workers: int = 1,
                            progress: Callable[[int], None] | None = None, cache_bytes: float = 2e9,
                            factor: int = 1, background: float = 0.0, keep: int | None = None,
                            coarse_cache_bytes: float | None = None,
                            plain: tuple[np.ndarray, np.ndarray] | None = None
                            ) -> tuple[np.ndarray, list[list[PairResult]]]:
    """Every synthetic volume against its candidates (:func:`align_ranked`): with ``factor`` > 1
    and ``keep`` < K, the K candidates are ranked by the ``factor``-block-mean search and only
    the best ``keep`` are aligned at full resolution.

    Candidate lists of different synthetic volumes overlap (the same few training scans
    are close to many), so training volumes are kept in bounded caches instead of being
    read K times per synthetic volume: at full resolution (at least ``keep`` fit, about
    ``cache_bytes`` in all) and, for the ranking, their block means' FFTs (at least K, about
    ``coarse_cache_bytes``, default ``cache_bytes``; ~4.5 MB per 1 mm head at 2 mm).
    Cached volumes are read-only: they are shared between pairs. ``background``: as in
    :func:`preselect_volumes` (subtracted once per volume read). ``plain``: the (S, T) plain MAE
    and RMSE matrices, where known (the coarse-to-fine path then reads them instead of measuring
    the identity; +inf: not computed, measured).

    Returns:
        ``(kept, pairs)``: per synthetic volume the training indices aligned at full
        resolution, in rank order ((S, keep) array), and their results.
    """
    k = candidates.shape[1]
    keep = k if keep is None or factor <= 1 else min(int(keep), k)

    def read(j: int) -> np.ndarray:
        v = _less(load(training[j])[0], background)
        v.setflags(write=False)
        return v

    training_volume = _ByteLRU(read, cache_bytes, 1)
    current: dict = {}  # the ShiftSearch of the block-mean grid (one grid: the caller checks it)
    # the block means from the full-resolution cache's copy: each training volume read once, not twice
    coarse_cache = _ByteLRU(lambda j: coarse_fixed(training_volume(j), factor, current["search"], workers),
                            cache_bytes if coarse_cache_bytes is None else coarse_cache_bytes, k)

    kept_all = np.empty((len(synthetic), keep), np.int64)
    pairs = []
    for i, ref in enumerate(synthetic):
        s = _less(load(ref)[0], background)
        js = [int(j) for j in candidates[i]]
        coarse = None
        if factor > 1:  # the candidates' block means from the shared cache (each training volume once)
            def coarse(r, search, js=js):
                current.setdefault("search", search)
                return coarse_cache(js[r])
        known = None if plain is None else [(float(plain[0][i, j]), float(plain[1][i, j])) for j in js]
        kept, found = align_ranked(s, _Picked(training_volume, js), space, spacing_mm, hypotheses[i], factor=factor, workers=workers,
                                   keep=keep if keep < k else None, coarse=coarse, plain=known)
        kept_all[i] = [js[r] for r in kept]
        pairs.append(_restore_offsets(found, background))
        if progress:
            progress(i + 1)
    return kept_all, pairs


class LocalShift:
    """Exact squared error of a moving volume against a fixed one for integer shifts near a
    start, by a descent over 3x3x3 windows: the full-resolution step of the coarse-to-fine search.

    Why: once the block-mean search has located the shift to within a coarse voxel, the
    full-resolution optimum is a few voxels away; a handful of exact sums of squares replace
    a full-grid FFT correlation (~0.2 s per pair and hypothesis, more per moved volume).
    The sums come from :func:`~synthaudit.relict.align_kernels.shift_ssd`: the new
    neighbours of a descent step in one pass over the volumes, ``a(x - d)`` zero where it
    leaves the grid (as :func:`_integer_shift`), no padded copies or summed-area tables.
    """

    def __init__(self, shape: Sequence[int], max_shift: Sequence[int], threads: int | None = None):
        self.shape = tuple(int(n) for n in shape)
        self.max_shift = tuple(int(m) for m in max_shift)
        self.threads = threads

    def moving(self, a: np.ndarray) -> np.ndarray:
        """The moving volume as the sums read it (float32, C order)."""
        return np.ascontiguousarray(a, np.float32)

    def fixed(self, t: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(t, np.float32)

    def ssds(self, moving: np.ndarray, fixed: np.ndarray, shifts: Sequence[Sequence[int]]) -> np.ndarray:
        """Squared error of ``moving(x - d)`` against ``fixed`` for each shift d, float64."""
        from ..align_kernels import shift_ssd

        return shift_ssd(moving, fixed, shifts, threads=self.threads)

    def ssd(self, moving: np.ndarray, fixed: np.ndarray, d: Sequence[int]) -> float:
        return float(self.ssds(moving, fixed, [tuple(int(x) for x in d)])[0])

    def descend(self, moving, fixed, start: Sequence[int], subvoxel: bool,
                seen: dict[tuple[int, int, int], float] | None = None) -> tuple[tuple[float, float, float], float]:
        """From ``start``, move to the best of the 6 axis neighbours (within range) until the
        centre is best (a local minimum along the axes; the squared error is smooth near the
        optimum the coarse search found); then, optionally, a parabola per axis as
        :meth:`ShiftSearch.best`. Ties: the centre first (no move), then axis order. The
        neighbours not yet seen are summed together, one pass per step. ``seen``: the values
        of an earlier descent of the same pair, reused (and extended)."""
        m = self.max_shift
        d = tuple(int(np.clip(int(s), -mk, mk)) for s, mk in zip(start, m))
        seen = {} if seen is None else seen

        def evaluate(points):
            new = list(dict.fromkeys(x for x in points if x not in seen))
            if new:
                seen.update(zip(new, (float(v) for v in self.ssds(moving, fixed, new))))

        def inside(x):
            return all(abs(xk) <= mk for xk, mk in zip(x, m))

        steps = [(-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, -1), (0, 0, 1)]
        while True:
            around = [tuple(dk + ek for dk, ek in zip(d, e)) for e in steps]
            evaluate([d] + [x for x in around if inside(x)])
            best, best_v = d, seen[d]
            for x in around:
                if inside(x) and seen[x] < best_v:
                    best, best_v = x, seen[x]
            if best == d:
                break
            d = best
        shift = [float(x) for x in d]
        if subvoxel:
            for k in range(3):
                if m[k] == 0 or abs(d[k]) == m[k]:
                    continue
                lo, hi = list(d), list(d)
                lo[k] -= 1
                hi[k] += 1
                evaluate([tuple(lo), tuple(hi)])
                y0, y1, y2 = seen[tuple(lo)], best_v, seen[tuple(hi)]
                den = y0 - 2 * y1 + y2
                if den > 0:
                    shift[k] = d[k] + float(np.clip(0.5 * (y0 - y2) / den, -0.5, 0.5))
        return (shift[0], shift[1], shift[2]), best_v


def _coarse_search(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace, spacing_mm: Sequence[float],
                   hypotheses: Sequence[Sequence[Hypothesis]] | None, factor: int, workers: int = 1,
                   refine_angle: bool = True, keep: int | None = None,
                   coarse: Callable[[int, ShiftSearch], tuple] | None = None
                   ) -> tuple[list[tuple[float, Transform]], np.ndarray | None, list[int]]:
    """The group search of :func:`align_pair_set` on ``factor``-block means: per target the lowest
    squared error over its hypotheses (plus the identity rotation of every flip subset, a
    cheap guard against a pre-selection that preferred a rotation for a shifted copy) and every
    shift, then the local angle refinement (of the best ``keep`` only, see :func:`_group_search`).
    Shifts are in block units.

    ``coarse(j, search)``: target j's block means and :meth:`ShiftSearch.fixed` (a cache shared
    between synthetic volumes, :func:`align_candidates_ranked`); None computes them from ``targets``.

    Returns:
        ``(best, plain, kept)``: per target (squared error, transform); the squared error of
        the identity at zero shift on the block means (None when ``coarse`` is given); the
        kept targets in rank order.
    """
    from ..align_kernels import block_mean_fast

    sp_c = [float(x) * factor for x in spacing_mm]
    crop = _crop_start(s.shape, factor)
    s_c = block_mean_fast(s, factor, crop, threads=workers)
    search = ShiftSearch(s_c.shape, _shift_vox(space, sp_c), workers)
    plain = None
    if coarse is None:
        small_t = [block_mean_fast(t, factor, crop, threads=workers) for t in targets]
        fixed = [search.fixed(t) for t in small_t]
        plain = np.array([float(np.sum((s_c.astype(np.float64) - t) ** 2)) for t in small_t])
    else:
        fixed = [coarse(j, search) for j in range(len(targets))]
    best, _, kept = _group_search(s_c, fixed, search, space, sp_c, hypotheses, refine_angle, rotate_fn=_rotate_fast,
                                  keep=keep)
    return best, plain, kept


def coarse_fixed(t: np.ndarray, factor: int, search: ShiftSearch, workers: int = 1) -> tuple:
    """A training volume's ``factor``-block means as :func:`_coarse_search` needs them (its FFT and
    energy), for a cache shared between synthetic volumes."""
    from ..align_kernels import block_mean_fast

    t = np.asarray(t, np.float32)
    return search.fixed(block_mean_fast(t, factor, _crop_start(t.shape, factor), threads=workers))


def coarse_aligned_mse(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace, spacing_mm: Sequence[float],
                       hypotheses: Sequence[Sequence[Hypothesis]] | None, factor: int = 2, workers: int = 1
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Mean squared error per ``factor``-block-mean voxel of each pair, plain (identity, zero shift)
    and aligned (the coarse stage of :func:`align_pair_set_coarse_to_fine`, no angle refinement):
    the ingredients of :func:`estimated_rmse` for pairs that are not aligned at full resolution.

    Why: at 2 mm the within-block detail of a 1 mm error is mostly noise, which no alignment
    removes, so the coarse gain is most of the full-resolution gain, at ~1/10 of the cost of
    a full-resolution alignment per pair.
    """
    s = np.asarray(s, np.float32)
    best, plain, _ = _coarse_search(s, targets, space, spacing_mm, hypotheses, factor, workers, refine_angle=False)
    n = block_mean(s, factor).size
    aligned = np.minimum(np.array([b[0] for b in best]), plain)
    return plain / n, aligned / n


def align_pair_set_coarse_to_fine(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace,
                                  spacing_mm: Sequence[float],
                                  hypotheses: Sequence[Sequence[Hypothesis]] | None = None, factor: int = 2,
                                  workers: int = 1, background: float = 0.0) -> list[PairResult]:
    """:func:`align_pair_set` searched on ``factor``-block means, then refined at full resolution.

    Why: at 1 mm every hypothesis costs a full-grid FFT correlation per pair (~2 s per pair
    in all). Here the group search (the hypotheses, every shift in range, the local angle
    refinement) runs on block means, factor^3 fewer voxels; at full resolution only the
    winning (flip, rotation) is applied to the synthetic volume (once per synthetic volume
    and transform, shared by its candidates) and its shift refined by :class:`LocalShift`
    from the coarse optimum (a descent to a local minimum of the exact squared error), then
    to sub-voxel precision. The reported MAE/RMSE are those of the returned transform
    applied with :func:`apply`, as in :func:`align_pair_set` (sub-voxel shift only where it
    lowers the squared error; the identity where the plain RMSE is lower; ``background``
    subtracted first). ``factor`` <= 1 is :func:`align_pair_set` itself.
    """
    if factor <= 1:
        return align_pair_set(s, targets, space, spacing_mm, hypotheses, workers=workers, background=background)
    return align_ranked(s, targets, space, spacing_mm, hypotheses, factor=factor, workers=workers,
                        background=background)[1]


def align_ranked(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace, spacing_mm: Sequence[float],
                 hypotheses: Sequence[Sequence[Hypothesis]] | None = None, factor: int = 2, workers: int = 1,
                 background: float = 0.0, keep: int | None = None,
                 coarse: Callable[[int, ShiftSearch], tuple] | None = None,
                 plain: Sequence[tuple[float, float]] | None = None) -> tuple[list[int], list[PairResult]]:
    """:func:`align_pair_set_coarse_to_fine`, with the targets ranked on the block means first and
    only the best ``keep`` of them aligned at full resolution (None: all).

    Why: the 4 mm pre-selection ranks training volumes coarsely; at 1 mm it needed up to 2.8 n
    candidates to hold the n closest aligned distances, the 2 mm search of this function up to
    1.5 n (``make bench-alignment-recall``). Ranking 3 n candidates here (a few FFT correlations
    each on 8x fewer voxels, the training side cached by :func:`align_candidates`) and refining
    only the best ``keep`` costs less than refining them all. ``targets`` (a lazy sequence is fine)
    is read once each for the block means, or, with ``coarse`` (as :func:`_coarse_search`), only at
    the kept indices; ``plain``: per target the plain (MAE, RMSE) if known (the image level's), for
    :func:`_never_above_plain`. ``factor`` <= 1 (no coarse stage): :func:`align_pair_set` on every
    target, ``keep`` ignored.

    Returns:
        ``(kept, pairs)``: the kept target indices in rank order and their results.
    """
    if factor <= 1:
        found = align_pair_set(s, targets, space, spacing_mm, hypotheses, workers=workers, background=background)
        return list(range(len(found))), found
    s = _less(s, background)
    if background:
        targets = [_less(t, background) for t in targets]
    best, _, kept = _coarse_search(s, targets, space, spacing_mm, hypotheses, factor, workers, keep=keep,
                                   coarse=coarse)
    targets = _Picked(targets.__getitem__, kept)  # read one at a time: all need not fit in memory
    best = [best[j] for j in kept]

    local = LocalShift(s.shape, _shift_vox(space, spacing_mm), threads=workers)
    fine_moved: dict[Hypothesis, tuple[np.ndarray, np.ndarray]] = {}

    def moved(key):
        if key not in fine_moved:
            flips, axis, angle = key
            base = np.ascontiguousarray(np.flip(s, axis=flips) if flips else s)
            vol = np.asarray(_rotate_fast(base, axis, angle, spacing_mm, workers=workers), np.float32)
            fine_moved[key] = (vol, local.moving(vol))
        return fine_moved[key]

    out = []
    for j, t in enumerate(targets):
        tr = best[j][1]
        t = np.asarray(t, np.float32)
        fixed = local.fixed(t)
        start = [int(round(x * factor)) for x in tr.shift_vox]
        # The coarse winner, and its flip subset unrotated: on block means a rotation of a few
        # degrees can beat the plain shift of a shifted copy (2 of 3 shifted copies at the NCCT
        # bench scale), and no full-resolution step would return to 0; the lower exact squared
        # error at the integer shift decides.
        keys = [(tr.flips, tr.rotation_axis, tr.angle_deg)]
        if tr.rotation_axis >= 0 and tr.angle_deg != 0:
            keys.append((tr.flips, -1, 0.0))
        memo: dict = {key: {} for key in keys}
        found = [(local.descend(moved(key)[1], fixed, start, subvoxel=False, seen=memo[key]), key) for key in keys]
        (shift, _), key = min(found, key=lambda f: f[0][1])
        tr.flips, tr.rotation_axis, tr.angle_deg = key[0], key[1], key[2]
        tr.shift_vox = shift
        vol = moved(key)[0]
        sub = shift
        if space.subvoxel:
            sub, _ = local.descend(moved(key)[1], fixed, [int(x) for x in shift], subvoxel=True, seen=memo[key])
        if sub != shift:
            # both shifts measured over their own overlap (the descent's squared errors are the
            # whole grid's, padding included), the lower RMSE kept
            tr_sub = Transform(tr.flips, tr.rotation_axis, tr.angle_deg, sub)
            measured = min(_measured(vol, t, tr, space, spacing_mm, threads=workers),
                           _measured(vol, t, tr_sub, space, spacing_mm, threads=workers), key=lambda p: p.rmse)
        else:
            measured = _measured(vol, t, tr, space, spacing_mm, threads=workers)
        out.append(measured)
    out = _refine_closest(out, s, targets, space, spacing_mm)
    known = [None] * len(kept) if plain is None else [plain[j] for j in kept]
    out = [_never_above_plain(p, s, None if kn is not None and all(map(math.isfinite, kn)) else targets[r],
                              threads=workers, known=kn) for r, (p, kn) in enumerate(zip(out, known))]
    return kept, _restore_offsets(out, background)


class _Picked(collections.abc.Sequence):
    """``get(rows[r])`` as float32, read when indexed (the candidates of one synthetic volume)."""

    def __init__(self, get: Callable[[int], np.ndarray], rows: Sequence[int]):
        self.get, self.rows = get, [int(j) for j in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, r):
        if not -len(self.rows) <= r < len(self.rows):
            raise IndexError(r)
        return np.asarray(self.get(self.rows[r]), np.float32)


def refine_factor(coarse_mm: float | None, spacing_mm: Sequence[float]) -> int:
    """Block-mean factor of the coarse-to-fine search (params ``relict.alignment.coarse_mm``): the
    fewest whole voxels whose block reaches ``coarse_mm`` along the grid's coarsest axis (2 at 1 mm,
    2 at 1.5 mm: 3 mm blocks, 3 at 0.7 mm); 1 (full-resolution search) when the grid is already that
    coarse or ``coarse_mm`` is unset.

    Why not the most voxels within ``coarse_mm`` (floor, before issue 47): a 1.5 mm grid then had
    no coarse stage, and a real head CT's 70 x 60 pairs took about an hour at full resolution
    (bench/real_anatomy/alignment_coarse_check.py measures both)."""
    if not coarse_mm:
        return 1
    return max(1, int(math.ceil(float(coarse_mm) / max(float(x) for x in spacing_mm) - 1e-9)))
