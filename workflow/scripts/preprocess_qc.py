"""Snakemake adapter: the registration QC table and montage of a dataset."""

import json

import nibabel as nib

from synthaudit.io import load_volume, write_tsv
from synthaudit.logs import logged
from synthaudit.preprocess.qc import (CONSISTENCY_COLUMNS, CONVERGENCE_COLUMNS, add_consistency, montage_png,
                                      qc_note, registration_warnings)

with logged(snakemake.log[0]) as log:
    rows = [json.loads(open(p).read()) for p in snakemake.input.qc]
    template, _ = load_volume(snakemake.input.template_roi)
    template_constant = bool(template.min() == template.max())
    for r in rows:  # why a correlation is NA (constant scan or template), in the table itself
        r["note"] = qc_note(r["min"], r["max"], template_constant) if "min" in r else ""
    vols = [(sid, load_volume(p)[0]) for sid, p in zip(snakemake.params.ids, snakemake.input.images)]
    # same-patient consistency (issue 29): are a patient's registered scans each other's nearest?
    add_consistency(rows, [v for _, v in vols], snakemake.params.patients,
                    nib.load(snakemake.input.images[0]).header.get_zooms()[:3])
    cols = ["id", "registered", "metric_mattes_mi", "correlation_to_template", "qc_pass", *CONSISTENCY_COLUMNS,
            *CONVERGENCE_COLUMNS, "stop_condition", "note", "file"]
    write_tsv(snakemake.output.table, rows, cols)
    for line in registration_warnings(rows):
        log.warning(line)
    failed = [r["id"] for r in rows if r.get("qc_pass") is False]
    if failed and snakemake.params.min_correlation is not None:
        log.warning("QC: %d scan(s) below correlation %.2f with the template: %s",
                    len(failed), snakemake.params.min_correlation, failed)
    constant = [r["id"] for r in rows if r.get("min") is not None and r["min"] == r["max"]]
    if constant:
        log.warning("QC: %d constant scan(s), no correlation: %s", len(constant), constant)
    if template_constant:
        log.warning("QC: the template is constant (every voxel %g): no correlation for any scan", float(template.min()))
    title = "Registered scans over the template (edges)"
    if template_constant:
        title += "\nthe template (grid reference) is constant: no outline, no correlation"
    montage_png(snakemake.output.montage, vols, template, title=title)
    log.info("QC of %d scans written", len(rows))
