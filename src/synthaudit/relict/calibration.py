"""Calibrated replica calls: an empirical false-positive rate from held-out real scans.

Why: RELICT tunes each measure's threshold on a visual rating, and a user without raters
gets a ranking but no decision. Held-out real scans are what "a new patient" looks like to
the same code: their distance ratio against the training set (same measure, same n, same
ranking rule) is the null distribution of a non-replica. A synthetic volume whose score
is lower than almost all of them is closer to one training scan than new patients ever
are. Its empirical false-positive rate is

    fpr = (1 + #{held-out scans with score <= its score}) / (1 + n_held_out)

(the +1 correction of permutation tests: with n held-out scans no rate below 1 / (n + 1)
can be claimed), and it is called a replica when ``fpr <= rate`` (``relict.calibration.rate``,
5 % by default, like the privacy filters' 95th-percentile calibration). The smallest rate
that can ever be reached is 1 / (n + 1): at 5 % a training set needs at least 19 held-out
scans in the pool, or nothing is called (said in the log and the metrics).

No scan calibrates its own decision: a synthetic volume made from a held-out scan (a
spiked non-replica) is compared with the held-out scans of the *other* patients, and the
held-out scans' own rate (the specificity check of the rule) leaves their patient out.

Several measures: calling a volume when *any* measure calls it would add up the measures'
false positives. The combined statistic of a volume is its most extreme robust z-score over
the measures (each score against the held-out scores of its pool: median and scaled MAD),
calibrated in turn against the same statistic of the held-out scans (each with its
leave-patient-out pool), a max-statistic correction as in permutation tests. Why z-scores
and not the smallest rate: ranks against n held-out scans are coarse, and the two sides'
floors differ (a synthetic volume's rate cannot go below 1/(n + 1), a held-out scan's
leave-patient-out rate not below 1/n), so with the cut-off at the floor every volume below
all held-out scans on any *one* measure was called: 5 of 28 new patients on the
real-anatomy cohort at n = 20, eight measures, 5 %. The z-score keeps how far below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


# columns of calibration/<measure>.tsv: each held-out scan's score and its leave-patient-out call
NULL_COLUMNS = ["heldout_id", "patient_id", "closest_training_id", "score", "fpr", "n_null", "called"]


@dataclass
class Null:
    """Held-out real scans scored like synthetic volumes: the null of "a new patient".

    Attributes:
        ids, patients: Held-out scan ids and their patients.
        scores: Their replica scores (ratio, or absolute distance at segmentation level).
        closest: Id of each one's closest training scan.
    """

    ids: list[str]
    patients: list[str]
    scores: np.ndarray
    closest: list[str]

    def __post_init__(self):
        self.scores = np.asarray(self.scores, dtype=np.float64)
        if not (len(self.ids) == len(self.patients) == self.scores.size == len(self.closest)):
            raise ValueError("held-out ids, patients, scores and closest training ids differ in number")
        if np.isnan(self.scores).any():
            raise ValueError("held-out scores contain NaN")


def leave_patient_out(distances: np.ndarray, heldout_patients: Sequence[str], training_patients: Sequence[str]
                      ) -> tuple[np.ndarray, int]:
    """Held-out distances with each scan's own patient's training scans removed (+inf: never among
    the n closest, as a pair the shortlist did not compute).

    Why: a held-out scan of a patient who also has training scans (a second visit put in the
    held-out folder) is closest to its own patient's scan, a low ratio that is no new patient's;
    after alignment more so. Such scores would lower the null's floor and the calls' threshold
    with it. Returns ``(distances, n_scans_affected)``.
    """
    d = np.array(distances, dtype=np.float64, copy=True)
    train = np.asarray(training_patients, dtype=object)
    affected = 0
    for i, p in enumerate(heldout_patients):
        own = train == p
        if own.any():
            d[i, own] = np.inf
            affected += 1
    return d, affected


def heldout_null(distances: np.ndarray, heldout_ids: Sequence[str], heldout_patients: Sequence[str],
                 training_ids: Sequence[str], training_patients: Sequence[str], n_closest: int,
                 use_ratio: bool = True) -> tuple[Null, np.ndarray, int]:
    """The null of one measure from the held-out scans' distances to the training set: each scan
    scored as a synthetic volume would be (RELICT's ratio, or the closest distance at the
    segmentation level), without its own patient's training scans (:func:`leave_patient_out`).

    Returns ``(null, distances_used, n_scans_with_own_patient_left_out)``.
    """
    from .ratio import distance_ratio

    used, n_own = leave_patient_out(distances, heldout_patients, training_patients)
    r = distance_ratio(used, n_closest, warn=lambda message: None)
    null = Null(list(heldout_ids), list(heldout_patients), r.ratio if use_ratio else r.closest_distance,
                [training_ids[j] for j in r.closest])
    return null, used, n_own


def null_rows(null: Null, rate: float) -> list[dict]:
    """calibration/<measure>.tsv (:data:`NULL_COLUMNS`): each held-out scan's score and its own
    leave-patient-out rate and call."""
    check = heldout_check(null, rate)
    return [{"heldout_id": i, "patient_id": p, "closest_training_id": c, "score": float(s), "fpr": float(f),
             "n_null": int(n), "called": int(k)}
            for i, p, c, s, f, n, k in zip(null.ids, null.patients, null.closest, null.scores, check["fpr"],
                                           check["n_null"], check["called"])]


def min_rate(n: int) -> float:
    """The smallest false-positive rate ``n`` null scores can support: 1 / (n + 1)."""
    return 1.0 / (n + 1)


def min_heldout(rate: float) -> int:
    """Held-out scans needed in a pool before anything can be called at ``rate``."""
    return int(np.ceil(1.0 / rate - 1.0 - 1e-12))


def false_positive_rates(scores: np.ndarray, null_scores: np.ndarray, pools: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Empirical false-positive rate of each score against a null, with the +1 correction.

    Args:
        scores: ``(S,)`` scores (lower = more likely a replica).
        null_scores: ``(H,)`` null scores.
        pools: Optional ``(S, H)`` boolean mask: the null scores each score may be compared
            with (all when None).

    Returns:
        ``(fpr, n_pool)``: ``(1 + #{pool <= score}) / (1 + n_pool)`` and the pool sizes.
        An empty pool gives rate 1.
    """
    scores = np.asarray(scores, dtype=np.float64)
    null_scores = np.asarray(null_scores, dtype=np.float64)
    if pools is None:
        pools = np.ones((scores.size, null_scores.size), bool)
    at_most = (null_scores[None, :] <= scores[:, None]) & pools
    n_pool = pools.sum(axis=1)
    return (1.0 + at_most.sum(axis=1)) / (1.0 + n_pool), n_pool


