"""Snakemake adapter: the demo cohort's manifest (which scan belongs to whom, train or held out)."""

from synthaudit.demo.ncct import cohort_table
from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    rows = [dict(r, image=f"images/{r['id']}.nii.gz", label=f"labels/{r['id']}.nii.gz")
            for r in cohort_table(snakemake.params.demo)]
    write_tsv(snakemake.output[0], rows, ["id", "image", "label", "patient_id", "role", "session"])
    log.info("%d scans, %d held out", len(rows), sum(r["role"] == "heldout" for r in rows))
