"""Snakemake adapter: a user's label map for a synthetic volume, checked against grid and classes."""

import json
from pathlib import Path

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.segment.labels import check_labels
from synthaudit.synthetic.imported import onto_grid

with logged(snakemake.log[0]) as log:
    grid = json.loads(open(snakemake.input.grid).read())
    source = Path(snakemake.input.label)
    if source.is_dir():  # nnU-Net command mode: one folder of {id}.nii.gz predictions
        source = source / f"{snakemake.wildcards.vid}.nii.gz"
    data, affine = load_volume(source)
    off_grid = snakemake.params.off_grid
    data = onto_grid(str(source), data, affine, grid, off_grid=off_grid, what="label", label=True, log=log)
    check_labels(str(source), data, list(range(1, snakemake.params.n_classes + 1)))
    save_volume(snakemake.output.label, np.round(data), np.asarray(grid["affine"]), dtype=np.int16)
    log.info("imported %s", source)
