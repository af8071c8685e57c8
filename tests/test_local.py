"""The local level (relict/local.py): block geometry, block distances, per-block ratios and
the local score, against brute-force definitions and on a pasted region."""

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from synthaudit.relict import local
from synthaudit.relict.ratio import distance_ratio


def test_block_grid_is_sized_in_mm_and_blocks_are_two_cells_per_axis():
    g = local.BlockGrid.from_mm((40, 30, 20), (1.0, 1.5, 3.0), 24.0)
    assert g.cell == (12, 8, 4) and g.n_cells == (3, 3, 5) and g.n_blocks_per_axis == (2, 2, 4)
    assert g.block_ranges(0) == ((0, 24), (0, 16), (0, 8))
    assert g.block_ranges(g.n_blocks - 1) == ((12, 36), (8, 24), (12, 20))
    centre = g.block_centre_mm(0, np.diag([1.0, 1.5, 3.0, 1.0]))
    assert centre == pytest.approx((11.5, 11.25, 10.5))
    with pytest.raises(ValueError, match="do not fit"):
        local.BlockGrid.from_mm((10, 10, 10), (1.0, 1.0, 1.0), 24.0)
    assert local.BlockGrid.from_mm((40, 40, 10), (1.0, 1.0, 1.0), 24.0, clamp=True).cell == (12, 12, 5)


def test_block_means_and_pair_distances_match_brute_force():
    rng = np.random.default_rng(0)
    g = local.BlockGrid.from_mm((13, 11, 9), (1.0, 1.0, 1.0), 4.0)  # cells of 2: partial cells dropped
    syn, train = rng.normal(size=(3, 13, 11, 9)), rng.normal(size=(4, 13, 11, 9))
    for measure, f in (("block_mae", np.abs), ("block_mse", np.square)):
        d = local.all_pairs_block_distances(syn, iter(train), g, measure)
        assert d.shape == (3, 4, g.n_blocks)
        for b in (0, 7, g.n_blocks - 1):
            (x0, x1), (y0, y1), (z0, z1) = g.block_ranges(b)
            want = f(syn[2, x0:x1, y0:y1, z0:z1] - train[1, x0:x1, y0:y1, z0:z1]).mean()
            assert d[2, 1, b] == pytest.approx(want, rel=1e-5)
    keep = np.zeros(g.n_blocks, bool)
    keep[[1, 4]] = True
    np.testing.assert_allclose(local.all_pairs_block_distances(syn, train, g, "block_mse", blocks=keep),
                               local.all_pairs_block_distances(syn, train, g, "block_mse")[:, :, keep])
    with pytest.raises(ValueError, match="choose one of"):
        local.all_pairs_block_distances(syn, train, g, "ssim")


def test_cell_sums_of_several_training_volumes_match_numpy():
    # the kernel reads training volumes in pairs: an odd count checks the remainder
    rng = np.random.default_rng(5)
    syn, train = rng.normal(size=(2, 14, 12, 11)).astype(np.float32), rng.normal(size=(3, 14, 12, 11)).astype(np.float32)
    abs_c, sq_c = local.cell_error_sums(syn, train, (3, 4, 5))
    assert abs_c.shape == sq_c.shape == (2, 3, 4, 3, 2)
    d = (syn[:, None] - train[None])[..., :12, :12, :10].astype(np.float64)
    for out, f in ((abs_c, np.abs), (sq_c, np.square)):
        want = f(d).reshape(2, 3, 4, 3, 3, 4, 2, 5).sum(axis=(3, 5, 7))
        np.testing.assert_allclose(out, want, rtol=1e-5)


