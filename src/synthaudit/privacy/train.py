"""Training a re-identification network on scan pairs (Packhäuser et al., Methods).

Each epoch uses every positive pair of the training patients and as many freshly drawn
negative pairs ("randomized negative pairs", times ``negatives_per_positive``); each
batch embeds its distinct scans once and scores the pairs from those features.
Verification minimises binary cross-entropy of the pair head; retrieval the
contrastive loss (Hadsell et al.) with a margin on the Euclidean feature distance.
Validation pairs (the validation patients' positives and a fixed draw of negatives) give
the early-stopping loss; the weights of the best validation epoch are returned. Every
random draw comes from ``seed``, so one seed gives one network.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .. import numerics_torch
from ..devices import resolve_device
from ..training import deterministic
from .data import PrivacyDataError, negative_pairs, positive_pairs
from .model import OBJECTIVES, SiameseNetwork


def network_config(network: Mapping, objective: str, x: np.ndarray) -> dict:
    """The architecture for inputs ``x``: (N, C, *spatial) images, 2D or 3D from the input;
    (N, F) feature vectors of a frozen pretrained encoder (the ``pretrained`` space): then the
    trained part is the encoder's replaced last layer, Linear(F -> feature_dim)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: choose one of {list(OBJECTIVES)}")
    if x.ndim not in (2, 4, 5):
        raise PrivacyDataError(f"inputs must be (N, C, H, W), (N, C, D, H, W) or (N, features), got shape {x.shape}")
    if x.ndim == 2:
        return {"backbone": "linear", "feature_dim": int(network["feature_dim"]), "spatial_dims": 0,
                "in_channels": int(x.shape[1]), "objective": objective}
    return {"backbone": network["backbone"], "feature_dim": int(network["feature_dim"]),
            "width": float(network["width"]), "stem_stride": int(network["stem_stride"]),
            "norm": network["norm"], "spatial_dims": x.ndim - 2, "in_channels": int(x.shape[1]),
            "objective": objective}


def pair_loss(model: SiameseNetwork, features: torch.Tensor, pairs: torch.Tensor, same: torch.Tensor,
              margin: float, positive_weight: float = 1.0) -> torch.Tensor:
    """Mean loss of pairs (rows index ``features``); ``same`` is 1 for one patient.

    ``positive_weight`` (the number of negatives drawn per positive) weighs positive
    pairs in the cross-entropy so that the head learns as from balanced pairs: its 0.5
    threshold then means "as likely one patient as two", as in the paper's balanced setup.
    """
    fa, fb = features[pairs[:, 0]], features[pairs[:, 1]]
    if model.head is not None:
        weight = torch.where(same > 0, torch.full_like(same, positive_weight), torch.ones_like(same))
        return F.binary_cross_entropy_with_logits(model.pair_logits(fa, fb), same, weight=weight)
    d = numerics_torch.sqrt(((fa - fb) ** 2).sum(1) + 1e-12)
    return (same * d**2 + (1 - same) * torch.clamp(margin - d, min=0) ** 2).mean() / 2


def train_network(
    x: np.ndarray,
    patients: Sequence[str],
    train_idx: Sequence[int],
    val_idx: Sequence[int],
    network: Mapping,
    training: Mapping,
    *,
    objective: str = "verification",
    seed: int = 0,
    device: str | torch.device = "auto",
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[SiameseNetwork, list[dict]]:
    """Train one network; returns it (best validation epoch, eval mode, CPU) and the
    history (epoch, loss, val_loss, seconds per epoch).

    Raises:
        PrivacyDataError: No positive pair in the training or validation patients.
    """
    x = np.ascontiguousarray(x, np.float32)
    pos_train = positive_pairs(patients, train_idx)
    pos_val = positive_pairs(patients, val_idx)
    if len(pos_train) == 0 or len(pos_val) == 0:
        raise PrivacyDataError(f"positive pairs: {len(pos_train)} for training, {len(pos_val)} for validation; "
                               "both need a patient with two scans")
    ratio = int(training["negatives_per_positive"])
    val_rng = np.random.default_rng([seed, 1])
    val_pool = list(val_idx) + list(train_idx) if len({patients[i] for i in val_idx}) < 2 else list(val_idx)
    neg_val = negative_pairs(patients, val_pool, len(pos_val) * ratio, val_rng)
    val_pairs = np.concatenate([pos_val, neg_val])
    val_same = np.r_[np.ones(len(pos_val)), np.zeros(len(neg_val))].astype(np.float32)

    dev = resolve_device(device)
    config = network_config(network, objective, x)
    margin = float(training["margin"])
    batch = int(training["batch_pairs"])
    epochs, patience = int(training["epochs"]), int(training["patience"])
    history: list[dict] = []
    with deterministic(dev, seed):
        model = SiameseNetwork(config).to(dev)
        optimiser = numerics_torch.adam(model.parameters(), lr=float(training["learning_rate"]))
        best, best_loss, best_epoch, since_best = copy.deepcopy(model.state_dict()), float("inf"), 0, 0
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            rng = np.random.default_rng([seed, 2, epoch])
            neg = negative_pairs(patients, train_idx, len(pos_train) * ratio, rng)
            pairs = np.concatenate([pos_train, neg])
            same = np.r_[np.ones(len(pos_train)), np.zeros(len(neg))].astype(np.float32)
            order = rng.permutation(len(pairs))
            model.train()
            total = 0.0
            for b in range(0, len(order), batch):
                sel = order[b : b + batch]
                loss = _batch_loss(model, x, pairs[sel], same[sel], margin, dev, ratio)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(sel)
            model.eval()
            with torch.no_grad():
                val_loss = sum(float(_batch_loss(model, x, val_pairs[b : b + batch], val_same[b : b + batch],
                                                 margin, dev, ratio)) * len(val_pairs[b : b + batch])
                               for b in range(0, len(val_pairs), batch)) / len(val_pairs)
            seconds = time.perf_counter() - start
            history.append({"epoch": epoch, "loss": total / len(pairs), "val_loss": val_loss, "seconds": seconds})
            if val_loss < best_loss:
                best, best_loss, best_epoch, since_best = copy.deepcopy(model.state_dict()), val_loss, epoch, 0
            else:
                since_best += 1
            if progress:
                progress(epoch, epochs)
            if since_best >= patience:
                if log:
                    log(f"early stop after epoch {epoch}: no validation improvement for {patience} epochs")
                break
        model.load_state_dict(best)
    for row in history:
        row["best"] = row["epoch"] == best_epoch
    return model.cpu().eval(), history


def _batch_loss(model, x, pairs: np.ndarray, same: np.ndarray, margin: float, dev, ratio: float) -> torch.Tensor:
    """Embed each distinct scan of the batch once, then score its pairs."""
    unique, inverse = np.unique(pairs, return_inverse=True)
    features = model.embed(torch.from_numpy(x[unique]).to(dev))
    local = torch.from_numpy(inverse.reshape(pairs.shape)).to(dev)
    return pair_loss(model, features, local, torch.from_numpy(same).to(dev), margin, ratio)
