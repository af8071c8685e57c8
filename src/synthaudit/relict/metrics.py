"""The aggregates of results/metrics/relict.json and copies.json (rule relict_metrics).

Why here: which numbers `dvc metrics diff` shows is a decision about the results, not file
handling; as functions of the outputs already read, it is tested without Snakemake (issue 44).
relict.json holds one entry per dataset and measure; copies.json per dataset: Dar et al.'s copy
counts from the combined calibrated calls, and the local level's calls and positive controls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import registry

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity", "auc", "n_synthetic", "n_replicas")
# newer keys: evaluation summaries written before them lack them (read with .get)
OPTIONAL_KEYS = ("balanced_accuracy_any_threshold",)
COMBINED_KEYS = ("n_copies", "percent_synthetic_copies", "n_patients_copied", "percent_patients_copied",
                 "sensitivity", "specificity", "balanced_accuracy")


def measure_entry(measure: str, rows: Sequence[dict], search: Mapping, copies: Mapping | None = None,
                  embedding_meta: Mapping | None = None, evaluation: Mapping | None = None) -> dict:
    """One measure of one dataset: its ranking's ``rows`` (read_ranking), its search report,
    the dataset's copies.json summary (None: no calibration), its embeddings' metadata (feature
    level) and its rated evaluation (None: no ratings)."""
    e = {"level": registry.get(measure).level, "n_closest_used": rows[0]["n_used"],
         "min_score": min(r["score"] for r in rows)}
    e["search_mode"] = search["mode"]  # relict.search: how the pairs were searched
    e["search_pairs_fraction"] = search["pairs_fraction"]
    e["search_recall_top_n"] = search["recall_top_n"]
    if search["mode"] in ("shortlist", "candidates"):  # measured on rows also searched exhaustively
        e["search_n_sampled"] = search["n_sampled"]
        e["search_min_recall"] = search["min_recall"]
        e["search_max_ratio_error"] = search["max_ratio_error"]
        if search.get("heldout"):
            e["search_heldout_recall_top_n"] = search["heldout"]["recall_top_n"]
        if search.get("calls_changed") is not None:
            e["search_calls_changed"] = search["calls_changed"]
        e["search_recall_ok"] = search["recall_ok"]
    called = [r["calibrated_replica"] for r in rows if r["calibrated_replica"] is not None]
    if called:  # held-out-calibrated calls (relict.calibration)
        e["calibrated_n_called"] = int(sum(called))
        e["calibration_n_heldout"] = min(r["n_null"] for r in rows)
        h = (copies or {}).get("measures", {}).get(measure)
        if h:  # Dar et al.'s two numbers for this measure's calls (combined: copies.json)
            e["calibrated_percent_synthetic_copies"] = h["percent_synthetic_copies"]
            e["calibrated_n_patients_copied"] = h["n_patients_copied"]
            e["calibrated_percent_patients_copied"] = h["percent_patients_copied"]
    if registry.get(measure).level == "feature":
        e["extractor"] = embedding_meta["label"]  # says "untrained" when no weights were given
        if embedding_meta.get("grid_used") is not None:  # the pooling grid on this dataset's grid (only down)
            e["feature_grid_used"] = "x".join(map(str, embedding_meta["grid_used"]))
    if evaluation is not None:
        ev = evaluation["measures"][measure]
        e.update({k: ev[k] for k in KEYS})
        e.update({k: ev[k] for k in OPTIONAL_KEYS if ev.get(k) is not None})
        ci = ev.get("ci") or {}  # out-of-bag bootstrap: tuned on a resample, scored on the rest
        for k in ("threshold", "balanced_accuracy", "sensitivity", "specificity"):
            if ci.get(k) is not None:
                e[f"{k}_ci_low"], e[f"{k}_ci_high"] = ci[k]
        for k in ("balanced_accuracy", "sensitivity", "specificity"):
            value = (ci.get("out_of_sample") or {}).get(k)
            if value is not None:
                e[f"{k}_out_of_sample"] = value
        for k in ("sensitivity", "specificity", "balanced_accuracy"):  # calibrated, next to the tuned ones
            value = (ev.get("calibrated") or {}).get(k)
            if value is not None:
                e[f"calibrated_{k}"] = value
    return e


def add_augmentation(entry: dict, augmentation: Mapping) -> None:
    """Detection per replica kind (plain and each augmentation), into the measures' entries."""
    for m, kinds in augmentation.items():
        for kind, values in kinds.items():
            entry[m][f"by_kind_{kind}"] = values


def copies_entry(summary: Mapping) -> dict:
    """copies.json's combined calibrated calls of one dataset (any measure calls it at the rate)."""
    c = summary["combined"]
    return {"rate": summary["rate"], "n_heldout": summary["n_heldout"],
            **{k: c[k] for k in COMBINED_KEYS if c.get(k) is not None}}


def local_entry(summary: Mapping) -> dict:
    """copies.json's local-level numbers (local.json): calls, the held-out check, the controls per size."""
    entry = {"local_n_called": summary["n_called"], "local_anatomy_blocks": summary["n_anatomy_blocks"],
             "local_heldout_false_positive_rate": summary["heldout_false_positive_rate"]}
    for size, c in ((summary.get("controls") or {}).get("by_size_mm") or {}).items():
        entry[f"local_control_{size}mm_sensitivity"] = c["sensitivity"]
        entry[f"local_control_{size}mm_whole_volume_rmse_sensitivity"] = c["whole_volume_rmse_sensitivity"]
        if (c.get("by_distinctiveness") or {}).get("high") is not None:  # the most distinctive third
            entry[f"local_control_{size}mm_distinctive_sensitivity"] = c["by_distinctiveness"]["high"]
    return entry
