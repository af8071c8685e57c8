"""The ranking table ``ranking_<measure>.tsv``: built, written and read here only.

Why one owner: ``relict_ratio`` writes it and a dozen rules read it (evaluation,
calibrated copies, review tables, the filter, the verdict); columns added on one side
and parsed differently on the other drifted apart in two copies of the reader. Numpy
and the standard library only, so the figures environment can read it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..io import read_tsv, write_tsv
from .ratio import RatioResult

RANKING_COLUMNS = ["synthetic_id", "closest_training_id", "distance", "mean_n_closest", "ratio", "score",
                   "n_used", "rank"]
# calibrated replica calls (relict.calibration): empty when the training set has no held-out scans
CALIBRATION_COLUMNS = ["fpr", "n_null", "calibrated_replica"]
# aligned measures only: the transform that matched the closest training volume
TRANSFORM_COLUMN = "transform"
# segmentation level only: 1 where the synthetic volume and its closest training volume both have
# empty label maps (Dice 1, ASD 0 by RELICT's empty-mask rule: "no lesion in either", not a copy)
EMPTY_PAIR_COLUMN = "empty_pair"
# what a reader needs to find in a file before it trusts it as a ranking
_REQUIRED = {"synthetic_id", "closest_training_id", "score", "rank"}


def ranking_rows(synthetic_ids: Sequence[str], training_ids: Sequence[str], result: RatioResult,
                 measure: str, use_ratio: bool = True) -> list[dict]:
    """Rank synthetic volumes from most to least likely replica.

    Args:
        synthetic_ids: Ids in the row order of the distance matrix.
        training_ids: Ids in its column order.
        result: Output of :func:`.ratio.distance_ratio`.
        measure: Measure name, for error messages.
        use_ratio: The replica score is the ratio (image and feature level); False:
            the absolute distance to the closest volume (segmentation level, RELICT 2.4).

    Returns:
        One dict per synthetic volume, sorted by rank, with the keys of
        ``RANKING_COLUMNS``. Rank 1 is the smallest score; equal scores are ordered
        by synthetic id, so the ranking does not depend on the input order.
    """
    n_synthetic = len(result.ratio)
    if len(synthetic_ids) != n_synthetic:
        raise ValueError(f"{measure}: {len(synthetic_ids)} synthetic ids for {n_synthetic} ratios")
    if n_synthetic and result.closest.max() >= len(training_ids):
        raise ValueError(f"{measure}: closest training index {result.closest.max()} but only "
                         f"{len(training_ids)} training ids")
    score = result.ratio if use_ratio else result.closest_distance
    order = np.lexsort((np.asarray(synthetic_ids, dtype=str), score))
    return [
        {
            "synthetic_id": synthetic_ids[i],
            "closest_training_id": training_ids[result.closest[i]],
            "distance": float(result.closest_distance[i]),
            "mean_n_closest": float(result.mean_n_closest[i]),
            "ratio": float(result.ratio[i]),
            "score": float(score[i]),
            "n_used": int(result.n_used),
            "rank": rank,
        }
        for rank, i in enumerate(order, start=1)
    ]


def add_calibration(rows: list[dict], calls: Mapping[str, np.ndarray]) -> None:
    """Fill the calibration columns in place from :func:`.calibration.calibrate`'s calls (row order)."""
    for r, fpr, n, called in zip(rows, calls["fpr"], calls["n_null"], calls["called"]):
        r.update(fpr=float(fpr), n_null=int(n), calibrated_replica=int(called))


def add_transforms(rows: list[dict], synthetic_ids: Sequence[str], training_ids: Sequence[str],
                   transform: np.ndarray) -> None:
    """Fill the transform column in place: the aligned matrix's transform of each row's closest
    pair (``identity`` where the plain value stood)."""
    row_of = {sid: i for i, sid in enumerate(synthetic_ids)}
    col_of = {tid: j for j, tid in enumerate(training_ids)}
    for r in rows:
        r[TRANSFORM_COLUMN] = str(transform[row_of[r["synthetic_id"]], col_of[r["closest_training_id"]]]) \
            or "identity"


def add_empty_pairs(rows: list[dict], synthetic_ids: Sequence[str], training_ids: Sequence[str],
                    synthetic_foreground: np.ndarray, training_foreground: np.ndarray) -> int:
    """Fill the empty-pair column in place from the label maps' foreground voxel counts;
    returns how many rows are such pairs."""
    row_of = {sid: i for i, sid in enumerate(synthetic_ids)}
    col_of = {tid: j for j, tid in enumerate(training_ids)}
    n = 0
    for r in rows:
        empty = (synthetic_foreground[row_of[r["synthetic_id"]]] == 0
                 and training_foreground[col_of[r["closest_training_id"]]] == 0)
        r[EMPTY_PAIR_COLUMN] = int(empty)
        n += int(empty)
    return n


def ranking_columns(with_transform: bool = False, with_empty_pair: bool = False) -> list[str]:
    return (RANKING_COLUMNS + CALIBRATION_COLUMNS + ([TRANSFORM_COLUMN] if with_transform else [])
            + ([EMPTY_PAIR_COLUMN] if with_empty_pair else []))


def write_ranking(path, rows: list[dict], with_transform: bool = False, with_empty_pair: bool = False) -> None:
    """Write the table atomically; calibration (and transform) cells stay empty where the rows have none."""
    write_tsv(path, rows, ranking_columns(with_transform, with_empty_pair))


def read_ranking(path) -> list[dict]:
    """The table with numbers parsed; ``fpr``, ``n_null`` and ``calibrated_replica`` (a bool)
    are None where the volume was not calibrated (or the file predates calibration).

    Raises:
        ValueError: An empty file or one without the ranking's key columns, naming it.
    """
    rows = read_tsv(path)
    if not rows:
        raise ValueError(f"{path}: empty ranking")
    missing = sorted(_REQUIRED - set(rows[0]))
    if missing:
        raise ValueError(f"{path}: not a ranking table, missing column(s) {missing}")
    for r in rows:
        for k in ("distance", "mean_n_closest", "ratio", "score"):
            if k in r:
                r[k] = float(r[k])
        r["rank"] = int(r["rank"])
        if "n_used" in r:
            r["n_used"] = int(r["n_used"])
        fpr, n_null, called = (r.get(k, "NA") for k in CALIBRATION_COLUMNS)
        r["fpr"] = None if fpr in ("NA", "") else float(fpr)
        r["n_null"] = None if n_null in ("NA", "") else int(n_null)
        r["calibrated_replica"] = None if called in ("NA", "") else called == "1"
        if EMPTY_PAIR_COLUMN in r:
            r[EMPTY_PAIR_COLUMN] = r[EMPTY_PAIR_COLUMN] == "1"
    return rows
