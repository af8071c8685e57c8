"""Segmentation level: Dice and ASD against known answers and the deepmind reference; the U-Net.

The reference is google-deepmind ``surface-distance`` 0.1 (the package RELICT used); tests
that need it are skipped when it is not installed. It only sees non-empty masks: on
empty ones it uses ``np.Inf``, which NumPy 2 removed.
"""

import itertools
import math

import numpy as np
import pytest

from synthaudit.segment import measures as M
from synthaudit.segment import surfaces as S

# The reference package imports scipy.ndimage functions from deprecated namespaces.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:surface_distance")

SPACING = (0.8, 1.1, 2.3)  # anisotropic, no two alike


def _ellipsoids(rng, shape, n, labels):
    """A label map of ``n`` random ellipsoids, each with a random label from ``labels``."""
    volume = np.zeros(shape, np.uint8)
    grid = np.ogrid[tuple(slice(0, s) for s in shape)]
    for _ in range(n):
        centre = rng.uniform(0, shape)
        radii = rng.uniform(1.5, 6.0, 3)
        inside = sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii)) <= 1
        volume[inside] = rng.choice(labels)
    return volume


def _ball(shape, centre, radius):
    grid = np.ogrid[tuple(slice(0, s) for s in shape)]
    return sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius**2


def _reference():
    return pytest.importorskip("surface_distance")


@pytest.fixture(params=["kd_tree", "distance_transform"])
def nearest_by(request, monkeypatch):
    """Force one of the two ways of finding nearest surfels; both must be exact."""
    monkeypatch.setattr(S, "_KD_QUERY_VOXELS", 0 if request.param == "kd_tree" else 10**9)
    return request.param


# --------------------------------------------------------------------------- Dice


def test_dice_of_cubes_with_known_overlap():
    a = np.zeros((12, 12, 12), np.uint8)
    b = np.zeros_like(a)
    a[2:8, 2:8, 2:8] = 1  # 216 voxels
    b[4:10, 2:8, 2:8] = 1  # shifted by 2 along x: overlap 4 x 6 x 6 = 144
    b[0, 0, 0] = 3  # class 3 only in b
    per_class = M.dice(a, b, [1, 2, 3])
    assert per_class[1] == 2 * 144 / (216 + 216)  # exactly 2/3
    assert per_class[2] == 1.0  # absent from both: they agree
    assert per_class[3] == 0.0
    assert M.mean_dice(per_class) == pytest.approx((2 / 3 + 1.0 + 0.0) / 3, abs=1e-15)  # every declared class
    assert M.mean_dice(M.dice(a, b, [2])) == 1.0


# --------------------------------------------------------------------------- ASD, known answers


def test_asd_of_identical_masks_is_zero():
    volume = _ellipsoids(np.random.default_rng(0), (30, 30, 20), 6, [1, 2, 3])
    assert M.average_surface_distance(volume, volume, SPACING, [1, 2, 3]) == {1: 0.0, 2: 0.0, 3: 0.0}
    assert M.hd95(volume, volume, SPACING) == 0.0


@pytest.mark.parametrize(("centre", "r1", "r2"), [
    ((20.0, 20.0, 20.0), 5.0, 8.0),
    ((20.5, 20.5, 20.5), 8.0, 12.0),
    ((20.3, 19.6, 20.1), 6.0, 15.0),
])
def test_asd_of_concentric_spheres(centre, r1, r2):
    """ASD of balls of radii r1 < r2 at 1 mm: r2 - r1 minus half a voxel, within 0.15 mm.

    The offset is the discretisation: surfels are the voxel corners next to both inside
    and outside voxels, a shell about a voxel thick around each sphere, and each distance
    runs to the near side of the other shell. Over 25 random centres and radii with
    r2 - r1 in [3, 11] the offset lay in [-0.57, -0.45] mm.
    """
    a, b = _ball((42, 42, 42), centre, r1), _ball((42, 42, 42), centre, r2)
    asd = M.average_surface_distance(a, b, (1.0, 1.0, 1.0), [1])[1]
    assert asd == pytest.approx(r2 - r1 - 0.5, abs=0.15)


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_asd_of_plates_shifted_along_anisotropic_z(shift, nearest_by):
    """Two identical 6x6x1-voxel plates at spacing (1, 1, 2) mm, ``shift`` voxels apart in z.

    A plate's surfels are two layers of corners, below and above its voxel layer, with
    mirror-image neighbourhoods and so equal areas. Everything lies in z-planes spanning
    the same x-y range, so each distance is purely along z: A's lower layer is 2 * shift mm
    from B's lower layer, A's upper layer 2 * (shift - 1) mm. Each directed average is
    therefore 2 * shift - 1 mm, and so is the ASD; HD95 is 2 * shift mm.
    """
    a = np.zeros((14, 14, 10), bool)
    a[4:10, 4:10, 3] = True
    b = np.roll(a, shift, axis=2)
    spacing = (1.0, 1.0, 2.0)
    assert M.average_surface_distance(a, b, spacing, [1])[1] == pytest.approx(2 * shift - 1, abs=1e-12)
    assert M.hd95(a, b, spacing) == 2.0 * shift
    ref = _reference()
    directed = ref.compute_average_surface_distance(ref.compute_surface_distances(a, b, spacing))
    assert directed == pytest.approx((2 * shift - 1, 2 * shift - 1), abs=1e-12)


