"""Choosing the feature level by measurement: every candidate encoder and pooling grid, one truth.

Why: a pretrained encoder is not better by itself. Which network, which pooling grid
and which distance separate replicas from new patients is an empirical question, and
the answer differs between data sets; the feature level's default must come from a
measurement, and a user must be able to repeat it on their own data. The study runs
each candidate network once per volume, pools the same feature map onto every grid
asked for (pooling only down), and scores each (network, grid, measure) exactly as
the workflow scores a measure: all-pairs distances, RELICT's distance ratio over the
n closest training volumes, threshold sweep, balanced accuracy at the optimal
threshold and the ROC AUC against the dataset's truth or rating.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import PooledMapExtractor, as_grid, pooling_grid
from .compare import MEASURES as FEATURE_MEASURES
from .compare import all_pairs_feature_measures, standardise

ROW_COLUMNS = ["dataset", "candidate", "network", "label", "trained", "grid", "grid_used", "dim", "scaling",
               "measure", "balanced_accuracy", "auc", "threshold", "sensitivity", "specificity",
               "n_replicas", "n_nonreplicas", "seconds_per_volume", "device"]


def grid_name(grid: Sequence[int]) -> str:
    """``(4, 4, 4)`` -> ``"4"``, ``(2, 2, 1)`` -> ``"2x2x1"``."""
    grid = as_grid(grid)
    return str(grid[0]) if len(set(grid)) == 1 else "x".join(map(str, grid))


def embed_grids(extractor: PooledMapExtractor, volumes: Iterable[np.ndarray], grids: Sequence[Any],
                progress: Callable[[int], None] | None = None) -> tuple[list[np.ndarray], float, tuple]:
    """Embed volumes one at a time, each feature map pooled onto every grid.

    Returns:
        ``([(N, D_g) per grid], seconds per volume of the encoder alone, volume shape)``.
        The seconds exclude reading the volumes; the first volume's call (one-off
        allocation) is included.
    """
    per_grid: list[list[np.ndarray]] = [[] for _ in grids]
    seconds, shape = 0.0, None
    for k, volume in enumerate(volumes):
        volume = np.asarray(volume, dtype=np.float32)
        if shape is None:
            shape = volume.shape
        elif volume.shape != shape:
            raise ValueError(f"volume {k}: shape {volume.shape}, volume 0: {shape}; one grid per dataset")
        start = time.perf_counter()
        pooled = extractor.embed_grids(volume[None], grids)
        seconds += time.perf_counter() - start
        for out, emb in zip(per_grid, pooled):
            out.append(emb[0])
        if progress:
            progress(k + 1)
    n = sum(1 for _ in per_grid[0])
    if n == 0:
        raise ValueError("no volumes to embed")
    return [np.stack(e) for e in per_grid], seconds / n, shape


def score_embeddings(synthetic: np.ndarray, training: np.ndarray, is_replica: np.ndarray, n_closest: int,
                     step: float, measures: Sequence[str] = FEATURE_MEASURES, scaling: str = "none",
                     warn: Callable[[str], None] | None = None) -> dict[str, dict]:
    """RELICT's evaluation of feature-level measures on one set of embeddings.

    Args:
        synthetic: ``(S, D)`` embeddings of the synthetic volumes.
        training: ``(T, D)`` embeddings of the training volumes.
        is_replica: ``(S,)`` truth (rating consensus).
        n_closest: RELICT's n of the distance ratio.
        step: Threshold-sweep step.
        measures: Feature measures to score.
        scaling: ``"none"`` (RELICT) or a :func:`~synthaudit.features.compare.standardise` mode.

    Returns:
        ``{measure: {balanced_accuracy, auc, threshold, sensitivity, specificity,
        n_replicas, n_nonreplicas}}``.
    """
    from ..relict.evaluate import evaluate_measure
    from ..registry import to_distance
    from ..relict.ratio import distance_ratio

    synthetic, training = standardise(synthetic, training, scaling)
    values = all_pairs_feature_measures(synthetic, training, measures)
    out = {}
    for measure in measures:
        ratio = distance_ratio(to_distance(measure, values[measure]), n_closest, warn=warn).ratio
        result = evaluate_measure(ratio, is_replica, step)
        result.pop("sweep")
        out[measure] = {k: result[k] for k in ("balanced_accuracy", "auc", "threshold", "sensitivity",
                                                "specificity", "n_replicas", "n_nonreplicas")}
    return out


def study_rows(dataset: str, network: str, extractor: PooledMapExtractor, shape: tuple,
               scores: Mapping[tuple, Mapping[str, dict]], seconds_per_volume: float, device: str) -> list[dict]:
    """Table rows of one network on one dataset: one per (grid, scaling, measure).

    ``scores`` maps ``(grid, scaling)`` to :func:`score_embeddings`' output. A
    candidate is named ``<network>_g<grid>`` (plus ``_<scaling>`` when the features
    were scaled).
    """
    map_shape = extractor.map_shape(shape)
    rows = []
    for (grid, scaling), by_measure in scores.items():
        grid = as_grid(grid)
        used = pooling_grid(map_shape, grid)
        name = candidate_name(network, grid, scaling)
        for measure, r in by_measure.items():
            rows.append({"dataset": dataset, "candidate": name, "network": network, "label": extractor.label,
                         "trained": extractor.trained, "grid": grid_name(grid), "grid_used": "x".join(map(str, used)),
                         "dim": extractor.channels * int(np.prod(used)), "scaling": scaling, "measure": measure,
                         **r, "seconds_per_volume": round(seconds_per_volume, 3), "device": device})
    return rows


# ---------------------------------------------------------------------------
# Summaries of the study's rows (read back from TSV: values are strings there)
# ---------------------------------------------------------------------------

def _f(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def study_metrics(rows: Sequence[Mapping]) -> dict:
    """``{dataset: {candidate: {measure: {balanced_accuracy, auc}, seconds_per_volume, grid_used}}}``."""
    out: dict = {}
    for r in rows:
        entry = out.setdefault(r["dataset"], {}).setdefault(r["candidate"], {
            "label": r["label"], "grid_used": r["grid_used"], "seconds_per_volume": _f(r["seconds_per_volume"])})
        entry[r["measure"]] = {"balanced_accuracy": _f(r["balanced_accuracy"]), "auc": _f(r["auc"])}
    return out


NETWORK_KEYS = ("extractor", "weights", "intensity", "input_window", "smoothing_voxels", "options")


def candidate_name(network: str, grid: Any, scaling: str = "none") -> str:
    """``astra``, 4, ``none`` -> ``astra_g4``; a scaling other than none is appended."""
    return f"{network}_g{grid_name(grid)}" + ("" if scaling == "none" else f"_{scaling}")


def default_candidate(features: Mapping, networks: Mapping[str, Mapping]) -> str | None:
    """The study candidate that the configured feature level (``relict.features``) is, if any.

    A network matches when every key that picks the network is equal (unset, null, 0
    and empty count as the same "default"), and, for an untrained network, the seed.
    """
    grid = features.get("grid")
    if grid is None:
        return None

    def same(key, net):
        return (net.get(key) or None) == (features.get(key) or None)

    for name, net in networks.items():
        seed_ok = bool(features.get("weights")) or (net.get("seed") or 0) == (features.get("seed") or 0)  # unset = 0
        if all(same(k, net) for k in NETWORK_KEYS) and seed_ok:
            return candidate_name(name, grid, features.get("scaling") or "none")
    return None


def study_markdown(rows: Sequence[Mapping], default: str | None = None) -> str:
    """Markdown tables, one per dataset: candidates as rows, BA and AUC of each measure as columns.

    Candidates on raw embeddings first (RELICT's measures); those with a feature scaling
    follow in tables of their own. ``default`` (see :func:`default_candidate`) is marked
    with an asterisk.
    """
    lines = []
    scalings = list(dict.fromkeys(r["scaling"] for r in rows))
    for scaling in sorted(scalings, key=lambda x: x != "none"):
        if scaling != "none":
            lines += [f"Feature scaling `{scaling}` before the measures:", ""]
        for dataset in dict.fromkeys(r["dataset"] for r in rows):
            sub = [r for r in rows if r["dataset"] == dataset and r["scaling"] == scaling]
            if not sub:
                continue
            measures = list(dict.fromkeys(r["measure"] for r in sub))
            first = sub[0]
            lines += [f"**{dataset}** ({first['n_replicas']} replicas, {first['n_nonreplicas']} non-replicas)", "",
                      "| candidate | grid used | s / volume | " + " | ".join(
                          f"{m} BA | {m} AUC" for m in measures) + " |",
                      "|---|---|---|" + "---|---|" * len(measures)]
            for candidate in dict.fromkeys(r["candidate"] for r in sub):
                cand = {r["measure"]: r for r in sub if r["candidate"] == candidate}
                any_row = next(iter(cand.values()))
                mark = " *" if candidate == default else ""
                label = f"{candidate}{mark}" + ("" if str(any_row["trained"]) == "True" else " (untrained)")
                cells = " | ".join(f"{_f(cand[m]['balanced_accuracy']):.2f} | {_f(cand[m]['auc']):.2f}"
                                   if m in cand else "- | -" for m in measures)
                lines.append(f"| {label} | {any_row['grid_used']} | {_f(any_row['seconds_per_volume']):.2f} | "
                             f"{cells} |")
            lines.append("")
    if default in {r["candidate"] for r in rows}:
        lines.append("\\* the configured default (`relict.features`)")
    return "\n".join(lines).rstrip() + "\n"


def study_figure(rows: Sequence[Mapping], path) -> None:
    """AUC (bars) and balanced accuracy (dots) of every candidate, one panel per dataset and measure."""
    import matplotlib.pyplot as plt

    from ..plotting import save_figure

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    measures = list(dict.fromkeys(r["measure"] for r in rows))
    candidates = list(dict.fromkeys(r["candidate"] for r in rows))
    fig, axes = plt.subplots(len(datasets), len(measures), squeeze=False, sharey=True,
                             figsize=(1.2 + 0.55 * len(candidates) * len(measures), 2.8 * len(datasets)))
    x = np.arange(len(candidates))
    for i, dataset in enumerate(datasets):
        for j, measure in enumerate(measures):
            ax = axes[i, j]
            by = {r["candidate"]: r for r in rows if r["dataset"] == dataset and r["measure"] == measure}
            auc = [_f(by[c]["auc"]) if c in by else np.nan for c in candidates]
            ba = [_f(by[c]["balanced_accuracy"]) if c in by else np.nan for c in candidates]
            colours = ["#bdbdbd" if c in by and str(by[c]["trained"]) != "True" else "#4393c3" for c in candidates]
            ax.bar(x, auc, color=colours, label="AUC")
            ax.plot(x, ba, "o", color="#b2182b", ms=5, label="balanced accuracy")
            ax.axhline(0.5, color="k", lw=0.6, ls=":")
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{dataset}: {measure}", fontsize=9)
            ax.set_xticks(x, candidates if i == len(datasets) - 1 else [], rotation=60, ha="right", fontsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Feature-level study: replicas vs non-replicas per candidate (grey: untrained)", fontsize=10)
    save_figure(fig, path)
