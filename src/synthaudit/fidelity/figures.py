"""The fidelity figure: training, held-out and synthetic embeddings on the two leading principal axes
of the training scans, the synthetic volumes that are not authentic (nearer a training scan than
that scan's nearest other real scan) marked."""

from __future__ import annotations

import numpy as np

from ..plotting import plt, save_figure
from .measures import pca_fit


def embedding_figure(path, split: dict, rows: list[dict], title: str) -> None:
    train = split["train"].x
    mean, axes = pca_fit(train, 2)
    fig, ax = plt.subplots(figsize=(6.5, 5))
    for name, colour, marker, label in (("train", "#4d4d4d", "o", "training scans"),
                                        ("heldout", "#1b7837", "s", "held-out scans (new patients)"),
                                        ("synthetic", "#2166ac", "^", "synthetic volumes")):
        xy = (split[name].x - mean) @ axes.T
        if xy.shape[1] < 2:
            xy = np.hstack([xy, np.zeros((len(xy), 1))])
        ax.scatter(xy[:, 0], xy[:, 1], s=22, c=colour, marker=marker, alpha=0.75, label=label)
        if name == "synthetic":
            copied = np.array([not r["authentic"] for r in rows])
            if copied.any():
                ax.scatter(xy[copied, 0], xy[copied, 1], s=110, facecolors="none", edgecolors="#b2182b",
                           linewidths=1.5, label="not authentic (Alaa et al.)")
    ax.set_xlabel("principal axis 1 (training embeddings)")
    ax.set_ylabel("principal axis 2")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    save_figure(fig, path)