# --------------------------------------------------------------------------- ASD, reference


@pytest.mark.parametrize("spacing", [(1.3, 0.7, 2.1), (0.5, 3.0, 1.0)])
def test_surfel_area_table_matches_reference(spacing):
    lookup = _reference().lookup_tables
    reference = lookup.create_table_neighbour_code_to_surface_area(spacing)
    kernel = lookup.ENCODE_NEIGHBOURHOOD_3D_KERNEL  # deepmind's bit for each neighbourhood voxel
    ours = M._area_table(tuple(spacing))
    for voxels in itertools.product((0, 1), repeat=8):
        cube = np.array(voxels).reshape(2, 2, 2)
        our_code = sum(int(cube[offset]) << bit for offset, bit in S._BITS)
        assert ours[our_code] == pytest.approx(reference[int((cube * kernel).sum())], rel=1e-13)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_agrees_with_reference_on_random_blobs(seed, nearest_by):
    ref = _reference()
    rng = np.random.default_rng(seed)
    a = _ellipsoids(rng, (30, 34, 20), 6, [1, 2, 3])
    b = _ellipsoids(rng, (30, 34, 20), 6, [1, 2, 3])
    ours = M.average_surface_distance(a, b, SPACING, [1, 2, 3])
    compared = 0
    for c in (1, 2, 3):
        if (a == c).any() and (b == c).any():
            distances = ref.compute_surface_distances(a == c, b == c, SPACING)
            assert ours[c] == pytest.approx(np.mean(ref.compute_average_surface_distance(distances)), abs=1e-6)
            assert M.hd95(a == c, b == c, SPACING) == pytest.approx(
                ref.compute_robust_hausdorff(distances, 95), abs=1e-6)
            compared += 1
    assert compared >= 2
    whole = ref.compute_surface_distances(a > 0, b > 0, SPACING)
    assert M.hd95(a, b, SPACING) == pytest.approx(ref.compute_robust_hausdorff(whole, 95), abs=1e-6)


def test_class_empty_in_one_map_gets_whole_image_hd95():
    a = np.zeros((30, 30, 20), np.uint8)
    a[5:12, 5:12, 4:9] = 1
    a[18:25, 15:22, 10:16] = 2
    b = np.zeros_like(a)
    b[7:14, 6:13, 5:10] = 1  # class 2 missing, class 3 missing from both
    asd = M.average_surface_distance(a, b, SPACING, [1, 2, 3])
    assert asd[2] == M.hd95(a, b, SPACING)
    assert asd[3] == 0.0  # absent from both: they agree
    assert M.mean_asd(asd) == pytest.approx((asd[1] + asd[2] + 0.0) / 3, abs=1e-15)
    ref = _reference()
    whole = ref.compute_surface_distances(a > 0, b > 0, SPACING)
    assert asd[2] == pytest.approx(ref.compute_robust_hausdorff(whole, 95), abs=1e-6)
    assert asd[2] > asd[1]  # the fallback is meant to be a large distance


