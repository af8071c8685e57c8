"""Snakemake adapter: gather every filter evaluation into ``results/metrics/privacy.json``
(the headline numbers ``dvc metrics diff`` compares), one table row per training set,
space and synthetic set, and per training set the ROC and consistency figures that put
the image- and latent-space filters side by side (synthaudit.privacy.summary)."""

import json
from pathlib import Path

from synthaudit.io import without_timings, write_json, write_metrics, write_tsv
from synthaudit.logs import logged
from synthaudit.privacy import figures, summary

with logged(snakemake.log[0]) as log:
    # each evaluation with its times (evaluation.timing.json: kept apart so that evaluation.json is the
    # same bytes on every run)
    evaluations = [json.loads(Path(p).read_text()) | json.loads(Path(t).read_text())
                   for p, t in zip(snakemake.input.evaluations, snakemake.input.timings)]
    metrics, rows = summary.gather(evaluations)
    # seconds per epoch and the image/latent ratio: results/privacy/runtime.json, not the tracked metrics
    # nor the table, where they would change on every run
    write_json(snakemake.output.runtime, write_metrics(snakemake.output.metrics, metrics))
    write_tsv(snakemake.output.table, without_timings(rows), summary.SUMMARY_COLUMNS)  # the header even without filters

    by_owner = summary.by_training_set(evaluations)
    for owner, roc_path, cons_path in zip(snakemake.params.owners, snakemake.output.roc, snakemake.output.consistency):
        spaces = by_owner[owner]
        notes = [ev.get("verification_note") for ev in spaces.values()]
        figures.roc_figure(roc_path, summary.roc_curves(spaces), f"{owner}: patient verification on held-out patients",
                           note=next((n for n in notes if n), None))
        figures.consistency_figure(cons_path, summary.consistency(spaces),
                                   f"{owner}: agreement of {next(iter(spaces.values()))['n_filters']} filters "
                                   "(different seeds)")
    log.info("privacy metrics: %s", json.dumps(summary.headline(metrics)))
