"""Snakemake adapter: simulate one subject of the TOF-MRA-like demo (image and 7-class vessel labels)."""

from synthaudit.demo.tof import simulate_subject
from synthaudit.io import write_json
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    out = {"image": snakemake.output.image, "label": snakemake.output.label}
    truth = simulate_subject(snakemake.params.demo, snakemake.wildcards.subject, out)
    write_json(snakemake.output.truth, truth)
    log.info("simulated subject %s (variants: %s)", snakemake.wildcards.subject, truth.get("variants"))
