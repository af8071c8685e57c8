"""The fast alignment paths against their reference definitions, and the scale bench's plumbing."""

import itertools
import json

import numpy as np
import pytest

from synthaudit.relict import alignment as al
from synthaudit.relict.ratio import distance_ratio

from test_alignment import SP, SPACE, head, rmse


def test_shift_stack_rows_and_energies_equal_integer_shifts():
    a = head(1, (12, 10, 9))
    m = (2, 1, 2)
    rows, energy = al._shift_stack(a, m), al._shift_energies(a, m)
    r = 0
    for i in range(2 * m[0] + 1):
        for j in range(2 * m[1] + 1):
            for k in range(2 * m[2] + 1):
                moved = al._integer_shift(a, (m[0] - i, m[1] - j, m[2] - k)).ravel()
                assert np.array_equal(rows[r], moved)
                assert energy[r] == pytest.approx(np.sum(moved.astype(np.float64) ** 2), rel=1e-12)
                r += 1
    assert np.array_equal(rows[al._identity_row(m)], a.ravel())


def test_gemm_preselection_equals_the_fft_reference():
    training = [head(s) for s in range(10, 20)]
    syn = [al._integer_shift(np.flip(training[5], 0).copy(), (1, 0, -2)),
           al.rotate(training[2], 1, 6.0, SP) + np.float32(0.01), head(40),
           al._integer_shift(training[7], (-2, 2, 0))]
    small_t, small_s = [al.block_mean(v, 2) for v in training], [al.block_mean(v, 2) for v in syn]
    ref_c, ref_h = al.preselect(small_s, small_t, SPACE, [4.0] * 3, k=5, factor=1)
    cand, hyp, coarse = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=5, threads=1, prune=False)
    np.testing.assert_array_equal(cand, ref_c)
    assert hyp == ref_h
    for k in (1, 2, 3):  # early rejection is exact: the same k candidates and hypotheses
        ref_k = al.preselect(small_s, small_t, SPACE, [4.0] * 3, k=k, factor=1)
        pruned = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=k, threads=1, prune=True)
        np.testing.assert_array_equal(pruned[0], ref_k[0])
        assert pruned[1] == ref_k[1]
    assert cand[0, 0] == 5 and cand[1, 0] == 2 and cand[3, 0] == 7
    # the coarse errors: plain = identity at zero shift, aligned = the best (never above plain)
    for i, s in enumerate(small_s):
        for j, t in enumerate(small_t):
            assert coarse.plain[i, j] == pytest.approx(np.mean((s.astype(np.float64) - t) ** 2), rel=1e-4)
    assert np.all(coarse.aligned <= coarse.plain * (1 + 1e-6))


def test_gemm_preselection_within_a_shortlist_is_the_full_search_restricted_to_it():
    """relict.search: ``allowed`` limits each synthetic volume's candidates to its shortlist; with every
    training volume allowed it is the full search, and a shortlist holding the true source keeps it first."""
    training = [head(s) for s in range(10, 20)]
    syn = [al._integer_shift(np.flip(training[5], 0).copy(), (1, 0, -2)), head(40)]
    small_t, small_s = [al.block_mean(v, 2) for v in training], [al.block_mean(v, 2) for v in syn]
    full = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=3, threads=1)
    every = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=3, threads=1, allowed=[np.arange(10)] * 2)
    np.testing.assert_array_equal(every[0], full[0])
    assert every[1] == full[1]
    allowed = [np.array([9, 5, 1, 3]), np.array([0, 2, 4, 6, 8])]
    part = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=3, threads=1, allowed=allowed)
    for row, ok in zip(part[0], allowed):
        assert set(row) <= set(ok)
    assert part[0][0, 0] == 5
    # the full search's ranking restricted to the allowed ones (exact scores: no pruning below k)
    plain = al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=10, threads=1, prune=False)[0]
    for row, ok, ref in zip(part[0], allowed, plain):
        assert list(row) == [j for j in ref if j in set(ok)][:3]
    with pytest.raises(ValueError, match="fewer than the 3 candidates"):
        al.preselect_gemm(small_s, small_t, SPACE, [4.0] * 3, k=3, threads=1, allowed=[np.array([1, 2])] * 2)


