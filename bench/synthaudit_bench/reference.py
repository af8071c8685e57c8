"""The naive per-pair reference: what a user would write without the all-pairs engines.

Why: a speed-up is only meaningful against a stated baseline, and agreement with the
libraries RELICT used is what makes the engines' values trustworthy. On a seeded
subset of pairs (a third of them near-copy pairs, where precision matters most) each
measure is recomputed with the plain library call and timed per pair:

* SSIM: ``skimage.metrics.structural_similarity(a, b, gaussian_weights=True,
  sigma=1.5, use_sample_covariance=True, data_range=...)`` on float64 volumes;
* MAE, RMSE, embedding RMSE and cosine: NumPy in float64;
* Dice: NumPy counts per class (a class absent from both maps agrees: 1), mean over every class;
* ASD, binary: google-deepmind ``surface_distance`` (``compute_surface_distances``,
  then the mean of the two directed averages of ``compute_average_surface_distance``);
  a pair with an empty mask, which deepmind cannot score, and the multiclass ASD use the
  project's own per-pair functions (RELICT's empty-class rule).

Timing covers the measure only: volumes are read and converted to float64 before the
clock starts. The caller runs this in a process limited to one thread (OMP, MKL and
OpenBLAS threads = 1), so the figures are single-core.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

# Environment for the reference process: BLAS and OpenMP on one thread.
SINGLE_THREAD_ENV = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                      "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}
METHODS = {
    "mae": "numpy float64: mean(|a - b|)",
    "rmse": "numpy float64: sqrt(mean((a - b)^2))",
    "ssim": "skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5, "
            "use_sample_covariance=True, data_range) on float64",
    "emb_rmse": "numpy float64: sqrt(mean((a - b)^2))",
    "emb_cosine": "numpy float64: a.b / (|a| |b|)",
    "dice_binary": "numpy: 2 |A & B| / (|A| + |B|), A = labels > 0",
    "dice_multiclass": "numpy: per-class Dice (1 when absent from both), mean over every class",
    "asd_binary": "surface_distance (google-deepmind): mean of compute_average_surface_distance; "
                  "empty mask: synthaudit.segment.measures.average_surface_distance",
    "asd_multiclass": "synthaudit.segment.measures.mean_asd(average_surface_distance(...)) per pair",
}


def choose_pairs(n_synthetic: int, n_training: int, replica_of: list[int], n: int, seed: int
                 ) -> list[tuple[int, int]]:
    """``n`` distinct (synthetic, training) pairs, a third of them near-copy pairs when possible.

    Only training columns ``< n_training`` are drawn (SSIM may run on a fraction).
    """
    n = min(n, n_synthetic * n_training)
    rng = np.random.default_rng([seed, 7051])
    copies = [(s, t) for s, t in enumerate(replica_of) if 0 <= t < n_training]
    n_copies = min(len(copies), math.ceil(n / 3))
    chosen = [copies[k] for k in sorted(rng.choice(len(copies), n_copies, replace=False))] if n_copies else []
    taken = set(chosen)
    while len(chosen) < n:
        pair = (int(rng.integers(n_synthetic)), int(rng.integers(n_training)))
        if pair not in taken:
            taken.add(pair)
            chosen.append(pair)
    return chosen


def run_reference(cohort, measure: str, pairs: list[tuple[int, int]]) -> dict:
    """Reference values and seconds for each pair of ``cohort`` (a :class:`~.cohort.Cohort`)."""
    compute = _REFERENCES[measure]
    _import_libraries()  # imports stay out of the first pair's time
    values, seconds, fallbacks = [], [], 0
    for s, t in pairs:
        a, b = _inputs(cohort, measure, s, t)
        start = time.perf_counter()
        value, fell_back = compute(a, b, cohort)
        seconds.append(time.perf_counter() - start)
        values.append(float(value))
        fallbacks += fell_back
    return {"measure": measure, "method": METHODS[measure], "pairs": [list(p) for p in pairs],
            "values": values, "seconds": seconds,
            "s_per_pair": float(np.mean(seconds)) if seconds else None,
            "fallback_pairs": fallbacks}


def compare(engine: np.ndarray, reference: np.ndarray) -> dict:
    """Largest relative difference ``|a - b| / max(|b|, tiny)`` (``b`` the reference).

    Pairs that are NaN in both agree (no class present); NaN in one only is counted
    in ``nan_mismatches`` and left out of the maximum.
    """
    a, b = np.asarray(engine, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    one_nan = np.isnan(a) != np.isnan(b)
    finite = ~(both_nan | one_nan)
    rel = np.zeros(a.shape)
    rel[finite] = np.abs(a[finite] - b[finite]) / np.maximum(np.abs(b[finite]), np.finfo(np.float64).tiny)
    worst = int(np.argmax(rel)) if rel.size else None
    return {"max_rel_diff": float(rel.max()) if rel.size else None,
            "max_abs_diff": float(np.max(np.abs(a[finite] - b[finite]))) if finite.any() else None,
            "worst_index": worst, "nan_mismatches": int(one_nan.sum()), "both_nan": int(both_nan.sum())}


# --------------------------------------------------------------------------- per measure


def _inputs(cohort, measure: str, s: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    from .params import LEVELS

    level = LEVELS[measure]
    if level == "image":
        names, dtype = ("synthetic_images", "training_images"), np.float64
    elif level == "feature":
        names, dtype = ("synthetic_embeddings", "training_embeddings"), np.float64
    else:
        names, dtype = ("synthetic_labels", "training_labels"), None
    a, b = (np.array(cohort.array(name)[i]) for name, i in zip(names, (s, t)))
    return (a.astype(dtype), b.astype(dtype)) if dtype else (a, b)


def _import_libraries() -> None:
    import skimage.metrics  # noqa: F401
    import surface_distance  # noqa: F401

    import synthaudit.segment.measures  # noqa: F401


def _mae(a, b, cohort):
    return np.mean(np.abs(a - b)), False


def _rmse(a, b, cohort):
    return np.sqrt(np.mean((a - b) ** 2)), False


def _ssim(a, b, cohort):
    from skimage.metrics import structural_similarity

    return structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=True,
                                 data_range=cohort.data_range), False


def _cosine(a, b, cohort):
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return (a @ b / norms if norms > 0 else 0.0), False


def _dice_mask(a: np.ndarray, b: np.ndarray) -> float:
    total = np.count_nonzero(a) + np.count_nonzero(b)
    return 2.0 * np.count_nonzero(a & b) / total if total else 1.0  # both empty: they agree


def _dice_binary(a, b, cohort):
    return _dice_mask(a > 0, b > 0), False


def _dice_multiclass(a, b, cohort):
    per_class = [_dice_mask(a == c, b == c) for c in cohort.labels]
    return sum(per_class) / len(per_class), False


def _asd_binary(a, b, cohort):
    spacing = cohort.spec.spacing_mm
    mask_a, mask_b = a > 0, b > 0
    if not (mask_a.any() and mask_b.any()):  # deepmind cannot score an empty mask
        from synthaudit.segment.measures import average_surface_distance

        return average_surface_distance(mask_a, mask_b, spacing, [1])[1], True
    import surface_distance

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        distances = surface_distance.compute_surface_distances(mask_a, mask_b, spacing)
        ab, ba = surface_distance.compute_average_surface_distance(distances)
    return (ab + ba) / 2.0, False


def _asd_multiclass(a, b, cohort):
    from synthaudit.segment.measures import average_surface_distance, mean_asd

    return mean_asd(average_surface_distance(a, b, cohort.spec.spacing_mm, cohort.labels)), False


_REFERENCES = {"mae": _mae, "rmse": _rmse, "ssim": _ssim, "emb_rmse": _rmse, "emb_cosine": _cosine,
               "dice_binary": _dice_binary, "dice_multiclass": _dice_multiclass,
               "asd_binary": _asd_binary, "asd_multiclass": _asd_multiclass}
