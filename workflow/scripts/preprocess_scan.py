"""Snakemake adapter: register one scan to the template and write it (and its label map,
when the rule has one) on the ROI grid."""

import json

import numpy as np
import SimpleITK as sitk

from synthaudit.io import atomic_path, load_volume, save_volume, write_json
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import load_registration_target, preprocess_image, preprocess_label
from synthaudit.segment.labels import check_labels

with logged(snakemake.log[0]) as log:
    pre = snakemake.params.preprocess
    grid = json.loads(open(snakemake.input.grid).read())
    if "reference_transform" in snakemake.input.keys():  # registration.target: reference
        template = load_registration_target(snakemake.input.reference, snakemake.input.reference_mask,
                                            snakemake.input.reference_transform)
    else:
        template = load_volume(snakemake.input.template)
    template_roi, _ = load_volume(snakemake.input.template_roi)
    log.info("preprocessing %s", snakemake.input.image)
    labelled = "label" in snakemake.output.keys()
    n = snakemake.params.n_classes
    allowed = list(range(1, n + 1)) if n else None
    if labelled:  # read once; its values checked before the registration's minutes, naming the user's file
        label_volume = load_volume(snakemake.input.label)
        if allowed:
            check_labels(snakemake.input.label, label_volume[0], allowed)
    data, transform, qc = preprocess_image(snakemake.input.image, pre, grid, template, template_roi,
                                           threads=snakemake.threads)
    affine = np.asarray(grid["affine"])
    if labelled:
        # the same transform, nearest neighbour: one resampling per scan, like the image
        label = preprocess_label(snakemake.input.label, pre, grid, transform if pre["register"] else None,
                                 volume=label_volume)
        save_volume(snakemake.output.label, label, affine, dtype=np.int16)
        log.info("label values %s", np.unique(label).tolist())
    save_volume(snakemake.output.image, data, affine, dtype=np.float32)
    with atomic_path(snakemake.output.transform) as tmp:
        sitk.WriteTransform(transform if transform is not None else sitk.Transform(3, sitk.sitkIdentity),
                            str(tmp))
    if qc.get("converged") is False:
        log.warning("registration stopped at the iteration cap on %d level(s) (registration.iterations %s): "
                    "the result may depend on the head's pose", qc["levels_at_cap"], qc["max_iterations"])
    qc["id"] = snakemake.wildcards.scan
    write_json(snakemake.output.qc, qc)
    log.info("done: %s", {k: v for k, v in qc.items() if k != "file"})
