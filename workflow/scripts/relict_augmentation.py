"""Snakemake adapter: detection per replica kind (plain and each augmentation), for every
measure of a dataset whose spiked set has augmented replicas, at each measure's tuned
threshold; a table, a summary JSON and a figure."""

import json

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import consensus, read_ratings
from synthaudit.relict import augmented
from synthaudit.relict.ranking import read_ranking

with logged(snakemake.log[0]) as log:
    p = snakemake.params
    ids = [r["id"] for r in p.spiked]
    cons = consensus(read_ratings(snakemake.input.ratings, ids), p.replica_min_score)
    truth = {r["id"]: {"replica": cons[r["id"]]["replica"], "kind": r.get("augmentation", "none"),
                       "source_patient": p.patient_of.get(r["source_id"]) if r["kind"] == "replica" else None}
             for r in p.spiked if r["id"] in cons}
    rows = []
    for m, ranking, summary in zip(p.measures, snakemake.input.rankings, snakemake.input.summaries):
        threshold = json.loads(open(summary).read())["threshold"]
        rows += augmented.per_kind(read_ranking(ranking), truth, float(threshold), p.patient_of, m)
    write_tsv(snakemake.output.table, rows, augmented.COLUMNS)
    summary = {m: {r["kind"]: {k: r[k] for k in ("balanced_accuracy", "sensitivity", "specificity", "auc",
                                                  "source_found")}
                   for r in rows if r["measure"] == m} for m in p.measures}
    write_json(snakemake.output.summary, summary)
    augmented.figure(snakemake.output.figure, rows, f"{snakemake.wildcards.dataset}: replicas per augmentation kind")
    for r in rows:
        log.info("%s %s: sensitivity %.2f, specificity %.2f, balanced accuracy %.2f, source found %.2f (n=%d)",
                 r["measure"], r["kind"], r["sensitivity"], r["specificity"], r["balanced_accuracy"],
                 r["source_found"], r["n_replicas"])
