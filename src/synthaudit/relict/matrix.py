"""The all-pairs measure matrix on disk: one synthetic x training ``.npz`` per measure.

Why one owner: four engines write this file, the gather merges shards of it, and the
ranking, the alignment and the recall read it. Each used to repeat the keys and its own
id checks; a reader that trusts a stale matrix (ids of another plan) ranks the wrong
volumes silently, so every reader goes through :func:`load`, which refuses that.

Keys: ``values`` (raw measure, S x T), ``distances`` (small = alike, RELICT 2.4),
``measure``, ``synthetic_ids``, ``training_ids``, then the extras of the engine that wrote
it (``data_range``, ``extractor``, ``transform``, ``plain``, ``shards``). Written
uncompressed with ``np.savez``. The compute time (``seconds``) is kept in memory for the
logs but not written: a matrix must be the same bytes on every run (``dvc status``), and
the job's time is in its benchmark file (benchmarks/, RELICT's runtime table).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import registry
from ..io import atomic_path

KEYS = ("values", "distances", "measure", "synthetic_ids", "training_ids")
_OLD_KEYS = ("seconds",)  # written by earlier versions: read and dropped


@dataclass(eq=False)
class MeasureMatrix:
    """One measure between S synthetic (rows) and T training volumes (columns).

    ``distances`` defaults to the registry's conversion of ``values``; give it for
    matrices whose values already are distances by construction (aligned measures).
    ``path`` is where :func:`load` read it from (for messages only; never saved).
    """

    values: np.ndarray
    measure: str
    synthetic_ids: list[str]
    training_ids: list[str]
    seconds: float
    extras: dict = field(default_factory=dict)
    distances: np.ndarray | None = None
    path: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        self.measure = str(self.measure)
        self.synthetic_ids = [str(i) for i in self.synthetic_ids]
        self.training_ids = [str(i) for i in self.training_ids]
        if self.distances is None:
            self.distances = registry.to_distance(self.measure, self.values)
        shape = (len(self.synthetic_ids), len(self.training_ids))
        for name in ("values", "distances"):
            got = np.shape(getattr(self, name))
            if got != shape:
                raise ValueError(f"{self.measure}: {name} has shape {got}, but there are "
                                 f"{shape[0]} synthetic x {shape[1]} training ids")
        clash = sorted(set(self.extras) & set(KEYS + _OLD_KEYS))
        if clash:
            raise ValueError(f"{self.measure}: extras {clash} would overwrite the matrix's own keys")

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.synthetic_ids), len(self.training_ids)

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (a crash never leaves a matrix a later job would trust)."""
        with atomic_path(path) as tmp:
            np.savez(tmp, values=self.values, distances=self.distances, measure=self.measure,
                     synthetic_ids=np.array(self.synthetic_ids), training_ids=np.array(self.training_ids),
                     **self.extras)


def load(path: str | os.PathLike, synthetic_ids: Sequence[str] | None = None,
         training_ids: Sequence[str] | None = None, expected: str = "the expected ones") -> MeasureMatrix:
    """Read a matrix, checking its shapes and, when given, that its ids are the expected ones.

    ``expected`` names where the expected ids come from, for the message (e.g. another
    matrix's file). Extras are returned as numpy arrays, as stored.

    Raises:
        ValueError: Naming the file: a missing key, a shape that does not match the
            ids, or ids that differ from the expected ones (a stale matrix).
    """
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in KEYS if k not in data.files]
        if missing:
            raise ValueError(f"{path}: not a measure matrix, missing key(s) {missing}")
        stored = {k: data[k] for k in data.files}
    extras = {k: v for k, v in stored.items() if k not in KEYS + _OLD_KEYS}
    try:
        m = MeasureMatrix(values=stored["values"], measure=str(stored["measure"]),
                          synthetic_ids=stored["synthetic_ids"].tolist(), training_ids=stored["training_ids"].tolist(),
                          seconds=float(stored.get("seconds", 0.0)), extras=extras, distances=stored["distances"],
                          path=str(path))
    except ValueError as e:
        raise ValueError(f"{path}: {e}; rerun the job that wrote it") from None
    for kind, want, got in (("synthetic", synthetic_ids, m.synthetic_ids), ("training", training_ids, m.training_ids)):
        if want is not None and [str(i) for i in want] != got:
            raise ValueError(f"{path}: its {kind} ids differ from {expected} ({_difference(got, want)}); the matrix "
                             "is stale: rerun the job that wrote it (relict_gather for a sharded measure)")
    return m


def _difference(got: list[str], want: Sequence[str]) -> str:
    want = [str(i) for i in want]
    if len(got) != len(want):
        return f"{len(got)} ids, expected {len(want)}"
    i = next(k for k, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"position {i}: {got[i]!r}, expected {want[i]!r}"
