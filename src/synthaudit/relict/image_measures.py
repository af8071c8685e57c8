"""All-pairs image-level measures between synthetic and training volumes (RELICT 2.3.1).

RELICT compares every synthetic volume with every training volume, so this step
costs S x T whole-volume comparisons and dominates the run time (paper Table 2:
SSIM 76 min for the NCCT use case). The design follows from that:

* **Streaming.** Training volumes arrive one at a time (any iterable of arrays), are
  read once and compared with all synthetic volumes, which are held in memory. The
  training set therefore never has to fit in memory.
* **Per-volume work once.** SSIM needs five Gaussian-filtered maps per pair
  (mu_x, mu_y, E[x^2], E[y^2], E[xy]); four of them depend on one volume only. They
  are computed once per volume (in float64), so a pair only filters the product x*y,
  and that product is filtered for a batch of synthetic volumes at once.
* **Valid filtering, no padding.** skimage pads with ``mode='reflect'`` and then crops
  ``pad = (win_size - 1) // 2`` voxels from every face before averaging. With
  ``win_size = 2 r + 1`` (``r`` the filter radius), a voxel that survives the crop has
  its whole window inside the volume, so the padding never reaches the mean. Only
  those voxels are computed ("valid" correlation): exactly skimage's value, less work.
* **Separable filtering as matrix products.** A 1D correlation along one axis is a
  product with a banded matrix, which BLAS/cuBLAS run near peak; the three axes are
  three GEMMs. On CPU the product x*y is formed and filtered in slabs of a few rows
  so that the intermediate maps stay in cache.
* **Precision.** Per-pair maps are float32 (half the memory traffic, twice the GEMM
  rate); per-volume maps are computed in float64 and all sums accumulate in float64.
  ``cov_xy = G(xy) - mu_x mu_y`` cancels: both terms are ~mu^2 while the SSIM
  denominator can be as small as C2, so a relative error d in either term costs
  about ``d mu^2 / (var + C2)`` in SSIM. Three measures keep d at float32 rounding
  noise, with no bias: (1) covariance does not change when a volume is shifted by
  a constant, so each volume is shifted by the value of its flat background when it
  has one (a value held by at least 5 % of its voxels), which makes that region exactly
  zero (its rounding would otherwise be alike at every voxel and not average out), and
  by its median otherwise, which minimises the mean ``|x - c|`` that scales rounding
  (``_shift_of``); (2) the float32
  and float64 filters use bitwise the same (float32-rounded) weights and the per-
  volume maps are derived from exactly the float32 shifted values the product uses,
  so the two terms cancel exactly up to rounding; (3) no rounded constant multiplies
  the large terms before they cancel (see :class:`_SSIM`). Measured agreement with
  skimage on float64 input: ~1e-7, also for data far from zero (e.g. values around
  1000 with range 1, where skimage itself fails in float32).
* **MAE and RMSE** are taken from voxel differences of the raw values, never from
  norms (``|x|^2 + |y|^2 - 2 x.y`` loses near-replicas to cancellation), with float64
  accumulation.

Two engines share this design. On CPU (the default there) fused numba kernels
(``kernels``) run the filter as 11-tap passes and the MAE/RMSE/SSIM terms in one loop;
measured at 182 x 218 x 182 on 2 cores: MAE ~0.5 ms, SSIM 14.9-16.1 ms per pair with the
per-volume maps (50 x 774 pairs in 584-632 s, about 2.7x this machine's memory-bound
floor; ``make bench``, docs/benchmarks.md). The torch path below (CUDA, or ``backend="torch"``)
runs the filter as banded matrix products, which suit a GPU: dense bands do ~10x the
flops of an 11-tap filter, and elementwise passes are separate kernels. On CUDA, where Triton
is installed, fused kernels (:mod:`.triton_kernels`) replace its per-pair passes: MAE/RMSE in
one pass over the batch, SSIM's product filtered without being stored; the torch path stays
their reference (1e-6 relative, tests/test_triton_kernels.py; timed by bench/gpu/image_level.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from .. import numerics_torch, registry
from ..devices import device_type, resolve_device, torch_threads
from . import kernels
from .lazy_torch import LazyTorch
from .ssim_engine import _SSIM, _Workspace, _shift_of  # noqa: F401  (_shift_of: callers had it from here)


torch = LazyTorch(__name__)  # imported on first use (lazy_torch: the CPU path of MAE, RMSE, NCC needs none)

# the measures the engine computes in its fused passes; any other image-level measure of
# the registry is a function of this module called per training volume (_pairwise_columns)
FUSED = ("mae", "rmse", "ssim")
# On CPU a pair's maps are processed in slabs of the first axis holding about this
# many voxels per synthetic volume (1 MiB of float32), and batches are capped at
# about _CPU_BATCH_VOXELS per map: the chain of filter passes and SSIM terms then
# stays in cache, while operations stay large enough to amortise torch's overhead.
# The slab height depends on the volume shape only, so results do not depend on the
# batch size.
_CPU_SLAB_VOXELS = 1 << 18
_CPU_BATCH_VOXELS = 1 << 21
# float32 slab-sized maps that one synthetic volume of a batch needs at once (product,
# three filter passes, three SSIM terms, differences and squares, with margin for the
# product's halo rows): the basis of the default batch size.
_WORK_MAPS = 10
# Training volumes per block of the CPU kernels (each synthetic voxel is read once per
# block): MAE/RMSE blocks hold float32 volumes, SSIM blocks five maps per volume.
_CPU_ERROR_BLOCK = 16
_CPU_SSIM_BLOCK = 4


def all_pairs_image_measures(
    synthetic: np.ndarray,
    training: Iterable[np.ndarray] | np.ndarray,
    measures: Sequence[str],
    *,
    data_range: float,
    ssim_sigma: float = 1.5,
    ssim_truncate: float = 3.5,
    use_sample_covariance: bool = True,
    device: str | torch.device = "auto",
    batch_size: int | None = None,
    max_memory_mb: float = 4096,
    threads: int | None = None,
    n_training: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    backend: str = "auto",
    pairs: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Compute image-level measures between every synthetic and training volume.

    MAE and RMSE are ``mean |s - t|`` and ``sqrt(mean (s - t)^2)``. SSIM is the mean
    SSIM of ``skimage.metrics.structural_similarity(s, t, gaussian_weights=True,
    sigma=ssim_sigma, data_range=data_range, use_sample_covariance=...)`` (RELICT
    Appendix 1), evaluated in float64 precision up to float32 rounding of the per-pair
    maps (agreement with skimage on float64 input is better than 1e-5). skimage fixes
    ``truncate=3.5`` when ``gaussian_weights=True``; other values of ``ssim_truncate``
    change the window as they would in ``scipy.ndimage.gaussian_filter``.

    Args:
        synthetic: Synthetic volumes, shape (S, X, Y, Z); held in memory (float32).
        training: Training volumes of shape (X, Y, Z): an array (T, X, Y, Z) or any
            iterable yielding one volume at a time. Each is read once.
        measures: Image-level names of the registry (:mod:`synthaudit.registry`): MAE,
            RMSE and SSIM run in the fused passes below, any other is its registered
            function of this module, called once per training volume.
        data_range: Intensity range ``L`` of the data (SSIM's C1 = (0.01 L)^2,
            C2 = (0.03 L)^2); must be positive.
        ssim_sigma: Standard deviation of the Gaussian window, in voxels.
        ssim_truncate: Window radius in standard deviations (``int(truncate * sigma
            + 0.5)`` voxels, as in scipy).
        use_sample_covariance: Normalise (co)variances by N - 1 instead of N, where N
            is the number of voxels in the window (skimage's default).
        device: ``"cpu"``, ``"cuda"`` (or a torch device) or ``"auto"`` (CUDA when
            available).
        batch_size: Synthetic volumes compared with a training volume at once;
            default: as many as fit in ``max_memory_mb``.
        max_memory_mb: Memory budget for the default batch size. It covers the
            synthetic volumes, their per-volume SSIM maps (a shifted copy and four
            interior maps: at most 5x the volumes) and the working buffers; when
            the resident part alone exceeds it, batches have one volume.
        threads: CPU threads for torch during the call (restored afterwards); default:
            torch's current setting.
        n_training: Number of training volumes, for ``progress`` when ``training`` is
            an iterator without ``len``.
        progress: Called as ``progress(done, total)`` after each training volume;
            ``total`` is None when unknown.
        backend: ``"kernels"`` (fused numba loops, CPU only), ``"triton"`` (fused GPU
            kernels, :mod:`.triton_kernels`; CUDA, or CPU tensors under Triton's
            interpreter), ``"torch"`` (tensor operations, any device: the reference on GPU)
            or ``"auto"``: kernels on CPU, Triton on CUDA where it is installed, torch
            otherwise. All give the same values to float32 rounding.
        pairs: Optional (S, T) boolean mask: only these pairs are computed (the
            shortlist search, :mod:`.search`), the others are NaN. A wanted pair's value
            is the one the full computation gives: bit for bit with the CPU kernels
            (they skip work, they do not reorder it), to float rounding (1e-9) with the
            torch backend (its batches differ). None: every pair.

    Returns:
        For each requested measure, an (S, T) float64 array of raw values (MAE and
        RMSE distances, SSIM similarity); rows follow ``synthetic``, columns the
        order of ``training``.

    Raises:
        ValueError: On unknown measures, non-positive ``data_range`` or sigma,
            volumes of the wrong shape, or volumes smaller than the SSIM window.
    """
    wanted = _check_measures(measures)
    fused = [m for m in wanted if m in FUSED]
    pairwise = {m: _registered_function(m) for m in wanted if m not in FUSED}
    total = n_training if n_training is not None else _length(training)
    if pairs is not None:
        pairs = np.asarray(pairs, dtype=bool)
        n_syn = len(synthetic)
        if pairs.ndim != 2 or pairs.shape[0] != n_syn or (total is not None and pairs.shape[1] != total):
            raise ValueError(f"pairs has shape {pairs.shape}, expected ({n_syn}, {total}) (synthetic x training)")
    settings = dict(data_range=data_range, ssim_sigma=ssim_sigma, ssim_truncate=ssim_truncate,
                    use_sample_covariance=use_sample_covariance, device=device, batch_size=batch_size,
                    max_memory_mb=max_memory_mb, threads=threads, backend=backend, pairs=pairs)
    if not pairwise:
        return _masked(_fused_all_pairs(synthetic, training, fused, n_training=total, progress=progress, **settings),
                       pairs)
    synthetic = _float32_array(synthetic)
    if synthetic.ndim != 4:
        raise ValueError(f"synthetic must have shape (S, X, Y, Z), got {synthetic.shape}")
    columns: dict[str, list[np.ndarray]] = {m: [] for m in pairwise}

    def measured(volumes):
        """Each training volume once: the registered functions' column, then on to the fused passes."""
        for index, volume in enumerate(volumes):
            target = _float32_array(volume)
            if target.shape != synthetic.shape[1:]:
                raise ValueError(f"training volume {index} has shape {target.shape}; the synthetic volumes have "
                                 f"{synthetic.shape[1:]}")
            rows = np.arange(len(synthetic)) if pairs is None else np.flatnonzero(pairs[:, index])
            for m, function in pairwise.items():
                column = np.full(len(synthetic), np.nan)
                if len(rows):
                    column[rows] = np.asarray(function(synthetic[rows] if pairs is not None else synthetic, target),
                                              dtype=np.float64)
                columns[m].append(column)
            yield target

    if fused:
        out = _fused_all_pairs(synthetic, measured(training), fused, n_training=total, progress=progress, **settings)
    else:
        out = {}
        for done, _ in enumerate(measured(training), start=1):
            if progress is not None:
                progress(done, total)
    for m in pairwise:
        out[m] = np.stack(columns[m], axis=1) if columns[m] else np.empty((len(synthetic), 0))
    return _masked({m: out[m] for m in wanted}, pairs)


