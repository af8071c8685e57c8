"""Snakemake adapter: draw the synthetic volumes from the trained latent diffusion model
(seeded DDIM; sample i depends only on the seed and i) and write them on the grid."""

import json

import numpy as np
import torch

from synthaudit.generate import ldm
from synthaudit.generate.config import diffusion_config
from synthaudit.io import save_volume
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.ldm
    grid = json.loads(open(snakemake.input.grid).read())
    autoencoder, _ = ldm.load_autoencoder(snakemake.input.autoencoder)
    unet, dcfg = ldm.load_diffusion(snakemake.input.diffusion)
    if list(autoencoder.shape) != list(grid["shape"]):
        raise ValueError(f"{snakemake.input.autoencoder}: trained on volumes of shape {list(autoencoder.shape)}, "
                         f"the preprocessed grid is {grid['shape']}; delete results/generator to retrain")
    ids = snakemake.params.ids
    progress = Progress(log, "sampling", len(ids))
    sampling = diffusion_config({**dcfg, **cfg["diffusion"]}, strict=False)  # what ldm.sample uses
    volumes = ldm.sample(autoencoder, unet, len(ids), sampling, seed=cfg["seed"],
                         scale=dcfg["scale"], progress=lambda done, total: progress(done, total))
    for vid, vol, path in zip(ids, volumes, snakemake.output):
        if not np.isfinite(vol).all():
            raise ValueError(f"sample {vid}: the generator produced non-finite values")
        save_volume(path, vol, np.asarray(grid["affine"]), dtype=np.float32)
    log.info("sampled %d volumes (%d DDIM steps)", len(ids), sampling["num_inference_steps"])
