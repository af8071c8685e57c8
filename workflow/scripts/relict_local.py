"""Snakemake adapter: local replicas of one dataset (relict.local; synthaudit.relict.local_audit).

Reads the volumes (checked on the grid), runs the local level (calls, held-out check, positive
controls with their diagnostics) and writes ``local_calls.tsv``, ``local_controls.tsv``,
``local.json`` and the two figures (synthaudit.relict.local_figures).
"""

from pathlib import Path

import numpy as np

from synthaudit.io import check_on_grid, load_volume, write_json, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.relict import local_audit, local_figures

with logged(snakemake.log[0]) as log:
    import json

    p = snakemake.params
    grid_info = json.loads(open(snakemake.input.grid).read())
    for ids, paths, what in ((p.synthetic_ids, snakemake.input.synthetic, "synthetic"),
                             (p.heldout_ids, snakemake.input.heldout, "held-out")):
        names = [Path(x).name for x in paths]
        if names != [f"{i}.nii.gz" for i in ids]:
            raise ValueError(f"{what} volumes and ids disagree ({names[:3]} vs {list(ids)[:3]}): the plan is stale")

    def raw(path):
        data, aff = load_volume(path)
        check_on_grid(path, data, aff, grid_info)
        return np.asarray(data, np.float32)

    train_paths, labels = list(snakemake.input.training), list(snakemake.input.labels)
    window = grid_info.get("intensity_range")
    cohort = local_audit.Cohort(
        synthetic=np.stack([raw(x) for x in snakemake.input.synthetic]),
        heldout=np.stack([raw(x) for x in snakemake.input.heldout]),
        load_training=lambda j: raw(train_paths[j]), training_ids=list(p.training_ids),
        training_patients=list(p.training_patients), synthetic_ids=list(p.synthetic_ids),
        heldout_ids=list(p.heldout_ids), heldout_patients=list(p.heldout_patients),
        spacing_mm=[float(s) for s in grid_info["spacing_mm"]], affine=np.asarray(grid_info["affine"], np.float64),
        window=tuple(window) if window is not None else None, source_patients=dict(p.source_patients),
        load_label=(lambda j: np.asarray(load_volume(labels[j])[0])) if labels else None)
    settings = local_audit.LocalSettings.from_config(p.local, p.n_closest, p.rate)  # merged by WorkflowPlan.local
    progress = Progress(log, "training volumes compared block by block", len(train_paths))
    result = local_audit.run(cohort, settings, threads=int(snakemake.threads), log=log, progress=progress)
    write_tsv(snakemake.output.calls, result.calls, local_audit.CALL_COLUMNS)
    write_tsv(snakemake.output.controls, result.controls, local_audit.CONTROL_COLUMNS)
    summary = result.summary
    summary["settings"] = {**p.local, **summary["settings"]}  # every relict.local parameter as run
    if summary["controls"]:
        summary["controls"]["figure"] = f"results/figures/{snakemake.wildcards.dataset}/local_controls.png"
    write_json(snakemake.output.summary, summary)
    local_figures.copies_figure(result, cohort, snakemake.wildcards.dataset, snakemake.output.figure, cohort.load_training)
    local_figures.controls_figure(result, cohort, snakemake.wildcards.dataset, snakemake.output.control_figure,
                                  cohort.load_training, settings.margin_mm)