def test_local_shift_equals_brute_force_and_descends_to_the_optimum():
    a, t = head(1, (14, 12, 11)), head(2, (14, 12, 11))
    loc = al.LocalShift(a.shape, (3, 2, 3))
    mv, fx = loc.moving(a), loc.fixed(t)
    for d in [(0, 0, 0), (3, -2, 1), (-3, 2, -3), (1, 1, 1), (-1, 0, 2)]:
        brute = float(np.sum((al._integer_shift(a, d).astype(np.float64) - t) ** 2))
        assert loc.ssd(mv, fx, d) == pytest.approx(brute, rel=1e-5)
    src = head(3, (20, 22, 18))
    moved = al._integer_shift(src, (2, -3, 1))
    loc = al.LocalShift(src.shape, (4, 4, 4))
    shift, value = loc.descend(loc.moving(moved), loc.fixed(src), (0, 0, 0), subvoxel=False)
    assert shift == (-2.0, 3.0, -1.0)


def test_coarse_to_fine_finds_the_reference_transform_of_a_replica():
    sp = (1.0, 1.0, 1.0)
    src, other = head(3, (64, 72, 60)), head(4, (64, 72, 60))
    syn = al.rotate(np.flip(src, 0).copy(), 2, 7.0, sp)
    syn = al._integer_shift(syn, (3, -2, 1)) + np.random.default_rng(0).normal(0, 0.01, src.shape).astype(np.float32)
    ref = al.align_pair_set(syn, [src, other], SPACE, sp)
    fast = al.align_pair_set_coarse_to_fine(syn, [src, other], SPACE, sp, factor=2)
    assert fast[0].transform.describe(sp) == ref[0].transform.describe(sp)
    assert fast[0].rmse == pytest.approx(ref[0].rmse, rel=1e-3)
    assert fast[0].rmse < 0.5 * fast[1].rmse and fast[0].rmse < 0.3 * rmse(syn, src)
    direct, region = al.apply(syn, fast[0].transform, sp), al.overlap(src.shape, fast[0].transform, sp)
    # the reported value is the transform's, over the voxels where the moved copy has data
    assert fast[0].rmse == pytest.approx(rmse(direct[region], src[region]), rel=1e-5)
    # factor 1 is the reference itself; the identity search stays plain RELICT
    one = al.align_pair_set_coarse_to_fine(syn, [src], SPACE, sp, factor=1)
    assert (one[0].mae, one[0].rmse) == (ref[0].mae, ref[0].rmse)
    (ident,) = al.align_pair_set_coarse_to_fine(syn, [src], al.SearchSpace(), sp, factor=2)
    diff = syn.astype(np.float64) - src
    assert ident.rmse == pytest.approx(np.sqrt(np.mean(diff ** 2)), rel=1e-6)  # float32 difference, float64 sums


def test_refine_factor_from_mm():
    assert al.refine_factor(2.0, [1.0] * 3) == 2 and al.refine_factor(2.0, [2.0] * 3) == 1
    assert al.refine_factor(None, [1.0] * 3) == 1 and al.refine_factor(4.0, [1.0, 1.0, 2.0]) == 2
    # the fewest voxels reaching coarse_mm: a 1.5 mm grid gets 3 mm blocks, the demo's 3 mm grid none
    assert al.refine_factor(2.0, [1.5] * 3) == 2 and al.refine_factor(2.0, [3.0] * 3) == 1
    assert al.refine_factor(2.0, [0.7] * 3) == 3 and al.refine_factor(2.0, [1.9, 1.5, 1.5]) == 2


