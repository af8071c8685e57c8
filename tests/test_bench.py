"""The benchmark harness (synthaudit_bench) at a toy scale: parameters, cohorts, figures, one run.

The benchmark itself (``make bench``) is not part of the tests; these check that its
inputs are what they claim (deterministic, cached, atomic cohorts; a strict params
file), that its arithmetic is right, and that a run produces a complete report whose
engine values agree with the per-pair reference.
"""

import json
import math

import numpy as np
import pytest
import yaml

from synthaudit_bench import params as P
from synthaudit_bench import report as R
from synthaudit_bench.cohort import Cohort, CohortSpec, cohort_path, ensure, generate
from synthaudit_bench.reference import choose_pairs, compare
from synthaudit_bench.run import bench_scale, spawn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:surface_distance")


def _toy(**overrides):
    """A two-use-case scale small enough to run in seconds."""
    scale = _raw_toy()
    scale.update(overrides)
    return P.parse({"scales": {"toy": scale}})["toy"]


def _raw_toy() -> dict:
    return {
        "seed": 5, "threads": 1, "device": "cpu", "reference_pairs": {"default": 4, "ssim": 2},
        "ssim_training_fraction": 0.5, "profile_training": 1,
        "use_cases": {
            "ncct": {"kind": "ncct", "n_synthetic": 3, "n_training": 4, "n_replicas": 2, "shape": [24, 28, 24],
                     "spacing_mm": 1.0, "n_classes": 1, "embedding_dim": 64,
                     "measures": ["mae", "ssim", "emb_cosine", "dice_binary", "asd_binary"],
                     "combined": ["mae", "emb_cosine", "dice_binary", "asd_binary"],
                     "targets": {"combined_wall_s": 1e-9, "peak_rss_mb": 1e6, "speedup_per_core": 10}},
            "tof": {"kind": "tof", "n_synthetic": 2, "n_training": 3, "n_replicas": 1, "shape": [32, 32, 16],
                    "spacing_mm": [0.62, 0.62, 0.62], "n_classes": 7, "embedding_dim": 32,
                    "measures": ["rmse", "emb_rmse", "dice_multiclass", "asd_multiclass"]},
        },
    }


# --------------------------------------------------------------------------- params


def test_shipped_params_have_the_papers_sizes(root):
    scales = P.load(root / "bench" / "params.yaml")
    ncct, tof = scales["ncct"].use_cases["ncct"], scales["tof"].use_cases["tof"]
    assert (ncct.n_synthetic, ncct.n_training, ncct.shape) == (50, 774, (182, 218, 182))
    assert (tof.n_synthetic, tof.n_training, tof.shape, tof.n_classes) == (50, 1782, (128, 128, 32), 7)
    assert scales["ncct"].threads == 2 and scales["ncct"].pairs_for("ssim") == 3
    assert set(scales["quick"].use_cases) == {"ncct", "tof"}


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["use_cases"]["ncct"].update(n_traning=3), "unknown key(s) ['n_traning']"),
    (lambda s: s.update(threads=0), "threads: got 0; expected an integer >= 1"),
    (lambda s: s.update(ssim_training_fraction=1.5), "ssim_training_fraction"),
    (lambda s: s.update(device="tpu"), "device"),
    (lambda s: s["use_cases"]["ncct"].update(measures=["mae", "psnr"]), "['psnr']"),
    (lambda s: s["use_cases"]["ncct"].update(measures=["dice_multiclass"], combined=[], targets={}),
     "no multiclass measures with a single class"),
    (lambda s: s["use_cases"]["ncct"].update(targets={"rmse_wall_s": 5}), "rmse_wall_s"),
    (lambda s: s["use_cases"]["ncct"].update(shape=[24, 28]), "shape"),
    (lambda s: s["use_cases"]["ncct"].pop("kind"), "missing key(s) ['kind']"),
])
def test_params_errors_name_the_key(edit, message):
    scale = {"use_cases": {"ncct": {"kind": "ncct", "n_synthetic": 2, "n_training": 2, "shape": [24, 28, 24],
                                    "spacing_mm": 1.0, "n_classes": 1, "embedding_dim": 8, "measures": ["mae"],
                                    "combined": ["mae"], "targets": {"mae_wall_s": 1}}}}
    edit(scale)
    with pytest.raises(P.BenchParamsError) as error:
        P.parse({"scales": {"s": scale}}, "x.yaml")
    assert message in str(error.value) and "x.yaml" in str(error.value)


# --------------------------------------------------------------------------- cohorts


