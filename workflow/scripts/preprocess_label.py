"""Snakemake adapter: carry one label map onto the preprocessed grid (nearest neighbour).

The user's file is checked first (values outside the declared classes are refused naming
that file, before the derived copy under results/ exists)."""

import json

import numpy as np
import SimpleITK as sitk

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import preprocess_label
from synthaudit.segment.measures import check_labels

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    if snakemake.params.n_classes:
        check_labels(snakemake.input.label, load_volume(snakemake.input.label)[0],
                     list(range(1, snakemake.params.n_classes + 1)))
    grid = json.loads(open(snakemake.input.grid).read())
    transform = sitk.ReadTransform(snakemake.input.transform) if pre["register"] else None
    label = preprocess_label(snakemake.input.label, pre, grid, transform)
    save_volume(snakemake.output.label, label, np.asarray(grid["affine"]), dtype=np.int16)
    log.info("label values %s", np.unique(label).tolist())
