"""The conditional VAE of Di Salvo et al. (4.1) and anonymisation by sampling its decoder.

Encoder: [features, one-hot label] -> Linear(hidden) -> ReLU -> (mu, log variance) of a
``latent``-d Gaussian (the paper's "two linear layers having 256 and 100 dimensions").
Decoder: [z, one-hot label] -> Linear(hidden) -> ReLU -> Linear(features), the mirror.
Loss: squared reconstruction error plus ``beta`` x KL to N(0, I), both per sample (beta 0.1
weights reconstruction first, as in the paper). ``reconstruction: sum`` (the default) sums the
squared error over the features; ``mean`` averages it, the paper's "MSE" read literally, which
weights the KL term D times more (D = 256 after the projection: an effective beta of 25.6 in the
``sum`` form; docs/deviations.md). Adam, early stopping on a validation loss, the best weights kept.

Only the decoder is shared: :func:`save_decoder` writes it with what a recipient needs to
use it (classes, latent size, the common scale), and :func:`anonymise` is Algorithm 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from .. import numerics_torch
from ..config import default_of
from ..training import EarlyStopping, save_torch


class CVAE(nn.Module):
    def __init__(self, n_features: int, n_classes: int, hidden: int, latent: int):
        super().__init__()
        self.n_features, self.n_classes, self.hidden, self.latent = n_features, n_classes, hidden, latent
        self.encoder = nn.Sequential(nn.Linear(n_features + n_classes, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.log_var = nn.Linear(hidden, latent)
        self.decoder = Decoder(n_features, n_classes, hidden, latent)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        onehot = nn.functional.one_hot(y, self.n_classes).to(x.dtype)
        h = self.encoder(torch.cat([x, onehot], dim=1))
        mu, log_var = self.mu(h), self.log_var(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * log_var)
        return self.decoder(z, y), mu, log_var


class Decoder(nn.Module):
    """(z, label) -> feature vector: the part a data owner shares."""

    def __init__(self, n_features: int, n_classes: int, hidden: int, latent: int):
        super().__init__()
        self.n_features, self.n_classes, self.hidden, self.latent = n_features, n_classes, hidden, latent
        self.net = nn.Sequential(nn.Linear(latent + n_classes, hidden), nn.ReLU(), nn.Linear(hidden, n_features))

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        onehot = nn.functional.one_hot(y, self.n_classes).to(z.dtype)
        return self.net(torch.cat([z, onehot], dim=1))


def cvae_loss(recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, log_var: torch.Tensor,
              beta: float, reconstruction: str = "sum") -> torch.Tensor:
    """Per-sample mean of (squared error + beta x KL(q(z|x, y) || N(0, I))), the squared error
    summed (``reconstruction="sum"``) or averaged (``"mean"``: the MSE) over the features."""
    if reconstruction not in ("sum", "mean"):
        raise ValueError(f"reconstruction must be 'sum' or 'mean', got {reconstruction!r}")
    sq = (recon - x) ** 2
    sse = sq.sum(dim=1) if reconstruction == "sum" else sq.mean(dim=1)
    kl = -0.5 * (1 + log_var - mu ** 2 - log_var.exp()).sum(dim=1)
    return (sse + beta * kl).mean()


def train_cvae(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n_classes: int,
               cfg: Mapping, seed: int, device: str | torch.device = "cpu", log=None) -> tuple[CVAE, list[dict]]:
    """Fit a CVAE on (x, y); early stopping on the validation loss (best weights kept).

    Args:
        cfg: ``hidden``, ``latent``, ``beta``, ``learning_rate``, ``batch_size``,
            ``max_epochs``, ``patience``, optionally ``reconstruction`` (sum | mean).
        seed: Initialisation, batch order and the reparameterisation noise.

    Returns:
        The model (best epoch, eval mode, on the CPU) and the per-epoch history.
    """
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = CVAE(x.shape[1], n_classes, int(cfg["hidden"]), int(cfg["latent"])).to(dev)
        xt, yt = torch.as_tensor(x, dtype=torch.float32, device=dev), torch.as_tensor(y, device=dev)
        xv, yv = torch.as_tensor(x_val, dtype=torch.float32, device=dev), torch.as_tensor(y_val, device=dev)
        opt = numerics_torch.adam(model.parameters(), lr=float(cfg["learning_rate"]))
        batch, beta = int(cfg["batch_size"]), float(cfg["beta"])
        reconstruction = str(cfg.get("reconstruction") or default_of("anonymise.cvae.reconstruction"))  # library callers may omit it
        stopper, history = EarlyStopping(model, cfg["patience"]), []
        for epoch in range(int(cfg["max_epochs"])):
            model.train()
            order = torch.randperm(len(xt), generator=gen).to(dev)
            total = 0.0
            for start in range(0, len(xt), batch):
                rows = order[start:start + batch]
                recon, mu, log_var = model(xt[rows], yt[rows])
                loss = cvae_loss(recon, xt[rows], mu, log_var, beta, reconstruction)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(rows)
            model.eval()
            with torch.no_grad():
                # validation without sampling noise: reconstruct from the mean
                h = model.encoder(torch.cat([xv, nn.functional.one_hot(yv, n_classes).float()], dim=1))
                mu, log_var = model.mu(h), model.log_var(h)
                val = float(cvae_loss(model.decoder(mu, yv), xv, mu, log_var, beta, reconstruction))
            history.append({"epoch": epoch + 1, "train_loss": total / len(xt), "val_loss": val})
            if stopper.step(val, epoch + 1):
                break
        stopper.restore()
    if log is not None:
        log.info("CVAE seed %d: %d epochs, best validation loss %.4g (epoch %d)", seed, len(history), stopper.best,
                 stopper.best_epoch)
    return model.cpu().eval(), history


def sample_labels(class_counts: np.ndarray, n: int, rng: np.random.Generator, exact: bool) -> np.ndarray:
    """``n`` labels in the training class proportions: drawn (Algorithm 1, step 3) or exact.

    ``exact`` reproduces the proportions as closely as whole numbers allow (largest
    remainders), the paper's fair comparison with k-Same ("the same exact class
    proportions"); the order is shuffled either way.
    """
    p = np.asarray(class_counts, np.float64) / np.sum(class_counts)
    if not exact:
        return rng.choice(len(p), size=n, p=p)
    counts = np.floor(p * n).astype(int)
    rest = n - counts.sum()
    counts[np.argsort(-(p * n - counts), kind="stable")[:rest]] += 1
    return rng.permutation(np.repeat(np.arange(len(p)), counts))


def decode(decoder: Decoder, labels: np.ndarray, variance: float, generator: torch.Generator) -> np.ndarray:
    """Algorithm 1, steps 4-5: z ~ N(0, variance I), then the conditional decoder."""
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    z = torch.randn(len(y), decoder.latent, generator=generator) * float(np.sqrt(variance))
    with torch.no_grad():
        return decoder(z, y).numpy().astype(np.float64)


def anonymise(decoder: Decoder, class_counts: np.ndarray, n: int, variance: float, seed: int,
              exact_proportions: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1: ``n`` anonymous feature vectors and their labels."""
    rng = np.random.default_rng(seed)
    labels = sample_labels(class_counts, n, rng, exact_proportions)
    return decode(decoder, labels, variance, torch.Generator().manual_seed(int(seed))), labels


def save_decoder(path: str | os.PathLike, decoder: Decoder, meta: Mapping) -> None:
    """Write the shareable decoder: weights, sizes and ``meta`` (classes, scale, extractor)."""
    payload = {"state_dict": decoder.state_dict(),
               "config": {"n_features": decoder.n_features, "n_classes": decoder.n_classes,
                          "hidden": decoder.hidden, "latent": decoder.latent},
               "meta": dict(meta)}
    save_torch(payload, path)


def load_decoder(path: str | os.PathLike) -> tuple[Decoder, dict]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    decoder = Decoder(**payload["config"])
    decoder.load_state_dict(payload["state_dict"])
    return decoder.eval(), payload["meta"]
