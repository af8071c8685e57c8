"""Calibrated replica calls against held-out scans, and per-patient copy counts."""

import numpy as np
import pytest

from synthaudit.relict import calibration as C
from synthaudit.relict.copies import copy_table, headline


def _null(scores, patients=None):
    n = len(scores)
    patients = patients or [f"h{i // 2}" for i in range(n)]  # two scans per held-out patient
    return C.Null([f"x{i}" for i in range(n)], patients, np.asarray(scores, float), ["t0"] * n)


def test_false_positive_rate_counts_held_out_scans_at_or_below_with_the_plus_one():
    null = _null([0.5, 0.6, 0.7, 0.8])
    out = C.calibrate(np.array([0.1, 0.6, 0.75, 2.0]), null, rate=0.4)
    np.testing.assert_allclose(out["fpr"], [1 / 5, 3 / 5, 4 / 5, 5 / 5])  # 0.6: ties count (<=)
    assert out["n_null"].tolist() == [4] * 4 and out["called"].tolist() == [True, False, False, False]


def test_nothing_is_called_below_the_smallest_attainable_rate():
    assert C.min_rate(19) == 0.05 and C.min_heldout(0.05) == 19 and C.min_heldout(0.2) == 4
    small = _null(np.linspace(0.5, 0.9, 18))
    assert not C.calibrate(np.array([0.0]), small, 0.05)["called"].any()  # 1/19 > 0.05
    assert C.threshold(small.scores, 0.05) is None
    big = _null(np.linspace(0.5, 0.9, 19))
    assert C.calibrate(np.array([0.0]), big, 0.05)["called"].all()


def test_threshold_is_the_boundary_of_the_calls():
    rng = np.random.default_rng(0)
    null = _null(rng.uniform(0.5, 1.0, 40))
    scores = rng.uniform(0.3, 1.0, 200)
    t = C.threshold(null.scores, 0.1)
    np.testing.assert_array_equal(C.calibrate(scores, null, 0.1)["called"], scores < t)


def test_no_scan_calibrates_its_own_decision():
    """A synthetic volume made from held-out patient h1's scan is compared with the other
    patients only; the held-out self-check leaves each patient out."""
    null = _null([0.40, 0.41, 0.80, 0.81, 0.90, 0.91])  # patients h0, h0, h1, h1, h2, h2
    copy_of_h1 = C.calibrate(np.array([0.80]), null, 0.5, source_patients=["h1"])
    assert copy_of_h1["n_null"].tolist() == [4]
    assert copy_of_h1["fpr"][0] == pytest.approx((1 + 2) / (1 + 4))  # h0's two scans are at or below
    plain = C.calibrate(np.array([0.80]), null, 0.5)
    assert plain["fpr"][0] == pytest.approx((1 + 3) / (1 + 6))  # with its own scan it would count itself
    check = C.heldout_check(null, 0.5)
    assert check["n_null"].tolist() == [4] * 6
    np.testing.assert_allclose(check["fpr"], [1 / 5, 1 / 5, 3 / 5, 3 / 5, 5 / 5, 5 / 5])


def test_exchangeable_volumes_are_called_at_about_the_rate_and_copies_always():
    """Synthetic volumes drawn like the held-out scans (new patients) are called at about the
    rate, per measure and combined over three measures; a copy (far below the null) is called."""
    rng = np.random.default_rng(1)
    n_held, n_syn, rate = 99, 4000, 0.1
    held = {m: rng.normal(size=n_held) for m in ("a", "b", "c")}
    syn = {m: rng.normal(size=n_syn) for m in ("a", "b", "c")}
    syn = {m: np.append(v, -10.0) for m, v in syn.items()}  # the last volume: a copy
    nulls = {m: _null(held[m], [f"h{i}" for i in range(n_held)]) for m in held}
    fprs = {m: C.calibrate(syn[m], nulls[m], rate)["fpr"] for m in syn}
    for m in syn:
        assert abs(np.mean(fprs[m][:-1] <= rate) - rate) < 0.03
    any_measure = np.mean(np.any([fprs[m][:-1] <= rate for m in syn], axis=0))
    assert any_measure > 2 * rate  # "called by any measure" adds the measures' false positives up
    out = C.combined(syn, held, nulls["a"], rate)
    assert abs(np.mean(out["called"][:-1]) - rate) < 0.03 and out["called"][-1]
    with pytest.raises(ValueError, match="differ"):
        C.combined(syn, {"a": held["a"]}, nulls["a"], rate)
    with pytest.raises(ValueError, match="rate must be in"):
        C.calibrate(syn["a"], nulls["a"], 1.5)