def test_empty_whole_image_gives_volume_diagonal():
    a = np.zeros((30, 30, 20), np.uint8)
    a[5:12, 5:12, 4:9] = 2
    empty = np.zeros_like(a)
    diagonal = math.sqrt((30 * 0.8) ** 2 + (30 * 1.1) ** 2 + (20 * 2.3) ** 2)
    asd = M.average_surface_distance(a, empty, SPACING, [1, 2])
    assert asd[1] == 0.0
    assert asd[2] == pytest.approx(diagonal, rel=1e-15)
    assert M.hd95(empty, a, SPACING) == pytest.approx(diagonal, rel=1e-15)
    assert M.dice(a, empty, [1, 2]) == {1: 1.0, 2: 0.0}


def test_two_lesion_free_scans_agree():
    """Empty label maps (lesion-free scans): Dice 1, ASD and HD95 0, binary and multiclass; no NaN."""
    empty = np.zeros((16, 18, 12), np.uint8)
    assert M.dice(empty > 0, empty > 0, [1]) == {1: 1.0}
    assert M.average_surface_distance(empty > 0, empty > 0, SPACING, [1]) == {1: 0.0}
    assert M.hd95(empty, empty, SPACING) == 0.0
    assert M.mean_dice(M.dice(empty, empty, [1, 2, 3])) == 1.0
    assert M.mean_asd(M.average_surface_distance(empty, empty, SPACING, [1, 2, 3])) == 0.0


# --------------------------------------------------------------------------- all pairs

def assert_equals_per_pair(result, synthetic, training, labels):
    """Every all-pairs value equals the per-pair functions (relative 1e-12)."""
    for i, s in enumerate(synthetic):
        for j, t in enumerate(training):
            expected = {
                "dice_binary": M.dice(s > 0, t > 0, [1])[1],
                "dice_multiclass": M.mean_dice(M.dice(s, t, labels)),
                "asd_binary": M.average_surface_distance(s > 0, t > 0, SPACING, [1])[1],
                "asd_multiclass": M.mean_asd(M.average_surface_distance(s, t, SPACING, labels)),
            }
            for name, value in expected.items():
                np.testing.assert_allclose(result[name][i, j], value, rtol=1e-12, atol=0,
                                           err_msg=f"{name} [{i}, {j}]")



def test_all_pairs_equals_per_pair_functions(nearest_by):
    rng = np.random.default_rng(7)
    shape, labels = (24, 26, 14), [1, 2, 3]
    synthetic = [_ellipsoids(rng, shape, int(rng.integers(1, 5)), labels) for _ in range(5)]
    synthetic.append(np.zeros(shape, np.uint8))  # no foreground at all
    synthetic.append(np.where(synthetic[0] > 0, 2, 0).astype(np.float32))  # one class, float type
    training = [_ellipsoids(rng, shape, int(rng.integers(1, 5)), labels) for _ in range(4)]
    training += [np.zeros(shape, np.int16), synthetic[1].copy()]
    calls = []

    result = M.all_pairs_segmentation_measures(
        synthetic, (t for t in training), labels, SPACING, n_training=len(training),
        progress=lambda done, total: calls.append((done, total)))

    assert calls == [(j, len(training)) for j in range(1, len(training) + 1)]
    assert set(result) == set(M.MEASURES)
    assert_equals_per_pair(result, synthetic, training, labels)
    assert result["asd_multiclass"][5, 4] == 0.0 and result["dice_multiclass"][5, 4] == 1.0  # both empty
    for name, values in result.items():
        assert np.isfinite(values).all(), name
    assert result["dice_binary"][1, 5] == 1.0 and result["asd_multiclass"][1, 5] == 0.0  # identical pair


def test_all_pairs_measure_subset_and_input_errors():
    volumes = [np.zeros((8, 8, 8), np.uint8) for _ in range(2)]
    volumes[0][2:5, 2:5, 2:5] = 1
    result = M.all_pairs_segmentation_measures(volumes, iter(volumes), [1], (1, 1, 1), measures=["dice_binary"])
    assert list(result) == ["dice_binary"] and result["dice_binary"].shape == (2, 2)
    with pytest.raises(ValueError, match="unknown segmentation-level measure"):
        M.all_pairs_segmentation_measures(volumes, volumes, [1], (1, 1, 1), measures=["hausdorff"])
    with pytest.raises(ValueError, match=r"training label map 1: expected shape \(8, 8, 8\)"):
        M.all_pairs_segmentation_measures(volumes, [volumes[0], np.zeros((8, 8, 9))], [1], (1, 1, 1))
    with pytest.raises(ValueError, match="synthetic label map 0: label map has non-integer values"):
        M.all_pairs_segmentation_measures([volumes[0] * 0.5], volumes, [1], (1, 1, 1))


