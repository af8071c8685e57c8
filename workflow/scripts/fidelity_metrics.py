"""Snakemake adapter: results/metrics/fidelity.json, every set's fidelity for `dvc metrics diff`."""

import json

from synthaudit.fidelity.metrics import metrics_entry
from synthaudit.io import write_json, write_metrics
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    out = {d: metrics_entry(json.loads(open(path).read())) for d, path in zip(snakemake.params.datasets,
                                                                               snakemake.input.summaries)}
    write_metrics(snakemake.output.metrics, out)
    write_json(snakemake.output.index, {"sets": list(out), "files": {d: f"results/fidelity/{d}/fidelity.json"
                                                                      for d in out}})
    log.info("fidelity metrics for %d set(s)", len(out))
