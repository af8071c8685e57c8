"""Replica-detection performance against a rating (RELICT 2.7).

RELICT sweeps the ratio threshold in 0.01 steps over each measure's range, calls a
synthetic volume a replica when its ratio is at most the threshold, and reports the
balanced accuracy (mean of sensitivity and specificity: the rating is imbalanced,
45 of 50 replicas in the NCCT use case, so plain accuracy would reward calling
everything a replica). The AUC adds a threshold-free summary.
"""

from __future__ import annotations

import math

import numpy as np


def threshold_sweep(ratios: np.ndarray, is_replica: np.ndarray, step: float = 0.01) -> list[dict]:
    """Confusion counts and rates for every threshold on a regular grid.

    Thresholds run from ``floor(min / step) * step`` to ``ceil(max / step) * step``
    inclusive, so the sweep brackets all ratios: its first threshold flags at most the
    smallest ratios and its last flags every volume. They are integer multiples of
    ``step`` rounded to 10 decimals (no drift from repeated addition).

    Args:
        ratios: Distance ratios, one per synthetic volume.
        is_replica: Rating, True for replicas.
        step: Grid step (RELICT: 0.01).

    Returns:
        One dict per threshold with keys ``threshold, tp, fp, tn, fn, sensitivity,
        specificity, balanced_accuracy``; a rate whose class is absent from the
        rating is NaN, and so is the balanced accuracy then. Empty for no volumes.
    """
    ratios, labels = _check(ratios, is_replica)
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    if ratios.size == 0:
        return []
    # Rounding the quotients first keeps e.g. 0.29 / 0.01 = 28.999999999999996 from
    # adding a spurious threshold below the range.
    first = math.floor(round(ratios.min() / step, 9))
    last = math.ceil(round(ratios.max() / step, 9))
    thresholds = np.round(np.arange(first, last + 1) * step, 10)
    positives = np.sort(ratios[labels])
    negatives = np.sort(ratios[~labels])
    tp = np.searchsorted(positives, thresholds, side="right")
    fp = np.searchsorted(negatives, thresholds, side="right")
    fn = positives.size - tp
    tn = negatives.size - fp
    sensitivity = tp / positives.size if positives.size else np.full(thresholds.size, np.nan)
    specificity = tn / negatives.size if negatives.size else np.full(thresholds.size, np.nan)
    balanced = (sensitivity + specificity) / 2
    return [
        {"threshold": float(thresholds[k]), "tp": int(tp[k]), "fp": int(fp[k]), "tn": int(tn[k]),
         "fn": int(fn[k]), "sensitivity": float(sensitivity[k]), "specificity": float(specificity[k]),
         "balanced_accuracy": float(balanced[k])}
        for k in range(thresholds.size)
    ]


