"""Snakemake adapter: one candidate network of the feature-level study on one dataset.

Embeds the dataset's training and synthetic volumes once (each feature map pooled onto
every grid of the study), scores every grid, scaling and feature measure against the
dataset's truth or rating, and writes one table row each.
"""

import numpy as np
import torch

from synthaudit.features import extractor_from_config
from synthaudit.features.study import ROW_COLUMNS, embed_grids, score_embeddings, study_rows
from synthaudit.io import load_volume, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.ratings import consensus, read_ratings

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    p = snakemake.params
    extractor = extractor_from_config({**p.network, "grid": None})
    if not hasattr(extractor, "embed_grids"):
        raise ValueError(f"feature_study network {p.name!r}: {extractor.label} does not pool a feature map; "
                         "the study compares pooling grids of CNN encoders")
    log.info("%s on %s: %s, grids %s, scalings %s", p.name, snakemake.wildcards.dataset, extractor.label,
             p.grids, p.scalings)
    cons = consensus(read_ratings(snakemake.input.ratings, p.synthetic_ids), p.replica_min_score)
    rated = [i for i, sid in enumerate(p.synthetic_ids) if sid in cons]
    truth = np.array([cons[p.synthetic_ids[i]]["replica"] for i in rated], bool)

    def embed(paths, what):
        progress = Progress(log, f"embedding {what} volumes", len(paths))
        return embed_grids(extractor, (load_volume(f)[0] for f in paths), p.grids, progress)

    train, sec_train, shape = embed(snakemake.input.training, "training")
    syn, sec_syn, _ = embed(snakemake.input.synthetic, "synthetic")
    n = len(snakemake.input.training) + len(snakemake.input.synthetic)
    seconds = (sec_train * len(snakemake.input.training) + sec_syn * len(snakemake.input.synthetic)) / n
    log.info("%.2f s per volume (%s, %d threads)", seconds, extractor.device, snakemake.threads)
    scores = {}
    for grid, t, s in zip(p.grids, train, syn):
        for scaling in p.scalings:
            scores[(grid, scaling)] = score_embeddings(s[rated], t, truth, p.n_closest, p.threshold_step,
                                                       scaling=scaling, warn=log.warning)
            for measure, r in scores[(grid, scaling)].items():
                log.info("grid %s, scaling %s, %s: balanced accuracy %.3f, AUC %.3f", grid, scaling, measure,
                         r["balanced_accuracy"], r["auc"])
    rows = study_rows(snakemake.wildcards.dataset, p.name, extractor, shape, scores, seconds,
                      str(extractor.device))
    write_tsv(snakemake.output[0], rows, ROW_COLUMNS)
