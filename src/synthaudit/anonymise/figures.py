"""Figures of the anonymisation comparison: AUC against D (paper Fig. 2) and t-SNE (Fig. 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..plotting import save_figure  # noqa: E402

FAMILY_STYLE = {"k-Same": ("#d95f02", "s"), "CVAE offline": ("#1b9e77", "o"), "original": ("#444444", "x")}


def auc_vs_distance(path, summary: Sequence[Mapping], title: str) -> None:
    """Mean AUC (x) against mean D (y) per method, SD over seeds as error bars.

    Top right is best: useful and far from every training vector. The vertical line is
    the AUC of the probe trained on the real features; online CVAE rows store no set,
    so they have no D and appear as ticks on the top axis.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    original = next((s for s in summary if s["family"] == "original"), None)
    if original is not None:
        ax.axvline(original["auc"], color="#444444", ls="--", lw=1, label=f"real features (AUC {original['auc']:.2f})")
    for family, (colour, marker) in FAMILY_STYLE.items():
        rows = [s for s in summary if s["family"] == family and family != "original"]
        for s in rows:
            ax.errorbar(s["auc"], s["D"], xerr=s["auc_sd"], yerr=s["D_sd"], color=colour, marker=marker, ms=6,
                        capsize=2, ls="none")
            ax.annotate(s["method"].replace("CVAE offline ", ""), (s["auc"], s["D"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=7, color=colour)
        if rows:
            ax.plot([], [], color=colour, marker=marker, ls="none", label=family)
    online = [s for s in summary if s["family"] == "CVAE online"]
    for s in online:
        ax.annotate(s["method"].replace("CVAE online ", ""), xy=(s["auc"], 1.0), xycoords=("data", "axes fraction"),
                    xytext=(s["auc"], 0.9), textcoords=("data", "axes fraction"), fontsize=6, color="#7570b3",
                    ha="center", arrowprops={"arrowstyle": "-|>", "color": "#7570b3"})
    if online:
        ax.plot([], [], color="#7570b3", marker="$\\uparrow$", ls="none", label="CVAE online (AUC only)")
    ax.set_xlabel("AUC on the real test set")
    ax.set_ylabel("D (training-SD units)")
    ax.set_title(title, fontsize=9, pad=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    save_figure(fig, path)


def tsne_panels(path, training: np.ndarray, training_labels: np.ndarray, shared: Mapping[str, tuple],
                classes: Sequence[str], title: str, seed: int = 0, perplexity: float = 30.0) -> None:
    """One t-SNE panel per shared set: real training vectors (circles) and shared (crosses), by class."""
    from sklearn.manifold import TSNE

    names = list(shared)
    cols = min(4, len(names))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, name in zip(axes.flat, names):
        vectors, labels = shared[name]
        x = np.vstack([training, vectors])
        perp = max(1.0, min(float(perplexity), (len(x) - 1) / 3.0))
        emb = TSNE(n_components=2, init="pca", random_state=seed, perplexity=perp).fit_transform(x)
        real, anon = emb[:len(training)], emb[len(training):]
        for c, name_c in enumerate(classes):
            ax.scatter(*real[training_labels == c].T, s=12, color=colours(c), alpha=0.45, label=f"real {name_c}")
            ax.scatter(*anon[np.asarray(labels) == c].T, s=18, color=colours(c), marker="x", label=f"shared {name_c}")
        ax.set_title(name, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="best")
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
