"""Snakemake adapter: gather every filter evaluation into ``results/metrics/privacy.json``
(the headline numbers ``dvc metrics diff`` compares), one table row per training set,
space and synthetic set, and per training set the ROC and consistency figures that put
the image- and latent-space filters side by side."""

import json
from pathlib import Path

import numpy as np

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.privacy import figures


COLUMNS = ["training_set", "space", "synthetic", "n", "flagged", "flag_rate", "tau", "verification_auc",
           "specificity", "sensitivity_overall", "sensitivity_same_patient_max", "sensitivity_same_patient_mean",
           "replica_flag_rate", "nonreplica_flag_rate", "unanimous_fraction", "attribution_unanimous_fraction",
           "learned_fraction", "recall", "seconds_per_epoch"]


def _get(d, *keys):
    for k in keys:
        if d is None:
            return None
        d = d.get(k)
    return d


with logged(snakemake.log[0]) as log:
    evaluations = [json.loads(Path(p).read_text()) for p in snakemake.input]
    metrics, rows = {}, []
    by_owner = {}
    for ev in evaluations:
        owner, space = ev["training_set"], ev["space"]
        by_owner.setdefault(owner, {})[space] = ev
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
            "retrieval_map_at_r": _get(ev, "retrieval", "map_at_r"),
            "retrieval_precision_at_1": _get(ev, "retrieval", "precision_at_1"),
            "tau": ev["tau"],
            "specificity": ev["specificity"]["specificity"],
            "sensitivity_heldout": ev["sensitivity"]["heldout_patients"],
            "sensitivity_training": ev["sensitivity"]["training_patients"],
            "seconds_per_epoch": float(np.mean(filters)),
            "synthetic": {},
        }
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
            sens_h = ev["sensitivity"]["heldout_patients"] or {}
            rows.append({
                "training_set": owner, "space": space, "synthetic": name, "n": s["n"], "flagged": s["n_flagged"],
                "flag_rate": s["flag_rate"], "tau": ev["tau"], "verification_auc": entry["verification_auc"],
                "specificity": entry["specificity"],
                "sensitivity_overall": sens_h.get("flag_rate_overall"),
                "sensitivity_same_patient_max": sens_h.get("flag_rate_same_patient_max"),
                "sensitivity_same_patient_mean": sens_h.get("flag_rate_same_patient_mean"),
                "replica_flag_rate": _get(s, "near_duplicates", "replica_flag_rate"),
                "nonreplica_flag_rate": _get(s, "near_duplicates", "nonreplica_flag_rate"),
                "unanimous_fraction": c["unanimous_fraction"],
                "attribution_unanimous_fraction": c["attribution_unanimous_fraction"],
                "learned_fraction": s["recall"]["learned_fraction"], "recall": s["recall"]["recall"],
                "seconds_per_epoch": entry["seconds_per_epoch"],
            })
        metrics.setdefault(owner, {})[space] = entry
    for owner, spaces in metrics.items():
        if "image" in spaces and "latent" in spaces:
            spaces["epoch_time_ratio_image_to_latent"] = (
                spaces["image"]["seconds_per_epoch"] / spaces["latent"]["seconds_per_epoch"])
    write_json(snakemake.output.metrics, metrics)
    write_tsv(snakemake.output.table, rows, COLUMNS)  # the header even without filters

    for owner, roc_path, cons_path in zip(snakemake.params.owners, snakemake.output.roc, snakemake.output.consistency):
        spaces = by_owner[owner]
        curves = {f"{space} space": (np.array(ev["roc"]["fpr"]), np.array(ev["roc"]["tpr"]), ev["roc"]["auc"])
                  for space, ev in spaces.items() if ev.get("roc")}
        figures.roc_figure(roc_path, curves, f"{owner}: patient verification on held-out patients")
        agreement = {f"{space}: {name}": s["consistency"] for space, ev in spaces.items()
                     for name, s in ev["synthetic"].items()}
        figures.consistency_figure(cons_path, agreement,
                                   f"{owner}: agreement of {next(iter(spaces.values()))['n_filters']} filters "
                                   "(different seeds)")
    log.info("privacy metrics: %s", json.dumps({o: {s: {k: v for k, v in e.items() if k in (
        "verification_auc", "specificity", "seconds_per_epoch")} for s, e in sp.items() if isinstance(e, dict)}
        for o, sp in metrics.items()}))
