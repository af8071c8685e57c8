"""Membership inference (issue 64): each attack against a hand-computed case, DOMIAS against the ``domias``
package on the same arrays, the patient-level evaluation against hand counts and scikit-learn, the power's
closed form against a simulation, and the gate's rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from synthaudit.membership import attacks, audit, evaluate

ROOT = Path(__file__).resolve().parents[1]


def _bench(path: str):
    """A bench script as a module (bench/ is not a package): its RESULT, doc() and settings."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SETTINGS = {"attacks": ["closest_mae", "closest_rmse", "closest_emb_rmse", "density_ratio"],
            "density_ratio": {"dimension": 3}, "fpr": [0.01, 0.1], "power_auc": [0.6, 0.7], "exposed": 2,
            "bootstrap": {"n": 500, "seed": 0, "level": 0.95}}


def test_closest_distance_scores_are_minus_the_nearest_sample_ignoring_uncomputed_pairs():
    d = np.array([[3.0, 1.0, 2.0], [np.inf, 5.0, np.nan], [np.inf, np.inf, np.inf]])
    assert attacks.closest_distance_scores(d).tolist() == [-1.0, -5.0, -np.inf]
    with pytest.raises(ValueError, match="candidates x samples"):
        attacks.closest_distance_scores(np.zeros((2, 0)))


def test_patient_score_is_the_most_member_like_scan():
    order, scores = attacks.patient_scores(np.array([-3.0, -1.0, -2.0, -4.0]), ["b", "a", "b", "c"])
    assert order == ["b", "a", "c"] and scores.tolist() == [-2.0, -1.0, -4.0]


def test_log_kde_equals_scipy_gaussian_kde():
    from scipy import stats

    rng = np.random.default_rng(1)
    for n, d in ((12, 3), (30, 5), (20, 1)):
        points, at = rng.normal(size=(n, d)) * 3 + 1, rng.normal(size=(9, d)) * 4
        want = stats.gaussian_kde(points.T).logpdf(at.T)
        np.testing.assert_allclose(attacks.log_kde(points, at), want, rtol=1e-12)


def test_density_ratio_is_the_domias_package_score_on_the_same_arrays():
    """domias 0.0.5's KDE score p_G / (p_R + eps) (``kde_baseline``'s eq. 2, as its evaluator's ``domias``
    with the kde estimator) on arrays already in the attack's dimension: equal, in log space."""
    baselines = pytest.importorskip("domias.baselines", reason="make install puts domias in the venv")
    rng = np.random.default_rng(0)
    synthetic, reference, test = rng.normal(size=(30, 4)), rng.normal(size=(25, 4)) * 1.3, rng.normal(size=(10, 4))
    ours = attacks.density_ratio_scores(test, synthetic, reference, dimension=4)
    theirs = baselines.kde_baseline(test, synthetic, reference)[1]
    np.testing.assert_allclose(np.exp(ours), theirs, rtol=1e-9)
    # and the closest-distance attack ranks the candidates as domias's GAN-leaks does (exp(-min squared distance))
    d = np.sqrt(((test[:, None] - synthetic[None]) ** 2).sum(-1))
    assert (np.argsort(attacks.closest_distance_scores(d)) == np.argsort(baselines.GAN_leaks(test, synthetic))).all()


def test_density_ratio_leaves_the_candidates_own_patient_out_of_the_reference():
    """A held-out candidate with its own scan in the reference would be judged against itself: its reference
    density then has a peak at it. Left out, its score equals that against the reference without it."""
    rng = np.random.default_rng(3)
    synthetic, reference = rng.normal(size=(20, 3)), rng.normal(size=(12, 3))
    groups = [f"h{k // 2}" for k in range(12)]  # two scans per held-out patient
    candidate = reference[4:5]
    left_out = attacks.density_ratio_scores(candidate, synthetic, reference, ["h2"], groups, dimension=3)
    direct = attacks.density_ratio_scores(candidate, synthetic, np.delete(reference, [4, 5], axis=0), dimension=3)
    with_itself = attacks.density_ratio_scores(candidate, synthetic, reference, dimension=3)
    assert left_out[0] == pytest.approx(direct[0], rel=1e-12)
    assert with_itself[0] < left_out[0]  # its own scan in the reference made it look like a non-member


