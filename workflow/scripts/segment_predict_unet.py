"""Snakemake adapter: label every volume of a dataset with the trained U-Net (sliding
window); one job per dataset, so the model and MONAI load once."""

import numpy as np
import torch

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import Progress, logged
from synthaudit.segment.unet import load_model, predict

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    model, config = load_model(snakemake.input.model)
    ids = snakemake.params.ids
    progress = Progress(log, "volumes segmented", len(ids))
    for k, (vid, path, out) in enumerate(zip(ids, snakemake.input.images, snakemake.output), 1):
        image, affine = load_volume(path)
        label = predict(model, image, tuple(snakemake.params.patch_size))
        save_volume(out, label, affine, dtype=np.int16)
        log.info("%s: %d foreground voxels", vid, int((label > 0).sum()))
        progress(k)
