"""Snakemake adapter: register one scan to the template and write it on the ROI grid."""

import json

import numpy as np
import SimpleITK as sitk

from synthaudit.io import atomic_path, load_volume, save_volume, write_json
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import preprocess_image

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    grid = json.loads(open(snakemake.input.grid).read())
    template = load_volume(snakemake.input.template)
    template_roi, _ = load_volume(snakemake.input.template_roi)
    log.info("preprocessing %s", snakemake.input.image)
    data, transform, qc = preprocess_image(snakemake.input.image, pre, grid, template, template_roi,
                                           threads=snakemake.threads)
    save_volume(snakemake.output.image, data, np.asarray(grid["affine"]), dtype=np.float32)
    with atomic_path(snakemake.output.transform) as tmp:
        sitk.WriteTransform(transform if transform is not None else sitk.Transform(3, sitk.sitkIdentity),
                            str(tmp))
    qc["id"] = snakemake.wildcards.scan
    write_json(snakemake.output.qc, qc)
    log.info("done: %s", {k: v for k, v in qc.items() if k != "file"})