def test_principal_axes_are_the_svds_on_wide_embeddings():
    """The density ratio's axes from the samples' Gram matrix: pca_fit's (an SVD) on samples with many more
    features than rows, as an encoder's embeddings are, and on a rank-deficient set (zero rows past its rank)."""
    from synthaudit.fidelity.measures import pca_fit

    rng = np.random.default_rng(5)
    for n, d, k in ((22, 4096, 5), (50, 2000, 5), (12, 300, 11), (8, 3, 2)):
        x = rng.normal(size=(n, d)) * np.linspace(3, 0.5, d) + rng.normal(size=d)  # distinct spreads: unique axes
        mean, axes = attacks.principal_axes(x, k)
        want_mean, want = pca_fit(x, k)
        assert axes.shape == want.shape and np.array_equal(mean, want_mean)
        np.testing.assert_allclose(axes, want, atol=1e-10)
    twice = np.repeat(rng.normal(size=(3, 50)), 2, axis=0)  # 6 rows, rank 2 once centred
    _, axes = attacks.principal_axes(twice, 4)
    assert np.isfinite(axes).all() and np.allclose(np.linalg.norm(axes[:2], axis=1), 1.0)


def test_kde_dimension_stays_below_the_smaller_set():
    assert attacks.kde_dimension(5, 12, 20) == 5
    assert attacks.kde_dimension(5, 6, 20) == 4
    assert attacks.kde_dimension(5, 30, 3) == 1


def test_auc_advantage_and_tpr_by_hand():
    members, nonmembers = [3.0, 2.0, 2.0, 1.0], [2.0, 0.0, 0.5]
    # 3 beats all three; each 2 beats two and ties one (2.5); 1 beats two: (3 + 5 + 2) / 12
    assert evaluate.auc(members, nonmembers) == pytest.approx(10 / 12)
    from sklearn.metrics import roc_auc_score

    y = [1] * 4 + [0] * 3
    assert evaluate.auc(members, nonmembers) == pytest.approx(roc_auc_score(y, members + nonmembers))
    # thresholds 3, 2, 1: TPR - FPR = 1/4 - 0, 3/4 - 1/3, 1 - 1/3
    assert evaluate.advantage(members, nonmembers) == pytest.approx(2 / 3)
    t = evaluate.tpr_at_fpr(members, nonmembers, 0.1)  # 3 non-members: 10 % is below one false call
    assert t == {"fpr": 0.1, "measurable": False, "fpr_used": pytest.approx(1 / 3), "tpr": 1.0, "true_positives": 4,
                 "members": 4, "false_positives": 1, "nonmembers": 3}
    t = evaluate.tpr_at_fpr([5.0, 1.0], [4.0, 3.0, 0.0, -1.0, -2.0], 0.2)  # one false call allowed: threshold 4
    assert (t["measurable"], t["tpr"], t["false_positives"]) == (True, 0.5, 1)
    fpr, tpr = evaluate.roc_curve(members, nonmembers)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)


def test_bootstrap_interval_contains_the_value_and_tightens_with_patients():
    rng = np.random.default_rng(0)
    small = evaluate.bootstrap(rng.normal(0.5, 1, 10), rng.normal(0, 1, 10), 1000, 0, 0.95)
    large = evaluate.bootstrap(rng.normal(0.5, 1, 400), rng.normal(0, 1, 400), 1000, 0, 0.95)
    assert np.diff(large["auc_ci"])[0] < np.diff(small["auc_ci"])[0] / 3
    assert large["auc_ci"][0] < 0.64 < large["auc_ci"][1]  # binormal with shift 0.5: AUC = Phi(0.5 / sqrt 2)
    perfect = evaluate.bootstrap([2.0, 3.0], [0.0, 1.0], 200, 0, 0.95, np.linspace(0, 1, 5))
    assert perfect["auc_ci"] == [1.0, 1.0] and perfect["band"]["low"] == [1.0] * 5


