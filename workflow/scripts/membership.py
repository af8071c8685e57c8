"""Snakemake adapter: every synthetic set's membership attacks (synthaudit.membership.stage), in one job:
each set's membership.json and per-patient scores (patients.tsv), then the tracked metrics of them all
(results/metrics/membership.json) and the folder's index."""

from synthaudit.io import write_json, write_metrics, write_tsv
from synthaudit.logs import logged
from synthaudit.membership import audit as ma
from synthaudit.membership.stage import SetFiles, Shared, by_training_set, run_set

with logged(snakemake.log[0]) as log:
    p, out = snakemake.params, snakemake.output
    sets = {d: SetFiles(**files) for d, files in p.sets.items()}
    where = {d: k for k, d in enumerate(sets)}  # the outputs' order: the plan's
    shared, metrics = Shared(), {}
    for dataset in by_training_set(sets):
        result, rows = run_set(dataset, sets[dataset], p.settings, p.scaling, shared, threads=snakemake.threads,
                               device=snakemake.config["compute"]["device"], log=log)
        write_json(out.summaries[where[dataset]], result)
        write_tsv(out.patients[where[dataset]], rows, list(rows[0]) if rows else ["patient_id", "role", "scans"])
        for line in ma.summary_lines(result):
            log.info("%s", line.rstrip())
        metrics[dataset] = ma.metrics_entry(result)
    metrics = {d: metrics[d] for d in sets}
    write_metrics(out.metrics, metrics)
    write_json(out.index, {"sets": list(metrics), "files": {d: f"results/membership/{d}/membership.json"
                                                             for d in metrics}})
    log.info("membership metrics for %d set(s)", len(metrics))
