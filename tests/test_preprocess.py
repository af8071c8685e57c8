"""Tests for synthaudit.preprocess: grids, SimpleITK conversions, registration, windowing, QC."""

from __future__ import annotations

import functools

import matplotlib.image as mpimg
import numpy as np
import pytest
import SimpleITK as sitk
from scipy.spatial.transform import Rotation

from synthaudit.preprocess.intensity import window
from synthaudit.preprocess.qc import _otsu_threshold, masked_correlation, montage_png, qc_note
from synthaudit.preprocess.register import (
    from_sitk,
    reference_grid,
    register_affine,
    resample_to_grid,
    to_sitk,
    transform_points,
)

RAS_TO_LPS = np.diag([-1.0, -1.0, 1.0])


def oblique_affine(spacing, angles_deg, origin) -> np.ndarray:
    """A rotated voxel-to-RAS affine with per-axis spacing (negative spacing flips an axis)."""
    affine = np.eye(4)
    affine[:3, :3] = Rotation.from_euler("xyz", angles_deg, degrees=True).as_matrix() @ np.diag(spacing)
    affine[:3, 3] = origin
    return affine


def voxel_centres_ras(affine: np.ndarray, shape) -> np.ndarray:
    """RAS coordinates of every voxel centre, shape (*shape, 3)."""
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), axis=-1)
    return ijk @ affine[:3, :3].T + affine[:3, 3]


# --------------------------------------------------------------------------- grids


def test_reference_grid_gives_fsl_mni152_1mm_origin():
    affine = reference_grid(1.0, [182, 218, 182], [0.5, -17.5, 18.5])
    np.testing.assert_allclose(affine[:3, 3], [-90.0, -126.0, -72.0])
    np.testing.assert_allclose(affine[:3, :3], np.eye(3))


def test_reference_grid_centre_is_midpoint_of_voxel_centres():
    affine = reference_grid(2.0, [91, 109, 91], [0.5, -17.5, 18.5])
    first, last = affine[:3, 3], affine[:3, :3] @ np.array([90, 108, 90]) + affine[:3, 3]
    np.testing.assert_allclose((first + last) / 2, [0.5, -17.5, 18.5])
    np.testing.assert_allclose(np.diag(affine)[:3], 2.0)


def test_reference_grid_rejects_bad_arguments():
    with pytest.raises(ValueError):
        reference_grid(0.0, [10, 10, 10], [0, 0, 0])
    with pytest.raises(ValueError):
        reference_grid(1.0, [10, 10], [0, 0, 0])


# --------------------------------------------------------------------------- SimpleITK conversions


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_sitk_round_trip_keeps_data_and_rotated_flipped_affine(dtype):
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(7, 9, 5)) * 100).astype(dtype)
    affine = oblique_affine([-1.5, 2.0, 3.0], [10, -20, 30], [12.0, -40.0, 7.5])  # det < 0
    back, back_affine = from_sitk(to_sitk(data, affine))
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back, data)
    np.testing.assert_allclose(back_affine, affine, atol=1e-12)


def test_to_sitk_puts_each_voxel_at_its_ras_position_in_lps():
    affine = oblique_affine([1.5, 2.0, 3.0], [10, -20, 30], [12.0, -40.0, 7.5])
    img = to_sitk(np.zeros((7, 9, 5), np.float32), affine)
    for ijk in [(0, 0, 0), (6, 0, 0), (2, 8, 1), (6, 8, 4)]:
        ras = affine[:3, :3] @ np.array(ijk) + affine[:3, 3]
        np.testing.assert_allclose(img.TransformIndexToPhysicalPoint(ijk), RAS_TO_LPS @ ras, atol=1e-9)


def test_to_sitk_rejects_sheared_affine():
    affine = np.eye(4)
    affine[0, 1] = 0.3
    with pytest.raises(ValueError, match="shear"):
        to_sitk(np.zeros((4, 4, 4)), affine)


# --------------------------------------------------------------------------- resampling


def linear_field(ras: np.ndarray) -> np.ndarray:
    return 3.0 * ras[..., 0] - 2.0 * ras[..., 1] + 0.5 * ras[..., 2] + 10.0


def test_identity_resampling_reproduces_a_linear_function():
    moving_affine = oblique_affine([2.0, 2.5, 3.0], [12, -8, 20], [-60.0, -60.0, -60.0])
    moving_shape = (60, 50, 45)
    moving = linear_field(voxel_centres_ras(moving_affine, moving_shape)).astype(np.float64)
    # A small axis-aligned grid well inside the oblique one: no extrapolation needed.
    out_affine = reference_grid(1.7, [12, 14, 10], voxel_centres_ras(moving_affine, moving_shape)[30, 25, 22])
    out = resample_to_grid(moving, moving_affine, None, out_affine, (12, 14, 10))
    expected = linear_field(voxel_centres_ras(out_affine, (12, 14, 10)))
    assert out.dtype == np.float32 and out.shape == (12, 14, 10)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-3 * np.abs(expected).max())


