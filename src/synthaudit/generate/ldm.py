"""A 3D latent diffusion model (MONAI ``AutoencoderKL`` + ``DiffusionModelUNet``).

Replica detection needs synthetic volumes from a generator whose training set is
known; this module trains one on the workflow's training volumes, following MONAI's
3D latent-diffusion tutorial (Pinaya et al. 2022) at a size a CPU can train for demo
data, and the same code on a GPU for real data.

Design choices:

* **Two stages, two checkpoints.** The autoencoder is trained first (L1 reconstruction
  + ``kl_weight`` x KL, no perceptual or adversarial loss: the perceptual network needs
  pretrained weights the workflow cannot download, and the discriminator doubles the
  cost; reconstructions are blurrier, which an audit of copying tolerates). The
  diffusion U-Net is then trained on the frozen autoencoder's latent means, multiplied
  by ``scale = 1 / std(latents)`` so the latents have unit variance as the noise
  schedule assumes (the tutorial's scale factor).
* **One global intensity mapping.** Volumes are mapped linearly from the training
  set's [min, max] to [0, 1] (one mapping for all, not per volume, so relative
  intensities between volumes survive) and samples are mapped back, so synthetic
  volumes are in the units of the training volumes. The mapping and the volume shape
  are buffers of :class:`LatentAutoencoder`, saved with its weights.
* **Padding, not resampling.** The networks halve the shape at every level, so
  volumes are zero-padded at the high end of each axis to the next multiple (after the
  intensity mapping, so the padding is the training minimum, i.e. background) and
  cropped back after decoding; latents are padded the same way for the diffusion
  U-Net's own levels. Voxels are never interpolated.
* **Determinism and resumption** as in :mod:`synthaudit.segment.unet`: weights are
  initialised from ``seed`` in a forked RNG; everything random in epoch ``e`` (order,
  crops, reparameterisation noise, diffusion noise and timesteps) comes from
  generators seeded with ``[seed, e]``, drawn on the CPU and moved to the device, so a
  resumed run equals an uninterrupted one. Checkpoints are written atomically after
  every epoch; their configuration (hyper-parameters except the epochs, the seed and
  a SHA-256 of the training data) must match to be resumed.
* **Sampling** uses DDIM (``eta = 0``, deterministic given the initial noise) without
  clipping the predicted latents (they are not bounded to [-1, 1] like images). The
  initial noise of sample ``i`` comes from a CPU generator seeded with ``[seed, i]``,
  so a sample does not depend on how many are drawn or in which batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from monai.networks.nets import AutoencoderKL, DiffusionModelUNet
from monai.networks.schedulers import DDIMScheduler, DDPMScheduler

from .. import numerics_torch
from ..devices import resolve_device
from ..training import deterministic, save_checkpoint, save_torch

_LOG = logging.getLogger(__name__)

ProgressFn = Callable[[int, int | None], None]

from .config import (  # noqa: F401  (re-exported: ldm.autoencoder_config etc.)
    AUTOENCODER_DEFAULTS,
    DIFFUSION_DEFAULTS,
    _NOT_TRAINING,
    _SCHEDULES,
    autoencoder_config,
    diffusion_config,
    _with_defaults,
    _common_training,
    _int,
    _float,
    _bool,
    _int_list,
    _bool_list,
    _per_level,
    _check_groups,
)

# --------------------------------------------------------------------------- padding


def padded_shape(shape: Sequence[int], multiple: int) -> tuple[int, ...]:
    """Each side rounded up to a multiple of ``multiple``."""
    return tuple(int(s) + (-int(s)) % int(multiple) for s in shape)


def pad_to_multiple(array: np.ndarray, multiple: int, value: float = 0.0) -> np.ndarray:
    """Pad the last three axes at their high end to the next multiple of ``multiple``.

    Leading axes (batch, channel) are left alone; :func:`crop_to_shape` undoes it.
    """
    array = np.asarray(array)
    if array.ndim < 3:
        raise ValueError(f"need at least three axes to pad, got shape {array.shape}")
    if multiple < 1:
        raise ValueError(f"multiple must be at least 1, got {multiple}")
    widths = [(0, 0)] * (array.ndim - 3) + [(0, (-s) % multiple) for s in array.shape[-3:]]
    if not any(w[1] for w in widths):
        return array
    return np.pad(array, widths, constant_values=value)


def crop_to_shape(array, shape: Sequence[int]):
    """Keep the first ``shape`` voxels of the last three axes (numpy array or torch tensor)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or array.ndim < 3 or any(s > a for s, a in zip(shape, array.shape[-3:])):
        raise ValueError(f"cannot crop shape {tuple(array.shape)} to {shape}")
    return array[..., : shape[0], : shape[1], : shape[2]]


