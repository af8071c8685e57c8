"""Affine registration and resampling between voxel grids (SimpleITK behind a numpy API).

Why this module exists: the rest of synthaudit speaks nibabel (arrays indexed
``(i, j, k)`` plus a 4x4 RAS affine), while SimpleITK works in LPS physical space with
``(k, j, i)`` arrays. Every conversion between the two lives here, so that a sign or
axis-order mistake can only happen (and be tested) in one place.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import SimpleITK as sitk

# RAS <-> LPS: negate x and y. The matrix is its own inverse.
_RAS_TO_LPS = np.diag([-1.0, -1.0, 1.0])

# Direction matrices read from NIfTI headers carry float32 rounding; anything beyond
# that is a shear, which an ITK image (orthonormal direction x spacing) cannot hold.
_ORTHONORMAL_TOL = 1e-4

# The optimiser stops once its step (halved at every change of direction) falls below
# this, in the scaled units where 1 is about 1 mm of voxel displacement: far below
# any resampling grid, so the final position is limited by the metric, not the step.
_MIN_STEP = 1e-3

# The rotation search scores poses on an 8 mm grid of images smoothed with a 4 mm
# Gaussian, whatever the input resolution: coarse enough that the 125 trial poses
# cost about 0.2 s, smooth enough that the best pose lands inside the gradient
# descent's basin. The images are first box-averaged to 4 mm voxels, which keeps the
# smoothing cheap on 1 mm inputs (a 4 mm Gaussian on a full 1 mm head takes seconds).
_SEARCH_VOXEL_MM = 8.0


@dataclass
class RegistrationResult:
    """Outcome of :func:`register_affine`.

    Attributes:
        transform: Maps FIXED physical (LPS) points to MOVING physical points, the
            direction SimpleITK's resampling expects; pass it to
            :func:`resample_to_grid` to bring the moving image onto the fixed grid.
        metric: Final Mattes mutual information (negative; lower is better) at the
            finest level, on the sampled voxels.
        iterations: Optimiser iterations run at the finest level.
        stop_condition: The optimiser's reason for stopping, for the log.
    """

    transform: sitk.Transform
    metric: float
    iterations: int
    stop_condition: str


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
    shrink_factors: Sequence[int] = (4, 2),
    smoothing_sigmas_vox: Sequence[float] = (2, 1),
    iterations: int = 200,
    learning_rate: float = 1.0,
    seed: int = 1,
    fixed_mask: np.ndarray | None = None,
    clip: tuple[float, float] | None = (-200.0, 1500.0),
    rotation_search_deg: float | None = 30.0,
    threads: int | None = None,
) -> RegistrationResult:
    """Estimate a 12-parameter affine transform aligning ``moving`` to ``fixed``.

    Mattes mutual information makes the metric work across modalities (a CT scan
    against a T1 or CT-like template). The start is found in two steps: the
    centroids of the two heads' silhouettes are matched (absorbing head-position
    offsets), then a coarse search over rotations picks the best of 125 poses. The
    search is there because gradient descent alone does not recover larger
    rotations: with 12 degrees about each of the three axes it ended 8-29 mm off in
    6 of 8 trials, and within 0.7 mm in all of them with the search. The
    multi-resolution gradient descent then refines all 12 parameters, with
    optimiser scales from the physical shift each parameter causes, so that a step
    in a matrix entry and a step in a translation move voxels by similar amounts.

    The optimiser is ITK's regular-step gradient descent: fixed-length steps along
    the gradient, halved whenever the direction reverses. Plain gradient descent
    (step proportional to the gradient) stopped after about 10 iterations, 5-13 mm
    off, because the sampled MI is noisy enough to satisfy its convergence window.

    Determinism: the metric samples voxels at random with ``seed``. With
    ``threads=1`` the result is bit-identical from run to run. With more threads it
    is not: parameters varied by 1e-12 to 1e-6 between identical runs (far below
    0.01 mm of displacement), presumably from the order in which ITK combines the
    threads' partial sums. Use ``threads=1`` where outputs must hash identically
    (e.g. DVC-cached results) and run several volumes in parallel instead.

    Args:
        fixed: Fixed (template) volume, indexed ``(i, j, k)``.
        fixed_affine: 4x4 RAS affine of ``fixed``.
        moving: Volume to align (e.g. a CT scan in HU).
        moving_affine: 4x4 RAS affine of ``moving``.
        histogram_bins: Joint-histogram bins of the Mattes metric.
        sampling_fraction: Fraction of fixed voxels (in (0, 1]) sampled by the metric.
        shrink_factors: Downsampling per pyramid level, coarse to fine.
        smoothing_sigmas_vox: Gaussian smoothing per level, in voxels of the input
            images (ITK smooths before shrinking).
        iterations: Maximum optimiser iterations per level.
        learning_rate: Initial step length of each level, in scaled parameter units
            (about mm of voxel displacement, thanks to the physical-shift scales).
        seed: Seed of the metric's random voxel sampling.
        fixed_mask: Optional boolean array on the fixed grid; only voxels inside it
            are sampled (e.g. to ignore the neck or the scanner table).
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
    if not 0 < sampling_fraction <= 1:
        raise ValueError(f"sampling_fraction must be in (0, 1], got {sampling_fraction}")
    if rotation_search_deg is not None and not rotation_search_deg > 0:
        raise ValueError(f"rotation_search_deg must be > 0 or None, got {rotation_search_deg}")
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
        return _register(
            to_sitk(fixed, fixed_affine),
            to_sitk(moving, moving_affine),
            None if fixed_mask is None else to_sitk(np.asarray(fixed_mask, dtype=np.uint8), fixed_affine),
            histogram_bins=histogram_bins,
            sampling_fraction=sampling_fraction,
            shrink_factors=shrink_factors,
            smoothing_sigmas_vox=smoothing_sigmas_vox,
            iterations=iterations,
            learning_rate=learning_rate,
            seed=seed,
            rotation_search_deg=rotation_search_deg,
        )


