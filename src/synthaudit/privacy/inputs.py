"""The arrays a privacy filter sees, in one input space (rules privacy_inputs, privacy_inputs_synthetic).

``real.npz``: every real scan of the training set (training and held-out roles) with its patient
id and role; ``synthetic.npz``: every synthetic set filtered against it. Both are z-scored with the
training scans' statistics (stored in real.npz). ``image`` space block-averages the preprocessed
volumes; ``latent`` space encodes them with the generator's autoencoder; ``pretrained`` space
embeds them with ``privacy.pretrained``'s frozen encoder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..io import atomic_path, load_volume
from ..logs import Progress
from .data import check_patients, image_input, standardise


@dataclass
class Space:
    """One input space and what it needs: ``downsample`` (image), ``pretrained`` (privacy.pretrained),
    ``autoencoder`` (the generator's checkpoint and its dataset's name, latent space)."""

    name: str
    downsample: int = 1
    pretrained: dict | None = None
    autoencoder: str | None = None
    autoencoder_name: str | None = None
    threads: int = 1
    _extractor: object = None

    def extractor(self):
        """privacy.pretrained's encoder, built once, as the feature level builds relict.features'."""
        if self._extractor is None:
            from ..features import extractor_from_config

            cfg = self.pretrained
            self._extractor = extractor_from_config({"extractor": cfg["extractor"], "weights": cfg["weights"],
                                                     "grid": cfg["grid"]})
        return self._extractor


def file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def space_arrays(paths: Sequence[str], space: Space, log, label: str) -> np.ndarray:
    """The volumes at ``paths`` as the space's inputs, one row each (float32)."""
    progress = Progress(log, f"{label} volumes", len(paths), every_s=10.0)
    if space.name == "image":
        out = []
        for k, p in enumerate(paths, 1):
            out.append(image_input(load_volume(p)[0], space.downsample))
            progress(k)
        return np.stack(out).astype(np.float32)
    import torch  # latent and pretrained spaces only: image space is NumPy, and torch costs 1.5-2.6 s to import

    torch.set_num_threads(space.threads)
    if space.name == "pretrained":
        extractor = space.extractor()
        out = []
        for k, path in enumerate(paths, 1):  # one volume at a time: a ResNet-152's maps of a batch are large
            out.append(extractor.embed_many(load_volume(path)[0][None])[0])
            progress(k)
        return np.stack(out).astype(np.float32)
    from ..generate import ldm

    model, _ = ldm.load_autoencoder(space.autoencoder)
    latents, _ = ldm.encode(model, [load_volume(p)[0] for p in paths])
    progress(len(paths))
    return latents


def space_key(space: Space, real: np.ndarray) -> str:
    """What the inputs are, so a filter trained on one space is never applied to another's."""
    if space.name == "image":
        return f"image/downsample{space.downsample}/{'x'.join(map(str, real.shape[2:]))}"
    if space.name == "pretrained":
        ext = space.extractor()
        return f"pretrained/{ext.name}/{(ext.weights_sha256 or 'untrained')[:12]}/{real.shape[1]}"
    return f"latent/{space.autoencoder_name}/{file_digest(space.autoencoder)}"


def write_real(path, paths: Sequence[str], ids, patients, roles, space: Space, dataset: str, log) -> None:
    """real.npz: every real scan in the space, z-scored by the training scans' statistics."""
    check_patients(ids, patients, roles, f"dataset {dataset}")
    real = space_arrays(list(paths), space, log, "real")
    key = space_key(space, real)
    train = np.array(roles) == "train"
    real, mean, std = standardise(real, real[train], per_feature=space.name == "pretrained")
    common = {"space": np.array(space.name), "key": np.array(key), "mean": np.asarray(mean, np.float64),
              "std": np.asarray(std, np.float64)}
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, x=real, ids=np.array(ids), patients=np.array(patients), roles=np.array(roles), **common)
    log.info("%s space (%s): %d real inputs of shape %s", space.name, key, len(real), list(real.shape[1:]))


def write_synthetic(path, paths: Sequence[str], reference, ids, datasets, space: Space, log) -> None:
    """synthetic.npz: every synthetic set on the real scans' scale (``reference``: real.npz)."""
    with np.load(reference) as ref:
        common = {k: ref[k] for k in ("space", "key", "mean", "std")}
        shape = ref["x"].shape[1:]
    syn = space_arrays(list(paths), space, log, "synthetic") if paths else np.empty((0, *shape), np.float32)
    syn = ((syn - np.asarray(common["mean"])) / np.asarray(common["std"])).astype(np.float32)
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, x=syn, ids=np.array(ids, dtype=str), datasets=np.array(datasets, dtype=str), **common)
    log.info("%s space (%s): %d synthetic inputs of shape %s", space.name, common["key"], len(syn), list(shape))