def test_estimated_rmse_keeps_candidates_and_stays_below_plain():
    plain = np.array([[1.0, 2.0, 3.0]])
    coarse = al.CoarseErrors(plain=np.array([[0.5, 2.0, 1.0]]), aligned=np.array([[0.1, 0.5, 1.2]]))
    aligned = np.array([[0.4, 2.0, 3.0]])
    est = al.estimated_rmse(plain, coarse, np.array([[0]]), aligned)
    assert est[0, 0] == 0.4 and est[0, 1] == pytest.approx(np.sqrt(4.0 - 1.5)) and est[0, 2] == 3.0


def test_bound_ratio_is_never_above_the_exact_one_with_an_exact_numerator():
    rng = np.random.default_rng(3)
    exact = rng.random((6, 30)) + 0.5
    upper = exact + rng.random((6, 30)) * 0.3  # non-candidates keep a value >= their aligned one
    cand = np.argsort(exact, axis=1)[:, :5]
    rows = np.arange(6)[:, None]
    upper[rows, cand] = exact[rows, cand]
    assert np.all(distance_ratio(upper, 20).ratio <= distance_ratio(exact, 20).ratio + 1e-15)


@pytest.mark.slow
def test_scale_bench_plumbing_on_a_small_cohort(tmp_path):
    from synthaudit_bench.alignment import run_scale

    shape = (32, 36, 30)
    training = np.stack([np.rint(head(s, shape) * 100) for s in range(50, 64)]).astype(np.int16)
    rng = np.random.default_rng(0)
    synthetic = np.stack([np.rint(head(s, shape) * 100) for s in range(80, 88)]).astype(np.int16)
    synthetic[0] = np.clip(training[3] + rng.normal(0, 1, shape), 0, 100).astype(np.int16)
    replica_of = [3] + [-1] * 7
    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=8.0, subvoxel=True, rotation_deg=(-10.0, -5.0, 5.0, 10.0),
                           rotation_axes=(0, 1, 2))
    out = run_scale(synthetic, training, replica_of, 2.0, 100.0, space, k=3, n=6, preselect_factor=2,
                    coarse_factor=2, n_per_kind=1, exact_subset=4, reference_pairs=2, threads=1, target_s=60.0,
                    log=lambda m: None)
    json.dumps(out)  # serialisable
    assert set(out["seconds"]) >= {"preselect_s", "align_s", "total_s", "workflow_aligned_ratio_s"}
    sec = out["seconds"]  # the workflow's stages, and the bench's total with the estimate the workflow skips
    assert sec["workflow_aligned_ratio_s"] == pytest.approx(sec["plain_mae_rmse_and_block_means_s"]
                                                           + sec["preselect_s"] + sec["align_s"]
                                                           + sec["matrices_and_ratio_s"], abs=0.05)
    assert sec["total_s"] == pytest.approx(sec["workflow_aligned_ratio_s"] + sec["denominator_estimate_s"], abs=0.05)
    assert out["workflow_target_met"] == (sec["workflow_aligned_ratio_s"] <= 60.0)
    assert len(out["preselect_training_left_after_bounds_mean"]) == 2  # the 4- and 2-block bounds
    kinds = [r["kind"] for r in out["detection"]["replicas"]]
    assert kinds == ["flip", "shift", "rotate"]
    for r in out["detection"]["replicas"]:
        assert r["rmse_aligned"]["closest_is_source"], r
    err = out["ratio_error_vs_exact"]["rmse_aligned"]
    assert len(err["synthetic"]) == 4 and err["never_above_exact"] and err["numerator_exact"]
    assert "rmse_aligned_estimate" in out["ratio_error_vs_exact"]
    assert len(out["coarse_to_fine_vs_full_resolution"]["pairs"]) >= 1


