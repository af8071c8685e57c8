"""Snakemake adapter: distance ratio and ranking of the synthetic volumes for one measure."""

import numpy as np

from synthaudit.io import write_tsv
from synthaudit.logs import logged
from synthaudit.relict.ratio import distance_ratio, ranking_rows
from synthaudit.relict.summary import RANKING_COLUMNS

with logged(snakemake.log[0]) as log:
    npz = np.load(snakemake.input[0])
    measure = str(npz["measure"])
    result = distance_ratio(npz["distances"], snakemake.params.n_closest, warn=log.warning)
    rows = ranking_rows(list(npz["synthetic_ids"]), list(npz["training_ids"]), result, measure)
    write_tsv(snakemake.output[0], rows, RANKING_COLUMNS)
    log.info("%s: ranked %d synthetic volumes (n=%d); most likely replica %s (ratio %.4f)", measure,
             len(rows), result.n_used, rows[0]["synthetic_id"], rows[0]["ratio"])
