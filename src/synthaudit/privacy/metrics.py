"""Numbers that judge a re-identification privacy filter, in plain numpy.

Why these and why here: a privacy filter is a siamese network that tells whether two
scans show the same patient. Packhäuser et al. ("Is medical chest X-ray data
anonymous?") judge it twice: as a *verification* model (pairs, AUC with a bootstrap
interval and threshold metrics) and as a *retrieval* model (rank a gallery for every
query: P@1, R-precision, mAP@R after Musgrave et al.). Koeken et al. ("Sensitivity,
specificity and consistency") add a third axis: filters trained with different seeds
should flag the same synthetic volumes and attribute them to the same patient.
Everything is numpy only so that the workflow's report rules need no ML stack.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..relict.evaluate import average_ranks as _average_ranks

__all__ = ["roc_auc", "roc_curve", "verification_metrics", "retrieval_metrics", "agreement"]


# --------------------------------------------------------------------------- checks

def _scores_labels(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """1-D finite float scores and bool labels of the same, non-zero length."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels)
    if s.ndim != 1 or y.ndim != 1:
        raise ValueError(f"scores and labels must be 1-D, got shapes {s.shape} and {y.shape}")
    if s.shape != y.shape:
        raise ValueError(f"scores and labels differ in length: {s.size} scores, {y.size} labels")
    if s.size == 0:
        raise ValueError("scores and labels are empty")
    if np.isnan(s).any():
        raise ValueError(f"scores contain NaN ({int(np.isnan(s).sum())} of {s.size})")
    if y.dtype != bool:
        if y.dtype.kind not in "iuf" or not np.isin(y, (0, 1)).all():
            raise ValueError("labels must be bool or 0/1")
        y = y.astype(bool)
    return s, y


def _auc(s: np.ndarray, y: np.ndarray) -> float:
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    u = _average_ranks(s)[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


# ----------------------------------------------------------------------- verification

def roc_auc(scores, labels) -> float:
    """Area under the ROC curve as the Mann-Whitney U statistic.

    AUC = P(score of a positive > score of a negative), a tie counting 1/2 (average
    ranks, O(n log n)). Higher scores mean "more likely positive" (same patient).

    Raises:
        ValueError: on empty, mismatched or NaN input, or when only one class is present.
    """
    s, y = _scores_labels(scores, labels)
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        raise ValueError(f"AUC needs both classes, got {n_pos} positive and {y.size - n_pos} negative labels")
    return _auc(s, y)


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """False- and true-positive rates at every distinct score used as threshold.

    A sample is called positive when its score is >= the threshold. Thresholds are
    ``+inf`` followed by the distinct scores in descending order, so the curve starts
    at (0, 0) and ends at (1, 1); its trapezoid area equals :func:`roc_auc` (ties
    give diagonal segments, i.e. count 1/2).

    Returns:
        ``fpr, tpr, thresholds``, each of length (number of distinct scores + 1).
    """
    s, y = _scores_labels(scores, labels)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"a ROC curve needs both classes, got {n_pos} positive and {n_neg} negative labels")
    order = np.argsort(-s, kind="stable")
    s_sorted = s[order]
    y_sorted = y[order]
    # last index of each run of equal scores: all tied samples switch together
    last = np.flatnonzero(np.r_[s_sorted[1:] != s_sorted[:-1], True])
    tps = np.cumsum(y_sorted)[last]
    fps = (last + 1) - tps
    fpr = np.r_[0.0, fps / n_neg]
    tpr = np.r_[0.0, tps / n_pos]
    thresholds = np.r_[np.inf, s_sorted[last]]
    return fpr, tpr, thresholds


def _weighted_auc(codes: np.ndarray, n_codes: int, y: np.ndarray, w: np.ndarray) -> float:
    """Mann-Whitney AUC with pair weights (ties count one half): ``codes`` are the ranks of the
    scores among their distinct values (``np.unique(s, return_inverse=True)``, computed once)."""
    wp = np.bincount(codes, weights=w * y, minlength=n_codes)
    wn = np.bincount(codes, weights=w * ~y, minlength=n_codes)
    below = np.cumsum(wn) - wn
    return float(np.sum(wp * (below + 0.5 * wn)) / (wp.sum() * wn.sum()))


