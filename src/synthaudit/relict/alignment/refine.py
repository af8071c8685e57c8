"""Full-resolution search of one synthetic volume against its candidates: the group search, the sub-voxel
shift, the rotation refined locally, the intensity affine, the pair measured over the overlap, and the
rule that an aligned distance never exceeds the plain one."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..geometry import matrix_rotvec, rigid_warp, rotate
from ..geometry import rotvec_matrix as _rotvec_matrix
from .group import (
    Hypothesis, PairResult, SearchSpace, ShiftSearch, Transform, _crop_start, _less, _shift_vox, apply,
    block_mean,
)


def _restore_offsets(pairs: list[PairResult], background: float) -> list[PairResult]:
    """Intensity fits made on background-subtracted volumes, in the volumes' own units:
    y - c = a (x - c) + b  <=>  y = a x + b + c (1 - a)."""
    if background:
        for p in pairs:
            if p.transform.scale != 1.0 or p.transform.offset != 0.0:
                p.transform.offset = float(p.transform.offset + background * (1.0 - p.transform.scale))
    return pairs


def _rotate_fast(volume: np.ndarray, axis: int, angle_deg: float, spacing_mm: Sequence[float],
                 workers: int = 1) -> np.ndarray:
    """:func:`rotate` by :func:`~synthaudit.relict.align_kernels.affine_linear` (SciPy's values to
    float32 rounding, ~4x faster): the coarse-to-fine search's rotations."""
    if axis < 0 or angle_deg == 0:
        return volume
    from ..align_kernels import affine_linear
    from ..geometry import rotation_pullback

    m, offset = rotation_pullback(volume.shape, axis, angle_deg, spacing_mm)
    return affine_linear(volume, m, offset, threads=workers)


def _group_search(s: np.ndarray, fixed: Sequence, search: ShiftSearch, space: SearchSpace,
                  spacing_mm: Sequence[float], hypotheses: Sequence[Sequence[Hypothesis]] | None,
                  refine_angle: bool = True, rotate_fn: Callable = rotate,
                  keep: int | None = None) -> tuple[list[tuple[float, Transform]], Callable, list[int]]:
    """The group search shared by :func:`align_pair_set` (full resolution) and
    :func:`_coarse_search` (block means): per target the lowest squared error over its
    hypotheses and every shift, then the local angle refinement about the best angle.

    ``keep``: only the ``keep`` targets with the lowest squared error after the hypotheses
    (ties: the earlier target) get the angle refinement; the ranked search of
    :func:`align_ranked` refines only those at full resolution.

    Returns:
        ``(best, moved, kept)``: per target (squared error, transform); ``moved(flips, axis,
        angle)`` -> the moved volume and its FFTs (each transform computed once); the kept
        targets' indices in rank order (all of them, in order, without ``keep``).
    """
    n_targets = len(fixed)
    best: list[tuple[float, Transform]] = [(math.inf, Transform()) for _ in fixed]
    if hypotheses is None:
        group = [(f, ax, an) for f in space.flips() for ax, an in space.rotations()]
        hypotheses = [group] * n_targets
    # The unrotated element of every flip subset is always tried: block means of a grid whose
    # size is odd cannot be mirrored exactly (the block grid is half a block off its mirror
    # image), so the pre-selection may rank a mirrored copy's flip with a spurious rotation
    # first, and the refinement about that angle never returns to 0 (the demo's 61-voxel
    # axis: two of four mirrored replicas missed without this).
    always = [(f, -1, 0.0) for f in space.flips()]
    todo: dict[Hypothesis, list[int]] = {}
    for j, hs in enumerate(hypotheses):
        for h in dict.fromkeys([(tuple(h[0]), int(h[1]), float(h[2])) for h in list(hs) + always]):
            todo.setdefault(h, []).append(j)

    cache: dict[Hypothesis, tuple[np.ndarray, tuple]] = {}

    def moved(flips, axis, angle):
        """The flipped and rotated synthetic volume and its FFTs (each transform computed once)."""
        key = (tuple(flips), axis, angle)
        if key not in cache:
            base = np.ascontiguousarray(np.flip(s, axis=flips) if flips else s)
            vol = rotate_fn(base, axis, angle, spacing_mm, workers=search.workers)
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
    if keep is None or keep >= n_targets:
        kept = list(range(n_targets))
    else:
        kept = [int(j) for j in np.argsort([b[0] for b in best], kind="stable")[:max(int(keep), 0)]]
    step = space.refine_step()
    if step > 0 and refine_angle:  # local refinement about each pair's best angle, shared where pairs agree
        refine: dict[Hypothesis, list[int]] = {}
        for j in kept:
            t0 = best[j][1]
            for axis in ([t0.rotation_axis] if t0.rotation_axis >= 0 else sorted(set(space.rotation_axes))):
                for angle in (t0.angle_deg - step, t0.angle_deg + step):
                    if angle != 0:
                        refine.setdefault((t0.flips, axis, angle), []).append(j)
        for (flips, axis, angle), only in refine.items():
            consider(flips, axis, angle, only)
    return best, moved, kept


