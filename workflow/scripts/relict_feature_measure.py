"""Snakemake adapter: one feature-level measure (embedding RMSE or cosine) for all pairs."""

import time

import numpy as np

from synthaudit.features.compare import all_pairs_feature_measures, load_embeddings, standardise
from synthaudit.io import atomic_path
from synthaudit.logs import logged
from synthaudit.registry import to_distance

with logged(snakemake.log[0]) as log:
    measure = snakemake.wildcards.measure
    expect = snakemake.params.extractor
    syn_ids, syn, meta = load_embeddings(snakemake.input.synthetic, expect_extractor=expect)
    train_ids, train, train_meta = load_embeddings(snakemake.input.training, expect_extractor=expect)
    if meta.get("options") != train_meta.get("options"):
        raise ValueError(f"{snakemake.input.synthetic} and {snakemake.input.training} were embedded with other "
                         f"options ({meta.get('options')} vs {train_meta.get('options')}); recompute the embeddings")
    start = time.perf_counter()
    scaling = snakemake.params.scaling
    syn, train = standardise(syn, train, scaling)  # "none": RELICT's raw embeddings
    values = all_pairs_feature_measures(syn, train, [measure])[measure]
    seconds = time.perf_counter() - start
    with atomic_path(snakemake.output[0]) as tmp:
        np.savez(tmp, values=values, distances=to_distance(measure, values), measure=measure,
                 synthetic_ids=np.array(syn_ids), training_ids=np.array(train_ids), seconds=seconds,
                 extractor=meta["label"])
    log.info("%s with %s (feature scaling: %s): %d pairs in %.2f s", measure, meta["label"], scaling, values.size,
             seconds)
