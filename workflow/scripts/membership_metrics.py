"""Snakemake adapter: results/metrics/membership.json, every set's membership attacks for `dvc metrics diff`."""

import json

from synthaudit.io import write_json, write_metrics
from synthaudit.logs import logged
from synthaudit.membership.audit import metrics_entry

with logged(snakemake.log[0]) as log:
    out = {d: metrics_entry(json.loads(open(path).read())) for d, path in zip(snakemake.params.datasets,
                                                                               snakemake.input.summaries)}
    write_metrics(snakemake.output.metrics, out)
    write_json(snakemake.output.index, {"sets": list(out), "files": {d: f"results/membership/{d}/membership.json"
                                                                      for d in out}})
    log.info("membership metrics for %d set(s)", len(out))
