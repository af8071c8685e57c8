"""The fused kernels of the coarse-to-fine alignment against the numpy definitions they replace."""

import numpy as np
import pytest

from synthaudit.relict import align_kernels as ak
from synthaudit.relict import alignment as al

SHAPES = [(14, 12, 11), (20, 9, 17)]


def _pair(shape, seed):
    rng = np.random.default_rng(seed)
    return ((rng.random(shape, dtype=np.float32) * 100).astype(np.float32),
            (rng.random(shape, dtype=np.float32) * 100).astype(np.float32))


@pytest.mark.parametrize("shape", SHAPES)
def test_shift_ssd_equals_the_squared_error_of_the_integer_shifted_volume(shape):
    a, t = _pair(shape, 1)
    shifts = [(0, 0, 0), (3, -2, 1), (-3, 2, -3), (1, 1, 1), (-1, 0, 2), (shape[0], 0, 0), (0, -shape[1] - 2, 0)]
    got = ak.shift_ssd(a, t, shifts, threads=2)
    for d, value in zip(shifts, got):
        brute = float(np.sum((al._integer_shift(a, d).astype(np.float64) - t) ** 2))
        assert value == pytest.approx(brute, rel=1e-6), d
    # shifts that leave the grid entirely: a contributes nothing, the error is |t|^2
    assert got[-1] == pytest.approx(float(np.sum(t.astype(np.float64) ** 2)), rel=1e-6)
    # the same sums whatever the thread count (planes summed in order)
    np.testing.assert_array_equal(got, ak.shift_ssd(a, t, shifts, threads=1))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("shift", [(0.3, -1.7, 2.25), (0, 0.5, 0), (-2.0, 0, 1.0), (0, 0, 0), (13.5, 0.2, 0),
                                   (-0.99, 10.5, -16.2), (1e-3, 0, 0), (2, -3, 1)])
def test_shifted_error_sums_are_those_of_apply(shape, shift):
    """The shifted voxels are _linear_shift's (or _integer_shift's) bit for bit: only the order of
    the float64 sums differs from _pair_measures on the written-out volume."""
    a, t = _pair(shape, 2)
    moved = al.apply(a, al.Transform(shift_vox=tuple(float(x) for x in shift)), [1.0, 1.0, 1.0])
    d = (moved - t).ravel()
    want = (float(np.abs(d).sum(dtype=np.float64)), float(np.square(d).sum(dtype=np.float64)))
    got = ak.shifted_error_sums(a, t, shift, threads=2)
    assert got == pytest.approx(want, rel=1e-7)  # rows summed in float32, then float64
    # where the shifted volume equals t, the sums are exactly zero: the voxels match bitwise
    assert ak.shifted_error_sums(a, moved, shift) == (0.0, 0.0)


@pytest.mark.parametrize("shift", [(0.3, -1.7, 2.25), (0, 0, 0), (-2.0, 0, 1.0), (0, 3, 0), (9.5, 0.2, -4.4)])
@pytest.mark.parametrize("axis, angle", [(0, 7.5), (1, -10.0), (2, 2.5)])
def test_masked_error_sums_are_those_of_the_rotated_overlap(shift, axis, angle):
    """A rotated candidate's errors over its overlap (issue 47): the rotated ones-volume shifted
    alike, the voxels where it reaches VALID_LEVEL, the same count and the sums of the
    written-out volumes (rows summed in float32, then float64)."""
    from synthaudit.relict.geometry import rotate

    a, t = _pair((21, 18, 16), 5)
    ones = rotate(np.ones(a.shape, np.float32), axis, angle, [1.5, 1.0, 2.0])
    tr = al.Transform(shift_vox=tuple(float(x) for x in shift))
    region = al.apply(ones, tr, [1.0, 1.0, 1.0]) >= al.VALID_LEVEL
    d = (al.apply(a, tr, [1.0, 1.0, 1.0])[region] - t[region]).ravel()
    abs_sum, sq_sum, n = ak.masked_error_sums(a, ones, t, shift, float(al.VALID_LEVEL), threads=2)
    assert n == int(region.sum()) and 0 < n < a.size
    assert (abs_sum, sq_sum) == pytest.approx((float(np.abs(d).sum(dtype=np.float64)),
                                               float(np.square(d).sum(dtype=np.float64))), rel=1e-6)
    # the voxels themselves are apply's: zero error where t is the shifted volume
    assert ak.masked_error_sums(a, ones, al.apply(a, tr, [1.0, 1.0, 1.0]), shift, float(al.VALID_LEVEL))[:2] == (0, 0)
    # an unrotated grid (ones everywhere): the shift's own overlap, the box of al.overlap
    box = al.overlap(a.shape, tr, [1.0, 1.0, 1.0])
    box = (slice(None),) * 3 if box is None else box
    d = (al.apply(a, tr, [1.0, 1.0, 1.0])[box] - t[box]).ravel()
    everywhere = ak.masked_error_sums(a, np.ones(a.shape, np.float32), t, shift, float(al.VALID_LEVEL))
    assert everywhere == pytest.approx((float(np.abs(d).sum(dtype=np.float64)),
                                        float(np.square(d).sum(dtype=np.float64)), d.size), rel=1e-6)


