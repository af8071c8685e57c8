"""From per-measure rankings and a rating to the numbers a reader of RELICT wants.

Why separate from evaluate.py: this is the glue between tables on disk (rankings,
ratings) and the pure statistics, kept out of the rule scripts so it is testable.
"""

from __future__ import annotations

import numpy as np

from ..io import read_tsv
from .evaluate import evaluate_measure

RANKING_COLUMNS = ["synthetic_id", "closest_training_id", "distance", "mean_n_closest", "ratio", "score",
                   "n_used", "rank"]
# calibrated replica calls (relict.calibration): NA when the training set has no held-out scans
CALIBRATION_COLUMNS = ["fpr", "n_null", "calibrated_replica"]


def read_ranking(path) -> list[dict]:
    """A ranking table with numbers parsed; ``fpr`` and ``calibrated_replica`` are None when
    the volume was not calibrated (or the file predates calibration)."""
    rows = read_tsv(path)
    for r in rows:
        for k in ("distance", "mean_n_closest", "ratio", "score"):
            r[k] = float(r[k])
        r["rank"], r["n_used"] = int(r["rank"]), int(r["n_used"])
        fpr = r.get("fpr", "NA")
        r["fpr"] = None if fpr in ("NA", "") else float(fpr)
        r["n_null"] = None if r.get("n_null", "NA") in ("NA", "") else int(r["n_null"])
        called = r.get("calibrated_replica", "NA")
        r["calibrated_replica"] = None if called in ("NA", "") else called == "1"
    return rows


def evaluate_dataset(rankings: dict[str, list[dict]], consensus: dict[str, dict], step: float):
    """Evaluate every measure's replica score (ratio, or absolute distance) against the rating.

    Synthetic volumes without a rating are left out of the evaluation (and counted).
    Returns ``(summary, sweeps, joined_rows)``.
    """
    summary, sweeps, joined = {}, {}, {}
    for measure, rows in rankings.items():
        rated = [r for r in rows if r["synthetic_id"] in consensus]
        ratios = np.array([r["score"] for r in rated], float)
        truth = np.array([consensus[r["synthetic_id"]]["replica"] for r in rated], bool)
        result = evaluate_measure(ratios, truth, step)
        sweeps[measure] = result.pop("sweep")
        result["n_unrated"] = len(rows) - len(rated)
        summary[measure] = result
        for r in rows:
            row = joined.setdefault(r["synthetic_id"], {"synthetic_id": r["synthetic_id"]})
            c = consensus.get(r["synthetic_id"])
            row["rating"] = None if c is None else c["score"]
            row["replica"] = None if c is None else int(c["replica"])
            row[f"{measure}_score"] = r["score"]
            row[f"{measure}_closest"] = r["closest_training_id"]
    return summary, sweeps, list(joined.values())
