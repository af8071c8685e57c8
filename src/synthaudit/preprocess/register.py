"""Affine registration and resampling between voxel grids (SimpleITK behind a numpy API).

Why this module exists: the rest of synthaudit speaks nibabel (arrays indexed
``(i, j, k)`` plus a 4x4 RAS affine), while SimpleITK works in LPS physical space with
``(k, j, i)`` arrays. Every conversion between the two lives here, so that a sign or
axis-order mistake can only happen (and be tested) in one place.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import SimpleITK as sitk

# RAS <-> LPS: negate x and y. The matrix is its own inverse.
_RAS_TO_LPS = np.diag([-1.0, -1.0, 1.0])

# Direction matrices read from NIfTI headers carry float32 rounding; anything beyond
# that is a shear, which an ITK image (orthonormal direction x spacing) cannot hold.
_ORTHONORMAL_TOL = 1e-4

# Convergence of each level (ITK's window convergence monitor, as ANTs uses it): the
# optimiser stops when the metric's trend over the last _CONVERGENCE_WINDOW iterations,
# normalised, falls below _CONVERGENCE_MIN_VALUE, i.e. when it has stopped improving.
_CONVERGENCE_MIN_VALUE = 1e-6
_CONVERGENCE_WINDOW = 10

# The rotation search scores poses on an 8 mm grid of images smoothed with a 4 mm
# Gaussian, whatever the input resolution: coarse enough that the 125 trial poses
# cost about 0.2 s, smooth enough that the best pose lands inside the gradient
# descent's basin. The images are first box-averaged to 4 mm voxels, which keeps the
# smoothing cheap on 1 mm inputs (a 4 mm Gaussian on a full 1 mm head takes seconds).
_SEARCH_VOXEL_MM = 8.0

# The transform models a registration can fit, in the order they run (see register_affine).
_STAGE_CHOICES = (("rigid", "affine"), ("affine",), ("rigid",))


@dataclass
class LevelReport:
    """What the optimiser did at one resolution level of one stage (for QC and the log).

    Attributes:
        stage: ``rigid`` or ``affine``.
        shrink: Downsampling factor of the fixed image at this level.
        sigma_mm: Gaussian smoothing of both images at this level, in mm.
        iterations: Iterations run.
        max_iterations: The cap (``iterations`` of :func:`register_affine`).
        converged: The convergence criterion stopped the level before the cap: the
            optimiser stopped because the metric had stopped improving, not because it
            ran out of iterations.
        final_step: The last iteration's step, as the displacement (mm) it caused in
            the fixed image's voxels (from the physical-shift scales): about
            ``learning_rate`` times the shrink factor, since the step length is held
            fixed, and so the precision of the level's result; NaN when the level ran
            fewer than two iterations.
        metric: Mattes MI at the end of the level (negative; lower is better).
        stop_condition: The optimiser's own words.
    """

    stage: str
    shrink: int
    sigma_mm: float
    iterations: int
    max_iterations: int
    converged: bool
    final_step: float
    metric: float
    stop_condition: str


@dataclass
class RegistrationResult:
    """Outcome of :func:`register_affine`.

    Attributes:
        transform: Maps FIXED physical (LPS) points to MOVING physical points, the
            direction SimpleITK's resampling expects; pass it to
            :func:`resample_to_grid` to bring the moving image onto the fixed grid.
        metric: Final Mattes mutual information (negative; lower is better) at the
            finest level, on the sampled voxels.
        iterations: Optimiser iterations run at the finest level of the last stage.
        stop_condition: The optimiser's reason for stopping there, for the log.
        levels: One :class:`LevelReport` per stage and level, in the order run.
    """

    transform: sitk.Transform
    metric: float
    iterations: int
    stop_condition: str
    levels: list[LevelReport] = field(default_factory=list)

    @property
    def converged(self) -> bool:
        """The finest level of every stage converged (coarse levels only hand a start on)."""
        finest = {}
        for level in self.levels:
            finest[level.stage] = level
        return bool(finest) and all(level.converged for level in finest.values())

    @property
    def final_step(self) -> float:
        """The last iteration's step at the end of the last level, in mm (see LevelReport)."""
        return self.levels[-1].final_step if self.levels else float("nan")

    @property
    def levels_at_cap(self) -> int:
        """Levels (of any stage) that stopped at the iteration cap."""
        return sum(not level.converged for level in self.levels)


