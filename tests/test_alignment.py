"""Replicas under augmentation: the alignment search, augmented spiked replicas, per-kind evaluation."""

import copy
import math

import numpy as np
import pytest
from scipy import ndimage

from synthaudit.config import ParamsError, load_params, validate_params
from synthaudit.relict import alignment as al
from synthaudit.relict.augmented import per_kind
from synthaudit.sources import spiked_plan
from synthaudit.synthetic.spiked import augment

SP = (2.0, 2.0, 2.0)
SPACE = al.SearchSpace(flip_axes=(0,), max_shift_mm=8.0, subvoxel=True, rotation_deg=(-10.0, -5.0, 5.0, 10.0),
                       rotation_axes=(0, 1, 2))


def head(seed: int, shape=(32, 36, 30)) -> np.ndarray:
    """A smooth, asymmetric blob image with zero background (like a windowed CT head)."""
    rng = np.random.default_rng(seed)
    v = ndimage.gaussian_filter(rng.random(shape).astype(np.float32), 2.0)
    v = (v - v.min()) / (v.max() - v.min())
    z, y, x = np.indices(shape)
    c = np.array(shape) / 2
    inside = ((z - c[0]) / (0.38 * shape[0])) ** 2 + ((y - c[1]) / (0.4 * shape[1])) ** 2 \
        + ((x - c[2]) / (0.36 * shape[2])) ** 2 < 1
    v = v * inside
    v[: shape[0] // 2 - 3, : shape[1] // 3] *= 0.4  # left-right asymmetry, so a flip is visible
    return v.astype(np.float32)


def rmse(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b) ** 2)))


def aligned_rmse(syn, src, tr, sp=SP, fast=False):
    """The RMSE the alignment reports for ``tr``: over the voxels where the moved volume has data."""
    region = al.overlap(src.shape, tr, sp, fast=fast)
    direct = al.apply(syn, tr, sp, fast=fast)
    return rmse(direct, src) if region is None else rmse(direct[region], src[region])


def test_fft_squared_error_equals_brute_force_for_every_shift():
    a, t = head(1, (12, 10, 9)), head(2, (12, 10, 9))
    search = al.ShiftSearch(a.shape, (2, 1, 2))
    ssd = search.ssd(search.moving(a), search.fixed(t))
    for i, dx in enumerate(search.shifts[0]):
        for j, dy in enumerate(search.shifts[1]):
            for k, dz in enumerate(search.shifts[2]):
                moved = al._integer_shift(a, (int(dx), int(dy), int(dz)))
                brute = float(np.sum((moved.astype(np.float64) - t) ** 2))
                assert ssd[i, j, k] == pytest.approx(brute, rel=1e-4, abs=1e-3)


def test_flipped_shifted_rotated_copy_is_aligned_back_to_its_source():
    src, other = head(3), head(4)
    syn = al.rotate(np.flip(src, 0).copy(), 2, 7.0, SP)
    syn = al._integer_shift(syn, (2, -1, 1)) + np.random.default_rng(0).normal(0, 0.01, src.shape).astype(np.float32)
    res = al.align_pair_set(syn, [src, other], SPACE, SP)
    plain = rmse(syn, src)
    assert res[0].rmse < 0.35 * plain  # the copy is found after alignment ...
    assert res[0].rmse < 0.5 * res[1].rmse  # ... and its source is far closer than another head
    assert res[0].transform.flips == (0,) and res[0].transform.rotation_axis == 2
    assert abs(abs(res[0].transform.angle_deg) - 7.0) <= 2.5
    # the reported value is the transform's, over the overlap
    assert res[0].rmse == pytest.approx(aligned_rmse(syn, src, res[0].transform), rel=1e-5)


