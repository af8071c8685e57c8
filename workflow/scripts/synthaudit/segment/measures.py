"""Segmentation-level measures (RELICT 2.3.3, Appendix 1): Dice and average surface distance.

Definitions
-----------
* **Dice** of class ``c``: ``2 |A_c & B_c| / (|A_c| + |B_c|)``. A class absent from
  both label maps has no Dice (NaN) and is left out of the mean over classes: two
  empty masks agree trivially, and scoring them 1 (or 0) would make the multiclass
  mean depend on how many classes happen to be absent.
* **Surfaces** follow google-deepmind ``surface-distance``, the implementation RELICT
  uses. A mask is read on the grid of voxel corners ((X+1, Y+1, Z+1) corners, the
  volume padded with background): a corner whose 2x2x2 neighbourhood of voxels is
  neither all background nor all foreground is a surface element (surfel), weighted
  by the area in mm^2 of the marching-cubes surface inside that neighbourhood.
  Distances (mm, voxel spacing applied) run from a surfel to the nearest surfel of the
  other mask (Euclidean distance transforms, or KD-trees where cheaper; both exact).
  The directed average distance A->B is the area-weighted mean over A's surfels; the
  **ASD** is the mean of both directions (RELICT Appendix 1). **HD95** is the larger of the two directed area-weighted 95th
  percentiles (deepmind's ``compute_robust_hausdorff(..., 95)``).
* **Empty classes** (RELICT Appendix 1): a class present in exactly one of the two
  label maps has no surface distance; its ASD is the HD95 between the whole foreground
  masks (all labels > 0 merged into one). When one whole foreground is empty too, the
  value is the diagonal of the volume in mm (``sqrt(sum((n_i * spacing_i)^2))``), the
  largest distance two surfels can have; deepmind would return infinity, which no
  threshold or mean can use. Absent from both: NaN, left out of the mean.

Surfel areas
------------
deepmind's table of areas for the 256 neighbourhood codes is the classic marching-cubes
triangulation (Lorensen & Cline) of the side with fewer foreground voxels, so a code and
its complement have the same area. The table is rebuilt here from that triangulation
(scikit-image's ``method="lorensen"`` on each 2x2x2 configuration, vertices at exact edge
midpoints), which reproduces deepmind's areas to rounding for any spacing.

All pairs
---------
RELICT compares every synthetic label map with every training label map. Per pair the
reference package crops, extracts both surfaces and runs two distance transforms. Here
every per-volume quantity is computed once, so a pair only needs gathers:

* **Synthetic side** (held in memory): the label map in a compact integer type, voxel
  counts per class, the surfels (corner coordinates and areas) of each class and of the
  whole foreground, and their distance transforms on the full corner grid (float64,
  exact), stacked per class.
* **Training side** (streamed, one volume at a time): counts, foreground voxel indices,
  surfels, and the distances from every synthetic surfel of a class to the training
  surface, all synthetic volumes at once: by a distance transform of the smallest box
  holding both (exact there, and usually much smaller than the grid) or, when there are
  few synthetic surfels for a large box (small structures), by a KD-tree over the
  training surfels, whichever is cheaper; both give the exact distances.
* **Per pair**: Dice from the synthetic labels gathered at the training volume's
  foreground voxels; the other direction's distances gathered from the synthetic
  distance maps at the training surfels.

Memory: the synthetic cache holds 8 bytes per corner-grid point for each synthetic
volume and each class present in it, plus one map for its whole foreground (50 volumes
of 128x128x32 with 7 classes: at most 1.8 GB); nothing is kept per training volume.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree
from skimage.measure import marching_cubes

MEASURES = ("dice_binary", "dice_multiclass", "asd_binary", "asd_multiclass")
# Measures whose raw values are similarities (1 = identical); RELICT 2.4 thresholds
# 1 - Dice, a distance, like the ASD.
SIMILARITIES = frozenset({"dice_binary", "dice_multiclass"})
HD_PERCENT = 95.0

# Neighbourhood code of a corner: the voxel at offset (i, j, k) of its 2x2x2
# neighbourhood sets bit 4i + 2j + k.
_BITS = tuple((offset, 4 * offset[0] + 2 * offset[1] + offset[2]) for offset in itertools.product((0, 1), repeat=3))
_WHOLE = 0  # key of the whole foreground (all labels > 0) next to the class labels
# A KD-tree query for one point costs about as much as a distance transform over this
# many voxels (scipy: ~1.2 us per query, ~0.1 us per voxel).
_KD_QUERY_VOXELS = 12


# --------------------------------------------------------------------------- checks


def check_labels(path: str | os.PathLike, data: np.ndarray, allowed: Sequence[int]) -> None:
    """Refuse a segmentation holding values outside the declared label map.

    Background 0 is always allowed. Why: an undeclared value (another labelling
    protocol, a typo in the label map, interpolated values from resampling a label map)
    would count as foreground in the binary measures and be ignored by the multiclass
    ones, silently changing both.

    Args:
        path: The file the segmentation came from, for the message.
        data: The segmentation.
        allowed: The declared foreground labels.

    Raises:
        ValueError: Naming ``path`` and the unexpected values (at most ten shown).
    """
    values = np.unique(np.asarray(data))
    unexpected = values[~np.isin(values, [0, *allowed])]
    if unexpected.size:
        shown = ", ".join(f"{v:g}" for v in unexpected[:10])
        more = f" and {unexpected.size - 10} more" if unexpected.size > 10 else ""
        raise ValueError(
            f"{path}: segmentation contains label value(s) {shown}{more} not in the label map "
            f"{sorted(int(a) for a in allowed)} (0 = background)"
        )


def _check_classes(labels: Sequence[int]) -> list[int]:
    classes = [int(c) for c in labels]
    if not classes:
        raise ValueError("no labels given")
    if any(c <= 0 for c in classes) or len(set(classes)) != len(classes):
        raise ValueError(f"labels must be distinct positive integers (0 is background), got {list(labels)}")
    return classes


def _check_spacing(spacing_mm: Sequence[float]) -> tuple[float, float, float]:
    spacing = tuple(float(s) for s in spacing_mm)
    if len(spacing) != 3 or not all(math.isfinite(s) and s > 0 for s in spacing):
        raise ValueError(f"spacing_mm must be three positive numbers, got {spacing_mm}")
    return spacing


def _check_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(f"expected two 3D label maps of the same shape, got {a.shape} and {b.shape}")
    return a, b


def _check_measures(measures: Sequence[str]) -> list[str]:
    if isinstance(measures, str):
        measures = [measures]
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measure(s) {unknown}; known: {', '.join(MEASURES)}")
    if not measures:
        raise ValueError("no measures requested")
    return list(dict.fromkeys(measures))


# --------------------------------------------------------------------------- per pair


def dice(a: np.ndarray, b: np.ndarray, labels: Sequence[int]) -> dict[int, float]:
    """Dice coefficient per class; NaN for a class absent from both label maps.

    For the binary measure pass ``(a > 0, b > 0, [1])``.

    Args:
        a, b: Label maps of the same 3D shape.
        labels: Classes to compare (positive integers).

    Returns:
        ``{label: dice}``; average with :func:`mean_dice`.
    """
    a, b = _check_pair(a, b)
    result = {}
    for c in _check_classes(labels):
        in_a, in_b = a == c, b == c
        total = np.count_nonzero(in_a) + np.count_nonzero(in_b)
        result[c] = 2.0 * np.count_nonzero(in_a & in_b) / total if total else math.nan
    return result


def average_surface_distance(
    a: np.ndarray, b: np.ndarray, spacing_mm: Sequence[float], labels: Sequence[int]
) -> dict[int, float]:
    """Symmetric average surface distance per class (mm), with RELICT's empty-class rule.

    ``(d(A->B) + d(B->A)) / 2`` of the area-weighted directed averages (deepmind's
    ``compute_average_surface_distance``, averaged). A class present in exactly one map
    gets the whole-foreground :func:`hd95` instead (the volume diagonal when one map has
    no foreground at all); a class absent from both gets NaN. For the binary measure
    pass ``(a > 0, b > 0, spacing_mm, [1])``.

    Args:
        a, b: Label maps of the same 3D shape.
        spacing_mm: Voxel spacing along the three array axes.
        labels: Classes to compare (positive integers).

    Returns:
        ``{label: asd}``; average with :func:`mean_asd`.
    """
    a, b = _check_pair(a, b)
    spacing = _check_spacing(spacing_mm)
    table = _area_table(spacing)
    result = {}
    fallback = None
    for c in _check_classes(labels):
        surf_a, surf_b = _mask_surface(a == c, table), _mask_surface(b == c, table)
        if surf_a is None and surf_b is None:
            result[c] = math.nan
        elif surf_a is None or surf_b is None:
            if fallback is None:
                fallback = hd95(a, b, spacing)
            result[c] = fallback
        else:
            d_ab, d_ba = _pair_distances(surf_a, surf_b, spacing)
            result[c] = (surf_a.mean(d_ab) + surf_b.mean(d_ba)) / 2.0
    return result


def hd95(a: np.ndarray, b: np.ndarray, spacing_mm: Sequence[float]) -> float:
    """95th-percentile Hausdorff distance (mm) between the foregrounds (> 0) of two maps.

    deepmind's ``compute_robust_hausdorff(..., 95)``: per direction, the distance at which
    the cumulative surfel area, in order of increasing distance, reaches 95 % of the
    surface; the larger direction is returned. Both empty: NaN. One empty: the volume
    diagonal (deepmind: infinity), the largest possible distance.

    Args:
        a, b: Masks or label maps of the same 3D shape; every value > 0 is foreground.
        spacing_mm: Voxel spacing along the three array axes.
    """
    a, b = _check_pair(a, b)
    spacing = _check_spacing(spacing_mm)
    table = _area_table(spacing)
    surf_a, surf_b = _mask_surface(a > 0, table), _mask_surface(b > 0, table)
    if surf_a is None and surf_b is None:
        return math.nan
    if surf_a is None or surf_b is None:
        return _diagonal(a.shape, spacing)
    d_ab, d_ba = _pair_distances(surf_a, surf_b, spacing)
    return max(surf_a.percentile(d_ab, HD_PERCENT), surf_b.percentile(d_ba, HD_PERCENT))


def mean_dice(per_class: dict[int, float]) -> float:
    """Mean Dice over the classes present in either map (NaN entries left out); NaN if none."""
    return _nan_mean(per_class.values())


def mean_asd(per_class: dict[int, float]) -> float:
    """Mean ASD over the classes present in either map (NaN entries left out); NaN if none."""
    return _nan_mean(per_class.values())


def _nan_mean(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


# --------------------------------------------------------------------------- surfaces


@dataclass(frozen=True)
class _Surface:
    """Surfels of one mask: corner-grid coordinates (N, 3) and areas (N,) in mm^2."""

    coords: np.ndarray
    areas: np.ndarray
    lo: np.ndarray = field(init=False)
    hi: np.ndarray = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "lo", self.coords.min(axis=0))
        object.__setattr__(self, "hi", self.coords.max(axis=0) + 1)

    def mean(self, distances: np.ndarray) -> float:
        """Area-weighted mean of per-surfel distances (one directed average distance)."""
        return float(np.sum(distances * self.areas) / np.sum(self.areas))

    def percentile(self, distances: np.ndarray, percent: float) -> float:
        """Area-weighted percentile of per-surfel distances, as deepmind computes it.

        Surfels are ordered by (distance, area) and the first one whose cumulative area
        fraction reaches ``percent`` gives the value; the same ordering makes the result
        identical to deepmind's even where distances tie.
        """
        order = np.lexsort((self.areas, distances))
        distances, areas = distances[order], self.areas[order]
        cumulative = np.cumsum(areas) / np.sum(areas)
        index = np.searchsorted(cumulative, percent / 100.0)
        return float(distances[min(index, len(distances) - 1)])


def _mask_surface(mask: np.ndarray, table: np.ndarray) -> _Surface | None:
    """Surfels of a boolean mask; None when the mask is empty."""
    box = ndimage.find_objects(mask.view(np.uint8))
    if not box:
        return None
    return _surface(mask[box[0]], np.array([s.start for s in box[0]]), table)


def _surface(crop: np.ndarray, origin: np.ndarray, table: np.ndarray) -> _Surface:
    """Surfels of a non-empty mask cropped to its bounding box starting at voxel ``origin``.

    Local corner ``p`` of the crop sees crop voxels ``p-1`` and ``p`` per axis (the crop
    is padded with background), i.e. global corner ``origin + p``.
    """
    padded = np.zeros(np.add(crop.shape, 2), np.uint8)
    padded[1:-1, 1:-1, 1:-1] = crop
    n = np.add(crop.shape, 1)
    code = np.zeros(n, np.uint8)
    for (i, j, k), bit in _BITS:
        code |= padded[i : i + n[0], j : j + n[1], k : k + n[2]] << bit
    border = (code != 0) & (code != 255)
    return _Surface(coords=np.argwhere(border) + origin, areas=table[code[border]])


def _pair_distances(a: _Surface, b: _Surface, spacing: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per-surfel distances a->b and b->a."""
    lo, hi = np.minimum(a.lo, b.lo), np.maximum(a.hi, b.hi)
    return _distances_to(b, a.coords, lo, hi, spacing), _distances_to(a, b.coords, lo, hi, spacing)


