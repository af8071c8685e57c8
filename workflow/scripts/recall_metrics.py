"""Snakemake adapter: results/metrics/recall.json, the recall summary of every dataset
(for `dvc metrics diff`; per-training-volume counts stay in results/relict/)."""

import json

from synthaudit.io import write_metrics
from synthaudit.logs import logged

KEYS = ("measure", "n_synthetic", "n_training", "learned_fraction", "memorised_fraction", "learned_but_memorised",
        "learned_not_memorised", "recall", "reference_learned_fraction", "matched_learned_fraction",
        "max_nn_count", "n_flagged", "flag_threshold_distance")

with logged(snakemake.log[0]) as log:
    out = {}
    for path in snakemake.input:
        s = json.loads(open(path).read())
        out[s["dataset"]] = {k: s.get(k) for k in KEYS}
    write_metrics(snakemake.output[0], out)
    log.info("recall of %d dataset(s)", len(out))