def test_block_ratio_is_relicts_ratio_block_by_block():
    rng = np.random.default_rng(1)
    d = rng.uniform(0.1, 1.0, size=(5, 12, 7))
    r = local.block_ratios(d, 4)
    for b in range(7):
        ref = distance_ratio(d[:, :, b], 4)
        np.testing.assert_allclose(r.ratio[:, b], ref.ratio)
        np.testing.assert_array_equal(r.closest[:, b], ref.closest)
    zero = local.block_ratios(np.zeros((1, 3, 2)), 2)
    np.testing.assert_array_equal(zero.ratio, 1.0)  # 0 / 0: nothing to tell


@pytest.mark.parametrize("n_closest", [1, 3, 6, 9])
def test_streamed_nearest_blocks_give_the_whole_arrays_ratio_bits(n_closest):
    # distances on a coarse lattice: many ties, which the first training volume must win as argmin's
    rng = np.random.default_rng(7)
    d = (rng.integers(1, 6, size=(4, 6, 5)) * 0.25).astype(np.float32)
    d[0, :, 0] = 0.0  # 0 / 0: nothing to tell
    stream = local.NearestBlocks(n_closest)
    for j in range(d.shape[1]):
        stream.add(d[:, j])
    got, want = stream.ratios(), local.block_ratios(d, n_closest)
    assert got.n_used == want.n_used == min(n_closest, 6)
    np.testing.assert_array_equal(got.ratio, want.ratio)
    np.testing.assert_array_equal(got.closest, want.closest)
    np.testing.assert_array_equal(got.closest, d.argmin(axis=1))
    for b in range(5):  # RELICT's ratio, block by block, from the whole column
        col = np.sort(d[:, :, b].astype(np.float64), axis=1)
        np.testing.assert_allclose(got.ratio[1:, b], col[1:, 0] / col[1:, :min(n_closest, 6)].mean(axis=1))
    assert got.ratio[0, 0] == 1.0
    with pytest.raises(ValueError, match="shape"):
        stream.add(d[:, 0, :3])
    with pytest.raises(ValueError, match="no training volumes"):
        local.NearestBlocks(2).ratios()


def test_the_streamed_columns_are_the_whole_arrays_columns():
    rng = np.random.default_rng(8)
    g = local.BlockGrid.from_mm((12, 10, 8), (1.0, 1.0, 1.0), 4.0)
    syn, train = rng.normal(size=(3, 12, 10, 8)), rng.normal(size=(5, 12, 10, 8))
    whole = local.all_pairs_block_distances(syn, train, g, "block_mae")
    seen = []
    cols = list(local.block_distance_columns(syn, iter(train), g, "block_mae", progress=seen.append))
    np.testing.assert_array_equal(np.stack(cols, axis=1), whole)
    assert seen == [1, 2, 3, 4, 5]


def _head(rng, shape=(36, 36, 36)):
    """A smooth random 'anatomy' inside a sphere, air (0) outside."""
    x = gaussian_filter(rng.normal(size=shape), 2.0) * 8 + 1.0
    grid = np.indices(shape) - (np.array(shape)[:, None, None, None] - 1) / 2
    return np.where((grid ** 2).sum(0) < (shape[0] / 2 - 1) ** 2, x, 0.0).astype(np.float32)


def test_a_pasted_region_gives_its_block_the_lowest_standardised_ratio():
    rng = np.random.default_rng(2)
    train = np.stack([_head(rng) for _ in range(12)])
    held = np.stack([_head(rng) for _ in range(10)])
    novel = np.stack([_head(rng) for _ in range(3)])
    spiked = novel.copy()
    spiked[0, 6:18, 12:24, 12:24] = train[5, 6:18, 12:24, 12:24]  # a 12-voxel cube of training scan 5
    g = local.BlockGrid.from_mm(train.shape[1:], (1.0, 1.0, 1.0), 12.0)
    keep = local.anatomy_blocks(g, train.mean(0), 0.0, float(train.max() - train.min()))
    assert 0 < keep.sum() < g.n_blocks
    ratios = local.block_ratios(local.all_pairs_block_distances(spiked, train, g, "block_mse", keep), 5)
    held_r = local.block_ratios(local.all_pairs_block_distances(held, train, g, "block_mse", keep), 5)
    scores = local.local_scores(ratios, held_r)
    held_scores = local.local_scores(held_r, held_r, [f"p{i}" for i in range(10)], self_is_heldout=True)
    assert scores.score[0] < scores.score[1:].min() and scores.score[0] < held_scores.score.min()
    assert scores.closest[0] == 5
    ranges = g.block_ranges(np.flatnonzero(keep)[scores.block[0]])
    assert ranges == ((6, 18), (12, 24), (12, 24))  # the pasted cube is exactly one block here
    # the whole-volume ratio of the same volume stays among the novel ones' (the dilution)
    whole = distance_ratio(((spiked[:, None] - train[None]) ** 2).mean(axis=(2, 3, 4)), 5).ratio
    assert whole[0] > 0.5 * whole[1:].min()


