"""The rules' logic as library functions, tested without Snakemake (issue 44): relict.ranking_job
(rule relict_ratio) and relict.alignment_job's candidate rule (rule relict_align and init's cost model)."""

import numpy as np
import pytest

from synthaudit.relict.matrix import MeasureMatrix
from synthaudit.relict.ranking_job import rank_measure


def _cohort(seed=0, n_train=12, n_held=20, n_syn=6):
    """MAE matrices: synthetic 0 copies training scan 3 (distance 0.01), the rest and every held-out scan
    are new patients (distances 0.5-1.0); held-out scan 0's patient also has training scan 7."""
    rng = np.random.default_rng(seed)
    train = [f"t{j}" for j in range(n_train)]
    syn = rng.uniform(0.5, 1.0, (n_syn, n_train))
    syn[0, 3] = 0.01
    held = rng.uniform(0.5, 1.0, (n_held, n_train))
    held[0, 7] = 0.02  # its own patient's training scan: left out of its ratio
    tp = {t: f"P{j}" for j, t in enumerate(train)}
    hp = {f"h{i}": f"H{i}" for i in range(n_held)}
    hp["h0"] = tp["t7"]
    mat = MeasureMatrix(syn, "mae", [f"s{i}" for i in range(n_syn)], train, 0.0)
    hmat = MeasureMatrix(held, "mae", list(hp), train, 0.0)
    return mat, hmat, tp, hp


def test_rank_measure_ranks_calls_the_copy_and_leaves_the_own_patient_out_of_the_null(caplog):
    mat, hmat, tp, hp = _cohort()
    out = rank_measure(mat, 5, held=hmat, rate=0.05, training_patients=tp, heldout_patients=hp)
    assert out.rows[0]["synthetic_id"] == "s0" and out.rows[0]["closest_training_id"] == "t3"
    assert [r["rank"] for r in out.rows] == list(range(1, 7))
    called = {r["synthetic_id"] for r in out.rows if r["calibrated_replica"]}
    assert called == {"s0"}
    assert len(out.null_rows) == 20
    # without leave-patient-out h0's ratio would be 0.02 / mean: a copy's; its own patient is left out
    h0 = next(r for r in out.null_rows if r["heldout_id"] == "h0")
    assert float(h0["score"]) > 0.3 and "belong to patients with training scans" in caplog.text
    assert out.report["mode"] == "exhaustive"


def test_rank_measure_without_heldout_scans_ranks_without_calls():
    mat, _, _, _ = _cohort(1)
    out = rank_measure(mat, 5)
    assert out.null_rows == [] and out.calls == {}
    assert out.rows[0]["synthetic_id"] == "s0" and "calibrated_replica" not in out.rows[0]
    with pytest.raises(KeyError):
        rank_measure(mat, 5, held=_cohort(1)[1], training_patients={}, heldout_patients={})


def test_candidate_counts_is_the_one_rule_for_the_job_and_init():
    from synthaudit.relict.alignment_job import candidate_counts

    assert candidate_counts(20, 30, 100, factor=2) == (20, 30)  # a coarse stage: 30 ranked, the best 20 aligned
    assert candidate_counts(20, 30, 100, factor=1) == (20, 20)  # none: what is pre-selected is aligned
    assert candidate_counts(20, 10, 100, factor=2) == (20, 20)  # never fewer ranked than aligned
    assert candidate_counts(200, 300, 50, factor=2) == (50, 50)  # at most the training set
    assert candidate_counts(20, None, 100, factor=2) == (20, 20)
