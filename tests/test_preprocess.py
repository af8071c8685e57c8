"""Tests for synthaudit.preprocess: grids, SimpleITK conversions, registration, windowing, QC."""

from __future__ import annotations

import functools

import matplotlib.image as mpimg
import numpy as np
import pytest
import SimpleITK as sitk
from scipy.spatial.transform import Rotation

from synthaudit.preprocess.intensity import window
from synthaudit.preprocess.qc import masked_correlation, montage_png
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
