"""Preprocessing of one scan: register to the template, resample onto the ROI grid, window.

Why this order: a single interpolation from the raw scan to the final cropped grid
(registration transform composed with the ROI grid) avoids blurring twice, and the
registration itself runs on the full-FOV template so that a small ROI (e.g. a
Circle-of-Willis crop) never starves the metric. With ``registration.target:
reference`` the scan is registered to the dataset's reference scan instead, and the
template -> reference and reference -> scan transforms are composed into that one
resampling (:func:`registration_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from ..io import VolumeError, check_on_grid, load_volume, spacing_from_affine
from .intensity import window
from ..config import object_defaults
from .qc import masked_correlation
from .register import (compose_affine, from_sitk, head_mask, reference_grid, register_affine, resample_to_grid,
                       to_sitk)

def load_template(name: str, spacing_mm: float) -> tuple[np.ndarray, np.ndarray]:
    """The registration target: ``mni_ct``, ``mni_t1`` (nilearn, offline) or a NIfTI path."""
    if name == "mni_ct":
        from ..anatomy import mni_ct_template

        return mni_ct_template(spacing_mm)
    if name == "mni_t1":
        from ..anatomy import tissue_maps

        maps = tissue_maps(spacing_mm)
        return maps.t1.astype(np.float32), maps.affine
    path = Path(name)
    if not path.is_file():
        raise VolumeError(f"{path}: template not found (use mni_ct, mni_t1 or a NIfTI path)")
    return load_volume(path)


def output_grid(pre: dict, reference_image: str | None = None) -> dict:
    """The preprocessed grid: from params (register: true) or from a reference volume."""
    if pre["register"]:
        affine = reference_grid(pre["spacing_mm"], pre["roi"]["size_vox"], pre["roi"]["center_mm"])
        shape = [int(s) for s in pre["roi"]["size_vox"]]
    else:
        if reference_image is None:
            raise ValueError("register: false needs a reference volume to define the grid")
        import nibabel as nib

        img = nib.load(reference_image)
        affine, shape = img.affine, [int(s) for s in img.shape[:3]]
    intensity = pre["intensity"]
    if intensity["window"] is not None:
        rng = [0.0, 1.0] if intensity["rescale"] else [float(v) for v in intensity["window"]]
    else:
        rng = None
    return {"affine": np.asarray(affine).tolist(), "shape": shape,
            "spacing_mm": spacing_from_affine(np.asarray(affine)).tolist(),
            "registered": bool(pre["register"]), "intensity_range": rng,
            "reference": reference_image}


def registration_settings(pre: dict) -> dict:
    """The ``registration`` block of ``pre``, with the schema's defaults for the keys it leaves
    out (params loaded through :mod:`synthaudit.config` have them already; a block given
    directly, e.g. by a benchmark, gets them here from the same place)."""
    return {**object_defaults("datasets.*.preprocess.registration"), **pre["registration"]}


def _register(fixed: "RegistrationTarget", data: np.ndarray, affine: np.ndarray, reg: dict, threads: int | None):
    """register_affine with the params' settings."""
    clip = reg["clip"]
    return register_affine(
        fixed.data, fixed.affine, data, affine,
        histogram_bins=reg["histogram_bins"], sampling_fraction=reg["sampling_fraction"],
        shrink_factors=tuple(reg["shrink_factors"]), smoothing_sigmas_vox=tuple(reg["smoothing_sigmas_vox"]),
        iterations=reg["iterations"], learning_rate=reg["learning_rate"], seed=reg["seed"],
        stages=tuple(reg["stages"]), fixed_mask=fixed.mask, rotation_search_deg=reg["rotation_search_deg"],
        clip=None if clip is None else (float(clip[0]), float(clip[1])), threads=threads,
    )


def registration_qc(result) -> dict:
    """The optimiser's account for the QC table: metric, iterations against the cap,
    convergence and the last step, per the finest level (where the result is made)."""
    return {
        "metric_mattes_mi": result.metric,
        "iterations": result.iterations,
        "max_iterations": result.levels[-1].max_iterations if result.levels else None,
        "converged": result.converged,
        "levels_at_cap": result.levels_at_cap,
        "final_step_mm": result.final_step,
        "stop_condition": result.stop_condition,
    }


@dataclass
class RegistrationTarget:
    """The image a dataset's scans are registered to, and where it lies relative to the template.

    Attributes:
        data, affine: The image (its own grid and world space).
        to_template: Maps template (output-grid) physical points to this image's points;
            ``None`` when the image is the template itself. A scan registered to this
            image is resampled through ``to_template`` followed by its own transform.
        mask: Boolean array on the image's grid: the voxels the metric samples (the
            template's region, :func:`template_mask`, carried along); ``None``: all.
    """

    data: np.ndarray
    affine: np.ndarray
    to_template: sitk.Transform | None = None
    mask: np.ndarray | None = None


