"""Fréchet Radiomics Distance (FRD; Konz, Osuala et al., Medical Image Analysis 2026), computed as
frd-score 1.0.1 computes its default, v1, on 3D volumes: the same numbers, so that a lab can set
synthaudit's FRD beside a published one.

Why radiomics beside the encoder's embeddings: the Fréchet distance on a network's features
measures what that network was trained to see; FRD's ~1,000 hand-defined intensity, texture and
filter-response features (PyRadiomics: Original, Laplacian of Gaussian at 2-5 mm, the 8 wavelet
bands; first order, GLCM, GLRLM, GLSZM, NGTDM) need no weights and mean the same on every
machine. Two labs that resample to the same grid compute the same FRD.

The steps (frd-score's ``compute_frd(..., frd_version="v1")`` with a full-image mask):

1. :func:`features_of`: each volume read with SimpleITK as float32, a mask of ones but for the
   corner voxel (PyRadiomics issue 765), :data:`CONFIG` (frd-score's ``extraction_3d.yaml``:
   each image z-scored and scaled by 100, resampled to 2 mm with a B-spline, bin width 5). Every
   numeric output is a feature, PyRadiomics' numeric diagnostics included (as frd-score keeps
   them for the paper's numbers).
2. :func:`frd`: rows with a NaN dropped, float32; every column z-scored by the *reference* set's
   mean and SD (v1's ``norm_ref="d1"``; here the training scans), columns with a non-finite value
   in either set dropped; the Fréchet distance of the two Gaussians; FRD = log of it (frd-score's
   default, log d_F^2, not the paper's Eq. 3 log d_F, which is half of it).

The Fréchet distance itself is :func:`.measures.frechet_distance` (exact for n << d, where
frd-score's matrix square root of a rank-deficient 1,000 x 1,000 product is approximate; the
difference is measured in tests/test_frd.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .measures import frechet_distance

CONFIG = Path(__file__).with_name("frd_extraction_3d.yaml")
LABEL = ("FRD v1, 3D (frd-score 1.0.1's PyRadiomics settings: each volume z-scored x 100, resampled to 2 mm "
         "(B-spline), bin width 5; Original, LoG 2-5 mm, wavelet; full-image mask); FRD = log d_F^2, "
         "features z-scored by the training scans")


def extractor():
    """A PyRadiomics extractor with FRD v1's 3D settings, quiet (it logs every feature class)."""
    try:
        from radiomics import featureextractor, setVerbosity
    except ImportError as e:  # pragma: no cover - requirements.txt installs it
        raise ImportError("FRD needs PyRadiomics: pip install pyradiomics-bhklab==3.1.4 (a PyPI build of "
                          "PyRadiomics that installs on Python >= 3.10; the pyradiomics 3.1.0 sdist does not), "
                          "or set fidelity.frd: false") from e
    setVerbosity(60)
    logging.getLogger("radiomics").setLevel(logging.ERROR)
    return featureextractor.RadiomicsFeatureExtractor(str(CONFIG))


