"""Bootstrap confidence intervals for replica-detection performance.

Why: RELICT and the original implementations report balanced accuracy at the optimal
threshold without uncertainty; with 50 rated volumes (5 replicas on TOF-MRA) a single
volume moves sensitivity by 0.2. Resampling the synthetic volumes with replacement and
re-tuning the threshold on each resample gives percentile intervals that include the
optimism of choosing the threshold on the same data.
"""

from __future__ import annotations

import numpy as np

from .evaluate import optimal_threshold, threshold_sweep

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity")


def bootstrap_ci(scores: np.ndarray, is_replica: np.ndarray, step: float, n_boot: int, seed: int,
                 level: float = 0.95) -> dict:
    """Percentile intervals of the optimal threshold and the rates at it.

    Resamples in which one class is missing are skipped (no balanced accuracy exists
    there) and counted in ``n_used``.

    Returns:
        ``{key: [low, high]}`` for threshold, balanced_accuracy, sensitivity,
        specificity, plus ``n_boot``, ``n_used`` and ``level``; intervals are
        None when fewer than 10 resamples were usable.
    """
    scores = np.asarray(scores, float)
    labels = np.asarray(is_replica, bool)
    rng = np.random.default_rng(seed)
    draws = {k: [] for k in KEYS}
    n = scores.size
    for _ in range(n_boot if n else 0):
        idx = rng.integers(0, n, size=n)
        lab = labels[idx]
        if lab.all() or not lab.any():
            continue
        best = optimal_threshold(threshold_sweep(scores[idx], lab, step))
        for k in KEYS:
            draws[k].append(best[k])
    used = len(draws["threshold"])
    alpha = (1.0 - level) / 2.0
    out = {"n_boot": int(n_boot), "n_used": used, "level": level}
    for k in KEYS:
        if used < 10:
            out[k] = None
        else:
            lo, hi = np.quantile(np.asarray(draws[k], float), [alpha, 1.0 - alpha])
            out[k] = [float(lo), float(hi)]
    return out