def test_held_out_scans_are_standardised_without_their_own_patient():
    ratio = np.array([[0.1, 0.9], [0.8, 0.8], [0.9, 0.7], [0.7, 0.9]])
    r = local.BlockRatios(ratio, np.zeros_like(ratio, dtype=int), 2)
    own = local.local_scores(r, r, ["a", "b", "c", "d"], self_is_heldout=True)
    alone = local.standardise_blocks(ratio[:1], ratio[1:])
    assert own.z[0] == pytest.approx(alone[0])
    with pytest.raises(ValueError, match="patient ids"):
        local.local_scores(r, r, self_is_heldout=True)


# --- positive controls -----------------------------------------------------------------------------


def test_paste_weights_are_one_inside_ramp_over_the_margin_and_zero_beyond():
    w = local.paste_weights((21, 21, 21), (10, 10, 10), (6, 6, 6), (2, 2, 2))
    assert w[10, 10, 10] == 1 and w[7, 10, 10] == 1 and w[13, 10, 10] == 1  # |x - 10| <= 3
    assert w[14, 10, 10] == pytest.approx(0.5) and w[6, 10, 10] == pytest.approx(0.5)  # 1 voxel into a 2-voxel ramp
    assert w[15, 10, 10] == 0 and w[0, 0, 0] == 0
    assert w[14, 14, 10] == pytest.approx(0.25)  # separable: the product of the axes' ramps
    hard = local.paste_weights((9, 9, 9), (4, 4, 4), (3, 3, 3), (0, 0, 0))
    assert set(np.unique(hard)) == {0.0, 1.0} and hard.sum() == 27


def test_controls_give_every_recipient_each_size_and_use_every_donor_before_repeating_one():
    plan = local.plan_controls(7, 3, [20.0, 30.0], seed=4)
    assert len(plan) == 14
    for size in (20.0, 30.0):
        rows = [(r, d) for s, r, d in plan if s == size]
        assert [r for r, _ in rows] == list(range(7))
        donors = [d for _, d in rows]
        assert sorted(donors[:3]) == [0, 1, 2] and sorted(donors[3:6]) == [0, 1, 2]
    assert plan == local.plan_controls(7, 3, [20.0, 30.0], seed=4)  # seeded
    assert plan != local.plan_controls(7, 3, [20.0, 30.0], seed=5)
    with pytest.raises(ValueError, match="training scans"):
        local.plan_controls(3, 0, [20.0], 0)


def test_spike_pastes_the_donor_inside_and_keeps_the_recipient_outside():
    rng = np.random.default_rng(0)
    recipient, donor = rng.normal(size=(2, 30, 30, 30)).astype(np.float32)
    out = local.spike(recipient, donor, (15, 15, 15), 10.0, (1.0, 1.0, 1.0), 2.0, 0.0, rng)
    np.testing.assert_array_equal(out[11:20, 11:20, 11:20], donor[11:20, 11:20, 11:20])
    np.testing.assert_array_equal(out[:8], recipient[:8])
    noisy = local.spike(recipient, donor, (15, 15, 15), 10.0, (1.0, 1.0, 1.0), 2.0, 0.5, np.random.default_rng(1))
    resid = (noisy - donor)[11:20, 11:20, 11:20]
    assert resid.std() == pytest.approx(0.5, rel=0.1)  # fresh noise on the region only
    np.testing.assert_array_equal(noisy[:8], recipient[:8])


