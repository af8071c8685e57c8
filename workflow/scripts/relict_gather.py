"""Snakemake adapter: gather the shards of one all-pairs measure into one matrix."""

import numpy as np

from synthaudit.io import atomic_path
from synthaudit.logs import logged
from synthaudit.relict.shards import gather

with logged(snakemake.log[0]) as log:
    parts = []
    for path in snakemake.input:
        with np.load(path) as data:
            parts.append({k: data[k] for k in data.files})
    merged = gather(parts, snakemake.params.synthetic_ids, snakemake.params.training_ids)
    with atomic_path(snakemake.output[0]) as tmp:
        np.savez(tmp, **merged)
    log.info("%s: %d shard(s) gathered into %d x %d pairs (%.1f s of compute in all)",
             snakemake.wildcards.measure, len(parts), *merged["values"].shape, merged["seconds"])
