"""Choosing the torch device: one rule for every stage (CPU here, CUDA on the users' clusters)."""

from __future__ import annotations

from typing import Any


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