def _fit_intensity(aligned: np.ndarray, t: np.ndarray, tr: Transform, space: SearchSpace,
                   region=None) -> np.ndarray:
    """With ``intensity_affine``: the least-squares fit t ~ a x + b applied (and stored in ``tr``),
    fitted over ``region`` (:func:`overlap`; None: every voxel)."""
    if space.intensity_affine:
        x = (aligned if region is None else aligned[region]).ravel().astype(np.float64)
        y = (t if region is None else t[region]).ravel().astype(np.float64)
        var = x.var()
        tr.scale = float(((x - x.mean()) * (y - y.mean())).mean() / var) if var > 0 else 1.0
        tr.offset = float(y.mean() - tr.scale * x.mean())
        aligned = aligned * np.float32(tr.scale) + np.float32(tr.offset)
    return aligned


def align_pair_set(s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace,
                   spacing_mm: Sequence[float], hypotheses: Sequence[Sequence[Hypothesis]] | None = None,
                   workers: int = 1, background: float = 0.0) -> list[PairResult]:
    """Align one synthetic volume to each target at full resolution; MAE and RMSE of each aligned pair.

    ``hypotheses[j]``: the (flips, axis, angle) to try for target j (from :func:`preselect`);
    None tries the whole group for every target. Every shift in range is tried for each,
    then the best angle is refined locally and the shift to sub-voxel precision (kept only
    where it lowers the squared error: linear interpolation blurs). A pair whose aligned RMSE
    exceeds the plain one keeps the identity. ``background`` is subtracted from every volume
    first (:func:`background_level`): shifts and rotations pad with it.
    """
    s = _less(s, background)
    targets = [_less(t, background) for t in targets]
    search = ShiftSearch(s.shape, _shift_vox(space, spacing_mm), workers)
    fixed = [search.fixed(t) for t in targets]
    best, moved, _ = _group_search(s, fixed, search, space, spacing_mm, hypotheses)
    out = []
    for j, t in enumerate(targets):
        tr = best[j][1]
        vol, mov = moved(tr.flips, tr.rotation_axis, tr.angle_deg)
        measured = _measured(vol, t, tr, space, spacing_mm, exact=True)
        if space.subvoxel and any(_shift_vox(space, spacing_mm)):
            sub = Transform(tr.flips, tr.rotation_axis, tr.angle_deg,
                            search.best(search.ssd(mov, fixed[j]), subvoxel=True)[0])
            if sub.shift_vox != tr.shift_vox:
                measured = min(measured, _measured(vol, t, sub, space, spacing_mm, exact=True), key=lambda p: p.rmse)
        out.append(measured)
    out = _refine_closest(out, s, targets, space, spacing_mm, exact=True)
    out = [_never_above_plain(p, s, t, exact=True) for p, t in zip(out, targets)]
    return _restore_offsets(out, background)