@pytest.mark.parametrize("shape, max_shift", [((68, 81, 54), (3, 3, 3)), ((61, 72, 60), (5, 2, 4))])
def test_the_pruned_inverse_transform_is_the_fft_s_at_the_shifts_in_range(shape, max_shift):
    """ShiftSearch's inverse at the shifts in range only (issue 47) against the whole inverse FFT,
    indexed alike: the same squared errors to float32 rounding, the same best shift."""
    search = al.ShiftSearch(shape, max_shift, workers=2)
    assert search._pruned is not None
    rng = np.random.default_rng(6)
    a = rng.normal(size=shape).astype(np.float32)
    t = np.roll(a, (2, -1, 1), axis=(0, 1, 2)) + 0.3 * rng.normal(size=shape).astype(np.float32)
    mov, fix = search.moving(a), search.fixed(t)
    pruned = search.ssd(mov, fix)
    search._pruned = None
    full = search.ssd(search.moving(a), fix)
    assert pruned.shape == full.shape == tuple(2 * m + 1 for m in max_shift)
    np.testing.assert_allclose(pruned, full, rtol=0, atol=2e-6 * float(full.max()))
    assert search.best(pruned, subvoxel=False)[0] == search.best(full, subvoxel=False)[0] == (2.0, -1.0, 1.0)
    assert not al.ShiftSearch((30, 33, 29), (5, 5, 5))._pruned_cheaper()  # 11 of 36: the FFT


def test_the_fused_normal_equations_are_refine_rigid_s_numpy_jacobian():
    """lk_normal_equations (issue 47) against the (voxels x 6) Jacobian refine_rigid builds with NumPy:
    np.gradient's differences (one-sided at the faces), -((p - c - d) x g, g), r = moved - target."""
    a, t = _pair((9, 12, 7), 7)
    centre, sp, shift = np.array([4.2, 5.5, 3.1]), np.array([3.0, 2.0, 4.5]), np.array([1.5, -2.0, 0.25])
    grad = np.stack(np.gradient(a.astype(np.float64), *sp), axis=-1).reshape(-1, 3)
    rel = (np.indices(a.shape, dtype=np.float64).reshape(3, -1).T - centre) * sp
    jac = -np.concatenate([np.cross(rel - shift, grad), grad], axis=1)
    resid = a.ravel().astype(np.float64) - t.ravel()
    h, b = ak.lk_normal_equations(a, t, centre, sp, shift, threads=2)
    np.testing.assert_allclose(h, jac.T @ jac, rtol=1e-10)
    np.testing.assert_allclose(b, jac.T @ resid, rtol=1e-9, atol=1e-9 * float(np.abs(jac.T @ resid).max()))
    h1, b1 = ak.lk_normal_equations(a, t, centre, sp, shift, threads=1)
    np.testing.assert_array_equal(h, h1)  # planes summed in order
    np.testing.assert_array_equal(b, b1)


@pytest.mark.parametrize("rotvec, shift", [((3.0, -2.0, 1.5), (1.5, -2.25, 0.5)), ((0.0, 0.0, 8.0), (0.0, 0.0, 0.0)),
                                           ((-6.0, 1.0, 0.0), (-4.0, 3.0, 2.0))])
def test_affine_error_sums_are_those_of_the_warped_overlap(rotvec, shift):
    """The joint refinement's pairs measured in one pass (issue 47) against apply (fast) and overlap:
    the same voxels compared, the same warped values."""
    a, t = _pair((19, 16, 14), 8)
    sp = [1.5, 1.0, 2.0]
    tr = al.Transform(flips=(0,), shift_vox=shift, rotvec_deg=rotvec)
    region = al.overlap(t.shape, tr, sp, fast=True)
    d = (al.apply(a, tr, sp, fast=True)[region] - t[region]).ravel()
    want = (float(np.abs(d).sum(dtype=np.float64)), float(np.square(d).sum(dtype=np.float64)), d.size)
    from synthaudit.relict.alignment.refine import _rigid_measured

    got = _rigid_measured(a, t, tr, sp)
    assert 0 < d.size < a.size
    assert (got.mae, got.rmse) == pytest.approx((want[0] / d.size, (want[1] / d.size) ** 0.5), rel=1e-6)
    from synthaudit.relict.geometry import rigid_pullback

    m, off = rigid_pullback(a.shape, tr.rotation_matrix(), np.asarray(shift) * sp, sp)
    assert ak.affine_error_sums(np.flip(a, 0), t, m, off)[2] == d.size


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_block_mean_fast_equals_block_mean(factor):
    a, _ = _pair((23, 17, 14), 3)
    fast = ak.block_mean_fast(a, factor, al._crop_start(a.shape, factor), threads=2)
    np.testing.assert_allclose(fast, al.block_mean(a, factor), rtol=2e-6)
    assert fast.dtype == np.float32 and fast.shape == tuple(n // factor for n in a.shape)


def test_kernels_refuse_volumes_of_different_shapes():
    a, t = _pair((6, 5, 4), 4)
    with pytest.raises(ValueError, match="one shape"):
        ak.shift_ssd(a, t[:5], [(0, 0, 0)])
    with pytest.raises(ValueError, match="one shape"):
        ak.shifted_error_sums(a, t[:, :4], (0.5, 0, 0))


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("angle", [-10.0, -2.5, 7.5, 90.0])
def test_affine_linear_is_scipys_rotation(axis, angle):
    """The coarse-to-fine search's rotation against geometry.rotate (SciPy's affine_transform, order 1,
    constant mode): the same float32 values, up to one rounding where a coordinate lands on a
    voxel (90 degrees), anisotropic voxels included."""
    from synthaudit.relict.geometry import rotate, rotation_pullback

    v, _ = _pair((15, 17, 13), 5)
    sp = [1.0, 1.2, 0.9]
    m, offset = rotation_pullback(v.shape, axis, angle, sp)
    got = ak.affine_linear(v, m, offset, threads=2)
    np.testing.assert_allclose(got, rotate(v, axis, angle, sp), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(al._rotate_fast(v, axis, angle, sp, workers=1), got)
    assert al._rotate_fast(v, -1, 0.0, sp) is v
