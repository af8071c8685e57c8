"""RELICT measures, distance ratio and evaluation against analytic or reference answers."""

import math

import numpy as np
import pytest
import torch
from scipy import ndimage as ndi
from skimage.metrics import structural_similarity

from synthaudit.relict import image_measures
from synthaudit.relict.evaluate import (best_balanced_accuracy, evaluate_measure, optimal_threshold, roc_auc,
                                       threshold_sweep)
from synthaudit.relict.image_measures import FUSED as MEASURES, all_pairs_image_measures
from synthaudit.relict import ranking
from synthaudit.relict.ranking import ranking_rows
from synthaudit.relict.ratio import distance_ratio


def structured(rng, shape, n):
    """Smoothed noise rescaled to [0, 1]: image-like structure at several scales."""
    vols = []
    for _ in range(n):
        v = ndi.gaussian_filter(rng.standard_normal(shape), 1.5) + 0.3 * ndi.gaussian_filter(
            rng.standard_normal(shape), 4.0)
        vols.append((v - v.min()) / (v.max() - v.min()))
    return np.stack(vols).astype(np.float32)


def skimage_ssim(a, b, data_range, use_sample_covariance=True):
    """The reference: skimage on float64 copies (skimage computes float32 input in float32)."""
    return structural_similarity(a.astype(np.float64), b.astype(np.float64), gaussian_weights=True, sigma=1.5,
                                 data_range=data_range, use_sample_covariance=use_sample_covariance)


# ---------------------------------------------------------------------------
# Image-level measures
# ---------------------------------------------------------------------------


# Both engines: the numba kernels (CPU default) and the torch path (CUDA default), run on CPU.
BACKENDS = ["kernels", "torch"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_train", [4, 7, 19])  # one block, a partial quad, several blocks of training volumes
def test_mae_rmse_match_numpy_including_near_replicas(backend, n_train):
    rng = np.random.default_rng(0)
    syn = rng.random((3, 23, 19, 17), dtype=np.float32) * 1000
    train = rng.random((n_train, 23, 19, 17), dtype=np.float32) * 1000
    train[1] = syn[0]  # exact replica
    train[2] = syn[1] + rng.normal(0, 1e-3, syn[1].shape).astype(np.float32)  # near replica
    out = all_pairs_image_measures(syn, train, ["mae", "rmse"], data_range=1.0, backend=backend)
    diff = syn[:, None].astype(np.float64) - train[None].astype(np.float64)
    mae = np.abs(diff).mean(axis=(2, 3, 4))
    rmse = np.sqrt((diff**2).mean(axis=(2, 3, 4)))
    assert out["mae"].shape == out["rmse"].shape == (3, n_train)
    assert out["mae"].dtype == np.float64
    assert out["mae"][0, 1] == 0 and out["rmse"][0, 1] == 0
    assert 0 < mae[1, 2] < 1e-5 * mae.mean()  # the near replica really is near
    np.testing.assert_allclose(out["mae"], mae, rtol=1e-6, atol=0)
    np.testing.assert_allclose(out["rmse"], rmse, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, n_train", [((23, 19, 17), 3), ((40, 48, 36), 6)])
def test_ssim_matches_skimage(shape, n_train, backend):
    rng = np.random.default_rng(1)
    syn = structured(rng, shape, 3)
    train = structured(rng, shape, n_train)
    train[0] = syn[2]  # identical pair
    train[1] = np.clip(syn[0] + rng.normal(0, 1e-3, shape), 0, 1)  # near-identical pair
    out = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, backend=backend)["ssim"]
    expected = np.array([[skimage_ssim(s, t, 1.0) for t in train] for s in syn])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)
    assert abs(out[2, 0] - 1.0) < 1e-6
    assert expected[0, 1] > 0.99


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("offset, scale, use_sample_covariance", [(0.0, 1.0, False), (1000.0, 1.0, True),
                                                                   (-1000.0, 3000.0, True)])
