"""Shared plotting: the Agg backend, atomic saving, the measures' labels and the Likert colours.

Why a module of its own: every area draws figures (RELICT's, the privacy filters', the local level's,
the generator's losses); the shared part sits below all of them, and each area's figures live in
its own package (relict/figures.py, privacy/figures.py, ...), so no import runs back up.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .io import atomic_path  # noqa: E402
from .registry import MEASURES as _MEASURES  # noqa: E402

LIKERT_COLOURS = {1: "#1a9850", 2: "#91cf60", 3: "#fc8d59", 4: "#d73027"}
MEASURE_LABELS = {name: m.label for name, m in _MEASURES.items()}


def save_figure(fig, path) -> None:
    """Write a figure as PNG atomically (a failed run leaves no half-written image) and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def _mid_slices(vol: np.ndarray) -> list[np.ndarray]:
    """Axial, coronal and sagittal mid-slices, oriented for display (superior/anterior up)."""
    x, y, z = (s // 2 for s in vol.shape)
    return [vol[:, :, z].T, vol[:, y, :].T, vol[x, :, :].T]


def loss_figure(path, histories: dict[str, list[dict]], title: str) -> None:
    """Training loss per epoch, one panel per model (log scale: losses fall by decades)."""
    fig, axes = plt.subplots(1, len(histories), figsize=(5 * len(histories), 3.6), squeeze=False)
    for ax, (name, rows) in zip(axes[0], histories.items()):
        epochs = [int(r["epoch"]) for r in rows]
        losses = [float(r["loss"]) for r in rows]
        ax.plot(epochs, losses, marker="o" if len(rows) < 30 else None, ms=3)
        if losses and min(losses) > 0:
            ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    save_figure(fig, path)
