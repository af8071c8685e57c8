"""Snakemake adapter: the label map of a spiked replica, warped by the same deformation as its image."""

import zlib

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.synthetic.spiked import perturb_label

with logged(snakemake.log[0]) as log:
    row = snakemake.params.row
    label, affine = load_volume(snakemake.input.label)
    # the same stream as spike_volume.py: the displacement is its first draw
    rng = np.random.default_rng([snakemake.params.seed, zlib.crc32(row["id"].encode())])
    out = perturb_label(label, affine, row["strength"], snakemake.params.perturbation, rng)
    save_volume(snakemake.output.label, out, affine, dtype=np.int16)
    log.info("%s: label of %s (values %s)", row["id"], row["source_id"], np.unique(out).tolist())
