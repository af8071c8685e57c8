"""Snakemake adapter: results/metrics/relict.json (per dataset and measure) and
results/metrics/copies.json (per dataset: Dar et al.'s copy counts from the calibrated calls, and the
local level's calls and positive controls where relict.local is on),
aggregates only (for `dvc metrics diff`). Two files so that every entry of relict.json is a measure."""

import json

from synthaudit.features.compare import load_embeddings
from synthaudit.io import write_metrics
from synthaudit.logs import logged
from synthaudit import registry
from synthaudit.relict.ranking import read_ranking

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity", "auc", "n_synthetic", "n_replicas")
# newer keys: evaluation summaries written before them lack them (read with .get)
OPTIONAL_KEYS = ("balanced_accuracy_any_threshold",)

with logged(snakemake.log[0]) as log:
    evaluations = {d: json.loads(open(p).read()) for d, p in zip(snakemake.params.rated, snakemake.input.evaluations)}
    rankings = iter(snakemake.input.rankings)
    searches = iter(snakemake.input.searches)
    augmentation = {d: json.loads(open(p).read())
                    for d, p in zip(snakemake.params.augmented, snakemake.input.augmentation)}
    embedding_meta = {d: load_embeddings(f)[2] for d, f in zip(snakemake.params.feature_datasets,
                                                                  snakemake.input.features)}
    copies = {d: json.loads(open(f).read()) for d, f in zip(snakemake.params.copies_datasets, snakemake.input.copies)}
    local = {d: json.loads(open(f).read()) for d, f in zip(snakemake.params.local_datasets, snakemake.input.local)}
    metrics = {}
    for d in snakemake.params.datasets:
        entry = {}
        for m in snakemake.params.measures[d]:
            rows = read_ranking(next(rankings))
            e = {"level": registry.get(m).level, "n_closest_used": rows[0]["n_used"],
                 "min_score": min(r["score"] for r in rows)}
            found = json.loads(open(next(searches)).read())  # relict.search: how the pairs were searched
            e["search_mode"] = found["mode"]
            e["search_pairs_fraction"] = found["pairs_fraction"]
            e["search_recall_top_n"] = found["recall_top_n"]
            if found["mode"] in ("shortlist", "candidates"):  # measured on rows also searched exhaustively
                e["search_n_sampled"] = found["n_sampled"]
                e["search_min_recall"] = found["min_recall"]
                e["search_max_ratio_error"] = found["max_ratio_error"]
                if found.get("heldout"):
                    e["search_heldout_recall_top_n"] = found["heldout"]["recall_top_n"]
                if found.get("calls_changed") is not None:
                    e["search_calls_changed"] = found["calls_changed"]
                e["search_recall_ok"] = found["recall_ok"]
            called = [r["calibrated_replica"] for r in rows if r["calibrated_replica"] is not None]
            if called:  # held-out-calibrated calls (relict.calibration)
                e["calibrated_n_called"] = int(sum(called))
                e["calibration_n_heldout"] = min(r["n_null"] for r in rows)
                h = copies.get(d, {}).get("measures", {}).get(m)
                if h:  # Dar et al.'s two numbers for this measure's calls (combined: copies.json)
                    e["calibrated_percent_synthetic_copies"] = h["percent_synthetic_copies"]
                    e["calibrated_n_patients_copied"] = h["n_patients_copied"]
                    e["calibrated_percent_patients_copied"] = h["percent_patients_copied"]
            if registry.get(m).level == "feature":
                meta = embedding_meta[d]
                e["extractor"] = meta["label"]  # says "untrained" when no weights were given
                if meta.get("grid_used") is not None:  # the pooling grid on this dataset's grid (only down)
                    e["feature_grid_used"] = "x".join(map(str, meta["grid_used"]))
            if d in evaluations:
                ev = evaluations[d]["measures"][m]
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
            entry[m] = e
        if d in augmentation:  # detection per replica kind (plain and each augmentation)
            for m, kinds in augmentation[d].items():
                for kind, values in kinds.items():
                    entry[m][f"by_kind_{kind}"] = values
        metrics[d] = entry
    copy_counts = {}
    for d, summary in copies.items():  # combined calibrated calls: any measure calls it at the rate
        c = summary["combined"]
        copy_counts[d] = {"rate": summary["rate"], "n_heldout": summary["n_heldout"],
                          **{k: c[k] for k in ("n_copies", "percent_synthetic_copies", "n_patients_copied",
                                               "percent_patients_copied", "sensitivity", "specificity",
                                               "balanced_accuracy") if c.get(k) is not None}}
    for d, summary in local.items():  # relict.local: calls, the held-out check and the positive controls
        entry = {"local_n_called": summary["n_called"], "local_anatomy_blocks": summary["n_anatomy_blocks"],
                 "local_heldout_false_positive_rate": summary["heldout_false_positive_rate"]}
        for size, c in ((summary.get("controls") or {}).get("by_size_mm") or {}).items():
            entry[f"local_control_{size}mm_sensitivity"] = c["sensitivity"]
            entry[f"local_control_{size}mm_whole_volume_rmse_sensitivity"] = c["whole_volume_rmse_sensitivity"]
            if (c.get("by_distinctiveness") or {}).get("high") is not None:  # the most distinctive third
                entry[f"local_control_{size}mm_distinctive_sensitivity"] = c["by_distinctiveness"]["high"]
        copy_counts.setdefault(d, {}).update(entry)
    write_metrics(snakemake.output.relict, metrics, snakemake.config.get("_provenance"))
    write_metrics(snakemake.output.copies, copy_counts, snakemake.config.get("_provenance"))
    log.info("metrics for %d dataset(s): %s", len(metrics), snakemake.output.relict)
