"""Label-map checks, numpy only: the per-scan preprocessing and import jobs check every
segmentation, and importing the surface-distance stack (scipy.spatial, scikit-image) for
that cost them 0.2 s each."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


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
