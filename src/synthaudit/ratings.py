"""Visual ratings of synthetic volumes (RELICT 2.5, Table 1).

Why one format for everything: the spiked set's known truth, and later the ratings
of human raters, are both a table ``synthetic_id, rater, score`` with Likert scores
1-4, so evaluation never needs to know where a rating came from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .io import read_tsv, write_tsv

COLUMNS = ["synthetic_id", "rater", "score"]
LIKERT = {1: "certainly not a replica", 2: "probably not a replica",
          3: "probably a replica", 4: "certainly a replica"}


class RatingsError(ValueError):
    """A ratings file that cannot be used; the message names the file and the row."""


def read_ratings(path: str | Path, synthetic_ids: list[str] | None = None) -> dict[str, list[int]]:
    """Read a ratings TSV into ``{synthetic_id: [score, ...]}`` (one score per rater).

    Refuses unknown synthetic ids (when ``synthetic_ids`` is given), scores outside
    1-4 and a rater rating the same volume twice.
    """
    path = Path(path)
    if not path.is_file():
        raise RatingsError(f"{path}: ratings file not found")
    rows = read_tsv(path)
    if not rows:
        raise RatingsError(f"{path}: no ratings")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise RatingsError(f"{path}: missing column(s) {missing}; expected {COLUMNS}")
    known = set(synthetic_ids) if synthetic_ids is not None else None
    scores: dict[str, list[int]] = {}
    seen = set()
    for line, row in enumerate(rows, start=2):
        sid, rater, raw = row["synthetic_id"].strip(), row["rater"].strip(), row["score"].strip()
        if known is not None and sid not in known:
            raise RatingsError(f"{path}:{line}: unknown synthetic id {sid!r}")
        try:
            score = int(raw)
        except ValueError:
            raise RatingsError(f"{path}:{line}: score {raw!r} is not an integer 1-4") from None
        if score not in LIKERT:
            raise RatingsError(f"{path}:{line}: score {score} is outside the Likert scale 1-4")
        if (sid, rater) in seen:
            raise RatingsError(f"{path}:{line}: rater {rater!r} rated {sid!r} twice")
        seen.add((sid, rater))
        scores.setdefault(sid, []).append(score)
    return scores


def consensus(scores: dict[str, list[int]], replica_min_score: int = 3) -> dict[str, dict]:
    """Consensus per volume: mean score over raters; replica when it is >= replica_min_score.

    With two raters who disagree on the decision (e.g. 2 and 3 -> 2.5), the volume
    counts as a non-replica here; the paper resolved such cases by re-rating.
    """
    out = {}
    for sid, s in scores.items():
        mean = float(np.mean(s))
        out[sid] = {"score": mean, "n_raters": len(s), "replica": mean >= replica_min_score,
                    "disagree": len({x >= replica_min_score for x in s}) > 1}
    return out


def write_reference_ratings(path: str | Path, spiked_rows: list[dict], rater: str = "reference") -> None:
    """The spiked set's truth as a rating table (the same format human raters fill in)."""
    write_tsv(path, [{"synthetic_id": r["id"], "rater": rater, "score": r["likert"]} for r in spiked_rows],
              COLUMNS)


def read_ratings_by_rater(path: str | Path, synthetic_ids: list[str] | None = None) -> dict[str, dict[str, int]]:
    """``{rater: {synthetic_id: score}}`` from a ratings TSV (same checks as read_ratings)."""
    read_ratings(path, synthetic_ids)  # validates ids, scores, duplicates
    out: dict[str, dict[str, int]] = {}
    for row in read_tsv(path):
        out.setdefault(row["rater"].strip(), {})[row["synthetic_id"].strip()] = int(row["score"])
    return out


def cohen_kappa(a: list, b: list) -> float:
    """Cohen's kappa of two raters' categorical decisions on the same items (NaN if undefined)."""
    if len(a) != len(b) or not a:
        return float("nan")
    cats = sorted(set(a) | set(b))
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    if expected == 1.0:
        return float("nan")  # both raters used one category only: kappa is undefined
    return (observed - expected) / (1.0 - expected)


def agreement(by_rater: dict[str, dict[str, int]], replica_min_score: int = 3) -> dict:
    """Inter-rater agreement of the first two raters (RELICT 3.1 reports percent agreement).

    Returns percent agreement and Cohen's kappa on the binary replica decision, kappa
    on the Likert scores, and the list of volumes on which the decision differs.
    """
    raters = sorted(by_rater)
    if len(raters) < 2:
        return {"raters": raters, "n_common": 0, "percent_agreement": None, "kappa_decision": None,
                "kappa_likert": None, "disagreements": []}
    r1, r2 = raters[:2]
    common = sorted(set(by_rater[r1]) & set(by_rater[r2]))
    s1 = [by_rater[r1][i] for i in common]
    s2 = [by_rater[r2][i] for i in common]
    d1 = [s >= replica_min_score for s in s1]
    d2 = [s >= replica_min_score for s in s2]
    disagree = [{"synthetic_id": i, r1: a, r2: b} for i, a, b, x, y in zip(common, s1, s2, d1, d2) if x != y]
    return {
        "raters": [r1, r2],
        "n_common": len(common),
        "percent_agreement": (100.0 * sum(x == y for x, y in zip(d1, d2)) / len(common)) if common else None,
        "kappa_decision": cohen_kappa(d1, d2),
        "kappa_likert": cohen_kappa(s1, s2),
        "disagreements": disagree,
    }


def write_rating_template(path: str | Path, synthetic_ids: list[str], raters=("rater1", "rater2")) -> None:
    """An empty rating table for the raters to fill in (one row per volume and rater)."""
    write_tsv(path, [{"synthetic_id": i, "rater": r, "score": ""} for r in raters for i in synthetic_ids],
              COLUMNS)
