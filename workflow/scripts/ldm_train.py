"""Snakemake adapter: the latent diffusion model's training stages (resumable).

Rule ``ldm_train_autoencoder``: the autoencoder on the generator's training volumes.
Rule ``ldm_encode``: those volumes' latent means and the latent scale factor.
Rule ``ldm_train_diffusion``: the diffusion U-Net on the scaled latents.
"""

import numpy as np
import torch

from synthaudit.generate import ldm
from synthaudit.io import atomic_path, load_volume, write_tsv
from synthaudit.logs import Progress, logged


def _epochs(log, what):
    progress = Progress(log, f"{what} epochs", None, every_s=10.0)
    return lambda done, total=None, *rest: progress(done, total)


def train_autoencoder(log):
    cfg = snakemake.params.ldm
    images = [load_volume(p)[0] for p in snakemake.input.images]
    log.info("autoencoder: %d training volumes of shape %s", len(images), list(images[0].shape))
    model, history = ldm.train_autoencoder(images, cfg["autoencoder"], seed=cfg["seed"],
                                           checkpoint=snakemake.params.checkpoint,
                                           progress=_epochs(log, "autoencoder"))
    ldm.save_model(snakemake.output.model, model, cfg["autoencoder"])
    write_tsv(snakemake.output.history, history)
    log.info("autoencoder: %d epochs, final loss %.5g", len(history), history[-1]["loss"])


def encode(log):
    model, _ = ldm.load_autoencoder(snakemake.input.model)
    images = [load_volume(p)[0] for p in snakemake.input.images]
    latents, scale = ldm.encode(model, images)
    with atomic_path(snakemake.output[0], suffix=".npz") as tmp:
        np.savez(tmp, latents=latents, scale=np.float64(scale), ids=np.array(snakemake.params.ids))
    log.info("encoded %d volumes to latents of shape %s (scale %.4g)", len(latents), list(latents.shape[1:]), scale)


def train_diffusion(log):
    cfg = snakemake.params.ldm
    npz = np.load(snakemake.input.latents)
    scale = float(npz["scale"])
    stored = [str(i) for i in npz["ids"]]
    missing = sorted(set(snakemake.params.ids) - set(stored))
    if missing:
        raise ValueError(f"{snakemake.input.latents} has no latents of {missing[:5]}; delete it to re-encode")
    latents = npz["latents"][[stored.index(i) for i in snakemake.params.ids]]  # this generator's training set
    log.info("diffusion: %d latents of shape %s", len(latents), list(latents.shape[1:]))
    model, history = ldm.train_diffusion(latents, cfg["diffusion"], scale=scale, seed=cfg["seed"],
                                         checkpoint=snakemake.params.checkpoint,
                                         progress=_epochs(log, "diffusion"))
    ldm.save_model(snakemake.output.model, model, {**cfg["diffusion"], "scale": scale})
    write_tsv(snakemake.output.history, history)
    log.info("diffusion: %d epochs, final loss %.5g", len(history), history[-1]["loss"])


with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    {"ldm_train_autoencoder": train_autoencoder, "ldm_encode": encode,
     "ldm_train_diffusion": train_diffusion}[snakemake.rule](log)
