"""Labelled embeddings, the validation split, and one common scale for every set.

Why one scale: the CVAE paper's code z-scored the original and the anonymised features
with their own statistics before measuring the nearest-neighbour distance D, which
hides exactly the shrinkage (k-Same) or inflation a comparison should show. Here one
:class:`CommonScale` is fitted on the real training features and applied unchanged to
the training, validation, test and every anonymised set.

Why an optional projection: RELICT's embedding has 131,072 dimensions while the paper's
CVAE models 768-d DINOv2 vectors. A seeded Gaussian random projection is data-free (it
reveals nothing about the training set, and a recipient recreates it from the seed and
the dimension), keeps Euclidean distances to within a few per cent
(Johnson-Lindenstrauss), and works for any extractor.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class LabelError(ValueError):
    """Class labels missing, unreadable or unusable; the message names the file and ids."""


def _preview(items: Sequence[str], n: int = 5) -> str:
    items = list(items)
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def read_labels(path: str | Path, column: str, ids: Sequence[str], what: str) -> tuple[list[str], list[str] | None]:
    """Class label (and optional ``split``) of every id, from a TSV with an ``id`` column.

    Args:
        path: Tab-separated file; a manifest works (it has ``id``), so does any table
            with ``id`` and the label column.
        column: Name of the label column.
        ids: The embedding ids that need a label, in order.
        what: Which set the ids belong to (for messages).

    Returns:
        ``(labels, splits)``: labels aligned with ``ids``; ``splits`` the values of an
        optional ``split`` column (``train`` / ``val``), else None.

    Raises:
        LabelError: The file or a column is missing, or an id has no (or an empty) label.
    """
    path = Path(path)
    if not path.is_file():
        raise LabelError(f"class labels: {path} not found")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    columns = list(rows[0]) if rows else []
    if "id" not in columns or column not in columns:
        missing = [c for c in ("id", column) if c not in columns]
        raise LabelError(f"class labels: {path} has no column(s) {missing}; its columns are {columns}")
    table = {r["id"]: r for r in rows}
    absent = [i for i in ids if i not in table]
    if absent:
        raise LabelError(f"class labels: {len(absent)} {what} volume(s) have no row in {path}: {_preview(absent)}")
    labels = [(table[i][column] or "").strip() for i in ids]
    empty = [i for i, lab in zip(ids, labels) if not lab]
    if empty:
        raise LabelError(f"class labels: {len(empty)} {what} volume(s) have an empty {column!r} in {path}: "
                         f"{_preview(empty)}")
    splits = None
    if "split" in columns:
        splits = [(table[i]["split"] or "train").strip() for i in ids]
        bad = sorted(set(splits) - {"train", "val"})
        if bad:
            raise LabelError(f"class labels: column 'split' of {path} may hold 'train' or 'val', found {bad}")
    return labels, splits


def validation_mask(labels: Sequence[str], patients: Sequence[str], splits: Sequence[str] | None, fraction: float,
                    seed: int) -> np.ndarray:
    """The validation patients of a training set: a ``split`` column's ``val`` rows when the
    labels give one, else :func:`validation_split` (stratified by class, whole patients).

    They are held back from every method (original, k-Same, CVAE) and early-stop the CVAE
    and every probe (Di Salvo et al.'s protocol)."""
    if splits is not None and "val" in splits:
        return np.array([s == "val" for s in splits])
    y, _ = encode(labels)
    return validation_split(y, patients, fraction, seed)


def label_problems(train_labels: Sequence[str], test_labels: Sequence[str], k_values: Sequence[int],
                   validation: Sequence[bool] | None = None) -> list[str]:
    """Why these labels cannot support the comparison (empty when they can).

    Checked before any training: at least two training classes, test classes among them
    and at least two of them (an AUC needs both), and every class with at least k
    anonymised training vectors (the training set without its ``validation`` rows) for
    each k of k-Same.
    """
    counts = Counter(train_labels)
    fit_counts = counts if validation is None else Counter(
        lab for lab, v in zip(train_labels, validation) if not v)
    out = []
    if len(counts) < 2:
        out.append(f"the training labels hold a single class {sorted(counts)}; a classifier needs two")
    unknown = sorted(set(test_labels) - set(counts))
    if unknown:
        out.append(f"test (held-out) label(s) {unknown} do not occur in the training set {sorted(counts)}")
    if len(set(test_labels)) < 2:
        out.append(f"the held-out (test) scans hold a single class {sorted(set(test_labels))}: the AUC is undefined; "
                   "hold out patients of every class")
    for k in sorted(k_values):
        small = {c: fit_counts.get(c, 0) for c in sorted(counts) if fit_counts.get(c, 0) < k}
        if small:
            where = "" if validation is None else " outside the validation patients"
            out.append(f"k-Same with k={k}: class(es) {small} have fewer than {k} training vectors{where}; "
                       "lower or remove that k (anonymise.k_same)")
    return out


def encode(labels: Sequence[str], classes: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Integer codes of ``labels`` and the sorted class names (or the given ``classes``).

    Raises:
        LabelError: A label is not one of ``classes``, or there are fewer than two classes.
    """
    classes = sorted(set(labels)) if classes is None else list(classes)
    if len(classes) < 2:
        raise LabelError(f"a classifier needs at least two classes, the labels hold {classes}")
    index = {c: k for k, c in enumerate(classes)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise LabelError(f"label(s) {unknown} are not among the training classes {classes}")
    return np.array([index[lab] for lab in labels], dtype=np.int64), classes


def validation_split(labels: np.ndarray, groups: Sequence[str], fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of a validation set: whole groups (patients), stratified by class.

    Each class contributes ``round(fraction x its groups)`` groups (at least one when
    it has two or more), so a patient's scans never sit on both sides and every class
    is validated. A group's class is its most frequent label.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"validation fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[str(g)].append(i)
    by_class: dict[int, list[str]] = defaultdict(list)
    for g, rows in sorted(members.items()):
        by_class[Counter(labels[rows].tolist()).most_common(1)[0][0]].append(g)
    mask = np.zeros(len(labels), dtype=bool)
    for c in sorted(by_class):
        gs = by_class[c]
        n_val = int(round(fraction * len(gs)))
        n_val = max(n_val, 1) if len(gs) >= 2 else 0
        for g in rng.permutation(gs)[:n_val]:
            mask[members[g]] = True
    if mask.all() or not mask.any():
        raise LabelError(f"no validation split possible: {len(members)} patient(s) in {len(by_class)} class(es); "
                         "give a 'split' column with 'val' rows in the labels file")
    return mask


@dataclass
class CommonScale:
    """Optional seeded random projection, then z-scoring with the training statistics."""

    mean: np.ndarray
    std: np.ndarray
    input_dim: int
    projection_dim: int | None
    projection_seed: int

    @classmethod
    def fit(cls, training: np.ndarray, projection_dim: int | None, projection_seed: int) -> CommonScale:
        x = np.asarray(training, np.float64)
        scale = cls(np.zeros(0), np.ones(0), x.shape[1], projection_dim, projection_seed)
        if projection_dim is not None and projection_dim >= x.shape[1]:
            scale.projection_dim = None  # nothing to reduce
        projected = scale._project(x)
        scale.mean = projected.mean(axis=0)
        std = projected.std(axis=0)
        scale.std = np.where(std > 1e-12 * max(float(std.max(initial=0.0)), 1.0), std, 1.0)
        return scale

    def matrix(self) -> np.ndarray:
        """The (input_dim, projection_dim) Gaussian matrix, scaled by 1/sqrt(projection_dim)."""
        cached = self.__dict__.get("_matrix")
        if cached is None or cached.shape != (self.input_dim, self.projection_dim):
            rng = np.random.default_rng(self.projection_seed)
            cached = (rng.standard_normal((self.input_dim, self.projection_dim), dtype=np.float32)
                      / np.float32(np.sqrt(self.projection_dim)))
            self.__dict__["_matrix"] = cached
        return cached

    def _project(self, x: np.ndarray) -> np.ndarray:
        if self.projection_dim is None:
            return np.asarray(x, np.float64)
        return (np.asarray(x, np.float32) @ self.matrix()).astype(np.float64)

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"features of shape {x.shape}: this scale was fitted on {self.input_dim}-d features")
        return (self._project(x) - self.mean) / self.std

    def unscale(self, z: np.ndarray) -> np.ndarray:
        """Vectors on this scale back on the extractor's own feature scale (the z-scoring
        undone; with a projection, in the projected space, whose Euclidean distances are the
        raw features' within a few per cent). Di Salvo et al.'s D on the raw features."""
        return np.asarray(z, np.float64) * self.std + self.mean

    def describe(self) -> dict:
        """What a recipient needs to put its own features on this scale (no training rows)."""
        return {"input_dim": self.input_dim, "projection_dim": self.projection_dim,
                "projection_seed": self.projection_seed, "projection": "gaussian / sqrt(dim), numpy default_rng",
                "mean": self.mean.tolist(), "std": self.std.tolist()}