def pools_without(patients: Sequence[str | None], null: Null) -> np.ndarray:
    """``(S, H)`` mask: each row's null without the held-out scans of that row's patient (None: all)."""
    null_patients = np.asarray(null.patients, dtype=object)
    return np.stack([null_patients != p if p is not None else np.ones(len(null.ids), bool) for p in patients]) \
        if len(patients) else np.ones((0, len(null.ids)), bool)


def calibrate_without_scans(scores: np.ndarray, null: Null, rate: float, source_ids: Sequence[str]
                            ) -> dict[str, np.ndarray]:
    """Like :func:`calibrate`, each score's null without the one held-out scan it was made from
    (a positive control pasted into that scan), the same patient's other scans kept.

    Why not without the patient: a control is a held-out scan with a region pasted in, so its
    score anywhere else is that scan's own. The patient's other scan is another acquisition; its
    lowest block, where the patient happens to resemble a training patient, is the same kind of
    score the control gets outside its region, so keeping it makes the cut-off stricter, not
    looser. Leaving the patient out instead left 18 of 20 held-out scans of 10 patients scanned
    twice, whose smallest rate, 1/19, is above 0.05: no control could be called at all."""
    null_ids = np.asarray(null.ids, dtype=object)
    pools = np.stack([null_ids != i for i in source_ids]) if len(source_ids) else np.ones((0, len(null.ids)), bool)
    return _decide(scores, null, rate, pools)


def _decide(scores: np.ndarray, null: Null, rate: float, pools: np.ndarray) -> dict[str, np.ndarray]:
    """Each score's rate against its pool of the null, and the call at ``rate``."""
    _check_rate(rate)
    fpr, n_pool = false_positive_rates(np.asarray(scores, dtype=np.float64), null.scores, pools)
    return {"fpr": fpr, "n_null": n_pool, "called": fpr <= rate}


def calibrate(scores: np.ndarray, null: Null, rate: float, source_patients: Sequence[str | None] | None = None
              ) -> dict[str, np.ndarray]:
    """Calibrated calls of synthetic volumes.

    Args:
        scores: ``(S,)`` replica scores of the synthetic volumes.
        null: The held-out null of the same measure.
        rate: Decision rate (0 < rate < 1).
        source_patients: Per synthetic volume, the held-out patient it was made from
            (spiked non-replicas), whose scans then leave its pool; None otherwise.

    Returns:
        ``{"fpr", "n_null", "called"}``, arrays of length S.
    """
    _check_rate(rate)
    scores = np.asarray(scores, dtype=np.float64)
    patients = list(source_patients) if source_patients is not None else [None] * scores.size
    if len(patients) != scores.size:
        raise ValueError(f"{len(patients)} source patients for {scores.size} scores")
    return _decide(scores, null, rate, pools_without(patients, null))


def heldout_check(null: Null, rate: float) -> dict[str, np.ndarray]:
    """The held-out scans judged by the rule, each against the other patients' scans.

    The fraction called is the rule's false-positive rate on new patients (its
    specificity is one minus it), measured without a scan calibrating its own decision.
    """
    return _decide(null.scores, null, rate, pools_without(null.patients, null))


