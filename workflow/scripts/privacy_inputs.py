"""Snakemake adapter: the arrays a privacy filter sees, in one input space.

``real.npz``: every real scan of the training set (training and held-out roles) with its
patient id and role; ``synthetic.npz``: every synthetic set filtered against it. Both are
z-scored with the training scans' statistics. ``image`` space block-averages the
preprocessed volumes; ``latent`` space encodes them with the generator's autoencoder.
"""

import hashlib

import numpy as np
import torch

from synthaudit.io import atomic_path, load_volume
from synthaudit.logs import Progress, logged
from synthaudit.privacy.data import check_patients, image_input, standardise


def _file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def _arrays(paths, space, log, label):
    progress = Progress(log, f"{label} volumes", len(paths), every_s=10.0)
    if space == "image":
        factor = snakemake.params.downsample
        out = []
        for k, p in enumerate(paths, 1):
            out.append(image_input(load_volume(p)[0], factor))
            progress(k)
        return np.stack(out).astype(np.float32)
    from synthaudit.generate import ldm

    model, _ = ldm.load_autoencoder(snakemake.input.autoencoder)
    latents, _ = ldm.encode(model, [load_volume(p)[0] for p in paths])
    progress(len(paths))
    return latents


with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    space = snakemake.wildcards.space
    p = snakemake.params
    check_patients(p.ids, p.patients, p.roles, f"dataset {snakemake.wildcards.dataset}")
    real = _arrays(list(snakemake.input.real), space, log, "real")
    syn = _arrays(list(snakemake.input.synthetic), space, log, "synthetic") if snakemake.input.synthetic else \
        np.empty((0, *real.shape[1:]), np.float32)
    if space == "image":
        key = f"image/downsample{p.downsample}/{'x'.join(map(str, real.shape[2:]))}"
    else:
        key = f"latent/{p.autoencoder}/{_file_digest(snakemake.input.autoencoder)}"
    train = np.array(p.roles) == "train"
    real, mean, std = standardise(real, real[train])
    syn = ((syn - mean) / std).astype(np.float32)
    common = {"space": np.array(space), "key": np.array(key), "mean": np.float64(mean), "std": np.float64(std)}
    with atomic_path(snakemake.output.real, suffix=".npz") as tmp:
        np.savez(tmp, x=real, ids=np.array(p.ids), patients=np.array(p.patients), roles=np.array(p.roles), **common)
    with atomic_path(snakemake.output.synthetic, suffix=".npz") as tmp:
        np.savez(tmp, x=syn, ids=np.array(p.syn_ids, dtype=str), datasets=np.array(p.syn_datasets, dtype=str),
                 **common)
    log.info("%s space (%s): %d real and %d synthetic inputs of shape %s", space, key, len(real), len(syn),
             list(real.shape[1:]))
