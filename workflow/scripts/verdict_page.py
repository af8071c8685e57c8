"""Snakemake adapter: results/verdict.html (synthaudit.review.page), from the run's own files."""

from pathlib import Path

from synthaudit.io import write_text
from synthaudit.logs import logged
from synthaudit.review.page import render

with logged(snakemake.log[0]) as log:
    p = snakemake.params
    write_text(snakemake.output[0], render(Path("."), p.datasets, p.measures, p.aligned))
    log.info("wrote %s", snakemake.output[0])
