"""What registration_check.py reports about registered scans: the patient consistency of their distances,
the pose and pair residuals at points inside the head, and the registrations' own figures (time, QC,
convergence). Apart so that the check itself stays one readable page."""

from __future__ import annotations

import numpy as np

from synthaudit.preprocess.register import transform_points


def mae_matrix(vols: list[np.ndarray]) -> np.ndarray:
    n = len(vols)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            d[i, j] = d[j, i] = float(np.mean(np.abs(vols[i].astype(np.float64) - vols[j])))
    return d


def consistency(d: np.ndarray, patients: list[str], heads: list[str] | None = None) -> dict:
    """Same-patient MAE and how often the closest other scan is the same patient (also per real head)."""
    p = np.asarray(patients)
    same = p[:, None] == p[None, :]
    np.fill_diagonal(same, False)
    masked = d + np.diag(np.full(len(p), np.inf))
    nearest = masked.argmin(axis=1)
    same_mae = np.array([d[i][same[i]].min() for i in range(len(p))])
    other = np.where(same | np.eye(len(p), dtype=bool), np.inf, d).min(axis=1)
    return {"same_patient_mae_median": round(float(np.median(same_mae)), 4),
            "same_patient_mae_max": round(float(same_mae.max()), 4),
            "nearest_other_patient_mae_median": round(float(np.median(other)), 4),
            "closest_is_same_patient": round(float(np.mean(p[nearest] == p)), 4),
            "n_closest_is_same_patient": int(np.sum(p[nearest] == p)), "n_scans": int(len(p)),
            **({} if heads is None else {"closest_is_same_patient_by_head": {
                h: f"{int(np.sum((p[nearest] == p)[np.asarray(heads) == h]))}/{int(np.sum(np.asarray(heads) == h))}"
                for h in dict.fromkeys(heads)}})}


def qc_table_figure(vols: list[np.ndarray], patients: list[str], grid: dict):
    """What the workflow's QC table reports for the same scans (4 mm blocks,
    synthaudit.preprocess.qc.patient_consistency): the fraction whose closest other scan is their
    own patient's, to compare with the full-resolution figure above."""
    from synthaudit.preprocess.qc import block_average, patient_consistency

    rows = patient_consistency([block_average(v, grid["spacing_mm"]) for v in vols], patients)
    return round(float(np.mean([bool(r["same_patient_nearest"]) for r in rows])), 4)


def head_points(template_roi: np.ndarray, grid_affine: np.ndarray, step: int = 3) -> np.ndarray:
    """RAS points (every ``step``-th voxel) inside the template's head, where residuals are measured."""
    from synthaudit.preprocess.qc import _otsu_threshold

    head = template_roi > _otsu_threshold(template_roi)
    ijk = np.argwhere(head[::step, ::step, ::step]) * step
    return ijk @ grid_affine[:3, :3].T + grid_affine[:3, 3]


def residuals(scans: list[dict], tfm_posed: dict, tfm_unposed: dict, points: np.ndarray) -> dict:
    """Pose residual (posed registration through the true pose vs the unposed registration) and
    pair residual (the two posed scans of a patient, both mapped back to the cohort), in mm."""
    in_cohort = {}
    per_scan = []
    for s in scans:
        mapped = transform_points(s["_pose"], transform_points(tfm_posed[s["id"]], points))
        in_cohort[s["id"]] = mapped
        ref = transform_points(tfm_unposed[s["id"]], points)
        err = np.linalg.norm(mapped - ref, axis=1)
        per_scan.append((float(err.mean()), float(err.max())))
    pairs = {}
    for s in scans:
        pairs.setdefault(s["patient"], []).append(s["id"])
    pair_err = []
    for ids in pairs.values():
        if len(ids) == 2:
            e = np.linalg.norm(in_cohort[ids[0]] - in_cohort[ids[1]], axis=1)
            pair_err.append((float(e.mean()), float(e.max())))
    means, maxes = np.array(per_scan).T
    pmeans, pmaxes = np.array(pair_err).T
    return {"pose_residual_mm": {"mean_median": round(float(np.median(means)), 3),
                                 "mean_max": round(float(means.max()), 3),
                                 "max_median": round(float(np.median(maxes)), 3),
                                 "max_max": round(float(maxes.max()), 3)},
            "pair_residual_mm": {"mean_median": round(float(np.median(pmeans)), 3),
                                 "mean_max": round(float(pmeans.max()), 3),
                                 "max_max": round(float(pmaxes.max()), 3)}}


def registration_figures(results: list[dict]) -> dict:
    secs = np.array([r["seconds"] for r in results])
    qc = [r["qc"] for r in results]
    out = {"registration_s": {"median": round(float(np.median(secs)), 2), "max": round(float(secs.max()), 2),
                              "total": round(float(secs.sum()), 1)}}
    corr = [q.get("correlation_to_template") for q in qc if q.get("correlation_to_template") is not None]
    if corr:
        out["qc_correlation"] = [round(float(min(corr)), 3), round(float(max(corr)), 3)]
        # the dataset's outlier rule (synthaudit.preprocess.qc), here over the correlations with the template
        from synthaudit.config import default_of
        from synthaudit.preprocess.qc import correlation_threshold

        t = correlation_threshold(corr, default_of("datasets.*.preprocess.registration.qc_outlier_mads"))["threshold"]
        out["qc_pass"] = round(float(np.mean([t is None or c >= t for c in corr])), 3)
    if all("iterations" in q for q in qc):
        its = [q["iterations"] for q in qc]
        out["iterations"] = {"median": float(np.median(its)), "max": int(max(its))}
    if all("converged" in q for q in qc):
        out["converged"] = round(float(np.mean([bool(q["converged"]) for q in qc])), 3)
    stops = {}
    for q in qc:
        key = str(q.get("stop_condition", ""))[:60]
        stops[key] = stops.get(key, 0) + 1
    out["stop_conditions"] = stops
    return out
