"""Preprocessing of one scan: register to the template, resample onto the ROI grid, window.

Why this order: a single interpolation from the raw scan to the final cropped grid
(registration transform composed with the ROI grid) avoids blurring twice, and the
registration itself runs on the full-FOV template so that a small ROI (e.g. a
Circle-of-Willis crop) never starves the metric.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import VolumeError, check_on_grid, load_volume, spacing_from_affine
from .intensity import window
from .qc import masked_correlation
from .register import reference_grid, register_affine, resample_to_grid

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


def preprocess_image(image_path: str, pre: dict, grid: dict, template=None, template_roi=None,
                     threads: int | None = None):
    """Preprocess one raw scan; returns ``(data, transform_or_None, qc_dict)``."""
    data, affine = load_volume(image_path)
    out_affine, out_shape = np.asarray(grid["affine"]), tuple(grid["shape"])
    qc = {"file": image_path, "registered": bool(pre["register"])}
    if pre["register"]:
        reg = pre["registration"]
        result = register_affine(
            template[0], template[1], data, affine,
            histogram_bins=reg["histogram_bins"], sampling_fraction=reg["sampling_fraction"],
            shrink_factors=tuple(reg["shrink_factors"]), smoothing_sigmas_vox=tuple(reg["smoothing_sigmas_vox"]),
            iterations=reg["iterations"], learning_rate=reg["learning_rate"], seed=reg["seed"], threads=threads,
        )
        out = resample_to_grid(data, affine, result.transform, out_affine, out_shape, order=1,
                               default_value=float(data.min()))
        transform = result.transform
        qc.update(metric_mattes_mi=result.metric, iterations=result.iterations,
                  stop_condition=result.stop_condition)
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
        qc["correlation_to_template"] = corr
        if pre["register"]:  # without registration the "template" is just the first training volume
            qc["qc_pass"] = bool(corr >= pre["registration"]["qc_min_correlation"])
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
