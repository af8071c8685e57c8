"""The review tables of RELICT: runtime (Table 2), agreement between measures, the
combined ranking, tuned thresholds and the filter of later synthetic sets.

Why a module of pure functions: these tables are what a reader compares with the
paper (Table 2, "the closest images identified by RMSE ... were also identified by
all other measures as the closest image in 47 out of 50", section 3) and what decides
which synthetic volumes may be shared (paper 2.2, automation step 6). Every number
must therefore be testable on hand-made tables, away from Snakemake; the rule scripts
only read files, call these functions and write the results.

Only numpy and the standard library are used (the figures environment has no scipy).
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..io import read_tsv
from ..ratings import agreement
from .. import registry

# RELICT Table 1: the Likert scale of the visual rating, with the paper's descriptions.
LIKERT_SCALE = [
    (1, "Certainly not a replica", "Two different images, no resemblances."),
    (2, "Probably not a replica",
     "Images are different, with considerable differences in anatomy, pathology or background."),
    (3, "Probably a replica",
     "Images are very similar, with some minor differences in anatomy, pathology or background."),
    (4, "Certainly a replica", "Images are mostly identical."),
]

_MISSING = ("", "-", "NA", "nan", "NaN")


class ReviewError(ValueError):
    """A review table that cannot be built; the message names the dataset, measure or file."""


class FilterError(ReviewError):
    """The filter cannot apply tuned thresholds; the message names the dataset and what is missing."""


# ---------------------------------------------------------------------------
# Reading the pipeline's tables (rankings: relict.ranking.read_ranking)
# ---------------------------------------------------------------------------

def volume_id(path) -> str:
    """The id of a volume from its file name (``.../images/{id}.nii.gz`` -> ``id``)."""
    name = Path(path).name
    for ext in (".nii.gz", ".nii"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return Path(path).stem


def rankings_and_reference(measures, paths, reference_measure, warn) -> tuple[dict[str, list[dict]], str, str | None]:
    """Each measure's ranking, the measure the review compares with, and why another one
    than asked for when so (also passed to ``warn``)."""
    from ..relict.ranking import read_ranking

    rankings = {m: read_ranking(p) for m, p in zip(measures, paths)}
    reference, note = resolve_measure(reference_measure, list(measures))
    if note:
        warn(note)
    return rankings, reference, note


def resolve_measure(wanted: str, available: Sequence[str]) -> tuple[str, str | None]:
    """The measure to use for a dataset: ``wanted`` if computed there, else the first computed one.

    Why a fallback instead of an error: ``relict.review.*_measure`` is global, while a
    dataset may run other measure families (e.g. segmentation level only); the review
    tables should still be built. The returned note is written to the log and output.

    Returns:
        ``(measure, note)``; note is None when ``wanted`` was available.
    """
    if not available:
        raise ReviewError("no measures computed for this dataset")
    if wanted in available:
        return wanted, None
    return available[0], f"{wanted} is not computed for this dataset; using {available[0]} instead"


def figure6_choice(setting, dataset: str) -> str | None:
    """The synthetic id chosen for Figure 6 (``relict.review.figure6_synthetic``).

    The setting is null (the volume ranked first by the reference measure), one id, or
    ``{dataset: id}`` so several datasets can each name their own volume.
    """
    if isinstance(setting, Mapping):
        return setting.get(dataset)
    return setting or None


def paths_by_id(paths: Sequence) -> dict[str, str]:
    """``{id: path}`` for volume files named ``{id}.nii.gz``; refuses duplicate ids."""
    out: dict[str, str] = {}
    for p in paths:
        i = volume_id(p)
        if i in out:
            raise ReviewError(f"two volumes with id {i!r}: {out[i]} and {p}")
        out[i] = str(p)
    return out


# ---------------------------------------------------------------------------
# Table 2: runtime per measure
# ---------------------------------------------------------------------------

def _number(value) -> float | None:
    if value is None or str(value).strip() in _MISSING:
        return None
    return float(value)


def read_benchmark(path) -> dict:
    """Wall time, CPU time and peak memory of one Snakemake benchmark file.

    Snakemake writes one row per repeat (``benchmark: repeat(...)``) and ``-`` or
    ``NA`` where psutil could not measure (very short jobs). Repeats are averaged
    for the times (the runtime one can expect) and maximised for memory (what one
    must provision).

    Returns:
        ``{"s", "cpu_time_s", "max_rss_mb", "repeats"}``; the last two may be None.
    """
    rows = read_tsv(path)
    if not rows or "s" not in rows[0]:
        raise ReviewError(f"{path}: not a Snakemake benchmark file (no 's' column)")
    secs = [_number(r["s"]) for r in rows]
    if any(s is None for s in secs):
        raise ReviewError(f"{path}: a benchmark row has no wall time")
    cpu = [_number(r.get("cpu_time")) for r in rows]
    rss = [_number(r.get("max_rss")) for r in rows]
    cpu = [c for c in cpu if c is not None]
    rss = [m for m in rss if m is not None]
    return {"s": sum(secs) / len(secs), "cpu_time_s": sum(cpu) / len(cpu) if cpu else None,
            "max_rss_mb": max(rss) if rss else None, "repeats": len(rows)}


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _max(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def combine_benchmarks(benchmarks: Sequence[dict]) -> dict | None:
    """Several jobs that together make one step (e.g. one segmentation job per volume):
    times add up, the peak memory is the largest of them. None when there are none."""
    if not benchmarks:
        return None
    cpu = [b["cpu_time_s"] for b in benchmarks if b["cpu_time_s"] is not None]
    rss = [b["max_rss_mb"] for b in benchmarks if b["max_rss_mb"] is not None]
    return {"s": sum(b["s"] for b in benchmarks), "cpu_time_s": sum(cpu) if cpu else None,
            "max_rss_mb": max(rss) if rss else None, "jobs": len(benchmarks)}


RUNTIME_COLUMNS = ["measure", "label", "level", "compare_s", "extraction_s", "total_s", "total_min",
                   "cpu_time_s", "max_rss_mb", "model_training_s", "note"]


def runtime_table(measures: Sequence[str], compare: Mapping[str, dict], embed: dict | None = None,
                  segment: dict | None = None, segment_training: dict | None = None,
                  segment_note: str = "label maps were not computed here: segmentation time 0") -> list[dict]:
    """RELICT Table 2 for one dataset: the runtime of each measure.

    A measure's runtime is the time of its all-pairs comparison job plus what it needs
    first: feature-level measures the embedding of the training and synthetic sets,
    segmentation-level measures the label maps of both. The paper reports each
    measure's runtime as if run alone, so a shared extraction (both embedding measures
    use the same embeddings) is counted in each of them; the note says so. Training a
    segmentation model is a one-off cost of the use case, not of auditing one
    synthetic set, so it has its own column and is not in the total.

    Args:
        measures: Measure names, in table order.
        compare: ``{measure: read_benchmark(...)}`` of the comparison jobs.
        embed: :func:`combine_benchmarks` of the embedding jobs (train + synthetic).
        segment: :func:`combine_benchmarks` of the label-map jobs, or None when the
            label maps were given (then extraction 0 and ``segment_note``).
        segment_training: Benchmark of the segmentation model's training, if any.
        segment_note: Note written when ``segment`` is None.

    Returns:
        One row per measure with ``RUNTIME_COLUMNS``; CPU time and peak RSS combine
        the comparison and extraction jobs (sum and maximum).

    Raises:
        ReviewError: A measure without a comparison benchmark, or a feature measure
            without its embedding benchmarks.
    """
    rows = []
    for m in measures:
        info = registry.get(m)
        if m not in compare:
            raise ReviewError(f"{m}: no benchmark of its comparison job")
        c = compare[m]
        extraction, training, note = None, None, ""
        if info.level == "feature":
            if embed is None:
                raise ReviewError(f"{m}: feature-level measure without the embedding benchmarks")
            extraction = embed
            note = ("extraction = embedding of the training and synthetic sets (shared by the feature-level "
                    "measures, counted in each)")
        elif info.level == "segmentation":
            if segment is None:
                note = segment_note
            else:
                extraction = segment
                note = ("extraction = label maps of the training and synthetic sets (shared by the "
                        "segmentation-level measures, counted in each)")
            if segment_training is not None:
                training = segment_training["s"]
                note += "; model_training_s (segmentation model, once per use case) is not in the total"
        extraction_s = 0.0 if extraction is None else extraction["s"]
        cpu, rss = c["cpu_time_s"], c["max_rss_mb"]
        if extraction is not None:
            cpu, rss = _add(cpu, extraction["cpu_time_s"]), _max(rss, extraction["max_rss_mb"])
        total = c["s"] + extraction_s
        rows.append({"measure": m, "label": info.label, "level": info.level, "compare_s": c["s"],
                     "extraction_s": extraction_s, "total_s": total, "total_min": total / 60.0,
                     "cpu_time_s": cpu, "max_rss_mb": rss, "model_training_s": training, "note": note})
    return rows


def runtime_overview(per_dataset: Mapping[str, list[dict]], digits: int = 2) -> tuple[list[dict], list[str]]:
    """The paper's Table 2 layout: one row per measure, one column per dataset (minutes).

    Rows follow the measure registry's order (image, feature, segmentation level), as
    in the paper; a measure not run on a dataset has None there (the paper's "-").

    Returns:
        ``(rows, columns)`` with columns ``measure, label, level`` and the dataset names.
    """
    minutes: dict[str, dict[str, float]] = {}
    for ds, rows in per_dataset.items():
        for r in rows:
            minutes.setdefault(r["measure"], {})[ds] = round(float(r["total_min"]), digits)
    order = [m for m in registry.MEASURES if m in minutes] + sorted(m for m in minutes if m not in registry.MEASURES)
    out = []
    for m in order:
        info = registry.get(m)
        row = {"measure": m, "label": info.label, "level": info.level}
        row.update({ds: minutes[m].get(ds) for ds in per_dataset})
        out.append(row)
    return out, ["measure", "label", "level", *per_dataset]


# ---------------------------------------------------------------------------
# Agreement of the closest training volume between measures (paper section 3.2)
# ---------------------------------------------------------------------------

def _closest_by_id(rankings: Mapping[str, list[dict]]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Synthetic ids (sorted) and ``{measure: {synthetic_id: closest_training_id}}``; checks the id sets."""
    if not rankings:
        raise ReviewError("no rankings given")
    closest = {m: {r["synthetic_id"]: r["closest_training_id"] for r in rows} for m, rows in rankings.items()}
    first = next(iter(closest))
    ids = sorted(closest[first])
    for m, c in closest.items():
        if sorted(c) != ids:
            diff = sorted(set(c) ^ set(ids))
            raise ReviewError(f"rankings of {first} and {m} rank different synthetic volumes "
                              f"(e.g. {diff[:3]})")
    return ids, closest


def closest_agreement(rankings: Mapping[str, list[dict]], reference: str) -> dict:
    """How often each measure picks the same closest training volume as the reference.

    RELICT paired every synthetic volume with its closest training volume by RMSE for
    the visual rating, then asked whether the other measures would have chosen the
    same partner (47 of 50 NCCT volumes: all measures agreed; TOF-MRA: none). If they
    disagree, the rating judged a pair that another measure would not have shown.

    Args:
        rankings: ``{measure: ranking rows}``; all must rank the same synthetic ids.
        reference: The measure the others are compared with (must be in ``rankings``).

    Returns:
        ``{"reference", "measures", "n_synthetic", "per_measure": {m: {"n_same",
        "fraction_same"}}, "n_all_agree", "fraction_all_agree", "disagreements":
        [{"synthetic_id", "closest": {m: id}}]}``.
    """
    if reference not in rankings:
        raise ReviewError(f"reference measure {reference!r} is not among the rankings {list(rankings)}")
    ids, closest = _closest_by_id(rankings)
    n = len(ids)
    ref = closest[reference]
    per = {}
    for m, c in closest.items():
        same = sum(c[i] == ref[i] for i in ids)
        per[m] = {"n_same": same, "fraction_same": same / n if n else None}
    disagreements = [{"synthetic_id": i, "closest": {m: c[i] for m, c in closest.items()}}
                     for i in ids if len({c[i] for c in closest.values()}) > 1]
    n_all = n - len(disagreements)
    return {"reference": reference, "measures": list(rankings), "n_synthetic": n, "per_measure": per,
            "n_all_agree": n_all, "fraction_all_agree": n_all / n if n else None,
            "disagreements": disagreements}


CLOSEST_AGREEMENT_COLUMNS = ["measure", "label", "reference", "n_synthetic", "n_same_closest", "fraction_same"]


def closest_agreement_rows(summary: dict) -> list[dict]:
    """Rows for closest_agreement.tsv: one per measure, then ``all`` (every measure agrees)."""
    rows = [{"measure": m, "label": registry.get(m).label, "reference": summary["reference"],
             "n_synthetic": summary["n_synthetic"], "n_same_closest": p["n_same"],
             "fraction_same": p["fraction_same"]} for m, p in summary["per_measure"].items()]
    rows.append({"measure": "all", "label": "all measures agree", "reference": summary["reference"],
                 "n_synthetic": summary["n_synthetic"], "n_same_closest": summary["n_all_agree"],
                 "fraction_same": summary["fraction_all_agree"]})
    return rows


# ---------------------------------------------------------------------------
# Combined ranking across measures
# ---------------------------------------------------------------------------

def thresholds_from_evaluation(evaluation: dict, measures: Sequence[str]) -> dict[str, float | None]:
    """``{measure: optimal threshold or None}`` from an evaluation.json (None: no threshold found)."""
    got = evaluation.get("measures", {})
    out = {}
    for m in measures:
        t = got.get(m, {}).get("threshold")
        out[m] = None if t is None or (isinstance(t, float) and math.isnan(t)) else float(t)
    return out


def combined_ranking_columns(measures: Sequence[str]) -> list[str]:
    cols = ["synthetic_id", "mean_rank", "n_replica_calls", "n_measures"]
    for m in measures:
        cols += [f"{m}_rank", f"{m}_closest", f"{m}_score", f"{m}_replica"]
    return cols


def combined_ranking(rankings: Mapping[str, list[dict]],
                     thresholds: Mapping[str, float | None] | None = None) -> list[dict]:
    """One row per synthetic volume with its rank under every measure, sorted by mean rank.

    Why: a reviewer wants one list to work down (paper 2.2, automation step 5), and a
    volume that every measure puts near the top is a stronger candidate than one only
    a single measure flags. With a rating, each measure's call at its optimal threshold
    (replica when score <= threshold, paper 2.4 and 2.7) is counted.

    Args:
        rankings: ``{measure: ranking rows}`` over the same synthetic ids.
        thresholds: ``{measure: threshold or None}`` (rated datasets), or None
            (unrated: no calls, ``n_replica_calls`` is None).

    Returns:
        Rows with :func:`combined_ranking_columns`; sorted by mean rank, ties by id.
        ``n_replica_calls`` counts measures calling the volume a replica among those
        with a threshold; ``{m}_replica`` is 1/0, or None without a threshold.
    """
    ids, _ = _closest_by_id(rankings)
    by_id = {m: {r["synthetic_id"]: r for r in rows} for m, rows in rankings.items()}
    out = []
    for i in ids:
        row = {"synthetic_id": i, "n_measures": len(rankings)}
        ranks, calls = [], None if thresholds is None else 0
        for m in rankings:
            r = by_id[m][i]
            ranks.append(r["rank"])
            t = None if thresholds is None else thresholds.get(m)
            call = None if t is None else int(r["score"] <= t)
            if call is not None:
                calls += call
            row.update({f"{m}_rank": r["rank"], f"{m}_closest": r["closest_training_id"],
                        f"{m}_score": r["score"], f"{m}_replica": call})
        row["mean_rank"] = sum(ranks) / len(ranks)
        row["n_replica_calls"] = calls
        out.append(row)
    out.sort(key=lambda r: (r["mean_rank"], r["synthetic_id"]))
    return out


# ---------------------------------------------------------------------------
# Tuned thresholds and the filter of later synthetic sets (paper 2.2, step 6)
# ---------------------------------------------------------------------------

def score_kind(measure: str) -> str:
    """What a measure's replica score is: the distance ratio, or the absolute distance."""
    return "distance ratio" if registry.get(measure).uses_ratio else "absolute distance"


_THRESHOLD_KEYS = ("balanced_accuracy", "sensitivity", "specificity", "auc", "n_synthetic", "n_replicas")


def tuned_thresholds(dataset: str, evaluation: dict, measures: Sequence[str],
                     n_used: Mapping[str, int] | None = None) -> dict:
    """The optimal threshold of every measure, as tuned on a dataset's rating.

    Why a separate file: these thresholds are the deliverable of RELICT's automation
    (paper 2.2, step 6) - tuned once on a rated set, then applied to later synthetic
    sets of the same use case without rating them again. The file records what the
    threshold applies to (ratio or absolute distance, n of the ratio) so a filter can
    refuse to use it where it does not fit.

    Args:
        dataset: The rated dataset.
        evaluation: Its evaluation.json.
        measures: Measures to export.
        n_used: ``{measure: n of the distance ratio}`` from its rankings.

    Returns:
        ``{"dataset", "ratings", "measures": {m: {"threshold", "score", "level",
        "n_used", "threshold_ci", balanced_accuracy, ...}}}``; a measure whose rating
        had one class only has threshold None.
    """
    ev = evaluation.get("measures", {})
    out = {}
    for m in measures:
        if m not in ev:
            raise ReviewError(f"dataset {dataset}: evaluation has no measure {m!r} (has {sorted(ev)})")
        e = ev[m]
        t = thresholds_from_evaluation(evaluation, [m])[m]
        entry = {"threshold": t, "score": score_kind(m), "level": registry.get(m).level,
                 "n_used": None if n_used is None else n_used.get(m),
                 "threshold_ci": (e.get("ci") or {}).get("threshold")}
        entry.update({k: e.get(k) for k in _THRESHOLD_KEYS})
        out[m] = entry
    return {"dataset": dataset, "ratings": evaluation.get("ratings"), "measures": out}


def check_filter_source(dataset: str, source: str | None, datasets: Sequence[str],
                        rated: Sequence[str]) -> None:
    """Refuse a ``filter_with`` that names no other, rated dataset.

    Raises:
        FilterError: naming the dataset and the problem.
    """
    if not source:
        raise FilterError(f"dataset {dataset}: no filter_with dataset given")
    if source == dataset:
        raise FilterError(f"dataset {dataset}: filter_with names the dataset itself; thresholds must be "
                          "tuned on another, rated dataset")
    if source not in datasets:
        raise FilterError(f"dataset {dataset}: filter_with: {source!r} is not a dataset in params.yaml "
                          f"(known: {sorted(datasets)})")
    if source not in rated:
        raise FilterError(f"dataset {dataset}: filter_with: {source!r} has no rating, so it has no tuned "
                          f"thresholds; give {source} a ratings file (datasets.{source}.ratings) first")


def filter_columns(measures: Sequence[str]) -> list[str]:
    cols = ["synthetic_id", "rejected_by"]
    for m in measures:
        cols += [f"{m}_score", f"{m}_threshold", f"{m}_closest_training_id"]
    return cols


def filter_synthetic(dataset: str, rankings: Mapping[str, list[dict]], thresholds: dict,
                     measures: Sequence[str]) -> tuple[list[dict], list[dict], dict]:
    """Apply thresholds tuned on a rated dataset to another dataset's rankings.

    A volume is rejected when ANY listed measure calls it a replica (score <=
    threshold): sharing a replica is the costly error, so one alarm is enough.

    Args:
        dataset: The dataset being filtered.
        rankings: ``{measure: ranking rows}`` of that dataset (at least ``measures``).
        thresholds: The source dataset's thresholds.json (:func:`tuned_thresholds`).
        measures: The measures to apply (``relict.review.filter_measures``).

    Returns:
        ``(kept, rejected, summary)``; rows carry :func:`filter_columns` and keep the
        order of the first measure's ranking.

    Raises:
        FilterError: No measures; a measure without a tuned threshold in the source,
            without a ranking here, or whose score kind differs between the two.
    """
    source = thresholds.get("dataset", "?")
    if not measures:
        raise FilterError(f"dataset {dataset}: relict.review.filter_measures is empty")
    tuned = thresholds.get("measures", {})
    for m in measures:
        if m not in tuned or tuned[m].get("threshold") is None:
            why = "was not evaluated there" if m not in tuned else "has no optimal threshold there " \
                  "(the rating has one class only)"
            raise FilterError(f"dataset {dataset}: cannot filter with {m}: it {why} "
                              f"(thresholds tuned on {source})")
        if m not in rankings:
            raise FilterError(f"dataset {dataset}: no ranking of {m} to filter with")
        if tuned[m].get("score") not in (None, score_kind(m)):
            raise FilterError(f"dataset {dataset}: {m}'s threshold in {source} is for a {tuned[m]['score']}, "
                              f"this dataset's score is a {score_kind(m)}")
    sub = {m: rankings[m] for m in measures}
    ids, _ = _closest_by_id(sub)
    by_id = {m: {r["synthetic_id"]: r for r in rows} for m, rows in sub.items()}
    order = [r["synthetic_id"] for r in rankings[measures[0]]]
    kept, rejected, warnings = [], [], []
    for m in measures:
        src_n = tuned[m].get("n_used")
        here = {r.get("n_used") for r in rankings[m]} - {None}
        if src_n is not None and here and here != {src_n}:
            warnings.append(f"{m}: distance ratio uses n={sorted(here)} here but n={src_n} in {source}; "
                            "the ratio threshold may not transfer")
    for i in order:
        row, by = {"synthetic_id": i}, []
        for m in measures:
            r, t = by_id[m][i], float(tuned[m]["threshold"])
            if r["score"] <= t:
                by.append(m)
            row.update({f"{m}_score": r["score"], f"{m}_threshold": t,
                        f"{m}_closest_training_id": r["closest_training_id"]})
        row["rejected_by"] = ",".join(by)
        (rejected if by else kept).append(row)
    summary = {"dataset": dataset, "thresholds_from": source, "ratings": thresholds.get("ratings"),
               "measures": list(measures), "rule": "rejected when any measure's score <= its threshold",
               "thresholds": {m: tuned[m]["threshold"] for m in measures},
               "n_synthetic": len(ids), "n_kept": len(kept), "n_rejected": len(rejected),
               "rejected_by_measure": {m: sum(m in r["rejected_by"].split(",") for r in rejected)
                                       for m in measures},
               "warnings": warnings}
    return kept, rejected, summary


def filter_against_rating(rejected_ids: Sequence[str], all_ids: Sequence[str],
                          replica: Mapping[str, bool]) -> dict:
    """How the filter's decisions on a new dataset compare with that dataset's own rating.

    Why: thresholds are tuned on one rated set and then trusted on later sets (RELICT's
    automated detection); when a later set is rated too (or has a known truth), this is
    the held-out check of that transfer. Ids without a rating are left out and counted.
    """
    rejected = set(rejected_ids)
    rated = [i for i in all_ids if i in replica]
    tp = sum(1 for i in rated if replica[i] and i in rejected)
    fn = sum(1 for i in rated if replica[i] and i not in rejected)
    tn = sum(1 for i in rated if not replica[i] and i not in rejected)
    fp = sum(1 for i in rated if not replica[i] and i in rejected)
    sens = tp / (tp + fn) if tp + fn else None
    spec = tn / (tn + fp) if tn + fp else None
    ba = (sens + spec) / 2 if sens is not None and spec is not None else None
    return {"n_rated": len(rated), "n_unrated": len(all_ids) - len(rated), "true_positive": tp,
            "false_negative": fn, "true_negative": tn, "false_positive": fp, "sensitivity": sens,
            "specificity": spec, "balanced_accuracy": ba}


FILTER_SUMMARY_COLUMNS = ["dataset", "thresholds_from", "measures", "n_synthetic", "n_kept", "n_rejected",
                          "sensitivity", "specificity", "balanced_accuracy"]


def filter_summary_row(summary: Mapping) -> dict:
    """One row of results/filter/summary.tsv from a dataset's filter summary.json."""
    check = summary.get("against_rating") or {}
    return {"dataset": summary["dataset"], "thresholds_from": summary["thresholds_from"],
            "measures": ",".join(summary["measures"]), "n_synthetic": summary["n_synthetic"],
            "n_kept": summary["n_kept"], "n_rejected": summary["n_rejected"],
            "sensitivity": check.get("sensitivity"), "specificity": check.get("specificity"),
            "balanced_accuracy": check.get("balanced_accuracy")}


# ---------------------------------------------------------------------------
# Inter-rater agreement (paper 2.5 and 3.1)
# ---------------------------------------------------------------------------

DISAGREEMENT_COLUMNS = ["synthetic_id", "rater_1", "score_1", "rater_2", "score_2", "mean_score"]


def rater_summary(by_rater: Mapping[str, Mapping[str, int]], replica_min_score: int = 3) -> dict:
    """Per rater: volumes rated, replicas called, median Likert score (paper 3.1 reports these)."""
    out = {}
    for rater in sorted(by_rater):
        s = list(by_rater[rater].values())
        out[rater] = {"n_rated": len(s), "n_replicas": sum(x >= replica_min_score for x in s),
                      "median_score": statistics.median(s) if s else None}
    return out


def rating_agreement(by_rater: Mapping[str, Mapping[str, int]], replica_min_score: int = 3) -> tuple[dict, list[dict]]:
    """Agreement between the raters and the volumes to re-rate (paper 2.5).

    RELICT's two raters scored each pair independently; where their replica decisions
    differed, both re-rated those volumes. This reports percent agreement and Cohen's
    kappa on the decision, kappa on the Likert scores (first two raters by name, as
    ``ratings.agreement``), every pair of raters when there are more, and the list to
    re-rate. With one rater (e.g. the spiked set's reference truth) agreement is
    undefined: the numbers are None and a note says why.

    Returns:
        ``(summary, disagreement_rows)`` with rows in ``DISAGREEMENT_COLUMNS``.
    """
    raters = sorted(by_rater)
    main = agreement(dict(by_rater), replica_min_score)
    summary = {
        "raters": raters, "n_raters": len(raters), "replica_min_score": replica_min_score,
        "compared": main["raters"] if len(raters) >= 2 else [],
        "n": main["n_common"], "percent_agreement": main["percent_agreement"],
        "kappa_decision": main["kappa_decision"], "kappa_likert": main["kappa_likert"],
        "n_disagreements": len(main["disagreements"]), "per_rater": rater_summary(by_rater, replica_min_score),
        "note": None,
    }
    if len(raters) < 2:
        summary["note"] = (f"only {len(raters)} rater ({', '.join(raters) or 'none'}): inter-rater agreement "
                           "needs two or more raters; the numbers are null")
    elif len(raters) > 2:
        pairs = []
        for a_i, a in enumerate(raters):
            for b in raters[a_i + 1:]:
                p = agreement({a: by_rater[a], b: by_rater[b]}, replica_min_score)
                pairs.append({k: p[k] for k in ("raters", "n_common", "percent_agreement", "kappa_decision",
                                                 "kappa_likert")})
        summary["pairs"] = pairs
        summary["note"] = f"{len(raters)} raters: the headline numbers compare {raters[0]} and {raters[1]}; " \
                          "see pairs for every pair"
    if main["n_common"] == 0 and len(raters) >= 2:
        summary["note"] = f"raters {raters[0]} and {raters[1]} rated no common volume"
    rows = []
    if len(raters) >= 2:
        r1, r2 = main["raters"]
        for d in main["disagreements"]:
            a, b = d[r1], d[r2]
            rows.append({"synthetic_id": d["synthetic_id"], "rater_1": r1, "score_1": a, "rater_2": r2,
                         "score_2": b, "mean_score": (a + b) / 2})
    return summary, rows


# ---------------------------------------------------------------------------
# HTML for the report
# ---------------------------------------------------------------------------

def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "&ndash;"
    if isinstance(v, float):
        return html.escape(f"{v:.4g}")
    return html.escape(str(v))


def html_table(rows: Sequence[Mapping], columns: Sequence[str]) -> str:
    """An HTML table of rows (floats to 4 significant digits, missing as a dash)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table border='1' cellpadding='3' style='border-collapse:collapse'><tr>{head}</tr>\n{body}</table>"


def html_page(title: str, sections: Sequence[str]) -> str:
    """A self-contained HTML page (the Snakemake report embeds it as is)."""
    t = html.escape(title)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{t}</title></head>"
            f"<body style='font-family:sans-serif'><h2>{t}</h2>\n" + "\n".join(sections) + "\n</body></html>\n")


def likert_html() -> str:
    """RELICT Table 1 as HTML, for the rating sheet."""
    rows = [{"score": s, "point": p, "description": d} for s, p, d in LIKERT_SCALE]
    return html_table(rows, ["score", "point", "description"])

