"""Shortlist search: RELICT's exact measures on candidate pairs only, with its recall measured.

Why: every RELICT measure compares every synthetic volume with every training volume,
but the distance ratio reads only the n closest training volumes of each synthetic
volume (and the segmentation level only the closest). At the sizes of today's
generators (10^4 training x 10^3-10^4 samples) the exhaustive pass costs hundreds of
core-hours per measure. The field's answer to nearest-neighbour work at that size
(FAISS; the k-means buckets of NeMo Curator's and SSCD's deduplication) is to embed
every item once, shortlist candidates with a cheap k-NN, and compute the expensive
comparison within the shortlist only.

Here the cheap stage is the **block means** of every registered volume over blocks of
about ``block_mm`` (6 mm: 35,557 numbers for the 1 mm MNI box), weighted so that their
squared distance is the part of the full-resolution squared distance that survives
averaging (:func:`cheap_vector`), compared exactly (no index) as one matrix product per
chunk of queries. Measures blind to a linear intensity change (NCC) use the volume
centred and scaled to unit norm first. Each query (a synthetic volume
or a held-out scan) keeps its ``K`` nearest training volumes, ``K = ceil(factor x n)``
for the ratio's n (``relict.search.shortlist``), and the exact measure runs on those
pairs only (``image_measures.all_pairs_image_measures(pairs=...)``; pairs outside the
shortlist are NaN in the values and +inf in the distances).

A ratio computed on the shortlist equals the exhaustive one whenever the shortlist holds
the n closest training volumes. That is **measured on every run, not assumed**: a seeded
sample of queries (``relict.search.recall.sample``) is also compared with every training
volume, and :func:`recall_check` reports the recall of the exact top n, the largest
ratio error and how many calibrated calls would change. The exhaustive rows are used in
the ranking too (they are exact).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import registry
from ..io import atomic_path

MODES = ("auto", "exhaustive", "shortlist")
# rows of queries per matrix product of the cheap stage (bounds its temporary)
_CHUNK_ELEMENTS = 32_000_000


def stage_of(measure: str) -> str:
    """The cheap stage that shortlists ``measure`` (base name: ``mae_aligned`` is shortlisted as ``mae``)."""
    return registry.get(measure.removesuffix("_aligned")).shortlist_stage  # the registry row says


def is_shortlisted(measure: str) -> bool:
    """Whether a measure is computed on the shortlist in shortlist mode.

    The image level (and its aligned variants) is: it is what costs. The feature level is
    computed from stored embeddings (a matrix product, seconds at any size) and stays
    exhaustive; so does the segmentation level for now (Dice and ASD cost 1-2 % of SSIM,
    docs/benchmarks.md).
    """
    from .. import registry

    return registry.get(measure.removesuffix("_aligned")).level == "image"


def choose_mode(n_queries: int, n_training: int, cfg: dict) -> str:
    """``exhaustive`` or ``shortlist`` for one dataset: params' ``mode``, or by pair count when ``auto``.

    ``auto`` searches exhaustively up to ``auto_above_pairs`` pairs (query x training), where
    the whole pass is cheap and exact by construction, and shortlists above.
    """
    mode = cfg["mode"]
    if mode not in MODES:
        raise ValueError(f"relict.search.mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        return "shortlist" if n_queries * n_training > int(cfg["auto_above_pairs"]) else "exhaustive"
    return mode


def shortlist_size(n_closest: int, n_training: int, factor: float) -> int:
    """K, the candidates per query: ``ceil(factor x n)``, at least n, at most the training set."""
    if factor < 1:
        raise ValueError(f"relict.search.shortlist.factor must be at least 1 (K >= n keeps the ratio's n), "
                         f"got {factor}")
    return int(min(n_training, max(n_closest, math.ceil(factor * n_closest))))


def search_plan(n_synthetic: int, n_heldout: int, n_training: int, n_closest: int, cfg: dict) -> dict:
    """The image level's search for one training set, as the workflow runs it and ``init``
    estimates it (one rule for both): ``mode``, ``k`` (candidates per query; the training set
    when exhaustive), the recall ``sample`` searched exhaustively besides, and ``pairs`` computed.

    ``n_synthetic``: the largest synthetic set that shares the training set (its held-out null
    is searched alike)."""
    queries = n_synthetic + n_heldout
    mode = choose_mode(queries, n_training, cfg)
    threshold = int(cfg["auto_above_pairs"])
    if mode == "exhaustive":
        return {"mode": mode, "k": n_training, "sample": 0, "pairs": queries * n_training, "threshold": threshold}
    k = shortlist_size(n_closest, max(1, n_training), float(cfg["shortlist"]["factor"]))
    sample = min(int(cfg["recall"]["sample"]), n_synthetic) + min(int(cfg["recall"]["sample"]), n_heldout)
    return {"mode": mode, "k": k, "sample": sample, "pairs": queries * k + sample * (n_training - k),
            "threshold": threshold}


def block_factors(block_mm: float, spacing_mm: Sequence[float], shape: Sequence[int]) -> tuple[int, ...]:
    """Voxels per block along each axis: about ``block_mm``, at least 1, at most the axis."""
    if block_mm <= 0:
        raise ValueError(f"relict.search.shortlist.block_mm must be positive, got {block_mm}")
    return tuple(int(min(n, max(1, round(block_mm / float(s))))) for s, n in zip(spacing_mm, shape))


def _block_sums(volume: np.ndarray, factors: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Sums and voxel counts of the blocks.

    A partial last block on an axis is its own block: cropping it would drop up to a block's
    width of anatomy at the edge of the field of view.
    """
    v = np.asarray(volume, dtype=np.float64)
    counts = np.ones((1,) * v.ndim)
    for axis, f in enumerate(factors):
        n = v.shape[axis]
        edges = np.arange(0, n, f)
        v = np.add.reduceat(v, edges, axis=axis)
        shape = [1] * v.ndim
        shape[axis] = len(edges)
        counts = counts * np.diff(np.append(edges, n)).astype(np.float64).reshape(shape)
    return v, counts