def test_resampling_reads_moving_at_transformed_points():
    """out(x) = moving(T(x)) with T as given: checks the transform direction and transform_points."""
    moving_affine = reference_grid(2.0, [60, 60, 60], [0.0, 0.0, 0.0])
    moving = linear_field(voxel_centres_ras(moving_affine, (60, 60, 60)))
    transform = sitk.AffineTransform(3)
    transform.SetMatrix(Rotation.from_euler("z", 10, degrees=True).as_matrix().ravel().tolist())
    transform.SetTranslation((4.0, -6.0, 3.0))
    out_affine = reference_grid(3.0, [10, 10, 10], [5.0, -3.0, 2.0])
    out = resample_to_grid(moving, moving_affine, transform, out_affine, (10, 10, 10))
    mapped = transform_points(transform, voxel_centres_ras(out_affine, (10, 10, 10)).reshape(-1, 3))
    np.testing.assert_allclose(out.ravel(), linear_field(mapped), rtol=0, atol=1e-3 * np.abs(out).max())


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, bool])
def test_nearest_neighbour_resampling_keeps_label_values_and_dtype(dtype):
    rng = np.random.default_rng(1)
    values = np.array([0, 1], dtype) if dtype is bool else np.array([0, 3, 7], dtype)
    labels = np.repeat(np.repeat(np.repeat(rng.choice(values, (6, 6, 6)), 4, 0), 4, 1), 4, 2)
    moving_affine = reference_grid(1.0, labels.shape, [0.0, 0.0, 0.0])
    out_affine = oblique_affine([0.9, 1.3, 1.1], [15, 5, -25], [-10.0, -10.0, -10.0])
    out = resample_to_grid(labels, moving_affine, None, out_affine, (20, 18, 22), order=0)
    assert out.dtype == labels.dtype
    assert set(np.unique(out)) <= set(values.tolist())
    assert len(np.unique(out)) == len(values)


def test_resample_rejects_unsupported_order():
    with pytest.raises(ValueError, match="order"):
        resample_to_grid(np.zeros((4, 4, 4)), np.eye(4), None, np.eye(4), (4, 4, 4), order=3)


# --------------------------------------------------------------------------- registration


@functools.lru_cache(maxsize=1)
def mni_t1_2mm() -> tuple[np.ndarray, np.ndarray]:
    from nilearn.datasets import load_mni152_template  # ships with nilearn: no download

    template = load_mni152_template(resolution=2)
    return np.asarray(template.get_fdata(), dtype=np.float32), template.affine


def moved_head(angles_xyz_deg, translation_lps_mm, scale, seed=3):
    """MNI T1 template at 2 mm (fixed) and a copy moved by a known affine (moving).

    The moving image lives on an oblique 2.2 mm grid, has CT-like inverted contrast in
    HU (so the metric must be multi-modal) and Gaussian noise. Returns the images, the
    true transform (fixed -> moving physical points, LPS) and RAS points in the brain.
    """
    fixed, fixed_affine = mni_t1_2mm()
    centre_ras = fixed_affine[:3, :3] @ ((np.array(fixed.shape) - 1) / 2) + fixed_affine[:3, 3]

    truth = sitk.AffineTransform(3)
    matrix = scale * Rotation.from_euler("xyz", angles_xyz_deg, degrees=True).as_matrix()
    truth.SetMatrix(matrix.ravel().tolist())
    truth.SetTranslation(tuple(translation_lps_mm))
    truth.SetCenter((RAS_TO_LPS @ centre_ras).tolist())

    moving_shape = (96, 110, 92)
    moving_affine = oblique_affine([2.2, 2.2, 2.2], [4, -3, 5], [0, 0, 0])
    moving_affine[:3, 3] = centre_ras - moving_affine[:3, :3] @ ((np.array(moving_shape) - 1) / 2)
    moved = resample_to_grid(fixed, fixed_affine, truth.GetInverse(), moving_affine, moving_shape)
    rng = np.random.default_rng(seed)
    moving = np.where(moved > 0.05, 1000.0 * (1.2 - moved), -1000.0) + rng.normal(0.0, 20.0, moving_shape)

    brain = np.argwhere(fixed > 0.3 * fixed.max())
    brain_ras = brain @ fixed_affine[:3, :3].T + fixed_affine[:3, 3]
    return fixed, fixed_affine, moving.astype(np.float32), moving_affine, truth, brain_ras


@pytest.fixture(scope="module")
def moved_head_8deg():
    return moved_head([8, 0, -8], [6.0, -5.0, 6.0], 1.04)  # |t| ~ 10 mm


def assert_recovered(case, **kwargs):
    fixed, fixed_affine, moving, moving_affine, truth, brain_ras = case
    # two levels (8 and 4 mm): enough for 1 mm here, and a third of the default pyramid's time
    kwargs = {"shrink_factors": (4, 2), "smoothing_sigmas_vox": (2, 1), **kwargs}
    result = register_affine(fixed, fixed_affine, moving, moving_affine, threads=1, **kwargs)
    error = np.linalg.norm(
        transform_points(result.transform, brain_ras) - transform_points(truth, brain_ras), axis=1
    )
    p95, worst = np.percentile(error, 95), error.max()
    assert worst < 1.0 and p95 < 1.0, f"registration error in brain: p95 {p95:.3f} mm, max {worst:.3f} mm"
    return result


def test_registration_recovers_known_affine_within_1mm(moved_head_8deg):
    head = moved_head_8deg[0] > 0.05  # also exercises fixed_mask (the 15-degree test runs without)
    result = assert_recovered(moved_head_8deg, fixed_mask=head)
    assert isinstance(result.transform, sitk.AffineTransform)
    assert result.metric < 0 and result.iterations > 0 and result.stop_condition

    fixed, fixed_affine, moving, moving_affine, _, _ = moved_head_8deg
    registered = resample_to_grid(moving, moving_affine, result.transform, fixed_affine, fixed.shape)
    # Inverted contrast: a good registration correlates strongly and negatively.
    assert masked_correlation(registered, fixed, head) < -0.9