def test_noise_estimates_recover_a_known_sd():
    rng = np.random.default_rng(3)
    anatomy = gaussian_filter(rng.normal(size=(3, 24, 24, 24)), 4) * 20
    scans = np.concatenate([anatomy + rng.normal(0, 0.1, anatomy.shape), anatomy + rng.normal(0, 0.1, anatomy.shape)])
    patients = ["a", "b", "c", "a", "b", "c"]
    assert local.rescan_noise_sd(scans, patients) == pytest.approx(0.1, rel=0.05)
    assert local.rescan_noise_sd(scans[:3], patients[:3]) is None  # nobody scanned twice
    flat = np.full((2, 24, 24, 24), 5.0) + rng.normal(0, 0.2, (2, 24, 24, 24))
    assert local.neighbour_noise_sd(flat, np.ones(flat.shape, bool)) == pytest.approx(0.2, rel=0.05)


def test_informative_centre_chooses_structure_inside_the_anatomy_not_its_outline():
    # a head of flat tissue (1.0) in air (0) with one textured region: the old rule (most unlike the
    # cohort's mean) went to the outline; the region with structure is where a copy can be seen
    shape = (40, 40, 40)
    grid = np.indices(shape) - 19.5
    head = ((grid ** 2).sum(0) < 18 ** 2).astype(np.float32)
    donor = head.copy()
    texture = gaussian_filter(np.random.default_rng(1).normal(size=shape), 1.0).astype(np.float32) * 3
    donor[12:22, 22:30, 14:24] += texture[12:22, 22:30, 14:24]
    inside = head > 0
    for seed in range(5):
        centre, info = local.informative_centre(donor, inside, (8, 8, 8), np.random.default_rng(seed))
        sl = local.cube_slices(shape, centre, (8, 8, 8))
        assert inside[sl].mean() >= 0.9, centre  # inside the head, not on its edge
        assert (np.abs(donor[sl] - head[sl]) > 0).mean() > 0.1, centre  # it overlaps the textured region
        assert info == pytest.approx(donor[sl][inside[sl]].std(), rel=0.2)
    # a label class restricts the centres: a cube around the 'tumour', not the textured region
    tumour = np.zeros(shape, bool)
    tumour[25:28, 10:13, 25:28] = True
    centre, _ = local.informative_centre(donor, inside, (8, 8, 8), np.random.default_rng(0), within=tumour)
    assert tumour[tuple(int(c) for c in centre)]


def test_rarest_label_is_the_tumour_not_the_organ():
    lab = np.zeros((20, 20, 20), np.uint8)
    lab[2:18, 2:18, 2:18] = 1  # liver
    lab[8:11, 8:11, 8:11] = 2  # tumour inside it
    lab[0, 0, :3] = 3  # three stray voxels: fewer than min_voxels, not a class to centre on
    mask, c = local.rarest_label(lab)
    assert c == 2 and mask.sum() == 27
    assert local.rarest_label(np.zeros((4, 4, 4), np.uint8)) == (None, None)


def test_covering_block_overlaps_the_cube_most():
    g = local.BlockGrid.from_mm((24, 24, 24), (1.0, 1.0, 1.0), 8.0)  # cells of 4, blocks of 8
    kept = np.arange(g.n_blocks)
    j, inside = local.covering_block(g, kept, (12.0, 12.0, 12.0), (8, 8, 8))
    assert g.block_ranges(int(kept[j])) == ((8, 16), (8, 16), (8, 16)) and inside == 1.0
    j, inside = local.covering_block(g, kept, (10.0, 12.0, 12.0), (8, 8, 8))  # 6 of the block's 8 voxels in x
    assert inside == pytest.approx(6 / 8)
    assert local.covering_block(g, kept[:1], (22.0, 22.0, 22.0), (2, 2, 2)) == (None, 0.0)  # block 0 ends at 8