def test_subvoxel_shift_is_recovered():
    src = head(5)
    syn = ndimage.shift(src, (1.5, -0.5, 0.0), order=1, mode="constant")
    space = al.SearchSpace(max_shift_mm=6.0, subvoxel=True)
    (res,) = al.align_pair_set(syn, [src], space, SP)
    assert np.allclose(res.transform.shift_vox, (-1.5, 0.5, 0.0), atol=0.25)
    assert res.rmse < 0.5 * rmse(syn, src)


def test_identity_search_reproduces_plain_measures_exactly():
    a, t = head(6), head(7)
    (res,) = al.align_pair_set(a, [t], al.SearchSpace(), SP)
    diff = a.astype(np.float64) - t
    assert res.rmse == math.sqrt(np.mean(diff ** 2)) and res.mae == np.mean(np.abs(diff))
    plain = {"mae": np.random.default_rng(0).random((3, 4)), "rmse": np.random.default_rng(1).random((3, 4))}
    out = al.aligned_matrices(plain, np.zeros((3, 0), np.int64), [[], [], []], SP)
    assert np.array_equal(out["mae"], plain["mae"]) and np.array_equal(out["rmse"], plain["rmse"])
    assert al.SearchSpace.from_params(None).is_identity


def test_aligned_values_never_exceed_plain_and_record_the_transform():
    plain = {"rmse": np.array([[0.5, 0.1, 0.4]])}
    pairs = [[al.PairResult(al.Transform(flips=(0,)), mae=0.0, rmse=0.2),
              al.PairResult(al.Transform(flips=(0,)), mae=0.0, rmse=0.3)]]
    out = al.aligned_matrices(plain, np.array([[0, 1]]), pairs, SP)
    assert out["rmse"].tolist() == [[0.2, 0.1, 0.4]]
    assert out["rmse_transform"].tolist() == [["flip0", "identity", ""]]


def test_preselection_puts_the_flipped_source_among_the_candidates():
    training = [head(s) for s in range(10, 18)]
    syn = al._integer_shift(np.flip(training[5], 0).copy(), (1, 0, -2))
    small = [al.block_mean(v, 2) for v in training]
    cand, hyp = al.preselect([al.block_mean(syn, 2)], small, SPACE, [4.0, 4.0, 4.0], k=3, factor=1)
    assert cand.shape == (1, 3) and cand[0, 0] == 5
    assert hyp[0][0][0][0] == (0,)  # best hypothesis: the flip


def test_augment_flip_shift_rotate_and_labels_follow():
    vol, lab = head(20), np.zeros((32, 36, 30), np.int16)
    lab[8:14, 10:16, 5:12] = 1
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    rng = np.random.default_rng(0)
    cfg = {"flip_axis": 0, "shift_mm": 6.0, "rotation_deg": 8.0}
    out, olab, what = augment(vol, lab, affine, "flip", cfg, rng)
    assert np.array_equal(out, vol[::-1]) and np.array_equal(olab, lab[::-1]) and what == "flip axis 0"
    out, olab, what = augment(vol, lab, affine, "shift", cfg, rng)
    assert what.startswith("shift") and set(np.unique(olab)) <= {0, 1} and olab.sum() > 0
    com_in, com_out = ndimage.center_of_mass(lab), ndimage.center_of_mass(olab)
    assert np.linalg.norm((np.array(com_out) - com_in) * 2.0) == pytest.approx(6.0, abs=1.0)
    out, olab, what = augment(vol, lab, affine, "rotate", cfg, rng)
    assert "8.0 deg" in what and olab.dtype == lab.dtype and set(np.unique(olab)) <= {0, 1}
    with pytest.raises(ValueError, match="unknown augmentation"):
        augment(vol, lab, affine, "elastic", cfg, rng)


def _spiked_cfg(aug=True):
    cfg = {"n_replicas": 3, "n_nonreplicas": 2, "seed": 1, "levels": [{"strength": 0.5, "likert": 4}]}
    if aug:
        cfg["augmented"] = {"n_per_kind": 2, "kinds": ["flip", "shift", "rotate"], "strength": 0.5, "likert": 4,
                            "flip_axis": 0, "shift_mm": 8.0, "rotation_deg": 8.0}
    return cfg


