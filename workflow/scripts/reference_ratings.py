"""Snakemake adapter: the spiked set's truth written as a rating table (rater "reference")."""

from synthaudit.logs import logged
from synthaudit.ratings import write_reference_ratings

with logged(snakemake.log[0]) as log:
    write_reference_ratings(snakemake.output[0], snakemake.params.spiked)
    log.info("%d reference ratings", len(snakemake.params.spiked))