def _tube(shape, start, direction, length, radius, label, volume):
    """Paint a straight tube of ``label`` (voxel units) into ``volume``."""
    grid = np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"), axis=-1).astype(float)
    direction = np.asarray(direction, float) / np.linalg.norm(direction)
    t = np.clip((grid - start) @ direction, 0, length)
    inside = np.linalg.norm(grid - (np.asarray(start) + t[..., None] * direction), axis=-1) <= radius
    volume[inside] = label


def test_all_pairs_equals_per_pair_functions_on_a_larger_cohort():
    """The all-pairs paths the small cohort above does not reach, against the per-pair functions.

    More synthetic maps than one block of distance maps (8), shared surfel positions
    (a repeated map), tall blobs (many queries on one axis-2 line: lower envelope) and
    thin tubes (few: direct minimum), a label above the classes (foreground, no class),
    bool / int16 / int64 inputs, an empty map, and a dense map (the scan's second pass);
    the result must not depend on the number of threads.
    """
    rng = np.random.default_rng(11)
    shape, labels = (30, 34, 20), [1, 2, 3]
    synthetic = []
    for i in range(10):
        volume = _ellipsoids(rng, shape, int(rng.integers(1, 4)), labels)
        if i % 3 == 0:  # a tall blob: lines along axis 2 with many surfels
            c = rng.integers(6, 24, 2)
            volume[c[0] - 3:c[0] + 3, c[1] - 4:c[1] + 4, 2:18] = 2
        if i % 3 == 1:
            _tube(shape, rng.uniform(3, 8, 3), rng.normal(size=3), 25.0, 1.2, 3, volume)
        synthetic.append(volume)
    synthetic.append(synthetic[4].copy())  # shared surfel positions
    synthetic[7][2:4, 2:4, 2:4] = 9  # foreground outside the classes
    synthetic[8] = synthetic[8] > 0  # bool
    synthetic.append(np.zeros(shape, np.int64))
    training = [_ellipsoids(rng, shape, int(rng.integers(1, 5)), labels).astype(np.int16) for _ in range(4)]
    _tube(shape, (2.0, 5.0, 3.0), (1.0, 0.4, 0.3), 30.0, 1.0, 1, training[1])
    training.append(np.where(rng.random(shape) < 0.6, rng.integers(1, 4, shape), 0).astype(np.int16))  # dense
    training.append(np.zeros(shape, np.uint8))
    training.append(synthetic[0].copy())

    one = M.all_pairs_segmentation_measures(synthetic, training, labels, SPACING, threads=1)
    two = M.all_pairs_segmentation_measures(synthetic, iter(training), labels, SPACING, threads=2)
    for name in M.MEASURES:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)
    assert_equals_per_pair(one, synthetic, training, labels)
    assert one["dice_multiclass"][0, 6] == 1.0 and one["asd_multiclass"][0, 6] == 0.0


