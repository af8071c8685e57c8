"""Snakemake adapter: RELICT Figure 5 (balanced accuracy vs threshold) and the score distribution."""

import json

from synthaudit.relict.figures import balanced_accuracy_figure, ratio_distribution_figure
from synthaudit.io import read_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    measures = snakemake.params.measures
    dataset = snakemake.wildcards.dataset
    optima = json.loads(open(snakemake.input.summary).read())["measures"]
    metrics = json.loads(open(snakemake.input.metrics).read())[dataset]
    notes = {m: metrics[m]["extractor"] for m in measures if metrics[m].get("extractor")}
    sweeps = {m: read_tsv(p) for m, p in zip(measures, snakemake.input.sweeps)}
    balanced_accuracy_figure(snakemake.output.balanced_accuracy, sweeps, optima,
                             f"{dataset}: replica detection against the rating", notes)
    rows = read_tsv(snakemake.input.scores)
    for r in rows:
        r["rating"] = None if r["rating"] == "NA" else float(r["rating"])
    ratio_distribution_figure(snakemake.output.ratios, rows, measures, optima, f"{dataset}: replica scores by rating")
    log.info("figures written for %s", dataset)