def _distances_to(surface: _Surface, points: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  spacing: tuple[float, ...]) -> np.ndarray:
    """Distance (mm) from each corner in ``points`` to the nearest surfel of ``surface``.

    Both lie in the box [lo, hi). A distance transform of the box and a KD-tree over the
    surfels give the same exact distances (to rounding); the cheaper one is used: the
    KD-tree for few points in a large box (small structures), the transform otherwise.
    """
    if len(points) * _KD_QUERY_VOXELS < math.prod(hi - lo):
        scale = np.asarray(spacing)
        return cKDTree(surface.coords * scale).query(points * scale)[0]
    return _distance_map(surface, lo, hi, spacing)[tuple((points - lo).T)]


def _distance_map(surface: _Surface, lo: np.ndarray, hi: np.ndarray, spacing: tuple[float, ...]) -> np.ndarray:
    """Distance (mm) from every corner of the box [lo, hi) to the nearest surfel.

    Exact wherever the box holds all surfels: the Euclidean distance transform finds the
    nearest zero among all of them.
    """
    outside = np.ones(tuple(hi - lo), bool)
    outside[tuple((surface.coords - lo).T)] = False
    return ndimage.distance_transform_edt(outside, sampling=spacing)


def _diagonal(shape: Sequence[int], spacing: Sequence[float]) -> float:
    return math.sqrt(sum((n * s) ** 2 for n, s in zip(shape, spacing)))


