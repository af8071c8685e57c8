"""The re-identification network (Packhäuser et al., Methods): one backbone shared by
both branches of a siamese pair, and the scores a privacy filter can use.

A ResNet (MONAI's, built in .resnet; 3D for volumes and latents, 2D for slices) maps a volume to a 128-d
feature vector; in the ``pretrained`` space a frozen pretrained encoder's features come in
and only its replaced last layer, Linear(features -> 128), trains (Packhäuser et al. train
all of an ImageNet ResNet-50; fine-tuning a 3D ResNet-152 is out of reach on CPUs). The verification head merges two feature vectors by the absolute
difference of their sigmoids, then one fully connected layer and a sigmoid give the
probability that both come from one patient. The retrieval variant has no head: it is
trained with a contrastive loss and ranks by Euclidean distance.

Scores a filter can threshold (Dombrowski et al. 3.2: Pred / Corr / L1 / L2) are all
*similarities*, higher = more alike: ``pred`` the head's probability, ``corr`` the
Pearson correlation of the feature vectors, ``l1`` and ``l2`` the negated mean absolute
and Euclidean feature distances. Calibration and filtering then read the same way for
every head.

"The feature vector" is the one the network was trained to compare: for a verification
network the sigmoid of the backbone's output, which its head merges (``forward_once`` in
Packhäuser et al.'s code and in Reynaud et al.'s EchoNet-Synthetic filter, whose
``apply.py`` scores by ``torch.corrcoef`` of those vectors: the filter Koeken et al.
evaluated); for a retrieval network the raw output, whose Euclidean distance the
contrastive loss shapes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..io import without_timings
from ..training import save_torch

# the pairwise distance of every pair in turn, with the IEEE square root: the matrix-product form
# (torch's default beyond 25 rows) takes the root through MKL's vector math (synthaudit.numerics)
_EXACT = "donot_use_mm_for_euclid_dist"

HEADS = ("pred", "corr", "l1", "l2")
BACKBONES = {"resnet10": [1, 1, 1, 1], "resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}
OBJECTIVES = ("verification", "retrieval")
HEAD_INIT = 1.0  # initial head weight x sqrt(feature_dim), negative (see SiameseNetwork)


class SiameseNetwork(nn.Module):
    """Shared ResNet backbone (``embed``) and, for verification, the pair head."""

    def __init__(self, config: Mapping):
        super().__init__()
        self.config = dict(config)
        if config["backbone"] == "linear":
            # frozen pretrained features in (the pretrained space): Packhäuser's replaced fc layer,
            # Linear(features -> feature_dim), is what trains
            self.backbone = nn.Linear(int(config["in_channels"]), int(config["feature_dim"]))
        elif config["backbone"] not in BACKBONES:
            raise ValueError(f"backbone {config['backbone']!r}: choose one of {sorted(BACKBONES)}")
        else:
            self.backbone = self._resnet(config)
        self.head = nn.Linear(int(config["feature_dim"]), 1) if config["objective"] == "verification" else None
        if self.head is not None:
            # start from "a smaller feature difference means more likely one patient": a random
            # head is as likely to learn the inverse early on, and with the few pairs of a small
            # training set early stopping can keep that inverted head
            nn.init.constant_(self.head.weight, -HEAD_INIT / int(config["feature_dim"]) ** 0.5)
            nn.init.zeros_(self.head.bias)

    @staticmethod
    def _resnet(config: Mapping) -> nn.Module:
        from .resnet import ResNet

        return ResNet(BACKBONES[config["backbone"]], int(config["spatial_dims"]), int(config["in_channels"]),
                      int(config["feature_dim"]), float(config["width"]), int(config["stem_stride"]), config["norm"])

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, *spatial) or (B, features) -> (B, feature_dim) features."""
        return self.backbone(x)

    def pair_logits(self, fa: torch.Tensor, fb: torch.Tensor) -> torch.Tensor:
        """Logits of "same patient" for paired rows of two feature batches."""
        if self.head is None:
            raise ValueError("a retrieval network has no verification head (use corr, l1 or l2)")
        return self.head(torch.abs(torch.sigmoid(fa) - torch.sigmoid(fb)))[:, 0]


