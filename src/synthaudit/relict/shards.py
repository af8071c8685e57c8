"""Scatter/gather of the all-pairs measures: shards of training and synthetic volumes.

Why shards: at the paper's scale an image-level measure is hours of CPU per dataset;
split into contiguous blocks of training (and synthetic) volumes, each block is an
independent Snakemake job that a cluster runs in parallel. Every pair's value is
computed from its two volumes alone (per-volume quantities are recomputed in each
shard), so the gathered matrix equals the unsharded one exactly, and the gather
only places blocks; it checks that the blocks tile the matrix in the planned order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .matrix import MeasureMatrix

_NAME = re.compile(r"^s(\d+)-t(\d+)$")


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) blocks of ``n`` items, as even as possible.

    ``shards`` is reduced to ``n`` (no empty shard); ``n == 0`` gives one empty block.
    """
    if shards < 1:
        raise ValueError(f"the number of shards must be at least 1, got {shards}")
    k = max(1, min(shards, n))
    edges = [round(i * n / k) for i in range(k + 1)]
    return list(zip(edges[:-1], edges[1:]))


def shard_names(n_synthetic: int, n_training: int, synthetic_shards: int, training_shards: int) -> list[str]:
    """Shard names ``s<i>-t<j>`` (synthetic block i, training block j)."""
    return [f"s{i}-t{j}" for i in range(len(shard_ranges(n_synthetic, synthetic_shards)))
            for j in range(len(shard_ranges(n_training, training_shards)))]


def shard_blocks(name: str, n_synthetic: int, n_training: int, synthetic_shards: int,
                 training_shards: int) -> tuple[slice, slice]:
    """The synthetic and training slices of shard ``name``."""
    match = _NAME.match(name)
    syn = shard_ranges(n_synthetic, synthetic_shards)
    train = shard_ranges(n_training, training_shards)
    if not match or int(match[1]) >= len(syn) or int(match[2]) >= len(train):
        raise ValueError(f"no shard {name!r} among {len(syn)} x {len(train)} shards")
    (s0, s1), (t0, t1) = syn[int(match[1])], train[int(match[2])]
    return slice(s0, s1), slice(t0, t1)


def gather(parts: Sequence[MeasureMatrix], synthetic_ids: Sequence[str], training_ids: Sequence[str]) -> MeasureMatrix:
    """Assemble shard results into the full (S, T) matrix.

    Args:
        parts: Per shard, its matrix; the measure and the extras (e.g. the SSIM data
            range) must agree across shards and are carried over.
        synthetic_ids, training_ids: The full, planned order of rows and columns.

    Returns:
        The merged matrix: the shards' values and distances placed, the planned ids,
        the summed ``seconds``, per-volume extras (``synthetic_*``, ``training_*``) placed
        by id, and the extra ``shards`` (their number).

    Raises:
        ValueError: When the shards do not tile the matrix exactly once, or disagree
            on the measure or a carried extra.
    """
    if not parts:
        raise ValueError("no shards to gather")
    rows = {v: i for i, v in enumerate(synthetic_ids)}
    cols = {v: i for i, v in enumerate(training_ids)}
    shape = (len(rows), len(cols))
    values = np.full(shape, np.nan)
    distances = np.full(shape, np.nan)
    covered = np.zeros(shape, np.int64)
    carried: dict = {}
    placed: dict[str, np.ndarray] = {}
    filled: dict[str, np.ndarray] = {}
    seconds = 0.0
    measure = parts[0].measure
    for k, part in enumerate(parts):
        if part.measure != measure:
            raise ValueError(f"shards disagree on 'measure': {measure!r} vs {part.measure!r}")
        try:
            r = np.array([rows[v] for v in part.synthetic_ids], dtype=np.intp)
            c = np.array([cols[v] for v in part.training_ids], dtype=np.intp)
        except KeyError as err:
            raise ValueError(f"shard {k}: volume {err.args[0]!r} is not in the planned ids") from None
        block = np.ix_(r, c)
        values[block] = part.values
        distances[block] = part.distances
        covered[block] += 1
        seconds += float(part.seconds)
        for key, value in part.extras.items():
            axis = _per_volume_axis(key)
            if axis is not None:  # one entry per row (or column) of the shard: placed by id
                index = r if axis == 0 else c
                if np.shape(value) != (len(index),):
                    raise ValueError(f"shard {k}: extra {key!r} has shape {np.shape(value)}, not one entry per "
                                     f"{'synthetic' if axis == 0 else 'training'} volume ({len(index)})")
                if key not in placed:
                    placed[key] = np.zeros(shape[axis], np.asarray(value).dtype)
                    filled[key] = np.zeros(shape[axis], bool)
                placed[key][index] = value
                filled[key][index] = True
                continue
            if key in carried and not np.array_equal(np.asarray(carried[key]), np.asarray(value)):
                raise ValueError(f"shards disagree on {key!r}: {carried[key]!r} vs {value!r}")
            carried.setdefault(key, value)
    if not np.all(covered == 1):
        missing, twice = int(np.sum(covered == 0)), int(np.sum(covered > 1))
        raise ValueError(f"the shards do not tile the {shape[0]} x {shape[1]} matrix: "
                         f"{missing} pairs missing, {twice} pairs in more than one shard")
    unfilled = sorted(key for key, done in filled.items() if not done.all())
    if unfilled:
        raise ValueError(f"per-volume extra(s) {unfilled} missing from some shards")
    return MeasureMatrix(values, measure, list(synthetic_ids), list(training_ids), seconds,
                         extras={**carried, **placed, "shards": len(parts)}, distances=distances)


def _per_volume_axis(key: str) -> int | None:
    """Extras named ``synthetic_*`` hold one value per row, ``training_*`` one per column
    (e.g. the segmentation level's foreground counts); others are shared by every shard."""
    return 0 if key.startswith("synthetic_") else 1 if key.startswith("training_") else None
