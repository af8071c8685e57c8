"""Rotation about the grid centre, shared by the alignment search and the augmented spiked replicas.

Why a module of its own: the spiked replicas (a per-volume job with the imaging environment)
must rotate exactly as the alignment search does, without importing the search and its
torch pre-selection.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import ndimage


def rotate(volume: np.ndarray, axis: int, angle_deg: float, spacing_mm: Sequence[float],
           order: int = 1) -> np.ndarray:
    """Rotate about the grid centre in physical space (anisotropic voxels respected), linear
    interpolation (``order``), zero outside; axis -1 or angle 0 returns the input unchanged."""
    if axis < 0 or angle_deg == 0:
        return volume
    a, b = [i for i in range(3) if i != axis]
    c, s = math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))
    rot = np.eye(3)
    rot[a, a], rot[a, b], rot[b, a], rot[b, b] = c, -s, s, c
    sp = np.asarray(spacing_mm, float)
    # pull-back: out(x) = in(M x + o), M = S^-1 R^T S in voxel units
    m = np.diag(1 / sp) @ rot.T @ np.diag(sp)
    centre = (np.asarray(volume.shape, float) - 1) / 2
    return ndimage.affine_transform(volume, m, offset=centre - m @ centre, order=order, mode="constant", cval=0.0)
