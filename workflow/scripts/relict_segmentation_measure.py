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
    training_foreground = []

    def training_labels():
        """The training maps, one at a time, counting each one's foreground voxels on the way."""
        for p in snakemake.input.training:
            data = labels(p)
            training_foreground.append(int(np.count_nonzero(data)))
            yield data

    start = time.perf_counter()
    synthetic = [labels(p) for p in snakemake.input.synthetic]
    synthetic_foreground = np.array([np.count_nonzero(s) for s in synthetic], np.int64)
    values = all_pairs_segmentation_measures(
        synthetic, training_labels(), classes,
        grid["spacing_mm"], measures=[measure], n_training=n_train,
        progress=Progress(log, f"{measure}: training label maps compared", n_train))[measure]
    seconds = time.perf_counter() - start
    # foreground voxel counts: a pair of empty maps agrees perfectly (Dice 1, ASD 0) without
    # saying anything about a copy, so the ranking flags such pairs (relict_ratio)
    MeasureMatrix(values, measure, snakemake.params.synthetic_ids, snakemake.params.training_ids, seconds,
                  extras={"synthetic_foreground": synthetic_foreground,
                          "training_foreground": np.array(training_foreground, np.int64)}).save(snakemake.output[0])
    log.info("%s: %d pairs in %.1f s (classes %s); %d of %d synthetic and %d of %d training label maps empty",
             measure, values.size, seconds, snakemake.params.classes, int((synthetic_foreground == 0).sum()),
             len(synthetic_foreground), training_foreground.count(0), n_train)
