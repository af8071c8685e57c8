"""The shortlist search (synthaudit.relict.search; issue 31) against its definitions:
block means, exact k-NN, the seeded sample, the recall of the exact n closest, the ratio
error and the calls a shortlist-only run would change; and the pair mask of the engine."""

import numpy as np
import pytest

from synthaudit.relict import search
from synthaudit.relict.image_measures import all_pairs_image_measures
from synthaudit.relict.ratio import distance_ratio


def test_block_means_are_the_means_of_each_block_partial_blocks_included():
    rng = np.random.default_rng(0)
    v = rng.random((5, 7, 4))
    sums, counts = search._block_sums(v, (2, 3, 4))
    got = sums / counts
    for i, (a, b) in enumerate([(0, 2), (2, 4), (4, 5)]):
        for j, (c, d) in enumerate([(0, 3), (3, 6), (6, 7)]):
            assert got[i, j, 0] == pytest.approx(v[a:b, c:d, :].mean())


def test_block_factors_are_about_block_mm_and_within_the_grid():
    assert search.block_factors(12.0, [1.0, 1.0, 1.5], [182, 218, 10]) == (12, 12, 8)
    assert search.block_factors(12.0, [3.0, 3.0, 3.0], [61, 73, 3]) == (4, 4, 3)
    assert search.block_factors(0.1, [2.0, 2.0, 2.0], [5, 5, 5]) == (1, 1, 1)
    with pytest.raises(ValueError, match="block_mm"):
        search.block_factors(0, [1, 1, 1], [4, 4, 4])


def test_nearest_is_brute_force_k_nn_with_ties_to_the_lower_index():
    rng = np.random.default_rng(1)
    t = rng.standard_normal((50, 6))
    t[7] = t[3]  # a tie: 3 before 7
    q = np.vstack([t[3] + 1e-9, rng.standard_normal((20, 6))])
    idx, dist = search.nearest(q, t, 5)
    brute = ((q[:, None, :] - t[None]) ** 2).sum(-1)
    for row in range(len(q)):
        assert list(idx[row]) == list(np.argsort(brute[row], kind="stable")[:5])
    np.testing.assert_allclose(dist, np.take_along_axis(brute, idx, 1), atol=1e-9)
    assert list(idx[0][:2]) == [3, 7]


def test_standardised_stage_ranks_by_correlation():
    from scipy import ndimage

    rng = np.random.default_rng(2)

    def smooth():
        return ndimage.gaussian_filter(rng.random((16, 16, 16)), 2.0)

    a = smooth()
    t = [3.0 * a + 5.0, smooth(), a + 0.3 * (smooth() - 0.5)]
    q = search.cheap_vector(a, (2, 2, 2), standardise=True)
    idx, _ = search.nearest(q[None], np.stack([search.cheap_vector(x, (2, 2, 2), standardise=True) for x in t]), 3)
    assert list(idx[0]) == [0, 2, 1]  # the linear change of a first, as NCC ranks


def test_cheap_distance_is_the_squared_distance_of_the_block_averaged_volumes():
    """Block averaging is an orthogonal projection P; |va - vb|^2 = |P(a - b)|^2, partial blocks weighted
    by their voxel counts, and |a - b|^2 = |P(a - b)|^2 + |(I - P)(a - b)|^2."""
    rng = np.random.default_rng(4)
    a, b = rng.random((7, 9, 5)), rng.random((7, 9, 5))
    f = (3, 4, 2)

    def projected(v):
        sums, counts = search._block_sums(v, f)
        return (sums / counts).repeat(3, 0)[:7].repeat(4, 1)[:, :9].repeat(2, 2)[:, :, :5]

    pa, pb = projected(a), projected(b)
    va, vb = search.cheap_vector(a, f), search.cheap_vector(b, f)
    assert np.sum((va - vb).astype(np.float64) ** 2) == pytest.approx(np.sum((pa - pb) ** 2), rel=1e-6)
    assert np.sum((a - b) ** 2) == pytest.approx(np.sum((pa - pb) ** 2) + np.sum((a - pa - (b - pb)) ** 2))


def test_sample_is_seeded_sorted_and_whole_when_asked_for_more():
    a, b = search.sample_rows(100, 10, 0), search.sample_rows(100, 10, 0)
    assert np.array_equal(a, b) and np.all(np.diff(a) > 0) and len(a) == 10
    assert not np.array_equal(a, search.sample_rows(100, 10, 1))
    assert np.array_equal(search.sample_rows(5, 10, 0), np.arange(5))


def test_mode_and_shortlist_size():
    cfg = {"mode": "auto", "auto_above_pairs": 1000}
    assert search.choose_mode(10, 100, cfg) == "exhaustive"
    assert search.choose_mode(11, 100, cfg) == "shortlist"
    assert search.choose_mode(11, 100, {**cfg, "mode": "exhaustive"}) == "exhaustive"
    with pytest.raises(ValueError, match="mode"):
        search.choose_mode(1, 1, {**cfg, "mode": "fast"})
    assert search.shortlist_size(50, 2000, 4) == 200
    assert search.shortlist_size(50, 120, 4) == 120
    assert search.shortlist_size(3, 100, 1.5) == 5
    with pytest.raises(ValueError, match="at least 1"):
        search.shortlist_size(50, 2000, 0.5)