# A voxel of the training frame is compared only where the moved synthetic volume has data:
# its source lies inside the synthetic volume's field of view (issue 43). Shifts and rotations
# pad what they uncover with the background level; where the body fills the field of view that
# band is compared with tissue and RMSE squares it (on an abdominal CT a shifted copy's aligned
# RMSE was 151 against its 35 MAE, among new patients'). ``VALID_LEVEL``: a voxel whose
# interpolated ones-volume reaches this is inside (its interpolation neighbours all are).
VALID_LEVEL = np.float32(1.0 - 1e-4)


_ONES_ROTATED: dict = {}


def overlap(shape: Sequence[int], tr: Transform, spacing_mm: Sequence[float], fast: bool = False):
    """Where ``tr`` moves data of a volume of ``shape``: None (everywhere: no shift, no rotation),
    a tuple of slices (a shift alone: a box), or a boolean mask (a rotation)."""
    from ..align_kernels import linear_shift_axis

    shape = tuple(int(n) for n in shape)
    rotated = tr.rotvec_deg is not None or (tr.rotation_axis >= 0 and tr.angle_deg != 0)
    if not rotated:
        if not any(tr.shift_vox):
            return None
        box = []
        for n, sh in zip(shape, tr.shift_vox):
            _, _, lo, hi = linear_shift_axis(float(sh), n) if sh else (0, 0, 0, n)
            box.append(slice(lo, max(lo, hi)))
        return tuple(box)
    if tr.rotvec_deg is not None:  # refine_rigid's joint rotation and shift, one interpolation
        ones = apply(np.ones(shape, np.float32), Transform(shift_vox=tr.shift_vox, rotvec_deg=tr.rotvec_deg),
                     spacing_mm, fast=fast)
        return ones >= VALID_LEVEL
    ones = apply(_ones_rotated(shape, tr, spacing_mm), Transform(shift_vox=tr.shift_vox), spacing_mm)
    return ones >= VALID_LEVEL


# the rotated ones-volumes kept (bytes): every grid rotation of a search (26 for the default group,
# with the refinement's angles a few more) at 1.5 mm; before issue 47 four were kept, and a synthetic
# volume's candidates, each with its own rotation, recomputed them (about 7 % of the alignment)
ONES_ROTATED_BYTES = 320 * 2 ** 20


def _ones_rotated(shape: tuple, tr: Transform, spacing_mm: Sequence[float]) -> np.ndarray:
    """The ones-volume rotated by ``tr``'s grid rotation (the shift not applied), cached."""
    key = (shape, int(tr.rotation_axis), float(tr.angle_deg), tuple(float(x) for x in spacing_mm))
    if key not in _ONES_ROTATED:
        per = 4 * math.prod(shape)
        while _ONES_ROTATED and (len(_ONES_ROTATED) + 1) * per > max(ONES_ROTATED_BYTES, 4 * per):
            _ONES_ROTATED.pop(next(iter(_ONES_ROTATED)))
        _ONES_ROTATED[key] = rotate(np.ones(shape, np.float32), tr.rotation_axis, tr.angle_deg, spacing_mm)
    return _ONES_ROTATED[key]


def _outside_sums(t: np.ndarray, box: tuple) -> tuple[float, float]:
    """``(sum |t|, sum t^2)`` outside ``box`` (slices): the band a shift uncovers, where the shifted
    volume is 0, as disjoint slabs (axis 0's, then axis 1's inside axis 0's box, ...): a few
    per cent of the voxels, not two passes over all of them."""
    abs_sum = sq_sum = 0.0
    inner = [slice(None)] * t.ndim
    for axis, b in enumerate(box):
        for part in (slice(0, b.start), slice(b.stop, t.shape[axis])):
            if part.stop > part.start:
                idx = list(inner)
                idx[axis] = part
                slab = t[tuple(idx)]
                abs_sum += float(np.abs(slab).sum(dtype=np.float64))
                sq_sum += float(np.square(slab, dtype=np.float64).sum())
        inner[axis] = b
    return abs_sum, sq_sum


