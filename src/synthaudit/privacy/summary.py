"""The privacy filters' headline numbers, gathered from every ``evaluation.json``.

Why here and not in the rule script: ``results/metrics/privacy.json`` is what ``dvc
metrics diff`` compares between runs and ``results/privacy/summary.tsv`` what a reader
scans, so which number lands under which key must be testable on hand-made
evaluations. Standard library and numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

SUMMARY_COLUMNS = ["training_set", "space", "synthetic", "n", "flagged", "flag_rate", "tau", "verification_auc",
                   "specificity", "sensitivity_overall", "sensitivity_same_patient_max",
                   "sensitivity_same_patient_mean", "replica_flag_rate", "nonreplica_flag_rate", "unanimous_fraction",
                   "attribution_unanimous_fraction", "learned_fraction", "recall"]  # times: runtime.json
# what the log line quotes per training set and space
HEADLINE_KEYS = ("verification_auc", "specificity", "seconds_per_epoch")


def _get(d, *keys):
    """``d[k1][k2]...``, None where a level is missing (older or partial evaluations)."""
    for k in keys:
        if d is None:
            return None
        d = d.get(k)
    return d


def metrics_entry(ev: Mapping) -> dict:
    """One evaluation's numbers for privacy.json (per synthetic set under ``synthetic``)."""
    filters = [s for n, s in ev["seconds_per_epoch"].items() if n.startswith("filter")]
    entry = {
        "verification_auc": _get(ev, "verification", "auc"),
        "verification_auc_ci": _get(ev, "verification", "auc_ci"),
        # threshold metrics on all held-out pairs (about 1 positive : 8 negatives on the demo) ...
        "verification_accuracy_all_pairs": _get(ev, "verification", "accuracy"),
        "verification_f1_all_pairs": _get(ev, "verification", "f1"),
        # ... and on balanced pairs, as Packhäuser et al. report them
        **{f"verification_{k}_balanced": _get(ev, "verification_balanced", k)
           for k in ("auc", "accuracy", "specificity", "recall", "precision", "f1")},
        "auc_by_head": _get(ev, "verification", "auc_by_head"),
        "verification_auc_ci_unit": _get(ev, "verification", "bootstrap_unit"),
        "retrieval_map_at_r": _get(ev, "retrieval", "map_at_r"),
        "retrieval_r_precision": _get(ev, "retrieval", "r_precision"),
        "retrieval_precision_at_1": _get(ev, "retrieval", "precision_at_1"),
        "tau": ev["tau"],
        "specificity": ev["specificity"]["specificity"],
        "sensitivity_heldout": ev["sensitivity"]["heldout_patients"],
        "sensitivity_training": ev["sensitivity"]["training_patients"],
        "seconds_per_epoch": float(np.mean(filters)),
        "synthetic": {},
    }
    if ev.get("per_filter") and "specificity" in ev["per_filter"][0]:  # evaluations before the spread lack it
        entry["seed_spread"] = seed_spread(ev["per_filter"])
    for name, s in ev["synthetic"].items():
        c = s["consistency"]
        entry["synthetic"][name] = {
            "flag_rate": s["flag_rate"],
            "unanimous_fraction": c["unanimous_fraction"],
            "unanimous_flagged": c["unanimous_flagged"], "unanimous_accepted": c["unanimous_accepted"],
            "attribution_unanimous_fraction": c["attribution_unanimous_fraction"],
            "near_duplicates": s.get("near_duplicates"),
            "recall": s["recall"],
        }
    return entry


def _spread(values: Sequence) -> dict | None:
    """Mean, sample SD and range of one number over the filters (None values left out)."""
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    if not len(v):
        return None
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else None,
            "min": float(v.min()), "max": float(v.max()), "n": int(len(v))}


