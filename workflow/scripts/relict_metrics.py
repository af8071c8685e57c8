"""Snakemake adapter: results/metrics/relict.json, aggregates only (for `dvc metrics diff`)."""

import json

from synthaudit.io import write_json
from synthaudit.logs import logged
from synthaudit.relict.summary import read_ranking

KEYS = ("threshold", "balanced_accuracy", "sensitivity", "specificity", "auc", "n_synthetic", "n_replicas")

with logged(snakemake.log[0]) as log:
    evaluations = {d: json.loads(open(p).read()) for d, p in zip(snakemake.params.rated, snakemake.input.evaluations)}
    rankings = iter(snakemake.input.rankings)
    metrics = {}
    for d in snakemake.params.datasets:
        entry = {}
        for m in snakemake.params.measures:
            rows = read_ranking(next(rankings))
            e = {"n_closest_used": rows[0]["n_used"], "min_ratio": min(r["ratio"] for r in rows)}
            if d in evaluations:
                e.update({k: evaluations[d]["measures"][m][k] for k in KEYS})
            entry[m] = e
        metrics[d] = entry
    write_json(snakemake.output[0], metrics)
    log.info("metrics for %d dataset(s): %s", len(metrics), snakemake.output[0])