def test_registration_recovers_15deg_about_every_axis_and_20mm():
    """Beyond what gradient descent alone recovers: needs the rotation search."""
    assert_recovered(moved_head([15, -15, 15], [-20.0, 20.0, 20.0], 0.92, seed=4))


def test_registration_is_deterministic_single_threaded(moved_head_8deg):
    fixed, fixed_affine, moving, moving_affine, _, _ = moved_head_8deg
    # Determinism does not depend on the pyramid, so use a cheap one-level run.
    cheap = dict(shrink_factors=(4,), smoothing_sigmas_vox=(2,), iterations=50, threads=1)
    runs = [register_affine(fixed, fixed_affine, moving, moving_affine, **cheap) for _ in range(2)]
    params = [np.array(r.transform.GetParameters() + r.transform.GetFixedParameters()) for r in runs]
    np.testing.assert_array_equal(params[0], params[1])
    assert runs[0].metric == runs[1].metric


def test_registration_restores_sitk_thread_count():
    fixed, fixed_affine = mni_t1_2mm()
    before = sitk.ProcessObject.GetGlobalDefaultNumberOfThreads()
    register_affine(
        fixed, fixed_affine, fixed, fixed_affine,
        shrink_factors=(4,), smoothing_sigmas_vox=(2,), iterations=2, rotation_search_deg=None, threads=1,
    )
    assert sitk.ProcessObject.GetGlobalDefaultNumberOfThreads() == before


def test_registration_rejects_bad_input():
    data = np.zeros((8, 8, 8), np.float32)
    with pytest.raises(ValueError, match="one entry per level"):
        register_affine(data, np.eye(4), data, np.eye(4), shrink_factors=(4, 2), smoothing_sigmas_vox=(2,))
    ramp = np.arange(512, dtype=np.float32).reshape(8, 8, 8)
    with pytest.raises(ValueError, match="moving image is constant"):
        register_affine(ramp, np.eye(4), data - 1000, np.eye(4))  # -1000 HU clips to a flat -200


def test_transform_points_none_is_identity():
    points = np.array([[1.0, 2.0, 3.0], [-4.0, 5.0, -6.0]])
    np.testing.assert_array_equal(transform_points(None, points), points)


def test_transform_points_converts_between_ras_and_lps():
    shift = sitk.TranslationTransform(3, (1.0, 2.0, 3.0))  # LPS: +1 left, +2 posterior, +3 superior
    np.testing.assert_allclose(transform_points(shift, np.zeros((1, 3))), [[-1.0, -2.0, 3.0]])


# --------------------------------------------------------------------------- intensity


def test_window_clips_and_rescales():
    data = np.array([-1000.0, -100.0, 50.0, 200.0, 3000.0])
    np.testing.assert_allclose(window(data, -100, 200, rescale=True), [0.0, 0.0, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(window(data, -100, 200, rescale=False), [-100.0, -100.0, 50.0, 200.0, 200.0])
    assert window(data, -100, 200, rescale=True).dtype == np.float32


def test_window_with_open_sides():
    data = np.array([-5.0, 0.0, 5.0])
    np.testing.assert_array_equal(window(data, None, 1.0, rescale=False), [-5.0, 0.0, 1.0])
    np.testing.assert_array_equal(window(data, -1.0, None, rescale=False), [-1.0, 0.0, 5.0])
    np.testing.assert_array_equal(window(data, None, None, rescale=False), data)


def test_window_validates_bounds():
    with pytest.raises(ValueError, match="lower < upper"):
        window(np.zeros(3), 10, 10, rescale=False)
    with pytest.raises(ValueError, match="both"):
        window(np.zeros(3), None, 10, rescale=True)


# --------------------------------------------------------------------------- QC


def test_masked_correlation():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(10, 10, 10))
    assert masked_correlation(a, 2 * a + 1) == pytest.approx(1.0)
    assert masked_correlation(a, -a) == pytest.approx(-1.0)
    b = a.copy()
    b[5:] = rng.normal(size=(5, 10, 10))  # unrelated outside the mask
    mask = np.zeros(a.shape, bool)
    mask[:5] = True
    assert masked_correlation(a, b, mask) == pytest.approx(1.0)
    assert masked_correlation(a, b) < 0.9
    assert np.isnan(masked_correlation(a, np.ones_like(a)))
    with pytest.raises(ValueError):
        masked_correlation(a, a[:5])


def sphere(shape, centre_vox, radius_vox) -> np.ndarray:
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), axis=-1)
    return (np.linalg.norm(ijk - np.array(centre_vox), axis=-1) <= radius_vox).astype(np.float32)


def test_montage_png_writes_a_readable_image(tmp_path):
    shape = (20, 24, 18)
    template = sphere(shape, (10, 12, 9), 7)
    volumes = [(f"scan-{n:03d}", template + 0.1 * n) for n in range(3)]
    path = tmp_path / "qc" / "montage.png"
    montage_png(path, volumes, template, title="registration QC")
    image = mpimg.imread(path)
    assert path.stat().st_size > 0
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0
    assert [p.name for p in path.parent.iterdir()] == ["montage.png"]  # no temporary left behind