@functools.lru_cache(maxsize=16)
def _area_table(spacing: tuple[float, float, float]) -> np.ndarray:
    """Surface area (mm^2) inside a 2x2x2 neighbourhood, indexed by its code."""
    vertices, codes = _triangulation()
    v = vertices * np.asarray(spacing)
    areas = 0.5 * np.linalg.norm(np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]), axis=1)
    table = np.bincount(codes, weights=areas, minlength=256)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=1)
def _triangulation() -> tuple[np.ndarray, np.ndarray]:
    """Marching-cubes triangles (M, 3 vertices, 3 axes) in voxel units and their codes (M,).

    Each configuration is triangulated on its side with fewer foreground voxels (the
    complement has the same surface), as in deepmind's table.
    """
    triangles, codes = [], []
    for code in range(1, 255):
        minority = code if code.bit_count() <= 4 else 255 - code
        cube = np.array([(minority >> bit) & 1 for bit in range(8)], np.float64).reshape(2, 2, 2)
        verts, faces, _, _ = marching_cubes(cube, 0.5, method="lorensen", allow_degenerate=True)
        verts = np.round(verts.astype(np.float64) * 2.0) / 2.0  # exact edge midpoints
        triangles.append(verts[faces])
        codes.append(np.full(len(faces), code))
    return np.concatenate(triangles), np.concatenate(codes)