def test_spiked_plan_with_augmented_replicas():
    train = [f"t{i:02d}" for i in range(12)]
    plan = spiked_plan(_spiked_cfg(), train, ["h1", "h2", "h3"])
    kinds = [r["augmentation"] for r in plan if r["kind"] == "replica"]
    assert sorted(kinds) == ["flip", "flip", "none", "none", "none", "rotate", "rotate", "shift", "shift"]
    sources = [r["source_id"] for r in plan if r["kind"] == "replica"]
    assert len(set(sources)) == len(sources)  # one source scan per replica
    assert all(r["augmentation"] == "none" for r in plan if r["kind"] == "heldout")
    assert plan == spiked_plan(_spiked_cfg(), train, ["h1", "h2", "h3"])  # deterministic
    assert "augmentation" not in spiked_plan(_spiked_cfg(False), train, ["h1", "h2", "h3"])[0]
    with pytest.raises(Exception, match="augmented replicas exceed the 8 training scans"):
        spiked_plan(_spiked_cfg(), train[:8], ["h1", "h2", "h3"])


def test_per_kind_scores_each_augmentation_against_the_same_nonreplicas():
    ranking = [{"synthetic_id": f"s{i}", "closest_training_id": c, "score": s} for i, (c, s) in enumerate(
        [("a1", 0.1), ("b1", 0.2), ("x1", 0.9), ("c1", 0.3), ("h", 0.8), ("h", 0.5)])]
    truth = {"s0": {"replica": True, "kind": "none", "source_patient": "A"},
             "s1": {"replica": True, "kind": "flip", "source_patient": "B"},
             "s2": {"replica": True, "kind": "flip", "source_patient": "X"},
             "s3": {"replica": True, "kind": "shift", "source_patient": "Z"},
             "s4": {"replica": False, "kind": "none", "source_patient": None},
             "s5": {"replica": False, "kind": "none", "source_patient": None}}
    patient_of = {"a1": "A", "b1": "B", "x1": "X", "c1": "C", "h": "H"}
    rows = {r["kind"]: r for r in per_kind(ranking, truth, 0.6, patient_of, "rmse")}
    assert list(rows) == ["none", "flip", "shift", "all"]
    assert rows["flip"]["sensitivity"] == 0.5 and rows["flip"]["specificity"] == 0.5
    assert rows["flip"]["balanced_accuracy"] == 0.5 and rows["flip"]["source_found"] == 1.0
    assert rows["shift"]["source_found"] == 0.0  # called a replica, but of the wrong patient
    assert rows["all"]["n_replicas"] == 4 and rows["all"]["sensitivity"] == 0.75
    assert rows["none"]["auc"] == 1.0 and rows["flip"]["auc"] == 0.5


@pytest.fixture
def params(root):
    return load_params(root / "params.yaml")


def test_alignment_params_are_checked(params):
    p = copy.deepcopy(params)
    p["relict"]["alignment"]["candidates"] = 3
    p["relict"]["alignment"]["datasets"] = ["ncct_demo_aug", "nope"]
    with pytest.raises(ParamsError) as exc:
        validate_params(p)
    msg = str(exc.value)
    assert "'nope' is not a dataset" in msg and "candidates: 3 is below relict.n_closest" in msg
    p = copy.deepcopy(params)
    p["relict"]["alignment"]["rank_candidates"] = p["relict"]["alignment"]["candidates"] - 1
    with pytest.raises(ParamsError, match="rank_candidates: .* is below relict.alignment.candidates"):
        validate_params(p)
    p["relict"]["alignment"]["rank_candidates"] = 0
    with pytest.raises(ParamsError, match="rank_candidates"):
        validate_params(p)
    p = copy.deepcopy(params)
    p["datasets"]["ncct_demo_aug"]["measures"] = ["rmse"]
    with pytest.raises(ParamsError, match=r"\['mae'\] are not measured on dataset 'ncct_demo_aug'"):
        validate_params(p)
    p = copy.deepcopy(params)
    p["relict"]["alignment"]["search"] = "none"
    validate_params(p)
    p["relict"]["alignment"]["search"] = "flips"
    with pytest.raises(ParamsError, match="relict.alignment.search"):
        validate_params(p)