def test_power_closed_form_matches_a_simulation():
    """Hanley and McNeil's normal approximation against binormal scores with the CI from the same standard error."""
    from statistics import NormalDist

    rng = np.random.default_rng(5)
    target, n_pos, n_neg = 0.7, 30, 20
    shift = np.sqrt(2) * NormalDist().inv_cdf(target)
    seen = 0
    for _ in range(400):
        value = evaluate.auc(rng.normal(shift, 1, n_pos), rng.normal(0, 1, n_neg))
        seen += value - 1.96 * evaluate.auc_standard_error(value, n_pos, n_neg) > 0.5
    assert seen / 400 == pytest.approx(evaluate.auc_power(target, n_pos, n_neg), abs=0.08)
    needed = evaluate.nonmembers_needed(0.7, 50)
    assert evaluate.auc_power(0.7, 50, needed) >= 0.8 > evaluate.auc_power(0.7, 50, needed - 1)
    assert evaluate.nonmembers_needed(0.55, 10) is None  # ten members can never show a weak leak


def _scans(prefix, n_patients, per):
    return [(f"{prefix}{p}_{k}", f"{prefix}{p}") for p in range(n_patients) for k in range(per)]


def test_candidates_exclude_released_heldout_patients_and_untrained_training_patients():
    train, heldout = _scans("t", 3, 2), _scans("h", 3, 2)
    c = audit.candidates(train, heldout, trained_ids=["t0_0", "t1_1"], released_patients=["h2"])
    assert c.member_patients == ["t0", "t1"] and c.nonmember_patients == ["h0", "h1"]
    assert c.ids == ["t0_0", "t0_1", "t1_0", "t1_1", "h0_0", "h0_1", "h1_0", "h1_1"]
    assert list(c.excluded.values()) == [["t2"], ["h2"]]


def test_audit_finds_a_generator_that_emits_its_training_scans():
    """Samples that are noisy copies of the members: every attack separates members from non-members."""
    rng = np.random.default_rng(7)
    train, heldout = _scans("t", 8, 2), _scans("h", 8, 2)
    c = audit.candidates(train, heldout)
    images = {i: rng.normal(size=50) for i, _ in train + heldout}
    samples = np.stack([images[i] + 0.05 * rng.normal(size=50) for i, _ in train[::2]])
    cand = np.stack([images[i] for i in c.ids])
    mae = np.abs(cand[:, None] - samples[None]).mean(-1)
    reference = np.stack([images[i] for i, _ in heldout])
    embedded = {"candidates": cand, "samples": samples, "reference": reference,
                "reference_patients": [p for _, p in heldout]}
    result, scores = audit.audit(c, {"mae": mae}, embedded, SETTINGS, len(samples))
    assert set(result["attacks"]) == {"closest_mae", "closest_emb_rmse", "density_ratio"}
    for name in ("closest_mae", "closest_emb_rmse"):
        assert result["attacks"][name]["auc"] == 1.0 and result["attacks"][name]["auc_ci"][0] > 0.5
    assert len(result["attacks"]["closest_mae"]["exposed"]) == 2
    lines = audit.summary_lines(result)
    assert "the samples leak who trained the generator" in lines[0]
    m = audit.metrics_entry(result)
    assert m["closest_mae"]["auc"] == 1.0 and m["closest_mae"]["fpr_used_0.1"] == 0.125
    rows = audit.patient_rows(c, scores)
    assert [r["role"] for r in rows] == ["member"] * 8 + ["nonmember"] * 8
    json.dumps(result)  # the summary is plain JSON


def test_precomputed_scores_join_as_an_attack_and_must_cover_every_candidate():
    train, heldout = _scans("t", 4, 1), _scans("h", 4, 1)
    c = audit.candidates(train, heldout)
    result, scores = audit.audit(c, {}, None, SETTINGS, 3, {"filter_image": np.array([4, 3, 2, 1, 0.5, 0, -1, -2])})
    assert result["attacks"]["filter_image"]["auc"] == 1.0 and "re-identification filter" in \
        result["attacks"]["filter_image"]["label"]
    with pytest.raises(ValueError, match="3 scores for 8 candidate scans"):
        audit.audit(c, {}, None, SETTINGS, 3, {"filter_image": np.zeros(3)})


