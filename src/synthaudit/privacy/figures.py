"""Figures of the privacy-filter evaluation, drawn from the workflow's own outputs.

Why here: the tripartite evaluation (sensitivity, specificity, consistency; Koeken
et al.) and the Dombrowski et al. views (t-SNE of memorised training scans, best
match scores against the 95th-percentile threshold) are report rules; each figure
is written atomically so an interrupted job never leaves half a PNG behind.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..plotting import save_figure  # noqa: E402

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


_save = save_figure


def roc_figure(path, curves: dict[str, tuple[np.ndarray, np.ndarray, float]], title: str,
               note: str | None = None) -> None:
    """One ROC panel, a line per label ("label (AUC 0.93)"), chance diagonal dashed.

    Without curves (held-out patients with one scan each: no same-patient pair to verify, a
    set ``synthaudit init`` accepts), the panel says so (``note``) instead of stopping the run.
    """
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    if not curves:
        ax.text(0.5, 0.5, "no ROC: " + (note or "no verification pairs"), ha="center", va="center", wrap=True,
                fontsize=8, transform=ax.transAxes)
    ax.plot([0, 1], [0, 1], ls="--", color="#999999", lw=1, label="chance")
    for k, (label, (fpr, tpr, auc)) in enumerate(curves.items()):
        fpr = np.asarray(fpr, float)
        tpr = np.asarray(tpr, float)
        if fpr.shape != tpr.shape:
            raise ValueError(f"curve {label!r}: fpr has shape {fpr.shape}, tpr {tpr.shape}")
        ax.plot(fpr, tpr, color=PALETTE[k % len(PALETTE)], lw=1.8, label=f"{label} (AUC {float(auc):.2f})")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_aspect("equal")
    ax.set_xlabel("false-positive rate (1 - specificity)")
    ax.set_ylabel("true-positive rate (sensitivity)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    _save(fig, path)


def _histogram(result: dict, key: str) -> dict[int, int]:
    """A histogram of an agreement() dict with int keys (JSON round-trips make them str)."""
    return {int(k): int(v) for k, v in result[key].items()}


def consistency_figure(path, results: dict[str, dict], title: str) -> None:
    """Agreement of N filters per synthetic volume, grouped bars per label (Koeken Fig. 2).

    Left: how many filters name the same training patient (1..N); right: how many
    filters take the same flag / accept decision (ceil(N/2)..N).
    """
    if not results:
        raise ValueError("consistency_figure needs at least one agreement result")
    n_max = max(int(r["n_filters"]) for r in results.values())
    panels = [("patient attribution", "attribution_histogram", range(1, n_max + 1)),
              ("flag / accept decision", "decision_histogram", range((n_max + 1) // 2, n_max + 1))]
    width = 0.8 / len(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, (panel_title, key, xs) in zip(axes, panels):
        xs = list(xs)
        for k, (label, result) in enumerate(results.items()):
            hist = _histogram(result, key)
            counts = [hist.get(x, 0) for x in xs]
            offset = (k - (len(results) - 1) / 2) * width
            ax.bar(np.array(xs) + offset, counts, width=width, color=PALETTE[k % len(PALETTE)],
                   label=f"{label} (N={int(result['n_filters'])})")
        ax.set_xticks(xs)  # integer ticks, one per possible agreement count
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("number of filters agreeing")
        ax.set_title(panel_title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("number of synthetic volumes")
    axes[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    _save(fig, path)


def _as_features(x, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim == 1 and x.size == 0:
        x = x.reshape(0, 1)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a (samples, features) matrix, got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError(f"{name} contains NaN")
    return x


def tsne_figure(path, training: np.ndarray, synthetic: np.ndarray, learned: np.ndarray, title: str,
                seed: int = 0, perplexity: float = 30.0) -> None:
    """t-SNE of training and synthetic features, memorised training scans highlighted.

    The Dombrowski et al. (Fig. 5) view: training light blue, training scans with
    ``learned`` True (matched by a synthetic volume) dark blue, synthetic orange.
    sklearn needs perplexity < number of samples, so it is clamped to
    ``max(1, min(perplexity, (n - 1) / 3))``; with fewer than 4 points the first two
    principal components are drawn instead.
    """
    training = _as_features(training, "training")
    synthetic = _as_features(synthetic, "synthetic")
    learned = np.asarray(learned).reshape(-1)
    if training.size and synthetic.size and training.shape[1] != synthetic.shape[1]:
        raise ValueError(f"training has {training.shape[1]} features, synthetic {synthetic.shape[1]}")
    if learned.size != training.shape[0]:
        raise ValueError(f"learned has {learned.size} entries for {training.shape[0]} training points")
    learned = learned.astype(bool)
    n_feat = training.shape[1] if training.shape[0] else synthetic.shape[1]
    x = np.vstack([training.reshape(-1, n_feat), synthetic.reshape(-1, n_feat)])
    n = x.shape[0]
    if n == 0:
        raise ValueError("tsne_figure needs at least one point")

    if n < 4:
        centred = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        emb = centred @ vt[:2].T
        if emb.shape[1] < 2:
            emb = np.hstack([emb, np.zeros((n, 2 - emb.shape[1]))])
        title = f"{title} (PCA: too few points for t-SNE)"
        axis = "PC"
    else:
        from sklearn.manifold import TSNE

        perp = max(1.0, min(float(perplexity), (n - 1) / 3.0))
        tsne = TSNE(n_components=2, init="pca" if n_feat >= 2 else "random", random_state=seed,
                    perplexity=perp)
        emb = tsne.fit_transform(x)
        axis = "t-SNE"
    t_emb, s_emb = emb[: training.shape[0]], emb[training.shape[0]:]

    fig, ax = plt.subplots(figsize=(5.2, 4.8))
    ax.scatter(t_emb[~learned, 0], t_emb[~learned, 1], s=14, color="#9ecae1",
               label=f"training ({int((~learned).sum())})")
    ax.scatter(t_emb[learned, 0], t_emb[learned, 1], s=22, color="#08306b",
               label=f"training, learned ({int(learned.sum())})")
    ax.scatter(s_emb[:, 0], s_emb[:, 1], s=14, color="#fd8d3c", marker="^",
               label=f"synthetic ({s_emb.shape[0]})")
    ax.set_xlabel(f"{axis} 1")
    ax.set_ylabel(f"{axis} 2")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, path)


def flag_score_figure(path, scores: dict[str, np.ndarray], tau: float, title: str, xlabel: str) -> None:
    """Best match score per volume and group, with the flag threshold (Dombrowski Fig. 4).

    Groups with at least 5 values are overlaid histograms on shared bins; smaller
    groups are strips of points below the axis, where a histogram would mislead.
    """
    if not scores:
        raise ValueError("flag_score_figure needs at least one group of scores")
    values = {}
    for label, v in scores.items():
        v = np.asarray(v, dtype=float).reshape(-1)
        if np.isnan(v).any():
            raise ValueError(f"scores of {label!r} contain NaN")
        values[label] = v
    tau = float(tau)
    every = np.concatenate([v for v in values.values()] + [np.array([tau])])
    every = every[np.isfinite(every)]
    lo, hi = (float(every.min()), float(every.max())) if every.size else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, 31)

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    top = 0
    strips = []
    for k, (label, v) in enumerate(values.items()):
        colour = PALETTE[k % len(PALETTE)]
        if v.size >= 5:
            # outlined bars: overlapping groups stay visible where filled ones would hide each other
            counts, _, _ = ax.hist(np.clip(v, lo, hi), bins=bins, color=colour, histtype="step", linewidth=1.8,
                                   label=f"{label} (n={v.size})")
            top = max(top, int(counts.max()))
        else:
            strips.append((label, v, colour))
    top = max(top, 1)
    for j, (label, v, colour) in enumerate(strips):
        y = -(j + 1) * 0.08 * top
        ax.plot(v, np.full(v.size, y), ls="none", marker="o", ms=5, color=colour, alpha=0.8,
                label=f"{label} (n={v.size})")
    ax.set_ylim(-(len(strips) + 1) * 0.08 * top if strips else 0, top * 1.1)
    ax.axvline(tau, color="#b2182b", ls="--", lw=1.2, label="tau (95th percentile)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= top * 1.1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("number of volumes")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, path)
