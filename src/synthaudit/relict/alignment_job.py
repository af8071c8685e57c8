"""One dataset's alignment-aware measures: what rule ``relict_align`` computes (issue 44).

Candidates for every synthetic volume from a group search on block means (all pairs, training
volumes streamed; one matrix product per synthetic volume and group element, with exact early
rejection), then the full-resolution search on those K pairs only (coarse-to-fine from block
means of about ``coarse_mm``, or every shift at full resolution). With ``rank_candidates`` on
a grid finer than ``coarse_mm``, that many are pre-selected and ranked by the coarse search
first, and only the best K of them go on to full resolution; each aligned measure's matrix is
the plain one with the candidate pairs replaced by their aligned value when lower. A seeded
sample of rows is also aligned to every training volume (``recall``): the recall of the exact
n closest among the candidates is the report's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..logs import Progress
from . import alignment as al
from . import search as relict_search

_log = logging.getLogger(__name__)


def candidate_counts(candidates: int, rank_candidates: int | None, n_train: int, factor: int) -> tuple[int, int]:
    """(K aligned at full resolution, K' pre-selected) per synthetic volume: K = ``candidates``,
    at most the training set; with a coarse stage (``factor`` > 1), ``rank_candidates`` (at least
    K) are pre-selected and ranked on it first; without one, K' = K."""
    k = min(int(candidates), n_train)
    k_pre = min(max(k, int(rank_candidates or k)), n_train) if factor > 1 else k
    return k, k_pre


@dataclass
class AlignedDataset:
    """What the rule writes: the aligned matrices (with transforms), the per-pair table, the recall report."""

    matrices: dict
    table: list[dict]
    recall: dict
    seconds: float
    n_pairs: int


def align_dataset(synthetic: Sequence[str], training: Sequence[str], loaded: Callable, plain: Mapping[str, np.ndarray],
                  cfg: Mapping, grid: Mapping, syn_ids: Sequence[str], train_ids: Sequence[str], n_closest: int,
                  mem_mb: float, threads: int = 1, shortlist_mask: np.ndarray | None = None,
                  log: logging.Logger | None = None) -> AlignedDataset:
    """Align every synthetic volume (paths ``synthetic``, read by ``loaded(path)``) to its
    candidates among ``training``; ``plain``: the plain distance matrices per measure (a pair a
    shortlist did not compute is +inf); ``cfg``: relict.alignment; ``shortlist_mask``: the pairs a
    shortlist search allows (None: all); ``mem_mb``: the job's memory, half of which the stack of
    moved and shifted rows may use."""
    log = log or _log
    measures = list(plain)
    search = cfg["search"]
    space = al.SearchSpace() if search == "none" else al.SearchSpace.from_params(search)
    spacing = None
    start = time.perf_counter()
    n_syn, n_train = len(synthetic), len(training)
    factor, background = al.refine_factor(cfg.get("coarse_mm"), grid["spacing_mm"]), 0.0
    k, k_pre = candidate_counts(cfg["candidates"], cfg.get("rank_candidates"), n_train, factor)
    both = {"mae", "rmse"} <= set(plain)
    if space.is_identity:
        log.info("search space none: the aligned measures are the plain ones")
        candidates, pairs = np.zeros((n_syn, 0), np.int64), [[] for _ in range(n_syn)]
        t_pre = 0.0
    else:
        budget = 0.5 * float(mem_mb) * 2 ** 20
        factor_pre = al.preselect_factor(float(cfg["preselect_block_mm"]), grid["shape"], grid["spacing_mm"], space,
                                         budget)
        log.info("pre-selection on %d-voxel block means (%s mm; preselect_block_mm %s, memory budget %.1f GB)",
                 factor_pre, " x ".join(f"{factor_pre * s:.2g}" for s in grid["spacing_mm"]),
                 cfg["preselect_block_mm"], budget / 1e9)
        allowed = None
        if shortlist_mask is not None:  # relict.search: align among each volume's shortlist only
            allowed = [np.flatnonzero(row) for row in shortlist_mask]
            log.info("shortlist search: pre-selection among %d of %d pairs", int(shortlist_mask.sum()),
                     shortlist_mask.size)
        candidates, hypotheses, spacing, background = al.preselect_volumes(
            synthetic, training, loaded, space, k_pre, factor_pre, allowed=allowed,
            n_hypotheses=int(cfg["hypotheses"]), workers=threads, max_stack_bytes=budget,
            progress=Progress(log, "pre-selection on block means: synthetic volumes", n_syn))
        t_pre = time.perf_counter() - start
        log.info("pre-selection: %d x %d pairs, %d group elements, %.1f s; %d candidates each; background %.4g "
                 "(median of the training volumes' faces: what shifts and rotations pad with)", n_syn, n_train,
                 len(space.flips()) * len(space.rotations()), t_pre, k_pre, background)
        log.info("full-resolution search: %s", (f"coarse-to-fine from {factor}x block means" if factor > 1
                 else "every shift at full resolution") + (f"; the {k_pre} candidates ranked on the block means, "
                                                           f"the best {k} aligned at full resolution"
                                                           if k_pre > k else ""))
        candidates, pairs = al.align_candidates_ranked(
            synthetic, training, loaded, candidates, hypotheses, space, spacing, workers=threads, factor=factor,
            background=background, keep=k, plain=(plain["mae"], plain["rmse"]) if both else None,
            progress=Progress(log, "full-resolution alignment: synthetic volumes", n_syn))
    seconds = time.perf_counter() - start
    n_pairs = int(sum(len(r) for r in pairs))
    log.info("alignment: %d candidate pairs in %.1f s (%.2f s per pair, pre-selection %.1f s)", n_pairs, seconds,
             (seconds - t_pre) / max(n_pairs, 1), t_pre)
    spacing = spacing or [1.0, 1.0, 1.0]
    matrices = al.aligned_matrices(plain, candidates, pairs, spacing)
    for m in measures:
        log.info("%s_aligned: %d of %d candidate pairs closer than plain", m, int(np.sum(matrices[m] < plain[m])),
                 n_pairs)
    table = al.alignment_rows(syn_ids, train_ids, candidates, pairs, plain, spacing)

    # the recall check (relict.alignment.recall): a seeded sample of rows aligned to every training
    # volume over the whole group; were the exact n closest among the K candidates?
    rcfg = cfg.get("recall") or {"sample": 0, "seed": 0}
    n_check = 0 if space.is_identity or k >= n_train else min(int(rcfg["sample"]), n_syn)
    rows = sorted(int(i) for i in np.random.default_rng(int(rcfg["seed"])).choice(n_syn, n_check, replace=False))
    t_check = time.perf_counter()
    report = {"k": k, "ranked": k_pre, "n_training": n_train, "sample": int(rcfg["sample"]), "seed": int(rcfg["seed"]),
              "pairs_aligned": n_pairs, "rows": [syn_ids[i] for i in rows], "measures": {}}
    if rows:
        everything = np.tile(np.arange(n_train), (len(rows), 1))
        full = al.align_candidates([synthetic[i] for i in rows], training, loaded, everything, [None] * len(rows),
                                   space, spacing, workers=threads, factor=factor, background=background,
                                   plain=(plain["mae"][rows], plain["rmse"][rows]) if both else None,
                                   progress=Progress(log, "recall check: sampled volumes aligned to every training "
                                                     "volume", len(rows)))
        exhaustive = al.aligned_matrices({m: plain[m][rows] for m in measures}, everything, full, spacing)
    mask = np.zeros((len(rows), n_train), bool)
    for r, i in enumerate(rows):
        mask[r, candidates[i]] = True
    for m in measures:
        ex = exhaustive[m] if rows else np.zeros((0, n_train))
        report["measures"][m] = relict_search.alignment_recall(ex, matrices[m][rows], mask, n_closest)
    if rows:
        log.info("recall check: %d volumes aligned to all %d training volumes in %.1f s; recall of the exact %d "
                 "closest among the %d candidates: %s; largest ratio error %s", len(rows), n_train,
                 time.perf_counter() - t_check, min(n_closest, n_train), k,
                 ", ".join(f"{m} {report['measures'][m]['recall_top_n']:.4f}" for m in measures),
                 ", ".join(f"{m} {report['measures'][m]['max_ratio_error']:.3g}" for m in measures))
    else:
        log.info("recall check: none (%s)", "every training volume is a candidate" if k >= n_train and
                 not space.is_identity else "relict.alignment.recall.sample is 0" if not space.is_identity
                 else "search space none")
    return AlignedDataset(matrices, table, report, seconds, n_pairs)