def test_intensity_affine_fit_removes_a_global_intensity_change():
    src = head(8)
    syn = np.flip(src, 0) * np.float32(1.3) + np.float32(0.05)
    space = al.SearchSpace(flip_axes=(0,), intensity_affine=True)
    (res,) = al.align_pair_set(syn, [src], space, SP)
    assert res.transform.flips == (0,)
    assert res.transform.scale == pytest.approx(1 / 1.3, rel=1e-3) and res.rmse < 1e-4
    (without,) = al.align_pair_set(syn, [src], al.SearchSpace(flip_axes=(0,)), SP)
    assert without.rmse > 0.03


def test_candidate_search_from_files_reads_each_volume_once_and_equals_the_direct_calls():
    shape = (16, 18, 14)
    training = [head(s, shape) for s in range(30, 36)]
    syn = [al._integer_shift(np.flip(training[2], 0).copy(), (1, 0, 0)), training[2] + np.float32(0.01),
           training[4] + np.float32(0.02)]
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    reads, handed_out = {}, []

    def load(ref):
        reads[ref] = reads.get(ref, 0) + 1
        kind, i = ref
        v = (syn if kind == "s" else training)[i].copy()
        handed_out.append((ref, v))
        return v, affine

    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=4.0)
    syn_refs, train_refs = [("s", i) for i in range(3)], [("t", j) for j in range(6)]
    cand, hyp, spacing, _ = al.preselect_volumes(syn_refs, train_refs, load, space, 3, 2)
    assert spacing == [2.0, 2.0, 2.0] and cand.shape == (3, 3)
    assert cand[:, 0].tolist() == [2, 2, 4]  # the flipped copy, the copy, the other copy
    assert all(n == 1 for n in reads.values()) and len(reads) == 9  # each volume read once
    direct = al.preselect([al.block_mean(v, 2) for v in syn], [al.block_mean(v, 2) for v in training], space,
                          [4.0, 4.0, 4.0], 3, factor=1)
    np.testing.assert_array_equal(cand, direct[0])
    assert hyp == direct[1]

    reads.clear()
    handed_out.clear()
    seen = []
    pairs = al.align_candidates(syn_refs, train_refs, load, cand, hyp, space, spacing, progress=seen.append)
    assert seen == [1, 2, 3] and [len(r) for r in pairs] == [3, 3, 3]
    # candidate lists overlap (training 2 twice): the cache reads every candidate once
    assert len(set(cand.ravel().tolist())) < cand.size
    assert {j for (kind, j), n in reads.items() if kind == "t"} == set(cand.ravel().tolist())
    assert all(n == 1 for n in reads.values())
    assert all(not v.flags.writeable for (kind, _), v in handed_out if kind == "t")  # shared: read-only
    for i in range(3):
        expected = al.align_pair_set(syn[i], [training[j] for j in cand[i]], space, spacing, hyp[i])
        assert [(p.mae, p.rmse) for p in pairs[i]] == [(p.mae, p.rmse) for p in expected]
    assert pairs[0][0].transform.flips == (0,) and pairs[0][0].rmse < 0.5 * rmse(syn[0], training[2])

    # a cache of K volumes only: the same results, more reads
    reads.clear()
    small = al.align_candidates(syn_refs, train_refs, load, cand, hyp, space, spacing, cache_bytes=0)
    assert [[(p.mae, p.rmse) for p in r] for r in small] == [[(p.mae, p.rmse) for p in r] for r in pairs]
    assert sum(n for (kind, _), n in reads.items() if kind == "t") >= len(set(cand.ravel().tolist()))


