"""Generative-model recall (Dombrowski et al. 4.3): hand-computed answers, ties, errors, outputs."""

import itertools
import json

import numpy as np
import pytest

from synthaudit.io import read_tsv
from synthaudit.relict import recall as R
from synthaudit.relict.matrix import MeasureMatrix

# 4 synthetic x 4 training volumes. Nearest neighbours: 0, 0 (tie 0/1 -> lowest index), 1, 2.
D = np.array([
    [0.1, 0.5, 0.9, 1.0],
    [0.2, 0.2, 0.7, 1.0],
    [0.8, 0.3, 0.6, 1.0],
    [0.9, 0.9, 0.05, 1.0],
])
FLAGGED = np.array([True, False, False, True])
# 2 held-out x 4 training: nearest 1 and 3.
REFERENCE = np.array([
    [0.3, 0.1, 0.9, 0.9],
    [0.5, 0.5, 0.5, 0.4],
])


def test_counts_and_fractions_by_hand():
    r = R.generative_recall(D, FLAGGED, REFERENCE)
    assert r.nearest.tolist() == [0, 0, 1, 2]
    assert r.nn_count.tolist() == [2, 1, 1, 0]
    assert r.learned.tolist() == [True, True, True, False]
    assert r.learned_fraction == 0.75
    assert r.max_nn_count == 2
    assert (r.n_synthetic, r.n_training, r.n_reference) == (4, 4, 2)
    # flagged synthetic 0 -> training 0, flagged synthetic 3 -> training 2
    assert r.memorised_fraction == 0.5
    assert r.nn_of_flagged.tolist() == [1, 0, 1, 0]
    assert r.nn_of_unflagged.tolist() == [1, 1, 0, 0]
    assert r.learned_but_memorised == 2  # training 0 and 2
    assert r.learned_not_memorised == 2  # training 0 and 1
    assert r.learned_only_by_memorised == 1  # training 2: its only synthetic neighbour is flagged
    assert r.recall == 0.5
    assert r.reference_nn_count.tolist() == [0, 1, 0, 1]
    assert r.reference_learned_fraction == 0.5
    # 2 of the 4 synthetic volumes at random: P(learned) = 1 - C(S-c, 2)/C(4, 2) = 5/6, 1/2, 1/2, 0
    assert r.matched_learned_fraction == pytest.approx(11 / 24, abs=1e-12)


def test_matched_fraction_equals_enumeration_of_subsets():
    rng = np.random.default_rng(3)
    d = rng.uniform(size=(9, 5))
    r = R.generative_recall(d, reference=rng.uniform(size=(4, 5)))
    fractions = [np.mean(np.bincount(r.nearest[list(subset)], minlength=5) > 0)
                 for subset in itertools.combinations(range(9), 4)]
    assert r.matched_learned_fraction == pytest.approx(np.mean(fractions), abs=1e-12)
    assert R.expected_learned_fraction(r.nn_count, 9) == pytest.approx(r.learned_fraction, abs=1e-12)
    assert R.expected_learned_fraction(r.nn_count, 10) is None  # more than there are
    assert R.expected_learned_fraction(r.nn_count, 0) == 0.0


def test_ties_go_to_the_lowest_training_index():
    d = np.array([[0.5, 0.2, 0.2], [1.0, 1.0, 1.0], [3.0, 2.0, 2.0]])
    r = R.generative_recall(d)
    assert r.nearest.tolist() == [1, 0, 1]
    assert r.nn_count.tolist() == [1, 2, 0]


def test_without_flags_or_reference_those_values_are_none():
    r = R.generative_recall(D)
    assert r.learned_fraction == 0.75
    for key in ("memorised_fraction", "learned_but_memorised", "learned_not_memorised", "learned_only_by_memorised",
                "recall", "reference_learned_fraction", "matched_learned_fraction", "n_reference"):
        assert getattr(r, key) is None, key
    assert r.nn_of_flagged is None and r.reference_nn_count is None
    summary = r.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["learned_fraction"] == 0.75 and summary["max_nn_count"] == 2


def test_flags_as_zero_one_and_all_flagged():
    r = R.generative_recall(D, [1, 1, 1, 1])
    assert r.memorised_fraction == 1.0
    assert r.learned_but_memorised == 3 and r.learned_not_memorised == 0 and r.recall == 0.0
    assert r.learned_only_by_memorised == 3


def test_infinite_distances_are_allowed_where_a_row_has_a_finite_one():
    r = R.generative_recall(np.array([[np.inf, 2.0], [1.0, np.inf]]))
    assert r.nearest.tolist() == [1, 0]