def test_audit_without_nonmembers_says_why():
    c = audit.candidates(_scans("t", 3, 1), _scans("h", 2, 1), released_patients=["h0", "h1"])
    result, scores = audit.audit(c, {}, None, SETTINGS, 5)
    assert result["attacks"] == {} and scores == {}
    assert "no non-member patients" in audit.summary_lines(result)[0]


def test_gate_membership_rule_fails_passes_and_is_inconclusive(tmp_path):
    from synthaudit.review import gate

    metrics = tmp_path / "results" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "copies.json").write_text(json.dumps({d: {"n_copies": 0, "rate": 0.05, "n_heldout": 20}
                                                     for d in ("leaky", "clean", "unsure", "none")}))
    entry = lambda a, lo, hi: {"members": 10, "nonmembers": 8, "closest_mae": {  # noqa: E731
        "auc": a, "auc_ci_low": lo, "auc_ci_high": hi}}
    (metrics / "membership.json").write_text(json.dumps({"leaky": entry(0.9, 0.7, 1.0), "clean": entry(0.5, 0.3, 0.58),
                                                          "unsure": entry(0.55, 0.3, 0.8)}))
    policy = {"rules": {"membership_auc": {"max": 0.6, "attacks": None, "required": False}}}
    verdicts = {c.dataset: c.verdict for c in gate.evaluate(tmp_path, policy)}
    assert verdicts == {"leaky": "fail", "clean": "pass", "unsure": "inconclusive", "none": "not applicable"}
    shipped = gate.load_policy()
    assert shipped["rules"]["membership_auc"]["max"] == 0.6


def test_the_power_table_is_the_committed_measurement_and_the_closed_form():
    """docs/membership.md's power table is results/bench/membership_power.json's (bench/membership/power.py),
    and its closed-form columns are what synthaudit.membership.evaluate gives today."""
    power = _bench("bench/membership/power.py")
    assert power.doc(write=False) == 0, "run `.venv/bin/python bench/membership/power.py doc --write`"
    rows = json.loads((ROOT / power.RESULT).read_text())["rows"]
    assert {(r["auc"], r["members"]) for r in rows} == {(a, m) for a in power.AUCS for m in power.MEMBERS}
    for r in rows:
        assert r["nonmembers_needed"] == evaluate.nonmembers_needed(r["auc"], r["members"])
        assert r["power_at_20"] == pytest.approx(evaluate.auc_power(r["auc"], r["members"], 20), abs=1e-12)
        if r["simulated_power"] is not None:  # the audit's bootstrap: within the simulation's noise of the target
            assert 0.55 <= r["simulated_power"] <= 0.9


def test_the_cost_table_is_the_committed_measurement_of_the_verdicts_stages():
    """docs/membership.md's cost table is results/bench/membership_cost.json's (bench/membership/cost.py), whose
    stages are the verdict's own benchmark patterns (synthaudit.review.timing), the stage's one job included."""
    from synthaudit.review import timing

    cost = _bench("bench/membership/cost.py")
    assert cost.doc(write=False) == 0, "run `.venv/bin/python bench/membership/cost.py doc --write`"
    assert cost.STAGES["membership"] == ["membership.tsv"] == timing.UNESTIMATED_BENCHMARKS["membership inference"]
    assert set(cost.STAGES["samples x training"]) < set(timing.STAGE_BENCHMARKS["image level (MAE, RMSE, SSIM)"])
    runs = json.loads((ROOT / cost.RESULT).read_text())["runs"]
    assert set(runs) == {"demo", "real-anatomy"} and all(r["membership"]["jobs"] == 1 for r in runs.values())


def test_the_reference_table_is_the_committed_measurement_and_the_stages_auc():
    """docs/membership.md's leave-patient-out table is results/bench/membership_reference.json's, and its
    leave-patient-out column is the density-ratio AUC the demo's stage wrote (results/metrics/membership.json)."""
    reference = _bench("bench/membership/reference.py")
    assert reference.doc(write=False) == 0, "run `.venv/bin/python bench/membership/reference.py doc --write`"
    metrics = json.loads((ROOT / "results/metrics/membership.json").read_text())
    for r in json.loads((ROOT / reference.RESULT).read_text())["rows"]:
        assert r["leave_patient_out"] == pytest.approx(metrics[r["dataset"]]["density_ratio"]["auc"], abs=1e-6)