def test_alignment_table_rows_and_columns():
    plain = {"mae": np.array([[0.5, 0.1, 0.4]]), "rmse": np.array([[0.6, 0.2, 0.5]])}
    shifted = al.Transform(flips=(0, 2), shift_vox=(1.0, -0.5, 0.0))
    rotated = al.Transform(rotation_axis=1, angle_deg=-7.5)
    pairs = [[al.PairResult(shifted, mae=0.3, rmse=0.35), al.PairResult(rotated, mae=0.4, rmse=0.45)]]
    rows = al.alignment_rows(["s1"], ["t1", "t2", "t3"], np.array([[2, 0]]), pairs, plain, (2.0, 3.0, 1.5))
    cols = al.alignment_columns(["mae", "rmse"])
    assert cols[-4:] == ["mae_plain", "mae_aligned", "rmse_plain", "rmse_aligned"]
    assert [list(r) for r in rows] == [cols, cols]
    first, second = rows
    assert (first["training_id"], first["candidate_rank"], first["flip_axes"], first["rotation_axis"]) == \
        ("t3", 1, "02", "")
    assert (first["shift_x_mm"], first["shift_y_mm"], first["shift_z_mm"]) == (2.0, -1.5, 0.0)
    assert first["transform"] == "flip02 shift=(2.0,-1.5,0.0)mm"
    assert (first["mae_plain"], first["mae_aligned"], first["rmse_plain"], first["rmse_aligned"]) == \
        (0.4, 0.3, 0.5, 0.35)
    assert (second["training_id"], second["candidate_rank"], second["rotation_axis"], second["angle_deg"]) == \
        ("t1", 2, 1, -7.5)
    assert second["transform"] == "rot1=-7.5deg" and second["mae_plain"] == 0.5


def test_mirrored_copy_on_an_odd_grid_is_a_candidate_and_aligned_without_rotation():
    # The demo's 61-voxel axis in 2-blocks: the block grid is not symmetric, so mirroring block
    # means is half a block off the block means of the mirrored volume. Before the fix the
    # mirrored copy ranked behind other heads (or came with a spurious rotation) and was missed.
    shape = (31, 34, 29)
    training = [head(s, shape) for s in range(20, 26)]
    for src in (1, 4):
        syn = np.flip(training[src], 0).copy() + np.random.default_rng(src).normal(0, 0.005, shape).astype(np.float32)
        refs = {"syn": (syn, np.diag([*SP, 1.0]))} | {f"t{j}": (t, np.diag([*SP, 1.0])) for j, t in enumerate(training)}
        cand, hyps, sp, _ = al.preselect_volumes(["syn"], [f"t{j}" for j in range(6)], refs.__getitem__, SPACE, 2, 2)
        assert cand[0][0] == src  # the mirrored copy's source is the best candidate
        pairs = al.align_pair_set(syn, [training[j] for j in cand[0]], SPACE, sp, hyps[0])
        assert pairs[0].transform.flips == (0,) and pairs[0].transform.angle_deg == 0
        assert pairs[0].rmse < 0.01


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_rotation_in_slabs_on_threads_is_bitwise_the_single_call(axis):
    """`rotate(workers=k)` splits the output along the rotation axis: the same values to the bit,
    anisotropic voxels and slabs of unequal size included (the last axis runs in one call)."""
    from synthaudit.relict.geometry import rotate

    v = np.random.default_rng(axis).random((23, 30, 17), dtype=np.float32) * 100
    one = rotate(v, axis, 7.5, [1.0, 0.8, 1.3])
    assert not np.array_equal(one, v)
    for workers in (2, 3, 40):
        np.testing.assert_array_equal(rotate(v, axis, 7.5, [1.0, 0.8, 1.3], workers=workers), one)
    # and the rotation itself: a 90-degree turn about the axis is the exact voxel permutation
    cube = np.random.default_rng(9).random((15, 15, 15), dtype=np.float32)
    turned = rotate(cube, axis, 90.0, [1.0] * 3, workers=2)
    a, b = [i for i in range(3) if i != axis]
    np.testing.assert_allclose(turned, np.rot90(cube, k=1, axes=(a, b)), atol=1e-5)