# --------------------------------------------------------------------------- all pairs


@dataclass
class _Volume:
    """Per-volume quantities: voxel counts and surfels per key.

    Keys are the class labels and ``_WHOLE`` (0) for the whole foreground.
    """

    counts: dict[int, int]
    surfaces: dict[int, _Surface | None]


def _as_label_map(volume, shape: tuple[int, ...] | None, name: str) -> np.ndarray:
    """A label map as non-negative integers of the smallest fitting type."""
    arr = np.asarray(volume)
    if arr.ndim != 3 or (shape is not None and arr.shape != shape):
        expected = "a 3D volume" if shape is None else f"shape {shape}"
        raise ValueError(f"{name}: expected {expected}, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: label map of type {arr.dtype} is not numeric")
    if arr.dtype.kind == "f" and not np.array_equal(arr, np.round(arr)):
        raise ValueError(f"{name}: label map has non-integer values")
    top = arr.max()
    if arr.min() < 0:
        raise ValueError(f"{name}: label map has negative values")
    dtype = np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.int64
    return np.ascontiguousarray(arr, dtype=dtype)


def _volume(labels: np.ndarray, classes: list[int], keys: list[int], table: np.ndarray) -> _Volume:
    """Counts for every class and the whole foreground; surfels for ``keys``."""
    histogram = np.bincount(labels.ravel(), minlength=max(classes) + 1)
    counts = {c: int(histogram[c]) for c in classes}
    counts[_WHOLE] = labels.size - int(histogram[0])
    boxes = ndimage.find_objects(labels) if keys else []
    surfaces: dict[int, _Surface | None] = {}
    for key in keys:
        if key == _WHOLE:
            present = [b for b in boxes if b is not None]
            box = _union_box(present) if present else None
        else:
            box = boxes[key - 1] if key <= len(boxes) else None
        if box is None:
            surfaces[key] = None
            continue
        if key != _WHOLE and counts[key] == counts[_WHOLE] and _WHOLE in surfaces:
            surfaces[key] = surfaces[_WHOLE]  # the class is the whole foreground: same surface
            continue
        crop = labels[box] > 0 if key == _WHOLE else labels[box] == key
        surfaces[key] = _surface(crop, np.array([s.start for s in box]), table)
    return _Volume(counts, surfaces)


