"""A MONAI 3D U-Net trained on the training label maps, to segment synthetic volumes.

RELICT's segmentation level (2.3.3) compares label maps, but synthetic volumes come
without labels; RELICT segmented them with an nnU-Net trained on the training set.
This module is the in-workflow alternative: a plain MONAI U-Net, small enough to train
on a CPU for demo data and the same code on a GPU for real data.

Design choices:

* **Foreground-biased patches.** Training draws random patches; every other patch is
  centred on a labelled voxel. Lesions and vessels fill a tiny fraction of a volume,
  so uniformly drawn patches would rarely show them and the network would learn to
  predict background everywhere.
* **Per-volume intensity z-scoring**, in training and in :func:`predict` alike, so the
  network sees one intensity scale whatever the scanner or the generator's output range.
* **Determinism.** Weights are initialised from ``torch.manual_seed(seed)`` inside a
  forked RNG (the caller's RNG state is left alone), and the patches of epoch ``e``
  come from ``numpy.random.default_rng([seed, e])``: a resumed run draws exactly the
  patches an uninterrupted one would, without saving generator state. Deterministic
  torch algorithms are enabled while training (and restored afterwards).
* **Checkpoints** are written atomically after every epoch. The configuration stored
  with them includes a fingerprint of the training data, so a checkpoint is resumed only
  by the training it belongs to; another configuration is refused rather than mixed in.
  The number of epochs is not part of it: resuming with more epochs extends a training
  and gives the weights an uninterrupted run of that length would give.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from monai.inferers import sliding_window_inference
from monai.losses import DiceCELoss
from monai.networks.nets import UNet

from .. import numerics_torch
from ..devices import resolve_device
from ..training import deterministic, save_checkpoint, save_torch

_MAX_CLASSES = 255  # predictions are uint8 label maps


def train_unet(
    images: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    n_classes: int,
    *,
    epochs: int,
    patch_size: tuple[int, int, int],
    batch_size: int,
    learning_rate: float,
    seed: int,
    channels: Sequence[int] = (16, 32, 64, 128),
    device: str | torch.device = "auto",
    progress: Callable[[int, int | None], None] | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    resume: bool = True,
) -> tuple[UNet, list[dict]]:
    """Train a 3D U-Net on volumes and their label maps with Dice + cross-entropy loss.

    An epoch visits every volume once, in a seeded random order, in batches of
    ``batch_size`` patches (one patch per volume; the last batch may be smaller).

    Args:
        images: Training volumes (3D, any numeric type).
        labels: Their label maps, values 0 (background) to ``n_classes``; a map with
            other labels must be renumbered first.
        n_classes: Foreground classes (the network has ``n_classes + 1`` outputs).
        epochs: Total epochs, counting those already in a resumed checkpoint.
        patch_size: Patch shape; each side a multiple of ``2 ** (len(channels) - 1)``
            (the U-Net's downsampling) and no larger than any volume.
        batch_size: Patches per optimiser step.
        learning_rate: Adam learning rate.
        seed: Seed (non-negative) of weight initialisation and patch sampling.
        channels: Feature channels per U-Net level.
        device: ``"cpu"``, ``"cuda"`` (or a torch device) or ``"auto"`` (CUDA when
            available).
        progress: Called as ``progress(epoch, epochs)`` after each epoch.
        checkpoint_path: Where to save a checkpoint after every epoch; None: no
            checkpoints.
        resume: Continue from ``checkpoint_path`` when it exists; False starts afresh
            and overwrites it.

    Returns:
        The trained model (in eval mode, on ``device``) and the history: one dict per
        epoch with ``epoch`` (1-based), ``loss`` (mean training loss) and ``seconds``.

    Raises:
        ValueError: On inconsistent inputs or settings, or a checkpoint written by
            another configuration or with more epochs than requested (naming the file).
    """
    _check_training_inputs(images, labels, n_classes, patch_size, channels, epochs, batch_size, learning_rate)
    config = {
        "n_classes": int(n_classes),
        "channels": [int(c) for c in channels],
        "patch_size": [int(p) for p in patch_size],
        "batch_size": int(batch_size),
        "learning_rate": float(learning_rate),
        "seed": int(seed),
        "data_sha256": _fingerprint(images, labels),
    }
    dev = resolve_device(device)
    stats = [_intensity_stats(image) for image in images]

    with deterministic(dev, seed):
        model = _build_unet(n_classes, channels)
        model.to(dev)
        optimiser = numerics_torch.adam(model.parameters(), lr=learning_rate)
        history: list[dict] = []
        checkpoint = Path(checkpoint_path) if checkpoint_path is not None else None
        if checkpoint is not None and resume and checkpoint.exists():
            history = _resume(checkpoint, config, epochs, model, optimiser, dev)
        loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
        patch = np.array(patch_size)

        model.train()
        for epoch in range(len(history), epochs):
            started = time.monotonic()
            rng = np.random.default_rng([seed, epoch])
            order = rng.permutation(len(images))
            losses = []
            for first in range(0, len(order), batch_size):
                batch = [
                    _sample_patch(images[i], labels[i], stats[i], patch, rng, centred=(first + k) % 2 == 0)
                    for k, i in enumerate(order[first : first + batch_size])
                ]
                x = torch.from_numpy(np.stack([b[0] for b in batch])[:, None]).to(dev)
                y = torch.from_numpy(np.stack([b[1] for b in batch])[:, None]).to(dev)
                optimiser.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimiser.step()
                losses.append(loss.item())
            history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)),
                            "seconds": time.monotonic() - started})
            if checkpoint is not None:
                save_checkpoint(checkpoint, model, optimiser, history, config)
            if progress is not None:
                progress(epoch + 1, epochs)
    model.eval()
    return model, history


def predict(
    model: torch.nn.Module, image: np.ndarray, patch_size: tuple[int, int, int], device: str | torch.device = "auto"
) -> np.ndarray:
    """Segment a volume by sliding-window inference (overlap 0.25) and arg-max.

    The model is moved to ``device`` and set to eval mode. Volumes smaller than the
    patch are padded by MONAI and cropped back.

    Returns:
        The label map (uint8), same shape as ``image``.
    """
    image = np.asarray(image)
    if image.ndim != 3:
        raise ValueError(f"expected a 3D volume, got shape {image.shape}")
    dev = resolve_device(device)
    model.to(dev).eval()
    mean, std = _intensity_stats(image)
    x = torch.from_numpy(((image - mean) / std).astype(np.float32)[None, None]).to(dev)
    with torch.inference_mode():
        logits = sliding_window_inference(x, roi_size=tuple(int(p) for p in patch_size), sw_batch_size=4,
                                          predictor=model, overlap=0.25)
    return logits.argmax(dim=1)[0].to(torch.uint8).cpu().numpy()


def save_model(path: str | os.PathLike, model: torch.nn.Module, config: dict) -> None:
    """Save weights and configuration atomically, loadable with ``weights_only=True``.

    Args:
        path: Output file.
        model: A network from :func:`train_unet` or :func:`load_model`.
        config: Plain JSON types only; must hold ``n_classes`` and ``channels`` (to
            rebuild the network) and may hold anything else the caller needs later
            (e.g. ``patch_size``, the label map).
    """
    missing = {"n_classes", "channels"} - set(config)
    if missing:
        raise ValueError(f"model config lacks {sorted(missing)}")
    try:
        plain = json.loads(json.dumps(config))
    except (TypeError, ValueError) as e:
        raise ValueError(f"model config must hold plain JSON types only: {e}") from e
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_torch({"state_dict": state, "config": plain}, path)


def load_model(path: str | os.PathLike) -> tuple[UNet, dict]:
    """Load a model saved by :func:`save_model` (on CPU, eval mode) and its config."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: model file not found")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        config = saved["config"]
        model = _build_unet(config["n_classes"], config["channels"])
        model.load_state_dict(saved["state_dict"])
    except Exception as e:  # torch raises many types for corrupt or foreign files
        raise ValueError(f"{path}: not a model saved by synthaudit ({type(e).__name__}: {e})") from e
    return model.eval(), config