def test_copies_per_training_patient_and_the_two_percentages():
    patient_of = {"p1_bl": "p1", "p1_fu": "p1", "p2_bl": "p2", "p2_fu": "p2", "p3_bl": "p3"}
    calls = {"rmse": [("s1", True, "p1_bl"), ("s2", True, "p1_fu"), ("s3", False, "p2_bl"), ("s4", True, "p3_bl")],
             "dice": [("s1", True, "p1_bl"), ("s2", False, "p2_bl"), ("s3", False, "p2_bl"), ("s4", False, "p3_bl")]}
    combined = [("s1", True, "p1_bl"), ("s2", True, "p1_fu"), ("s3", False, "p2_bl"), ("s4", False, "p3_bl")]
    rows, columns = copy_table(patient_of, calls, combined)
    assert columns == ["patient_id", "n_training_scans", "rmse_copies", "dice_copies", "combined_copies", "copied_by"]
    assert rows[0] == {"patient_id": "p1", "n_training_scans": 2, "rmse_copies": 2, "dice_copies": 1,
                       "combined_copies": 2, "copied_by": "s1 s2"}  # two volumes copy one patient's two scans
    assert [r["patient_id"] for r in rows] == ["p1", "p2", "p3"] and rows[2]["rmse_copies"] == 1
    h = headline(patient_of, combined)
    assert h["n_copies"] == 2 and h["percent_synthetic_copies"] == 50.0
    assert h["n_patients_copied"] == 1 and h["percent_patients_copied"] == pytest.approx(100 / 3)
    with pytest.raises(KeyError, match="not in the training set"):
        headline(patient_of, [("s9", True, "nobody")])


def test_a_held_out_scan_is_never_scored_against_its_own_patients_training_scans():
    """A second visit filed as held-out: its own patient's training scan would give it a copy's
    ratio and drag the null's floor (and every call's threshold) down with it."""
    from synthaudit.relict.ratio import distance_ratio

    rng = np.random.default_rng(0)
    d = rng.uniform(0.9, 1.1, size=(3, 8))
    train_patients = ["a", "a", "b", "c", "d", "e", "f", "g"]
    d[0, 1] = 0.1  # held-out scan 0 is patient a's second visit: close to a's training scan
    masked, n = C.leave_patient_out(d, ["a", "x", "y"], train_patients)
    assert n == 1 and np.isinf(masked[0, :2]).all() and np.isfinite(masked[1:]).all()
    assert np.array_equal(masked[1:], d[1:]) and d[0, 1] == 0.1  # the input is not modified
    before, after = distance_ratio(d, 4).ratio, distance_ratio(masked, 4).ratio
    assert before[0] < 0.2 and after[0] > 0.8 and np.allclose(before[1:], after[1:])
    assert C.leave_patient_out(d, ["x", "y", "z"], train_patients)[1] == 0