def test_smoothed_noise_factor_is_the_sd_of_smoothed_white_noise():
    from synthaudit.relict.local_audit import smoothed_noise_factor, terciles

    noise = np.random.default_rng(3).normal(size=(80, 80, 80))
    sigma = [1.5, 2.0, 1.0]
    interior = gaussian_filter(noise, sigma)[10:-10, 10:-10, 10:-10]  # away from the reflected edges
    assert smoothed_noise_factor(sigma) == pytest.approx(interior.std(), rel=0.03)
    assert smoothed_noise_factor([0, 0, 0]) == 1.0
    assert terciles([5, 1, 3, 2, 6, 4]) == ["high", "low", "mid", "low", "high", "mid"]


def _cohort(rng, n_train=12, held_patients=10, scans_each=2, shape=(36, 36, 36)):
    """Training patients (one scan each), held-out patients scanned ``scans_each`` times (two scans
    of a patient: the same head plus fresh noise), three new patients and one local copy: a new
    head holding a 14-voxel cube of training scan 5."""
    from synthaudit.relict.local_audit import Cohort

    train = np.stack([_head(rng, shape) for _ in range(n_train)])
    held, held_p = [], []
    for p in range(held_patients):
        head = _head(rng, shape)
        for _ in range(scans_each):
            held.append(head + rng.normal(0, 0.05, shape).astype(np.float32))
            held_p.append(f"h{p}")
    syn = np.stack([_head(rng, shape) for _ in range(4)])
    syn[3, 8:22, 11:25, 11:25] = train[5, 8:22, 11:25, 11:25]
    return Cohort(synthetic=syn, heldout=np.stack(held), load_training=lambda j: train[j],
                  training_ids=[f"t{j}" for j in range(n_train)], training_patients=[f"t{j}" for j in range(n_train)],
                  synthetic_ids=["new0", "new1", "new2", "copy"], heldout_ids=[f"h{k}" for k in range(len(held))],
                  heldout_patients=held_p, spacing_mm=[1.0, 1.0, 1.0], affine=np.eye(4))


def _settings(**kw):
    from synthaudit.relict.local_audit import LocalSettings

    base = dict(block_mm=12.0, smooth_mm=0.0, measure="block_mse", sizes_mm=[14.0], margin_mm=1.0, noise_sd=0.05,
                seed=0, n_closest=5, rate=0.05)
    return LocalSettings(**{**base, **kw})


def test_local_audit_calls_the_copy_and_its_controls_carry_their_diagnostics():
    from synthaudit.relict import local_audit

    cohort = _cohort(np.random.default_rng(7))
    result = local_audit.run(cohort, _settings())
    calls = {r["synthetic_id"]: r for r in result.calls}
    assert calls["copy"]["called"] == 1 and calls["copy"]["closest_training_id"] == "t5"
    assert not any(calls[f"new{i}"]["called"] for i in range(3))
    s = result.summary
    assert s["called"] == ["copy"] and s["heldout_called_leave_patient_out"] <= 1
    ctl = s["controls"]
    assert ctl["n"] == len(result.controls) == 20 and ctl["centred_on"] == {"informative": 20}
    e = ctl["by_size_mm"]["14"]
    # 10 patients scanned twice: each control is judged against the 19 other held-out scans (1/20 = 0.05 is
    # reachable); leaving its patient out (18) could call none of them
    assert e["smallest_possible_rate"] == pytest.approx(1 / 20)
    assert e["sensitivity"] >= 0.9, result.controls
    assert sorted(r["distinctiveness_tercile"] for r in result.controls).count("high") in (6, 7)
    for r in result.controls:
        assert r["region_donor_closest"] == 1 and r["region_contrast"] > local_audit.LOW_CONTRAST
        if r["called"]:
            assert r["local_score"] < r["null_cutoff"] or r["fpr"] <= 0.05
    assert ctl["reasons"] == {}  # nothing to explain


