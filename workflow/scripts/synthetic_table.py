"""Snakemake adapter: the table of synthetic volumes (with the truth for the spiked set)."""

from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    if snakemake.params.spiked:
        rows = [dict(r, image=p) for r, p in zip(snakemake.params.spiked, snakemake.input.images)]
        cols = ["id", "kind", "source_id", "strength", "likert", "image"]
        if "augmentation" in snakemake.params.spiked[0]:
            cols.insert(4, "augmentation")
    else:
        rows = [{"id": i, "kind": snakemake.params.source, "image": p}
                for i, p in zip(snakemake.params.ids, snakemake.input.images)]
        cols = ["id", "kind", "image"]
    write_tsv(snakemake.output.table, rows, cols)
    log.info("%d synthetic volumes", len(rows))
