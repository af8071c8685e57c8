"""What the in-workflow trainings (U-Net, latent diffusion) share: deterministic torch
state around a training run, and the atomically written per-epoch checkpoint."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import torch

from .io import atomic_path


def save_torch(obj, path: str | os.PathLike) -> None:
    """``torch.save`` atomically, the same bytes for the same object: torch names the archive
    inside the file after the file it writes, which for an atomic write is a random temporary
    name; written through a file object it is always ``archive`` (``dvc status``)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms`` without its import of ``torch._inductor``.

    Why: the public call imports the compiler stack (``torch._inductor.config``, and with it
    ``torch._dynamo``) to set inductor's flag, 1.2 s of every training job on 2 cores, for
    code we never compile. The eager flag is the same switch; when inductor is already
    loaded (someone compiles) the public call keeps both in step."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        setter(mode, warn_only=warn_only)


@contextlib.contextmanager
def deterministic(device: torch.device, seed: int):
    """Seed torch in a forked RNG and enable deterministic algorithms, restoring both afterwards."""
    was_enabled = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        _set_deterministic(True, warn_only=True)
        try:
            yield
        finally:
            _set_deterministic(was_enabled, warn_only=was_warn_only)


def save_checkpoint(path: str | Path, model, optimiser, history: list[dict], config: dict) -> None:
    """Model, optimiser, history and configuration after an epoch, written atomically."""
    save_torch({"model": model.state_dict(), "optimizer": optimiser.state_dict(), "epoch": len(history),
                "history": history, "config": config}, path)


class EarlyStopping:
    """Keep the weights of the best validation loss; say when ``patience`` epochs brought none better."""

    def __init__(self, model: torch.nn.Module, patience: int):
        self.model, self.patience = model, int(patience)
        self.best, self.best_epoch, self.since, self._state = float("inf"), 0, 0, None

    def step(self, val_loss: float, epoch: int) -> bool:
        """Record one epoch's validation loss; True when training should stop."""
        if val_loss < self.best - 1e-9:
            self.best, self.best_epoch, self.since = val_loss, epoch, 0
            self._state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            return False
        self.since += 1
        return self.since >= self.patience

    def restore(self) -> None:
        """Load the best weights back into the model."""
        if self._state is not None:
            self.model.load_state_dict(self._state)
