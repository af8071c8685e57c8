"""From found transforms to the aligned measures' matrices, the alignment table's rows, and the RMSE the
coarse stage estimates for pairs it did not align."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .group import PairResult
from .preselect import CoarseErrors


def aligned_matrices(plain: dict[str, np.ndarray], candidates: np.ndarray,
                     pairs: list[list[PairResult]], spacing_mm: Sequence[float]) -> dict[str, np.ndarray]:
    """Plain MAE/RMSE matrices with each candidate pair replaced by its aligned value when lower.

    Returns ``{measure: values}`` for the measures in ``plain`` and, per measure,
    ``{measure}_transform``: the description of the transform behind each value
    (``identity`` where the plain value stands, empty where the pair was not searched).
    """
    out = {}
    for m, values in plain.items():
        v = np.array(values, np.float64, copy=True)
        desc = np.full(v.shape, "", dtype=object)
        for i, row in enumerate(pairs):
            for j, pr in zip(candidates[i], row):
                got = getattr(pr, m)
                if got < v[i, j]:
                    v[i, j] = got
                    desc[i, j] = pr.transform.describe(spacing_mm)
                else:
                    desc[i, j] = "identity"
        out[m] = v
        out[f"{m}_transform"] = desc.astype(str)
    return out


def alignment_columns(measures: Sequence[str]) -> list[str]:
    """Columns of alignment.tsv."""
    return ["synthetic_id", "candidate_rank", "training_id", "transform", "flip_axes", "rotation_axis", "angle_deg",
            "rotation_vector_deg", "shift_x_mm", "shift_y_mm", "shift_z_mm"] + [f"{m}_{k}" for m in measures for k in ("plain", "aligned")]


def alignment_rows(synthetic_ids: Sequence[str], training_ids: Sequence[str], candidates: np.ndarray,
                   pairs: list[list[PairResult]], plain: dict[str, np.ndarray], spacing_mm: Sequence[float]
                   ) -> list[dict]:
    """One row per searched pair (alignment.tsv): its transform and each measure plain and aligned."""
    rows = []
    for i, row in enumerate(pairs):
        for rank, (j, pr) in enumerate(zip(candidates[i], row), start=1):
            t = pr.transform
            r = {"synthetic_id": synthetic_ids[i], "candidate_rank": rank, "training_id": training_ids[j],
                 "transform": t.describe(spacing_mm), "flip_axes": "".join(map(str, t.flips)),
                 "rotation_axis": "any" if t.rotvec_deg is not None else (t.rotation_axis if t.angle_deg else ""),
                 "angle_deg": t.total_angle_deg if t.rotvec_deg is not None else t.angle_deg,
                 "rotation_vector_deg": ",".join(f"{a:.3f}" for a in t.rotvec_deg) if t.rotvec_deg is not None else "",
                 **{f"shift_{a}_mm": t.shift_vox[n] * spacing_mm[n] for n, a in enumerate("xyz")}}
            for m, values in plain.items():
                r[f"{m}_plain"], r[f"{m}_aligned"] = float(values[i, j]), float(getattr(pr, m))
            rows.append(r)
    return rows


def estimated_rmse(plain_rmse: np.ndarray, coarse: CoarseErrors, candidates: np.ndarray,
                   aligned_rmse: np.ndarray) -> np.ndarray:
    """Aligned RMSE matrix with the pairs not aligned at full resolution estimated from the
    block-mean search: ``RMSE^2 ~ RMSE^2_plain - (MSE_coarse_plain - MSE_coarse_aligned)``
    (see :class:`CoarseErrors`), clipped to [0, plain].

    Why: with n_closest > K the denominator of the ratio otherwise keeps plain distances,
    an upper bound of the aligned ones (conservative: the ratio is never above the exact
    one when its numerator is exact). The estimate is closer on average but not one-sided:
    a ratio built with it can exceed the exact one; its error is measured by the bench
    (``python -m synthaudit_bench.alignment --scale ncct``). ``aligned_rmse``: the matrix of
    :func:`aligned_matrices` (candidate pairs aligned, the rest plain); candidates keep it.
    NaN in ``coarse``: pair not searched, it keeps its plain value. ``coarse`` from
    :func:`preselect_gemm` (4 mm blocks at 1 mm) or, closer, :func:`coarse_aligned_mse` (2 mm).
    """
    plain = np.asarray(plain_rmse, np.float64)
    gain = np.nan_to_num(np.maximum(np.asarray(coarse.plain) - np.asarray(coarse.aligned), 0.0), nan=0.0)
    est = np.sqrt(np.clip(plain ** 2 - gain, 0.0, None))
    est = np.minimum(est, plain)
    rows = np.arange(candidates.shape[0])[:, None]
    est[rows, candidates] = np.asarray(aligned_rmse)[rows, candidates]
    return est