def test_summed_squares_equals_the_cumulative_sums_of_squares():
    a = np.random.default_rng(1).standard_normal((9, 11, 7)).astype(np.float32) * 50
    sat = al._summed_squares(a)
    expected = np.zeros((10, 12, 8))
    expected[1:, 1:, 1:] = (a.astype(np.float64) ** 2).cumsum(0).cumsum(1).cumsum(2)
    np.testing.assert_array_equal(sat, expected)
    assert sat[-1, -1, -1] == pytest.approx(float(np.sum(a.astype(np.float64) ** 2)), rel=1e-12)


def _hu(v: np.ndarray) -> np.ndarray:
    """A head() volume in CT-like units: -1,000 (air) outside, soft tissue and bone inside."""
    return (v * 1400.0 - 1000.0 + 40.0 * (v > 0)).astype(np.float32)


def test_shifted_copy_in_hu_is_found_padding_with_the_background():
    # Issue 29: CT kept in HU (air -1,000) was shifted with zero padding, so every uncovered face
    # became a 1,000 HU error; shifted copies were never found, and aligned distances exceeded plain.
    training = [_hu(head(s)) for s in range(30, 36)]
    rng = np.random.default_rng(5)
    syn = al._integer_shift(training[2] + 1000.0, (3, -4, 2)) - 1000.0  # a 6-8 mm shift on the 2 mm grid
    syn = syn + rng.normal(0, 5.0, syn.shape).astype(np.float32)
    level = al.background_level(training)
    assert level == -1000.0
    aligned = al.align_pair_set(syn, training, SPACE, SP, background=level)
    plain = [rmse(syn, t) for t in training]
    assert int(np.argmin([p.rmse for p in aligned])) == 2  # the source is the closest after alignment
    assert aligned[2].rmse < 0.2 * plain[2]  # ... by far: about the added noise
    assert aligned[2].transform.shift_vox == pytest.approx((-3.0, 4.0, -2.0), abs=0.3)
    for p, q in zip(aligned, plain):  # never above the plain value (float32 rounding aside)
        assert p.rmse <= q * (1 + 1e-6)
    # padding with 0 (water in HU) instead: the shift uncovers air as a 1,000 HU error
    zero = al.align_pair_set(syn, [training[2]], SPACE, SP, background=0.0)[0]
    assert zero.rmse > 3 * aligned[2].rmse
    # coarse-to-fine and the file-based driver give the same answer
    (c2f,) = al.align_pair_set_coarse_to_fine(syn, [training[2]], SPACE, SP, factor=2, background=level)
    assert c2f.rmse < 0.2 * plain[2]


def test_aligned_never_exceeds_plain_for_an_exact_copy_with_a_subvoxel_search():
    # an exact copy: the identity is best; a sub-voxel shift (linear interpolation blurs) or a
    # rotation found on block means must not be reported as a larger distance
    src = _hu(head(40))
    for factor in (1, 2):
        (res,) = al.align_pair_set_coarse_to_fine(src.copy(), [src], SPACE, SP, factor=factor,
                                                  background=al.background_level([src]))
        assert res.rmse == 0.0 and res.mae == 0.0 and res.transform.describe(SP) == "identity"
    other = _hu(head(41))
    for factor in (1, 2):
        (res,) = al.align_pair_set_coarse_to_fine(other, [src], SPACE, SP, factor=factor, background=-1000.0)
        assert res.rmse <= rmse(other, src) * (1 + 1e-6)  # float32 rounding of the subtracted background