def _union_box(boxes: list[tuple[slice, ...]]) -> tuple[slice, ...]:
    return tuple(slice(min(b[d].start for b in boxes), max(b[d].stop for b in boxes)) for d in range(3))


class _SyntheticSurfaces:
    """One key's surfels of all synthetic volumes, stacked, with full-grid distance maps.

    ``row[s]`` is synthetic volume ``s``'s row in the stack, -1 where the key is absent.
    """

    def __init__(self, surfaces: list[_Surface | None], grid: tuple[int, ...], spacing: tuple[float, ...]):
        self.grid, self.spacing = grid, spacing
        present = [s for s in surfaces if s is not None]
        self.row = np.full(len(surfaces), -1)
        self.members = np.flatnonzero([s is not None for s in surfaces])
        self.row[self.members] = np.arange(len(present))
        self.surfaces = present
        if not present:
            return
        sizes = np.array([len(s.areas) for s in present])
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.coords = np.concatenate([s.coords for s in present])
        self.areas = np.concatenate([s.areas for s in present])
        self.area_sums = np.array([np.sum(s.areas) for s in present])
        self.lo, self.hi = self.coords.min(axis=0), self.coords.max(axis=0) + 1
        self.maps = np.empty((len(present), math.prod(grid)))
        for r, s in enumerate(present):
            self.maps[r] = _distance_map(s, np.zeros(3, int), np.array(grid), spacing).ravel()

    def distances(self, surface: _Surface) -> tuple[np.ndarray, np.ndarray]:
        """Per-surfel distances of all members to ``surface`` and back.

        Returns:
            ``d_st`` (all stacked synthetic surfels -> ``surface``, in stack order) and
            ``d_ts`` (rows: members; columns: ``surface``'s surfels -> that member).
        """
        lo, hi = np.minimum(self.lo, surface.lo), np.maximum(self.hi, surface.hi)
        d_st = _distances_to(surface, self.coords, lo, hi, self.spacing)
        d_ts = np.take(self.maps, np.ravel_multi_index(tuple(surface.coords.T), self.grid), axis=1)
        return d_st, d_ts

    def segment(self, row: int) -> slice:
        return slice(self.starts[row], self.starts[row] + len(self.surfaces[row].areas))


