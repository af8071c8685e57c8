"""Snakemake adapter: a synthetic set's held-out scans degraded to its samples' blur and noise (the
matched null; synthaudit.relict.texture.degrade), each on its own grid, scan k with seed k."""

import json

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import Progress, logged
from synthaudit.relict.texture import degrade

with logged(snakemake.log[0]) as log:
    fit = json.loads(open(snakemake.input.texture).read())["degradation"]
    scans, outputs, seeds = list(snakemake.input.scans), list(snakemake.output), list(snakemake.params.seeds)
    log.info("Gaussian blur %.3g voxel, white noise SD %.3g, fitted on the samples' texture; %d held-out scans",
             fit["blur_vox"], fit["noise_sd"], len(scans))
    progress = Progress(log, "held-out scans degraded", len(scans))
    for k, (scan, out, seed) in enumerate(zip(scans, outputs, seeds, strict=True)):
        data, affine = load_volume(scan)
        save_volume(out, degrade(data, fit["blur_vox"], fit["noise_sd"], seed), affine)
        progress(k + 1)
