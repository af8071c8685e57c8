"""Snakemake adapter: results/metrics/anonymise.json, per dataset and method the mean over
seeds of D (common z-scored scale, and D_raw on the extractor's scale), AUC (clean and at the largest noise), replica and flag rates (`dvc metrics diff`);
and results/anonymise/index.json, which datasets were anonymised (written even when none
is, so the DVC stage always has its output folder)."""

import json

from synthaudit.io import write_json, write_metrics
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    out = {}
    for path in snakemake.input:
        s = json.loads(open(path).read())
        noisiest = [k for k in s["methods"][0] if k.startswith("auc_noise_") and not k.endswith("_sd")][-1:]
        out[s["dataset"]] = {m["method"]: {k: m.get(k) for k in ("D", "D_raw", "auc", *noisiest, "replica_rate", "flag_rate")}
                             for m in s["methods"]}
    write_metrics(snakemake.output.metrics, out)
    write_json(snakemake.output.index, {"datasets": sorted(out), "summaries": list(snakemake.input)})
    log.info("anonymisation metrics of %d dataset(s)", len(out))