def test_distance_ratio_refuses_rows_with_fewer_than_n_computed_pairs():
    d = np.array([[1.0, 2.0, np.inf, np.inf], [1.0, 2.0, 3.0, np.inf]])
    assert distance_ratio(d, 2).ratio == pytest.approx([1 / 1.5, 1 / 1.5])
    with pytest.raises(ValueError, match="fewer than n=3 computed"):
        distance_ratio(d, 3)


def _shortlist(candidates, sampled, n_train, stage="raw"):
    q = len(candidates)
    return search.Shortlist([f"s{i}" for i in range(q)], [f"t{j}" for j in range(n_train)],
                            {stage: np.asarray(candidates)}, np.asarray(sampled), len(candidates[0]), (1, 1, 1), 1.0)


def test_recall_and_ratio_error_by_hand():
    # row 0: exact closest three 0, 1, 2; candidates hold 0 and 2 (and 5): recall 2/3
    d = np.array([[1.0, 2.0, 3.0, 9.0, 9.0, 8.0],
                  [5.0, 1.0, 6.0, 7.0, 8.0, 9.0]])
    sl = _shortlist([[0, 2, 5], [1, 0, 2]], [0, 1], 6)
    out = search.recall_check(d, sl.shortlisted("raw"), sl.sampled, 3)
    assert out["recall"] == pytest.approx([2 / 3, 1.0])
    assert out["recall_top_n"] == pytest.approx(5 / 6) and out["min_recall"] == pytest.approx(2 / 3)
    # exact ratio 1 / mean(1, 2, 3) = 0.5; on the candidates 1 / mean(1, 3, 8) = 0.25
    assert out["ratio_exact"] == pytest.approx([0.5, 1 / 4])
    assert out["ratio_shortlist"] == pytest.approx([0.25, 1 / 4])
    assert out["max_ratio_error"] == pytest.approx(0.25)
    assert list(out["closest_found"]) == [True, True]


def test_pairs_mask_is_candidates_and_sampled_rows():
    sl = _shortlist([[0, 2], [1, 3], [3, 0]], [1], 4)
    want = np.array([[1, 0, 1, 0], [1, 1, 1, 1], [1, 0, 0, 1]], bool)
    assert np.array_equal(sl.pairs("raw"), want)
    assert np.array_equal(sl.pairs("raw", slice(0, 2), slice(2, 4)), want[:2, 2:])
    with pytest.raises(ValueError, match="no 'labels' stage"):
        sl.pairs("labels")


def test_shortlist_round_trips(tmp_path):
    sl = _shortlist([[0, 2], [1, 3]], [1], 4)
    sl.save(tmp_path / "s.npz")
    back = search.Shortlist.load(tmp_path / "s.npz")
    assert back.query_ids == sl.query_ids and back.training_ids == sl.training_ids and back.k == 2
    assert np.array_equal(back.candidates["raw"], sl.candidates["raw"]) and list(back.sampled) == [1]
    with pytest.raises(ValueError, match="stale"):
        search.aligned_to(back, ["s1", "s0"], sl.training_ids, "the matrix")


def test_report_counts_a_call_the_shortlist_would_change():
    """Synthetic row 0 is a replica of training volume 4, which its candidates miss: on the
    shortlist its ratio looks ordinary and the calibrated call is lost. The report must say so."""
    d = np.array([[5.0, 5.0, 5.0, 5.0, 0.1, 5.0],
                  [5.0, 4.0, 5.0, 5.0, 5.0, 5.0]])
    held = np.array([[4.0, 5.0, 5.0, 5.0, 5.0, 5.0], [5.0, 5.0, 4.5, 5.0, 5.0, 5.0], [5.0, 5.0, 5.0, 4.8, 5.0, 5.0]])
    sl = _shortlist([[0, 1, 2], [1, 0, 2]], [0], 6)
    # the run computes only the candidates and the sampled row: +inf elsewhere
    d_run = np.where(sl.pairs("raw"), d, np.inf)
    held_sl = _shortlist([[0, 1, 2], [2, 0, 1], [3, 0, 1]], [], 6)
    held_run = np.where(held_sl.pairs("raw"), held, np.inf)

    def calls(syn, null):
        return np.asarray(syn) < np.min(null)  # called when below every held-out score

    report = search.search_report(d_run, sl, "rmse", 2, scores=lambda r, c: r, heldout=(held_run, held_sl),
                                  calls=calls, min_recall=0.999, ids=["s0", "s1"])
    assert report["mode"] == "shortlist" and report["pairs_computed"] == 6 + 3
    assert report["recall_top_n"] == pytest.approx(0.5) and not report["recall_ok"]
    assert report["calls_changed"] == 1
    assert report["rows"][0]["ratio_exact"] == pytest.approx(0.1 / 2.55)
    assert report["heldout"]["n_sampled"] == 0 and report["heldout"]["recall_top_n"] is None
    exhaustive = search.search_report(d, None, "rmse", 2)
    assert exhaustive["mode"] == "exhaustive" and exhaustive["pairs_fraction"] == 1.0 and exhaustive["recall_ok"]