@pytest.mark.slow  # the bench's plumbing, 77 s of make test's 552 (2026-12-02): make test-e2e runs it
def test_scale_bench_at_k_at_least_n_is_checked_against_twice_the_candidates():
    """K >= n (issue 31 part 3): no block-mean estimate stage, and the reference aligns 2K
    candidates, so the output says whether K held the n closest aligned distances."""
    from synthaudit_bench.alignment import run_scale

    shape = (32, 36, 30)
    training = np.stack([np.rint(head(s, shape) * 100) for s in range(50, 62)]).astype(np.int16)
    rng = np.random.default_rng(0)
    synthetic = np.stack([np.rint(head(s, shape) * 100) for s in range(80, 86)]).astype(np.int16)
    synthetic[0] = np.clip(training[3] + rng.normal(0, 1, shape), 0, 100).astype(np.int16)
    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=6.0, subvoxel=True, rotation_deg=(-5.0, 5.0),
                           rotation_axes=(2,))
    out = run_scale(synthetic, training, [3] + [-1] * 5, 2.0, 100.0, space, k=4, n=4, preselect_factor=2,
                    coarse_factor=2, n_per_kind=1, exact_subset=3, reference_pairs=0, threads=1, target_s=None,
                    log=lambda m: None)
    assert out["ratio"].startswith("exact") and out["reference_candidates"] == 8
    assert out["seconds"]["denominator_estimate_s"] < 0.05  # nothing estimated: all n aligned
    err = out["ratio_error_vs_exact"]["rmse_aligned"]
    assert len(err["synthetic"]) == 3 and err["numerator_exact"]
    # more candidates aligned can only lower the denominator: the run's ratio is never above the reference's
    assert err["never_above_exact"] and err["max_abs_error"] == pytest.approx(
        max(b - a for a, b in zip(err["ratio_fast"], err["ratio_exact"])), abs=1e-15)


def test_alignment_recall_report_finds_the_k_that_holds_the_n_closest():
    from synthaudit_bench.alignment_recall import orderings_report

    aligned = np.array([1.0, 5.0, 2.0, 9.0, 3.0, 8.0])
    plain = aligned + 10.0
    good = np.array([0, 2, 4, 1, 5, 3])  # the aligned order itself
    late = np.array([1, 3, 5, 0, 2, 4])  # the 3 closest come last
    rep = orderings_report(aligned, {"good": good, "late": late}, plain, n=3, ks=[3, 6])
    assert rep["ratio_exact"] == pytest.approx(1.0 / 2.0)
    assert rep["orderings"]["good"]["k_for_recall_1"] == 3
    assert rep["orderings"]["late"]["k_for_recall_1"] == 6
    at3 = rep["orderings"]["late"]["at_k"][0]
    assert at3["recall"] == 0.0 and at3["ratio"] == pytest.approx(5.0 / np.mean([5.0, 8.0, 9.0]))
    assert rep["orderings"]["late"]["at_k"][1]["ratio_error"] == pytest.approx(0.0)


@pytest.mark.parametrize("q", [2, 3, 4])
def test_pooled_shift_stack_equals_block_means_of_shifted_volumes(q):
    a = head(9, (13, 11, 10))
    m = (2, 1, 3)
    rows = al._pooled_shift_stack(a, m, q)
    want = {tuple(al.block_mean(al._integer_shift(a, d), q).ravel().round(5))
            for d in itertools.product(*[range(-x, x + 1) for x in m])}
    got = {tuple(r.round(5)) for r in rows}
    assert len(rows) == 5 * 3 * 7 and got == want


def test_linear_shift_equals_scipy_constant_mode_borders_included():
    from scipy import ndimage

    v = np.random.default_rng(0).random((20, 17, 15)).astype(np.float32) + 1  # no zero border
    for s in [(0.3, -0.2, 0.1), (1.7, -2.5, 0.0), (-0.5, 0.5, 3.25), (0.999, -0.001, 0.0)]:
        want = ndimage.shift(v, s, order=1, mode="constant", cval=0.0)
        np.testing.assert_allclose(al._linear_shift(v, s), want, atol=1e-6)