def test_ssim_matches_skimage_for_other_ranges(offset, scale, use_sample_covariance, backend):
    """Data far from zero (where float32 cancellation would break a naive E[xy] - mu_x mu_y)."""
    rng = np.random.default_rng(2)
    vols = structured(rng, (25, 22, 21), 4) * np.float32(scale) + np.float32(offset)
    vols[3] = vols[0]
    out = all_pairs_image_measures(vols[:2], vols[2:], ["ssim"], data_range=scale,
                                   use_sample_covariance=use_sample_covariance, backend=backend)["ssim"]
    expected = np.array([[skimage_ssim(s, t, scale, use_sample_covariance) for t in vols[2:]]
                         for s in vols[:2]])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)


def test_streaming_iterator_progress_and_batch_size_invariance():
    rng = np.random.default_rng(3)
    syn = structured(rng, (23, 19, 17), 5)
    train = structured(rng, (23, 19, 17), 3)
    calls = []
    streamed = all_pairs_image_measures(syn, (t for t in train), MEASURES, data_range=1.0, batch_size=1,
                                        progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, None), (2, None), (3, None)]
    calls.clear()
    whole = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, batch_size=100,
                                     progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    calls.clear()
    all_pairs_image_measures(syn, iter(train), ["mae"], data_range=1.0, n_training=3,
                             progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (3, 3)
    for m in MEASURES:
        assert streamed[m].shape == (5, 3)
        np.testing.assert_array_equal(streamed[m], whole[m])


def test_multi_slab_processing_matches(monkeypatch):
    """Torch path: force the smallest CPU slabs (2r = 10 rows): 3 slabs of 30 rows, and 10 + 3 rows."""
    rng = np.random.default_rng(5)
    for shape in [(40, 48, 36), (23, 19, 17)]:
        syn = structured(rng, shape, 2)
        train = structured(rng, shape, 2)
        one_slab = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, backend="torch")
        monkeypatch.setattr(image_measures, "_CPU_SLAB_VOXELS", 1)
        slabs = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, backend="torch")
        monkeypatch.undo()
        expected = np.array([[skimage_ssim(s, t, 1.0) for t in train] for s in syn])
        np.testing.assert_allclose(slabs["ssim"], expected, rtol=0, atol=1e-5)
        for m in MEASURES:
            np.testing.assert_allclose(slabs[m], one_slab[m], rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(4)
    syn = structured(rng, (40, 48, 36), 3)
    train = structured(rng, (40, 48, 36), 2)
    cpu = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, device="cpu")
    gpu = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, device="cuda")
    for m in MEASURES:
        np.testing.assert_allclose(gpu[m], cpu[m], rtol=1e-6, atol=1e-6)


def test_image_measure_errors():
    vols = np.zeros((2, 12, 12, 12), np.float32)
    with pytest.raises(ValueError, match="unknown image-level measure"):
        all_pairs_image_measures(vols, vols, ["psnr"], data_range=1.0)
    with pytest.raises(ValueError, match="training volume 1 has shape"):
        all_pairs_image_measures(vols, [vols[0], np.zeros((12, 12, 11))], ["mae"], data_range=1.0)
    with pytest.raises(ValueError, match="smaller than the SSIM window"):
        all_pairs_image_measures(np.zeros((1, 10, 12, 12), np.float32), [np.zeros((10, 12, 12))], ["ssim"],
                                 data_range=1.0)
    with pytest.raises(ValueError, match="data_range"):
        all_pairs_image_measures(vols, vols, ["ssim"], data_range=0.0)
    with pytest.raises(ValueError, match="backend"):
        all_pairs_image_measures(vols, vols, ["mae"], data_range=1.0, backend="numpy")


