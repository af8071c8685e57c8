"""Snakemake adapter: every measure's ranking of one dataset as one HTML page for the report."""

import html

from synthaudit.io import read_tsv, write_text
from synthaudit.logs import logged
from synthaudit import registry
from synthaudit.review import tables

with logged(snakemake.log[0]) as log:
    dataset = snakemake.wildcards.dataset
    measures = snakemake.params.measures
    links = " · ".join(f"<a href='#{m}'>{html.escape(registry.get(m).label)}</a>" for m in measures)
    sections = [f"<p>Rank 1 = most likely replica (smallest score). Measures: {links}</p>"]
    for measure, path in zip(measures, snakemake.input):
        rows = read_tsv(path)
        cols = list(rows[0]) if rows else []
        sections.append(f"<h3 id='{measure}'>{html.escape(registry.get(measure).label)} "
                        f"({tables.score_kind(measure)})</h3>")
        sections.append(tables.html_table(rows, cols))
        log.info("%s: %d rows", measure, len(rows))
    write_text(snakemake.output[0], tables.html_page(f"RELICT rankings: {dataset}", sections))