def test_montage_png_handles_200_volumes(tmp_path):
    shape = (12, 14, 10)
    template = sphere(shape, (6, 7, 5), 4)
    volumes = [(f"s{n}", template) for n in range(200)]
    path = tmp_path / "many.png"
    montage_png(path, volumes, template, max_volumes=12)
    height, width = mpimg.imread(path).shape[:2]
    assert 0 < width < 2000 and 0 < height < 4000


@pytest.mark.parametrize("flip_xy", [False, True], ids=["RAS-grid", "LPS-grid"])
def test_montage_png_is_radiological_with_anterior_up(tmp_path, flip_xy):
    """The outline of a left-anterior blob is drawn right of and above a right-posterior one."""
    shape = (40, 40, 30)
    affine = reference_grid(2.0, shape, [0.0, 0.0, 0.0])
    if flip_xy:  # i runs towards the patient's left, j towards posterior
        affine = np.diag([-1.0, -1.0, 1.0, 1.0]) @ affine

    def outline_centre(centre_ras):
        centre_vox = np.linalg.solve(affine[:3, :3], np.asarray(centre_ras) - affine[:3, 3])
        template = sphere(shape, centre_vox, 5)
        path = tmp_path / f"blob_{centre_ras[0]}_{centre_ras[1]}.png"
        montage_png(path, [("blob", template)], template, affine=affine)
        rgb = mpimg.imread(path)[..., :3]
        reddish = rgb[..., 0] - rgb[..., 1:].max(axis=-1) > 0.3  # grey pixels have R = G = B
        rows, cols = np.nonzero(reddish)
        assert rows.size > 0, "template outline not drawn"
        return rows.mean(), cols.mean()

    left_anterior = outline_centre((-24.0, 20.0, 0.0))  # RAS: -x = left, +y = anterior
    right_posterior = outline_centre((24.0, -20.0, 0.0))
    assert left_anterior[1] > right_posterior[1], "patient's left should be on the viewer's right"
    assert left_anterior[0] < right_posterior[0], "anterior should be up"


def test_montage_and_qc_note_of_a_constant_template_and_scan(tmp_path):
    """Without registration the "template" is the first training volume, which can be constant:
    the montage is drawn (no outline, the constant panel says so) and the QC note says why the
    correlation is NA, instead of Otsu's threshold failing on an All-NaN slice."""
    shape = (12, 14, 10)
    template = np.full(shape, 2.0, np.float32)
    spot = np.zeros(shape, np.float32)
    spot[6, 7, 5] = 4.0
    path = tmp_path / "constant.png"
    montage_png(path, [("flat", template), ("spot", spot), ("blob", sphere(shape, (6, 7, 5), 4))], template)
    assert mpimg.imread(path).shape[0] > 0
    assert _otsu_threshold(template) == 2.0 and 0.0 < _otsu_threshold(spot) < 4.0
    assert np.isnan(masked_correlation(spot, template))
    assert qc_note(2.0, 2.0, template_constant=True) == (
        "constant volume (every voxel 2): no correlation; the template (grid reference) is constant: no correlation")
    assert qc_note(0.0, 4.0, template_constant=False) == ""


def test_montage_png_rejects_shape_mismatch(tmp_path):
    with pytest.raises(ValueError, match="scan-1"):
        montage_png(tmp_path / "x.png", [("scan-1", np.zeros((4, 4, 4)))], np.zeros((5, 5, 5)))


def test_label_values_outside_the_declared_classes_are_refused_naming_the_users_file(tmp_path):
    """The user's label map is checked before any derived copy exists (and, in the labelled
    preprocessing job, before the registration), and the message names that file."""
    from synthaudit.io import save_volume
    from synthaudit.preprocess.pipeline import preprocess_label

    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    data = np.zeros((6, 7, 5), np.int16)
    data[2, 3, 2] = 3  # a third class where one (value 1) is declared
    path = tmp_path / "user_labels" / "pat1_s0.nii.gz"
    save_volume(path, data, affine)
    grid = {"shape": [6, 7, 5], "affine": affine.tolist()}
    pre = {"register": False}
    with pytest.raises(ValueError, match=r"user_labels/pat1_s0.nii.gz.*3"):
        preprocess_label(str(path), pre, grid, allowed=[1])
    # the same file passes with three declared classes, and a volume the caller read is used as is
    out = preprocess_label(str(path), pre, grid, allowed=[1, 2, 3], volume=(data.astype(np.float32), affine))
    assert out[2, 3, 2] == 3 and out.dtype == np.int16


# --------------------------------------------------------------------------- issue 29: precision for replicas
# A real scan (nibabel's anatomical.nii: a T1 brain crop, 33 x 41 x 25 at 2 mm, shipped in the
# wheel, so offline) given known rigid poses: what registration must undo consistently, since
# a replica and its source are registered independently.


@functools.lru_cache(maxsize=1)
def real_t1() -> tuple[np.ndarray, np.ndarray]:
    import os

    import nibabel as nib

    img = nib.load(os.path.join(os.path.dirname(nib.__file__), "tests", "data", "anatomical.nii"))
    return np.asarray(img.dataobj, dtype=np.float32), img.affine.copy()


