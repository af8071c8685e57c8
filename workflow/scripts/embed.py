"""Snakemake adapter: embed every volume of one dataset split with the configured extractor."""

import torch

from synthaudit.features import extractor_from_config
from synthaudit.features.compare import save_embeddings
from synthaudit.io import load_volume
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.features
    extractor = extractor_from_config(cfg)
    log.info("extractor: %s", extractor.label)
    progress = Progress(log, f"embedding {snakemake.wildcards.split} volumes", len(snakemake.input.images))
    shapes = []

    def volumes():
        for k, path in enumerate(snakemake.input.images):
            volume = load_volume(path)[0]
            shapes.append(volume.shape)
            yield volume
            progress(k + 1)

    emb = extractor.embed_many(volumes(), batch_size=snakemake.params.batch_size)
    meta = extractor.describe(shapes[0] if shapes else None)
    meta["extractor"] = cfg["extractor"]
    if meta.get("grid_used") is not None and meta["grid_used"] != meta["options"].get("grid"):
        log.warning("the feature map of %s volumes is smaller than the pooling grid %s on some axis: "
                    "pooled only down, to %s", shapes[0], meta["options"].get("grid"), meta["grid_used"])
    save_embeddings(snakemake.output[0], snakemake.params.ids, emb, meta)
    log.info("%d embeddings of dimension %d (pooling grid used: %s)", emb.shape[0], emb.shape[1],
             meta.get("grid_used"))