def threshold(null_scores: np.ndarray, rate: float) -> float | None:
    """The score below which a volume is called, for the whole pool (None: nothing can be).

    With the +1 correction a score is called when at most ``k = floor(rate (n + 1)) - 1``
    null scores are at or below it, i.e. when it is below the (k+1)-th smallest null score.
    """
    _check_rate(rate)
    values = np.sort(np.asarray(null_scores, dtype=np.float64))
    k = int(np.floor(rate * (values.size + 1) + 1e-12)) - 1
    if k < 0:
        return None
    return float(values[k]) if k < values.size else float("inf")


def robust_z(scores: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``(scores - median(pool)) / scale``: the scale 1.4826 MAD of the pool (the SD where the MAD is
    0, 1 where both are): how far below a new patient's usual score, in the pool's units. The pool's
    non-finite scores (an empty label's infinite distance) are left out of its centre and scale; a
    pool without a finite score leaves every score at +inf (never extreme)."""
    pool = np.asarray(pool, np.float64)
    pool = pool[np.isfinite(pool)]
    if not pool.size:
        return np.full(np.shape(scores), np.inf)
    centre = np.median(pool)
    scale = 1.4826 * np.median(np.abs(pool - centre))
    if not scale > 0:
        scale = float(np.std(pool)) or 1.0
    return (np.asarray(scores, np.float64) - centre) / scale


def _combined_z(scores: np.ndarray, held: np.ndarray, pools: np.ndarray) -> np.ndarray:
    """(rows, measures) z-scores of ``scores`` (rows, M) against ``held`` (H, M), each row against its
    pool of held-out scans (``pools``: (rows, H) mask)."""
    out = np.empty(scores.shape, np.float64)
    keys = {}
    for r, mask in enumerate(pools):  # rows share few distinct pools (a source patient each)
        keys.setdefault(mask.tobytes(), []).append(r)
    for rows in keys.values():
        mask = pools[rows[0]]
        if not mask.any():
            out[rows] = np.inf  # no pool: nothing to compare with, never extreme
            continue
        for m in range(scores.shape[1]):
            out[rows, m] = robust_z(scores[rows, m], held[mask, m])
    return out


def combined(scores: Mapping[str, np.ndarray], null_scores: Mapping[str, np.ndarray], null: Null, rate: float,
             source_patients: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
    """Calls combining several measures, calibrated as one statistic (module docstring).

    The statistic is a volume's smallest robust z-score over the measures (:func:`robust_z`: its
    score against the held-out scores of its pool); the held-out scans get the same statistic
    against their leave-patient-out pools, and a synthetic volume's combined rate is its
    statistic's rate against theirs (+1 correction, its own source patient left out).

    Args:
        scores: ``{measure: (S,) scores}`` of the synthetic volumes (lower = more likely a copy).
        null_scores: ``{measure: (H,) scores}`` of the held-out scans, in ``null``'s order, for the
            same measures.
        null: The held-out scans (ids and patients; scores unused).
        rate: Decision rate.
        source_patients: As in :func:`calibrate`.

    Returns:
        ``{"statistic", "fpr", "n_null", "called", "measure"}`` where ``measure`` is the
        index (into the sorted measure names of ``scores``) of the measure giving the minimum.
    """
    _check_rate(rate)
    measures = sorted(scores)
    if not measures or sorted(null_scores) != measures:
        raise ValueError(f"scores of measures {measures} and held-out scores of {sorted(null_scores)} differ")
    syn = np.stack([np.asarray(scores[m], np.float64) for m in measures], axis=1)
    held = np.stack([np.asarray(null_scores[m], np.float64) for m in measures], axis=1)
    if np.isnan(syn).any() or np.isnan(held).any():
        raise ValueError("combined calls: a score is NaN")
    patients = list(source_patients) if source_patients is not None else [None] * len(syn)
    pools = pools_without(patients, null)
    z = _combined_z(syn, held, pools)
    null_statistic = _heldout_statistic(held, null)
    statistic = z.min(axis=1)
    fpr, n_pool = false_positive_rates(statistic, null_statistic, pools)
    return {"statistic": statistic, "fpr": fpr, "n_null": n_pool, "called": fpr <= rate,
            "measure": z.argmin(axis=1)}


def combined_heldout_check(null_scores: Mapping[str, np.ndarray], null: Null, rate: float) -> dict[str, np.ndarray]:
    """The held-out scans judged by the combined rule, each against the other patients' scans (as
    :func:`heldout_check` for one measure)."""
    _check_rate(rate)
    held = np.stack([np.asarray(null_scores[m], np.float64) for m in sorted(null_scores)], axis=1)
    stat = _heldout_statistic(held, null)
    fpr, n_pool = false_positive_rates(stat, stat, pools_without(null.patients, null))
    return {"fpr": fpr, "n_null": n_pool, "called": fpr <= rate}


def _heldout_statistic(held: np.ndarray, null: Null) -> np.ndarray:
    """The combined statistic of each held-out scan (``held``: (H, M) scores): its smallest z-score over the
    measures, each against its leave-patient-out pool."""
    return _combined_z(held, held, pools_without(null.patients, null)).min(axis=1)


def _check_rate(rate: float) -> None:
    if not 0.0 < float(rate) < 1.0:
        raise ValueError(f"calibration rate must be in (0, 1), got {rate}")