def shortlisted_image_measures(synthetic: np.ndarray, load_training: Callable[[int], np.ndarray], n_training: int,
                               measures: Sequence[str], pairs: np.ndarray | None, **settings
                               ) -> dict[str, np.ndarray]:
    """:func:`all_pairs_image_measures` on the ``pairs`` mask (the shortlist search), reading only the
    training volumes some wanted pair needs: ``load_training(j)`` reads volume j of ``n_training``.

    Returns full (S, T) matrices, NaN where no pair was wanted (``pairs`` None: every pair,
    every volume read). ``settings`` go to :func:`all_pairs_image_measures` (``n_training`` and
    the progress total then count the volumes read).
    """
    columns = np.arange(n_training) if pairs is None else np.flatnonzero(np.asarray(pairs, bool).any(axis=0))
    got = all_pairs_image_measures(synthetic, (load_training(int(c)) for c in columns), measures,
                                   n_training=len(columns), pairs=None if pairs is None else pairs[:, columns],
                                   **settings)
    if pairs is None:
        return got
    out = {}
    for m, values in got.items():
        out[m] = np.full((len(synthetic), n_training), np.nan)
        out[m][:, columns] = values
    return out


def _masked(values: dict[str, np.ndarray], pairs: np.ndarray | None) -> dict[str, np.ndarray]:
    """NaN for every pair the mask did not ask for: a value never computed is never read as one."""
    if pairs is not None:
        for array in values.values():
            array[~pairs] = np.nan
    return values


