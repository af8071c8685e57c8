"""Figures of the RELICT paper, drawn from the pipeline's own tables.

Why here and not in notebooks: every number a figure shows must come from the
workflow's outputs, so figures are rules with those outputs as inputs.
"""

from __future__ import annotations

import numpy as np

from ..plotting import LIKERT_COLOURS, MEASURE_LABELS, _mid_slices, plt, save_figure


def balanced_accuracy_figure(path, sweeps: dict[str, list[dict]], optima: dict[str, dict], title: str,
                             notes: dict[str, str] | None = None) -> None:
    """Balanced accuracy against the threshold, one panel per measure (RELICT Figure 5).

    Image and feature measures are thresholded on the distance ratio, segmentation
    measures on the absolute distance (RELICT 2.4); ``notes`` adds a line to a panel's
    title (e.g. the feature extractor, "untrained").
    """
    from .. import registry

    notes = notes or {}
    n = len(sweeps)
    ncols = min(n, 3)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.5 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (measure, rows) in zip(axes.flat, sweeps.items()):
        m = registry.get(measure)
        t = np.array([float(r["threshold"]) for r in rows], float)
        ba = np.array([float(r["balanced_accuracy"]) for r in rows], float)
        ax.plot(t, ba, color="#2166ac", lw=1.8)
        opt = optima[measure]
        if opt.get("threshold") is not None and opt.get("balanced_accuracy") is not None:
            ax.axvline(opt["threshold"], color="#b2182b", ls="--", lw=1)
            ax.annotate(f"T={opt['threshold']:.2f}\nBA={opt['balanced_accuracy']:.2f}",
                        (opt["threshold"], opt["balanced_accuracy"]), textcoords="offset points",
                        xytext=(6, -28), fontsize=8, color="#b2182b")
        ax.set_title(f"{m.label} ({m.level})" + (f"\n{notes[measure]}" if measure in notes else ""), fontsize=9)
        ax.set_xlabel("distance-ratio threshold" if m.uses_ratio else f"distance threshold {m.unit}".strip())
        ax.set_ylim(0.0, 1.05)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("balanced accuracy")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def ratio_distribution_figure(path, rows: list[dict], measures: list[str], optima: dict[str, dict],
                              title: str) -> None:
    """Replica scores of all synthetic volumes per measure, coloured by the rating (consensus).

    Scores are distance ratios (image, feature level) or absolute distances
    (segmentation level, in their own units): one panel per kind.
    """
    from .. import registry

    groups = [("distance ratio (closest / mean of n closest)", [m for m in measures if registry.get(m).uses_ratio]),
              ("absolute distance to the closest (segmentation)",
               [m for m in measures if not registry.get(m).uses_ratio])]
    groups = [g for g in groups if g[1]]
    fig, axes = plt.subplots(1, len(groups), figsize=(sum(1.5 * len(g[1]) + 1.5 for g in groups) + 2.0, 4.2),
                             squeeze=False)
    rng = np.random.default_rng(0)  # fixed jitter: the same figure on every run
    for ax, (ylabel, group) in zip(axes[0], groups):
        for i, m in enumerate(group):
            for r in rows:
                score = r.get("rating")
                colour = "#999999" if score is None else LIKERT_COLOURS[int(round(float(score)))]
                ax.scatter(i + rng.uniform(-0.18, 0.18), float(r[f"{m}_score"]), s=22, color=colour,
                           edgecolor="black", linewidth=0.3, zorder=3)
            opt = optima.get(m)
            if opt and opt.get("threshold") is not None:
                ax.hlines(opt["threshold"], i - 0.3, i + 0.3, color="#b2182b", ls="--", lw=1, zorder=4)
        ax.set_xticks(range(len(group)), [registry.get(m).label for m in group], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, markeredgecolor="black", label=f"Likert {k}")
               for k, c in LIKERT_COLOURS.items()]
    handles.append(plt.Line2D([], [], color="#b2182b", ls="--", label="optimal threshold"))
    axes[0][-1].legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def pair_figure(path, synthetic: np.ndarray, training: np.ndarray, syn_id: str, train_id: str,
                subtitle: str = "", vrange=None) -> None:
    """Side-by-side mid-slices of a synthetic volume and its closest training volume (rating sheet)."""
    lo, hi = vrange if vrange is not None else (float(min(synthetic.min(), training.min())),
                                               float(max(synthetic.max(), training.max())))
    fig, axes = plt.subplots(2, 3, figsize=(9, 6))
    for row, (vol, name) in enumerate(((synthetic, f"synthetic {syn_id}"), (training, f"training {train_id}"))):
        for col, (sl, view) in enumerate(zip(_mid_slices(vol), ("axial", "coronal", "sagittal"))):
            ax = axes[row][col]
            ax.imshow(sl, cmap="gray", origin="lower", vmin=lo, vmax=hi)
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(name)
            if row == 0:
                ax.set_title(view)
    fig.suptitle(f"{syn_id} vs {train_id}" + (f"  ({subtitle})" if subtitle else ""))
    save_figure(fig, path)


