"""Snakemake adapter: the registration QC table and montage of a dataset."""

import json

from synthaudit.io import load_volume, write_tsv
from synthaudit.logs import logged
from synthaudit.preprocess.qc import montage_png

with logged(snakemake.log[0]) as log:
    rows = [json.loads(open(p).read()) for p in snakemake.input.qc]
    cols = ["id", "registered", "metric_mattes_mi", "correlation_to_template", "qc_pass", "iterations",
            "stop_condition", "file"]
    write_tsv(snakemake.output.table, rows, cols)
    failed = [r["id"] for r in rows if r.get("qc_pass") is False]
    if failed and snakemake.params.min_correlation is not None:
        log.warning("QC: %d scan(s) below correlation %.2f with the template: %s",
                    len(failed), snakemake.params.min_correlation, failed)
    template, _ = load_volume(snakemake.input.template_roi)
    vols = [(sid, load_volume(p)[0]) for sid, p in zip(snakemake.params.ids, snakemake.input.images)]
    montage_png(snakemake.output.montage, vols, template, title="Registered scans over the template (edges)")
    log.info("QC of %d scans written", len(rows))
