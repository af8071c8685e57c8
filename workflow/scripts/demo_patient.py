"""Snakemake adapter: simulate one demo patient (baseline and follow-up scans)."""

from synthaudit.demo.ncct import simulate_patient
from synthaudit.io import write_json
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    out = {k: snakemake.output[k] for k in
           ("baseline_image", "baseline_label", "followup_image", "followup_label")}
    truth = simulate_patient(snakemake.params.demo, snakemake.wildcards.patient, out, snakemake.input.atlas)
    write_json(snakemake.output.truth, truth)
    log.info("simulated patient %s", snakemake.wildcards.patient)
