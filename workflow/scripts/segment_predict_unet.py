"""Snakemake adapter: label one volume with the trained U-Net (sliding window)."""

import numpy as np
import torch

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.segment.unet import load_model, predict

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    model, config = load_model(snakemake.input.model)
    image, affine = load_volume(snakemake.input.image)
    label = predict(model, image, tuple(snakemake.params.patch_size))
    save_volume(snakemake.output.label, label, affine, dtype=np.int16)
    log.info("%s: %d foreground voxels", snakemake.wildcards.vid, int((label > 0).sum()))
