"""Snakemake adapter: the registration QC table and montage of a dataset."""

import json

import nibabel as nib

from synthaudit.io import load_volume, write_tsv
from synthaudit.logs import logged
from synthaudit.preprocess.qc import (CONSISTENCY_COLUMNS, CONVERGENCE_COLUMNS, add_consistency, add_target_qc,
                                      masked_correlation, montage_png, qc_note, registration_warnings)

with logged(snakemake.log[0]) as log:
    p = snakemake.params
    rows = [json.loads(open(path).read()) for path in snakemake.input.qc]
    target, _ = load_volume(snakemake.input.target)  # what the scans were registered to, on the output grid
    target_constant = bool(target.min() == target.max())
    for r in rows:  # why a correlation is NA (constant scan or target), in the table itself
        r["note"] = qc_note(r["min"], r["max"], target_constant) if "min" in r else ""
    vols = [(sid, load_volume(path)[0]) for sid, path in zip(p.ids, snakemake.input.images)]
    # same-patient consistency (issue 29): are a patient's registered scans each other's nearest?
    add_consistency(rows, [v for _, v in vols], p.patients, nib.load(snakemake.input.images[0]).header.get_zooms()[:3])
    correlations = [masked_correlation(v, target) for _, v in vols]
    threshold = add_target_qc(rows, correlations, p.target, p.outlier_mads, p.min_correlation, p.target_id)
    cols = ["id", "registered", "metric_mattes_mi", "correlation_to_target", "correlation_to_template", "qc_pass",
            "qc_reason", *CONSISTENCY_COLUMNS, *CONVERGENCE_COLUMNS, "stop_condition", "note", "file"]
    write_tsv(snakemake.output.table, rows, cols)
    if threshold["threshold"] is not None:
        log.info("QC: correlation with the %s: threshold %.3f (%s; %d scans)", p.target, threshold["threshold"],
                 threshold["rule"], threshold["n"])
    for line in registration_warnings(rows, threshold):
        log.warning(line)
    constant = [r["id"] for r in rows if r.get("min") is not None and r["min"] == r["max"]]
    if constant:
        log.warning("QC: %d constant scan(s), no correlation: %s", len(constant), constant)
    if target_constant:
        log.warning("QC: the %s is constant (every voxel %g): no correlation for any scan", p.target, float(target.min()))
    title = f"Registered scans over the {p.target} (edges)"
    if target_constant:
        title += f"\nthe {p.target} is constant: no outline, no correlation"
    montage_png(snakemake.output.montage, vols, target, title=title)
    log.info("QC of %d scans written", len(rows))
