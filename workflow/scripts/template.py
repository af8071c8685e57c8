"""Snakemake adapter: the registration template and the preprocessed grid of a dataset."""

import numpy as np

from synthaudit.io import save_volume, write_json
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import load_template, output_grid
from synthaudit.preprocess.register import resample_to_grid

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    reference = snakemake.input.reference or None
    grid = output_grid(pre, reference if isinstance(reference, str) else (reference[0] if reference else None))
    if pre["register"]:
        data, affine = load_template(pre["template"], pre["spacing_mm"])
    else:  # no registration: the "template" is the reference volume itself, for QC only
        from synthaudit.io import load_volume

        data, affine = load_volume(grid["reference"])
    roi = resample_to_grid(data, affine, None, np.asarray(grid["affine"]), tuple(grid["shape"]), order=1,
                           default_value=float(data.min()))
    save_volume(snakemake.output.template, data.astype(np.float32), affine)
    save_volume(snakemake.output.template_roi, roi.astype(np.float32), np.asarray(grid["affine"]))
    write_json(snakemake.output.grid, grid)
    log.info("grid %s at %s mm (registered: %s)", grid["shape"], grid["spacing_mm"], grid["registered"])
