"""Pre-selection over all pairs on block-averaged volumes: every flip and coarse rotation, every shift at
once (Fourier cross-correlation, or one GEMM per shift for the fast path); the K lowest squared errors
are a synthetic volume's candidates."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...io import spacing_from_affine
from ..geometry import rotate
from .group import (
    Hypothesis, Loader, SearchSpace, ShiftSearch, _crop_start, _less, _rows_of, _shift_vox, block_mean,
    edge_level,
)


def preselect(synthetic: Sequence[np.ndarray], training: Sequence[np.ndarray], space: SearchSpace,
              spacing_mm: Sequence[float], k: int, factor: int, n_hypotheses: int = 2, workers: int = 1,
              progress: Callable[[int, int], None] | None = None,
              mirrored: Sequence[dict] | None = None) -> tuple[np.ndarray, list[list[list[Hypothesis]]]]:
    """Candidates and their most likely transforms, from block-averaged volumes.

    ``mirrored[i][flips]``, when given, replaces the mirrored block means of synthetic volume
    i by the block means of the mirrored volume (see :func:`preselect_volumes`); otherwise
    each volume is mirrored at full resolution before its block means are taken.

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
            if not flips:
                flipped = small
            elif mirrored is not None:
                flipped = mirrored[i][flips]
            else:
                flipped = block_mean(np.flip(s, axis=flips), factor)
            flipped = np.ascontiguousarray(flipped)
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


def preselect_volumes(synthetic: Sequence, training: Sequence, load: Loader, space: SearchSpace, k: int,
                      factor: int, n_hypotheses: int = 2, workers: int = 1,
                      progress: Callable[[int, int], None] | None = None, engine: str = "gemm",
                      device: str = "cpu", background: float | None = None, max_stack_bytes: float = 4e9,
                      allowed: Sequence[np.ndarray] | None = None
                      ) -> tuple[np.ndarray, list[list[list[Hypothesis]]], list[float], float]:
    """:func:`preselect` on volumes read by ``load``, each read once and kept only block-averaged
    (all of them at full resolution need not fit in memory). ``engine``: "gemm"
    (:func:`preselect_gemm`, the same candidates ~20x faster; ``device`` for its products)
    or "fft" (:func:`preselect`, the reference). ``background`` is subtracted from every
    volume first, so that shifts and rotations pad with it; None: the training volumes'
    :func:`background_level`, measured as they are read. ``allowed``: per synthetic volume, the
    training indices it may be aligned with (the shortlist; gemm engine only).

    Returns:
        ``(candidates, hypotheses, spacing_mm, background)``; the full-resolution spacing is the
        first training volume's (the caller checks that all share one grid); pass ``background``
        on to :func:`align_candidates`.
    """
    spacing = None
    small_syn, small_train, mirrored, levels = [], [], [], []
    raw_train = []
    for ref in training:
        v, affine = load(ref)
        spacing = spacing if spacing is not None else [float(x) for x in spacing_from_affine(affine)]
        levels.append(edge_level(v))
        raw_train.append(block_mean(v, factor))
    if background is None:
        background = float(np.median(levels)) if levels else 0.0
    # block means of (v - c) are the block means of v less c (up to float32 rounding)
    small_train = [_less(b, background) for b in raw_train]
    del raw_train
    for ref in synthetic:
        v = _less(load(ref)[0], background)
        small_syn.append(block_mean(v, factor))
        # the block means of each mirrored volume, not the mirrored block means: on an axis whose
        # remainder n mod factor is odd the block grid is not symmetric, and mirroring block means
        # is half a block off (the demo's 61 voxels in 2-blocks: mirrored replicas fell out of the K)
        mirrored.append({f: block_mean(np.flip(v, axis=f), factor) for f in space.flips() if f})
    sp = [s * factor for s in spacing]
    if engine == "gemm":
        candidates, hypotheses, _ = preselect_gemm(small_syn, small_train, space, sp, k, n_hypotheses=n_hypotheses,
                                                   device=device, threads=workers, progress=progress,
                                                   mirrored=mirrored, max_stack_bytes=max_stack_bytes,
                                                   allowed=allowed)
    elif engine == "fft":
        if allowed is not None:
            raise ValueError("the fft pre-selection searches every pair; the shortlist needs engine 'gemm'")
        candidates, hypotheses = preselect(small_syn, small_train, space, sp, k, factor=1, n_hypotheses=n_hypotheses,
                                           workers=workers, progress=progress, mirrored=mirrored)
    else:
        raise ValueError(f"unknown pre-selection engine {engine!r}; known: gemm, fft")
    return candidates, hypotheses, spacing, background


