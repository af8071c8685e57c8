"""The membership figure: one panel per attack, its ROC curve on the patients, its patient-bootstrap band and
the chance line an attack that learns nothing follows (one panel each: four overlapping bands hide each
other)."""

from __future__ import annotations

from ..plotting import plt, save_figure

COLOURS = ["#2166ac", "#b2182b", "#1b7837", "#762a83", "#e08214"]


def roc_figure(path, m: dict, title: str) -> None:
    found = list((m.get("attacks") or {}).items())
    n = max(1, len(found))
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.3 * rows + 0.4), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.axis("off")
            continue
        ax.plot([0, 1], [0, 1], color="#777777", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_aspect("equal")
        if not found:
            ax.text(0.5, 0.5, m.get("why_not", "no attack ran"), ha="center", va="center", fontsize=8, wrap=True)
            continue
        name, e = found[k]
        colour = COLOURS[k % len(COLOURS)]
        band = e["band"]
        ax.fill_between(band["fpr"], band["low"], band["high"], step="post", color=colour, alpha=0.18, linewidth=0)
        ax.step(e["roc"]["fpr"], e["roc"]["tpr"], where="post", color=colour, linewidth=1.8)
        ax.set_title(f"{name}\nAUC {e['auc']:.2f} [{e['auc_ci'][0]:.2f}, {e['auc_ci'][1]:.2f}]", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel(f"TPR ({m.get('members', 0)} member patients)", fontsize=8)
        if k >= n - cols:
            ax.set_xlabel(f"FPR ({m.get('nonmembers', 0)} non-member patients)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(title + "; dashed: chance", fontsize=9)
    save_figure(fig, path)