@contextlib.contextmanager
def _pyradiomics_without_repeated_work():
    """PyRadiomics with six of its hot spots made cheap, for the calls inside this block only (frd-score
    and a user's own PyRadiomics in the same process are left as they are). The same bits: tested
    against PyRadiomics' own functions, feature by feature (tests/test_frd.py). Measured per 92 x 110 x
    92 volume at 2 mm: 20.7 s, of which 3.8 s are Python's ``min``/``max`` looping over every voxel in
    ``getBinEdges`` and 2.2 s the same discretisation repeated by each of the 5 feature classes
    (13 images x 5 = 65 calls, cProfile).

    1. ``imageoperations.getBinEdges``: the fixed-width bins' range from NumPy's min and max (the same
       element: a minimum is exact). Arrays holding a NaN, and the bin-count branch, go to
       PyRadiomics' own function (Python's min over a NaN depends on where the NaN sits).
    2. ``RadiomicsFeaturesBase._applyBinning``: a call whose image, mask and settings equal the last
       call's, element by element, gets the last result (a copy) and the same grey-level
       coefficients; anything else is binned by :func:`.binning.binned` (PyRadiomics' matrix and grey
       levels from one gather of the region, 0.5 s of a head CT's 5 s; PyRadiomics' own function for a
       bin count, a NaN or an empty region).
    3. The GLSZM's empty zone sizes dropped first (:func:`_glszm_matrix`, :func:`_glszm_coefficients`).
       Its C function returns a grey levels x zone sizes matrix with a column for every size up to
       the mask's voxel count (207 x 362,391 float64, 600 MB, for the demo's CT at 2 mm), of which
       about 200 columns hold a zone. PyRadiomics deleted the one empty grey level from all of it
       (0.27 s per image, 3.5 s per volume) and summed it three times before deleting the empty sizes
       (most of 1.1 s of reductions). PyRadiomics' own code then runs on the filled columns; voxel-based
       extraction goes to PyRadiomics unchanged.
    4. The texture matrices themselves (GLCM, GLRLM, GLSZM, NGTDM: 0.7 s per image in C, 13 images per
       volume) from :mod:`.texture_matrices`, the same arrays in numba at 3-12x the speed; the GLSZM's
       zones go to step 3 directly, so its full matrix is never made.
    5. The GLCM's sum and difference marginals (:func:`.texture_matrices.glcm_coefficients`) without a
       boolean mask over every grey-level pair per sum (Ng^3 work: a third of a TOF slab's time).
    6. The first-order features (:mod:`.first_order`) with each mean, moment, percentile and sum of squares
       computed once per image, not once per feature (2.0 of the 5.3 s of a demo CT volume)."""
    from radiomics import base, cMatrices, firstorder, glcm, glszm, imageoperations

    from . import binning as binning_fast
    from . import first_order, texture_matrices  # texture_matrices first: it keeps PyRadiomics' C functions as shipped

    edges, binning = imageoperations.getBinEdges, base.RadiomicsFeaturesBase._applyBinning
    matrices = {name: getattr(cMatrices, name) for name in texture_matrices.REPLACEMENTS}
    glszm_matrix = glszm.RadiomicsGLSZM._calculateMatrix
    glszm_coefficients = glszm.RadiomicsGLSZM._calculateCoefficients
    glcm_coefficients = glcm.RadiomicsGLCM._calculateCoefficients
    first = firstorder.RadiomicsFirstOrder
    first_fast = first_order.getters(first)
    first_shipped = {name: first.__dict__[name] for name in first_fast}

    def getBinEdges(parameterValues, **kwargs):
        v = parameterValues
        if (kwargs.get("binCount") is not None or not isinstance(v, np.ndarray) or v.ndim != 1 or v.size == 0
                or v.dtype.kind != "f" or np.isnan(v).any()):
            return edges(parameterValues, **kwargs)
        width = kwargs.get("binWidth", 25)
        minimum, maximum = v.min(), v.max()
        # PyRadiomics 3.1's fixed-bin-width branch, line for line
        found = np.arange(minimum - (minimum % width), maximum + 2 * width, width)
        return [found[0] - .5, found[0] + .5] if len(found) == 1 else found

    last: dict = {}

    def _applyBinning(self, matrix):
        hit = last.get("in")
        if (hit is not None and hit[0].shape == matrix.shape and hit[0].dtype == matrix.dtype
                and hit[2] == self.settings and np.array_equal(hit[1], self.maskArray)
                and np.array_equal(hit[0], matrix)):
            binned, levels, ng = last["out"]
            self.coefficients["grayLevels"], self.coefficients["Ng"] = levels.copy(), ng
            return binned.copy()
        given, mask, settings = matrix.copy(), self.maskArray.copy(), dict(self.settings)
        binned = binning_fast.binned(self, matrix, binning, imageoperations.getBinEdges)
        last["in"] = (given, mask, settings)
        last["out"] = (binned.copy(), self.coefficients["grayLevels"].copy(), self.coefficients["Ng"])
        return binned

    def _calculateMatrix(self, voxelCoordinates=None):
        if self.voxelBased:
            return glszm_matrix(self, voxelCoordinates)
        return _glszm_matrix(self, glszm_matrix)

    def _calculateCoefficients(self):
        return glszm_coefficients(self) if self.voxelBased else _glszm_coefficients(self, glszm_coefficients)

    imageoperations.getBinEdges, base.RadiomicsFeaturesBase._applyBinning = getBinEdges, _applyBinning
    glszm.RadiomicsGLSZM._calculateMatrix = _calculateMatrix
    glszm.RadiomicsGLSZM._calculateCoefficients = _calculateCoefficients
    for name, fast in texture_matrices.REPLACEMENTS.items():
        setattr(cMatrices, name, fast)
    glcm.RadiomicsGLCM._calculateCoefficients = texture_matrices.glcm_coefficients
    for name, fast in first_fast.items():
        setattr(first, name, fast)
    try:
        yield
    finally:
        imageoperations.getBinEdges, base.RadiomicsFeaturesBase._applyBinning = edges, binning
        glszm.RadiomicsGLSZM._calculateMatrix = glszm_matrix
        glszm.RadiomicsGLSZM._calculateCoefficients = glszm_coefficients
        for name, shipped in matrices.items():
            setattr(cMatrices, name, shipped)
        glcm.RadiomicsGLCM._calculateCoefficients = glcm_coefficients
        for name, shipped in first_shipped.items():
            setattr(first, name, shipped)


