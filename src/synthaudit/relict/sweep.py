"""The memorisation sweep's table, metrics and figure (the in-workflow generator trained on nested
training sets of growing size): replica rate and recall against training-set size.

Replica rate by RELICT: the fraction of samples rejected by the thresholds tuned on the rated
dataset the swept generator is filtered with (filter_with); memorised fraction: samples closer to
the training set than the held-out percentile (relict.recall); learned fraction: the generator's own
training volumes that are the nearest neighbour of at least one sample. The points share the swept
generator's autoencoder (trained once, on the full set); only the diffusion model's training set
changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from ..io import atomic_path, read_tsv

COLUMNS = ["dataset", "n_training", "n_synthetic", "relict_replica_rate", "memorised_fraction", "learned_fraction",
           "recall", "reference_learned_fraction", "max_nn_count", "diffusion_train_seconds", "sample_seconds"]


def seconds(path) -> float:
    """A Snakemake benchmark file's wall time."""
    return float(read_tsv(path)[0]["s"])


def sweep_rows(datasets: Sequence[str], sizes: Sequence[int], has_filter: Sequence[bool], recall: Sequence[str],
               filtered: Iterator[str], diffusion: Sequence[str], sampling: Sequence[str]) -> list[dict]:
    """One row per sweep point: its recall metrics, RELICT's replica rate where the point is
    filtered (``filtered`` yields the filter summaries in that order), and its training and
    sampling times (benchmark files)."""
    rows = []
    for k, (d, n, filt) in enumerate(zip(datasets, sizes, has_filter)):
        rec = json.loads(open(recall[datasets.index(d)]).read())
        rate = None
        if filt:
            f = json.loads(open(next(filtered)).read())
            rate = f["n_rejected"] / f["n_synthetic"]
        rows.append({"dataset": d, "n_training": n, "n_synthetic": rec["n_synthetic"], "relict_replica_rate": rate,
                     "memorised_fraction": rec["memorised_fraction"], "learned_fraction": rec["learned_fraction"],
                     "recall": rec["recall"], "reference_learned_fraction": rec["reference_learned_fraction"],
                     "max_nn_count": rec["max_nn_count"], "diffusion_train_seconds": seconds(diffusion[k]),
                     "sample_seconds": seconds(sampling[k])})
    return rows


def sweep_metrics(rows: list[dict], base: str | None, autoencoder_seconds: float) -> dict:
    """generator_sweep.json: each point's fractions by training-set size (timings: the table)."""
    return {"generator": base, "autoencoder_train_seconds": autoencoder_seconds,
            "points": {str(r["n_training"]): {k: r[k] for k in COLUMNS[2:]} for r in rows}}


def sweep_figure(path, rows: list[dict], base: str | None) -> None:
    """Replica and memorised fractions (left) and learned fractions with the held-out reference
    (right) against training-set size; without a sweep, a figure that says so (DVC tracks it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        fig, ax = plt.subplots(figsize=(5, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no generator_sweep configured in params.yaml", ha="center", va="center")
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = [r["n_training"] for r in rows]
    if any(r["relict_replica_rate"] is not None for r in rows):
        left.plot(x, [r["relict_replica_rate"] for r in rows], "o-", color="#b2182b",
                  label="replica rate (RELICT thresholds)")
    left.plot(x, [r["memorised_fraction"] for r in rows], "s--", color="#ef8a62",
              label="memorised (closer than held-out percentile)")
    left.set_ylabel("fraction of synthetic volumes")
    right.plot(x, [r["learned_fraction"] for r in rows], "o-", color="#2166ac", label="learned (recall before filter)")
    right.plot(x, [r["recall"] for r in rows], "s--", color="#67a9cf", label="learned, not memorised")
    right.plot(x, [r["reference_learned_fraction"] for r in rows], "^:", color="#1b7837",
               label="held-out real (reference)")
    right.set_ylabel("fraction of the generator's training volumes")
    for ax in (left, right):
        ax.set_xlabel("generator training-set size (volumes)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(v) for v in x])
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"Memorisation sweep of {base} ({rows[0]['n_synthetic'] if rows else 0} samples each)")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
