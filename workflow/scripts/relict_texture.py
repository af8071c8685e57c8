"""Snakemake adapter: the synthetic set's smoothness and noise against the held-out scans'
(synthaudit.relict.texture; the held-out side from relict_heldout_texture), per volume (texture.tsv)
and per set (texture.json), with the blur and noise that degrade the held-out scans to the samples'
texture (the matched null's)."""

import json

from synthaudit.io import load_volume, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict.texture import compare_sets, matched_degradation, texture_line, volume_texture

with logged(snakemake.log[0]) as log:
    held = json.loads(open(snakemake.input.heldout_texture).read())
    rows = list(held["rows"])
    for path in snakemake.input.synthetic:
        vol = load_volume(path)[0]
        rows.append({"id": path.rsplit("/", 1)[-1].removesuffix(".nii.gz"), "role": "synthetic",
                     **volume_texture(vol)})
    held_volumes = [load_volume(path)[0] for path in snakemake.input.heldout]  # the matched null's fit
    log.info("texture of %d held-out scans (%s) and %d synthetic volumes", len(held_volumes),
             snakemake.input.heldout_texture, len(rows) - len(held["rows"]))
    summary = compare_sets([r for r in rows if r["role"] == "synthetic"], [r for r in rows if r["role"] == "heldout"],
                           held["heldout_blur_curve"], percentiles=snakemake.params.percentiles)
    summary["degradation"] = matched_degradation(summary, held_volumes, snakemake.params.seed)
    write_tsv(snakemake.output.table, rows, ["id", "role", "noise_sd", "sharpness", "n_voxels"])
    write_json(snakemake.output.summary, summary)
    for line in texture_line(summary, matched=snakemake.params.matched):
        log.info("%s", line.strip())