def rigid_pose(rotvec_deg, shift_mm, centre_ras) -> sitk.AffineTransform:
    """The pose as registration reports it: fixed (RAS) point -> where it is in the posed scan, in LPS."""
    pose = sitk.AffineTransform(3)
    rotation = Rotation.from_rotvec(np.deg2rad(rotvec_deg)).as_matrix()
    pose.SetMatrix((RAS_TO_LPS @ rotation @ RAS_TO_LPS).ravel().tolist())
    pose.SetCenter((RAS_TO_LPS @ np.asarray(centre_ras, float)).tolist())
    pose.SetTranslation((RAS_TO_LPS @ np.asarray(shift_mm, float)).tolist())
    return pose


def posed_scan(rotvec_deg, shift_mm, seed, spacing=(2.2, 2.2, 2.6)):
    """The real T1 under a rigid pose, on an oblique anisotropic grid (as a scanner writes it), with noise.

    Returns (data, affine, truth, inner_ras): truth maps fixed points to posed-scan points;
    inner_ras are fixed voxel centres at least 4 voxels inside the crop, where the pose is
    recoverable (the crop's faces move with it, so points near them may leave the FOV).
    """
    fixed, fixed_affine = real_t1()
    centre = fixed_affine[:3, :3] @ ((np.array(fixed.shape) - 1) / 2) + fixed_affine[:3, 3]
    truth = rigid_pose(rotvec_deg, shift_mm, centre)
    shape = tuple(int(round(fov / s)) for fov, s in zip((97.0, 110.0, 88.0), spacing))  # the crop and its poses
    affine = oblique_affine(spacing, [3, -2, 4], [0, 0, 0])
    affine[:3, 3] = centre - affine[:3, :3] @ ((np.array(shape) - 1) / 2)
    data = resample_to_grid(fixed, fixed_affine, truth.GetInverse(), affine, shape, default_value=float(fixed.min()))
    data = data + np.random.default_rng(seed).normal(0, 0.01 * float(np.ptp(fixed)), shape).astype(np.float32)
    inner = np.argwhere(np.ones(fixed.shape, bool)[4:-4, 4:-4, 4:-4]) + 4
    return data, affine, truth, inner @ fixed_affine[:3, :3].T + fixed_affine[:3, 3]


SMALL = dict(shrink_factors=(2, 1), smoothing_sigmas_vox=(1, 0.5), threads=1, clip=None, rotation_search_deg=None)


def test_rigid_then_affine_recovers_a_known_pose_of_a_real_scan():
    fixed, fixed_affine = real_t1()
    moving, moving_affine, truth, inner = posed_scan([4.0, -6.0, 3.0], [5.0, -4.0, 3.0], seed=1)
    result = register_affine(fixed, fixed_affine, moving, moving_affine, **SMALL)
    error = np.linalg.norm(transform_points(result.transform, inner) - transform_points(truth, inner), axis=1)
    # below a voxel (2 mm); the affine stage's 6 extra parameters wander a little on this small noisy
    # crop (rigid alone: about 0.15 mm, next test), where 12 parameters from the start ended 2-20 mm off
    assert error.max() < 1.5, f"pose residual over the scan: mean {error.mean():.3f} mm, max {error.max():.3f} mm"
    assert error.mean() < 0.8
    # rigid first, then affine, each level reported and converged (stopped before the cap)
    assert [(lv.stage, lv.shrink) for lv in result.levels] == [("rigid", 2), ("rigid", 1), ("affine", 2), ("affine", 1)]
    assert result.converged and result.levels_at_cap == 0
    assert all(0 < lv.iterations < lv.max_iterations for lv in result.levels)
    assert 0 < result.final_step < 0.5


def test_two_poses_of_one_scan_land_in_the_same_place():
    """What replica detection needs: the registered copies of one scan under two poses agree."""
    fixed, fixed_affine = real_t1()
    mapped = []
    for rotvec, shift, seed in (([7.0, 2.0, -5.0], [8.0, 6.0, -5.0], 2), ([-5.0, 6.0, 4.0], [-6.0, -3.0, 7.0], 3)):
        moving, moving_affine, truth, inner = posed_scan(rotvec, shift, seed)
        result = register_affine(fixed, fixed_affine, moving, moving_affine, **SMALL)
        # back into the unposed scan's space through the true pose: both should give the identity
        mapped.append(transform_points(truth.GetInverse(), transform_points(result.transform, inner)))
    gap = np.linalg.norm(mapped[0] - mapped[1], axis=1)
    assert gap.max() < 1.5 and gap.mean() < 0.8, \
        f"the two poses ended {gap.mean():.3f} mm apart on average (max {gap.max():.3f})"


def test_registration_reports_levels_that_stop_at_the_cap():
    fixed, fixed_affine = real_t1()
    moving, moving_affine, _, _ = posed_scan([4.0, -6.0, 3.0], [5.0, -4.0, 3.0], seed=1)
    result = register_affine(fixed, fixed_affine, moving, moving_affine, iterations=2, **SMALL)
    assert not result.converged and result.levels_at_cap == 4
    assert all(lv.iterations == 2 and not lv.converged for lv in result.levels)


