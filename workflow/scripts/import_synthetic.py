"""Snakemake adapter: import one generator sample, checked to be on the preprocessed grid
(or resampled onto it, with a warning, when synthetic.off_grid is resample)."""

import json

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.synthetic.imported import onto_grid

with logged(snakemake.log[0]) as log:
    grid = json.loads(open(snakemake.input.grid).read())
    data, affine = load_volume(snakemake.input.image)
    data = onto_grid(snakemake.input.image, data, affine, grid, off_grid=snakemake.params.off_grid, log=log)
    save_volume(snakemake.output.image, data, np.asarray(grid["affine"]), dtype=np.float32)
    log.info("imported %s", snakemake.input.image)
