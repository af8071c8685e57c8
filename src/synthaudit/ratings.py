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
# optional: the rating round (1, 2, ...): a volume re-rated after a disagreement gets its rater's
# latest round (RELICT 2.5: raters who disagreed on the decision re-evaluated the pair individually)
ROUND = "round"
LIKERT = {1: "certainly not a replica", 2: "probably not a replica",
          3: "probably a replica", 4: "certainly a replica"}


class RatingsError(ValueError):
    """A ratings file that cannot be used; the message names the file and the row."""


def rating_rule(replica_min_score: int = 3) -> str:
    """The rule that turns a rating sheet into the reference decision, as RELICT 2.5 states it and
    as synthaudit applies it (written to the log and the evaluation file where the sheet is read)."""
    return (f"each rater's latest round counts; the volume's score is the mean over its raters; a replica when "
            f"that mean is >= {replica_min_score} (Likert {replica_min_score}-4: 'probably' or 'certainly a replica'); "
            f"raters who disagree on that decision (one >= {replica_min_score}, one below), or whose scores lie two "
            "or more points apart, flag the volume for re-rating: RELICT had each rater re-evaluate such a pair "
            f"individually; add the new scores as round 2 (column '{ROUND}'). Until then the mean decides")


def read_ratings(path: str | Path, synthetic_ids: list[str] | None = None) -> dict[str, list[int]]:
    """Read a ratings TSV into ``{synthetic_id: [score, ...]}`` (one score per rater).

    Refuses unknown synthetic ids (when ``synthetic_ids`` is given), scores outside
    1-4 and a rater rating the same volume twice in one round. With a ``round`` column
    (integers from 1), each rater's latest round of a volume is the score kept.
    """
    scores: dict[str, list[int]] = {}
    for (sid, _), score in _latest_scores(path, synthetic_ids).items():
        scores.setdefault(sid, []).append(score)
    return scores


def _latest_scores(path: str | Path, synthetic_ids: list[str] | None) -> dict[tuple[str, str], int]:
    """``{(synthetic_id, rater): score}``, each rater's latest round (see :func:`read_ratings`)."""
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
    rounds = ROUND in rows[0]
    latest: dict[tuple[str, str], tuple[int, int]] = {}  # (sid, rater) -> (round, score)
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
        rnd = 1
        if rounds:
            text = str(row[ROUND]).strip() or "1"
            try:
                rnd = int(text)
            except ValueError:
                raise RatingsError(f"{path}:{line}: round {text!r} is not an integer >= 1") from None
            if rnd < 1:
                raise RatingsError(f"{path}:{line}: round {rnd} is not an integer >= 1")
        before = latest.get((sid, rater))
        if before is not None and before[0] == rnd:
            raise RatingsError(f"{path}:{line}: rater {rater!r} rated {sid!r} twice"
                               + (f" in round {rnd}" if rounds else ""))
        if before is None or rnd > before[0]:
            latest[(sid, rater)] = (rnd, score)
    return {key: score for key, (_, score) in latest.items()}


def consensus(scores: dict[str, list[int]], replica_min_score: int = 3) -> dict[str, dict]:
    """Consensus per volume (:func:`rating_rule`): mean score over raters; replica when it is
    >= replica_min_score.

    With two raters who disagree on the decision (e.g. 2 and 3 -> 2.5), the volume
    counts as a non-replica here; the paper resolved such cases by re-rating, so such a
    volume (and one whose scores lie two or more points apart) gets ``rerate``.
    """
    out = {}
    for sid, s in scores.items():
        mean = float(np.mean(s))
        disagree = len({x >= replica_min_score for x in s}) > 1
        spread = int(max(s) - min(s))
        out[sid] = {"score": mean, "n_raters": len(s), "replica": mean >= replica_min_score,
                    "disagree": disagree, "spread": spread, "rerate": disagree or spread >= 2}
    return out


def rerating_list(cons: dict[str, dict]) -> list[str]:
    """The volumes :func:`consensus` flags for re-rating, in id order."""
    return sorted(sid for sid, c in cons.items() if c["rerate"])


def write_reference_ratings(path: str | Path, spiked_rows: list[dict], rater: str = "reference") -> None:
    """The spiked set's truth as a rating table (the same format human raters fill in)."""
    write_tsv(path, [{"synthetic_id": r["id"], "rater": rater, "score": r["likert"]} for r in spiked_rows],
              COLUMNS)


def read_ratings_by_rater(path: str | Path, synthetic_ids: list[str] | None = None) -> dict[str, dict[str, int]]:
    """``{rater: {synthetic_id: score}}`` from a ratings TSV (same checks and rounds as read_ratings)."""
    out: dict[str, dict[str, int]] = {}
    for (sid, rater), score in _latest_scores(path, synthetic_ids).items():
        out.setdefault(rater, {})[sid] = score
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
