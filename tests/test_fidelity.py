"""Fidelity measures against reference implementations and closed forms (issue 45)."""

from __future__ import annotations

import numpy as np
import pytest

from synthaudit.fidelity import measures as fm


def _scipy_fd(a, b):
    """pytorch-fid's formula: covariance matrices and scipy's matrix square root."""
    from scipy import linalg

    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(s1 @ s2).real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def test_frechet_distance_equals_the_matrix_square_root_formula_and_monai():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 12))
    b = rng.normal(loc=0.5, scale=1.5, size=(30, 12))
    assert fm.frechet_distance(a, b) == pytest.approx(_scipy_fd(a, b), rel=1e-8)
    import torch
    from monai.metrics import FIDMetric

    monai_fd = float(FIDMetric()(torch.as_tensor(b), torch.as_tensor(a)))
    assert fm.frechet_distance(a, b) == pytest.approx(monai_fd, rel=1e-5)
    # n << d (the embeddings' case): exact where the d x d square root is ill-conditioned
    wide_a, wide_b = rng.normal(size=(15, 300)), rng.normal(size=(12, 300)) + 0.2
    assert fm.frechet_distance(wide_a, wide_b) == pytest.approx(_scipy_fd(wide_a, wide_b), rel=1e-6)
    assert fm.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-9)


def test_frechet_distance_of_two_gaussians_is_the_closed_form():
    """Samples whose mean and covariance are exactly mu and diag(s^2): |mu_a - mu_b|^2 + sum (s_a - s_b)^2."""
    d = 4
    base = np.vstack([np.eye(d), -np.eye(d)]) * np.sqrt(7 / 2)  # 8 rows: mean 0, sample covariance I
    mu_a, s_a = np.array([0.0, 1, 2, 3]), np.array([1.0, 2, 0.5, 1])
    mu_b, s_b = np.array([1.0, 1, 0, 3]), np.array([2.0, 2, 1.5, 0.1])
    a, b = mu_a + base * s_a, mu_b + base * s_b
    expected = ((mu_a - mu_b) ** 2).sum() + ((s_a - s_b) ** 2).sum()
    assert fm.frechet_distance(a, b) == pytest.approx(expected, rel=1e-10)


def test_prdc_equals_naeem_et_als_package():
    prdc = pytest.importorskip("prdc")  # requirements.txt pins it: the reference implementation
    rng = np.random.default_rng(1)
    real = rng.normal(size=(60, 8))
    for fake in (rng.normal(size=(50, 8)), rng.normal(loc=0.7, size=(50, 8)), real[:40] + 1e-3):
        ours = fm.prdc(real, fake, k=5)
        ref = prdc.compute_prdc(real_features=real, fake_features=fake, nearest_k=5)
        for key in ("precision", "recall", "density", "coverage"):
            assert ours[key] == pytest.approx(float(ref[key]), abs=1e-12), key
    with pytest.raises(ValueError, match="k = 5"):
        fm.prdc(real[:5], real[:5], k=5)


def _reference_alpha(real, fake, n_steps=30):
    """Alaa et al.'s compute_alpha_precision curves, re-typed with sklearn's neighbours (as theirs)."""
    from sklearn.neighbors import NearestNeighbors

    alphas = np.linspace(0, 1, n_steps)
    c = real.mean(0)
    radii = np.quantile(np.sqrt(((real - c) ** 2).sum(1)), alphas)
    synth_center = fake.mean(0)
    synth_to_center = np.sqrt(((fake - c) ** 2).sum(1))
    rr, _ = NearestNeighbors(n_neighbors=2).fit(real).kneighbors(real)
    rs, rs_args = NearestNeighbors(n_neighbors=1).fit(fake).kneighbors(real)
    rr, rs, rs_args = rr[:, 1], rs[:, 0], rs_args[:, 0]
    closest_d = np.sqrt(((fake[rs_args] - synth_center) ** 2).sum(1))
    closest_radii = np.quantile(closest_d, alphas)
    p = np.array([np.mean(synth_to_center <= r) for r in radii])
    b = np.array([np.mean((rs <= rr) * (closest_d <= r)) for r in closest_radii])
    step = alphas[1] - alphas[0]
    return 1 - 2 * np.abs(alphas - p).sum() * step, 1 - 2 * np.abs(alphas - b).sum() * step


