"""Snakemake adapter: register one scan to the template and write it (and its label map,
when the rule has one) on the ROI grid."""

import json

import numpy as np
import SimpleITK as sitk

from synthaudit.io import atomic_path, load_volume, save_volume, write_json
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import preprocess_image, preprocess_label
from synthaudit.segment.measures import check_labels

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    grid = json.loads(open(snakemake.input.grid).read())
    template = load_volume(snakemake.input.template)
    template_roi, _ = load_volume(snakemake.input.template_roi)
    log.info("preprocessing %s", snakemake.input.image)
    if "label" in snakemake.output.keys() and snakemake.params.n_classes:
        # the user's label file, before the registration's minutes (and naming that file, not a derived copy)
        check_labels(snakemake.input.label, load_volume(snakemake.input.label)[0],
                     list(range(1, snakemake.params.n_classes + 1)))
    data, transform, qc = preprocess_image(snakemake.input.image, pre, grid, template, template_roi,
                                           threads=snakemake.threads)
    affine = np.asarray(grid["affine"])
    if "label" in snakemake.output.keys():
        # the same transform, nearest neighbour: one resampling per scan, like the image
        label = preprocess_label(snakemake.input.label, pre, grid, transform if pre["register"] else None)
        save_volume(snakemake.output.label, label, affine, dtype=np.int16)
        log.info("label values %s", np.unique(label).tolist())
    save_volume(snakemake.output.image, data, affine, dtype=np.float32)
    with atomic_path(snakemake.output.transform) as tmp:
        sitk.WriteTransform(transform if transform is not None else sitk.Transform(3, sitk.sitkIdentity),
                            str(tmp))
    qc["id"] = snakemake.wildcards.scan
    write_json(snakemake.output.qc, qc)
    log.info("done: %s", {k: v for k, v in qc.items() if k != "file"})
