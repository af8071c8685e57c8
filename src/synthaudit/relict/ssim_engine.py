"""SSIM's fused engine: the Gaussian filter restricted to the valid region, the per-batch work
buffers, the local moments (means, variances, covariance) of a volume, the shift that keeps them
exact in float32, and the SSIM maps of one synthetic batch against a block of training volumes."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from . import kernels
from .lazy_torch import LazyTorch


torch = LazyTorch(__name__)  # imported on first use
_K1, _K2 = 0.01, 0.03  # SSIM stabiliser constants (Wang et al. 2004; skimage defaults)
# Voxels sampled to choose a volume's shift (_shift_of); any constant is exact, the choice
# only has to be typical, so a strided sample suffices.
_MEDIAN_SAMPLES = 1 << 18
# A value held by at least this share of a smaller strided sample is a flat region
# (background): the shift is that value instead of the median (_shift_of).
_FLAT_SAMPLES = 1 << 14
_FLAT_SHARE = 0.05


class _ValidGaussian:
    """Separable Gaussian correlation, computed only where the window fits the volume.

    Maps (..., X, Y, Z) to (..., X - 2r, Y - 2r, Z - 2r). The kernel is scipy's
    (``scipy.ndimage.gaussian_filter``: radius ``int(truncate * sigma + 0.5)``, weights
    ``exp(-x^2 / (2 sigma^2))`` normalised to sum 1; symmetric, so correlation equals
    convolution), with each weight rounded to float32. The rounding makes the float32
    and float64 filters apply bitwise the same weights, so maps filtered in either
    precision cancel exactly where they should; the total weight ``gain`` (1 up to
    ~1e-8) is kept explicit instead of being rounded away. Each axis is a product with
    a banded (n - 2r) x n matrix, cached per axis length and dtype.
    """

    def __init__(self, sigma: float, truncate: float, device: torch.device):
        self.radius = int(truncate * sigma + 0.5)
        offsets = np.arange(-self.radius, self.radius + 1)
        weights = np.exp(-0.5 / (sigma * sigma) * offsets**2)
        self.weights = (weights / weights.sum()).astype(np.float32).astype(np.float64)
        self.gain = float(self.weights.sum()) ** 3
        self.device = device
        self._bands: dict[tuple, torch.Tensor] = {}

    def band(self, n_in: int, dtype: torch.dtype) -> torch.Tensor:
        key = (n_in, dtype)
        if key not in self._bands:
            n_out = n_in - 2 * self.radius
            matrix = np.zeros((n_out, n_in))
            rows = np.arange(n_out)[:, None]
            matrix[rows, rows + np.arange(2 * self.radius + 1)] = self.weights
            self._bands[key] = torch.from_numpy(matrix).to(self.device, dtype)
        return self._bands[key]

    def __call__(self, volumes: torch.Tensor, workspace: _Workspace | None = None) -> torch.Tensor:
        """Filter the last three axes of ``volumes`` (..., X, Y, Z).

        ``workspace`` provides the buffers of the three passes; None allocates them.
        """
        *lead, nx, ny, nz = volumes.shape
        n, r2 = math.prod(lead), 2 * self.radius
        passes = [(n, nx - r2, ny * nz), (n * (nx - r2), ny - r2, nz), (n * (nx - r2) * (ny - r2), nz - r2)]
        out = [None] * 3 if workspace is None else [workspace(f"filter{i}", s) for i, s in enumerate(passes)]
        dtype = volumes.dtype
        filtered = torch.matmul(self.band(nx, dtype), volumes.reshape(n, nx, ny * nz), out=out[0])
        filtered = torch.matmul(self.band(ny, dtype), filtered.view(-1, ny, nz), out=out[1])
        filtered = torch.matmul(filtered.view(-1, nz), self.band(nz, dtype).T, out=out[2])
        return filtered.view(*lead, nx - r2, ny - r2, nz - r2)


class _Workspace:
    """Reusable float32 buffers for the per-pair maps, keyed by name.

    Large fresh CPU allocations are page-faulted on first touch; allocating the
    per-slab maps anew made out-of-place operations several times slower than
    in-place ones. A request for fewer elements (last slab, last batch) is a view
    of the existing buffer.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._storage: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        size = math.prod(shape)
        buffer = self._storage.get(name)
        if buffer is None or buffer.numel() < size:
            buffer = self._storage[name] = torch.empty(size, dtype=torch.float32, device=self.device)
        return buffer[:size].view(shape)


