"""Snakemake adapter: distance ratio, ranking and calibrated calls of the synthetic volumes for one measure.

Image and feature level rank by the distance ratio; the segmentation level ranks by
the absolute distance to the closest training volume (RELICT 2.4). When the training set
has held-out scans, their scores (same measure, same n, same code) are the null of a new
patient: each synthetic volume gets its empirical false-positive rate and a call at
``relict.calibration.rate`` (synthaudit.relict.calibration), and the null table records the
held-out scans' own leave-patient-out rates.
"""

import numpy as np

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit import registry
from synthaudit.relict import calibration, matrix, ranking, search
from synthaudit.relict.ratio import distance_ratio

with logged(snakemake.log[0]) as log:
    mat = matrix.load(snakemake.input.measure)
    measure = mat.measure
    use_ratio = registry.get(measure).uses_ratio
    training_ids = mat.training_ids
    result = distance_ratio(mat.distances, snakemake.params.n_closest, warn=log.warning)
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
    null_rows = []
    if snakemake.input.heldout:
        rate = snakemake.params.rate
        held = matrix.load(snakemake.input.heldout, training_ids=training_ids, expected=snakemake.input.measure)
        held_ids = held.synthetic_ids
        patients = snakemake.params.heldout_patients
        # leave-patient-out: a held-out scan is never scored against its own patient's training scans
        null, held_distances, n_own = calibration.heldout_null(
            held.distances, held_ids, [patients[i] for i in held_ids], training_ids,
            [snakemake.params.training_patients[t] for t in training_ids], snakemake.params.n_closest, use_ratio)
        if n_own:
            log.warning("%s: %d held-out scans belong to patients with training scans; those scans are left out of "
                        "their ratios (a held-out scan should be a new patient's)", measure, n_own)
        sources = snakemake.params.source_patients
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
    # how the pairs were searched, and (shortlist) the recall measured on the sampled rows
    shortlist = (search.aligned_to(search.Shortlist.load(snakemake.input.shortlist[0]), mat.synthetic_ids,
                                   training_ids, snakemake.input.measure) if snakemake.input.shortlist else None)
    heldout = calls = None
    if snakemake.input.heldout:
        held_shortlist = (search.aligned_to(search.Shortlist.load(snakemake.input.heldout_shortlist[0]), held_ids,
                                            training_ids, snakemake.input.heldout)
                          if snakemake.input.heldout_shortlist else None)
        heldout = (held_distances, held_shortlist)
        held_patients, held_closest = null.patients, null.closest
        syn_sources = [sources.get(i) for i in mat.synthetic_ids]

        def calls(syn_scores, null_scores):
            null_ = calibration.Null(held_ids, held_patients, null_scores, held_closest)
            return calibration.calibrate(np.asarray(syn_scores), null_, rate, syn_sources)["called"]
    report = search.search_report(
        mat.distances, shortlist, measure, snakemake.params.n_closest,
        scores=(lambda r, c: r) if use_ratio else (lambda r, c: c), heldout=heldout, calls=calls,
        min_recall=snakemake.params.min_recall, ids=mat.synthetic_ids)
    if snakemake.input.get("alignment_recall"):  # aligned measures: K candidates aligned, recall measured
        import json

        recall = json.loads(open(snakemake.input.alignment_recall[0]).read())
        report = search.aligned_report(recall, measure.removesuffix("_aligned"), int(mat.distances.size),
                                       snakemake.params.min_recall)
        if snakemake.input.get("heldout_alignment_recall"):  # the null's aligned ratio, checked alike
            held_recall = json.loads(open(snakemake.input.heldout_alignment_recall[0]).read())
            report["heldout"] = search.aligned_report(held_recall, measure.removesuffix("_aligned"),
                                                      int(held.distances.size), snakemake.params.min_recall)
        if report["recall_top_n"] is not None:
            log.info("%s: %d candidates aligned per volume; on %d volumes aligned to every training volume the "
                     "recall of the exact %d closest is %.4f (lowest %.4f), the largest ratio error %.3g", measure,
                     report["k"], report["n_sampled"], result.n_used, report["recall_top_n"], report["min_recall"],
                     report["max_ratio_error"])
            if not report["recall_ok"]:
                log.warning("%s: the aligned candidates' recall is below relict.search.recall.min_recall %.4g: raise "
                            "relict.alignment.candidates", measure, snakemake.params.min_recall)
    write_json(snakemake.output.search, report)
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
                        snakemake.params.min_recall)
    ranking.write_ranking(snakemake.output.ranking, rows, with_transform=aligned, with_empty_pair=empty_pairs)
    write_tsv(snakemake.output.null, null_rows, calibration.NULL_COLUMNS)
    log.info("%s: ranked %d synthetic volumes by %s (n=%d); most likely replica %s (score %.4f)", measure,
             len(rows), "distance ratio" if use_ratio else "absolute distance", result.n_used,
             rows[0]["synthetic_id"], rows[0]["score"])
