"""Detection per replica kind: plain replicas and each training-time augmentation.

Why: one balanced accuracy over a mixed set hides the blind spot this is about. A
measure can find every plain replica and miss every mirrored one, and still score
well overall. Each kind is scored against the same non-replicas, at the measure's
own tuned threshold (RELICT 2.7, on the whole set). "Source found" asks whether the
closest training volume belongs to the replica's source patient: finding *that* a
volume is a copy is half the answer, *of whom* is the other half. Specificity is
reported on its own because alignment can bring unrelated volumes closer too.
"""

from __future__ import annotations

import math

import numpy as np

from .. import registry
from .evaluate import roc_auc

COLUMNS = ["measure", "kind", "n_replicas", "n_nonreplicas", "threshold", "sensitivity", "specificity",
           "false_positive_rate", "balanced_accuracy", "auc", "source_found"]


def per_kind(ranking: list[dict], truth: dict[str, dict], threshold: float, patient_of: dict[str, str],
             measure: str) -> list[dict]:
    """Rows of :data:`COLUMNS`, one per replica kind and one for all kinds together.

    Args:
        ranking: The measure's ranking rows (``synthetic_id, closest_training_id, score``).
        truth: Per synthetic id ``{"replica": bool, "kind": str, "source_patient": str | None}``;
            ``kind`` is the augmentation (``none`` for plain replicas); ignored for non-replicas.
        threshold: A volume is called a replica when its score is at most this.
        patient_of: Training volume id to patient id.
    """
    by_id = {r["synthetic_id"]: r for r in ranking}
    missing = sorted(set(truth) - set(by_id))
    if missing:
        raise ValueError(f"{measure}: no ranking row for synthetic volume(s) {missing[:5]}")
    ids = sorted(truth)
    score = np.array([float(by_id[i]["score"]) for i in ids])
    replica = np.array([bool(truth[i]["replica"]) for i in ids])
    kind = np.array([truth[i]["kind"] if truth[i]["replica"] else "" for i in ids])
    found = np.array([bool(truth[i]["replica"]) and patient_of.get(by_id[i]["closest_training_id"])
                      == truth[i]["source_patient"] for i in ids])
    called = score <= threshold if math.isfinite(threshold) else np.zeros(score.size, bool)
    neg = ~replica
    spec = float(np.mean(~called[neg])) if neg.any() else math.nan
    kinds = sorted(set(kind[replica]), key=lambda k: (k != "none", k))
    rows = []
    for k in kinds + ["all"]:
        sel = replica & ((kind == k) if k != "all" else True)
        sens = float(np.mean(called[sel])) if sel.any() else math.nan
        labels = np.concatenate([np.ones(int(sel.sum()), bool), np.zeros(int(neg.sum()), bool)])
        rows.append({"measure": measure, "kind": k, "n_replicas": int(sel.sum()), "n_nonreplicas": int(neg.sum()),
                     "threshold": threshold, "sensitivity": sens, "specificity": spec,
                     "false_positive_rate": 1.0 - spec if not math.isnan(spec) else math.nan,
                     "balanced_accuracy": (sens + spec) / 2.0,
                     "auc": roc_auc(-np.concatenate([score[sel], score[neg]]), labels),
                     "source_found": float(np.mean(found[sel])) if sel.any() else math.nan})
    return rows


def figure(path, rows: list[dict], title: str) -> None:
    """Balanced accuracy and source found per replica kind, one bar per measure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import MEASURE_LABELS, save_figure

    measures = list(dict.fromkeys(r["measure"] for r in rows))
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    value = {(r["measure"], r["kind"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    width = 0.8 / max(len(measures), 1)
    x = np.arange(len(kinds))
    for ax, key, label in ((axes[0], "balanced_accuracy", "balanced accuracy (vs all non-replicas)"),
                           (axes[1], "source_found", "closest volume is the source patient")):
        for n, m in enumerate(measures):
            ys = [value[(m, k)][key] if (m, k) in value else np.nan for k in kinds]
            hatch = "//" if m in registry.MEASURES and registry.get(m).aligned_from else None
            ax.bar(x + (n - (len(measures) - 1) / 2) * width, ys, width, label=MEASURE_LABELS.get(m, m),
                   hatch=hatch, edgecolor="black", linewidth=0.5)
        ax.set_xticks(x, [f"{k}\n(n={value[(measures[0], k)]['n_replicas']})" if (measures[0], k) in value else k
                          for k in kinds])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(label)
        ax.axhline(0.5, color="grey", lw=0.5, ls=":")
    spec = {m: value[(m, "all")]["specificity"] for m in measures if (m, "all") in value}
    axes[0].set_title("specificity on held-out: " + ", ".join(f"{MEASURE_LABELS.get(m, m)} {s:.2f}"
                                                              for m, s in spec.items()), fontsize=8)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
