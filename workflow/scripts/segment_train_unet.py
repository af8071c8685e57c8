"""Snakemake adapter: train the in-workflow 3D U-Net on the training labels (resumable)."""

import torch

from synthaudit.io import load_volume, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.segment.labels import check_labels
from synthaudit.segment.unet import save_model, train_unet

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.unet
    n_classes = len(snakemake.params.classes)
    images = [load_volume(p)[0] for p in snakemake.input.images]
    labels = []
    for p in snakemake.input.labels:
        lab = load_volume(p)[0]
        check_labels(p, lab, list(range(1, n_classes + 1)))
        labels.append(lab.astype("uint8"))

    progress = Progress(log, "U-Net epochs", cfg["epochs"], every_s=30.0)  # the first epoch gives the ETA

    model, history = train_unet(images, labels, n_classes, epochs=cfg["epochs"],
                                patch_size=tuple(cfg["patch_size"]), batch_size=cfg["batch_size"],
                                learning_rate=cfg["learning_rate"], seed=cfg["seed"], channels=tuple(cfg["channels"]),
                                progress=progress, checkpoint_path=snakemake.params.checkpoint, resume=True)
    save_model(snakemake.output.model, model, {"n_classes": n_classes, "channels": list(cfg["channels"]),
                                               "classes": list(snakemake.params.classes)})
    write_tsv(snakemake.output.history, history)
    log.info("trained %d epochs; final loss %s", len(history), history[-1] if history else None)
