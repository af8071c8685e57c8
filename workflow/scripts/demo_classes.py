"""Snakemake adapter: the demo cohort's class labels per scan, from the simulation truth."""

import json

from synthaudit.demo.ncct import class_table
from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    truths = [json.loads(open(p).read()) for p in snakemake.input]
    rows = class_table(truths)
    write_tsv(snakemake.output[0], rows)
    counts = {}
    for r in rows:
        counts[r["haemorrhage_side"]] = counts.get(r["haemorrhage_side"], 0) + 1
    log.info("%d scans; haemorrhage_side %s", len(rows), counts)
