"""Snakemake adapter: results/generator/generators.tsv, the in-workflow generators (their
training-set size, sample count and whose autoencoder they use)."""

from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    write_tsv(snakemake.output[0], snakemake.params.rows, ["dataset", "autoencoder_of", "n_training", "n_samples"])
    log.info("%d generator(s)", len(snakemake.params.rows))