def test_alpha_precision_and_beta_recall_follow_the_authors_reference_code():
    rng = np.random.default_rng(2)
    real = rng.normal(size=(80, 6))
    for fake in (rng.normal(size=(70, 6)), rng.normal(scale=0.3, size=(70, 6)), rng.normal(loc=2.0, size=(70, 6))):
        ours = fm.alpha_beta_authenticity(real, fake)
        a, b = _reference_alpha(real, fake)
        assert ours["alpha_precision"] == pytest.approx(a, abs=1e-12)
        assert ours["beta_recall"] == pytest.approx(b, abs=1e-12)
    good = fm.alpha_beta_authenticity(real, rng.normal(size=(80, 6)))
    collapsed = fm.alpha_beta_authenticity(real, rng.normal(scale=0.2, size=(80, 6)))
    assert good["alpha_precision"] > collapsed["alpha_precision"] and good["beta_recall"] > collapsed["beta_recall"]


def test_alpha_beta_from_a_real_set_computed_once_are_the_same_bits_for_every_subset():
    """The bootstrap computes the real side once (measures.RealSet) and each sample's distance to the real
    mean once; every replicate's rows must then give what the measure computed from the arrays gives."""
    rng = np.random.default_rng(4)
    real = rng.normal(size=(30, 257)).astype(np.float32)  # float32 as the stored embeddings
    fake = rng.normal(scale=1.1, size=(25, 257)).astype(np.float32)
    rr, rf = fm.distances(real, real), fm.distances(real, fake)
    support = fm.real_set(real, 17, rr=rr)
    fake64 = np.asarray(fake, np.float64)
    to_centre = support.to_centre(fake64)
    for rows in (np.arange(25), np.unique(rng.integers(0, 25, 25)), np.array([3, 1, 1, 7, 20])):
        plain = fm.alpha_beta_authenticity(real, fake[rows], 17, rr=rr, rf=rf[:, rows])
        once = fm.alpha_beta_authenticity(support, fake64[rows], rf=rf[:, rows], fake_to_centre=to_centre[rows])
        assert once == plain  # floats compared exactly, lists element by element
        assert fm.alpha_beta_authenticity(support, fake[rows]) == fm.alpha_beta_authenticity(real, fake[rows], 17)


def _rescanned(rng, n_patients=15, d=6, rescan=0.05):
    """Two scans per patient: a baseline and a rescan a little away (what a training set holds)."""
    base = rng.normal(size=(n_patients, d))
    real = np.vstack([base, base + rescan * rng.normal(size=(n_patients, d))])
    return real, [f"p{k}" for k in range(n_patients)] * 2


def test_with_one_scan_per_patient_the_patient_aware_measures_are_the_same_bits():
    """Leave-patient-out changes nothing where each patient has one scan: PRDC, α/β and authenticity equal
    today's numbers exactly, whichever way the patients are named (issue 63)."""
    rng = np.random.default_rng(11)
    real, fake = rng.normal(size=(40, 7)), rng.normal(scale=0.9, size=(30, 7))
    ids = [f"s{k}" for k in range(40)]
    assert fm.prdc(real, fake, k=5, real_patients=ids, fake_patients=[f"g{k}" for k in range(30)]) == fm.prdc(real, fake, k=5)
    assert fm.alpha_beta_authenticity(real, fake, patients=ids) == fm.alpha_beta_authenticity(real, fake)
    assert fm.same_patient(ids) is None and fm.same_patient(None) is None


def test_a_blurred_copy_is_unauthentic_once_the_patient_s_own_rescan_is_left_out():
    """The issue's case: a copy farther from its source than the patient's rescan is, but far nearer than
    any other patient. With the rescan as the neighbour (Alaa et al. on independent samples) it counts as
    authentic; leaving the patient out calls it a copy, and a new patient stays authentic."""
    rng = np.random.default_rng(12)
    real, patients = _rescanned(rng)
    copies = real[:5] + 0.2 * rng.normal(size=(5, 6))  # 4x the rescan distance from the source
    new = rng.normal(size=(5, 6)) + 4.0  # patients unlike any training patient
    fake = np.vstack([copies, new])
    blind = fm.alpha_beta_authenticity(real, fake)
    aware = fm.alpha_beta_authenticity(real, fake, patients=patients)
    assert blind["authentic"][:5] == [True] * 5  # the failure issue 63 reports
    assert aware["authentic"] == [False] * 5 + [True] * 5
    assert [patients[i] for i in aware["nearest_real"][:5]] == ["p0", "p1", "p2", "p3", "p4"]  # a scan of the source
    # the nearest real neighbour is of another patient: never the rescan
    support = fm.real_set(real, patients=patients)
    d = fm.distances(real, real)
    for i in range(len(real)):
        others = [j for j in range(len(real)) if patients[j] != patients[i]]
        assert support.nn[i] == d[i, others].min()
    with pytest.raises(ValueError, match="one patient only"):
        fm.real_set(real[[0, 15]], patients=["p0", "p0"])


