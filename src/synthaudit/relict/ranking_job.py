"""One measure of one dataset, ranked and called: what rule ``relict_ratio`` computes.

Why a library function: the ranking, the held-out null, the calls and the search report are
one decision; a script that holds them can only be tested through Snakemake (issue 44). The
rule's script reads the matrices and writes the three files.

Image and feature level rank by the distance ratio; the segmentation level ranks by the
absolute distance to the closest training volume (RELICT 2.4). When the training set has
held-out scans, their scores (same measure, same n, same code, leave-patient-out) are the null
of a new patient: each synthetic volume gets its empirical false-positive rate and a call at
``rate`` (:mod:`.calibration`), and the null table records the held-out scans' own
leave-patient-out rates. The search report says how the pairs were searched and, for a
shortlist or an aligned measure, the recall measured on the sampled rows (:mod:`.search`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import registry
from . import calibration, ranking, search
from .matrix import MeasureMatrix
from .ratio import distance_ratio

_log = logging.getLogger(__name__)


@dataclass
class RankedMeasure:
    """What the rule writes: the ranking rows, the null table, the search report."""

    rows: list[dict]
    null_rows: list[dict]
    report: dict
    n_used: int
    aligned: bool = False
    empty_pairs: bool = False
    calls: dict = field(default_factory=dict)


def rank_measure(mat: MeasureMatrix, n_closest: int, *, held: MeasureMatrix | None = None, rate: float = 0.05,
                 training_patients: Mapping[str, str] | None = None,
                 heldout_patients: Mapping[str, str] | None = None,
                 source_patients: Mapping[str, str] | None = None, shortlist=None, held_shortlist=None,
                 alignment_recall: dict | None = None, heldout_alignment_recall: dict | None = None,
                 min_recall: float = 0.0, log: logging.Logger | None = None) -> RankedMeasure:
    """Rank ``mat``'s synthetic volumes, calibrate them against ``held`` (None: no calls), and
    report the search (``shortlist``: the synthetic rows' shortlist aligned to ``mat``;
    ``alignment_recall``: an aligned measure's recall file's contents)."""
    log = log or _log
    measure = mat.measure
    use_ratio = registry.get(measure).uses_ratio
    training_ids = mat.training_ids
    sources = dict(source_patients or {})
    result = distance_ratio(mat.distances, n_closest, warn=log.warning)
    rows = ranking.ranking_rows(mat.synthetic_ids, training_ids, result, measure, use_ratio)
    aligned = "transform" in mat.extras  # aligned measures: which transform matched the closest volume
    if aligned:
        ranking.add_transforms(rows, mat.synthetic_ids, training_ids, mat.extras["transform"])
    empty_pairs = "synthetic_foreground" in mat.extras  # segmentation level: pairs of empty label maps
    if empty_pairs:
        n_empty = ranking.add_empty_pairs(rows, mat.synthetic_ids, training_ids, mat.extras["synthetic_foreground"],
                                          mat.extras["training_foreground"])
        if n_empty:
            log.warning("%s: %d of %d synthetic volumes have an empty label map, as has their closest training "
                        "volume (%s by the empty-mask rule): their rank says 'no lesion in either', not "
                        "'copy'; the ranking's empty_pair column marks them", measure, n_empty, len(rows),
                        "at its best (Dice 1, ASD 0)")
    null_rows, calls, heldout, call_rule = [], {}, None, None
    if held is not None:
        held_ids = held.synthetic_ids
        # leave-patient-out: a held-out scan is never scored against its own patient's training scans
        null, held_distances, n_own = calibration.heldout_null(
            held.distances, held_ids, [heldout_patients[i] for i in held_ids], training_ids,
            [training_patients[t] for t in training_ids], n_closest, use_ratio)
        if n_own:
            log.warning("%s: %d held-out scans belong to patients with training scans; those scans are left out of "
                        "their ratios (a held-out scan should be a new patient's)", measure, n_own)
        calls = calibration.calibrate(np.array([r["score"] for r in rows]), null, rate,
                                      [sources.get(r["synthetic_id"]) for r in rows])
        ranking.add_calibration(rows, calls)
        null_rows = calibration.null_rows(null, rate)
        smallest = calibration.min_rate(int(calls["n_null"].max()) if len(rows) else len(held_ids))
        if smallest > rate:
            log.warning("%s: %d held-out scans can support no rate below %.3f, above the calibration rate %.3f: "
                        "nothing can be called; at least %d held-out scans are needed", measure, len(held_ids),
                        smallest, rate, calibration.min_heldout(rate))
        log.info("%s: %d of %d synthetic volumes called replicas at a false-positive rate of %.3f "
                 "(%d held-out scans; %d of them called when left out)", measure, int(calls["called"].sum()),
                 len(rows), rate, len(held_ids), sum(r["called"] for r in null_rows))
        heldout = (held_distances, held_shortlist)
        syn_sources = [sources.get(i) for i in mat.synthetic_ids]

        def call_rule(syn_scores, null_scores):
            null_ = calibration.Null(held_ids, null.patients, null_scores, null.closest)
            return calibration.calibrate(np.asarray(syn_scores), null_, rate, syn_sources)["called"]
    # how the pairs were searched, and (shortlist) the recall measured on the sampled rows
    report = search.search_report(
        mat.distances, shortlist, measure, n_closest,
        scores=(lambda r, c: r) if use_ratio else (lambda r, c: c), heldout=heldout, calls=call_rule,
        min_recall=min_recall, ids=mat.synthetic_ids)
    if alignment_recall is not None:  # aligned measures: K candidates aligned, recall measured
        report = search.aligned_report(alignment_recall, measure.removesuffix("_aligned"), int(mat.distances.size),
                                       min_recall)
        if heldout_alignment_recall is not None and held is not None:  # the null's aligned ratio, checked alike
            report["heldout"] = search.aligned_report(heldout_alignment_recall, measure.removesuffix("_aligned"),
                                                      int(held.distances.size), min_recall)
        if report["recall_top_n"] is not None:
            log.info("%s: %d candidates aligned per volume; on %d volumes aligned to every training volume the "
                     "recall of the exact %d closest is %.4f (lowest %.4f), the largest ratio error %.3g", measure,
                     report["k"], report["n_sampled"], result.n_used, report["recall_top_n"], report["min_recall"],
                     report["max_ratio_error"])
            if not report["recall_ok"]:
                log.warning("%s: the aligned candidates' recall is below relict.search.recall.min_recall %.4g: raise "
                            "relict.alignment.candidates", measure, min_recall)
    if report["mode"] == "shortlist":
        log.info("%s: shortlist search computed %d of %d pairs (%.1f %%); on %d volumes searched exhaustively the "
                 "recall of the exact %d closest is %.4f (lowest %.4f), the largest ratio error %.3g, "
                 "calls changed: %s",
                 measure, report["pairs_computed"], report["pairs_total"], 100 * report["pairs_fraction"],
                 report["n_sampled"], result.n_used, report["recall_top_n"] or float("nan"),
                 report["min_recall"] or float("nan"), report["max_ratio_error"] or 0.0, report["calls_changed"])
        if not report["recall_ok"]:
            log.warning("%s: the shortlist's recall is below relict.search.recall.min_recall %.4g: raise "
                        "relict.search.shortlist.factor or search exhaustively (relict.search.mode)", measure,
                        min_recall)
    log.info("%s: ranked %d synthetic volumes by %s (n=%d); most likely replica %s (score %.4f)", measure,
             len(rows), "distance ratio" if use_ratio else "absolute distance", result.n_used,
             rows[0]["synthetic_id"], rows[0]["score"])
    return RankedMeasure(rows, null_rows, report, result.n_used, aligned, empty_pairs, calls)

