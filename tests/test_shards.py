"""Scatter/gather of the all-pairs measures: sharded runs equal the unsharded run."""

import numpy as np
import pytest

from synthaudit.relict.image_measures import all_pairs_image_measures
from synthaudit.relict.matrix import MeasureMatrix
from synthaudit.registry import to_distance
from synthaudit.relict.shards import gather, shard_blocks, shard_names, shard_ranges
from synthaudit.segment.measures import all_pairs_segmentation_measures


def test_shard_ranges_tile_evenly_and_clamp():
    assert shard_ranges(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_ranges(2, 5) == [(0, 1), (1, 2)]  # no empty shard
    assert shard_ranges(0, 4) == [(0, 0)]
    for n in range(0, 30):
        for k in range(1, 8):
            ranges = shard_ranges(n, k)
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="at least 1"):
        shard_ranges(5, 0)


def test_shard_names_and_blocks():
    names = shard_names(5, 7, 2, 3)
    assert names == ["s0-t0", "s0-t1", "s0-t2", "s1-t0", "s1-t1", "s1-t2"]
    assert shard_blocks("s1-t2", 5, 7, 2, 3) == (slice(2, 5), slice(5, 7))
    with pytest.raises(ValueError, match="no shard 's2-t0'"):
        shard_blocks("s2-t0", 5, 7, 2, 3)
    with pytest.raises(ValueError, match="no shard"):
        shard_blocks("bogus", 5, 7, 2, 3)


def _part(measure, values, syn_ids, train_ids, **extra):
    return MeasureMatrix(values, measure, syn_ids, train_ids, 1.5, extras=extra)


def _sharded(compute, syn, train, syn_ids, train_ids, measure, s_shards, t_shards):
    parts = []
    for name in shard_names(len(syn), len(train), s_shards, t_shards):
        rows, cols = shard_blocks(name, len(syn), len(train), s_shards, t_shards)
        parts.append(_part(measure, compute(syn[rows], train[cols]), syn_ids[rows], train_ids[cols]))
    return gather(parts[::-1], syn_ids, train_ids)  # order of arrival does not matter


@pytest.mark.parametrize("measure", ["mae", "rmse", "ssim"])
def test_sharded_image_measures_equal_unsharded(measure):
    rng = np.random.default_rng(0)
    syn = rng.random((5, 24, 22, 20), dtype=np.float32)
    train = rng.random((7, 24, 22, 20), dtype=np.float32)
    train[3] = syn[1]
    syn_ids, train_ids = [f"syn{i}" for i in range(5)], [f"tr{i}" for i in range(7)]

    def compute(s, t):
        return all_pairs_image_measures(s, t, [measure], data_range=1.0)[measure]

    whole = compute(syn, train)
    merged = _sharded(compute, syn, train, syn_ids, train_ids, measure, 2, 3)
    # MAE and SSIM: bitwise equal (every pair's sums are independent of the other volumes);
    # RMSE alone comes from float64 products whose blocking depends on the shard: 1e-12
    exact = measure != "rmse"
    np.testing.assert_allclose(merged.values, whole, rtol=0 if exact else 1e-12, atol=0)
    np.testing.assert_allclose(merged.distances, to_distance(measure, whole), rtol=0 if exact else 1e-12, atol=0)
    assert merged.training_ids == train_ids and merged.seconds == 6 * 1.5 and merged.extras["shards"] == 6
    assert merged.synthetic_ids == syn_ids and merged.measure == measure


@pytest.mark.parametrize("measure", ["dice_multiclass", "asd_multiclass", "asd_binary"])
def test_sharded_segmentation_measures_equal_unsharded(measure):
    rng = np.random.default_rng(1)
    labels = np.zeros((9, 20, 18, 16), np.uint8)
    for v in labels:
        for c in (1, 2):
            lo = rng.integers(2, 10, 3)
            v[lo[0]:lo[0] + rng.integers(3, 8), lo[1]:lo[1] + rng.integers(3, 8), lo[2]:lo[2] + 5] = c
    labels[4] = 0  # an empty map
    syn, train = labels[:4], labels[4:]
    syn_ids, train_ids = [f"s{i}" for i in range(4)], [f"t{i}" for i in range(5)]

    def compute(s, t):
        return all_pairs_segmentation_measures(list(s), list(t), [1, 2], (1.0, 1.0, 1.5), [measure])[measure]

    whole = compute(syn, train)
    merged = _sharded(compute, syn, train, syn_ids, train_ids, measure, 3, 2)
    np.testing.assert_allclose(merged.values, whole, rtol=1e-12, atol=0)


def test_gather_refuses_incomplete_overlapping_or_inconsistent_shards():
    ids_s, ids_t = ["a", "b"], ["x", "y", "z"]
    left = _part("mae", np.ones((2, 2)), ids_s, ["x", "y"], data_range=1.0)
    right = _part("mae", np.ones((2, 1)), ids_s, ["z"], data_range=1.0)
    merged = gather([left, right], ids_s, ids_t)
    assert merged.values.shape == (2, 3) and merged.extras == {"data_range": 1.0, "shards": 2}
    with pytest.raises(ValueError, match="1 pairs in more than one shard|2 pairs in more than one shard"):
        gather([left, right, _part("mae", np.ones((1, 1)), ["a"], ["x"], data_range=1.0)], ids_s, ids_t)
    with pytest.raises(ValueError, match="2 pairs missing"):
        gather([left], ids_s, ids_t)
    with pytest.raises(ValueError, match="disagree on 'data_range'"):
        gather([left, _part("mae", np.ones((2, 1)), ids_s, ["z"], data_range=2.0)], ids_s, ids_t)
    with pytest.raises(ValueError, match="'q' is not in the planned ids"):
        gather([left, _part("mae", np.ones((2, 1)), ids_s, ["q"], data_range=1.0)], ids_s, ids_t)
    with pytest.raises(ValueError, match="disagree on 'measure'"):
        gather([left, _part("rmse", np.ones((2, 1)), ids_s, ["z"], data_range=1.0)], ids_s, ids_t)
    with pytest.raises(ValueError, match="no shards"):
        gather([], ids_s, ids_t)
    # per-volume extras (the segmentation level's foreground counts) are placed by id
    top = _part("dice_binary", np.ones((1, 3)), ["b"], ["z", "x", "y"], synthetic_foreground=np.array([0]),
                training_foreground=np.array([5, 0, 7]))
    bottom = _part("dice_binary", np.ones((1, 3)), ["a"], ["z", "x", "y"], synthetic_foreground=np.array([4]),
                   training_foreground=np.array([5, 0, 7]))
    merged = gather([top, bottom], ids_s, ids_t)
    np.testing.assert_array_equal(merged.extras["synthetic_foreground"], [4, 0])
    np.testing.assert_array_equal(merged.extras["training_foreground"], [0, 7, 5])
    with pytest.raises(ValueError, match="not one entry per training volume"):
        gather([top, _part("dice_binary", np.ones((1, 3)), ["a"], ["z", "x", "y"], training_foreground=np.zeros(2))],
               ids_s, ids_t)