def test_rigid_stage_alone_recovers_the_pose_with_an_orthonormal_matrix():
    fixed, fixed_affine = real_t1()
    moving, moving_affine, truth, inner = posed_scan([4.0, -6.0, 3.0], [5.0, -4.0, 3.0], seed=1)
    result = register_affine(fixed, fixed_affine, moving, moving_affine, stages=("rigid",), **SMALL)
    error = np.linalg.norm(transform_points(result.transform, inner) - transform_points(truth, inner), axis=1)
    assert error.max() < 0.5, f"rigid pose residual: mean {error.mean():.3f} mm, max {error.max():.3f} mm"
    matrix = np.asarray(result.transform.GetMatrix()).reshape(3, 3)
    np.testing.assert_allclose(matrix.T @ matrix, np.eye(3), atol=1e-9)
    assert [lv.stage for lv in result.levels] == ["rigid", "rigid"]
    with pytest.raises(ValueError, match="stages"):
        register_affine(fixed, fixed_affine, moving, moving_affine, stages=("affine", "rigid"), **SMALL)


def test_compose_affine_applies_first_then_second():
    from synthaudit.preprocess.register import compose_affine

    first = sitk.Euler3DTransform((1.0, 2.0, 3.0), 0.1, -0.2, 0.3, (4.0, 5.0, 6.0))
    second = sitk.AffineTransform(3)
    second.SetMatrix([1.1, 0.1, 0.0, 0.0, 0.9, 0.05, 0.0, 0.0, 1.02])
    second.SetCenter((-3.0, 2.0, 7.0))
    second.SetTranslation((1.0, -1.0, 2.0))
    both = compose_affine(first, second)
    for p in [(10.0, -20.0, 30.0), (0.0, 0.0, 0.0), (-50.0, 40.0, 5.0)]:
        np.testing.assert_allclose(both.TransformPoint(p), second.TransformPoint(first.TransformPoint(p)), atol=1e-9)


def test_bin_to_spacing_keeps_every_block_at_its_world_position():
    from synthaudit.preprocess.pipeline import bin_to_spacing

    affine = oblique_affine([0.75, 0.75, 2.5], [10, -5, 3], [-40.0, 30.0, -20.0])
    shape = (21, 16, 9)
    data = linear_field(voxel_centres_ras(affine, shape)).astype(np.float32)
    binned, binned_affine = bin_to_spacing(data, affine, 2.0)
    assert binned.shape == (10, 8, 9)  # 0.75 mm -> 1.5 mm (blocks of 2), 2.5 mm kept; the odd edge dropped
    np.testing.assert_allclose(np.linalg.norm(binned_affine[:3, :3], axis=0), [1.5, 1.5, 2.5])
    # a linear field's block mean is its value at the block centre
    np.testing.assert_allclose(binned, linear_field(voxel_centres_ras(binned_affine, binned.shape)), rtol=1e-5)


def registration_pre(**registration) -> dict:
    reg = dict(histogram_bins=50, sampling_fraction=0.25, shrink_factors=[2, 1], smoothing_sigmas_vox=[1, 0.5],
               iterations=500, learning_rate=0.2, seed=1, target="template",
               stages=["rigid", "affine"], mask_margin_mm=0.0, clip=None,
               rotation_search_deg=None)  # a 30-degree search on 8 mm blocks needs a head, not this small crop
    reg.update(registration)
    return {"register": True, "template": "unused", "spacing_mm": 2.0, "registration": reg,
            "intensity": {"window": None, "rescale": False}}


def test_reference_target_chains_template_reference_and_scan(tmp_path):
    """registration.target: reference: every scan registered to a training scan (itself registered to the
    template once), then resampled through both transforms at once onto the template's grid."""
    from synthaudit.io import save_volume
    from synthaudit.preprocess.pipeline import (load_registration_target, preprocess_image, registration_reference,
                                                save_registration_target)

    template = real_t1()
    grid = {"affine": template[1].tolist(), "shape": list(template[0].shape)}
    scans = {}
    for name, rotvec, shift, seed in (("ref", [6.0, 0.0, -4.0], [4.0, 7.0, -3.0], 4),
                                      ("scan", [-3.0, 5.0, 6.0], [-7.0, 2.0, 5.0], 5)):
        data, affine, truth, inner = posed_scan(rotvec, shift, seed, spacing=(0.9, 0.9, 2.5))
        save_volume(tmp_path / f"{name}.nii.gz", data, affine)
        scans[name] = truth
    # rigid: the pose is what this test checks the chain for (the affine stage's small wander on this
    # crop, about 0.7 mm per registration, would blur a chaining mistake of the same size)
    pre = registration_pre(target="reference", stages=["rigid"])
    target, ref_qc = registration_reference(pre, template, str(tmp_path / "ref.nii.gz"), threads=1)
    assert ref_qc["target"] == "reference" and ref_qc["converged"]
    # binned to the output spacing (0.9 mm -> 1.8 mm in plane, 2.5 mm kept); the template's region carried along
    np.testing.assert_allclose(np.linalg.norm(target.affine[:3, :3], axis=0), [1.8, 1.8, 2.5], rtol=1e-6)
    assert target.mask is not None and 0.1 < target.mask.mean() < 0.35  # the crop: 29 % of the FOV
    paths = [tmp_path / "target.nii.gz", tmp_path / "target_mask.nii.gz", tmp_path / "target.tfm"]
    save_registration_target(target, *paths)
    loaded = load_registration_target(*paths)
    np.testing.assert_array_equal(loaded.mask, target.mask)
    np.testing.assert_allclose(loaded.to_template.GetParameters(), target.to_template.GetParameters())

    out, transform, qc = preprocess_image(str(tmp_path / "scan.nii.gz"), pre, grid, loaded, template[0], threads=1)
    error = np.linalg.norm(transform_points(transform, inner) - transform_points(scans["scan"], inner), axis=1)
    assert error.max() < 0.6, f"template -> reference -> scan: mean {error.mean():.3f} mm, max {error.max():.3f} mm"
    assert qc["correlation_to_template"] > 0.9 and qc["converged"] and qc["levels_at_cap"] == 0  # 2.5 mm slices blur
    # the template is still accepted as a plain (data, affine) pair
    _, direct, _ = preprocess_image(str(tmp_path / "scan.nii.gz"), pre, grid, template, template[0], threads=1)
    error = np.linalg.norm(transform_points(direct, inner) - transform_points(scans["scan"], inner), axis=1)
    assert error.max() < 0.6