def _region_measures(aligned: np.ndarray, t: np.ndarray, region, exact: bool) -> tuple[float, float]:
    """MAE and RMSE over ``region`` (:func:`overlap`; None: every voxel); ``exact``: from the
    float64 difference (the reference path), else :func:`_pair_measures`'s float32 one."""
    a = aligned if region is None else aligned[region]
    b = t if region is None else t[region]
    if a.size == 0:
        return math.inf, math.inf
    if exact:
        diff = a.astype(np.float64) - b
        return float(np.abs(diff).mean()), float(np.sqrt((diff ** 2).mean()))
    return _pair_measures(a, b)


def _measured(vol: np.ndarray, t: np.ndarray, tr: Transform, space: SearchSpace,
              spacing_mm: Sequence[float], exact: bool = False, threads: int | None = None) -> PairResult:
    """MAE and RMSE of the moved volume ``vol`` shifted (and intensity-fitted) by ``tr`` against ``t``,
    over the voxels where the moved volume has data (:func:`overlap`: ``tr``'s rotation, which
    ``vol`` already holds, and shift); ``exact``: from the float64 difference, the reference
    path's definition. Otherwise, without an intensity fit or a rotation, the shifted volume is
    never written out (:func:`~synthaudit.relict.align_kernels.shifted_error_sums`: its voxels
    are :func:`apply`'s, zero outside the overlap's box, so the box's sums are the grid's less
    the target's own outside it)."""
    tr = Transform(tr.flips, tr.rotation_axis, tr.angle_deg, tr.shift_vox)
    if not exact and not space.intensity_affine and tr.rotation_axis >= 0 and tr.angle_deg != 0:
        # a grid rotation: the overlap is the rotated ones-volume shifted alike, summed in the same pass
        from ..align_kernels import masked_error_sums

        abs_sum, sq_sum, n = masked_error_sums(vol, _ones_rotated(tuple(t.shape), tr, spacing_mm), t, tr.shift_vox,
                                               float(VALID_LEVEL), threads=threads)
        if n == 0:
            return PairResult(tr, math.inf, math.inf)
        return PairResult(tr, abs_sum / n, math.sqrt(sq_sum / n))
    region = overlap(t.shape, tr, spacing_mm)
    if not exact and not space.intensity_affine and (region is None or isinstance(region, tuple)):
        from ..align_kernels import shifted_error_sums

        abs_sum, sq_sum = shifted_error_sums(vol, t, tr.shift_vox, threads=threads)
        n = t.size
        if region is not None:
            n = math.prod(max(0, r.stop - r.start) for r in region)
            if n == 0:
                return PairResult(tr, math.inf, math.inf)
            out_abs, out_sq = _outside_sums(t, region)
            abs_sum, sq_sum = max(0.0, abs_sum - out_abs), max(0.0, sq_sum - out_sq)
        return PairResult(tr, abs_sum / n, math.sqrt(sq_sum / n))
    aligned = apply(vol, Transform(shift_vox=tr.shift_vox), spacing_mm)
    aligned = _fit_intensity(aligned, t, tr, space, region)
    return PairResult(tr, *_region_measures(aligned, t, region, exact))


def _refine_closest(found: list[PairResult], s: np.ndarray, targets: Sequence[np.ndarray], space: SearchSpace,
                    spacing_mm: Sequence[float], exact: bool = False) -> list[PairResult]:
    """The ``space.refine_top`` closest pairs with their rotation and shift refined jointly
    (:func:`refine_rigid`); a refined pair replaces the grid's only where its RMSE is lower.

    Why: the grid rotates about one voxel axis at a time, but a generator's augmentation
    (MONAI's RandAffine, say) rotates about all three at once. On a real T1 head at 1.5 mm, a
    copy rotated 4-8 degrees about a random axis kept an RMSE of 8.8-13.4 after the grid
    search against 5.1-8.2 at its true pose (noise 2); the joint refinement on 3 mm block means
    reached 0.04-0.4 degrees of the true rotation. The closest few pairs are where a copy's
    source is, and where the ratio's numerator comes from.
    """
    if space.refine_top <= 0 or (space.max_angle_deg <= 0 and space.max_shift_mm <= 0) or not found:
        return found
    out = list(found)
    for j in np.argsort([p.rmse for p in out], kind="stable")[: space.refine_top]:
        t = np.asarray(targets[j], np.float32)
        tr = refine_rigid(s, t, out[j].transform, space, spacing_mm, fast=not exact)
        if tr is None:
            continue
        if not exact and not space.intensity_affine:
            measured = _rigid_measured(s, t, tr, spacing_mm)
        else:
            region = overlap(t.shape, tr, spacing_mm, fast=not exact)
            aligned = _fit_intensity(apply(s, tr, spacing_mm, fast=not exact), t, tr, space, region)
            measured = PairResult(tr, *_region_measures(aligned, t, region, exact))
        if measured.rmse < out[j].rmse:
            out[j] = measured
    return out