@pytest.mark.parametrize(("distances", "flagged", "reference", "message"), [
    (np.zeros(4), None, None, "2D"),
    (np.zeros((0, 3)), None, None, "non-empty"),
    (np.zeros((3, 0)), None, None, "non-empty"),
    (np.array([[0.1, np.nan]]), None, None, "NaN"),
    (np.array([[0.1, -np.inf]]), None, None, "-inf"),
    (np.array([[0.1, 0.2], [np.inf, np.inf]]), None, None, r"row\(s\) \[1\]"),
    (D, FLAGGED[:3], None, "one value per synthetic"),
    (D, np.array([0, 1, 2, 0]), None, "booleans"),
    (D, None, REFERENCE[:, :3], "3 training columns"),
    (D, None, np.array([[np.nan, 0, 0, 0]]), "reference contains 1 NaN"),
])
def test_bad_inputs_raise_clear_errors(distances, flagged, reference, message):
    with pytest.raises(ValueError, match=message):
        R.generative_recall(distances, flagged, reference)


def test_training_table_round_trip(tmp_path):
    r = R.generative_recall(D, FLAGGED, REFERENCE)
    ids = ["t0", "t1", "t2", "t3"]
    path = tmp_path / "recall.tsv"
    R.write_training_table(path, r, ids)
    rows = read_tsv(path)
    assert list(rows[0]) == ["training_id", "nn_count", "learned", "nn_of_flagged", "nn_of_unflagged",
                             "reference_nn_count"]
    assert [row["training_id"] for row in rows] == ids
    assert [int(row["nn_count"]) for row in rows] == [2, 1, 1, 0]
    assert [row["learned"] for row in rows] == ["true", "true", "true", "false"]
    assert [int(row["nn_of_flagged"]) for row in rows] == [1, 0, 1, 0]
    assert [int(row["reference_nn_count"]) for row in rows] == [0, 1, 0, 1]

    plain = R.training_rows(R.generative_recall(D), ids)
    assert list(plain[0]) == ["training_id", "nn_count", "learned"]
    with pytest.raises(ValueError, match="3 training ids for 4"):
        R.training_rows(r, ids[:3])


@pytest.mark.parametrize("with_extras", [True, False])
def test_figure_is_written_atomically_as_png(tmp_path, with_extras):
    r = R.generative_recall(D, FLAGGED, REFERENCE) if with_extras else R.generative_recall(D)
    path = tmp_path / "figs" / "recall.png"
    R.recall_figure(path, r, measure="MAE", log_y=with_extras)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 1000
    assert [p.name for p in path.parent.iterdir()] == ["recall.png"]  # no temporary file left


def test_heldout_flags_are_strictly_below_the_percentile_of_heldout_nearest_distances():
    # synthetic nearest distances 0.1, 0.2, 0.3, 0.05; held-out nearest 0.1 and 0.4
    flagged, threshold = R.heldout_flags(D, REFERENCE, 50)
    assert threshold == pytest.approx(0.25) and flagged.tolist() == [True, True, False, True]
    flagged, threshold = R.heldout_flags(D, REFERENCE, 0)
    assert threshold == 0.1 and flagged.tolist() == [False, False, False, True]  # 0.1 is not below 0.1


def _matrices(heldout_training=("t0", "t1", "t2", "t3")):
    syn = MeasureMatrix(D, "mae", ["a", "b", "c", "d"], ["t0", "t1", "t2", "t3"], 0.0, path="syn.npz")
    held = MeasureMatrix(REFERENCE, "mae", ["h0", "h1"], list(heldout_training), 0.0, path="held.npz")
    return syn, held


def test_recall_against_heldout_flags_then_counts():
    syn, held = _matrices()
    result, subset, summary = R.recall_against_heldout(syn, held, 50.0)
    assert subset == ["t0", "t1", "t2", "t3"]
    expected = R.generative_recall(D, [True, True, False, True], REFERENCE)
    assert result.summary() == expected.summary() and result.nn_of_flagged.tolist() == [2, 0, 1, 0]
    assert list(summary)[:5] == ["flag_percentile", "flag_threshold_distance", "n_flagged", "flagged_ids",
                                 "generator_training_subset"]
    assert summary["flag_threshold_distance"] == pytest.approx(0.25) and summary["n_flagged"] == 3
    assert summary["flagged_ids"] == ["a", "b", "d"] and summary["generator_training_subset"] is False
    assert summary["recall"] == expected.recall and json.loads(json.dumps(summary)) == summary


def test_recall_against_heldout_counts_only_the_generators_training_subset():
    syn, held = _matrices()
    result, subset, summary = R.recall_against_heldout(syn, held, 50.0, ["t2", "t0"])
    # flags still from every training volume; nearest among t2, t0: c and d -> t2, a and b -> t0
    assert subset == ["t2", "t0"] and summary["generator_training_subset"] is True
    assert result.n_training == 2 and result.nn_count.tolist() == [2, 2]
    assert summary["flagged_ids"] == ["a", "b", "d"]
    with pytest.raises(ValueError, match=r"generator training volumes \['t9'\] are not in syn.npz"):
        R.recall_against_heldout(syn, held, 50.0, ["t0", "t9"])
    other_syn, other_held = _matrices(("t0", "t1", "t3", "t2"))
    with pytest.raises(ValueError, match="held.npz and syn.npz list different training volumes"):
        R.recall_against_heldout(other_syn, other_held, 50.0)
