"""Snakemake adapter: calibrated calls combined over the measures, copies per training patient,
Dar et al.'s two percentages, and the figure of every synthetic score against the held-out null."""

import numpy as np

from synthaudit.io import read_tsv, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict import calibration
from synthaudit.relict.copies import copy_table, headline
from synthaudit.relict.figures import calibration_figure
from synthaudit.ratings import consensus, read_ratings
from synthaudit.relict.evaluate import calibrated_performance
from synthaudit.relict.ranking import read_ranking

with logged(snakemake.log[0]) as log:
    p = snakemake.params
    measures, rate, patient_of = p.measures, p.rate, p.patient_of
    rankings = {m: {r["synthetic_id"]: r for r in read_ranking(f)} for m, f in zip(measures, snakemake.input.rankings)}
    truth = {}  # the rating (or the spiked set's truth): replica / nonreplica, for the figure and the check
    if snakemake.input.ratings:
        cons = consensus(read_ratings(snakemake.input.ratings, list(rankings[measures[0]])), p.replica_min_score)
        truth = {s: "replica" if c["replica"] else "nonreplica" for s, c in cons.items()}
    nulls = {m: read_tsv(f) for m, f in zip(measures, snakemake.input.nulls)}
    held_ids = [r["heldout_id"] for r in nulls[measures[0]]]
    for m in measures:
        if [r["heldout_id"] for r in nulls[m]] != held_ids:
            raise ValueError(f"the held-out scans of {m} differ from those of {measures[0]}")
    synthetic_ids = sorted(rankings[measures[0]])
    null = calibration.Null(held_ids, [r["patient_id"] for r in nulls[measures[0]]], np.zeros(len(held_ids)),
                            [r["closest_training_id"] for r in nulls[measures[0]]])
    scores = {m: np.array([float(rankings[m][s]["score"]) for s in synthetic_ids]) for m in measures}
    null_scores = {m: np.array([float(r["score"]) for r in nulls[m]]) for m in measures}
    both = calibration.combined(scores, null_scores, null, rate, [p.source_patients.get(s) for s in synthetic_ids])
    held_check = calibration.combined_heldout_check(null_scores, null, rate)
    ordered = sorted(measures)  # combined()'s measure index refers to the sorted names
    calls_rows, combined_calls = [], []
    for k, s in enumerate(synthetic_ids):
        best = ordered[both["measure"][k]]
        attributed = rankings[best][s]["closest_training_id"]
        row = {"synthetic_id": s, "combined_fpr": float(both["fpr"][k]), "n_null": int(both["n_null"][k]),
               "combined_replica": int(both["called"][k]), "combined_measure": best,
               "attributed_training_id": attributed, "attributed_patient": patient_of[attributed],
               "truth": truth.get(s, "")}
        row.update({f"{m}_fpr": rankings[m][s]["fpr"] for m in measures})
        calls_rows.append(row)
        combined_calls.append((s, bool(both["called"][k]), attributed))
    calls_rows.sort(key=lambda r: (r["combined_fpr"], r["synthetic_id"]))
    write_tsv(snakemake.output.calls, calls_rows,
              ["synthetic_id", "combined_fpr", "n_null", "combined_replica", "combined_measure",
               "attributed_training_id", "attributed_patient", "truth"] + [f"{m}_fpr" for m in measures])
    per_measure = {m: [(s, bool(rankings[m][s]["calibrated_replica"]), rankings[m][s]["closest_training_id"])
                       for s in synthetic_ids] for m in measures}
    rows, columns = copy_table(patient_of, per_measure, combined_calls)
    write_tsv(snakemake.output.table, rows, columns)
    summary = {"rate": rate, "n_heldout": len(held_ids), "min_rate": calibration.min_rate(len(held_ids)),
               "combined_heldout_called": int(held_check["called"].sum()),
               "combined": headline(patient_of, combined_calls),
               "measures": {m: headline(patient_of, per_measure[m]) for m in measures},
               # the matched null: the measures (all but the segmentation level's) calibrated against the
               # held-out scans degraded like these samples (relict.calibration.matched_null)
               "matched_null": list(snakemake.params.matched)}
    rated = [k for k, s in enumerate(synthetic_ids) if s in truth]
    if rated:  # a rating (or a spiked set's truth): how the combined calibrated calls did
        perf = calibrated_performance(both["called"][rated], [truth[synthetic_ids[k]] == "replica" for k in rated], rate)
        summary["combined"].update({k: perf[k] for k in ("sensitivity", "specificity", "balanced_accuracy")})
    write_json(snakemake.output.summary, summary)
    calibration_figure(snakemake.output.figure, {m: list(rankings[m].values()) for m in measures}, nulls, rate,
                       truth, f"{snakemake.wildcards.dataset}: synthetic scores against held-out real scans")
    c = summary["combined"]
    log.info("calibrated at %.3f with %d held-out scans: %d of %d synthetic volumes are copies (%.1f %%), "
             "%d of %d training patients copied (%.1f %%)", rate, len(held_ids), c["n_copies"], c["n_synthetic"],
             c["percent_synthetic_copies"] or 0, c["n_patients_copied"], c["n_training_patients"],
             c["percent_patients_copied"] or 0)
