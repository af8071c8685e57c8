"""Snakemake adapter: carry one label map onto the preprocessed grid (nearest neighbour).

The user's file is checked first (values outside the declared classes are refused naming
that file, before the derived copy under results/ exists)."""

import json

import numpy as np
import SimpleITK as sitk

from synthaudit.io import save_volume
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import preprocess_label

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    n = snakemake.params.n_classes
    grid = json.loads(open(snakemake.input.grid).read())
    transform = sitk.ReadTransform(snakemake.input.transform) if pre["register"] else None
    label = preprocess_label(snakemake.input.label, pre, grid, transform,
                             allowed=list(range(1, n + 1)) if n else None)
    save_volume(snakemake.output.label, label, np.asarray(grid["affine"]), dtype=np.int16)
    log.info("label values %s", np.unique(label).tolist())
