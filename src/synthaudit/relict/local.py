"""Local replicas: a training patient's region copied into an otherwise new volume (issue 33).

Why: every RELICT measure compares whole volumes. A 2-3 cm region copied from a training
scan (a lesion, an implant) is under 1 % of a head CT's voxels, so the whole-volume ratio of
such a volume stays among the novel volumes'. Here the grid is split into overlapping cubes
of about ``block_mm`` (half-block stride, sized in mm, not voxels), every (synthetic,
training) pair gets a distance per block, and RELICT's ratio (closest / mean of the n
closest) is taken per block over the training volumes. A local copy drives its block's
ratio towards 0 while the rest of the volume looks new.

Calibration: the most extreme block of a volume is what is tested, so its false-positive
rate must account for the number of blocks. Each block's ratio is divided by the held-out
scans' median ratio at that block (what a new patient scores there), a volume's local score
is its lowest relative block ratio, and that score is calibrated
against the held-out scans' own local scores (:mod:`.calibration`: leave-patient-out,
``(1 + #null <= score) / (1 + n_null)``): a max-statistic correction over the blocks. A held-out
scan's own blocks are standardised without its patient, so its score is what a new patient's
would be.

Block distances: the mean absolute (``block_mae``) or squared (``block_mse``) voxel difference per
block (the registry's local level), from per-cell sums over the half-block cells (one pass over the voxels per pair; a
block is 2 x 2 x 2 cells). Blocks are only kept where the anatomy is: at least half their
voxels differ from the training volumes' background in the training mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..numerics import FASTMATH

from .. import registry

LOCAL_MEASURES = tuple(registry.names(registry.LOCAL))  # the registry's local level


@dataclass(frozen=True)
class BlockGrid:
    """Overlapping cubes over a volume grid: cells of ``cell`` voxels, a block = 2 x 2 x 2 cells.

    Attributes:
        shape: The volume grid (voxels).
        cell: Cell size per axis (voxels): half the block, the stride.
        n_cells: Cells per axis (the last one may be partial: voxels beyond it are dropped).
    """

    shape: tuple[int, int, int]
    cell: tuple[int, int, int]

    @classmethod
    def from_mm(cls, shape: Sequence[int], spacing_mm: Sequence[float], block_mm: float,
                clamp: bool = False) -> BlockGrid:
        """Blocks of about ``block_mm`` per axis (an even number of voxels, at least 2).

        ``clamp``: along an axis too short for two cells of that size (a thin slab), use the
        largest cell that gives two; otherwise such a grid is refused."""
        if block_mm <= 0:
            raise ValueError(f"block_mm must be positive, got {block_mm}")
        shape = tuple(int(n) for n in shape)
        cell = tuple(max(1, int(round(block_mm / (2 * float(s))))) for s in spacing_mm)
        if any(2 * c > n for c, n in zip(cell, shape)):
            if not clamp or min(shape) < 2:
                raise ValueError(f"blocks of {block_mm} mm ({[2 * c for c in cell]} voxels) do not fit the grid {shape}")
            cell = tuple(min(c, n // 2) for c, n in zip(cell, shape))
        return cls(shape, cell)

    @property
    def n_cells(self) -> tuple[int, int, int]:
        return tuple(n // c for n, c in zip(self.shape, self.cell))

    @property
    def n_blocks_per_axis(self) -> tuple[int, int, int]:
        return tuple(k - 1 for k in self.n_cells)

    @property
    def n_blocks(self) -> int:
        return math.prod(self.n_blocks_per_axis)

    @property
    def block_voxels(self) -> int:
        return 8 * math.prod(self.cell)

    def block_ranges(self, b: int) -> tuple[tuple[int, int], ...]:
        """Voxel range [start, stop) per axis of block ``b`` (C order over the block grid)."""
        idx = np.unravel_index(int(b), self.n_blocks_per_axis)
        return tuple((int(i) * c, (int(i) + 2) * c) for i, c in zip(idx, self.cell))

    def block_centre_mm(self, b: int, affine: np.ndarray) -> tuple[float, float, float]:
        """World coordinates (mm) of block ``b``'s centre under the grid's affine."""
        centre = [(lo + hi - 1) / 2.0 for lo, hi in self.block_ranges(b)]
        xyz = np.asarray(affine, np.float64) @ np.array([*centre, 1.0])
        return tuple(float(v) for v in xyz[:3])

    def cell_sums(self, x: np.ndarray) -> np.ndarray:
        """Sum of ``x`` (the grid's shape, or (N, *shape)) over each cell."""
        lead = x.shape[:-3]
        k = self.n_cells
        crop = x[..., : k[0] * self.cell[0], : k[1] * self.cell[1], : k[2] * self.cell[2]]
        r = crop.reshape(*lead, k[0], self.cell[0], k[1], self.cell[1], k[2], self.cell[2])
        n = len(lead)
        return r.sum(axis=(n + 1, n + 3, n + 5), dtype=np.float64)

    def blocks_from_cells(self, cells: np.ndarray) -> np.ndarray:
        """(..., kx, ky, kz) cell sums -> (..., n_blocks) block sums (2 x 2 x 2 cells each)."""
        c = cells
        s = c[..., :-1, :, :] + c[..., 1:, :, :]
        s = s[..., :, :-1, :] + s[..., :, 1:, :]
        s = s[..., :, :, :-1] + s[..., :, :, 1:]
        return s.reshape(*cells.shape[:-3], -1)

    def block_means(self, x: np.ndarray) -> np.ndarray:
        """Mean of ``x`` over each block: (..., n_blocks)."""
        return self.blocks_from_cells(self.cell_sums(x)) / self.block_voxels


def _textured(volumes: np.ndarray, background: float, data_range: float, tolerance: float,
              ceiling: float | None) -> np.ndarray:
    """Voxels that can carry a patient's detail: off the background, and below the intensity
    ceiling where a window clipped them (a block of clipped bone is 1.0 in every CT)."""
    v = np.asarray(volumes, np.float32)
    inside = np.abs(v - background) > tolerance * data_range
    if ceiling is not None:
        inside &= v < ceiling - 1e-6 * data_range
    return inside.astype(np.float32)


def anatomy_blocks(grid: BlockGrid, training_mean: np.ndarray, background: float, data_range: float,
                   min_fraction: float = 0.5, tolerance: float = 0.05) -> np.ndarray:
    """Boolean (n_blocks,): blocks with at least ``min_fraction`` of voxels inside the anatomy,
    i.e. where the training volumes' mean differs from their background by more than
    ``tolerance`` x ``data_range`` (air blocks: every pair's distance is noise, their ratio 0/0)."""
    inside = (np.abs(np.asarray(training_mean, np.float64) - background) > tolerance * data_range).astype(np.float64)
    return grid.block_means(inside) >= min_fraction


def volume_blocks(grid: BlockGrid, volumes: np.ndarray, background: float, data_range: float,
                  blocks: np.ndarray | None = None, ceiling: float | None = None, min_fraction: float = 0.5,
                  tolerance: float = 0.05) -> np.ndarray:
    """(N, B) boolean: the blocks where each volume itself has anatomy that can be copied.

    Why per volume: a block at the edge of the head can be air in a smaller head, and a block
    of bone clipped by the intensity window is the ceiling value in every scan; a synthetic
    volume and a training scan match there to 0 and would look like a copy (the demo's 12 mm
    blocks did exactly that). A block counts when at least ``min_fraction`` of the volume's
    voxels are off the background by ``tolerance`` x ``data_range`` and below ``ceiling``
    (the intensity maximum, where a window clips; None: no ceiling)."""
    inside = _textured(volumes, background, data_range, tolerance, ceiling)
    frac = grid.block_means(inside) >= min_fraction
    return frac if blocks is None else frac[:, blocks]


def block_mse(abs_cells: np.ndarray, sq_cells: np.ndarray, grid: BlockGrid) -> np.ndarray:
    """``block_mse``: mean (s - t)^2 over each block, from the per-cell sums (..., kx, ky, kz)."""
    return grid.blocks_from_cells(sq_cells) / grid.block_voxels


def block_mae(abs_cells: np.ndarray, sq_cells: np.ndarray, grid: BlockGrid) -> np.ndarray:
    """``block_mae``: mean |s - t| over each block, from the per-cell sums."""
    return grid.blocks_from_cells(abs_cells) / grid.block_voxels


def all_pairs_block_distances(synthetic: np.ndarray, training: Iterable[np.ndarray], grid: BlockGrid,
                              measure: str = "block_mse", blocks: np.ndarray | None = None,
                              progress: Callable[[int], None] | None = None) -> np.ndarray:
    """(S, T, B) block distances of every synthetic volume against every training volume.

    ``measure``: a local-level measure of the registry (``block_mse``, ``block_mae``), whose
    function here turns the per-cell sums of |s - t| and (s - t)^2 (:func:`cell_error_sums`,
    one pass over the voxels per pair, both sums at once) into block values. ``blocks``: a
    boolean mask of the blocks to keep (B = its count); None: all.
    """
    columns = list(block_distance_columns(synthetic, training, grid, measure, blocks, progress))
    if not columns:
        raise ValueError("no training volumes")
    return np.stack(columns, axis=1)


def block_distance_columns(synthetic: np.ndarray, training: Iterable[np.ndarray], grid: BlockGrid,
                           measure: str = "block_mse", blocks: np.ndarray | None = None,
                           progress: Callable[[int], None] | None = None) -> Iterator[np.ndarray]:
    """:func:`all_pairs_block_distances` one training volume at a time: (S, B) float32 each."""
    if measure not in LOCAL_MEASURES:
        raise ValueError(f"local measure {measure!r}: choose one of {list(LOCAL_MEASURES)}")
    function = registry.implementation(measure, globals(), __name__)
    syn = np.ascontiguousarray(synthetic, np.float32)
    if syn.ndim != 4 or syn.shape[1:] != grid.shape:
        raise ValueError(f"synthetic volumes of shape {syn.shape}; the block grid is {grid.shape}")
    for j, t in enumerate(training):
        t = np.ascontiguousarray(t, np.float32)
        if t.shape != grid.shape:
            raise ValueError(f"training volume {j} has shape {t.shape}; the block grid is {grid.shape}")
        abs_c, sq_c = cell_error_sums(syn, t[None], grid.cell)
        b = function(abs_c[:, 0], sq_c[:, 0], grid)
        yield (b if blocks is None else b[:, blocks]).astype(np.float32)
        if progress is not None:
            progress(j + 1)


def cell_error_sums(synthetic: np.ndarray, training: np.ndarray, cell: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per (synthetic, training, cell): ``sum |s - t|`` and ``sum (s - t)^2`` (float64), one
    pass over the voxels; cells of ``cell`` voxels, partial cells at the far ends dropped.

    (S, X, Y, Z) and (T, X, Y, Z) float32 in, two (S, T, kx, ky, kz) arrays out. Parallel over
    the x-cells (each thread owns its cells: no two threads write one sum)."""
    syn = np.ascontiguousarray(synthetic, np.float32)
    tr = np.ascontiguousarray(training, np.float32)
    cx, cy, cz = (int(c) for c in cell)
    k = (syn.shape[1] // cx, syn.shape[2] // cy, syn.shape[3] // cz)
    abs_out = np.zeros((syn.shape[0], tr.shape[0], *k))
    sq_out = np.zeros_like(abs_out)
    _cell_sums(syn, tr, cx, cy, cz, abs_out, sq_out)
    return abs_out, sq_out


@njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True)
def _cell_sums(syn, tr, cx, cy, cz, abs_out, sq_out):  # pragma: no cover - compiled
    """Per x-cell (one thread each), per synthetic volume and pair of training volumes: the
    voxels' |d| and d^2 accumulate along whole z-rows into per-(y-cell, z) float32 rows, which
    are summed into cells once the x-cell is done. The inner loop is a long contiguous z-run, as
    in the plain kernel (a z-run per cell, 6-12 voxels, cost 1.9-2.4x the plain MAE + RMSE pass
    at 1 mm; this one 0.5-1.0x, bench/synthaudit_bench/local_replicas.py). float32 rows hold at
    most cx * cy voxels each before the float64 cell sums."""
    group = 2  # training volumes per read of a synthetic row (1, 2, 4 measured alike; 2 best at 18 mm)
    n_s, n_t = syn.shape[0], tr.shape[0]
    kx, ky, kz = abs_out.shape[2], abs_out.shape[3], abs_out.shape[4]
    zc = kz * cz
    for ix in prange(kx):
        acc_a = np.zeros((group, ky, zc), np.float32)
        acc_q = np.zeros((group, ky, zc), np.float32)
        for s in range(n_s):
            for t0 in range(0, n_t, group):
                nt = min(group, n_t - t0)
                acc_a[:] = 0.0
                acc_q[:] = 0.0
                for x in range(ix * cx, (ix + 1) * cx):
                    for iy in range(ky):
                        for y in range(iy * cy, (iy + 1) * cy):
                            a = syn[s, x, y]
                            for k in range(nt):
                                b = tr[t0 + k, x, y]
                                ra = acc_a[k, iy]
                                rq = acc_q[k, iy]
                                for z in range(zc):
                                    d = a[z] - b[z]
                                    ra[z] += abs(d)
                                    rq[z] += d * d
                for k in range(nt):
                    for iy in range(ky):
                        for iz in range(kz):
                            sa = 0.0
                            sq = 0.0
                            for z in range(iz * cz, (iz + 1) * cz):
                                sa += acc_a[k, iy, z]
                                sq += acc_q[k, iy, z]
                            abs_out[s, t0 + k, ix, iy, iz] = sa
                            sq_out[s, t0 + k, ix, iy, iz] = sq


@dataclass
class BlockRatios:
    """RELICT's ratio per synthetic volume and block: closest / mean of the n closest training volumes."""

    ratio: np.ndarray  # (S, B)
    closest: np.ndarray  # (S, B) training index of the closest
    n_used: int


def _ratio_of(nearest: np.ndarray, closest: np.ndarray, n_used: int) -> BlockRatios:
    """The ratio from the ``n_used`` smallest distances per (query, block) along axis 1, in any
    order: sorted before they are summed, so that the batch and the streamed paths (and any
    order of the training volumes' ties) give the same bits."""
    top = np.sort(np.asarray(nearest, np.float64), axis=1)
    best, mean_n = top[:, 0, :], top.mean(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mean_n > 0, best / mean_n, 1.0)
    return BlockRatios(ratio, closest, n_used)


def _n_used(n_closest: int, n_train: int) -> int:
    if int(n_closest) < 1:
        raise ValueError(f"n_closest must be >= 1, got {n_closest}")
    return min(int(n_closest), n_train)


def block_ratios(distances: np.ndarray, n_closest: int) -> BlockRatios:
    """Per block, over the training axis of (S, T, B) distances (0 / 0 counts as 1: nothing to tell)."""
    d = np.asarray(distances, np.float64)
    if d.ndim != 3:
        raise ValueError(f"block distances must be (synthetic, training, blocks), got shape {d.shape}")
    n_used = _n_used(n_closest, d.shape[1])
    part = np.partition(d, n_used - 1, axis=1)[:, :n_used, :] if n_used < d.shape[1] else d
    return _ratio_of(part, d.argmin(axis=1), n_used)


class NearestBlocks:
    """:func:`block_ratios` over a stream of training columns, without the (S, T, B) array.

    Why: the whole array is queries x training x blocks; at RELICT's 1 mm with 774 training
    scans and 12 mm blocks it is ~7 GB, so the block size users could afford was set by memory,
    not by the regions they need to find. Only the n smallest distances per (query, block) and
    the first training index of the smallest are kept: (S, n, B) float32, the same ratio bits as
    :func:`block_ratios` on the whole array.
    """

    def __init__(self, n_closest: int):
        self.n_closest = _n_used(n_closest, int(n_closest))  # checked here, clamped to the training count at the end
        self.nearest: np.ndarray | None = None  # (S, m, B), m <= n_closest, unordered along axis 1
        self.best: np.ndarray | None = None
        self.closest: np.ndarray | None = None
        self.n_seen = 0

    def add(self, column: np.ndarray) -> None:
        """The next training volume's (S, B) block distances."""
        col = np.asarray(column, np.float32)
        if self.nearest is None:
            self.nearest = col[:, None, :].copy()
            self.best, self.closest = col.copy(), np.zeros(col.shape, np.int64)
        else:
            if col.shape != self.best.shape:
                raise ValueError(f"training column {self.n_seen}: block distances of shape {col.shape}, "
                                 f"the earlier ones {self.best.shape}")
            closer = col < self.best  # strictly: the first of tied training volumes stays, as argmin keeps it
            self.closest[closer] = self.n_seen
            np.minimum(self.best, col, out=self.best)
            if self.nearest.shape[1] < self.n_closest:
                self.nearest = np.concatenate([self.nearest, col[:, None, :]], axis=1)
            else:  # the column replaces the largest of the n kept where it is smaller
                worst = self.nearest.argmax(axis=1)[:, None, :]
                kept = np.take_along_axis(self.nearest, worst, axis=1)
                replace = col[:, None, :] < kept
                if replace.any():
                    np.put_along_axis(self.nearest, worst, np.where(replace, col[:, None, :], kept), axis=1)
        self.n_seen += 1

    def ratios(self) -> BlockRatios:
        if self.nearest is None:
            raise ValueError("no training volumes")
        return _ratio_of(self.nearest, self.closest, _n_used(self.n_closest, self.n_seen))


def standardise_blocks(ratio: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Each block's ratio relative to the median of ``reference``'s rows (held-out scans) at that
    block: 1 is a typical new patient there, 0 a block copied voxel for voxel.

    Why the median only, not a z-score: with the ~10-50 held-out scans users have, a block's
    spread is estimated too poorly; over ~100 blocks some spread comes out tiny, and a novel
    volume's ordinary block then looks as extreme as a copy (a scaled-MAD z-score did exactly
    that on the test phantom: -8.2 for a novel block, -8.1 for the copied one). The location
    is stable, and the max over blocks is corrected by the calibration of the local score.
    """
    ref = np.asarray(reference, np.float64)
    if ref.ndim != 2 or ref.shape[0] < 2:
        raise ValueError(f"standardising blocks needs at least two reference scans, got shape {ref.shape}")
    med = np.median(ref, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(med > 0, np.asarray(ratio, np.float64) / med, 1.0)


@dataclass
class LocalScores:
    """A volume's local score (its lowest relative block ratio) and where it is."""

    score: np.ndarray  # (N,) lower = more replica-like
    block: np.ndarray  # (N,) index into the kept blocks
    closest: np.ndarray  # (N,) training index of the block's closest training volume
    z: np.ndarray  # (N, B) block ratios relative to the held-out median


def local_scores(ratios: BlockRatios, heldout: BlockRatios, heldout_patients: Sequence[str] | None = None,
                 self_is_heldout: bool = False, valid: np.ndarray | None = None) -> LocalScores:
    """Relate each block to the held-out scans' median there and take each volume's lowest block.

    ``self_is_heldout``: the rows are the held-out scans themselves; each is then standardised
    without its patient's scans (``heldout_patients``), as a new patient would be.
    ``valid``: (N, B) blocks each volume may be judged on (:func:`volume_blocks`); None: all.
    """
    r = ratios.ratio
    if self_is_heldout:
        if heldout_patients is None:
            raise ValueError("held-out scans scored against themselves need their patient ids")
        patients = np.asarray(heldout_patients)
        z = np.empty_like(r, dtype=np.float64)
        for p in np.unique(patients):
            mine = patients == p
            z[mine] = standardise_blocks(r[mine], heldout.ratio[~mine])
    else:
        z = standardise_blocks(r, heldout.ratio)
    if valid is not None:
        z = np.where(np.asarray(valid, bool), z, np.inf)
    if z.shape[1] == 0:  # no block to test (no anatomy found): nothing can be called
        n = len(z)
        return LocalScores(np.full(n, np.inf), np.zeros(n, int), np.zeros(n, int), z)
    block = z.argmin(axis=1)
    rows = np.arange(len(z))
    return LocalScores(z[rows, block], block, ratios.closest[rows, block], z)


# --- positive controls: a training scan's region pasted into a held-out scan ------------------------
#
# Why in the workflow and not only in a benchmark: whether a 2 cm copy is findable depends on the
# user's grid, noise, anatomy and held-out set. The controls answer "would this audit have found a
# region copied from one of my training patients?" on the run's own data, beside its calls.


def paste_weights(shape: Sequence[int], centre_vox: Sequence[float], side_vox: Sequence[float],
                  margin_vox: Sequence[float]) -> np.ndarray:
    """1 inside a cube of ``side_vox`` around ``centre_vox``, a linear ramp to 0 over
    ``margin_vox`` outside it, 0 beyond (separable per axis): the blend of a pasted region."""
    w = np.ones(tuple(int(n) for n in shape), np.float32)
    for axis, (n, c) in enumerate(zip(w.shape, centre_vox)):
        x = np.arange(n, dtype=np.float64)
        dist = np.abs(x - float(c)) - float(side_vox[axis]) / 2.0  # <= 0 inside
        m = float(margin_vox[axis])
        prof = np.clip(1.0 - dist / m, 0.0, 1.0) if m > 0 else (dist <= 0).astype(np.float64)
        prof = np.where(dist <= 0, 1.0, prof)
        w *= prof.astype(np.float32).reshape([-1 if a == axis else 1 for a in range(3)])
    return w


def rescan_noise_sd(volumes: np.ndarray, patients: Sequence[str]) -> float | None:
    """A scan's noise SD from patients scanned twice on the registered grid: SD(a - b) / sqrt(2),
    the median over patients (what registration and change leave is counted as noise too: an
    upper estimate). None without such patients."""
    by: dict[str, list[int]] = {}
    for i, p in enumerate(patients):
        by.setdefault(str(p), []).append(i)
    sds = [float(np.std(np.asarray(volumes[v[0]], np.float64) - volumes[v[1]]) / math.sqrt(2))
           for v in by.values() if len(v) >= 2]
    return float(np.median(sds)) if sds else None


def neighbour_noise_sd(volumes: np.ndarray, inside: np.ndarray) -> float:
    """A scan's noise SD from neighbouring voxels inside the anatomy: the robust SD of their
    differences / sqrt(2), the median over volumes and axes. A lower estimate on resampled
    grids (interpolation correlates neighbours): used only without repeat scans."""
    sds = []
    for v, m in zip(volumes, inside):
        for ax in range(3):
            lo = tuple(slice(0, -1) if a == ax else slice(None) for a in range(3))
            hi = tuple(slice(1, None) if a == ax else slice(None) for a in range(3))
            both = m[lo] & m[hi]
            if both.sum() < 100:
                continue
            d = (np.asarray(v[hi], np.float64) - v[lo])[both]
            sds.append(1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2))
    return float(np.median(sds)) if sds else 0.0


def rarest_label(label: np.ndarray, min_voxels: int = 8) -> tuple[np.ndarray | None, int | None]:
    """The voxels of the label map's rarest class present (at least ``min_voxels``) and that class:
    where several classes exist, the most specific one (a tumour, not the liver it lies in).
    (None, None) without foreground."""
    lab = np.asarray(label)
    classes, counts = np.unique(lab[lab > 0], return_counts=True)
    ok = counts >= min_voxels
    if not ok.any():
        return None, None
    c = classes[ok][int(np.argmin(counts[ok]))]
    return lab == c, int(c)


def informative_centre(donor: np.ndarray, inside: np.ndarray, side_vox: Sequence[float], rng: np.random.Generator,
                       within: np.ndarray | None = None, top_fraction: float = 0.25,
                       min_inside: float = 0.9) -> tuple[tuple[float, float, float], float]:
    """Where to paste a positive control: a cube of ``side_vox`` with structure to copy.

    Why not where the donor differs most from the cohort's mean (the rule before issue 43): on
    real CT that is the head's outline (a deformation moves the skin-air edge by 1,000 HU), a
    cube half in air whose blocks the level does not test, and on homogeneous tissue (the liver
    a label names) there is nothing a block distance can tell from noise. Here a centre is drawn
    (``rng``) among the cubes at least ``min_inside`` inside the anatomy (``inside``: the donor's
    and the recipient's) whose information, the SD of the (smoothed) ``donor`` over the cube, is
    in the top ``top_fraction`` (over the cube's anatomy voxels: air is not structure); ``within`` (a label class's voxels) restricts the centres to it.

    Returns the centre (voxels) and the chosen cube's information (SD, the volume's units).
    """
    from scipy.ndimage import uniform_filter

    size = [max(1, int(round(s))) for s in side_vox]
    x = np.asarray(donor, np.float64)
    m = np.asarray(inside, np.float64)
    frac = uniform_filter(m, size=size, mode="constant")
    with np.errstate(invalid="ignore", divide="ignore"):  # moments over the anatomy's voxels only: an air edge
        mean = uniform_filter(x * m, size=size, mode="constant") / frac  # inside the cube is not structure
        info = np.sqrt(np.maximum(uniform_filter(x * x * m, size=size, mode="constant") / frac - mean * mean, 0.0))
    info = np.nan_to_num(info, nan=0.0)
    allowed = np.ones(x.shape, bool) if within is None else np.asarray(within, bool)
    for need in (min_inside, 0.5):
        candidates = allowed & (frac >= need)
        if candidates.any():
            break
    else:
        candidates = frac >= 0.5 if (frac >= 0.5).any() else np.ones(x.shape, bool)
    values = info[candidates]
    cut = np.quantile(values, 1.0 - top_fraction)
    pool = np.flatnonzero(candidates.ravel() & (info.ravel() >= cut))
    flat = int(pool[int(rng.integers(len(pool)))])
    centre = np.unravel_index(flat, x.shape)
    return tuple(float(c) for c in centre), float(info[centre])


def cube_slices(shape: Sequence[int], centre_vox: Sequence[float], side_vox: Sequence[float]) -> tuple[slice, ...]:
    """The voxels of a cube of ``side_vox`` around ``centre_vox``, clipped to the grid."""
    out = []
    for n, c, s in zip(shape, centre_vox, side_vox):
        lo = int(round(float(c) - float(s) / 2.0))
        out.append(slice(max(0, lo), min(int(n), lo + max(1, int(round(float(s)))))))
    return tuple(out)


def covering_block(grid: BlockGrid, kept: np.ndarray, centre_vox: Sequence[float],
                   side_vox: Sequence[float]) -> tuple[int | None, float]:
    """Index into ``kept`` (the tested blocks) of the block that overlaps a cube of ``side_vox``
    around ``centre_vox`` most (ties: the nearer centre), and the fraction of that block inside
    the cube; (None, 0.0) when none overlaps."""
    best, best_key = None, None
    for j, b in enumerate(kept):
        overlap, dist = 1.0, 0.0
        for (lo, hi), c, s in zip(grid.block_ranges(int(b)), centre_vox, side_vox):
            a, z = float(c) - float(s) / 2.0, float(c) + float(s) / 2.0
            overlap *= max(0.0, min(hi, z) - max(lo, a))
            dist += ((lo + hi - 1) / 2.0 - float(c)) ** 2
        key = (overlap, -dist)
        if overlap > 0 and (best_key is None or key > best_key):
            best, best_key = j, key
    return best, (best_key[0] / grid.block_voxels if best_key else 0.0)


@dataclass
class Control:
    """One positive control: the donor's region, its size and where it went."""

    size_mm: float
    recipient: int  # index into the held-out scans
    donor: int  # index into the training scans
    centre_vox: tuple[float, float, float]
    centred_on: str  # "informative" or "label <class>" (informative_centre, within the rarest label class)


def plan_controls(n_recipients: int, n_donors: int, sizes_mm: Sequence[float], seed: int) -> list[tuple[float, int, int]]:
    """(size, recipient, donor) for every recipient and size; the donors a seeded draw per size
    (every training scan once before any twice)."""
    if n_donors < 1:
        raise ValueError("positive controls need training scans")
    out = []
    for k, size in enumerate(sizes_mm):
        rng = np.random.default_rng([int(seed), k])
        reps = -(-n_recipients // n_donors)
        donors = np.concatenate([rng.permutation(n_donors) for _ in range(reps)])[:n_recipients]
        out += [(float(size), r, int(d)) for r, d in enumerate(donors)]
    return out


def spike(recipient: np.ndarray, donor: np.ndarray, centre_vox: Sequence[float], size_mm: float,
          spacing_mm: Sequence[float], margin_mm: float, noise_sd: float, rng: np.random.Generator) -> np.ndarray:
    """``recipient`` with a cube of ``size_mm`` of ``donor`` around ``centre_vox``, blended over
    ``margin_mm``; the region gets fresh noise of ``noise_sd`` (a generator reproduces the
    anatomy, not the training scan's noise: exact voxels would make the test easy)."""
    sp = np.asarray(spacing_mm, np.float64)
    w = paste_weights(recipient.shape, centre_vox, float(size_mm) / sp, np.full(3, float(margin_mm)) / sp)
    region = np.asarray(donor, np.float32)
    if noise_sd > 0:
        region = region + rng.normal(0.0, noise_sd, size=region.shape).astype(np.float32)
    return (w * region + (1 - w) * np.asarray(recipient, np.float32)).astype(np.float32)