def test_cpu_mae_rmse_ncc_jobs_do_not_import_torch():
    """The workflow's MAE/RMSE/NCC jobs import the engine and run it on the CPU without torch (1.5-2.6 s of
    start-up each); SSIM still loads it. In a fresh interpreter, as a Snakemake job runs."""
    import subprocess
    import sys

    from synthaudit import devices

    if not devices._no_gpu():
        pytest.skip("a GPU device node is present: device 'auto' asks torch")
    code = ("import sys, numpy as np\n"
            "from synthaudit.relict.image_measures import all_pairs_image_measures\n"
            "s = np.random.default_rng(0).random((2, 12, 12, 12), dtype=np.float32)\n"
            "out = all_pairs_image_measures(s, s[::-1], ['mae', 'rmse', 'ncc'], data_range=1.0, threads=1)\n"
            "assert abs(out['mae'][0, 1]) < 1e-12 and abs(out['ncc'][1, 0] - 1) < 1e-9\n"
            "print('torch' in sys.modules)\n"
            "all_pairs_image_measures(s, s, ['ssim'], data_range=1.0, threads=1)\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
    assert devices.device_type("cpu") == "cpu" and devices.device_type("auto") == devices.resolve_device("auto").type


def test_kernels_and_torch_agree_and_threads_do_not_change_values():
    """The two engines give the same numbers; the kernels' sums do not depend on the thread count."""
    rng = np.random.default_rng(6)
    syn = structured(rng, (30, 26, 24), 5) * np.float32(80)
    train = (structured(rng, (30, 26, 24), 6) * 80).round().astype(np.int16)  # compact CT-like input
    kernels = all_pairs_image_measures(syn, train, MEASURES, data_range=80.0, backend="kernels", threads=2)
    one = all_pairs_image_measures(syn, train, MEASURES, data_range=80.0, backend="kernels", threads=1)
    torch_path = all_pairs_image_measures(syn, train, MEASURES, data_range=80.0, backend="torch")
    for m in MEASURES:
        np.testing.assert_array_equal(kernels[m], one[m])
        np.testing.assert_allclose(kernels[m], torch_path[m], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------
# Distance ratio and ranking
# ---------------------------------------------------------------------------

D = np.array([[1.0, 2.0, 3.0, 4.0],
              [0.0, 5.0, 5.0, 5.0],
              [2.0, 2.0, 2.0, 2.0]])


def test_distance_ratio_n2():
    r = distance_ratio(D, 2)
    np.testing.assert_array_equal(r.closest, [0, 0, 0])  # row 2: four-way tie -> lowest index
    np.testing.assert_array_equal(r.closest_distance, [1.0, 0.0, 2.0])
    np.testing.assert_allclose(r.mean_n_closest, [(1 + 2) / 2, (0 + 5) / 2, 2.0])
    np.testing.assert_allclose(r.ratio, [1 / 1.5, 0.0, 1.0])
    assert r.n_used == 2


def test_distance_ratio_n3_and_stable_ties():
    r = distance_ratio(D, 3)
    np.testing.assert_allclose(r.mean_n_closest, [(1 + 2 + 3) / 3, (0 + 5 + 5) / 3, 2.0])
    np.testing.assert_allclose(r.ratio, [1 / 2, 0.0, 1.0])
    assert distance_ratio(np.array([[3.0, 1.0, 1.0, 0.5, 0.5]]), 1).closest[0] == 3


def test_distance_ratio_clamps_n_with_warning():
    messages = []
    r = distance_ratio(D, 10, warn=messages.append)
    assert r.n_used == 4
    assert len(messages) == 1 and "10" in messages[0] and "4" in messages[0]
    np.testing.assert_allclose(r.ratio, [1 / 2.5, 0.0, 1.0])
    with pytest.warns(UserWarning, match="n_closest=5"):
        distance_ratio(D, 5)


def test_distance_ratio_zero_distances_and_errors():
    r = distance_ratio(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), 2)
    np.testing.assert_array_equal(r.ratio, [0.0, 0.0])  # second row is 0 / 0
    with pytest.raises(ValueError):
        distance_ratio(D, 0)
    with pytest.raises(ValueError):
        distance_ratio(np.array([[np.nan, 1.0]]), 1)


def test_ranking_rows():
    d = np.array([[2.0, 4.0], [0.0, 1.0], [1.0, 2.0], [1.0, 4.0]])  # ratios 2/3, 0, 2/3, 0.4
    result = distance_ratio(d, 2)
    rows = ranking_rows(["b", "d", "a", "c"], ["t0", "t1"], result, "mae")
    assert [r["synthetic_id"] for r in rows] == ["d", "c", "a", "b"]  # equal ratios: by id
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    assert rows[1] == {"synthetic_id": "c", "closest_training_id": "t0", "distance": 1.0,
                       "mean_n_closest": 2.5, "ratio": 0.4, "score": 0.4, "n_used": 2, "rank": 2}
    with pytest.raises(ValueError):
        ranking_rows(["a"], ["t0", "t1"], result, "mae")
    # segmentation level: ranked by the absolute distance to the closest (RELICT 2.4), not the ratio
    rows = ranking_rows(["b", "d", "a", "c"], ["t0", "t1"], result, "asd_binary", use_ratio=False)
    assert [(r["synthetic_id"], r["score"]) for r in rows] == [("d", 0.0), ("a", 1.0), ("c", 1.0), ("b", 2.0)]
    # a synthetic volume without foreground whose closest training volume has none either: flagged
    n = ranking.add_empty_pairs(rows, ["b", "d", "a", "c"], ["t0", "t1"], np.array([3, 0, 0, 2]), np.array([0, 9]))
    assert n == 2 and {r["synthetic_id"]: r["empty_pair"] for r in rows} == {"d": 1, "a": 1, "c": 0, "b": 0}


def test_ranking_file_layout_calibration_and_transform(tmp_path):
    result = distance_ratio(np.array([[2.0, 4.0], [0.0, 1.0]]), 2)
    rows = ranking.ranking_rows(["b", "a"], ["t0", "t1"], result, "mae")
    plain = tmp_path / "ranking_mae.tsv"
    ranking.write_ranking(plain, rows)
    assert plain.read_text() == (
        "synthetic_id\tclosest_training_id\tdistance\tmean_n_closest\tratio\tscore\tn_used\trank\t"
        "fpr\tn_null\tcalibrated_replica\n"
        "a\tt0\t0\t0.5\t0\t0\t2\t1\t\t\t\n"  # not calibrated: empty cells
        "b\tt0\t2\t3\t0.6666666667\t0.6666666667\t2\t2\t\t\t\n")
    back = ranking.read_ranking(plain)
    assert back[1]["ratio"] == pytest.approx(2 / 3) and back[1]["fpr"] is None and back[1]["n_null"] is None
    # calibrated, aligned: the calls and the transform of each row's closest pair
    ranking.add_calibration(rows, {"fpr": np.array([0.01, 0.5]), "n_null": np.array([9, 9]),
                                   "called": np.array([True, False])})
    transform = np.array([["flip0", ""], ["", "shift=(2.0,0.0,0.0)mm"]])  # rows b, a in matrix order
    ranking.add_transforms(rows, ["b", "a"], ["t0", "t1"], transform)
    aligned = tmp_path / "ranking_mae_aligned.tsv"
    ranking.write_ranking(aligned, rows, with_transform=True)
    back = ranking.read_ranking(aligned)
    assert [(r["synthetic_id"], r["fpr"], r["n_null"], r["calibrated_replica"], r["transform"]) for r in back] == [
        ("a", 0.01, 9, True, "identity"), ("b", 0.5, 9, False, "flip0")]
    assert aligned.read_text().splitlines()[0].endswith("\tcalibrated_replica\ttransform")
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.tsv: empty ranking"):
        ranking.read_ranking(empty)


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


def test_threshold_sweep_counts_and_grid():
    ratios = [0.1, 0.2, 0.25, 0.3, 0.4]
    truth = [True, False, True, True, False]
    rows = threshold_sweep(ratios, truth, step=0.1)
    assert [r["threshold"] for r in rows] == [0.1, 0.2, 0.3, 0.4]
    assert [(r["tp"], r["fp"], r["tn"], r["fn"]) for r in rows] == [(1, 0, 2, 2), (1, 1, 1, 2), (3, 1, 1, 0),
                                                                      (3, 2, 0, 0)]
    np.testing.assert_allclose([r["balanced_accuracy"] for r in rows], [2 / 3, 5 / 12, 3 / 4, 1 / 2])
    assert optimal_threshold(rows)["threshold"] == 0.3  # unique optimum

    grid = threshold_sweep([0.29, 0.57], [True, False])  # default step 0.01
    assert [r["threshold"] for r in grid] == [round(k * 0.01, 10) for k in range(29, 58)]


def test_optimal_threshold_plateaus():
    # Perfect separation: 0.3, 0.4 and 0.5 all reach balanced accuracy 1 -> middle.
    rows = threshold_sweep([0.1, 0.2, 0.3, 0.6, 0.7], [True, True, True, False, False], step=0.1)
    np.testing.assert_allclose([r["balanced_accuracy"] for r in rows], [2 / 3, 5 / 6, 1, 1, 1, 0.75, 0.5])
    assert optimal_threshold(rows)["threshold"] == 0.4
    # Two separate runs at 0.75 ([0.1, 0.2] and [0.5, 0.6]): the first run is used.
    rows = threshold_sweep([0.1, 0.3, 0.5, 0.7], [True, False, True, False], step=0.1)
    np.testing.assert_allclose([r["balanced_accuracy"] for r in rows], [0.75, 0.75, 0.5, 0.5, 0.75, 0.75, 0.5])
    assert optimal_threshold(rows)["threshold"] == 0.1


def test_best_balanced_accuracy_finds_thresholds_the_grid_misses():
    # Cosine-like ratios (real anatomy): copies 0.001-0.007, new volumes from 0.006. No 0.01 grid
    # point lies between them; the best threshold between observed ratios does.
    copies = [0.0013, 0.0026, 0.0044, 0.0066]
    new = [0.0064, 0.008, 0.0086, 0.0098, 0.0139, 0.0165, 0.0245]
    ratios, truth = copies + new, [True] * 4 + [False] * 7
    result = evaluate_measure(ratios, truth, 0.01)
    # grid: 0.00 calls nothing (BA 0.5); 0.01 calls all copies and 4 of 7 new -> (1 + 3/7) / 2
    assert result["balanced_accuracy"] == pytest.approx((1 + 3 / 7) / 2)
    # at 0.0066: all 4 copies and one new volume (0.0064) -> (1 + 6/7) / 2; at 0.0044: (3/4 + 1) / 2
    assert result["balanced_accuracy_any_threshold"] == pytest.approx((1 + 6 / 7) / 2)
    assert evaluate_measure(ratios, truth, 0.0001)["balanced_accuracy"] == pytest.approx((1 + 6 / 7) / 2)
    # never below the call-nothing threshold, and NaN without both classes
    assert best_balanced_accuracy([0.9, 0.1], [True, False]) == 0.5
    assert math.isnan(best_balanced_accuracy([0.1, 0.2], [True, True]))


def test_single_class_gives_nan():
    rows = threshold_sweep([0.1, 0.2], [True, True], step=0.1)
    assert all(math.isnan(r["specificity"]) and math.isnan(r["balanced_accuracy"]) for r in rows)
    assert [r["sensitivity"] for r in rows] == [0.5, 1.0]
    with pytest.raises(ValueError):
        optimal_threshold(rows)
    result = evaluate_measure([0.1, 0.2], [True, True], 0.1)
    assert math.isnan(result["threshold"]) and math.isnan(result["auc"])
    assert (result["n_replicas"], result["n_nonreplicas"]) == (2, 0)


def test_roc_auc():
    labels = np.array([True, True, False, False])
    assert roc_auc([3.0, 4.0, 1.0, 2.0], labels) == 1.0
    assert roc_auc([1.0, 2.0, 3.0, 4.0], labels) == 0.0
    assert roc_auc([1.0, 1.0, 1.0, 1.0], labels) == 0.5
    # Pairs (pos, neg): 0.8>0.4, 0.8>0.1, 0.4=0.4 (1/2), 0.4>0.1 -> 3.5 / 4.
    assert roc_auc([0.8, 0.4, 0.4, 0.1], labels) == 0.875
    assert math.isnan(roc_auc([0.1, 0.2], [True, True]))


def test_evaluate_measure():
    result = evaluate_measure([0.1, 0.2, 0.3, 0.6, 0.7], [True, True, True, False, False], 0.1)
    assert result["threshold"] == 0.4
    assert (result["balanced_accuracy"], result["sensitivity"], result["specificity"]) == (1.0, 1.0, 1.0)
    assert result["auc"] == 1.0  # small ratio = replica, so scores are -ratio
    assert (result["n_synthetic"], result["n_replicas"], result["n_nonreplicas"]) == (5, 3, 2)
    assert len(result["sweep"]) == 7


def test_out_of_sample_interval_is_not_the_apparent_accuracy():
    """Separable ratios: the threshold tuned on all of them has balanced accuracy 1 (RELICT's
    apparent number); a threshold tuned on a resample sits in the resample's gap and misses the
    left-out volumes nearest the boundary, so the out-of-sample interval reaches below 1."""
    from synthaudit.relict.uncertainty import bootstrap_ci

    scores = np.array([0.10, 0.20, 0.30, 0.47, 0.50, 0.56, 0.60, 0.90])
    truth = np.array([True, True, True, True, False, False, False, False])
    assert evaluate_measure(scores, truth)["balanced_accuracy"] == 1.0
    ci = bootstrap_ci(scores, truth, 0.01, n_boot=400, seed=0)
    assert ci["n_used"] >= 300 and "out-of-bag" in ci["method"]
    assert ci["balanced_accuracy"][0] < 1.0 and ci["out_of_sample"]["balanced_accuracy"] < 0.99
    assert ci == bootstrap_ci(scores, truth, 0.01, n_boot=400, seed=0)  # seeded
    # a wide gap: every threshold a resample can tune still separates the left-out volumes
    wide = bootstrap_ci(np.array([0.1, 0.11, 0.12, 0.13, 0.9, 0.91, 0.92, 0.93]), truth, 0.01, n_boot=200, seed=1)
    assert wide["balanced_accuracy"] == [1.0, 1.0] and wide["out_of_sample"]["balanced_accuracy"] == 1.0
    # too few volumes of a class for left-out scoring: no interval rather than a made-up one
    few = bootstrap_ci(scores[3:], truth[3:], 0.01, n_boot=100, seed=0)
    assert few["balanced_accuracy"] is None and few["out_of_sample"]["balanced_accuracy"] is None


def test_average_ranks_equal_scipy_rankdata_with_ties():
    """roc_auc ranks without scipy.stats (its import was most of an evaluation job): the
    ranks must be scipy's 'average' ranks, ties included."""
    from scipy.stats import rankdata

    from synthaudit.relict.evaluate import average_ranks

    rng = np.random.default_rng(3)
    for _ in range(100):
        x = rng.integers(0, 6, size=int(rng.integers(1, 40))).astype(float)
        assert np.array_equal(average_ranks(x), rankdata(x))
    assert average_ranks(np.array([])).shape == (0,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pair_mask_and_preselection_match_cpu():
    """The shortlist's pair mask (relict.search) and the alignment's pre-selection on the GPU give
    the CPU's values: the paths the users' clusters take."""
    from synthaudit.relict import alignment as al

    rng = np.random.default_rng(5)
    syn = structured(rng, (40, 48, 36), 3)
    train = structured(rng, (40, 48, 36), 5)
    mask = rng.random((3, 5)) < 0.5
    mask[:, 0] = True
    cpu = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, device="cpu", pairs=mask)
    gpu = all_pairs_image_measures(syn, train, MEASURES, data_range=1.0, device="cuda", pairs=mask)
    for m in MEASURES:
        assert np.array_equal(np.isnan(gpu[m]), ~mask) and np.array_equal(np.isnan(cpu[m]), ~mask)
        np.testing.assert_allclose(gpu[m][mask], cpu[m][mask], rtol=1e-6, atol=1e-6)
    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=8.0, rotation_deg=(-5.0, 5.0), rotation_axes=(2,))
    small_s = [al.block_mean(v, 4) for v in syn]
    small_t = [al.block_mean(v, 4) for v in train]
    c_cpu = al.preselect_gemm(small_s, small_t, space, [4.0] * 3, 3, device="cpu", threads=2)
    c_gpu = al.preselect_gemm(small_s, small_t, space, [4.0] * 3, 3, device="cuda", threads=2)
    np.testing.assert_array_equal(c_gpu[0], c_cpu[0])
