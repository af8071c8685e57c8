"""The downstream task of the CVAE paper: a linear layer on (anonymised) features.

Offline: trained on a stored feature set. Online (paper 3.4 / 4.3): no stored set at
all - every batch is freshly decoded from the shared CVAE decoder. Both use Adam and
early stopping on the cross-entropy of the real validation patients (never a split of
the shared set, nor decoded vectors: what is measured is how a probe trained on the
shared data does on real patients), the best weights kept. AUC on the real test set:
binary ROC AUC, or the macro one-vs-rest mean for more classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from .. import numerics_torch
from ..training import EarlyStopping


def _fit(model: nn.Linear, batches: Callable[[int], list[tuple[torch.Tensor, torch.Tensor]]],
         x_val: torch.Tensor, y_val: torch.Tensor, cfg: Mapping) -> dict:
    opt = numerics_torch.adam(model.parameters(), lr=float(cfg["learning_rate"]))
    loss_fn = nn.CrossEntropyLoss()
    stopper, epochs = EarlyStopping(model, cfg["patience"]), 0
    for epoch in range(int(cfg["max_epochs"])):
        epochs = epoch + 1
        for xb, yb in batches(epoch):
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val = float(loss_fn(model(x_val), y_val))
        if stopper.step(val, epochs):
            break
    stopper.restore()
    return {"epochs": epochs, "best_val_loss": stopper.best}


def train_probe(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n_classes: int,
                cfg: Mapping, seed: int) -> tuple[nn.Linear, dict]:
    """Linear layer on a stored feature set (mini-batches of ``cfg['batch_size']``)."""
    gen = torch.Generator().manual_seed(int(seed))
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    batch = int(cfg["batch_size"])

    def batches(epoch):
        order = torch.randperm(len(xt), generator=gen)
        return [(xt[order[s:s + batch]], yt[order[s:s + batch]]) for s in range(0, len(xt), batch)]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = nn.Linear(x.shape[1], n_classes)
    info = _fit(model, batches, torch.as_tensor(x_val, dtype=torch.float32), torch.as_tensor(y_val), cfg)
    return model.eval(), info


def train_probe_online(sample: Callable[[int, torch.Generator], tuple[np.ndarray, np.ndarray]], n_per_epoch: int,
                       n_features: int, n_classes: int, x_val: np.ndarray, y_val: np.ndarray, cfg: Mapping,
                       seed: int) -> tuple[nn.Linear, dict]:
    """Linear layer trained on fresh samples every batch; ``sample(n, generator)`` -> (x, y).

    An epoch is ``n_per_epoch`` fresh vectors (the size of the training set, so the
    number of optimiser steps matches the offline probe's); early stopping watches the
    loss on ``(x_val, y_val)``, the real validation patients, as for every other method.
    """
    gen = torch.Generator().manual_seed(int(seed))
    batch = int(cfg["batch_size"])

    def batches(epoch):
        out = []
        for start in range(0, n_per_epoch, batch):
            xb, yb = sample(min(batch, n_per_epoch - start), gen)
            out.append((torch.as_tensor(xb, dtype=torch.float32), torch.as_tensor(yb, dtype=torch.long)))
        return out

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = nn.Linear(n_features, n_classes)
    info = _fit(model, batches, torch.as_tensor(x_val, dtype=torch.float32), torch.as_tensor(y_val), cfg)
    return model.eval(), info


def auc(model: nn.Linear, x: np.ndarray, y: np.ndarray, n_classes: int) -> float:
    """ROC AUC of the probe on (x, y): binary, or macro one-vs-rest over the classes present."""
    with torch.no_grad():
        p = torch.softmax(model(torch.as_tensor(x, dtype=torch.float32)), dim=1).numpy().astype(np.float64)
    present = np.unique(y)
    if len(present) < 2:
        raise ValueError(f"the test set holds a single class ({present.tolist()}); AUC is undefined")
    if n_classes == 2:
        return float(roc_auc_score(y, p[:, 1]))
    return float(np.mean([roc_auc_score(y == c, p[:, c]) for c in present]))
