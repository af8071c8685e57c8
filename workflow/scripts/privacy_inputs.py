"""Snakemake adapter: the arrays a privacy filter sees, in one input space.

``real.npz`` (rule privacy_inputs): every real scan of the training set (training and
held-out roles) with its patient id and role; ``synthetic.npz`` (rule
privacy_inputs_synthetic): every synthetic set filtered against it. Both are z-scored
with the training scans' statistics (stored in real.npz). ``image`` space block-averages the
preprocessed volumes; ``latent`` space encodes them with the generator's autoencoder;
``pretrained`` space embeds them with ``privacy.pretrained``'s frozen encoder.
"""

import functools
import hashlib

import numpy as np

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
    import torch  # latent and pretrained spaces only: image space is NumPy, and torch costs 1.5-2.6 s to import

    torch.set_num_threads(snakemake.threads)
    if space == "pretrained":
        extractor = _pretrained_extractor()
        out = []
        for k, path in enumerate(paths, 1):  # one volume at a time: a ResNet-152's maps of a batch are large
            out.append(extractor.embed_many(load_volume(path)[0][None])[0])
            progress(k)
        return np.stack(out).astype(np.float32)
    from synthaudit.generate import ldm

    model, _ = ldm.load_autoencoder(snakemake.input.autoencoder)
    latents, _ = ldm.encode(model, [load_volume(p)[0] for p in paths])
    progress(len(paths))
    return latents


@functools.cache
def _pretrained_extractor():
    """privacy.pretrained's encoder, built as the feature level builds relict.features'."""
    from synthaudit.features import extractor_from_config

    cfg = snakemake.params.pretrained or {}
    return extractor_from_config({"extractor": cfg["extractor"], "weights": cfg.get("weights"),
                                  "grid": cfg.get("grid")})


with logged(snakemake.log[0]) as log:
    space = snakemake.wildcards.space
    p = snakemake.params
    if "real" in snakemake.output.keys():  # rule privacy_inputs: the real scans, and the scale
        check_patients(p.ids, p.patients, p.roles, f"dataset {snakemake.wildcards.dataset}")
        real = _arrays(list(snakemake.input.real), space, log, "real")
        if space == "image":
            key = f"image/downsample{p.downsample}/{'x'.join(map(str, real.shape[2:]))}"
        elif space == "pretrained":
            ext = _pretrained_extractor()
            key = f"pretrained/{ext.name}/{(ext.weights_sha256 or 'untrained')[:12]}/{real.shape[1]}"
        else:
            key = f"latent/{p.autoencoder}/{_file_digest(snakemake.input.autoencoder)}"
        train = np.array(p.roles) == "train"
        real, mean, std = standardise(real, real[train], per_feature=space == "pretrained")
        common = {"space": np.array(space), "key": np.array(key), "mean": np.asarray(mean, np.float64),
                  "std": np.asarray(std, np.float64)}
        with atomic_path(snakemake.output.real, suffix=".npz") as tmp:
            np.savez(tmp, x=real, ids=np.array(p.ids), patients=np.array(p.patients), roles=np.array(p.roles),
                     **common)
        log.info("%s space (%s): %d real inputs of shape %s", space, key, len(real), list(real.shape[1:]))
    else:  # rule privacy_inputs_synthetic: every synthetic set on the real scans' scale
        with np.load(snakemake.input.reference) as ref:
            common = {k: ref[k] for k in ("space", "key", "mean", "std")}
            shape = ref["x"].shape[1:]
        syn = _arrays(list(snakemake.input.synthetic), space, log, "synthetic") if snakemake.input.synthetic else \
            np.empty((0, *shape), np.float32)
        syn = ((syn - np.asarray(common["mean"])) / np.asarray(common["std"])).astype(np.float32)
        with atomic_path(snakemake.output.synthetic, suffix=".npz") as tmp:
            np.savez(tmp, x=syn, ids=np.array(p.syn_ids, dtype=str), datasets=np.array(p.syn_datasets, dtype=str),
                     **common)
        log.info("%s space (%s): %d synthetic inputs of shape %s", space, common["key"], len(syn), list(shape))