@pytest.mark.parametrize("backend", ["kernels", "torch"])
def test_masked_engine_computes_exactly_the_wanted_pairs(backend):
    rng = np.random.default_rng(3)
    syn = rng.random((5, 14, 15, 16), dtype=np.float32)
    train = rng.random((9, 14, 15, 16), dtype=np.float32)
    pairs = rng.random((5, 9)) < 0.3
    pairs[0] = False  # a row with nothing to compute
    measures = ["mae", "rmse", "ssim", "ncc"]
    full = all_pairs_image_measures(syn, train, measures, data_range=1.0, backend=backend)
    part = all_pairs_image_measures(syn, train, measures, data_range=1.0, backend=backend, pairs=pairs)
    for m in measures:
        assert np.all(np.isnan(part[m][~pairs])), m
        if backend == "kernels":  # the kernels skip work without reordering it: bitwise
            assert np.array_equal(part[m][pairs], full[m][pairs]), m
        else:
            np.testing.assert_allclose(part[m][pairs], full[m][pairs], rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match="pairs has shape"):
        all_pairs_image_measures(syn, train, ["mae"], data_range=1.0, pairs=pairs[:, :4])


def test_shortlisted_engine_reads_only_the_training_volumes_a_pair_needs():
    from synthaudit.relict.image_measures import shortlisted_image_measures

    rng = np.random.default_rng(6)
    syn = rng.random((3, 12, 13, 14), dtype=np.float32)
    train = rng.random((6, 12, 13, 14), dtype=np.float32)
    pairs = np.zeros((3, 6), bool)
    pairs[0, 1] = pairs[2, 4] = pairs[1, 4] = True
    read = []

    def load(j):
        read.append(j)
        return train[j]

    got = shortlisted_image_measures(syn, load, 6, ["mae", "ssim"], pairs, data_range=1.0)
    full = all_pairs_image_measures(syn, train, ["mae", "ssim"], data_range=1.0)
    assert read == [1, 4]
    for m in ("mae", "ssim"):
        assert np.array_equal(got[m][pairs], full[m][pairs]) and np.all(np.isnan(got[m][~pairs]))


def test_alignment_recall_counts_the_exact_n_closest_among_the_candidates():
    # row 0: the exhaustive search finds training volume 3 (not a candidate) among the 2 closest;
    # row 1: the candidates hold both; the workflow's value of a candidate beats the check's
    exhaustive = np.array([[5.0, 1.0, 9.0, 2.0], [1.5, 8.0, 7.0, 6.0]])
    workflow = np.array([[5.0, 1.0, 9.0, 4.0], [1.0, 8.0, 2.0, 6.0]])  # 4.0: volume 3's plain distance
    candidates = np.array([[True, True, False, False], [True, False, True, False]])
    r = search.alignment_recall(exhaustive, workflow, candidates, 2)
    assert r["recall"] == [0.5, 1.0] and r["recall_top_n"] == 0.75 and r["min_recall"] == 0.5
    assert r["ratio_exact"][0] == pytest.approx(1.0 / 1.5) and r["ratio_workflow"][0] == pytest.approx(1.0 / 2.5)
    assert r["ratio_exact"][1] == pytest.approx(1.0 / 1.5)  # min(1.5, 1.0) and min(7, 2): the workflow's own
    assert r["max_ratio_error"] == pytest.approx(1.0 / 1.5 - 1.0 / 2.5)
    empty = search.alignment_recall(np.zeros((0, 4)), np.zeros((0, 4)), np.zeros((0, 4), bool), 2)
    assert empty["recall_top_n"] is None
    report = search.aligned_report({"k": 2, "pairs_aligned": 4, "rows": ["a", "b"], "seconds": 1.0,
                                    "measures": {"rmse": r}}, "rmse", 8, 0.999)
    assert report["mode"] == "candidates" and report["measure"] == "rmse_aligned" and not report["recall_ok"]
    assert report["pairs_fraction"] == 0.5 and report["rows"][0]["synthetic_id"] == "a"
    every = search.aligned_report({"k": 4, "n_training": 4, "pairs_aligned": 8, "rows": [], "seconds": 0.0,
                                   "measures": {"rmse": empty}}, "rmse", 8, 0.999)
    assert every["recall_top_n"] == 1.0 and every["max_ratio_error"] == 0.0 and every["recall_ok"]
