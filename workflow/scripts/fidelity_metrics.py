"""Snakemake adapter: results/metrics/fidelity.json, every set's fidelity for `dvc metrics diff`."""

import json

from synthaudit.fidelity.metrics import metrics_entry
from synthaudit.io import write_metrics
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    out = {d: metrics_entry(json.loads(open(path).read())) for d, path in zip(snakemake.params.datasets,
                                                                               snakemake.input.summaries)}
    write_metrics(snakemake.output[0], out)
    log.info("fidelity metrics for %d set(s)", len(out))
