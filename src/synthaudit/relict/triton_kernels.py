"""Fused GPU kernels (Triton) for the image level's per-pair work: MAE/RMSE and SSIM's cross term.

Why: on a GPU the torch path (``image_measures``) runs SSIM's per-pair filter as three banded
matrix products over a materialised product volume plus separate elementwise passes, and MAE/RMSE
as a difference volume, its square and two reductions: each pass another trip through memory,
30-80x above the floor that reading the two volumes once sets (issue 47: an H100 took 34 s for
RELICT's NCCT size, 50 x 774 pairs at 182 x 218 x 182, where the traffic floor is about 1 s). Here:

* **MAE/RMSE**: one pass over a training volume against every synthetic volume of the batch
  (:func:`error_sums`). A program loads its block of the training volume once and streams the
  batch past it; per (volume, block) partial sums of ``|x - y|`` and ``(x - y)^2`` in float32
  (a 1,024-voxel tree), summed in float64 by torch (the same precision as the torch path's
  cascade sums).
* **SSIM's cross term** ``G'(x~ y~)`` (notation of ``ssim_engine._SSIM``) as three 11-tap passes
  (:func:`ssim_means`): the first axis with the product formed on the fly from the two shifted
  volumes (never written to memory), the second axis, then the last axis fused with the SSIM terms
  ``(2 mu_x mu_y + C1)(G'(x~ y~) - cross_x cross_y + C2/k) / ((alpha_x + alpha_y)(beta_x + beta_y))``
  and their per-block partial sums. Neighbouring taps of a pass are read from cache; each pass
  writes one float32 map per pair, the last one none.

The per-volume maps (means, variances) stay the engine's (float64, once per volume). No atomics:
every partial sum has its own slot, so a pair's value does not depend on the schedule. The values
equal the CPU engine's to float32 rounding (filter passes in another order; 1e-6 relative in
tests/test_triton_kernels.py).

Where no GPU is present, Triton's interpreter (``TRITON_INTERPRET=1`` before Triton is imported)
runs the same kernels on CPU tensors with NumPy, so their numerics are tested on every machine;
the speed targets need a GPU (bench/gpu/image_level.py).
"""

from __future__ import annotations

import math
import os

from .lazy_torch import LazyTorch

torch = LazyTorch(__name__)

BLOCK = 1024  # voxels per program: a power of two (Triton's blocks), a float32 tree sum per block

try:  # Triton ships with CUDA builds of PyTorch; without it the torch path runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - requirements.txt installs it on Linux x86-64
    triton = tl = None


def unavailable(device) -> str | None:
    """Why the kernels cannot run on ``device`` (a torch device), or None when they can."""
    if triton is None:
        return "Triton is not installed (it ships with CUDA builds of PyTorch)"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (7, 0):  # what torch's own Triton backend requires
            return f"Triton compiles for GPUs of compute capability 7.0 or newer; {device} has {major}.{minor}"
        return None
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    return (f"the Triton kernels run on CUDA devices (or on CPU tensors under TRITON_INTERPRET=1, set before "
            f"Triton is imported); device {device} has neither")


if triton is not None:

    @triton.jit
    def _error_partials(x_ptr, y_ptr, abs_ptr, sq_ptr, n_batch, n_voxels, n_blocks, BLOCK: tl.constexpr):
        """Per (synthetic volume, block): sums of |x - y| and (x - y)^2, the block of y loaded once."""
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n_voxels
        y = tl.load(y_ptr + offs, mask=inside, other=0.0)
        x_row = x_ptr + offs
        out = pid
        for _ in range(n_batch):
            d = tl.load(x_row, mask=inside, other=0.0) - y
            tl.store(abs_ptr + out, tl.sum(tl.abs(d), axis=0))
            tl.store(sq_ptr + out, tl.sum(d * d, axis=0))
            x_row += n_voxels
            out += n_blocks

    @triton.jit
    def _axis_pass(in_ptr, y_ptr, w_ptr, out_ptr, stride, plane_in, plane_out, volume_in, volume_out,
                   PRODUCT: tl.constexpr, TAPS: tl.constexpr, BLOCK: tl.constexpr):
        """One 11-tap pass along an axis whose neighbours lie ``stride`` apart, for output plane i of
        volume b: ``out[b, i, v] = sum_a w[a] in[b, i, v + a stride]``. With PRODUCT, ``in`` is the shifted
        synthetic volume times the shifted training volume ``y`` (same layout, no batch axis), formed as
        it is read: the product is never stored."""
        i = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < plane_out
        src = in_ptr + b * volume_in + i * plane_in + offs
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for a in tl.static_range(TAPS):
            v = tl.load(src + a * stride, mask=inside, other=0.0)
            if PRODUCT:
                v = v * tl.load(y_ptr + i * plane_in + offs + a * stride, mask=inside, other=0.0)
            acc += tl.load(w_ptr + a) * v
        tl.store(out_ptr + b * volume_out + i * plane_out + offs, acc, mask=inside)

    @triton.jit
    def _last_axis_ssim(in_ptr, w_ptr, xc_ptr, xm_ptr, xa_ptr, xb_ptr, yc_ptr, ym_ptr, ya_ptr, yb_ptr, part_ptr,
                        nz, oz, plane_in, plane_out, volume_in, volume_out, n_parts, c1, c2k,
                        TAPS: tl.constexpr, BLOCK: tl.constexpr):
        """The last axis' pass and SSIM's terms of one block of an output plane: its partial sum."""
        pid = tl.program_id(0)
        i = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < plane_out
        row = offs // oz
        src = in_ptr + b * volume_in + i * plane_in + row * nz + (offs - row * oz)
        q = tl.zeros([BLOCK], dtype=tl.float32)
        for c in tl.static_range(TAPS):
            q += tl.load(w_ptr + c) * tl.load(src + c, mask=inside, other=0.0)
        x_at = b * volume_out + i * plane_out + offs
        y_at = i * plane_out + offs
        a2 = q - tl.load(xc_ptr + x_at, mask=inside, other=0.0) * tl.load(yc_ptr + y_at, mask=inside, other=0.0) + c2k
        a1 = 2.0 * tl.load(xm_ptr + x_at, mask=inside, other=0.0) * tl.load(ym_ptr + y_at, mask=inside, other=0.0) + c1
        b1 = tl.load(xa_ptr + x_at, mask=inside, other=1.0) + tl.load(ya_ptr + y_at, mask=inside, other=1.0)
        b2 = tl.load(xb_ptr + x_at, mask=inside, other=1.0) + tl.load(yb_ptr + y_at, mask=inside, other=1.0)
        terms = tl.where(inside, a1 * a2 / (b1 * b2), 0.0)
        tl.store(part_ptr + (b * tl.num_programs(1) + i) * n_parts + pid, tl.sum(terms, axis=0))


