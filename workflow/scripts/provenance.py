"""Snakemake adapter: results/provenance.json, which synthaudit, parameters (SHA-256 of params.yaml as
loaded), numerics mode and device produced the metrics beside it (synthaudit.resources.provenance)."""

from synthaudit.io import write_json
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    write_json(snakemake.output[0], snakemake.params.provenance)
    log.info("provenance: %s", snakemake.params.provenance)