def test_candidate_alignment_from_files_coarse_to_fine_equals_the_direct_calls():
    shape = (24, 26, 22)
    training = [head(s, shape) for s in range(60, 65)]
    syn = [al._integer_shift(np.flip(training[1], 0).copy(), (2, 0, -1)), training[3] + np.float32(0.01)]
    affine = np.diag([1.0, 1.0, 1.0, 1.0])

    def load(ref):
        kind, i = ref
        return (syn if kind == "s" else training)[i].copy(), affine

    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=4.0, subvoxel=True)
    refs_s, refs_t = [("s", i) for i in range(2)], [("t", j) for j in range(5)]
    cand, hyp, spacing, _ = al.preselect_volumes(refs_s, refs_t, load, space, 2, 2)
    assert cand[:, 0].tolist() == [1, 3]
    pairs = al.align_candidates(refs_s, refs_t, load, cand, hyp, space, spacing, factor=2)
    for i in range(2):
        direct = al.align_pair_set_coarse_to_fine(syn[i], [training[j] for j in cand[i]], space, spacing, hyp[i],
                                                  factor=2)
        assert [(p.mae, p.rmse) for p in pairs[i]] == [(p.mae, p.rmse) for p in direct]
    assert pairs[0][0].transform.flips == (0,) and pairs[0][0].rmse < 0.3 * rmse(syn[0], training[1])


def test_ranked_search_aligns_only_the_best_of_the_coarse_ranking():
    """relict.alignment.rank_candidates: the candidates are ranked by the block-mean search (its squared
    error after the hypotheses) and only the best ``keep`` are aligned at full resolution, with the
    results of the direct search on those; the training side's cache between synthetic volumes
    (align_candidates_ranked) changes nothing."""
    shape = (24, 26, 22)
    training = [head(s, shape) for s in range(70, 77)]
    syn = [al._integer_shift(np.flip(training[4], 0).copy(), (2, 0, -1)), training[2] + np.float32(0.01)]
    affine = np.diag([1.0, 1.0, 1.0, 1.0])
    space = al.SearchSpace(flip_axes=(0,), max_shift_mm=4.0, subvoxel=True, rotation_deg=(-5.0, 5.0),
                           rotation_axes=(2,))
    sp = [1.0] * 3
    read = []

    def load(ref):
        kind, i = ref
        read.append(ref)
        return (syn if kind == "s" else training)[i].copy(), affine

    refs_s, refs_t = [("s", i) for i in range(2)], [("t", j) for j in range(7)]
    cand, hyp, spacing, _ = al.preselect_volumes(refs_s, refs_t, load, space, 7, 2)
    kept, pairs = al.align_candidates_ranked(refs_s, refs_t, load, cand, hyp, space, spacing, factor=2, keep=3)
    assert kept.shape == (2, 3) and kept[0, 0] == 4 and kept[1, 0] == 2
    for i in range(2):
        targets = [training[j] for j in cand[i]]
        best, _, _ = al._coarse_search(syn[i], targets, space, sp, hyp[i], 2, refine_angle=False)
        order = np.argsort([b[0] for b in best], kind="stable")[:3]
        assert kept[i].tolist() == [int(cand[i][r]) for r in order]
        rows, direct = al.align_ranked(syn[i], targets, space, sp, hyp[i], factor=2, keep=3)
        assert rows == order.tolist()
        assert [(p.mae, p.rmse) for p in pairs[i]] == [(p.mae, p.rmse) for p in direct]
        # the kept targets aligned as the unranked search aligns them (their own set, in rank order)
        same = al.align_pair_set_coarse_to_fine(syn[i], [targets[r] for r in rows], space, sp,
                                                [hyp[i][r] for r in rows], factor=2)
        assert [(p.mae, p.rmse) for p in direct] == [(p.mae, p.rmse) for p in same]
    assert pairs[0][0].transform.flips == (0,) and pairs[0][0].rmse < 0.3 * rmse(syn[0], training[4])
    # the image level's plain values, where given, replace the identity's measurement: the same results
    plain = [np.array([[f(a, b) for b in training] for a in syn]) for f in
             (lambda a, b: float(np.mean(np.abs(a.astype(np.float64) - b))), rmse)]
    _, known = al.align_candidates_ranked(refs_s, refs_t, load, cand, hyp, space, spacing, factor=2, keep=3,
                                          plain=(plain[0], plain[1]))
    for a, b in zip(pairs, known):
        assert [v for p in a for v in (p.mae, p.rmse)] == pytest.approx([v for p in b for v in (p.mae, p.rmse)],
                                                                        rel=1e-6, abs=1e-9)
    found = al.PairResult(al.Transform(shift_vox=(1.0, 0.0, 0.0)), 2.0, 3.0)
    assert al._never_above_plain(found, syn[0], training[0], known=(1.0, 2.5)).rmse == 2.5
    assert al._never_above_plain(found, syn[0], training[0], known=(1.0, 3.5)) is found
    measured = al._never_above_plain(al.PairResult(al.Transform(), 9e9, 9e9), syn[0], training[0],
                                     known=(np.inf, np.inf))  # not computed by the image level: measured
    assert measured.rmse == pytest.approx(rmse(syn[0], training[0]), rel=1e-6)
    # keep >= K, or a grid with no coarse stage: every candidate, in candidate order
    every, _ = al.align_candidates_ranked(refs_s, refs_t, load, cand, hyp, space, spacing, factor=2, keep=None)
    np.testing.assert_array_equal(every, cand)
    every, _ = al.align_candidates_ranked(refs_s, refs_t, load, cand, hyp, space, spacing, factor=1, keep=3)
    np.testing.assert_array_equal(every, cand)