def optimal_threshold(rows: list[dict]) -> dict:
    """The sweep row with the highest balanced accuracy.

    Several thresholds often tie: between the largest replica ratio and the smallest
    non-replica ratio every grid point separates equally well. The middle row of the
    first (lowest-threshold) contiguous run of maximal rows is returned: the middle
    sits farthest from both edges of the gap, so the decision is robust to small
    shifts of the ratios (new data, another seed); the first run is the strictest
    criterion when separate ranges tie. NaN balanced accuracies are ignored.

    Args:
        rows: Output of :func:`threshold_sweep`.

    Returns:
        A copy of the chosen row.

    Raises:
        ValueError: If no row has a finite balanced accuracy (a class is absent).
    """
    balanced = np.array([r["balanced_accuracy"] for r in rows], dtype=np.float64)
    if not np.isfinite(balanced).any():
        raise ValueError("no threshold has a defined balanced accuracy (the rating lacks a class)")
    best = np.nanmax(balanced)
    # Equal counts give bitwise equal values, but equal rates from different counts
    # may differ in the last bit; they are the same accuracy.
    maximal = np.isclose(balanced, best, rtol=0, atol=1e-12)
    start = int(np.argmax(maximal))
    stop = start
    while stop + 1 < len(rows) and maximal[stop + 1]:
        stop += 1
    return dict(rows[(start + stop) // 2])


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank (scipy.stats.rankdata's 'average').

    Why not scipy: importing scipy.stats costs 0.6-1.3 s, most of an evaluation job."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])  # first index of each run of equal values
    ends = np.r_[starts[1:], xs.size]  # exclusive
    ranks = np.empty(x.size, dtype=float)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # mean of start+1 .. end
    return ranks


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve as the Mann-Whitney U statistic.

    AUC = P(score of a positive > score of a negative), ties counted 1/2; computed
    from average ranks in O(n log n). Higher scores mean "more likely positive", so
    for distance ratios pass ``-ratio``.

    Returns:
        The AUC in [0, 1]; NaN if either class is absent.
    """
    scores, labels = _check(scores, labels)
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = average_ranks(scores)  # a tie contributes 1/2 to U
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def best_balanced_accuracy(ratios: np.ndarray, is_replica: np.ndarray) -> float:
    """Balanced accuracy at the best threshold anywhere, not only on the sweep's grid.

    Why: RELICT's 0.01 grid suits ratios spread over [0, 1]. A measure whose ratios all sit
    below a few hundredths (cosine distance, a squared chord, on real anatomy: copies
    0.001-0.007, new patients from 0.006) has no grid threshold between its classes, so the
    grid's balanced accuracy understates what the measure separates. Thresholds here are
    every observed ratio (calling ratios at or below it) and one below all of them. NaN when
    the rating lacks a class.
    """
    ratios, labels = _check(ratios, is_replica)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    cuts = np.unique(ratios)
    tp = np.searchsorted(np.sort(ratios[labels]), cuts, side="right")
    fp = np.searchsorted(np.sort(ratios[~labels]), cuts, side="right")
    balanced = (tp / n_pos + (n_neg - fp) / n_neg) / 2
    return float(max(balanced.max(), 0.5))  # 0.5: the threshold below every ratio calls nothing


def evaluate_measure(ratios: np.ndarray, is_replica: np.ndarray, step: float = 0.01) -> dict:
    """Sweep, optimal threshold and AUC of one measure's ratios against a rating.

    Returns:
        Dict with ``threshold, balanced_accuracy, sensitivity, specificity`` (of the
        optimal row; NaN when the rating lacks a class), ``balanced_accuracy_any_threshold``
        (:func:`best_balanced_accuracy`: above the grid's when the grid is too coarse for
        this measure's ratios), ``auc``, ``n_synthetic,
        n_replicas, n_nonreplicas`` and ``sweep`` (the rows of
        :func:`threshold_sweep`).
    """
    ratios, labels = _check(ratios, is_replica)
    sweep = threshold_sweep(ratios, labels, step)
    n_replicas = int(labels.sum())
    result = {"threshold": math.nan, "balanced_accuracy": math.nan, "sensitivity": math.nan,
              "specificity": math.nan}
    if 0 < n_replicas < labels.size:
        best = optimal_threshold(sweep)
        result = {key: best[key] for key in result}
    result.update(balanced_accuracy_any_threshold=best_balanced_accuracy(ratios, labels),
                  auc=roc_auc(-ratios, labels), n_synthetic=int(labels.size), n_replicas=n_replicas,
                  n_nonreplicas=int(labels.size - n_replicas), sweep=sweep)
    return result


def calibrated_performance(called: np.ndarray, is_replica: np.ndarray, rate: float) -> dict:
    """Sensitivity, specificity and balanced accuracy of held-out-calibrated calls against a rating.

    The calls were made without the rating (synthaudit.relict.calibration), so unlike the
    rating-tuned threshold these numbers carry no optimism from tuning on the same volumes.
    A rate whose class is absent from the rating is None.
    """
    called, labels = np.asarray(called, bool), np.asarray(is_replica, bool)
    if called.shape != labels.shape:
        raise ValueError(f"{called.size} calls but {labels.size} labels")
    sensitivity = float(called[labels].mean()) if labels.any() else None
    specificity = float((~called[~labels]).mean()) if (~labels).any() else None
    balanced = (sensitivity + specificity) / 2 if sensitivity is not None and specificity is not None else None
    return {"rate": float(rate), "n_called": int(called.sum()), "sensitivity": sensitivity,
            "specificity": specificity, "balanced_accuracy": balanced}


def _check(values, labels) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(values, dtype=np.float64).ravel()
    labels = np.asarray(labels, dtype=bool).ravel()
    if values.shape != labels.shape:
        raise ValueError(f"{values.size} values but {labels.size} labels")
    if np.isnan(values).any():
        raise ValueError("values contain NaN")
    return values, labels