@dataclass
class _Moments:
    """Per-volume SSIM maps of a batch of volumes (leading axis), float32 on the device.

    Interior maps cover the voxels kept by skimage's crop, (X - 2r, Y - 2r, Z - 2r);
    see :class:`_SSIM` for the notation.

    Attributes:
        shifted: ``x - c`` with ``c`` the volume's shift (``_shift_of``; full size): the factor of
            the per-pair product, small where float32 would otherwise lose precision.
        cross: ``G'(x - c) / sqrt(g)``; ``cross_x * cross_y`` is what the filtered
            product loses to the means in the covariance.
        mean: Local mean mu, for the luminance term.
        alpha: ``mu^2 + C1 / 2``, so that B1 = alpha_x + alpha_y.
        beta: ``(cn var + C2 / 2) / k``, so that B2 / k = beta_x + beta_y.
    """

    shifted: torch.Tensor
    cross: torch.Tensor
    mean: torch.Tensor
    alpha: torch.Tensor
    beta: torch.Tensor

    def __getitem__(self, index: slice) -> _Moments:
        return _Moments(*(getattr(self, f.name)[index] for f in fields(self)))

    def arrays(self) -> list[np.ndarray]:
        """The maps as NumPy views (CPU tensors), in field order, for the numba kernel."""
        return [getattr(self, f.name).numpy() for f in fields(self)]