def _rigid_measured(s: np.ndarray, t: np.ndarray, tr: Transform, spacing_mm: Sequence[float]) -> PairResult:
    """MAE and RMSE of ``s`` moved by a joint rotation and shift (``tr.rotvec_deg``: :func:`apply` with
    ``fast``) against ``t`` over :func:`overlap`'s voxels, in one pass
    (:func:`~synthaudit.relict.align_kernels.affine_error_sums`): the warped ones-volume of
    :func:`overlap` is 1 exactly where the source point lies inside the grid."""
    from ..align_kernels import affine_error_sums
    from ..geometry import rigid_pullback

    base = np.ascontiguousarray(np.flip(s, axis=tr.flips)) if tr.flips else s
    m, offset = rigid_pullback(s.shape, tr.rotation_matrix(), np.asarray(tr.shift_vox, float) * np.asarray(
        spacing_mm, float), spacing_mm)
    abs_sum, sq_sum, n = affine_error_sums(base, t, m, offset)
    return PairResult(tr, abs_sum / n, math.sqrt(sq_sum / n)) if n else PairResult(tr, math.inf, math.inf)


def refine_rigid(s: np.ndarray, t: np.ndarray, start: Transform, space: SearchSpace, spacing_mm: Sequence[float],
                 iterations: int = 15, fast: bool = False) -> Transform | None:
    """The rotation (about any 3D axis) and shift of ``start`` refined jointly by damped
    Gauss-Newton (Levenberg-Marquardt) on the squared error, on block means of about
    ``space.refine_block_mm``; the flip is kept.

    The aligned volume A(p) = S(R^T (p - c - d) + c) (:func:`~synthaudit.relict.geometry.rigid_warp`)
    moves, for a small rotation w and shift e, by -grad A . (w x (p - c - d) + e): the six
    Jacobian columns are -(p - c - d) x grad A and -grad A (the Lucas-Kanade form), and a step
    is kept only when the squared error falls. Both volumes are background-subtracted already
    (the caller's), so the zero that the warp brings in is the background.

    Returns:
        The refined transform (``rotvec_deg``, ``shift_vox``), or None when it leaves the
        group: a rotation beyond ``max_angle_deg`` plus the grid's refinement step, or a shift
        beyond ``max_shift_mm`` on any axis (the search stays within the augmentations asked for).
        ``fast``: the warps by :func:`~synthaudit.relict.align_kernels.affine_linear` (coarse-to-fine path).
    """
    sp = np.asarray(spacing_mm, float)
    q = max(1, int(round(space.refine_block_mm / float(np.prod(sp)) ** (1 / 3))))
    base = np.ascontiguousarray(np.flip(s, axis=start.flips)) if start.flips else np.asarray(s, np.float32)
    if fast:  # the coarse-to-fine path: block means and the normal equations by the fused kernels
        from ..align_kernels import block_mean_fast, lk_normal_equations

        small_s, small_t = (block_mean_fast(v, q, _crop_start(v.shape, q)) if q > 1 else np.asarray(v, np.float32)
                            for v in (base, t))
    else:
        small_s, small_t = block_mean(base, q), block_mean(t, q)
    # the full grid's centre in block coordinates (block b covers voxels c0 + q b ... + q - 1)
    centre = ((np.asarray(s.shape, float) - 1) / 2 - np.asarray(_crop_start(s.shape, q)) - (q - 1) / 2) / q
    sp_b = sp * q
    rel = None if fast else (np.indices(small_s.shape, dtype=np.float64).reshape(3, -1).T - centre) * sp_b  # p - c
    target = small_t.ravel().astype(np.float64)
    rot, shift = start.rotation_matrix(), np.asarray(start.shift_vox, float) * sp

    def error(r, d):
        a = rigid_warp(small_s, r, d, sp_b, centre, fast=fast)
        return a, float(np.sum((a.ravel().astype(np.float64) - target) ** 2))

    moved, err = error(rot, shift)
    damping = 1e-3
    for _ in range(iterations):
        if fast:
            h, b = lk_normal_equations(moved, small_t, centre, sp_b, shift)
        else:
            grad = np.stack(np.gradient(moved.astype(np.float64), *sp_b), axis=-1).reshape(-1, 3)
            jac = -np.concatenate([np.cross(rel - shift, grad), grad], axis=1)
            resid = moved.ravel().astype(np.float64) - target
            h, b = jac.T @ jac, jac.T @ resid
        scale = np.diag(h) + 1e-12 * (np.trace(h) + 1e-300)
        improved = False
        while damping < 1e4:
            try:
                step = -np.linalg.solve(h + damping * np.diag(scale), b)
            except np.linalg.LinAlgError:
                damping *= 10
                continue
            r_new, d_new = _rotvec_matrix(step[:3]) @ rot, shift + step[3:]
            m_new, e_new = error(r_new, d_new)
            if e_new < err:
                rot, shift, moved, err, improved = r_new, d_new, m_new, e_new, True
                damping = max(damping / 10, 1e-7)
                break
            damping *= 10
        if not improved or (np.degrees(np.abs(step[:3])).max() < 1e-3 and np.abs(step[3:]).max() < 1e-3):
            break
    rotvec = np.degrees(matrix_rotvec(rot))
    if np.linalg.norm(rotvec) > space.max_angle_deg + space.refine_step() + 1e-9 or \
            np.any(np.abs(shift) > space.max_shift_mm + 1e-9):
        return None
    return Transform(flips=start.flips, shift_vox=tuple(float(x) for x in shift / sp),
                     rotvec_deg=tuple(float(x) for x in rotvec))


