"""Snakemake adapter: build the demo simulation's 1 mm MNI atlas once, for every patient's job."""

from synthaudit.demo.ncct import save_atlas
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    save_atlas(snakemake.output[0])
    log.info("atlas written: %s", snakemake.output[0])
