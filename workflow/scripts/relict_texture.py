"""Snakemake adapter: the synthetic set's smoothness and noise against the held-out scans'
(synthaudit.relict.texture), per volume (texture.tsv) and per set (texture.json), with the blur
and noise that degrade the held-out scans to the samples' texture (the matched null's)."""

from synthaudit.io import load_volume, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict.texture import (blur_curve, compare_sets, matched_degradation, texture_line,
                                       volume_texture)

with logged(snakemake.log[0]) as log:
    rows, held_volumes = [], []
    for role, paths in (("heldout", snakemake.input.heldout), ("synthetic", snakemake.input.synthetic)):
        for path in paths:
            vol = load_volume(path)[0]
            rows.append({"id": path.rsplit("/", 1)[-1].removesuffix(".nii.gz"), "role": role, **volume_texture(vol)})
            if role == "heldout":
                held_volumes.append(vol)
    log.info("texture of %d held-out scans and %d synthetic volumes; blurring the held-out scans",
             len(held_volumes), len(rows) - len(held_volumes))
    curve = blur_curve(held_volumes)
    summary = compare_sets([r for r in rows if r["role"] == "synthetic"], [r for r in rows if r["role"] == "heldout"],
                           curve, percentiles=snakemake.params.percentiles)
    summary["degradation"] = matched_degradation(summary, held_volumes, snakemake.params.seed)
    write_tsv(snakemake.output.table, rows, ["id", "role", "noise_sd", "sharpness", "n_voxels"])
    write_json(snakemake.output.summary, summary)
    for line in texture_line(summary, matched=snakemake.params.matched):
        log.info("%s", line.strip())
