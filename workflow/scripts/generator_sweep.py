"""Snakemake adapter: the memorisation sweep (the in-workflow generator trained on nested
training sets of growing size): replica rate and recall against training-set size.

Replica rate by RELICT: the fraction of samples rejected by the thresholds tuned on the
rated dataset the swept generator is filtered with (filter_with); memorised fraction:
samples closer to the training set than the held-out percentile (relict.recall);
learned fraction: the generator's own training volumes that are the nearest neighbour
of at least one sample. The points share the swept generator's autoencoder (trained
once, on the full set); only the diffusion model's training set changes.
"""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from synthaudit.io import TIMING_KEYS, atomic_path, read_tsv, without_timings, write_metrics, write_tsv  # noqa: E402
from synthaudit.logs import logged  # noqa: E402

COLUMNS = ["dataset", "n_training", "n_synthetic", "relict_replica_rate", "memorised_fraction", "learned_fraction",
           "recall", "reference_learned_fraction", "max_nn_count", "diffusion_train_seconds", "sample_seconds"]


def seconds(path):
    return float(read_tsv(path)[0]["s"])


def main(log):
    datasets, sizes = snakemake.params.datasets, snakemake.params.n_training
    filtered = iter(snakemake.input.filtered)
    t_ae = seconds(snakemake.input.autoencoder[0]) if snakemake.input.autoencoder else 0.0
    rows = []
    for k, (d, n, has_filter) in enumerate(zip(datasets, sizes, snakemake.params.filtered)):
        rec = json.loads(open(snakemake.input.recall[datasets.index(d)]).read())
        rate = None
        if has_filter:
            f = json.loads(open(next(filtered)).read())
            rate = f["n_rejected"] / f["n_synthetic"]
        t_dm, t_sample = seconds(snakemake.input.diffusion[k]), seconds(snakemake.input.sampling[k])
        rows.append({"dataset": d, "n_training": n, "n_synthetic": rec["n_synthetic"], "relict_replica_rate": rate,
                     "memorised_fraction": rec["memorised_fraction"], "learned_fraction": rec["learned_fraction"],
                     "recall": rec["recall"], "reference_learned_fraction": rec["reference_learned_fraction"],
                     "max_nn_count": rec["max_nn_count"], "diffusion_train_seconds": t_dm,
                     "sample_seconds": t_sample})
    write_tsv(snakemake.output.table, without_timings(rows), [c for c in COLUMNS if c not in TIMING_KEYS])
    write_tsv(snakemake.output.timing, rows, COLUMNS)
    write_metrics(snakemake.output.metrics, {"generator": snakemake.params.base, "autoencoder_train_seconds": t_ae,
                                          "points": {str(r["n_training"]): {k: r[k] for k in COLUMNS[2:]}
                                                     for r in rows}})  # timings: the table and benchmarks/

    if not rows:  # no generator_sweep configured: the outputs exist (DVC tracks them) and say so
        fig, ax = plt.subplots(figsize=(5, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no generator_sweep configured in params.yaml", ha="center", va="center")
        with atomic_path(snakemake.output.figure, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)
        log.info("no generator sweep configured")
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
    fig.suptitle(f"Memorisation sweep of {snakemake.params.base} ({rows[0]['n_synthetic'] if rows else 0} samples each)")
    fig.tight_layout()
    with atomic_path(snakemake.output.figure, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    for r in rows:
        log.info("n=%d: %s", r["n_training"], {k: r[k] for k in COLUMNS[2:]})


with logged(snakemake.log[0]) as log:
    main(log)