def test_preselection_block_size_is_in_mm_and_fits_the_memory_budget():
    # the demo's 3 mm grid keeps its 2x2x2 blocks; a real 1.5 mm grid gets 4x4x4 (6 mm), not 3 mm blocks
    assert al.preselect_factor(6.0, (61, 73, 61), [3.0] * 3, SPACE, 4e9) == 2
    real = ((163, 163, 108), [1.5] * 3)
    assert al.preselect_factor(6.0, *real, SPACE, 4e9) == 4
    assert al.preselect_stack_bytes(*real, SPACE, 2) > 4e9  # the factor that stopped the user's run
    # a small budget moves to larger blocks instead of stopping
    f = al.preselect_factor(6.0, *real, SPACE, 1e8)
    assert f == 5 and al.preselect_stack_bytes(*real, SPACE, f) <= 1e8
    # an anisotropic CT grid: one factor from the geometric mean of the spacing
    assert al.preselect_factor(6.0, (512, 512, 60), [0.75, 0.75, 2.5], SPACE, 4e9) == 5
    with pytest.raises(ValueError, match="does not fit"):
        al.preselect_factor(6.0, *real, SPACE, 1e3)


def _real_t1() -> np.ndarray:
    """nibabel's shipped real T1 (anatomical.nii: 33 x 41 x 25 at 2 mm, a brain crop), scaled to [0, ~1]."""
    from pathlib import Path

    import nibabel
    import nibabel.tests

    img = nibabel.as_closest_canonical(nibabel.load(Path(nibabel.tests.__file__).parent / "data" / "anatomical.nii"))
    v = np.asarray(img.dataobj, np.float32)
    return v / np.percentile(v, 99)


def test_rotation_about_a_random_axis_is_refined_on_a_real_t1():
    # A generator's augmentation rotates about all three axes at once; the grid tries one axis at
    # a time. The joint refinement must find the rotation itself (not a nearby grid element).
    from scipy.spatial.transform import Rotation

    from synthaudit.relict.geometry import rigid_warp

    v, sp = _real_t1(), (2.0, 2.0, 2.0)
    rng = np.random.default_rng(1)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    rot = Rotation.from_rotvec(np.deg2rad(7.0) * axis).as_matrix()
    syn = rigid_warp(v, rot, [4.0, -5.0, 3.0], sp) + rng.normal(0, 0.01, v.shape).astype(np.float32)
    truth = np.degrees(Rotation.from_matrix(rot.T).as_rotvec())  # the inverse maps the copy back
    grid_only = al.SearchSpace(flip_axes=(0,), max_shift_mm=10.0, subvoxel=True, rotation_deg=(-10.0, -5.0, 5.0, 10.0))
    refined = al.SearchSpace(**{**grid_only.__dict__, "refine_top": 1, "refine_block_mm": 2.0})
    level = al.background_level([v])  # as the workflow does: the crop's faces are tissue, not air
    (g,) = al.align_pair_set_coarse_to_fine(syn, [v], grid_only, sp, factor=1, background=level)
    (r,) = al.align_pair_set_coarse_to_fine(syn, [v], refined, sp, factor=1, background=level)
    assert r.transform.rotvec_deg is not None
    assert np.abs(np.asarray(r.transform.rotvec_deg) - truth).max() < 1.0  # the grid's best was 2-3 deg off
    assert r.rmse < 0.9 * g.rmse < 0.5 * rmse(syn, v)
    # the refined transform reproduces its value through apply(), and outside the group it is refused
    moved = al.apply(syn - level, r.transform, sp) + level
    region = al.overlap(v.shape, r.transform, sp)  # where the moved copy has data (the crop's faces are tissue)
    assert rmse(moved[region], v[region]) == pytest.approx(r.rmse, rel=1e-4)
    assert r.rmse < 0.85 * rmse(moved, v)  # over the whole grid the uncovered band, padded, adds 25 %
    narrow = al.SearchSpace(**{**refined.__dict__, "rotation_deg": (-2.0, 2.0)})
    assert al.refine_rigid(syn - level, v - level, r.transform, narrow, sp) is None