def test_cohort_is_deterministic_cached_and_complete(tmp_path):
    scale = _toy()
    spec = CohortSpec.of(scale.use_cases["ncct"], scale.seed)
    path = cohort_path(tmp_path / "cohort", "toy", "ncct", spec)
    messages = []
    cohort = ensure(spec, path, log=messages.append)
    assert ensure(spec, path, log=messages.append).path == cohort.path and messages[-1].endswith("cached")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary folder left
    (tmp_path / "again").mkdir()
    generate(spec, tmp_path / "again", log=lambda _: None)
    again = Cohort(tmp_path / "again")
    assert again.replica_of == cohort.replica_of
    for name in ("training_images", "synthetic_images", "training_labels", "synthetic_embeddings"):
        np.testing.assert_array_equal(cohort.array(name), again.array(name))

    images, labels = cohort.array("training_images"), cohort.array("training_labels")
    assert images.dtype == np.int16 and images.shape == (4, 24, 28, 24) and labels.dtype == np.uint8
    assert images.min() >= 0 and images.max() <= 100 and set(np.unique(labels)) <= {0, 1}
    assert cohort.array("training_embeddings").dtype == np.float32
    # near-copies are close to their source and keep its labels; other pairs are not close
    synthetic = cohort.array("synthetic_images").astype(float)
    for s, t in enumerate(cohort.replica_of):
        if t >= 0:
            assert np.mean(np.abs(synthetic[s] - images[t])) < 0.5 * min(
                np.mean(np.abs(synthetic[s] - images[u])) for u in range(4) if u != t)
            np.testing.assert_array_equal(cohort.array("synthetic_labels")[s], labels[t])
    # the plain reader gives what the memory map holds
    np.testing.assert_array_equal(cohort.reader("training_images").read(1, 3), images[1:3])
    np.testing.assert_array_equal(cohort.reader("training_labels").read(2), labels[2])


def test_ncct_volumes_do_not_share_an_anatomy():
    """Two new NCCT volumes are different heads: no small shift makes one a near-copy of the other,
    so the alignment bench's shifted copies are found by their source only (generator version 1
    rolled 6 base heads: there the best shift brought two volumes within 3x a replica's distance)."""
    import itertools

    from synthaudit_bench.cohort import _NCCT

    spec = CohortSpec("ncct", 4, 6, 1, (24, 28, 24), (3.0, 3.0, 3.0), 1, 16, 0)
    draw = _NCCT(spec)
    a = draw.volume(np.random.default_rng(1), 0)[0].astype(float)
    b = draw.volume(np.random.default_rng(2), 0)[0].astype(float)
    copy = draw.replica(np.random.default_rng(3), a.astype(np.int16)).astype(float)
    best = min(np.mean(np.abs(a - np.roll(b, s, axis=(0, 1, 2)))) for s in itertools.product(range(-2, 3), repeat=3))
    assert best > 8 * np.mean(np.abs(a - copy)) > 0


def test_tof_cohort_has_seven_thin_classes(tmp_path):
    spec = CohortSpec.of(_toy().use_cases["tof"], 5)
    cohort = ensure(spec, tmp_path / "tof", log=lambda _: None)
    labels = cohort.array("training_labels")
    assert set(np.unique(labels)) <= set(range(8)) and len(np.unique(labels)) >= 6
    assert 0 < np.count_nonzero(labels) < 0.2 * labels.size
    assert cohort.data_range == 1000.0


# --------------------------------------------------------------------------- figures


def test_reference_pairs_are_distinct_in_range_and_include_near_copies():
    replica_of = [-1, 3, -1, 0, -1]
    pairs = choose_pairs(5, 4, replica_of, 9, seed=1)
    assert len(set(pairs)) == 9 and all(0 <= s < 5 and 0 <= t < 4 for s, t in pairs)
    assert {(1, 3), (3, 0)} <= set(pairs)
    assert pairs == choose_pairs(5, 4, replica_of, 9, seed=1)
    assert choose_pairs(5, 2, replica_of, 3, seed=1)[0] == (3, 0)  # (1, 3) is outside 2 columns
    assert len(choose_pairs(2, 2, [-1, -1], 10, seed=1)) == 4


def test_compare_relative_difference_and_nans():
    out = compare([1.0, 2.0 + 2e-9, math.nan, math.nan, 0.0], [1.0, 2.0, math.nan, 1.0, 0.0])
    assert out["max_rel_diff"] == pytest.approx(1e-9)
    assert out["nan_mismatches"] == 1 and out["both_nan"] == 1


