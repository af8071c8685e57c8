"""Snakemake adapter: the held-out scans' texture and blur curve (synthaudit.relict.texture.heldout_texture),
once per training set, for every synthetic set's smoothness check."""

from synthaudit.io import load_volume, write_json
from synthaudit.logs import logged
from synthaudit.relict.texture import heldout_texture

with logged(snakemake.log[0]) as log:
    paths = list(snakemake.input.heldout)
    ids = [path.rsplit("/", 1)[-1].removesuffix(".nii.gz") for path in paths]
    out = heldout_texture([load_volume(path)[0] for path in paths], ids)
    write_json(snakemake.output[0], out)
    log.info("texture and blur curve of %d held-out scans", len(paths))
