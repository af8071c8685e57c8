"""Snakemake adapter: simulate every subject of the TOF-MRA-like demo (image and 7-class vessel labels).

One job per dataset (a subject takes a fraction of a second; a job each spent longer starting).
Each subject's stream is seeded by its number, so the files do not depend on the batching."""

from synthaudit.demo.tof import simulate_subject
from synthaudit.io import write_json
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    subjects = snakemake.params.subjects
    progress = Progress(log, "subjects simulated", len(subjects))
    for k, subject in enumerate(subjects):
        out = {"image": snakemake.output.image[k], "label": snakemake.output.label[k]}
        truth = simulate_subject(snakemake.params.demo, subject, out)
        write_json(snakemake.output.truth[k], truth)
        log.info("subject %s (variants: %s)", subject, truth.get("variants"))
        progress(k + 1)
    log.info("simulated %d subjects", len(subjects))