class _TrainingColumn:
    """ASD of one training volume against all synthetic volumes, per key.

    Results are kept per (synthetic stack, training surface) pair, so a class that is
    the whole foreground on both sides costs nothing beyond the binary measure.
    """

    def __init__(self, volume: _Volume, stacks: dict[int, _SyntheticSurfaces], whole_empty: np.ndarray,
                 diagonal: float):
        self.volume, self.stacks, self.whole_empty, self.diagonal = volume, stacks, whole_empty, diagonal
        self._whole_distances: tuple[np.ndarray, np.ndarray] | None = None
        self._results: dict[tuple[int, int], np.ndarray] = {}
        self._fallbacks: dict[int, float] = {}

    def asd(self, key: int) -> np.ndarray:
        stack, surface = self.stacks[key], self.volume.surfaces[key]
        done = self._results.get((id(stack), id(surface)))
        if done is not None:
            return done
        result = self._results[id(stack), id(surface)] = np.full(len(stack.row), math.nan)
        if surface is not None and stack.surfaces:
            d_st, d_ts = stack.distances(surface)
            if key == _WHOLE:
                self._whole_distances = (d_st, d_ts)
            mean_st = np.add.reduceat(d_st * stack.areas, stack.starts) / stack.area_sums
            mean_ts = d_ts @ surface.areas / np.sum(surface.areas)
            result[stack.members] = (mean_st + mean_ts) / 2.0
        for s in np.flatnonzero((stack.row >= 0) != (surface is not None)):
            result[s] = self._hd95_whole(s)
        return result

    def _hd95_whole(self, s: int) -> float:
        """The empty-class fallback for synthetic volume ``s``: whole-foreground HD95."""
        if self.whole_empty[s] or self.volume.surfaces[_WHOLE] is None:
            return self.diagonal
        if s not in self._fallbacks:
            stack, surface = self.stacks[_WHOLE], self.volume.surfaces[_WHOLE]
            if self._whole_distances is None:
                self._whole_distances = stack.distances(surface)
            d_st, d_ts = self._whole_distances
            row = stack.row[s]
            self._fallbacks[s] = max(stack.surfaces[row].percentile(d_st[stack.segment(row)], HD_PERCENT),
                                     surface.percentile(d_ts[row], HD_PERCENT))
        return self._fallbacks[s]


