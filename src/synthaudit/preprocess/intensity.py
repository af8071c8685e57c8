"""Intensity windowing (RELICT 2.1): a fixed clip-and-rescale shared by every volume.

Why fixed bounds: replica detection compares intensities across volumes, so every
volume must go through the same mapping. A per-volume (data-dependent) range would
give two identical anatomies different intensities whenever, say, one scan contains
a little more bone or metal.
"""

from __future__ import annotations

import numpy as np


def window(data: np.ndarray, lower: float | None, upper: float | None, rescale: bool) -> np.ndarray:
    """Clip ``data`` to ``[lower, upper]`` and optionally map that range linearly to [0, 1].

    Args:
        data: Volume (any shape), e.g. CT in HU.
        lower: Lower bound; ``None`` leaves that side unclipped.
        upper: Upper bound; ``None`` leaves that side unclipped.
        rescale: Map ``lower`` to 0 and ``upper`` to 1. Needs both bounds, because
            rescaling with the data's own minimum or maximum would make the mapping
            differ from volume to volume.

    Returns:
        A float32 array of the same shape.

    Raises:
        ValueError: If ``lower >= upper``, or if ``rescale`` is requested without both
            bounds.
    """
    if lower is not None and upper is not None and not lower < upper:
        raise ValueError(f"window needs lower < upper, got [{lower}, {upper}]")
    if rescale and (lower is None or upper is None):
        raise ValueError(f"rescale needs both window bounds, got [{lower}, {upper}]")
    out = np.clip(np.asarray(data, dtype=np.float32), lower, upper)
    if rescale:
        out = (out - np.float32(lower)) / np.float32(upper - lower)
    return out.astype(np.float32, copy=False)
