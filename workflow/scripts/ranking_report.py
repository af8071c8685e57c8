"""Snakemake adapter: a ranking table as an HTML page for the report."""

import html

from synthaudit.io import read_tsv, write_text
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    rows = read_tsv(snakemake.input[0])
    cols = list(rows[0]) if rows else []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    title = f"RELICT ranking: {snakemake.wildcards.dataset}, {snakemake.wildcards.measure}"
    write_text(snakemake.output[0], f"<html><head><meta charset='utf-8'><title>{title}</title></head><body>"
               f"<h3>{title}</h3><p>Rank 1 = most likely replica (smallest distance ratio).</p>"
               f"<table border='1' cellpadding='3'><tr>{head}</tr>\n{body}</table></body></html>\n")
    log.info("%d rows", len(rows))
