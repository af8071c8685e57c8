"""Snakemake adapter: every volume of a spiked synthetic set (perturbed replicas, possibly
augmented, and held-out scans), with label maps warped by the same deformation when the rule
has them.

One job per set: a volume takes a fraction of a second, less than a job's start. Each volume
draws from its own stream, seeded by its id, so a file does not depend on the batching."""

import zlib

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import Progress, logged
from synthaudit.synthetic.spiked import augment, perturb

with logged(snakemake.log[0]) as log:
    rows = snakemake.params.rows
    labelled = len(snakemake.output.labels) > 0
    progress = Progress(log, "spiked volumes", len(rows))
    for k, row in enumerate(rows):
        data, affine = load_volume(snakemake.input.images[k])
        label = load_volume(snakemake.input.labels[k])[0] if labelled else None
        # one independent, reproducible stream per synthetic id
        rng = np.random.default_rng([snakemake.params.seed, zlib.crc32(row["id"].encode())])
        out, out_label = perturb(data, label, affine, row["strength"], snakemake.params.perturbation, rng)
        augmentation = row.get("augmentation", "none")
        if augmentation != "none":  # a training-time augmentation on top (spiked.augmented)
            out, out_label, done = augment(out, out_label, affine, augmentation, row, rng)
            log.info("%s: augmented by %s", row["id"], done)
        if labelled:
            save_volume(snakemake.output.labels[k], out_label, affine, dtype=np.int16)
        save_volume(snakemake.output.images[k], out, affine, dtype=np.float32)
        log.info("%s: %s of %s at strength %.2f (reference Likert %d)%s", row["id"], row["kind"],
                 row["source_id"], row["strength"], row["likert"],
                 f", label values {np.unique(out_label).tolist()}" if labelled else "")
        progress(k + 1)