def score_matrix(model: SiameseNetwork, fa: torch.Tensor, fb: torch.Tensor, head: str,
                 chunk: int = 256) -> torch.Tensor:
    """(A, B) similarities of every row of ``fa`` with every row of ``fb`` (higher = more alike)."""
    if head not in HEADS:
        raise ValueError(f"score head {head!r}: choose one of {list(HEADS)}")
    fa, fb = fa.float(), fb.float()
    if head != "pred" and model.head is not None:
        fa, fb = torch.sigmoid(fa), torch.sigmoid(fb)
    if head == "corr":
        za = fa - fa.mean(1, keepdim=True)
        zb = fb - fb.mean(1, keepdim=True)
        za = za / za.norm(dim=1, keepdim=True).clamp_min(1e-12)
        zb = zb / zb.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return za @ zb.T
    if head == "l2":
        return -torch.cdist(fa, fb, compute_mode=_EXACT)
    if head == "l1":
        return -torch.cdist(fa, fb, p=1, compute_mode=_EXACT) / fa.shape[1]
    if model.head is None:
        raise ValueError("head 'pred' needs a verification network; this one was trained for retrieval")
    sa, sb = torch.sigmoid(fa), torch.sigmoid(fb)
    out = torch.empty(len(fa), len(fb), dtype=fa.dtype, device=fa.device)
    with torch.no_grad():
        for i in range(0, len(fa), chunk):  # (chunk, B, D) differences, bounded memory
            diff = torch.abs(sa[i : i + chunk, None, :] - sb[None, :, :])
            out[i : i + chunk] = torch.sigmoid(model.head(diff)[..., 0])
    return out


@torch.no_grad()
def embed_all(model: SiameseNetwork, x, device: torch.device, batch: int = 8) -> torch.Tensor:
    """Features of a whole stack (numpy or tensor, (N, C, *spatial)), on the CPU."""
    model.to(device).eval()
    x = torch.as_tensor(x)
    parts = [model.embed(x[i : i + batch].to(device).float()).cpu() for i in range(0, len(x), batch)]
    return torch.cat(parts) if parts else torch.empty(0, int(model.config["feature_dim"]))


def save_network(path: str | os.PathLike, model: SiameseNetwork, history: list[dict], meta: Mapping) -> None:
    """Weights, architecture and what the network was trained on (the input space), atomically;
    the history without its per-epoch times (the file is the same bytes on every run; the
    times are in the history table beside it)."""
    save_torch({"state_dict": model.state_dict(), "config": model.config, "history": without_timings(history),
                "meta": dict(meta)}, path)


def load_network(path: str | os.PathLike, space: Mapping | None = None) -> tuple[SiameseNetwork, dict]:
    """A network saved by :func:`save_network` and its metadata with ``history`` (CPU, eval mode).

    Args:
        space: The input space the caller will feed (``space`` name and ``key``, see
            :mod:`.data`); refused when the network was trained on another one, since
            its scores would be meaningless there.

    Raises:
        FileNotFoundError: No file.
        ValueError: Not a synthaudit privacy network, or trained on another input space.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: privacy filter not found")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        config, meta = dict(saved["config"]), {**saved["meta"], "history": list(saved["history"])}
        model = SiameseNetwork(config)
        model.load_state_dict(saved["state_dict"])
    except Exception as e:  # torch raises many types for corrupt or foreign files
        raise ValueError(f"{path}: not a privacy filter saved by synthaudit ({type(e).__name__}: {e})") from e
    if space is not None and (meta.get("space"), meta.get("key")) != (space["space"], space["key"]):
        raise ValueError(
            f"{path}: this filter was trained in {meta.get('space')} space ({meta.get('key')}), but the inputs "
            f"are in {space['space']} space ({space['key']}); train a filter on these inputs "
            "(a filter only scores the representation it learned)")
    return model.eval(), meta
