"""Snakemake adapter: import one generator sample, checked to be on the preprocessed grid."""

import json

import numpy as np

from synthaudit.io import check_on_grid, load_volume, save_volume
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    grid = json.loads(open(snakemake.input.grid).read())
    data, affine = load_volume(snakemake.input.image)
    check_on_grid(snakemake.input.image, data, affine, grid, what="synthetic volume")
    save_volume(snakemake.output.image, data, np.asarray(grid["affine"]), dtype=np.float32)
    log.info("imported %s", snakemake.input.image)