def test_engine_figures_extrapolate_a_fraction():
    raw = {"n_synthetic": 2, "n_training": 5, "pairs": 10, "wall_s": 6.0, "compute_s": 5.0, "load_s": 1.0,
           "cpu_s": 9.0, "threads": 2, "device": "cpu", "peak_rss_mb": 100.0}
    f = R.engine_figures(raw, 20)
    assert f["extrapolated"] and f["wall_s"] == 24.0 and f["pairs"] == 40 and f["measured"]["wall_s"] == 6.0
    assert f["s_per_pair"] == 0.5 and f["s_per_pair_core"] == 1.0
    assert R.speed(2.0, f) == {"per_pair": 4.0, "per_core": 2.0}
    assert not R.engine_figures(raw, 5)["extrapolated"]


# --------------------------------------------------------------------------- runs


def test_toy_run_reports_agreement_targets_and_profiles(tmp_path):
    scale = _toy()
    report = bench_scale(scale, tmp_path, isolated=False, log=lambda _: None)
    on_disk = json.loads((tmp_path / "toy.json").read_text())
    assert on_disk["scale"] == "toy" and set(on_disk["use_cases"]) == {"ncct", "tof"}
    assert on_disk["machine"]["logical_cores"] >= 1

    ncct = report["use_cases"]["ncct"]
    for measure, entry in ncct["measures"].items():
        assert np.load(tmp_path / "toy" / "ncct" / f"{measure}.npy").shape[0] == 3
        assert entry["comparison"]["max_rel_diff"] < (1e-5 if measure == "ssim" else 1e-9), measure
        assert entry["comparison"]["nan_mismatches"] == 0
        assert entry["reference"]["s_per_pair"] > 0 and entry["engine"]["compute_s"] >= 0
    ssim = ncct["measures"]["ssim"]["engine"]
    assert ssim["extrapolated"] and ssim["measured"]["n_training"] == 2 and ssim["n_training"] == 4
    assert len(ncct["measures"]["ssim"]["reference"]["pairs"]) == 2

    combined = ncct["combined"]
    assert combined["complete"] and combined["wall_s"] == pytest.approx(
        sum(ncct["measures"][m]["engine"]["wall_s"] for m in combined["measures"]))
    targets = {t["name"]: t for t in ncct["targets"]}
    assert targets["combined_wall_s"]["met"] is False and targets["peak_rss_mb"]["met"] is True
    profile = targets["combined_wall_s"]["profile"]
    assert set(profile) == set(combined["measures"])
    assert profile["mae"]["n_training"] == 1 and len(profile["mae"]["by_cumulative"]) > 0
    speedup = targets["speedup_per_core_mae"]  # 10x per core against the naive reference
    assert speedup["measured"] == ncct["measures"]["mae"]["comparison"]["speedup"]["per_core"]
    assert speedup["met"] == (speedup["measured"] >= 10)

    tof = report["use_cases"]["tof"]
    assert set(tof["measures"]) == {"rmse", "emb_rmse", "dice_multiclass", "asd_multiclass"}
    assert tof["combined"]["measures"] == [] and tof["targets"] == []  # no targets declared
    assert "toy/ncct" in R.table(report)


def test_engine_child_process_reports_its_own_peak_memory(tmp_path):
    scale = _toy()
    spec = CohortSpec.of(scale.use_cases["ncct"], scale.seed)
    cohort = ensure(spec, tmp_path / "c", log=lambda _: None)
    result = spawn({"task": "engine", "cohort": str(cohort.path), "measure": "dice_binary", "n_training": 4,
                    "threads": 1, "device": "cpu", "values_file": str(tmp_path / "dice.npy")}, threads=1)
    assert result["pairs"] == 12 and result["peak_rss_mb"] > 10 and result["device"] == "cpu"
    assert np.load(tmp_path / "dice.npy").shape == (3, 4)


def test_measures_subset_and_skip_reference(tmp_path):
    scale = _toy(use_cases={"ncct": yaml.safe_load(
        "{kind: ncct, n_synthetic: 2, n_training: 2, shape: [20, 20, 20], spacing_mm: 1.0, n_classes: 1,"
        " embedding_dim: 8, measures: [mae, emb_rmse], combined: [mae, emb_rmse], targets: {combined_wall_s: 1e6}}")})
    report = bench_scale(scale, tmp_path, measures=["emb_rmse"], skip_reference=True, isolated=False,
                         log=lambda _: None)
    uc = report["use_cases"]["ncct"]
    assert list(uc["measures"]) == ["emb_rmse"] and "reference" not in uc["measures"]["emb_rmse"]
    assert uc["combined"]["missing"] == ["mae"] and uc["targets"][0]["met"] is None