def _patient_bootstrap(s: np.ndarray, y: np.ndarray, pair_patients, n_bootstrap: int, seed: int
                       ) -> tuple[np.ndarray, int, int]:
    """AUCs of ``n_bootstrap`` cluster resamples: the patients are drawn with replacement and a pair
    (a, b) enters with weight m_a m_b, the number of times its two patients were drawn (the
    two-way cluster bootstrap for pairs; a same-patient pair weighs m_a^2).

    Why: pairs of held-out scans share scans and patients, so resampling pairs treats
    H(H - 1)/2 dependent pairs as independent and gives too narrow an interval when there are
    few patients. Returns the AUCs, the resamples skipped (one class missing) and the
    number of patients."""
    a, b = (np.asarray(x).astype(str) for x in pair_patients)
    if a.shape != s.shape or b.shape != s.shape:
        raise ValueError(f"pair_patients need one patient per pair and side ({s.size} pairs), "
                         f"got {a.shape} and {b.shape}")
    names, idx = np.unique(np.concatenate([a, b]), return_inverse=True)
    ia, ib = idx[:s.size], idx[s.size:]
    uniq, codes = np.unique(s, return_inverse=True)
    rng = np.random.default_rng(seed)
    n_p = len(names)
    aucs = np.empty(int(n_bootstrap))
    skipped, k = 0, 0
    max_skips = 100 * int(n_bootstrap) + 10_000
    while k < n_bootstrap:
        m = np.bincount(rng.integers(0, n_p, n_p), minlength=n_p).astype(float)
        w = m[ia] * m[ib]
        if not (w * y).any() or not (w * ~y).any():
            skipped += 1
            if skipped > max_skips:
                raise ValueError(f"patient resamples kept missing a class ({skipped} skipped): "
                                 f"too few patients ({n_p}) with two scans")
            continue
        aucs[k] = _weighted_auc(codes, len(uniq), y, w)
        k += 1
    return aucs, skipped, n_p