def test_distance_kernels_are_exact():
    """Distances from stacked synthetic surfels and full-grid maps equal brute force.

    Sites and queries are arbitrary corners (not real surfaces), some far outside the
    sites' box, some on the grid border, with anisotropic spacing.
    """
    from scipy.spatial.distance import cdist

    from synthaudit.segment import _kernels as K

    rng = np.random.default_rng(5)
    shape = (17, 13, 9)
    grid = tuple(n + 1 for n in shape)
    spacing = (0.7, 1.3, 2.1)

    def surface(n, lo, hi):
        flat = rng.choice(math.prod(grid), n, replace=False)
        coords = np.stack(np.unravel_index(np.sort(flat), grid), axis=1)
        coords = np.clip(coords, lo, np.subtract(hi, 1))
        coords = np.unique(coords, axis=0)
        return M._Surface(coords, rng.uniform(0.1, 2.0, len(coords)))

    stacked = [surface(n, (0, 0, 0), grid) for n in (40, 400, 3, 900, 40)] + [None]
    stacked.append(surface(200, (12, 0, 5), grid))  # queries lie far from some site boxes
    stack = M._SyntheticSurfaces(stacked, grid, spacing, lambda f, items: list(map(f, items)))
    per_line = np.diff(stack._queries[4])  # both ways of the last pass: direct minimum and envelope
    assert per_line.min() <= K._DIRECT_QUERIES < per_line.max()
    points = np.stack(np.unravel_index(np.arange(math.prod(grid)), grid), axis=1) * spacing
    for r, s in enumerate(x for x in stacked if x is not None):  # the full-grid maps
        expected = cdist(points, s.coords * spacing).min(axis=1)
        np.testing.assert_allclose(stack.maps[:, r], expected, rtol=1e-13, atol=1e-13)
    for sites in (surface(1, (0, 0, 0), grid), surface(30, (2, 3, 1), (6, 9, 4)), surface(800, (0, 0, 0), grid)):
        distances = stack.to_surface(sites)[stack.corner_of]
        stacked_coords = np.concatenate([x.coords for x in stacked if x is not None])
        expected = cdist(stacked_coords * spacing, sites.coords * spacing).min(axis=1)
        np.testing.assert_allclose(distances, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("fraction", [0.95, 0.5, 0.01, 1.0])
def test_area_percentile_matches_surface_percentile(fraction):
    from synthaudit.segment import _kernels as K

    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000, 5000):
        distances = np.round(rng.exponential(3.0, n), 1)  # many ties
        areas = rng.choice([0.25, 0.5, 0.7071, 1.0], n)
        surface = M._Surface(np.zeros((n, 3), np.int64), areas)
        assert K.area_percentile(distances, areas, fraction) == surface.percentile(distances, 100 * fraction)
    assert K.area_percentile(np.full(5, 2.5), np.ones(5), fraction) == 2.5


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32, np.int64, bool, np.float32])
def test_scan_counts_boxes_and_foreground(dtype):
    rng = np.random.default_rng(2)
    shape = (9, 11, 7)  # 693 voxels: not a whole number of 8-byte words for any type
    for density in (0.02, 0.9):  # sparse, and dense (collected in a second pass)
        data = np.where(rng.random(shape) < density, rng.integers(1, 12, shape), 0)
        data = (data > 0) if dtype is bool else data.astype(dtype)
        scanned = M._scan(M._label_array(data, None, "x"), "x", 3)
        values = np.asarray(data, np.int64)
        buckets = np.minimum(values, 4)
        np.testing.assert_array_equal(scanned.counts, np.bincount(buckets.ravel(), minlength=5))
        np.testing.assert_array_equal(scanned.fg_index, np.flatnonzero(values))
        np.testing.assert_array_equal(scanned.fg_bucket, buckets.ravel()[np.flatnonzero(values)])
        for b in range(1, 5):
            where = np.argwhere(buckets == b)
            if len(where):
                np.testing.assert_array_equal(scanned.lo[b], where.min(axis=0))
                np.testing.assert_array_equal(scanned.hi[b], where.max(axis=0))
        table = M._area_table(SPACING)
        for key, mask in ((0, values > 0), (1, values == 1), (3, values == 3)):
            ours = M._add_surfaces(scanned, [key], table).surfaces[key]
            reference = M._mask_surface(mask, table)
            if reference is None:
                assert ours is None
                continue
            np.testing.assert_array_equal(ours.coords, reference.coords)
            np.testing.assert_array_equal(ours.areas, reference.areas)


def test_all_pairs_refuses_negative_labels_and_bad_threads():
    volume = np.zeros((6, 6, 6), np.int16)
    volume[1:3, 1:3, 1:3] = 1
    negative = volume.copy()
    negative[4, 4, 4] = -2
    with pytest.raises(ValueError, match="training label map 1: label map has negative values"):
        M.all_pairs_segmentation_measures([volume], [volume, negative], [1], (1, 1, 1), threads=2)
    with pytest.raises(ValueError, match="synthetic label map 0: label map has negative values"):
        M.all_pairs_segmentation_measures([negative], [volume], [1], (1, 1, 1))
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        M.all_pairs_segmentation_measures([volume], [volume], [1], (1, 1, 1), threads=0)


