"""Snakemake adapter: one segmentation-level measure (Dice or ASD, binary or multiclass) for all pairs."""

import json
import time

import numpy as np

from synthaudit.io import load_volume
from synthaudit.logs import Progress, logged
from synthaudit.relict.matrix import MeasureMatrix
from synthaudit.segment.measures import all_pairs_segmentation_measures, check_labels

with logged(snakemake.log[0]) as log:
    measure = snakemake.wildcards.measure
    grid = json.loads(open(snakemake.input.grid).read())
    classes = list(range(1, len(snakemake.params.classes) + 1))

    def labels(path):
        data = load_volume(path)[0]
        check_labels(path, data, classes)
        return np.round(data).astype(np.int16)

    n_train = len(snakemake.input.training)
    start = time.perf_counter()
    values = all_pairs_segmentation_measures(
        [labels(p) for p in snakemake.input.synthetic], (labels(p) for p in snakemake.input.training), classes,
        grid["spacing_mm"], measures=[measure], n_training=n_train,
        progress=Progress(log, f"{measure}: training label maps compared", n_train))[measure]
    seconds = time.perf_counter() - start
    MeasureMatrix(values, measure, snakemake.params.synthetic_ids, snakemake.params.training_ids,
                  seconds).save(snakemake.output[0])
    log.info("%s: %d pairs in %.1f s (classes %s)", measure, values.size, seconds, snakemake.params.classes)