def preselect_stack_bytes(shape: Sequence[int], spacing_mm: Sequence[float], space: SearchSpace,
                          factor: int) -> int:
    """Bytes of :func:`preselect_gemm`'s stack (every moved and shifted row of one synthetic
    volume) for ``factor``-block means of a ``shape`` grid."""
    n_vox = int(np.prod([n // factor for n in shape]))
    n_shift = int(np.prod([2 * m + 1 for m in _shift_vox(space, spacing_mm, factor)]))
    return len(space.flips()) * len(space.rotations()) * n_shift * n_vox * 4


def preselect_factor(block_mm: float, shape: Sequence[int], spacing_mm: Sequence[float], space: SearchSpace,
                     max_bytes: float) -> int:
    """Block-mean factor of the pre-selection: blocks of about ``block_mm`` (params
    ``relict.alignment.preselect_block_mm``), larger where the stack would not fit in
    ``max_bytes`` (the job's memory budget).

    Why in mm: a factor in voxels meant 6 mm blocks on the demo's 3 mm grid and 3 mm blocks on
    a user's 1.5 mm grid, whose stack (26 group elements x 343 shifts x 354,294 voxels, 12.6 GB)
    stopped the run (issue 29). One factor serves all axes (block means are cubes of voxels);
    it follows the geometric mean of the spacing, so an anisotropic grid gets blocks near
    ``block_mm`` on average.
    """
    if block_mm <= 0:
        raise ValueError(f"preselect_block_mm must be > 0, got {block_mm}")
    mean_mm = float(np.prod([float(s) for s in spacing_mm])) ** (1 / 3)
    factor = max(1, int(round(float(block_mm) / mean_mm)))
    smallest = min(int(n) for n in shape)
    while preselect_stack_bytes(shape, spacing_mm, space, factor) > max_bytes:
        if factor >= smallest // 2:
            raise ValueError(f"pre-selection: the group search does not fit in {max_bytes / 1e9:.2f} GB even on "
                             f"{factor}-voxel blocks of the {list(shape)} grid; give the job more memory "
                             "(resources mem_mb in the profile) or search fewer rotations or shifts")
        factor += 1
    return factor


@dataclass
class CoarseErrors:
    """Mean squared errors per block-mean voxel of every (synthetic, training) pair, from the
    pre-selection: ``plain`` (identity, no shift) and ``aligned`` (the best over the group).

    Why: the full-resolution squared error splits orthogonally into block means and the
    within-block detail, ``MSE_full = MSE_blockmeans + MSE_detail`` (factor^3-weighted,
    edge remainder aside). Alignment mostly acts on the coarse part, so
    ``MSE_full_plain - (plain - aligned)`` estimates the aligned full-resolution MSE of
    pairs that are not aligned at full resolution (:func:`estimated_rmse`).
    """

    plain: np.ndarray
    aligned: np.ndarray


def _shift_stack(a: np.ndarray, max_shift: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``a(x - d)`` (zero where x - d leaves the grid) for every shift d with |d_k| <= max_shift[k]
    (into ``out`` when given)."""
    m = [int(x) for x in max_shift]
    pad = np.pad(np.asarray(a, np.float32), [(x, x) for x in m])
    if out is None:
        out = np.empty((int(np.prod([2 * x + 1 for x in m])), a.size), np.float32)
    view = out.reshape(len(out), *a.shape)
    r = 0
    for i in range(2 * m[0] + 1):  # window (i, j, k) of the padded volume holds a(x - (m - (i, j, k)))
        for j in range(2 * m[1] + 1):
            for k in range(2 * m[2] + 1):
                view[r] = pad[i:i + a.shape[0], j:j + a.shape[1], k:k + a.shape[2]]
                r += 1
    return out


def _summed_squares(a: np.ndarray) -> np.ndarray:
    """Summed-area table of a^2 in float64, with a leading row of zeros per axis.

    Squared and summed in place in the table (the same operations in the same order as
    ``(a ** 2).cumsum(0).cumsum(1).cumsum(2)``, so the same values) instead of through four
    fresh float64 volumes: 0.23-0.26 -> 0.13-0.15 s at 182 x 218 x 182, where the table was a
    fifth of the 1 mm alignment's time.
    """
    sat = np.zeros(tuple(n + 1 for n in a.shape))
    inner = sat[1:, 1:, 1:]
    np.multiply(a, a, out=inner, dtype=np.float64)
    for axis in range(3):
        np.cumsum(inner, axis=axis, out=inner)
    return sat


def _box_energy(sat: np.ndarray, d: Sequence[int]) -> float:
    """sum a^2 over the voxels that stay in the grid when a is shifted by d (from :func:`_summed_squares`)."""
    shape = [n - 1 for n in sat.shape]
    lo = [max(0, -int(x)) for x in d]
    hi = [n - max(0, int(x)) for n, x in zip(shape, d)]
    if any(h <= l for l, h in zip(lo, hi)):
        return 0.0
    return float(sat[hi[0], hi[1], hi[2]] - sat[lo[0], hi[1], hi[2]] - sat[hi[0], lo[1], hi[2]]
                 - sat[hi[0], hi[1], lo[2]] + sat[lo[0], lo[1], hi[2]] + sat[lo[0], hi[1], lo[2]]
                 + sat[hi[0], lo[1], lo[2]] - sat[lo[0], lo[1], lo[2]])


def _shift_energies(a: np.ndarray, max_shift: Sequence[int]) -> np.ndarray:
    """Energy inside the grid of each row of :func:`_shift_stack` (same order), exact in float64."""
    sat = _summed_squares(a)
    m = [int(x) for x in max_shift]
    return np.array([_box_energy(sat, (m[0] - i, m[1] - j, m[2] - k)) for i in range(2 * m[0] + 1)
                     for j in range(2 * m[1] + 1) for k in range(2 * m[2] + 1)])


def _identity_row(max_shift: Sequence[int]) -> int:
    """Row of :func:`_shift_stack` that holds the zero shift."""
    m = [int(x) for x in max_shift]
    return (m[0] * (2 * m[1] + 1) + m[1]) * (2 * m[2] + 1) + m[2]


def _hypotheses_of(score: np.ndarray, group: list, space: SearchSpace, n_hypotheses: int) -> list[Hypothesis]:
    """The hypotheses carried to full resolution for one pair (``score``: per group element),
    as :func:`preselect` picks them."""
    order = np.argsort(score, kind="stable")
    keep = list(order[:n_hypotheses])
    keep += [next(g for g in order if group[g][0] == f) for f in space.flips()]
    return [group[g] for g in dict.fromkeys(sorted(keep, key=lambda g: score[g]))]


def _pooled_shift_stack(a: np.ndarray, max_shift: Sequence[int], q: int) -> np.ndarray:
    """Rows ``block_mean(a(x - d), q)`` (the shifted volume zero outside the grid, then q-block
    means with the edge remainder cropped, as :func:`block_mean`, up to float rounding) for
    the shifts of :func:`_shift_stack` (in another order), without shifting at full size.

    Why: with d = q e + p (0 <= p < q per axis), block B of ``a(x - d)`` averages ``a`` over
    the box [c + q (B - e) - p, c + q (B - e) - p + q) (c: the crop of :func:`block_mean`;
    zero outside the grid): one box sum per block
    from a summed-area table gives the q^3 offset block-mean volumes W_p, and each shift's
    row is W_p moved by e whole blocks.
    """
    a = np.asarray(a, np.float32)
    m = [int(x) for x in max_shift]
    n = a.shape
    nb = [x // q for x in n]
    em = [x // q + 1 for x in m]  # largest |e|
    sat = np.zeros(tuple(x + 1 for x in n))
    sat[1:, 1:, 1:] = a.astype(np.float64).cumsum(0).cumsum(1).cumsum(2)
    blocks = [np.arange(-e, b + e) for e, b in zip(em, nb)]  # B' = B - e over every block and e
    # per axis: (parity, block) -> box ends; all q^3 parities at once by broadcasting
    c0 = _crop_start(n, q)  # block B starts at voxel c + q B (as block_mean)
    lo = [np.clip(c + q * bl[None, :] - np.arange(q)[:, None], 0, x) for bl, x, c in zip(blocks, n, c0)]
    hi = [np.clip(c + q * bl[None, :] - np.arange(q)[:, None] + q, 0, x) for bl, x, c in zip(blocks, n, c0)]
    shp = [(q, 1, 1, len(blocks[0]), 1, 1), (1, q, 1, 1, len(blocks[1]), 1), (1, 1, q, 1, 1, len(blocks[2]))]
    box = 0.0
    for c in itertools.product((0, 1), repeat=3):
        idx = tuple((hi if ck == 0 else lo)[k].reshape(shp[k]) for k, ck in enumerate(c))
        box = box + (-1) ** sum(c) * sat[idx]
    box = (box / q ** 3).astype(np.float32)  # (px, py, pz, bx, by, bz)
    pooled = {p: box[p] for p in itertools.product(range(q), repeat=3)}
    shifts = list(itertools.product(*[range(-x, x + 1) for x in m]))
    out = np.empty((len(shifts), int(np.prod(nb))), np.float32)
    view = out.reshape(len(out), *nb)
    for r, d in enumerate(shifts):
        p = tuple(x % q for x in d)
        e = [(x - pk) // q for x, pk in zip(d, p)]
        view[r] = pooled[p][em[0] - e[0]:em[0] - e[0] + nb[0], em[1] - e[1]:em[1] - e[1] + nb[1],
                            em[2] - e[2]:em[2] - e[2] + nb[2]]
    return out


def preselect_gemm(synthetic: Sequence[np.ndarray], training: Sequence[np.ndarray] | np.ndarray,
                   space: SearchSpace, spacing_mm: Sequence[float], k: int, n_hypotheses: int = 2,
                   device: str = "cpu", threads: int | None = None, rows_per_gemm: int = 512,
                   prune: bool = True, progress: Callable[[int, int], None] | None = None,
                   stats: dict | None = None, max_stack_bytes: float = 4e9, mirrored: Sequence[dict] | None = None,
                   allowed: Sequence[np.ndarray] | None = None
                   ) -> tuple[np.ndarray, list[list[list[Hypothesis]]], CoarseErrors]:
    """:func:`preselect` (with ``factor=1``: inputs already block-averaged) by matrix products
    instead of one FFT per pair and group element.

    Why: the squared error for every shift d against every training volume t is
    ``|a_d|^2 + |t|^2 - 2 <a_d, t>``, with ``a_d`` the moved synthetic volume shifted by d
    (zero outside the grid). Stacking the ~125 shifted copies as rows and the training
    volumes as columns makes all cross terms one float32 GEMM (~75-180 GFLOP/s on 2 cores,
    against ~3 ms per small FFT), and the energies are exact float64 box sums. The values
    are those of :func:`preselect` (which also works in float32) up to rounding, so the
    candidates and hypotheses are the same unless two squared errors tie to ~1e-6.

    Early rejection (``prune``), exact: q-block averages of both volumes can only lower the
    squared error (Jensen: the sum over q^3 voxels of (a - t)^2 is at least q^3 (mean a - mean t)^2),
    so the same search on q-block means of the shifted rows (q = 4, then 2 for the pairs left;
    q^3 fewer voxels) gives a lower bound of every pair's best squared error, less a float32
    rounding margin. The squared error at the transform that bound chose (or the identity's)
    is an upper bound. A pair whose lower bound is above the k-th smallest upper bound cannot
    be a candidate; only the others are scored exactly, so the candidates and hypotheses are
    those of the exhaustive search. Pairs not scored exactly get, in ``coarse.aligned``, their
    upper bound (a smaller gain than the exact search would give).

    Args:
        synthetic, training: block-averaged volumes of one shape (``training`` may be an
            (T, X, Y, Z) array); ``spacing_mm`` is their voxel size.
        device: torch device for the products ("cpu", "cuda", ...).
        threads: torch CPU threads during the call (restored afterwards).
        rows_per_gemm: shifted rows multiplied at once (several group elements share a GEMM).
        max_stack_bytes: refuse (ValueError) when the moved and shifted rows of one synthetic
            volume, all kept for the exact pass, would exceed this.
        stats: if given, ``pairs_after_bounds`` gets, per synthetic volume, the training volumes
            left after each bound (the last: those scored exactly).
        mirrored: per synthetic volume, ``{flips: block means of the mirrored volume}``
            (:func:`preselect_volumes`); None mirrors the block means themselves.
        allowed: per synthetic volume, the training indices it may be aligned with (the
            shortlist search, ``relict.search``: its candidates); the others are never
            scored and are not candidates. None: every training volume.

    Returns:
        ``(candidates, hypotheses, coarse)`` as :func:`preselect`, plus :class:`CoarseErrors`
        of all pairs (mean squared error per block-mean voxel).
    """
    import torch

    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        dev = torch.device(device)
        n_t = len(training)
        k = min(k, n_t)
        shape = tuple(np.asarray(training[0]).shape)
        n_vox = int(np.prod(shape))
        mat = np.empty((n_t, n_vox), np.float32)
        for j in range(n_t):
            mat[j] = np.asarray(training[j], np.float32).ravel()
        t_energy_np = np.einsum("ij,ij->i", mat, mat, dtype=np.float64)
        t_energy = torch.from_numpy(t_energy_np).to(dev)
        levels = [q for q in (4, 2) if all(n >= q for n in shape)] if prune and n_t > k else []
        pooled_t = {}
        for q in levels:
            pm = np.stack([block_mean(t.reshape(shape), q).ravel() for t in mat])
            pooled_t[q] = (torch.from_numpy(pm).to(dev),
                           torch.from_numpy(np.einsum("ij,ij->i", pm, pm, dtype=np.float64)).to(dev))
        t_mat = torch.from_numpy(mat).to(dev)
        t_mat_np = mat if dev.type == "cpu" else None  # the same memory on the CPU
        del mat
        max_shift = _shift_vox(space, spacing_mm)
        n_shift = int(np.prod([2 * m + 1 for m in max_shift]))
        group = [(f, ax, an) for f in space.flips() for ax, an in space.rotations()]
        per_gemm = max(1, int(rows_per_gemm) // n_shift)
        if len(group) * n_shift * n_vox * 4 > max_stack_bytes:
            raise ValueError(f"pre-selection: {len(group)} group elements x {n_shift} shifts x {n_vox} voxels "
                             f"do not fit in max_stack_bytes={max_stack_bytes:.3g}; use a larger block-mean factor")
        stack = np.empty((len(group) * n_shift, n_vox), np.float32)  # every moved and shifted row
        out = np.empty((len(synthetic), k), np.int64)
        coarse = CoarseErrors(np.empty((len(synthetic), n_t)), np.empty((len(synthetic), n_t)))
        hyps = []
        for i, s in enumerate(synthetic):
            small_s = np.asarray(s, np.float32)
            def mirror(f):
                if not f:
                    return small_s
                return mirrored[i][f] if mirrored is not None else np.flip(small_s, axis=f)

            moved = [rotate(np.ascontiguousarray(mirror(f)), ax, an, spacing_mm) for f, ax, an in group]
            for g, v in enumerate(moved):
                _shift_stack(v, max_shift, out=stack[g * n_shift:(g + 1) * n_shift])
            stack_energy = torch.from_numpy(np.concatenate([_shift_energies(v, max_shift) for v in moved])).to(dev)
            plain_row = torch.from_numpy(moved[0].reshape(1, -1)).to(dev)  # identity, zero shift
            coarse.plain[i] = (float(np.sum(moved[0].astype(np.float64) ** 2)) + t_energy_np
                               - 2.0 * (plain_row @ t_mat.T).double().cpu().numpy()[0]).clip(0) / n_vox

            stack_energy_np = stack_energy.cpu().numpy()
            pooled_rows: dict[int, list[np.ndarray]] = {}

            def scores(cols: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray | None]:
                """min over shifts of the squared error, (group, len(cols)), and for q > 1 the row of
                the stack that attains it; q > 1: the lower bound q^3 x that of the q-block means
                (Jensen), less a float32 rounding margin."""
                tm, te = pooled_t[q] if q > 1 else (t_mat, t_energy)
                tm, te = _rows_of(tm, cols), _rows_of(te, cols)
                if q > 1 and q not in pooled_rows:
                    pooled_rows[q] = [_pooled_shift_stack(v, max_shift, q) for v in moved]
                res = np.empty((len(group), len(cols)))
                arg = np.empty((len(group), len(cols)), np.int64) if q > 1 else None
                for g0 in range(0, len(group), per_gemm):
                    chunk = range(g0, min(g0 + per_gemm, len(group)))
                    if q > 1:
                        r = np.concatenate([pooled_rows[q][g] for g in chunk])
                        e = torch.from_numpy(np.einsum("ij,ij->i", r, r, dtype=np.float64)).to(dev)
                    else:  # rows of the full stack, built once per synthetic volume
                        r = stack[g0 * n_shift:(g0 + len(chunk)) * n_shift]
                        e = stack_energy[g0 * n_shift:(g0 + len(chunk)) * n_shift]
                    a = torch.from_numpy(r).to(dev)
                    ssd = e[:, None] + te[None, :] - 2.0 * (a @ tm.T).double()
                    if q > 1:
                        ssd = ssd - 1e-5 * (e[:, None] + te[None, :])
                    ssd = ssd.clamp_min_(0.0).reshape(len(chunk), n_shift, len(cols))
                    low = ssd.min(dim=1)
                    res[g0:g0 + len(chunk)] = low.values.cpu().numpy() * float(q ** 3)
                    if q > 1:  # pooled rows run over the shifts in product order, the stack in reverse
                        arg[g0:g0 + len(chunk)] = n_shift - 1 - low.indices.cpu().numpy()
                return res, arg

            def exact_at(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
                """Squared error of stack row rows[c] against training cols[c]: an upper bound of the pair's best."""
                out_ = np.empty(len(cols))
                for c0 in range(0, len(cols), 128):
                    r, c = rows[c0:c0 + 128], cols[c0:c0 + 128]
                    if dev.type == "cpu":  # float64 dot products of the rows, no float32 product array
                        cross = np.einsum("ij,ij->i", stack[r], t_mat_np[c], dtype=np.float64)
                    else:
                        t = t_mat.index_select(0, torch.from_numpy(c).to(dev))
                        cross = (torch.from_numpy(stack[r]).to(dev) * t).sum(dim=1, dtype=torch.float64).cpu().numpy()
                    out_[c0:c0 + 128] = stack_energy_np[r] + t_energy_np[c] - 2 * cross
                return np.maximum(out_, 0.0)

            score = np.full((len(group), n_t), np.inf)
            upper = coarse.plain[i] * n_vox  # the identity's squared error: an upper bound of each best
            mine = np.arange(n_t) if allowed is None else np.unique(np.asarray(allowed[i], np.int64))
            if allowed is not None:  # pairs outside the shortlist: never candidates
                upper = np.where(np.isin(np.arange(n_t), mine), upper, np.inf)
            if levels and len(mine) > k:
                # Early rejection: a pair whose lower bound exceeds the k-th smallest upper bound
                # (the squared error at the transform its bound chose, or the identity's) cannot be
                # a candidate; only the pairs left are scored exactly, over the whole group.
                cols = mine
                sizes = []
                for q in levels:
                    res, arg = scores(cols, q)
                    bound = res.min(axis=0)
                    near = np.argsort(bound, kind="stable")[: 4 * k]  # upper bounds where they matter
                    g_best = res[:, near].argmin(axis=0)
                    at = exact_at(g_best * n_shift + arg[g_best, near], cols[near])
                    upper[cols[near]] = np.minimum(upper[cols[near]], at)
                    tau = np.partition(upper, k - 1)[k - 1]
                    cols = cols[bound <= tau]
                    sizes.append(len(cols))
                if stats is not None:
                    stats["pairs_after_bounds"] = stats.get("pairs_after_bounds", []) + [sizes]
                score[:, cols] = scores(cols, 1)[0]
            else:
                score[:, mine] = scores(mine, 1)[0]
            best = score.min(axis=0)
            # pairs not scored exactly: the squared error at their bound's transform (>= their best);
            # the identity is in the group: never above plain (the two differ by float32 rounding only)
            coarse.aligned[i] = np.minimum(np.where(np.isfinite(best), best, upper) / n_vox, coarse.plain[i])
            if len(mine) < k:
                raise ValueError(f"synthetic volume {i}: {len(mine)} allowed training volumes, fewer than the "
                                 f"{k} candidates asked for")
            out[i] = np.lexsort((np.arange(n_t), best))[:k]
            hyps.append([_hypotheses_of(score[:, j], group, space, n_hypotheses) for j in out[i]])
            if progress:
                progress(i + 1, len(synthetic))
        return out, hyps, coarse
    finally:
        torch.set_num_threads(old_threads)