def _build_unet(n_classes: int, channels: Sequence[int]) -> UNet:
    return UNet(spatial_dims=3, in_channels=1, out_channels=int(n_classes) + 1, channels=tuple(channels),
                strides=(2,) * (len(channels) - 1), num_res_units=1)


def _check_training_inputs(images, labels, n_classes, patch_size, channels, epochs, batch_size, learning_rate):
    if len(images) != len(labels) or not images:
        raise ValueError(f"need the same positive number of images and label maps, got {len(images)} and {len(labels)}")
    if not 1 <= n_classes <= _MAX_CLASSES:
        raise ValueError(f"n_classes must be 1 to {_MAX_CLASSES}, got {n_classes}")
    if len(channels) < 2:
        raise ValueError(f"channels needs at least two levels, got {list(channels)}")
    factor = 2 ** (len(channels) - 1)
    if len(patch_size) != 3 or any(p <= 0 or p % factor for p in patch_size):
        raise ValueError(f"patch_size must be three positive multiples of {factor}, got {patch_size}")
    if epochs < 1 or batch_size < 1 or not learning_rate > 0:
        raise ValueError(f"epochs and batch_size must be >= 1 and learning_rate > 0, got {epochs}, {batch_size}, "
                         f"{learning_rate}")
    for i, (image, label) in enumerate(zip(images, labels)):
        image, label = np.asarray(image), np.asarray(label)
        if image.ndim != 3 or image.shape != label.shape:
            raise ValueError(f"volume {i}: image {image.shape} and label map {label.shape} must be 3D and match")
        if any(p > s for p, s in zip(patch_size, image.shape)):
            raise ValueError(f"volume {i}: patch_size {tuple(patch_size)} does not fit in shape {image.shape}")
        if label.min() < 0 or label.max() > n_classes or not np.array_equal(label, np.round(label)):
            raise ValueError(f"volume {i}: label values must be integers 0 to {n_classes}")