def test_local_audit_explains_controls_that_cannot_be_found():
    from synthaudit.relict import local_audit

    # the fresh noise of the pasted regions drowns them: a block of the donor plus noise of SD 3 (the heads'
    # anatomy varies by about 1) is no closer to the donor than to anyone
    cohort = _cohort(np.random.default_rng(8))
    result = local_audit.run(cohort, _settings(noise_sd=3.0))
    e = result.summary["controls"]["by_size_mm"]["14"]
    assert e["sensitivity"] < local_audit.EXPLAIN_BELOW
    reason = result.summary["controls"]["reasons"]["14"]
    assert reason.startswith("14 mm controls,") and "because" in reason and "cut-off" in reason
    # too few held-out scans for the rate: the reason says no control can be called
    small = _cohort(np.random.default_rng(9), held_patients=5)
    result = local_audit.run(small, _settings())
    e = result.summary["controls"]["by_size_mm"]["14"]
    assert e["sensitivity"] == 0 and e["smallest_possible_rate"] == pytest.approx(1 / 10)
    assert "no control can be called" in result.summary["controls"]["reasons"]["14"]


def test_control_reasons_name_the_most_basic_cause_first():
    from synthaudit.relict.local_audit import control_reasons

    base = dict(sensitivity=0.1, median_region_contrast=20.0, donor_closest_at_region=1.0,
                median_region_block_score=0.3, median_null_cutoff=0.02, median_distinctiveness=15.0,
                median_region_block_covered=1.0, smallest_possible_rate=0.04)
    cases = {
        "no control can be called": dict(smallest_possible_rate=1 / 19),
        "barely differ from what they replaced": dict(median_region_contrast=1.0),
        "closest training scan at the region's block in only 30%": dict(donor_closest_at_region=0.3),
        "the null is wide": {},
        "near the cut-off": dict(median_region_block_score=0.01),
    }
    for phrase, change in cases.items():
        reason = control_reasons({"30": {**base, **change}}, 0.05)["30"]
        assert phrase in reason and reason.startswith("30 mm controls, 0.10 called, because"), reason
        assert "of the block that covers them most" not in reason
    partly = control_reasons({"20": {**base, "median_region_block_covered": 0.8}}, 0.05)["20"]
    assert "the null is wide" in partly and "a median 80% of the block" in partly  # said beside the cause
    assert control_reasons({"40": {**base, "sensitivity": 0.9}}, 0.05) == {}  # nothing to explain


def test_the_smoothing_is_given_in_mm_with_a_floor_in_voxels():
    """relict.local.smooth_mm per axis in voxels, never under smooth_min_vox voxels (a thick slice's axis,
    a coarse grid), and none at all where smooth_mm is 0."""
    from synthaudit.relict.local_audit import smoothing_sigma_vox

    assert smoothing_sigma_vox(2.25, [1.5, 1.5, 1.5], 0.75) == [1.5, 1.5, 1.5]
    assert smoothing_sigma_vox(2.25, [0.75, 0.75, 5.0], 0.75) == [3.0, 3.0, 0.75]
    assert smoothing_sigma_vox(2.25, [4.0, 4.0, 4.0], 0.75) == [0.75, 0.75, 0.75]
    assert smoothing_sigma_vox(2.25, [3.0, 3.0, 3.0], 0.75) == [0.75, 0.75, 0.75]  # the demo's grid: unchanged
    assert smoothing_sigma_vox(0.0, [4.0, 4.0, 4.0], 0.75) == [0.0, 0.0, 0.0]
