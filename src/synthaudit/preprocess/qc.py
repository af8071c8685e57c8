"""Registration quality control: numbers (correlation with the registration's own target,
same-patient consistency) and a picture (montage).

Why both: Mattes MI values are hard to read and not comparable between volumes, so a
Pearson correlation with what each scan was registered to (the template, or with
``registration.target: reference`` the dataset's reference scan) tells how well it landed;
the threshold comes from the dataset's own scans (an outlier rule), because a fixed value
fits one kind of scan: real head CTs registered right to a reference scan correlated
below 0.60 with the MNI template and all 32 were flagged (issue 43). A montage with the
target's outline overlaid shows at a glance which scans failed.
"""

from __future__ import annotations

import math
import os

import nibabel as nib
import numpy as np

from synthaudit.io import atomic_path, spacing_from_affine

# Size of one montage panel (inches) and resolution; with 60 volumes at 6 columns
# this keeps an MNI-shaped montage near 800 x 2,900 pixels. The minimum width leaves
# room for the title when there are only one or two volumes.
_PANEL_IN = 1.8
_MIN_WIDTH_IN = 4.0
_DPI = 72
_CONTOUR_COLOUR = "orangered"


def masked_correlation(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Pearson correlation between the voxels of ``a`` and ``b`` (inside ``mask``).

    Args:
        a: Volume, e.g. a registered scan.
        b: Volume of the same shape, e.g. the template.
        mask: Optional boolean array of the same shape; only voxels inside it count
            (e.g. the template's head, so that the background does not inflate the
            value).

    Returns:
        The correlation in [-1, 1], or NaN when either volume is constant inside the
        mask (e.g. an empty scan after a failed registration). NaN compares False
        with any threshold, so test ``not corr >= threshold`` to flag it.

    Raises:
        ValueError: If shapes differ or the mask holds fewer than two voxels.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != a.shape:
            raise ValueError(f"mask shape {mask.shape} differs from volume shape {a.shape}")
        a, b = a[mask], b[mask]
    a, b = a.ravel(), b.ravel()
    if a.size < 2:
        raise ValueError(f"correlation needs at least two voxels, the mask holds {a.size}")
    a = a - a.mean()
    b = b - b.mean()
    denom = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    if denom == 0.0:
        return float("nan")
    return float(np.dot(a, b) / denom)


def qc_note(vmin: float, vmax: float, template_constant: bool) -> str:
    """Why a scan's correlation with the template is undefined, for the QC table ('' when it is
    defined). A constant volume (every voxel equal: an empty scan, or an empty result of a
    failed registration) correlates with nothing, so :func:`masked_correlation` returns NaN
    (written NA); without registration the "template" is the first training volume, which can
    itself be constant. Saying so keeps an NA from reading as a bug or as a failed scan."""
    notes = []
    if vmin == vmax:
        notes.append(f"constant volume (every voxel {vmin:g}): no correlation")
    if template_constant:
        notes.append("the template (grid reference) is constant: no correlation")
    return "; ".join(notes)


def montage_png(
    path: str | os.PathLike,
    volumes: list[tuple[str, np.ndarray]],
    template: np.ndarray,
    *,
    ncols: int = 6,
    title: str | None = None,
    affine: np.ndarray | None = None,
    max_volumes: int = 60,
) -> None:
    """Write a PNG montage of registered volumes with the template outline overlaid.

    Each volume gets a mid-axial panel (anterior up) above a mid-coronal panel
    (superior up), both in radiological convention (the patient's left on the
    viewer's right), in grey scaled to the volume's 1st-99th percentiles. The
    template's outline (its Otsu threshold contour) is drawn on top, so a
    misregistered scan shows as anatomy that leaves the outline.

    Args:
        path: Output PNG, written atomically.
        volumes: ``(id, volume)`` pairs, all on the template grid.
        template: The template volume (same shape as every volume).
        ncols: Volumes per montage row.
        title: Optional first title line; the display convention is always added.
        affine: The grid's 4x4 RAS affine. ``None`` assumes an axis-aligned RAS grid
            (as made by :func:`synthaudit.preprocess.register.reference_grid`);
            otherwise the arrays are reoriented to the closest RAS axes first.
        max_volumes: At most this many volumes are drawn (the first ones); the title
            says how many were left out, so the figure stays readable and small.

    Raises:
        ValueError: If ``volumes`` is empty or a volume's shape differs from the
            template's.
    """
    if not volumes:
        raise ValueError("montage_png needs at least one volume")
    template = np.asarray(template, dtype=np.float32)
    for vol_id, vol in volumes:
        if np.shape(vol) != template.shape:
            raise ValueError(f"{vol_id}: shape {np.shape(vol)} differs from the template's {template.shape}")
    if ncols < 1 or max_volumes < 1:
        raise ValueError(f"ncols and max_volumes must be >= 1, got {ncols} and {max_volumes}")

    shown = volumes[:max_volumes]
    spacing = np.ones(3)
    if affine is not None:
        template, spacing = _to_ras(template, affine)
    threshold = _otsu_threshold(template)
    nx, ny, nz = template.shape
    cols = min(ncols, len(shown))
    rows = math.ceil(len(shown) / cols)
    axial_h = ny * spacing[1] / (nx * spacing[0])
    coronal_h = nz * spacing[2] / (nx * spacing[0])

    from matplotlib.figure import Figure  # here: ~0.6 s to import, and only the montage draws

    fig = Figure(
        figsize=(max(cols * _PANEL_IN, _MIN_WIDTH_IN), rows * (axial_h + coronal_h) * _PANEL_IN + 0.8),
        layout="constrained",
    )
    axes = fig.subplots(
        2 * rows, cols, squeeze=False, gridspec_kw={"height_ratios": [axial_h, coronal_h] * rows}
    )
    for ax in axes.ravel():
        ax.set_axis_off()
    template_slices = _mid_slices(template)
    for n, (vol_id, vol) in enumerate(shown):
        vol = np.asarray(vol, dtype=np.float32)
        if affine is not None:
            vol, _ = _to_ras(vol, affine)
        vmin, vmax = np.percentile(vol, [1, 99])
        row, col = 2 * (n // cols), n % cols
        for ax, image, outline, aspect in zip(
            (axes[row, col], axes[row + 1, col]),
            _mid_slices(vol),
            template_slices,
            (spacing[1] / spacing[0], spacing[2] / spacing[0]),
        ):
            ax.imshow(
                image, cmap="gray", vmin=vmin, vmax=vmax, origin="lower", aspect=aspect, interpolation="nearest"
            )
            if outline.min() < threshold < outline.max():
                # Without X/Y, contour puts outline[r, c] at (c, r): the same pixel
                # centres as imshow(origin="lower").
                ax.contour(outline, levels=[threshold], colors=_CONTOUR_COLOUR, linewidths=0.8)
        # a constant panel is one flat grey: say why, rather than leave it to look like a display fault
        axes[row, col].set_title(f"{vol_id} (constant)" if vol.min() == vol.max() else vol_id, fontsize=7)

    lines = [title] if title else []
    lines += [
        "axial (anterior up) over coronal (superior up)",
        f"radiological: patient's left on the right; {_CONTOUR_COLOUR}: template outline",
    ]
    if len(volumes) > len(shown):
        lines.append(f"showing the first {len(shown)} of {len(volumes)} volumes")
    fig.suptitle("\n".join(lines), fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=_DPI)


def _mid_slices(vol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mid-axial and mid-coronal slices of a RAS-ordered volume, ready for ``imshow``.

    Rows run from inferior/posterior (drawn at the bottom with ``origin="lower"``) and
    the x axis is reversed so that the patient's right (+x) is on the viewer's left.
    """
    nx, ny, nz = vol.shape
    axial = vol[::-1, :, nz // 2].T
    coronal = vol[::-1, ny // 2, :].T
    return axial, coronal


def _to_ras(vol: np.ndarray, affine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flip/permute array axes to the closest RAS orientation; return it and its spacing."""
    ornt = nib.orientations.io_orientation(affine)  # input axis -> (RAS axis, flip)
    spacing = spacing_from_affine(affine)
    return nib.orientations.apply_orientation(vol, ornt), spacing[ornt[:, 0].astype(int).argsort()]


def _otsu_threshold(vol: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold: the level that best splits the intensities into two classes.

    Used to outline the template whatever its intensity scale (T1 or CT-like,
    windowed or not), without a per-template parameter. A constant volume has no two
    classes: its value is returned (so no outline is drawn: nothing lies on either side).
    """
    lo, hi = float(np.min(vol)), float(np.max(vol))
    if lo == hi:
        return lo
    hist, edges = np.histogram(vol, bins=bins)
    centres = (edges[:-1] + edges[1:]) / 2
    weight_low = np.cumsum(hist)
    weight_high = weight_low[-1] - weight_low
    mass_low = np.cumsum(hist * centres)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_low = mass_low / weight_low
        mean_high = (mass_low[-1] - mass_low) / weight_high
        between = weight_low * weight_high * (mean_low - mean_high) ** 2
    return float(centres[np.nanargmax(between[:-1])])


# ---- same-patient consistency (issue 29): what replica detection needs of registration ----

# Block size of the copies the consistency check compares: MAE at about 4 mm still
# separates two scans of one patient from those of other patients (a 1-2 mm registration
# error at the head's edges moves it), and 4 mm blocks keep hundreds of scans in memory
# (45 x 55 x 46 float32 voxels each on the MNI box) and all their pairs within a minute.
CONSISTENCY_BLOCK_MM = 4.0


def block_average(vol: np.ndarray, spacing_mm, block_mm: float = CONSISTENCY_BLOCK_MM) -> np.ndarray:
    """Average ``vol`` over blocks of about ``block_mm`` (never finer than its voxels).

    Edge voxels that do not fill a whole block are dropped; every volume of a dataset is
    on the same grid, so they are dropped alike.
    """
    vol = np.asarray(vol, dtype=np.float32)
    factors = [max(1, int(round(block_mm / float(s)))) for s in spacing_mm]
    shape = [n // f for n, f in zip(vol.shape, factors)]
    if min(shape) < 1:
        return vol
    cropped = vol[: shape[0] * factors[0], : shape[1] * factors[1], : shape[2] * factors[2]]
    return cropped.reshape(shape[0], factors[0], shape[1], factors[1], shape[2], factors[2]).mean(axis=(1, 3, 5))


def patient_consistency(volumes: list[np.ndarray], patients: list[str]) -> list[dict]:
    """How well each scan's registration kept its patient: MAE to its own patient's closest
    other scan against MAE to the closest scan of another patient.

    Why: a replica and its source are registered independently, so whatever registration
    fails to undo (a head pose, above all) becomes distance between them, and RELICT's
    ratio loses the copy. Two scans of one patient are the measurable stand-in: after a
    consistent registration they are each other's nearest scan, as they were before it.
    The correlation to the template cannot see this: every posed scan of issue 29 passed
    it (0.73-0.81) while only 18 of 32 kept their own patient nearest.

    Args:
        volumes: Registered volumes on one grid (e.g. :func:`block_average` copies).
        patients: Patient id of each volume.

    Returns:
        One dict per volume: ``same_patient_mae`` (to the closest other scan of the same
        patient; None without one), ``other_patient_mae`` (to the closest scan of another
        patient; None without one), ``consistency_ratio`` (their quotient: below 1 when the
        patient's own scan is closer) and ``same_patient_nearest`` (the closest other scan
        is the same patient's; None when the patient has one scan or there is no other
        patient).
    """
    if len(volumes) != len(patients):
        raise ValueError(f"{len(volumes)} volumes but {len(patients)} patient ids")
    n = len(volumes)
    if n and any(np.shape(v) != np.shape(volumes[0]) for v in volumes):
        raise ValueError("patient_consistency needs every volume on one grid (one shape)")
    flat = np.stack([np.asarray(v, dtype=np.float32).ravel() for v in volumes]) if n else np.zeros((0, 0))
    dist = np.full((n, n), np.inf)
    for i in range(n - 1):  # one row of pairs at a time: memory stays at two volumes' worth per row
        d = np.abs(flat[i + 1:] - flat[i]).mean(axis=1, dtype=np.float64)
        dist[i, i + 1:] = d
        dist[i + 1:, i] = d
    who = np.asarray(patients, dtype=object)
    rows = []
    for i in range(n):
        same = (who == who[i]) & (np.arange(n) != i)
        other = who != who[i]
        s = float(dist[i, same].min()) if same.any() else None
        o = float(dist[i, other].min()) if other.any() else None
        rows.append({
            "same_patient_mae": s,
            "other_patient_mae": o,
            "consistency_ratio": (s / o) if s is not None and o else None,
            "same_patient_nearest": (s < o) if s is not None and o is not None else None,
        })
    return rows


# Columns the QC table gains from add_consistency and the registration's own account
# (pipeline.registration_qc), after the correlation columns.
CONSISTENCY_COLUMNS = ["patient_id", "same_patient_mae", "other_patient_mae", "consistency_ratio",
                       "same_patient_nearest"]
CONVERGENCE_COLUMNS = ["converged", "iterations", "max_iterations", "levels_at_cap", "final_step_mm"]


def add_consistency(rows: list[dict], volumes: list[np.ndarray], patients: list[str], spacing_mm) -> None:
    """Add :func:`patient_consistency` (on :func:`block_average` copies) and the patient id to
    each QC row, in place; ``rows``, ``volumes`` and ``patients`` in the same order."""
    if not len(rows) == len(volumes) == len(patients):
        raise ValueError(f"{len(rows)} QC rows, {len(volumes)} volumes and {len(patients)} patient ids")
    coarse = [block_average(v, spacing_mm) for v in volumes]
    for row, patient, figures in zip(rows, patients, patient_consistency(coarse, patients)):
        row["patient_id"] = patient
        row.update(figures)


def registration_warnings(rows: list[dict], threshold: dict | None = None) -> list[str]:
    """The QC table's registration findings as log lines: scans whose correlation with the
    registration's target is an outlier of the dataset (``threshold``, :func:`add_target_qc`),
    scans whose closest other scan is another patient's (the patient signal replica detection
    needs is lost or weak there), and registrations that stopped at the iteration cap."""
    out = []
    if threshold is not None and threshold.get("threshold") is not None:
        low = [r["id"] for r in rows if r.get("registered") and r.get("id") != threshold.get("target_id")
               and not _at_least(r.get("correlation_to_target"), threshold["threshold"])]
        if low:
            how = ("registration.qc_min_correlation" if threshold["rule"] == "min_correlation" else
                   f"the dataset's median {threshold['median']:.3f} - {threshold['outlier_mads']:g} x its robust SD "
                   f"{threshold['robust_sd']:.3f}")
            out.append(f"QC: {len(low)} of {threshold['n']} registered scan(s) correlate with the {threshold['target']} "
                       f"below {threshold['threshold']:.3f} ({how}): registration may have failed (qc_reason in the "
                       f"table, the montage): {low}")
    lost = [r["id"] for r in rows if r.get("same_patient_nearest") is False]
    checked = [r for r in rows if r.get("same_patient_nearest") is not None]
    if lost:
        out.append(f"QC: for {len(lost)} of {len(checked)} scans with a second scan of their patient, the closest "
                   f"other scan is another patient's (registration may not undo the head pose consistently; "
                   f"same_patient_mae vs other_patient_mae in the table): {lost}")
    capped = [r["id"] for r in rows if r.get("converged") is False]
    if capped:
        out.append(f"QC: {len(capped)} registration(s) stopped at the iteration cap before converging "
                   f"(registration.iterations; levels_at_cap in the table): {capped}")
    return out


# The outlier rule of the correlation QC: a scan is flagged when its correlation with the
# registration's target lies more than ``outlier_mads`` robust SDs (1.4826 x the median absolute
# deviation) below the dataset's median. The SD is floored at CORRELATION_SD_FLOOR so that a
# dataset of near-identical scans (every correlation 0.99 +- 0.001) does not flag a 0.98; with
# fewer than MIN_SCANS_TO_CALIBRATE scans there is no spread to calibrate on and the rule is off.
CORRELATION_SD_FLOOR = 0.02
MIN_SCANS_TO_CALIBRATE = 5


def correlation_threshold(correlations, outlier_mads: float, min_correlation: float | None = None) -> dict:
    """The dataset's correlation threshold from its own scans' correlations with the target.

    Returns ``{"threshold", "median", "robust_sd", "n", "rule"}``: ``threshold`` is the larger of
    ``median - outlier_mads * robust_sd`` and ``min_correlation`` (an optional absolute floor);
    None when neither applies (too few scans and no floor). NaN correlations (a constant scan)
    are left out of the calibration; they fail any threshold.
    """
    values = np.asarray([c for c in correlations if c is not None and np.isfinite(c)], dtype=np.float64)
    out = {"n": int(values.size), "median": None, "robust_sd": None, "outlier_mads": float(outlier_mads),
           "threshold": None, "rule": "none"}
    if values.size >= MIN_SCANS_TO_CALIBRATE:
        median = float(np.median(values))
        robust_sd = max(1.4826 * float(np.median(np.abs(values - median))), CORRELATION_SD_FLOOR)
        out.update(median=median, robust_sd=robust_sd, threshold=median - outlier_mads * robust_sd,
                   rule=f"median - {outlier_mads:g} robust SD")
    if min_correlation is not None and (out["threshold"] is None or min_correlation > out["threshold"]):
        out.update(threshold=float(min_correlation), rule="min_correlation")
    return out


def add_target_qc(rows: list[dict], correlations: list[float | None], target: str, outlier_mads: float,
                  min_correlation: float | None = None, target_id: str | None = None) -> dict:
    """Add ``correlation_to_target`` and the verdict (``qc_pass``, ``qc_reason``) to each QC row,
    in place, and return the threshold (:func:`correlation_threshold`).

    A registered scan fails when its correlation with the registration's target is below the
    dataset's threshold, or when its closest other scan is another patient's although its
    patient has a second scan (``same_patient_nearest`` False, from :func:`add_consistency`:
    what replica detection needs, so the primary check when patients have several scans).
    ``target_id``: the scan that is the target (the reference scan), left out of the
    calibration and never flagged by correlation. Unregistered scans get no verdict.
    """
    if len(rows) != len(correlations):
        raise ValueError(f"{len(rows)} QC rows but {len(correlations)} correlations")
    calibrating = [c for r, c in zip(rows, correlations) if r.get("registered") and r.get("id") != target_id]
    threshold = correlation_threshold(calibrating, outlier_mads, min_correlation)
    threshold["target"], threshold["target_id"] = target, target_id
    for row, corr in zip(rows, correlations):
        row["correlation_to_target"] = corr
        if not row.get("registered"):
            continue
        reasons = []
        if row.get("id") != target_id and threshold["threshold"] is not None and not _at_least(
                corr, threshold["threshold"]):
            reasons.append(f"correlation with the {target} {_fmt(corr)} < {threshold['threshold']:.3f}")
        if row.get("same_patient_nearest") is False:
            reasons.append("closest other scan is another patient's")
        row["qc_pass"] = not reasons
        row["qc_reason"] = "; ".join(reasons) if reasons else ("the registration target" if row.get("id") == target_id
                                                               else "")
    return threshold


def _at_least(corr, threshold: float) -> bool:
    """``corr >= threshold``; a missing or NaN correlation (a constant scan) is not."""
    return corr is not None and corr >= threshold


def _fmt(x) -> str:
    return "NA" if x is None or not np.isfinite(x) else f"{x:.3f}"