# --------------------------------------------------------------------------- QC: same-patient consistency


def test_patient_consistency_flags_a_scan_whose_nearest_is_another_patient():
    from synthaudit.preprocess.qc import patient_consistency

    rng = np.random.default_rng(5)
    a, b, c = (rng.normal(size=(6, 6, 6)).astype(np.float32) for _ in range(3))
    vols = [a, a + 0.05, b, b + 0.05, c, a + 0.02 + b * 0.0]  # the last: patient "d", a near-copy of a
    rows = patient_consistency(vols, ["a", "a", "b", "b", "c", "d"])
    assert rows[0]["same_patient_mae"] == pytest.approx(0.05, rel=1e-5)
    assert rows[0]["other_patient_mae"] == pytest.approx(0.02, rel=1e-5)  # patient d's scan is closer
    assert rows[0]["same_patient_nearest"] is False and rows[0]["consistency_ratio"] == pytest.approx(2.5, rel=1e-4)
    assert rows[2]["same_patient_nearest"] is True and rows[2]["consistency_ratio"] < 0.1
    # one scan of its patient: nothing to compare with
    assert rows[4]["same_patient_mae"] is None and rows[4]["same_patient_nearest"] is None
    assert rows[4]["other_patient_mae"] is not None
    with pytest.raises(ValueError, match="patient ids"):
        patient_consistency(vols, ["a"])


def test_qc_columns_and_warnings_for_consistency_and_convergence():
    from synthaudit.preprocess.qc import (CONSISTENCY_COLUMNS, add_consistency, block_average,
                                          registration_warnings)

    rng = np.random.default_rng(6)
    heads = [rng.normal(size=(16, 16, 12)).astype(np.float32) for _ in range(2)]
    vols = [heads[0], heads[0] + 0.01, heads[1], 0.9 * heads[0] + 0.1 * heads[1]]  # s3: patient p2, looks like p1
    rows = [{"id": f"s{k}", "converged": k != 2} for k in range(4)]
    add_consistency(rows, vols, ["p1", "p1", "p2", "p2"], (2.0, 2.0, 2.0))
    assert all(set(CONSISTENCY_COLUMNS) <= set(r) for r in rows)
    assert [r["same_patient_nearest"] for r in rows] == [True, True, True, False]
    warnings = registration_warnings(rows)
    assert len(warnings) == 2
    assert "['s3']" in warnings[0] and "1 of 4" in warnings[0]
    assert "['s2']" in warnings[1] and "iteration cap" in warnings[1]
    assert registration_warnings([{"id": "x", "converged": True, "same_patient_nearest": None}]) == []
    # 4 mm blocks of a 2 mm grid: 2 x 2 x 2 voxels averaged
    coarse = block_average(np.arange(16 * 16 * 12, dtype=np.float32).reshape(16, 16, 12), (2.0, 2.0, 2.0))
    assert coarse.shape == (8, 8, 6)
    assert coarse[0, 0, 0] == pytest.approx(np.mean([0, 1, 12, 13, 192, 193, 204, 205]))


def test_init_writes_registration_settings_the_schema_accepts():
    """`synthaudit init`'s preprocess block carries the registration settings chosen on the benchmark,
    and the schema refuses settings the code cannot run."""
    from pathlib import Path

    import jsonschema
    import yaml

    from synthaudit.config import load_schema
    from synthaudit.config import object_defaults
    from synthaudit.preprocess.pipeline import registration_settings
    from synthaudit.workspace import Inputs, _datasets_block

    schema = load_schema()
    REGISTRATION_DEFAULTS = object_defaults("datasets.*.preprocess.registration")
    pre_schema = {**schema["$defs"]["preprocess"], "$defs": schema["$defs"]}
    for modality, clip in (("ct", [-200.0, 1500.0]), ("mri", None)):
        block = _datasets_block(Inputs(training=Path("t"), synthetic=Path("s"), modality=modality),
                                {"label_values": []}, "data/manifest.tsv", 0)
        pre = yaml.safe_load(block)["datasets"]["audit"]["preprocess"]
        jsonschema.validate(pre, pre_schema)
        reg = pre["registration"]
        assert reg["clip"] == clip
        # registration to a reference scan: chosen on the benchmark for user data (the key's default, for
        # params written before it existed, stays the template they were registered to)
        assert reg["target"] == "reference" and REGISTRATION_DEFAULTS["target"] == "template"
        assert {k: reg[k] for k in ("stages", "mask_margin_mm")} == \
            {k: REGISTRATION_DEFAULTS[k] for k in ("stages", "mask_margin_mm")}
        assert reg["shrink_factors"][-1] == 1  # the finest level at the template's own spacing
    old = dict(pre["registration"])
    for key in ("target", "stages", "mask_margin_mm", "clip"):
        old.pop(key)
    assert registration_settings({"registration": old})["stages"] == REGISTRATION_DEFAULTS["stages"]
    for bad in ({"stages": ["affine", "rigid"]}, {"target": "first_scan"}, {"mask_margin_mm": -1.0}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**pre, "registration": {**pre["registration"], **bad}}, pre_schema)