_TAPS: dict = {}


def _taps(weights, device):
    """The filter's float32 taps on the device, copied there once (a copy per call would synchronise
    the device for every training volume)."""
    key = (bytes(memoryview(weights)), str(device))
    if key not in _TAPS:
        _TAPS[key] = torch.tensor(weights, dtype=torch.float32, device=device)
    return _TAPS[key]


def _check(device) -> None:
    why = unavailable(device)
    if why is not None:
        raise RuntimeError(why)


def error_sums(x, y):
    """Per synthetic volume of ``x`` (B, X, Y, Z) float32, the float64 sums of ``|x - y|`` and
    ``(x - y)^2`` against the one training volume ``y`` (X, Y, Z)."""
    _check(x.device)
    x, y = x.contiguous(), y.contiguous()
    n_batch, n_voxels = x.shape[0], y.numel()
    n_blocks = triton.cdiv(n_voxels, BLOCK)
    abs_part = torch.empty((n_batch, n_blocks), dtype=torch.float32, device=x.device)
    sq_part = torch.empty_like(abs_part)
    _error_partials[(n_blocks,)](x, y, abs_part, sq_part, n_batch, n_voxels, n_blocks, BLOCK=BLOCK)
    return abs_part.double().sum(dim=1), sq_part.double().sum(dim=1)


def ssim_means(ssim, x, y, workspace):
    """Per synthetic volume of the moments ``x`` (batch), the float64 mean over the interior of its
    SSIM map against the one training volume's moments ``y`` (``ssim_engine._Moments``; ``ssim`` the
    engine's ``_SSIM``, for the filter's taps and the constants). ``workspace``: the engine's
    buffers, for the two intermediate passes (``filter0``/``filter1``: one map per pair each)."""
    device = x.shifted.device
    _check(device)
    n_batch, nx, ny, nz = x.shifted.shape
    taps = 2 * ssim.radius + 1
    ox, oy, oz = nx - taps + 1, ny - taps + 1, nz - taps + 1
    w = _taps(ssim.filter.weights, device)
    plane, plane_mid, plane_out = ny * nz, oy * nz, oy * oz
    first = workspace("filter0", (n_batch, ox, ny, nz))
    second = workspace("filter1", (n_batch, ox, oy, nz))
    xs, ys = x.shifted.contiguous(), y.shifted.contiguous()
    _axis_pass[(triton.cdiv(plane, BLOCK), ox, n_batch)](  # the first axis, the product formed as it is read
        xs, ys, w, first, plane, plane, plane, nx * plane, ox * plane, PRODUCT=True, TAPS=taps, BLOCK=BLOCK)
    _axis_pass[(triton.cdiv(plane_mid, BLOCK), ox, n_batch)](  # the second axis
        first, first, w, second, nz, plane, plane_mid, ox * plane, ox * plane_mid, PRODUCT=False, TAPS=taps,
        BLOCK=BLOCK)
    n_parts = triton.cdiv(plane_out, BLOCK)
    parts = torch.empty((n_batch, ox, n_parts), dtype=torch.float32, device=device)
    maps = [m.contiguous() for m in (x.cross, x.mean, x.alpha, x.beta, y.cross, y.mean, y.alpha, y.beta)]
    _last_axis_ssim[(n_parts, ox, n_batch)](
        second, w, *maps, parts, nz, oz, plane_mid, plane_out, ox * plane_mid, ox * plane_out, n_parts,
        float(ssim.c1), float(ssim.c2 / ssim.k), TAPS=taps, BLOCK=BLOCK)
    return parts.double().sum(dim=(1, 2)) / math.prod((ox, oy, oz))