def _registered_function(measure: str):
    """The function of this module that the registry names for an image-level measure."""
    return registry.implementation(measure, globals(), __name__)


def _fused_all_pairs(synthetic: np.ndarray, training, wanted: Sequence[str], *, data_range: float,
                     ssim_sigma: float, ssim_truncate: float, use_sample_covariance: bool, device,
                     batch_size: int | None, max_memory_mb: float, threads: int | None, n_training: int | None,
                     progress, backend: str, pairs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """MAE, RMSE and SSIM in the fused passes (arguments as :func:`all_pairs_image_measures`)."""
    wanted = list(wanted)
    synthetic = _float32_array(synthetic)
    if synthetic.ndim != 4:
        raise ValueError(f"synthetic must have shape (S, X, Y, Z), got {synthetic.shape}")
    if data_range <= 0:
        raise ValueError(f"data_range must be positive, got {data_range}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    shape = synthetic.shape[1:]
    n_synthetic = synthetic.shape[0]
    total = n_training if n_training is not None else _length(training)

    if backend not in ("auto", "kernels", "torch", "triton"):
        raise ValueError(f"backend must be 'auto', 'kernels', 'torch' or 'triton', got {backend!r}")
    kind = device_type(device)
    if backend == "kernels" and kind != "cpu":
        raise ValueError(f"the numba kernels run on the CPU only; device {device} needs backend 'torch' or 'auto'")
    if backend == "kernels" or (backend == "auto" and kind == "cpu"):
        return _cpu_all_pairs(synthetic, training, wanted, data_range=data_range, ssim_sigma=ssim_sigma,
                              ssim_truncate=ssim_truncate, use_sample_covariance=use_sample_covariance,
                              threads=threads, total=total, progress=progress, pairs=pairs)

    dev = resolve_device(device)
    from . import triton_kernels  # here, not at import: Triton's import is not free and the CPU path needs none

    why_not = triton_kernels.unavailable(dev)
    if backend == "triton" and why_not:
        raise ValueError(f"backend 'triton': {why_not}")
    fused = _KernelsOrTorch(backend == "triton" or (backend == "auto" and why_not is None), backend == "auto", dev)
    with torch_threads(threads), _ieee_float32_matmul(), torch.inference_mode():
        ssim = None
        if "ssim" in wanted:
            ssim = _SSIM(shape, data_range=data_range, sigma=ssim_sigma, truncate=ssim_truncate,
                         use_sample_covariance=use_sample_covariance, device=dev)
        syn = torch.from_numpy(synthetic).to(dev)
        syn_moments = ssim.moments(syn) if ssim else None
        rows = _slab_rows(shape, ssim.radius if ssim else 0, dev)
        if batch_size is None:
            batch_size = _default_batch_size(n_synthetic, shape, rows, max_memory_mb, dev, with_ssim=bool(ssim))
        errors = [m for m in wanted if m in ("mae", "rmse")]
        n_voxels = math.prod(shape)
        workspace = _Workspace(dev)

        columns: dict[str, list[np.ndarray]] = {m: [] for m in wanted}
        for done, volume in enumerate(training, start=1):
            target = _as_volume(volume, shape, done - 1, dev)
            target_moments = ssim.moments(target[None]) if ssim else None
            column = {m: torch.full((n_synthetic,), math.nan, dtype=torch.float64, device=dev) for m in wanted}
            # the shortlist search: only the rows that want this training volume
            needed = (torch.arange(n_synthetic, device=dev) if pairs is None
                      else torch.from_numpy(np.flatnonzero(pairs[:, done - 1])).to(dev))
            for start in range(0, len(needed), batch_size):
                batch = needed[start:start + batch_size]
                if pairs is None:
                    batch = slice(start, start + batch_size)
                if errors:
                    abs_sum, sq_sum = fused.run(lambda: triton_kernels.error_sums(syn[batch], target),
                                                lambda: _error_sums(syn[batch], target, rows, workspace))
                    if "mae" in column:
                        column["mae"][batch] = abs_sum / n_voxels
                    if "rmse" in column:
                        column["rmse"][batch] = numerics_torch.sqrt(sq_sum / n_voxels)
                if ssim:
                    column["ssim"][batch] = fused.run(
                        lambda: triton_kernels.ssim_means(ssim, syn_moments[batch], target_moments, workspace),
                        lambda: ssim.mean(syn_moments[batch], target_moments, rows, workspace))
            for m in wanted:
                columns[m].append(column[m].cpu().numpy())
            if progress is not None:
                progress(done, total)

    return {m: np.stack(columns[m], axis=1) if columns[m] else np.empty((n_synthetic, 0)) for m in wanted}


class _KernelsOrTorch:
    """The fused GPU kernels while they work, else the torch path: under backend ``auto`` a GPU
    Triton cannot compile for (or any failure of theirs) costs a warning and the torch path, not the
    run; under backend ``triton`` the failure is raised."""

    def __init__(self, active: bool, fall_back: bool, device):
        self.active, self.fall_back, self.device = active, fall_back, device

    def run(self, kernels: Callable, torch_path: Callable):
        if self.active:
            try:
                return kernels()
            except Exception as e:  # noqa: BLE001 - Triton's compiler and driver raise many kinds
                if not self.fall_back:
                    raise
                import logging

                logging.getLogger(__name__).warning(
                    "the fused Triton kernels failed on %s (%s: %s); the torch path computes the image level",
                    self.device, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                self.active = False
        return torch_path()


def _cpu_all_pairs(synthetic: np.ndarray, training, wanted: list[str], *, data_range: float, ssim_sigma: float,
                   ssim_truncate: float, use_sample_covariance: bool, threads: int | None, total: int | None,
                   progress, pairs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """CPU path: fused numba kernels over blocks of training volumes (see ``kernels``).

    Training volumes are gathered into blocks so that each synthetic voxel is read
    from memory once per block rather than once per pair; a block holds
    ``_CPU_ERROR_BLOCK`` volumes for MAE/RMSE and ``_CPU_SSIM_BLOCK`` for SSIM (whose
    per-volume maps are five volumes' worth each).
    """
    shape = synthetic.shape[1:]
    n_synthetic, n_voxels = synthetic.shape[0], math.prod(shape)
    errors = [m for m in wanted if m in ("mae", "rmse")]
    # torch only for SSIM's per-volume maps: MAE and RMSE alone never import it
    uses_torch = "ssim" in wanted
    with contextlib.ExitStack() as stack:
        if uses_torch:
            for context in (torch_threads(threads), _ieee_float32_matmul(), torch.inference_mode()):
                stack.enter_context(context)
        stack.enter_context(kernels.kernel_threads(threads))
        ssim = syn_maps = None
        if uses_torch:
            ssim = _SSIM(shape, data_range=data_range, sigma=ssim_sigma, truncate=ssim_truncate,
                         use_sample_covariance=use_sample_covariance, device=torch.device("cpu"), use_kernels=True)
            syn_maps = ssim.moments(torch.from_numpy(synthetic)).arrays()
            weights = ssim.filter.weights.astype(np.float32)
            n_inner = math.prod(syn_maps[2].shape[1:])
        flat = synthetic.reshape(n_synthetic, n_voxels)
        block_size = _CPU_SSIM_BLOCK if ssim else _CPU_ERROR_BLOCK
        columns: dict[str, list[np.ndarray]] = {m: [] for m in wanted}
        done = 0
        buffer = np.empty((block_size, *shape), np.float32)  # reused: fresh blocks would page-fault each time
        train_buffer = ssim.empty_moments(block_size, shape) if ssim else None  # likewise
        for block in _blocks(training, block_size):
            volumes = buffer[:len(block)]
            for i, volume in enumerate(block):
                _copy_volume(volume, volumes[i], done + i)
            wanted_pairs = None if pairs is None else pairs[:, done:done + len(volumes)]
            if errors:
                abs_sum, sq_sum = kernels.error_sums(flat, volumes.reshape(len(volumes), n_voxels),
                                                     squares="rmse" in columns, pairs=wanted_pairs)
                if "mae" in columns:
                    columns["mae"].append(abs_sum / n_voxels)
                if "rmse" in columns:
                    columns["rmse"].append(np.sqrt(sq_sum / n_voxels))
            if ssim:
                train_maps = ssim.moments(torch.from_numpy(volumes), out=train_buffer).arrays()
                sums = np.zeros((n_synthetic, len(volumes)))
                kernels.ssim_sums(*syn_maps, *train_maps, weights, ssim.c1, ssim.c2 / ssim.k, sums, wanted_pairs)
                columns["ssim"].append(sums / n_inner)
            for _ in block:
                done += 1
                if progress is not None:
                    progress(done, total)
    return {m: np.concatenate(columns[m], axis=1) if columns[m] else np.empty((n_synthetic, 0)) for m in wanted}


def _blocks(items, size: int) -> Iterator[list]:
    """Consecutive lists of up to ``size`` items of any iterable (one pass)."""
    block = []
    for item in items:
        block.append(item)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def _copy_volume(volume, out: np.ndarray, index: int) -> None:
    """Copy (and convert, e.g. int16 CT) training volume ``index`` into the float32 block."""
    array = np.asarray(volume)
    if array.shape != out.shape:
        raise ValueError(f"training volume {index} has shape {array.shape}; the synthetic volumes have {out.shape}")
    np.copyto(out, array, casting="unsafe")


def ncc(synthetic: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Normalised cross-correlation of each synthetic volume with one training volume.

    The Pearson correlation of the voxel values, ``sum(x~ y~) / sqrt(sum(x~^2) sum(y~^2))``
    with ``x~ = x - mean(x)`` (ITK's NormalizedCorrelation without its sign flip): 1 for
    a replica up to a linear intensity change ``a x + b`` (a > 0), which MAE and RMSE
    count as a difference. A constant volume correlates with nothing: 0. Centred in
    float64, one synthetic volume at a time.

    Args:
        synthetic: (S, X, Y, Z) float32 volumes.
        target: One (X, Y, Z) float32 training volume.

    Returns:
        (S,) float64 correlations in [-1, 1].
    """
    y = target.reshape(-1).astype(np.float64)
    y -= y.mean()
    y_norm = math.sqrt(float(y @ y))
    out = np.zeros(len(synthetic))
    for i, volume in enumerate(synthetic):
        x = volume.reshape(-1).astype(np.float64)
        x -= x.mean()
        denominator = math.sqrt(float(x @ x)) * y_norm
        if denominator > 0:
            out[i] = float(x @ y) / denominator
    return np.clip(out, -1.0, 1.0)


def _check_measures(measures: Sequence[str]) -> list[str]:
    """Validate measure names (image level of the registry); keep their order, drop repeats."""
    return registry.check(measures, "image")


def _length(training) -> int | None:
    try:
        return len(training)
    except TypeError:
        return None


@contextlib.contextmanager
def _ieee_float32_matmul() -> Iterator[None]:
    """Force IEEE float32 matrix products inside the block, then restore the setting.

    Callers may allow TF32 or bf16 products process-wide (common when training
    networks, e.g. ``torch.set_float32_matmul_precision("high")``); their ~1e-3
    relative error would wreck the cancellation in the SSIM covariance.
    """
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    previous = [backend.fp32_precision for backend in backends]
    for backend in backends:
        backend.fp32_precision = "ieee"
    try:
        yield
    finally:
        for backend, value in zip(backends, previous):
            backend.fp32_precision = value


def _float32_array(data) -> np.ndarray:
    """C-contiguous, writable float32 array (torch cannot share read-only memory)."""
    array = np.ascontiguousarray(data, dtype=np.float32)
    return array if array.flags.writeable else array.copy()


def _as_volume(volume, shape: tuple[int, ...], index: int, device: torch.device) -> torch.Tensor:
    array = _float32_array(volume)
    if array.shape != shape:
        raise ValueError(f"training volume {index} has shape {array.shape}; the synthetic volumes have {shape}")
    return torch.from_numpy(array).to(device)


def _default_batch_size(n_synthetic: int, shape: tuple[int, ...], rows: int, max_memory_mb: float,
                        device: torch.device, *, with_ssim: bool) -> int:
    """Synthetic volumes per batch such that resident data plus working maps fit the budget.

    Resident: the synthetic volumes and, for SSIM, their per-volume maps (shifted
    volume plus four interior maps: at most 5 volumes' worth). Working:
    ``_WORK_MAPS`` float32 maps of one slab per batch volume. On CPU the batch is also
    capped so that a slab of the whole batch stays cache-sized.
    """
    voxel_bytes = 4 * math.prod(shape)
    slab_voxels = rows * math.prod(shape[1:])
    resident = n_synthetic * voxel_bytes * (6 if with_ssim else 1)
    free = max_memory_mb * 2**20 - resident
    batch = int(free // (_WORK_MAPS * 4 * slab_voxels))
    if device.type == "cpu":
        batch = min(batch, _CPU_BATCH_VOXELS // slab_voxels)
    return max(1, min(n_synthetic, batch))


def _slab_rows(shape: tuple[int, ...], radius: int, device: torch.device) -> int:
    """Rows of the first axis per slab: whole volumes on GPU, about 1 MiB per map on CPU.

    At least 2r rows, because each slab of the product carries 2r halo rows.
    """
    rows = shape[0] - 2 * radius
    if device.type == "cpu":
        rows = min(rows, max(2 * radius, _CPU_SLAB_VOXELS // math.prod(shape[1:])))
    return max(1, rows)


def _error_sums(x: torch.Tensor, y: torch.Tensor, rows: int,
                workspace: _Workspace) -> tuple[torch.Tensor, torch.Tensor]:
    """Per synthetic volume, the sums of ``|x - y|`` and ``(x - y)^2`` in float64.

    Differences are taken directly on the raw float32 values, never through
    ``|x|^2 + |y|^2 - 2 x.y``: for a near-replica each voxel pair is within a factor of
    two, so its float32 difference is exact (Sterbenz) and small distances keep full
    relative precision. Each slab is summed by torch's cascade summation (relative
    error ~1e-7) and the slab sums are accumulated in float64.

    Args:
        x: Synthetic batch (B, X, Y, Z).
        y: Training volume (X, Y, Z).
        rows: Rows of the first axis per slab.
        workspace: Buffers for the differences and their squares.
    """
    abs_sum = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    sq_sum = torch.zeros_like(abs_sum)
    for start in range(0, x.shape[1], rows):
        block = x[:, start:start + rows]
        diff = torch.sub(block, y[start:start + rows], out=workspace("diff", block.shape)).flatten(1)
        sq_sum += torch.mul(diff, diff, out=workspace("square", diff.shape)).sum(dim=1)
        abs_sum += diff.abs_().sum(dim=1)
    return abs_sum, sq_sum