def _two_modes(rng, n, d=6):
    """n points, half around -3 and half around +3 on the first axis (two kinds of patient)."""
    x = rng.normal(size=(n, d))
    x[: n // 2, 0] -= 3.0
    x[n // 2:, 0] += 3.0
    return x


def _known_cases(rng, n=40, d=6):
    """Samples whose β-recall is known in order: the real distribution again (full coverage), one of its two
    modes only (half the modes dropped), one sample repeated (collapse)."""
    half = rng.normal(size=(n, d))
    half[:, 0] -= 3.0
    return {"full": _two_modes(rng, n, d), "half": half, "collapse": np.repeat(half[:1], n, axis=0)}


def test_beta_recall_follows_the_reference_code_on_the_known_cases():
    """Full coverage, half the modes dropped, collapse onto one sample: equal to the authors' steps, in the
    known order, and in the reference's range [-1/(n_steps - 1), 1]."""
    rng = np.random.default_rng(14)
    real = _two_modes(rng, 60)
    got = {}
    for name, fake in _known_cases(rng).items():
        ours = fm.alpha_beta_authenticity(real, fake)
        assert ours["beta_recall"] == pytest.approx(_reference_alpha(real, fake)[1], abs=1e-12), name
        got[name] = ours["beta_recall"]
    assert got["full"] > got["half"] > got["collapse"] and got["full"] > 0.3, got
    assert all(-1 / 29 - 1e-12 <= v <= 1 for v in got.values()), got


def test_beta_recall_sees_coverage_once_the_rescan_is_left_out():
    """With two scans per patient, a real scan's nearest real neighbour is its rescan, almost no real scan is
    nearer a sample than that, and β-recall collapses to the reference code's floor -1/(n_steps - 1)
    (-0.0345 at 30 steps: a curve of zeros; issue 63's demo value), whatever the samples. Leaving the
    patient out, it measures coverage again, in the known cases' order; PRDC's coverage follows."""
    rng = np.random.default_rng(13)
    base = _two_modes(rng, 30)
    real = np.vstack([base, base + 0.02 * rng.normal(size=base.shape)])
    patients = [f"p{k}" for k in range(30)] * 2
    cases = _known_cases(rng)
    blind = fm.alpha_beta_authenticity(real, cases["full"])["beta_recall"]
    assert blind == pytest.approx(-1 / 29, abs=0.03)  # the reported collapse
    aware = {name: fm.alpha_beta_authenticity(real, f, patients=patients)["beta_recall"] for name, f in cases.items()}
    assert aware["full"] > aware["half"] > aware["collapse"] and aware["full"] > 0.3, aware
    assert all(-1 / 29 - 1e-12 <= v <= 1 for v in aware.values()), aware
    assert (fm.prdc(real, cases["full"], k=3, real_patients=patients)["coverage"]
            > fm.prdc(real, cases["full"], k=3)["coverage"])
    with pytest.raises(ValueError, match="other patients"):
        fm.prdc(real[:4], cases["full"][:5], k=3, real_patients=["a", "a", "b", "b"])


def test_authenticity_flags_copies_of_real_samples_and_keeps_new_ones():
    rng = np.random.default_rng(3)
    real = rng.normal(size=(50, 5))
    copies = real[:10] + 1e-4 * rng.normal(size=(10, 5))
    new = rng.normal(size=(10, 5)) + 6.0  # far from every real sample
    out = fm.alpha_beta_authenticity(real, np.vstack([copies, new]))
    assert out["authentic"] == [False] * 10 + [True] * 10
    assert out["nearest_real"][:10] == list(range(10))
    assert out["authenticity"] == pytest.approx(0.5)


def _reference_zu(pn, qm, t):
    """Meehan et al.'s Zu, re-typed (sklearn neighbours, scipy's Mann-Whitney U, their Z-score)."""
    from scipy.stats import mannwhitneyu
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=1).fit(t)
    lq, _ = nn.kneighbors(qm)
    lp, _ = nn.kneighbors(pn)
    u, _ = mannwhitneyu(lq[:, 0], lp[:, 0], alternative="less")
    m, n = len(qm), len(pn)
    return (u - (n * m / 2 - 0.5)) / np.sqrt(n * m * (n + m + 1) / 12)


def test_c_t_detects_copying_and_not_a_fresh_sample():
    rng = np.random.default_rng(4)
    train, test = rng.normal(size=(120, 10)), rng.normal(size=(60, 10))
    fresh = rng.normal(size=(60, 10))
    copies = train[rng.choice(120, 60, replace=False)] + 0.05 * rng.normal(size=(60, 10))
    one_cell = fm.c_t(train, test, copies, n_cells=1)
    near = lambda x: np.sqrt(fm.squared_distances(x, train).min(1))  # noqa: E731
    assert one_cell.c_t == pytest.approx(_reference_zu(test, copies, train), rel=1e-12)
    assert fm.mann_whitney_z(near(copies), near(test)) == pytest.approx(one_cell.c_t)
    assert fm.c_t(train, test, copies, n_cells=3).c_t < -5
    assert abs(fm.c_t(train, test, fresh, n_cells=3).c_t) < 3
    mixed = np.vstack([fresh[:57], copies[:3]])  # 5 % copies: the statistic moves towards copying
    assert fm.c_t(train, test, mixed, n_cells=1).c_t < fm.c_t(train, test, fresh, n_cells=1).c_t
    r = fm.c_t(train, test, copies, n_cells=3, seed=1)
    assert r.n_cells == 3 and sum(c["n_training"] for c in r.cells) == 120
    assert fm.c_t(train, test, copies, n_cells=3, seed=1).c_t == r.c_t  # seeded: the same partition


def test_kmeans_is_deterministic_and_finds_separated_clusters():
    rng = np.random.default_rng(5)
    x = np.vstack([rng.normal(size=(30, 3)), rng.normal(size=(30, 3)) + 20])
    c = fm.kmeans(x, 2, seed=0)
    assert np.array_equal(c, fm.kmeans(x, 2, seed=0))
    assert sorted(np.round(c[:, 0] / 20).astype(int).tolist()) == [0, 1]


def _embedded(rng, n, d, patients=None, loc=0.0):
    from synthaudit.fidelity.audit import Embedded

    x = rng.normal(loc=loc, size=(n, d))
    ids = [f"v{k}" for k in range(n)]
    return Embedded(ids, x, x, patients or ids)


SETTINGS = {"prdc_k": 3, "alpha_steps": 30, "frd_min_sd": 1e-6, "bootstrap": {"n": 40, "seed": 0, "level": 0.9},
            "c_t": {"cells": 2, "min_generated": 2, "pca_components": 8, "seed": 0, "copy_z": 2.0,
                    "power_copy_share": 0.2, "min_power": 0.8}}


def test_audit_reports_each_measure_with_a_ci_and_the_held_out_floor_and_sees_copies():
    from synthaudit.fidelity.audit import Embedded, audit, per_volume, summary_lines
    from synthaudit.fidelity.metrics import metrics_entry

    rng = np.random.default_rng(6)
    train = _embedded(rng, 40, 6, [f"p{k // 2}" for k in range(40)])  # 20 patients, 2 scans each
    heldout = _embedded(rng, 20, 6)
    fresh = _embedded(rng, 20, 6)
    x = train.x[:20] + 1e-3 * rng.normal(size=(20, 6))
    copies = Embedded([f"c{k}" for k in range(20)], x, x, [f"c{k}" for k in range(20)])
    good = audit(train, heldout, fresh, SETTINGS, "test", "none")
    bad = audit(train, heldout, copies, SETTINGS, "test", "none")
    for key in ("frechet_distance", "precision", "recall", "density", "coverage", "alpha_precision", "beta_recall",
                "authenticity"):
        v = good["synthetic"][key]
        assert v["ci"][0] <= v["value"] <= v["ci"][1], key
        assert key in good["floor"]
    assert good["floor"] == bad["floor"]  # the floor is the held-out scans', whatever the samples
    assert bad["synthetic"]["authenticity"]["value"] == 0.0 and good["synthetic"]["authenticity"]["value"] > 0.5
    assert bad["c_t"]["value"] < -2 and bad["c_t"]["copying_cells"]
    assert good["c_t"]["value"] > -2
    rows = per_volume(train, copies, SETTINGS)
    assert [r["nearest_training_id"] for r in rows] == train.ids[:20] and not any(r["authentic"] for r in rows)
    assert rows[0]["nearest_training_patient"] == "p0"
    lines = summary_lines(bad)
    assert any("authenticity: 0 [" in line for line in lines) and any("copying (below -2)" in line for line in lines)
    entry = metrics_entry(bad)
    assert entry["authenticity"]["value"] == 0.0 and entry["c_t_copying_cells"] >= 1
    assert entry["frechet_distance"]["floor"] == pytest.approx(good["floor"]["frechet_distance"]["value"], rel=1e-5)


def test_pooled_takes_channel_means_over_the_grid_cells():
    from synthaudit.fidelity.audit import pooled

    x = np.arange(2 * 3 * 8, dtype=float).reshape(2, 24)  # 3 channels x 2x2x2 cells, channel-major
    out, how = pooled(x, {"grid_used": [2, 2, 2]})
    assert np.allclose(out, x.reshape(2, 3, 8).mean(axis=2)) and "2x2x2" in how
    assert pooled(x, {"grid_used": [1, 1, 1]})[0] is not None
    with pytest.raises(ValueError, match="not 27 cells"):
        pooled(x, {"grid_used": [3, 3, 3]})


def test_audit_reports_frd_on_radiomic_features_with_its_floor():
    """FRD beside the embeddings' measures where the features are given (fidelity.frd): the samples'
    FRD and the held-out floor, each with a CI; a set that differs in its radiomics scores higher."""
    from dataclasses import replace

    from synthaudit.fidelity.audit import audit, summary_lines
    from synthaudit.fidelity.metrics import metrics_entry
    from synthaudit.fidelity.radiomics import frd

    rng = np.random.default_rng(7)
    train = _embedded(rng, 30, 5, [f"p{k // 2}" for k in range(30)])
    heldout, near, far = _embedded(rng, 12, 5), _embedded(rng, 12, 5), _embedded(rng, 12, 5)
    feats = {name: rng.normal(size=(n, 40)) for name, n in (("train", 30), ("heldout", 12), ("near", 12))}
    feats["far"] = rng.normal(loc=1.0, scale=2.0, size=(12, 40))  # other intensities and textures
    feats["train"][:, 3] = 5.0  # a constant feature: dropped (its z-score is inf), as frd-score drops it
    train, heldout = replace(train, radiomics=feats["train"]), replace(heldout, radiomics=feats["heldout"])
    good = audit(train, heldout, replace(near, radiomics=feats["near"]), SETTINGS, "test", "none")
    bad = audit(train, heldout, replace(far, radiomics=feats["far"]), SETTINGS, "test", "none")
    v = good["synthetic"]["frd"]
    assert v["value"] == pytest.approx(frd(feats["train"], feats["near"]), rel=1e-12)
    assert v["ci"][0] <= v["value"] <= v["ci"][1] and v["n_replicates"] == SETTINGS["bootstrap"]["n"]
    assert good["floor"]["frd"]["value"] == pytest.approx(frd(feats["train"], feats["heldout"]), rel=1e-12)
    assert bad["synthetic"]["frd"]["value"] > good["synthetic"]["frd"]["ci"][1] + 1
    assert good["frd"]["features"] == 40 and "frd-score" in good["frd"]["definition"]
    assert any(line.strip().startswith("FRD (radiomics):") for line in summary_lines(bad))
    assert metrics_entry(bad)["frd"]["floor"] == pytest.approx(good["floor"]["frd"]["value"], rel=1e-5)
    # without features (fidelity.frd off) no FRD, and the embeddings' numbers are unchanged
    plain = audit(replace(train, radiomics=None), replace(heldout, radiomics=None), near, SETTINGS, "test", "none")
    assert "frd" not in plain["synthetic"] and plain["frd"] is None
    assert plain["synthetic"]["frechet_distance"] == good["synthetic"]["frechet_distance"]


def test_robust_frd_leaves_out_features_constant_over_the_training_scans_and_says_how_much_one_rules():
    """Issue 63: a feature constant up to rounding over the training scans (SD ~1e-14, a wavelet band's
    median over an empty background) rules FRD v1 after z-scoring; the robust FRD leaves it out and
    reports the share of its own largest feature. Without such a feature the two are the same number."""
    from synthaudit.fidelity.audit import audit, summary_lines
    from synthaudit.fidelity.radiomics import frd, robust_frd

    rng = np.random.default_rng(15)
    ref, other = rng.normal(size=(30, 20)), rng.normal(size=(25, 20)) + 0.1
    names = [f"f{k}" for k in range(20)]
    plain = robust_frd(ref, other, 1e-6, names)
    assert plain["value"] == frd(ref, other) and plain["features"] == 20 and plain["left_out"] == 0
    assert 0 < plain["largest_share"] < 0.5 and plain["largest_feature"] in names
    ref[:, 3] = 1e-14 * rng.normal(size=30)  # the background's rounding
    other[:, 3] = 1e-12 * rng.normal(size=25)
    v1, robust = frd(ref, other), robust_frd(ref, other, 1e-6, names)
    assert v1 > robust["value"] + 5  # one feature at ~100 SDs is nearly all of v1 (log scale: e^5 = 150x)
    assert robust["features"] == 19 and robust["left_out"] == 1 and robust["largest_feature"] != "f3"
    assert robust["value"] == frd(np.delete(ref, 3, axis=1), np.delete(other, 3, axis=1))
    with pytest.raises(ValueError, match="no feature"):
        robust_frd(ref, other, 1e3)
    # in the audit: beside v1, with its CI, floor and the verdict's line
    train = _embedded(rng, 30, 5, [f"p{k // 2}" for k in range(30)])
    heldout, near = _embedded(rng, 12, 5), _embedded(rng, 25, 5)
    from dataclasses import replace

    held = rng.normal(size=(12, 20))
    held[:, 3] = 1e-14 * rng.normal(size=12)
    f = audit(replace(train, radiomics=ref, radiomics_names=names), replace(heldout, radiomics=held),
              replace(near, radiomics=other), SETTINGS, "test", "none")
    r = f["synthetic"]["frd_robust"]
    assert r["value"] == pytest.approx(robust["value"]) and r["ci"][0] <= r["value"] <= r["ci"][1]
    assert f["synthetic"]["frd"]["value"] > r["value"] + 5 and "frd_robust" in f["floor"]
    assert f["frd"]["robust"]["synthetic"]["left_out"] == 1 and f["frd"]["robust"]["min_sd"] == 1e-6
    lines = [line.strip() for line in summary_lines(f)]
    assert any(line.startswith("FRD without features constant over the training scans (SD < 1e-06):") for line in lines)
    assert any(line.startswith("19 features kept, 1 left out; the largest kept feature gives") for line in lines)


def test_audit_reports_frd_within_each_label_class_with_its_floor():
    """FRD per label class (fidelity.frd_classes): a class the samples render badly scores above its
    floor while the whole-volume FRD and every other number stay as they were; a class no sample holds
    is not computed (and counted); the verdict and the tracked metrics carry each class."""
    from dataclasses import replace

    from synthaudit.fidelity.audit import audit, summary_lines
    from synthaudit.fidelity.metrics import metrics_entry

    rng = np.random.default_rng(11)
    train = _embedded(rng, 30, 5, [f"p{k // 2}" for k in range(30)])
    heldout, near = _embedded(rng, 12, 5), _embedded(rng, 12, 5)
    whole = {name: rng.normal(size=(n, 40)) for name, n in (("train", 30), ("heldout", 12), ("near", 12))}
    per = {name: rng.normal(size=(n, 3, 40)) for name, n in (("train", 30), ("heldout", 12), ("near", 12))}
    per["near"][:, 1] = rng.normal(loc=2.0, scale=2.0, size=(12, 40))  # the lesion rendered badly
    per["near"][:, 2] = np.nan  # no sample holds the third class
    classes = ["organ", "lesion", "rare"]
    base = audit(replace(train, radiomics=whole["train"]), replace(heldout, radiomics=whole["heldout"]),
                 replace(near, radiomics=whole["near"]), SETTINGS, "test", "none")
    f = audit(replace(train, radiomics=whole["train"], radiomics_classes=per["train"], class_names=classes),
              replace(heldout, radiomics=whole["heldout"], radiomics_classes=per["heldout"], class_names=classes),
              replace(near, radiomics=whole["near"], radiomics_classes=per["near"], class_names=classes),
              SETTINGS, "test", "none")
    organ, lesion = f["synthetic"]["frd_organ"], f["synthetic"]["frd_lesion"]
    assert organ["ci"][0] <= organ["value"] <= organ["ci"][1] and organ["n_replicates"] == SETTINGS["bootstrap"]["n"]
    assert lesion["value"] > f["floor"]["frd_lesion"]["ci"][1] + 1 and lesion["value"] > organ["ci"][1] + 1
    assert "frd_rare" not in f["synthetic"] and "frd_rare" in f["floor"]
    assert f["frd"]["classes"]["rare"] == {"training": 30, "held-out": 12, "synthetic": 0}
    for key in base["synthetic"]:
        assert f["synthetic"][key] == base["synthetic"][key] and f["floor"][key] == base["floor"][key]
    lines = [line.strip() for line in summary_lines(f)]
    assert any(line.startswith("FRD within lesion:") for line in lines)
    assert "FRD within rare: not computed (held by 0 synthetic and 12 held-out volume(s); FRD needs 2 in each set)" in lines
    assert metrics_entry(f)["frd_lesion"]["floor"] == pytest.approx(f["floor"]["frd_lesion"]["value"], rel=1e-5)


def test_c_t_power_is_the_closed_form_and_follows_the_measured_table():
    """C_T's power at the audit's sizes (issue 63): the expectation of docs/fidelity.md's closed form, SD
    1 / sqrt(cells); docs/fidelity.md's measured table (20 replicates on real anatomy) for comparison: 300 +
    300 at 20 % copies 90 % below -2, 1,000 + 1,000 at 10 % 75 %, 20 + 20 at 20 % none; the issue's audit
    (50 samples, 20 held-out scans) cannot see 20 % copies."""
    from math import sqrt

    p = fm.c_t_power(300, 300, 3, 0.2, 2.0)
    assert p["expected_c_t"] == pytest.approx(-0.2 * sqrt(3 * 300 * 300 / (3 * 603)))  # -2.44, as the table's
    assert 0.7 < p["probability"] < 0.95
    assert 0.5 < fm.c_t_power(1000, 1000, 3, 0.1, 2.0)["probability"] < 0.9
    assert fm.c_t_power(20, 20, 3, 0.2, 2.0)["probability"] < 0.01
    assert fm.c_t_power(20, 50, 3, 0.2, 2.0)["probability"] < 0.05
    assert fm.c_t_power(6000, 6000, 3, 0.05, 2.0)["probability"] > 0.85  # measured 95 %: the form is conservative
    assert fm.c_t_power(20, 50, 3, 0.0, 2.0)["probability"] == pytest.approx(0.5 * (1 + __import__("math").erf(-2 * sqrt(3) / sqrt(2))))


def test_the_verdict_says_c_t_cannot_tell_where_its_power_is_below_the_stated_one():
    from synthaudit.fidelity.audit import audit, summary_lines

    rng = np.random.default_rng(16)
    train = _embedded(rng, 40, 6, [f"p{k // 2}" for k in range(40)])
    f = audit(train, _embedded(rng, 20, 6), _embedded(rng, 20, 6), SETTINGS, "test", "none")
    c = f["c_t"]
    assert c["power"]["n_heldout"] == 20 and c["power"]["n_synthetic"] == 20 and c["power"]["probability"] < 0.8
    lines = [line.strip() for line in summary_lines(f)]
    c_line = next(line for line in lines if line.startswith("C_T (Meehan et al.)"))
    assert c_line.endswith("cannot tell at this size") or "copying (below" in c_line
    assert any(line.startswith("at 20 samples and 20 held-out scans, C_T detects 20% copying with probability")
               for line in lines)


def test_c_ts_cell_statistic_follows_the_closed_form_docs_fidelity_md_bounds_it_by():
    """docs/fidelity.md, "Where C_T stops": k exact copies among samples otherwise like the m held-out
    scans lower Z_U to -(k m / 2 - 0.5) / sqrt(m n (m + n + 1) / 12), n = m + k, i.e. -q sqrt(3mn /
    (m + n + 1)) with the continuity correction; so -2 needs a copy share above 2 / sqrt(3m)."""
    from synthaudit.fidelity.measures import mann_whitney_z

    for m, k in ((20, 1), (20, 5), (20, 7), (100, 5)):
        test = np.arange(m) + 1.0
        generated = np.concatenate([np.zeros(k), test])  # k copies, the rest exactly the held-out distances
        n = m + k
        expected = -(k * m / 2 - 0.5) / np.sqrt(m * n * (m + n + 1) / 12)
        assert mann_whitney_z(generated, test) == pytest.approx(expected, rel=1e-12)
        assert abs(expected) < (k / n) * np.sqrt(3 * m)  # the bound the doc states
    # the cohort's 20 held-out scans: 5 % copies stay far from -2; 10 copies among 30 samples do not reach
    # it, 11 among 31 do (the doc's "11 copies among 31 samples")
    held = np.arange(20) + 1.0
    assert mann_whitney_z(np.concatenate([np.zeros(1), held]), held) > -0.5
    assert mann_whitney_z(np.concatenate([np.zeros(10), held]), held) > -2
    assert mann_whitney_z(np.concatenate([np.zeros(11), held]), held) < -2


def test_the_robust_frd_floor_table_is_the_committed_measurement():
    """docs/fidelity.md's table of robust FRDs per SD floor is results/bench/frd_floor.json's
    (bench/fidelity/frd_floor.py), and the shipped floor is the one the page argues for: there the spiked
    NCCT set's robust FRD is no longer one feature's, and fewer than a tenth of TOF's features are left out."""
    import importlib.util
    import json

    import yaml
    from workflow_helpers import ROOT

    spec = importlib.util.spec_from_file_location("frd_floor", ROOT / "bench/fidelity/frd_floor.py")
    frd_floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frd_floor)
    assert frd_floor.doc(write=False) == 0, "run `.venv/bin/python bench/fidelity/frd_floor.py doc --write`"
    shipped = yaml.safe_load((ROOT / "params.yaml").read_text())["fidelity"]["frd_min_sd"]
    rows = {(r["dataset"], r["min_sd"]): r for r in json.loads((ROOT / frd_floor.RESULT).read_text())["rows"]}
    assert rows[("ncct_demo", shipped)]["largest_share"] < 0.1 <= rows[("ncct_demo", shipped / 10)]["largest_share"]
    tof = rows[("tof_demo", shipped)]
    assert tof["left_out"] < 0.1 * (tof["kept"] + tof["left_out"])
    page = " ".join((ROOT / "docs/fidelity.md").read_text().split())
    assert f"at 1e-4 its largest feature carries {100 * rows[('ncct_demo', shipped)]['largest_share']:.0f} %" in page


def test_the_copies_validation_table_is_the_committed_measurement():
    """docs/fidelity_validation.md's table is results/bench/fidelity_copies_validation.json's
    (bench/fidelity/copies_validation.py), with every set the bench draws, and the gate never passes the
    membership rule on a set of half or more copies (issue 63's validation)."""
    import importlib.util
    import json

    from workflow_helpers import ROOT

    spec = importlib.util.spec_from_file_location("copies_validation", ROOT / "bench/fidelity/copies_validation.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.doc(write=False) == 0, "run `.venv/bin/python bench/fidelity/copies_validation.py doc --write`"
    rows = json.loads((ROOT / bench.RESULT).read_text())["rows"]
    assert {(r["copy_share"], r["blur_vox"]) for r in rows if r["heads"] is None} == (
        {(0.0, 0.0)} | {(q, b) for q in bench.SHARES[1:] for b in bench.BLURS})
    for r in rows:
        assert 0.0 <= r["beta_recall"] <= 1.0 and 0.0 <= r["authenticity"] <= 1.0
        if r["copy_share"] >= 0.5:
            assert r["gate"]["membership_auc"] in ("fail", "inconclusive")