def test_check_labels_names_file_and_values():
    data = np.zeros((4, 4, 4), np.float32)
    data[0, 0, :3] = [1, 3, 7]
    M.check_labels("ok.nii.gz", data, [1, 3, 7])
    with pytest.raises(ValueError, match=r"seg/s1\.nii\.gz: .*label value\(s\) 3, 7 not in the label map \[1, 2\]"):
        M.check_labels("seg/s1.nii.gz", data, [1, 2])


# --------------------------------------------------------------------------- U-Net

PATCH = (16, 16, 16)
SMALL = dict(patch_size=PATCH, batch_size=2, learning_rate=1e-2, seed=3, channels=(4, 8, 16, 32), device="cpu")


@pytest.fixture(scope="module")
def single_thread():
    """One torch thread for the U-Net tests, restored afterwards.

    A network this small gains nothing from more threads, and on a CPU shared with
    other jobs torch's waiting worker threads slow each step from ~0.05 s to seconds.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def blobs(single_thread):
    """Four 24x24x16 volumes: bright balls (label 1) on a noisy background."""
    rng = np.random.default_rng(0)
    images, labels = [], []
    for _ in range(4):
        label = np.zeros((24, 24, 16), np.uint8)
        for _ in range(2):
            label[_ball(label.shape, rng.uniform([5, 5, 4], [19, 19, 12]), rng.uniform(2.5, 4.0))] = 1
        images.append((label + rng.normal(0.0, 0.3, label.shape)).astype(np.float32))
        labels.append(label)
    return images, labels


@pytest.fixture(scope="module")
def trained(blobs):
    from synthaudit.segment import unet

    return unet.train_unet(*blobs, 1, epochs=10, **SMALL)


def test_unet_learns_and_predicts(blobs, trained):
    from synthaudit.segment import unet

    model, history = trained
    assert [h["epoch"] for h in history] == list(range(1, 11))
    losses = [h["loss"] for h in history]
    assert all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-3:]) < 0.6 * np.mean(losses[:3])
    images, labels = blobs
    predicted = unet.predict(model, images[0], PATCH, device="cpu")
    assert predicted.shape == images[0].shape and predicted.dtype == np.uint8
    assert M.dice(predicted, labels[0], [1])[1] > 0.5


def test_unet_resume_gives_the_uninterrupted_weights(blobs, tmp_path):
    from synthaudit.segment import unet
    import torch

    checkpoint = tmp_path / "ckpt.pt"
    straight, straight_history = unet.train_unet(*blobs, 1, epochs=3, **SMALL)
    _, first = unet.train_unet(*blobs, 1, epochs=2, checkpoint_path=checkpoint, **SMALL)
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 2
    resumed, history = unet.train_unet(*blobs, 1, epochs=3, checkpoint_path=checkpoint, **SMALL)
    assert history[:2] == first and len(history) == 3
    assert [h["loss"] for h in history] == [h["loss"] for h in straight_history]
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_unet_refuses_checkpoint_of_another_config(blobs, tmp_path):
    from synthaudit.segment import unet

    checkpoint = tmp_path / "ckpt.pt"
    unet.train_unet(*blobs, 1, epochs=1, checkpoint_path=checkpoint, **SMALL)
    other = {**SMALL, "learning_rate": 5e-3}
    with pytest.raises(ValueError, match=rf"{checkpoint}: checkpoint was written by another .*learning_rate"):
        unet.train_unet(*blobs, 1, epochs=2, checkpoint_path=checkpoint, **other)


def test_unet_save_and_load_model(blobs, trained, tmp_path):
    from synthaudit.segment import unet

    model, _ = trained
    path = tmp_path / "model.pt"
    config = {"n_classes": 1, "channels": list(SMALL["channels"]), "patch_size": list(PATCH)}
    unet.save_model(path, model, config)
    loaded, loaded_config = unet.load_model(path)
    assert loaded_config == config
    image = blobs[0][1]
    np.testing.assert_array_equal(unet.predict(loaded, image, PATCH, device="cpu"),
                                  unet.predict(model, image, PATCH, device="cpu"))
    with pytest.raises(ValueError, match="lacks"):
        unet.save_model(path, model, {"channels": [4, 8]})
