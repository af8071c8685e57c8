"""Snakemake adapter: one volume of the spiked synthetic set (a perturbed replica or a held-out scan)."""

import zlib

import numpy as np

from synthaudit.io import load_volume, save_volume
from synthaudit.logs import logged
from synthaudit.synthetic.spiked import perturb

with logged(snakemake.log[0]) as log:
    row = snakemake.params.row
    data, affine = load_volume(snakemake.input.image)
    # one independent, reproducible stream per synthetic id
    rng = np.random.default_rng([snakemake.params.seed, zlib.crc32(row["id"].encode())])
    out, _ = perturb(data, None, affine, row["strength"], snakemake.params.perturbation, rng)
    save_volume(snakemake.output.image, out, affine, dtype=np.float32)
    log.info("%s: %s of %s at strength %.2f (reference Likert %d)", row["id"], row["kind"],
             row["source_id"], row["strength"], row["likert"])
