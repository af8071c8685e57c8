"""Snakemake adapter: embed every volume of one dataset split with the configured extractor."""

import torch

from synthaudit.features import FlipPooled, get_extractor
from synthaudit.features.compare import save_embeddings
from synthaudit.io import load_volume
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.features
    options = {"seed": cfg["seed"]} if cfg["extractor"] == "medicalnet_resnet50" else {}
    if cfg["weights"]:
        options["weights"] = cfg["weights"]
    extractor = get_extractor(cfg["extractor"], **options)
    if cfg.get("tta_flip_axes"):  # replicas under augmentation: flip-invariant embeddings
        extractor = FlipPooled(extractor, cfg["tta_flip_axes"])
    log.info("extractor: %s", extractor.label)
    progress = Progress(log, f"embedding {snakemake.wildcards.split} volumes", len(snakemake.input.images))

    def volumes():
        for k, path in enumerate(snakemake.input.images):
            yield load_volume(path)[0]
            progress(k + 1)

    emb = extractor.embed_many(volumes())
    meta = extractor.describe()
    meta["extractor"] = cfg["extractor"]
    save_embeddings(snakemake.output[0], snakemake.params.ids, emb, meta)
    log.info("%d embeddings of dimension %d", emb.shape[0], emb.shape[1])
