"""How well an attack tells member patients from non-member patients: the AUC, the attacker's advantage
and the TPR at a fixed FPR, each from the patients' scores, with patient-bootstrap intervals; and the
closed-form power of the AUC's interval at a given size (docs/membership.md's power table).

Why patients: a patient with a baseline and a follow-up is one member, and its two scans are not two
independent trials. Every number here takes one score per patient (:func:`.attacks.patient_scores`); the
bootstrap resamples member and non-member patients separately (their counts fixed, as the audit's are).

Ties count half (the Mann-Whitney AUC), and a threshold calls every score at or above it, so that two
patients with equal scores are never split by the order they were listed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def auc(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """The probability that a member patient outscores a non-member one (ties 1/2): Mann-Whitney's U over
    the product of the counts, the area under the ROC curve."""
    return float(_comparisons(np.asarray(members, float), np.asarray(nonmembers, float)).mean())


def _comparisons(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    return (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])


def roc_counts(members: np.ndarray, nonmembers: np.ndarray, w_members: np.ndarray | None = None,
               w_nonmembers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """True and false positives (weighted counts; rows: weightings) of the threshold at each distinct score,
    highest first, after a first column of zeros (a threshold above every score)."""
    pos, neg = np.asarray(members, float), np.asarray(nonmembers, float)
    wp = np.ones((1, len(pos))) if w_members is None else np.atleast_2d(w_members).astype(float)
    wn = np.ones((1, len(neg))) if w_nonmembers is None else np.atleast_2d(w_nonmembers).astype(float)
    values = np.unique(np.concatenate([pos, neg]))[::-1]
    at = {v: k for k, v in enumerate(values.tolist())}
    one_hot = lambda x: np.eye(len(values))[[at[v] for v in x.tolist()]] if len(x) else np.zeros((0, len(values)))  # noqa: E731
    zeros = np.zeros((len(wp), 1))
    tp = np.concatenate([zeros, np.cumsum(wp @ one_hot(pos), axis=1)], axis=1)
    fp = np.concatenate([zeros, np.cumsum(wn @ one_hot(neg), axis=1)], axis=1)
    return tp, fp


def advantage(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """The attacker's advantage: the largest TPR - FPR over thresholds (Yeom et al.'s membership advantage at
    the best threshold; 0 for an attack no better than calling nobody)."""
    tp, fp = roc_counts(np.asarray(members, float), np.asarray(nonmembers, float))
    return float(np.max(tp[0] / len(members) - fp[0] / len(nonmembers)))


def tpr_at_fpr(members: Sequence[float], nonmembers: Sequence[float], fpr: float) -> dict:
    """The TPR of the threshold that calls the most members while calling at most ``fpr`` of the non-members,
    with the counts behind it. With n non-members, an FPR below 1 / n cannot be measured (one false call is
    already 1 / n): the answer then says so and is given at 1 / n, the smallest FPR that can."""
    pos, neg = np.asarray(members, float), np.asarray(nonmembers, float)
    allowed = math.floor(fpr * len(neg) + 1e-9)
    used = max(allowed, 1)
    tp, fp = roc_counts(pos, neg)
    k = int(np.flatnonzero(fp[0] <= used)[-1])
    return {"fpr": fpr, "measurable": allowed >= 1, "fpr_used": used / len(neg), "tpr": float(tp[0, k] / len(pos)),
            "true_positives": int(tp[0, k]), "members": len(pos), "false_positives": int(fp[0, k]),
            "nonmembers": len(neg)}


def bootstrap(members: Sequence[float], nonmembers: Sequence[float], n: int, seed: int, level: float,
              fpr_grid: np.ndarray | None = None) -> dict:
    """Percentile intervals of the AUC and the advantage over ``n`` patient-bootstrap replicates (members and
    non-members resampled separately, with replacement), and the pointwise band of the ROC curve's TPR on
    ``fpr_grid`` (the figure's band)."""
    pos, neg = np.asarray(members, float), np.asarray(nonmembers, float)
    rng = np.random.default_rng(seed)
    wp = rng.multinomial(len(pos), np.full(len(pos), 1 / len(pos)), size=n).astype(float)
    wn = rng.multinomial(len(neg), np.full(len(neg), 1 / len(neg)), size=n).astype(float)
    aucs = np.einsum("bi,ij,bj->b", wp, _comparisons(pos, neg), wn) / (len(pos) * len(neg))
    tp, fp = roc_counts(pos, neg, wp, wn)
    tpr, fpr = tp / len(pos), fp / len(neg)
    advantages = np.max(tpr - fpr, axis=1)
    q = [(1 - level) / 2, (1 + level) / 2]
    out = {"auc_ci": [float(x) for x in np.quantile(aucs, q)],
           "advantage_ci": [float(x) for x in np.quantile(advantages, q)], "n": int(n), "level": float(level)}
    if fpr_grid is not None:
        grid = np.asarray(fpr_grid, float)
        # each replicate's TPR at the last threshold whose FPR is at or below the grid's (its rows' FPRs rise
        # with the threshold: the count at or below is numpy.searchsorted's "right" side, for every row at once)
        band = np.empty((len(tpr), len(grid)))
        for r in range(0, len(tpr), 256):  # 256 replicates at a time: their rows x thresholds x grid comparisons
            at = (fpr[r:r + 256, :, None] <= grid + 1e-12).sum(axis=1) - 1
            band[r:r + 256] = np.take_along_axis(tpr[r:r + 256], at, axis=1)
        out["band"] = {"fpr": grid.tolist(), "low": np.quantile(band, q[0], axis=0).tolist(),
                       "high": np.quantile(band, q[1], axis=0).tolist()}
    return out


def roc_curve(members: Sequence[float], nonmembers: Sequence[float]) -> tuple[list[float], list[float]]:
    """The ROC curve's points (FPR, TPR), from (0, 0) to (1, 1)."""
    tp, fp = roc_counts(np.asarray(members, float), np.asarray(nonmembers, float))
    return (fp[0] / len(nonmembers)).tolist(), (tp[0] / len(members)).tolist()


# ---------------------------------------------------------------------------------------------------------
# power: what a held-out set of a given size can show

def auc_standard_error(value: float, n_members: int, n_nonmembers: int) -> float:
    """Hanley and McNeil's (Radiology 1982) standard error of an AUC of ``value`` from these counts."""
    a = float(value)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_members - 1) * (q1 - a * a) + (n_nonmembers - 1) * (q2 - a * a)) / (n_members * n_nonmembers)
    return math.sqrt(max(var, 0.0))


def auc_power(value: float, n_members: int, n_nonmembers: int, level: float = 0.95) -> float:
    """The probability that the AUC's two-sided ``level`` interval lies above 0.5 when the attack's true AUC
    is ``value`` (normal approximation with Hanley and McNeil's standard error)."""
    from statistics import NormalDist

    if n_members < 1 or n_nonmembers < 1:
        return 0.0
    se = auc_standard_error(value, n_members, n_nonmembers)
    z = NormalDist().inv_cdf((1 + level) / 2)
    return float(NormalDist().cdf((value - 0.5) / se - z)) if se > 0 else float(value > 0.5)


def nonmembers_needed(value: float, n_members: int, level: float = 0.95, power: float = 0.8,
                      most: int = 100_000) -> int | None:
    """The fewest non-member (held-out) patients at which an attack of true AUC ``value`` gets an interval
    above 0.5 with probability ``power``; None where even ``most`` are not enough (too few members)."""
    if auc_power(value, n_members, most, level) < power:
        return None
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        if auc_power(value, n_members, mid, level) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo
