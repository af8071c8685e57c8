"""Snakemake adapter: embed every volume of one dataset split with the configured extractor (the
matched null's split reads the held-out scans' embeddings where it left them as they are:
synthaudit.features.compare.undegraded_embeddings)."""

from synthaudit.features.compare import save_embeddings, undegraded_embeddings
from synthaudit.io import load_volume
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    reuse = snakemake.input.get("reuse")  # matched split: texture.json, held-out embeddings, held-out scans
    found = (undegraded_embeddings(reuse[0], reuse[1], list(reuse[2:]), list(snakemake.input.images),
                                   list(snakemake.params.ids)) if reuse else None)
    if found is not None:
        emb, meta = found
        log.info("the matched null left the held-out scans as they are (%s): their %d embeddings, from %s",
                 reuse[0], emb.shape[0], reuse[1])
    else:
        import torch

        from synthaudit.features import extractor_from_config

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
