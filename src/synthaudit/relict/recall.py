"""Generative-model recall and memorisation from nearest neighbours (Dombrowski et al., sec. 4.3, Table 4).

A generator "learned" a training volume when at least one synthetic volume is closer
to it than to any other training volume. The fraction of training volumes learned is
the generator's recall: how much of the training distribution it reproduces, the
other side of a replica audit (a generator that copies few volumes but covers little
of the data is private and useless). Following the paper:

* **learned** (per training volume): nearest neighbour of at least one synthetic
  volume; ``nn_count`` says of how many, which shows how unevenly the generator
  samples the training set (the paper: one video was the nearest neighbour 802 times).
* **memorised fraction**: the fraction of synthetic volumes a privacy filter (e.g. a
  RELICT threshold) flagged as replicas.
* **learned but memorised**: training volumes that are the nearest neighbour of at
  least one flagged synthetic volume (generated, but too close to pass the filter).
  **learned not memorised**: those that are the nearest neighbour of at least one
  unflagged synthetic volume; their fraction is the recall after filtering. The
  paper's own count is the training volumes learned *only* through flagged volumes,
  lost by filtering (``learned_only_by_memorised``): its Table 4 caption says
  "generated but filtered afterwards", and its learned counts minus it (1401 - 5,
  794 - 3, 884 - 2) are exactly Table 5's counts after filtering. The privacy
  evaluation reports both.
* **reference**: the same with held-out real volumes in place of synthetic ones, what
  a generator drawing from the real distribution would reach. It can be no larger
  than ``n_heldout / n_training``, so :attr:`RecallResult.matched_learned_fraction`
  gives the synthetic learned fraction expected from a random subset of
  ``n_heldout`` synthetic volumes, the like-for-like comparison.

Nearest neighbours are the row-wise arg-min of a distance matrix (smaller = more
similar); ties go to the lowest training index, as in :mod:`.ratio`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..io import atomic_path, write_tsv
from .matrix import MeasureMatrix


@dataclass
class RecallResult:
    """Nearest-neighbour recall of S synthetic volumes over T training volumes.

    Per training volume (arrays of length T):
        nn_count: Synthetic volumes that have it as nearest neighbour.
        learned: ``nn_count > 0``.
        nn_of_flagged / nn_of_unflagged: ``nn_count`` split by the synthetic volume's
            flag (None without flags).
        reference_nn_count: Held-out real volumes that have it as nearest neighbour
            (None without a reference).

    Per synthetic volume: ``nearest`` (index of its nearest training volume).

    Summary values (the flag-dependent ones are None without flags, the reference ones
    None without a reference):
        learned_fraction: Mean of ``learned`` (recall before any filtering).
        memorised_fraction: Fraction of synthetic volumes flagged.
        learned_but_memorised: Training volumes that are the nearest neighbour of at
            least one flagged synthetic volume (a count).
        learned_not_memorised: ... of at least one unflagged synthetic volume (a count).
        learned_only_by_memorised: ... of flagged synthetic volumes only (learned
            before filtering, not after; a count).
        recall: ``learned_not_memorised / n_training``, the recall after filtering.
        reference_learned_fraction: Fraction of training volumes that are the nearest
            neighbour of at least one held-out volume.
        matched_learned_fraction: Expected learned fraction of ``n_reference``
            synthetic volumes drawn at random without replacement (None when there
            are fewer synthetic than held-out volumes).
        max_nn_count, n_synthetic, n_training, n_reference.
    """

    nearest: np.ndarray
    nn_count: np.ndarray
    learned: np.ndarray
    nn_of_flagged: np.ndarray | None
    nn_of_unflagged: np.ndarray | None
    reference_nn_count: np.ndarray | None
    learned_fraction: float
    memorised_fraction: float | None
    learned_but_memorised: int | None
    learned_not_memorised: int | None
    learned_only_by_memorised: int | None
    recall: float | None
    reference_learned_fraction: float | None
    matched_learned_fraction: float | None
    max_nn_count: int
    n_synthetic: int
    n_training: int
    n_reference: int | None

    def summary(self) -> dict:
        """The scalar values, as plain Python types (for JSON metrics)."""
        keys = ("n_synthetic", "n_training", "n_reference", "learned_fraction", "memorised_fraction",
                "learned_but_memorised", "learned_not_memorised", "learned_only_by_memorised", "recall",
                "reference_learned_fraction", "matched_learned_fraction", "max_nn_count")
        return {k: getattr(self, k) for k in keys}


def generative_recall(
    distances: np.ndarray, flagged: np.ndarray | Sequence[bool] | None = None, reference: np.ndarray | None = None
) -> RecallResult:
    """Recall, memorisation and the real-data reference from distance matrices.

    Args:
        distances: (S, T) distances, synthetic x training, smaller = more similar.
        flagged: (S,) booleans, True for synthetic volumes a privacy filter flagged as
            replicas; None: no filter (the flag-dependent values are None).
        reference: (H, T) distances, held-out real x the same training volumes; None:
            no reference.

    Returns:
        A :class:`RecallResult`.

    Raises:
        ValueError: If a matrix is not 2D, is empty, contains NaN or -inf, has a row
            without a finite value (no nearest neighbour), the training counts differ,
            or ``flagged`` is not S booleans.
    """
    d = _check_matrix("distances", distances)
    n_synthetic, n_training = d.shape
    nearest = np.argmin(d, axis=1)  # first minimum: ties go to the lowest training index
    nn_count = np.bincount(nearest, minlength=n_training)
    learned = nn_count > 0

    nn_of_flagged = nn_of_unflagged = None
    memorised_fraction = recall = None
    learned_but_memorised = learned_not_memorised = learned_only_by_memorised = None
    if flagged is not None:
        flags = _check_flags(flagged, n_synthetic)
        nn_of_flagged = np.bincount(nearest[flags], minlength=n_training)
        nn_of_unflagged = nn_count - nn_of_flagged
        memorised_fraction = float(flags.mean())
        learned_but_memorised = int(np.count_nonzero(nn_of_flagged))
        learned_not_memorised = int(np.count_nonzero(nn_of_unflagged))
        learned_only_by_memorised = int(np.count_nonzero((nn_of_flagged > 0) & (nn_of_unflagged == 0)))
        recall = learned_not_memorised / n_training

    reference_nn_count = reference_learned_fraction = matched = n_reference = None
    if reference is not None:
        r = _check_matrix("reference", reference)
        if r.shape[1] != n_training:
            raise ValueError(f"reference has {r.shape[1]} training columns, distances {n_training}")
        n_reference = r.shape[0]
        reference_nn_count = np.bincount(np.argmin(r, axis=1), minlength=n_training)
        reference_learned_fraction = float(np.mean(reference_nn_count > 0))
        matched = expected_learned_fraction(nn_count, n_reference)

    return RecallResult(
        nearest=nearest, nn_count=nn_count, learned=learned, nn_of_flagged=nn_of_flagged,
        nn_of_unflagged=nn_of_unflagged, reference_nn_count=reference_nn_count,
        learned_fraction=float(learned.mean()), memorised_fraction=memorised_fraction,
        learned_but_memorised=learned_but_memorised, learned_not_memorised=learned_not_memorised,
        learned_only_by_memorised=learned_only_by_memorised, recall=recall,
        reference_learned_fraction=reference_learned_fraction, matched_learned_fraction=matched,
        max_nn_count=int(nn_count.max()), n_synthetic=n_synthetic, n_training=n_training, n_reference=n_reference,
    )


def heldout_flags(distances: np.ndarray, heldout: np.ndarray, percentile: float) -> tuple[np.ndarray, float]:
    """Flag synthetic volumes closer to the training set than ``percentile`` % of held-out real ones.

    The calibration of the re-identification filters (95th percentile of held-out
    scores, Packhäuser et al.) on a distance: threshold = that percentile of the held-out
    volumes' nearest distances; flagged = nearest distance strictly below it.

    Returns:
        ``(flagged (S,) bools, threshold)``.
    """
    threshold = float(np.percentile(np.asarray(heldout, np.float64).min(axis=1), percentile))
    return np.asarray(distances, np.float64).min(axis=1) < threshold, threshold


def recall_against_heldout(synthetic: MeasureMatrix, heldout: MeasureMatrix, flag_percentile: float,
                           generator_training_ids: Sequence[str] | None = None
                           ) -> tuple[RecallResult, list[str], dict]:
    """Recall of one synthetic set, flags from :func:`heldout_flags`, the held-out set as reference.

    Flags use every training volume (a copy of any of them is a copy); recall counts
    only the generator's own training volumes (``generator_training_ids``; empty or
    None: all of them).

    Returns:
        ``(result, training ids counted, summary)``; the summary holds the flag's
        percentile, threshold distance, count and ids, whether a subset was counted,
        then :meth:`RecallResult.summary`.

    Raises:
        ValueError: When the two matrices list different training volumes, or a
            generator training volume is not among them.
    """
    train_ids = synthetic.training_ids
    if heldout.training_ids != train_ids:
        raise ValueError(f"{heldout.path or 'the held-out matrix'} and {synthetic.path or 'the synthetic matrix'} "
                         "list different training volumes")
    d_syn, d_held = np.asarray(synthetic.distances, np.float64), np.asarray(heldout.distances, np.float64)
    flagged, threshold = heldout_flags(d_syn, d_held, flag_percentile)
    subset = list(generator_training_ids or train_ids)
    missing = sorted(set(subset) - set(train_ids))
    if missing:
        raise ValueError(f"generator training volumes {missing[:5]} are not in "
                         f"{synthetic.path or 'the synthetic matrix'}")
    cols = [train_ids.index(t) for t in subset]
    result = generative_recall(d_syn[:, cols], flagged, d_held[:, cols])
    summary = {"flag_percentile": flag_percentile, "flag_threshold_distance": threshold,
               "n_flagged": int(flagged.sum()),
               "flagged_ids": [i for i, f in zip(synthetic.synthetic_ids, flagged) if f],
               "generator_training_subset": bool(generator_training_ids), **result.summary()}
    return result, subset, summary


def expected_learned_fraction(nn_count: np.ndarray, m: int) -> float | None:
    """Expected learned fraction if only ``m`` of the synthetic volumes, drawn at random, were kept.

    A training volume that is the nearest neighbour of ``c`` of ``S`` synthetic volumes
    stays learned unless all ``m`` drawn volumes are among the other ``S - c``:
    probability ``1 - C(S - c, m) / C(S, m)``. None when ``m > S``.
    """
    counts = np.asarray(nn_count, dtype=np.int64)
    s = int(counts.sum())
    if m > s:
        return None
    if m <= 0:
        return 0.0

    def log_choose(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    total = log_choose(s, m)
    p = [1.0 if s - c < m else 1.0 - math.exp(log_choose(s - c, m) - total) for c in counts.tolist()]
    return float(np.mean(p))


def training_rows(result: RecallResult, training_ids: Sequence[str]) -> list[dict]:
    """One row per training volume, in input order.

    Columns: ``training_id, nn_count, learned`` (true/false), then ``nn_of_flagged,
    nn_of_unflagged`` when flags were given and ``reference_nn_count`` when a
    reference was (see :func:`training_columns`).
    """
    if len(training_ids) != result.n_training:
        raise ValueError(f"{len(training_ids)} training ids for {result.n_training} training volumes")
    rows = []
    for j, tid in enumerate(training_ids):
        row = {"training_id": tid, "nn_count": int(result.nn_count[j]),
               "learned": "true" if result.learned[j] else "false"}
        if result.nn_of_flagged is not None:
            row["nn_of_flagged"] = int(result.nn_of_flagged[j])
            row["nn_of_unflagged"] = int(result.nn_of_unflagged[j])
        if result.reference_nn_count is not None:
            row["reference_nn_count"] = int(result.reference_nn_count[j])
        rows.append(row)
    return rows


def training_columns(result: RecallResult) -> list[str]:
    """The columns :func:`training_rows` fills, in order."""
    columns = ["training_id", "nn_count", "learned"]
    if result.nn_of_flagged is not None:
        columns += ["nn_of_flagged", "nn_of_unflagged"]
    if result.reference_nn_count is not None:
        columns.append("reference_nn_count")
    return columns


def write_training_table(path: str | os.PathLike, result: RecallResult, training_ids: Sequence[str]) -> None:
    """Write :func:`training_rows` as a TSV, atomically."""
    write_tsv(path, training_rows(result, training_ids), training_columns(result))


def recall_figure(path: str | os.PathLike, result: RecallResult, measure: str, title: str | None = None,
                  log_y: bool = False) -> None:
    """Bar chart of ``nn_count`` per training volume, sorted descending (the paper's distribution).

    Bars are split into unflagged and flagged synthetic volumes when flags were
    given; the held-out reference counts, sorted descending on their own, are a
    second series (a step line). Written atomically as PNG.

    Args:
        path: Output file (PNG whatever its suffix).
        result: From :func:`generative_recall`.
        measure: The distance measure, stated in the title.
        title: First title line; default "Generative-model recall".
        log_y: Logarithmic count axis (for very uneven counts).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = np.argsort(-result.nn_count, kind="stable")
    x = np.arange(1, result.n_training + 1)
    fig, ax = plt.subplots(figsize=(max(6.0, min(12.0, 0.12 * result.n_training + 4)), 4.0))
    width = 1.0 if result.n_training > 60 else 0.8
    if result.nn_of_flagged is None:
        ax.bar(x, result.nn_count[order], width=width, color="#2166ac",
               label=f"synthetic (n={result.n_synthetic})")
    else:
        unflagged, flagged = result.nn_of_unflagged[order], result.nn_of_flagged[order]
        ax.bar(x, unflagged, width=width, color="#2166ac", label=f"synthetic (n={result.n_synthetic}), not flagged")
        ax.bar(x, flagged, width=width, bottom=unflagged, color="#b2182b", label="synthetic, flagged as replica")
    if result.reference_nn_count is not None:
        ax.step(x, np.sort(result.reference_nn_count)[::-1], where="mid", color="#1b7837", lw=1.5,
                label=f"held-out real (n={result.n_reference}), own order")
    if log_y:
        ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("training volumes, by synthetic nearest-neighbour count")
    ax.set_ylabel("times nearest neighbour")
    ax.set_xlim(0.5, result.n_training + 0.5)
    lines = [f"{title or 'Generative-model recall'} ({measure})",
             f"learned {result.learned_fraction:.1%}"
             + ("" if result.recall is None else f", after filter {result.recall:.1%}")]
    if result.reference_learned_fraction is not None:
        lines.append(f"held-out real {result.reference_learned_fraction:.1%}"
                     + ("" if result.matched_learned_fraction is None
                        else f" vs synthetic at n={result.n_reference} {result.matched_learned_fraction:.1%}"))
    ax.set_title("\n".join(lines), fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=120, format="png")
    finally:
        plt.close(fig)


def _check_matrix(name: str, matrix) -> np.ndarray:
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or 0 in m.shape:
        raise ValueError(f"{name} must be a non-empty 2D matrix (rows x training volumes), got shape {m.shape}")
    if np.isnan(m).any():
        raise ValueError(f"{name} contains {int(np.isnan(m).sum())} NaN value(s)")
    if np.isneginf(m).any():
        raise ValueError(f"{name} contains -inf; distances must be > -inf")
    no_finite = np.flatnonzero(~np.isfinite(m).any(axis=1))
    if no_finite.size:
        raise ValueError(f"{name}: row(s) {no_finite[:5].tolist()} have no finite distance (no nearest neighbour)")
    return m


def _check_flags(flagged, n_synthetic: int) -> np.ndarray:
    flags = np.asarray(flagged)
    if flags.shape != (n_synthetic,):
        raise ValueError(f"flagged must hold one value per synthetic volume ({n_synthetic}), got shape {flags.shape}")
    if flags.dtype != bool:
        if not np.isin(flags, (0, 1)).all():
            raise ValueError("flagged must be booleans (or 0/1)")
        flags = flags.astype(bool)
    return flags
