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
    extractor = load_embeddings(snakemake.input.features[0])[2]["label"] if snakemake.input.features else None
    metrics = {}
    for d in snakemake.params.datasets:
        entry = {}
        for m in snakemake.params.measures[d]:
            rows = read_ranking(next(rankings))
            e = {"level": levels.get(m).level, "n_closest_used": rows[0]["n_used"],
                 "min_score": min(r["score"] for r in rows)}
            if levels.get(m).level == "feature":
                e["extractor"] = extractor  # says "untrained" when no weights were given
            if d in evaluations:
                ev = evaluations[d]["measures"][m]
                e.update({k: ev[k] for k in KEYS})
                ci = ev.get("ci") or {}
                for k in ("threshold", "balanced_accuracy", "sensitivity", "specificity"):
                    if ci.get(k) is not None:
                        e[f"{k}_ci_low"], e[f"{k}_ci_high"] = ci[k]
            entry[m] = e
        if d in augmentation:  # detection per replica kind (plain and each augmentation)
            for m, kinds in augmentation[d].items():
                for kind, values in kinds.items():
                    entry[m][f"by_kind_{kind}"] = values
        metrics[d] = entry
    write_json(snakemake.output[0], metrics)
    log.info("metrics for %d dataset(s): %s", len(metrics), snakemake.output[0])