def template_mask(template: tuple[np.ndarray, np.ndarray], reg: dict) -> np.ndarray | None:
    """The voxels of the template the metric samples: its head (Otsu foreground of the clipped
    image, holes filled) dilated by ``registration.mask_margin_mm``; None when that is null.

    What "head" means follows the template: ``mni_ct`` is a brain inside a drawn skull and
    scalp (no face, no neck), ``mni_t1`` is skull-stripped (its foreground is the brain).
    Either way the region leaves out what differs most between people and between scans:
    the neck's flexion, the face, the scanner table and the empty field of view, which
    otherwise pulled scans of one patient to different optima (issue 29).
    """
    if reg["mask_margin_mm"] is None:
        return None
    clip = reg["clip"]
    data = np.asarray(template[0], dtype=np.float32)
    if clip is not None:
        data = np.clip(data, clip[0], clip[1])
    mask, _ = from_sitk(head_mask(to_sitk(data, template[1]), float(reg["mask_margin_mm"])))
    return mask.astype(bool)


def bin_to_spacing(data: np.ndarray, affine: np.ndarray, spacing_mm: float) -> tuple[np.ndarray, np.ndarray]:
    """Average blocks of voxels so that no axis is finer than ``spacing_mm`` (never coarser).

    The reference scan is binned to the output spacing once, so that the registration
    pyramid (shrink factors of the fixed image) means the same voxel sizes whether a scan
    is registered to the template (on that spacing) or to a 0.75 mm reference, and the
    metric's cost per iteration stays that of the template. Edge voxels that do not fill
    a block are dropped; the affine keeps every block at the centre of its voxels.
    """
    from ..io import spacing_from_affine

    factors = [max(1, int(np.floor(spacing_mm / s + 1e-6))) for s in spacing_from_affine(affine)]
    if factors == [1, 1, 1]:
        return np.asarray(data, dtype=np.float32), np.asarray(affine, dtype=float)
    shape = [n // f for n, f in zip(data.shape, factors)]
    if min(shape) < 1:
        raise VolumeError(f"volume of shape {list(data.shape)} is smaller than one {spacing_mm} mm block")
    cropped = np.asarray(data, dtype=np.float32)[: shape[0] * factors[0], : shape[1] * factors[1],
                                                 : shape[2] * factors[2]]
    binned = cropped.reshape(shape[0], factors[0], shape[1], factors[1], shape[2], factors[2]).mean(axis=(1, 3, 5))
    out = np.asarray(affine, dtype=float).copy()
    out[:3, :3] = affine[:3, :3] * np.asarray(factors, dtype=float)
    out[:3, 3] = affine[:3, :3] @ ((np.asarray(factors, dtype=float) - 1) / 2.0) + affine[:3, 3]
    return binned.astype(np.float32), out


def registration_reference(pre: dict, template: tuple[np.ndarray, np.ndarray], reference_image: str,
                           threads: int | None = None) -> tuple[RegistrationTarget, dict]:
    """The dataset's reference scan as a :class:`RegistrationTarget` (``registration.target: reference``).

    The reference (a raw training scan) is binned to the output spacing
    (:func:`bin_to_spacing`), registered to the template once with the dataset's
    settings, and kept in its own space: every scan is then registered to it and
    resampled through both transforms at once. Why: a template is an average (or, for
    ``mni_ct``, a drawn) head, and ``mni_t1`` is skull-stripped, so a scan's optimum
    against it is shallow and lands in different places for different poses of one head
    (issue 29). A real scan of the same modality has the same edges and contrasts as the
    others, so each scan's optimum is sharp and two scans of one patient land together.
    The template only fixes the dataset's frame, once; the reference's own error in that
    frame is shared by every scan, so it cancels in every distance (the reference is a
    training scan: its own row of the QC table shows it). Kept in its own space rather
    than resampled onto the template's grid, because that grid crops a head that the
    registration tilts or shifts, and a cropped reference misled every scan. The metric
    samples the template's region (:func:`template_mask`) carried into the reference's
    space: with the whole head instead (neck, face), scans of one MRI patient registered
    to a reference of another person ended 5-13 mm apart.

    Returns:
        The target and the reference registration's QC (its convergence).
    """
    reg = registration_settings(pre)
    data, affine = load_volume(reference_image)
    data, affine = bin_to_spacing(data, affine, float(pre["spacing_mm"]))
    tmask = template_mask(template, reg)
    result = _register(RegistrationTarget(template[0], template[1], None, tmask), data, affine, reg, threads)
    mask = None
    if tmask is not None:  # the template's region, carried into the reference's space
        mask = resample_to_grid(tmask, template[1], result.transform.GetInverse(), affine, data.shape, order=0)
        if not mask.any():
            raise VolumeError(f"{reference_image}: the template's region misses the reference scan entirely after "
                              "its registration (check the scan and the reference's QC)")
    qc = {"target": "reference", "reference": reference_image, **registration_qc(result)}
    return RegistrationTarget(data, affine, result.transform, mask), qc


def save_registration_target(target: RegistrationTarget, image_path, mask_path, transform_path) -> None:
    """Write a reference :class:`RegistrationTarget`: image and mask (NIfTI), ``to_template`` (.tfm)."""
    from ..io import atomic_path, save_volume

    save_volume(image_path, target.data, np.asarray(target.affine), dtype=np.float32)
    mask = np.ones(target.data.shape, bool) if target.mask is None else target.mask
    save_volume(mask_path, mask.astype(np.uint8), np.asarray(target.affine), dtype=np.uint8)
    with atomic_path(transform_path) as tmp:
        sitk.WriteTransform(target.to_template, str(tmp))


def load_registration_target(image_path, mask_path, transform_path) -> RegistrationTarget:
    """Read what :func:`save_registration_target` wrote."""
    data, affine = load_volume(image_path)
    mask, _ = load_volume(mask_path)
    to_template = sitk.ReadTransform(str(transform_path))
    if to_template.GetName() == "CompositeTransform":
        to_template = sitk.CompositeTransform(to_template).GetNthTransform(0)
    return RegistrationTarget(data, affine, to_template.Downcast(), mask > 0)


def preprocess_image(image_path: str, pre: dict, grid: dict, template=None, template_roi=None,
                     threads: int | None = None):
    """Preprocess one raw scan; returns ``(data, transform_or_None, qc_dict)``.

    ``template``: ``(data, affine)`` of the template, or a :class:`RegistrationTarget` (the
    dataset's reference scan, :func:`registration_reference`). ``template_roi``: the
    template on the output grid, for the correlation QC.
    """
    data, affine = load_volume(image_path)
    out_affine, out_shape = np.asarray(grid["affine"]), tuple(grid["shape"])
    qc = {"file": image_path, "registered": bool(pre["register"])}
    if pre["register"]:
        reg = registration_settings(pre)
        if isinstance(template, RegistrationTarget):
            target = template
        else:
            target = RegistrationTarget(template[0], template[1], None, template_mask(template, reg))
        result = _register(target, data, affine, reg, threads)
        transform = result.transform
        if target.to_template is not None:  # template -> reference -> this scan, one transform
            transform = compose_affine(target.to_template, transform)
        out = resample_to_grid(data, affine, transform, out_affine, out_shape, order=1,
                               default_value=float(data.min()))
        qc.update(registration_qc(result))
    else:
        check_on_grid(image_path, data, affine, grid)
        out, transform = data, None
    win = pre["intensity"]["window"]
    if win is not None:
        out = window(out, win[0], win[1], pre["intensity"]["rescale"])
    out = out.astype(np.float32)
    qc["min"], qc["max"] = float(out.min()), float(out.max())  # SSIM's data range without a window
    if template_roi is not None:
        corr = masked_correlation(out, template_roi)
        qc["correlation_to_template"] = corr  # the verdict is the dataset's QC table's (preprocess.qc.add_target_qc)
    return out, transform, qc


def preprocess_label(label_path: str, pre: dict, grid: dict, transform=None, allowed=None,
                     volume: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Carry a label map onto the grid with nearest neighbour (values never interpolated).

    ``allowed``: the declared label values; others are refused naming ``label_path`` (the
    user's file, before any derived copy exists). ``volume``: the file's ``(data, affine)``
    when the caller has loaded it already (checked before a registration), so it is read once.
    """
    data, affine = volume if volume is not None else load_volume(label_path)
    if allowed is not None:
        from ..segment.labels import check_labels

        check_labels(label_path, data, allowed)
    if not np.allclose(data, np.round(data)):
        raise VolumeError(f"{label_path}: label map has non-integer values")
    if pre["register"]:
        out = resample_to_grid(data, affine, transform, np.asarray(grid["affine"]), tuple(grid["shape"]),
                               order=0, default_value=0.0)
    else:
        check_on_grid(label_path, data, affine, grid, what="label")
        out = data
    return np.round(out).astype(np.int16)
