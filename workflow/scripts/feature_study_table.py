"""Snakemake adapter: the feature-level study's table, metrics, Markdown table and figure."""

from synthaudit.features.study import (ROW_COLUMNS, default_candidate, study_figure, study_markdown,
                                      study_metrics)
from synthaudit.io import read_tsv, write_metrics, write_text, write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    rows = [r for path in snakemake.input for r in read_tsv(path)]
    write_tsv(snakemake.output.table, rows, ROW_COLUMNS)
    write_metrics(snakemake.output.metrics, study_metrics(rows))  # seconds: the table
    default = default_candidate(snakemake.params.default, snakemake.params.networks)
    write_text(snakemake.output.markdown, study_markdown(rows, default))
    log.info("configured feature level: %s", default or "not one of the study's candidates")
    study_figure(rows, snakemake.output.figure)
    log.info("%d rows from %d candidate runs", len(rows), len(snakemake.input))