def _register(
    fixed_img: sitk.Image,
    moving_img: sitk.Image,
    fixed_mask_img: sitk.Image | None,
    *,
    histogram_bins: int,
    sampling_fraction: float,
    shrink_factors: Sequence[int],
    smoothing_sigmas_vox: Sequence[float],
    iterations: int,
    learning_rate: float,
    seed: int,
    rotation_search_deg: float | None,
) -> RegistrationResult:
    """The SimpleITK part of :func:`register_affine`, on validated images."""

    def new_method() -> sitk.ImageRegistrationMethod:
        reg = sitk.ImageRegistrationMethod()
        reg.SetMetricAsMattesMutualInformation(numberOfHistogramBins=int(histogram_bins))
        reg.SetMetricSamplingStrategy(reg.RANDOM)
        reg.SetMetricSamplingPercentage(float(sampling_fraction), int(seed))
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
        search = new_method()
        search.SetShrinkFactorsPerLevel([2])
        search.SetSmoothingSigmasPerLevel([_SEARCH_VOXEL_MM / 2.0])
        search.SmoothingSigmasAreSpecifiedInPhysicalUnitsOn()
        # Two steps each side of the start: five angles per axis; translation fixed.
        search.SetOptimizerAsExhaustive([2, 2, 2, 0, 0, 0], stepLength=np.deg2rad(rotation_search_deg) / 2.0)
        search.SetOptimizerScales([1.0] * 6)
        search.SetInitialTransform(rigid, inPlace=True)
        search.Execute(
            _box_average(fixed_img, _SEARCH_VOXEL_MM / 2.0), _box_average(moving_img, _SEARCH_VOXEL_MM / 2.0)
        )
    initial = sitk.AffineTransform(3)
    initial.SetCenter(rigid.GetCenter())
    initial.SetMatrix(rigid.GetMatrix())
    initial.SetTranslation(rigid.GetTranslation())

    reg = new_method()
    reg.SetOptimizerAsRegularStepGradientDescent(
        learningRate=float(learning_rate),
        minStep=_MIN_STEP,
        numberOfIterations=int(iterations),
        relaxationFactor=0.5,
        gradientMagnitudeTolerance=1e-8,
    )
    reg.SetOptimizerScalesFromPhysicalShift()
    reg.SetShrinkFactorsPerLevel([int(s) for s in shrink_factors])
    reg.SetSmoothingSigmasPerLevel([float(s) for s in smoothing_sigmas_vox])
    reg.SetInitialTransform(initial, inPlace=False)

    # Execute wraps the optimised transform in a one-element composite; unwrap it so
    # callers get an AffineTransform (matrix, translation, centre) they can inspect.
    composite = sitk.CompositeTransform(reg.Execute(fixed_img, moving_img))
    return RegistrationResult(
        transform=composite.GetNthTransform(0).Downcast(),
        metric=float(reg.GetMetricValue()),
        iterations=int(reg.GetOptimizerIteration()),
        stop_condition=reg.GetOptimizerStopConditionDescription(),
    )


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