def test_full_resolution_step_drops_a_spurious_coarse_rotation(monkeypatch):
    # At the NCCT bench scale the 2 mm stage aligned 2 of 3 shifted copies with a rotation of a
    # few degrees; the 1 mm step then only refined that rotated transform. It now also tries the
    # winner's flip subset unrotated and keeps the lower exact squared error.
    sp = (1.0, 1.0, 1.0)
    src = head(5, (48, 52, 44))
    syn = al._integer_shift(src, (3, -2, 1)) + np.random.default_rng(1).normal(0, 0.01, src.shape).astype(np.float32)
    coarse = al._coarse_search

    def rotated_winner(*args, **kwargs):
        best, plain, kept = coarse(*args, **kwargs)
        return [(v, al.Transform(rotation_axis=2, angle_deg=5.0, shift_vox=t.shift_vox)) for v, t in best], plain, kept

    monkeypatch.setattr(al.ranking, "_coarse_search", rotated_winner)
    (res,) = al.align_pair_set_coarse_to_fine(syn, [src], SPACE, sp, factor=2)
    assert res.transform.rotation_axis == -1 and res.transform.angle_deg == 0
    assert res.transform.shift_vox == pytest.approx((-3.0, 2.0, -1.0), abs=0.2)
    assert res.rmse < 0.02  # the noise, not a rotated head's residual


def test_alignment_target_is_twice_the_measured_in_full_ssim(tmp_path):
    from synthaudit_bench.alignment import ssim_target_s

    bench = tmp_path / "ncct.json"
    assert ssim_target_s(bench) == 1200.0  # nothing measured: twice SSIM's own 10-minute target

    def write(engine):
        bench.write_text(json.dumps({"use_cases": {"ncct": {"measures": {"ssim": {"engine": engine}}}}}))

    write({"wall_s": 427.0, "extrapolated": False})
    assert ssim_target_s(bench) == 854.0
    write({"wall_s": 300.0, "extrapolated": True})  # a quarter of the training set scaled up
    assert ssim_target_s(bench) == 1200.0
    bench.write_text("{not json")
    assert ssim_target_s(bench) == 1200.0
