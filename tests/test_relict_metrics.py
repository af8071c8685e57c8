"""relict.metrics: the aggregates rule relict_metrics writes, from the outputs' contents (issue 44)."""

from synthaudit.relict import metrics


def _rows(called=(1, 0, None)):
    return [{"n_used": 4, "score": s, "calibrated_replica": c, "n_null": n}
            for s, c, n in zip((0.2, 0.5, 0.9), called, (19, 20, 20))]


def test_measure_entry_takes_search_calls_copies_and_evaluation():
    search = {"mode": "shortlist", "pairs_fraction": 0.2, "recall_top_n": 1.0, "n_sampled": 5, "min_recall": 0.98,
              "max_ratio_error": 0.0, "heldout": {"recall_top_n": 0.99}, "calls_changed": 0, "recall_ok": True}
    copies = {"measures": {"mae": {"percent_synthetic_copies": 33.3, "n_patients_copied": 1,
                                   "percent_patients_copied": 10.0}}}
    evaluation = {"measures": {"mae": {"threshold": 0.3, "balanced_accuracy": 0.9, "sensitivity": 1.0,
                                       "specificity": 0.8, "auc": 0.95, "n_synthetic": 3, "n_replicas": 1,
                                       "ci": {"threshold": [0.2, 0.4], "out_of_sample": {"sensitivity": 0.7}},
                                       "calibrated": {"specificity": 1.0}}}}
    e = metrics.measure_entry("mae", _rows(), search, copies, None, evaluation)
    assert e["level"] == "image" and e["n_closest_used"] == 4 and e["min_score"] == 0.2
    assert e["search_mode"] == "shortlist" and e["search_heldout_recall_top_n"] == 0.99 and e["search_calls_changed"] == 0
    assert e["calibrated_n_called"] == 1 and e["calibration_n_heldout"] == 19
    assert e["calibrated_n_patients_copied"] == 1 and e["auc"] == 0.95
    assert (e["threshold_ci_low"], e["threshold_ci_high"]) == (0.2, 0.4) and e["sensitivity_out_of_sample"] == 0.7
    assert e["calibrated_specificity"] == 1.0 and "balanced_accuracy_any_threshold" not in e
    plain = metrics.measure_entry("mae", _rows((None, None, None)), {"mode": "exhaustive", "pairs_fraction": 1.0,
                                                                    "recall_top_n": None})
    assert "calibrated_n_called" not in plain and "search_n_sampled" not in plain and "auc" not in plain


def test_copies_and_local_entries():
    c = metrics.copies_entry({"rate": 0.05, "n_heldout": 20, "combined": {"n_copies": 3, "sensitivity": None}})
    assert c == {"rate": 0.05, "n_heldout": 20, "n_copies": 3}
    local = {"n_called": 2, "n_anatomy_blocks": 50, "heldout_false_positive_rate": 0.05,
             "controls": {"by_size_mm": {"30": {"sensitivity": 0.9, "whole_volume_rmse_sensitivity": 0.05,
                                               "by_distinctiveness": {"high": 1.0}},
                                        "40": {"sensitivity": 1.0, "whole_volume_rmse_sensitivity": 0.0}}}}
    e = metrics.local_entry(local)
    assert e["local_control_30mm_distinctive_sensitivity"] == 1.0 and "local_control_40mm_distinctive_sensitivity" not in e
    assert e["local_n_called"] == 2 and e["local_control_40mm_whole_volume_rmse_sensitivity"] == 0.0
    entry = {"mae": {}}
    metrics.add_augmentation(entry, {"mae": {"flipped": {"sensitivity": 1.0}}})
    assert entry["mae"]["by_kind_flipped"] == {"sensitivity": 1.0}