def _shift_of(volume: torch.Tensor) -> torch.Tensor:
    """The constant a volume is shifted by before SSIM's products (any constant is exact).

    The value of the volume's largest flat region when there is one (a value held by at
    least ``_FLAT_SHARE`` of a strided sample, e.g. the background), so that region is
    exactly zero after the shift and adds no rounding to ``G'(x~ y~) - cross_x cross_y``,
    where rounding does not average out (every voxel of a flat region rounds alike);
    otherwise the median, which minimises the mean ``|x - c|`` that scales rounding.
    The median alone missed skimage by 1.9e-5 on a 182 x 218 x 182 pair whose zero
    background was 28 % of the volume (the median then falls in the foreground).
    """
    flat = volume.reshape(-1)
    coarse = flat[:: max(1, flat.numel() // _FLAT_SAMPLES)]  # a share needs few samples; unique sorts
    values, counts = torch.unique(coarse, return_counts=True)
    top = int(torch.argmax(counts))
    if int(counts[top]) >= _FLAT_SHARE * coarse.numel():
        return values[top]
    return flat[:: max(1, flat.numel() // _MEDIAN_SAMPLES)].median()


class _SSIM:
    """skimage's Gaussian-weighted mean SSIM, split into per-volume and per-pair work.

    skimage computes, per voxel, ``SSIM = A1 A2 / (B1 B2)`` with ``A1 = 2 mu_x mu_y +
    C1``, ``A2 = 2 cn cov_xy + C2``, ``B1 = mu_x^2 + mu_y^2 + C1``, ``B2 = cn var_x +
    cn var_y + C2`` (``cn`` the sample-covariance factor), local statistics from the
    Gaussian window. Only ``cov_xy`` needs both volumes' voxels.

    With ``G'`` the filter with float32 weights, ``g`` its total weight and ``c`` a
    volume's shift (``_shift_of``), ``cov_xy = (G'((x - c_x)(y - c_y)) - cross_x cross_y) / g``
    with ``cross = G'(x - c) / sqrt(g)``. The per-pair work is
    ``A2 / k = G'(x~ y~) - cross_x cross_y + C2 / k`` with ``k = 2 cn / g``; the factor
    ``k`` moves into the per-volume ``beta`` (B2 / k = beta_x + beta_y). So the two
    large float32 terms use bitwise the same weights and cancel before any rounded
    constant multiplies them: a relative error d on either would cost about
    ``d * mu^2 / var`` (~25 d in brain tissue) in SSIM.
    """

    def __init__(self, shape: tuple[int, ...], *, data_range: float, sigma: float, truncate: float,
                 use_sample_covariance: bool, device: torch.device, use_kernels: bool = False):
        if sigma <= 0:
            raise ValueError(f"ssim_sigma must be positive, got {sigma}")
        self.filter = _ValidGaussian(sigma, truncate, device)
        self.radius = self.filter.radius
        win_size = 2 * self.radius + 1
        if min(shape) < win_size:
            raise ValueError(f"volumes of shape {shape} are smaller than the SSIM window ({win_size} voxels)")
        n_window = win_size ** len(shape)
        self.cov_norm = n_window / (n_window - 1) if use_sample_covariance else 1.0
        self.c1 = (_K1 * data_range) ** 2
        self.c2 = (_K2 * data_range) ** 2
        self.k = 2 * self.cov_norm / self.filter.gain
        self.device = device
        self.use_kernels = use_kernels  # per-volume maps by the numba kernel (CPU)

    def empty_moments(self, n: int, shape: tuple[int, ...]) -> _Moments:
        """Uninitialised float32 maps for ``n`` volumes of ``shape`` (see :meth:`moments`)."""
        r2 = 2 * self.radius
        inner = (n, *(size - r2 for size in shape))
        return _Moments(torch.empty((n, *shape), dtype=torch.float32, device=self.device),
                        *(torch.empty(inner, dtype=torch.float32, device=self.device) for _ in range(4)))

    def moments(self, volumes: torch.Tensor, out: _Moments | None = None) -> _Moments:
        """Per-volume maps of (B, X, Y, Z) float32 volumes, computed in float64 one at a time.

        ``out``: maps of at least B volumes to write into (the first B are used). The CPU
        engine passes the same buffers for every block of training volumes: fresh ones
        (580 MB per block of four at NCCT size) page-faulted on first touch, which cost
        more than the kernel that fills them (0.07 of 0.12 s per volume).
        """
        n = volumes.shape[0]
        if out is None:
            out = self.empty_moments(n, volumes.shape[1:])
        else:
            out = out[:n]
            if out.shifted.shape != volumes.shape:
                raise ValueError(f"map buffers for {tuple(out.shifted.shape)} cannot hold maps of "
                                 f"{tuple(volumes.shape)}")
        gain = self.filter.gain
        if self.device.type == "cpu" and self.use_kernels:
            weights = self.filter.weights
            for i, volume in enumerate(volumes):
                shift = _shift_of(volume)
                torch.sub(volume, shift, out=out.shifted[i])
                maps = [getattr(out, name)[i].numpy() for name in ("cross", "mean", "alpha", "beta")]
                kernels.ssim_moments(out.shifted[i].numpy(), float(shift), weights, gain, self.c1, self.c2,
                                     self.cov_norm, self.k, *maps)
            return out
        for i, volume in enumerate(volumes):
            shift = _shift_of(volume)
            # The float32 shifted volume is what the per-pair product sees; deriving all
            # maps from exactly these values keeps the cancellation in A2 exact (the
            # maps then describe ``shifted + c``, within float32 rounding of the volume).
            torch.sub(volume, shift, out=out.shifted[i])
            shifted = out.shifted[i].double()
            filtered = self.filter(shifted)
            mean_shifted = filtered / gain
            var = self.filter(shifted * shifted).div_(gain).sub_(mean_shifted * mean_shifted)
            mean = mean_shifted + shift.double()
            out.cross[i] = filtered / math.sqrt(gain)
            out.mean[i] = mean
            out.alpha[i] = mean * mean + self.c1 / 2
            out.beta[i] = var.mul_(self.cov_norm).add_(self.c2 / 2).div_(self.k)
        return out

    def mean(self, x: _Moments, y: _Moments, rows: int, workspace: _Workspace) -> torch.Tensor:
        """Mean SSIM of each volume in batch ``x`` with the single volume in ``y``, float64.

        The interior is processed in slabs of ``rows`` rows of the first axis; a slab
        needs ``rows + 2r`` rows of the shifted volumes for its product. All per-pair
        maps live in ``workspace``.
        """
        c1 = torch.tensor(self.c1, dtype=torch.float32, device=self.device)
        n_batch, n_inner = x.mean.shape[:2]
        total = torch.zeros(n_batch, dtype=torch.float64, device=self.device)
        for start in range(0, n_inner, rows):
            inner = slice(start, start + rows)
            outer = slice(start, min(start + rows, n_inner) + 2 * self.radius)
            product = torch.mul(x.shifted[:, outer], y.shifted[:, outer],
                                out=workspace("product", (n_batch, *x.shifted[0, outer].shape)))
            a2 = self.filter(product, workspace)
            a2.addcmul_(x.cross[:, inner], y.cross[:, inner], value=-1.0).add_(self.c2 / self.k)
            shape = a2.shape
            ssim = torch.addcmul(c1, x.mean[:, inner], y.mean[:, inner], value=2.0, out=workspace("a1", shape))
            ssim.mul_(a2)
            denominator = torch.add(x.alpha[:, inner], y.alpha[:, inner], out=workspace("b1", shape))
            denominator.mul_(torch.add(x.beta[:, inner], y.beta[:, inner], out=workspace("b2", shape)))
            total += ssim.div_(denominator).sum(dim=(1, 2, 3))
        return total / math.prod(x.mean.shape[1:])
