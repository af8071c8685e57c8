"""Privacy-filter metrics against hand-computed answers and brute force; figures render."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from synthaudit.privacy import figures, summary
from synthaudit.privacy.metrics import agreement, retrieval_metrics, roc_auc, roc_curve, verification_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def brute_force_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


# ------------------------------------------------------------------------------ AUC

def test_auc_hand_computed():
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5, 0.5], [True, False, True, False]) == 0.5
    # positive 0.35 beats 0.1, loses to 0.4; positive 0.8 beats both: 3 of 4 pairs
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # one tie (1 vs 1) counts 1/2, one win: 1.5 of 2 pairs
    assert roc_auc([1.0, 1.0, 0.0], [1, 0, 0]) == pytest.approx(0.75)


def test_auc_matches_brute_force_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(5):
        scores = rng.integers(0, 6, 60).astype(float)  # many ties
        labels = rng.random(60) < 0.4
        assert roc_auc(scores, labels) == pytest.approx(brute_force_auc(scores, labels), abs=1e-12)


def test_roc_curve_endpoints_monotone_and_area():
    rng = np.random.default_rng(7)
    labels = rng.random(80) < 0.5
    scores = np.round(rng.normal(size=80) + labels, 1)  # rounding makes ties
    fpr, tpr, thr = roc_curve(scores, labels)
    assert (fpr[0], tpr[0]) == (0.0, 0.0)
    assert (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert thr[0] == np.inf
    assert np.all(np.diff(thr) < 0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert thr.size == np.unique(scores).size + 1
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(roc_auc(scores, labels), abs=1e-12)


def test_roc_curve_hand_computed():
    fpr, tpr, thr = roc_curve([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    np.testing.assert_allclose(thr, [np.inf, 0.8, 0.4, 0.35, 0.1])
    np.testing.assert_allclose(tpr, [0, 0.5, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 0.5, 1.0])


# --------------------------------------------------------------------- verification

SCORES = [0.9, 0.8, 0.6, 0.4, 0.3, 0.55, 0.2]
LABELS = [1, 1, 1, 1, 0, 0, 0]


def test_verification_threshold_metrics_hand_made():
    m = verification_metrics(SCORES, LABELS, threshold=0.5, n_bootstrap=0)
    # predicted positive: 0.9 0.8 0.6 (tp) and 0.55 (fp); 0.4 is a miss; tn = 0.3, 0.2
    assert m["accuracy"] == pytest.approx(5 / 7)
    assert m["recall"] == pytest.approx(3 / 4)
    assert m["specificity"] == pytest.approx(2 / 3)
    assert m["precision"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(0.75)
    assert m["auc"] == pytest.approx(11 / 12)  # 0.4 loses only to 0.55
    assert m["auc_ci"] is None
    assert (m["n_positive"], m["n_negative"], m["threshold"]) == (4, 3, 0.5)
    assert all(type(m[k]) is float for k in ("auc", "accuracy", "specificity", "recall", "precision", "f1"))


def test_verification_threshold_inclusive_and_undefined_precision():
    m = verification_metrics(SCORES, LABELS, threshold=0.55, n_bootstrap=0)
    assert m["specificity"] == pytest.approx(2 / 3)  # score == threshold counts as positive
    m = verification_metrics(SCORES, LABELS, threshold=0.95, n_bootstrap=0)
    assert m["precision"] is None and m["f1"] is None
    assert m["recall"] == 0.0 and m["specificity"] == 1.0
    assert m["accuracy"] == pytest.approx(3 / 7)


def test_verification_bootstrap_ci_contains_auc_and_is_deterministic():
    rng = np.random.default_rng(0)
    labels = rng.random(120) < 0.5
    scores = rng.normal(size=120) + 1.2 * labels
    a = verification_metrics(scores, labels, n_bootstrap=300, seed=11)
    b = verification_metrics(scores, labels, n_bootstrap=300, seed=11)
    c = verification_metrics(scores, labels, n_bootstrap=300, seed=12)
    low, high = a["auc_ci"]
    assert low < a["auc"] < high
    assert 0.0 <= low and high <= 1.0
    assert a["auc_ci"] == b["auc_ci"]
    assert c["auc_ci"] != a["auc_ci"]
    assert a["n_bootstrap"] == 300 and a["n_bootstrap_skipped"] == 0
    narrow = verification_metrics(scores, labels, n_bootstrap=300, seed=11, level=0.5)["auc_ci"]
    assert low <= narrow[0] <= narrow[1] <= high


def test_verification_bootstrap_skips_single_class_resamples():
    # one positive of four: P(resample without it) = (3/4)^4, so many are redrawn
    m = verification_metrics([0.9, 0.2, 0.3, 0.1], [1, 0, 0, 0], n_bootstrap=200, seed=0)
    assert m["n_bootstrap_skipped"] > 0
    assert m["auc_ci"] == [1.0, 1.0]  # every valid resample keeps the positive on top


# ------------------------------------------------------------------------- retrieval

def test_retrieval_hand_made_two_patients():
    gallery = ["A", "A", "B", "B"]
    distances = [[0.1, 0.5, 0.3, 0.9],  # A: ranks A B A B -> P@1 1, R-prec 1/2, AP@R (1 + 0) / 2
                 [0.6, 0.8, 0.2, 0.1]]  # B: ranks B B A A -> all 1
    m = retrieval_metrics(distances, ["A", "B"], gallery)
    assert m["precision_at_1"] == 1.0
    assert m["r_precision"] == pytest.approx(0.75)
    assert m["map_at_r"] == pytest.approx(0.75)
    assert (m["n_queries"], m["n_skipped"]) == (2, 0)

    one = retrieval_metrics(distances[:1], ["A"], gallery)
    assert one["precision_at_1"] == 1.0 and one["map_at_r"] == pytest.approx(0.5)


def test_retrieval_map_at_r_rewards_order_unlike_r_precision():
    # relevant item second of R = 2: R-precision 1/2, but AP@R = (0 + 1/2 * 1) / 2 = 1/4
    m = retrieval_metrics([[0.1, 0.2, 0.9]], [7], [3, 7, 7])
    assert m["precision_at_1"] == 0.0
    assert m["r_precision"] == pytest.approx(0.5)
    assert m["map_at_r"] == pytest.approx(0.25)


def test_retrieval_ties_are_broken_by_gallery_index():
    assert retrieval_metrics([[0.5, 0.5]], ["A"], ["B", "A"])["precision_at_1"] == 0.0
    assert retrieval_metrics([[0.5, 0.5]], ["A"], ["A", "B"])["precision_at_1"] == 1.0


def test_retrieval_exclude_self_and_skip_queries_without_match():
    labels = ["p1", "p1", "p2", "p3"]  # p3 has a single scan: nothing to retrieve once self is excluded
    x = np.array([0.0, 0.2, 1.0, 5.0])
    d = np.abs(x[:, None] - x[None, :])
    without = retrieval_metrics(d, labels, labels)  # self at distance 0 is always found
    assert without["precision_at_1"] == 1.0 and without["n_queries"] == 4
    m = retrieval_metrics(d, labels, labels, exclude=np.eye(4, dtype=bool))
    # p1 scans find each other first; p2's only relevant item is itself -> skipped, p3 likewise
    assert (m["n_queries"], m["n_skipped"]) == (2, 2)
    assert m["precision_at_1"] == 1.0 and m["map_at_r"] == 1.0
    # a query label absent from the gallery is skipped too
    m = retrieval_metrics(d[:, :2], ["p1", "p1", "p9", "p9"], ["p1", "p1"])
    assert (m["n_queries"], m["n_skipped"]) == (2, 2)


# ------------------------------------------------------------------------- agreement

FLAGS = [[1, 1, 0, 0],
         [1, 0, 0, 1],
         [1, 0, 0, 0]]
ATTRIBUTIONS = [["p1", "p2", "p3", "p4"],
                ["p1", "p2", "p5", "p6"],
                ["p1", "p7", "p8", "p4"]]


def test_agreement_three_filters_hand_made():
    a = agreement(np.array(FLAGS, dtype=bool), ATTRIBUTIONS)
    assert (a["n_filters"], a["n_volumes"]) == (3, 4)
    assert a["decision_agreement"] == [3, 2, 3, 2]
    assert a["attribution_agreement"] == [3, 2, 1, 2]
    assert a["decision_histogram"] == {2: 2, 3: 2}
    assert a["attribution_histogram"] == {1: 1, 2: 2, 3: 1}
    assert a["unanimous_fraction"] == 0.5
    assert (a["unanimous_flagged"], a["unanimous_accepted"]) == (1, 1)
    assert a["attribution_unanimous_fraction"] == 0.25
    assert a["attribution_none_agree"] == 1
    assert a["flag_rate_per_filter"] == [0.5, 0.5, 0.25]
    assert a["flag_rate_mean"] == pytest.approx(5 / 12)
    json.dumps(a)  # plain Python types only


def test_agreement_even_and_single_filter():
    a = agreement([[True, False, True], [False, False, True]], [["a", "b", "c"], ["d", "b", "c"]])
    assert a["decision_histogram"] == {1: 1, 2: 2}
    assert a["attribution_histogram"] == {1: 1, 2: 2}
    one = agreement([[True, False]], [["a", "b"]])
    assert one["decision_histogram"] == {1: 2}
    assert one["attribution_none_agree"] == 0 and one["unanimous_fraction"] == 1.0


# ------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("call, match", [
    (lambda: roc_auc([], []), "empty"),
    (lambda: roc_auc([0.1, 0.2], [1, 0, 1]), "differ in length"),
    (lambda: roc_auc([0.1, math.nan], [1, 0]), "NaN"),
    (lambda: roc_auc([0.1, 0.2], [1, 1]), "both classes"),
    (lambda: roc_auc([0.1, 0.2], [1, 2]), "bool or 0/1"),
    (lambda: roc_curve([0.1, 0.2], [0, 0]), "both classes"),
    (lambda: verification_metrics([0.1, 0.9], [0, 1], n_bootstrap=-1), "n_bootstrap"),
    (lambda: verification_metrics([0.1, 0.9], [0, 1], level=1.5), "level"),
    (lambda: retrieval_metrics(np.zeros((2, 3)), ["a", "b"], ["a", "b"]), "gallery labels"),
    (lambda: retrieval_metrics(np.zeros((2, 2)), ["a"], ["a", "b"]), "query labels"),
    (lambda: retrieval_metrics(np.zeros((0, 2)), [], ["a", "b"]), "empty"),
    (lambda: retrieval_metrics([[math.nan, 1.0]], ["a"], ["a", "b"]), "NaN"),
    (lambda: retrieval_metrics([[0.0, 1.0]], ["a"], ["a", "b"], exclude=np.ones((2, 2), bool)), "exclude"),
    (lambda: retrieval_metrics([[0.0, 1.0]], ["c"], ["a", "b"]), "no query has a relevant"),
    (lambda: agreement(np.ones((2, 3), bool), [["a"] * 3]), "shape"),
    (lambda: agreement(np.ones((0, 3), bool), np.empty((0, 3), object)), "at least one filter"),
    (lambda: agreement(np.ones((2, 0), bool), np.empty((2, 0), object)), "at least one filter"),
])
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -------------------------------------------------------------------------- figures

def assert_png(path):
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)
    assert not list(path.parent.glob(".tmp-*"))  # written atomically, nothing left behind


def test_roc_figure(tmp_path):
    fpr, tpr, _ = roc_curve([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    path = tmp_path / "roc.png"
    figures.roc_figure(path, {"image": (fpr, tpr, 0.75), "latent": (np.array([0, 1.0]), np.array([0, 1.0]), 0.5)},
                       "verification")
    assert_png(path)


def test_consistency_figure_accepts_json_round_trip(tmp_path):
    image = agreement(np.array(FLAGS, bool), ATTRIBUTIONS)
    latent = json.loads(json.dumps(agreement(np.array(FLAGS, bool)[::-1], ATTRIBUTIONS)))  # str keys
    path = tmp_path / "consistency.png"
    figures.consistency_figure(path, {"image": image, "latent": latent}, "consistency of 3 filters")
    assert_png(path)


def test_tsne_figure_small_and_pca_fallback(tmp_path):
    rng = np.random.default_rng(0)
    training = rng.normal(size=(8, 5))
    synthetic = training[:4] + 0.01 * rng.normal(size=(4, 5))
    learned = np.array([True] * 4 + [False] * 4)
    path = tmp_path / "tsne.png"
    figures.tsne_figure(path, training, synthetic, learned, "t-SNE", seed=0, perplexity=3.0)
    assert_png(path)
    path = tmp_path / "pca.png"
    figures.tsne_figure(path, training[:2], synthetic[:1], learned[:2], "few points")
    assert_png(path)
    with pytest.raises(ValueError, match="learned"):
        figures.tsne_figure(tmp_path / "bad.png", training, synthetic, learned[:3], "bad")


def test_flag_score_figure_histograms_and_strips(tmp_path):
    rng = np.random.default_rng(1)
    scores = {"held-out real": rng.normal(0.3, 0.1, 40), "training (other scans)": rng.normal(0.5, 0.1, 30),
              "synthetic": np.array([0.35, 0.9, 0.95])}  # < 5 values: strip
    tau = float(np.percentile(scores["held-out real"], 95))
    path = tmp_path / "scores.png"
    figures.flag_score_figure(path, scores, tau, "best match per volume", "best match score")
    assert_png(path)


# ------------------------------------------------------------- gathered evaluations


def _evaluation(space, seconds, roc=True, near_duplicates=None):
    """A hand-made evaluation.json of one space with one synthetic set (privacy_evaluate's keys)."""
    consistency = {"unanimous_fraction": 0.75, "unanimous_flagged": 1, "unanimous_accepted": 2,
                   "attribution_unanimous_fraction": 0.5}
    syn = {"n": 4, "n_flagged": 1, "flag_rate": 0.25, "consistency": consistency,
           "recall": {"learned_fraction": 0.6, "recall": 0.4}}
    if near_duplicates:
        syn["near_duplicates"] = near_duplicates
    return {
        "training_set": "ncct", "space": space, "n_filters": 3, "tau": 0.8 if space == "image" else 0.7,
        "seconds_per_epoch": {"filter0": seconds, "filter1": seconds + 2.0, "retrieval": 100.0},
        "verification": {"auc": 0.9, "auc_ci": [0.8, 0.95], "accuracy": 0.85, "f1": 0.5,
                         "auc_by_head": {"pred": 0.9}, "bootstrap_unit": "patient"},
        **({"retrieval": {"map_at_r": 0.5, "r_precision": 0.6, "precision_at_1": 0.7}} if space == "latent" else {}),
        "verification_balanced": {"auc": 0.91, "accuracy": 0.8, "specificity": 0.7, "recall": 0.9,
                                  "precision": 0.75, "f1": 0.82},
        "specificity": {"specificity": 0.95},
        "sensitivity": {"heldout_patients": {"flag_rate_overall": 0.3, "flag_rate_same_patient_max": 0.6,
                                             "flag_rate_same_patient_mean": 0.4},
                        "training_patients": None},
        "synthetic": {"gen": syn},
        "roc": {"fpr": [0.0, 1.0], "tpr": [0.0, 1.0], "auc": 0.5} if roc else {},
    }


def test_gathered_metrics_rows_and_figure_inputs():
    image = _evaluation("image", 4.0, near_duplicates={"replica_flag_rate": 1.0, "nonreplica_flag_rate": 0.1})
    latent = _evaluation("latent", 1.0, roc=False)
    metrics, rows = summary.gather([image, latent])
    entry = metrics["ncct"]["image"]
    assert entry["seconds_per_epoch"] == 5.0  # mean over the filters only, not the retrieval network
    assert metrics["ncct"]["latent"]["seconds_per_epoch"] == 2.0
    assert metrics["ncct"]["epoch_time_ratio_image_to_latent"] == 2.5
    assert entry["verification_auc"] == 0.9 and entry["verification_f1_all_pairs"] == 0.5
    assert entry["verification_precision_balanced"] == 0.75 and entry["retrieval_map_at_r"] is None
    assert entry["verification_auc_ci_unit"] == "patient"
    # Packhäuser et al.'s three retrieval figures, R-Precision included (issue 32)
    lat = metrics["ncct"]["latent"]
    assert (lat["retrieval_map_at_r"], lat["retrieval_r_precision"], lat["retrieval_precision_at_1"]) == (0.5, 0.6, 0.7)
    assert entry["synthetic"]["gen"]["near_duplicates"] == {"replica_flag_rate": 1.0, "nonreplica_flag_rate": 0.1}
    assert metrics["ncct"]["latent"]["synthetic"]["gen"]["near_duplicates"] is None
    assert json.loads(json.dumps(metrics)) == metrics

    assert [r["space"] for r in rows] == ["image", "latent"]
    assert all(list(r) == summary.SUMMARY_COLUMNS for r in rows)
    first = rows[0]
    assert (first["n"], first["flagged"], first["tau"], first["specificity"]) == (4, 1, 0.8, 0.95)
    assert (first["sensitivity_overall"], first["sensitivity_same_patient_max"]) == (0.3, 0.6)
    assert (first["replica_flag_rate"], rows[1]["replica_flag_rate"]) == (1.0, None)
    assert (first["learned_fraction"], first["recall"]) == (0.6, 0.4)
    assert "seconds_per_epoch" not in first  # times: runtime.json, not the table (the same bytes on every run)
    assert summary.headline(metrics) == {"ncct": {
        "image": {"verification_auc": 0.9, "specificity": 0.95, "seconds_per_epoch": 5.0},
        "latent": {"verification_auc": 0.9, "specificity": 0.95, "seconds_per_epoch": 2.0}}}

    spaces = summary.by_training_set([image, latent])["ncct"]
    curves = summary.roc_curves(spaces)
    assert list(curves) == ["image space"] and curves["image space"][2] == 0.5  # latent has no ROC
    assert list(summary.consistency(spaces)) == ["image: gen", "latent: gen"]


def test_one_space_has_no_epoch_time_ratio_and_no_evaluations_give_empty_outputs():
    metrics, rows = summary.gather([_evaluation("latent", 1.0)])
    assert list(metrics["ncct"]) == ["latent"] and len(rows) == 1
    assert summary.gather([]) == ({}, [])


def test_roc_figure_without_curves_says_why(tmp_path):
    # held-out patients with one scan each (a set init accepts): no same-patient pair, no ROC;
    # the figure says so instead of stopping privacy_metrics (issue 29: the real-anatomy audit)
    from synthaudit.privacy import figures

    figures.roc_figure(tmp_path / "roc.png", {}, "audit: patient verification", note="no held-out patient with two scans")
    assert (tmp_path / "roc.png").stat().st_size > 5_000


def test_weighted_auc_is_the_auc_of_the_pairs_repeated_by_their_weights():
    from synthaudit.privacy.metrics import _weighted_auc

    rng = np.random.default_rng(4)
    s = rng.integers(0, 6, 40).astype(float)  # many ties
    y = rng.random(40) < 0.4
    uniq, codes = np.unique(s, return_inverse=True)
    assert _weighted_auc(codes, len(uniq), y, np.ones(40)) == pytest.approx(roc_auc(s, y), abs=1e-12)
    w = rng.integers(0, 4, 40)
    w[np.flatnonzero(y)[0]] = 1
    w[np.flatnonzero(~y)[0]] = 1
    rep = np.repeat(np.arange(40), w)
    assert _weighted_auc(codes, len(uniq), y, w.astype(float)) == pytest.approx(roc_auc(s[rep], y[rep]), abs=1e-12)


def _clustered_pairs(n_patients=6, scans=3, seed=0):
    """Every pair of held-out scans, with a strong per-patient effect on the scores: pairs of one
    patient share it, as a filter's scores for one patient's scans do."""
    rng = np.random.default_rng(seed)
    patients = np.repeat([f"p{i}" for i in range(n_patients)], scans)
    effect = {p: rng.normal(0, 1.5) for p in sorted(set(patients))}  # sorted: not hash-seed order
    a, b = np.triu_indices(len(patients), 1)
    same = patients[a] == patients[b]
    scores = np.where(same, 1.0, 0.0) + np.array([effect[patients[i]] + effect[patients[j]] for i, j in zip(a, b)]) \
        + rng.normal(0, 0.3, len(a))
    return scores, same, (patients[a], patients[b])


def test_patient_bootstrap_is_wider_than_the_pair_bootstrap_when_pairs_share_patients():
    scores, same, pp = _clustered_pairs()
    pair = verification_metrics(scores, same, n_bootstrap=2000, seed=1, unit="pair")
    patient = verification_metrics(scores, same, n_bootstrap=2000, seed=1, unit="patient", pair_patients=pp)
    assert pair["auc"] == patient["auc"]
    width = lambda r: r["auc_ci"][1] - r["auc_ci"][0]  # noqa: E731
    assert width(patient) > 1.4 * width(pair), (pair["auc_ci"], patient["auc_ci"])  # 1.57x here
    assert patient["bootstrap_unit"] == "patient" and patient["n_bootstrap_patients"] == 6
    assert pair["bootstrap_unit"] == "pair" and "n_bootstrap_patients" not in pair
    again = verification_metrics(scores, same, n_bootstrap=2000, seed=1, unit="patient", pair_patients=pp)
    assert again["auc_ci"] == patient["auc_ci"]  # seeded


def test_patient_bootstrap_refuses_bad_input():
    scores, same, pp = _clustered_pairs()
    with pytest.raises(ValueError, match="needs pair_patients"):
        verification_metrics(scores, same, n_bootstrap=10, unit="patient")
    with pytest.raises(ValueError, match="'pair' or 'patient'"):
        verification_metrics(scores, same, n_bootstrap=10, unit="scan")
    with pytest.raises(ValueError, match="one patient per pair"):
        verification_metrics(scores, same, n_bootstrap=10, unit="patient", pair_patients=(pp[0][:3], pp[1][:3]))


def test_the_filters_spread_over_seeds_is_reported_beside_filter_0s_values():
    per_filter = [
        {"filter": k, "tau": tau, "verification_auc": auc, "auc_by_head": {"pred": auc, "corr": corr},
         "specificity": spec, "sensitivity_heldout": sens,
         "synthetic": {"gen": {"flag_rate": rate, "replica_flag_rate": rep}, "ldm": {"flag_rate": 0.0}}}
        for k, (tau, auc, corr, spec, sens, rate, rep) in enumerate(
            [(0.8, 0.90, 0.95, 1.0, 0.5, 0.25, 1.0), (0.7, 0.80, 0.85, 0.9, None, 0.5, 0.5),
             (0.9, 0.70, 0.75, 0.8, 0.3, 0.0, 0.0)])]
    ev = _evaluation("image", 4.0) | {"per_filter": per_filter}
    metrics, _ = summary.gather([ev])
    spread = metrics["ncct"]["image"]["seed_spread"]
    assert spread["n_filters"] == 3
    auc = spread["verification_auc"]
    assert (auc["mean"], auc["min"], auc["max"], auc["n"]) == (pytest.approx(0.8), 0.7, 0.9, 3)
    assert auc["sd"] == pytest.approx(0.1)  # sample SD over the seeds
    assert spread["auc_by_head"]["corr"]["mean"] == pytest.approx(0.85)
    assert spread["sensitivity_heldout"]["n"] == 2 and spread["sensitivity_heldout"]["mean"] == pytest.approx(0.4)
    assert spread["synthetic"]["gen"]["replica_flag_rate"]["mean"] == pytest.approx(0.5)
    assert list(spread["synthetic"]["ldm"]) == ["flag_rate"]  # no truth, no replica rate
    one = summary.seed_spread(per_filter[:1])
    assert one["verification_auc"]["sd"] is None and one["verification_auc"]["mean"] == 0.9
    # an evaluation written before the spread existed has none (its per_filter lacks the numbers)
    old = _evaluation("image", 4.0) | {"per_filter": [{"filter": 0, "tau": 0.8, "verification_auc": 0.9}]}
    assert "seed_spread" not in summary.gather([old])[0]["ncct"]["image"]
