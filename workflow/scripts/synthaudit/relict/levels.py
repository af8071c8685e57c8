"""The nine measure variants of RELICT, their analysis level and how each becomes a score.

Why one table: the ranking, the evaluation, the figures and the report all need to
know whether a measure is a similarity (converted to a distance, paper 2.4), and
whether it is used through the distance ratio (image and feature level) or as its
absolute value (segmentation level, paper 2.4: the segmentation already isolates
the region of interest).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Measure:
    name: str
    level: str  # image | feature | segmentation
    label: str
    similarity: bool  # True: higher = more alike (converted to a distance)
    uses_ratio: bool  # False: the absolute distance is the replica score
    unit: str = ""


MEASURES: dict[str, Measure] = {m.name: m for m in (
    Measure("mae", "image", "MAE", False, True),
    Measure("rmse", "image", "RMSE", False, True),
    Measure("ssim", "image", "SSIM", True, True),
    # alignment-aware variants (relict.alignment): the plain measure after the best
    # transform of the augmentation group, per candidate pair (synthaudit.relict.alignment)
    Measure("mae_aligned", "image", "MAE (aligned)", False, True),
    Measure("rmse_aligned", "image", "RMSE (aligned)", False, True),
    Measure("emb_rmse", "feature", "Embedding RMSE", False, True),
    Measure("emb_cosine", "feature", "Embedding cosine", True, True),
    Measure("dice_binary", "segmentation", "Dice (binary)", True, False),
    Measure("dice_multiclass", "segmentation", "Dice (multiclass)", True, False),
    Measure("asd_binary", "segmentation", "ASD (binary)", False, False, "mm"),
    Measure("asd_multiclass", "segmentation", "ASD (multiclass)", False, False, "mm"),
)}
LEVELS = ("image", "feature", "segmentation")


def get(name: str) -> Measure:
    try:
        return MEASURES[name]
    except KeyError:
        raise KeyError(f"unknown measure {name!r}; known: {sorted(MEASURES)}") from None


def by_level(names, level: str) -> list[str]:
    return [n for n in names if get(n).level == level]


def to_distance(name: str, values: np.ndarray) -> np.ndarray:
    """Similarities become distances (paper 2.4): normalise to [0, 1], subtract from 1.

    SSIM and cosine live in [-1, 1] (s -> 1 - (s + 1) / 2); Dice lives in [0, 1]
    (d -> 1 - d, "a Dice coefficient of 0.7 was transformed into a distance of 0.3").
    """
    values = np.asarray(values, dtype=np.float64)
    m = get(name)
    if not m.similarity:
        return values.copy()
    if name.startswith("dice"):
        return 1.0 - values
    return 1.0 - (values + 1.0) / 2.0