def _glszm_matrix(self, shipped: Callable) -> np.ndarray:
    """PyRadiomics 3.1's ``RadiomicsGLSZM._calculateMatrix`` (``shipped``, not voxel-based) on the C
    function's matrix without the zone sizes that no zone has, but for 0, 1 or 2 of them (as many as the
    full matrix has, up to 2): PyRadiomics' own deletions then take the same NumPy branches (none, a
    single index, a mask) on an input of the same layout, so the matrix comes out the same, memory order
    included (the features' sums follow it: a C-ordered copy differed in the last bits of 16 of 1,014).
    A grey level absent from the region has no zone, so the filled sizes are those PyRadiomics keeps.
    The kept sizes (1-based) are kept for :func:`_glszm_coefficients`."""
    from radiomics import cMatrices

    from .texture_matrices import ORIGINALS, glszm_zones

    def compacted(*args):
        zones = glszm_zones(*args) if len(args) == 6 else None
        if zones is not None:  # the zones themselves: the full matrix is never made
            levels, sizes = zones
            return _compact_glszm(self, int(args[2]), levels, sizes)
        p = ORIGINALS["calculate_glszm"](*args)
        if not p.flags.c_contiguous:  # not what PyRadiomics 3.1 returns: leave the matrix as it is
            self._synthaudit_zone_sizes = None
            return p
        return np.ascontiguousarray(p[:, :, _kept_columns(self, p.any(axis=(0, 1)))])

    calculate = cMatrices.calculate_glszm

    cMatrices.calculate_glszm = compacted  # for this call only, as the block patches PyRadiomics' methods
    try:
        return shipped(self)
    finally:
        cMatrices.calculate_glszm = calculate


def _kept_columns(self, filled: np.ndarray) -> np.ndarray:
    """The GLSZM's columns that :func:`_glszm_matrix` keeps: the filled zone sizes and the first two empty
    ones (as many as there are, up to 2); the filled sizes (1-based) are kept for the coefficients."""
    self._synthaudit_zone_sizes = (np.flatnonzero(filled) + 1).astype(np.float64)
    return np.sort(np.concatenate([np.flatnonzero(filled), np.flatnonzero(~filled)[:2]]))


