"""Out-of-sample intervals for replica-detection performance.

Why: RELICT chooses each measure's threshold on the very rating it then reports balanced
accuracy on, and with 50 rated volumes (5 replicas on TOF-MRA) that apparent accuracy is
optimistic - on separable data it is 1 whatever a new set would give. Re-tuning the
threshold on a bootstrap resample and scoring it on that same resample measures the same
optimism again (its interval collapses to [1, 1] on separable data). Here the threshold is
tuned on each resample and scored on the volumes the resample left out (the out-of-bag
bootstrap, Efron & Tibshirani 1997): how a threshold chosen on a rating does on volumes it
was not chosen on. Both numbers are reported side by side: the apparent balanced accuracy
(threshold tuned and scored on all rated volumes, RELICT's number) and the out-of-sample one.

Resampling is stratified (replicas and non-replicas are drawn separately, each with
replacement, at their own counts), so every resample has both classes; a resample whose
left-out volumes lack a class cannot score a balanced accuracy and is skipped (counted).
"""

from __future__ import annotations

import numpy as np

from .evaluate import optimal_threshold, threshold_sweep

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity")
METHOD = "out-of-bag bootstrap: threshold tuned on a stratified resample, scored on the volumes it left out"


def bootstrap_ci(scores: np.ndarray, is_replica: np.ndarray, step: float, n_boot: int, seed: int,
                 level: float = 0.95) -> dict:
    """Out-of-sample balanced accuracy (mean and percentile interval) of a tuned threshold.

    For each of ``n_boot`` stratified resamples: the optimal threshold of the resample
    (RELICT's sweep and tie rule), then sensitivity, specificity and balanced accuracy of
    that threshold on the out-of-bag volumes (a volume is called a replica when its score
    is at most the threshold).

    Args:
        scores: Replica scores (ratio, or absolute distance), lower = more likely a replica.
        is_replica: The rating.
        step: Threshold-sweep step.
        n_boot: Resamples.
        seed: Seed of the resampling.
        level: Two-sided interval coverage.

    Returns:
        ``{key: [low, high]}`` for threshold (tuned on the resamples), balanced_accuracy,
        sensitivity and specificity (out of bag); ``out_of_sample``: their means;
        ``n_boot``, ``n_used`` (resamples with both classes out of bag), ``level`` and
        ``method``. Intervals and means are None when fewer than 10 resamples were usable
        (or a class has fewer than 2 volumes).
    """
    scores = np.asarray(scores, float)
    labels = np.asarray(is_replica, bool)
    rng = np.random.default_rng(seed)
    draws = {k: [] for k in KEYS}
    positives, negatives = np.flatnonzero(labels), np.flatnonzero(~labels)
    if positives.size >= 2 and negatives.size >= 2:
        for _ in range(n_boot):
            bag = np.concatenate([rng.choice(positives, positives.size), rng.choice(negatives, negatives.size)])
            out = np.setdiff1d(np.arange(scores.size), bag)
            out_pos, out_neg = out[labels[out]], out[~labels[out]]
            if not out_pos.size or not out_neg.size:
                continue
            threshold = optimal_threshold(threshold_sweep(scores[bag], labels[bag], step))["threshold"]
            sensitivity = float(np.mean(scores[out_pos] <= threshold))
            specificity = float(np.mean(scores[out_neg] > threshold))
            for key, value in zip(KEYS, (threshold, (sensitivity + specificity) / 2, sensitivity, specificity)):
                draws[key].append(value)
    used = len(draws["threshold"])
    alpha = (1.0 - level) / 2.0
    out = {"n_boot": int(n_boot), "n_used": used, "level": level, "method": METHOD, "out_of_sample": {}}
    for k in KEYS:
        if used < 10:
            out[k] = None
            out["out_of_sample"][k] = None
        else:
            values = np.asarray(draws[k], float)
            lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
            out[k] = [float(lo), float(hi)]
            out["out_of_sample"][k] = float(values.mean())
    return out
