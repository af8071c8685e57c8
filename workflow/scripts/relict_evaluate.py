"""Snakemake adapter: threshold sweep, balanced accuracy and AUC per measure against the rating."""

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import consensus, read_ratings
from synthaudit.relict.summary import evaluate_dataset, read_ranking

with logged(snakemake.log[0]) as log:
    measures = snakemake.params.measures
    rankings = {m: read_ranking(p) for m, p in zip(measures, snakemake.input.rankings)}
    ids = [r["synthetic_id"] for r in rankings[measures[0]]]
    cons = consensus(read_ratings(snakemake.input.ratings, ids),
                     snakemake.params.evaluation["replica_min_score"])
    summary, sweeps, joined = evaluate_dataset(rankings, cons, snakemake.params.evaluation["threshold_step"])
    for m, path in zip(measures, snakemake.output.sweeps):
        write_tsv(path, sweeps[m], ["threshold", "tp", "fp", "tn", "fn", "sensitivity", "specificity",
                                     "balanced_accuracy"])
    cols = ["synthetic_id", "rating", "replica"] + [f"{m}_{k}" for m in measures for k in ("ratio", "closest")]
    write_tsv(snakemake.output.scores, joined, cols)
    write_json(snakemake.output.summary, {"ratings": snakemake.input.ratings, "measures": summary})
    for m in measures:
        s = summary[m]
        log.info("%s: threshold %.2f  balanced accuracy %.3f  sensitivity %.3f  specificity %.3f  AUC %.3f",
                 m, s["threshold"], s["balanced_accuracy"], s["sensitivity"], s["specificity"], s["auc"])