def closest_by_measure_figure(path, synthetic: np.ndarray, closest: dict[str, tuple[str, np.ndarray]],
                              syn_id: str, vrange=None) -> None:
    """RELICT Figure 6: a synthetic volume and the closest training volume by each measure (axial mid-slices)."""
    n = len(closest) + 1
    lo, hi = vrange if vrange is not None else (float(synthetic.min()), float(synthetic.max()))
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n, 3.0))
    panels = [(f"synthetic\n{syn_id}", synthetic)] + [
        (f"{MEASURE_LABELS.get(m, m)}\n{tid}", vol) for m, (tid, vol) in closest.items()]
    for ax, (title, vol) in zip(np.atleast_1d(axes), panels):
        ax.imshow(_mid_slices(vol)[0], cmap="gray", origin="lower", vmin=lo, vmax=hi)
        ax.set_title(title, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Closest training volume by each measure (RELICT Figure 6)")
    save_figure(fig, path)


def calibration_figure(path, rankings: dict[str, list[dict]], nulls: dict[str, list[dict]], rate: float,
                       truth: dict[str, str] | None, title: str) -> None:
    """Each synthetic volume's score against the held-out null, one panel per measure.

    Held-out real scans (grey) are the scores of new patients; synthetic volumes are drawn
    filled when called at ``rate`` (their false-positive rate at most ``rate``), coloured by
    the known truth when there is one. The dashed line is the whole pool's calibrated
    threshold (scores below it are called).
    """
    from .. import registry
    from . import calibration

    truth = truth or {}
    n = len(rankings)
    ncols = min(n, 3)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    rng = np.random.default_rng(0)  # horizontal jitter only
    colours = {"replica": "#d73027", "": "#4575b4"}
    for ax, (measure, rows) in zip(axes.flat, rankings.items()):
        null = np.array([float(r["score"]) for r in nulls[measure]], float)
        ax.scatter(rng.uniform(-0.15, 0.15, null.size), null, s=14, color="#999999", label="held-out real")
        for r in rows:
            kind = truth.get(r["synthetic_id"], "")
            colour = colours.get(kind, "#4575b4")
            called = bool(r.get("calibrated_replica"))
            ax.scatter(1 + rng.uniform(-0.15, 0.15), r["score"], s=22, edgecolor=colour,
                       facecolor=colour if called else "none")
        t = calibration.threshold(null, rate)
        if t is not None and np.isfinite(t):
            ax.axhline(t, color="#b2182b", ls="--", lw=1)
        m = registry.get(measure)
        ax.set_xticks([0, 1], ["held-out", "synthetic"])
        ax.set_ylabel("distance ratio" if m.uses_ratio else f"distance{(' (' + m.unit + ')') if m.unit else ''}")
        ax.set_title(MEASURE_LABELS.get(measure, measure), fontsize=9)
    handles = [plt.Line2D([], [], marker="o", ls="", color="#999999", label="held-out real scan"),
               plt.Line2D([], [], marker="o", ls="", color="#4575b4", label=f"called at {rate:g}", markerfacecolor="#4575b4"),
               plt.Line2D([], [], marker="o", ls="", color="#4575b4", label="not called", markerfacecolor="none")]
    if "replica" in truth.values():
        handles.append(plt.Line2D([], [], marker="o", ls="", color="#d73027", label="replica (truth)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    save_figure(fig, path)


def verdict_figure(path, pairs: list[tuple[str, str, np.ndarray, np.ndarray, str]], title: str) -> None:
    """The report's first picture: the most likely replicas beside their closest training
    volume (axial, coronal, sagittal mid-slices of each, one row per pair, one grey scale per row)."""
    n = max(len(pairs), 1)
    fig, axes = plt.subplots(n, 6, figsize=(13, 2.3 * n + 0.6), squeeze=False)
    for row, (syn_id, train_id, syn, train, label) in enumerate(pairs):
        lo, hi = float(min(syn.min(), train.min())), float(max(syn.max(), train.max()))
        for k, (vol, who) in enumerate(((syn, f"synthetic {syn_id}"), (train, f"training {train_id}"))):
            for j, sl in enumerate(_mid_slices(vol)):
                ax = axes[row][3 * k + j]
                ax.imshow(sl, cmap="gray", origin="lower", vmin=lo, vmax=hi)
                ax.set_xticks([])
                ax.set_yticks([])
                if j == 0:
                    ax.set_title(f"{who}\n{label}" if k == 0 else who, fontsize=8, loc="left")
    for ax in axes.ravel()[len(pairs) * 6:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
