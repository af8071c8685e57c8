"""Snakemake adapter: tuned thresholds of a rated dataset, and the filter of another dataset
with them (RELICT 2.2, automation step 6).

Rule ``tuned_thresholds``: results/tables/{dataset}/thresholds.json of a rated dataset.
Rule ``filter_synthetic``: kept.tsv / rejected.tsv of a dataset with ``filter_with`` (and,
when that dataset is rated too, how the decisions compare with its rating).
Rule ``filter_summary``: results/filter/summary.tsv, one row per filtered dataset
(header only when none is: the file always exists, so DVC can track results/filter).
"""

import json

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import consensus, read_ratings
from synthaudit.review import tables
from synthaudit.relict.ranking import read_ranking


def thresholds(log):
    dataset, measures = snakemake.wildcards.dataset, list(snakemake.params.measures)
    evaluation = json.loads(open(snakemake.input.evaluation).read())
    n_used = {m: read_ranking(p)[0].get("n_used") for m, p in zip(measures, snakemake.input.rankings)}
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
    rankings = {m: read_ranking(p) for m, p in zip(measures, snakemake.input.rankings)}
    kept, rejected, summary = tables.filter_synthetic(dataset, rankings, tuned, measures)
    if snakemake.input.ratings:
        # this dataset is rated too (or has a known truth): check the transferred thresholds
        scores = read_ratings(snakemake.input.ratings, snakemake.params.synthetic_ids)
        truth = {i: c["replica"] for i, c in consensus(scores, snakemake.params.replica_min_score).items()}
        summary["against_rating"] = tables.filter_against_rating(
            [r["synthetic_id"] for r in rejected], snakemake.params.synthetic_ids, truth)
        summary["against_rating"]["ratings"] = snakemake.input.ratings
        log.info("%s: against its own rating: %s", dataset, summary["against_rating"])
    columns = tables.filter_columns(measures)
    write_tsv(snakemake.output.kept, kept, columns)
    write_tsv(snakemake.output.rejected, rejected, columns)
    write_json(snakemake.output.summary, {**summary, "thresholds_file": snakemake.input.thresholds})
    for w in summary["warnings"]:
        log.warning("%s: %s", dataset, w)
    log.info("%s: %d of %d synthetic volumes rejected as replicas by %s with thresholds tuned on %s %s",
             dataset, summary["n_rejected"], summary["n_synthetic"], measures, source, summary["thresholds"])


def collect(log):
    rows = [tables.filter_summary_row(json.loads(open(p).read())) for p in snakemake.input.summaries]
    write_tsv(snakemake.output[0], rows, tables.FILTER_SUMMARY_COLUMNS)
    log.info("%d filtered dataset(s)", len(rows))


with logged(snakemake.log[0]) as log:
    {"tuned_thresholds": thresholds, "filter_synthetic": apply_filter, "filter_summary": collect}[snakemake.rule](log)