def test_qc_against_the_reference_flags_a_failed_registration_and_no_good_one(tmp_path):
    """registration.target: reference: QC correlates each registered scan with the reference scan
    (what it was registered to), and the threshold is the dataset's own outlier rule: real scans
    under known poses (up to 10 degrees, 15 mm) all pass; a scan turned front to back, which the
    registration cannot undo without a rotation search, fails (issue 43)."""
    from synthaudit.io import save_volume
    from synthaudit.preprocess.pipeline import preprocess_image, registration_reference
    from synthaudit.preprocess.qc import add_target_qc, masked_correlation, registration_warnings

    template = real_t1()
    grid = {"affine": template[1].tolist(), "shape": list(template[0].shape)}
    pre = registration_pre(target="reference", stages=["rigid"])
    rng = np.random.default_rng(43)
    names = ["ref"] + [f"s{k}" for k in range(6)] + ["turned"]
    for k, name in enumerate(names):
        axis = rng.normal(size=3)
        rotvec = axis / np.linalg.norm(axis) * rng.uniform(2.0, 10.0)
        shift = rng.normal(size=3)
        shift = shift / np.linalg.norm(shift) * rng.uniform(3.0, 15.0)
        data, affine, _, _ = posed_scan(rotvec, shift, seed=100 + k, spacing=(1.8, 1.8, 2.5))
        if name == "turned":
            data = np.ascontiguousarray(data[:, ::-1])  # face to the back: a registration gone wrong
        save_volume(tmp_path / f"{name}.nii.gz", data, affine)
    target, _ = registration_reference(pre, template, str(tmp_path / "ref.nii.gz"), threads=1)
    outs = {name: preprocess_image(str(tmp_path / f"{name}.nii.gz"), pre, grid, target, None, threads=1)
            for name in names}
    rows = [{"id": name, "registered": True} for name in names]
    correlations = [masked_correlation(outs[name][0], outs["ref"][0]) for name in names]
    threshold = add_target_qc(rows, correlations, "reference scan", outlier_mads=5.0, target_id="ref")
    verdict = {r["id"]: r["qc_pass"] for r in rows}
    assert verdict == {**{name: True for name in names[:-1]}, "turned": False}, (correlations, threshold)
    assert threshold["n"] == len(names) - 1 and threshold["rule"].startswith("median")
    assert rows[0]["qc_reason"] == "the registration target" and "correlation with the reference scan" in \
        rows[-1]["qc_reason"]
    warnings = registration_warnings(rows, threshold)
    assert len(warnings) == 1 and "['turned']" in warnings[0] and "1 of 7" in warnings[0]


def test_the_qc_threshold_is_an_outlier_rule_over_the_dataset_with_an_optional_floor():
    from synthaudit.preprocess.qc import CORRELATION_SD_FLOOR, add_target_qc, correlation_threshold

    good = [0.95, 0.96, 0.94, 0.955, 0.945, 0.96]
    t = correlation_threshold(good, outlier_mads=5.0)
    assert t["median"] == pytest.approx(0.9525) and t["robust_sd"] == CORRELATION_SD_FLOOR  # MAD below the floor
    assert t["threshold"] == pytest.approx(0.9525 - 5 * CORRELATION_SD_FLOOR)
    # real heads registered right correlate 0.5 with a template: no scan fails for it (the old fixed 0.60 failed all)
    low = [0.50, 0.52, 0.48, 0.51, 0.49, 0.53, 0.50]
    rows = [{"id": f"s{k}", "registered": True} for k in range(len(low) + 1)]
    add_target_qc(rows, low + [0.05], "template", outlier_mads=5.0)
    assert [r["qc_pass"] for r in rows] == [True] * len(low) + [False]
    # too few scans to calibrate: no rule unless a floor is set; the floor wins where it is higher
    assert correlation_threshold([0.9, 0.8], 5.0)["threshold"] is None
    assert correlation_threshold([0.9, 0.8], 5.0, min_correlation=0.6)["rule"] == "min_correlation"
    assert correlation_threshold(good, 5.0, min_correlation=0.99)["threshold"] == 0.99
    # a constant scan (NaN correlation) fails; an unregistered one gets no verdict
    rows = [{"id": f"s{k}", "registered": k < 6} for k in range(7)]
    add_target_qc(rows, good[:5] + [float("nan"), 0.1], "template", outlier_mads=5.0)
    assert [r.get("qc_pass") for r in rows] == [True] * 5 + [False, None]
    # the same-patient check fails a scan whatever its correlation
    rows = [{"id": f"s{k}", "registered": True, "same_patient_nearest": k != 0} for k in range(6)]
    add_target_qc(rows, good, "template", outlier_mads=5.0)
    assert rows[0]["qc_pass"] is False and "another patient" in rows[0]["qc_reason"]
