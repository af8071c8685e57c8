"""Choosing the torch device: one rule for every stage (CPU here, CUDA on the users' clusters)."""

from __future__ import annotations

import contextlib
import glob
import os
import sys
from collections.abc import Iterator
from typing import Any

# Device nodes a CUDA (NVIDIA) or ROCm (AMD) GPU needs inside any machine or container.
_GPU_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd")


def _no_gpu() -> bool:
    """No GPU device node on this machine, so ``torch.cuda.is_available()`` is False.

    Why: importing torch costs 1.5-2.6 s per job, and jobs that run numba kernels on the CPU
    (MAE, RMSE, NCC) would import it only to ask that. Without a GPU's device nodes no CUDA
    or ROCm device can be opened; with them (or torch already imported), torch decides.
    """
    return not (any(glob.glob(pattern) for pattern in _GPU_NODES) or os.path.exists("/proc/driver/nvidia/version"))


def device_type(device: Any = "auto") -> str:
    """The type of the device :func:`resolve_device` gives (``"cpu"``, ``"cuda"``, ...), without
    importing torch for ``"cpu"``, or for ``"auto"`` on a machine without a GPU."""
    if device == "cpu" or (device == "auto" and "torch" not in sys.modules and _no_gpu()):
        return "cpu"
    return resolve_device(device).type


def resolve_device(device: Any = "auto"):
    """``"auto"`` -> CUDA when available, else CPU; refuse ``"cuda"`` without CUDA.

    Returns:
        A ``torch.device``.
    """
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return dev


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Use ``threads`` CPU threads inside the block (None: leave torch's setting), then restore it.

    Why a context: torch's thread count is process-wide, and a job, ``init``'s timing and the tests
    each set it for one block of work."""
    if threads is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def describe(device: Any = "auto") -> str:
    """What the provenance records: ``cpu``, or ``cuda:<index> (<name>)``; CUDA training is
    not bitwise CPU training (nor one GPU model another's), so a reader needs to know which."""
    if device_type(device) == "cpu":
        return "cpu"
    dev = resolve_device(device)
    if dev.type == "cuda":
        import torch

        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(dev)


def describe_here() -> str:
    """:func:`describe` for the provenance, in the process that runs Snakemake: that process
    may have no torch (with ``--use-conda`` the jobs bring their own), so on a machine with a
    GPU and no torch it says so instead of importing it. On SLURM this is the submitting
    host's device, not necessarily the training nodes'."""
    import importlib.util

    if device_type("auto") == "cpu" and "torch" not in sys.modules:
        return "cpu"
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return "GPU present; torch not installed where Snakemake runs"
    return describe("auto")
