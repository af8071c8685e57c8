"""Distance ratio and ranking of synthetic volumes (RELICT 2.4).

For a synthetic volume x with distances d(x, t) to every training volume t, RELICT's
distance ratio is ``d(x, closest) / mean of d(x, t) over S_x``, where S_x is the set
of the n closest training volumes and includes the closest one. A ratio near 0 means
x is abnormally close to one training volume compared with its other near
neighbours: a likely replica. The ratio is scale-free, so one threshold can serve
volumes of different intensity or content. The ranking built from it: :mod:`.ranking`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class RatioResult:
    """Distance ratios of S synthetic volumes (arrays of length S).

    Attributes:
        closest: Index of the closest training volume (lowest index on ties).
        closest_distance: Distance to that volume.
        mean_n_closest: Mean distance to the ``n_used`` closest training volumes,
            the closest included.
        ratio: ``closest_distance / mean_n_closest``; 0 when ``closest_distance`` is 0.
        n_used: n after clamping to the number of training volumes.
    """

    closest: np.ndarray
    closest_distance: np.ndarray
    mean_n_closest: np.ndarray
    ratio: np.ndarray
    n_used: int


def distance_ratio(distances: np.ndarray, n_closest: int, *, warn: Callable[[str], None] | None = None) -> RatioResult:
    """Compute RELICT's distance ratio for every synthetic volume.

    Args:
        distances: (S, T) non-negative distances, synthetic x training (similarities
            must first go through ``registry.to_distance``).
        n_closest: Size of S_x, the set of closest training volumes (RELICT: 50).
        warn: Receives a message when n_closest exceeds T and is clamped to T; default
            :func:`warnings.warn`. A clamp changes what the ratio means (with n_closest = T
            it compares against the whole training set), so it is never silent.

    Returns:
        The per-volume ratios and their ingredients.

    Raises:
        ValueError: If n_closest < 1, the matrix is not 2D, has no training column,
            contains NaN, or a row has fewer than n_closest finite distances (+inf: a pair
            the shortlist search did not compute).
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"distances must be a (synthetic, training) matrix, got shape {d.shape}")
    n_training = d.shape[1]
    if n_closest < 1:
        raise ValueError(f"n_closest (closest training volumes) must be at least 1, got {n_closest}")
    if n_training == 0:
        raise ValueError("distances has no training volumes")
    if np.isnan(d).any():
        raise ValueError(f"distances contain {int(np.isnan(d).sum())} NaN value(s)")
    n_used = min(n_closest, n_training)
    if np.isinf(d).any():
        # +inf marks a pair the shortlist search did not compute (relict.search): the n_used
        # closest must all be computed, or the mean would be infinite and the ratio 0
        short = np.flatnonzero(np.isfinite(d).sum(axis=1) < n_used)
        if len(short):
            raise ValueError(f"{len(short)} row(s) have fewer than n={n_used} computed distances "
                             f"(row {int(short[0])}: {int(np.isfinite(d[short[0]]).sum())}); the shortlist must "
                             "hold at least n candidates (relict.search.shortlist.factor >= 1)")
    if n_closest > n_training:
        message = (f"n_closest={n_closest} exceeds the number of training volumes ({n_training}); "
                   f"using n={n_training}, i.e. the ratio compares with the whole training set")
        (warn or warnings.warn)(message)

    closest = np.argmin(d, axis=1)  # first minimum: ties go to the lowest training index
    closest_distance = d[np.arange(d.shape[0]), closest]
    # The mean of the n_used smallest values does not depend on how ties at the n_used-th value
    # are broken, so a partial partition (O(T)) is enough; no full sort.
    nearest = d if n_used == n_training else np.partition(d, n_used - 1, axis=1)[:, :n_used]
    mean_n_closest = nearest.mean(axis=1)
    ratio = np.zeros_like(closest_distance)
    np.divide(closest_distance, mean_n_closest, out=ratio, where=closest_distance != 0)
    return RatioResult(closest=closest, closest_distance=closest_distance, mean_n_closest=mean_n_closest,
                       ratio=ratio, n_used=n_used)