def test_aligned_rmse_separates_shifted_copies_when_the_body_fills_the_field_of_view():
    """Issue 43: a CT whose body touches every face, copies shifted 4.5-9 mm. The band a shift
    uncovers is padded with the background level and, over the whole grid, compared with tissue:
    RMSE squares it. Over the overlap the copy is at the noise level again, and aligned RMSE
    separates every copy from every new patient, as aligned MAE does."""
    sp, shape, noise = (1.5, 1.5, 1.5), (40, 44, 36), 0.02

    def patient(seed):
        rng = np.random.default_rng(seed)
        coarse = ndimage.gaussian_filter(rng.normal(size=shape), 4) * 6
        fine = ndimage.gaussian_filter(rng.normal(size=shape), 1) * 0.6
        return np.clip(0.5 + coarse + fine, 0.05, 0.95).astype(np.float32)  # tissue everywhere, windowed

    training = [patient(s) for s in range(5)]
    rng = np.random.default_rng(43)
    copies = [ndimage.shift(training[k], shift, order=1, mode="nearest") + rng.normal(0, noise, shape)
              for k, shift in ((0, (3, 5, 5)), (1, (-4, 3, 0)), (2, (6, -3, 4)))]
    new = [patient(100 + s) + rng.normal(0, noise, shape) for s in range(3)]
    space = al.SearchSpace(max_shift_mm=10.0, subvoxel=False)
    level = al.background_level(training)
    best = []
    for syn in [c.astype(np.float32) for c in copies + new]:
        found = al.align_pair_set(syn, training, space, sp, background=level)
        best.append(min(found, key=lambda p: p.rmse))
    copy_rmse, new_rmse = [b.rmse for b in best[:3]], [b.rmse for b in best[3:]]
    assert max(copy_rmse) < 2 * noise  # the shifted copy back at the noise level over the overlap
    assert max(copy_rmse) < 0.5 * min(new_rmse)
    for b, shift in zip(best[:3], ((3, 5, 5), (-4, 3, 0), (6, -3, 4))):
        assert tuple(-x for x in b.transform.shift_vox) == shift
        # over the whole grid (the padded band compared with tissue) the same transform is far worse
        full = rmse(al.apply(copies[best.index(b)] - level, b.transform, sp) + level, training[best.index(b)])
        assert b.rmse < 0.6 * full
    assert max(b.mae for b in best[:3]) < 0.5 * min(b.mae for b in best[3:])


@pytest.mark.parametrize("shift", [(2.0, -3.0, 1.0), (1.5, 0.0, -2.25), (0.0, 0.0, 0.0)])
def test_the_fast_overlap_sums_equal_the_masked_difference(shift):
    """_measured's fast path (the grid's sums less the uncovered band's) is the exact path's mean
    over the overlap box."""
    rng = np.random.default_rng(7)
    vol, t = (rng.random((20, 18, 16)).astype(np.float32) for _ in range(2))
    tr = al.Transform(shift_vox=shift)
    fast = al._measured(vol, t, tr, al.SearchSpace(), SP)
    exact = al._measured(vol, t, tr, al.SearchSpace(), SP, exact=True)
    assert (fast.mae, fast.rmse) == pytest.approx((exact.mae, exact.rmse), rel=1e-6)
    region = al.overlap(t.shape, tr, SP)
    moved = al.apply(vol, tr, SP)
    expected = rmse(moved, t) if region is None else rmse(moved[region], t[region])
    assert exact.rmse == pytest.approx(expected, rel=1e-9)
    if any(shift):
        assert all(moved[tuple(r if k == a else slice(None) for k in range(3))].size for a, r in enumerate(region))