def test_the_null_is_built_leave_patient_out_and_its_rows_judge_each_scan_without_its_patient():
    from synthaudit.relict.ratio import distance_ratio

    rng = np.random.default_rng(1)
    d = rng.uniform(0.9, 1.1, size=(4, 6))
    d[0, 0] = 0.05  # held-out h0 is training patient a's second visit
    train_ids, train_patients = [f"t{j}" for j in range(6)], ["a", "b", "c", "d", "e", "f"]
    null, used, n_own = C.heldout_null(d, ["h0", "h1", "h2", "h3"], ["a", "x", "x", "y"], train_ids,
                                       train_patients, 3)
    assert n_own == 1 and np.isinf(used[0, 0]) and null.closest[0] != "t0"
    assert np.allclose(null.scores, distance_ratio(used, 3).ratio)
    by_distance = C.heldout_null(d, ["h0", "h1", "h2", "h3"], ["a", "x", "x", "y"], train_ids, train_patients, 3,
                                 use_ratio=False)[0]
    assert np.allclose(by_distance.scores, used.min(axis=1))
    rows = C.null_rows(null, 0.4)
    check = C.heldout_check(null, 0.4)
    assert [r["heldout_id"] for r in rows] == ["h0", "h1", "h2", "h3"] and list(rows[0]) == C.NULL_COLUMNS
    assert [r["n_null"] for r in rows] == [3, 2, 2, 3]  # each scan's pool leaves its own patient out
    assert [r["called"] for r in rows] == [int(c) for c in check["called"]]


def test_the_combined_call_holds_its_rate_where_the_cut_off_is_the_null_s_floor():
    """20 held-out scans (one per patient), eight measures, 5 %: the cut-off is "below every held-out
    scan". The smallest rate over the measures called every volume below all held-out scans on any one
    measure (a synthetic volume's rate reaches 1/21, a held-out scan's leave-patient-out rate only 1/20),
    about a quarter of exchangeable new patients here; the z-score statistic holds the rate and still
    calls a copy that only two of the eight measures see."""
    rng = np.random.default_rng(7)
    n_held, n_syn, rate, measures = 20, 3000, 0.05, [f"m{k}" for k in range(8)]
    common = rng.normal(size=(n_held + n_syn + 1, 1))  # the measures are correlated, as image measures are
    values = 0.6 * common + 0.8 * rng.normal(size=(n_held + n_syn + 1, len(measures)))
    values[-1, :2] = -12.0  # a copy that only two measures (the aligned ones, say) see
    held = {m: values[:n_held, k] for k, m in enumerate(measures)}
    syn = {m: values[n_held:, k] for k, m in enumerate(measures)}
    nulls = {m: _null(held[m], [f"h{i}" for i in range(n_held)]) for m in measures}
    fprs = {m: C.calibrate(syn[m], nulls[m], rate)["fpr"] for m in measures}
    smallest = np.min([fprs[m] for m in measures], axis=0)
    assert np.mean(smallest[:-1] <= 1 / (n_held + 1) + 1e-12) > 3 * rate  # what the old statistic called
    out = C.combined(syn, held, nulls["m0"], rate)
    assert np.mean(out["called"][:-1]) <= rate + 0.015 and out["called"][-1]
    check = C.combined_heldout_check(held, nulls["m0"], rate)
    assert check["n_null"].tolist() == [n_held - 1] * n_held and check["called"].sum() <= 2


def test_robust_z_falls_back_where_the_pool_has_no_spread():
    assert C.robust_z(np.array([1.0, 3.0]), np.array([2.0, 2.0, 2.0, 4.0, 0.0]))[0] < 0
    np.testing.assert_allclose(C.robust_z(np.array([3.0]), np.array([2.0, 2.0, 2.0])), [1.0])  # no spread: 1
    # an empty label's infinite distance: out of the pool's centre and scale, never extreme as a score
    got = C.robust_z(np.array([np.inf, 0.0]), np.array([1.0, 2.0, 3.0, np.inf]))
    assert got[0] == np.inf and got[1] == pytest.approx(-2 / 1.4826)
    assert np.all(C.robust_z(np.array([0.0]), np.array([np.inf, np.nan])) == np.inf)
