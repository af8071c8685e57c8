"""Snakemake adapter: the resolved manifest of a dataset (every real scan, its role and files).

For the demo the files are the simulated scans; for user data they are the user's
files as found (manifest or nnU-Net layout), so one table shows what the run used.
"""

from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    rows = snakemake.params.rows
    write_tsv(snakemake.output[0], rows, ["id", "image", "label", "patient_id", "role", "session"])
    log.info("%d scans (%d held out)", len(rows), sum(r["role"] == "heldout" for r in rows))
