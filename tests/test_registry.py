"""The measure registry (synthaudit.registry): every measure's analytic cases, in tables.

Adding a measure adds rows here: its value on pairs whose answer is known, and its
distance conversion. A registered measure without rows fails ``test_every_measure_has_cases``.
"""

import numpy as np
import pytest
import yaml

from synthaudit import registry
from synthaudit.config import SCHEMA_PATH, load_schema
from synthaudit.features import compare
from synthaudit.features.compare import all_pairs_feature_measures
from synthaudit.relict import image_measures, local
from synthaudit.relict.image_measures import all_pairs_image_measures
from synthaudit.segment import measures as segment_measures
from synthaudit.segment.measures import all_pairs_segmentation_measures

SHAPE = (12, 12, 12)


def _ramp():
    x = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    return x / x.max()


def _checker():
    i, j, k = np.indices(SHAPE)
    return ((i + j + k) % 2).astype(np.float32)


def _box(lo, hi):
    v = np.zeros(SHAPE, np.int16)
    v[lo:hi, lo:hi, lo:hi] = 1
    return v


# (measure, synthetic, training, expected value): pairs whose answer is known by hand
IMAGE_CASES = [
    ("mae", _ramp, lambda: _ramp() + 0.25, 0.25),
    ("rmse", _ramp, lambda: _ramp() + 0.25, 0.25),
    ("mae", _checker, lambda: 1 - _checker(), 1.0),
    ("rmse", _checker, lambda: 1 - _checker(), 1.0),
    ("ssim", _ramp, _ramp, 1.0),
    ("ncc", _ramp, lambda: 2 * _ramp() + 3, 1.0),          # a linear intensity change is no difference
    ("ncc", _ramp, lambda: 1 - _ramp(), -1.0),             # inverted contrast
    ("ncc", _checker, lambda: np.full(SHAPE, 0.5, np.float32), 0.0),  # a constant volume correlates with nothing
    # (i + j + k) % 2 is i % 2 XOR (j + k) % 2, a balanced pattern independent of i: uncorrelated
    ("ncc", _checker, lambda: (np.indices(SHAPE)[0] % 2).astype(np.float32), 0.0),
]
FEATURE_CASES = [  # embeddings (1, D)
    ("emb_rmse", [[0.0, 0.0]], [[3.0, 4.0]], np.sqrt(12.5)),
    ("emb_cosine", [[1.0, 0.0]], [[0.0, 2.0]], 0.0),
    ("emb_cosine", [[1.0, 1.0]], [[2.0, 2.0]], 1.0),
]
SEG_CASES = [  # label maps; spacing 1 mm
    ("dice_binary", lambda: _box(2, 8), lambda: _box(2, 8), 1.0),
    ("dice_binary", lambda: _box(0, 4), lambda: _box(6, 10), 0.0),
    ("dice_multiclass", lambda: _box(2, 8), lambda: _box(2, 8), 1.0),
    ("asd_binary", lambda: _box(2, 8), lambda: _box(2, 8), 0.0),
    ("asd_multiclass", lambda: _box(2, 8), lambda: _box(2, 8), 0.0),
]

ANISO = (1.0, 1.5, 2.0)  # mm: no two axes alike
BALL_GRID = (80, 56, 44)


def _balls(*balls, spacing=ANISO, shape=BALL_GRID):
    """A label map of balls ((centre mm, radius mm, label), ...) on a grid of ``spacing``."""
    idx = np.indices(shape).astype(float) * np.asarray(spacing)[:, None, None, None]
    out = np.zeros(shape, np.int16)
    for centre, radius, label in balls:
        out[((idx - np.asarray(centre)[:, None, None, None]) ** 2).sum(0) <= radius ** 2] = label
    return out


def _plates(*plates, shape=(22, 14, 10)):
    """6 x 6 x 1-voxel plates ((x0, z, label), ...): surfaces that are planes of voxel corners."""
    out = np.zeros(shape, np.int16)
    for x0, z, label in plates:
        out[x0:x0 + 6, 4:10, z] = label
    return out


def _lens_dice(r, d):
    """Dice of two balls of radius r whose centres are d apart: the lens over one ball's volume."""
    return np.pi * (4 * r + d) * (2 * r - d) ** 2 / 12 / (4 / 3 * np.pi * r ** 3)


