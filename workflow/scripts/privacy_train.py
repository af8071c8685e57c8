"""Snakemake adapter: train one re-identification network (filter i, with the configured
filter_objective, or the retrieval variant) on the training set's scan pairs, split patient-wise
for early stopping."""

import numpy as np
import torch

from synthaudit.io import write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.privacy.data import patient_split
from synthaudit.privacy.model import save_network
from synthaudit.privacy.train import train_network

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.privacy
    name = snakemake.wildcards.model
    npz = np.load(snakemake.input.real)
    x, patients, roles = npz["x"], [str(p) for p in npz["patients"]], [str(r) for r in npz["roles"]]
    train_rows = [i for i, r in enumerate(roles) if r == "train"]
    train_idx, val_idx = patient_split(patients, train_rows, cfg["training"]["validation_fraction"],
                                       cfg["training"]["split_seed"])
    objective = "retrieval" if name == "retrieval" else cfg["filter_objective"]
    seed = cfg["training"]["seed"] + (0 if name == "retrieval" else int(name.removeprefix("filter")))
    log.info("%s (%s, seed %d) in %s space: %d training scans of %d patients, %d validation scans of %d patients",
             name, objective, seed, str(npz["space"]), len(train_idx), len({patients[i] for i in train_idx}),
             len(val_idx), len({patients[i] for i in val_idx}))
    progress = Progress(log, f"{name} epochs", cfg["training"]["epochs"], every_s=10.0)
    model, history = train_network(x, patients, train_idx, val_idx, cfg["network"], cfg["training"],
                                   objective=objective, seed=seed, progress=progress, log=log.info)
    ids = [str(i) for i in npz["ids"]]
    meta = {"space": str(npz["space"]), "key": str(npz["key"]), "objective": objective, "seed": seed,
            "train_ids": [ids[i] for i in train_idx], "val_ids": [ids[i] for i in val_idx]}
    save_network(snakemake.output.model, model, history, meta)
    write_tsv(snakemake.output.history, history)
    best = min(history, key=lambda r: r["val_loss"])
    log.info("%s: %d epochs (%.2f s each), best validation loss %.4g at epoch %d", name, len(history),
             float(np.mean([r["seconds"] for r in history])), best["val_loss"], best["epoch"])
