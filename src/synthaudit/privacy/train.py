"""Training a re-identification network on scan pairs (Packhäuser et al., Methods).

Each epoch uses every positive pair of the training patients and as many freshly drawn
negative pairs ("randomized negative pairs", times ``negatives_per_positive``); each
batch embeds its distinct scans once and scores the pairs from those features.

How pairs are grouped into batches is ``batching``:

* ``patients`` (default): each epoch deals the training patients, shuffled, into groups of
  about ``patients_per_batch``; a batch is every scan of one group and every pair of them, its
  positives weighted to balance its negatives. Each scan is embedded once per epoch, and a
  batch scores many pairs from few embeddings (the P x K batches of metric learning, Hermans
  et al. 2017). A patient meets the others of its group in every epoch, and other patients in
  other epochs.
* ``pairs`` (Packhäuser et al.): every pair of the epoch drawn over the whole training set,
  ``batch_pairs`` per batch; a batch of 8 pairs holds up to 16 scans, and a scan is embedded
  about four times per epoch (the cost docs/benchmarks_estimate.md measures).
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

BATCHING = ("patients", "pairs")


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
    batching, per_batch = training["batching"], int(training["patients_per_batch"])
    if batching not in BATCHING:
        raise ValueError(f"batching {batching!r}: choose one of {list(BATCHING)}")
    epochs, patience = int(training["epochs"]), int(training["patience"])
    history: list[dict] = []
    with deterministic(dev, seed):
        model = SiameseNetwork(config).to(dev)
        optimiser = numerics_torch.adam(model.parameters(), lr=float(training["learning_rate"]))
        best, best_loss, best_epoch, since_best = copy.deepcopy(model.state_dict()), float("inf"), 0, 0
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            rng = np.random.default_rng([seed, 2, epoch])
            if batching == "patients":
                batches = patient_batches(patients, train_idx, per_batch, rng)
            else:
                batches = pair_batches(patients, train_idx, pos_train, ratio, batch, rng)
            model.train()
            total, n_pairs = 0.0, 0
            for pairs, same, weight in batches:
                loss = _batch_loss(model, x, pairs, same, margin, dev, weight)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(pairs)
                n_pairs += len(pairs)
            model.eval()
            with torch.no_grad():
                val_loss = float(_batch_loss(model, x, val_pairs, val_same, margin, dev, ratio, chunk=2 * batch))
            seconds = time.perf_counter() - start
            history.append({"epoch": epoch, "loss": total / n_pairs, "val_loss": val_loss, "seconds": seconds})
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


def pair_batches(patients: Sequence[str], train_idx: Sequence[int], positives: np.ndarray, ratio: int,
                 batch: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Packhäuser et al.'s epoch: every positive pair and ``ratio`` times as many negative pairs
    drawn over all of ``train_idx``, shuffled, in batches of ``batch`` pairs: (pairs, same, the
    positives' weight ``ratio``)."""
    neg = negative_pairs(patients, train_idx, len(positives) * ratio, rng)
    pairs = np.concatenate([positives, neg])
    same = np.r_[np.ones(len(positives)), np.zeros(len(neg))].astype(np.float32)
    order = rng.permutation(len(pairs))
    return [(pairs[order[b : b + batch]], same[order[b : b + batch]], ratio) for b in range(0, len(order), batch)]


def patient_batches(patients: Sequence[str], train_idx: Sequence[int], per_batch: int,
                    rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """One epoch of patient batches: the patients of ``train_idx``, shuffled, dealt into
    ``round(P / per_batch)`` groups (sizes differ by at most one, and no group has one patient);
    per group, every pair of its scans: positive where both are one patient's, negative
    otherwise (four patients of two scans: 4 positive and 24 negative pairs from 8 scans).
    Returns (pairs, same, the positives' weight: negatives per positive, so both weigh alike) per batch."""
    by_patient: dict[str, list[int]] = {}
    for i in train_idx:
        by_patient.setdefault(patients[i], []).append(int(i))
    names = sorted(by_patient)
    if len(names) < 2:
        raise PrivacyDataError("negative pairs need scans of at least two patients")
    order = [names[k] for k in rng.permutation(len(names))]
    n_groups = max(1, min(len(names) // 2, round(len(names) / per_batch)))
    out = []
    for group in np.array_split(np.arange(len(order)), n_groups):
        scans = sorted(i for k in group for i in by_patient[order[k]])
        a, b = np.triu_indices(len(scans), k=1)
        pairs = np.array(scans, np.int64)[np.stack([a, b], axis=1)]
        owner = np.array([patients[i] for i in scans])
        same = (owner[a] == owner[b]).astype(np.float32)
        out.append((pairs, same, max(len(same) - same.sum(), 1) / max(same.sum(), 1)))
    return out


def _batch_loss(model, x, pairs: np.ndarray, same: np.ndarray, margin: float, dev, ratio: float,
                chunk: int | None = None) -> torch.Tensor:
    """Embed each distinct scan of the batch once, then score its pairs; ``chunk`` embeds the
    scans that many at a time (validation, without gradients: bounded memory)."""
    unique, inverse = np.unique(pairs, return_inverse=True)
    step = chunk or len(unique)
    features = torch.cat([model.embed(torch.from_numpy(x[unique[i : i + step]]).to(dev))
                          for i in range(0, len(unique), step)])
    local = torch.from_numpy(inverse.reshape(pairs.shape)).to(dev)
    return pair_loss(model, features, local, torch.from_numpy(same).to(dev), margin, ratio)