def _fingerprint(images, labels) -> str:
    """SHA-256 of the training data, so a checkpoint is resumed only on the same data."""
    digest = hashlib.sha256()
    for array in (*images, *labels):
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _intensity_stats(image: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation for z-scoring (1 for a constant volume)."""
    image = np.asarray(image, dtype=np.float64)
    std = float(image.std())
    return float(image.mean()), std if std > 0 else 1.0


def _sample_patch(image, label, stats, patch: np.ndarray, rng: np.random.Generator, centred: bool):
    """One z-scored image patch (float32) and its label patch (int64).

    ``centred``: centre the patch on a random labelled voxel (when there is one);
    otherwise place it uniformly.
    """
    shape = np.array(np.shape(image))
    foreground = np.flatnonzero(label) if centred else np.empty(0, np.intp)
    if foreground.size:
        centre = np.array(np.unravel_index(foreground[rng.integers(foreground.size)], tuple(shape)))
        start = np.clip(centre - patch // 2, 0, shape - patch)
    else:
        start = np.array([rng.integers(0, s - p + 1) for s, p in zip(shape, patch)])
    box = tuple(slice(a, a + p) for a, p in zip(start, patch))
    mean, std = stats
    image_patch = ((np.asarray(image[box], np.float64) - mean) / std).astype(np.float32)
    return image_patch, np.asarray(label[box]).astype(np.int64)


def _resume(path: Path, config: dict, epochs: int, model, optimiser, device) -> list[dict]:
    """Load a checkpoint into ``model`` and ``optimiser``; return its history."""
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
        saved_config, saved_epochs = dict(saved["config"]), int(saved["epoch"])
    except Exception as e:  # torch raises many types for corrupt or foreign files
        raise ValueError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e}); delete it to start afresh") from e
    if saved_config != config:
        differing = sorted(k for k in config.keys() | saved_config.keys() if config.get(k) != saved_config.get(k))
        raise ValueError(f"{path}: checkpoint was written by another configuration (differs in {differing}); "
                         "delete it or set resume to false")
    if saved_epochs > epochs:
        raise ValueError(f"{path}: checkpoint has {saved_epochs} epochs, more than the {epochs} requested")
    model.load_state_dict(saved["model"])
    optimiser.load_state_dict(saved["optimizer"])
    return list(saved["history"])