C = (40.0, 42.0, 44.0)
# (measure, synthetic, training, classes, spacing, expected, rel, abs): geometry whose answer is known,
# through the all-pairs engine, at anisotropic spacing and with two classes (as MONAI's surface tests)
SEG_GEOMETRY_CASES = [
    # balls of 15 mm shifted 6 mm along the 1.0 and the 2.0 mm axis: the lens (measured 0.7035, 0.7076)
    ("dice_binary", lambda: _balls((C, 15, 1)), lambda: _balls(((46.0, 42, 44), 15, 1)), [1], ANISO,
     _lens_dice(15, 6), 0.01, 0),
    ("dice_binary", lambda: _balls((C, 15, 1)), lambda: _balls(((40, 42, 50.0), 15, 1)), [1], ANISO,
     _lens_dice(15, 6), 0.01, 0),
    # two classes: concentric balls (class 1: 2 r1^3 / (r1^3 + r2^3)) and shifted balls (class 2)
    ("dice_multiclass", lambda: _balls(((22, 28, 44), 10, 1), ((58, 28, 44), 12, 2)),
     lambda: _balls(((22, 28, 44), 14, 1), ((58, 37, 44), 12, 2)), [1, 2], ANISO,
     (2 * 10 ** 3 / (10 ** 3 + 14 ** 3) + _lens_dice(12, 9)) / 2, 0.015, 0),
    # plates shifted 1 and 3 voxels along z at 2 mm: every distance runs along z, the ASD is 2 * shift - 1 mm
    ("asd_binary", lambda: _plates((8, 3, 1)), lambda: _plates((8, 4, 1)), [1], (1.0, 1.0, 2.0), 1.0, 0, 1e-12),
    ("asd_binary", lambda: _plates((8, 3, 1)), lambda: _plates((8, 6, 1)), [1], (1.0, 1.0, 2.0), 5.0, 0, 1e-12),
    ("asd_multiclass", lambda: _plates((2, 3, 1), (14, 3, 2)), lambda: _plates((2, 4, 1), (14, 5, 2)), [1, 2],
     (1.0, 1.0, 2.0), (1.0 + 3.0) / 2, 0, 1e-12),
    # concentric balls at 1 mm: r2 - r1 minus half a voxel (the surfel shells; tests/test_segment.py)
    ("asd_binary", lambda: _balls(((21, 21, 21), 8, 1), spacing=(1.0, 1.0, 1.0), shape=(42, 42, 42)),
     lambda: _balls(((21, 21, 21), 12, 1), spacing=(1.0, 1.0, 1.0), shape=(42, 42, 42)), [1], (1.0, 1.0, 1.0),
     12 - 8 - 0.5, 0, 0.15),
]
LOCAL_CASES = [  # (measure, synthetic, training, value of every block): blocks of 6 voxels on the 12^3 grid
    ("block_mse", _ramp, lambda: _ramp() + 0.25, 0.0625),
    ("block_mae", _ramp, lambda: _ramp() + 0.25, 0.25),
    ("block_mse", _checker, lambda: 1 - _checker(), 1.0),
    ("block_mae", _checker, lambda: 1 - _checker(), 1.0),
    ("block_mse", _ramp, _ramp, 0.0),
]
# (measure, raw value, distance): RELICT 2.4's conversion of similarities
DISTANCE_CASES = [
    ("mae", 0.3, 0.3), ("rmse", 2.5, 2.5), ("ssim", 1.0, 0.0), ("ssim", -1.0, 1.0), ("ssim", 0.5, 0.25),
    ("ncc", 1.0, 0.0), ("ncc", 0.0, 0.5), ("emb_rmse", 4.0, 4.0), ("emb_cosine", 0.0, 0.5),
    ("dice_binary", 0.7, 0.3), ("dice_multiclass", 1.0, 0.0), ("asd_binary", 1.5, 1.5), ("asd_multiclass", 0.0, 0.0),
    ("mae_aligned", 0.2, 0.2), ("rmse_aligned", 0.1, 0.1), ("block_mse", 0.3, 0.3), ("block_mae", 0.3, 0.3),
]


