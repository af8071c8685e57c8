"""Snakemake adapter: gather the shards of one all-pairs measure into one matrix."""

from synthaudit.logs import logged
from synthaudit.relict import matrix
from synthaudit.relict.shards import gather

with logged(snakemake.log[0]) as log:
    parts = [matrix.load(path) for path in snakemake.input]
    merged = gather(parts, snakemake.params.synthetic_ids, snakemake.params.training_ids)
    merged.save(snakemake.output[0])
    log.info("%s: %d shard(s) gathered into %d x %d pairs (%.1f s of compute in all)",
             snakemake.wildcards.measure, len(parts), *merged.shape, merged.seconds)
