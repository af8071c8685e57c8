"""Snakemake adapter: threshold sweep, optimal threshold, AUC and bootstrap CIs of one measure."""

import numpy as np

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import consensus, read_ratings
from synthaudit.relict.evaluate import calibrated_performance, evaluate_measure
from synthaudit.relict.ranking import read_ranking
from synthaudit.relict.uncertainty import bootstrap_ci

SWEEP_COLUMNS = ["threshold", "tp", "fp", "tn", "fn", "sensitivity", "specificity", "balanced_accuracy"]

with logged(snakemake.log[0]) as log:
    ev = snakemake.params.evaluation
    rows = read_ranking(snakemake.input.ranking)
    cons = consensus(read_ratings(snakemake.input.ratings, [r["synthetic_id"] for r in rows]),
                     ev["replica_min_score"])
    rated = [r for r in rows if r["synthetic_id"] in cons]
    scores = np.array([r["score"] for r in rated], float)
    truth = np.array([cons[r["synthetic_id"]]["replica"] for r in rated], bool)
    result = evaluate_measure(scores, truth, ev["threshold_step"])
    write_tsv(snakemake.output.sweep, result.pop("sweep"), SWEEP_COLUMNS)
    b = ev["bootstrap"]
    result["ci"] = bootstrap_ci(scores, truth, ev["threshold_step"], b["n"], b["seed"], b["level"])
    result["n_unrated"] = len(rows) - len(rated)
    calls = [r["calibrated_replica"] for r in rated]
    if calls and all(c is not None for c in calls):  # the held-out-calibrated call next to the rating-tuned one
        result["calibrated"] = calibrated_performance(np.array(calls, bool), truth, snakemake.params.rate)
    write_json(snakemake.output.summary, result)
    ci = result["ci"]["balanced_accuracy"]
    log.info("%s: threshold %.2f, balanced accuracy %.3f (out of sample: %s), AUC %.3f", snakemake.wildcards.measure,
             result["threshold"], result["balanced_accuracy"],
             "no CI" if ci is None else f"{100 * b['level']:.0f}% CI {ci[0]:.3f}-{ci[1]:.3f}", result["auc"])
    any_ba = result["balanced_accuracy_any_threshold"]
    if any_ba == any_ba and any_ba > result["balanced_accuracy"] + 0.02:  # the grid hides a better threshold
        log.warning("%s: the sweep's step (evaluation.threshold_step = %g) is coarse for these ratios "
                    "(%.4g-%.4g): a threshold between two of them reaches balanced accuracy %.3f; "
                    "a smaller step shows it in the sweep", snakemake.wildcards.measure, ev["threshold_step"],
                    scores.min(), scores.max(), any_ba)
    if "calibrated" in result:
        c = result["calibrated"]
        log.info("%s: calibrated at rate %.3f: %d called, sensitivity %s, specificity %s", snakemake.wildcards.measure,
                 c["rate"], c["n_called"], c["sensitivity"], c["specificity"])
