"""Snakemake adapter: one feature-level measure (embedding RMSE or cosine) for all pairs."""

import time

from synthaudit.features.compare import all_pairs_feature_measures, load_embeddings, standardise
from synthaudit.logs import logged
from synthaudit.relict.matrix import MeasureMatrix

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
    MeasureMatrix(values, measure, syn_ids, train_ids, seconds,
                  extras={"extractor": meta["label"]}).save(snakemake.output[0])
    log.info("%s with %s (feature scaling: %s): %d pairs in %.2f s", measure, meta["label"], scaling, values.size,
             seconds)
