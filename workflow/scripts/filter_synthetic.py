"""Snakemake adapter: tuned thresholds of a rated dataset, and the filter of another dataset
with them (RELICT 2.2, automation step 6).

Rule ``tuned_thresholds``: results/tables/{dataset}/thresholds.json of a rated dataset.
Rule ``filter_synthetic``: kept.tsv / rejected.tsv of a dataset with ``filter_with``.
"""

import json

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict import tables


def thresholds(log):
    dataset, measures = snakemake.wildcards.dataset, list(snakemake.params.measures)
    evaluation = json.loads(open(snakemake.input.evaluation).read())
    n_used = {m: tables.read_ranking(p)[0].get("n_used") for m, p in zip(measures, snakemake.input.rankings)}
    out = tables.tuned_thresholds(dataset, evaluation, measures, n_used)
    write_json(snakemake.output[0], out)
    for m, e in out["measures"].items():
        if e["threshold"] is None:
            log.warning("%s: %s has no optimal threshold (rating with one class only)", dataset, m)
        else:
            log.info("%s: %s replica when %s <= %.4g (balanced accuracy %.3f)", dataset, m, e["score"],
                     e["threshold"], e["balanced_accuracy"])


def apply_filter(log):
    dataset, source, measures = snakemake.wildcards.dataset, snakemake.params.source, list(snakemake.params.measures)
    tables.check_filter_source(dataset, source, snakemake.params.datasets, snakemake.params.rated)
    tuned = json.loads(open(snakemake.input.thresholds).read())
    rankings = {m: tables.read_ranking(p) for m, p in zip(measures, snakemake.input.rankings)}
    kept, rejected, summary = tables.filter_synthetic(dataset, rankings, tuned, measures)
    columns = tables.filter_columns(measures)
    write_tsv(snakemake.output.kept, kept, columns)
    write_tsv(snakemake.output.rejected, rejected, columns)
    write_json(snakemake.output.summary, {**summary, "thresholds_file": snakemake.input.thresholds})
    for w in summary["warnings"]:
        log.warning("%s: %s", dataset, w)
    log.info("%s: %d of %d synthetic volumes rejected as replicas by %s with thresholds tuned on %s %s",
             dataset, summary["n_rejected"], summary["n_synthetic"], measures, source, summary["thresholds"])


with logged(snakemake.log[0]) as log:
    {"tuned_thresholds": thresholds, "filter_synthetic": apply_filter}[snakemake.rule](log)
