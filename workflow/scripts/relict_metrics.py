"""Snakemake adapter: results/metrics/relict.json, aggregates only (for `dvc metrics diff`)."""

import json

from synthaudit.features.compare import load_embeddings
from synthaudit.io import write_json
from synthaudit.logs import logged
from synthaudit.relict import levels
from synthaudit.relict.summary import read_ranking

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity", "auc", "n_synthetic", "n_replicas")

with logged(snakemake.log[0]) as log:
    evaluations = {d: json.loads(open(p).read()) for d, p in zip(snakemake.params.rated, snakemake.input.evaluations)}
    rankings = iter(snakemake.input.rankings)
    augmentation = {d: json.loads(open(p).read())
                    for d, p in zip(snakemake.params.augmented, snakemake.input.augmentation)}
    embedding_meta = {d: load_embeddings(f)[2] for d, f in zip(snakemake.params.feature_datasets,
                                                                  snakemake.input.features)}
    metrics = {}
    for d in snakemake.params.datasets:
        entry = {}
        for m in snakemake.params.measures[d]:
            rows = read_ranking(next(rankings))
            e = {"level": levels.get(m).level, "n_closest_used": rows[0]["n_used"],
                 "min_score": min(r["score"] for r in rows)}
            if levels.get(m).level == "feature":
                meta = embedding_meta[d]
                e["extractor"] = meta["label"]  # says "untrained" when no weights were given
                if meta.get("grid_used") is not None:  # the pooling grid on this dataset's grid (only down)
                    e["feature_grid_used"] = "x".join(map(str, meta["grid_used"]))
            if d in evaluations:
                ev = evaluations[d]["measures"][m]
                e.update({k: ev[k] for k in KEYS})
                ci = ev.get("ci") or {}  # out-of-bag bootstrap: tuned on a resample, scored on the rest
                for k in ("threshold", "balanced_accuracy", "sensitivity", "specificity"):
                    if ci.get(k) is not None:
                        e[f"{k}_ci_low"], e[f"{k}_ci_high"] = ci[k]
                for k in ("balanced_accuracy", "sensitivity", "specificity"):
                    value = (ci.get("out_of_sample") or {}).get(k)
                    if value is not None:
                        e[f"{k}_out_of_sample"] = value
            entry[m] = e
        if d in augmentation:  # detection per replica kind (plain and each augmentation)
            for m, kinds in augmentation[d].items():
                for kind, values in kinds.items():
                    entry[m][f"by_kind_{kind}"] = values
        metrics[d] = entry
    write_json(snakemake.output[0], metrics)
    log.info("metrics for %d dataset(s): %s", len(metrics), snakemake.output[0])