# --------------------------------------------------------------------------- networks


class LatentAutoencoder(AutoencoderKL):
    """MONAI's ``AutoencoderKL`` (3D, one channel) that knows its volumes' shape and intensity range.

    Both are buffers (saved in the state dict): ``volume_shape`` (3 ints) and
    ``intensity_range`` (training minimum and maximum).
    """

    def __init__(self, config: Mapping):
        c = autoencoder_config(config, strict=False)
        super().__init__(
            spatial_dims=3, in_channels=1, out_channels=1, channels=tuple(c["channels"]),
            latent_channels=c["latent_channels"], num_res_blocks=tuple(c["num_res_blocks"]),
            attention_levels=tuple(c["attention_levels"]), norm_num_groups=c["norm_num_groups"],
            with_encoder_nonlocal_attn=c["nonlocal_attention"], with_decoder_nonlocal_attn=c["nonlocal_attention"],
        )
        self.factor = 2 ** (len(c["channels"]) - 1)
        self.register_buffer("volume_shape", torch.zeros(3, dtype=torch.int64))
        self.register_buffer("intensity_range", torch.tensor([0.0, 1.0], dtype=torch.float64))

    @property
    def shape(self) -> tuple[int, int, int]:
        """The shape of the volumes it encodes and decodes."""
        return tuple(int(s) for s in self.volume_shape.tolist())

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """(channels, d, h, w) of one volume's latent."""
        return (int(self.latent_channels), *(s // self.factor for s in padded_shape(self.shape, self.factor)))

    def to_input(self, volumes: np.ndarray) -> np.ndarray:
        """Volumes (N, X, Y, Z) in training units -> padded network input (N, X', Y', Z') in [0, 1], float32."""
        volumes = np.asarray(volumes)
        if volumes.shape[1:] != self.shape:
            raise ValueError(f"volumes have shape {volumes.shape[1:]}, the autoencoder was trained on {self.shape}")
        low, high = self.intensity_range.tolist()
        scaled = ((volumes.astype(np.float64) - low) / (high - low)).astype(np.float32)
        return pad_to_multiple(scaled, self.factor)

    def from_output(self, decoded: torch.Tensor) -> np.ndarray:
        """Decoder output (N, 1, X', Y', Z') -> volumes (N, X, Y, Z) in training units, float32."""
        low, high = self.intensity_range.tolist()
        x = crop_to_shape(decoded[:, 0], self.shape).detach().to("cpu", torch.float64).numpy()
        return (low + x * (high - low)).astype(np.float32)


def _build_diffusion(config: Mapping, in_channels: int) -> DiffusionModelUNet:
    c = diffusion_config(config, strict=False)
    return DiffusionModelUNet(
        spatial_dims=3, in_channels=int(in_channels), out_channels=int(in_channels), channels=tuple(c["channels"]),
        attention_levels=tuple(c["attention_levels"]), num_res_blocks=tuple(c["num_res_blocks"]),
        num_head_channels=tuple(c["num_head_channels"]), norm_num_groups=c["norm_num_groups"],
    )


class _DDPM(DDPMScheduler):
    """MONAI's DDPM scheduler, its square roots IEEE-rounded: ``alphas ** 0.5`` on a CPU tensor
    goes through MKL's vector math, whose last bits differ between CPUs (synthaudit.numerics)."""

    def add_noise(self, original_samples: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        alphas = self.alphas_cumprod.to(device=original_samples.device, dtype=original_samples.dtype)[
            timesteps.to(original_samples.device)]
        shape = (-1,) + (1,) * (original_samples.ndim - 1)
        return (numerics_torch.sqrt(alphas).reshape(shape) * original_samples
                + numerics_torch.sqrt(1 - alphas).reshape(shape) * noise)


class _DDIM(DDIMScheduler):
    """MONAI's deterministic DDIM step (eta 0, noise prediction, no clipping), its square roots
    IEEE-rounded as in :class:`_DDPM`; the same formula as ``DDIMScheduler.step``."""

    def step(self, model_output: torch.Tensor, timestep: int, sample: torch.Tensor, eta: float = 0.0,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if eta != 0.0 or self.clip_sample or self.prediction_type != "epsilon":
            raise NotImplementedError("synthaudit samples with eta 0, noise prediction and no clipping")
        previous = timestep - self.num_train_timesteps // self.num_inference_steps
        alpha = self.alphas_cumprod[timestep]
        alpha_previous = self.alphas_cumprod[previous] if previous >= 0 else self.final_alpha_cumprod
        original = (sample - numerics_torch.sqrt(1 - alpha) * model_output) / numerics_torch.sqrt(alpha)
        return numerics_torch.sqrt(alpha_previous) * original + numerics_torch.sqrt(1 - alpha_previous) * model_output, original


# --------------------------------------------------------------------------- training


def train_autoencoder(
    images: Sequence[np.ndarray] | np.ndarray,
    cfg: Mapping | None,
    *,
    seed: int,
    checkpoint: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    progress: ProgressFn | None = None,
    resume: bool = True,
) -> tuple[LatentAutoencoder, list[dict]]:
    """Train the autoencoder with L1 reconstruction + ``kl_weight`` x KL divergence.

    An epoch visits every volume once in a seeded order, ``batch_size`` volumes (or
    random crops, with ``patch_size``) per Adam step. The L1 term covers the volume,
    not the padding. The KL term is ``0.5 * sum(mu^2 + sigma^2 - log(sigma^2) - 1)``
    over the latent, averaged over the batch.

    Args:
        images: Training volumes, all of one 3D shape (any numeric type).
        cfg: Settings (:data:`AUTOENCODER_DEFAULTS`), e.g. from params.
        seed: Seed of weight initialisation and of every epoch's randomness.
        checkpoint: Written atomically after every epoch; None: no checkpoints.
        device: ``"cpu"``, ``"cuda"`` (or a torch device), or ``"auto"``.
        progress: Called as ``progress(epoch, epochs)`` after each epoch.
        resume: Continue from ``checkpoint`` when it exists; False starts afresh and
            overwrites it.

    Returns:
        The model (eval mode, on ``device``) and the history: per epoch ``epoch``
        (1-based), ``loss``, ``recon_l1``, ``kl`` (unweighted), each the mean over the
        epoch's steps, and ``seconds``.

    Raises:
        ValueError: On invalid settings or volumes, or a checkpoint of another
            configuration or with more epochs (naming the file).
        FloatingPointError: On a non-finite epoch loss (the last good epoch's
            checkpoint is kept).
    """
    c = autoencoder_config(cfg)
    volumes = _stack_volumes(images)
    low, high = float(volumes.min()), float(volumes.max())
    if not high > low:
        raise ValueError(f"the training volumes are constant ({low}); nothing to learn")
    if c["patch_size"] is not None and any(p > s for p, s in zip(c["patch_size"], volumes.shape[1:])):
        raise ValueError(f"patch_size {c['patch_size']} does not fit in volumes of shape {volumes.shape[1:]}")
    run_config = {"kind": "autoencoder", **{k: v for k, v in c.items() if k not in _NOT_TRAINING},
                  "seed": int(seed), "data_sha256": _fingerprint(volumes)}
    dev = resolve_device(device)
    shape = volumes.shape[1:]
    n = len(volumes)

    with deterministic(dev, seed):
        model = LatentAutoencoder(c)
        model.volume_shape.copy_(torch.tensor(shape))
        model.intensity_range.copy_(torch.tensor([low, high], dtype=torch.float64))
        model.to(dev)
        data = model.to_input(volumes)  # (N, X', Y', Z') in [0, 1]
        del volumes
        patch = c["patch_size"]

        def run_epoch(rng: np.random.Generator, gen: torch.Generator, optimiser) -> dict:
            order = rng.permutation(n)
            sums = np.zeros(3)
            steps = 0
            for first in range(0, n, c["batch_size"]):
                batch = order[first : first + c["batch_size"]]
                if patch is None:
                    x = data[batch]
                else:
                    x = np.stack([_random_crop(data[i], shape, patch, rng) for i in batch])
                x = torch.from_numpy(np.ascontiguousarray(x[:, None])).to(dev)
                z_mu, z_sigma = model.encode(x)
                eps = torch.randn(z_mu.shape, generator=gen, dtype=z_mu.dtype).to(dev)
                recon = model.decode(z_mu + eps * z_sigma)
                if patch is None:  # the padding is not part of the volume
                    recon_l1 = F.l1_loss(crop_to_shape(recon, shape), crop_to_shape(x, shape))
                else:
                    recon_l1 = F.l1_loss(recon, x)
                kl = kl_divergence(z_mu, z_sigma)
                loss = recon_l1 + c["kl_weight"] * kl
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                sums += [loss.item(), recon_l1.item(), kl.item()]
                steps += 1
            return dict(zip(("loss", "recon_l1", "kl"), (float(v) for v in sums / steps)))

        history = _fit(model, run_config, c, seed=seed, checkpoint=checkpoint, resume=resume, device=dev,
                       progress=progress, run_epoch=run_epoch)
    return model, history


def kl_divergence(z_mu: torch.Tensor, z_sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, sigma^2) || N(0, 1)) summed over a latent, averaged over the batch (first axis)."""
    var = z_sigma.pow(2)
    per_item = 0.5 * torch.sum(z_mu.pow(2) + var - torch.log(var) - 1, dim=tuple(range(1, z_mu.ndim)))
    return per_item.mean()


def encode(
    model: LatentAutoencoder, images: Sequence[np.ndarray] | np.ndarray, device: str | torch.device = "auto"
) -> tuple[np.ndarray, float]:
    """Encode volumes to their latent means (deterministic: no sampling), one at a time.

    Returns:
        The latents, float32 (N, C, d, h, w), and the scale factor
        ``1 / std(latents)`` (over all their values) to train the diffusion model on.

    Raises:
        ValueError: If a volume's shape is not the autoencoder's, or the latents are
            constant (no scale).
    """
    volumes = _stack_volumes(images)
    dev = resolve_device(device)
    model.to(dev).eval()
    latents = np.empty((len(volumes), *model.latent_shape), np.float32)
    with torch.inference_mode():
        for i in range(len(volumes)):
            x = torch.from_numpy(model.to_input(volumes[i : i + 1])[:, None]).to(dev)
            latents[i] = model.encode(x)[0][0].float().cpu().numpy()
    std = float(latents.std(dtype=np.float64))
    if not std > 0 or not math.isfinite(std):
        raise ValueError(f"latents have standard deviation {std}; cannot scale them")
    return latents, 1.0 / std


def train_diffusion(
    latents: np.ndarray,
    cfg: Mapping | None,
    *,
    scale: float,
    seed: int,
    checkpoint: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    progress: ProgressFn | None = None,
    resume: bool = True,
) -> tuple[DiffusionModelUNet, list[dict]]:
    """Train the diffusion U-Net to predict the noise added to scaled latents (MSE).

    Each step draws Gaussian noise and a timestep uniformly in
    ``[0, num_train_timesteps)`` per latent and noises ``latents * scale`` with a
    ``DDPMScheduler`` (``schedule``, ``beta_start``, ``beta_end``).

    Args:
        latents: (N, C, d, h, w) from :func:`encode` (unscaled).
        cfg: Settings (:data:`DIFFUSION_DEFAULTS`).
        scale: The factor from :func:`encode`.
        seed, checkpoint, device, progress, resume: As in :func:`train_autoencoder`.

    Returns:
        The U-Net (eval mode, on ``device``) and the history: per epoch ``epoch``,
        ``loss`` (mean over steps) and ``seconds``.

    Raises:
        ValueError, FloatingPointError: As in :func:`train_autoencoder`.
    """
    c = diffusion_config(cfg)
    latents = np.asarray(latents, dtype=np.float32)
    if latents.ndim != 5 or len(latents) == 0:
        raise ValueError(f"latents must be (N, C, d, h, w) with N >= 1, got shape {latents.shape}")
    if not np.isfinite(latents).all():
        raise ValueError("latents contain NaN or infinite values")
    scale = _float("scale", scale, 0.0)
    run_config = {"kind": "diffusion", **{k: v for k, v in c.items() if k not in _NOT_TRAINING},
                  "scale": scale, "seed": int(seed), "data_sha256": _fingerprint(latents)}
    dev = resolve_device(device)
    n = len(latents)
    factor = 2 ** (len(c["channels"]) - 1)
    scheduler = _DDPM(num_train_timesteps=c["num_train_timesteps"], schedule=c["schedule"],
                              beta_start=c["beta_start"], beta_end=c["beta_end"])

    with deterministic(dev, seed):
        model = _build_diffusion(c, latents.shape[1]).to(dev)
        x0_all = torch.from_numpy(pad_to_multiple(latents * np.float32(scale), factor)).to(dev)

        def run_epoch(rng: np.random.Generator, gen: torch.Generator, optimiser) -> dict:
            order = rng.permutation(n)
            losses = []
            for first in range(0, n, c["batch_size"]):
                batch = torch.from_numpy(order[first : first + c["batch_size"]]).to(dev)
                x0 = x0_all[batch]
                noise = torch.randn(x0.shape, generator=gen).to(dev)
                t = torch.randint(0, c["num_train_timesteps"], (len(batch),), generator=gen).to(dev)
                prediction = model(scheduler.add_noise(x0, noise, t), timesteps=t)
                loss = F.mse_loss(prediction.float(), noise)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                losses.append(loss.item())
            return {"loss": float(np.mean(losses))}

        history = _fit(model, run_config, c, seed=seed, checkpoint=checkpoint, resume=resume, device=dev,
                       progress=progress, run_epoch=run_epoch)
    return model, history


def _fit(model, run_config, c, *, seed, checkpoint, resume, device, progress, run_epoch) -> list[dict]:
    """The epoch loop shared by both stages: resume, per-epoch seeding, checkpoints, progress."""
    optimiser = numerics_torch.adam(model.parameters(), lr=c["learning_rate"])
    epochs = c["epochs"]
    path = Path(checkpoint) if checkpoint is not None else None
    history: list[dict] = []
    if path is not None and resume and path.exists():
        history = _resume(path, run_config, epochs, model, optimiser, device)
    model.train()
    for epoch in range(len(history), epochs):
        started = time.monotonic()
        rng = np.random.default_rng([int(seed), epoch])
        torch_seed = int(rng.integers(2**63 - 1))
        gen = torch.Generator(device="cpu").manual_seed(torch_seed)
        torch.manual_seed(torch_seed)  # anything drawing from the global RNG (inside the forked RNG)
        row = run_epoch(rng, gen, optimiser)
        if not all(math.isfinite(v) for v in row.values()):
            raise FloatingPointError(f"epoch {epoch + 1}: non-finite loss {row}; lower learning_rate")
        history.append({"epoch": epoch + 1, **row, "seconds": time.monotonic() - started})
        if path is not None:
            save_checkpoint(path, model, optimiser, history, run_config)
        if progress is not None:
            progress(epoch + 1, epochs)
    model.eval()
    return history


_FROM_DATA = {"data_sha256", "scale"}  # run_config keys measured on the training data, not set by the user


def _resume(path: Path, config: dict, epochs: int, model, optimiser, device) -> list[dict]:
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
        saved_config, saved_epochs = dict(saved["config"]), int(saved["epoch"])
    except Exception as e:  # torch raises many types for corrupt or foreign files
        raise ValueError(f"checkpoint {path} is unreadable ({type(e).__name__}: {e}); delete it to start over") from e
    if saved_config != config:
        differing = sorted(k for k in config.keys() | saved_config.keys() if config.get(k) != saved_config.get(k))
        if "data_sha256" in differing and set(differing) <= _FROM_DATA:
            # The checkpoint's name hashes the settings, which are known before any volume exists;
            # the data (and the latent scale measured on them) are not. New training data (e.g.
            # preprocessing changed) make the old run useless to resume, so it starts afresh
            # and its first epoch replaces the file.
            _LOG.warning("checkpoint %s was trained on other data (data_sha256 %s != %s): starting afresh",
                         path, _show(saved_config, "data_sha256"), _show(config, "data_sha256"))
            return []
        details = "; ".join(f"{k} {_show(saved_config, k)} != {_show(config, k)}" for k in differing)
        raise ValueError(f"checkpoint {path} was written by a different configuration: {details} "
                         "(checkpoint != requested); delete it to start over")
    if saved_epochs > epochs:
        raise ValueError(f"checkpoint {path} has {saved_epochs} epochs, more than the {epochs} requested; "
                         "raise epochs or delete it to start over")
    model.load_state_dict(saved["model"])
    optimiser.load_state_dict(saved["optimizer"])
    return [dict(row) for row in saved["history"]]


def _show(config: dict, key: str) -> str:
    text = str(config[key]) if key in config else "(absent)"
    return text if len(text) <= 24 else text[:12] + "..."


# --------------------------------------------------------------------------- sampling


def sample(
    autoencoder: LatentAutoencoder,
    unet: DiffusionModelUNet,
    n: int,
    cfg: Mapping | None,
    *,
    seed: int,
    scale: float,
    device: str | torch.device = "auto",
    progress: ProgressFn | None = None,
) -> np.ndarray:
    """Generate volumes: DDIM denoising of latent noise, then decoding.

    Args:
        autoencoder: From :func:`train_autoencoder` or :func:`load_autoencoder`.
        unet: From :func:`train_diffusion` or :func:`load_diffusion`.
        n: Number of volumes.
        cfg: The diffusion settings it was trained with (extra keys allowed, e.g. a
            loaded model's config); sampling uses the noise schedule,
            ``num_inference_steps`` and ``sample_batch_size``.
        seed: Seed of the initial noise (sample ``i`` from ``[seed, i]``).
        scale: The latent scale factor the U-Net was trained with.
        device: As in :func:`train_autoencoder`.
        progress: Called as ``progress(done, n)`` after each batch.

    Returns:
        float32 (n, X, Y, Z) in the training volumes' intensity units.
    """
    c = diffusion_config(cfg, strict=False)
    n = _int("n", n, 0)
    scale = _float("scale", scale, 0.0)
    latent_shape = autoencoder.latent_shape
    if unet.in_channels != latent_shape[0]:
        raise ValueError(f"the U-Net has {unet.in_channels} input channels, the autoencoder's latents "
                         f"{latent_shape[0]}")
    noise_shape = (latent_shape[0], *padded_shape(latent_shape[1:], 2 ** (len(unet.block_out_channels) - 1)))
    dev = resolve_device(device)
    autoencoder.to(dev).eval()
    unet.to(dev).eval()
    scheduler = _DDIM(num_train_timesteps=c["num_train_timesteps"], schedule=c["schedule"],
                              beta_start=c["beta_start"], beta_end=c["beta_end"], clip_sample=False)
    scheduler.set_timesteps(c["num_inference_steps"])
    out = np.empty((n, *autoencoder.shape), np.float32)
    with torch.inference_mode():
        for first in range(0, n, c["sample_batch_size"]):
            indices = range(first, min(n, first + c["sample_batch_size"]))
            x = torch.stack([torch.randn(noise_shape, generator=_generator([seed, i])) for i in indices]).to(dev)
            for t in scheduler.timesteps:
                timesteps = torch.full((len(indices),), int(t), dtype=torch.long, device=dev)
                x, _ = scheduler.step(unet(x, timesteps=timesteps), int(t), x)
            z = crop_to_shape(x, latent_shape[1:]) / scale
            out[first : first + len(indices)] = autoencoder.from_output(autoencoder.decode(z))
            if progress is not None:
                progress(first + len(indices), n)
    return out


def _generator(entropy) -> torch.Generator:
    seed = int(np.random.default_rng([int(e) for e in entropy]).integers(2**63 - 1))
    return torch.Generator(device="cpu").manual_seed(seed)


# --------------------------------------------------------------------------- saving


def save_model(path: str | os.PathLike, model: torch.nn.Module, config: Mapping) -> None:
    """Save a trained autoencoder or diffusion U-Net with its configuration, atomically.

    The file is loadable with ``weights_only=True``. The stored config is ``config``
    with defaults filled in, plus ``kind`` (from the model's type) and, for a U-Net,
    ``in_channels``; a U-Net's config must hold ``scale`` (needed to sample).

    Args:
        path: Output file.
        model: A :class:`LatentAutoencoder` or a ``DiffusionModelUNet``.
        config: The settings it was trained with (plain JSON types; extra keys are kept).

    Raises:
        ValueError: If the model is neither, ``config`` is not plain JSON, lacks
            ``scale`` (U-Net), or does not describe the model's architecture.
    """
    if isinstance(model, LatentAutoencoder):
        kind, stored = "autoencoder", autoencoder_config(config, strict=False)
    elif isinstance(model, DiffusionModelUNet):
        kind, stored = "diffusion", diffusion_config(config, strict=False)
        if "scale" not in stored:
            raise ValueError("a diffusion model's config must hold 'scale' (from encode) to be sampled from")
        stored["scale"] = _float("scale", stored["scale"], 0.0)
        stored["in_channels"] = int(model.in_channels)
    else:
        raise ValueError(f"expected a LatentAutoencoder or DiffusionModelUNet, got {type(model).__name__}")
    if stored.get("kind", kind) != kind:
        raise ValueError(f"config says kind {stored['kind']!r} but the model is a {kind} model")
    stored["kind"] = kind
    try:
        plain = json.loads(json.dumps(stored, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"model config must hold plain JSON types only: {e}") from e
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    with torch.device("meta"):  # rebuild without memory to check the config describes the model
        expected = {k: tuple(v.shape) for k, v in _build(plain).state_dict().items()}
    if expected != {k: tuple(v.shape) for k, v in state.items()}:
        raise ValueError(f"the config does not describe the {kind} model's architecture (channels, levels, ...)")
    save_torch({"state_dict": state, "config": plain}, path)


def load_autoencoder(path: str | os.PathLike) -> tuple[LatentAutoencoder, dict]:
    """Load an autoencoder saved by :func:`save_model` (CPU, eval mode) and its config."""
    return _load(path, "autoencoder")


def load_diffusion(path: str | os.PathLike) -> tuple[DiffusionModelUNet, dict]:
    """Load a diffusion U-Net saved by :func:`save_model` (CPU, eval mode) and its config (with ``scale``)."""
    return _load(path, "diffusion")


def _build(config: Mapping) -> torch.nn.Module:
    if config["kind"] == "autoencoder":
        return LatentAutoencoder(config)
    return _build_diffusion(config, config["in_channels"])


def _load(path, kind: str):
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: model file not found")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        config = dict(saved["config"])
        stored_kind = config["kind"]
    except Exception as e:  # torch raises many types for corrupt or foreign files
        raise ValueError(f"{path}: not a model saved by synthaudit.generate ({type(e).__name__}: {e})") from e
    if stored_kind != kind:
        raise ValueError(f"{path}: holds a {stored_kind!r} model, not a {kind!r} model")
    try:
        model = _build(config)
        model.load_state_dict(saved["state_dict"])
    except Exception as e:
        raise ValueError(f"{path}: weights do not fit the stored {kind} config ({type(e).__name__}: {e})") from e
    return model.eval(), config


# --------------------------------------------------------------------------- helpers


def _stack_volumes(images) -> np.ndarray:
    """Volumes of one 3D shape as an (N, X, Y, Z) array, refusing NaN/inf."""
    if isinstance(images, np.ndarray):
        volumes = images
    else:
        images = list(images)
        shapes = {np.shape(v) for v in images}
        if len(shapes) > 1:
            raise ValueError(f"all volumes must have one shape, got {sorted(shapes)}")
        volumes = np.stack([np.asarray(v) for v in images]) if images else np.empty((0,))
    if volumes.ndim != 4 or len(volumes) == 0:
        raise ValueError(f"need at least one 3D volume (an (N, X, Y, Z) stack), got shape {volumes.shape}")
    if not np.isfinite(volumes).all():
        bad = int(volumes.size - np.count_nonzero(np.isfinite(volumes)))
        raise ValueError(f"volumes contain {bad} NaN or infinite voxel(s)")
    return volumes


def _random_crop(volume: np.ndarray, shape, patch, rng: np.random.Generator) -> np.ndarray:
    """A uniformly placed crop inside the unpadded part of a (padded) volume."""
    start = [int(rng.integers(0, s - p + 1)) for s, p in zip(shape, patch)]
    return volume[tuple(slice(a, a + p) for a, p in zip(start, patch))]


def _fingerprint(array: np.ndarray) -> str:
    """SHA-256 of the training data, so a checkpoint is resumed only on the same data."""
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()
