"""Snakemake adapter: one volume of the spiked synthetic set (a perturbed replica, possibly
augmented, or a held-out scan), and its label map warped by the same deformation when the rule has one."""

import zlib

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.synthetic.spiked import augment, perturb

with logged(snakemake.log[0]) as log:
    row = snakemake.params.row
    data, affine = load_volume(snakemake.input.image)
    label = load_volume(snakemake.input.label)[0] if "label" in snakemake.input.keys() else None
    # one independent, reproducible stream per synthetic id
    rng = np.random.default_rng([snakemake.params.seed, zlib.crc32(row["id"].encode())])
    out, out_label = perturb(data, label, affine, row["strength"], snakemake.params.perturbation, rng)
    augmentation = row.get("augmentation", "none")
    if augmentation != "none":  # a training-time augmentation on top (spiked.augmented)
        out, out_label, done = augment(out, out_label, affine, augmentation, row, rng)
        log.info("%s: augmented by %s", row["id"], done)
    if label is not None:
        save_volume(snakemake.output.label, out_label, affine, dtype=np.int16)
        log.info("label values %s", np.unique(out_label).tolist())
    save_volume(snakemake.output.image, out, affine, dtype=np.float32)
    log.info("%s: %s of %s at strength %.2f (reference Likert %d)", row["id"], row["kind"],
             row["source_id"], row["strength"], row["likert"])
