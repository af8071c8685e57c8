"""Samples of a generator that ran elsewhere, brought onto the preprocessed grid.

Why a choice and not always resampling: a sample that is not on the training grid
usually means the generator was trained on differently preprocessed data, and every
voxel-wise measure would then compare misaligned volumes. By default this stops the
run naming the file; ``off_grid: resample`` resamples it (world coordinates, linear for
images, nearest neighbour for labels) with a warning in the log, for generators that
write their own header or spacing.
"""

from __future__ import annotations

import logging

import numpy as np

from ..io import VolumeError, check_on_grid, spacing_from_affine


def onto_grid(path: str, data: np.ndarray, affine: np.ndarray, grid: dict, *, off_grid: str = "error",
              what: str = "synthetic volume", label: bool = False,
              log: logging.Logger | None = None) -> np.ndarray:
    """``data`` on the grid: unchanged when it is on it, else refused or resampled."""
    if off_grid not in ("error", "resample"):
        raise ValueError(f"off_grid must be 'error' or 'resample', not {off_grid!r}")
    try:
        check_on_grid(path, data, affine, grid, what=what)
        return data
    except VolumeError:
        if off_grid == "error":
            raise
    from ..preprocess.register import resample_to_grid  # SimpleITK only when needed

    shape, out_affine = tuple(grid["shape"]), np.asarray(grid["affine"])
    (log or logging.getLogger("synthaudit")).warning(
        "%s: %s has shape %s and spacing %s mm, the grid %s and %s mm: resampled onto the grid "
        "(synthetic.off_grid: resample)", path, what, list(data.shape),
        np.round(spacing_from_affine(affine), 3).tolist(), list(shape),
        np.round(spacing_from_affine(out_affine), 3).tolist())
    out = resample_to_grid(data, affine, None, out_affine, shape, order=0 if label else 1, default_value=0.0)
    return np.round(out) if label else out.astype(np.float32)
