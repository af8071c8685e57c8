"""Snakemake adapter: one held-out scan degraded to the synthetic set's blur and noise (the
matched null; synthaudit.relict.texture.degrade), on the scan's own grid."""

import json

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.relict.texture import degrade

with logged(snakemake.log[0]) as log:
    fit = json.loads(open(snakemake.input.texture).read())["degradation"]
    data, affine = load_volume(snakemake.input.scan)
    save_volume(snakemake.output[0], degrade(data, fit["blur_vox"], fit["noise_sd"], snakemake.params.seed), affine)
    log.info("%s: Gaussian blur %.3g voxel, white noise SD %.3g (seed %d), fitted on the samples' texture",
             snakemake.input.scan, fit["blur_vox"], fit["noise_sd"], snakemake.params.seed)