@pytest.mark.parametrize("measure,synthetic,training,expected", IMAGE_CASES)
def test_image_cases(measure, synthetic, training, expected):
    value = all_pairs_image_measures(synthetic()[None], training()[None], [measure], data_range=1.0)[measure]
    assert value.shape == (1, 1)
    np.testing.assert_allclose(value[0, 0], expected, atol=1e-6)


@pytest.mark.parametrize("measure,synthetic,training,expected", FEATURE_CASES)
def test_feature_cases(measure, synthetic, training, expected):
    value = all_pairs_feature_measures(np.array(synthetic), np.array(training), [measure])[measure]
    np.testing.assert_allclose(value[0, 0], expected, atol=1e-12)


@pytest.mark.parametrize("measure,synthetic,training,expected", SEG_CASES)
def test_segmentation_cases(measure, synthetic, training, expected):
    value = all_pairs_segmentation_measures([synthetic()], [training()], [1], (1.0, 1.0, 1.0), [measure])[measure]
    np.testing.assert_allclose(value[0, 0], expected, atol=1e-9)


@pytest.mark.parametrize("measure,value,distance", DISTANCE_CASES)
def test_distance_cases(measure, value, distance):
    np.testing.assert_allclose(registry.to_distance(measure, [value]), [distance], atol=1e-15)


@pytest.mark.parametrize("measure,synthetic,training,classes,spacing,expected,rel,tol", SEG_GEOMETRY_CASES)
def test_segmentation_geometry_cases(measure, synthetic, training, classes, spacing, expected, rel, tol):
    value = all_pairs_segmentation_measures([synthetic()], [training()], classes, spacing, [measure])[measure]
    assert value[0, 0] == pytest.approx(expected, rel=rel, abs=tol)


@pytest.mark.parametrize("measure,synthetic,training,expected", LOCAL_CASES)
def test_local_cases(measure, synthetic, training, expected):
    grid = local.BlockGrid.from_mm(SHAPE, (1.0, 1.0, 1.0), 6.0)
    value = local.all_pairs_block_distances(synthetic()[None], [training()], grid, measure)
    assert value.shape == (1, 1, grid.n_blocks)
    np.testing.assert_allclose(value, expected, atol=1e-6)


def test_every_measure_has_cases():
    valued = {c[0] for c in IMAGE_CASES + FEATURE_CASES + SEG_CASES + LOCAL_CASES}
    assert (set(registry.names()) | set(registry.names(registry.LOCAL))) - valued == set()
    assert set(registry.names(registry.LOCAL)) & set(registry.names()) == set()  # not chosen in relict.measures
    assert set(registry.MEASURES) - {c[0] for c in DISTANCE_CASES} == set()


def test_registered_functions_resolve_and_levels_are_known():
    engines = {"image": image_measures, "feature": compare, "segmentation": segment_measures, registry.LOCAL: local}
    for name, m in registry.MEASURES.items():
        assert m.level in (*registry.LEVELS, registry.LOCAL)
        if m.implementation not in ("fused", "alignment"):
            assert callable(getattr(engines[m.level], m.implementation)), name
        assert (m.aligned_from is not None) == (m.implementation == "alignment")
    with pytest.raises(KeyError, match="psnr"):
        registry.get("psnr")
    with pytest.raises(ValueError, match="feature-level"):
        registry.check(["mae"], "feature")


def test_pairwise_measure_beside_the_fused_passes():
    """A registered function sees each streamed training volume once; fused values are unchanged."""
    rng = np.random.default_rng(3)
    syn = rng.random((3, *SHAPE)).astype(np.float32)
    train = rng.random((4, *SHAPE)).astype(np.float32)
    seen = []

    def stream():
        for t in train:
            seen.append(1)
            yield t

    both = all_pairs_image_measures(syn, stream(), ["ncc", "mae", "ssim"], data_range=1.0, n_training=4)
    assert len(seen) == 4 and list(both) == ["ncc", "mae", "ssim"]
    alone = all_pairs_image_measures(syn, train, ["mae", "ssim"], data_range=1.0)
    np.testing.assert_array_equal(both["mae"], alone["mae"])
    np.testing.assert_array_equal(both["ssim"], alone["ssim"])
    reference = [[np.corrcoef(s.ravel(), t.ravel())[0, 1] for t in train] for s in syn]
    np.testing.assert_allclose(both["ncc"], reference, atol=1e-12)
    only = all_pairs_image_measures(syn, train, ["ncc"], data_range=1.0)
    np.testing.assert_array_equal(only["ncc"], both["ncc"])


