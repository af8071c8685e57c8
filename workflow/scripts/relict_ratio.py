"""Snakemake adapter: distance ratio and ranking of the synthetic volumes for one measure.

Image and feature level rank by the distance ratio; the segmentation level ranks by
the absolute distance to the closest training volume (RELICT 2.4).
"""

import numpy as np

from synthaudit.io import write_tsv
from synthaudit.logs import logged
from synthaudit.relict import levels
from synthaudit.relict.ratio import distance_ratio, ranking_rows
from synthaudit.relict.summary import RANKING_COLUMNS

with logged(snakemake.log[0]) as log:
    npz = np.load(snakemake.input[0])
    measure = str(npz["measure"])
    use_ratio = levels.get(measure).uses_ratio
    result = distance_ratio(npz["distances"], snakemake.params.n_closest, warn=log.warning)
    rows = ranking_rows(list(npz["synthetic_ids"]), list(npz["training_ids"]), result, measure, use_ratio)
    columns = RANKING_COLUMNS
    if "transform" in npz.files:  # aligned measures: which transform matched the closest volume
        row_of = {sid: i for i, sid in enumerate(npz["synthetic_ids"])}
        col_of = {tid: j for j, tid in enumerate(npz["training_ids"])}
        for r in rows:
            r["transform"] = str(npz["transform"][row_of[r["synthetic_id"]], col_of[r["closest_training_id"]]]) \
                or "identity"
        columns = RANKING_COLUMNS + ["transform"]
    write_tsv(snakemake.output[0], rows, columns)
    log.info("%s: ranked %d synthetic volumes by %s (n=%d); most likely replica %s (score %.4f)", measure,
             len(rows), "distance ratio" if use_ratio else "absolute distance", result.n_used,
             rows[0]["synthetic_id"], rows[0]["score"])