def seed_spread(per_filter: Sequence[Mapping]) -> dict:
    """Each filter's headline numbers summarised over the N filters (seeds seed .. seed + N - 1):
    the spread a reader needs to tell a change from the noise of one training (filter 0's values
    are the entry's own; docs/reproducibility.md)."""
    heads = sorted({h for f in per_filter for h in (f.get("auc_by_head") or {})})
    sets = list(dict.fromkeys(n for f in per_filter for n in (f.get("synthetic") or {})))
    out: dict = {"n_filters": len(per_filter)}
    for key in ("verification_auc", "specificity", "sensitivity_heldout", "tau"):
        out[key] = _spread([f.get(key) for f in per_filter])
    out["auc_by_head"] = {h: _spread([_get(f, "auc_by_head", h) for f in per_filter]) for h in heads}
    out["synthetic"] = {n: {k: _spread([_get(f, "synthetic", n, k) for f in per_filter])
                            for k in ("flag_rate", "replica_flag_rate")
                            if any(_get(f, "synthetic", n, k) is not None for f in per_filter)} for n in sets}
    return out


def summary_rows(ev: Mapping, entry: Mapping) -> list[dict]:
    """summary.tsv rows of one evaluation: one per synthetic set (``entry``: its :func:`metrics_entry`)."""
    rows = []
    sens_h = ev["sensitivity"]["heldout_patients"] or {}
    for name, s in ev["synthetic"].items():
        c = s["consistency"]
        rows.append({
            "training_set": ev["training_set"], "space": ev["space"], "synthetic": name, "n": s["n"],
            "flagged": s["n_flagged"], "flag_rate": s["flag_rate"], "tau": ev["tau"],
            "verification_auc": entry["verification_auc"], "specificity": entry["specificity"],
            "sensitivity_overall": sens_h.get("flag_rate_overall"),
            "sensitivity_same_patient_max": sens_h.get("flag_rate_same_patient_max"),
            "sensitivity_same_patient_mean": sens_h.get("flag_rate_same_patient_mean"),
            "replica_flag_rate": _get(s, "near_duplicates", "replica_flag_rate"),
            "nonreplica_flag_rate": _get(s, "near_duplicates", "nonreplica_flag_rate"),
            "unanimous_fraction": c["unanimous_fraction"],
            "attribution_unanimous_fraction": c["attribution_unanimous_fraction"],
            "learned_fraction": s["recall"]["learned_fraction"], "recall": s["recall"]["recall"],
        })
    return rows


def gather(evaluations: Sequence[Mapping]) -> tuple[dict, list[dict]]:
    """privacy.json (``{training set: {space: entry}}``, plus the image-to-latent epoch time
    ratio where both spaces ran) and the summary.tsv rows, in input order."""
    metrics, rows = {}, []
    for ev in evaluations:
        entry = metrics_entry(ev)
        rows += summary_rows(ev, entry)
        metrics.setdefault(ev["training_set"], {})[ev["space"]] = entry
    for spaces in metrics.values():
        if "image" in spaces and "latent" in spaces:
            spaces["epoch_time_ratio_image_to_latent"] = (
                spaces["image"]["seconds_per_epoch"] / spaces["latent"]["seconds_per_epoch"])
    return metrics, rows


def by_training_set(evaluations: Sequence[Mapping]) -> dict[str, dict[str, Mapping]]:
    """``{training set: {space: evaluation}}`` (the figures put the spaces side by side)."""
    out: dict[str, dict[str, Mapping]] = {}
    for ev in evaluations:
        out.setdefault(ev["training_set"], {})[ev["space"]] = ev
    return out


def roc_curves(spaces: Mapping[str, Mapping]) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """``{"<space> space": (fpr, tpr, auc)}`` for :func:`.figures.roc_figure`; spaces without a ROC left out."""
    return {f"{space} space": (np.array(ev["roc"]["fpr"]), np.array(ev["roc"]["tpr"]), ev["roc"]["auc"])
            for space, ev in spaces.items() if ev.get("roc")}


def consistency(spaces: Mapping[str, Mapping]) -> dict[str, dict]:
    """``{"<space>: <synthetic set>": consistency}`` for :func:`.figures.consistency_figure`."""
    return {f"{space}: {name}": s["consistency"] for space, ev in spaces.items()
            for name, s in ev["synthetic"].items()}


def headline(metrics: Mapping) -> dict:
    """The few numbers the log line quotes per training set and space."""
    return {o: {s: {k: v for k, v in e.items() if k in HEADLINE_KEYS} for s, e in sp.items() if isinstance(e, dict)}
            for o, sp in metrics.items()}