def _compact_glszm(self, n_levels: int, levels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """:func:`_glszm_matrix`'s matrix from the zones (grey level, size): the C matrix's filled columns and
    its first two empty ones (as many as it has, up to 2), the same values in the same C order."""
    largest = int(sizes.max())
    filled = np.zeros(largest, bool)
    filled[sizes - 1] = True
    columns = _kept_columns(self, filled)
    where = np.empty(largest, np.int64)
    where[columns] = np.arange(len(columns))
    p = np.zeros((1, n_levels, len(columns)), np.float64)
    np.add.at(p[0], (levels.astype(np.int64) - 1, where[sizes - 1]), 1.0)
    return p


def _glszm_coefficients(self, shipped: Callable) -> None:
    """PyRadiomics 3.1's ``RadiomicsGLSZM._calculateCoefficients`` (``shipped``) on :func:`_glszm_matrix`'s
    matrix, with the two coefficients that count zone sizes from the matrix's columns put right:
    ``jvector``, the kept sizes, and ``Np``, the voxels the zones cover (a sum of whole numbers, exact in
    any order, as PyRadiomics' over every size)."""
    shipped(self)
    jvector = getattr(self, "_synthaudit_zone_sizes", None)  # the filled sizes, which PyRadiomics kept, in order
    if jvector is None:
        return
    if self.coefficients["jvector"].shape != jvector.shape:
        raise RuntimeError("PyRadiomics' GLSZM kept other zone sizes than synthaudit's (report this)")
    np_ = np.sum(self.coefficients["ps"] * jvector[None, :], 1)
    np_[np_ == 0] = 1
    self.coefficients["jvector"], self.coefficients["Np"] = jvector, np_


def _read(path: str | Path):
    """One 3D volume as SimpleITK float32, or an error naming the file."""
    import SimpleITK as sitk

    try:
        image = sitk.ReadImage(str(path), outputPixelType=sitk.sitkFloat32)
    except RuntimeError as e:
        raise ValueError(f"{path}: SimpleITK cannot read it ({str(e).strip().splitlines()[-1]})") from None
    if image.GetDimension() != 3:
        raise ValueError(f"{path}: FRD here takes 3D volumes, this one has {image.GetDimension()} dimensions")
    return image


def _execute(image, mask: np.ndarray, ex=None) -> dict[str, float]:
    """PyRadiomics' features of ``image`` within ``mask`` (1 inside), by name, in its order."""
    import SimpleITK as sitk

    m = sitk.GetImageFromArray(mask.astype(np.uint8))
    m.CopyInformation(image)
    # ITK splits its filters' work (the normalisation's statistics, the resampling) over threads
    # whose number changes the last bits of ~half the features (478 of 1,014 between 1 and 2
    # threads on the demo's CT): one thread makes them the same on every machine; parallelism is
    # across volumes (extract_many's workers)
    threads = sitk.ProcessObject.GetGlobalDefaultNumberOfThreads()
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(1)
    try:
        with _pyradiomics_without_repeated_work():
            out = (ex or extractor()).execute(image, m, label=1)
    finally:
        sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(threads)
    feats: dict[str, float] = {}
    for name, value in out.items():
        if "diagnostics" not in name:
            feats[name.replace("original_", "")] = float(value)
        else:  # the numeric diagnostics count (frd-score v1 keeps them, for the paper's numbers)
            try:
                feats[name] = float(value)
            except (TypeError, ValueError):
                pass
    return feats


def features_of(path: str | Path, ex=None) -> dict[str, float]:
    """One volume's FRD features, by name, in PyRadiomics' order (frd-score's
    ``process_image_mask_pair`` for a volume without a mask)."""
    image = _read(path)
    ones = np.ones(image.GetSize()[::-1], np.uint8)
    ones[0, 0, 0] = 0  # a mask of the whole image trips PyRadiomics (issue 765): frd-score clears a corner
    return _execute(image, ones, ex)


def class_features_of(path: str | Path, label_path: str | Path, n_classes: int,
                      ex=None) -> list[dict[str, float] | None]:
    """The FRD features of each label class's region (label value k + 1 for class k) as PyRadiomics'
    mask, frd-score's ``process_image_mask_pair`` with a mask: per class, or None where the volume
    holds at most one voxel of it (frd-score skips those) or too little for PyRadiomics (a region that
    vanishes at 2 mm). Why: a
    generator can render the organ well and the lesion badly; the whole-volume FRD is dominated by
    the larger structure."""
    import SimpleITK as sitk

    image = _read(path)
    try:
        labels = sitk.GetArrayFromImage(sitk.ReadImage(str(label_path)))
    except RuntimeError as e:
        raise ValueError(f"{label_path}: SimpleITK cannot read it ({str(e).strip().splitlines()[-1]})") from None
    if labels.shape != image.GetSize()[::-1]:
        raise ValueError(f"{label_path}: label map of {labels.shape[::-1]} voxels, its image {path} has "
                         f"{image.GetSize()}: they must share the grid")
    out: list[dict[str, float] | None] = []
    for k in range(n_classes):
        region = labels == k + 1
        if region.sum() <= 1:  # frd-score skips a mask of one voxel or none
            out.append(None)
            continue
        try:
            out.append(_execute(image, region, ex))
        except (ValueError, RuntimeError, ZeroDivisionError, FloatingPointError):
            out.append(None)  # PyRadiomics refuses a region it cannot describe (one voxel, none after resampling)
    return out


_WORKER: dict = {}


def _safe_features(path: str, ex) -> tuple[list[dict[str, float]] | None, str | None]:
    """One volume's features (as the one row of a list, as the cache keeps them), or why PyRadiomics
    could not compute them (a constant volume: its z-scoring divides by 0 and the binning fails)."""
    try:
        return [features_of(path, ex)], None
    except (ValueError, RuntimeError, ZeroDivisionError, FloatingPointError) as e:
        return None, f"{type(e).__name__}: {e}"


def _with_extractor(task: tuple[Callable, object]):
    """In a worker process: ``fn(job, extractor)`` with the worker's one extractor."""
    fn, job = task
    if "ex" not in _WORKER:
        _WORKER["ex"] = extractor()
    return fn(job, _WORKER["ex"])


def _each(fn: Callable, jobs: list, workers: int, progress: Callable[[int], None] | None) -> list:
    """``fn(job, extractor)`` of every job, in order: in this process with one extractor, or in
    ``workers`` forked processes with one each (the numbers do not depend on which)."""
    out = []
    if workers <= 1 or len(jobs) <= 1:
        ex = extractor()
        results = (fn(job, ex) for job in jobs)
        for k, got in enumerate(results):
            out.append(got)
            if progress:
                progress(k + 1)
        return out
    import multiprocessing as mp

    from .texture_matrices import warm

    warm()  # the workers inherit the compiled kernels
    with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
        for k, got in enumerate(pool.imap(_with_extractor, [(fn, job) for job in jobs])):
            out.append(got)
            if progress:
                progress(k + 1)
    return out


def _cached(fn: Callable, jobs: list, keys: list[str] | None, cache, workers: int,
            progress: Callable[[int], None] | None, note: Callable[[str], None] | None) -> list:
    """``fn(job, extractor)`` of every job, in order, each distinct key computed once: what the
    :class:`~.radiomics_cache.FeatureCache` holds is read, the rest extracted (``workers`` processes)
    and stored. ``fn`` returns ``(rows, why)``; a failure (rows None) is not stored."""
    if keys is None:
        return _each(fn, jobs, workers, progress)
    found: dict[str, tuple] = {}
    for k in dict.fromkeys(keys):
        rows = cache.get(k)
        if rows is not None:
            found[k] = (rows, None)
    todo: dict[str, object] = {}  # the first job of each key the cache lacks
    for k, job in zip(keys, jobs):
        if k not in found:
            todo.setdefault(k, job)
    ahead = len(jobs) - len(todo)

    def counted(done: int) -> None:
        if progress:
            progress(ahead + done)

    for k, got in zip(todo, _each(fn, list(todo.values()), workers, counted if progress else None)):
        found[k] = got
        if got[0] is not None:
            cache.put(k, got[0])
    if note:
        distinct = len(found)
        note(f"{len(jobs)} volume(s), {distinct} distinct by content: {len(todo)} extracted, {distinct - len(todo)} "
             f"from the feature cache {cache.folder}")
    return [found[k] for k in keys]


def extract_many(paths: Sequence[str | Path], workers: int = 1, progress: Callable[[int], None] | None = None,
                 warn: Callable[[str], None] | None = None, cache: str | Path | None = None,
                 note: Callable[[str], None] | None = None) -> tuple[list[str], np.ndarray]:
    """``(names, (n, d) features)`` of every volume, in the order given (``workers`` processes;
    each volume's numbers do not depend on how many). A volume PyRadiomics cannot describe (a
    constant one) gets a row of NaN, which FRD leaves out as frd-score does, and ``warn`` names it.
    With ``cache`` (a folder), each distinct content is extracted once and kept there
    (:mod:`.radiomics_cache`); ``note`` hears how many came from it."""
    from .radiomics_cache import FeatureCache

    paths = [str(p) for p in paths]
    store = FeatureCache(cache) if cache is not None else None
    keys = [store.key(p) for p in paths] if store else None
    got = _cached(_safe_features, paths, keys, store, workers, progress, note)
    results: list[tuple[dict[str, float] | None, str | None]] = [
        (None, f"{p}: {why}") if rows is None else (rows[0], None) for p, (rows, why) in zip(paths, got)]
    if not results:
        return [], np.zeros((0, 0))
    done = [(p, row) for p, (row, _) in zip(paths, results) if row is not None]
    failed = [why for _, why in results if why is not None]
    if not done:
        raise ValueError(f"PyRadiomics described none of the {len(paths)} volume(s); the first: {failed[0]}")
    for why in failed if warn else []:
        warn(f"left out of FRD (no PyRadiomics features): {why}")
    first, names = done[0][0], list(done[0][1])
    for p, row in done:
        if list(row) != names:
            raise ValueError(f"{p}: PyRadiomics gave other features than for {first} "
                             f"({len(row)} against {len(names)}): the volumes differ in kind")
    nan = [float("nan")] * len(names)
    return names, np.array([[row[n] for n in names] if row is not None else nan for row, _ in results], np.float64)


def _class_rows(job: tuple[str, str, int], ex) -> tuple[list[dict[str, float] | None], None]:
    return class_features_of(*job, ex=ex), None


def extract_classes(paths: Sequence[str | Path], label_paths: Sequence[str | Path], n_classes: int,
                    workers: int = 1, progress: Callable[[int], None] | None = None,
                    cache: str | Path | None = None, note: Callable[[str], None] | None = None
                    ) -> tuple[list[str], np.ndarray]:
    """``(names, (n, classes, d) features)`` of each volume's label-class regions
    (:func:`class_features_of`), NaN where a volume holds too little of a class; every class has the
    same features (one extractor), ``names`` empty where no region of any class could be described.
    ``cache`` and ``note`` as in :func:`extract_many`, keyed by the volume and its label map."""
    from .radiomics_cache import FeatureCache

    if len(paths) != len(label_paths):
        raise ValueError(f"{len(paths)} volumes but {len(label_paths)} label maps")
    jobs = [(str(p), str(q), int(n_classes)) for p, q in zip(paths, label_paths)]
    store = FeatureCache(cache) if cache is not None else None
    keys = [store.key(p, q, n) for p, q, n in jobs] if store else None
    rows: list[list[dict[str, float] | None]] = [r for r, _ in _cached(_class_rows, jobs, keys, store, workers,
                                                                        progress, note)]
    described = [f for row in rows for f in row if f is not None]
    names = list(described[0]) if described else []
    x = np.full((len(rows), int(n_classes), len(names)), np.nan)
    for i, row in enumerate(rows):
        for c, feats in enumerate(row):
            if feats is not None:
                if list(feats) != names:
                    raise ValueError(f"{jobs[i][0]}: PyRadiomics gave other features for class {c + 1} "
                                     f"({len(feats)} against {len(names)})")
                x[i, c] = [feats[n] for n in names]
    return names, x


def _normalised(reference: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`normalised`, with the mask of the columns kept and the reference's SDs."""
    sets = []
    for x in (reference, other):
        x = np.asarray(x, np.float64)
        sets.append(x[~np.isnan(x).any(axis=1)].astype(np.float32))
    a, b = sets
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"FRD needs at least 2 volumes with finite features in each set, got {len(a)} and {len(b)}")
    mean, sd = np.nanmean(a, axis=0), np.nanstd(a, axis=0)
    usable = ~(np.isnan(mean) | np.isnan(sd))
    out = []
    for x in (a, b):
        z = x.copy()
        with np.errstate(divide="ignore", invalid="ignore"):
            z[:, usable] = ((x[:, usable] - mean[usable]) / sd[usable]) * 1.0 + 0.0
        out.append(z)
    keep = np.isfinite(out[0]).all(axis=0) & np.isfinite(out[1]).all(axis=0)
    return out[0][:, keep], out[1][:, keep], keep, sd


def normalised(reference: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """frd-score v1's preprocessing of two feature sets: NaN rows dropped, float32, z-scored by the
    reference's statistics (no guard: SD 0 gives inf), non-finite columns dropped."""
    return _normalised(reference, other)[:2]


def dominant_features(reference: np.ndarray, other: np.ndarray, names: Sequence[str], k: int = 3) -> list[dict]:
    """The ``k`` features that differ most between the sets after FRD's z-scoring, each with its share
    of the per-feature (1-D) Fréchet distances, (mean_a - mean_b)^2 + (sd_a - sd_b)^2, and the
    reference's SD before z-scoring. Why: z-scoring by the reference lets a feature that is constant
    up to rounding there (a wavelet band's median of ~1e-14 over the scans' empty background) dominate
    FRD by many orders of magnitude; frd-score does the same. The reader sees it."""
    a, b, keep, sd = _normalised(reference, other)
    term = _feature_terms(a, b)
    total = float(term.sum())
    kept_names, kept_sd = np.asarray(names)[keep], sd[keep]
    return [{"feature": str(kept_names[i]), "share": float(term[i] / total) if total > 0 else None,
             "reference_sd": float(kept_sd[i])} for i in np.argsort(term)[::-1][:k]]


def _feature_terms(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each z-scored feature's 1-D Fréchet distance between the sets, (mean_a - mean_b)^2 + (sd_a - sd_b)^2."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a.mean(axis=0) - b.mean(axis=0)) ** 2 + (a.std(axis=0, ddof=1) - b.std(axis=0, ddof=1)) ** 2


def robust_frd(reference: np.ndarray, other: np.ndarray, min_sd: float, names: Sequence[str] | None = None) -> dict:
    """FRD without the features that are constant up to rounding over the reference (training) set: the same
    features, NaN rule and z-scoring as :func:`frd`, then only the columns whose reference SD is at least
    ``min_sd`` (issue 63). Why beside v1, not instead: v1 is what papers report; but z-scoring by an SD of
    ~1e-14 turns any difference in the samples into a distance of 1e14 standard deviations, and one such
    feature then is the whole FRD (84 % on an abdominal audit), whatever the rest of the ~1,000 say.

    Returns ``{"value", "features", "left_out", "largest_share", "largest_feature"}``: the log squared
    Fréchet distance over the kept features, how many were kept and left out, and the largest kept
    feature's share of the per-feature (1-D) distances (how far one feature still rules it)."""
    a, b, keep, sd = _normalised(reference, other)
    steady = sd[keep] >= min_sd
    a, b = a[:, steady], b[:, steady]
    if a.shape[1] == 0:
        raise ValueError(f"robust FRD: no feature has a training SD of at least {min_sd:g}")
    d = frechet_distance(a.astype(np.float64), b.astype(np.float64))
    term = _feature_terms(a, b)
    total, top = float(term.sum()), int(np.argmax(term))
    kept = (np.asarray(names)[keep][steady] if names is not None else None)
    return {"value": float(np.log(d)) if d > 0 else float("-inf"), "features": int(steady.sum()),
            "left_out": int((~steady).sum()), "largest_share": float(term[top] / total) if total > 0 else None,
            "largest_feature": str(kept[top]) if kept is not None else None}


def frd(reference: np.ndarray, other: np.ndarray) -> float:
    """FRD of ``other`` against ``reference`` (rows = volumes, columns = :func:`extract_many`'s
    features): log of the squared Fréchet distance after :func:`normalised`; -inf for identical sets."""
    a, b = normalised(reference, other)
    if a.shape[1] == 0:
        raise ValueError("FRD: no feature is finite in both sets after z-scoring by the reference set")
    d = frechet_distance(a.astype(np.float64), b.astype(np.float64))
    return float(np.log(d)) if d > 0 else float("-inf")


def save_features(path: str | Path, ids: Sequence[str], names: Sequence[str], features: np.ndarray) -> None:
    """One split's features, atomically (``.npz`` without pickle: ids, names, float64 values; NaN kept,
    as FRD's own rule drops those volumes)."""
    from ..io import atomic_path

    ids, names = [str(i) for i in ids], [str(n) for n in names]
    x = np.asarray(features, np.float64).reshape(len(ids), len(names))
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, ids=np.array(ids), names=np.array(names), features=x)


def load_features(path: str | Path, ids: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """``(names, features)`` of a :func:`save_features` file, rows in the order of ``ids`` where given
    (the embeddings' order); a missing id names the file."""
    with np.load(path, allow_pickle=False) as z:
        stored, names, x = [str(i) for i in z["ids"]], [str(n) for n in z["names"]], np.asarray(z["features"])
    if ids is None:
        return names, x
    row = {i: k for k, i in enumerate(stored)}
    missing = [i for i in ids if i not in row]
    if missing:
        raise ValueError(f"{path}: no radiomics features for {len(missing)} volume(s), e.g. {missing[0]}: "
                         "the file is stale; rerun rule radiomics")
    return names, x[[row[i] for i in ids]]


def save_class_features(path: str | Path, ids: Sequence[str], classes: Sequence[str], names: Sequence[str],
                        features: np.ndarray) -> None:
    """One split's per-class features, atomically (ids, class names, feature names, (n, classes, d))."""
    from ..io import atomic_path

    x = np.asarray(features, np.float64).reshape(len(ids), len(classes), len(names))
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, ids=np.array([str(i) for i in ids]), classes=np.array([str(c) for c in classes]),
                     names=np.array([str(n) for n in names]), features=x)


def load_class_features(path: str | Path, ids: Sequence[str]) -> tuple[list[str], list[str], np.ndarray]:
    """``(classes, names, (n, classes, d))`` of a :func:`save_class_features` file, rows in the order of
    ``ids``; a missing id names the file."""
    with np.load(path, allow_pickle=False) as z:
        stored, classes = [str(i) for i in z["ids"]], [str(c) for c in z["classes"]]
        names, x = [str(n) for n in z["names"]], np.asarray(z["features"])
    row = {i: k for k, i in enumerate(stored)}
    missing = [i for i in ids if i not in row]
    if missing:
        raise ValueError(f"{path}: no per-class radiomics features for {len(missing)} volume(s), e.g. "
                         f"{missing[0]}: the file is stale; rerun rule radiomics_classes")
    return classes, names, x[[row[i] for i in ids]]
