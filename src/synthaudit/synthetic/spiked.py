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


def augment(volume: np.ndarray, label: np.ndarray | None, affine: np.ndarray, augmentation: str, cfg: dict,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None, str]:
    """A training-time augmentation of a replica, as a generator trained with it could emit.

    ``flip``: mirrored along ``cfg["flip_axis"]``; ``shift``: translated by
    ``cfg["shift_mm"]`` in a random direction; ``rotate``: rotated by +-``cfg["rotation_deg"]``
    about a random axis through the grid centre. Zero outside the grid (MONAI's and
    torchvision's default padding); the label map follows with nearest-neighbour
    interpolation. Returns the volume, the label and a description of what was done.
    """
    from ..relict.geometry import rotate  # the alignment search's own rotation convention

    spacing = spacing_from_affine(affine)
    lab = None if label is None else label
    if augmentation == "none":
        return volume, lab, "none"
    if augmentation == "flip":
        ax = int(cfg["flip_axis"])
        out = np.ascontiguousarray(np.flip(volume, axis=ax))
        lab = None if lab is None else np.ascontiguousarray(np.flip(lab, axis=ax))
        return out, lab, f"flip axis {ax}"
    if augmentation == "shift":
        direction = rng.standard_normal(3)
        direction /= np.linalg.norm(direction)
        mm = direction * float(cfg["shift_mm"])
        vox = mm / np.asarray(spacing, float)
        out = ndimage.shift(volume, vox, order=1, mode="constant", cval=0.0).astype(np.float32)
        lab = None if lab is None else ndimage.shift(lab, vox, order=0, mode="constant", cval=0).astype(label.dtype)
        return out, lab, "shift (" + ", ".join(f"{m:.1f}" for m in mm) + ") mm"
    if augmentation == "rotate":
        ax = int(rng.integers(3))
        angle = float(cfg["rotation_deg"]) * (1 if rng.random() < 0.5 else -1)
        out = rotate(np.asarray(volume, np.float32), ax, angle, spacing).astype(np.float32)
        lab = None if lab is None else rotate(lab, ax, angle, spacing, order=0).astype(label.dtype)
        return out, lab, f"rotation {angle:+.1f} deg about axis {ax}"
    raise ValueError(f"unknown augmentation {augmentation!r}; known: none, flip, shift, rotate")