def verification_metrics(scores, labels, threshold: float = 0.5, n_bootstrap: int = 1000, seed: int = 0,
                         level: float = 0.95, unit: str = "pair", pair_patients=None) -> dict:
    """AUC with a percentile-bootstrap interval and the confusion metrics at a threshold.

    ``unit="pair"``: pairs are resampled with replacement (``np.random.default_rng(seed)``),
    as Packhäuser et al. report their 10,000 bootstrap runs over test pairs.
    ``unit="patient"``: the patients are resampled (:func:`_patient_bootstrap`, needs
    ``pair_patients``: the two patient ids of every pair). A resample holding only one
    class has no AUC, so it is skipped and redrawn (counted in ``n_bootstrap_skipped``).
    A pair is predicted "same patient" when its score is >= ``threshold``.

    Returns:
        Dict with ``auc, auc_ci`` ([low, high], None when ``n_bootstrap == 0``),
        ``accuracy, specificity, recall, precision`` (None when nothing is predicted
        positive), ``f1`` (None when precision is undefined or precision + recall is
        0), ``threshold, n_positive, n_negative, n_bootstrap, n_bootstrap_skipped, bootstrap_unit``
        (and ``n_bootstrap_patients`` for ``unit="patient"``).
    """
    s, y = _scores_labels(scores, labels)
    auc = roc_auc(s, y)
    if not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be a non-negative integer, got {n_bootstrap!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    threshold = float(threshold)
    if math.isnan(threshold):
        raise ValueError("threshold is NaN")

    n = y.size
    n_pos = int(y.sum())
    n_neg = n - n_pos
    if unit not in ("pair", "patient"):
        raise ValueError(f"bootstrap unit must be 'pair' or 'patient', got {unit!r}")
    if unit == "patient" and pair_patients is None:
        raise ValueError("a patient-level bootstrap needs pair_patients (the two patients of every pair)")
    auc_ci = None
    skipped = 0
    n_patients = None
    if n_bootstrap > 0 and unit == "patient":
        aucs, skipped, n_patients = _patient_bootstrap(s, y, pair_patients, int(n_bootstrap), seed)
        alpha = (1.0 - level) / 2.0
        low, high = np.quantile(aucs, [alpha, 1.0 - alpha])
        auc_ci = [float(low), float(high)]
    elif n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        aucs = np.empty(int(n_bootstrap))
        # Both classes are present, so a redraw succeeds with positive probability;
        # the cap only guards against pathological, astronomically unlikely streaks.
        max_skips = 100 * int(n_bootstrap) + 10_000
        k = 0
        while k < n_bootstrap:
            idx = rng.integers(0, n, n)
            yb = y[idx]
            pos = int(yb.sum())
            if pos == 0 or pos == n:
                skipped += 1
                if skipped > max_skips:
                    raise ValueError(f"bootstrap resamples kept missing a class ({skipped} skipped); "
                                     f"too few positives ({n_pos}) or negatives ({n_neg})")
                continue
            aucs[k] = _auc(s[idx], yb)
            k += 1
        alpha = (1.0 - level) / 2.0
        low, high = np.quantile(aucs, [alpha, 1.0 - alpha])
        auc_ci = [float(low), float(high)]

    pred = s >= threshold
    tp = int((pred & y).sum())
    fp = int((pred & ~y).sum())
    tn = int((~pred & ~y).sum())
    fn = int((~pred & y).sum())
    recall = tp / (tp + fn)
    specificity = tn / (tn + fp)
    precision = tp / (tp + fp) if tp + fp > 0 else None
    if precision is None or precision + recall == 0:
        f1 = None
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {
        "auc": float(auc),
        "auc_ci": auc_ci,
        "accuracy": float((tp + tn) / n),
        "specificity": float(specificity),
        "recall": float(recall),
        "precision": None if precision is None else float(precision),
        "f1": None if f1 is None else float(f1),
        "threshold": threshold,
        "n_positive": n_pos,
        "n_negative": n_neg,
        "n_bootstrap": int(n_bootstrap),
        "n_bootstrap_skipped": int(skipped),
        "bootstrap_unit": unit,
        **({} if n_patients is None else {"n_bootstrap_patients": int(n_patients)}),
    }


# -------------------------------------------------------------------------- retrieval

def retrieval_metrics(distances, query_labels, gallery_labels, exclude=None) -> dict:
    """P@1, R-precision and mAP@R of ranking a gallery by distance for every query.

    Following Musgrave et al. ("A metric learning reality check"), for a query with
    R relevant (same patient, not excluded) gallery items, the gallery is ranked by
    ascending distance (stable: ties keep gallery order) and

    - precision_at_1: the first item is relevant;
    - r_precision: relevant items among the top R, divided by R;
    - map_at_r: ``(1/R) * sum_{i<=R} P(i) * rel(i)`` with P(i) the precision at i,
      which unlike R-precision rewards relevant items ranked first.

    Args:
        distances: (Q, G) distances, smaller = closer.
        query_labels: Q patient ids (any hashable).
        gallery_labels: G patient ids.
        exclude: optional (Q, G) bool mask of gallery items ignored for a query
            (e.g. the query itself when the gallery contains the queries).

    Returns:
        Dict with ``map_at_r, r_precision, precision_at_1`` (means over the queries
        used), ``n_queries`` (used) and ``n_skipped`` (queries with R == 0).
    """
    d = np.asarray(distances, dtype=float)
    if d.ndim != 2:
        raise ValueError(f"distances must be a (queries, gallery) matrix, got shape {d.shape}")
    n_q, n_g = d.shape
    if n_q == 0 or n_g == 0:
        raise ValueError(f"distances are empty (shape {d.shape})")
    if np.isnan(d).any():
        raise ValueError(f"distances contain NaN ({int(np.isnan(d).sum())} of {d.size})")
    q_labels = list(query_labels)
    g_labels = list(gallery_labels)
    if len(q_labels) != n_q:
        raise ValueError(f"{len(q_labels)} query labels for {n_q} rows of distances")
    if len(g_labels) != n_g:
        raise ValueError(f"{len(g_labels)} gallery labels for {n_g} columns of distances")
    if exclude is None:
        ex = np.zeros((n_q, n_g), dtype=bool)
    else:
        ex = np.asarray(exclude)
        if ex.shape != d.shape:
            raise ValueError(f"exclude has shape {ex.shape}, distances {d.shape}")
        if ex.dtype != bool:
            if ex.dtype.kind not in "iuf" or not np.isin(ex, (0, 1)).all():
                raise ValueError("exclude must be a bool (or 0/1) mask")
            ex = ex.astype(bool)

    codes: dict = {}
    qc = np.array([codes.setdefault(lab, len(codes)) for lab in q_labels], dtype=np.int64)
    gc = np.array([codes.setdefault(lab, len(codes)) for lab in g_labels], dtype=np.int64)
    relevant = qc[:, None] == gc[None, :]

    p1, rp, ap = [], [], []
    skipped = 0
    for q in range(n_q):
        keep = np.flatnonzero(~ex[q])
        rel = relevant[q, keep[np.argsort(d[q, keep], kind="stable")]]
        r = int(rel.sum())
        if r == 0:
            skipped += 1
            continue
        top = rel[:r]
        precision_at_i = np.cumsum(top) / np.arange(1, r + 1)
        p1.append(float(top[0]))
        rp.append(top.sum() / r)
        ap.append(float((precision_at_i * top).sum() / r))
    if not p1:
        raise ValueError(f"no query has a relevant gallery item (all {n_q} queries have R == 0)")
    return {
        "map_at_r": float(np.mean(ap)),
        "r_precision": float(np.mean(rp)),
        "precision_at_1": float(np.mean(p1)),
        "n_queries": len(p1),
        "n_skipped": skipped,
    }


# ------------------------------------------------------------------------ consistency

def agreement(flags, attributions) -> dict:
    """How far N privacy filters agree on each synthetic volume (Koeken et al., Fig. 2).

    A filter that flags a volume for one seed but not another is a coin toss, not a
    privacy guarantee; so is one that blames a different training patient each time.

    Args:
        flags: (N, S) bool, filter i flagged synthetic volume s.
        attributions: (N, S) patient ids, the training patient filter i matches s to.

    Returns:
        Dict with ``n_filters, n_volumes``; per volume ``decision_agreement`` (the size
        of the larger of flagged / not flagged, ceil(N/2)..N) and
        ``attribution_agreement`` (count of the most frequent patient id, 1..N); their
        histograms (every key present, int keys); ``unanimous_fraction,
        unanimous_flagged, unanimous_accepted, attribution_unanimous_fraction,
        attribution_none_agree`` (volumes where no two filters name the same patient,
        0 for N == 1), ``flag_rate_mean`` and ``flag_rate_per_filter``.
    """
    f = np.asarray(flags)
    a = np.asarray(attributions, dtype=object)
    if f.ndim != 2:
        raise ValueError(f"flags must be a (filters, volumes) matrix, got shape {f.shape}")
    if a.shape != f.shape:
        raise ValueError(f"flags have shape {f.shape} but attributions {a.shape}")
    n, s = f.shape
    if n == 0 or s == 0:
        raise ValueError(f"need at least one filter and one volume, got shape {f.shape}")
    if f.dtype != bool:
        if f.dtype.kind not in "iuf" or not np.isin(f, (0, 1)).all():
            raise ValueError("flags must be bool (or 0/1)")
        f = f.astype(bool)

    n_flagged = f.sum(axis=0)
    decision = np.maximum(n_flagged, n - n_flagged).astype(int)
    attribution = np.array([max(Counter(a[:, j].tolist()).values()) for j in range(s)], dtype=int)
    low = (n + 1) // 2  # ceil(N / 2)
    rates = f.mean(axis=1)
    return {
        "n_filters": int(n),
        "n_volumes": int(s),
        "decision_agreement": [int(v) for v in decision],
        "attribution_agreement": [int(v) for v in attribution],
        "decision_histogram": {k: int((decision == k).sum()) for k in range(low, n + 1)},
        "attribution_histogram": {k: int((attribution == k).sum()) for k in range(1, n + 1)},
        "unanimous_fraction": float((decision == n).mean()),
        "unanimous_flagged": int((n_flagged == n).sum()),
        "unanimous_accepted": int((n_flagged == 0).sum()),
        "attribution_unanimous_fraction": float((attribution == n).mean()),
        "attribution_none_agree": int((attribution == 1).sum()) if n > 1 else 0,
        "flag_rate_mean": float(rates.mean()),
        "flag_rate_per_filter": [float(v) for v in rates],
    }
