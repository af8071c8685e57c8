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
from synthaudit.relict import image_measures
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
# (measure, raw value, distance): RELICT 2.4's conversion of similarities
DISTANCE_CASES = [
    ("mae", 0.3, 0.3), ("rmse", 2.5, 2.5), ("ssim", 1.0, 0.0), ("ssim", -1.0, 1.0), ("ssim", 0.5, 0.25),
    ("ncc", 1.0, 0.0), ("ncc", 0.0, 0.5), ("emb_rmse", 4.0, 4.0), ("emb_cosine", 0.0, 0.5),
    ("dice_binary", 0.7, 0.3), ("dice_multiclass", 1.0, 0.0), ("asd_binary", 1.5, 1.5), ("asd_multiclass", 0.0, 0.0),
    ("mae_aligned", 0.2, 0.2), ("rmse_aligned", 0.1, 0.1),
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


def test_every_measure_has_cases():
    valued = {c[0] for c in IMAGE_CASES + FEATURE_CASES + SEG_CASES}
    assert set(registry.names()) - valued == set()
    assert set(registry.MEASURES) - {c[0] for c in DISTANCE_CASES} == set()


def test_registered_functions_resolve_and_levels_are_known():
    engines = {"image": image_measures, "feature": compare, "segmentation": segment_measures}
    for name, m in registry.MEASURES.items():
        assert m.level in registry.LEVELS
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
