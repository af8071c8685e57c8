"""Snakemake adapter: simulate every patient of a demo NCCT dataset (baseline and follow-up scans).

One job per dataset: the atlas is read and Python started once, not once per patient. Each
patient's stream is seeded by its number, so every file is the one a job of its own would write."""

from synthaudit.demo.ncct import simulate_patient
from synthaudit.io import write_json
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    patients = snakemake.params.patients
    progress = Progress(log, "patients simulated", len(patients))
    keys = ("baseline_image", "baseline_label", "followup_image", "followup_label")
    for k, patient in enumerate(patients):
        out = {key: snakemake.output[key][k] for key in keys}
        truth = simulate_patient(snakemake.params.demo, patient, out, snakemake.input.atlas)
        write_json(snakemake.output.truth[k], truth)
        progress(k + 1)
    log.info("simulated %d patients", len(patients))
