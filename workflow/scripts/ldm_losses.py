"""Snakemake adapter: the generator's training losses per epoch (autoencoder, diffusion)."""

from synthaudit.plotting import loss_figure
from synthaudit.io import read_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    ae, diff = read_tsv(snakemake.input.autoencoder), read_tsv(snakemake.input.diffusion)
    loss_figure(snakemake.output[0], {"autoencoder (L1 + KL)": ae, "diffusion (noise MSE)": diff},
                title=f"Latent diffusion training: {snakemake.wildcards.dataset}")
    log.info("%d autoencoder and %d diffusion epochs", len(ae), len(diff))