def reference_grid(spacing_mm: float, size_vox: Sequence[int], center_mm: Sequence[float]) -> np.ndarray:
    """Affine of an axis-aligned RAS grid with isotropic spacing, centred on ``center_mm``.

    The centre is the midpoint of the first and last voxel centres, which is how a
    template grid such as FSL's MNI152 (1 mm, 182 x 218 x 182, centre
    [0.5, -17.5, 18.5]) is defined independently of its resolution.

    Args:
        spacing_mm: Voxel size in mm (> 0).
        size_vox: Grid shape, three positive integers.
        center_mm: RAS world coordinates of the grid centre in mm.

    Returns:
        The 4x4 voxel-to-RAS affine.
    """
    size = np.asarray(size_vox, dtype=float)
    center = np.asarray(center_mm, dtype=float)
    if spacing_mm <= 0:
        raise ValueError(f"spacing_mm must be > 0, got {spacing_mm}")
    if size.shape != (3,) or np.any(size < 1) or np.any(size != np.round(size)):
        raise ValueError(f"size_vox must be three positive integers, got {list(size_vox)}")
    if center.shape != (3,):
        raise ValueError(f"center_mm must have three values, got {list(center_mm)}")
    affine = np.eye(4)
    affine[:3, :3] *= spacing_mm
    affine[:3, 3] = center - spacing_mm * (size - 1) / 2.0
    return affine


def to_sitk(data: np.ndarray, affine: np.ndarray) -> sitk.Image:
    """Wrap a nibabel-style ``(data, affine)`` as a SimpleITK image in LPS space.

    Rotated (oblique) and flipped affines are kept exactly; sheared ones are refused
    because an ITK image geometry cannot represent them.

    Args:
        data: 3D array indexed ``(i, j, k)``. Booleans are stored as uint8 (ITK has no
            boolean pixel type).
        affine: 4x4 voxel-to-RAS affine.

    Returns:
        An image whose voxel ``(i, j, k)`` is ``data[i, j, k]`` at the same world point.
    """
    data = np.asarray(data)
    if data.ndim != 3:
        raise ValueError(f"expected a 3D array, got shape {data.shape}")
    if data.dtype == bool:
        data = data.astype(np.uint8)
    spacing, direction_lps, origin_lps = _geometry_lps(affine)
    img = sitk.GetImageFromArray(np.ascontiguousarray(data.transpose(2, 1, 0)))
    img.SetSpacing(spacing.tolist())
    img.SetDirection(direction_lps.ravel().tolist())
    img.SetOrigin(origin_lps.tolist())
    return img