def cheap_vector(volume: np.ndarray, factors: Sequence[int], standardise: bool = False) -> np.ndarray:
    """The cheap stage of one volume: its block means scaled by the root of each block's voxel count.

    Why scaled: block averaging P is an orthogonal projection, and with this scaling the
    squared distance of two vectors is exactly ``|P(a - b)|^2``, the part of the
    full-resolution squared distance that survives averaging (partial blocks weighted by
    their size). ``standardise``: of the volume centred and scaled to unit norm first, so
    that the distance ranks by correlation (NCC's stage).

    What is left out, ``|(I - P)(a - b)|^2``, was measured both ways: adding each training
    volume's residual energy (dropping only the residuals' cross term) lowered the recall
    of the exact 50 closest at 12 mm blocks (simulated 3 mm cohort: SSIM 0.995 -> 0.989
    at K = 200; real T1 at 1.5 mm, n = 5 of 60, K = 10: 0.97 -> 0.93) and did not raise it
    at 6 mm, because within-block anatomy, not noise, dominates the residual and it is
    correlated between heads. So the stage ranks by ``|P(a - b)|^2`` alone.
    """
    v = np.asarray(volume, dtype=np.float64)
    if standardise:
        v = v - v.mean()
        norm = math.sqrt(float(np.vdot(v, v)))
        v = v / norm if norm > 0 else v
    sums, counts = _block_sums(v, factors)
    return (sums / np.sqrt(counts)).ravel().astype(np.float32)  # = mean x sqrt(count); float32 halves the memory


def cheap_vectors(volume: np.ndarray, factors: Sequence[int]) -> dict[str, np.ndarray]:
    """The image stages of one volume: ``raw`` and ``standardised`` (NCC's)."""
    return {"raw": cheap_vector(volume, factors), "standardised": cheap_vector(volume, factors, standardise=True)}