def all_pairs_segmentation_measures(
    synthetic_labels: Iterable[np.ndarray],
    training_labels: Iterable[np.ndarray],
    labels: Sequence[int],
    spacing_mm: Sequence[float],
    measures: Sequence[str] = MEASURES,
    *,
    n_training: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> dict[str, np.ndarray]:
    """Dice and ASD between every synthetic and every training label map.

    Values equal the per-pair functions: ``dice_binary`` = ``dice(s > 0, t > 0, [1])``,
    ``dice_multiclass`` = ``mean_dice(dice(s, t, labels))``, ``asd_binary`` =
    ``average_surface_distance(s > 0, t > 0, spacing_mm, [1])``, ``asd_multiclass`` =
    ``mean_asd(average_surface_distance(s, t, spacing_mm, labels))``, up to the
    rounding of sums taken in another order (relative 1e-12).

    Args:
        synthetic_labels: Synthetic label maps (non-negative integer values, any
            numeric type), all of one 3D shape; read once and held in memory.
        training_labels: Training label maps of the same shape, any iterable; each is
            read once and released, so the training set never has to fit in memory.
        labels: Foreground classes of the label map (positive integers).
        spacing_mm: Voxel spacing along the three array axes.
        measures: Names from :data:`MEASURES`.
        n_training: Number of training maps, for ``progress`` when ``training_labels``
            has no ``len``.
        progress: Called as ``progress(done, total)`` after each training map;
            ``total`` is None when unknown.

    Returns:
        For each requested measure an (S, T) float64 array of raw values (Dice a
        similarity, ASD a distance in mm); NaN where no class is present in either map.

    Raises:
        ValueError: On unknown measures, invalid labels or spacing, no synthetic maps,
            or maps of another shape or with negative or non-integer values.
    """
    wanted = _check_measures(measures)
    classes = _check_classes(labels)
    spacing = _check_spacing(spacing_mm)
    table = _area_table(spacing)
    keys = ([_WHOLE] if {"asd_binary", "asd_multiclass"} & set(wanted) else []) + (
        classes if "asd_multiclass" in wanted else [])

    synthetic: list[_Volume] = []
    synthetic_maps: list[np.ndarray] = []
    shape = None
    for i, volume in enumerate(synthetic_labels):
        label_map = _as_label_map(volume, shape, f"synthetic label map {i}")
        shape = label_map.shape
        synthetic.append(_volume(label_map, classes, keys, table))
        synthetic_maps.append(label_map.ravel())
    if not synthetic:
        raise ValueError("no synthetic label maps given")
    n_synthetic = len(synthetic)
    flat_labels = np.stack(synthetic_maps)
    del synthetic_maps
    grid = tuple(n + 1 for n in shape)
    stacks: dict[int, _SyntheticSurfaces] = {}
    for k in keys:
        surfaces = [v.surfaces[k] for v in synthetic]
        if k != _WHOLE and all(s is v.surfaces[_WHOLE] for s, v in zip(surfaces, synthetic)):
            stacks[k] = stacks[_WHOLE]  # e.g. a single-class label map: share the distance maps
        else:
            stacks[k] = _SyntheticSurfaces(surfaces, grid, spacing)
    syn_counts = {k: np.array([v.counts[k] for v in synthetic]) for k in [_WHOLE, *classes]}
    whole_empty = syn_counts[_WHOLE] == 0
    diagonal = _diagonal(shape, spacing)
    total = n_training if n_training is not None else _length(training_labels)

    columns: dict[str, list[np.ndarray]] = {m: [] for m in wanted}
    for done, volume in enumerate(training_labels, start=1):
        label_map = _as_label_map(volume, shape, f"training label map {done - 1}")
        target = _volume(label_map, classes, keys, table)
        if "dice_binary" in wanted or "dice_multiclass" in wanted:
            foreground = np.flatnonzero(label_map)
            target_fg = label_map.ravel()[foreground]
            gathered = np.take(flat_labels, foreground, axis=1)
            if "dice_binary" in wanted:
                columns["dice_binary"].append(
                    _dice_from_counts(np.count_nonzero(gathered, axis=1), syn_counts[_WHOLE] + target.counts[_WHOLE]))
            if "dice_multiclass" in wanted:
                per_class = []
                for c in classes:
                    overlap = np.count_nonzero(gathered[:, target_fg == c] == c, axis=1)
                    per_class.append(_dice_from_counts(overlap, syn_counts[c] + target.counts[c]))
                columns["dice_multiclass"].append(_nan_mean_rows(np.stack(per_class, axis=1)))
        if keys:
            column = _TrainingColumn(target, stacks, whole_empty, diagonal)
            if "asd_binary" in wanted:
                columns["asd_binary"].append(column.asd(_WHOLE))
            if "asd_multiclass" in wanted:
                columns["asd_multiclass"].append(_nan_mean_rows(np.stack([column.asd(c) for c in classes], axis=1)))
        if progress is not None:
            progress(done, total)

    return {m: np.stack(columns[m], axis=1) if columns[m] else np.empty((n_synthetic, 0)) for m in wanted}


def _dice_from_counts(overlap: np.ndarray, total: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 2.0 * overlap / total, math.nan)


def _nan_mean_rows(values: np.ndarray) -> np.ndarray:
    """Row means over non-NaN entries (classes present in either map); NaN if none."""
    present = ~np.isnan(values)
    n = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(present, values, 0.0).sum(axis=1) / n, math.nan)


def _length(iterable) -> int | None:
    try:
        return len(iterable)
    except TypeError:
        return None
