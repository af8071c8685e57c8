"""The feature-level study's scoring and summaries (synthaudit.features.study)."""

import numpy as np
import pytest

from synthaudit.features.study import (candidate_name, default_candidate, grid_name, score_embeddings,
                                       study_markdown, study_metrics)
from synthaudit.relict.evaluate import evaluate_measure
from synthaudit.relict.ratio import distance_ratio


def _embeddings(seed=0):
    """Training patients far apart; replicas = a training vector plus a little noise; new patients elsewhere."""
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(12, 40))
    replicas = train[:4] + 0.05 * rng.normal(size=(4, 40))
    new = rng.normal(size=(5, 40))
    return np.concatenate([replicas, new]), train, np.array([True] * 4 + [False] * 5)


def test_scores_are_relicts_ratio_evaluation():
    syn, train, truth = _embeddings()
    out = score_embeddings(syn, train, truth, n_closest=5, step=0.01)
    assert set(out) == {"emb_rmse", "emb_cosine"}
    assert out["emb_rmse"]["auc"] == 1.0 and out["emb_rmse"]["balanced_accuracy"] == 1.0
    # the same numbers by hand: RMSE matrix -> ratio over the 5 closest -> sweep
    rmse = np.sqrt(((syn[:, None, :] - train[None]) ** 2).mean(axis=2))
    expected = evaluate_measure(distance_ratio(rmse, 5).ratio, truth, 0.01)
    assert out["emb_rmse"]["threshold"] == expected["threshold"]
    assert out["emb_rmse"]["n_replicas"] == 4 and out["emb_rmse"]["n_nonreplicas"] == 5


def test_feature_scaling_weights_every_feature_by_its_training_spread():
    """One feature with a huge spread dominates the raw RMSE (new patients then look like copies);
    dividing every feature by its training SD restores the separation."""
    syn, train, truth = _embeddings(1)
    rng = np.random.default_rng(2)
    loud = rng.normal(scale=100.0, size=(len(syn) + len(train),))
    syn, train = np.column_stack([syn, loud[:len(syn)]]), np.column_stack([train, loud[len(syn):]])
    raw = score_embeddings(syn, train, truth, 5, 0.01, measures=["emb_rmse"])
    scaled = score_embeddings(syn, train, truth, 5, 0.01, measures=["emb_rmse"], scaling="feature")
    assert raw["emb_rmse"]["auc"] < 0.9 and scaled["emb_rmse"]["auc"] == 1.0
    with pytest.raises(ValueError, match="unknown feature scaling"):
        score_embeddings(syn, train, truth, 5, 0.01, scaling="pca")


def test_candidate_names_and_the_configured_default():
    assert grid_name(4) == "4" and grid_name([2, 2, 1]) == "2x2x1"
    assert candidate_name("astra", [4, 4, 4]) == "astra_g4" and candidate_name("a", 2, "feature") == "a_g2_feature"
    networks = {"plain": {"extractor": "medicalnet_resnet50", "seed": 0},
                "smooth": {"extractor": "medicalnet_resnet50", "seed": 0, "smoothing_voxels": 1.0},
                "astra": {"extractor": "astra_resnet152"}}
    features = {"extractor": "medicalnet_resnet50", "weights": None, "seed": 0, "grid": 4, "intensity": None,
                "input_window": None, "smoothing_voxels": 1.0, "scaling": "none", "tta_flip_axes": []}
    assert default_candidate(features, networks) == "smooth_g4"
    assert default_candidate({**features, "smoothing_voxels": 0}, networks) == "plain_g4"
    assert default_candidate({**features, "seed": 3, "smoothing_voxels": 0}, networks) is None  # another network
    assert default_candidate({**features, "extractor": "astra_resnet152", "smoothing_voxels": 0, "scaling": "feature"},
                             networks) == "astra_g4_feature"


def test_summaries_of_rows_read_back_from_the_table():
    rows = [{"dataset": "d", "candidate": c, "network": c.split("_g")[0], "label": c, "trained": t, "grid": "4",
             "grid_used": "3x4x4", "scaling": "none", "measure": m, "balanced_accuracy": ba, "auc": auc,
             "n_replicas": "4", "n_nonreplicas": "5", "seconds_per_volume": "1.5"}
            for c, t in (("a_g4", "False"), ("b_g4", "True")) for m, ba, auc in (("emb_rmse", "0.75", "0.8"),
                                                                                 ("emb_cosine", "1.0", "1.0"))]
    metrics = study_metrics(rows)
    assert metrics["d"]["a_g4"]["emb_rmse"] == {"balanced_accuracy": 0.75, "auc": 0.8}
    assert metrics["d"]["b_g4"]["seconds_per_volume"] == 1.5
    md = study_markdown(rows, default="b_g4")
    assert "| a_g4 (untrained) | 3x4x4 | 1.50 | 0.75 | 0.80 | 1.00 | 1.00 |" in md
    assert "| b_g4 * | 3x4x4 |" in md and "configured default" in md
    assert "configured default" not in study_markdown(rows, default=None)


def test_length_scaling_compares_directions_only():
    # Embedding RMSE after "length": a function of the cosine alone, blind to the embedding's length
    # (which follows contrast, blur and noise on real anatomy); a zero embedding stays zero.
    from synthaudit.features.compare import all_pairs_feature_measures, standardise

    rng = np.random.default_rng(3)
    syn, train = rng.random((4, 50)), rng.random((6, 50))
    syn[1] = 7.5 * train[2]  # the same direction, another length
    syn[3] = 0.0
    a, b = standardise(syn, train, "length")
    assert np.allclose(np.linalg.norm(a[:3], axis=1), 1) and not a[3].any()
    v = all_pairs_feature_measures(a, b)
    raw = all_pairs_feature_measures(syn, train)
    assert v["emb_rmse"][1, 2] == pytest.approx(0.0, abs=1e-6) and raw["emb_rmse"][1, 2] > 1
    cos = raw["emb_cosine"][:3]
    np.testing.assert_allclose(v["emb_rmse"][:3], np.sqrt(np.maximum(2 - 2 * cos, 0) / 50), atol=1e-6)
    np.testing.assert_allclose(v["emb_cosine"], raw["emb_cosine"], atol=1e-6)  # cosine: unchanged