def nearest(queries: np.ndarray, training: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest training rows of every query row by squared distance, exactly (no index).

    One float64 matrix product per chunk of queries. Ties go to the lower training index
    (stable sort), so the result does not depend on chunking. Returns (indices, squared
    distances), each (Q, k), nearest first.
    """
    q = np.asarray(queries)
    t = np.asarray(training)
    if q.ndim != 2 or t.ndim != 2 or q.shape[1] != t.shape[1]:
        raise ValueError(f"queries {q.shape} and training {t.shape} must be (n, d) with the same d")
    k = min(int(k), len(t))
    t_sq = np.einsum("ij,ij->i", t, t, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMENTS // max(1, len(t)))
    index = np.empty((len(q), k), np.int64)
    dist = np.empty((len(q), k))
    t64 = t.astype(np.float64, copy=False)
    for start in range(0, len(q), rows):
        block = q[start:start + rows].astype(np.float64)
        d = np.einsum("ij,ij->i", block, block)[:, None] + t_sq[None, :] - 2.0 * block @ t64.T
        np.maximum(d, 0.0, out=d)
        order = np.argsort(d, axis=1, kind="stable")[:, :k]
        index[start:start + len(block)] = order
        dist[start:start + len(block)] = np.take_along_axis(d, order, axis=1)
    return index, dist


def sample_rows(n_queries: int, n_sample: int, seed: int) -> np.ndarray:
    """The queries also searched exhaustively: a seeded sample, sorted (all of them when n_sample >= Q)."""
    if n_sample < 0:
        raise ValueError(f"relict.search.recall.sample must be at least 0, got {n_sample}")
    if n_sample >= n_queries:
        return np.arange(n_queries)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_queries, size=n_sample, replace=False))


@dataclass
class Shortlist:
    """Candidates of Q queries among T training volumes, for each cheap stage.

    Attributes:
        query_ids, training_ids: Row and column ids (the plan's order).
        candidates: stage -> (Q, K) training indices, nearest first by that stage.
        sampled: Rows (indices) also compared with every training volume.
        k: Candidates per query.
        factors: Block size in voxels per axis; ``block_mm`` the size asked for.
        seconds: Time of the cheap stage (reading, block means, k-NN).
    """

    query_ids: list[str]
    training_ids: list[str]
    candidates: dict[str, np.ndarray]
    sampled: np.ndarray
    k: int
    factors: tuple[int, ...]
    block_mm: float
    seconds: float = 0.0

    def __post_init__(self):
        self.sampled = np.asarray(self.sampled, np.int64).reshape(-1)
        self.candidates = {s: np.asarray(c, np.int64).reshape(len(self.query_ids), -1)
                           for s, c in self.candidates.items()}

    def pairs(self, stage: str, rows: slice | None = None, cols: slice | None = None) -> np.ndarray:
        """The (Q, T) boolean mask of pairs to compute for ``stage``: the candidates, and every pair of a sampled row.

        ``rows``/``cols`` cut it to a shard.
        """
        if stage not in self.candidates:
            raise ValueError(f"the shortlist has no {stage!r} stage (it has {sorted(self.candidates)}): rerun "
                             "relict_shortlist")
        mask = self.shortlisted(stage)
        mask[self.sampled] = True
        return mask[rows or slice(None), cols or slice(None)]

    def shortlisted(self, stage: str) -> np.ndarray:
        """The (Q, T) mask of the candidate pairs alone (no sampled rows)."""
        mask = np.zeros((len(self.query_ids), len(self.training_ids)), bool)
        cand = self.candidates[stage]
        mask[np.repeat(np.arange(len(cand)), cand.shape[1]), cand.ravel()] = True
        return mask

    def save(self, path: str | os.PathLike) -> None:
        with atomic_path(path) as tmp:
            np.savez(tmp, query_ids=np.array(self.query_ids), training_ids=np.array(self.training_ids),
                     sampled=self.sampled, k=self.k, factors=np.array(self.factors), block_mm=self.block_mm,
                     stages=np.array(sorted(self.candidates)),  # no seconds: the same bytes on every run
                     **{f"candidates_{s}": c for s, c in self.candidates.items()})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Shortlist:
        with np.load(path, allow_pickle=False) as d:
            return cls(query_ids=d["query_ids"].tolist(), training_ids=d["training_ids"].tolist(),
                       candidates={str(s): d[f"candidates_{s}"] for s in d["stages"].tolist()},
                       sampled=d["sampled"], k=int(d["k"]), factors=tuple(int(f) for f in d["factors"]),
                       block_mm=float(d["block_mm"]), seconds=float(d["seconds"]) if "seconds" in d.files else 0.0)


def build_shortlist(query_ids: Sequence[str], training_ids: Sequence[str],
                    query_vectors: Callable[[], Iterable[dict[str, np.ndarray]]],
                    training_vectors: Callable[[], Iterable[dict[str, np.ndarray]]], *, k: int, n_sample: int,
                    seed: int, factors: Sequence[int], block_mm: float,
                    progress: Callable[[int, int], None] | None = None) -> Shortlist:
    """Candidates for every query under every stage the vectors carry (see :func:`cheap_vectors`).

    The vector callables yield one dict of stage -> vector (:func:`cheap_vector`) per volume,
    in id order; training vectors are held in memory (T x d float32: 10,000 x 35,557 at 6 mm
    on the 1 mm MNI box is 1.4 GB per stage; the matrix product reads them in float64).
    """
    import time

    start = time.perf_counter()
    total = len(training_ids) + len(query_ids)

    def gathered(vectors, offset):
        out: dict[str, list[np.ndarray]] = {}
        for i, per_stage in enumerate(vectors()):
            for stage, v in per_stage.items():
                out.setdefault(stage, []).append(v)
            if progress is not None:
                progress(offset + i + 1, total)
        return out

    train = gathered(training_vectors, 0)
    queries = gathered(query_vectors, len(training_ids))
    candidates = {}
    for stage, vs in train.items():
        qs = queries.get(stage, [])
        if len(qs) != len(query_ids) or len(vs) != len(training_ids):
            raise ValueError(f"stage {stage!r}: {len(qs)} query and {len(vs)} training vectors for "
                             f"{len(query_ids)} queries and {len(training_ids)} training ids")
        if len(query_ids):
            candidates[stage] = nearest(np.stack(qs), np.stack(vs), k)[0]
        else:
            candidates[stage] = np.zeros((0, min(k, len(training_ids))), np.int64)
    return Shortlist(list(map(str, query_ids)), list(map(str, training_ids)), candidates,
                     sample_rows(len(query_ids), n_sample, seed), min(k, len(training_ids)), tuple(factors),
                     float(block_mm), time.perf_counter() - start)


def recall_check(distances: np.ndarray, shortlisted: np.ndarray, sampled: np.ndarray, n_closest: int) -> dict:
    """How far the shortlist is from exhaustive search, on the rows computed both ways.

    Args:
        distances: (Q, T) distances (small = alike); every pair of a sampled row is finite.
        shortlisted: (Q, T) mask of the candidate pairs (without the sampled rows' extra pairs).
        sampled: Indices of the exhaustively computed rows.
        n_closest: How many closest training volumes the ratio averages (clamped to T).

    Returns:
        ``rows`` (the sampled row indices), per row ``recall`` (fraction of the exact n_closest
        closest among the candidates), ``closest_found`` (the exact closest is a candidate),
        ``ratio_exact``/``ratio_shortlist`` and ``closest_exact``/``closest_shortlist``
        (RELICT's ratio and the absolute distance to the closest on the full row and on the
        candidates only); and the summary ``recall_top_n`` (mean), ``min_recall``,
        ``max_ratio_error``, ``max_closest_error``.
    """
    from .ratio import distance_ratio

    d = np.asarray(distances, np.float64)
    sampled = np.asarray(sampled, np.int64)
    n_used = min(int(n_closest), d.shape[1])
    out = {"rows": sampled, "n": n_used}
    if len(sampled) == 0:
        return {**out, "recall": np.zeros(0), "closest_found": np.zeros(0, bool), "ratio_exact": np.zeros(0),
                "ratio_shortlist": np.zeros(0), "closest_exact": np.zeros(0), "closest_shortlist": np.zeros(0),
                "recall_top_n": None, "min_recall": None, "max_ratio_error": None, "max_closest_error": None}
    full = d[sampled]
    if not np.all(np.isfinite(full)):
        raise ValueError("a sampled row has pairs that were not computed: the recall needs every pair of it")
    restricted = np.where(shortlisted[sampled], full, np.inf)
    order = np.argsort(full, axis=1, kind="stable")[:, :n_used]  # the exact n_used nearest (ties: lower index)
    recall = np.take_along_axis(shortlisted[sampled], order, axis=1).mean(axis=1)
    exact = distance_ratio(full, n_used, warn=lambda message: None)
    short = distance_ratio(restricted, n_used, warn=lambda message: None)
    return {**out, "recall": recall, "closest_found": shortlisted[sampled, order[:, 0]],
            "ratio_exact": exact.ratio, "ratio_shortlist": short.ratio,
            "closest_exact": exact.closest_distance, "closest_shortlist": short.closest_distance,
            "recall_top_n": float(recall.mean()), "min_recall": float(recall.min()),
            "max_ratio_error": float(np.max(np.abs(short.ratio - exact.ratio))),
            "max_closest_error": float(np.max(np.abs(short.closest_distance - exact.closest_distance)))}


def alignment_recall(exhaustive: np.ndarray, workflow: np.ndarray, candidates: np.ndarray, n_closest: int) -> dict:
    """How far the aligned ratio's K candidates are from aligning every training volume.

    Args:
        exhaustive: (R, T) aligned distances of R sampled rows against every training volume
            (the whole group searched); the exact values are the lower of these and
            ``workflow``'s (the candidates' own search may find a lower one).
        workflow: (R, T) the same rows as the workflow's aligned matrix holds them: aligned for
            the K candidates, the plain distance (an upper bound) elsewhere.
        candidates: (R, T) boolean mask of the K candidates.
        n_closest: How many closest training volumes the ratio averages (clamped to T).

    Returns:
        Per row ``recall`` (the exact n_closest nearest among the candidates), ``ratio_exact`` and
        ``ratio_workflow``; and ``recall_top_n`` (mean), ``min_recall``, ``max_ratio_error``.
    """
    from .ratio import distance_ratio

    exact = np.minimum(np.asarray(exhaustive, np.float64), np.asarray(workflow, np.float64))
    work = np.asarray(workflow, np.float64)
    cand = np.asarray(candidates, bool)
    if exact.shape != work.shape or exact.shape != cand.shape:
        raise ValueError(f"shapes differ: exhaustive {exact.shape}, workflow {work.shape}, candidates {cand.shape}")
    if len(exact) == 0:
        return {"n": int(n_closest), "recall": [], "ratio_exact": [], "ratio_workflow": [], "recall_top_n": None,
                "min_recall": None, "max_ratio_error": None}
    n_used = min(int(n_closest), exact.shape[1])
    order = np.argsort(exact, axis=1, kind="stable")[:, :n_used]
    recall = np.take_along_axis(cand, order, axis=1).mean(axis=1)
    r_exact = distance_ratio(exact, n_used, warn=lambda message: None).ratio
    r_work = distance_ratio(work, n_used, warn=lambda message: None).ratio
    return {"n": n_used, "recall": recall.tolist(), "ratio_exact": r_exact.tolist(), "ratio_workflow": r_work.tolist(),
            "recall_top_n": float(recall.mean()), "min_recall": float(recall.min()),
            "max_ratio_error": float(np.max(np.abs(r_work - r_exact)))}


def aligned_report(recall: dict, measure: str, n_pairs_total: int, min_recall: float) -> dict:
    """``search/<measure>_aligned.json`` from relict_align's recall check: the K candidates'
    mode, what was aligned, and the measured recall (None where no row was sampled)."""
    m = recall["measures"][measure]
    r = m["recall_top_n"]
    if recall["k"] >= recall.get("n_training", math.inf):  # every training volume aligned: exact by construction
        m = {**m, "recall_top_n": 1.0, "min_recall": 1.0, "max_ratio_error": 0.0}
        r = 1.0
    return {"measure": f"{measure}_aligned", "mode": "candidates", "k": recall["k"],
            "pairs_total": n_pairs_total, "pairs_computed": recall["pairs_aligned"],
            "pairs_fraction": recall["pairs_aligned"] / n_pairs_total if n_pairs_total else None,
            "min_recall_threshold": min_recall, "n_sampled": len(recall["rows"]), "recall_top_n": r,
            "min_recall": m["min_recall"], "max_ratio_error": m["max_ratio_error"],
            "recall_ok": bool(r is None or r >= min_recall),  # the check's time: the job's log and benchmark
            "rows": [{"synthetic_id": i, "recall": a, "ratio_exact": b, "ratio_workflow": c}
                     for i, a, b, c in zip(recall["rows"], m["recall"], m["ratio_exact"], m["ratio_workflow"])]}


def aligned_to(shortlist: Shortlist, query_ids: Sequence[str], training_ids: Sequence[str], what: str) -> Shortlist:
    """The shortlist, checked to list the matrix's rows and columns in the same order (a stale one is refused)."""
    if list(map(str, query_ids)) != shortlist.query_ids or list(map(str, training_ids)) != shortlist.training_ids:
        raise ValueError(f"the shortlist's ids differ from {what}'s: it is stale; rerun relict_shortlist")
    return shortlist


def search_report(distances: np.ndarray, shortlist: Shortlist | None, measure: str, n_closest: int, *,
                  scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                  heldout: tuple[np.ndarray, Shortlist | None] | None = None,
                  calls: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                  min_recall: float = 0.999, ids: Sequence[str] | None = None) -> dict:
    """What the search computed and how far it is from exhaustive search (``search/<measure>.json``).

    Args:
        distances: The synthetic volumes' (S, T) distances as computed (+inf: not computed).
        shortlist: Their shortlist, or None for an exhaustive search.
        measure: The measure (its cheap stage picks the candidates).
        n_closest: How many closest training volumes the ratio averages.
        scores: ``scores(ratio, closest_distance) -> score`` (the ratio, or the absolute
            distance at segmentation level), for the calls.
        heldout: The held-out scans' (H, T) distances and their shortlist, when calibrated.
        calls: ``calls(synthetic_scores, null_scores) -> called`` (boolean per synthetic
            volume) at the calibrated rate, when calibrated.
        min_recall: Params' threshold on the mean recall of the exact n_closest nearest.
        ids: Synthetic ids, for the per-row table.
    """
    d = np.asarray(distances, np.float64)
    total = int(d.size)
    out = {"measure": measure, "mode": "exhaustive" if shortlist is None else "shortlist",
           "pairs_total": total, "pairs_computed": int(np.isfinite(d).sum()), "min_recall_threshold": min_recall}
    out["pairs_fraction"] = out["pairs_computed"] / total if total else None
    if shortlist is None:  # every pair computed: the n_closest nearest are exact by construction
        return {**out, "recall_top_n": 1.0, "recall_ok": True, "n_sampled": 0, "max_ratio_error": 0.0,
                "calls_changed": 0 if calls is not None else None}
    stage = stage_of(measure)
    check = recall_check(d, shortlist.shortlisted(stage), shortlist.sampled, n_closest)
    out.update({"k": shortlist.k, "block_mm": shortlist.block_mm, "stage": stage, "n_sampled": int(len(check["rows"])),
                "recall_top_n": check["recall_top_n"], "min_recall": check["min_recall"],
                "closest_found": (float(np.mean(check["closest_found"])) if len(check["rows"]) else None),
                "max_ratio_error": check["max_ratio_error"], "max_closest_error": check["max_closest_error"]})
    out["recall_ok"] = bool(check["recall_top_n"] is None or check["recall_top_n"] >= min_recall)
    out["rows"] = [{"synthetic_id": (ids[r] if ids is not None else int(r)), "recall": float(rc),
                    "ratio_exact": float(a), "ratio_shortlist": float(b)}
                   for r, rc, a, b in zip(check["rows"], check["recall"], check["ratio_exact"],
                                          check["ratio_shortlist"])]
    held_check = None
    if heldout is not None and heldout[1] is not None:
        held_check = recall_check(heldout[0], heldout[1].shortlisted(stage), heldout[1].sampled, n_closest)
        out["heldout"] = {"n_sampled": int(len(held_check["rows"])), "recall_top_n": held_check["recall_top_n"],
                          "min_recall": held_check["min_recall"], "max_ratio_error": held_check["max_ratio_error"]}
        if held_check["recall_top_n"] is not None and held_check["recall_top_n"] < min_recall:
            out["recall_ok"] = False
    out["calls_changed"] = None
    if scores is not None and calls is not None and heldout is not None:
        from .ratio import distance_ratio

        def as_run(dist, chk, exact):
            """Scores as computed (sampled rows exact), or as a shortlist-only run would have them."""
            r = distance_ratio(dist, n_closest, warn=lambda message: None)
            s = np.array(scores(r.ratio, r.closest_distance), np.float64)
            if chk is not None and len(chk["rows"]) and not exact:
                s[chk["rows"]] = scores(chk["ratio_shortlist"], chk["closest_shortlist"])
            return s

        exact = calls(as_run(d, check, True), as_run(heldout[0], held_check, True))
        short = calls(as_run(d, check, False), as_run(heldout[0], held_check, False))
        out["calls_changed"] = int(np.sum(np.asarray(exact) != np.asarray(short)))
    return out