def _never_above_plain(found: PairResult, s: np.ndarray, t: np.ndarray, exact: bool = False,
                       threads: int | None = None, known: tuple[float, float] | None = None) -> PairResult:
    """``found``, or the identity with the plain values when those are lower (the identity is in
    the group: an aligned RMSE above the plain one is a search that lost, never a distance).
    ``known``: the pair's plain (MAE, RMSE) as the image level computed them (finite), instead
    of another pass over the volumes."""
    if known is not None and all(math.isfinite(x) for x in known):
        plain = PairResult(Transform(), float(known[0]), float(known[1]))
    elif exact:
        diff = np.asarray(s, np.float64) - np.asarray(t, np.float64)
        plain = PairResult(Transform(), float(np.abs(diff).mean()), float(np.sqrt((diff ** 2).mean())))
    else:
        from ..align_kernels import shifted_error_sums

        abs_sum, sq_sum = shifted_error_sums(s, t, (0.0, 0.0, 0.0), threads=threads)
        plain = PairResult(Transform(), abs_sum / t.size, math.sqrt(sq_sum / t.size))
    return plain if plain.rmse < found.rmse else found


def _pair_measures(aligned: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """MAE and RMSE of float32 volumes: the float32 difference, sums in float64 (the same
    values as the float64 difference to ~1e-7 relative, 3x faster)."""
    d = (np.asarray(aligned, np.float32) - np.asarray(t, np.float32)).ravel()
    n = d.size
    return float(np.abs(d).sum(dtype=np.float64) / n), math.sqrt(float(np.square(d).sum(dtype=np.float64)) / n)