def test_schema_takes_its_measure_names_from_the_registry():
    raw = yaml.safe_load(open(SCHEMA_PATH))

    def enums(node):
        if isinstance(node, dict):
            if "enum" in node:
                yield node["enum"]
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)

    # an enum's values may be lists (registration.stages); only strings can name a measure
    written = [e for e in enums(raw) if {v for v in e if isinstance(v, str)} & set(registry.MEASURES)]
    assert written == [], f"the schema lists measure names itself: {written}"
    defs = load_schema()["$defs"]
    assert defs["measure"]["enum"] == registry.names()
    assert defs["alignable_measure"]["enum"] == ["mae", "rmse"]
    assert "dice_binary" not in defs["ranked_measure"]["enum"] and "ncc" in defs["ranked_measure"]["enum"]


def test_a_new_measure_at_any_level_is_a_row_and_a_function(monkeypatch):
    """No engine branches on measure names: a registry row naming a function of the level's
    module is all an engine needs (here an L1 embedding distance, a foreground overlap fraction,
    a block RMSE and a max-difference image measure, added for the test only)."""
    rows = [registry.Measure("emb_l1", "feature", "Embedding L1", None, True, "embedding_l1"),
            registry.Measure("fg_overlap", "segmentation", "Overlap", (0.0, 1.0), False, "column_fg_overlap"),
            registry.Measure("block_rmse", registry.LOCAL, "Block RMSE", None, True, "block_rmse"),
            registry.Measure("maxdiff", "image", "Max difference", None, True, "maxdiff")]
    for m in rows:
        monkeypatch.setitem(registry.MEASURES, m.name, m)
    monkeypatch.setattr(compare, "embedding_l1",
                        lambda pair: np.abs(pair.rows.a64[:, None, :] - pair.b64[None]).sum(-1), raising=False)

    def column_fg_overlap(c):
        binary, _ = c.overlaps
        return binary / np.maximum(c.syn_whole, 1)

    column_fg_overlap.needs = ("overlaps",)
    monkeypatch.setattr(segment_measures, "column_fg_overlap", column_fg_overlap, raising=False)
    monkeypatch.setattr(local, "block_rmse", lambda a, q, grid: np.sqrt(local.block_mse(a, q, grid)), raising=False)
    monkeypatch.setattr(local, "LOCAL_MEASURES", (*local.LOCAL_MEASURES, "block_rmse"))
    monkeypatch.setattr(image_measures, "maxdiff", lambda syn, t: np.abs(syn - t[None]).reshape(len(syn), -1).max(1),
                        raising=False)

    feat = all_pairs_feature_measures(np.array([[0.0, 1.0]]), np.array([[3.0, -1.0], [0.0, 1.0]]), ["emb_l1"])
    np.testing.assert_allclose(feat["emb_l1"], [[5.0, 0.0]])
    seg = all_pairs_segmentation_measures([_box(2, 8)], [_box(2, 8), _box(5, 8)], [1], (1.0, 1.0, 1.0),
                                          ["fg_overlap", "dice_binary"])
    np.testing.assert_allclose(seg["fg_overlap"], [[1.0, 27 / 216]])
    np.testing.assert_allclose(seg["dice_binary"], [[1.0, 2 * 27 / (216 + 27)]])
    grid = local.BlockGrid.from_mm(SHAPE, (1.0, 1.0, 1.0), 6.0)
    blocks = local.all_pairs_block_distances(_ramp()[None], [_ramp() + 0.5], grid, "block_rmse")
    np.testing.assert_allclose(blocks, 0.5, atol=1e-6)
    img = all_pairs_image_measures(_ramp()[None], (_ramp() + 0.25)[None], ["maxdiff", "mae"], data_range=1.0)
    np.testing.assert_allclose(img["maxdiff"], [[0.25]], atol=1e-6)