def test_the_card_carries_the_strongest_membership_attack(tmp_path):
    from synthaudit.review import card

    metrics = tmp_path / "results" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "membership.json").write_text(json.dumps({"set": {"members": 9, "nonmembers": 7, "closest_mae": {
        "auc": 0.62, "auc_ci_low": 0.4, "auc_ci_high": 0.8}, "density_ratio": {
        "auc": 0.71, "auc_ci_low": 0.5, "auc_ci_high": 0.9}}, "none": {"members": 3, "nonmembers": 0}}))
    numbers = card.membership_numbers(tmp_path)
    assert numbers == {"set": {"attack": "density_ratio", "value": 0.71, "ci": [0.5, 0.9], "members": 9,
                               "nonmembers": 7}}
    text = card.markdown({"provenance": {}, "gate": {"result": "pass", "policy": "p", "checks": []},
                          "generators": {}, "files": {"set": []}, "key_numbers": {"set": {"membership_auc": numbers["set"]}}})
    assert "strongest attack (density_ratio): AUC 0.71 [0.5, 0.9] on 9 member and 7 non-member" in text


def test_density_ratio_is_at_chance_without_a_leak_where_patients_are_independent():
    """No leak (the samples are new patients from the members' and non-members' population), every patient
    independent: the leave-patient-out reference keeps the density ratio's AUC at chance over draws. (Where
    patients come in families, it does not: docs/membership.md's real-anatomy table.)"""
    rng = np.random.default_rng(11)
    aucs = []
    for draw in range(12):
        members, nonmembers, samples = (rng.normal(size=(n, 12)) for n in (30, 20, 50))
        c = audit.candidates([(f"t{k}", f"t{k}") for k in range(30)], [(f"h{k}", f"h{k}") for k in range(20)])
        scores = attacks.density_ratio_scores(np.vstack([members, nonmembers]), samples, nonmembers, c.patients,
                                              c.nonmember_patients, 5)
        aucs.append(evaluate.auc(scores[:30], scores[30:]))
    assert abs(np.mean(aucs) - 0.5) < 0.05


def test_the_real_anatomy_tables_are_the_committed_measurement():
    """docs/membership.md's no-leak and graded-leak tables are results/bench/membership_real_anatomy.json's
    (bench/membership/real_anatomy.py), with every set the bench draws."""
    bench = _bench("bench/membership/real_anatomy.py")
    assert bench.doc(write=False) == 0, "run `.venv/bin/python bench/membership/real_anatomy.py doc --write`"
    rows = json.loads((ROOT / bench.RESULT).read_text())["rows"]
    drawn = {(r["kind"], r["level"]) for r in rows}
    assert drawn == {("none", 0.0)} | {("crowding", f) for f in bench.CROWDING} | {("copies", q) for q in bench.COPIES}
    assert sum(r["kind"] == "none" for r in rows) == bench.NO_LEAK_DRAWS


def test_the_verdict_says_why_membership_is_off_without_heldout_scans_and_reads_it_where_it_ran(tmp_path):
    from synthaudit.relict.ranking import write_ranking
    from synthaudit.review.verdict import dataset_verdict, verdict_lines

    rows = [{"synthetic_id": f"g{k}", "closest_training_id": f"t{k}", "score": 0.5 + k, "ratio": 0.5 + k,
             "rank": k + 1, "n_used": 4, "distance": 1.0, "mean_n_closest": 1.0} for k in range(2)]
    write_ranking(tmp_path / "results/relict/audit/ranking_mae.tsv", rows)
    off = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert any("membership inference: off: no held-out scans" in line for line in off)
    c = audit.candidates(_scans("t", 4, 1), _scans("h", 4, 1))
    result, _ = audit.audit(c, {}, None, SETTINGS, 3, {"filter_image": np.arange(8.0)[::-1].copy()})
    path = tmp_path / "results/membership/audit/membership.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))
    lines = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert any("membership inference (an attacker with a patient's scan" in line and "AUC 1.00" in line
               for line in lines)
