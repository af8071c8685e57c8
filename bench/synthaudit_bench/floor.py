"""The hardware floor of the all-pairs SSIM on this machine (``make bench``, issue 19).

Why: a time alone does not say whether the engine is near what the machine allows. The
floor counts the arithmetic and the memory traffic of one pair in the CPU kernel's
schedule (``relict.kernels._ssim_sums_11``) and divides by rates measured here and now:

* **flops per pair** (float32, a fused multiply-add counted as 2): the product ``x y``
  (one multiply per voxel), then the second axis (11 multiply-adds over ``X (Y - 10) Z``
  values), the last axis (over ``X ((Y - 10) Z - 10)``: the kernel's flat loop also
  fills the 10 unused columns between rows), the first axis from the ring of filtered
  planes (over ``(X - 10)((Y - 10) Z - 10)``), and the SSIM terms, about 14 operations
  per interior voxel (B1 formed from the means);
* **bytes per pair** from memory: a training volume's shifted values and the three
  interior maps the kernel reads (cross, mean, beta) once per synthetic volume (the
  kernel's outer loop runs over synthetic volumes), the synthetic side once per block
  of training volumes; the ring of filtered planes stays in cache and is not counted;
* **rates**: a float32 matrix product (torch, the given threads) and a large copy
  (read + write bytes).

The floor per pair is the larger of the two times: no schedule of this arithmetic is
faster than the compute time, and this schedule is not faster than its traffic.
"""

from __future__ import annotations

import time

TAPS = 11          # skimage's window: sigma 1.5, truncate 3.5
TERM_FLOPS = 14    # per interior voxel: a1, a2, B1 from the means, B2, the ratio and the sum
MAPS = 3           # interior maps the kernel reads per volume: cross, mean, beta


def ssim_pair_cost(shape: tuple[int, int, int], taps: int = TAPS, block: int | None = None) -> dict:
    """Flops and memory bytes of one (synthetic, training) pair in the CPU kernel's schedule.

    ``block``: training volumes per kernel block; default the engine's own
    (``image_measures._CPU_SSIM_BLOCK``), so the count follows the engine.
    """
    if block is None:
        from synthaudit.relict.image_measures import _CPU_SSIM_BLOCK as block
    nx, ny, nz = shape
    r = taps - 1
    ox, oy, oz = nx - r, ny - r, nz - r
    product = nx * ny * nz
    second = nx * oy * nz * 2 * taps
    last = nx * (oy * nz - r) * 2 * taps
    first = ox * (oy * nz - r) * 2 * taps
    terms = ox * oy * oz * TERM_FLOPS
    volume_bytes = 4 * (nx * ny * nz + MAPS * ox * oy * oz)   # shifted float32 volume + the interior maps read
    passes = {"product": product, "second_axis": second, "last_axis": last, "first_axis": first, "terms": terms}
    return {"flops": sum(passes.values()), "bytes": volume_bytes + volume_bytes / block, "flops_by_pass": passes}


def machine_rates(threads: int, seconds: float = 1.0) -> dict:
    """float32 GEMM rate (GFLOP/s) and copy bandwidth (GB/s, read + write) with ``threads`` threads."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.rand(2048, 2048)
        b = torch.rand(2048, 2048)
        gemm = _best_rate(lambda: torch.mm(a, b), 2 * 2048 ** 3, seconds) / 1e9
        src = torch.rand(1 << 27)          # 512 MiB: far beyond any cache
        dst = torch.empty_like(src)
        copy = _best_rate(lambda: dst.copy_(src), 2 * src.numel() * 4, seconds) / 1e9
    finally:
        torch.set_num_threads(previous)
    return {"threads": threads, "gemm_gflops": round(gemm, 1), "copy_gb_s": round(copy, 1)}


def _best_rate(work, units: float, seconds: float) -> float:
    work()  # warm-up
    best, spent = float("inf"), 0.0
    while spent < seconds or best == float("inf"):
        t = time.perf_counter()
        work()
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
    return units / best


def ssim_floor(shape: tuple[int, int, int], threads: int, measured_s_per_pair: float | None = None,
               rates: dict | None = None) -> dict:
    """The floor per pair on this machine and how far the measured time is from it."""
    cost = ssim_pair_cost(tuple(int(v) for v in shape))
    rates = rates or machine_rates(threads)
    compute_s = cost["flops"] / (rates["gemm_gflops"] * 1e9)
    memory_s = cost["bytes"] / (rates["copy_gb_s"] * 1e9)
    out = {"shape": list(shape), "flops_per_pair": cost["flops"], "bytes_per_pair": int(cost["bytes"]),
           "flops_by_pass": cost["flops_by_pass"], "rates": rates,
           "compute_floor_s_per_pair": compute_s, "memory_floor_s_per_pair": memory_s,
           "floor_s_per_pair": max(compute_s, memory_s),
           "bound": "compute" if compute_s >= memory_s else "memory"}
    if measured_s_per_pair:
        out["measured_s_per_pair"] = measured_s_per_pair
        out["times_floor"] = round(measured_s_per_pair / out["floor_s_per_pair"], 2)
        out["achieved_gflops"] = round(cost["flops"] / measured_s_per_pair / 1e9, 1)
    return out