def from_sitk(img: sitk.Image) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`to_sitk`: return ``(data indexed (i, j, k), RAS affine)``."""
    if img.GetDimension() != 3:
        raise ValueError(f"expected a 3D image, got dimension {img.GetDimension()}")
    data = sitk.GetArrayFromImage(img).transpose(2, 1, 0)
    direction = np.asarray(img.GetDirection(), dtype=float).reshape(3, 3)
    affine = np.eye(4)
    affine[:3, :3] = _RAS_TO_LPS @ direction @ np.diag(img.GetSpacing())
    affine[:3, 3] = _RAS_TO_LPS @ np.asarray(img.GetOrigin(), dtype=float)
    return np.ascontiguousarray(data), affine


def register_affine(
    fixed: np.ndarray,
    fixed_affine: np.ndarray,
    moving: np.ndarray,
    moving_affine: np.ndarray,
    *,
    histogram_bins: int = 50,
    sampling_fraction: float = 0.25,
    shrink_factors: Sequence[int] = (4, 2, 1),
    smoothing_sigmas_vox: Sequence[float] = (2, 1, 0.5),
    iterations: int = 500,
    learning_rate: float = 0.2,
    seed: int = 1,
    fixed_mask: np.ndarray | None = None,
    mask_margin_mm: float | None = None,
    stages: Sequence[str] = ("rigid", "affine"),
    clip: tuple[float, float] | None = (-200.0, 1500.0),
    rotation_search_deg: float | None = 30.0,
    threads: int | None = None,
) -> RegistrationResult:
    """Estimate a rigid-then-affine transform aligning ``moving`` to ``fixed``.

    Mattes mutual information makes the metric work across modalities (a CT scan
    against a T1 or CT-like template). The start is found in two steps: the
    centroids of the two heads' silhouettes are matched (absorbing head-position
    offsets), then a coarse search over rotations picks the best of 125 poses. The
    search is there because gradient descent alone does not recover larger
    rotations: with 12 degrees about each of the three axes it ended 8-29 mm off in
    6 of 8 trials, and within 0.7 mm in all of them with the search.

    Then each stage (``rigid``: 6 parameters, ``affine``: 12) runs a multi-resolution
    gradient descent, coarse to fine, each level starting where the previous one
    ended. Rigid first, because a pose is what differs between two scans of one
    patient: with all 12 parameters free from the start, scale and shear traded
    against rotation on the way down and the descent ended at a different point for
    each pose of the same head (issue 29: two posed scans of one patient 5x further
    apart after registration than before posing). The affine stage then only adds
    what a pose cannot (head size, the template's proportions), from a start that is
    already right. Optimiser scales come from the physical shift each parameter
    causes, so that one step moves voxels by about the same distance whatever the
    parameter.

    The optimiser is gradient descent with a step of fixed physical length
    (``learning_rate`` mm of voxel displacement at the finest level, ``shrink`` times
    that at coarser ones; the learning rate is re-estimated at every iteration to keep
    it), stopped by a convergence criterion: the metric's trend over the last 10
    iterations has flattened (ITK's window convergence monitor, as ANTs uses it).
    ``iterations`` is only a cap; each level reports whether it converged or stopped
    at it (:class:`LevelReport`), and the QC table shows it. Measured on real heads
    given random poses (benchmarks/real_anatomy/registration_check.py): ITK's
    regular-step descent, used before, halves its step at every change of direction
    and never lets it grow again, so after the first overshoots it crept along
    shallow valleys at 0.01-0.05 mm per iteration, in a constant direction, and most
    levels ended at the cap wherever the creeping had got to, a different place for
    each pose of one head (two scans of one MRI patient ended 6 mm apart where this
    optimiser brings them within 0.4 mm). Steps of one voxel (ITK's default) made the
    metric too jumpy for the convergence window, which then stopped after 10-20
    iterations, about 3 mm off on a test head.

    Smoothing is applied in mm to both images (``smoothing_sigmas_vox`` times the
    fixed image's voxel size), not in each image's own voxels: a scan with 2.5 mm
    slices would otherwise be smoothed three times more across its slices than
    within them, differently for every pose of the head. For the same reason the
    moving image is first box-averaged to voxels no finer than the fixed image's
    (the metric only samples it at the fixed grid's points): finer detail only adds
    interpolation noise, and it makes a 0.75 x 0.75 x 2.5 mm scan about four times
    cheaper to register.

    Determinism: the metric samples voxels at random with ``seed``. With
    ``threads=1`` the result is bit-identical from run to run. With more threads it
    is not: parameters varied by 1e-12 to 1e-6 between identical runs (far below
    0.01 mm of displacement), presumably from the order in which ITK combines the
    threads' partial sums. Use ``threads=1`` where outputs must hash identically
    (e.g. DVC-cached results) and run several volumes in parallel instead.

    Args:
        fixed: Fixed (template or reference) volume, indexed ``(i, j, k)``.
        fixed_affine: 4x4 RAS affine of ``fixed``.
        moving: Volume to align (e.g. a CT scan in HU).
        moving_affine: 4x4 RAS affine of ``moving``.
        histogram_bins: Joint-histogram bins of the Mattes metric.
        sampling_fraction: Fraction (in (0, 1]) of the fixed image's voxels (inside the
            mask) that the metric samples at the finest level; coarser levels sample
            the same number, or all their voxels when they have fewer.
        shrink_factors: Downsampling of the fixed image per pyramid level, coarse to
            fine; every stage runs every level.
        smoothing_sigmas_vox: Gaussian smoothing per level, in voxels of the fixed
            image (converted to mm and applied to both images).
        iterations: Maximum optimiser iterations per level (a cap, not the criterion).
        learning_rate: Step length per iteration in mm of voxel displacement at the
            finest level (coarser levels: times their shrink factor); also the
            precision the final position can reach.
        seed: Seed of the metric's random voxel sampling.
        fixed_mask: Optional boolean array on the fixed grid; only voxels inside it
            are sampled (e.g. to ignore the neck or the scanner table).
        mask_margin_mm: Without ``fixed_mask``: sample only the fixed image's head
            (:func:`head_mask`: voxels above its Otsu threshold, holes filled) dilated
            by this margin; ``None`` samples the whole fixed image.
        stages: ``("rigid", "affine")`` (the default), ``("affine",)`` (12 parameters
            from the start, as before issue 29) or ``("rigid",)`` (6 parameters only:
            the result is still returned as an AffineTransform).
        clip: Intensity range applied to both images before the metric, so that CT
            air (-1000 HU) and metal do not squeeze the brain and skull into a few
            histogram bins; ``None`` keeps intensities as they are.
        rotation_search_deg: Half-range of the initial rotation search: every
            combination of five angles from -this to +this about each axis is scored
            on a coarse grid and the best starts the descent. ``None`` skips it
            (saves about 0.2 s when the images are known to be nearly aligned).
        threads: Number of threads SimpleITK may use during this call (its global
            default is set and restored afterwards, because the per-method setting
            does not reach the metric's threads); ``None`` keeps the current default.

    Returns:
        The fitted transform (fixed -> moving physical points) and optimiser summary.
    """
    if len(shrink_factors) != len(smoothing_sigmas_vox):
        raise ValueError(
            f"shrink_factors {list(shrink_factors)} and smoothing_sigmas_vox "
            f"{list(smoothing_sigmas_vox)} must have one entry per level"
        )
    if not shrink_factors or any(int(f) != f or f < 1 for f in shrink_factors):
        raise ValueError(f"shrink_factors must be integers >= 1, at least one level; got {list(shrink_factors)}")
    if any(s < 0 for s in smoothing_sigmas_vox):
        raise ValueError(f"smoothing_sigmas_vox must be >= 0, got {list(smoothing_sigmas_vox)}")
    if not 0 < sampling_fraction <= 1:
        raise ValueError(f"sampling_fraction must be in (0, 1], got {sampling_fraction}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if rotation_search_deg is not None and not rotation_search_deg > 0:
        raise ValueError(f"rotation_search_deg must be > 0 or None, got {rotation_search_deg}")
    if mask_margin_mm is not None and mask_margin_mm < 0:
        raise ValueError(f"mask_margin_mm must be >= 0 or None, got {mask_margin_mm}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    stages = tuple(stages)
    if stages not in _STAGE_CHOICES:
        raise ValueError(f"stages must be one of {[list(c) for c in _STAGE_CHOICES]}, got {list(stages)}")
    if fixed_mask is not None and np.shape(fixed_mask) != np.shape(fixed):
        raise ValueError(
            f"fixed_mask shape {np.shape(fixed_mask)} differs from fixed shape {np.shape(fixed)}"
        )

    fixed = _clipped(fixed, clip)
    moving = _clipped(moving, clip)
    for name, data in (("fixed", fixed), ("moving", moving)):
        if np.ptp(data) == 0:
            raise ValueError(f"{name} image is constant (after clipping to {clip}): nothing to register")

    with _sitk_threads(threads):
        fixed_img = to_sitk(fixed, fixed_affine)
        if fixed_mask is not None:
            mask_img = to_sitk(np.asarray(fixed_mask, dtype=np.uint8), fixed_affine)
        elif mask_margin_mm is not None:
            mask_img = head_mask(fixed_img, mask_margin_mm)
        else:
            mask_img = None
        return _register(
            fixed_img,
            to_sitk(moving, moving_affine),
            mask_img,
            histogram_bins=histogram_bins,
            sampling_fraction=sampling_fraction,
            shrink_factors=[int(f) for f in shrink_factors],
            smoothing_sigmas_vox=[float(s) for s in smoothing_sigmas_vox],
            iterations=int(iterations),
            learning_rate=learning_rate,
            seed=seed,
            stages=stages,
            rotation_search_deg=rotation_search_deg,
        )


def _register(
    fixed_img: sitk.Image,
    moving_img: sitk.Image,
    fixed_mask_img: sitk.Image | None,
    *,
    histogram_bins: int,
    sampling_fraction: float,
    shrink_factors: list[int],
    smoothing_sigmas_vox: list[float],
    iterations: int,
    learning_rate: float,
    seed: int,
    stages: tuple[str, ...],
    rotation_search_deg: float | None,
) -> RegistrationResult:
    """The SimpleITK part of :func:`register_affine`, on validated images."""

    def new_method(fraction: float) -> sitk.ImageRegistrationMethod:
        reg = sitk.ImageRegistrationMethod()
        reg.SetMetricAsMattesMutualInformation(numberOfHistogramBins=int(histogram_bins))
        if fraction < 1:
            reg.SetMetricSamplingStrategy(reg.RANDOM)
            reg.SetMetricSamplingPercentage(float(fraction), int(seed))
        else:
            reg.SetMetricSamplingStrategy(reg.NONE)
        if fixed_mask_img is not None:
            reg.SetMetricFixedMask(fixed_mask_img)
        reg.SetInterpolator(sitk.sitkLinear)
        reg.SmoothingSigmasAreSpecifiedInPhysicalUnitsOff()
        return reg

    # Match the centroids of the two heads' silhouettes (Otsu foreground), not of the
    # intensities: intensity moments are pulled by modality (bright CT skull vs bright
    # T1 brain), by CT's negative background and by noise in a large background.
    rigid = sitk.CenteredTransformInitializer(
        _foreground(fixed_img),
        _foreground(moving_img),
        sitk.Euler3DTransform(),
        sitk.CenteredTransformInitializerFilter.MOMENTS,
    )
    if rotation_search_deg is not None:
        fixed_coarse = _box_average(fixed_img, _SEARCH_VOXEL_MM / 2.0)
        moving_coarse = _box_average(moving_img, _SEARCH_VOXEL_MM / 2.0)
        step = np.deg2rad(rotation_search_deg) / 2.0
        # Two steps each side of the start (five angles per axis; translation fixed), then
        # the same around the best pose at a quarter of the step: the descent starts within
        # about 2 degrees of the best pose instead of 7.5, which spared the coarsest level
        # hundreds of small steps along a shallow valley (197 -> 16 iterations on an 8
        # degree test rotation).
        for _ in range(2):
            search = new_method(1.0)  # every voxel of the 8 mm grid: a few thousand at most
            search.SetShrinkFactorsPerLevel([2])
            search.SetSmoothingSigmasPerLevel([_SEARCH_VOXEL_MM / 2.0])
            search.SmoothingSigmasAreSpecifiedInPhysicalUnitsOn()
            search.SetOptimizerAsExhaustive([2, 2, 2, 0, 0, 0], stepLength=float(step))
            search.SetOptimizerScales([1.0] * 6)
            search.SetInitialTransform(rigid, inPlace=True)
            search.Execute(fixed_coarse, moving_coarse)
            step /= 4.0

    # The metric samples the moving image only at the fixed grid's points: detail finer
    # than the fixed voxels adds interpolation noise and cost, nothing else.
    fixed_voxel_mm = float(min(fixed_img.GetSpacing()))
    moving_img = sitk.BinShrink(
        moving_img, [max(1, int(np.floor(fixed_voxel_mm / s + 1e-6))) for s in moving_img.GetSpacing()]
    )

    def run_level(stage: str, transform: sitk.Transform, shrink: int, sigma_vox: float) -> LevelReport:
        # The same number of samples at every level (a fraction of the finest level's voxels):
        # a fraction of each level's own voxels left the coarse levels, with 8 and 64 times
        # fewer voxels, a few hundred samples of a masked brain, too few for a 50-bin joint
        # histogram (the coarse pose then depended on the sample draw).
        reg = new_method(min(1.0, sampling_fraction * shrink**3))
        reg.SetOptimizerAsGradientDescent(
            learningRate=1.0,  # re-estimated at every iteration from the step below
            numberOfIterations=iterations,
            convergenceMinimumValue=_CONVERGENCE_MIN_VALUE,
            convergenceWindowSize=_CONVERGENCE_WINDOW,
            estimateLearningRate=reg.EachIteration,
            maximumStepSizeInPhysicalUnits=float(learning_rate) * shrink,
        )
        reg.SetOptimizerScalesFromPhysicalShift()
        sigma_mm = sigma_vox * fixed_voxel_mm
        reg.SetShrinkFactorsPerLevel([shrink])
        reg.SetSmoothingSigmasPerLevel([sigma_mm])
        reg.SmoothingSigmasAreSpecifiedInPhysicalUnitsOn()
        reg.SetInitialTransform(transform, inPlace=True)
        # The optimiser's current step is not exposed: keep the last two positions (and the
        # scales, which the method estimates at the start and forgets after Execute).
        positions: list[tuple[float, ...]] = []
        scales: list[float] = []

        def keep_position() -> None:
            positions.append(reg.GetOptimizerPosition())
            del positions[:-2]
            if not scales:
                scales.extend(reg.GetOptimizerScales())

        reg.AddCommand(sitk.sitkIterationEvent, keep_position)
        reg.Execute(fixed_img, moving_img)
        its = int(reg.GetOptimizerIteration())
        step = float("nan")
        if len(positions) == 2 and len(scales) == len(positions[0]):
            # physical-shift scales are (mm of voxel shift per unit parameter)^2
            delta = np.subtract(positions[1], positions[0])
            step = float(np.sqrt(np.sum(delta**2 * np.asarray(scales))))
        return LevelReport(
            stage=stage,
            shrink=shrink,
            sigma_mm=sigma_mm,
            iterations=its,
            max_iterations=iterations,
            converged=its < iterations,
            final_step=step,
            metric=float(reg.GetMetricValue()),
            stop_condition=reg.GetOptimizerStopConditionDescription(),
        )

    levels: list[LevelReport] = []
    if "rigid" in stages:
        for shrink, sigma in zip(shrink_factors, smoothing_sigmas_vox):
            levels.append(run_level("rigid", rigid, shrink, sigma))
    affine = sitk.AffineTransform(3)
    affine.SetCenter(rigid.GetCenter())
    affine.SetMatrix(rigid.GetMatrix())
    affine.SetTranslation(rigid.GetTranslation())
    if "affine" in stages:
        for shrink, sigma in zip(shrink_factors, smoothing_sigmas_vox):
            levels.append(run_level("affine", affine, shrink, sigma))
    last = levels[-1]
    return RegistrationResult(
        transform=affine,
        metric=last.metric,
        iterations=last.iterations,
        stop_condition=last.stop_condition,
        levels=levels,
    )


def head_mask(img: sitk.Image, margin_mm: float) -> sitk.Image:
    """The head of ``img`` as a uint8 mask: Otsu foreground, holes filled, dilated by ``margin_mm``.

    Used as the metric's fixed mask, so that the empty field of view around the head
    does not dilute mutual information. Enclosed holes are filled so that dark interior
    structures (ventricles, the skull in T1) stay in. On a skull-stripped template
    (``mni_t1``) the foreground is the brain; ``margin_mm`` brings a rim around it in.
    """
    fg = sitk.Cast(sitk.OtsuThreshold(img, 0, 1), sitk.sitkUInt8)
    fg = sitk.BinaryFillhole(fg)
    if margin_mm > 0:
        radius = [max(1, int(round(margin_mm / s))) for s in img.GetSpacing()]
        fg = sitk.BinaryDilate(fg, radius, sitk.sitkBall)
    return fg


def resample_to_grid(
    moving: np.ndarray,
    moving_affine: np.ndarray,
    transform: sitk.Transform | None,
    out_affine: np.ndarray,
    out_shape: Sequence[int],
    *,
    order: int = 1,
    default_value: float = 0.0,
) -> np.ndarray:
    """Resample ``moving`` onto the grid ``(out_affine, out_shape)`` through ``transform``.

    Args:
        moving: Volume indexed ``(i, j, k)``.
        moving_affine: 4x4 RAS affine of ``moving``.
        transform: Maps output-grid physical points to moving physical points (as
            returned by :func:`register_affine`); ``None`` is the identity, i.e. plain
            resampling between two grids in the same world space.
        out_affine: 4x4 RAS affine of the output grid.
        out_shape: Output shape, three integers.
        order: 1 for linear interpolation (images; returns float32), 0 for nearest
            neighbour (labels; keeps the input dtype, so only existing label values
            and ``default_value`` can appear).
        default_value: Value for output voxels that map outside ``moving`` (e.g.
            -1000 for CT air).

    Returns:
        The resampled array of shape ``out_shape``.
    """
    if order not in (0, 1):
        raise ValueError(f"order must be 0 (nearest neighbour) or 1 (linear), got {order}")
    moving = np.asarray(moving)
    moving_img = to_sitk(moving, moving_affine)
    if order == 1:
        moving_img = sitk.Cast(moving_img, sitk.sitkFloat32)
    spacing, direction_lps, origin_lps = _geometry_lps(out_affine)
    out = sitk.Resample(
        moving_img,
        [int(n) for n in out_shape],
        transform if transform is not None else sitk.Transform(3, sitk.sitkIdentity),
        sitk.sitkLinear if order == 1 else sitk.sitkNearestNeighbor,
        origin_lps.tolist(),
        spacing.tolist(),
        direction_lps.ravel().tolist(),
        float(default_value),
        moving_img.GetPixelID(),
    )
    data, _ = from_sitk(out)
    if order == 0 and data.dtype != moving.dtype:
        data = data.astype(moving.dtype)  # booleans travel through ITK as uint8
    return data


def compose_affine(first: sitk.Transform, then: sitk.Transform) -> sitk.AffineTransform:
    """One AffineTransform doing ``first`` and then ``then`` (x -> then(first(x))).

    Used to chain template -> reference scan -> scan into the single transform a scan is
    resampled through (one interpolation), and which its label map and the saved .tfm
    file use. Both must be linear (rigid, affine: anything with a matrix and an offset).
    """

    def homogeneous(t: sitk.Transform) -> np.ndarray:
        t = t.Downcast() if hasattr(t, "Downcast") else t
        for attr in ("GetMatrix", "GetCenter", "GetTranslation"):
            if not hasattr(t, attr):
                raise ValueError(f"compose_affine needs linear transforms, got {t.GetName()}")
        m = np.asarray(t.GetMatrix(), dtype=float).reshape(3, 3)
        c = np.asarray(t.GetCenter(), dtype=float)
        h = np.eye(4)
        h[:3, :3] = m
        h[:3, 3] = c + np.asarray(t.GetTranslation(), dtype=float) - m @ c
        return h

    h = homogeneous(then) @ homogeneous(first)
    out = sitk.AffineTransform(3)
    out.SetMatrix(h[:3, :3].ravel().tolist())
    out.SetTranslation(h[:3, 3].tolist())
    return out


def transform_points(transform: sitk.Transform | None, points_ras_mm: np.ndarray) -> np.ndarray:
    """Map fixed-space RAS points (N, 3) to moving-space RAS points with ``transform``.

    Used for QC and tests: the distance between where a registration and the truth
    send the same points is the registration error in mm.
    """
    points = np.atleast_2d(np.asarray(points_ras_mm, dtype=float))
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"expected points of shape (N, 3), got {np.shape(points_ras_mm)}")
    if transform is None:
        return points.copy()
    lps = points @ _RAS_TO_LPS
    mapped = np.array([transform.TransformPoint(p) for p in lps.tolist()], dtype=float).reshape(-1, 3)
    return mapped @ _RAS_TO_LPS


@contextlib.contextmanager
def _sitk_threads(threads: int | None) -> Iterator[None]:
    """Set SimpleITK's global default thread count for the duration of a block."""
    if threads is None:
        yield
        return
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    previous = sitk.ProcessObject.GetGlobalDefaultNumberOfThreads()
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(int(threads))
    try:
        yield
    finally:
        sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(previous)


def _foreground(img: sitk.Image) -> sitk.Image:
    """Float mask (1 inside) of the voxels above the image's Otsu threshold."""
    # OtsuThreshold gives insideValue to voxels *below* the threshold.
    return sitk.Cast(sitk.OtsuThreshold(img, 0, 1), sitk.sitkFloat32)


def _box_average(img: sitk.Image, voxel_mm: float) -> sitk.Image:
    """Average blocks of voxels so that the voxel size approaches ``voxel_mm`` (never finer)."""
    return sitk.BinShrink(img, [max(1, round(voxel_mm / s)) for s in img.GetSpacing()])


def _geometry_lps(affine: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a RAS affine into ITK's (spacing, LPS direction, LPS origin)."""
    affine = np.asarray(affine, dtype=float)
    if affine.shape != (4, 4):
        raise ValueError(f"expected a 4x4 affine, got shape {affine.shape}")
    linear = affine[:3, :3]
    spacing = np.linalg.norm(linear, axis=0)
    if np.any(spacing == 0) or not np.all(np.isfinite(affine)):
        raise ValueError(f"degenerate affine (zero or non-finite voxel size):\n{affine}")
    direction = _RAS_TO_LPS @ linear / spacing
    if not np.allclose(direction.T @ direction, np.eye(3), atol=_ORTHONORMAL_TOL):
        raise ValueError(f"affine has a shear, which an ITK image cannot represent:\n{affine}")
    return spacing, direction, _RAS_TO_LPS @ affine[:3, 3]


def _clipped(data: np.ndarray, clip: tuple[float, float] | None) -> np.ndarray:
    """Float32 copy of ``data``, clipped to ``clip`` when given."""
    data = np.asarray(data, dtype=np.float32)
    if clip is None:
        return data
    lower, upper = clip
    if not lower < upper:
        raise ValueError(f"clip must satisfy lower < upper, got {clip}")
    return np.clip(data, lower, upper)
