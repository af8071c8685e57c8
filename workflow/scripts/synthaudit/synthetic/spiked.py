"""A synthetic set with a known reference standard, built from real scans.

Why: before a generator exists (and to test any detector), replicas with known
source and graded strength give a truth that human ratings cannot: training scans
passed through controlled perturbations are replicas, held-out patients' scans are
not (the ground-truth construction of the tripartite-evaluation paper).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..io import spacing_from_affine


def smooth_displacement(shape, spacing_mm, amplitude_mm: float, smoothness_mm: float,
                        rng: np.random.Generator) -> np.ndarray:
    """A smooth random displacement field in voxels, shape (3, X, Y, Z), max |d| ~ amplitude.

    Drawn on a coarse grid and upsampled: cheap, and smooth at the scale asked for.
    """
    spacing_mm = np.asarray(spacing_mm, float)
    if amplitude_mm <= 0:
        return np.zeros((3, *shape), np.float32)
    step = max(smoothness_mm / 2.0, float(spacing_mm.min()))
    coarse = tuple(max(2, int(np.ceil(n * s / step)) + 1) for n, s in zip(shape, spacing_mm))
    field = []
    for axis in range(3):
        f = ndimage.gaussian_filter(rng.standard_normal(coarse), sigma=1.0, mode="wrap")
        f /= np.abs(f).max() + 1e-12
        zoom = [n / c for n, c in zip(shape, coarse)]
        up = ndimage.zoom(f, zoom, order=1)[: shape[0], : shape[1], : shape[2]]
        field.append(up * amplitude_mm / spacing_mm[axis])
    return np.stack(field).astype(np.float32)


def warp(volume: np.ndarray, displacement: np.ndarray, order: int) -> np.ndarray:
    """Pull-back warp: out(x) = volume(x + d(x)); nearest edge values outside."""
    grid = np.indices(volume.shape, dtype=np.float32)
    return ndimage.map_coordinates(volume, grid + displacement, order=order, mode="nearest")


def perturb(volume: np.ndarray, label: np.ndarray | None, affine: np.ndarray, strength: float,
            cfg: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """A replica of ``volume`` at perturbation ``strength`` (0 = exact copy).

    cfg holds per-unit-strength amounts: noise_sigma, deformation_mm,
    deformation_smoothness_mm, intensity_shift, intensity_scale (intensity units of
    the preprocessed volume, mm for the deformation).
    """
    out = volume.astype(np.float32, copy=True)
    lab = None if label is None else label.copy()
    if strength <= 0:
        return out, lab
    disp = smooth_displacement(out.shape, spacing_from_affine(affine), strength * cfg["deformation_mm"],
                               cfg["deformation_smoothness_mm"], rng)
    if np.any(disp):
        out = warp(out, disp, order=1)
        if lab is not None:
            lab = warp(lab, disp, order=0).astype(label.dtype)
    scale = 1.0 + strength * cfg["intensity_scale"] * rng.uniform(-1, 1)
    shift = strength * cfg["intensity_shift"] * rng.uniform(-1, 1)
    out = out * np.float32(scale) + np.float32(shift)
    out += rng.normal(0.0, strength * cfg["noise_sigma"], size=out.shape).astype(np.float32)
    return out, lab
